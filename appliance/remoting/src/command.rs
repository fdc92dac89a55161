//! The logical Remoting command: header fields, custom-header map and body, and its two
//! header serializations (JSON, type 0; ROCKETMQ binary, type 1). See `remoting.md` §3-§7.

use bytes::{BufMut, Bytes, BytesMut};

use crate::codes::LanguageCode;

/// Bit 0 of `flag`: the command is a response.
pub const FLAG_RESPONSE: i32 = 0x1;
/// Bit 1 of `flag`: a oneway request; the receiver must not answer.
pub const FLAG_ONEWAY: i32 = 0x2;

/// How a command's header was (or will be) serialized; the top byte of the header-length
/// word on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SerializeType {
    #[default]
    Json = 0,
    RocketMq = 1,
}

/// The custom header map (`extFields`): insertion-ordered name → text pairs.
///
/// Every key and value lives in one text buffer addressed by spans, so decoding a
/// SEND_MESSAGE_V2 header (11-14 fields) costs two allocations instead of one `String` per
/// key and per value (that was most of a send's header cost on both the broker and the
/// client). Requests carry at most ~20 keys and are read a few times each, so a small map
/// is a vector scanned behind a Bloom filter; past [`EXT_FIELDS_INDEX_MIN_ENTRIES`]
/// entries a keyed hash index takes over, so a hostile frame with a million keys decodes
/// in time linear in its size (the frame bound, 16 MiB, then bounds the work) instead of
/// quadratic. Later duplicates overwrite earlier ones, as Java's map would.
#[derive(Clone, Default)]
pub struct ExtFields {
    /// Keys and values back to back; spans point into it.
    text: String,
    /// Entries in insertion order; removed ones stay as tombstones until the next
    /// compaction, so removing never shifts the vector or invalidates the index.
    spans: Vec<Span>,
    /// Live (not removed) entries.
    live: usize,
    /// Bytes of `text` no span refers to any more (replaced or removed entries); the
    /// buffer is compacted once they outweigh the live bytes.
    dead: usize,
    /// One bit per key hash (a 64-bit Bloom filter): a key whose bit is clear is absent
    /// without scanning, which is every insert while a small header is being decoded.
    bloom: u64,
    /// Key → span lookup, present once the map has grown past the scan's sweet spot.
    index: Option<Box<KeyIndex>>,
    /// Where the live one-letter keys `a`..`z` sit, four bits per letter: 0 absent, 1..=14
    /// the span position + 1, [`LETTER_FAR`] further along (found by the general lookup).
    /// SEND_MESSAGE_V2 and its batch and reply forms use exactly these keys (Java writes
    /// `a`..`n` in order, so all fit) and a send reads them about thirty times.
    letters: [u64; 2],
}

/// `letters` value of a one-letter key past the 14th entry.
const LETTER_FAR: u64 = 15;

/// `letters` slot of a one-letter key `a`..`z`.
fn letter_slot(key: &str) -> Option<usize> {
    match key.as_bytes() {
        [b @ b'a'..=b'z'] => Some(usize::from(b - b'a')),
        _ => None,
    }
}

/// Where one entry's key and value sit in `ExtFields::text`.
#[derive(Debug, Clone, Copy)]
struct Span {
    key: usize,
    /// [`REMOVED_KEY_LEN`] marks a removed entry: no key has that length, so lookups
    /// skip it without a separate check.
    key_len: usize,
    /// The key's first 8 bytes (zero-padded): lookups compare this word before the text,
    /// so the one-letter keys of SEND_MESSAGE_V2 never reach a `memcmp`.
    key_head: u64,
    value: usize,
    value_len: usize,
}

const REMOVED_KEY_LEN: usize = usize::MAX;

impl Span {
    fn is_removed(&self) -> bool {
        self.key_len == REMOVED_KEY_LEN
    }
}

fn key_head(key: &str) -> u64 {
    // A byte loop, not `copy_from_slice`: a variable-length copy becomes a `memcpy` call,
    // which costs more than the whole lookup for one-letter keys.
    let mut head = 0u64;
    for (i, &b) in key.as_bytes().iter().take(8).enumerate() {
        head |= u64::from(b) << (8 * i);
    }
    head
}

