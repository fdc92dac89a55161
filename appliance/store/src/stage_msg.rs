//! The messages the pipeline stages pass each other: producers → append (`AppendMsg`),
//! append → flush (`FlushMsg` carrying SYNC_FLUSH `Waiter`s), and each put's `Done`. They live below the stages
//! so that append and flush each depend on them rather than on one another.

use crate::types::{PutCallback, PutRequest, PutResult};
use std::sync::mpsc::SyncSender;
use std::time::{Duration, Instant};

/// A put's callback and where it runs: on the network core the put was made on
/// (`origin`, its index among the attached cores), or, for puts made on any other thread,
/// on the stage thread that completes it.
pub(crate) struct Done {
    pub callback: PutCallback,
    pub origin: Option<u16>,
}

impl Done {
    pub fn new(callback: PutCallback) -> Self {
        Done {
            callback,
            origin: None,
        }
    }
}

/// Messages to the append stage.
pub(crate) enum AppendMsg {
    Put {
        req: PutRequest,
        done: Done,
        /// When the put was queued: the append stage refuses puts that waited longer than
        /// `waitTimeMillsInSendQueue` (`[TIMEOUT_CLEAN_QUEUE]`).
        enqueued: Instant,
    },
    /// Slave: the master's CommitLog bytes, to be written unchanged at `phy_offset` (which
    /// must be the write offset, or any segment start while the log is empty). The reply
    /// is the new max offset once published, or why the bytes were refused.
    Replica {
        phy_offset: u64,
        bytes: Vec<u8>,
        reply: SyncSender<Result<u64, String>>,
    },
    /// A slave became master: take every queue's next offset from the ConsumeQueues
    /// (dispatch has caught up with the replicated records), then answer.
    RebuildQueueOffsets(SyncSender<()>),
    /// Forget a topic's queue offsets (topic deleted).
    DeleteTopic(String),
    /// Finish queued work, stop; the flush stage is told to stop after a final flush.
    Shutdown(SyncSender<()>),
}

impl AppendMsg {
    /// Record bytes a put carries (0 for other messages).
    pub fn put_bytes(&self) -> usize {
        match self {
            AppendMsg::Put { req, .. } => req.records.len(),
            AppendMsg::Replica { bytes, .. } => bytes.len(),
            _ => 0,
        }
    }

    /// How long a put has been queued at `now` (zero for other messages).
    pub fn queued_for(&self, now: Instant) -> Duration {
        match self {
            AppendMsg::Put { enqueued, .. } => now.saturating_duration_since(*enqueued),
            _ => Duration::ZERO,
        }
    }
}

/// A SYNC_FLUSH put waiting for its bytes to reach the disk.
pub(crate) struct Waiter {
    /// End offset of the put's bytes.
    pub target: u64,
    pub deadline: Instant,
    pub result: PutResult,
    pub done: Done,
    /// SYNC_MASTER: once flushed, the put waits for a slave's ack as well.
    pub then_slave: bool,
}

/// Messages to the flush coordinator.
pub(crate) enum FlushMsg {
    Waiters(Vec<Waiter>),
    /// New bytes to make durable without a waiter (WAIT=false puts under SYNC_FLUSH).
    Wake,
    /// The flushed offset moved to `target` (or, with an error, a flush failed).
    Synced {
        target: u64,
        store_timestamp_ms: i64,
        result: Result<(), String>,
        elapsed_us: u64,
    },
    Shutdown(SyncSender<()>),
}
