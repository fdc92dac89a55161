//! IndexFile and the index service (`store.md` §8): hash slots + linked 20-byte entries
//! keyed by `topic#key` (KEYS tokens and UNIQ_KEY), files `index/<yyyyMMddHHmmssSSS>`.
//!
//! The reput stage writes; `query_message` reads. Both go through one mutex around the
//! service: entry writes are a few stores and queries are rare admin/tool calls, so the
//! lock is short and almost never contended.

use crate::error::StoreError;
use crate::mapped_file::{MapMode, MappedFile, Prepare};
use crate::util::local_time_file_name;
use ringmq_remoting::message::tags::java_string_hash;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Header bytes.
pub const INDEX_HEADER_SIZE: u64 = 40;
const SLOT_SIZE: u64 = 4;
const ENTRY_SIZE: u64 = 20;

/// `indexKeyHashMethod`: |hashCode|, 0 for Integer.MIN_VALUE.
pub fn index_key_hash(key: &str) -> i32 {
    let h = java_string_hash(key).wrapping_abs();
    if h < 0 {
        0
    } else {
        h
    }
}

struct IndexFile {
    mf: Arc<MappedFile>,
    slot_num: u32,
    index_num: u32,
    begin_timestamp: i64,
    end_timestamp: i64,
    begin_phy_offset: i64,
    end_phy_offset: i64,
    hash_slot_count: i32,
    index_count: i32,
}

fn rd_i32(b: &[u8]) -> i32 {
    i32::from_be_bytes(b[..4].try_into().unwrap_or_default())
}
fn rd_i64(b: &[u8]) -> i64 {
    i64::from_be_bytes(b[..8].try_into().unwrap_or_default())
}

impl IndexFile {
    fn file_size(slot_num: u32, index_num: u32) -> u64 {
        INDEX_HEADER_SIZE + u64::from(slot_num) * SLOT_SIZE + u64::from(index_num) * ENTRY_SIZE
    }

    fn create(
        path: &Path,
        slot_num: u32,
        index_num: u32,
        prev_end_ts: i64,
        prev_end_phy: i64,
    ) -> Result<Self, StoreError> {
        let mf = MappedFile::create(
            path,
            0,
            Self::file_size(slot_num, index_num),
            Prepare::Reserve,
            MapMode::ReadWrite,
        )?;
        // Hash slots are updated at random through the mapping: 4 KiB pages keep each flush
        // to the pages that changed (see `MappedFile::advise_random`).
        mf.advise_random();
        let mut f = IndexFile {
            mf: Arc::new(mf),
            slot_num,
            index_num,
            begin_timestamp: prev_end_ts,
            end_timestamp: prev_end_ts,
            begin_phy_offset: prev_end_phy,
            end_phy_offset: prev_end_phy,
            hash_slot_count: 0,
            index_count: 1,
        };
        f.write_header();
        Ok(f)
    }

    fn open(path: &Path, slot_num: u32, index_num: u32) -> Result<Self, StoreError> {
        let mf = MappedFile::open(
            path,
            0,
            Self::file_size(slot_num, index_num),
            MapMode::ReadWrite,
        )?;
        mf.advise_random();
        let h = mf.slice(0, INDEX_HEADER_SIZE as usize).to_vec();
        Ok(IndexFile {
            mf: Arc::new(mf),
            slot_num,
            index_num,
            begin_timestamp: rd_i64(&h[0..]),
            end_timestamp: rd_i64(&h[8..]),
            begin_phy_offset: rd_i64(&h[16..]),
            end_phy_offset: rd_i64(&h[24..]),
            hash_slot_count: rd_i32(&h[32..]),
            index_count: rd_i32(&h[36..]).max(1),
        })
    }

