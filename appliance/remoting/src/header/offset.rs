//! Offset headers (`headers.md` §3): query/update consumer offset, max/min offset, earliest
//! store time, search offset by timestamp.

use crate::header::BoundaryType;

command_header! {
    /// `QueryConsumerOffsetRequestHeader` (code 14).
    QueryConsumerOffsetRequestHeader + rpc {
        consumer_group: String = "consumerGroup";
        topic: String = "topic";
        queue_id: i32 = "queueId";
        /// `false`: never fabricate offset 0 for a fresh queue.
        set_zero_if_not_found: Option<bool> = "setZeroIfNotFound";
    }
}

command_header! {
    /// `QueryConsumerOffsetResponseHeader`.
    QueryConsumerOffsetResponseHeader {
        offset: i64 = "offset";
    }
}

command_header! {
    /// `UpdateConsumerOffsetRequestHeader` (code 15, normally oneway).
    UpdateConsumerOffsetRequestHeader + rpc {
        consumer_group: String = "consumerGroup";
        topic: String = "topic";
        queue_id: i32 = "queueId";
        commit_offset: i64 = "commitOffset";
    }
}

command_header! {
    /// `UpdateConsumerOffsetResponseHeader`: no fields.
    UpdateConsumerOffsetResponseHeader {}
}

command_header! {
    /// `GetMaxOffsetRequestHeader` (code 30).
    GetMaxOffsetRequestHeader + rpc {
        topic: String = "topic";
        queue_id: i32 = "queueId";
        /// Only offsets already committed/replicated (default true).
        committed: bool = "committed" or true;
    }
}

command_header! {
    /// `GetMaxOffsetResponseHeader`: the queue max offset (next offset to write).
    GetMaxOffsetResponseHeader {
        offset: i64 = "offset";
    }
}

command_header! {
    /// `GetMinOffsetRequestHeader` (code 31).
    GetMinOffsetRequestHeader + rpc {
        topic: String = "topic";
        queue_id: i32 = "queueId";
    }
}

command_header! {
    /// `GetMinOffsetResponseHeader`.
    GetMinOffsetResponseHeader {
        offset: i64 = "offset";
    }
}

command_header! {
    /// `GetEarliestMsgStoretimeRequestHeader` (code 32).
    GetEarliestMsgStoretimeRequestHeader + rpc {
        topic: String = "topic";
        queue_id: i32 = "queueId";
    }
}

command_header! {
    /// `GetEarliestMsgStoretimeResponseHeader`: store time of the earliest message.
    GetEarliestMsgStoretimeResponseHeader {
        timestamp: i64 = "timestamp";
    }
}

command_header! {
    /// `SearchOffsetRequestHeader` (code 29).
    SearchOffsetRequestHeader + rpc {
        topic: String = "topic";
        queue_id: i32 = "queueId";
        /// Milliseconds.
        timestamp: i64 = "timestamp";
        /// `LOWER` (default) or `UPPER`, case-insensitive.
        boundary_type: Option<BoundaryType> = "boundaryType";
    }
}

command_header! {
    /// `SearchOffsetResponseHeader`.
    SearchOffsetResponseHeader {
        offset: i64 = "offset";
    }
}
