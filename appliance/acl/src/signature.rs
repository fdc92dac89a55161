//! Upstream's request signature: HmacSHA1, keyed by the account's secret, over the values
//! of the request's `extFields` in key order (the `Signature` field left out) followed by
//! the body, Base64-encoded into the `Signature` field. The client adds `AccessKey` (and
//! `SecurityToken` when it has one) before signing, so they are covered too.
//!
//! Keys are ordered by Java's `String.compareTo` (UTF-16 code units); for the ASCII keys
//! of every RocketMQ header this is byte order, and non-ASCII keys are ordered by code unit
//! here too so a client and ringmq never disagree.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use ringmq_remoting::RemotingCommand;

/// The extFields key carrying the account's access key.
pub const ACCESS_KEY: &str = "AccessKey";
/// The extFields key carrying the Base64 signature.
pub const SIGNATURE: &str = "Signature";
/// The extFields key of an STS token, signed like any other field.
pub const SECURITY_TOKEN: &str = "SecurityToken";
/// Left out of the signed content for clients at or below V4_9_3 (ordinal 399), whose
/// signing hook did not see this key because it was added after signing.
const UNIQUE_KEY_QUERY: &str = "_UNIQUE_KEY_QUERY";
const V4_9_3: i32 = 399;

/// An account's access key and secret, as a client signs with them.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
    pub security_token: Option<String>,
}

impl Credentials {
    /// An account without an STS token, as plain ACL accounts are.
    pub fn new(access_key: impl Into<String>, secret_key: impl Into<String>) -> Credentials {
        Credentials {
            access_key: access_key.into(),
            secret_key: secret_key.into(),
            security_token: None,
        }
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret never reaches a log line.
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .finish_non_exhaustive()
    }
}

/// Hands the bytes the signature covers to `sink`, piece by piece: every extFields value
/// but `Signature`'s, in key order, then the body. The one definition of the layout, for
/// the broker's check and the client's signing alike; nothing is copied.
fn for_each_content_piece(request: &RemotingCommand, mut sink: impl FnMut(&[u8])) {
    let skip_unique_key = request.version <= V4_9_3;
    let mut fields: Vec<(&str, &str)> = request
        .ext_fields
        .iter()
        .filter(|(k, _)| *k != SIGNATURE && !(skip_unique_key && *k == UNIQUE_KEY_QUERY))
        .collect();
    fields.sort_by(|a, b| java_order(a.0, b.0));
    for (_, value) in fields {
        sink(value.as_bytes());
    }
    sink(&request.body);
}

/// The bytes the signature covers, in one buffer (for tests and diagnostics).
pub fn request_content(request: &RemotingCommand) -> Vec<u8> {
    let mut content = Vec::new();
    for_each_content_piece(request, |piece| content.extend_from_slice(piece));
    content
}

fn mac(secret_key: &str) -> Hmac<sha1::Sha1> {
    Hmac::<sha1::Sha1>::new_from_slice(secret_key.as_bytes())
        .expect("HMAC takes a key of any length")
}

