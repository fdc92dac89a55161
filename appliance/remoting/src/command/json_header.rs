//! JSON header serialization (type 0), `remoting.md` §4: the hand-rolled reader for the one
//! object shape every Remoting client sends, and the fastjson-shaped compact writer.
//!
//! Reading is the hot path (every send from the real clients carries a JSON header), so the
//! reader walks the bytes once, borrows strings without escapes straight from the input and
//! allocates only the `remark` and the extFields entries it returns. It accepts what the
//! real clients emit: any key order, unknown keys (with nested values) skipped, trailing
//! whitespace (jsoncpp's `\n`), extFields values as JSON strings, numbers, booleans or null,
//! and the four integer fields as numbers or as quoted numbers.
//!
//! Writing follows Java's fastjson output byte for byte: keys in alphabetical order, no
//! whitespace, extFields values always JSON strings, fastjson's escaping rules.

use std::borrow::Cow;

use bytes::{BufMut, BytesMut};

use crate::codes::LanguageCode;
use crate::command::{ExtFields, HeaderDecodeError, RemotingCommand, SerializeType};
use crate::number::hex_digit;

/// Deepest nesting of unknown values the reader skips before it gives up; bounds the
/// reader's stack no matter what a peer sends.
const MAX_SKIP_DEPTH: usize = 64;

/// Typical extFields size (a SEND_MESSAGE_V2 header has 11-14 keys); one allocation up front.
const EXT_FIELDS_CAPACITY: usize = 16;

/// Parses a JSON header into a command with an empty body.
pub fn read(header: &[u8]) -> Result<RemotingCommand, HeaderDecodeError> {
    let mut reader = Reader {
        buf: header,
        pos: 0,
        // One SIMD-friendly pass over the whole header instead of one check per string
        // (a send header has ~40 strings); invalid input falls back to per-string checks.
        // Headers are almost always ASCII, which std's word-at-a-time check proves faster
        // than the UTF-8 validator can.
        all_utf8: header.is_ascii() || std::str::from_utf8(header).is_ok(),
    };
    let mut cmd = RemotingCommand {
        code: 0,
        language: LanguageCode::Java,
        version: 0,
        opaque: 0,
        flag: 0,
        remark: None,
        ext_fields: ExtFields::new(),
        body: bytes::Bytes::new(),
        serialize_type: SerializeType::Json,
    };
    reader.skip_ws();
    reader.expect(b'{', "the header must be a JSON object")?;
    reader.skip_ws();
    if reader.peek() == Some(b'}') {
        reader.pos += 1;
    } else {
        loop {
            reader.skip_ws();
            let key = reader.string()?;
            reader.skip_ws();
            reader.expect(b':', "expected ':' after an object key")?;
            reader.skip_ws();
            match key.as_ref() {
                "code" => cmd.code = reader.int_field("code")?,
                "version" => cmd.version = reader.int_field("version")?,
                "opaque" => cmd.opaque = reader.int_field("opaque")?,
                "flag" => cmd.flag = reader.int_field("flag")?,
                "language" => cmd.language = reader.language()?,
                "remark" => cmd.remark = reader.remark()?,
                "extFields" => cmd.ext_fields = reader.ext_fields()?,
                _ => reader.skip_value(0)?,
            }
            reader.skip_ws();
            match reader.next_byte() {
                Some(b',') => continue,
                Some(b'}') => break,
                _ => return Err(reader.error("expected ',' or '}' after a header field")),
            }
        }
    }
    reader.skip_ws();
    if reader.pos != reader.buf.len() {
        return Err(reader.error("unexpected bytes after the header object"));
    }
    Ok(cmd)
}

