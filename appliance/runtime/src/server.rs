//! The Remoting server: the public API that namesrv and broker code against
//! (`RequestHandler`, `Reply`, `Response`, `RequestContext`, `Responder`, `Connection`,
//! `ServerConfig`, `Server`), plus its tuning knobs and metrics.
//!
//! Shape: `Server::start` starts one thread per network core (pinned to its CPU on hosts
//! with more than 2 cores, see `ServerTuning::pin_network_cores`), each running its own
//! compio runtime on io_uring (`core_loop.rs`). Either the first core accepts on the one
//! listener and hands connections round-robin to every core, or every core accepts on its
//! own `SO_REUSEPORT` listener (`ServerTuning::listen_mode`); from then on a connection
//! lives on one core only (`conn.rs`): its reads, frame
//! decoding, handler calls and writes never leave that thread. The only cross-thread
//! paths are messages into a core's inbox: deferred answers (`Responder::respond`),
//! `Connection::send_oneway`, `Connection::close`, connection hand-off and shutdown, each
//! followed by a coalesced eventfd wake-up.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use ringmq_remoting::command::FLAG_RESPONSE;
use ringmq_remoting::{RemotingCommand, ResponseCode, SerializeType};

use crate::stall::{StallStats, DEFAULT_STALL_THRESHOLD};

mod conn;
mod core_local;
pub use core_local::pass_clock;
mod core_loop;
mod file_range;
pub mod local;
mod recv;
#[cfg(any(test, feature = "test-util"))]
pub mod test_util;

pub(crate) use self::core_local::{CoreMsg, CoreShared};
pub use self::file_range::{
    BodyChunk, FileRange, SharedFile, MAX_PIPES_PER_CORE, MAX_STALLED_SPLICES, PIPE_TARGET_BYTES,
};

/// Application logic for one server (namesrv, broker). Shared by every network core.
pub trait RequestHandler: Send + Sync + 'static {
    /// Runs on the network core that owns the connection. Must not block (no disk fsync,
    /// no sleeping): work that waits goes to a stage thread and answers through
    /// `ctx.responder()` with [`Reply::Later`].
    ///
    /// Commands with the response flag set (a client answering a server-initiated
    /// request) are passed here too; nothing the handler returns for them is sent.
    fn handle(&self, request: RemotingCommand, ctx: &RequestContext) -> Reply;
    /// The connection closed (used for channel-expiry tables). Default: nothing.
    fn on_close(&self, _conn: &Connection) {}
    /// Runs on network core `core` once per pass of its loop, right after its doorbell
    /// was reset and its inbox drained, and at least every 50 ms while the core is idle.
    /// Stage threads push results into per-core rings and ring the core's doorbell
    /// (`CoreHandle::doorbell`); this is where the core takes them. Must not block.
    fn on_core_wake(&self, _core: usize) {}
    /// Runs on network core `core` once per pass, after the pass's requests were handled
    /// and before the core waits: work those requests handed to a stage is pushed along
    /// here (or done here, when the stage is idle and may run on this core). Returns
    /// whether that produced results for this core, which then takes them
    /// (`on_core_wake`) and writes its answers before it waits. Must not block.
    fn after_pass(&self, _core: usize) -> bool {
        false
    }
}

/// What the handler does with a request.
#[derive(Debug)]
pub enum Reply {
    /// Answer now (ignored for oneway requests).
    Now(Response),
    /// The handler kept `ctx.responder()` and answers later, from any thread.
    Later,
    /// No answer (oneway requests).
    Nothing,
}

impl From<RemotingCommand> for Reply {
    /// An answer now with no extra body chunks.
    fn from(command: RemotingCommand) -> Self {
        Reply::Now(command.into())
    }
}

/// A response frame. The frame body is `command.body` followed by the `extra_body`
/// chunks, in order, with no user-space copy: a run of memory chunks goes out with one
/// vectored write (e.g. CommitLog record slices for a pull), a file range is spliced from
/// the file to the socket (see [`FileRange`]).
#[derive(Debug, Clone)]
pub struct Response {
    pub command: RemotingCommand,
    pub extra_body: Vec<BodyChunk>,
}

impl From<RemotingCommand> for Response {
    fn from(command: RemotingCommand) -> Self {
        Self {
            command,
            extra_body: Vec::new(),
        }
    }
}

