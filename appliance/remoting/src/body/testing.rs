//! Test and fuzz support for the bodies: [`check_bodies`] feeds one byte string to every
//! body decoder ringmq runs on bytes from the network or from disk and checks that what
//! decodes survives encode -> decode unchanged. The fuzz target and the protocol tests
//! share it, so both cover exactly the decoders production calls. Not part of the protocol
//! API; hidden from the docs.

use crate::body::cluster::{BrokerMemberGroup, ClusterInfo};
use crate::body::consumer::{
    ConsumerConnection, GetConsumerListByGroupResponseBody, LockBatchRequestBody,
    LockBatchResponseBody, ProducerConnection, ResetOffsetBody, ResetOffsetBodyForC,
};
use crate::body::heartbeat::HeartbeatData;
use crate::body::kv::{KvConfigSerializeWrapper, KvTable, Properties};
use crate::body::register::{RegisterBrokerBody, VERSION_V3_0_11, VERSION_V5_0_0};
use crate::body::route::TopicRouteData;
use crate::body::stats::{BrokerStatsData, ConsumeStats, TopicStatsTable};
use crate::body::subscription::{SubscriptionGroupConfig, SubscriptionGroupWrapper};
use crate::body::topic::{
    DataVersion, TopicConfig, TopicConfigAndMappingSerializeWrapper, TopicConfigSerializeWrapper,
    TopicList,
};
use crate::json::KeyStyle;

/// Names of the body types [`check_bodies`] decodes, in the order it tries them.
pub const BODY_TYPES: &[&str] = &[
    "HeartbeatData",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "GetConsumerListByGroupResponseBody",
    "ConsumerConnection",
    "ProducerConnection",
    "ResetOffsetBody",
    "ResetOffsetBodyForC",
    "KvTable",
    "KvConfigSerializeWrapper",
    "Properties",
    "DataVersion",
    "TopicConfig",
    "TopicConfigSerializeWrapper",
    "TopicConfigAndMappingSerializeWrapper",
    "TopicList",
    "TopicRouteData",
    "ClusterInfo",
    "BrokerMemberGroup",
    "RegisterBrokerBody",
    "ConsumeStats",
    "TopicStatsTable",
    "BrokerStatsData",
    "SubscriptionGroupConfig",
    "SubscriptionGroupWrapper",
    "SyncStateSet",
    "ElectMasterResponseBody",
    "BrokerReplicasInfo",
    "EpochEntryCache",
];

/// `Ok(true)` when `first` decoded and its encoding decodes to the same value, `Ok(false)`
/// when `first` did not decode, `Err` naming `name` when the round trip changed the value.
fn round_trip<T: PartialEq + std::fmt::Debug, E>(
    name: &str,
    first: Result<T, E>,
    encode: impl Fn(&T) -> Vec<u8>,
    decode: impl Fn(&[u8]) -> Result<T, E>,
) -> Result<bool, String> {
    let Ok(value) = first else {
        return Ok(false);
    };
    let wire = encode(&value);
    match decode(&wire) {
        Ok(again) if again == value => Ok(true),
        Ok(again) => Err(format!("{name}: {value:?} re-decoded as {again:?}")),
        Err(_) => Err(format!(
            "{name}: {value:?} encoded as {:?}, which does not decode",
            String::from_utf8_lossy(&wire)
        )),
    }
}

/// The controller's bodies (they encode to bytes, not text).
fn check_controller_bodies(body: &[u8]) -> Result<usize, String> {
    use crate::body::controller::{
        BrokerReplicasInfo, ElectMasterResponseBody, EpochEntryCache, SyncStateSet,
    };
    let mut decoded = 0usize;
    macro_rules! bytes_bodies {
        ($($ty:ident),*) => {$(
            decoded += usize::from(round_trip(stringify!($ty), $ty::decode(body), $ty::encode, $ty::decode)?);
        )*};
    }
    bytes_bodies!(
        SyncStateSet,
        ElectMasterResponseBody,
        BrokerReplicasInfo,
        EpochEntryCache
    );
    Ok(decoded)
}

/// Decodes `body` as every body type of [`BODY_TYPES`]; each one that decodes must
/// re-encode to bytes that decode to the same value. Returns how many decoded, or names
/// the type whose round trip broke. This is the fuzz oracle for body decoding.
pub fn check_bodies(body: &[u8]) -> Result<usize, String> {
    macro_rules! plain {
        ($($ty:ident),* $(,)?) => {{
            let mut decoded = 0usize;
            $(
                decoded += usize::from(round_trip(
                    stringify!($ty),
                    $ty::decode(body),
                    |v| v.encode().into_bytes(),
                    $ty::decode,
                )?);
            )*
            decoded
        }};
    }
    let mut decoded = plain!(
        HeartbeatData,
        LockBatchRequestBody,
        LockBatchResponseBody,
        GetConsumerListByGroupResponseBody,
        ConsumerConnection,
        ProducerConnection,
        ResetOffsetBody,
        ResetOffsetBodyForC,
        KvTable,
        KvConfigSerializeWrapper,
        DataVersion,
        TopicConfigSerializeWrapper,
        TopicConfigAndMappingSerializeWrapper,
        TopicList,
        ConsumeStats,
        TopicStatsTable,
        BrokerStatsData,
    );
    decoded += check_controller_bodies(body)?;
    decoded += check_settled_bodies(body)?;
    decoded += check_text_bodies(body)?;
    decoded += check_routing_bodies(body)?;
    decoded += check_register_body(body)?;
    Ok(decoded)
}

