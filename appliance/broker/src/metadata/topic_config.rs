//! The topic table (`config/topics.json`): topic configs, the system topics every broker
//! creates, auto-creation from the `TBW102` template on send, retry/DLQ topic creation, topic
//! name validation, and the `dataVersion` the name-server registration carries.
//!
//! Reads happen on every send and pull, writes rarely: writers copy the map and swap it in
//! under a write lock and bump the table's generation. `select` clones an `Arc` snapshot
//! under the read lock; the send path's `with_topic` reads a copy of the snapshot its own
//! thread keeps, so two network cores sending to one topic never write a shared cache line
//! (a lock word or a reference count) per message.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockWriteGuard};

use ringmq_remoting::body::topic::{perm, DataVersion, TopicConfig, TopicConfigSerializeWrapper};
use ringmq_remoting::json;

use crate::config::BrokerConfig;
use crate::persist;
use ringmq_sync::{LockExt, RwLockExt};

/// Topic name → config; read on every send and pull, so hashed with foldhash, not SipHash.
type TopicTable = HashMap<String, Arc<TopicConfig>, foldhash::fast::RandomState>;

// The permission bits as the `u32` masks of `brokerPermission` and group `forbidden` bits.
pub const PERM_PRIORITY: u32 = perm::PRIORITY as u32;
pub const PERM_READ: u32 = perm::READ as u32;
pub const PERM_WRITE: u32 = perm::WRITE as u32;
pub const PERM_INHERIT: u32 = perm::INHERIT as u32;

pub const AUTO_CREATE_TOPIC_KEY_TOPIC: &str = "TBW102";
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";
pub const SCHEDULE_TOPIC_QUEUE_NUMS: i32 = 18;
pub const BENCHMARK_TOPIC: &str = "BenchmarkTest";
pub const TRANS_HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";
pub const TRANS_OP_HALF_TOPIC: &str = "RMQ_SYS_TRANS_OP_HALF_TOPIC";
pub const TRANS_CHECK_MAX_TIME_TOPIC: &str = "TRANS_CHECK_MAX_TIME_TOPIC";
pub const SELF_TEST_TOPIC: &str = "SELF_TEST_TOPIC";
pub const OFFSET_MOVED_EVENT_TOPIC: &str = "OFFSET_MOVED_EVENT";
pub const ROCKSDB_OFFSET_TOPIC: &str = "CHECKPOINT_TOPIC";
pub const TIMER_TOPIC: &str = "rmq_sys_wheel_timer";
pub const SYSTEM_TOPIC_PREFIX: &str = "rmq_sys_";
pub const RETRY_GROUP_TOPIC_PREFIX: &str = "%RETRY%";
pub const DLQ_GROUP_TOPIC_PREFIX: &str = "%DLQ%";
pub const TOPIC_MAX_LENGTH: usize = 127;
pub const RETRY_OR_DLQ_TOPIC_MAX_LENGTH: usize = 255;
/// Queues of the POP revive topic (`reviveQueueNum`).
const REVIVE_QUEUE_NUMS: i32 = 8;

/// Topics clients may never send to directly.
const NOT_ALLOWED_SEND_TOPICS: [&str; 6] = [
    SCHEDULE_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    SELF_TEST_TOPIC,
    OFFSET_MOVED_EVENT_TOPIC,
];

const FIXED_SYSTEM_TOPICS: [&str; 10] = [
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    SCHEDULE_TOPIC,
    BENCHMARK_TOPIC,
    TRANS_HALF_TOPIC,
    "RMQ_SYS_TRACE_TOPIC",
    TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    SELF_TEST_TOPIC,
    OFFSET_MOVED_EVENT_TOPIC,
    ROCKSDB_OFFSET_TOPIC,
];

