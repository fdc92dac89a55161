//! Transaction headers (`headers.md` §7): `END_TRANSACTION` (37, client -> broker, oneway)
//! and `CHECK_TRANSACTION_STATE` (39, broker -> producer, oneway).

/// `commitOrRollback` value: no decision yet (the broker ignores it).
pub const TRANSACTION_NOT_TYPE: i32 = 0;
/// `commitOrRollback` value: commit.
pub const TRANSACTION_COMMIT_TYPE: i32 = 8;
/// `commitOrRollback` value: rollback.
pub const TRANSACTION_ROLLBACK_TYPE: i32 = 12;

command_header! {
    /// `EndTransactionRequestHeader` (code 37).
    EndTransactionRequestHeader + rpc {
        topic: Option<String> = "topic";
        /// Must equal the half message's `PGROUP`.
        producer_group: String = "producerGroup";
        /// Queue offset of the half message.
        tran_state_table_offset: i64 = "tranStateTableOffset";
        /// Commit-log offset of the half message.
        commit_log_offset: i64 = "commitLogOffset";
        /// 8 commit, 12 rollback, 0 unknown.
        commit_or_rollback: i32 = "commitOrRollback";
        from_transaction_check: Option<bool> = "fromTransactionCheck";
        /// The client message id (UNIQ_KEY).
        msg_id: String = "msgId";
        transaction_id: Option<String> = "transactionId";
    }
}

command_header! {
    /// `EndTransactionResponseHeader`: no fields.
    EndTransactionResponseHeader {}
}

command_header! {
    /// `CheckTransactionStateRequestHeader` (code 39); the broker name is `rpc.broker_name`.
    CheckTransactionStateRequestHeader + rpc {
        topic: Option<String> = "topic";
        tran_state_table_offset: i64 = "tranStateTableOffset";
        commit_log_offset: i64 = "commitLogOffset";
        msg_id: Option<String> = "msgId";
        transaction_id: Option<String> = "transactionId";
        offset_msg_id: Option<String> = "offsetMsgId";
    }
}
