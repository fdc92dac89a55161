//! ROCKETMQ binary header serialization (type 1), `remoting.md` §5: the fixed 21-byte part
//! (code, language, version, opaque, flag, remark length, extFields length), the remark and
//! the length-prefixed extFields map block. Every length is checked against what is left
//! of the header before anything is copied, so a hostile length never allocates.

use bytes::{BufMut, BytesMut};

use crate::codes::LanguageCode;
use crate::command::{ExtFields, HeaderDecodeError, RemotingCommand, SerializeType};

/// Bytes of the fixed part: code 2, language 1, version 2, opaque 4, flag 4, remark
/// length 4, extFields length 4.
pub const FIXED_HEADER_BYTES: usize = 21;

/// Parses a binary header into a command with an empty body.
pub fn read(header: &[u8]) -> Result<RemotingCommand, HeaderDecodeError> {
    let mut cursor = Cursor {
        buf: header,
        pos: 0,
    };
    if header.len() < FIXED_HEADER_BYTES {
        return Err(HeaderDecodeError::Binary(format!(
            "header of {} bytes is shorter than the {FIXED_HEADER_BYTES}-byte fixed part",
            header.len()
        )));
    }
    // Java writes `(short) code`; read it back signed and keep it as is (§5).
    let code = i32::from(cursor.i16()?);
    let language = LanguageCode::from_code(cursor.u8()?);
    let version = i32::from(cursor.i16()?);
    let opaque = cursor.i32()?;
    let flag = cursor.i32()?;
    let remark_len = cursor.length("remark")?;
    let remark = if remark_len == 0 {
        None
    } else {
        Some(cursor.utf8(remark_len, "remark")?.to_owned())
    };
    let ext_len = cursor.length("extFields block")?;
    let ext_fields = if ext_len == 0 {
        ExtFields::new()
    } else {
        read_map(cursor.take(ext_len, "extFields block")?)?
    };
    // Bytes after the extFields block are ignored, as Java's decoder ignores them.
    Ok(RemotingCommand {
        code,
        language,
        version,
        opaque,
        flag,
        remark,
        ext_fields,
        body: bytes::Bytes::new(),
        serialize_type: SerializeType::RocketMq,
    })
}

/// Decodes the extFields map block: repeated `i16 keyLength, key, i32 valueLength, value`
/// until the block is consumed. Zero-length keys or values are Java nulls: skipped.
fn read_map(block: &[u8]) -> Result<ExtFields, HeaderDecodeError> {
    let mut cursor = Cursor { buf: block, pos: 0 };
    let mut fields = ExtFields::with_capacity(16);
    while cursor.pos < block.len() {
        let key_len = cursor.i16()?;
        let key_len = usize::try_from(key_len).map_err(|_| {
            HeaderDecodeError::Binary(format!("negative extFields key length {key_len}"))
        })?;
        let key = cursor.utf8(key_len, "extFields key")?;
        let value_len = cursor.length("extFields value")?;
        let value = cursor.utf8(value_len, "extFields value")?;
        if !key.is_empty() && !value.is_empty() {
            fields.insert_str(key, value);
        }
    }
    Ok(fields)
}

/// Appends `cmd`'s header in the ROCKETMQ binary layout. The code and version are written
/// as Java's `(short)` casts do (truncated to 16 bits): codes above 32767 need JSON.
/// Entries with an empty key or value are skipped (they would decode as null).
pub fn write(cmd: &RemotingCommand, out: &mut BytesMut) {
    out.reserve(FIXED_HEADER_BYTES + 32 * cmd.ext_fields.len());
    out.put_i16(cmd.code as i16);
    out.put_u8(cmd.language.code());
    out.put_i16(cmd.version as i16);
    out.put_i32(cmd.opaque);
    out.put_i32(cmd.flag);
    match &cmd.remark {
        Some(remark) if !remark.is_empty() => {
            out.put_u32(remark.len() as u32);
            out.put_slice(remark.as_bytes());
        }
        _ => out.put_u32(0),
    }
    let len_at = out.len();
    out.put_u32(0); // extFields block length, patched below
    let block_start = out.len();
    for (key, value) in cmd.ext_fields.iter() {
        // A key longer than an i16 cannot be represented; Java would fail the same way.
        if key.is_empty() || value.is_empty() || key.len() > i16::MAX as usize {
            continue;
        }
        out.put_i16(key.len() as i16);
        out.put_slice(key.as_bytes());
        out.put_u32(value.len() as u32);
        out.put_slice(value.as_bytes());
    }
    let block_len = (out.len() - block_start) as u32;
    out[len_at..len_at + 4].copy_from_slice(&block_len.to_be_bytes());
}

