//! Test helpers: unique scratch directories under the system temp dir, and a store
//! configuration with small files.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Removes directories of earlier runs whose process is gone (names end in `-<pid>-<n>`),
/// so stores left by failed or killed runs do not pile up on disk.
fn remove_stale_dirs(base: &Path) {
    let Ok(rd) = std::fs::read_dir(base) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name.rsplit('-').nth(1).and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

/// A fresh empty directory for one test.
pub fn temp_dir(name: &str) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let base = std::env::temp_dir().join("ringmq-store-unit");
    if n == 0 {
        remove_stale_dirs(&base);
    }
    let p = base.join(format!("{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).expect("create test dir");
    p
}

/// A store in `dir` with 64 KiB CommitLog segments, 32-unit ConsumeQueue files and a small
/// index, so tests roll files over with little data.
pub fn small_config(dir: &Path) -> crate::StoreConfig {
    crate::StoreConfig {
        store_path_root_dir: dir.to_path_buf(),
        mapped_file_size_commit_log: 64 * 1024,
        mapped_file_size_consume_queue_units: 32,
        max_hash_slot_num: 64,
        max_index_num: 256,
        ..crate::StoreConfig::default()
    }
}
