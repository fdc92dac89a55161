//! Consumer groups as heartbeats register them (features.md §e.4): per group the live
//! channels (client id, language, version, last heartbeat) and the subscriptions, with change
//! detection for NOTIFY_CONSUMER_IDS_CHANGED, expiry of silent channels, and the orderly
//! consumption queue locks (`RebalanceLockManager`, §e.6).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, RwLock};

use ringmq_runtime::Connection;
use ringmq_sync::{LockExt, RwLockExt};

/// One subscription as heartbeats and pulls build it (the protocol's type; tag hash codes
/// are computed by the broker, see `SubscriptionData::build`).
pub use ringmq_remoting::body::heartbeat::SubscriptionData;

/// One registered client channel.
#[derive(Clone)]
pub struct ClientChannelInfo {
    pub channel: Connection,
    pub client_id: String,
    pub language: String,
    pub version: i32,
    pub last_update_ms: i64,
}

impl std::fmt::Debug for ClientChannelInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientChannelInfo")
            .field("channel_id", &self.channel.id())
            .field("client_id", &self.client_id)
            .field("language", &self.language)
            .field("version", &self.version)
            .finish()
    }
}

/// A consumer group's live state.
#[derive(Debug, Clone, Default)]
pub struct ConsumerGroupInfo {
    pub channels: BTreeMap<u64, ClientChannelInfo>,
    pub subscriptions: BTreeMap<String, SubscriptionData>,
    pub consume_type: String,
    pub message_model: String,
    pub consume_from_where: String,
    pub last_update_ms: i64,
}

impl ConsumerGroupInfo {
    pub fn is_broadcasting(&self) -> bool {
        self.message_model == "BROADCASTING"
    }
}

/// What a registration changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RegisterOutcome {
    pub channels_changed: bool,
    pub subscriptions_changed: bool,
}

#[derive(Default)]
pub struct ConsumerManager {
    groups: RwLock<HashMap<String, ConsumerGroupInfo>>,
}

impl ConsumerManager {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers (or refreshes) a channel and, when `subscriptions` is `Some`, replaces the
    /// group's subscriptions.
    #[allow(clippy::too_many_arguments)]
    pub fn register(
        &self,
        group: &str,
        info: ClientChannelInfo,
        consume_type: &str,
        message_model: &str,
        consume_from_where: &str,
        subscriptions: Option<Vec<SubscriptionData>>,
    ) -> RegisterOutcome {
        let mut groups = self.groups.write_unpoisoned();
        let g = groups.entry(group.to_string()).or_default();
        let mut outcome = RegisterOutcome::default();
        let id = info.channel.id();
        match g.channels.get_mut(&id) {
            Some(existing) => {
                if existing.client_id != info.client_id {
                    outcome.channels_changed = true;
                }
                *existing = info.clone();
            }
            None => {
                outcome.channels_changed = true;
                g.channels.insert(id, info.clone());
            }
        }
        g.consume_type = consume_type.to_string();
        g.message_model = message_model.to_string();
        g.consume_from_where = consume_from_where.to_string();
        g.last_update_ms = info.last_update_ms;
        if let Some(subs) = subscriptions {
            let new: BTreeMap<String, SubscriptionData> =
                subs.into_iter().map(|s| (s.topic.clone(), s)).collect();
            let same_shape = new.len() == g.subscriptions.len()
                && new.iter().all(|(t, s)| {
                    g.subscriptions.get(t).is_some_and(|old| {
                        old.sub_string == s.sub_string && old.expression_type == s.expression_type
                    })
                });
            if !same_shape {
                outcome.subscriptions_changed = true;
            }
            // Keep the newest version per topic even when the shape is unchanged, so pulls
            // carrying the new subVersion are not refused as SUBSCRIPTION_NOT_LATEST.
            g.subscriptions = new;
        }
        outcome
    }

    /// Removes `client_id`'s channel(s) from `group`; true when the group changed.
    pub fn unregister(&self, group: &str, channel_id: u64, client_id: &str) -> bool {
        let mut groups = self.groups.write_unpoisoned();
        let Some(g) = groups.get_mut(group) else {
            return false;
        };
        let before = g.channels.len();
        g.channels
            .retain(|id, info| *id != channel_id && info.client_id != client_id);
        let changed = g.channels.len() != before;
        if g.channels.is_empty() {
            groups.remove(group);
        }
        changed
    }

