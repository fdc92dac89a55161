//! Producing headers (`headers.md` §1): `SEND_MESSAGE` (10, long names), `SEND_MESSAGE_V2`
//! (310) / `SEND_BATCH_MESSAGE` (320) (one-letter names `a`..`n`), the send response and
//! `CONSUMER_SEND_MSG_BACK` (36), plus the V1 <-> V2 conversion and the code-driven
//! choice between them.

use crate::codes::RequestCode;
use crate::command::ExtFields;
use crate::header::{read_field, CommandHeader, FieldValue, HeaderError, RpcFields};

command_header! {
    /// `SendMessageRequestHeader` (code 10, and 324 for request/reply).
    SendMessageRequestHeader + rpc {
        producer_group: String = "producerGroup";
        topic: String = "topic";
        /// Template topic for auto-creation; clients send `TBW102`.
        default_topic: String = "defaultTopic";
        default_topic_queue_nums: i32 = "defaultTopicQueueNums";
        /// Negative: the broker picks a writable queue.
        queue_id: i32 = "queueId";
        /// `MessageSysFlag` bits.
        sys_flag: i32 = "sysFlag";
        born_timestamp: i64 = "bornTimestamp";
        /// Application flag, stored as the record's FLAG.
        flag: i32 = "flag";
        /// Property string with 0x01/0x02 separators.
        properties: Option<String> = "properties";
        reconsume_times: Option<i32> = "reconsumeTimes";
        unit_mode: Option<bool> = "unitMode";
        /// `true`: the body is a batch. Decides single vs. batch, never the code.
        batch: Option<bool> = "batch";
        max_reconsume_times: Option<i32> = "maxReconsumeTimes";
    }
}

command_header! {
    /// `SendMessageRequestHeaderV2` (codes 310, 320, 325): the V1 fields under one-letter
    /// keys. It has no `+rpc` keys; the broker name travels in `n`.
    SendMessageRequestHeaderV2 {
        /// `a` = producerGroup.
        a: String = "a";
        /// `b` = topic.
        b: String = "b";
        /// `c` = defaultTopic.
        c: String = "c";
        /// `d` = defaultTopicQueueNums.
        d: i32 = "d";
        /// `e` = queueId.
        e: i32 = "e";
        /// `f` = sysFlag.
        f: i32 = "f";
        /// `g` = bornTimestamp.
        g: i64 = "g";
        /// `h` = flag.
        h: i32 = "h";
        /// `i` = properties.
        i: Option<String> = "i";
        /// `j` = reconsumeTimes.
        j: Option<i32> = "j";
        /// `k` = unitMode.
        k: Option<bool> = "k";
        /// `l` = maxReconsumeTimes.
        l: Option<i32> = "l";
        /// `m` = batch.
        m: Option<bool> = "m";
        /// `n` = brokerName.
        n: Option<String> = "n";
    }
}

impl From<SendMessageRequestHeaderV2> for SendMessageRequestHeader {
    fn from(v2: SendMessageRequestHeaderV2) -> Self {
        Self {
            producer_group: v2.a,
            topic: v2.b,
            default_topic: v2.c,
            default_topic_queue_nums: v2.d,
            queue_id: v2.e,
            sys_flag: v2.f,
            born_timestamp: v2.g,
            flag: v2.h,
            properties: v2.i,
            reconsume_times: v2.j,
            unit_mode: v2.k,
            max_reconsume_times: v2.l,
            batch: v2.m,
            rpc: RpcFields {
                broker_name: v2.n,
                ..RpcFields::default()
            },
        }
    }
}

impl From<SendMessageRequestHeader> for SendMessageRequestHeaderV2 {
    /// The other `+rpc` keys (`ns`, `nsd`, `oway`, `lo`) have no V2 slot and are dropped,
    /// as Java's conversion drops them.
    fn from(v1: SendMessageRequestHeader) -> Self {
        Self {
            a: v1.producer_group,
            b: v1.topic,
            c: v1.default_topic,
            d: v1.default_topic_queue_nums,
            e: v1.queue_id,
            f: v1.sys_flag,
            g: v1.born_timestamp,
            h: v1.flag,
            i: v1.properties,
            j: v1.reconsume_times,
            k: v1.unit_mode,
            l: v1.max_reconsume_times,
            m: v1.batch,
            n: v1.rpc.broker_name,
        }
    }
}

