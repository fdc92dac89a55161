//! The logical Remoting command: header fields, custom-header map and body, and its two
//! header serializations (JSON, type 0; ROCKETMQ binary, type 1). See `remoting.md` §3-§7.

use bytes::{BufMut, Bytes, BytesMut};

use crate::codes::LanguageCode;
use crate::header::{CommandHeader, HeaderError};

/// Bit 0 of `flag`: the command is a response.
pub const FLAG_RESPONSE: i32 = 0x1;
/// Bit 1 of `flag`: a oneway request; the receiver must not answer.
pub const FLAG_ONEWAY: i32 = 0x2;

/// How a command's header was (or will be) serialized; the top byte of the header-length
/// word on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SerializeType {
    #[default]
    Json = 0,
    RocketMq = 1,
}

/// The custom header map (`extFields`): insertion-ordered name → text pairs.
///
/// A small vector beats a hash map here: requests carry at most ~20 keys and are read a
/// few times each. Later duplicates overwrite earlier ones, as Java's map would.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtFields {
    entries: Vec<(String, String)>,
}

impl ExtFields {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            entries: Vec::with_capacity(capacity),
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Sets `key` to `value`, replacing an existing value.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let key = key.into();
        let value = value.into();
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.entries.push((key, value)),
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<String> {
        let index = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(index).1)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.entries.iter().any(|(k, _)| k == key)
    }

    /// Entries in insertion order (the order they arrived in, or were inserted).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

impl<'a> IntoIterator for &'a ExtFields {
    type Item = (&'a str, &'a str);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, String)>,
        fn(&'a (String, String)) -> (&'a str, &'a str),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for ExtFields {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut fields = ExtFields::new();
        for (k, v) in iter {
            fields.insert(k, v);
        }
        fields
    }
}

/// One Remoting command, request or response.
#[derive(Debug, Clone, PartialEq)]
pub struct RemotingCommand {
    /// Request code (requests) or response code (responses); see [`crate::codes`].
    pub code: i32,
    pub language: LanguageCode,
    pub version: i32,
    pub opaque: i32,
    pub flag: i32,
    pub remark: Option<String>,
    pub ext_fields: ExtFields,
    pub body: Bytes,
    /// The header serialization this command arrived in, or will be written in.
    pub serialize_type: SerializeType,
}

impl RemotingCommand {
    /// A new request with ringmq's language and version and an empty header.
    pub fn request(code: i32, opaque: i32) -> Self {
        Self {
            code,
            language: LanguageCode::Java,
            version: crate::RINGMQ_VERSION,
            opaque,
            flag: 0,
            remark: None,
            ext_fields: ExtFields::new(),
            body: Bytes::new(),
            serialize_type: SerializeType::Json,
        }
    }

    /// The response to `self` with `code` and `remark`: same opaque and serialize type,
    /// response bit set, language `JAVA` (every client accepts it; `remoting.md` §4).
    pub fn response_to(&self, code: i32, remark: Option<String>) -> Self {
        Self {
            code,
            language: LanguageCode::Java,
            version: crate::RINGMQ_VERSION,
            opaque: self.opaque,
            flag: FLAG_RESPONSE,
            remark,
            ext_fields: ExtFields::new(),
            body: Bytes::new(),
            serialize_type: self.serialize_type,
        }
    }

    pub fn is_response(&self) -> bool {
        self.flag & FLAG_RESPONSE != 0
    }

    pub fn is_oneway(&self) -> bool {
        self.flag & FLAG_ONEWAY != 0
    }

    pub fn mark_oneway(&mut self) {
        self.flag |= FLAG_ONEWAY;
    }

    pub fn with_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    pub fn with_ext(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.ext_fields.insert(key, value);
        self
    }

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

    /// Appends the whole frame (length word, header-length word, header, body) to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        self.encode_header_for_body(self.body.len(), out);
        out.extend_from_slice(&self.body);
    }

    /// Encodes the frame with only the header (and the length words counting `body_len`
    /// more bytes the caller writes itself, e.g. by splice/sendfile from the CommitLog).
    ///
    /// The caller keeps frames within the peer's bound (16 MiB by default); a header
    /// beyond the 24-bit header-length field cannot be framed and is a bug upstream of
    /// this codec (headers are a few hundred bytes).
    pub fn encode_header_for_body(&self, body_len: usize, out: &mut BytesMut) {
        let start = out.len();
        out.put_u32(0); // frame length, patched below
        out.put_u32(0); // header length and type, patched below
        let header_start = out.len();
        match self.serialize_type {
            SerializeType::Json => json_header::write(self, out),
            SerializeType::RocketMq => binary_header::write(self, out),
        }
        let header_len = out.len() - header_start;
        debug_assert!(
            header_len <= 0x00FF_FFFF,
            "header of {header_len} bytes overflows the 24-bit length"
        );
        let frame_len = 4 + header_len + body_len;
        let word = ((self.serialize_type as u32) << 24) | (header_len as u32 & 0x00FF_FFFF);
        out[start..start + 4].copy_from_slice(&(frame_len as u32).to_be_bytes());
        out[start + 4..start + 8].copy_from_slice(&word.to_be_bytes());
    }
}

/// Why a header could not be decoded. The connection that sent it is closed with this
/// reason logged (as Java's decoder does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderDecodeError {
    /// The serialize-type byte is neither 0 (JSON) nor 1 (ROCKETMQ).
    UnknownSerializeType(u8),
    /// The JSON header is not a JSON object, or a field has the wrong JSON type.
    Json(String),
    /// A length inside the binary header runs past the header.
    Binary(String),
}

impl std::fmt::Display for HeaderDecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UnknownSerializeType(t) => write!(f, "unknown header serialize type {t}"),
            Self::Json(why) => write!(f, "malformed JSON header: {why}"),
            Self::Binary(why) => write!(f, "malformed ROCKETMQ binary header: {why}"),
        }
    }
}

impl std::error::Error for HeaderDecodeError {}

pub mod binary_header;
pub mod json_header;
