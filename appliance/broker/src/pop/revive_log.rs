//! Writing the revive topic: checkpoints and acks become timer messages
//! (`TIMER_DELIVER_MS`) for their revive queue, so they reach it at about the revive time
//! (features.md §f.3), and the retry copies the revive service makes of un-acked messages.

use std::sync::{mpsc, Arc};
use std::time::Duration;

use ringmq_remoting::message::properties::{keys, MessageProperties};
use ringmq_remoting::message::record::StoredRecord;
use ringmq_remoting::pop::{self, AckMsg, PopCheckPoint, ACK_TAG, BATCH_ACK_TAG, CK_TAG};
use ringmq_store::{PutMessageStatus, PutRequest, PutResult};

use super::buffer::Held;
use crate::context::BrokerContext;
use crate::timer_put::{self, BrokerTimerMessage};

/// How long the revive thread waits for one of its puts.
const PUT_WAIT: Duration = Duration::from_secs(10);

/// The put of checkpoint `ck` into revive queue `revive_qid`, released one second before
/// its revive time.
pub fn ck_put(
    ctx: &BrokerContext,
    revive_qid: i32,
    ck: &PopCheckPoint,
) -> Result<PutRequest, String> {
    let deliver_ms = ck.revive_time_ms() - 1_000;
    revive_put(
        ctx,
        revive_qid,
        CK_TAG,
        &pop::ck_uniq_key(ck),
        ck.encode(),
        deliver_ms,
    )
}

/// The put of `ack` into revive queue `revive_qid`, released at the revive time of the
/// checkpoint it acks (`pop_time + invisible_time_ms`).
pub fn ack_put(
    ctx: &BrokerContext,
    revive_qid: i32,
    ack: &AckMsg,
    invisible_time_ms: i64,
) -> Result<PutRequest, String> {
    let deliver_ms = ack.pop_time_ms.saturating_add(invisible_time_ms);
    let tag = if ack.ack_offsets.is_empty() {
        ACK_TAG
    } else {
        BATCH_ACK_TAG
    };
    revive_put(
        ctx,
        revive_qid,
        tag,
        &pop::ack_uniq_key(ack),
        ack.encode(),
        deliver_ms,
    )
}

fn revive_put(
    ctx: &BrokerContext,
    revive_qid: i32,
    tags: &str,
    uniq_key: &str,
    body: String,
    deliver_ms: i64,
) -> Result<PutRequest, String> {
    let mut props = MessageProperties::new();
    let bad = |e: ringmq_remoting::message::properties::PropertyError| e.to_string();
    props.insert(keys::TAGS, tags).map_err(bad)?;
    props.insert(keys::UNIQ_KEY, uniq_key).map_err(bad)?;
    props
        .insert(keys::TIMER_DELIVER_MS, &deliver_ms.to_string())
        .map_err(bad)?;
    let message = BrokerTimerMessage {
        topic: pop::revive_topic(&ctx.config.broker_cluster_name),
        queue_id: revive_qid,
        props,
        body: body.as_bytes(),
        born_host: ctx.store_host,
    };
    // Parked, or (a revive time already passed) straight to the revive queue.
    timer_put::broker_timer_put(ctx, message)
        .map(|(_, put)| put)
        .map_err(|(_, why)| why)
}

/// The retry copy of `rec` (a popped message nobody acked) for POP retry topic
/// `retry_topic`, queue 0, made as a sent-back copy is (one more reconsume, this broker as
/// STOREHOST), with `1ST_POP_TIME` kept or set to the pop time.
pub fn retry_put(
    ctx: &BrokerContext,
    rec: &StoredRecord<'_>,
    retry_topic: &str,
    first_pop_time_ms: i64,
) -> Result<PutRequest, String> {
    let mut props = MessageProperties::parse_bytes(rec.properties);
    if !props.contains_key(keys::FIRST_POP_TIME) {
        props
            .insert(keys::FIRST_POP_TIME, &first_pop_time_ms.to_string())
            .map_err(|e| e.to_string())?;
    }
    let original = rec.topic().map_err(|e| e.to_string())?;
    if !props.contains_key(keys::RETRY_TOPIC) && !original.starts_with(pop::RETRY_TOPIC_PREFIX) {
        props
            .insert(keys::RETRY_TOPIC, original)
            .map_err(|e| e.to_string())?;
    }
    crate::retry::encode_copy(ctx, rec, retry_topic.to_string(), 0, &props).map_err(|(_, why)| why)
}

/// Puts and waits (for the revive thread, never a network core).
pub fn put_and_wait(ctx: &BrokerContext, put: PutRequest) -> Result<(), String> {
    let (tx, rx) = mpsc::sync_channel::<PutResult>(1);
    ctx.store.put(
        put,
        Box::new(move |result: PutResult| {
            let _ = tx.send(result);
        }),
    );
    match rx.recv_timeout(PUT_WAIT) {
        Ok(result) if result.status == PutMessageStatus::PutOk => Ok(()),
        Ok(result) => Err(format!("not stored: {}", result.status.name())),
        Err(_) => Err(format!("not stored within {} s", PUT_WAIT.as_secs())),
    }
}

/// Writes a held checkpoint the buffer says is due, its in-memory acks in its bitmap (the
/// revive scan skips acked bits, upstream's as well); then its place in the line is done,
/// or, if it was not stored, it is held again and retried.
pub fn write_held(ctx: &Arc<BrokerContext>, held: Held) {
    let now_ms = crate::persist::now_ms();
    match ck_put(ctx, held.revive_qid, &held.ck) {
        Ok(put) => {
            let ctx2 = ctx.clone();
            ctx.store.put(
                put,
                Box::new(move |r: PutResult| {
                    let stored = r.status == PutMessageStatus::PutOk;
                    if !stored {
                        tracing::warn!(
                            status = r.status.name(),
                            "held POP checkpoint not stored; retrying"
                        );
                    }
                    let line = ctx2
                        .pop
                        .buffer
                        .written(&held, stored, crate::persist::now_ms());
                    super::buffer::commit(&ctx2, line);
                }),
            );
        }
        Err(e) => {
            tracing::warn!("held POP checkpoint not written: {e}; retrying");
            ctx.pop.buffer.written(&held, false, now_ms);
        }
    }
}
