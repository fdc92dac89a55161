//! Consumers. [`PullConsumer`] is the explicit API: pull a queue from an offset (with
//! long polling), query/commit offsets, send failed messages back. [`PushConsumer`] runs
//! the Java push-consumer loop on top of it (`headers.md` §6, CLUSTERING model): heartbeat
//! every 30 s, rebalance every 20 s and on `NOTIFY_CONSUMER_IDS_CHANGED` (average
//! allocation over `GET_CONSUMER_LIST_BY_GROUP`), one long-polling pull loop per assigned
//! queue, offset commits every 5 s and on shutdown, and `CONSUMER_SEND_MSG_BACK` for
//! messages the listener asks to consume later.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use ringmq_remoting::header::{CommandHeader, PullMessageRequestHeader, PullMessageResponseHeader};
use ringmq_remoting::message::properties::keys;
use ringmq_remoting::message::tags::{java_string_hash, TagFilter};
use ringmq_remoting::{RemotingCommand, RequestCode, ResponseCode};

use crate::error::{ClientError, Result};
use crate::message::{decode_records, new_client_id, now_ms, MessageExt, MessageQueue};
use crate::route::{RouteCache, TopicRoute};
use crate::transport::{expect_success, ClientConfig, RemotingClient};

/// `PullSysFlag` bits (`headers.md` §2.1).
pub const PULL_COMMIT_OFFSET: i32 = 0x1;
pub const PULL_SUSPEND: i32 = 0x2;
pub const PULL_SUBSCRIPTION: i32 = 0x4;

/// What a pull found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullStatus {
    /// Messages returned (SUCCESS).
    Found,
    /// Nothing new at the offset (PULL_NOT_FOUND, 19).
    NoNewMsg,
    /// Entries skipped by the filter (PULL_RETRY_IMMEDIATELY, 20).
    NoMatchedMsg,
    /// The offset is invalid; continue at `next_begin_offset` (PULL_OFFSET_MOVED, 21).
    OffsetIllegal,
}

#[derive(Debug, Clone)]
pub struct PullResult {
    pub status: PullStatus,
    pub next_begin_offset: i64,
    pub min_offset: i64,
    pub max_offset: i64,
    pub suggest_which_broker_id: i64,
    pub messages: Vec<MessageExt>,
}

/// Per-pull options.
#[derive(Debug, Clone)]
pub struct PullOptions {
    /// TAG expression (`*`, `A || B`) or SQL92 text.
    pub subscription: String,
    /// `TAG` or `SQL92`.
    pub expression_type: String,
    pub max_msgs: i32,
    /// Long-poll hold on the broker when nothing is there; `None` answers at once.
    pub suspend_ms: Option<u64>,
    /// Offset to commit on the broker with this pull (PullSysFlag bit 0).
    pub commit_offset: Option<i64>,
    /// RPC timeout; must exceed `suspend_ms` (Java: 30 s for a 15 s hold).
    pub timeout_ms: u64,
}

impl Default for PullOptions {
    fn default() -> Self {
        Self {
            subscription: "*".into(),
            expression_type: "TAG".into(),
            max_msgs: 32,
            suspend_ms: Some(15_000),
            commit_offset: None,
            timeout_ms: 30_000,
        }
    }
}

/// Pull-consumer settings.
#[derive(Debug, Clone)]
pub struct PullConsumerConfig {
    pub group: String,
    pub namesrv_addrs: Vec<String>,
    pub route_ttl_ms: u64,
    pub client: ClientConfig,
}

impl Default for PullConsumerConfig {
    fn default() -> Self {
        Self {
            group: "DEFAULT_CONSUMER".into(),
            namesrv_addrs: vec!["127.0.0.1:9876".into()],
            route_ttl_ms: 30_000,
            client: ClientConfig::default(),
        }
    }
}

struct PullInner {
    client: RemotingClient,
    routes: RouteCache,
    group: String,
    client_id: String,
}

/// Explicit pull API for one consumer group (cheap to clone; bound to this runtime thread).
#[derive(Clone)]
pub struct PullConsumer {
    inner: Rc<PullInner>,
}

impl PullConsumer {
    pub fn new(config: PullConsumerConfig) -> Self {
        let client = RemotingClient::new(config.client.clone());
        Self::with_client(client, config)
    }

    pub fn with_client(client: RemotingClient, config: PullConsumerConfig) -> Self {
        let routes = RouteCache::new(
            client.clone(),
            config.namesrv_addrs.clone(),
            Duration::from_millis(config.route_ttl_ms),
        );
        Self {
            inner: Rc::new(PullInner {
                client,
                routes,
                group: config.group,
                client_id: new_client_id(),
            }),
        }
    }

