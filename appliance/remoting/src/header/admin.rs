//! Broker administration headers (`headers.md` §9, the `mqadmin` commands): topics,
//! subscription groups, stats, connections, offsets reset, broker config, and the less
//! common admin and broker-to-broker requests that carry a header.

command_header! {
    /// `CreateTopicRequestHeader` (code 17).
    CreateTopicRequestHeader + rpc {
        topic: String = "topic";
        /// mqadmin sends `TBW102`; unused by the broker.
        default_topic: String = "defaultTopic";
        read_queue_nums: i32 = "readQueueNums";
        write_queue_nums: i32 = "writeQueueNums";
        /// Perm bits: 1 inherit, 2 write, 4 read, 8 priority.
        perm: i32 = "perm";
        /// `SINGLE_TAG` or `MULTI_TAG`.
        topic_filter_type: String = "topicFilterType";
        topic_sys_flag: Option<i32> = "topicSysFlag";
        order: bool = "order";
        /// Modifications `+key=value,+key2=value2,-key3`.
        attributes: Option<String> = "attributes";
        force: bool = "force" or false;
    }
}

command_header! {
    /// `CreateTopicListRequestHeader` (code 18): only `+rpc`; the topics are the body.
    CreateTopicListRequestHeader + rpc {}
}

command_header! {
    /// `DeleteTopicRequestHeader` (code 215).
    DeleteTopicRequestHeader + rpc {
        topic: String = "topic";
    }
}

command_header! {
    /// `GetAllTopicConfigRequestHeader` (code 21). Older clients send no header at all
    /// (the broker then returns everything), so every field is optional here.
    GetAllTopicConfigRequestHeader {
        /// Index of the first topic wanted.
        topic_seq: Option<i32> = "topicSeq";
        /// DataVersion JSON of the first page (`""` on the first call).
        data_version: Option<String> = "dataVersion";
        max_topic_num: Option<i32> = "maxTopicNum";
    }
}

command_header! {
    /// `GetAllTopicConfigResponseHeader`; absent = the body is complete.
    GetAllTopicConfigResponseHeader {
        total_topic_num: Option<i32> = "totalTopicNum";
    }
}

command_header! {
    /// `GetAllSubscriptionGroupRequestHeader` (code 201), all optional as for topics.
    GetAllSubscriptionGroupRequestHeader {
        group_seq: Option<i32> = "groupSeq";
        data_version: Option<String> = "dataVersion";
        max_group_num: Option<i32> = "maxGroupNum";
    }
}

command_header! {
    /// `GetAllSubscriptionGroupResponseHeader`; absent = the body is complete.
    GetAllSubscriptionGroupResponseHeader {
        total_group_num: Option<i32> = "totalGroupNum";
    }
}

command_header! {
    /// `UPDATE_AND_CREATE_SUBSCRIPTIONGROUP` (200): only `+rpc`; the config is the body.
    CreateSubscriptionGroupRequestHeader + rpc {}
}

command_header! {
    /// `DeleteSubscriptionGroupRequestHeader` (code 207).
    DeleteSubscriptionGroupRequestHeader + rpc {
        group_name: String = "groupName";
        clean_offset: bool = "cleanOffset" or false;
    }
}

command_header! {
    /// `GetSubscriptionGroupConfigRequestHeader` (code 352).
    GetSubscriptionGroupConfigRequestHeader + rpc {
        group: String = "group";
    }
}

command_header! {
    /// `GetTopicConfigRequestHeader` (code 351).
    GetTopicConfigRequestHeader + rpc {
        topic: String = "topic";
    }
}

command_header! {
    /// `GetTopicStatsInfoRequestHeader` (code 202).
    GetTopicStatsInfoRequestHeader + rpc {
        topic: String = "topic";
    }
}

command_header! {
    /// `GetConsumeStatsRequestHeader` (code 208).
    GetConsumeStatsRequestHeader + rpc {
        consumer_group: String = "consumerGroup";
        topic: Option<String> = "topic";
        /// Topics joined by `;`.
        topic_list: Option<String> = "topicList";
    }
}

