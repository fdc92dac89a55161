//! Admin statistics bodies (`headers.md` §9.6, §9.7): `ConsumeStats` (with
//! `OffsetWrapper`), `TopicStatsTable` (with `TopicOffset`) and `BrokerStatsData` (with
//! `BrokerStatsItem`, `VIEW_BROKER_STATS_DATA`).
//!
//! The offset tables are MessageQueue-keyed and go over the wire in fastjson's object-key
//! form (see `body::consumer`); doubles are written as Java's `Double.toString` prints
//! them (`0.0`, `12.5`, `1.0E7`), which is what fastjson emits. `KVTable` lives in
//! `body::kv`.

use std::collections::BTreeMap;

use crate::json::{self, read, BodyError, ObjectBuilder, Value};

use super::consumer::{mq_map_value, read_mq_map, MessageQueue};

/// A double as a JSON number in Java `Double.toString` form; NaN and infinities become
/// `null`, as fastjson writes them.
pub fn java_double(d: f64) -> Value {
    if !d.is_finite() {
        return Value::Null;
    }
    let abs = d.abs();
    let text = if d == 0.0 || (1e-3..1e7).contains(&abs) {
        // Rust's Display is the shortest round-trip decimal, never exponent form.
        let s = format!("{d}");
        if s.contains('.') {
            s
        } else {
            format!("{s}.0")
        }
    } else {
        // Java: "computerized scientific notation", mantissa always with a fraction.
        let s = format!("{d:e}");
        let (mantissa, exponent) = s.split_once('e').unwrap_or((&s, "0"));
        if mantissa.contains('.') {
            format!("{mantissa}E{exponent}")
        } else {
            format!("{mantissa}.0E{exponent}")
        }
    };
    Value::Number(text)
}

/// A double field; absent → 0.0.
fn f64_or_zero(obj: &Value, key: &str, path: &str) -> Result<f64, BodyError> {
    match obj.get_present(key) {
        None => Ok(0.0),
        Some(v) => v
            .as_f64()
            .ok_or_else(|| BodyError::field(read::join(path, key), "a number")),
    }
}

fn root(body: &[u8], what: &'static str) -> Result<Value, BodyError> {
    let v = json::parse(body)?;
    if v.as_object().is_none() {
        return Err(BodyError::field("", what));
    }
    Ok(v)
}

/// Per-queue consumption progress of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OffsetWrapper {
    /// The queue's max offset.
    pub broker_offset: i64,
    /// The group's committed offset (clamped to >= 0).
    pub consumer_offset: i64,
    /// max(consumer offset, last pull offset).
    pub pull_offset: i64,
    /// Store time of message `consumer_offset - 1` (0 if none).
    pub last_timestamp: i64,
}

impl OffsetWrapper {
    pub fn to_json_value(&self) -> Value {
        ObjectBuilder::new()
            .field("brokerOffset", self.broker_offset)
            .field("consumerOffset", self.consumer_offset)
            .field("lastTimestamp", self.last_timestamp)
            .field("pullOffset", self.pull_offset)
            .build()
    }

    pub fn from_json(obj: &Value, path: &str) -> Result<Self, BodyError> {
        if obj.as_object().is_none() {
            return Err(BodyError::field(path, "an OffsetWrapper object"));
        }
        Ok(Self {
            broker_offset: read::i64_or(obj, "brokerOffset", path, 0)?,
            consumer_offset: read::i64_or(obj, "consumerOffset", path, 0)?,
            pull_offset: read::i64_or(obj, "pullOffset", path, 0)?,
            last_timestamp: read::i64_or(obj, "lastTimestamp", path, 0)?,
        })
    }
}

/// `GET_CONSUME_STATS` (208) response body.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConsumeStats {
    pub offset_table: BTreeMap<MessageQueue, OffsetWrapper>,
    pub consume_tps: f64,
}

impl ConsumeStats {
    /// Total lag: Σ (brokerOffset − consumerOffset) (Java `computeTotalDiff`).
    pub fn total_diff(&self) -> i64 {
        self.offset_table
            .values()
            .map(|w| w.broker_offset.saturating_sub(w.consumer_offset))
            .fold(0i64, i64::saturating_add)
    }

    pub fn encode(&self) -> String {
        ObjectBuilder::new()
            .field("consumeTps", java_double(self.consume_tps))
            .field(
                "offsetTable",
                mq_map_value(&self.offset_table, OffsetWrapper::to_json_value),
            )
            .build()
            .to_json()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = root(body, "a ConsumeStats object")?;
        Ok(Self {
            offset_table: read_mq_map(&v, "offsetTable", "", OffsetWrapper::from_json)?,
            consume_tps: f64_or_zero(&v, "consumeTps", "")?,
        })
    }
}

