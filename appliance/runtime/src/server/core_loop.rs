//! One network core: a pinned thread running its own compio runtime on io_uring, the
//! loop that drives it (and counts stalls), its inbox of cross-thread messages, its
//! provided buffer ring for multishot receives, the acceptor (the first core's round-robin
//! hand-out, or one `SO_REUSEPORT` listener per core, with its back-off at the descriptor
//! limit and its descriptor reserve), the per-core memory bounds (`CoreBudget`: bytes of
//! partial frames and of queued output), the idle sweeper and the shutdown drain.
//!
//! Everything in `CoreLocal` is owned by the core thread (`Rc`/`Cell`, no locks);
//! `CoreShared` is the part other threads may touch: the inbox, its eventfd notifier and
//! the metrics.

use std::cell::{Cell, RefCell};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use compio::io::AsyncReadExt;
use compio::BufResult;
use crossbeam_queue::SegQueue;
use ringmq_remoting::FrameDecoder;
use ringmq_tls::{TlsLink, TlsServer};

use super::conn::{self, ConnLocal, Phase};
use super::core_local::{
    bump, has_local_posts, set_pass_clock, take_local_post, ConnMap, CoreBudget, Counters,
    LogLimiter, CURRENT_CORE,
};
use super::recv::MIN_READ_CHUNK_BYTES;
// Re-exported for `test_util`.
pub(crate) use super::conn::CoreLocal;
pub(crate) use super::core_local::{CoreMsg, CoreShared};
use super::{
    ConnShared, Connection, ListenMode, RecvMode, RequestHandler, Response, ServerConfig,
    ServerTuning,
};
use crate::stall::StallMeter;
use ringmq_ring::Notifier;

/// Inbox messages handled per loop iteration; the rest wait for the next iteration so
/// one burst cannot stall the core's sockets.
const MAX_INBOX_BATCH: usize = 4096;
/// How long a TLS handshake may take once its first record arrived.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
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

/// How often a core asks the allocator to return freed memory while it has some to return.
const ALLOCATOR_COLLECT_TICK: Duration = Duration::from_millis(500);

/// Lets mimalloc (the binary's global allocator) purge ranges freed on this thread whose
/// purge delay has passed. Harmless when another allocator is in use: mimalloc then has
/// nothing to purge.
fn return_freed_memory() {
    extern "C" {
        fn mi_collect(force: bool);
    }
    // SAFETY: mi_collect takes no pointers, may run on any thread at any time, and only
    // touches the allocator's own state.
    unsafe { mi_collect(false) }
}

/// How often each kind of per-core bound or descriptor warning may be logged.
const WARN_INTERVAL: Duration = Duration::from_secs(10);
/// The longest an idle core goes without calling `RequestHandler::on_core_wake`: the
/// resolution of per-core timers kept by the handler (held pulls' suspend timeouts).
pub(crate) const CORE_TICK: Duration = Duration::from_millis(50);
/// First pause after a failed accept; doubled after each further failure up to
/// [`ACCEPT_BACKOFF_MAX`], reset by the next successful accept. At the descriptor limit an
/// accept fails at once, and retrying it without a pause spins the core.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The next pause after a failed accept.
fn next_accept_backoff(previous: Option<Duration>) -> Duration {
    previous.map_or(ACCEPT_BACKOFF_MIN, |d| (d * 2).min(ACCEPT_BACKOFF_MAX))
}

/// Whether an accepted descriptor leaves fewer than `reserve` descriptors below the soft
/// `RLIMIT_NOFILE`. Linux hands out the lowest free descriptor, so descriptor `fd` means
/// `0..fd` are all open: at most `limit - fd - 1` are left, which needs no scan of
/// `/proc/self/fd` on every accept.
pub(crate) fn within_fd_reserve(fd: RawFd, limit: Option<u64>, reserve: u64) -> bool {
    let (Some(limit), Ok(fd)) = (limit, u64::try_from(fd)) else {
        return false;
    };
    reserve > 0 && limit.saturating_sub(fd + 1) < reserve
}

