//! v2 messages ↔ RocketMQ messages: a v2 `Message` to send becomes the property string,
//! body and flags of a Remoting send (upstream proxy's mapping: UNIQ_KEY, TAGS, KEYS,
//! TIMER_DELIVER_MS, __SHARDINGKEY, TRAN_MSG, PGROUP = topic, …) after the proxy's checks;
//! a stored message becomes the v2 `Message` the SDKs read back (MD5 body digest, delivery
//! attempt = reconsume times + 1, receipt handle, message type from its properties).

use std::time::{SystemTime, UNIX_EPOCH};

use ringmq_broker::metadata::topic_config::validate_topic;
use ringmq_client::message::MessageExt;
use ringmq_remoting::message::properties::{keys, MessageProperties};
use ringmq_remoting::message::sysflag;

use crate::pb::{self, Code, DigestType, Encoding, MessageType, Resource, Status};
use crate::status::status;

/// User properties per message (upstream `userPropertyMaxNum`).
pub(crate) const MAX_USER_PROPERTIES: usize = 128;
/// Bytes of user properties, tag and keys per message (upstream `maxUserPropertySize`).
pub(crate) const MAX_USER_PROPERTY_BYTES: usize = 16 * 1024;
/// A message group must be shorter than this, in bytes (upstream `maxMessageGroupSize`).
pub(crate) const MAX_MESSAGE_GROUP_BYTES: usize = 64;
/// Furthest delivery time ahead of now (upstream `maxDelayTimeMills`: one day).
pub(crate) const MAX_DELAY_MS: i64 = 86_400_000;
/// Longest invisible time of a receive or a change (upstream `maxInvisibleTimeMills`: 12 h).
pub(crate) const MAX_INVISIBLE_MS: i64 = 43_200_000;
/// Longest orphaned-transaction recovery time (upstream `maxTransactionRecoverySecond`).
pub(crate) const MAX_TRANSACTION_RECOVERY_S: i64 = 3600;

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Milliseconds from protobuf's seconds and nanoseconds (saturating).
fn join_ms(seconds: i64, nanos: i32) -> i64 {
    seconds
        .saturating_mul(1000)
        .saturating_add(i64::from(nanos / 1_000_000))
}

/// Milliseconds as protobuf's seconds and non-negative nanoseconds.
fn split_ms(ms: i64) -> (i64, i32) {
    let nanos = i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0);
    (ms.div_euclid(1000), nanos)
}

pub(crate) fn timestamp_ms(t: &prost_types::Timestamp) -> i64 {
    join_ms(t.seconds, t.nanos)
}

pub(crate) fn timestamp(ms: i64) -> prost_types::Timestamp {
    let (seconds, nanos) = split_ms(ms);
    prost_types::Timestamp { seconds, nanos }
}

pub(crate) fn duration_ms(d: &prost_types::Duration) -> i64 {
    join_ms(d.seconds, d.nanos)
}

pub(crate) fn duration(ms: i64) -> prost_types::Duration {
    let (seconds, nanos) = split_ms(ms);
    prost_types::Duration { seconds, nanos }
}

/// A topic name checked as the proxy checks it: valid characters and length, and not a
/// system topic. `ILLEGAL_TOPIC` otherwise.
pub(crate) fn check_topic(topic: &str, is_system: bool) -> Result<(), Status> {
    validate_topic(topic).map_err(|e| status(Code::IllegalTopic, e))?;
    if is_system {
        return Err(status(
            Code::IllegalTopic,
            format!("cannot access system topic {topic}"),
        ));
    }
    Ok(())
}

/// A consumer group checked as the proxy checks it (`ILLEGAL_CONSUMER_GROUP`).
pub(crate) fn check_group(group: &str) -> Result<(), Status> {
    ringmq_broker::metadata::topic_config::validate_group(group)
        .map_err(|e| status(Code::IllegalConsumerGroup, e))?;
    if group.starts_with("CID_RMQ_SYS_") {
        return Err(status(
            Code::IllegalConsumerGroup,
            format!("cannot use system group {group}"),
        ));
    }
    Ok(())
}

/// What the message's properties say it is (upstream `TopicMessageType.parseFromMessageProperty`).
pub(crate) fn message_type_of(properties: &MessageProperties) -> &'static str {
    if properties.get(keys::TRAN_MSG) == Some("true") {
        "TRANSACTION"
    } else if [
        keys::DELAY,
        keys::TIMER_DELIVER_MS,
        keys::TIMER_DELAY_SEC,
        keys::TIMER_DELAY_MS,
    ]
    .iter()
    .any(|k| properties.contains_key(k))
    {
        "DELAY"
    } else if properties.contains_key(keys::SHARDING_KEY) {
        "FIFO"
    } else {
        "NORMAL"
    }
}

