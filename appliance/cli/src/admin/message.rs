//! Message commands: `queryMsgById`, `queryMsgByKey`, `queryMsgByUniqueKey`,
//! `queryMsgByOffset`, `printMsg`, `printMsgByQueue`, `sendMessage`, `consumeMessage`,
//! `checkMsgSendRT`.
//!
//! Pulls use the tools group `TOOLS_CONSUMER` and never commit offsets; message bodies of
//! looked-up messages are written to `/tmp/rocketmq/msgbodys/<msgId>` as mqadmin does.

use std::collections::BTreeMap;
use std::time::Instant;

use ringmq_client::message::now_ms;
use ringmq_client::{
    Message, MessageExt, MessageQueue, Producer, ProducerConfig, PullConsumer, PullConsumerConfig,
    PullOptions, PullResult, PullStatus, QueueSelector, SendResult, SendStatus,
};
use ringmq_remoting::json::{self, ObjectBuilder, Value};
use ringmq_remoting::message::properties::keys;
use ringmq_remoting::{RemotingCommand, RequestCode, ResponseCode};

use super::cli::{flag, opt, req, Cmd, Matches};
use super::ctx::{retry_topic, Ctx};
use super::fmt::{human_time, java_map, object, parse_timestamp};
use super::out::{describe, AResult, AdminError, At, Out, Role};

pub const TOOLS_CONSUMER_GROUP: &str = "TOOLS_CONSUMER";
const BODY_DIR: &str = "/tmp/rocketmq/msgbodys";
/// Upper bound on pulls of one queue in one command (32 messages each).
const MAX_PULLS_PER_QUEUE: usize = 1_000_000;

pub const COMMANDS: &[Cmd] = &[
    Cmd {
        name: "queryMsgById",
        desc: "Look a message up by its offsetMsgId or msgId.",
        opts: &[
            req("t", "topic", "topic name"),
            req("i", "msgId", "message id(s), comma-separated"),
            opt(
                "g",
                "consumerGroup",
                "with -d: push the message to this consumer",
            ),
            opt("d", "clientId", "with -g: the consumer's client id"),
            opt("s", "sendMessage", "resend the message: true|false"),
            opt("u", "unitName", "unit name of the resending producer"),
            opt(
                "f",
                "bodyFormat",
                "print the body decoded with this charset",
            ),
            opt("c", "cluster", "cluster name (or lmq parent topic)"),
        ],
        one_of: &[],
    },
    Cmd {
        name: "queryMsgByKey",
        desc: "Look messages up by business key.",
        opts: &[
            req("t", "topic", "topic name"),
            req("k", "msgKey", "message key"),
            opt(
                "b",
                "beginTimestamp",
                "stored at or after this ms timestamp (default 0)",
            ),
            opt(
                "e",
                "endTimestamp",
                "stored before this ms timestamp (default: no limit)",
            ),
            opt("m", "maxNum", "most messages returned (default 64)"),
            opt("c", "cluster", "cluster name (or lmq parent topic)"),
        ],
        one_of: &[],
    },
    Cmd {
        name: "queryMsgByUniqueKey",
        desc: "Look a message up by its client-generated msgId (UNIQ_KEY).",
        opts: &[
            req("i", "msgId", "message id"),
            opt(
                "g",
                "consumerGroup",
                "with -d: push the message to this consumer",
            ),
            opt("d", "clientId", "with -g: the consumer's client id"),
            req("t", "topic", "topic name"),
            flag("a", "showAll", "print every copy (at most 32)"),
            opt("c", "cluster", "cluster name (or lmq parent topic)"),
        ],
        one_of: &[],
    },
    Cmd {
        name: "queryMsgByOffset",
        desc: "Print the message at a queue offset.",
        opts: &[
            req("t", "topic", "topic name"),
            req("b", "brokerName", "broker name"),
            req("i", "queueId", "queue id"),
            req("o", "offset", "queue offset"),
            opt(
                "f",
                "bodyFormat",
                "print the body decoded with this charset",
            ),
        ],
        one_of: &[],
    },
    Cmd {
        name: "printMsg",
        desc: "Print every message of a topic (optionally within a time range).",
        opts: &[
            req("t", "topic", "topic name"),
            opt("c", "charsetName ", "body charset (default UTF-8)"),
            opt(
                "s",
                "subExpression ",
                "tag expression, e.g. TagA || TagB (default *)",
            ),
            opt("b", "beginTimestamp ", "ms or yyyy-MM-dd#HH:mm:ss:SSS"),
            opt("e", "endTimestamp ", "ms or yyyy-MM-dd#HH:mm:ss:SSS"),
            opt("d", "printBody ", "print bodies: true|false (default true)"),
            opt(
                "l",
                "lmqParentTopic",
                "route the queues by this parent topic",
            ),
        ],
        one_of: &[],
    },
    Cmd {
        name: "printMsgByQueue",
        desc: "Print the messages of one queue, optionally counted by tag.",
        opts: &[
            req("t", "topic", "topic name"),
            req("a", "brokerName ", "broker name"),
            req("i", "queueId ", "queue id"),
            opt("c", "charsetName ", "body charset (default UTF-8)"),
            opt("s", "subExpression ", "tag expression (default *)"),
            opt("b", "beginTimestamp ", "ms or yyyy-MM-dd#HH:mm:ss:SSS"),
            opt("e", "endTimestamp ", "ms or yyyy-MM-dd#HH:mm:ss:SSS"),
            opt(
                "p",
                "print msg",
                "print the messages: true|false (default false)",
            ),
            opt(
                "d",
                "printBody ",
                "print bodies: true|false (default false)",
            ),
            opt(
                "f",
                "calculate",
                "count messages by tag: true|false (default false)",
            ),
        ],
        one_of: &[],
    },
    Cmd {
        name: "sendMessage",
        desc: "Send one message.",
        opts: &[
            req("t", "topic", "topic name"),
            req("p", "body", "message body (UTF-8 text)"),
            opt("k", "key", "message keys"),
            opt("c", "tags", "message tag"),
            opt("b", "broker", "with -i: send to this broker name"),
            opt("i", "qid", "with -b: send to this queue id"),
            opt(
                "m",
                "msgTraceEnable",
                "message trace: true|false (accepted, not traced)",
            ),
        ],
        one_of: &[],
    },
    Cmd {
        name: "consumeMessage",
        desc: "Pull and print messages of a topic, a queue, or from an offset.",
        opts: &[
            req("t", "topic", "topic name"),
            opt("b", "brokerName", "broker name"),
            opt("i", "queueId", "queue id (needs -b)"),
            opt("o", "offset", "start offset (needs -i)"),
            opt("g", "consumerGroup", "consumer group to pull as"),
            opt("s", "beginTimestamp ", "ms or yyyy-MM-dd#HH:mm:ss:SSS"),
            opt("e", "endTimestamp ", "ms or yyyy-MM-dd#HH:mm:ss:SSS"),
            opt("c", "MessageNumber", "how many messages (default 128)"),
        ],
        one_of: &[],
    },
    Cmd {
        name: "checkMsgSendRT",
        desc: "Send test messages round-robin over a topic's queues and print each round trip.",
        opts: &[
            req("t", "topic", "topic name"),
            opt("a", "amount", "message count (default 100)"),
            opt("s", "size", "message size in bytes (default 128)"),
        ],
        one_of: &[],
    },
];