impl Response {
    /// A response whose body continues with `extra_body` (memory chunks, file ranges or
    /// both) after `command.body`.
    pub fn with_extra_body<C: Into<BodyChunk>>(
        command: RemotingCommand,
        extra_body: impl IntoIterator<Item = C>,
    ) -> Self {
        Self {
            command,
            extra_body: extra_body.into_iter().map(Into::into).collect(),
        }
    }

    /// Body bytes on the wire: `command.body` plus every extra chunk.
    pub fn body_len(&self) -> usize {
        self.command.body.len() + self.extra_body.iter().map(BodyChunk::len).sum::<usize>()
    }
}

/// `REQUEST_CODE_NOT_SUPPORTED` (3) for `request`, with the remark Java servers send.
pub fn not_supported(request: &RemotingCommand) -> RemotingCommand {
    request.response_to(
        ResponseCode::RequestCodeNotSupported.code(),
        Some(format!(" request type {} not supported", request.code)),
    )
}

/// A response with `code`/`remark` for a request known only by opaque and serialize
/// type (its command was moved into the handler).
pub(crate) fn response_for(
    opaque: i32,
    serialize_type: SerializeType,
    code: ResponseCode,
    remark: String,
) -> RemotingCommand {
    let mut r = RemotingCommand::request(code.code(), opaque);
    r.flag = FLAG_RESPONSE;
    r.serialize_type = serialize_type;
    r.remark = Some(remark);
    r
}

/// The remark of the `SYSTEM_BUSY` answer when an in-flight bound is reached; the
/// `[OVERLOAD]` prefix is what RocketMQ clients and operators look for.
pub const OVERLOAD_REMARK: &str = "[OVERLOAD]system busy, start flow control for a while";

// ---------------------------------------------------------------------------------------
// Connection, RequestContext, Responder
// ---------------------------------------------------------------------------------------

/// Handle to a live connection: `Clone + Send + Sync`, usable from any thread.
#[derive(Clone)]
pub struct Connection {
    pub(crate) inner: Arc<ConnShared>,
}

pub(crate) struct ConnShared {
    pub(crate) id: u64,
    pub(crate) peer: SocketAddr,
    pub(crate) local: SocketAddr,
    pub(crate) alive: AtomicBool,
    pub(crate) core: Arc<CoreShared>,
}

impl Connection {
    /// Unique for the server's lifetime: the owning core's index in the top 16 bits.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    pub fn peer_addr(&self) -> SocketAddr {
        self.inner.peer
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local
    }

    /// False once the connection closed or `close()` was called.
    pub fn is_alive(&self) -> bool {
        self.inner.alive.load(Ordering::Acquire)
    }

    /// Index (into `ServerConfig::network_cores`) of the core that owns this connection.
    pub fn core_index(&self) -> usize {
        self.inner.core.index
    }

    /// Sends a server-initiated oneway request (e.g. NOTIFY_CONSUMER_IDS_CHANGED); the
    /// oneway flag is set here. Returns false when the connection is gone or the owning
    /// core's send queue is full (`ServerTuning::max_queued_sends_per_core`); the command
    /// is also dropped later if the connection's output is backed up past its bound.
    pub fn send_oneway(&self, cmd: RemotingCommand) -> bool {
        if !self.is_alive() {
            return false;
        }
        let mut cmd = cmd;
        cmd.mark_oneway();
        self.inner.core.post_send(self.inner.id, cmd)
    }

    /// Closes the connection (asynchronously, on its core). Idempotent.
    pub fn close(&self) {
        if self.inner.alive.swap(false, Ordering::AcqRel) {
            self.inner.core.post(CoreMsg::Close {
                conn_id: self.inner.id,
            });
        }
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("id", &self.inner.id)
            .field("peer", &self.inner.peer)
            .field("local", &self.inner.local)
            .field("alive", &self.is_alive())
            .finish()
    }
}

pub use self::conn::RequestContext;

/// A deferred answer, usable from any thread (`Send`). Dropping it unanswered sends
/// `SYSTEM_ERROR` so nothing is silently lost.
pub struct Responder {
    conn: Connection,
    slot: u32,
    generation: u32,
    /// False for a responder that must not answer (already answered, or a duplicate).
    armed: bool,
}

