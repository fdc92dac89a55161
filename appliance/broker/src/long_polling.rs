//! Long polling (`PullRequestHoldService`, features.md §e.2) on the network core that owns
//! the request: a pull that found nothing waits, keyed by `topic@queueId`, until a matching
//! message arrives or its suspend time runs out; then it is re-executed once, without
//! suspension, on that same core and answered on its original connection.
//!
//! Who owns what:
//! - a core's held pulls live in a table local to that core's thread (`CORE_TABLES`):
//!   no other thread reads or writes it, so no lock guards it and no table is shared;
//! - each core also has a `CoreSlot` other threads may touch: a bounded ring of arrival
//!   notices (the reput stage produces, the core consumes), an overflow flag, and counts of
//!   held pulls per queue bucket, so the reput stage skips cores that wait for nothing on
//!   the queue that advanced.
//!
//! The wake path: for each dispatched message the reput stage calls
//! [`PullHoldService::notify_arrival`]; every core holding a pull in the queue's bucket gets
//! a notice, and its doorbell is rung (coalesced: one eventfd write until the core looks
//! again, so a burst costs one wake-up). The core's loop calls
//! [`PullHoldService::on_core_wake`], which drains the notices, wakes the pulls whose filter
//! matches, expires timed-out ones and re-runs them there. When a ring is full the notice is
//! dropped and the overflow flag set instead: the core then re-checks every held pull
//! against its queue's max offset, so no wake-up is lost. The same re-check runs every 5 s,
//! for arrivals that raced a suspension. Expiry is checked on every pass of the core loop,
//! which runs at least every 50 ms while idle.
//!
//! Bounds: [`NOTICE_RING_CAPACITY`] notices per core; held pulls are requests in flight,
//! bounded per core by the runtime (`ServerTuning`), and parked for at most the pull
//! processor's suspend cap.
//!
//! Pulls suspended on a thread that is not one of the attached cores (unit tests with
//! detached connections, or before [`PullHoldService::attach_cores`]) wait in the detached
//! table behind a mutex, driven by `on_core_wake` calls made off the cores (tests call it
//! explicitly) and by the first attached core.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use ringmq_ring::Notifier;
use ringmq_runtime::CoreHandle;
use ringmq_sync::LockExt;

/// Tests a newly arrived message (tagsCode, property bytes) against a held pull's filter.
pub type ArrivalMatcher = Box<dyn Fn(i64, &[u8]) -> bool + Send>;
/// Re-runs the held pull and answers it.
pub type Resume = Box<dyn FnOnce() + Send>;

/// A parked pull request.
pub struct HeldPull {
    /// The offset the client asked for: anything at or beyond it is news.
    pub offset: i64,
    pub deadline_ms: i64,
    /// Whether `matcher` reads the message properties (SQL92): only then do arrival
    /// notices carry a copy of them.
    pub matches_properties: bool,
    pub matcher: ArrivalMatcher,
    pub resume: Resume,
}

/// Arrival notices one core may have waiting; past this the overflow flag stands in.
pub const NOTICE_RING_CAPACITY: usize = 1024;
/// Buckets of the per-core "queues with held pulls" counts the reput stage consults.
const INTEREST_BUCKETS: usize = 256;
/// Every this often, each held queue's max offset is re-read, covering arrivals that raced
/// with a request being parked (upstream re-checks every 5 s too).
const MAX_OFFSET_RECHECK_MS: i64 = 5000;
/// How long `stop` waits for the cores to answer their held pulls.
const STOP_WAIT_MS: u64 = 2000;

/// "Queue `topic`/`queue_id` advanced to `next_queue_offset`", for one core.
struct ArrivalNotice {
    topic: Box<str>,
    queue_id: i32,
    next_queue_offset: i64,
    tags_code: i64,
    /// `None` when the core held no property-filtered pull at publication; such pulls are
    /// then woken without the filter check (their re-run filters).
    properties: Option<Box<[u8]>>,
}

/// The part of a core's long-polling state other threads may touch.
struct CoreSlot {
    /// `CoreHandle::index`; several servers (main and VIP port) may share an index.
    index: usize,
    /// The core's doorbell; `None` for the detached slot (driven by explicit calls).
    doorbell: Option<Arc<Notifier>>,
    notices: ArrayQueue<ArrivalNotice>,
    /// A notice did not fit: re-check every held pull against the queue max offsets.
    overflow: AtomicBool,
    held: AtomicUsize,
    property_filtered: AtomicUsize,
    /// Held pulls per `bucket_of(topic, queue_id)`.
    interest: Box<[AtomicU32]>,
}

