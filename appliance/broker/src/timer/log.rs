//! The timer log `timerlog/` (features.md §c.3), byte-compatible with RocketMQ's: segment
//! files named by their 20-digit start offset, each `mappedFileSizeTimerLog` bytes, holding
//! 52-byte units (big-endian). A unit that would leave less than a blank's 16 bytes at the
//! end of a segment goes to the next one, and the tail gets a blank
//! `remaining i32 | 0 i64 | BLANK_MAGIC_CODE i32`.
//!
//! Units are written with `pwrite` and made durable by [`TimerLog::flush`]; the checkpoint
//! records the flushed end, and recovery re-scans from one segment before it.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Bytes of one unit.
pub const UNIT_SIZE_BYTES: usize = 52;
/// Bytes of the blank written at a segment's tail.
pub const MIN_BLANK_LEN_BYTES: usize = 16;
/// Magic of the tail blank (upstream's constant, `0xBBCCDDEE ^ (1880681586 + 8)`).
pub const BLANK_MAGIC_CODE: i32 = 0xCBD4_3194_u32 as i32;
/// Unit magic bits.
pub const MAGIC_DEFAULT: i32 = 1;
pub const MAGIC_ROLL: i32 = 1 << 1;
pub const MAGIC_DELETE: i32 = 1 << 2;
/// Units read per `pread` during recovery scans.
const SCAN_CHUNK_UNITS: usize = 16 * 1024;

/// One timer log unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerUnit {
    /// Log offset of the previous unit of the same slot, −1 for the first.
    pub prev_pos: i64,
    pub magic: i32,
    /// The enqueue side's write time when the unit was appended.
    pub curr_write_time_ms: i64,
    /// Slot time − `curr_write_time_ms`.
    pub delay_ms: i32,
    /// CommitLog offset and size of the message in `rmq_sys_wheel_timer`.
    pub offset_py: i64,
    pub size_py: i32,
    /// Java `String.hashCode` of REAL_TOPIC (upstream keeps it for its metrics).
    pub topic_hash: i32,
}

impl TimerUnit {
    /// The time of the slot this unit is linked into.
    pub fn slot_time_ms(&self) -> i64 {
        self.curr_write_time_ms + i64::from(self.delay_ms)
    }

    pub fn encode(&self) -> [u8; UNIT_SIZE_BYTES] {
        let mut b = [0u8; UNIT_SIZE_BYTES];
        b[0..4].copy_from_slice(&(UNIT_SIZE_BYTES as i32).to_be_bytes());
        b[4..12].copy_from_slice(&self.prev_pos.to_be_bytes());
        b[12..16].copy_from_slice(&self.magic.to_be_bytes());
        b[16..24].copy_from_slice(&self.curr_write_time_ms.to_be_bytes());
        b[24..28].copy_from_slice(&self.delay_ms.to_be_bytes());
        b[28..36].copy_from_slice(&self.offset_py.to_be_bytes());
        b[36..40].copy_from_slice(&self.size_py.to_be_bytes());
        b[40..44].copy_from_slice(&self.topic_hash.to_be_bytes());
        // 44..52 reserved, zero.
        b
    }

    /// Decodes a unit; `None` unless it is a valid one (size 52, known magic bits only).
    pub fn decode(b: &[u8]) -> Option<TimerUnit> {
        let long = |at: usize| i64::from_be_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
        let int = |at: usize| i32::from_be_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]));
        if b.len() < UNIT_SIZE_BYTES || int(0) != UNIT_SIZE_BYTES as i32 || !magic_ok(int(12)) {
            return None;
        }
        Some(TimerUnit {
            prev_pos: long(4),
            magic: int(12),
            curr_write_time_ms: long(16),
            delay_ms: int(24),
            offset_py: long(28),
            size_py: int(36),
            topic_hash: int(40),
        })
    }

    pub fn is_roll(&self) -> bool {
        self.magic & MAGIC_ROLL != 0
    }

    pub fn is_delete(&self) -> bool {
        self.magic & MAGIC_DELETE != 0
    }
}

/// Upstream's validity test of a unit's magic: no bits beyond the low four.
pub fn magic_ok(magic: i32) -> bool {
    (magic | 0xF) == 0xF
}

