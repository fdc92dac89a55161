//! The stored CommitLog record codec (`message-format.md` §5, `store.md` §2.2).
//!
//! Owns the byte layout of one message as it sits in the CommitLog and as it travels in
//! pull/query responses: encoding a message into the v1 (1-byte topic length) or v2
//! (2-byte topic length) record with IPv4 or IPv6 hosts, decoding and validating a record
//! (including the end-of-file BLANK filler and the optional body CRC check), and the field
//! positions the store's append stage patches in place (QUEUEOFFSET, PHYSICALOFFSET,
//! STORETIMESTAMP) so a record can be encoded off the serialization point and finished
//! inside it with three stores.
//!
//! Sans-IO: no clocks, no files. All integers are big-endian.

use bytes::{BufMut, BytesMut};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Magic of a v1 record: the topic length is one (signed) byte.
pub const MAGIC_V1: i32 = 0xDAA3_20A7_u32 as i32;
/// Magic of a v2 record: the topic length is an int16 (topics longer than 127 bytes).
pub const MAGIC_V2: i32 = 0xDAA3_20AB_u32 as i32;
/// Magic of the end-of-file filler: TOTALSIZE is the rest of the segment.
pub const BLANK_MAGIC: i32 = 0xCBD4_3194_u32 as i32;
/// Bytes the BLANK filler actually writes (TOTALSIZE + MAGICCODE); an append needs this
/// much room left after the record so a filler always fits.
pub const BLANK_RECORD_SIZE: usize = 8;

/// Position of TOTALSIZE (int32).
pub const TOTAL_SIZE_POSITION: usize = 0;
/// Position of MAGICCODE (int32).
pub const MAGIC_POSITION: usize = 4;
/// Position of BODYCRC (int32).
pub const BODY_CRC_POSITION: usize = 8;
/// Position of QUEUEID (int32).
pub const QUEUE_ID_POSITION: usize = 12;
/// Position of FLAG (int32).
pub const FLAG_POSITION: usize = 16;
/// Position of QUEUEOFFSET (int64), patched by the append stage.
pub const QUEUE_OFFSET_POSITION: usize = 20;
/// Position of PHYSICALOFFSET (int64), patched by the append stage.
pub const PHYSICAL_OFFSET_POSITION: usize = 28;
/// Position of SYSFLAG (int32).
pub const SYSFLAG_POSITION: usize = 36;
/// Position of BORNTIMESTAMP (int64).
pub const BORN_TIMESTAMP_POSITION: usize = 40;
/// Position of BORNHOST (4+4 or 16+4 bytes).
pub const BORN_HOST_POSITION: usize = 48;
/// Position of STORETIMESTAMP when the born host is IPv4; use
/// [`store_timestamp_position`] for records that may carry an IPv6 born host.
pub const STORE_TIMESTAMP_POSITION_V4: usize = 56;
/// Smallest bytes needed to read every fixed field up to SYSFLAG, which decides the rest.
pub const MIN_HEADER_SIZE: usize = SYSFLAG_POSITION + 4;
/// Largest property block: its length field is an int16.
pub const MAX_PROPERTIES_SIZE: usize = i16::MAX as usize;

/// SYSFLAG bit: BORNHOST is 16+4 bytes.
pub const SYSFLAG_BORNHOST_V6: i32 = 0x10;
/// SYSFLAG bit: STOREHOST is 16+4 bytes.
pub const SYSFLAG_STOREHOST_V6: i32 = 0x20;
/// SYSFLAG transaction-type mask (bits 2-3).
pub const SYSFLAG_TRANSACTION_MASK: i32 = 0x0C;
/// Transaction type: normal message.
pub const TRANSACTION_NOT_TYPE: i32 = 0x00;
/// Transaction type: half (prepared) message; gets no queue offset.
pub const TRANSACTION_PREPARED_TYPE: i32 = 0x04;
/// Transaction type: committed copy.
pub const TRANSACTION_COMMIT_TYPE: i32 = 0x08;
/// Transaction type: rollback marker; gets no queue offset and is not indexed.
pub const TRANSACTION_ROLLBACK_TYPE: i32 = 0x0C;