impl CoreSlot {
    fn new(index: usize, doorbell: Option<Arc<Notifier>>, notice_capacity: usize) -> Self {
        Self {
            index,
            doorbell,
            notices: ArrayQueue::new(notice_capacity.max(1)),
            overflow: AtomicBool::new(false),
            held: AtomicUsize::new(0),
            property_filtered: AtomicUsize::new(0),
            interest: (0..INTEREST_BUCKETS).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// Counts a pull in (`added`) or out of the table. The bucket count is raised last and
    /// lowered first, so a publisher that sees it also sees the property-filter count.
    fn count(&self, bucket: usize, matches_properties: bool, added: bool) {
        // SeqCst pairs with the reput stage's loads in `notify_arrival`: either it sees
        // this pull's bucket count, or the re-check after suspension sees its arrival.
        let (interest, seq) = (&self.interest[bucket], Ordering::SeqCst);
        if added {
            if matches_properties {
                self.property_filtered.fetch_add(1, seq);
            }
            self.held.fetch_add(1, seq);
            interest.fetch_add(1, seq);
        } else {
            interest.fetch_sub(1, seq);
            self.held.fetch_sub(1, seq);
            if matches_properties {
                self.property_filtered.fetch_sub(1, seq);
            }
        }
    }

    /// Whether there is anything for `on_core_wake` to do here.
    fn is_idle(&self) -> bool {
        self.held.load(Ordering::Acquire) == 0
            && self.notices.is_empty()
            && !self.overflow.load(Ordering::Acquire)
    }
}

/// Which of the 256 interest buckets a queue falls in (FNV-1a: cheap on the reput stage).
fn bucket_of(topic: &str, queue_id: i32) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in topic.bytes().chain(queue_id.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % INTEREST_BUCKETS as u64) as usize
}

/// One core's held pulls by topic and queue, with its timers.
struct HoldTable {
    queues: HashMap<String, HashMap<i32, Vec<HeldPull>>>,
    /// No held pull expires before this (a lower bound; `i64::MAX` when empty).
    next_deadline_ms: i64,
    last_recheck_ms: i64,
}

impl HoldTable {
    fn new(now_ms: i64) -> Self {
        Self {
            queues: HashMap::new(),
            next_deadline_ms: i64::MAX,
            last_recheck_ms: now_ms,
        }
    }

    fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    fn insert(&mut self, slot: &CoreSlot, topic: &str, queue_id: i32, pull: HeldPull) {
        slot.count(bucket_of(topic, queue_id), pull.matches_properties, true);
        self.next_deadline_ms = self.next_deadline_ms.min(pull.deadline_ms);
        self.queues
            .entry(topic.to_string())
            .or_default()
            .entry(queue_id)
            .or_default()
            .push(pull);
    }

    /// Removes the pulls of one queue that `wake` selects.
    fn take_where(
        &mut self,
        slot: &CoreSlot,
        topic: &str,
        queue_id: i32,
        wake: impl Fn(&HeldPull) -> bool,
    ) -> Vec<Resume> {
        let Some(queues) = self.queues.get_mut(topic) else {
            return Vec::new();
        };
        let Some(list) = queues.get_mut(&queue_id) else {
            return Vec::new();
        };
        let woken = drain_where(list, &wake);
        let bucket = bucket_of(topic, queue_id);
        for pull in &woken {
            slot.count(bucket, pull.matches_properties, false);
        }
        if list.is_empty() {
            queues.remove(&queue_id);
            if queues.is_empty() {
                self.queues.remove(topic);
            }
        }
        woken.into_iter().map(|p| p.resume).collect()
    }

    /// The pulls a notice wakes: those below the new offset whose filter matches.
    fn take_arrival(&mut self, slot: &CoreSlot, n: &ArrivalNotice) -> Vec<Resume> {
        self.take_where(slot, &n.topic, n.queue_id, |p| {
            p.offset < n.next_queue_offset
                && match &n.properties {
                    Some(props) => (p.matcher)(n.tags_code, props),
                    None => p.matches_properties || (p.matcher)(n.tags_code, &[]),
                }
        })
    }

