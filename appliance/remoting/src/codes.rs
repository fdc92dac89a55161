//! Every request, response and language code of the Remoting protocol (`remoting.md`
//! §8, §10, §11), generated from the spec tables. Commands keep their code as a plain
//! `i32`, so an unknown code survives decode and gets `REQUEST_CODE_NOT_SUPPORTED`
//! from the server rather than a decode error.

/// The sender's implementation language (`LanguageCode.java`). JSON headers carry the
/// name, binary headers the number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LanguageCode {
    #[default]
    Java,
    Cpp,
    Dotnet,
    Python,
    Delphi,
    Erlang,
    Ruby,
    Other,
    Http,
    Go,
    Php,
    Oms,
    Rust,
    NodeJs,
}

const LANGUAGES: [(LanguageCode, &str, u8); 14] = [
    (LanguageCode::Java, "JAVA", 0),
    (LanguageCode::Cpp, "CPP", 1),
    (LanguageCode::Dotnet, "DOTNET", 2),
    (LanguageCode::Python, "PYTHON", 3),
    (LanguageCode::Delphi, "DELPHI", 4),
    (LanguageCode::Erlang, "ERLANG", 5),
    (LanguageCode::Ruby, "RUBY", 6),
    (LanguageCode::Other, "OTHER", 7),
    (LanguageCode::Http, "HTTP", 8),
    (LanguageCode::Go, "GO", 9),
    (LanguageCode::Php, "PHP", 10),
    (LanguageCode::Oms, "OMS", 11),
    (LanguageCode::Rust, "RUST", 12),
    (LanguageCode::NodeJs, "NODE_JS", 13),
];

impl LanguageCode {
    /// The JSON-header name; unknown names decode as [`LanguageCode::Other`].
    pub fn name(self) -> &'static str {
        LANGUAGES[self as usize].1
    }

    pub fn code(self) -> u8 {
        LANGUAGES[self as usize].2
    }

    pub fn from_name(name: &str) -> Self {
        LANGUAGES
            .iter()
            .find(|(_, n, _)| *n == name)
            .map_or(LanguageCode::Other, |l| l.0)
    }

    pub fn from_code(code: u8) -> Self {
        LANGUAGES
            .get(code as usize)
            .map_or(LanguageCode::Other, |l| l.0)
    }
}

