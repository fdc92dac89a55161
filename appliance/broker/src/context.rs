//! The broker's shared state (`BrokerContext`: config, metadata managers, client tables, the
//! store, the long-polling hold service) and the answers every processor shares (header
//! errors, error responses). Requests reach the processors through
//! [`crate::processor::dispatch`] with the runtime's `RequestContext` and leave as its `Reply`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use ringmq_remoting::codes::ResponseCode;
use ringmq_remoting::header::HeaderError;
use ringmq_remoting::message::id::UniqKeyGenerator;
use ringmq_remoting::RemotingCommand;
use ringmq_runtime::Reply;
use ringmq_store::StoreApi;

use crate::client::consumer_manager::{ConsumerManager, RebalanceLockManager};
use crate::client::producer_manager::ProducerManager;
use crate::config::BrokerConfig;
use crate::filter::Sql92Compiler;
use crate::long_polling::PullHoldService;
use crate::metadata::consumer_offset::ConsumerOffsetManager;
use crate::metadata::delay_offset::DelayOffsetManager;
use crate::metadata::subscription_group::SubscriptionGroupManager;
use crate::metadata::topic_config::TopicConfigManager;

/// Everything a processor may touch.
pub struct BrokerContext {
    /// The configuration the broker started with. Keys UPDATE_BROKER_CONFIG changes at runtime
    /// ([`crate::live_config::LIVE_KEYS`]) must be read from `live` instead.
    pub config: BrokerConfig,
    /// Live values of the runtime-updatable keys and the effective configuration.
    pub live: crate::live_config::LiveConfig,
    /// STOREHOST of every record this broker writes and the host in offsetMsgIds.
    pub store_host: SocketAddr,
    pub topics: TopicConfigManager,
    pub groups: SubscriptionGroupManager,
    pub offsets: ConsumerOffsetManager,
    pub delay_offsets: DelayOffsetManager,
    pub consumers: ConsumerManager,
    pub producers: ProducerManager,
    pub locks: RebalanceLockManager,
    pub store: Arc<dyn StoreApi>,
    pub hold: Arc<PullHoldService>,
    pub uniq_keys: Mutex<UniqKeyGenerator>,
    /// Delay level → ms (level 1 at index 0).
    pub delay_levels_ms: Vec<u64>,
    pub sql92: Option<Sql92Compiler>,
    /// Per-thread request counters and the stage-profile probes (`/metrics`, runtime info).
    pub metrics: crate::metrics::BrokerMetrics,
    /// The timing wheel of timer messages, once started (master with `timerWheelEnable`).
    pub timer: crate::timer::TimerHandle,
    /// The plain ACL files and rules, set once at start when `aclEnable=true`.
    pub acl: std::sync::OnceLock<Arc<ringmq_acl::AclStore>>,
    /// TLS for the broker's own connections to name servers and its master
    /// (`tls.enable=true`); `None` connects in plain.
    pub tls_client: crate::config::ClientTls,
    /// POP offsets handed out ahead of their checkpoints, and the revive queue counter.
    pub pop: crate::pop::PopState,
    /// Master or slave now (changes at run time in controller mode only).
    pub role: crate::role::LiveRole,
    /// Controller mode: the control thread's inbox and this broker's controller id.
    pub controller: crate::role::ControllerLink,
}

impl BrokerContext {
    /// Whether this broker is the master of its group now.
    pub fn is_master(&self) -> bool {
        self.role.is_master()
    }

    /// Runs on network core `core` each pass of its loop (`RequestHandler::on_core_wake`):
    /// takes what the stages queued for this core. Must not block.
    pub fn on_core_wake(&self, core: usize) {
        self.store.run_core_completions();
        // This core's held pulls: arrivals, expiries and max-offset re-checks.
        self.hold.on_core_wake(core, &|topic, queue_id| {
            self.store.max_offset_in_queue(topic, queue_id)
        });
    }

    /// A context around already-loaded managers.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: BrokerConfig,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        delay_offsets: DelayOffsetManager,
        store: Arc<dyn StoreApi>,
    ) -> Arc<Self> {
        let store_host = crate::disk_store::store_host_addr(&config.broker_ip1, config.listen_port);
        let delay_levels_ms = config.delay_levels_ms().unwrap_or_else(|e| {
            tracing::error!("messageDelayLevel is invalid ({e}); using the default levels");
            crate::config::parse_delay_levels(crate::config::DEFAULT_MESSAGE_DELAY_LEVEL)
                .unwrap_or_default()
        });
        let hold = Arc::new(PullHoldService::new());
        let wake = hold.clone();
        store.add_arrival_listener(Arc::new(move |ev| {
            wake.notify_arrival(
                ev.topic,
                ev.queue_id,
                ev.next_queue_offset,
                ev.tags_code,
                ev.properties,
            )
        }));
        let now = crate::persist::now_ms();
        let uniq = UniqKeyGenerator::new(store_host.ip(), std::process::id(), now as i32, 0, now);
        let tls_client = crate::config::tls_client(&config).unwrap_or_else(|e| {
            // `config_check` refuses to start with this; only contexts built without it
            // (tools, tests) get here.
            tracing::error!("TLS client settings: {e}; connecting in plain");
            None
        });
        Arc::new(Self {
            pop: crate::pop::PopState::default(),
            tls_client,
            store_host,
            topics,
            groups,
            offsets,
            delay_offsets,
            consumers: ConsumerManager::new(),
            producers: ProducerManager::new(),
            locks: RebalanceLockManager::new(),
            store,
            hold,
            uniq_keys: Mutex::new(uniq),
            delay_levels_ms,
            sql92: Some(crate::filter::sql92::compile_predicate),
            metrics: crate::metrics::BrokerMetrics::new(
                &config.broker_cluster_name,
                &config.broker_name,
            ),
            live: crate::live_config::LiveConfig::new(&config),
            timer: crate::timer::TimerHandle::default(),
            acl: std::sync::OnceLock::new(),
            role: crate::role::LiveRole::new(&config),
            controller: crate::role::ControllerLink::default(),
            config,
        })
    }

    /// An in-memory context for tests: managers without files, the given store.
    pub fn for_tests(config: BrokerConfig, store: Arc<dyn StoreApi>) -> Arc<Self> {
        let topics = TopicConfigManager::new(&config, None);
        let groups = SubscriptionGroupManager::new(&config, None);
        let ctx = Self::new(
            config,
            topics,
            groups,
            ConsumerOffsetManager::new(None),
            DelayOffsetManager::new(None),
            store,
        );
        // Like the managers above: nothing of a test context reaches the disk.
        ctx.live.set_config_file(None);
        ctx
    }
}

/// A response with `code` and `remark` (and a log line, since every error should be visible
/// on the broker side too).
pub fn error_response(
    request: &RemotingCommand,
    code: ResponseCode,
    remark: impl Into<String>,
) -> RemotingCommand {
    let remark = remark.into();
    tracing::debug!(
        request_code = request.code,
        response = code.name(),
        "{remark}"
    );
    request.response_to(code.code(), Some(remark))
}

/// The SYSTEM_ERROR answer for an undecodable header.
pub fn header_error(request: &RemotingCommand, e: HeaderError) -> Reply {
    tracing::warn!(code = request.code, "bad request header: {e}");
    if request.is_oneway() {
        return Reply::Nothing;
    }
    request
        .response_to(ResponseCode::SystemError.code(), Some(e.to_string()))
        .into()
}
