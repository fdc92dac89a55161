//! Tags and TAG-type subscription expressions (`message-format.md` §7.2, §8).
//!
//! Owns `tagsCode` (Java `String.hashCode` of the `TAGS` value, 32-bit, sign-extended to
//! the consume queue's int64) and the `||`-separated subscription expression the
//! broker-side tag filter matches consume-queue entries against.

/// The subscription expression that matches every message.
pub const SUB_ALL: &str = "*";
/// Separator between tags in a subscription expression.
pub const TAG_SEPARATOR: &str = "||";
/// `expressionType` of tag subscriptions (the default when absent).
pub const EXPRESSION_TYPE_TAG: &str = "TAG";
/// `expressionType` of SQL-92 property filters.
pub const EXPRESSION_TYPE_SQL92: &str = "SQL92";

/// Java `String.hashCode()`: `h = 31*h + c` over UTF-16 code units, wrapping at 32 bits.
/// The one definition in ringmq: tagsCode, the index's key hash, the timer log's topic
/// hash and the gRPC queue selector all hash with it.
///
/// Hashing code units (not chars, not UTF-8 bytes) matters for non-BMP text: a
/// supplementary char contributes its two surrogates, exactly like the JVM.
///
/// This runs for every stored record (its tags and each index key), so ASCII text, where
/// a byte is a code unit, is hashed four bytes per step: unrolling `h = 31*h + c` four
/// times gives `h*31^4 + c0*31^3 + c1*31^2 + c2*31 + c3`, whose products are independent,
/// so the serial chain is one multiply-add per four bytes instead of per byte. Wrapping
/// arithmetic is a ring, so the result is exactly the byte-at-a-time one.
pub fn java_string_hash(s: &str) -> i32 {
    let bytes = s.as_bytes();
    let mut words = bytes.chunks_exact(4);
    let mut h: i32 = 0;
    let mut seen: u8 = 0;
    for w in &mut words {
        seen |= w[0] | w[1] | w[2] | w[3];
        h = h
            .wrapping_mul(31 * 31 * 31 * 31)
            .wrapping_add(i32::from(w[0]) * (31 * 31 * 31))
            .wrapping_add(i32::from(w[1]) * (31 * 31))
            .wrapping_add(i32::from(w[2]) * 31)
            .wrapping_add(i32::from(w[3]));
    }
    for &b in words.remainder() {
        seen |= b;
        h = h.wrapping_mul(31).wrapping_add(i32::from(b));
    }
    if seen < 0x80 {
        return h;
    }
    // Not ASCII: UTF-8 bytes are not code units; hash the UTF-16 form.
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// The consume-queue `tagsCode` of a message: the hash of its whole `TAGS` value,
/// sign-extended; 0 when the message has no (or an empty) tag.
pub fn tags_code(tags: Option<&str>) -> i64 {
    match tags {
        None | Some("") => 0,
        Some(t) => i64::from(java_string_hash(t)),
    }
}

/// Whether an `expressionType` denotes a tag filter: absent, empty or `TAG` (Java
/// `ExpressionType.isTagType`).
pub fn is_tag_type(expression_type: Option<&str>) -> bool {
    matches!(expression_type, None | Some("") | Some(EXPRESSION_TYPE_TAG))
}

/// Java `String.trim()`: strips every char `<= ' '` at both ends (control chars
/// included), which differs from Rust's Unicode-whitespace `trim`.
fn java_trim(s: &str) -> &str {
    s.trim_matches(|c: char| c <= ' ')
}

/// A parsed TAG subscription expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagFilter {
    /// `*` or an empty expression: every message, tagged or not.
    All,
    /// The listed tags (deduplicated, first-seen order) and their hash codes, in the same
    /// order. May be empty (an expression of only separators), which matches nothing.
    Tags { tags: Vec<String>, codes: Vec<i32> },
}

impl TagFilter {
    /// Parses a subscription string the way Java `FilterAPI.buildSubscriptionData` does:
    /// empty or exactly `*` means all; otherwise split on `||`, trim each piece, drop
    /// empties. Total: any text parses.
    pub fn parse(sub_string: &str) -> Self {
        if sub_string.is_empty() || sub_string == SUB_ALL {
            return Self::All;
        }
        let mut tags: Vec<String> = Vec::new();
        let mut codes = Vec::new();
        for piece in sub_string.split(TAG_SEPARATOR) {
            let tag = java_trim(piece);
            if tag.is_empty() || tags.iter().any(|t| t == tag) {
                continue;
            }
            codes.push(java_string_hash(tag));
            tags.push(tag.to_owned());
        }
        Self::Tags { tags, codes }
    }

