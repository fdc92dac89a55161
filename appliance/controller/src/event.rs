//! The controller's replicated events (upstream `controller/impl/event`): what a validated
//! write becomes in the consensus log, applied in order by every controller. Encoded as
//! upstream's EventSerializer does: a 2-byte big-endian event type, then the event as JSON
//! with upstream's field names.

use ringmq_remoting::json::{self, read, BodyError, ObjectBuilder, Value};
use std::collections::BTreeSet;

/// Upstream `EventType` ids.
pub const ALTER_SYNC_STATE_SET_EVENT: u16 = 1;
pub const APPLY_BROKER_ID_EVENT: u16 = 2;
pub const ELECT_MASTER_EVENT: u16 = 3;
pub const CLEAN_BROKER_DATA_EVENT: u16 = 5;
pub const UPDATE_BROKER_ADDRESS: u16 = 6;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    AlterSyncStateSet {
        broker_name: String,
        new_sync_state_set: BTreeSet<i64>,
    },
    ApplyBrokerId {
        cluster_name: String,
        broker_name: String,
        broker_address: String,
        new_broker_id: i64,
        register_check_code: String,
    },
    /// `new_master` None: the master is gone and no replica could take over.
    ElectMaster {
        broker_name: String,
        new_master: Option<i64>,
    },
    /// `broker_ids` None: the whole broker set.
    CleanBrokerData {
        broker_name: String,
        broker_ids: Option<BTreeSet<i64>>,
    },
    UpdateBrokerAddress {
        cluster_name: String,
        broker_name: String,
        broker_address: String,
        broker_id: i64,
    },
}

