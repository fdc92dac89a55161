//! The epoch cache of controller mode (upstream `EpochFileCache`, spec features.md §g.3):
//! which master epoch wrote which range of the CommitLog, and its file
//! `<storePathRootDir>/epochFileCheckpoint`. A slave compares its entries with its new
//! master's to find the last offset both logs agree on and truncates there; a broker that
//! becomes master appends an entry at its max offset.
//!
//! The file is upstream's checkpoint text: the entry count, the masked CRC32 (UtilAll's
//! `crc32 & 0x7FFFFFFF`) of the entry lines, then one `<epoch>-<startOffset>` line per
//! entry, every line ended by `\n`; written through a temporary file with the previous
//! content kept as `.bak`, read back falling back to `.bak`. A CRC of 0 is not checked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config_file::{load_config_file, write_config_file_atomic};

/// Upstream's `NOT_CHECK_CRC_MAGIC_CODE`.
const CRC_NOT_CHECKED: u32 = 0;
/// An open-ended entry's end offset (Java `Long.MAX_VALUE`).
pub const OPEN_END_OFFSET: i64 = i64::MAX;
/// Most entries a cache (or a handshake from a master) may hold: one per master change.
pub const MAX_EPOCH_ENTRIES: usize = 65_536;

/// One epoch: the master epoch and the CommitLog range `[start_offset, end_offset)` its
/// master wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
    pub end_offset: i64,
}

impl EpochEntry {
    pub fn new(epoch: i32, start_offset: i64) -> Self {
        EpochEntry {
            epoch,
            start_offset,
            end_offset: OPEN_END_OFFSET,
        }
    }
}

/// The entries, by epoch; each entry ends where the next starts, the last is open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochCache {
    entries: BTreeMap<i32, EpochEntry>,
}

impl EpochCache {
    /// A cache of `(epoch, start offset)` pairs in epoch order, end offsets chained.
    pub fn from_entries(entries: impl IntoIterator<Item = (i32, i64)>) -> Self {
        let mut cache = EpochCache::default();
        for (epoch, start) in entries {
            cache.entries.insert(epoch, EpochEntry::new(epoch, start));
        }
        cache.chain_end_offsets();
        cache
    }

