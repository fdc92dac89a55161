//! The controller's request path (upstream `ControllerRequestProcessor` and the DLedger
//! controller's scheduler): decodes each Remoting request, validates writes against the
//! applied tables under one write lock, replicates their events through the Raft group and
//! answers once they are applied; runs the liveness scan that re-elects masters whose
//! broker went silent, and tells brokers of new masters (NOTIFY_BROKER_ROLE_CHANGED).
//!
//! Only the Raft leader answers reads and writes; the other controllers answer
//! CONTROLLER_NOT_LEADER (2007), as upstream. Heartbeats, metadata and config requests are
//! served by every controller: brokers heartbeat to all of them, so a new leader already
//! knows who is alive.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ringmq_remoting::body::controller::{
    BrokerReplicasInfo, ReplicaIdentity, ReplicasInfo as ReplicasInfoBody, SyncStateSet,
};
use ringmq_remoting::body::kv::Properties;
use ringmq_remoting::header::controller::*;
use ringmq_remoting::header::namesrv::BrokerHeartbeatRequestHeader;
use ringmq_remoting::header::CommandHeader;
use ringmq_remoting::json;
use ringmq_remoting::{RemotingCommand, RequestCode, ResponseCode};
use ringmq_sync::LockExt;

use crate::config::{ControllerConfig, Peer};
use crate::consensus::state_machine::SharedState;
use crate::consensus::{network, EventBatch, NodeId, Raft};
use crate::heartbeat::{
    BrokerLiveTable, Heartbeat, LiveView, Liveness, DEFAULT_HEARTBEAT_TIMEOUT_MS,
};
use crate::replicas::{ControllerResult, MasterInfo, ReplicasInfo};

/// How long a broker's role-change notice may take.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(3);

pub struct Manager {
    pub(crate) raft: Raft,
    pub(crate) node_id: NodeId,
    pub(crate) peers: Vec<Peer>,
    pub(crate) group: String,
    pub(crate) state: SharedState,
    live: Mutex<BrokerLiveTable>,
    config: Mutex<ControllerConfig>,
    /// Where UPDATE_CONTROLLER_CONFIG saves the config (the `-c` file), if anywhere.
    config_file: Option<PathBuf>,
    /// One validated write at a time, each applied before the next is validated.
    writes: tokio::sync::Mutex<()>,
    /// Wakes the scan at once (a broker connection closed).
    rescan: tokio::sync::Notify,
    /// Set when this controller stops: the connections its own listener closes then are
    /// not broker deaths, and it must not elect on them.
    stopping: std::sync::atomic::AtomicBool,
    clock_origin: Instant,
}

/// Why a request could not be served: answered with this code and remark.
struct Refusal(ResponseCode, String);

type Answer = Result<RemotingCommand, Refusal>;

fn respond(
    request: &RemotingCommand,
    code: ResponseCode,
    remark: Option<String>,
) -> RemotingCommand {
    request.response_to(code.code(), remark)
}

/// A controller result as a response: its code, remark, body and (on success) header.
fn result_response<R, H: CommandHeader>(
    request: &RemotingCommand,
    result: ControllerResult<R>,
    header: impl FnOnce(&R) -> H,
) -> RemotingCommand {
    let mut response = respond(request, result.code, result.remark.clone());
    response.set_header(&header(&result.response));
    if let Some(body) = result.body {
        response.body = body.into();
    }
    response
}

