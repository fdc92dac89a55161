//! Long polling on the owning core: arrivals reach only the cores holding a pull on the
//! queue, a held pull is re-run on the thread of the core that parked it, a burst of
//! arrivals costs one doorbell write and one wake-up, and a full notice ring falls back to
//! a max-offset re-check. "Cores" here are plain threads tagged as network cores, each with
//! its own doorbell, or the test thread itself tagged as core 0.

use super::*;
use std::sync::atomic::AtomicU32;
use std::sync::mpsc;
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send>;

fn nothing_stored(_: &str, _: i32) -> i64 {
    0
}

fn held(offset: i64, deadline_ms: i64, code: i64, hits: &Arc<AtomicU32>) -> HeldPull {
    let hits = hits.clone();
    HeldPull {
        offset,
        deadline_ms,
        matches_properties: false,
        matcher: Box::new(move |tags_code, _| tags_code == code),
        resume: Box::new(move || {
            hits.fetch_add(1, Ordering::SeqCst);
        }),
    }
}

/// Tags the test thread as network core 0 ringing `doorbell` until dropped.
struct AsCore;

impl AsCore {
    fn enter(doorbell: &Arc<Notifier>) -> Self {
        ringmq_ring::enter_core(0, doorbell);
        AsCore
    }
}

impl Drop for AsCore {
    fn drop(&mut self) {
        ringmq_ring::leave_core();
    }
}

/// A thread named `name` tagged as network core `index`: runs the jobs it is given, then the hold
/// service's per-pass work, and sleeps on its doorbell; bounded to 20 s.
struct FakeCore {
    jobs: mpsc::Sender<Job>,
    doorbell: Arc<Notifier>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeCore {
    fn spawn(
        name: &str,
        index: usize,
        doorbell: Arc<Notifier>,
        service: Arc<PullHoldService>,
    ) -> Self {
        let (jobs, rx) = mpsc::channel::<Job>();
        let stop = Arc::new(AtomicBool::new(false));
        let (bell, quit) = (doorbell.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                ringmq_ring::enter_core(index, &bell);
                let until = Instant::now() + Duration::from_secs(20);
                while !quit.load(Ordering::SeqCst) && Instant::now() < until {
                    bell.begin_drain();
                    while let Ok(job) = rx.try_recv() {
                        job();
                    }
                    service.on_core_wake(index, &nothing_stored);
                    bell.wait_timeout(Duration::from_millis(5));
                }
                ringmq_ring::leave_core();
            })
            .unwrap();
        Self {
            jobs,
            doorbell,
            stop,
            thread: Some(thread),
        }
    }

    fn run(&self, job: impl FnOnce() + Send + 'static) {
        self.jobs.send(Box::new(job)).unwrap();
        self.doorbell.notify();
    }
}

impl Drop for FakeCore {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.doorbell.notify();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn doorbell() -> Arc<Notifier> {
    Arc::new(Notifier::new().unwrap())
}

/// Waits (bounded) until `cond` holds.
fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn wakes_only_matching_newer_arrivals() {
    let s = PullHoldService::new();
    let hits = Arc::new(AtomicU32::new(0));
    s.hold(0, "T", 0, held(5, i64::MAX, 42, &hits));
    s.notify_arrival("T", 1, 9, 42, b"");
    s.notify_arrival("T", 0, 5, 42, b"");
    s.notify_arrival("T", 0, 6, 41, b"");
    s.on_core_wake(0, &nothing_stored);
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    s.notify_arrival("T", 0, 6, 42, b"");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "woken by its core, not the reput stage"
    );
    s.on_core_wake(0, &nothing_stored);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert_eq!(s.held_count(), 0);
}

