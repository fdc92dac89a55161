//! One network core: a pinned thread running its own compio runtime on io_uring, the
//! loop that drives it (and counts stalls), its inbox of cross-thread messages, its
//! provided buffer ring for multishot receives, the acceptor (the first core's round-robin
//! hand-out, or one `SO_REUSEPORT` listener per core), the idle sweeper and the shutdown
//! drain.
//!
//! Everything in `CoreLocal` is owned by the core thread (`Rc`/`Cell`, no locks);
//! `CoreShared` is the part other threads may touch: the inbox, its eventfd notifier and
//! the metrics.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::SegQueue;
use ringmq_remoting::{FrameDecoder, RemotingCommand, ResponseCode};

use super::conn::{self, ConnLocal, Phase};
use super::{
    response_for, ConnShared, Connection, CoreStats, ListenMode, RecvMode, RequestHandler,
    Response, ServerConfig, ServerTuning,
};
use crate::notify::Notifier;
use crate::stall::StallMeter;

/// Inbox messages handled per loop iteration; the rest wait for the next iteration so
/// one burst cannot stall the core's sockets.
const MAX_INBOX_BATCH: usize = 4096;
/// How often the drain re-checks whether every deferred answer arrived.
const DRAIN_POLL: Duration = Duration::from_millis(2);
/// After failing leftover requests, how long the drain lets writers flush.
const DRAIN_FLUSH_LIMIT: Duration = Duration::from_secs(1);
/// Most buffers one provided buffer ring can hold (io_uring rings are a power of two below
/// 65536 entries).
const MAX_RECV_BUFFER_COUNT: u16 = 32_768;
/// Bound on one core's provided buffer memory (`recv_buffer_count * recv_buffer_bytes`):
/// every buffer is allocated up front, so a typo must not ask for tens of GiB.
const MAX_RECV_POOL_BYTES: usize = 1 << 30;

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
    inbox: SegQueue<CoreMsg>,
    queued_sends: AtomicUsize,
    max_queued_sends: usize,
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
    /// Set once at start: whether this core's provided buffer ring is up.
    pub(crate) recv_multishot: AtomicBool,
}