/// Counts from the broker's config and group tables (`u32`) as a topic's Java `int`s; a
/// value past `i32::MAX` cannot be a queue count or flag, so it saturates.
fn java_int(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Why a topic name is refused, as the client should read it.
pub fn validate_topic(topic: &str) -> Result<(), String> {
    if topic.trim().is_empty() {
        return Err("The specified topic is blank.".to_string());
    }
    if !is_valid_name(topic) {
        return Err(format!(
            "The specified topic: {topic}, contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
        ));
    }
    if is_retry_or_dlq_topic(topic) {
        if topic.len() > RETRY_OR_DLQ_TOPIC_MAX_LENGTH {
            return Err(format!(
                "The specified topic is DLQ or Retry topic: {topic}, and it's longer than topic max length: {RETRY_OR_DLQ_TOPIC_MAX_LENGTH}"
            ));
        }
    } else if topic.len() > TOPIC_MAX_LENGTH {
        return Err(format!(
            "The specified topic: {topic}, is longer than topic max length: {TOPIC_MAX_LENGTH}"
        ));
    }
    Ok(())
}

/// Group names: same charset as topics, at most 120 characters.
pub fn validate_group(group: &str) -> Result<(), String> {
    if group.trim().is_empty() {
        return Err("The specified group is blank.".to_string());
    }
    if !is_valid_name(group) {
        return Err(format!(
            "The specified group: {group}, contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
        ));
    }
    if group.len() > 120 {
        return Err(format!(
            "The specified group: {group}, is longer than group max length: 120"
        ));
    }
    Ok(())
}

fn is_valid_name(name: &str) -> bool {
    name.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'-' | b'_' | b'|'))
}

pub fn is_retry_or_dlq_topic(topic: &str) -> bool {
    topic.starts_with(RETRY_GROUP_TOPIC_PREFIX) || topic.starts_with(DLQ_GROUP_TOPIC_PREFIX)
}

pub fn is_not_allowed_send_topic(topic: &str) -> bool {
    NOT_ALLOWED_SEND_TOPICS.contains(&topic)
}

pub fn retry_topic(group: &str) -> String {
    format!("{RETRY_GROUP_TOPIC_PREFIX}{group}")
}

pub fn dlq_topic(group: &str) -> String {
    format!("{DLQ_GROUP_TOPIC_PREFIX}{group}")
}

/// Reads `topics.json` in the broker's own layout or a Java broker's (fastjson); also says
/// whether the file carries a `dataVersion`. An entry with a blank `topicName` is named by
/// its key. Negative counts or perm bits describe no topic and make the file invalid (the
/// `.bak` copy is tried next).
fn parse_topics_json(text: &str) -> Result<(TopicConfigSerializeWrapper, bool), String> {
    let value = json::parse_str(text).map_err(|e| e.to_string())?;
    let mut wrapper =
        TopicConfigSerializeWrapper::from_value(&value, "").map_err(|e| e.to_string())?;
    for (name, tc) in &mut wrapper.topic_config_table {
        if tc.topic_name.is_empty() {
            tc.topic_name = name.clone();
        }
        for (field, n) in [
            ("readQueueNums", tc.read_queue_nums),
            ("writeQueueNums", tc.write_queue_nums),
            ("perm", tc.perm),
            ("topicSysFlag", tc.topic_sys_flag),
        ] {
            if n < 0 {
                return Err(format!(
                    "topicConfigTable.{name}.{field} is {n}, expected a non-negative integer"
                ));
            }
        }
    }
    Ok((wrapper, value.get_present("dataVersion").is_some()))
}

type Listener = Box<dyn Fn() + Send + Sync>;

/// Source of [`TopicConfigManager::id`].
static NEXT_MANAGER_ID: AtomicU64 = AtomicU64::new(0);

/// A thread's snapshot of one manager's table, as of `generation`.
struct ThreadTable {
    manager: u64,
    generation: u64,
    table: Arc<TopicTable>,
}

thread_local! {
    /// The snapshot [`TopicConfigManager::with_topic`] reads on this thread.
    static THREAD_TABLE: RefCell<Option<ThreadTable>> = const { RefCell::new(None) };
}

