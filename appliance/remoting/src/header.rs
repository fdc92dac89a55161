//! Typed custom headers: each request's and response's `extFields` as a Rust struct
//! (`headers.md`, `remoting.md` §7). Owns the field text rules, the [`CommandHeader`]
//! trait, the `command_header!` table macro every header is declared with, and the common
//! `+rpc` keys ([`RpcFields`]).
//!
//! Text rules (`headers.md` §0.1, `remoting.md` §7.1, `clients.md`):
//! - numbers arrive as decimal text (the JSON reader keeps unquoted numbers' text); an
//!   empty string counts as absent for numbers and booleans (Go and C++ send `""`);
//! - booleans accept `true`/`false` in any case and `1`/`0` (the C++ core sends `m: "1"`);
//! - strings are taken as is, and an empty string is a present, empty value;
//! - a missing required field is [`HeaderError::Missing`], unparsable text
//!   [`HeaderError::Malformed`].
//!
//! Which fields are required is part of each header's table (a plain `T` is required,
//! `Option<T>` or `T = "key" or DEFAULT` is not), and [`check_required_for_code`] is the
//! one place a server asks "does this request carry every required field of its code's
//! header?" before any handler reads it.
//!
//! Headers encode *into* an existing [`ExtFields`], so extra keys such as `MSG_REGION`,
//! `TRACE_ON` or `AccessKey` stay beside the header's own keys; decoding ignores keys it
//! does not know.
//!
//! ```
//! use ringmq_remoting::header::{CommandHeader, QueryConsumerOffsetRequestHeader};
//! use ringmq_remoting::RemotingCommand;
//!
//! let header = QueryConsumerOffsetRequestHeader {
//!     consumer_group: "G1".into(),
//!     topic: "T1".into(),
//!     queue_id: 3,
//!     ..Default::default()
//! };
//! let request = RemotingCommand::request(14, 1).with_header(&header);
//! assert_eq!(request.ext_fields.get("queueId"), Some("3"));
//! let back: QueryConsumerOffsetRequestHeader = request.decode_header().unwrap();
//! assert_eq!(back, header);
//! ```

use crate::command::{ExtFields, RemotingCommand};

/// Why a custom header could not be read: names the field, so the error remark tells a
/// client developer exactly what to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// A required field (`@CFNotNull` upstream) is absent.
    Missing { field: &'static str },
    /// A field is present but its text is not a valid value of its type.
    Malformed {
        field: &'static str,
        value: String,
        expected: &'static str,
    },
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // Upstream's wording (`RemotingCommand.decodeCommandCustomHeader`): clients and
            // operators already search logs for it.
            Self::Missing { field } => write!(f, "the custom field <{field}> is null"),
            Self::Malformed {
                field,
                value,
                expected,
            } => {
                write!(
                    f,
                    "the custom header field {field}={value:?} is not a valid {expected}"
                )
            }
        }
    }
}

impl std::error::Error for HeaderError {}

/// A custom header: decoded from and encoded into `extFields`.
pub trait CommandHeader: Sized {
    /// Reads the header's keys from `fields`; unknown keys are ignored.
    fn decode(fields: &ExtFields) -> Result<Self, HeaderError>;
    /// Writes the header's present fields into `fields`, replacing keys of the same name
    /// and keeping every other key.
    fn encode(&self, fields: &mut ExtFields);

    /// `Err(Missing)` naming the first required field (`@CFNotNull` upstream) that
    /// `fields` lacks, without decoding or allocating anything.
    fn check_required(fields: &ExtFields) -> Result<(), HeaderError> {
        let _ = fields;
        Ok(())
    }

    /// The header alone as a fresh map.
    fn to_ext_fields(&self) -> ExtFields {
        let mut fields = ExtFields::new();
        self.encode(&mut fields);
        fields
    }
}

/// Typed-header access on a command. Declared here rather than in `command` so the frame
/// layer does not depend on the header layer above it.
impl RemotingCommand {
    /// Decodes the typed custom header `H` from this command's extFields.
    pub fn decode_header<H: CommandHeader>(&self) -> Result<H, HeaderError> {
        H::decode(&self.ext_fields)
    }

