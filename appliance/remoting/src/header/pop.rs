//! POP consumption headers (`headers.md` §10): pop, ack, change invisible time,
//! notification, peek, polling info. Their codes exceed 32767, so they only travel with
//! JSON headers.

command_header! {
    /// `PopMessageRequestHeader` (code 200050).
    PopMessageRequestHeader + rpc {
        consumer_group: String = "consumerGroup";
        topic: String = "topic";
        /// -1 = any queue of the topic on this broker.
        queue_id: i32 = "queueId";
        /// At most 32.
        max_msg_nums: i32 = "maxMsgNums";
        invisible_time: i64 = "invisibleTime";
        poll_time: i64 = "pollTime";
        born_time: i64 = "bornTime";
        /// Start without an offset: 0 = MIN, 1 = MAX.
        init_mode: i32 = "initMode";
        exp_type: Option<String> = "expType";
        exp: Option<String> = "exp";
        order: bool = "order" or false;
        attempt_id: Option<String> = "attemptId";
    }
}

command_header! {
    /// `PopMessageResponseHeader`.
    PopMessageResponseHeader {
        pop_time: i64 = "popTime";
        invisible_time: i64 = "invisibleTime";
        revive_qid: i32 = "reviveQid";
        rest_num: i64 = "restNum";
        /// `;`-separated `<retry> <queueId> <startOffset>` items.
        start_offset_info: Option<String> = "startOffsetInfo";
        /// `;`-separated `<retry> <queueId> <off1>,<off2>,...` items.
        msg_offset_info: Option<String> = "msgOffsetInfo";
        /// `;`-separated `<retry> <queueId or qo<queueId>%<offset>> <count>` items.
        order_count_info: Option<String> = "orderCountInfo";
    }
}

command_header! {
    /// `AckMessageRequestHeader` (code 200051).
    AckMessageRequestHeader + rpc {
        consumer_group: String = "consumerGroup";
        topic: String = "topic";
        queue_id: i32 = "queueId";
        /// The receipt handle.
        extra_info: String = "extraInfo";
        /// The message's queue offset.
        offset: i64 = "offset";
    }
}

command_header! {
    /// `ChangeInvisibleTimeRequestHeader` (code 200053).
    ChangeInvisibleTimeRequestHeader + rpc {
        consumer_group: String = "consumerGroup";
        topic: String = "topic";
        queue_id: i32 = "queueId";
        extra_info: String = "extraInfo";
        offset: i64 = "offset";
        invisible_time: i64 = "invisibleTime";
    }
}

command_header! {
    /// `ChangeInvisibleTimeResponseHeader`: the client builds a new handle from it.
    ChangeInvisibleTimeResponseHeader {
        pop_time: i64 = "popTime";
        invisible_time: i64 = "invisibleTime";
        revive_qid: i32 = "reviveQid";
    }
}

command_header! {
    /// `NotificationRequestHeader` (code 200054).
    NotificationRequestHeader + rpc {
        consumer_group: String = "consumerGroup";
        topic: String = "topic";
        /// -1 = any queue.
        queue_id: i32 = "queueId";
        poll_time: i64 = "pollTime";
        born_time: i64 = "bornTime";
        order: bool = "order" or false;
        attempt_id: Option<String> = "attemptId";
    }
}

command_header! {
    /// `NotificationResponseHeader`.
    NotificationResponseHeader {
        has_msg: bool = "hasMsg";
        polling_full: bool = "pollingFull" or false;
    }
}

command_header! {
    /// `PeekMessageRequestHeader` (code 200052).
    PeekMessageRequestHeader + rpc {
        topic: String = "topic";
        queue_id: i32 = "queueId";
        max_msg_nums: i32 = "maxMsgNums";
        consumer_group: String = "consumerGroup";
    }
}

command_header! {
    /// `PollingInfoRequestHeader` (code 200055).
    PollingInfoRequestHeader + rpc {
        consumer_group: String = "consumerGroup";
        topic: String = "topic";
        queue_id: i32 = "queueId";
    }
}

command_header! {
    /// `PollingInfoResponseHeader`.
    PollingInfoResponseHeader {
        polling_num: i32 = "pollingNum";
    }
}
