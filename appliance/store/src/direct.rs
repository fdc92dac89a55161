//! Direct write mode (`ringmq.writeMode=direct`): the write ring and its io_uring flusher.
//!
//! The append stage copies records into an anonymous, page-aligned ring (byte `o` of the
//! CommitLog lives at `o % ring_size`) instead of the mapped segment. The flush stage writes
//! 4 KiB-aligned chunks of the ring to the segment files with O_DIRECT through io_uring
//! (WRITE_FIXED from the ring registered as one fixed buffer), so tail bytes never go
//! through the page cache. Readers get bytes that are not yet on disk copied from the ring
//! (`CommitLog::read`).
//!
//! Two positions come out of the flusher:
//! - `written` (kept here, in the ring): every byte below it has been written to its
//!   segment file by a completed O_DIRECT write. Such bytes are readable from the file,
//!   but not necessarily durable until the next fdatasync (the file system records the
//!   fallocated extents as written only in memory, and the device may cache the data).
//! - the CommitLog's `flushed` offset: bytes below it are durable (written, then
//!   fdatasynced). SYNC_FLUSH acknowledges a put only once it is below `flushed`.
//!
//! The flusher streams: it keeps up to [`MAX_WRITES_IN_FLIGHT`] writes of up to
//! [`MAX_CHUNK_BYTES`] queued at the device and advances `written` over the completed
//! prefix as completions arrive, so the append stage gets ring room back chunk by chunk
//! (it parks when the ring is full and the flusher unparks it). fdatasync is not per
//! write: it runs for durable requests (a SYNC_FLUSH group, the ASYNC_FLUSH interval
//! flush) and when a segment is complete, while the writes after it keep going.
//!
//! Ring discipline: the writer may write global position `p` only while
//! `p < floor_page(written) + ring_size`, so the bytes of `[floor_page(written), max)` are
//! always intact in the ring. Older bytes stay in the ring too until the writer comes
//! round again: before each write the writer publishes `reserved` (the end of what it is
//! about to write), and a byte `g >= base` is intact while `g + ring_size >= reserved`.
//! Readers (consumers and, above all, the reput stage, which reads every record right
//! after it is appended) therefore copy recent bytes from the ring and never go to the disk
//! for them; a reader re-reads from the file only the prefix the writer may have
//! overwritten during its copy, and the discipline puts that prefix below
//! `floor_page(written)`, i.e. in complete pages whose O_DIRECT write has completed and
//! that are never rewritten (only the partial last page is rewritten, by the next flush).
//!
//! The HA sender streams recent bytes to slaves straight from the ring, without a copy:
//! it pins the offset it sends from ([`DirectRing::send_pinned`]) and the writer's room
//! ends at `floor_page(min(written, pin)) + ring_size` while the pin stands, so the bytes
//! cannot be overwritten during the socket write.

use crate::error::StoreError;
use crate::mapped_file::{MappedFile, OS_PAGE_SIZE};
use io_uring::{opcode, squeue, types, IoUring};
use ringmq_sync::LockExt;
use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// Largest single write submitted (bounds one SQE's transfer). Sequential O_DIRECT writes
/// of this size reach the device's streaming rate on the dev VM's virtio disk; the store
/// bench measures the raw disk with the same write size.
pub const MAX_CHUNK_BYTES: u64 = 1024 * 1024;
/// Most O_DIRECT writes queued at the device at once. One write at a time leaves the
/// device idle between a completion and the next submission; on the dev VM 4, 8 and 16
/// all keep it saturated (store bench, 16 KiB direct/ASYNC_FLUSH row), 8 leaves headroom
/// for a slower completion path.
pub const MAX_WRITES_IN_FLIGHT: usize = 8;
/// Submission queue depth of the flusher's ring: the writes in flight plus one batch of
/// fdatasyncs.
const URING_ENTRIES: u32 = 16;
/// `user_data` of an fdatasync (writes carry their sequence number, far below it).
const FSYNC_TAG: u64 = u64::MAX;
/// Longest the append stage parks waiting for ring room before it re-checks on its own
/// (a lost wake-up costs at most this).
const ROOM_PARK_TIMEOUT: Duration = Duration::from_millis(1);
/// While waiting for room, the writer wakes the flusher again every this many parks.
const ROOM_RENUDGE_PARKS: u32 = 8;

/// `DirectRing::ha_pin` when the HA sender pins nothing.
const NO_PIN: u64 = u64::MAX;

fn floor_page(v: u64) -> u64 {
    v / OS_PAGE_SIZE * OS_PAGE_SIZE
}

/// The aligned in-memory write ring.
pub struct DirectRing {
    ptr: NonNull<u8>,
    size: u64,
    /// Lowest global offset the ring has ever held (the page the log resumed at); bytes
    /// below it were never copied in.
    base: AtomicU64,
    /// End of the furthest write the writer has started (published before the bytes).
    reserved: AtomicU64,
    /// End of the bytes whose O_DIRECT writes have completed (module doc).
    written: AtomicU64,
    /// Global offset the HA sender is sending from in place (`NO_PIN`: none); the writer
    /// may not come round to it (module doc).
    ha_pin: AtomicU64,
    /// Set by the writer before it parks for ring room; the flusher (or the HA sender
    /// dropping its pin) unparks it.
    room_wanted: AtomicBool,
    /// The thread that waits for room, unparked when room appears: the thread holding
    /// the append stage (its own thread; a network core running a batch inline checks
    /// for room first, so it waits only if an HA send's brief pin lowers the room).
    writer: Mutex<Option<Thread>>,
    /// The flush worker's thread, unparked when there is something to write.
    flusher: OnceLock<Thread>,
}

// SAFETY: plain anonymous memory. The append stage (on whichever thread holds its lock) is
// the only writer and writes only ring
// positions no reader may rely on (ring discipline, module doc); readers validate copies.
unsafe impl Send for DirectRing {}
// SAFETY: see `Send`.
unsafe impl Sync for DirectRing {}

