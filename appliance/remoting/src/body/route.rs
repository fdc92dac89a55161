//! Route bodies: `QueueData`, `BrokerData` and `TopicRouteData`, the answer to
//! GET_ROUTEINFO_BY_TOPIC (`headers.md` §8.1) and the body of REGISTER_TOPIC_IN_NAMESRV.
//!
//! Every client parses this body, several by hand: it is written compact (the Go client
//! splits `brokerAddrs` on `,` and `:`), with fastjson's alphabetical keys, and always
//! carries `enableActingMaster` (some clients reject a route without it). `brokerAddrs`
//! is a Long-keyed map: [`KeyStyle::Quoted`] gives the standard form Java sends to clients
//! ≥ V4_9_4, [`KeyStyle::Bare`] fastjson's legacy `{0:"ip:port"}` form.

use std::collections::BTreeMap;

use crate::body::topic::TopicQueueMappingInfo;
use crate::json::{self, read, BodyError, KeyStyle, ObjectBuilder, Value};

/// The broker id of a master (`MixAll.MASTER_ID`).
pub const MASTER_ID: i64 = 0;

/// One broker name's queues of a topic (`QueueData.java`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueueData {
    pub broker_name: String,
    pub read_queue_nums: i32,
    pub write_queue_nums: i32,
    pub perm: i32,
    pub topic_sys_flag: i32,
}

impl QueueData {
    pub fn to_value(&self) -> Value {
        ObjectBuilder::new()
            .field("brokerName", self.broker_name.as_str())
            .field("perm", self.perm)
            .field("readQueueNums", self.read_queue_nums)
            .field("topicSysFlag", self.topic_sys_flag)
            .field("writeQueueNums", self.write_queue_nums)
            .build()
    }

    pub fn from_value(v: &Value, path: &str) -> Result<Self, BodyError> {
        if v.as_object().is_none() {
            return Err(BodyError::field(path, "a QueueData object"));
        }
        Ok(Self {
            broker_name: read::string(v, "brokerName", path)?,
            read_queue_nums: read::i32_or(v, "readQueueNums", path, 0)?,
            write_queue_nums: read::i32_or(v, "writeQueueNums", path, 0)?,
            perm: read::i32_or(v, "perm", path, 0)?,
            // The Go client spells it `topicSynFlag`; accept either on input.
            topic_sys_flag: match v.get_present("topicSysFlag") {
                Some(_) => read::i32_or(v, "topicSysFlag", path, 0)?,
                None => read::i32_or(v, "topicSynFlag", path, 0)?,
            },
        })
    }
}

/// One broker name's replica set (`BrokerData.java`): broker id → `ip:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerData {
    pub cluster: String,
    pub broker_name: String,
    pub broker_addrs: BTreeMap<i64, String>,
    pub zone_name: Option<String>,
    pub enable_acting_master: bool,
}

impl BrokerData {
    pub fn new(cluster: impl Into<String>, broker_name: impl Into<String>) -> Self {
        Self {
            cluster: cluster.into(),
            broker_name: broker_name.into(),
            broker_addrs: BTreeMap::new(),
            zone_name: None,
            enable_acting_master: false,
        }
    }

    pub fn to_value(&self) -> Value {
        ObjectBuilder::new()
            .field(
                "brokerAddrs",
                json::int_map_value(self.broker_addrs.iter().map(|(id, a)| (*id, a.as_str()))),
            )
            .field("brokerName", self.broker_name.as_str())
            .field("cluster", self.cluster.as_str())
            .field("enableActingMaster", self.enable_acting_master)
            .field_opt("zoneName", self.zone_name.as_deref())
            .build()
    }

    pub fn from_value(v: &Value, path: &str) -> Result<Self, BodyError> {
        if v.as_object().is_none() {
            return Err(BodyError::field(path, "a BrokerData object"));
        }
        Ok(Self {
            cluster: read::opt_string(v, "cluster", path)?.unwrap_or_default(),
            broker_name: read::string(v, "brokerName", path)?,
            broker_addrs: read_id_map(v, "brokerAddrs", path)?,
            zone_name: read::opt_string(v, "zoneName", path)?,
            enable_acting_master: read::bool_or(v, "enableActingMaster", path, false)?,
        })
    }
}

