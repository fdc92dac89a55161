//! Recalling a timer (delay) message before it is delivered (RocketMQ 5.3.2+): the recall
//! handle a send answers with, and RECALL_MESSAGE (code 370), which turns a handle into a
//! timer *delete* request for the message's slot.
//!
//! A handle is `base64url("v1 <topic> <brokerName> <timestamp> <uniqKey>")` with padding, as
//! upstream's `RecallMessageHandle.HandleV1` writes it; `timestamp` is the message's
//! `TIMER_OUT_MS` + 1, so the delete request lands in the same wheel slot. The delete is a
//! message of the original topic with `TIMER_DEL_UNIQKEY = <topic>+<uniqKey>` and that
//! delivery time, parked like any timer message; the wheel drops the original when it
//! reaches the slot ([`crate::timer`]). Upstream's switch `recallMessageEnable` is off by
//! default, and so is ringmq's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use base64::Engine;
use ringmq_remoting::codes::ResponseCode;
use ringmq_remoting::header::send::RecallMessageRequestHeader;
use ringmq_remoting::message::properties::{keys, MessageProperties};
use ringmq_remoting::RemotingCommand;
use ringmq_runtime::{Reply, RequestContext};
use ringmq_store::refusal::{RefusalLog, DEFAULT_REFUSAL_LOG_INTERVAL};
use ringmq_store::{PutMessageStatus, PutRequest, PutResult};

use crate::context::{error_response, header_error, BrokerContext};
use crate::timer_put::{self, BrokerTimerMessage, TimerPut};

const VERSION_1: &str = "v1";
/// The tag of a delete request (upstream's `_RECALL_TAG_`).
pub const RECALL_TAG: &str = "_RECALL_TAG_";
/// Longest handle accepted (a topic and a group name of 255 bytes each fit well within).
const MAX_HANDLE_BYTES: usize = 2048;

static REFUSED_LOG: RefusalLog = RefusalLog::new("recall", DEFAULT_REFUSAL_LOG_INTERVAL);

/// A decoded version-1 recall handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecallHandle {
    pub topic: String,
    pub broker_name: String,
    /// Milliseconds since the epoch, as text (upstream keeps it unparsed until checked).
    pub timestamp: String,
    pub message_id: String,
}

impl RecallHandle {
    pub fn encode(&self) -> String {
        let raw = [
            VERSION_1,
            &self.topic,
            &self.broker_name,
            &self.timestamp,
            &self.message_id,
        ]
        .join(" ");
        base64::engine::general_purpose::URL_SAFE.encode(raw.as_bytes())
    }

    pub fn decode(handle: &str) -> Result<RecallHandle, String> {
        let invalid = || "recall handle is invalid".to_string();
        if handle.is_empty() || handle.len() > MAX_HANDLE_BYTES {
            return Err(invalid());
        }
        let raw = base64::engine::general_purpose::URL_SAFE
            .decode(handle.as_bytes())
            .map_err(|_| invalid())?;
        let text = String::from_utf8(raw).map_err(|_| invalid())?;
        let items: Vec<&str> = text.split(' ').collect();
        if items.len() < 5 || items[0] != VERSION_1 {
            return Err(invalid());
        }
        Ok(RecallHandle {
            topic: items[1].to_string(),
            broker_name: items[2].to_string(),
            timestamp: items[3].to_string(),
            message_id: items[4].to_string(),
        })
    }

    /// The handle a send of a parked timer message answers with: `props` are the stored
    /// properties (with `TIMER_OUT_MS` and `REAL_TOPIC`). None for messages no one can
    /// recall: not parked, or bound for a retry topic.
    pub fn for_parked(
        props: &MessageProperties,
        broker_name: &str,
        uniq_key: &str,
    ) -> Option<String> {
        let out_ms = props.get(keys::TIMER_OUT_MS)?.parse::<i64>().ok()?;
        let topic = props.get(keys::REAL_TOPIC)?;
        if topic.starts_with(ringmq_remoting::pop::RETRY_TOPIC_PREFIX) {
            return None;
        }
        let handle = RecallHandle {
            topic: topic.to_string(),
            broker_name: broker_name.to_string(),
            // One past the slot start, as upstream: the delete's rounding lands on the slot.
            timestamp: out_ms.saturating_add(1).to_string(),
            message_id: uniq_key.to_string(),
        };
        Some(handle.encode())
    }
}