/// Adds `n` to a counter only its owning thread writes.
pub(crate) fn bump(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

thread_local! {
    /// Address of the `CoreShared` whose loop runs on this thread (0 elsewhere): a post
    /// from the core to itself needs no eventfd write, the loop drains it next iteration.
    static CURRENT_CORE: Cell<usize> = const { Cell::new(0) };
}

impl CoreShared {
    fn is_current(&self) -> bool {
        CURRENT_CORE.with(|c| c.get() == self as *const Self as usize)
    }

    /// Queues a message and wakes the core (coalesced).
    pub(crate) fn post(&self, msg: CoreMsg) {
        self.inbox.push(msg);
        if !self.is_current() {
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

pub(crate) type ConnMap = HashMap<u64, Rc<ConnLocal>, BuildHasherDefault<ConnIdHasher>>;

/// The core-owned state.
pub(crate) struct CoreLocal {
    pub(crate) shared: Arc<CoreShared>,
    /// Every core of the server, for round-robin hand-off by the acceptor.
    peers: Vec<Arc<CoreShared>>,
    pub(crate) handler: Arc<dyn RequestHandler>,
    pub(crate) decoder: FrameDecoder,
    pub(crate) tuning: ServerTuning,
    /// Connections receive with multishot into this core's provided buffer ring (the mode
    /// asked for, and the ring was set up).
    pub(crate) recv_multishot: bool,
    pub(crate) conns: RefCell<ConnMap>,
    next_conn_seq: Cell<u64>,
    /// Deferred requests outstanding on this core (admission against `in_flight_limit`).
    pub(crate) in_flight: Cell<usize>,
    pub(crate) in_flight_limit: usize,
    pub(crate) per_conn_limit: usize,
    idle_timeout: Option<Duration>,
    /// Refreshed at the top of every loop iteration: a coarse clock for activity stamps.
    now: Cell<Instant>,
    pub(crate) draining: Cell<bool>,
    listener_fd: Cell<Option<RawFd>>,
    done: Cell<bool>,
}

impl CoreLocal {
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

    /// Called when both tasks of a connection ended.
    pub(crate) fn forget(&self, conn: &ConnLocal) {
        if self
            .conns
            .borrow_mut()
            .remove(&conn.handle.inner.id)
            .is_some()
        {
            let c = &self.shared.counters.connections;
            c.store(
                c.load(Ordering::Relaxed).saturating_sub(1),
                Ordering::Relaxed,
            );
        }
        let outstanding = conn.deferred.borrow_mut().clear();
        self.in_flight_sub(outstanding);
        let handler = self.handler.clone();
        let handle = conn.handle.clone();
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler.on_close(&handle)))
            .is_err()
        {
            tracing::error!(
                core = self.shared.index,
                conn = handle.inner.id,
                "RequestHandler::on_close panicked"
            );
        }
    }

    /// Handles up to `MAX_INBOX_BATCH` inbox messages.
    fn drain_inbox(self: &Rc<Self>) {
        if self.shared.notifier.is_pending() {
            self.shared.notifier.begin_drain();
        }
        for _ in 0..MAX_INBOX_BATCH {
            let Some(msg) = self.shared.inbox.pop() else {
                break;
            };
            match msg {
                CoreMsg::Respond {
                    conn_id,
                    slot,
                    generation,
                    response,
                } => self.complete(conn_id, slot, generation, response),
                CoreMsg::Send { conn_id, command } => {
                    self.shared.queued_sends.fetch_sub(1, Ordering::AcqRel);
                    let conn = self.conns.borrow().get(&conn_id).cloned();
                    match conn {
                        Some(conn) if conn.phase() != Phase::Closed => {
                            if conn.output_backed_up(&self.tuning) {
                                tracing::debug!(
                                    conn = conn_id,
                                    "dropping send_oneway: connection output backed up"
                                );
                            } else {
                                conn.push_request(&command);
                                conn.wake_writer();
                            }
                        }
                        _ => tracing::trace!(
                            conn = conn_id,
                            "send_oneway to a closed connection dropped"
                        ),
                    }
                }
                CoreMsg::Run(f) => {
                    self.shared.queued_sends.fetch_sub(1, Ordering::AcqRel);
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
                        tracing::error!(
                            core = self.shared.index,
                            "a closure run by CoreHandle::execute panicked"
                        );
                    }
                }
                CoreMsg::Close { conn_id } => {
                    let conn = self.conns.borrow().get(&conn_id).cloned();
                    if let Some(conn) = conn {
                        conn.close("closed by Connection::close()");
                    }
                }
                CoreMsg::Adopt(stream) => {
                    if self.draining.get() {
                        continue; // dropping the stream closes it: we are shutting down
                    }
                    match compio::net::TcpStream::from_std(stream) {
                        Ok(s) => self.adopt(s),
                        Err(e) => tracing::warn!(
                            core = self.shared.index,
                            "cannot adopt a connection: {e}"
                        ),
                    }
                }
                CoreMsg::Shutdown => {
                    if !self.draining.get() {
                        self.draining.set(true);
                        let core = self.clone();
                        compio::runtime::spawn(async move { core.drain().await }).detach();
                    }
                }
            }
        }
    }

    /// Delivers a deferred answer to its connection, if the request is still pending.
    fn complete(&self, conn_id: u64, slot: u32, generation: u32, response: Option<Response>) {
        let conn = self.conns.borrow().get(&conn_id).cloned();
        let Some(conn) = conn else {
            // The connection closed first; its slots were released when it closed.
            return;
        };
        let Some(pending) = conn.deferred.borrow_mut().remove(slot, generation) else {
            tracing::debug!(conn = conn_id, slot, "stale deferred answer ignored");
            return;
        };
        self.in_flight_sub(1);
        if pending.oneway || conn.phase() == Phase::Closed {
            return;
        }
        let response = match response {
            Some(r) => r,
            None => {
                tracing::error!(
                    conn = conn_id,
                    opaque = pending.opaque,
                    code = pending.request_code,
                    "a Responder was dropped without answering; sending SYSTEM_ERROR"
                );
                response_for(
                    pending.opaque,
                    pending.serialize_type,
                    ResponseCode::SystemError,
                    format!(
                        "request code {} was dropped by the server without an answer",
                        pending.request_code
                    ),
                )
                .into()
            }
        };
        conn.push_response(response, pending.opaque);
        conn.wake_writer();
    }

    /// Registers an accepted connection and starts its reader and writer tasks.
    fn adopt(self: &Rc<Self>, stream: compio::net::TcpStream) {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY failed: {e}");
        }
        let (peer, local) = match (stream.peer_addr(), stream.local_addr()) {
            (Ok(p), Ok(l)) => (p, l),
            (Err(e), _) | (_, Err(e)) => {
                tracing::debug!("accepted connection vanished before setup: {e}");
                return;
            }
        };
        let seq = self.next_conn_seq.get();
        self.next_conn_seq.set(seq + 1);
        let id = ((self.shared.index as u64) << 48) | (seq & ((1 << 48) - 1));
        let handle = Connection {
            inner: Arc::new(ConnShared {
                id,
                peer,
                local,
                alive: AtomicBool::new(true),
                core: self.shared.clone(),
            }),
        };
        let conn = Rc::new(ConnLocal::new(handle, stream.as_raw_fd(), self.now()));
        self.conns.borrow_mut().insert(id, conn.clone());
        bump(&self.shared.counters.connections, 1);
        tracing::debug!(core = self.shared.index, conn = id, %peer, "connection accepted");
        let (read_half, write_half) = stream.into_split();
        compio::runtime::spawn(conn::run_reader(self.clone(), conn.clone(), read_half)).detach();
        compio::runtime::spawn(conn::run_writer(self.clone(), conn, write_half)).detach();
    }

    /// Accepts connections: as the single acceptor, handing them round-robin to every
    /// core; with a `SO_REUSEPORT` listener per core, keeping them on this core.
    async fn accept_loop(self: Rc<Self>, listener: compio::net::TcpListener) {
        let hand_out = self.tuning.listen_mode == ListenMode::Acceptor;
        let mut next = 0usize;
        loop {
            let accepted = listener.accept().await;
            if self.draining.get() {
                break;
            }
            match accepted {
                Ok((stream, _peer)) => {
                    let target = if hand_out {
                        next % self.peers.len()
                    } else {
                        self.shared.index
                    };
                    next = next.wrapping_add(1);
                    if target == self.shared.index {
                        self.adopt(stream);
                        continue;
                    }
                    // The io_uring-accepted socket belongs to this runtime's handle; give
                    // the target core its own descriptor for the same socket.
                    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we hold open; result checked.
                    let dup = unsafe { libc::fcntl(stream.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
                    drop(stream);
                    if dup < 0 {
                        tracing::warn!(
                            "cannot hand an accepted connection over: {}",
                            io::Error::last_os_error()
                        );
                        continue;
                    }
                    // SAFETY: `dup` is a fresh descriptor we own.
                    let std_stream = unsafe { std::net::TcpStream::from_raw_fd(dup) };
                    self.peers[target].post(CoreMsg::Adopt(std_stream));
                }
                Err(e) => {
                    // EMFILE/ENFILE and friends: back off instead of spinning on accept.
                    tracing::warn!(core = self.shared.index, "accept failed: {e}");
                    compio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }

    /// Keeps an io_uring read armed on the inbox eventfd so other threads can wake the
    /// loop; the loop itself drains the inbox every iteration.
    async fn inbox_waker(self: Rc<Self>) {
        let mut buf = Vec::with_capacity(8);
        while !self.done.get() {
            let (res, back) = self.shared.notifier.wait_async(buf).await;
            buf = back;
            if let Err(e) = res {
                tracing::warn!(core = self.shared.index, "inbox eventfd read failed: {e}");
                compio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }

    /// Closes connections with no read and no write for the idle timeout.
    async fn idle_sweeper(self: Rc<Self>, idle: Duration) {
        // Sweep four times per timeout so a connection overstays by at most a quarter.
        let tick = (idle / 4).clamp(Duration::from_millis(5), Duration::from_secs(1));
        while !self.done.get() {
            compio::time::sleep(tick).await;
            let now = Instant::now();
            for conn in self.conns.borrow().values() {
                if conn.phase() == Phase::Open
                    && now.saturating_duration_since(conn.last_active()) >= idle
                {
                    bump(&self.shared.counters.idle_closed, 1);
                    conn.close(&format!(
                        "idle for {} ms (no read, no write)",
                        idle.as_millis()
                    ));
                }
            }
        }
    }

    /// Graceful shutdown of this core (see `Server::shutdown`).
    async fn drain(self: Rc<Self>) {
        let started = Instant::now();
        if let Some(fd) = self.listener_fd.take() {
            // SAFETY: shutdown(2) on our listening socket, which the acceptor still holds
            // open; it makes the pending accept fail so the acceptor exits. With one
            // SO_REUSEPORT listener per core every core closes its own; connections still
            // in a closed listener's accept queue are reset by the kernel, as at any close.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
        let conns: Vec<Rc<ConnLocal>> = self.conns.borrow().values().cloned().collect();
        for conn in &conns {
            conn.begin_drain();
        }
        let deadline = started + Duration::from_millis(self.tuning.drain_timeout_ms);
        while Instant::now() < deadline
            && conns
                .iter()
                .any(|c| c.phase() == Phase::Draining && !c.drained())
        {
            compio::time::sleep(DRAIN_POLL).await;
        }
        tracing::debug!(
            core = self.shared.index,
            elapsed_us = started.elapsed().as_micros() as u64,
            "drain: answers done"
        );
        let mut failed = 0usize;
        for conn in &conns {
            failed += conn
                .fail_pending("[GO_AWAY] server is shutting down; the request was not completed");
        }
        if failed > 0 {
            self.in_flight_sub(failed);
            tracing::warn!(
                core = self.shared.index,
                failed,
                "shutdown: deferred requests failed with SYSTEM_ERROR"
            );
        }
        let flush_deadline = Instant::now() + DRAIN_FLUSH_LIMIT;
        while Instant::now() < flush_deadline
            && conns
                .iter()
                .any(|c| c.phase() == Phase::Draining && !c.output_empty())
        {
            compio::time::sleep(DRAIN_POLL).await;
        }
        tracing::debug!(
            core = self.shared.index,
            elapsed_us = started.elapsed().as_micros() as u64,
            "drain: flushed"
        );
        for conn in &conns {
            conn.close("server shutdown");
        }
        drop(conns);
        let close_deadline = Instant::now() + DRAIN_FLUSH_LIMIT;
        while Instant::now() < close_deadline && !self.conns.borrow().is_empty() {
            compio::time::sleep(DRAIN_POLL).await;
        }
        tracing::debug!(
            core = self.shared.index,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "core drained"
        );
        self.done.set(true);
    }
}

type StartedCores = (SocketAddr, Vec<Arc<CoreShared>>, Vec<JoinHandle<()>>);

/// Binds the listener and starts every core; returns once each core's io_uring is up.
pub(crate) fn start_cores(
    config: &ServerConfig,
    tuning: &ServerTuning,
    handler: Arc<dyn RequestHandler>,
) -> io::Result<StartedCores> {
    if config.network_cores.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: ServerConfig.network_cores is empty; give at least one core (e.g. CoreMap::detect().network)", config.name),
        ));
    }
    if config.max_frame_bytes < ringmq_remoting::frame::FRAME_PREFIX_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{}: max_frame_bytes {} is below the 8-byte frame prefix",
                config.name, config.max_frame_bytes
            ),
        ));
    }
    check_recv_tuning(tuning).map_err(|why| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: {why}", config.name),
        )
    })?;
    let n = config.network_cores.len();
    let listeners = bind_listeners_retrying(config.listen_addr, tuning, n).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "{}: cannot listen on {} ({} mode): {e}",
                config.name, config.listen_addr, tuning.listen_mode
            ),
        )
    })?;
    let local_addr = listeners[0].local_addr()?;

    let mut shared = Vec::with_capacity(n);
    for (index, &cpu) in config.network_cores.iter().enumerate() {
        shared.push(Arc::new(CoreShared {
            index,
            cpu,
            name: format!("{}-net-{index}", config.name),
            inbox: SegQueue::new(),
            queued_sends: AtomicUsize::new(0),
            max_queued_sends: tuning.max_queued_sends_per_core.max(1),
            notifier: Arc::new(Notifier::new()?),
            meter: StallMeter::new(tuning.stall_threshold),
            counters: Counters::default(),
        }));
    }

    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let mut threads = Vec::with_capacity(n);
    // Acceptor mode: one listener, for the first core. Reuseport: one per core.
    let mut listeners = listeners.into_iter();
    for core in &shared {
        let setup = CoreSetup {
            shared: core.clone(),
            peers: shared.clone(),
            handler: handler.clone(),
            decoder: FrameDecoder::new(config.max_frame_bytes),
            tuning: tuning.clone(),
            in_flight_limit: config.max_in_flight_total.div_ceil(n).max(1),
            per_conn_limit: config.max_in_flight_per_connection.max(1),
            idle_timeout: (config.idle_timeout_ms > 0)
                .then(|| Duration::from_millis(config.idle_timeout_ms)),
            listener: listeners.next(),
        };
        let ready = ready_tx.clone();
        let spawned = if tuning.pin_network_cores {
            crate::cores::spawn_pinned(core.name.clone(), core.cpu, move || run_core(setup, ready))
        } else {
            // Small shared host (see `ServerTuning::pin_network_cores`): the scheduler may
            // move the thread to whichever CPU is free.
            std::thread::Builder::new()
                .name(core.name.clone())
                .spawn(move || run_core(setup, ready))
        };
        match spawned {
            Ok(t) => threads.push(t),
            Err(e) => {
                stop_started(&shared, threads);
                return Err(e);
            }
        }
    }
    drop(ready_tx);
    for _ in 0..n {
        let failure = match ready_rx.recv() {
            Ok(Ok(())) => continue,
            Ok(Err(why)) => why,
            Err(_) => "a network core thread exited during start-up".to_string(),
        };
        stop_started(&shared, threads);
        return Err(io::Error::other(format!("{}: {failure}", config.name)));
    }
    Ok((local_addr, shared, threads))
}

