//! The classic HA wire format (DefaultHAService), without I/O: the slave's 8-byte
//! max-offset report and the master's 12-byte frame header (physical offset, body size)
//! followed by raw CommitLog bytes. Numbers are big-endian, as Java's `ByteBuffer` writes
//! them. The decoders take bytes as they arrive and never panic on garbage or truncation.

/// Bytes of one slave report: the slave's CommitLog max offset (i64).
pub const REPORT_SIZE_BYTES: usize = 8;
/// Bytes of the master's frame header: physical offset (i64) + body size (i32).
pub const FRAME_HEADER_SIZE_BYTES: usize = 12;

/// Most body bytes reserved up front when a frame header arrives.
const BODY_RESERVE_BYTES: usize = 64 * 1024;

/// Encodes a slave report.
pub fn encode_report(max_offset: i64) -> [u8; REPORT_SIZE_BYTES] {
    max_offset.to_be_bytes()
}

/// Encodes a master frame header (`body_size_bytes` 0 is a heartbeat).
pub fn encode_frame_header(phy_offset: i64, body_size_bytes: i32) -> [u8; FRAME_HEADER_SIZE_BYTES] {
    let mut h = [0u8; FRAME_HEADER_SIZE_BYTES];
    h[..8].copy_from_slice(&phy_offset.to_be_bytes());
    h[8..].copy_from_slice(&body_size_bytes.to_be_bytes());
    h
}

/// Accumulates the master's side of the stream (slave reports). Only the last complete
/// report matters, as upstream: a slave that reported twice before the master read is at
/// its second offset.
#[derive(Debug, Default)]
pub struct ReportDecoder {
    partial: [u8; REPORT_SIZE_BYTES],
    partial_len: usize,
}

impl ReportDecoder {
    /// Feeds received bytes; returns the newest complete report among them, if any.
    pub fn feed(&mut self, mut data: &[u8]) -> Option<i64> {
        let mut latest = None;
        while !data.is_empty() {
            let take = (REPORT_SIZE_BYTES - self.partial_len).min(data.len());
            self.partial[self.partial_len..self.partial_len + take].copy_from_slice(&data[..take]);
            self.partial_len += take;
            data = &data[take..];
            if self.partial_len == REPORT_SIZE_BYTES {
                latest = Some(i64::from_be_bytes(self.partial));
                self.partial_len = 0;
            }
        }
        latest
    }
}

/// One complete master frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub phy_offset: i64,
    /// Raw CommitLog bytes starting at `phy_offset` (empty: heartbeat).
    pub body: Vec<u8>,
}

/// Why the master's stream cannot be decoded any further.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// A negative offset or body size, or a body larger than the decoder accepts.
    BadHeader {
        phy_offset: i64,
        body_size_bytes: i32,
    },
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::BadHeader {
                phy_offset,
                body_size_bytes,
            } => write!(
                f,
                "bad HA frame header: offset {phy_offset}, body size {body_size_bytes}"
            ),
        }
    }
}

/// Accumulates the slave's side of the stream (master frames), holding at most one
/// header and one body of at most `max_body_bytes`.
#[derive(Debug)]
pub struct FrameDecoder {
    max_body_bytes: usize,
    header: [u8; FRAME_HEADER_SIZE_BYTES],
    header_len: usize,
    /// Offset and body of the frame being received, once its header is complete.
    current: Option<(i64, usize, Vec<u8>)>,
}

impl FrameDecoder {
    pub fn new(max_body_bytes: usize) -> Self {
        FrameDecoder {
            max_body_bytes,
            header: [0; FRAME_HEADER_SIZE_BYTES],
            header_len: 0,
            current: None,
        }
    }

    /// Feeds received bytes; complete frames are appended to `out`. After an error the
    /// stream is unusable (the connection is closed).
    pub fn feed(&mut self, mut data: &[u8], out: &mut Vec<Frame>) -> Result<(), FrameError> {
        while !data.is_empty() {
            match &mut self.current {
                None => {
                    let take = (FRAME_HEADER_SIZE_BYTES - self.header_len).min(data.len());
                    self.header[self.header_len..self.header_len + take]
                        .copy_from_slice(&data[..take]);
                    self.header_len += take;
                    data = &data[take..];
                    if self.header_len == FRAME_HEADER_SIZE_BYTES {
                        self.header_len = 0;
                        self.start_frame(out)?;
                    }
                }
                Some((_, size, body)) => {
                    let take = (*size - body.len()).min(data.len());
                    body.extend_from_slice(&data[..take]);
                    data = &data[take..];
                    if body.len() == *size {
                        self.finish_frame(out);
                    }
                }
            }
        }
        Ok(())
    }