/// Reads a Long-keyed `id → address` map in either key style.
pub fn read_id_map(v: &Value, key: &str, path: &str) -> Result<BTreeMap<i64, String>, BodyError> {
    let map_path = read::join(path, key);
    let mut map = BTreeMap::new();
    for (k, addr) in read::entries(v, key, path)? {
        let id = k
            .key_text()
            .and_then(|t| t.trim().parse::<i64>().ok())
            .ok_or_else(|| BodyError::field(&map_path, "integer broker-id keys"))?;
        let addr = addr
            .as_str()
            .ok_or_else(|| BodyError::field(format!("{map_path}.{id}"), "an address string"))?;
        map.insert(id, addr.to_owned());
    }
    Ok(map)
}

/// The route of one topic (`TopicRouteData.java`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicRouteData {
    pub order_topic_conf: Option<String>,
    pub queue_datas: Vec<QueueData>,
    pub broker_datas: Vec<BrokerData>,
    /// broker address → filter server addresses (legacy; normally empty).
    pub filter_server_table: BTreeMap<String, Vec<String>>,
    /// broker name → static-topic mapping; omitted when `None`.
    pub topic_queue_mapping_by_broker: Option<BTreeMap<String, TopicQueueMappingInfo>>,
}

impl TopicRouteData {
    pub fn to_value(&self) -> Value {
        ObjectBuilder::new()
            .field(
                "brokerDatas",
                Value::Array(self.broker_datas.iter().map(BrokerData::to_value).collect()),
            )
            .field(
                "filterServerTable",
                json::map_value(
                    self.filter_server_table
                        .iter()
                        .map(|(k, v)| (k.as_str(), json::string_array(v))),
                ),
            )
            .field_opt("orderTopicConf", self.order_topic_conf.as_deref())
            .field(
                "queueDatas",
                Value::Array(self.queue_datas.iter().map(QueueData::to_value).collect()),
            )
            .field_opt(
                "topicQueueMappingByBroker",
                self.topic_queue_mapping_by_broker
                    .as_ref()
                    .map(|m| json::map_value(m.iter().map(|(k, v)| (k.as_str(), v.0.clone())))),
            )
            .build()
    }

    /// Compact JSON in the given key style.
    pub fn encode(&self, keys: KeyStyle) -> String {
        let mut out = String::with_capacity(256);
        json::write_value(&mut out, &self.to_value(), keys, None);
        out
    }