fn stop_started(shared: &[Arc<CoreShared>], threads: Vec<JoinHandle<()>>) {
    for core in shared {
        core.post(CoreMsg::Shutdown);
    }
    for t in threads {
        let _ = t.join();
    }
}

/// The provided-buffer settings a core can actually set up.
fn check_recv_tuning(tuning: &ServerTuning) -> Result<(), String> {
    if tuning.recv_mode != RecvMode::Multishot {
        return Ok(());
    }
    let count = tuning.recv_buffer_count;
    if count == 0 || count > MAX_RECV_BUFFER_COUNT {
        return Err(format!(
            "recv_buffer_count {count} must be 1..={MAX_RECV_BUFFER_COUNT}"
        ));
    }
    let bytes = tuning.recv_buffer_bytes;
    let pool_bytes = usize::from(count.next_power_of_two()).saturating_mul(bytes);
    if bytes == 0 || u32::try_from(bytes).is_err() || pool_bytes > MAX_RECV_POOL_BYTES {
        return Err(format!(
            "recv_buffer_bytes {bytes} x recv_buffer_count {count} (rounded up to a power of two) \
             must be at least 1 byte per buffer and at most {MAX_RECV_POOL_BYTES} bytes per core"
        ));
    }
    Ok(())
}

/// How long a start keeps retrying a port that is still held.
const BIND_RETRY_MS: u64 = 5_000;
const BIND_RETRY_STEP_MS: u64 = 50;

