//! Consumer-group metadata bodies: `SubscriptionGroupConfig` (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
//! GET_SUBSCRIPTIONGROUP_CONFIG) and `SubscriptionGroupWrapper` (GET_ALL_SUBSCRIPTIONGROUP_CONFIG
//! and the broker's `config/subscriptionGroup.json`), `headers.md` §9.4.
//!
//! The retry policy and the subscription set are carried as opaque [`Value`]s: the broker only
//! stores and re-serves them. Their object keys are sorted (the last of duplicate keys wins) when
//! read, so the stored form does not depend on the order a peer wrote them in.

use std::collections::BTreeMap;

use crate::body::topic::DataVersion;
use crate::json::{self, read, BodyError, ObjectBuilder, Value};

/// One consumer group's configuration (`SubscriptionGroupConfig.java`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionGroupConfig {
    pub group_name: String,
    pub consume_enable: bool,
    pub consume_from_min_enable: bool,
    pub consume_broadcast_enable: bool,
    pub consume_message_orderly: bool,
    pub retry_queue_nums: u32,
    pub retry_max_times: i32,
    /// `GroupRetryPolicy` as sent; `None` when a peer sent `null` (then left out when written).
    pub group_retry_policy: Option<Value>,
    pub broker_id: u64,
    pub which_broker_when_consume_slowly: u64,
    pub notify_consumer_ids_changed_enable: bool,
    pub group_sys_flag: u32,
    pub consume_timeout_minute: u32,
    /// `subscriptionDataSet` as sent; `None` when absent or null.
    pub subscription_data_set: Option<Value>,
    pub attributes: BTreeMap<String, String>,
}

impl SubscriptionGroupConfig {
    /// A group with Java's defaults.
    pub fn new(group_name: impl Into<String>) -> Self {
        Self {
            group_name: group_name.into(),
            consume_enable: true,
            consume_from_min_enable: true,
            consume_broadcast_enable: true,
            consume_message_orderly: false,
            retry_queue_nums: 1,
            retry_max_times: 16,
            group_retry_policy: Some(default_retry_policy()),
            broker_id: 0,
            which_broker_when_consume_slowly: 1,
            notify_consumer_ids_changed_enable: true,
            group_sys_flag: 0,
            consume_timeout_minute: 15,
            subscription_data_set: None,
            attributes: BTreeMap::new(),
        }
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
            .field("brokerId", unsigned(self.broker_id))
            .field("consumeBroadcastEnable", self.consume_broadcast_enable)
            .field("consumeEnable", self.consume_enable)
            .field("consumeFromMinEnable", self.consume_from_min_enable)
            .field("consumeMessageOrderly", self.consume_message_orderly)
            .field(
                "consumeTimeoutMinute",
                unsigned(self.consume_timeout_minute),
            )
            .field("groupName", self.group_name.as_str())
            .field_opt("groupRetryPolicy", self.group_retry_policy.clone())
            .field("groupSysFlag", unsigned(self.group_sys_flag))
            .field(
                "notifyConsumerIdsChangedEnable",
                self.notify_consumer_ids_changed_enable,
            )
            .field("retryMaxTimes", self.retry_max_times)
            .field("retryQueueNums", unsigned(self.retry_queue_nums))
            .field_opt("subscriptionDataSet", self.subscription_data_set.clone())
            .field(
                "whichBrokerWhenConsumeSlowly",
                unsigned(self.which_broker_when_consume_slowly),
            )
            .build()
    }

    /// Reads a SubscriptionGroupConfig object: `groupName` is required, absent fields take
    /// Java's defaults, counts must be non-negative.
    pub fn from_value(v: &Value, path: &str) -> Result<Self, BodyError> {
        if v.as_object().is_none() {
            return Err(BodyError::field(path, "a SubscriptionGroupConfig object"));
        }
        let defaults = Self::new(read::string(v, "groupName", path)?);
        let group_retry_policy = match v.get("groupRetryPolicy") {
            None => defaults.group_retry_policy,
            Some(Value::Null) => None,
            Some(policy) => Some(sorted_keys(policy)),
        };
        Ok(Self {
            consume_enable: read::bool_or(v, "consumeEnable", path, true)?,
            consume_from_min_enable: read::bool_or(v, "consumeFromMinEnable", path, true)?,
            consume_broadcast_enable: read::bool_or(v, "consumeBroadcastEnable", path, true)?,
            consume_message_orderly: read::bool_or(v, "consumeMessageOrderly", path, false)?,
            retry_queue_nums: unsigned_or(v, "retryQueueNums", path, defaults.retry_queue_nums)?,
            retry_max_times: read::i32_or(v, "retryMaxTimes", path, defaults.retry_max_times)?,
            group_retry_policy,
            broker_id: unsigned_or(v, "brokerId", path, 0)?,
            which_broker_when_consume_slowly: unsigned_or(
                v,
                "whichBrokerWhenConsumeSlowly",
                path,
                defaults.which_broker_when_consume_slowly,
            )?,
            notify_consumer_ids_changed_enable: read::bool_or(
                v,
                "notifyConsumerIdsChangedEnable",
                path,
                true,
            )?,
            group_sys_flag: unsigned_or(v, "groupSysFlag", path, 0)?,
            consume_timeout_minute: unsigned_or(
                v,
                "consumeTimeoutMinute",
                path,
                defaults.consume_timeout_minute,
            )?,
            subscription_data_set: v.get_present("subscriptionDataSet").map(sorted_keys),
            attributes: read::string_map(v, "attributes", path)?,
            group_name: defaults.group_name,
        })
    }

