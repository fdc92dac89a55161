//! `MappedFile`: one fixed-size store file (CommitLog segment, ConsumeQueue file, IndexFile)
//! mapped shared into memory, with its published positions.
//!
//! Concurrency contract: exactly one stage thread writes a file (the append stage for the
//! CommitLog, the reput stage for ConsumeQueue/index files), only at or beyond `wrote`,
//! and publishes new bytes by storing `wrote` with Release. Readers load `wrote` with
//! Acquire and read only below it; bytes below `wrote` never change afterwards (recovery
//! runs before any reader exists). A file is unmapped when its last `Arc` drops, so a
//! `Bytes` handed to the network layer keeps its segment mapped even after retention
//! unlinked the file.
//!
//! Page-cache granularity (measured on 6.18/ext4, which caches regular files in large
//! folios, up to 2 MiB): a store through a shared mapping dirties the whole folio behind
//! the page, and writeback then writes the whole folio. Appending ~110 KiB per msync into
//! 2 MiB folios wrote 20x the appended bytes to the device; MADV_NOHUGEPAGE does not change
//! the folio size, only how it is mapped. Buffered writes (pwrite) mark only the written
//! 4 KiB blocks dirty and writeback writes only those (1.04x, block-trace measured), so
//! CommitLog segments are mapped read-only ([`MapMode::ReadOnly`]) and written with pwrite.
//! Files that are written through their mapping (ConsumeQueue, index) are advised random,
//! which keeps their page cache in 4 KiB folios.

use crate::error::StoreError;
use bytes::Bytes;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Page size used for flush thresholds and alignment (RocketMQ's `OS_PAGE_SIZE`).
pub const OS_PAGE_SIZE: u64 = 4096;

/// Upstream's `MappedFile.isAbleToFlush`, for the CommitLog and the ConsumeQueues alike:
/// bytes `flushed..wrote` are due when some are unflushed and either `least_pages` is 0,
/// the file is done with (full, or the writes moved on to the next segment), or the writes
/// crossed at least `least_pages` page boundaries since the last flush.
pub(crate) fn flush_due(wrote: u64, flushed: u64, least_pages: u64, file_done: bool) -> bool {
    wrote > flushed
        && (least_pages == 0
            || file_done
            || wrote / OS_PAGE_SIZE - flushed / OS_PAGE_SIZE >= least_pages)
}

/// Most buffers one pwritev takes (Linux's IOV_MAX).
pub const IOV_MAX: usize = 1024;

/// File name of a file starting at `offset`: 20 zero-padded decimal digits.
pub fn offset_file_name(offset: u64) -> String {
    format!("{offset:020}")
}

/// Parses a 20-digit offset file name.
pub fn parse_offset_file_name(name: &str) -> Option<u64> {
    if name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()) {
        name.parse().ok()
    } else {
        None
    }
}

/// A mapped store file.
pub struct MappedFile {
    path: PathBuf,
    file: File,
    from_offset: u64,
    size: u64,
    ptr: NonNull<u8>,
    /// Bytes written and visible to readers (position inside the file).
    wrote: AtomicU64,
    /// Bytes known to be on disk (position inside the file).
    flushed: AtomicU64,
    /// Unlinked by retention; further reads are refused.
    removed: AtomicBool,
    mode: MapMode,
}

// SAFETY: the mapping is plain shared memory; all mutation goes through `write_at`, whose
// single-writer contract (module doc) keeps readers on published, immutable bytes.
unsafe impl Send for MappedFile {}
// SAFETY: see `Send`; positions are atomics.
unsafe impl Sync for MappedFile {}

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedFile")
            .field("path", &self.path)
            .field("from_offset", &self.from_offset)
            .field("wrote", &self.wrote.load(Ordering::Relaxed))
            .finish()
    }
}

/// How a file's mapping may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapMode {
    /// Read-only mapping; the file is written with pwrite ([`MappedFile::write_through`]).
    /// CommitLog segments: a store through a shared mapping dirties the whole page-cache
    /// folio behind the page (up to 2 MiB on ext4 since 6.16), and the next sync writes
    /// all of it back; mapping them read-only makes such a store impossible (a fault).
    ReadOnly,
    /// Read-write mapping, written with [`MappedFile::write_at`] (ConsumeQueue, index: small
    /// writes, advised random so their page cache stays in 4 KiB pages).
    ReadWrite,
}

