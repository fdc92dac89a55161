//! Controller bodies (`remoting/.../protocol/body`, spec features.md §g.4–g.5):
//! `SyncStateSet` (answers of CONTROLLER_ALTER_SYNC_STATE_SET, CONTROLLER_REGISTER_BROKER,
//! CONTROLLER_GET_REPLICA_INFO, and the body of NOTIFY_BROKER_ROLE_CHANGED) and
//! `ElectMasterResponseBody` (CONTROLLER_ELECT_MASTER). Broker ids are Java `Long`s and the
//! epochs `int`s; fastjson writes the fields in name order.

use std::collections::{BTreeMap, BTreeSet};

use crate::body::cluster::BrokerMemberGroup;
use crate::json::{self, read, BodyError, ObjectBuilder, Value};

/// `SyncStateSet`: the in-sync replicas of one broker set and the set's epoch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncStateSet {
    pub sync_state_set: BTreeSet<i64>,
    pub sync_state_set_epoch: i32,
}

impl SyncStateSet {
    pub fn encode(&self) -> Vec<u8> {
        ObjectBuilder::new()
            .field(
                "syncStateSet",
                json::int_array(self.sync_state_set.iter().copied()),
            )
            .field("syncStateSetEpoch", self.sync_state_set_epoch)
            .build()
            .to_json()
            .into_bytes()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = json::parse(body)?;
        Ok(SyncStateSet {
            sync_state_set: read::int_set(&v, "syncStateSet", "")?.unwrap_or_default(),
            sync_state_set_epoch: read::i32_or(&v, "syncStateSetEpoch", "", 0)?,
        })
    }
}

/// `ElectMasterResponseBody`: the new SyncStateSet (the elected master alone) and, when the
/// controller knows it, the broker set's members.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ElectMasterResponseBody {
    pub broker_member_group: Option<BrokerMemberGroup>,
    pub sync_state_set: BTreeSet<i64>,
}

impl ElectMasterResponseBody {
    pub fn encode(&self) -> Vec<u8> {
        ObjectBuilder::new()
            .field_opt(
                "brokerMemberGroup",
                self.broker_member_group.as_ref().map(|g| g.to_value()),
            )
            .field(
                "syncStateSet",
                json::int_array(self.sync_state_set.iter().copied()),
            )
            .build()
            .to_json()
            .into_bytes()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = json::parse(body)?;
        let group = match v.get_present("brokerMemberGroup") {
            None => None,
            Some(g) => Some(BrokerMemberGroup::from_value(g, "brokerMemberGroup")?),
        };
        Ok(ElectMasterResponseBody {
            broker_member_group: group,
            sync_state_set: read::int_set(&v, "syncStateSet", "")?.unwrap_or_default(),
        })
    }
}

/// One replica in a `BrokerReplicasInfo` answer (`ReplicaIdentity`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplicaIdentity {
    pub broker_name: String,
    pub broker_id: i64,
    pub broker_address: String,
    pub alive: bool,
}

impl ReplicaIdentity {
    fn to_value(&self) -> Value {
        ObjectBuilder::new()
            .field("alive", self.alive)
            .field("brokerAddress", self.broker_address.as_str())
            .field("brokerId", self.broker_id)
            .field("brokerName", self.broker_name.as_str())
            .build()
    }

    fn from_value(v: &Value, path: &str) -> Result<Self, BodyError> {
        Ok(ReplicaIdentity {
            broker_name: read::opt_string(v, "brokerName", path)?.unwrap_or_default(),
            broker_id: read::i64_or(v, "brokerId", path, -1)?,
            broker_address: read::opt_string(v, "brokerAddress", path)?.unwrap_or_default(),
            alive: read::bool_or(v, "alive", path, false)?,
        })
    }
}

/// One broker set in a `BrokerReplicasInfo` answer (`BrokerReplicasInfo.ReplicasInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplicasInfo {
    pub master_broker_id: Option<i64>,
    pub master_address: Option<String>,
    pub master_epoch: i32,
    pub sync_state_set_epoch: i32,
    pub in_sync_replicas: Vec<ReplicaIdentity>,
    pub not_in_sync_replicas: Vec<ReplicaIdentity>,
}