    pub fn client(&self) -> &RemotingClient {
        &self.inner.client
    }

    pub fn routes(&self) -> &RouteCache {
        &self.inner.routes
    }

    pub fn group(&self) -> &str {
        &self.inner.group
    }

    pub fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    /// The readable queues of `topic`.
    pub async fn subscribe_queues(&self, topic: &str) -> Result<Vec<MessageQueue>> {
        Ok(self
            .inner
            .routes
            .route(topic)
            .await?
            .subscribe_queues
            .clone())
    }

    async fn broker_addr(&self, mq: &MessageQueue) -> Result<(Rc<TopicRoute>, String)> {
        let route = self.inner.routes.route(&mq.topic).await?;
        let addr = route
            .master_addr(&mq.broker_name)
            .or_else(|| {
                route
                    .data
                    .broker_datas
                    .iter()
                    .find(|b| b.broker_name == mq.broker_name)?
                    .broker_addrs
                    .values()
                    .next()
                    .map(String::as_str)
            })
            .ok_or_else(|| {
                ClientError::Invalid(format!(
                    "no address for broker {} in the route of {}",
                    mq.broker_name, mq.topic
                ))
            })?
            .to_string();
        Ok((route, addr))
    }

    /// Pulls up to `max_msgs` from `offset` with the default options (15 s long poll).
    pub async fn pull(&self, mq: &MessageQueue, offset: i64, max_msgs: i32) -> Result<PullResult> {
        self.pull_with(
            mq,
            offset,
            &PullOptions {
                max_msgs,
                ..PullOptions::default()
            },
        )
        .await
    }

    /// `PULL_MESSAGE` (11) with the subscription carried in the request (bit 2), so no
    /// heartbeat-registered subscription is needed.
    pub async fn pull_with(
        &self,
        mq: &MessageQueue,
        offset: i64,
        opts: &PullOptions,
    ) -> Result<PullResult> {
        let (_, addr) = self.broker_addr(mq).await?;
        self.pull_from(&addr, mq, offset, opts).await
    }

    /// Pulls from an explicit broker address.
    pub async fn pull_from(
        &self,
        addr: &str,
        mq: &MessageQueue,
        offset: i64,
        opts: &PullOptions,
    ) -> Result<PullResult> {
        let code = RequestCode::PullMessage.code();
        let mut sys_flag = PULL_SUBSCRIPTION;
        if opts.commit_offset.is_some() {
            sys_flag |= PULL_COMMIT_OFFSET;
        }
        if opts.suspend_ms.is_some() {
            sys_flag |= PULL_SUSPEND;
        }
        let header = PullMessageRequestHeader {
            consumer_group: self.inner.group.clone(),
            topic: mq.topic.clone(),
            queue_id: mq.queue_id,
            queue_offset: offset,
            max_msg_nums: opts.max_msgs,
            sys_flag,
            commit_offset: opts.commit_offset.unwrap_or(0),
            suspend_timeout_millis: opts.suspend_ms.unwrap_or(0) as i64,
            subscription: Some(opts.subscription.clone()),
            sub_version: 0,
            expression_type: Some(opts.expression_type.clone()),
            max_msg_bytes: Some(i32::MAX),
            ..Default::default()
        };
        let mut req = RemotingCommand::request(code, 0);
        header.encode(&mut req.ext_fields);
        let resp = self
            .inner
            .client
            .invoke(addr, req, Duration::from_millis(opts.timeout_ms))
            .await?;
        let status = match ResponseCode::from_code(resp.code) {
            Some(ResponseCode::Success) => PullStatus::Found,
            Some(ResponseCode::PullNotFound) => PullStatus::NoNewMsg,
            Some(ResponseCode::PullRetryImmediately) => PullStatus::NoMatchedMsg,
            Some(ResponseCode::PullOffsetMoved) => PullStatus::OffsetIllegal,
            _ => {
                return Err(ClientError::Response {
                    addr: addr.to_string(),
                    request_code: code,
                    code: resp.code,
                    remark: resp.remark.unwrap_or_default(),
                })
            }
        };
        let h = PullMessageResponseHeader::decode(&resp.ext_fields).map_err(|e| {
            ClientError::Protocol {
                addr: addr.to_string(),
                request_code: code,
                reason: format!("pull response header: {e}"),
            }
        })?;
        let mut messages = if status == PullStatus::Found {
            decode_records(&resp.body, &mq.broker_name)
        } else {
            Vec::new()
        };
        // Brokers filter by tag hash only; re-check the exact tag (collisions).
        if opts.expression_type == "TAG" {
            let filter = TagFilter::parse(&opts.subscription);
            if !filter.is_all() {
                messages.retain(|m| filter.matches_tag(m.tags()));
            }
        }
        Ok(PullResult {
            status,
            next_begin_offset: h.next_begin_offset,
            min_offset: h.min_offset,
            max_offset: h.max_offset,
            suggest_which_broker_id: h.suggest_which_broker_id,
            messages,
        })
    }