command_header! {
    /// `GetBrokerConfigResponseHeader` (code 26): the DataVersion JSON text.
    GetBrokerConfigResponseHeader {
        version: Option<String> = "version";
    }
}

command_header! {
    /// `GetConsumerConnectionListRequestHeader` (code 203).
    GetConsumerConnectionListRequestHeader + rpc {
        consumer_group: String = "consumerGroup";
    }
}

command_header! {
    /// `GetProducerConnectionListRequestHeader` (code 204).
    GetProducerConnectionListRequestHeader + rpc {
        producer_group: String = "producerGroup";
    }
}

command_header! {
    /// `GetAllProducerInfoRequestHeader` (code 328): no fields.
    GetAllProducerInfoRequestHeader {}
}

command_header! {
    /// `QueryTopicConsumeByWhoRequestHeader` (code 300).
    QueryTopicConsumeByWhoRequestHeader + rpc {
        topic: String = "topic";
    }
}

command_header! {
    /// `QueryTopicsByConsumerRequestHeader` (code 343).
    QueryTopicsByConsumerRequestHeader + rpc {
        group: String = "group";
    }
}

command_header! {
    /// `QuerySubscriptionByConsumerRequestHeader` (code 345).
    QuerySubscriptionByConsumerRequestHeader + rpc {
        group: String = "group";
        topic: Option<String> = "topic";
    }
}

command_header! {
    /// `ResetOffsetRequestHeader`: code 222 (admin -> broker) and, with `topic`, `group`,
    /// `timestamp`, `isForce` only, code 220 (broker -> consumer).
    ResetOffsetRequestHeader + rpc {
        group: String = "group";
        topic: String = "topic";
        /// -1 = all queues.
        queue_id: i32 = "queueId" or -1;
        /// Absent or -1: use `timestamp`.
        offset: Option<i64> = "offset";
        timestamp: i64 = "timestamp";
        is_force: bool = "isForce";
    }
}

command_header! {
    /// `QueryConsumeTimeSpanRequestHeader` (code 303).
    QueryConsumeTimeSpanRequestHeader + rpc {
        topic: String = "topic";
        group: String = "group";
    }
}

command_header! {
    /// `QueryConsumeQueueRequestHeader` (code 321).
    QueryConsumeQueueRequestHeader + rpc {
        topic: Option<String> = "topic";
        queue_id: i32 = "queueId" or 0;
        index: i64 = "index" or 0;
        count: i32 = "count" or 0;
        consumer_group: Option<String> = "consumerGroup";
    }
}

command_header! {
    /// `QueryCorrectionOffsetHeader` (code 308).
    QueryCorrectionOffsetHeader + rpc {
        /// Groups joined by `,`.
        filter_groups: Option<String> = "filterGroups";
        compare_group: String = "compareGroup";
        topic: String = "topic";
    }
}

command_header! {
    /// `CloneGroupOffsetRequestHeader` (code 314).
    CloneGroupOffsetRequestHeader + rpc {
        src_group: String = "srcGroup";
        dest_group: String = "destGroup";
        topic: Option<String> = "topic";
        offline: bool = "offline" or false;
    }
}

command_header! {
    /// `ViewBrokerStatsDataRequestHeader` (code 315).
    ViewBrokerStatsDataRequestHeader {
        stats_name: String = "statsName";
        stats_key: String = "statsKey";
    }
}

command_header! {
    /// `GetConsumeStatsInBrokerHeader` (code 317).
    GetConsumeStatsInBrokerHeader {
        /// Only groups that consume orderly; absent means all groups.
        is_order: bool = "isOrder" or false;
    }
}

command_header! {
    /// `UpdateGroupForbiddenRequestHeader` (code 353).
    UpdateGroupForbiddenRequestHeader + rpc {
        group: String = "group";
        topic: String = "topic";
        readable: Option<bool> = "readable";
    }
}

command_header! {
    /// `ResumeCheckHalfMessageRequestHeader` (code 323).
    ResumeCheckHalfMessageRequestHeader {
        topic: Option<String> = "topic";
        msg_id: Option<String> = "msgId";
    }
}

command_header! {
    /// `InitConsumerOffsetRequestHeader` (broker-internal consumer-offset initialisation).
    InitConsumerOffsetRequestHeader + rpc {
        topic: Option<String> = "topic";
        init_mode: i32 = "initMode" or 0;
    }
}

