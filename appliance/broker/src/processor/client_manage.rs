//! Client registration and rebalance support: HEART_BEAT (34), UNREGISTER_CLIENT (35),
//! CHECK_CLIENT_CONFIG (46), GET_CONSUMER_LIST_BY_GROUP (38), LOCK_BATCH_MQ (41),
//! UNLOCK_BATCH_MQ (42), and the broker-initiated NOTIFY_CONSUMER_IDS_CHANGED (40).
//! headers.md §5, features.md §e.4-e.6.
//!
//! Heartbeat bodies are read leniently: Java names, Go's string code sets, C++'s enum
//! ordinals and string numbers, missing arrays and a trailing newline are all accepted.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use ringmq_remoting::codes::{RequestCode, ResponseCode};
use ringmq_remoting::RemotingCommand;
use ringmq_runtime::{Reply, RequestContext};
use serde_json::Value;

use crate::client::consumer_manager::{ClientChannelInfo, MessageQueue, SubscriptionData};
use crate::context::{error_response, header_error, optional, required, BrokerContext};
use crate::metadata::topic_config::{self as topics, PERM_READ, PERM_WRITE};

static NOTIFY_OPAQUE: AtomicI32 = AtomicI32::new(1 << 30);

fn text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn number(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// An enum sent by name or by ordinal.
fn enum_name(v: Option<&Value>, names: &[&str], default: &str) -> String {
    match v {
        Some(Value::String(s)) if s.chars().all(|c| c.is_ascii_digit()) && !s.is_empty() => s
            .parse::<usize>()
            .ok()
            .and_then(|i| names.get(i))
            .unwrap_or(&default)
            .to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|i| names.get(i as usize))
            .unwrap_or(&default)
            .to_string(),
        _ => default.to_string(),
    }
}

const CONSUME_TYPES: [&str; 3] = ["CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP"];
const MESSAGE_MODELS: [&str; 2] = ["BROADCASTING", "CLUSTERING"];
const CONSUME_FROM_WHERE: [&str; 6] = [
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
];

fn parse_body(request: &RemotingCommand) -> Result<Value, String> {
    if request.body.is_empty() {
        return Err("the request has no body".to_string());
    }
    let text =
        std::str::from_utf8(&request.body).map_err(|_| "the body is not UTF-8".to_string())?;
    serde_json::from_str(&crate::persist::fastjson_to_standard(text))
        .map_err(|e| format!("the body is not valid JSON: {e}"))
}

fn body_error(request: &RemotingCommand, what: &str, why: String) -> Reply {
    tracing::warn!(code = request.code, "bad {what} body: {why}");
    if request.is_oneway() {
        return Reply::Nothing;
    }
    error_response(
        request,
        ResponseCode::SystemError,
        format!("bad {what} body: {why}"),
    )
    .into()
}

