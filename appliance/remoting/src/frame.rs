//! Frame splitting: turns a byte stream into [`RemotingCommand`]s (`remoting.md` §2).
//!
//! A frame is `u32 frameLength | u32 (type << 24 | headerLength) | header | body`, all
//! big-endian, where `frameLength` counts everything after itself. The decoder never
//! allocates more than the frame bound: the length word is checked before any copy.

use bytes::{Buf, BytesMut};

use crate::command::SerializeType;
use crate::command::{binary_header, json_header, HeaderDecodeError, RemotingCommand};

/// Java's `com.rocketmq.remoting.frameMaxLength` default: 16 MiB for the whole frame,
/// length word included.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// Bytes of the two length words in front of every header.
pub const FRAME_PREFIX_BYTES: usize = 8;

/// Why a byte stream cannot be decoded. Every variant is fatal for its connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// `frameLength + 4` exceeds the configured bound.
    TooLarge {
        frame_bytes: usize,
        max_frame_bytes: usize,
    },
    /// `frameLength` is smaller than the header-length word it must contain.
    TooShort { frame_length: u32 },
    /// `headerLength > frameLength - 4`.
    HeaderOverrun {
        header_length: u32,
        frame_length: u32,
    },
    /// The header bytes do not decode.
    Header(HeaderDecodeError),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLarge {
                frame_bytes,
                max_frame_bytes,
            } => {
                write!(
                    f,
                    "frame of {frame_bytes} bytes exceeds the {max_frame_bytes}-byte bound"
                )
            }
            Self::TooShort { frame_length } => {
                write!(
                    f,
                    "frame length {frame_length} cannot hold a header-length word"
                )
            }
            Self::HeaderOverrun {
                header_length,
                frame_length,
            } => write!(
                f,
                "header length {header_length} exceeds frame length {frame_length} minus 4"
            ),
            Self::Header(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for FrameError {}

impl From<HeaderDecodeError> for FrameError {
    fn from(e: HeaderDecodeError) -> Self {
        FrameError::Header(e)
    }
}

/// Splits frames off the front of a receive buffer. Keeps no state but its bound, so one
/// decoder serves every connection of a core.
#[derive(Debug, Clone, Copy)]
pub struct FrameDecoder {
    max_frame_bytes: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_BYTES)
    }
}

impl FrameDecoder {
    pub fn new(max_frame_bytes: usize) -> Self {
        assert!(
            max_frame_bytes >= FRAME_PREFIX_BYTES,
            "frame bound below the prefix size"
        );
        Self { max_frame_bytes }
    }

    pub fn max_frame_bytes(&self) -> usize {
        self.max_frame_bytes
    }

    /// How many bytes the frame at the front of `buf` occupies, once its length word is
    /// readable; `Ok(None)` when fewer than 4 bytes are buffered. Lets a reader reserve
    /// exactly one frame of space before the bytes arrive.
    pub fn peek_frame_bytes(&self, buf: &[u8]) -> Result<Option<usize>, FrameError> {
        if buf.len() < 4 {
            return Ok(None);
        }
        let frame_length = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let frame_bytes = frame_length as usize + 4;
        if frame_bytes > self.max_frame_bytes {
            return Err(FrameError::TooLarge {
                frame_bytes,
                max_frame_bytes: self.max_frame_bytes,
            });
        }
        if frame_length < 4 {
            return Err(FrameError::TooShort { frame_length });
        }
        Ok(Some(frame_bytes))
    }

    /// Takes one whole frame off the front of `buf`, or returns `Ok(None)` when the frame is
    /// still incomplete (nothing is consumed then). The body shares `buf`'s allocation.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<RemotingCommand>, FrameError> {
        let Some(frame_bytes) = self.peek_frame_bytes(buf)? else {
            return Ok(None);
        };
        if buf.len() < frame_bytes {
            return Ok(None);
        }
        let frame_length = (frame_bytes - 4) as u32;
        let word = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
        let header_length = word & 0x00FF_FFFF;
        if header_length > frame_length - 4 {
            return Err(FrameError::HeaderOverrun {
                header_length,
                frame_length,
            });
        }
        let type_byte = (word >> 24) as u8;
        let serialize_type = match type_byte {
            0 => SerializeType::Json,
            1 => SerializeType::RocketMq,
            other => return Err(HeaderDecodeError::UnknownSerializeType(other).into()),
        };
        let mut frame = buf.split_to(frame_bytes);
        frame.advance(FRAME_PREFIX_BYTES);
        let header = frame.split_to(header_length as usize);
        let mut command = match serialize_type {
            SerializeType::Json => json_header::read(&header)?,
            SerializeType::RocketMq => binary_header::read(&header)?,
        };
        command.serialize_type = serialize_type;
        command.body = frame.freeze();
        Ok(Some(command))
    }
}