impl DirectRing {
    /// Allocates a ring of `size_bytes` (rounded up to a page), zeroed.
    pub fn new(size_bytes: usize) -> Result<Self, StoreError> {
        let size = (size_bytes as u64).div_ceil(OS_PAGE_SIZE).max(16) * OS_PAGE_SIZE;
        // SAFETY: anonymous private mapping; checked against MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(StoreError::io(
                "mmap write ring",
                "<anonymous>",
                std::io::Error::last_os_error(),
            ));
        }
        let ptr = NonNull::new(ptr as *mut u8)
            .ok_or_else(|| StoreError::Config("null write ring".into()))?;
        Ok(DirectRing {
            ptr,
            size,
            base: AtomicU64::new(0),
            reserved: AtomicU64::new(0),
            written: AtomicU64::new(0),
            ha_pin: AtomicU64::new(NO_PIN),
            room_wanted: AtomicBool::new(false),
            writer: Mutex::new(None),
            flusher: OnceLock::new(),
        })
    }

    /// Positions an empty ring at global `offset` (startup, before any reader or write).
    pub(crate) fn start_at(&self, offset: u64) {
        self.base.store(offset, Ordering::Relaxed);
        self.written.store(offset, Ordering::Relaxed);
        self.reserved.store(offset, Ordering::Release);
    }

    /// Moves the empty ring of an empty log to global `offset` while the stages run (an
    /// empty slave starting at its master's last segment). The append stage calls it with
    /// nothing reserved; the flusher follows on its next submit.
    pub(crate) fn restart_empty_at(&self, offset: u64) {
        assert_eq!(
            self.reserved.load(Ordering::Acquire),
            self.written.load(Ordering::Acquire),
            "only an empty ring moves"
        );
        self.base.store(offset, Ordering::Release);
        self.written.store(offset, Ordering::Release);
        self.reserved.store(offset, Ordering::Release);
    }

    /// End of the bytes whose O_DIRECT writes have completed: readable from the segment
    /// files, durable only once the CommitLog's flushed offset passes them.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::SeqCst)
    }

    /// First global position the writer may not write yet (ring discipline, module doc).
    pub fn room_end(&self) -> u64 {
        // `written` before the pin (both SeqCst): a pin this load misses was stored after
        // it, and the HA sender's check after its store then read a `written` at least
        // this new (`send_pinned`).
        let written = self.written();
        let pin = self.ha_pin.load(Ordering::SeqCst);
        floor_page(written.min(pin)) + self.size
    }

    /// Flusher: bytes up to `end` are in the files. Wakes the writer if it waits for room.
    fn publish_written(&self, end: u64) {
        debug_assert!(
            end >= self.written.load(Ordering::Relaxed),
            "written went back"
        );
        // SeqCst on both sides (here and in `wait_room`): either the writer sees the new
        // `written` on its re-check, or this sees `room_wanted` and unparks it.
        self.written.store(end, Ordering::SeqCst);
        self.unpark_writer_if_waiting();
    }

    fn unpark_writer_if_waiting(&self) {
        if self.room_wanted.swap(false, Ordering::SeqCst) {
            if let Some(t) = self.writer.lock_unpoisoned().as_ref() {
                t.unpark();
            }
        }
    }

    /// HA sender: writes up to `len` bytes of global `[offset, ..)` to `fd` straight from
    /// the ring, or returns `None` when they may already be overwritten (they are below
    /// `floor_page(written)`, so in the segment file: send them from there). The caller
    /// asks only for published bytes, so the writer never waits on the pin for bytes it
    /// has yet to publish; the pin lasts one non-blocking `writev`.
    ///
    /// Why the check after the pin is enough: a writer room check (`room_end`) reads
    /// `written` before the pin, so one that does not see the pin read `written` before
    /// the pin's store in the SeqCst order, no newer than the one read here; its room
    /// then ends at or below `floor_page(written) + size <= offset + size` and cannot
    /// reach the ring slots of `[offset, offset + len)`. Every later check sees the pin
    /// and stops there too. The same order means a pin that stands never lowers the room
    /// a writer already saw (a network core appending inline relies on that), and the
    /// check before the store keeps a far-behind slave from storing a pin that would,
    /// however briefly.
    pub(crate) fn send_pinned(
        &self,
        fd: i32,
        offset: u64,
        len: usize,
    ) -> Option<std::io::Result<usize>> {
        assert!(
            (len as u64) < self.size,
            "a pinned send spans less than the ring"
        );
        // A slave far behind is sent from the file without storing a pin at all: a pin
        // below `floor_page(written)`, however brief, would lower the writer's room.
        if offset < floor_page(self.written()) {
            return None;
        }
        self.ha_pin.store(offset, Ordering::SeqCst);
        if offset < floor_page(self.written()) || offset < self.base.load(Ordering::Acquire) {
            self.unpin();
            return None;
        }
        let pos = (offset % self.size) as usize;
        let first = len.min(self.size as usize - pos);
        let iov = [
            libc::iovec {
                iov_base: self.ptr_at(offset) as *mut libc::c_void,
                iov_len: first,
            },
            libc::iovec {
                iov_base: self.base() as *mut libc::c_void,
                iov_len: len - first,
            },
        ];
        let count = if first < len { 2 } else { 1 };
        // SAFETY: both iovecs lie inside the ring mapping (`pos + first <= size`,
        // `len - first < size`); the pin keeps the writer off those slots until `unpin`
        // (doc above), and `writev` only reads them.
        let n = unsafe { libc::writev(fd, iov.as_ptr(), count) };
        self.unpin();
        Some(if n < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(n as usize)
        })
    }

    /// Drops the HA sender's pin and wakes the writer if it waits for room (the same
    /// SeqCst hand-shake as `publish_written`).
    fn unpin(&self) {
        self.ha_pin.store(NO_PIN, Ordering::SeqCst);
        self.unpark_writer_if_waiting();
    }

    /// Registers the calling thread as the ring's flusher (flush worker start-up).
    pub(crate) fn set_flusher(&self) {
        let _ = self.flusher.set(std::thread::current());
    }

    /// Wakes the flusher if it is parked idle (new bytes, a durable request, ring
    /// pressure). Cheap when it is not: no system call.
    pub(crate) fn wake_flusher(&self) {
        if let Some(t) = self.flusher.get() {
            t.unpark();
        }
    }

    /// Writer: blocks until global `[.., end)` may be written. `nudge` (which wakes the
    /// flusher) runs when the ring is short of room and again every
    /// [`ROOM_RENUDGE_PARKS`] parks, as a safety net. Returns
    /// whether it had to wait. The caller never asks for more than a ring's worth past
    /// the flusher's `written` (a single write is at most `size - OS_PAGE_SIZE`).
    pub(crate) fn wait_room(&self, end: u64, mut nudge: impl FnMut()) -> bool {
        if end <= self.room_end() {
            return false;
        }
        // Before `room_wanted` is raised: whoever sees it set finds this thread here.
        *self.writer.lock_unpoisoned() = Some(std::thread::current());
        let mut parks = 0u32;
        loop {
            if parks.is_multiple_of(ROOM_RENUDGE_PARKS) {
                nudge();
            }
            self.room_wanted.store(true, Ordering::SeqCst);
            if end <= self.room_end() {
                self.room_wanted.store(false, Ordering::Relaxed);
                return true;
            }
            std::thread::park_timeout(ROOM_PARK_TIMEOUT);
            parks = parks.wrapping_add(1);
        }
    }

    /// Publishes that bytes up to `end` are about to be written: from now on a reader
    /// treats the ring slots of `[.., end - size)` as overwritten.
    fn reserve(&self, end: u64) {
        if end > self.reserved.load(Ordering::Relaxed) {
            self.reserved.store(end, Ordering::Relaxed);
        }
        // Orders the store above before the byte stores that follow (seqlock writer side;
        // pairs with the Acquire fence in `read_into`).
        fence(Ordering::Release);
    }

    /// First global offset whose ring copy is intact right now.
    fn intact_from(&self) -> u64 {
        let reserved = self.reserved.load(Ordering::Acquire);
        self.base
            .load(Ordering::Relaxed)
            .max(reserved.saturating_sub(self.size))
    }

    /// Whether any of `[.., end)` may be served from the ring.
    pub(crate) fn holds_any_before(&self, end: u64) -> bool {
        end > self.intact_from()
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Copies `data` to global offset `offset` (append stage only; caller keeps the ring
    /// discipline).
    pub(crate) fn write(&self, offset: u64, data: &[u8]) {
        debug_assert!(
            offset + data.len() as u64 <= self.room_end(),
            "write past the ring discipline"
        );
        self.reserve(offset + data.len() as u64);
        let mut done = 0usize;
        while done < data.len() {
            let pos = (offset + done as u64) % self.size;
            let n = ((self.size - pos) as usize).min(data.len() - done);
            // SAFETY: `pos + n <= size`; single writer; positions not relied on by readers.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    data.as_ptr().add(done),
                    self.base().add(pos as usize),
                    n,
                )
            };
            done += n;
        }
    }

    /// Zeroes `[offset, next page boundary)` so a padded page write carries no stale bytes.
    pub(crate) fn zero_to_page_end(&self, offset: u64) {
        let end = offset.div_ceil(OS_PAGE_SIZE) * OS_PAGE_SIZE;
        if end > offset {
            debug_assert!(end <= self.room_end(), "zeroing past the ring discipline");
            self.reserve(end);
            let pos = offset % self.size;
            // SAFETY: a page never straddles the ring end (size is page-aligned), so
            // `[pos, pos + (end-offset))` is in bounds; single writer.
            unsafe {
                std::ptr::write_bytes(self.base().add(pos as usize), 0, (end - offset) as usize)
            };
        }
    }

    /// Copies `len` bytes at global `offset` into `out` (no validation; see module doc).
    pub(crate) fn copy_out(&self, offset: u64, out: &mut [u8]) {
        let mut done = 0usize;
        while done < out.len() {
            let pos = (offset + done as u64) % self.size;
            let n = ((self.size - pos) as usize).min(out.len() - done);
            // SAFETY: in-bounds source; a concurrent overwrite can only hit bytes the caller
            // re-reads from disk afterwards (module doc), and `u8` has no invalid values.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.base().add(pos as usize),
                    out.as_mut_ptr().add(done),
                    n,
                )
            };
            done += n;
        }
    }

    /// Pointer to ring position of global `offset` (for io_uring writes).
    fn ptr_at(&self, offset: u64) -> *const u8 {
        // SAFETY: modulo keeps it in bounds.
        unsafe { self.base().add((offset % self.size) as usize) }
    }

    /// Loads `[from, to)` of an existing segment into the ring (startup: the partial tail
    /// page must be in the ring before padded page writes resume).
    pub(crate) fn load_from_segment(&self, seg: &MappedFile, from: u64, to: u64) {
        if to > from {
            let data = seg.slice(from - seg.from_offset(), (to - from) as usize);
            self.write(from, data);
        }
    }

    /// Copies the bytes of global `[offset, offset + out.len())` that the ring still holds
    /// into `out` and returns the end of the prefix it could not vouch for: the caller reads
    /// `[offset, returned)` from the file (it is on disk, see the module doc). Returns
    /// `offset` when everything came from the ring. The caller never asks past the
    /// published max offset.
    pub(crate) fn read_into(&self, offset: u64, out: &mut [u8]) -> u64 {
        let end = offset + out.len() as u64;
        let from = offset.max(self.intact_from()).min(end);
        if from < end {
            let skip = (from - offset) as usize;
            self.copy_out(from, &mut out[skip..]);
        }
        // Seqlock reader side: the copy above happens before the re-check of `reserved`,
        // so any slot the writer started to overwrite during the copy is seen as lost.
        fence(Ordering::Acquire);
        offset.max(self.intact_from()).min(end)
    }
}