pub fn heartbeat(ctx: &BrokerContext, request: &RemotingCommand, rc: &RequestContext) -> Reply {
    let body = match parse_body(request) {
        Ok(Value::Object(o)) => o,
        Ok(_) => return body_error(request, "HeartbeatData", "expected a JSON object".into()),
        Err(e) => return body_error(request, "HeartbeatData", e),
    };
    let Some(client_id) = text(body.get("clientID")).filter(|s| !s.is_empty()) else {
        return body_error(request, "HeartbeatData", "clientID is missing".into());
    };
    let now = crate::persist::now_ms();
    let channel = rc.connection().clone();
    let info = ClientChannelInfo {
        channel: channel.clone(),
        client_id: client_id.clone(),
        language: request.language.name().to_string(),
        version: request.version,
        last_update_ms: now,
    };
    let without_sub = matches!(body.get("withoutSub"), Some(Value::Bool(true)));
    let mut sub_changed_any = false;
    for consumer in body
        .get("consumerDataSet")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(group) = text(consumer.get("groupName")).filter(|g| !g.is_empty()) else {
            tracing::warn!(
                client_id,
                "heartbeat consumer data without groupName skipped"
            );
            continue;
        };
        let group_config = ctx.groups.find(&group);
        if let Some(gc) = &group_config {
            if gc.retry_queue_nums > 0 {
                ctx.topics.create_topic_of_retry(
                    &topics::retry_topic(&group),
                    gc.retry_queue_nums,
                    PERM_READ | PERM_WRITE,
                );
            }
        }
        let subscriptions = if without_sub {
            None
        } else {
            let mut subs = Vec::new();
            for s in consumer
                .get("subscriptionDataSet")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let Some(topic) = text(s.get("topic")).filter(|t| !t.is_empty()) else {
                    continue;
                };
                let sub_string = text(s.get("subString")).unwrap_or_else(|| "*".to_string());
                let expression = text(s.get("expressionType")).unwrap_or_else(|| "TAG".to_string());
                let version = number(s.get("subVersion")).unwrap_or(0);
                subs.push(SubscriptionData::build(
                    &topic,
                    &sub_string,
                    &expression,
                    version,
                ));
            }
            Some(subs)
        };
        let consume_type = enum_name(
            consumer.get("consumeType"),
            &CONSUME_TYPES,
            "CONSUME_PASSIVELY",
        );
        let model = enum_name(consumer.get("messageModel"), &MESSAGE_MODELS, "CLUSTERING");
        let from_where = enum_name(
            consumer.get("consumeFromWhere"),
            &CONSUME_FROM_WHERE,
            "CONSUME_FROM_LAST_OFFSET",
        );
        let outcome = ctx.consumers.register(
            &group,
            info.clone(),
            &consume_type,
            &model,
            &from_where,
            subscriptions,
        );
        sub_changed_any |= outcome.subscriptions_changed;
        let notify_enabled = group_config
            .as_ref()
            .is_none_or(|g| g.notify_consumer_ids_changed_enable);
        if (outcome.channels_changed || outcome.subscriptions_changed)
            && notify_enabled
            && model != "BROADCASTING"
            && ctx.config.notify_consumer_ids_changed_enable
        {
            tracing::info!(
                group,
                client_id,
                "consumer group changed, notifying its clients"
            );
            notify_consumer_ids_changed(ctx, &group);
        }
    }
    for producer in body
        .get("producerDataSet")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(group) = text(producer.get("groupName")).filter(|g| !g.is_empty()) {
            ctx.producers.register(&group, info.clone());
        }
    }
    if request.is_oneway() {
        return Reply::Nothing;
    }
    request
        .response_to(ResponseCode::Success.code(), None)
        .with_ext("IS_SUPPORT_HEART_BEAT_V2", "true")
        .with_ext(
            "IS_SUB_CHANGE",
            if without_sub {
                sub_changed_any.to_string()
            } else {
                "true".to_string()
            },
        )
        .into()
}

/// Tells every client of `group` to rebalance now (oneway NOTIFY_CONSUMER_IDS_CHANGED).
pub fn notify_consumer_ids_changed(ctx: &BrokerContext, group: &str) {
    for channel in ctx.consumers.channels(group) {
        let mut cmd = RemotingCommand::request(
            RequestCode::NotifyConsumerIdsChanged.code(),
            NOTIFY_OPAQUE.fetch_add(1, Ordering::Relaxed),
        );
        cmd.ext_fields.insert("consumerGroup", group);
        cmd.mark_oneway();
        if !channel.send_oneway(cmd) {
            tracing::debug!(group, peer = %channel.peer_addr(), "could not notify a consumer (connection gone)");
        }
    }
}

/// A connection closed: drop its registrations (consumer groups are notified).
pub fn on_channel_closed(ctx: &BrokerContext, channel_id: u64) {
    let changed = ctx.consumers.remove_channel(channel_id);
    ctx.producers.remove_channel(channel_id);
    for group in changed {
        notify_consumer_ids_changed(ctx, &group);
    }
}

/// Drops clients silent for `channelExpiredTimeout` (the housekeeping scan).
pub fn scan_expired_channels(ctx: &BrokerContext) {
    let now = crate::persist::now_ms();
    let timeout = ctx.config.channel_expired_timeout_ms as i64;
    for (group, channel) in ctx.consumers.scan_expired(now, timeout) {
        tracing::warn!(group, peer = %channel.peer_addr(), "consumer channel expired: no heartbeat for {timeout} ms; closing");
        channel.close();
        notify_consumer_ids_changed(ctx, &group);
    }
    for channel in ctx.producers.scan_expired(now, timeout) {
        tracing::warn!(peer = %channel.peer_addr(), "producer channel expired: no heartbeat for {timeout} ms");
    }
}