fn map(file: &File, path: &Path, size: u64, mode: MapMode) -> Result<NonNull<u8>, StoreError> {
    let prot = match mode {
        MapMode::ReadOnly => libc::PROT_READ,
        MapMode::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
    };
    // SAFETY: mapping a file we opened read-write, of the length we sized it to; the result
    // is checked against MAP_FAILED before use.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size as usize,
            prot,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(StoreError::io(
            "mmap",
            path,
            std::io::Error::last_os_error(),
        ));
    }
    NonNull::new(ptr as *mut u8)
        .ok_or_else(|| StoreError::io("mmap", path, std::io::Error::other("null mapping")))
}

/// Reserves disk blocks for `[0, size)` so that later writes cannot hit ENOSPC (through a
/// mapping that would be a SIGBUS, not an error).
fn reserve(file: &File, path: &Path, size: u64) -> Result<(), StoreError> {
    // SAFETY: plain syscall on an owned fd.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, size as libc::off_t) };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EOPNOTSUPP) {
        // Filesystems without fallocate: fall back to a sparse file (no reservation).
        file.set_len(size)
            .map_err(|e| StoreError::io("set_len", path, e))
    } else {
        Err(StoreError::io("fallocate", path, err))
    }
}

/// How [`MappedFile::create`] prepares a new file's blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prepare {
    /// Reserve the blocks (fallocate) and nothing more: no page is faulted in or dirtied,
    /// so creating a segment costs a few milliseconds and writes nothing to the device.
    Reserve,
    /// `warmMapedFileEnable`: also write zeros over the whole file (O_DIRECT, so the page
    /// cache is untouched) and sync them. Costs one file size of device writes up front; in
    /// return later syncs overwrite already-written blocks instead of converting unwritten
    /// extents, so each SYNC_FLUSH fdatasync commits no journal metadata.
    Warm,
}

/// Chunk of one zero-filling write (`Prepare::Warm`).
const WARM_CHUNK_BYTES: usize = 1024 * 1024;

/// A page-aligned, zeroed heap buffer (O_DIRECT needs aligned memory).
struct AlignedZeros {
    ptr: NonNull<u8>,
    layout: std::alloc::Layout,
}

impl AlignedZeros {
    fn new(len: usize) -> Self {
        let layout = std::alloc::Layout::from_size_align(len, OS_PAGE_SIZE as usize)
            .expect("page-aligned layout");
        // SAFETY: the layout has a non-zero size; a null result is handled below.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedZeros { ptr, layout }
    }
    fn as_slice(&self) -> &[u8] {
        // SAFETY: `layout.size()` initialised (zeroed) bytes owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedZeros {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// Writes zeros over `[0, size)` and syncs them (`Prepare::Warm`). O_DIRECT keeps the
/// zeros out of the page cache (buffered zeros would sit there as large folios the
/// append path then re-dirties); file systems without O_DIRECT get buffered writes whose
/// pages are dropped after the sync.
fn warm(file: &File, path: &Path, size: u64) -> Result<(), StoreError> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let zeros = AlignedZeros::new(WARM_CHUNK_BYTES);
    let direct = match OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(f) => Some(f),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => None,
        Err(e) => return Err(StoreError::io("open O_DIRECT", path, e)),
    };
    let target = direct.as_ref().unwrap_or(file);
    let mut pos = 0u64;
    while pos < size {
        let n = (size - pos).min(WARM_CHUNK_BYTES as u64) as usize;
        target
            .write_all_at(&zeros.as_slice()[..n], pos)
            .map_err(|e| StoreError::io("warm (write zeros)", path, e))?;
        pos += n as u64;
    }
    target
        .sync_data()
        .map_err(|e| StoreError::io("warm (fdatasync)", path, e))?;
    if direct.is_none() {
        // SAFETY: plain syscall on an owned fd; failure only leaves clean pages cached.
        unsafe {
            libc::posix_fadvise(
                file.as_raw_fd(),
                0,
                size as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
            )
        };
    }
    Ok(())
}

