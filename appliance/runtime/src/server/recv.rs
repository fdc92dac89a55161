//! Taking one connection's bytes off its socket into its frame-assembly buffer, in the
//! core's receive mode (`ServerTuning::recv_mode`):
//!
//! - **multishot**: one multishot receive stays armed; for each arrival the kernel picks a
//!   buffer from the core's provided buffer ring (one bounded ring per core, shared by all
//!   its connections), the bytes are copied behind the partial frame and the buffer goes
//!   back to the ring at once;
//! - **single**: one plain read at a time straight into the frame buffer, offering an
//!   adaptive chunk (4 KiB up to `read_chunk_bytes`) or more of a frame of known length.
//!
//! The frame buffer grows with the bytes that arrived, never with the length a frame's
//! prefix announces: a frame's remainder is offered at most as large as what is already
//! buffered (see [`SocketReceiver::grow_bytes`]), so the buffer at most doubles per read and
//! a client announcing 16 MiB and sending 72 bytes holds a few KiB.
//!
//! Multishot falls back to plain reads where they are better or the only safe choice:
//! - the rest of a frame is known and large (more than a [`PLAIN_READ_RING_SHARE`]th of
//!   the ring): one read straight into the frame buffer instead of taking most of the ring
//!   from the core's other connections;
//! - the ring ran dry (ENOBUFS ends the multishot): one plain read consumes what is
//!   waiting, then the multishot is re-armed. The read waits for data, so this never spins,
//!   and the count shows in `CoreStats::recv_buffers_exhausted`.
//!
//! A plain read and a multishot are never pending together (they would race for the
//! bytes): switching first *disarms* the multishot (cancel, then keep everything it still
//! delivers until it reports its end). The reader also disarms before pausing on output
//! back-pressure, so a paused connection holds no ring buffer and cannot starve the other
//! connections of its core.
//!
//! Cancelling relies on compio's `CancelToken`, which a multishot op picks up from the
//! waker of its first poll. compio recognises its own wakers by comparing vtable addresses,
//! and the waker `WithCancel` builds in code generic over our types (compiled in this crate)
//! does not compare equal there, so the token was silently never registered and a cancel
//! did nothing. Polling the first time with a *clone* of that waker works: the clone is
//! made by compio's own (non-generic) code. [`cancel_registration_works`] checks this at
//! start; a core where it fails reads with single reads.

use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::BytesMut;
use compio::buf::{IntoInner, IoBufMut};
use compio::driver::op::{RecvFlags, RecvMulti};
use compio::driver::{BufferRef, SharedFd, ToSharedFd};
use compio::io::AsyncRead;
use compio::net::TcpStream;
use compio::runtime::{CancelToken, Runtime, SubmitMultiManaged, WithCancel};
use compio::BufResult;
use futures_core::Stream;

use super::core_local::{bump, CoreLocal};

/// Smallest read offered to the socket in single mode. Reads start here and double while
/// they fill the offered space (up to `ServerTuning::read_chunk_bytes`), so an idle
/// connection pins a few KiB under its pending receive, not the full chunk. Also the
/// least the frame buffer grows by when multishot bytes are appended.
pub(crate) const MIN_READ_CHUNK_BYTES: usize = 4 * 1024;
/// A frame still missing more than this share of the ring's bytes (1/N) is finished with
/// plain reads into the frame buffer (see the module doc). Measured on the echo bench:
/// switching for every frame larger than two ring buffers cost 44 % of the CPU per 256 KiB
/// message (a cancel round trip per frame, while the multishot had already delivered most
/// of it); frames that big mostly arrive through the ring anyway, and when a large transfer
/// drains the ring, ENOBUFS sends it to plain reads by itself.
const PLAIN_READ_RING_SHARE: usize = 4;
/// How long a cancelled multishot may take to report its end. The kernel answers a cancel
/// within microseconds; a multishot still running after this is treated as a lost cancel
/// and the connection is closed (a read racing it could reorder bytes).
const DISARM_LIMIT: Duration = Duration::from_secs(2);

