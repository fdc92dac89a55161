//! Zero-copy response bodies from files: [`FileRange`] (an open file kept open by an `Arc`,
//! plus offset and length), [`BodyChunk`] (one piece of a response body, in memory or in a
//! file), and the connection writer's sender that splices ranges file → pipe → socket, so
//! the bytes go from the page cache to the socket without being copied by the CPU on the
//! way (a pull answered from CommitLog segments).
//!
//! Pipes: each network core (one thread; a connection never leaves it) keeps a small pool
//! of pipe pairs in a thread-local, each grown with F_SETPIPE_SZ to [`PIPE_TARGET_BYTES`]
//! (or as close as `/proc/sys/fs/pipe-max-size` and the per-user pipe quota allow). A writer
//! leases one pipe for one batch of consecutive ranges; two connections of one core never
//! share a pipe, because their splices interleave while either waits for its socket. The
//! batch's ranges are packed into pipe loads, one socket splice per load. Only an empty
//! pipe goes back to the pool: a pipe left holding bytes (a failed or cancelled send) is
//! closed, since those bytes would otherwise prefix the next range. At most
//! [`MAX_PIPES_PER_CORE`] pipes are leased at once; past that, or when no pipe can be
//! created (EMFILE), ranges are copied through a bounded buffer instead (read, then write).
//!
//! Where each step runs (measured with `examples/pull_bench.rs`, `benches/README.md`): the
//! kernel runs every io_uring SPLICE in an io-wq worker, and those hand-offs cost more CPU
//! than the copy they save (with both steps as io_uring SPLICEs, 512 KiB bodies took 1.2-1.3x
//! the server CPU per MB of a vectored write from the mapping). So:
//! - file → pipe is a direct splice(2) on the core when cachestat(2) says every page is in
//!   the page cache (nothing to read from disk, so it cannot block), and an io_uring
//!   SPLICE otherwise, so a page-cache miss blocks a kernel worker, never the core;
//! - pipe → socket is a direct splice(2) on the core into the socket, which the first
//!   range makes non-blocking (io_uring's own sends and receives on it are unaffected: they
//!   pass MSG_DONTWAIT themselves and wait by polling); a full socket is EAGAIN, and the
//!   writer waits for writability through io_uring (PollOnce) without holding the core;
//! - the memory run before a range (the frame header) is sent with MSG_MORE, and a load's
//!   socket splice carries SPLICE_F_MORE while more output is queued behind it, so a frame
//!   leaves in full segments rather than a small header packet first.
//!
//! Errors: EAGAIN and EINTR are retried, at most [`MAX_STALLED_SPLICES`] times in a row
//! without progress; EPIPE, ECONNRESET and every other error end the send, and the writer
//! closes the connection as for a failed write. A file shorter than its range (truncated
//! underneath us) is an error too: the frame header already promised the bytes. splice(2)
//! raises SIGPIPE on a closed peer (it has no MSG_NOSIGNAL); Rust programs ignore SIGPIPE,
//! so that is only EPIPE here.

use std::cell::RefCell;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use bytes::Bytes;
use compio::buf::BufResult;
use compio::driver::op::{Interest, PollOnce, ReadAt, Splice, SpliceFlags};
use compio::driver::ToSharedFd;
use compio::io::AsyncWriteExt;
use compio::net::TcpStream;
use ringmq_tls::TlsLink;

/// Capacity asked of F_SETPIPE_SZ for each pipe: one pipe load per socket splice, so a
/// 512 KiB pull body (32 records of 16 KiB) goes out in one. Unprivileged processes get at
/// most `/proc/sys/fs/pipe-max-size` (1 MiB by default).
pub const PIPE_TARGET_BYTES: usize = 1024 * 1024;
/// Smallest capacity tried when the target is refused (the kernel's default pipe size).
const PIPE_MIN_BYTES: usize = 64 * 1024;
/// Empty pipes a core keeps for reuse; more are closed when their lease ends.
const MAX_IDLE_PIPES_PER_CORE: usize = 4;
/// Pipes one core may have leased at once (each is two file descriptors); ranges sent
/// beyond it are copied through a buffer.
pub const MAX_PIPES_PER_CORE: usize = 64;
/// Consecutive EAGAIN/EINTR results, without a byte moved, after which a send fails.
pub const MAX_STALLED_SPLICES: u32 = 64;
/// Buffer of the copy path (no pipe available, or a file that cannot be spliced).
const COPY_CHUNK_BYTES: usize = 64 * 1024;

