//! TAG subscription filtering (features.md §i.1) as the store sees it while reading a queue:
//! a pre-filter on the ConsumeQueue unit's tagsCode (a hash match, no CommitLog read) and an
//! optional exact post-filter on the record's `TAGS` property (what clients re-check anyway;
//! worth it where the broker hands messages out without a client re-check, e.g. POP).
//!
//! Parsing and hashing live in `ringmq_remoting::message::tags` (`TagFilter`,
//! `java_string_hash`); this module owns [`TagMessageFilter`], the [`MessageFilter`] over it.
//!
//! Bounds: a subscription string longer than [`MAX_SUBSCRIPTION_LEN_BYTES`] or with more than
//! [`MAX_TAGS_PER_SUBSCRIPTION`] tags is refused (SUBSCRIPTION_PARSE_FAILED at the caller).

use ringmq_remoting::message::properties::{self, keys};
use ringmq_remoting::message::record::{self, Decoded};
use ringmq_remoting::message::tags::TagFilter;
use ringmq_store::MessageFilter;

/// Longest TAG subscription string accepted.
pub const MAX_SUBSCRIPTION_LEN_BYTES: usize = 16 * 1024;
/// Most distinct tags in one `A || B || …` subscription.
pub const MAX_TAGS_PER_SUBSCRIPTION: usize = 1024;

/// Parses a TAG subscription (`*` / empty = all, else `A || B || C`), within the bounds.
pub fn parse_subscription(sub_string: &str) -> Result<TagFilter, String> {
    if sub_string.len() > MAX_SUBSCRIPTION_LEN_BYTES {
        return Err(format!(
            "tag subscription is {} bytes, more than {MAX_SUBSCRIPTION_LEN_BYTES}",
            sub_string.len()
        ));
    }
    let filter = TagFilter::parse(sub_string);
    if let TagFilter::Tags { tags, .. } = &filter {
        if tags.len() > MAX_TAGS_PER_SUBSCRIPTION {
            return Err(format!(
                "tag subscription lists {} tags, more than {MAX_TAGS_PER_SUBSCRIPTION}",
                tags.len()
            ));
        }
    }
    Ok(filter)
}

/// The `TAGS` value of a stored record, `None` when absent or the record does not decode.
pub fn record_tag(record: &[u8]) -> Option<&str> {
    match record::decode_record(record, false) {
        Ok(Decoded::Message(r)) => {
            let props = std::str::from_utf8(r.properties).ok()?;
            properties::find(props, keys::TAGS)
        }
        _ => None,
    }
}

/// A store read filter for a TAG subscription.
#[derive(Debug, Clone)]
pub struct TagMessageFilter {
    filter: TagFilter,
    /// Also compare the record's tag string (drops hash collisions broker-side).
    exact: bool,
}

impl TagMessageFilter {
    /// Hash-only filter, as the Java broker's pull path does it (records never decoded).
    pub fn by_code(filter: TagFilter) -> Self {
        Self {
            filter,
            exact: false,
        }
    }

    /// Hash pre-filter plus exact tag post-filter.
    pub fn exact(filter: TagFilter) -> Self {
        Self {
            filter,
            exact: true,
        }
    }

    pub fn tag_filter(&self) -> &TagFilter {
        &self.filter
    }
}

impl MessageFilter for TagMessageFilter {
    /// A unit without a tagsCode (e.g. an extended CQ unit) passes, as upstream decides.
    fn match_by_tags_code(&self, tags_code: Option<i64>) -> bool {
        match tags_code {
            None => true,
            Some(code) => self.filter.matches_tags_code(code),
        }
    }

    fn match_by_record(&self, record: &[u8]) -> bool {
        if !self.exact || self.filter.is_all() {
            return true;
        }
        self.filter.matches_tag(record_tag(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use ringmq_remoting::message::record::RecordFields;
    use ringmq_remoting::message::tags::{java_string_hash, tags_code};

    fn record_with_tag(tag: Option<&str>) -> Vec<u8> {
        let props = match tag {
            Some(t) => format!("TAGS\u{1}{t}\u{2}"),
            None => String::new(),
        };
        let host = "127.0.0.1:10911".parse().unwrap();
        let fields = RecordFields {
            queue_id: 0,
            flag: 0,
            queue_offset: 0,
            physical_offset: 0,
            sys_flag: 0,
            born_timestamp_ms: 1,
            born_host: host,
            store_timestamp_ms: 2,
            store_host: host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: b"b",
            topic: "T",
            properties: props.as_bytes(),
        };
        let mut out = BytesMut::new();
        record::encode_record(&fields, &mut out).unwrap();
        out.to_vec()
    }

    #[test]
    fn star_and_empty_match_everything() {
        for sub in ["*", ""] {
            let f = TagMessageFilter::exact(parse_subscription(sub).unwrap());
            assert!(f.match_by_tags_code(Some(0)));
            assert!(f.match_by_tags_code(Some(12345)));
            assert!(f.match_by_record(&record_with_tag(None)));
        }
    }

    #[test]
    fn codes_prefilter_then_exact_tag() {
        let f = TagMessageFilter::exact(parse_subscription("TagA || TagB").unwrap());
        assert!(f.match_by_tags_code(Some(tags_code(Some("TagA")))));
        assert!(f.match_by_tags_code(Some(tags_code(Some("TagB")))));
        assert!(!f.match_by_tags_code(Some(tags_code(Some("TagC")))));
        assert!(
            !f.match_by_tags_code(Some(0)),
            "untagged messages do not match a tag list"
        );
        assert!(
            f.match_by_tags_code(None),
            "a unit without a code passes to the record check"
        );
        // Only the low 32 bits count, as in Java's intValue().
        let code = i64::from(java_string_hash("TagA")) | (1 << 40);
        assert!(f.match_by_tags_code(Some(code)));
        assert!(f.match_by_record(&record_with_tag(Some("TagA"))));
        assert!(!f.match_by_record(&record_with_tag(Some("tagA"))));
        assert!(!f.match_by_record(&record_with_tag(None)));
        assert!(
            !f.match_by_record(b"garbage"),
            "an undecodable record has no tag"
        );
    }

    #[test]
    fn hash_collisions_only_drop_with_exact() {
        // "Aa" and "BB" share a Java hash code.
        assert_eq!(java_string_hash("Aa"), java_string_hash("BB"));
        let sub = parse_subscription("Aa").unwrap();
        let rec = record_with_tag(Some("BB"));
        let code = Some(tags_code(Some("BB")));
        let loose = TagMessageFilter::by_code(sub.clone());
        assert!(loose.match_by_tags_code(code) && loose.match_by_record(&rec));
        let exact = TagMessageFilter::exact(sub);
        assert!(exact.match_by_tags_code(code));
        assert!(!exact.match_by_record(&rec));
    }

    #[test]
    fn bounds() {
        assert!(parse_subscription(&"a".repeat(MAX_SUBSCRIPTION_LEN_BYTES + 1)).is_err());
        let many: Vec<String> = (0..=MAX_TAGS_PER_SUBSCRIPTION)
            .map(|i| format!("t{i}"))
            .collect();
        assert!(parse_subscription(&many.join("||")).is_err());
        assert!(parse_subscription(&many[..10].join("||")).is_ok());
    }
}
