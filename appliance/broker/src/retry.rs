//! Retry and dead-letter routing (features.md §a): CONSUMER_SEND_MSG_BACK (36), which puts a
//! copy of a message a consumer failed on into `%RETRY%group` through the delay levels (or into
//! `%DLQ%group` once it has been retried too often), and [`route_retry_send`], the rule the send
//! path applies when a client sends to `%RETRY%group` itself (the send-back fallback).
//!
//! The send-back answer is given only after the store completed the put.

use std::sync::Arc;

use bytes::BytesMut;
use ringmq_remoting::body::subscription::SubscriptionGroupConfig;
use ringmq_remoting::codes::ResponseCode;
use ringmq_remoting::header::ConsumerSendMsgBackRequestHeader;
use ringmq_remoting::message::id;
use ringmq_remoting::message::properties::{keys, MessageProperties};
use ringmq_remoting::message::record::{self, Decoded, RecordFields, StoredRecord};
use ringmq_remoting::RemotingCommand;
use ringmq_runtime::{Reply, RequestContext};
use ringmq_store::{PutMessageStatus, PutRequest, PutResult};

use crate::context::{error_response, header_error, BrokerContext};
use crate::metadata::topic_config::{self as topics, PERM_READ, PERM_WRITE};
use crate::processor::send::{random_below, subscription_group_not_exist_remark};
use crate::schedule;

/// Queues of a `%DLQ%group` topic (upstream `DLQ_NUMS_PER_GROUP`).
pub const DLQ_QUEUE_NUMS: u32 = 1;
/// Delay level of the first retry is `BASE_RETRY_DELAY_LEVEL + reconsumeTimes` (10 s first).
pub const BASE_RETRY_DELAY_LEVEL: i32 = 3;

/// Where a message sent back by a consumer goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendBackRoute {
    /// `%RETRY%group`, queue, and the delay level it waits at first.
    Retry {
        topic: String,
        queue_id: i32,
        delay_level: i32,
    },
    /// `%DLQ%group` queue 0, no delay.
    DeadLetter { topic: String, queue_id: i32 },
}

/// The §a.2 rule 8: DLQ when `reconsume_times >= max_reconsume_times` or the client asked
/// for it (`delay_level < 0`); otherwise retry at `delay_level`, or `3 + reconsume_times` when
/// the client left the choice to the broker (0).
pub fn route_send_back(
    group: &str,
    reconsume_times: i32,
    max_reconsume_times: i32,
    delay_level: i32,
    retry_queue_id: i32,
) -> SendBackRoute {
    if reconsume_times >= max_reconsume_times || delay_level < 0 {
        return SendBackRoute::DeadLetter {
            topic: topics::dlq_topic(group),
            queue_id: 0,
        };
    }
    let level = if delay_level == 0 {
        BASE_RETRY_DELAY_LEVEL.saturating_add(reconsume_times)
    } else {
        delay_level
    };
    SendBackRoute::Retry {
        topic: topics::retry_topic(group),
        queue_id: retry_queue_id,
        delay_level: level,
    }
}

/// What the send path does with a message sent straight to `%RETRY%group` (§a.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetrySendRoute {
    /// Not a retry topic, or still within the group's budget: store as sent.
    AsIs,
    /// Rewrite to this DLQ topic, queue 0, with `DELAY=-1`-style "no delay".
    DeadLetter { topic: String },
}

/// The send path's retry rule: for `%RETRY%group`, a missing group is
/// SUBSCRIPTION_GROUP_NOT_EXIST; `reconsume_times > max` (header value, else the group's
/// `retryMaxTimes`) or a live orderly lock of the group sends it to `%DLQ%group` (created on
/// demand with 1 queue; a non-writeable DLQ is NO_PERMISSION).
pub fn route_retry_send(
    ctx: &BrokerContext,
    topic: &str,
    reconsume_times: i32,
    max_reconsume_times: Option<i32>,
) -> Result<RetrySendRoute, (ResponseCode, String)> {
    let Some(group) = topic.strip_prefix(topics::RETRY_GROUP_TOPIC_PREFIX) else {
        return Ok(RetrySendRoute::AsIs);
    };
    let Some(group_config) = ctx.groups.find(group) else {
        return Err((
            ResponseCode::SubscriptionGroupNotExist,
            subscription_group_not_exist_remark(group),
        ));
    };
    let max = max_reconsume_times.unwrap_or(group_config.retry_max_times);
    if reconsume_times <= max && !ctx.locks.has_unexpired_lock(group) {
        return Ok(RetrySendRoute::AsIs);
    }
    let dlq = topics::dlq_topic(group);
    let tc = ctx
        .topics
        .create_topic_of_retry(&dlq, DLQ_QUEUE_NUMS, PERM_READ | PERM_WRITE);
    if !tc.is_writeable() {
        return Err((
            ResponseCode::NoPermission,
            format!("the topic[{dlq}] sending message is forbidden"),
        ));
    }
    tracing::info!(group, reconsume_times, max, "retry send goes to {dlq}");
    Ok(RetrySendRoute::DeadLetter { topic: dlq })
}