/// Bodies whose first encoding may normalise the input as upstream's does (a `null`
/// retry policy is left out when written, so it reads back as the default): from the
/// first re-encoding on, decode → encode → decode must give the same value.
fn check_settled_bodies(body: &[u8]) -> Result<usize, String> {
    fn settled<T: PartialEq + std::fmt::Debug, E>(
        name: &str,
        first: Result<T, E>,
        encode: impl Fn(&T) -> Vec<u8>,
        decode: impl Fn(&[u8]) -> Result<T, E>,
    ) -> Result<bool, String> {
        let Ok(value) = first else {
            return Ok(false);
        };
        let wire = encode(&value);
        let Ok(normal) = decode(&wire) else {
            return Err(format!(
                "{name}: {value:?} encoded as {:?}, which does not decode",
                String::from_utf8_lossy(&wire)
            ));
        };
        round_trip(name, Ok::<T, E>(normal), encode, decode)
    }
    let group = settled(
        "SubscriptionGroupConfig",
        SubscriptionGroupConfig::decode(body),
        |v| v.encode().into_bytes(),
        SubscriptionGroupConfig::decode,
    )?;
    let wrapper = settled(
        "SubscriptionGroupWrapper",
        SubscriptionGroupWrapper::decode(body),
        |v| v.encode().into_bytes(),
        SubscriptionGroupWrapper::decode,
    )?;
    Ok(usize::from(group) + usize::from(wrapper))
}

/// The line-oriented texts: a properties file (UPDATE_BROKER_CONFIG) and one topic's
/// config line (`topics.json` and the compressed register body).
fn check_text_bodies(body: &[u8]) -> Result<usize, String> {
    let Ok(text) = std::str::from_utf8(body) else {
        return Ok(0);
    };
    let from_utf8 = |b: &[u8]| std::str::from_utf8(b).map(str::to_owned);
    let properties = round_trip(
        "Properties",
        Properties::parse(text).map_err(|e| e.to_string()),
        // The escaped form: plain `to_text` is upstream's lossy properties2String shape.
        |p| p.to_text_escaped().into_bytes(),
        |b| {
            from_utf8(b)
                .map_err(|e| e.to_string())
                .and_then(|t| Properties::parse(&t).map_err(|e| e.to_string()))
        },
    )?;
    let topic = round_trip(
        "TopicConfig",
        TopicConfig::decode_text(text).map_err(|e| e.to_string()),
        |c| c.encode_text().into_bytes(),
        |b| {
            from_utf8(b)
                .map_err(|e| e.to_string())
                .and_then(|t| TopicConfig::decode_text(&t).map_err(|e| e.to_string()))
        },
    )?;
    Ok(usize::from(properties) + usize::from(topic))
}

/// Bodies with two key styles or an optional payload: routes, cluster info, member group.
fn check_routing_bodies(body: &[u8]) -> Result<usize, String> {
    let mut decoded = 0usize;
    for keys in [KeyStyle::Quoted, KeyStyle::Bare] {
        decoded += usize::from(round_trip(
            "TopicRouteData",
            TopicRouteData::decode(body),
            |r| r.encode(keys).into_bytes(),
            TopicRouteData::decode,
        )?);
        decoded += usize::from(round_trip(
            "ClusterInfo",
            ClusterInfo::decode(body),
            |c| c.encode(keys).into_bytes(),
            ClusterInfo::decode,
        )?);
    }
    // Each of the two decoded once per key style; count the type once.
    decoded /= 2;
    if let Ok(Some(group)) = BrokerMemberGroup::decode_response_body(body) {
        let again =
            BrokerMemberGroup::decode_response_body(group.encode_response_body().as_bytes());
        if again.as_ref() != Ok(&Some(group.clone())) {
            return Err(format!(
                "BrokerMemberGroup: {group:?} re-decoded as {again:?}"
            ));
        }
        decoded += 1;
    }
    Ok(decoded)
}

/// REGISTER_BROKER's body as the name server reads it: JSON from a current broker, the
/// compressed layout from a V5 broker, and the bare wrapper an old broker sends (decoded
/// only: that form has no encoder).
fn check_register_body(body: &[u8]) -> Result<usize, String> {
    let _ = RegisterBrokerBody::decode(body, false, VERSION_V3_0_11 - 1);
    let json = round_trip(
        "RegisterBrokerBody (JSON)",
        RegisterBrokerBody::decode(body, false, VERSION_V3_0_11),
        |b| b.encode_json().into_bytes(),
        |b| RegisterBrokerBody::decode(b, false, VERSION_V3_0_11),
    )?;
    let compressed = round_trip(
        "RegisterBrokerBody (compressed)",
        RegisterBrokerBody::decode(body, true, VERSION_V5_0_0),
        |b| b.encode_compressed(),
        |b| RegisterBrokerBody::decode(b, true, VERSION_V5_0_0),
    )?;
    Ok(usize::from(json) + usize::from(compressed))
}