    /// Removes every pull that `wake` selects, whatever its queue.
    fn take_all_where(
        &mut self,
        slot: &CoreSlot,
        wake: impl Fn(&str, i32, &HeldPull) -> bool,
    ) -> Vec<Resume> {
        let mut out = Vec::new();
        for (topic, queues) in self.queues.iter_mut() {
            for (&queue_id, list) in queues.iter_mut() {
                let woken = drain_where(list, &|p: &HeldPull| wake(topic, queue_id, p));
                let bucket = bucket_of(topic, queue_id);
                for pull in woken {
                    slot.count(bucket, pull.matches_properties, false);
                    out.push(pull.resume);
                }
            }
            queues.retain(|_, l| !l.is_empty());
        }
        self.queues.retain(|_, q| !q.is_empty());
        out
    }

    fn take_expired(&mut self, slot: &CoreSlot, now_ms: i64) -> Vec<Resume> {
        let out = self.take_all_where(slot, |_, _, p| p.deadline_ms <= now_ms);
        self.next_deadline_ms = self
            .queues
            .values()
            .flat_map(|q| q.values().flatten())
            .map(|p| p.deadline_ms)
            .min()
            .unwrap_or(i64::MAX);
        out
    }

    /// Wakes every pull below its queue's max offset, filter or not (the re-run filters).
    fn take_below_max_offsets(
        &mut self,
        slot: &CoreSlot,
        max_offset: &dyn Fn(&str, i32) -> i64,
    ) -> Vec<Resume> {
        let maxima: HashMap<(String, i32), i64> = self
            .queues
            .iter()
            .flat_map(|(t, q)| q.keys().map(move |id| (t.clone(), *id)))
            .map(|(t, id)| {
                let max = max_offset(&t, id);
                ((t, id), max)
            })
            .collect();
        self.take_all_where(slot, |topic, queue_id, p| {
            maxima
                .get(&(topic.to_string(), queue_id))
                .is_some_and(|max| p.offset < *max)
        })
    }
}

/// Removes and returns the elements `wake` selects (order not kept).
fn drain_where(list: &mut Vec<HeldPull>, wake: &dyn Fn(&HeldPull) -> bool) -> Vec<HeldPull> {
    let mut woken = Vec::new();
    let mut i = 0;
    while i < list.len() {
        if wake(&list[i]) {
            woken.push(list.swap_remove(i));
        } else {
            i += 1;
        }
    }
    woken
}

/// A core thread's own tables: one per hold service it is a core of (a broker has one;
/// a test process may run several brokers, each on its own core threads).
struct CoreTable {
    service_id: u64,
    slot: usize,
    table: HoldTable,
}

thread_local! {
    static CORE_TABLES: RefCell<Vec<CoreTable>> = const { RefCell::new(Vec::new()) };
}

static NEXT_SERVICE_ID: AtomicU64 = AtomicU64::new(1);

/// The held pulls of every network core, each in its own core's table.
pub struct PullHoldService {
    id: u64,
    notice_capacity: usize,
    /// One slot per attached network core, in `attach_cores` order.
    cores: OnceLock<Box<[CoreSlot]>>,
    detached: CoreSlot,
    detached_table: Mutex<HoldTable>,
    stopping: AtomicBool,
}

impl Default for PullHoldService {
    fn default() -> Self {
        Self::new()
    }
}

impl PullHoldService {
    pub fn new() -> Self {
        Self::with_notice_capacity(NOTICE_RING_CAPACITY)
    }

    /// A service whose per-core notice rings hold `notice_capacity` notices.
    pub fn with_notice_capacity(notice_capacity: usize) -> Self {
        Self {
            id: NEXT_SERVICE_ID.fetch_add(1, Ordering::Relaxed),
            notice_capacity,
            cores: OnceLock::new(),
            detached: CoreSlot::new(0, None, notice_capacity),
            detached_table: Mutex::new(HoldTable::new(crate::persist::now_ms())),
            stopping: AtomicBool::new(false),
        }
    }