    async fn offset_call(
        &self,
        mq: &MessageQueue,
        code: RequestCode,
        extra: &[(&str, String)],
    ) -> Result<RemotingCommand> {
        let (_, addr) = self.broker_addr(mq).await?;
        let mut req = RemotingCommand::request(code.code(), 0)
            .with_ext("topic", mq.topic.clone())
            .with_ext("queueId", mq.queue_id.to_string());
        for (k, v) in extra {
            req.ext_fields.insert(*k, v.clone());
        }
        let resp = self.inner.client.invoke_default(&addr, req).await?;
        Ok(resp)
    }

    fn read_offset(&self, resp: RemotingCommand, code: RequestCode, key: &str) -> Result<i64> {
        let resp = expect_success("", code.code(), resp)?;
        resp.ext_fields
            .get(key)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| ClientError::Protocol {
                addr: String::new(),
                request_code: code.code(),
                reason: format!("response lacks a numeric {key}"),
            })
    }

    /// The group's committed offset of `mq`; `None` when the broker has none (22).
    pub async fn query_offset(&self, mq: &MessageQueue) -> Result<Option<i64>> {
        let resp = self
            .offset_call(
                mq,
                RequestCode::QueryConsumerOffset,
                &[
                    ("consumerGroup", self.inner.group.clone()),
                    ("setZeroIfNotFound", "false".into()),
                ],
            )
            .await?;
        if resp.code == ResponseCode::QueryNotFound.code() {
            return Ok(None);
        }
        self.read_offset(resp, RequestCode::QueryConsumerOffset, "offset")
            .map(Some)
    }

    /// Commits `offset` for `mq` (`UPDATE_CONSUMER_OFFSET`), oneway as Java does, or waiting
    /// for the broker's answer.
    pub async fn update_offset(&self, mq: &MessageQueue, offset: i64, oneway: bool) -> Result<()> {
        let (_, addr) = self.broker_addr(mq).await?;
        let req = RemotingCommand::request(RequestCode::UpdateConsumerOffset.code(), 0)
            .with_ext("consumerGroup", self.inner.group.clone())
            .with_ext("topic", mq.topic.clone())
            .with_ext("queueId", mq.queue_id.to_string())
            .with_ext("commitOffset", offset.to_string());
        if oneway {
            self.inner.client.invoke_oneway(&addr, req).await
        } else {
            let resp = self.inner.client.invoke_default(&addr, req).await?;
            expect_success(&addr, RequestCode::UpdateConsumerOffset.code(), resp).map(|_| ())
        }
    }

    /// The queue's max offset (next offset to be written).
    pub async fn max_offset(&self, mq: &MessageQueue) -> Result<i64> {
        let resp = self.offset_call(mq, RequestCode::GetMaxOffset, &[]).await?;
        self.read_offset(resp, RequestCode::GetMaxOffset, "offset")
    }

    pub async fn min_offset(&self, mq: &MessageQueue) -> Result<i64> {
        let resp = self.offset_call(mq, RequestCode::GetMinOffset, &[]).await?;
        self.read_offset(resp, RequestCode::GetMinOffset, "offset")
    }

    /// First offset whose store time is ≥ `timestamp_ms`.
    pub async fn search_offset(&self, mq: &MessageQueue, timestamp_ms: i64) -> Result<i64> {
        let resp = self
            .offset_call(
                mq,
                RequestCode::SearchOffsetByTimestamp,
                &[("timestamp", timestamp_ms.to_string())],
            )
            .await?;
        self.read_offset(resp, RequestCode::SearchOffsetByTimestamp, "offset")
    }

    /// `CONSUMER_SEND_MSG_BACK` (36): the broker re-delivers `msg` through `%RETRY%group`
    /// after a delay (`delay_level` 0: broker picks `3 + reconsumeTimes`; < 0: DLQ).
    pub async fn send_back(
        &self,
        msg: &MessageExt,
        delay_level: i32,
        max_reconsume_times: i32,
    ) -> Result<()> {
        // Like Java: the master of the broker the message was pulled from; the record's
        // store host only when the broker name is unknown.
        let addr = if msg.broker_name.is_empty() {
            msg.store_host.to_string()
        } else {
            self.broker_addr(&msg.queue()).await?.1
        };
        let req = RemotingCommand::request(RequestCode::ConsumerSendMsgBack.code(), 0)
            .with_ext("offset", msg.commit_log_offset.to_string())
            .with_ext("group", self.inner.group.clone())
            .with_ext("delayLevel", delay_level.to_string())
            .with_ext("originMsgId", msg.msg_id.clone())
            .with_ext("originTopic", msg.topic.clone())
            .with_ext("unitMode", "false")
            .with_ext("maxReconsumeTimes", max_reconsume_times.to_string());
        let resp = self.inner.client.invoke_default(&addr, req).await?;
        expect_success(&addr, RequestCode::ConsumerSendMsgBack.code(), resp).map(|_| ())
    }

    /// Client ids of the group's live consumers, as the broker at `addr` knows them, sorted.
    pub async fn consumer_ids(&self, addr: &str) -> Result<Vec<String>> {
        let code = RequestCode::GetConsumerListByGroup.code();
        let req =
            RemotingCommand::request(code, 0).with_ext("consumerGroup", self.inner.group.clone());
        let resp = expect_success(
            addr,
            code,
            self.inner.client.invoke_default(addr, req).await?,
        )?;
        let v = ringmq_remoting::json::parse(&resp.body).map_err(|e| ClientError::Protocol {
            addr: addr.to_string(),
            request_code: code,
            reason: format!("consumer id list: {e}"),
        })?;
        let mut ids: Vec<String> = v
            .get("consumerIdList")
            .and_then(|l| l.as_array())
            .map(|l| {
                l.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        ids.sort();
        Ok(ids)
    }

    /// `HEART_BEAT` with this group's consumer data to `addr`.
    pub async fn heartbeat_to(&self, addr: &str, body: &str) -> Result<()> {
        let code = RequestCode::HeartBeat.code();
        let req = RemotingCommand::request(code, 0).with_body(body.to_string());
        expect_success(
            addr,
            code,
            self.inner.client.invoke_default(addr, req).await?,
        )
        .map(|_| ())
    }

    /// The heartbeat body for this group subscribed to `subscriptions` (topic → expression).
    pub fn heartbeat_body(
        &self,
        subscriptions: &BTreeMap<String, String>,
        consume_type: &str,
        consume_from: &str,
    ) -> String {
        let subs: Vec<serde_json::Value> = subscriptions
            .iter()
            .map(|(topic, expr)| {
                let (tags, codes): (Vec<String>, Vec<i32>) = match TagFilter::parse(expr) {
                    TagFilter::All => (Vec::new(), Vec::new()),
                    TagFilter::Tags { tags, codes } => (tags, codes),
                };
                debug_assert!(tags
                    .iter()
                    .zip(&codes)
                    .all(|(t, c)| java_string_hash(t) == *c));
                serde_json::json!({
                    "classFilterMode": false,
                    "codeSet": codes,
                    "expressionType": "TAG",
                    "subString": expr,
                    "subVersion": now_ms(),
                    "tagsSet": tags,
                    "topic": topic,
                })
            })
            .collect();
        serde_json::json!({
            "clientID": self.inner.client_id,
            "consumerDataSet": [{
                "consumeFromWhere": consume_from,
                "consumeType": consume_type,
                "groupName": self.inner.group,
                "messageModel": "CLUSTERING",
                "subscriptionDataSet": subs,
                "unitMode": false,
            }],
            "heartbeatFingerprint": 0,
            "producerDataSet": [],
            "withoutSub": false,
        })
        .to_string()
    }

    /// `UNREGISTER_CLIENT` for this group at `addr`.
    pub async fn unregister(&self, addr: &str) -> Result<()> {
        let code = RequestCode::UnregisterClient.code();
        let req = RemotingCommand::request(code, 0)
            .with_ext("clientID", self.inner.client_id.clone())
            .with_ext("consumerGroup", self.inner.group.clone());
        expect_success(
            addr,
            code,
            self.inner.client.invoke_default(addr, req).await?,
        )
        .map(|_| ())
    }
}

/// Java `AllocateMessageQueueAveragely`: contiguous, near-equal shares in sorted order.
pub fn allocate_averagely<T: Clone>(all: &[T], client_ids: &[String], me: &str) -> Vec<T> {
    let Some(index) = client_ids.iter().position(|c| c == me) else {
        return Vec::new();
    };
    let (n, c) = (all.len() as i64, client_ids.len() as i64);
    if n == 0 {
        return Vec::new();
    }
    let index = index as i64;
    let rem = n % c;
    let average = if n <= c {
        1
    } else if rem > 0 && index < rem {
        n / c + 1
    } else {
        n / c
    };
    let start = if rem > 0 && index < rem {
        index * average
    } else {
        index * average + rem
    };
    let range = average.min(n - start).max(0);
    (0..range)
        .map(|i| all[((start + i) % n) as usize].clone())
        .collect()
}

/// Where a queue without a committed offset starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeFrom {
    LastOffset,
    FirstOffset,
    Timestamp(i64),
}