/// The file side of a [`FileRange`]: anything that owns an open file descriptor.
pub type SharedFile = Arc<dyn AsFd + Send + Sync>;

/// `len` bytes at `offset` of an open file, sent by splicing them to the socket. The `Arc`
/// keeps the file open until the bytes are out, so a file unlinked meanwhile (retention
/// deleting a CommitLog segment) is still sent whole.
///
/// The bytes must not change while the range is queued: the socket gets whatever the file
/// holds when the splice runs (CommitLog bytes below the written position never change).
#[derive(Clone)]
pub struct FileRange {
    file: SharedFile,
    offset: u64,
    len: usize,
}

impl FileRange {
    /// A range of `file`. Fails when `offset + len` passes the largest file offset (i64).
    /// Whether the file is long enough is checked when the range is sent.
    pub fn new(file: SharedFile, offset: u64, len: usize) -> io::Result<Self> {
        let fits = offset
            .checked_add(len as u64)
            .is_some_and(|end| end <= i64::MAX as u64);
        if !fits {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "file range of {len} bytes at offset {offset} passes the largest file offset"
                ),
            ));
        }
        Ok(Self { file, offset, len })
    }

    pub fn file(&self) -> &SharedFile {
        &self.file
    }

    /// Offset of the first byte in the file.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads the range into memory with pread. Blocking: for tests and tools, never on a
    /// network core. Fails with UnexpectedEof when the file is shorter than the range.
    pub fn read_to_vec(&self) -> io::Result<Vec<u8>> {
        let mut out = vec![0u8; self.len];
        let mut done = 0usize;
        while done < self.len {
            // SAFETY: `out[done..]` is a live, writable buffer of `len - done` bytes; the fd
            // is kept open by `self.file`.
            let n = unsafe {
                libc::pread(
                    self.file.as_fd().as_raw_fd(),
                    out[done..].as_mut_ptr() as *mut libc::c_void,
                    self.len - done,
                    (self.offset + done as u64) as libc::off_t,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                return Err(self.past_end_of_file(self.offset + done as u64));
            }
            done += n as usize;
        }
        Ok(out)
    }

    fn past_end_of_file(&self, at: u64) -> io::Error {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "file (fd {}) ends at offset {at}, inside the range [{}, {}) being sent",
                self.file.as_fd().as_raw_fd(),
                self.offset,
                self.offset + self.len as u64
            ),
        )
    }
}

impl fmt::Debug for FileRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileRange")
            .field("fd", &self.file.as_fd().as_raw_fd())
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}

/// One piece of a response body after `command.body`.
#[derive(Debug, Clone)]
pub enum BodyChunk {
    /// Bytes in memory, written with a vectored write (no copy in user space).
    Memory(Bytes),
    /// A range of an open file, spliced to the socket (no copy through user space at all).
    File(FileRange),
}