    /// Writes `header`'s fields into this command's extFields (other keys are kept).
    pub fn set_header<H: CommandHeader>(&mut self, header: &H) {
        header.encode(&mut self.ext_fields);
    }

    /// Builder form of [`RemotingCommand::set_header`].
    pub fn with_header<H: CommandHeader>(mut self, header: &H) -> Self {
        self.set_header(header);
        self
    }
}

/// The value type of one header field: with [`FieldSpec`], a header's schema, so code that
/// walks headers generically (test generators, diagnostics) needs no per-header code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    String,
    I32,
    I64,
    Bool,
    BoundaryType,
}

/// One row of a header's table: its wire key, value type, and whether a request may leave
/// it out (an `Option<T>` field, or one with an `or` default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldSpec {
    pub key: &'static str,
    pub kind: FieldKind,
    pub optional: bool,
}

/// The text form of one header field value.
pub trait FieldValue: Sized {
    /// What the value should have looked like, for [`HeaderError::Malformed`].
    const EXPECTED: &'static str;
    /// The value type, for the header's [`FieldSpec`] table.
    const KIND: FieldKind;
    /// Whether `text` means "not given". Empty text is absent for everything but strings.
    fn is_absent(text: &str) -> bool {
        text.is_empty()
    }
    /// Parses `text`; `None` when it is not a valid value.
    fn parse(text: &str) -> Option<Self>;
    /// The canonical text Java's `toString` produces.
    fn to_text(&self) -> String;
}

impl FieldValue for String {
    const EXPECTED: &'static str = "string";
    const KIND: FieldKind = FieldKind::String;
    fn is_absent(_text: &str) -> bool {
        false
    }
    fn parse(text: &str) -> Option<Self> {
        Some(text.to_owned())
    }
    fn to_text(&self) -> String {
        self.clone()
    }
}

impl FieldValue for i32 {
    const EXPECTED: &'static str = "32-bit integer";
    const KIND: FieldKind = FieldKind::I32;
    fn parse(text: &str) -> Option<Self> {
        text.parse().ok()
    }
    fn to_text(&self) -> String {
        self.to_string()
    }
}

impl FieldValue for i64 {
    const EXPECTED: &'static str = "64-bit integer";
    const KIND: FieldKind = FieldKind::I64;
    fn parse(text: &str) -> Option<Self> {
        text.parse().ok()
    }
    fn to_text(&self) -> String {
        self.to_string()
    }
}

impl FieldValue for bool {
    const EXPECTED: &'static str = "boolean (true/false/1/0)";
    const KIND: FieldKind = FieldKind::Bool;
    fn parse(text: &str) -> Option<Self> {
        if text.eq_ignore_ascii_case("true") || text == "1" {
            Some(true)
        } else if text.eq_ignore_ascii_case("false") || text == "0" {
            Some(false)
        } else {
            None
        }
    }
    fn to_text(&self) -> String {
        if *self { "true" } else { "false" }.to_owned()
    }
}

/// `SEARCH_OFFSET_BY_TIMESTAMP`'s `boundaryType`: which offset wins when several messages
/// share the store time. Read case-insensitively, written as Java's enum name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BoundaryType {
    #[default]
    Lower,
    Upper,
}

impl FieldValue for BoundaryType {
    const EXPECTED: &'static str = "boundary type (LOWER/UPPER)";
    const KIND: FieldKind = FieldKind::BoundaryType;
    fn parse(text: &str) -> Option<Self> {
        if text.eq_ignore_ascii_case("lower") {
            Some(Self::Lower)
        } else if text.eq_ignore_ascii_case("upper") {
            Some(Self::Upper)
        } else {
            None
        }
    }
    fn to_text(&self) -> String {
        match self {
            Self::Lower => "LOWER",
            Self::Upper => "UPPER",
        }
        .to_owned()
    }
}