    pub fn from_value(v: &Value) -> Result<Self, BodyError> {
        if v.as_object().is_none() {
            return Err(BodyError::field("", "a TopicRouteData object"));
        }
        let list = |key: &str| -> Result<&[Value], BodyError> {
            match v.get_present(key) {
                None => Ok(&[]),
                Some(Value::Array(items)) => Ok(items),
                Some(_) => Err(BodyError::field(key, "an array")),
            }
        };
        let queue_datas = list("queueDatas")?
            .iter()
            .enumerate()
            .map(|(i, q)| QueueData::from_value(q, &format!("queueDatas[{i}]")))
            .collect::<Result<_, _>>()?;
        let broker_datas = list("brokerDatas")?
            .iter()
            .enumerate()
            .map(|(i, b)| BrokerData::from_value(b, &format!("brokerDatas[{i}]")))
            .collect::<Result<_, _>>()?;
        let mut filter_server_table = BTreeMap::new();
        for (k, servers) in read::entries(v, "filterServerTable", "")? {
            let addr = k
                .key_text()
                .ok_or_else(|| BodyError::field("filterServerTable", "address keys"))?;
            let wrapped = Value::Object(vec![(Value::str("s"), servers.clone())]);
            filter_server_table.insert(
                addr.to_owned(),
                read::string_list(&wrapped, "s", "filterServerTable")?,
            );
        }
        let topic_queue_mapping_by_broker = match v.get_present("topicQueueMappingByBroker") {
            None => None,
            Some(Value::Object(entries)) => Some(
                entries
                    .iter()
                    .filter_map(|(k, m)| {
                        Some((k.key_text()?.to_owned(), TopicQueueMappingInfo(m.clone())))
                    })
                    .collect(),
            ),
            Some(_) => return Err(BodyError::field("topicQueueMappingByBroker", "an object")),
        };
        Ok(Self {
            order_topic_conf: read::opt_string(v, "orderTopicConf", "")?,
            queue_datas,
            broker_datas,
            filter_server_table,
            topic_queue_mapping_by_broker,
        })
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        Self::from_value(&json::parse(body)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TopicRouteData {
        let mut broker = BrokerData::new("DefaultCluster", "broker-a");
        broker.broker_addrs.insert(0, "10.0.0.1:10911".into());
        TopicRouteData {
            queue_datas: vec![QueueData {
                broker_name: "broker-a".into(),
                read_queue_nums: 4,
                write_queue_nums: 4,
                perm: 6,
                topic_sys_flag: 0,
            }],
            broker_datas: vec![broker],
            ..Default::default()
        }
    }

    #[test]
    fn standard_form_matches_the_spec_example() {
        // headers.md §8.1, byte for byte.
        let expected = r#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911"},"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#;
        assert_eq!(sample().encode(KeyStyle::Quoted), expected);
    }

    #[test]
    fn legacy_form_has_bare_keys() {
        let mut route = sample();
        route.broker_datas[0]
            .broker_addrs
            .insert(1, "10.0.0.2:10911".into());
        route.order_topic_conf = Some("broker-a:4".into());
        let text = route.encode(KeyStyle::Bare);
        assert!(
            text.contains(r#""brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}"#),
            "{text}"
        );
        assert!(
            text.contains(r#""orderTopicConf":"broker-a:4","queueDatas""#),
            "{text}"
        );
        assert_eq!(TopicRouteData::decode(text.as_bytes()).unwrap(), route);
    }

    /// What the Go client does with `brokerAddrs`: raw text between the braces, split on
    /// `,`, split each at the first `:`, delete every `"`.
    #[test]
    fn go_client_splitter_reads_both_forms() {
        let mut route = sample();
        route.broker_datas[0]
            .broker_addrs
            .insert(1, "[::1]:10911".into());
        for style in [KeyStyle::Quoted, KeyStyle::Bare] {
            let text = route.encode(style);
            let start = text.find(r#""brokerAddrs":{"#).unwrap() + r#""brokerAddrs":{"#.len();
            let end = start + text[start..].find('}').unwrap();
            let parsed: BTreeMap<i64, String> = text[start..end]
                .split(',')
                .map(|item| {
                    let (k, v) = item.split_once(':').unwrap();
                    (k.replace('"', "").parse().unwrap(), v.replace('"', ""))
                })
                .collect();
            assert_eq!(parsed, route.broker_datas[0].broker_addrs, "{style:?}");
        }
    }

    #[test]
    fn zone_and_mapping_fields() {
        let mut route = sample();
        route.broker_datas[0].zone_name = Some("zone-1".into());
        route.broker_datas[0].enable_acting_master = true;
        // Bare keys are written quoted; start from the quoted form so the round trip compares.
        let mapping =
            json::parse_str(r#"{"bname":"broker-a","currIdMap":{"0":0},"topic":"S"}"#).unwrap();
        route.topic_queue_mapping_by_broker = Some(
            [("broker-a".to_string(), TopicQueueMappingInfo(mapping))]
                .into_iter()
                .collect(),
        );
        let text = route.encode(KeyStyle::Quoted);
        assert!(
            text.contains(r#""enableActingMaster":true,"zoneName":"zone-1"}"#),
            "{text}"
        );
        assert!(text.ends_with(r#""topicQueueMappingByBroker":{"broker-a":{"bname":"broker-a","currIdMap":{"0":0},"topic":"S"}}}"#), "{text}");
        assert_eq!(TopicRouteData::decode(text.as_bytes()).unwrap(), route);
    }

    #[test]
    fn decode_errors_name_the_field() {
        let err = TopicRouteData::decode(br#"{"queueDatas":[{"perm":6}]}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "body field queueDatas[0].brokerName: expected a string"
        );
        let err = TopicRouteData::decode(
            br#"{"brokerDatas":[{"brokerName":"b","brokerAddrs":{x:"a"}}]}"#,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("brokerDatas[0].brokerAddrs"),
            "{err}"
        );
        assert!(TopicRouteData::decode(b"not json").is_err());
    }
}
