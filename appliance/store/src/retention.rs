//! Retention (`store.md` §11, upstream `CleanCommitLogService` + `CleanConsumeQueueService`):
//! delete expired CommitLog segments at `deleteWhen` hours, when disk usage crosses
//! `diskMaxUsedSpaceRatio`, or on a manual trigger; clean forcibly above
//! `diskSpaceCleanForciblyRatio`; refuse writes (DISK_FULL) above
//! `diskSpaceWarningLevelRatio`; retry segments whose unlink failed; then drop ConsumeQueue
//! and index files that only point below the new CommitLog min offset. Runs on its own
//! thread (`ringmq-clean`), so the pauses between deletions never hold up the checkpoint.
//!
//! Three deliberate differences from upstream: a segment the reput stage has not dispatched
//! completely is never deleted (upstream would lose those messages' queue entries), nor one
//! the flush stage has not synced completely (its flush could then never finish), and
//! there is no `destroyMapedFileIntervalForcibly`: unlinking never waits for readers here,
//! because a mapping outlives its file (readers hold an `Arc` of the segment).

use crate::mapped_file::MappedFile;
use crate::shared::{Shared, FLAG_DISK_FULL};
pub use crate::util::disk_used_percent;
use crate::util::local_hour;
use ringmq_sync::LockExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Passes of the manual trigger (upstream `MAX_MANUAL_DELETE_FILE_TIMES`).
pub const MANUAL_DELETE_PASSES: u32 = 20;

/// Retention bookkeeping kept between passes.
#[derive(Debug, Default)]
pub(crate) struct RetentionState {
    /// Passes left that delete regardless of the hour (admin trigger).
    pub manual_delete_remaining: u32,
    /// CommitLog min offset the queues and index were last cleaned for.
    last_commit_log_min: i64,
    last_redelete: Option<Instant>,
    /// Whether "usage is high but nothing could be deleted" was logged (once per episode).
    warned_nothing_deletable: bool,
    warned_usage_unknown: bool,
}

/// What the disk-usage check decided.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Space {
    /// Usage above `diskMaxUsedSpaceRatio` (or unknown): delete expired files now.
    to_delete: bool,
    /// Usage above `diskSpaceCleanForciblyRatio`: unexpired files may go too.
    clean_immediately: bool,
}

/// Whether `deleteWhen` text names `hour`, parsed as the live settings parse it.
#[cfg(test)]
fn is_delete_hour(delete_when: &str, hour: i32) -> bool {
    let live = crate::config::LiveStoreSettings::new(&crate::StoreConfig::default());
    live.apply("deleteWhen", delete_when)
        .expect("deleteWhen is live");
    live.is_delete_hour(hour)
}

/// One retention pass. `pause(ms)` waits between deletions and returns false when the
/// store is stopping (the pass then ends early). Returns the CommitLog segments deleted.
pub(crate) fn run_once(
    shared: &Shared,
    st: &mut RetentionState,
    pause: &mut dyn FnMut(u64) -> bool,
) -> usize {
    let cfg = &shared.config;
    let now = cfg.retention_probe.now_ms();
    let space = check_space(shared, st);
    let manual = st.manual_delete_remaining > 0;
    let time_up = shared.live.is_delete_hour(local_hour(now));
    let mut deleted = 0;
    if time_up || space.to_delete || manual {
        if manual {
            st.manual_delete_remaining -= 1;
        }
        let force = space.clean_immediately && cfg.clean_file_forcibly_enable;
        tracing::debug!(
            file_reserved_time_h = shared.live.file_reserved_time_hours(),
            time_up,
            space_to_delete = space.to_delete,
            manual_passes_left = st.manual_delete_remaining,
            force,
            "retention pass"
        );
        deleted = delete_expired_segments(shared, now, force, pause);
        if deleted == 0 && space.to_delete {
            if !st.warned_nothing_deletable {
                st.warned_nothing_deletable = true;
                tracing::warn!(
                    file_reserved_time_h = shared.live.file_reserved_time_hours(),
                    force,
                    "disk usage is above diskMaxUsedSpaceRatio but no CommitLog segment could be deleted (none expired, or they are not dispatched yet)"
                );
            }
        } else {
            st.warned_nothing_deletable = false;
        }
    } else {
        st.warned_nothing_deletable = false;
    }
    redelete_hanged_segment(shared, st);
    clean_logics(shared, st, pause);
    deleted
}

/// Upstream `isSpaceToDelete`: DISK_FULL above the warning ratio (cleared only once usage
/// is back under the clean-forcibly ratio), forced cleaning above clean-forcibly, expired
/// cleaning above `diskMaxUsedSpaceRatio`, for the CommitLog and ConsumeQueue partitions.
fn check_space(shared: &Shared, st: &mut RetentionState) -> Space {
    let cfg = &shared.config;
    let probe = &cfg.retention_probe;
    let mut space = Space::default();
    // The first partition found above the warning ratio, for the log.
    let mut full: Option<(std::path::PathBuf, u32)> = None;
    for dir in [cfg.commit_log_dir(), cfg.consume_queue_dir()] {
        let used = probe
            .disk_used_percent(&dir)
            .or_else(|| probe.disk_used_percent(&cfg.store_path_root_dir));
        let Some(used) = used else {
            // Upstream counts an unmeasurable partition as over diskMaxUsedSpaceRatio.
            if !std::mem::replace(&mut st.warned_usage_unknown, true) {
                tracing::warn!(dir = %dir.display(), "cannot measure disk usage (statvfs failed); deleting expired files at any hour");
            }
            space.to_delete = true;
            continue;
        };
        st.warned_usage_unknown = false;
        if used > shared.live.effective_warning_ratio() {
            full.get_or_insert((dir, used));
            space.clean_immediately = true;
            space.to_delete = true;
        } else if used > shared.live.effective_clean_forcibly_ratio() {
            space.clean_immediately = true;
            space.to_delete = true;
        } else if used > shared.live.effective_max_used_ratio() {
            space.to_delete = true;
        }
    }
    let was_full = shared.running_flags.load(Ordering::Acquire) & FLAG_DISK_FULL != 0;
    if let Some((dir, used)) = full {
        shared.set_flag(FLAG_DISK_FULL);
        if !was_full {
            tracing::error!(dir = %dir.display(), used_percent = used, warning_ratio = shared.live.effective_warning_ratio(), "disk almost full: refusing writes and cleaning forcibly");
        }
    } else if !space.clean_immediately && was_full {
        shared.clear_flag(FLAG_DISK_FULL);
        tracing::info!("disk usage is below diskSpaceCleanForciblyRatio again: accepting writes");
    }
    space
}

