//! Test and fuzz support for the typed headers: a byte-driven value source (so proptest
//! and cargo-fuzz drive the same generators), extFields drawn from each header's
//! [`FieldSpec`] table, and round-trip checks run over every header type in
//! [`crate::header`]. Not part of the protocol API; hidden from the docs. The headers
//! themselves know nothing of this module: it reads their tables, so production code
//! carries no generator.

use crate::command::ExtFields;
use crate::header::*;

/// Deterministic values from a byte string; yields zeros once the bytes run out, so any
/// input (including an empty one) produces a value.
pub struct SampleSource<'a> {
    bytes: &'a [u8],
    pos: usize,
}

/// Characters that exercise the JSON escaper and the UTF-8 paths: property separators,
/// quotes, backslash, controls, multi-byte and astral characters, U+2028.
const SPICY: [char; 14] = [
    '\u{1}',
    '\u{2}',
    '"',
    '\\',
    '\n',
    '\u{7f}',
    '\u{9f}',
    'é',
    '中',
    '\u{2028}',
    '\u{1F600}',
    '/',
    ' ',
    '%',
];

impl<'a> SampleSource<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    pub fn is_exhausted(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    pub fn byte(&mut self) -> u8 {
        let byte = self.bytes.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        byte
    }

    /// An integer biased towards the values codecs get wrong: 0, -1, the extremes.
    pub fn int(&mut self) -> i64 {
        match self.byte() % 8 {
            0 => 0,
            1 => -1,
            2 => i64::from(i32::MIN),
            3 => i64::from(i32::MAX),
            4 => i64::MIN,
            5 => i64::MAX,
            6 => i64::from(self.byte()),
            _ => {
                let mut raw = [0u8; 8];
                for slot in &mut raw {
                    *slot = self.byte();
                }
                i64::from_be_bytes(raw)
            }
        }
    }

    /// A short string: empty sometimes, mostly ASCII, with escape-worthy characters.
    pub fn string(&mut self) -> String {
        let len = usize::from(self.byte() % 12);
        let mut text = String::with_capacity(len);
        for _ in 0..len {
            let pick = self.byte();
            if pick < 200 {
                text.push(char::from(b'0' + pick % 75));
            } else {
                text.push(SPICY[usize::from(pick) % SPICY.len()]);
            }
        }
        text
    }
}

/// Text for a value of `kind`, in the spellings clients send (booleans as `1`/`0` and in
/// any case too, boundary types in any case).
fn sample_text(src: &mut SampleSource<'_>, kind: FieldKind) -> String {
    match kind {
        FieldKind::String => src.string(),
        FieldKind::I32 => (src.int() as i32).to_string(),
        FieldKind::I64 => src.int().to_string(),
        FieldKind::Bool => {
            ["true", "false", "1", "0", "TRUE", "False"][usize::from(src.byte()) % 6].to_owned()
        }
        FieldKind::BoundaryType => {
            ["LOWER", "UPPER", "lower", "Upper"][usize::from(src.byte()) % 4].to_owned()
        }
    }
}

/// Adds a value for every field of `table` to `fields`, leaving out optional ones now and
/// then; the result decodes as the header the table belongs to.
pub fn sample_fields(src: &mut SampleSource<'_>, table: &[FieldSpec], fields: &mut ExtFields) {
    for spec in table {
        if spec.optional && src.byte().is_multiple_of(3) {
            continue;
        }
        let text = sample_text(src, spec.kind);
        fields.insert(spec.key, text);
    }
}

