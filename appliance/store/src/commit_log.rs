//! The CommitLog's shared side: the MappedFileQueue of fixed-size segments named by their
//! 20-digit start offset, the published max (readable) and flushed offsets, and the read
//! paths every other thread uses. Writing belongs to the append stage (`append.rs`);
//! creating segments belongs to the background allocator in this file.

use crate::direct::DirectRing;
use crate::error::StoreError;
use crate::mapped_file::{list_offset_files, offset_file_name, MapMode, MappedFile, Prepare};
use bytes::Bytes;
use ringmq_remoting::message::record::{self, BLANK_MAGIC};
use ringmq_sync::RwLockExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

/// How long the append stage waits for the allocator before CREATE_MAPPED_FILE_FAILED
/// (upstream's 5 s).
pub const ALLOCATE_TIMEOUT_MS: u64 = 5000;

/// The CommitLog segments plus published positions.
pub struct CommitLog {
    dir: PathBuf,
    file_size: u64,
    files: RwLock<Vec<Arc<MappedFile>>>,
    /// End of readable bytes (global), published by the append stage after each batch.
    max_offset: AtomicU64,
    /// End of the durable bytes (global), published by the flush stage. In direct mode
    /// the write ring's `written` runs ahead of it (written to the files, not yet synced).
    flushed_offset: AtomicU64,
    /// Store timestamp of the last appended record (for the checkpoint).
    last_store_timestamp_ms: AtomicI64,
    /// Direct mode: the write ring recent bytes are served from.
    ring: OnceLock<Arc<DirectRing>>,
}