impl Drop for DirectRing {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly our mapping; the flusher that registered it is gone
        // (it holds an Arc to the ring).
        unsafe {
            libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.size as usize);
        }
    }
}

/// One O_DIRECT write queued at the device.
struct InFlight {
    /// The SQE's `user_data`.
    seq: u64,
    /// Segment the write goes to.
    segment: u64,
    /// Global offset of its first byte (page-aligned).
    pos: u64,
    /// End of the log bytes it carries (the rest of its last page is padding).
    data_end: u64,
    len: u32,
    done: bool,
}

/// fdatasyncs in flight, submitted together; they make `[.., covers)` durable.
struct SyncBatch {
    covers: u64,
    segments: Vec<u64>,
    pending: usize,
    started: Instant,
}

/// The flush stage's direct-mode writer: owns the io_uring and the O_DIRECT descriptors.
///
/// It streams: each call to [`submit`](Self::submit) queues writes of the complete pages
/// appended so far (up to [`MAX_WRITES_IN_FLIGHT`] of up to [`MAX_CHUNK_BYTES`]), and
/// [`reap`](Self::reap) retires completions in log order, advancing the ring's `written`.
/// A durable request also gets the partial last page written and then one fdatasync per
/// segment with unsynced writes; the writes after it keep going while the fdatasync runs
/// (it covers the writes that completed before it was submitted), and requests that
/// arrive meanwhile are served together by the next one (group commit).
///
/// Two writes in flight never share a page (the device may complete them in any order):
/// the padded last page is written alone, and nothing follows it until it has completed.
pub(crate) struct DirectFlusher {
    /// Declared (so dropped) before `ring`: the ring's memory is registered with it.
    uring: IoUring,
    ring: Arc<DirectRing>,
    fixed: bool,
    fds: HashMap<u64, File>,
    file_size: u64,
    dir: PathBuf,
    /// Writes submitted and not retired, in log order (at most [`MAX_WRITES_IN_FLIGHT`]).
    in_flight: VecDeque<InFlight>,
    next_seq: u64,
    /// Page-aligned start of the next write.
    next_pos: u64,
    /// The last write submitted ends in a padded page; nothing is submitted until it
    /// completes, after which the next write rewrites that page.
    tail_in_flight: bool,
    /// Segments with completed writes no fdatasync has been submitted for (at most
    /// [`MAX_UNSYNCED_SEGMENTS`] together with the segments of writes in flight).
    unsynced: Vec<u64>,
    sync: Option<SyncBatch>,
    /// End of the durable bytes.
    synced: u64,
    /// First failure since the last `reap` that reported one; nothing new is submitted.
    failure: Option<String>,
    /// Duration of the last fdatasync batch (submission to completion).
    last_sync_us: u64,
    /// fdatasync batches completed successfully (each may move `synced`).
    syncs_completed: u64,
}

