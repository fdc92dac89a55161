//! Cluster bodies: `ClusterInfo` (GET_BROKER_CLUSTER_INFO, `headers.md` §8.4) and
//! `BrokerMemberGroup` / `GetBrokerMemberGroupResponseBody` (GET_BROKER_MEMBER_GROUP).
//!
//! Both carry Long-keyed `brokerAddrs` maps. A Java name server writes them with bare
//! numeric keys; we write quoted keys by default (fastjson-based mqadmin accepts them and
//! strict JSON readers need them), and can write the bare form on request.

use std::collections::{BTreeMap, BTreeSet};

use crate::body::route::{read_id_map, BrokerData};
use crate::json::{self, read, BodyError, KeyStyle, ObjectBuilder, Value};

/// `ClusterInfo`: broker name → BrokerData, cluster name → broker names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterInfo {
    pub broker_addr_table: BTreeMap<String, BrokerData>,
    pub cluster_addr_table: BTreeMap<String, BTreeSet<String>>,
}

impl ClusterInfo {
    pub fn to_value(&self) -> Value {
        ObjectBuilder::new()
            .field(
                "brokerAddrTable",
                json::map_value(
                    self.broker_addr_table
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.to_value())),
                ),
            )
            .field(
                "clusterAddrTable",
                json::map_value(
                    self.cluster_addr_table
                        .iter()
                        .map(|(k, v)| (k.as_str(), json::string_array(v))),
                ),
            )
            .build()
    }

    pub fn encode(&self, keys: KeyStyle) -> String {
        let mut out = String::with_capacity(256);
        json::write_value(&mut out, &self.to_value(), keys, None);
        out
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = json::parse(body)?;
        let mut info = ClusterInfo::default();
        for (k, data) in read::entries(&v, "brokerAddrTable", "")? {
            let name = k
                .key_text()
                .ok_or_else(|| BodyError::field("brokerAddrTable", "broker-name keys"))?;
            info.broker_addr_table.insert(
                name.to_owned(),
                BrokerData::from_value(data, &format!("brokerAddrTable.{name}"))?,
            );
        }
        for (k, names) in read::entries(&v, "clusterAddrTable", "")? {
            let cluster = k
                .key_text()
                .ok_or_else(|| BodyError::field("clusterAddrTable", "cluster-name keys"))?;
            let wrapped = Value::Object(vec![(Value::str(cluster), names.clone())]);
            let list = read::string_list(&wrapped, cluster, "clusterAddrTable")?;
            info.cluster_addr_table
                .insert(cluster.to_owned(), list.into_iter().collect());
        }
        Ok(info)
    }
}

/// `BrokerMemberGroup`: the replica set of one broker name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BrokerMemberGroup {
    pub cluster: String,
    pub broker_name: String,
    pub broker_addrs: BTreeMap<i64, String>,
}

impl BrokerMemberGroup {
    pub fn to_value(&self) -> Value {
        ObjectBuilder::new()
            .field(
                "brokerAddrs",
                json::int_map_value(self.broker_addrs.iter().map(|(id, a)| (*id, a.as_str()))),
            )
            .field("brokerName", self.broker_name.as_str())
            .field("cluster", self.cluster.as_str())
            .build()
    }

    pub fn from_value(v: &Value, path: &str) -> Result<Self, BodyError> {
        if v.as_object().is_none() {
            return Err(BodyError::field(path, "a BrokerMemberGroup object"));
        }
        Ok(Self {
            cluster: read::opt_string(v, "cluster", path)?.unwrap_or_default(),
            broker_name: read::opt_string(v, "brokerName", path)?.unwrap_or_default(),
            broker_addrs: read_id_map(v, "brokerAddrs", path)?,
        })
    }

    /// The body of a GET_BROKER_MEMBER_GROUP answer: `{"brokerMemberGroup":{...}}`.
    pub fn encode_response_body(&self) -> String {
        ObjectBuilder::new()
            .field("brokerMemberGroup", self.to_value())
            .build()
            .to_json()
    }

    /// Reads a `GetBrokerMemberGroupResponseBody`; `None` when the group is null.
    pub fn decode_response_body(body: &[u8]) -> Result<Option<Self>, BodyError> {
        let v = json::parse(body)?;
        v.get_present("brokerMemberGroup")
            .map(|g| Self::from_value(g, "brokerMemberGroup"))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ClusterInfo {
        let mut broker = BrokerData::new("DefaultCluster", "broker-a");
        broker.broker_addrs.insert(0, "10.0.0.1:10911".into());
        broker.broker_addrs.insert(1, "10.0.0.2:10911".into());
        let mut info = ClusterInfo::default();
        info.broker_addr_table.insert("broker-a".into(), broker);
        info.cluster_addr_table
            .insert("DefaultCluster".into(), ["broker-a".to_string()].into());
        info
    }

    #[test]
    fn cluster_info_shapes() {
        let info = sample();
        assert_eq!(
            info.encode(KeyStyle::Quoted),
            r#"{"brokerAddrTable":{"broker-a":{"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"},"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}"#
        );
        let java = info.encode(KeyStyle::Bare);
        assert!(java.contains(r#"{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}"#));
        assert_eq!(ClusterInfo::decode(java.as_bytes()).unwrap(), info);
        assert_eq!(
            ClusterInfo::decode(info.encode(KeyStyle::Quoted).as_bytes()).unwrap(),
            info
        );
    }

    #[test]
    fn member_group_body() {
        let group = BrokerMemberGroup {
            cluster: "c".into(),
            broker_name: "b".into(),
            broker_addrs: [(0, "a:1".to_string())].into(),
        };
        let body = group.encode_response_body();
        assert_eq!(
            body,
            r#"{"brokerMemberGroup":{"brokerAddrs":{"0":"a:1"},"brokerName":"b","cluster":"c"}}"#
        );
        assert_eq!(
            BrokerMemberGroup::decode_response_body(body.as_bytes()).unwrap(),
            Some(group)
        );
        assert_eq!(
            BrokerMemberGroup::decode_response_body(b"{}").unwrap(),
            None
        );
    }
}