impl CommitLog {
    /// Loads existing segments from `dir` (creating it). A zero-length last file is
    /// deleted; any other size mismatch refuses to start.
    pub fn load(dir: &Path, file_size: u64) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::io("create_dir", dir, e))?;
        let mut listed = list_offset_files(dir)?;
        if let Some((_, last)) = listed.last() {
            let len = std::fs::metadata(last)
                .map_err(|e| StoreError::io("stat", last, e))?
                .len();
            if len == 0 {
                tracing::warn!(path = %last.display(), "deleting zero-length last CommitLog file");
                std::fs::remove_file(last).map_err(|e| StoreError::io("remove", last, e))?;
                listed.pop();
            }
        }
        let mut files = Vec::with_capacity(listed.len());
        for (off, path) in listed {
            if off % file_size != 0 {
                return Err(StoreError::Corrupt {
                    path,
                    offset: off,
                    reason: format!(
                        "segment start is not a multiple of mappedFileSizeCommitLog {file_size}"
                    ),
                });
            }
            files.push(Arc::new(MappedFile::open(
                &path,
                off,
                file_size,
                MapMode::ReadOnly,
            )?));
        }
        for w in files.windows(2) {
            if w[1].from_offset() != w[0].from_offset() + file_size {
                tracing::error!(
                    prev = %w[0].path().display(), next = %w[1].path().display(),
                    "[BUG] CommitLog segments are not adjacent"
                );
            }
        }
        // A crashed writer's in-flight O_DIRECT writes (io_uring requests the kernel retires
        // after the process died) must land before recovery reads the tail through the page
        // cache; a no-op fallocate waits for in-flight direct I/O on the inode.
        for f in files.iter().rev().take(2) {
            f.wait_direct_io();
        }
        let end = files
            .last()
            .map(|f| f.from_offset() + file_size)
            .unwrap_or(0);
        Ok(CommitLog {
            dir: dir.to_path_buf(),
            file_size,
            files: RwLock::new(files),
            max_offset: AtomicU64::new(end),
            flushed_offset: AtomicU64::new(end),
            last_store_timestamp_ms: AtomicI64::new(0),
            ring: OnceLock::new(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn file_size(&self) -> u64 {
        self.file_size
    }
    /// Readable end (Acquire).
    pub fn max_offset(&self) -> u64 {
        self.max_offset.load(Ordering::Acquire)
    }
    pub(crate) fn set_max_offset(&self, v: u64) {
        self.max_offset.store(v, Ordering::Release);
    }
    pub fn flushed_offset(&self) -> u64 {
        self.flushed_offset.load(Ordering::Acquire)
    }
    pub(crate) fn set_flushed_offset(&self, v: u64) {
        self.flushed_offset.store(v, Ordering::Release);
    }
    pub fn last_store_timestamp_ms(&self) -> i64 {
        self.last_store_timestamp_ms.load(Ordering::Acquire)
    }
    pub(crate) fn set_last_store_timestamp_ms(&self, v: i64) {
        self.last_store_timestamp_ms.store(v, Ordering::Release);
    }
    pub(crate) fn set_ring(&self, ring: Arc<DirectRing>) {
        let _ = self.ring.set(ring);
    }
    pub(crate) fn ring(&self) -> Option<&Arc<DirectRing>> {
        self.ring.get()
    }

    /// Start of the oldest segment still present (0 when empty).
    pub fn min_offset(&self) -> u64 {
        let files = self.files.read_unpoisoned();
        files
            .iter()
            .find(|f| !f.is_removed())
            .map(|f| f.from_offset())
            .unwrap_or(0)
    }

    /// Snapshot of the segment list.
    pub fn files(&self) -> Vec<Arc<MappedFile>> {
        self.files.read_unpoisoned().clone()
    }

    pub fn last_file(&self) -> Option<Arc<MappedFile>> {
        self.files.read_unpoisoned().last().cloned()
    }

    /// Appends a new segment at the tail (append stage at roll-over).
    pub(crate) fn push_file(&self, f: Arc<MappedFile>) {
        self.files.write_unpoisoned().push(f);
    }

    /// Removes segments for which `pred` holds from the list (retention, truncation).
    pub(crate) fn remove_files(&self, pred: impl Fn(&MappedFile) -> bool) -> Vec<Arc<MappedFile>> {
        let mut files = self.files.write_unpoisoned();
        let (gone, keep): (Vec<_>, Vec<_>) = files.drain(..).partition(|f| pred(f));
        *files = keep;
        gone
    }

    /// The segment containing global offset `offset`.
    pub fn segment_for(&self, offset: u64) -> Option<Arc<MappedFile>> {
        let files = self.files.read_unpoisoned();
        let first = files.first()?.from_offset();
        if offset < first {
            return None;
        }
        let idx = ((offset - first) / self.file_size) as usize;
        let f = files.get(idx)?;
        (f.contains(offset) && !f.is_removed()).then(|| Arc::clone(f))
    }

    /// Start of the segment after the one containing `offset`.
    pub fn roll_next_file(&self, offset: u64) -> u64 {
        offset + self.file_size - offset % self.file_size
    }

    /// `len` readable bytes at `offset`, not crossing a segment end. Zero-copy from the
    /// mapping in mmap mode; in direct mode bytes the write ring still holds are copied from
    /// it (recent bytes never cost a disk read) and older ones come from the mapping.
    pub fn read(&self, offset: u64, len: usize) -> Option<Bytes> {
        let end = offset.checked_add(len as u64)?;
        if end > self.max_offset() || len == 0 {
            return None;
        }
        let seg = self.segment_for(offset)?;
        let pos = offset - seg.from_offset();
        if pos + len as u64 > seg.size() {
            return None;
        }
        if let Some(ring) = self.ring.get() {
            // Pages at or past floor_page(written) may still be rewritten by O_DIRECT; never
            // fault them in through the mapping (a cached copy would go stale and the
            // kernel reports the collision as EIO). The ring holds all of them.
            if ring.holds_any_before(end) {
                let mut buf = vec![0u8; len];
                let file_end = ring.read_into(offset, &mut buf);
                let k = (file_end - offset) as usize;
                if k > 0 {
                    buf[..k].copy_from_slice(seg.slice(pos, k));
                }
                return Some(Bytes::from(buf));
            }
        }
        Some(seg.slice_bytes(pos, len))
    }

    /// `len` readable bytes at `offset` (not crossing a segment end) for a reader that
    /// parses them in place and keeps nothing: borrowed from the mapping in mmap mode,
    /// copied into `scratch` in direct mode. Used by the reput stage to take records a
    /// chunk at a time; a direct-mode chunk that left the ring is read from the disk in
    /// large requests instead of one page fault at a time.
    pub(crate) fn read_span<'a>(
        &self,
        offset: u64,
        len: usize,
        scratch: &'a mut Vec<u8>,
    ) -> Option<Span<'a>> {
        let end = offset.checked_add(len as u64)?;
        if end > self.max_offset() || len == 0 {
            return None;
        }
        let seg = self.segment_for(offset)?;
        let pos = offset - seg.from_offset();
        if pos + len as u64 > seg.size() {
            return None;
        }
        if let Some(ring) = self.ring.get() {
            if ring.holds_any_before(end) {
                if scratch.len() < len {
                    scratch.resize(len, 0);
                }
                let out = &mut scratch[..len];
                let file_end = ring.read_into(offset, out);
                let k = (file_end - offset) as usize;
                if k > 0 {
                    seg.will_need(pos, k as u64);
                    out[..k].copy_from_slice(seg.slice(pos, k));
                }
                return Some(Span::Copied(out));
            }
            // Wholly on disk: the segment is advised random, so read it in one request.
            seg.will_need(pos, len as u64);
        }
        Some(Span::Mapped { seg, pos, len })
    }

    /// Reads the whole record at `offset` (None for BLANK, bad sizes, unreadable ranges).
    pub fn read_record(&self, offset: u64) -> Option<Bytes> {
        let head = self.read(offset, 8)?;
        let size = record::read_total_size(&head)?;
        let magic = record::read_magic(&head)?;
        if magic == BLANK_MAGIC || size < record::MIN_HEADER_SIZE as i32 {
            return None;
        }
        self.read(offset, size as usize)
    }

    /// Reads a record of a known size (from a ConsumeQueue unit).
    pub fn read_record_sized(&self, offset: u64, size: usize) -> Option<Bytes> {
        self.read(offset, size)
    }
}

