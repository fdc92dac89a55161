//! The producer: route lookup (with the `TBW102` auto-create fallback), queue selection,
//! `SEND_MESSAGE_V2` (310) single sends and `SEND_BATCH_MESSAGE` (320) batches with
//! single-letter headers, `UNIQ_KEY` ids, and retries on another broker for the response
//! codes Java's producer retries on (17, 14, 1, 2, 16, 204, 205, 1500) and for transport
//! failures, all within one overall send timeout (Java `sendMsgTimeout`).
//!
//! `send` is the sync/async call (await it, or spawn it for many in flight); `send_oneway`
//! writes without waiting for the broker.

use std::cell::Cell;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ringmq_remoting::header::{CommandHeader, SendMessageResponseHeader};
use ringmq_remoting::message::batch::encode_batch_item;
use ringmq_remoting::message::compress::compress_for_send;
use ringmq_remoting::message::properties::keys;
use ringmq_remoting::message::sysflag::CompressionType;
use ringmq_remoting::number::{decimal, I64_DECIMAL_BYTES};
use ringmq_remoting::{ExtFields, RemotingCommand, RequestCode};

use crate::error::{is_retryable_send_code, ClientError, Result};
use crate::message::{
    new_client_id, new_uniq_key, new_uniq_key_at, now_ms, Message, MessageQueue, SendResult,
    SendStatus,
};
use crate::route::{RouteCache, TopicRoute};
use crate::transport::{ClientConfig, RemotingClient};

/// Producer settings; defaults are Java's `DefaultMQProducer` ones.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    pub group: String,
    pub namesrv_addrs: Vec<String>,
    /// Overall budget of one send including retries.
    pub send_timeout_ms: u64,
    /// Extra attempts on another broker after a retryable failure.
    pub retry_times: u32,
    /// Queue count asked for when the broker auto-creates a topic from `TBW102`.
    pub default_topic_queue_nums: i32,
    pub create_topic_key: String,
    pub route_ttl_ms: u64,
    /// Largest body accepted (checked before sending).
    pub max_message_bytes: usize,
    /// Bodies at least this big are zlib-compressed (level 5) like Java; `None` disables.
    pub compress_threshold_bytes: Option<usize>,
    pub heartbeat_interval_ms: u64,
    pub client: ClientConfig,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        Self {
            group: "DEFAULT_PRODUCER".into(),
            namesrv_addrs: vec!["127.0.0.1:9876".into()],
            send_timeout_ms: 3_000,
            retry_times: 2,
            default_topic_queue_nums: 4,
            create_topic_key: "TBW102".into(),
            route_ttl_ms: 30_000,
            max_message_bytes: 4 * 1024 * 1024,
            compress_threshold_bytes: Some(4096),
            heartbeat_interval_ms: 30_000,
            client: ClientConfig::default(),
        }
    }
}

/// Which queue a message goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueSelector {
    /// Round-robin over writable queues, avoiding the broker that just failed.
    RoundRobin,
    /// Same key → same queue (while the queue count is stable): ordered messages.
    ByKey(String),
    /// Exactly this queue (no retry on another broker).
    Queue(MessageQueue),
}

/// How a TBW102-derived route is aged so the real route is looked up again soon.
const FALLBACK_ROUTE_AGE: Duration = Duration::from_secs(25);

struct Inner {
    client: RemotingClient,
    routes: RouteCache,
    config: ProducerConfig,
    client_id: String,
    round_robin: Cell<usize>,
}

/// A producer bound to the current compio runtime thread (cheap to clone).
#[derive(Clone)]
pub struct Producer {
    inner: Rc<Inner>,
}

impl Producer {
    /// A producer with its own [`RemotingClient`].
    pub fn new(config: ProducerConfig) -> Self {
        let client = RemotingClient::new(config.client.clone());
        Self::with_client(client, config)
    }

    /// A producer sharing `client` (and its connections).
    pub fn with_client(client: RemotingClient, config: ProducerConfig) -> Self {
        let routes = RouteCache::new(
            client.clone(),
            config.namesrv_addrs.clone(),
            Duration::from_millis(config.route_ttl_ms),
        );
        Self {
            inner: Rc::new(Inner {
                client,
                routes,
                config,
                client_id: new_client_id(),
                round_robin: Cell::new(0),
            }),
        }
    }