/// Topic byte length above which the encoder switches to v2 (`autoMessageVersionOnTopicLen`).
pub const V1_MAX_TOPIC_LEN: usize = 127;

/// Record format version, chosen by magic code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordVersion {
    /// `0xDAA320A7`: 1-byte topic length.
    V1,
    /// `0xDAA320AB`: 2-byte topic length.
    V2,
}

impl RecordVersion {
    /// The magic code written for this version.
    pub fn magic(self) -> i32 {
        match self {
            RecordVersion::V1 => MAGIC_V1,
            RecordVersion::V2 => MAGIC_V2,
        }
    }
    /// Size of the topic length field.
    pub fn topic_len_size(self) -> usize {
        match self {
            RecordVersion::V1 => 1,
            RecordVersion::V2 => 2,
        }
    }
    /// Version for a magic code, `None` for BLANK or anything unknown.
    pub fn from_magic(magic: i32) -> Option<Self> {
        match magic {
            MAGIC_V1 => Some(RecordVersion::V1),
            MAGIC_V2 => Some(RecordVersion::V2),
            _ => None,
        }
    }
    /// The version the broker picks for a topic (v2 only when the topic needs it).
    pub fn for_topic(topic: &str) -> Self {
        if topic.len() > V1_MAX_TOPIC_LEN {
            RecordVersion::V2
        } else {
            RecordVersion::V1
        }
    }
}

/// Why a record could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordError {
    /// Fewer bytes than the record (or its fixed header) needs.
    Truncated { needed: usize, available: usize },
    /// MAGICCODE is neither v1, v2 nor BLANK.
    BadMagic { magic: i32 },
    /// TOTALSIZE is not positive or smaller than a minimal record.
    BadTotalSize { total_size: i32 },
    /// TOTALSIZE disagrees with the length recomputed from the variable fields.
    LengthMismatch { declared: usize, computed: usize },
    /// A length field inside the record is negative.
    NegativeLength { field: &'static str, value: i32 },
    /// BODYCRC does not match the body bytes.
    BodyCrcMismatch { stored: i32, computed: i32 },
    /// The topic is not UTF-8.
    TopicNotUtf8,
    /// Topic too long for the chosen version (v1: 127 bytes, v2: 32767 bytes).
    TopicTooLong { len: usize, version: RecordVersion },
    /// Property block longer than 32767 bytes (`PROPERTIES_SIZE_EXCEEDED`).
    PropertiesTooLong { len: usize },
    /// Body longer than an int32 can describe.
    BodyTooLong { len: usize },
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::Truncated { needed, available } => {
                write!(
                    f,
                    "record truncated: needs {needed} bytes, {available} available"
                )
            }
            RecordError::BadMagic { magic } => {
                write!(f, "bad record magic 0x{:08X}", *magic as u32)
            }
            RecordError::BadTotalSize { total_size } => {
                write!(f, "bad record TOTALSIZE {total_size}")
            }
            RecordError::LengthMismatch { declared, computed } => write!(
                f,
                "record TOTALSIZE {declared} but fields add up to {computed}"
            ),
            RecordError::NegativeLength { field, value } => {
                write!(f, "record field {field} has negative length {value}")
            }
            RecordError::BodyCrcMismatch { stored, computed } => write!(
                f,
                "record body CRC mismatch: stored 0x{stored:08X}, computed 0x{computed:08X}"
            ),
            RecordError::TopicNotUtf8 => write!(f, "record topic is not UTF-8"),
            RecordError::TopicTooLong { len, version } => {
                write!(f, "topic of {len} bytes does not fit a {version:?} record")
            }
            RecordError::PropertiesTooLong { len } => write!(
                f,
                "properties of {len} bytes exceed the {MAX_PROPERTIES_SIZE}-byte limit"
            ),
            RecordError::BodyTooLong { len } => write!(f, "body of {len} bytes is too long"),
        }
    }
}