/// Binds the listener(s) of `tuning.listen_mode`, retrying "address in use" for up to
/// [`BIND_RETRY_MS`]. A process killed with SIGKILL keeps its listening socket until the
/// kernel tears down its io_uring, a few hundred milliseconds after exit; a supervisor
/// restarting it at once (systemd waits 100 ms by default) must not fail on that.
fn bind_listeners_retrying(
    addr: SocketAddr,
    tuning: &ServerTuning,
    cores: usize,
) -> io::Result<Vec<std::net::TcpListener>> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(BIND_RETRY_MS);
    loop {
        let bound = match tuning.listen_mode {
            ListenMode::Acceptor => {
                bind_listener(addr, tuning.listen_backlog, false).map(|l| vec![l])
            }
            ListenMode::ReusePort => bind_reuseport_group(addr, tuning.listen_backlog, cores),
        };
        match bound {
            Err(e)
                if e.kind() == io::ErrorKind::AddrInUse && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(BIND_RETRY_STEP_MS));
            }
            result => return result,
        }
    }
}

/// One `SO_REUSEPORT` listener per core, all on the same port. A socket with
/// `SO_REUSEPORT` would silently join a group still held by a dying earlier instance (or
/// any other process of the same user) and have the kernel hand it part of our
/// connections, so a plain bind without `SO_REUSEPORT` first checks that nobody listens
/// on the port: it fails with "address in use" while anyone does, which the caller
/// retries. (A process binding the port between the check and the group is not caught.)
fn bind_reuseport_group(
    addr: SocketAddr,
    backlog: i32,
    cores: usize,
) -> io::Result<Vec<std::net::TcpListener>> {
    if addr.port() != 0 {
        drop(new_listen_socket(addr, false)?);
    }
    let first = bind_listener(addr, backlog, true)?;
    // With port 0 the kernel chose a port that no group holds; the rest join it.
    let group_addr = first.local_addr()?;
    let mut group = Vec::with_capacity(cores);
    group.push(first);
    for _ in 1..cores {
        group.push(bind_listener(group_addr, backlog, true)?);
    }
    Ok(group)
}

