//! Message body compression (`message-format.md` §3, §5.3): zlib, LZ4 frame, Zstandard.
//!
//! Owns compress/decompress for the three algorithms sysFlag bits 8–10 name, with the
//! Java client's framing:
//!
//! * ZLIB (type 3, and 0 for clients that only set COMPRESSED_FLAG: Go, C++, Java < 5):
//!   an RFC 1950 stream (`java.util.zip.Deflater` / zlib `compress`), default level 5.
//! * LZ4 (type 1): one LZ4 *frame* as lz4-java's `LZ4FrameOutputStream` writes it —
//!   FLG 0x60 (version 1, independent blocks, no checksums, no content size), BD 0x70
//!   (4 MiB blocks), header checksum 0x73; blocks that do not shrink are stored raw with
//!   the high bit of the block size set; end mark 0. We write exactly that header (Java's
//!   reader rejects frames without the block-independence bit) and read any valid frame.
//! * ZSTD (type 2): a standard Zstandard frame (zstd-jni `ZstdOutputStream`).
//!
//! The broker stores bodies as received and never needs this; clients (and tools) do.
//! Every decompression is bounded by a caller-given maximum output size so a small
//! hostile body cannot expand into gigabytes ([`CompressError::TooLarge`]).

use std::borrow::Cow;
use std::fmt;
use std::io::{self, Read, Write};

use super::sysflag::{self, CompressionType};

/// Java's default `compressLevel` (`rocketmq.message.compressLevel`).
pub const DEFAULT_COMPRESS_LEVEL: i32 = 5;
/// Java producers compress single-message bodies of at least this many bytes
/// (`compressMsgBodyOverHowmuch`); batches are never compressed.
pub const DEFAULT_COMPRESS_THRESHOLD_BYTES: usize = 4096;

/// LZ4 frame magic, little-endian on the wire.
const LZ4_MAGIC: u32 = 0x184D_2204;
/// The frame descriptor lz4-java's default `LZ4FrameOutputStream` writes: FLG, BD, HC.
const LZ4_JAVA_DESCRIPTOR: [u8; 3] = [0x60, 0x70, 0x73];
/// Maximum uncompressed block size of BD 0x70.
const LZ4_BLOCK_MAX_BYTES: usize = 4 * 1024 * 1024;
/// Block-size bit meaning "stored uncompressed".
const LZ4_UNCOMPRESSED_BIT: u32 = 0x8000_0000;

/// Why a body could not be (de)compressed.
#[derive(Debug)]
pub enum CompressError {
    /// sysFlag bit 0 set but bits 8–10 hold an undefined type (4..=7).
    UnknownCompressionType { sys_flag: i32 },
    /// The decompressed output would exceed the caller's bound.
    TooLarge {
        compression: CompressionType,
        max_bytes: usize,
    },
    /// The input is not a valid stream of that algorithm.
    Corrupt {
        compression: CompressionType,
        source: io::Error,
    },
    /// The compressor itself failed (out of memory, bad level).
    CompressFailed {
        compression: CompressionType,
        source: io::Error,
    },
}

impl fmt::Display for CompressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownCompressionType { sys_flag } => write!(
                f,
                "sysFlag 0x{sys_flag:x} marks the body compressed with undefined type {}; \
                 known: 0/3 zlib, 1 lz4, 2 zstd",
                (sys_flag & sysflag::COMPRESSION_TYPE_MASK) >> 8
            ),
            Self::TooLarge {
                compression,
                max_bytes,
            } => write!(
                f,
                "{} body decompresses to more than {max_bytes} bytes; refusing (raise the limit \
                 if the message is legitimate)",
                compression.name()
            ),
            Self::Corrupt {
                compression,
                source,
            } => write!(f, "corrupt {} body: {source}", compression.name()),
            Self::CompressFailed {
                compression,
                source,
            } => write!(f, "{} compression failed: {source}", compression.name()),
        }
    }
}