impl BodyChunk {
    /// Bytes this chunk puts on the wire.
    pub fn len(&self) -> usize {
        match self {
            BodyChunk::Memory(b) => b.len(),
            BodyChunk::File(r) => r.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<Bytes> for BodyChunk {
    fn from(b: Bytes) -> Self {
        BodyChunk::Memory(b)
    }
}

impl From<FileRange> for BodyChunk {
    fn from(r: FileRange) -> Self {
        BodyChunk::File(r)
    }
}

// ---------------------------------------------------------------------------------------
// Pipes
// ---------------------------------------------------------------------------------------

/// A pipe pair. `Arc`s, because an in-flight splice op holds its own clone: a send whose
/// future is dropped mid-splice leaves the fd open until the kernel is done with it.
struct Pipe {
    read: Arc<OwnedFd>,
    write: Arc<OwnedFd>,
    capacity_bytes: usize,
}

impl Pipe {
    fn create() -> io::Result<Pipe> {
        let mut fds: [RawFd; 2] = [-1, -1];
        // SAFETY: pipe2 writes two descriptors into the array we own; the result is checked.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both are fresh descriptors nothing else owns.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let capacity_bytes = grow_pipe(&write);
        Ok(Pipe {
            read: Arc::new(read),
            write: Arc::new(write),
            capacity_bytes,
        })
    }
}

/// Sets the pipe's capacity to [`PIPE_TARGET_BYTES`], halving down to [`PIPE_MIN_BYTES`]
/// while the kernel refuses (EPERM past pipe-max-size or the user's pipe quota); returns
/// the capacity it has.
fn grow_pipe(fd: &OwnedFd) -> usize {
    let mut want = PIPE_TARGET_BYTES;
    while want >= PIPE_MIN_BYTES {
        // SAFETY: fcntl on a descriptor we own; F_SETPIPE_SZ takes an int and returns the
        // new capacity or -1.
        let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, want as libc::c_int) };
        if rc > 0 {
            return rc as usize;
        }
        want /= 2;
    }
    // SAFETY: as above; F_GETPIPE_SZ returns the capacity or -1.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETPIPE_SZ) };
    let got = if rc > 0 { rc as usize } else { 4096 };
    tracing::debug!(
        capacity_bytes = got,
        "F_SETPIPE_SZ refused even {PIPE_MIN_BYTES} bytes; splicing in smaller rounds"
    );
    got
}

#[derive(Default)]
struct PipePool {
    idle: Vec<Pipe>,
    leased: usize,
    /// Ranges this core sent by splice / by copy (for tests and debugging).
    spliced_ranges: u64,
    copied_ranges: u64,
    /// Pipe fills done with a direct splice on the core (pages cached) / through io_uring.
    fills_on_core: u64,
    fills_async: u64,
}

/// Counts a pipe fill on this core's pool: done on the core, or through io_uring.
fn count_fill(on_core: bool) {
    let _ = PIPES.try_with(|p| {
        let mut p = p.borrow_mut();
        if on_core {
            p.fills_on_core += 1;
        } else {
            p.fills_async += 1;
        }
    });
}

/// Counts `ranges` finished range sends on this core's pool.
fn count_sent(spliced: bool, ranges: usize) {
    let _ = PIPES.try_with(|p| {
        let mut p = p.borrow_mut();
        if spliced {
            p.spliced_ranges += ranges as u64;
        } else {
            p.copied_ranges += ranges as u64;
        }
    });
}

thread_local! {
    /// This network core's pipes.
    static PIPES: RefCell<PipePool> = RefCell::new(PipePool::default());
}

/// A pipe leased from this core's pool for one batch of ranges.
struct PipeLease {
    pipe: Option<Pipe>,
    /// Bytes spliced into the pipe and not yet out of it.
    in_pipe: usize,
    /// A splice on the pipe was submitted and its completion not seen (the send future was
    /// dropped): the pipe's content is unknown.
    op_pending: bool,
}

impl PipeLease {
    /// A pipe from the pool or a new one; `Ok(None)` when the core has
    /// [`MAX_PIPES_PER_CORE`] leased.
    fn acquire() -> io::Result<Option<PipeLease>> {
        let reused = PIPES.with(|p| {
            let mut p = p.borrow_mut();
            if p.leased >= MAX_PIPES_PER_CORE {
                return Err(());
            }
            p.leased += 1;
            Ok(p.idle.pop())
        });
        let pipe = match reused {
            Err(()) => return Ok(None),
            Ok(Some(pipe)) => pipe,
            Ok(None) => match Pipe::create() {
                Ok(pipe) => pipe,
                Err(e) => {
                    PIPES.with(|p| p.borrow_mut().leased -= 1);
                    return Err(e);
                }
            },
        };
        Ok(Some(PipeLease {
            pipe: Some(pipe),
            in_pipe: 0,
            op_pending: false,
        }))
    }

    fn pipe(&self) -> &Pipe {
        // Only `drop` takes the pipe out.
        self.pipe
            .as_ref()
            .expect("pipe present until the lease drops")
    }
}

impl Drop for PipeLease {
    fn drop(&mut self) {
        let reusable = self.in_pipe == 0 && !self.op_pending;
        let pipe = self.pipe.take();
        // `try_with`: a send dropped while the thread exits finds the pool already gone.
        let _ = PIPES.try_with(|p| {
            let mut p = p.borrow_mut();
            p.leased -= 1;
            if let Some(pipe) = pipe {
                if reusable && p.idle.len() < MAX_IDLE_PIPES_PER_CORE {
                    p.idle.push(pipe);
                }
            }
        });
    }
}

// ---------------------------------------------------------------------------------------
// Sending
// ---------------------------------------------------------------------------------------

/// Why a splice-based send stopped.
enum SpliceError {
    /// The file cannot be spliced (EINVAL from the first file → pipe splice); nothing of
    /// the range was sent, so it can go by copy instead.
    Unsupported(io::Error),
    Io(io::Error),
}

/// Puts the connection's socket in non-blocking mode, once (`nonblocking` remembers it):
/// the direct splice(2) into the socket then returns EAGAIN instead of sleeping on the
/// core when the socket buffer is full. io_uring's own sends and receives ignore the flag
/// (they pass MSG_DONTWAIT themselves and wait by polling), so the other operations on the
/// connection behave as before.
fn ensure_nonblocking(stream: &TcpStream, nonblocking: &mut bool) -> io::Result<()> {
    if *nonblocking {
        return Ok(());
    }
    let fd = stream.as_raw_fd();
    // SAFETY: fcntl on the connection's open socket (the writer holds it).
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("cannot make the socket non-blocking for splice: {e}"),
        ));
    }
    *nonblocking = true;
    Ok(())
}

