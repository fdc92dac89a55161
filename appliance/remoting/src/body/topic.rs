//! Topic metadata bodies: `DataVersion`, `TopicConfig`, `TopicConfigSerializeWrapper`
//! (the broker's `config/topics.json` and the core of REGISTER_BROKER),
//! `TopicConfigAndMappingSerializeWrapper` (adds static-topic mappings) and `TopicList`
//! (`headers.md` §8.2, §8.5; `store.md` for the file).
//!
//! Keys are written in fastjson's alphabetical order, compact. Static-topic mapping
//! objects are carried as opaque [`Value`]s: the name server only stores and re-serves
//! them, and their inner Integer-keyed maps survive untouched.

use std::collections::{BTreeMap, BTreeSet};

use crate::json::{self, read, BodyError, ObjectBuilder, Value};

/// Version stamp of a broker's topic (or mapping) table (`DataVersion.java`).
/// Equality is field-wise, as Java's `equals`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DataVersion {
    pub state_version: i64,
    pub timestamp: i64,
    pub counter: i64,
}

impl DataVersion {
    /// A fresh version stamped `timestamp_ms`, as Java's constructor does with "now".
    pub fn new(timestamp_ms: i64) -> Self {
        Self {
            state_version: 0,
            timestamp: timestamp_ms,
            counter: 0,
        }
    }

    /// `nextVersion()`: bump the counter and restamp.
    pub fn next_version(&mut self, timestamp_ms: i64) {
        self.timestamp = timestamp_ms;
        self.counter += 1;
    }

    pub fn to_value(&self) -> Value {
        ObjectBuilder::new()
            .field("counter", self.counter)
            .field("stateVersion", self.state_version)
            .field("timestamp", self.timestamp)
            .build()
    }

    pub fn from_value(v: &Value, path: &str) -> Result<Self, BodyError> {
        if v.as_object().is_none() {
            return Err(BodyError::field(path, "a DataVersion object"));
        }
        Ok(Self {
            state_version: read::i64_or(v, "stateVersion", path, 0)?,
            timestamp: read::i64_or(v, "timestamp", path, 0)?,
            counter: read::i64_or(v, "counter", path, 0)?,
        })
    }

    /// Compact JSON, e.g. `{"counter":3,"stateVersion":0,"timestamp":1700000000000}`.
    pub fn encode(&self) -> String {
        self.to_value().to_json()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        Self::from_value(&json::parse(body)?, "")
    }
}

/// `TopicFilterType`: how tags are matched (only `SINGLE_TAG` is used in practice).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TopicFilterType {
    #[default]
    SingleTag,
    MultiTag,
}

impl TopicFilterType {
    pub fn name(self) -> &'static str {
        match self {
            Self::SingleTag => "SINGLE_TAG",
            Self::MultiTag => "MULTI_TAG",
        }
    }

    /// By name (`SINGLE_TAG`) or ordinal (`0`), as fastjson accepts both.
    pub fn from_name(name: &str) -> Option<Self> {
        match name.trim() {
            "SINGLE_TAG" | "0" => Some(Self::SingleTag),
            "MULTI_TAG" | "1" => Some(Self::MultiTag),
            _ => None,
        }
    }
}

/// Permission bits of a topic or broker (`PermName.java`).
pub mod perm {
    pub const PRIORITY: i32 = 0x8;
    pub const READ: i32 = 0x4;
    pub const WRITE: i32 = 0x2;
    pub const INHERIT: i32 = 0x1;

    pub fn is_readable(perm: i32) -> bool {
        perm & READ == READ
    }

    pub fn is_writeable(perm: i32) -> bool {
        perm & WRITE == WRITE
    }
}

/// Topic system flag bits (`TopicSysFlag.java`).
pub mod sys_flag {
    pub const UNIT: i32 = 0x1;
    pub const UNIT_SUB: i32 = 0x2;

    pub fn has_unit(flag: i32) -> bool {
        flag & UNIT == UNIT
    }

    pub fn has_unit_sub(flag: i32) -> bool {
        flag & UNIT_SUB == UNIT_SUB
    }
}

