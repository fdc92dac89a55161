//! Long polling (`PullRequestHoldService`, features.md §e.2): pulls that found nothing wait,
//! keyed by `topic@queueId`, until a matching message arrives (the store's arrival events) or
//! their suspend time runs out; then they are re-executed once, without suspension, and
//! answered on their original connection.
//!
//! The arrival path only moves woken requests onto a channel; re-execution runs on the hold
//! service's own thread, so the store's dispatch thread never builds responses.

use ringmq_sync::LockExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Tests a newly arrived message (tagsCode, property bytes) against a held pull's filter.
pub type ArrivalMatcher = Box<dyn Fn(i64, &[u8]) -> bool + Send>;
/// Re-runs the held pull and answers it.
pub type Resume = Box<dyn FnOnce() + Send>;
/// Reads a queue's max offset (topic, queue id).
pub type MaxOffsetFn = Box<dyn Fn(&str, i32) -> i64 + Send>;

/// A parked pull request.
pub struct HeldPull {
    /// The offset the client asked for: anything at or beyond it is news.
    pub offset: i64,
    pub deadline_ms: i64,
    pub matcher: ArrivalMatcher,
    pub resume: Resume,
}

/// How often expirations (and missed arrivals) are checked.
const SCAN_INTERVAL_MS: u64 = 100;
/// Every this often, each key's queue max offset is re-read, covering arrivals that raced
/// with a request being parked (upstream re-checks every 5 s too).
const MAX_OFFSET_RECHECK_MS: i64 = 5000;

type Table = HashMap<String, HashMap<i32, Vec<HeldPull>>>;

/// The hold table plus the worker that re-executes woken pulls.
pub struct PullHoldService {
    table: Mutex<Table>,
    held: AtomicUsize,
    wake_tx: Mutex<Option<Sender<Resume>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    stopping: Arc<AtomicBool>,
}

impl Default for PullHoldService {
    fn default() -> Self {
        Self::new()
    }
}