/// Lists every header type, for the checks below.
macro_rules! every_header {
    ($callback:ident!($($args:tt)*)) => {
        $callback!(
            ($($args)*)
            RpcFields,
            // send
            SendMessageRequestHeader, SendMessageRequestHeaderV2, SendMessageResponseHeader,
            ConsumerSendMsgBackRequestHeader, RecallMessageRequestHeader,
            RecallMessageResponseHeader, ReplyMessageRequestHeader,
            // pull
            PullMessageRequestHeader, PullMessageResponseHeader,
            // offsets
            QueryConsumerOffsetRequestHeader, QueryConsumerOffsetResponseHeader,
            UpdateConsumerOffsetRequestHeader, UpdateConsumerOffsetResponseHeader,
            GetMaxOffsetRequestHeader, GetMaxOffsetResponseHeader, GetMinOffsetRequestHeader,
            GetMinOffsetResponseHeader, GetEarliestMsgStoretimeRequestHeader,
            GetEarliestMsgStoretimeResponseHeader, SearchOffsetRequestHeader,
            SearchOffsetResponseHeader,
            // lookup
            ViewMessageRequestHeader, QueryMessageRequestHeader, QueryMessageResponseHeader,
            // client
            HeartbeatRequestHeader, HeartbeatResponseHeader, UnregisterClientRequestHeader,
            UnregisterClientResponseHeader, GetConsumerListByGroupRequestHeader,
            NotifyConsumerIdsChangedRequestHeader, LockBatchMqRequestHeader,
            UnlockBatchMqRequestHeader, GetConsumerStatusRequestHeader,
            GetConsumerRunningInfoRequestHeader, ConsumeMessageDirectlyResultRequestHeader,
            // transactions
            EndTransactionRequestHeader, EndTransactionResponseHeader,
            CheckTransactionStateRequestHeader,
            // name server
            GetRouteInfoRequestHeader, RegisterBrokerRequestHeader, RegisterBrokerResponseHeader,
            UnRegisterBrokerRequestHeader, BrokerHeartbeatRequestHeader, RegisterTopicRequestHeader,
            DeleteTopicFromNamesrvRequestHeader, GetTopicsByClusterRequestHeader,
            PutKvConfigRequestHeader, GetKvConfigRequestHeader, GetKvConfigResponseHeader,
            DeleteKvConfigRequestHeader, GetKvListByNamespaceRequestHeader,
            WipeWritePermOfBrokerRequestHeader, WipeWritePermOfBrokerResponseHeader,
            AddWritePermOfBrokerRequestHeader, AddWritePermOfBrokerResponseHeader,
            QueryDataVersionRequestHeader, QueryDataVersionResponseHeader,
            GetBrokerMemberGroupRequestHeader,
            // admin
            CreateTopicRequestHeader, CreateTopicListRequestHeader, DeleteTopicRequestHeader,
            GetAllTopicConfigRequestHeader, GetAllTopicConfigResponseHeader,
            GetAllSubscriptionGroupRequestHeader, GetAllSubscriptionGroupResponseHeader,
            CreateSubscriptionGroupRequestHeader, DeleteSubscriptionGroupRequestHeader,
            GetSubscriptionGroupConfigRequestHeader, GetTopicConfigRequestHeader,
            GetTopicStatsInfoRequestHeader, GetConsumeStatsRequestHeader,
            GetBrokerConfigResponseHeader, GetConsumerConnectionListRequestHeader,
            GetProducerConnectionListRequestHeader, GetAllProducerInfoRequestHeader,
            QueryTopicConsumeByWhoRequestHeader, QueryTopicsByConsumerRequestHeader,
            QuerySubscriptionByConsumerRequestHeader, ResetOffsetRequestHeader,
            QueryConsumeTimeSpanRequestHeader, QueryConsumeQueueRequestHeader,
            QueryCorrectionOffsetHeader, CloneGroupOffsetRequestHeader,
            ViewBrokerStatsDataRequestHeader, GetConsumeStatsInBrokerHeader,
            UpdateGroupForbiddenRequestHeader, ResumeCheckHalfMessageRequestHeader,
            InitConsumerOffsetRequestHeader, ExchangeHaInfoRequestHeader,
            ExchangeHaInfoResponseHeader, NotifyMinBrokerIdChangeRequestHeader,
            ResetMasterFlushOffsetHeader, AddBrokerRequestHeader, RemoveBrokerRequestHeader,
            CheckRocksdbCqWriteProgressRequestHeader, ExportRocksDbConfigToJsonRequestHeader,
            // POP
            PopMessageRequestHeader, PopMessageResponseHeader, AckMessageRequestHeader,
            ChangeInvisibleTimeRequestHeader, ChangeInvisibleTimeResponseHeader,
            NotificationRequestHeader, NotificationResponseHeader, PeekMessageRequestHeader,
            PollingInfoRequestHeader, PollingInfoResponseHeader,
        )
    };
}

/// How many header types [`check_decoded`] and [`check_sampled`] cover.
pub fn header_type_count() -> usize {
    macro_rules! count {
        (() $($name:ident,)*) => { [$(stringify!($name)),*].len() };
    }
    every_header!(count!())
}

/// Decodes `fields` as every header type; each one that decodes must re-encode to a map
/// that decodes to the same value. Returns how many types decoded, or names the type
/// whose round trip broke. This is the fuzz oracle for header decoding; it also holds the
/// broker's borrowed send and pull decoders to the owned ones ([`check_borrowed`]).
pub fn check_decoded(fields: &ExtFields) -> Result<usize, String> {
    check_borrowed(fields)?;
    macro_rules! check {
        (() $($name:ident,)*) => {{
            let mut decoded = 0usize;
            $(
                if let Ok(header) = <$name as CommandHeader>::decode(fields) {
                    decoded += 1;
                    let again = <$name as CommandHeader>::decode(&header.to_ext_fields());
                    if again.as_ref() != Ok(&header) {
                        return Err(format!(
                            "{}: {header:?} re-decoded as {again:?}",
                            stringify!($name)
                        ));
                    }
                }
            )*
            Ok(decoded)
        }};
    }
    every_header!(check!())
}

