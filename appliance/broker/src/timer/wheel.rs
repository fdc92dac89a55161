//! The timing wheel file `timerwheel` (features.md §c.3), byte-compatible with RocketMQ's:
//! `2 × SLOTS_TOTAL` slots of [`SLOT_SIZE_BYTES`], each `timeUnits i64 | firstPos i64 |
//! lastPos i64 | num i32 | magic i32`, big-endian. A slot belongs to the time
//! `timeUnits × precision`; a read for another time (a slot left from an earlier turn of the
//! wheel) sees an empty slot.
//!
//! The whole wheel lives in memory; [`TimerWheel::flush`] writes back only the slots changed
//! since the last flush, then fsyncs, so a flush costs what changed, not 38 MB.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Seconds of one wheel turn: 7 days.
pub const SLOTS_TOTAL: usize = 7 * 86_400;
/// Bytes of one slot.
pub const SLOT_SIZE_BYTES: usize = 32;
/// Length of the file: both halves of the wheel.
pub const WHEEL_LENGTH_BYTES: usize = 2 * SLOTS_TOTAL * SLOT_SIZE_BYTES;
/// `firstPos`/`lastPos` of an empty slot.
pub const BLANK_POS: i64 = -1;

/// One slot as read for a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The slot's time (ms), or −1 when the slot is empty for the time asked.
    pub time_ms: i64,
    pub first_pos: i64,
    pub last_pos: i64,
    pub num: i32,
    pub magic: i32,
}

impl Slot {
    pub const EMPTY: Slot = Slot {
        time_ms: -1,
        first_pos: BLANK_POS,
        last_pos: BLANK_POS,
        num: 0,
        magic: 0,
    };

    pub fn is_empty(&self) -> bool {
        self.time_ms == -1
    }
}

/// The wheel: an in-memory copy of the file plus the set of slots not yet written back.
pub struct TimerWheel {
    path: PathBuf,
    file: File,
    precision_ms: i64,
    bytes: Vec<u8>,
    /// Slot indexes changed since the last flush (at most `2 × SLOTS_TOTAL`).
    dirty: BTreeSet<usize>,
}

impl TimerWheel {
    /// Opens (or creates) `path`. A file of another non-zero length is refused, as upstream
    /// refuses it: its slots would be misread.
    pub fn open(path: &Path, precision_ms: i64) -> Result<Self, String> {
        if precision_ms <= 0 {
            return Err(format!(
                "timerPrecisionMs must be positive, got {precision_ms}"
            ));
        }
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
            .map_err(|e| format!("cannot open the timer wheel {}: {e}", path.display()))?;
        let len = file
            .metadata()
            .map_err(|e| format!("cannot stat {}: {e}", path.display()))?
            .len();
        let mut bytes = vec![0u8; WHEEL_LENGTH_BYTES];
        if len != 0 && len != WHEEL_LENGTH_BYTES as u64 {
            return Err(format!(
                "timer wheel {} has {len} bytes, expected {WHEEL_LENGTH_BYTES}",
                path.display()
            ));
        }
        if len == 0 {
            file.set_len(WHEEL_LENGTH_BYTES as u64)
                .map_err(|e| format!("cannot size {}: {e}", path.display()))?;
        } else {
            file.read_exact_at(&mut bytes, 0)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        }
        Ok(Self {
            path: path.to_path_buf(),
            file,
            precision_ms,
            bytes,
            dirty: BTreeSet::new(),
        })
    }

    pub fn precision_ms(&self) -> i64 {
        self.precision_ms
    }

    /// The slot index of a time: time units modulo the file's slot count.
    pub fn slot_index(&self, time_ms: i64) -> usize {
        (time_ms / self.precision_ms).rem_euclid((2 * SLOTS_TOTAL) as i64) as usize
    }

