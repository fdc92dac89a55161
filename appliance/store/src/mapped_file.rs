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

fn map(file: &File, path: &Path, size: u64) -> Result<NonNull<u8>, StoreError> {
    // SAFETY: mapping a file we opened read-write, of the length we sized it to; the result
    // is checked against MAP_FAILED before use.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size as usize,
            libc::PROT_READ | libc::PROT_WRITE,
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

/// Reserves disk blocks for `[0, size)` so that later stores through the mapping cannot
/// hit ENOSPC (which would be a SIGBUS, not an error).
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

impl MappedFile {
    /// Creates (or reuses, if already present with the right size) a file of `size` bytes
    /// at `path`, reserves its blocks and maps it. With `prefault`, page-table entries are
    /// populated now so the first writes do not fault.
    pub fn create(
        path: &Path,
        from_offset: u64,
        size: u64,
        prefault: bool,
    ) -> Result<Self, StoreError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| StoreError::io("create", path, e))?;
        if let Err(e) = reserve(&file, path, size) {
            drop(file);
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
        let ptr = map(&file, path, size)?;
        if prefault {
            // SAFETY: advising our own fresh mapping; failure only loses the optimisation.
            let rc = unsafe {
                libc::madvise(
                    ptr.as_ptr() as *mut libc::c_void,
                    size as usize,
                    libc::MADV_POPULATE_WRITE,
                )
            };
            if rc != 0 {
                tracing::debug!(path = %path.display(), "MADV_POPULATE_WRITE unsupported; pages fault on first write");
            }
        }
        Ok(MappedFile {
            path: path.to_path_buf(),
            file,
            from_offset,
            size,
            ptr,
            wrote: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
            removed: AtomicBool::new(false),
        })
    }

    /// Opens an existing file that must be exactly `size` bytes; positions start at the end
    /// (recovery corrects them).
    pub fn open(path: &Path, from_offset: u64, size: u64) -> Result<Self, StoreError> {
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
        let ptr = map(&file, path, size)?;
        Ok(MappedFile {
            path: path.to_path_buf(),
            file,
            from_offset,
            size,
            ptr,
            wrote: AtomicU64::new(size),
            flushed: AtomicU64::new(size),
            removed: AtomicBool::new(false),
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

    /// Disables read-ahead and fault-around on this mapping (direct write mode).
    pub fn advise_random(&self) {
        // SAFETY: advising our own live mapping; failure only loses the hint.
        unsafe {
            libc::madvise(
                self.ptr.as_ptr() as *mut libc::c_void,
                self.size as usize,
                libc::MADV_RANDOM,
            );
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
    /// cleared in memory.
    pub fn zero_tail(&self, from: u64) -> Result<(), StoreError> {
        if from >= self.size {
            return Ok(());
        }
        let first_page = from.div_ceil(OS_PAGE_SIZE) * OS_PAGE_SIZE;
        let head_end = first_page.min(self.size);
        // SAFETY: in-bounds region of our mapping; called only before readers exist or by the
        // owning stage beyond published bytes.
        unsafe {
            std::ptr::write_bytes(
                self.ptr.as_ptr().add(from as usize),
                0,
                (head_end - from) as usize,
            )
        };
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
                // No hole punching: clear in memory (slow path, recovery only).
                // SAFETY: in-bounds region of our mapping (see above).
                unsafe {
                    std::ptr::write_bytes(
                        self.ptr.as_ptr().add(first_page as usize),
                        0,
                        len as usize,
                    )
                };
            }
        }
        self.flush_range(from, self.size)
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
        let f = Arc::new(MappedFile::create(&path, 0, 64 * 1024, true).unwrap());
        f.write_at(10, b"hello");
        f.write_at(9000, b"tail");
        f.set_wrote(9004);
        assert_eq!(&f.slice_bytes(10, 5)[..], b"hello");
        f.flush_range(0, 9004).unwrap();
        f.zero_tail(12).unwrap();
        assert_eq!(f.slice(10, 5), b"he\0\0\0");
        assert_eq!(f.slice(9000, 4), b"\0\0\0\0");
        drop(f);
        let g = MappedFile::open(&path, 0, 64 * 1024).unwrap();
        assert_eq!(g.slice(10, 2), b"he");
        assert!(matches!(
            MappedFile::open(&path, 0, 4096),
            Err(StoreError::BadSegmentSize { .. })
        ));
    }
}
