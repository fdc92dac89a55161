//! Broker liveness as the controller leader tracks it (upstream
//! `DefaultBrokerHeartbeatManager`): the latest BROKER_HEARTBEAT of every (cluster, broker
//! name, broker id), with the time-out the broker asked for and the figures the elect
//! policy ranks by. Sans-IO: the caller passes the clock; a connection is named by a
//! caller-chosen id so a closed connection can drop its broker at once.

use std::collections::BTreeMap;

/// Time-out of a broker that sends none (upstream DEFAULT_BROKER_CHANNEL_EXPIRED_TIME).
pub const DEFAULT_HEARTBEAT_TIMEOUT_MS: u64 = 10_000;
/// Most brokers tracked; heartbeats from more are refused so a flood cannot grow the table.
pub const MAX_TRACKED_BROKERS: usize = 65_536;

/// (cluster name, broker name, broker id).
pub type BrokerIdentity = (String, String, i64);

/// One BROKER_HEARTBEAT's content (absent fields as upstream defaults them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    pub cluster_name: String,
    pub broker_name: String,
    pub broker_addr: String,
    pub broker_id: i64,
    pub timeout_ms: u64,
    pub epoch: i32,
    pub max_offset: i64,
    pub confirm_offset: i64,
    /// Lower is preferred (`brokerElectionPriority`).
    pub election_priority: i32,
    /// The connection it came on.
    pub conn: u64,
}

/// What the controller knows of a live broker: its latest heartbeat, except that the
/// epoch and offsets are the furthest it ever reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerLiveInfo {
    pub last_update_ms: u64,
    pub heartbeat: Heartbeat,
}

/// Who is alive, and with what (elect policy input).
pub trait Liveness {
    fn is_alive(&self, cluster: &str, broker_name: &str, broker_id: i64) -> bool;
    fn live_info(
        &self,
        cluster: &str,
        broker_name: &str,
        broker_id: i64,
    ) -> Option<&BrokerLiveInfo>;
}

#[derive(Debug, Default)]
pub struct BrokerLiveTable {
    brokers: BTreeMap<BrokerIdentity, BrokerLiveInfo>,
}

impl BrokerLiveTable {
    /// Records a heartbeat at `now_ms`. The epoch and offsets only move forward (a late
    /// heartbeat from before a truncation must not make a replica look better than it is).
    /// False when the table is full and the broker is new.
    pub fn on_heartbeat(&mut self, hb: Heartbeat, now_ms: u64) -> bool {
        let key = (
            hb.cluster_name.clone(),
            hb.broker_name.clone(),
            hb.broker_id,
        );
        if let Some(prev) = self.brokers.get_mut(&key) {
            let old = &prev.heartbeat;
            let forward =
                hb.epoch > old.epoch || (hb.epoch == old.epoch && hb.max_offset > old.max_offset);
            let kept = match forward {
                true => hb,
                false => Heartbeat {
                    epoch: old.epoch,
                    max_offset: old.max_offset,
                    confirm_offset: old.confirm_offset,
                    ..hb
                },
            };
            *prev = BrokerLiveInfo {
                last_update_ms: now_ms,
                heartbeat: kept,
            };
            return true;
        }
        if self.brokers.len() >= MAX_TRACKED_BROKERS {
            return false;
        }
        self.brokers.insert(
            key,
            BrokerLiveInfo {
                last_update_ms: now_ms,
                heartbeat: hb,
            },
        );
        true
    }

    /// Drops the brokers whose time-out passed at `now_ms` and returns them (the caller
    /// closes their connections and re-elects where a master went).
    pub fn scan_inactive(&mut self, now_ms: u64) -> Vec<BrokerIdentity> {
        let gone: Vec<BrokerIdentity> = self
            .brokers
            .iter()
            .filter(|(_, b)| now_ms.saturating_sub(b.last_update_ms) > b.heartbeat.timeout_ms)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &gone {
            self.brokers.remove(k);
        }
        gone
    }

    /// A connection closed: its broker is gone at once.
    pub fn on_conn_closed(&mut self, conn: u64) -> Option<BrokerIdentity> {
        let key = self
            .brokers
            .iter()
            .find(|(_, b)| b.heartbeat.conn == conn)
            .map(|(k, _)| k.clone())?;
        self.brokers.remove(&key);
        Some(key)
    }

    /// This table as seen at `now_ms`.
    pub fn at(&self, now_ms: u64) -> LiveView<'_> {
        LiveView {
            table: self,
            now_ms,
        }
    }

    pub fn len(&self) -> usize {
        self.brokers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.brokers.is_empty()
    }
}

/// The table at one instant: a broker is alive while its last heartbeat plus its time-out
/// has not passed.
pub struct LiveView<'a> {
    table: &'a BrokerLiveTable,
    now_ms: u64,
}

impl Liveness for LiveView<'_> {
    fn is_alive(&self, cluster: &str, broker_name: &str, broker_id: i64) -> bool {
        self.live_info(cluster, broker_name, broker_id)
            .is_some_and(|b| b.last_update_ms.saturating_add(b.heartbeat.timeout_ms) >= self.now_ms)
    }

    fn live_info(
        &self,
        cluster: &str,
        broker_name: &str,
        broker_id: i64,
    ) -> Option<&BrokerLiveInfo> {
        self.table
            .brokers
            .get(&(cluster.to_owned(), broker_name.to_owned(), broker_id))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn hb(id: i64, epoch: i32, max_offset: i64, priority: i32) -> Heartbeat {
        Heartbeat {
            cluster_name: "C".into(),
            broker_name: "b".into(),
            broker_addr: format!("127.0.0.{id}:10911"),
            broker_id: id,
            timeout_ms: 1000,
            epoch,
            max_offset,
            confirm_offset: 0,
            election_priority: priority,
            conn: id as u64,
        }
    }

    #[test]
    fn a_broker_is_alive_until_its_own_timeout_passes() {
        let mut t = BrokerLiveTable::default();
        assert!(t.on_heartbeat(hb(1, 1, 100, 0), 10_000));
        assert!(t.at(11_000).is_alive("C", "b", 1));
        assert!(!t.at(11_001).is_alive("C", "b", 1));
        assert!(!t.at(10_000).is_alive("C", "b", 2));
        assert!(t.scan_inactive(11_000).is_empty());
        assert_eq!(t.scan_inactive(11_001), vec![("C".into(), "b".into(), 1)]);
        assert!(t.is_empty());
    }

    #[test]
    fn offsets_only_move_forward_and_a_closed_connection_drops_its_broker() {
        let mut t = BrokerLiveTable::default();
        t.on_heartbeat(hb(1, 2, 500, 0), 0);
        t.on_heartbeat(hb(1, 1, 900, 5), 10);
        let view = t.at(10);
        let info = &view.live_info("C", "b", 1).unwrap().heartbeat;
        assert_eq!(
            (info.epoch, info.max_offset, info.election_priority),
            (2, 500, 5)
        );
        t.on_heartbeat(hb(1, 2, 700, 5), 20);
        assert_eq!(
            t.at(20)
                .live_info("C", "b", 1)
                .unwrap()
                .heartbeat
                .max_offset,
            700
        );
        assert_eq!(t.on_conn_closed(99), None);
        assert_eq!(t.on_conn_closed(1), Some(("C".into(), "b".into(), 1)));
        assert!(!t.at(20).is_alive("C", "b", 1));
    }
}
