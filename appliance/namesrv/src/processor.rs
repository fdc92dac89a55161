//! `NamesrvProcessor`: answers every name-server request code (`remoting.md` §11, group
//! "Name server"; `headers.md` §8) against the route tables, the KV store and the config.
//!
//! Sans-IO: [`NamesrvProcessor::process`] takes a decoded request and who sent it and
//! returns the response (or `None` for oneway requests). The runtime glue (`server.rs`)
//! calls it from network cores, so nothing here blocks: tables sit behind `RwLock`s held
//! for microseconds, and file writes go to the [`Persister`]. The clock is injected, so
//! tests drive broker expiry and the start-up wait deterministically.
//!
//! Bad input never panics: a missing or malformed header field, or an undecodable body,
//! is answered SYSTEM_ERROR with a remark naming the field (what Java's decoder does), and
//! logged with the peer's address.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use ringmq_remoting::body::kv::Properties;
use ringmq_remoting::body::register::RegisterBrokerBody;
use ringmq_remoting::body::route::TopicRouteData;
use ringmq_remoting::body::topic::DataVersion;
use ringmq_remoting::header::namesrv::{
    AddWritePermOfBrokerRequestHeader, AddWritePermOfBrokerResponseHeader,
    BrokerHeartbeatRequestHeader, DeleteKvConfigRequestHeader, DeleteTopicFromNamesrvRequestHeader,
    GetBrokerMemberGroupRequestHeader, GetKvConfigRequestHeader, GetKvConfigResponseHeader,
    GetKvListByNamespaceRequestHeader, GetRouteInfoRequestHeader, GetTopicsByClusterRequestHeader,
    PutKvConfigRequestHeader, QueryDataVersionRequestHeader, QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader, RegisterBrokerResponseHeader, RegisterTopicRequestHeader,
    UnRegisterBrokerRequestHeader, WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
};
use ringmq_remoting::header::{CommandHeader, FieldValue, HeaderError};
use ringmq_remoting::json::{BodyError, KeyStyle};
use ringmq_remoting::{RemotingCommand, RequestCode, ResponseCode};

use crate::config::NamesrvConfig;
use crate::kvconfig::{KvConfigManager, Persister, NAMESPACE_ORDER_TOPIC_CONFIG};
use crate::route::{
    BrokerRegistration, ConnectionId, ExpiredBroker, RouteInfoManager, RouteOptions,
    UnregisterRequest,
};
use ringmq_sync::RwLockExt;

/// `MQVersion` ordinal of V4_9_4: from here Java sends clients standard-JSON routes.
pub const VERSION_V4_9_4: i32 = 401;

/// The FAQ suffix Java appends to TOPIC_NOT_EXIST remarks (`FAQUrl.suggestTodo`).
pub const APPLY_TOPIC_FAQ_SUFFIX: &str =
    "\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details.";

/// extFields keys of zone-aware routing (`MixAll.ZONE_NAME` / `ZONE_MODE`).
pub const ZONE_NAME_KEY: &str = "__ZONE_NAME";
pub const ZONE_MODE_KEY: &str = "__ZONE_MODE";

/// Milliseconds since the epoch; injected so tests control time.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The wall clock.
pub fn system_clock() -> Clock {
    Arc::new(ringmq_sync::now_ms)
}

/// Who sent a request: the connection (for broker liveness) and its address (for logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub connection_id: ConnectionId,
    pub addr: SocketAddr,
}

/// A failed request: the response code and remark to answer with.
#[derive(Debug)]
struct Failure {
    code: i32,
    remark: String,
}

impl Failure {
    fn new(code: ResponseCode, remark: impl Into<String>) -> Self {
        Self {
            code: code.code(),
            remark: remark.into(),
        }
    }
}

impl From<HeaderError> for Failure {
    fn from(e: HeaderError) -> Self {
        Failure::new(ResponseCode::SystemError, e.to_string())
    }
}

impl From<BodyError> for Failure {
    fn from(e: BodyError) -> Self {
        Failure::new(ResponseCode::SystemError, e.to_string())
    }
}

type Outcome = Result<RemotingCommand, Failure>;