impl std::error::Error for CompressError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Corrupt { source, .. } | Self::CompressFailed { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Compresses `data` with `compression` at `level` (zlib: clamped to 0..=9, negative =
/// zlib default 6 like Java's `Deflater(-1)`; zstd: passed through; lz4: ignored, as in
/// Java).
pub fn compress(
    data: &[u8],
    compression: CompressionType,
    level: i32,
) -> Result<Vec<u8>, CompressError> {
    let failed = |source| CompressError::CompressFailed {
        compression,
        source,
    };
    match compression {
        CompressionType::Zlib => {
            let level = if level < 0 { 6 } else { level.min(9) as u32 };
            let mut enc = flate2::write::ZlibEncoder::new(
                Vec::with_capacity(data.len() / 2 + 16),
                flate2::Compression::new(level),
            );
            enc.write_all(data).map_err(failed)?;
            enc.finish().map_err(failed)
        }
        CompressionType::Zstd => zstd::stream::encode_all(data, level).map_err(failed),
        CompressionType::Lz4 => Ok(lz4_frame_compress(data)),
    }
}

/// Writes one LZ4 frame byte-compatible in layout with lz4-java's default
/// `LZ4FrameOutputStream` (block contents may differ: any valid LZ4 block decodes).
fn lz4_frame_compress(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() / 2 + 16);
    out.extend_from_slice(&LZ4_MAGIC.to_le_bytes());
    out.extend_from_slice(&LZ4_JAVA_DESCRIPTOR);
    let mut scratch = Vec::new();
    for block in data.chunks(LZ4_BLOCK_MAX_BYTES) {
        scratch.resize(lz4_flex::block::get_maximum_output_size(block.len()), 0);
        // compress_into only fails when the output is too small, which the bound above
        // rules out; fall back to a raw block rather than panic if it ever does.
        let compressed_len =
            lz4_flex::block::compress_into(block, &mut scratch).unwrap_or(usize::MAX);
        // Block lengths are <= 4 MiB, so the u32 casts cannot truncate.
        if compressed_len < block.len() {
            out.extend_from_slice(&(compressed_len as u32).to_le_bytes());
            out.extend_from_slice(&scratch[..compressed_len]);
        } else {
            out.extend_from_slice(&(block.len() as u32 | LZ4_UNCOMPRESSED_BIT).to_le_bytes());
            out.extend_from_slice(block);
        }
    }
    out.extend_from_slice(&0u32.to_le_bytes());
    out
}

/// Walks the structure of a sequence of LZ4 frames (headers, block sizes, end marks,
/// optional checksums) without decompressing, so truncation is reported as lz4-java
/// reports it. Skippable frames are allowed, legacy frames and dictionaries are not
/// (lz4-java supports neither).
fn lz4_check_frames(data: &[u8]) -> Result<(), String> {
    let u32_at = |at: usize| -> Result<u32, String> {
        data.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| format!("LZ4 frame truncated at byte {at}"))
    };
    if data.is_empty() {
        return Err("empty LZ4 body".to_owned());
    }
    let mut pos = 0usize;
    while pos < data.len() {
        let magic = u32_at(pos)?;
        pos += 4;
        if magic & 0xFFFF_FFF0 == 0x184D_2A50 {
            let skip = u32_at(pos)? as usize;
            pos = pos.saturating_add(4).saturating_add(skip);
            if pos > data.len() {
                return Err("LZ4 skippable frame runs past the end".to_owned());
            }
            continue;
        }
        if magic != LZ4_MAGIC {
            return Err(format!(
                "bad LZ4 frame magic 0x{magic:08x} at byte {}",
                pos - 4
            ));
        }
        let flg = *data.get(pos).ok_or("LZ4 frame descriptor truncated")?;
        if flg >> 6 != 1 {
            return Err(format!("unsupported LZ4 frame version {}", flg >> 6));
        }
        if flg & 0x01 != 0 {
            return Err("LZ4 frames with a dictionary id are not supported".to_owned());
        }
        let block_checksum = flg & 0x10 != 0;
        let content_size = flg & 0x08 != 0;
        let content_checksum = flg & 0x04 != 0;
        // FLG, BD, optional content size, HC.
        pos += 2 + if content_size { 8 } else { 0 } + 1;
        if pos > data.len() {
            return Err("LZ4 frame descriptor truncated".to_owned());
        }
        loop {
            let block = u32_at(pos)?;
            pos += 4;
            if block == 0 {
                break;
            }
            let len = (block & 0x7FFF_FFFF) as usize + if block_checksum { 4 } else { 0 };
            pos = pos.saturating_add(len);
            if pos > data.len() {
                return Err("LZ4 block runs past the end of the body".to_owned());
            }
        }
        if content_checksum {
            u32_at(pos)?;
            pos += 4;
        }
    }
    Ok(())
}