/// The broker's topic table.
pub struct TopicConfigManager {
    path: Option<PathBuf>,
    table: RwLock<Arc<TopicTable>>,
    /// Bumped under the write lock each time `table` is swapped: a thread's cached
    /// snapshot is current while the generation it was taken at is.
    generation: AtomicU64,
    /// Tells this manager's snapshots apart from another's in a thread's cache (tests run
    /// several brokers in one process).
    id: u64,
    data_version: Mutex<DataVersion>,
    system_topics: Vec<String>,
    /// Called after each change (the broker re-registers with name servers).
    on_change: RwLock<Option<Listener>>,
}

/// What `create_topic_in_send` decided.
#[derive(Debug, Clone, PartialEq)]
pub enum AutoCreate {
    Existing(Arc<TopicConfig>),
    Created(Arc<TopicConfig>),
    /// Template missing or not inheritable, or auto-create off: answer TOPIC_NOT_EXIST.
    NotAllowed(String),
}

impl TopicConfigManager {
    /// An in-memory table with the system topics `config` asks for; `path` = where to persist
    /// (`None` in unit tests).
    pub fn new(config: &BrokerConfig, path: Option<PathBuf>) -> Self {
        let mut table = TopicTable::default();
        let mut system_topics: Vec<String> =
            FIXED_SYSTEM_TOPICS.iter().map(|s| s.to_string()).collect();
        let mut put = |tc: TopicConfig, sys: &mut Vec<String>| {
            if !sys.contains(&tc.topic_name) {
                sys.push(tc.topic_name.clone());
            }
            table.insert(tc.topic_name.clone(), Arc::new(tc));
        };
        put(
            TopicConfig::new(SELF_TEST_TOPIC).with_queues(1, 1),
            &mut system_topics,
        );
        if config.auto_create_topic_enable {
            let n = java_int(config.default_topic_queue_nums);
            put(
                TopicConfig::new(AUTO_CREATE_TOPIC_KEY_TOPIC)
                    .with_queues(n, n)
                    .with_perm(perm::INHERIT | perm::READ | perm::WRITE),
                &mut system_topics,
            );
        }
        put(
            TopicConfig::new(BENCHMARK_TOPIC).with_queues(1024, 1024),
            &mut system_topics,
        );
        let cluster_perm = if config.cluster_topic_enable {
            perm::INHERIT | perm::READ | perm::WRITE
        } else {
            perm::INHERIT
        };
        put(
            TopicConfig::new(config.broker_cluster_name.clone()).with_perm(cluster_perm),
            &mut system_topics,
        );
        let broker_perm = if config.broker_topic_enable {
            perm::INHERIT | perm::READ | perm::WRITE
        } else {
            perm::INHERIT
        };
        put(
            TopicConfig::new(config.broker_name.clone())
                .with_queues(1, 1)
                .with_perm(broker_perm),
            &mut system_topics,
        );
        put(
            TopicConfig::new(OFFSET_MOVED_EVENT_TOPIC).with_queues(1, 1),
            &mut system_topics,
        );
        put(
            TopicConfig::new(SCHEDULE_TOPIC)
                .with_queues(SCHEDULE_TOPIC_QUEUE_NUMS, SCHEDULE_TOPIC_QUEUE_NUMS),
            &mut system_topics,
        );
        if config.trace_topic_enable {
            put(
                TopicConfig::new(config.msg_trace_topic_name.clone()).with_queues(1, 1),
                &mut system_topics,
            );
        }
        put(
            TopicConfig::new(format!("{}_REPLY_TOPIC", config.broker_cluster_name))
                .with_queues(1, 1),
            &mut system_topics,
        );
        put(
            TopicConfig::new(format!("rmq_sys_REVIVE_LOG_{}", config.broker_cluster_name))
                .with_queues(REVIVE_QUEUE_NUMS, REVIVE_QUEUE_NUMS),
            &mut system_topics,
        );
        put(
            TopicConfig::new(format!("rmq_sys_SYNC_BROKER_MEMBER_{}", config.broker_name))
                .with_queues(1, 1)
                .with_perm(perm::INHERIT),
            &mut system_topics,
        );
        put(
            TopicConfig::new(TRANS_HALF_TOPIC).with_queues(1, 1),
            &mut system_topics,
        );
        put(
            TopicConfig::new(TRANS_OP_HALF_TOPIC).with_queues(1, 1),
            &mut system_topics,
        );
        put(
            TopicConfig::new(TIMER_TOPIC).with_queues(1, 1),
            &mut system_topics,
        );
        Self {
            path,
            table: RwLock::new(Arc::new(table)),
            generation: AtomicU64::new(0),
            id: NEXT_MANAGER_ID.fetch_add(1, Ordering::Relaxed),
            data_version: Mutex::new(DataVersion::new(persist::now_ms())),
            system_topics,
            on_change: RwLock::new(None),
        }
    }

