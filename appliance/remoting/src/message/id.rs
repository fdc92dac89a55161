//! Message ids (`message-format.md` §5.5, §6): the broker-side offsetMsgId, the
//! client-side `UNIQ_KEY`, and the host encoding both build on.
//!
//! * offsetMsgId = uppercase hex of STOREHOST address + port (int32) + PHYSICALOFFSET
//!   (int64): 32 chars for IPv4, 56 for IPv6. Clients decode it to find the broker and the
//!   commit-log offset, so the encoding must be exact.
//! * `UNIQ_KEY` = uppercase hex of ip + pid (16 bits) + class-loader hash (int32) + ms since
//!   the start of the current month (int32, local time) + counter (16 bits). Brokers only
//!   generate one when a message arrives without it; [`UniqKeyGenerator`] keeps all state
//!   explicit (no globals, no clock reads: the caller passes `now_ms`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::number::hex_digit;

/// Hex length of an offsetMsgId / UNIQ_KEY for an IPv4 host.
pub const MSG_ID_HEX_LEN_V4: usize = 32;
/// Hex length of an offsetMsgId / UNIQ_KEY for an IPv6 host.
pub const MSG_ID_HEX_LEN_V6: usize = 56;

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";
const MS_PER_DAY: i64 = 86_400_000;

/// Why a message id could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MsgIdError {
    /// Neither 32 (IPv4) nor 56 (IPv6) hex chars.
    BadLength { len_chars: usize },
    /// A char outside `0-9A-Fa-f` at `position` (0-based, in chars).
    BadHexChar { position: usize, found: char },
    /// The port field does not fit in 0..=65535.
    PortOutOfRange { port: i32 },
    /// Raw host bytes must be 8 (IPv4 + port) or 20 (IPv6 + port) long.
    BadHostLength { len_bytes: usize },
}

impl fmt::Display for MsgIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadLength { len_chars } => write!(
                f,
                "message id has {len_chars} chars; expected {MSG_ID_HEX_LEN_V4} (IPv4) or \
                 {MSG_ID_HEX_LEN_V6} (IPv6) hex chars"
            ),
            Self::BadHexChar { position, found } => {
                write!(
                    f,
                    "message id has non-hex char {found:?} at position {position}"
                )
            }
            Self::PortOutOfRange { port } => {
                write!(f, "message id carries port {port}, outside 0..=65535")
            }
            Self::BadHostLength { len_bytes } => write!(
                f,
                "stored host is {len_bytes} bytes; expected 8 (IPv4 + port) or 20 (IPv6 + port)"
            ),
        }
    }
}

impl std::error::Error for MsgIdError {}

fn push_hex(out: &mut String, bytes: &[u8]) {
    out.reserve(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(HEX_UPPER[usize::from(b >> 4)]));
        out.push(char::from(HEX_UPPER[usize::from(b & 0xF)]));
    }
}

/// Decodes hex of either case (Java `UtilAll.string2bytes` upper-cases first) into a
/// fixed 28-byte buffer; returns the number of bytes (16 or 28).
fn decode_id_hex(s: &str) -> Result<([u8; 28], usize), MsgIdError> {
    let len_bytes = match s.len() {
        MSG_ID_HEX_LEN_V4 => 16,
        MSG_ID_HEX_LEN_V6 => 28,
        _ => {
            return Err(MsgIdError::BadLength {
                len_chars: s.chars().count(),
            })
        }
    };
    // Validate char by char first so a multi-byte char is reported, never sliced.
    if let Some((position, found)) = s.chars().enumerate().find(|(_, c)| !c.is_ascii_hexdigit()) {
        return Err(MsgIdError::BadHexChar { position, found });
    }
    let bytes = s.as_bytes();
    let mut out = [0u8; 28];
    for (i, slot) in out.iter_mut().enumerate().take(len_bytes) {
        let hi = hex_digit(bytes[2 * i]).unwrap_or(0);
        let lo = hex_digit(bytes[2 * i + 1]).unwrap_or(0);
        *slot = (hi << 4) | lo;
    }
    Ok((out, len_bytes))
}

