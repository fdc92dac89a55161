//! The formats of POP consumption (features.md §f.2–f.3), sans-IO:
//!
//! - names: the POP retry topics (V1 `%RETRY%<group>_<topic>`, V2 `%RETRY%<group>+<topic>`),
//!   the revive topic and group, the order marker revive queue;
//! - the receipt handle a client acks with (`extraInfo`, the `POP_CK` property), and the
//!   `startOffsetInfo` / `msgOffsetInfo` / `orderCountInfo` strings of a POP answer;
//! - the checkpoint (`ck`), ack (`ack`) and batch-ack (`bAck`) bodies written to the revive
//!   topic, in fastjson's shape (short keys, sorted, nulls left out; the long names are
//!   read too), with the queries the revive service asks of a checkpoint.
//!
//! Byte-compatible with Apache RocketMQ 5.x, so a store moved between the two keeps its
//! in-flight POP state.

use std::collections::BTreeMap;
use std::fmt;

use crate::json::{self, read, BodyError, ObjectBuilder, Value};

/// Prefix of every retry topic.
pub const RETRY_TOPIC_PREFIX: &str = "%RETRY%";
/// The revive queue id an orderly POP answers with: no checkpoint is written for it.
pub const ORDER_REVIVE_QUEUE: i32 = 999;
/// Consumer group of the revive service's offsets in the revive topic.
pub const REVIVE_GROUP: &str = "CID_RMQ_SYS_REVIVE_GROUP";
/// Tags of the revive topic's messages.
pub const CK_TAG: &str = "ck";
pub const ACK_TAG: &str = "ack";
pub const BATCH_ACK_TAG: &str = "bAck";
/// Most messages one checkpoint covers (its bitmap is an int).
pub const MAX_CK_MESSAGES: usize = 32;

/// `topic@group@queueId`: upstream's POP lock key and polling key (queue -1 = any queue).
pub fn queue_key(topic: &str, group: &str, queue_id: i32) -> String {
    format!("{topic}@{group}@{queue_id}")
}

/// `rmq_sys_REVIVE_LOG_<brokerClusterName>`.
pub fn revive_topic(cluster: &str) -> String {
    format!("rmq_sys_REVIVE_LOG_{cluster}")
}

/// The retry topic of POP consumer `group` on `topic`: V2 (`+`) when `v2`, else V1 (`_`).
pub fn retry_topic(topic: &str, group: &str, v2: bool) -> String {
    let separator = if v2 { '+' } else { '_' };
    format!("{RETRY_TOPIC_PREFIX}{group}{separator}{topic}")
}

/// Which topic a popped message came from: the third field of a receipt handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum RetryKind {
    #[default]
    Normal,
    RetryV1,
    RetryV2,
}

impl RetryKind {
    /// The kind of a topic name (upstream's `ExtraInfoUtil.getRetry`).
    pub fn of_topic(topic: &str) -> Self {
        match topic.strip_prefix(RETRY_TOPIC_PREFIX) {
            Some(rest) if rest.contains('+') => Self::RetryV2,
            Some(_) => Self::RetryV1,
            None => Self::Normal,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "0",
            Self::RetryV1 => "1",
            Self::RetryV2 => "2",
        }
    }

    /// Reads a retry flag (`"0"`, `"1"`, `"2"`).
    pub fn parse(text: &str) -> Result<Self, PopFormatError> {
        match text {
            "0" => Ok(Self::Normal),
            "1" => Ok(Self::RetryV1),
            "2" => Ok(Self::RetryV2),
            _ => Err(PopFormatError(format!(
                "retry flag `{text}` is not 0, 1 or 2"
            ))),
        }
    }

    /// The topic a handle of this kind names, given the topic and group of the request.
    pub fn real_topic(self, topic: &str, group: &str) -> String {
        match self {
            Self::Normal => topic.to_string(),
            Self::RetryV1 => retry_topic(topic, group, false),
            Self::RetryV2 => retry_topic(topic, group, true),
        }
    }
}

/// A malformed receipt handle or offset-info string, with what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PopFormatError(pub String);

impl fmt::Display for PopFormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PopFormatError {}

/// The receipt handle (`extraInfo`): `ckStartOffset popTime invisibleTime reviveQid
/// retryFlag brokerName queueId [msgQueueOffset]`, space-separated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraInfo {
    /// Start offset of the checkpoint the message belongs to.
    pub ck_start_offset: i64,
    pub pop_time_ms: i64,
    pub invisible_time_ms: i64,
    pub revive_qid: i32,
    pub retry: RetryKind,
    pub broker_name: String,
    pub queue_id: i32,
    /// The message's own queue offset (clients since 4.9.3 send it).
    pub msg_queue_offset: Option<i64>,
}

