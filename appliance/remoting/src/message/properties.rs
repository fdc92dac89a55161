//! The message property string (`message-format.md` §1, §2): `key 0x01 value 0x02 …`.
//!
//! Owns the exact property key constants ([`keys`]), the decoding rule of Java
//! `string2messageProperties` (as a borrowing iterator, a single-key lookup and an owned,
//! order-preserving map), encoding, and the size checks the broker applies before it
//! stores a message. Everything here is pure and total: bad input gives a typed error.

use std::fmt;
use std::str::FromStr;

/// Separator between a key and its value.
pub const NAME_VALUE_SEPARATOR: u8 = 0x01;
/// Terminator after every pair, the last one included.
pub const PROPERTY_SEPARATOR: u8 = 0x02;
/// Upper bound of a property string, both as UTF-16 units in the send header (checked by
/// the send processor, `MESSAGE_ILLEGAL`) and as UTF-8 bytes in the stored record (the
/// int16 PROPERTIESLENGTH field, `PROPERTIES_SIZE_EXCEEDED`).
pub const MAX_PROPERTIES_LEN: usize = i16::MAX as usize;

/// Property key strings exactly as `MessageConst` spells them. Constant names follow the
/// key text where it is a valid identifier, else the Java constant name.
pub mod keys {
    // §2.1 set by producers / applications.
    /// Business keys, separated by [`KEY_SEPARATOR`]; indexed for QUERY_MESSAGE.
    pub const KEYS: &str = "KEYS";
    /// The tag; its whole value is hashed into the consume queue's tagsCode.
    pub const TAGS: &str = "TAGS";
    /// `true`/`false`: whether the producer waits for flush/replication.
    pub const WAIT: &str = "WAIT";
    /// Delay level 1..=18 (0 or absent: no delay).
    pub const DELAY: &str = "DELAY";
    /// Client-generated message id (what applications call msgId).
    pub const UNIQ_KEY: &str = "UNIQ_KEY";
    /// `true` on transactional half messages.
    pub const TRAN_MSG: &str = "TRAN_MSG";
    /// Producer group of a transactional message.
    pub const PGROUP: &str = "PGROUP";
    pub const CHECK_IMMUNITY_TIME_IN_SECONDS: &str = "CHECK_IMMUNITY_TIME_IN_SECONDS";
    pub const BUYER_ID: &str = "BUYER_ID";
    pub const INSTANCE_ID: &str = "INSTANCE_ID";
    /// Ordering key (5.x FIFO / proxy).
    pub const SHARDING_KEY: &str = "__SHARDINGKEY";
    /// Absolute delivery time, epoch ms (5.x timer messages).
    pub const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
    /// Relative delay, seconds.
    pub const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
    /// Relative delay, milliseconds.
    pub const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
    /// Legacy Aliyun start-delivery time; not interpreted by open-source brokers.
    pub const START_DELIVER_TIME: &str = "__STARTDELIVERTIME";
    /// `reply` on request/reply reply messages.
    pub const MSG_TYPE: &str = "MSG_TYPE";
    pub const CORRELATION_ID: &str = "CORRELATION_ID";
    pub const REPLY_TO_CLIENT: &str = "REPLY_TO_CLIENT";
    pub const TTL: &str = "TTL";
    pub const ARRIVE_TIME: &str = "ARRIVE_TIME";
    pub const PUSH_REPLY_TIME: &str = "PUSH_REPLY_TIME";
    pub const TRACE_CONTEXT: &str = "TRACE_CONTEXT";
    /// Proxy: the original producer address.
    pub const BORN_HOST: &str = "__BORNHOST";
    /// Proxy: the original born timestamp.
    pub const BORN_TIMESTAMP: &str = "BORN_TIMESTAMP";

    // §2.2 delay / timer.
    /// Original topic while the record sits in a schedule/timer/half topic.
    pub const REAL_TOPIC: &str = "REAL_TOPIC";
    /// Original queue id, decimal.
    pub const REAL_QID: &str = "REAL_QID";
    pub const TIMER_OUT_MS: &str = "TIMER_OUT_MS";
    pub const TIMER_ENQUEUE_MS: &str = "TIMER_ENQUEUE_MS";
    pub const TIMER_DEQUEUE_MS: &str = "TIMER_DEQUEUE_MS";
    pub const TIMER_ROLL_TIMES: &str = "TIMER_ROLL_TIMES";
    pub const TIMER_DEL_UNIQKEY: &str = "TIMER_DEL_UNIQKEY";
    pub const TIMER_DELAY_LEVEL: &str = "TIMER_DELAY_LEVEL";

