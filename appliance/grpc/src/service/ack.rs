//! AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue, all on a
//! receipt handle: the broker's POP handle (`ckStartOffset popTime invisibleTime reviveQid
//! retry brokerName queueId queueOffset`) followed by the message's CommitLog offset, nine
//! space-separated fields as upstream's proxy hands them out.

use ringmq_remoting::codes::RequestCode;
use ringmq_remoting::header::pop::{AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader};
use ringmq_remoting::header::send::ConsumerSendMsgBackRequestHeader;
use ringmq_remoting::pop::ExtraInfo;
use ringmq_remoting::{RemotingCommand, ResponseCode};

use super::Inner;
use crate::convert::{check_group, check_topic, duration_ms, now_ms, MAX_INVISIBLE_MS};
use crate::metadata::Caller;
use crate::pb::*;
use crate::status::{from_remoting, ok, overall, status};

/// A receipt handle taken apart.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Handle {
    /// The broker's part (its `extraInfo`).
    pub info: ExtraInfo,
    /// The message's CommitLog offset, when the handle carries it.
    pub commit_log_offset: Option<i64>,
}

impl Handle {
    pub(crate) fn parse(text: &str) -> Result<Handle, Status> {
        let invalid = |why: String| status(Code::InvalidReceiptHandle, why);
        let fields = text.split(' ').count();
        let (pop_part, commit_log_offset) = match fields {
            9 => {
                let (head, tail) = text.rsplit_once(' ').unwrap_or((text, ""));
                let offset = tail.parse::<i64>().map_err(|_| {
                    invalid(format!("receipt handle `{text}`: bad CommitLog offset"))
                })?;
                (head, Some(offset))
            }
            7 | 8 => (text, None),
            n => {
                return Err(invalid(format!(
                    "receipt handle `{text}` has {n} fields, 8 or 9 expected"
                )))
            }
        };
        let info = ExtraInfo::parse(pop_part).map_err(|e| invalid(e.0))?;
        if info.msg_queue_offset.is_none() {
            return Err(invalid(format!(
                "receipt handle `{text}` names no queue offset"
            )));
        }
        Ok(Handle {
            info,
            commit_log_offset,
        })
    }

    /// The handle as handed out.
    pub(crate) fn encode(&self) -> String {
        match self.commit_log_offset {
            Some(o) => format!("{} {o}", self.info),
            None => self.info.to_string(),
        }
    }

    fn offset(&self) -> i64 {
        self.info
            .msg_queue_offset
            .unwrap_or(self.info.ck_start_offset)
    }

    fn expired(&self, now: i64) -> bool {
        self.info
            .pop_time_ms
            .saturating_add(self.info.invisible_time_ms)
            <= now
    }

    /// Parsed and not yet past its invisible time.
    fn live(text: &str) -> Result<Handle, Status> {
        let h = Handle::parse(text)?;
        if h.expired(now_ms()) {
            return Err(status(
                Code::InvalidReceiptHandle,
                "receipt handle is expired",
            ));
        }
        Ok(h)
    }
}

fn names(
    group: Option<&Resource>,
    topic: Option<&Resource>,
    inner: &Inner,
) -> Result<(String, String), Status> {
    let group = group.map_or("", |g| g.name.as_str()).to_string();
    let topic = topic.map_or("", |t| t.name.as_str()).to_string();
    check_topic(&topic, inner.ctx.topics.is_system_topic(&topic))?;
    check_group(&group)?;
    Ok((group, topic))
}

/// Entries of one AckMessage acked at once (a batch of a receive is at most 32).
const ACKS_IN_FLIGHT_PER_REQUEST: usize = 64;