/// A bound TCP socket, not listening yet.
fn new_listen_socket(addr: SocketAddr, reuse_port: bool) -> io::Result<socket2::Socket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.cloexec(),
        Some(Protocol::TCP),
    )?;
    // As Java's server: a restarted broker can rebind while old connections sit in TIME_WAIT.
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    socket.bind(&addr.into())?;
    Ok(socket)
}

fn bind_listener(
    addr: SocketAddr,
    backlog: i32,
    reuse_port: bool,
) -> io::Result<std::net::TcpListener> {
    let socket = new_listen_socket(addr, reuse_port)?;
    socket.listen(backlog)?;
    Ok(socket.into())
}

struct CoreSetup {
    shared: Arc<CoreShared>,
    peers: Vec<Arc<CoreShared>>,
    handler: Arc<dyn RequestHandler>,
    decoder: FrameDecoder,
    tuning: ServerTuning,
    in_flight_limit: usize,
    per_conn_limit: usize,
    idle_timeout: Option<Duration>,
    listener: Option<std::net::TcpListener>,
}

fn build_runtime(tuning: &ServerTuning) -> io::Result<compio::runtime::Runtime> {
    let mut proactor = compio::driver::ProactorBuilder::new();
    proactor.capacity(tuning.io_uring_entries);
    if let Some(count) = std::num::NonZeroU16::new(tuning.recv_buffer_count) {
        // The ring itself is registered lazily, by `setup_recv_pool`.
        proactor
            .buffer_pool_size(count)
            .buffer_pool_buffer_len(tuning.recv_buffer_bytes);
    }
    if tuning.io_uring_defer_taskrun {
        proactor.single_issuer(true).defer_taskrun(true);
    } else {
        // Each core is the only submitter of its ring; let the kernel run completions
        // cooperatively instead of interrupting the core with task work.
        proactor.coop_taskrun(true).taskrun_flag(true);
    }
    let rt = compio::runtime::RuntimeBuilder::new()
        .with_proactor(proactor)
        .build()?;
    if !rt.driver_type().is_iouring() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "compio did not select the io_uring driver",
        ));
    }
    Ok(rt)
}