impl ExtraInfo {
    /// Reads a handle; at least the first seven fields must be there.
    pub fn parse(text: &str) -> Result<Self, PopFormatError> {
        let fields: Vec<&str> = text.split(' ').collect();
        if fields.len() < 7 {
            return Err(PopFormatError(format!(
                "extraInfo `{text}` has {} fields, at least 7 expected \
                 (ckStartOffset popTime invisibleTime reviveQid retry brokerName queueId)",
                fields.len()
            )));
        }
        let number = |i: usize, name: &str| {
            fields[i].parse::<i64>().map_err(|_| {
                PopFormatError(format!(
                    "extraInfo `{text}`: {name} `{}` is not a number",
                    fields[i]
                ))
            })
        };
        let small = |i: usize, name: &str| {
            number(i, name).and_then(|n| {
                i32::try_from(n)
                    .map_err(|_| PopFormatError(format!("extraInfo `{text}`: {name} out of range")))
            })
        };
        Ok(Self {
            ck_start_offset: number(0, "ckStartOffset")?,
            pop_time_ms: number(1, "popTime")?,
            invisible_time_ms: number(2, "invisibleTime")?,
            revive_qid: small(3, "reviveQid")?,
            retry: RetryKind::parse(fields[4])?,
            broker_name: fields[5].to_string(),
            queue_id: small(6, "queueId")?,
            msg_queue_offset: if fields.len() > 7 {
                Some(number(7, "msgQueueOffset")?)
            } else {
                None
            },
        })
    }

    /// Whether the handle comes from an orderly POP.
    pub fn is_order(&self) -> bool {
        self.revive_qid == ORDER_REVIVE_QUEUE
    }
}

impl fmt::Display for ExtraInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {} {} {} {}",
            self.ck_start_offset,
            self.pop_time_ms,
            self.invisible_time_ms,
            self.revive_qid,
            self.retry.as_str(),
            self.broker_name,
            self.queue_id
        )?;
        if let Some(offset) = self.msg_queue_offset {
            write!(f, " {offset}")?;
        }
        Ok(())
    }
}

/// Appends `;` before every item but the first (the offset-info strings' separator).
fn item_start(out: &mut String) {
    if !out.is_empty() {
        out.push(';');
    }
}

/// Appends a `startOffsetInfo` item: `retry queueId startOffset`.
pub fn push_start_offset_info(out: &mut String, topic: &str, queue_id: i32, start_offset: i64) {
    item_start(out);
    let retry = RetryKind::of_topic(topic).as_str();
    out.push_str(&format!("{retry} {queue_id} {start_offset}"));
}

/// Appends a `msgOffsetInfo` item: `retry queueId off1,off2,...`.
pub fn push_msg_offset_info(out: &mut String, topic: &str, queue_id: i32, offsets: &[i64]) {
    item_start(out);
    let retry = RetryKind::of_topic(topic).as_str();
    let list: Vec<String> = offsets.iter().map(i64::to_string).collect();
    out.push_str(&format!("{retry} {queue_id} {}", list.join(",")));
}

/// Appends an `orderCountInfo` item for one message: `retry qo<queueId>%<offset> count`.
pub fn push_order_count_info(
    out: &mut String,
    topic: &str,
    queue_id: i32,
    queue_offset: i64,
    count: i32,
) {
    item_start(out);
    let retry = RetryKind::of_topic(topic).as_str();
    out.push_str(&format!("{retry} qo{queue_id}%{queue_offset} {count}"));
}

/// Appends the per-queue `orderCountInfo` item older clients read: `retry queueId count`.
pub fn push_queue_order_count_info(out: &mut String, topic: &str, queue_id: i32, count: i32) {
    item_start(out);
    let retry = RetryKind::of_topic(topic).as_str();
    out.push_str(&format!("{retry} {queue_id} {count}"));
}

/// Reads a `;`-joined info string into `"<retry>@<second field>" → third field`, as
/// upstream's parsers key it; a duplicate key or an item without three fields fails.
pub fn parse_offset_info(text: &str) -> Result<BTreeMap<String, String>, PopFormatError> {
    let mut out = BTreeMap::new();
    if text.is_empty() {
        return Ok(out);
    }
    for item in text.split(';') {
        let fields: Vec<&str> = item.split(' ').collect();
        if fields.len() != 3 {
            return Err(PopFormatError(format!(
                "offset info item `{item}` has {} fields, 3 expected",
                fields.len()
            )));
        }
        let key = format!("{}@{}", fields[0], fields[1]);
        if out.insert(key, fields[2].to_string()).is_some() {
            return Err(PopFormatError(format!(
                "offset info `{text}` names `{} {}` twice",
                fields[0], fields[1]
            )));
        }
    }
    Ok(out)
}