// ---- printing ----------------------------------------------------------------------------

/// Java `MessageQueue.toString`.
pub fn mq_string(mq: &MessageQueue) -> String {
    format!(
        "MessageQueue [topic={}, brokerName={}, queueId={}]",
        mq.topic, mq.broker_name, mq.queue_id
    )
}

fn properties_string(msg: &MessageExt) -> String {
    java_map(msg.properties.iter())
}

/// Stored size of the record (v1 layout; IPv6 hosts take 12 more bytes each).
fn store_size(msg: &MessageExt) -> usize {
    let host = |a: &std::net::SocketAddr| if a.is_ipv6() { 20 } else { 8 };
    4 + 4
        + 4
        + 4
        + 4
        + 8
        + 8
        + 4
        + 8
        + host(&msg.born_host)
        + 8
        + host(&msg.store_host)
        + 4
        + 8
        + 4
        + msg.body.len()
        + 1
        + msg.topic.len()
        + 2
        + msg.properties.encoded_len()
}

/// Java `MessageExt.toString` (the body as signed decimal bytes, like `Arrays.toString`).
pub fn message_ext_string(msg: &MessageExt) -> String {
    let body: Vec<String> = msg.body.iter().map(|b| (*b as i8).to_string()).collect();
    format!(
        "MessageExt [brokerName={}, queueId={}, storeSize={}, queueOffset={}, sysFlag={}, bornTimestamp={}, bornHost=/{}, storeTimestamp={}, storeHost=/{}, msgId={}, commitLogOffset={}, bodyCRC={}, reconsumeTimes={}, preparedTransactionOffset={}, toString()=Message{{topic='{}', flag={}, properties={}, body=[{}], transactionId='null'}}]",
        msg.broker_name,
        msg.queue_id,
        store_size(msg),
        msg.queue_offset,
        msg.sys_flag,
        msg.born_timestamp_ms,
        msg.born_host,
        msg.store_timestamp_ms,
        msg.store_host,
        msg.offset_msg_id,
        msg.commit_log_offset,
        msg.body_crc,
        msg.reconsume_times,
        msg.prepared_transaction_offset,
        msg.topic,
        msg.flag,
        properties_string(msg),
        body.join(", ")
    )
}

/// `MSGID: <id> <MessageExt> BODY: <body>` (printMsg, printMsgByQueue, consumeMessage).
pub fn msg_line(msg: &MessageExt, print_body: bool) -> String {
    let body = if print_body {
        String::from_utf8_lossy(&msg.body).into_owned()
    } else {
        "NOT PRINT BODY".into()
    };
    format!(
        "MSGID: {} {} BODY: {}",
        msg.msg_id,
        message_ext_string(msg),
        body
    )
}

pub fn message_value(msg: &MessageExt, with_body: bool) -> Value {
    let props = object(msg.properties.iter().map(|(k, v)| (k, Value::str(v))));
    ObjectBuilder::new()
        .field_opt(
            "body",
            with_body.then(|| String::from_utf8_lossy(&msg.body).into_owned()),
        )
        .field("bodyCRC", msg.body_crc)
        .field("bornHost", msg.born_host.to_string())
        .field("bornTimestamp", msg.born_timestamp_ms)
        .field("brokerName", msg.broker_name.as_str())
        .field("commitLogOffset", msg.commit_log_offset)
        .field("msgId", msg.msg_id.as_str())
        .field("offsetMsgId", msg.offset_msg_id.as_str())
        .field("properties", props)
        .field("queueId", msg.queue_id)
        .field("queueOffset", msg.queue_offset)
        .field("reconsumeTimes", msg.reconsume_times)
        .field("storeHost", msg.store_host.to_string())
        .field("storeTimestamp", msg.store_timestamp_ms)
        .field("sysFlag", msg.sys_flag)
        .field("topic", msg.topic.as_str())
        .build()
}

fn bracket(v: Option<&str>) -> String {
    format!("[{}]", v.unwrap_or("null"))
}

