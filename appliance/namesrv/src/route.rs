//! `RouteInfoManager`: the name server's route tables and every operation on them
//! (`features.md` §h.1–§h.4, `headers.md` §8).
//!
//! | table | key → value |
//! |---|---|
//! | `topic_queue_table` | topic → broker name → QueueData |
//! | `broker_addr_table` | broker name → BrokerData (cluster, id → address, zone, acting-master flag) |
//! | `cluster_addr_table` | cluster → broker names |
//! | `broker_live_table` | (cluster, address) → BrokerLiveInfo (last update, timeout, DataVersion, connection, HA address) |
//! | `filter_server_table` | (cluster, address) → filter servers (legacy) |
//! | `topic_queue_mapping_info_table` | topic → broker name → static-topic mapping |
//!
//! The manager is plain data: no lock, no clock, no socket. The caller (the processor)
//! holds it under one `RwLock`, as Java guards its tables with one read-write lock, and
//! passes "now" and the connection id in, so tests drive expiry with an injected clock.
//! Maps are ordered, so every list and route answer is deterministic.

use std::collections::{BTreeMap, BTreeSet};

use ringmq_remoting::body::cluster::{BrokerMemberGroup, ClusterInfo};
use ringmq_remoting::body::route::{BrokerData, QueueData, TopicRouteData, MASTER_ID};
use ringmq_remoting::body::topic::{
    perm, sys_flag, DataVersion, TopicConfig, TopicConfigAndMappingSerializeWrapper, TopicList,
    TopicQueueMappingInfo,
};

/// A broker that stops refreshing its registration for this long is removed, unless it
/// declared its own `heartbeatTimeoutMillis`.
pub const DEFAULT_BROKER_CHANNEL_EXPIRED_TIME_MS: i64 = 120_000;

/// Topics named with this prefix are never rewritten for acting master.
pub const SYNC_BROKER_MEMBER_GROUP_PREFIX: &str = "rmq_sys_SYNC_BROKER_MEMBER_";

/// Identifies a connection; the runtime's connection id (0 = unknown / in-process).
pub type ConnectionId = u64;

/// Key of the live and filter tables: a broker address within a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BrokerAddrInfo {
    pub cluster_name: String,
    pub broker_addr: String,
}

impl BrokerAddrInfo {
    pub fn new(cluster_name: &str, broker_addr: &str) -> Self {
        Self {
            cluster_name: cluster_name.to_owned(),
            broker_addr: broker_addr.to_owned(),
        }
    }
}

/// Liveness of one registered broker address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerLiveInfo {
    pub last_update_timestamp_ms: i64,
    pub heartbeat_timeout_millis: i64,
    pub data_version: DataVersion,
    pub connection_id: ConnectionId,
    pub ha_server_addr: String,
}

/// Everything REGISTER_BROKER carries (header + decoded body).
#[derive(Debug, Clone, Default)]
pub struct BrokerRegistration {
    pub cluster_name: String,
    pub broker_addr: String,
    pub broker_name: String,
    pub broker_id: i64,
    pub ha_server_addr: String,
    pub zone_name: Option<String>,
    pub heartbeat_timeout_millis: Option<i64>,
    /// `None` = an old broker that does not know the flag.
    pub enable_acting_master: Option<bool>,
    pub topic_config_wrapper: TopicConfigAndMappingSerializeWrapper,
    /// `None` = an old broker that sent no filter list.
    pub filter_server_list: Option<Vec<String>>,
}

/// Answer to a registration: for a slave, where its master is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegisterBrokerResult {
    pub ha_server_addr: Option<String>,
    pub master_addr: Option<String>,
}

/// One address to unregister (UNREGISTER_BROKER, channel close, expiry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnregisterRequest {
    pub cluster_name: String,
    pub broker_addr: String,
    pub broker_name: String,
    pub broker_id: i64,
}

/// A broker removed by the expiry scan; the caller closes its connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredBroker {
    pub addr: BrokerAddrInfo,
    pub connection_id: ConnectionId,
    pub last_update_timestamp_ms: i64,
    pub heartbeat_timeout_millis: i64,
}

/// Route-table behaviour switches taken from `NamesrvConfig`.
#[derive(Debug, Clone, Copy, Default)]
pub struct RouteOptions {
    pub support_acting_master: bool,
    pub delete_topic_with_broker_registration: bool,
}

/// The route tables.
#[derive(Debug, Default)]
pub struct RouteInfoManager {
    pub(crate) topic_queue_table: BTreeMap<String, BTreeMap<String, QueueData>>,
    pub(crate) broker_addr_table: BTreeMap<String, BrokerData>,
    pub(crate) cluster_addr_table: BTreeMap<String, BTreeSet<String>>,
    pub(crate) broker_live_table: BTreeMap<BrokerAddrInfo, BrokerLiveInfo>,
    pub(crate) filter_server_table: BTreeMap<BrokerAddrInfo, Vec<String>>,
    pub(crate) topic_queue_mapping_info_table:
        BTreeMap<String, BTreeMap<String, TopicQueueMappingInfo>>,
}

/// Why a registration was refused (answered SYSTEM_ERROR "register broker failed").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterRefusal {
    /// A single-topic registration from a broker id that never did a full registration.
    NotYetRegistered,
}

impl RouteInfoManager {
    pub fn new() -> Self {
        Self::default()
    }

