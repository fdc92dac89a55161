//! ConsumeQueue: per topic-queue files of 20-byte units (CommitLog offset i64, size i32,
//! tagsCode i64), `consumequeue/<topic>/<queueId>/<20-digit logical byte offset>`.
//!
//! The reput stage is the only writer (units are appended and then published by a Release
//! store of `max_offset`); any thread may read units below `max_offset`. The table of all
//! queues lives here too.

use crate::error::StoreError;
use crate::mapped_file::{
    flush_due, list_offset_files, offset_file_name, MapMode, MappedFile, Prepare,
};
use ringmq_sync::RwLockExt;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

/// Bytes of one unit.
pub const CQ_UNIT_SIZE: usize = 20;
/// How far ahead of its scan recovery reads a ConsumeQueue file (a multiple of the unit
/// size, so the scan lands on it).
const RECOVER_READ_AHEAD_BYTES: u64 = 256 * 1000;

/// One unit as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqUnit {
    pub commit_log_offset: i64,
    pub size: i32,
    pub tags_code: i64,
}

impl CqUnit {
    fn decode(b: &[u8]) -> Self {
        CqUnit {
            commit_log_offset: i64::from_be_bytes(b[0..8].try_into().unwrap_or_default()),
            size: i32::from_be_bytes(b[8..12].try_into().unwrap_or_default()),
            tags_code: i64::from_be_bytes(b[12..20].try_into().unwrap_or_default()),
        }
    }
    fn encode(&self) -> [u8; CQ_UNIT_SIZE] {
        let mut out = [0u8; CQ_UNIT_SIZE];
        out[0..8].copy_from_slice(&self.commit_log_offset.to_be_bytes());
        out[8..12].copy_from_slice(&self.size.to_be_bytes());
        out[12..20].copy_from_slice(&self.tags_code.to_be_bytes());
        out
    }
    /// A unit is valid iff `offset >= 0 && size > 0` (fillers are valid units).
    pub fn is_valid(&self) -> bool {
        self.commit_log_offset >= 0 && self.size > 0
    }
    /// Filler written before the first unit of a queue that starts at a non-zero offset.
    pub const FILLER: CqUnit = CqUnit {
        commit_log_offset: 0,
        size: i32::MAX,
        tags_code: 0,
    };
}

/// One topic-queue's ConsumeQueue.
pub struct ConsumeQueue {
    topic: String,
    queue_id: i32,
    dir: PathBuf,
    file_size: u64,
    files: RwLock<Vec<Arc<MappedFile>>>,
    /// Next logical offset (number of units incl. fillers), published after each unit.
    max_offset: AtomicI64,
    /// First logical offset still served.
    min_offset: AtomicI64,
    /// End (offset + size) of the last unit's record; -1 when empty.
    max_physic_offset: AtomicI64,
}

impl std::fmt::Debug for ConsumeQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ConsumeQueue({}-{}, [{}, {}))",
            self.topic,
            self.queue_id,
            self.min_offset(),
            self.max_offset()
        )
    }
}

impl ConsumeQueue {
    fn new(root: &Path, topic: &str, queue_id: i32, file_size: u64) -> Self {
        ConsumeQueue {
            topic: topic.to_string(),
            queue_id,
            dir: root.join(topic).join(queue_id.to_string()),
            file_size,
            files: RwLock::new(Vec::new()),
            max_offset: AtomicI64::new(0),
            min_offset: AtomicI64::new(0),
            max_physic_offset: AtomicI64::new(-1),
        }
    }