/// One message ready for a Remoting send.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub properties: MessageProperties,
    pub body: Vec<u8>,
    pub born_ms: i64,
    pub sys_flag: i32,
    pub message_group: Option<String>,
}

/// A v2 message to send, checked and mapped. `peer` is the born host when the message
/// names none; `max_body_bytes` is the broker's `maxMessageSize`.
pub(crate) fn outgoing(
    m: &pb::Message,
    peer: &str,
    max_body_bytes: usize,
    now: i64,
) -> Result<Outgoing, Status> {
    let sp = m.system_properties.clone().unwrap_or_default();
    let topic = m.topic.as_ref().map_or("", |t| t.name.as_str());
    if m.body.is_empty() {
        return Err(status(
            Code::MessageBodyEmpty,
            "message body cannot be empty",
        ));
    }
    if m.body.len() > max_body_bytes {
        return Err(status(
            Code::MessageBodyTooLarge,
            format!("message body cannot exceed the max {max_body_bytes}"),
        ));
    }
    let mut p = MessageProperties::new();
    let mut user_bytes = 0usize;
    if m.user_properties.len() > MAX_USER_PROPERTIES {
        return Err(status(
            Code::MessagePropertiesTooLarge,
            format!("the number of user properties exceeds {MAX_USER_PROPERTIES}"),
        ));
    }
    // Sorted: the stored property order does not depend on the map's hashing.
    let mut user: Vec<(&String, &String)> = m.user_properties.iter().collect();
    user.sort();
    for (k, v) in user {
        if keys::is_system_key(k) || k.is_empty() {
            return Err(status(
                Code::IllegalMessagePropertyKey,
                format!("property is used by system: {k}"),
            ));
        }
        if has_control(k) || has_control(v) {
            return Err(status(
                Code::IllegalMessagePropertyKey,
                format!("the property {k} holds a control character"),
            ));
        }
        user_bytes += k.len() + v.len();
        // An empty value does not survive RocketMQ's property string (upstream's parser
        // drops it too): such a property is not stored.
        if !v.is_empty() {
            insert(&mut p, k, v)?;
        }
    }
    let tag = sp.tag.clone().unwrap_or_default();
    if !tag.is_empty() && (tag.trim().is_empty() || tag.contains('|') || has_control(&tag)) {
        return Err(status(
            Code::IllegalMessageTag,
            format!("tag {tag:?} is not allowed"),
        ));
    }
    user_bytes += tag.len();
    if !tag.is_empty() {
        insert(&mut p, keys::TAGS, &tag)?;
    }
    for k in &sp.keys {
        if k.trim().is_empty() || has_control(k) {
            return Err(status(
                Code::IllegalMessageKey,
                format!("key {k:?} is not allowed"),
            ));
        }
        user_bytes += k.len();
    }
    if !sp.keys.is_empty() {
        insert(&mut p, keys::KEYS, &sp.keys.join(" "))?;
    }
    if user_bytes > MAX_USER_PROPERTY_BYTES {
        return Err(status(
            Code::MessagePropertiesTooLarge,
            format!("user properties, tag and keys exceed {MAX_USER_PROPERTY_BYTES} bytes"),
        ));
    }
    if sp.message_id.trim().is_empty() {
        return Err(status(Code::IllegalMessageId, "message id cannot be empty"));
    }
    insert(&mut p, keys::UNIQ_KEY, &sp.message_id)?;
    let mut sys_flag = 0;
    if sp.message_type == MessageType::Transaction as i32 {
        sys_flag |= sysflag::TRANSACTION_PREPARED_TYPE;
        insert(&mut p, keys::TRAN_MSG, "true")?;
        if let Some(d) = &sp.orphaned_transaction_recovery_duration {
            let seconds = d.seconds;
            if !(0..=MAX_TRANSACTION_RECOVERY_S).contains(&seconds) {
                return Err(status(
                    Code::BadRequest,
                    format!("the transaction recovery time must be within 0..={MAX_TRANSACTION_RECOVERY_S} s"),
                ));
            }
            insert(
                &mut p,
                keys::CHECK_IMMUNITY_TIME_IN_SECONDS,
                &seconds.to_string(),
            )?;
        }
    }
    if sp.body_encoding == Encoding::Gzip as i32 {
        sys_flag |= sysflag::COMPRESSED_FLAG;
    }
    if let Some(t) = &sp.delivery_timestamp {
        let at = timestamp_ms(t);
        if at.saturating_sub(now) > MAX_DELAY_MS {
            return Err(status(
                Code::IllegalDeliveryTime,
                format!("the delivery time cannot be more than {MAX_DELAY_MS} ms ahead"),
            ));
        }
        insert(&mut p, keys::TIMER_DELIVER_MS, &at.to_string())?;
    }
    if let Some(attempt) = sp.delivery_attempt {
        insert(&mut p, keys::RECONSUME_TIME, &attempt.to_string())?;
    }
    insert(&mut p, keys::PGROUP, topic)?;
    let group = sp.message_group.clone().filter(|g| !g.is_empty());
    if let Some(g) = &group {
        if g.trim().is_empty() || g.len() >= MAX_MESSAGE_GROUP_BYTES || has_control(g) {
            return Err(status(
                Code::IllegalMessageGroup,
                format!("message group {g:?} is blank, holds a control character or is not under {MAX_MESSAGE_GROUP_BYTES} bytes"),
            ));
        }
        insert(&mut p, keys::SHARDING_KEY, g)?;
    }
    if let Some(tc) = sp.trace_context.as_deref().filter(|t| !t.is_empty()) {
        insert(&mut p, keys::TRACE_CONTEXT, tc)?;
    }
    let born_host = if sp.born_host.is_empty() {
        peer
    } else {
        &sp.born_host
    };
    insert(&mut p, keys::BORN_HOST, born_host)?;
    let born_ms = match &sp.born_timestamp {
        Some(t) if t.seconds > 0 => timestamp_ms(t),
        _ => now,
    };
    insert(&mut p, keys::BORN_TIMESTAMP, &born_ms.to_string())?;
    Ok(Outgoing {
        properties: p,
        body: m.body.clone(),
        born_ms,
        sys_flag,
        message_group: group,
    })
}

