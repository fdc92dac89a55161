//! Broker lifecycle: load `config/*.json`, open the store, listen on `listenPort` and the VIP
//! port (`listenPort - 2`) through the runtime's Remoting server, register with the name
//! servers, run housekeeping (offset persistence every `flushConsumerOffsetInterval`, client
//! channel expiry every 10 s), and shut all of it down in order, persisting metadata last.
//!
//! The role decides what else runs: a master (always broker 0) runs delay-level delivery,
//! transaction check-back, timers and POP revive ([`role_services`]); a slave (broker id
//! above 0) runs none of them, hands its store the master's HA address and copies the
//! master's metadata ([`crate::slave_sync`]). In controller mode the controllers decide the
//! role, as often as they elect ([`crate::replicas`]).

mod role_services;

pub use role_services::ReopenSignal;
use role_services::{BrokerRoleHooks, MasterServices, MasterTerm};

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ringmq_remoting::codes::ResponseCode;
use ringmq_remoting::RemotingCommand;
use ringmq_runtime::cores::CoreMap;
use ringmq_runtime::server::{
    Connection, Reply, RequestContext, RequestHandler, Server, ServerConfig, ServerTuning,
};
use ringmq_store::{MessageStore, StoreApi};

use crate::config::{net_tuning, plan_core_map, BrokerConfig};
use crate::context::BrokerContext;
use crate::metadata::consumer_offset::ConsumerOffsetManager;
use crate::metadata::delay_offset::DelayOffsetManager;
use crate::metadata::subscription_group::SubscriptionGroupManager;
use crate::metadata::topic_config::TopicConfigManager;
use crate::register::Registrar;
use crate::replicas::ReplicasManager;
use crate::slave_sync::{MasterLink, SlaveSynchronizer};
use ringmq_sync::LockExt;

/// Why the broker could not start.
#[derive(Debug)]
pub enum BrokerError {
    /// A setting the broker cannot run with.
    Config(String),
    /// A `config/*.json` file that cannot be read (neither it nor its `.bak`).
    Metadata(String),
    /// The message store failed to open or recover.
    Store(String),
    /// A listener could not be bound.
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

impl std::fmt::Display for BrokerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Config(m) => write!(f, "broker config: {m}"),
            Self::Metadata(m) => write!(f, "broker metadata: {m}"),
            Self::Store(m) => write!(f, "message store: {m}"),
            Self::Listen { addr, source } => {
                write!(
                    f,
                    "cannot listen on {addr}: {source} (is another broker running on this port?)"
                )
            }
        }
    }
}

impl std::error::Error for BrokerError {}

/// A running broker.
pub struct Broker {
    ctx: Arc<BrokerContext>,
    /// What the network cores call for each request; in-process front ends (the gRPC
    /// endpoint) call it too.
    handler: Arc<dyn RequestHandler>,
    /// Shared with the metrics core probe, which reads the servers' per-core counters.
    servers: Arc<Mutex<Vec<Server>>>,
    /// The `/metrics` endpoint and the once-a-second metrics sampler.
    metrics: Option<crate::metrics::http::MetricsHttp>,
    local_addr: SocketAddr,
    registrar: Option<Registrar>,
    /// The master-only services, while this broker is master.
    master_term: MasterTerm,
    /// Controller mode: the control thread that follows the controllers' elections.
    replicas: Option<ReplicasManager>,
    /// Controller mode: set when the store asks to be reopened.
    reopen: Arc<ReopenSignal>,
    housekeeping: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
    /// A slave's master, as the name servers answer it.
    master_link: Arc<MasterLink>,
    /// A slave's metadata copy from its master.
    slave_sync: Option<SlaveSynchronizer>,
}

impl Broker {
    /// Starts a broker with the store its config describes.
    pub fn start(config: BrokerConfig) -> Result<Broker, BrokerError> {
        Self::start_with_store(config, None)
    }