    // §2.3 retry, DLQ, consumption.
    /// Original topic of a message living in `%RETRY%group`.
    pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
    /// Id of the very first delivery.
    pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
    pub const RECONSUME_TIME: &str = "RECONSUME_TIME";
    pub const MAX_RECONSUME_TIMES: &str = "MAX_RECONSUME_TIMES";
    pub const CONSUME_START_TIME: &str = "CONSUME_START_TIME";
    pub const MIN_OFFSET: &str = "MIN_OFFSET";
    pub const MAX_OFFSET: &str = "MAX_OFFSET";
    pub const DLQ_ORIGIN_TOPIC: &str = "DLQ_ORIGIN_TOPIC";
    pub const DLQ_ORIGIN_MESSAGE_ID: &str = "DLQ_ORIGIN_MESSAGE_ID";
    pub const TRANSFER_FLAG: &str = "TRANSFER_FLAG";
    pub const CORRECTION_FLAG: &str = "CORRECTION_FLAG";
    pub const MQ2_FLAG: &str = "MQ2_FLAG";

    // §2.4 transactions.
    pub const TRAN_PREPARED_QUEUE_OFFSET: &str = "TRAN_PREPARED_QUEUE_OFFSET";
    pub const TRANSACTION_CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";
    /// Set by the broker on half messages to their UNIQ_KEY.
    pub const TRANSACTION_ID: &str = "__transactionId__";

    // §2.5 POP.
    /// Receipt handle (space-separated fields).
    pub const POP_CK: &str = "POP_CK";
    pub const POP_CK_OFFSET: &str = "POP_CK_OFFSET";
    pub const FIRST_POP_TIME: &str = "1ST_POP_TIME";

    // §2.6 broker-added / store-internal.
    /// Broker cluster name, added to every single message the broker stores.
    pub const CLUSTER: &str = "CLUSTER";
    pub const MSG_REGION: &str = "MSG_REGION";
    pub const TRACE_ON: &str = "TRACE_ON";
    /// Optional whole-record CRC (`enabledAppendPropCRC`).
    pub const CRC32: &str = "__CRC32#";
    pub const INNER_MULTI_DISPATCH: &str = "INNER_MULTI_DISPATCH";
    pub const INNER_MULTI_QUEUE_OFFSET: &str = "INNER_MULTI_QUEUE_OFFSET";
    pub const INNER_NUM: &str = "INNER_NUM";
    pub const INNER_BASE: &str = "INNER_BASE";
    pub const DUP_INFO: &str = "DUP_INFO";
    pub const EXTEND_UNIQ_INFO: &str = "EXTEND_UNIQ_INFO";
    pub const FORWARD_QUEUE_ID: &str = "PROPERTY_FORWARD_QUEUE_ID";
    pub const REDIRECT: &str = "REDIRECT";
    /// Prefix of client-local properties that are never stored.
    pub const TRANSIENT_PREFIX: &str = "__RMQ.TRANSIENT.";
    pub const TRANSIENT_TOPIC_CONFIG: &str = "__RMQ.TRANSIENT.TOPIC_SYS_FLAG";
    pub const TRANSIENT_GROUP_CONFIG: &str = "__RMQ.TRANSIENT.GROUP_SYS_FLAG";

    /// Separator between several business keys in [`KEYS`].
    pub const KEY_SEPARATOR: &str = " ";

