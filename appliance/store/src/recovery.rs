//! Startup recovery (`store.md` §10): pick the CommitLog segment to scan from (normal:
//! by the ConsumeQueues' dispatched end; abnormal, i.e. `abort` present: by checkpoint
//! timestamps), validate records (with body CRC when `checkCRCOnRecover`), re-dispatch
//! what the ConsumeQueues and index lack, then truncate everything past the last valid
//! record: ConsumeQueue units, index end offset, later segments, and the stale tail of the
//! last segment (zeroed, so old bytes can never be mistaken for records later). After a
//! clean shutdown the empty next segment the allocator had prepared is kept for reuse.

use crate::checkpoint::CheckpointData;
use crate::commit_log::CommitLog;
use crate::error::StoreError;
use crate::mapped_file::MappedFile;
use crate::reput::Dispatcher;
use crate::shared::Shared;
use ringmq_remoting::message::record::{self, Decoded, StoredRecord};
use ringmq_sync::LockExt;
use std::sync::Arc;

/// What recovery found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Recovered {
    /// End of the last valid record: the new CommitLog max offset.
    pub process_offset: u64,
    /// Records replayed into ConsumeQueue/index.
    pub redispatched: u64,
    /// The empty next segment prepared before a clean shutdown was kept for reuse.
    pub preallocated_kept: bool,
}

fn first_record_ok(seg: &MappedFile, check_crc: bool) -> Option<(i64, i64)> {
    match record::decode_record(seg.slice(0, seg.size() as usize), check_crc) {
        Ok(Decoded::Message(r)) if r.physical_offset == seg.from_offset() as i64 => {
            Some((r.physical_offset, r.store_timestamp_ms))
        }
        _ => None,
    }
}

pub(crate) fn recover(
    shared: &Arc<Shared>,
    dispatcher: &mut Dispatcher,
    last_exit_ok: bool,
    cp: &CheckpointData,
) -> Result<Recovered, StoreError> {
    let log = &shared.log;
    let files = log.files();
    if files.is_empty() {
        return Ok(recover_empty(shared));
    }
    let check_crc = shared.config.check_crc_on_recover;
    let dispatch_from = shared
        .cqs
        .all()
        .iter()
        .map(|c| c.max_physic_offset())
        .max()
        .unwrap_or(-1)
        .max(0) as u64;
    let start_idx = if last_exit_ok {
        scan_start_after_clean_exit(&files, check_crc, dispatch_from)
    } else {
        scan_start_after_crash(&files, check_crc, cp.min_timestamp())
    };
    // After a crash every record scanned is replayed; after a clean exit only what the
    // ConsumeQueues lack.
    let redispatch_from = if last_exit_ok { dispatch_from } else { 0 };
    let (process, redispatched) =
        scan_valid_end(&files, start_idx, check_crc, redispatch_from, dispatcher)?;
    let process = requested_truncation(shared, process);
    truncate_logics(shared, process)?;
    let preallocated_kept = truncate_commit_log(log, process, last_exit_ok)?;
    // ConsumeQueue min offsets against the CommitLog min.
    let min = log.min_offset() as i64;
    for cq in shared.cqs.all() {
        cq.correct_min_offset(min);
    }
    Ok(Recovered {
        process_offset: process,
        redispatched,
        preallocated_kept,
    })
}

/// Controller mode: a slave whose log ran past what it shares with its master left the
/// offset to cut at (see `ha::replicas`); recovery cuts there instead of the valid end.
fn requested_truncation(shared: &Shared, process: u64) -> u64 {
    let root = &shared.config.store_path_root_dir;
    match crate::ha::replicas::pending_truncation(root) {
        Some(offset) if shared.config.controller_mode && offset < process => {
            tracing::warn!(
                valid_end = process,
                truncate_to = offset,
                "recovery: truncating the CommitLog to the last offset shared with the master"
            );
            offset
        }
        _ => process,
    }
}

/// No CommitLog at all: nothing the queues point to exists.
fn recover_empty(shared: &Shared) -> Recovered {
    for cq in shared.cqs.all() {
        cq.destroy();
    }
    shared.log.set_max_offset(0);
    shared.log.set_flushed_offset(0);
    Recovered {
        process_offset: 0,
        redispatched: 0,
        preallocated_kept: false,
    }
}

/// Normal recovery scans from the last valid segment that starts at or below the
/// ConsumeQueues' dispatched end.
fn scan_start_after_clean_exit(
    files: &[Arc<MappedFile>],
    check_crc: bool,
    dispatch_from: u64,
) -> usize {
    (0..files.len())
        .rev()
        .find(|&i| {
            first_record_ok(&files[i], check_crc).is_some()
                && files[i].from_offset() <= dispatch_from
        })
        .unwrap_or(0)
}

/// Abnormal recovery scans from the last valid segment whose first record is no later
/// than the checkpoint's oldest timestamp.
fn scan_start_after_crash(files: &[Arc<MappedFile>], check_crc: bool, min_ts: i64) -> usize {
    (0..files.len())
        .rev()
        .find(|&i| matches!(first_record_ok(&files[i], check_crc), Some((_, ts)) if ts != 0 && ts <= min_ts))
        .unwrap_or(0)
}

/// What the scan finds at an offset of a segment.
enum Step<'a> {
    /// A valid record at that offset.
    Record(StoredRecord<'a>),
    /// The segment's records end here: a BLANK filler, or too little room for a record.
    SegmentEnd { blank: bool },
    /// No valid record: the log ends here.
    LogEnd,
}

