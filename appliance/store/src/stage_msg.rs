//! The messages the pipeline stages pass each other: producers → append (`AppendMsg`),
//! append → flush (SYNC_FLUSH `Waiter`s through the `WaiterInbox`, and `FlushMsg`), and
//! each put's `Done`. They live below the stages so that append and flush each depend on
//! them rather than on one another.

use crate::types::{PutCallback, PutRequest, PutResult};
use ringmq_sync::LockExt;
use std::collections::VecDeque;
use std::sync::mpsc::SyncSender;
use std::sync::Mutex;
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

/// SYNC_FLUSH waiters on their way from the append stage to the flush coordinator.
///
/// The append stage completes a batch every few puts. Waking the coordinator for each
/// batch cost a context switch per batch (about 25k/s at saturation on 2 cores), more CPU
/// than the flushes themselves. While a flush runs the coordinator cannot start another,
/// and the flush's report wakes it when it ends, so waiters handed over meanwhile wait
/// here. Only a coordinator that is idle for want of waiters asks to be woken ("armed").
///
/// Bound: every waiter is a put in flight, and puts in flight are bounded where they
/// enter the store (the put queue and the network cores' rings).
pub(crate) struct WaiterInbox {
    state: Mutex<InboxState>,
}

struct InboxState {
    waiters: Vec<Waiter>,
    /// The coordinator is waiting for waiters: the next hand-over wakes it.
    armed: bool,
    /// The coordinator is gone; hand-overs are refused.
    closed: bool,
}

/// What a hand-over asks of the append stage.
pub(crate) enum HandOver {
    /// Taken; the coordinator will see it without a wake-up.
    Taken,
    /// Taken; wake the coordinator (it was idle).
    Wake,
    /// The coordinator is gone: the waiters come back to be failed.
    Refused(Vec<Waiter>),
}

impl WaiterInbox {
    pub fn new() -> Self {
        WaiterInbox {
            state: Mutex::new(InboxState {
                waiters: Vec::new(),
                // Until the coordinator first looks, a hand-over must wake it.
                armed: true,
                closed: false,
            }),
        }
    }

    /// Append side: moves `batch` (in offset order, after everything handed over before).
    /// An empty batch still reports whether the coordinator wants a wake-up (WAIT=false
    /// puts: new bytes to flush without a waiter).
    pub fn hand_over(&self, batch: &mut Vec<Waiter>) -> HandOver {
        let mut state = self.state.lock_unpoisoned();
        if state.closed {
            return HandOver::Refused(std::mem::take(batch));
        }
        state.waiters.append(batch);
        match std::mem::replace(&mut state.armed, false) {
            true => HandOver::Wake,
            false => HandOver::Taken,
        }
    }

    /// Coordinator side: moves every waiter handed over into `to`, in hand-over order, and
    /// arms the inbox when nothing came and `arm` (the coordinator is about to wait for
    /// waiters). Returns how many came.
    pub fn take_into(&self, to: &mut VecDeque<Waiter>, arm: bool) -> usize {
        let mut state = self.state.lock_unpoisoned();
        let took = state.waiters.len();
        to.extend(state.waiters.drain(..));
        state.armed = arm && took == 0;
        took
    }

    /// Coordinator side, when it ends: refuses further hand-overs and returns what is left.
    pub fn close(&self) -> Vec<Waiter> {
        let mut state = self.state.lock_unpoisoned();
        state.closed = true;
        std::mem::take(&mut state.waiters)
    }
}

/// The append stage's way into the flush coordinator.
pub(crate) struct FlushPort {
    pub tx: SyncSender<FlushMsg>,
    pub inbox: std::sync::Arc<WaiterInbox>,
}

/// Messages to the flush coordinator (waiters come through the [`WaiterInbox`]).
pub(crate) enum FlushMsg {
    /// New waiters or bytes to make durable, and the coordinator was idle.
    Wake,
    /// The flushed offset moved to `target` (or, with an error, a flush failed).
    Synced {
        target: u64,
        store_timestamp_ms: i64,
        result: Result<(), String>,
        elapsed_us: u64,
        /// mmap SYNC_FLUSH: the worker went straight on to flush what was appended
        /// meanwhile, so a flush is still running.
        continuing: bool,
    },
    Shutdown(SyncSender<()>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::PutMessageStatus;

    fn waiter(target: u64) -> Waiter {
        Waiter {
            target,
            deadline: Instant::now() + Duration::from_secs(5),
            result: PutResult::failed(PutMessageStatus::PutOk),
            done: Done::new(Box::new(|_| {})),
            then_slave: false,
        }
    }

    fn targets(q: &VecDeque<Waiter>) -> Vec<u64> {
        q.iter().map(|w| w.target).collect()
    }

    #[test]
    fn only_an_armed_inbox_asks_for_a_wake_up_and_order_is_kept() {
        let inbox = WaiterInbox::new();
        let mut pending = VecDeque::new();
        // Before the coordinator first looks, a hand-over wakes it; once.
        assert!(matches!(
            inbox.hand_over(&mut vec![waiter(1)]),
            HandOver::Wake
        ));
        assert!(matches!(
            inbox.hand_over(&mut vec![waiter(2), waiter(3)]),
            HandOver::Taken
        ));
        // Busy coordinator (a flush runs): takes, does not arm.
        assert_eq!(inbox.take_into(&mut pending, false), 3);
        assert!(matches!(
            inbox.hand_over(&mut vec![waiter(4)]),
            HandOver::Taken
        ));
        // Something came: arming is pointless, the coordinator will not wait.
        assert_eq!(inbox.take_into(&mut pending, true), 1);
        let mut empty = Vec::new();
        assert!(matches!(inbox.hand_over(&mut empty), HandOver::Taken));
        // Idle and nothing came: armed, and the next hand-over (even an empty one, for
        // WAIT=false bytes) wakes it.
        assert_eq!(inbox.take_into(&mut pending, true), 0);
        assert!(matches!(inbox.hand_over(&mut empty), HandOver::Wake));
        assert!(matches!(
            inbox.hand_over(&mut vec![waiter(5)]),
            HandOver::Taken
        ));
        assert_eq!(inbox.take_into(&mut pending, false), 1);
        assert_eq!(targets(&pending), [1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_closed_inbox_returns_what_it_held_and_refuses_more() {
        let inbox = WaiterInbox::new();
        let mut batch = vec![waiter(7), waiter(8)];
        inbox.hand_over(&mut batch);
        assert!(batch.is_empty(), "the batch moved into the inbox");
        let left: Vec<u64> = inbox.close().iter().map(|w| w.target).collect();
        assert_eq!(left, [7, 8]);
        match inbox.hand_over(&mut vec![waiter(9)]) {
            HandOver::Refused(back) => assert_eq!(back[0].target, 9),
            _ => panic!("a closed inbox took waiters"),
        }
    }
}