    /// Builds the table and overlays `<config dir>/topics.json` (or its `.bak`).
    pub fn load(config: &BrokerConfig) -> Result<Self, String> {
        let path = config.config_dir().join("topics.json");
        let manager = Self::new(config, Some(path.clone()));
        let parsed = persist::read_config_file(&path, parse_topics_json)?;
        if let Some((wrapper, has_data_version)) = parsed {
            let mut table = (**manager.table.read_unpoisoned()).clone();
            for (name, tc) in wrapper.topic_config_table {
                table.insert(name, Arc::new(tc));
            }
            manager.publish(&mut manager.table.write_unpoisoned(), table);
            if has_data_version {
                *manager.data_version.lock_unpoisoned() = wrapper.data_version;
            }
        }
        Ok(manager)
    }

    pub fn set_on_change(&self, listener: Listener) {
        *self.on_change.write_unpoisoned() = Some(listener);
    }

    pub fn select(&self, topic: &str) -> Option<Arc<TopicConfig>> {
        self.table.read_unpoisoned().get(topic).cloned()
    }

    /// Runs `f` on `topic`'s config (`None`: no such topic) borrowed from the calling
    /// thread's snapshot of the table, refreshed when the table changed since it was taken.
    /// The send path reads its topic this way: no lock and no reference count is written
    /// per message. `f` may call back into the manager.
    pub fn with_topic<R>(&self, topic: &str, f: impl FnOnce(Option<&TopicConfig>) -> R) -> R {
        // Read before the table: a swap in between leaves an older generation next to the
        // newer table, so the next call merely refreshes again.
        let generation = self.generation.load(Ordering::Acquire);
        THREAD_TABLE.with(|cell| {
            let current = |c: &Option<ThreadTable>| {
                c.as_ref()
                    .is_some_and(|t| t.manager == self.id && t.generation == generation)
            };
            if let Ok(mut cached) = cell.try_borrow_mut() {
                if !current(&cached) {
                    *cached = Some(ThreadTable {
                        manager: self.id,
                        generation,
                        table: self.table.read_unpoisoned().clone(),
                    });
                }
            }
            match cell.try_borrow() {
                Ok(cached) if current(&cached) => {
                    let table = &cached.as_ref().expect("current snapshot").table;
                    f(table.get(topic).map(|tc| &**tc))
                }
                // Called from inside `f` while the snapshot went stale: read the table.
                _ => f(self.select(topic).as_deref()),
            }
        })
    }

    /// Swaps in `table` under the held write lock and tells the threads' snapshots.
    fn publish(&self, guard: &mut RwLockWriteGuard<'_, Arc<TopicTable>>, table: TopicTable) {
        **guard = Arc::new(table);
        self.generation.fetch_add(1, Ordering::Release);
    }

    pub fn is_system_topic(&self, topic: &str) -> bool {
        topic.starts_with(SYSTEM_TOPIC_PREFIX) || self.system_topics.iter().any(|t| t == topic)
    }