/// Sends as much of `iov` as the socket takes right now, with MSG_MORE: the memory run
/// just before a file range (a frame header, usually), so it leaves in the same segments
/// as the range's first bytes instead of as a packet of its own (measured at 512 KiB
/// bodies: from 1.02x to 1.26x the throughput of the vectored write, `benches/README.md`).
/// Only for a socket made non-blocking by [`send_file_ranges`]; returns the bytes sent (0
/// when none could be). The ranges' last splice goes without MORE unless more output is
/// queued, so the corked bytes always leave with the next send.
pub(crate) fn send_memory_before_range(stream: &TcpStream, iov: &[Bytes]) -> usize {
    // The writer takes at most `MAX_IOVECS` chunks per batch; an on-stack array keeps the
    // send allocation-free.
    const MAX_CHUNKS: usize = super::core_local::MAX_IOVECS;
    assert!(
        iov.len() <= MAX_CHUNKS,
        "{} chunks in one memory run",
        iov.len()
    );
    let mut vecs = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; MAX_CHUNKS];
    for (v, b) in vecs.iter_mut().zip(iov) {
        v.iov_base = b.as_ptr() as *mut libc::c_void;
        v.iov_len = b.len();
    }
    // SAFETY: an all-zero msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = vecs.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: `msg` points at `vecs`, which describe live buffers owned by `iov`, for the
    // duration of the call; the socket is open (the writer holds it).
    let rc = unsafe {
        libc::sendmsg(
            stream.as_raw_fd(),
            &msg,
            libc::MSG_MORE | libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    // An error (EAGAIN, or one the io_uring write that follows reports again) sends nothing.
    rc.max(0) as usize
}

/// Sends `ranges`, in order, on `stream`: spliced through one pipe of this core (packed
/// into pipe loads, so many small ranges cost one socket splice per load), or copied
/// through a buffer when no pipe is available or a file cannot be spliced. The last splice
/// into the socket carries MSG_MORE when `more_after` says other output is already queued
/// (the writer sends it at once, and that send pushes everything out). `nonblocking` is
/// the connection's "socket already non-blocking" flag ([`ensure_nonblocking`]).
pub(crate) async fn send_file_ranges(
    stream: &mut TcpStream,
    ranges: &[FileRange],
    more_after: &dyn Fn() -> bool,
    nonblocking: &mut bool,
) -> io::Result<()> {
    let total: usize = ranges.iter().map(FileRange::len).sum();
    if total == 0 {
        return Ok(());
    }
    let mut lease = match PipeLease::acquire() {
        Ok(Some(lease)) => lease,
        Ok(None) => {
            tracing::debug!(
                "{MAX_PIPES_PER_CORE} pipes leased on this core; copying {total} bytes of file ranges"
            );
            return copy_file_ranges(stream, ranges).await;
        }
        Err(e) => {
            tracing::warn!(
                "cannot create a pipe for splice ({e}); copying {total} bytes of file ranges"
            );
            return copy_file_ranges(stream, ranges).await;
        }
    };
    ensure_nonblocking(stream, nonblocking)?;
    match splice_file_ranges(stream, ranges, &mut lease, more_after).await {
        Ok(()) => {
            count_sent(true, ranges.len());
            Ok(())
        }
        Err(SpliceError::Io(e)) => Err(e),
        Err(SpliceError::Unsupported(e)) => {
            tracing::debug!("file cannot be spliced ({e}); copying {total} bytes of file ranges");
            drop(lease);
            copy_file_ranges(stream, ranges).await
        }
    }
}

/// Fills the pipe from the ranges in order and drains it into the socket whenever it is
/// full, and once at the end.
async fn splice_file_ranges(
    stream: &TcpStream,
    ranges: &[FileRange],
    lease: &mut PipeLease,
    more_after: &dyn Fn() -> bool,
) -> Result<(), SpliceError> {
    let socket = stream.to_shared_fd();
    let (pipe_read, pipe_write, capacity) = {
        let p = lease.pipe();
        (p.read.clone(), p.write.clone(), p.capacity_bytes)
    };
    let mut drained_any = false;
    for range in ranges {
        let mut offset = range.offset;
        let mut left = range.len;
        while left > 0 {
            let room = capacity.saturating_sub(lease.in_pipe);
            let fill = if room == 0 {
                Fill::PipeFull
            } else {
                fill_pipe(range, offset, left.min(room), &pipe_write, lease)
                    .await
                    .map_err(|e| {
                        // EINVAL before anything moved: the file does not support splice.
                        let untouched = !drained_any && lease.in_pipe == 0;
                        if untouched && e.raw_os_error() == Some(libc::EINVAL) {
                            SpliceError::Unsupported(e)
                        } else {
                            SpliceError::Io(e)
                        }
                    })?
            };
            match fill {
                Fill::Moved(0) => return Err(SpliceError::Io(range.past_end_of_file(offset))),
                Fill::Moved(n) => {
                    assert!(n <= left, "splice moved {n} bytes of {left} asked");
                    lease.in_pipe += n;
                    offset += n as u64;
                    left -= n;
                }
                Fill::PipeFull => {
                    drain_pipe(&socket, &pipe_read, lease, true)
                        .await
                        .map_err(SpliceError::Io)?;
                    drained_any = true;
                }
            }
        }
    }
    drain_pipe(&socket, &pipe_read, lease, more_after())
        .await
        .map_err(SpliceError::Io)
}

/// Splices the pipe's bytes into the (non-blocking) socket with direct splice(2) calls on
/// the core, waiting for writability through io_uring when the socket buffer is full.
/// `more`: SPLICE_F_MORE on every call (more bytes follow at once). Measured against the
/// same step as an io_uring SPLICE, which the kernel always hands to an io-wq worker: 0.92x
/// instead of 1.0x the server CPU per MB of the vectored write at 512 KiB bodies.
async fn drain_pipe<S: AsFd + Clone + 'static>(
    socket: &S,
    pipe_read: &Arc<OwnedFd>,
    lease: &mut PipeLease,
    more: bool,
) -> io::Result<()> {
    let flags = libc::SPLICE_F_NONBLOCK | if more { libc::SPLICE_F_MORE } else { 0 };
    let mut stalls = 0u32;
    while lease.in_pipe > 0 {
        // SAFETY: both descriptors are open (the lease and the writer hold them); null
        // offsets are required for a pipe and mean "current position" for a socket.
        let rc = unsafe {
            libc::splice(
                pipe_read.as_raw_fd(),
                std::ptr::null_mut(),
                socket.as_fd().as_raw_fd(),
                std::ptr::null_mut(),
                lease.in_pipe,
                flags,
            )
        };
        if rc > 0 {
            let sent = rc as usize;
            assert!(
                sent <= lease.in_pipe,
                "splice sent {sent} of {} bytes",
                lease.in_pipe
            );
            lease.in_pipe -= sent;
            stalls = 0;
            continue;
        }
        let e = if rc == 0 {
            io::Error::new(
                io::ErrorKind::WriteZero,
                "splice into the socket moved 0 bytes",
            )
        } else {
            io::Error::last_os_error()
        };
        let retry = matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
        );
        stalls += 1;
        if !retry || stalls > MAX_STALLED_SPLICES {
            return Err(e);
        }
        if e.kind() == io::ErrorKind::WouldBlock {
            // The peer has not read yet: wait (no CPU) until the socket has room.
            let BufResult(ready, _) =
                compio::runtime::submit(PollOnce::new(socket.clone(), Interest::Writable)).await;
            ready?;
        }
    }
    Ok(())
}