command_header! {
    /// `ExchangeHAInfoRequestHeader` (code 906, master <-> slave).
    ExchangeHaInfoRequestHeader {
        master_ha_address: Option<String> = "masterHaAddress";
        master_flush_offset: Option<i64> = "masterFlushOffset";
        master_address: Option<String> = "masterAddress";
    }
}

command_header! {
    /// `ExchangeHAInfoResponseHeader`.
    ExchangeHaInfoResponseHeader {
        master_ha_address: Option<String> = "masterHaAddress";
        master_flush_offset: Option<i64> = "masterFlushOffset";
        master_address: Option<String> = "masterAddress";
    }
}

command_header! {
    /// `NotifyMinBrokerIdChangeRequestHeader` (code 905).
    NotifyMinBrokerIdChangeRequestHeader {
        min_broker_id: Option<i64> = "minBrokerId";
        broker_name: Option<String> = "brokerName";
        min_broker_addr: Option<String> = "minBrokerAddr";
        offline_broker_addr: Option<String> = "offlineBrokerAddr";
        ha_broker_addr: Option<String> = "haBrokerAddr";
    }
}

command_header! {
    /// `ResetMasterFlushOffsetHeader` (code 908).
    ResetMasterFlushOffsetHeader {
        master_flush_offset: i64 = "masterFlushOffset";
    }
}

command_header! {
    /// `AddBrokerRequestHeader` (code 902, broker container).
    AddBrokerRequestHeader {
        config_path: Option<String> = "configPath";
    }
}

command_header! {
    /// `RemoveBrokerRequestHeader` (code 903, broker container).
    RemoveBrokerRequestHeader {
        broker_name: String = "brokerName";
        broker_cluster_name: String = "brokerClusterName";
        broker_id: i64 = "brokerId";
    }
}

command_header! {
    /// `CheckRocksdbCqWriteProgressRequestHeader` (code 354).
    CheckRocksdbCqWriteProgressRequestHeader {
        topic: String = "topic";
        check_store_time: i64 = "checkStoreTime" or 0;
    }
}

command_header! {
    /// `ExportRocksDBConfigToJsonRequestHeader` (code 355).
    ExportRocksDbConfigToJsonRequestHeader {
        config_type: String = "configType";
    }
}

command_header! {
    /// `CreateAccessConfigRequestHeader` (code 50, plain ACL). The permission lists are
    /// comma-joined; an absent field leaves the account's value as it is.
    CreateAccessConfigRequestHeader {
        access_key: String = "accessKey";
        secret_key: Option<String> = "secretKey";
        white_remote_address: Option<String> = "whiteRemoteAddress";
        admin: Option<bool> = "admin";
        default_topic_perm: Option<String> = "defaultTopicPerm";
        default_group_perm: Option<String> = "defaultGroupPerm";
        topic_perms: Option<String> = "topicPerms";
        group_perms: Option<String> = "groupPerms";
    }
}

command_header! {
    /// `DeleteAccessConfigRequestHeader` (code 51).
    DeleteAccessConfigRequestHeader {
        access_key: String = "accessKey";
    }
}

command_header! {
    /// `UpdateGlobalWhiteAddrsConfigRequestHeader` (code 53). Upstream marks the file path
    /// required but treats an empty one as the default file; ringmq accepts it absent too.
    UpdateGlobalWhiteAddrsConfigRequestHeader {
        /// Comma-joined address patterns.
        global_white_addrs: String = "globalWhiteAddrs";
        acl_file_full_path: Option<String> = "aclFileFullPath";
    }
}

command_header! {
    /// `GetBrokerAclConfigResponseHeader` (code 52's answer).
    GetBrokerAclConfigResponseHeader {
        /// The default ACL file's DataVersion JSON.
        version: String = "version";
        /// JSON map of every ACL file's path to its DataVersion.
        all_acl_file_version: Option<String> = "allAclFileVersion";
        broker_name: Option<String> = "brokerName";
        broker_addr: Option<String> = "brokerAddr";
        cluster_name: String = "clusterName";
    }
}