impl ConsumeFrom {
    fn java_name(self) -> &'static str {
        match self {
            Self::LastOffset => "CONSUME_FROM_LAST_OFFSET",
            Self::FirstOffset => "CONSUME_FROM_FIRST_OFFSET",
            Self::Timestamp(_) => "CONSUME_FROM_TIMESTAMP",
        }
    }
}

/// A listener's verdict on a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeResult {
    Success,
    /// Re-deliver later through `%RETRY%group` (`CONSUMER_SEND_MSG_BACK`).
    Later,
}

/// Called on the runtime thread with each batch (topic already restored for retries).
pub type MessageListener = Rc<dyn Fn(&[MessageExt]) -> ConsumeResult>;

/// Push-consumer settings; defaults are Java's `DefaultMQPushConsumer` ones.
#[derive(Debug, Clone)]
pub struct PushConsumerConfig {
    pub group: String,
    pub namesrv_addrs: Vec<String>,
    /// topic → TAG expression.
    pub subscriptions: BTreeMap<String, String>,
    pub consume_from: ConsumeFrom,
    pub pull_batch_size: i32,
    pub consume_batch_size: usize,
    pub max_reconsume_times: i32,
    pub suspend_ms: u64,
    pub pull_timeout_ms: u64,
    /// Back-off after a failed pull (Java `pullTimeDelayMillsWhenException`).
    pub pull_error_delay_ms: u64,
    pub rebalance_interval_ms: u64,
    pub heartbeat_interval_ms: u64,
    pub persist_interval_ms: u64,
    pub client: ClientConfig,
}