/// A checkpoint (`PopCheckPoint`): the messages one POP handed out from one queue, and
/// which of them were acked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PopCheckPoint {
    pub start_offset: i64,
    pub pop_time_ms: i64,
    pub invisible_time_ms: i64,
    /// Bit i set: message i acked.
    pub bit_map: i32,
    pub num: u8,
    pub queue_id: i32,
    /// The topic popped (a retry topic for messages popped from one).
    pub topic: String,
    pub group: String,
    /// Queue offset of this checkpoint in its revive queue (set by the revive scan).
    pub revive_offset: i64,
    /// Each message's queue offset minus `start_offset`; empty in old checkpoints, whose
    /// messages are consecutive.
    pub queue_offset_diff: Vec<i32>,
    pub broker_name: Option<String>,
    /// How many times the revive service re-put this checkpoint (a string upstream).
    pub re_put_times: Option<String>,
}

impl PopCheckPoint {
    pub fn revive_time_ms(&self) -> i64 {
        self.pop_time_ms.saturating_add(self.invisible_time_ms)
    }

    /// Index of the message at queue offset `ack_offset`, if this checkpoint covers it.
    pub fn index_of_ack(&self, ack_offset: i64) -> Option<usize> {
        let diff = ack_offset.checked_sub(self.start_offset)?;
        if diff < 0 {
            return None;
        }
        if self.queue_offset_diff.is_empty() {
            return (diff < i64::from(self.num)).then_some(diff as usize);
        }
        let diff = i32::try_from(diff).ok()?;
        self.queue_offset_diff.iter().position(|d| *d == diff)
    }

    /// Queue offset of message `index`.
    pub fn ack_offset_by_index(&self, index: usize) -> i64 {
        match self.queue_offset_diff.get(index) {
            Some(diff) => self.start_offset.saturating_add(i64::from(*diff)),
            None => self.start_offset.saturating_add(index as i64),
        }
    }

    pub fn is_acked(&self, index: usize) -> bool {
        index < MAX_CK_MESSAGES && self.bit_map & (1 << index) != 0
    }

    /// Marks the message at `ack_offset` acked; false when this checkpoint does not cover it.
    pub fn ack(&mut self, ack_offset: i64) -> bool {
        match self.index_of_ack(ack_offset) {
            Some(i) if i < MAX_CK_MESSAGES => {
                self.bit_map |= 1 << i;
                true
            }
            _ => false,
        }
    }

    /// Whether every message is acked.
    pub fn all_acked(&self) -> bool {
        (0..usize::from(self.num)).all(|i| self.is_acked(i))
    }

    /// Re-put count: 0 when absent, 127 when unreadable (upstream's `parseRePutTimes`).
    pub fn re_put_count(&self) -> i32 {
        match &self.re_put_times {
            None => 0,
            Some(text) => text.parse().unwrap_or(i32::from(i8::MAX)),
        }
    }

    /// The one-message checkpoint the revive service writes for `offset` when its retry
    /// copy could not be stored: same pop, re-put count plus one, and, once the original
    /// revive time has passed, the invisible time stretched by the back-off of its count
    /// (no ack can come for it any more; the new checkpoint only schedules another try).
    pub fn re_put_for(&self, offset: i64, now_ms: i64) -> PopCheckPoint {
        let count = self.re_put_count();
        let mut invisible_time_ms = self.invisible_time_ms;
        if self.revive_time_ms() <= now_ms {
            invisible_time_ms = invisible_time_ms.saturating_add(re_put_backoff_ms(count));
        }
        PopCheckPoint {
            start_offset: offset,
            pop_time_ms: self.pop_time_ms,
            invisible_time_ms,
            bit_map: 0,
            num: 1,
            queue_id: self.queue_id,
            topic: self.topic.clone(),
            group: self.group.clone(),
            revive_offset: 0,
            queue_offset_diff: vec![0],
            broker_name: self.broker_name.clone(),
            re_put_times: Some((count + 1).to_string()),
        }
    }

    /// The key the revive service joins checkpoints and acks on.
    pub fn merge_key(&self) -> String {
        merge_key(
            &self.topic,
            &self.group,
            self.queue_id,
            self.start_offset,
            self.pop_time_ms,
            self.broker_name.as_deref(),
        )
    }

