//! The timer checkpoint `config/timercheck` (store.md §13), byte-compatible with RocketMQ's:
//! one 4096-byte page, big-endian `lastReadTimeMs @0 | lastTimerLogFlushPos @8 |
//! lastTimerQueueOffset @16 | masterTimerQueueOffset @24 | dataVersion.stateVersion @32 |
//! dataVersion.timestamp @40 | dataVersion.counter @48`, the rest zero.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Size of the checkpoint file (one OS page, as upstream maps it).
pub const CHECKPOINT_SIZE_BYTES: usize = 4096;
/// The seven fields at the start of the page (also GET_TIMER_CHECK_POINT's body).
pub const CHECKPOINT_FIELDS_BYTES: usize = 56;

/// The checkpoint's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimerCheckpointData {
    /// Every slot before this time has been delivered.
    pub last_read_time_ms: i64,
    /// The timer log is durable up to here.
    pub last_timer_log_flush_pos: i64,
    /// Next `rmq_sys_wheel_timer` queue offset to enqueue (every earlier one is in the log).
    pub last_timer_queue_offset: i64,
    pub master_timer_queue_offset: i64,
    pub state_version: i64,
    pub data_version_timestamp_ms: i64,
    pub data_version_counter: i64,
}

impl TimerCheckpointData {
    pub fn encode(&self) -> [u8; CHECKPOINT_SIZE_BYTES] {
        let mut b = [0u8; CHECKPOINT_SIZE_BYTES];
        for (i, v) in [
            self.last_read_time_ms,
            self.last_timer_log_flush_pos,
            self.last_timer_queue_offset,
            self.master_timer_queue_offset,
            self.state_version,
            self.data_version_timestamp_ms,
            self.data_version_counter,
        ]
        .iter()
        .enumerate()
        {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_be_bytes());
        }
        b
    }

    pub fn decode(b: &[u8]) -> TimerCheckpointData {
        let long = |i: usize| {
            b.get(i * 8..i * 8 + 8)
                .and_then(|s| s.try_into().ok())
                .map_or(0, i64::from_be_bytes)
        };
        TimerCheckpointData {
            last_read_time_ms: long(0),
            last_timer_log_flush_pos: long(1),
            last_timer_queue_offset: long(2),
            master_timer_queue_offset: long(3),
            state_version: long(4),
            data_version_timestamp_ms: long(5),
            data_version_counter: long(6),
        }
    }
}

/// The checkpoint file and its current contents.
pub struct TimerCheckpoint {
    path: PathBuf,
    file: File,
    pub data: TimerCheckpointData,
    /// Whether the file existed with contents at open (a first start has no progress).
    pub existed: bool,
}

impl TimerCheckpoint {
    pub fn open(path: &Path) -> Result<Self, String> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| format!("cannot open the timer checkpoint {}: {e}", path.display()))?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let mut b = vec![0u8; 56];
        let existed = len >= 56 && file.read_exact_at(&mut b, 0).is_ok();
        let data = if existed {
            TimerCheckpointData::decode(&b)
        } else {
            TimerCheckpointData::default()
        };
        Ok(Self {
            path: path.to_path_buf(),
            file,
            data,
            existed,
        })
    }

    /// Writes the page and fsyncs it.
    pub fn flush(&self) -> Result<(), String> {
        self.file
            .write_all_at(&self.data.encode(), 0)
            .and_then(|_| self.file.sync_data())
            .map_err(|e| {
                format!(
                    "cannot write the timer checkpoint {}: {e}",
                    self.path.display()
                )
            })
    }
}
