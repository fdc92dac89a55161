//! The Remoting transport: a connection pool keyed by address, and per-connection request
//! pipelining matched by `opaque` (`remoting.md` §6).
//!
//! Everything here is single-threaded on purpose: a [`RemotingClient`] lives on one compio
//! runtime thread (the same runtime the servers use) and its futures are `!Send`. That buys
//! a hot path with no locks, no atomics and no thread hops: a request is encoded straight
//! into the connection's write buffer, the writer task flushes whatever accumulated with one
//! `send` (write batching for free when many requests are in flight), and the reader task
//! decodes every complete frame out of one receive buffer and completes the waiting future
//! in place. Multi-threaded callers use one client per thread, or the blocking facade.
//!
//! Bounds: at most `max_in_flight_per_connection` requests await a response per connection
//! (callers beyond that wait for a slot); the unsent bytes of a connection are capped by
//! `write_high_water_bytes` (callers wait for the writer to drain); frames above
//! `max_frame_bytes` close the connection. Timeouts are enforced by a per-connection sweeper
//! that scans the in-flight table every `timeout_scan_interval_ms` while anything is in
//! flight, which costs nothing per request (no timer registration per request).
//!
//! Failure handling: a connection that fails (read/write error, EOF, undecodable frame) fails
//! every outstanding request with [`ClientError::ConnectionClosed`] and leaves the pool; the
//! next request to that address reconnects. A `GO_AWAY` (1500) response marks the connection
//! as draining so new requests go to a fresh connection.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::hash::{BuildHasherDefault, Hasher};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use compio::buf::{BufResult, IoBuf, IoBufMut, SetLen};
use compio::io::{AsyncReadExt, AsyncWriteExt};
use compio::net::TcpStream;
use ringmq_remoting::command::FLAG_RESPONSE;
use ringmq_remoting::{FrameDecoder, RemotingCommand, ResponseCode, SerializeType};
use ringmq_tls::TlsLink;

use crate::error::{ClientError, Result};

/// Transport settings. Defaults follow the Java client where it has one.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Default per-request timeout (Java `sendMsgTimeout` / RPC timeout: 3 s).
    pub request_timeout_ms: u64,
    /// TCP connect timeout (Java `connectTimeoutMillis`: 3 s).
    pub connect_timeout_ms: u64,
    /// Requests awaiting a response on one connection; more callers wait for a slot.
    pub max_in_flight_per_connection: usize,
    /// Connections opened per address; requests are spread over them round-robin.
    pub connections_per_address: usize,
    /// Largest frame accepted from a peer (Java `frameMaxLength`: 16 MiB).
    pub max_frame_bytes: usize,
    /// Header serialization of the requests this client writes.
    pub serialize_type: SerializeType,
    /// Unsent bytes queued on one connection before senders wait for the writer.
    pub write_high_water_bytes: usize,
    /// How often the timeout sweeper scans in-flight requests (only while any are in flight).
    pub timeout_scan_interval_ms: u64,
    /// When set, every request is signed with this account (brokers with `aclEnable=true`).
    pub credentials: Option<ringmq_acl::Credentials>,
    /// When set, every connection speaks TLS with this configuration
    /// (`ringmq_tls::client_config` builds it from upstream's `tls.client.*` keys).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            request_timeout_ms: 3_000,
            connect_timeout_ms: 3_000,
            max_in_flight_per_connection: 4_096,
            connections_per_address: 1,
            max_frame_bytes: ringmq_remoting::DEFAULT_MAX_FRAME_BYTES,
            serialize_type: SerializeType::Json,
            write_high_water_bytes: 4 * 1024 * 1024,
            timeout_scan_interval_ms: 10,
            credentials: None,
            tls: None,
        }
    }
}

/// Handles a request a server sent to this client (e.g. `NOTIFY_CONSUMER_IDS_CHANGED`,
/// `CHECK_TRANSACTION_STATE`): gets the peer address and the command; returns the response
/// for non-oneway requests (`None` answers `REQUEST_CODE_NOT_SUPPORTED`).
pub type RequestHandler = Rc<dyn Fn(&str, RemotingCommand) -> Option<RemotingCommand>>;