/// The detail block of one message (queryMsgById / queryMsgByOffset / queryMsgByUniqueKey).
pub fn detail_text(
    msg: &MessageExt,
    offset_id_line: bool,
    body_path: &str,
    body_charset: Option<&str>,
) -> String {
    let mut s = String::new();
    let mut kv = |k: &str, v: String| s.push_str(&format!("{k:<20} {v}\n"));
    if offset_id_line {
        kv("OffsetID:", msg.offset_msg_id.clone());
    }
    kv("Topic:", msg.topic.clone());
    kv("Tags:", bracket(msg.tags()));
    kv("Keys:", bracket(msg.property(keys::KEYS)));
    kv("Queue ID:", msg.queue_id.to_string());
    kv("Queue Offset:", msg.queue_offset.to_string());
    kv("CommitLog Offset:", msg.commit_log_offset.to_string());
    kv("Reconsume Times:", msg.reconsume_times.to_string());
    kv("Born Timestamp:", human_time(msg.born_timestamp_ms));
    kv("Store Timestamp:", human_time(msg.store_timestamp_ms));
    kv("Born Host:", msg.born_host.to_string());
    kv("Store Host:", msg.store_host.to_string());
    kv("System Flag:", msg.sys_flag.to_string());
    kv("Properties:", properties_string(msg));
    kv("Message Body Path:", body_path.to_string());
    if body_charset.is_some() {
        kv(
            "Message Body:",
            String::from_utf8_lossy(&msg.body).into_owned(),
        );
    }
    s
}

fn write_body_file(msg: &MessageExt, index: usize) -> String {
    let mut path = format!("{BODY_DIR}/{}", msg.msg_id);
    if index > 0 {
        path.push_str(&format!("_{index}"));
    }
    if let Err(e) = std::fs::create_dir_all(BODY_DIR).and_then(|_| std::fs::write(&path, &msg.body))
    {
        tracing::warn!(path, error = %e, "cannot write the message body file");
    }
    path
}

/// What became of a message for one consumer group (`MessageTrack`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Track {
    pub group: String,
    pub track_type: &'static str,
    pub exception: Option<String>,
}

impl Track {
    pub fn java_string(&self) -> String {
        format!(
            "MessageTrack [consumerGroup={}, trackType={}, exceptionDesc={}]",
            self.group,
            self.track_type,
            self.exception.as_deref().unwrap_or("null")
        )
    }
}

/// `messageTrackDetail`: every group consuming the topic, and whether it consumed `msg`.
async fn message_track(ctx: &Ctx, msg: &MessageExt) -> AResult<Vec<Track>> {
    use ringmq_remoting::body::heartbeat::ConsumeType;
    let groups = ctx.topic_consume_by_who(&msg.topic).await?;
    let mut tracks = Vec::new();
    for group in groups {
        let mut t = Track {
            group: group.clone(),
            track_type: "UNKNOWN",
            exception: None,
        };
        let cc = match ctx.examine_consumer_connection(&group).await {
            Ok(Ok(cc)) => cc,
            Ok(Err(e)) => {
                if AdminError::is_code(&e, ResponseCode::ConsumerNotOnline) {
                    t.track_type = "NOT_ONLINE";
                }
                t.exception = Some(match &e {
                    ringmq_client::ClientError::Response { code, remark, .. } => {
                        format!("CODE:{code} DESC:{remark}")
                    }
                    other => describe(Role::Broker, other),
                });
                tracks.push(t);
                continue;
            }
            Err(e) => {
                t.exception = Some(e.message().to_string());
                tracks.push(t);
                continue;
            }
        };
        match cc.consume_type {
            Some(ConsumeType::ConsumeActively) => t.track_type = "PULL",
            Some(ConsumeType::ConsumePassively) => match consumed(ctx, msg, &group).await {
                Ok(true) => {
                    t.track_type = "CONSUMED";
                    if let Some(sd) = cc.subscription_table.get(&msg.topic) {
                        let tag = msg.tags().unwrap_or_default();
                        let passes = sd.tags_set.is_empty()
                            || sd.tags_set.iter().any(|x| x == "*" || x == tag);
                        if !passes {
                            t.track_type = "CONSUMED_BUT_FILTERED";
                        }
                    }
                }
                Ok(false) => t.track_type = "NOT_CONSUME_YET",
                Err(e) => t.exception = Some(e.message().to_string()),
            },
            _ => {}
        }
        tracks.push(t);
    }
    Ok(tracks)
}

/// Whether `group`'s committed offset on the message's queue (on the broker that stored
/// it) is past the message.
async fn consumed(ctx: &Ctx, msg: &MessageExt, group: &str) -> AResult<bool> {
    let stats = ctx.examine_consume_stats(group, None).await?;
    let info = ctx.cluster_info().await?;
    let store = msg.store_host.to_string();
    Ok(stats.offset_table.iter().any(|(mq, o)| {
        mq.topic == msg.topic
            && mq.queue_id == msg.queue_id
            && info
                .broker_addr_table
                .get(&mq.broker_name)
                .and_then(|b| b.broker_addrs.get(&0))
                == Some(&store)
            && o.consumer_offset > msg.queue_offset
    }))
}

async fn print_tracks(ctx: &Ctx, msg: &MessageExt, out: &mut Out) -> Vec<Value> {
    match message_track(ctx, msg).await {
        Ok(tracks) if tracks.is_empty() => {
            out.line("\n\nWARN: No Consumer");
            Vec::new()
        }
        Ok(tracks) => {
            out.line("\n");
            tracks
                .iter()
                .map(|t| {
                    out.line(t.java_string());
                    ObjectBuilder::new()
                        .field("consumerGroup", t.group.as_str())
                        .field_opt("exceptionDesc", t.exception.clone())
                        .field("trackType", t.track_type)
                        .build()
                })
                .collect()
        }
        Err(e) => {
            out.warn(format!(
                "cannot tell which groups consumed the message: {}",
                e.message()
            ));
            Vec::new()
        }
    }
}

// ---- lookups ---------------------------------------------------------------------------------

