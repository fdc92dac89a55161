//! ringmq runtime: pinned network cores (compio on io_uring), stage threads, cross-core rings,
//! and the Remoting server.
//!
//! Modules: [`cores`] (core placement, `spawn_pinned`), [`server`] (the Remoting server),
//! [`stall`] (loop stall counter); the rings and the eventfd `Notifier` come from
//! `ringmq-ring`, which the store shares, and are re-exported here. The allocator is re-exported as [`MiMalloc`]; the binary installs it:
//! `#[global_allocator] static GLOBAL: ringmq_runtime::MiMalloc = ringmq_runtime::MiMalloc;`
//!
//! What the runtime offers its users (namesrv and broker):
//! - [`Server`]: a Remoting server on `ServerConfig::network_cores`, one compio (io_uring)
//!   loop per core. Each connection belongs to one core for its whole life; frames are
//!   decoded there and handed to a [`RequestHandler`], which answers at once
//!   ([`Reply::Now`]), later from any thread through a [`Responder`] ([`Reply::Later`]), or
//!   not at all for oneway requests ([`Reply::Nothing`]). A dropped `Responder` answers
//!   SYSTEM_ERROR, so no request is left hanging. Stage threads hand results back to a
//!   core through rings of their own and the core's doorbell ([`CoreHandle::doorbell`]);
//!   the core takes them in [`RequestHandler::on_core_wake`].
//! - [`Response`]: a command plus body chunks that go out without a user-space copy:
//!   memory chunks by vectored write, [`FileRange`]s spliced from their file (pull bodies).
//! - [`Connection`]: a handle to a live connection usable from any thread, for
//!   server-initiated requests (e.g. NOTIFY_CONSUMER_IDS_CHANGED) and closing.
//! - Bounds, all in [`ServerTuning`]: frame size, in-flight requests per connection and per
//!   core, output bytes per connection and per core, bytes held for incomplete frames per
//!   core, and a descriptor reserve kept free for the store.
//! - [`CoreMap`] and [`spawn_pinned`]: which core runs which stage; [`ring`] and
//!   [`Notifier`]: bounded cross-core rings with an eventfd doorbell; [`StallMeter`]: the
//!   count of core loop iterations busier than the stall threshold.

pub mod cores;
pub mod server;
pub mod stall;

pub use cores::{spawn_pinned, CoreMap, CoreMapError};
pub use mimalloc::MiMalloc;
pub use ringmq_ring::{ring, ring_with_notifier, Full, Notifier, RingReceiver, RingSender};
pub use server::pass_clock;
pub use server::{
    not_supported, Connection, CoreHandle, CoreStats, ListenMode, NetConfigError, RecvMode, Reply,
    RequestContext, RequestHandler, Responder, Response, Server, ServerConfig, ServerTuning,
};
pub use server::{BodyChunk, FdReserve, FileRange, SharedFile};
pub use stall::{StallMeter, StallStats};