#[test]
fn a_held_pull_is_rerun_on_the_core_that_parked_it() {
    let service = Arc::new(PullHoldService::new());
    let (bell0, bell1) = (doorbell(), doorbell());
    service.attach_doorbells([(0, bell0.clone()), (1, bell1.clone())]);
    let core0 = FakeCore::spawn("core-0", 0, bell0.clone(), service.clone());
    let core1 = FakeCore::spawn("core-1", 1, bell1.clone(), service.clone());
    let (tx, rx) = mpsc::channel::<String>();
    let s = service.clone();
    core1.run(move || {
        let pull = HeldPull {
            offset: 3,
            deadline_ms: i64::MAX,
            matches_properties: false,
            matcher: Box::new(|_, _| true),
            resume: Box::new(move || {
                let me = std::thread::current().name().unwrap_or("").to_string();
                tx.send(me).unwrap();
            }),
        };
        s.hold(1, "TopicC", 2, pull);
    });
    wait_until("the pull is parked", || service.held_count() == 1);
    let core0_writes = bell0.writes();
    service.notify_arrival("TopicC", 2, 4, 0, b"");
    let ran_on = rx.recv_timeout(Duration::from_secs(5)).expect("woken");
    assert_eq!(ran_on, "core-1");
    assert_eq!(service.held_count(), 0);
    assert_eq!(
        bell0.writes(),
        core0_writes,
        "a core holding nothing on the queue is not rung"
    );
    drop((core0, core1));
}

#[test]
fn cores_of_two_servers_with_one_index_keep_their_own_pulls() {
    // The broker's main and VIP listeners each have a core 0.
    let service = Arc::new(PullHoldService::new());
    let (main_bell, vip_bell) = (doorbell(), doorbell());
    service.attach_doorbells([(0, main_bell.clone()), (0, vip_bell.clone())]);
    let main = FakeCore::spawn("main-0", 0, main_bell, service.clone());
    let vip = FakeCore::spawn("vip-0", 0, vip_bell.clone(), service.clone());
    let (tx, rx) = mpsc::channel::<String>();
    let s = service.clone();
    vip.run(move || {
        let resume = move || {
            let me = std::thread::current().name().unwrap_or("").to_string();
            tx.send(me).unwrap();
        };
        let pull = HeldPull {
            offset: 0,
            deadline_ms: i64::MAX,
            matches_properties: false,
            matcher: Box::new(|_, _| true),
            resume: Box::new(resume),
        };
        s.hold(0, "TopicV", 0, pull);
    });
    wait_until("the pull is parked", || service.held_count() == 1);
    assert_eq!(service.held_by_core(), [0, 1, 0]);
    service.notify_arrival("TopicV", 0, 1, 0, b"");
    let ran_on = rx.recv_timeout(Duration::from_secs(5)).expect("woken");
    assert_eq!(ran_on, "vip-0");
    assert_eq!(service.held_by_core(), [0, 0, 0]);
    drop((main, vip));
}

#[test]
fn expired_pulls_are_answered_by_their_core_and_not_before() {
    let service = Arc::new(PullHoldService::new());
    let bell = doorbell();
    service.attach_doorbells([(0, bell.clone())]);
    let core = FakeCore::spawn("core-0", 0, bell, service.clone());
    let hits = Arc::new(AtomicU32::new(0));
    let (h1, h2) = (hits.clone(), hits.clone());
    let s = service.clone();
    let parked_at = Instant::now();
    core.run(move || {
        s.hold(0, "T", 0, held(0, crate::persist::now_ms() + 150, 1, &h1));
        s.hold(0, "T", 0, held(0, i64::MAX, 1, &h2));
    });
    wait_until("the short one expires", || hits.load(Ordering::SeqCst) == 1);
    assert!(parked_at.elapsed() >= Duration::from_millis(140));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "only the expired one answered"
    );
    assert_eq!(service.held_count(), 1);
    service.stop();
    // `stop` returns once the core took the held pulls; it answers them right after.
    wait_until("stop has the core answer the rest", || {
        hits.load(Ordering::SeqCst) == 2
    });
    assert_eq!(service.held_count(), 0);
    drop(core);
}

