//! Client-side message types: what a producer sends ([`Message`]), where it goes
//! ([`MessageQueue`]), what a send returns ([`SendResult`]) and what a consumer receives
//! ([`MessageExt`], decoded from the stored records of a pull/query body), plus the
//! process-wide client identity (client id, `UNIQ_KEY` generator).

use std::cell::RefCell;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use ringmq_remoting::message::properties::{keys, MessageProperties};
use ringmq_remoting::message::record::{decode_record, Decoded};
use ringmq_remoting::message::{compress, id, sysflag};

use crate::error::{ClientError, Result};

/// Largest body a client decompresses (the broker's default `maxMessageSize` × 16).
const MAX_DECOMPRESSED_BYTES: usize = 64 * 1024 * 1024;

/// One queue of a topic on one broker: the protocol's type, part of the client's API.
pub use ringmq_remoting::body::consumer::MessageQueue;

/// A message to send: topic, body, application flag and properties (tags, keys, ...).
#[derive(Debug, Clone, Default)]
pub struct Message {
    pub topic: String,
    pub body: Bytes,
    pub flag: i32,
    pub properties: MessageProperties,
}

impl Message {
    /// A message with `WAIT=true`, as every Java-constructed message carries.
    pub fn new(topic: impl Into<String>, body: impl Into<Bytes>) -> Self {
        let mut properties = MessageProperties::new();
        let _ = properties.insert(keys::WAIT, "true");
        Self {
            topic: topic.into(),
            body: body.into(),
            flag: 0,
            properties,
        }
    }

    /// Sets a property; keys or values containing the 0x01/0x02 separators are rejected.
    pub fn with_property(mut self, key: &str, value: &str) -> Result<Self> {
        self.properties
            .insert(key, value)
            .map_err(|e| ClientError::Invalid(format!("property {key}={value:?}: {e}")))?;
        Ok(self)
    }

    pub fn with_tags(self, tags: &str) -> Result<Self> {
        self.with_property(keys::TAGS, tags)
    }

    /// Business keys, space-separated as RocketMQ indexes them.
    pub fn with_keys(self, message_keys: &[&str]) -> Result<Self> {
        self.with_property(keys::KEYS, &message_keys.join(" "))
    }

    /// Delay level 1..=18 (`1s 5s 10s 30s 1m ...`).
    pub fn with_delay_level(self, level: i32) -> Result<Self> {
        self.with_property(keys::DELAY, &level.to_string())
    }

    pub fn tags(&self) -> Option<&str> {
        self.properties.get(keys::TAGS)
    }

    pub fn uniq_key(&self) -> Option<&str> {
        self.properties.get(keys::UNIQ_KEY)
    }
}

/// How the broker stored a send (codes 0, 10, 12, 11 are all stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendStatus {
    SendOk,
    FlushDiskTimeout,
    FlushSlaveTimeout,
    SlaveNotAvailable,
}

impl SendStatus {
    pub fn from_code(code: i32) -> Option<Self> {
        match code {
            0 => Some(Self::SendOk),
            10 => Some(Self::FlushDiskTimeout),
            12 => Some(Self::FlushSlaveTimeout),
            11 => Some(Self::SlaveNotAvailable),
            _ => None,
        }
    }

    /// The status as the Java client names it (`SendStatus.name()`).
    pub fn name(self) -> &'static str {
        match self {
            Self::SendOk => "SEND_OK",
            Self::FlushDiskTimeout => "FLUSH_DISK_TIMEOUT",
            Self::FlushSlaveTimeout => "FLUSH_SLAVE_TIMEOUT",
            Self::SlaveNotAvailable => "SLAVE_NOT_AVAILABLE",
        }
    }
}

/// The outcome of a successful send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendResult {
    pub status: SendStatus,
    /// The client id (`UNIQ_KEY`) of the message; for a batch the members' ids joined by `,`.
    pub msg_id: String,
    /// The broker's offsetMsgId (store host + commit-log offset); `,`-joined for a batch.
    pub offset_msg_id: String,
    pub queue: MessageQueue,
    pub queue_offset: i64,
    pub transaction_id: Option<String>,
    pub region_id: Option<String>,
    /// Address the message was stored on.
    pub broker_addr: String,
}