/// Outcome of one pipe fill.
enum Fill {
    /// Bytes moved into the pipe; 0 = the file ends before the range does.
    Moved(usize),
    /// No room: drain the pipe, then fill again.
    PipeFull,
}

/// Moves up to `want` bytes of the file at `offset` into the pipe. When every page of them
/// is in the page cache, with a direct splice(2) on the network core: no page is read from
/// disk, so it cannot block, and it saves an io-wq hand-off (the kernel runs every io_uring
/// SPLICE in an io-wq worker). Otherwise through io_uring, so the disk read blocks a
/// kernel worker instead of the core; that fill only ever goes into an empty pipe (an
/// io_uring splice into a full pipe would wait for room only our own drain makes).
async fn fill_pipe(
    range: &FileRange,
    offset: u64,
    want: usize,
    pipe_write: &Arc<OwnedFd>,
    lease: &mut PipeLease,
) -> io::Result<Fill> {
    if pages_cached(&range.file, offset, want) {
        let mut off_in = offset as libc::loff_t;
        // SAFETY: both descriptors are open (held by `range` and the lease); `off_in` is a
        // live loff_t the kernel reads and advances; a null out-offset is required for a
        // pipe. SPLICE_F_NONBLOCK: a pipe without a free slot is EAGAIN, not a wait.
        let rc = unsafe {
            libc::splice(
                range.file.as_fd().as_raw_fd(),
                &mut off_in,
                pipe_write.as_raw_fd(),
                std::ptr::null_mut(),
                want,
                libc::SPLICE_F_NONBLOCK,
            )
        };
        if rc >= 0 {
            count_fill(true);
            return Ok(Fill::Moved(rc as usize));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock if lease.in_pipe > 0 => return Ok(Fill::PipeFull),
            // An empty pipe has room: retried below, with the bounded EAGAIN/EINTR handling.
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => {}
            _ => return Err(e),
        }
    }
    if lease.in_pipe > 0 {
        return Ok(Fill::PipeFull);
    }
    let moved = splice_retrying(lease, pipe_write, || {
        Splice::new(
            range.file.clone(),
            offset as i64,
            pipe_write.clone(),
            -1,
            want,
            SpliceFlags::NONBLOCK,
        )
    })
    .await?;
    count_fill(false);
    Ok(Fill::Moved(moved))
}