fn refuse(request: &RemotingCommand, code: ResponseCode, remark: String) -> Reply {
    if let Some(line) = REFUSED_LOG.note(code.name()) {
        let suppressed = line.suppressed();
        tracing::warn!(code = code.name(), suppressed, "recall refused: {remark}");
    }
    if request.is_oneway() {
        return Reply::Nothing;
    }
    error_response(request, code, remark).into()
}

/// RECALL_MESSAGE: checks the broker, the topic and the handle as upstream does, then puts
/// the delete request; the answer (msgId = the recalled message's id) follows the put.
pub fn recall_message(
    ctx: &Arc<BrokerContext>,
    request: RemotingCommand,
    rc: &RequestContext,
) -> Reply {
    let started = Instant::now();
    let header: RecallMessageRequestHeader = match request.decode_header() {
        Ok(h) => h,
        Err(e) => return header_error(&request, e),
    };
    let put = match checked_put(ctx, &header, rc.connection().peer_addr()) {
        Ok(p) => p,
        Err((code, remark)) => return refuse(&request, code, remark),
    };
    if request.is_oneway() {
        ctx.store.put(put.request, Box::new(|_| {}));
        return Reply::Nothing;
    }
    let responder = rc.responder();
    let ctx2 = ctx.clone();
    let response = request.response_to(ResponseCode::Success.code(), None);
    let request_code = request.code;
    let message_id = put.message_id;
    ctx.store.put(
        put.request,
        Box::new(move |result: PutResult| {
            let command = answer(response, &result, &message_id);
            ctx2.metrics.record_rpc(
                request_code,
                command.code,
                command.remark.as_deref(),
                started.elapsed(),
                false,
            );
            responder.respond(command);
        }),
    );
    Reply::Later
}

/// The answer once the delete request was put: stored (also when a flush or a slave timed
/// out, as upstream) is SUCCESS with the message id.
fn answer(mut response: RemotingCommand, result: &PutResult, message_id: &str) -> RemotingCommand {
    use PutMessageStatus as S;
    match result.status {
        S::PutOk | S::FlushDiskTimeout | S::FlushSlaveTimeout | S::SlaveNotAvailable => {
            response.ext_fields.insert_str("msgId", message_id);
        }
        status => {
            tracing::warn!(status = status.name(), "recall request not stored");
            response.code = ResponseCode::SystemError.code();
            response.remark = Some("recall failed, execute error".to_string());
        }
    }
    response
}

struct DeletePut {
    request: PutRequest,
    message_id: String,
}

fn checked_put(
    ctx: &BrokerContext,
    header: &RecallMessageRequestHeader,
    born_host: SocketAddr,
) -> Result<DeletePut, (ResponseCode, String)> {
    let unavailable = || {
        (
            ResponseCode::ServiceNotAvailable,
            "recall failed, broker service not available".to_string(),
        )
    };
    if !ctx.config.recall_message_enable {
        return Err((
            ResponseCode::NoPermission,
            "recall failed, operation is forbidden (recallMessageEnable=false)".to_string(),
        ));
    }
    if !ctx.is_master() {
        return Err((
            ResponseCode::SlaveNotAvailable,
            "recall failed, broker service not available".to_string(),
        ));
    }
    if !ctx.live.is_writeable() && !ctx.config.allow_recall_when_broker_not_writeable {
        return Err(unavailable());
    }
    if ctx.topics.select(&header.topic).is_none() {
        return Err((
            ResponseCode::TopicNotExist,
            format!("recall failed, the topic[{}] not exist", header.topic),
        ));
    }
    let illegal = |why: &str| (ResponseCode::IllegalOperation, why.to_string());
    let handle = RecallHandle::decode(&header.recall_handle).map_err(|e| illegal(&e))?;
    if handle.topic != header.topic {
        return Err(illegal("recall failed, topic not match"));
    }
    if handle.broker_name != ctx.config.broker_name {
        return Err(illegal("recall failed, broker service not available"));
    }
    let now_ms = crate::persist::now_ms();
    let timestamp = handle.timestamp.parse::<i64>().unwrap_or(-1);
    let time_left_ms = timestamp.saturating_sub(now_ms);
    let max_ms = i64::from(ctx.config.timer_max_delay_sec).saturating_mul(1000);
    if time_left_ms <= 0 || time_left_ms >= max_ms {
        return Err(illegal("recall failed, timestamp invalid"));
    }
    let request = delete_put(ctx, header, &handle, born_host)?;
    Ok(DeletePut {
        request,
        message_id: handle.message_id,
    })
}