/// Reads `reader` to the end, failing once more than `max_bytes` come out.
fn read_bounded<R: Read>(
    reader: R,
    compression: CompressionType,
    max_bytes: usize,
    size_hint: usize,
) -> Result<Vec<u8>, CompressError> {
    // Never pre-allocate from the bound: it may be large while the body is tiny.
    let mut out = Vec::with_capacity(size_hint.min(max_bytes).min(1 << 20));
    let limit = u64::try_from(max_bytes)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    reader
        .take(limit)
        .read_to_end(&mut out)
        .map_err(|source| CompressError::Corrupt {
            compression,
            source,
        })?;
    if out.len() > max_bytes {
        return Err(CompressError::TooLarge {
            compression,
            max_bytes,
        });
    }
    Ok(out)
}

/// Decompresses `data`, producing at most `max_output_bytes`.
pub fn decompress(
    data: &[u8],
    compression: CompressionType,
    max_output_bytes: usize,
) -> Result<Vec<u8>, CompressError> {
    let hint = data.len().saturating_mul(4);
    match compression {
        CompressionType::Zlib => read_bounded(
            flate2::read::ZlibDecoder::new(data),
            compression,
            max_output_bytes,
            hint,
        ),
        CompressionType::Lz4 => {
            // lz4_flex tolerates a missing end mark; Java's reader does not, and a
            // truncated body must not pass as a shorter message.
            lz4_check_frames(data).map_err(|why| CompressError::Corrupt {
                compression,
                source: io::Error::new(io::ErrorKind::InvalidData, why),
            })?;
            read_bounded(
                lz4_flex::frame::FrameDecoder::new(data),
                compression,
                max_output_bytes,
                hint,
            )
        }
        CompressionType::Zstd => {
            let corrupt = |source| CompressError::Corrupt {
                compression,
                source,
            };
            let decoder = zstd::stream::read::Decoder::with_buffer(data).map_err(corrupt)?;
            read_bounded(decoder, compression, max_output_bytes, hint)
        }
    }
}

/// The plain body of a message given its sysFlag: borrowed as-is when bit 0 is clear,
/// else decompressed with the algorithm of bits 8–10 (0 = zlib), bounded.
pub fn decompress_body(
    sys_flag: i32,
    body: &[u8],
    max_output_bytes: usize,
) -> Result<Cow<'_, [u8]>, CompressError> {
    if !sysflag::is_compressed(sys_flag) {
        return Ok(Cow::Borrowed(body));
    }
    let compression = sysflag::compression_type(sys_flag)
        .ok_or(CompressError::UnknownCompressionType { sys_flag })?;
    decompress(body, compression, max_output_bytes).map(Cow::Owned)
}