/// `QUERY_MESSAGE` on every master of the topic's route.
async fn query_masters(
    ctx: &Ctx,
    topic: &str,
    key: &str,
    max: i32,
    begin: i64,
    end: i64,
    unique: bool,
) -> AResult<Vec<MessageExt>> {
    let route = ctx.route(topic).await?;
    let mut found = Vec::new();
    for bd in &route.broker_datas {
        let Some(addr) = bd.broker_addrs.get(&0) else {
            continue;
        };
        found.extend(
            ctx.admin
                .query_message(addr, &bd.broker_name, topic, key, max, begin, end, unique)
                .await
                .br()?,
        );
    }
    Ok(found)
}

/// Copies of the message whose UNIQ_KEY is `id`, oldest first.
async fn query_unique(ctx: &Ctx, topic: &str, id: &str) -> AResult<Vec<MessageExt>> {
    let mut list = query_masters(ctx, topic, id, 32, 0, i64::MAX, true).await?;
    list.sort_by_key(|m| m.store_timestamp_ms);
    Ok(list)
}

/// mqadmin's `queryMessage(topic, msgId)`: an offsetMsgId is read straight from its
/// broker; anything else (or a miss) is looked up as a UNIQ_KEY.
async fn find_message(ctx: &Ctx, topic: &str, id: &str) -> AResult<MessageExt> {
    if let Ok(msg) = ctx.admin.view_message(id).await {
        if msg.topic == topic || msg.topic == retry_topic(topic) {
            return Ok(fill_broker_name(ctx, msg).await);
        }
    }
    query_unique(ctx, topic, id)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| AdminError::failed(format!("no message with id {id} in topic {topic}")))
}

async fn fill_broker_name(ctx: &Ctx, mut msg: MessageExt) -> MessageExt {
    if msg.broker_name.is_empty() {
        if let Ok(name) = ctx.broker_name_of(&msg.store_host.to_string()).await {
            msg.broker_name = name;
        }
    }
    msg
}

fn send_result_string(r: &SendResult) -> String {
    format!(
        "SendResult [sendStatus={}, msgId={}, offsetMsgId={}, messageQueue={}, queueOffset={}, recallHandle=null]",
        status_name(r.status),
        r.msg_id,
        r.offset_msg_id,
        mq_string(&r.queue),
        r.queue_offset
    )
}

pub fn status_name(s: SendStatus) -> &'static str {
    match s {
        SendStatus::SendOk => "SEND_OK",
        SendStatus::FlushDiskTimeout => "FLUSH_DISK_TIMEOUT",
        SendStatus::FlushSlaveTimeout => "FLUSH_SLAVE_TIMEOUT",
        SendStatus::SlaveNotAvailable => "SLAVE_NOT_AVAILABLE",
    }
}

fn producer(ctx: &Ctx, group: String) -> Producer {
    Producer::with_client(
        ctx.client.clone(),
        ProducerConfig {
            group,
            namesrv_addrs: ctx.namesrv.clone(),
            ..ProducerConfig::default()
        },
    )
}

fn pull_consumer(ctx: &Ctx, group: &str) -> PullConsumer {
    PullConsumer::with_client(
        ctx.client.clone(),
        PullConsumerConfig {
            group: group.to_string(),
            namesrv_addrs: ctx.namesrv.clone(),
            ..PullConsumerConfig::default()
        },
    )
}

/// A pull that answers at once (no long polling), as mqadmin's pull consumer does.
async fn pull_now(
    c: &PullConsumer,
    mq: &MessageQueue,
    sub: &str,
    offset: i64,
    max: i32,
) -> AResult<PullResult> {
    let opts = PullOptions {
        subscription: sub.to_string(),
        max_msgs: max.clamp(1, 32),
        suspend_ms: None,
        timeout_ms: 10_000,
        ..PullOptions::default()
    };
    c.pull_with(mq, offset, &opts).await.br()
}

/// `CONSUME_MESSAGE_DIRECTLY` (309): ask a consumer (through the storing broker) to consume.
async fn push_to_consumer(
    ctx: &Ctx,
    msg: &MessageExt,
    group: &str,
    client_id: &str,
    out: &mut Out,
) -> AResult<()> {
    let addr = msg.store_host.to_string();
    let req = RemotingCommand::request(RequestCode::ConsumeMessageDirectly.code(), 0)
        .with_ext("consumerGroup", group)
        .with_ext("clientId", client_id)
        .with_ext("msgId", msg.offset_msg_id.clone())
        .with_ext("topic", msg.topic.clone())
        .with_ext("brokerName", msg.broker_name.clone());
    let resp = ctx.call(&addr, req).await.br()?;
    let v = json::parse(&resp.body).unwrap_or(Value::Null);
    let field = |k: &str| {
        v.get(k)
            .map(|x| {
                x.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| x.to_json())
            })
            .unwrap_or_else(|| "null".into())
    };
    out.line(format!(
        "ConsumeMessageDirectlyResult [order={}, autoCommit={}, consumeResult={}, remark={}, spentTimeMills={}]",
        field("order"),
        field("autoCommit"),
        field("consumeResult"),
        field("remark"),
        field("spentTimeMills")
    ));
    out.json(v);
    Ok(())
}

