//! Retention (`store.md` §11): delete expired CommitLog segments at `deleteWhen` hours, when
//! disk usage crosses `diskMaxUsedSpaceRatio`, or on a manual trigger; clean forcibly above
//! `diskSpaceCleanForciblyRatio`; refuse writes (DISK_FULL) above
//! `diskSpaceWarningLevelRatio`. Then drop ConsumeQueue and index files that only point
//! below the new CommitLog min offset. Runs on the housekeeping thread.

use crate::store::{Shared, FLAG_DISK_FULL};
use crate::util::{local_hour, now_ms};
use std::path::Path;

/// Retention bookkeeping kept between passes.
#[derive(Debug, Default)]
pub(crate) struct RetentionState {
    /// Passes left that delete regardless of the hour (admin trigger).
    pub manual_delete_remaining: u32,
    last_commit_log_min: i64,
}

/// Used fraction of the partition holding `path`, in percent (rounded up), upstream's
/// `used / (used + usable)`.
pub fn disk_used_percent(path: &Path) -> Option<u32> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: `st` is plain data filled by statvfs on success; `c` is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let frsize = st.f_frsize as u128;
    let used = (st.f_blocks as u128).saturating_sub(st.f_bfree as u128) * frsize;
    let usable = st.f_bavail as u128 * frsize;
    if used + usable == 0 {
        return None;
    }
    Some(((used * 100).div_ceil(used + usable)) as u32)
}

fn is_delete_hour(delete_when: &str, hour: i32) -> bool {
    delete_when
        .split(';')
        .filter_map(|h| h.trim().parse::<i32>().ok())
        .any(|h| h == hour)
}

/// One pass of CommitLog, ConsumeQueue and index cleanup.
pub(crate) fn run_once(shared: &Shared, st: &mut RetentionState) {
    let cfg = &shared.config;
    let now = now_ms();
    let mut clean_immediately = false;
    let mut space_to_delete = false;
    for dir in [cfg.commit_log_dir(), cfg.consume_queue_dir()] {
        let Some(used) =
            disk_used_percent(&dir).or_else(|| disk_used_percent(&cfg.store_path_root_dir))
        else {
            continue;
        };
        if used > cfg.effective_warning_ratio() {
            if shared
                .running_flags
                .load(std::sync::atomic::Ordering::Acquire)
                & FLAG_DISK_FULL
                == 0
            {
                tracing::error!(dir = %dir.display(), used, "disk almost full: refusing writes and cleaning forcibly");
            }
            shared.set_flag(FLAG_DISK_FULL);
            clean_immediately = true;
            space_to_delete = true;
        } else if used > cfg.effective_clean_forcibly_ratio() {
            clean_immediately = true;
            space_to_delete = true;
        } else if used > cfg.effective_max_used_ratio() {
            space_to_delete = true;
        }
    }
    if !clean_immediately {
        shared.clear_flag(FLAG_DISK_FULL);
    }
    let manual = st.manual_delete_remaining > 0;
    if manual {
        st.manual_delete_remaining -= 1;
    }
    let time_to_delete = is_delete_hour(&cfg.delete_when, local_hour(now));
    if time_to_delete || space_to_delete || manual {
        let reserved_ms = i64::from(cfg.file_reserved_time_hours) * 3_600_000;
        let force = clean_immediately && cfg.clean_file_forcibly_enable;
        let files = shared.log.files();
        // Never the newest segment: it is being written.
        for (deleted, f) in files.iter().take(files.len().saturating_sub(1)).enumerate() {
            if deleted >= cfg.delete_file_batch_max.max(1) {
                break;
            }
            let expired = f.last_modified_ms() + reserved_ms <= now;
            if !(expired || force) {
                break;
            }
            // Never delete what the reput stage has not dispatched yet.
            let end = f.from_offset() + f.size();
            if end
                > shared
                    .reput_offset
                    .load(std::sync::atomic::Ordering::Acquire)
            {
                break;
            }
            let path = f.path().to_path_buf();
            let gone = shared
                .log
                .remove_files(|g| g.from_offset() == f.from_offset());
            for g in gone {
                match g.destroy() {
                    Ok(()) => {
                        tracing::info!(path = %path.display(), "deleted expired CommitLog segment")
                    }
                    Err(e) => tracing::warn!(error = %e, "deleting CommitLog segment failed"),
                }
            }
        }
    }
    let min = shared.log.min_offset() as i64;
    if min > st.last_commit_log_min {
        st.last_commit_log_min = min;
        for cq in shared.cqs.all() {
            cq.delete_expired(min);
        }
        if let Some(index) = &shared.index {
            index
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .delete_expired(min);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delete_hours_parse() {
        assert!(is_delete_hour("04", 4));
        assert!(is_delete_hour("01;04;23", 23));
        assert!(!is_delete_hour("04", 5));
        assert!(!is_delete_hour("", 0));
    }

    #[test]
    fn disk_usage_is_a_percentage() {
        let p = disk_used_percent(Path::new("/")).unwrap();
        assert!(p <= 100);
    }
}