/// Request codes (`RequestCode.java`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum RequestCode {
    /// `PUT_KV_CONFIG`
    PutKvConfig = 100,
    /// `GET_KV_CONFIG`
    GetKvConfig = 101,
    /// `DELETE_KV_CONFIG`
    DeleteKvConfig = 102,
    /// `REGISTER_BROKER`
    RegisterBroker = 103,
    /// `UNREGISTER_BROKER`
    UnregisterBroker = 104,
    /// `GET_ROUTEINFO_BY_TOPIC`
    GetRouteinfoByTopic = 105,
    /// `GET_BROKER_CLUSTER_INFO`
    GetBrokerClusterInfo = 106,
    /// `WIPE_WRITE_PERM_OF_BROKER`
    WipeWritePermOfBroker = 205,
    /// `GET_ALL_TOPIC_LIST_FROM_NAMESERVER`
    GetAllTopicListFromNameserver = 206,
    /// `DELETE_TOPIC_IN_NAMESRV`
    DeleteTopicInNamesrv = 216,
    /// `REGISTER_TOPIC_IN_NAMESRV`
    RegisterTopicInNamesrv = 217,
    /// `GET_KVLIST_BY_NAMESPACE`
    GetKvlistByNamespace = 219,
    /// `GET_TOPICS_BY_CLUSTER`
    GetTopicsByCluster = 224,
    /// `GET_SYSTEM_TOPIC_LIST_FROM_NS`
    GetSystemTopicListFromNs = 304,
    /// `GET_UNIT_TOPIC_LIST`
    GetUnitTopicList = 311,
    /// `GET_HAS_UNIT_SUB_TOPIC_LIST`
    GetHasUnitSubTopicList = 312,
    /// `GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST`
    GetHasUnitSubUnunitTopicList = 313,
    /// `UPDATE_NAMESRV_CONFIG`
    UpdateNamesrvConfig = 318,
    /// `GET_NAMESRV_CONFIG`
    GetNamesrvConfig = 319,
    /// `QUERY_DATA_VERSION`
    QueryDataVersion = 322,
    /// `ADD_WRITE_PERM_OF_BROKER`
    AddWritePermOfBroker = 327,
    /// `GET_BROKER_MEMBER_GROUP`
    GetBrokerMemberGroup = 901,
    /// `BROKER_HEARTBEAT`
    BrokerHeartbeat = 904,
    /// `SEND_MESSAGE`
    SendMessage = 10,
    /// `SEND_MESSAGE_V2`
    SendMessageV2 = 310,
    /// `SEND_BATCH_MESSAGE`
    SendBatchMessage = 320,
    /// `SEND_REPLY_MESSAGE`
    SendReplyMessage = 324,
    /// `SEND_REPLY_MESSAGE_V2`
    SendReplyMessageV2 = 325,
    /// `RECALL_MESSAGE`
    RecallMessage = 370,
    /// `PULL_MESSAGE`
    PullMessage = 11,
    /// `QUERY_CONSUMER_OFFSET`
    QueryConsumerOffset = 14,
    /// `UPDATE_CONSUMER_OFFSET`
    UpdateConsumerOffset = 15,
    /// `SEARCH_OFFSET_BY_TIMESTAMP`
    SearchOffsetByTimestamp = 29,
    /// `GET_MAX_OFFSET`
    GetMaxOffset = 30,
    /// `GET_MIN_OFFSET`
    GetMinOffset = 31,
    /// `GET_EARLIEST_MSG_STORETIME`
    GetEarliestMsgStoretime = 32,
    /// `CONSUMER_SEND_MSG_BACK`
    ConsumerSendMsgBack = 36,
    /// `GET_CONSUMER_LIST_BY_GROUP`
    GetConsumerListByGroup = 38,
    /// `LOCK_BATCH_MQ`
    LockBatchMq = 41,
    /// `UNLOCK_BATCH_MQ`
    UnlockBatchMq = 42,
    /// `LITE_PULL_MESSAGE`
    LitePullMessage = 361,
    /// `QUERY_ASSIGNMENT`
    QueryAssignment = 400,
    /// `SET_MESSAGE_REQUEST_MODE`
    SetMessageRequestMode = 401,
    /// `GET_ALL_MESSAGE_REQUEST_MODE`
    GetAllMessageRequestMode = 402,
    /// `HEART_BEAT`
    HeartBeat = 34,
    /// `UNREGISTER_CLIENT`
    UnregisterClient = 35,
    /// `CHECK_CLIENT_CONFIG`
    CheckClientConfig = 46,
    /// `GET_CLIENT_CONFIG`
    GetClientConfig = 47,
    /// `END_TRANSACTION`
    EndTransaction = 37,
    /// `CHECK_TRANSACTION_STATE`
    CheckTransactionState = 39,
    /// `RESUME_CHECK_HALF_MESSAGE`
    ResumeCheckHalfMessage = 323,
    /// `NOTIFY_CONSUMER_IDS_CHANGED`
    NotifyConsumerIdsChanged = 40,
    /// `RESET_CONSUMER_CLIENT_OFFSET`
    ResetConsumerClientOffset = 220,
    /// `GET_CONSUMER_STATUS_FROM_CLIENT`
    GetConsumerStatusFromClient = 221,
    /// `GET_CONSUMER_RUNNING_INFO`
    GetConsumerRunningInfo = 307,
    /// `CONSUME_MESSAGE_DIRECTLY`
    ConsumeMessageDirectly = 309,
    /// `PUSH_REPLY_MESSAGE_TO_CLIENT`
    PushReplyMessageToClient = 326,
    /// `QUERY_MESSAGE`
    QueryMessage = 12,
    /// `VIEW_MESSAGE_BY_ID`
    ViewMessageById = 33,
    /// `QUERY_CONSUME_QUEUE`
    QueryConsumeQueue = 321,
    /// `UPDATE_AND_CREATE_TOPIC`
    UpdateAndCreateTopic = 17,
    /// `UPDATE_AND_CREATE_TOPIC_LIST`
    UpdateAndCreateTopicList = 18,
    /// `UPDATE_AND_CREATE_ACL_CONFIG` (plain ACL; upstream dropped it in 5.3 with ACL 1.0)
    UpdateAndCreateAclConfig = 50,
    /// `DELETE_ACL_CONFIG`
    DeleteAclConfig = 51,
    /// `GET_BROKER_CLUSTER_ACL_INFO`
    GetBrokerClusterAclInfo = 52,
    /// `UPDATE_GLOBAL_WHITE_ADDRS_CONFIG`
    UpdateGlobalWhiteAddrsConfig = 53,
    /// `GET_BROKER_CLUSTER_ACL_CONFIG`
    GetBrokerClusterAclConfig = 54,
    /// `GET_ALL_TOPIC_CONFIG`
    GetAllTopicConfig = 21,
    /// `GET_TOPIC_CONFIG_LIST`
    GetTopicConfigList = 22,
    /// `GET_TOPIC_NAME_LIST`
    GetTopicNameList = 23,
    /// `UPDATE_AND_CREATE_SUBSCRIPTIONGROUP`
    UpdateAndCreateSubscriptiongroup = 200,
    /// `GET_ALL_SUBSCRIPTIONGROUP_CONFIG`
    GetAllSubscriptiongroupConfig = 201,
    /// `GET_CONSUMER_CONNECTION_LIST`
    GetConsumerConnectionList = 203,
    /// `GET_PRODUCER_CONNECTION_LIST`
    GetProducerConnectionList = 204,
    /// `DELETE_SUBSCRIPTIONGROUP`
    DeleteSubscriptiongroup = 207,
    /// `DELETE_TOPIC_IN_BROKER`
    DeleteTopicInBroker = 215,
    /// `INVOKE_BROKER_TO_RESET_OFFSET`
    InvokeBrokerToResetOffset = 222,
    /// `INVOKE_BROKER_TO_GET_CONSUMER_STATUS`
    InvokeBrokerToGetConsumerStatus = 223,
    /// `UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST`
    UpdateAndCreateSubscriptiongroupList = 225,
    /// `QUERY_TOPIC_CONSUME_BY_WHO`
    QueryTopicConsumeByWho = 300,
    /// `QUERY_CONSUME_TIME_SPAN`
    QueryConsumeTimeSpan = 303,
    /// `GET_SYSTEM_TOPIC_LIST_FROM_BROKER`
    GetSystemTopicListFromBroker = 305,
    /// `QUERY_CORRECTION_OFFSET`
    QueryCorrectionOffset = 308,
    /// `CLONE_GROUP_OFFSET`
    CloneGroupOffset = 314,
    /// `CLEAN_UNUSED_TOPIC`
    CleanUnusedTopic = 316,
    /// `GET_ALL_PRODUCER_INFO`
    GetAllProducerInfo = 328,
    /// `QUERY_TOPICS_BY_CONSUMER`
    QueryTopicsByConsumer = 343,
    /// `QUERY_SUBSCRIPTION_BY_CONSUMER`
    QuerySubscriptionByConsumer = 345,
    /// `GET_TOPIC_CONFIG`
    GetTopicConfig = 351,
    /// `GET_SUBSCRIPTIONGROUP_CONFIG`
    GetSubscriptiongroupConfig = 352,
    /// `UPDATE_AND_GET_GROUP_FORBIDDEN`
    UpdateAndGetGroupForbidden = 353,
    /// `QUERY_BROKER_OFFSET`
    QueryBrokerOffset = 13,
    /// `UPDATE_BROKER_CONFIG`
    UpdateBrokerConfig = 25,
    /// `GET_BROKER_CONFIG`
    GetBrokerConfig = 26,
    /// `TRIGGER_DELETE_FILES`
    TriggerDeleteFiles = 27,
    /// `GET_BROKER_RUNTIME_INFO`
    GetBrokerRuntimeInfo = 28,
    /// `GET_ALL_CONSUMER_OFFSET`
    GetAllConsumerOffset = 43,
    /// `GET_ALL_DELAY_OFFSET`
    GetAllDelayOffset = 45,
    /// `GET_TIMER_CHECK_POINT`
    GetTimerCheckPoint = 60,
    /// `GET_TIMER_METRICS`
    GetTimerMetrics = 61,
    /// `GET_TOPIC_STATS_INFO`
    GetTopicStatsInfo = 202,
    /// `GET_CONSUME_STATS`
    GetConsumeStats = 208,
    /// `CLEAN_EXPIRED_CONSUMEQUEUE`
    CleanExpiredConsumequeue = 306,
    /// `VIEW_BROKER_STATS_DATA`
    ViewBrokerStatsData = 315,
    /// `GET_BROKER_CONSUME_STATS`
    GetBrokerConsumeStats = 317,
    /// `DELETE_EXPIRED_COMMITLOG`
    DeleteExpiredCommitlog = 329,
    /// `CHECK_ROCKSDB_CQ_WRITE_PROGRESS`
    CheckRocksdbCqWriteProgress = 354,
    /// `EXPORT_ROCKSDB_CONFIG_TO_JSON`
    ExportRocksdbConfigToJson = 355,
    /// `UPDATE_COLD_DATA_FLOW_CTR_CONFIG`
    UpdateColdDataFlowCtrConfig = 2001,
    /// `REMOVE_COLD_DATA_FLOW_CTR_CONFIG`
    RemoveColdDataFlowCtrConfig = 2002,
    /// `GET_COLD_DATA_FLOW_CTR_INFO`
    GetColdDataFlowCtrInfo = 2003,
    /// `SET_COMMITLOG_READ_MODE`
    SetCommitlogReadMode = 2004,
    /// `POP_MESSAGE`
    PopMessage = 200050,
    /// `ACK_MESSAGE`
    AckMessage = 200051,
    /// `PEEK_MESSAGE`
    PeekMessage = 200052,
    /// `CHANGE_MESSAGE_INVISIBLETIME`
    ChangeMessageInvisibletime = 200053,
    /// `NOTIFICATION`
    Notification = 200054,
    /// `POLLING_INFO`
    PollingInfo = 200055,
    /// `POP_ROLLBACK`
    PopRollback = 200056,
    /// `BATCH_ACK_MESSAGE`
    BatchAckMessage = 200151,
    /// `UPDATE_AND_CREATE_STATIC_TOPIC`
    UpdateAndCreateStaticTopic = 513,
    /// `ADD_BROKER`
    AddBroker = 902,
    /// `REMOVE_BROKER`
    RemoveBroker = 903,
    /// `NOTIFY_MIN_BROKER_ID_CHANGE`
    NotifyMinBrokerIdChange = 905,
    /// `EXCHANGE_BROKER_HA_INFO`
    ExchangeBrokerHaInfo = 906,
    /// `GET_BROKER_HA_STATUS`
    GetBrokerHaStatus = 907,
    /// `RESET_MASTER_FLUSH_OFFSET`
    ResetMasterFlushOffset = 908,
    /// `CONTROLLER_ALTER_SYNC_STATE_SET`
    ControllerAlterSyncStateSet = 1001,
    /// `CONTROLLER_ELECT_MASTER`
    ControllerElectMaster = 1002,
    /// `CONTROLLER_REGISTER_BROKER`
    ControllerRegisterBroker = 1003,
    /// `CONTROLLER_GET_REPLICA_INFO`
    ControllerGetReplicaInfo = 1004,
    /// `CONTROLLER_GET_METADATA_INFO`
    ControllerGetMetadataInfo = 1005,
    /// `CONTROLLER_GET_SYNC_STATE_DATA`
    ControllerGetSyncStateData = 1006,
    /// `GET_BROKER_EPOCH_CACHE`
    GetBrokerEpochCache = 1007,
    /// `NOTIFY_BROKER_ROLE_CHANGED`
    NotifyBrokerRoleChanged = 1008,
    /// `UPDATE_CONTROLLER_CONFIG`
    UpdateControllerConfig = 1009,
    /// `GET_CONTROLLER_CONFIG`
    GetControllerConfig = 1010,
    /// `CLEAN_BROKER_DATA`
    CleanBrokerData = 1011,
    /// `CONTROLLER_GET_NEXT_BROKER_ID`
    ControllerGetNextBrokerId = 1012,
    /// `CONTROLLER_APPLY_BROKER_ID`
    ControllerApplyBrokerId = 1013,
    /// `BROKER_CLOSE_CHANNEL_REQUEST`
    BrokerCloseChannelRequest = 1014,
    /// `CHECK_NOT_ACTIVE_BROKER_REQUEST`
    CheckNotActiveBrokerRequest = 1015,
    /// `GET_BROKER_LIVE_INFO_REQUEST`
    GetBrokerLiveInfoRequest = 1016,
    /// `GET_SYNC_STATE_DATA_REQUEST`
    GetSyncStateDataRequest = 1017,
    /// `RAFT_BROKER_HEART_BEAT_EVENT_REQUEST`
    RaftBrokerHeartBeatEventRequest = 1018,
    /// `AUTH_CREATE_USER`
    AuthCreateUser = 3001,
    /// `AUTH_UPDATE_USER`
    AuthUpdateUser = 3002,
    /// `AUTH_DELETE_USER`
    AuthDeleteUser = 3003,
    /// `AUTH_GET_USER`
    AuthGetUser = 3004,
    /// `AUTH_LIST_USER`
    AuthListUser = 3005,
    /// `AUTH_CREATE_ACL`
    AuthCreateAcl = 3006,
    /// `AUTH_UPDATE_ACL`
    AuthUpdateAcl = 3007,
    /// `AUTH_DELETE_ACL`
    AuthDeleteAcl = 3008,
    /// `AUTH_GET_ACL`
    AuthGetAcl = 3009,
    /// `AUTH_LIST_ACL`
    AuthListAcl = 3010,
    /// `SUSPEND_CONSUMER`
    SuspendConsumer = 209,
    /// `RESUME_CONSUMER`
    ResumeConsumer = 210,
    /// `RESET_CONSUMER_OFFSET_IN_CONSUMER`
    ResetConsumerOffsetInConsumer = 211,
    /// `RESET_CONSUMER_OFFSET_IN_BROKER`
    ResetConsumerOffsetInBroker = 212,
    /// `ADJUST_CONSUMER_THREAD_POOL`
    AdjustConsumerThreadPool = 213,
    /// `WHO_CONSUME_THE_MESSAGE`
    WhoConsumeTheMessage = 214,
    /// `REGISTER_FILTER_SERVER`
    RegisterFilterServer = 301,
    /// `REGISTER_MESSAGE_FILTER_CLASS`
    RegisterMessageFilterClass = 302,
}