impl Default for PushConsumerConfig {
    fn default() -> Self {
        Self {
            group: "DEFAULT_CONSUMER".into(),
            namesrv_addrs: vec!["127.0.0.1:9876".into()],
            subscriptions: BTreeMap::new(),
            consume_from: ConsumeFrom::LastOffset,
            pull_batch_size: 32,
            consume_batch_size: 1,
            max_reconsume_times: 16,
            suspend_ms: 15_000,
            pull_timeout_ms: 30_000,
            pull_error_delay_ms: 3_000,
            rebalance_interval_ms: 20_000,
            heartbeat_interval_ms: 30_000,
            persist_interval_ms: 5_000,
            client: ClientConfig::default(),
        }
    }
}

/// Progress of one assigned queue.
struct QueueState {
    /// Next offset to consume (what gets committed).
    offset: Cell<i64>,
    /// Last offset sent to the broker.
    committed: Cell<i64>,
    dropped: Cell<bool>,
}

/// A level-triggered wake-up flag for one waiting task.
#[derive(Default)]
struct Notify {
    set: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Notify {
    fn notify(&self) {
        self.set.set(true);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }
}

struct NotifyWait<'a>(&'a Notify);

impl Future for NotifyWait<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0.set.replace(false) {
            return Poll::Ready(());
        }
        *self.0.waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// Waits for `notify` or `timeout`, whichever comes first.
async fn wait_notify_or(notify: &Notify, timeout: Duration) {
    let _ = compio::time::timeout(timeout, NotifyWait(notify)).await;
}

struct PushInner {
    pull: PullConsumer,
    config: PushConsumerConfig,
    listener: MessageListener,
    assigned: RefCell<HashMap<MessageQueue, Rc<QueueState>>>,
    rebalance: Rc<Notify>,
    running: Cell<bool>,
    /// Every subscription including `%RETRY%group`.
    subscriptions: BTreeMap<String, String>,
}

/// A push consumer running on the current compio runtime thread.
#[derive(Clone)]
pub struct PushConsumer {
    inner: Rc<PushInner>,
}