    /// `MessageConst.STRING_HASH_SET`: names the Java client refuses as user properties.
    pub const SYSTEM_KEYS: &[&str] = &[
        TRACE_ON,
        MSG_REGION,
        KEYS,
        TAGS,
        WAIT,
        DELAY,
        RETRY_TOPIC,
        REAL_TOPIC,
        REAL_QID,
        TRAN_MSG,
        PGROUP,
        MIN_OFFSET,
        MAX_OFFSET,
        BUYER_ID,
        ORIGIN_MESSAGE_ID,
        TRANSFER_FLAG,
        CORRECTION_FLAG,
        MQ2_FLAG,
        RECONSUME_TIME,
        UNIQ_KEY,
        MAX_RECONSUME_TIMES,
        CONSUME_START_TIME,
        POP_CK,
        POP_CK_OFFSET,
        FIRST_POP_TIME,
        TRAN_PREPARED_QUEUE_OFFSET,
        DUP_INFO,
        EXTEND_UNIQ_INFO,
        INSTANCE_ID,
        CORRELATION_ID,
        REPLY_TO_CLIENT,
        TTL,
        ARRIVE_TIME,
        PUSH_REPLY_TIME,
        CLUSTER,
        MSG_TYPE,
        INNER_MULTI_QUEUE_OFFSET,
        TIMER_DELAY_MS,
        TIMER_DELAY_SEC,
        TIMER_DELIVER_MS,
        TIMER_ENQUEUE_MS,
        TIMER_DEQUEUE_MS,
        TIMER_ROLL_TIMES,
        TIMER_OUT_MS,
        TIMER_DEL_UNIQKEY,
        TIMER_DELAY_LEVEL,
        BORN_HOST,
        BORN_TIMESTAMP,
        DLQ_ORIGIN_TOPIC,
        DLQ_ORIGIN_MESSAGE_ID,
        CRC32,
    ];

    /// Whether `key` is a reserved system property name.
    pub fn is_system_key(key: &str) -> bool {
        SYSTEM_KEYS.contains(&key)
    }

    /// Whether `key` is client-local and must never be stored.
    pub fn is_transient_key(key: &str) -> bool {
        key.starts_with(TRANSIENT_PREFIX)
    }
}

/// Why a property string or entry was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PropertyError {
    /// The header `properties` string is longer than 32 767 UTF-16 units; the broker
    /// answers `MESSAGE_ILLEGAL`.
    HeaderTooLong { utf16_units: usize },
    /// The encoded property block exceeds the int16 PROPERTIESLENGTH field; the store
    /// reports `PROPERTIES_SIZE_EXCEEDED` (sent to the client as `MESSAGE_ILLEGAL`).
    StoredTooLong { len_bytes: usize },
    /// An entry with an empty key cannot be encoded (it would vanish on decode).
    EmptyKey,
    /// An entry with an empty value would vanish on decode (Java drops such pieces).
    EmptyValue { key: String },
    /// A key or value contains a separator byte, which would corrupt the string.
    ForbiddenChar {
        key: String,
        in_value: bool,
        byte: u8,
    },
    /// A property that must be a number is not one (e.g. `DELAY=abc`).
    NotANumber { key: String, value: String },
}

impl fmt::Display for PropertyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::HeaderTooLong { utf16_units } => write!(
                f,
                "message properties are {utf16_units} chars long, more than {MAX_PROPERTIES_LEN}; \
                 send fewer or shorter properties"
            ),
            Self::StoredTooLong { len_bytes } => write!(
                f,
                "encoded message properties are {len_bytes} bytes, more than the {MAX_PROPERTIES_LEN} \
                 a stored record can hold"
            ),
            Self::EmptyKey => write!(f, "message property with an empty name"),
            Self::EmptyValue { key } => write!(
                f,
                "message property {key:?} has an empty value, which RocketMQ cannot carry"
            ),
            Self::ForbiddenChar { key, in_value, byte } => write!(
                f,
                "message property {key:?} contains the separator byte 0x{byte:02x} in its {}",
                if *in_value { "value" } else { "name" }
            ),
            Self::NotANumber { key, value } => {
                write!(f, "message property {key}={value:?} is not a valid number")
            }
        }
    }
}

impl std::error::Error for PropertyError {}