impl RequestCode {
    /// The code's number on the wire.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The known code with this number; `None` keeps unknown codes as plain numbers.
    pub fn from_code(code: i32) -> Option<Self> {
        Some(match code {
            100 => Self::PutKvConfig,
            101 => Self::GetKvConfig,
            102 => Self::DeleteKvConfig,
            103 => Self::RegisterBroker,
            104 => Self::UnregisterBroker,
            105 => Self::GetRouteinfoByTopic,
            106 => Self::GetBrokerClusterInfo,
            205 => Self::WipeWritePermOfBroker,
            206 => Self::GetAllTopicListFromNameserver,
            216 => Self::DeleteTopicInNamesrv,
            217 => Self::RegisterTopicInNamesrv,
            219 => Self::GetKvlistByNamespace,
            224 => Self::GetTopicsByCluster,
            304 => Self::GetSystemTopicListFromNs,
            311 => Self::GetUnitTopicList,
            312 => Self::GetHasUnitSubTopicList,
            313 => Self::GetHasUnitSubUnunitTopicList,
            318 => Self::UpdateNamesrvConfig,
            319 => Self::GetNamesrvConfig,
            322 => Self::QueryDataVersion,
            327 => Self::AddWritePermOfBroker,
            901 => Self::GetBrokerMemberGroup,
            904 => Self::BrokerHeartbeat,
            10 => Self::SendMessage,
            310 => Self::SendMessageV2,
            320 => Self::SendBatchMessage,
            324 => Self::SendReplyMessage,
            325 => Self::SendReplyMessageV2,
            370 => Self::RecallMessage,
            11 => Self::PullMessage,
            14 => Self::QueryConsumerOffset,
            15 => Self::UpdateConsumerOffset,
            29 => Self::SearchOffsetByTimestamp,
            30 => Self::GetMaxOffset,
            31 => Self::GetMinOffset,
            32 => Self::GetEarliestMsgStoretime,
            36 => Self::ConsumerSendMsgBack,
            38 => Self::GetConsumerListByGroup,
            41 => Self::LockBatchMq,
            42 => Self::UnlockBatchMq,
            361 => Self::LitePullMessage,
            400 => Self::QueryAssignment,
            401 => Self::SetMessageRequestMode,
            402 => Self::GetAllMessageRequestMode,
            34 => Self::HeartBeat,
            35 => Self::UnregisterClient,
            46 => Self::CheckClientConfig,
            47 => Self::GetClientConfig,
            37 => Self::EndTransaction,
            39 => Self::CheckTransactionState,
            323 => Self::ResumeCheckHalfMessage,
            40 => Self::NotifyConsumerIdsChanged,
            220 => Self::ResetConsumerClientOffset,
            221 => Self::GetConsumerStatusFromClient,
            307 => Self::GetConsumerRunningInfo,
            309 => Self::ConsumeMessageDirectly,
            326 => Self::PushReplyMessageToClient,
            12 => Self::QueryMessage,
            33 => Self::ViewMessageById,
            321 => Self::QueryConsumeQueue,
            17 => Self::UpdateAndCreateTopic,
            18 => Self::UpdateAndCreateTopicList,
            50 => Self::UpdateAndCreateAclConfig,
            51 => Self::DeleteAclConfig,
            52 => Self::GetBrokerClusterAclInfo,
            53 => Self::UpdateGlobalWhiteAddrsConfig,
            54 => Self::GetBrokerClusterAclConfig,
            21 => Self::GetAllTopicConfig,
            22 => Self::GetTopicConfigList,
            23 => Self::GetTopicNameList,
            200 => Self::UpdateAndCreateSubscriptiongroup,
            201 => Self::GetAllSubscriptiongroupConfig,
            203 => Self::GetConsumerConnectionList,
            204 => Self::GetProducerConnectionList,
            207 => Self::DeleteSubscriptiongroup,
            215 => Self::DeleteTopicInBroker,
            222 => Self::InvokeBrokerToResetOffset,
            223 => Self::InvokeBrokerToGetConsumerStatus,
            225 => Self::UpdateAndCreateSubscriptiongroupList,
            300 => Self::QueryTopicConsumeByWho,
            303 => Self::QueryConsumeTimeSpan,
            305 => Self::GetSystemTopicListFromBroker,
            308 => Self::QueryCorrectionOffset,
            314 => Self::CloneGroupOffset,
            316 => Self::CleanUnusedTopic,
            328 => Self::GetAllProducerInfo,
            343 => Self::QueryTopicsByConsumer,
            345 => Self::QuerySubscriptionByConsumer,
            351 => Self::GetTopicConfig,
            352 => Self::GetSubscriptiongroupConfig,
            353 => Self::UpdateAndGetGroupForbidden,
            13 => Self::QueryBrokerOffset,
            25 => Self::UpdateBrokerConfig,
            26 => Self::GetBrokerConfig,
            27 => Self::TriggerDeleteFiles,
            28 => Self::GetBrokerRuntimeInfo,
            43 => Self::GetAllConsumerOffset,
            45 => Self::GetAllDelayOffset,
            60 => Self::GetTimerCheckPoint,
            61 => Self::GetTimerMetrics,
            202 => Self::GetTopicStatsInfo,
            208 => Self::GetConsumeStats,
            306 => Self::CleanExpiredConsumequeue,
            315 => Self::ViewBrokerStatsData,
            317 => Self::GetBrokerConsumeStats,
            329 => Self::DeleteExpiredCommitlog,
            354 => Self::CheckRocksdbCqWriteProgress,
            355 => Self::ExportRocksdbConfigToJson,
            2001 => Self::UpdateColdDataFlowCtrConfig,
            2002 => Self::RemoveColdDataFlowCtrConfig,
            2003 => Self::GetColdDataFlowCtrInfo,
            2004 => Self::SetCommitlogReadMode,
            200050 => Self::PopMessage,
            200051 => Self::AckMessage,
            200052 => Self::PeekMessage,
            200053 => Self::ChangeMessageInvisibletime,
            200054 => Self::Notification,
            200055 => Self::PollingInfo,
            200056 => Self::PopRollback,
            200151 => Self::BatchAckMessage,
            513 => Self::UpdateAndCreateStaticTopic,
            902 => Self::AddBroker,
            903 => Self::RemoveBroker,
            905 => Self::NotifyMinBrokerIdChange,
            906 => Self::ExchangeBrokerHaInfo,
            907 => Self::GetBrokerHaStatus,
            908 => Self::ResetMasterFlushOffset,
            1001 => Self::ControllerAlterSyncStateSet,
            1002 => Self::ControllerElectMaster,
            1003 => Self::ControllerRegisterBroker,
            1004 => Self::ControllerGetReplicaInfo,
            1005 => Self::ControllerGetMetadataInfo,
            1006 => Self::ControllerGetSyncStateData,
            1007 => Self::GetBrokerEpochCache,
            1008 => Self::NotifyBrokerRoleChanged,
            1009 => Self::UpdateControllerConfig,
            1010 => Self::GetControllerConfig,
            1011 => Self::CleanBrokerData,
            1012 => Self::ControllerGetNextBrokerId,
            1013 => Self::ControllerApplyBrokerId,
            1014 => Self::BrokerCloseChannelRequest,
            1015 => Self::CheckNotActiveBrokerRequest,
            1016 => Self::GetBrokerLiveInfoRequest,
            1017 => Self::GetSyncStateDataRequest,
            1018 => Self::RaftBrokerHeartBeatEventRequest,
            3001 => Self::AuthCreateUser,
            3002 => Self::AuthUpdateUser,
            3003 => Self::AuthDeleteUser,
            3004 => Self::AuthGetUser,
            3005 => Self::AuthListUser,
            3006 => Self::AuthCreateAcl,
            3007 => Self::AuthUpdateAcl,
            3008 => Self::AuthDeleteAcl,
            3009 => Self::AuthGetAcl,
            3010 => Self::AuthListAcl,
            209 => Self::SuspendConsumer,
            210 => Self::ResumeConsumer,
            211 => Self::ResetConsumerOffsetInConsumer,
            212 => Self::ResetConsumerOffsetInBroker,
            213 => Self::AdjustConsumerThreadPool,
            214 => Self::WhoConsumeTheMessage,
            301 => Self::RegisterFilterServer,
            302 => Self::RegisterMessageFilterClass,
            _ => return None,
        })
    }

