//! Direct write mode (`ringmq.writeMode=direct`): the write ring and its io_uring flusher.
//!
//! The append stage copies records into an anonymous, page-aligned ring (byte `o` of the
//! CommitLog lives at `o % ring_size`) instead of the mapped segment. The flush stage writes
//! 4 KiB-aligned chunks of the ring to the segment files with O_DIRECT through io_uring
//! (WRITE_FIXED from the ring registered as one fixed buffer, linked to FSYNC DATASYNC), so
//! tail bytes never go through the page cache. Readers get bytes that are not yet on disk
//! copied from the ring (`CommitLog::read`).
//!
//! Ring discipline: the writer may write global position `p` only while
//! `p < floor_page(flushed) + ring_size`, so the bytes of `[floor_page(flushed), max)` are
//! always intact in the ring. Older bytes stay in the ring too until the writer comes
//! round again: before each write the writer publishes `reserved` (the end of what it is
//! about to write), and a byte `g >= base` is intact while `g + ring_size >= reserved`.
//! Readers (consumers and, above all, the reput stage, which reads every record right
//! after its flush) therefore copy recent bytes from the ring and never go to the disk for
//! them; a reader re-reads from the file only the prefix the writer may have overwritten
//! during its copy, and the discipline puts that prefix below `floor_page(flushed)`, i.e.
//! on disk and never rewritten.

use crate::error::StoreError;
use crate::mapped_file::{MappedFile, OS_PAGE_SIZE};
use io_uring::{opcode, types, IoUring};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

/// Largest single write submitted (bounds one SQE's transfer).
const MAX_CHUNK_BYTES: u64 = 1024 * 1024;
/// Submission queue depth of the flusher's ring (bounds one round of writes).
const URING_ENTRIES: u32 = 64;

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
}

// SAFETY: plain anonymous memory. The append stage is the only writer and writes only ring
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
        })
    }

    /// Positions an empty ring at global `offset` (startup, before any reader or write).
    pub(crate) fn start_at(&self, offset: u64) {
        self.base.store(offset, Ordering::Relaxed);
        self.reserved.store(offset, Ordering::Release);
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

/// The flush stage's direct-mode writer: owns the io_uring and the O_DIRECT descriptors.
pub(crate) struct DirectFlusher {
    ring: Arc<DirectRing>,
    uring: IoUring,
    fixed: bool,
    fds: HashMap<u64, File>,
    file_size: u64,
    dir: std::path::PathBuf,
}

impl DirectFlusher {
    pub fn new(
        ring: Arc<DirectRing>,
        dir: std::path::PathBuf,
        file_size: u64,
    ) -> Result<Self, StoreError> {
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
        Ok(DirectFlusher {
            ring,
            uring,
            fixed,
            fds: HashMap::new(),
            file_size,
            dir,
        })
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

    /// Writes `[floor_page(from), to)` (page-padded) from the ring and fdatasyncs the
    /// touched segments.
    pub fn flush(&mut self, from: u64, to: u64) -> Result<(), StoreError> {
        let mut pos = floor_page(from);
        let end = to.div_ceil(OS_PAGE_SIZE) * OS_PAGE_SIZE;
        while pos < end {
            // One round: up to URING_ENTRIES-1 writes, then fsyncs of touched files.
            let mut ops: Vec<(i32, u64, u64, u64)> = Vec::new(); // fd, global, file_pos, len
            let mut touched: Vec<i32> = Vec::new();
            while pos < end && ops.len() + touched.len() + 2 < URING_ENTRIES as usize {
                let seg_start = pos - pos % self.file_size;
                let seg_end = seg_start + self.file_size;
                let ring_room = self.ring.size() - pos % self.ring.size();
                let len = (end.min(seg_end) - pos).min(ring_room).min(MAX_CHUNK_BYTES);
                let fd = self.fd(seg_start)?;
                ops.push((fd, pos, pos - seg_start, len));
                if !touched.contains(&fd) {
                    touched.push(fd);
                }
                pos += len;
            }
            let total = ops.len() + touched.len();
            {
                let mut sq = self.uring.submission();
                for &fd in &touched {
                    let writes: Vec<_> = ops.iter().filter(|o| o.0 == fd).collect();
                    for (fd, global, file_pos, len) in writes {
                        let ptr = self.ring.ptr_at(*global);
                        let entry = if self.fixed {
                            opcode::WriteFixed::new(types::Fd(*fd), ptr, *len as u32, 0)
                                .offset(*file_pos)
                                .build()
                        } else {
                            opcode::Write::new(types::Fd(*fd), ptr, *len as u32)
                                .offset(*file_pos)
                                .build()
                        };
                        // Link each write to the next op so the fsync runs after them all.
                        let entry = entry
                            .flags(io_uring::squeue::Flags::IO_LINK)
                            .user_data(*len);
                        // SAFETY: the buffer is the registered ring, alive for the call; fd is
                        // owned by `self.fds`; we wait for all completions before returning.
                        unsafe { sq.push(&entry) }
                            .map_err(|_| StoreError::Config("io_uring SQ full".into()))?;
                    }
                    let fsync = opcode::Fsync::new(types::Fd(fd))
                        .flags(types::FsyncFlags::DATASYNC)
                        .build()
                        .user_data(u64::MAX);
                    // SAFETY: as above.
                    unsafe { sq.push(&fsync) }
                        .map_err(|_| StoreError::Config("io_uring SQ full".into()))?;
                }
            }
            self.uring
                .submit_and_wait(total)
                .map_err(|e| StoreError::io("io_uring_enter", &self.dir, e))?;
            let mut first_err: Option<String> = None;
            for cqe in self.uring.completion() {
                let res = cqe.result();
                let want = cqe.user_data();
                let ok = if want == u64::MAX {
                    res >= 0
                } else {
                    res >= 0 && res as u64 == want
                };
                if !ok && first_err.is_none() {
                    first_err = Some(if res < 0 {
                        std::io::Error::from_raw_os_error(-res).to_string()
                    } else {
                        format!("short write {res} of {want}")
                    });
                }
            }
            if let Some(e) = first_err {
                return Err(StoreError::io(
                    "direct write",
                    &self.dir,
                    std::io::Error::other(e),
                ));
            }
        }
        // Segments before the one holding the end are complete: close their descriptors
        // only now, after every submitted write that used them has completed.
        let last_byte = end.saturating_sub(1);
        let last_seg = last_byte - last_byte % self.file_size;
        let file_size = self.file_size;
        self.fds.retain(|k, _| *k + file_size >= last_seg);
        Ok(())
    }
}
