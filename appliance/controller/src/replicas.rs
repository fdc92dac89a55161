//! The replica state machine (upstream `ReplicasInfoManager`, spec features.md §g.5): per
//! broker set, the broker ids with their addresses and register check codes, and the
//! SyncStateInfo (master id, master epoch, SyncStateSet and its epoch). Each write checks
//! its request against the state and answers with the events to replicate; only
//! [`ReplicasInfo::apply`] changes the state, so every controller that applies the same
//! log holds the same tables.

use crate::elect::{self, ElectRequest};
use crate::event::Event;
use crate::heartbeat::Liveness;
use ringmq_remoting::body::cluster::BrokerMemberGroup;
use ringmq_remoting::body::controller::{ElectMasterResponseBody, SyncStateSet};
use ringmq_remoting::codes::ResponseCode;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The first broker id a controller assigns (upstream MixAll.FIRST_BROKER_CONTROLLER_ID).
pub const FIRST_BROKER_CONTROLLER_ID: i64 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerReplicaInfo {
    pub cluster_name: String,
    pub broker_name: String,
    pub next_assign_broker_id: i64,
    /// broker id → (address, register check code).
    pub brokers: BTreeMap<i64, (String, String)>,
}

impl BrokerReplicaInfo {
    /// The address of broker `id`, when the id is given and known.
    pub fn address(&self, id: Option<i64>) -> Option<String> {
        id.and_then(|id| self.brokers.get(&id))
            .map(|(a, _)| a.clone())
    }

    fn member_group(&self) -> BrokerMemberGroup {
        BrokerMemberGroup {
            cluster: self.cluster_name.clone(),
            broker_name: self.broker_name.clone(),
            broker_addrs: self
                .brokers
                .iter()
                .map(|(id, (a, _))| (*id, a.clone()))
                .collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncStateInfo {
    pub cluster_name: String,
    pub master_broker_id: Option<i64>,
    /// Bumped on every master change, also to "no master".
    pub master_epoch: i32,
    pub sync_state_set: BTreeSet<i64>,
    pub sync_state_set_epoch: i32,
}

impl SyncStateInfo {
    /// The set as its `SyncStateSet` body.
    pub fn sync_state_set_body(&self) -> Vec<u8> {
        SyncStateSet {
            sync_state_set: self.sync_state_set.clone(),
            sync_state_set_epoch: self.sync_state_set_epoch,
        }
        .encode()
    }
}

/// The answer to one request: a code (SUCCESS or the rejection), a remark, the response
/// header's values, an optional body, and the events to replicate before answering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerResult<R> {
    pub code: ResponseCode,
    pub remark: Option<String>,
    pub response: R,
    pub body: Option<Vec<u8>>,
    pub events: Vec<Event>,
}

impl<R: Default> ControllerResult<R> {
    fn ok() -> Self {
        ControllerResult {
            code: ResponseCode::Success,
            remark: None,
            response: R::default(),
            body: None,
            events: Vec::new(),
        }
    }

    fn reject(code: ResponseCode, remark: String) -> Self {
        ControllerResult {
            code,
            remark: Some(remark),
            ..Self::ok()
        }
    }
}

/// Master fields several answers carry (ElectMaster, RegisterBroker, GetReplicaInfo).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MasterInfo {
    pub master_broker_id: Option<i64>,
    pub master_address: Option<String>,
    pub master_epoch: Option<i32>,
    pub sync_state_set_epoch: Option<i32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AlterSyncStateSetResponse {
    pub new_sync_state_set_epoch: i32,
}

/// The controller's tables (serialized whole into Raft snapshots).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicasInfo {
    replicas: BTreeMap<String, BrokerReplicaInfo>,
    sync_states: BTreeMap<String, SyncStateInfo>,
}

impl ReplicasInfo {
    /// Both tables know the set (upstream isContainsBroker).
    fn known(&self, broker_name: &str) -> Option<(&BrokerReplicaInfo, &SyncStateInfo)> {
        Some((
            self.replicas.get(broker_name)?,
            self.sync_states.get(broker_name)?,
        ))
    }

    pub fn replica_info(&self, broker_name: &str) -> Option<&BrokerReplicaInfo> {
        self.replicas.get(broker_name)
    }