fn refuse(request: &RemotingCommand, code: ResponseCode, remark: String) -> Reply {
    tracing::warn!(code = code.name(), "send-back refused: {remark}");
    if request.is_oneway() {
        return Reply::Nothing;
    }
    error_response(request, code, remark).into()
}

/// Why a send-back is refused: the response code and its remark.
pub(crate) type Refusal = (ResponseCode, String);

/// CONSUMER_SEND_MSG_BACK (36).
pub fn consumer_send_msg_back(
    ctx: &Arc<BrokerContext>,
    request: RemotingCommand,
    rc: &RequestContext,
) -> Reply {
    // A slave refuses send-backs before anything else, as it refuses sends.
    if !ctx.is_master() {
        return crate::processor::send::reject_request(&request);
    }
    let header: ConsumerSendMsgBackRequestHeader = match request.decode_header() {
        Ok(h) => h,
        Err(e) => return header_error(&request, e),
    };
    match send_back_put(ctx, &header) {
        Ok(Some(put)) => put_and_answer(ctx, request, rc, put, header.group),
        // The group opted out of retries: the message is dropped, as upstream does.
        Ok(None) => request
            .response_to(ResponseCode::Success.code(), None)
            .into(),
        Err((code, remark)) => refuse(&request, code, remark),
    }
}

/// The put that stores the sent-back copy, or `None` when the group takes no retries.
fn send_back_put(
    ctx: &BrokerContext,
    header: &ConsumerSendMsgBackRequestHeader,
) -> Result<Option<PutRequest>, Refusal> {
    let group = header.group.as_str();
    let group_config = send_back_group(ctx, group)?;
    if group_config.retry_queue_nums == 0 {
        return Ok(None);
    }
    let retry_queue_id = retry_queue_of(ctx, group, group_config.retry_queue_nums)?;
    let original = ctx
        .store
        .look_message_by_offset(header.offset)
        .ok_or_else(|| {
            (
                ResponseCode::SystemError,
                format!("look message by offset failed, {}", header.offset),
            )
        })?;
    let (rec, original_topic) = decode_original(&original, header.offset)?;
    let mut props = MessageProperties::parse_bytes(rec.properties);
    if props.get(keys::RETRY_TOPIC).is_none() {
        let _ = props.insert(keys::RETRY_TOPIC, &original_topic);
    }
    let _ = props.insert(keys::WAIT, "false");
    let max_reconsume = header
        .max_reconsume_times
        .unwrap_or(group_config.retry_max_times);
    let route = route_send_back(
        group,
        rec.reconsume_times,
        max_reconsume,
        header.delay_level,
        retry_queue_id,
    );
    let (topic, queue_id) = apply_route(ctx, &route, &mut props)?;
    if matches!(route, SendBackRoute::DeadLetter { .. }) {
        tracing::info!(
            group,
            reconsume = rec.reconsume_times,
            max_reconsume,
            delay_level = header.delay_level,
            "send-back goes to {topic}"
        );
    }
    if props.get(keys::ORIGIN_MESSAGE_ID).is_none_or(str::is_empty) {
        let origin = id::encode_offset_msg_id(&rec.store_host, rec.physical_offset);
        let _ = props.insert(keys::ORIGIN_MESSAGE_ID, &origin);
    }
    let (topic, queue_id) = park_retry(ctx, &route, &mut props, topic, queue_id);
    encode_copy(ctx, &rec, topic, queue_id, &props).map(Some)
}

