//! Pulling headers (`headers.md` §2): `PULL_MESSAGE` (11) / `LITE_PULL_MESSAGE` (361)
//! request and the pull response, plus the `PullSysFlag` bits.

use crate::command::ExtFields;
use crate::header::send::{required_str, required_value};
use crate::header::{read_field, HeaderError};

/// `PullSysFlag` bit 0: store `commitOffset` as the group's offset.
pub const PULL_FLAG_COMMIT_OFFSET: i32 = 0x1;
/// `PullSysFlag` bit 1: long polling allowed for `suspendTimeoutMillis`.
pub const PULL_FLAG_SUSPEND: i32 = 0x2;
/// `PullSysFlag` bit 2: use the request's subscription, not the heartbeat's.
pub const PULL_FLAG_SUBSCRIPTION: i32 = 0x4;
/// `PullSysFlag` bit 3: legacy class filter.
pub const PULL_FLAG_CLASS_FILTER: i32 = 0x8;
/// `PullSysFlag` bit 4: lite pull consumer.
pub const PULL_FLAG_LITE_PULL: i32 = 0x10;

command_header! {
    /// `PullMessageRequestHeader` (codes 11 and 361).
    PullMessageRequestHeader + rpc {
        consumer_group: String = "consumerGroup";
        topic: String = "topic";
        queue_id: i32 = "queueId";
        /// Logical offset to start from.
        queue_offset: i64 = "queueOffset";
        max_msg_nums: i32 = "maxMsgNums";
        /// `PULL_FLAG_*` bits.
        sys_flag: i32 = "sysFlag";
        /// Consumer's offset to persist when [`PULL_FLAG_COMMIT_OFFSET`] is set.
        /// `@CFNotNull` upstream, but only read under its flag, so a pull without it is
        /// served (as upstream's broker serves it) rather than refused.
        commit_offset: i64 = "commitOffset" or 0;
        /// Only read under [`PULL_FLAG_SUSPEND`]; lenient like `commitOffset`.
        suspend_timeout_millis: i64 = "suspendTimeoutMillis" or 0;
        subscription: Option<String> = "subscription";
        /// Lenient like `commitOffset`: 0 when absent.
        sub_version: i64 = "subVersion" or 0;
        /// `TAG` (default) or `SQL92`.
        expression_type: Option<String> = "expressionType";
        max_msg_bytes: Option<i32> = "maxMsgBytes";
        /// -1 SDK, 0 proxy-for-order, 1 proxy-for-broadcast, 2 proxy-for-stream.
        request_source: Option<i32> = "requestSource";
        /// (sic) upstream spelling.
        proxy_forward_client_id: Option<String> = "proxyFrowardClientId";
    }
}

impl PullMessageRequestHeader {
    pub fn has_commit_offset(&self) -> bool {
        self.sys_flag & PULL_FLAG_COMMIT_OFFSET != 0
    }
    pub fn has_suspend(&self) -> bool {
        self.sys_flag & PULL_FLAG_SUSPEND != 0
    }
    pub fn has_subscription(&self) -> bool {
        self.sys_flag & PULL_FLAG_SUBSCRIPTION != 0
    }
}

/// The pull request header of codes 11/361 as the broker reads it on every pull:
/// strings borrowed from the request's extFields, numbers parsed in place, nothing
/// allocated. Same keys, text rules and defaults as [`PullMessageRequestHeader`] (the
/// owned form clients build); [`PullMessageHeaderRef::to_owned_header`] equals its
/// decode apart from the `+rpc` keys, which the broker does not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullMessageHeaderRef<'a> {
    pub consumer_group: &'a str,
    pub topic: &'a str,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub max_msg_nums: i32,
    pub sys_flag: i32,
    pub commit_offset: i64,
    pub suspend_timeout_millis: i64,
    pub subscription: Option<&'a str>,
    pub sub_version: i64,
    pub expression_type: Option<&'a str>,
    pub max_msg_bytes: Option<i32>,
    pub request_source: Option<i32>,
    pub proxy_forward_client_id: Option<&'a str>,
}

impl<'a> PullMessageHeaderRef<'a> {
    /// Decodes the pull header. Required fields are the dispatch's check
    /// ([`crate::header::check_required_for_code`]); a missing one still comes back as
    /// [`HeaderError::Missing`] here rather than a made-up value.
    pub fn decode(fields: &'a ExtFields) -> Result<Self, HeaderError> {
        Ok(Self {
            consumer_group: required_str(fields, "consumerGroup")?,
            topic: required_str(fields, "topic")?,
            queue_id: required_value(fields, "queueId")?,
            queue_offset: required_value(fields, "queueOffset")?,
            max_msg_nums: required_value(fields, "maxMsgNums")?,
            sys_flag: required_value(fields, "sysFlag")?,
            commit_offset: read_field(fields, "commitOffset")?.unwrap_or(0),
            suspend_timeout_millis: read_field(fields, "suspendTimeoutMillis")?.unwrap_or(0),
            subscription: fields.get("subscription"),
            sub_version: read_field(fields, "subVersion")?.unwrap_or(0),
            expression_type: fields.get("expressionType"),
            max_msg_bytes: read_field(fields, "maxMsgBytes")?,
            request_source: read_field(fields, "requestSource")?,
            proxy_forward_client_id: fields.get("proxyFrowardClientId"),
        })
    }