/// The name server's request processor and state.
pub struct NamesrvProcessor {
    config: RwLock<NamesrvConfig>,
    routes: RwLock<RouteInfoManager>,
    kv: RwLock<KvConfigManager>,
    persister: Persister,
    clock: Clock,
    startup_ms: i64,
    legacy_route_json: AtomicBool,
}

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    // A panic elsewhere must not take the name server down with it.
    lock.read_unpoisoned()
}

fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write_unpoisoned()
}

impl NamesrvProcessor {
    pub fn new(
        config: NamesrvConfig,
        kv: KvConfigManager,
        persister: Persister,
        clock: Clock,
    ) -> Self {
        let startup_ms = clock();
        Self {
            config: RwLock::new(config),
            routes: RwLock::new(RouteInfoManager::new()),
            kv: RwLock::new(kv),
            persister,
            clock,
            startup_ms,
            legacy_route_json: AtomicBool::new(false),
        }
    }

    /// Answer clients older than V4_9_4 (that did not ask for standard JSON) with
    /// fastjson's legacy bare-key route form, exactly as a Java name server does. Off by
    /// default: the standard form is read by every known client and by strict parsers.
    pub fn set_legacy_route_json(&self, enabled: bool) {
        self.legacy_route_json.store(enabled, Ordering::Relaxed);
    }

    /// Stops the persister after what is queued (server shutdown).
    pub fn close_persister(&self) {
        self.persister.close();
    }

    pub fn now_ms(&self) -> i64 {
        (self.clock)()
    }