/// Most segments with writes not yet covered by an fdatasync (bounds the fdatasyncs of
/// one batch and the open descriptors). Only tiny segments (tests) ever reach it.
const MAX_UNSYNCED_SEGMENTS: usize = 4;
// The SQ holds the writes in flight plus one batch of fdatasyncs (one per unsynced segment
// and one linked behind a write).
const _: () = assert!(MAX_WRITES_IN_FLIGHT + MAX_UNSYNCED_SEGMENTS < URING_ENTRIES as usize);
/// Largest durable group written and fdatasynced with plain syscalls on the flush thread
/// (`write_and_sync_inline`) rather than through the io_uring.
const INLINE_SYNC_MAX_BYTES: u64 = MAX_CHUNK_BYTES;
/// A write shorter than [`MAX_CHUNK_BYTES`] waits for more appended bytes while this many
/// writes are in flight and no durable request needs it.
const MIN_WRITES_IN_FLIGHT: usize = 2;

impl DirectFlusher {
    /// A flusher for `ring`, whose bytes up to its current `written` are already durable
    /// (recovered at open).
    pub fn new(ring: Arc<DirectRing>, dir: PathBuf, file_size: u64) -> Result<Self, StoreError> {
        if !file_size.is_multiple_of(OS_PAGE_SIZE) {
            return Err(StoreError::Config(format!(
                "mappedFileSizeCommitLog {file_size} must be a multiple of {OS_PAGE_SIZE} in direct write mode"
            )));
        }
        let uring =
            IoUring::new(URING_ENTRIES).map_err(|e| StoreError::io("io_uring_setup", &dir, e))?;
        let iov = libc::iovec {
            iov_base: ring.base() as *mut libc::c_void,
            iov_len: ring.size() as usize,
        };
        // SAFETY: the ring memory outlives the io_uring (we hold an Arc to it and drop the
        // uring first, field order), so registered addresses stay valid.
        let fixed = unsafe { uring.submitter().register_buffers(&[iov]) }.is_ok();
        if !fixed {
            tracing::warn!(
                "could not register the write ring with io_uring; using unregistered writes"
            );
        }
        let written = ring.written();
        Ok(DirectFlusher {
            ring,
            uring,
            fixed,
            fds: HashMap::new(),
            file_size,
            dir,
            in_flight: VecDeque::with_capacity(MAX_WRITES_IN_FLIGHT),
            next_seq: 0,
            next_pos: floor_page(written),
            tail_in_flight: false,
            unsynced: Vec::with_capacity(MAX_UNSYNCED_SEGMENTS),
            sync: None,
            synced: written,
            failure: None,
            last_sync_us: 0,
            syncs_completed: 0,
        })
    }

    /// End of the durable bytes.
    pub fn synced(&self) -> u64 {
        self.synced
    }

    /// Duration of the last fdatasync batch, microseconds.
    pub fn last_sync_us(&self) -> u64 {
        self.last_sync_us
    }

    /// Nothing is in flight.
    pub fn is_idle(&self) -> bool {
        self.in_flight.is_empty() && self.sync.is_none()
    }

