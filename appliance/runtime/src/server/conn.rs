//! One connection on its network core: the reader task (read, split frames, dispatch to
//! the handler, back-pressure), the writer task (batched, vectored writes), the output
//! queue, the table of deferred requests, the connection's share of its core's memory
//! bounds (`CoreBudget`), and the `RequestContext` handed to handlers.
//!
//! Invariant that makes `shutdown(2)` on the raw fd safe: while `phase != Closed`, at
//! least one of the two tasks is alive and holds a clone of the socket, so the fd is open.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use compio::io::AsyncWriteExt;
use compio::net::TcpStream;
use compio::BufResult;
use ringmq_remoting::command::FLAG_RESPONSE;
use ringmq_remoting::{FrameDecoder, RemotingCommand, ResponseCode, SerializeType};
use ringmq_tls::TlsLink;

use super::core_local::{bump, CoreBudget, CoreConn, MAX_IOVECS};
use super::file_range::{
    send_file_ranges, send_memory_before_range, send_sealed_file_range, BodyChunk, FileRange,
};
use super::recv::{Received, SocketReceiver, MIN_READ_CHUNK_BYTES};
use super::{response_for, Connection, Reply, Responder, Response, ServerTuning, OVERLOAD_REMARK};

/// Bodies up to this size are copied behind their header (one iovec beats two for small
/// frames); larger bodies and every `extra_body` chunk are written from their own memory.
const INLINE_BODY_MAX_BYTES: usize = 8 * 1024;
/// Room reserved for one encoded header (a JSON response header is ~200-400 bytes; the
/// buffer grows if a header is larger).
const HEADER_RESERVE_BYTES: usize = 512;
/// Initial write buffer; also the minimum size it is re-allocated at. Small, because every
/// connection holds one, idle or not.
const WRITE_BUF_BYTES: usize = 4 * 1024;
/// A frame buffer that grew past this many read chunks (`ServerTuning::read_chunk_bytes`)
/// for a large frame is replaced by a small one once that frame is consumed, so a burst of
/// large frames does not leave every connection holding its peak buffer. While a frame is
/// assembled its buffer is at least about a third full (it grows with the bytes received),
/// so a buffer less than a quarter full holds no large frame in progress.
const SHRINK_ABOVE_READ_CHUNKS: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Open,
    /// Server shutdown: no more reads; waiting for deferred answers and the flush.
    Draining,
    Closed,
}

/// A deferred request waiting for its `Responder`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pending {
    pub(crate) opaque: i32,
    pub(crate) serialize_type: SerializeType,
    pub(crate) oneway: bool,
    pub(crate) request_code: i32,
}

impl Pending {
    /// The answer to this request: `response`, or SYSTEM_ERROR (logged) when its
    /// `Responder` was dropped without answering.
    pub(crate) fn answer_or_error(&self, conn_id: u64, response: Option<Response>) -> Response {
        response.unwrap_or_else(|| {
            tracing::error!(
                conn = conn_id,
                opaque = self.opaque,
                code = self.request_code,
                "a Responder was dropped without answering; sending SYSTEM_ERROR"
            );
            response_for(
                self.opaque,
                self.serialize_type,
                ResponseCode::SystemError,
                format!(
                    "request code {} was dropped by the server without an answer",
                    self.request_code
                ),
            )
            .into()
        })
    }
}

/// Slab of deferred requests. A `Responder` names its slot and the slot's generation, so
/// an answer for a slot that was already answered, failed or reused is recognised and
/// dropped: every request gets exactly one response.
#[derive(Default)]
pub(crate) struct Deferred {
    slots: Vec<(u32, Option<Pending>)>,
    free: Vec<u32>,
    live: usize,
}

impl Deferred {
    pub(crate) fn insert(&mut self, pending: Pending) -> (u32, u32) {
        self.live += 1;
        if let Some(i) = self.free.pop() {
            let slot = &mut self.slots[i as usize];
            slot.0 = slot.0.wrapping_add(1);
            slot.1 = Some(pending);
            return (i, slot.0);
        }
        self.slots.push((0, Some(pending)));
        ((self.slots.len() - 1) as u32, 0)
    }

    pub(crate) fn remove(&mut self, slot: u32, generation: u32) -> Option<Pending> {
        let entry = self.slots.get_mut(slot as usize)?;
        if entry.0 != generation {
            return None;
        }
        let pending = entry.1.take()?;
        self.free.push(slot);
        self.live -= 1;
        Some(pending)
    }

    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// Empties the slab into `out` (when given); returns how many were pending.
    fn take_all(&mut self, mut out: Option<&mut Vec<Pending>>) -> usize {
        let n = self.live;
        for (i, entry) in self.slots.iter_mut().enumerate() {
            if let Some(p) = entry.1.take() {
                self.free.push(i as u32);
                if let Some(out) = out.as_mut() {
                    out.push(p);
                }
            }
        }
        self.live = 0;
        n
    }

    pub(crate) fn clear(&mut self) -> usize {
        self.take_all(None)
    }
}

/// Frames waiting to be written: `wbuf` collects small encoded frames; frames with large
/// or extra bodies close the current `wbuf` run into `segments` followed by their body
/// chunks (memory or file ranges), so order is kept and bodies are never copied.
struct Output {
    wbuf: BytesMut,
    segments: VecDeque<BodyChunk>,
    /// Bytes queued or being written, file ranges included (the back-pressure measure).
    queued_bytes: usize,
    /// The part of `queued_bytes` held in memory (file ranges excluded): this connection's
    /// share of the core's output bound.
    memory_bytes: usize,
}

