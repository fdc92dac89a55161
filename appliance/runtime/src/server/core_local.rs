//! What a network core's modules share, below all of them: the thread-shared half of a
//! core (`CoreShared`: inbox messages, counters, the coalesced wake-up), the core-owned
//! half (`CoreLocal`: its connections, in-flight admission, the per-core memory bounds and
//! their enforcement), the counter helper and the vectored-write bound. `core_loop`,
//! `conn`, `recv` and `file_range` import from here; this module imports none of them.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_queue::SegQueue;
use ringmq_remoting::{FrameDecoder, RemotingCommand};

use super::{CoreStats, RequestHandler, Response, ServerTuning};
use crate::stall::StallMeter;
use ringmq_ring::Notifier;

/// Chunks per vectored write (well under IOV_MAX = 1024).
pub(crate) const MAX_IOVECS: usize = 64;

/// Ticks a core keeps asking after it freed large buffers: mimalloc returns a freed range
/// to the OS only after its purge delay (1 s by default), and only when some thread calls
/// into it, so an idle core would otherwise keep a burst's memory for good.
pub(crate) const ALLOCATOR_COLLECT_TICKS: u8 = 5;

/// What the per-core bounds need to know of a connection to pick one to close.
pub(crate) trait CoreConn {
    fn id(&self) -> u64;
    fn peer(&self) -> SocketAddr;
    /// Bytes of the unfinished frame it holds.
    fn partial_bytes(&self) -> usize;
    /// Bytes of queued output counted against the core's bound.
    fn counted_output_bytes(&self) -> usize;
    /// Whether its reading is paused because its output backed up.
    fn is_read_paused(&self) -> bool;
    fn close(&self, reason: &str);
}

/// A message into a core's inbox, from any thread (including the core itself).
pub(crate) enum CoreMsg {
    /// A deferred answer; `None` means the Responder was dropped unanswered.
    Respond {
        conn_id: u64,
        slot: u32,
        generation: u32,
        response: Option<Response>,
    },
    /// `Connection::send_oneway`.
    Send {
        conn_id: u64,
        command: RemotingCommand,
    },
    /// `Connection::close`.
    Close { conn_id: u64 },
    /// A freshly accepted connection handed over by the acceptor core.
    Adopt(std::net::TcpStream),
    /// `CoreHandle::execute`: run a closure on the core thread.
    Run(Box<dyn FnOnce() + Send>),
    /// `Server::shutdown`.
    Shutdown,
}

/// The thread-shared part of a core.
pub(crate) struct CoreShared {
    pub(crate) index: usize,
    pub(crate) cpu: usize,
    pub(crate) name: String,
    /// Unbounded queue, but every producer is bounded: each `Respond` holds one in-flight
    /// slot (at most `max_in_flight_total / cores` exist), `Send` is counted against
    /// `max_queued_sends_per_core`, `Close` happens once per connection and `Adopt` once
    /// per accepted connection.
    pub(crate) inbox: SegQueue<CoreMsg>,
    pub(crate) queued_sends: AtomicUsize,
    pub(crate) max_queued_sends: usize,
    pub(crate) notifier: Arc<Notifier>,
    pub(crate) meter: StallMeter,
    pub(crate) counters: Counters,
}

/// Metrics written by the core thread only (load + store, no read-modify-write locking).
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) connections: AtomicU64,
    pub(crate) in_flight: AtomicU64,
    pub(crate) requests: AtomicU64,
    pub(crate) rejected_busy: AtomicU64,
    pub(crate) bad_frames: AtomicU64,
    pub(crate) read_pauses: AtomicU64,
    pub(crate) idle_closed: AtomicU64,
    pub(crate) recv_multishot_arms: AtomicU64,
    pub(crate) recv_buffers_exhausted: AtomicU64,
    pub(crate) partial_frame_bytes: AtomicU64,
    pub(crate) partial_frame_closes: AtomicU64,
    pub(crate) output_bytes: AtomicU64,
    pub(crate) output_bytes_peak: AtomicU64,
    pub(crate) output_closes: AtomicU64,
    pub(crate) accept_errors: AtomicU64,
    pub(crate) accept_refused_fd_reserve: AtomicU64,
    pub(crate) tls_handshakes: AtomicU64,
    pub(crate) tls_refused: AtomicU64,
    /// Set once at start: whether this core's provided buffer ring is up.
    pub(crate) recv_multishot: AtomicBool,
}

