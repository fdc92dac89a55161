//! The messages the pipeline stages pass each other: producers → append (`AppendMsg`),
//! append → flush (`FlushMsg` carrying SYNC_FLUSH `Waiter`s). They live below the stages
//! so that append and flush each depend on them rather than on one another.

use crate::types::{PutCallback, PutRequest, PutResult};
use std::sync::mpsc::SyncSender;
use std::time::Instant;

/// Messages to the append stage.
pub(crate) enum AppendMsg {
    Put {
        req: PutRequest,
        done: PutCallback,
    },
    /// Forget a topic's queue offsets (topic deleted).
    DeleteTopic(String),
    /// Finish queued work, stop; the flush stage is told to stop after a final flush.
    Shutdown(SyncSender<()>),
}

/// A SYNC_FLUSH put waiting for its bytes to reach the disk.
pub(crate) struct Waiter {
    /// End offset of the put's bytes.
    pub target: u64,
    pub deadline: Instant,
    pub result: PutResult,
    pub done: PutCallback,
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