    /// A connection closed: the groups it left.
    pub fn remove_channel(&self, channel_id: u64) -> Vec<String> {
        let mut groups = self.groups.write_unpoisoned();
        let mut changed = Vec::new();
        groups.retain(|name, g| {
            if g.channels.remove(&channel_id).is_some() {
                changed.push(name.clone());
            }
            !g.channels.is_empty()
        });
        changed
    }

    /// Removes channels silent for more than `timeout_ms`; returns (group, channel) pairs.
    pub fn scan_expired(&self, now_ms: i64, timeout_ms: i64) -> Vec<(String, Connection)> {
        let mut groups = self.groups.write_unpoisoned();
        let mut expired = Vec::new();
        groups.retain(|name, g| {
            g.channels.retain(|_, info| {
                let alive = now_ms - info.last_update_ms <= timeout_ms;
                if !alive {
                    expired.push((name.clone(), info.channel.clone()));
                }
                alive
            });
            !g.channels.is_empty()
        });
        expired
    }

    pub fn group(&self, group: &str) -> Option<ConsumerGroupInfo> {
        self.groups.read_unpoisoned().get(group).cloned()
    }

    pub fn subscription(&self, group: &str, topic: &str) -> Option<SubscriptionData> {
        self.groups
            .read_unpoisoned()
            .get(group)
            .and_then(|g| g.subscriptions.get(topic).cloned())
    }

    pub fn has_group(&self, group: &str) -> bool {
        self.groups.read_unpoisoned().contains_key(group)
    }

    /// Client ids of the group's live channels (unsorted; clients sort).
    pub fn client_ids(&self, group: &str) -> Vec<String> {
        let groups = self.groups.read_unpoisoned();
        let Some(g) = groups.get(group) else {
            return Vec::new();
        };
        let mut ids: Vec<String> = g.channels.values().map(|c| c.client_id.clone()).collect();
        ids.sort();
        ids.dedup();
        ids
    }

    pub fn channels(&self, group: &str) -> Vec<Connection> {
        self.groups
            .read_unpoisoned()
            .get(group)
            .map(|g| g.channels.values().map(|c| c.channel.clone()).collect())
            .unwrap_or_default()
    }

    /// Groups subscribing to `topic`.
    pub fn groups_of_topic(&self, topic: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .groups
            .read_unpoisoned()
            .iter()
            .filter(|(_, g)| g.subscriptions.contains_key(topic))
            .map(|(n, _)| n.clone())
            .collect();
        out.sort();
        out
    }
}

/// A message queue as lock tables key it (the protocol's type).
pub use ringmq_remoting::body::consumer::MessageQueue;

/// Lease of an orderly-consumption queue lock (`rocketmq.broker.rebalance.lockMaxLiveTime`).
pub const LOCK_MAX_LIVE_TIME_MS: i64 = 60_000;

struct LockEntry {
    client_id: String,
    last_update_ms: i64,
}

/// Orderly consumption locks: group → queue → owner.
#[derive(Default)]
pub struct RebalanceLockManager {
    table: Mutex<HashMap<String, HashMap<MessageQueue, LockEntry>>>,
}

impl RebalanceLockManager {
    pub fn new() -> Self {
        Self::default()
    }

    /// Grants every queue free, expired or already held by `client_id`; returns the granted set.
    pub fn try_lock_batch(
        &self,
        group: &str,
        mqs: &[MessageQueue],
        client_id: &str,
        now_ms: i64,
    ) -> Vec<MessageQueue> {
        let mut table = self.table.lock_unpoisoned();
        let locks = table.entry(group.to_string()).or_default();
        let mut granted = Vec::new();
        for mq in mqs {
            match locks.get_mut(mq) {
                Some(e) if e.client_id == client_id => {
                    e.last_update_ms = now_ms;
                    granted.push(mq.clone());
                }
                Some(e) if now_ms - e.last_update_ms > LOCK_MAX_LIVE_TIME_MS => {
                    tracing::info!(group, queue = ?mq, old = e.client_id, new = client_id, "expired queue lock taken over");
                    e.client_id = client_id.to_string();
                    e.last_update_ms = now_ms;
                    granted.push(mq.clone());
                }
                Some(_) => {}
                None => {
                    locks.insert(
                        mq.clone(),
                        LockEntry {
                            client_id: client_id.to_string(),
                            last_update_ms: now_ms,
                        },
                    );
                    granted.push(mq.clone());
                }
            }
        }
        granted
    }