impl PullHoldService {
    pub fn new() -> Self {
        Self {
            table: Mutex::new(HashMap::new()),
            held: AtomicUsize::new(0),
            wake_tx: Mutex::new(None),
            worker: Mutex::new(None),
            stopping: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Starts the worker; `max_offset(topic, queue_id)` reads a queue's max offset.
    /// Without a started worker, woken pulls run on the caller's thread (unit tests).
    pub fn start(self: &Arc<Self>, max_offset: MaxOffsetFn) {
        let (tx, rx) = mpsc::channel::<Resume>();
        *self.wake_tx.lock_unpoisoned() = Some(tx);
        let me = Arc::downgrade(self);
        let handle = std::thread::Builder::new()
            .name("ringmq-pull-hold".into())
            .spawn(move || worker_loop(me, rx, max_offset))
            .expect("spawn the pull hold thread");
        *self.worker.lock_unpoisoned() = Some(handle);
    }

    /// Number of parked requests.
    pub fn held_count(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Parks a request.
    pub fn hold(&self, topic: &str, queue_id: i32, pull: HeldPull) {
        if self.stopping.load(Ordering::Acquire) {
            (pull.resume)();
            return;
        }
        let mut table = self.table.lock_unpoisoned();
        table
            .entry(topic.to_string())
            .or_default()
            .entry(queue_id)
            .or_default()
            .push(pull);
        self.held.fetch_add(1, Ordering::Relaxed);
    }

    /// A message arrived: wake every held pull of the queue that asked for an offset below
    /// `next_queue_offset` and whose filter matches.
    pub fn notify_arrival(
        &self,
        topic: &str,
        queue_id: i32,
        next_queue_offset: i64,
        tags_code: i64,
        properties: &[u8],
    ) {
        if self.held.load(Ordering::Relaxed) == 0 {
            return;
        }
        let woken = self.take(topic, queue_id, |p| {
            p.offset < next_queue_offset && (p.matcher)(tags_code, properties)
        });
        self.run(woken);
    }

    /// Wakes every held pull of the queue below `max_offset`, filter or not (the re-run pull
    /// applies the filter itself).
    pub fn notify_max_offset(&self, topic: &str, queue_id: i32, max_offset: i64) {
        if self.held.load(Ordering::Relaxed) == 0 {
            return;
        }
        let woken = self.take(topic, queue_id, |p| p.offset < max_offset);
        self.run(woken);
    }

    fn take(&self, topic: &str, queue_id: i32, wake: impl Fn(&HeldPull) -> bool) -> Vec<Resume> {
        let mut table = self.table.lock_unpoisoned();
        let Some(queues) = table.get_mut(topic) else {
            return Vec::new();
        };
        let Some(list) = queues.get_mut(&queue_id) else {
            return Vec::new();
        };
        let mut woken = Vec::new();
        let mut i = 0;
        while i < list.len() {
            if wake(&list[i]) {
                woken.push(list.swap_remove(i).resume);
            } else {
                i += 1;
            }
        }
        if list.is_empty() {
            queues.remove(&queue_id);
            if queues.is_empty() {
                table.remove(topic);
            }
        }
        self.held.fetch_sub(woken.len(), Ordering::Relaxed);
        woken
    }

    fn run(&self, woken: Vec<Resume>) {
        if woken.is_empty() {
            return;
        }
        let tx = self.wake_tx.lock_unpoisoned().clone();
        for resume in woken {
            match &tx {
                Some(tx) => {
                    if let Err(mpsc::SendError(resume)) = tx.send(resume) {
                        resume();
                    }
                }
                None => resume(),
            }
        }
    }

    /// Takes every held pull whose deadline passed.
    fn take_expired(&self, now_ms: i64) -> Vec<Resume> {
        let mut table = self.table.lock_unpoisoned();
        let mut out = Vec::new();
        for queues in table.values_mut() {
            for list in queues.values_mut() {
                let mut i = 0;
                while i < list.len() {
                    if list[i].deadline_ms <= now_ms {
                        out.push(list.swap_remove(i).resume);
                    } else {
                        i += 1;
                    }
                }
            }
            queues.retain(|_, l| !l.is_empty());
        }
        table.retain(|_, q| !q.is_empty());
        self.held.fetch_sub(out.len(), Ordering::Relaxed);
        out
    }

    fn keys(&self) -> Vec<(String, i32)> {
        let table = self.table.lock_unpoisoned();
        table
            .iter()
            .flat_map(|(t, q)| q.keys().map(move |id| (t.clone(), *id)))
            .collect()
    }

    /// Answers every held pull (re-executed now) and stops the worker.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        let all = self.take_expired(i64::MAX);
        for resume in all {
            resume();
        }
        self.wake_tx.lock_unpoisoned().take();
        if let Some(handle) = self.worker.lock_unpoisoned().take() {
            let _ = handle.join();
        }
    }
}

fn worker_loop(
    me: std::sync::Weak<PullHoldService>,
    rx: Receiver<Resume>,
    max_offset: MaxOffsetFn,
) {
    let mut last_recheck = crate::persist::now_ms();
    loop {
        match rx.recv_timeout(Duration::from_millis(SCAN_INTERVAL_MS)) {
            Ok(resume) => {
                resume();
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {}
        }
        let Some(service) = me.upgrade() else { return };
        let now = crate::persist::now_ms();
        for resume in service.take_expired(now) {
            resume();
        }
        if now - last_recheck >= MAX_OFFSET_RECHECK_MS {
            last_recheck = now;
            for (topic, queue_id) in service.keys() {
                let max = max_offset(&topic, queue_id);
                let woken = service.take(&topic, queue_id, |p| p.offset < max);
                for resume in woken {
                    resume();
                }
            }
        }
        if service.stopping.load(Ordering::Acquire) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    fn held(offset: i64, deadline_ms: i64, code: i64, hits: &Arc<AtomicU32>) -> HeldPull {
        let hits = hits.clone();
        HeldPull {
            offset,
            deadline_ms,
            matcher: Box::new(move |tags_code, _| tags_code == code),
            resume: Box::new(move || {
                hits.fetch_add(1, Ordering::SeqCst);
            }),
        }
    }

    #[test]
    fn wakes_only_matching_newer_arrivals() {
        let s = PullHoldService::new();
        let hits = Arc::new(AtomicU32::new(0));
        s.hold("T", 0, held(5, i64::MAX, 42, &hits));
        s.notify_arrival("T", 1, 9, 42, b"");
        s.notify_arrival("T", 0, 5, 42, b"");
        s.notify_arrival("T", 0, 6, 41, b"");
        assert_eq!(hits.load(Ordering::SeqCst), 0);
        s.notify_arrival("T", 0, 6, 42, b"");
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        assert_eq!(s.held_count(), 0);
    }

    #[test]
    fn worker_expires_holds() {
        let s = Arc::new(PullHoldService::new());
        s.start(Box::new(|_, _| 0));
        let hits = Arc::new(AtomicU32::new(0));
        s.hold("T", 0, held(0, crate::persist::now_ms() + 150, 1, &hits));
        s.hold("T", 0, held(0, i64::MAX, 1, &hits));
        std::thread::sleep(Duration::from_millis(450));
        assert_eq!(
            hits.load(Ordering::SeqCst),
            1,
            "only the expired one answered"
        );
        s.stop();
        assert_eq!(
            hits.load(Ordering::SeqCst),
            2,
            "stop answers everything left"
        );
    }
}
