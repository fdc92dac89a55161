//! BATCH_ACK_MESSAGE (200151): many acks in one request, one entry per pop of one queue
//! with a bit set of the acked offsets (`BatchAckMessageRequestBody`). Each entry becomes
//! one batch ack (`bAck`) record in its revive queue, or, for orderly pops (revive queue
//! 999), orderly acks of its offsets. Offsets outside their queue and entries naming no
//! known topic are skipped with a log line, as upstream does; the answer comes once every
//! record is stored.

use std::sync::Arc;

use ringmq_remoting::codes::ResponseCode;
use ringmq_remoting::pop::{self, AckMsg, BatchAck, BatchAckBody};
use ringmq_remoting::RemotingCommand;
use ringmq_runtime::{Reply, RequestContext};
use ringmq_store::PutRequest;

use super::ack::{ack_in_buffer, put_all_then_answer};
use super::orderly::Named;
use super::{orderly, revive_log};
use crate::context::{error_response, BrokerContext};

/// BATCH_ACK_MESSAGE.
pub fn batch_ack_message(
    ctx: &Arc<BrokerContext>,
    request: RemotingCommand,
    rc: &RequestContext,
) -> Reply {
    let body = match BatchAckBody::decode(&request.body) {
        Ok(b) => b,
        Err(e) => {
            let remark = format!("the batch ack body is not readable: {e}");
            return Reply::Now(
                error_response(&request, ResponseCode::MessageIllegal, remark).into(),
            );
        }
    };
    if body.acks.is_empty() {
        let remark = "the batch ack names no message".to_string();
        return Reply::Now(error_response(&request, ResponseCode::NoMessage, remark).into());
    }
    let mut response = request.response_to(ResponseCode::Success.code(), None);
    let mut puts = Vec::new();
    for entry in &body.acks {
        match entry_puts(ctx, entry, body.broker_name.as_deref()) {
            Ok(Some(put)) => puts.push(put),
            Ok(None) => {}
            Err((code, remark)) => {
                tracing::warn!(
                    group = entry.group,
                    topic = entry.topic,
                    "batch ack: {remark}"
                );
                response.code = code.code();
                response.remark = Some(remark);
            }
        }
    }
    put_all_then_answer(ctx, puts, response, rc.responder());
    Reply::Later
}

/// The `bAck` record of one entry (`None` when nothing of it is left to record: all its
/// offsets were outside the queue, or it was orderly and acked in place).
fn entry_puts(
    ctx: &BrokerContext,
    entry: &BatchAck,
    broker_name: Option<&str>,
) -> Result<Option<PutRequest>, (ResponseCode, String)> {
    let topic = entry.retry.real_topic(&entry.topic, &entry.group);
    if ctx.topics.select(&topic).is_none() {
        tracing::warn!(
            topic,
            queue_id = entry.queue_id,
            "batch ack for an unknown topic skipped"
        );
        return Ok(None);
    }
    let min = ctx.store.min_offset_in_queue(&topic, entry.queue_id);
    let max = ctx.store.max_offset_in_queue(&topic, entry.queue_id);
    let offsets: Vec<i64> = entry
        .offsets()
        .filter(|o| (min..=max).contains(o))
        .collect();
    if entry.revive_qid == pop::ORDER_REVIVE_QUEUE {
        let mut illegal = None;
        for offset in offsets {
            let named = Named {
                topic: &topic,
                group: &entry.group,
                queue_id: entry.queue_id,
                extra_info: "",
                offset,
            };
            if let Err(remark) =
                orderly::ack(ctx, &named, entry.pop_time_ms, entry.invisible_time_ms)
            {
                illegal = Some((ResponseCode::MessageIllegal, remark));
            }
        }
        return illegal.map_or(Ok(None), Err);
    }
    if offsets.is_empty() {
        return Ok(None);
    }
    let inflight = &ctx.pop.inflight;
    inflight.remove(
        &topic,
        &entry.group,
        entry.pop_time_ms,
        entry.queue_id,
        offsets.len(),
    );
    let ack = AckMsg {
        ack_offset: -1,
        start_offset: entry.start_offset,
        group: entry.group.clone(),
        topic,
        queue_id: entry.queue_id,
        pop_time_ms: entry.pop_time_ms,
        broker_name: broker_name.map(str::to_string),
        ack_offsets: offsets,
    };
    if ack_in_buffer(ctx, &ack) {
        return Ok(None);
    }
    revive_log::ack_put(ctx, entry.revive_qid, &ack, entry.invisible_time_ms)
        .map(Some)
        .map_err(|e| {
            (
                ResponseCode::SystemError,
                format!("batch ack not written: {e}"),
            )
        })
}
