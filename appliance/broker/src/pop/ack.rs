//! ACK_MESSAGE (200051) and CHANGE_MESSAGE_INVISIBLETIME (200053) of checkpoint pops
//! (features.md §f.6): an ack is recorded in its held checkpoint when the buffer holds it
//! (`buffer.rs`), else written as an `ack` record for the revive queue named in the receipt
//! handle; a change of invisible time writes a one-message checkpoint from now and acks
//! the message under its old one. Orderly pops' handles (revive queue 999) go to
//! `orderly.rs`.

use std::sync::Arc;

use ringmq_remoting::codes::ResponseCode;
use ringmq_remoting::header::pop::{
    AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader, ChangeInvisibleTimeResponseHeader,
};
use ringmq_remoting::pop::{AckMsg, ExtraInfo, PopCheckPoint};
use ringmq_remoting::RemotingCommand;
use ringmq_runtime::{Reply, RequestContext, Responder};
use ringmq_store::{PutMessageStatus, PutRequest, PutResult};

use super::buffer::{commit, AckTaken};
use super::orderly::{self, Named};
use super::revive_log;
use crate::context::{error_response, header_error, BrokerContext};

/// The receipt handle and the real topic `n` names, checked as upstream checks them; the
/// code and remark to refuse with otherwise.
fn resolve(
    ctx: &BrokerContext,
    n: &Named<'_>,
) -> Result<(ExtraInfo, String), (ResponseCode, String)> {
    let refuse = |code, remark: String| (code, remark);
    let (topic, queue_id) = (n.topic, n.queue_id);
    let Some(tc) = ctx.topics.select(topic) else {
        let remark = format!("topic[{topic}] not exist, apply first please!");
        return Err(refuse(ResponseCode::TopicNotExist, remark));
    };
    if queue_id < 0 || queue_id >= tc.read_queue_nums {
        let remark = format!(
            "queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{}]",
            tc.read_queue_nums
        );
        return Err(refuse(ResponseCode::MessageIllegal, remark));
    }
    let info =
        ExtraInfo::parse(n.extra_info).map_err(|e| refuse(ResponseCode::InvalidParameter, e.0))?;
    let real_topic = info.retry.real_topic(topic, n.group);
    let min = ctx.store.min_offset_in_queue(&real_topic, queue_id);
    let max = ctx.store.max_offset_in_queue(&real_topic, queue_id);
    if n.offset < min || n.offset > max {
        let remark = format!(
            "offset is illegal, key:{real_topic}@{queue_id}, commit:{}, store:{min},{max}",
            n.offset
        );
        return Err(refuse(ResponseCode::NoMessage, remark));
    }
    Ok((info, real_topic))
}

fn ack_of(info: &ExtraInfo, real_topic: &str, n: &Named<'_>) -> AckMsg {
    AckMsg {
        ack_offset: n.offset,
        start_offset: info.ck_start_offset,
        group: n.group.to_string(),
        topic: real_topic.to_string(),
        queue_id: n.queue_id,
        pop_time_ms: info.pop_time_ms,
        broker_name: Some(info.broker_name.clone()),
        ack_offsets: Vec::new(),
    }
}

/// Records `ack` in its held checkpoint, if the buffer holds it (committing the queue's
/// offset when that was the checkpoint's last ack); false when the ack is to be written.
pub(crate) fn ack_in_buffer(ctx: &BrokerContext, ack: &AckMsg) -> bool {
    match ctx.pop.buffer.ack(&ack.merge_key(), &ack.acked_offsets()) {
        AckTaken::NotHeld => false,
        AckTaken::Held => true,
        AckTaken::AllAcked(line) => {
            commit(ctx, line);
            true
        }
    }
}

/// Hands `puts` to the store in order and answers `response` when all are stored
/// (SYSTEM_ERROR naming the first that was not).
pub(crate) fn put_all_then_answer(
    ctx: &Arc<BrokerContext>,
    puts: Vec<PutRequest>,
    response: RemotingCommand,
    responder: Responder,
) {
    let mut puts = puts.into_iter();
    let Some(put) = puts.next() else {
        responder.respond(response);
        return;
    };
    let ctx2 = ctx.clone();
    ctx.store.put(
        put,
        Box::new(move |r: PutResult| {
            if r.status == PutMessageStatus::PutOk {
                put_all_then_answer(&ctx2, puts.collect(), response, responder);
            } else {
                let mut response = response;
                response.code = ResponseCode::SystemError.code();
                response.remark = Some(format!("not stored: {}", r.status.name()));
                responder.respond(response);
            }
        }),
    );
}