impl Responder {
    /// Sends the answer. The opaque and response flag are set from the request, so a
    /// handler cannot misaddress it. Ignored for oneway requests (only frees the slot).
    pub fn respond(mut self, r: impl Into<Response>) {
        if !self.armed {
            return;
        }
        self.armed = false;
        let response = r.into();
        self.conn.inner.core.post(CoreMsg::Respond {
            conn_id: self.conn.inner.id,
            slot: self.slot,
            generation: self.generation,
            response: Some(response),
        });
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    pub(crate) fn armed(conn: Connection, slot: u32, generation: u32) -> Self {
        Self {
            conn,
            slot,
            generation,
            armed: true,
        }
    }

    /// A responder that answers nothing: handed out by a second `responder()` call for
    /// the same request, so the first one stays the only answer.
    pub(crate) fn disarmed(conn: Connection) -> Self {
        Self {
            conn,
            slot: u32::MAX,
            generation: u32::MAX,
            armed: false,
        }
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if self.armed {
            // `response: None` makes the owning core answer SYSTEM_ERROR for this slot.
            self.conn.inner.core.post(CoreMsg::Respond {
                conn_id: self.conn.inner.id,
                slot: self.slot,
                generation: self.generation,
                response: None,
            });
        }
    }
}

impl fmt::Debug for Responder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Responder")
            .field("conn", &self.conn.inner.id)
            .field("slot", &self.slot)
            .field("armed", &self.armed)
            .finish()
    }
}

/// Handle to one network core, `Clone + Send + Sync`: lets another thread (e.g. the reput
/// stage waking long-polling pulls) run code on that core, where its per-core state lives.
#[derive(Clone)]
pub struct CoreHandle {
    shared: Arc<CoreShared>,
}

impl CoreHandle {
    /// Index into `ServerConfig::network_cores`; matches `RequestContext::core_index()`.
    pub fn index(&self) -> usize {
        self.shared.index
    }

    /// The eventfd this core's loop waits on. A thread that pushed work into a ring the
    /// core drains in `RequestHandler::on_core_wake` rings it (once per batch: wake-ups
    /// coalesce until the core looks again).
    pub fn doorbell(&self) -> &Arc<ringmq_ring::Notifier> {
        &self.shared.notifier
    }

    /// Runs `f` on the core thread soon (next loop iteration; wake-ups coalesce). Returns
    /// false when the core's bounded queue (`max_queued_sends_per_core`) is full. Must
    /// not block, like a handler. Closures still queued at shutdown are dropped unrun.
    pub fn execute(&self, f: impl FnOnce() + Send + 'static) -> bool {
        self.shared.post_bounded(CoreMsg::Run(Box::new(f)))
    }
}

impl fmt::Debug for CoreHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoreHandle")
            .field("index", &self.shared.index)
            .field("cpu", &self.shared.cpu)
            .finish()
    }
}

// ---------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------

/// The agreed server configuration. Further knobs live in [`ServerTuning`].
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen_addr: SocketAddr,
    /// CPU cores to run network cores on, one thread each (see `CoreMap::network`).
    pub network_cores: Vec<usize>,
    /// Frames larger than this (length word included) close their connection.
    pub max_frame_bytes: usize,
    /// Close a connection with no read and no write for this long; 0 disables.
    pub idle_timeout_ms: u64,
    /// Deferred (`Reply::Later`) requests one connection may have outstanding.
    pub max_in_flight_per_connection: usize,
    /// Deferred requests the whole server may have outstanding; split evenly across
    /// cores so admission needs no shared counter.
    pub max_in_flight_total: usize,
    /// For logs and thread names.
    pub name: String,
}

/// Java's `serverChannelMaxIdleTimeSeconds` default, 120 s.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 120_000;
pub const DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION: usize = 8_192;
pub const DEFAULT_MAX_IN_FLIGHT_TOTAL: usize = 65_536;

impl ServerConfig {
    /// Defaults: network cores from `CoreMap::detect()`, 16 MiB frames, 120 s idle.
    pub fn new(listen_addr: SocketAddr, name: impl Into<String>) -> Self {
        Self {
            listen_addr,
            network_cores: crate::cores::CoreMap::detect().network,
            max_frame_bytes: ringmq_remoting::DEFAULT_MAX_FRAME_BYTES,
            idle_timeout_ms: DEFAULT_IDLE_TIMEOUT_MS,
            max_in_flight_per_connection: DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION,
            max_in_flight_total: DEFAULT_MAX_IN_FLIGHT_TOTAL,
            name: name.into(),
        }
    }
}

