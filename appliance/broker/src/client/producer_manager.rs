//! Producer groups as heartbeats register them: group → live channels. Used to pick a
//! channel for transaction checks and for GET_PRODUCER_CONNECTION_LIST; channels expire like
//! consumer channels.

use std::collections::{BTreeMap, HashMap};
use std::sync::RwLock;

use crate::client::consumer_manager::ClientChannelInfo;
use ringmq_runtime::Connection;
use ringmq_sync::RwLockExt;

#[derive(Default)]
pub struct ProducerManager {
    groups: RwLock<HashMap<String, BTreeMap<u64, ClientChannelInfo>>>,
}

impl ProducerManager {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(&self, group: &str, info: ClientChannelInfo) {
        let mut groups = self.groups.write_unpoisoned();
        groups
            .entry(group.to_string())
            .or_default()
            .insert(info.channel.id(), info);
    }

    pub fn unregister(&self, group: &str, channel_id: u64, client_id: &str) {
        let mut groups = self.groups.write_unpoisoned();
        if let Some(g) = groups.get_mut(group) {
            g.retain(|id, info| *id != channel_id && info.client_id != client_id);
            if g.is_empty() {
                groups.remove(group);
            }
        }
    }

    pub fn remove_channel(&self, channel_id: u64) {
        let mut groups = self.groups.write_unpoisoned();
        groups.retain(|_, g| {
            g.remove(&channel_id);
            !g.is_empty()
        });
    }

    pub fn scan_expired(&self, now_ms: i64, timeout_ms: i64) -> Vec<Connection> {
        let mut groups = self.groups.write_unpoisoned();
        let mut expired = Vec::new();
        groups.retain(|_, g| {
            g.retain(|_, info| {
                let alive = now_ms - info.last_update_ms <= timeout_ms;
                if !alive {
                    expired.push(info.channel.clone());
                }
                alive
            });
            !g.is_empty()
        });
        expired
    }

    /// A live channel of `group` (for CHECK_TRANSACTION_STATE), if any.
    pub fn any_channel(&self, group: &str) -> Option<Connection> {
        let groups = self.groups.read_unpoisoned();
        groups
            .get(group)?
            .values()
            .map(|i| i.channel.clone())
            .find(|c| c.is_alive())
    }

    pub fn connections(&self, group: &str) -> Vec<ClientChannelInfo> {
        self.groups
            .read_unpoisoned()
            .get(group)
            .map(|g| g.values().cloned().collect())
            .unwrap_or_default()
    }

    pub fn group_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.groups.read_unpoisoned().keys().cloned().collect();
        names.sort();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::FakeChannel;

    #[test]
    fn register_expire_remove() {
        let m = ProducerManager::new();
        let ch = FakeChannel::new(9);
        m.register(
            "PG",
            ClientChannelInfo {
                channel: ch.connection(),
                client_id: "p1".into(),
                language: "JAVA".into(),
                version: 1,
                last_update_ms: 0,
            },
        );
        assert!(m.any_channel("PG").is_some());
        assert_eq!(m.scan_expired(200_000, 120_000).len(), 1);
        assert!(m.any_channel("PG").is_none());
        m.register(
            "PG",
            ClientChannelInfo {
                channel: ch.connection(),
                client_id: "p1".into(),
                language: "JAVA".into(),
                version: 1,
                last_update_ms: 0,
            },
        );
        m.remove_channel(9);
        assert!(m.group_names().is_empty());
    }
}