/// A consumed message: the stored record's fields plus the derived ids.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageExt {
    pub topic: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub commit_log_offset: i64,
    pub flag: i32,
    pub sys_flag: i32,
    pub born_timestamp_ms: i64,
    pub born_host: SocketAddr,
    pub store_timestamp_ms: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body_crc: i32,
    /// The plain body (decompressed when the record's sysFlag says so).
    pub body: Bytes,
    pub properties: MessageProperties,
    /// `UNIQ_KEY` when present, else the offsetMsgId (Java `MessageExt.getMsgId`).
    pub msg_id: String,
    pub offset_msg_id: String,
    /// The broker the record came from (filled by the consumer when known).
    pub broker_name: String,
}

impl MessageExt {
    pub fn tags(&self) -> Option<&str> {
        self.properties.get(keys::TAGS)
    }

    pub fn keys(&self) -> Vec<&str> {
        self.properties.keys().collect()
    }

    pub fn property(&self, key: &str) -> Option<&str> {
        self.properties.get(key)
    }

    pub fn queue(&self) -> MessageQueue {
        MessageQueue::new(self.topic.clone(), self.broker_name.clone(), self.queue_id)
    }
}

/// Decodes the concatenated stored records of a pull/query/view body. Like Java's client
/// it stops at the first record it cannot decode (logged), keeping the ones before it.
pub fn decode_records(body: &Bytes, broker_name: &str) -> Vec<MessageExt> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < body.len() {
        let rest = &body[pos..];
        let rec = match decode_record(rest, false) {
            Ok(Decoded::Message(rec)) => rec,
            Ok(Decoded::Blank { .. }) => break,
            Err(e) => {
                tracing::warn!(offset_in_body = pos, error = %e, "undecodable stored record; rest of the body skipped");
                break;
            }
        };
        let topic = match rec.topic() {
            Ok(t) => t.to_string(),
            Err(e) => {
                tracing::warn!(offset_in_body = pos, error = %e, "record topic is not UTF-8; rest skipped");
                break;
            }
        };
        let (body_bytes, sys_flag) = if sysflag::is_compressed(rec.sys_flag) {
            match compress::decompress_body(rec.sys_flag, rec.body, MAX_DECOMPRESSED_BYTES) {
                Ok(plain) => (
                    Bytes::from(plain.into_owned()),
                    sysflag::clear_compressed_flag(rec.sys_flag),
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot decompress a message body; delivered compressed");
                    (body.slice_ref(rec.body), rec.sys_flag)
                }
            }
        } else if rec.body.is_empty() {
            (Bytes::new(), rec.sys_flag)
        } else {
            (body.slice_ref(rec.body), rec.sys_flag)
        };
        let properties = MessageProperties::parse_bytes(rec.properties);
        let offset_msg_id = id::encode_offset_msg_id(&rec.store_host, rec.physical_offset);
        let msg_id = properties
            .get(keys::UNIQ_KEY)
            .map(str::to_string)
            .unwrap_or_else(|| offset_msg_id.clone());
        out.push(MessageExt {
            topic,
            queue_id: rec.queue_id,
            queue_offset: rec.queue_offset,
            commit_log_offset: rec.physical_offset,
            flag: rec.flag,
            sys_flag,
            born_timestamp_ms: rec.born_timestamp_ms,
            born_host: rec.born_host,
            store_timestamp_ms: rec.store_timestamp_ms,
            store_host: rec.store_host,
            reconsume_times: rec.reconsume_times,
            prepared_transaction_offset: rec.prepared_transaction_offset,
            body_crc: rec.body_crc,
            body: body_bytes,
            properties,
            msg_id,
            offset_msg_id,
            broker_name: broker_name.to_string(),
        });
        pos += rec.total_size;
    }
    out
}

/// The one wall clock (milliseconds since the Unix epoch), part of the client's API.
pub use ringmq_sync::now_ms;

/// The first non-loopback IPv4 address of this host (for client ids and `UNIQ_KEY`s),
/// found by asking the kernel which source address it would use; 127.0.0.1 otherwise.
pub fn local_ip() -> IpAddr {
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            s.connect("10.255.255.255:9")?;
            s.local_addr()
        })
        .map(|a| a.ip())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

thread_local! {
    static UNIQ: RefCell<Option<id::UniqKeyGenerator>> = const { RefCell::new(None) };
}

/// A new `UNIQ_KEY` (per-thread generator: ip, pid, a per-process hash, ms in month,
/// counter). Uses UTC for the month boundary; brokers treat the id as opaque text.
pub fn new_uniq_key() -> String {
    new_uniq_key_at(now_ms())
}

