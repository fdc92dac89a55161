//! SYNC_MASTER: stored puts that wait for a slave to acknowledge their bytes, completed by
//! the master stage as acknowledgements arrive or their `slaveTimeout` passes.

use crate::shared::Shared;
use crate::stage_msg::Waiter;
use crate::types::PutMessageStatus;
use ringmq_sync::LockExt;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Append or flush stage: these stored puts complete once a slave acknowledged their end
/// offset, or FLUSH_SLAVE_TIMEOUT after `slaveTimeout` from now. Once the HA stage has
/// stopped they time out at once.
pub(crate) fn wait_for_slave(shared: &Shared, waiters: Vec<Waiter>) {
    let deadline = Instant::now() + Duration::from_millis(shared.config.slave_timeout_ms);
    let mut q = shared.ha.slave_waiters.lock_unpoisoned();
    if shared.ha.stop.load(Ordering::Acquire) {
        drop(q);
        for w in waiters {
            let mut r = w.result;
            r.status = PutMessageStatus::FlushSlaveTimeout;
            shared.complete_put(w.done, r);
        }
        shared.ring_cores();
        return;
    }
    q.extend(waiters.into_iter().map(|w| Waiter { deadline, ..w }));
    drop(q);
    shared.ha.doorbell.notify();
}

/// Master stage: completes the waiters a slave acknowledged (PUT_OK) and those past their
/// deadline (FLUSH_SLAVE_TIMEOUT); with `all`, every one left (shutdown). Returns the
/// earliest deadline still waiting.
pub(crate) fn complete_slave_waiters(shared: &Shared, all: bool) -> Option<Instant> {
    let acked = acked_offset(shared);
    let now = Instant::now();
    let mut done = Vec::new();
    let next = {
        let mut q = shared.ha.slave_waiters.lock_unpoisoned();
        while q.front().is_some_and(|w| w.target <= acked) {
            done.push((
                q.pop_front().expect("front exists"),
                PutMessageStatus::PutOk,
            ));
        }
        while q.front().is_some_and(|w| all || w.deadline <= now) {
            let w = q.pop_front().expect("front exists");
            done.push((w, PutMessageStatus::FlushSlaveTimeout));
        }
        q.front().map(|w| w.deadline)
    };
    if !done.is_empty() {
        for (w, status) in done {
            let mut r = w.result;
            r.status = status;
            shared.complete_put(w.done, r);
        }
        shared.ring_cores();
    }
    next
}

/// What replication has acknowledged: the offset every SyncStateSet member holds under
/// controller mode with `allAckInSyncStateSet`, else the highest offset a slave holds.
fn acked_offset(shared: &Shared) -> u64 {
    let c = &shared.config;
    if c.controller_mode && c.all_ack_in_sync_state_set {
        if shared.ha.replicas.sync_state_set_size() <= 1 {
            // Alone in the set: nobody else has to hold it.
            return u64::MAX;
        }
        let confirm = shared.ha.replicas.confirm_offset.load(Ordering::Acquire);
        return confirm.max(0) as u64;
    }
    shared.ha.push_to_slave_max_offset.load(Ordering::Acquire)
}