    fn fd(&mut self, seg_start: u64) -> Result<i32, StoreError> {
        if let Some(f) = self.fds.get(&seg_start) {
            return Ok(f.as_raw_fd());
        }
        let path = self
            .dir
            .join(crate::mapped_file::offset_file_name(seg_start));
        let file = match OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::warn!(path = %path.display(), "filesystem refuses O_DIRECT; writing through the page cache");
                OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| StoreError::io("open", &path, e))?
            }
            Err(e) => return Err(StoreError::io("open O_DIRECT", &path, e)),
        };
        let fd = file.as_raw_fd();
        self.fds.insert(seg_start, file);
        Ok(fd)
    }

    /// Queues what can go now towards `max` (the published end of the log), and towards
    /// durability of `[.., durable_to)`. Returns whether anything is in flight (if not,
    /// there is nothing to do until more is appended or asked for).
    pub fn submit(&mut self, max: u64, durable_to: u64) -> bool {
        self.follow_restarted_ring();
        if self.failure.is_none() {
            if let Err(e) = self.submit_writes(max, durable_to) {
                self.failure = Some(e.to_string());
            }
        }
        if self.failure.is_none() && self.sync.is_none() {
            let written = self.ring.written();
            let forced = self.unsynced.len() >= MAX_UNSYNCED_SEGMENTS
                || self
                    .unsynced
                    .iter()
                    .any(|s| s + self.file_size <= floor_page(written));
            if (durable_to > self.synced && written >= durable_to.min(max)) || forced {
                if let Err(e) = self.submit_sync(written, None) {
                    self.failure = Some(e.to_string());
                }
            }
        }
        !self.is_idle()
    }

    /// An empty slave's ring moved to its master's offset ([`DirectRing::restart_empty_at`]):
    /// with nothing in flight, writing resumes there. In every other state complete pages
    /// below `written` are never ahead of `next_pos`.
    fn follow_restarted_ring(&mut self) {
        let written = self.ring.written();
        if self.is_idle() && floor_page(written) > self.next_pos {
            self.next_pos = floor_page(written);
            self.synced = self.synced.max(written);
            self.unsynced.clear();
        }
    }

    /// Queues writes of complete pages below `max`, and the padded last page when a
    /// durable request needs bytes in it.
    fn submit_writes(&mut self, max: u64, durable_to: u64) -> Result<(), StoreError> {
        while !self.tail_in_flight && self.in_flight.len() < MAX_WRITES_IN_FLIGHT {
            let pos = self.next_pos;
            let full_end = floor_page(max);
            let seg_start = pos - pos % self.file_size;
            let seg_end = seg_start + self.file_size;
            let ring_room = self.ring.size() - pos % self.ring.size();
            if !self.unsynced.contains(&seg_start)
                && !self.in_flight.iter().any(|w| w.segment == seg_start)
                && self.unsynced.len() + self.segments_in_flight() >= MAX_UNSYNCED_SEGMENTS
            {
                return Ok(()); // the next fdatasync batch frees the segments first
            }
            let tail_end = max.div_ceil(OS_PAGE_SIZE) * OS_PAGE_SIZE;
            let wants_tail = max > full_end && durable_to > full_end;
            if wants_tail
                && pos < tail_end
                && tail_end <= seg_end
                && tail_end - pos <= ring_room.min(MAX_CHUNK_BYTES)
            {
                // The rest, padded last page included, in one write; with nothing else
                // in flight the fdatasync follows right behind it: a small group (the
                // usual SYNC_FLUSH case) with plain syscalls on this thread, a larger one
                // linked behind the write in the io_uring.
                let chain = self.in_flight.is_empty() && self.sync.is_none();
                if chain && max - self.synced <= INLINE_SYNC_MAX_BYTES {
                    return self.write_and_sync_inline(pos, tail_end - pos, max);
                }
                self.push_write(pos, tail_end - pos, max, chain)?;
                self.tail_in_flight = true;
                self.next_pos = full_end;
                if chain {
                    self.submit_sync(max, Some(seg_start))?;
                }
                return Ok(());
            }
            if pos >= full_end {
                return Ok(());
            }
            let limit = full_end.min(seg_end).min(pos + ring_room);
            let len = (limit - pos).min(MAX_CHUNK_BYTES);
            let short_for_lack_of_bytes = len < MAX_CHUNK_BYTES && limit == full_end;
            if short_for_lack_of_bytes
                && self.in_flight.len() >= MIN_WRITES_IN_FLIGHT
                && durable_to <= pos
            {
                return Ok(()); // let it grow while the device is busy
            }
            self.push_write(pos, len, pos + len, false)?;
            self.next_pos = pos + len;
        }
        Ok(())
    }

    /// A small durable group with nothing in flight: pwrite + fdatasync on this thread.
    /// io_uring runs an fdatasync on a worker thread (it always blocks), and the hand-off
    /// there and back costs more than the syscalls themselves for a group of a few KiB
    /// (measured: p50 of one SYNC_FLUSH writer 200 → 160 µs; see the store bench).
    fn write_and_sync_inline(
        &mut self,
        pos: u64,
        len: u64,
        data_end: u64,
    ) -> Result<(), StoreError> {
        debug_assert!(self.in_flight.is_empty() && self.sync.is_none());
        let t0 = Instant::now();
        let segment = pos - pos % self.file_size;
        let fd = self.fd(segment)?;
        let path = self.dir.join(crate::mapped_file::offset_file_name(segment));
        loop {
            // SAFETY: the ring holds `[pos, pos + len)` without wrapping (checked by the
            // caller); the writer keeps off these bytes until `written` passes them; the
            // kernel only reads the buffer. Raw pointer, no slice: the writer may be
            // filling the padding after `data_end` at the same time.
            let n = unsafe {
                libc::pwrite(
                    fd,
                    self.ring.ptr_at(pos) as *const libc::c_void,
                    len as usize,
                    (pos - segment) as libc::off_t,
                )
            };
            if n == len as isize {
                break;
            }
            let e = std::io::Error::last_os_error();
            if n < 0 && e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            let e = if n < 0 {
                e
            } else {
                std::io::Error::other(format!("short write {n} of {len}"))
            };
            return Err(StoreError::io("pwrite O_DIRECT", &path, e));
        }
        if data_end > self.ring.written() {
            self.ring.publish_written(data_end);
        }
        if !self.unsynced.contains(&segment) {
            self.unsynced.push(segment);
        }
        for seg in &self.unsynced {
            if let Some(f) = self.fds.get(seg) {
                let path = self.dir.join(crate::mapped_file::offset_file_name(*seg));
                f.sync_data()
                    .map_err(|e| StoreError::io("fdatasync", &path, e))?;
            }
        }
        self.unsynced.clear();
        self.syncs_completed += 1;
        self.synced = self.synced.max(data_end);
        self.next_pos = floor_page(data_end);
        self.last_sync_us = t0.elapsed().as_micros() as u64;
        self.close_idle_segments();
        Ok(())
    }

    fn segments_in_flight(&self) -> usize {
        let mut n = 0;
        let mut last = None;
        for w in &self.in_flight {
            if last != Some(w.segment) && !self.unsynced.contains(&w.segment) {
                n += 1;
            }
            last = Some(w.segment);
        }
        n
    }

    /// Queues one O_DIRECT write of ring `[pos, pos + len)`, carrying log bytes up to
    /// `data_end`; `link` makes the next SQE wait for it.
    fn push_write(
        &mut self,
        pos: u64,
        len: u64,
        data_end: u64,
        link: bool,
    ) -> Result<(), StoreError> {
        let segment = pos - pos % self.file_size;
        debug_assert!(pos.is_multiple_of(OS_PAGE_SIZE) && len.is_multiple_of(OS_PAGE_SIZE));
        debug_assert!(pos + len <= segment + self.file_size);
        debug_assert!(pos % self.ring.size() + len <= self.ring.size());
        let fd = self.fd(segment)?;
        let ptr = self.ring.ptr_at(pos);
        let seq = self.next_seq;
        let entry = if self.fixed {
            opcode::WriteFixed::new(types::Fd(fd), ptr, len as u32, 0)
                .offset(pos - segment)
                .build()
        } else {
            opcode::Write::new(types::Fd(fd), ptr, len as u32)
                .offset(pos - segment)
                .build()
        };
        let entry = if link {
            entry.flags(squeue::Flags::IO_LINK)
        } else {
            entry
        };
        // SAFETY: the buffer is the ring (registered, alive as long as `self`); the ring
        // discipline keeps the writer off these bytes until `written` passes them, which
        // happens only after this write completes; the fd is owned by `self.fds` and
        // closed only with no operation on it in flight.
        unsafe { self.uring.submission().push(&entry.user_data(seq)) }
            .map_err(|_| StoreError::Config("io_uring SQ full".into()))?;
        debug_assert!(self
            .in_flight
            .back()
            .is_none_or(|w| w.pos + u64::from(w.len) <= pos));
        self.in_flight.push_back(InFlight {
            seq,
            segment,
            pos,
            data_end,
            len: len as u32,
            done: false,
        });
        self.next_seq += 1;
        Ok(())
    }

    /// Queues one fdatasync per segment with unsynced completed writes (plus `linked`,
    /// the segment of the write just queued with IO_LINK), making `[.., covers)` durable
    /// once they all complete.
    fn submit_sync(&mut self, covers: u64, linked: Option<u64>) -> Result<(), StoreError> {
        debug_assert!(self.sync.is_none());
        let mut segments: Vec<u64> = std::mem::take(&mut self.unsynced);
        // The linked one first: its SQE must come right after the linked write.
        if let Some(l) = linked {
            segments.retain(|s| *s != l);
            segments.insert(0, l);
        }
        if segments.is_empty() {
            self.synced = self.synced.max(covers);
            return Ok(());
        }
        for &seg in &segments {
            let fd = self.fd(seg)?;
            let fsync = opcode::Fsync::new(types::Fd(fd))
                .flags(types::FsyncFlags::DATASYNC)
                .build()
                .user_data(FSYNC_TAG);
            // SAFETY: the fd is owned by `self.fds` and stays open until this batch has
            // completed (`close_idle_segments` skips segments of a batch in flight).
            unsafe { self.uring.submission().push(&fsync) }
                .map_err(|_| StoreError::Config("io_uring SQ full".into()))?;
        }
        self.sync = Some(SyncBatch {
            covers,
            pending: segments.len(),
            segments,
            started: Instant::now(),
        });
        Ok(())
    }

    /// A failure is waiting to be reported by [`reap`](Self::reap).
    pub fn has_failure(&self) -> bool {
        self.failure.is_some()
    }

    /// Waits for at least one completion (if anything is in flight) and processes all
    /// that arrived. Returns a failure once every operation has completed after it; the
    /// flusher is then idle and starts again from `written` when next asked. Progress
    /// shows in the ring's `written` and in [`synced`](Self::synced).
    pub fn reap(&mut self) -> Option<StoreError> {
        if self.is_idle() {
            return self.finish_failure();
        }
        if let Err(e) = self.uring.submit_and_wait(1) {
            match e.raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::EAGAIN) | Some(libc::EBUSY) => {
                    std::thread::sleep(Duration::from_micros(100))
                }
                _ => {
                    // Unusable ring: give the operations up. They still point into the
                    // ring and at open fds (both outlive them), `written` and `synced`
                    // do not pass them, and the next flush writes the same bytes again.
                    tracing::error!(error = %e, "io_uring_enter failed with direct writes in flight");
                    self.in_flight.clear();
                    self.sync = None;
                    self.failure
                        .get_or_insert_with(|| format!("io_uring_enter: {e}"));
                }
            }
            return self.finish_failure();
        }
        let mut cq = self.uring.completion();
        cq.sync();
        for cqe in &mut cq {
            let res = cqe.result();
            if cqe.user_data() == FSYNC_TAG {
                let Some(batch) = self.sync.as_mut() else {
                    continue; // given up after an io_uring_enter failure
                };
                batch.pending -= 1;
                if res < 0 {
                    let e = std::io::Error::from_raw_os_error(-res);
                    self.failure
                        .get_or_insert_with(|| format!("fdatasync: {e}"));
                }
                continue;
            }
            let front = self.in_flight.front().map_or(u64::MAX, |w| w.seq);
            let Some(w) = cqe
                .user_data()
                .checked_sub(front)
                .and_then(|i| self.in_flight.get_mut(i as usize))
            else {
                continue; // given up after an io_uring_enter failure
            };
            w.done = true;
            if res < 0 || res as u32 != w.len {
                let what = if res < 0 {
                    format!("write: {}", std::io::Error::from_raw_os_error(-res))
                } else {
                    format!("short write {res} of {}", w.len)
                };
                self.failure.get_or_insert(what);
            }
        }
        drop(cq);
        self.retire_writes();
        if self.sync.as_ref().is_some_and(|b| b.pending == 0) {
            let batch = self.sync.take().expect("batch exists");
            self.last_sync_us = batch.started.elapsed().as_micros() as u64;
            if self.failure.is_none() {
                debug_assert!(batch.covers <= self.ring.written());
                self.synced = self.synced.max(batch.covers);
                self.syncs_completed += 1;
            } else {
                // Not known to be durable: sync them again next time.
                for s in batch.segments {
                    if !self.unsynced.contains(&s) {
                        self.unsynced.push(s);
                    }
                }
            }
            self.close_idle_segments();
        }
        self.finish_failure()
    }

    /// After a failure, once nothing is in flight: report it and start over from
    /// `written` on the next request.
    fn finish_failure(&mut self) -> Option<StoreError> {
        if !self.is_idle() {
            return None;
        }
        let e = self.failure.take()?;
        self.next_pos = floor_page(self.ring.written());
        self.tail_in_flight = false;
        Some(StoreError::io(
            "direct write",
            &self.dir,
            std::io::Error::other(e),
        ))
    }

    /// Pops the completed writes at the front and publishes how far the files now go.
    /// After a failure nothing more is published: `written` stays put and the writes
    /// from there are submitted again.
    fn retire_writes(&mut self) {
        let mut written = None;
        while self.in_flight.front().is_some_and(|w| w.done) {
            let w = self.in_flight.pop_front().expect("front exists");
            if !self.unsynced.contains(&w.segment)
                && !self
                    .sync
                    .as_ref()
                    .is_some_and(|b| b.segments.contains(&w.segment) && w.data_end <= b.covers)
            {
                self.unsynced.push(w.segment);
            }
            if self.tail_in_flight && self.in_flight.is_empty() {
                self.tail_in_flight = false;
            }
            written = Some(w.data_end);
        }
        if let (Some(end), None) = (written, &self.failure) {
            if end > self.ring.written() {
                self.ring.publish_written(end);
            }
        }
    }

    /// Closes the descriptors of segments nothing will touch again: complete, synced, and
    /// with no operation in flight.
    fn close_idle_segments(&mut self) {
        let current = self.next_pos - self.next_pos % self.file_size;
        let keep = |s: &u64| {
            *s >= current
                || self.unsynced.contains(s)
                || self.in_flight.iter().any(|w| w.segment == *s)
                || self.sync.as_ref().is_some_and(|b| b.segments.contains(s))
        };
        let gone: Vec<u64> = self.fds.keys().copied().filter(|s| !keep(s)).collect();
        for s in gone {
            self.fds.remove(&s);
        }
    }
}