/// The Bloom bit of a key with first-8-bytes `head` and length `len`.
fn bloom_bit(head: u64, len: usize) -> u64 {
    1 << ((head ^ len as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58)
}

/// Dead bytes tolerated before a compaction is considered (keeps the rare replace cheap).
const EXT_FIELDS_COMPACT_MIN_DEAD: usize = 256;

/// Removed entries tolerated before a compaction is considered.
const EXT_FIELDS_COMPACT_MIN_REMOVED: usize = 32;

/// Entries up to which lookups scan the vector (no index allocation): every request a
/// real client sends stays below it.
pub const EXT_FIELDS_INDEX_MIN_ENTRIES: usize = 32;

/// Open-addressing hash table from key to span position (linear probing).
///
/// The hash is std's per-map randomly keyed SipHash: a client cannot choose keys that
/// collide, so probe sequences stay short whatever arrives on the wire.
#[derive(Clone)]
struct KeyIndex {
    hasher: std::collections::hash_map::RandomState,
    /// Span position + 1 per slot, 0 = empty. A power of two long and at most half full
    /// (counting every span ever inserted since the last rebuild), so probes terminate.
    slots: Vec<u32>,
}

impl KeyIndex {
    /// An index over the live entries of `spans`, with room to grow to twice their count.
    fn build(text: &str, spans: &[Span]) -> Self {
        let capacity = (spans.len().max(EXT_FIELDS_INDEX_MIN_ENTRIES) * 3).next_power_of_two();
        let mut index = Self {
            hasher: std::collections::hash_map::RandomState::new(),
            slots: vec![0; capacity],
        };
        for (at, span) in spans.iter().enumerate() {
            if !span.is_removed() {
                index.insert(&text[span.key..span.key + span.key_len], at);
            }
        }
        index
    }

    fn first_slot(&self, key: &str) -> usize {
        use std::hash::BuildHasher;
        (self.hasher.hash_one(key.as_bytes()) as usize) & (self.slots.len() - 1)
    }

    /// Whether one more span keeps the table at most half full.
    fn has_room_for(&self, spans: usize) -> bool {
        spans * 2 <= self.slots.len()
    }

    fn insert(&mut self, key: &str, at: usize) {
        let mask = self.slots.len() - 1;
        let mut slot = self.first_slot(key);
        while self.slots[slot] != 0 {
            slot = (slot + 1) & mask;
        }
        // Positions fit: a map past u32::MAX entries would need a 4 GiB frame at least.
        self.slots[slot] = u32::try_from(at + 1).expect("extFields entry count fits in u32");
    }

    fn find(&self, fields: &ExtFields, key: &str, head: u64) -> Option<usize> {
        let mask = self.slots.len() - 1;
        let mut slot = self.first_slot(key);
        loop {
            let at = (self.slots[slot] as usize).checked_sub(1)?;
            if fields.matches(&fields.spans[at], key, head) {
                return Some(at);
            }
            slot = (slot + 1) & mask;
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Key comparisons made by this thread's maps: lets tests bound the cost of decoding
    /// deterministically instead of by wall time.
    static KEY_COMPARISONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Key comparisons made on this thread so far (tests only).
#[cfg(test)]
pub(crate) fn key_comparisons() -> u64 {
    KEY_COMPARISONS.with(|c| c.get())
}

impl ExtFields {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_capacity(capacity: usize) -> Self {
        Self::with_capacities(capacity, capacity * 24)
    }

    /// Room for `entries` entries whose keys and values total about `text_bytes` bytes
    /// (decoders know the header length, so one allocation holds every string).
    pub fn with_capacities(entries: usize, text_bytes: usize) -> Self {
        Self {
            text: String::with_capacity(text_bytes),
            spans: Vec::with_capacity(entries),
            ..Self::default()
        }
    }

    fn key_of(&self, span: &Span) -> &str {
        &self.text[span.key..span.key + span.key_len]
    }

    fn value_of(&self, span: &Span) -> &str {
        &self.text[span.value..span.value + span.value_len]
    }

    fn matches(&self, span: &Span, key: &str, head: u64) -> bool {
        #[cfg(test)]
        KEY_COMPARISONS.with(|c| c.set(c.get() + 1));
        span.key_len == key.len()
            && span.key_head == head
            && (key.len() <= 8 || self.key_of(span) == key)
    }

    fn position(&self, key: &str) -> Option<usize> {
        if let Some(slot) = letter_slot(key) {
            match self.letter(slot) {
                0 => return None,
                LETTER_FAR => {}
                pos => return Some(pos as usize - 1),
            }
        }
        let head = key_head(key);
        if self.bloom & bloom_bit(head, key.len()) == 0 {
            return None;
        }
        match &self.index {
            Some(index) => index.find(self, key, head),
            None => self.spans.iter().position(|s| self.matches(s, key, head)),
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.position(key).map(|at| self.value_of(&self.spans[at]))
    }

    /// Sets `key` to `value`, replacing an existing value.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let key = key.into();
        let value = value.into();
        self.insert_str(&key, &value);
    }

    /// [`ExtFields::insert`] from borrowed text: copies into the shared buffer without an
    /// intermediate `String` (what decoders and hot response paths use).
    pub fn insert_str(&mut self, key: &str, value: &str) {
        let Ok(()) = self.insert_with::<std::convert::Infallible>(key, |text| {
            text.push_str(value);
            Ok(())
        });
    }

    /// Sets `key` to a value `write` appends to the map's text, so a decoder unescapes
    /// straight into the map with no intermediate string. `write` may only append; when it
    /// fails, what it appended is dropped and the map is unchanged.
    pub(crate) fn insert_with<E>(
        &mut self,
        key: &str,
        write: impl FnOnce(&mut String) -> Result<(), E>,
    ) -> Result<(), E> {
        let value_at = self.text.len();
        if let Err(e) = write(&mut self.text) {
            self.text.truncate(value_at);
            return Err(e);
        }
        debug_assert!(self.text.len() >= value_at, "insert_with may only append");
        let value_len = self.text.len() - value_at;
        match self.position(key) {
            Some(index) => {
                let span = &mut self.spans[index];
                self.dead += span.value_len;
                span.value = value_at;
                span.value_len = value_len;
                self.maybe_compact();
            }
            None => {
                let key_at = self.text.len();
                match key.as_bytes() {
                    // A one-byte `str` is one ASCII char; pushing it avoids a `memcpy`
                    // call for the one-letter keys every send carries.
                    &[letter] => self.text.push(char::from(letter)),
                    _ => self.text.push_str(key),
                }
                self.push_span(key, key_at, value_at, value_len);
            }
        }
        Ok(())
    }

    /// Records an entry whose key and value are already in `text`; the key is absent.
    fn push_span(&mut self, key: &str, key_at: usize, value_at: usize, value_len: usize) {
        let head = key_head(key);
        self.bloom |= bloom_bit(head, key.len());
        self.spans.push(Span {
            key: key_at,
            key_len: key.len(),
            key_head: head,
            value: value_at,
            value_len,
        });
        self.live += 1;
        let at = self.spans.len() - 1;
        self.note_letter(letter_slot(key), at);
        match &mut self.index {
            Some(index) if index.has_room_for(self.spans.len()) => index.insert(key, at),
            Some(_) => self.rebuild_index(),
            None if self.spans.len() > EXT_FIELDS_INDEX_MIN_ENTRIES => self.rebuild_index(),
            None => {}
        }
    }

    /// The `letters` nibble of slot `slot`.
    fn letter(&self, slot: usize) -> u64 {
        (self.letters[slot / 16] >> (4 * (slot % 16))) & 0xF
    }

    fn set_letter(&mut self, slot: usize, value: u64) {
        debug_assert!(value <= LETTER_FAR);
        let shift = 4 * (slot % 16);
        let word = &mut self.letters[slot / 16];
        *word = (*word & !(0xF << shift)) | (value << shift);
    }

    /// Records the position of a live entry whose key has `letters` slot `slot`.
    fn note_letter(&mut self, slot: Option<usize>, at: usize) {
        if let Some(slot) = slot {
            self.set_letter(slot, (at as u64 + 1).min(LETTER_FAR));
        }
    }

    fn rebuild_index(&mut self) {
        self.index = (self.spans.len() > EXT_FIELDS_INDEX_MIN_ENTRIES)
            .then(|| Box::new(KeyIndex::build(&self.text, &self.spans)));
    }

    pub fn remove(&mut self, key: &str) -> Option<String> {
        let index = self.position(key)?;
        let span = self.spans[index];
        let value = self.value_of(&span).to_owned();
        // A tombstone, not `Vec::remove`: shifting the tail would make a run of removals
        // quadratic and invalidate every indexed position behind it.
        if let Some(slot) = letter_slot(key) {
            self.set_letter(slot, 0);
        }
        self.spans[index].key_len = REMOVED_KEY_LEN;
        self.live -= 1;
        self.dead += span.key_len + span.value_len;
        self.maybe_compact();
        Some(value)
    }

    /// Rewrites `text` and `spans` without dead bytes and tombstones once they dominate,
    /// so a map that is edited in a loop stays bounded by its live contents; each rewrite
    /// costs at most twice the garbage it drops, so edits stay amortized O(1).
    fn maybe_compact(&mut self) {
        let removed = self.spans.len() - self.live;
        let bytes_dominate =
            self.dead >= EXT_FIELDS_COMPACT_MIN_DEAD && self.dead * 2 >= self.text.len();
        let tombstones_dominate =
            removed >= EXT_FIELDS_COMPACT_MIN_REMOVED && removed * 2 >= self.spans.len();
        if !bytes_dominate && !tombstones_dominate {
            return;
        }
        let mut text = String::with_capacity(self.text.len() - self.dead);
        self.bloom = 0;
        self.spans.retain(|span| !span.is_removed());
        for span in &mut self.spans {
            self.bloom |= bloom_bit(span.key_head, span.key_len);
            let key_at = text.len();
            text.push_str(&self.text[span.key..span.key + span.key_len]);
            let value_at = text.len();
            text.push_str(&self.text[span.value..span.value + span.value_len]);
            span.key = key_at;
            span.value = value_at;
        }
        self.text = text;
        self.dead = 0;
        self.letters = [0; 2];
        for at in 0..self.spans.len() {
            let span = self.spans[at];
            self.note_letter(letter_slot(self.key_of(&span)), at);
        }
        self.rebuild_index();
    }

    pub fn len(&self) -> usize {
        self.live
    }

    /// Removes every entry, keeping the allocated capacity: a request's map can become its
    /// response's without allocating again.
    pub fn clear(&mut self) {
        self.text.clear();
        self.spans.clear();
        self.live = 0;
        self.dead = 0;
        self.bloom = 0;
        self.index = None;
        self.letters = [0; 2];
    }

    /// Room for `entries` more entries and `text_bytes` more bytes of keys and values.
    pub fn reserve(&mut self, entries: usize, text_bytes: usize) {
        self.spans.reserve(entries);
        self.text.reserve(text_bytes);
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_some()
    }

    /// Entries in insertion order (the order they arrived in, or were inserted).
    pub fn iter(&self) -> ExtFieldsIter<'_> {
        ExtFieldsIter {
            text: &self.text,
            spans: self.spans.iter(),
            remaining: self.live,
        }
    }
}

/// Iterator over [`ExtFields`] entries in insertion order.
#[derive(Clone)]
pub struct ExtFieldsIter<'a> {
    text: &'a str,
    spans: std::slice::Iter<'a, Span>,
    /// Live entries not yet yielded (the span slice also holds tombstones).
    remaining: usize,
}

impl<'a> ExtFieldsIter<'a> {
    fn entry(&mut self, s: &Span) -> (&'a str, &'a str) {
        self.remaining -= 1;
        (
            &self.text[s.key..s.key + s.key_len],
            &self.text[s.value..s.value + s.value_len],
        )
    }
}

impl<'a> Iterator for ExtFieldsIter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        let s = self.spans.find(|s| !s.is_removed())?;
        Some(self.entry(s))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl DoubleEndedIterator for ExtFieldsIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let s = self.spans.rfind(|s| !s.is_removed())?;
        Some(self.entry(s))
    }
}

