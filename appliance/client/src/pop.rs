//! A POP consumer (RocketMQ 5.x): many consumers of one group pop from the same queues
//! without rebalancing; each popped message carries a receipt handle, and one not acked
//! within its invisible time is popped again (as a retry). The broker keeps the state
//! (checkpoints in its revive topic); this side only pops, acks and changes invisible
//! times, over the Remoting codes 200050, 200051, 200053.

use std::rc::Rc;
use std::time::Duration;

use ringmq_remoting::header::pop::{
    AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader, PopMessageRequestHeader,
};
use ringmq_remoting::message::properties::keys;
use ringmq_remoting::pop::{self, BatchAck, BatchAckBody, ExtraInfo, RetryKind};
use ringmq_remoting::{RemotingCommand, RequestCode, ResponseCode};

use crate::error::{ClientError, Result};
use crate::message::{decode_records, MessageExt};
use crate::route::RouteCache;
use crate::transport::{ClientConfig, RemotingClient};

/// Settings of a [`PopConsumer`].
#[derive(Debug, Clone)]
pub struct PopConsumerConfig {
    pub group: String,
    pub namesrv_addrs: Vec<String>,
    pub route_ttl_ms: u64,
    pub client: ClientConfig,
    /// How long a popped message stays invisible to other pops (5.x default 60 s).
    pub invisible_time_ms: i64,
    /// How long the broker may hold a pop that finds nothing.
    pub poll_time_ms: i64,
}

impl Default for PopConsumerConfig {
    fn default() -> Self {
        Self {
            group: String::new(),
            namesrv_addrs: Vec::new(),
            route_ttl_ms: 30_000,
            client: ClientConfig::default(),
            invisible_time_ms: 60_000,
            poll_time_ms: 15_000,
        }
    }
}

/// A popped message and what acking it needs.
#[derive(Debug, Clone)]
pub struct PoppedMessage {
    pub message: MessageExt,
    /// The receipt handle (`extraInfo`).
    pub handle: String,
    /// The broker that handed it out (acks go there).
    pub broker_addr: String,
}

/// What one pop brought.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PopStatus {
    Found,
    /// Nothing within the poll time (POLLING_TIMEOUT).
    NoNewMessage,
    /// The broker holds too many waiting pops (POLLING_FULL).
    PollingFull,
}

#[derive(Debug, Clone)]
pub struct PopResult {
    pub status: PopStatus,
    pub messages: Vec<PoppedMessage>,
    /// Messages left in the queues read (the broker's `restNum`).
    pub rest_num: i64,
}

struct PopInner {
    client: RemotingClient,
    routes: RouteCache,
    config: PopConsumerConfig,
}

/// A POP consumer of one group (cheap to clone; bound to this runtime thread).
#[derive(Clone)]
pub struct PopConsumer {
    inner: Rc<PopInner>,
}

impl PopConsumer {
    pub fn new(config: PopConsumerConfig) -> Self {
        let client = RemotingClient::new(config.client.clone());
        let routes = RouteCache::new(
            client.clone(),
            config.namesrv_addrs.clone(),
            Duration::from_millis(config.route_ttl_ms),
        );
        Self {
            inner: Rc::new(PopInner {
                client,
                routes,
                config,
            }),
        }
    }

    /// The (broker name, master address) pairs serving `topic`.
    pub async fn brokers(&self, topic: &str) -> Result<Vec<(String, String)>> {
        let route = self.inner.routes.route(topic).await?;
        let mut out = Vec::new();
        for bd in &route.data.broker_datas {
            if let Some(addr) = route.master_addr(&bd.broker_name) {
                out.push((bd.broker_name.clone(), addr.to_string()));
            }
        }
        Ok(out)
    }