    fn chain_end_offsets(&mut self) {
        let starts: Vec<(i32, i64)> = self
            .entries
            .values()
            .map(|e| (e.epoch, e.start_offset))
            .collect();
        for pair in starts.windows(2) {
            if let Some(e) = self.entries.get_mut(&pair[0].0) {
                e.end_offset = pair[1].1;
            }
        }
        if let Some((_, last)) = self.entries.iter_mut().next_back() {
            last.end_offset = OPEN_END_OFFSET;
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn entries(&self) -> impl Iterator<Item = &EpochEntry> {
        self.entries.values()
    }

    pub fn first(&self) -> Option<EpochEntry> {
        self.entries.values().next().copied()
    }

    pub fn last(&self) -> Option<EpochEntry> {
        self.entries.values().next_back().copied()
    }

    /// The newest epoch, or -1 with no entry (upstream `lastEpoch`).
    pub fn last_epoch(&self) -> i32 {
        self.last().map_or(-1, |e| e.epoch)
    }

    pub fn get(&self, epoch: i32) -> Option<EpochEntry> {
        self.entries.get(&epoch).copied()
    }

    /// The entry whose range holds `offset`.
    pub fn find_by_offset(&self, offset: i64) -> Option<EpochEntry> {
        self.entries
            .values()
            .find(|e| e.start_offset <= offset && offset < e.end_offset)
            .copied()
    }

    /// The first entry after `epoch` (where a master cuts a transfer frame).
    pub fn next_after(&self, epoch: i32) -> Option<EpochEntry> {
        self.entries
            .range(epoch.saturating_add(1)..)
            .next()
            .map(|(_, e)| *e)
    }

    /// Appends an epoch; refused (false) unless both its epoch and its start offset are
    /// greater than the last entry's, or the cache is full.
    pub fn append(&mut self, epoch: i32, start_offset: i64) -> bool {
        if self.entries.len() >= MAX_EPOCH_ENTRIES {
            return false;
        }
        if let Some((_, last)) = self.entries.iter_mut().next_back() {
            if last.epoch >= epoch || last.start_offset >= start_offset {
                return false;
            }
            last.end_offset = start_offset;
        }
        self.entries
            .insert(epoch, EpochEntry::new(epoch, start_offset));
        true
    }

    /// Closes the last entry at `end_offset` (a log's max offset) when that is not before
    /// its start.
    pub fn set_last_end_offset(&mut self, end_offset: i64) {
        if let Some((_, last)) = self.entries.iter_mut().next_back() {
            if last.start_offset <= end_offset {
                last.end_offset = end_offset;
            }
        }
    }

    /// The last offset this log and `other` agree on: from the newest local epoch down,
    /// the first epoch both hold with the same start gives the smaller of the two end
    /// offsets. `None` when they share no epoch.
    pub fn find_consistent_point(&self, other: &EpochCache) -> Option<i64> {
        self.entries.values().rev().find_map(|local| {
            other
                .get(local.epoch)
                .filter(|o| o.start_offset == local.start_offset)
                .map(|o| local.end_offset.min(o.end_offset))
        })
    }

    /// Drops the entries of `epoch` and later; the new last entry is open.
    pub fn truncate_suffix_by_epoch(&mut self, epoch: i32) {
        self.entries.retain(|e, _| *e < epoch);
        self.reopen_last();
    }

    /// Drops the entries starting at or after `offset` (the log was truncated there).
    pub fn truncate_suffix_by_offset(&mut self, offset: i64) {
        self.entries.retain(|_, e| e.start_offset < offset);
        self.reopen_last();
    }

    /// Drops the entries that end at or before `offset` (old CommitLog files deleted).
    pub fn truncate_prefix_by_offset(&mut self, offset: i64) {
        self.entries.retain(|_, e| e.end_offset > offset);
    }

    fn reopen_last(&mut self) {
        if let Some((_, last)) = self.entries.iter_mut().next_back() {
            last.end_offset = OPEN_END_OFFSET;
        }
    }

    /// The checkpoint text (see the module doc).
    pub fn to_checkpoint_text(&self) -> String {
        let lines: String = self
            .entries
            .values()
            .map(|e| format!("{}-{}\n", e.epoch, e.start_offset))
            .collect();
        format!(
            "{}\n{}\n{lines}",
            self.entries.len(),
            masked_crc32(lines.as_bytes())
        )
    }

    /// Parses checkpoint text; the reason when the count, the CRC or a line is wrong.
    pub fn from_checkpoint_text(text: &str) -> Result<EpochCache, String> {
        let mut lines = text.lines();
        let count: usize = lines
            .next()
            .and_then(|l| l.trim().parse().ok())
            .ok_or("the first line is not an entry count")?;
        let crc: i64 = lines
            .next()
            .and_then(|l| l.trim().parse().ok())
            .ok_or("the second line is not a CRC32")?;
        let mut body = String::new();
        let mut entries = Vec::new();
        for line in lines {
            body.push_str(line);
            body.push('\n');
            // Upstream skips a line that does not split in two.
            let Some((epoch, start)) = line.split_once('-') else {
                continue;
            };
            let epoch: i32 = epoch
                .parse()
                .map_err(|_| format!("bad epoch in {line:?}"))?;
            let start: i64 = start
                .parse()
                .map_err(|_| format!("bad start offset in {line:?}"))?;
            entries.push((epoch, start));
        }
        if entries.len() != count || count > MAX_EPOCH_ENTRIES {
            return Err(format!("expected {count} entries, found {}", entries.len()));
        }
        if crc != i64::from(CRC_NOT_CHECKED) && crc != i64::from(masked_crc32(body.as_bytes())) {
            return Err(format!(
                "entries CRC32 {} does not match {crc}",
                masked_crc32(body.as_bytes())
            ));
        }
        Ok(EpochCache::from_entries(entries))
    }
}

/// UtilAll.crc32: the CRC32 with the sign bit cleared.
fn masked_crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes) & 0x7FFF_FFFF
}

/// The epoch cache's file (`epochFileCheckpoint` under the store root).
#[derive(Debug, Clone)]
pub struct EpochFile {
    path: PathBuf,
}

impl EpochFile {
    pub const FILE_NAME: &'static str = "epochFileCheckpoint";