impl ExactSizeIterator for ExtFieldsIter<'_> {}

impl<'a> IntoIterator for &'a ExtFields {
    type Item = (&'a str, &'a str);
    type IntoIter = ExtFieldsIter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Equal when both hold the same entries in the same order (how the former vector of
/// pairs compared); the buffer layout does not matter.
impl PartialEq for ExtFields {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for ExtFields {}

impl std::fmt::Debug for ExtFields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let entries: Vec<(&str, &str)> = self.iter().collect();
        f.debug_struct("ExtFields")
            .field("entries", &entries)
            .finish()
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for ExtFields {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut fields = ExtFields::new();
        for (k, v) in iter {
            fields.insert(k, v);
        }
        fields
    }
}

/// One Remoting command, request or response.
#[derive(Debug, Clone, PartialEq)]
pub struct RemotingCommand {
    /// Request code (requests) or response code (responses); see [`crate::codes`].
    pub code: i32,
    pub language: LanguageCode,
    pub version: i32,
    pub opaque: i32,
    pub flag: i32,
    pub remark: Option<String>,
    pub ext_fields: ExtFields,
    pub body: Bytes,
    /// The header serialization this command arrived in, or will be written in.
    pub serialize_type: SerializeType,
}

impl RemotingCommand {
    /// A new request with ringmq's language and version and an empty header.
    pub fn request(code: i32, opaque: i32) -> Self {
        Self {
            code,
            language: LanguageCode::Java,
            version: crate::RINGMQ_VERSION,
            opaque,
            flag: 0,
            remark: None,
            ext_fields: ExtFields::new(),
            body: Bytes::new(),
            serialize_type: SerializeType::Json,
        }
    }

    /// The response to `self` with `code` and `remark`: same opaque and serialize type,
    /// response bit set, language `JAVA` (every client accepts it; `remoting.md` §4).
    pub fn response_to(&self, code: i32, remark: Option<String>) -> Self {
        Self {
            code,
            language: LanguageCode::Java,
            version: crate::RINGMQ_VERSION,
            opaque: self.opaque,
            flag: FLAG_RESPONSE,
            remark,
            ext_fields: ExtFields::new(),
            body: Bytes::new(),
            serialize_type: self.serialize_type,
        }
    }

    pub fn is_response(&self) -> bool {
        self.flag & FLAG_RESPONSE != 0
    }

    pub fn is_oneway(&self) -> bool {
        self.flag & FLAG_ONEWAY != 0
    }

    pub fn mark_oneway(&mut self) {
        self.flag |= FLAG_ONEWAY;
    }

    pub fn with_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    pub fn with_ext(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.ext_fields.insert(key, value);
        self
    }

    /// Appends the whole frame (length word, header-length word, header, body) to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        self.encode_header_for_body(self.body.len(), out);
        out.extend_from_slice(&self.body);
    }

    /// Encodes the frame with only the header (and the length words counting `body_len`
    /// more bytes the caller writes itself, e.g. by splice/sendfile from the CommitLog).
    ///
    /// The caller keeps frames within the peer's bound (16 MiB by default); a header
    /// beyond the 24-bit header-length field cannot be framed and is a bug upstream of
    /// this codec (headers are a few hundred bytes).
    pub fn encode_header_for_body(&self, body_len: usize, out: &mut BytesMut) {
        let start = out.len();
        out.put_u32(0); // frame length, patched below
        out.put_u32(0); // header length and type, patched below
        let header_start = out.len();
        match self.serialize_type {
            SerializeType::Json => json_header::write(self, out),
            SerializeType::RocketMq => binary_header::write(self, out),
        }
        let header_len = out.len() - header_start;
        debug_assert!(
            header_len <= 0x00FF_FFFF,
            "header of {header_len} bytes overflows the 24-bit length"
        );
        let frame_len = 4 + header_len + body_len;
        let word = ((self.serialize_type as u32) << 24) | (header_len as u32 & 0x00FF_FFFF);
        out[start..start + 4].copy_from_slice(&(frame_len as u32).to_be_bytes());
        out[start + 4..start + 8].copy_from_slice(&word.to_be_bytes());
    }
}

/// Why a header could not be decoded. The connection that sent it is closed with this
/// reason logged (as Java's decoder does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderDecodeError {
    /// The serialize-type byte is neither 0 (JSON) nor 1 (ROCKETMQ).
    UnknownSerializeType(u8),
    /// The JSON header is not a JSON object, or a field has the wrong JSON type.
    Json(String),
    /// A length inside the binary header runs past the header.
    Binary(String),
}