    /// Gives held pulls their owning cores: from now on a pull suspended on one of these
    /// cores waits in that core's table and is re-run there. Called once, after the
    /// servers started (every server of the broker: main and VIP port).
    pub fn attach_cores(&self, handles: impl IntoIterator<Item = CoreHandle>) {
        self.attach_doorbells(
            handles
                .into_iter()
                .map(|h| (h.index(), h.doorbell().clone())),
        );
    }

    /// [`PullHoldService::attach_cores`] by (core index, doorbell).
    pub fn attach_doorbells(&self, doorbells: impl IntoIterator<Item = (usize, Arc<Notifier>)>) {
        let slots: Box<[CoreSlot]> = doorbells
            .into_iter()
            .map(|(index, d)| CoreSlot::new(index, Some(d), self.notice_capacity))
            .collect();
        if self.cores.set(slots).is_err() {
            tracing::error!("[BUG] long polling cores attached twice; keeping the first set");
        }
    }

    /// Number of parked requests, over every core.
    pub fn held_count(&self) -> usize {
        self.slots().map(|s| s.held.load(Ordering::Acquire)).sum()
    }

    /// Parked requests per attached core, in `attach_cores` order, then the detached ones.
    pub fn held_by_core(&self) -> Vec<usize> {
        self.slots()
            .map(|s| s.held.load(Ordering::Acquire))
            .collect()
    }

    fn slots(&self) -> impl Iterator<Item = &CoreSlot> {
        self.cores
            .get()
            .into_iter()
            .flat_map(|c| c.iter())
            .chain(std::iter::once(&self.detached))
    }

    /// Parks a request in the calling core's table (`core` = `RequestContext::core_index()`),
    /// or in the detached table when the caller is not an attached core.
    pub fn hold(&self, core: usize, topic: &str, queue_id: i32, pull: HeldPull) {
        if self.stopping.load(Ordering::SeqCst) {
            (pull.resume)();
            return;
        }
        self.with_own_table(core, |slot, table| {
            table.insert(slot, topic, queue_id, pull)
        });
    }

    /// Wakes the calling core's pulls of the queue below `max_offset` (filter or not: the
    /// re-run filters); for a message that landed while a pull was being parked.
    pub fn wake_below(&self, core: usize, topic: &str, queue_id: i32, max_offset: i64) {
        let woken = self.with_own_table(core, |slot, table| {
            table.take_where(slot, topic, queue_id, |p| p.offset < max_offset)
        });
        run(woken);
    }

    /// Publishes an arrival (the reput stage, one call per dispatched message) to every
    /// core holding a pull in the queue's bucket and rings their doorbells. Never blocks
    /// and takes no lock.
    pub fn notify_arrival(
        &self,
        topic: &str,
        queue_id: i32,
        next_queue_offset: i64,
        tags_code: i64,
        properties: &[u8],
    ) {
        let bucket = bucket_of(topic, queue_id);
        for slot in self.slots() {
            if slot.interest[bucket].load(Ordering::SeqCst) == 0 {
                continue;
            }
            let with_properties = slot.property_filtered.load(Ordering::SeqCst) > 0;
            let notice = ArrivalNotice {
                topic: topic.into(),
                queue_id,
                next_queue_offset,
                tags_code,
                properties: with_properties.then(|| properties.into()),
            };
            if slot.notices.push(notice).is_err() {
                slot.overflow.store(true, Ordering::SeqCst);
            }
            if let Some(doorbell) = &slot.doorbell {
                ringmq_ring::notify_core(doorbell);
            }
        }
    }

    /// Runs on network core `core` each pass of its loop (and from tests for the detached
    /// table): drains its arrival notices, wakes matching pulls, re-checks max offsets
    /// when due or after an overflow, expires timed-out pulls, and re-runs the woken ones
    /// here. `max_offset(topic, queue_id)` reads a queue's max offset.
    pub fn on_core_wake(&self, core: usize, max_offset: &dyn Fn(&str, i32) -> i64) {
        let own = self.own_slot(core);
        let own_idle = own.is_none_or(|i| self.core_slot(i).is_idle());
        if own_idle && self.detached.is_idle() {
            return;
        }
        let woken = self.with_own_table(core, |slot, table| self.service(slot, table, max_offset));
        run(woken);
        // The first core also drives pulls parked off the cores (none in a served broker).
        if own == Some(0) && !self.detached.is_idle() {
            let woken = self.service(
                &self.detached,
                &mut self.detached_table.lock_unpoisoned(),
                max_offset,
            );
            run(woken);
        }
    }

