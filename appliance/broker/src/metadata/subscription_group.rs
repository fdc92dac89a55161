//! Consumer-group configs (`config/subscriptionGroup.json`): retry queue count, max reconsume
//! times, consume enable/broadcast flags; groups auto-created on first use when
//! `autoCreateSubscriptionGroup` is on.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde::{Deserialize, Serialize};

use crate::config::BrokerConfig;
use crate::persist::{self, DataVersion};
use ringmq_sync::{LockExt, RwLockExt};

/// `SubscriptionGroupConfig` with upstream defaults (headers.md §9.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionGroupConfig {
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
    #[serde(default)]
    pub broker_id: u64,
    #[serde(default = "yes")]
    pub consume_broadcast_enable: bool,
    #[serde(default = "yes")]
    pub consume_enable: bool,
    #[serde(default = "yes")]
    pub consume_from_min_enable: bool,
    #[serde(default)]
    pub consume_message_orderly: bool,
    #[serde(default = "default_timeout_minute")]
    pub consume_timeout_minute: u32,
    pub group_name: String,
    #[serde(
        default = "default_retry_policy",
        skip_serializing_if = "serde_json::Value::is_null"
    )]
    pub group_retry_policy: serde_json::Value,
    #[serde(default)]
    pub group_sys_flag: u32,
    #[serde(default = "yes")]
    pub notify_consumer_ids_changed_enable: bool,
    #[serde(default = "default_retry_max_times")]
    pub retry_max_times: i32,
    #[serde(default = "default_retry_queue_nums")]
    pub retry_queue_nums: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscription_data_set: Option<serde_json::Value>,
    #[serde(default = "default_which_broker")]
    pub which_broker_when_consume_slowly: u64,
}

fn yes() -> bool {
    true
}
fn default_timeout_minute() -> u32 {
    15
}
fn default_retry_max_times() -> i32 {
    16
}
fn default_retry_queue_nums() -> u32 {
    1
}
fn default_which_broker() -> u64 {
    1
}
fn default_retry_policy() -> serde_json::Value {
    serde_json::json!({"type": "CUSTOMIZED"})
}

