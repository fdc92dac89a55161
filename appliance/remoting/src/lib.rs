//! Sans-IO codec for Apache RocketMQ's Remoting protocol.
//!
//! Bytes in, typed values out: nothing here opens a socket, spawns a thread or reads a
//! clock, so every decoder is fuzzed and property-tested in isolation. The layers, from the
//! wire up:
//!
//! - [`frame`]: length-prefixed frames, split from a byte stream, bounded by a max size.
//! - [`command`]: the logical `RemotingCommand` header (code, language, version, opaque,
//!   flag, remark, extFields) plus body; JSON (type 0) and ROCKETMQ binary (type 1) forms.
//! - [`codes`]: every request and response code, and language codes.
//! - [`header`]: typed custom headers carried in `extFields` (`headers.md`).
//! - [`message`]: message formats: property string, batch body, stored CommitLog record,
//!   message ids, tagsCode, compression (`message-format.md`).
//! - [`body`]: fastjson-shaped JSON bodies (route data, heartbeat, register broker, ...).
//! - [`json`]: the lenient JSON reader and compact writer the bodies and headers share.
//! - [`number`]: allocation-free decimal text for numeric `extFields`.
//! - [`pop`]: POP consumption's receipt handles, offset infos and revive-topic bodies.

pub mod body;
pub mod codes;
pub mod command;
pub mod frame;
pub mod header;
pub mod json;
pub mod message;
pub mod number;
pub mod pop;

pub use codes::{LanguageCode, RequestCode, ResponseCode};
pub use command::{ExtFields, RemotingCommand, SerializeType};
pub use frame::{FrameDecoder, FrameError, DEFAULT_MAX_FRAME_BYTES};

/// The `version` ringmq puts in every command it sends: RocketMQ 5.3.4 (`MQVersion`
/// ordinal). Java clients read the heartbeat response's version as the broker's version.
pub const RINGMQ_VERSION: i32 = 481;
