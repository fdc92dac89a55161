//! The broker's shared state (`BrokerContext`: config, metadata managers, client tables, the
//! store, the long-polling hold service) and the request dispatch by code, independent of the
//! network runtime: a request arrives with a [`RequestCtx`] (its connection and a way to answer
//! later) and leaves as [`Handled`].

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use ringmq_remoting::codes::{RequestCode, ResponseCode};
use ringmq_remoting::header::{read_field, FieldValue, HeaderError};
use ringmq_remoting::message::id::UniqKeyGenerator;
use ringmq_remoting::{ExtFields, RemotingCommand};

use crate::client::consumer_manager::{ConsumerManager, RebalanceLockManager};
use crate::client::producer_manager::ProducerManager;
use crate::config::BrokerConfig;
use crate::long_polling::PullHoldService;
use crate::metadata::consumer_offset::ConsumerOffsetManager;
use crate::metadata::delay_offset::DelayOffsetManager;
use crate::metadata::subscription_group::SubscriptionGroupManager;
use crate::metadata::topic_config::TopicConfigManager;
use crate::processor;
use crate::store_api::BrokerStore;

/// A client connection as the broker's tables hold it (implemented by the runtime's
/// `Connection`, and by fakes in tests).
pub trait ClientChannel: Send + Sync {
    fn id(&self) -> u64;
    fn peer_addr(&self) -> SocketAddr;
    fn is_alive(&self) -> bool;
    /// Sends a server-initiated oneway request (e.g. NOTIFY_CONSUMER_IDS_CHANGED).
    fn send_oneway(&self, command: RemotingCommand) -> bool;
    fn close(&self);
}

/// A response frame: `command` plus body chunks written after `command.body` without copying
/// (pull / query responses carry stored records this way: as memory chunks, or as file
/// ranges of CommitLog segments that are spliced to the socket).
#[derive(Debug)]
pub struct BrokerResponse {
    pub command: RemotingCommand,
    pub extra_body: Vec<ringmq_runtime::BodyChunk>,
}

impl From<RemotingCommand> for BrokerResponse {
    fn from(command: RemotingCommand) -> Self {
        Self {
            command,
            extra_body: Vec::new(),
        }
    }
}

/// Answers a request later, from any thread (send completions, woken long polls).
pub type Deferred = Box<dyn FnOnce(BrokerResponse) + Send>;

/// What a processor did with a request.
#[derive(Debug)]
pub enum Handled {
    /// Answer now on the network core.
    Now(BrokerResponse),
    /// The processor took a [`Deferred`] and answers later.
    Later,
    /// Oneway request: no answer.
    Nothing,
}

impl From<RemotingCommand> for Handled {
    fn from(command: RemotingCommand) -> Self {
        Handled::Now(command.into())
    }
}

/// The request's environment as the runtime provides it.
pub trait RequestCtx {
    /// A handle to the connection for the client tables.
    fn channel(&self) -> &Arc<dyn ClientChannel>;
    /// The client's address as the broker sees it (BORNHOST of sends); runtimes override
    /// it so the send path does not need a channel handle.
    fn peer_addr(&self) -> SocketAddr {
        self.channel().peer_addr()
    }
    /// The connection's id (stable for its lifetime).
    fn channel_id(&self) -> u64 {
        self.channel().id()
    }
    /// Takes the right to answer later; call at most once per request.
    fn defer(&self) -> Deferred;
    /// How long the request waited before reaching its processor, when the runtime knows.
    fn queued_ms(&self) -> u64 {
        0
    }
}

/// A predicate over a message's property string (`name 0x01 value 0x02 …`), e.g. a compiled
/// SQL92 expression.
pub trait PropertyPredicate: Send + Sync {
    fn matches(&self, properties: &str) -> bool;
}

impl std::fmt::Debug for dyn PropertyPredicate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PropertyPredicate")
    }
}

/// Compiles a SQL92 subscription expression; provided by the filter module.
pub type Sql92Compiler = fn(&str) -> Result<Arc<dyn PropertyPredicate>, String>;

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
    pub store: Arc<dyn BrokerStore>,
    pub hold: Arc<PullHoldService>,
    pub uniq_keys: Mutex<UniqKeyGenerator>,
    /// Delay level → ms (level 1 at index 0).
    pub delay_levels_ms: Vec<u64>,
    pub sql92: Option<Sql92Compiler>,
    /// Per-thread request counters and the stage-profile probes (`/metrics`, runtime info).
    pub metrics: crate::metrics::BrokerMetrics,
}