    /// REGISTER_BROKER. `Err` = "register broker failed"; `Ok` with an empty result is
    /// also what an ignored (stale-state-version) registration returns, as upstream.
    pub fn register_broker(
        &mut self,
        reg: &BrokerRegistration,
        connection_id: ConnectionId,
        now_ms: i64,
        options: RouteOptions,
    ) -> Result<RegisterBrokerResult, RegisterRefusal> {
        let mut result = RegisterBrokerResult::default();
        let wrapper = &reg.topic_config_wrapper;
        let addr_key = BrokerAddrInfo::new(&reg.cluster_name, &reg.broker_addr);

        // Refusals first, so a refused registration leaves no trace in the tables.
        if let Some(data) = self.broker_addr_table.get(&reg.broker_name) {
            if let Some(old_addr) = data.broker_addrs.get(&reg.broker_id) {
                if *old_addr != reg.broker_addr {
                    let old_key = BrokerAddrInfo::new(&reg.cluster_name, old_addr);
                    if let Some(old_live) = self.broker_live_table.get(&old_key) {
                        let old_state = old_live.data_version.state_version;
                        let new_state = wrapper.data_version.state_version;
                        if old_state > new_state {
                            tracing::warn!(
                                cluster = %reg.cluster_name, broker = %reg.broker_name, id = reg.broker_id,
                                old_addr = %old_addr, old_state, new_addr = %reg.broker_addr, new_state,
                                "registration conflicts with a live broker holding a newer state version; ignored"
                            );
                            self.broker_live_table.remove(&addr_key);
                            return Ok(result);
                        }
                    }
                }
            }
        }
        let id_known = self
            .broker_addr_table
            .get(&reg.broker_name)
            .is_some_and(|d| d.broker_addrs.contains_key(&reg.broker_id));
        if !id_known && wrapper.topic_config_table.len() == 1 {
            tracing::warn!(
                broker = %reg.broker_name, id = reg.broker_id, addr = %reg.broker_addr,
                "single-topic registration before the broker's full registration; refused"
            );
            return Err(RegisterRefusal::NotYetRegistered);
        }

        self.cluster_addr_table
            .entry(reg.cluster_name.clone())
            .or_default()
            .insert(reg.broker_name.clone());

        let mut register_first = false;
        let broker_data = self
            .broker_addr_table
            .entry(reg.broker_name.clone())
            .or_insert_with(|| {
                register_first = true;
                BrokerData::new(&reg.cluster_name, &reg.broker_name)
            });
        let old_version_broker = reg.enable_acting_master.is_none();
        broker_data.enable_acting_master = reg.enable_acting_master.unwrap_or(false);
        broker_data.zone_name = reg.zone_name.clone();
        // One address holds one id: a slave promoted to master drops its old id entry.
        broker_data
            .broker_addrs
            .retain(|id, addr| !(*addr == reg.broker_addr && *id != reg.broker_id));
        let old_addr = broker_data
            .broker_addrs
            .insert(reg.broker_id, reg.broker_addr.clone());
        register_first |= old_addr.as_deref().is_none_or(str::is_empty);

        let is_master = reg.broker_id == MASTER_ID;
        let is_prime_slave = !old_version_broker
            && !is_master
            && broker_data.broker_addrs.keys().next().copied() == Some(reg.broker_id);
        let enable_acting_master = broker_data.enable_acting_master;

        if is_master || is_prime_slave {
            let prev_version = self
                .broker_live_table
                .get(&addr_key)
                .map(|l| l.data_version);
            let version_changed = prev_version != Some(wrapper.data_version);

            if options.delete_topic_with_broker_registration
                && wrapper.topic_queue_mapping_info_map.is_empty()
            {
                let stale: Vec<String> = self
                    .topic_queue_table
                    .iter()
                    .filter(|(topic, qds)| {
                        qds.contains_key(&reg.broker_name)
                            && !wrapper.topic_config_table.contains_key(*topic)
                    })
                    .map(|(topic, _)| topic.clone())
                    .collect();
                for topic in stale {
                    self.remove_queue_data(&topic, &reg.broker_name);
                }
            }

            for config in wrapper.topic_config_table.values() {
                let lacks_queue_data = self
                    .topic_queue_table
                    .get(&config.topic_name)
                    .is_none_or(|qds| !qds.contains_key(&reg.broker_name));
                if register_first || version_changed || lacks_queue_data {
                    let mut config = config.clone();
                    if is_prime_slave && enable_acting_master {
                        // A surviving slave serves as read-only acting master.
                        config.perm &= !perm::WRITE;
                    }
                    self.create_and_update_queue_data(&reg.broker_name, &config);
                }
            }

            if version_changed || register_first {
                for (topic, info) in &wrapper.topic_queue_mapping_info_map {
                    let bname = info.bname().unwrap_or(&reg.broker_name).to_owned();
                    self.topic_queue_mapping_info_table
                        .entry(topic.clone())
                        .or_default()
                        .insert(bname, info.clone());
                }
            }
        }

        let previous = self.broker_live_table.insert(
            addr_key.clone(),
            BrokerLiveInfo {
                last_update_timestamp_ms: now_ms,
                heartbeat_timeout_millis: reg
                    .heartbeat_timeout_millis
                    .unwrap_or(DEFAULT_BROKER_CHANNEL_EXPIRED_TIME_MS),
                data_version: wrapper.data_version,
                connection_id,
                ha_server_addr: reg.ha_server_addr.clone(),
            },
        );
        if previous.is_none() {
            tracing::info!(cluster = %reg.cluster_name, addr = %reg.broker_addr, ha = %reg.ha_server_addr, "new broker registered");
        }

        if let Some(filters) = &reg.filter_server_list {
            if filters.is_empty() {
                self.filter_server_table.remove(&addr_key);
            } else {
                self.filter_server_table.insert(addr_key, filters.clone());
            }
        }

        if !is_master {
            let master = self
                .broker_addr_table
                .get(&reg.broker_name)
                .and_then(|d| d.broker_addrs.get(&MASTER_ID));
            if let Some(master_addr) = master {
                if let Some(live) = self
                    .broker_live_table
                    .get(&BrokerAddrInfo::new(&reg.cluster_name, master_addr))
                {
                    result.ha_server_addr = Some(live.ha_server_addr.clone());
                    result.master_addr = Some(master_addr.clone());
                }
            }
        }
        Ok(result)
    }

