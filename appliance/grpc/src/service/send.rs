//! SendMessage: the proxy's checks, the topic's message type, the queue choice (a message
//! group hashes to its queue, as Guava's `consistentHash` of the group's Java hash), then
//! SEND_MESSAGE_V2 (one message) or SEND_BATCH_MESSAGE (several) to the broker. Each
//! message gets its own result entry, with the recall handle of a parked delay message.
//! RecallMessage cancels one by that handle (RECALL_MESSAGE).

use std::sync::atomic::Ordering;

use ringmq_remoting::codes::RequestCode;
use ringmq_remoting::header::send::{RecallMessageRequestHeader, SendMessageRequestHeaderV2};
use ringmq_remoting::message::batch::encode_batch_item;
use ringmq_remoting::message::id::decode_offset_msg_id;
use ringmq_remoting::message::properties::keys;
use ringmq_remoting::message::tags::java_string_hash;
use ringmq_remoting::{RemotingCommand, ResponseCode};

use super::route::topic_message_type;
use super::Inner;
use crate::convert::{check_topic, message_type_of, now_ms, outgoing, Outgoing};
use crate::metadata::Caller;
use crate::pb::*;
use crate::status::{from_remoting, ok, overall, status};

/// Messages per SendMessage request.
pub(crate) const MAX_MESSAGES_PER_SEND: usize = 1024;
/// `enableTopicMessageTypeCheck`: whether a send must match its topic's `message.type`.
pub(crate) const TYPE_CHECK_KEY: &str = ringmq_broker::grpc_keys::TYPE_CHECK;

pub(super) async fn send(
    inner: &Inner,
    caller: &Caller,
    request: &SendMessageRequest,
) -> SendMessageResponse {
    match try_send(inner, caller, request).await {
        Ok(entries) => {
            let status = overall(
                entries.iter().map(|e| e.status.as_ref()),
                "send status is empty",
            );
            SendMessageResponse {
                status: Some(status),
                entries,
            }
        }
        Err(s) => SendMessageResponse {
            status: Some(s),
            entries: Vec::new(),
        },
    }
}

async fn try_send(
    inner: &Inner,
    caller: &Caller,
    request: &SendMessageRequest,
) -> Result<Vec<SendResultEntry>, Status> {
    let messages = &request.messages;
    let Some(first) = messages.first() else {
        return Err(status(Code::MessageCorrupted, "no message to send"));
    };
    if messages.len() > MAX_MESSAGES_PER_SEND {
        return Err(status(
            Code::BadRequest,
            format!("at most {MAX_MESSAGES_PER_SEND} messages per send"),
        ));
    }
    let topic = first.topic.clone().unwrap_or_default();
    check_topic(&topic.name, inner.ctx.topics.is_system_topic(&topic.name))?;
    let peer = caller.peer.to_string();
    let max_body = usize::try_from(inner.ctx.config.max_message_size_bytes).unwrap_or(usize::MAX);
    let now = now_ms();
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        if m.topic.as_ref() != Some(&topic) {
            return Err(status(
                Code::MessageCorrupted,
                "topic in message is not same",
            ));
        }
        out.push(outgoing(m, &peer, max_body, now)?);
    }
    let tc = inner.ctx.topics.select(&topic.name).ok_or_else(|| {
        status(
            Code::TopicNotFound,
            format!("No topic route info for the topic: {}", topic.name),
        )
    })?;
    check_message_type(inner, &topic.name, &tc, &out[0])?;
    let queues = tc.write_queue_nums;
    if queues <= 0 {
        return Err(status(Code::Forbidden, "no writable queue"));
    }
    let queue_id = match (&out[..], out[0].message_group.as_deref()) {
        ([_], Some(group)) => consistent_hash(i64::from(java_string_hash(group)), queues),
        _ => {
            let n = inner.next_queue.fetch_add(1, Ordering::Relaxed);
            i32::try_from(n % queues as usize).unwrap_or(0)
        }
    };
    let request = build(inner, &topic.name, queue_id, &out)?;
    let answer = inner.call(caller, request).await?;
    let code = answer.command.code;
    let per_message = match ResponseCode::from_code(code) {
        Some(ResponseCode::Success) => ok(),
        Some(ResponseCode::FlushDiskTimeout)
        | Some(ResponseCode::FlushSlaveTimeout)
        | Some(ResponseCode::SlaveNotAvailable) => {
            let s = from_remoting(code, None);
            status(
                Code::try_from(s.code).unwrap_or(Code::InternalServerError),
                format!("send message failed, sendStatus code {code}"),
            )
        }
        _ => return Err(from_remoting(code, answer.command.remark.as_deref())),
    };
    Ok(entries(&answer.command, &out, per_message))
}