/// Borrowing iterator over the `(key, value)` pairs of a property string in bytes,
/// applying Java's decoding rule: split on 0x02; within a piece the first 0x01 splits
/// key from value; keep the piece only if both are non-empty (so a value may contain
/// 0x01); a final piece without trailing 0x02 is accepted. Duplicates are all yielded,
/// in order — the last one is the one Java keeps.
#[derive(Debug, Clone)]
pub struct PropertyIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for PropertyIter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        // Each byte is looked at once: the first separator of either kind decides whether
        // the piece has a name (0x01 first) or is skipped whole (0x02 first, or none).
        // This runs for every stored record (dispatch reads its tags and keys).
        while !self.rest.is_empty() {
            let rest = self.rest;
            let Some(at) = memchr::memchr2(NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, rest) else {
                self.rest = &rest[rest.len()..];
                return None;
            };
            if rest[at] == PROPERTY_SEPARATOR {
                self.rest = &rest[at + 1..];
                continue;
            }
            let (key, after) = (&rest[..at], &rest[at + 1..]);
            let (value, next) = match memchr::memchr(PROPERTY_SEPARATOR, after) {
                Some(end) => (&after[..end], &after[end + 1..]),
                None => (after, &after[after.len()..]),
            };
            self.rest = next;
            if !key.is_empty() && !value.is_empty() {
                return Some((key, value));
            }
        }
        None
    }
}

/// Iterates the pairs of a property string given as bytes (e.g. a stored record's or
/// a batch item's property block).
pub fn iter_bytes(properties: &[u8]) -> PropertyIter<'_> {
    PropertyIter { rest: properties }
}

/// Iterates the pairs of a property string. The separators are ASCII, so every split
/// point is a char boundary and the pieces stay `&str`.
pub fn iter(properties: &str) -> impl Iterator<Item = (&str, &str)> + '_ {
    iter_bytes(properties.as_bytes()).map(|(k, v)| {
        // SAFETY: both slices are cut from a valid `&str` only at its ends or next to the
        // ASCII separators 0x01 and 0x02. An ASCII byte is never part of a multi-byte
        // sequence, so every cut is a char boundary and each slice is valid UTF-8.
        unsafe {
            (
                std::str::from_utf8_unchecked(k),
                std::str::from_utf8_unchecked(v),
            )
        }
    })
}

/// The value of `key` (the last occurrence wins, like Java's map), without allocating.
pub fn find<'a>(properties: &'a str, key: &str) -> Option<&'a str> {
    iter(properties)
        .filter(|(k, _)| *k == key)
        .map(|(_, v)| v)
        .last()
}

/// [`find`] over bytes.
pub fn find_bytes<'a>(properties: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    iter_bytes(properties)
        .filter(|(k, _)| *k == key)
        .map(|(_, v)| v)
        .last()
}

/// The send processor's check of the header `properties` string: at most 32 767 UTF-16
/// units (Java `String.length()`), else `MESSAGE_ILLEGAL`.
pub fn check_header_properties(properties: &str) -> Result<(), PropertyError> {
    // UTF-16 length never exceeds UTF-8 length, so short strings need no counting.
    if properties.len() <= MAX_PROPERTIES_LEN {
        return Ok(());
    }
    let utf16_units = properties.encode_utf16().count();
    if utf16_units > MAX_PROPERTIES_LEN {
        return Err(PropertyError::HeaderTooLong { utf16_units });
    }
    Ok(())
}

/// The store's check of the encoded property block length (bytes, after any CRC
/// reserve the store adds), bounded by the int16 PROPERTIESLENGTH field.
pub fn check_stored_len(len_bytes: usize) -> Result<(), PropertyError> {
    if len_bytes > MAX_PROPERTIES_LEN {
        return Err(PropertyError::StoredTooLong { len_bytes });
    }
    Ok(())
}

/// Checks that one entry survives an encode/decode round trip: non-empty key and value,
/// no 0x01/0x02 in either (`message-format.md` §1).
pub fn validate_entry(key: &str, value: &str) -> Result<(), PropertyError> {
    if key.is_empty() {
        return Err(PropertyError::EmptyKey);
    }
    if value.is_empty() {
        return Err(PropertyError::EmptyValue {
            key: key.to_owned(),
        });
    }
    let is_sep = |b: &u8| *b == NAME_VALUE_SEPARATOR || *b == PROPERTY_SEPARATOR;
    if let Some(&byte) = key.as_bytes().iter().find(|b| is_sep(b)) {
        return Err(PropertyError::ForbiddenChar {
            key: key.to_owned(),
            in_value: false,
            byte,
        });
    }
    if let Some(&byte) = value.as_bytes().iter().find(|b| is_sep(b)) {
        return Err(PropertyError::ForbiddenChar {
            key: key.to_owned(),
            in_value: true,
            byte,
        });
    }
    Ok(())
}