    fn create_and_update_queue_data(&mut self, broker_name: &str, config: &TopicConfig) {
        let queue_data = QueueData {
            broker_name: broker_name.to_owned(),
            read_queue_nums: config.read_queue_nums,
            write_queue_nums: config.write_queue_nums,
            perm: config.perm,
            topic_sys_flag: config.topic_sys_flag,
        };
        let qds = self
            .topic_queue_table
            .entry(config.topic_name.clone())
            .or_default();
        match qds.insert(broker_name.to_owned(), queue_data.clone()) {
            None if qds.len() == 1 => {
                tracing::info!(topic = %config.topic_name, ?queue_data, "new topic registered")
            }
            Some(old) if old != queue_data => {
                tracing::info!(topic = %config.topic_name, ?old, new = ?queue_data, "topic changed")
            }
            _ => {}
        }
    }

    /// Removes one broker's queue data of `topic`; the topic goes when none is left.
    fn remove_queue_data(&mut self, topic: &str, broker_name: &str) {
        if let Some(qds) = self.topic_queue_table.get_mut(topic) {
            if qds.remove(broker_name).is_some() {
                tracing::info!(topic, broker_name, "removed one broker's queue data");
            }
            if qds.is_empty() {
                self.topic_queue_table.remove(topic);
            }
        }
    }

    /// UNREGISTER_BROKER, channel close and expiry, applied as one batch.
    pub fn unregister_brokers(&mut self, requests: &[UnregisterRequest]) {
        let mut removed_names = BTreeSet::new();
        let mut reduced_names = BTreeSet::new();
        for req in requests {
            let key = BrokerAddrInfo::new(&req.cluster_name, &req.broker_addr);
            let was_live = self.broker_live_table.remove(&key).is_some();
            self.filter_server_table.remove(&key);
            tracing::info!(cluster = %req.cluster_name, addr = %req.broker_addr, was_live, "unregister broker");

            let mut remove_name = false;
            if let Some(data) = self.broker_addr_table.get_mut(&req.broker_name) {
                data.broker_addrs.retain(|_, addr| *addr != req.broker_addr);
                if data.broker_addrs.is_empty() {
                    self.broker_addr_table.remove(&req.broker_name);
                    remove_name = true;
                }
            }
            if remove_name {
                if let Some(names) = self.cluster_addr_table.get_mut(&req.cluster_name) {
                    names.remove(&req.broker_name);
                    if names.is_empty() {
                        self.cluster_addr_table.remove(&req.cluster_name);
                        tracing::info!(cluster = %req.cluster_name, "last broker of the cluster gone");
                    }
                }
                removed_names.insert(req.broker_name.clone());
            } else {
                reduced_names.insert(req.broker_name.clone());
            }
        }

        let broker_addr_table = &self.broker_addr_table;
        self.topic_queue_table.retain(|_, qds| {
            for name in &removed_names {
                qds.remove(name);
            }
            for name in &reduced_names {
                let Some(qd) = qds.get_mut(name) else {
                    continue;
                };
                let Some(data) = broker_addr_table.get(name) else {
                    continue;
                };
                let no_master = data
                    .broker_addrs
                    .keys()
                    .next()
                    .is_none_or(|min_id| *min_id > MASTER_ID);
                if data.enable_acting_master && no_master {
                    qd.perm &= !perm::WRITE;
                }
            }
            !qds.is_empty()
        });
        for mappings in self.topic_queue_mapping_info_table.values_mut() {
            for name in &removed_names {
                mappings.remove(name);
            }
        }
        self.topic_queue_mapping_info_table
            .retain(|_, m| !m.is_empty());
    }

    /// Builds the unregister request for a live address (`setupUnRegisterRequest`).
    fn unregister_request_for(&self, key: &BrokerAddrInfo) -> Option<UnregisterRequest> {
        self.broker_addr_table
            .values()
            .filter(|d| d.cluster == key.cluster_name)
            .find_map(|d| {
                d.broker_addrs
                    .iter()
                    .find(|(_, addr)| **addr == key.broker_addr)
                    .map(|(id, _)| UnregisterRequest {
                        cluster_name: key.cluster_name.clone(),
                        broker_addr: key.broker_addr.clone(),
                        broker_name: d.broker_name.clone(),
                        broker_id: *id,
                    })
            })
    }