/// The timer delete request for `handle`'s message, parked in its slot.
fn delete_put(
    ctx: &BrokerContext,
    header: &RecallMessageRequestHeader,
    handle: &RecallHandle,
    born_host: SocketAddr,
) -> Result<PutRequest, (ResponseCode, String)> {
    let bad = |e: ringmq_remoting::message::properties::PropertyError| {
        (
            ResponseCode::IllegalOperation,
            format!("recall failed: {e}"),
        )
    };
    let mut props = MessageProperties::new();
    props.insert(keys::TAGS, RECALL_TAG).map_err(bad)?;
    let delete_key = format!("{}+{}", handle.topic, handle.message_id);
    props
        .insert(keys::TIMER_DEL_UNIQKEY, &delete_key)
        .map_err(bad)?;
    props
        .insert(keys::UNIQ_KEY, &handle.message_id)
        .map_err(bad)?;
    props
        .insert(keys::TIMER_DELIVER_MS, &handle.timestamp)
        .map_err(bad)?;
    if let Some(group) = header.producer_group.as_deref().filter(|g| !g.is_empty()) {
        props.insert(keys::PGROUP, group).map_err(bad)?;
    }
    let message = BrokerTimerMessage {
        topic: handle.topic.clone(),
        queue_id: 0,
        props,
        body: b"0",
        born_host,
    };
    match timer_put::broker_timer_put(ctx, message)? {
        (TimerPut::Parked { .. }, put) => Ok(put),
        // A time already passed: a delete request stored now would delete nothing.
        _ => Err((
            ResponseCode::IllegalOperation,
            "recall failed, timestamp invalid".to_string(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_round_trips_and_matches_upstream_bytes() {
        let h = RecallHandle {
            topic: "TopicA".into(),
            broker_name: "broker-a".into(),
            timestamp: "1700000000001".into(),
            message_id: "7F00000100002A9F0000000000000001".into(),
        };
        let encoded = h.encode();
        // base64url with padding of the space-joined fields, as Java's
        // Base64.getUrlEncoder() writes it.
        let raw = "v1 TopicA broker-a 1700000000001 7F00000100002A9F0000000000000001";
        assert_eq!(
            base64::engine::general_purpose::URL_SAFE
                .decode(&encoded)
                .unwrap(),
            raw.as_bytes()
        );
        assert_eq!(RecallHandle::decode(&encoded).unwrap(), h);
    }

    #[test]
    fn bad_handles_are_refused() {
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE.encode(s);
        for bad in [
            String::new(),
            "!!!not base64".to_string(),
            b64("v2 T b 1 id"),
            b64("v1 T b 1"),
            "A".repeat(MAX_HANDLE_BYTES + 4),
        ] {
            assert!(RecallHandle::decode(&bad).is_err(), "{bad:?}");
        }
    }

    fn recall_request(topic: &str, handle: &str) -> RemotingCommand {
        let mut r = RemotingCommand::request(370, 9);
        r.ext_fields.insert("topic", topic);
        r.ext_fields.insert("recallHandle", handle);
        r.ext_fields.insert("producerGroup", "PG");
        r
    }

    fn handle(topic: &str, broker: &str, at_ms: i64) -> String {
        RecallHandle {
            topic: topic.into(),
            broker_name: broker.into(),
            timestamp: at_ms.to_string(),
            message_id: "U1".into(),
        }
        .encode()
    }

    /// RECALL_MESSAGE answers each refusal with upstream's code, and otherwise parks a
    /// delete request (TIMER_DEL_UNIQKEY = topic+id, the handle's time) in the timer topic.
    #[test]
    fn recall_message_refuses_as_upstream_and_parks_a_delete_request() {
        use crate::config::BrokerConfig;
        use crate::metadata::topic_config::TIMER_TOPIC;
        use crate::test_support::*;
        use ringmq_remoting::message::record::{decode_record, Decoded};
        use ringmq_store::{AcceptAll, StoreApi};

        let (off, _) = test_context(BrokerConfig::default());
        let at = crate::persist::now_ms() + 60_000;
        let name = off.config.broker_name.clone();
        let r = run(&off, recall_request("TopicA", &handle("TopicA", &name, at)));
        assert_eq!(r.command.code, ResponseCode::NoPermission.code());

        let (ctx, store) = test_context(BrokerConfig {
            recall_message_enable: true,
            ..BrokerConfig::default()
        });
        let code = |topic: &str, h: &str| run(&ctx, recall_request(topic, h)).command.code;
        assert_eq!(
            code("NoSuchTopic", &handle("NoSuchTopic", &name, at)),
            ResponseCode::TopicNotExist.code()
        );
        ctx.topics
            .update(ringmq_remoting::body::topic::TopicConfig::new("TopicA").with_queues(1, 1));
        let illegal = ResponseCode::IllegalOperation.code();
        assert_eq!(code("TopicA", "garbage"), illegal);
        assert_eq!(code("TopicA", &handle("TopicB", &name, at)), illegal);
        assert_eq!(
            code("TopicA", &handle("TopicA", "other-broker", at)),
            illegal
        );
        assert_eq!(code("TopicA", &handle("TopicA", &name, 1_000)), illegal);

        let r = run(&ctx, recall_request("TopicA", &handle("TopicA", &name, at)));
        assert_eq!(r.command.code, 0, "{:?}", r.command.remark);
        assert_eq!(r.command.ext_fields.get("msgId"), Some("U1"));
        let got = store.get_message(TIMER_TOPIC, 0, 0, 1, 1 << 20, &AcceptAll);
        let Decoded::Message(rec) = decode_record(&got.messages[0], false).unwrap() else {
            panic!("a delete request in the timer topic")
        };
        let props = MessageProperties::parse_bytes(rec.properties);
        assert_eq!(props.get(keys::TIMER_DEL_UNIQKEY), Some("TopicA+U1"));
        assert_eq!(props.get(keys::REAL_TOPIC), Some("TopicA"));
        assert_eq!(props.get(keys::TAGS), Some(RECALL_TAG));
        let out_ms = crate::timer_put::round_to_slot(at, i64::from(ctx.config.timer_precision_ms));
        assert_eq!(
            props.get(keys::TIMER_OUT_MS),
            Some(out_ms.to_string().as_str())
        );
    }

    #[test]
    fn parked_messages_get_a_handle_one_past_their_slot() {
        let mut p = MessageProperties::new();
        p.insert(keys::TIMER_OUT_MS, "5000").unwrap();
        p.insert(keys::REAL_TOPIC, "TopicA").unwrap();
        let h = RecallHandle::for_parked(&p, "broker-a", "U1").unwrap();
        let d = RecallHandle::decode(&h).unwrap();
        assert_eq!((d.topic.as_str(), d.timestamp.as_str()), ("TopicA", "5001"));
        assert_eq!(d.message_id, "U1");

        let mut retry = MessageProperties::new();
        retry.insert(keys::TIMER_OUT_MS, "5000").unwrap();
        retry.insert(keys::REAL_TOPIC, "%RETRY%G").unwrap();
        assert!(RecallHandle::for_parked(&retry, "broker-a", "U1").is_none());
        assert!(RecallHandle::for_parked(&MessageProperties::new(), "b", "U").is_none());
    }
}