/// The soft `RLIMIT_NOFILE`; `None` when unlimited or unreadable.
fn nofile_soft_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass; the result is checked.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    (rc == 0 && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

impl CoreLocal {
    /// Returns freed memory to the OS after bursts (see `core_local::ALLOCATOR_COLLECT_TICKS`).
    async fn allocator_sweeper(self: Rc<Self>) {
        while !self.done.get() {
            compio::time::sleep(ALLOCATOR_COLLECT_TICK).await;
            let due = self.collects_due.get();
            if due > 0 {
                self.collects_due.set(due - 1);
                return_freed_memory();
            }
        }
    }

    /// Called when both tasks of a connection ended.
    pub(crate) fn forget(&self, conn: &ConnLocal) {
        // Its buffers go now; a crowd of closing connections may have held a lot.
        self.note_large_release();
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

    /// Lets the handler pick up the work stage threads queued for this core (see
    /// `RequestHandler::on_core_wake`). A panic there is logged; the core keeps serving.
    fn wake_handler(&self) {
        let handler = &self.handler;
        let index = self.shared.index;
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler.on_core_wake(index)))
            .is_err()
        {
            tracing::error!(core = index, "RequestHandler::on_core_wake panicked");
        }
    }

    /// Takes the inbox and what stages queued for this core (`wake_handler`). Answers the
    /// handler gives while woken (put completions, held pulls) are posted to this core's
    /// own inbox, so it is drained again: they are written in this pass, not after
    /// another io_uring round trip.
    fn take_stage_results(self: &Rc<Self>) {
        self.drain_inbox();
        self.wake_handler();
        self.drain_inbox();
    }

    /// Lets the handler push along the work this pass's requests queued for stages (see
    /// `RequestHandler::after_pass`); whether it produced results for this core. A panic
    /// there is logged; the core keeps serving.
    fn after_pass(&self) -> bool {
        let handler = &self.handler;
        let index = self.shared.index;
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler.after_pass(index)))
            .unwrap_or_else(|_| {
                tracing::error!(core = index, "RequestHandler::after_pass panicked");
                false
            })
    }

    /// Handles up to `MAX_INBOX_BATCH` inbox messages.
    fn drain_inbox(self: &Rc<Self>) {
        if self.shared.notifier.is_pending() {
            self.shared.notifier.begin_drain();
        }
        for _ in 0..MAX_INBOX_BATCH {
            let Some(msg) = take_local_post().or_else(|| self.shared.inbox.pop()) else {
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
        self.enforce_output_bound();
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
        let response = pending.answer_or_error(conn_id, response);
        conn.push_response(response, pending.opaque);
        conn.wake_writer();
    }

    /// Takes an accepted connection: at once on a plain port; on a TLS port after its
    /// first bytes and, for a TLS client, its handshake (`tls_accept`).
    fn adopt(self: &Rc<Self>, stream: compio::net::TcpStream) {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY failed: {e}");
        }
        match self.tuning.tls.clone() {
            None => self.register(stream, BytesMut::new(), None),
            Some(tls) => {
                compio::runtime::spawn(self.clone().tls_accept(stream, tls)).detach();
            }
        }
    }

    /// A TLS port's new connection: reads its first bytes; a handshake record starts TLS
    /// (the handshake finishes before the connection is served), anything else is a plain
    /// client on a permissive port or is closed on an enforcing one. The wait for the first
    /// bytes is bounded by the idle timeout (a silent connection is idle), the handshake by
    /// [`TLS_HANDSHAKE_TIMEOUT`].
    async fn tls_accept(self: Rc<Self>, mut stream: compio::net::TcpStream, tls: TlsServer) {
        let peer = stream.peer_addr().ok();
        let read_first = async {
            let buf = BytesMut::with_capacity(MIN_READ_CHUNK_BYTES);
            let BufResult(result, buf) = stream.append(buf).await;
            result.map(|_| buf)
        };
        let first = match self.idle_timeout {
            Some(idle) => compio::time::timeout(idle, read_first).await,
            None => Ok(read_first.await),
        };
        let first = match first {
            Ok(Ok(buf)) if !buf.is_empty() => buf,
            Ok(Ok(_)) => return, // closed before saying anything
            Ok(Err(e)) => {
                tracing::debug!(?peer, "read failed before the first frame: {e}");
                return;
            }
            Err(_) => {
                bump(&self.shared.counters.idle_closed, 1);
                tracing::debug!(?peer, "no bytes within the idle timeout; closing");
                return;
            }
        };
        if !ringmq_tls::looks_like_tls(first[0]) {
            if tls.mode == ringmq_tls::TlsMode::Enforcing {
                bump(&self.shared.counters.tls_refused, 1);
                tracing::warn!(
                    ?peer,
                    "closing a plain connection on an enforcing TLS port (tls.server.mode)"
                );
                return;
            }
            self.register(stream, first, None);
            return;
        }
        let link = match TlsLink::server(tls.config.clone()) {
            Ok(link) => link,
            Err(e) => {
                tracing::warn!(?peer, "{e}");
                return;
            }
        };
        match ringmq_tls::io::handshake(&mut stream, link, first, TLS_HANDSHAKE_TIMEOUT).await {
            Ok((link, plain)) => {
                if self.draining.get() {
                    return;
                }
                bump(&self.shared.counters.tls_handshakes, 1);
                self.register(stream, plain, Some(Rc::new(RefCell::new(link))));
            }
            Err(e) => {
                bump(&self.shared.counters.tls_refused, 1);
                tracing::warn!(?peer, "TLS handshake failed: {e}");
            }
        }
    }

    /// Registers a connection and starts its reader and writer tasks. `initial` holds
    /// application bytes already read (they are served first); `tls` is the connection's
    /// TLS state once its handshake is done.
    fn register(
        self: &Rc<Self>,
        stream: compio::net::TcpStream,
        initial: BytesMut,
        tls: Option<Rc<RefCell<TlsLink>>>,
    ) {
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
        let conn = Rc::new(ConnLocal::new(
            handle,
            stream.as_raw_fd(),
            self.now(),
            self.budget.clone(),
        ));
        self.conns.borrow_mut().insert(id, conn.clone());
        bump(&self.shared.counters.connections, 1);
        tracing::debug!(core = self.shared.index, conn = id, %peer, "connection accepted");
        let (read_half, write_half) = stream.into_split();
        compio::runtime::spawn(conn::run_reader(
            self.clone(),
            conn.clone(),
            read_half,
            initial,
            tls.clone(),
        ))
        .detach();
        compio::runtime::spawn(conn::run_writer(self.clone(), conn, write_half, tls)).detach();
    }

    /// Accepts connections: as the single acceptor, handing them round-robin to every
    /// core; with a `SO_REUSEPORT` listener per core, keeping them on this core. A failed
    /// accept (EMFILE at the descriptor limit, ...) pauses accepting for a growing delay
    /// and is logged at most once per [`WARN_INTERVAL`]; a connection that would eat into
    /// the descriptor reserve is closed at once.
    async fn accept_loop(self: Rc<Self>, listener: compio::net::TcpListener) {
        let hand_out = self.tuning.listen_mode == ListenMode::Acceptor;
        let mut next = 0usize;
        let mut backoff: Option<Duration> = None;
        let accept_warn = LogLimiter::new(WARN_INTERVAL);
        let reserve_warn = LogLimiter::new(WARN_INTERVAL);
        loop {
            let accepted = listener.accept().await;
            if self.draining.get() {
                break;
            }
            let stream = match accepted {
                Ok((stream, _peer)) => stream,
                Err(e) => {
                    let pause = next_accept_backoff(backoff);
                    backoff = Some(pause);
                    bump(&self.shared.counters.accept_errors, 1);
                    if let Some(suppressed) = accept_warn.allow(Instant::now()) {
                        tracing::warn!(
                            core = self.shared.index,
                            suppressed,
                            pause_ms = pause.as_millis() as u64,
                            "accept failed: {e}; pausing accepts (the pause grows up to {} ms \
                             while accepts keep failing)",
                            ACCEPT_BACKOFF_MAX.as_millis()
                        );
                    }
                    compio::time::sleep(pause).await;
                    continue;
                }
            };
            backoff = None;
            if self.refuse_for_fd_reserve(&stream, &reserve_warn) {
                continue; // dropping the stream closes it
            }
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
            // The io_uring-accepted socket belongs to this runtime's handle; give the
            // target core its own descriptor for the same socket.
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
    }

    /// True (counted, logged at most once per [`WARN_INTERVAL`]) when `stream` leaves
    /// fewer descriptors than `ServerTuning::fd_reserve` free: the caller closes it, so the
    /// store can still open its files.
    fn refuse_for_fd_reserve(&self, stream: &compio::net::TcpStream, warn: &LogLimiter) -> bool {
        let limit = nofile_soft_limit();
        let reserve = limit.map_or(0, |l| self.tuning.fd_reserve.for_limit(l));
        let fd = stream.as_raw_fd();
        if !within_fd_reserve(fd, limit, reserve) {
            return false;
        }
        bump(&self.shared.counters.accept_refused_fd_reserve, 1);
        if let Some(suppressed) = warn.allow(Instant::now()) {
            tracing::warn!(
                core = self.shared.index,
                peer = ?stream.peer_addr().ok(),
                descriptor = fd,
                limit = limit.unwrap_or(0),
                reserve,
                suppressed,
                "refusing a connection: descriptors are running out (RLIMIT_NOFILE); \
                 ringmq.net.fdReserve of them are kept for the store's files"
            );
        }
        true
    }

    /// Keeps an io_uring read armed on the inbox eventfd so other threads can wake the
    /// loop; the loop itself drains the inbox every iteration.
    async fn inbox_waker(self: Rc<Self>) {
        let mut buf = Vec::with_capacity(8);
        while !self.done.get() {
            let (res, back) = wait_doorbell(&self.shared.notifier, buf).await;
            buf = back;
            if let Err(e) = res {
                tracing::warn!(core = self.shared.index, "inbox eventfd read failed: {e}");
                compio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }

    /// Wakes the loop every `CORE_TICK` so `RequestHandler::on_core_wake` also runs on an
    /// idle core (expiring held pulls, retrying sends that waited for ring room).
    async fn core_ticker(self: Rc<Self>) {
        while !self.done.get() {
            compio::time::sleep(CORE_TICK).await;
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
        budget: Rc::new(CoreBudget::new(setup.shared.clone())),
        partial_warn: LogLimiter::new(WARN_INTERVAL),
        output_warn: LogLimiter::new(WARN_INTERVAL),
        collects_due: Cell::new(0),
    });
    CURRENT_CORE.with(|c| c.set(Arc::as_ptr(&core.shared) as usize));
    ringmq_ring::enter_core(index, &core.shared.notifier);
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
        compio::runtime::spawn(core.clone().core_ticker()).detach();
        compio::runtime::spawn(core.clone().allocator_sweeper()).detach();
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
    // What the core posted itself and never handled goes now, as the inbox goes with the
    // core (a message dropped here that posts again reaches the inbox: the thread is no
    // longer the core's).
    while take_local_post().is_some() {}
    ringmq_ring::leave_core();
    tracing::debug!(core = index, "network core stopped");
}

/// The core loop: drain the inbox, run ready tasks, then wait in io_uring. Each pass's
/// busy time feeds the stall meter.
fn drive(rt: &compio::runtime::Runtime, core: &Rc<CoreLocal>) {
    loop {
        let started = Instant::now();
        core.now.set(started);
        set_pass_clock(started);
        core.take_stage_results();
        let mut more_tasks = rt.run();
        if core.after_pass() {
            // The pass's sends were appended here: answer them before waiting, on a clock
            // read after the append.
            let appended = Instant::now();
            core.now.set(appended);
            set_pass_clock(appended);
            core.take_stage_results();
            more_tasks = rt.run();
        }
        if core.done.get() {
            break;
        }
        core.shared.meter.record(started.elapsed());
        // A pending doorbell this core rang itself (`ringmq_ring::notify_core`) has no
        // eventfd write behind it: waiting would sleep on it.
        if more_tasks
            || has_local_posts()
            || !core.shared.inbox.is_empty()
            || core.shared.notifier.is_pending()
        {
            rt.poll_with(Some(Duration::ZERO));
        } else {
            rt.poll();
        }
    }
}

/// Waits inside the core's compio runtime for a producer to ring `doorbell`: an io_uring
/// READ on its eventfd. `buf` is an 8-byte scratch buffer handed back for reuse.
async fn wait_doorbell(doorbell: &Arc<Notifier>, buf: Vec<u8>) -> (io::Result<()>, Vec<u8>) {
    let mut buf = buf;
    buf.clear();
    buf.reserve(8);
    let op = compio::driver::op::Read::new(doorbell.clone(), buf);
    let compio::BufResult(res, op) = compio::runtime::submit(op).await;
    let mut buf = compio::buf::IntoInner::into_inner(op);
    buf.clear();
    (res.map(|_| ()), buf)
}

/// A core with no thread, no listener and no socket (`server::local`, `server::test_util`):
/// what is posted to it (deferred answers, oneway sends, closes) stays in its inbox until
/// its owner takes it.
impl CoreShared {
    pub(crate) fn detached(index: usize) -> io::Result<Arc<Self>> {
        Ok(Arc::new(CoreShared {
            index,
            cpu: 0,
            name: format!("detached-net-{index}"),
            inbox: SegQueue::new(),
            queued_sends: AtomicUsize::new(0),
            max_queued_sends: ServerTuning::default().max_queued_sends_per_core,
            notifier: Arc::new(Notifier::new()?),
            meter: StallMeter::new(crate::stall::DEFAULT_STALL_THRESHOLD),
            counters: Counters::default(),
        }))
    }

    /// The oldest message posted and not yet taken; frees its queued-send count like the
    /// loop does.
    pub(crate) fn take_posted(&self) -> Option<CoreMsg> {
        let msg = self.inbox.pop()?;
        if matches!(msg, CoreMsg::Send { .. } | CoreMsg::Run(_)) {
            self.queued_sends.fetch_sub(1, Ordering::AcqRel);
        }
        Some(msg)
    }
}

/// The core-thread half of a core with no thread, owned by whoever calls its handler.
impl CoreLocal {
    pub(crate) fn detached(shared: Arc<CoreShared>, handler: Arc<dyn RequestHandler>) -> Rc<Self> {
        let tuning = ServerTuning::default();
        Rc::new(CoreLocal {
            budget: Rc::new(CoreBudget::new(shared.clone())),
            shared,
            peers: Vec::new(),
            handler,
            decoder: FrameDecoder::new(ringmq_remoting::DEFAULT_MAX_FRAME_BYTES),
            tuning,
            recv_multishot: false,
            conns: RefCell::new(ConnMap::default()),
            next_conn_seq: Cell::new(0),
            in_flight: Cell::new(0),
            in_flight_limit: super::DEFAULT_MAX_IN_FLIGHT_TOTAL,
            per_conn_limit: super::DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION,
            idle_timeout: None,
            now: Cell::new(Instant::now()),
            draining: Cell::new(false),
            listener_fd: Cell::new(None),
            done: Cell::new(false),
            partial_warn: LogLimiter::new(WARN_INTERVAL),
            output_warn: LogLimiter::new(WARN_INTERVAL),
            collects_due: Cell::new(0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_reserve_is_judged_from_the_lowest_free_descriptor() {
        // Limit 256, reserve 64: descriptor 191 leaves 64 free, 192 leaves 63.
        assert!(!within_fd_reserve(191, Some(256), 64));
        assert!(within_fd_reserve(192, Some(256), 64));
        assert!(
            !within_fd_reserve(255, Some(256), 0),
            "reserve 0 turns the check off"
        );
        assert!(
            !within_fd_reserve(10_000, None, 64),
            "no limit, nothing to keep"
        );
        assert_eq!(crate::server::FdReserve::Auto.for_limit(1024), 102);
        assert_eq!(crate::server::FdReserve::Auto.for_limit(256), 64);
        assert_eq!(crate::server::FdReserve::Count(7).for_limit(1024), 7);
    }

    #[test]
    fn accept_backoff_doubles_up_to_its_cap() {
        let mut d = None;
        let mut seen = Vec::new();
        for _ in 0..10 {
            let next = next_accept_backoff(d);
            seen.push(next.as_millis() as u64);
            d = Some(next);
        }
        assert_eq!(seen, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
    }

    #[test]
    fn log_limiter_lets_one_line_through_per_interval_and_counts_the_rest() {
        let limiter = LogLimiter::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(limiter.allow(t0), Some(0));
        for i in 1..=5 {
            assert_eq!(limiter.allow(t0 + Duration::from_millis(i)), None);
        }
        assert_eq!(limiter.allow(t0 + Duration::from_secs(10)), Some(5));
    }
}
