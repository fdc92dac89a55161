//! Committed consumer offsets (`config/consumerOffset.json`): `"topic@group" → {queueId →
//! next offset to consume}`, the last pull offset per queue (consume stats), and one-shot
//! server-side reset offsets (admin reset → the next pull answers OFFSET_MOVED).
//!
//! The table is split into shards by key hash so concurrent pulls on different queues rarely
//! meet on one mutex; each lock is held for a map lookup only.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::hash::BuildHasher;
use std::path::PathBuf;
use std::sync::Mutex;

use ringmq_remoting::body::topic::DataVersion;
use ringmq_sync::LockExt;

use crate::persist;

const SHARDS: usize = 16;

type QueueOffsets = HashMap<i32, i64>;

pub struct ConsumerOffsetManager {
    path: Option<PathBuf>,
    shards: Vec<Mutex<HashMap<String, QueueOffsets>>>,
    pull_offsets: Vec<Mutex<HashMap<String, QueueOffsets>>>,
    reset_offsets: Mutex<HashMap<String, QueueOffsets>>,
    data_version: Mutex<DataVersion>,
    hasher: std::collections::hash_map::RandomState,
}

/// `topic@group`, the table key RocketMQ uses.
pub fn offset_key(topic: &str, group: &str) -> String {
    let mut key = String::with_capacity(topic.len() + group.len() + 1);
    key.push_str(topic);
    key.push('@');
    key.push_str(group);
    key
}

impl ConsumerOffsetManager {
    pub fn new(path: Option<PathBuf>) -> Self {
        Self {
            path,
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            pull_offsets: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            reset_offsets: Mutex::new(HashMap::new()),
            data_version: Mutex::new(DataVersion::new(persist::now_ms())),
            hasher: Default::default(),
        }
    }

    /// Loads `consumerOffset.json` (fastjson dialect with bare integer keys) or its `.bak`.
    pub fn load(config_dir: &std::path::Path) -> Result<Self, String> {
        let path = config_dir.join("consumerOffset.json");
        let manager = Self::new(Some(path.clone()));
        let Some(file) = persist::read_offset_file(&path)? else {
            return Ok(manager);
        };
        for (key, queues) in &file.offset_table {
            let Some(queues) = queues.as_object() else {
                continue;
            };
            let mut map = QueueOffsets::new();
            for (qid, off) in queues {
                if let (Ok(q), Some(o)) = (qid.parse::<i32>(), off.as_i64()) {
                    map.insert(q, o);
                }
            }
            manager
                .shard(key)
                .lock_unpoisoned()
                .insert(key.clone(), map);
        }
        if let Some(dv) = file.data_version {
            *manager.data_version.lock_unpoisoned() = dv;
        }
        Ok(manager)
    }

    fn shard_index(&self, key: &str) -> usize {
        (self.hasher.hash_one(key) as usize) % SHARDS
    }

    fn shard(&self, key: &str) -> &Mutex<HashMap<String, QueueOffsets>> {
        &self.shards[self.shard_index(key)]
    }

    /// Stores `offset` as the group's next offset to consume on the queue.
    pub fn commit_offset(&self, group: &str, topic: &str, queue_id: i32, offset: i64) {
        let key = offset_key(topic, group);
        let mut shard = self.shard(&key).lock_unpoisoned();
        let queues = shard.entry(key).or_default();
        if let Some(prev) = queues.insert(queue_id, offset) {
            if offset < prev {
                tracing::debug!(
                    group,
                    topic,
                    queue_id,
                    prev,
                    offset,
                    "consumer offset moved backwards"
                );
            }
        }
    }

    /// The committed offset, `None` when the group never committed on this queue.
    pub fn query_offset(&self, group: &str, topic: &str, queue_id: i32) -> Option<i64> {
        let key = offset_key(topic, group);
        self.shard(&key)
            .lock_unpoisoned()
            .get(&key)
            .and_then(|q| q.get(&queue_id))
            .copied()
    }

    /// Every queue offset of `topic@group`.
    pub fn query_offsets(&self, group: &str, topic: &str) -> BTreeMap<i32, i64> {
        let key = offset_key(topic, group);
        self.shard(&key)
            .lock_unpoisoned()
            .get(&key)
            .map(|q| q.iter().map(|(k, v)| (*k, *v)).collect())
            .unwrap_or_default()
    }

    /// Records the next begin offset a pull returned (`pullOffset` in consume stats).
    pub fn record_pull_offset(&self, group: &str, topic: &str, queue_id: i32, offset: i64) {
        let key = offset_key(topic, group);
        let idx = self.shard_index(&key);
        self.pull_offsets[idx]
            .lock_unpoisoned()
            .entry(key)
            .or_default()
            .insert(queue_id, offset);
    }

    pub fn pull_offset(&self, group: &str, topic: &str, queue_id: i32) -> Option<i64> {
        let key = offset_key(topic, group);
        let idx = self.shard_index(&key);
        self.pull_offsets[idx]
            .lock_unpoisoned()
            .get(&key)
            .and_then(|q| q.get(&queue_id))
            .copied()
    }