    /// Broker-side consume-queue check: `*` matches everything, otherwise the entry's
    /// tagsCode (as int32) must be one of the subscribed hash codes. Untagged messages
    /// (code 0) therefore only match `*` unless a tag happens to hash to 0; clients
    /// re-check the exact tag string, so collisions are harmless.
    pub fn matches_tags_code(&self, tags_code: i64) -> bool {
        match self {
            Self::All => true,
            // Truncation to int32 is deliberate: Java compares `tagsCode.intValue()`.
            Self::Tags { codes, .. } => codes.contains(&(tags_code as i32)),
        }
    }

    /// Exact, case-sensitive check of a message's `TAGS` value (what clients re-check
    /// after pulling).
    pub fn matches_tag(&self, tag: Option<&str>) -> bool {
        match (self, tag) {
            (Self::All, _) => true,
            (Self::Tags { tags, .. }, Some(t)) => tags.iter().any(|s| s == t),
            (Self::Tags { .. }, None) => false,
        }
    }

    /// Whether this is the match-all filter.
    pub fn is_all(&self) -> bool {
        matches!(self, Self::All)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn java_hash_golden_values() {
        // Values the JVM prints for "x".hashCode().
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("TagA"), 2_598_919);
        assert_eq!(java_string_hash("TagB"), 2_598_920);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        assert_eq!(java_string_hash("TopicTest#OrderID188"), -1_231_271_670);
        // Wraps: "polygenelubricants".hashCode() == Integer.MIN_VALUE.
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        // Non-ASCII BMP char: 'é' is one UTF-16 unit 0xE9.
        assert_eq!(java_string_hash("é"), 0xE9);
        // Supplementary char U+1F600 is the surrogate pair D83D DE00.
        assert_eq!(java_string_hash("😀"), 0xD83D * 31 + 0xDE00);
    }

    proptest! {
        #[test]
        fn java_hash_equals_the_unit_at_a_time_definition(s in "\\PC{0,40}|[ -~]{0,70}") {
            let by_unit = s
                .encode_utf16()
                .fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(i32::from(unit)));
            prop_assert_eq!(java_string_hash(&s), by_unit);
        }
    }

    #[test]
    fn tags_code_sign_extends() {
        assert_eq!(tags_code(Some("TagA")), 2_598_919);
        assert_eq!(tags_code(Some("polygenelubricants")), -2_147_483_648);
        assert_eq!(tags_code(None), 0);
        assert_eq!(tags_code(Some("")), 0);
    }

    #[test]
    fn parse_expression() {
        assert_eq!(TagFilter::parse("*"), TagFilter::All);
        assert_eq!(TagFilter::parse(""), TagFilter::All);
        let f = TagFilter::parse(" TagA || TagB||TagA|| ||");
        assert_eq!(
            f,
            TagFilter::Tags {
                tags: vec!["TagA".into(), "TagB".into()],
                codes: vec![2_598_919, 2_598_920],
            }
        );
        assert!(f.matches_tags_code(2_598_919));
        assert!(!f.matches_tags_code(0));
        assert!(f.matches_tag(Some("TagB")));
        assert!(!f.matches_tag(Some("tagb")));
        assert!(!f.matches_tag(None));
        // " * " is not the match-all string in Java either: it is the tag "*".
        assert_eq!(
            TagFilter::parse(" * "),
            TagFilter::Tags {
                tags: vec!["*".into()],
                codes: vec![42]
            }
        );
        assert!(TagFilter::parse("*").matches_tags_code(0));
        assert!(is_tag_type(None));
        assert!(is_tag_type(Some("TAG")));
        assert!(!is_tag_type(Some("SQL92")));
    }

    #[test]
    fn java_trim_strips_control_chars() {
        let f = TagFilter::parse("\u{1}TagA\t||\u{a0}B");
        // U+00A0 is above ' ' so Java keeps it.
        assert_eq!(
            f,
            TagFilter::Tags {
                tags: vec!["TagA".into(), "\u{a0}B".into()],
                codes: vec![2_598_919, java_string_hash("\u{a0}B")],
            }
        );
    }

    proptest! {
        #[test]
        fn parse_never_panics_and_codes_match(s in ".{0,64}") {
            if let TagFilter::Tags { tags, codes } = TagFilter::parse(&s) {
                prop_assert_eq!(tags.len(), codes.len());
                for (t, c) in tags.iter().zip(&codes) {
                    prop_assert_eq!(java_string_hash(t), *c);
                    prop_assert!(!t.is_empty());
                }
            }
        }

        #[test]
        fn ascii_hash_matches_polynomial(s in "[ -~]{0,32}") {
            let mut h: i64 = 0;
            for b in s.bytes() {
                h = (h * 31 + i64::from(b)) & 0xFFFF_FFFF;
            }
            prop_assert_eq!(java_string_hash(&s), h as u32 as i32);
        }
    }
}