    pub fn client(&self) -> &RemotingClient {
        &self.inner.client
    }

    pub fn routes(&self) -> &RouteCache {
        &self.inner.routes
    }

    pub fn config(&self) -> &ProducerConfig {
        &self.inner.config
    }

    pub fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    /// Spawns the periodic route refresh and heartbeat (every `heartbeat_interval_ms`);
    /// the task ends when the last clone of this producer is dropped.
    pub fn start_background(&self) {
        let weak: Weak<Inner> = Rc::downgrade(&self.inner);
        let period = Duration::from_millis(self.inner.config.heartbeat_interval_ms.max(100));
        compio::runtime::spawn(async move {
            loop {
                compio::time::sleep(period).await;
                let Some(inner) = weak.upgrade() else { return };
                let p = Producer { inner };
                p.inner.routes.refresh_all().await;
                let _ = p.heartbeat().await;
            }
        })
        .detach();
    }

    /// Sends `HEART_BEAT` with this producer group to every known master.
    pub async fn heartbeat(&self) -> Result<()> {
        let body = serde_json::json!({
            "clientID": self.inner.client_id,
            "consumerDataSet": [],
            "heartbeatFingerprint": 0,
            "producerDataSet": [{"groupName": self.inner.config.group}],
            "withoutSub": false,
        })
        .to_string();
        let mut last = Ok(());
        for addr in self.inner.routes.known_broker_addrs(true) {
            let req =
                RemotingCommand::request(RequestCode::HeartBeat.code(), 0).with_body(body.clone());
            match self.inner.client.invoke_default(&addr, req).await {
                Ok(r) => {
                    if let Err(e) =
                        crate::transport::expect_success(&addr, RequestCode::HeartBeat.code(), r)
                    {
                        last = Err(e);
                    }
                }
                Err(e) => last = Err(e),
            }
        }
        last
    }

    /// Sends `UNREGISTER_CLIENT` for the producer group to every known master.
    pub async fn shutdown(&self) {
        for addr in self.inner.routes.known_broker_addrs(true) {
            let req = RemotingCommand::request(RequestCode::UnregisterClient.code(), 0)
                .with_ext("clientID", self.inner.client_id.clone())
                .with_ext("producerGroup", self.inner.config.group.clone());
            let _ = self.inner.client.invoke_default(&addr, req).await;
        }
    }

    /// The publish route of `topic`; an unknown topic falls back to the `TBW102` template's
    /// brokers (the broker then auto-creates the topic on the first send).
    pub async fn publish_route(&self, topic: &str) -> Result<Rc<TopicRoute>> {
        match self.inner.routes.route(topic).await {
            Ok(r) if !r.publish_queues.is_empty() => Ok(r),
            Ok(_) | Err(ClientError::Response { code: 17, .. }) => {
                let key = &self.inner.config.create_topic_key;
                let template = self.inner.routes.fetch(key).await.map_err(|e| {
                    ClientError::Invalid(format!(
                        "no route for topic {topic} and no {key} template route to auto-create it: {e}"
                    ))
                })?;
                let route = TopicRoute::new(
                    topic,
                    template,
                    Some(self.inner.config.default_topic_queue_nums),
                );
                if route.publish_queues.is_empty() {
                    return Err(ClientError::Invalid(format!(
                        "topic {topic} has no writable queue with a master broker"
                    )));
                }
                Ok(self
                    .inner
                    .routes
                    .insert_aged(topic, route, FALLBACK_ROUTE_AGE))
            }
            Err(e) => Err(e),
        }
    }

    /// Sends one message round-robin (sync: await it; async: spawn it).
    pub async fn send(&self, msg: &Message) -> Result<SendResult> {
        self.send_with(msg, &QueueSelector::RoundRobin).await
    }

    /// Sends one message to the queue chosen by `selector`.
    pub async fn send_with(&self, msg: &Message, selector: &QueueSelector) -> Result<SendResult> {
        let prepared = self.prepare_single(msg)?;
        self.send_prepared(
            &msg.topic,
            selector,
            RequestCode::SendMessageV2.code(),
            prepared,
        )
        .await
    }

