//! Client registration and rebalance support: HEART_BEAT (34), UNREGISTER_CLIENT (35),
//! CHECK_CLIENT_CONFIG (46), GET_CONSUMER_LIST_BY_GROUP (38), LOCK_BATCH_MQ (41),
//! UNLOCK_BATCH_MQ (42), and the broker-initiated NOTIFY_CONSUMER_IDS_CHANGED (40).
//! headers.md §5, features.md §e.4-e.6.
//!
//! Heartbeat bodies are read leniently: Java names, Go's string code sets, C++'s enum
//! ordinals and string numbers, missing arrays and a trailing newline are all accepted.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use ringmq_remoting::body::consumer::{
    CheckClientRequestBody, GetConsumerListByGroupResponseBody, LockBatchRequestBody,
    LockBatchResponseBody,
};
use ringmq_remoting::body::heartbeat::{
    ConsumeFromWhere, ConsumeType, HeartbeatData, MessageModel,
};
use ringmq_remoting::codes::{RequestCode, ResponseCode};
use ringmq_remoting::header::{
    GetConsumerListByGroupRequestHeader, NotifyConsumerIdsChangedRequestHeader,
    UnregisterClientRequestHeader,
};
use ringmq_remoting::json::BodyError;
use ringmq_remoting::RemotingCommand;
use ringmq_runtime::{Reply, RequestContext};

use crate::client::consumer_manager::{ClientChannelInfo, MessageQueue, SubscriptionData};
use crate::context::{error_response, header_error, BrokerContext};
use crate::metadata::topic_config::{self as topics, PERM_READ, PERM_WRITE};

static NOTIFY_OPAQUE: AtomicI32 = AtomicI32::new(1 << 30);