/// The send type must match the topic's `message.type` (MIXED takes any), unless the
/// check is off or the topic is a retry or DLQ topic.
fn check_message_type(
    inner: &Inner,
    topic: &str,
    tc: &ringmq_remoting::body::topic::TopicConfig,
    first: &Outgoing,
) -> Result<(), Status> {
    if !inner.type_check
        || topic.starts_with("%RETRY%")
        || topic.starts_with("%DLQ%")
        || first.properties.contains_key(keys::TRANSFER_FLAG)
    {
        return Ok(());
    }
    type_matches(tc, message_type_of(&first.properties))
}

/// `actual` against the topic's `message.type` (MIXED takes any), as upstream's
/// `TopicMessageTypeValidator`.
fn type_matches(
    tc: &ringmq_remoting::body::topic::TopicConfig,
    actual: &str,
) -> Result<(), Status> {
    let expected = topic_message_type(tc);
    if expected == "MIXED" || expected == actual {
        return Ok(());
    }
    Err(status(
        Code::MessagePropertyConflictWithType,
        format!("TopicMessageType validate failed, the expected type is {expected}, but actual type is {actual}"),
    ))
}

/// RecallMessage: RECALL_MESSAGE with the handle a delay message's send answered with;
/// on a checked topic only a DELAY (or MIXED) topic takes it, as upstream's proxy.
pub(super) async fn recall(
    inner: &Inner,
    caller: &Caller,
    request: &RecallMessageRequest,
) -> RecallMessageResponse {
    match recall_call(inner, caller, request).await {
        Ok(message_id) => RecallMessageResponse {
            status: Some(ok()),
            message_id,
        },
        Err(s) => RecallMessageResponse {
            status: Some(s),
            message_id: String::new(),
        },
    }
}

async fn recall_call(
    inner: &Inner,
    caller: &Caller,
    request: &RecallMessageRequest,
) -> Result<String, Status> {
    let topic = request.topic.as_ref().map_or("", |t| t.name.as_str());
    check_topic(topic, inner.ctx.topics.is_system_topic(topic))?;
    let tc = inner.ctx.topics.select(topic).ok_or_else(|| {
        status(
            Code::TopicNotFound,
            format!("No topic route info for the topic: {topic}"),
        )
    })?;
    if inner.type_check {
        type_matches(&tc, "DELAY")?;
    }
    let header = RecallMessageRequestHeader {
        producer_group: None,
        topic: topic.to_string(),
        recall_handle: request.recall_handle.clone(),
        rpc: Default::default(),
    };
    let recall =
        RemotingCommand::request(RequestCode::RecallMessage.code(), 0).with_header(&header);
    let answer = inner.call(caller, recall).await?;
    let code = answer.command.code;
    if code != ResponseCode::Success.code() {
        return Err(from_remoting(code, answer.command.remark.as_deref()));
    }
    Ok(answer
        .command
        .ext_fields
        .get("msgId")
        .unwrap_or_default()
        .to_string())
}