    pub fn sync_state(&self, broker_name: &str) -> Option<&SyncStateInfo> {
        self.sync_states.get(broker_name)
    }

    pub fn broker_names(&self) -> impl Iterator<Item = &str> {
        self.sync_states.keys().map(String::as_str)
    }

    /// CONTROLLER_GET_NEXT_BROKER_ID.
    pub fn next_broker_id(&self, broker_name: &str) -> i64 {
        self.replicas
            .get(broker_name)
            .map_or(FIRST_BROKER_CONTROLLER_ID, |r| r.next_assign_broker_id)
    }

    /// CONTROLLER_APPLY_BROKER_ID: the id is free, or already this broker's (same check
    /// code, `address;timestamp`); a new set starts only with the first id.
    pub fn apply_broker_id(
        &self,
        cluster_name: &str,
        broker_name: &str,
        broker_id: i64,
        register_check_code: &str,
    ) -> ControllerResult<()> {
        let address = register_check_code.split(';').next().unwrap_or_default();
        let event = Event::ApplyBrokerId {
            cluster_name: cluster_name.into(),
            broker_name: broker_name.into(),
            broker_address: address.into(),
            new_broker_id: broker_id,
            register_check_code: register_check_code.into(),
        };
        let mut result = ControllerResult::ok();
        let granted = match self.replicas.get(broker_name) {
            None => broker_id == FIRST_BROKER_CONTROLLER_ID,
            Some(r) => r
                .brokers
                .get(&broker_id)
                .is_none_or(|(_, code)| code == register_check_code),
        };
        if granted {
            result.events.push(event);
            return result;
        }
        ControllerResult::reject(
            ResponseCode::ControllerBrokerIdInvalid,
            format!("broker id {broker_id} cannot be applied in broker set {broker_name}: it is taken, or the set is new and {broker_id} is not its first id"),
        )
    }

    /// CONTROLLER_REGISTER_BROKER: the live master (if any) and the SyncStateSet; a new
    /// address of a known id is recorded.
    pub fn register_broker(
        &self,
        cluster_name: &str,
        broker_name: &str,
        broker_id: i64,
        broker_address: &str,
        live: &dyn Liveness,
    ) -> ControllerResult<MasterInfo> {
        let Some((replica, sync)) = self.known(broker_name) else {
            return ControllerResult::reject(
                ResponseCode::ControllerBrokerNeedToBeRegistered,
                format!("broker set {broker_name} is not registered in the controller"),
            );
        };
        let Some((address, _)) = replica.brokers.get(&broker_id) else {
            return ControllerResult::reject(
                ResponseCode::ControllerBrokerNeedToBeRegistered,
                format!("broker id {broker_id} is not registered in broker set {broker_name}"),
            );
        };
        let mut result = ControllerResult::ok();
        if let Some(master) = sync.master_broker_id {
            if live.is_alive(cluster_name, broker_name, master) {
                result.response = MasterInfo {
                    master_broker_id: Some(master),
                    master_address: replica.address(Some(master)),
                    master_epoch: Some(sync.master_epoch),
                    sync_state_set_epoch: Some(sync.sync_state_set_epoch),
                };
            }
        }
        result.body = Some(sync.sync_state_set_body());
        if address != broker_address {
            result.events.push(Event::UpdateBrokerAddress {
                cluster_name: cluster_name.into(),
                broker_name: broker_name.into(),
                broker_address: broker_address.into(),
                broker_id,
            });
        }
        result
    }