fn step_at(seg: &MappedFile, off: u64, check_crc: bool) -> Step<'_> {
    let pos = off - seg.from_offset();
    if pos + record::BLANK_RECORD_SIZE as u64 > seg.size() {
        return Step::SegmentEnd { blank: false };
    }
    match record::decode_record(seg.slice(pos, (seg.size() - pos) as usize), check_crc) {
        Ok(Decoded::Message(r)) if check_crc && torn(&r) => {
            tracing::warn!(
                offset = off,
                "recovery: record torn by the crash (its topic or properties end in bytes \
                 never written); log ends here"
            );
            Step::LogEnd
        }
        Ok(Decoded::Message(r)) if r.physical_offset == off as i64 => Step::Record(r),
        Ok(Decoded::Message(r)) => {
            tracing::info!(
                offset = off,
                found = r.physical_offset,
                "recovery: stale record (wrong PHYSICALOFFSET); log ends here"
            );
            Step::LogEnd
        }
        Ok(Decoded::Blank { total_size }) => {
            if total_size as u64 != seg.size() - pos {
                tracing::warn!(
                    offset = off,
                    total_size,
                    "recovery: BLANK size does not reach the segment end"
                );
            }
            Step::SegmentEnd { blank: true }
        }
        Err(e) => {
            if !matches!(e, record::RecordError::BadMagic { magic: 0 }) {
                tracing::info!(offset = off, error = %e, "recovery: log ends at an invalid record");
            }
            Step::LogEnd
        }
    }
}

/// Whether a record's tail was never written: a crash in direct mode can land between
/// two page writes, leaving a record whose head (and body, which its CRC covers) is on
/// disk and whose topic or properties are still zero. Producers never put NUL bytes in a
/// topic or in properties, so a NUL there marks the torn last record.
fn torn(r: &record::StoredRecord<'_>) -> bool {
    r.topic_bytes.contains(&0) || r.properties.contains(&0)
}

/// Scans records from segment `start_idx`, re-dispatching those at or past
/// `redispatch_from`; returns the end of the last valid record and the records replayed.
fn scan_valid_end(
    files: &[Arc<MappedFile>],
    start_idx: usize,
    check_crc: bool,
    redispatch_from: u64,
    dispatcher: &mut Dispatcher,
) -> Result<(u64, u64), StoreError> {
    let listeners = Vec::new();
    let mut idx = start_idx;
    let mut off = files[idx].from_offset();
    let mut redispatched = 0u64;
    loop {
        let seg = &files[idx];
        match step_at(seg, off, check_crc) {
            Step::Record(r) => {
                if off >= redispatch_from {
                    dispatcher.dispatch(&r, &listeners)?;
                    redispatched += 1;
                }
                off += r.total_size as u64;
            }
            Step::SegmentEnd { .. } if idx + 1 < files.len() => {
                idx += 1;
                off = files[idx].from_offset();
            }
            Step::SegmentEnd { blank } => {
                if blank {
                    // Log ends right after the filler: next append rolls to a new segment.
                    off = seg.from_offset() + seg.size();
                }
                break;
            }
            Step::LogEnd => break,
        }
    }
    Ok((off, redispatched))
}

/// Truncates the logic queues and the index past the valid end.
fn truncate_logics(shared: &Shared, process: u64) -> Result<(), StoreError> {
    for cq in shared.cqs.all() {
        cq.truncate_dirty(process as i64)?;
        cq.flush(0)?;
    }
    if let Some(index) = &shared.index {
        index.lock_unpoisoned().truncate_to(process as i64);
    }
    Ok(())
}

/// Truncates the CommitLog to `process`: later segments go, the last one is cut and
/// zeroed. The next segment the allocator had prepared before a clean shutdown is kept on
/// disk (out of the list: the allocator reopens the same file when asked for it); returns
/// whether it was.
fn truncate_commit_log(
    log: &CommitLog,
    process: u64,
    last_exit_ok: bool,
) -> Result<bool, StoreError> {
    let next_start = process - process % log.file_size() + log.file_size();
    let gone = log.remove_files(|f| f.from_offset() > process);
    let mut preallocated_kept = false;
    for g in gone {
        if last_exit_ok && g.from_offset() == next_start && never_written(&g) {
            tracing::info!(path = %g.path().display(), "recovery: keeping the pre-allocated next CommitLog segment");
            preallocated_kept = true;
            continue;
        }
        tracing::warn!(path = %g.path().display(), "recovery: deleting CommitLog segment past the valid end");
        g.destroy()?;
    }
    for f in log.files() {
        if f.from_offset() + f.size() <= process {
            f.set_wrote(f.size());
            f.set_flushed(f.size());
        } else {
            let pos = process - f.from_offset();
            f.zero_tail(pos)?;
            f.set_wrote(pos);
            f.set_flushed(pos);
        }
    }
    log.set_max_offset(process);
    log.set_flushed_offset(process);
    Ok(preallocated_kept)
}

/// Whether a segment past the valid end is still as the allocator made it: after a clean
/// shutdown nothing was appended past the valid end, so a zero first page means the file
/// was prepared and never used (a used one starts with a record).
fn never_written(seg: &MappedFile) -> bool {
    let head = (crate::mapped_file::OS_PAGE_SIZE).min(seg.size()) as usize;
    seg.slice(0, head).iter().all(|&b| b == 0)
}