pub(super) async fn ack(
    inner: &Inner,
    caller: &Caller,
    request: &AckMessageRequest,
) -> AckMessageResponse {
    let (group, topic) = match names(request.group.as_ref(), request.topic.as_ref(), inner) {
        Ok(n) => n,
        Err(s) => {
            return AckMessageResponse {
                status: Some(s),
                entries: Vec::new(),
            }
        }
    };
    // The entries are acked concurrently, as upstream's proxy does: one bridge pass then
    // carries a whole batch instead of one round trip per entry. At most
    // ACKS_IN_FLIGHT_PER_REQUEST at once, so one request cannot fill the bridge's queue.
    let mut entries = Vec::with_capacity(request.entries.len());
    for chunk in request.entries.chunks(ACKS_IN_FLIGHT_PER_REQUEST) {
        let acks = chunk.iter().map(|e| async {
            let s = match Handle::live(&e.receipt_handle) {
                Ok(h) => ack_handle(inner, caller, &group, &topic, &h).await,
                Err(s) => s,
            };
            AckMessageResultEntry {
                message_id: e.message_id.clone(),
                receipt_handle: e.receipt_handle.clone(),
                status: Some(s),
            }
        });
        entries.extend(futures_util::future::join_all(acks).await);
    }
    let status = overall(
        entries.iter().map(|e| e.status.as_ref()),
        "ack message result is empty",
    );
    AckMessageResponse {
        status: Some(status),
        entries,
    }
}

async fn ack_handle(
    inner: &Inner,
    caller: &Caller,
    group: &str,
    topic: &str,
    h: &Handle,
) -> Status {
    let header = AckMessageRequestHeader {
        consumer_group: group.to_string(),
        topic: h.info.retry.real_topic(topic, group),
        queue_id: h.info.queue_id,
        extra_info: h.info.to_string(),
        offset: h.offset(),
        rpc: Default::default(),
    };
    let request = RemotingCommand::request(RequestCode::AckMessage.code(), 0).with_header(&header);
    match inner.call(caller, request).await {
        Ok(a) if a.command.code == ResponseCode::Success.code() => ok(),
        Ok(a) => from_remoting(a.command.code, a.command.remark.as_deref()),
        Err(s) => s,
    }
}

/// Acks a handle this endpoint handed itself (a message it drops); failures are logged.
pub(super) async fn ack_quietly(
    inner: &Inner,
    caller: &Caller,
    group: &str,
    topic: &str,
    handle: &str,
) {
    let s = match Handle::parse(handle) {
        Ok(h) => ack_handle(inner, caller, group, topic, &h).await,
        Err(s) => s,
    };
    if !crate::status::is_ok(&s) {
        tracing::debug!(
            group,
            topic,
            "ack of a dropped message failed: {}",
            s.message
        );
    }
}

pub(super) async fn change_invisible(
    inner: &Inner,
    caller: &Caller,
    request: &ChangeInvisibleDurationRequest,
) -> ChangeInvisibleDurationResponse {
    let refused = |s: Status| ChangeInvisibleDurationResponse {
        status: Some(s),
        receipt_handle: String::new(),
    };
    let (group, topic) = match names(request.group.as_ref(), request.topic.as_ref(), inner) {
        Ok(n) => n,
        Err(s) => return refused(s),
    };
    let invisible_ms = request.invisible_duration.as_ref().map_or(-1, duration_ms);
    if !(0..=MAX_INVISIBLE_MS).contains(&invisible_ms) {
        return refused(status(
            Code::IllegalInvisibleTime,
            format!("the invisible time must be within [0, {MAX_INVISIBLE_MS}] ms"),
        ));
    }
    let h = match Handle::live(&request.receipt_handle) {
        Ok(h) => h,
        Err(s) => return refused(s),
    };
    let header = ChangeInvisibleTimeRequestHeader {
        consumer_group: group.clone(),
        topic: h.info.retry.real_topic(&topic, &group),
        queue_id: h.info.queue_id,
        extra_info: h.info.to_string(),
        offset: h.offset(),
        invisible_time: invisible_ms,
        rpc: Default::default(),
    };
    let r = RemotingCommand::request(RequestCode::ChangeMessageInvisibletime.code(), 0)
        .with_header(&header);
    let answer = match inner.call(caller, r).await {
        Ok(a) => a,
        Err(s) => return refused(s),
    };
    if answer.command.code != ResponseCode::Success.code() {
        return refused(from_remoting(
            answer.command.code,
            answer.command.remark.as_deref(),
        ));
    }
    // The broker wrote a new checkpoint starting at this message: the new handle names it.
    let field = |k: &str| {
        answer
            .command
            .ext_fields
            .get(k)
            .and_then(|v| v.parse::<i64>().ok())
    };
    let mut next = h.clone();
    let offset = h.offset();
    next.info.ck_start_offset = offset;
    next.info.msg_queue_offset = Some(offset);
    next.info.pop_time_ms = field("popTime").unwrap_or_else(now_ms);
    next.info.invisible_time_ms = field("invisibleTime").unwrap_or(invisible_ms);
    if let Some(q) = field("reviveQid").and_then(|q| i32::try_from(q).ok()) {
        next.info.revive_qid = q;
    }
    ChangeInvisibleDurationResponse {
        status: Some(ok()),
        receipt_handle: next.encode(),
    }
}