impl std::error::Error for RecordError {}

/// Masked CRC-32 of a body, as stored in BODYCRC (`UtilAll.crc32`: IEEE CRC & 0x7FFFFFFF).
pub fn body_crc(body: &[u8]) -> i32 {
    (crc32fast::hash(body) & 0x7FFF_FFFF) as i32
}

/// Bytes a host field takes for the given IPv6 flag.
fn host_len(v6: bool) -> usize {
    if v6 {
        20
    } else {
        8
    }
}

/// Size of BORNHOST for a sysflag.
pub fn born_host_len(sys_flag: i32) -> usize {
    host_len(sys_flag & SYSFLAG_BORNHOST_V6 != 0)
}

/// Size of STOREHOST for a sysflag.
pub fn store_host_len(sys_flag: i32) -> usize {
    host_len(sys_flag & SYSFLAG_STOREHOST_V6 != 0)
}

/// Position of STORETIMESTAMP for a record with this sysflag.
pub fn store_timestamp_position(sys_flag: i32) -> usize {
    BORN_HOST_POSITION + born_host_len(sys_flag)
}

/// Position of STOREHOST for a record with this sysflag.
pub fn store_host_position(sys_flag: i32) -> usize {
    store_timestamp_position(sys_flag) + 8
}

/// Position of BODYLENGTH for a record with this sysflag.
pub fn body_length_position(sys_flag: i32) -> usize {
    // STOREHOST, RECONSUMETIMES (4), PREPARED TRANSACTION OFFSET (8).
    store_host_position(sys_flag) + store_host_len(sys_flag) + 4 + 8
}

/// Total record length for the given variable parts (the formula of `store.md` §2.2).
pub fn record_size(
    sys_flag: i32,
    version: RecordVersion,
    body_len: usize,
    topic_len: usize,
    properties_len: usize,
) -> usize {
    body_length_position(sys_flag)
        + 4
        + body_len
        + version.topic_len_size()
        + topic_len
        + 2
        + properties_len
}

/// The fields of one message to encode as a stored record.
///
/// `sys_flag`'s host-family bits are recomputed from `born_host` / `store_host`; everything
/// else is written as given. The store leaves `queue_offset`, `physical_offset` and
/// `store_timestamp_ms` at 0 and patches them at append time.
#[derive(Debug, Clone)]
pub struct RecordFields<'a> {
    pub queue_id: i32,
    pub flag: i32,
    pub queue_offset: i64,
    pub physical_offset: i64,
    pub sys_flag: i32,
    pub born_timestamp_ms: i64,
    pub born_host: SocketAddr,
    pub store_timestamp_ms: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: &'a [u8],
    pub topic: &'a str,
    /// Property string bytes (`name 0x01 value 0x02 ...`).
    pub properties: &'a [u8],
}

impl RecordFields<'_> {
    /// Sysflag with the IPv6 bits matching the hosts.
    pub fn effective_sys_flag(&self) -> i32 {
        let mut flag = self.sys_flag & !(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6);
        if self.born_host.is_ipv6() {
            flag |= SYSFLAG_BORNHOST_V6;
        }
        if self.store_host.is_ipv6() {
            flag |= SYSFLAG_STOREHOST_V6;
        }
        flag
    }

    /// Encoded size of this record with the automatic version choice.
    pub fn encoded_size(&self) -> usize {
        record_size(
            self.effective_sys_flag(),
            RecordVersion::for_topic(self.topic),
            self.body.len(),
            self.topic.len(),
            self.properties.len(),
        )
    }
}

fn put_host(out: &mut BytesMut, addr: &SocketAddr) {
    match addr.ip() {
        IpAddr::V4(ip) => out.put_slice(&ip.octets()),
        IpAddr::V6(ip) => out.put_slice(&ip.octets()),
    }
    out.put_i32(i32::from(addr.port()));
}