fn io_uring_hint(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            " (io_uring is forbidden: check sysctl kernel.io_uring_disabled and the container's seccomp profile)"
        }
        Some(libc::ENOSYS) => " (this kernel has no io_uring, or seccomp blocks io_uring_setup)",
        Some(libc::ENOMEM) => " (cannot lock ring memory: raise RLIMIT_MEMLOCK or lower io_uring_entries)",
        _ => "",
    }
}

/// Registers the core's provided buffer ring when multishot receive is asked for; false
/// (logged) when the kernel refuses it, and the core falls back to single reads: a broker
/// that does not start is worse than one that reads a little less efficiently.
fn setup_recv_pool(
    rt: &compio::runtime::Runtime,
    shared: &CoreShared,
    tuning: &ServerTuning,
) -> bool {
    if tuning.recv_mode != RecvMode::Multishot {
        return false;
    }
    match rt.buffer_pool() {
        Ok(_) if !rt.enter(super::recv::cancel_registration_works) => {
            tracing::warn!(
                core = shared.index,
                "this compio build cannot cancel a multishot receive (its cancel token is not \
                 seen by the op); this core reads with single reads"
            );
            false
        }
        Ok(_) => {
            shared
                .counters
                .recv_multishot
                .store(true, Ordering::Relaxed);
            true
        }
        Err(e) => {
            tracing::warn!(
                core = shared.index,
                "cannot register a provided buffer ring ({} x {} bytes): {e}; this core reads \
                 with single reads (kernel 6.0+ is needed for multishot receive; \
                 ringmq.net.recvMode=single silences this)",
                tuning.recv_buffer_count,
                tuning.recv_buffer_bytes
            );
            false
        }
    }
}