pub async fn query_msg_by_id(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let topic = m.get("topic").unwrap_or_default();
    let ids: Vec<&str> = m
        .get("msgId")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if ids.is_empty() {
        return Err(AdminError::Usage("-i/--msgId is empty".into()));
    }
    let mut results = Vec::new();
    for id in ids {
        let msg = find_message(ctx, topic, id).await?;
        if let (Some(group), Some(client)) = (m.get("consumerGroup"), m.get("clientId")) {
            push_to_consumer(ctx, &msg, group, client, out).await?;
            continue;
        }
        if m.has("sendMessage") {
            if m.boolean("sendMessage", false) {
                out.raw(format!("prepare resend msg. originalMsgId={id}"));
                let p = producer(ctx, "ReSendMsgById".into());
                let mut resend = Message::new(msg.topic.clone(), msg.body.clone());
                resend.flag = msg.flag;
                for (k, v) in msg.properties.iter() {
                    resend
                        .properties
                        .insert(k, v)
                        .map_err(|e| AdminError::failed(format!("property {k}: {e}")))?;
                }
                let r = p.send(&resend).await.br()?;
                out.line(send_result_string(&r));
                p.shutdown().await;
                results.push(send_result_value(&r));
            }
            continue;
        }
        let path = write_body_file(&msg, 0);
        out.raw(detail_text(&msg, true, &path, m.get("bodyFormat")));
        let tracks = print_tracks(ctx, &msg, out).await;
        results.push(
            ObjectBuilder::new()
                .field("message", message_value(&msg, true))
                .field("messageBodyPath", path.as_str())
                .field("tracks", Value::Array(tracks))
                .build(),
        );
    }
    out.json(
        ObjectBuilder::new()
            .field("results", Value::Array(results))
            .build(),
    );
    Ok(())
}

pub async fn query_msg_by_key(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let topic = m.get("topic").unwrap_or_default();
    let key = m.get("msgKey").unwrap_or_default();
    let begin: i64 = m.num("beginTimestamp", 0)?;
    let end: i64 = m.num("endTimestamp", i64::MAX)?;
    let max: i32 = m.num("maxNum", 64)?;
    let list = query_masters(ctx, topic, key, max, begin, end, false).await?;
    out.line(format!(
        "{:<50} {:>4} {:>40}",
        "#Message ID", "#QID", "#Offset"
    ));
    for msg in &list {
        out.line(format!(
            "{:<50} {:>4} {:>40}",
            msg.msg_id, msg.queue_id, msg.queue_offset
        ));
    }
    out.json(
        ObjectBuilder::new()
            .field(
                "messages",
                Value::Array(list.iter().map(|x| message_value(x, false)).collect()),
            )
            .build(),
    );
    Ok(())
}

pub async fn query_msg_by_unique_key(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let topic = m.get("topic").unwrap_or_default();
    let id = m.get("msgId").unwrap_or_default();
    if let (Some(group), Some(client)) = (m.get("consumerGroup"), m.get("clientId")) {
        let msg = find_message(ctx, topic, id).await?;
        return push_to_consumer(ctx, &msg, group, client, out).await;
    }
    let list = query_unique(ctx, topic, id).await?;
    if list.is_empty() {
        return Err(AdminError::failed(format!(
            "no message with unique key {id} in topic {topic}"
        )));
    }
    let shown = if m.has("showAll") { list.len() } else { 1 };
    let mut results = Vec::new();
    for (i, msg) in list.iter().take(shown).enumerate() {
        let path = write_body_file(msg, i);
        out.raw(detail_text(msg, false, &path, None));
        let tracks = print_tracks(ctx, msg, out).await;
        results.push(
            ObjectBuilder::new()
                .field("message", message_value(msg, true))
                .field("messageBodyPath", path.as_str())
                .field("tracks", Value::Array(tracks))
                .build(),
        );
    }
    out.json(
        ObjectBuilder::new()
            .field("results", Value::Array(results))
            .build(),
    );
    Ok(())
}

pub async fn query_msg_by_offset(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let mq = MessageQueue::new(
        m.get("topic").unwrap_or_default(),
        m.get("brokerName").unwrap_or_default(),
        m.num("queueId", 0)?,
    );
    let offset: i64 = m.num("offset", 0)?;
    let c = pull_consumer(ctx, TOOLS_CONSUMER_GROUP);
    let r = pull_now(&c, &mq, "*", offset, 1).await?;
    let Some(msg) = r.messages.into_iter().next() else {
        return Err(AdminError::failed(format!(
            "no message at offset {offset} of {} (pull status {:?}, queue offsets {}..{})",
            mq_string(&mq),
            r.status,
            r.min_offset,
            r.max_offset
        )));
    };
    let path = write_body_file(&msg, 0);
    out.raw(detail_text(&msg, true, &path, m.get("bodyFormat")));
    let tracks = print_tracks(ctx, &msg, out).await;
    out.json(
        ObjectBuilder::new()
            .field("message", message_value(&msg, true))
            .field("messageBodyPath", path.as_str())
            .field("tracks", Value::Array(tracks))
            .build(),
    );
    Ok(())
}

fn status_text(s: PullStatus) -> &'static str {
    match s {
        PullStatus::Found => "FOUND",
        PullStatus::NoNewMsg => "NO_NEW_MSG",
        PullStatus::NoMatchedMsg => "NO_MATCHED_MSG",
        PullStatus::OffsetIllegal => "OFFSET_ILLEGAL",
    }
}

fn time_opt(m: &Matches, long: &str) -> AResult<Option<i64>> {
    match m.get(long) {
        None => Ok(None),
        Some(v) => parse_timestamp(v)
            .map(Some)
            .map_err(|e| AdminError::Usage(format!("--{}: {e}", long.trim()))),
    }
}

fn charset_ok(m: &Matches, long: &str, out: &mut Out) {
    if let Some(cs) = m.get(long) {
        if !cs.eq_ignore_ascii_case("UTF-8") && !cs.eq_ignore_ascii_case("UTF8") {
            out.warn(format!(
                "charset {cs} is not supported; bodies are printed as UTF-8"
            ));
        }
    }
}

