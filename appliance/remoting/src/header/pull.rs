//! Pulling headers (`headers.md` §2): `PULL_MESSAGE` (11) / `LITE_PULL_MESSAGE` (361)
//! request and the pull response, plus the `PullSysFlag` bits.

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