/// [`new_uniq_key`] for a wall-clock time the caller already read (`now` in ms).
pub fn new_uniq_key_at(now: i64) -> String {
    UNIQ.with(|slot| {
        let mut slot = slot.borrow_mut();
        let generator = slot.get_or_insert_with(|| {
            // Stands in for Java's class-loader hash: distinct per process and thread.
            let salt = (std::process::id() as i64 ^ now ^ thread_salt()) as i32;
            id::UniqKeyGenerator::new(local_ip(), std::process::id(), salt, 0, now)
        });
        generator.next_id(now)
    })
}

fn thread_salt() -> i64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::thread::current().id().hash(&mut h);
    h.finish() as i64
}

/// A Java-style client id: `ip@pid#nanos` (unique per client instance).
pub fn new_client_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{}@{}#{}", local_ip(), std::process::id(), nanos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use ringmq_remoting::message::record::{encode_record, RecordFields};

    #[test]
    fn message_queue_prints_and_serializes_as_before() {
        let mq = MessageQueue::new("T", "broker-a", 3);
        assert_eq!(mq.to_string(), "T@broker-a#3");
        assert_eq!(
            mq.to_json_value().to_json(),
            r#"{"brokerName":"broker-a","queueId":3,"topic":"T"}"#
        );
    }

    #[test]
    fn message_builder_sets_properties() {
        let m = Message::new("T", "hi")
            .with_tags("TagA")
            .unwrap()
            .with_keys(&["k1", "k2"])
            .unwrap();
        assert_eq!(m.tags(), Some("TagA"));
        assert_eq!(m.properties.get("KEYS"), Some("k1 k2"));
        assert_eq!(m.properties.get("WAIT"), Some("true"));
        assert!(Message::new("T", "x")
            .with_property("bad\u{1}key", "v")
            .is_err());
    }

    #[test]
    fn uniq_keys_are_distinct_hex() {
        let a = new_uniq_key();
        let b = new_uniq_key();
        assert_ne!(a, b);
        assert!(a.len() == 32 || a.len() == 56, "{a}");
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    }

    fn record(topic: &str, body: &[u8], props: &str, queue_offset: i64, physical: i64) -> BytesMut {
        let mut out = BytesMut::new();
        let fields = RecordFields {
            queue_id: 3,
            flag: 7,
            queue_offset,
            physical_offset: physical,
            sys_flag: 0,
            born_timestamp_ms: 1_700_000_000_000,
            born_host: "192.168.1.5:51234".parse().unwrap(),
            store_timestamp_ms: 1_700_000_000_123,
            store_host: "192.168.1.10:10911".parse().unwrap(),
            reconsume_times: 2,
            prepared_transaction_offset: 0,
            body,
            topic,
            properties: props.as_bytes(),
        };
        encode_record(&fields, &mut out).unwrap();
        out
    }

    #[test]
    fn decodes_concatenated_records_and_stops_at_garbage() {
        let mut body = record(
            "TopicTest",
            b"Hello",
            "UNIQ_KEY\u{1}ABC\u{2}TAGS\u{1}TagA\u{2}",
            5,
            0,
        );
        let first_len = body.len() as i64;
        body.extend_from_slice(&record("TopicTest", b"World", "", 6, first_len));
        body.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0]);
        let msgs = decode_records(&body.freeze(), "broker-a");
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0].topic, "TopicTest");
        assert_eq!(&msgs[0].body[..], b"Hello");
        assert_eq!(msgs[0].msg_id, "ABC");
        assert_eq!(msgs[0].tags(), Some("TagA"));
        assert_eq!(msgs[0].queue_offset, 5);
        assert_eq!(msgs[0].reconsume_times, 2);
        assert_eq!(msgs[0].store_timestamp_ms, 1_700_000_000_123);
        assert_eq!(msgs[0].offset_msg_id, "C0A8010A00002A9F0000000000000000");
        assert_eq!(
            msgs[1].msg_id, msgs[1].offset_msg_id,
            "no UNIQ_KEY: offsetMsgId is the id"
        );
        assert_eq!(&msgs[1].body[..], b"World");
        assert_eq!(msgs[1].commit_log_offset, first_len);
        assert_eq!(msgs[1].broker_name, "broker-a");
    }
}