/// What one receive brought.
pub(crate) enum Received {
    /// Bytes were appended to the frame buffer.
    Bytes,
    /// The peer closed its side (or `shutdown(SHUT_RD)` by the drain).
    Eof,
    Failed(io::Error),
}

type RecvMultiOp = RecvMulti<SharedFd<socket2::Socket>>;

/// One item of an armed multishot, as the reader sees it.
enum Shot {
    Data(BufferRef),
    Eof,
    Failed(io::Error),
    /// The multishot ended after its last item (the kernel stopped it, it was cancelled,
    /// or an end or error was already reported).
    Ended,
}

/// An armed multishot receive and the token that cancels it.
struct Armed {
    results: SubmitMultiManaged<RecvMultiOp, BufferRef>,
    cancel: CancelToken,
    /// The first poll (which submits the op and registers it with `cancel`) is done.
    submitted: bool,
}

impl Armed {
    async fn next(&mut self) -> Shot {
        let item = poll_fn(|cx| {
            if self.submitted {
                return Pin::new(&mut self.results).poll_next(cx);
            }
            self.submitted = true;
            let mut first = WithCancel::new(ClonedWaker(&mut self.results), self.cancel.clone());
            Pin::new(&mut first).poll_next(cx)
        })
        .await;
        match item {
            // An empty buffer is how compio reports end-of-stream from some paths.
            Some(Ok(Some(buf))) if !buf.is_empty() => Shot::Data(buf),
            Some(Ok(_)) => Shot::Eof,
            Some(Err(e)) => Shot::Failed(e),
            None => Shot::Ended,
        }
    }
}

/// Polls the inner stream or future with a clone of the waker it is given (see the module
/// doc for why).
struct ClonedWaker<T>(T);

impl<S: Stream + Unpin> Stream for ClonedWaker<&mut S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let waker = cx.waker().clone();
        Pin::new(&mut *self.0).poll_next(&mut Context::from_waker(&waker))
    }
}

impl<F: Future + Unpin> Future for ClonedWaker<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let waker = cx.waker().clone();
        Pin::new(&mut self.0).poll(&mut Context::from_waker(&waker))
    }
}

/// Whether an op polled the way [`Armed::next`] polls it sees its cancel token. Must run
/// inside the core's runtime.
pub(crate) fn cancel_registration_works() -> bool {
    let token = CancelToken::new();
    let seen = Box::pin(CancelToken::current());
    let mut probe = WithCancel::new(ClonedWaker(seen), token.clone());
    let mut cx = Context::from_waker(Waker::noop());
    matches!(Pin::new(&mut probe).poll(&mut cx), Poll::Ready(Some(t)) if t == token)
}

/// The read side of one connection's socket.
pub(crate) struct SocketReceiver<C> {
    core: Rc<CoreLocal<C>>,
    stream: TcpStream,
    /// The core has a provided buffer ring and this connection uses it.
    multishot: bool,
    armed: Option<Armed>,
    /// The ring ran dry: the next receive is a plain read.
    plain_next: bool,
    /// Space reserved ahead in the frame buffer (plain read size), adapted to the traffic.
    chunk: usize,
    max_chunk: usize,
    /// Frame remainders above this are read with plain reads in multishot mode, so one
    /// large transfer does not take the whole ring from the other connections.
    plain_read_rest_bytes: usize,
}

impl<C> SocketReceiver<C> {
    pub(crate) fn new(core: Rc<CoreLocal<C>>, stream: TcpStream) -> Self {
        let multishot = core.recv_multishot;
        Self::with_mode(core, stream, multishot)
    }

    /// A receiver that only ever does single reads: for a TLS connection, whose bytes go
    /// through its record layer before the frame buffer, so nothing may land there behind
    /// the reader's back (as a multishot's disarm does).
    pub(crate) fn single(core: Rc<CoreLocal<C>>, stream: TcpStream) -> Self {
        Self::with_mode(core, stream, false)
    }