    /// What one pass over a table wakes.
    fn service(
        &self,
        slot: &CoreSlot,
        table: &mut HoldTable,
        max_offset: &dyn Fn(&str, i32) -> i64,
    ) -> Vec<Resume> {
        let overflowed = slot.overflow.swap(false, Ordering::SeqCst);
        let mut woken = Vec::new();
        // Bounded: producers may keep pushing while this drains.
        for _ in 0..slot.notices.capacity() {
            let Some(notice) = slot.notices.pop() else {
                break;
            };
            if !table.is_empty() {
                woken.extend(table.take_arrival(slot, &notice));
            }
        }
        if self.stopping.load(Ordering::SeqCst) {
            woken.extend(table.take_all_where(slot, |_, _, _| true));
            return woken;
        }
        if table.is_empty() {
            return woken;
        }
        let now = crate::persist::now_ms();
        if overflowed || now - table.last_recheck_ms >= MAX_OFFSET_RECHECK_MS {
            table.last_recheck_ms = now;
            woken.extend(table.take_below_max_offsets(slot, max_offset));
        }
        if now >= table.next_deadline_ms {
            woken.extend(table.take_expired(slot, now));
        }
        woken
    }

    fn core_slot(&self, i: usize) -> &CoreSlot {
        &self.cores.get().expect("own_slot found an attached core")[i]
    }

    /// The attached slot of the calling thread, if it is network core `core` of ours.
    fn own_slot(&self, core: usize) -> Option<usize> {
        let cached = CORE_TABLES.with(|t| {
            t.borrow()
                .iter()
                .find(|c| c.service_id == self.id)
                .map(|c| c.slot)
        });
        if cached.is_some() {
            return cached;
        }
        let tag = ringmq_ring::current_core()?;
        if tag.index != core {
            return None;
        }
        self.cores
            .get()?
            .iter()
            .position(|s| s.index == core && s.doorbell.as_ref().is_some_and(|d| tag.rings(d)))
    }

    /// Runs `f` on the calling core's own table, or on the detached table when the caller
    /// is not one of the attached cores.
    fn with_own_table<R>(&self, core: usize, f: impl FnOnce(&CoreSlot, &mut HoldTable) -> R) -> R {
        let Some(i) = self.own_slot(core) else {
            return f(&self.detached, &mut self.detached_table.lock_unpoisoned());
        };
        let slot = self.core_slot(i);
        CORE_TABLES.with(|tables| {
            let mut tables = tables.borrow_mut();
            let pos = match tables.iter().position(|c| c.service_id == self.id) {
                Some(pos) => pos,
                None => {
                    tables.push(CoreTable {
                        service_id: self.id,
                        slot: i,
                        table: HoldTable::new(crate::persist::now_ms()),
                    });
                    tables.len() - 1
                }
            };
            f(slot, &mut tables[pos].table)
        })
    }

    /// Answers every held pull (re-executed now): the detached ones and the calling
    /// core's here, the other cores' on their own threads, waited for up to 2 s. Pulls
    /// parked after this are answered at once.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let detached = self
            .detached_table
            .lock_unpoisoned()
            .take_all_where(&self.detached, |_, _, _| true);
        run(detached);
        if let Some(tag) = ringmq_ring::current_core() {
            let mine = self.with_own_table(tag.index, |slot, table| {
                table.take_all_where(slot, |_, _, _| true)
            });
            run(mine);
        }
        let Some(cores) = self.cores.get() else {
            return;
        };
        for slot in cores.iter() {
            if let Some(doorbell) = &slot.doorbell {
                doorbell.notify();
            }
        }
        let deadline = Instant::now() + Duration::from_millis(STOP_WAIT_MS);
        while cores.iter().any(|s| s.held.load(Ordering::SeqCst) > 0) {
            if Instant::now() >= deadline {
                tracing::warn!(
                    held = self.held_count(),
                    "held pulls not answered by their cores within {STOP_WAIT_MS} ms"
                );
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Re-runs woken pulls on the calling thread (outside every table borrow: a re-run may
/// touch the service again).
fn run(woken: Vec<Resume>) {
    for resume in woken {
        resume();
    }
}

#[cfg(test)]
#[path = "long_polling/tests.rs"]
mod tests;
