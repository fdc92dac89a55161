//! Who runs the append stage's batches. The stage lives behind one lock
//! ([`AppendHandle`]) and runs a batch at a time on whichever thread holds it:
//!
//! - its own thread (`ringmq-append`), woken by the append doorbell when puts are queued;
//! - a network core, at the end of a pass that queued puts, when the append thread is
//!   idle (`append_here_or_wake`). At low and moderate rates that saves the two wake-ups
//!   of every send (core → append thread, append thread → core), which were most of the
//!   broker's CPU per message and of its latency on a small host. Under load the thread
//!   stays awake and takes the puts, so appending still runs beside the cores.
//!
//! Batches run inline only where the core map lets them: the append stage is unpinned
//! (pinning it with `ringmq.cores.append` gives it its own core). In direct mode a batch
//! runs inline only while the write ring has room for all of it: waiting for the flusher
//! to free room is the append thread's job, never a core's.
//!
//! The doorbell protocol (`ringmq_ring::Notifier`) keeps every put found: a core that
//! finds no wake-up pending claims it, and then either drains the queues as the consumer
//! would or pays the wake-up with an eventfd write.

use crate::append::{AppendStage, CoreRings};
use crate::core_port::CorePorts;
use crate::perf_event::BatchSampler;
use crate::shared::Shared;
use ringmq_sync::LockExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};
use std::time::Duration;

/// The append stage, shared by its thread and (inline) the network cores. The thread
/// holds the one lasting reference: the stage (its segment allocator, its flush port)
/// goes when the thread ends. The store keeps a [`WeakAppendHandle`].
pub(crate) type AppendHandle = Arc<Mutex<AppendStage>>;
pub(crate) type WeakAppendHandle = Weak<Mutex<AppendStage>>;

/// Longest the append thread sleeps without a doorbell: a lost wake-up costs at most this.
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// The append thread: waits for queued puts and runs batches until the stage stops (a
/// shutdown request) or the store is gone. A panic ends the thread (the caller's guard
/// fails what is queued); either way the stage is ended on the way out.
pub(crate) fn run(handle: AppendHandle) {
    let _end = EndOnExit(&handle);
    let (shared, mut perf) = {
        let mut stage = handle.lock_unpoisoned();
        stage.start_on_thread();
        let shared = Arc::clone(stage.shared());
        let perf = BatchSampler::open(
            "append",
            shared.config.append_perf_sample_every,
            &shared.metrics.append_perf,
        );
        (shared, perf)
    };
    while let Some((mut stage, batch_bytes)) = next_batch(&handle, &shared) {
        stage.process(batch_bytes, Some(&mut perf));
        if stage.finish_on_thread() {
            return;
        }
    }
}

/// Waits on the doorbell until something is queued, then returns the stage held with a
/// batch taken (and its record bytes); None once the stage is done or the store gone.
///
/// The doorbell is re-armed only when the thread is about to sleep, then the queues are
/// looked at once more: a put queued before the arm is found by that look, one queued
/// after it rings. While the thread keeps finding work the doorbell stays pending, so
/// the network cores' puts cost no `write(2)` and the thread no `poll(2)`.
fn next_batch<'a>(
    handle: &'a AppendHandle,
    shared: &Shared,
) -> Option<(MutexGuard<'a, AppendStage>, usize)> {
    loop {
        for rearmed in [false, true] {
            if rearmed {
                shared.append_doorbell.begin_drain();
            }
            let mut stage = handle.lock_unpoisoned();
            if stage.finish_on_thread() {
                return None;
            }
            let bytes = stage.take_queued(CoreRings::All)?;
            if !stage.batch_is_empty() {
                return Some((stage, bytes));
            }
        }
        shared.append_doorbell.wait_timeout(IDLE_WAIT);
    }
}

/// Ends the stage when the append thread leaves, by return or by panic.
struct EndOnExit<'a>(&'a AppendHandle);