/// `BrokerReplicasInfo`: the answer to CONTROLLER_GET_SYNC_STATE_DATA (1006), broker name →
/// master and the replicas in and out of the SyncStateSet.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BrokerReplicasInfo {
    pub replicas_info_table: BTreeMap<String, ReplicasInfo>,
}

impl BrokerReplicasInfo {
    pub fn encode(&self) -> Vec<u8> {
        let table = self.replicas_info_table.iter().map(|(name, info)| {
            let ids = |list: &[ReplicaIdentity]| {
                Value::Array(list.iter().map(ReplicaIdentity::to_value).collect())
            };
            let value = ObjectBuilder::new()
                .field("inSyncReplicas", ids(&info.in_sync_replicas))
                .field_opt("masterAddress", info.master_address.as_deref())
                .field_opt("masterBrokerId", info.master_broker_id)
                .field("masterEpoch", info.master_epoch)
                .field("notInSyncReplicas", ids(&info.not_in_sync_replicas))
                .field("syncStateSetEpoch", info.sync_state_set_epoch)
                .build();
            (Value::str(name.as_str()), value)
        });
        ObjectBuilder::new()
            .field("replicasInfoTable", json::map_value(table))
            .build()
            .to_json()
            .into_bytes()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = json::parse(body)?;
        let mut table = BTreeMap::new();
        for (k, info) in read::entries(&v, "replicasInfoTable", "")? {
            let name = k
                .key_text()
                .ok_or_else(|| BodyError::field("replicasInfoTable", "string keys"))?;
            let path = format!("replicasInfoTable.{name}");
            let list = |key: &str| -> Result<Vec<ReplicaIdentity>, BodyError> {
                match info.get_present(key) {
                    None => Ok(Vec::new()),
                    Some(Value::Array(items)) => items
                        .iter()
                        .map(|i| ReplicaIdentity::from_value(i, &path))
                        .collect(),
                    Some(_) => Err(BodyError::field(read::join(&path, key), "an array")),
                }
            };
            let master_broker_id = match info.get_present("masterBrokerId") {
                None => None,
                Some(id) => Some(id.as_i64().ok_or_else(|| {
                    BodyError::field(read::join(&path, "masterBrokerId"), "a long")
                })?),
            };
            table.insert(
                name.to_owned(),
                ReplicasInfo {
                    master_broker_id,
                    master_address: read::opt_string(info, "masterAddress", &path)?,
                    master_epoch: read::i32_or(info, "masterEpoch", &path, 0)?,
                    sync_state_set_epoch: read::i32_or(info, "syncStateSetEpoch", &path, 0)?,
                    in_sync_replicas: list("inSyncReplicas")?,
                    not_in_sync_replicas: list("notInSyncReplicas")?,
                },
            );
        }
        Ok(BrokerReplicasInfo {
            replicas_info_table: table,
        })
    }
}

/// One `EpochEntry`: the master epoch and the CommitLog range its master wrote
/// (`endOffset` is Java's `Long.MAX_VALUE` for the open last entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntryBody {
    pub epoch: i32,
    pub start_offset: i64,
    pub end_offset: i64,
}

/// `EpochEntryCache`: a broker's epoch entries and CommitLog max offset, the answer to
/// GET_BROKER_EPOCH_CACHE (1007).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EpochEntryCache {
    pub cluster_name: String,
    pub broker_name: String,
    pub broker_id: i64,
    pub epoch_list: Vec<EpochEntryBody>,
    pub max_offset: i64,
}