impl PushConsumer {
    /// Starts consuming: heartbeat, first rebalance, then the background loops. The
    /// listener runs on this runtime thread, one batch at a time per queue.
    pub async fn start(config: PushConsumerConfig, listener: MessageListener) -> Result<Self> {
        if config.subscriptions.is_empty() {
            return Err(ClientError::Invalid(
                "a push consumer needs at least one subscription".into(),
            ));
        }
        let client = RemotingClient::new(config.client.clone());
        let pull = PullConsumer::with_client(
            client.clone(),
            PullConsumerConfig {
                group: config.group.clone(),
                namesrv_addrs: config.namesrv_addrs.clone(),
                route_ttl_ms: config.rebalance_interval_ms,
                client: config.client.clone(),
            },
        );
        let mut subscriptions = config.subscriptions.clone();
        subscriptions.insert(format!("%RETRY%{}", config.group), "*".into());
        let inner = Rc::new(PushInner {
            pull,
            config,
            listener,
            assigned: RefCell::new(HashMap::new()),
            rebalance: Rc::new(Notify::default()),
            running: Cell::new(true),
            subscriptions,
        });
        let weak = Rc::downgrade(&inner);
        let group = inner.config.group.clone();
        client.set_request_handler(Rc::new(move |_addr, cmd| {
            if cmd.code == RequestCode::NotifyConsumerIdsChanged.code() {
                let mine = cmd
                    .ext_fields
                    .get("consumerGroup")
                    .is_none_or(|g| g == group);
                if let (true, Some(inner)) = (mine, weak.upgrade()) {
                    inner.rebalance.notify();
                }
            }
            None
        }));
        let consumer = Self { inner };
        // Routes first (heartbeats go to every broker of the subscribed topics).
        for topic in consumer.inner.subscriptions.keys() {
            if let Err(e) = consumer.inner.pull.routes().route(topic).await {
                tracing::warn!(topic, error = %e, "no route yet; will retry at the next rebalance");
            }
        }
        consumer.heartbeat().await;
        consumer.rebalance().await;
        consumer.spawn_loops();
        Ok(consumer)
    }

    pub fn client_id(&self) -> &str {
        self.inner.pull.client_id()
    }

    pub fn pull_consumer(&self) -> &PullConsumer {
        &self.inner.pull
    }

    /// Queues currently assigned to this consumer, sorted.
    pub fn assigned_queues(&self) -> Vec<MessageQueue> {
        let mut v: Vec<MessageQueue> = self.inner.assigned.borrow().keys().cloned().collect();
        v.sort();
        v
    }

    /// Next offset to consume of an assigned queue.
    pub fn consumed_offset(&self, mq: &MessageQueue) -> Option<i64> {
        self.inner.assigned.borrow().get(mq).map(|s| s.offset.get())
    }

    /// Asks for a rebalance now (as `NOTIFY_CONSUMER_IDS_CHANGED` does).
    pub fn trigger_rebalance(&self) {
        self.inner.rebalance.notify();
    }

    async fn heartbeat(&self) {
        let body = self.inner.pull.heartbeat_body(
            &self.inner.subscriptions,
            "CONSUME_PASSIVELY",
            self.inner.config.consume_from.java_name(),
        );
        for addr in self.inner.pull.routes().known_broker_addrs(false) {
            if let Err(e) = self.inner.pull.heartbeat_to(&addr, &body).await {
                tracing::warn!(%addr, error = %e, "consumer heartbeat failed");
            }
        }
    }

    fn spawn_loops(&self) {
        let weak = Rc::downgrade(&self.inner);
        let hb = Duration::from_millis(self.inner.config.heartbeat_interval_ms.max(100));
        compio::runtime::spawn(periodic(weak.clone(), hb, |c| {
            Box::pin(async move { c.heartbeat().await })
        }))
        .detach();
        let persist = Duration::from_millis(self.inner.config.persist_interval_ms.max(100));
        compio::runtime::spawn(periodic(weak.clone(), persist, |c| {
            Box::pin(async move { c.persist(true).await })
        }))
        .detach();
        let rebalance = Duration::from_millis(self.inner.config.rebalance_interval_ms.max(100));
        // The loop parks on the shared notify while holding only a weak consumer reference,
        // so dropping the consumer (or shutdown) ends it.
        let notify = self.inner.rebalance.clone();
        compio::runtime::spawn(async move {
            loop {
                wait_notify_or(&notify, rebalance).await;
                let Some(inner) = weak.upgrade() else { return };
                if !inner.running.get() {
                    return;
                }
                PushConsumer { inner }.rebalance().await;
            }
        })
        .detach();
    }