/// Less common knobs, with defaults that suit a broker.
#[derive(Debug, Clone)]
pub struct ServerTuning {
    /// Output bytes queued for one connection above which the server stops reading from
    /// it (a client that does not read cannot make the server buffer without bound);
    /// reading resumes below half of it.
    pub max_output_bytes_per_connection: usize,
    /// Largest free space offered to one socket read when the connection is busy (reads
    /// start at 4 KiB and grow while they fill up). A frame of known length is offered
    /// more, but never more than is already buffered: the buffer grows with the bytes
    /// received, not with the announced length.
    pub read_chunk_bytes: usize,
    /// How long `shutdown` waits for deferred answers before failing them.
    pub drain_timeout_ms: u64,
    /// Bound on `send_oneway`/hand-off messages waiting in one core's inbox.
    pub max_queued_sends_per_core: usize,
    /// Submission-queue entries of each core's io_uring.
    pub io_uring_entries: u32,
    /// `IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN` (kernel 6.1+): completions are
    /// processed only when the core enters the kernel to wait, instead of interrupting it.
    /// When false, `COOP_TASKRUN` is used.
    pub io_uring_defer_taskrun: bool,
    /// A core loop iteration busy longer than this counts as a stall.
    pub stall_threshold: Duration,
    /// TCP listen backlog (Java's `serverSocketBacklog` default, 1024).
    pub listen_backlog: i32,
    /// Pin each network core's thread to its CPU. Default: only on hosts with more than 2
    /// cores. On a 1-2 core host the load generator, the store stages and everything else
    /// share those same cores, and a pinned network thread waits behind whatever runs on
    /// its CPU while the other one idles: measured on a loaded 2-vCPU VM, pinned network
    /// threads saw 195 ms scheduling delays and 57-168k msg/s (p99 5-20 ms, max 230-545
    /// ms) where unpinned ones did 169-226k msg/s (p99 1.6-3.6 ms, max 9-150 ms).
    pub pin_network_cores: bool,
    /// How connections read their socket (`ringmq.net.recvMode`). Default `Single`, by
    /// measurement (echo bench, benches/README.md): multishot used 0-14 % less CPU per
    /// message for 64-byte frames but 6-17 % more for 1 KiB to 4 MiB frames (every byte is
    /// copied once more, out of the ring), and a broker's frames carry messages.
    pub recv_mode: RecvMode,
    /// Buffers in each network core's provided buffer ring (multishot mode only); the
    /// kernel needs a power of two, so it is rounded up. At most 32768.
    pub recv_buffer_count: u16,
    /// Size of one provided buffer: the most one multishot completion delivers.
    pub recv_buffer_bytes: usize,
    /// How connections are accepted (`ringmq.net.listenMode`).
    pub listen_mode: ListenMode,
    /// Bound on the frame-buffer bytes one core holds for frames not yet complete
    /// (`ringmq.net.maxPartialFrameBytesPerCore`). A frame buffer grows with the bytes that
    /// actually arrived, never with the length a prefix announces; when the core's sum goes
    /// over this bound, the connection holding the most partial bytes is closed (ties: the
    /// oldest connection), repeatedly until the sum is under it.
    pub max_partial_frame_bytes_per_core: usize,
    /// Bound on the output bytes held in memory by one core for all its connections
    /// (`ringmq.net.maxOutputBytesPerCore`; file ranges are not counted, they are spliced
    /// from the page cache). The per-connection bound stops reading from one client that
    /// does not read; this one bounds many such clients together: when the core's sum goes
    /// over it, the connection with the most output is closed, preferring connections whose
    /// reading is already paused, until the sum is under it.
    pub max_output_bytes_per_core: usize,
    /// Descriptors kept free for the rest of the process (the store's files): an accepted
    /// connection that leaves fewer than this many below `RLIMIT_NOFILE` is closed at once
    /// (`ringmq.net.fdReserve`).
    pub fd_reserve: FdReserve,
    /// TLS on this port (`tls.server.mode` permissive or enforcing), or `None` for plain
    /// connections only. Permissive ports read a connection's first bytes before serving
    /// it: a TLS handshake record (0x16) starts TLS, anything else is a plain client.
    pub tls: Option<ringmq_tls::TlsServer>,
}

