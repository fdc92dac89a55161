//! The replicated state machine: applies each committed event batch to the controller's
//! [`ReplicasInfo`] (shared with the request path, which validates writes against it), and
//! keeps the latest snapshot in `raft-snapshot.json` under `controllerStorePath`. A
//! restarted controller starts from that snapshot and re-applies the committed entries
//! after it.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    BasicNode, EntryPayload, ErrorSubject, ErrorVerb, OptionalSend, RaftLogId, StoredMembership,
};
use ringmq_sync::LockExt;
use serde::{Deserialize, Serialize};

use super::{io_error, Entry, LogId, NodeId, StorageError, TypeConfig};
use crate::event::Event;
use crate::replicas::ReplicasInfo;

const SNAPSHOT_FILE: &str = "raft-snapshot.json";

/// What the state machine holds: the tables and how far the log has been applied.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Applied {
    pub replicas: ReplicasInfo,
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership<NodeId, BasicNode>,
}

/// The tables as the request path reads them (a short lock; never held across an await).
#[derive(Clone, Default)]
pub struct SharedState(Arc<Mutex<Applied>>);

impl SharedState {
    pub fn lock(&self) -> MutexGuard<'_, Applied> {
        // A panic while applying cannot leave half an event: apply() works on a copy.
        self.0.lock_unpoisoned()
    }
}

#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    meta: SnapshotMeta<NodeId, BasicNode>,
    data: Vec<u8>,
}

pub struct StateMachine {
    state: SharedState,
    dir: PathBuf,
    snapshot_seq: u64,
}

fn snap_err(e: impl std::fmt::Display) -> StorageError {
    io_error(ErrorSubject::Snapshot(None), ErrorVerb::Write, e)
}

impl StateMachine {
    /// Opens the state machine in `dir`, starting from its snapshot if there is one.
    pub fn open(dir: &Path, state: SharedState) -> std::io::Result<StateMachine> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(SNAPSHOT_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let file: SnapshotFile = serde_json::from_slice(&bytes)
                    .map_err(|e| std::io::Error::other(format!("{}: {e}", path.display())))?;
                let applied: Applied = serde_json::from_slice(&file.data)
                    .map_err(|e| std::io::Error::other(format!("{}: {e}", path.display())))?;
                *state.lock() = applied;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(StateMachine {
            state,
            dir: dir.to_owned(),
            snapshot_seq: 0,
        })
    }

    /// Writes the snapshot file through a temporary file, fsynced, then renamed.
    fn persist(&self, file: &SnapshotFile) -> std::io::Result<()> {
        let bytes = serde_json::to_vec(file).map_err(std::io::Error::other)?;
        let path = self.dir.join(SNAPSHOT_FILE);
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, &bytes)
            .and_then(|_| std::fs::File::open(&tmp)?.sync_all())
            .and_then(|_| std::fs::rename(&tmp, &path))
    }

    fn read_snapshot_file(&self) -> std::io::Result<Option<SnapshotFile>> {
        match std::fs::read(self.dir.join(SNAPSHOT_FILE)) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(std::io::Error::other),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Applies one event batch's events to `replicas`, in order.
fn apply_batch(replicas: &mut ReplicasInfo, events: &[Vec<u8>], log_id: &LogId) {
    for bytes in events {
        match Event::decode(bytes) {
            Ok(event) => replicas.apply(&event),
            // Only the leader's own encoder writes these; a bad one is skipped on every
            // controller alike, so the tables stay identical.
            Err(e) => {
                tracing::error!(%log_id, error = %e, "undecodable controller event in the Raft log; skipped")
            }
        }
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let applied = self.state.lock().clone();
        let data = serde_json::to_vec(&applied).map_err(snap_err)?;
        self.snapshot_seq += 1;
        let last = applied.last_applied;
        let meta = SnapshotMeta {
            last_log_id: last,
            last_membership: applied.membership.clone(),
            snapshot_id: format!("{}-{}", last.map_or(0, |l| l.index), self.snapshot_seq),
        };
        let file = SnapshotFile {
            meta: meta.clone(),
            data: data.clone(),
        };
        self.persist(&file).map_err(snap_err)?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId>, StoredMembership<NodeId, BasicNode>), StorageError> {
        let s = self.state.lock();
        Ok((s.last_applied, s.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut results = Vec::new();
        let mut s = self.state.lock();
        for entry in entries {
            let log_id = *entry.get_log_id();
            match &entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(batch) => {
                    // Applied to a copy so a panic in one event leaves the tables whole.
                    let mut next = s.replicas.clone();
                    apply_batch(&mut next, &batch.events, &log_id);
                    s.replicas = next;
                }
                EntryPayload::Membership(m) => {
                    s.membership = StoredMembership::new(Some(log_id), m.clone());
                }
            }
            s.last_applied = Some(log_id);
            results.push(());
        }
        Ok(results)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.snapshot_seq += 1;
        StateMachine {
            state: self.state.clone(),
            dir: self.dir.clone(),
            snapshot_seq: self.snapshot_seq,
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let mut applied: Applied = serde_json::from_slice(&data).map_err(snap_err)?;
        applied.last_applied = meta.last_log_id;
        applied.membership = meta.last_membership.clone();
        let file = SnapshotFile {
            meta: meta.clone(),
            data: serde_json::to_vec(&applied).map_err(snap_err)?,
        };
        self.persist(&file).map_err(snap_err)?;
        *self.state.lock() = applied;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        Ok(self
            .read_snapshot_file()
            .map_err(snap_err)?
            .map(|f| Snapshot {
                meta: f.meta,
                snapshot: Box::new(Cursor::new(f.data)),
            }))
    }
}