    /// RocketMQ's constant name, as upstream spells it (for logs and admin output).
    pub fn name(self) -> &'static str {
        match self {
            Self::PutKvConfig => "PUT_KV_CONFIG",
            Self::GetKvConfig => "GET_KV_CONFIG",
            Self::DeleteKvConfig => "DELETE_KV_CONFIG",
            Self::RegisterBroker => "REGISTER_BROKER",
            Self::UnregisterBroker => "UNREGISTER_BROKER",
            Self::GetRouteinfoByTopic => "GET_ROUTEINFO_BY_TOPIC",
            Self::GetBrokerClusterInfo => "GET_BROKER_CLUSTER_INFO",
            Self::WipeWritePermOfBroker => "WIPE_WRITE_PERM_OF_BROKER",
            Self::GetAllTopicListFromNameserver => "GET_ALL_TOPIC_LIST_FROM_NAMESERVER",
            Self::DeleteTopicInNamesrv => "DELETE_TOPIC_IN_NAMESRV",
            Self::RegisterTopicInNamesrv => "REGISTER_TOPIC_IN_NAMESRV",
            Self::GetKvlistByNamespace => "GET_KVLIST_BY_NAMESPACE",
            Self::GetTopicsByCluster => "GET_TOPICS_BY_CLUSTER",
            Self::GetSystemTopicListFromNs => "GET_SYSTEM_TOPIC_LIST_FROM_NS",
            Self::GetUnitTopicList => "GET_UNIT_TOPIC_LIST",
            Self::GetHasUnitSubTopicList => "GET_HAS_UNIT_SUB_TOPIC_LIST",
            Self::GetHasUnitSubUnunitTopicList => "GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST",
            Self::UpdateNamesrvConfig => "UPDATE_NAMESRV_CONFIG",
            Self::GetNamesrvConfig => "GET_NAMESRV_CONFIG",
            Self::QueryDataVersion => "QUERY_DATA_VERSION",
            Self::AddWritePermOfBroker => "ADD_WRITE_PERM_OF_BROKER",
            Self::GetBrokerMemberGroup => "GET_BROKER_MEMBER_GROUP",
            Self::BrokerHeartbeat => "BROKER_HEARTBEAT",
            Self::SendMessage => "SEND_MESSAGE",
            Self::SendMessageV2 => "SEND_MESSAGE_V2",
            Self::SendBatchMessage => "SEND_BATCH_MESSAGE",
            Self::SendReplyMessage => "SEND_REPLY_MESSAGE",
            Self::SendReplyMessageV2 => "SEND_REPLY_MESSAGE_V2",
            Self::RecallMessage => "RECALL_MESSAGE",
            Self::PullMessage => "PULL_MESSAGE",
            Self::QueryConsumerOffset => "QUERY_CONSUMER_OFFSET",
            Self::UpdateConsumerOffset => "UPDATE_CONSUMER_OFFSET",
            Self::SearchOffsetByTimestamp => "SEARCH_OFFSET_BY_TIMESTAMP",
            Self::GetMaxOffset => "GET_MAX_OFFSET",
            Self::GetMinOffset => "GET_MIN_OFFSET",
            Self::GetEarliestMsgStoretime => "GET_EARLIEST_MSG_STORETIME",
            Self::ConsumerSendMsgBack => "CONSUMER_SEND_MSG_BACK",
            Self::GetConsumerListByGroup => "GET_CONSUMER_LIST_BY_GROUP",
            Self::LockBatchMq => "LOCK_BATCH_MQ",
            Self::UnlockBatchMq => "UNLOCK_BATCH_MQ",
            Self::LitePullMessage => "LITE_PULL_MESSAGE",
            Self::QueryAssignment => "QUERY_ASSIGNMENT",
            Self::SetMessageRequestMode => "SET_MESSAGE_REQUEST_MODE",
            Self::GetAllMessageRequestMode => "GET_ALL_MESSAGE_REQUEST_MODE",
            Self::HeartBeat => "HEART_BEAT",
            Self::UnregisterClient => "UNREGISTER_CLIENT",
            Self::CheckClientConfig => "CHECK_CLIENT_CONFIG",
            Self::GetClientConfig => "GET_CLIENT_CONFIG",
            Self::EndTransaction => "END_TRANSACTION",
            Self::CheckTransactionState => "CHECK_TRANSACTION_STATE",
            Self::ResumeCheckHalfMessage => "RESUME_CHECK_HALF_MESSAGE",
            Self::NotifyConsumerIdsChanged => "NOTIFY_CONSUMER_IDS_CHANGED",
            Self::ResetConsumerClientOffset => "RESET_CONSUMER_CLIENT_OFFSET",
            Self::GetConsumerStatusFromClient => "GET_CONSUMER_STATUS_FROM_CLIENT",
            Self::GetConsumerRunningInfo => "GET_CONSUMER_RUNNING_INFO",
            Self::ConsumeMessageDirectly => "CONSUME_MESSAGE_DIRECTLY",
            Self::PushReplyMessageToClient => "PUSH_REPLY_MESSAGE_TO_CLIENT",
            Self::QueryMessage => "QUERY_MESSAGE",
            Self::ViewMessageById => "VIEW_MESSAGE_BY_ID",
            Self::QueryConsumeQueue => "QUERY_CONSUME_QUEUE",
            Self::UpdateAndCreateTopic => "UPDATE_AND_CREATE_TOPIC",
            Self::UpdateAndCreateTopicList => "UPDATE_AND_CREATE_TOPIC_LIST",
            Self::UpdateAndCreateAclConfig => "UPDATE_AND_CREATE_ACL_CONFIG",
            Self::DeleteAclConfig => "DELETE_ACL_CONFIG",
            Self::GetBrokerClusterAclInfo => "GET_BROKER_CLUSTER_ACL_INFO",
            Self::UpdateGlobalWhiteAddrsConfig => "UPDATE_GLOBAL_WHITE_ADDRS_CONFIG",
            Self::GetBrokerClusterAclConfig => "GET_BROKER_CLUSTER_ACL_CONFIG",
            Self::GetAllTopicConfig => "GET_ALL_TOPIC_CONFIG",
            Self::GetTopicConfigList => "GET_TOPIC_CONFIG_LIST",
            Self::GetTopicNameList => "GET_TOPIC_NAME_LIST",
            Self::UpdateAndCreateSubscriptiongroup => "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP",
            Self::GetAllSubscriptiongroupConfig => "GET_ALL_SUBSCRIPTIONGROUP_CONFIG",
            Self::GetConsumerConnectionList => "GET_CONSUMER_CONNECTION_LIST",
            Self::GetProducerConnectionList => "GET_PRODUCER_CONNECTION_LIST",
            Self::DeleteSubscriptiongroup => "DELETE_SUBSCRIPTIONGROUP",
            Self::DeleteTopicInBroker => "DELETE_TOPIC_IN_BROKER",
            Self::InvokeBrokerToResetOffset => "INVOKE_BROKER_TO_RESET_OFFSET",
            Self::InvokeBrokerToGetConsumerStatus => "INVOKE_BROKER_TO_GET_CONSUMER_STATUS",
            Self::UpdateAndCreateSubscriptiongroupList => {
                "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST"
            }
            Self::QueryTopicConsumeByWho => "QUERY_TOPIC_CONSUME_BY_WHO",
            Self::QueryConsumeTimeSpan => "QUERY_CONSUME_TIME_SPAN",
            Self::GetSystemTopicListFromBroker => "GET_SYSTEM_TOPIC_LIST_FROM_BROKER",
            Self::QueryCorrectionOffset => "QUERY_CORRECTION_OFFSET",
            Self::CloneGroupOffset => "CLONE_GROUP_OFFSET",
            Self::CleanUnusedTopic => "CLEAN_UNUSED_TOPIC",
            Self::GetAllProducerInfo => "GET_ALL_PRODUCER_INFO",
            Self::QueryTopicsByConsumer => "QUERY_TOPICS_BY_CONSUMER",
            Self::QuerySubscriptionByConsumer => "QUERY_SUBSCRIPTION_BY_CONSUMER",
            Self::GetTopicConfig => "GET_TOPIC_CONFIG",
            Self::GetSubscriptiongroupConfig => "GET_SUBSCRIPTIONGROUP_CONFIG",
            Self::UpdateAndGetGroupForbidden => "UPDATE_AND_GET_GROUP_FORBIDDEN",
            Self::QueryBrokerOffset => "QUERY_BROKER_OFFSET",
            Self::UpdateBrokerConfig => "UPDATE_BROKER_CONFIG",
            Self::GetBrokerConfig => "GET_BROKER_CONFIG",
            Self::TriggerDeleteFiles => "TRIGGER_DELETE_FILES",
            Self::GetBrokerRuntimeInfo => "GET_BROKER_RUNTIME_INFO",
            Self::GetAllConsumerOffset => "GET_ALL_CONSUMER_OFFSET",
            Self::GetAllDelayOffset => "GET_ALL_DELAY_OFFSET",
            Self::GetTimerCheckPoint => "GET_TIMER_CHECK_POINT",
            Self::GetTimerMetrics => "GET_TIMER_METRICS",
            Self::GetTopicStatsInfo => "GET_TOPIC_STATS_INFO",
            Self::GetConsumeStats => "GET_CONSUME_STATS",
            Self::CleanExpiredConsumequeue => "CLEAN_EXPIRED_CONSUMEQUEUE",
            Self::ViewBrokerStatsData => "VIEW_BROKER_STATS_DATA",
            Self::GetBrokerConsumeStats => "GET_BROKER_CONSUME_STATS",
            Self::DeleteExpiredCommitlog => "DELETE_EXPIRED_COMMITLOG",
            Self::CheckRocksdbCqWriteProgress => "CHECK_ROCKSDB_CQ_WRITE_PROGRESS",
            Self::ExportRocksdbConfigToJson => "EXPORT_ROCKSDB_CONFIG_TO_JSON",
            Self::UpdateColdDataFlowCtrConfig => "UPDATE_COLD_DATA_FLOW_CTR_CONFIG",
            Self::RemoveColdDataFlowCtrConfig => "REMOVE_COLD_DATA_FLOW_CTR_CONFIG",
            Self::GetColdDataFlowCtrInfo => "GET_COLD_DATA_FLOW_CTR_INFO",
            Self::SetCommitlogReadMode => "SET_COMMITLOG_READ_MODE",
            Self::PopMessage => "POP_MESSAGE",
            Self::AckMessage => "ACK_MESSAGE",
            Self::PeekMessage => "PEEK_MESSAGE",
            Self::ChangeMessageInvisibletime => "CHANGE_MESSAGE_INVISIBLETIME",
            Self::Notification => "NOTIFICATION",
            Self::PollingInfo => "POLLING_INFO",
            Self::PopRollback => "POP_ROLLBACK",
            Self::BatchAckMessage => "BATCH_ACK_MESSAGE",
            Self::UpdateAndCreateStaticTopic => "UPDATE_AND_CREATE_STATIC_TOPIC",
            Self::AddBroker => "ADD_BROKER",
            Self::RemoveBroker => "REMOVE_BROKER",
            Self::NotifyMinBrokerIdChange => "NOTIFY_MIN_BROKER_ID_CHANGE",
            Self::ExchangeBrokerHaInfo => "EXCHANGE_BROKER_HA_INFO",
            Self::GetBrokerHaStatus => "GET_BROKER_HA_STATUS",
            Self::ResetMasterFlushOffset => "RESET_MASTER_FLUSH_OFFSET",
            Self::ControllerAlterSyncStateSet => "CONTROLLER_ALTER_SYNC_STATE_SET",
            Self::ControllerElectMaster => "CONTROLLER_ELECT_MASTER",
            Self::ControllerRegisterBroker => "CONTROLLER_REGISTER_BROKER",
            Self::ControllerGetReplicaInfo => "CONTROLLER_GET_REPLICA_INFO",
            Self::ControllerGetMetadataInfo => "CONTROLLER_GET_METADATA_INFO",
            Self::ControllerGetSyncStateData => "CONTROLLER_GET_SYNC_STATE_DATA",
            Self::GetBrokerEpochCache => "GET_BROKER_EPOCH_CACHE",
            Self::NotifyBrokerRoleChanged => "NOTIFY_BROKER_ROLE_CHANGED",
            Self::UpdateControllerConfig => "UPDATE_CONTROLLER_CONFIG",
            Self::GetControllerConfig => "GET_CONTROLLER_CONFIG",
            Self::CleanBrokerData => "CLEAN_BROKER_DATA",
            Self::ControllerGetNextBrokerId => "CONTROLLER_GET_NEXT_BROKER_ID",
            Self::ControllerApplyBrokerId => "CONTROLLER_APPLY_BROKER_ID",
            Self::BrokerCloseChannelRequest => "BROKER_CLOSE_CHANNEL_REQUEST",
            Self::CheckNotActiveBrokerRequest => "CHECK_NOT_ACTIVE_BROKER_REQUEST",
            Self::GetBrokerLiveInfoRequest => "GET_BROKER_LIVE_INFO_REQUEST",
            Self::GetSyncStateDataRequest => "GET_SYNC_STATE_DATA_REQUEST",
            Self::RaftBrokerHeartBeatEventRequest => "RAFT_BROKER_HEART_BEAT_EVENT_REQUEST",
            Self::AuthCreateUser => "AUTH_CREATE_USER",
            Self::AuthUpdateUser => "AUTH_UPDATE_USER",
            Self::AuthDeleteUser => "AUTH_DELETE_USER",
            Self::AuthGetUser => "AUTH_GET_USER",
            Self::AuthListUser => "AUTH_LIST_USER",
            Self::AuthCreateAcl => "AUTH_CREATE_ACL",
            Self::AuthUpdateAcl => "AUTH_UPDATE_ACL",
            Self::AuthDeleteAcl => "AUTH_DELETE_ACL",
            Self::AuthGetAcl => "AUTH_GET_ACL",
            Self::AuthListAcl => "AUTH_LIST_ACL",
            Self::SuspendConsumer => "SUSPEND_CONSUMER",
            Self::ResumeConsumer => "RESUME_CONSUMER",
            Self::ResetConsumerOffsetInConsumer => "RESET_CONSUMER_OFFSET_IN_CONSUMER",
            Self::ResetConsumerOffsetInBroker => "RESET_CONSUMER_OFFSET_IN_BROKER",
            Self::AdjustConsumerThreadPool => "ADJUST_CONSUMER_THREAD_POOL",
            Self::WhoConsumeTheMessage => "WHO_CONSUME_THE_MESSAGE",
            Self::RegisterFilterServer => "REGISTER_FILTER_SERVER",
            Self::RegisterMessageFilterClass => "REGISTER_MESSAGE_FILTER_CLASS",
        }
    }
}