/// Receive-buffer growth step: small responses are batched into reads of at least this.
const MIN_READ_BYTES: usize = 64 * 1024;
/// Write buffers larger than this after a burst are dropped rather than kept as spares.
const MAX_SPARE_WRITE_BYTES: usize = 8 * 1024 * 1024;

// ---------------------------------------------------------------------------------------
// compio buffer adapters: BytesMut without enabling compio's `bytes` feature (which would
// change the feature set the runtime crate pins).

/// Receive buffer: compio reads into the spare capacity, frames are split off zero-copy.
struct RecvBuf(BytesMut);

impl IoBuf for RecvBuf {
    fn as_init(&self) -> &[u8] {
        &self.0
    }
}

impl SetLen for RecvBuf {
    unsafe fn set_len(&mut self, len: usize) {
        // SAFETY: forwarded contract: `len` ≤ capacity and the bytes up to it are initialized.
        unsafe { self.0.set_len(len) }
    }
}

impl IoBufMut for RecvBuf {
    fn as_uninit(&mut self) -> &mut [MaybeUninit<u8>] {
        let cap = self.0.capacity();
        let ptr = self.0.as_mut_ptr() as *mut MaybeUninit<u8>;
        // SAFETY: BytesMut's allocation is valid for `capacity` bytes from its pointer.
        unsafe { std::slice::from_raw_parts_mut(ptr, cap) }
    }
}

/// Send buffer: the accumulated frames of many requests, written with one `send`.
struct SendBuf(BytesMut);

impl IoBuf for SendBuf {
    fn as_init(&self) -> &[u8] {
        &self.0
    }
}

// ---------------------------------------------------------------------------------------

/// Opaques are small distinct integers: a multiplicative mix is a perfect hash for them.
#[derive(Default)]
struct OpaqueHasher(u64);

