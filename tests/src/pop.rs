//! POP consumption driven with the Remoting codes directly (no shared client reaches POP
//! without gRPC): pop, ack, change invisible time, as a consumer would.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ringmq_client::{block_on, RemotingClient};
use ringmq_remoting::message::properties::{keys, MessageProperties};
use ringmq_remoting::message::record::{decode_record, Decoded};
use ringmq_remoting::pop::ExtraInfo;
use ringmq_remoting::{RemotingCommand, RequestCode, ResponseCode};

/// One popped message as a consumer sees it.
#[derive(Debug, Clone)]
pub struct Popped {
    pub body: String,
    pub queue_offset: i64,
    pub reconsume_times: i32,
    /// The receipt handle to ack with.
    pub handle: String,
}

/// The invisible time the tests pop with.
pub const INVISIBLE_MS: i64 = 3_000;

/// A POP_MESSAGE request for any queue of `topic`.
pub fn pop_request(group: &str, topic: &str, invisible_ms: i64, poll_ms: i64) -> RemotingCommand {
    let options = PopOptions {
        invisible_ms,
        poll_ms,
        ..PopOptions::default()
    };
    pop_request_with(group, topic, &options)
}

/// How a test pops.
#[derive(Debug, Clone, Default)]
pub struct PopOptions {
    pub invisible_ms: i64,
    pub poll_ms: i64,
    /// Orderly POP.
    pub order: bool,
    pub attempt_id: Option<String>,
    /// `(expType, exp)`; `TAG *` when absent.
    pub expression: Option<(String, String)>,
}

/// A POP_MESSAGE request for any queue of `topic`, as `o` says.
pub fn pop_request_with(group: &str, topic: &str, o: &PopOptions) -> RemotingCommand {
    let (invisible_ms, poll_ms) = (o.invisible_ms, o.poll_ms);
    let mut r = RemotingCommand::request(RequestCode::PopMessage.code(), 0);
    let now = ringmq_broker::persist::now_ms();
    for (k, v) in [
        ("consumerGroup", group.to_string()),
        ("topic", topic.to_string()),
        ("queueId", "-1".into()),
        ("maxMsgNums", "32".into()),
        ("invisibleTime", invisible_ms.to_string()),
        ("pollTime", poll_ms.to_string()),
        ("bornTime", now.to_string()),
        ("initMode", "0".into()),
        ("order", o.order.to_string()),
    ] {
        r.ext_fields.insert(k, v);
    }
    let (exp_type, exp) = o
        .expression
        .clone()
        .unwrap_or_else(|| ("TAG".into(), "*".into()));
    r.ext_fields.insert("expType", exp_type);
    r.ext_fields.insert("exp", exp);
    if let Some(a) = &o.attempt_id {
        r.ext_fields.insert("attemptId", a.clone());
    }
    r
}

/// Where and as whom a test pops.
#[derive(Debug, Clone)]
pub struct PopTarget {
    pub broker_addr: String,
    /// The broker's name, which the receipt handles of normal messages carry.
    pub broker_name: String,
    pub group: String,
    pub topic: String,
}

/// Pops once without waiting: the messages, or none when the broker answered
/// POLLING_TIMEOUT.
pub fn pop(client: &RemotingClient, t: &PopTarget, invisible_ms: i64) -> Vec<Popped> {
    pop_waiting(client, t, invisible_ms, 0)
}

/// Pops once, letting the broker wait up to `poll_ms` for a message.
pub fn pop_waiting(
    client: &RemotingClient,
    t: &PopTarget,
    invisible_ms: i64,
    poll_ms: i64,
) -> Vec<Popped> {
    let options = PopOptions {
        invisible_ms,
        poll_ms,
        ..PopOptions::default()
    };
    pop_with(client, t, &options).0
}

