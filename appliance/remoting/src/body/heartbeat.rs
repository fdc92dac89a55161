//! `HEART_BEAT` (34) body: `HeartbeatData` with its `ProducerData`, `ConsumerData` and
//! `SubscriptionData` (`headers.md` §5.1), plus the consumer enums every consumer-facing
//! body shares (`ConsumeType`, `MessageModel`, `ConsumeFromWhere`).
//!
//! Reading is lenient, because every client shapes this body differently: Java writes
//! enum names and numbers; C++ writes enums as ordinals, `subVersion` as a string, omits
//! empty arrays and absent flags, and ends with `\n`; Go writes `codeSet` entries as
//! strings (hashed over UTF-8, so [`SubscriptionData::tag_filter`] recomputes them with
//! Java's hash). Writing is fastjson-shaped: compact, keys alphabetical, enums by name.

use crate::json::{self, read, BodyError, ObjectBuilder, Value};
use crate::message::tags::{self, TagFilter};

/// Decodes a JSON enum given as its Java name, a `typeCN`-style alias, or an ordinal (a
/// number or numeric string). Unknown values read as `None` ("not given"), like fastjson
/// leaves an unknown enum null, so one odd field never drops a whole heartbeat.
fn lenient_enum<T: Copy>(
    value: Option<&Value>,
    table: &[(T, &str)],
    aliases: &[(T, &str)],
) -> Option<T> {
    let value = value?;
    if let Some(ordinal) = value.as_i64() {
        return usize::try_from(ordinal)
            .ok()
            .and_then(|i| table.get(i))
            .map(|(t, _)| *t);
    }
    let name = value.as_str()?.trim();
    table
        .iter()
        .chain(aliases)
        .find(|(_, n)| n.eq_ignore_ascii_case(name))
        .map(|(t, _)| *t)
}

macro_rules! java_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $text:literal),+ $(,)? }
     aliases { $($alias_variant:ident = $alias:literal),* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vm])* $variant),+ }

        impl $name {
            /// Variants with their Java names, in ordinal order.
            const TABLE: &'static [($name, &'static str)] = &[$(($name::$variant, $text)),+];
            const ALIASES: &'static [($name, &'static str)] = &[$(($name::$alias_variant, $alias)),*];

            /// The Java enum constant name fastjson writes.
            pub fn name(self) -> &'static str {
                Self::TABLE[self as usize].1
            }

            /// The Java ordinal (what the C++ client sends).
            pub fn ordinal(self) -> i32 {
                self as i32
            }

            /// Parses a name (case-insensitive) or alias.
            pub fn from_name(name: &str) -> Option<Self> {
                lenient_enum(Some(&Value::str(name)), Self::TABLE, Self::ALIASES)
            }

            /// Leniently reads a JSON value: name, alias or ordinal; `None` if unknown.
            pub fn from_json(value: Option<&Value>) -> Option<Self> {
                lenient_enum(value, Self::TABLE, Self::ALIASES)
            }
        }

        impl From<$name> for Value {
            fn from(v: $name) -> Value {
                Value::str(v.name())
            }
        }
    };
}

java_enum! {
    /// How a consumer gets messages.
    ConsumeType {
        /// Pull consumer (ordinal 0).
        ConsumeActively = "CONSUME_ACTIVELY",
        /// Push consumer (ordinal 1).
        ConsumePassively = "CONSUME_PASSIVELY",
        /// 5.x POP consumer (ordinal 2).
        ConsumePop = "CONSUME_POP",
    }
    aliases { ConsumeActively = "PULL", ConsumePassively = "PUSH", ConsumePop = "POP" }
}

java_enum! {
    /// Whether every consumer of the group gets every message.
    MessageModel {
        /// Every consumer gets every message; offsets kept by the client (ordinal 0).
        Broadcasting = "BROADCASTING",
        /// Queues are shared out within the group; offsets kept by the broker (ordinal 1).
        Clustering = "CLUSTERING",
    }
    aliases { }
}