    fn with_mode(core: Rc<CoreLocal<C>>, stream: TcpStream, multishot: bool) -> Self {
        let max_chunk = core.tuning.read_chunk_bytes.max(MIN_READ_CHUNK_BYTES);
        let ring_bytes = usize::from(core.tuning.recv_buffer_count.max(1).next_power_of_two())
            .saturating_mul(core.tuning.recv_buffer_bytes);
        let plain_read_rest_bytes = ring_bytes / PLAIN_READ_RING_SHARE;
        Self {
            core,
            stream,
            multishot,
            armed: None,
            plain_next: false,
            chunk: MIN_READ_CHUNK_BYTES,
            max_chunk,
            plain_read_rest_bytes,
        }
    }

    /// Appends the next bytes from the socket to `rbuf`. `rest_of_frame` is how many
    /// bytes the frame at the front of `rbuf` still misses, when its length is known (0
    /// otherwise).
    pub(crate) async fn receive(&mut self, rbuf: &mut BytesMut, rest_of_frame: usize) -> Received {
        if !self.multishot || self.plain_next || rest_of_frame > self.plain_read_rest_bytes {
            if self.armed.is_some() {
                let before = rbuf.len();
                if let Err(e) = self.disarm(rbuf).await {
                    return Received::Failed(e);
                }
                if rbuf.len() > before {
                    // The caller decodes what the multishot still delivered and asks again
                    // with the new remainder.
                    return Received::Bytes;
                }
            }
            self.plain_next = false;
            return self.read_plain(rbuf, rest_of_frame).await;
        }
        loop {
            let armed = match self.armed.as_mut() {
                Some(armed) => armed,
                None => match self.arm() {
                    Ok(armed) => self.armed.insert(armed),
                    Err(e) => {
                        tracing::warn!(
                            core = self.core.shared.index,
                            "cannot arm a multishot receive: {e}; this connection reads with single reads"
                        );
                        self.multishot = false;
                        return self.read_plain(rbuf, rest_of_frame).await;
                    }
                },
            };
            match armed.next().await {
                Shot::Data(buf) => {
                    self.adapt_chunk(buf.len(), self.core.tuning.recv_buffer_bytes);
                    let grow = self.grow_bytes(rbuf.len(), rest_of_frame);
                    append(rbuf, &buf, grow);
                    return Received::Bytes;
                }
                Shot::Eof => {
                    self.armed = None;
                    return Received::Eof;
                }
                Shot::Failed(e) if is_ring_empty(&e) => {
                    // Every ring buffer is in a completion not yet taken by its reader.
                    // They come back as soon as those readers run; meanwhile read plainly.
                    bump(&self.core.shared.counters.recv_buffers_exhausted, 1);
                    self.armed = None;
                    return self.read_plain(rbuf, rest_of_frame).await;
                }
                Shot::Failed(e) => {
                    self.armed = None;
                    return Received::Failed(e);
                }
                // The kernel ended the multishot without an error (e.g. its completion
                // queue overflowed): arm a new one.
                Shot::Ended => self.armed = None,
            }
        }
    }

    /// Stops the multishot, if armed, keeping every byte it still delivers: afterwards no
    /// receive is pending and no ring buffer is held for this connection. An end-of-stream
    /// or error it reports is not lost: a TCP socket reports it again to the next read.
    /// Fails when the multishot does not stop within [`DISARM_LIMIT`]; the connection must
    /// then be closed.
    pub(crate) async fn disarm(&mut self, rbuf: &mut BytesMut) -> io::Result<()> {
        let Some(mut armed) = self.armed.take() else {
            return Ok(());
        };
        armed.cancel.clone().cancel();
        if !armed.submitted {
            return Ok(());
        }
        let stopped = compio::time::timeout(DISARM_LIMIT, async {
            // After the cancel the kernel delivers what it already received, then one
            // final completion, after which the stream reports `Ended`.
            loop {
                match armed.next().await {
                    Shot::Data(buf) => append(rbuf, &buf, 0),
                    Shot::Eof | Shot::Failed(_) => {}
                    Shot::Ended => return,
                }
            }
        })
        .await;
        stopped.map_err(|_| {
            tracing::error!(
                core = self.core.shared.index,
                "a cancelled multishot receive still runs after {DISARM_LIMIT:?}; closing the connection"
            );
            io::Error::new(
                io::ErrorKind::TimedOut,
                "multishot receive did not stop after its cancel",
            )
        })
    }

