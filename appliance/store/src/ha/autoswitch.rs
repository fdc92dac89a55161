//! The auto-switch HA wire format of controller mode (upstream `AutoSwitchHAClient` /
//! `AutoSwitchHAConnection`, spec features.md §g.3), without I/O. Big-endian, as Java's
//! `ByteBuffer` writes. Every message starts with the sender's connection state
//! (`HAConnectionState` ordinal: HANDSHAKE 1, TRANSFER 2):
//!
//! - slave → master handshake, 16 bytes: state | syncFromLastFile (i16) | asyncLearner
//!   (i16) | slave broker id (i64);
//! - slave → master report, 12 bytes: state | max offset (i64);
//! - master → slave handshake reply: state | body size (i32) | master max offset (i64) |
//!   last epoch (i32), then 12 bytes per epoch entry: epoch (i32) | start offset (i64);
//! - master → slave transfer, 36-byte header: state | body size | offset (i64) | epoch
//!   (i32) | epoch start offset (i64) | confirm offset (i64), then the CommitLog bytes.
//!
//! The decoders take bytes as they arrive, hold at most one message's worth, and answer
//! garbage (an unknown state, an oversize or misaligned body) with an error, never a panic.

use super::epoch::MAX_EPOCH_ENTRIES;

pub const STATE_HANDSHAKE: i32 = 1;
pub const STATE_TRANSFER: i32 = 2;
pub const HANDSHAKE_SIZE_BYTES: usize = 16;
pub const REPORT_SIZE_BYTES: usize = 12;
pub const HANDSHAKE_REPLY_HEADER_BYTES: usize = 20;
pub const TRANSFER_HEADER_BYTES: usize = 36;
pub const EPOCH_ENTRY_BYTES: usize = 12;

/// What a slave sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlaveMessage {
    Handshake {
        sync_from_last_file: bool,
        async_learner: bool,
        broker_id: i64,
    },
    Report {
        max_offset: i64,
    },
}

/// What a master sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterMessage {
    HandshakeReply {
        max_offset: i64,
        last_epoch: i32,
        /// (epoch, start offset), oldest first.
        entries: Vec<(i32, i64)>,
    },
    /// A body of 0 bytes is a heartbeat.
    Transfer {
        offset: i64,
        epoch: i32,
        epoch_start_offset: i64,
        confirm_offset: i64,
        body: Vec<u8>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    UnknownState(i32),
    BadBodySize { state: i32, size: i64 },
}

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProtocolError::UnknownState(s) => write!(f, "unknown HA connection state {s}"),
            ProtocolError::BadBodySize { state, size } => {
                write!(
                    f,
                    "HA message of state {state} announces a body of {size} bytes"
                )
            }
        }
    }
}

impl std::error::Error for ProtocolError {}

pub fn encode_handshake(
    sync_from_last_file: bool,
    async_learner: bool,
    broker_id: i64,
) -> [u8; HANDSHAKE_SIZE_BYTES] {
    let mut b = [0u8; HANDSHAKE_SIZE_BYTES];
    b[..4].copy_from_slice(&STATE_HANDSHAKE.to_be_bytes());
    b[4..6].copy_from_slice(&i16::from(sync_from_last_file).to_be_bytes());
    b[6..8].copy_from_slice(&i16::from(async_learner).to_be_bytes());
    b[8..].copy_from_slice(&broker_id.to_be_bytes());
    b
}

pub fn encode_report(max_offset: i64) -> [u8; REPORT_SIZE_BYTES] {
    let mut b = [0u8; REPORT_SIZE_BYTES];
    b[..4].copy_from_slice(&STATE_TRANSFER.to_be_bytes());
    b[4..].copy_from_slice(&max_offset.to_be_bytes());
    b
}