/// Response codes (`ResponseCode.java`, `RemotingSysResponseCode.java`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ResponseCode {
    /// `SUCCESS`
    Success = 0,
    /// `SYSTEM_ERROR`
    SystemError = 1,
    /// `SYSTEM_BUSY`
    SystemBusy = 2,
    /// `REQUEST_CODE_NOT_SUPPORTED`
    RequestCodeNotSupported = 3,
    /// `TRANSACTION_FAILED`
    TransactionFailed = 4,
    /// `FLUSH_DISK_TIMEOUT`
    FlushDiskTimeout = 10,
    /// `SLAVE_NOT_AVAILABLE`
    SlaveNotAvailable = 11,
    /// `FLUSH_SLAVE_TIMEOUT`
    FlushSlaveTimeout = 12,
    /// `MESSAGE_ILLEGAL`
    MessageIllegal = 13,
    /// `SERVICE_NOT_AVAILABLE`
    ServiceNotAvailable = 14,
    /// `VERSION_NOT_SUPPORTED`
    VersionNotSupported = 15,
    /// `NO_PERMISSION`
    NoPermission = 16,
    /// `TOPIC_NOT_EXIST`
    TopicNotExist = 17,
    /// `TOPIC_EXIST_ALREADY`
    TopicExistAlready = 18,
    /// `PULL_NOT_FOUND`
    PullNotFound = 19,
    /// `PULL_RETRY_IMMEDIATELY`
    PullRetryImmediately = 20,
    /// `PULL_OFFSET_MOVED`
    PullOffsetMoved = 21,
    /// `QUERY_NOT_FOUND`
    QueryNotFound = 22,
    /// `SUBSCRIPTION_PARSE_FAILED`
    SubscriptionParseFailed = 23,
    /// `SUBSCRIPTION_NOT_EXIST`
    SubscriptionNotExist = 24,
    /// `SUBSCRIPTION_NOT_LATEST`
    SubscriptionNotLatest = 25,
    /// `SUBSCRIPTION_GROUP_NOT_EXIST`
    SubscriptionGroupNotExist = 26,
    /// `FILTER_DATA_NOT_EXIST`
    FilterDataNotExist = 27,
    /// `FILTER_DATA_NOT_LATEST`
    FilterDataNotLatest = 28,
    /// `INVALID_PARAMETER`
    InvalidParameter = 29,
    /// `TRANSACTION_SHOULD_COMMIT`
    TransactionShouldCommit = 200,
    /// `TRANSACTION_SHOULD_ROLLBACK`
    TransactionShouldRollback = 201,
    /// `TRANSACTION_STATE_UNKNOW`
    TransactionStateUnknow = 202,
    /// `TRANSACTION_STATE_GROUP_WRONG`
    TransactionStateGroupWrong = 203,
    /// `NO_BUYER_ID`
    NoBuyerId = 204,
    /// `NOT_IN_CURRENT_UNIT`
    NotInCurrentUnit = 205,
    /// `CONSUMER_NOT_ONLINE`
    ConsumerNotOnline = 206,
    /// `CONSUME_MSG_TIMEOUT`
    ConsumeMsgTimeout = 207,
    /// `NO_MESSAGE`
    NoMessage = 208,
    /// `POLLING_FULL`
    PollingFull = 209,
    /// `POLLING_TIMEOUT`
    PollingTimeout = 210,
    /// `BROKER_NOT_EXIST`
    BrokerNotExist = 211,
    /// `BROKER_DISPATCH_NOT_COMPLETE`
    BrokerDispatchNotComplete = 212,
    /// `BROADCAST_CONSUMPTION`
    BroadcastConsumption = 213,
    /// `FLOW_CONTROL`
    FlowControl = 215,
    /// `NOT_LEADER_FOR_QUEUE`
    NotLeaderForQueue = 501,
    /// `ILLEGAL_OPERATION`
    IllegalOperation = 604,
    /// `GO_AWAY`
    GoAway = 1500,
    /// `CONTROLLER_FENCED_MASTER_EPOCH`
    ControllerFencedMasterEpoch = 2000,
    /// `CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH`
    ControllerFencedSyncStateSetEpoch = 2001,
    /// `CONTROLLER_INVALID_MASTER`
    ControllerInvalidMaster = 2002,
    /// `CONTROLLER_INVALID_REPLICAS`
    ControllerInvalidReplicas = 2003,
    /// `CONTROLLER_MASTER_NOT_AVAILABLE`
    ControllerMasterNotAvailable = 2004,
    /// `CONTROLLER_INVALID_REQUEST`
    ControllerInvalidRequest = 2005,
    /// `CONTROLLER_BROKER_NOT_ALIVE`
    ControllerBrokerNotAlive = 2006,
    /// `CONTROLLER_NOT_LEADER`
    ControllerNotLeader = 2007,
    /// `CONTROLLER_BROKER_METADATA_NOT_EXIST`
    ControllerBrokerMetadataNotExist = 2008,
    /// `CONTROLLER_INVALID_CLEAN_BROKER_METADATA`
    ControllerInvalidCleanBrokerMetadata = 2009,
    /// `CONTROLLER_BROKER_NEED_TO_BE_REGISTERED`
    ControllerBrokerNeedToBeRegistered = 2010,
    /// `CONTROLLER_MASTER_STILL_EXIST`
    ControllerMasterStillExist = 2011,
    /// `CONTROLLER_ELECT_MASTER_FAILED`
    ControllerElectMasterFailed = 2012,
    /// `CONTROLLER_ALTER_SYNC_STATE_SET_FAILED`
    ControllerAlterSyncStateSetFailed = 2013,
    /// `CONTROLLER_BROKER_ID_INVALID`
    ControllerBrokerIdInvalid = 2014,
    /// `CONTROLLER_JRAFT_INTERNAL_ERROR`
    ControllerJraftInternalError = 2015,
    /// `CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS`
    ControllerBrokerLiveInfoNotExists = 2016,
    /// `USER_NOT_EXIST`
    UserNotExist = 3001,
    /// `POLICY_NOT_EXIST`
    PolicyNotExist = 3002,
}