#[test]
fn a_burst_of_arrivals_rings_once_and_wakes_the_pull_once() {
    let service = PullHoldService::new();
    let bell = doorbell();
    service.attach_doorbells([(0, bell.clone())]);
    let _core = AsCore::enter(&bell);
    let hits = Arc::new(AtomicU32::new(0));
    service.hold(0, "TopicB", 0, held(0, i64::MAX, 7, &hits));
    service.hold(0, "TopicB", 0, held(0, i64::MAX, 8, &hits));
    bell.begin_drain();
    let before = bell.writes();
    // Dispatch runs on a stage thread here (the reput thread).
    std::thread::scope(|s| {
        s.spawn(|| {
            for offset in 1..=100 {
                service.notify_arrival("TopicB", 0, offset, 7, b"");
            }
        });
    });
    assert_eq!(
        bell.writes() - before,
        1,
        "one doorbell write for the burst"
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "nothing runs before the core looks"
    );
    bell.begin_drain();
    service.on_core_wake(0, &nothing_stored);
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "woken once; tag 8 keeps waiting"
    );
    assert_eq!(service.held_count(), 1);
    assert!(
        service.core_slot(0).notices.is_empty(),
        "one pass drained the burst"
    );
    // Dispatch run on the core itself (inline after an append) only marks its doorbell.
    bell.begin_drain();
    let before = bell.writes();
    service.notify_arrival("TopicB", 0, 101, 8, b"");
    assert_eq!(
        bell.writes(),
        before,
        "no eventfd write to its own doorbell"
    );
    assert!(
        bell.is_pending(),
        "the core sees it has work before it waits"
    );
    service.on_core_wake(0, &nothing_stored);
    assert_eq!(hits.load(Ordering::SeqCst), 2, "tag 8 woken by its arrival");
}

#[test]
fn a_full_notice_ring_falls_back_to_a_max_offset_recheck() {
    let service = PullHoldService::with_notice_capacity(4);
    let bell = doorbell();
    service.attach_doorbells([(0, bell.clone())]);
    let _core = AsCore::enter(&bell);
    let (busy, quiet) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    service.hold(0, "TopicF", 0, held(0, i64::MAX, 1, &busy));
    service.hold(0, "TopicF", 1, held(0, i64::MAX, 1, &quiet));
    // Four arrivals the busy queue's filter rejects fill the ring; the fifth, for the
    // quiet queue, does not fit.
    for offset in 1..=4 {
        service.notify_arrival("TopicF", 0, offset, 2, b"");
    }
    service.notify_arrival("TopicF", 1, 1, 1, b"");
    assert!(service.core_slot(0).overflow.load(Ordering::SeqCst));
    let max_offsets = |_: &str, queue_id: i32| if queue_id == 1 { 1 } else { 0 };
    service.on_core_wake(0, &max_offsets);
    assert_eq!(
        quiet.load(Ordering::SeqCst),
        1,
        "the dropped notice's pull is woken"
    );
    assert_eq!(
        busy.load(Ordering::SeqCst),
        0,
        "nothing matched the busy queue"
    );
    assert!(!service.core_slot(0).overflow.load(Ordering::SeqCst));
}

#[test]
fn property_filters_get_the_arrival_properties() {
    let service = PullHoldService::new();
    let hits = Arc::new(AtomicU32::new(0));
    let h = hits.clone();
    service.hold(
        0,
        "TopicS",
        0,
        HeldPull {
            offset: 0,
            deadline_ms: i64::MAX,
            matches_properties: true,
            matcher: Box::new(|_, props| props == b"a\x011\x02"),
            resume: Box::new(move || {
                h.fetch_add(1, Ordering::SeqCst);
            }),
        },
    );
    service.notify_arrival("TopicS", 0, 1, 0, b"a\x012\x02");
    service.on_core_wake(0, &nothing_stored);
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    service.notify_arrival("TopicS", 0, 2, 0, b"a\x011\x02");
    service.on_core_wake(0, &nothing_stored);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}