/// How many descriptors the server leaves free for the rest of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FdReserve {
    /// `max(64, RLIMIT_NOFILE / 10)`.
    Auto,
    /// Exactly this many; 0 turns the check off.
    Count(u64),
}

impl FdReserve {
    /// Descriptors to keep free under a soft limit of `limit`.
    pub fn for_limit(self, limit: u64) -> u64 {
        match self {
            Self::Auto => (limit / 10).max(MIN_AUTO_FD_RESERVE),
            Self::Count(n) => n,
        }
    }
}

/// The least descriptors [`FdReserve::Auto`] keeps free.
pub const MIN_AUTO_FD_RESERVE: u64 = 64;

impl std::str::FromStr for FdReserve {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("auto") {
            return Ok(Self::Auto);
        }
        text.parse()
            .map(Self::Count)
            .map_err(|_| "expected auto or a number of descriptors (0 disables)".to_string())
    }
}

impl fmt::Display for FdReserve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Count(n) => write!(f, "{n}"),
        }
    }
}

/// How a connection's reader takes bytes off its socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvMode {
    /// One multishot receive armed per connection; the kernel picks a buffer from the
    /// core's provided buffer ring for each arrival, the reader copies it behind the
    /// partial frame and returns the buffer at once. Frames with a large known remainder
    /// are finished with plain reads straight into the frame buffer.
    Multishot,
    /// One plain read at a time into the connection's own frame buffer.
    Single,
}

/// How the server accepts connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenMode {
    /// One listener on the first network core hands connections round-robin to every core.
    Acceptor,
    /// One `SO_REUSEPORT` listener per network core; the kernel spreads new connections by
    /// a hash of their addresses (even over many connections, uneven over a few).
    ReusePort,
}

/// Prefix of the network keys read by [`ServerTuning::apply_net_properties`].
pub const NET_KEY_PREFIX: &str = "ringmq.net.";
/// `ringmq.net.recvMode`: `multishot` or `single`.
pub const RECV_MODE_KEY: &str = "ringmq.net.recvMode";
/// `ringmq.net.listenMode`: `acceptor` or `reuseport`.
pub const LISTEN_MODE_KEY: &str = "ringmq.net.listenMode";
/// `ringmq.net.pinNetworkCores`: `true`, `false` or `auto` (pin on hosts with more than 2
/// cores, see [`ServerTuning::pin_network_cores`]).
pub const PIN_NETWORK_CORES_KEY: &str = "ringmq.net.pinNetworkCores";
/// `ringmq.net.maxPartialFrameBytesPerCore`: bytes (see
/// [`ServerTuning::max_partial_frame_bytes_per_core`]).
pub const MAX_PARTIAL_FRAME_BYTES_PER_CORE_KEY: &str = "ringmq.net.maxPartialFrameBytesPerCore";
/// `ringmq.net.maxOutputBytesPerCore`: bytes (see [`ServerTuning::max_output_bytes_per_core`]).
pub const MAX_OUTPUT_BYTES_PER_CORE_KEY: &str = "ringmq.net.maxOutputBytesPerCore";
/// `ringmq.net.fdReserve`: `auto` or a number of descriptors (see [`FdReserve`]).
pub const FD_RESERVE_KEY: &str = "ringmq.net.fdReserve";

/// Every key [`ServerTuning::apply_net_properties`] knows.
const NET_KEYS: &[&str] = &[
    RECV_MODE_KEY,
    LISTEN_MODE_KEY,
    PIN_NETWORK_CORES_KEY,
    MAX_PARTIAL_FRAME_BYTES_PER_CORE_KEY,
    MAX_OUTPUT_BYTES_PER_CORE_KEY,
    FD_RESERVE_KEY,
];

/// A byte bound: a positive whole number of bytes.
fn parse_byte_bound(value: &str) -> Result<usize, String> {
    match value.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("expected a positive number of bytes".to_string()),
    }
}

/// `auto` follows the host's core count; otherwise a boolean.
fn parse_pin_network_cores(value: &str) -> Result<bool, String> {
    match value.trim() {
        "auto" => Ok(crate::cores::available_cores() > 2),
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("expected true, false or auto".to_string()),
    }
}

/// A `ringmq.net.*` key or value that cannot be used; names the key and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetConfigError {
    pub key: String,
    pub value: String,
    pub why: String,
}