    /// Starts a broker; `store` overrides the configured store (tests, embedding).
    pub fn start_with_store(
        mut config: BrokerConfig,
        store: Option<Arc<dyn StoreApi>>,
    ) -> Result<Broker, BrokerError> {
        apply_role_rule(&mut config)?;
        let acl = crate::acl::open(&config).map_err(BrokerError::Config)?;
        let (bind_ip, tuning, core_map) = startup_settings(&config, store.is_none())?;
        // The handler exists before the context so the listener can be bound first and the
        // real port (listenPort=0 in tests) written into STOREHOST and the registration.
        let slot: Arc<OnceLock<Arc<BrokerContext>>> = Arc::new(OnceLock::new());
        let handler: Arc<dyn RequestHandler> = Arc::new(BrokerHandler { ctx: slot.clone() });
        let servers = start_listeners(&config, bind_ip, &tuning, &core_map, handler.clone())?;
        let local_addr = servers[0].local_addr();
        config.listen_port = local_addr.port();
        let opened = match open_state(&config, store, &core_map) {
            Ok(o) => o,
            Err(e) => {
                shutdown_servers(servers);
                return Err(e);
            }
        };
        let (topics, groups, offsets, delay_offsets) = opened.managers;
        let ctx = BrokerContext::new(config, topics, groups, offsets, delay_offsets, opened.store);
        if let Some(acl) = acl {
            let _ = ctx.acl.set(acl);
        }
        ctx.pop.order.load(&ctx.config.config_dir());
        attach_cores_to_store(&ctx, &servers);
        ctx.hold
            .attach_cores(servers.iter().flat_map(Server::core_handles));
        let servers = Arc::new(Mutex::new(servers));
        install_metrics_probes(&ctx, opened.disk, &servers);
        let _ = slot.set(ctx.clone());
        let metrics = match start_metrics_endpoint(&ctx, opened.metrics_bind) {
            Ok(m) => Some(m),
            Err(source) => {
                let addr = opened.metrics_bind.unwrap_or(SocketAddr::new(bind_ip, 0));
                ctx.hold.stop();
                shutdown_servers(std::mem::take(&mut *servers.lock_unpoisoned()));
                ctx.store.shutdown();
                return Err(BrokerError::Listen { addr, source });
            }
        };
        let master_term: MasterTerm = Arc::new(Mutex::new(
            ctx.is_master().then(|| MasterServices::start(&ctx)),
        ));
        let master_link = Arc::new(MasterLink::default());
        if !ctx.is_master() && !ctx.config.enable_controller_mode {
            if let Some(ha) = crate::slave_sync::configured_ha_master_address(&ctx) {
                ctx.store.update_ha_master_address(ha);
            }
        }
        let registrar = Registrar::start(ctx.clone(), master_link.clone());
        let slave_sync = start_slave_sync(&ctx, &master_link);
        let trigger = registrar.trigger();
        ctx.topics.set_on_change(Box::new(trigger));
        let housekeeping = start_housekeeping(ctx.clone());
        let reopen = Arc::new(ReopenSignal::default());
        let replicas = ctx.config.enable_controller_mode.then(|| {
            let hooks = BrokerRoleHooks {
                ctx: ctx.clone(),
                term: master_term.clone(),
                link: master_link.clone(),
                register_now: Box::new(registrar.trigger()),
                reopen: reopen.clone(),
            };
            ReplicasManager::start(ctx.clone(), Arc::new(hooks))
        });
        let replicas = match replicas.transpose() {
            Ok(r) => r,
            Err(e) => {
                tracing::error!("controller mode not started: {e}; this broker stays a slave");
                None
            }
        };
        tracing::info!(
            broker = ctx.config.broker_name,
            cluster = ctx.config.broker_cluster_name,
            addr = %local_addr,
            store_host = %ctx.store_host,
            "broker started"
        );
        Ok(Broker {
            ctx,
            handler,
            servers,
            metrics,
            local_addr,
            registrar: Some(registrar),
            master_term,
            replicas,
            reopen,
            housekeeping: Some(housekeeping),
            master_link,
            slave_sync,
        })
    }

    /// A slave's master remoting address, as the name servers last answered it.
    pub fn master_addr(&self) -> Option<String> {
        self.master_link.master_addr()
    }

    /// Controller mode: runs `hook` once the store asks to be reopened (a slave whose log
    /// ran past its new master's must truncate at recovery); the owner shuts the broker
    /// down and starts it again.
    pub fn on_reopen_request(&self, hook: Box<dyn Fn() + Send + Sync>) {
        self.reopen.set_hook(hook);
    }

    /// Whether the store asked to be reopened (readable after shutdown).
    pub fn reopen_signal(&self) -> Arc<ReopenSignal> {
        self.reopen.clone()
    }