/// Draws one value of every header type from `src` (extFields from its table, decoded),
/// encodes it, passes the map through
/// `transport` (e.g. a frame encode/decode) and decodes it again. With `empty_is_null`
/// (the ROCKETMQ binary header drops empty values) the expected value is what decoding the
/// encoded map minus its empty values gives; otherwise it is the sampled value itself.
pub fn check_sampled(
    src: &mut SampleSource<'_>,
    transport: &mut dyn FnMut(&ExtFields) -> ExtFields,
    empty_is_null: bool,
) -> Result<usize, String> {
    macro_rules! check {
        (() $($name:ident,)*) => {{
            let mut checked = 0usize;
            $(
                let mut sampled = ExtFields::new();
                sample_fields(src, $name::FIELDS, &mut sampled);
                if $name::HAS_RPC {
                    sample_fields(src, RpcFields::FIELDS, &mut sampled);
                }
                let header = <$name as CommandHeader>::decode(&sampled).map_err(|e| {
                    format!("{}: sampled fields do not decode: {e}", stringify!($name))
                })?;
                let encoded = header.to_ext_fields();
                let got = <$name as CommandHeader>::decode(&transport(&encoded));
                let want = if empty_is_null {
                    let stripped: ExtFields = encoded.iter().filter(|(_, v)| !v.is_empty()).collect();
                    <$name as CommandHeader>::decode(&stripped)
                } else {
                    Ok(header.clone())
                };
                if got != want {
                    return Err(format!(
                        "{}: sampled {header:?}, expected {want:?}, got {got:?}",
                        stringify!($name)
                    ));
                }
                checked += 1;
            )*
            Ok(checked)
        }};
    }
    every_header!(check!())
}

/// Whether a decode error names one of the `+rpc` keys, which the borrowed decoders do
/// not read (the broker name aside, a plain string that cannot fail).
fn is_rpc_error(error: &HeaderError) -> bool {
    let field = match error {
        HeaderError::Missing { field } | HeaderError::Malformed { field, .. } => field,
    };
    RpcFields::KEYS.contains(field)
}

/// Compares a borrowed decode with the owned one: equal values when the owned decode
/// succeeds (the `+rpc` keys the borrowed header does not carry cleared), the same error
/// when it fails on a key both read.
fn compare_borrowed<T: PartialEq + std::fmt::Debug>(
    what: &str,
    borrowed: Result<T, HeaderError>,
    owned: Result<T, HeaderError>,
) -> Result<(), String> {
    match (&borrowed, &owned) {
        (Ok(b), Ok(o)) if b == o => Ok(()),
        (_, Err(e)) if is_rpc_error(e) => Ok(()),
        (Err(b), Err(o)) if b == o => Ok(()),
        _ => Err(format!(
            "{what}: borrowed decode {borrowed:?}, owned decode {owned:?}"
        )),
    }
}

/// The borrowed send and pull headers (the decoders the broker runs per request) decode
/// `fields` exactly as the owned typed headers do, for a long-name code (10) and a
/// one-letter one (310).
pub fn check_borrowed(fields: &ExtFields) -> Result<(), String> {
    for code in [10, 310] {
        let borrowed =
            SendMessageHeaderRef::decode_for_code(code, fields).map(|h| h.to_owned_header());
        let owned = SendMessageRequestHeader::decode_for_code(code, fields).map(|h| {
            SendMessageRequestHeader {
                rpc: RpcFields {
                    broker_name: h.rpc.broker_name.clone(),
                    ..RpcFields::default()
                },
                ..h
            }
        });
        compare_borrowed(&format!("send code {code}"), borrowed, owned)?;
    }
    let borrowed = PullMessageHeaderRef::decode(fields).map(|h| h.to_owned_header());
    let owned = PullMessageRequestHeader::decode(fields).map(|h| PullMessageRequestHeader {
        rpc: RpcFields::default(),
        ..h
    });
    compare_borrowed("pull", borrowed, owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampled_round_trip_through_maps() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..200 {
            let bytes: Vec<u8> = (0..512)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect();
            let mut src = SampleSource::new(&bytes);
            let checked = check_sampled(&mut src, &mut |f| f.clone(), false).unwrap();
            assert_eq!(checked, header_type_count());
        }
    }

    #[test]
    fn empty_source_still_samples() {
        let mut src = SampleSource::new(&[]);
        assert!(check_sampled(&mut src, &mut |f| f.clone(), false).is_ok());
        assert!(src.is_exhausted());
    }

    #[test]
    fn check_decoded_counts_and_catches() {
        let fields: ExtFields = [("topic", "T"), ("queueId", "1"), ("offset", "5")]
            .into_iter()
            .collect();
        let decoded = check_decoded(&fields).unwrap();
        assert!(decoded >= 5, "{decoded}");
        assert!(header_type_count() > 90);
    }
}