/// Appends `cmd`'s header as compact JSON with fastjson's key order (alphabetical):
/// `code, extFields, flag, language, opaque, remark, serializeTypeCurrentRPC, version`.
pub fn write(cmd: &RemotingCommand, out: &mut BytesMut) {
    out.reserve(128 + 32 * cmd.ext_fields.len());
    out.put_slice(b"{\"code\":");
    write_int(out, i64::from(cmd.code));
    if !cmd.ext_fields.is_empty() {
        out.put_slice(b",\"extFields\":{");
        for (index, (key, value)) in cmd.ext_fields.iter().enumerate() {
            if index > 0 {
                out.put_u8(b',');
            }
            write_string(out, key);
            out.put_u8(b':');
            write_string(out, value);
        }
        out.put_u8(b'}');
    }
    out.put_slice(b",\"flag\":");
    write_int(out, i64::from(cmd.flag));
    out.put_slice(b",\"language\":");
    write_string(out, cmd.language.name());
    out.put_slice(b",\"opaque\":");
    write_int(out, i64::from(cmd.opaque));
    if let Some(remark) = &cmd.remark {
        out.put_slice(b",\"remark\":");
        write_string(out, remark);
    }
    out.put_slice(b",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
    write_int(out, i64::from(cmd.version));
    out.put_u8(b'}');
}

/// Appends a decimal integer without going through `fmt` (this runs for every response).
fn write_int(out: &mut BytesMut, value: i64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = value.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if value < 0 {
        out.put_u8(b'-');
    }
    out.put_slice(&digits[at..]);
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// Bytes that may start something `write_string` escapes: `"`, `\\`, C0 controls, DEL, and
/// the lead bytes of U+0080..U+009F (`C2`) and U+2028/U+2029 (`E2`). Everything else is
/// copied with its run after one table lookup.
static ESCAPE_LEAD: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table[0x7f] = true;
    table[0xC2] = true;
    table[0xE2] = true;
    table
};

/// Appends `text` as a JSON string escaped the way fastjson 1.2 does it, so a header we
/// write for a Java-shaped command is byte-identical to Java's: `"` and `\` with a
/// backslash; BS, TAB, LF, FF, CR as `\b \t \n \f \r`; the other C0 controls, DEL and the
/// C1 controls (U+007F..U+009F) and U+2028/U+2029 as `\uXXXX` with upper-case hex.
pub(crate) fn write_string(out: &mut BytesMut, text: &str) {
    let bytes = text.as_bytes();
    // Every string a response carries (keys, msgIds, offsets, region names) is plain
    // printable ASCII: one reservation and one copy, no per-byte walk.
    let mut index = clean_prefix_len(bytes);
    out.reserve(bytes.len() + 2);
    out.put_u8(b'"');
    if index == bytes.len() {
        out.put_slice(bytes);
        out.put_u8(b'"');
        return;
    }
    let mut clean_from = 0;
    // Walks bytes, not chars: the characters to escape are all ASCII except U+0080..U+009F
    // (UTF-8 `C2 80..C2 9F`) and U+2028/U+2029 (`E2 80 A8`/`E2 80 A9`), so other non-ASCII
    // bytes are copied with their run like printable ASCII.
    while index < bytes.len() {
        let b = bytes[index];
        if !ESCAPE_LEAD[usize::from(b)] {
            index += 1;
            continue;
        }
        let (unit, width): (u32, usize) = match b {
            b'"' | b'\\' | 0x00..=0x1f | 0x7f => (u32::from(b), 1),
            0xC2 if matches!(bytes.get(index + 1), Some(0x80..=0x9f)) => {
                (u32::from(bytes[index + 1]), 2)
            }
            0xE2 if bytes.get(index + 1) == Some(&0x80)
                && matches!(bytes.get(index + 2), Some(0xA8 | 0xA9)) =>
            {
                (0x2000 | u32::from(bytes[index + 2] & 0x3f), 3)
            }
            _ => {
                index += 1;
                continue;
            }
        };
        out.put_slice(&bytes[clean_from..index]);
        index += width;
        clean_from = index;
        let short = match unit {
            0x22 => Some(b'"'),
            0x5c => Some(b'\\'),
            0x08 => Some(b'b'),
            0x09 => Some(b't'),
            0x0a => Some(b'n'),
            0x0c => Some(b'f'),
            0x0d => Some(b'r'),
            _ => None,
        };
        match short {
            Some(letter) => out.put_slice(&[b'\\', letter]),
            None => {
                let hex = |shift: u32| HEX_UPPER[((unit >> shift) & 0xF) as usize];
                out.put_slice(&[b'\\', b'u', hex(12), hex(8), hex(4), hex(0)]);
            }
        }
        // The plain run up to the next escape (a property value, say) in words.
        index += clean_prefix_len(&bytes[index..]);
    }
    out.put_slice(&bytes[clean_from..]);
    out.put_u8(b'"');
}

/// Bit 7 of each byte of a word: where the word-at-a-time scans below report a match.
const HIGHS: u64 = 0x8080_8080_8080_8080;
/// 0x01 in each byte of a word.
const ONES: u64 = 0x0101_0101_0101_0101;

/// Bit 7 set in the bytes of `word` that are zero. The borrow of the subtraction can only
/// mark bytes above a true zero, so the lowest marked byte is exact.
#[inline]
fn zero_bytes(word: u64) -> u64 {
    word.wrapping_sub(ONES) & !word & HIGHS
}

/// Bit 7 set in the bytes of `word` that `write_string` may have to escape: below 0x20,
/// `"`, `\`, DEL and everything from 0x80 up. Marks may be spurious only above a true
/// mark (a borrow or carry runs upward), so every byte below the lowest mark is plain.
#[inline]
fn escape_candidates(word: u64) -> u64 {
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
    let del_or_high = (word | word.wrapping_add(ONES)) & HIGHS;
    control
        | del_or_high
        | zero_bytes(word ^ (ONES * u64::from(b'"')))
        | zero_bytes(word ^ (ONES * u64::from(b'\\')))
}

/// How many leading bytes of `bytes` are printable ASCII other than `"` and `\`, which
/// `write_string` copies unchanged; scanned eight bytes at a time (the last word padded
/// with spaces) instead of one table lookup per byte.
#[inline]
fn clean_prefix_len(bytes: &[u8]) -> usize {
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let word = match rest.first_chunk::<8>() {
            Some(chunk) => u64::from_le_bytes(*chunk),
            // A byte loop, not `copy_from_slice`: a variable-length copy becomes a `memcpy`
            // call, which costs more than the whole scan of a short key.
            None => rest
                .iter()
                .enumerate()
                .fold(ONES * u64::from(b' '), |word, (i, &b)| {
                    word ^ (u64::from(b ^ b' ') << (8 * i))
                }),
        };
        let marks = escape_candidates(word);
        if marks != 0 {
            return (at + (marks.trailing_zeros() / 8) as usize).min(bytes.len());
        }
        at += 8;
    }
    bytes.len()
}

/// Bytes the word-at-a-time scan covers before it hands a long string to `memchr2`.
const SHORT_SCAN_BYTES: usize = 64;