/// ACK_MESSAGE.
pub fn ack_message(
    ctx: &Arc<BrokerContext>,
    request: RemotingCommand,
    rc: &RequestContext,
) -> Reply {
    let h: AckMessageRequestHeader = match request.decode_header() {
        Ok(h) => h,
        Err(e) => return header_error(&request, e),
    };
    let named = Named {
        topic: &h.topic,
        group: &h.consumer_group,
        queue_id: h.queue_id,
        extra_info: &h.extra_info,
        offset: h.offset,
    };
    let (info, real_topic) = match resolve(ctx, &named) {
        Ok(t) => t,
        Err((code, remark)) => return Reply::Now(error_response(&request, code, remark).into()),
    };
    if info.is_order() {
        let acked = orderly::ack(ctx, &named, info.pop_time_ms, info.invisible_time_ms);
        return Reply::Now(
            match acked {
                Ok(()) => request.response_to(ResponseCode::Success.code(), None),
                Err(remark) => error_response(&request, ResponseCode::MessageIllegal, remark),
            }
            .into(),
        );
    }
    let ack = ack_of(&info, &real_topic, &named);
    let inflight = &ctx.pop.inflight;
    inflight.remove(
        &real_topic,
        &h.consumer_group,
        info.pop_time_ms,
        h.queue_id,
        1,
    );
    let response = request.response_to(ResponseCode::Success.code(), None);
    if ack_in_buffer(ctx, &ack) {
        return Reply::Now(response.into());
    }
    let put = revive_log::ack_put(ctx, info.revive_qid, &ack, info.invisible_time_ms);
    put_then_answer(ctx, &request, put.map(|p| vec![p]), response, rc)
}

/// CHANGE_MESSAGE_INVISIBLETIME: a new one-message checkpoint from now, then an ack of
/// the message under its old checkpoint. The answer carries the new handle's parts.
pub fn change_invisible_time(
    ctx: &Arc<BrokerContext>,
    request: RemotingCommand,
    rc: &RequestContext,
) -> Reply {
    let h: ChangeInvisibleTimeRequestHeader = match request.decode_header() {
        Ok(h) => h,
        Err(e) => return header_error(&request, e),
    };
    let named = Named {
        topic: &h.topic,
        group: &h.consumer_group,
        queue_id: h.queue_id,
        extra_info: &h.extra_info,
        offset: h.offset,
    };
    if h.invisible_time < 0 {
        let remark = format!("invisibleTime {} is negative", h.invisible_time);
        let refused = error_response(&request, ResponseCode::InvalidParameter, remark);
        return Reply::Now(refused.into());
    }
    let (info, real_topic) = match resolve(ctx, &named) {
        Ok(t) => t,
        Err((code, remark)) => return Reply::Now(error_response(&request, code, remark).into()),
    };
    if info.is_order() {
        let header = orderly::change_invisible_time(ctx, &named, &info, h.invisible_time);
        let mut response = request.response_to(ResponseCode::Success.code(), None);
        response.set_header(&header);
        return Reply::Now(response.into());
    }
    let now_ms = crate::persist::now_ms();
    let ck = PopCheckPoint {
        start_offset: h.offset,
        pop_time_ms: now_ms,
        invisible_time_ms: h.invisible_time,
        num: 1,
        queue_id: h.queue_id,
        topic: real_topic.clone(),
        group: h.consumer_group.clone(),
        queue_offset_diff: vec![0],
        broker_name: Some(info.broker_name.clone()),
        ..Default::default()
    };
    let ack = ack_of(&info, &real_topic, &named);
    let puts = revive_log::ck_put(ctx, info.revive_qid, &ck).and_then(|ck| {
        let ack = revive_log::ack_put(ctx, info.revive_qid, &ack, info.invisible_time_ms)?;
        Ok(vec![ck, ack])
    });
    let mut response = request.response_to(ResponseCode::Success.code(), None);
    response.set_header(&ChangeInvisibleTimeResponseHeader {
        pop_time: now_ms,
        invisible_time: h.invisible_time,
        revive_qid: info.revive_qid,
    });
    put_then_answer(ctx, &request, puts, response, rc)
}

/// Stores `puts` in order, then answers `response`; a put that cannot be built is refused
/// at once with SYSTEM_ERROR.
fn put_then_answer(
    ctx: &Arc<BrokerContext>,
    request: &RemotingCommand,
    puts: Result<Vec<PutRequest>, String>,
    response: RemotingCommand,
    rc: &RequestContext,
) -> Reply {
    match puts {
        Ok(puts) => {
            put_all_then_answer(ctx, puts, response, rc.responder());
            Reply::Later
        }
        Err(e) => Reply::Now(error_response(request, ResponseCode::SystemError, e).into()),
    }
}