    /// CONTROLLER_ALTER_SYNC_STATE_SET, with upstream's checks in upstream's order.
    pub fn alter_sync_state_set(
        &self,
        broker_name: &str,
        master_broker_id: i64,
        master_epoch: i32,
        new_set: &SyncStateSet,
        live: &dyn Liveness,
    ) -> ControllerResult<AlterSyncStateSetResponse> {
        use ResponseCode as C;
        let Some((replica, sync)) = self.known(broker_name) else {
            return ControllerResult::reject(
                C::ControllerAlterSyncStateSetFailed,
                format!("broker set {broker_name} is not known"),
            );
        };
        let wanted = &new_set.sync_state_set;
        if *wanted == sync.sync_state_set {
            return ControllerResult::reject(
                C::ControllerAlterSyncStateSetFailed,
                "the new SyncStateSet equals the current one".into(),
            );
        }
        if sync.master_broker_id != Some(master_broker_id) {
            return ControllerResult::reject(
                C::ControllerInvalidMaster,
                format!(
                    "broker {master_broker_id} is not the master of {broker_name} (the master is {:?})",
                    sync.master_broker_id
                ),
            );
        }
        if master_epoch != sync.master_epoch {
            return ControllerResult::reject(
                C::ControllerFencedMasterEpoch,
                format!(
                    "master epoch {master_epoch} is not the current {}",
                    sync.master_epoch
                ),
            );
        }
        if new_set.sync_state_set_epoch != sync.sync_state_set_epoch {
            return ControllerResult::reject(
                C::ControllerFencedSyncStateSetEpoch,
                format!(
                    "SyncStateSet epoch {} is not the current {}",
                    new_set.sync_state_set_epoch, sync.sync_state_set_epoch
                ),
            );
        }
        for id in wanted {
            if !replica.brokers.contains_key(id) {
                return ControllerResult::reject(
                    C::ControllerInvalidReplicas,
                    format!("replica {id} does not exist in {broker_name}"),
                );
            }
            if !live.is_alive(&replica.cluster_name, broker_name, *id) {
                return ControllerResult::reject(
                    C::ControllerBrokerNotAlive,
                    format!("replica {id} of {broker_name} is not alive"),
                );
            }
        }
        if !wanted.contains(&master_broker_id) {
            return ControllerResult::reject(
                C::ControllerAlterSyncStateSetFailed,
                format!("the new SyncStateSet lacks the master {master_broker_id}"),
            );
        }
        let epoch = sync.sync_state_set_epoch + 1;
        let mut result = ControllerResult::<AlterSyncStateSetResponse>::ok();
        result.response.new_sync_state_set_epoch = epoch;
        result.body = Some(
            SyncStateSet {
                sync_state_set: wanted.clone(),
                sync_state_set_epoch: epoch,
            }
            .encode(),
        );
        result.events.push(Event::AlterSyncStateSet {
            broker_name: broker_name.into(),
            new_sync_state_set: wanted.clone(),
        });
        result
    }

    /// CONTROLLER_ELECT_MASTER. `broker_id` None: the controller asks (its master died);
    /// `designate`: elect exactly `broker_id` (mqadmin electMaster).
    pub fn elect_master(
        &self,
        broker_name: &str,
        broker_id: Option<i64>,
        designate: bool,
        enable_unclean: bool,
        live: &dyn Liveness,
    ) -> ControllerResult<MasterInfo> {
        let Some((replica, sync)) = self.known(broker_name) else {
            return ControllerResult::reject(
                ResponseCode::ControllerBrokerNeedToBeRegistered,
                format!("broker set {broker_name} is not registered"),
            );
        };
        let all: BTreeSet<i64> = replica.brokers.keys().copied().collect();
        let first_election = sync.master_epoch == 0;
        let new_master = match (first_election, broker_id) {
            (true, Some(id)) if id != -1 => Some(id),
            _ => elect::elect(
                &ElectRequest {
                    cluster: &replica.cluster_name,
                    broker_name,
                    sync_state_set: &sync.sync_state_set,
                    all_replicas: enable_unclean.then_some(&all),
                    old_master: sync.master_broker_id,
                    designated: broker_id.filter(|_| designate),
                },
                live,
            ),
        };
        match new_master {
            Some(m) if Some(m) == sync.master_broker_id => {
                let mut r = ControllerResult::reject(
                    ResponseCode::ControllerMasterStillExist,
                    format!("the master {m} of {broker_name} is alive: no election needed"),
                );
                r.response = MasterInfo {
                    master_broker_id: Some(m),
                    master_address: replica.address(Some(m)),
                    master_epoch: Some(sync.master_epoch),
                    sync_state_set_epoch: Some(sync.sync_state_set_epoch),
                };
                r.body = Some(
                    ElectMasterResponseBody {
                        broker_member_group: None,
                        sync_state_set: sync.sync_state_set.clone(),
                    }
                    .encode(),
                );
                r
            }
            Some(m) => {
                let mut r = ControllerResult::ok();
                r.response = MasterInfo {
                    master_broker_id: Some(m),
                    master_address: replica.address(Some(m)),
                    master_epoch: Some(sync.master_epoch + 1),
                    sync_state_set_epoch: Some(sync.sync_state_set_epoch + 1),
                };
                r.body = Some(
                    ElectMasterResponseBody {
                        broker_member_group: Some(replica.member_group()),
                        sync_state_set: [m].into_iter().collect(),
                    }
                    .encode(),
                );
                r.events.push(Event::ElectMaster {
                    broker_name: broker_name.into(),
                    new_master: Some(m),
                });
                r
            }
            None if broker_id.is_none_or(|id| id == -1) => {
                let mut r = ControllerResult::reject(
                    ResponseCode::ControllerMasterNotAvailable,
                    format!("the master of {broker_name} is down and no replica can take over"),
                );
                r.events.push(Event::ElectMaster {
                    broker_name: broker_name.into(),
                    new_master: None,
                });
                r
            }
            None => ControllerResult::reject(
                ResponseCode::ControllerElectMasterFailed,
                format!("no replica of {broker_name} can be elected master"),
            ),
        }
    }