fn has_control(s: &str) -> bool {
    s.chars().any(char::is_control)
}

fn insert(p: &mut MessageProperties, k: &str, v: &str) -> Result<(), Status> {
    p.insert(k, v).map_err(|e| {
        status(
            Code::IllegalMessagePropertyKey,
            format!("property {k} cannot be stored: {e}"),
        )
    })
}

/// A stored message as the SDKs read it. `topic` is the topic the consumer asked for (a
/// message from a POP retry topic reports its original topic).
pub(crate) fn incoming(
    m: &MessageExt,
    topic: &Resource,
    receipt_handle: Option<String>,
) -> pb::Message {
    let props = &m.properties;
    let user_properties = props
        .iter()
        .filter(|(k, _)| !keys::is_system_key(k))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let message_type = match message_type_of(props) {
        "TRANSACTION" => MessageType::Transaction,
        "DELAY" => MessageType::Delay,
        "FIFO" => MessageType::Fifo,
        _ => MessageType::Normal,
    };
    let delivery_timestamp = props
        .get(keys::TIMER_DELAY_SEC)
        .and_then(|s| s.parse::<i64>().ok())
        .map(|s| now_ms().saturating_add(s.saturating_mul(1000)))
        .or_else(|| {
            props
                .get(keys::TIMER_DELIVER_MS)
                .and_then(|s| s.parse::<i64>().ok())
        })
        .map(timestamp);
    let dead_letter_queue = match (
        props.get(keys::DLQ_ORIGIN_TOPIC),
        props.get(keys::DLQ_ORIGIN_MESSAGE_ID),
    ) {
        (Some(t), Some(id)) => Some(pb::DeadLetterQueue {
            topic: t.to_string(),
            message_id: id.to_string(),
        }),
        _ => None,
    };
    let encoding = if m.sys_flag & sysflag::COMPRESSED_FLAG != 0 {
        Encoding::Gzip
    } else {
        Encoding::Identity
    };
    let system_properties = pb::SystemProperties {
        tag: props.tags().map(str::to_string),
        keys: props
            .get(keys::KEYS)
            .map(|k| {
                k.split(' ')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        message_id: m.msg_id.clone(),
        body_digest: Some(pb::Digest {
            r#type: DigestType::Md5 as i32,
            checksum: md5_upper_hex(&m.body),
        }),
        body_encoding: encoding as i32,
        message_type: message_type as i32,
        born_timestamp: Some(timestamp(m.born_timestamp_ms)),
        born_host: props
            .get(keys::BORN_HOST)
            .map_or_else(|| m.born_host.to_string(), str::to_string),
        store_timestamp: Some(timestamp(m.store_timestamp_ms)),
        store_host: m.store_host.to_string(),
        delivery_timestamp,
        receipt_handle,
        queue_id: m.queue_id,
        queue_offset: Some(m.queue_offset),
        invisible_duration: None,
        delivery_attempt: Some(m.reconsume_times.saturating_add(1)),
        message_group: props.get(keys::SHARDING_KEY).map(str::to_string),
        trace_context: props.get(keys::TRACE_CONTEXT).map(str::to_string),
        orphaned_transaction_recovery_duration: None,
        dead_letter_queue,
        lite_topic: None,
        priority: None,
    };
    pb::Message {
        topic: Some(topic.clone()),
        user_properties,
        system_properties: Some(system_properties),
        body: m.body.to_vec(),
    }
}

/// MD5 as upstream's `BinaryUtil.generateMd5`: upper-case hex. Every SDK checks it.
pub(crate) fn md5_upper_hex(body: &[u8]) -> String {
    use md5::{Digest, Md5};
    let digest = Md5::digest(body);
    let mut out = String::with_capacity(32);
    for b in digest {
        out.push_str(&format!("{b:02X}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(topic: &str) -> pb::Message {
        pb::Message {
            topic: Some(Resource {
                resource_namespace: String::new(),
                name: topic.into(),
            }),
            user_properties: [("color".to_string(), "red".to_string())].into(),
            system_properties: Some(pb::SystemProperties {
                tag: Some("TagA".into()),
                keys: vec!["k1".into(), "k2".into()],
                message_id: "01ABC".into(),
                message_group: Some("order-1".into()),
                delivery_timestamp: Some(timestamp(5_000)),
                ..Default::default()
            }),
            body: b"hello".to_vec(),
        }
    }

    #[test]
    fn a_v2_message_maps_to_upstream_properties() {
        let out = outgoing(&message("T"), "10.0.0.1:5000", 4 << 20, 1_000).unwrap();
        let p = &out.properties;
        assert_eq!(p.get(keys::TAGS), Some("TagA"));
        assert_eq!(p.get(keys::KEYS), Some("k1 k2"));
        assert_eq!(p.get(keys::UNIQ_KEY), Some("01ABC"));
        assert_eq!(p.get(keys::SHARDING_KEY), Some("order-1"));
        assert_eq!(p.get(keys::TIMER_DELIVER_MS), Some("5000"));
        assert_eq!(p.get(keys::PGROUP), Some("T"));
        assert_eq!(p.get(keys::BORN_HOST), Some("10.0.0.1:5000"));
        assert_eq!(p.get("color"), Some("red"));
        assert_eq!(out.message_group.as_deref(), Some("order-1"));
        assert_eq!(out.born_ms, 1_000);
        assert_eq!(message_type_of(p), "DELAY");
    }

    #[test]
    fn bad_messages_get_the_proxys_codes() {
        let code = |m: pb::Message| outgoing(&m, "h:1", 16, 0).unwrap_err().code;
        let mut m = message("T");
        m.body.clear();
        assert_eq!(code(m), Code::MessageBodyEmpty as i32);
        let mut m = message("T");
        m.body = vec![0; 17];
        assert_eq!(code(m), Code::MessageBodyTooLarge as i32);
        let mut m = message("T");
        m.user_properties.insert("UNIQ_KEY".into(), "x".into());
        assert_eq!(code(m), Code::IllegalMessagePropertyKey as i32);
        let mut m = message("T");
        m.system_properties.as_mut().unwrap().tag = Some("a|b".into());
        assert_eq!(code(m), Code::IllegalMessageTag as i32);
        let mut m = message("T");
        m.system_properties.as_mut().unwrap().message_id.clear();
        assert_eq!(code(m), Code::IllegalMessageId as i32);
        let mut m = message("T");
        m.system_properties.as_mut().unwrap().message_group = Some("g".repeat(64));
        assert_eq!(code(m), Code::IllegalMessageGroup as i32);
        let mut m = message("T");
        m.system_properties.as_mut().unwrap().delivery_timestamp =
            Some(timestamp(MAX_DELAY_MS + 1));
        assert_eq!(code(m), Code::IllegalDeliveryTime as i32);
        let mut m = message("T");
        m.system_properties.as_mut().unwrap().keys = vec![" ".into()];
        assert_eq!(code(m), Code::IllegalMessageKey as i32);
    }

    #[test]
    fn md5_is_upper_case_hex() {
        assert_eq!(md5_upper_hex(b""), "D41D8CD98F00B204E9800998ECF8427E");
    }

    #[test]
    fn timestamps_round_trip_in_ms() {
        assert_eq!(
            timestamp_ms(&timestamp(1_700_000_000_123)),
            1_700_000_000_123
        );
        assert_eq!(duration_ms(&duration(15_500)), 15_500);
    }
}