/// Per-queue offsets of a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TopicOffset {
    pub min_offset: i64,
    pub max_offset: i64,
    /// Store time of the last message (0 if the queue is empty).
    pub last_update_timestamp: i64,
}

impl TopicOffset {
    pub fn to_json_value(&self) -> Value {
        ObjectBuilder::new()
            .field("lastUpdateTimestamp", self.last_update_timestamp)
            .field("maxOffset", self.max_offset)
            .field("minOffset", self.min_offset)
            .build()
    }

    pub fn from_json(obj: &Value, path: &str) -> Result<Self, BodyError> {
        if obj.as_object().is_none() {
            return Err(BodyError::field(path, "a TopicOffset object"));
        }
        Ok(Self {
            min_offset: read::i64_or(obj, "minOffset", path, 0)?,
            max_offset: read::i64_or(obj, "maxOffset", path, 0)?,
            last_update_timestamp: read::i64_or(obj, "lastUpdateTimestamp", path, 0)?,
        })
    }
}

/// `GET_TOPIC_STATS_INFO` (202) response body.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TopicStatsTable {
    pub offset_table: BTreeMap<MessageQueue, TopicOffset>,
    pub topic_put_tps: f64,
}

impl TopicStatsTable {
    pub fn encode(&self) -> String {
        ObjectBuilder::new()
            .field(
                "offsetTable",
                mq_map_value(&self.offset_table, TopicOffset::to_json_value),
            )
            .field("topicPutTps", java_double(self.topic_put_tps))
            .build()
            .to_json()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = root(body, "a TopicStatsTable object")?;
        Ok(Self {
            offset_table: read_mq_map(&v, "offsetTable", "", TopicOffset::from_json)?,
            topic_put_tps: f64_or_zero(&v, "topicPutTps", "")?,
        })
    }
}

/// One window of a broker statistic.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BrokerStatsItem {
    pub sum: i64,
    pub tps: f64,
    /// Average per operation ("avgpt").
    pub avgpt: f64,
}

impl BrokerStatsItem {
    pub fn to_json_value(&self) -> Value {
        ObjectBuilder::new()
            .field("avgpt", java_double(self.avgpt))
            .field("sum", self.sum)
            .field("tps", java_double(self.tps))
            .build()
    }

    pub fn from_json(obj: &Value, path: &str) -> Result<Self, BodyError> {
        if obj.as_object().is_none() {
            return Err(BodyError::field(path, "a BrokerStatsItem object"));
        }
        Ok(Self {
            sum: read::i64_or(obj, "sum", path, 0)?,
            tps: f64_or_zero(obj, "tps", path)?,
            avgpt: f64_or_zero(obj, "avgpt", path)?,
        })
    }
}

/// `VIEW_BROKER_STATS_DATA` response body: minute, hour and day windows of one stat.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BrokerStatsData {
    pub stats_minute: Option<BrokerStatsItem>,
    pub stats_hour: Option<BrokerStatsItem>,
    pub stats_day: Option<BrokerStatsItem>,
}

