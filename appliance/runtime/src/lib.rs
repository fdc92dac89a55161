//! ringmq runtime: pinned network cores (compio on io_uring), stage threads, cross-core rings,
//! and the Remoting server.
//!
//! Modules: [`cores`] (core placement, `spawn_pinned`), [`server`] (the Remoting server),
//! [`ring`] (bounded cross-core rings), [`notify`] (eventfd `Notifier`), [`stall`] (loop
//! stall counter). The allocator is re-exported as [`MiMalloc`]; the binary installs it:
//! `#[global_allocator] static GLOBAL: ringmq_runtime::MiMalloc = ringmq_runtime::MiMalloc;`
//!
//! AGREED SERVER API (namesrv and broker helpers are coding against exactly this; the
//! "EOF_PLACEHOLDER" in your task prompt stands for this text):
//!
//! Agreed runtime/server API (crate `ringmq-runtime`, owned by the runtime helper; namesrv and broker code against it):
//! ```text
//! // ringmq_runtime::server
//! pub trait RequestHandler: Send + Sync + 'static {
//!     /// Runs on the network core that owns the connection. Must not block (no disk fsync, no sleeping).
//!     fn handle(&self, request: RemotingCommand, ctx: &RequestContext) -> Reply;
//!     /// The connection closed (used for channel-expiry tables). Default: nothing.
//!     fn on_close(&self, _conn: &Connection) {}
//! }
//! pub enum Reply { Now(Response), Later /* handler kept ctx.responder() */, Nothing /* oneway */ }
//! /// Frame body = command.body followed by extra_body chunks, in order, no user-space copy: memory chunks go out with writev (e.g. CommitLog record slices for pull), file ranges are spliced from the file (server/file_range.rs).
//! pub enum BodyChunk { Memory(bytes::Bytes), File(FileRange /* Arc'd open file + offset + len */) }
//! pub struct Response { pub command: RemotingCommand, pub extra_body: Vec<BodyChunk> }
//! impl From<RemotingCommand> for Response;
//! pub struct RequestContext; impl RequestContext { pub fn responder(&self) -> Responder; pub fn connection(&self) -> &Connection; }
//! /// A deferred answer, usable from any thread (Send). Dropping it unanswered sends SYSTEM_ERROR so nothing is silently lost.
//! pub struct Responder; impl Responder { pub fn respond(self, r: impl Into<Response>); pub fn connection(&self) -> &Connection; }
//! /// Handle to a live connection, Clone + Send + Sync.
//! pub struct Connection; impl Connection { pub fn id(&self) -> u64; pub fn peer_addr(&self) -> SocketAddr; pub fn local_addr(&self) -> SocketAddr; pub fn is_alive(&self) -> bool; pub fn send_oneway(&self, cmd: RemotingCommand) -> bool /* server-initiated request, e.g. NOTIFY_CONSUMER_IDS_CHANGED */; pub fn close(&self); }
//! pub struct ServerConfig { pub listen_addr: SocketAddr, pub network_cores: Vec<usize>, pub max_frame_bytes: usize, pub idle_timeout_ms: u64, pub max_in_flight_per_connection: usize, pub max_in_flight_total: usize, pub name: String /* for logs/thread names */ }
//! pub struct Server; impl Server { pub fn start(config: ServerConfig, handler: Arc<dyn RequestHandler>) -> std::io::Result<Server>; pub fn local_addr(&self) -> SocketAddr; pub fn shutdown(self) /* graceful drain */; }
//! ```
//! The remoting crate's types: `ringmq_remoting::{RemotingCommand, ExtFields, SerializeType, FrameDecoder, codes::{RequestCode, ResponseCode, LanguageCode}}` — see /work/main/appliance/remoting/src/command.rs and frame.rs (RemotingCommand { code: i32, language, version, opaque, flag, remark: Option<String>, ext_fields: ExtFields, body: Bytes, serialize_type }, `RemotingCommand::request(code, opaque)`, `req.response_to(code, remark)`, `encode(&mut BytesMut)`, `encode_header_for_body(body_len, &mut BytesMut)`, `FrameDecoder::decode(&mut BytesMut) -> Result<Option<RemotingCommand>, FrameError>`). Typed headers: `ringmq_remoting::header::{CommandHeader, HeaderError}` (trait with `decode(&ExtFields)` / `encode(&self, &mut ExtFields)`), the typed header structs are being written now by the remoting-core helper in appliance/remoting/src/header.rs (+ header/ dir).

pub mod cores;
pub mod notify;
pub mod ring;
pub mod server;
pub mod stall;

pub use cores::{spawn_pinned, CoreMap, CoreMapError};
pub use mimalloc::MiMalloc;
pub use notify::Notifier;
pub use ring::{ring, ring_with_notifier, Full, RingReceiver, RingSender};
pub use server::{
    not_supported, Connection, CoreHandle, CoreStats, ListenMode, NetConfigError, RecvMode, Reply,
    RequestContext, RequestHandler, Responder, Response, Server, ServerConfig, ServerTuning,
};
pub use server::{BodyChunk, FdReserve, FileRange, SharedFile};
pub use stall::{StallMeter, StallStats};