/// Linux's cachestat(2) (6.5+): page-cache state of a file range. Not in the libc crate
/// for every target; the syscall number is the same on every architecture (added after
/// the tables were unified).
const SYS_CACHESTAT: libc::c_long = 451;

#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

thread_local! {
    /// cachestat(2) returned ENOSYS (kernel before 6.5) or EPERM (seccomp) here once.
    static NO_CACHESTAT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether every page of `[offset, offset + len)` is in the page cache. Without
/// cachestat(2) it answers true: the fill then reads on the core, as reading through the
/// mapping would.
fn pages_cached(file: &SharedFile, offset: u64, len: usize) -> bool {
    if NO_CACHESTAT.with(|c| c.get()) {
        return true;
    }
    const PAGE: u64 = 4096;
    let first = offset / PAGE;
    let end = (offset + len as u64).div_ceil(PAGE);
    let range = CachestatRange {
        off: first * PAGE,
        len: (end - first) * PAGE,
    };
    let mut stat = Cachestat::default();
    // SAFETY: cachestat reads `range` and writes one `Cachestat` (the kernel's struct
    // cachestat layout: five u64) through the pointers, both live for the call; the fd is
    // held open by `file`.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_fd().as_raw_fd(),
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0u32,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM)) {
            tracing::debug!(
                "cachestat unavailable ({e}); page-cache reads for splice run on the core"
            );
            NO_CACHESTAT.with(|c| c.set(true));
            return true;
        }
        return false;
    }
    // Pages past the end of the file are not cached; the splice will report the short file.
    stat.nr_cache >= end - first
}

/// Runs one splice, retrying EAGAIN (after waiting for `dest` to become writable) and EINTR
/// up to [`MAX_STALLED_SPLICES`] times in a row.
async fn splice_retrying<A, B, D>(
    lease: &mut PipeLease,
    dest: &D,
    make: impl Fn() -> Splice<A, B>,
) -> io::Result<usize>
where
    A: AsFd + 'static,
    B: AsFd + 'static,
    D: AsFd + Clone + 'static,
{
    let mut stalls = 0u32;
    loop {
        lease.op_pending = true;
        let BufResult(result, _) = compio::runtime::submit(make()).await;
        lease.op_pending = false;
        let e = match result {
            Ok(n) => return Ok(n),
            Err(e) => e,
        };
        let retry = matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
        );
        if !retry {
            return Err(e);
        }
        stalls += 1;
        if stalls > MAX_STALLED_SPLICES {
            return Err(io::Error::new(
                e.kind(),
                format!("splice made no progress in {MAX_STALLED_SPLICES} tries: {e}"),
            ));
        }
        if e.kind() == io::ErrorKind::WouldBlock {
            let BufResult(ready, _) =
                compio::runtime::submit(PollOnce::new(dest.clone(), Interest::Writable)).await;
            ready?;
        }
    }
}

