//! StoreCheckpoint (`checkpoint`, 4096 bytes): physicMsgTimestamp @0, logicsMsgTimestamp @8,
//! indexMsgTimestamp @16, masterFlushedOffset @24, confirmPhyOffset @32 (`store.md` §10.1).
//! Written with pwrite + fdatasync by the housekeeping thread and at shutdown.

use crate::error::StoreError;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Size of the checkpoint file.
pub const CHECKPOINT_FILE_SIZE: u64 = 4096;

/// The checkpoint's values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckpointData {
    pub physic_msg_timestamp: i64,
    pub logics_msg_timestamp: i64,
    pub index_msg_timestamp: i64,
    pub master_flushed_offset: i64,
    pub confirm_phy_offset: i64,
}

impl CheckpointData {
    /// `max(0, min(physic, logics) - 3000)`.
    pub fn min_timestamp(&self) -> i64 {
        (self.physic_msg_timestamp.min(self.logics_msg_timestamp) - 3000).max(0)
    }
    /// `min(minTimestamp, index)`.
    pub fn min_timestamp_index(&self) -> i64 {
        self.min_timestamp().min(self.index_msg_timestamp)
    }
}

/// The open checkpoint file.
pub struct Checkpoint {
    path: PathBuf,
    file: File,
}

impl Checkpoint {
    /// Opens (creating a zeroed 4096-byte file if missing) and reads the values.
    pub fn open(path: &Path) -> Result<(Self, CheckpointData), StoreError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| StoreError::io("open", path, e))?;
        let len = file
            .metadata()
            .map_err(|e| StoreError::io("stat", path, e))?
            .len();
        if len < CHECKPOINT_FILE_SIZE {
            file.set_len(CHECKPOINT_FILE_SIZE)
                .map_err(|e| StoreError::io("set_len", path, e))?;
        }
        let mut b = [0u8; 40];
        file.read_exact_at(&mut b, 0)
            .map_err(|e| StoreError::io("read", path, e))?;
        let g = |i: usize| i64::from_be_bytes(b[i..i + 8].try_into().unwrap_or_default());
        let data = CheckpointData {
            physic_msg_timestamp: g(0),
            logics_msg_timestamp: g(8),
            index_msg_timestamp: g(16),
            master_flushed_offset: g(24),
            confirm_phy_offset: g(32),
        };
        Ok((
            Checkpoint {
                path: path.to_path_buf(),
                file,
            },
            data,
        ))
    }

    /// Writes and syncs the values.
    pub fn write(&self, d: &CheckpointData) -> Result<(), StoreError> {
        let mut b = [0u8; 40];
        for (i, v) in [
            d.physic_msg_timestamp,
            d.logics_msg_timestamp,
            d.index_msg_timestamp,
            d.master_flushed_offset,
            d.confirm_phy_offset,
        ]
        .iter()
        .enumerate()
        {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_be_bytes());
        }
        self.file
            .write_all_at(&b, 0)
            .map_err(|e| StoreError::io("write", &self.path, e))?;
        self.file
            .sync_data()
            .map_err(|e| StoreError::io("fdatasync", &self.path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_min_timestamps() {
        let dir = crate::test_util::temp_dir("checkpoint");
        let p = dir.join("checkpoint");
        let (c, d) = Checkpoint::open(&p).unwrap();
        assert_eq!(d, CheckpointData::default());
        let d = CheckpointData {
            physic_msg_timestamp: 10_000,
            logics_msg_timestamp: 9_000,
            index_msg_timestamp: 1_000,
            master_flushed_offset: 0,
            confirm_phy_offset: 77,
        };
        c.write(&d).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 4096);
        let (_, back) = Checkpoint::open(&p).unwrap();
        assert_eq!(back, d);
        assert_eq!(back.min_timestamp(), 6_000);
        assert_eq!(back.min_timestamp_index(), 1_000);
    }
}