    pub fn has_commit_offset(&self) -> bool {
        self.sys_flag & PULL_FLAG_COMMIT_OFFSET != 0
    }
    pub fn has_suspend(&self) -> bool {
        self.sys_flag & PULL_FLAG_SUSPEND != 0
    }
    pub fn has_subscription(&self) -> bool {
        self.sys_flag & PULL_FLAG_SUBSCRIPTION != 0
    }
    pub fn is_lite_pull(&self) -> bool {
        self.sys_flag & PULL_FLAG_LITE_PULL != 0
    }

    /// The owned header with the same values (`+rpc` keys left empty).
    pub fn to_owned_header(&self) -> PullMessageRequestHeader {
        PullMessageRequestHeader {
            consumer_group: self.consumer_group.to_owned(),
            topic: self.topic.to_owned(),
            queue_id: self.queue_id,
            queue_offset: self.queue_offset,
            max_msg_nums: self.max_msg_nums,
            sys_flag: self.sys_flag,
            commit_offset: self.commit_offset,
            suspend_timeout_millis: self.suspend_timeout_millis,
            subscription: self.subscription.map(str::to_owned),
            sub_version: self.sub_version,
            expression_type: self.expression_type.map(str::to_owned),
            max_msg_bytes: self.max_msg_bytes,
            request_source: self.request_source,
            proxy_forward_client_id: self.proxy_forward_client_id.map(str::to_owned),
            rpc: crate::header::RpcFields::default(),
        }
    }
}

command_header! {
    /// `PullMessageResponseHeader`; the remark carries the store status name.
    PullMessageResponseHeader {
        /// Where to pull next time (0 = master).
        suggest_which_broker_id: i64 = "suggestWhichBrokerId";
        next_begin_offset: i64 = "nextBeginOffset";
        min_offset: i64 = "minOffset";
        max_offset: i64 = "maxOffset";
        /// Static topics only.
        offset_delta: Option<i64> = "offsetDelta";
        topic_sys_flag: Option<i32> = "topicSysFlag";
        group_sys_flag: Option<i32> = "groupSysFlag";
        /// With NO_PERMISSION: 1 broker, 2 group, 3 topic, 4 broadcasting disabled, 5 subscription.
        forbidden_type: Option<i32> = "forbiddenType";
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::testing::{check_borrowed, sample_fields, SampleSource};
    use crate::header::{CommandHeader, RpcFields};
    use proptest::prelude::*;

    /// Every key of the pull header's table, for dropping and spoiling fields.
    fn pull_keys() -> Vec<&'static str> {
        PullMessageRequestHeader::KEYS.to_vec()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The borrowed decoder the broker runs gives what the owned typed header gives,
        /// errors included (missing and malformed fields).
        #[test]
        fn borrowed_decode_equals_owned_decode(
            bytes in prop::collection::vec(any::<u8>(), 0..256),
            drop_mask in any::<u16>().prop_map(|m| if m % 4 == 0 { m } else { 0 }),
            junk in any::<u8>().prop_map(|j| if j % 5 == 0 { j } else { 0 }),
        ) {
            let mut src = SampleSource::new(&bytes);
            let mut fields = ExtFields::new();
            sample_fields(&mut src, PullMessageRequestHeader::FIELDS, &mut fields);
            sample_fields(&mut src, RpcFields::FIELDS, &mut fields);
            let keys = pull_keys();
            for (bit, key) in keys.iter().enumerate() {
                if drop_mask & (1 << bit) != 0 {
                    fields.remove(key);
                }
            }
            if junk != 0 {
                fields.insert(keys[usize::from(junk) % keys.len()], "x1");
            }
            let borrowed = PullMessageHeaderRef::decode(&fields).map(|h| h.to_owned_header());
            let owned = PullMessageRequestHeader::decode(&fields)
                .map(|h| PullMessageRequestHeader { rpc: RpcFields::default(), ..h });
            prop_assert_eq!(borrowed, owned);
            prop_assert!(check_borrowed(&fields).is_ok());
        }
    }

    #[test]
    fn borrowed_decode_defaults_the_lenient_fields() {
        let fields: ExtFields = [
            ("consumerGroup", "G"),
            ("topic", "T"),
            ("queueId", "2"),
            ("queueOffset", "40"),
            ("maxMsgNums", "32"),
            ("sysFlag", "6"),
            ("subscription", "TagA || TagB"),
        ]
        .into_iter()
        .collect();
        let header = PullMessageHeaderRef::decode(&fields).unwrap();
        assert_eq!(header.commit_offset, 0);
        assert_eq!(header.suspend_timeout_millis, 0);
        assert_eq!(header.sub_version, 0);
        assert!(header.has_suspend() && header.has_subscription());
        assert!(!header.has_commit_offset() && !header.is_lite_pull());
        assert_eq!(
            header.subscription.unwrap().as_ptr(),
            fields.get("subscription").unwrap().as_ptr()
        );
        assert_eq!(
            PullMessageHeaderRef::decode(&ExtFields::new()),
            Err(HeaderError::Missing {
                field: "consumerGroup"
            })
        );
    }
}