/// What the writer sends next.
enum Batch {
    Nothing,
    /// A run of memory chunks moved into the iovec list: one vectored write of this many bytes.
    Memory(usize),
    /// A run of file ranges moved into the range list, spliced through one pipe: this many
    /// bytes.
    Files(usize),
}

impl Output {
    fn new() -> Self {
        Self {
            wbuf: BytesMut::with_capacity(WRITE_BUF_BYTES),
            segments: VecDeque::new(),
            queued_bytes: 0,
            memory_bytes: 0,
        }
    }

    /// Queues one frame; returns how many bytes of it are held in memory.
    fn push_frame(&mut self, cmd: &RemotingCommand, extra_body: Vec<BodyChunk>) -> usize {
        let inline = extra_body.is_empty() && cmd.body.len() <= INLINE_BODY_MAX_BYTES;
        let body_len = cmd.body.len() + extra_body.iter().map(BodyChunk::len).sum::<usize>();
        let file_bytes: usize = extra_body
            .iter()
            .filter(|c| matches!(c, BodyChunk::File(_)))
            .map(BodyChunk::len)
            .sum();
        self.wbuf
            .reserve(HEADER_RESERVE_BYTES + if inline { cmd.body.len() } else { 0 });
        let start = self.wbuf.len();
        cmd.encode_header_for_body(body_len, &mut self.wbuf);
        let header_bytes = self.wbuf.len() - start;
        if inline {
            self.wbuf.extend_from_slice(&cmd.body);
        } else {
            self.segments
                .push_back(BodyChunk::Memory(self.wbuf.split().freeze()));
            if !cmd.body.is_empty() {
                self.segments.push_back(BodyChunk::Memory(cmd.body.clone()));
            }
            self.segments
                .extend(extra_body.into_iter().filter(|b| !b.is_empty()));
        }
        self.queued_bytes += header_bytes + body_len;
        let memory = header_bytes + body_len - file_bytes;
        self.memory_bytes += memory;
        memory
    }

    /// The next batch in queue order: up to `max` consecutive memory chunks moved into
    /// `iov`, or up to `max` consecutive file ranges moved into `ranges`.
    fn take(&mut self, iov: &mut Vec<Bytes>, ranges: &mut Vec<FileRange>, max: usize) -> Batch {
        debug_assert!(iov.is_empty() && ranges.is_empty());
        if !self.wbuf.is_empty() {
            let run = self.wbuf.split().freeze();
            self.segments.push_back(BodyChunk::Memory(run));
        }
        let files = self.file_range_next();
        let mut bytes = 0;
        for _ in 0..max {
            match self.segments.pop_front() {
                Some(BodyChunk::Memory(chunk)) if !files => {
                    bytes += chunk.len();
                    iov.push(chunk);
                }
                Some(BodyChunk::File(range)) if files => {
                    bytes += range.len();
                    ranges.push(range);
                }
                Some(other) => {
                    // Ends the run; goes out in the next batch.
                    self.segments.push_front(other);
                    break;
                }
                None => break,
            }
        }
        match (iov.is_empty(), ranges.is_empty()) {
            (true, true) => Batch::Nothing,
            (false, _) => Batch::Memory(bytes),
            (true, false) => Batch::Files(bytes),
        }
    }

    /// Nothing waits behind the batch being written.
    fn nothing_queued(&self) -> bool {
        self.wbuf.is_empty() && self.segments.is_empty()
    }

    fn is_empty(&self) -> bool {
        self.queued_bytes == 0
    }

    /// Whether the next batch is a file range.
    fn file_range_next(&self) -> bool {
        matches!(self.segments.front(), Some(BodyChunk::File(_)))
    }
}

/// Empties `iov` and returns what is left of it after its first `sent` bytes.
fn unsent_rest(iov: &mut Vec<Bytes>, mut sent: usize) -> Vec<Bytes> {
    let mut rest = Vec::with_capacity(iov.len());
    for chunk in iov.drain(..) {
        if sent >= chunk.len() {
            sent -= chunk.len();
        } else {
            rest.push(chunk.slice(sent..));
            sent = 0;
        }
    }
    rest
}

/// A one-waiter wake-up flag between two tasks of the same core.
#[derive(Default)]
struct LocalSignal {
    set: Cell<bool>,
    waker: Cell<Option<Waker>>,
}