pub async fn print_msg(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let topic = m.get("topic").unwrap_or_default();
    charset_ok(m, "charsetName ", out);
    let sub = m.get("subExpression ").unwrap_or("*");
    let print_body = m.boolean("printBody ", true);
    let begin = time_opt(m, "beginTimestamp ")?;
    let end = time_opt(m, "endTimestamp ")?;
    let c = pull_consumer(ctx, TOOLS_CONSUMER_GROUP);
    let route_topic = m.get("lmqParentTopic").unwrap_or(topic);
    let mut queues = c.subscribe_queues(route_topic).await.ns()?;
    for q in &mut queues {
        q.topic = topic.to_string();
    }
    queues.sort();
    let mut all = Vec::new();
    for mq in &queues {
        let mut min = c.min_offset(mq).await.br()?;
        let mut max = c.max_offset(mq).await.br()?;
        if let Some(t) = begin {
            min = c.search_offset(mq, t).await.br()?;
        }
        if let Some(t) = end {
            max = c.search_offset(mq, t).await.br()?;
        }
        out.line(format!(
            "minOffset={min}, maxOffset={max}, {}",
            mq_string(mq)
        ));
        let mut offset = min;
        for _ in 0..MAX_PULLS_PER_QUEUE {
            if offset >= max {
                break;
            }
            let r = match pull_now(&c, mq, sub, offset, 32).await {
                Ok(r) => r,
                Err(e) => {
                    out.warn(e.message());
                    break;
                }
            };
            let progressed = r.next_begin_offset > offset;
            offset = r.next_begin_offset;
            match r.status {
                PullStatus::Found => {
                    for msg in &r.messages {
                        out.line(msg_line(msg, print_body));
                        all.push(message_value(msg, print_body));
                    }
                }
                PullStatus::NoMatchedMsg => {
                    out.line(format!(
                        "{} no matched msg. status={}, offset={offset}",
                        mq_string(mq),
                        status_text(r.status)
                    ));
                }
                PullStatus::NoNewMsg | PullStatus::OffsetIllegal => {
                    out.line(format!(
                        "{} print msg finished. status={}, offset={offset}",
                        mq_string(mq),
                        status_text(r.status)
                    ));
                    break;
                }
            }
            if !progressed {
                break;
            }
        }
        out.line("--------------------------------------------------------");
    }
    out.json(
        ObjectBuilder::new()
            .field("messages", Value::Array(all))
            .build(),
    );
    Ok(())
}

pub async fn print_msg_by_queue(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let topic = m.get("topic").unwrap_or_default();
    charset_ok(m, "charsetName ", out);
    let broker = m.get("brokerName ").unwrap_or_default();
    let queue_id: i32 = m.num("queueId ", 0)?;
    let sub = m.get("subExpression ").unwrap_or("*");
    let print = m.boolean("print msg", false);
    let print_body = m.boolean("printBody ", false);
    let by_tag = m.boolean("calculate", false);
    let begin = time_opt(m, "beginTimestamp ")?;
    let end = time_opt(m, "endTimestamp ")?;
    let c = pull_consumer(ctx, TOOLS_CONSUMER_GROUP);
    let mq = MessageQueue::new(topic, broker, queue_id);
    let mut min = c.min_offset(&mq).await.br()?;
    let mut max = c.max_offset(&mq).await.br()?;
    if let Some(t) = begin {
        min = c.search_offset(&mq, t).await.br()?;
    }
    if let Some(t) = end {
        max = c.search_offset(&mq, t).await.br()?;
    }
    let mut tags: BTreeMap<String, u64> = BTreeMap::new();
    let mut all = Vec::new();
    let mut offset = min;
    for _ in 0..MAX_PULLS_PER_QUEUE {
        if offset >= max {
            break;
        }
        let r = pull_now(&c, &mq, sub, offset, 32).await?;
        let progressed = r.next_begin_offset > offset;
        offset = r.next_begin_offset;
        if r.status != PullStatus::Found {
            break;
        }
        for msg in &r.messages {
            if let Some(t) = msg.tags().filter(|t| !t.trim().is_empty()) {
                *tags.entry(t.to_string()).or_default() += 1;
            }
            if print {
                out.line(msg_line(msg, print_body));
                all.push(message_value(msg, print_body));
            }
        }
        if !progressed {
            break;
        }
    }
    let mut counted: Vec<(String, u64)> = tags.into_iter().collect();
    counted.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    if by_tag {
        for (tag, n) in &counted {
            out.line(format!("Tag: {tag:<30} Count: {n}"));
        }
    }
    let tag_json = object(
        counted
            .iter()
            .map(|(tag, n)| (tag.as_str(), Value::int(*n as i64))),
    );
    out.json(
        ObjectBuilder::new()
            .field("messages", Value::Array(all))
            .field("tagCounts", tag_json)
            .build(),
    );
    Ok(())
}

fn send_result_value(r: &SendResult) -> Value {
    ObjectBuilder::new()
        .field("brokerName", r.queue.broker_name.as_str())
        .field("msgId", r.msg_id.as_str())
        .field("offsetMsgId", r.offset_msg_id.as_str())
        .field("queueId", r.queue.queue_id)
        .field("queueOffset", r.queue_offset)
        .field("sendStatus", status_name(r.status))
        .build()
}

