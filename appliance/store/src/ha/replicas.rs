//! Controller mode's replication state (spec features.md §g.3), shared by the HA stage,
//! the HA client, the append path and the broker: the epoch cache and its file, this
//! broker's controller id, the SyncStateSet the controller last confirmed, the confirm
//! offset, and a truncation the slave could not make while the store runs.
//!
//! A diverged slave (a former master holding records its successor never received) must
//! cut its CommitLog back to the last offset both logs agree on. The stages own the
//! CommitLog tail, the ConsumeQueues and the dispatch position while the store runs, so
//! the cut is made where recovery already makes one: the HA client records the offset in
//! [`TRUNCATE_FILE_NAME`], asks the broker to reopen its store, and recovery truncates
//! there before any stage starts.

use super::epoch::{EpochCache, EpochEntry, EpochFile};
use ringmq_sync::LockExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// ringmq's file under the store root holding the offset recovery must truncate to.
pub const TRUNCATE_FILE_NAME: &str = "ringmq-ha-truncate";
/// Most SyncStateSet members kept (a replica group is a handful of brokers).
const MAX_SYNC_STATE_SET_MEMBERS: usize = 64;

/// The SyncStateSet as this broker knows it, and its epoch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncStateView {
    pub members: Vec<i64>,
    pub epoch: i32,
}

#[derive(Default)]
pub(crate) struct ReplicaState {
    epochs: Mutex<EpochCache>,
    file: Mutex<Option<EpochFile>>,
    /// Master: the offset every connected SyncStateSet member holds; slave: the master's,
    /// as its frames carry it. -1 before the first value.
    pub confirm_offset: AtomicI64,
    /// This broker's controller-assigned id (-1 before registration).
    pub local_broker_id: AtomicI64,
    sync_state_set: Mutex<SyncStateView>,
    /// Members of `sync_state_set`, read on the dispatch path without the lock.
    sync_state_set_size: AtomicUsize,
    /// Why, and to which offset, the store must reopen (a slave that must truncate).
    reopen: Mutex<Option<(u64, String)>>,
}

impl ReplicaState {
    pub fn new() -> Self {
        ReplicaState {
            confirm_offset: AtomicI64::new(-1),
            local_broker_id: AtomicI64::new(-1),
            ..Default::default()
        }
    }

    /// Loads `epochFileCheckpoint` from `root`, dropping entries past the recovered
    /// CommitLog (`max_offset`) and entries wholly below its oldest byte.
    pub fn open(&self, root: &Path, min_offset: u64, max_offset: u64) -> std::io::Result<()> {
        let file = EpochFile::in_store_root(root);
        let mut cache = file.load()?;
        cache.truncate_suffix_by_offset(max_offset as i64 + 1);
        cache.truncate_prefix_by_offset(min_offset as i64);
        store_or_remove(&file, &cache)?;
        *self.epochs.lock_unpoisoned() = cache;
        *self.file.lock_unpoisoned() = Some(file);
        Ok(())
    }

    /// (epoch, start offset) of every entry, oldest first.
    pub fn epoch_entries(&self) -> Vec<(i32, i64)> {
        let cache = self.epochs.lock_unpoisoned();
        cache.entries().map(|e| (e.epoch, e.start_offset)).collect()
    }

    pub fn epochs(&self) -> EpochCache {
        self.epochs.lock_unpoisoned().clone()
    }

    pub fn last_epoch(&self) -> i32 {
        self.epochs.lock_unpoisoned().last_epoch()
    }

    /// The entry whose range holds `offset`.
    pub fn entry_for(&self, offset: u64) -> Option<EpochEntry> {
        self.epochs.lock_unpoisoned().find_by_offset(offset as i64)
    }

    /// Records that `epoch` writes from `start_offset` on: entries of `epoch` and later
    /// go first (a master re-elected, or a slave re-reading its new master's stream).
    pub fn append_epoch(&self, epoch: i32, start_offset: u64) -> Result<(), String> {
        let mut cache = self.epochs.lock_unpoisoned();
        if cache
            .last()
            .is_some_and(|l| l.epoch == epoch && l.start_offset <= start_offset as i64)
        {
            return Ok(());
        }
        // An epoch that wrote nothing (it starts where the new one does) was never sent
        // to a slave: it goes too.
        cache.truncate_suffix_by_epoch(epoch);
        if cache
            .last()
            .is_some_and(|l| l.start_offset == start_offset as i64)
        {
            cache.truncate_suffix_by_offset(start_offset as i64);
        }
        if !cache.append(epoch, start_offset as i64) {
            return Err(format!(
                "epoch {epoch} at offset {start_offset} does not follow the last epoch entry {:?}",
                cache.last()
            ));
        }
        self.persist(&cache)
    }

    /// Drops the entries at or past `offset` (the log is cut there).
    pub fn truncate_epochs_from(&self, offset: u64) -> Result<(), String> {
        let mut cache = self.epochs.lock_unpoisoned();
        cache.truncate_suffix_by_offset(offset as i64);
        self.persist(&cache)
    }