java_enum! {
    /// Where a consumer group with no committed offset starts.
    ConsumeFromWhere {
        ConsumeFromLastOffset = "CONSUME_FROM_LAST_OFFSET",
        /// Deprecated.
        ConsumeFromLastOffsetAndFromMinWhenBootFirst = "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
        /// Deprecated.
        ConsumeFromMinOffset = "CONSUME_FROM_MIN_OFFSET",
        /// Deprecated.
        ConsumeFromMaxOffset = "CONSUME_FROM_MAX_OFFSET",
        ConsumeFromFirstOffset = "CONSUME_FROM_FIRST_OFFSET",
        ConsumeFromTimestamp = "CONSUME_FROM_TIMESTAMP",
    }
    aliases { }
}

/// An array field that may be absent (C++ omits empty arrays) or null.
fn opt_array<'a>(obj: &'a Value, key: &str, path: &str) -> Result<&'a [Value], BodyError> {
    match obj.get_present(key) {
        None => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(BodyError::field(read::join(path, key), "an array")),
    }
}

/// An array of integers given as numbers or numeric strings (Go's `codeSet`).
fn lenient_i32_list(obj: &Value, key: &str, path: &str) -> Result<Vec<i32>, BodyError> {
    opt_array(obj, key, path)?
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_i32().ok_or_else(|| {
                BodyError::field(
                    format!("{}[{i}]", read::join(path, key)),
                    "a 32-bit integer",
                )
            })
        })
        .collect()
}

/// An array of strings where numbers are accepted as their text.
fn lenient_string_list(obj: &Value, key: &str, path: &str) -> Result<Vec<String>, BodyError> {
    opt_array(obj, key, path)?
        .iter()
        .enumerate()
        .filter(|(_, v)| !v.is_null())
        .map(|(i, v)| match v {
            Value::String(s) | Value::Number(s) => Ok(s.clone()),
            _ => Err(BodyError::field(
                format!("{}[{i}]", read::join(path, key)),
                "a string",
            )),
        })
        .collect()
}

/// One topic subscription of a consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionData {
    pub topic: String,
    /// The expression: tags joined by `||`, `*`, or an SQL-92 predicate.
    pub sub_string: String,
    /// Tags parsed by the client (empty for `*` and SQL92).
    pub tags_set: Vec<String>,
    /// Hash codes of `tags_set` as the client computed them (Go's may be wrong for
    /// non-ASCII tags: prefer [`Self::tag_filter`]).
    pub code_set: Vec<i32>,
    /// Subscription version: the client's ms timestamp when it built the subscription.
    pub sub_version: i64,
    /// `TAG` or `SQL92` (absent from C++: tag type).
    pub expression_type: String,
    /// Legacy, always false.
    pub class_filter_mode: bool,
}

impl SubscriptionData {
    /// A subscription built the way Java's `FilterAPI.build` does: for TAG (also an
    /// empty `expression_type`) the tags and their hash codes are parsed from
    /// `sub_string`; SQL92 keeps the expression and has no tags. An empty `sub_string`
    /// becomes `*`; the type is upper-cased.
    pub fn build(topic: &str, sub_string: &str, expression_type: &str, sub_version: i64) -> Self {
        let expression_type = if expression_type.is_empty() {
            tags::EXPRESSION_TYPE_TAG
        } else {
            expression_type
        };
        let (tags_set, code_set) =
            if expression_type.eq_ignore_ascii_case(tags::EXPRESSION_TYPE_TAG) {
                match TagFilter::parse(sub_string) {
                    TagFilter::All => (Vec::new(), Vec::new()),
                    TagFilter::Tags { tags, codes } => (tags, codes),
                }
            } else {
                (Vec::new(), Vec::new())
            };
        let sub_string = if sub_string.is_empty() {
            tags::SUB_ALL
        } else {
            sub_string
        };
        Self {
            topic: topic.to_owned(),
            sub_string: sub_string.to_owned(),
            tags_set,
            code_set,
            sub_version,
            expression_type: expression_type.to_ascii_uppercase(),
            class_filter_mode: false,
        }
    }

