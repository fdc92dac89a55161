//! The batch send body (`message-format.md` §4, Java `MessageDecoder.encodeMessages`):
//! a concatenation of items
//!
//! ```text
//! itemSize:i32 = 22 + B + P | magic:i32 = 0 | bodyCRC:i32 = 0 | flag:i32 | B:i32 | body
//! | P:i16 | properties
//! ```
//!
//! Owns decoding (a borrowing iterator, zero-copy) and encoding of that body. The same
//! format is the body of "inner batch" records clients unwrap. Like the Java broker, the
//! decoder walks items by their body and property lengths and does not trust `itemSize`
//! (it is reported, so callers can log a mismatch); every length is bounds-checked, so
//! truncated or hostile input gives a [`BatchError`], never a panic.

use std::fmt;

/// Bytes of an item before its body: itemSize, magic, bodyCRC, flag, bodyLen.
pub const ITEM_HEADER_LEN: usize = 20;
/// Fixed bytes of an item: header + the int16 properties length.
pub const ITEM_OVERHEAD_LEN: usize = 22;
/// Default bound of a whole batch body: the broker's `maxMessageSize` (4 MiB).
pub const DEFAULT_MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;

/// Why a batch body was refused. Offsets are byte positions in the batch body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// The body has no items at all.
    Empty,
    /// The whole body exceeds the configured maximum (`MESSAGE_ILLEGAL` upstream).
    TooLarge { len_bytes: usize, max_bytes: usize },
    /// The body ends inside an item's fixed fields.
    TruncatedHeader {
        item_index: usize,
        item_offset: usize,
        remaining_bytes: usize,
    },
    /// An item declares a negative body length.
    NegativeBodyLength { item_index: usize, body_len: i32 },
    /// An item declares a negative (int16) properties length.
    NegativePropertiesLength {
        item_index: usize,
        properties_len: i16,
    },
    /// An item's body or properties run past the end of the batch body.
    Truncated {
        item_index: usize,
        item_offset: usize,
        needed_bytes: usize,
        remaining_bytes: usize,
    },
    /// Encoding: the properties of one item do not fit the int16 length field.
    PropertiesTooLong { len_bytes: usize },
    /// Encoding: the body of one item does not fit the int32 length field.
    BodyTooLong { len_bytes: usize },
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => write!(f, "batch body contains no messages"),
            Self::TooLarge {
                len_bytes,
                max_bytes,
            } => write!(
                f,
                "batch body is {len_bytes} bytes, more than maxMessageSize {max_bytes}; \
                 split the batch"
            ),
            Self::TruncatedHeader {
                item_index,
                item_offset,
                remaining_bytes,
            } => write!(
                f,
                "batch message #{item_index} at byte {item_offset} is cut short: \
                 {remaining_bytes} bytes left, its fixed fields need {ITEM_OVERHEAD_LEN}"
            ),
            Self::NegativeBodyLength {
                item_index,
                body_len,
            } => write!(f, "batch message #{item_index} has body length {body_len}"),
            Self::NegativePropertiesLength {
                item_index,
                properties_len,
            } => write!(
                f,
                "batch message #{item_index} has properties length {properties_len} \
                 (over 32767 bytes of properties?)"
            ),
            Self::Truncated {
                item_index,
                item_offset,
                needed_bytes,
                remaining_bytes,
            } => write!(
                f,
                "batch message #{item_index} at byte {item_offset} needs {needed_bytes} \
                 bytes but only {remaining_bytes} remain"
            ),
            Self::PropertiesTooLong { len_bytes } => write!(
                f,
                "batch message properties are {len_bytes} bytes, more than 32767"
            ),
            Self::BodyTooLong { len_bytes } => {
                write!(
                    f,
                    "batch message body is {len_bytes} bytes, more than i32::MAX"
                )
            }
        }
    }
}

impl std::error::Error for BatchError {}

/// One message of a batch, borrowing from the batch body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchItem<'a> {
    /// Position of the item's first byte in the batch body.
    pub offset: usize,
    /// The declared itemSize (not trusted for walking; equals [`Self::encoded_len`] when
    /// the producer is well behaved).
    pub declared_size: i32,
    /// The declared magic (0 from every known client; unused).
    pub magic: i32,
    /// The declared body CRC (0 from every known client; the broker recomputes it).
    pub body_crc: i32,
    /// `Message.flag` of this member.
    pub flag: i32,
    /// The member's body (batches are never compressed).
    pub body: &'a [u8],
    /// The member's raw property string bytes (see `properties::iter_bytes`).
    pub properties: &'a [u8],
}

impl BatchItem<'_> {
    /// The item's real length in the body: 22 + body + properties.
    pub fn encoded_len(&self) -> usize {
        ITEM_OVERHEAD_LEN + self.body.len() + self.properties.len()
    }

    /// Whether the declared itemSize matches the item's real length.
    pub fn size_is_consistent(&self) -> bool {
        usize::try_from(self.declared_size).is_ok_and(|s| s == self.encoded_len())
    }
}