impl SendMessageRequestHeader {
    /// Whether the body is a batch (`batch`/`m` true); the code never decides this.
    pub fn is_batch(&self) -> bool {
        self.batch == Some(true)
    }

    /// Decodes the send header of a `code` 10/310/320/324/325 request into the V1 shape.
    ///
    /// The code picks the key set as Java's broker does (310, 320, 325 => one-letter keys;
    /// otherwise long names); when the picked set lacks its first required key but the
    /// other set has it, the other set is used, so a client that mixes code and names up
    /// is still served.
    pub fn decode_for_code(code: i32, fields: &ExtFields) -> Result<Self, HeaderError> {
        if Self::uses_v2_keys(code, fields) {
            SendMessageRequestHeaderV2::decode(fields).map(Self::from)
        } else {
            Self::decode(fields)
        }
    }

    /// Whether a send of `code` carrying `fields` is read with the one-letter (V2) keys:
    /// the code decides, unless only the other key set is there.
    pub fn uses_v2_keys(code: i32, fields: &ExtFields) -> bool {
        let v2_code = code == RequestCode::SendMessageV2 as i32
            || code == RequestCode::SendBatchMessage as i32
            || code == RequestCode::SendReplyMessageV2 as i32;
        if v2_code {
            fields.get("a").is_some() || fields.get("producerGroup").is_none()
        } else {
            fields.get("producerGroup").is_none() && fields.get("a").is_some()
        }
    }

    /// [`CommandHeader::check_required`] of the key set [`Self::decode_for_code`] reads:
    /// `a`..`h`, or their long names (every `@CFNotNull` field upstream).
    pub fn check_required_for_code(code: i32, fields: &ExtFields) -> Result<(), HeaderError> {
        if Self::uses_v2_keys(code, fields) {
            SendMessageRequestHeaderV2::check_required(fields)
        } else {
            Self::check_required(fields)
        }
    }
}

/// Wire keys of the send header's fields in [`SendMessageHeaderRef`] order: the long
/// names of code 10, then the one-letter names of 310/320/325 (`n` is read separately).
const V1_KEYS: [&str; 13] = [
    "producerGroup",
    "topic",
    "defaultTopic",
    "defaultTopicQueueNums",
    "queueId",
    "sysFlag",
    "bornTimestamp",
    "flag",
    "properties",
    "reconsumeTimes",
    "unitMode",
    "maxReconsumeTimes",
    "batch",
];
const V2_KEYS: [&str; 13] = [
    "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m",
];

/// A required string field, borrowed from `fields`.
pub(super) fn required_str<'a>(
    fields: &'a ExtFields,
    key: &'static str,
) -> Result<&'a str, HeaderError> {
    fields.get(key).ok_or(HeaderError::Missing { field: key })
}

/// A required number or boolean field, parsed in place.
pub(super) fn required_value<T: FieldValue>(
    fields: &ExtFields,
    key: &'static str,
) -> Result<T, HeaderError> {
    read_field::<T>(fields, key)?.ok_or(HeaderError::Missing { field: key })
}

/// The send request header of codes 10/310/320/324/325 as the broker reads it on every
/// produced message: strings borrowed from the request's extFields, numbers parsed in
/// place, nothing allocated. It reads the same keys with the same text rules as
/// [`SendMessageRequestHeader::decode_for_code`] (the owned form clients build), and its
/// [`SendMessageHeaderRef::to_owned_header`] equals that decode, apart from the `+rpc`
/// keys other than the broker name, which the broker does not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendMessageHeaderRef<'a> {
    pub producer_group: &'a str,
    pub topic: &'a str,
    pub default_topic: &'a str,
    pub default_topic_queue_nums: i32,
    pub queue_id: i32,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub flag: i32,
    pub properties: Option<&'a str>,
    pub reconsume_times: Option<i32>,
    pub unit_mode: Option<bool>,
    pub max_reconsume_times: Option<i32>,
    pub batch: Option<bool>,
    /// `bname` (long names) or `n` (one-letter names).
    pub broker_name: Option<&'a str>,
}