    /// The body written to the revive topic.
    pub fn encode(&self) -> String {
        let diffs = Value::Array(
            self.queue_offset_diff
                .iter()
                .map(|d| Value::int(i64::from(*d)))
                .collect(),
        );
        ObjectBuilder::new()
            .field("bm", self.bit_map)
            .field_opt("bn", self.broker_name.as_deref())
            .field("c", self.group.as_str())
            .field_opt("d", (!self.queue_offset_diff.is_empty()).then_some(diffs))
            .field("it", self.invisible_time_ms)
            .field("n", i32::from(self.num))
            .field("pt", self.pop_time_ms)
            .field("q", self.queue_id)
            .field("ro", self.revive_offset)
            .field_opt("rp", self.re_put_times.as_deref())
            .field("so", self.start_offset)
            .field("t", self.topic.as_str())
            .build()
            .to_json()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = json::parse(body)?;
        if v.as_object().is_none() {
            return Err(BodyError::field("", "a PopCheckPoint object"));
        }
        let num = read::i32_or(&v, "n", "", 0)?;
        let num = u8::try_from(num)
            .ok()
            .filter(|n| usize::from(*n) <= MAX_CK_MESSAGES)
            .ok_or_else(|| BodyError::field("n", "a message count of at most 32"))?;
        let diffs = match v.get_present("d") {
            None => Vec::new(),
            Some(list) => list
                .as_array()
                .ok_or_else(|| BodyError::field("d", "an array"))?
                .iter()
                .map(|d| d.as_i32().ok_or_else(|| BodyError::field("d", "integers")))
                .collect::<Result<_, _>>()?,
        };
        Ok(Self {
            start_offset: read::i64_or(&v, "so", "", 0)?,
            pop_time_ms: read::i64_or(&v, "pt", "", 0)?,
            invisible_time_ms: read::i64_or(&v, "it", "", 0)?,
            bit_map: read::i32_or(&v, "bm", "", 0)?,
            num,
            queue_id: read::i32_or(&v, "q", "", 0)?,
            topic: read::opt_string(&v, "t", "")?.unwrap_or_default(),
            group: read::opt_string(&v, "c", "")?.unwrap_or_default(),
            revive_offset: read::i64_or(&v, "ro", "", 0)?,
            queue_offset_diff: diffs,
            broker_name: read::opt_string(&v, "bn", "")?,
            re_put_times: read::opt_string(&v, "rp", "")?,
        })
    }
}

/// `topic + group + queueId + startOffset + popTime + brokerName`, concatenated as
/// upstream does (no separators; a missing broker name reads "null").
pub fn merge_key(
    topic: &str,
    group: &str,
    queue_id: i32,
    start_offset: i64,
    pop_time_ms: i64,
    broker_name: Option<&str>,
) -> String {
    format!(
        "{topic}{group}{queue_id}{start_offset}{pop_time_ms}{}",
        broker_name.unwrap_or("null")
    )
}

/// An ack (`AckMsg`), or with `ack_offsets` a batch ack (`BatchAckMsg`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AckMsg {
    pub ack_offset: i64,
    /// Start offset of the checkpoint the acked messages belong to.
    pub start_offset: i64,
    pub group: String,
    pub topic: String,
    pub queue_id: i32,
    pub pop_time_ms: i64,
    pub broker_name: Option<String>,
    /// A batch ack's offsets (`aol`); empty for a single ack.
    pub ack_offsets: Vec<i64>,
}

/// The first present of a short key and its long alternate.
fn alt<'a>(v: &'a Value, short: &'a str, long: &'a str) -> &'a str {
    if v.get_present(short).is_some() {
        short
    } else {
        long
    }
}

impl AckMsg {
    pub fn merge_key(&self) -> String {
        merge_key(
            &self.topic,
            &self.group,
            self.queue_id,
            self.start_offset,
            self.pop_time_ms,
            self.broker_name.as_deref(),
        )
    }

    /// The offsets this ack acks: the batch's, else the single one.
    pub fn acked_offsets(&self) -> Vec<i64> {
        if self.ack_offsets.is_empty() {
            vec![self.ack_offset]
        } else {
            self.ack_offsets.clone()
        }
    }

    pub fn encode(&self) -> String {
        let mut b = ObjectBuilder::new().field("ao", self.ack_offset);
        if !self.ack_offsets.is_empty() {
            let list = Value::Array(self.ack_offsets.iter().map(|o| Value::int(*o)).collect());
            b = b.field("aol", list);
        }
        b.field_opt("bn", self.broker_name.as_deref())
            .field("c", self.group.as_str())
            .field("pt", self.pop_time_ms)
            .field("q", self.queue_id)
            .field("so", self.start_offset)
            .field("t", self.topic.as_str())
            .build()
            .to_json()
    }

    /// Reads an `ack` or `bAck` body, with short or long key names.
    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = json::parse(body)?;
        if v.as_object().is_none() {
            return Err(BodyError::field("", "an AckMsg object"));
        }
        let list_key = alt(&v, "aol", "ackOffsetList");
        let ack_offsets = match v.get_present(list_key) {
            None => Vec::new(),
            Some(list) => list
                .as_array()
                .ok_or_else(|| BodyError::field(list_key, "an array"))?
                .iter()
                .map(|o| {
                    o.as_i64()
                        .ok_or_else(|| BodyError::field(list_key, "integers"))
                })
                .collect::<Result<_, _>>()?,
        };
        Ok(Self {
            ack_offset: read::i64_or(&v, alt(&v, "ao", "ackOffset"), "", 0)?,
            start_offset: read::i64_or(&v, alt(&v, "so", "startOffset"), "", 0)?,
            group: read::opt_string(&v, alt(&v, "c", "consumerGroup"), "")?.unwrap_or_default(),
            topic: read::opt_string(&v, alt(&v, "t", "topic"), "")?.unwrap_or_default(),
            queue_id: read::i32_or(&v, alt(&v, "q", "queueId"), "", 0)?,
            pop_time_ms: read::i64_or(&v, alt(&v, "pt", "popTime"), "", 0)?,
            broker_name: read::opt_string(&v, alt(&v, "bn", "brokerName"), "")?,
            ack_offsets,
        })
    }
}