fn run_core(setup: CoreSetup, ready: mpsc::Sender<Result<(), String>>) {
    let index = setup.shared.index;
    let rt = match build_runtime(&setup.tuning) {
        Ok(rt) => rt,
        Err(e) => {
            let hint = io_uring_hint(&e);
            let _ = ready.send(Err(format!(
                "network core {index} (cpu {}): io_uring setup failed: {e}{hint}",
                setup.shared.cpu
            )));
            return;
        }
    };
    let recv_multishot = setup_recv_pool(&rt, &setup.shared, &setup.tuning);
    let core = Rc::new(CoreLocal {
        shared: setup.shared.clone(),
        peers: setup.peers,
        handler: setup.handler,
        decoder: setup.decoder,
        tuning: setup.tuning,
        recv_multishot,
        conns: RefCell::new(ConnMap::default()),
        next_conn_seq: Cell::new(0),
        in_flight: Cell::new(0),
        in_flight_limit: setup.in_flight_limit,
        per_conn_limit: setup.per_conn_limit,
        idle_timeout: setup.idle_timeout,
        now: Cell::new(Instant::now()),
        draining: Cell::new(false),
        listener_fd: Cell::new(None),
        done: Cell::new(false),
    });
    CURRENT_CORE.with(|c| c.set(Arc::as_ptr(&core.shared) as usize));
    rt.enter(|| {
        if let Some(std_listener) = setup.listener {
            match compio::net::TcpListener::from_std(std_listener) {
                Ok(listener) => {
                    core.listener_fd.set(Some(listener.as_raw_fd()));
                    compio::runtime::spawn(core.clone().accept_loop(listener)).detach();
                }
                Err(e) => {
                    let _ = ready.send(Err(format!(
                        "network core {index}: cannot register the listener: {e}"
                    )));
                    return;
                }
            }
        }
        compio::runtime::spawn(core.clone().inbox_waker()).detach();
        if let Some(idle) = core.idle_timeout {
            compio::runtime::spawn(core.clone().idle_sweeper(idle)).detach();
        }
        let _ = ready.send(Ok(()));
        drive(&rt, &core);
        // Cancel what is left (reader/writer tasks of connections that ignored the drain);
        // their guards release the connections.
        for conn in core.conns.borrow().values() {
            conn.close("core stopped");
        }
    });
    drop(rt);
    CURRENT_CORE.with(|c| c.set(0));
    tracing::debug!(core = index, "network core stopped");
}

/// The core loop: drain the inbox, run ready tasks, then wait in io_uring. Each pass's
/// busy time feeds the stall meter.
fn drive(rt: &compio::runtime::Runtime, core: &Rc<CoreLocal>) {
    loop {
        let started = Instant::now();
        core.now.set(started);
        core.drain_inbox();
        let more_tasks = rt.run();
        if core.done.get() {
            break;
        }
        core.shared.meter.record(started.elapsed());
        if more_tasks || !core.shared.inbox.is_empty() {
            rt.poll_with(Some(Duration::ZERO));
        } else {
            rt.poll();
        }
    }
}