    /// CONTROLLER_GET_REPLICA_INFO.
    pub fn replica_info_answer(&self, broker_name: &str) -> ControllerResult<MasterInfo> {
        let Some((replica, sync)) = self.known(broker_name) else {
            return ControllerResult::reject(
                ResponseCode::ControllerBrokerMetadataNotExist,
                format!("broker set {broker_name} is not known"),
            );
        };
        let mut r = ControllerResult::ok();
        r.response = MasterInfo {
            master_broker_id: sync.master_broker_id,
            master_address: replica.address(sync.master_broker_id),
            master_epoch: Some(sync.master_epoch),
            sync_state_set_epoch: None,
        };
        r.body = Some(sync.sync_state_set_body());
        r
    }

    /// CLEAN_BROKER_DATA: `ids` (upstream's `;`-separated brokerControllerIdsToClean) or
    /// the whole set; living brokers only with `clean_living`.
    pub fn clean_broker_data(
        &self,
        cluster_name: &str,
        broker_name: &str,
        ids: Option<&str>,
        clean_living: bool,
        live: &dyn Liveness,
    ) -> ControllerResult<()> {
        use ResponseCode::ControllerInvalidCleanBrokerMetadata as Invalid;
        let ids = ids.map(str::trim).filter(|s| !s.is_empty());
        let parsed: Option<BTreeSet<i64>> = match ids {
            None => None,
            Some(text) => match text.split(';').map(|s| s.trim().parse::<i64>()).collect() {
                Ok(set) => Some(set),
                Err(e) => {
                    return ControllerResult::reject(
                        Invalid,
                        format!("brokerControllerIdsToClean must be ids separated by ';': {e}"),
                    )
                }
            },
        };
        if !clean_living {
            let master = self
                .sync_states
                .get(broker_name)
                .and_then(|s| s.master_broker_id);
            match &parsed {
                None if master.is_some() => {
                    return ControllerResult::reject(
                        Invalid,
                        format!("broker set {broker_name} still has a master: not cleaned"),
                    )
                }
                Some(set) => {
                    if let Some(id) = set
                        .iter()
                        .find(|id| live.is_alive(cluster_name, broker_name, **id))
                    {
                        return ControllerResult::reject(
                            Invalid,
                            format!("broker {id} of {broker_name} is alive: not cleaned"),
                        );
                    }
                }
                None => {}
            }
        }
        if self.known(broker_name).is_none() {
            return ControllerResult::reject(
                Invalid,
                format!("broker set {broker_name} is not known"),
            );
        }
        let mut r = ControllerResult::ok();
        r.events.push(Event::CleanBrokerData {
            broker_name: broker_name.into(),
            broker_ids: parsed,
        });
        r
    }