    /// Pops up to `max_msgs` (at most 32) of `topic` from any queue of one broker.
    pub async fn pop(
        &self,
        broker_name: &str,
        broker_addr: &str,
        topic: &str,
        max_msgs: i32,
    ) -> Result<PopResult> {
        let cfg = &self.inner.config;
        let header = PopMessageRequestHeader {
            consumer_group: cfg.group.clone(),
            topic: topic.to_string(),
            queue_id: -1,
            max_msg_nums: max_msgs,
            invisible_time: cfg.invisible_time_ms,
            poll_time: cfg.poll_time_ms,
            born_time: now_ms(),
            init_mode: 0,
            exp_type: Some("TAG".into()),
            exp: Some("*".into()),
            order: false,
            attempt_id: None,
            rpc: Default::default(),
        };
        let request =
            RemotingCommand::request(RequestCode::PopMessage.code(), 0).with_header(&header);
        let timeout = Duration::from_millis(
            cfg.client.request_timeout_ms + u64::try_from(cfg.poll_time_ms).unwrap_or(0),
        );
        let response = self
            .inner
            .client
            .invoke(broker_addr, request, timeout)
            .await?;
        let status = match ResponseCode::from_code(response.code) {
            Some(ResponseCode::Success) => PopStatus::Found,
            Some(ResponseCode::PollingTimeout) => PopStatus::NoNewMessage,
            Some(ResponseCode::PollingFull) => PopStatus::PollingFull,
            _ => {
                let code = RequestCode::PopMessage.code();
                return Err(response_error(broker_addr, code, &response));
            }
        };
        if status != PopStatus::Found {
            return Ok(PopResult {
                status,
                messages: Vec::new(),
                rest_num: 0,
            });
        }
        let messages = popped_messages(&response, broker_name, topic)
            .map_err(|reason| protocol_error(broker_addr, reason))?;
        let rest_num = response
            .ext_fields
            .get("restNum")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let messages = messages
            .into_iter()
            .map(|(message, handle)| PoppedMessage {
                message,
                handle,
                broker_addr: broker_addr.to_string(),
            })
            .collect();
        Ok(PopResult {
            status,
            messages,
            rest_num,
        })
    }

    /// Acks `m`: it is not popped again.
    pub async fn ack(&self, topic: &str, m: &PoppedMessage) -> Result<()> {
        let header = AckMessageRequestHeader {
            consumer_group: self.inner.config.group.clone(),
            topic: topic.to_string(),
            queue_id: m.message.queue_id,
            extra_info: m.handle.clone(),
            offset: m.message.queue_offset,
            rpc: Default::default(),
        };
        let request =
            RemotingCommand::request(RequestCode::AckMessage.code(), 0).with_header(&header);
        self.call(&m.broker_addr, request).await.map(|_| ())
    }

    /// Acks `messages` (of `topic`, popped from one broker) with one BATCH_ACK_MESSAGE:
    /// one entry per checkpoint their handles name.
    pub async fn batch_ack(&self, topic: &str, messages: &[PoppedMessage]) -> Result<()> {
        let Some(first) = messages.first() else {
            return Ok(());
        };
        let addr = &first.broker_addr;
        let mut body = BatchAckBody::default();
        for m in messages {
            if m.broker_addr != *addr {
                return Err(ClientError::Invalid(
                    "a batch ack goes to one broker: its messages came from several".into(),
                ));
            }
            let info = ExtraInfo::parse(&m.handle).map_err(|e| protocol_error(addr, e.0))?;
            let offset = info.msg_queue_offset.unwrap_or(m.message.queue_offset);
            let bit = usize::try_from(offset - info.ck_start_offset)
                .ok()
                .filter(|&b| b < pop::MAX_BATCH_ACK_BITS)
                .ok_or_else(|| protocol_error(addr, "a message before its checkpoint start"))?;
            body.broker_name
                .get_or_insert_with(|| info.broker_name.clone());
            let same = |a: &BatchAck| {
                a.start_offset == info.ck_start_offset
                    && a.pop_time_ms == info.pop_time_ms
                    && a.queue_id == info.queue_id
                    && a.retry == info.retry
                    && a.revive_qid == info.revive_qid
            };
            match body.acks.iter_mut().find(|a| same(a)) {
                Some(entry) => entry.bits.push(bit),
                None => body.acks.push(BatchAck::for_handle(
                    &self.inner.config.group,
                    topic,
                    &info,
                    vec![bit],
                )),
            }
        }
        let mut request = RemotingCommand::request(RequestCode::BatchAckMessage.code(), 0);
        request.body = body.encode().into_bytes().into();
        self.call(addr, request).await.map(|_| ())
    }