impl Hasher for OpaqueHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_i32(&mut self, n: i32) {
        self.0 = (n as u32 as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type OpaqueMap<V> = HashMap<i32, V, BuildHasherDefault<OpaqueHasher>>;

enum PendingState {
    Waiting(Option<Waker>),
    Done(Result<RemotingCommand>),
}

struct Pending {
    deadline: Instant,
    request_code: i32,
    timeout_ms: u64,
    state: PendingState,
}

/// One TCP connection: shared by the caller futures, the reader, writer and sweeper tasks.
pub(crate) struct Conn {
    addr: String,
    fd: i32,
    closed: Cell<bool>,
    going_away: Cell<bool>,
    close_reason: RefCell<String>,
    pending: RefCell<OpaqueMap<Pending>>,
    in_flight: Cell<usize>,
    max_in_flight: usize,
    slot_waiters: RefCell<VecDeque<Waker>>,
    write_buf: RefCell<BytesMut>,
    write_high_water_bytes: usize,
    writer_waker: RefCell<Option<Waker>>,
    drain_waiters: RefCell<Vec<Waker>>,
    sweeper_waker: RefCell<Option<Waker>>,
    handler: Rc<RefCell<Option<RequestHandler>>>,
    serialize_type: SerializeType,
    /// The connection's TLS state (handshake done) when the client speaks TLS; the reader
    /// opens records through it and the writer seals through it.
    tls: Option<RefCell<TlsLink>>,
}

impl Conn {
    fn usable(&self) -> bool {
        !self.closed.get() && !self.going_away.get()
    }

    fn closed_error(&self) -> ClientError {
        ClientError::ConnectionClosed {
            addr: self.addr.clone(),
            reason: self.close_reason.borrow().clone(),
        }
    }

    /// Closes the connection once: fails everything outstanding, wakes every waiter, and
    /// shuts the socket down so the reader's pending receive completes.
    fn close(&self, reason: String) {
        if self.closed.replace(true) {
            return;
        }
        tracing::debug!(addr = %self.addr, %reason, "connection closed");
        *self.close_reason.borrow_mut() = reason;
        let err = self.closed_error();
        let mut wakers = Vec::new();
        for p in self.pending.borrow_mut().values_mut() {
            if let PendingState::Waiting(w) = &mut p.state {
                if let Some(w) = w.take() {
                    wakers.push(w);
                }
                p.state = PendingState::Done(Err(err.clone()));
            }
        }
        wakers.extend(self.slot_waiters.borrow_mut().drain(..));
        wakers.extend(self.drain_waiters.borrow_mut().drain(..));
        wakers.extend(self.writer_waker.borrow_mut().take());
        wakers.extend(self.sweeper_waker.borrow_mut().take());
        // SAFETY: shutdown(2) takes no pointers. `fd` still names this connection's socket:
        // the reader task holds its half of the stream open until it sees `closed`, which
        // only this first call sets, so the descriptor cannot have been closed and reused.
        unsafe {
            libc::shutdown(self.fd, libc::SHUT_RDWR);
        }
        for w in wakers {
            w.wake();
        }
    }

    fn release_slot(&self) {
        self.in_flight.set(self.in_flight.get() - 1);
        if let Some(w) = self.slot_waiters.borrow_mut().pop_front() {
            w.wake();
        }
    }

    fn wake_writer(&self) {
        if let Some(w) = self.writer_waker.borrow_mut().take() {
            w.wake();
        }
    }

    /// Appends a frame to the write buffer and wakes the writer.
    fn enqueue(&self, encode: impl FnOnce(&mut BytesMut)) {
        encode(&mut self.write_buf.borrow_mut());
        self.wake_writer();
    }

    /// Sends `request` and waits for its response.
    pub(crate) async fn request(
        self: &Rc<Self>,
        opaque: i32,
        mut request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand> {
        request.opaque = opaque;
        if request.serialize_type != self.serialize_type {
            request.serialize_type = self.serialize_type;
        }
        let code = request.code;
        self.request_with(opaque, code, timeout, move |buf| request.encode(buf))
            .await
    }

    /// Like [`Conn::request`] with the frame written by `encode` (which must use `opaque`):
    /// lets hot paths (sends) write their frame without building a `RemotingCommand`.
    pub(crate) async fn request_with(
        self: &Rc<Self>,
        opaque: i32,
        request_code: i32,
        timeout: Duration,
        encode: impl FnOnce(&mut BytesMut),
    ) -> Result<RemotingCommand> {
        self.request_until(
            opaque,
            request_code,
            Instant::now() + timeout,
            timeout,
            encode,
        )
        .await
    }

    /// [`Conn::request_with`] with the deadline already computed (`timeout` is what the
    /// timeout error reports): saves a clock read on per-message paths.
    pub(crate) async fn request_until(
        self: &Rc<Self>,
        opaque: i32,
        request_code: i32,
        deadline: Instant,
        timeout: Duration,
        encode: impl FnOnce(&mut BytesMut),
    ) -> Result<RemotingCommand> {
        SlotAcquire {
            conn: self,
            registered: false,
        }
        .await?;
        // From here the slot is owned by the pending entry (released when it is removed).
        if let Err(e) = (WriteRoom {
            conn: self,
            registered: false,
        })
        .await
        {
            self.release_slot();
            return Err(e);
        }
        let was_empty = {
            let mut pending = self.pending.borrow_mut();
            let was_empty = pending.is_empty();
            pending.insert(
                opaque,
                Pending {
                    deadline,
                    request_code,
                    timeout_ms: timeout.as_millis() as u64,
                    state: PendingState::Waiting(None),
                },
            );
            was_empty
        };
        self.enqueue(encode);
        if was_empty {
            if let Some(w) = self.sweeper_waker.borrow_mut().take() {
                w.wake();
            }
        }
        ResponseWait {
            conn: self,
            opaque,
            done: false,
        }
        .await
    }

    /// Writes a oneway request (flag bit 1); nothing is awaited but buffer room.
    pub(crate) async fn oneway(
        self: &Rc<Self>,
        opaque: i32,
        mut request: RemotingCommand,
    ) -> Result<()> {
        WriteRoom {
            conn: self,
            registered: false,
        }
        .await?;
        request.opaque = opaque;
        request.serialize_type = self.serialize_type;
        request.mark_oneway();
        self.enqueue(|buf| request.encode(buf));
        Ok(())
    }

    fn dispatch(&self, cmd: RemotingCommand) {
        if cmd.flag & FLAG_RESPONSE != 0 {
            if cmd.code == ResponseCode::GoAway.code() {
                self.going_away.set(true);
            }
            let mut pending = self.pending.borrow_mut();
            match pending.get_mut(&cmd.opaque) {
                Some(p) => {
                    if let PendingState::Waiting(w) = &mut p.state {
                        let waker = w.take();
                        p.state = PendingState::Done(Ok(cmd));
                        drop(pending);
                        if let Some(w) = waker {
                            w.wake();
                        }
                    }
                }
                None => {
                    tracing::debug!(addr = %self.addr, opaque = cmd.opaque, code = cmd.code,
                        "response for an unknown or timed-out request dropped");
                }
            }
            return;
        }
        // A request from the server (broker → client).
        let handler = self.handler.borrow().clone();
        let oneway = cmd.is_oneway();
        let opaque = cmd.opaque;
        let request_code = cmd.code;
        let reply = match handler {
            Some(h) => h(&self.addr, cmd),
            None => None,
        };
        if oneway {
            return;
        }
        let mut response = reply.unwrap_or_else(|| {
            let mut r = RemotingCommand::request(0, opaque).response_to(
                ResponseCode::RequestCodeNotSupported.code(),
                Some(format!(" request type {request_code} not supported")),
            );
            r.serialize_type = self.serialize_type;
            r
        });
        response.opaque = opaque;
        response.flag |= FLAG_RESPONSE;
        self.enqueue(|buf| response.encode(buf));
    }
}

/// Waits for an in-flight slot on the connection.
struct SlotAcquire<'a> {
    conn: &'a Conn,
    registered: bool,
}

impl Future for SlotAcquire<'_> {
    type Output = Result<()>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let conn = self.conn;
        if conn.closed.get() {
            return Poll::Ready(Err(conn.closed_error()));
        }
        if conn.in_flight.get() < conn.max_in_flight {
            conn.in_flight.set(conn.in_flight.get() + 1);
            self.registered = false;
            return Poll::Ready(Ok(()));
        }
        conn.slot_waiters.borrow_mut().push_back(cx.waker().clone());
        self.registered = true;
        Poll::Pending
    }
}