    /// Compact JSON, keys in fastjson's alphabetical order.
    pub fn encode(&self) -> String {
        self.to_value().to_json()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        Self::from_value(&json::parse(body)?, "")
    }
}

/// `GroupRetryPolicy`'s default: the customized (delay-level) policy.
pub fn default_retry_policy() -> Value {
    ObjectBuilder::new().field("type", "CUSTOMIZED").build()
}

/// group → topic → forbidden perm bits.
pub type ForbiddenTable = BTreeMap<String, BTreeMap<String, u32>>;

/// `SubscriptionGroupWrapper`: `{dataVersion, forbiddenTable, subscriptionGroupTable}`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubscriptionGroupWrapper {
    pub data_version: DataVersion,
    pub forbidden_table: ForbiddenTable,
    pub subscription_group_table: BTreeMap<String, SubscriptionGroupConfig>,
}

impl SubscriptionGroupWrapper {
    pub fn to_value(&self) -> Value {
        let forbidden = self.forbidden_table.iter().map(|(group, topics)| {
            let bits = topics.iter().map(|(t, b)| (t.as_str(), unsigned(*b)));
            (group.as_str(), json::map_value(bits))
        });
        ObjectBuilder::new()
            .field("dataVersion", self.data_version.to_value())
            .field("forbiddenTable", json::map_value(forbidden))
            .field(
                "subscriptionGroupTable",
                json::map_value(
                    self.subscription_group_table
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.to_value())),
                ),
            )
            .build()
    }

    /// Reads the wrapper; an absent `dataVersion` reads as the default one.
    pub fn from_value(v: &Value, path: &str) -> Result<Self, BodyError> {
        if v.as_object().is_none() {
            return Err(BodyError::field(path, "a SubscriptionGroupWrapper object"));
        }
        let data_version = match v.get_present("dataVersion") {
            Some(dv) => DataVersion::from_value(dv, &read::join(path, "dataVersion"))?,
            None => DataVersion::default(),
        };
        let mut forbidden_table = ForbiddenTable::new();
        let forbidden_path = read::join(path, "forbiddenTable");
        for (group, topics) in read::entries(v, "forbiddenTable", path)? {
            let group = key_text(group, &forbidden_path)?;
            let group_path = read::join(&forbidden_path, group);
            let topics = topics
                .as_object()
                .ok_or_else(|| BodyError::field(&group_path, "an object"))?;
            let mut bits = BTreeMap::new();
            for (topic, value) in topics {
                let topic = key_text(topic, &group_path)?;
                let n = value
                    .as_i64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| {
                        BodyError::field(read::join(&group_path, topic), "a non-negative integer")
                    })?;
                bits.insert(topic.to_owned(), n);
            }
            forbidden_table.insert(group.to_owned(), bits);
        }
        let mut subscription_group_table = BTreeMap::new();
        let table_path = read::join(path, "subscriptionGroupTable");
        for (name, entry) in read::entries(v, "subscriptionGroupTable", path)? {
            let name = key_text(name, &table_path)?;
            let config =
                SubscriptionGroupConfig::from_value(entry, &read::join(&table_path, name))?;
            subscription_group_table.insert(name.to_owned(), config);
        }
        Ok(Self {
            data_version,
            forbidden_table,
            subscription_group_table,
        })
    }

    pub fn encode(&self) -> String {
        self.to_value().to_json()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        Self::from_value(&json::parse(body)?, "")
    }
}