impl fmt::Display for NetConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={:?}: {}", self.key, self.value, self.why)
    }
}

impl std::error::Error for NetConfigError {}

impl std::str::FromStr for RecvMode {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "multishot" => Ok(Self::Multishot),
            "single" => Ok(Self::Single),
            _ => Err("expected multishot or single".to_string()),
        }
    }
}

impl std::str::FromStr for ListenMode {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "acceptor" => Ok(Self::Acceptor),
            "reuseport" => Ok(Self::ReusePort),
            _ => Err("expected acceptor or reuseport".to_string()),
        }
    }
}

impl fmt::Display for RecvMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Multishot => "multishot",
            Self::Single => "single",
        })
    }
}

impl fmt::Display for ListenMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Acceptor => "acceptor",
            Self::ReusePort => "reuseport",
        })
    }
}

impl ServerTuning {
    /// Applies every `ringmq.net.*` key in `properties`; other keys are ignored (they
    /// belong to other components). An unknown `ringmq.net.*` key or a bad value is an
    /// error, so a typo is not silently ignored.
    pub fn apply_net_properties<'a, I>(&mut self, properties: I) -> Result<(), NetConfigError>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        for (key, value) in properties {
            if !key.starts_with(NET_KEY_PREFIX) {
                continue;
            }
            let err = |why: String| NetConfigError {
                key: key.to_string(),
                value: value.to_string(),
                why,
            };
            match key {
                RECV_MODE_KEY => self.recv_mode = value.parse().map_err(err)?,
                LISTEN_MODE_KEY => self.listen_mode = value.parse().map_err(err)?,
                PIN_NETWORK_CORES_KEY => {
                    self.pin_network_cores = parse_pin_network_cores(value).map_err(err)?
                }
                MAX_PARTIAL_FRAME_BYTES_PER_CORE_KEY => {
                    self.max_partial_frame_bytes_per_core = parse_byte_bound(value).map_err(err)?
                }
                MAX_OUTPUT_BYTES_PER_CORE_KEY => {
                    self.max_output_bytes_per_core = parse_byte_bound(value).map_err(err)?
                }
                FD_RESERVE_KEY => self.fd_reserve = value.parse().map_err(err)?,
                _ => return Err(err(format!("unknown key; known: {}", NET_KEYS.join(", ")))),
            }
        }
        Ok(())
    }
}

impl Default for ServerTuning {
    fn default() -> Self {
        Self {
            max_output_bytes_per_connection: 4 * 1024 * 1024,
            read_chunk_bytes: 64 * 1024,
            drain_timeout_ms: 5_000,
            max_queued_sends_per_core: 16_384,
            io_uring_entries: 1024,
            io_uring_defer_taskrun: false,
            stall_threshold: DEFAULT_STALL_THRESHOLD,
            listen_backlog: 1024,
            pin_network_cores: crate::cores::available_cores() > 2,
            recv_mode: RecvMode::Single,
            // 4 MiB per core. Measured on the echo bench (benches/README.md): 64 x 64 KiB
            // beat 256 x 16 KiB and 1024 x 4 KiB by 4-34 % CPU per message (fewer, fuller
            // completions per burst).
            recv_buffer_count: 64,
            recv_buffer_bytes: 64 * 1024,
            listen_mode: ListenMode::Acceptor,
            // 16 frames of the largest size (16 MiB) being assembled at once per core.
            max_partial_frame_bytes_per_core: DEFAULT_MAX_PARTIAL_FRAME_BYTES_PER_CORE,
            // 16 clients at the per-connection bound (4 MiB) per core.
            max_output_bytes_per_core: DEFAULT_MAX_OUTPUT_BYTES_PER_CORE,
            fd_reserve: FdReserve::Auto,
            tls: None,
        }
    }
}

/// Default of [`ServerTuning::max_partial_frame_bytes_per_core`]: 256 MiB.
pub const DEFAULT_MAX_PARTIAL_FRAME_BYTES_PER_CORE: usize = 256 * 1024 * 1024;
/// Default of [`ServerTuning::max_output_bytes_per_core`]: 64 MiB.
pub const DEFAULT_MAX_OUTPUT_BYTES_PER_CORE: usize = 64 * 1024 * 1024;

// ---------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------