impl Event {
    pub fn type_id(&self) -> u16 {
        match self {
            Event::AlterSyncStateSet { .. } => ALTER_SYNC_STATE_SET_EVENT,
            Event::ApplyBrokerId { .. } => APPLY_BROKER_ID_EVENT,
            Event::ElectMaster { .. } => ELECT_MASTER_EVENT,
            Event::CleanBrokerData { .. } => CLEAN_BROKER_DATA_EVENT,
            Event::UpdateBrokerAddress { .. } => UPDATE_BROKER_ADDRESS,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let body = match self {
            Event::AlterSyncStateSet {
                broker_name,
                new_sync_state_set,
            } => ObjectBuilder::new()
                .field("brokerName", broker_name.as_str())
                .field(
                    "newSyncStateSet",
                    json::int_array(new_sync_state_set.iter().copied()),
                ),
            Event::ApplyBrokerId {
                cluster_name,
                broker_name,
                broker_address,
                new_broker_id,
                register_check_code,
            } => ObjectBuilder::new()
                .field("brokerAddress", broker_address.as_str())
                .field("brokerName", broker_name.as_str())
                .field("clusterName", cluster_name.as_str())
                .field("newBrokerId", *new_broker_id)
                .field("registerCheckCode", register_check_code.as_str()),
            Event::ElectMaster {
                broker_name,
                new_master,
            } => ObjectBuilder::new()
                .field("brokerName", broker_name.as_str())
                .field_opt("newMasterBrokerId", *new_master)
                .field("newMasterElected", new_master.is_some()),
            Event::CleanBrokerData {
                broker_name,
                broker_ids,
            } => ObjectBuilder::new()
                .field_opt(
                    "brokerIdSetToClean",
                    broker_ids
                        .as_ref()
                        .map(|s| json::int_array(s.iter().copied())),
                )
                .field("brokerName", broker_name.as_str()),
            Event::UpdateBrokerAddress {
                cluster_name,
                broker_name,
                broker_address,
                broker_id,
            } => ObjectBuilder::new()
                .field("brokerAddress", broker_address.as_str())
                .field("brokerId", *broker_id)
                .field("brokerName", broker_name.as_str())
                .field("clusterName", cluster_name.as_str()),
        };
        let mut out = self.type_id().to_be_bytes().to_vec();
        out.extend_from_slice(body.build().to_json().as_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Event, BodyError> {
        if bytes.len() < 2 {
            return Err(BodyError::Layout(format!(
                "an event is a 2-byte type and a JSON body; got {} bytes",
                bytes.len()
            )));
        }
        let kind = u16::from_be_bytes([bytes[0], bytes[1]]);
        let v = json::parse(&bytes[2..])?;
        let s = |k: &str| read::string(&v, k, "");
        let id = |k: &str| {
            v.get_present(k)
                .and_then(Value::as_i64)
                .ok_or_else(|| BodyError::field(k, "a broker id"))
        };
        Ok(match kind {
            ALTER_SYNC_STATE_SET_EVENT => Event::AlterSyncStateSet {
                broker_name: s("brokerName")?,
                new_sync_state_set: read::int_set(&v, "newSyncStateSet", "")?.unwrap_or_default(),
            },
            APPLY_BROKER_ID_EVENT => Event::ApplyBrokerId {
                cluster_name: s("clusterName")?,
                broker_name: s("brokerName")?,
                broker_address: s("brokerAddress")?,
                new_broker_id: id("newBrokerId")?,
                register_check_code: s("registerCheckCode")?,
            },
            ELECT_MASTER_EVENT => Event::ElectMaster {
                broker_name: s("brokerName")?,
                new_master: match read::bool_or(&v, "newMasterElected", "", false)? {
                    true => Some(id("newMasterBrokerId")?),
                    false => None,
                },
            },
            CLEAN_BROKER_DATA_EVENT => Event::CleanBrokerData {
                broker_name: s("brokerName")?,
                broker_ids: read::int_set(&v, "brokerIdSetToClean", "")?,
            },
            UPDATE_BROKER_ADDRESS => Event::UpdateBrokerAddress {
                cluster_name: s("clusterName")?,
                broker_name: s("brokerName")?,
                broker_address: s("brokerAddress")?,
                broker_id: id("brokerId")?,
            },
            other => {
                return Err(BodyError::Layout(format!(
                    "unknown controller event type {other}"
                )))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_kind() -> Vec<Event> {
        vec![
            Event::AlterSyncStateSet {
                broker_name: "b".into(),
                new_sync_state_set: [1, 3].into_iter().collect(),
            },
            Event::ApplyBrokerId {
                cluster_name: "C".into(),
                broker_name: "b".into(),
                broker_address: "127.0.0.1:10911".into(),
                new_broker_id: 2,
                register_check_code: "127.0.0.1:10911;1700000000000".into(),
            },
            Event::ElectMaster {
                broker_name: "b".into(),
                new_master: Some(2),
            },
            Event::ElectMaster {
                broker_name: "b".into(),
                new_master: None,
            },
            Event::CleanBrokerData {
                broker_name: "b".into(),
                broker_ids: Some([2].into_iter().collect()),
            },
            Event::CleanBrokerData {
                broker_name: "b".into(),
                broker_ids: None,
            },
            Event::UpdateBrokerAddress {
                cluster_name: "C".into(),
                broker_name: "b".into(),
                broker_address: "127.0.0.2:10911".into(),
                broker_id: 1,
            },
        ]
    }

    #[test]
    fn every_event_round_trips_behind_its_type_id() {
        for e in every_kind() {
            let bytes = e.encode();
            assert_eq!(u16::from_be_bytes([bytes[0], bytes[1]]), e.type_id());
            assert_eq!(Event::decode(&bytes).unwrap(), e);
        }
        let elect = every_kind()[2].encode();
        assert_eq!(
            &elect[2..],
            br#"{"brokerName":"b","newMasterBrokerId":2,"newMasterElected":true}"#
        );
    }

    #[test]
    fn bad_events_are_errors_not_panics() {
        assert!(Event::decode(b"").is_err());
        assert!(Event::decode(b"\x00\x07{}").is_err(), "unknown type");
        assert!(
            Event::decode(b"\x00\x02{\"brokerName\":\"b\"}").is_err(),
            "missing fields"
        );
        assert!(Event::decode(b"\x00\x01not json").is_err());
    }
}