impl<'a> SendMessageHeaderRef<'a> {
    /// Decodes the send header of a `code` request, picking the key set as
    /// [`SendMessageRequestHeader::uses_v2_keys`] does. Required fields are the dispatch's
    /// check ([`crate::header::check_required_for_code`]); a missing one still comes back
    /// as [`HeaderError::Missing`] here rather than a made-up value.
    pub fn decode_for_code(code: i32, fields: &'a ExtFields) -> Result<Self, HeaderError> {
        let v2 = SendMessageRequestHeader::uses_v2_keys(code, fields);
        let keys = if v2 { &V2_KEYS } else { &V1_KEYS };
        Ok(Self {
            producer_group: required_str(fields, keys[0])?,
            topic: required_str(fields, keys[1])?,
            default_topic: required_str(fields, keys[2])?,
            default_topic_queue_nums: required_value(fields, keys[3])?,
            queue_id: required_value(fields, keys[4])?,
            sys_flag: required_value(fields, keys[5])?,
            born_timestamp: required_value(fields, keys[6])?,
            flag: required_value(fields, keys[7])?,
            properties: fields.get(keys[8]),
            reconsume_times: read_field(fields, keys[9])?,
            unit_mode: read_field(fields, keys[10])?,
            max_reconsume_times: read_field(fields, keys[11])?,
            batch: read_field(fields, keys[12])?,
            broker_name: fields.get(if v2 { "n" } else { "bname" }),
        })
    }

    /// Whether the body is a batch (`batch`/`m` true); the code never decides this.
    pub fn is_batch(&self) -> bool {
        self.batch == Some(true)
    }

    /// Whether the producer marked the topic unit mode (absent: no).
    pub fn is_unit_mode(&self) -> bool {
        self.unit_mode == Some(true)
    }

    /// The property string; absent reads as empty.
    pub fn properties_or_empty(&self) -> &'a str {
        self.properties.unwrap_or("")
    }

    /// How often the message was consumed and sent back; absent reads as 0.
    pub fn reconsume_times_or_zero(&self) -> i32 {
        self.reconsume_times.unwrap_or(0)
    }

    /// The owned header with the same values (the `+rpc` keys other than the broker name
    /// left empty).
    pub fn to_owned_header(&self) -> SendMessageRequestHeader {
        SendMessageRequestHeader {
            producer_group: self.producer_group.to_owned(),
            topic: self.topic.to_owned(),
            default_topic: self.default_topic.to_owned(),
            default_topic_queue_nums: self.default_topic_queue_nums,
            queue_id: self.queue_id,
            sys_flag: self.sys_flag,
            born_timestamp: self.born_timestamp,
            flag: self.flag,
            properties: self.properties.map(str::to_owned),
            reconsume_times: self.reconsume_times,
            unit_mode: self.unit_mode,
            batch: self.batch,
            max_reconsume_times: self.max_reconsume_times,
            rpc: RpcFields {
                broker_name: self.broker_name.map(str::to_owned),
                ..RpcFields::default()
            },
        }
    }
}

command_header! {
    /// `SendMessageResponseHeader`. Java's broker also adds `MSG_REGION` and `TRACE_ON`
    /// to the same map (and the Java client needs a non-empty extFields on success).
    SendMessageResponseHeader {
        /// offsetMsgId of the stored message; for a batch all of them joined by `,`.
        msg_id: String = "msgId";
        queue_id: i32 = "queueId";
        queue_offset: i64 = "queueOffset";
        /// The message's `UNIQ_KEY`.
        transaction_id: Option<String> = "transactionId";
        batch_uniq_id: Option<String> = "batchUniqId";
        recall_handle: Option<String> = "recallHandle";
    }
}

/// `MSG_REGION`: extra key the Java broker puts in every send response.
pub const MSG_REGION_KEY: &str = "MSG_REGION";
/// `TRACE_ON`: extra key the Java broker puts in every send response.
pub const TRACE_ON_KEY: &str = "TRACE_ON";

