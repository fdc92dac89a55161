//! The offset-based RPCs of newer API versions: PullMessage (PULL_MESSAGE from a queue
//! offset, with the request's filter and long polling), UpdateOffset and GetOffset (the
//! group's stored offset: UPDATE_CONSUMER_OFFSET, QUERY_CONSUMER_OFFSET) and QueryOffset
//! (a queue's first or next offset, or the offset at a time: GET_MIN_OFFSET,
//! GET_MAX_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP). The queue is the request's message queue
//! id on this broker.

use bytes::Bytes;
use ringmq_client::message::decode_records;
use ringmq_remoting::codes::RequestCode;
use ringmq_remoting::header::offset::{
    GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader, QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader, UpdateConsumerOffsetRequestHeader,
};
use ringmq_remoting::header::pull::{
    PullMessageRequestHeader, PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND,
};
use ringmq_remoting::{RemotingCommand, ResponseCode};

use super::client::{filter_of, MAX_LONG_POLLING_MS};
use super::Inner;
use crate::convert::{check_group, check_topic, duration_ms, incoming, timestamp_ms};
use crate::metadata::Caller;
use crate::pb::pull_message_response::Content;
use crate::pb::*;
use crate::status::{from_remoting, ok, status};

/// Most messages per pull (upstream's pull batch bound for one request).
const MAX_PULL_BATCH: i32 = 32;

/// The topic and queue id a request names, checked.
fn queue_of(inner: &Inner, queue: Option<&MessageQueue>) -> Result<(Resource, i32), Status> {
    let topic = queue.and_then(|q| q.topic.clone()).unwrap_or_default();
    check_topic(&topic.name, inner.ctx.topics.is_system_topic(&topic.name))?;
    let queue_id = queue.map_or(-1, |q| q.id);
    if queue_id < 0 {
        return Err(status(Code::BadRequest, "a message queue id is required"));
    }
    Ok((topic, queue_id))
}

/// The group, topic and queue id a request names, checked; with `offset`, that it is one.
fn group_queue_of(
    inner: &Inner,
    group: Option<&Resource>,
    queue: Option<&MessageQueue>,
    offset: Option<i64>,
) -> Result<(String, Resource, i32), Status> {
    let (topic, queue_id) = queue_of(inner, queue)?;
    let group = group.map_or("", |g| g.name.as_str());
    check_group(group)?;
    if offset.is_some_and(|o| o < 0) {
        return Err(status(Code::IllegalOffset, "the offset cannot be negative"));
    }
    Ok((group.to_string(), topic, queue_id))
}

/// Calls the broker; a non-SUCCESS answer becomes its v2 status.
async fn call_ok(
    inner: &Inner,
    caller: &Caller,
    request: RemotingCommand,
) -> Result<RemotingCommand, Status> {
    let answer = inner.call(caller, request).await?;
    let code = answer.command.code;
    if code != ResponseCode::Success.code() {
        return Err(from_remoting(code, answer.command.remark.as_deref()));
    }
    Ok(answer.command)
}

fn offset_field(command: &RemotingCommand) -> Result<i64, Status> {
    command
        .ext_fields
        .get("offset")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| status(Code::InternalServerError, "the broker answered no offset"))
}

pub(super) async fn update(
    inner: &Inner,
    caller: &Caller,
    request: &UpdateOffsetRequest,
) -> Status {
    let run = async {
        let (group, topic, queue_id) = group_queue_of(
            inner,
            request.group.as_ref(),
            request.message_queue.as_ref(),
            Some(request.offset),
        )?;
        let header = UpdateConsumerOffsetRequestHeader {
            consumer_group: group,
            topic: topic.name,
            queue_id,
            commit_offset: request.offset,
            rpc: Default::default(),
        };
        let code = RequestCode::UpdateConsumerOffset.code();
        call_ok(
            inner,
            caller,
            RemotingCommand::request(code, 0).with_header(&header),
        )
        .await?;
        Ok(ok())
    };
    run.await.unwrap_or_else(|s| s)
}

pub(super) async fn get(
    inner: &Inner,
    caller: &Caller,
    request: &GetOffsetRequest,
) -> Result<i64, Status> {
    let (group, topic, queue_id) = group_queue_of(
        inner,
        request.group.as_ref(),
        request.message_queue.as_ref(),
        None,
    )?;
    let header = QueryConsumerOffsetRequestHeader {
        consumer_group: group,
        topic: topic.name,
        queue_id,
        set_zero_if_not_found: Some(false),
        rpc: Default::default(),
    };
    let code = RequestCode::QueryConsumerOffset.code();
    let request = RemotingCommand::request(code, 0).with_header(&header);
    let answer = inner.call(caller, request).await?;
    match ResponseCode::from_code(answer.command.code) {
        Some(ResponseCode::Success) => offset_field(&answer.command),
        Some(ResponseCode::QueryNotFound) => Err(status(
            Code::OffsetNotFound,
            "the group has no offset stored for this queue",
        )),
        _ => Err(from_remoting(
            answer.command.code,
            answer.command.remark.as_deref(),
        )),
    }
}