    fn write_header(&mut self) {
        let mut h = [0u8; INDEX_HEADER_SIZE as usize];
        h[0..8].copy_from_slice(&self.begin_timestamp.to_be_bytes());
        h[8..16].copy_from_slice(&self.end_timestamp.to_be_bytes());
        h[16..24].copy_from_slice(&self.begin_phy_offset.to_be_bytes());
        h[24..32].copy_from_slice(&self.end_phy_offset.to_be_bytes());
        h[32..36].copy_from_slice(&self.hash_slot_count.to_be_bytes());
        h[36..40].copy_from_slice(&self.index_count.to_be_bytes());
        self.mf.write_at(0, &h);
    }

    fn is_full(&self) -> bool {
        self.index_count as u32 >= self.index_num
    }

    fn slot_pos(&self, hash: i32) -> u64 {
        INDEX_HEADER_SIZE + (hash as u32 % self.slot_num) as u64 * SLOT_SIZE
    }

    fn entry_pos(&self, n: i32) -> u64 {
        INDEX_HEADER_SIZE + u64::from(self.slot_num) * SLOT_SIZE + n as u64 * ENTRY_SIZE
    }

    fn put_key(&mut self, key: &str, phy_offset: i64, store_timestamp: i64) -> bool {
        if self.is_full() {
            return false;
        }
        let hash = index_key_hash(key);
        let slot_pos = self.slot_pos(hash);
        let mut slot_value = rd_i32(self.mf.slice(slot_pos, 4));
        if slot_value <= 0 || slot_value > self.index_count {
            slot_value = 0;
        }
        let time_diff = if self.begin_timestamp <= 0 {
            0
        } else {
            ((store_timestamp - self.begin_timestamp) / 1000).clamp(0, i64::from(i32::MAX))
        };
        let mut e = [0u8; ENTRY_SIZE as usize];
        e[0..4].copy_from_slice(&hash.to_be_bytes());
        e[4..12].copy_from_slice(&phy_offset.to_be_bytes());
        e[12..16].copy_from_slice(&(time_diff as i32).to_be_bytes());
        e[16..20].copy_from_slice(&slot_value.to_be_bytes());
        self.mf.write_at(self.entry_pos(self.index_count), &e);
        self.mf.write_at(slot_pos, &self.index_count.to_be_bytes());
        if self.index_count <= 1 {
            self.begin_phy_offset = phy_offset;
            self.begin_timestamp = store_timestamp;
        }
        if slot_value == 0 {
            self.hash_slot_count += 1;
        }
        self.index_count += 1;
        self.end_phy_offset = phy_offset;
        self.end_timestamp = store_timestamp;
        self.write_header();
        true
    }

    fn time_overlaps(&self, begin: i64, end: i64) -> bool {
        self.begin_timestamp <= end && self.end_timestamp >= begin
    }

    fn select(&self, out: &mut Vec<i64>, key: &str, max_num: usize, begin: i64, end: i64) {
        let hash = index_key_hash(key);
        let mut next = rd_i32(self.mf.slice(self.slot_pos(hash), 4));
        if next <= 0 || next > self.index_count || self.index_count <= 1 {
            return;
        }
        while out.len() < max_num {
            let e = self.mf.slice(self.entry_pos(next), ENTRY_SIZE as usize);
            let (h, phy, diff, prev) = (
                rd_i32(e),
                rd_i64(&e[4..]),
                rd_i32(&e[12..]),
                rd_i32(&e[16..]),
            );
            if diff < 0 {
                break;
            }
            let t = self.begin_timestamp + i64::from(diff) * 1000;
            if h == hash && t >= begin && t <= end {
                out.push(phy);
            }
            if prev <= 0 || prev > self.index_count || prev == next || t < begin {
                break;
            }
            next = prev;
        }
    }
}

/// The index files of a store.
pub struct IndexService {
    dir: PathBuf,
    slot_num: u32,
    index_num: u32,
    files: Vec<IndexFile>,
    /// `topic#key` of the entry being written, reused so indexing allocates nothing per
    /// record.
    key_buf: String,
}