/// Bytes returned by [`CommitLog::read_span`].
pub(crate) enum Span<'a> {
    /// In the segment's mapping (kept mapped by the `Arc`).
    Mapped {
        seg: Arc<MappedFile>,
        pos: u64,
        len: usize,
    },
    /// Copied into the caller's scratch buffer.
    Copied(&'a [u8]),
}

impl Span<'_> {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Span::Mapped { seg, pos, len } => seg.slice(*pos, *len),
            Span::Copied(b) => b,
        }
    }
}

/// Result the allocator hands back: the file or a description of why it failed.
pub(crate) type Allocated = (u64, Result<Arc<MappedFile>, String>);

/// How new CommitLog segments are made (fixed for the store's lifetime).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SegmentSpec {
    pub file_size: u64,
    /// `warmMapedFileEnable`: zero the blocks on disk before use ([`Prepare::Warm`]).
    pub warm: bool,
    /// Direct write mode: the new segment is the active one, whose pages O_DIRECT still
    /// rewrites, so reads through its mapping must not read around.
    pub direct: bool,
}

/// Creates the CommitLog segment starting at `offset` in `dir`, positions at 0. Used by
/// the allocator thread and, for the first segment, by `MessageStore::open`.
pub(crate) fn create_segment(
    dir: &Path,
    offset: u64,
    spec: SegmentSpec,
) -> Result<Arc<MappedFile>, StoreError> {
    let path = dir.join(offset_file_name(offset));
    let prepare = if spec.warm {
        Prepare::Warm
    } else {
        Prepare::Reserve
    };
    let f = MappedFile::create(&path, offset, spec.file_size, prepare, MapMode::ReadOnly)?;
    if spec.direct {
        f.advise_random();
    }
    f.set_wrote(0);
    f.set_flushed(0);
    Ok(Arc::new(f))
}

/// Background allocator: creates and reserves (and with `warmMapedFileEnable` zero-fills)
/// the next CommitLog segment before the append stage needs it, so roll-over never
/// creates a file on the append path.
pub(crate) struct AllocatorHandle {
    req_tx: SyncSender<u64>,
    resp_rx: Receiver<Allocated>,
    /// Offsets requested and not yet received, oldest first (at most 2).
    pending: std::collections::VecDeque<u64>,
    file_size: u64,
}

/// Most outstanding allocation requests: one ahead plus one being waited for.
const ALLOCATOR_QUEUE_BOUND: usize = 2;

impl AllocatorHandle {
    /// Starts the allocator thread for segments in `dir`.
    pub fn start(dir: PathBuf, spec: SegmentSpec) -> (Self, std::thread::JoinHandle<()>) {
        let (req_tx, req_rx) = mpsc::sync_channel::<u64>(ALLOCATOR_QUEUE_BOUND);
        let (resp_tx, resp_rx) = mpsc::sync_channel::<Allocated>(ALLOCATOR_QUEUE_BOUND);
        let handle = std::thread::Builder::new()
            .name("ringmq-allocate".into())
            .spawn(move || {
                while let Ok(offset) = req_rx.recv() {
                    let res = create_segment(&dir, offset, spec).map_err(|e| e.to_string());
                    if let Err(e) = &res {
                        tracing::error!(error = %e, "allocating CommitLog segment failed");
                    }
                    if resp_tx.send((offset, res)).is_err() {
                        break;
                    }
                }
            })
            .expect("spawn allocator thread");
        (
            AllocatorHandle {
                req_tx,
                resp_rx,
                pending: Default::default(),
                file_size: spec.file_size,
            },
            handle,
        )
    }

    /// Asks for `offset` ahead of time (no-op if already requested).
    pub fn prepare(&mut self, offset: u64) {
        if !self.pending.contains(&offset)
            && self.pending.len() < ALLOCATOR_QUEUE_BOUND
            && self.req_tx.try_send(offset).is_ok()
        {
            self.pending.push_back(offset);
        }
    }

    /// The segment starting at `offset`, waiting up to [`ALLOCATE_TIMEOUT_MS`]; asks for
    /// the following one ahead of need.
    pub fn take(&mut self, offset: u64) -> Result<Arc<MappedFile>, String> {
        self.prepare(offset);
        if !self.pending.contains(&offset) {
            return Err(format!(
                "allocator queue full while asking for segment {offset}"
            ));
        }
        let deadline = std::time::Instant::now() + Duration::from_millis(ALLOCATE_TIMEOUT_MS);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.resp_rx.recv_timeout(left) {
                Ok((off, res)) => {
                    self.pending.retain(|p| *p != off);
                    if off == offset {
                        if res.is_ok() {
                            self.prepare(offset + self.file_size);
                        }
                        return res;
                    }
                    // A stale pre-allocation (e.g. after truncation): drop it; it is an
                    // empty file that recovery deletes if it is ever left behind.
                    if let Ok(f) = res {
                        let _ = f.destroy();
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "allocating segment {offset} took over {ALLOCATE_TIMEOUT_MS} ms"
                    ))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err("allocator thread is gone".into())
                }
            }
        }
    }
}