    /// Removes every broker whose registration is older than its timeout
    /// (`last + timeout < now`) and returns them so their connections can be closed.
    pub fn scan_not_active_broker(&mut self, now_ms: i64) -> Vec<ExpiredBroker> {
        let expired: Vec<ExpiredBroker> = self
            .broker_live_table
            .iter()
            .filter(|(_, live)| {
                live.last_update_timestamp_ms
                    .saturating_add(live.heartbeat_timeout_millis)
                    < now_ms
            })
            .map(|(key, live)| ExpiredBroker {
                addr: key.clone(),
                connection_id: live.connection_id,
                last_update_timestamp_ms: live.last_update_timestamp_ms,
                heartbeat_timeout_millis: live.heartbeat_timeout_millis,
            })
            .collect();
        for broker in &expired {
            tracing::warn!(
                cluster = %broker.addr.cluster_name, addr = %broker.addr.broker_addr,
                timeout_ms = broker.heartbeat_timeout_millis, "broker registration expired"
            );
            self.on_address_destroyed(&broker.addr);
        }
        expired
    }

    fn on_address_destroyed(&mut self, key: &BrokerAddrInfo) {
        match self.unregister_request_for(key) {
            Some(req) => self.unregister_brokers(&[req]),
            // Live entry without an address-table entry: just drop the liveness.
            None => {
                self.broker_live_table.remove(key);
                self.filter_server_table.remove(key);
            }
        }
    }

    /// A connection closed: unregister every broker address registered through it.
    /// Returns how many addresses were removed.
    pub fn on_connection_closed(&mut self, connection_id: ConnectionId) -> usize {
        let keys: Vec<BrokerAddrInfo> = self
            .broker_live_table
            .iter()
            .filter(|(_, live)| live.connection_id == connection_id)
            .map(|(k, _)| k.clone())
            .collect();
        for key in &keys {
            tracing::info!(cluster = %key.cluster_name, addr = %key.broker_addr, "broker connection closed; unregistering");
            self.on_address_destroyed(key);
        }
        keys.len()
    }

    /// BROKER_HEARTBEAT / QUERY_DATA_VERSION: refresh a live entry's timestamp.
    pub fn update_broker_info_update_timestamp(
        &mut self,
        cluster_name: &str,
        broker_addr: &str,
        now_ms: i64,
    ) -> bool {
        match self
            .broker_live_table
            .get_mut(&BrokerAddrInfo::new(cluster_name, broker_addr))
        {
            Some(live) => {
                live.last_update_timestamp_ms = now_ms;
                true
            }
            None => false,
        }
    }

    /// The DataVersion last registered by an address.
    pub fn query_broker_topic_config(
        &self,
        cluster_name: &str,
        broker_addr: &str,
    ) -> Option<DataVersion> {
        self.broker_live_table
            .get(&BrokerAddrInfo::new(cluster_name, broker_addr))
            .map(|l| l.data_version)
    }

    pub fn is_broker_topic_config_changed(
        &self,
        cluster_name: &str,
        broker_addr: &str,
        version: &DataVersion,
    ) -> bool {
        self.query_broker_topic_config(cluster_name, broker_addr)
            .as_ref()
            != Some(version)
    }

    /// GET_ROUTEINFO_BY_TOPIC: `None` when no live broker hosts the topic.
    pub fn pickup_topic_route_data(
        &self,
        topic: &str,
        options: RouteOptions,
    ) -> Option<TopicRouteData> {
        let qds = self.topic_queue_table.get(topic)?;
        let mut route = TopicRouteData {
            queue_datas: qds.values().cloned().collect(),
            ..Default::default()
        };
        for name in qds.keys() {
            let Some(data) = self.broker_addr_table.get(name) else {
                continue;
            };
            if !self.filter_server_table.is_empty() {
                for addr in data.broker_addrs.values() {
                    if let Some(list) = self
                        .filter_server_table
                        .get(&BrokerAddrInfo::new(&data.cluster, addr))
                    {
                        route.filter_server_table.insert(addr.clone(), list.clone());
                    }
                }
            }
            route.broker_datas.push(data.clone());
        }
        if route.broker_datas.is_empty() {
            return None;
        }
        route.topic_queue_mapping_by_broker =
            self.topic_queue_mapping_info_table.get(topic).cloned();

        if options.support_acting_master && !topic.starts_with(SYNC_BROKER_MEMBER_GROUP_PREFIX) {
            let queue_datas = &route.queue_datas;
            for data in &mut route.broker_datas {
                if data.broker_addrs.is_empty()
                    || data.broker_addrs.contains_key(&MASTER_ID)
                    || !data.enable_acting_master
                {
                    continue;
                }
                let read_only = queue_datas
                    .iter()
                    .find(|qd| qd.broker_name == data.broker_name)
                    .is_some_and(|qd| !perm::is_writeable(qd.perm));
                if read_only {
                    if let Some((&min_id, _)) = data.broker_addrs.iter().next() {
                        if let Some(addr) = data.broker_addrs.remove(&min_id) {
                            data.broker_addrs.insert(MASTER_ID, addr);
                        }
                    }
                }
            }
        }
        Some(route)
    }

    pub fn get_all_cluster_info(&self) -> ClusterInfo {
        ClusterInfo {
            broker_addr_table: self.broker_addr_table.clone(),
            cluster_addr_table: self.cluster_addr_table.clone(),
        }
    }