impl Drop for DirectFlusher {
    fn drop(&mut self) {
        // Let the kernel finish with the ring and the fds before they go.
        while !self.is_idle() {
            if let Some(e) = self.reap() {
                tracing::error!(error = %e, "direct write failed during shutdown");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapped_file::{offset_file_name, MapMode, Prepare};
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::AtomicBool;

    /// Deterministic bytes for global offset `i`.
    fn byte_at(i: u64) -> u8 {
        (i.wrapping_mul(2654435761) >> 13) as u8
    }

    fn segment(dir: &std::path::Path, start: u64, size: u64) -> MappedFile {
        MappedFile::create(
            &dir.join(offset_file_name(start)),
            start,
            size,
            Prepare::Reserve,
            MapMode::ReadOnly,
        )
        .unwrap()
    }

    /// The writer parked for ring room returns only once the flusher published enough
    /// `written`, and does return (woken by the publish, or at worst by its re-check).
    #[test]
    fn writer_waiting_for_ring_room_resumes_after_written_moves() {
        let ring = Arc::new(DirectRing::new(16 * OS_PAGE_SIZE as usize).unwrap());
        ring.start_at(0);
        let want = ring.room_end() + 3 * OS_PAGE_SIZE;
        let published = Arc::new(AtomicBool::new(false));
        let (r, p) = (Arc::clone(&ring), Arc::clone(&published));
        let writer = std::thread::spawn(move || {
            let mut nudges = 0;
            let waited = r.wait_room(want, || nudges += 1);
            (waited, nudges, p.load(Ordering::SeqCst), r.room_end())
        });
        // Whenever the writer gets here, it must still be waiting: nothing moved yet.
        std::thread::sleep(Duration::from_millis(20));
        published.store(true, Ordering::SeqCst);
        ring.publish_written(3 * OS_PAGE_SIZE + 100);
        let (waited, nudges, saw_publish, room_end) = writer.join().unwrap();
        assert!(waited);
        assert!(nudges >= 1, "the flusher is nudged when room is short");
        assert!(saw_publish, "returned before any room was made");
        assert!(room_end >= want);
        // Room already there: no wait, no nudge.
        assert!(!ring.wait_room(room_end, || panic!("nudged without need")));
    }

    /// Streams a log through a small ring (it wraps many times) into small segments (the
    /// writes cross several), with durable requests now and then, checking on every
    /// step: `written` never passes the log end and never goes back, nothing is durable
    /// that is not written, `synced` moves only when an fdatasync completes, and the
    /// writer never gets ahead of the ring discipline. At the end the files hold exactly
    /// the log.
    #[test]
    fn streamed_writes_land_in_order_and_synced_follows_fdatasync() {
        let dir = crate::test_util::temp_dir("direct_stream");
        let file_size = 256 * 1024;
        let total = 5 * file_size + 12_345;
        let segments: Vec<MappedFile> = (0..6)
            .map(|i| segment(&dir, i * file_size, file_size))
            .collect();
        let ring = Arc::new(DirectRing::new(64 * 1024).unwrap());
        ring.start_at(0);
        let mut flusher = DirectFlusher::new(Arc::clone(&ring), dir.clone(), file_size).unwrap();
        let mut max = 0u64;
        let mut durable_to = 0u64;
        let mut step = 0u64;
        let mut last_written = 0;
        let mut buf = Vec::new();
        while flusher.synced() < total {
            step += 1;
            assert!(step < 1_000_000, "no progress");
            // Append what the ring allows, in uneven pieces (ring discipline).
            let piece = (1 + step * 7919 % 9000).min(total - max);
            if piece > 0 && max + piece <= ring.room_end() {
                buf.clear();
                buf.extend((max..max + piece).map(byte_at));
                ring.write(max, &buf);
                max += piece;
                ring.zero_to_page_end(max);
            }
            if step.is_multiple_of(5) || max == total {
                durable_to = max;
            }
            let (synced_before, syncs_before) = (flusher.synced(), flusher.syncs_completed);
            if flusher.submit(max, durable_to) {
                assert!(flusher.reap().is_none(), "I/O failed");
            }
            let written = ring.written();
            assert!(written <= max && written >= last_written);
            last_written = written;
            assert!(flusher.synced() <= written);
            if flusher.synced() > synced_before {
                assert!(
                    flusher.syncs_completed > syncs_before,
                    "synced moved without fdatasync"
                );
            }
            // Two writes in flight never share a page.
            let spans: Vec<(u64, u64)> = flusher
                .in_flight
                .iter()
                .map(|w| (w.pos, w.pos + u64::from(w.len)))
                .collect();
            for pair in spans.windows(2) {
                assert!(
                    pair[0].1 <= pair[1].0,
                    "in-flight writes overlap: {spans:?}"
                );
            }
        }
        drop(flusher);
        for seg in &segments {
            let start = seg.from_offset();
            let end = total.min(start + file_size);
            if end <= start {
                continue;
            }
            let mut got = vec![0u8; (end - start) as usize];
            seg.file().read_exact_at(&mut got, 0).unwrap();
            let want: Vec<u8> = (start..end).map(byte_at).collect();
            assert!(got == want, "segment {start} differs from the log");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A write that fails (its segment file is missing) is reported once everything in
    /// flight has completed; `written` and `synced` stay put, and the next request
    /// writes the same bytes again.
    #[test]
    fn failed_write_is_reported_and_retried_from_written() {
        let dir = crate::test_util::temp_dir("direct_fail");
        let file_size = 64 * 1024;
        let _first = segment(&dir, 0, file_size);
        let ring = Arc::new(DirectRing::new(64 * 1024).unwrap());
        ring.start_at(0);
        let mut flusher = DirectFlusher::new(Arc::clone(&ring), dir.clone(), file_size).unwrap();
        let data: Vec<u8> = (0..file_size + 5000).map(byte_at).collect();
        ring.write(0, &data[..file_size as usize]);
        // The first segment streams out.
        while ring.written() < file_size {
            assert!(flusher.submit(file_size, 0));
            assert!(flusher.reap().is_none());
        }
        ring.write(file_size, &data[file_size as usize..]);
        let max = data.len() as u64;
        ring.zero_to_page_end(max);
        // The second segment's file does not exist: the durable request fails.
        let mut failure = None;
        for _ in 0..1000 {
            flusher.submit(max, max);
            failure = flusher.reap();
            if failure.is_some() {
                break;
            }
        }
        let e = failure.expect("the failed write is reported");
        assert!(e.to_string().contains("direct write"), "{e}");
        assert!(flusher.is_idle());
        assert!(ring.written() <= file_size && flusher.synced() <= file_size);
        // With the file there, the same request succeeds.
        let second = segment(&dir, file_size, file_size);
        for _ in 0..1000 {
            if flusher.synced() >= max {
                break;
            }
            if flusher.submit(max, max) {
                assert!(flusher.reap().is_none());
            }
        }
        assert_eq!(flusher.synced(), max);
        let mut got = vec![0u8; 5000];
        second.file().read_exact_at(&mut got, 0).unwrap();
        assert!(got == data[file_size as usize..]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A pipe whose buffer holds one page, so a larger blocking write parks the sender.
    fn one_page_pipe() -> (File, File) {
        let mut fds = [0i32; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 returns.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: the descriptors were just returned to us and are owned by the Files.
        let (r, w) = unsafe {
            use std::os::fd::FromRawFd;
            (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1]))
        };
        // SAFETY: plain fcntl on a pipe we own.
        unsafe {
            libc::fcntl(
                w.as_raw_fd(),
                libc::F_SETPIPE_SZ,
                OS_PAGE_SIZE as libc::c_int,
            )
        };
        (r, w)
    }

    fn ring_holding(pages: u64, upto_pages: u64) -> Arc<DirectRing> {
        let page = OS_PAGE_SIZE;
        let ring = Arc::new(DirectRing::new((pages * page) as usize).unwrap());
        ring.start_at(0);
        let mut at = 0;
        while at < upto_pages * page {
            let end = (at + page).min(upto_pages * page);
            // The least `written` that lets the writer reach `end` (ring discipline).
            ring.publish_written(end.saturating_sub(pages * page));
            let data: Vec<u8> = (at..end).map(byte_at).collect();
            ring.write(at, &data);
            at = end;
        }
        ring
    }

    /// While the HA sender writes from the ring, the flusher may move `written` past the
    /// pinned bytes, but the writer's room stops short of them until the write returns;
    /// the peer gets exactly the ring's bytes.
    #[test]
    fn a_pinned_send_keeps_the_writer_off_its_bytes_until_the_write_returns() {
        let page = OS_PAGE_SIZE;
        let ring = ring_holding(16, 12);
        ring.publish_written(10 * page);
        let (mut rx, tx) = one_page_pipe();
        let sender = {
            let r = Arc::clone(&ring);
            std::thread::spawn(move || r.send_pinned(tx.as_raw_fd(), 10 * page, 2 * page as usize))
        };
        // The pipe takes one page; the sender blocks in writev holding its pin.
        while ring.ha_pin.load(Ordering::SeqCst) == NO_PIN {
            std::thread::yield_now();
        }
        ring.publish_written(14 * page);
        assert_eq!(
            ring.room_end(),
            26 * page,
            "the pin bounds the room, not `written`"
        );
        let writer = {
            let r = Arc::clone(&ring);
            std::thread::spawn(move || {
                r.wait_room(28 * page, || {});
                r.ha_pin.load(Ordering::SeqCst)
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            !writer.is_finished(),
            "the writer got room over pinned bytes"
        );
        let mut got = vec![0u8; 2 * page as usize];
        std::io::Read::read_exact(&mut rx, &mut got).unwrap();
        let sent = sender
            .join()
            .unwrap()
            .expect("bytes above written come from the ring");
        assert_eq!(sent.unwrap(), 2 * page as usize);
        assert_eq!(
            writer.join().unwrap(),
            NO_PIN,
            "room came only after the unpin"
        );
        assert!(got.iter().zip(10 * page..).all(|(b, i)| *b == byte_at(i)));
        assert_eq!(ring.room_end(), 30 * page);
    }

    /// A send may cross the ring's end (two iovecs); bytes below `floor_page(written)` are
    /// refused, since the writer may already have come round to them.
    #[test]
    fn pinned_sends_cross_the_ring_end_and_refuse_bytes_the_writer_may_reuse() {
        let page = OS_PAGE_SIZE;
        let ring = ring_holding(16, 20);
        assert_eq!(ring.written(), 4 * page);
        let (mut rx, tx) = one_page_pipe();
        // SAFETY: plain fcntl on a pipe we own (room for the whole send).
        unsafe {
            libc::fcntl(
                tx.as_raw_fd(),
                libc::F_SETPIPE_SZ,
                (4 * page) as libc::c_int,
            )
        };
        let sent = ring
            .send_pinned(tx.as_raw_fd(), 15 * page, 2 * page as usize)
            .unwrap();
        assert_eq!(sent.unwrap(), 2 * page as usize);
        let mut got = vec![0u8; 2 * page as usize];
        std::io::Read::read_exact(&mut rx, &mut got).unwrap();
        assert!(got.iter().zip(15 * page..).all(|(b, i)| *b == byte_at(i)));
        assert!(ring.send_pinned(tx.as_raw_fd(), 3 * page, 100).is_none());
        assert_eq!(
            ring.ha_pin.load(Ordering::SeqCst),
            NO_PIN,
            "a refused send leaves no pin"
        );
    }
}