    /// Sends `msgs` (same topic, no delay) as one `SEND_BATCH_MESSAGE`.
    pub async fn send_batch(&self, msgs: &[Message]) -> Result<SendResult> {
        let prepared = self.prepare_batch(msgs)?;
        let topic = msgs[0].topic.clone();
        self.send_prepared(
            &topic,
            &QueueSelector::RoundRobin,
            RequestCode::SendBatchMessage.code(),
            prepared,
        )
        .await
    }

    /// Writes the message without waiting for the broker (no result, no retry).
    pub async fn send_oneway(&self, msg: &Message) -> Result<()> {
        let prepared = self.prepare_single(msg)?;
        let route = self.publish_route(&msg.topic).await?;
        let mq = self.select(&route, &QueueSelector::RoundRobin, None)?;
        let addr = route
            .master_addr(&mq.broker_name)
            .ok_or_else(|| no_master(&mq))?
            .to_string();
        let req = self.build_request(RequestCode::SendMessageV2.code(), &mq, &prepared, now_ms());
        self.inner.client.invoke_oneway(&addr, req).await
    }

    fn prepare_single(&self, msg: &Message) -> Result<Prepared> {
        validate_topic(&msg.topic)?;
        if msg.body.is_empty() {
            return Err(ClientError::Invalid(format!(
                "message body for topic {} is empty",
                msg.topic
            )));
        }
        if msg.body.len() > self.inner.config.max_message_bytes {
            return Err(ClientError::Invalid(format!(
                "message body of {} bytes exceeds the {}-byte limit",
                msg.body.len(),
                self.inner.config.max_message_bytes
            )));
        }
        let born_ms = now_ms();
        let uniq = match msg.uniq_key() {
            Some(u) => u.to_string(),
            None => new_uniq_key_at(born_ms),
        };
        let mut properties = msg.properties.encode();
        if msg.uniq_key().is_none() {
            properties.push_str(keys::UNIQ_KEY);
            properties.push('\u{1}');
            properties.push_str(&uniq);
            properties.push('\u{2}');
        }
        let (body, sys_flag) = match self.inner.config.compress_threshold_bytes {
            Some(threshold) => {
                match compress_for_send(&msg.body, 0, CompressionType::Zlib, 5, threshold) {
                    Some((compressed, flag)) => (Bytes::from(compressed), flag),
                    None => (msg.body.clone(), 0),
                }
            }
            None => (msg.body.clone(), 0),
        };
        Ok(Prepared {
            body,
            sys_flag,
            flag: msg.flag,
            properties,
            msg_id: uniq,
            batch: false,
            born_ms,
        })
    }

    fn prepare_batch(&self, msgs: &[Message]) -> Result<Prepared> {
        let first = msgs
            .first()
            .ok_or_else(|| ClientError::Invalid("empty batch".into()))?;
        validate_topic(&first.topic)?;
        if first.topic.starts_with("%RETRY%") {
            return Err(ClientError::Invalid(
                "batches cannot go to %RETRY% topics".into(),
            ));
        }
        let mut body = Vec::with_capacity(msgs.iter().map(|m| m.body.len() + 96).sum());
        let mut ids = Vec::with_capacity(msgs.len());
        for m in msgs {
            if m.topic != first.topic {
                return Err(ClientError::Invalid(format!(
                    "a batch must have one topic, got {} and {}",
                    first.topic, m.topic
                )));
            }
            if m.properties.get(keys::DELAY).is_some() {
                return Err(ClientError::Invalid(
                    "batched messages cannot be delayed".into(),
                ));
            }
            let uniq = m
                .uniq_key()
                .map(str::to_string)
                .unwrap_or_else(new_uniq_key);
            let mut props = m.properties.encode();
            if m.uniq_key().is_none() {
                props.push_str(keys::UNIQ_KEY);
                props.push('\u{1}');
                props.push_str(&uniq);
                props.push('\u{2}');
            }
            encode_batch_item(&mut body, m.flag, &m.body, props.as_bytes())
                .map_err(|e| ClientError::Invalid(format!("batch member: {e}")))?;
            ids.push(uniq);
        }
        if body.len() > self.inner.config.max_message_bytes {
            return Err(ClientError::Invalid(format!(
                "batch body of {} bytes exceeds the {}-byte limit",
                body.len(),
                self.inner.config.max_message_bytes
            )));
        }
        // The batch object's own id travels in the header properties, as Java does.
        let batch_props = format!(
            "{}\u{1}{}\u{2}WAIT\u{1}true\u{2}",
            keys::UNIQ_KEY,
            new_uniq_key()
        );
        Ok(Prepared {
            body: Bytes::from(body),
            sys_flag: 0,
            flag: 0,
            properties: batch_props,
            msg_id: ids.join(","),
            batch: true,
            born_ms: now_ms(),
        })
    }