    /// Loads the files of an existing queue directory and finds the valid end (the first
    /// invalid unit, scanning from the third-last file as upstream does).
    fn load(root: &Path, topic: &str, queue_id: i32, file_size: u64) -> Result<Self, StoreError> {
        let cq = ConsumeQueue::new(root, topic, queue_id, file_size);
        let mut listed = list_offset_files(&cq.dir)?;
        if let Some((_, last)) = listed.last() {
            if std::fs::metadata(last)
                .map(|m| m.len() == 0)
                .unwrap_or(false)
            {
                let _ = std::fs::remove_file(last);
                listed.pop();
            }
        }
        let mut files = Vec::new();
        for (off, path) in listed {
            let f = MappedFile::open(&path, off, file_size, MapMode::ReadWrite)?;
            // As for new files: the last one is appended to through the mapping.
            f.advise_random();
            files.push(Arc::new(f));
        }
        *cq.files.write_unpoisoned() = files;
        cq.recover();
        Ok(cq)
    }

    fn recover(&self) {
        let files = self.files();
        if files.is_empty() {
            return;
        }
        let start = files.len().saturating_sub(3);
        let mut end_logic_bytes = files[start].from_offset();
        let mut max_phys = -1i64;
        'files: for f in &files[start..] {
            let mut pos = 0u64;
            while pos + CQ_UNIT_SIZE as u64 <= f.size() {
                if pos.is_multiple_of(RECOVER_READ_AHEAD_BYTES) {
                    // The mapping is advised random (4 KiB per fault): read ahead of the
                    // scan in large requests, which still fills the cache in 4 KiB pages.
                    f.will_need(pos, RECOVER_READ_AHEAD_BYTES);
                }
                let u = CqUnit::decode(f.slice(pos, CQ_UNIT_SIZE));
                if !u.is_valid() {
                    f.set_wrote(pos);
                    end_logic_bytes = f.from_offset() + pos;
                    break 'files;
                }
                if u != CqUnit::FILLER {
                    max_phys = u.commit_log_offset + i64::from(u.size);
                }
                pos += CQ_UNIT_SIZE as u64;
            }
            f.set_wrote(pos);
            end_logic_bytes = f.from_offset() + pos;
        }
        // Files beyond the valid end are dirty: drop them.
        let gone = self.remove_files_after(end_logic_bytes);
        for g in gone {
            tracing::warn!(path = %g.path().display(), "deleting ConsumeQueue file past the valid end");
            let _ = g.destroy();
        }
        for f in self.files() {
            f.set_flushed(f.wrote());
        }
        self.max_offset.store(
            (end_logic_bytes / CQ_UNIT_SIZE as u64) as i64,
            Ordering::Release,
        );
        self.min_offset.store(
            (files[0].from_offset() / CQ_UNIT_SIZE as u64) as i64,
            Ordering::Release,
        );
        self.max_physic_offset.store(max_phys, Ordering::Release);
        if max_phys < 0 {
            // Only fillers or nothing in the scanned files: look back for the last real unit.
            self.max_physic_offset
                .store(self.last_physic_end_scan(), Ordering::Release);
        }
    }

    fn last_physic_end_scan(&self) -> i64 {
        let max = self.max_offset();
        let min = self.min_offset();
        let mut i = max - 1;
        while i >= min {
            if let Some(u) = self.get_unit(i) {
                if u != CqUnit::FILLER {
                    return u.commit_log_offset + i64::from(u.size);
                }
            }
            i -= 1;
        }
        -1
    }

    fn remove_files_after(&self, end_logic_bytes: u64) -> Vec<Arc<MappedFile>> {
        let mut files = self.files.write_unpoisoned();
        let keep = files
            .iter()
            .position(|f| f.from_offset() > end_logic_bytes)
            .unwrap_or(files.len());
        files.split_off(keep)
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }
    pub fn queue_id(&self) -> i32 {
        self.queue_id
    }
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// Next logical offset (= number of units).
    pub fn max_offset(&self) -> i64 {
        self.max_offset.load(Ordering::Acquire)
    }
    pub fn min_offset(&self) -> i64 {
        self.min_offset.load(Ordering::Acquire)
    }
    /// End of the last unit's record in the CommitLog (-1 if empty).
    pub fn max_physic_offset(&self) -> i64 {
        self.max_physic_offset.load(Ordering::Acquire)
    }
    pub fn files(&self) -> Vec<Arc<MappedFile>> {
        self.files.read_unpoisoned().clone()
    }
    fn units_per_file(&self) -> i64 {
        (self.file_size / CQ_UNIT_SIZE as u64) as i64
    }

    /// The unit at logical offset `index`, if published and still present.
    pub fn get_unit(&self, index: i64) -> Option<CqUnit> {
        if index < self.min_offset() || index >= self.max_offset() || index < 0 {
            return None;
        }
        let byte = index as u64 * CQ_UNIT_SIZE as u64;
        let files = self.files.read_unpoisoned();
        let first = files.first()?.from_offset();
        if byte < first {
            return None;
        }
        let f = files.get(((byte - first) / self.file_size) as usize)?;
        if !f.contains(byte) {
            return None;
        }
        Some(CqUnit::decode(
            f.slice(byte - f.from_offset(), CQ_UNIT_SIZE),
        ))
    }

    /// Logical offset where the file after the one holding `index` starts (for
    /// OFFSET_FOUND_NULL's next offset).
    pub fn roll_next_file(&self, index: i64) -> i64 {
        let per = self.units_per_file();
        index + per - index.rem_euclid(per)
    }

    fn create_file(&self, logic_byte_offset: u64) -> Result<Arc<MappedFile>, StoreError> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| StoreError::io("create_dir", &self.dir, e))?;
        let path = self.dir.join(offset_file_name(logic_byte_offset));
        let f = MappedFile::create(
            &path,
            logic_byte_offset,
            self.file_size,
            Prepare::Reserve,
            MapMode::ReadWrite,
        )?;
        // Written through the mapping: keep its page cache in 4 KiB pages (see
        // `MappedFile::advise_random`) so a flush writes back only the units' pages.
        f.advise_random();
        f.set_wrote(0);
        f.set_flushed(0);
        let f = Arc::new(f);
        self.files.write_unpoisoned().push(Arc::clone(&f));
        Ok(f)
    }

    /// Appends the unit for queue offset `cq_offset` (reput stage / recovery only).
    /// Returns `Ok(false)` when the unit is already present (idempotent re-dispatch).
    pub fn put_unit(
        &self,
        commit_log_offset: i64,
        size: i32,
        tags_code: i64,
        cq_offset: i64,
    ) -> Result<bool, StoreError> {
        if commit_log_offset + i64::from(size) <= self.max_physic_offset() {
            return Ok(false);
        }
        let cur = self.max_offset();
        if cq_offset < cur {
            return Ok(false);
        }
        let unit = CqUnit {
            commit_log_offset,
            size,
            tags_code,
        };
        // The common case takes the file list's read lock once and borrows the last file
        // (one unit per dispatched record: no `Arc` clone, no second lock).
        let late_start = {
            let files = self.files.read_unpoisoned();
            let late_start = files.is_empty() && cq_offset > 0;
            if !late_start {
                if cq_offset > cur {
                    tracing::warn!(
                        topic = %self.topic, queue_id = self.queue_id, expected = cq_offset, actual = cur,
                        "[BUG] ConsumeQueue offset gap; appending at the current position"
                    );
                }
                let byte = cur as u64 * CQ_UNIT_SIZE as u64;
                if let Some(f) = files.last().filter(|f| f.contains(byte)) {
                    self.write_unit(f, byte, &unit, cur);
                    return Ok(true);
                }
            }
            late_start
        };
        let at = if late_start {
            self.start_late(cq_offset)?
        } else {
            cur
        };
        let byte = at as u64 * CQ_UNIT_SIZE as u64;
        let last = self.files.read_unpoisoned().last().cloned();
        let f = match last {
            Some(f) if f.contains(byte) => f,
            _ => self.create_file(byte - byte % self.file_size)?,
        };
        self.write_unit(&f, byte, &unit, at);
        Ok(true)
    }

    /// The first file of a queue whose first unit is `cq_offset` > 0: the units before it
    /// in that file are fillers. Returns where the unit goes (`cq_offset`).
    fn start_late(&self, cq_offset: i64) -> Result<i64, StoreError> {
        let per = self.units_per_file();
        let file_start = cq_offset - cq_offset % per;
        let f = self.create_file(file_start as u64 * CQ_UNIT_SIZE as u64)?;
        let filler = CqUnit::FILLER.encode();
        for i in 0..(cq_offset - file_start) {
            f.write_at(i as u64 * CQ_UNIT_SIZE as u64, &filler);
        }
        f.set_wrote((cq_offset - file_start) as u64 * CQ_UNIT_SIZE as u64);
        self.min_offset.store(cq_offset, Ordering::Release);
        Ok(cq_offset)
    }

    /// Writes `unit` as queue offset `at` (logical byte `byte`, inside `f`) and publishes
    /// it: the file's written end, then the queue's max physical and max offsets.
    fn write_unit(&self, f: &MappedFile, byte: u64, unit: &CqUnit, at: i64) {
        let pos = byte - f.from_offset();
        f.write_at(pos, &unit.encode());
        f.set_wrote(pos + CQ_UNIT_SIZE as u64);
        self.max_physic_offset.store(
            unit.commit_log_offset + i64::from(unit.size),
            Ordering::Release,
        );
        self.max_offset.store(at + 1, Ordering::Release);
    }

    /// Flushes written units to disk: every unflushed unit when `least_pages` is 0, else
    /// only files that are full or whose units crossed at least `least_pages` page
    /// boundaries since their last flush (`flushConsumeQueueLeastPages`, upstream's
    /// `MappedFile.isAbleToFlush`). Returns how many files were flushed.
    ///
    /// Why the threshold matters: a topic with many queues (BenchmarkTest has 1024) would
    /// otherwise cost one msync per queue per tick, each one a small random write that
    /// also write-protects the page the reput stage writes next.
    pub fn flush(&self, least_pages: u32) -> Result<usize, StoreError> {
        let mut flushed = 0;
        for f in self.files() {
            let (w, fl) = (f.wrote(), f.flushed());
            if flush_due(w, fl, u64::from(least_pages), w == f.size()) {
                f.flush_range(fl, w)?;
                f.set_flushed(w);
                flushed += 1;
            }
        }
        Ok(flushed)
    }

    /// Drops every unit whose record starts at or after `phys_end` (recovery truncation).
    /// Files are examined from the last one back: a file whose first unit is dirty goes
    /// whole, and so does an empty last file (a crash between creating a file and writing
    /// its first unit leaves one), so the dirty units of the file before it are still cut.
    pub fn truncate_dirty(&self, phys_end: i64) -> Result<(), StoreError> {
        loop {
            let Some(last) = self.files().last().cloned() else {
                break;
            };
            match first_dirty_unit(&last, phys_end) {
                Some(0) => {
                    self.files.write_unpoisoned().pop();
                    last.destroy()?;
                }
                Some(i) => {
                    let pos = i * CQ_UNIT_SIZE as u64;
                    last.set_wrote(pos);
                    last.zero_tail(pos)?;
                    last.set_flushed(pos);
                    break;
                }
                None => break,
            }
        }
        let files = self.files();
        let end = files
            .last()
            .map(|f| f.from_offset() + f.wrote())
            .unwrap_or(0);
        self.max_offset
            .store((end / CQ_UNIT_SIZE as u64) as i64, Ordering::Release);
        if files.is_empty() {
            self.min_offset.store(0, Ordering::Release);
        }
        self.max_physic_offset.store(-1, Ordering::Release);
        self.max_physic_offset
            .store(self.last_physic_end_scan(), Ordering::Release);
        Ok(())
    }

    /// Deletes files (except the last) whose last unit points below `commit_log_min`, and
    /// moves the min offset to the first unit still backed by the CommitLog.
    /// Returns the number of files deleted.
    pub fn delete_expired(&self, commit_log_min: i64) -> usize {
        let mut deleted = 0;
        loop {
            let files = self.files();
            if files.len() < 2 {
                break;
            }
            let first = &files[0];
            let last_unit_pos = first.wrote().saturating_sub(CQ_UNIT_SIZE as u64);
            let u = CqUnit::decode(first.slice(last_unit_pos, CQ_UNIT_SIZE));
            if u.commit_log_offset + i64::from(u.size.max(0)) > commit_log_min
                && u != CqUnit::FILLER
            {
                break;
            }
            self.files.write_unpoisoned().remove(0);
            if let Err(e) = first.destroy() {
                tracing::warn!(error = %e, "deleting expired ConsumeQueue file");
            }
            deleted += 1;
        }
        self.correct_min_offset(commit_log_min);
        deleted
    }

    /// Moves the min offset past units whose records are gone from the CommitLog.
    pub fn correct_min_offset(&self, commit_log_min: i64) {
        let files = self.files();
        let Some(first) = files.first() else { return };
        let mut min = self
            .min_offset()
            .max((first.from_offset() / CQ_UNIT_SIZE as u64) as i64);
        let max = self.max_offset();
        while min < max {
            match self.get_unit_unchecked(&files, min) {
                Some(u) if u == CqUnit::FILLER || u.commit_log_offset < commit_log_min => min += 1,
                _ => break,
            }
        }
        self.min_offset.store(min, Ordering::Release);
    }

    fn get_unit_unchecked(&self, files: &[Arc<MappedFile>], index: i64) -> Option<CqUnit> {
        let byte = index as u64 * CQ_UNIT_SIZE as u64;
        let f = files.iter().find(|f| f.contains(byte))?;
        Some(CqUnit::decode(
            f.slice(byte - f.from_offset(), CQ_UNIT_SIZE),
        ))
    }

    /// Deletes every file (topic deletion / empty CommitLog).
    pub fn destroy(&self) {
        let files: Vec<_> = self.files.write_unpoisoned().drain(..).collect();
        for f in files {
            let _ = f.destroy();
        }
        let _ = std::fs::remove_dir(&self.dir);
        self.max_offset.store(0, Ordering::Release);
        self.min_offset.store(0, Ordering::Release);
        self.max_physic_offset.store(-1, Ordering::Release);
    }
}