    pub fn get_all_topic_list(&self) -> TopicList {
        TopicList {
            topic_list: self.topic_queue_table.keys().cloned().collect(),
            broker_addr: None,
        }
    }

    /// REGISTER_TOPIC_IN_NAMESRV: install queue data for brokers already known. A queue
    /// data naming an unknown broker aborts the whole request (logged), as upstream.
    pub fn register_topic(&mut self, topic: &str, queue_datas: &[QueueData]) -> bool {
        if queue_datas.is_empty() {
            return false;
        }
        if let Some(bad) = queue_datas
            .iter()
            .find(|qd| !self.broker_addr_table.contains_key(&qd.broker_name))
        {
            tracing::warn!(topic, broker = %bad.broker_name, "register topic names an unknown broker; ignored");
            return false;
        }
        let qds = self.topic_queue_table.entry(topic.to_owned()).or_default();
        for qd in queue_datas {
            qds.insert(qd.broker_name.clone(), qd.clone());
        }
        true
    }

    /// DELETE_TOPIC_IN_NAMESRV without a cluster: the whole topic.
    pub fn delete_topic(&mut self, topic: &str) -> bool {
        self.topic_queue_mapping_info_table.remove(topic);
        self.topic_queue_table.remove(topic).is_some()
    }

    /// DELETE_TOPIC_IN_NAMESRV with a cluster: only that cluster's brokers' queue data.
    /// `false` when the cluster is unknown.
    pub fn delete_topic_in_cluster(&mut self, topic: &str, cluster_name: &str) -> bool {
        let Some(names) = self.cluster_addr_table.get(cluster_name).cloned() else {
            return false;
        };
        for name in &names {
            self.remove_queue_data(topic, name);
        }
        true
    }

    /// WIPE_WRITE_PERM_OF_BROKER: clear the write bit on every topic of `broker_name`.
    pub fn wipe_write_perm_of_broker(&mut self, broker_name: &str) -> i32 {
        self.edit_perm_of_broker(broker_name, |p| p & !perm::WRITE)
    }

    /// ADD_WRITE_PERM_OF_BROKER: set every topic of `broker_name` to read+write.
    pub fn add_write_perm_of_broker(&mut self, broker_name: &str) -> i32 {
        self.edit_perm_of_broker(broker_name, |_| perm::READ | perm::WRITE)
    }

    fn edit_perm_of_broker(&mut self, broker_name: &str, edit: impl Fn(i32) -> i32) -> i32 {
        let mut count = 0;
        for qds in self.topic_queue_table.values_mut() {
            if let Some(qd) = qds.get_mut(broker_name) {
                qd.perm = edit(qd.perm);
                count += 1;
            }
        }
        count
    }

    /// GET_SYSTEM_TOPIC_LIST_FROM_NS: cluster names and broker names (each is a system
    /// topic), plus one broker address to ask for the rest.
    pub fn get_system_topic_list(&self) -> TopicList {
        let mut list = TopicList::default();
        for (cluster, names) in &self.cluster_addr_table {
            list.topic_list.insert(cluster.clone());
            list.topic_list.extend(names.iter().cloned());
        }
        list.broker_addr = self
            .broker_addr_table
            .values()
            .find_map(|d| d.broker_addrs.values().next().cloned());
        list
    }

    /// GET_TOPICS_BY_CLUSTER; `None` when the cluster is unknown.
    pub fn get_topics_by_cluster(&self, cluster_name: &str) -> Option<TopicList> {
        let names = self.cluster_addr_table.get(cluster_name)?;
        let topic_list = self
            .topic_queue_table
            .iter()
            .filter(|(_, qds)| names.iter().any(|n| qds.contains_key(n)))
            .map(|(t, _)| t.clone())
            .collect();
        Some(TopicList {
            topic_list,
            broker_addr: None,
        })
    }

    /// The unit-topic lists (311/312/313), judged on the first QueueData's sys flag.
    pub fn get_topics_by_sys_flag(&self, pred: impl Fn(i32) -> bool) -> TopicList {
        let topic_list = self
            .topic_queue_table
            .iter()
            .filter(|(_, qds)| {
                qds.values()
                    .next()
                    .is_some_and(|qd| pred(qd.topic_sys_flag))
            })
            .map(|(t, _)| t.clone())
            .collect();
        TopicList {
            topic_list,
            broker_addr: None,
        }
    }

    pub fn get_unit_topics(&self) -> TopicList {
        self.get_topics_by_sys_flag(sys_flag::has_unit)
    }

    pub fn get_has_unit_sub_topic_list(&self) -> TopicList {
        self.get_topics_by_sys_flag(sys_flag::has_unit_sub)
    }

    pub fn get_has_unit_sub_un_unit_topic_list(&self) -> TopicList {
        self.get_topics_by_sys_flag(|f| !sys_flag::has_unit(f) && sys_flag::has_unit_sub(f))
    }

    /// GET_BROKER_MEMBER_GROUP: the replica set (empty when unknown).
    pub fn get_broker_member_group(
        &self,
        cluster_name: &str,
        broker_name: &str,
    ) -> BrokerMemberGroup {
        BrokerMemberGroup {
            cluster: cluster_name.to_owned(),
            broker_name: broker_name.to_owned(),
            broker_addrs: self
                .broker_addr_table
                .get(broker_name)
                .map(|d| d.broker_addrs.clone())
                .unwrap_or_default(),
        }
    }