    /// One rebalance round over every subscribed topic.
    pub async fn rebalance(&self) {
        let topics: Vec<String> = self.inner.subscriptions.keys().cloned().collect();
        for topic in topics {
            if let Err(e) = self.rebalance_topic(&topic).await {
                tracing::debug!(topic, error = %e, "rebalance of topic skipped");
            }
        }
    }

    async fn rebalance_topic(&self, topic: &str) -> Result<()> {
        let route = self.inner.pull.routes().route(topic).await?;
        let all = route.subscribe_queues.clone();
        let addr = route
            .master_addrs()
            .into_iter()
            .next()
            .or_else(|| route.all_broker_addrs().into_iter().next())
            .ok_or_else(|| ClientError::Invalid(format!("topic {topic} has no broker")))?;
        let ids = self.inner.pull.consumer_ids(&addr).await?;
        let mine = allocate_averagely(&all, &ids, self.client_id());
        // Release queues no longer ours (commit first so the next owner starts there).
        let released: Vec<(MessageQueue, Rc<QueueState>)> = self
            .inner
            .assigned
            .borrow()
            .iter()
            .filter(|(mq, _)| mq.topic == topic && !mine.contains(mq))
            .map(|(mq, s)| (mq.clone(), s.clone()))
            .collect();
        for (mq, state) in released {
            state.dropped.set(true);
            self.inner.assigned.borrow_mut().remove(&mq);
            if state.offset.get() >= 0 && state.offset.get() != state.committed.get() {
                let _ = self
                    .inner
                    .pull
                    .update_offset(&mq, state.offset.get(), true)
                    .await;
            }
        }
        for mq in mine {
            if self.inner.assigned.borrow().contains_key(&mq) {
                continue;
            }
            let state = Rc::new(QueueState {
                offset: Cell::new(-1),
                committed: Cell::new(-1),
                dropped: Cell::new(false),
            });
            self.inner
                .assigned
                .borrow_mut()
                .insert(mq.clone(), state.clone());
            compio::runtime::spawn(pull_loop(Rc::downgrade(&self.inner), mq, state)).detach();
        }
        Ok(())
    }

    /// Commits every assigned queue's progress that the broker has not seen yet.
    pub async fn persist(&self, oneway: bool) {
        let queues: Vec<(MessageQueue, Rc<QueueState>)> = self
            .inner
            .assigned
            .borrow()
            .iter()
            .map(|(m, s)| (m.clone(), s.clone()))
            .collect();
        for (mq, state) in queues {
            let offset = state.offset.get();
            if offset >= 0 && offset != state.committed.get() {
                match self.inner.pull.update_offset(&mq, offset, oneway).await {
                    Ok(()) => state.committed.set(offset),
                    Err(e) => tracing::warn!(queue = %mq, error = %e, "offset commit failed"),
                }
            }
        }
    }

    /// Stops pulling, commits every offset (waiting for the broker) and unregisters.
    pub async fn shutdown(&self) {
        self.inner.running.set(false);
        for s in self.inner.assigned.borrow().values() {
            s.dropped.set(true);
        }
        self.inner.rebalance.notify();
        self.persist(false).await;
        for addr in self.inner.pull.routes().known_broker_addrs(false) {
            let _ = self.inner.pull.unregister(&addr).await;
        }
    }
}

type BoxFut = Pin<Box<dyn Future<Output = ()>>>;

async fn periodic(weak: Weak<PushInner>, period: Duration, f: fn(PushConsumer) -> BoxFut) {
    loop {
        compio::time::sleep(period).await;
        let Some(inner) = weak.upgrade() else { return };
        if !inner.running.get() {
            return;
        }
        f(PushConsumer { inner }).await;
    }
}

async fn initial_offset(inner: &PushInner, mq: &MessageQueue) -> Result<i64> {
    if let Some(o) = inner.pull.query_offset(mq).await? {
        return Ok(o);
    }
    match inner.config.consume_from {
        // Retry queues always start from the beginning (Java does the same).
        _ if mq.topic.starts_with("%RETRY%") => Ok(0),
        ConsumeFrom::LastOffset => inner.pull.max_offset(mq).await,
        ConsumeFrom::FirstOffset => Ok(0),
        ConsumeFrom::Timestamp(ts) => inner.pull.search_offset(mq, ts).await,
    }
}