pub fn unregister_client(
    ctx: &BrokerContext,
    request: &RemotingCommand,
    rc: &RequestContext,
) -> Reply {
    let f = &request.ext_fields;
    let client_id: String = match required(f, "clientID") {
        Ok(c) => c,
        Err(e) => return header_error(request, e),
    };
    let (producer_group, consumer_group) = match (
        optional::<String>(f, "producerGroup"),
        optional::<String>(f, "consumerGroup"),
    ) {
        (Ok(p), Ok(c)) => (p, c),
        (Err(e), _) | (_, Err(e)) => return header_error(request, e),
    };
    let channel_id = rc.connection().id();
    if let Some(pg) = producer_group.filter(|g| !g.is_empty()) {
        ctx.producers.unregister(&pg, channel_id, &client_id);
    }
    if let Some(cg) = consumer_group.filter(|g| !g.is_empty()) {
        if ctx.consumers.unregister(&cg, channel_id, &client_id) {
            let notify = ctx
                .groups
                .get(&cg)
                .is_none_or(|g| g.notify_consumer_ids_changed_enable);
            if notify && ctx.config.notify_consumer_ids_changed_enable {
                notify_consumer_ids_changed(ctx, &cg);
            }
        }
    }
    if request.is_oneway() {
        return Reply::Nothing;
    }
    request
        .response_to(ResponseCode::Success.code(), None)
        .into()
}

pub fn check_client_config(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let body = match parse_body(request) {
        Ok(b) => b,
        Err(e) => return body_error(request, "CheckClientRequestBody", e),
    };
    let sub = body.get("subscriptionData");
    let expression =
        text(sub.and_then(|s| s.get("expressionType"))).unwrap_or_else(|| "TAG".to_string());
    if expression.eq_ignore_ascii_case("TAG") {
        return request
            .response_to(ResponseCode::Success.code(), None)
            .into();
    }
    if !ctx.live.enable_property_filter() {
        return error_response(
            request,
            ResponseCode::SystemError,
            "The broker does not support consumer to filter message by SQL92",
        )
        .into();
    }
    let sub_string = text(sub.and_then(|s| s.get("subString"))).unwrap_or_default();
    match ctx.sql92.map(|c| c(&sub_string)) {
        Some(Ok(_)) => request
            .response_to(ResponseCode::Success.code(), None)
            .into(),
        Some(Err(e)) => error_response(
            request,
            ResponseCode::SystemError,
            format!("parse SQL92 expression failed: {e}"),
        )
        .into(),
        None => error_response(
            request,
            ResponseCode::SystemError,
            "SQL92 filtering is not available in this broker build",
        )
        .into(),
    }
}

pub fn get_consumer_list_by_group(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let group: String = match required(&request.ext_fields, "consumerGroup") {
        Ok(g) => g,
        Err(e) => return header_error(request, e),
    };
    let ids = ctx.consumers.client_ids(&group);
    if ids.is_empty() {
        return error_response(
            request,
            ResponseCode::SystemError,
            format!("no consumer for this group, {group}"),
        )
        .into();
    }
    let body = serde_json::json!({ "consumerIdList": ids }).to_string();
    request
        .response_to(ResponseCode::Success.code(), None)
        .with_body(body)
        .into()
}

fn parse_lock_body(
    request: &RemotingCommand,
) -> Result<(String, String, Vec<MessageQueue>), String> {
    let body = parse_body(request)?;
    let group = text(body.get("consumerGroup"))
        .filter(|s| !s.is_empty())
        .ok_or("consumerGroup is missing")?;
    let client = text(body.get("clientId"))
        .filter(|s| !s.is_empty())
        .ok_or("clientId is missing")?;
    let mut mqs = Vec::new();
    for mq in body
        .get("mqSet")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let topic = text(mq.get("topic")).ok_or("a queue in mqSet has no topic")?;
        let broker_name = text(mq.get("brokerName")).unwrap_or_default();
        let queue_id = number(mq.get("queueId")).ok_or("a queue in mqSet has no queueId")? as i32;
        mqs.push(MessageQueue {
            topic,
            broker_name,
            queue_id,
        });
    }
    Ok((group, client, mqs))
}

pub fn lock_batch_mq(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let (group, client, mqs) = match parse_lock_body(request) {
        Ok(p) => p,
        Err(e) => return body_error(request, "LockBatchRequestBody", e),
    };
    let locked = ctx
        .locks
        .try_lock_batch(&group, &mqs, &client, crate::persist::now_ms());
    let body = serde_json::json!({ "lockOKMQSet": locked.iter().map(MessageQueue::to_json).collect::<Vec<_>>() });
    request
        .response_to(ResponseCode::Success.code(), None)
        .with_body(body.to_string())
        .into()
}