impl Drop for SlotAcquire<'_> {
    fn drop(&mut self) {
        // A waiter that was woken but dropped before taking the slot passes the wake on,
        // so a free slot never sits idle while others wait.
        if self.registered && self.conn.in_flight.get() < self.conn.max_in_flight {
            if let Some(w) = self.conn.slot_waiters.borrow_mut().pop_front() {
                w.wake();
            }
        }
    }
}

/// Waits until the connection's unsent bytes are below the high-water mark.
struct WriteRoom<'a> {
    conn: &'a Conn,
    registered: bool,
}

impl Future for WriteRoom<'_> {
    type Output = Result<()>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let conn = self.conn;
        if conn.closed.get() {
            return Poll::Ready(Err(conn.closed_error()));
        }
        if conn.write_buf.borrow().len() < conn.write_high_water_bytes {
            return Poll::Ready(Ok(()));
        }
        conn.drain_waiters.borrow_mut().push(cx.waker().clone());
        self.registered = true;
        Poll::Pending
    }
}

/// Waits for the response to `opaque`; dropping it forgets the request and frees the slot.
struct ResponseWait<'a> {
    conn: &'a Rc<Conn>,
    opaque: i32,
    done: bool,
}

impl Future for ResponseWait<'_> {
    type Output = Result<RemotingCommand>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let conn = self.conn;
        let mut pending = conn.pending.borrow_mut();
        let Some(p) = pending.get_mut(&self.opaque) else {
            // Only reachable if polled after completion.
            return Poll::Ready(Err(conn.closed_error()));
        };
        match &mut p.state {
            PendingState::Waiting(w) => {
                match w {
                    Some(existing) if existing.will_wake(cx.waker()) => {}
                    _ => *w = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            PendingState::Done(_) => {
                let p = pending.remove(&self.opaque).expect("entry just seen");
                drop(pending);
                self.done = true;
                conn.release_slot();
                match p.state {
                    PendingState::Done(r) => Poll::Ready(r),
                    PendingState::Waiting(_) => unreachable!(),
                }
            }
        }
    }
}

impl Drop for ResponseWait<'_> {
    fn drop(&mut self) {
        if !self.done {
            let removed = self.conn.pending.borrow_mut().remove(&self.opaque);
            if removed.is_some() {
                self.conn.release_slot();
            }
        }
    }
}