/// Messages one [`BatchAck`] may name: the bits of its set past this are refused.
pub const MAX_BATCH_ACK_BITS: usize = 1024;
/// Entries one BATCH_ACK_MESSAGE body may carry.
pub const MAX_BATCH_ACKS: usize = 4096;

/// One entry of a BATCH_ACK_MESSAGE body (`BatchAck`): the messages acked of one pop of one
/// queue, as a bit set over offsets from `start_offset`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BatchAck {
    pub group: String,
    /// The topic the consumer popped (the retry flag says whether it came from a retry
    /// topic).
    pub topic: String,
    pub retry: RetryKind,
    pub start_offset: i64,
    pub queue_id: i32,
    pub revive_qid: i32,
    pub pop_time_ms: i64,
    pub invisible_time_ms: i64,
    /// Indexes of the set bits: offset `start_offset + i` is acked.
    pub bits: Vec<usize>,
}

/// A BATCH_ACK_MESSAGE body (`BatchAckMessageRequestBody`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BatchAckBody {
    pub broker_name: Option<String>,
    pub acks: Vec<BatchAck>,
}

impl BatchAck {
    /// The entry for the pop a receipt handle names (of `topic` as the consumer knows it),
    /// acking the messages at `bits`.
    pub fn for_handle(group: &str, topic: &str, handle: &ExtraInfo, bits: Vec<usize>) -> Self {
        Self {
            group: group.to_string(),
            topic: topic.to_string(),
            retry: handle.retry,
            start_offset: handle.ck_start_offset,
            queue_id: handle.queue_id,
            revive_qid: handle.revive_qid,
            pop_time_ms: handle.pop_time_ms,
            invisible_time_ms: handle.invisible_time_ms,
            bits,
        }
    }

    /// The acked queue offsets.
    pub fn offsets(&self) -> impl Iterator<Item = i64> + '_ {
        self.bits
            .iter()
            .map(|&i| self.start_offset.saturating_add(i as i64))
    }

    fn decode(v: &Value, path: &str) -> Result<Self, BodyError> {
        let key = |short: &'static str, long: &'static str| alt(v, short, long);
        let retry_key = key("r", "retry");
        let retry = match v.get_present(retry_key) {
            None => RetryKind::Normal,
            Some(r) => r
                .key_text()
                .and_then(|t| RetryKind::parse(t).ok())
                .ok_or_else(|| {
                    BodyError::field(format!("{path}.{retry_key}"), "\"0\", \"1\" or \"2\"")
                })?,
        };
        let bits_key = key("b", "bitSet");
        Ok(Self {
            group: read::opt_string(v, key("c", "consumerGroup"), path)?.unwrap_or_default(),
            topic: read::opt_string(v, key("t", "topic"), path)?.unwrap_or_default(),
            retry,
            start_offset: read::i64_or(v, key("so", "startOffset"), path, 0)?,
            queue_id: read::i32_or(v, key("q", "queueId"), path, 0)?,
            revive_qid: read::i32_or(v, key("rq", "reviveQueueId"), path, 0)?,
            pop_time_ms: read::i64_or(v, key("pt", "popTime"), path, 0)?,
            invisible_time_ms: read::i64_or(v, key("it", "invisibleTime"), path, 0)?,
            bits: bit_set(v.get_present(bits_key)).ok_or_else(|| {
                BodyError::field(
                    format!("{path}.{bits_key}"),
                    "a bit set of at most 1024 bits (base64 or byte array)",
                )
            })?,
        })
    }

    /// fastjson's form (short names, sorted; the bit set as `BitSet.toByteArray` in base64).
    pub fn to_value(&self) -> Value {
        let mut bytes = Vec::new();
        for &i in &self.bits {
            if bytes.len() <= i / 8 {
                bytes.resize(i / 8 + 1, 0u8);
            }
            bytes[i / 8] |= 1 << (i % 8);
        }
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
        ObjectBuilder::new()
            .field("b", b64)
            .field("c", self.group.as_str())
            .field("it", self.invisible_time_ms)
            .field("pt", self.pop_time_ms)
            .field("q", self.queue_id)
            .field("r", self.retry.as_str())
            .field("rq", self.revive_qid)
            .field("so", self.start_offset)
            .field("t", self.topic.as_str())
            .build()
    }
}