fn be_i32(b: &[u8]) -> i32 {
    i32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn ip_from_slice(b: &[u8]) -> IpAddr {
    if b.len() == 4 {
        IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
    } else {
        let mut a = [0u8; 16];
        a.copy_from_slice(&b[..16]);
        IpAddr::V6(Ipv6Addr::from(a))
    }
}

fn port_from_i32(port: i32) -> Result<u16, MsgIdError> {
    u16::try_from(port).map_err(|_| MsgIdError::PortOutOfRange { port })
}

/// Appends the stored host encoding of `addr` (§5.5): address bytes (4 or 16) then the
/// port as int32. The family decides the length; the caller sets the matching sysFlag
/// V6 bit.
pub fn write_host(out: &mut Vec<u8>, addr: &SocketAddr) {
    match addr.ip() {
        IpAddr::V4(ip) => out.extend_from_slice(&ip.octets()),
        IpAddr::V6(ip) => out.extend_from_slice(&ip.octets()),
    }
    out.extend_from_slice(&i32::from(addr.port()).to_be_bytes());
}

/// Reads a stored host field of exactly 8 or 20 bytes.
pub fn read_host(bytes: &[u8]) -> Result<SocketAddr, MsgIdError> {
    let ip_len = match bytes.len() {
        8 => 4,
        20 => 16,
        len_bytes => return Err(MsgIdError::BadHostLength { len_bytes }),
    };
    let port = port_from_i32(be_i32(&bytes[ip_len..]))?;
    Ok(SocketAddr::new(ip_from_slice(&bytes[..ip_len]), port))
}

/// A decoded offsetMsgId: where the record lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OffsetMsgId {
    /// The broker address (STOREHOST of the record).
    pub store_host: SocketAddr,
    /// PHYSICALOFFSET: the record's byte position in the commit log.
    pub commit_log_offset: i64,
}

impl OffsetMsgId {
    /// Uppercase hex, 32 or 56 chars.
    pub fn encode(&self) -> String {
        encode_offset_msg_id(&self.store_host, self.commit_log_offset)
    }

    /// Decodes either case; 32 chars ⇒ IPv4, 56 ⇒ IPv6.
    pub fn decode(s: &str) -> Result<Self, MsgIdError> {
        decode_offset_msg_id(s)
    }
}

/// The offsetMsgId of a record stored at `commit_log_offset` by `store_host`.
pub fn encode_offset_msg_id(store_host: &SocketAddr, commit_log_offset: i64) -> String {
    let mut s = String::with_capacity(MSG_ID_HEX_LEN_V6);
    write_offset_msg_id(&mut s, store_host, commit_log_offset);
    s
}

/// Appends the offsetMsgId to `out` (for joining batch ids with `,` without temporaries).
pub fn write_offset_msg_id(out: &mut String, store_host: &SocketAddr, commit_log_offset: i64) {
    let mut raw = Vec::with_capacity(28);
    write_host(&mut raw, store_host);
    raw.extend_from_slice(&commit_log_offset.to_be_bytes());
    push_hex(out, &raw);
}

/// The offsetMsgId from a record's raw STOREHOST field (8 or 20 bytes, as stored) and
/// its PHYSICALOFFSET: what clients compute for every pulled record.
pub fn offset_msg_id_from_raw_host(
    store_host_raw: &[u8],
    commit_log_offset: i64,
) -> Result<String, MsgIdError> {
    if store_host_raw.len() != 8 && store_host_raw.len() != 20 {
        return Err(MsgIdError::BadHostLength {
            len_bytes: store_host_raw.len(),
        });
    }
    let mut s = String::with_capacity(MSG_ID_HEX_LEN_V6);
    push_hex(&mut s, store_host_raw);
    push_hex(&mut s, &commit_log_offset.to_be_bytes());
    Ok(s)
}

/// Decodes an offsetMsgId (Java `MessageDecoder.decodeMessageId`).
pub fn decode_offset_msg_id(s: &str) -> Result<OffsetMsgId, MsgIdError> {
    let (raw, len) = decode_id_hex(s)?;
    let ip_len = len - 12;
    let port = port_from_i32(be_i32(&raw[ip_len..]))?;
    let mut off = [0u8; 8];
    off.copy_from_slice(&raw[ip_len + 4..ip_len + 12]);
    Ok(OffsetMsgId {
        store_host: SocketAddr::new(ip_from_slice(&raw[..ip_len]), port),
        commit_log_offset: i64::from_be_bytes(off),
    })
}

/// The fields of a `UNIQ_KEY` (`MessageClientIDSetter` layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniqKeyParts {
    /// The client's IP (or a fake 4-byte value when it had none).
    pub ip: IpAddr,
    /// Low 16 bits of the client process id.
    pub pid: u16,
    /// The client's class-loader hash (arbitrary per process).
    pub class_loader_hash: i32,
    /// Milliseconds since the start of the generator's current month (local time).
    pub ms_since_month_start: i32,
    /// Per-process counter, wrapping at 16 bits.
    pub counter: u16,
}