/// Resolves when the write buffer has bytes (true) or the connection closed (false).
struct WriterWait<'a>(&'a Conn);

impl Future for WriterWait<'_> {
    type Output = bool;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        let conn = self.0;
        if conn.closed.get() {
            return Poll::Ready(false);
        }
        if !conn.write_buf.borrow().is_empty() {
            return Poll::Ready(true);
        }
        // A record the reader's feed queued (a key update answer) goes out without a frame.
        if conn.tls.as_ref().is_some_and(|l| l.borrow().wants_write()) {
            return Poll::Ready(true);
        }
        *conn.writer_waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// Resolves when requests are in flight (true) or the connection closed (false).
struct SweeperPark<'a>(&'a Conn);

impl Future for SweeperPark<'_> {
    type Output = bool;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        let conn = self.0;
        if conn.closed.get() {
            return Poll::Ready(false);
        }
        if !conn.pending.borrow().is_empty() {
            return Poll::Ready(true);
        }
        *conn.sweeper_waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }
}

async fn writer_loop(conn: Rc<Conn>, mut stream: TcpStream) {
    let mut spare = BytesMut::with_capacity(MIN_READ_BYTES);
    // TLS records of one write (TLS connections only; reused).
    let mut sealed: Vec<u8> = Vec::new();
    while WriterWait(&conn).await {
        let mut data = std::mem::replace(&mut *conn.write_buf.borrow_mut(), spare);
        for w in conn.drain_waiters.borrow_mut().drain(..) {
            w.wake();
        }
        let res = match &conn.tls {
            None => {
                let BufResult(res, SendBuf(back)) = stream.write_all(SendBuf(data)).await;
                data = back;
                res
            }
            Some(link) => {
                sealed.clear();
                let sealing = {
                    let mut link = link.borrow_mut();
                    link.take_outgoing(&mut sealed);
                    link.seal(&data, &mut sealed)
                };
                match sealing {
                    Ok(()) => {
                        let BufResult(res, back) = stream.write_all(sealed).await;
                        sealed = back;
                        res
                    }
                    Err(e) => Err(e.into()),
                }
            }
        };
        if let Err(e) = res {
            conn.close(format!("write failed: {e}"));
            return;
        }
        data.clear();
        spare = if data.capacity() > MAX_SPARE_WRITE_BYTES {
            BytesMut::with_capacity(MIN_READ_BYTES)
        } else {
            data
        };
    }
}

/// `initial`: application bytes that arrived with the TLS handshake.
async fn reader_loop(
    conn: Rc<Conn>,
    mut stream: TcpStream,
    decoder: FrameDecoder,
    initial: BytesMut,
) {
    let mut buf = RecvBuf(BytesMut::with_capacity(MIN_READ_BYTES));
    buf.0.extend_from_slice(&initial);
    // TLS records read but not yet opened (always empty between reads).
    let mut cipher = RecvBuf(BytesMut::new());
    loop {
        loop {
            match decoder.decode(&mut buf.0) {
                Ok(Some(cmd)) => conn.dispatch(cmd),
                Ok(None) => break,
                Err(e) => {
                    conn.close(format!("undecodable frame from the peer: {e}"));
                    return;
                }
            }
        }
        if conn.closed.get() {
            return;
        }
        // Room for at least the rest of the frame being received, so a large frame is read
        // into one allocation instead of growing step by step.
        let frame_rest = match decoder.peek_frame_bytes(&buf.0) {
            Ok(Some(n)) => n.saturating_sub(buf.0.len()),
            Ok(None) => 0,
            Err(e) => {
                conn.close(format!("undecodable frame from the peer: {e}"));
                return;
            }
        };
        let want = frame_rest.max(MIN_READ_BYTES / 4);
        if buf.0.capacity() - buf.0.len() < want {
            buf.0.reserve(want.max(MIN_READ_BYTES));
        }
        let res = match &conn.tls {
            None => {
                let BufResult(res, b) = stream.append(buf).await;
                buf = b;
                res
            }
            Some(link) => {
                cipher.0.reserve(MIN_READ_BYTES);
                let BufResult(res, c) = stream.append(cipher).await;
                cipher = c;
                match res {
                    Ok(0) => Ok(0),
                    Ok(_) => open_records(&conn, link, &mut cipher.0, &mut buf.0),
                    Err(e) => Err(e),
                }
            }
        };
        match res {
            Ok(0) => {
                conn.close("the peer closed the connection".into());
                return;
            }
            Ok(_) => {}
            Err(e) => {
                conn.close(format!("read failed: {e}"));
                return;
            }
        }
    }
}