pub(super) async fn forward_to_dlq(
    inner: &Inner,
    caller: &Caller,
    request: &ForwardMessageToDeadLetterQueueRequest,
) -> Status {
    let (group, topic) = match names(request.group.as_ref(), request.topic.as_ref(), inner) {
        Ok(n) => n,
        Err(s) => return s,
    };
    send_to_dlq(
        inner,
        caller,
        &group,
        &topic,
        &request.receipt_handle,
        &request.message_id,
    )
    .await
}

/// CONSUMER_SEND_MSG_BACK straight to the group's DLQ (delay level -1), then the ack of
/// the original.
pub(super) async fn send_to_dlq(
    inner: &Inner,
    caller: &Caller,
    group: &str,
    topic: &str,
    handle: &str,
    message_id: &str,
) -> Status {
    let h = match Handle::parse(handle) {
        Ok(h) => h,
        Err(s) => return s,
    };
    let Some(offset) = h.commit_log_offset else {
        return status(Code::InvalidReceiptHandle, "commit log offset is empty");
    };
    let header = ConsumerSendMsgBackRequestHeader {
        offset,
        group: group.to_string(),
        delay_level: -1,
        origin_msg_id: Some(message_id.to_string()),
        origin_topic: Some(h.info.retry.real_topic(topic, group)),
        unit_mode: false,
        max_reconsume_times: Some(0),
        rpc: Default::default(),
    };
    let r =
        RemotingCommand::request(RequestCode::ConsumerSendMsgBack.code(), 0).with_header(&header);
    let s = match inner.call(caller, r).await {
        Ok(a) => from_remoting(a.command.code, a.command.remark.as_deref()),
        Err(s) => s,
    };
    if crate::status::is_ok(&s) {
        let acked = ack_handle(inner, caller, group, topic, &h).await;
        if !crate::status::is_ok(&acked) {
            tracing::debug!(
                group,
                topic,
                "ack after DLQ forward failed: {}",
                acked.message
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_parse_with_and_without_the_commit_log_offset() {
        let h = Handle::parse("5 1700000000000 60000 3 0 broker-a 1 5 123456").unwrap();
        assert_eq!(h.commit_log_offset, Some(123_456));
        assert_eq!((h.info.queue_id, h.offset()), (1, 5));
        assert_eq!(h.encode(), "5 1700000000000 60000 3 0 broker-a 1 5 123456");
        let h = Handle::parse("5 1700000000000 60000 3 0 broker-a 1 5").unwrap();
        assert_eq!(h.commit_log_offset, None);
        assert!(h.expired(1_700_000_060_000));
        assert!(!h.expired(1_700_000_059_999));
        for bad in [
            "",
            "x",
            "5 1 2 3 0 b 1 5 x",
            "a b c d e f g h",
            "1 2 3 4 0 b 1 2 3 4",
        ] {
            let e = Handle::parse(bad).unwrap_err();
            assert_eq!(e.code, Code::InvalidReceiptHandle as i32, "{bad}");
        }
    }
}