/// Appends `key 0x01 value 0x02` to `out` (no validation: callers hold valid entries).
pub fn encode_entry_into(out: &mut Vec<u8>, key: &str, value: &str) {
    out.reserve(key.len() + value.len() + 2);
    out.extend_from_slice(key.as_bytes());
    out.push(NAME_VALUE_SEPARATOR);
    out.extend_from_slice(value.as_bytes());
    out.push(PROPERTY_SEPARATOR);
}

/// Java `Boolean.parseBoolean`: true only for `true`, any case.
fn java_parse_bool(value: &str) -> bool {
    value.eq_ignore_ascii_case("true")
}

/// An owned property map that keeps insertion order (so a re-encoded string keeps the
/// producer's order) and gives "later duplicate wins" semantics on parse.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageProperties {
    entries: Vec<(String, String)>,
}

impl MessageProperties {
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes a property string with Java's rule. Total: malformed pieces are skipped
    /// exactly as Java skips them.
    pub fn parse(properties: &str) -> Self {
        let mut map = Self::new();
        for (k, v) in iter(properties) {
            map.put_unchecked(k, v);
        }
        map
    }

    /// Decodes a property block given as bytes; invalid UTF-8 is replaced by U+FFFD as
    /// Java's `new String(bytes, UTF_8)` does.
    pub fn parse_bytes(properties: &[u8]) -> Self {
        let mut map = Self::new();
        for (k, v) in iter_bytes(properties) {
            map.put_unchecked(&String::from_utf8_lossy(k), &String::from_utf8_lossy(v));
        }
        map
    }

    fn put_unchecked(&mut self, key: &str, value: &str) {
        match self.entries.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => value.clone_into(&mut entry.1),
            None => self.entries.push((key.to_owned(), value.to_owned())),
        }
    }

    /// Sets `key` to `value` (replacing in place if present), after [`validate_entry`].
    pub fn insert(&mut self, key: &str, value: &str) -> Result<(), PropertyError> {
        validate_entry(key, value)?;
        self.put_unchecked(key, value);
        Ok(())
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(i).1)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Parses a numeric property; `Ok(None)` when absent.
    pub fn get_parsed<T: FromStr>(&self, key: &str) -> Result<Option<T>, PropertyError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| PropertyError::NotANumber {
                key: key.to_owned(),
                value: v.to_owned(),
            }),
        }
    }

    /// `TAGS`.
    pub fn tags(&self) -> Option<&str> {
        self.get(keys::TAGS)
    }

    /// The business keys of `KEYS`, split on single spaces, empties dropped.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.get(keys::KEYS)
            .unwrap_or_default()
            .split(keys::KEY_SEPARATOR)
            .filter(|k| !k.is_empty())
    }

    /// `UNIQ_KEY`.
    pub fn uniq_key(&self) -> Option<&str> {
        self.get(keys::UNIQ_KEY)
    }

    /// `WAIT`: absent means true (Java `isWaitStoreMsgOK`), else `parseBoolean`.
    pub fn wait_store_msg_ok(&self) -> bool {
        self.get(keys::WAIT).is_none_or(java_parse_bool)
    }

    /// `TRAN_MSG` parsed like Java `Boolean.parseBoolean`.
    pub fn is_transaction_prepared(&self) -> bool {
        self.get(keys::TRAN_MSG).is_some_and(java_parse_bool)
    }

    /// `DELAY` level; 0 when absent.
    pub fn delay_time_level(&self) -> Result<i32, PropertyError> {
        Ok(self.get_parsed(keys::DELAY)?.unwrap_or(0))
    }

    /// Length of [`Self::encode`] in bytes.
    pub fn encoded_len(&self) -> usize {
        self.entries
            .iter()
            .map(|(k, v)| k.len() + v.len() + 2)
            .sum()
    }

    /// Appends the encoded string to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.reserve(self.encoded_len());
        for (k, v) in &self.entries {
            encode_entry_into(out, k, v);
        }
    }

    /// The property string (empty for an empty map).
    pub fn encode(&self) -> String {
        let mut s = String::with_capacity(self.encoded_len());
        for (k, v) in &self.entries {
            s.push_str(k);
            s.push(char::from(NAME_VALUE_SEPARATOR));
            s.push_str(v);
            s.push(char::from(PROPERTY_SEPARATOR));
        }
        s
    }
}

