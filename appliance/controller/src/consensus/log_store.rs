//! The Raft log on disk, under `controllerStorePath`:
//! - `raft-log.jsonl`: one operation per line (append an entry, truncate from an index,
//!   purge up to a log id), fsynced before an append is reported flushed. Reopening
//!   replays it; a torn last line (a crash mid-write) is cut off. After enough operations
//!   behind a purge the file is rewritten with only the live entries.
//! - `raft-vote.json`: the vote, written to a temporary file, fsynced and renamed, since a
//!   vote forgotten after a crash could elect two leaders in one term.
//! - `raft-committed.json`: the commit index, renamed into place without fsync (losing it
//!   only makes a restarted controller wait for the leader to re-commit).
//!
//! The controller writes a few entries per broker event, so the whole log is also kept in
//! memory; snapshots bound it.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{ErrorSubject, ErrorVerb, OptionalSend, RaftLogId, Vote};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use super::{io_error, Entry, LogId, NodeId, StorageError, TypeConfig};

const LOG_FILE: &str = "raft-log.jsonl";
const VOTE_FILE: &str = "raft-vote.json";
const COMMITTED_FILE: &str = "raft-committed.json";
/// Operations written since the last rewrite before a purge rewrites the file.
const REWRITE_AFTER_OPS: usize = 4_096;

#[derive(Serialize, Deserialize)]
enum Op {
    Append(Entry),
    Truncate(u64),
    Purge(LogId),
}

struct Inner {
    dir: PathBuf,
    file: File,
    log: BTreeMap<u64, Entry>,
    last_purged: Option<LogId>,
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId>,
    ops_since_rewrite: usize,
}

/// The log store; clones share it (openraft's log readers are clones).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<Inner>>,
}

fn write_err(e: impl std::fmt::Display) -> StorageError {
    io_error(ErrorSubject::Logs, ErrorVerb::Write, e)
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> std::io::Result<Option<T>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| std::io::Error::other(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `value` to `path` through a temporary file and a rename; fsyncs first when
/// `durable`.
fn write_json<T: Serialize>(path: &Path, value: &T, durable: bool) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp)?;
    f.write_all(&serde_json::to_vec(value).map_err(std::io::Error::other)?)?;
    if durable {
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

impl LogStore {
    /// Opens (or creates) the log in `dir`, replaying what an earlier run wrote.
    pub fn open(dir: &Path) -> std::io::Result<LogStore> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(LOG_FILE);
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)?;
        let mut log = BTreeMap::new();
        let mut last_purged = None;
        let (good_len, ops) = replay(&mut file, |op| match op {
            Op::Append(e) => {
                log.insert(e.log_id.index, e);
            }
            Op::Truncate(index) => {
                log.split_off(&index);
            }
            Op::Purge(id) => {
                log = log.split_off(&(id.index + 1));
                last_purged = Some(id);
            }
        })?;
        if good_len < file.metadata()?.len() {
            tracing::warn!(path = %path.display(), good_len, "Raft log ends in a torn line; cutting it off");
            file.set_len(good_len)?;
            file.sync_all()?;
        }
        let inner = Inner {
            dir: dir.to_owned(),
            file,
            log,
            last_purged,
            vote: read_json(&dir.join(VOTE_FILE))?,
            committed: read_json(&dir.join(COMMITTED_FILE))?,
            ops_since_rewrite: ops,
        };
        Ok(LogStore {
            inner: Arc::new(Mutex::new(inner)),
        })
    }
}

/// Replays every complete line of `file` into `apply`; returns the length of the good
/// prefix and the number of operations.
fn replay(file: &mut File, mut apply: impl FnMut(Op)) -> std::io::Result<(u64, usize)> {
    file.seek(std::io::SeekFrom::Start(0))?;
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    let (mut good_len, mut ops) = (0u64, 0usize);
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line)?;
        if n == 0 || line.last() != Some(&b'\n') {
            break;
        }
        match serde_json::from_slice::<Op>(&line) {
            Ok(op) => apply(op),
            Err(_) => break,
        }
        good_len += n as u64;
        ops += 1;
    }
    Ok((good_len, ops))
}

impl Inner {
    fn write_ops(&mut self, ops: &[Op]) -> std::io::Result<()> {
        let mut buf = Vec::new();
        for op in ops {
            serde_json::to_writer(&mut buf, op).map_err(std::io::Error::other)?;
            buf.push(b'\n');
        }
        self.file.write_all(&buf)?;
        self.file.sync_data()?;
        self.ops_since_rewrite += ops.len();
        Ok(())
    }

    /// Rewrites the log file with the live entries only (after a purge).
    fn rewrite(&mut self) -> std::io::Result<()> {
        let path = self.dir.join(LOG_FILE);
        let tmp = self.dir.join("raft-log.tmp");
        let mut buf = Vec::new();
        let mut ops = 0;
        if let Some(id) = self.last_purged {
            serde_json::to_writer(&mut buf, &Op::Purge(id)).map_err(std::io::Error::other)?;
            buf.push(b'\n');
            ops += 1;
        }
        for entry in self.log.values() {
            serde_json::to_writer(&mut buf, &Op::Append(entry.clone()))
                .map_err(std::io::Error::other)?;
            buf.push(b'\n');
            ops += 1;
        }
        let mut f = File::create(&tmp)?;
        f.write_all(&buf)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        self.file = OpenOptions::new().read(true).append(true).open(&path)?;
        self.ops_since_rewrite = ops;
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let inner = self.inner.lock().await;
        Ok(inner.log.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let inner = self.inner.lock().await;
        let last = inner
            .log
            .values()
            .next_back()
            .map(|e| *e.get_log_id())
            .or(inner.last_purged);
        Ok(LogState {
            last_purged_log_id: inner.last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        let mut inner = self.inner.lock().await;
        write_json(&inner.dir.join(VOTE_FILE), vote, true)
            .map_err(|e| io_error(ErrorSubject::Vote, ErrorVerb::Write, e))?;
        inner.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        Ok(self.inner.lock().await.vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let mut inner = self.inner.lock().await;
        write_json(&inner.dir.join(COMMITTED_FILE), &committed, false).map_err(write_err)?;
        inner.committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.inner.lock().await.committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut inner = self.inner.lock().await;
        let entries: Vec<Entry> = entries.into_iter().collect();
        let ops: Vec<Op> = entries.iter().cloned().map(Op::Append).collect();
        let written = inner.write_ops(&ops);
        if written.is_ok() {
            for e in entries {
                inner.log.insert(e.log_id.index, e);
            }
        }
        let result = written
            .as_ref()
            .map(|_| ())
            .map_err(|e| std::io::Error::new(e.kind(), e.to_string()));
        callback.log_io_completed(result);
        written.map_err(write_err)
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut inner = self.inner.lock().await;
        inner
            .write_ops(&[Op::Truncate(log_id.index)])
            .map_err(write_err)?;
        inner.log.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut inner = self.inner.lock().await;
        inner.write_ops(&[Op::Purge(log_id)]).map_err(write_err)?;
        inner.log = inner.log.split_off(&(log_id.index + 1));
        inner.last_purged = Some(log_id);
        if inner.ops_since_rewrite > REWRITE_AFTER_OPS {
            inner.rewrite().map_err(write_err)?;
        }
        Ok(())
    }
}