/// The group's config, once this broker may take a send-back for it: a master, the group
/// known, the broker writeable.
fn send_back_group(
    ctx: &BrokerContext,
    group: &str,
) -> Result<Arc<SubscriptionGroupConfig>, Refusal> {
    let config = &ctx.config;
    if !ctx.is_master() {
        return Err((
            ResponseCode::SystemError,
            format!("no master available along with {}", config.broker_ip1),
        ));
    }
    let Some(group_config) = ctx.groups.find(group) else {
        return Err((
            ResponseCode::SubscriptionGroupNotExist,
            subscription_group_not_exist_remark(group),
        ));
    };
    if !ctx.live.is_writeable() {
        return Err((
            ResponseCode::NoPermission,
            format!(
                "the broker[{}] sending message is forbidden",
                config.broker_ip1
            ),
        ));
    }
    Ok(group_config)
}

/// Creates `%RETRY%group` when missing and picks one of its `retry_queue_nums` queues.
fn retry_queue_of(ctx: &BrokerContext, group: &str, retry_queue_nums: u32) -> Result<i32, Refusal> {
    let retry_topic = topics::retry_topic(group);
    let retry_tc =
        ctx.topics
            .create_topic_of_retry(&retry_topic, retry_queue_nums, PERM_READ | PERM_WRITE);
    if !retry_tc.is_writeable() {
        return Err((
            ResponseCode::NoPermission,
            format!("the topic[{retry_topic}] sending message is forbidden"),
        ));
    }
    Ok(random_below(retry_queue_nums) as i32)
}

/// The message record at commit-log `offset` and its topic.
fn decode_original(original: &[u8], offset: i64) -> Result<(StoredRecord<'_>, String), Refusal> {
    let rec = match record::decode_record(original, false) {
        Ok(Decoded::Message(r)) => r,
        Ok(Decoded::Blank { .. }) | Err(_) => {
            return Err((
                ResponseCode::SystemError,
                format!(
                    "look message by offset failed, {offset}: no message record at that commit-log offset"
                ),
            ))
        }
    };
    let topic = rec.topic().map_err(|e| {
        (
            ResponseCode::SystemError,
            format!("stored message at {offset} is unreadable: {e}"),
        )
    })?;
    let topic = topic.to_string();
    Ok((rec, topic))
}

/// The topic and queue `route` names, with the DELAY property it implies; a dead-letter topic
/// is created on demand and must be writeable.
fn apply_route(
    ctx: &BrokerContext,
    route: &SendBackRoute,
    props: &mut MessageProperties,
) -> Result<(String, i32), Refusal> {
    match route {
        SendBackRoute::DeadLetter { topic, queue_id } => {
            let tc =
                ctx.topics
                    .create_topic_of_retry(topic, DLQ_QUEUE_NUMS, PERM_READ | PERM_WRITE);
            if !tc.is_writeable() {
                return Err((
                    ResponseCode::NoPermission,
                    format!("the topic[{topic}] sending message is forbidden"),
                ));
            }
            let _ = props.insert(keys::DELAY, "0");
            Ok((topic.clone(), *queue_id))
        }
        SendBackRoute::Retry {
            topic,
            queue_id,
            delay_level,
        } => {
            let _ = props.insert(keys::DELAY, &delay_level.to_string());
            Ok((topic.clone(), *queue_id))
        }
    }
}

/// The put hook: a retry waits in SCHEDULE_TOPIC_XXXX and comes back to %RETRY%group; a
/// dead letter is stored where it is.
fn park_retry(
    ctx: &BrokerContext,
    route: &SendBackRoute,
    props: &mut MessageProperties,
    topic: String,
    queue_id: i32,
) -> (String, i32) {
    let SendBackRoute::Retry { delay_level, .. } = route else {
        return (topic, queue_id);
    };
    match schedule::park_delayed(
        props,
        &topic,
        queue_id,
        *delay_level,
        ctx.delay_levels_ms.len(),
    ) {
        Some(parked) => (parked.topic, parked.queue_id),
        None => (topic, queue_id),
    }
}