impl Drop for EndOnExit<'_> {
    fn drop(&mut self) {
        self.0.lock_unpoisoned().end();
    }
}

/// On a network core whose pass queued puts without ringing the append stage: runs one
/// batch here when the append thread is idle, otherwise makes sure the thread takes
/// them. Returns whether a batch ran here (its completions for this core are queued and
/// the core's doorbell marked). Never blocks on the stage: a held lock means the thread
/// is at work and is woken.
pub(crate) fn append_here_or_wake(handle: &WeakAppendHandle, shared: &Shared) -> bool {
    let doorbell = &shared.append_doorbell;
    if !doorbell.claim() {
        // The thread is awake (or being woken) and looks at the rings before it sleeps.
        return false;
    }
    let Some(handle) = handle.upgrade() else {
        // The append thread has ended; what is queued is answered by its guard.
        doorbell.wake();
        return false;
    };
    let ports = shared.core_ports.get();
    let own = ports.and_then(CorePorts::current_index);
    let mut stage = match handle.try_lock() {
        Ok(stage) if stage.runs_inline() => stage,
        Err(TryLockError::WouldBlock) if ports.is_some_and(CorePorts::leave_to_inline_core) => {
            // Another core appends its own puts and hands this core's back to it when
            // done: no wake-up owed to the append thread.
            doorbell.begin_drain();
            return false;
        }
        Ok(_) | Err(TryLockError::WouldBlock) | Err(TryLockError::Poisoned(_)) => {
            doorbell.wake();
            return false;
        }
    };
    // `runs_inline` held: no batch left for the append thread waits in the stage, so
    // the batch taken below is this core's alone and its bytes are all counted.
    debug_assert!(
        stage.batch_is_empty(),
        "a left batch is the append thread's"
    );
    // This core is the consumer now: a put queued after this is found below or rings.
    doorbell.begin_drain();
    let (rings, inline) = match (ports, own) {
        (Some(ports), Some(core)) => {
            ports.begin_inline(core);
            (CoreRings::Only(core), Some((ports, core)))
        }
        _ => (CoreRings::All, None),
    };
    // Every return below drops `stage` first, so the hand-back looks at the other cores'
    // rings only once the stage is released.
    let _hand_back = HandBackOnExit(inline);
    let Some(batch_bytes) = stage.take_queued(rings) else {
        drop(stage);
        return false;
    };
    if stage.batch_is_empty() {
        drop(stage);
        return false;
    }
    if !stage.batch_runs_inline(batch_bytes) {
        // Direct mode, and the write ring is too full for this batch: the append thread,
        // which may wait for the flusher, runs it (the puts taken stay in the batch and
        // go first).
        drop(stage);
        doorbell.notify();
        return false;
    }
    let full = stage.batch_is_full(batch_bytes);
    let ran = catch_unwind(AssertUnwindSafe(|| stage.process(batch_bytes, None)));
    if let Err(panic) = ran {
        let cause = crate::util::panic_text(panic.as_ref()).to_string();
        tracing::error!(
            cause,
            "an append batch run on a network core panicked; the append stage stops"
        );
        stage.mark_broken(cause);
        drop(stage);
        doorbell.wake();
        return true;
    }
    let more = full || !stage.runs_inline();
    drop(stage);
    if more {
        // Puts left behind the batch limit, a write ring short of room for the next
        // batch (direct mode), or a shutdown for the thread to finish.
        doorbell.notify();
    }
    true
}

/// Ends a core's inline batch once the stage is released, on every way out of
/// `append_here_or_wake`: the other cores' puts are handed back to them.
struct HandBackOnExit<'a>(Option<(&'a CorePorts, usize)>);

impl Drop for HandBackOnExit<'_> {
    fn drop(&mut self) {
        if let Some((ports, core)) = self.0 {
            ports.end_inline_and_hand_back(core);
        }
    }
}