/// Opens the TLS records in `cipher` into `plain`. Returns 0 when the peer closed its TLS
/// session and nothing more came, else a non-zero count (records without application
/// bytes, such as a key update, count as read so the loop reads again).
fn open_records(
    conn: &Conn,
    link: &RefCell<TlsLink>,
    cipher: &mut BytesMut,
    plain: &mut BytesMut,
) -> std::io::Result<usize> {
    let before = plain.len();
    let fed = link.borrow_mut().feed(cipher, plain)?;
    if fed.wants_write {
        conn.wake_writer();
    }
    let opened = plain.len() - before;
    Ok(if fed.peer_closed && opened == 0 {
        0
    } else {
        opened.max(1)
    })
}

async fn sweeper_loop(conn: Rc<Conn>, scan_interval: Duration) {
    while SweeperPark(&conn).await {
        compio::time::sleep(scan_interval).await;
        let now = Instant::now();
        let mut wakers = Vec::new();
        for p in conn.pending.borrow_mut().values_mut() {
            if p.deadline <= now {
                if let PendingState::Waiting(w) = &mut p.state {
                    wakers.extend(w.take());
                    p.state = PendingState::Done(Err(ClientError::Timeout {
                        addr: conn.addr.clone(),
                        request_code: p.request_code,
                        timeout_ms: p.timeout_ms,
                    }));
                }
            }
        }
        for w in wakers {
            w.wake();
        }
    }
}

// ---------------------------------------------------------------------------------------

struct AddrSlot {
    conns: Vec<Rc<Conn>>,
    connecting: usize,
    waiters: Vec<Waker>,
    next: usize,
}

struct ClientInner {
    config: ClientConfig,
    next_opaque: Cell<i32>,
    pool: RefCell<HashMap<String, AddrSlot>>,
    handler: Rc<RefCell<Option<RequestHandler>>>,
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        for slot in self.pool.borrow().values() {
            for c in &slot.conns {
                c.close("client dropped".into());
            }
        }
    }
}

/// A Remoting client bound to the current compio runtime thread (cheap to clone: `Rc`).
///
/// Must be created and used inside a compio runtime (`compio::runtime::Runtime::block_on`,
/// [`crate::block_on`], or the thread of a [`crate::BlockingClient`]).
#[derive(Clone)]
pub struct RemotingClient {
    inner: Rc<ClientInner>,
}

impl RemotingClient {
    pub fn new(config: ClientConfig) -> Self {
        assert!(
            config.max_in_flight_per_connection > 0,
            "in-flight window must be positive"
        );
        assert!(
            config.connections_per_address > 0,
            "need at least one connection per address"
        );
        Self {
            inner: Rc::new(ClientInner {
                config,
                next_opaque: Cell::new(1),
                pool: RefCell::new(HashMap::new()),
                handler: Rc::new(RefCell::new(None)),
            }),
        }
    }

    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The default request timeout as a `Duration`.
    pub fn default_timeout(&self) -> Duration {
        Duration::from_millis(self.inner.config.request_timeout_ms)
    }

    /// Installs the handler for requests servers send to this client (all connections).
    pub fn set_request_handler(&self, handler: RequestHandler) {
        *self.inner.handler.borrow_mut() = Some(handler);
    }

    pub(crate) fn next_opaque(&self) -> i32 {
        let o = self.inner.next_opaque.get();
        // Java lets the counter wrap to negative; any distinct value works.
        self.inner.next_opaque.set(o.wrapping_add(1));
        o
    }

