//! Delay-level progress (`config/delayOffset.json`): for each delay level, the next
//! `SCHEDULE_TOPIC_XXXX` consume-queue offset the schedule service will deliver. Written by the
//! schedule module through this manager; format `{"offsetTable":{1:0,2:5,…}}` with bare keys.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ringmq_remoting::body::topic::DataVersion;
use ringmq_sync::LockExt;

use crate::persist;

pub struct DelayOffsetManager {
    path: Option<PathBuf>,
    table: Mutex<BTreeMap<i32, i64>>,
    data_version: Mutex<DataVersion>,
}

impl DelayOffsetManager {
    pub fn new(path: Option<PathBuf>) -> Self {
        Self {
            path,
            table: Mutex::new(BTreeMap::new()),
            data_version: Mutex::new(DataVersion::new(persist::now_ms())),
        }
    }

    pub fn load(config_dir: &Path) -> Result<Self, String> {
        let path = config_dir.join("delayOffset.json");
        let manager = Self::new(Some(path.clone()));
        let Some(file) = persist::read_offset_file(&path)? else {
            return Ok(manager);
        };
        let mut table = manager.table.lock_unpoisoned();
        for (level, off) in &file.offset_table {
            if let (Ok(l), Some(o)) = (level.parse::<i32>(), off.as_i64()) {
                table.insert(l, o);
            }
        }
        drop(table);
        if let Some(dv) = file.data_version {
            *manager.data_version.lock_unpoisoned() = dv;
        }
        Ok(manager)
    }

    pub fn offset(&self, level: i32) -> Option<i64> {
        self.table.lock_unpoisoned().get(&level).copied()
    }

    pub fn update(&self, level: i32, offset: i64) {
        self.table.lock_unpoisoned().insert(level, offset);
    }

    pub fn all(&self) -> BTreeMap<i32, i64> {
        self.table.lock_unpoisoned().clone()
    }

    /// File body (also `GET_ALL_DELAY_OFFSET`'s): fastjson dialect, bare level keys.
    pub fn encode(&self) -> String {
        let version = self.data_version.lock_unpoisoned().encode();
        self.encode_with(&version)
    }

    fn encode_with(&self, data_version_json: &str) -> String {
        let mut out = format!("{{\"dataVersion\":{data_version_json},\"offsetTable\":{{");
        for (i, (level, off)) in self.table.lock_unpoisoned().iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{level}:{off}");
        }
        out.push_str("}}");
        out
    }

    pub fn persist(&self) -> std::io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        // Version bump, snapshot and write under one lock: two persisting threads must not
        // let an older snapshot land after a newer one.
        let mut version = self.data_version.lock_unpoisoned();
        version.next_version(persist::now_ms());
        let text = self.encode_with(&version.encode());
        let result = persist::write_config_file(path, &text);
        drop(version);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_java_shape() {
        let dir = std::env::temp_dir().join(format!("ringmq-delay-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("delayOffset.json"),
            "{\n\t\"offsetTable\":{1:5,3:12\n\t}\n}",
        )
        .unwrap();
        let m = DelayOffsetManager::load(&dir).unwrap();
        assert_eq!(m.offset(3), Some(12));
        m.update(2, 9);
        m.persist().unwrap();
        let text = std::fs::read_to_string(dir.join("delayOffset.json")).unwrap();
        assert!(text.contains("\"offsetTable\":{1:5,2:9,3:12}"), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