/// Big-endian reads with bounds checks that name the field that ran short.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, len: usize, what: &str) -> Result<&'a [u8], HeaderDecodeError> {
        let left = self.buf.len() - self.pos;
        if len > left {
            return Err(HeaderDecodeError::Binary(format!(
                "{what} of {len} bytes runs past the end ({left} bytes left at offset {})",
                self.pos
            )));
        }
        let bytes = &self.buf[self.pos..self.pos + len];
        self.pos += len;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], HeaderDecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, HeaderDecodeError> {
        Ok(self.array::<1>("language")?[0])
    }

    fn i16(&mut self) -> Result<i16, HeaderDecodeError> {
        Ok(i16::from_be_bytes(self.array("16-bit field")?))
    }

    fn i32(&mut self) -> Result<i32, HeaderDecodeError> {
        Ok(i32::from_be_bytes(self.array("32-bit field")?))
    }

    /// A signed 32-bit length; negative lengths are malformed.
    fn length(&mut self, what: &str) -> Result<usize, HeaderDecodeError> {
        let len = self.i32()?;
        usize::try_from(len)
            .map_err(|_| HeaderDecodeError::Binary(format!("negative {what} length {len}")))
    }

    fn utf8(&mut self, len: usize, what: &str) -> Result<&'a str, HeaderDecodeError> {
        let at = self.pos;
        let bytes = self.take(len, what)?;
        std::str::from_utf8(bytes).map_err(|_| {
            HeaderDecodeError::Binary(format!("{what} at offset {at} is not valid UTF-8"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `remoting.md` §2 worked example, header part only.
    const SPEC_HEADER: &[u8] = &[
        0x00, 0x69, 0x00, 0x01, 0xe1, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x05, b't', b'o', b'p', b'i', b'c', 0x00, 0x00,
        0x00, 0x09, b'T', b'o', b'p', b'i', b'c', b'T', b'e', b's', b't',
    ];

    #[test]
    fn spec_example_both_ways() {
        let cmd = read(SPEC_HEADER).unwrap();
        assert_eq!(cmd.code, 105);
        assert_eq!(cmd.language, LanguageCode::Java);
        assert_eq!(cmd.version, 481);
        assert_eq!(cmd.opaque, 7);
        assert_eq!(cmd.flag, 0);
        assert_eq!(cmd.remark, None);
        assert_eq!(cmd.ext_fields.get("topic"), Some("TopicTest"));
        let mut out = BytesMut::new();
        write(&cmd, &mut out);
        assert_eq!(&out[..], SPEC_HEADER);
    }

    #[test]
    fn pop_code_is_truncated_like_java_and_read_signed() {
        let mut cmd = RemotingCommand::request(200_050, 1);
        cmd.serialize_type = SerializeType::RocketMq;
        let mut out = BytesMut::new();
        write(&cmd, &mut out);
        assert_eq!(read(&out).unwrap().code, 3442);
        cmd.code = 40_000; // (short) 40000 = -25536
        let mut out = BytesMut::new();
        write(&cmd, &mut out);
        assert_eq!(read(&out).unwrap().code, -25_536);
    }

    #[test]
    fn empty_keys_and_values_are_skipped() {
        let mut block = Vec::new();
        for (k, v) in [("", "x"), ("a", ""), ("b", "1"), ("b", "2")] {
            block.extend_from_slice(&(k.len() as i16).to_be_bytes());
            block.extend_from_slice(k.as_bytes());
            block.extend_from_slice(&(v.len() as i32).to_be_bytes());
            block.extend_from_slice(v.as_bytes());
        }
        let mut header = vec![0u8; 17];
        header[13..17].copy_from_slice(&0i32.to_be_bytes());
        header.extend_from_slice(&(block.len() as i32).to_be_bytes());
        header.extend_from_slice(&block);
        let cmd = read(&header).unwrap();
        assert_eq!(cmd.ext_fields.iter().collect::<Vec<_>>(), vec![("b", "2")]);
    }

    #[test]
    fn every_truncation_and_bad_length_is_an_error() {
        for cut in 0..SPEC_HEADER.len() {
            assert!(
                matches!(read(&SPEC_HEADER[..cut]), Err(HeaderDecodeError::Binary(_))),
                "cut {cut}"
            );
        }
        let mut long = SPEC_HEADER.to_vec();
        long.push(0);
        assert_eq!(
            read(&long).unwrap(),
            read(SPEC_HEADER).unwrap(),
            "trailing bytes are ignored"
        );
        let mut bad = SPEC_HEADER.to_vec();
        bad[13..17].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(read(&bad).is_err(), "negative remark length");
        let mut bad = SPEC_HEADER.to_vec();
        bad[17..21].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(read(&bad).is_err(), "extFields length past end");
        let mut bad = SPEC_HEADER.to_vec();
        bad[21..23].copy_from_slice(&(-3i16).to_be_bytes());
        assert!(read(&bad).is_err(), "negative key length");
        let mut bad = SPEC_HEADER.to_vec();
        bad[28..32].copy_from_slice(&10i32.to_be_bytes());
        assert!(read(&bad).is_err(), "value runs past the block");
        let mut bad = SPEC_HEADER.to_vec();
        bad[23] = 0xff;
        assert!(read(&bad).is_err(), "invalid UTF-8 key");
    }

    #[test]
    fn remark_and_unknown_language() {
        let mut cmd = RemotingCommand::request(1, -5);
        cmd.remark = Some("boom ✓".into());
        cmd.language = LanguageCode::Rust;
        let mut out = BytesMut::new();
        write(&cmd, &mut out);
        let back = read(&out).unwrap();
        assert_eq!(back.remark.as_deref(), Some("boom ✓"));
        assert_eq!(back.language, LanguageCode::Rust);
        assert_eq!(back.opaque, -5);
        out[2] = 200;
        assert_eq!(read(&out).unwrap().language, LanguageCode::Other);
    }
}