    fn raw(&self, index: usize) -> (i64, i64, i64, i32, i32) {
        let b = &self.bytes[index * SLOT_SIZE_BYTES..(index + 1) * SLOT_SIZE_BYTES];
        let long = |at: usize| i64::from_be_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
        let int = |at: usize| i32::from_be_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]));
        (long(0), long(8), long(16), int(24), int(28))
    }

    /// The slot of `time_ms`, or [`Slot::EMPTY`] when it holds another turn's time.
    pub fn get_slot(&self, time_ms: i64) -> Slot {
        let (units, first_pos, last_pos, num, magic) = self.raw(self.slot_index(time_ms));
        if units != time_ms / self.precision_ms {
            return Slot::EMPTY;
        }
        Slot {
            time_ms: units * self.precision_ms,
            first_pos,
            last_pos,
            num,
            magic,
        }
    }

    /// Messages counted in the slot of `time_ms` (0 for a stale slot).
    pub fn num(&self, time_ms: i64) -> i64 {
        i64::from(self.get_slot(time_ms).num)
    }

    /// Messages counted in every live slot from `start_ms` over one wheel length.
    pub fn all_num(&self, start_ms: i64) -> i64 {
        let start_units = start_ms / self.precision_ms;
        (0..(2 * SLOTS_TOTAL) as i64)
            .map(|i| {
                let units = start_units + i;
                let (u, _, _, num, _) = self.raw(self.slot_index(units * self.precision_ms));
                if u == units {
                    i64::from(num)
                } else {
                    0
                }
            })
            .sum()
    }

    /// Writes the whole slot of `time_ms`.
    pub fn put_slot(&mut self, time_ms: i64, first_pos: i64, last_pos: i64, num: i32, magic: i32) {
        let index = self.slot_index(time_ms);
        let b = &mut self.bytes[index * SLOT_SIZE_BYTES..(index + 1) * SLOT_SIZE_BYTES];
        b[0..8].copy_from_slice(&(time_ms / self.precision_ms).to_be_bytes());
        b[8..16].copy_from_slice(&first_pos.to_be_bytes());
        b[16..24].copy_from_slice(&last_pos.to_be_bytes());
        b[24..28].copy_from_slice(&num.to_be_bytes());
        b[28..32].copy_from_slice(&magic.to_be_bytes());
        self.dirty.insert(index);
    }

    /// Recovery: makes the slot of `time_ms` end at `last_pos`. A stale slot is reset to start
    /// there too (its chain is rebuilt from the log, oldest unit first).
    pub fn revise_last_pos(&mut self, time_ms: i64, last_pos: i64) {
        let slot = self.get_slot(time_ms);
        if slot.is_empty() {
            self.put_slot(time_ms, last_pos, last_pos, 1, 0);
        } else {
            // Units the wheel already linked were counted when they were enqueued.
            let num = if last_pos > slot.last_pos {
                slot.num.saturating_add(1)
            } else {
                slot.num
            };
            self.put_slot(time_ms, slot.first_pos, last_pos, num, slot.magic);
        }
    }

    /// The smallest `firstPos` of a live slot (from `start_ms`, one wheel length) whose
    /// `lastPos` lies at or beyond `log_end`: the wheel points past the recovered log.
    pub fn min_first_beyond(&self, start_ms: i64, log_end: i64) -> Option<i64> {
        let start_units = start_ms / self.precision_ms;
        (0..(2 * SLOTS_TOTAL) as i64)
            .filter_map(|i| {
                let units = start_units + i;
                let (u, first, last, _, _) = self.raw(self.slot_index(units * self.precision_ms));
                (u == units && last >= log_end).then_some(first)
            })
            .min()
    }

    /// Writes the changed slots back and fsyncs the file.
    pub fn flush(&mut self) -> Result<(), String> {
        if self.dirty.is_empty() {
            return Ok(());
        }
        for &index in &self.dirty {
            let at = index * SLOT_SIZE_BYTES;
            self.file
                .write_all_at(&self.bytes[at..at + SLOT_SIZE_BYTES], at as u64)
                .map_err(|e| {
                    format!("cannot write the timer wheel {}: {e}", self.path.display())
                })?;
        }
        self.file
            .sync_data()
            .map_err(|e| format!("cannot fsync the timer wheel {}: {e}", self.path.display()))?;
        self.dirty.clear();
        Ok(())
    }
}
