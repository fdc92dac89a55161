//! Message lookup headers (`headers.md` §4): `VIEW_MESSAGE_BY_ID` (33) and
//! `QUERY_MESSAGE` (12).

command_header! {
    /// `ViewMessageRequestHeader` (code 33).
    ViewMessageRequestHeader {
        /// For ACL only.
        topic: Option<String> = "topic";
        /// Commit-log offset decoded from an offsetMsgId.
        offset: i64 = "offset";
    }
}

command_header! {
    /// `QueryMessageRequestHeader` (code 12).
    QueryMessageRequestHeader + rpc {
        topic: String = "topic";
        /// A `KEYS` token or a `UNIQ_KEY`.
        key: String = "key";
        max_num: i32 = "maxNum";
        begin_timestamp: i64 = "beginTimestamp";
        end_timestamp: i64 = "endTimestamp";
        /// Extra key `_UNIQUE_KEY_QUERY`: `true` when `key` is a UNIQ_KEY.
        unique_key_query: Option<bool> = "_UNIQUE_KEY_QUERY";
    }
}

command_header! {
    /// `QueryMessageResponseHeader`.
    QueryMessageResponseHeader {
        index_last_update_timestamp: i64 = "indexLastUpdateTimestamp";
        index_last_update_phyoffset: i64 = "indexLastUpdatePhyoffset";
    }
}
