//! Consumer-group configs (`config/subscriptionGroup.json`, remoting's
//! `SubscriptionGroupConfig`): retry queue count, max reconsume times, consume enable/broadcast
//! flags; groups auto-created on first use when `autoCreateSubscriptionGroup` is on.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use ringmq_remoting::body::subscription::{
    ForbiddenTable, SubscriptionGroupConfig, SubscriptionGroupWrapper,
};
use ringmq_remoting::body::topic::DataVersion;
use ringmq_remoting::json;
use ringmq_sync::{LockExt, RwLockExt};

use crate::config::BrokerConfig;
use crate::persist;

/// Groups reserved by RocketMQ, created at start (upstream `SubscriptionGroupManager.init`).
pub const SYSTEM_GROUPS: [&str; 8] = [
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
    forbidden: RwLock<ForbiddenTable>,
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
            data_version: Mutex::new(DataVersion::new(persist::now_ms())),
            auto_create: AtomicBool::new(config.auto_create_subscription_group),
        }
    }

    pub fn load(config: &BrokerConfig) -> Result<Self, String> {
        let path = config.config_dir().join("subscriptionGroup.json");
        let manager = Self::new(config, Some(path.clone()));
        let parsed = persist::read_config_file(&path, parse_groups_json)?;
        if let Some((w, has_version)) = parsed {
            let mut table = manager.table.write_unpoisoned();
            for (name, mut sg) in w.subscription_group_table {
                if sg.group_name.is_empty() {
                    sg.group_name = name.clone();
                }
                table.insert(name, Arc::new(sg));
            }
            drop(table);
            *manager.forbidden.write_unpoisoned() = w.forbidden_table;
            if has_version {
                *manager.data_version.lock_unpoisoned() = w.data_version;
            }
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

    /// A slave's copy of its master's groups: the table, the forbidden bits and the data
    /// version become the master's. Persisted.
    pub fn replace_from_master(&self, wrapper: SubscriptionGroupWrapper) {
        let table = wrapper
            .subscription_group_table
            .into_iter()
            .map(|(name, mut sg)| {
                if sg.group_name.is_empty() {
                    sg.group_name = name.clone();
                }
                (name, Arc::new(sg))
            })
            .collect();
        *self.table.write_unpoisoned() = table;
        *self.forbidden.write_unpoisoned() = wrapper.forbidden_table;
        *self.data_version.lock_unpoisoned() = wrapper.data_version;
        if let Err(e) = self.persist() {
            tracing::error!(
                "cannot persist subscriptionGroup.json: {e}; the copy lives in memory only"
            );
        }
    }

    pub fn data_version(&self) -> DataVersion {
        *self.data_version.lock_unpoisoned()
    }

    fn changed(&self) {
        self.data_version
            .lock_unpoisoned()
            .next_version(persist::now_ms());
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
        persist::write_pretty_json(path, &self.wrapper().to_value())
    }
}

/// Reads `subscriptionGroup.json` in the broker's own layout or a Java broker's (fastjson);
/// also says whether the file carries a `dataVersion`.
fn parse_groups_json(text: &str) -> Result<(SubscriptionGroupWrapper, bool), String> {
    let value = json::parse_str(text).map_err(|e| e.to_string())?;
    let wrapper = SubscriptionGroupWrapper::from_value(&value, "").map_err(|e| e.to_string())?;
    Ok((wrapper, value.get_present("dataVersion").is_some()))
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