    /// Read-only views for tests and diagnostics.
    pub fn broker_live_info(
        &self,
        cluster_name: &str,
        broker_addr: &str,
    ) -> Option<&BrokerLiveInfo> {
        self.broker_live_table
            .get(&BrokerAddrInfo::new(cluster_name, broker_addr))
    }

    pub fn queue_datas(&self, topic: &str) -> Option<&BTreeMap<String, QueueData>> {
        self.topic_queue_table.get(topic)
    }

    pub fn broker_data(&self, broker_name: &str) -> Option<&BrokerData> {
        self.broker_addr_table.get(broker_name)
    }

    pub fn filter_servers(&self, cluster_name: &str, broker_addr: &str) -> Option<&Vec<String>> {
        self.filter_server_table
            .get(&BrokerAddrInfo::new(cluster_name, broker_addr))
    }

    pub fn live_broker_count(&self) -> usize {
        self.broker_live_table.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str, queues: i32) -> TopicConfig {
        let mut tc = TopicConfig::new(name);
        tc.read_queue_nums = queues;
        tc.write_queue_nums = queues;
        tc
    }

    fn registration(
        name: &str,
        id: i64,
        addr: &str,
        topics: &[TopicConfig],
        counter: i64,
    ) -> BrokerRegistration {
        let mut wrapper = TopicConfigAndMappingSerializeWrapper {
            data_version: DataVersion {
                state_version: 0,
                timestamp: 1,
                counter,
            },
            ..Default::default()
        };
        for t in topics {
            wrapper
                .topic_config_table
                .insert(t.topic_name.clone(), t.clone());
        }
        BrokerRegistration {
            cluster_name: "DefaultCluster".into(),
            broker_addr: addr.into(),
            broker_name: name.into(),
            broker_id: id,
            ha_server_addr: format!("{addr}-ha"),
            enable_acting_master: Some(false),
            topic_config_wrapper: wrapper,
            filter_server_list: Some(Vec::new()),
            ..Default::default()
        }
    }

    const OPTS: RouteOptions = RouteOptions {
        support_acting_master: false,
        delete_topic_with_broker_registration: false,
    };

    #[test]
    fn master_registration_fills_every_table() {
        let mut rim = RouteInfoManager::new();
        let reg = registration(
            "broker-a",
            0,
            "10.0.0.1:10911",
            &[topic("T1", 4), topic("TBW102", 8)],
            1,
        );
        let result = rim.register_broker(&reg, 7, 1_000, OPTS).unwrap();
        assert_eq!(result, RegisterBrokerResult::default());
        assert_eq!(
            rim.cluster_addr_table["DefaultCluster"],
            ["broker-a".to_string()].into()
        );
        assert_eq!(
            rim.broker_data("broker-a").unwrap().broker_addrs[&0],
            "10.0.0.1:10911"
        );
        assert_eq!(
            rim.queue_datas("T1").unwrap()["broker-a"].write_queue_nums,
            4
        );
        let live = rim
            .broker_live_info("DefaultCluster", "10.0.0.1:10911")
            .unwrap();
        assert_eq!(
            (
                live.last_update_timestamp_ms,
                live.heartbeat_timeout_millis,
                live.connection_id
            ),
            (1_000, 120_000, 7)
        );
        let route = rim.pickup_topic_route_data("T1", OPTS).unwrap();
        assert_eq!(route.broker_datas.len(), 1);
        assert!(rim.pickup_topic_route_data("nope", OPTS).is_none());
    }

    #[test]
    fn slave_gets_master_addresses_and_does_not_touch_queues() {
        let mut rim = RouteInfoManager::new();
        rim.register_broker(
            &registration("b", 0, "m:1", &[topic("T", 4), topic("U", 1)], 1),
            1,
            0,
            OPTS,
        )
        .unwrap();
        let mut slave = registration("b", 1, "s:1", &[topic("T", 99), topic("U", 1)], 5);
        slave.enable_acting_master = None;
        let result = rim.register_broker(&slave, 2, 0, OPTS).unwrap();
        assert_eq!(result.master_addr.as_deref(), Some("m:1"));
        assert_eq!(result.ha_server_addr.as_deref(), Some("m:1-ha"));
        assert_eq!(
            rim.queue_datas("T").unwrap()["b"].read_queue_nums,
            4,
            "slave topics ignored"
        );
        assert_eq!(rim.broker_data("b").unwrap().broker_addrs.len(), 2);
    }

    #[test]
    fn unchanged_data_version_skips_queue_rewrite_but_changed_one_applies() {
        let mut rim = RouteInfoManager::new();
        rim.register_broker(
            &registration("b", 0, "m:1", &[topic("T", 4), topic("U", 4)], 1),
            1,
            0,
            OPTS,
        )
        .unwrap();
        // Someone edits the route in between (e.g. wipe perm); the same version must not undo it.
        assert_eq!(rim.wipe_write_perm_of_broker("b"), 2);
        rim.register_broker(
            &registration("b", 0, "m:1", &[topic("T", 4), topic("U", 4)], 1),
            1,
            10,
            OPTS,
        )
        .unwrap();
        assert_eq!(rim.queue_datas("T").unwrap()["b"].perm, perm::READ);
        assert_eq!(
            rim.broker_live_info("DefaultCluster", "m:1")
                .unwrap()
                .last_update_timestamp_ms,
            10
        );
        // A new version rewrites from the body.
        rim.register_broker(
            &registration("b", 0, "m:1", &[topic("T", 8), topic("U", 4)], 2),
            1,
            20,
            OPTS,
        )
        .unwrap();
        assert_eq!(
            rim.queue_datas("T").unwrap()["b"].perm,
            perm::READ | perm::WRITE
        );
        assert_eq!(rim.queue_datas("T").unwrap()["b"].read_queue_nums, 8);
    }