/// Decodes a body with one of remoting's decoders (fastjson-tolerant); an empty body is
/// refused before the decoder sees it.
fn decode_body<T>(
    request: &RemotingCommand,
    decode: fn(&[u8]) -> Result<T, BodyError>,
) -> Result<T, String> {
    if request.body.is_empty() {
        return Err("the request has no body".to_string());
    }
    decode(&request.body).map_err(|e| e.to_string())
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
    let body = match decode_body(request, HeartbeatData::decode) {
        Ok(b) => b,
        Err(e) => return body_error(request, "HeartbeatData", e),
    };
    if body.client_id.is_empty() {
        return body_error(request, "HeartbeatData", "clientID is missing".into());
    }
    let client_id = body.client_id;
    let now = crate::persist::now_ms();
    let channel = rc.connection().clone();
    let info = ClientChannelInfo {
        channel: channel.clone(),
        client_id: client_id.clone(),
        language: request.language.name().to_string(),
        version: request.version,
        last_update_ms: now,
    };
    let without_sub = body.without_sub;
    let mut sub_changed_any = false;
    for consumer in body.consumer_data_set {
        let group = consumer.group_name;
        if group.is_empty() {
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
            // Rebuilt from the expression: the tag hash codes are the broker's own
            // (Java's String.hashCode), never the client's `codeSet`.
            let subs = consumer
                .subscription_data_set
                .iter()
                .filter(|s| !s.topic.is_empty())
                .map(|s| {
                    SubscriptionData::build(
                        &s.topic,
                        &s.sub_string,
                        &s.expression_type,
                        s.sub_version,
                    )
                })
                .collect();
            Some(subs)
        };
        let consume_type = consumer
            .consume_type
            .unwrap_or(ConsumeType::ConsumePassively)
            .name();
        let model = consumer
            .message_model
            .unwrap_or(MessageModel::Clustering)
            .name();
        let from_where = consumer
            .consume_from_where
            .unwrap_or(ConsumeFromWhere::ConsumeFromLastOffset)
            .name();
        let outcome = ctx.consumers.register(
            &group,
            info.clone(),
            consume_type,
            model,
            from_where,
            subscriptions,
        );
        sub_changed_any |= outcome.subscriptions_changed;
        let notify_enabled = group_config
            .as_ref()
            .is_none_or(|g| g.notify_consumer_ids_changed_enable);
        if (outcome.channels_changed || outcome.subscriptions_changed)
            && notify_enabled
            && model != "BROADCASTING"
            && ctx.live.notify_consumer_ids_changed_enable()
        {
            tracing::info!(
                group,
                client_id,
                "consumer group changed, notifying its clients"
            );
            notify_consumer_ids_changed(ctx, &group);
        }
    }
    for producer in body.producer_data_set {
        if !producer.group_name.is_empty() {
            ctx.producers.register(&producer.group_name, info.clone());
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
        cmd.set_header(&NotifyConsumerIdsChangedRequestHeader {
            consumer_group: group.to_owned(),
            ..Default::default()
        });
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
    let UnregisterClientRequestHeader {
        client_id,
        producer_group,
        consumer_group,
        ..
    } = match request.decode_header() {
        Ok(h) => h,
        Err(e) => return header_error(request, e),
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
            if notify && ctx.live.notify_consumer_ids_changed_enable() {
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
    let body = match decode_body(request, CheckClientRequestBody::decode) {
        Ok(b) => b,
        Err(e) => return body_error(request, "CheckClientRequestBody", e),
    };
    let Some(sub) = body.subscription_data.filter(|s| !s.is_tag_type()) else {
        return request
            .response_to(ResponseCode::Success.code(), None)
            .into();
    };
    if !ctx.live.enable_property_filter() {
        return error_response(
            request,
            ResponseCode::SystemError,
            "The broker does not support consumer to filter message by SQL92",
        )
        .into();
    }
    match ctx.sql92.map(|c| c(&sub.sub_string)) {
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
    let group = match request.decode_header::<GetConsumerListByGroupRequestHeader>() {
        Ok(h) => h.consumer_group,
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
    let body = GetConsumerListByGroupResponseBody {
        consumer_id_list: ids,
    }
    .encode();
    request
        .response_to(ResponseCode::Success.code(), None)
        .with_body(body)
        .into()
}

/// The lock/unlock body through remoting's decoder; an empty group or client id is refused
/// like a missing one, since a lock without an owner is useless.
fn parse_lock_body(
    request: &RemotingCommand,
) -> Result<(String, String, Vec<MessageQueue>), String> {
    let body = decode_body(request, LockBatchRequestBody::decode)?;
    if body.consumer_group.is_empty() {
        return Err("consumerGroup is missing".into());
    }
    if body.client_id.is_empty() {
        return Err("clientId is missing".into());
    }
    Ok((body.consumer_group, body.client_id, body.mq_set))
}

pub fn lock_batch_mq(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let (group, client, mqs) = match parse_lock_body(request) {
        Ok(p) => p,
        Err(e) => return body_error(request, "LockBatchRequestBody", e),
    };
    let locked = ctx
        .locks
        .try_lock_batch(&group, &mqs, &client, crate::persist::now_ms());
    let body = LockBatchResponseBody {
        lock_ok_mq_set: locked,
    }
    .encode();
    request
        .response_to(ResponseCode::Success.code(), None)
        .with_body(body)
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
            ctx.consumers.subscription("G1", "T1").unwrap().code_set,
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
        let v: serde_json::Value = serde_json::from_slice(&r.command.body).unwrap();
        assert_eq!(v["lockOKMQSet"].as_array().unwrap().len(), 2);
        let r = run_on(
            &ctx,
            RemotingCommand::request(41, 2).with_body(body("c2")),
            &ch,
        );
        let v: serde_json::Value = serde_json::from_slice(&r.command.body).unwrap();
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
        let v: serde_json::Value = serde_json::from_slice(&r.command.body).unwrap();
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
            // Long enough that a stalled test thread between the live client's heartbeat
            // and the scan does not expire that client too.
            channel_expired_timeout_ms: 600,
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
        std::thread::sleep(std::time::Duration::from_millis(700));
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