    /// Whether this is a tag subscription (rather than SQL92).
    pub fn is_tag_type(&self) -> bool {
        tags::is_tag_type(Some(&self.expression_type))
    }

    /// The broker-side tag filter, with hash codes recomputed by Java's `String.hashCode`
    /// from `tagsSet` (or from `subString` when a client omitted `tagsSet`), never
    /// trusting the client's `codeSet`. Meaningless for SQL92 subscriptions. Only `*`
    /// exactly matches everything, as in Java's `ExpressionMessageFilter`: ` * ` is the
    /// tag `*`, and a blank expression has no tags and matches nothing.
    pub fn tag_filter(&self) -> TagFilter {
        if self.sub_string.is_empty() || self.sub_string == tags::SUB_ALL {
            return TagFilter::All;
        }
        if self.tags_set.is_empty() {
            return TagFilter::parse(&self.sub_string);
        }
        let codes = self
            .tags_set
            .iter()
            .map(|t| tags::java_string_hash(t))
            .collect();
        TagFilter::Tags {
            tags: self.tags_set.clone(),
            codes,
        }
    }

    /// Replaces `code_set` with Java hash codes of `tags_set` (before echoing the
    /// subscription in `ConsumerConnection` to Java tools).
    pub fn recompute_code_set(&mut self) {
        self.code_set = self
            .tags_set
            .iter()
            .map(|t| tags::java_string_hash(t))
            .collect();
    }

    /// Reads one subscription; `path` names it in errors.
    pub fn from_json(obj: &Value, path: &str) -> Result<Self, BodyError> {
        if obj.as_object().is_none() {
            return Err(BodyError::field(path, "a SubscriptionData object"));
        }
        let expression_type = read::opt_string(obj, "expressionType", path)?
            .filter(|t| !t.trim().is_empty())
            .unwrap_or_else(|| tags::EXPRESSION_TYPE_TAG.to_owned());
        Ok(Self {
            topic: read::string(obj, "topic", path)?,
            sub_string: read::opt_string(obj, "subString", path)?
                .unwrap_or_else(|| tags::SUB_ALL.to_owned()),
            tags_set: lenient_string_list(obj, "tagsSet", path)?,
            code_set: lenient_i32_list(obj, "codeSet", path)?,
            sub_version: read::i64_or(obj, "subVersion", path, 0)?,
            expression_type,
            class_filter_mode: read::bool_or(obj, "classFilterMode", path, false)?,
        })
    }

    /// fastjson shape: alphabetical keys.
    pub fn to_json_value(&self) -> Value {
        ObjectBuilder::new()
            .field("classFilterMode", self.class_filter_mode)
            .field(
                "codeSet",
                Value::Array(self.code_set.iter().map(|&c| Value::from(c)).collect()),
            )
            .field("expressionType", self.expression_type.as_str())
            .field("subString", self.sub_string.as_str())
            .field("subVersion", self.sub_version)
            .field("tagsSet", json::string_array(&self.tags_set))
            .field("topic", self.topic.as_str())
            .build()
    }
}

/// A producer group the client belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerData {
    pub group_name: String,
}

/// A consumer group the client belongs to, with its subscriptions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerData {
    pub group_name: String,
    /// `None` when absent or unrecognised.
    pub consume_type: Option<ConsumeType>,
    pub message_model: Option<MessageModel>,
    pub consume_from_where: Option<ConsumeFromWhere>,
    pub subscription_data_set: Vec<SubscriptionData>,
    pub unit_mode: bool,
}