    #[test]
    fn single_topic_registration_before_full_one_is_refused_without_trace() {
        let mut rim = RouteInfoManager::new();
        let err = rim.register_broker(
            &registration("b", 0, "m:1", &[topic("T", 4)], 1),
            1,
            0,
            OPTS,
        );
        assert_eq!(err, Err(RegisterRefusal::NotYetRegistered));
        assert!(rim.get_all_cluster_info().broker_addr_table.is_empty());
        assert!(rim.get_all_cluster_info().cluster_addr_table.is_empty());
    }

    #[test]
    fn slave_promoted_to_master_keeps_one_id_per_address() {
        let mut rim = RouteInfoManager::new();
        rim.register_broker(
            &registration("b", 0, "m:1", &[topic("T", 4), topic("U", 4)], 1),
            1,
            0,
            OPTS,
        )
        .unwrap();
        rim.register_broker(
            &registration("b", 1, "s:1", &[topic("T", 4), topic("U", 4)], 1),
            2,
            0,
            OPTS,
        )
        .unwrap();
        rim.unregister_brokers(&[UnregisterRequest {
            cluster_name: "DefaultCluster".into(),
            broker_addr: "m:1".into(),
            broker_name: "b".into(),
            broker_id: 0,
        }]);
        rim.register_broker(
            &registration("b", 0, "s:1", &[topic("T", 4), topic("U", 4)], 2),
            2,
            0,
            OPTS,
        )
        .unwrap();
        let addrs = &rim.broker_data("b").unwrap().broker_addrs;
        assert_eq!(addrs.len(), 1);
        assert_eq!(addrs[&0], "s:1");
    }

    #[test]
    fn stale_state_version_is_ignored() {
        let mut rim = RouteInfoManager::new();
        let mut first = registration("b", 0, "m:1", &[topic("T", 4), topic("U", 4)], 1);
        first.topic_config_wrapper.data_version.state_version = 5;
        rim.register_broker(&first, 1, 0, OPTS).unwrap();
        let mut other = registration("b", 0, "m:2", &[topic("T", 4), topic("U", 4)], 1);
        other.topic_config_wrapper.data_version.state_version = 4;
        assert_eq!(
            rim.register_broker(&other, 2, 0, OPTS),
            Ok(RegisterBrokerResult::default())
        );
        assert_eq!(rim.broker_data("b").unwrap().broker_addrs[&0], "m:1");
        assert!(rim.broker_live_info("DefaultCluster", "m:2").is_none());
    }

    #[test]
    fn unregister_removes_routes_and_empty_clusters() {
        let mut rim = RouteInfoManager::new();
        rim.register_broker(
            &registration("a", 0, "a:1", &[topic("T", 4), topic("A", 1)], 1),
            1,
            0,
            OPTS,
        )
        .unwrap();
        rim.register_broker(
            &registration("b", 0, "b:1", &[topic("T", 4), topic("B", 1)], 1),
            2,
            0,
            OPTS,
        )
        .unwrap();
        rim.unregister_brokers(&[UnregisterRequest {
            cluster_name: "DefaultCluster".into(),
            broker_addr: "a:1".into(),
            broker_name: "a".into(),
            broker_id: 0,
        }]);
        assert!(rim.queue_datas("A").is_none());
        assert_eq!(rim.queue_datas("T").unwrap().len(), 1);
        assert_eq!(rim.cluster_addr_table["DefaultCluster"].len(), 1);
        assert_eq!(rim.on_connection_closed(2), 1);
        assert!(rim.cluster_addr_table.is_empty());
        assert!(rim.topic_queue_table.is_empty());
        assert_eq!(rim.live_broker_count(), 0);
    }

    #[test]
    fn expiry_honours_declared_timeouts() {
        let mut rim = RouteInfoManager::new();
        rim.register_broker(
            &registration("a", 0, "a:1", &[topic("T", 4), topic("A", 1)], 1),
            1,
            0,
            OPTS,
        )
        .unwrap();
        let mut short = registration("b", 0, "b:1", &[topic("T", 4), topic("B", 1)], 1);
        short.heartbeat_timeout_millis = Some(10_000);
        rim.register_broker(&short, 2, 0, OPTS).unwrap();
        assert!(
            rim.scan_not_active_broker(10_000).is_empty(),
            "boundary: last + timeout == now is alive"
        );
        let expired = rim.scan_not_active_broker(10_001);
        assert_eq!(expired.len(), 1);
        assert_eq!(
            (
                expired[0].addr.broker_addr.as_str(),
                expired[0].connection_id
            ),
            ("b:1", 2)
        );
        assert!(rim.queue_datas("B").is_none());
        assert!(rim.update_broker_info_update_timestamp("DefaultCluster", "a:1", 100_000));
        assert!(rim.scan_not_active_broker(220_000).is_empty());
        assert_eq!(rim.scan_not_active_broker(220_001).len(), 1);
        assert!(rim.get_all_topic_list().topic_list.is_empty());
    }