/// Index of the first `"` or `\\` in `bytes`: where a JSON string ends or needs decoding.
///
/// Header strings are short (one-letter keys, values of a few bytes), where a call into
/// `memchr2` costs more than the scan: the first [`SHORT_SCAN_BYTES`] are scanned eight
/// bytes at a time in a register, the rest (long properties) by `memchr2`.
#[inline]
fn find_quote_or_backslash(bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    while at + 8 <= bytes.len().min(SHORT_SCAN_BYTES) {
        let word = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let hits = zero_bytes(word ^ (ONES * u64::from(b'"')))
            | zero_bytes(word ^ (ONES * u64::from(b'\\')));
        if hits != 0 {
            return Some(at + (hits.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    if at >= SHORT_SCAN_BYTES {
        return memchr::memchr2(b'"', b'\\', &bytes[at..]).map(|i| at + i);
    }
    bytes[at..]
        .iter()
        .position(|&b| b == b'"' || b == b'\\')
        .map(|i| at + i)
}

/// A cursor over the header bytes. Every method bounds-checks through `peek`/`next_byte`,
/// so no input can make it index out of range.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// The whole buffer is valid UTF-8, so any slice of it between ASCII delimiters is.
    all_utf8: bool,
}

/// A JSON string as first scanned.
enum RawString<'a> {
    /// No escapes: the bytes between the quotes.
    Plain(&'a [u8]),
    /// Has escapes; its text starts at this index.
    Escaped(usize),
}

/// A scalar JSON value as the extFields reader sees it.
enum Scalar<'a> {
    Text(Cow<'a, str>),
    Null,
}

impl<'a> Reader<'a> {
    fn error(&self, why: &str) -> HeaderDecodeError {
        HeaderDecodeError::Json(format!("{why} at byte {} of {}", self.pos, self.buf.len()))
    }

    fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    fn next_byte(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.pos += 1;
        Some(byte)
    }

    fn expect(&mut self, want: u8, why: &str) -> Result<(), HeaderDecodeError> {
        if self.peek() == Some(want) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(why))
        }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// Consumes `word` (a JSON literal) or fails.
    fn literal(&mut self, word: &[u8]) -> Result<(), HeaderDecodeError> {
        if self.buf[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(self.error("invalid JSON literal"))
        }
    }

    /// Reads a JSON string (the cursor is on its opening quote). Borrows from the input
    /// when the string has no escapes.
    #[inline]
    fn string(&mut self) -> Result<Cow<'a, str>, HeaderDecodeError> {
        let raw = match self.raw_string()? {
            RawString::Plain(raw) => raw,
            RawString::Escaped(start) => return self.unescaped(start).map(Cow::Owned),
        };
        self.checked_text(raw).map(Cow::Borrowed)
    }

    /// Appends a JSON string's text to `out` (the cursor is on its opening quote),
    /// unescaping straight into it: the properties value of every send has escapes, and
    /// this spares it a string of its own.
    #[inline]
    fn string_into(&mut self, out: &mut String) -> Result<(), HeaderDecodeError> {
        let start = match self.raw_string()? {
            RawString::Plain(raw) => {
                out.push_str(self.checked_text(raw)?);
                return Ok(());
            }
            RawString::Escaped(start) => start,
        };
        if !self.all_utf8 {
            out.push_str(&self.unescaped(start)?);
            return Ok(());
        }
        let from = out.len();
        // SAFETY: `buf` is valid UTF-8 (checked in `read`), and `unescape_rest` appends
        // runs of it cut only at ASCII bytes (whole characters) and characters encoded by
        // `char::encode_utf8`, so `out` holds valid UTF-8 after every step; on an error
        // the partial value is truncated away at `from`, a character boundary.
        let bytes = unsafe { out.as_mut_vec() };
        let unescaped = self.unescape_rest(start, bytes);
        if unescaped.is_err() {
            bytes.truncate(from);
        }
        unescaped
    }

    /// Scans a JSON string from its opening quote: the text between the quotes when it has
    /// no escapes (the cursor then past the closing quote), else where its text starts (the
    /// cursor on the first backslash).
    #[inline]
    fn raw_string(&mut self) -> Result<RawString<'a>, HeaderDecodeError> {
        self.expect(b'"', "expected a JSON string")?;
        let start = self.pos;
        // Fast scan: most header strings have no escapes at all. Slice scans (not one
        // bounds-checked `peek` per byte) because every header string goes through here.
        let Some(stop) = find_quote_or_backslash(&self.buf[start..]) else {
            self.pos = self.buf.len();
            return Err(self.error("unterminated JSON string"));
        };
        self.pos = start + stop;
        if self.buf[self.pos] == b'"' {
            self.pos += 1;
            return Ok(RawString::Plain(&self.buf[start..start + stop]));
        }
        Ok(RawString::Escaped(start))
    }

    /// `raw` (a string's bytes between its quotes) as text.
    #[inline]
    fn checked_text(&self, raw: &'a [u8]) -> Result<&'a str, HeaderDecodeError> {
        if self.all_utf8 {
            // SAFETY: `buf` is valid UTF-8 (checked in `read`) and `raw` starts right
            // after an ASCII `"` and ends right before one. ASCII bytes are never part
            // of a multi-byte sequence, so both ends are char boundaries and the slice
            // is valid UTF-8 on its own.
            return Ok(unsafe { std::str::from_utf8_unchecked(raw) });
        }
        std::str::from_utf8(raw).map_err(|_| self.error("JSON string is not valid UTF-8"))
    }

    /// The escaped string that starts at `start` (the cursor on its first backslash),
    /// decoded into a string of its own.
    fn unescaped(&mut self, start: usize) -> Result<String, HeaderDecodeError> {
        // Unescaping only shrinks, so the rest of the header bounds the string.
        let mut text = Vec::with_capacity(self.buf.len() - start);
        self.unescape_rest(start, &mut text)?;
        if self.all_utf8 {
            // SAFETY: `text` is runs of `buf` (valid UTF-8, checked in `read`) cut only at
            // ASCII bytes (`"`, `\\` and the escapes after them), hence whole characters,
            // plus characters encoded by `char::encode_utf8`: valid UTF-8 throughout.
            return Ok(unsafe { String::from_utf8_unchecked(text) });
        }
        String::from_utf8(text).map_err(|_| self.error("JSON string is not valid UTF-8"))
    }

    /// Appends the string that starts at `start` to `text`, decoding escapes (the cursor is
    /// on its first backslash), and moves the cursor past its closing quote. Copies the
    /// runs between escapes whole.
    fn unescape_rest(&mut self, start: usize, text: &mut Vec<u8>) -> Result<(), HeaderDecodeError> {
        text.extend_from_slice(&self.buf[start..self.pos]);
        loop {
            match self.next_byte() {
                None => return Err(self.error("unterminated JSON string")),
                Some(b'"') => return Ok(()),
                Some(b'\\') => {
                    let escaped = match self.next_byte() {
                        Some(b'"') => b'"',
                        Some(b'\\') => b'\\',
                        Some(b'/') => b'/',
                        Some(b'b') => 0x08,
                        Some(b'f') => 0x0c,
                        Some(b'n') => b'\n',
                        Some(b'r') => b'\r',
                        Some(b't') => b'\t',
                        Some(b'u') => {
                            if let Some(byte) = self.ascii_escape() {
                                text.push(byte);
                                continue;
                            }
                            let ch = self.unicode_escape()?;
                            let mut utf8 = [0u8; 4];
                            text.extend_from_slice(ch.encode_utf8(&mut utf8).as_bytes());
                            continue;
                        }
                        _ => return Err(self.error("invalid escape in JSON string")),
                    };
                    text.push(escaped);
                }
                // Raw control bytes are not strict JSON, but lenient peers emit them
                // inside property strings; they carry no ambiguity, so keep them.
                Some(byte) => {
                    text.push(byte);
                    let rest = &self.buf[self.pos..];
                    let run = find_quote_or_backslash(rest).unwrap_or(rest.len());
                    text.extend_from_slice(&rest[..run]);
                    self.pos += run;
                }
            }
        }
    }

    /// The ASCII character of a `\u00XX` escape below U+0080 (the cursor after the `u`),
    /// consuming it; `None`, consuming nothing, for anything else. Every property string a
    /// Java client sends has two of these per property (`\u0001`, `\u0002`).
    fn ascii_escape(&mut self) -> Option<u8> {
        let &[b'0', b'0', high, low] = self.buf.get(self.pos..self.pos + 4)? else {
            return None;
        };
        let value = hex_digit(high)? << 4 | hex_digit(low)?;
        if value >= 0x80 {
            return None;
        }
        self.pos += 4;
        Some(value)
    }

    /// Decodes the `XXXX` after `\u` (and a following `\uXXXX` low surrogate when the first
    /// is a high surrogate). A lone surrogate cannot live in a Rust string; Java would turn
    /// it into `?` when encoding to UTF-8, we turn it into U+FFFD.
    fn unicode_escape(&mut self) -> Result<char, HeaderDecodeError> {
        let first = self.hex4()?;
        if (0xD800..0xDC00).contains(&first) {
            if self.buf[self.pos..].starts_with(b"\\u") {
                let save = self.pos;
                self.pos += 2;
                let second = self.hex4()?;
                if (0xDC00..0xE000).contains(&second) {
                    let code = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
                    return Ok(char::from_u32(code).unwrap_or('\u{FFFD}'));
                }
                // Not a low surrogate: leave it to be decoded on its own.
                self.pos = save;
            }
            return Ok('\u{FFFD}');
        }
        Ok(char::from_u32(first).unwrap_or('\u{FFFD}'))
    }

    fn hex4(&mut self) -> Result<u32, HeaderDecodeError> {
        let mut value = 0u32;
        for _ in 0..4 {
            let Some(digit) = self.next_byte().and_then(hex_digit) else {
                return Err(self.error("invalid \\u escape in JSON string"));
            };
            value = value << 4 | u32::from(digit);
        }
        Ok(value)
    }

    /// Reads a JSON number and returns its text unchanged (validated against the JSON
    /// number grammar).
    fn number_text(&mut self) -> Result<&'a str, HeaderDecodeError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.skip_digits(),
            _ => return Err(self.error("invalid JSON number")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.error("invalid JSON number: no digit after '.'"));
            }
            self.skip_digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.error("invalid JSON number: no digit in exponent"));
            }
            self.skip_digits();
        }
        let text = &self.buf[start..self.pos];
        debug_assert!(text.is_ascii());
        // SAFETY: every byte consumed above is one of `-+.eE0-9`, all ASCII, so the slice
        // is valid UTF-8.
        Ok(unsafe { std::str::from_utf8_unchecked(text) })
    }

    fn skip_digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }

    /// `code`/`version`/`opaque`/`flag`: a JSON integer, the same integer quoted, or null
    /// (= 0, as for a missing key).
    fn int_field(&mut self, field: &str) -> Result<i32, HeaderDecodeError> {
        let text: Cow<'a, str> = match self.peek() {
            Some(b'"') => self.string()?,
            Some(b'n') => {
                self.literal(b"null")?;
                return Ok(0);
            }
            _ => Cow::Borrowed(self.number_text()?),
        };
        let trimmed = text.trim();
        trimmed.parse::<i32>().map_err(|_| {
            HeaderDecodeError::Json(format!(
                "header field {field} must be a 32-bit integer, found {trimmed:?} (before byte {})",
                self.pos
            ))
        })
    }

    /// `language`: the enum name (unknown names are `OTHER`), or fastjson's ordinal.
    fn language(&mut self) -> Result<LanguageCode, HeaderDecodeError> {
        match self.peek() {
            Some(b'"') => Ok(LanguageCode::from_name(&self.string()?)),
            Some(b'n') => {
                self.literal(b"null")?;
                Ok(LanguageCode::Java)
            }
            _ => {
                let text = self.number_text()?;
                let ordinal = text.parse::<u8>().unwrap_or(u8::MAX);
                Ok(LanguageCode::from_code(ordinal))
            }
        }
    }

    fn remark(&mut self) -> Result<Option<String>, HeaderDecodeError> {
        match self.scalar()? {
            Scalar::Text(text) => Ok(Some(text.into_owned())),
            Scalar::Null => Ok(None),
        }
    }

    /// A string, number (its text), boolean (`"true"`/`"false"`) or null.
    fn scalar(&mut self) -> Result<Scalar<'a>, HeaderDecodeError> {
        match self.peek() {
            Some(b'"') => Ok(Scalar::Text(self.string()?)),
            Some(b't') => {
                self.literal(b"true")?;
                Ok(Scalar::Text(Cow::Borrowed("true")))
            }
            Some(b'f') => {
                self.literal(b"false")?;
                Ok(Scalar::Text(Cow::Borrowed("false")))
            }
            Some(b'n') => {
                self.literal(b"null")?;
                Ok(Scalar::Null)
            }
            Some(b'-' | b'0'..=b'9') => Ok(Scalar::Text(Cow::Borrowed(self.number_text()?))),
            _ => Err(self.error("expected a string, number, boolean or null")),
        }
    }

    /// `extFields`: an object of scalars, or null (= absent).
    fn ext_fields(&mut self) -> Result<ExtFields, HeaderDecodeError> {
        if self.peek() == Some(b'n') {
            self.literal(b"null")?;
            return Ok(ExtFields::new());
        }
        self.expect(b'{', "extFields must be a JSON object")?;
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(ExtFields::new());
        }
        // Every key and value fits in what is left of the header: one text allocation.
        let mut fields = ExtFields::with_capacities(EXT_FIELDS_CAPACITY, self.buf.len() - self.pos);
        loop {
            self.skip_ws();
            let key = match self.one_letter_key() {
                Some(key) => Cow::Borrowed(key),
                None => self.string()?,
            };
            self.skip_ws();
            self.expect(b':', "expected ':' after an extFields key")?;
            self.skip_ws();
            if self.peek() == Some(b'"') {
                // The common case (Java sends every value as a string): straight into
                // the map's text.
                fields.insert_with(&key, |text| self.string_into(text))?;
            } else {
                match self.scalar()? {
                    Scalar::Text(value) => fields.insert_str(&key, &value),
                    // JSON null is an absent value; a later duplicate null removes an
                    // earlier value, as putting null into Java's map would.
                    Scalar::Null => {
                        fields.remove(&key);
                    }
                }
            }
            self.skip_ws();
            match self.next_byte() {
                Some(b',') => continue,
                Some(b'}') => return Ok(fields),
                _ => return Err(self.error("expected ',' or '}' in extFields")),
            }
        }
    }

    /// A key of one ASCII character, read without the string scan: SEND_MESSAGE_V2 and
    /// its batch and reply forms, most of the traffic, use only the keys `a`..`n`.
    fn one_letter_key(&mut self) -> Option<&'a str> {
        match self.buf.get(self.pos..self.pos + 3)? {
            [b'"', letter, b'"'] if letter.is_ascii() && *letter != b'\\' && *letter != b'"' => {
                let key = &self.buf[self.pos + 1..self.pos + 2];
                self.pos += 3;
                // SAFETY: one ASCII byte is valid UTF-8.
                Some(unsafe { std::str::from_utf8_unchecked(key) })
            }
            _ => None,
        }
    }

    /// Skips any JSON value; nesting is bounded by [`MAX_SKIP_DEPTH`].
    fn skip_value(&mut self, depth: usize) -> Result<(), HeaderDecodeError> {
        if depth > MAX_SKIP_DEPTH {
            return Err(self.error("JSON nested too deeply"));
        }
        match self.peek() {
            Some(b'{') => {
                self.pos += 1;
                self.skip_ws();
                if self.peek() == Some(b'}') {
                    self.pos += 1;
                    return Ok(());
                }
                loop {
                    self.skip_ws();
                    self.string()?;
                    self.skip_ws();
                    self.expect(b':', "expected ':' after an object key")?;
                    self.skip_ws();
                    self.skip_value(depth + 1)?;
                    self.skip_ws();
                    match self.next_byte() {
                        Some(b',') => continue,
                        Some(b'}') => return Ok(()),
                        _ => return Err(self.error("expected ',' or '}' in an object")),
                    }
                }
            }
            Some(b'[') => {
                self.pos += 1;
                self.skip_ws();
                if self.peek() == Some(b']') {
                    self.pos += 1;
                    return Ok(());
                }
                loop {
                    self.skip_ws();
                    self.skip_value(depth + 1)?;
                    self.skip_ws();
                    match self.next_byte() {
                        Some(b',') => continue,
                        Some(b']') => return Ok(()),
                        _ => return Err(self.error("expected ',' or ']' in an array")),
                    }
                }
            }
            _ => self.scalar().map(drop),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(cmd: &RemotingCommand) -> String {
        let mut out = BytesMut::new();
        write(cmd, &mut out);
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn spec_example_encodes_exactly() {
        let mut cmd = RemotingCommand::request(105, 7).with_ext("topic", "TopicTest");
        cmd.version = 481;
        assert_eq!(
            encode(&cmd),
            r#"{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON","version":481}"#
        );
    }

    #[test]
    fn spec_response_example_encodes_exactly() {
        let mut cmd = RemotingCommand::request(0, 0);
        cmd.flag = 1;
        cmd.version = 403;
        assert_eq!(
            encode(&cmd),
            r#"{"code":0,"flag":1,"language":"JAVA","opaque":0,"serializeTypeCurrentRPC":"JSON","version":403}"#
        );
    }

    #[test]
    fn remark_is_written_only_when_present() {
        let mut cmd = RemotingCommand::request(1, 2);
        cmd.remark = Some(String::new());
        assert!(encode(&cmd).contains(r#","remark":"","#));
        cmd.remark = None;
        assert!(!encode(&cmd).contains("remark"));
    }

    /// fastjson's escaping, char by char: the definition `write_string` must match.
    fn escaped_by_definition(text: &str) -> String {
        let mut out = String::from("\"");
        for c in text.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\u{8}' => out.push_str("\\b"),
                '\t' => out.push_str("\\t"),
                '\n' => out.push_str("\\n"),
                '\u{c}' => out.push_str("\\f"),
                '\r' => out.push_str("\\r"),
                '\0'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}' => {
                    out.push_str(&format!("\\u{:04X}", u32::from(c)));
                }
                _ => out.push(c),
            }
        }
        out.push('"');
        out
    }

    proptest::proptest! {
        #[test]
        fn strings_are_escaped_as_fastjson_defines(
            text in "(\\PC|[\\x00-\\x1f\\x7f-\\u{9f}\\u{2028}\\u{2029}\"\\\\])*"
        ) {
            let mut out = BytesMut::new();
            write_string(&mut out, &text);
            proptest::prop_assert_eq!(
                std::str::from_utf8(&out).unwrap(),
                escaped_by_definition(&text)
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn clean_prefix_ends_at_the_first_byte_that_may_need_escaping(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    8 => 0x20u8..0x7f,
                    1 => proptest::num::u8::ANY,
                ],
                0..40,
            )
        ) {
            let plain = |b: &u8| (0x20..0x7f).contains(b) && *b != b'"' && *b != b'\\';
            let expected = bytes.iter().position(|b| !plain(b)).unwrap_or(bytes.len());
            proptest::prop_assert_eq!(clean_prefix_len(&bytes), expected);
        }
    }

    /// An extFields value as a peer may write it.
    #[derive(Debug, Clone)]
    enum WireValue {
        Text(String),
        Number(i64),
        Bool(bool),
        Null,
    }

    fn wire_value() -> impl proptest::strategy::Strategy<Value = WireValue> {
        use proptest::prelude::*;
        prop_oneof![
            4 => "([ -~]|[\\x00-\\x1f\"\\\\é\u{2028}])*".prop_map(WireValue::Text),
            1 => any::<i64>().prop_map(WireValue::Number),
            1 => any::<bool>().prop_map(WireValue::Bool),
            1 => Just(WireValue::Null),
        ]
    }

    proptest::proptest! {
        /// Duplicates, nulls, escaped keys and non-string scalars decode as Java's map
        /// would hold them: the model is the same edits made through the public API.
        #[test]
        fn extfields_decode_like_the_same_edits_on_a_map(
            entries in proptest::collection::vec(
                (proptest::sample::select(vec!["a", "b", "i", "key", "k\"é", "\u{1}"]), wire_value()),
                0..24,
            )
        ) {
            let mut header = BytesMut::from(&br#"{"code":310,"extFields":{"#[..]);
            let mut expected = ExtFields::new();
            for (at, (key, value)) in entries.iter().enumerate() {
                if at > 0 {
                    header.put_u8(b',');
                }
                write_string(&mut header, key);
                header.put_u8(b':');
                match value {
                    WireValue::Text(text) => {
                        write_string(&mut header, text);
                        expected.insert_str(key, text);
                    }
                    WireValue::Number(n) => {
                        header.put_slice(n.to_string().as_bytes());
                        expected.insert_str(key, &n.to_string());
                    }
                    WireValue::Bool(b) => {
                        header.put_slice(b.to_string().as_bytes());
                        expected.insert_str(key, &b.to_string());
                    }
                    WireValue::Null => {
                        header.put_slice(b"null");
                        expected.remove(key);
                    }
                }
            }
            header.put_slice(br#"},"flag":0,"language":"JAVA","opaque":7,"version":1}"#);
            let decoded = read(&header).unwrap();
            proptest::prop_assert_eq!(&decoded.ext_fields, &expected);
            proptest::prop_assert_eq!(decoded.ext_fields.len(), expected.len());
            for (key, value) in expected.iter() {
                proptest::prop_assert_eq!(decoded.ext_fields.get(key), Some(value));
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn extfields_round_trip_through_the_wire_form(
            entries in proptest::collection::vec(
                ("[a-n]|\\PC{1,8}", "(\\PC|[\\x00-\\x1f\\u{80}-\\u{9f}\\u{2028}\"\\\\])*"),
                0..12,
            )
        ) {
            let mut cmd = RemotingCommand::request(310, 1);
            for (key, value) in &entries {
                cmd.ext_fields.insert_str(key, value);
            }
            let mut out = BytesMut::new();
            write(&cmd, &mut out);
            let back = read(&out).unwrap();
            proptest::prop_assert_eq!(back.ext_fields, cmd.ext_fields);
        }
    }

    #[test]
    fn escapes_like_fastjson() {
        let mut out = BytesMut::new();
        write_string(
            &mut out,
            "a\u{1}b\u{2}\"\\\n\t\u{b}\u{7f}\u{9f}\u{a0}é\u{2028}/\u{1F600}",
        );
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "\"a\\u0001b\\u0002\\\"\\\\\\n\\t\\u000B\\u007F\\u009F\u{a0}é\\u2028/\u{1F600}\""
        );
    }

    #[test]
    fn negative_and_extreme_integers() {
        let mut cmd = RemotingCommand::request(i32::MIN, i32::MAX);
        cmd.flag = -1;
        cmd.version = 0;
        let text = encode(&cmd);
        assert!(text.contains("\"code\":-2147483648"), "{text}");
        assert!(text.contains("\"opaque\":2147483647"), "{text}");
        let back = read(text.as_bytes()).unwrap();
        assert_eq!(back.code, i32::MIN);
        assert_eq!(back.opaque, i32::MAX);
        assert_eq!(back.flag, -1);
    }

    #[test]
    fn reads_go_shape() {
        let cmd = read(
            br#"{"code":310,"language":"GO","version":317,"opaque":1,"flag":0,"remark":"","extFields":{"a":"G","b":"T"}}"#,
        )
        .unwrap();
        assert_eq!(cmd.code, 310);
        assert_eq!(cmd.language, LanguageCode::Go);
        assert_eq!(cmd.version, 317);
        assert_eq!(cmd.opaque, 1);
        assert_eq!(cmd.remark.as_deref(), Some(""));
        assert_eq!(cmd.ext_fields.get("a"), Some("G"));
        assert_eq!(cmd.ext_fields.get("b"), Some("T"));
    }

    #[test]
    fn reads_cpp_shape_with_numbers_booleans_null_and_newline() {
        let cmd = read(
            b"{\"code\":310,\"extFields\":{\"AccessKey\":\"\",\"d\":4,\"e\":-1,\"g\":1.5e3,\"k\":false,\"m\":true,\"x\":null},\"flag\":0,\"language\":\"CPP\",\"opaque\":5,\"remark\":\"\",\"version\":333}\n",
        )
        .unwrap();
        assert_eq!(cmd.language, LanguageCode::Cpp);
        assert_eq!(cmd.ext_fields.get("AccessKey"), Some(""));
        assert_eq!(cmd.ext_fields.get("d"), Some("4"));
        assert_eq!(cmd.ext_fields.get("e"), Some("-1"));
        assert_eq!(cmd.ext_fields.get("g"), Some("1.5e3"));
        assert_eq!(cmd.ext_fields.get("k"), Some("false"));
        assert_eq!(cmd.ext_fields.get("m"), Some("true"));
        assert_eq!(cmd.ext_fields.get("x"), None);
        assert_eq!(cmd.ext_fields.len(), 6);
    }

    #[test]
    fn defaults_skips_unknown_and_accepts_quoted_numbers() {
        let cmd = read(
            br#" { "zz" : {"a":[1,2,{"b":null}],"c":"\""} , "opaque" : "-12", "language":"KLINGON", "code":null } "#,
        )
        .unwrap();
        assert_eq!(cmd.code, 0);
        assert_eq!(cmd.opaque, -12);
        assert_eq!(cmd.version, 0);
        assert_eq!(cmd.flag, 0);
        assert_eq!(cmd.language, LanguageCode::Other);
        assert!(cmd.remark.is_none());
        assert!(cmd.ext_fields.is_empty());
        assert!(read(b"{}").is_ok());
    }

    #[test]
    fn string_escapes_and_surrogates() {
        let cmd = read(
            br#"{"remark":"a\u0001\u00e9\/\b\f\n\r\t\"\\\ud83d\ude00\ud800x\udc00","extFields":{"k\u0041":"v"}}"#,
        )
        .unwrap();
        assert_eq!(
            cmd.remark.as_deref(),
            Some("a\u{1}é/\u{8}\u{c}\n\r\t\"\\\u{1F600}\u{FFFD}x\u{FFFD}")
        );
        assert_eq!(cmd.ext_fields.get("kA"), Some("v"));
    }

    #[test]
    fn malformed_inputs_are_typed_errors() {
        let cases: &[&[u8]] = &[
            b"",
            b"[]",
            b"{",
            b"{\"code\"",
            b"{\"code\":}",
            b"{\"code\":1.5}",
            b"{\"code\":99999999999}",
            b"{\"code\":\"x\"}",
            b"{\"code\":1,}",
            b"{\"code\":1} x",
            b"{\"extFields\":[]}",
            b"{\"extFields\":{\"a\":{}}}",
            b"{\"extFields\":{\"a\":[1]}}",
            b"{\"remark\":\"\\x\"}",
            b"{\"remark\":\"\\u12\"}",
            b"{\"remark\":\"\xff\"}",
            b"{\"remark\":tru}",
            b"{\"remark\":-}",
            b"{\"remark\":01}",
        ];
        for case in cases {
            match read(case) {
                Err(HeaderDecodeError::Json(_)) => {}
                other => panic!("{:?} decoded to {other:?}", String::from_utf8_lossy(case)),
            }
        }
    }

    #[test]
    fn quote_scan_finds_the_first_quote_or_backslash_at_every_length() {
        for len in 0..160 {
            for hit in 0..=len {
                for mark in [b'"', b'\\'] {
                    // Bytes one off the marks, and high bytes, around the hit.
                    let mut bytes: Vec<u8> = (0..len)
                        .map(|i| [b'!', b'#', b'[', b']', 0xE9, 0x80][i % 6])
                        .collect();
                    if hit < len {
                        bytes[hit] = mark;
                        if hit + 1 < len {
                            bytes[hit + 1] = b'"';
                        }
                    }
                    let want = bytes.iter().position(|&b| b == b'"' || b == b'\\');
                    assert_eq!(find_quote_or_backslash(&bytes), want, "len {len} hit {hit}");
                }
            }
        }
    }

    #[test]
    fn escaped_values_decode_straight_into_the_map() {
        let long = "x\\u0001".repeat(30);
        let text = format!(r#"{{"extFields":{{"a":"p","i":"{long}","a":"q\"r"}}}}"#);
        let cmd = read(text.as_bytes()).unwrap();
        assert_eq!(cmd.ext_fields.get("i"), Some("x\u{1}".repeat(30).as_str()));
        assert_eq!(cmd.ext_fields.get("a"), Some("q\"r"));
        assert_eq!(cmd.ext_fields.len(), 2);
        assert!(read(br#"{"extFields":{"a":"ok","b":"bad \q escape"}}"#).is_err());
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let mut text = b"{\"x\":".to_vec();
        text.extend(std::iter::repeat_n(b'[', 100_000));
        assert!(matches!(read(&text), Err(HeaderDecodeError::Json(_))));
    }

    #[test]
    fn duplicate_keys_last_wins() {
        let cmd =
            read(br#"{"code":1,"code":2,"extFields":{"a":"1","a":"2","b":"x","b":null}}"#).unwrap();
        assert_eq!(cmd.code, 2);
        assert_eq!(cmd.ext_fields.get("a"), Some("2"));
        assert_eq!(cmd.ext_fields.get("b"), None);
    }

    /// Rough cost of a send response's header; prints, asserts nothing about time.
    #[test]
    fn measure_send_response_encode() {
        let mut cmd = RemotingCommand::request(0, 42);
        cmd.flag = 1;
        for (key, value) in [
            ("msgId", "7F00000100002A9F0000000000A0B1C2"),
            ("queueId", "3"),
            ("queueOffset", "123456"),
            ("MSG_REGION", "DefaultRegion"),
            ("TRACE_ON", "true"),
        ] {
            cmd.ext_fields.insert_str(key, value);
        }
        let rounds = 20_000u32;
        let mut out = BytesMut::with_capacity(512);
        let mut best = std::time::Duration::MAX;
        for _ in 0..10 {
            let start = std::time::Instant::now();
            for _ in 0..rounds {
                out.clear();
                write(std::hint::black_box(&cmd), &mut out);
            }
            best = best.min(start.elapsed() / rounds);
        }
        assert!(read(&out).is_ok());
        eprintln!(
            "send response JSON header encode: {best:?} per header ({} bytes)",
            out.len()
        );
    }

    /// Rough cost of the hot path; prints, asserts nothing about time.
    #[test]
    fn measure_send_v2_decode() {
        let header = br#"{"code":310,"extFields":{"a":"please_rename_unique_group_name","b":"TopicTest","c":"TBW102","d":"4","e":"3","f":"0","g":"1700000000000","h":"0","i":"TAGS\u0001TagA\u0002KEYS\u0001OrderID188\u0002UNIQ_KEY\u00017F0000017A6418B4AAC2580000000000\u0002WAIT\u0001true\u0002","j":"0","k":"false","m":"false","n":"broker-a"},"flag":0,"language":"JAVA","opaque":42,"serializeTypeCurrentRPC":"JSON","version":481}"#;
        let rounds = 20_000u32;
        // Best of several batches: the build machine is shared, the minimum is the signal.
        let mut best = std::time::Duration::MAX;
        for _ in 0..10 {
            let start = std::time::Instant::now();
            let mut total = 0usize;
            for _ in 0..rounds {
                total += read(std::hint::black_box(header)).unwrap().ext_fields.len();
            }
            best = best.min(start.elapsed() / rounds);
            assert_eq!(total, 13 * rounds as usize);
        }
        eprintln!(
            "SEND_MESSAGE_V2 JSON header decode: {best:?} per header ({} bytes)",
            header.len()
        );
    }
}