/// `BitSet.valueOf(bytes)` of fastjson's byte-array form: a base64 string (what fastjson
/// writes) or an array of byte values; absent = empty. Bit `8k + j` is bit `j` of byte `k`.
fn bit_set(v: Option<&Value>) -> Option<Vec<usize>> {
    let bytes: Vec<u8> = match v {
        None => Vec::new(),
        Some(Value::String(s)) => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.decode(s).ok()?
        }
        Some(Value::Array(items)) => items
            .iter()
            .map(|b| b.as_i64().map(|n| n as u8))
            .collect::<Option<_>>()?,
        Some(_) => return None,
    };
    if bytes.len() * 8 > MAX_BATCH_ACK_BITS {
        return None;
    }
    Some(
        (0..bytes.len() * 8)
            .filter(|i| bytes[i / 8] & (1 << (i % 8)) != 0)
            .collect(),
    )
}

impl BatchAckBody {
    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = json::parse(body)?;
        if v.as_object().is_none() {
            return Err(BodyError::field("", "a BatchAckMessageRequestBody object"));
        }
        let acks = match v.get_present("acks") {
            None => Vec::new(),
            Some(list) => {
                let items = list
                    .as_array()
                    .ok_or_else(|| BodyError::field("acks", "an array"))?;
                if items.len() > MAX_BATCH_ACKS {
                    return Err(BodyError::field("acks", "at most 4096 entries"));
                }
                items
                    .iter()
                    .enumerate()
                    .map(|(i, a)| BatchAck::decode(a, &format!("acks[{i}]")))
                    .collect::<Result<_, _>>()?
            }
        };
        Ok(Self {
            broker_name: read::opt_string(&v, "brokerName", "")?,
            acks,
        })
    }

    pub fn encode(&self) -> String {
        ObjectBuilder::new()
            .field(
                "acks",
                Value::Array(self.acks.iter().map(BatchAck::to_value).collect()),
            )
            .field_opt("brokerName", self.broker_name.as_deref())
            .build()
            .to_json()
    }
}

/// UNIQ_KEY of a checkpoint message: `topic@queueId@startOffset@group@popTime@brokerName@ck`.
pub fn ck_uniq_key(ck: &PopCheckPoint) -> String {
    let (topic, queue_id, offset) = (&ck.topic, ck.queue_id, ck.start_offset);
    let broker = ck.broker_name.as_deref().unwrap_or("null");
    format!(
        "{topic}@{queue_id}@{offset}@{}@{}@{broker}@{CK_TAG}",
        ck.group, ck.pop_time_ms
    )
}

/// UNIQ_KEY of an ack message: `topic@queueId@ackOffset@group@popTime@brokerName@ack`.
pub fn ack_uniq_key(ack: &AckMsg) -> String {
    let (topic, queue_id, offset) = (&ack.topic, ack.queue_id, ack.ack_offset);
    let broker = ack.broker_name.as_deref().unwrap_or("null");
    format!(
        "{topic}@{queue_id}@{offset}@{}@{}@{broker}@{ACK_TAG}",
        ack.group, ack.pop_time_ms
    )
}

/// Seconds added to a re-put checkpoint's invisible time, by re-put count (the last one
/// repeats).
pub const CK_RE_PUT_BACKOFF_SECS: [i64; 17] = [
    10, 20, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200,
];