    fn arm(&self) -> io::Result<Armed> {
        let fd = self.stream.to_shared_fd();
        Runtime::with_current(|rt| {
            let pool = rt.buffer_pool()?;
            // Length 0: each completion may fill a whole ring buffer (kernels before 6.10
            // reject any other length for a multishot receive).
            let op = RecvMulti::new(fd, &pool, 0, RecvFlags::empty())?;
            bump(&self.core.shared.counters.recv_multishot_arms, 1);
            Ok(Armed {
                results: rt.submit_multi(op).into_managed(pool),
                cancel: CancelToken::new(),
                submitted: false,
            })
        })
    }

    /// Makes room now for the next receive if it will be a plain read (which takes its
    /// space before it waits), so the caller counts the buffer at its size while waiting.
    pub(crate) fn reserve_ahead(&self, rbuf: &mut BytesMut, rest_of_frame: usize) {
        if !self.multishot || self.plain_next || rest_of_frame > self.plain_read_rest_bytes {
            rbuf.reserve(self.grow_bytes(rbuf.len(), rest_of_frame));
        }
    }

    /// One plain read into `rbuf`, offering at least the adaptive chunk, more for a large
    /// frame (see [`Self::grow_bytes`]).
    async fn read_plain(&mut self, rbuf: &mut BytesMut, rest_of_frame: usize) -> Received {
        rbuf.reserve(self.grow_bytes(rbuf.len(), rest_of_frame));
        let offered = rbuf.capacity() - rbuf.len();
        // `uninit()` makes the read append after the buffered partial frame (a plain
        // BytesMut read would fill from offset 0).
        let BufResult(result, back) = self.stream.read(std::mem::take(rbuf).uninit()).await;
        *rbuf = back.into_inner();
        match result {
            Ok(0) => Received::Eof,
            Ok(n) => {
                self.adapt_chunk(n, offered);
                Received::Bytes
            }
            Err(e) => Received::Failed(e),
        }
    }
}

impl<C> SocketReceiver<C> {
    /// Free space to offer the next receive: the adaptive chunk, or for a frame with
    /// `rest_of_frame` bytes still missing, as much of that rest as is already buffered.
    /// The buffer then grows geometrically with the bytes that actually arrive (few
    /// reallocations for a large frame) and never holds much more than twice what the
    /// client sent: a prefix announcing a large frame reserves nothing by itself.
    fn grow_bytes(&self, buffered: usize, rest_of_frame: usize) -> usize {
        rest_of_frame.min(buffered).max(self.chunk)
    }

    /// Adapts the space reserved ahead in the frame buffer to the traffic, as Netty's
    /// adaptive allocator does: double while receives fill what they were offered, halve
    /// when they bring little. A busy connection then grows its buffer in few large steps;
    /// an idle one keeps a small one.
    fn adapt_chunk(&mut self, received: usize, offered: usize) {
        if received >= offered {
            self.chunk = (self.chunk * 2).min(self.max_chunk);
        } else if received < self.chunk / 8 {
            self.chunk = (self.chunk / 2).max(MIN_READ_CHUNK_BYTES);
        }
    }
}

/// ENOBUFS from a multishot receive: its buffer ring was empty. compio reports it as
/// `ResourceBusy` (with its own message, no errno); a socket read never fails with EBUSY.
fn is_ring_empty(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::ResourceBusy || e.raw_os_error() == Some(libc::ENOBUFS)
}

/// Copies one ring buffer behind the partial frame, growing the frame buffer by at least
/// `reserve_bytes` when it must grow; the caller drops the ring buffer right after, which
/// hands it back to the ring.
fn append(rbuf: &mut BytesMut, data: &[u8], reserve_bytes: usize) {
    if rbuf.capacity() - rbuf.len() < data.len() {
        rbuf.reserve(data.len().max(reserve_bytes).max(MIN_READ_CHUNK_BYTES));
    }
    rbuf.extend_from_slice(data);
}