/// One topic's configuration (`TopicConfig.java`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfig {
    pub topic_name: String,
    pub read_queue_nums: i32,
    pub write_queue_nums: i32,
    pub perm: i32,
    pub topic_filter_type: TopicFilterType,
    pub topic_sys_flag: i32,
    pub order: bool,
    pub attributes: BTreeMap<String, String>,
}

impl TopicConfig {
    /// Java's defaults: 16/16 queues, read+write, `SINGLE_TAG`.
    pub const DEFAULT_QUEUE_NUMS: i32 = 16;

    pub fn new(topic_name: impl Into<String>) -> Self {
        Self {
            topic_name: topic_name.into(),
            read_queue_nums: Self::DEFAULT_QUEUE_NUMS,
            write_queue_nums: Self::DEFAULT_QUEUE_NUMS,
            perm: perm::READ | perm::WRITE,
            topic_filter_type: TopicFilterType::SingleTag,
            topic_sys_flag: 0,
            order: false,
            attributes: BTreeMap::new(),
        }
    }

    pub fn with_queues(mut self, read_queue_nums: i32, write_queue_nums: i32) -> Self {
        self.read_queue_nums = read_queue_nums;
        self.write_queue_nums = write_queue_nums;
        self
    }

    pub fn with_perm(mut self, perm: i32) -> Self {
        self.perm = perm;
        self
    }

    pub fn is_readable(&self) -> bool {
        perm::is_readable(self.perm)
    }

    pub fn is_writeable(&self) -> bool {
        perm::is_writeable(self.perm)
    }

    /// A template topic (TBW102) lends its settings to topics auto-created from it.
    pub fn is_inherited(&self) -> bool {
        self.perm & perm::INHERIT == perm::INHERIT
    }

    pub fn is_multi_tag(&self) -> bool {
        self.topic_filter_type == TopicFilterType::MultiTag
    }

    /// Queue ids `0..` this are valid targets: Java takes `max(read, write)`.
    pub fn max_queue_nums(&self) -> i32 {
        self.read_queue_nums.max(self.write_queue_nums)
    }