impl BrokerStatsData {
    pub fn encode(&self) -> String {
        ObjectBuilder::new()
            .field_opt("statsDay", self.stats_day.map(|s| s.to_json_value()))
            .field_opt("statsHour", self.stats_hour.map(|s| s.to_json_value()))
            .field_opt("statsMinute", self.stats_minute.map(|s| s.to_json_value()))
            .build()
            .to_json()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = root(body, "a BrokerStatsData object")?;
        let item = |key: &str| -> Result<Option<BrokerStatsItem>, BodyError> {
            v.get_present(key)
                .map(|o| BrokerStatsItem::from_json(o, key))
                .transpose()
        };
        Ok(Self {
            stats_minute: item("statsMinute")?,
            stats_hour: item("statsHour")?,
            stats_day: item("statsDay")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn mq(q: i32) -> MessageQueue {
        MessageQueue::new("T1", "broker-a", q)
    }

    #[test]
    fn java_double_format() {
        let t = |d: f64| java_double(d).to_json();
        assert_eq!(t(0.0), "0.0");
        assert_eq!(t(12.0), "12.0");
        assert_eq!(t(0.5), "0.5");
        assert_eq!(t(1234.5678), "1234.5678");
        assert_eq!(t(1e7), "1.0E7");
        assert_eq!(t(12_345_678.9), "1.23456789E7");
        assert_eq!(t(0.0001), "1.0E-4");
        assert_eq!(t(-2.5), "-2.5");
        assert_eq!(t(f64::NAN), "null");
    }

    #[test]
    fn topic_stats_spec_example() {
        // headers.md §9.6, unwrapped.
        let spec = concat!(
            r#"{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T1"}:{"lastUpdateTimestamp":1700000000000,"maxOffset":120,"minOffset":0},"#,
            r#"{"brokerName":"broker-a","queueId":1,"topic":"T1"}:{"lastUpdateTimestamp":0,"maxOffset":0,"minOffset":0}},"#,
            r#""topicPutTps":0.0}"#
        );
        let t = TopicStatsTable::decode(spec.as_bytes()).unwrap();
        assert_eq!(t.offset_table.len(), 2);
        assert_eq!(t.offset_table[&mq(0)].max_offset, 120);
        assert_eq!(
            t.offset_table[&mq(0)].last_update_timestamp,
            1_700_000_000_000
        );
        assert_eq!(t.encode(), spec);
    }

    #[test]
    fn consume_stats_spec_example() {
        // headers.md §9.7.
        let spec = concat!(
            r#"{"consumeTps":0.0,"#,
            r#""offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T1"}:{"brokerOffset":120,"consumerOffset":100,"lastTimestamp":1700000000000,"pullOffset":110}}}"#
        );
        let s = ConsumeStats::decode(spec.as_bytes()).unwrap();
        let w = s.offset_table[&mq(0)];
        assert_eq!(
            w,
            OffsetWrapper {
                broker_offset: 120,
                consumer_offset: 100,
                pull_offset: 110,
                last_timestamp: 1_700_000_000_000
            }
        );
        assert_eq!(s.total_diff(), 20);
        assert_eq!(s.encode(), spec);
    }

    #[test]
    fn lenient_reading() {
        // Whitespace, numbers as strings, a missing table, a Java-written double.
        let t = TopicStatsTable::decode(b"{ \"topicPutTps\" : \"1.5\" }\n").unwrap();
        assert!(t.offset_table.is_empty());
        assert_eq!(t.topic_put_tps, 1.5);
        let s = ConsumeStats::decode(br#"{"consumeTps":1.0E7,"offsetTable":{}}"#).unwrap();
        assert_eq!(s.consume_tps, 1e7);
        assert_eq!(
            ConsumeStats::decode(
                br#"{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:5}}"#
            )
            .unwrap_err(),
            BodyError::field("offsetTable[0]", "an OffsetWrapper object")
        );
        assert_eq!(
            ConsumeStats::decode(br#"{"offsetTable":{{"queueId":0,"topic":"T"}:{}}}"#).unwrap_err(),
            BodyError::field("offsetTable[0].key.brokerName", "a string")
        );
    }

    #[test]
    fn broker_stats_data() {
        let d = BrokerStatsData {
            stats_minute: Some(BrokerStatsItem {
                sum: 10,
                tps: 0.5,
                avgpt: 2.0,
            }),
            stats_hour: None,
            stats_day: Some(BrokerStatsItem::default()),
        };
        let text = d.encode();
        assert_eq!(
            text,
            r#"{"statsDay":{"avgpt":0.0,"sum":0,"tps":0.0},"statsMinute":{"avgpt":2.0,"sum":10,"tps":0.5}}"#
        );
        assert_eq!(BrokerStatsData::decode(text.as_bytes()).unwrap(), d);
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = ConsumeStats::decode(&bytes);
            let _ = TopicStatsTable::decode(&bytes);
            let _ = BrokerStatsData::decode(&bytes);
        }

        #[test]
        fn doubles_round_trip(d in any::<f64>().prop_filter("finite", |d| d.is_finite())) {
            let text = java_double(d).to_json();
            prop_assert_eq!(text.parse::<f64>().unwrap(), d);
        }

        #[test]
        fn consume_stats_round_trip(entries in proptest::collection::btree_map(
            0i32..32, (any::<i64>(), any::<i64>(), any::<i64>(), any::<i64>()), 0..8),
            tps in 0.0f64..1e9) {
            let offset_table = entries.into_iter().map(|(q, (b, c, p, l))| (mq(q), OffsetWrapper {
                broker_offset: b, consumer_offset: c, pull_offset: p, last_timestamp: l })).collect();
            let s = ConsumeStats { offset_table, consume_tps: tps };
            prop_assert_eq!(ConsumeStats::decode(s.encode().as_bytes()).unwrap(), s);
        }
    }
}