async fn pull_loop(weak: Weak<PushInner>, mq: MessageQueue, state: Rc<QueueState>) {
    let alive = |inner: &PushInner| inner.running.get() && !state.dropped.get();
    // Start offset.
    loop {
        let Some(inner) = weak.upgrade() else { return };
        if !alive(&inner) {
            return;
        }
        match initial_offset(&inner, &mq).await {
            Ok(o) => {
                state.offset.set(o);
                state.committed.set(o);
                break;
            }
            Err(e) => {
                tracing::warn!(queue = %mq, error = %e, "cannot determine the start offset; retrying");
                let delay = Duration::from_millis(inner.config.pull_error_delay_ms);
                drop(inner);
                compio::time::sleep(delay).await;
            }
        }
    }
    let mut next = state.offset.get();
    loop {
        let Some(inner) = weak.upgrade() else { return };
        if !alive(&inner) {
            return;
        }
        let expr = inner
            .subscriptions
            .get(&mq.topic)
            .cloned()
            .unwrap_or_else(|| "*".into());
        let opts = PullOptions {
            subscription: expr,
            expression_type: "TAG".into(),
            max_msgs: inner.config.pull_batch_size,
            suspend_ms: Some(inner.config.suspend_ms),
            commit_offset: Some(state.offset.get()).filter(|o| *o > 0),
            timeout_ms: inner.config.pull_timeout_ms,
        };
        let pull = inner.pull.clone();
        let error_delay = Duration::from_millis(inner.config.pull_error_delay_ms);
        // Do not keep the consumer alive across a 15 s long poll.
        drop(inner);
        let result = pull.pull_with(&mq, next, &opts).await;
        let Some(inner) = weak.upgrade() else { return };
        if !alive(&inner) {
            return;
        }
        match result {
            Err(e) => {
                tracing::debug!(queue = %mq, error = %e, "pull failed; backing off");
                drop(inner);
                compio::time::sleep(error_delay).await;
            }
            Ok(r) => {
                match r.status {
                    PullStatus::Found => {
                        consume(&inner, &mq, r.messages).await;
                    }
                    PullStatus::OffsetIllegal => {
                        tracing::warn!(queue = %mq, offset = next, next = r.next_begin_offset, "offset moved by the broker");
                    }
                    PullStatus::NoNewMsg | PullStatus::NoMatchedMsg => {}
                }
                next = r.next_begin_offset;
                if !state.dropped.get() {
                    state.offset.set(next);
                }
            }
        }
    }
}

async fn consume(inner: &PushInner, mq: &MessageQueue, mut messages: Vec<MessageExt>) {
    // Retried messages come from %RETRY%group: show the application the original topic.
    for m in &mut messages {
        if let Some(orig) = m.properties.get(keys::RETRY_TOPIC) {
            m.topic = orig.to_string();
        }
    }
    let batch = inner.config.consume_batch_size.max(1);
    for chunk in messages.chunks(batch) {
        let mut attempt = 0u32;
        loop {
            if (inner.listener)(chunk) == ConsumeResult::Success {
                break;
            }
            let mut all_sent = true;
            for m in chunk {
                if let Err(e) = inner
                    .pull
                    .send_back(m, 0, inner.config.max_reconsume_times)
                    .await
                {
                    tracing::warn!(queue = %mq, msg_id = %m.msg_id, error = %e, "send-back failed; consuming again locally");
                    all_sent = false;
                }
            }
            if all_sent {
                break;
            }
            attempt += 1;
            // Bounded local retries, then the batch is given up on with a log line
            // (the broker copy is intact; an admin reset can replay it).
            if attempt >= 16 || !inner.running.get() {
                tracing::error!(queue = %mq, "giving up on a batch after {attempt} local retries");
                break;
            }
            compio::time::sleep(Duration::from_millis(1_000)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("c{i}")).collect()
    }

    #[test]
    fn average_allocation_matches_java() {
        let qs: Vec<i32> = (0..8).collect();
        let c = ids(3);
        assert_eq!(allocate_averagely(&qs, &c, "c0"), vec![0, 1, 2]);
        assert_eq!(allocate_averagely(&qs, &c, "c1"), vec![3, 4, 5]);
        assert_eq!(allocate_averagely(&qs, &c, "c2"), vec![6, 7]);
        // More consumers than queues: the extra ones get nothing.
        let c5 = ids(5);
        let small: Vec<i32> = (0..3).collect();
        assert_eq!(allocate_averagely(&small, &c5, "c2"), vec![2]);
        assert!(allocate_averagely(&small, &c5, "c4").is_empty());
        assert!(allocate_averagely(&small, &c5, "unknown").is_empty());
        // Every queue assigned exactly once.
        let mut all: Vec<i32> = c
            .iter()
            .flat_map(|id| allocate_averagely(&qs, &c, id))
            .collect();
        all.sort();
        assert_eq!(all, qs);
    }
}