    pub fn to_value(&self) -> Value {
        ObjectBuilder::new()
            .field(
                "attributes",
                json::map_value(
                    self.attributes
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str())),
                ),
            )
            .field("order", self.order)
            .field("perm", self.perm)
            .field("readQueueNums", self.read_queue_nums)
            .field("topicFilterType", self.topic_filter_type.name())
            .field("topicName", self.topic_name.as_str())
            .field("topicSysFlag", self.topic_sys_flag)
            .field("writeQueueNums", self.write_queue_nums)
            .build()
    }

    /// Reads a TopicConfig object; absent fields take Java's defaults. `name_hint` is the
    /// map key it was found under, used when `topicName` itself is missing.
    pub fn from_value(v: &Value, path: &str, name_hint: Option<&str>) -> Result<Self, BodyError> {
        if v.as_object().is_none() {
            return Err(BodyError::field(path, "a TopicConfig object"));
        }
        let topic_name = match (read::opt_string(v, "topicName", path)?, name_hint) {
            (Some(name), _) => name,
            (None, Some(hint)) => hint.to_owned(),
            (None, None) => {
                return Err(BodyError::field(read::join(path, "topicName"), "a string"))
            }
        };
        let topic_filter_type = match v.get_present("topicFilterType") {
            None => TopicFilterType::SingleTag,
            Some(t) => t
                .key_text()
                .and_then(TopicFilterType::from_name)
                .ok_or_else(|| {
                    BodyError::field(
                        read::join(path, "topicFilterType"),
                        "SINGLE_TAG or MULTI_TAG",
                    )
                })?,
        };
        Ok(Self {
            topic_name,
            read_queue_nums: read::i32_or(v, "readQueueNums", path, Self::DEFAULT_QUEUE_NUMS)?,
            write_queue_nums: read::i32_or(v, "writeQueueNums", path, Self::DEFAULT_QUEUE_NUMS)?,
            perm: read::i32_or(v, "perm", path, perm::READ | perm::WRITE)?,
            topic_filter_type,
            topic_sys_flag: read::i32_or(v, "topicSysFlag", path, 0)?,
            order: read::bool_or(v, "order", path, false)?,
            attributes: read::string_map(v, "attributes", path)?,
        })
    }

    /// The space-separated text form used inside the compressed register body:
    /// `name read write perm filterType attributesJSON`.
    pub fn encode_text(&self) -> String {
        let attrs = json::map_value(
            self.attributes
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        );
        format!(
            "{} {} {} {} {} {}",
            self.topic_name,
            self.read_queue_nums,
            self.write_queue_nums,
            self.perm,
            self.topic_filter_type.name(),
            attrs.to_json()
        )
    }

    /// Parses [`TopicConfig::encode_text`]. Like Java, an unreadable attributes part is
    /// ignored (attribute values may contain spaces, which break the split); the numeric
    /// fields must parse. `topicSysFlag` and `order` are not carried: they take defaults.
    pub fn decode_text(text: &str) -> Result<Self, BodyError> {
        let parts: Vec<&str> = text.split(' ').collect();
        if parts.len() < 5 {
            return Err(BodyError::Layout(format!(
                "topic config text {text:?} has {} space-separated fields, expected at least 5",
                parts.len()
            )));
        }
        let int = |i: usize, what: &str| {
            parts[i].parse::<i32>().map_err(|_| {
                BodyError::Layout(format!(
                    "topic config text {text:?}: {what} {:?} is not an integer",
                    parts[i]
                ))
            })
        };
        let mut config = TopicConfig::new(parts[0]);
        config.read_queue_nums = int(1, "readQueueNums")?;
        config.write_queue_nums = int(2, "writeQueueNums")?;
        config.perm = int(3, "perm")?;
        config.topic_filter_type = TopicFilterType::from_name(parts[4]).ok_or_else(|| {
            BodyError::Layout(format!(
                "topic config text {text:?}: unknown filter type {:?}",
                parts[4]
            ))
        })?;
        if parts.len() >= 6 {
            if let Ok(attrs) = json::parse_str(parts[5]) {
                let wrapped = Value::Object(vec![(Value::str("a"), attrs)]);
                if let Ok(map) = read::string_map(&wrapped, "a", "") {
                    config.attributes = map;
                }
            }
        }
        Ok(config)
    }
}

/// `topicConfigTable` as a sorted map (fastjson writes a hash map; sorted is what our
/// bodies promise and what tests can compare).
pub type TopicConfigTable = BTreeMap<String, TopicConfig>;

fn topic_table_value(table: &TopicConfigTable) -> Value {
    json::map_value(table.iter().map(|(k, v)| (k.as_str(), v.to_value())))
}

fn topic_table_from(v: &Value, path: &str) -> Result<TopicConfigTable, BodyError> {
    let table_path = read::join(path, "topicConfigTable");
    let mut table = TopicConfigTable::new();
    for (k, entry) in read::entries(v, "topicConfigTable", path)? {
        let name = k
            .key_text()
            .ok_or_else(|| BodyError::field(&table_path, "topic-name keys"))?;
        let config = TopicConfig::from_value(entry, &format!("{table_path}.{name}"), Some(name))?;
        table.insert(name.to_owned(), config);
    }
    Ok(table)
}

/// `TopicConfigSerializeWrapper`: `{dataVersion, topicConfigTable}`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicConfigSerializeWrapper {
    pub data_version: DataVersion,
    pub topic_config_table: TopicConfigTable,
}

impl TopicConfigSerializeWrapper {
    pub fn to_value(&self) -> Value {
        ObjectBuilder::new()
            .field("dataVersion", self.data_version.to_value())
            .field(
                "topicConfigTable",
                topic_table_value(&self.topic_config_table),
            )
            .build()
    }