/// A running server. Dropping it shuts it down like [`Server::shutdown`].
pub struct Server {
    name: String,
    local_addr: SocketAddr,
    cores: Vec<Arc<CoreShared>>,
    threads: Vec<JoinHandle<()>>,
}

/// Per-core counters (a snapshot).
#[derive(Debug, Clone, Default)]
pub struct CoreStats {
    /// Index into `ServerConfig::network_cores`.
    pub index: usize,
    /// The CPU core the thread was asked to run on.
    pub cpu: usize,
    pub connections: u64,
    /// Deferred requests outstanding on this core.
    pub in_flight: u64,
    pub requests: u64,
    /// Requests refused with SYSTEM_BUSY `[OVERLOAD]` (oneway ones are dropped).
    pub rejected_busy: u64,
    /// Connections closed for a malformed or oversize frame.
    pub bad_frames: u64,
    /// Times a connection's reading paused because its output was backed up.
    pub read_pauses: u64,
    pub idle_closed: u64,
    /// eventfd writes that woke this core (completions coalesce into fewer writes).
    pub wakeups: u64,
    /// True when this core receives with multishot; false in `RecvMode::Single` and when
    /// the provided buffer ring could not be set up (logged at start).
    pub recv_multishot: bool,
    /// Multishot receives armed (one per connection, plus re-arms after a pause, a large
    /// frame, an exhausted buffer ring or the kernel ending one).
    pub recv_multishot_arms: u64,
    /// Multishot receives ended because the core's buffer ring was empty (ENOBUFS); each
    /// is followed by one plain read, so a steady count means `recv_buffer_count` is low.
    pub recv_buffers_exhausted: u64,
    /// Frame-buffer bytes held now for frames not yet complete (against
    /// `ServerTuning::max_partial_frame_bytes_per_core`).
    pub partial_frame_bytes: u64,
    /// Connections closed because the core's partial-frame bytes went over their bound.
    pub partial_frame_closes: u64,
    /// Output bytes held in memory now for this core's connections (against
    /// `ServerTuning::max_output_bytes_per_core`).
    pub output_bytes: u64,
    /// The most `output_bytes` has been.
    pub output_bytes_peak: u64,
    /// Connections closed because the core's output bytes went over their bound.
    pub output_closes: u64,
    /// Failed accepts (e.g. EMFILE at the descriptor limit); each one pauses accepting for
    /// a growing delay.
    pub accept_errors: u64,
    /// Connections closed right after accept to keep `ServerTuning::fd_reserve` free.
    pub accept_refused_fd_reserve: u64,
    /// TLS connections served after a finished handshake.
    pub tls_handshakes: u64,
    /// Connections closed by a TLS port: a failed or timed-out handshake, or a plain
    /// client on an enforcing port.
    pub tls_refused: u64,
    /// The loop's stall counter and busy time.
    pub loop_stats: StallStats,
}

impl Server {
    /// Binds `config.listen_addr` and starts one network core per `config.network_cores`
    /// entry. Fails with the cause if the address cannot be bound or io_uring cannot be set
    /// up (e.g. blocked by seccomp or `kernel.io_uring_disabled`).
    pub fn start(config: ServerConfig, handler: Arc<dyn RequestHandler>) -> io::Result<Server> {
        Self::start_with(config, ServerTuning::default(), handler)
    }

