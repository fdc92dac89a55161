//! ringmq-store: an Apache RocketMQ-compatible message store (CommitLog, ConsumeQueue,
//! IndexFile, checkpoint, `abort`, `config/*.json`) that opens directories written by
//! RocketMQ 5.x and vice versa, run as a pipeline of stage threads:
//!
//! - [`append`]: the single owner of the CommitLog tail (queue offsets, patching, copying,
//!   roll-over), fed by producers over a bounded queue; in mmap mode it writes each batch
//!   with one pwritev into the page cache that the segments' read-only mappings share
//!   (see [`mapped_file::MapMode`] for why not through the mapping);
//! - [`flush`]: GroupCommit for SYNC_FLUSH and the timed ASYNC_FLUSH, in mmap mode (msync)
//!   or direct mode ([`direct`]: O_DIRECT + io_uring from an aligned write ring);
//! - [`reput`]: dispatch into [`consume_queue`] and [`index`], arrival notifications,
//!   reading the log a chunk at a time (from the write ring in direct mode);
//! - housekeeping: queue/index flush, [`checkpoint`], summaries of refused puts
//!   ([`refusal`]); [`retention`] on a thread of its own;
//! - [`ha`]: master/slave replication of the CommitLog (classic HA protocol) and the
//!   SYNC_MASTER wait for a slave's ack;
//! - [`perf_event`]: per-thread perf counters the append stage samples around its batches.
//!
//! [`MessageStore`] is the API, also offered as the object-safe [`StoreApi`] ([`api`]) that
//! the in-memory store of the `test-util` feature ([`mem_store`]) implements as well;
//! [`recovery`] runs at open.

pub mod api;
pub mod append;
mod append_runner;
pub mod checkpoint;
pub mod commit_log;
pub mod config;
pub mod config_file;
pub mod consume_queue;
mod core_port;
pub mod direct;
pub mod error;
#[cfg(any(test, feature = "test-util"))]
pub mod fault;
pub mod flush;
pub mod ha;
pub mod index;
pub mod mapped_file;
#[cfg(feature = "test-util")]
pub mod mem_store;
pub mod perf_event;
pub mod recovery;
pub mod refusal;
pub mod reput;
pub mod retention;
mod role;
mod shared;
mod stage_msg;
pub mod store;
mod store_open;
mod store_read;
pub mod types;
pub mod util;

#[cfg(test)]
pub(crate) mod test_util;

pub use api::{IndexUpdatePoint, StoreApi};
pub use config::{BrokerRole, FlushDiskType, StoreConfig, WriteMode};
pub use config_file::{load_config_file, write_config_file_atomic};
pub use error::StoreError;
#[cfg(feature = "test-util")]
pub use mem_store::MemStore;
pub use refusal::RefusalLog;
pub use store::{ArrivalListener, MessageStore};
pub use types::{
    AcceptAll, ArrivalEvent, Boundary, FileSpan, GetMessageResult, GetMessageStatus, HaSlaveStatus,
    HaStatus, MessageFilter, PutCallback, PutMessageStatus, PutRequest, PutResult, StoreMetrics,
    HA_ACK_LAG_BOUNDS_MS, HA_ACK_LAG_BUCKETS,
};