    /// The address the main listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn context(&self) -> &Arc<BrokerContext> {
        &self.ctx
    }

    /// The request handler the network cores call (ACL check, dispatch, metrics).
    pub fn handler(&self) -> Arc<dyn RequestHandler> {
        self.handler.clone()
    }

    /// Where `GET /metrics` is served (`ringmq.metricsPort`), when enabled.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|m| m.local_addr())
    }

    /// Unregisters, stops accepting, answers parked pulls, persists metadata, closes the store.
    pub fn shutdown(mut self) {
        tracing::info!(broker = self.ctx.config.broker_name, "broker shutting down");
        if let Some(r) = self.replicas.take() {
            r.stop();
        }
        if let Some(s) = self.slave_sync.take() {
            s.stop();
        }
        if let Some(r) = self.registrar.take() {
            r.stop();
        }
        self.ctx.hold.stop();
        if let Some(m) = self.metrics.take() {
            m.stop();
        }
        // Taken out of the lock first: a core may be reading stats through the probe while
        // its server shuts down (joining that core under the lock would deadlock).
        let servers = std::mem::take(&mut *self.servers.lock_unpoisoned());
        for s in servers {
            s.shutdown();
        }
        let services = self.master_term.lock_unpoisoned().take();
        if let Some(services) = services {
            services.stop(&self.ctx);
        }
        self.ctx.timer.stop();
        if let Some((stop, handle)) = self.housekeeping.take() {
            stop.store(true, Ordering::Release);
            let _ = handle.join();
        }
        persist_all(&self.ctx);
        self.ctx.store.shutdown();
        tracing::info!(broker = self.ctx.config.broker_name, "broker stopped");
    }
}

/// The metadata managers loaded from `config/*.json`.
type Managers = (
    TopicConfigManager,
    SubscriptionGroupManager,
    ConsumerOffsetManager,
    DelayOffsetManager,
);

/// What the broker opens once it listens: metadata, the metrics address and the store.
struct OpenedState {
    managers: Managers,
    metrics_bind: Option<SocketAddr>,
    store: Arc<dyn StoreApi>,
    /// The disk store when the broker opened it itself (its metrics feed the stage profile).
    disk: Option<Arc<MessageStore>>,
}

/// Checks `config` as UPDATE_BROKER_CONFIG does before it saves an update, creates the
/// metadata directory, and works out the bind address, the server tuning and the core map.
fn startup_settings(
    config: &BrokerConfig,
    store_files: bool,
) -> Result<(IpAddr, ServerTuning, CoreMap), BrokerError> {
    let scope = crate::config_check::CheckScope {
        held_metrics_addr: None,
        store_files,
    };
    crate::config_check::check_startable(config, scope).map_err(BrokerError::Config)?;
    std::fs::create_dir_all(config.config_dir()).map_err(|e| {
        BrokerError::Metadata(format!(
            "cannot create {}: {e}",
            config.config_dir().display()
        ))
    })?;
    let bind_ip: IpAddr = config.bind_address.parse().map_err(|_| {
        BrokerError::Config(format!(
            "bindAddress {:?} is not an IP address",
            config.bind_address
        ))
    })?;
    crate::config_check::network_cores(config).map_err(BrokerError::Config)?;
    let mut tuning = net_tuning(config).map_err(BrokerError::Config)?;
    let core_map = applied_core_map(config, &tuning).map_err(BrokerError::Config)?;
    tuning.pin_network_cores = core_map.pinned.network;
    Ok((bind_ip, tuning, core_map))
}