pub async fn send_message(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let topic = m.get("topic").unwrap_or_default();
    let body = m.get("body").unwrap_or_default();
    let queue: i32 = m.num("qid", -1)?;
    if m.has("qid") && !m.has("broker") {
        return Err(AdminError::Usage(
            "Broker name must be set if the queue is chosen! (-b with -i)".into(),
        ));
    }
    ctx.require_namesrv()?;
    let mut msg = Message::new(topic, body.as_bytes().to_vec());
    let invalid = |e: ringmq_client::ClientError| AdminError::Usage(describe(Role::Broker, &e));
    if let Some(tags) = m.get("tags") {
        msg = msg.with_tags(tags).map_err(invalid)?;
    }
    if let Some(k) = m.get("key") {
        msg = msg.with_property(keys::KEYS, k).map_err(invalid)?;
    }
    let p = producer(ctx, now_ms().to_string());
    let selector = match (m.get("broker"), queue) {
        (Some(b), q) if q > -1 => QueueSelector::Queue(MessageQueue::new(topic, b, q)),
        _ => QueueSelector::RoundRobin,
    };
    let result = p.send_with(&msg, &selector).await;
    p.shutdown().await;
    let r = result.br()?;
    out.line(format!(
        "{:<32}  {:<4}  {:<20}    {}",
        "#Broker Name", "#QID", "#Send Result", "#MsgId"
    ));
    out.line(format!(
        "{:<32}  {:<4}  {:<20}    {}",
        r.queue.broker_name,
        r.queue.queue_id,
        status_name(r.status),
        r.msg_id
    ));
    out.json(send_result_value(&r));
    Ok(())
}

pub async fn consume_message(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let topic = m.get("topic").unwrap_or_default();
    let count: i64 = m.num("MessageNumber", 128)?;
    if count <= 0 {
        return Err(AdminError::Usage(
            "Please input a positive messageNumber! (-c)".into(),
        ));
    }
    if m.has("queueId") && !m.has("brokerName") {
        return Err(AdminError::Usage(
            "Please set the brokerName before queueId! (-b with -i)".into(),
        ));
    }
    if m.has("offset") && !m.has("queueId") {
        return Err(AdminError::Usage(
            "Please set queueId before offset! (-i with -o)".into(),
        ));
    }
    let now = now_ms();
    let begin = time_opt(m, "beginTimestamp ")?;
    let end = time_opt(m, "endTimestamp ")?;
    if begin.is_some_and(|b| b > now) {
        return Err(AdminError::Usage(
            "Please set the beginTimestamp before now!".into(),
        ));
    }
    if let Some(e) = end {
        if e > now {
            return Err(AdminError::Usage(
                "Please set the endTimestamp before now!".into(),
            ));
        }
        if begin.is_some_and(|b| b > e) {
            return Err(AdminError::Usage("Please make sure that the beginTimestamp is less than or equal to the endTimestamp".into()));
        }
    }
    let group = m.get("consumerGroup").unwrap_or(TOOLS_CONSUMER_GROUP);
    let c = pull_consumer(ctx, group);
    let mut all = Vec::new();
    let range = |mq: MessageQueue| {
        let c = c.clone();
        async move {
            let mut min = c.min_offset(&mq).await.br()?;
            let mut max = c.max_offset(&mq).await.br()?;
            if let Some(t) = begin.filter(|t| *t > 0) {
                min = c.search_offset(&mq, t).await.br()?;
            }
            if let Some(t) = end.filter(|t| *t > 0) {
                max = c.search_offset(&mq, t).await.br()?;
            }
            Ok::<_, AdminError>((mq, min, max))
        }
    };
    let mut plan: Vec<(MessageQueue, i64, i64)> = Vec::new();
    if let Some(broker) = m.get("brokerName") {
        if let Some(_q) = m.get("queueId") {
            let mq = MessageQueue::new(topic, broker, m.num("queueId", 0)?);
            let (mq, min, max) = range(mq).await?;
            let start: i64 = m.num("offset", 0)?;
            if start > max {
                out.line(format!("{} no matched msg, offset={start}", mq_string(&mq)));
                out.json(
                    ObjectBuilder::new()
                        .field("messages", Value::Array(all))
                        .build(),
                );
                return Ok(());
            }
            let from = min.max(start);
            let mut to = max;
            if to - from > count {
                out.line(format!("The oldler {count} message will be provided"));
                to = from + count - 1;
            }
            plan.push((mq, from, to));
        }
    }
    if plan.is_empty() {
        let mut queues = c.subscribe_queues(topic).await.ns()?;
        queues.sort();
        if let Some(broker) = m.get("brokerName") {
            queues.retain(|q| q.broker_name == broker);
        }
        let mut left = count;
        for mq in queues {
            if left <= 0 {
                break;
            }
            let (mq, min, mut max) = range(mq).await?;
            if max - min > left {
                out.line(format!(
                    "The older {left} message of the {} queue will be provided",
                    mq.queue_id
                ));
                max = min + left - 1;
                left = 0;
            } else {
                left -= max - min;
            }
            plan.push((mq, min, max));
        }
    }
    for (mq, from, to) in plan {
        let mut offset = from;
        for _ in 0..MAX_PULLS_PER_QUEUE {
            if offset > to {
                break;
            }
            let r =
                match pull_now(&c, &mq, "*", offset, (to - offset + 1).clamp(1, 32) as i32).await {
                    Ok(r) => r,
                    Err(e) => {
                        out.warn(e.message());
                        break;
                    }
                };
            let progressed = r.next_begin_offset > offset;
            offset = r.next_begin_offset;
            match r.status {
                PullStatus::Found => {
                    out.line("Consume ok");
                    for msg in r.messages.iter().filter(|x| x.queue_offset <= to) {
                        out.line(msg_line(msg, true));
                        all.push(message_value(msg, true));
                    }
                }
                PullStatus::NoMatchedMsg => {
                    out.line(format!(
                        "{} no matched msg. status={}, offset={offset}",
                        mq_string(&mq),
                        status_text(r.status)
                    ));
                }
                PullStatus::NoNewMsg | PullStatus::OffsetIllegal => {
                    out.line(format!(
                        "{} print msg finished. status={}, offset={offset}",
                        mq_string(&mq),
                        status_text(r.status)
                    ));
                    break;
                }
            }
            if !progressed {
                break;
            }
        }
    }
    out.json(
        ObjectBuilder::new()
            .field("messages", Value::Array(all))
            .build(),
    );
    Ok(())
}