impl Manager {
    pub(crate) fn new(
        raft: Raft,
        node_id: NodeId,
        peers: Vec<Peer>,
        state: SharedState,
        config: ControllerConfig,
        config_file: Option<PathBuf>,
    ) -> Manager {
        Manager {
            raft,
            node_id,
            peers,
            group: config.group(),
            state,
            live: Mutex::new(BrokerLiveTable::default()),
            config: Mutex::new(config),
            config_file,
            writes: tokio::sync::Mutex::new(()),
            rescan: tokio::sync::Notify::new(),
            stopping: std::sync::atomic::AtomicBool::new(false),
            clock_origin: Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.clock_origin.elapsed().as_millis() as u64
    }

    fn config(&self) -> ControllerConfig {
        self.config.lock_unpoisoned().clone()
    }

    /// The current Raft leader's index among the peers, if one is known.
    pub fn leader(&self) -> Option<NodeId> {
        self.raft.metrics().borrow().current_leader
    }

    pub fn is_leader(&self) -> bool {
        self.leader() == Some(self.node_id)
    }

    /// Answers one request.
    pub async fn process(&self, request: RemotingCommand, conn_id: u64) -> RemotingCommand {
        if let Some(raft_answer) = network::serve(&self.raft, &request).await {
            return match raft_answer {
                Ok(body) => respond(&request, ResponseCode::Success, None).with_body(body),
                Err(e) => {
                    tracing::warn!(error = %e, "bad Raft request from a peer controller");
                    respond(&request, ResponseCode::SystemError, Some(e))
                }
            };
        }
        match self.dispatch(&request, conn_id).await {
            Ok(response) => response,
            Err(Refusal(code, remark)) => {
                if code != ResponseCode::ControllerNotLeader {
                    tracing::info!(code = request.code, answer = ?code, %remark, "controller request refused");
                }
                respond(&request, code, Some(remark))
            }
        }
    }

    async fn dispatch(&self, request: &RemotingCommand, conn_id: u64) -> Answer {
        use RequestCode as C;
        let Some(code) = C::from_code(request.code) else {
            return Err(Refusal(
                ResponseCode::RequestCodeNotSupported,
                format!(" request type {} not supported", request.code),
            ));
        };
        match code {
            C::ControllerGetMetadataInfo => Ok(self.metadata(request)),
            C::BrokerHeartbeat => self.heartbeat(request, conn_id),
            C::GetControllerConfig => Ok(respond(request, ResponseCode::Success, None)
                .with_body(self.config().to_properties_text().into_bytes())),
            C::UpdateControllerConfig => self.update_config(request),
            C::ControllerGetNextBrokerId => self.next_broker_id(request).await,
            C::ControllerApplyBrokerId => self.apply_broker_id(request).await,
            C::ControllerRegisterBroker => self.register_broker(request).await,
            C::ControllerAlterSyncStateSet => self.alter_sync_state_set(request).await,
            C::ControllerElectMaster => self.elect_master(request).await,
            C::ControllerGetReplicaInfo => self.replica_info(request).await,
            C::ControllerGetSyncStateData => self.sync_state_data(request).await,
            C::CleanBrokerData => self.clean_broker_data(request).await,
            _ => Err(Refusal(
                ResponseCode::RequestCodeNotSupported,
                format!(" request type {} not supported", request.code),
            )),
        }
    }

    fn header<H: CommandHeader>(request: &RemotingCommand) -> Result<H, Refusal> {
        request
            .decode_header::<H>()
            .map_err(|e| Refusal(ResponseCode::ControllerInvalidRequest, e.to_string()))
    }

    fn metadata(&self, request: &RemotingCommand) -> RemotingCommand {
        let leader = self.leader().and_then(|id| self.peers.get(id as usize));
        let peers: String = self
            .peers
            .iter()
            .map(|p| format!("{}:{};", p.id, p.addr))
            .collect();
        respond(request, ResponseCode::Success, None).with_header(&GetMetaDataResponseHeader {
            group: Some(self.group.clone()),
            controller_leader_id: leader.map(|p| p.id.clone()),
            controller_leader_address: leader.map(|p| p.addr.to_string()),
            is_leader: self.is_leader(),
            peers: Some(peers),
        })
    }

    fn heartbeat(&self, request: &RemotingCommand, conn_id: u64) -> Answer {
        let h: BrokerHeartbeatRequestHeader = Self::header(request)?;
        let Some(broker_id) = h.broker_id else {
            return Err(Refusal(
                ResponseCode::ControllerInvalidRequest,
                "Heart beat with empty brokerId".into(),
            ));
        };
        let timeout_ms = h
            .heartbeat_timeout_mills
            .and_then(|t| u64::try_from(t).ok())
            .filter(|t| *t > 0)
            .unwrap_or(DEFAULT_HEARTBEAT_TIMEOUT_MS);
        let hb = Heartbeat {
            cluster_name: h.cluster_name,
            broker_name: h.broker_name,
            broker_addr: h.broker_addr,
            broker_id,
            timeout_ms,
            epoch: h.epoch.unwrap_or(-1),
            max_offset: h.max_offset.unwrap_or(-1),
            confirm_offset: h.confirm_offset.unwrap_or(-1),
            election_priority: h.election_priority.unwrap_or(i32::MAX),
            conn: conn_id,
        };
        let now = self.now_ms();
        if !self.live.lock_unpoisoned().on_heartbeat(hb, now) {
            return Err(Refusal(
                ResponseCode::SystemError,
                "the controller tracks too many brokers; heartbeat refused".into(),
            ));
        }
        Ok(respond(
            request,
            ResponseCode::Success,
            Some("Heart beat success".into()),
        ))
    }

    fn update_config(&self, request: &RemotingCommand) -> Answer {
        let text = std::str::from_utf8(&request.body)
            .map_err(|_| Refusal(ResponseCode::SystemError, "config body is not UTF-8".into()))?;
        let props = Properties::parse(text)
            .map_err(|e| Refusal(ResponseCode::SystemError, format!("config body: {e}")))?;
        let mut config = self.config.lock_unpoisoned();
        config
            .update(&props)
            .map_err(|e| Refusal(ResponseCode::NoPermission, e))?;
        if let Some(file) = &self.config_file {
            if let Err(e) = std::fs::write(file, config.to_properties_text()) {
                tracing::warn!(file = %file.display(), error = %e, "controller config updated but not saved");
            }
        }
        tracing::info!(update = %text.trim(), "controller config updated");
        Ok(respond(request, ResponseCode::Success, None))
    }

    /// Leadership, confirmed with a quorum, and every committed entry applied: what a
    /// validation must see.
    async fn lead(&self) -> Result<(), Refusal> {
        if !self.is_leader() {
            return Err(not_leader(""));
        }
        self.raft
            .ensure_linearizable()
            .await
            .map_err(|_| not_leader(""))?;
        Ok(())
    }

    /// Runs `f` on the applied tables and the brokers alive now (short locks, no await).
    fn with_tables<R>(&self, f: impl FnOnce(&ReplicasInfo, &LiveView<'_>) -> R) -> R {
        let state = self.state.lock();
        let live = self.live.lock_unpoisoned();
        f(&state.replicas, &live.at(self.now_ms()))
    }

    /// Validates with `decide` against the applied tables and the live brokers, replicates
    /// its events, and returns its answer once they are applied.
    async fn write<R>(
        &self,
        decide: impl FnOnce(&ReplicasInfo, &LiveView<'_>, &ControllerConfig) -> ControllerResult<R>,
    ) -> Result<ControllerResult<R>, Refusal> {
        let _one_at_a_time = self.writes.lock().await;
        self.lead().await?;
        let config = self.config();
        let result = self.with_tables(|r, live| decide(r, live, &config));
        if !result.events.is_empty() {
            let batch = EventBatch {
                events: result.events.iter().map(|e| e.encode()).collect(),
            };
            self.raft.client_write(batch).await.map_err(|e| {
                tracing::warn!(error = %e, "controller write not replicated");
                not_leader(&format!(": {e}"))
            })?;
        }
        Ok(result)
    }

    async fn read<R>(
        &self,
        answer: impl FnOnce(&ReplicasInfo, &LiveView<'_>) -> R,
    ) -> Result<R, Refusal> {
        self.lead().await?;
        Ok(self.with_tables(answer))
    }

    async fn next_broker_id(&self, request: &RemotingCommand) -> Answer {
        let h: GetNextBrokerIdRequestHeader = Self::header(request)?;
        let next = self.read(|r, _| r.next_broker_id(&h.broker_name)).await?;
        Ok(respond(request, ResponseCode::Success, None).with_header(
            &GetNextBrokerIdResponseHeader {
                cluster_name: Some(h.cluster_name),
                broker_name: Some(h.broker_name),
                next_broker_id: Some(next),
            },
        ))
    }

    async fn apply_broker_id(&self, request: &RemotingCommand) -> Answer {
        let h: ApplyBrokerIdRequestHeader = Self::header(request)?;
        let result = self
            .write(|r, _, _| {
                r.apply_broker_id(
                    &h.cluster_name,
                    &h.broker_name,
                    h.applied_broker_id,
                    &h.register_check_code,
                )
            })
            .await?;
        Ok(result_response(request, result, |_| {
            ApplyBrokerIdResponseHeader {
                cluster_name: Some(h.cluster_name.clone()),
                broker_name: Some(h.broker_name.clone()),
            }
        }))
    }

    async fn register_broker(&self, request: &RemotingCommand) -> Answer {
        let h: RegisterBrokerToControllerRequestHeader = Self::header(request)?;
        let result = self
            .write(|r, live, _| {
                r.register_broker(
                    &h.cluster_name,
                    &h.broker_name,
                    h.broker_id,
                    &h.broker_address,
                    live,
                )
            })
            .await?;
        Ok(result_response(request, result, |m: &MasterInfo| {
            RegisterBrokerToControllerResponseHeader {
                cluster_name: Some(h.cluster_name.clone()),
                broker_name: Some(h.broker_name.clone()),
                master_broker_id: m.master_broker_id,
                master_address: m.master_address.clone(),
                master_epoch: m.master_epoch,
                sync_state_set_epoch: m.sync_state_set_epoch,
            }
        }))
    }

    async fn alter_sync_state_set(&self, request: &RemotingCommand) -> Answer {
        let h: AlterSyncStateSetRequestHeader = Self::header(request)?;
        let new_set = SyncStateSet::decode(&request.body).map_err(|e| {
            Refusal(
                ResponseCode::ControllerInvalidRequest,
                format!("SyncStateSet body: {e}"),
            )
        })?;
        let result = self
            .write(|r, live, _| {
                r.alter_sync_state_set(
                    &h.broker_name,
                    h.master_broker_id,
                    h.master_epoch,
                    &new_set,
                    live,
                )
            })
            .await?;
        Ok(result_response(request, result, |a| {
            AlterSyncStateSetResponseHeader {
                new_sync_state_set_epoch: a.new_sync_state_set_epoch,
            }
        }))
    }

    async fn elect_master(&self, request: &RemotingCommand) -> Answer {
        let h: ElectMasterRequestHeader = Self::header(request)?;
        let broker_id = (h.broker_id >= 0).then_some(h.broker_id);
        let result = self
            .write(|r, live, c| {
                r.elect_master(
                    &h.broker_name,
                    broker_id,
                    h.designate_elect,
                    c.enable_elect_unclean_master(),
                    live,
                )
            })
            .await?;
        if result.code == ResponseCode::Success {
            self.notify_role_change(&h.broker_name, &result.response);
        }
        Ok(result_response(request, result, elect_header))
    }

    async fn replica_info(&self, request: &RemotingCommand) -> Answer {
        let h: GetReplicaInfoRequestHeader = Self::header(request)?;
        let result = self
            .read(|r, _| r.replica_info_answer(&h.broker_name))
            .await?;
        Ok(result_response(request, result, |m| {
            GetReplicaInfoResponseHeader {
                master_broker_id: m.master_broker_id,
                master_address: m.master_address.clone(),
                master_epoch: m.master_epoch,
            }
        }))
    }

    async fn sync_state_data(&self, request: &RemotingCommand) -> Answer {
        let names = json::parse(&request.body)
            .ok()
            .and_then(|v| {
                v.as_array().map(|items| {
                    items
                        .iter()
                        .filter_map(|i| i.as_str().map(str::to_owned))
                        .collect::<Vec<_>>()
                })
            })
            .ok_or_else(|| {
                Refusal(
                    ResponseCode::ControllerInvalidRequest,
                    "the body must be a JSON list of broker names".into(),
                )
            })?;
        let info = self
            .read(|r, live| sync_state_data(r, live, &names))
            .await?;
        Ok(respond(request, ResponseCode::Success, None).with_body(info.encode()))
    }

    async fn clean_broker_data(&self, request: &RemotingCommand) -> Answer {
        let h: CleanControllerBrokerDataRequestHeader = Self::header(request)?;
        let cluster = h.cluster_name.clone().unwrap_or_default();
        let result = self
            .write(|r, live, _| {
                r.clean_broker_data(
                    &cluster,
                    &h.broker_name,
                    h.broker_controller_ids_to_clean.as_deref(),
                    h.is_clean_living_broker,
                    live,
                )
            })
            .await?;
        let mut response = respond(request, result.code, result.remark);
        if let Some(body) = result.body {
            response.body = body.into();
        }
        Ok(response)
    }

    /// This controller is stopping: no more liveness decisions.
    pub fn begin_stop(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn is_stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A broker connection closed: its broker is gone now, not after its time-out.
    pub fn on_connection_closed(&self, conn_id: u64) {
        if self.is_stopping() {
            return;
        }
        let gone = self.live.lock_unpoisoned().on_conn_closed(conn_id);
        if let Some((cluster, name, id)) = gone {
            tracing::info!(%cluster, broker_name = %name, broker_id = id, "broker connection closed; broker marked inactive");
            self.rescan.notify_one();
        }
    }

    /// The liveness scan, every `scanNotActiveBrokerInterval` (and at once when a broker's
    /// connection closes), until the runtime stops.
    pub async fn run_scan(self: Arc<Self>) {
        loop {
            let interval =
                Duration::from_millis(self.config().scan_not_active_broker_interval_ms());
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = self.rescan.notified() => {}
            }
            self.scan_once().await;
        }
    }

    /// Logs every change of Raft leader, as an operator reading the log needs it.
    pub async fn watch_leader(self: Arc<Self>) {
        let mut metrics = self.raft.metrics();
        let mut last: Option<NodeId> = None;
        loop {
            let (leader, term) = {
                let m = metrics.borrow_and_update();
                (m.current_leader, m.current_term)
            };
            if leader != last {
                let name = |id: Option<NodeId>| {
                    id.and_then(|i| self.peers.get(i as usize))
                        .map_or("none".to_string(), |p| format!("{} ({})", p.id, p.addr))
                };
                tracing::info!(term, leader = %name(leader), this = %name(Some(self.node_id)), "controller leader changed");
                last = leader;
            }
            if metrics.changed().await.is_err() {
                return;
            }
        }
    }

    async fn scan_once(&self) {
        if self.is_stopping() {
            return;
        }
        let now = self.now_ms();
        let gone = self.live.lock_unpoisoned().scan_inactive(now);
        for (cluster, name, id) in &gone {
            tracing::info!(%cluster, broker_name = %name, broker_id = id, "broker heartbeat timed out; broker marked inactive");
        }
        if !self.is_leader() || self.is_stopping() {
            return;
        }
        let sets = self.with_tables(|r, live| r.sets_needing_election(live));
        for name in sets {
            self.elect_for_dead_master(&name).await;
        }
    }

    /// A controller-triggered election for a set whose master died, retried up to
    /// `electMasterMaxRetryCount` times; the new master and its replicas are told.
    async fn elect_for_dead_master(&self, broker_name: &str) {
        let attempts = self.config().elect_master_max_retry_count();
        for attempt in 1..=attempts {
            let outcome = self
                .write(|r, live, c| {
                    r.elect_master(
                        broker_name,
                        None,
                        false,
                        c.enable_elect_unclean_master(),
                        live,
                    )
                })
                .await;
            match outcome {
                Ok(result) if result.code == ResponseCode::Success => {
                    tracing::info!(broker_name, master = ?result.response.master_broker_id, epoch = ?result.response.master_epoch, "master re-elected after the old one went inactive");
                    self.notify_role_change(broker_name, &result.response);
                    return;
                }
                Ok(result) => {
                    tracing::warn!(broker_name, code = ?result.code, remark = ?result.remark, "no new master could be elected");
                    return;
                }
                Err(Refusal(code, remark)) => {
                    tracing::warn!(broker_name, attempt, ?code, %remark, "re-election attempt failed");
                    if code == ResponseCode::ControllerNotLeader {
                        return;
                    }
                }
            }
        }
    }

    /// NOTIFY_BROKER_ROLE_CHANGED to every live broker of the set, when
    /// `notifyBrokerRoleChanged` (default true). Sent in the background; a broker that
    /// misses it learns the master from its next register or metadata sync.
    fn notify_role_change(&self, broker_name: &str, master: &MasterInfo) {
        if !self.config().notify_broker_role_changed() {
            return;
        }
        let members = self.with_tables(|r, live| {
            let (replica, sync) = (r.replica_info(broker_name)?, r.sync_state(broker_name)?);
            let targets: Vec<String> = replica
                .brokers
                .iter()
                .filter(|(id, _)| live.is_alive(&sync.cluster_name, broker_name, **id))
                .map(|(_, (addr, _))| addr.clone())
                .collect();
            Some((targets, sync.sync_state_set_body()))
        });
        let Some((targets, body)) = members else {
            return;
        };
        let header = NotifyBrokerRoleChangedRequestHeader {
            master_address: master.master_address.clone(),
            master_epoch: master.master_epoch,
            sync_state_set_epoch: master.sync_state_set_epoch,
            master_broker_id: master.master_broker_id,
        };
        for addr in targets {
            let Ok(peer) = addr.parse::<std::net::SocketAddr>() else {
                tracing::warn!(%addr, "broker address is not ip:port; role change not sent");
                continue;
            };
            let request = RemotingCommand::request(RequestCode::NotifyBrokerRoleChanged.code(), 0)
                .with_header(&header)
                .with_body(body.clone());
            tokio::spawn(async move {
                if let Err(e) = crate::wire::call_once(peer, request, NOTIFY_TIMEOUT).await {
                    tracing::warn!(broker = %peer, error = %e, "role change notice not delivered");
                }
            });
        }
    }
}

/// CONTROLLER_NOT_LEADER with upstream's remark (and why, when known).
fn not_leader(detail: &str) -> Refusal {
    Refusal(
        ResponseCode::ControllerNotLeader,
        format!("The controller is not in leader state{detail}"),
    )
}

fn elect_header(m: &MasterInfo) -> ElectMasterResponseHeader {
    ElectMasterResponseHeader {
        master_broker_id: m.master_broker_id,
        master_address: m.master_address.clone(),
        master_epoch: m.master_epoch,
        sync_state_set_epoch: m.sync_state_set_epoch,
    }
}

/// CONTROLLER_GET_SYNC_STATE_DATA: for each known set, its master and its replicas in and
/// out of the SyncStateSet with their liveness.
fn sync_state_data(r: &ReplicasInfo, live: &LiveView<'_>, names: &[String]) -> BrokerReplicasInfo {
    let mut out = BrokerReplicasInfo::default();
    for name in names {
        let (Some(replica), Some(sync)) = (r.replica_info(name), r.sync_state(name)) else {
            continue;
        };
        let mut info = ReplicasInfoBody {
            master_broker_id: sync.master_broker_id,
            master_address: replica.address(sync.master_broker_id),
            master_epoch: sync.master_epoch,
            sync_state_set_epoch: sync.sync_state_set_epoch,
            ..Default::default()
        };
        for (id, (addr, _)) in &replica.brokers {
            let identity = ReplicaIdentity {
                broker_name: name.clone(),
                broker_id: *id,
                broker_address: addr.clone(),
                alive: live.is_alive(&sync.cluster_name, name, *id),
            };
            if sync.sync_state_set.contains(id) {
                info.in_sync_replicas.push(identity);
            } else {
                info.not_in_sync_replicas.push(identity);
            }
        }
        out.replicas_info_table.insert(name.clone(), info);
    }
    out
}