impl ConsumerData {
    pub fn from_json(obj: &Value, path: &str) -> Result<Self, BodyError> {
        if obj.as_object().is_none() {
            return Err(BodyError::field(path, "a ConsumerData object"));
        }
        // An entry without its key names nothing to register: skipped, as the Java broker's
        // tables would never match it, rather than refusing the client's whole heartbeat.
        let subs = opt_array(obj, "subscriptionDataSet", path)?
            .iter()
            .enumerate()
            .filter(|(_, v)| has_key(v, "topic"))
            .map(|(i, v)| {
                SubscriptionData::from_json(v, &format!("{path}.subscriptionDataSet[{i}]"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            group_name: read::string(obj, "groupName", path)?,
            consume_type: ConsumeType::from_json(obj.get_present("consumeType")),
            message_model: MessageModel::from_json(obj.get_present("messageModel")),
            consume_from_where: ConsumeFromWhere::from_json(obj.get_present("consumeFromWhere")),
            subscription_data_set: subs,
            unit_mode: read::bool_or(obj, "unitMode", path, false)?,
        })
    }

    pub fn to_json_value(&self) -> Value {
        ObjectBuilder::new()
            .field_opt("consumeFromWhere", self.consume_from_where)
            .field_opt("consumeType", self.consume_type)
            .field("groupName", self.group_name.as_str())
            .field_opt("messageModel", self.message_model)
            .field(
                "subscriptionDataSet",
                Value::Array(
                    self.subscription_data_set
                        .iter()
                        .map(SubscriptionData::to_json_value)
                        .collect(),
                ),
            )
            .field("unitMode", self.unit_mode)
            .build()
    }
}

/// The `HEART_BEAT` request body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeartbeatData {
    /// `clientID` (capital ID on the wire).
    pub client_id: String,
    pub producer_data_set: Vec<ProducerData>,
    pub consumer_data_set: Vec<ConsumerData>,
    /// 0 = classic heartbeat; otherwise "heartbeat v2" fingerprint.
    pub heartbeat_fingerprint: i32,
    /// v2 only: subscriptions omitted because unchanged (`withoutSub`).
    pub without_sub: bool,
}

impl HeartbeatData {
    /// Decodes a heartbeat body from any known client. `clientID` and each group's
    /// `groupName` are required; everything else defaults when absent.
    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let root = json::parse(body)?;
        if root.as_object().is_none() {
            return Err(BodyError::field("", "a HeartbeatData object"));
        }
        let producers = opt_array(&root, "producerDataSet", "")?
            .iter()
            .enumerate()
            .filter(|(_, v)| has_key(v, "groupName"))
            .map(|(i, v)| {
                read::string(v, "groupName", &format!("producerDataSet[{i}]"))
                    .map(|group_name| ProducerData { group_name })
            })
            .collect::<Result<_, _>>()?;
        let consumers = opt_array(&root, "consumerDataSet", "")?
            .iter()
            .enumerate()
            .filter(|(_, v)| has_key(v, "groupName"))
            .map(|(i, v)| ConsumerData::from_json(v, &format!("consumerDataSet[{i}]")))
            .collect::<Result<_, _>>()?;
        // Java's getter is `isWithoutSub`, so fastjson writes `withoutSub`; accept the
        // field name too in case a hand-written client used it.
        let without_sub = match root.get_present("withoutSub") {
            Some(_) => read::bool_or(&root, "withoutSub", "", false)?,
            None => read::bool_or(&root, "isWithoutSub", "", false)?,
        };
        Ok(Self {
            client_id: read::string(&root, "clientID", "")?,
            producer_data_set: producers,
            consumer_data_set: consumers,
            heartbeat_fingerprint: read::i32_or(&root, "heartbeatFingerprint", "", 0)?,
            without_sub,
        })
    }