impl EpochEntryCache {
    pub fn encode(&self) -> Vec<u8> {
        let entries = self.epoch_list.iter().map(|e| {
            ObjectBuilder::new()
                .field("endOffset", e.end_offset)
                .field("epoch", e.epoch)
                .field("startOffset", e.start_offset)
                .build()
        });
        ObjectBuilder::new()
            .field("brokerId", self.broker_id)
            .field("brokerName", self.broker_name.as_str())
            .field("clusterName", self.cluster_name.as_str())
            .field("epochList", Value::Array(entries.collect()))
            .field("maxOffset", self.max_offset)
            .build()
            .to_json()
            .into_bytes()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = json::parse(body)?;
        let epoch_list = match v.get_present("epochList") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|e| {
                    Ok(EpochEntryBody {
                        epoch: read::i32_or(e, "epoch", "epochList", 0)?,
                        start_offset: read::i64_or(e, "startOffset", "epochList", 0)?,
                        end_offset: read::i64_or(e, "endOffset", "epochList", i64::MAX)?,
                    })
                })
                .collect::<Result<_, BodyError>>()?,
            Some(_) => return Err(BodyError::field("epochList", "an array")),
        };
        Ok(EpochEntryCache {
            cluster_name: read::opt_string(&v, "clusterName", "")?.unwrap_or_default(),
            broker_name: read::opt_string(&v, "brokerName", "")?.unwrap_or_default(),
            broker_id: read::i64_or(&v, "brokerId", "", 0)?,
            epoch_list,
            max_offset: read::i64_or(&v, "maxOffset", "", 0)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_state_set_round_trips_in_fastjson_field_order() {
        let s = SyncStateSet {
            sync_state_set: [2, 1].into_iter().collect(),
            sync_state_set_epoch: 3,
        };
        let body = s.encode();
        assert_eq!(body, br#"{"syncStateSet":[1,2],"syncStateSetEpoch":3}"#);
        assert_eq!(SyncStateSet::decode(&body).unwrap(), s);
        assert_eq!(
            SyncStateSet::decode(b"{}").unwrap(),
            SyncStateSet::default()
        );
        assert!(SyncStateSet::decode(br#"{"syncStateSet":["a"]}"#).is_err());
    }

    #[test]
    fn elect_master_body_carries_the_member_group_when_known() {
        let group = BrokerMemberGroup {
            cluster: "C".into(),
            broker_name: "b".into(),
            broker_addrs: [(1, "127.0.0.1:10911".to_string())].into_iter().collect(),
        };
        let b = ElectMasterResponseBody {
            broker_member_group: Some(group),
            sync_state_set: [1].into_iter().collect(),
        };
        let body = b.encode();
        assert!(body.starts_with(br#"{"brokerMemberGroup":{"brokerAddrs":{"1":"127.0.0.1:10911"}"#));
        assert_eq!(ElectMasterResponseBody::decode(&body).unwrap(), b);
        let bare = ElectMasterResponseBody::decode(br#"{"syncStateSet":[4]}"#).unwrap();
        assert_eq!(bare.broker_member_group, None);
    }

    #[test]
    fn broker_replicas_info_round_trips() {
        let replica = |id: i64, alive: bool| ReplicaIdentity {
            broker_name: "b".into(),
            broker_id: id,
            broker_address: format!("127.0.0.1:1091{id}"),
            alive,
        };
        let info = BrokerReplicasInfo {
            replicas_info_table: [(
                "b".to_string(),
                ReplicasInfo {
                    master_broker_id: Some(1),
                    master_address: Some("127.0.0.1:10911".into()),
                    master_epoch: 2,
                    sync_state_set_epoch: 3,
                    in_sync_replicas: vec![replica(1, true)],
                    not_in_sync_replicas: vec![replica(2, false)],
                },
            )]
            .into_iter()
            .collect(),
        };
        let body = info.encode();
        assert!(body.starts_with(br#"{"replicasInfoTable":{"b":{"inSyncReplicas":[{"alive":true,"brokerAddress":"127.0.0.1:10911","brokerId":1,"brokerName":"b"}]"#));
        assert_eq!(BrokerReplicasInfo::decode(&body).unwrap(), info);
    }

    #[test]
    fn epoch_entry_cache_round_trips_with_javas_open_end() {
        let cache = EpochEntryCache {
            cluster_name: "C".into(),
            broker_name: "b".into(),
            broker_id: 1,
            epoch_list: vec![
                EpochEntryBody {
                    epoch: 1,
                    start_offset: 0,
                    end_offset: 100,
                },
                EpochEntryBody {
                    epoch: 2,
                    start_offset: 100,
                    end_offset: i64::MAX,
                },
            ],
            max_offset: 150,
        };
        let body = cache.encode();
        assert!(body.starts_with(br#"{"brokerId":1,"brokerName":"b","clusterName":"C","epochList":[{"endOffset":100,"epoch":1,"startOffset":0}"#));
        assert!(String::from_utf8_lossy(&body).contains("9223372036854775807"));
        assert_eq!(EpochEntryCache::decode(&body).unwrap(), cache);
    }
}