impl ResponseCode {
    /// The code's number on the wire.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The known code with this number; `None` keeps unknown codes as plain numbers.
    pub fn from_code(code: i32) -> Option<Self> {
        Some(match code {
            0 => Self::Success,
            1 => Self::SystemError,
            2 => Self::SystemBusy,
            3 => Self::RequestCodeNotSupported,
            4 => Self::TransactionFailed,
            10 => Self::FlushDiskTimeout,
            11 => Self::SlaveNotAvailable,
            12 => Self::FlushSlaveTimeout,
            13 => Self::MessageIllegal,
            14 => Self::ServiceNotAvailable,
            15 => Self::VersionNotSupported,
            16 => Self::NoPermission,
            17 => Self::TopicNotExist,
            18 => Self::TopicExistAlready,
            19 => Self::PullNotFound,
            20 => Self::PullRetryImmediately,
            21 => Self::PullOffsetMoved,
            22 => Self::QueryNotFound,
            23 => Self::SubscriptionParseFailed,
            24 => Self::SubscriptionNotExist,
            25 => Self::SubscriptionNotLatest,
            26 => Self::SubscriptionGroupNotExist,
            27 => Self::FilterDataNotExist,
            28 => Self::FilterDataNotLatest,
            29 => Self::InvalidParameter,
            200 => Self::TransactionShouldCommit,
            201 => Self::TransactionShouldRollback,
            202 => Self::TransactionStateUnknow,
            203 => Self::TransactionStateGroupWrong,
            204 => Self::NoBuyerId,
            205 => Self::NotInCurrentUnit,
            206 => Self::ConsumerNotOnline,
            207 => Self::ConsumeMsgTimeout,
            208 => Self::NoMessage,
            209 => Self::PollingFull,
            210 => Self::PollingTimeout,
            211 => Self::BrokerNotExist,
            212 => Self::BrokerDispatchNotComplete,
            213 => Self::BroadcastConsumption,
            215 => Self::FlowControl,
            501 => Self::NotLeaderForQueue,
            604 => Self::IllegalOperation,
            1500 => Self::GoAway,
            2000 => Self::ControllerFencedMasterEpoch,
            2001 => Self::ControllerFencedSyncStateSetEpoch,
            2002 => Self::ControllerInvalidMaster,
            2003 => Self::ControllerInvalidReplicas,
            2004 => Self::ControllerMasterNotAvailable,
            2005 => Self::ControllerInvalidRequest,
            2006 => Self::ControllerBrokerNotAlive,
            2007 => Self::ControllerNotLeader,
            2008 => Self::ControllerBrokerMetadataNotExist,
            2009 => Self::ControllerInvalidCleanBrokerMetadata,
            2010 => Self::ControllerBrokerNeedToBeRegistered,
            2011 => Self::ControllerMasterStillExist,
            2012 => Self::ControllerElectMasterFailed,
            2013 => Self::ControllerAlterSyncStateSetFailed,
            2014 => Self::ControllerBrokerIdInvalid,
            2015 => Self::ControllerJraftInternalError,
            2016 => Self::ControllerBrokerLiveInfoNotExists,
            3001 => Self::UserNotExist,
            3002 => Self::PolicyNotExist,
            _ => return None,
        })
    }

