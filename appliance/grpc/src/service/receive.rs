//! ReceiveMessage: a POP (queue -1, every queue of the topic on this broker) with the
//! request's batch, invisible time, filter and long-polling time, answered as upstream's
//! stream: the status first, then one frame per message, then the server's time as a
//! `delivery_timestamp` frame. Messages the subscription's tags do not match are acked
//! and dropped; messages past the group's delivery attempts go to its DLQ.

use bytes::Bytes;
use ringmq_client::message::MessageExt;
use ringmq_client::pop::popped_messages;
use ringmq_remoting::codes::RequestCode;
use ringmq_remoting::header::pop::PopMessageRequestHeader;
use ringmq_remoting::{RemotingCommand, ResponseCode};

use super::client::{filter_of, MAX_LONG_POLLING_MS};
use super::Inner;
use crate::convert::{
    check_group, check_topic, duration_ms, incoming, now_ms, timestamp, MAX_INVISIBLE_MS,
};
use crate::metadata::Caller;
use crate::pb::receive_message_response::Content;
use crate::pb::*;
use crate::status::{from_remoting, ok, status};

/// Messages per POP (upstream `MAX_MSG_NUMS_FOR_POP_REQUEST`).
const MAX_BATCH: i32 = 32;
/// Shortest long poll (upstream `grpcClientConsumerMinLongPollingTimeoutMillis`).
const MIN_LONG_POLLING_MS: i64 = 5_000;
/// Invisible time of an auto-renewed receive (upstream `defaultInvisibleTimeMills`).
const DEFAULT_INVISIBLE_MS: i64 = 60_000;
/// Shortest invisible time of a receive (upstream `minInvisibleTimeMillsForRecv`).
const MIN_INVISIBLE_MS: i64 = 10_000;
/// What the answer needs to reach the caller before its deadline.
const DEADLINE_MARGIN_MS: i64 = 200;

/// The frames of a refused receive.
pub(super) fn refused(s: Status) -> Vec<ReceiveMessageResponse> {
    vec![frame(Content::Status(s)), clock()]
}

fn frame(content: Content) -> ReceiveMessageResponse {
    ReceiveMessageResponse {
        content: Some(content),
    }
}

fn clock() -> ReceiveMessageResponse {
    frame(Content::DeliveryTimestamp(timestamp(now_ms())))
}

pub(super) async fn receive(
    inner: &Inner,
    caller: &Caller,
    request: &ReceiveMessageRequest,
) -> Vec<ReceiveMessageResponse> {
    match pop(inner, caller, request).await {
        Ok(messages) if messages.is_empty() => {
            refused(status(Code::MessageNotFound, "no new message"))
        }
        Ok(messages) => {
            let mut frames = Vec::with_capacity(messages.len() + 2);
            frames.push(frame(Content::Status(ok())));
            frames.extend(messages.into_iter().map(|m| frame(Content::Message(m))));
            frames.push(clock());
            frames
        }
        Err(s) => refused(s),
    }
}