command_header! {
    /// `ConsumerSendMsgBackRequestHeader` (code 36).
    ConsumerSendMsgBackRequestHeader + rpc {
        /// Commit-log (physical) offset of the message.
        offset: i64 = "offset";
        group: String = "group";
        /// 0: broker chooses `3 + reconsumeTimes`; > 0 explicit; < 0 straight to DLQ.
        delay_level: i32 = "delayLevel";
        origin_msg_id: Option<String> = "originMsgId";
        origin_topic: Option<String> = "originTopic";
        unit_mode: bool = "unitMode" or false;
        max_reconsume_times: Option<i32> = "maxReconsumeTimes";
    }
}

command_header! {
    /// `RecallMessageRequestHeader` (code 370): cancel a not-yet-delivered timer message.
    RecallMessageRequestHeader + rpc {
        producer_group: Option<String> = "producerGroup";
        topic: String = "topic";
        recall_handle: String = "recallHandle";
    }
}

command_header! {
    /// `RecallMessageResponseHeader`.
    RecallMessageResponseHeader {
        msg_id: String = "msgId";
    }
}

command_header! {
    /// `ReplyMessageRequestHeader` (code 326, broker -> requester of a request/reply).
    ReplyMessageRequestHeader + rpc {
        producer_group: String = "producerGroup";
        topic: String = "topic";
        default_topic: String = "defaultTopic";
        default_topic_queue_nums: i32 = "defaultTopicQueueNums";
        queue_id: i32 = "queueId";
        sys_flag: i32 = "sysFlag";
        born_timestamp: i64 = "bornTimestamp";
        flag: i32 = "flag";
        properties: Option<String> = "properties";
        reconsume_times: Option<i32> = "reconsumeTimes";
        unit_mode: bool = "unitMode" or false;
        born_host: String = "bornHost";
        store_host: String = "storeHost";
        store_timestamp: i64 = "storeTimestamp";
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn java_sample() -> ExtFields {
        [
            ("a", "yyzGroup2"),
            ("b", "yyztest2"),
            ("c", "TBW102"),
            ("d", "4"),
            ("e", "0"),
            ("f", "0"),
            ("g", "1491978653614"),
            ("h", "0"),
            ("i", "TAGS\u{1}TAG\u{2}WAIT\u{1}true\u{2}KEYS\u{1}ffff\u{2}"),
            ("j", "0"),
            ("k", "false"),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn decodes_the_spec_capture_and_converts() {
        let v2 = SendMessageRequestHeaderV2::decode(&java_sample()).unwrap();
        assert_eq!(v2.g, 1_491_978_653_614);
        assert_eq!(v2.k, Some(false));
        assert_eq!(v2.m, None);
        let v1 = SendMessageRequestHeader::decode_for_code(310, &java_sample()).unwrap();
        assert_eq!(v1.producer_group, "yyzGroup2");
        assert_eq!(v1.topic, "yyztest2");
        assert_eq!(v1.default_topic_queue_nums, 4);
        assert!(!v1.is_batch());
        assert_eq!(SendMessageRequestHeaderV2::from(v1.clone()), v2);
        // The V1 encoding of the same header decodes for code 10.
        let long = v1.to_ext_fields();
        assert_eq!(long.get("bornTimestamp"), Some("1491978653614"));
        assert_eq!(
            SendMessageRequestHeader::decode_for_code(10, &long).unwrap(),
            v1
        );
    }

    #[test]
    fn cpp_batch_on_310_with_m_1() {
        let mut fields = java_sample();
        fields.insert("m", "1");
        fields.insert("n", "broker-a");
        let v1 = SendMessageRequestHeader::decode_for_code(310, &fields).unwrap();
        assert!(v1.is_batch());
        assert_eq!(v1.rpc.broker_name.as_deref(), Some("broker-a"));
    }

    #[test]
    fn code_and_key_set_mismatch_falls_back() {
        let v1 = SendMessageRequestHeader::decode_for_code(310, &java_sample()).unwrap();
        let long = v1.to_ext_fields();
        assert_eq!(
            SendMessageRequestHeader::decode_for_code(310, &long).unwrap(),
            v1
        );
        assert_eq!(
            SendMessageRequestHeader::decode_for_code(10, &java_sample()).unwrap(),
            v1
        );
        let empty = ExtFields::new();
        assert_eq!(
            SendMessageRequestHeader::decode_for_code(310, &empty),
            Err(HeaderError::Missing { field: "a" })
        );
        assert_eq!(
            SendMessageRequestHeader::decode_for_code(10, &empty),
            Err(HeaderError::Missing {
                field: "producerGroup"
            })
        );
    }

    /// Fields drawn from the V1 table (with `+rpc` keys), the V2 table, or both, then some
    /// keys removed or replaced by junk, so missing and malformed fields are covered too.
    fn sampled_send_fields(bytes: &[u8], tables: u8, drop_mask: u16, junk: u8) -> ExtFields {
        use crate::header::testing::{sample_fields, SampleSource};
        let mut src = SampleSource::new(bytes);
        let mut fields = ExtFields::new();
        if tables & 1 != 0 {
            sample_fields(&mut src, SendMessageRequestHeader::FIELDS, &mut fields);
            sample_fields(&mut src, RpcFields::FIELDS, &mut fields);
        }
        if tables & 2 != 0 {
            sample_fields(&mut src, SendMessageRequestHeaderV2::FIELDS, &mut fields);
        }
        for (bit, (v1, v2)) in V1_KEYS.iter().zip(V2_KEYS.iter()).enumerate() {
            if drop_mask & (1 << bit) != 0 {
                fields.remove(v1);
                fields.remove(v2);
            }
        }
        if junk != 0 {
            let key = V2_KEYS[usize::from(junk) % V2_KEYS.len()];
            fields.insert(key, "x1");
            fields.insert(V1_KEYS[usize::from(junk) % V1_KEYS.len()], "x1");
        }
        fields
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The borrowed decoder the broker runs gives what the owned typed header gives,
        /// for every send code and either key set, errors included.
        #[test]
        fn borrowed_decode_equals_owned_decode(
            bytes in prop::collection::vec(any::<u8>(), 0..256),
            tables in 1u8..4,
            code in prop::sample::select(vec![10, 310, 320, 324, 325]),
            drop_mask in any::<u16>().prop_map(|m| if m % 4 == 0 { m } else { 0 }),
            junk in any::<u8>().prop_map(|j| if j % 5 == 0 { j } else { 0 }),
        ) {
            let fields = sampled_send_fields(&bytes, tables, drop_mask, junk);
            let borrowed = SendMessageHeaderRef::decode_for_code(code, &fields)
                .map(|h| h.to_owned_header());
            let owned = SendMessageRequestHeader::decode_for_code(code, &fields).map(|h| {
                SendMessageRequestHeader {
                    rpc: RpcFields { broker_name: h.rpc.broker_name.clone(), ..RpcFields::default() },
                    ..h
                }
            });
            prop_assert_eq!(borrowed, owned);
            prop_assert!(crate::header::testing::check_borrowed(&fields).is_ok());
        }
    }

    #[test]
    fn borrowed_decode_reads_the_spec_capture_without_copies() {
        let fields = java_sample();
        let header = SendMessageHeaderRef::decode_for_code(310, &fields).unwrap();
        assert_eq!(header.topic, "yyztest2");
        assert_eq!(header.born_timestamp, 1_491_978_653_614);
        assert!(!header.is_unit_mode());
        assert!(!header.is_batch());
        assert_eq!(header.reconsume_times_or_zero(), 0);
        assert!(header.properties_or_empty().starts_with("TAGS\u{1}"));
        // The strings point into the extFields' own text.
        assert_eq!(header.topic.as_ptr(), fields.get("b").unwrap().as_ptr());
        assert_eq!(
            header.to_owned_header(),
            SendMessageRequestHeader::decode_for_code(310, &fields).unwrap()
        );
        assert_eq!(
            SendMessageHeaderRef::decode_for_code(10, &ExtFields::new()),
            Err(HeaderError::Missing {
                field: "producerGroup"
            })
        );
    }

    #[test]
    fn go_sends_empty_properties() {
        let mut fields = SendMessageRequestHeader::decode_for_code(310, &java_sample())
            .unwrap()
            .to_ext_fields();
        fields.insert("properties", "");
        fields.insert("reconsumeTimes", "");
        let got = SendMessageRequestHeader::decode(&fields).unwrap();
        assert_eq!(got.properties.as_deref(), Some(""));
        assert_eq!(got.reconsume_times, None);
    }
}