impl LocalSignal {
    fn notify(&self) {
        self.set.set(true);
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    async fn wait(&self) {
        poll_fn(|cx| {
            if self.set.replace(false) {
                Poll::Ready(())
            } else {
                self.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
        .await
    }
}

/// Core-local state of one connection.
pub(crate) struct ConnLocal {
    pub(crate) handle: Connection,
    fd: RawFd,
    phase: Cell<Phase>,
    last_active: Cell<Instant>,
    out: RefCell<Output>,
    writer_signal: LocalSignal,
    reader_signal: LocalSignal,
    pub(crate) deferred: RefCell<Deferred>,
    tasks_left: Cell<u8>,
    read_paused: Cell<bool>,
    reader_done: Cell<bool>,
    budget: Rc<CoreBudget>,
    /// This connection's bytes are counted in `budget` (until it closes).
    counted: Cell<bool>,
    /// Frame-buffer bytes held for a frame not yet complete, as counted in `budget`.
    partial_bytes: Cell<usize>,
}

/// The core-owned state of the core these connections live on.
pub(crate) type CoreLocal = super::core_local::CoreLocal<ConnLocal>;

impl CoreConn for ConnLocal {
    fn id(&self) -> u64 {
        self.handle.inner.id
    }
    fn peer(&self) -> SocketAddr {
        self.handle.inner.peer
    }
    fn partial_bytes(&self) -> usize {
        ConnLocal::partial_bytes(self)
    }
    fn counted_output_bytes(&self) -> usize {
        ConnLocal::counted_output_bytes(self)
    }
    fn is_read_paused(&self) -> bool {
        ConnLocal::is_read_paused(self)
    }
    fn close(&self, reason: &str) {
        ConnLocal::close(self, reason)
    }
}

impl ConnLocal {
    pub(crate) fn new(handle: Connection, fd: RawFd, now: Instant, budget: Rc<CoreBudget>) -> Self {
        Self {
            handle,
            fd,
            phase: Cell::new(Phase::Open),
            last_active: Cell::new(now),
            out: RefCell::new(Output::new()),
            writer_signal: LocalSignal::default(),
            reader_signal: LocalSignal::default(),
            deferred: RefCell::new(Deferred::default()),
            tasks_left: Cell::new(2),
            read_paused: Cell::new(false),
            reader_done: Cell::new(false),
            budget,
            counted: Cell::new(true),
            partial_bytes: Cell::new(0),
        }
    }

    pub(crate) fn partial_bytes(&self) -> usize {
        self.partial_bytes.get()
    }

    /// Records the frame-buffer bytes now held for an unfinished frame (ignored once the
    /// connection closed: its share already left the core's sum).
    fn set_partial_bytes(&self, bytes: usize) {
        if self.counted.get() {
            self.budget
                .move_partial(self.partial_bytes.replace(bytes), bytes);
        }
    }

    /// Queued output bytes held in memory, as counted in the core's output bound.
    pub(crate) fn counted_output_bytes(&self) -> usize {
        if self.counted.get() {
            self.out.borrow().memory_bytes
        } else {
            0
        }
    }

    pub(crate) fn is_read_paused(&self) -> bool {
        self.read_paused.get()
    }

    fn add_output(&self, memory_bytes: usize) {
        if self.counted.get() {
            self.budget.add_output(memory_bytes);
        }
    }

    /// Removes this connection's share from the core's sums: its buffers are dropped when
    /// its tasks end, a moment later.
    fn release_budget(&self) {
        if self.counted.replace(false) {
            self.budget.move_partial(self.partial_bytes.replace(0), 0);
            self.budget.sub_output(self.out.borrow().memory_bytes);
        }
    }

    pub(crate) fn phase(&self) -> Phase {
        self.phase.get()
    }

    pub(crate) fn last_active(&self) -> Instant {
        self.last_active.get()
    }

    fn touch(&self, now: Instant) {
        self.last_active.set(now);
    }

    /// Closes the connection: both tasks wake and exit, pending output is discarded.
    pub(crate) fn close(&self, reason: &str) {
        if self.phase.get() == Phase::Closed {
            return;
        }
        tracing::debug!(conn = self.handle.inner.id, peer = %self.handle.inner.peer, "closing connection: {reason}");
        self.mark_closed();
        // SAFETY: phase was not Closed, so a task still holds the socket open (module doc).
        unsafe { libc::shutdown(self.fd, libc::SHUT_RDWR) };
        self.writer_signal.notify();
        self.reader_signal.notify();
    }

    fn mark_closed(&self) {
        self.phase.set(Phase::Closed);
        self.release_budget();
        self.handle
            .inner
            .alive
            .store(false, std::sync::atomic::Ordering::Release);
    }

    /// Server shutdown: stop reading (requests already buffered are still served).
    pub(crate) fn begin_drain(&self) {
        if self.phase.get() != Phase::Open {
            return;
        }
        self.phase.set(Phase::Draining);
        // SAFETY: phase was Open, so the socket is open (module doc). SHUT_RD makes the
        // pending read return end-of-stream.
        unsafe { libc::shutdown(self.fd, libc::SHUT_RD) };
        self.reader_signal.notify();
    }

    /// Every dispatched request is answered: the reader stopped and nothing is deferred
    /// (the output may still be flushing).
    pub(crate) fn drained(&self) -> bool {
        self.reader_done.get() && self.deferred.borrow().live() == 0
    }

    pub(crate) fn output_empty(&self) -> bool {
        self.out.borrow().is_empty()
    }

    pub(crate) fn output_backed_up(&self, tuning: &ServerTuning) -> bool {
        self.out.borrow().queued_bytes > tuning.max_output_bytes_per_connection
    }

    pub(crate) fn wake_writer(&self) {
        if !self.out.borrow().is_empty() {
            self.writer_signal.notify();
        }
    }

    /// Queues a response to the request with `opaque`.
    pub(crate) fn push_response(&self, response: Response, opaque: i32) {
        let Response {
            mut command,
            extra_body,
        } = response;
        command.opaque = opaque;
        command.flag |= FLAG_RESPONSE;
        let memory = self.out.borrow_mut().push_frame(&command, extra_body);
        self.add_output(memory);
    }

    /// Queues a server-initiated request.
    pub(crate) fn push_request(&self, command: &RemotingCommand) {
        let memory = self.out.borrow_mut().push_frame(command, Vec::new());
        self.add_output(memory);
    }

    /// Answers every deferred request still pending with SYSTEM_ERROR; returns how many.
    pub(crate) fn fail_pending(&self, remark: &str) -> usize {
        let mut pending = Vec::new();
        let n = self.deferred.borrow_mut().take_all(Some(&mut pending));
        if self.phase.get() != Phase::Closed {
            for p in pending.iter().filter(|p| !p.oneway) {
                let r = response_for(
                    p.opaque,
                    p.serialize_type,
                    ResponseCode::SystemError,
                    remark.to_string(),
                );
                self.push_response(r.into(), p.opaque);
            }
            self.wake_writer();
        }
        n
    }
}

/// Releases the connection when the last of its two tasks ends (normally, by panic, or
/// because the runtime is being torn down).
struct TaskGuard {
    core: Rc<CoreLocal>,
    conn: Rc<ConnLocal>,
    is_reader: bool,
    close_on_exit: Cell<bool>,
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        if self.is_reader {
            self.conn.reader_done.set(true);
        }
        let left = self.conn.tasks_left.get().saturating_sub(1);
        self.conn.tasks_left.set(left);
        if left > 0 {
            if self.close_on_exit.get() {
                self.conn.close("connection task ended");
            }
        } else {
            self.conn.mark_closed();
            self.core.forget(&self.conn);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResponderState {
    Available,
    Taken,
    /// The command is a response: there is nothing to answer.
    Forbidden,
}

/// What a handler knows about the request it is handling. One per connection, reused
/// for every request on it.
pub struct RequestContext {
    core: Rc<CoreLocal>,
    conn: Rc<ConnLocal>,
    opaque: Cell<i32>,
    serialize_type: Cell<SerializeType>,
    oneway: Cell<bool>,
    code: Cell<i32>,
    responder: Cell<ResponderState>,
    /// When the request's frame was read: the start of the core's loop pass that decoded
    /// it (off a core, when its context was built).
    received_at: Cell<Instant>,
}

impl RequestContext {
    /// The deferred answer for this request; return [`Reply::Later`] after taking it.
    /// Only the first call per request returns a live responder (later calls log an
    /// error and return one that answers nothing), so a request is answered once.
    pub fn responder(&self) -> super::Responder {
        let handle = self.conn.handle.clone();
        match self.responder.get() {
            ResponderState::Available => {}
            ResponderState::Taken => {
                tracing::error!(
                    code = self.code.get(),
                    "responder() called twice for one request; the second answers nothing"
                );
                return Responder::disarmed(handle);
            }
            ResponderState::Forbidden => {
                tracing::error!(
                    code = self.code.get(),
                    "responder() called for a response command; it answers nothing"
                );
                return Responder::disarmed(handle);
            }
        }
        self.responder.set(ResponderState::Taken);
        let (slot, generation) = self.conn.deferred.borrow_mut().insert(Pending {
            opaque: self.opaque.get(),
            serialize_type: self.serialize_type.get(),
            oneway: self.oneway.get(),
            request_code: self.code.get(),
        });
        self.core.in_flight_add(1);
        Responder::armed(handle, slot, generation)
    }

    pub fn connection(&self) -> &Connection {
        &self.conn.handle
    }

    /// The request's opaque (what its response must carry).
    pub fn opaque(&self) -> i32 {
        self.opaque.get()
    }

    pub fn is_oneway(&self) -> bool {
        self.oneway.get()
    }

    /// Index of the network core running the handler.
    pub fn core_index(&self) -> usize {
        self.core.shared.index
    }

    /// When the request was received: the start of the loop pass that read its frame.
    /// Handlers time the request from here (RPC latency, the send-queue wait) instead of
    /// reading the clock again; every request of one pass shares this one reading.
    pub fn received_at(&self) -> Instant {
        self.received_at.get()
    }
}

/// Contexts for requests that do not come from a socket: the reader of a core with no
/// thread builds them the way a core's reader does before calling the handler
/// (`server::local` for in-process callers, `server::test_util` for tests).
impl RequestContext {
    /// `request` on `conn`, a connection of the off-core `core`. Deferred answers take a
    /// slot in `conn`'s table, as on a core, so whoever drains the core can map them back.
    pub(crate) fn off_core(
        core: Rc<CoreLocal>,
        conn: Rc<ConnLocal>,
        request: &RemotingCommand,
    ) -> Self {
        let responder = if request.is_response() {
            ResponderState::Forbidden
        } else {
            ResponderState::Available
        };
        Self {
            core,
            conn,
            opaque: Cell::new(request.opaque),
            serialize_type: Cell::new(request.serialize_type),
            oneway: Cell::new(request.is_oneway()),
            code: Cell::new(request.code),
            responder: Cell::new(responder),
            // An off-core context has no loop pass whose clock it could share.
            received_at: Cell::new(Instant::now()),
        }
    }

    #[cfg(any(test, feature = "test-util"))]
    pub(crate) fn detached(
        core: Rc<CoreLocal>,
        handle: Connection,
        request: &RemotingCommand,
    ) -> Self {
        let conn = Rc::new(ConnLocal::off_core(handle, &core));
        Self::off_core(core, conn, request)
    }
}

impl ConnLocal {
    /// A connection with no socket on an off-core `core`: the descriptor is never used,
    /// nothing is read or written through it.
    pub(crate) fn off_core(handle: Connection, core: &CoreLocal) -> Self {
        ConnLocal::new(handle, -1, core.now(), core.budget.clone())
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("non-string panic payload")
}

/// Splits one frame off `buf`; a decoder panic counts as a malformed frame.
fn decode(decoder: &FrameDecoder, buf: &mut BytesMut) -> Result<Option<RemotingCommand>, String> {
    match catch_unwind(AssertUnwindSafe(|| decoder.decode(buf))) {
        Ok(Ok(cmd)) => Ok(cmd),
        Ok(Err(e)) => Err(e.to_string()),
        Err(p) => Err(format!("frame decoder panicked: {}", panic_message(&*p))),
    }
}

/// Runs the handler for one decoded command and queues whatever must be answered now.
fn dispatch(core: &CoreLocal, conn: &ConnLocal, ctx: &RequestContext, cmd: RemotingCommand) {
    bump(&core.shared.counters.requests, 1);
    let code = cmd.code;
    let opaque = cmd.opaque;
    let serialize_type = cmd.serialize_type;
    if cmd.is_response() {
        ctx.responder.set(ResponderState::Forbidden);
        ctx.code.set(code);
        let handled = catch_unwind(AssertUnwindSafe(|| core.handler.handle(cmd, ctx)));
        if handled.is_err() {
            tracing::error!(
                conn = conn.handle.inner.id,
                code,
                "RequestHandler::handle panicked on a response command"
            );
        }
        return;
    }
    let oneway = cmd.is_oneway();
    if conn.deferred.borrow().live() >= core.per_conn_limit
        || core.in_flight.get() >= core.in_flight_limit
    {
        bump(&core.shared.counters.rejected_busy, 1);
        if !oneway {
            let remark = format!(
                "{OVERLOAD_REMARK} (in-flight bound reached: {} on this connection, {} on this core)",
                conn.deferred.borrow().live(),
                core.in_flight.get()
            );
            let busy = cmd.response_to(ResponseCode::SystemBusy.code(), Some(remark));
            conn.push_response(busy.into(), opaque);
        }
        return;
    }
    ctx.opaque.set(opaque);
    ctx.serialize_type.set(serialize_type);
    ctx.oneway.set(oneway);
    ctx.code.set(code);
    ctx.responder.set(ResponderState::Available);
    ctx.received_at.set(core.now());
    let reply = catch_unwind(AssertUnwindSafe(|| core.handler.handle(cmd, ctx)));
    let taken = ctx.responder.get() == ResponderState::Taken;
    let answer = match reply {
        Ok(Reply::Now(response)) if !taken => Some(response),
        Ok(Reply::Now(_)) => {
            tracing::error!(
                code,
                "handler took the responder but replied Now; the responder's answer is used"
            );
            None
        }
        Ok(Reply::Later) if !taken => {
            tracing::error!(
                code,
                "handler replied Later without taking the responder; answering SYSTEM_ERROR"
            );
            Some(
                response_for(
                    opaque,
                    serialize_type,
                    ResponseCode::SystemError,
                    format!("request code {code} was not answered by the server"),
                )
                .into(),
            )
        }
        Ok(Reply::Later) | Ok(Reply::Nothing) => None,
        Err(p) => {
            tracing::error!(
                conn = conn.handle.inner.id,
                code,
                "RequestHandler::handle panicked: {}",
                panic_message(&*p)
            );
            // A taken responder was dropped during the unwind and answers SYSTEM_ERROR.
            (!taken).then(|| {
                response_for(
                    opaque,
                    serialize_type,
                    ResponseCode::SystemError,
                    format!("request code {code} failed inside the server"),
                )
                .into()
            })
        }
    };
    if let Some(response) = answer {
        if !oneway {
            conn.push_response(response, opaque);
        }
    }
}

/// Reads (`recv.rs`), splits frames, dispatches; pauses while the connection's output is
/// backed up, holding no receive and no ring buffer meanwhile.
///
/// `initial` holds bytes already read (a TLS port's first bytes, or the application data
/// that came with a handshake); `tls` is the connection's TLS state, through which every
/// byte read passes before it reaches the frame buffer.
pub(crate) async fn run_reader(
    core: Rc<CoreLocal>,
    conn: Rc<ConnLocal>,
    stream: TcpStream,
    initial: BytesMut,
    tls: Option<Rc<RefCell<TlsLink>>>,
) {
    let guard = TaskGuard {
        core: core.clone(),
        conn: conn.clone(),
        is_reader: true,
        close_on_exit: Cell::new(true),
    };
    let ctx = RequestContext {
        core: core.clone(),
        conn: conn.clone(),
        opaque: Cell::new(0),
        serialize_type: Cell::new(SerializeType::Json),
        oneway: Cell::new(false),
        code: Cell::new(0),
        responder: Cell::new(ResponderState::Available),
        received_at: Cell::new(core.now()),
    };
    let mut receiver = match tls {
        None => SocketReceiver::new(core.clone(), stream),
        Some(_) => SocketReceiver::single(core.clone(), stream),
    };
    let mut rbuf = if initial.is_empty() {
        BytesMut::with_capacity(MIN_READ_CHUNK_BYTES)
    } else {
        initial
    };
    // TLS records read but not yet opened (always empty between receives).
    let mut cipher = BytesMut::new();
    let shrink_above_bytes =
        SHRINK_ABOVE_READ_CHUNKS * core.tuning.read_chunk_bytes.max(MIN_READ_CHUNK_BYTES);
    // The frame buffer's size after the last receive (its peak since then).
    let mut grown_bytes = rbuf.capacity();
    loop {
        // Serve every complete frame already buffered.
        loop {
            if conn.phase() == Phase::Closed {
                return;
            }
            if conn.output_backed_up(&core.tuning) {
                if conn.phase() == Phase::Draining {
                    // Shutting down with output still backed up: requests not yet
                    // dispatched stay unread (the client sees the close); the drain
                    // flushes and fails what was dispatched.
                    guard.close_on_exit.set(false);
                    return;
                }
                if !conn.read_paused.replace(true) {
                    bump(&core.shared.counters.read_pauses, 1);
                }
                // Many paused connections together may be over the core's bound.
                core.enforce_output_bound();
                if conn.phase() == Phase::Closed {
                    return;
                }
                conn.wake_writer();
                // Slow-reader rule: stop consuming. Bytes the multishot still delivers
                // are kept in `rbuf` and served after the pause.
                if let Err(e) = receiver.disarm(&mut rbuf).await {
                    conn.close(&format!("read failed: {e}"));
                    return;
                }
                // What the pause holds: frames already split off are not partial bytes,
                // and what the disarm delivered is.
                conn.set_partial_bytes(partial_frame_bytes(&rbuf));
                conn.reader_signal.wait().await;
                continue;
            }
            conn.read_paused.set(false);
            match decode(&core.decoder, &mut rbuf) {
                Ok(Some(cmd)) => dispatch(&core, &conn, &ctx, cmd),
                Ok(None) => break,
                Err(why) => {
                    bump(&core.shared.counters.bad_frames, 1);
                    tracing::warn!(
                        conn = conn.handle.inner.id,
                        peer = %conn.handle.inner.peer,
                        "closing connection after a bad frame: {why}"
                    );
                    conn.close("bad frame");
                    return;
                }
            }
        }
        conn.wake_writer();
        core.enforce_output_bound();
        if conn.phase() != Phase::Open {
            // Draining: the drain closes the connection once its answers are out (or the
            // output bound closed it).
            guard.close_on_exit.set(false);
            return;
        }
        if grown_bytes > shrink_above_bytes && rbuf.len() <= grown_bytes / 4 {
            shrink_frame_buffer(&mut rbuf);
            core.note_large_release();
        }
        let rest_of_frame = match core.decoder.peek_frame_bytes(&rbuf) {
            Ok(Some(frame_bytes)) => frame_bytes.saturating_sub(rbuf.len()),
            _ => 0,
        };
        receiver.reserve_ahead(&mut rbuf, rest_of_frame);
        conn.set_partial_bytes(partial_frame_bytes(&rbuf));
        core.enforce_partial_bound();
        if conn.phase() == Phase::Closed {
            return;
        }
        let received = match &tls {
            None => receiver.receive(&mut rbuf, rest_of_frame).await,
            Some(link) => receive_tls(&mut receiver, link, &conn, &mut cipher, &mut rbuf).await,
        };
        grown_bytes = rbuf.capacity();
        match received {
            Received::Bytes => {
                conn.touch(core.now());
                conn.set_partial_bytes(partial_frame_bytes(&rbuf));
                core.enforce_partial_bound();
            }
            Received::Eof if conn.phase() == Phase::Draining => continue,
            Received::Eof => {
                conn.close("peer closed the connection");
                return;
            }
            Received::Failed(e) => {
                if conn.phase() == Phase::Open {
                    conn.close(&format!("read failed: {e}"));
                }
                return;
            }
        }
    }
}

/// Reads TLS records until they yield application bytes (appended to `rbuf`), the peer
/// closes, or reading fails. Records that need an answer (a key update) wake the writer,
/// which sends what the link has queued.
async fn receive_tls(
    receiver: &mut SocketReceiver<ConnLocal>,
    link: &RefCell<TlsLink>,
    conn: &ConnLocal,
    cipher: &mut BytesMut,
    rbuf: &mut BytesMut,
) -> Received {
    loop {
        match receiver.receive(cipher, 0).await {
            Received::Bytes => {}
            other => return other,
        }
        let before = rbuf.len();
        let fed = link.borrow_mut().feed(cipher, rbuf);
        match fed {
            Ok(fed) => {
                if fed.wants_write {
                    conn.wake_writer();
                }
                if rbuf.len() > before {
                    return Received::Bytes;
                }
                if fed.peer_closed {
                    return Received::Eof;
                }
            }
            Err(e) => return Received::Failed(e.into()),
        }
    }
}

/// Memory a frame buffer holds for what it buffers (nothing when it buffers nothing: an
/// idle connection's small empty buffer is not a partial frame).
fn partial_frame_bytes(rbuf: &BytesMut) -> usize {
    if rbuf.is_empty() {
        0
    } else {
        rbuf.capacity()
    }
}

/// Moves what `rbuf` holds into a fresh small buffer; the large one is freed once the
/// frames split off it are dropped by their handlers.
fn shrink_frame_buffer(rbuf: &mut BytesMut) {
    let mut small = BytesMut::with_capacity(rbuf.len().max(MIN_READ_CHUNK_BYTES));
    small.extend_from_slice(rbuf);
    *rbuf = small;
}

/// Writes queued output in batches: one `send` for a run of small frames, one vectored
/// `send` when large bodies or extra chunks are queued, splices for file ranges
/// (`file_range.rs`), all in queue order.
///
/// On a TLS connection every batch is sealed by its link first (`send_sealed`), file
/// ranges included: encrypted bytes cannot be spliced from the page cache.
pub(crate) async fn run_writer(
    core: Rc<CoreLocal>,
    conn: Rc<ConnLocal>,
    mut stream: TcpStream,
    tls: Option<Rc<RefCell<TlsLink>>>,
) {
    let _guard = TaskGuard {
        core: core.clone(),
        conn: conn.clone(),
        is_reader: false,
        close_on_exit: Cell::new(true),
    };
    let mut iov: Vec<Bytes> = Vec::with_capacity(MAX_IOVECS);
    let mut ranges: Vec<FileRange> = Vec::with_capacity(MAX_IOVECS);
    // Set by the first file range sent (`file_range::send_file_ranges`).
    let mut socket_nonblocking = false;
    // TLS records waiting for one write (reused: the hot path allocates once).
    let mut sealed: Vec<u8> = Vec::new();
    loop {
        let batch = conn
            .out
            .borrow_mut()
            .take(&mut iov, &mut ranges, MAX_IOVECS);
        let memory_batch = matches!(batch, Batch::Memory(_));
        let (result, taken) = match (batch, tls.as_deref()) {
            (Batch::Nothing, link) => {
                if conn.phase() == Phase::Closed {
                    return;
                }
                if let Some(link) = link.filter(|l| l.borrow().wants_write()) {
                    // A record the reader's feed queued (a key update answer, an alert).
                    if let Err(e) = send_sealed(&mut stream, link, &mut [], &[], &mut sealed).await
                    {
                        conn.close(&format!("write failed: {e}"));
                        return;
                    }
                    continue;
                }
                conn.writer_signal.wait().await;
                continue;
            }
            (Batch::Memory(taken) | Batch::Files(taken), Some(link)) => {
                let result = send_sealed(&mut stream, link, &mut iov, &ranges, &mut sealed).await;
                iov.clear();
                ranges.clear();
                (result, taken)
            }
            // A run right before a file range (its frame header) leaves corked with the
            // range's first bytes, once the socket is non-blocking (`file_range.rs`).
            (Batch::Memory(taken), None)
                if socket_nonblocking && conn.out.borrow().file_range_next() =>
            {
                let sent = send_memory_before_range(&stream, &iov);
                let rest = unsent_rest(&mut iov, sent);
                if rest.is_empty() {
                    (Ok(()), taken)
                } else {
                    (stream.write_vectored_all(rest).await.0, taken)
                }
            }
            (Batch::Memory(taken), None) if iov.len() == 1 => {
                let chunk = iov.pop().unwrap_or_default();
                (stream.write_all(chunk).await.0, taken)
            }
            (Batch::Memory(taken), None) => {
                let BufResult(result, back) = stream.write_vectored_all(iov).await;
                iov = back;
                iov.clear();
                (result, taken)
            }
            (Batch::Files(taken), None) => {
                // More output already queued: the last splice leaves the socket corked
                // (MSG_MORE) for the write that follows at once.
                let more_after = || !conn.out.borrow().nothing_queued();
                let result =
                    send_file_ranges(&mut stream, &ranges, &more_after, &mut socket_nonblocking)
                        .await;
                ranges.clear();
                (result, taken)
            }
        };
        {
            let mut out = conn.out.borrow_mut();
            out.queued_bytes -= taken;
            if memory_batch {
                out.memory_bytes -= taken;
            }
        }
        if memory_batch && conn.counted.get() {
            conn.budget.sub_output(taken);
        }
        if let Err(e) = result {
            if conn.phase() != Phase::Closed {
                conn.close(&format!("write failed: {e}"));
            }
            return;
        }
        conn.touch(core.now());
        if conn.read_paused.get()
            && conn.out.borrow().queued_bytes <= core.tuning.max_output_bytes_per_connection / 2
        {
            conn.reader_signal.notify();
        }
    }
}

/// Seals `iov` (memory chunks) or `ranges` (file ranges, read through io_uring a bounded
/// chunk at a time), plus whatever TLS bytes the link already queued, and writes them.
async fn send_sealed(
    stream: &mut TcpStream,
    link: &RefCell<TlsLink>,
    iov: &mut [Bytes],
    ranges: &[FileRange],
    sealed: &mut Vec<u8>,
) -> std::io::Result<()> {
    sealed.clear();
    {
        let mut link = link.borrow_mut();
        link.take_outgoing(sealed);
        for chunk in iov.iter() {
            link.seal(chunk, sealed)?;
        }
    }
    if !sealed.is_empty() {
        let BufResult(result, back) = stream.write_all(std::mem::take(sealed)).await;
        *sealed = back;
        result?;
    }
    for range in ranges {
        send_sealed_file_range(stream, range, link).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(opaque: i32) -> Pending {
        Pending {
            opaque,
            serialize_type: SerializeType::RocketMq,
            oneway: false,
            request_code: 10,
        }
    }

    #[test]
    fn deferred_slots_answer_once_and_reject_stale_generations() {
        let mut d = Deferred::default();
        let (s1, g1) = d.insert(pending(1));
        let (s2, g2) = d.insert(pending(2));
        assert_eq!(d.live(), 2);
        assert_eq!(d.remove(s1, g1).map(|p| p.opaque), Some(1));
        assert!(
            d.remove(s1, g1).is_none(),
            "a second answer for the same slot must be ignored"
        );
        let (s3, g3) = d.insert(pending(3));
        assert_eq!(s3, s1, "free slots are reused");
        assert_ne!(g3, g1);
        assert!(
            d.remove(s1, g1).is_none(),
            "an answer for the previous occupant must be ignored"
        );
        let mut out = Vec::new();
        assert_eq!(d.take_all(Some(&mut out)), 2);
        assert_eq!(d.live(), 0);
        let mut opaques: Vec<i32> = out.iter().map(|p| p.opaque).collect();
        opaques.sort_unstable();
        assert_eq!(opaques, vec![2, 3]);
        assert!(
            d.remove(s2, g2).is_none(),
            "answers after a drain are ignored"
        );
    }

    #[test]
    fn output_keeps_frame_order_and_does_not_copy_large_bodies() {
        let mut out = Output::new();
        let mut small = RemotingCommand::request(1, 1).with_body(Bytes::from_static(b"tiny"));
        small.serialize_type = SerializeType::RocketMq;
        let big_body = Bytes::from(vec![7u8; INLINE_BODY_MAX_BYTES + 1]);
        let mut big = RemotingCommand::request(2, 2).with_body(big_body.clone());
        big.serialize_type = SerializeType::RocketMq;
        out.push_frame(&small, Vec::new());
        out.push_frame(&big, vec![Bytes::from_static(b"extra").into()]);
        out.push_frame(&small, Vec::new());
        let mut iov = Vec::new();
        let Batch::Memory(n) = out.take(&mut iov, &mut Vec::new(), MAX_IOVECS) else {
            panic!("memory chunks only")
        };
        assert_eq!(n, out.queued_bytes);
        assert_eq!(
            iov.len(),
            4,
            "run(small+big header), big body, extra, run(small)"
        );
        assert_eq!(
            iov[1].as_ptr(),
            big_body.as_ptr(),
            "the large body must be written from its own memory"
        );
        let wire: Vec<u8> = iov.iter().flat_map(|b| b.iter().copied()).collect();
        let mut expected = BytesMut::new();
        small.encode(&mut expected);
        let mut big_with_extra = big.clone();
        let mut body = big_body.to_vec();
        body.extend_from_slice(b"extra");
        big_with_extra.body = Bytes::from(body);
        big_with_extra.encode(&mut expected);
        small.encode(&mut expected);
        assert_eq!(wire, expected.to_vec());
    }

    #[test]
    fn unsent_rest_skips_exactly_the_sent_prefix() {
        let chunks = || {
            vec![
                Bytes::from_static(b"abc"),
                Bytes::from_static(b"de"),
                Bytes::from_static(b"fghi"),
            ]
        };
        let flat = |v: Vec<Bytes>| -> Vec<u8> { v.iter().flat_map(|b| b.to_vec()).collect() };
        for sent in 0..=9 {
            let mut iov = chunks();
            let rest = unsent_rest(&mut iov, sent);
            assert!(iov.is_empty());
            assert_eq!(flat(rest), b"abcdefghi"[sent..].to_vec(), "sent {sent}");
        }
    }

    #[test]
    fn file_ranges_split_memory_runs_in_queue_order_and_count_as_queued() {
        let path = std::env::temp_dir().join(format!("ringmq-conn-output-{}", std::process::id()));
        std::fs::write(&path, vec![5u8; 100_000]).unwrap();
        let file: super::super::file_range::SharedFile =
            std::sync::Arc::new(std::fs::File::open(&path).unwrap());
        std::fs::remove_file(&path).unwrap();
        let range = FileRange::new(file, 4_099, 90_000).unwrap();
        let mut out = Output::new();
        let mut cmd = RemotingCommand::request(1, 1).with_body(Bytes::from_static(b"head"));
        cmd.serialize_type = SerializeType::RocketMq;
        out.push_frame(
            &cmd,
            vec![
                Bytes::from_static(b"a").into(),
                range.clone().into(),
                range.clone().into(),
                Bytes::from_static(b"b").into(),
            ],
        );
        out.push_frame(&cmd, Vec::new());
        let mut header = BytesMut::new();
        cmd.encode_header_for_body(4 + 1 + 2 * 90_000 + 1, &mut header);
        let mut small = BytesMut::new();
        cmd.encode(&mut small);
        assert_eq!(
            out.queued_bytes,
            header.len() + 4 + 1 + 2 * 90_000 + 1 + small.len(),
            "file ranges count toward the back-pressure measure"
        );
        let (mut iov, mut ranges) = (Vec::new(), Vec::new());
        let Batch::Memory(n) = out.take(&mut iov, &mut ranges, MAX_IOVECS) else {
            panic!("header, body and the first memory chunk come first")
        };
        assert_eq!((iov.len(), n), (3, header.len() + 4 + 1));
        assert!(out.file_range_next() && !out.nothing_queued());
        iov.clear();
        let Batch::Files(n) = out.take(&mut iov, &mut ranges, MAX_IOVECS) else {
            panic!("then both file ranges, in one batch")
        };
        assert_eq!(n, 2 * 90_000);
        assert!(iov.is_empty());
        assert_eq!(
            ranges
                .iter()
                .map(|r| (r.offset(), r.len()))
                .collect::<Vec<_>>(),
            [(4_099, 90_000), (4_099, 90_000)]
        );
        ranges.clear();
        let Batch::Memory(n) = out.take(&mut iov, &mut ranges, MAX_IOVECS) else {
            panic!("then the last chunk and the next frame, in one run")
        };
        assert_eq!((iov.len(), n), (2, 1 + small.len()));
        iov.clear();
        assert!(out.nothing_queued());
        assert!(matches!(
            out.take(&mut iov, &mut ranges, MAX_IOVECS),
            Batch::Nothing
        ));

        // A run of ranges is cut at `max`.
        out.push_frame(&cmd, vec![range.clone().into(); 3]);
        assert!(matches!(
            out.take(&mut iov, &mut ranges, MAX_IOVECS),
            Batch::Memory(_)
        ));
        iov.clear();
        assert!(matches!(
            out.take(&mut iov, &mut ranges, 2),
            Batch::Files(180_000)
        ));
        ranges.clear();
        assert!(matches!(
            out.take(&mut iov, &mut ranges, 2),
            Batch::Files(90_000)
        ));
    }
}