/// All ConsumeQueues, by topic then queue id.
pub struct ConsumeQueueTable {
    root: PathBuf,
    file_size: u64,
    map: RwLock<HashMap<String, HashMap<i32, Arc<ConsumeQueue>>>>,
}

impl ConsumeQueueTable {
    /// Loads every `consumequeue/<topic>/<queueId>` directory.
    pub fn load(root: &Path, file_size: u64) -> Result<Self, StoreError> {
        let mut map: HashMap<String, HashMap<i32, Arc<ConsumeQueue>>> = HashMap::new();
        if let Ok(topics) = std::fs::read_dir(root) {
            for t in topics.flatten() {
                let Some(topic) = t.file_name().to_str().map(str::to_string) else {
                    continue;
                };
                let Ok(queues) = std::fs::read_dir(t.path()) else {
                    continue;
                };
                for q in queues.flatten() {
                    let Some(qid) = q.file_name().to_str().and_then(|s| s.parse::<i32>().ok())
                    else {
                        continue;
                    };
                    let cq = ConsumeQueue::load(root, &topic, qid, file_size)?;
                    map.entry(topic.clone())
                        .or_default()
                        .insert(qid, Arc::new(cq));
                }
            }
        }
        Ok(ConsumeQueueTable {
            root: root.to_path_buf(),
            file_size,
            map: RwLock::new(map),
        })
    }