impl IndexService {
    /// Loads `index/` (files whose size does not match the configured geometry are
    /// skipped with a warning rather than misread).
    pub fn load(dir: &Path, slot_num: u32, index_num: u32) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::io("create_dir", dir, e))?;
        let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| StoreError::io("read_dir", dir, e))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.len() == 17 && n.bytes().all(|b| b.is_ascii_digit()))
            })
            .collect();
        names.sort();
        let mut files = Vec::new();
        for p in names {
            match IndexFile::open(&p, slot_num, index_num) {
                Ok(f) => files.push(f),
                Err(e) => tracing::warn!(error = %e, "skipping index file"),
            }
        }
        Ok(IndexService {
            dir: dir.to_path_buf(),
            slot_num,
            index_num,
            files,
            key_buf: String::new(),
        })
    }

    /// End physical offset of the newest file (dispatch skips records below it).
    pub fn end_phy_offset(&self) -> i64 {
        self.files.last().map(|f| f.end_phy_offset).unwrap_or(0)
    }

    /// After recovery truncated the CommitLog to `phys_end`: entries past it point at
    /// nothing (queries verify records), and new records there must be indexed again.
    pub fn truncate_to(&mut self, phys_end: i64) {
        if let Some(f) = self.files.last_mut() {
            if f.end_phy_offset > phys_end {
                f.end_phy_offset = phys_end;
                f.write_header();
            }
        }
    }

    /// Deletes `index/` files whose end timestamp is after `index_ts` (abnormal start).
    pub fn delete_after_timestamp(&mut self, index_ts: i64) {
        self.files.retain(|f| {
            if f.end_timestamp > index_ts && index_ts > 0 {
                let _ = f.mf.destroy();
                false
            } else {
                true
            }
        });
    }

    fn writable_file(&mut self, store_timestamp: i64) -> Result<&mut IndexFile, StoreError> {
        let need_new = self.files.last().is_none_or(|f| f.is_full());
        if need_new {
            let (ts, phy) = self
                .files
                .last()
                .map(|f| (f.end_timestamp, f.end_phy_offset))
                .unwrap_or((0, 0));
            if let Some(prev) = self.files.last() {
                let _ = prev.mf.flush_range(0, prev.mf.size());
            }
            let mut name = local_time_file_name(store_timestamp.max(crate::util::now_ms()));
            while self
                .files
                .iter()
                .any(|f| f.mf.path().file_name().and_then(|n| n.to_str()) == Some(name.as_str()))
            {
                // Two files in the same millisecond: bump the name.
                let n: u128 = name.parse().unwrap_or(0) + 1;
                name = format!("{n:017}");
            }
            let f =
                IndexFile::create(&self.dir.join(name), self.slot_num, self.index_num, ts, phy)?;
            self.files.push(f);
        }
        Ok(self.files.last_mut().expect("index file just ensured"))
    }

    /// Indexes one dispatched record: `topic#UNIQ_KEY` and `topic#key` for each KEYS token.
    pub fn build_index(
        &mut self,
        topic: &str,
        uniq_key: Option<&str>,
        keys: Option<&str>,
        phy_offset: i64,
        store_timestamp: i64,
    ) -> Result<(), StoreError> {
        if phy_offset < self.end_phy_offset() {
            return Ok(());
        }
        let mut indexed = false;
        if let Some(u) = uniq_key.filter(|u| !u.is_empty()) {
            self.index_key(topic, u, phy_offset, store_timestamp)?;
            indexed = true;
        }
        for k in keys.into_iter().flat_map(|k| k.split(' ')) {
            if !k.is_empty() {
                self.index_key(topic, k, phy_offset, store_timestamp)?;
                indexed = true;
            }
        }
        if !indexed {
            // Still advance the end offset so re-dispatch skips this record.
            if let Some(f) = self.files.last_mut() {
                f.end_phy_offset = phy_offset;
            }
        }
        Ok(())
    }

    /// Writes the entry of `topic#key`, into a new file when the current one is full.
    fn index_key(
        &mut self,
        topic: &str,
        key: &str,
        phy_offset: i64,
        store_timestamp: i64,
    ) -> Result<(), StoreError> {
        let mut full = std::mem::take(&mut self.key_buf);
        full.clear();
        full.push_str(topic);
        full.push('#');
        full.push_str(key);
        let f = self.writable_file(store_timestamp)?;
        if !f.put_key(&full, phy_offset, store_timestamp) {
            let f = self.writable_file(store_timestamp)?;
            f.put_key(&full, phy_offset, store_timestamp);
        }
        self.key_buf = full;
        Ok(())
    }

    /// Physical offsets of records whose `topic#key` hash matches, newest files first.
    pub fn query(&self, topic: &str, key: &str, max_num: usize, begin: i64, end: i64) -> Vec<i64> {
        let full = format!("{topic}#{key}");
        let mut out = Vec::new();
        for f in self.files.iter().rev() {
            if out.len() >= max_num {
                break;
            }
            if f.time_overlaps(begin, end) {
                f.select(&mut out, &full, max_num, begin, end);
            }
            if f.begin_timestamp < begin {
                break;
            }
        }
        out
    }

    /// The newest file's mapping, for a flush made without holding the service's lock:
    /// an msync of scattered hash-slot pages can take milliseconds, and the reput stage
    /// needs the lock for every record it indexes.
    pub fn newest_mapping(&self) -> Option<Arc<MappedFile>> {
        self.files.last().map(|f| Arc::clone(&f.mf))
    }

    /// End timestamp of the newest full file (checkpoint indexMsgTimestamp).
    pub fn last_full_end_timestamp(&self) -> i64 {
        self.files
            .iter()
            .rev()
            .find(|f| f.is_full())
            .map(|f| f.end_timestamp)
            .unwrap_or(0)
    }

    /// Deletes files (except the newest) whose end offset is below `commit_log_min`.
    pub fn delete_expired(&mut self, commit_log_min: i64) {
        while self.files.len() > 1 && self.files[0].end_phy_offset < commit_log_min {
            let f = self.files.remove(0);
            let _ = f.mf.destroy();
        }
    }

    pub fn file_count(&self) -> usize {
        self.files.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_and_files_roll() {
        let dir = crate::test_util::temp_dir("index");
        let mut s = IndexService::load(&dir, 8, 5).unwrap();
        s.build_index("T", Some("U1"), Some("k1 k2"), 100, 1_700_000_000_000)
            .unwrap();
        s.build_index("T", Some("U2"), Some("k1"), 200, 1_700_000_001_000)
            .unwrap();
        assert_eq!(s.file_count(), 2, "4 entries per file, 5 keys");
        let all = (0, i64::MAX);
        let mut hits = s.query("T", "k1", 10, all.0, all.1);
        hits.sort();
        assert_eq!(hits, vec![100, 200]);
        assert_eq!(s.query("T", "U2", 10, all.0, all.1), vec![200]);
        assert!(s.query("T", "nope", 10, all.0, all.1).is_empty());
        assert!(s
            .query("T", "k1", 10, 1_800_000_000_000, i64::MAX)
            .is_empty());
        s.build_index("T", Some("U1"), None, 150, 1_700_000_000_500)
            .unwrap();
        assert_eq!(
            s.query("T", "U1", 10, all.0, all.1),
            vec![100],
            "below end offset: skipped"
        );
        let mf = s.newest_mapping().unwrap();
        mf.flush_range(0, mf.size()).unwrap();
        drop(s);
        let s = IndexService::load(&dir, 8, 5).unwrap();
        assert_eq!(s.end_phy_offset(), 200);
        assert_eq!(s.query("T", "U2", 10, all.0, all.1), vec![200]);
        assert_eq!(index_key_hash("polygenelubricants"), 0);
    }
}