    /// Admin reset: the next pull of this queue answers OFFSET_MOVED to `offset`, and the
    /// committed offset is set to it.
    pub fn set_reset_offset(&self, group: &str, topic: &str, queue_id: i32, offset: i64) {
        self.reset_offsets
            .lock_unpoisoned()
            .entry(offset_key(topic, group))
            .or_default()
            .insert(queue_id, offset);
        self.commit_offset(group, topic, queue_id, offset);
    }

    /// A pending reset offset, if any (not consumed).
    pub fn peek_reset_offset(&self, group: &str, topic: &str, queue_id: i32) -> Option<i64> {
        let resets = self.reset_offsets.lock_unpoisoned();
        if resets.is_empty() {
            return None;
        }
        resets
            .get(&offset_key(topic, group))
            .and_then(|q| q.get(&queue_id))
            .copied()
    }

    /// Takes the pending reset offset (one-shot).
    pub fn take_reset_offset(&self, group: &str, topic: &str, queue_id: i32) -> Option<i64> {
        let mut resets = self.reset_offsets.lock_unpoisoned();
        if resets.is_empty() {
            return None;
        }
        let key = offset_key(topic, group);
        let queues = resets.get_mut(&key)?;
        let offset = queues.remove(&queue_id);
        if queues.is_empty() {
            resets.remove(&key);
        }
        offset
    }

    /// Groups that have offsets on `topic`.
    pub fn groups_of_topic(&self, topic: &str) -> Vec<String> {
        let mut groups = Vec::new();
        for shard in &self.shards {
            for key in shard.lock_unpoisoned().keys() {
                if let Some((t, g)) = key.split_once('@') {
                    if t == topic {
                        groups.push(g.to_string());
                    }
                }
            }
        }
        groups.sort();
        groups
    }

    /// Topics `group` has offsets on.
    pub fn topics_of_group(&self, group: &str) -> Vec<String> {
        let mut topics = Vec::new();
        for shard in &self.shards {
            for key in shard.lock_unpoisoned().keys() {
                if let Some((t, g)) = key.rsplit_once('@') {
                    if g == group {
                        topics.push(t.to_string());
                    }
                }
            }
        }
        topics.sort();
        topics
    }

    pub fn remove_group(&self, group: &str) {
        for shard in &self.shards {
            shard
                .lock_unpoisoned()
                .retain(|k, _| k.rsplit_once('@').map(|(_, g)| g != group).unwrap_or(true));
        }
    }

    /// The file body in fastjson's dialect (bare integer queue-id keys), as Java brokers
    /// write and read it; also the body of `GET_ALL_CONSUMER_OFFSET`.
    pub fn encode(&self) -> String {
        let mut all: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
        for shard in &self.shards {
            for (k, q) in shard.lock_unpoisoned().iter() {
                all.insert(k.clone(), q.iter().map(|(a, b)| (*a, *b)).collect());
            }
        }
        let mut out = String::with_capacity(64 + all.len() * 48);
        let _ = write!(
            out,
            "{{\"dataVersion\":{},\"offsetTable\":{{",
            self.data_version.lock_unpoisoned().encode()
        );
        for (i, (key, queues)) in all.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&serde_json::to_string(key).unwrap_or_default());
            out.push_str(":{");
            for (j, (q, o)) in queues.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{q}:{o}");
            }
            out.push('}');
        }
        out.push_str("}}");
        out
    }

    pub fn persist(&self) -> std::io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        self.data_version
            .lock_unpoisoned()
            .next_version(persist::now_ms());
        persist::write_config_file(path, &self.encode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_query_and_reset() {
        let m = ConsumerOffsetManager::new(None);
        assert_eq!(m.query_offset("G", "T", 0), None);
        m.commit_offset("G", "T", 0, 42);
        m.commit_offset("G", "T", 1, 7);
        assert_eq!(m.query_offset("G", "T", 0), Some(42));
        assert_eq!(m.query_offsets("G", "T").len(), 2);
        m.set_reset_offset("G", "T", 0, 5);
        assert_eq!(m.query_offset("G", "T", 0), Some(5));
        assert_eq!(m.take_reset_offset("G", "T", 0), Some(5));
        assert_eq!(m.take_reset_offset("G", "T", 0), None, "reset is one-shot");
        assert_eq!(m.groups_of_topic("T"), vec!["G"]);
        assert_eq!(m.topics_of_group("G"), vec!["T"]);
    }

    #[test]
    fn file_uses_bare_integer_keys_and_round_trips() {
        let dir = std::env::temp_dir().join(format!("ringmq-offsets-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let m = ConsumerOffsetManager::load(&dir).unwrap();
        m.commit_offset("G1", "T1", 0, 100);
        m.commit_offset("G1", "T1", 3, 98);
        m.commit_offset("%RETRY%G1", "%RETRY%G1", 0, 1);
        m.persist().unwrap();
        let text = std::fs::read_to_string(dir.join("consumerOffset.json")).unwrap();
        assert!(text.contains("\"T1@G1\":{0:100,3:98}"), "{text}");
        let back = ConsumerOffsetManager::load(&dir).unwrap();
        assert_eq!(back.query_offset("G1", "T1", 3), Some(98));
        assert_eq!(back.query_offset("%RETRY%G1", "%RETRY%G1", 0), Some(1));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