/// Zero-copy iterator over the items of a batch body. Yields `Err` once and then ends
/// when the body is malformed.
#[derive(Debug, Clone)]
pub struct BatchIter<'a> {
    buf: &'a [u8],
    pos: usize,
    index: usize,
    failed: bool,
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl<'a> BatchIter<'a> {
    fn decode_one(&mut self) -> Result<BatchItem<'a>, BatchError> {
        let buf = self.buf;
        let start = self.pos;
        let remaining = buf.len() - start;
        if remaining < ITEM_HEADER_LEN {
            return Err(BatchError::TruncatedHeader {
                item_index: self.index,
                item_offset: start,
                remaining_bytes: remaining,
            });
        }
        let body_len_raw = be_i32(buf, start + 16);
        let body_len =
            usize::try_from(body_len_raw).map_err(|_| BatchError::NegativeBodyLength {
                item_index: self.index,
                body_len: body_len_raw,
            })?;
        let body_start = start + ITEM_HEADER_LEN;
        // Body plus the 2-byte properties length must fit.
        let needed = ITEM_HEADER_LEN.saturating_add(body_len).saturating_add(2);
        if needed > remaining {
            return Err(BatchError::Truncated {
                item_index: self.index,
                item_offset: start,
                needed_bytes: needed,
                remaining_bytes: remaining,
            });
        }
        let props_len_at = body_start + body_len;
        let props_len_raw = i16::from_be_bytes([buf[props_len_at], buf[props_len_at + 1]]);
        let props_len =
            usize::try_from(props_len_raw).map_err(|_| BatchError::NegativePropertiesLength {
                item_index: self.index,
                properties_len: props_len_raw,
            })?;
        let needed = needed + props_len;
        if needed > remaining {
            return Err(BatchError::Truncated {
                item_index: self.index,
                item_offset: start,
                needed_bytes: needed,
                remaining_bytes: remaining,
            });
        }
        let props_start = props_len_at + 2;
        self.pos = props_start + props_len;
        self.index += 1;
        Ok(BatchItem {
            offset: start,
            declared_size: be_i32(buf, start),
            magic: be_i32(buf, start + 4),
            body_crc: be_i32(buf, start + 8),
            flag: be_i32(buf, start + 12),
            body: &buf[body_start..props_len_at],
            properties: &buf[props_start..self.pos],
        })
    }
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = Result<BatchItem<'a>, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let item = self.decode_one();
        self.failed = item.is_err();
        Some(item)
    }
}

/// Iterates the items of a batch body without any size policy (use [`decode_batch`] on
/// untrusted input).
pub fn iter_batch(body: &[u8]) -> BatchIter<'_> {
    BatchIter {
        buf: body,
        pos: 0,
        index: 0,
        failed: false,
    }
}

/// Decodes a whole batch body: at most `max_batch_bytes` long, at least one item, every
/// item complete.
pub fn decode_batch(body: &[u8], max_batch_bytes: usize) -> Result<Vec<BatchItem<'_>>, BatchError> {
    if body.len() > max_batch_bytes {
        return Err(BatchError::TooLarge {
            len_bytes: body.len(),
            max_bytes: max_batch_bytes,
        });
    }
    let items = iter_batch(body).collect::<Result<Vec<_>, _>>()?;
    if items.is_empty() {
        return Err(BatchError::Empty);
    }
    Ok(items)
}

/// Counts the items of a batch body, validating every length (Java
/// `countInnerMsgNum`, but safe).
pub fn count_batch_items(body: &[u8]) -> Result<usize, BatchError> {
    iter_batch(body).try_fold(0usize, |n, item| item.map(|_| n + 1))
}