    #[test]
    fn acting_master_route_rewrite() {
        let opts = RouteOptions {
            support_acting_master: true,
            ..OPTS
        };
        let mut rim = RouteInfoManager::new();
        let mut master = registration("b", 0, "m:1", &[topic("T", 4), topic("U", 4)], 1);
        master.enable_acting_master = Some(true);
        rim.register_broker(&master, 1, 0, opts).unwrap();
        let mut slave = registration("b", 1, "s:1", &[topic("T", 4), topic("U", 4)], 1);
        slave.enable_acting_master = Some(true);
        rim.register_broker(&slave, 2, 0, opts).unwrap();
        rim.on_connection_closed(1);
        // Master gone: write perm wiped, and the slave is presented as id 0.
        assert_eq!(rim.queue_datas("T").unwrap()["b"].perm, perm::READ);
        let route = rim.pickup_topic_route_data("T", opts).unwrap();
        assert_eq!(
            route.broker_datas[0]
                .broker_addrs
                .get(&0)
                .map(String::as_str),
            Some("s:1")
        );
        let plain = rim.pickup_topic_route_data("T", OPTS).unwrap();
        assert!(!plain.broker_datas[0].broker_addrs.contains_key(&0));
        // The prime slave re-registering keeps the topics read-only.
        let mut again = registration("b", 1, "s:1", &[topic("T", 4), topic("U", 4)], 2);
        again.enable_acting_master = Some(true);
        rim.register_broker(&again, 2, 0, opts).unwrap();
        assert_eq!(rim.queue_datas("U").unwrap()["b"].perm, perm::READ);
    }

    #[test]
    fn topic_admin_operations() {
        let mut rim = RouteInfoManager::new();
        let mut unit = topic("UNIT", 1);
        unit.topic_sys_flag = sys_flag::UNIT;
        let mut sub = topic("SUB", 1);
        sub.topic_sys_flag = sys_flag::UNIT_SUB;
        rim.register_broker(
            &registration("a", 0, "a:1", &[topic("T", 4), unit, sub], 1),
            1,
            0,
            OPTS,
        )
        .unwrap();
        assert_eq!(
            rim.get_unit_topics().topic_list,
            ["UNIT".to_string()].into()
        );
        assert_eq!(
            rim.get_has_unit_sub_topic_list().topic_list,
            ["SUB".to_string()].into()
        );
        assert_eq!(
            rim.get_has_unit_sub_un_unit_topic_list().topic_list,
            ["SUB".to_string()].into()
        );
        assert_eq!(
            rim.get_topics_by_cluster("DefaultCluster")
                .unwrap()
                .topic_list
                .len(),
            3
        );
        assert!(rim.get_topics_by_cluster("nope").is_none());
        let sys = rim.get_system_topic_list();
        assert_eq!(
            sys.topic_list,
            ["DefaultCluster".to_string(), "a".to_string()].into()
        );
        assert_eq!(sys.broker_addr.as_deref(), Some("a:1"));

        let qd = QueueData {
            broker_name: "a".into(),
            read_queue_nums: 2,
            write_queue_nums: 2,
            perm: 6,
            topic_sys_flag: 0,
        };
        assert!(rim.register_topic("NEW", std::slice::from_ref(&qd)));
        let unknown = QueueData {
            broker_name: "zz".into(),
            ..qd
        };
        assert!(!rim.register_topic("NEW2", &[unknown]));
        assert!(rim.queue_datas("NEW2").is_none());

        assert!(!rim.delete_topic_in_cluster("NEW", "nope"));
        assert!(rim.delete_topic_in_cluster("NEW", "DefaultCluster"));
        assert!(rim.queue_datas("NEW").is_none());
        assert!(rim.delete_topic("T"));
        assert!(!rim.delete_topic("T"));
        assert_eq!(rim.add_write_perm_of_broker("a"), 2);
        assert_eq!(
            rim.get_broker_member_group("DefaultCluster", "a")
                .broker_addrs
                .len(),
            1
        );
        assert!(rim
            .get_broker_member_group("DefaultCluster", "zz")
            .broker_addrs
            .is_empty());
    }

    #[test]
    fn filter_servers_and_delete_with_registration() {
        let opts = RouteOptions {
            delete_topic_with_broker_registration: true,
            ..OPTS
        };
        let mut rim = RouteInfoManager::new();
        let mut reg = registration("a", 0, "a:1", &[topic("T", 4), topic("OLD", 1)], 1);
        reg.filter_server_list = Some(vec!["f:1".into()]);
        rim.register_broker(&reg, 1, 0, opts).unwrap();
        assert_eq!(
            rim.filter_servers("DefaultCluster", "a:1").unwrap(),
            &vec!["f:1".to_string()]
        );
        let route = rim.pickup_topic_route_data("T", opts).unwrap();
        assert_eq!(route.filter_server_table["a:1"], vec!["f:1".to_string()]);
        let again = registration("a", 0, "a:1", &[topic("T", 4), topic("NEW", 1)], 2);
        rim.register_broker(&again, 1, 0, opts).unwrap();
        assert!(rim.queue_datas("OLD").is_none());
        assert!(rim.filter_servers("DefaultCluster", "a:1").is_none());
    }
}