    /// Sends `request` to `addr` and waits up to `timeout` for the response (any code).
    pub async fn invoke(
        &self,
        addr: &str,
        mut request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand> {
        self.sign(&mut request);
        let conn = self.connection(addr).await?;
        conn.request(self.next_opaque(), request, timeout).await
    }

    /// [`RemotingClient::invoke`] with an absolute `deadline` the caller computed from a
    /// clock read it already made (`timeout` is what a timeout error reports).
    pub async fn invoke_until(
        &self,
        addr: &str,
        mut request: RemotingCommand,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<RemotingCommand> {
        self.sign(&mut request);
        let conn = self.connection(addr).await?;
        let opaque = self.next_opaque();
        request.opaque = opaque;
        if request.serialize_type != conn.serialize_type {
            request.serialize_type = conn.serialize_type;
        }
        let code = request.code;
        conn.request_until(opaque, code, deadline, timeout, move |buf| {
            request.encode(buf)
        })
        .await
    }

    /// Adds `AccessKey` and `Signature` when the client has credentials; the last change
    /// to a request before it is written, so the signature covers the final header.
    fn sign(&self, request: &mut RemotingCommand) {
        if let Some(credentials) = &self.inner.config.credentials {
            ringmq_acl::sign(request, credentials);
        }
    }

    /// [`RemotingClient::invoke`] with the configured default timeout.
    pub async fn invoke_default(
        &self,
        addr: &str,
        request: RemotingCommand,
    ) -> Result<RemotingCommand> {
        self.invoke(addr, request, self.default_timeout()).await
    }

    /// Sends `request` with the oneway flag; returns once it is queued for writing.
    pub async fn invoke_oneway(&self, addr: &str, mut request: RemotingCommand) -> Result<()> {
        self.sign(&mut request);
        let conn = self.connection(addr).await?;
        conn.oneway(self.next_opaque(), request).await
    }

    /// Number of live pooled connections to `addr` (tests, diagnostics).
    pub fn connection_count(&self, addr: &str) -> usize {
        self.inner
            .pool
            .borrow()
            .get(addr)
            .map(|s| s.conns.iter().filter(|c| c.usable()).count())
            .unwrap_or(0)
    }

    /// Closes every pooled connection (outstanding requests fail with `ConnectionClosed`).
    pub fn close_all(&self) {
        let conns: Vec<Rc<Conn>> = self
            .inner
            .pool
            .borrow_mut()
            .drain()
            .flat_map(|(_, s)| s.conns)
            .collect();
        for c in conns {
            c.close("closed by the client".into());
        }
    }

    /// A usable connection to `addr`, connecting (or reconnecting) as needed.
    pub(crate) async fn connection(&self, addr: &str) -> Result<Rc<Conn>> {
        let max = self.inner.config.connections_per_address;
        loop {
            let must_connect = {
                let mut pool = self.inner.pool.borrow_mut();
                // Look up before inserting: `entry` would allocate the key on every request.
                if !pool.contains_key(addr) {
                    pool.insert(
                        addr.to_string(),
                        AddrSlot {
                            conns: Vec::new(),
                            connecting: 0,
                            waiters: Vec::new(),
                            next: 0,
                        },
                    );
                }
                let Some(slot) = pool.get_mut(addr) else {
                    unreachable!("inserted just above")
                };
                if slot.conns.iter().any(|c| !c.usable()) {
                    slot.conns.retain(|c| c.usable());
                }
                if slot.conns.len() + slot.connecting < max {
                    slot.connecting += 1;
                    true
                } else if !slot.conns.is_empty() {
                    slot.next = slot.next.wrapping_add(1);
                    let c = slot.conns[slot.next % slot.conns.len()].clone();
                    return Ok(c);
                } else {
                    false
                }
            };
            if must_connect {
                let result = self.connect(addr).await;
                let mut pool = self.inner.pool.borrow_mut();
                if let Some(slot) = pool.get_mut(addr) {
                    slot.connecting -= 1;
                    for w in slot.waiters.drain(..) {
                        w.wake();
                    }
                    if let Ok(c) = &result {
                        slot.conns.push(c.clone());
                    }
                }
                return result;
            }
            SlotChange {
                client: self,
                addr,
                registered: false,
            }
            .await;
        }
    }

    async fn connect(&self, addr: &str) -> Result<Rc<Conn>> {
        let cfg = &self.inner.config;
        let connect_err = |reason: String| ClientError::Connect {
            addr: addr.to_string(),
            reason,
        };
        let target: SocketAddr = match addr.parse() {
            Ok(a) => a,
            Err(_) => {
                use std::net::ToSocketAddrs;
                addr.to_socket_addrs()
                    .map_err(|e| connect_err(format!("cannot resolve: {e}")))?
                    .next()
                    .ok_or_else(|| connect_err("resolves to no address".into()))?
            }
        };
        let stream = compio::time::timeout(
            Duration::from_millis(cfg.connect_timeout_ms),
            TcpStream::connect(target),
        )
        .await
        .map_err(|_| connect_err(format!("timed out after {} ms", cfg.connect_timeout_ms)))?
        .map_err(|e| connect_err(e.to_string()))?;
        // Requests are latency-bound and already batched by the writer: never wait for Nagle.
        let _ = stream.set_nodelay(true);
        let mut stream = stream;
        let (tls, initial) = match &cfg.tls {
            None => (None, BytesMut::new()),
            Some(config) => {
                let link = TlsLink::client(config.clone(), target.ip())
                    .map_err(|e| connect_err(e.to_string()))?;
                let timeout = Duration::from_millis(cfg.connect_timeout_ms);
                let (link, initial) =
                    ringmq_tls::io::handshake(&mut stream, link, BytesMut::new(), timeout)
                        .await
                        .map_err(|e| connect_err(format!("TLS handshake failed: {e}")))?;
                (Some(RefCell::new(link)), initial)
            }
        };
        let conn = Rc::new(Conn {
            addr: addr.to_string(),
            fd: stream.as_raw_fd(),
            closed: Cell::new(false),
            going_away: Cell::new(false),
            close_reason: RefCell::new(String::new()),
            pending: RefCell::new(OpaqueMap::default()),
            in_flight: Cell::new(0),
            max_in_flight: cfg.max_in_flight_per_connection,
            slot_waiters: RefCell::new(VecDeque::new()),
            write_buf: RefCell::new(BytesMut::with_capacity(MIN_READ_BYTES)),
            write_high_water_bytes: cfg.write_high_water_bytes,
            writer_waker: RefCell::new(None),
            drain_waiters: RefCell::new(Vec::new()),
            sweeper_waker: RefCell::new(None),
            handler: self.inner.handler.clone(),
            serialize_type: cfg.serialize_type,
            tls,
        });
        let (rd, wr) = stream.into_split();
        compio::runtime::spawn(reader_loop(
            conn.clone(),
            rd,
            FrameDecoder::new(cfg.max_frame_bytes),
            initial,
        ))
        .detach();
        compio::runtime::spawn(writer_loop(conn.clone(), wr)).detach();
        compio::runtime::spawn(sweeper_loop(
            conn.clone(),
            Duration::from_millis(cfg.timeout_scan_interval_ms.max(1)),
        ))
        .detach();
        Ok(conn)
    }
}

/// Waits until a connect attempt to `addr` finishes.
struct SlotChange<'a> {
    client: &'a RemotingClient,
    addr: &'a str,
    registered: bool,
}

impl Future for SlotChange<'_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.registered {
            return Poll::Ready(());
        }
        let mut pool = self.client.inner.pool.borrow_mut();
        match pool.get_mut(self.addr) {
            Some(slot) if slot.connecting > 0 => {
                slot.waiters.push(cx.waker().clone());
                drop(pool);
                self.registered = true;
                Poll::Pending
            }
            _ => Poll::Ready(()),
        }
    }
}

/// Checks a response code: `Ok(cmd)` for `expected`, else [`ClientError::Response`].
pub fn expect_code(
    addr: &str,
    request_code: i32,
    cmd: RemotingCommand,
    expected: i32,
) -> Result<RemotingCommand> {
    if cmd.code == expected {
        Ok(cmd)
    } else {
        Err(ClientError::Response {
            addr: addr.to_string(),
            request_code,
            code: cmd.code,
            remark: cmd.remark.unwrap_or_default(),
        })
    }
}

/// `expect_code` for `SUCCESS`.
pub fn expect_success(
    addr: &str,
    request_code: i32,
    cmd: RemotingCommand,
) -> Result<RemotingCommand> {
    expect_code(addr, request_code, cmd, ResponseCode::Success.code())
}