/// Pops once as `o` says: the messages (none on POLLING_TIMEOUT) and the answer.
pub fn pop_with(
    client: &RemotingClient,
    t: &PopTarget,
    o: &PopOptions,
) -> (Vec<Popped>, RemotingCommand) {
    let (broker, group, topic) = (&t.broker_addr, &t.group, &t.topic);
    let broker_name = &t.broker_name;
    let response = block_on({
        let (client, broker) = (client.clone(), broker.to_string());
        let request = pop_request_with(group, topic, o);
        let timeout = Duration::from_millis(5_000 + o.poll_ms.max(0) as u64);
        async move { client.invoke(&broker, request, timeout).await }
    })
    .expect("pop answered");
    if response.code == ResponseCode::PollingTimeout.code() {
        return (Vec::new(), response);
    }
    assert_eq!(response.code, 0, "pop: {:?}", response.remark);
    let field = |k: &str| {
        response
            .ext_fields
            .get(k)
            .map(str::to_string)
            .unwrap_or_default()
    };
    let pop_time = field("popTime");
    let revive_qid = field("reviveQid");
    // startOffsetInfo: "retry queueId startOffset;..."
    let mut starts = BTreeMap::new();
    for item in field("startOffsetInfo")
        .split(';')
        .filter(|s| !s.is_empty())
    {
        let f: Vec<&str> = item.split(' ').collect();
        starts.insert(
            (f[0].to_string(), f[1].parse::<i32>().unwrap()),
            f[2].to_string(),
        );
    }
    let mut out = Vec::new();
    let mut body = &response.body[..];
    while !body.is_empty() {
        let Decoded::Message(rec) = decode_record(body, true).expect("a record") else {
            panic!("a blank record in a pop answer");
        };
        let props = MessageProperties::parse_bytes(rec.properties);
        let handle = match props.get(keys::POP_CK) {
            Some(h) => h.to_string(),
            None => {
                let start = &starts[&("0".to_string(), rec.queue_id)];
                format!(
                    "{start} {pop_time} {} {revive_qid} 0 {} {} {}",
                    field("invisibleTime"),
                    broker_name,
                    rec.queue_id,
                    rec.queue_offset
                )
            }
        };
        assert_eq!(
            rec.topic().unwrap(),
            topic,
            "retry copies come back under the topic"
        );
        out.push(Popped {
            body: String::from_utf8_lossy(rec.body).into_owned(),
            queue_offset: rec.queue_offset,
            reconsume_times: rec.reconsume_times,
            handle,
        });
        body = &body[rec.total_size..];
    }
    (out, response)
}

/// ACK_MESSAGE, or CHANGE_MESSAGE_INVISIBLETIME with `invisible_ms`, for `m`'s handle.
pub fn handle_call(
    client: &RemotingClient,
    t: &PopTarget,
    code: RequestCode,
    m: &Popped,
    invisible_ms: Option<i64>,
) -> RemotingCommand {
    let (broker, group, topic) = (&t.broker_addr, &t.group, &t.topic);
    let queue_id = ExtraInfo::parse(&m.handle).map_or(0, |i| i.queue_id);
    let mut r = RemotingCommand::request(code.code(), 0);
    r.ext_fields.insert("consumerGroup", group.to_string());
    r.ext_fields.insert("topic", topic.to_string());
    r.ext_fields.insert("queueId", queue_id.to_string());
    r.ext_fields.insert("extraInfo", m.handle.clone());
    r.ext_fields.insert("offset", m.queue_offset.to_string());
    if let Some(ms) = invisible_ms {
        r.ext_fields.insert("invisibleTime", ms.to_string());
    }
    block_on({
        let (client, broker) = (client.clone(), broker.to_string());
        async move { client.invoke(&broker, r, Duration::from_secs(5)).await }
    })
    .expect("answered")
}

/// Pops until `count` messages arrived or `within` passed.
pub fn pop_until(
    client: &RemotingClient,
    t: &PopTarget,
    count: usize,
    within: Duration,
) -> Vec<Popped> {
    pop_until_invisible(client, t, count, within, INVISIBLE_MS)
}

/// [`pop_until`], popping with `invisible_ms`.
pub fn pop_until_invisible(
    client: &RemotingClient,
    t: &PopTarget,
    count: usize,
    within: Duration,
    invisible_ms: i64,
) -> Vec<Popped> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    while got.len() < count && Instant::now() < deadline {
        let batch = pop(client, t, invisible_ms);
        if batch.is_empty() {
            std::thread::sleep(Duration::from_millis(200));
        }
        got.extend(batch);
    }
    got
}