    /// [`Server::start`] with explicit tuning.
    pub fn start_with(
        config: ServerConfig,
        tuning: ServerTuning,
        handler: Arc<dyn RequestHandler>,
    ) -> io::Result<Server> {
        let (local_addr, cores, threads) = self::core_loop::start_cores(&config, &tuning, handler)?;
        tracing::info!(
            server = %config.name,
            %local_addr,
            cores = %crate::cores::format_core_list(&config.network_cores),
            pinned = tuning.pin_network_cores,
            recv = %tuning.recv_mode,
            listen = %tuning.listen_mode,
            tls = %tuning.tls.as_ref().map_or(ringmq_tls::TlsMode::Disabled, |t| t.mode),
            "remoting server listening"
        );
        Ok(Server {
            name: config.name,
            local_addr,
            cores,
            threads,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Graceful drain: stop accepting and reading, wait up to
    /// `ServerTuning::drain_timeout_ms` for deferred answers, fail the rest with
    /// SYSTEM_ERROR, flush, close every connection, join the core threads.
    pub fn shutdown(mut self) {
        self.stop();
    }

    /// Per-core counters.
    pub fn stats(&self) -> Vec<CoreStats> {
        self.cores.iter().map(|c| c.stats()).collect()
    }

    /// Sum of the per-core loop stall counters (iterations busy > the stall threshold).
    pub fn stalls(&self) -> u64 {
        self.cores.iter().map(|c| c.meter.stalls()).sum()
    }

    /// One handle per network core, in `network_cores` order (index = `core_index()`).
    pub fn core_handles(&self) -> Vec<CoreHandle> {
        self.cores
            .iter()
            .map(|c| CoreHandle { shared: c.clone() })
            .collect()
    }

    fn stop(&mut self) {
        if self.threads.is_empty() {
            return;
        }
        for core in &self.cores {
            core.post(CoreMsg::Shutdown);
        }
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                tracing::error!(server = %self.name, "a network core thread panicked during shutdown");
            }
        }
        tracing::info!(server = %self.name, "remoting server stopped");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.name)
            .field("local_addr", &self.local_addr)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn not_supported_matches_java_remark() {
        let mut req = RemotingCommand::request(9999, 77);
        req.serialize_type = SerializeType::RocketMq;
        let r = not_supported(&req);
        assert_eq!(r.code, 3);
        assert_eq!(r.opaque, 77);
        assert!(r.is_response());
        assert_eq!(
            r.remark.as_deref(),
            Some(" request type 9999 not supported")
        );
        assert_eq!(r.serialize_type, SerializeType::RocketMq);
    }

    #[test]
    fn pin_network_cores_key_overrides_the_core_count_default() {
        let mut t = ServerTuning::default();
        t.apply_net_properties([(PIN_NETWORK_CORES_KEY, "true")])
            .unwrap();
        assert!(t.pin_network_cores);
        t.apply_net_properties([(PIN_NETWORK_CORES_KEY, "false")])
            .unwrap();
        assert!(!t.pin_network_cores);
        t.apply_net_properties([(PIN_NETWORK_CORES_KEY, "auto")])
            .unwrap();
        assert_eq!(t.pin_network_cores, crate::cores::available_cores() > 2);
        let e = t
            .apply_net_properties([(PIN_NETWORK_CORES_KEY, "yes")])
            .unwrap_err();
        assert!(e.to_string().contains(PIN_NETWORK_CORES_KEY), "{e}");
    }

    #[test]
    fn bound_and_reserve_keys_parse_and_reject_bad_values() {
        let mut t = ServerTuning::default();
        assert_eq!(t.fd_reserve, FdReserve::Auto);
        t.apply_net_properties([
            (MAX_PARTIAL_FRAME_BYTES_PER_CORE_KEY, "1048576"),
            (MAX_OUTPUT_BYTES_PER_CORE_KEY, " 2097152 "),
            (FD_RESERVE_KEY, "128"),
        ])
        .unwrap();
        assert_eq!(t.max_partial_frame_bytes_per_core, 1 << 20);
        assert_eq!(t.max_output_bytes_per_core, 2 << 20);
        assert_eq!(t.fd_reserve, FdReserve::Count(128));
        t.apply_net_properties([(FD_RESERVE_KEY, "AUTO")]).unwrap();
        assert_eq!(t.fd_reserve, FdReserve::Auto);
        for (key, bad) in [
            (MAX_PARTIAL_FRAME_BYTES_PER_CORE_KEY, "0"),
            (MAX_OUTPUT_BYTES_PER_CORE_KEY, "64MiB"),
            (FD_RESERVE_KEY, "-1"),
        ] {
            let e = t.apply_net_properties([(key, bad)]).unwrap_err();
            assert_eq!(e.key, key, "{e}");
        }
        let e = t
            .apply_net_properties([("ringmq.net.fdreserve", "1")])
            .unwrap_err();
        assert!(e.to_string().contains(FD_RESERVE_KEY), "{e}");
    }

    #[test]
    fn response_body_len_counts_extra_chunks() {
        let cmd = RemotingCommand::request(0, 1).with_body(Bytes::from_static(b"abc"));
        let r = Response::with_extra_body(
            cmd,
            vec![Bytes::from_static(b"de"), Bytes::from_static(b"f")],
        );
        assert_eq!(r.body_len(), 6);
    }
}