    pub fn from_value(v: &Value, path: &str) -> Result<Self, BodyError> {
        if v.as_object().is_none() {
            return Err(BodyError::field(
                path,
                "a TopicConfigSerializeWrapper object",
            ));
        }
        Ok(Self {
            data_version: match v.get_present("dataVersion") {
                Some(dv) => DataVersion::from_value(dv, &read::join(path, "dataVersion"))?,
                None => DataVersion::default(),
            },
            topic_config_table: topic_table_from(v, path)?,
        })
    }

    pub fn encode(&self) -> String {
        self.to_value().to_json()
    }

    /// fastjson pretty form (tabs), as Java brokers persist `config/topics.json`.
    pub fn encode_pretty(&self) -> String {
        self.to_value().to_pretty_json()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        Self::from_value(&json::parse(body)?, "")
    }
}

/// A static-topic `TopicQueueMappingInfo`, kept as its JSON object: the name server only
/// files it under `(topic, bname)` and serves it back in routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicQueueMappingInfo(pub Value);

impl TopicQueueMappingInfo {
    pub fn topic(&self) -> Option<&str> {
        self.0.get_present("topic").and_then(Value::as_str)
    }

    /// The broker name the mapping belongs to (`bname`).
    pub fn bname(&self) -> Option<&str> {
        self.0.get_present("bname").and_then(Value::as_str)
    }
}

/// `TopicConfigAndMappingSerializeWrapper`: the wrapper plus static-topic mappings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicConfigAndMappingSerializeWrapper {
    pub data_version: DataVersion,
    pub topic_config_table: TopicConfigTable,
    pub mapping_data_version: DataVersion,
    /// topic → mapping info.
    pub topic_queue_mapping_info_map: BTreeMap<String, TopicQueueMappingInfo>,
    /// topic → mapping detail (opaque).
    pub topic_queue_mapping_detail_map: BTreeMap<String, Value>,
}

impl TopicConfigAndMappingSerializeWrapper {
    pub fn to_value(&self) -> Value {
        ObjectBuilder::new()
            .field("dataVersion", self.data_version.to_value())
            .field("mappingDataVersion", self.mapping_data_version.to_value())
            .field(
                "topicConfigTable",
                topic_table_value(&self.topic_config_table),
            )
            .field(
                "topicQueueMappingDetailMap",
                json::map_value(
                    self.topic_queue_mapping_detail_map
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.clone())),
                ),
            )
            .field(
                "topicQueueMappingInfoMap",
                json::map_value(
                    self.topic_queue_mapping_info_map
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.0.clone())),
                ),
            )
            .build()
    }

    pub fn from_value(v: &Value, path: &str) -> Result<Self, BodyError> {
        let base = TopicConfigSerializeWrapper::from_value(v, path)?;
        let mapping_data_version = match v.get_present("mappingDataVersion") {
            Some(dv) => DataVersion::from_value(dv, &read::join(path, "mappingDataVersion"))?,
            None => DataVersion::default(),
        };
        let opaque_map = |key: &str| -> Result<BTreeMap<String, Value>, BodyError> {
            let mut map = BTreeMap::new();
            for (k, entry) in read::entries(v, key, path)? {
                let topic = k
                    .key_text()
                    .ok_or_else(|| BodyError::field(read::join(path, key), "topic keys"))?;
                map.insert(topic.to_owned(), entry.clone());
            }
            Ok(map)
        };
        Ok(Self {
            data_version: base.data_version,
            topic_config_table: base.topic_config_table,
            mapping_data_version,
            topic_queue_mapping_info_map: opaque_map("topicQueueMappingInfoMap")?
                .into_iter()
                .map(|(k, v)| (k, TopicQueueMappingInfo(v)))
                .collect(),
            topic_queue_mapping_detail_map: opaque_map("topicQueueMappingDetailMap")?,
        })
    }

    pub fn encode(&self) -> String {
        self.to_value().to_json()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        Self::from_value(&json::parse(body)?, "")
    }
}

impl From<TopicConfigSerializeWrapper> for TopicConfigAndMappingSerializeWrapper {
    fn from(w: TopicConfigSerializeWrapper) -> Self {
        Self {
            data_version: w.data_version,
            topic_config_table: w.topic_config_table,
            ..Default::default()
        }
    }
}