    fn select(
        &self,
        route: &TopicRoute,
        selector: &QueueSelector,
        avoid_broker: Option<&str>,
    ) -> Result<MessageQueue> {
        let queues = &route.publish_queues;
        if queues.is_empty() {
            return Err(ClientError::Invalid(format!(
                "topic {} has no writable queue",
                route.topic
            )));
        }
        match selector {
            QueueSelector::Queue(mq) => Ok(mq.clone()),
            QueueSelector::ByKey(key) => {
                Ok(queues[(fnv1a(key.as_bytes()) % queues.len() as u64) as usize].clone())
            }
            QueueSelector::RoundRobin => {
                let start = self.inner.round_robin.get();
                self.inner.round_robin.set(start.wrapping_add(1));
                if let Some(avoid) = avoid_broker {
                    for i in 0..queues.len() {
                        let q = &queues[(start + i) % queues.len()];
                        if q.broker_name != avoid {
                            return Ok(q.clone());
                        }
                    }
                }
                Ok(queues[start % queues.len()].clone())
            }
        }
    }

    /// The SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE request (`SendMessageRequestHeaderV2`'s
    /// keys and text forms). Built straight into one pre-sized extFields map from borrowed
    /// text: this runs for every message, and going through the typed header would cost
    /// a `String` per field twice over (struct, then map).
    fn build_request(
        &self,
        code: i32,
        mq: &MessageQueue,
        p: &Prepared,
        born_ms: i64,
    ) -> RemotingCommand {
        let cfg = &self.inner.config;
        let mut f = ExtFields::with_capacities(
            13,
            cfg.group.len()
                + mq.topic.len()
                + cfg.create_topic_key.len()
                + p.properties.len()
                + mq.broker_name.len()
                + 64,
        );
        let mut digits = [0u8; I64_DECIMAL_BYTES];
        f.insert_str("a", &cfg.group);
        f.insert_str("b", &mq.topic);
        f.insert_str("c", &cfg.create_topic_key);
        f.insert_str(
            "d",
            decimal(&mut digits, i64::from(cfg.default_topic_queue_nums)),
        );
        f.insert_str("e", decimal(&mut digits, i64::from(mq.queue_id)));
        f.insert_str("f", decimal(&mut digits, i64::from(p.sys_flag)));
        f.insert_str("g", decimal(&mut digits, born_ms));
        f.insert_str("h", decimal(&mut digits, i64::from(p.flag)));
        f.insert_str("i", &p.properties);
        f.insert_str("j", "0");
        f.insert_str("k", "false");
        f.insert_str("m", if p.batch { "true" } else { "false" });
        f.insert_str("n", &mq.broker_name);
        let mut req = RemotingCommand::request(code, 0).with_body(p.body.clone());
        req.ext_fields = f;
        req
    }