    fn start_frame(&mut self, out: &mut Vec<Frame>) -> Result<(), FrameError> {
        let mut off = [0u8; 8];
        off.copy_from_slice(&self.header[..8]);
        let mut size = [0u8; 4];
        size.copy_from_slice(&self.header[8..]);
        let (phy_offset, body_size_bytes) = (i64::from_be_bytes(off), i32::from_be_bytes(size));
        if phy_offset < 0 || body_size_bytes < 0 || body_size_bytes as usize > self.max_body_bytes {
            return Err(FrameError::BadHeader {
                phy_offset,
                body_size_bytes,
            });
        }
        let size = body_size_bytes as usize;
        // Memory grows with the bytes that arrive, not with what a header claims.
        let reserve = size.min(BODY_RESERVE_BYTES);
        self.current = Some((phy_offset, size, Vec::with_capacity(reserve)));
        if size == 0 {
            self.finish_frame(out);
        }
        Ok(())
    }

    fn finish_frame(&mut self, out: &mut Vec<Frame>) {
        if let Some((phy_offset, _, body)) = self.current.take() {
            out.push(Frame { phy_offset, body });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn report_is_java_big_endian() {
        assert_eq!(
            encode_report(0x0102_0304_0506_0708),
            [1, 2, 3, 4, 5, 6, 7, 8]
        );
        assert_eq!(
            encode_frame_header(0x10, 0x20),
            [0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0x20]
        );
    }

    #[test]
    fn only_the_last_complete_report_counts() {
        let mut d = ReportDecoder::default();
        let mut bytes = encode_report(5).to_vec();
        bytes.extend_from_slice(&encode_report(9));
        bytes.extend_from_slice(&encode_report(11)[..3]);
        assert_eq!(d.feed(&bytes), Some(9));
        assert_eq!(d.feed(&encode_report(11)[3..]), Some(11));
        assert_eq!(d.feed(&[]), None);
    }

    #[test]
    fn a_negative_or_oversized_header_is_an_error() {
        let mut out = Vec::new();
        let mut d = FrameDecoder::new(1024);
        assert!(d.feed(&encode_frame_header(0, 1025), &mut out).is_err());
        let mut d = FrameDecoder::new(1024);
        assert!(d.feed(&encode_frame_header(-1, 0), &mut out).is_err());
        let mut d = FrameDecoder::new(1024);
        assert!(d.feed(&encode_frame_header(0, -5), &mut out).is_err());
        assert!(out.is_empty());
    }

    proptest! {
        #[test]
        fn frames_round_trip_in_any_split(
            frames in proptest::collection::vec(
                (0i64..i64::MAX, proptest::collection::vec(any::<u8>(), 0..300)), 0..8),
            split in 1usize..64,
        ) {
            let mut wire = Vec::new();
            for (off, body) in &frames {
                wire.extend_from_slice(&encode_frame_header(*off, body.len() as i32));
                wire.extend_from_slice(body);
            }
            let mut d = FrameDecoder::new(300);
            let mut out = Vec::new();
            for chunk in wire.chunks(split) {
                d.feed(chunk, &mut out).unwrap();
            }
            let want: Vec<Frame> = frames
                .into_iter()
                .map(|(phy_offset, body)| Frame { phy_offset, body })
                .collect();
            prop_assert_eq!(out, want);
        }

        #[test]
        fn reports_round_trip_in_any_split(
            offsets in proptest::collection::vec(any::<i64>(), 1..10),
            split in 1usize..20,
        ) {
            let wire: Vec<u8> = offsets.iter().flat_map(|o| encode_report(*o)).collect();
            let mut d = ReportDecoder::default();
            let mut last = None;
            for chunk in wire.chunks(split) {
                if let Some(r) = d.feed(chunk) {
                    last = Some(r);
                }
            }
            prop_assert_eq!(last, offsets.last().copied());
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let mut d = FrameDecoder::new(512);
            let mut out = Vec::new();
            let _ = d.feed(&bytes, &mut out);
            prop_assert!(out.iter().all(|f| f.body.len() <= 512 && f.phy_offset >= 0));
            let _ = ReportDecoder::default().feed(&bytes);
        }
    }
}