impl std::fmt::Display for HeaderDecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UnknownSerializeType(t) => write!(f, "unknown header serialize type {t}"),
            Self::Json(why) => write!(f, "malformed JSON header: {why}"),
            Self::Binary(why) => write!(f, "malformed ROCKETMQ binary header: {why}"),
        }
    }
}

impl std::error::Error for HeaderDecodeError {}

pub mod binary_header;
pub mod json_header;

#[cfg(test)]
mod ext_fields_tests {
    use super::ExtFields;

    #[test]
    fn clear_forgets_every_entry_and_keeps_the_buffers() {
        let mut f = ExtFields::new();
        for i in 0..40 {
            // Past the index threshold, with one-letter keys among them.
            f.insert_str(&format!("key{i}"), "v");
        }
        f.insert_str("a", "1");
        let text_capacity = f.text.capacity();
        f.clear();
        assert!(f.is_empty());
        assert_eq!(f.iter().count(), 0);
        assert_eq!(f.get("a"), None);
        assert_eq!(f.get("key7"), None);
        assert_eq!(f.text.capacity(), text_capacity);
        f.insert_str("a", "2");
        f.insert_str("msgId", "X");
        assert_eq!(f.get("a"), Some("2"));
        assert_eq!(f.get("msgId"), Some("X"));
        assert_eq!(f, [("a", "2"), ("msgId", "X")].into_iter().collect());
    }