/// The log: its segments by start offset and the append position.
pub struct TimerLog {
    dir: PathBuf,
    segment_size_bytes: i64,
    segments: BTreeMap<i64, File>,
    write_pos: i64,
    flushed_pos: i64,
    /// Segments written since the last flush.
    unsynced: Vec<i64>,
}

impl TimerLog {
    /// Opens the segments under `dir` (created if missing). The append position is the end
    /// of the last segment until [`TimerLog::recover`] finds the real end.
    pub fn open(dir: &Path, segment_size_bytes: i64) -> Result<Self, String> {
        if segment_size_bytes < (UNIT_SIZE_BYTES + MIN_BLANK_LEN_BYTES) as i64 {
            return Err(format!(
                "mappedFileSizeTimerLog {segment_size_bytes} is too small"
            ));
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let mut segments = BTreeMap::new();
        let entries =
            std::fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(base) = name
                .to_str()
                .filter(|n| n.len() == 20)
                .and_then(|n| n.parse::<i64>().ok())
            else {
                continue;
            };
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(entry.path())
                .map_err(|e| format!("cannot open {}: {e}", entry.path().display()))?;
            segments.insert(base, file);
        }
        let end = segments
            .keys()
            .next_back()
            .map_or(0, |b| b + segment_size_bytes);
        Ok(Self {
            dir: dir.to_path_buf(),
            segment_size_bytes,
            segments,
            write_pos: end,
            flushed_pos: end,
            unsynced: Vec::new(),
        })
    }

    pub fn segment_size_bytes(&self) -> i64 {
        self.segment_size_bytes
    }

    pub fn write_pos(&self) -> i64 {
        self.write_pos
    }

    pub fn flushed_pos(&self) -> i64 {
        self.flushed_pos
    }

    /// Start offset of the first segment, if any.
    pub fn first_segment(&self) -> Option<i64> {
        self.segments.keys().next().copied()
    }

    fn segment_path(&self, base: i64) -> PathBuf {
        self.dir.join(format!("{base:020}"))
    }

    fn segment_for_write(&mut self, base: i64) -> Result<&File, String> {
        if !self.segments.contains_key(&base) {
            let path = self.segment_path(base);
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(|e| format!("cannot create timer log segment {}: {e}", path.display()))?;
            // Full size like upstream's mapped files; sparse until written.
            file.set_len(self.segment_size_bytes as u64)
                .map_err(|e| format!("cannot size {}: {e}", path.display()))?;
            self.segments.insert(base, file);
        }
        if !self.unsynced.contains(&base) {
            self.unsynced.push(base);
        }
        self.segments
            .get(&base)
            .ok_or_else(|| format!("timer log segment {base} vanished"))
    }

    /// Appends one unit and returns its log offset.
    pub fn append(&mut self, unit: &TimerUnit) -> Result<i64, String> {
        let size = self.segment_size_bytes;
        let mut base = self.write_pos - self.write_pos.rem_euclid(size);
        let mut at = self.write_pos - base;
        if at + (UNIT_SIZE_BYTES + MIN_BLANK_LEN_BYTES) as i64 > size {
            let mut blank = [0u8; MIN_BLANK_LEN_BYTES];
            blank[0..4].copy_from_slice(&((size - at) as i32).to_be_bytes());
            blank[12..16].copy_from_slice(&BLANK_MAGIC_CODE.to_be_bytes());
            self.segment_for_write(base)?
                .write_all_at(&blank, at as u64)
                .map_err(|e| format!("cannot write the timer log blank at {}: {e}", base + at))?;
            base += size;
            at = 0;
        }
        let pos = base + at;
        self.segment_for_write(base)?
            .write_all_at(&unit.encode(), at as u64)
            .map_err(|e| format!("cannot append to the timer log at {pos}: {e}"))?;
        self.write_pos = pos + UNIT_SIZE_BYTES as i64;
        Ok(pos)
    }

    /// The unit at `pos`, when it is a valid one.
    pub fn read_unit(&self, pos: i64) -> Option<TimerUnit> {
        if pos < 0 || pos >= self.write_pos {
            return None;
        }
        let base = pos - pos.rem_euclid(self.segment_size_bytes);
        let file = self.segments.get(&base)?;
        let mut b = [0u8; UNIT_SIZE_BYTES];
        file.read_exact_at(&mut b, (pos - base) as u64).ok()?;
        TimerUnit::decode(&b)
    }