impl UniqKeyParts {
    /// Decodes a UNIQ_KEY of 32 (IPv4) or 56 (IPv6) hex chars of either case. Brokers
    /// must treat UNIQ_KEYs as opaque strings; this is for tooling and diagnostics.
    pub fn parse(s: &str) -> Result<Self, MsgIdError> {
        let (raw, len) = decode_id_hex(s)?;
        let ip_len = len - 12;
        let b = &raw[ip_len..len];
        Ok(Self {
            ip: ip_from_slice(&raw[..ip_len]),
            pid: u16::from_be_bytes([b[0], b[1]]),
            class_loader_hash: be_i32(&b[2..6]),
            ms_since_month_start: be_i32(&b[6..10]),
            counter: u16::from_be_bytes([b[10], b[11]]),
        })
    }

    /// The approximate born time (epoch ms) Java's `getNearlyTimeFromID` derives: the
    /// offset is taken from the start of the month of `now_ms`, or of the month before
    /// when that would not be in the past. `utc_offset_ms` is the generator's local-time
    /// offset (Java uses the JVM's default time zone).
    pub fn nearly_born_time_ms(&self, now_ms: i64, utc_offset_ms: i64) -> i64 {
        // Java reads the 4 bytes into a long with zero high bytes: unsigned.
        let span_ms = i64::from(self.ms_since_month_start as u32);
        let (this_month, _) = month_bounds_ms(now_ms, utc_offset_ms);
        let start = if this_month + span_ms >= now_ms {
            month_bounds_ms(this_month - 1, utc_offset_ms).0
        } else {
            this_month
        };
        start + span_ms
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian civil date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Civil (year, month) of a day count since 1970-01-01.
fn civil_year_month(days: i64) -> (i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month)
}

/// Epoch-ms bounds `[start, next_start)` of the local-time month containing `now_ms`,
/// for a fixed UTC offset.
pub fn month_bounds_ms(now_ms: i64, utc_offset_ms: i64) -> (i64, i64) {
    let local_days = (now_ms + utc_offset_ms).div_euclid(MS_PER_DAY);
    let (year, month) = civil_year_month(local_days);
    let start_days = days_from_civil(year, month, 1);
    let (ny, nm) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    let next_days = days_from_civil(ny, nm, 1);
    (
        start_days * MS_PER_DAY - utc_offset_ms,
        next_days * MS_PER_DAY - utc_offset_ms,
    )
}

/// Generates `UNIQ_KEY`s the way `MessageClientIDSetter.createUniqID` does, with its
/// state held here instead of in statics. Not thread-safe by design: one per core.
#[derive(Debug, Clone)]
pub struct UniqKeyGenerator {
    /// Hex of ip + pid + class-loader hash: fixed for the process.
    prefix: String,
    utc_offset_ms: i64,
    month_start_ms: i64,
    next_month_start_ms: i64,
    counter: u16,
}

impl UniqKeyGenerator {
    /// `pid` is truncated to 16 bits like Java's `(short) pid`. `utc_offset_ms` fixes the
    /// "local time" month boundary (Java: the JVM default zone; DST shifts are ignored).
    pub fn new(
        ip: IpAddr,
        pid: u32,
        class_loader_hash: i32,
        utc_offset_ms: i64,
        now_ms: i64,
    ) -> Self {
        let mut fixed = Vec::with_capacity(22);
        match ip {
            IpAddr::V4(v4) => fixed.extend_from_slice(&v4.octets()),
            IpAddr::V6(v6) => fixed.extend_from_slice(&v6.octets()),
        }
        // Truncation is the point: Java writes `(short) UtilAll.getPid()`.
        fixed.extend_from_slice(&(pid as u16).to_be_bytes());
        fixed.extend_from_slice(&class_loader_hash.to_be_bytes());
        let mut prefix = String::with_capacity(fixed.len() * 2);
        push_hex(&mut prefix, &fixed);
        let (month_start_ms, next_month_start_ms) = month_bounds_ms(now_ms, utc_offset_ms);
        Self {
            prefix,
            utc_offset_ms,
            month_start_ms,
            next_month_start_ms,
            counter: 0,
        }
    }

    /// Starts the counter at `counter` (tests; or to continue a sequence).
    pub fn with_counter(mut self, counter: u16) -> Self {
        self.counter = counter;
        self
    }