    /// Broker sets whose master is not alive while some replica is (the liveness scan
    /// re-elects these).
    pub fn sets_needing_election(&self, live: &dyn Liveness) -> Vec<String> {
        self.sync_states
            .iter()
            .filter(|(name, s)| {
                let Some(master) = s.master_broker_id else {
                    return false;
                };
                if live.is_alive(&s.cluster_name, name, master) {
                    return false;
                }
                self.replicas.get(*name).is_some_and(|r| {
                    r.brokers
                        .keys()
                        .any(|id| live.is_alive(&s.cluster_name, name, *id))
                })
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Applies one replicated event (every controller, in log order).
    pub fn apply(&mut self, event: &Event) {
        match event {
            Event::AlterSyncStateSet {
                broker_name,
                new_sync_state_set,
            } => {
                if let Some(s) = self.known_mut(broker_name) {
                    s.sync_state_set = new_sync_state_set.clone();
                    s.sync_state_set_epoch += 1;
                }
            }
            Event::ApplyBrokerId {
                cluster_name,
                broker_name,
                broker_address,
                new_broker_id,
                register_check_code,
            } => self.apply_broker_id_event(
                cluster_name,
                broker_name,
                broker_address,
                *new_broker_id,
                register_check_code,
            ),
            Event::ElectMaster {
                broker_name,
                new_master,
            } => {
                if let Some(s) = self.known_mut(broker_name) {
                    s.master_broker_id = *new_master;
                    s.master_epoch += 1;
                    if let Some(m) = new_master {
                        s.sync_state_set = [*m].into_iter().collect();
                        s.sync_state_set_epoch += 1;
                    }
                }
            }
            Event::CleanBrokerData {
                broker_name,
                broker_ids,
            } => self.apply_clean(broker_name, broker_ids.as_ref()),
            Event::UpdateBrokerAddress {
                broker_name,
                broker_address,
                broker_id,
                ..
            } => {
                if let Some(entry) = self
                    .replicas
                    .get_mut(broker_name)
                    .and_then(|r| r.brokers.get_mut(broker_id))
                {
                    entry.0 = broker_address.clone();
                }
            }
        }
    }

    fn known_mut(&mut self, broker_name: &str) -> Option<&mut SyncStateInfo> {
        if !self.replicas.contains_key(broker_name) {
            return None;
        }
        self.sync_states.get_mut(broker_name)
    }

    fn apply_broker_id_event(
        &mut self,
        cluster: &str,
        name: &str,
        address: &str,
        id: i64,
        code: &str,
    ) {
        if self.known(name).is_none() {
            self.replicas.insert(
                name.into(),
                BrokerReplicaInfo {
                    cluster_name: cluster.into(),
                    broker_name: name.into(),
                    next_assign_broker_id: FIRST_BROKER_CONTROLLER_ID,
                    brokers: BTreeMap::new(),
                },
            );
            self.sync_states.insert(
                name.into(),
                SyncStateInfo {
                    cluster_name: cluster.into(),
                    master_broker_id: None,
                    master_epoch: 0,
                    sync_state_set: BTreeSet::new(),
                    sync_state_set_epoch: 0,
                },
            );
        }
        let r = self.replicas.get_mut(name).expect("inserted above");
        if let std::collections::btree_map::Entry::Vacant(slot) = r.brokers.entry(id) {
            slot.insert((address.into(), code.into()));
            // As upstream: one more than before, not the largest id plus one.
            r.next_assign_broker_id += 1;
        }
    }

    fn apply_clean(&mut self, name: &str, ids: Option<&BTreeSet<i64>>) {
        let Some(ids) = ids.filter(|s| !s.is_empty()) else {
            self.replicas.remove(name);
            self.sync_states.remove(name);
            return;
        };
        if self.known(name).is_none() {
            return;
        }
        for id in ids {
            if let Some(r) = self.replicas.get_mut(name) {
                r.brokers.remove(id);
            }
            if let Some(s) = self.sync_states.get_mut(name) {
                s.sync_state_set.remove(id);
            }
        }
        if self
            .replicas
            .get(name)
            .is_some_and(|r| r.brokers.is_empty())
        {
            self.replicas.remove(name);
        }
        if self
            .sync_states
            .get(name)
            .is_some_and(|s| s.sync_state_set.is_empty())
        {
            self.sync_states.remove(name);
        }
    }
}
