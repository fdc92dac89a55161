//! Controller request and response headers (`protocol/header/controller`, spec features.md
//! §g.4): what brokers and mqadmin send to a 5.x controller (codes 1001–1013) and what the
//! controller sends back, plus NOTIFY_BROKER_ROLE_CHANGED (1008, controller → broker).
//! Broker ids are Java `Long`s, epochs `Integer`s; `invokeTime` is informational.

command_header! {
    /// `GetNextBrokerIdRequestHeader` (1012).
    GetNextBrokerIdRequestHeader {
        cluster_name: String = "clusterName";
        broker_name: String = "brokerName";
    }
}

command_header! {
    /// `GetNextBrokerIdResponseHeader`.
    GetNextBrokerIdResponseHeader {
        cluster_name: Option<String> = "clusterName";
        broker_name: Option<String> = "brokerName";
        next_broker_id: Option<i64> = "nextBrokerId";
    }
}

command_header! {
    /// `ApplyBrokerIdRequestHeader` (1013).
    ApplyBrokerIdRequestHeader {
        cluster_name: String = "clusterName";
        broker_name: String = "brokerName";
        applied_broker_id: i64 = "appliedBrokerId";
        /// `brokerAddr;timestamp`, kept with the id so the same broker may apply again.
        register_check_code: String = "registerCheckCode";
    }
}

command_header! {
    /// `ApplyBrokerIdResponseHeader`.
    ApplyBrokerIdResponseHeader {
        cluster_name: Option<String> = "clusterName";
        broker_name: Option<String> = "brokerName";
    }
}

command_header! {
    /// `RegisterBrokerToControllerRequestHeader` (1003).
    RegisterBrokerToControllerRequestHeader {
        cluster_name: String = "clusterName";
        broker_name: String = "brokerName";
        broker_id: i64 = "brokerId";
        broker_address: String = "brokerAddress";
        invoke_time: Option<i64> = "invokeTime";
    }
}

command_header! {
    /// `RegisterBrokerToControllerResponseHeader`; the body is the SyncStateSet.
    RegisterBrokerToControllerResponseHeader {
        cluster_name: Option<String> = "clusterName";
        broker_name: Option<String> = "brokerName";
        master_broker_id: Option<i64> = "masterBrokerId";
        master_address: Option<String> = "masterAddress";
        master_epoch: Option<i32> = "masterEpoch";
        sync_state_set_epoch: Option<i32> = "syncStateSetEpoch";
    }
}

command_header! {
    /// `AlterSyncStateSetRequestHeader` (1001); the body is the new SyncStateSet.
    AlterSyncStateSetRequestHeader {
        broker_name: String = "brokerName";
        master_broker_id: i64 = "masterBrokerId";
        master_epoch: i32 = "masterEpoch";
        invoke_time: Option<i64> = "invokeTime";
    }
}

command_header! {
    /// `AlterSyncStateSetResponseHeader`.
    AlterSyncStateSetResponseHeader {
        new_sync_state_set_epoch: i32 = "newSyncStateSetEpoch" or 0;
    }
}

command_header! {
    /// `ElectMasterRequestHeader` (1002): from a broker (for itself) or mqadmin
    /// (`designateElect`).
    ElectMasterRequestHeader {
        cluster_name: String = "clusterName" or String::new();
        broker_name: String = "brokerName";
        broker_id: i64 = "brokerId" or -1;
        designate_elect: bool = "designateElect" or false;
        invoke_time: Option<i64> = "invokeTime";
    }
}

command_header! {
    /// `ElectMasterResponseHeader`; the body is ElectMasterResponseBody.
    ElectMasterResponseHeader {
        master_broker_id: Option<i64> = "masterBrokerId";
        master_address: Option<String> = "masterAddress";
        master_epoch: Option<i32> = "masterEpoch";
        sync_state_set_epoch: Option<i32> = "syncStateSetEpoch";
    }
}

command_header! {
    /// `GetReplicaInfoRequestHeader` (1004).
    GetReplicaInfoRequestHeader {
        broker_name: String = "brokerName";
    }
}

command_header! {
    /// `GetReplicaInfoResponseHeader`; the body is the SyncStateSet.
    GetReplicaInfoResponseHeader {
        master_broker_id: Option<i64> = "masterBrokerId";
        master_address: Option<String> = "masterAddress";
        master_epoch: Option<i32> = "masterEpoch";
    }
}

command_header! {
    /// `GetMetaDataResponseHeader` (answer to 1005): the consensus group, its leader and
    /// its peers (`id:address;` each).
    GetMetaDataResponseHeader {
        group: Option<String> = "group";
        controller_leader_id: Option<String> = "controllerLeaderId";
        controller_leader_address: Option<String> = "controllerLeaderAddress";
        is_leader: bool = "isLeader" or false;
        peers: Option<String> = "peers";
    }
}

command_header! {
    /// `CleanControllerBrokerDataRequestHeader` (1011).
    CleanControllerBrokerDataRequestHeader {
        cluster_name: Option<String> = "clusterName";
        broker_name: String = "brokerName";
        /// `;`-separated broker ids; absent = the whole broker set.
        broker_controller_ids_to_clean: Option<String> = "brokerControllerIdsToClean";
        is_clean_living_broker: bool = "isCleanLivingBroker" or false;
        invoke_time: Option<i64> = "invokeTime";
    }
}

command_header! {
    /// `NotifyBrokerRoleChangedRequestHeader` (1008, controller → broker); the body is the
    /// SyncStateSet.
    NotifyBrokerRoleChangedRequestHeader {
        master_address: Option<String> = "masterAddress";
        master_epoch: Option<i32> = "masterEpoch";
        sync_state_set_epoch: Option<i32> = "syncStateSetEpoch";
        master_broker_id: Option<i64> = "masterBrokerId";
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::CommandHeader;

    #[test]
    fn elect_master_defaults_follow_upstream_when_keys_are_absent() {
        let mut fields = crate::command::ExtFields::new();
        fields.insert("brokerName", "broker-a");
        let h = ElectMasterRequestHeader::decode(&fields).unwrap();
        assert_eq!(h.broker_id, -1);
        assert!(!h.designate_elect);
        assert_eq!(h.cluster_name, "");
    }

    #[test]
    fn metadata_answer_uses_upstream_keys() {
        let h = GetMetaDataResponseHeader {
            group: Some("g".into()),
            controller_leader_id: Some("n0".into()),
            controller_leader_address: Some("127.0.0.1:9877".into()),
            is_leader: true,
            peers: Some("n0:127.0.0.1:9877;".into()),
        };
        let fields = h.to_ext_fields();
        assert_eq!(fields.get("isLeader"), Some("true"));
        assert_eq!(
            fields.get("controllerLeaderAddress"),
            Some("127.0.0.1:9877")
        );
        assert_eq!(GetMetaDataResponseHeader::decode(&fields).unwrap(), h);
    }
}