/// Binds the main listener (`listenPort`, first in the result) and, when `listenPort > 2`,
/// the VIP listener (`listenPort - 2`); nothing stays bound when either fails.
fn start_listeners(
    config: &BrokerConfig,
    bind_ip: IpAddr,
    tuning: &ServerTuning,
    core_map: &CoreMap,
    handler: Arc<dyn RequestHandler>,
) -> Result<Vec<Server>, BrokerError> {
    let configured_port = config.listen_port;
    let server_config = |addr: SocketAddr, name: &str| {
        let mut sc = ServerConfig::new(addr, name);
        sc.network_cores = core_map.network.clone();
        sc.idle_timeout_ms = config.channel_expired_timeout_ms;
        sc
    };
    let main_addr = SocketAddr::new(bind_ip, configured_port);
    let main = Server::start_with(
        server_config(main_addr, "broker"),
        tuning.clone(),
        handler.clone(),
    )
    .map_err(|source| BrokerError::Listen {
        addr: main_addr,
        source,
    })?;
    let mut servers = vec![main];
    if configured_port > 2 {
        let vip_addr = SocketAddr::new(bind_ip, configured_port - 2);
        match Server::start_with(
            server_config(vip_addr, "broker-vip"),
            tuning.clone(),
            handler,
        ) {
            Ok(vip) => servers.push(vip),
            Err(source) => {
                shutdown_servers(servers);
                return Err(BrokerError::Listen {
                    addr: vip_addr,
                    source,
                });
            }
        }
    }
    Ok(servers)
}

fn shutdown_servers(servers: Vec<Server>) {
    for s in servers {
        s.shutdown();
    }
}

/// Loads the metadata managers, reads the metrics address and opens the store (`store`
/// when given, else the disk store `config` describes), in that order.
fn open_state(
    config: &BrokerConfig,
    store: Option<Arc<dyn StoreApi>>,
    core_map: &CoreMap,
) -> Result<OpenedState, BrokerError> {
    let managers = load_managers(config).map_err(BrokerError::Metadata)?;
    let metrics_bind = crate::metrics::endpoint_addr(config).map_err(BrokerError::Config)?;
    let (store, disk) = match store {
        Some(s) => (s, None),
        None => {
            let disk = Arc::new(open_disk_store(config, core_map).map_err(BrokerError::Store)?);
            (disk.clone() as Arc<dyn StoreApi>, Some(disk))
        }
    };
    Ok(OpenedState {
        managers,
        metrics_bind,
        store,
        disk,
    })
}

fn load_managers(config: &BrokerConfig) -> Result<Managers, String> {
    Ok((
        TopicConfigManager::load(config)?,
        SubscriptionGroupManager::load(config)?,
        ConsumerOffsetManager::load(&config.config_dir())?,
        DelayOffsetManager::load(&config.config_dir())?,
    ))
}

/// Lets the metrics read the disk store's counters (when the broker opened it) and the
/// servers' per-core counters (the main listener as `broker`, the VIP one as `broker-vip`).
fn install_metrics_probes(
    ctx: &BrokerContext,
    disk: Option<Arc<MessageStore>>,
    servers: &Arc<Mutex<Vec<Server>>>,
) {
    if let Some(d) = disk {
        ctx.metrics.set_store_probe(Box::new(move || d.metrics()));
    }
    let for_probe = servers.clone();
    ctx.metrics.set_core_probe(Box::new(move || {
        let servers = for_probe.lock_unpoisoned();
        servers
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                let name = if i == 0 { "broker" } else { "broker-vip" };
                s.stats()
                    .into_iter()
                    .map(move |stats| crate::metrics::ServerCoreStats {
                        server: name.to_string(),
                        stats,
                    })
            })
            .collect()
    }));
}

/// The `/metrics` endpoint (when `metrics_bind` names one) and the once-a-second sampler.
fn start_metrics_endpoint(
    ctx: &Arc<BrokerContext>,
    metrics_bind: Option<SocketAddr>,
) -> std::io::Result<crate::metrics::http::MetricsHttp> {
    let (render_ctx, tick_ctx) = (ctx.clone(), ctx.clone());
    crate::metrics::http::MetricsHttp::start(
        metrics_bind,
        Box::new(move || render_metrics_page(&render_ctx)),
        Box::new(move || tick_ctx.metrics.sample()),
    )
}

/// Upstream's start rule outside controller mode: a master is broker 0 (a master configured
/// with another id runs as 0), a slave must have an id above 0.
fn apply_role_rule(config: &mut BrokerConfig) -> Result<(), BrokerError> {
    if config.broker_role != crate::config::BrokerRole::Slave {
        if config.broker_id != 0 {
            tracing::warn!(
                broker_id = config.broker_id,
                "a master is broker 0; brokerId set to 0"
            );
            config.broker_id = 0;
        }
        return Ok(());
    }
    if config.broker_id == 0 {
        return Err(BrokerError::Config(
            "Slave's brokerId must be > 0".to_string(),
        ));
    }
    Ok(())
}