fn build(
    inner: &Inner,
    topic: &str,
    queue_id: i32,
    out: &[Outgoing],
) -> Result<RemotingCommand, Status> {
    let batch = out.len() > 1;
    let first = &out[0];
    let header = SendMessageRequestHeaderV2 {
        a: topic.to_string(),
        b: topic.to_string(),
        c: "TBW102".into(),
        d: 4,
        e: queue_id,
        f: first.sys_flag,
        g: first.born_ms,
        h: 0,
        i: Some(if batch {
            String::new()
        } else {
            first.properties.encode()
        }),
        j: Some(0),
        k: Some(false),
        l: None,
        m: Some(batch),
        n: Some(inner.ctx.config.broker_name.clone()),
    };
    let code = if batch {
        RequestCode::SendBatchMessage
    } else {
        RequestCode::SendMessageV2
    };
    let mut request = RemotingCommand::request(code.code(), 0).with_header(&header);
    request.body = if batch {
        let mut body = Vec::new();
        for m in out {
            let mut props = Vec::new();
            m.properties.encode_into(&mut props);
            encode_batch_item(&mut body, 0, &m.body, &props)
                .map_err(|e| status(Code::MessagePropertiesTooLarge, e.to_string()))?;
        }
        body.into()
    } else {
        first.body.clone().into()
    };
    Ok(request)
}

/// One entry per message. A transactional message's transaction id carries where its half
/// message is, so EndTransaction needs no state kept here (see `transaction`).
fn entries(
    response: &RemotingCommand,
    out: &[Outgoing],
    per_message: Status,
) -> Vec<SendResultEntry> {
    let field = |k: &str| response.ext_fields.get(k).unwrap_or("");
    let first_offset: i64 = field("queueOffset").parse().unwrap_or(0);
    let offset_ids: Vec<&str> = field("msgId").split(',').collect();
    out.iter()
        .enumerate()
        .map(|(i, m)| {
            let message_id = m.properties.get(keys::UNIQ_KEY).unwrap_or("").to_string();
            let queue_offset = first_offset.saturating_add(i as i64);
            let transaction_id = if m.properties.get(keys::TRAN_MSG) == Some("true") {
                offset_ids
                    .get(i)
                    .and_then(|id| decode_offset_msg_id(id).ok())
                    .map(|o| {
                        super::transaction::transaction_id(
                            &message_id,
                            o.commit_log_offset,
                            queue_offset,
                        )
                    })
                    .unwrap_or_default()
            } else {
                String::new()
            };
            SendResultEntry {
                status: Some(per_message.clone()),
                message_id,
                transaction_id,
                offset: queue_offset,
                recall_handle: field("recallHandle").to_string(),
            }
        })
        .collect()
}

/// Guava's `Hashing.consistentHash(long, int)`: the bucket in `0..buckets` for `input`.
pub(crate) fn consistent_hash(input: i64, buckets: i32) -> i32 {
    assert!(buckets > 0, "consistent_hash needs at least one bucket");
    let mut state = input as u64;
    let mut candidate: i64 = 0;
    loop {
        state = state
            .wrapping_mul(2_862_933_555_777_941_757)
            .wrapping_add(1);
        let d = f64::from(((state >> 33) as i32).wrapping_add(1)) / f64::from(1u32 << 31);
        let next = ((candidate + 1) as f64 / d) as i64;
        if next >= 0 && next < i64::from(buckets) {
            candidate = next;
        } else {
            return candidate as i32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_string_hashes_match_java() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("order-1"), -1_207_111_310);
    }

    #[test]
    fn consistent_hash_is_stable_and_in_range() {
        for buckets in 1..20 {
            for input in [-5i64, 0, 1, 97, 1 << 40] {
                let b = consistent_hash(input, buckets);
                assert!((0..buckets).contains(&b));
                assert_eq!(b, consistent_hash(input, buckets));
            }
        }
        assert_eq!(consistent_hash(0, 1), 0);
    }
}
