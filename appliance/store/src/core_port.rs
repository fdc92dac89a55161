//! The store's doors for the network cores (DESIGN.md's pipeline): each attached core gets
//! its own single-producer ring of puts into the append stage and its own ring of
//! completions back, so a send crosses from its core to the append stage and back without
//! a lock, and the callback that builds its response runs on the core that owns the
//! connection, never on a stage thread.
//!
//! Bounds: a core's put ring holds `put_slots` puts; when it is full the put waits in the
//! core's own list of at most `put_slots` more, retried each time the core wakes, and is
//! refused with `SendQueueTimeout` (the broker's `[TIMEOUT_CLEAN_QUEUE]`) once it has
//! waited `waitTimeMillsInSendQueue`; with that list full too it is refused at once. A
//! core's completion ring holds as many completions as the core may have requests in flight
//! (the runtime's per-core bound), so a stage never finds it full in practice; if it ever
//! does, the completion runs on the stage thread and is counted.
//!
//! Wake-ups: every ring shares a doorbell (`Notifier`): the put rings ring the append
//! stage's, the completion rings ring their core's, once per stage batch.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_queue::ArrayQueue;
use ringmq_ring::{current_core, Notifier};
use ringmq_sync::LockExt;

use crate::stage_msg::{AppendMsg, Done};
use crate::types::{PutMessageStatus, PutResult};

/// Completions one wake of a core runs before it yields to the core's other work (the
/// rest run on the next pass, which the core is told to make at once).
const MAX_COMPLETIONS_PER_WAKE: usize = 1024;

/// `CorePorts::inline_core` when no core appends inline.
const NO_CORE: usize = usize::MAX;

/// One network core's rings.
pub(crate) struct CorePort {
    /// The core's loop waits on this; completions ring it.
    doorbell: Arc<Notifier>,
    /// Core → append stage. One producer (the core), one consumer (the stage).
    puts: ArrayQueue<AppendMsg>,
    /// Append and flush stages → core.
    completions: ArrayQueue<(Done, PutResult)>,
    /// Puts that found `puts` full, oldest first. Only the owning core locks it (the lock
    /// is never contended); `waiting_len` lets the stage see it without locking.
    waiting: Mutex<VecDeque<AppendMsg>>,
    waiting_len: AtomicUsize,
    /// A stage pushed completions since the core's doorbell was last rung.
    rung: AtomicBool,
    /// The core pushes its puts along after each pass (`end_pass`), so a put queued in
    /// its ring does not ring the append stage at once. Set by the core's first
    /// `end_pass`: a core that never calls it (tests driving a core by hand) rings per put.
    pushes_after_pass: AtomicBool,
    /// Puts queued this pass that have not rung the append stage yet.
    deferred: AtomicBool,
    /// Put requests this core handed the store, refused ones included.
    puts_received: CoreCount,
}

/// A count only its core writes, on a cache line of its own: the core adds with a plain
/// load and store (no locked instruction, no line shared with the other cores' counts or
/// with the fields the stages write), and any thread may read it.
#[repr(align(64))]
#[derive(Default)]
struct CoreCount(AtomicU64);

