//! POP long polling (features.md §f.4 step 5): a pop (or a NOTIFICATION) that finds
//! nothing waits on every queue it read, plus the group's POP retry queue, until a matching
//! message arrives on any of them or its poll time runs out; then it is re-run once,
//! without waiting, and answered.
//!
//! The waiting is the pull long polling's (`long_polling.rs`): one held entry per watched
//! queue, all sharing one answer, so whichever fires first answers and the others find
//! nothing left to do when they fire. At most [`MAX_POP_POLLING`] pops wait at once on a
//! broker (`maxPopPollingSize`); beyond that the pop is answered POLLING_FULL.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use ringmq_sync::LockExt;

use super::filter::PopFilter;
use crate::context::BrokerContext;
use crate::long_polling::HeldPull;

/// Pops (and notifications) waiting at once on one broker (`maxPopPollingSize`).
pub const MAX_POP_POLLING: usize = 100_000;
/// Queues one waiting pop watches at most (a topic's queues and its retry queue).
pub const MAX_WATCHED_QUEUES: usize = 1_024;

/// A queue a waiting pop watches, from the offset it read up to.
#[derive(Debug, Clone)]
pub struct Watch {
    pub topic: String,
    pub queue_id: i32,
    pub offset: i64,
}

/// The answer a waiting pop gives when woken or expired; runs at most once.
pub type Fire = Box<dyn FnOnce() + Send>;

/// Pops waiting at once under one polling key (`popPollingSize`).
pub const POP_POLLING_SIZE: usize = 1_024;

/// Takes one of the [`MAX_POP_POLLING`] waiting places of the broker and one of the
/// [`POP_POLLING_SIZE`] of `key`; false when none is left. A taken place is given back
/// when the parked pop fires.
pub fn reserve(ctx: &BrokerContext, key: &str) -> bool {
    let waiting = &ctx.pop.polling;
    if waiting.fetch_add(1, Ordering::AcqRel) >= MAX_POP_POLLING {
        waiting.fetch_sub(1, Ordering::AcqRel);
        return false;
    }
    let mut by_key = ctx.pop.polling_by_key.lock_unpoisoned();
    let n = by_key.entry(key.to_string()).or_insert(0);
    if *n >= POP_POLLING_SIZE {
        waiting.fetch_sub(1, Ordering::AcqRel);
        return false;
    }
    *n += 1;
    true
}

/// Gives back a place [`reserve`] took.
fn release(ctx: &BrokerContext, key: &str) {
    ctx.pop.polling.fetch_sub(1, Ordering::AcqRel);
    let mut by_key = ctx.pop.polling_by_key.lock_unpoisoned();
    if let Some(n) = by_key.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            by_key.remove(key);
        }
    }
}

/// Pops waiting under `key` now (POLLING_INFO).
pub fn waiting_under(ctx: &BrokerContext, key: &str) -> usize {
    ctx.pop
        .polling_by_key
        .lock_unpoisoned()
        .get(key)
        .copied()
        .unwrap_or(0)
}

/// A place taken with [`reserve`] under `key`, and until when the pop waits there.
pub struct Place {
    pub key: String,
    pub deadline_ms: i64,
}

/// Parks `fire` on `watches` (at least one) until the place's deadline.
pub fn park(
    ctx: &Arc<BrokerContext>,
    core: usize,
    watches: &[Watch],
    filter: Arc<PopFilter>,
    place: Place,
    fire: Fire,
) {
    assert!(!watches.is_empty(), "a pop waits on at least one queue");
    let shared: Arc<Mutex<Option<Fire>>> = Arc::new(Mutex::new(Some(fire)));
    let key: Arc<str> = place.key.into();
    let deadline_ms = place.deadline_ms;
    for w in watches.iter().take(MAX_WATCHED_QUEUES) {
        let (shared, ctx2) = (shared.clone(), ctx.clone());
        let key = key.clone();
        let (matches_properties, matcher) = filter.arrival_matcher(&w.topic);
        let held = HeldPull {
            offset: w.offset,
            deadline_ms,
            matches_properties,
            matcher,
            resume: Box::new(move || {
                let fire = shared.lock_unpoisoned().take();
                if let Some(fire) = fire {
                    release(&ctx2, &key);
                    fire();
                }
            }),
        };
        ctx.hold.hold(core, &w.topic, w.queue_id, held);
        // A message may have landed between the read and the parking.
        let max_offset = ctx.store.max_offset_in_queue(&w.topic, w.queue_id);
        if max_offset > w.offset {
            ctx.hold.wake_below(core, &w.topic, w.queue_id, max_offset);
        }
    }
}