    /// The next id for a message born at `now_ms`.
    pub fn next_id(&mut self, now_ms: i64) -> String {
        let mut s = String::with_capacity(self.prefix.len() + 12);
        self.write_next(&mut s, now_ms);
        s
    }

    /// Appends the next id to `out`.
    pub fn write_next(&mut self, out: &mut String, now_ms: i64) {
        if now_ms >= self.next_month_start_ms {
            (self.month_start_ms, self.next_month_start_ms) =
                month_bounds_ms(now_ms, self.utc_offset_ms);
        }
        // Java narrows with `(int)` and forgives small negative skews (NTP steps).
        let mut diff = (now_ms - self.month_start_ms) as i32;
        if diff < 0 && diff > -1_000_000 {
            diff = 0;
        }
        out.push_str(&self.prefix);
        push_hex(out, &diff.to_be_bytes());
        push_hex(out, &self.counter.to_be_bytes());
        self.counter = self.counter.wrapping_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn worked_example_offset_msg_id() {
        // message-format.md §5.6: store host 192.168.1.10:10911, physical offset 0.
        let addr: SocketAddr = "192.168.1.10:10911".parse().unwrap();
        let id = encode_offset_msg_id(&addr, 0);
        assert_eq!(id, "C0A8010A00002A9F0000000000000000");
        let d = decode_offset_msg_id(&id).unwrap();
        assert_eq!(d.store_host, addr);
        assert_eq!(d.commit_log_offset, 0);
        let raw = [0xc0, 0xa8, 0x01, 0x0a, 0x00, 0x00, 0x2a, 0x9f];
        assert_eq!(offset_msg_id_from_raw_host(&raw, 0).unwrap(), id);
        assert_eq!(read_host(&raw).unwrap(), addr);
        let mut w = Vec::new();
        write_host(&mut w, &addr);
        assert_eq!(w, raw);
    }

    #[test]
    fn offset_msg_id_large_offset_and_lowercase() {
        let addr: SocketAddr = "10.0.0.1:10911".parse().unwrap();
        let id = encode_offset_msg_id(&addr, 0x0000_0001_2345_6789);
        assert_eq!(id, "0A00000100002A9F0000000123456789");
        let d = decode_offset_msg_id(&id.to_ascii_lowercase()).unwrap();
        assert_eq!(d.commit_log_offset, 0x1_2345_6789);
    }

    #[test]
    fn offset_msg_id_ipv6() {
        let addr: SocketAddr = "[fe80::1]:10911".parse().unwrap();
        let id = OffsetMsgId {
            store_host: addr,
            commit_log_offset: 1024,
        }
        .encode();
        assert_eq!(id.len(), MSG_ID_HEX_LEN_V6);
        assert_eq!(
            id,
            "FE80000000000000000000000000000100002A9F0000000000000400"
        );
        assert_eq!(OffsetMsgId::decode(&id).unwrap().store_host, addr);
    }

    #[test]
    fn offset_msg_id_errors() {
        assert_eq!(
            decode_offset_msg_id("ABC"),
            Err(MsgIdError::BadLength { len_chars: 3 })
        );
        assert_eq!(
            decode_offset_msg_id("G0A8010A00002A9F0000000000000000"),
            Err(MsgIdError::BadHexChar {
                position: 0,
                found: 'G'
            })
        );
        assert_eq!(
            decode_offset_msg_id("C0A8010AFFFFFFFF0000000000000000"),
            Err(MsgIdError::PortOutOfRange { port: -1 })
        );
        // Multi-byte chars never index mid-char.
        let s = "é".repeat(16);
        assert!(matches!(
            decode_offset_msg_id(&s),
            Err(MsgIdError::BadHexChar { position: 0, .. })
        ));
        assert_eq!(
            read_host(&[0; 7]),
            Err(MsgIdError::BadHostLength { len_bytes: 7 })
        );
    }

    #[test]
    fn uniq_key_worked_example_parses() {
        // The UNIQ_KEY of message-format.md §5.6.
        let p = UniqKeyParts::parse("C0A8010530391B6A3F210BA7F2C40001").unwrap();
        assert_eq!(p.ip, IpAddr::V4(Ipv4Addr::new(192, 168, 1, 5)));
        assert_eq!(p.pid, 0x3039); // 12345
        assert_eq!(p.class_loader_hash, 0x1B6A_3F21);
        assert_eq!(p.ms_since_month_start, 0x0BA7_F2C4);
        assert_eq!(p.counter, 1);
    }

    #[test]
    fn month_bounds() {
        // 2023-11-14T22:13:20Z = 1_700_000_000_000; November 2023 starts 1_698_796_800_000.
        assert_eq!(
            month_bounds_ms(1_700_000_000_000, 0),
            (1_698_796_800_000, 1_701_388_800_000)
        );
        // At UTC+8 the local month is the same; its start is 8 h earlier in UTC.
        assert_eq!(
            month_bounds_ms(1_700_000_000_000, 8 * 3_600_000).0,
            1_698_796_800_000 - 8 * 3_600_000
        );
        // December rolls into the next year; 2024-02 has 29 days.
        let dec = days_from_civil(2023, 12, 15) * MS_PER_DAY;
        assert_eq!(
            month_bounds_ms(dec, 0).1,
            days_from_civil(2024, 1, 1) * MS_PER_DAY
        );
        let feb = days_from_civil(2024, 2, 10) * MS_PER_DAY;
        let (s, e) = month_bounds_ms(feb, 0);
        assert_eq!((e - s) / MS_PER_DAY, 29);
        // Before 1970.
        assert_eq!(civil_year_month(-1), (1969, 12));
    }

    #[test]
    fn generator_layout_counter_and_month_roll() {
        let now = 1_700_000_000_000;
        let ip = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 5));
        let mut g = UniqKeyGenerator::new(ip, 0x1_3039, 0x1B6A_3F21, 0, now).with_counter(0xFFFF);
        let a = g.next_id(now);
        let b = g.next_id(now);
        assert_eq!(a.len(), 32);
        // ms since 2023-11-01T00:00Z = 1_203_200_000 = 0x47B7_6000.
        assert_eq!(a, "C0A8010530391B6A3F2147B76000FFFF");
        assert_eq!(b, "C0A8010530391B6A3F2147B760000000");
        let parts = UniqKeyParts::parse(&a).unwrap();
        assert_eq!(parts.ms_since_month_start, 1_203_200_000);
        assert_eq!(parts.nearly_born_time_ms(now + 5_000, 0), now);
        // Read in the next month, the born time still maps back to November.
        let next_month = 1_701_388_800_000 + 10_000;
        assert_eq!(parts.nearly_born_time_ms(next_month, 0), now);
        // Crossing into December resets the base.
        let c = g.next_id(1_701_388_800_000 + 1);
        assert_eq!(&c[20..28], "00000001");
        // Small backward skew is clamped to 0.
        let mut g2 = UniqKeyGenerator::new(ip, 1, 1, 0, now);
        let d = g2.next_id(1_698_796_800_000 - 10);
        assert_eq!(&d[20..28], "00000000");
    }