impl CoreCount {
    /// Only the owning core calls this.
    fn add_on_owning_core(&self, n: u64) {
        ringmq_sync::add_single_writer(&self.0, n);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Counters the metrics page shows.
#[derive(Default)]
pub(crate) struct PortCounters {
    /// Puts that waited for room in their core's ring.
    pub puts_waited: AtomicU64,
    /// Puts refused because they waited `waitTimeMillsInSendQueue`.
    pub queue_timeouts: AtomicU64,
    /// Completions run on a stage thread because their core's ring was full.
    pub completions_inline: AtomicU64,
}

/// Every attached core's port; a put's `Done::origin` is its port's position.
pub(crate) struct CorePorts {
    ports: Box<[CorePort]>,
    /// The core running an append batch inline right now ([`NO_CORE`]: none; the append
    /// thread does not set it). A core that finds the stage held by another core leaves
    /// its puts to be handed back by that core instead of waking the append thread.
    inline_core: AtomicUsize,
    /// The append stage's doorbell.
    append_doorbell: Arc<Notifier>,
    pub counters: PortCounters,
}

/// What became of a put handed to [`CorePorts::submit`].
pub(crate) enum Submitted {
    /// In the core's ring, or waiting for room in it.
    Queued,
    /// Not made on an attached core: the caller queues it on the shared path.
    NotACore(AppendMsg),
    /// The core's ring and its waiting list are both full.
    Full(AppendMsg),
}

impl CorePorts {
    /// Ports for the cores waking on `doorbells` (all servers' cores, the first server's
    /// in core order), `put_slots` puts and `completion_slots`
    /// completions each.
    pub fn new(
        doorbells: &[Arc<Notifier>],
        append_doorbell: Arc<Notifier>,
        put_slots: usize,
        completion_slots: usize,
    ) -> Self {
        assert!(put_slots > 0 && completion_slots > 0, "rings need slots");
        let ports = doorbells
            .iter()
            .map(|doorbell| CorePort {
                doorbell: doorbell.clone(),
                puts: ArrayQueue::new(put_slots),
                completions: ArrayQueue::new(completion_slots),
                waiting: Mutex::new(VecDeque::new()),
                waiting_len: AtomicUsize::new(0),
                rung: AtomicBool::new(false),
                pushes_after_pass: AtomicBool::new(false),
                deferred: AtomicBool::new(false),
                puts_received: CoreCount::default(),
            })
            .collect();
        CorePorts {
            ports,
            inline_core: AtomicUsize::new(NO_CORE),
            append_doorbell,
            counters: PortCounters::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.ports.len()
    }

    /// Puts in every core's ring and waiting list.
    pub fn queued(&self) -> usize {
        self.ports
            .iter()
            .map(|p| p.puts.len() + p.waiting_len.load(Ordering::Relaxed))
            .sum()
    }

    /// On a network core: counts a put request it received (the store's `put_requests`);
    /// false on any other thread, which counts it on the shared counter instead.
    pub fn count_put_request(&self) -> bool {
        match self.current() {
            Some((_, port)) => {
                port.puts_received.add_on_owning_core(1);
                true
            }
            None => false,
        }
    }

    /// Put requests the network cores received, summed over the cores.
    pub fn put_requests(&self) -> u64 {
        self.ports.iter().map(|p| p.puts_received.get()).sum()
    }

    /// The calling thread's port position, on an attached network core.
    pub fn current_index(&self) -> Option<usize> {
        self.current().map(|(index, _)| usize::from(index))
    }

    /// Core `core` holds the append stage to run its own puts inline.
    pub fn begin_inline(&self, core: usize) {
        self.inline_core.store(core, Ordering::SeqCst);
    }

    /// Core `core` released the stage after an inline batch of its own puts: every other
    /// core whose ring holds puts is told to append them itself (its next pass does), so
    /// each core copies only records it built. A core that found the stage held while
    /// `inline_core` named this one relies on this look (see [`Self::leave_to_inline_core`]).
    pub fn end_inline_and_hand_back(&self, core: usize) {
        self.inline_core.store(NO_CORE, Ordering::SeqCst);
        // Pairs with the fence in `leave_to_inline_core`: either that core saw `NO_CORE`
        // (and woke the append thread) or this look sees the puts it queued.
        std::sync::atomic::fence(Ordering::SeqCst);
        for (index, port) in self.ports.iter().enumerate() {
            if index != core
                && (!port.puts.is_empty() || port.waiting_len.load(Ordering::Relaxed) > 0)
            {
                port.deferred.store(true, Ordering::Relaxed);
                ringmq_ring::notify_core(&port.doorbell);
            }
        }
    }

    /// On a network core that found the append stage held: true when another core holds
    /// it inline, which hands this core's puts back when it is done; the core's next pass
    /// then appends them. False: the append thread holds it (or it was just released),
    /// and the caller wakes the thread as before.
    pub fn leave_to_inline_core(&self) -> bool {
        let Some((index, port)) = self.current() else {
            return false;
        };
        port.deferred.store(true, Ordering::Relaxed);
        // Pairs with the fence in `end_inline_and_hand_back`: this core's puts are in its
        // ring before `inline_core` is read.
        std::sync::atomic::fence(Ordering::SeqCst);
        let holder = self.inline_core.load(Ordering::SeqCst);
        holder != NO_CORE && holder != usize::from(index)
    }

    /// The calling thread's port and its position: the thread must be a network core
    /// whose doorbell was attached. A broker attaches the cores of both its servers (the
    /// main port and the VIP port, listenPort - 2), so core `i` of the first server is
    /// looked for at position `i` and any other core by its doorbell.
    fn current(&self) -> Option<(u16, &CorePort)> {
        let tag = current_core()?;
        if let Some(port) = self.ports.get(tag.index) {
            if tag.rings(&port.doorbell) {
                return Some((tag.index as u16, port));
            }
        }
        let i = self.ports.iter().position(|p| tag.rings(&p.doorbell))?;
        Some((i as u16, &self.ports[i]))
    }

    /// On a network core: queues `msg` (a put) in the core's ring, or behind it when full.
    pub fn submit(&self, mut msg: AppendMsg) -> Submitted {
        let Some((index, port)) = self.current() else {
            return Submitted::NotACore(msg);
        };
        if let AppendMsg::Put { done, .. } = &mut msg {
            done.origin = Some(index);
        }
        if port.waiting_len.load(Ordering::Relaxed) == 0 {
            match port.puts.push(msg) {
                Ok(()) => {
                    // Only the owning core touches these two flags.
                    if port.pushes_after_pass.load(Ordering::Relaxed) {
                        port.deferred.store(true, Ordering::Relaxed);
                    } else {
                        self.append_doorbell.notify();
                    }
                    return Submitted::Queued;
                }
                Err(back) => msg = back,
            }
        }
        let mut waiting = port.waiting.lock_unpoisoned();
        if waiting.len() >= port.puts.capacity() {
            return Submitted::Full(msg);
        }
        waiting.push_back(msg);
        port.waiting_len.store(waiting.len(), Ordering::Relaxed);
        self.counters.puts_waited.fetch_add(1, Ordering::Relaxed);
        Submitted::Queued
    }

    /// On a network core, after its pass: whether the pass queued puts that have not rung
    /// the append stage (the caller pushes them along: runs them or rings). From the first
    /// call on, the core's puts wait for this call instead of ringing one by one.
    pub fn end_pass(&self) -> bool {
        let Some((_, port)) = self.current() else {
            return false;
        };
        // Runs every pass: write the flags only when they change, so the stage reading
        // this port's ring does not see its cache line written each time.
        if !port.pushes_after_pass.load(Ordering::Relaxed) {
            port.pushes_after_pass.store(true, Ordering::Relaxed);
        }
        port.deferred.load(Ordering::Relaxed) && port.deferred.swap(false, Ordering::Relaxed)
    }

    /// Append stage: takes up to `max` puts from core `i`'s ring into `out`; returns the
    /// bytes taken.
    pub fn take_puts(
        &self,
        i: usize,
        out: &mut Vec<AppendMsg>,
        max: usize,
        max_bytes: usize,
    ) -> usize {
        let mut bytes = 0;
        let port = &self.ports[i];
        for _ in 0..max {
            if bytes >= max_bytes {
                break;
            }
            let Some(m) = port.puts.pop() else { break };
            bytes += m.put_bytes();
            out.push(m);
        }
        bytes
    }

    /// Stage thread: the put finished; its callback runs on its core (or here, for puts
    /// made on other threads). Call [`ring_cores`](Self::ring_cores) after a batch.
    pub fn complete(&self, done: Done, result: PutResult) {
        let Some(port) = done.origin.and_then(|i| self.ports.get(usize::from(i))) else {
            return run_callback(done, result);
        };
        match port.completions.push((done, result)) {
            Ok(()) => port.rung.store(true, Ordering::Release),
            Err((done, result)) => {
                self.counters
                    .completions_inline
                    .fetch_add(1, Ordering::Relaxed);
                run_callback(done, result);
            }
        }
    }

    /// After a batch (on a stage thread, or a core that ran it inline): rings each core
    /// that got completions (one wake-up per core per batch) or has puts waiting for the
    /// room this batch made.
    pub fn ring_cores(&self) {
        for port in self.ports.iter() {
            let rung = port.rung.swap(false, Ordering::AcqRel);
            if rung || port.waiting_len.load(Ordering::Relaxed) > 0 {
                // A core that appended inline only marks its own doorbell.
                ringmq_ring::notify_core(&port.doorbell);
            }
        }
    }

    /// On a network core: runs the completions queued for it, then moves waiting puts
    /// into its ring (refusing those that waited `wait_limit_ms`, 0 = no limit).
    pub fn run_current_core(&self, wait_limit_ms: u64) {
        let Some((_, port)) = self.current() else {
            return;
        };
        for _ in 0..MAX_COMPLETIONS_PER_WAKE {
            let Some((done, result)) = port.completions.pop() else {
                break;
            };
            run_callback(done, result);
        }
        if !port.completions.is_empty() {
            // Come back on the next pass rather than starve the core's connections.
            port.doorbell.notify();
        }
        if port.waiting_len.load(Ordering::Relaxed) > 0 {
            self.retry_waiting(port, wait_limit_ms);
        }
    }

    /// Moves waiting puts into the ring while it has room; refuses the expired ones.
    fn retry_waiting(&self, port: &CorePort, wait_limit_ms: u64) {
        let now = Instant::now();
        let mut moved = false;
        let mut waiting = port.waiting.lock_unpoisoned();
        while let Some(msg) = waiting.pop_front() {
            let waited_ms = msg.queued_for(now).as_millis() as u64;
            if wait_limit_ms > 0 && waited_ms >= wait_limit_ms {
                self.counters.queue_timeouts.fetch_add(1, Ordering::Relaxed);
                if let AppendMsg::Put { done, .. } = msg {
                    run_callback(done, PutResult::queue_timeout(waited_ms));
                }
                continue;
            }
            match port.puts.push(msg) {
                Ok(()) => moved = true,
                Err(back) => {
                    waiting.push_front(back);
                    break;
                }
            }
        }
        port.waiting_len.store(waiting.len(), Ordering::Relaxed);
        drop(waiting);
        if moved {
            self.append_doorbell.notify();
        }
    }

    /// A stage is gone: answers every put in the rings and waiting for room. The
    /// answers go back through the completion rings, so they run on their cores.
    pub fn fail_all(&self, status: PutMessageStatus) {
        for port in self.ports.iter() {
            while let Some(msg) = port.puts.pop() {
                if let AppendMsg::Put { done, .. } = msg {
                    self.complete(done, PutResult::failed(status));
                }
            }
        }
        self.fail_waiting(status);
    }

    /// Shutdown: answers every put still waiting for ring room.
    pub fn fail_waiting(&self, status: PutMessageStatus) {
        for port in self.ports.iter() {
            let drained: Vec<AppendMsg> = port.waiting.lock_unpoisoned().drain(..).collect();
            port.waiting_len.store(0, Ordering::Relaxed);
            for msg in drained {
                if let AppendMsg::Put { done, .. } = msg {
                    run_callback(done, PutResult::failed(status));
                }
            }
        }
    }
}

/// Runs a put's callback; a panic in it is logged and goes no further (its `Responder`,
/// dropped unanswered, answers SYSTEM_ERROR), so the thread running it keeps serving.
pub(crate) fn run_callback(done: Done, result: PutResult) {
    let callback = done.callback;
    if catch_unwind(AssertUnwindSafe(move || callback(result))).is_err() {
        tracing::error!(
            status = result.status.name(),
            "a put's completion callback panicked; its request was answered SYSTEM_ERROR"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::PutRequest;
    use bytes::BytesMut;
    use std::sync::mpsc;
    use std::time::Duration;

    fn put(tx: &mpsc::Sender<PutResult>) -> AppendMsg {
        let tx = tx.clone();
        AppendMsg::Put {
            req: PutRequest::new("CP", 0, 0, BytesMut::from(&b"x"[..]), 1),
            done: Done::new(Box::new(move |r| {
                let _ = tx.send(r);
            })),
            enqueued: Instant::now(),
        }
    }

    fn doorbell() -> Arc<Notifier> {
        Arc::new(Notifier::new().unwrap())
    }

    /// Off a network core a put is handed back for the shared path; on an attached core
    /// it goes into that core's ring and rings the append stage.
    #[test]
    fn puts_enter_the_ring_of_the_core_they_are_made_on() {
        let (core, stage) = (doorbell(), doorbell());
        let ports = CorePorts::new(std::slice::from_ref(&core), stage.clone(), 4, 16);
        let (tx, _rx) = mpsc::channel();
        assert!(matches!(ports.submit(put(&tx)), Submitted::NotACore(_)));
        ringmq_ring::enter_core(0, &core);
        stage.begin_drain();
        assert!(matches!(ports.submit(put(&tx)), Submitted::Queued));
        assert!(stage.is_pending(), "the append stage's doorbell was rung");
        let mut out = Vec::new();
        assert_eq!(ports.take_puts(0, &mut out, 8, usize::MAX), 1);
        let AppendMsg::Put { done, .. } = out.pop().unwrap() else {
            panic!("a put");
        };
        assert_eq!(done.origin, Some(0), "the put remembers its core");
        ringmq_ring::leave_core();
    }

    /// A take stops once it holds `max_bytes` (the batch's byte bound), passing it by at
    /// most the last put taken; the rest stay queued in order.
    #[test]
    fn a_take_stops_at_its_byte_budget() {
        let (core, stage) = (doorbell(), doorbell());
        let ports = CorePorts::new(std::slice::from_ref(&core), stage, 4, 16);
        let (tx, _rx) = mpsc::channel();
        ringmq_ring::enter_core(0, &core);
        for _ in 0..3 {
            assert!(matches!(ports.submit(put(&tx)), Submitted::Queued));
        }
        let mut out = Vec::new();
        assert_eq!(ports.take_puts(0, &mut out, 8, 2), 2, "two 1-byte puts");
        assert_eq!(out.len(), 2);
        assert_eq!(ports.take_puts(0, &mut out, 8, 0), 0, "no budget, no put");
        assert_eq!(
            ports.take_puts(0, &mut out, 8, 1),
            1,
            "the third is still there"
        );
        assert_eq!(out.len(), 3);
        ringmq_ring::leave_core();
    }

    /// A completion is not run by the stage: it waits in the core's ring, the core's
    /// doorbell is rung once for the whole batch, and the core runs it on its own thread.
    #[test]
    fn completions_run_on_their_core_after_one_doorbell_per_batch() {
        let (core, stage) = (doorbell(), doorbell());
        let ports = Arc::new(CorePorts::new(std::slice::from_ref(&core), stage, 4, 16));
        let (tx, rx) = mpsc::channel();
        let core_thread = std::thread::current().id();
        let ran_on = Arc::new(Mutex::new(Vec::new()));
        let dones: Vec<Done> = (0..3)
            .map(|_| {
                let (tx, ran_on) = (tx.clone(), ran_on.clone());
                Done {
                    callback: Box::new(move |r| {
                        ran_on.lock().unwrap().push(std::thread::current().id());
                        let _ = tx.send(r);
                    }),
                    origin: Some(0),
                }
            })
            .collect();
        core.begin_drain();
        let stage_ports = ports.clone();
        std::thread::spawn(move || {
            for d in dones {
                stage_ports.complete(d, PutResult::failed(PutMessageStatus::PutOk));
            }
            stage_ports.ring_cores();
        })
        .join()
        .unwrap();
        assert!(rx.try_recv().is_err(), "nothing ran on the stage thread");
        assert_eq!(core.writes(), 1, "one doorbell write for three completions");
        ringmq_ring::enter_core(0, &core);
        ports.run_current_core(0);
        ringmq_ring::leave_core();
        assert_eq!(rx.try_iter().count(), 3);
        assert!(ran_on.lock().unwrap().iter().all(|t| *t == core_thread));
    }

    /// Two cores, core 0 appending inline: core 1 finds the stage held and leaves its
    /// puts to core 0 (no wake-up of the append thread); when core 0 releases the stage it
    /// rings core 1, whose next pass then reports its puts as not pushed along.
    #[test]
    fn a_core_appending_inline_hands_the_other_cores_puts_back_to_them() {
        let (core0, core1, stage) = (doorbell(), doorbell(), doorbell());
        let ports = Arc::new(CorePorts::new(
            &[core0.clone(), core1.clone()],
            stage,
            4,
            16,
        ));
        ringmq_ring::enter_core(0, &core0);
        assert_eq!(ports.current_index(), Some(0));
        assert!(!ports.leave_to_inline_core(), "no core appends inline yet");
        ports.begin_inline(0);
        assert!(
            !ports.leave_to_inline_core(),
            "a core never waits on itself"
        );
        let other = ports.clone();
        let (core1_in, core1_out) = (core1.clone(), core1.clone());
        std::thread::spawn(move || {
            ringmq_ring::enter_core(1, &core1_in);
            let (tx, _rx) = mpsc::channel();
            assert!(
                !other.end_pass(),
                "from its first pass on, puts wait for the pass end"
            );
            assert!(matches!(other.submit(put(&tx)), Submitted::Queued));
            assert!(other.end_pass(), "its put is not pushed along yet");
            assert!(
                other.leave_to_inline_core(),
                "core 0 holds the stage inline"
            );
            ringmq_ring::leave_core();
        })
        .join()
        .unwrap();
        core1_out.begin_drain();
        ports.end_inline_and_hand_back(0);
        assert!(core1_out.is_pending(), "core 1 is rung for its own puts");
        assert_eq!(core0.writes(), 0, "core 0 has nothing handed back");
        ringmq_ring::leave_core();
        ringmq_ring::enter_core(1, &core1);
        assert!(
            ports.end_pass(),
            "core 1's next pass appends what it was handed back"
        );
        let mut out = Vec::new();
        assert_eq!(ports.take_puts(1, &mut out, 8, usize::MAX), 1);
        ringmq_ring::leave_core();
    }

    /// Put requests count on their core's own counter, others on the caller's; the sum
    /// covers every core.
    #[test]
    fn put_requests_count_per_core() {
        let (core0, core1, stage) = (doorbell(), doorbell(), doorbell());
        let ports = Arc::new(CorePorts::new(
            &[core0.clone(), core1.clone()],
            stage,
            4,
            16,
        ));
        assert!(!ports.count_put_request(), "not a network core");
        ringmq_ring::enter_core(0, &core0);
        assert!(ports.count_put_request());
        assert!(ports.count_put_request());
        ringmq_ring::leave_core();
        let other = ports.clone();
        std::thread::spawn(move || {
            ringmq_ring::enter_core(1, &core1);
            assert!(other.count_put_request());
            ringmq_ring::leave_core();
        })
        .join()
        .unwrap();
        assert_eq!(ports.put_requests(), 3);
    }

    /// A full ring is back-pressure, not growth: the next puts wait in the core's bounded
    /// list, are refused with SendQueueTimeout once they waited the limit, and a put
    /// beyond the list is refused at once.
    #[test]
    fn a_full_ring_holds_puts_then_refuses_them_after_the_wait_limit() {
        let (core, stage) = (doorbell(), doorbell());
        let ports = CorePorts::new(std::slice::from_ref(&core), stage, 2, 16);
        let (tx, rx) = mpsc::channel();
        ringmq_ring::enter_core(0, &core);
        for _ in 0..4 {
            assert!(matches!(ports.submit(put(&tx)), Submitted::Queued));
        }
        assert!(matches!(ports.submit(put(&tx)), Submitted::Full(_)));
        assert_eq!(ports.queued(), 4);
        ports.run_current_core(10_000);
        assert!(rx.try_recv().is_err(), "within the limit they keep waiting");
        std::thread::sleep(Duration::from_millis(20));
        ports.run_current_core(10);
        let refused: Vec<PutResult> = rx.try_iter().collect();
        assert_eq!(refused.len(), 2, "the two waiting puts");
        for r in &refused {
            assert_eq!(r.status, PutMessageStatus::SendQueueTimeout);
            assert!(r.queued_ms >= 10, "{r:?}");
        }
        assert_eq!(ports.counters.queue_timeouts.load(Ordering::Relaxed), 2);
        // The ring is still full, so the next put waits; once the stage takes from the
        // ring, the core's next wake moves it in.
        assert!(matches!(ports.submit(put(&tx)), Submitted::Queued));
        let mut out = Vec::new();
        assert_eq!(ports.take_puts(0, &mut out, 8, usize::MAX), 2);
        assert_eq!(ports.queued(), 1);
        ports.run_current_core(10_000);
        assert_eq!(
            ports.take_puts(0, &mut out, 8, usize::MAX),
            1,
            "moved into the ring"
        );
        assert_eq!(ports.queued(), 0);
        ringmq_ring::leave_core();
    }

    /// A panicking callback is contained: the thread running completions carries on.
    #[test]
    fn a_panicking_completion_does_not_stop_the_core() {
        let (core, stage) = (doorbell(), doorbell());
        let ports = CorePorts::new(std::slice::from_ref(&core), stage, 2, 16);
        let (tx, rx) = mpsc::channel();
        ports.complete(
            Done {
                callback: Box::new(|_| panic!("response building failed")),
                origin: Some(0),
            },
            PutResult::failed(PutMessageStatus::PutOk),
        );
        ports.complete(
            Done {
                callback: Box::new(move |r| {
                    let _ = tx.send(r);
                }),
                origin: Some(0),
            },
            PutResult::failed(PutMessageStatus::PutOk),
        );
        ringmq_ring::enter_core(0, &core);
        ports.run_current_core(0);
        ringmq_ring::leave_core();
        assert_eq!(
            rx.try_iter().count(),
            1,
            "the completion after the panic ran"
        );
    }
}