    #[test]
    fn insert_with_appends_in_place_and_a_failed_write_changes_nothing() {
        let mut f = ExtFields::new();
        f.insert_str("a", "1");
        let ok: Result<(), ()> = f.insert_with("b", |t| {
            t.push_str("two");
            Ok(())
        });
        assert!(ok.is_ok());
        let replaced: Result<(), ()> = f.insert_with("a", |t| {
            t.push_str("one");
            Ok(())
        });
        assert!(replaced.is_ok());
        let failed = f.insert_with("c", |t| {
            t.push_str("partial");
            Err("bad escape")
        });
        assert_eq!(failed, Err("bad escape"));
        assert!(f.insert_with("a", |_| Err(())).is_err());
        assert_eq!(f.get("a"), Some("one"));
        assert_eq!(f.get("b"), Some("two"));
        assert_eq!(f.get("c"), None);
        assert_eq!(f.len(), 2);
        let order: Vec<_> = f.iter().collect();
        assert_eq!(order, [("a", "one"), ("b", "two")]);
    }

    #[test]
    fn replace_remove_and_order_behave_like_a_map() {
        let mut f = ExtFields::new();
        f.insert("a", "1");
        f.insert_str("b", "2");
        f.insert("c", String::from("3"));
        f.insert("a", "one");
        assert_eq!(f.get("a"), Some("one"), "a later insert replaces the value");
        assert_eq!(f.len(), 3);
        assert_eq!(
            f.iter().collect::<Vec<_>>(),
            vec![("a", "one"), ("b", "2"), ("c", "3")],
            "a replaced key keeps its place"
        );
        assert_eq!(f.remove("b"), Some("2".to_string()));
        assert_eq!(f.remove("b"), None);
        assert!(!f.contains_key("b"));
        assert_eq!(f.iter().next_back(), Some(("c", "3")));
        assert_eq!(f.iter().len(), 2);
        let mut pairs = Vec::new();
        for (k, v) in &f {
            pairs.push(format!("{k}={v}"));
        }
        assert_eq!(pairs, vec!["a=one", "c=3"]);
    }