    #[test]
    fn generator_ipv6_length() {
        let ip: IpAddr = "fe80::1".parse().unwrap();
        let mut g = UniqKeyGenerator::new(ip, 7, -1, 0, 0);
        let id = g.next_id(5);
        assert_eq!(id.len(), MSG_ID_HEX_LEN_V6);
        let p = UniqKeyParts::parse(&id).unwrap();
        assert_eq!(p.ip, ip);
        assert_eq!(p.pid, 7);
        assert_eq!(p.class_loader_hash, -1);
        assert_eq!(p.ms_since_month_start, 5);
    }

    proptest! {
        #[test]
        fn offset_msg_id_round_trip(a in any::<[u8; 4]>(), b in any::<[u8; 16]>(), port in any::<u16>(),
                                    off in any::<i64>(), v6 in any::<bool>()) {
            let ip = if v6 { IpAddr::V6(Ipv6Addr::from(b)) } else { IpAddr::V4(Ipv4Addr::from(a)) };
            let addr = SocketAddr::new(ip, port);
            let id = encode_offset_msg_id(&addr, off);
            prop_assert_eq!(id.len(), if v6 { 56 } else { 32 });
            let d = decode_offset_msg_id(&id).unwrap();
            prop_assert_eq!(d.store_host, addr);
            prop_assert_eq!(d.commit_log_offset, off);
        }

        #[test]
        fn garbage_ids_never_panic(s in ".{0,64}") {
            let _ = decode_offset_msg_id(&s);
            let _ = UniqKeyParts::parse(&s);
        }

        #[test]
        fn month_bounds_contain_now(now in -4_000_000_000_000i64..8_000_000_000_000, off in -50_400_000i64..50_400_000) {
            let (s, e) = month_bounds_ms(now, off);
            prop_assert!(s <= now && now < e);
            let days = (e - s) / MS_PER_DAY;
            prop_assert!((28..=31).contains(&days));
        }
    }
}