impl MappedFile {
    /// Creates (or reuses, if already present with the right size) a file of `size` bytes
    /// at `path`, reserves its blocks, prepares them as `prepare` says and maps it.
    ///
    /// Nothing is faulted in: a CommitLog segment is appended to with `write_through`
    /// (pwrite), so its pages enter the page cache as they are written, and a
    /// ConsumeQueue/index file is advised random by its owner before the first write.
    pub fn create(
        path: &Path,
        from_offset: u64,
        size: u64,
        prepare: Prepare,
        mode: MapMode,
    ) -> Result<Self, StoreError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| StoreError::io("create", path, e))?;
        let prepared = reserve(&file, path, size).and_then(|()| match prepare {
            Prepare::Reserve => Ok(()),
            Prepare::Warm => warm(&file, path, size),
        });
        if let Err(e) = prepared {
            drop(file);
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
        let ptr = map(&file, path, size, mode)?;
        Ok(MappedFile {
            path: path.to_path_buf(),
            file,
            from_offset,
            size,
            ptr,
            wrote: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
            removed: AtomicBool::new(false),
            mode,
        })
    }

    /// Opens an existing file that must be exactly `size` bytes; positions start at the end
    /// (recovery corrects them).
    pub fn open(
        path: &Path,
        from_offset: u64,
        size: u64,
        mode: MapMode,
    ) -> Result<Self, StoreError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| StoreError::io("open", path, e))?;
        let len = file
            .metadata()
            .map_err(|e| StoreError::io("stat", path, e))?
            .len();
        if len != size {
            return Err(StoreError::BadSegmentSize {
                path: path.to_path_buf(),
                expected_bytes: size,
                actual_bytes: len,
            });
        }
        let ptr = map(&file, path, size, mode)?;
        Ok(MappedFile {
            path: path.to_path_buf(),
            file,
            from_offset,
            size,
            ptr,
            wrote: AtomicU64::new(size),
            flushed: AtomicU64::new(size),
            removed: AtomicBool::new(false),
            mode,
        })
    }

    /// Waits for direct I/O in flight on this file (ext4/xfs drain it before fallocate).
    /// The call itself changes nothing: the range is already allocated.
    pub fn wait_direct_io(&self) {
        // SAFETY: plain syscall on our own fd; KEEP_SIZE over an allocated range is a no-op.
        let _ = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_KEEP_SIZE,
                0,
                self.size as libc::off_t,
            )
        };
    }

    /// `MADV_RANDOM` on the whole mapping: a fault reads or allocates exactly one 4 KiB
    /// page, with no read-around. Two uses:
    /// - direct mode's active segment, so a read of flushed bytes never pulls in a page
    ///   O_DIRECT is still rewriting;
    /// - files written through the mapping (ConsumeQueue, index): read-around builds the
    ///   page cache out of large folios (up to 2 MiB on ext4 since 6.16), a write fault
    ///   dirties a whole folio and the next flush writes all of it back; 4 KiB pages keep
    ///   a flush to the pages that changed.
    pub fn advise_random(&self) {
        self.advise(libc::MADV_RANDOM);
    }

    /// Back to default read-ahead (a direct-mode segment once it is complete on disk:
    /// nothing rewrites its pages any more, and cold reads of it want read-around).
    pub fn advise_normal(&self) {
        self.advise(libc::MADV_NORMAL);
    }

    fn advise(&self, advice: libc::c_int) {
        // SAFETY: advising our own live mapping; failure only loses the hint.
        unsafe {
            libc::madvise(
                self.ptr.as_ptr() as *mut libc::c_void,
                self.size as usize,
                advice,
            );
        }
    }

    /// Starts reading `[pos, pos+len)` into the page cache in large requests, so the page
    /// faults of a following sequential read through a random-advised mapping find the
    /// pages instead of reading them one by one. The range is exactly what is asked for
    /// (no read-ahead past it). Failure only loses the hint.
    pub fn will_need(&self, pos: u64, len: u64) {
        let start = pos / OS_PAGE_SIZE * OS_PAGE_SIZE;
        let end = (pos + len).min(self.size);
        if end > start {
            // SAFETY: plain syscall on our own fd; offsets inside the file.
            unsafe {
                libc::posix_fadvise(
                    self.file.as_raw_fd(),
                    start as libc::off_t,
                    (end - start) as libc::off_t,
                    libc::POSIX_FADV_WILLNEED,
                )
            };
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn file(&self) -> &File {
        &self.file
    }
    /// Global offset of the first byte.
    pub fn from_offset(&self) -> u64 {
        self.from_offset
    }
    pub fn size(&self) -> u64 {
        self.size
    }
    /// Published write position (Acquire).
    pub fn wrote(&self) -> u64 {
        self.wrote.load(Ordering::Acquire)
    }
    /// Publishes a new write position (writer only).
    pub fn set_wrote(&self, pos: u64) {
        self.wrote.store(pos.min(self.size), Ordering::Release);
    }
    pub fn flushed(&self) -> u64 {
        self.flushed.load(Ordering::Acquire)
    }
    pub fn set_flushed(&self, pos: u64) {
        self.flushed.store(pos.min(self.size), Ordering::Release);
    }
    pub fn is_full(&self) -> bool {
        self.wrote() >= self.size
    }
    pub fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }
    /// Whether the global offset falls inside this file.
    pub fn contains(&self, offset: u64) -> bool {
        offset >= self.from_offset && offset < self.from_offset + self.size
    }

    /// Bytes `[pos, pos+len)` of the mapping. Callers read only published bytes, or bytes
    /// they themselves write (the owning stage).
    pub fn slice(&self, pos: u64, len: usize) -> &[u8] {
        let end = (pos as usize).saturating_add(len);
        assert!(
            end <= self.size as usize,
            "slice [{pos}, {end}) past {} in {}",
            self.size,
            self.path.display()
        );
        // SAFETY: in bounds of the live mapping (checked above); the mapping lives as long as
        // `self`; bytes below `wrote` are immutable by the single-writer contract.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(pos as usize), len) }
    }

    /// Copies `data` into the mapping at `pos`. Only the file's owning stage calls this, and
    /// only at or beyond the published `wrote` (or during recovery before readers exist).
    pub fn write_at(&self, pos: u64, data: &[u8]) {
        assert_eq!(
            self.mode,
            MapMode::ReadWrite,
            "write through the read-only mapping of {}",
            self.path.display()
        );
        let end = (pos as usize).saturating_add(data.len());
        assert!(
            end <= self.size as usize,
            "write [{pos}, {end}) past {} in {}",
            self.size,
            self.path.display()
        );
        // SAFETY: in bounds (checked); no reader looks at unpublished bytes, and there is a
        // single writer, so no data race on the destination.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.ptr.as_ptr().add(pos as usize),
                data.len(),
            )
        }
    }

    /// Writes `data` at `pos` through the file descriptor (pwrite) into the page cache the
    /// mapping shares; readers keep reading through the mapping. This is the CommitLog's
    /// append path: ext4 tracks dirty state per 4 KiB block for buffered writes, so a sync
    /// writes back only the blocks written since the last one, whatever the folio size,
    /// whereas a store through the mapping dirties its whole folio (up to 2 MiB). A failed
    /// write (EIO, EFBIG under RLIMIT_FSIZE) is an error here instead of a SIGBUS.
    /// Same single-writer contract as [`write_at`](Self::write_at).
    pub fn write_through(&self, pos: u64, data: &[u8]) -> Result<(), StoreError> {
        use std::os::unix::fs::FileExt;
        let end = pos.saturating_add(data.len() as u64);
        if end > self.size {
            return Err(StoreError::io(
                "pwrite",
                &self.path,
                std::io::Error::other(format!("write [{pos}, {end}) past {}", self.size)),
            ));
        }
        self.file
            .write_all_at(data, pos)
            .map_err(|e| StoreError::io("pwrite", &self.path, e))
    }

    /// Starts writeback of the dirty pages in `[from, to)` without waiting for it
    /// (sync_file_range WRITE), so a later flush of the range finds them written or on
    /// their way. Advisory: a failure is only logged here, and the flush that follows
    /// (msync) reports any I/O error that matters.
    pub fn start_writeback(&self, from: u64, to: u64) {
        if to <= from {
            return;
        }
        // SAFETY: a plain syscall on our own fd; it reads no user memory.
        let rc = unsafe {
            libc::sync_file_range(
                self.file.as_raw_fd(),
                from as libc::off64_t,
                (to - from) as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            )
        };
        if rc != 0 {
            tracing::debug!(
                error = %std::io::Error::last_os_error(),
                path = %self.path.display(),
                "starting writeback (sync_file_range) failed; the next flush writes the pages"
            );
        }
    }

    /// [`write_through`](Self::write_through) of several buffers laid end to end from `pos`,
    /// in as few pwritev calls as IOV_MAX allows: the append stage writes a whole batch of
    /// puts with one syscall, so the page cache's per-call work (folio lookup, block
    /// mapping, dirtying) is paid once per page rather than once per message.
    pub fn write_through_vectored(&self, pos: u64, bufs: &[&[u8]]) -> Result<(), StoreError> {
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let end = pos.saturating_add(total);
        if end > self.size {
            return Err(StoreError::io(
                "pwritev",
                &self.path,
                std::io::Error::other(format!("write [{pos}, {end}) past {}", self.size)),
            ));
        }
        let mut iov: Vec<libc::iovec> = bufs
            .iter()
            .filter(|b| !b.is_empty())
            .map(|b| libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        let mut idx = 0usize;
        let mut at = pos;
        while idx < iov.len() {
            let n = (iov.len() - idx).min(IOV_MAX);
            // SAFETY: `iov[idx..idx + n]` describes live, initialised buffers borrowed from
            // `bufs` for the duration of the call; the fd is ours.
            let rc = unsafe {
                libc::pwritev(
                    self.file.as_raw_fd(),
                    iov[idx..].as_ptr(),
                    n as libc::c_int,
                    at as libc::off_t,
                )
            };
            if rc < 0 {
                let err = std::io::Error::last_os_error();
                if err.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(StoreError::io("pwritev", &self.path, err));
            }
            if rc == 0 {
                return Err(StoreError::io(
                    "pwritev",
                    &self.path,
                    std::io::Error::from(std::io::ErrorKind::WriteZero),
                ));
            }
            // A short write (e.g. RLIMIT_FSIZE, a signal): skip what was written, retry the rest.
            let mut left = rc as usize;
            at += left as u64;
            while left > 0 {
                let v = &mut iov[idx];
                if v.iov_len <= left {
                    left -= v.iov_len;
                    idx += 1;
                } else {
                    // SAFETY: advancing inside the same buffer (`left < iov_len`).
                    v.iov_base = unsafe { (v.iov_base as *mut u8).add(left) } as *mut libc::c_void;
                    v.iov_len -= left;
                    left = 0;
                }
            }
        }
        Ok(())
    }

    /// A zero-copy `Bytes` over `[pos, pos+len)` that keeps this file mapped while alive.
    pub fn slice_bytes(self: &Arc<Self>, pos: u64, len: usize) -> Bytes {
        assert!(pos as usize + len <= self.size as usize);
        Bytes::from_owner(SegmentSlice {
            file: Arc::clone(self),
            pos: pos as usize,
            len,
        })
    }

    /// Forces `[from, to)` (file positions) to disk with msync(MS_SYNC) over whole pages.
    pub fn flush_range(&self, from: u64, to: u64) -> Result<(), StoreError> {
        if to <= from {
            return Ok(());
        }
        let start = from / OS_PAGE_SIZE * OS_PAGE_SIZE;
        let end = to.min(self.size);
        // SAFETY: page-aligned start inside our mapping, length within the mapping.
        let rc = unsafe {
            libc::msync(
                self.ptr.as_ptr().add(start as usize) as *mut libc::c_void,
                (end - start) as usize,
                libc::MS_SYNC,
            )
        };
        if rc != 0 {
            return Err(StoreError::io(
                "msync",
                &self.path,
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    /// Zeroes `[from, size)` so that no stale bytes past a recovered end can later look like
    /// records. Whole pages are released with a hole punch (then re-reserved); edges are
    /// written with zeros (pwrite, so read-only mappings work too).
    pub fn zero_tail(&self, from: u64) -> Result<(), StoreError> {
        if from >= self.size {
            return Ok(());
        }
        let first_page = from.div_ceil(OS_PAGE_SIZE) * OS_PAGE_SIZE;
        let head_end = first_page.min(self.size);
        self.write_zeros(from, head_end)?;
        if first_page < self.size {
            let len = self.size - first_page;
            let fd = self.file.as_raw_fd();
            // SAFETY: plain syscalls on our own fd.
            let punched = unsafe {
                libc::fallocate(
                    fd,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    first_page as libc::off_t,
                    len as libc::off_t,
                )
            } == 0;
            if punched {
                // SAFETY: as above; re-reserve so later writes cannot SIGBUS on ENOSPC.
                let rc = unsafe {
                    libc::fallocate(fd, 0, first_page as libc::off_t, len as libc::off_t)
                };
                if rc != 0 {
                    let err = std::io::Error::last_os_error();
                    if err.raw_os_error() != Some(libc::EOPNOTSUPP) {
                        return Err(StoreError::io("fallocate", &self.path, err));
                    }
                }
            } else {
                // No hole punching: write the zeros (slow path, recovery only).
                self.write_zeros(first_page, self.size)?;
            }
        }
        self.flush_range(from, self.size)
    }

    /// Writes zeros over `[from, to)` with pwrite.
    fn write_zeros(&self, from: u64, to: u64) -> Result<(), StoreError> {
        let zeros = vec![0u8; (to - from).min(WARM_CHUNK_BYTES as u64) as usize];
        let mut pos = from;
        while pos < to {
            let n = (to - pos).min(zeros.len() as u64) as usize;
            self.write_through(pos, &zeros[..n])?;
            pos += n as u64;
        }
        Ok(())
    }

    /// Unlinks the file; the mapping stays valid until the last `Arc` drops.
    pub fn destroy(&self) -> Result<(), StoreError> {
        self.removed.store(true, Ordering::Release);
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::io("remove", &self.path, e)),
        }
    }

    /// Last modification time in ms since the epoch.
    pub fn last_modified_ms(&self) -> i64 {
        self.file
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the region we mapped; no slices outlive `self` because
        // every `Bytes` over it holds an `Arc<MappedFile>`.
        unsafe {
            libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.size as usize);
        }
    }
}

/// Owner of a zero-copy `Bytes` over a mapped file.
struct SegmentSlice {
    file: Arc<MappedFile>,
    pos: usize,
    len: usize,
}

impl AsRef<[u8]> for SegmentSlice {
    fn as_ref(&self) -> &[u8] {
        self.file.slice(self.pos as u64, self.len)
    }
}

/// Lists `dir`'s files named by 20-digit offsets, sorted. Other names are skipped with a
/// warning (temporary files, editors' leftovers).
pub fn list_offset_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>, StoreError> {
    let mut out = Vec::new();
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(StoreError::io("read_dir", dir, e)),
    };
    for entry in rd {
        let entry = entry.map_err(|e| StoreError::io("read_dir", dir, e))?;
        let name = entry.file_name();
        match name.to_str().and_then(parse_offset_file_name) {
            Some(off) => out.push((off, entry.path())),
            None => {
                tracing::warn!(path = %entry.path().display(), "skipping file not named by a 20-digit offset")
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_threshold_counts_page_boundaries_like_upstream() {
        let page = OS_PAGE_SIZE;
        let size = 100 * page;
        assert!(!flush_due(0, 0, 0, false), "nothing written");
        assert!(flush_due(20, 0, 0, false), "thorough: any unflushed unit");
        assert!(
            !flush_due(2 * page - 20, 0, 2, false),
            "one boundary crossed"
        );
        assert!(flush_due(2 * page, 0, 2, false), "two boundaries crossed");
        // Boundaries, not bytes: from just below one boundary to just past the next.
        assert!(flush_due(3 * page + 20, page - 20, 2, false));
        assert!(!flush_due(2 * page + 20, page + 20, 2, false));
        assert!(
            flush_due(size, size - 20, 2, true),
            "a full file always flushes"
        );
        assert!(!flush_due(size, size, 0, true), "nothing new");
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(offset_file_name(1_073_741_824), "00000000001073741824");
        assert_eq!(
            parse_offset_file_name("00000000001073741824"),
            Some(1_073_741_824)
        );
        assert_eq!(parse_offset_file_name("0000000000107374182"), None);
        assert_eq!(parse_offset_file_name("0000000000107374182x"), None);
    }

    #[test]
    fn write_read_zero_and_reopen() {
        let dir = crate::test_util::temp_dir("mapped_file");
        let path = dir.join(offset_file_name(0));
        let f = Arc::new(
            MappedFile::create(&path, 0, 64 * 1024, Prepare::Reserve, MapMode::ReadWrite).unwrap(),
        );
        f.write_at(10, b"hello");
        f.write_at(9000, b"tail");
        f.set_wrote(9004);
        assert_eq!(&f.slice_bytes(10, 5)[..], b"hello");
        f.flush_range(0, 9004).unwrap();
        f.zero_tail(12).unwrap();
        assert_eq!(f.slice(10, 5), b"he\0\0\0");
        assert_eq!(f.slice(9000, 4), b"\0\0\0\0");
        drop(f);
        let g = MappedFile::open(&path, 0, 64 * 1024, MapMode::ReadOnly).unwrap();
        assert_eq!(g.slice(10, 2), b"he");
        assert!(matches!(
            MappedFile::open(&path, 0, 4096, MapMode::ReadOnly),
            Err(StoreError::BadSegmentSize { .. })
        ));
    }
}