pub fn encode_handshake_reply(max_offset: i64, last_epoch: i32, entries: &[(i32, i64)]) -> Vec<u8> {
    let body_bytes = entries.len() * EPOCH_ENTRY_BYTES;
    let mut b = Vec::with_capacity(HANDSHAKE_REPLY_HEADER_BYTES + body_bytes);
    b.extend_from_slice(&STATE_HANDSHAKE.to_be_bytes());
    b.extend_from_slice(&(body_bytes as i32).to_be_bytes());
    b.extend_from_slice(&max_offset.to_be_bytes());
    b.extend_from_slice(&last_epoch.to_be_bytes());
    for (epoch, start) in entries {
        b.extend_from_slice(&epoch.to_be_bytes());
        b.extend_from_slice(&start.to_be_bytes());
    }
    b
}

pub fn encode_transfer_header(
    body_size_bytes: i32,
    offset: i64,
    epoch: i32,
    epoch_start_offset: i64,
    confirm_offset: i64,
) -> [u8; TRANSFER_HEADER_BYTES] {
    let mut b = [0u8; TRANSFER_HEADER_BYTES];
    b[..4].copy_from_slice(&STATE_TRANSFER.to_be_bytes());
    b[4..8].copy_from_slice(&body_size_bytes.to_be_bytes());
    b[8..16].copy_from_slice(&offset.to_be_bytes());
    b[16..20].copy_from_slice(&epoch.to_be_bytes());
    b[20..28].copy_from_slice(&epoch_start_offset.to_be_bytes());
    b[28..].copy_from_slice(&confirm_offset.to_be_bytes());
    b
}

fn be_i16(b: &[u8]) -> i16 {
    i16::from_be_bytes([b[0], b[1]])
}
fn be_i32(b: &[u8]) -> i32 {
    i32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
fn be_i64(b: &[u8]) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    i64::from_be_bytes(a)
}

/// The master's reader of a slave's stream.
#[derive(Debug, Default)]
pub struct SlaveStreamDecoder {
    buf: Vec<u8>,
}

impl SlaveStreamDecoder {
    pub fn feed(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next complete message, if one has arrived.
    pub fn next_message(&mut self) -> Result<Option<SlaveMessage>, ProtocolError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let state = be_i32(&self.buf);
        let need = match state {
            STATE_HANDSHAKE => HANDSHAKE_SIZE_BYTES,
            STATE_TRANSFER => REPORT_SIZE_BYTES,
            other => return Err(ProtocolError::UnknownState(other)),
        };
        if self.buf.len() < need {
            return Ok(None);
        }
        let m: Vec<u8> = self.buf.drain(..need).collect();
        Ok(Some(if state == STATE_HANDSHAKE {
            SlaveMessage::Handshake {
                sync_from_last_file: be_i16(&m[4..]) == 1,
                async_learner: be_i16(&m[6..]) == 1,
                broker_id: be_i64(&m[8..]),
            }
        } else {
            SlaveMessage::Report {
                max_offset: be_i64(&m[4..]),
            }
        }))
    }
}

/// The slave's reader of its master's stream; transfer bodies above
/// `max_body_bytes` are refused.
#[derive(Debug)]
pub struct MasterStreamDecoder {
    buf: Vec<u8>,
    max_body_bytes: usize,
}

impl MasterStreamDecoder {
    pub fn new(max_body_bytes: usize) -> Self {
        MasterStreamDecoder {
            buf: Vec::new(),
            max_body_bytes,
        }
    }