impl BrokerContext {
    /// A context around already-loaded managers.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: BrokerConfig,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        delay_offsets: DelayOffsetManager,
        store: Arc<dyn BrokerStore>,
    ) -> Arc<Self> {
        let store_host = crate::store_api::store_host_addr(&config.broker_ip1, config.listen_port);
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
        Arc::new(Self {
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
            config,
        })
    }

    /// An in-memory context for tests: managers without files, the given store.
    pub fn for_tests(config: BrokerConfig, store: Arc<dyn BrokerStore>) -> Arc<Self> {
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

    /// Routes one request to its processor. Unknown codes get REQUEST_CODE_NOT_SUPPORTED; a
    /// request missing a required header field gets SYSTEM_ERROR naming the field.
    pub fn dispatch(self: &Arc<Self>, request: RemotingCommand, rc: &dyn RequestCtx) -> Handled {
        let Some(code) = RequestCode::from_code(request.code) else {
            return not_supported(&request);
        };
        // Required header fields are checked here, once, from remoting's typed headers,
        // so no handler acts on a request that lacks one (`@CFNotNull` fields upstream).
        if let Err(e) =
            ringmq_remoting::header::check_required_for_code(request.code, &request.ext_fields)
        {
            return header_error(&request, e);
        }
        use RequestCode as C;
        match code {
            C::SendMessage | C::SendMessageV2 | C::SendBatchMessage => {
                processor::send::process(self, request, rc)
            }
            C::PullMessage | C::LitePullMessage => processor::pull::process(self, request, rc),
            C::QueryConsumerOffset => processor::offset::query_consumer_offset(self, &request),
            C::UpdateConsumerOffset => processor::offset::update_consumer_offset(self, &request),
            C::GetMaxOffset => processor::offset::get_max_offset(self, &request),
            C::GetMinOffset => processor::offset::get_min_offset(self, &request),
            C::SearchOffsetByTimestamp => {
                processor::offset::search_offset_by_timestamp(self, &request)
            }
            C::GetEarliestMsgStoretime => {
                processor::offset::get_earliest_msg_storetime(self, &request)
            }
            C::HeartBeat => processor::client_manage::heartbeat(self, &request, rc),
            C::UnregisterClient => processor::client_manage::unregister_client(self, &request, rc),
            C::CheckClientConfig => processor::client_manage::check_client_config(self, &request),
            C::GetConsumerListByGroup => {
                processor::client_manage::get_consumer_list_by_group(self, &request)
            }
            C::LockBatchMq => processor::client_manage::lock_batch_mq(self, &request),
            C::UnlockBatchMq => processor::client_manage::unlock_batch_mq(self, &request),
            C::ViewMessageById => processor::query::view_message_by_id(self, &request),
            C::QueryMessage => processor::query::query_message(self, &request),
            C::ConsumerSendMsgBack => crate::retry::consumer_send_msg_back(self, request, rc),
            C::EndTransaction => crate::transaction::end_transaction(self, request, rc),
            _ => match processor::admin::process(self, &request, rc) {
                Some(handled) => handled,
                None => not_supported(&request),
            },
        }
    }

    /// A connection closed: drop its registrations (consumer groups are notified).
    pub fn on_channel_closed(&self, channel_id: u64) {
        let changed = self.consumers.remove_channel(channel_id);
        self.producers.remove_channel(channel_id);
        for group in changed {
            processor::client_manage::notify_consumer_ids_changed(self, &group);
        }
    }

    /// Drops clients silent for `channelExpiredTimeout` (the housekeeping scan).
    pub fn scan_expired_channels(&self) {
        let now = crate::persist::now_ms();
        let timeout = self.config.channel_expired_timeout_ms as i64;
        for (group, channel) in self.consumers.scan_expired(now, timeout) {
            tracing::warn!(group, peer = %channel.peer_addr(), "consumer channel expired: no heartbeat for {timeout} ms; closing");
            channel.close();
            processor::client_manage::notify_consumer_ids_changed(self, &group);
        }
        for channel in self.producers.scan_expired(now, timeout) {
            tracing::warn!(peer = %channel.peer_addr(), "producer channel expired: no heartbeat for {timeout} ms");
        }
    }
}

fn not_supported(request: &RemotingCommand) -> Handled {
    tracing::debug!(
        code = request.code,
        "request code not supported by this broker"
    );
    if request.is_oneway() {
        return Handled::Nothing;
    }
    request
        .response_to(
            ResponseCode::RequestCodeNotSupported.code(),
            Some(format!(" request type {} not supported", request.code)),
        )
        .into()
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

/// Reads a required header field; a missing or malformed one becomes the error the client
/// reads (Java answers SYSTEM_ERROR for header decode failures).
pub fn required<T: FieldValue>(fields: &ExtFields, key: &'static str) -> Result<T, HeaderError> {
    read_field::<T>(fields, key)?.ok_or(HeaderError::Missing { field: key })
}

pub fn optional<T: FieldValue>(
    fields: &ExtFields,
    key: &'static str,
) -> Result<Option<T>, HeaderError> {
    read_field::<T>(fields, key)
}

/// The SYSTEM_ERROR answer for an undecodable header.
pub fn header_error(request: &RemotingCommand, e: HeaderError) -> Handled {
    tracing::warn!(code = request.code, "bad request header: {e}");
    if request.is_oneway() {
        return Handled::Nothing;
    }
    request
        .response_to(ResponseCode::SystemError.code(), Some(e.to_string()))
        .into()
}