/// What a Java producer does before sending a single message: bodies of at least
/// `threshold_bytes` are compressed with `compression` and the sysFlag gains bit 0 and
/// the type bits. Returns `None` (send as is) below the threshold or when compression
/// fails, as Java falls back to the raw body.
pub fn compress_for_send(
    body: &[u8],
    sys_flag: i32,
    compression: CompressionType,
    level: i32,
    threshold_bytes: usize,
) -> Option<(Vec<u8>, i32)> {
    if body.len() < threshold_bytes {
        return None;
    }
    let compressed = compress(body, compression, level).ok()?;
    Some((compressed, sysflag::set_compressed(sys_flag, compression)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAX: usize = 64 * 1024 * 1024;

    #[test]
    fn zlib_golden_from_zlib_library() {
        // zlib `compress("hello")` (= Java `Deflater` default level): 78 9C header.
        let java = [
            0x78, 0x9C, 0xCB, 0x48, 0xCD, 0xC9, 0xC9, 0x07, 0x00, 0x06, 0x2C, 0x02, 0x15,
        ];
        assert_eq!(
            decompress(&java, CompressionType::Zlib, MAX).unwrap(),
            b"hello"
        );
        // sysFlag with only bit 0 (Go / C++) means zlib.
        assert_eq!(&*decompress_body(0x1, &java, MAX).unwrap(), b"hello");
        assert_eq!(&*decompress_body(0x301, &java, MAX).unwrap(), b"hello");
        // Not compressed: borrowed untouched.
        assert!(matches!(
            decompress_body(0x300, b"raw", MAX).unwrap(),
            Cow::Borrowed(b"raw")
        ));
    }

    #[test]
    fn zlib_output_is_a_zlib_stream() {
        let c = compress(b"hello hello hello hello", CompressionType::Zlib, 5).unwrap();
        assert_eq!(c[0], 0x78);
        assert_eq!((u16::from(c[0]) << 8 | u16::from(c[1])) % 31, 0);
    }

    #[test]
    fn lz4_java_style_frame_golden() {
        // What lz4-java writes for "Hello": header 04 22 4D 18 60 70 73, one raw block
        // (5 bytes do not shrink), end mark.
        let java = [
            0x04, 0x22, 0x4D, 0x18, 0x60, 0x70, 0x73, 0x05, 0x00, 0x00, 0x80, b'H', b'e', b'l',
            b'l', b'o', 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(compress(b"Hello", CompressionType::Lz4, 5).unwrap(), java);
        assert_eq!(
            decompress(&java, CompressionType::Lz4, MAX).unwrap(),
            b"Hello"
        );
        assert_eq!(&*decompress_body(0x101, &java, MAX).unwrap(), b"Hello");
        // Empty input: header and end mark only.
        assert_eq!(
            compress(b"", CompressionType::Lz4, 0).unwrap(),
            [0x04, 0x22, 0x4D, 0x18, 0x60, 0x70, 0x73, 0, 0, 0, 0]
        );
    }

    #[test]
    fn lz4_header_checksum_is_xxh32_of_descriptor() {
        // HC = (xxh32(FLG BD, seed 0) >> 8) & 0xFF, as the frame format defines.
        let mut h = lz4_flex::frame::FrameEncoder::with_frame_info(
            lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max4MB)
                .block_mode(lz4_flex::frame::BlockMode::Independent),
            Vec::new(),
        );
        h.write_all(b"x").unwrap();
        let reference = h.finish().unwrap();
        assert_eq!(&reference[4..7], &LZ4_JAVA_DESCRIPTOR);
    }

    #[test]
    fn lz4_compressible_and_multi_block() {
        let data: Vec<u8> = (0..(LZ4_BLOCK_MAX_BYTES + 1000))
            .map(|i| (i % 7) as u8)
            .collect();
        let c = compress(&data, CompressionType::Lz4, 0).unwrap();
        assert!(c.len() < data.len() / 10);
        // First block is compressed (high bit clear).
        assert_eq!(c[10] & 0x80, 0);
        assert_eq!(decompress(&c, CompressionType::Lz4, MAX).unwrap(), data);
    }

    #[test]
    fn zstd_hand_made_raw_frame() {
        // Magic, FHD 0x20 (single segment, 1-byte content size), FCS 5, last raw block of 5.
        let frame = [
            0x28, 0xB5, 0x2F, 0xFD, 0x20, 0x05, 0x29, 0x00, 0x00, b'H', b'e', b'l', b'l', b'o',
        ];
        assert_eq!(
            decompress(&frame, CompressionType::Zstd, MAX).unwrap(),
            b"Hello"
        );
        assert_eq!(&*decompress_body(0x201, &frame, MAX).unwrap(), b"Hello");
    }

    #[test]
    fn decompression_bombs_are_bounded() {
        let zeros = vec![0u8; 1 << 20];
        for t in [
            CompressionType::Zlib,
            CompressionType::Lz4,
            CompressionType::Zstd,
        ] {
            let c = compress(&zeros, t, 5).unwrap();
            assert!(c.len() < 16 * 1024, "{t:?} should compress zeros well");
            assert!(matches!(
                decompress(&c, t, 1000),
                Err(CompressError::TooLarge {
                    max_bytes: 1000,
                    ..
                })
            ));
            assert_eq!(decompress(&c, t, 1 << 20).unwrap().len(), 1 << 20);
        }
    }

    #[test]
    fn corrupt_and_unknown() {
        assert!(matches!(
            decompress_body(0x401, b"x", MAX),
            Err(CompressError::UnknownCompressionType { sys_flag: 0x401 })
        ));
        for t in [
            CompressionType::Zlib,
            CompressionType::Lz4,
            CompressionType::Zstd,
        ] {
            assert!(
                matches!(
                    decompress(b"not compressed", t, MAX),
                    Err(CompressError::Corrupt { .. })
                ),
                "{t:?}"
            );
            // Truncated streams are errors too, not silently short bodies.
            let c = compress(&[7u8; 10_000], t, 5).unwrap();
            assert!(
                decompress(&c[..c.len() - 3], t, MAX).is_err(),
                "{t:?} truncated"
            );
        }
    }

    #[test]
    fn compress_for_send_threshold() {
        assert!(compress_for_send(&[1; 100], 0, CompressionType::Zlib, 5, 4096).is_none());
        let (c, flag) = compress_for_send(&[1; 5000], 0x4, CompressionType::Zstd, 5, 4096).unwrap();
        assert_eq!(flag, 0x4 | 0x1 | 0x200);
        assert_eq!(&*decompress_body(flag, &c, MAX).unwrap(), &[1u8; 5000][..]);
    }

    proptest! {
        #[test]
        fn round_trip(data in proptest::collection::vec(any::<u8>(), 0..4096), level in 0i32..10) {
            for t in [CompressionType::Zlib, CompressionType::Lz4, CompressionType::Zstd] {
                let c = compress(&data, t, level).unwrap();
                prop_assert_eq!(decompress(&c, t, data.len()).unwrap(), data.clone());
            }
        }

        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            for t in [CompressionType::Zlib, CompressionType::Lz4, CompressionType::Zstd] {
                let _ = decompress(&data, t, 1 << 16);
            }
            // Garbage behind valid magics reaches the frame parsers.
            let mut lz4 = vec![0x04, 0x22, 0x4D, 0x18];
            lz4.extend_from_slice(&data);
            let _ = decompress(&lz4, CompressionType::Lz4, 1 << 16);
            // A structurally valid frame around a random "compressed" block reaches the
            // LZ4 block decoder itself.
            let mut frame = vec![0x04, 0x22, 0x4D, 0x18, 0x60, 0x70, 0x73];
            frame.extend_from_slice(&(data.len() as u32).to_le_bytes());
            frame.extend_from_slice(&data);
            frame.extend_from_slice(&[0, 0, 0, 0]);
            let _ = decompress(&frame, CompressionType::Lz4, 1 << 16);
            let mut zst = vec![0x28, 0xB5, 0x2F, 0xFD];
            zst.extend_from_slice(&data);
            let _ = decompress(&zst, CompressionType::Zstd, 1 << 16);
        }
    }
}