/// The put of the sent-back copy: the original's body and flags, one more reconsume, this
/// broker as STOREHOST.
pub(crate) fn encode_copy(
    ctx: &BrokerContext,
    rec: &StoredRecord<'_>,
    topic: String,
    queue_id: i32,
    props: &MessageProperties,
) -> Result<PutRequest, Refusal> {
    let mut prop_bytes = Vec::with_capacity(rec.properties.len() + 96);
    props.encode_into(&mut prop_bytes);
    let fields = RecordFields {
        queue_id,
        flag: rec.flag,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: rec.sys_flag,
        born_timestamp_ms: rec.born_timestamp_ms,
        born_host: rec.born_host,
        store_timestamp_ms: 0,
        store_host: ctx.store_host,
        reconsume_times: rec.reconsume_times.saturating_add(1),
        prepared_transaction_offset: 0,
        body: rec.body,
        topic: &topic,
        properties: &prop_bytes,
    };
    let mut records = BytesMut::with_capacity(fields.encoded_size());
    record::encode_record(&fields, &mut records).map_err(|e| {
        (
            ResponseCode::MessageIllegal,
            format!("the sent-back message cannot be stored: {e}"),
        )
    })?;
    Ok(PutRequest {
        topic,
        queue_id,
        sys_flag: rec.sys_flag,
        records,
        record_count: 1,
        wait_store_msg_ok: false,
    })
}