    #[test]
    fn equality_ignores_buffer_layout_and_debug_lists_entries() {
        let mut edited = ExtFields::new();
        edited.insert("k", "old value that gets replaced");
        edited.insert("k", "v");
        edited.insert("gone", "x");
        edited.remove("gone");
        let fresh: ExtFields = [("k", "v")].into_iter().collect();
        assert_eq!(edited, fresh);
        let mut other_order = ExtFields::new();
        other_order.insert("x", "1");
        other_order.insert("y", "2");
        let mut swapped = ExtFields::new();
        swapped.insert("y", "2");
        swapped.insert("x", "1");
        assert_ne!(other_order, swapped, "order is part of equality, as before");
        assert_eq!(
            format!("{fresh:?}"),
            r#"ExtFields { entries: [("k", "v")] }"#
        );
    }

    /// One-letter keys are found through their own table: it must follow replacements,
    /// removals and the compactions they trigger, and keys one letter long but not `a`..`z`
    /// go the general way.
    #[test]
    fn one_letter_keys_survive_edits_and_compaction_like_a_map() {
        let mut f = ExtFields::new();
        let mut model = std::collections::BTreeMap::new();
        let keys: Vec<String> = ('a'..='z')
            .chain(['A', 'Z', '0', '_'])
            .map(String::from)
            .chain(["ab", "a1", "longer-key"].map(String::from))
            .collect();
        // A fixed pseudo-random walk: insert, replace with long values (dead bytes force
        // compactions) and remove, checking every key against the model each round.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for round in 0..4000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let key = &keys[(state % keys.len() as u64) as usize];
            if state.is_multiple_of(3) {
                assert_eq!(
                    f.remove(key),
                    model.remove(key),
                    "round {round} remove {key}"
                );
            } else {
                let value = format!("{round}-{}", "v".repeat((state % 90) as usize));
                f.insert_str(key, &value);
                model.insert(key.clone(), value);
            }
            for k in &keys {
                assert_eq!(
                    f.get(k),
                    model.get(k).map(String::as_str),
                    "round {round} get {k}"
                );
            }
            assert_eq!(f.len(), model.len());
        }
        // Past the positions the letter table holds, letters are found the general way.
        let mut big = ExtFields::new();
        for i in 0..300 {
            big.insert_str(&format!("k{i}"), "x");
        }
        big.insert_str("q", "late");
        assert_eq!(big.get("q"), Some("late"));
        assert_eq!(big.get("r"), None);
        big.insert_str("q", "replaced");
        assert_eq!(big.get("q"), Some("replaced"));
        assert_eq!(big.remove("q"), Some("replaced".to_string()));
        assert_eq!(big.get("q"), None);
    }

    #[test]
    fn many_keys_and_long_keys_are_found() {
        let mut f = ExtFields::new();
        for i in 0..300 {
            f.insert_str(
                &format!("key-with-a-long-common-prefix-{i}"),
                &i.to_string(),
            );
            f.insert_str(&format!("{i}"), "short");
        }
        for i in 0..300 {
            let long = format!("key-with-a-long-common-prefix-{i}");
            assert_eq!(f.get(&long), Some(i.to_string().as_str()));
            assert_eq!(f.get(&format!("{i}")), Some("short"));
            assert_eq!(f.get(&format!("{long}x")), None);
        }
        assert_eq!(f.len(), 600);
        assert_eq!(f.get("absent"), None);
        assert_eq!(
            f.remove("key-with-a-long-common-prefix-7"),
            Some("7".into())
        );
        assert_eq!(f.get("key-with-a-long-common-prefix-7"), None);
        assert_eq!(f.get("key-with-a-long-common-prefix-8"), Some("8"));
    }

    /// A JSON header whose extFields hold `keys` distinct keys, then `nulls` of them
    /// removed again by `null` values in insertion order.
    fn json_header_with_keys(keys: usize, nulls: usize) -> Vec<u8> {
        let mut text = String::from(r#"{"code":310,"extFields":{"#);
        for i in 0..keys {
            text.push_str(&format!(r#""key-{i}":"v","#));
        }
        for i in 0..nulls {
            text.push_str(&format!(r#""key-{i}":null,"#));
        }
        text.push_str(r#""last":"v"},"flag":0,"language":"JAVA","opaque":1,"version":0}"#);
        text.into_bytes()
    }

    /// A ROCKETMQ binary header whose extFields block holds `keys` distinct keys.
    fn binary_header_with_keys(keys: usize) -> Vec<u8> {
        let mut block = Vec::new();
        for i in 0..keys {
            let key = format!("key-{i}");
            block.extend_from_slice(&(key.len() as i16).to_be_bytes());
            block.extend_from_slice(key.as_bytes());
            block.extend_from_slice(&1i32.to_be_bytes());
            block.push(b'v');
        }
        let mut header = Vec::new();
        header.extend_from_slice(&310i16.to_be_bytes());
        header.push(0); // language JAVA
        header.extend_from_slice(&0i16.to_be_bytes()); // version
        header.extend_from_slice(&1i32.to_be_bytes()); // opaque
        header.extend_from_slice(&0i32.to_be_bytes()); // flag
        header.extend_from_slice(&0i32.to_be_bytes()); // remark length
        header.extend_from_slice(&(block.len() as i32).to_be_bytes());
        header.extend_from_slice(&block);
        header
    }

    type HeaderMaker = fn(usize) -> Vec<u8>;
    type HeaderReader = fn(&[u8]) -> Result<super::RemotingCommand, super::HeaderDecodeError>;

    /// Key comparisons one decode of `header` costs on this thread.
    fn comparisons_to_decode(header: &[u8], read: HeaderReader) -> (u64, usize) {
        let before = super::key_comparisons();
        let command = read(header).expect("header decodes");
        (super::key_comparisons() - before, command.ext_fields.len())
    }

    #[test]
    fn decoding_costs_a_bounded_number_of_comparisons_per_key() {
        use super::{binary_header, json_header};
        const N: usize = 2_000;
        let cases: [(&str, HeaderMaker, HeaderReader); 3] = [
            ("json", |n| json_header_with_keys(n, 0), json_header::read),
            (
                "json with nulls",
                |n| json_header_with_keys(n, n),
                json_header::read,
            ),
            ("binary", binary_header_with_keys, binary_header::read),
        ];
        for (name, make, read) in cases {
            let (small, small_len) = comparisons_to_decode(&make(N), read);
            let (large, large_len) = comparisons_to_decode(&make(4 * N), read);
            assert!(
                small_len >= 1 && large_len >= small_len,
                "{name}: keys decoded"
            );
            // Linear decoding makes 4x the keys cost ~4x the comparisons; a quadratic
            // scan costs ~16x. Per key, an indexed lookup compares against one or two
            // entries.
            assert!(
                large <= 6 * small.max(1),
                "{name}: {N} keys cost {small} comparisons, {} keys {large}",
                4 * N
            );
            assert!(
                large <= 8 * 2 * (4 * N) as u64,
                "{name}: {large} comparisons for {} keys is more than a few per key",
                4 * N
            );
        }
    }

    #[test]
    fn tombstones_keep_order_length_and_lookups_through_compaction() {
        let mut f = ExtFields::new();
        for i in 0..1_000 {
            f.insert_str(&format!("k{i}"), &i.to_string());
        }
        for i in (0..1_000).step_by(3) {
            assert_eq!(f.remove(&format!("k{i}")), Some(i.to_string()));
        }
        let live: Vec<usize> = (0..1_000).filter(|i| i % 3 != 0).collect();
        assert_eq!(f.len(), live.len());
        assert_eq!(f.iter().len(), live.len());
        let keys: Vec<String> = f.iter().map(|(k, _)| k.to_owned()).collect();
        let want: Vec<String> = live.iter().map(|i| format!("k{i}")).collect();
        assert_eq!(keys, want, "insertion order survives removals");
        assert_eq!(f.iter().next_back(), Some(("k998", "998")));
        for i in 0..1_000 {
            let got = f.get(&format!("k{i}"));
            if i % 3 == 0 {
                assert_eq!(got, None);
            } else {
                assert_eq!(got, Some(i.to_string().as_str()));
            }
        }
        // Re-inserting a removed key appends it; emptying the map leaves it empty.
        f.insert_str("k0", "again");
        assert_eq!(f.iter().next_back(), Some(("k0", "again")));
        for i in 0..1_000 {
            f.remove(&format!("k{i}"));
        }
        assert!(f.is_empty());
        assert_eq!(f.iter().next(), None);
        assert!(f.spans.len() < 64, "tombstones are compacted away");
        f.insert_str("x", "1");
        assert_eq!(f.get("x"), Some("1"));
        assert_eq!(f, [("x", "1")].into_iter().collect());
    }

    #[test]
    fn repeated_replacement_stays_bounded() {
        let mut f = ExtFields::new();
        f.insert("keep", "me");
        for i in 0..10_000 {
            f.insert_str("counter", &format!("value-{i:08}"));
        }
        assert_eq!(f.get("counter"), Some("value-00009999"));
        assert_eq!(f.get("keep"), Some("me"));
        assert!(
            f.text.len() < 1024,
            "dead bytes must be compacted away, buffer is {} bytes",
            f.text.len()
        );
    }
}
