//! Controller bodies (`remoting/.../protocol/body`, spec features.md §g.4–g.5):
//! `SyncStateSet` (answers of CONTROLLER_ALTER_SYNC_STATE_SET, CONTROLLER_REGISTER_BROKER,
//! CONTROLLER_GET_REPLICA_INFO, and the body of NOTIFY_BROKER_ROLE_CHANGED) and
//! `ElectMasterResponseBody` (CONTROLLER_ELECT_MASTER). Broker ids are Java `Long`s and the
//! epochs `int`s; fastjson writes the fields in name order.

use std::collections::BTreeSet;

use crate::body::cluster::BrokerMemberGroup;
use crate::json::{self, read, BodyError, ObjectBuilder};

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
}