/// Upstream `deleteExpiredFileByTime`: oldest first, never the newest segment (it is being
/// written), stop at the first segment that must stay (no holes in the log), at most
/// `deleteFileBatchMax` per pass, `deleteCommitLogFilesInterval` between deletions. A
/// segment expires `fileReservedTime` hours after its file was last modified.
fn delete_expired_segments(
    shared: &Shared,
    now_ms: i64,
    force: bool,
    pause: &mut dyn FnMut(u64) -> bool,
) -> usize {
    let cfg = &shared.config;
    let reserved_ms = i64::from(shared.live.file_reserved_time_hours()) * 3_600_000;
    let batch_max = cfg.delete_file_batch_max.max(1);
    let files = shared.log.files();
    let candidates = files.len().saturating_sub(1);
    let mut deleted = 0;
    for (i, f) in files.iter().take(candidates).enumerate() {
        if f.is_removed() {
            break; // an unlink failed before: `redelete_hanged_segment` retries it
        }
        let expired = f.last_modified_ms().saturating_add(reserved_ms) <= now_ms;
        if !expired && !force {
            break;
        }
        // Never delete what the reput stage has not dispatched yet, nor what the flush
        // stage has not synced: deleting under it would stall every later flush.
        let end = f.from_offset() + f.size();
        let reput = shared.reput_offset.load(Ordering::Acquire);
        if end > reput {
            tracing::info!(path = %f.path().display(), reput_offset = reput, "expired CommitLog segment kept: not dispatched yet");
            break;
        }
        let flushed = shared.log.flushed_offset();
        if end > flushed {
            tracing::info!(path = %f.path().display(), flushed_offset = flushed, "expired CommitLog segment kept: not flushed yet");
            break;
        }
        if !destroy_segment(shared, f) {
            break;
        }
        deleted += 1;
        if deleted >= batch_max {
            break;
        }
        if i + 1 < candidates && !pause(cfg.delete_commit_log_files_interval_ms) {
            break;
        }
    }
    deleted
}

/// Unlinks `f` and drops it from the CommitLog. On failure it stays listed (marked removed,
/// so readers treat it as gone) for `redelete_hanged_segment`.
fn destroy_segment(shared: &Shared, f: &Arc<MappedFile>) -> bool {
    match f.destroy() {
        Ok(()) => {
            shared.log.remove_files(|g| std::ptr::eq(g, &**f));
            tracing::info!(path = %f.path().display(), "deleted CommitLog segment");
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "deleting CommitLog segment failed; retried every redeleteHangedFileInterval");
            false
        }
    }
}

/// Upstream `reDeleteHangedFile`: every `redeleteHangedFileInterval`, retry the oldest
/// segment if an earlier unlink of it failed.
fn redelete_hanged_segment(shared: &Shared, st: &mut RetentionState) {
    let every = Duration::from_millis(shared.config.redelete_hanged_file_interval_ms);
    if st.last_redelete.is_some_and(|t| t.elapsed() < every) {
        return;
    }
    st.last_redelete = Some(Instant::now());
    if let Some(first) = shared.log.files().first() {
        if first.is_removed() {
            tracing::warn!(path = %first.path().display(), "retrying the delete of a CommitLog segment");
            destroy_segment(shared, first);
        }
    }
}

/// Upstream `CleanConsumeQueueService`: once the CommitLog min offset moved, drop queue files
/// wholly below it (pausing `deleteConsumeQueueFilesInterval` after each queue that lost
/// files), move each queue's min offset, and drop stale index files.
fn clean_logics(shared: &Shared, st: &mut RetentionState, pause: &mut dyn FnMut(u64) -> bool) {
    let min = shared.log.min_offset() as i64;
    if min <= st.last_commit_log_min {
        return;
    }
    let interval_ms = shared.config.delete_consume_queue_files_interval_ms;
    for cq in shared.cqs.all() {
        if cq.delete_expired(min) > 0 && interval_ms > 0 && !pause(interval_ms) {
            return; // stopping; the next start cleans the rest
        }
    }
    if let Some(index) = &shared.index {
        index.lock_unpoisoned().delete_expired(min);
    }
    st.last_commit_log_min = min;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delete_hours_parse() {
        assert!(is_delete_hour("04", 4));
        assert!(is_delete_hour("01;04;23", 23));
        assert!(is_delete_hour(" 01 ; 04", 4));
        assert!(!is_delete_hour("04", 5));
        assert!(!is_delete_hour("", 0));
        assert!(!is_delete_hour("x;y", 0), "unparsable hours never match");
    }
}
