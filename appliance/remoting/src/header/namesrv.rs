//! Name server headers (`headers.md` §8): route lookup, broker registration (request and
//! the response carrying the master's addresses), unregistration, topic deletion, KV
//! config, write-permission changes, data-version query, broker heartbeat.

command_header! {
    /// `GetRouteInfoRequestHeader` (code 105).
    GetRouteInfoRequestHeader + rpc {
        topic: String = "topic";
        /// Ask for standard JSON regardless of the request version.
        accept_standard_json_only: Option<bool> = "acceptStandardJsonOnly";
        /// Extra key `__ZONE_MODE` (`MixAll.ZONE_MODE`): filter the route by `__ZONE_NAME`.
        /// Text, because upstream reads it leniently (anything not true is false).
        zone_mode: Option<String> = "__ZONE_MODE";
        /// Extra key `__ZONE_NAME` (`MixAll.ZONE_NAME`): the client's zone.
        zone_name: Option<String> = "__ZONE_NAME";
    }
}

command_header! {
    /// `RegisterBrokerRequestHeader` (code 103, broker -> every name server).
    RegisterBrokerRequestHeader {
        broker_name: String = "brokerName";
        /// `ip:listenPort`.
        broker_addr: String = "brokerAddr";
        cluster_name: String = "clusterName";
        /// `ip:haPort`.
        ha_server_addr: String = "haServerAddr";
        /// 0 master, >= 1 slave.
        broker_id: i64 = "brokerId";
        /// Liveness timeout to apply (name server default 120 000 ms when absent).
        heartbeat_timeout_millis: Option<i64> = "heartbeatTimeoutMillis";
        enable_acting_master: Option<bool> = "enableActingMaster";
        /// The body uses the zlib-compressed format.
        compressed: bool = "compressed" or false;
        /// CRC32 (masked) of the body; 0 = don't check.
        body_crc32: i32 = "bodyCrc32" or 0;
        /// Extra key `__ZONE_NAME`.
        zone_name: Option<String> = "__ZONE_NAME";
    }
}

command_header! {
    /// `RegisterBrokerResponseHeader`: for a slave, its master's HA and service addresses.
    RegisterBrokerResponseHeader {
        ha_server_addr: Option<String> = "haServerAddr";
        master_addr: Option<String> = "masterAddr";
    }
}

command_header! {
    /// `UnRegisterBrokerRequestHeader` (code 104).
    UnRegisterBrokerRequestHeader {
        broker_name: String = "brokerName";
        broker_addr: String = "brokerAddr";
        cluster_name: String = "clusterName";
        broker_id: i64 = "brokerId";
    }
}

command_header! {
    /// `BrokerHeartbeatRequestHeader` (code 904, broker -> name server / controller).
    BrokerHeartbeatRequestHeader {
        cluster_name: String = "clusterName";
        broker_addr: String = "brokerAddr";
        broker_name: String = "brokerName";
        broker_id: Option<i64> = "brokerId";
        epoch: Option<i32> = "epoch";
        max_offset: Option<i64> = "maxOffset";
        confirm_offset: Option<i64> = "confirmOffset";
        heartbeat_timeout_mills: Option<i64> = "heartbeatTimeoutMills";
        election_priority: Option<i32> = "electionPriority";
    }
}

command_header! {
    /// `RegisterTopicRequestHeader` (code 217, broker registers one topic's route).
    RegisterTopicRequestHeader + rpc {
        topic: String = "topic";
    }
}

command_header! {
    /// `DeleteTopicFromNamesrvRequestHeader` (code 216).
    DeleteTopicFromNamesrvRequestHeader + rpc {
        topic: String = "topic";
        /// Only that cluster's brokers' queue data are removed.
        cluster_name: Option<String> = "clusterName";
    }
}

command_header! {
    /// `GetTopicsByClusterRequestHeader` (code 224).
    GetTopicsByClusterRequestHeader {
        cluster: String = "cluster";
    }
}

command_header! {
    /// `PutKVConfigRequestHeader` (code 100).
    PutKvConfigRequestHeader {
        namespace: String = "namespace";
        key: String = "key";
        value: String = "value";
    }
}

command_header! {
    /// `GetKVConfigRequestHeader` (code 101).
    GetKvConfigRequestHeader {
        namespace: String = "namespace";
        key: String = "key";
    }
}

command_header! {
    /// `GetKVConfigResponseHeader`.
    GetKvConfigResponseHeader {
        value: Option<String> = "value";
    }
}

command_header! {
    /// `DeleteKVConfigRequestHeader` (code 102).
    DeleteKvConfigRequestHeader {
        namespace: String = "namespace";
        key: String = "key";
    }
}

command_header! {
    /// `GetKVListByNamespaceRequestHeader` (code 219).
    GetKvListByNamespaceRequestHeader {
        namespace: String = "namespace";
    }
}

command_header! {
    /// `WipeWritePermOfBrokerRequestHeader` (code 205).
    WipeWritePermOfBrokerRequestHeader {
        broker_name: String = "brokerName";
    }
}

command_header! {
    /// `WipeWritePermOfBrokerResponseHeader`.
    WipeWritePermOfBrokerResponseHeader {
        wipe_topic_count: i32 = "wipeTopicCount";
    }
}

command_header! {
    /// `AddWritePermOfBrokerRequestHeader` (code 327).
    AddWritePermOfBrokerRequestHeader {
        broker_name: String = "brokerName";
    }
}

command_header! {
    /// `AddWritePermOfBrokerResponseHeader`.
    AddWritePermOfBrokerResponseHeader {
        add_topic_count: i32 = "addTopicCount";
    }
}

command_header! {
    /// `QueryDataVersionRequestHeader` (code 322); the body is the broker's DataVersion.
    QueryDataVersionRequestHeader {
        broker_name: String = "brokerName";
        broker_addr: String = "brokerAddr";
        cluster_name: String = "clusterName";
        broker_id: i64 = "brokerId";
    }
}

command_header! {
    /// `QueryDataVersionResponseHeader`.
    QueryDataVersionResponseHeader {
        changed: bool = "changed";
    }
}

command_header! {
    /// `GetBrokerMemberGroupRequestHeader` (code 901).
    GetBrokerMemberGroupRequestHeader {
        cluster_name: String = "clusterName";
        broker_name: String = "brokerName";
    }
}