    async fn send_prepared(
        &self,
        topic: &str,
        selector: &QueueSelector,
        code: i32,
        prepared: Prepared,
    ) -> Result<SendResult> {
        let budget = Duration::from_millis(self.inner.config.send_timeout_ms);
        // One monotonic clock read serves the budget, the route's freshness and the first
        // attempt's request deadline (clock reads were ~5% of the load generator's CPU).
        let started = Instant::now();
        let deadline = started + budget;
        let attempts = match selector {
            QueueSelector::Queue(_) => 1,
            _ => 1 + self.inner.config.retry_times,
        };
        let mut last_err: Option<ClientError> = None;
        let mut last_broker: Option<String> = None;
        for attempt in 0..attempts {
            // The first attempt starts now: no second clock read (this is per message).
            let (remaining, born_ms) = if attempt == 0 {
                (budget, prepared.born_ms)
            } else {
                (deadline.saturating_duration_since(Instant::now()), now_ms())
            };
            if remaining.is_zero() {
                break;
            }
            let cached = if attempt == 0 {
                self.inner.routes.cached_fresh(topic, started)
            } else {
                None
            };
            let route = match cached {
                Some(route) => route,
                None => self.publish_route(topic).await?,
            };
            let mq = self.select(&route, selector, last_broker.as_deref())?;
            let Some(addr) = route.master_addr(&mq.broker_name) else {
                last_err = Some(no_master(&mq));
                last_broker = Some(mq.broker_name.clone());
                continue;
            };
            let req = self.build_request(code, &mq, &prepared, born_ms);
            let sent = if attempt == 0 {
                self.inner
                    .client
                    .invoke_until(addr, req, deadline, budget)
                    .await
            } else {
                self.inner.client.invoke(addr, req, remaining).await
            };
            match sent {
                Ok(resp) => match SendStatus::from_code(resp.code) {
                    Some(status) => return send_result(status, addr, code, mq, &prepared, resp),
                    None if is_retryable_send_code(resp.code) => {
                        if resp.code == 17 {
                            self.inner.routes.invalidate(topic);
                        }
                        last_err = Some(refused(addr, code, resp));
                    }
                    None => return Err(refused(addr, code, resp)),
                },
                Err(e) if e.is_retryable_send() => last_err = Some(e),
                Err(e) => return Err(e),
            }
            last_broker = Some(mq.broker_name.clone());
        }
        Err(last_err.unwrap_or(ClientError::Timeout {
            addr: String::new(),
            request_code: code,
            timeout_ms: self.inner.config.send_timeout_ms,
        }))
    }
}

struct Prepared {
    body: Bytes,
    sys_flag: i32,
    flag: i32,
    properties: String,
    msg_id: String,
    batch: bool,
    /// Wall-clock ms when the message was prepared: the first attempt's bornTimestamp
    /// (and the time its `UNIQ_KEY` encodes), so one clock read serves both.
    born_ms: i64,
}

fn send_result(
    status: SendStatus,
    addr: &str,
    code: i32,
    mq: MessageQueue,
    p: &Prepared,
    resp: RemotingCommand,
) -> Result<SendResult> {
    let header =
        SendMessageResponseHeader::decode(&resp.ext_fields).map_err(|e| ClientError::Protocol {
            addr: addr.to_string(),
            request_code: code,
            reason: format!("send response header: {e}"),
        })?;
    let queue = MessageQueue {
        queue_id: header.queue_id,
        ..mq
    };
    Ok(SendResult {
        status,
        msg_id: p.msg_id.clone(),
        offset_msg_id: header.msg_id,
        queue,
        queue_offset: header.queue_offset,
        transaction_id: header.transaction_id,
        region_id: resp.ext_fields.get("MSG_REGION").map(str::to_string),
        broker_addr: addr.to_string(),
    })
}

fn refused(addr: &str, code: i32, resp: RemotingCommand) -> ClientError {
    ClientError::Response {
        addr: addr.to_string(),
        request_code: code,
        code: resp.code,
        remark: resp.remark.unwrap_or_default(),
    }
}

fn no_master(mq: &MessageQueue) -> ClientError {
    ClientError::Invalid(format!(
        "broker {} of {} has no master address in the route",
        mq.broker_name, mq
    ))
}

/// Topic names: `^[%|a-zA-Z0-9_-]+$`, at most 127 characters (`remoting.md` §12).
pub fn validate_topic(topic: &str) -> Result<()> {
    if topic.is_empty() || topic.len() > 127 {
        return Err(ClientError::Invalid(format!(
            "topic {topic:?} must have 1..=127 characters"
        )));
    }
    if !topic
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-'))
    {
        return Err(ClientError::Invalid(format!(
            "topic {topic:?} may only contain letters, digits, %, |, _ and -"
        )));
    }
    Ok(())
}

/// Stable across processes and runs (unlike `DefaultHasher`), so key → queue is stable.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_validation() {
        assert!(validate_topic("TopicTest").is_ok());
        assert!(validate_topic("%RETRY%G_1-a|b").is_ok());
        assert!(validate_topic("").is_err());
        assert!(validate_topic("bad topic").is_err());
        assert!(validate_topic(&"x".repeat(128)).is_err());
    }

    #[test]
    fn key_hash_is_stable() {
        assert_eq!(fnv1a(b"order-42"), fnv1a(b"order-42"));
        assert_ne!(fnv1a(b"order-42"), fnv1a(b"order-43"));
        // FNV-1a of the empty input is the offset basis.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    }
}