/// A slave's metadata sync; nothing on a master. A sync thread that cannot start is
/// logged and left out: the slave then serves with the metadata it has.
fn start_slave_sync(ctx: &Arc<BrokerContext>, link: &Arc<MasterLink>) -> Option<SlaveSynchronizer> {
    // In controller mode a master may become a slave at any time: the sync always runs
    // (it does nothing on a master).
    if ctx.is_master() && !ctx.config.enable_controller_mode {
        return None;
    }
    match SlaveSynchronizer::start(ctx.clone(), link.clone()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::error!("slave metadata sync not started: {e}");
            None
        }
    }
}

/// The `/metrics` page: the broker's counters plus the gauges read from the managers now.
fn render_metrics_page(ctx: &BrokerContext) -> String {
    let gauges = crate::metrics::BrokerGauges {
        permission: ctx.live.broker_permission(),
        topics: ctx.topics.topic_names().len() as u64,
        consumer_groups: ctx.groups.wrapper().subscription_group_table.len() as u64,
    };
    ctx.metrics.render(&gauges)
}

/// Writes the orderly POP state, first forgetting queues of topics and groups that no
/// longer exist (as upstream cleans before each write).
fn persist_order_info(ctx: &BrokerContext) -> std::io::Result<()> {
    let keep = |topic_at_group: &str, queue_id: i32| {
        let Some((topic, group)) = topic_at_group.split_once('@') else {
            return false;
        };
        let queues = ctx.topics.select(topic).map_or(0, |tc| tc.read_queue_nums);
        queue_id < queues && ctx.groups.find(group).is_some()
    };
    ctx.pop.order.clean(crate::persist::now_ms(), &keep);
    ctx.pop.order.persist()
}

fn persist_all(ctx: &BrokerContext) {
    if let Err(e) = ctx.offsets.persist() {
        tracing::error!("cannot persist consumerOffset.json: {e}");
    }
    if let Err(e) = persist_order_info(ctx) {
        tracing::error!("cannot persist consumerOrderInfo.json: {e}");
    }
    if let Err(e) = ctx.delay_offsets.persist() {
        tracing::error!("cannot persist delayOffset.json: {e}");
    }
    if let Err(e) = ctx.topics.persist() {
        tracing::error!("cannot persist topics.json: {e}");
    }
    if let Err(e) = ctx.groups.persist() {
        tracing::error!("cannot persist subscriptionGroup.json: {e}");
    }
}

/// Channel expiry scan period (upstream ClientHousekeepingService).
const EXPIRY_SCAN_MS: u64 = 10_000;
/// delayOffset.json persistence period (`flushDelayOffsetInterval`).
const DELAY_OFFSET_FLUSH_MS: u64 = 10_000;

/// The core map this broker applies and prints: planned from every `ringmq.cores.*` key
/// (and `ringmq.net.pinNetworkCores` when it is not `auto`), then reduced to the cores this
/// process may really use (see `CoreMap::applicable`).
pub(crate) fn applied_core_map(
    config: &BrokerConfig,
    tuning: &ServerTuning,
) -> Result<CoreMap, String> {
    let (plan, applied) = plan_core_map(config, tuning)?;
    if applied != plan {
        tracing::info!(
            "core map planned for {} cores; this process may use {}, so threads planned \
             on absent cores run unpinned: planned {plan}",
            plan.available,
            applied.available
        );
    }
    tracing::info!("{applied}");
    Ok(applied)
}

/// Opens the store `config` describes with its stage threads placed as `cores` says.
fn open_disk_store(config: &BrokerConfig, cores: &CoreMap) -> Result<MessageStore, String> {
    let mut sc = crate::disk_store::store_config(config)?;
    sc.append_core = cores.append_core();
    sc.flush_core = cores.flush_core();
    sc.reput_core = cores.reput_core();
    sc.ha_core = cores.ha_core();
    let root = sc.store_path_root_dir.display().to_string();
    MessageStore::open(sc).map_err(|e| format!("cannot open the store at {root}: {e}"))
}