/// [`copy_file_range`] for each range in order.
async fn copy_file_ranges(stream: &mut TcpStream, ranges: &[FileRange]) -> io::Result<()> {
    for range in ranges {
        copy_file_range(stream, range).await?;
    }
    count_sent(false, ranges.len());
    Ok(())
}

/// Sends `range` by reading it into a bounded buffer and writing that (the path without a
/// pipe). Reads go through io_uring, so a page-cache miss does not block the core either.
async fn copy_file_range(stream: &mut TcpStream, range: &FileRange) -> io::Result<()> {
    copy_file_range_through(stream, range, None).await
}

/// Sends `range` on a TLS connection: read as [`copy_file_range`] reads it, each chunk
/// sealed by `link` before it is written.
pub(crate) async fn send_sealed_file_range(
    stream: &mut TcpStream,
    range: &FileRange,
    link: &RefCell<TlsLink>,
) -> io::Result<()> {
    copy_file_range_through(stream, range, Some(link)).await?;
    count_sent(false, 1);
    Ok(())
}

async fn copy_file_range_through(
    stream: &mut TcpStream,
    range: &FileRange,
    tls: Option<&RefCell<TlsLink>>,
) -> io::Result<()> {
    let mut sealed: Vec<u8> = Vec::new();
    let mut buf: Vec<u8> = Vec::with_capacity(COPY_CHUNK_BYTES.min(range.len));
    let mut offset = range.offset;
    let mut left = range.len;
    while left > 0 {
        buf.clear();
        let BufResult(read, back) =
            compio::runtime::submit(ReadAt::new(range.file.clone(), offset, buf)).await;
        buf = compio::buf::IntoInner::into_inner(back);
        let n = read?;
        if n == 0 {
            return Err(range.past_end_of_file(offset));
        }
        assert!(
            n <= buf.capacity(),
            "read {n} bytes into {} of room",
            buf.capacity()
        );
        // SAFETY: the kernel wrote `n` bytes into the buffer's spare capacity from index 0
        // (it was cleared), and `n` is within the capacity (checked above).
        unsafe { buf.set_len(n) };
        // The read may run past the range (it fills the buffer); send only the range.
        buf.truncate(n.min(left));
        let sent = buf.len();
        match tls {
            None => {
                let BufResult(written, back) = stream.write_all(buf).await;
                buf = back;
                written?;
            }
            Some(link) => {
                sealed.clear();
                link.borrow_mut().seal(&buf, &mut sealed)?;
                let BufResult(written, back) = stream.write_all(sealed).await;
                sealed = back;
                written?;
            }
        }
        offset += sent as u64;
        left -= sent;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// An open file holding `bytes`, already unlinked (nothing to clean up, even when a
    /// test fails; the ranges keep it open).
    fn temp_file(name: &str, bytes: &[u8]) -> Arc<std::fs::File> {
        let path =
            std::env::temp_dir().join(format!("ringmq-file-range-{name}-{}", std::process::id()));
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(bytes).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        Arc::new(f)
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 % 251) as u8).collect()
    }

    /// Runs `send` on a connected loopback socket inside a compio runtime; returns what the
    /// peer read until the server side closed.
    fn received_by_peer(
        send: impl FnOnce(
                TcpStream,
            )
                -> std::pin::Pin<Box<dyn std::future::Future<Output = io::Result<()>>>>
            + Send
            + 'static,
    ) -> (io::Result<()>, Vec<u8>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            got
        });
        let (accepted, _) = listener.accept().unwrap();
        let rt = compio::runtime::Runtime::new().unwrap();
        let result = rt.block_on(async move {
            let stream = TcpStream::from_std(accepted).unwrap();
            send(stream).await
        });
        (result, reader.join().unwrap())
    }

    #[test]
    fn range_construction_rejects_offsets_past_i64() {
        let f = temp_file("bounds", b"abc");
        assert!(FileRange::new(f.clone(), i64::MAX as u64, 1).is_err());
        let r = FileRange::new(f, 1, 2).unwrap();
        assert_eq!(r.read_to_vec().unwrap(), b"bc");
        let past = FileRange::new(r.file().clone(), 2, 5).unwrap();
        assert_eq!(
            past.read_to_vec().unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }

    #[test]
    fn splice_and_copy_paths_send_the_same_bytes() {
        // Larger than any pipe load, at an odd offset.
        let data = pattern(PIPE_TARGET_BYTES * 2 + 12_345);
        let f = temp_file("paths", &data);
        let range = FileRange::new(f, 4_097 + 13, data.len() - 4_097 - 13 - 7).unwrap();
        let expected = data[4_110..data.len() - 7].to_vec();

        let r = range.clone();
        let (sent, got) = received_by_peer(move |mut s| {
            Box::pin(async move { send_file_ranges(&mut s, &[r], &|| false, &mut false).await })
        });
        sent.unwrap();
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "spliced bytes differ");
        PIPES.with(|p| {
            let p = p.borrow();
            assert_eq!(
                (p.spliced_ranges, p.copied_ranges),
                (1, 0),
                "the range went by splice, not by the copy fallback"
            );
            assert_eq!(p.idle.len(), 1, "the emptied pipe went back to the pool");
            assert!(p.idle[0].capacity_bytes >= PIPE_MIN_BYTES);
        });

        let r = range.clone();
        let (sent, got) = received_by_peer(move |mut s| {
            Box::pin(async move { copy_file_ranges(&mut s, &[r]).await })
        });
        sent.unwrap();
        assert!(got == expected, "copied bytes differ");
        PIPES.with(|p| assert_eq!(p.borrow().copied_ranges, 1));

        // Only empty pipes were kept, and none is still leased.
        PIPES.with(|p| assert_eq!(p.borrow().leased, 0));
    }

    #[test]
    fn uncached_pages_are_read_through_io_uring_and_cached_ones_on_the_core() {
        let data = pattern(3 * PIPE_MIN_BYTES + 99);
        let f = temp_file("cold", &data);
        // Written back, then dropped from the page cache.
        f.sync_all().unwrap();
        // SAFETY: plain syscall on an open descriptor.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0);
        let shared: SharedFile = f;
        let cold = pages_cached(&shared, 0, data.len());
        let range = FileRange::new(shared.clone(), 5, data.len() - 5).unwrap();
        for _ in 0..2 {
            let r = range.clone();
            let (sent, got) = received_by_peer(move |mut s| {
                Box::pin(async move { send_file_ranges(&mut s, &[r], &|| false, &mut false).await })
            });
            sent.unwrap();
            assert!(got == data[5..], "bytes differ");
        }
        PIPES.with(|p| {
            let p = p.borrow();
            if NO_CACHESTAT.with(|c| c.get()) {
                assert_eq!(
                    p.fills_async, 0,
                    "without cachestat every fill runs on the core"
                );
            } else {
                assert!(!cold, "dropped pages must not count as cached");
                assert!(
                    p.fills_async >= 1,
                    "the cold range was read through io_uring"
                );
                assert!(
                    p.fills_on_core >= 1,
                    "the second send found the pages cached"
                );
            }
        });
        assert!(
            pages_cached(&shared, 0, data.len()),
            "the sends cached every page"
        );
    }

    #[test]
    fn many_small_ranges_pack_into_pipe_loads() {
        // 400 ranges of 5,000 bytes at odd offsets: each spans two or three pages, so the
        // pipe runs out of slots before it runs out of bytes, several times.
        let data = pattern(4 * 1024 * 1024);
        let f = temp_file("packed", &data);
        let mut expected = Vec::new();
        let ranges: Vec<FileRange> = (0..400u64)
            .map(|i| {
                let offset = i * 9_973 + 1;
                expected.extend_from_slice(&data[offset as usize..offset as usize + 5_000]);
                FileRange::new(f.clone(), offset, 5_000).unwrap()
            })
            .collect();
        let (sent, got) = received_by_peer(move |mut s| {
            Box::pin(async move { send_file_ranges(&mut s, &ranges, &|| false, &mut false).await })
        });
        sent.unwrap();
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "packed ranges differ");
        PIPES.with(|p| {
            let p = p.borrow();
            assert_eq!((p.spliced_ranges, p.copied_ranges), (400, 0));
            assert_eq!(p.leased, 0);
        });
    }

    #[test]
    fn a_range_past_the_end_of_its_file_fails_the_send() {
        let data = pattern(10_000);
        let f = temp_file("short", &data);
        let range = FileRange::new(f, 5_000, 8_000).unwrap();
        let (sent, got) = received_by_peer(move |mut s| {
            Box::pin(async move { send_file_ranges(&mut s, &[range], &|| false, &mut false).await })
        });
        assert_eq!(sent.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(got, data[5_000..]);
        PIPES.with(|p| {
            let p = p.borrow();
            assert_eq!(p.leased, 0);
            assert_eq!(p.spliced_ranges, 0, "a failed send is not counted as sent");
        });
    }
}