pub fn unlock_batch_mq(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let (group, client, mqs) = match parse_lock_body(request) {
        Ok(p) => p,
        Err(e) => return body_error(request, "UnlockBatchRequestBody", e),
    };
    ctx.locks.unlock_batch(&group, &mqs, &client);
    if request.is_oneway() {
        return Reply::Nothing;
    }
    request
        .response_to(ResponseCode::Success.code(), None)
        .into()
}

/// Used by tests and admin code: the retry topic exists once a consumer heartbeats.
pub fn retry_topic_exists(ctx: &Arc<BrokerContext>, group: &str) -> bool {
    ctx.topics.select(&topics::retry_topic(group)).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;
    use crate::test_support::*;

    #[test]
    fn heartbeat_registers_and_notifies_on_membership_change() {
        let (ctx, _store) = test_context(BrokerConfig::default());
        let ch1 = FakeChannel::new(1);
        let body = r#"{"clientID":"c1","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"G1","messageModel":"CLUSTERING","subscriptionDataSet":[{"classFilterMode":false,"codeSet":[2598919],"expressionType":"TAG","subString":"TagA","subVersion":1700000000000,"tagsSet":["TagA"],"topic":"T1"}],"unitMode":false}],"heartbeatFingerprint":0,"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}],"withoutSub":false}"#;
        let resp = run_on(&ctx, RemotingCommand::request(34, 1).with_body(body), &ch1);
        assert_eq!(resp.command.code, 0);
        assert_eq!(resp.command.version, ringmq_remoting::RINGMQ_VERSION);
        assert_eq!(
            resp.command.ext_fields.get("IS_SUPPORT_HEART_BEAT_V2"),
            Some("true")
        );
        assert!(retry_topic_exists(&ctx, "G1"));
        assert_eq!(
            ctx.consumers.subscription("G1", "T1").unwrap().codes,
            vec![2598919]
        );
        assert_eq!(ch1.sent().len(), 1, "first member joined: notified");
        // C++ shape: ordinals, string subVersion, no expressionType, trailing newline.
        let ch2 = FakeChannel::new(2);
        let cpp = "{\"clientID\":\"c2\",\"consumerDataSet\":[{\"consumeFromWhere\":0,\"consumeType\":1,\"groupName\":\"G1\",\"messageModel\":1,\"subscriptionDataSet\":[{\"subString\":\"TagA\",\"subVersion\":\"1700000000000\",\"topic\":\"T1\",\"tagsSet\":[\"TagA\"]}]}]}\n";
        let resp = run_on(&ctx, RemotingCommand::request(34, 2).with_body(cpp), &ch2);
        assert_eq!(resp.command.code, 0);
        assert_eq!(ch1.sent().len(), 2);
        assert_eq!(ch1.sent()[1].code, 40);
        assert_eq!(ch1.sent()[1].ext_fields.get("consumerGroup"), Some("G1"));
        let list = run_on(
            &ctx,
            RemotingCommand::request(38, 3).with_ext("consumerGroup", "G1"),
            &ch1,
        );
        assert_eq!(&list.command.body[..], br#"{"consumerIdList":["c1","c2"]}"#);
        // connection close removes c2 and notifies c1
        on_channel_closed(&ctx, 2);
        assert_eq!(ctx.consumers.client_ids("G1"), vec!["c1"]);
        assert_eq!(ch1.sent().len(), 3);
        // unregister c1
        let un = RemotingCommand::request(35, 4)
            .with_ext("clientID", "c1")
            .with_ext("consumerGroup", "G1");
        assert_eq!(run_on(&ctx, un, &ch1).command.code, 0);
        let list = run_on(
            &ctx,
            RemotingCommand::request(38, 5).with_ext("consumerGroup", "G1"),
            &ch1,
        );
        assert_eq!(list.command.code, 1);
    }

    #[test]
    fn bad_bodies_are_system_errors() {
        let (ctx, _store) = test_context(BrokerConfig::default());
        let ch = FakeChannel::new(1);
        for body in ["", "not json", "[1,2]", "{\"consumerDataSet\":[]}"] {
            let resp = run_on(
                &ctx,
                RemotingCommand::request(34, 1).with_body(body.to_string()),
                &ch,
            );
            assert_eq!(resp.command.code, 1, "body {body:?}");
        }
        assert_eq!(
            run_on(&ctx, RemotingCommand::request(41, 1).with_body("{}"), &ch)
                .command
                .code,
            1
        );
        assert_eq!(
            run_on(&ctx, RemotingCommand::request(35, 1), &ch)
                .command
                .code,
            1
        );
        assert_eq!(
            run_on(&ctx, RemotingCommand::request(38, 1), &ch)
                .command
                .code,
            1
        );
    }

    #[test]
    fn lock_and_unlock_batch() {
        let (ctx, _store) = test_context(BrokerConfig::default());
        let ch = FakeChannel::new(1);
        let body = |client: &str| {
            format!(
                r#"{{"consumerGroup":"G","clientId":"{client}","onlyThisBroker":false,"mqSet":[{{"brokerName":"b","queueId":0,"topic":"T"}},{{"brokerName":"b","queueId":1,"topic":"T"}}]}}"#
            )
        };
        let r = run_on(
            &ctx,
            RemotingCommand::request(41, 1).with_body(body("c1")),
            &ch,
        );
        let v: Value = serde_json::from_slice(&r.command.body).unwrap();
        assert_eq!(v["lockOKMQSet"].as_array().unwrap().len(), 2);
        let r = run_on(
            &ctx,
            RemotingCommand::request(41, 2).with_body(body("c2")),
            &ch,
        );
        let v: Value = serde_json::from_slice(&r.command.body).unwrap();
        assert!(v["lockOKMQSet"].as_array().unwrap().is_empty());
        assert!(ctx.locks.has_unexpired_lock("G"));
        assert_eq!(
            run_on(
                &ctx,
                RemotingCommand::request(42, 3).with_body(body("c1")),
                &ch
            )
            .command
            .code,
            0
        );
        let r = run_on(
            &ctx,
            RemotingCommand::request(41, 4).with_body(body("c2")),
            &ch,
        );
        let v: Value = serde_json::from_slice(&r.command.body).unwrap();
        assert_eq!(v["lockOKMQSet"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn check_client_config_sql92() {
        let (ctx, _store) = test_context(BrokerConfig::default());
        let ch = FakeChannel::new(1);
        let tag = r#"{"clientId":"c","group":"G","subscriptionData":{"expressionType":"TAG","subString":"*","topic":"T"}}"#;
        assert_eq!(
            run_on(&ctx, RemotingCommand::request(46, 1).with_body(tag), &ch)
                .command
                .code,
            0
        );
        let sql = r#"{"clientId":"c","group":"G","subscriptionData":{"expressionType":"SQL92","subString":"a>1","topic":"T"}}"#;
        assert_eq!(
            run_on(&ctx, RemotingCommand::request(46, 1).with_body(sql), &ch)
                .command
                .code,
            1
        );
    }

    #[test]
    fn expired_consumer_is_closed_and_the_group_notified() {
        let config = BrokerConfig {
            channel_expired_timeout_ms: 50,
            ..BrokerConfig::default()
        };
        let (ctx, _store) = test_context(config);
        let heartbeat = |client: &str, ch: &Arc<FakeChannel>| {
            let body = serde_json::json!({
                "clientID": client,
                "consumerDataSet": [{"groupName": "GX", "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": [{"topic": "TX", "subString": "*", "subVersion": 1}]}]
            });
            let req = RemotingCommand::request(34, 1).with_body(body.to_string());
            assert_eq!(run_on(&ctx, req, ch).command.code, 0);
        };
        let (silent, live) = (FakeChannel::new(1), FakeChannel::new(2));
        heartbeat("c1", &silent);
        std::thread::sleep(std::time::Duration::from_millis(80));
        heartbeat("c2", &live);
        let notified_before = live.sent().len();
        scan_expired_channels(&ctx);
        assert!(
            !silent.connection().is_alive(),
            "the silent client is closed"
        );
        assert_eq!(ctx.consumers.client_ids("GX"), vec!["c2"]);
        let notices = live.sent();
        assert_eq!(
            notices.len(),
            notified_before + 1,
            "the rest are told to rebalance"
        );
        assert_eq!(notices.last().unwrap().code, 40);
    }
}