/// Adds `n` to a counter only its owning thread writes.
pub(crate) use ringmq_sync::add_single_writer as bump;

thread_local! {
    /// Address of the `CoreShared` whose loop runs on this thread (0 elsewhere): a post
    /// from the core to itself needs no eventfd write, the loop drains it next iteration.
    pub(crate) static CURRENT_CORE: Cell<usize> = const { Cell::new(0) };
    /// When this network core's current pass started (None off the network cores).
    static PASS_STARTED: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Messages the core posted to itself (a put completed on its own thread answers its
    /// request this way): kept apart from the inbox, whose queue costs atomic operations
    /// that only other threads' posts need. Drained with the inbox, these first.
    static LOCAL_POSTS: RefCell<VecDeque<CoreMsg>> = const { RefCell::new(VecDeque::new()) };
}

/// The oldest message this thread's core posted to itself and has not handled yet.
pub(crate) fn take_local_post() -> Option<CoreMsg> {
    LOCAL_POSTS.with(|posts| posts.borrow_mut().pop_front())
}

/// Whether this thread's core posted itself messages it has not handled yet.
pub(crate) fn has_local_posts() -> bool {
    LOCAL_POSTS.with(|posts| !posts.borrow().is_empty())
}

/// The time as the calling network core last read it: the start of its current pass, or
/// of the completions run after appending inline. Request handlers and their completions
/// measure latency with it instead of reading the clock per request (a clock read costs
/// tens of nanoseconds in a VM); on any other thread, the clock now.
pub fn pass_clock() -> Instant {
    PASS_STARTED.with(Cell::get).unwrap_or_else(Instant::now)
}

/// Stamps the calling network core's pass clock (`pass_clock`).
pub(crate) fn set_pass_clock(now: Instant) {
    PASS_STARTED.with(|c| c.set(Some(now)));
}

impl CoreShared {
    fn is_current(&self) -> bool {
        CURRENT_CORE.with(|c| c.get() == self as *const Self as usize)
    }

    /// Queues a message and wakes the core (coalesced). A post from the core's own thread
    /// needs neither the shared queue nor a wake-up: the loop drains it next iteration.
    pub(crate) fn post(&self, msg: CoreMsg) {
        if self.is_current() {
            LOCAL_POSTS.with(|posts| posts.borrow_mut().push_back(msg));
        } else {
            self.inbox.push(msg);
            self.notifier.notify();
        }
    }

    /// Queues a `send_oneway` unless the per-core bound is reached.
    pub(crate) fn post_send(&self, conn_id: u64, command: RemotingCommand) -> bool {
        self.post_bounded(CoreMsg::Send { conn_id, command })
    }

    /// Queues a message counted against `max_queued_sends_per_core`; false when full.
    pub(crate) fn post_bounded(&self, msg: CoreMsg) -> bool {
        if self.queued_sends.fetch_add(1, Ordering::AcqRel) >= self.max_queued_sends {
            self.queued_sends.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        self.post(msg);
        true
    }

    pub(crate) fn stats(&self) -> CoreStats {
        let c = &self.counters;
        CoreStats {
            index: self.index,
            cpu: self.cpu,
            connections: c.connections.load(Ordering::Relaxed),
            in_flight: c.in_flight.load(Ordering::Relaxed),
            requests: c.requests.load(Ordering::Relaxed),
            rejected_busy: c.rejected_busy.load(Ordering::Relaxed),
            bad_frames: c.bad_frames.load(Ordering::Relaxed),
            read_pauses: c.read_pauses.load(Ordering::Relaxed),
            idle_closed: c.idle_closed.load(Ordering::Relaxed),
            wakeups: self.notifier.writes(),
            recv_multishot: c.recv_multishot.load(Ordering::Relaxed),
            recv_multishot_arms: c.recv_multishot_arms.load(Ordering::Relaxed),
            recv_buffers_exhausted: c.recv_buffers_exhausted.load(Ordering::Relaxed),
            partial_frame_bytes: c.partial_frame_bytes.load(Ordering::Relaxed),
            partial_frame_closes: c.partial_frame_closes.load(Ordering::Relaxed),
            output_bytes: c.output_bytes.load(Ordering::Relaxed),
            output_bytes_peak: c.output_bytes_peak.load(Ordering::Relaxed),
            output_closes: c.output_closes.load(Ordering::Relaxed),
            accept_errors: c.accept_errors.load(Ordering::Relaxed),
            accept_refused_fd_reserve: c.accept_refused_fd_reserve.load(Ordering::Relaxed),
            tls_handshakes: c.tls_handshakes.load(Ordering::Relaxed),
            tls_refused: c.tls_refused.load(Ordering::Relaxed),
            loop_stats: self.meter.stats(),
        }
    }
}

/// Hasher for connection ids: they are small distinct integers (core index in the top
/// bits, a sequence below), so one multiply mixes them well enough. SipHash showed up in
/// the per-response lookup of the owning connection.
#[derive(Default)]
pub(crate) struct ConnIdHasher(u64);

impl Hasher for ConnIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ (n >> 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub(crate) type ConnMap<C> = HashMap<u64, Rc<C>, BuildHasherDefault<ConnIdHasher>>;

/// Bytes one core holds for its open connections, checked against the per-core bounds
/// (`ServerTuning::max_partial_frame_bytes_per_core`, `max_output_bytes_per_core`). Each
/// connection adds and removes its own share (`ConnLocal`); a closed connection's share is
/// removed at once, although its buffers go a moment later, when its tasks end.
pub(crate) struct CoreBudget {
    shared: Arc<CoreShared>,
    partial_bytes: Cell<usize>,
    output_bytes: Cell<usize>,
}

impl CoreBudget {
    pub(crate) fn new(shared: Arc<CoreShared>) -> Self {
        Self {
            shared,
            partial_bytes: Cell::new(0),
            output_bytes: Cell::new(0),
        }
    }

    pub(crate) fn partial_bytes(&self) -> usize {
        self.partial_bytes.get()
    }

    pub(crate) fn output_bytes(&self) -> usize {
        self.output_bytes.get()
    }

    /// Replaces one connection's `old` partial-frame bytes with `new`.
    pub(crate) fn move_partial(&self, old: usize, new: usize) {
        let total = self.partial_bytes.get().saturating_sub(old) + new;
        self.partial_bytes.set(total);
        self.shared
            .counters
            .partial_frame_bytes
            .store(total as u64, Ordering::Relaxed);
    }

    pub(crate) fn add_output(&self, n: usize) {
        let total = self.output_bytes.get() + n;
        self.output_bytes.set(total);
        let c = &self.shared.counters;
        c.output_bytes.store(total as u64, Ordering::Relaxed);
        if total as u64 > c.output_bytes_peak.load(Ordering::Relaxed) {
            c.output_bytes_peak.store(total as u64, Ordering::Relaxed);
        }
    }

    pub(crate) fn sub_output(&self, n: usize) {
        let total = self.output_bytes.get().saturating_sub(n);
        self.output_bytes.set(total);
        self.shared
            .counters
            .output_bytes
            .store(total as u64, Ordering::Relaxed);
    }
}

/// Lets a repeated warning through at most once per interval; the lines in between are
/// counted and reported with the next one let through.
pub(crate) struct LogLimiter {
    interval: Duration,
    last: Cell<Option<Instant>>,
    suppressed: Cell<u64>,
}

impl LogLimiter {
    pub(crate) const fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: Cell::new(None),
            suppressed: Cell::new(0),
        }
    }

    /// `Some(lines suppressed since the last one)` when this line may be logged.
    pub(crate) fn allow(&self, now: Instant) -> Option<u64> {
        match self.last.get() {
            Some(last) if now.saturating_duration_since(last) < self.interval => {
                self.suppressed.set(self.suppressed.get() + 1);
                None
            }
            _ => {
                self.last.set(Some(now));
                Some(self.suppressed.replace(0))
            }
        }
    }
}

/// The core-owned state. Generic over the connection type `C` (`conn::ConnLocal`, named
/// there as `conn::CoreLocal`) so this module needs nothing from the modules above it.
pub(crate) struct CoreLocal<C> {
    pub(crate) shared: Arc<CoreShared>,
    /// Every core of the server, for round-robin hand-off by the acceptor.
    pub(crate) peers: Vec<Arc<CoreShared>>,
    pub(crate) handler: Arc<dyn RequestHandler>,
    pub(crate) decoder: FrameDecoder,
    pub(crate) tuning: ServerTuning,
    /// Connections receive with multishot into this core's provided buffer ring (the mode
    /// asked for, and the ring was set up).
    pub(crate) recv_multishot: bool,
    pub(crate) conns: RefCell<ConnMap<C>>,
    pub(crate) next_conn_seq: Cell<u64>,
    /// Deferred requests outstanding on this core (admission against `in_flight_limit`).
    pub(crate) in_flight: Cell<usize>,
    pub(crate) in_flight_limit: usize,
    pub(crate) per_conn_limit: usize,
    pub(crate) idle_timeout: Option<Duration>,
    /// Refreshed at the top of every loop iteration: a coarse clock for activity stamps.
    pub(crate) now: Cell<Instant>,
    pub(crate) draining: Cell<bool>,
    pub(crate) listener_fd: Cell<Option<RawFd>>,
    pub(crate) done: Cell<bool>,
    pub(crate) budget: Rc<CoreBudget>,
    pub(crate) partial_warn: LogLimiter,
    pub(crate) output_warn: LogLimiter,
    /// Allocator collects still due after large buffers were freed (`allocator_sweeper`).
    pub(crate) collects_due: Cell<u8>,
}

impl<C: CoreConn> CoreLocal<C> {
    pub(crate) fn now(&self) -> Instant {
        self.now.get()
    }

    pub(crate) fn in_flight_add(&self, n: usize) {
        self.in_flight.set(self.in_flight.get() + n);
        self.shared
            .counters
            .in_flight
            .store(self.in_flight.get() as u64, Ordering::Relaxed);
    }

    pub(crate) fn in_flight_sub(&self, n: usize) {
        self.in_flight.set(self.in_flight.get().saturating_sub(n));
        self.shared
            .counters
            .in_flight
            .store(self.in_flight.get() as u64, Ordering::Relaxed);
    }

    /// Closes connections while the core's partial-frame bytes are over their bound: the
    /// one holding the most first (ties: the oldest). A frame buffer only grows with bytes
    /// that arrived, so the victims are the clients that sent the most without finishing
    /// a frame.
    pub(crate) fn enforce_partial_bound(&self) {
        let bound = self.tuning.max_partial_frame_bytes_per_core;
        while self.budget.partial_bytes() > bound {
            let victim = self
                .conns
                .borrow()
                .values()
                .filter(|c| c.partial_bytes() > 0)
                .max_by_key(|c| (c.partial_bytes(), std::cmp::Reverse(c.id())))
                .cloned();
            let Some(victim) = victim else { break };
            bump(&self.shared.counters.partial_frame_closes, 1);
            if let Some(suppressed) = self.partial_warn.allow(Instant::now()) {
                tracing::warn!(
                    core = self.shared.index,
                    conn = victim.id(),
                    peer = %victim.peer(),
                    held_bytes = victim.partial_bytes(),
                    core_bytes = self.budget.partial_bytes(),
                    bound_bytes = bound,
                    suppressed,
                    "closing the connection holding the most bytes of unfinished frames: \
                     this core is over ringmq.net.maxPartialFrameBytesPerCore"
                );
            }
            victim.close("partial frames over the core's bound");
        }
    }

    /// Closes connections while the core's queued output is over its bound: the one with
    /// the most output first, preferring connections whose reading is already paused
    /// (their client does not keep up).
    pub(crate) fn enforce_output_bound(&self) {
        let bound = self.tuning.max_output_bytes_per_core;
        while self.budget.output_bytes() > bound {
            let victim = self
                .conns
                .borrow()
                .values()
                .filter(|c| c.counted_output_bytes() > 0)
                .max_by_key(|c| (c.is_read_paused(), c.counted_output_bytes()))
                .cloned();
            let Some(victim) = victim else { break };
            bump(&self.shared.counters.output_closes, 1);
            if let Some(suppressed) = self.output_warn.allow(Instant::now()) {
                tracing::warn!(
                    core = self.shared.index,
                    conn = victim.id(),
                    peer = %victim.peer(),
                    held_bytes = victim.counted_output_bytes(),
                    core_bytes = self.budget.output_bytes(),
                    bound_bytes = bound,
                    suppressed,
                    "closing the connection with the most unsent output: this core is over \
                     ringmq.net.maxOutputBytesPerCore"
                );
            }
            victim.close("output over the core's bound");
        }
    }

    /// A connection freed (or is about to free) a large buffer: ask the allocator to give
    /// memory back for the next few ticks.
    pub(crate) fn note_large_release(&self) {
        self.collects_due.set(ALLOCATOR_COLLECT_TICKS);
    }
}