/// Encodes `fields` as one stored record appended to `out`, choosing v1 or v2 by topic
/// length and computing BODYCRC. Returns the record length.
pub fn encode_record(fields: &RecordFields<'_>, out: &mut BytesMut) -> Result<usize, RecordError> {
    encode_record_with_version(fields, RecordVersion::for_topic(fields.topic), out)
}

/// [`encode_record`] with an explicit version (e.g. re-encoding that must stay v1).
pub fn encode_record_with_version(
    fields: &RecordFields<'_>,
    version: RecordVersion,
    out: &mut BytesMut,
) -> Result<usize, RecordError> {
    let topic_max = match version {
        RecordVersion::V1 => V1_MAX_TOPIC_LEN,
        RecordVersion::V2 => i16::MAX as usize,
    };
    if fields.topic.len() > topic_max {
        return Err(RecordError::TopicTooLong {
            len: fields.topic.len(),
            version,
        });
    }
    if fields.properties.len() > MAX_PROPERTIES_SIZE {
        return Err(RecordError::PropertiesTooLong {
            len: fields.properties.len(),
        });
    }
    let sys_flag = fields.effective_sys_flag();
    let size = record_size(
        sys_flag,
        version,
        fields.body.len(),
        fields.topic.len(),
        fields.properties.len(),
    );
    if size > i32::MAX as usize {
        return Err(RecordError::BodyTooLong {
            len: fields.body.len(),
        });
    }
    out.reserve(size);
    let start = out.len();
    out.put_i32(size as i32);
    out.put_i32(version.magic());
    out.put_i32(body_crc(fields.body));
    out.put_i32(fields.queue_id);
    out.put_i32(fields.flag);
    out.put_i64(fields.queue_offset);
    out.put_i64(fields.physical_offset);
    out.put_i32(sys_flag);
    out.put_i64(fields.born_timestamp_ms);
    put_host(out, &fields.born_host);
    out.put_i64(fields.store_timestamp_ms);
    put_host(out, &fields.store_host);
    out.put_i32(fields.reconsume_times);
    out.put_i64(fields.prepared_transaction_offset);
    out.put_i32(fields.body.len() as i32);
    out.put_slice(fields.body);
    match version {
        RecordVersion::V1 => out.put_u8(fields.topic.len() as u8),
        RecordVersion::V2 => out.put_i16(fields.topic.len() as i16),
    }
    out.put_slice(fields.topic.as_bytes());
    out.put_i16(fields.properties.len() as i16);
    out.put_slice(fields.properties);
    debug_assert_eq!(out.len() - start, size);
    Ok(size)
}

/// Writes the 8-byte BLANK filler for a segment tail of `remaining_bytes` into `out`
/// (which must be at least 8 bytes).
pub fn encode_blank(remaining_bytes: i32, out: &mut [u8]) {
    out[0..4].copy_from_slice(&remaining_bytes.to_be_bytes());
    out[4..8].copy_from_slice(&BLANK_MAGIC.to_be_bytes());
}

fn get_i32(buf: &[u8], pos: usize) -> i32 {
    i32::from_be_bytes([buf[pos], buf[pos + 1], buf[pos + 2], buf[pos + 3]])
}

fn get_i64(buf: &[u8], pos: usize) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[pos..pos + 8]);
    i64::from_be_bytes(b)
}

fn get_host(buf: &[u8], pos: usize, v6: bool) -> SocketAddr {
    if v6 {
        let mut o = [0u8; 16];
        o.copy_from_slice(&buf[pos..pos + 16]);
        let port = get_i32(buf, pos + 16);
        SocketAddr::new(IpAddr::V6(Ipv6Addr::from(o)), port as u16)
    } else {
        let ip = Ipv4Addr::new(buf[pos], buf[pos + 1], buf[pos + 2], buf[pos + 3]);
        let port = get_i32(buf, pos + 4);
        SocketAddr::new(IpAddr::V4(ip), port as u16)
    }
}