fn start_housekeeping(ctx: Arc<BrokerContext>) -> (Arc<AtomicBool>, JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let handle = std::thread::Builder::new()
        .name("ringmq-housekeeping".into())
        .spawn(move || {
            let offset_period = Duration::from_millis(
                ctx.config
                    .flush_consumer_offset_interval_ms
                    .clamp(100, 600_000),
            );
            let (mut last_offsets, mut last_scan, mut last_delay, mut last_acl) = (
                Instant::now(),
                Instant::now(),
                Instant::now(),
                Instant::now(),
            );
            while !stop2.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(50));
                if last_offsets.elapsed() >= offset_period {
                    last_offsets = Instant::now();
                    if let Err(e) = ctx.offsets.persist() {
                        tracing::error!("cannot persist consumerOffset.json: {e}; will retry");
                    }
                    if let Err(e) = persist_order_info(&ctx) {
                        tracing::error!("cannot persist consumerOrderInfo.json: {e}; will retry");
                    }
                }
                if last_delay.elapsed() >= Duration::from_millis(DELAY_OFFSET_FLUSH_MS) {
                    last_delay = Instant::now();
                    if let Err(e) = ctx.delay_offsets.persist() {
                        tracing::error!("cannot persist delayOffset.json: {e}; will retry");
                    }
                }
                if last_acl.elapsed() >= Duration::from_millis(crate::acl::RELOAD_CHECK_MS) {
                    last_acl = Instant::now();
                    if let Some(acl) = ctx.acl.get() {
                        acl.reload_if_changed();
                    }
                }
                if last_scan.elapsed() >= Duration::from_millis(EXPIRY_SCAN_MS) {
                    last_scan = Instant::now();
                    crate::processor::client_manage::scan_expired_channels(&ctx);
                }
            }
        })
        .expect("spawn the housekeeping thread");
    (stop, handle)
}

/// The runtime-facing handler: hands requests to the context once it exists.
struct BrokerHandler {
    ctx: Arc<OnceLock<Arc<BrokerContext>>>,
}

impl RequestHandler for BrokerHandler {
    fn handle(&self, request: RemotingCommand, rc: &RequestContext) -> Reply {
        if request.is_response() {
            // A client answering a broker-initiated request we sent oneway: nothing to do.
            return Reply::Nothing;
        }
        let Some(ctx) = self.ctx.get() else {
            return Reply::Now(
                request
                    .response_to(
                        ResponseCode::SystemBusy.code(),
                        Some("broker is starting, try again".to_string()),
                    )
                    .into(),
            );
        };
        if let Some(refusal) = ctx
            .acl
            .get()
            .and_then(|acl| crate::acl::refusal(acl, &request, rc))
        {
            return refusal;
        }
        let (started, request_code) = (rc.received_at(), request.code);
        let reply = crate::processor::dispatch(ctx, request, rc);
        if let Reply::Now(r) = &reply {
            ctx.metrics.record_rpc(
                request_code,
                r.command.code,
                r.command.remark.as_deref(),
                started.elapsed(),
                false,
            );
        }
        reply
    }

    /// Per-core work queued by stage threads: put completions (the store) and long-polling
    /// arrivals (the hold service) are answered here, on the core that owns the connection.
    fn on_core_wake(&self, core: usize) {
        if let Some(ctx) = self.ctx.get() {
            ctx.on_core_wake(core);
        }
    }

    fn after_pass(&self, _core: usize) -> bool {
        self.ctx.get().is_some_and(|ctx| ctx.store.push_core_puts())
    }

    fn on_close(&self, conn: &Connection) {
        if let Some(ctx) = self.ctx.get() {
            crate::processor::client_manage::on_channel_closed(ctx, conn.id());
        }
    }
}

/// Gives every network core of the broker's servers its own put and completion rings in
/// the store, so sends go from their core to the append stage and their answers are built
/// back on that core; and hands the store the send-queue wait limit.
fn attach_cores_to_store(ctx: &BrokerContext, servers: &[Server]) {
    let doorbells: Vec<_> = servers
        .iter()
        .flat_map(|s| s.core_handles())
        .map(|h| h.doorbell().clone())
        .collect();
    let cores = servers.first().map_or(1, |s| s.core_handles().len().max(1));
    let max_in_flight_per_core = ringmq_runtime::server::DEFAULT_MAX_IN_FLIGHT_TOTAL / cores;
    ctx.store
        .attach_network_cores(&doorbells, max_in_flight_per_core);
    ctx.store
        .set_send_queue_wait_limit_ms(ctx.live.send_queue_wait_limit_ms());
}