impl<'a> FromIterator<(&'a str, &'a str)> for MessageProperties {
    /// Collects pairs, later duplicates winning; entries are not validated (use
    /// [`MessageProperties::insert`] for untrusted input).
    fn from_iter<I: IntoIterator<Item = (&'a str, &'a str)>>(pairs: I) -> Self {
        let mut map = Self::new();
        for (k, v) in pairs {
            map.put_unchecked(k, v);
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// [`iter_bytes`] by its definition: split on 0x02, then each piece at its first 0x01.
    fn pairs_by_definition(props: &[u8]) -> Vec<(&[u8], &[u8])> {
        props
            .split(|&b| b == PROPERTY_SEPARATOR)
            .filter_map(|piece| {
                let sep = piece.iter().position(|&b| b == NAME_VALUE_SEPARATOR)?;
                let (k, v) = (&piece[..sep], &piece[sep + 1..]);
                (!k.is_empty() && !v.is_empty()).then_some((k, v))
            })
            .collect()
    }

    proptest! {
        #[test]
        fn pairs_match_the_split_definition(
            props in proptest::collection::vec(prop_oneof![Just(1u8), Just(2u8), Just(b'k')], 0..40)
        ) {
            prop_assert_eq!(iter_bytes(&props).collect::<Vec<_>>(), pairs_by_definition(&props));
        }
    }

    /// The §5.6 worked example's property block (62 bytes).
    const EXAMPLE: &str =
        "UNIQ_KEY\u{1}C0A8010530391B6A3F210BA7F2C40001\u{2}WAIT\u{1}true\u{2}TAGS\u{1}TagA\u{2}";

    #[test]
    fn worked_example_round_trip() {
        assert_eq!(EXAMPLE.len(), 62);
        let p = MessageProperties::parse(EXAMPLE);
        assert_eq!(p.len(), 3);
        assert_eq!(p.uniq_key(), Some("C0A8010530391B6A3F210BA7F2C40001"));
        assert_eq!(p.tags(), Some("TagA"));
        assert!(p.wait_store_msg_ok());
        assert_eq!(p.encode(), EXAMPLE);
        assert_eq!(p.encoded_len(), 62);
        let mut v = Vec::new();
        p.encode_into(&mut v);
        assert_eq!(v, EXAMPLE.as_bytes());
        assert_eq!(find(EXAMPLE, "WAIT"), Some("true"));
        assert_eq!(find(EXAMPLE, "KEYS"), None);
    }

    #[test]
    fn java_sample_header_string() {
        // From the SEND_MESSAGE_V2 capture in headers.md §1.2.
        let s = "TAGS\u{1}TAG\u{2}WAIT\u{1}true\u{2}KEYS\u{1}ffff\u{2}";
        let p = MessageProperties::parse(s);
        assert_eq!(p.tags(), Some("TAG"));
        assert_eq!(p.keys().collect::<Vec<_>>(), vec!["ffff"]);
    }

    #[test]
    fn java_decoding_rule_edge_cases() {
        // Empty values and keys are dropped; missing final separator accepted; later
        // duplicates win; a value may contain 0x01 (only the first one splits).
        let s =
            "A\u{1}\u{2}\u{1}x\u{2}B\u{1}1\u{2}noSep\u{2}B\u{1}2\u{2}C\u{1}x\u{1}y\u{2}D\u{1}tail";
        let pairs: Vec<_> = iter(s).collect();
        assert_eq!(
            pairs,
            vec![("B", "1"), ("B", "2"), ("C", "x\u{1}y"), ("D", "tail")]
        );
        let p = MessageProperties::parse(s);
        assert_eq!(p.get("B"), Some("2"));
        assert_eq!(p.get("A"), None);
        assert_eq!(find(s, "B"), Some("2"));
        assert_eq!(find_bytes(s.as_bytes(), b"C"), Some(&b"x\x01y"[..]));
        // Round trip of a 0x01-containing value is stable.
        assert_eq!(MessageProperties::parse(&p.encode()), p);
        assert!(MessageProperties::parse("").is_empty());
        assert!(MessageProperties::parse("\u{2}\u{2}\u{1}").is_empty());
    }

    #[test]
    fn validation_errors() {
        let mut p = MessageProperties::new();
        assert_eq!(p.insert("", "v"), Err(PropertyError::EmptyKey));
        assert!(matches!(
            p.insert("k", ""),
            Err(PropertyError::EmptyValue { .. })
        ));
        assert!(matches!(
            p.insert("k\u{2}", "v"),
            Err(PropertyError::ForbiddenChar {
                in_value: false,
                byte: 2,
                ..
            })
        ));
        assert!(matches!(
            p.insert("k", "a\u{1}b"),
            Err(PropertyError::ForbiddenChar {
                in_value: true,
                byte: 1,
                ..
            })
        ));
        p.insert("DELAY", "3").unwrap();
        assert_eq!(p.delay_time_level(), Ok(3));
        p.insert("DELAY", "x").unwrap();
        assert!(matches!(
            p.delay_time_level(),
            Err(PropertyError::NotANumber { .. })
        ));
        assert_eq!(p.remove("DELAY").as_deref(), Some("x"));
        assert_eq!(p.delay_time_level(), Ok(0));
        assert!(!p.is_transaction_prepared());
        p.insert(keys::TRAN_MSG, "TRUE").unwrap();
        assert!(p.is_transaction_prepared());
        p.insert(keys::WAIT, "false").unwrap();
        assert!(!p.wait_store_msg_ok());
    }

    #[test]
    fn length_checks() {
        assert!(check_header_properties(&"a".repeat(32_767)).is_ok());
        assert_eq!(
            check_header_properties(&"a".repeat(32_768)),
            Err(PropertyError::HeaderTooLong {
                utf16_units: 32_768
            })
        );
        // 20 000 three-byte chars: 60 000 bytes but only 20 000 UTF-16 units.
        assert!(check_header_properties(&"€".repeat(20_000)).is_ok());
        // 20 000 four-byte chars: 40 000 UTF-16 units (surrogate pairs).
        assert!(check_header_properties(&"😀".repeat(20_000)).is_err());
        assert!(check_stored_len(32_767).is_ok());
        assert_eq!(
            check_stored_len(32_768),
            Err(PropertyError::StoredTooLong { len_bytes: 32_768 })
        );
    }

    #[test]
    fn key_constants_are_exact() {
        assert_eq!(keys::SHARDING_KEY, "__SHARDINGKEY");
        assert_eq!(keys::FIRST_POP_TIME, "1ST_POP_TIME");
        assert_eq!(keys::TRANSACTION_ID, "__transactionId__");
        assert_eq!(keys::REAL_QID, "REAL_QID");
        assert!(keys::is_system_key("UNIQ_KEY"));
        assert!(!keys::is_system_key("myKey"));
        assert!(keys::is_transient_key(keys::TRANSIENT_TOPIC_CONFIG));
    }

    proptest! {
        #[test]
        fn round_trip_valid_maps(entries in proptest::collection::vec(
            ("[^\u{1}\u{2}]{1,12}", "[^\u{1}\u{2}]{1,24}"), 0..12)) {
            let mut p = MessageProperties::new();
            for (k, v) in &entries {
                p.insert(k, v).unwrap();
            }
            let s = p.encode();
            prop_assert_eq!(s.len(), p.encoded_len());
            prop_assert_eq!(MessageProperties::parse(&s), p.clone());
            prop_assert_eq!(MessageProperties::parse_bytes(s.as_bytes()), p);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let p = MessageProperties::parse_bytes(&bytes);
            for (k, v) in iter_bytes(&bytes) {
                prop_assert!(!k.is_empty() && !v.is_empty());
                prop_assert!(!k.contains(&NAME_VALUE_SEPARATOR));
                prop_assert!(!k.contains(&PROPERTY_SEPARATOR) && !v.contains(&PROPERTY_SEPARATOR));
            }
            let _ = p.encode();
        }
    }
}