fn encode(mac: Hmac<sha1::Sha1>) -> String {
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// Base64(HmacSHA1(secret, content)), the value of the `Signature` field.
pub fn signature(secret_key: &str, content: &[u8]) -> String {
    let mut mac = mac(secret_key);
    mac.update(content);
    encode(mac)
}

/// The signature of `request` under `secret_key`, MACed straight from its fields and body.
pub fn request_signature(secret_key: &str, request: &RemotingCommand) -> String {
    let mut mac = mac(secret_key);
    for_each_content_piece(request, |piece| mac.update(piece));
    encode(mac)
}

/// Whether `given` is the signature of `request` under `secret_key`. The comparison takes
/// the same time wherever the first differing byte is, so timing does not reveal how much
/// of a forged signature was right.
pub fn verify(secret_key: &str, request: &RemotingCommand, given: &str) -> bool {
    let expected = request_signature(secret_key, request);
    expected.len() == given.len()
        && expected
            .bytes()
            .zip(given.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// Signs a request as upstream's client hook does: adds `AccessKey` (and `SecurityToken`),
/// then `Signature` over every field already in the header and the body. Call it last,
/// after the header and body are final.
pub fn sign(request: &mut RemotingCommand, credentials: &Credentials) {
    request.ext_fields.remove(SIGNATURE);
    request
        .ext_fields
        .insert(ACCESS_KEY, &credentials.access_key);
    if let Some(token) = &credentials.security_token {
        request.ext_fields.insert(SECURITY_TOKEN, token);
    }
    let sig = request_signature(&credentials.secret_key, request);
    request.ext_fields.insert(SIGNATURE, &sig);
}

/// Java's `String.compareTo`: UTF-16 code unit order.
fn java_order(a: &str, b: &str) -> std::cmp::Ordering {
    if a.is_ascii() && b.is_ascii() {
        return a.cmp(b);
    }
    a.encode_utf16().cmp(b.encode_utf16())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(fields: &[(&str, &str)], body: &[u8]) -> RemotingCommand {
        let mut r = RemotingCommand::request(310, 1);
        for (k, v) in fields {
            r.ext_fields.insert(*k, *v);
        }
        r.body = bytes::Bytes::copy_from_slice(body);
        r
    }

    #[test]
    fn content_is_values_in_key_order_then_body_without_the_signature() {
        let r = request(
            &[
                ("b", "topicA"),
                ("Signature", "x"),
                ("AccessKey", "rocketmq2"),
                ("a", "1"),
            ],
            b"hello",
        );
        assert_eq!(request_content(&r), b"rocketmq21topicAhello");
    }

    #[test]
    fn old_clients_unique_key_flag_is_left_out_newer_ones_keep_it() {
        let mut r = request(&[("_UNIQUE_KEY_QUERY", "true"), ("topic", "T")], b"");
        r.version = 399;
        assert_eq!(request_content(&r), b"T");
        r.version = 400;
        assert_eq!(request_content(&r), b"trueT");
    }

    /// Signatures computed outside ringmq, with Python's `hmac` and `base64` over the byte
    /// layout upstream documents (values in key order, then the body).
    #[test]
    fn golden_signatures_from_an_independent_implementation() {
        let worked = request(
            &[("AccessKey", "rocketmq2"), ("a", "1"), ("b", "topicA")],
            b"hello",
        );
        assert_eq!(
            signature("12345678", &request_content(&worked)),
            "9leZtC79TvRQGAv6eYD/n/41FTU="
        );
        let ali_ons = request(
            &[("OnsChannel", "ALIYUN"), ("AccessKey", "producer01")],
            b"body",
        );
        assert_eq!(
            signature("secret-producer", &request_content(&ali_ons)),
            "YA5ysLWnhrxur67UCv6++Urr+cE="
        );
        let unicode = request(&[("k", "ключ✓")], &[0, 255, 1]);
        assert_eq!(
            signature("秘密-key", &request_content(&unicode)),
            "t7x6zUEHp6SBgR83WPVnCy+gnNY="
        );
    }

    #[test]
    fn rfc2202_hmac_sha1_vector() {
        // RFC 2202 test case 2: key "Jefe", data "what do ya want for nothing?".
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "7/zfauXrL6LSdBbV8YTfnCWafHk="
        );
    }

    #[test]
    fn a_signed_request_verifies_and_any_change_breaks_it() {
        let creds = Credentials::new("rocketmq2", "12345678");
        let mut r = request(&[("a", "PG"), ("b", "T")], b"body");
        sign(&mut r, &creds);
        let given = r.ext_fields.get(SIGNATURE).unwrap().to_string();
        assert!(verify("12345678", &r, &given));
        assert!(!verify("12345679", &r, &given));
        assert_eq!(signature("12345678", &request_content(&r)), given);
        r.body = bytes::Bytes::from_static(b"bodz");
        assert!(!verify("12345678", &r, &given));
    }

    #[test]
    fn keys_order_as_java_strings() {
        assert_eq!(java_order("B", "a"), std::cmp::Ordering::Less);
        // U+FF21 (one UTF-16 unit) sorts before U+1F600 (a surrogate pair starting 0xD83D)
        // in bytes too; U+E000 sorts after the surrogate in UTF-16 but before it in UTF-8.
        assert_eq!(
            java_order("\u{E000}", "\u{1F600}"),
            std::cmp::Ordering::Greater
        );
    }
}