/// What one receive asks of the broker.
struct Plan {
    group: String,
    topic: Resource,
    batch: i32,
    invisible_ms: i64,
    poll_ms: i64,
    filter: (&'static str, String),
    fifo: bool,
    max_attempts: i32,
}

fn plan(inner: &Inner, caller: &Caller, request: &ReceiveMessageRequest) -> Result<Plan, Status> {
    let poll_ms = polling_time(caller, request)?;
    let topic = request
        .message_queue
        .as_ref()
        .and_then(|q| q.topic.clone())
        .unwrap_or_default();
    check_topic(&topic.name, inner.ctx.topics.is_system_topic(&topic.name))?;
    let group = request
        .group
        .as_ref()
        .map_or("", |g| g.name.as_str())
        .to_string();
    check_group(&group)?;
    let invisible_ms = if request.auto_renew {
        DEFAULT_INVISIBLE_MS
    } else {
        let ms = request.invisible_duration.as_ref().map_or(0, duration_ms);
        if !(MIN_INVISIBLE_MS..=MAX_INVISIBLE_MS).contains(&ms) {
            return Err(status(
                Code::IllegalInvisibleTime,
                format!("the invisible time must be within [{MIN_INVISIBLE_MS}, {MAX_INVISIBLE_MS}] ms, not {ms}"),
            ));
        }
        ms
    };
    let filter = filter_of(request.filter_expression.as_ref());
    if filter.0 == "SQL92" && filter.1.trim().is_empty() {
        return Err(status(
            Code::IllegalFilterExpression,
            "the SQL filter expression is empty",
        ));
    }
    let config = inner.ctx.groups.get(&group);
    let fifo = inner
        .subscription_fifo(&caller.client_id)
        .unwrap_or_else(|| config.as_ref().is_some_and(|g| g.consume_message_orderly));
    let max_attempts = config
        .as_ref()
        .map_or(16, |g| g.retry_max_times)
        .saturating_add(1);
    Ok(Plan {
        group,
        topic,
        batch: request.batch_size.clamp(1, MAX_BATCH),
        invisible_ms,
        poll_ms,
        filter,
        fifo,
        max_attempts,
    })
}

/// The long-polling time: the request's (or half the deadline) within [5 s, 20 s], and
/// short enough for the answer to beat the caller's deadline.
fn polling_time(caller: &Caller, request: &ReceiveMessageRequest) -> Result<i64, Status> {
    let remaining = caller
        .deadline
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let asked = match (&request.long_polling_timeout, remaining) {
        (Some(t), _) => duration_ms(t),
        (None, Some(r)) => r / 2,
        (None, None) => MAX_LONG_POLLING_MS,
    };
    let poll = asked.clamp(MIN_LONG_POLLING_MS, MAX_LONG_POLLING_MS);
    match remaining {
        Some(r) if poll > r - DEADLINE_MARGIN_MS => {
            if r - DEADLINE_MARGIN_MS >= MIN_LONG_POLLING_MS {
                Ok(r - DEADLINE_MARGIN_MS)
            } else {
                Err(status(
                    Code::IllegalPollingTime,
                    "The deadline time remaining is not enough for polling, please check network condition",
                ))
            }
        }
        _ => Ok(poll),
    }
}

async fn pop(
    inner: &Inner,
    caller: &Caller,
    request: &ReceiveMessageRequest,
) -> Result<Vec<Message>, Status> {
    let plan = plan(inner, caller, request)?;
    let header = PopMessageRequestHeader {
        consumer_group: plan.group.clone(),
        topic: plan.topic.name.clone(),
        queue_id: -1,
        max_msg_nums: plan.batch,
        invisible_time: plan.invisible_ms,
        poll_time: plan.poll_ms,
        born_time: now_ms(),
        init_mode: 1,
        exp_type: Some(plan.filter.0.to_string()),
        exp: Some(plan.filter.1.clone()),
        order: plan.fifo,
        attempt_id: request.attempt_id.clone(),
        rpc: Default::default(),
    };
    let pop = RemotingCommand::request(RequestCode::PopMessage.code(), 0).with_header(&header);
    let answer = inner.call(caller, pop).await?;
    match ResponseCode::from_code(answer.command.code) {
        Some(ResponseCode::Success) => {}
        Some(ResponseCode::PollingFull) => {
            return Err(status(Code::TooManyRequests, "polling full"))
        }
        Some(ResponseCode::PollingTimeout) | Some(ResponseCode::PullNotFound) => {
            return Ok(Vec::new())
        }
        _ => {
            return Err(from_remoting(
                answer.command.code,
                answer.command.remark.as_deref(),
            ))
        }
    }
    let mut response = answer.command;
    response.body = Bytes::from(answer.body);
    let broker = &inner.ctx.config.broker_name;
    let popped = popped_messages(&response, broker, &plan.topic.name).map_err(|e| {
        status(
            Code::InternalServerError,
            format!("unreadable POP answer: {e}"),
        )
    })?;
    let tags = tag_set(&plan.filter);
    let mut out = Vec::with_capacity(popped.len());
    for (m, handle) in popped {
        let handle = format!("{handle} {}", m.commit_log_offset);
        if !tags.is_empty() && !m.tags().is_some_and(|t| tags.iter().any(|x| x == t)) {
            super::ack::ack_quietly(inner, caller, &plan.group, &plan.topic.name, &handle).await;
            continue;
        }
        if m.reconsume_times >= plan.max_attempts {
            dead_letter(inner, caller, &plan, &m, &handle).await;
            continue;
        }
        out.push(incoming(&m, &plan.topic, Some(handle)));
    }
    Ok(out)
}

/// The tags a TAG subscription names (empty: all).
fn tag_set(filter: &(&'static str, String)) -> Vec<String> {
    if filter.0 != "TAG" || filter.1.trim() == "*" {
        return Vec::new();
    }
    filter
        .1
        .split("||")
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

async fn dead_letter(inner: &Inner, caller: &Caller, plan: &Plan, m: &MessageExt, handle: &str) {
    let s = super::ack::send_to_dlq(
        inner,
        caller,
        &plan.group,
        &plan.topic.name,
        handle,
        &m.msg_id,
    )
    .await;
    if !crate::status::is_ok(&s) {
        tracing::warn!(
            group = plan.group,
            msg_id = m.msg_id,
            "a message past its delivery attempts could not reach the DLQ: {}",
            s.message
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn caller(deadline_ms: Option<u64>) -> Caller {
        Caller {
            client_id: "c".into(),
            peer: "127.0.0.1:1".parse().unwrap(),
            language: "PYTHON".into(),
            deadline: deadline_ms.map(Duration::from_millis),
        }
    }

    fn asking(ms: Option<i64>) -> ReceiveMessageRequest {
        ReceiveMessageRequest {
            long_polling_timeout: ms.map(crate::convert::duration),
            ..Default::default()
        }
    }

    #[test]
    fn polling_time_is_clamped_and_fits_the_deadline() {
        assert_eq!(polling_time(&caller(None), &asking(Some(1_000))), Ok(5_000));
        assert_eq!(
            polling_time(&caller(None), &asking(Some(60_000))),
            Ok(20_000)
        );
        assert_eq!(
            polling_time(&caller(Some(23_000)), &asking(Some(20_000))),
            Ok(20_000)
        );
        assert_eq!(
            polling_time(&caller(Some(10_000)), &asking(Some(20_000))),
            Ok(9_800)
        );
        assert_eq!(
            polling_time(&caller(Some(30_000)), &asking(None)),
            Ok(15_000)
        );
        let e = polling_time(&caller(Some(3_000)), &asking(Some(20_000))).unwrap_err();
        assert_eq!(e.code, Code::IllegalPollingTime as i32);
    }

    #[test]
    fn tag_subscriptions_split_on_double_bars() {
        assert!(tag_set(&("TAG", "*".into())).is_empty());
        assert!(tag_set(&("SQL92", "a > 1".into())).is_empty());
        assert_eq!(tag_set(&("TAG", "A || B".into())), vec!["A", "B"]);
    }
}