fn key_text<'a>(key: &'a Value, path: &str) -> Result<&'a str, BodyError> {
    key.key_text()
        .ok_or_else(|| BodyError::field(path, "string keys"))
}

fn unsigned(n: impl Into<u64>) -> Value {
    Value::Number(n.into().to_string())
}

/// A non-negative integer field that must fit `T`; `default` when absent.
fn unsigned_or<T: TryFrom<i64>>(
    obj: &Value,
    key: &str,
    path: &str,
    default: T,
) -> Result<T, BodyError> {
    match obj.get_present(key) {
        None => Ok(default),
        Some(v) => v
            .as_i64()
            .and_then(|n| T::try_from(n).ok())
            .ok_or_else(|| BodyError::field(read::join(path, key), "a non-negative integer")),
    }
}

/// `value` with every object's keys sorted as strings; of duplicate keys the last one stays.
fn sorted_keys(value: &Value) -> Value {
    match value {
        Value::Object(entries) => {
            let mut sorted = BTreeMap::new();
            for (k, v) in entries {
                let key = k.key_text().map_or_else(|| k.to_json(), str::to_owned);
                sorted.insert(key, sorted_keys(v));
            }
            json::map_value(sorted)
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted_keys).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_fields_take_java_defaults() {
        let g = SubscriptionGroupConfig::decode(br#"{"groupName":"G"}"#).unwrap();
        assert_eq!(g, SubscriptionGroupConfig::new("G"));
        assert_eq!(
            g.encode(),
            r#"{"attributes":{},"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":true,"consumeFromMinEnable":true,"consumeMessageOrderly":false,"consumeTimeoutMinute":15,"groupName":"G","groupRetryPolicy":{"type":"CUSTOMIZED"},"groupSysFlag":0,"notifyConsumerIdsChangedEnable":true,"retryMaxTimes":16,"retryQueueNums":1,"whichBrokerWhenConsumeSlowly":1}"#
        );
    }

    #[test]
    fn refuses_a_missing_name_and_negative_counts() {
        assert!(SubscriptionGroupConfig::decode(br#"{"retryQueueNums":1}"#).is_err());
        let e = SubscriptionGroupConfig::decode(br#"{"groupName":"G","retryQueueNums":-1}"#)
            .unwrap_err();
        assert!(e.to_string().contains("retryQueueNums"), "{e}");
    }

    #[test]
    fn opaque_parts_are_kept_with_sorted_keys_and_null_policy_is_dropped() {
        let g = SubscriptionGroupConfig::decode(
            br#"{"groupName":"G","groupRetryPolicy":{"type":"X","a":{"z":1,"b":[{"y":1,"x":2}]},"type":"Y"},"subscriptionDataSet":[{"topic":"T","expressionType":"TAG"}]}"#,
        )
        .unwrap();
        assert_eq!(
            g.group_retry_policy.as_ref().map(Value::to_json).as_deref(),
            Some(r#"{"a":{"b":[{"x":2,"y":1}],"z":1},"type":"Y"}"#)
        );
        assert_eq!(
            g.subscription_data_set
                .as_ref()
                .map(Value::to_json)
                .as_deref(),
            Some(r#"[{"expressionType":"TAG","topic":"T"}]"#)
        );
        let null = SubscriptionGroupConfig::decode(br#"{"groupName":"G","groupRetryPolicy":null}"#)
            .unwrap();
        assert_eq!(null.group_retry_policy, None);
        assert!(!null.encode().contains("groupRetryPolicy"));
    }

    #[test]
    fn wrapper_round_trips_in_the_fastjson_dialect() {
        let text = br#"{"subscriptionGroupTable":{"G":{"groupName":"G","retryMaxTimes":3}},"forbiddenTable":{"G":{"T":2}},"dataVersion":{"counter":4,"timestamp":1700000000000}}"#;
        let w = SubscriptionGroupWrapper::decode(text).unwrap();
        assert_eq!(w.data_version.counter, 4);
        assert_eq!(w.forbidden_table["G"]["T"], 2);
        assert_eq!(w.subscription_group_table["G"].retry_max_times, 3);
        assert_eq!(
            SubscriptionGroupWrapper::decode(w.encode().as_bytes()).unwrap(),
            w
        );
        assert!(w.encode().starts_with(
            r#"{"dataVersion":{"counter":4,"stateVersion":0,"timestamp":1700000000000},"forbiddenTable":{"G":{"T":2}},"#
        ));
        assert!(SubscriptionGroupWrapper::decode(br#"{"forbiddenTable":{"G":3}}"#).is_err());
    }
}
