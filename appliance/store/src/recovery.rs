//! Startup recovery (`store.md` §10): pick the CommitLog segment to scan from (normal:
//! by the ConsumeQueues' dispatched end; abnormal, i.e. `abort` present: by checkpoint
//! timestamps), validate records (with body CRC when `checkCRCOnRecover`), re-dispatch
//! what the ConsumeQueues and index lack, then truncate everything past the last valid
//! record: ConsumeQueue units, index end offset, later segments, and the stale tail of the
//! last segment (zeroed, so old bytes can never be mistaken for records later). After a
//! clean shutdown the empty next segment the allocator had prepared is kept for reuse.

use crate::checkpoint::CheckpointData;
use crate::error::StoreError;
use crate::mapped_file::MappedFile;
use crate::reput::Dispatcher;
use crate::store::Shared;
use ringmq_remoting::message::record::{self, Decoded};
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
    let check_crc = shared.config.check_crc_on_recover;
    if files.is_empty() {
        // No CommitLog at all: nothing the queues point to exists.
        for cq in shared.cqs.all() {
            cq.destroy();
        }
        log.set_max_offset(0);
        log.set_flushed_offset(0);
        return Ok(Recovered {
            process_offset: 0,
            redispatched: 0,
            preallocated_kept: false,
        });
    }
    let dispatch_from = shared
        .cqs
        .all()
        .iter()
        .map(|c| c.max_physic_offset())
        .max()
        .unwrap_or(-1)
        .max(0) as u64;
    let start_idx = if last_exit_ok {
        (0..files.len())
            .rev()
            .find(|&i| {
                first_record_ok(&files[i], check_crc).is_some()
                    && files[i].from_offset() <= dispatch_from
            })
            .unwrap_or(0)
    } else {
        let min_ts = cp.min_timestamp();
        (0..files.len())
            .rev()
            .find(|&i| matches!(first_record_ok(&files[i], check_crc), Some((_, ts)) if ts != 0 && ts <= min_ts))
            .unwrap_or(0)
    };
    let listeners = Vec::new();
    let mut off = files[start_idx].from_offset();
    let mut idx = start_idx;
    let mut redispatched = 0u64;
    'scan: loop {
        let seg = &files[idx];
        let pos = off - seg.from_offset();
        if pos + record::BLANK_RECORD_SIZE as u64 > seg.size() {
            if idx + 1 < files.len() {
                idx += 1;
                off = files[idx].from_offset();
                continue;
            }
            break;
        }
        match record::decode_record(seg.slice(pos, (seg.size() - pos) as usize), check_crc) {
            Ok(Decoded::Message(r)) => {
                if r.physical_offset != off as i64 {
                    tracing::info!(
                        offset = off,
                        found = r.physical_offset,
                        "recovery: stale record (wrong PHYSICALOFFSET); log ends here"
                    );
                    break 'scan;
                }
                if !last_exit_ok || off >= dispatch_from {
                    dispatcher.dispatch(&r, &listeners)?;
                    redispatched += 1;
                }
                off += r.total_size as u64;
            }
            Ok(Decoded::Blank { total_size }) => {
                if total_size as u64 != seg.size() - pos {
                    tracing::warn!(
                        offset = off,
                        total_size,
                        "recovery: BLANK size does not reach the segment end"
                    );
                }
                if idx + 1 < files.len() {
                    idx += 1;
                    off = files[idx].from_offset();
                } else {
                    // Log ends right after the filler: next append rolls to a new segment.
                    off = seg.from_offset() + seg.size();
                    break;
                }
            }
            Err(e) => {
                if !matches!(e, record::RecordError::BadMagic { magic: 0 }) {
                    tracing::info!(offset = off, error = %e, "recovery: log ends at an invalid record");
                }
                break;
            }
        }
    }
    let process = off;
    // Truncate the logic queues and the index past the valid end.
    for cq in shared.cqs.all() {
        cq.truncate_dirty(process as i64)?;
        cq.flush()?;
    }
    if let Some(index) = &shared.index {
        index
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .truncate_to(process as i64);
    }
    // Truncate the CommitLog: later segments go, the last one is cut and zeroed. The
    // next segment the allocator had prepared before a clean shutdown is kept on disk
    // (out of the list: the allocator reopens the same file when asked for it).
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

/// Whether a segment past the valid end is still as the allocator made it: after a clean
/// shutdown nothing was appended past the valid end, so a zero first page means the file
/// was prepared and never used (a used one starts with a record).
fn never_written(seg: &MappedFile) -> bool {
    let head = (crate::mapped_file::OS_PAGE_SIZE).min(seg.size()) as usize;
    seg.slice(0, head).iter().all(|&b| b == 0)
}