/// The invisible-time extension of a checkpoint re-put for the `re_put_count`th time.
pub fn re_put_backoff_ms(re_put_count: i32) -> i64 {
    let i = usize::try_from(re_put_count)
        .unwrap_or(0)
        .min(CK_RE_PUT_BACKOFF_SECS.len() - 1);
    CK_RE_PUT_BACKOFF_SECS[i] * 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_re_put_checkpoint_covers_one_message_and_backs_off_once_late() {
        let ck = PopCheckPoint {
            start_offset: 10,
            pop_time_ms: 1_000,
            invisible_time_ms: 5_000,
            num: 3,
            queue_offset_diff: vec![0, 1, 4],
            re_put_times: Some("2".into()),
            ..Default::default()
        };
        let early = ck.re_put_for(14, 2_000);
        assert_eq!(
            (early.start_offset, early.num, early.invisible_time_ms),
            (14, 1, 5_000)
        );
        assert_eq!(early.queue_offset_diff, vec![0]);
        assert_eq!(early.re_put_count(), 3);
        let late = ck.re_put_for(14, 6_000);
        assert_eq!(
            late.invisible_time_ms,
            5_000 + 30_000,
            "the third back-off step"
        );
    }

    #[test]
    fn batch_ack_bodies_read_fastjsons_bit_sets() {
        // Bits 0, 2 and 9: BitSet.toByteArray() = [0x05, 0x02] = "BQI=".
        let body = br#"{"acks":[{"b":"BQI=","c":"G","it":60000,"pt":1700000000000,"q":2,"r":"1","rq":3,"so":100,"t":"T"}],"brokerName":"broker-a"}"#;
        let parsed = BatchAckBody::decode(body).unwrap();
        assert_eq!(parsed.broker_name.as_deref(), Some("broker-a"));
        let a = &parsed.acks[0];
        assert_eq!(
            (a.retry, a.queue_id, a.revive_qid),
            (RetryKind::RetryV1, 2, 3)
        );
        assert_eq!(a.offsets().collect::<Vec<_>>(), vec![100, 102, 109]);
        assert_eq!(parsed.encode().as_bytes(), &body[..]);
        let edge = br#"{"acks":[{"b":"Aw==","so":9223372036854775807}]}"#;
        let parsed = BatchAckBody::decode(edge).unwrap();
        let at_the_edge: Vec<i64> = parsed.acks[0].offsets().collect();
        assert_eq!(
            at_the_edge,
            vec![i64::MAX, i64::MAX],
            "saturates, never overflows"
        );
        let long = br#"{"acks":[{"bitSet":[1],"consumerGroup":"G","startOffset":7,"topic":"T"}]}"#;
        let parsed = BatchAckBody::decode(long).unwrap();
        assert_eq!(parsed.acks[0].offsets().collect::<Vec<_>>(), vec![7]);
        for bad in [
            &br#"{"acks":[{"b":"not base64!"}]}"#[..],
            br#"{"acks":[{"r":"7"}]}"#,
            br#"{"acks":{}}"#,
            br#"[]"#,
        ] {
            assert!(
                BatchAckBody::decode(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn retry_topics_and_kinds() {
        assert_eq!(retry_topic("T", "G", false), "%RETRY%G_T");
        assert_eq!(retry_topic("T", "G", true), "%RETRY%G+T");
        assert_eq!(RetryKind::of_topic("T"), RetryKind::Normal);
        assert_eq!(RetryKind::of_topic("%RETRY%G_T"), RetryKind::RetryV1);
        assert_eq!(RetryKind::of_topic("%RETRY%G+T"), RetryKind::RetryV2);
        assert_eq!(RetryKind::RetryV1.real_topic("T", "G"), "%RETRY%G_T");
        assert_eq!(
            revive_topic("DefaultCluster"),
            "rmq_sys_REVIVE_LOG_DefaultCluster"
        );
    }

    #[test]
    fn extra_info_round_trips_with_and_without_the_message_offset() {
        let text = "100 1700000000000 60000 3 1 broker-a 2 105";
        let info = ExtraInfo::parse(text).unwrap();
        assert_eq!(info.ck_start_offset, 100);
        assert_eq!(info.pop_time_ms, 1_700_000_000_000);
        assert_eq!(info.invisible_time_ms, 60_000);
        assert_eq!(info.revive_qid, 3);
        assert_eq!(info.retry, RetryKind::RetryV1);
        assert_eq!(info.broker_name, "broker-a");
        assert_eq!(info.queue_id, 2);
        assert_eq!(info.msg_queue_offset, Some(105));
        assert_eq!(info.to_string(), text);
        let short = ExtraInfo::parse("100 1 2 999 0 b 0").unwrap();
        assert!(short.is_order());
        assert_eq!(short.to_string(), "100 1 2 999 0 b 0");
    }

    #[test]
    fn bad_extra_info_says_what_is_wrong() {
        let e = ExtraInfo::parse("1 2 3").unwrap_err();
        assert!(e.0.contains("3 fields"), "{e}");
        let e = ExtraInfo::parse("1 x 3 4 0 b 0").unwrap_err();
        assert!(e.0.contains("popTime"), "{e}");
        let e = ExtraInfo::parse("1 2 3 4 7 b 0").unwrap_err();
        assert!(e.0.contains("retry flag"), "{e}");
        let e = ExtraInfo::parse("1 2 3 99999999999 0 b 0").unwrap_err();
        assert!(e.0.contains("reviveQid"), "{e}");
    }

    #[test]
    fn offset_infos_are_built_and_read_as_upstream() {
        let mut start = String::new();
        push_start_offset_info(&mut start, "T", 0, 10);
        push_start_offset_info(&mut start, "%RETRY%G_T", 0, 3);
        assert_eq!(start, "0 0 10;1 0 3");
        let mut msgs = String::new();
        push_msg_offset_info(&mut msgs, "T", 1, &[10, 11, 14]);
        assert_eq!(msgs, "0 1 10,11,14");
        let mut counts = String::new();
        push_order_count_info(&mut counts, "T", 1, 10, 2);
        assert_eq!(counts, "0 qo1%10 2");
        let parsed = parse_offset_info(&start).unwrap();
        assert_eq!(parsed.get("0@0").map(String::as_str), Some("10"));
        assert_eq!(parsed.get("1@0").map(String::as_str), Some("3"));
        assert!(parse_offset_info("0 0 1;0 0 2").is_err());
        assert!(parse_offset_info("0 0").is_err());
        assert!(parse_offset_info("").unwrap().is_empty());
    }

    fn ck() -> PopCheckPoint {
        PopCheckPoint {
            start_offset: 100,
            pop_time_ms: 1_700_000_000_000,
            invisible_time_ms: 60_000,
            num: 3,
            queue_id: 1,
            topic: "TopicA".into(),
            group: "GroupA".into(),
            queue_offset_diff: vec![0, 1, 4],
            broker_name: Some("broker-a".into()),
            ..Default::default()
        }
    }

    #[test]
    fn checkpoint_body_is_fastjsons_and_reads_back() {
        let c = ck();
        let text = c.encode();
        assert_eq!(
            text,
            r#"{"bm":0,"bn":"broker-a","c":"GroupA","d":[0,1,4],"it":60000,"n":3,"pt":1700000000000,"q":1,"ro":0,"so":100,"t":"TopicA"}"#
        );
        assert_eq!(PopCheckPoint::decode(text.as_bytes()).unwrap(), c);
        // An old checkpoint: no diffs, consecutive offsets.
        let old = PopCheckPoint::decode(
            br#"{"so":5,"n":2,"pt":1,"it":2,"q":0,"t":"T","c":"G","bm":0,"ro":9,"rp":"2"}"#,
        )
        .unwrap();
        assert_eq!(old.index_of_ack(6), Some(1));
        assert_eq!(old.index_of_ack(7), None);
        assert_eq!(old.ack_offset_by_index(1), 6);
        assert_eq!(old.re_put_count(), 2);
        assert_eq!(old.revive_offset, 9);
        assert!(PopCheckPoint::decode(br#"{"n":40}"#).is_err());
        assert!(PopCheckPoint::decode(b"[1]").is_err());
    }

    #[test]
    fn checkpoint_bits_follow_the_offset_diffs() {
        let mut c = ck();
        assert_eq!(c.index_of_ack(104), Some(2));
        assert_eq!(c.index_of_ack(102), None);
        assert_eq!(c.index_of_ack(99), None);
        assert_eq!(c.ack_offset_by_index(2), 104);
        assert!(!c.ack(102));
        assert!(c.ack(100) && c.ack(104));
        assert!(!c.all_acked());
        assert!(c.ack(101));
        assert!(c.all_acked());
        assert_eq!(c.bit_map, 0b111);
        assert_eq!(
            PopCheckPoint {
                re_put_times: Some("x".into()),
                ..ck()
            }
            .re_put_count(),
            127
        );
    }

    #[test]
    fn ack_bodies_read_short_and_long_names_and_join_their_checkpoint() {
        let ack = AckMsg {
            ack_offset: 104,
            start_offset: 100,
            group: "GroupA".into(),
            topic: "TopicA".into(),
            queue_id: 1,
            pop_time_ms: 1_700_000_000_000,
            broker_name: Some("broker-a".into()),
            ack_offsets: Vec::new(),
        };
        let text = ack.encode();
        assert_eq!(
            text,
            r#"{"ao":104,"bn":"broker-a","c":"GroupA","pt":1700000000000,"q":1,"so":100,"t":"TopicA"}"#
        );
        assert_eq!(AckMsg::decode(text.as_bytes()).unwrap(), ack);
        assert_eq!(ack.merge_key(), ck().merge_key());
        let long = AckMsg::decode(
            br#"{"ackOffsetList":[100,101],"startOffset":100,"consumerGroup":"GroupA","topic":"TopicA","queueId":1,"popTime":1700000000000,"brokerName":"broker-a"}"#,
        )
        .unwrap();
        assert_eq!(long.acked_offsets(), vec![100, 101]);
        assert_eq!(long.merge_key(), ck().merge_key());
        assert_eq!(
            ack_uniq_key(&ack),
            "TopicA@1@104@GroupA@1700000000000@broker-a@ack"
        );
        assert_eq!(
            ck_uniq_key(&ck()),
            "TopicA@1@100@GroupA@1700000000000@broker-a@ck"
        );
    }

    #[test]
    fn re_put_backoff_grows_then_stays() {
        assert_eq!(re_put_backoff_ms(0), 10_000);
        assert_eq!(re_put_backoff_ms(3), 60_000);
        assert_eq!(re_put_backoff_ms(16), 7_200_000);
        assert_eq!(re_put_backoff_ms(100), 7_200_000);
        assert_eq!(re_put_backoff_ms(-1), 10_000);
    }
}
