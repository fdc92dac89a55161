//! The timer metrics file `config/timermetrics` (store.md §13), in RocketMQ's JSON layout:
//! `{"dataVersion":{…},"timingCount":{"<realTopic>":{"count":N,"timeStamp":ms}}}` — messages
//! waiting in the wheel per real topic. Metrics only: delivery never reads it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ringmq_remoting::body::topic::DataVersion;
use serde_json::{json, Map, Value};

/// Per-topic pending counts and the file they persist to.
pub struct TimerMetrics {
    path: PathBuf,
    /// Real topic → (count, last change ms).
    timing_count: BTreeMap<String, (i64, i64)>,
    data_version: DataVersion,
    dirty: bool,
}

impl TimerMetrics {
    /// Loads the file (or its `.bak`); a missing or unreadable file starts empty.
    pub fn load(path: &Path, now_ms: i64) -> Self {
        let mut metrics = Self {
            path: path.to_path_buf(),
            timing_count: BTreeMap::new(),
            data_version: DataVersion::new(now_ms),
            dirty: false,
        };
        let parsed = crate::persist::read_config_file(path, |text| {
            serde_json::from_str::<Value>(&crate::persist::fastjson_to_standard(text))
                .map_err(|e| e.to_string())
        });
        match parsed {
            Ok(Some(v)) => metrics.absorb(&v),
            Ok(None) => {}
            Err(e) => tracing::warn!("timer metrics not loaded ({e}); starting from zero"),
        }
        metrics
    }

    fn absorb(&mut self, v: &Value) {
        if let Some(table) = v.get("timingCount").and_then(Value::as_object) {
            for (topic, m) in table {
                let count = m.get("count").and_then(Value::as_i64).unwrap_or(0);
                let ts = m.get("timeStamp").and_then(Value::as_i64).unwrap_or(0);
                self.timing_count.insert(topic.clone(), (count, ts));
            }
        }
        if let Some(dv) = v.get("dataVersion") {
            let field = |k: &str| dv.get(k).and_then(Value::as_i64).unwrap_or(0);
            self.data_version.state_version = field("stateVersion");
            self.data_version.timestamp = field("timestamp");
            self.data_version.counter = field("counter");
        }
    }

    /// Adds `delta` to a topic's count (never below zero).
    pub fn add(&mut self, topic: &str, delta: i64, now_ms: i64) {
        let entry = self.timing_count.entry(topic.to_string()).or_insert((0, 0));
        entry.0 = (entry.0 + delta).max(0);
        entry.1 = now_ms;
        self.dirty = true;
    }

    /// Every topic's count, by topic name.
    pub fn counts(&self) -> Vec<(String, i64)> {
        self.timing_count
            .iter()
            .map(|(topic, (count, _))| (topic.clone(), *count))
            .collect()
    }

    pub fn count(&self, topic: &str) -> i64 {
        self.timing_count.get(topic).map_or(0, |e| e.0)
    }

    /// The file's JSON text.
    pub fn encode(&self) -> String {
        let mut table = Map::new();
        for (topic, (count, ts)) in &self.timing_count {
            table.insert(topic.clone(), json!({"count": count, "timeStamp": ts}));
        }
        let dv = &self.data_version;
        let doc = json!({
            "dataVersion": {
                "counter": dv.counter,
                "stateVersion": dv.state_version,
                "timestamp": dv.timestamp,
            },
            "timingCount": Value::Object(table),
        });
        serde_json::to_string_pretty(&doc).unwrap_or_default()
    }

    /// Writes the file when something changed since the last write.
    pub fn persist(&mut self, now_ms: i64) -> Result<(), String> {
        if !self.dirty {
            return Ok(());
        }
        self.data_version.next_version(now_ms);
        crate::persist::write_config_file(&self.path, &self.encode())
            .map_err(|e| format!("cannot write {}: {e}", self.path.display()))?;
        self.dirty = false;
        Ok(())
    }
}