    pub fn to_json_value(&self) -> Value {
        ObjectBuilder::new()
            .field("clientID", self.client_id.as_str())
            .field(
                "consumerDataSet",
                Value::Array(
                    self.consumer_data_set
                        .iter()
                        .map(ConsumerData::to_json_value)
                        .collect(),
                ),
            )
            .field("heartbeatFingerprint", self.heartbeat_fingerprint)
            .field(
                "producerDataSet",
                Value::Array(
                    self.producer_data_set
                        .iter()
                        .map(|p| {
                            ObjectBuilder::new()
                                .field("groupName", p.group_name.as_str())
                                .build()
                        })
                        .collect(),
                ),
            )
            .field("withoutSub", self.without_sub)
            .build()
    }

    /// Compact fastjson-shaped JSON text.
    pub fn encode(&self) -> String {
        self.to_json_value().to_json()
    }
}

/// Whether a heartbeat entry is an object carrying `key` (null entries and entries
/// without their group or topic are skipped, not refused).
fn has_key(entry: &Value, key: &str) -> bool {
    !entry.is_null() && (entry.as_object().is_none() || entry.get_present(key).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The Java example of headers.md §5.1, unwrapped.
    const JAVA: &str = concat!(
        r#"{"clientID":"192.168.1.5@12345#83627127849371","#,
        r#""consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","#,
        r#""groupName":"G1","messageModel":"CLUSTERING","#,
        r#""subscriptionDataSet":["#,
        r#"{"classFilterMode":false,"codeSet":[2598919],"expressionType":"TAG","subString":"TagA","subVersion":1700000000000,"tagsSet":["TagA"],"topic":"T1"},"#,
        r#"{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*","subVersion":1700000000001,"tagsSet":[],"topic":"%RETRY%G1"}],"#,
        r#""unitMode":false}],"#,
        r#""heartbeatFingerprint":0,"#,
        r#""producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}],"#,
        r#""withoutSub":false}"#
    );

    #[test]
    fn java_example_decodes_and_re_encodes_byte_for_byte() {
        let hb = HeartbeatData::decode(JAVA.as_bytes()).unwrap();
        assert_eq!(hb.client_id, "192.168.1.5@12345#83627127849371");
        assert_eq!(hb.producer_data_set[0].group_name, "CLIENT_INNER_PRODUCER");
        let c = &hb.consumer_data_set[0];
        assert_eq!(c.consume_type, Some(ConsumeType::ConsumePassively));
        assert_eq!(c.message_model, Some(MessageModel::Clustering));
        assert_eq!(
            c.consume_from_where,
            Some(ConsumeFromWhere::ConsumeFromLastOffset)
        );
        assert_eq!(c.subscription_data_set.len(), 2);
        let s = &c.subscription_data_set[0];
        assert_eq!(s.code_set, vec![2_598_919]);
        assert_eq!(s.sub_version, 1_700_000_000_000);
        assert!(c.subscription_data_set[1].tag_filter().is_all());
        assert_eq!(hb.encode(), JAVA);
    }

    #[test]
    fn cpp_shape_is_accepted() {
        // Ordinals, subVersion as a string, no expressionType/classFilterMode/unitMode/
        // heartbeatFingerprint, empty arrays omitted, trailing newline.
        let cpp = concat!(
            r#"{"clientID":"10.0.0.7@9876","consumerDataSet":[{"consumeFromWhere":4,"consumeType":1,"#,
            r#""groupName":"GC","messageModel":0,"subscriptionDataSet":[{"subString":"a || b","#,
            r#""subVersion":"1700000000000","tagsSet":["a","b"],"codeSet":[97,98],"topic":"TC"},"#,
            r#"{"subString":"*","subVersion":"1","topic":"%RETRY%GC"}]}]}"#,
            "\n"
        );
        let hb = HeartbeatData::decode(cpp.as_bytes()).unwrap();
        assert!(hb.producer_data_set.is_empty());
        assert_eq!(hb.heartbeat_fingerprint, 0);
        let c = &hb.consumer_data_set[0];
        assert_eq!(c.consume_type, Some(ConsumeType::ConsumePassively));
        assert_eq!(c.message_model, Some(MessageModel::Broadcasting));
        assert_eq!(
            c.consume_from_where,
            Some(ConsumeFromWhere::ConsumeFromFirstOffset)
        );
        assert!(!c.unit_mode);
        let s = &c.subscription_data_set[0];
        assert_eq!(s.sub_version, 1_700_000_000_000);
        assert_eq!(s.expression_type, "TAG");
        assert!(s.is_tag_type());
        assert!(c.subscription_data_set[1].tags_set.is_empty());
    }

    /// Entries that name no group (or no topic) are skipped and the rest of the heartbeat
    /// registers, as the broker did before it decoded heartbeats with this type.
    #[test]
    fn entries_without_group_or_topic_are_skipped_not_refused() {
        let hb = r#"{"clientID":"c@1","producerDataSet":[{"x":1},{"groupName":"P"}],"consumerDataSet":[{"consumeType":"CONSUME_PASSIVELY"},{"groupName":"G","subscriptionDataSet":[{"subString":"*"},{"topic":"T","subString":"*"}]}]}"#;
        let hb = HeartbeatData::decode(hb.as_bytes()).unwrap();
        assert_eq!(hb.producer_data_set.len(), 1);
        assert_eq!(hb.producer_data_set[0].group_name, "P");
        assert_eq!(hb.consumer_data_set.len(), 1);
        let c = &hb.consumer_data_set[0];
        assert_eq!(c.group_name, "G");
        assert_eq!(c.subscription_data_set.len(), 1);
        assert_eq!(c.subscription_data_set[0].topic, "T");
    }

    #[test]
    fn go_shape_string_code_set_and_recomputed_hash() {
        // Go hashes UTF-8 bytes: for "é" it would send a different code than Java.
        let go = r#"{"clientID":"go@1","producerDataSet":[],"consumerDataSet":[{"groupName":"G","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","unitMode":false,"subscriptionDataSet":[{"classFilterMode":false,"topic":"T","subString":"é","tagsSet":["é"],"codeSet":["12345"],"subVersion":1,"expressionType":"TAG"}]}],"heartbeatFingerprint":0}"#;
        let hb = HeartbeatData::decode(go.as_bytes()).unwrap();
        let s = &hb.consumer_data_set[0].subscription_data_set[0];
        assert_eq!(s.code_set, vec![12345]);
        assert_eq!(
            s.tag_filter(),
            TagFilter::Tags {
                tags: vec!["é".into()],
                codes: vec![0xE9]
            }
        );
        let mut s2 = s.clone();
        s2.recompute_code_set();
        assert_eq!(s2.code_set, vec![0xE9]);
    }

    #[test]
    fn enum_leniency() {
        assert_eq!(
            ConsumeType::from_name("push"),
            Some(ConsumeType::ConsumePassively)
        );
        assert_eq!(
            ConsumeType::from_json(Some(&Value::str("2"))),
            Some(ConsumeType::ConsumePop)
        );
        assert_eq!(MessageModel::from_json(Some(&Value::int(7))), None);
        assert_eq!(MessageModel::from_json(Some(&Value::str("WHATEVER"))), None);
        assert_eq!(ConsumeFromWhere::ConsumeFromTimestamp.ordinal(), 5);
        assert_eq!(
            ConsumeFromWhere::ConsumeFromLastOffsetAndFromMinWhenBootFirst.name(),
            "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST"
        );
    }

    #[test]
    fn ali_ons_shape_and_without_sub() {
        let ons = r#"{"clientID":"1.2.3.4@ons","producerDataSet":[{"groupName":"P"}],"consumerDataSet":null,"withoutSub":"true","heartbeatFingerprint":"77"}"#;
        let hb = HeartbeatData::decode(ons.as_bytes()).unwrap();
        assert!(hb.consumer_data_set.is_empty());
        assert!(hb.without_sub);
        assert_eq!(hb.heartbeat_fingerprint, 77);
    }

    #[test]
    fn errors_name_the_field() {
        let e = HeartbeatData::decode(br#"{"producerDataSet":[]}"#).unwrap_err();
        assert_eq!(e, BodyError::field("clientID", "a string"));
        let e = HeartbeatData::decode(br#"{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":[{"topic":[],"subString":"*"}]}]}"#).unwrap_err();
        assert_eq!(
            e,
            BodyError::field(
                "consumerDataSet[0].subscriptionDataSet[0].topic",
                "a string"
            )
        );
        let e = HeartbeatData::decode(br#"{"clientID":"c","consumerDataSet":{}}"#).unwrap_err();
        assert_eq!(e, BodyError::field("consumerDataSet", "an array"));
        assert!(matches!(
            HeartbeatData::decode(b"{"),
            Err(BodyError::Syntax(_))
        ));
        assert!(HeartbeatData::decode(b"[]").is_err());
    }

    #[test]
    fn build_matches_filter_api() {
        let s = SubscriptionData::build("T", "TagA || TagB", "TAG", 5);
        assert_eq!(s.tags_set, vec!["TagA", "TagB"]);
        assert_eq!(s.code_set, vec![2_598_919, 2_598_920]);
        assert_eq!(SubscriptionData::build("T", "", "TAG", 5).sub_string, "*");
        let untyped = SubscriptionData::build("T", "TagA", "", 5);
        assert_eq!(untyped.expression_type, "TAG");
        assert_eq!(untyped.tags_set, vec!["TagA"]);
        let sql = SubscriptionData::build("T", "a > 1", "sql92", 5);
        assert_eq!(sql.expression_type, "SQL92");
        assert!(!sql.is_tag_type());
        assert!(sql.tags_set.is_empty() && sql.code_set.is_empty());
        assert_eq!(sql.sub_string, "a > 1");
    }

    #[test]
    fn only_an_exact_star_matches_every_tag() {
        assert!(SubscriptionData::build("T", "*", "TAG", 1)
            .tag_filter()
            .is_all());
        assert_eq!(
            SubscriptionData::build("T", " ", "TAG", 1).tag_filter(),
            TagFilter::Tags {
                tags: vec![],
                codes: vec![]
            },
            "a blank expression has no tags"
        );
        assert_eq!(
            SubscriptionData::build("T", " * ", "TAG", 1).tag_filter(),
            TagFilter::Tags {
                tags: vec!["*".into()],
                codes: vec![42]
            },
            "a padded star is the tag `*`"
        );
    }

    #[test]
    fn subscription_json_is_fastjson_shaped() {
        let s = SubscriptionData::build("T", "TagA || TagB", "TAG", 5);
        assert_eq!(
            s.to_json_value().to_json(),
            r#"{"classFilterMode":false,"codeSet":[2598919,2598920],"expressionType":"TAG","subString":"TagA || TagB","subVersion":5,"tagsSet":["TagA","TagB"],"topic":"T"}"#
        );
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = HeartbeatData::decode(&bytes);
        }

        #[test]
        fn round_trip(client in "[a-z0-9@#.]{1,20}", group in "[A-Za-z_%]{1,12}",
                      sub in "[A-Za-z| *]{0,20}", ver in any::<i64>(), fp in any::<i32>()) {
            let hb = HeartbeatData {
                client_id: client,
                producer_data_set: vec![ProducerData { group_name: group.clone() }],
                consumer_data_set: vec![ConsumerData {
                    group_name: group,
                    consume_type: Some(ConsumeType::ConsumeActively),
                    message_model: None,
                    consume_from_where: Some(ConsumeFromWhere::ConsumeFromTimestamp),
                    subscription_data_set: vec![SubscriptionData::build("T", &sub, "TAG", ver)],
                    unit_mode: true,
                }],
                heartbeat_fingerprint: fp,
                without_sub: true,
            };
            prop_assert_eq!(HeartbeatData::decode(hb.encode().as_bytes()).unwrap(), hb);
        }
    }
}