    /// RocketMQ's constant name, as upstream spells it (for logs and admin output).
    pub fn name(self) -> &'static str {
        match self {
            Self::Success => "SUCCESS",
            Self::SystemError => "SYSTEM_ERROR",
            Self::SystemBusy => "SYSTEM_BUSY",
            Self::RequestCodeNotSupported => "REQUEST_CODE_NOT_SUPPORTED",
            Self::TransactionFailed => "TRANSACTION_FAILED",
            Self::FlushDiskTimeout => "FLUSH_DISK_TIMEOUT",
            Self::SlaveNotAvailable => "SLAVE_NOT_AVAILABLE",
            Self::FlushSlaveTimeout => "FLUSH_SLAVE_TIMEOUT",
            Self::MessageIllegal => "MESSAGE_ILLEGAL",
            Self::ServiceNotAvailable => "SERVICE_NOT_AVAILABLE",
            Self::VersionNotSupported => "VERSION_NOT_SUPPORTED",
            Self::NoPermission => "NO_PERMISSION",
            Self::TopicNotExist => "TOPIC_NOT_EXIST",
            Self::TopicExistAlready => "TOPIC_EXIST_ALREADY",
            Self::PullNotFound => "PULL_NOT_FOUND",
            Self::PullRetryImmediately => "PULL_RETRY_IMMEDIATELY",
            Self::PullOffsetMoved => "PULL_OFFSET_MOVED",
            Self::QueryNotFound => "QUERY_NOT_FOUND",
            Self::SubscriptionParseFailed => "SUBSCRIPTION_PARSE_FAILED",
            Self::SubscriptionNotExist => "SUBSCRIPTION_NOT_EXIST",
            Self::SubscriptionNotLatest => "SUBSCRIPTION_NOT_LATEST",
            Self::SubscriptionGroupNotExist => "SUBSCRIPTION_GROUP_NOT_EXIST",
            Self::FilterDataNotExist => "FILTER_DATA_NOT_EXIST",
            Self::FilterDataNotLatest => "FILTER_DATA_NOT_LATEST",
            Self::InvalidParameter => "INVALID_PARAMETER",
            Self::TransactionShouldCommit => "TRANSACTION_SHOULD_COMMIT",
            Self::TransactionShouldRollback => "TRANSACTION_SHOULD_ROLLBACK",
            Self::TransactionStateUnknow => "TRANSACTION_STATE_UNKNOW",
            Self::TransactionStateGroupWrong => "TRANSACTION_STATE_GROUP_WRONG",
            Self::NoBuyerId => "NO_BUYER_ID",
            Self::NotInCurrentUnit => "NOT_IN_CURRENT_UNIT",
            Self::ConsumerNotOnline => "CONSUMER_NOT_ONLINE",
            Self::ConsumeMsgTimeout => "CONSUME_MSG_TIMEOUT",
            Self::NoMessage => "NO_MESSAGE",
            Self::PollingFull => "POLLING_FULL",
            Self::PollingTimeout => "POLLING_TIMEOUT",
            Self::BrokerNotExist => "BROKER_NOT_EXIST",
            Self::BrokerDispatchNotComplete => "BROKER_DISPATCH_NOT_COMPLETE",
            Self::BroadcastConsumption => "BROADCAST_CONSUMPTION",
            Self::FlowControl => "FLOW_CONTROL",
            Self::NotLeaderForQueue => "NOT_LEADER_FOR_QUEUE",
            Self::IllegalOperation => "ILLEGAL_OPERATION",
            Self::GoAway => "GO_AWAY",
            Self::ControllerFencedMasterEpoch => "CONTROLLER_FENCED_MASTER_EPOCH",
            Self::ControllerFencedSyncStateSetEpoch => "CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH",
            Self::ControllerInvalidMaster => "CONTROLLER_INVALID_MASTER",
            Self::ControllerInvalidReplicas => "CONTROLLER_INVALID_REPLICAS",
            Self::ControllerMasterNotAvailable => "CONTROLLER_MASTER_NOT_AVAILABLE",
            Self::ControllerInvalidRequest => "CONTROLLER_INVALID_REQUEST",
            Self::ControllerBrokerNotAlive => "CONTROLLER_BROKER_NOT_ALIVE",
            Self::ControllerNotLeader => "CONTROLLER_NOT_LEADER",
            Self::ControllerBrokerMetadataNotExist => "CONTROLLER_BROKER_METADATA_NOT_EXIST",
            Self::ControllerInvalidCleanBrokerMetadata => {
                "CONTROLLER_INVALID_CLEAN_BROKER_METADATA"
            }
            Self::ControllerBrokerNeedToBeRegistered => "CONTROLLER_BROKER_NEED_TO_BE_REGISTERED",
            Self::ControllerMasterStillExist => "CONTROLLER_MASTER_STILL_EXIST",
            Self::ControllerElectMasterFailed => "CONTROLLER_ELECT_MASTER_FAILED",
            Self::ControllerAlterSyncStateSetFailed => "CONTROLLER_ALTER_SYNC_STATE_SET_FAILED",
            Self::ControllerBrokerIdInvalid => "CONTROLLER_BROKER_ID_INVALID",
            Self::ControllerJraftInternalError => "CONTROLLER_JRAFT_INTERNAL_ERROR",
            Self::ControllerBrokerLiveInfoNotExists => "CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS",
            Self::UserNotExist => "USER_NOT_EXIST",
            Self::PolicyNotExist => "POLICY_NOT_EXIST",
        }
    }
}

/// Failure codes of the plain ACL admin requests. Upstream gives POP's POLLING_FULL,
/// POLLING_TIMEOUT and BROKER_NOT_EXIST the same numbers, so these are constants beside
/// [`ResponseCode`] rather than variants of it.
pub mod acl_failed {
    /// UPDATE_AND_CREATE_ACL_CONFIG (50) failed.
    pub const UPDATE_AND_CREATE_ACL_CONFIG: i32 = 209;
    /// DELETE_ACL_CONFIG (51) failed.
    pub const DELETE_ACL_CONFIG: i32 = 210;
    /// UPDATE_GLOBAL_WHITE_ADDRS_CONFIG (53) failed.
    pub const UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: i32 = 211;
}