    pub fn unlock_batch(&self, group: &str, mqs: &[MessageQueue], client_id: &str) {
        let mut table = self.table.lock_unpoisoned();
        if let Some(locks) = table.get_mut(group) {
            for mq in mqs {
                if locks.get(mq).is_some_and(|e| e.client_id == client_id) {
                    locks.remove(mq);
                }
            }
            if locks.is_empty() {
                table.remove(group);
            }
        }
    }

    /// Whether the group holds any lock younger than the lease (its retry messages then go
    /// straight to the DLQ, as upstream does for orderly consumers).
    pub fn has_unexpired_lock(&self, group: &str) -> bool {
        let now = crate::persist::now_ms();
        let table = self.table.lock_unpoisoned();
        table.get(group).is_some_and(|locks| {
            locks
                .values()
                .any(|e| now - e.last_update_ms <= LOCK_MAX_LIVE_TIME_MS)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::FakeChannel;

    fn info(ch: &FakeChannel, client: &str, ts: i64) -> ClientChannelInfo {
        ClientChannelInfo {
            channel: ch.connection(),
            client_id: client.into(),
            language: "JAVA".into(),
            version: 481,
            last_update_ms: ts,
        }
    }

    #[test]
    fn registration_detects_changes_and_expiry() {
        let m = ConsumerManager::new();
        let c1 = FakeChannel::new(1);
        let sub = vec![SubscriptionData::build("T", "A || B", "TAG", 1)];
        let o = m.register(
            "G",
            info(&c1, "c1", 0),
            "CONSUME_PASSIVELY",
            "CLUSTERING",
            "CONSUME_FROM_LAST_OFFSET",
            Some(sub.clone()),
        );
        assert!(o.channels_changed && o.subscriptions_changed);
        let o = m.register(
            "G",
            info(&c1, "c1", 10),
            "CONSUME_PASSIVELY",
            "CLUSTERING",
            "CONSUME_FROM_LAST_OFFSET",
            Some(sub),
        );
        assert_eq!(o, RegisterOutcome::default());
        let c2 = FakeChannel::new(2);
        let o = m.register(
            "G",
            info(&c2, "c2", 100_000),
            "CONSUME_PASSIVELY",
            "CLUSTERING",
            "x",
            None,
        );
        assert!(o.channels_changed && !o.subscriptions_changed);
        assert_eq!(m.client_ids("G"), vec!["c1", "c2"]);
        assert_eq!(m.subscription("G", "T").unwrap().code_set.len(), 2);
        let expired = m.scan_expired(130_011, 120_000);
        assert_eq!(expired.len(), 1);
        assert_eq!(m.client_ids("G"), vec!["c2"]);
        assert_eq!(m.remove_channel(2), vec!["G"]);
        assert!(!m.has_group("G"));
    }

    #[test]
    fn locks_are_exclusive_until_expired() {
        let l = RebalanceLockManager::new();
        let mq = MessageQueue {
            topic: "T".into(),
            broker_name: "b".into(),
            queue_id: 0,
        };
        assert_eq!(
            l.try_lock_batch("G", std::slice::from_ref(&mq), "c1", 0)
                .len(),
            1
        );
        assert!(l
            .try_lock_batch("G", std::slice::from_ref(&mq), "c2", 30_000)
            .is_empty());
        assert_eq!(
            l.try_lock_batch("G", std::slice::from_ref(&mq), "c1", 30_000)
                .len(),
            1
        );
        assert_eq!(
            l.try_lock_batch("G", std::slice::from_ref(&mq), "c2", 90_001)
                .len(),
            1
        );
        l.unlock_batch("G", std::slice::from_ref(&mq), "c1");
        assert!(
            l.try_lock_batch("G", std::slice::from_ref(&mq), "c1", 90_002)
                .is_empty(),
            "c1 no longer owns it"
        );
        l.unlock_batch("G", std::slice::from_ref(&mq), "c2");
        assert!(!l.has_unexpired_lock("G"));
    }
}