/// Hands `put` to the store; the answer (SYSTEM_ERROR with the put status when it was not
/// stored) leaves once the store completed it.
fn put_and_answer(
    ctx: &BrokerContext,
    request: RemotingCommand,
    rc: &RequestContext,
    put: PutRequest,
    group: String,
) -> Reply {
    let oneway = request.is_oneway();
    let response = request.response_to(ResponseCode::Success.code(), None);
    let done = if oneway { None } else { Some(rc.responder()) };
    ctx.store.put(
        put,
        Box::new(move |result: PutResult| {
            let mut response = response;
            if result.status != PutMessageStatus::PutOk {
                tracing::warn!(group, status = result.status.name(), "send-back not stored");
                response.code = ResponseCode::SystemError.code();
                response.remark = Some(result.status.name().to_string());
            }
            if let Some(responder) = done {
                responder.respond(response);
            }
        }),
    );
    if oneway {
        Reply::Nothing
    } else {
        Reply::Later
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;
    use crate::test_support::{finish, send_simple, test_context, FakeChannel};
    use ringmq_remoting::body::subscription::SubscriptionGroupConfig;
    use ringmq_remoting::header::CommandHeader;
    use ringmq_remoting::message::properties;
    use ringmq_store::{AcceptAll, MemStore, StoreApi};

    /// Calls the processor directly (the dispatcher wiring is the broker-core's).
    fn send_back(
        ctx: &Arc<BrokerContext>,
        header: &ConsumerSendMsgBackRequestHeader,
    ) -> RemotingCommand {
        let req = RemotingCommand::request(36, 9).with_header(header);
        let ch = FakeChannel::new(1);
        let rc = ch.request_context(&req);
        finish(consumer_send_msg_back(ctx, req, &rc), &ch).command
    }

    fn header(group: &str, offset: i64, delay_level: i32) -> ConsumerSendMsgBackRequestHeader {
        let mut fields = ringmq_remoting::ExtFields::new();
        fields.insert("offset", offset.to_string());
        fields.insert("group", group);
        fields.insert("delayLevel", delay_level.to_string());
        ConsumerSendMsgBackRequestHeader::decode(&fields).unwrap()
    }

    fn phys_of(ctx: &Arc<BrokerContext>, topic: &str, tag: &str) -> i64 {
        let resp = send_simple(ctx, topic, 0, tag, b"payload");
        id::decode_offset_msg_id(resp.command.ext_fields.get("msgId").unwrap())
            .unwrap()
            .commit_log_offset
    }

    fn only_record(store: &MemStore, topic: &str, queue_id: i32) -> Vec<u8> {
        let got = store.get_message(topic, queue_id, 0, 10, 1 << 20, &AcceptAll);
        assert_eq!(got.messages.len(), 1, "{topic}:{queue_id}");
        got.messages[0].to_vec()
    }

    #[test]
    fn routing_rule() {
        assert_eq!(
            route_send_back("G", 0, 16, 0, 0),
            SendBackRoute::Retry {
                topic: "%RETRY%G".into(),
                queue_id: 0,
                delay_level: 3
            }
        );
        assert_eq!(
            route_send_back("G", 15, 16, 0, 0),
            SendBackRoute::Retry {
                topic: "%RETRY%G".into(),
                queue_id: 0,
                delay_level: 18
            }
        );
        assert_eq!(
            route_send_back("G", 16, 16, 0, 0),
            SendBackRoute::DeadLetter {
                topic: "%DLQ%G".into(),
                queue_id: 0
            }
        );
        assert_eq!(
            route_send_back("G", 0, 16, -1, 0),
            SendBackRoute::DeadLetter {
                topic: "%DLQ%G".into(),
                queue_id: 0
            }
        );
        assert!(matches!(
            route_send_back("G", 2, 16, 7, 0),
            SendBackRoute::Retry { delay_level: 7, .. }
        ));
    }

    #[test]
    fn first_failure_waits_at_level_3_in_schedule_topic() {
        let (ctx, store) = test_context(BrokerConfig::default());
        let phys = phys_of(&ctx, "TopicA", "TagA");
        let resp = send_back(&ctx, &header("G1", phys, 0));
        assert_eq!(resp.code, 0, "{:?}", resp.remark);
        assert!(
            ctx.topics.select("%RETRY%G1").is_some(),
            "retry topic created on demand"
        );
        let rec = only_record(&store, "SCHEDULE_TOPIC_XXXX", 2);
        let Ok(Decoded::Message(r)) = record::decode_record(&rec, true) else {
            panic!()
        };
        assert_eq!(r.reconsume_times, 1);
        assert_eq!(r.body, b"payload");
        let p = std::str::from_utf8(r.properties).unwrap();
        assert_eq!(properties::find(p, "DELAY"), Some("3"));
        assert_eq!(properties::find(p, "REAL_TOPIC"), Some("%RETRY%G1"));
        assert_eq!(properties::find(p, "REAL_QID"), Some("0"));
        assert_eq!(properties::find(p, "RETRY_TOPIC"), Some("TopicA"));
        assert_eq!(properties::find(p, "TAGS"), Some("TagA"));
        assert_eq!(properties::find(p, "WAIT"), Some("false"));
        let origin = properties::find(p, "ORIGIN_MESSAGE_ID").unwrap();
        assert_eq!(
            id::decode_offset_msg_id(origin).unwrap().commit_log_offset,
            phys
        );
    }

    #[test]
    fn over_max_goes_to_dlq_and_keeps_origin() {
        let (ctx, store) = test_context(BrokerConfig::default());
        let phys = phys_of(&ctx, "TopicB", "");
        // maxReconsumeTimes 0 in the header: the very first failure is final.
        let mut h = header("G2", phys, 0);
        h.max_reconsume_times = Some(0);
        assert_eq!(send_back(&ctx, &h).code, 0);
        let rec = only_record(&store, "%DLQ%G2", 0);
        let Ok(Decoded::Message(r)) = record::decode_record(&rec, true) else {
            panic!()
        };
        let p = std::str::from_utf8(r.properties).unwrap();
        assert_eq!(properties::find(p, "DELAY"), Some("0"));
        assert_eq!(properties::find(p, "RETRY_TOPIC"), Some("TopicB"));
        assert_eq!(ctx.topics.select("%DLQ%G2").unwrap().write_queue_nums, 1);
        // delayLevel -1 (POP clients) goes straight to the DLQ too.
        let phys2 = phys_of(&ctx, "TopicB", "");
        assert_eq!(send_back(&ctx, &header("G2", phys2, -1)).code, 0);
        assert_eq!(store.max_offset_in_queue("%DLQ%G2", 0), 2);
        // The group's retryMaxTimes applies without a header value.
        let mut sg = SubscriptionGroupConfig::new("G3");
        sg.retry_max_times = 0;
        ctx.groups.update(sg);
        let phys3 = phys_of(&ctx, "TopicB", "");
        assert_eq!(send_back(&ctx, &header("G3", phys3, 0)).code, 0);
        assert_eq!(store.max_offset_in_queue("%DLQ%G3", 0), 1);
    }

    #[test]
    fn existing_origin_and_retry_topic_are_kept_across_hops() {
        let (ctx, store) = test_context(BrokerConfig::default());
        let phys = phys_of(&ctx, "TopicC", "");
        assert_eq!(send_back(&ctx, &header("G4", phys, 5)).code, 0);
        // Second hop: send back the parked copy itself.
        let parked = store.get_message("SCHEDULE_TOPIC_XXXX", 4, 0, 1, 1 << 20, &AcceptAll);
        let Ok(Decoded::Message(first)) = record::decode_record(&parked.messages[0], false) else {
            panic!()
        };
        let first_props = std::str::from_utf8(first.properties).unwrap().to_string();
        assert_eq!(
            send_back(&ctx, &header("G4", first.physical_offset, 0)).code,
            0
        );
        let again = store.get_message("SCHEDULE_TOPIC_XXXX", 3, 0, 1, 1 << 20, &AcceptAll);
        let Ok(Decoded::Message(second)) = record::decode_record(&again.messages[0], false) else {
            panic!()
        };
        let p = std::str::from_utf8(second.properties).unwrap();
        assert_eq!(second.reconsume_times, 2);
        assert_eq!(
            properties::find(p, "DELAY"),
            Some("4"),
            "3 + reconsumeTimes(1)"
        );
        assert_eq!(properties::find(p, "RETRY_TOPIC"), Some("TopicC"));
        assert_eq!(
            properties::find(p, "ORIGIN_MESSAGE_ID"),
            properties::find(&first_props, "ORIGIN_MESSAGE_ID")
        );
    }

    #[test]
    fn errors_map_to_rocketmq_codes() {
        let (ctx, store) = test_context(BrokerConfig::default());
        assert_eq!(
            send_back(&ctx, &header("G5", 999_999, 0)).code,
            ResponseCode::SystemError.code()
        );
        let off = BrokerConfig {
            auto_create_subscription_group: false,
            ..BrokerConfig::default()
        };
        let (ctx2, _) = test_context(off);
        assert_eq!(
            send_back(&ctx2, &header("NoSuchGroup", 0, 0)).code,
            ResponseCode::SubscriptionGroupNotExist.code()
        );
        let ro = BrokerConfig {
            broker_permission: 4,
            ..BrokerConfig::default()
        };
        let (ctx3, _) = test_context(ro);
        assert_eq!(
            send_back(&ctx3, &header("G", 0, 0)).code,
            ResponseCode::NoPermission.code()
        );
        // Missing header field.
        let req = RemotingCommand::request(36, 1).with_ext("group", "G");
        let rc = FakeChannel::new(1).request_context(&req);
        let Reply::Now(r) = consumer_send_msg_back(&ctx, req, &rc) else {
            panic!()
        };
        assert_eq!(r.command.code, ResponseCode::SystemError.code());
        // Store refusal → SYSTEM_ERROR with the status name.
        let phys = phys_of(&ctx, "TopicE", "");
        store.force_put_status(Some(PutMessageStatus::OsPageCacheBusy));
        let resp = send_back(&ctx, &header("G5", phys, 0));
        assert_eq!(resp.code, ResponseCode::SystemError.code());
        assert_eq!(resp.remark.as_deref(), Some("OS_PAGE_CACHE_BUSY"));
        store.force_put_status(None);
        // retryQueueNums 0: success, nothing stored.
        let mut sg = SubscriptionGroupConfig::new("G6");
        sg.retry_queue_nums = 0;
        ctx.groups.update(sg);
        assert_eq!(send_back(&ctx, &header("G6", phys, 0)).code, 0);
        assert!(ctx.topics.select("%RETRY%G6").is_none());
    }

    #[test]
    fn retry_send_rule_for_the_send_path() {
        let (ctx, _store) = test_context(BrokerConfig::default());
        assert_eq!(
            route_retry_send(&ctx, "TopicA", 99, None),
            Ok(RetrySendRoute::AsIs)
        );
        assert_eq!(
            route_retry_send(&ctx, "%RETRY%G7", 16, None),
            Ok(RetrySendRoute::AsIs)
        );
        assert_eq!(
            route_retry_send(&ctx, "%RETRY%G7", 17, None),
            Ok(RetrySendRoute::DeadLetter {
                topic: "%DLQ%G7".into()
            })
        );
        assert_eq!(
            route_retry_send(&ctx, "%RETRY%G7", 3, Some(2)),
            Ok(RetrySendRoute::DeadLetter {
                topic: "%DLQ%G7".into()
            })
        );
        let off = BrokerConfig {
            auto_create_subscription_group: false,
            ..BrokerConfig::default()
        };
        let (ctx2, _) = test_context(off);
        assert_eq!(
            route_retry_send(&ctx2, "%RETRY%Nope", 0, None)
                .unwrap_err()
                .0,
            ResponseCode::SubscriptionGroupNotExist
        );
    }
}