pub(super) async fn query(
    inner: &Inner,
    caller: &Caller,
    request: &QueryOffsetRequest,
) -> Result<i64, Status> {
    let (topic, queue_id) = queue_of(inner, request.message_queue.as_ref())?;
    let topic = topic.name;
    let rpc = Default::default();
    let command = match QueryOffsetPolicy::try_from(request.query_offset_policy) {
        Ok(QueryOffsetPolicy::Beginning) => {
            let h = GetMinOffsetRequestHeader {
                topic,
                queue_id,
                rpc,
            };
            RemotingCommand::request(RequestCode::GetMinOffset.code(), 0).with_header(&h)
        }
        Ok(QueryOffsetPolicy::End) => {
            let h = GetMaxOffsetRequestHeader {
                topic,
                queue_id,
                committed: true,
                rpc,
            };
            RemotingCommand::request(RequestCode::GetMaxOffset.code(), 0).with_header(&h)
        }
        Ok(QueryOffsetPolicy::Timestamp) => {
            let Some(at) = request.timestamp.as_ref() else {
                return Err(status(
                    Code::BadRequest,
                    "a TIMESTAMP query needs a timestamp",
                ));
            };
            let h = SearchOffsetRequestHeader {
                topic,
                queue_id,
                timestamp: timestamp_ms(at),
                boundary_type: None,
                rpc,
            };
            RemotingCommand::request(RequestCode::SearchOffsetByTimestamp.code(), 0).with_header(&h)
        }
        Err(_) => return Err(status(Code::BadRequest, "unknown query offset policy")),
    };
    offset_field(&call_ok(inner, caller, command).await?)
}

/// The frames of a pull: its status, the messages found, and where to pull next.
pub(super) async fn pull(
    inner: &Inner,
    caller: &Caller,
    request: &PullMessageRequest,
) -> Vec<PullMessageResponse> {
    let frame = |c: Content| PullMessageResponse { content: Some(c) };
    match pull_call(inner, caller, request).await {
        Ok((messages, next)) => {
            let found = if messages.is_empty() {
                status(Code::MessageNotFound, "no new message")
            } else {
                ok()
            };
            let mut frames = Vec::with_capacity(messages.len() + 2);
            frames.push(frame(Content::Status(found)));
            frames.extend(messages.into_iter().map(|m| frame(Content::Message(m))));
            frames.push(frame(Content::NextOffset(next)));
            frames
        }
        Err(s) => vec![frame(Content::Status(s))],
    }
}

async fn pull_call(
    inner: &Inner,
    caller: &Caller,
    request: &PullMessageRequest,
) -> Result<(Vec<Message>, i64), Status> {
    let (group, topic, queue_id) = group_queue_of(
        inner,
        request.group.as_ref(),
        request.message_queue.as_ref(),
        Some(request.offset),
    )?;
    let filter = filter_of(request.filter_expression.as_ref());
    // A pull holds at most the longest long poll, and answers before the caller gives up.
    let mut suspend_ms = request
        .long_polling_timeout
        .as_ref()
        .map_or(0, duration_ms)
        .clamp(0, MAX_LONG_POLLING_MS);
    if let Some(deadline) = caller.deadline {
        let room = i64::try_from(deadline.as_millis()).unwrap_or(i64::MAX) - 200;
        suspend_ms = suspend_ms.min(room.max(0));
    }
    let mut sys_flag = PULL_FLAG_SUBSCRIPTION;
    if suspend_ms > 0 {
        sys_flag |= PULL_FLAG_SUSPEND;
    }
    let header = PullMessageRequestHeader {
        consumer_group: group,
        topic: topic.name.clone(),
        queue_id,
        queue_offset: request.offset,
        max_msg_nums: request.batch_size.clamp(1, MAX_PULL_BATCH),
        sys_flag,
        commit_offset: 0,
        suspend_timeout_millis: suspend_ms,
        subscription: Some(filter.1.clone()),
        sub_version: 0,
        expression_type: Some(filter.0.to_string()),
        max_msg_bytes: None,
        request_source: None,
        proxy_forward_client_id: None,
        rpc: Default::default(),
    };
    let pull = RemotingCommand::request(RequestCode::PullMessage.code(), 0).with_header(&header);
    let answer = inner.call(caller, pull).await?;
    let next = answer
        .command
        .ext_fields
        .get("nextBeginOffset")
        .and_then(|v| v.parse().ok())
        .unwrap_or(request.offset);
    match ResponseCode::from_code(answer.command.code) {
        Some(ResponseCode::Success) => {}
        Some(ResponseCode::PullNotFound | ResponseCode::PullRetryImmediately) => {
            return Ok((Vec::new(), next))
        }
        Some(ResponseCode::PullOffsetMoved) => {
            return Err(status(
                Code::IllegalOffset,
                format!(
                    "offset {} is out of the queue's range; next {next}",
                    request.offset
                ),
            ))
        }
        _ => {
            return Err(from_remoting(
                answer.command.code,
                answer.command.remark.as_deref(),
            ))
        }
    }
    let body = Bytes::from(answer.body);
    let broker = &inner.ctx.config.broker_name;
    let messages = decode_records(&body, broker)
        .iter()
        .map(|m| incoming(m, &topic, None))
        .collect();
    Ok((messages, next))
}