/// `TopicList`: `{"brokerAddr":..., "topicList":[...]}` (`brokerAddr` omitted when null).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicList {
    pub topic_list: BTreeSet<String>,
    pub broker_addr: Option<String>,
}

impl TopicList {
    pub fn to_value(&self) -> Value {
        ObjectBuilder::new()
            .field_opt("brokerAddr", self.broker_addr.as_deref())
            .field("topicList", json::string_array(&self.topic_list))
            .build()
    }

    pub fn encode(&self) -> String {
        self.to_value().to_json()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = json::parse(body)?;
        Ok(Self {
            topic_list: read::string_list(&v, "topicList", "")?
                .into_iter()
                .collect(),
            broker_addr: read::opt_string(&v, "brokerAddr", "")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_version_shape() {
        let dv = DataVersion {
            state_version: 0,
            timestamp: 1_700_000_000_000,
            counter: 3,
        };
        assert_eq!(
            dv.encode(),
            r#"{"counter":3,"stateVersion":0,"timestamp":1700000000000}"#
        );
        assert_eq!(DataVersion::decode(dv.encode().as_bytes()).unwrap(), dv);
        // Java's AtomicLong may arrive as a string from lenient peers.
        let lenient = DataVersion::decode(br#"{"counter":"4","timestamp":5}"#).unwrap();
        assert_eq!(
            (lenient.counter, lenient.timestamp, lenient.state_version),
            (4, 5, 0)
        );
        assert!(DataVersion::decode(b"[1]").is_err());
    }

    #[test]
    fn topic_config_json_is_alphabetical_and_round_trips() {
        let mut tc = TopicConfig::new("T1");
        tc.read_queue_nums = 4;
        tc.write_queue_nums = 4;
        tc.attributes
            .insert("+message.type".into(), "NORMAL".into());
        let text = tc.to_value().to_json();
        assert_eq!(
            text,
            r#"{"attributes":{"+message.type":"NORMAL"},"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"T1","topicSysFlag":0,"writeQueueNums":4}"#
        );
        let back = TopicConfig::from_value(&json::parse_str(&text).unwrap(), "", None).unwrap();
        assert_eq!(back, tc);
    }

    #[test]
    fn topic_config_text_form() {
        let mut tc = TopicConfig::new("T1");
        tc.perm = 7;
        assert_eq!(tc.encode_text(), "T1 16 16 7 SINGLE_TAG {}");
        assert_eq!(TopicConfig::decode_text(&tc.encode_text()).unwrap(), tc);
        let with_attr = TopicConfig::decode_text(r#"T2 8 8 6 MULTI_TAG {"a":"b"}"#).unwrap();
        assert_eq!(with_attr.attributes.get("a").map(String::as_str), Some("b"));
        assert_eq!(with_attr.topic_filter_type, TopicFilterType::MultiTag);
        // A space inside the attributes only loses the attributes, as in Java.
        let spaced = TopicConfig::decode_text(r#"T3 1 1 6 SINGLE_TAG {"a":"b c"}"#).unwrap();
        assert!(spaced.attributes.is_empty());
        assert!(TopicConfig::decode_text("T4 x 1 6 SINGLE_TAG").is_err());
        assert!(TopicConfig::decode_text("T4 1 1").is_err());
    }

    #[test]
    fn wrapper_round_trip_and_defaults() {
        let mut w = TopicConfigSerializeWrapper {
            data_version: DataVersion::new(9),
            ..Default::default()
        };
        w.topic_config_table
            .insert("TBW102".into(), TopicConfig::new("TBW102"));
        let back = TopicConfigSerializeWrapper::decode(w.encode().as_bytes()).unwrap();
        assert_eq!(back, w);
        assert!(w.encode_pretty().starts_with("{\n\t\"dataVersion\":{"));
        // topicName missing inside the entry: the key names it.
        let lenient =
            TopicConfigSerializeWrapper::decode(br#"{"topicConfigTable":{"X":{"perm":2}}}"#)
                .unwrap();
        assert_eq!(lenient.topic_config_table["X"].topic_name, "X");
        assert_eq!(lenient.topic_config_table["X"].read_queue_nums, 16);
        let bad =
            TopicConfigSerializeWrapper::decode(br#"{"topicConfigTable":{"X":{"perm":"rw"}}}"#);
        assert_eq!(
            bad.unwrap_err().to_string(),
            "body field topicConfigTable.X.perm: expected a 32-bit integer"
        );
    }

    #[test]
    fn perm_and_queue_helpers() {
        let tc = TopicConfig::new("T")
            .with_queues(3, 5)
            .with_perm(perm::INHERIT | perm::READ);
        assert_eq!((tc.read_queue_nums, tc.write_queue_nums), (3, 5));
        assert_eq!(tc.max_queue_nums(), 5);
        assert!(tc.is_inherited() && tc.is_readable() && !tc.is_writeable());
        assert!(!tc.is_multi_tag());
    }

    #[test]
    fn wrapper_goes_through_serde_in_the_two_space_layout() {
        let mut tc = TopicConfig::new("T")
            .with_queues(24, 32)
            .with_perm(perm::READ);
        tc.topic_filter_type = TopicFilterType::MultiTag;
        tc.order = true;
        tc.attributes.insert("k".into(), "a\"b\u{1f}".into());
        let w = TopicConfigSerializeWrapper {
            data_version: DataVersion {
                state_version: 0,
                timestamp: 1_700_000_000_000,
                counter: 2,
            },
            topic_config_table: [("T".to_string(), tc)].into(),
        };
        let text = serde_json::to_string_pretty(&w.to_value()).unwrap();
        assert_eq!(
            text,
            "{\n  \"dataVersion\": {\n    \"counter\": 2,\n    \"stateVersion\": 0,\n    \"timestamp\": 1700000000000\n  },\n  \"topicConfigTable\": {\n    \"T\": {\n      \"attributes\": {\n        \"k\": \"a\\\"b\\u001f\"\n      },\n      \"order\": true,\n      \"perm\": 4,\n      \"readQueueNums\": 24,\n      \"topicFilterType\": \"MULTI_TAG\",\n      \"topicName\": \"T\",\n      \"topicSysFlag\": 0,\n      \"writeQueueNums\": 32\n    }\n  }\n}"
        );
        assert_eq!(
            TopicConfigSerializeWrapper::decode(text.as_bytes()).unwrap(),
            w
        );
    }

    #[test]
    fn mapping_wrapper_keeps_opaque_maps() {
        let text = r#"{"dataVersion":{"counter":1,"stateVersion":0,"timestamp":2},"mappingDataVersion":{"counter":0,"stateVersion":0,"timestamp":2},"topicConfigTable":{},"topicQueueMappingDetailMap":{},"topicQueueMappingInfoMap":{"S":{"bname":"b","currIdMap":{0:0},"epoch":1,"topic":"S","totalQueues":1}}}"#;
        let w = TopicConfigAndMappingSerializeWrapper::decode(text.as_bytes()).unwrap();
        let info = &w.topic_queue_mapping_info_map["S"];
        assert_eq!((info.topic(), info.bname()), (Some("S"), Some("b")));
        assert_eq!(w.to_value().to_fastjson(), text);
    }

    #[test]
    fn topic_list_shape() {
        let list = TopicList {
            topic_list: ["B".to_string(), "A".to_string()].into(),
            broker_addr: None,
        };
        assert_eq!(list.encode(), r#"{"topicList":["A","B"]}"#);
        let with_addr = TopicList {
            broker_addr: Some("1.2.3.4:10911".into()),
            ..list
        };
        assert_eq!(
            with_addr.encode(),
            r#"{"brokerAddr":"1.2.3.4:10911","topicList":["A","B"]}"#
        );
        assert_eq!(
            TopicList::decode(with_addr.encode().as_bytes()).unwrap(),
            with_addr
        );
    }
}