    pub fn in_store_root(root: &Path) -> EpochFile {
        EpochFile {
            path: root.join(Self::FILE_NAME),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stored cache (from `.bak` when the file is missing or bad); empty when
    /// neither exists.
    pub fn load(&self) -> std::io::Result<EpochCache> {
        let parsed = load_config_file(&self.path, |text| {
            EpochCache::from_checkpoint_text(text)
                .map_err(|e| tracing::warn!(path = %self.path.display(), error = %e, "epoch file is damaged"))
                .ok()
        })?;
        Ok(parsed.unwrap_or_default())
    }

    /// Writes `cache`; upstream writes nothing for an empty cache.
    pub fn store(&self, cache: &EpochCache) -> std::io::Result<()> {
        if cache.is_empty() {
            return Ok(());
        }
        write_config_file_atomic(&self.path, &cache.to_checkpoint_text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_text_is_upstreams_count_crc_and_entry_lines() {
        let cache = EpochCache::from_entries([(1, 0), (2, 4096), (5, 10_000)]);
        let text = cache.to_checkpoint_text();
        let lines = "1-0\n2-4096\n5-10000\n";
        assert_eq!(
            text,
            format!(
                "3\n{}\n{lines}",
                crc32fast::hash(lines.as_bytes()) & 0x7FFF_FFFF
            )
        );
        assert_eq!(EpochCache::from_checkpoint_text(&text).unwrap(), cache);
        // A CRC of 0 is not checked; a wrong one or a wrong count is refused.
        assert_eq!(
            EpochCache::from_checkpoint_text(&format!("3\n0\n{lines}")).unwrap(),
            cache
        );
        assert!(EpochCache::from_checkpoint_text(&format!("3\n12345\n{lines}")).is_err());
        assert!(EpochCache::from_checkpoint_text(&format!("2\n0\n{lines}")).is_err());
        assert!(EpochCache::from_checkpoint_text("x\n").is_err());
        assert!(EpochCache::from_checkpoint_text("1\n0\nnine-1\n").is_err());
    }

    #[test]
    fn entries_chain_end_offsets_and_append_only_moves_forward() {
        let mut c = EpochCache::from_entries([(1, 0), (2, 100)]);
        assert_eq!(c.get(1).unwrap().end_offset, 100);
        assert_eq!(c.get(2).unwrap().end_offset, OPEN_END_OFFSET);
        assert!(!c.append(2, 200), "same epoch");
        assert!(!c.append(3, 100), "same start");
        assert!(c.append(3, 200));
        assert_eq!(c.get(2).unwrap().end_offset, 200);
        assert_eq!(c.find_by_offset(150).unwrap().epoch, 2);
        assert_eq!(c.next_after(1).unwrap().epoch, 2);
        assert_eq!(c.last_epoch(), 3);
        assert_eq!(EpochCache::default().last_epoch(), -1);
    }

    #[test]
    fn the_consistent_point_is_the_newest_shared_epoch_and_the_smaller_end() {
        // The slave wrote epoch 2 past where the new master (epoch 3) took over.
        let mut slave = EpochCache::from_entries([(1, 0), (2, 100)]);
        slave.set_last_end_offset(500);
        let mut master = EpochCache::from_entries([(1, 0), (2, 100), (3, 300)]);
        master.set_last_end_offset(800);
        assert_eq!(slave.find_consistent_point(&master), Some(300));
        // Same start needed: a diverged epoch 2 falls back to epoch 1.
        let other = EpochCache::from_entries([(1, 0), (2, 150)]);
        assert_eq!(slave.find_consistent_point(&other), Some(100));
        assert_eq!(
            slave.find_consistent_point(&EpochCache::from_entries([(7, 0)])),
            None
        );
        slave.truncate_suffix_by_offset(300);
        assert_eq!(slave.last().unwrap(), EpochEntry::new(2, 100));
        slave.truncate_suffix_by_epoch(2);
        assert_eq!(slave.len(), 1);
        let mut old = EpochCache::from_entries([(1, 0), (2, 100), (3, 300)]);
        old.truncate_prefix_by_offset(150);
        assert_eq!(old.first().unwrap().epoch, 2);
    }

    #[test]
    fn the_file_survives_a_lost_primary_through_its_backup() {
        let dir = std::env::temp_dir().join(format!("ringmq-epoch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = EpochFile::in_store_root(&dir);
        assert!(file.load().unwrap().is_empty());
        let first = EpochCache::from_entries([(1, 0)]);
        file.store(&first).unwrap();
        let second = EpochCache::from_entries([(1, 0), (2, 64)]);
        file.store(&second).unwrap();
        assert_eq!(file.load().unwrap(), second);
        std::fs::write(dir.join(EpochFile::FILE_NAME), "garbage").unwrap();
        assert_eq!(
            file.load().unwrap(),
            first,
            "the .bak copy is the previous content"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