/// Appends one item as the Java producer writes it (magic and bodyCRC 0).
pub fn encode_batch_item(
    out: &mut Vec<u8>,
    flag: i32,
    body: &[u8],
    properties: &[u8],
) -> Result<(), BatchError> {
    let props_len = i16::try_from(properties.len()).map_err(|_| BatchError::PropertiesTooLong {
        len_bytes: properties.len(),
    })?;
    let total = ITEM_OVERHEAD_LEN + body.len() + properties.len();
    let (total, body_len) = match (i32::try_from(total), i32::try_from(body.len())) {
        (Ok(t), Ok(b)) => (t, b),
        _ => {
            return Err(BatchError::BodyTooLong {
                len_bytes: body.len(),
            })
        }
    };
    out.reserve(total as usize);
    out.extend_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
    out.extend_from_slice(&flag.to_be_bytes());
    out.extend_from_slice(&body_len.to_be_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(&props_len.to_be_bytes());
    out.extend_from_slice(properties);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::properties::{self, MessageProperties};
    use proptest::prelude::*;

    /// Two items as Java's `encodeMessages` lays them out, written by hand.
    fn golden() -> Vec<u8> {
        let mut v = Vec::new();
        // Item 0: flag 0, body "Hi", properties "TAGS\x01A\x02" (7 bytes) → size 31.
        v.extend_from_slice(&[0, 0, 0, 31, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        v.extend_from_slice(b"Hi");
        v.extend_from_slice(&[0, 7]);
        v.extend_from_slice(b"TAGS\x01A\x02");
        // Item 1: flag 5, empty body, no properties → size 22.
        v.extend_from_slice(&[0, 0, 0, 22, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0]);
        v.extend_from_slice(&[0, 0]);
        v
    }

    #[test]
    fn decode_golden() {
        let body = golden();
        let items = decode_batch(&body, DEFAULT_MAX_BATCH_BYTES).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].body, b"Hi");
        assert_eq!(items[0].flag, 0);
        assert_eq!(
            properties::find_bytes(items[0].properties, b"TAGS"),
            Some(&b"A"[..])
        );
        assert!(items[0].size_is_consistent());
        assert_eq!(items[1].offset, 31);
        assert_eq!(items[1].flag, 5);
        assert!(items[1].body.is_empty() && items[1].properties.is_empty());
        assert_eq!(count_batch_items(&body), Ok(2));
    }

    #[test]
    fn encode_matches_golden() {
        let mut v = Vec::new();
        encode_batch_item(&mut v, 0, b"Hi", b"TAGS\x01A\x02").unwrap();
        encode_batch_item(&mut v, 5, b"", b"").unwrap();
        assert_eq!(v, golden());
    }

    #[test]
    fn declared_size_is_not_trusted() {
        let mut body = golden();
        body[3] = 99; // wrong itemSize on item 0
        let items = decode_batch(&body, DEFAULT_MAX_BATCH_BYTES).unwrap();
        assert_eq!(items.len(), 2);
        assert!(!items[0].size_is_consistent());
    }

    #[test]
    fn errors() {
        assert_eq!(decode_batch(&[], 100), Err(BatchError::Empty));
        let body = golden();
        assert!(matches!(
            decode_batch(&body, 10),
            Err(BatchError::TooLarge {
                len_bytes: 53,
                max_bytes: 10
            })
        ));
        // Cut inside item 1's header.
        assert_eq!(
            decode_batch(&body[..40], 1000),
            Err(BatchError::TruncatedHeader {
                item_index: 1,
                item_offset: 31,
                remaining_bytes: 9
            })
        );
        // Cut inside item 0's properties.
        assert!(matches!(
            decode_batch(&body[..30], 1000),
            Err(BatchError::Truncated {
                item_index: 0,
                needed_bytes: 31,
                remaining_bytes: 30,
                ..
            })
        ));
        let mut neg = body.clone();
        neg[16] = 0x80;
        assert!(matches!(
            decode_batch(&neg, 1000),
            Err(BatchError::NegativeBodyLength { item_index: 0, .. })
        ));
        let mut neg = body.clone();
        neg[22] = 0x80;
        assert!(matches!(
            decode_batch(&neg, 1000),
            Err(BatchError::NegativePropertiesLength { item_index: 0, .. })
        ));
        // A huge body length must not overflow the bounds arithmetic.
        let mut huge = body;
        huge[16..20].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(matches!(
            decode_batch(&huge, 1000),
            Err(BatchError::Truncated { .. })
        ));
        let mut out = Vec::new();
        assert_eq!(
            encode_batch_item(&mut out, 0, b"", &[b'a'; 40_000]),
            Err(BatchError::PropertiesTooLong { len_bytes: 40_000 })
        );
        assert!(out.is_empty());
    }

    #[test]
    fn iterator_stops_after_error() {
        let mut body = golden();
        body.extend_from_slice(&[1, 2, 3]);
        let results: Vec<_> = iter_batch(&body).collect();
        assert_eq!(results.len(), 3);
        assert!(results[2].is_err());
    }

    proptest! {
        #[test]
        fn round_trip(items in proptest::collection::vec(
            (any::<i32>(), proptest::collection::vec(any::<u8>(), 0..64),
             proptest::collection::vec(("[a-zA-Z]{1,8}", "[a-z0-9]{1,8}"), 0..4)), 1..8)) {
            let mut body = Vec::new();
            for (flag, b, props) in &items {
                let p: MessageProperties = props.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let mut pb = Vec::new();
                p.encode_into(&mut pb);
                encode_batch_item(&mut body, *flag, b, &pb).unwrap();
            }
            let decoded = decode_batch(&body, DEFAULT_MAX_BATCH_BYTES).unwrap();
            prop_assert_eq!(decoded.len(), items.len());
            for (d, (flag, b, _)) in decoded.iter().zip(&items) {
                prop_assert_eq!(d.flag, *flag);
                prop_assert_eq!(d.body, &b[..]);
                prop_assert!(d.size_is_consistent());
            }
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_batch(&bytes, DEFAULT_MAX_BATCH_BYTES);
            let _ = count_batch_items(&bytes);
        }
    }
}