/// Reads `key` as a present value: `Ok(None)` when missing or absent-by-text.
pub fn read_field<T: FieldValue>(
    fields: &ExtFields,
    key: &'static str,
) -> Result<Option<T>, HeaderError> {
    match fields.get(key) {
        None => Ok(None),
        Some(text) if T::is_absent(text) => Ok(None),
        Some(text) => T::parse(text)
            .map(Some)
            .ok_or_else(|| HeaderError::Malformed {
                field: key,
                value: text.to_owned(),
                expected: T::EXPECTED,
            }),
    }
}

/// How a struct field type maps onto an extFields key: a plain `T` is required, an
/// `Option<T>` optional.
pub trait HeaderField: Sized {
    /// The value type of the field.
    const KIND: FieldKind;
    /// Whether the field may be absent (an `Option<T>`).
    const OPTIONAL: bool;
    fn decode_field(fields: &ExtFields, key: &'static str) -> Result<Self, HeaderError>;
    fn encode_field(&self, fields: &mut ExtFields, key: &'static str);
    /// `Err(Missing)` when the field is required and `fields` has no present value for
    /// it (absent by text counts as missing, as [`read_field`] reads it).
    fn check_present(fields: &ExtFields, key: &'static str) -> Result<(), HeaderError>;
}

macro_rules! header_field_impls {
    ($($t:ty),*) => {$(
        impl HeaderField for $t {
            const KIND: FieldKind = <$t as FieldValue>::KIND;
            const OPTIONAL: bool = false;
            fn decode_field(fields: &ExtFields, key: &'static str) -> Result<Self, HeaderError> {
                read_field::<$t>(fields, key)?.ok_or(HeaderError::Missing { field: key })
            }
            fn encode_field(&self, fields: &mut ExtFields, key: &'static str) {
                fields.insert(key, self.to_text());
            }
            fn check_present(fields: &ExtFields, key: &'static str) -> Result<(), HeaderError> {
                match fields.get(key) {
                    Some(text) if !<$t as FieldValue>::is_absent(text) => Ok(()),
                    _ => Err(HeaderError::Missing { field: key }),
                }
            }
        }
        impl HeaderField for Option<$t> {
            const KIND: FieldKind = <$t as FieldValue>::KIND;
            const OPTIONAL: bool = true;
            fn decode_field(fields: &ExtFields, key: &'static str) -> Result<Self, HeaderError> {
                read_field::<$t>(fields, key)
            }
            fn encode_field(&self, fields: &mut ExtFields, key: &'static str) {
                if let Some(value) = self {
                    fields.insert(key, value.to_text());
                }
            }
            fn check_present(_fields: &ExtFields, _key: &'static str) -> Result<(), HeaderError> {
                Ok(())
            }
        }
    )*};
}

header_field_impls!(String, i32, i64, bool, BoundaryType);

/// Declares a header struct from a table of `field: Type = "wireKey";` rows.
///
/// - `T` (String, i32, i64, bool, ...) is required: missing => [`HeaderError::Missing`];
/// - `Option<T>` is optional;
/// - `T = "key" or DEFAULT;` is optional on the wire with a default when absent (always
///   written on encode);
/// - `Name + rpc { .. }` adds `pub rpc: RpcFields` (the `ns/nsd/bname/oway/lo` keys).
///
/// `Default` is derived; note it uses the type's zero value, not the `or` default.
macro_rules! command_header {
    (
        $(#[$meta:meta])*
        $name:ident $(+ $rpc:ident)? {
            $( $(#[$fmeta:meta])* $field:ident : $ty:ty = $key:literal $(or $default:expr)? ; )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
            $(
                /// The common `+rpc` keys (`remoting.md` §7.2).
                pub $rpc: $crate::header::RpcFields,
            )?
        }

        #[allow(dead_code)]
        impl $name {
            /// Every wire key of this header, in table order (the `+rpc` keys excluded).
            pub const KEYS: &'static [&'static str] = &[$($key),*];

            /// The header's table: every field's key, type and optionality, in order.
            pub const FIELDS: &'static [$crate::header::FieldSpec] = &[$(
                $crate::header::FieldSpec {
                    key: $key,
                    kind: <$ty as $crate::header::HeaderField>::KIND,
                    optional: command_header!(@optional $ty $(, $default)?),
                },
            )*];

            /// Whether the header also carries the `+rpc` keys (those of `RpcFields::FIELDS`).
            pub const HAS_RPC: bool = command_header!(@has_rpc $($rpc)?);
        }

        impl $crate::header::CommandHeader for $name {
            #[allow(unused_variables)]
            fn decode(fields: &$crate::command::ExtFields) -> Result<Self, $crate::header::HeaderError> {
                Ok(Self {
                    $( $field: command_header!(@decode fields, $ty, $key $(, $default)?), )*
                    $( $rpc: <$crate::header::RpcFields as $crate::header::CommandHeader>::decode(fields)?, )?
                })
            }

            #[allow(unused_variables)]
            fn check_required(fields: &$crate::command::ExtFields) -> Result<(), $crate::header::HeaderError> {
                $( command_header!(@check fields, $ty, $key $(, $default)?); )*
                Ok(())
            }

            #[allow(unused_variables)]
            fn encode(&self, fields: &mut $crate::command::ExtFields) {
                $( $crate::header::HeaderField::encode_field(&self.$field, fields, $key); )*
                $( $crate::header::CommandHeader::encode(&self.$rpc, fields); )?
            }
        }
    };
    (@decode $fields:ident, $ty:ty, $key:literal) => {
        <$ty as $crate::header::HeaderField>::decode_field($fields, $key)?
    };
    (@decode $fields:ident, $ty:ty, $key:literal, $default:expr) => {
        $crate::header::read_field::<$ty>($fields, $key)?.unwrap_or($default)
    };
    (@check $fields:ident, $ty:ty, $key:literal) => {
        <$ty as $crate::header::HeaderField>::check_present($fields, $key)?
    };
    (@check $fields:ident, $ty:ty, $key:literal, $default:expr) => {};
    (@optional $ty:ty) => {
        <$ty as $crate::header::HeaderField>::OPTIONAL
    };
    (@optional $ty:ty, $default:expr) => {
        true
    };
    (@has_rpc) => {
        false
    };
    (@has_rpc $rpc:ident) => {
        true
    };
}

command_header! {
    /// Optional keys most request headers inherit from `RpcRequestHeader` (`remoting.md`
    /// §7.2). A plain broker may ignore them; they are kept so a proxy can route.
    RpcFields {
        /// `ns`: namespace.
        namespace: Option<String> = "ns";
        /// `nsd`: resource names are already namespaced.
        namespaced: Option<bool> = "nsd";
        /// `bname`: target broker name.
        broker_name: Option<String> = "bname";
        /// `oway`: oneway hint.
        oneway: Option<bool> = "oway";
        /// `lo`: logical (static-topic) request; only topic headers carry it.
        logic: Option<bool> = "lo";
    }
}

/// Checks that `fields` carries every required field of the typed request header of
/// `code`: the one place servers enforce required fields, before any handler reads the
/// header. Codes whose header is not listed here pass unchecked (their handlers read
/// what they need and default the rest).
///
/// Allocation-free (a few map lookups), so it runs on every request, sends included.
pub fn check_required_for_code(code: i32, fields: &ExtFields) -> Result<(), HeaderError> {
    use crate::codes::RequestCode as C;
    let Some(code) = C::from_code(code) else {
        return Ok(());
    };
    match code {
        C::SendMessage
        | C::SendMessageV2
        | C::SendBatchMessage
        | C::SendReplyMessage
        | C::SendReplyMessageV2 => {
            SendMessageRequestHeader::check_required_for_code(code as i32, fields)
        }
        C::PullMessage | C::LitePullMessage => PullMessageRequestHeader::check_required(fields),
        C::DeleteTopicInBroker => DeleteTopicRequestHeader::check_required(fields),
        C::UpdateAndCreateAclConfig => CreateAccessConfigRequestHeader::check_required(fields),
        C::DeleteAclConfig => DeleteAccessConfigRequestHeader::check_required(fields),
        C::UpdateGlobalWhiteAddrsConfig => {
            UpdateGlobalWhiteAddrsConfigRequestHeader::check_required(fields)
        }
        C::QueryConsumerOffset => QueryConsumerOffsetRequestHeader::check_required(fields),
        C::GetMaxOffset => GetMaxOffsetRequestHeader::check_required(fields),
        C::GetMinOffset => GetMinOffsetRequestHeader::check_required(fields),
        C::SearchOffsetByTimestamp => SearchOffsetRequestHeader::check_required(fields),
        C::GetEarliestMsgStoretime => GetEarliestMsgStoretimeRequestHeader::check_required(fields),
        C::ViewMessageById => ViewMessageRequestHeader::check_required(fields),
        C::QueryMessage => QueryMessageRequestHeader::check_required(fields),
        C::UnregisterClient => UnregisterClientRequestHeader::check_required(fields),
        C::GetConsumerListByGroup => GetConsumerListByGroupRequestHeader::check_required(fields),
        C::UpdateAndCreateTopic => CreateTopicRequestHeader::check_required(fields),
        C::GetTopicConfig => GetTopicConfigRequestHeader::check_required(fields),
        C::DeleteSubscriptiongroup => DeleteSubscriptionGroupRequestHeader::check_required(fields),
        C::GetSubscriptiongroupConfig => {
            GetSubscriptionGroupConfigRequestHeader::check_required(fields)
        }
        C::GetTopicStatsInfo => GetTopicStatsInfoRequestHeader::check_required(fields),
        C::GetConsumeStats => GetConsumeStatsRequestHeader::check_required(fields),
        C::GetConsumerConnectionList => {
            GetConsumerConnectionListRequestHeader::check_required(fields)
        }
        C::GetProducerConnectionList => {
            GetProducerConnectionListRequestHeader::check_required(fields)
        }
        C::InvokeBrokerToResetOffset => ResetOffsetRequestHeader::check_required(fields),
        C::QueryTopicConsumeByWho => QueryTopicConsumeByWhoRequestHeader::check_required(fields),
        C::QueryTopicsByConsumer => QueryTopicsByConsumerRequestHeader::check_required(fields),
        // UPDATE_CONSUMER_OFFSET is left out on purpose: its handler answers a missing
        // field with INVALID_PARAMETER, not the SYSTEM_ERROR of a refused header.
        _ => Ok(()),
    }
}

pub mod admin;
pub mod client;
pub mod controller;
pub mod lookup;
pub mod namesrv;
pub mod offset;
pub mod pop;
pub mod pull;
pub mod send;
#[doc(hidden)]
pub mod testing;
pub mod transaction;

pub use admin::*;
pub use client::*;
pub use lookup::*;
pub use namesrv::*;
pub use offset::*;
pub use pop::*;
pub use pull::*;
pub use send::*;
pub use transaction::*;

#[cfg(test)]
mod tests {
    use super::*;

    command_header! {
        Demo + rpc {
            name: String = "name";
            count: i32 = "count";
            big: Option<i64> = "big";
            on: bool = "on" or true;
            boundary: Option<BoundaryType> = "boundaryType";
        }
    }

    fn fields(pairs: &[(&str, &str)]) -> ExtFields {
        pairs.iter().copied().collect()
    }

    #[test]
    fn required_fields_of_lookup_client_and_admin_codes_are_checked_in_one_place() {
        use crate::codes::RequestCode as C;
        // (code, the fields sent, the required field left out)
        type Case = (C, &'static [(&'static str, &'static str)], &'static str);
        let cases: &[Case] = &[
            (C::GetMaxOffset, &[("topic", "T")], "queueId"),
            (C::GetMinOffset, &[("queueId", "0")], "topic"),
            (C::GetEarliestMsgStoretime, &[("topic", "T")], "queueId"),
            (
                C::SearchOffsetByTimestamp,
                &[("topic", "T"), ("queueId", "0")],
                "timestamp",
            ),
            (
                C::QueryConsumerOffset,
                &[("topic", "T"), ("queueId", "0")],
                "consumerGroup",
            ),
            (C::ViewMessageById, &[("topic", "T")], "offset"),
            (
                C::QueryMessage,
                &[
                    ("topic", "T"),
                    ("maxNum", "1"),
                    ("beginTimestamp", "0"),
                    ("endTimestamp", "1"),
                ],
                "key",
            ),
            (C::UnregisterClient, &[("consumerGroup", "G")], "clientID"),
            (C::GetConsumerListByGroup, &[], "consumerGroup"),
            (C::GetTopicConfig, &[], "topic"),
            (C::GetConsumeStats, &[("topic", "T")], "consumerGroup"),
            (C::QueryTopicsByConsumer, &[], "group"),
        ];
        for (code, present, missing) in cases {
            assert_eq!(
                check_required_for_code(*code as i32, &fields(present)),
                Err(HeaderError::Missing { field: missing }),
                "{code:?} without {missing}"
            );
        }
        // A blank number is absent, so it is refused like a missing one.
        assert_eq!(
            check_required_for_code(
                C::GetMaxOffset as i32,
                &fields(&[("topic", "T"), ("queueId", "")])
            ),
            Err(HeaderError::Missing { field: "queueId" })
        );
        assert_eq!(
            check_required_for_code(
                C::GetMaxOffset as i32,
                &fields(&[("topic", "T"), ("queueId", "1")])
            ),
            Ok(())
        );
        // UPDATE_CONSUMER_OFFSET answers its own INVALID_PARAMETER, so it is not checked here.
        assert_eq!(
            check_required_for_code(C::UpdateConsumerOffset as i32, &fields(&[])),
            Ok(())
        );
    }

    #[test]
    fn decodes_with_rules() {
        let got = Demo::decode(&fields(&[
            ("name", ""),
            ("count", "-7"),
            ("big", ""),
            ("boundaryType", "upper"),
            ("bname", "broker-a"),
            ("nsd", "1"),
            ("MSG_REGION", "x"),
        ]))
        .unwrap();
        assert_eq!(got.name, "");
        assert_eq!(got.count, -7);
        assert_eq!(got.big, None);
        assert!(got.on);
        assert_eq!(got.boundary, Some(BoundaryType::Upper));
        assert_eq!(got.rpc.broker_name.as_deref(), Some("broker-a"));
        assert_eq!(got.rpc.namespaced, Some(true));
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(
            Demo::decode(&fields(&[("count", "1")])),
            Err(HeaderError::Missing { field: "name" })
        );
        assert_eq!(
            Demo::decode(&fields(&[("name", "n"), ("count", "")])),
            Err(HeaderError::Missing { field: "count" })
        );
        assert_eq!(
            Demo::decode(&fields(&[("name", "n"), ("count", "1.0")])),
            Err(HeaderError::Malformed {
                field: "count",
                value: "1.0".into(),
                expected: "32-bit integer"
            })
        );
        assert!(matches!(
            Demo::decode(&fields(&[("name", "n"), ("count", "1"), ("on", "yes")])),
            Err(HeaderError::Malformed { field: "on", .. })
        ));
        assert!(matches!(
            Demo::decode(&fields(&[("name", "n"), ("count", "99999999999")])),
            Err(HeaderError::Malformed { field: "count", .. })
        ));
        let text = HeaderError::Missing { field: "topic" }.to_string();
        assert!(text.contains("topic"), "{text}");
    }

    #[test]
    fn check_required_names_the_first_missing_required_field() {
        let full = fields(&[("name", "n"), ("count", "1")]);
        assert_eq!(
            Demo::check_required(&full),
            Ok(()),
            "optional and defaulted may be absent"
        );
        assert_eq!(
            Demo::check_required(&fields(&[("count", "1")])),
            Err(HeaderError::Missing { field: "name" })
        );
        assert_eq!(
            Demo::check_required(&fields(&[("name", ""), ("count", "")])),
            Err(HeaderError::Missing { field: "count" }),
            "an empty number is absent; an empty string is a present value"
        );
        assert_eq!(
            Demo::check_required(&fields(&[("name", "n"), ("count", "x")])),
            Ok(()),
            "presence only: malformed text is the decoder's error"
        );
        assert_eq!(
            HeaderError::Missing { field: "c" }.to_string(),
            "the custom field <c> is null"
        );
    }

    #[test]
    fn check_required_for_code_covers_send_pull_and_delete_topic() {
        let send_v2 = [
            ("a", "PG"),
            ("b", "T"),
            ("c", "TBW102"),
            ("d", "4"),
            ("e", "0"),
            ("f", "0"),
            ("g", "1700000000000"),
            ("h", "0"),
        ];
        for code in [310, 320] {
            assert_eq!(check_required_for_code(code, &fields(&send_v2)), Ok(()));
            for missing in ["c", "d", "e", "f", "g", "h"] {
                let without: Vec<_> = send_v2
                    .iter()
                    .copied()
                    .filter(|(k, _)| *k != missing)
                    .collect();
                assert_eq!(
                    check_required_for_code(code, &fields(&without)),
                    Err(HeaderError::Missing { field: missing }),
                    "code {code} without {missing}"
                );
            }
        }
        let send_v1 = [
            ("producerGroup", "PG"),
            ("topic", "T"),
            ("defaultTopic", "TBW102"),
            ("defaultTopicQueueNums", "4"),
            ("queueId", "0"),
            ("sysFlag", "0"),
            ("bornTimestamp", "1700000000000"),
            ("flag", "0"),
        ];
        assert_eq!(check_required_for_code(10, &fields(&send_v1)), Ok(()));
        for (missing, _) in send_v1 {
            let without: Vec<_> = send_v1
                .iter()
                .copied()
                .filter(|(k, _)| *k != missing)
                .collect();
            assert_eq!(
                check_required_for_code(10, &fields(&without)),
                Err(HeaderError::Missing { field: missing }),
                "code 10 without {missing}"
            );
        }
        let pull = [
            ("consumerGroup", "G"),
            ("topic", "T"),
            ("queueId", "0"),
            ("queueOffset", "0"),
            ("maxMsgNums", "32"),
            ("sysFlag", "0"),
        ];
        assert_eq!(check_required_for_code(11, &fields(&pull)), Ok(()));
        assert_eq!(
            check_required_for_code(361, &fields(&pull[1..])),
            Err(HeaderError::Missing {
                field: "consumerGroup"
            })
        );
        assert_eq!(
            check_required_for_code(215, &fields(&[])),
            Err(HeaderError::Missing { field: "topic" })
        );
        assert_eq!(
            check_required_for_code(215, &fields(&[("topic", "T")])),
            Ok(())
        );
        assert_eq!(
            check_required_for_code(34, &fields(&[])),
            Ok(()),
            "heartbeat has no header"
        );
        assert_eq!(
            check_required_for_code(-5, &fields(&[])),
            Ok(()),
            "unknown code"
        );
    }

    #[test]
    fn booleans_accept_client_spellings() {
        for (text, want) in [
            ("true", true),
            ("TRUE", true),
            ("True", true),
            ("1", true),
            ("false", false),
            ("FALSE", false),
            ("0", false),
        ] {
            assert_eq!(bool::parse(text), Some(want), "{text}");
        }
        for text in ["2", "yes", " true", "t"] {
            assert_eq!(bool::parse(text), None, "{text}");
        }
    }

    #[test]
    fn encode_keeps_extra_keys_and_replaces_own() {
        let mut ext = fields(&[("MSG_REGION", "DefaultRegion"), ("count", "old")]);
        let demo = Demo {
            name: "n".into(),
            count: 5,
            on: false,
            ..Default::default()
        };
        demo.encode(&mut ext);
        assert_eq!(ext.get("MSG_REGION"), Some("DefaultRegion"));
        assert_eq!(ext.get("count"), Some("5"));
        assert_eq!(ext.get("on"), Some("false"));
        assert_eq!(ext.get("big"), None);
        assert_eq!(Demo::decode(&ext).unwrap(), demo);
    }
}