/// Reads TOTALSIZE at the start of `buf`.
pub fn read_total_size(buf: &[u8]) -> Option<i32> {
    (buf.len() >= 4).then(|| get_i32(buf, TOTAL_SIZE_POSITION))
}

/// Reads MAGICCODE.
pub fn read_magic(buf: &[u8]) -> Option<i32> {
    (buf.len() >= 8).then(|| get_i32(buf, MAGIC_POSITION))
}

/// Overwrites QUEUEOFFSET in an encoded record.
pub fn patch_queue_offset(record: &mut [u8], queue_offset: i64) {
    record[QUEUE_OFFSET_POSITION..QUEUE_OFFSET_POSITION + 8]
        .copy_from_slice(&queue_offset.to_be_bytes());
}

/// Overwrites PHYSICALOFFSET in an encoded record.
pub fn patch_physical_offset(record: &mut [u8], physical_offset: i64) {
    record[PHYSICAL_OFFSET_POSITION..PHYSICAL_OFFSET_POSITION + 8]
        .copy_from_slice(&physical_offset.to_be_bytes());
}

/// Overwrites STORETIMESTAMP in an encoded record (position depends on the born-host family,
/// read from the record's own SYSFLAG).
pub fn patch_store_timestamp(record: &mut [u8], store_timestamp_ms: i64) {
    let pos = store_timestamp_position(get_i32(record, SYSFLAG_POSITION));
    record[pos..pos + 8].copy_from_slice(&store_timestamp_ms.to_be_bytes());
}

/// A decoded message record borrowing its variable parts from the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord<'a> {
    pub total_size: usize,
    pub version: RecordVersion,
    pub body_crc: i32,
    pub queue_id: i32,
    pub flag: i32,
    pub queue_offset: i64,
    pub physical_offset: i64,
    pub sys_flag: i32,
    pub born_timestamp_ms: i64,
    pub born_host: SocketAddr,
    pub store_timestamp_ms: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: &'a [u8],
    /// Topic bytes (UTF-8 checked by [`StoredRecord::topic`]).
    pub topic_bytes: &'a [u8],
    pub properties: &'a [u8],
}

impl<'a> StoredRecord<'a> {
    /// This record's fields under `topic` with `properties`, every other field kept
    /// (offsets and timestamps included): a stored message re-encoded as another topic's.
    pub fn fields_as<'b>(&'b self, topic: &'b str, properties: &'b [u8]) -> RecordFields<'b> {
        RecordFields {
            queue_id: self.queue_id,
            flag: self.flag,
            queue_offset: self.queue_offset,
            physical_offset: self.physical_offset,
            sys_flag: self.sys_flag,
            born_timestamp_ms: self.born_timestamp_ms,
            born_host: self.born_host,
            store_timestamp_ms: self.store_timestamp_ms,
            store_host: self.store_host,
            reconsume_times: self.reconsume_times,
            prepared_transaction_offset: self.prepared_transaction_offset,
            body: self.body,
            topic,
            properties,
        }
    }

    /// The topic as text.
    pub fn topic(&self) -> Result<&'a str, RecordError> {
        std::str::from_utf8(self.topic_bytes).map_err(|_| RecordError::TopicNotUtf8)
    }
    /// Transaction type bits (`TRANSACTION_*_TYPE`).
    pub fn transaction_type(&self) -> i32 {
        self.sys_flag & SYSFLAG_TRANSACTION_MASK
    }
}

/// What [`decode_record`] found at a position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A message record.
    Message(StoredRecord<'a>),
    /// The end-of-file filler; `total_size` is the rest of the segment.
    Blank { total_size: i32 },
}