pub async fn check_msg_send_rt(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let topic = m.get("topic").unwrap_or_default();
    let amount: u64 = m.num("amount", 100)?;
    let size: usize = m.num("size", 128)?;
    if amount == 0 {
        return Err(AdminError::Usage("-a/--amount must be at least 1".into()));
    }
    ctx.require_namesrv()?;
    let p = producer(ctx, now_ms().to_string());
    let route = p.publish_route(topic).await.ns()?;
    let queues = route.publish_queues.clone();
    if queues.is_empty() {
        return Err(AdminError::failed(format!(
            "topic {topic} has no writable queue"
        )));
    }
    let msg = Message::new(topic, "a".repeat(size).into_bytes());
    out.line(format!(
        "{:<32}  {:<4}  {:<20}    {}",
        "#Broker Name", "#QID", "#Send Result", "#RT"
    ));
    let mut elapsed_ms = 0u128;
    let mut rows = Vec::new();
    for i in 0..amount {
        let mq = queues[(i as usize) % queues.len()].clone();
        let start = Instant::now();
        let ok = match p.send_with(&msg, &QueueSelector::Queue(mq.clone())).await {
            Ok(_) => true,
            Err(e) => {
                out.warn(describe(Role::Broker, &e));
                false
            }
        };
        let rt = start.elapsed().as_millis();
        if i != 0 {
            elapsed_ms += rt;
        }
        out.line(format!(
            "{:<32}  {:<4}  {:<20}    {}",
            mq.broker_name, mq.queue_id, ok, rt
        ));
        rows.push(
            ObjectBuilder::new()
                .field("brokerName", mq.broker_name.as_str())
                .field("queueId", mq.queue_id)
                .field("rtMs", rt as i64)
                .field("success", ok)
                .build(),
        );
    }
    p.shutdown().await;
    let avg = if amount > 1 {
        elapsed_ms as f64 / (amount - 1) as f64
    } else {
        0.0
    };
    out.line(format!("Avg RT: {avg:.2}"));
    out.json(
        ObjectBuilder::new()
            .field("avgRt", super::fmt::double_value(avg))
            .field("sends", Value::Array(rows))
            .build(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use ringmq_remoting::message::properties::MessageProperties;

    fn sample() -> MessageExt {
        let mut properties = MessageProperties::new();
        properties.insert("TAGS", "TagA").unwrap();
        properties
            .insert("UNIQ_KEY", "7F00000100002A9F0000000000000001")
            .unwrap();
        MessageExt {
            topic: "T1".into(),
            queue_id: 2,
            queue_offset: 5,
            commit_log_offset: 1024,
            flag: 0,
            sys_flag: 0,
            born_timestamp_ms: 1_700_000_000_000,
            born_host: "127.0.0.1:50000".parse().unwrap(),
            store_timestamp_ms: 1_700_000_000_001,
            store_host: "127.0.0.1:10911".parse().unwrap(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body_crc: 7,
            body: Bytes::from_static(b"hi"),
            properties,
            msg_id: "7F00000100002A9F0000000000000001".into(),
            offset_msg_id: "7F00000100002AA70000000000000400".into(),
            broker_name: "broker-a".into(),
        }
    }

    #[test]
    fn detail_block_matches_mqadmin_labels() {
        let text = detail_text(&sample(), true, "/tmp/rocketmq/msgbodys/x", None);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            format!("{:<20} 7F00000100002AA70000000000000400", "OffsetID:")
        );
        assert_eq!(lines[2], format!("{:<20} [TagA]", "Tags:"));
        assert_eq!(lines[3], format!("{:<20} [null]", "Keys:"));
        assert_eq!(lines[5], format!("{:<20} 5", "Queue Offset:"));
        assert!(lines[8].starts_with("Born Timestamp:      20"));
        assert_eq!(lines[11], format!("{:<20} 127.0.0.1:10911", "Store Host:"));
        assert_eq!(
            lines[13],
            format!(
                "{:<20} {{TAGS=TagA, UNIQ_KEY=7F00000100002A9F0000000000000001}}",
                "Properties:"
            )
        );
        assert_eq!(lines.len(), 15);
        assert!(!detail_text(&sample(), false, "p", Some("UTF-8")).contains("OffsetID:"));
        assert!(
            detail_text(&sample(), false, "p", Some("UTF-8")).contains("Message Body:        hi")
        );
    }

    #[test]
    fn message_line_like_java_to_string() {
        let line = msg_line(&sample(), true);
        assert!(line.starts_with("MSGID: 7F00000100002A9F0000000000000001 MessageExt [brokerName=broker-a, queueId=2, storeSize="), "{line}");
        assert!(line.contains("bornHost=/127.0.0.1:50000"));
        assert!(line.contains("msgId=7F00000100002AA70000000000000400"));
        assert!(line.contains("toString()=Message{topic='T1', flag=0, properties={TAGS=TagA, UNIQ_KEY=7F00000100002A9F0000000000000001}, body=[104, 105], transactionId='null'}]"));
        assert!(line.ends_with(" BODY: hi"));
        assert!(msg_line(&sample(), false).ends_with("BODY: NOT PRINT BODY"));
        assert_eq!(
            mq_string(&MessageQueue::new("T", "b", 1)),
            "MessageQueue [topic=T, brokerName=b, queueId=1]"
        );
    }

    #[test]
    fn track_lines() {
        let t = Track {
            group: "G".into(),
            track_type: "NOT_ONLINE",
            exception: Some("CODE:206 DESC:x".into()),
        };
        assert_eq!(
            t.java_string(),
            "MessageTrack [consumerGroup=G, trackType=NOT_ONLINE, exceptionDesc=CODE:206 DESC:x]"
        );
        let t = Track {
            group: "G".into(),
            track_type: "CONSUMED",
            exception: None,
        };
        assert!(t.java_string().ends_with("exceptionDesc=null]"));
    }
}