impl SubscriptionGroupConfig {
    pub fn new(group_name: impl Into<String>) -> Self {
        Self {
            attributes: BTreeMap::new(),
            broker_id: 0,
            consume_broadcast_enable: true,
            consume_enable: true,
            consume_from_min_enable: true,
            consume_message_orderly: false,
            consume_timeout_minute: default_timeout_minute(),
            group_name: group_name.into(),
            group_retry_policy: default_retry_policy(),
            group_sys_flag: 0,
            notify_consumer_ids_changed_enable: true,
            retry_max_times: default_retry_max_times(),
            retry_queue_nums: default_retry_queue_nums(),
            subscription_data_set: None,
            which_broker_when_consume_slowly: default_which_broker(),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionGroupWrapper {
    #[serde(default)]
    pub data_version: DataVersion,
    #[serde(default)]
    pub forbidden_table: BTreeMap<String, BTreeMap<String, u32>>,
    #[serde(default)]
    pub subscription_group_table: BTreeMap<String, SubscriptionGroupConfig>,
}

/// Groups reserved by RocketMQ, created at start (upstream `SubscriptionGroupManager.init`).
const SYSTEM_GROUPS: [&str; 8] = [
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_RMQ_SYS_TRANS",
];

pub struct SubscriptionGroupManager {
    path: Option<PathBuf>,
    table: RwLock<HashMap<String, Arc<SubscriptionGroupConfig>>>,
    forbidden: RwLock<BTreeMap<String, BTreeMap<String, u32>>>,
    data_version: Mutex<DataVersion>,
    /// `autoCreateSubscriptionGroup`; switched at runtime by UPDATE_BROKER_CONFIG.
    auto_create: AtomicBool,
}

impl SubscriptionGroupManager {
    pub fn new(config: &BrokerConfig, path: Option<PathBuf>) -> Self {
        let mut table = HashMap::new();
        for g in SYSTEM_GROUPS {
            table.insert(g.to_string(), Arc::new(SubscriptionGroupConfig::new(g)));
        }
        Self {
            path,
            table: RwLock::new(table),
            forbidden: RwLock::new(BTreeMap::new()),
            data_version: Mutex::new(DataVersion::default()),
            auto_create: AtomicBool::new(config.auto_create_subscription_group),
        }
    }

    pub fn load(config: &BrokerConfig) -> Result<Self, String> {
        let path = config.config_dir().join("subscriptionGroup.json");
        let manager = Self::new(config, Some(path.clone()));
        let parsed = persist::read_config_file(&path, |text| {
            serde_json::from_str::<SubscriptionGroupWrapper>(&persist::fastjson_to_standard(text))
                .map_err(|e| e.to_string())
        })?;
        if let Some(w) = parsed {
            let mut table = manager.table.write_unpoisoned();
            for (name, mut sg) in w.subscription_group_table {
                if sg.group_name.is_empty() {
                    sg.group_name = name.clone();
                }
                table.insert(name, Arc::new(sg));
            }
            drop(table);
            *manager.forbidden.write_unpoisoned() = w.forbidden_table;
            *manager.data_version.lock_unpoisoned() = w.data_version;
        }
        Ok(manager)
    }

    /// The group's config; auto-created (and persisted) when allowed.
    pub fn find(&self, group: &str) -> Option<Arc<SubscriptionGroupConfig>> {
        if let Some(sg) = self.table.read_unpoisoned().get(group) {
            return Some(sg.clone());
        }
        if !self.auto_create.load(Ordering::Relaxed)
            || crate::metadata::topic_config::validate_group(group).is_err()
        {
            return None;
        }
        let sg = {
            let mut table = self.table.write_unpoisoned();
            table
                .entry(group.to_string())
                .or_insert_with(|| Arc::new(SubscriptionGroupConfig::new(group)))
                .clone()
        };
        tracing::info!(group, "auto-created subscription group");
        self.changed();
        Some(sg)
    }

    /// Turns auto-creation of unknown groups on or off (live `autoCreateSubscriptionGroup`).
    pub fn set_auto_create(&self, on: bool) {
        self.auto_create.store(on, Ordering::Relaxed);
    }

    /// Lookup without auto-creation.
    pub fn get(&self, group: &str) -> Option<Arc<SubscriptionGroupConfig>> {
        self.table.read_unpoisoned().get(group).cloned()
    }

    pub fn update(&self, sg: SubscriptionGroupConfig) {
        self.table
            .write_unpoisoned()
            .insert(sg.group_name.clone(), Arc::new(sg));
        self.changed();
    }

    pub fn delete(&self, group: &str) -> bool {
        let removed = self.table.write_unpoisoned().remove(group).is_some();
        if removed {
            self.changed();
        }
        removed
    }

    /// Forbidden perm bits of `group` on `topic` (0 = nothing forbidden).
    pub fn forbidden(&self, group: &str, topic: &str) -> u32 {
        self.forbidden
            .read_unpoisoned()
            .get(group)
            .and_then(|m| m.get(topic))
            .copied()
            .unwrap_or(0)
    }

    pub fn wrapper(&self) -> SubscriptionGroupWrapper {
        SubscriptionGroupWrapper {
            data_version: *self.data_version.lock_unpoisoned(),
            forbidden_table: self.forbidden.read_unpoisoned().clone(),
            subscription_group_table: self
                .table
                .read_unpoisoned()
                .iter()
                .map(|(k, v)| (k.clone(), (**v).clone()))
                .collect(),
        }
    }

    fn changed(&self) {
        self.data_version.lock_unpoisoned().next_version();
        if let Err(e) = self.persist() {
            tracing::error!(
                "cannot persist subscriptionGroup.json: {e}; the change lives in memory only"
            );
        }
    }

    pub fn persist(&self) -> std::io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let json = serde_json::to_string_pretty(&self.wrapper()).map_err(std::io::Error::other)?;
        persist::write_config_file(path, &json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_creates_groups_with_defaults() {
        let m = SubscriptionGroupManager::new(&BrokerConfig::default(), None);
        let g = m.find("G1").unwrap();
        assert_eq!(
            (g.retry_queue_nums, g.retry_max_times, g.consume_enable),
            (1, 16, true)
        );
        assert!(
            m.find("bad group").is_none(),
            "invalid names are not auto-created"
        );
        let off = BrokerConfig {
            auto_create_subscription_group: false,
            ..BrokerConfig::default()
        };
        assert!(SubscriptionGroupManager::new(&off, None)
            .find("G2")
            .is_none());
    }

    #[test]
    fn reads_java_written_file() {
        let dir = std::env::temp_dir().join(format!("ringmq-subgroup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("config")).unwrap();
        std::fs::write(
            dir.join("config/subscriptionGroup.json"),
            "{\n\t\"dataVersion\":{\"counter\":3,\"stateVersion\":0,\"timestamp\":1700000000000},\n\t\"forbiddenTable\":{},\n\t\"subscriptionGroupTable\":{\"G9\":{\"brokerId\":0,\"consumeBroadcastEnable\":true,\"consumeEnable\":false,\"consumeFromMinEnable\":true,\"consumeMessageOrderly\":false,\"consumeTimeoutMinute\":15,\"groupName\":\"G9\",\"groupRetryPolicy\":{\"type\":\"CUSTOMIZED\"},\"groupSysFlag\":0,\"notifyConsumerIdsChangedEnable\":true,\"retryMaxTimes\":3,\"retryQueueNums\":2,\"whichBrokerWhenConsumeSlowly\":1}}\n}",
        )
        .unwrap();
        let c = BrokerConfig {
            store_path_root_dir: dir.display().to_string(),
            ..BrokerConfig::default()
        };
        let m = SubscriptionGroupManager::load(&c).unwrap();
        let g = m.get("G9").unwrap();
        assert_eq!(
            (g.retry_max_times, g.retry_queue_nums, g.consume_enable),
            (3, 2, false)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