    /// Read access to the route tables (tests, diagnostics).
    pub fn routes(&self) -> RwLockReadGuard<'_, RouteInfoManager> {
        read(&self.routes)
    }

    pub fn config(&self) -> NamesrvConfig {
        read(&self.config).clone()
    }

    pub fn kv_get(&self, namespace: &str, key: &str) -> Option<String> {
        read(&self.kv).get(namespace, key).map(str::to_owned)
    }

    fn route_options(&self) -> RouteOptions {
        let c = read(&self.config);
        RouteOptions {
            support_acting_master: c.support_acting_master,
            delete_topic_with_broker_registration: c.delete_topic_with_broker_registration,
        }
    }

    /// Removes brokers whose registration expired at `now_ms`; returns them so the caller
    /// can close their connections.
    pub fn scan_not_active_broker(&self, now_ms: i64) -> Vec<ExpiredBroker> {
        write(&self.routes).scan_not_active_broker(now_ms)
    }

    /// A connection closed: the brokers registered through it are gone.
    pub fn on_connection_closed(&self, connection_id: ConnectionId) -> usize {
        write(&self.routes).on_connection_closed(connection_id)
    }

    /// Answers one request; `None` for oneway requests (never answered).
    pub fn process(&self, request: &RemotingCommand, peer: &Peer) -> Option<RemotingCommand> {
        let outcome = match RequestCode::from_code(request.code) {
            Some(code) => self.dispatch(code, request, peer),
            None => Err(self.not_supported(request, peer)),
        };
        let response = match outcome {
            Ok(response) => response,
            Err(failure) => {
                if failure.code != ResponseCode::RequestCodeNotSupported.code() {
                    tracing::warn!(
                        request_code = request.code, response_code = failure.code, peer = %peer.addr,
                        "request refused: {}", failure.remark
                    );
                }
                request.response_to(failure.code, Some(failure.remark))
            }
        };
        (!request.is_oneway()).then_some(response)
    }

    fn not_supported(&self, request: &RemotingCommand, peer: &Peer) -> Failure {
        tracing::warn!(request_code = request.code, peer = %peer.addr, "request code not supported by the name server");
        Failure::new(
            ResponseCode::RequestCodeNotSupported,
            format!(" request type {} not supported", request.code),
        )
    }

    fn dispatch(&self, code: RequestCode, req: &RemotingCommand, peer: &Peer) -> Outcome {
        match code {
            RequestCode::PutKvConfig => self.put_kv_config(req),
            RequestCode::GetKvConfig => self.get_kv_config(req),
            RequestCode::DeleteKvConfig => self.delete_kv_config(req),
            RequestCode::QueryDataVersion => self.query_data_version(req),
            RequestCode::RegisterBroker => self.register_broker(req, peer),
            RequestCode::UnregisterBroker => self.unregister_broker(req),
            RequestCode::BrokerHeartbeat => self.broker_heartbeat(req),
            RequestCode::GetBrokerMemberGroup => self.get_broker_member_group(req),
            RequestCode::GetBrokerClusterInfo => Ok(self.success(req).with_body(
                read(&self.routes)
                    .get_all_cluster_info()
                    .encode(KeyStyle::Quoted),
            )),
            RequestCode::WipeWritePermOfBroker => self.edit_write_perm(req, peer, false),
            RequestCode::AddWritePermOfBroker => self.edit_write_perm(req, peer, true),
            RequestCode::GetAllTopicListFromNameserver => {
                if !read(&self.config).enable_all_topic_list {
                    return Err(Failure::new(ResponseCode::SystemError, "disable"));
                }
                Ok(self
                    .success(req)
                    .with_body(read(&self.routes).get_all_topic_list().encode()))
            }
            RequestCode::DeleteTopicInNamesrv => self.delete_topic(req),
            RequestCode::RegisterTopicInNamesrv => self.register_topic(req),
            RequestCode::GetKvlistByNamespace => self.get_kv_list_by_namespace(req),
            RequestCode::GetTopicsByCluster => self.get_topics_by_cluster(req),
            RequestCode::GetSystemTopicListFromNs => Ok(self
                .success(req)
                .with_body(read(&self.routes).get_system_topic_list().encode())),
            RequestCode::GetUnitTopicList
            | RequestCode::GetHasUnitSubTopicList
            | RequestCode::GetHasUnitSubUnunitTopicList => {
                if !read(&self.config).enable_topic_list {
                    return Err(Failure::new(ResponseCode::SystemError, "disable"));
                }
                let routes = read(&self.routes);
                let list = match code {
                    RequestCode::GetUnitTopicList => routes.get_unit_topics(),
                    RequestCode::GetHasUnitSubTopicList => routes.get_has_unit_sub_topic_list(),
                    _ => routes.get_has_unit_sub_un_unit_topic_list(),
                };
                Ok(self.success(req).with_body(list.encode()))
            }
            RequestCode::UpdateNamesrvConfig => self.update_config(req, peer),
            RequestCode::GetNamesrvConfig => Ok(self
                .success(req)
                .with_body(read(&self.config).to_properties_text())),
            RequestCode::GetRouteinfoByTopic => self.get_route_info_by_topic(req),
            _ => Err(self.not_supported(req, peer)),
        }
    }

    fn success(&self, req: &RemotingCommand) -> RemotingCommand {
        req.response_to(ResponseCode::Success.code(), None)
    }

    // ----- KV config -------------------------------------------------------------------

    fn persist_kv(&self, kv: &KvConfigManager) {
        // Called with the KV write lock held, so queued snapshots stay in change order.
        let path = read(&self.config).kv_config_path();
        self.persister.persist(&path, kv.snapshot_json());
    }

    fn put_kv_config(&self, req: &RemotingCommand) -> Outcome {
        let h = PutKvConfigRequestHeader::decode(&req.ext_fields)?;
        let mut kv = write(&self.kv);
        kv.put(&h.namespace, &h.key, &h.value);
        self.persist_kv(&kv);
        Ok(self.success(req))
    }

    fn get_kv_config(&self, req: &RemotingCommand) -> Outcome {
        let h = GetKvConfigRequestHeader::decode(&req.ext_fields)?;
        let (namespace, key) = (&h.namespace, &h.key);
        match read(&self.kv).get(namespace, key) {
            Some(value) => {
                let mut response = self.success(req);
                GetKvConfigResponseHeader {
                    value: Some(value.to_owned()),
                }
                .encode(&mut response.ext_fields);
                Ok(response)
            }
            None => Err(Failure::new(
                ResponseCode::QueryNotFound,
                format!("No config item, Namespace: {namespace} Key: {key}"),
            )),
        }
    }

    fn delete_kv_config(&self, req: &RemotingCommand) -> Outcome {
        let h = DeleteKvConfigRequestHeader::decode(&req.ext_fields)?;
        let mut kv = write(&self.kv);
        kv.delete(&h.namespace, &h.key);
        self.persist_kv(&kv);
        Ok(self.success(req))
    }

    fn get_kv_list_by_namespace(&self, req: &RemotingCommand) -> Outcome {
        let namespace = GetKvListByNamespaceRequestHeader::decode(&req.ext_fields)?.namespace;
        match read(&self.kv).get_kv_list_by_namespace(&namespace) {
            Some(table) => Ok(self.success(req).with_body(table.encode())),
            None => Err(Failure::new(
                ResponseCode::QueryNotFound,
                format!("No config item, Namespace: {namespace}"),
            )),
        }
    }

    // ----- broker registration ------------------------------------------------------------

    fn register_broker(&self, req: &RemotingCommand, peer: &Peer) -> Outcome {
        let h = RegisterBrokerRequestHeader::decode(&req.ext_fields)?;
        let body_crc32 = h.body_crc32;

        if body_crc32 != 0 {
            let actual = (crc32fast::hash(&req.body) & 0x7FFF_FFFF) as i32;
            if actual != body_crc32 {
                tracing::warn!(peer = %peer.addr, declared = body_crc32, actual, "register broker: body crc32 mismatch");
                return Err(Failure::new(ResponseCode::SystemError, "crc32 not match"));
            }
        }
        let body =
            RegisterBrokerBody::decode(&req.body, h.compressed, req.version).map_err(|e| {
                Failure::new(
                    ResponseCode::SystemError,
                    format!("Failed to decode RegisterBrokerBody: {e}"),
                )
            })?;
        // An old broker (< V3_0_11) sends no filter list; otherwise it is always present.
        let filter_server_list = (req.version >= ringmq_remoting::body::register::VERSION_V3_0_11)
            .then_some(body.filter_server_list);
        let registration = BrokerRegistration {
            cluster_name: h.cluster_name,
            broker_addr: h.broker_addr,
            broker_name: h.broker_name,
            broker_id: h.broker_id,
            ha_server_addr: h.ha_server_addr,
            zone_name: h.zone_name,
            heartbeat_timeout_millis: h.heartbeat_timeout_millis,
            enable_acting_master: h.enable_acting_master,
            topic_config_wrapper: body.topic_config_serialize_wrapper,
            filter_server_list,
        };
        let options = self.route_options();
        let now_ms = self.now_ms();
        let result = write(&self.routes)
            .register_broker(&registration, peer.connection_id, now_ms, options)
            .map_err(|_| Failure::new(ResponseCode::SystemError, "register broker failed"))?;

        let mut response = self.success(req);
        RegisterBrokerResponseHeader {
            ha_server_addr: result.ha_server_addr,
            master_addr: result.master_addr,
        }
        .encode(&mut response.ext_fields);
        if read(&self.config).return_order_topic_config_to_broker {
            if let Some(table) =
                read(&self.kv).get_kv_list_by_namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
            {
                response.body = table.encode().into();
            }
        }
        Ok(response)
    }

    fn unregister_broker(&self, req: &RemotingCommand) -> Outcome {
        let h = UnRegisterBrokerRequestHeader::decode(&req.ext_fields)?;
        let request = UnregisterRequest {
            broker_name: h.broker_name,
            broker_addr: h.broker_addr,
            cluster_name: h.cluster_name,
            broker_id: h.broker_id,
        };
        write(&self.routes).unregister_brokers(&[request]);
        Ok(self.success(req))
    }

    fn broker_heartbeat(&self, req: &RemotingCommand) -> Outcome {
        let h = BrokerHeartbeatRequestHeader::decode(&req.ext_fields)?;
        let (cluster_name, broker_addr) = (h.cluster_name.as_str(), h.broker_addr.as_str());
        let now_ms = self.now_ms();
        if !write(&self.routes).update_broker_info_update_timestamp(
            cluster_name,
            broker_addr,
            now_ms,
        ) {
            tracing::debug!(
                cluster_name,
                broker_addr,
                "heartbeat from an unregistered broker"
            );
        }
        Ok(self.success(req))
    }

    fn query_data_version(&self, req: &RemotingCommand) -> Outcome {
        let h = QueryDataVersionRequestHeader::decode(&req.ext_fields)?;
        let (cluster_name, broker_addr) = (h.cluster_name.as_str(), h.broker_addr.as_str());
        let version = DataVersion::decode(&req.body)?;
        let now_ms = self.now_ms();
        let mut routes = write(&self.routes);
        let changed = routes.is_broker_topic_config_changed(cluster_name, broker_addr, &version);
        routes.update_broker_info_update_timestamp(cluster_name, broker_addr, now_ms);
        let mut response = self.success(req);
        QueryDataVersionResponseHeader { changed }.encode(&mut response.ext_fields);
        if let Some(stored) = routes.query_broker_topic_config(cluster_name, broker_addr) {
            response.body = stored.encode().into();
        }
        Ok(response)
    }

    fn get_broker_member_group(&self, req: &RemotingCommand) -> Outcome {
        let h = GetBrokerMemberGroupRequestHeader::decode(&req.ext_fields)?;
        let group = read(&self.routes).get_broker_member_group(&h.cluster_name, &h.broker_name);
        Ok(self.success(req).with_body(group.encode_response_body()))
    }

    // ----- routes and topics --------------------------------------------------------------

    fn get_route_info_by_topic(&self, req: &RemotingCommand) -> Outcome {
        let h = GetRouteInfoRequestHeader::decode(&req.ext_fields)?;
        let topic = h.topic.as_str();
        let accept_standard_json_only = h.accept_standard_json_only.unwrap_or(false);
        let config = self.config();
        if config.need_wait_for_service
            && self.now_ms() - self.startup_ms < i64::from(config.wait_seconds_for_service) * 1000
        {
            return Err(Failure::new(
                ResponseCode::SystemError,
                "name server not ready",
            ));
        }
        let Some(mut route) =
            read(&self.routes).pickup_topic_route_data(topic, self.route_options())
        else {
            return Err(Failure::new(
                ResponseCode::TopicNotExist,
                format!("No topic route info in name server for the topic: {topic}{APPLY_TOPIC_FAQ_SUFFIX}"),
            ));
        };
        if config.order_message_enable {
            route.order_topic_conf = read(&self.kv)
                .get(NAMESPACE_ORDER_TOPIC_CONFIG, topic)
                .map(str::to_owned);
        }
        let zone_mode = h
            .zone_mode
            .as_deref()
            .and_then(<bool as FieldValue>::parse)
            .unwrap_or(false);
        if zone_mode {
            if let Some(zone) = h.zone_name.as_deref().filter(|z| !z.trim().is_empty()) {
                filter_by_zone(&mut route, zone);
            }
        }
        let legacy = self.legacy_route_json.load(Ordering::Relaxed)
            && req.version < VERSION_V4_9_4
            && !accept_standard_json_only;
        let style = if legacy {
            KeyStyle::Bare
        } else {
            KeyStyle::Quoted
        };
        Ok(self.success(req).with_body(route.encode(style)))
    }

    fn edit_write_perm(&self, req: &RemotingCommand, peer: &Peer, add: bool) -> Outcome {
        let broker_name = if add {
            AddWritePermOfBrokerRequestHeader::decode(&req.ext_fields)?.broker_name
        } else {
            WipeWritePermOfBrokerRequestHeader::decode(&req.ext_fields)?.broker_name
        };
        let mut routes = write(&self.routes);
        let count = if add {
            routes.add_write_perm_of_broker(&broker_name)
        } else {
            routes.wipe_write_perm_of_broker(&broker_name)
        };
        tracing::info!(broker_name, count, peer = %peer.addr, add, "write perm of broker edited");
        let mut response = self.success(req);
        if add {
            AddWritePermOfBrokerResponseHeader {
                add_topic_count: count,
            }
            .encode(&mut response.ext_fields);
        } else {
            WipeWritePermOfBrokerResponseHeader {
                wipe_topic_count: count,
            }
            .encode(&mut response.ext_fields);
        }
        Ok(response)
    }

    fn delete_topic(&self, req: &RemotingCommand) -> Outcome {
        let h = DeleteTopicFromNamesrvRequestHeader::decode(&req.ext_fields)?;
        let topic = h.topic.as_str();
        let mut routes = write(&self.routes);
        match h.cluster_name.as_deref().filter(|c| !c.is_empty()) {
            Some(cluster) => {
                if !routes.delete_topic_in_cluster(topic, cluster) {
                    tracing::warn!(
                        topic,
                        cluster,
                        "delete topic: unknown cluster; nothing removed"
                    );
                }
            }
            None => {
                routes.delete_topic(topic);
            }
        }
        Ok(self.success(req))
    }

    fn register_topic(&self, req: &RemotingCommand) -> Outcome {
        let topic = RegisterTopicRequestHeader::decode(&req.ext_fields)?.topic;
        if req.body.is_empty() {
            return Ok(self.success(req));
        }
        let route = TopicRouteData::decode(&req.body)?;
        if !route.queue_datas.is_empty() {
            write(&self.routes).register_topic(&topic, &route.queue_datas);
        }
        Ok(self.success(req))
    }

    fn get_topics_by_cluster(&self, req: &RemotingCommand) -> Outcome {
        if !read(&self.config).enable_topic_list {
            return Err(Failure::new(ResponseCode::SystemError, "disable"));
        }
        let cluster = GetTopicsByClusterRequestHeader::decode(&req.ext_fields)?.cluster;
        let list = read(&self.routes)
            .get_topics_by_cluster(&cluster)
            .unwrap_or_else(|| {
                // Java answers an empty list here too (its lookup fails and is logged).
                tracing::warn!(cluster, "topics by cluster: unknown cluster");
                Default::default()
            });
        Ok(self.success(req).with_body(list.encode()))
    }

    // ----- config -------------------------------------------------------------------------

    fn update_config(&self, req: &RemotingCommand, peer: &Peer) -> Outcome {
        tracing::info!(peer = %peer.addr, "update name server config requested");
        if req.body.is_empty() {
            return Ok(self.success(req));
        }
        let text = std::str::from_utf8(&req.body).map_err(|_| {
            Failure::new(
                ResponseCode::SystemError,
                "string2Properties error: body is not UTF-8",
            )
        })?;
        let props = Properties::parse(text).map_err(|e| {
            tracing::warn!(peer = %peer.addr, "update config: {e}");
            Failure::new(ResponseCode::SystemError, "string2Properties error")
        })?;
        let mut config = write(&self.config);
        if let Some(key) = config
            .black_list()
            .into_iter()
            .find(|k| props.contains_key(k))
        {
            tracing::warn!(peer = %peer.addr, key, "update config touches a black-listed key");
            return Err(Failure::new(
                ResponseCode::NoPermission,
                "Can not update config in black list.",
            ));
        }
        let fixed: Vec<&str> = props
            .iter()
            .map(|(k, _)| k)
            .filter(|k| crate::config::is_runtime_fixed(k))
            .collect();
        if !fixed.is_empty() {
            tracing::warn!(peer = %peer.addr, ?fixed, "update config touches keys read only at start");
            return Err(Failure::new(
                ResponseCode::NoPermission,
                format!(
                    "Can not update config in black list: {} (read only when the name server starts: change them in its config file and restart)",
                    fixed.join(", ")
                ),
            ));
        }
        // Like Java's Configuration.update, unknown keys are ignored. A value the key cannot
        // take refuses the whole update: nothing is applied or saved.
        let mut updated = config.clone();
        let (unknown, invalid) = updated.apply(&props);
        if !invalid.is_empty() {
            tracing::warn!(peer = %peer.addr, ?invalid, "update config refused");
            return Err(Failure::new(
                ResponseCode::InvalidParameter,
                format!("invalid value: {}; nothing was changed", invalid.join("; ")),
            ));
        }
        if !unknown.is_empty() {
            tracing::warn!(?unknown, "update config: unknown keys ignored");
        }
        *config = updated;
        let path = PathBuf::from(&config.config_store_path);
        self.persister.persist(&path, config.to_properties_text());
        Ok(self.success(req))
    }
}

/// Zone-aware routing: keep broker sets of `zone` (case-insensitive) and any without a
/// master; drop the others' queue data and filter servers.
fn filter_by_zone(route: &mut TopicRouteData, zone: &str) {
    let mut removed = Vec::new();
    route.broker_datas.retain(|b| {
        let keep = !b.broker_addrs.contains_key(&0)
            || b.zone_name
                .as_deref()
                .is_some_and(|z| z.eq_ignore_ascii_case(zone));
        if !keep {
            removed.push(b.clone());
        }
        keep
    });
    route
        .queue_datas
        .retain(|q| !removed.iter().any(|b| b.broker_name == q.broker_name));
    for b in &removed {
        for addr in b.broker_addrs.values() {
            route.filter_server_table.remove(addr);
        }
    }
}

#[cfg(test)]
mod tests;