    pub fn find(&self, topic: &str, queue_id: i32) -> Option<Arc<ConsumeQueue>> {
        self.map
            .read_unpoisoned()
            .get(topic)?
            .get(&queue_id)
            .cloned()
    }

    pub fn find_or_create(&self, topic: &str, queue_id: i32) -> Arc<ConsumeQueue> {
        if let Some(cq) = self.find(topic, queue_id) {
            return cq;
        }
        let mut map = self.map.write_unpoisoned();
        Arc::clone(
            map.entry(topic.to_string())
                .or_default()
                .entry(queue_id)
                .or_insert_with(|| {
                    Arc::new(ConsumeQueue::new(
                        &self.root,
                        topic,
                        queue_id,
                        self.file_size,
                    ))
                }),
        )
    }

    pub fn all(&self) -> Vec<Arc<ConsumeQueue>> {
        self.map
            .read_unpoisoned()
            .values()
            .flat_map(|m| m.values().cloned())
            .collect()
    }

    pub fn len(&self) -> usize {
        self.map.read_unpoisoned().values().map(|m| m.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes a topic's queues from the table and deletes their files.
    pub fn remove_topic(&self, topic: &str) -> usize {
        let removed = self.map.write_unpoisoned().remove(topic);
        let n = removed.as_ref().map(|m| m.len()).unwrap_or(0);
        for cq in removed.into_iter().flat_map(|m| m.into_values()) {
            cq.destroy();
        }
        let _ = std::fs::remove_dir_all(self.root.join(topic));
        n
    }
}

/// The index of the first unit of `file` whose record starts at or after `phys_end`; 0
/// for a file with no unit at all, which holds nothing to keep.
fn first_dirty_unit(file: &MappedFile, phys_end: i64) -> Option<u64> {
    let units = file.wrote() / CQ_UNIT_SIZE as u64;
    if units == 0 {
        return Some(0);
    }
    (0..units).find(|&i| {
        let u = CqUnit::decode(file.slice(i * CQ_UNIT_SIZE as u64, CQ_UNIT_SIZE));
        u != CqUnit::FILLER && u.commit_log_offset >= phys_end
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapped_file::OS_PAGE_SIZE;

    #[test]
    fn flush_with_least_pages_waits_for_dirty_pages_and_thorough_takes_the_rest() {
        let dir = crate::test_util::temp_dir("cq-least");
        // The first unit count whose bytes reach the second page boundary.
        let two_pages = (2 * OS_PAGE_SIZE).div_ceil(CQ_UNIT_SIZE as u64);
        let t = ConsumeQueueTable::load(&dir, 10 * OS_PAGE_SIZE).unwrap();
        let cq = t.find_or_create("T", 0);
        let put = |from: u64, to: u64| {
            for i in from..to {
                assert!(cq.put_unit(i as i64 * 100, 100, 0, i as i64).unwrap());
            }
        };
        put(0, 3);
        assert_eq!(cq.flush(2).unwrap(), 0, "three units dirty one page");
        assert_eq!(cq.files()[0].flushed(), 0);
        put(3, two_pages);
        assert_eq!(
            cq.flush(2).unwrap(),
            1,
            "units now cross two page boundaries"
        );
        let flushed = cq.files()[0].flushed();
        assert_eq!(flushed, cq.files()[0].wrote());
        put(two_pages, two_pages + 1);
        assert_eq!(cq.flush(2).unwrap(), 0);
        assert_eq!(
            cq.flush(0).unwrap(),
            1,
            "a thorough pass takes the last unit"
        );
        assert_eq!(cq.files()[0].flushed(), cq.files()[0].wrote());
        assert_eq!(cq.flush(0).unwrap(), 0);
    }

    /// Files of four units each.
    const FOUR_UNITS_BYTES: u64 = 4 * CQ_UNIT_SIZE as u64;

    /// A table in a fresh directory whose queue `T`/`queue_id` holds `units` units of 100
    /// bytes each, back to back from physical offset 0, tagged `tags_code`.
    fn queue_of(
        name: &str,
        queue_id: i32,
        units: i64,
        tags_code: i64,
    ) -> (PathBuf, ConsumeQueueTable) {
        let dir = crate::test_util::temp_dir(name);
        let t = ConsumeQueueTable::load(&dir, FOUR_UNITS_BYTES).unwrap();
        let cq = t.find_or_create("T", queue_id);
        for i in 0..units {
            assert!(cq.put_unit(i * 100, 100, tags_code, i).unwrap());
        }
        (dir, t)
    }

    #[test]
    fn units_persist_truncate_and_reload() {
        let (dir, t) = queue_of("cq", 1, 10, 7);
        let fs = FOUR_UNITS_BYTES;
        let cq = t.find("T", 1).unwrap();
        assert!(!cq.put_unit(900, 100, 7, 9).unwrap(), "duplicate skipped");
        assert_eq!(cq.max_offset(), 10);
        assert_eq!(cq.files().len(), 3);
        assert_eq!(
            cq.get_unit(3),
            Some(CqUnit {
                commit_log_offset: 300,
                size: 100,
                tags_code: 7
            })
        );
        cq.flush(0).unwrap();
        drop((cq, t));
        let t = ConsumeQueueTable::load(&dir, fs).unwrap();
        let cq = t.find("T", 1).unwrap();
        assert_eq!(cq.max_offset(), 10);
        assert_eq!(cq.max_physic_offset(), 1000);
        cq.truncate_dirty(450).unwrap();
        assert_eq!(cq.max_offset(), 5);
        assert_eq!(cq.max_physic_offset(), 500);
        cq.truncate_dirty(300).unwrap();
        assert_eq!(cq.max_offset(), 3);
        assert_eq!(cq.files().len(), 1);
        assert!(cq.put_unit(300, 50, 0, 3).unwrap());
        assert_eq!(cq.max_offset(), 4);
        assert_eq!(cq.files().len(), 1);
        assert!(cq.put_unit(350, 50, 0, 4).unwrap());
        assert_eq!(cq.files().len(), 2);
    }

    /// A crash between creating a file and writing its first unit leaves an empty last
    /// file; the dirty units of the full file before it are still cut.
    #[test]
    fn truncation_looks_past_an_empty_last_file() {
        let (dir, t) = queue_of("cq_empty_last", 0, 8, 0);
        let fs = FOUR_UNITS_BYTES;
        let cq = t.find("T", 0).unwrap();
        cq.create_file(8 * CQ_UNIT_SIZE as u64).unwrap();
        cq.flush(0).unwrap();
        drop((cq, t));
        let t = ConsumeQueueTable::load(&dir, fs).unwrap();
        let cq = t.find("T", 0).unwrap();
        assert_eq!(cq.files().len(), 3);
        assert_eq!(cq.max_offset(), 8);
        cq.truncate_dirty(700).unwrap();
        assert_eq!(cq.max_offset(), 7);
        assert_eq!(cq.max_physic_offset(), 700);
        assert_eq!(cq.files().len(), 2);
        assert_eq!(cq.get_unit(7), None);
        assert!(cq.put_unit(700, 80, 0, 7).unwrap());
        assert_eq!(cq.get_unit(7).unwrap().size, 80);
    }

    #[test]
    fn late_start_fills_gap_and_expiry_moves_min() {
        let dir = crate::test_util::temp_dir("cq_gap");
        let fs = 4 * CQ_UNIT_SIZE as u64;
        let t = ConsumeQueueTable::load(&dir, fs).unwrap();
        let cq = t.find_or_create("T", 0);
        cq.put_unit(1000, 10, 0, 6).unwrap();
        assert_eq!(cq.min_offset(), 6);
        assert_eq!(cq.max_offset(), 7);
        assert_eq!(cq.files()[0].from_offset(), 4 * CQ_UNIT_SIZE as u64);
        for i in 7..13 {
            cq.put_unit(1000 + (i - 6) * 10, 10, 0, i).unwrap();
        }
        assert_eq!(cq.files().len(), 3);
        assert_eq!(cq.delete_expired(1035), 1);
        assert_eq!(
            cq.min_offset(),
            10,
            "first unit at or past the CommitLog min"
        );
    }
}