    pub fn topic_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.table.read_unpoisoned().keys().cloned().collect();
        names.sort();
        names
    }

    pub fn data_version(&self) -> DataVersion {
        *self.data_version.lock_unpoisoned()
    }

    /// The whole table as the registration body / `topics.json` wants it.
    pub fn wrapper(&self) -> TopicConfigSerializeWrapper {
        let table = self.table.read_unpoisoned().clone();
        TopicConfigSerializeWrapper {
            data_version: self.data_version(),
            topic_config_table: table
                .iter()
                .map(|(k, v)| (k.clone(), (**v).clone()))
                .collect(),
        }
    }

    /// Inserts or replaces a topic, bumps the data version, persists and notifies.
    pub fn update(&self, tc: TopicConfig) -> Arc<TopicConfig> {
        let tc = Arc::new(tc);
        {
            let mut guard = self.table.write_unpoisoned();
            let mut table = (**guard).clone();
            table.insert(tc.topic_name.clone(), tc.clone());
            self.publish(&mut guard, table);
        }
        self.changed();
        tc
    }

    pub fn delete(&self, topic: &str) -> bool {
        let removed = {
            let mut guard = self.table.write_unpoisoned();
            if !guard.contains_key(topic) {
                return false;
            }
            let mut table = (**guard).clone();
            table.remove(topic);
            self.publish(&mut guard, table);
            true
        };
        self.changed();
        removed
    }

    /// A slave's copy of its master's table: the whole table and its data version become
    /// the master's, so the next sync sees nothing new until the master changes again.
    /// Persisted, then the broker re-registers.
    pub fn replace_from_master(
        &self,
        table: impl IntoIterator<Item = TopicConfig>,
        data_version: DataVersion,
    ) {
        let table: TopicTable = table
            .into_iter()
            .map(|tc| (tc.topic_name.clone(), Arc::new(tc)))
            .collect();
        self.publish(&mut self.table.write_unpoisoned(), table);
        *self.data_version.lock_unpoisoned() = data_version;
        if let Err(e) = self.persist() {
            tracing::error!("cannot persist topics.json: {e}; the copy lives in memory only");
        }
        if let Some(listener) = self.on_change.read_unpoisoned().as_ref() {
            listener();
        }
    }

    /// Bumps the data version and re-registers without a table change: the registration
    /// depends on the live `brokerPermission` too, and name servers ignore a registration
    /// whose data version they have already seen.
    pub fn mark_changed(&self) {
        self.changed();
    }

    fn changed(&self) {
        self.data_version
            .lock_unpoisoned()
            .next_version(persist::now_ms());
        if let Err(e) = self.persist() {
            tracing::error!("cannot persist topics.json: {e}; the change lives in memory only");
        }
        if let Some(listener) = self.on_change.read_unpoisoned().as_ref() {
            listener();
        }
    }

    pub fn persist(&self) -> std::io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        // The two-space layout `topics.json` has always had; Java reads it as well.
        let json = serde_json::to_string_pretty(&self.wrapper().to_value())
            .map_err(std::io::Error::other)?;
        persist::write_config_file(path, &json)
    }

    /// Send-path auto-creation (`createTopicInSendMessageMethod`): an unknown topic is created
    /// from `default_topic` when that template exists with the INHERIT perm (TBW102 only while
    /// `autoCreateTopicEnable`, passed as the live value so a runtime switch applies to the
    /// next send).
    pub fn create_topic_in_send(
        &self,
        auto_create_topic_enable: bool,
        topic: &str,
        default_topic: &str,
        client_queue_nums: u32,
        topic_sys_flag: u32,
    ) -> AutoCreate {
        if let Some(tc) = self.select(topic) {
            return AutoCreate::Existing(tc);
        }
        if is_retry_or_dlq_topic(topic) {
            let tc = TopicConfig::new(topic).with_queues(1, 1);
            return AutoCreate::Created(self.create_if_absent(tc));
        }
        let Some(template) = self.select(default_topic) else {
            return AutoCreate::NotAllowed(format!(
                "topic[{topic}] not exist, apply first please! (the default topic {default_topic} does not exist)"
            ));
        };
        if default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC && !auto_create_topic_enable {
            return AutoCreate::NotAllowed(format!(
                "topic[{topic}] not exist, apply first please! (autoCreateTopicEnable=false)"
            ));
        }
        if !template.is_inherited() {
            return AutoCreate::NotAllowed(format!(
                "topic[{topic}] not exist, apply first please! (default topic {default_topic} has no inherit permission)"
            ));
        }
        let queues = java_int(client_queue_nums)
            .min(template.write_queue_nums)
            .max(1);
        let mut tc = TopicConfig::new(topic)
            .with_queues(queues, queues)
            .with_perm(template.perm & !perm::INHERIT);
        tc.topic_sys_flag = java_int(topic_sys_flag);
        tc.topic_filter_type = template.topic_filter_type;
        tracing::info!(
            topic,
            default_topic,
            queues,
            "auto-created topic from template"
        );
        AutoCreate::Created(self.create_if_absent(tc))
    }

    /// Retry / DLQ topics created on heartbeat or send-back with `queue_nums` queues.
    pub fn create_topic_of_retry(
        &self,
        topic: &str,
        queue_nums: u32,
        perm_bits: u32,
    ) -> Arc<TopicConfig> {
        if let Some(tc) = self.select(topic) {
            return tc;
        }
        let queue_nums = java_int(queue_nums);
        self.create_if_absent(
            TopicConfig::new(topic)
                .with_queues(queue_nums, queue_nums)
                .with_perm(java_int(perm_bits)),
        )
    }

    fn create_if_absent(&self, tc: TopicConfig) -> Arc<TopicConfig> {
        let created = {
            let mut guard = self.table.write_unpoisoned();
            if let Some(existing) = guard.get(&tc.topic_name) {
                return existing.clone();
            }
            let tc = Arc::new(tc);
            let mut table = (**guard).clone();
            table.insert(tc.topic_name.clone(), tc.clone());
            self.publish(&mut guard, table);
            tc
        };
        self.changed();
        created
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> BrokerConfig {
        BrokerConfig {
            broker_name: "broker-a".into(),
            ..BrokerConfig::default()
        }
    }

    /// The thread's snapshot follows every kind of table change, keeps two managers apart,
    /// and a call from inside `f` reads the current table.
    #[test]
    fn with_topic_reads_a_snapshot_that_follows_every_change() {
        let m = TopicConfigManager::new(&config(), None);
        let other = TopicConfigManager::new(&config(), None);
        let queues = |m: &TopicConfigManager, t: &str| {
            m.with_topic(t, |tc| tc.map(|tc| tc.write_queue_nums))
        };
        assert_eq!(queues(&m, "T"), None);
        m.update(TopicConfig::new("T").with_queues(4, 4));
        assert_eq!(queues(&m, "T"), Some(4), "after update");
        assert_eq!(queues(&other, "T"), None, "another manager's table");
        assert_eq!(queues(&m, "T"), Some(4), "back to the first manager");
        m.update(TopicConfig::new("T").with_queues(2, 2));
        assert_eq!(queues(&m, "T"), Some(2), "after a replacement");
        let created = m.create_topic_of_retry("%RETRY%g", 1, PERM_READ | PERM_WRITE);
        assert_eq!(
            queues(&m, "%RETRY%g"),
            Some(created.write_queue_nums),
            "after create"
        );
        assert!(m.delete("T"));
        assert_eq!(queues(&m, "T"), None, "after delete");
        m.replace_from_master(
            [TopicConfig::new("M").with_queues(3, 3)],
            DataVersion::new(1),
        );
        assert_eq!(queues(&m, "M"), Some(3), "after a slave's copy");
        assert_eq!(queues(&m, "%RETRY%g"), None);
        let nested = m.with_topic("M", |_| {
            m.update(TopicConfig::new("N").with_queues(5, 5));
            queues(&m, "N")
        });
        assert_eq!(
            nested,
            Some(5),
            "a stale snapshot inside f falls back to the table"
        );
        assert_eq!(queues(&m, "N"), Some(5));
    }

    #[test]
    fn system_topics_exist_with_rocketmq_shapes() {
        let m = TopicConfigManager::new(&config(), None);
        let tbw = m.select("TBW102").unwrap();
        assert_eq!(tbw.perm, 7);
        assert_eq!(tbw.write_queue_nums, 8);
        assert_eq!(m.select(SCHEDULE_TOPIC).unwrap().read_queue_nums, 18);
        assert!(m.select("DefaultCluster").is_some());
        assert!(m.select("broker-a").is_some());
        assert!(m.select(SELF_TEST_TOPIC).is_some());
        assert!(m.select(TRANS_HALF_TOPIC).is_some());
        assert!(m.is_system_topic("TBW102"));
        assert!(m.is_system_topic("rmq_sys_anything"));
        assert!(!m.is_system_topic("UserTopic"));
    }

    #[test]
    fn auto_create_from_template() {
        let c = config();
        let m = TopicConfigManager::new(&c, None);
        let AutoCreate::Created(tc) = m.create_topic_in_send(true, "NewTopic", "TBW102", 4, 0)
        else {
            panic!("should create")
        };
        assert_eq!(
            (tc.read_queue_nums, tc.write_queue_nums, tc.perm),
            (4, 4, 6)
        );
        assert!(matches!(
            m.create_topic_in_send(true, "NewTopic", "TBW102", 4, 0),
            AutoCreate::Existing(_)
        ));
        assert!(matches!(
            m.create_topic_in_send(true, "T2", "NoSuchTemplate", 4, 0),
            AutoCreate::NotAllowed(_)
        ));
        let big = m.create_topic_in_send(true, "T3", "TBW102", 64, 0);
        assert!(matches!(big, AutoCreate::Created(ref t) if t.write_queue_nums == 8));
        let off = BrokerConfig {
            auto_create_topic_enable: false,
            ..config()
        };
        let m2 = TopicConfigManager::new(&off, None);
        assert!(matches!(
            m2.create_topic_in_send(false, "T4", "TBW102", 4, 0),
            AutoCreate::NotAllowed(_)
        ));
        // Switched off at runtime: TBW102 still exists, but the switch wins.
        assert!(matches!(
            m.create_topic_in_send(false, "T5", "TBW102", 4, 0),
            AutoCreate::NotAllowed(ref why) if why.contains("autoCreateTopicEnable=false")
        ));
    }

    #[test]
    fn topic_name_rules() {
        assert!(validate_topic("Topic_A-1|x%").is_ok());
        assert!(validate_topic("").is_err());
        assert!(validate_topic("bad topic").is_err());
        assert!(validate_topic(&"a".repeat(128)).is_err());
        assert!(validate_topic(&format!("%RETRY%{}", "a".repeat(200))).is_ok());
        assert!(is_not_allowed_send_topic(SCHEDULE_TOPIC));
        assert!(validate_group(&"g".repeat(121)).is_err());
    }

    #[test]
    fn topics_json_entries_are_checked_and_named_by_their_key() {
        let (w, has_version) =
            parse_topics_json(r#"{"topicConfigTable":{"K":{"topicName":"","perm":6}}}"#).unwrap();
        assert!(!has_version);
        assert_eq!(w.topic_config_table["K"].topic_name, "K");
        let negative = parse_topics_json(r#"{"topicConfigTable":{"K":{"readQueueNums":-1}}}"#);
        assert_eq!(
            negative.unwrap_err(),
            "topicConfigTable.K.readQueueNums is -1, expected a non-negative integer"
        );
        assert!(parse_topics_json(r#"{"topicConfigTable":{"K":{"perm":-2}}}"#).is_err());
    }

    #[test]
    fn topics_json_round_trips_through_disk() {
        let dir = std::env::temp_dir().join(format!("ringmq-topics-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let c = BrokerConfig {
            store_path_root_dir: dir.display().to_string(),
            ..config()
        };
        let m = TopicConfigManager::load(&c).unwrap();
        let mut tc = TopicConfig::new("Persisted").with_queues(3, 5);
        tc.order = true;
        m.update(tc.clone());
        let v1 = m.data_version();
        let m2 = TopicConfigManager::load(&c).unwrap();
        assert_eq!(*m2.select("Persisted").unwrap(), tc);
        assert_eq!(m2.data_version(), v1);
        let text = std::fs::read_to_string(dir.join("config/topics.json")).unwrap();
        assert!(text.contains("\"topicConfigTable\"") && text.contains("\"readQueueNums\": 3"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