    /// Makes `m` invisible for `invisible_time_ms` from now; returns its new handle.
    pub async fn change_invisible_time(
        &self,
        topic: &str,
        m: &PoppedMessage,
        invisible_time_ms: i64,
    ) -> Result<String> {
        let header = ChangeInvisibleTimeRequestHeader {
            consumer_group: self.inner.config.group.clone(),
            topic: topic.to_string(),
            queue_id: m.message.queue_id,
            extra_info: m.handle.clone(),
            offset: m.message.queue_offset,
            invisible_time: invisible_time_ms,
            rpc: Default::default(),
        };
        let request = RemotingCommand::request(RequestCode::ChangeMessageInvisibletime.code(), 0)
            .with_header(&header);
        let response = self.call(&m.broker_addr, request).await?;
        let mut info =
            ExtraInfo::parse(&m.handle).map_err(|e| protocol_error(&m.broker_addr, e.0))?;
        let field = |k: &str| {
            response
                .ext_fields
                .get(k)
                .and_then(|v| v.parse::<i64>().ok())
        };
        info.ck_start_offset = m.message.queue_offset;
        info.pop_time_ms = field("popTime").unwrap_or(info.pop_time_ms);
        info.invisible_time_ms = field("invisibleTime").unwrap_or(invisible_time_ms);
        info.msg_queue_offset = Some(m.message.queue_offset);
        Ok(info.to_string())
    }

    async fn call(&self, addr: &str, request: RemotingCommand) -> Result<RemotingCommand> {
        let timeout = Duration::from_millis(self.inner.config.client.request_timeout_ms);
        let code = request.code;
        let response = self.inner.client.invoke(addr, request, timeout).await?;
        if response.code != ResponseCode::Success.code() {
            return Err(response_error(addr, code, &response));
        }
        Ok(response)
    }
}

/// The messages of a POP answer with their receipt handles: a retry copy carries its own
/// (`POP_CK`); a message of the topic gets one built from the answer's header, as
/// upstream's clients build it.
/// The messages of a successful POP answer with their receipt handles (the record's
/// `POP_CK`, or one built from the answer's header for records without it).
pub fn popped_messages(
    response: &RemotingCommand,
    broker_name: &str,
    topic: &str,
) -> std::result::Result<Vec<(MessageExt, String)>, String> {
    let field = |k: &str| response.ext_fields.get(k).unwrap_or_default().to_string();
    let number = |k: &str| {
        field(k)
            .parse::<i64>()
            .map_err(|_| format!("the POP answer's {k} is not a number"))
    };
    let (pop_time, invisible, revive_qid) = (
        number("popTime")?,
        number("invisibleTime")?,
        number("reviveQid")?,
    );
    let starts = pop::parse_offset_info(&field("startOffsetInfo")).map_err(|e| e.0)?;
    let mut out = Vec::new();
    for mut m in decode_records(&response.body, broker_name) {
        let handle = match m.properties.get(keys::POP_CK) {
            Some(h) => h.to_string(),
            None => {
                let key = format!("{}@{}", RetryKind::Normal.as_str(), m.queue_id);
                let start = starts.get(&key).ok_or_else(|| {
                    format!("startOffsetInfo has no entry for queue {}", m.queue_id)
                })?;
                let info = ExtraInfo {
                    ck_start_offset: start
                        .parse()
                        .map_err(|_| format!("startOffsetInfo entry `{start}` is not a number"))?,
                    pop_time_ms: pop_time,
                    invisible_time_ms: invisible,
                    revive_qid: i32::try_from(revive_qid).map_err(|_| "reviveQid out of range")?,
                    retry: RetryKind::Normal,
                    broker_name: broker_name.to_string(),
                    queue_id: m.queue_id,
                    msg_queue_offset: Some(m.queue_offset),
                };
                info.to_string()
            }
        };
        m.topic = topic.to_string();
        out.push((m, handle));
    }
    Ok(out)
}

fn response_error(addr: &str, request_code: i32, response: &RemotingCommand) -> ClientError {
    ClientError::Response {
        addr: addr.to_string(),
        request_code,
        code: response.code,
        remark: response.remark.clone().unwrap_or_default(),
    }
}

fn protocol_error(addr: &str, reason: impl Into<String>) -> ClientError {
    ClientError::Protocol {
        addr: addr.to_string(),
        request_code: RequestCode::PopMessage.code(),
        reason: reason.into(),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
