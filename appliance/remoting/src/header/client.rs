//! Client registration headers (`headers.md` §5): heartbeat, unregister client, consumer
//! list, consumer-ids-changed notification, queue lock/unlock, and the broker → client
//! requests (`remoting.md` §11) that carry a header.

command_header! {
    /// `HeartbeatRequestHeader` (code 34): only the `+rpc` keys; the data is the body.
    HeartbeatRequestHeader + rpc {}
}

command_header! {
    /// Extra keys of a `HEART_BEAT` response.
    HeartbeatResponseHeader {
        /// `IS_SUPPORT_HEART_BEAT_V2`.
        support_heartbeat_v2: Option<bool> = "IS_SUPPORT_HEART_BEAT_V2";
        /// `IS_SUB_CHANGE`.
        sub_change: Option<bool> = "IS_SUB_CHANGE";
    }
}

command_header! {
    /// `UnregisterClientRequestHeader` (code 35).
    UnregisterClientRequestHeader + rpc {
        /// Key `clientID` (capital ID).
        client_id: String = "clientID";
        producer_group: Option<String> = "producerGroup";
        consumer_group: Option<String> = "consumerGroup";
    }
}

command_header! {
    /// `UnregisterClientResponseHeader`: no fields.
    UnregisterClientResponseHeader {}
}

command_header! {
    /// `GetConsumerListByGroupRequestHeader` (code 38).
    GetConsumerListByGroupRequestHeader + rpc {
        consumer_group: String = "consumerGroup";
    }
}

command_header! {
    /// `NotifyConsumerIdsChangedRequestHeader` (code 40, broker -> consumer, oneway).
    NotifyConsumerIdsChangedRequestHeader + rpc {
        consumer_group: String = "consumerGroup";
    }
}

command_header! {
    /// `LockBatchMqRequestHeader` (code 41): only `+rpc`; the queues are the body.
    LockBatchMqRequestHeader + rpc {}
}

command_header! {
    /// `UnlockBatchMqRequestHeader` (code 42): only `+rpc`; the queues are the body.
    UnlockBatchMqRequestHeader + rpc {}
}

command_header! {
    /// `GetConsumerStatusRequestHeader`: code 221 (broker -> consumer) and 223
    /// (`INVOKE_BROKER_TO_GET_CONSUMER_STATUS`, admin -> broker).
    GetConsumerStatusRequestHeader + rpc {
        topic: String = "topic";
        group: String = "group";
        client_addr: Option<String> = "clientAddr";
    }
}

command_header! {
    /// `GetConsumerRunningInfoRequestHeader` (code 307, admin -> broker -> consumer).
    GetConsumerRunningInfoRequestHeader + rpc {
        consumer_group: String = "consumerGroup";
        client_id: String = "clientId";
        jstack_enable: bool = "jstackEnable" or false;
    }
}

command_header! {
    /// `ConsumeMessageDirectlyResultRequestHeader` (code 309, admin -> broker -> consumer).
    ConsumeMessageDirectlyResultRequestHeader + rpc {
        consumer_group: String = "consumerGroup";
        client_id: Option<String> = "clientId";
        msg_id: Option<String> = "msgId";
        broker_name: Option<String> = "brokerName";
        topic: Option<String> = "topic";
        topic_sys_flag: Option<i32> = "topicSysFlag";
        group_sys_flag: Option<i32> = "groupSysFlag";
    }
}