    pub fn feed(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    pub fn next_message(&mut self) -> Result<Option<MasterMessage>, ProtocolError> {
        if self.buf.len() < 8 {
            return Ok(None);
        }
        let state = be_i32(&self.buf);
        let size = be_i32(&self.buf[4..]);
        let (header, limit) = match state {
            STATE_HANDSHAKE => (
                HANDSHAKE_REPLY_HEADER_BYTES,
                MAX_EPOCH_ENTRIES * EPOCH_ENTRY_BYTES,
            ),
            STATE_TRANSFER => (TRANSFER_HEADER_BYTES, self.max_body_bytes),
            other => return Err(ProtocolError::UnknownState(other)),
        };
        let aligned = state != STATE_HANDSHAKE || (size as usize).is_multiple_of(EPOCH_ENTRY_BYTES);
        if size < 0 || size as usize > limit || !aligned {
            return Err(ProtocolError::BadBodySize {
                state,
                size: i64::from(size),
            });
        }
        let total = header + size as usize;
        if self.buf.len() < total {
            return Ok(None);
        }
        let m: Vec<u8> = self.buf.drain(..total).collect();
        let body = &m[header..];
        Ok(Some(if state == STATE_HANDSHAKE {
            MasterMessage::HandshakeReply {
                max_offset: be_i64(&m[8..]),
                last_epoch: be_i32(&m[16..]),
                entries: body
                    .chunks_exact(EPOCH_ENTRY_BYTES)
                    .map(|e| (be_i32(e), be_i64(&e[4..])))
                    .collect(),
            }
        } else {
            MasterMessage::Transfer {
                offset: be_i64(&m[8..]),
                epoch: be_i32(&m[16..]),
                epoch_start_offset: be_i64(&m[20..]),
                confirm_offset: be_i64(&m[28..]),
                body: body.to_vec(),
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slave_messages_have_upstreams_bytes_and_decode_split_anywhere() {
        let hs = encode_handshake(true, false, 3);
        assert_eq!(hs, [0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3]);
        let report = encode_report(0x0102);
        assert_eq!(report, [0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1, 2]);
        let stream: Vec<u8> = hs.iter().chain(report.iter()).copied().collect();
        for split in 0..=stream.len() {
            let mut d = SlaveStreamDecoder::default();
            let mut got = Vec::new();
            for part in [&stream[..split], &stream[split..]] {
                d.feed(part);
                while let Some(m) = d.next_message().unwrap() {
                    got.push(m);
                }
            }
            assert_eq!(
                got,
                [
                    SlaveMessage::Handshake {
                        sync_from_last_file: true,
                        async_learner: false,
                        broker_id: 3
                    },
                    SlaveMessage::Report { max_offset: 0x0102 },
                ]
            );
        }
        let mut bad = SlaveStreamDecoder::default();
        bad.feed(&[0, 0, 0, 9]);
        assert_eq!(bad.next_message(), Err(ProtocolError::UnknownState(9)));
    }

    #[test]
    fn master_messages_have_upstreams_bytes_and_bounded_bodies() {
        let reply = encode_handshake_reply(4096, 2, &[(1, 0), (2, 1024)]);
        assert_eq!(
            &reply[..HANDSHAKE_REPLY_HEADER_BYTES],
            &[0, 0, 0, 1, 0, 0, 0, 24, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 2]
        );
        let header = encode_transfer_header(3, 1024, 2, 1024, 1000);
        assert_eq!(header.len(), 36);
        let mut stream = reply.clone();
        stream.extend_from_slice(&header);
        stream.extend_from_slice(b"abc");
        let mut d = MasterStreamDecoder::new(1 << 20);
        for chunk in stream.chunks(5) {
            d.feed(chunk);
        }
        assert_eq!(
            d.next_message().unwrap(),
            Some(MasterMessage::HandshakeReply {
                max_offset: 4096,
                last_epoch: 2,
                entries: vec![(1, 0), (2, 1024)]
            })
        );
        assert_eq!(
            d.next_message().unwrap(),
            Some(MasterMessage::Transfer {
                offset: 1024,
                epoch: 2,
                epoch_start_offset: 1024,
                confirm_offset: 1000,
                body: b"abc".to_vec()
            })
        );
        assert_eq!(d.next_message().unwrap(), None);

        let mut oversize = MasterStreamDecoder::new(2);
        oversize.feed(&header);
        assert!(matches!(
            oversize.next_message(),
            Err(ProtocolError::BadBodySize { .. })
        ));
        let mut misaligned = MasterStreamDecoder::new(1 << 20);
        misaligned.feed(&[0, 0, 0, 1, 0, 0, 0, 5]);
        assert!(misaligned.next_message().is_err());
        let mut negative = MasterStreamDecoder::new(1 << 20);
        negative.feed(&[0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff]);
        assert!(negative.next_message().is_err());
    }
}