    /// Makes everything appended so far durable; returns the flushed end.
    pub fn flush(&mut self) -> Result<i64, String> {
        for base in std::mem::take(&mut self.unsynced) {
            if let Some(f) = self.segments.get(&base) {
                f.sync_data()
                    .map_err(|e| format!("cannot fsync timer log segment {base}: {e}"))?;
            }
        }
        self.flushed_pos = self.write_pos;
        Ok(self.flushed_pos)
    }

    /// Scans the log from the segment holding `begin` and calls `on_unit(pos, unit)` for each
    /// valid unit. With `truncate`, the scan stops at the first invalid unit, which becomes
    /// the append position (later segments are removed). Returns the scan's end.
    pub fn recover(
        &mut self,
        begin: i64,
        truncate: bool,
        mut on_unit: impl FnMut(i64, &TimerUnit),
    ) -> Result<i64, String> {
        let size = self.segment_size_bytes;
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        let Some(&first) = bases.first() else {
            self.write_pos = 0;
            self.flushed_pos = 0;
            return Ok(0);
        };
        let start_base = bases
            .iter()
            .rev()
            .find(|b| **b <= begin.max(first))
            .copied()
            .unwrap_or(first);
        let mut end = start_base;
        let mut chunk = vec![0u8; SCAN_CHUNK_UNITS * UNIT_SIZE_BYTES];
        'segments: for &base in bases.iter().filter(|b| **b >= start_base) {
            let Some(file) = self.segments.get(&base) else {
                break;
            };
            let mut at = 0i64;
            end = base;
            while at + UNIT_SIZE_BYTES as i64 <= size {
                let want = (chunk.len() as i64).min(size - at) as usize;
                let got = read_up_to(file, &mut chunk[..want], at as u64)
                    .map_err(|e| format!("cannot read timer log segment {base}: {e}"))?;
                let mut i = 0usize;
                while i + UNIT_SIZE_BYTES <= got {
                    let b = &chunk[i..i + UNIT_SIZE_BYTES];
                    let magic = i32::from_be_bytes(b[12..16].try_into().unwrap_or([0; 4]));
                    if magic == BLANK_MAGIC_CODE {
                        end = base + size;
                        continue 'segments;
                    }
                    let Some(unit) = TimerUnit::decode(b) else {
                        end = base + at + i as i64;
                        if truncate {
                            break 'segments;
                        }
                        i += UNIT_SIZE_BYTES;
                        continue;
                    };
                    on_unit(base + at + i as i64, &unit);
                    i += UNIT_SIZE_BYTES;
                    end = base + at + i as i64;
                }
                if got < want {
                    break 'segments;
                }
                at += i as i64;
                if i == 0 {
                    break;
                }
            }
        }
        if truncate {
            let stale: Vec<i64> = self
                .segments
                .keys()
                .copied()
                .filter(|b| *b > end - end.rem_euclid(size) && *b >= end)
                .collect();
            for base in stale {
                self.segments.remove(&base);
                let _ = std::fs::remove_file(self.segment_path(base));
            }
            self.write_pos = end;
            self.flushed_pos = end;
        }
        Ok(end)
    }

    /// Start offsets of every segment but the last (the one being appended to), oldest first.
    pub fn full_segments(&self) -> Vec<i64> {
        let mut bases: Vec<i64> = self.segments.keys().copied().collect();
        bases.pop();
        bases
    }

    /// The last unit a full segment can hold (just before its tail blank), as upstream
    /// locates it.
    pub fn last_unit_of_segment(&self, base: i64) -> Option<TimerUnit> {
        let size = self.segment_size_bytes;
        let unit = UNIT_SIZE_BYTES as i64;
        let blank = MIN_BLANK_LEN_BYTES as i64;
        self.read_unit(base + size - (size - blank) % unit - blank - unit)
    }

    /// Deletes one segment (its units are no longer readable).
    pub fn remove_segment(&mut self, base: i64) {
        if self.segments.remove(&base).is_some() {
            self.unsynced.retain(|b| *b != base);
            if let Err(e) = std::fs::remove_file(self.segment_path(base)) {
                tracing::warn!(base, "cannot delete timer log segment: {e}");
            }
        }
    }
}

/// Reads as much of `buf` as the file holds at `offset`.
fn read_up_to(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}