    fn persist(&self, cache: &EpochCache) -> Result<(), String> {
        match &*self.file.lock_unpoisoned() {
            Some(file) => store_or_remove(file, cache)
                .map_err(|e| format!("cannot write {}: {e}", EpochFile::FILE_NAME)),
            None => Ok(()),
        }
    }

    /// The controller's SyncStateSet, when its epoch is newer than the one held.
    pub fn set_sync_state_set(&self, members: &[i64], epoch: i32) -> bool {
        let mut view = self.sync_state_set.lock_unpoisoned();
        if epoch < view.epoch {
            return false;
        }
        view.members = members
            .iter()
            .copied()
            .take(MAX_SYNC_STATE_SET_MEMBERS)
            .collect();
        view.members.sort_unstable();
        view.members.dedup();
        view.epoch = epoch;
        self.sync_state_set_size
            .store(view.members.len(), Ordering::Release);
        true
    }

    /// Members of the SyncStateSet; a master is always one of its own (1 before the
    /// controller has named any).
    pub fn sync_state_set_size(&self) -> usize {
        self.sync_state_set_size.load(Ordering::Acquire).max(1)
    }

    pub fn sync_state_set(&self) -> SyncStateView {
        self.sync_state_set.lock_unpoisoned().clone()
    }

    /// Slave: the store must reopen and truncate its CommitLog to `offset`.
    pub fn request_reopen(&self, root: &Path, offset: u64, why: String) -> Result<(), String> {
        let path = truncate_file(root);
        std::fs::write(&path, offset.to_string())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        *self.reopen.lock_unpoisoned() = Some((offset, why));
        Ok(())
    }

    pub fn reopen_request(&self) -> Option<(u64, String)> {
        self.reopen.lock_unpoisoned().clone()
    }
}

fn store_or_remove(file: &EpochFile, cache: &EpochCache) -> std::io::Result<()> {
    if cache.is_empty() {
        return match std::fs::remove_file(file.path()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    file.store(cache)
}

pub fn truncate_file(root: &Path) -> PathBuf {
    root.join(TRUNCATE_FILE_NAME)
}

/// The truncation a slave asked for before its store closed, if any.
pub fn pending_truncation(root: &Path) -> Option<u64> {
    let path = truncate_file(root);
    let text = std::fs::read_to_string(&path).ok()?;
    match text.trim().parse() {
        Ok(offset) => Some(offset),
        Err(_) => {
            tracing::warn!(path = %path.display(), "ignoring a truncation file that holds no offset");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_persist_and_a_new_master_epoch_replaces_later_ones() {
        let dir = crate::test_util::temp_dir("replica-state");
        let state = ReplicaState::new();
        state.open(&dir, 0, 0).unwrap();
        state.append_epoch(1, 0).unwrap();
        state.append_epoch(2, 500).unwrap();
        state.append_epoch(3, 900).unwrap();
        // The last epoch again: nothing changes.
        state.append_epoch(3, 900).unwrap();
        assert_eq!(state.epoch_entries(), vec![(1, 0), (2, 500), (3, 900)]);
        // Epoch 4 elected before epoch 3 wrote anything: 3 goes.
        state.append_epoch(4, 900).unwrap();
        assert_eq!(state.epoch_entries(), vec![(1, 0), (2, 500), (4, 900)]);
        state.truncate_epochs_from(900).unwrap();
        assert_eq!(state.epoch_entries(), vec![(1, 0), (2, 500)]);
        assert!(
            state.append_epoch(4, 100).is_err(),
            "a start below the last entry's"
        );
        let reopened = ReplicaState::new();
        reopened.open(&dir, 0, 10_000).unwrap();
        assert_eq!(reopened.epoch_entries(), vec![(1, 0), (2, 500)]);
        let cut = ReplicaState::new();
        cut.open(&dir, 0, 499).unwrap();
        assert_eq!(
            cut.epoch_entries(),
            vec![(1, 0)],
            "entries past the log go at open"
        );
    }

    #[test]
    fn sync_state_sets_only_move_forward() {
        let state = ReplicaState::new();
        assert!(state.set_sync_state_set(&[3, 1, 1], 2));
        assert!(!state.set_sync_state_set(&[1], 1));
        assert_eq!(
            state.sync_state_set(),
            SyncStateView {
                members: vec![1, 3],
                epoch: 2
            }
        );
    }

    #[test]
    fn a_reopen_request_leaves_its_offset_for_recovery() {
        let dir = crate::test_util::temp_dir("replica-reopen");
        let state = ReplicaState::new();
        assert_eq!(pending_truncation(&dir), None);
        state.request_reopen(&dir, 4096, "diverged".into()).unwrap();
        assert_eq!(pending_truncation(&dir), Some(4096));
        assert_eq!(state.reopen_request(), Some((4096, "diverged".to_string())));
    }
}