/// Decodes and validates the record at the start of `buf`.
///
/// Validates the magic, that TOTALSIZE fits in `buf`, that every length field is
/// non-negative, and that the fields add up to TOTALSIZE; with `check_body_crc` also the
/// body CRC. A BLANK filler only needs its 8 bytes.
pub fn decode_record(buf: &[u8], check_body_crc: bool) -> Result<Decoded<'_>, RecordError> {
    if buf.len() < BLANK_RECORD_SIZE {
        return Err(RecordError::Truncated {
            needed: BLANK_RECORD_SIZE,
            available: buf.len(),
        });
    }
    let total_size = get_i32(buf, TOTAL_SIZE_POSITION);
    let magic = get_i32(buf, MAGIC_POSITION);
    if magic == BLANK_MAGIC {
        return Ok(Decoded::Blank { total_size });
    }
    let version = RecordVersion::from_magic(magic).ok_or(RecordError::BadMagic { magic })?;
    if total_size < MIN_HEADER_SIZE as i32 {
        return Err(RecordError::BadTotalSize { total_size });
    }
    let total = total_size as usize;
    if buf.len() < total {
        return Err(RecordError::Truncated {
            needed: total,
            available: buf.len(),
        });
    }
    let rec = &buf[..total];
    let sys_flag = get_i32(rec, SYSFLAG_POSITION);
    let born_v6 = sys_flag & SYSFLAG_BORNHOST_V6 != 0;
    let store_v6 = sys_flag & SYSFLAG_STOREHOST_V6 != 0;
    let body_len_pos = body_length_position(sys_flag);
    let need = |n: usize| -> Result<(), RecordError> {
        if n > total {
            Err(RecordError::LengthMismatch {
                declared: total,
                computed: n,
            })
        } else {
            Ok(())
        }
    };
    need(body_len_pos + 4)?;
    let body_len = get_i32(rec, body_len_pos);
    if body_len < 0 {
        return Err(RecordError::NegativeLength {
            field: "BODYLENGTH",
            value: body_len,
        });
    }
    let body_start = body_len_pos + 4;
    let topic_len_pos = body_start + body_len as usize;
    need(topic_len_pos + version.topic_len_size())?;
    let topic_len = match version {
        // v1 stores the length as a signed byte; Java reads it signed, so > 127 is invalid.
        RecordVersion::V1 => rec[topic_len_pos] as i8 as i32,
        RecordVersion::V2 => {
            i16::from_be_bytes([rec[topic_len_pos], rec[topic_len_pos + 1]]) as i32
        }
    };
    if topic_len < 0 {
        return Err(RecordError::NegativeLength {
            field: "TOPICLENGTH",
            value: topic_len,
        });
    }
    let topic_start = topic_len_pos + version.topic_len_size();
    let props_len_pos = topic_start + topic_len as usize;
    need(props_len_pos + 2)?;
    let props_len = i16::from_be_bytes([rec[props_len_pos], rec[props_len_pos + 1]]) as i32;
    if props_len < 0 {
        return Err(RecordError::NegativeLength {
            field: "PROPERTIESLENGTH",
            value: props_len,
        });
    }
    let props_start = props_len_pos + 2;
    let computed = props_start + props_len as usize;
    if computed != total {
        return Err(RecordError::LengthMismatch {
            declared: total,
            computed,
        });
    }
    let body = &rec[body_start..body_start + body_len as usize];
    let stored_crc = get_i32(rec, BODY_CRC_POSITION);
    if check_body_crc {
        let computed_crc = body_crc(body);
        if computed_crc != stored_crc {
            return Err(RecordError::BodyCrcMismatch {
                stored: stored_crc,
                computed: computed_crc,
            });
        }
    }
    let store_ts_pos = store_timestamp_position(sys_flag);
    let store_host_pos = store_ts_pos + 8;
    let reconsume_pos = store_host_pos + host_len(store_v6);
    Ok(Decoded::Message(StoredRecord {
        total_size: total,
        version,
        body_crc: stored_crc,
        queue_id: get_i32(rec, QUEUE_ID_POSITION),
        flag: get_i32(rec, FLAG_POSITION),
        queue_offset: get_i64(rec, QUEUE_OFFSET_POSITION),
        physical_offset: get_i64(rec, PHYSICAL_OFFSET_POSITION),
        sys_flag,
        born_timestamp_ms: get_i64(rec, BORN_TIMESTAMP_POSITION),
        born_host: get_host(rec, BORN_HOST_POSITION, born_v6),
        store_timestamp_ms: get_i64(rec, store_ts_pos),
        store_host: get_host(rec, store_host_pos, store_v6),
        reconsume_times: get_i32(rec, reconsume_pos),
        prepared_transaction_offset: get_i64(rec, reconsume_pos + 4),
        body,
        topic_bytes: &rec[topic_start..topic_start + topic_len as usize],
        properties: &rec[props_start..computed],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example of `message-format.md` §5.6, byte for byte.
    const GOLDEN_HEX: &str = "\
        000000a7daa320a777d1898200000000\
        00000000000000000000000000000000\
        00000000000000000000018bcfe56800\
        c0a801050000c8220000018bcfe5687b\
        c0a8010a00002a9f0000000000000000\
        000000000000000548656c6c6f09546f\
        70696354657374003e554e49515f4b45\
        59014330413830313035333033393142\
        36413346323130424137463243343030\
        30310257414954017472756502544147\
        53015461674102";

    fn golden_bytes() -> Vec<u8> {
        let hex: String = GOLDEN_HEX
            .chars()
            .filter(|c| c.is_ascii_hexdigit())
            .collect();
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect()
    }

    const PROPS: &[u8] =
        b"UNIQ_KEY\x01C0A8010530391B6A3F210BA7F2C40001\x02WAIT\x01true\x02TAGS\x01TagA\x02";

    fn example() -> RecordFields<'static> {
        RecordFields {
            queue_id: 0,
            flag: 0,
            queue_offset: 0,
            physical_offset: 0,
            sys_flag: 0,
            born_timestamp_ms: 1_700_000_000_000,
            born_host: "192.168.1.5:51234".parse().unwrap(),
            store_timestamp_ms: 1_700_000_000_123,
            store_host: "192.168.1.10:10911".parse().unwrap(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: b"Hello",
            topic: "TopicTest",
            properties: PROPS,
        }
    }

    #[test]
    fn golden_worked_example_byte_for_byte() {
        let golden = golden_bytes();
        assert_eq!(golden.len(), 167);
        assert_eq!(PROPS.len(), 62);
        assert_eq!(body_crc(b"Hello"), 0x77D1_8982);
        let mut out = BytesMut::new();
        let n = encode_record(&example(), &mut out).unwrap();
        assert_eq!(n, 167);
        assert_eq!(&out[..], &golden[..]);
    }

    #[test]
    fn golden_decodes_to_the_example_fields() {
        let golden = golden_bytes();
        let Decoded::Message(r) = decode_record(&golden, true).unwrap() else {
            panic!("expected a message")
        };
        assert_eq!(r.total_size, 167);
        assert_eq!(r.version, RecordVersion::V1);
        assert_eq!(r.topic().unwrap(), "TopicTest");
        assert_eq!(r.body, b"Hello");
        assert_eq!(r.properties, PROPS);
        assert_eq!(r.born_host, "192.168.1.5:51234".parse().unwrap());
        assert_eq!(r.store_host, "192.168.1.10:10911".parse().unwrap());
        assert_eq!(r.store_timestamp_ms, 1_700_000_000_123);
        assert_eq!(r.born_timestamp_ms, 1_700_000_000_000);
    }

    #[test]
    fn patch_positions_match_the_layout() {
        let mut rec = golden_bytes();
        patch_queue_offset(&mut rec, 0x0102_0304_0506_0708);
        patch_physical_offset(&mut rec, 42);
        patch_store_timestamp(&mut rec, 7);
        let Decoded::Message(r) = decode_record(&rec, true).unwrap() else {
            panic!()
        };
        assert_eq!(r.queue_offset, 0x0102_0304_0506_0708);
        assert_eq!(r.physical_offset, 42);
        assert_eq!(r.store_timestamp_ms, 7);
        assert_eq!(store_timestamp_position(0), STORE_TIMESTAMP_POSITION_V4);
        assert_eq!(&rec[20..28], &[1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn ipv6_hosts_shift_fields_and_round_trip() {
        let mut f = example();
        f.born_host = "[2001:db8::1]:1234".parse().unwrap();
        f.store_host = "[::1]:10911".parse().unwrap();
        let mut out = BytesMut::new();
        let n = encode_record(&f, &mut out).unwrap();
        assert_eq!(n, 167 + 24);
        let Decoded::Message(r) = decode_record(&out, true).unwrap() else {
            panic!()
        };
        assert_eq!(r.sys_flag, SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6);
        assert_eq!(r.born_host, f.born_host);
        assert_eq!(r.store_host, f.store_host);
        let mut rec = out.to_vec();
        patch_store_timestamp(&mut rec, 99);
        assert_eq!(store_timestamp_position(r.sys_flag), 68);
        let Decoded::Message(r) = decode_record(&rec, true).unwrap() else {
            panic!()
        };
        assert_eq!(r.store_timestamp_ms, 99);
    }

    #[test]
    fn long_topic_uses_v2() {
        let topic = format!("%RETRY%{}", "g".repeat(140));
        let mut f = example();
        f.topic = &topic;
        let mut out = BytesMut::new();
        let n = encode_record(&f, &mut out).unwrap();
        assert_eq!(n, 92 + 5 + topic.len() + 62);
        let Decoded::Message(r) = decode_record(&out, false).unwrap() else {
            panic!()
        };
        assert_eq!(r.version, RecordVersion::V2);
        assert_eq!(r.topic().unwrap(), topic);
        assert_eq!(
            encode_record_with_version(&f, RecordVersion::V1, &mut BytesMut::new()),
            Err(RecordError::TopicTooLong {
                len: topic.len(),
                version: RecordVersion::V1
            })
        );
    }

    #[test]
    fn blank_and_corruption_are_reported() {
        let mut blank = [0u8; 8];
        encode_blank(1000, &mut blank);
        assert_eq!(
            decode_record(&blank, true),
            Ok(Decoded::Blank { total_size: 1000 })
        );

        let golden = golden_bytes();
        let mut bad = golden.clone();
        bad[90] ^= 0xFF; // inside the body
        assert!(matches!(
            decode_record(&bad, true),
            Err(RecordError::BodyCrcMismatch { .. })
        ));
        assert!(decode_record(&bad, false).is_ok());

        let mut bad = golden.clone();
        bad[4] = 0;
        assert!(matches!(
            decode_record(&bad, true),
            Err(RecordError::BadMagic { .. })
        ));

        assert!(matches!(
            decode_record(&golden[..100], true),
            Err(RecordError::Truncated {
                needed: 167,
                available: 100
            })
        ));

        let mut bad = golden.clone();
        bad[3] = 0xA6; // TOTALSIZE one less than the fields
        assert!(matches!(
            decode_record(&bad, true),
            Err(RecordError::LengthMismatch { .. })
        ));

        let mut bad = golden;
        bad[84..88].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(matches!(
            decode_record(&bad, true),
            Err(RecordError::NegativeLength { .. })
        ));
        assert!(decode_record(&[0u8; 8], true).is_err());
    }

    #[test]
    fn properties_over_limit_are_refused() {
        let props = vec![b'a'; MAX_PROPERTIES_SIZE + 1];
        let mut f = example();
        f.properties = &props;
        assert_eq!(
            encode_record(&f, &mut BytesMut::new()),
            Err(RecordError::PropertiesTooLong {
                len: MAX_PROPERTIES_SIZE + 1
            })
        );
    }
}
