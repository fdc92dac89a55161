//! The revive service (features.md §f.6): one thread on the master that, between rounds,
//! writes the held checkpoints that fall due (`buffer.rs`) and, about once a second, scans each revive queue from its committed offset ([`ReviveScan`]), writes a
//! retry copy of every popped message whose invisible time passed without an ack, and
//! commits the revive offset (group `CID_RMQ_SYS_REVIVE_GROUP`) past what it handled.
//!
//! A retry copy that is not stored gets a checkpoint of its own, re-put with a back-off
//! (10 s, 20 s, 30 s, 1 min, … 2 h), and the round moves on; only when that re-put fails
//! too does the round stop before the checkpoint, to try it again next round.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use ringmq_remoting::message::properties::{keys, MessageProperties};
use ringmq_remoting::message::record::{self, Decoded};
use ringmq_remoting::pop::{self, REVIVE_GROUP};
use ringmq_store::AcceptAll;

use super::buffer::commit;
use super::processor::{ensure_retry_topic, REVIVE_QUEUE_NUM};
use super::revive_log;
use super::revive_scan::{DueCheckpoint, ReviveMessage, ReviveScan};
use crate::context::BrokerContext;

/// Pause between rounds (`reviveInterval`).
const ROUND_INTERVAL: Duration = Duration::from_millis(1_000);
/// How often held checkpoints are looked at (upstream's buffer scan runs every 5 ms; a
/// checkpoint falls due at least 1.5 s before it must be in the revive queue).
const HELD_LOOK_INTERVAL: Duration = Duration::from_millis(50);
/// Held checkpoints written per look at most.
const HELD_WRITES_PER_LOOK: usize = 4_096;
/// Messages read from a revive queue per read, and per round at most.
const READ_BATCH: i32 = 32;
const MAX_READ_PER_ROUND: usize = 16_384;
/// The timer must be this close to now before the scan may treat "nothing more in the
/// queue" as "nothing more until now" (acks still in the wheel would otherwise be missed).
const TIMER_CAUGHT_UP_SECS: i64 = 1;

/// Starts the revive thread; stops when the flag is set.
pub fn start(ctx: Arc<BrokerContext>) -> (Arc<AtomicBool>, JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let handle = std::thread::Builder::new()
        .name("ringmq-pop-revive".into())
        .spawn(move || {
            while !stop2.load(Ordering::Acquire) {
                for qid in 0..REVIVE_QUEUE_NUM as i32 {
                    revive_queue(&ctx, qid);
                }
                wait_writing_held(&ctx, &stop2, ROUND_INTERVAL);
            }
            write_all_held(&ctx);
        })
        .expect("spawn the POP revive thread");
    (stop, handle)
}

/// Waits `total` (or until stopped), writing the held checkpoints that fall due meanwhile
/// (`buffer.rs`).
fn wait_writing_held(ctx: &Arc<BrokerContext>, stop: &AtomicBool, total: Duration) {
    let mut slept = Duration::ZERO;
    while slept < total && !stop.load(Ordering::Acquire) {
        let now_ms = crate::persist::now_ms();
        for held in ctx.pop.buffer.take_due(now_ms, HELD_WRITES_PER_LOOK) {
            revive_log::write_held(ctx, held);
        }
        std::thread::sleep(HELD_LOOK_INTERVAL);
        slept += HELD_LOOK_INTERVAL;
    }
}

/// At shutdown (the servers are closed, no ack comes any more): writes every held
/// checkpoint with its acks and commits what that allows, so a planned restart re-delivers
/// only what was not acked, and only after its invisible time.
fn write_all_held(ctx: &Arc<BrokerContext>) {
    let held = ctx.pop.buffer.take_due(i64::MAX, usize::MAX);
    let (total, mut written) = (held.len(), 0usize);
    for h in held {
        let stored = revive_log::ck_put(ctx, h.revive_qid, &h.ck)
            .and_then(|put| revive_log::put_and_wait(ctx, put));
        if let Err(e) = &stored {
            tracing::warn!("held POP checkpoint not written at shutdown: {e}");
        }
        written += usize::from(stored.is_ok());
        let line = ctx
            .pop
            .buffer
            .written(&h, stored.is_ok(), crate::persist::now_ms());
        commit(ctx, line);
    }
    if total > 0 {
        tracing::info!(written, total, "held POP checkpoints written at shutdown");
    }
}

/// One round over revive queue `qid`.
pub fn revive_queue(ctx: &BrokerContext, qid: i32) {
    let topic = pop::revive_topic(&ctx.config.broker_cluster_name);
    let (scan, old_offset) = scan_queue(ctx, &topic, qid);
    if scan.bad_bodies > 0 {
        tracing::warn!(
            queue = qid,
            bad = scan.bad_bodies,
            "revive queue holds unreadable checkpoint or ack bodies; skipped"
        );
    }
    let plan = scan.plan();
    let mut new_offset = old_offset;
    for due in &plan.due {
        let done = revive_checkpoint(ctx, due).and_then(|failed| re_put(ctx, qid, due, failed));
        if let Err(e) = done {
            tracing::warn!(
                queue = qid,
                topic = due.ck.topic,
                group = due.ck.group,
                "revive stopped: {e}; retrying next round"
            );
            break;
        }
        new_offset = due.ck.revive_offset;
    }
    if new_offset > old_offset {
        ctx.offsets
            .commit_offset(REVIVE_GROUP, &topic, qid, new_offset);
    }
}

/// Reads revive queue `qid` of `topic` from its committed offset (a round's worth at
/// most) into a scan; returns it with that offset.
fn scan_queue(ctx: &BrokerContext, topic: &str, qid: i32) -> (ReviveScan, i64) {
    let committed = ctx.offsets.query_offset(REVIVE_GROUP, topic, qid);
    let old_offset = committed.unwrap_or(ctx.store.min_offset_in_queue(topic, qid) - 1);
    let mut scan = ReviveScan::new(old_offset);
    let mut next = old_offset + 1;
    let mut read = 0usize;
    while read < MAX_READ_PER_ROUND {
        let r = ctx
            .store
            .get_message(topic, qid, next, READ_BATCH, 1 << 20, &AcceptAll);
        if r.messages.is_empty() {
            break;
        }
        for (bytes, offset) in r.messages.iter().zip(&r.message_queue_offsets) {
            add_message(&mut scan, bytes, *offset);
        }
        read += r.messages.len();
        next = r.next_begin_offset;
    }
    if read < MAX_READ_PER_ROUND && ctx.timer.runtime_info().read_behind_s <= TIMER_CAUGHT_UP_SECS {
        scan.reached(crate::persist::now_ms());
    }
    (scan, old_offset)
}

/// What the revive stage sees right now, one line per revive queue holding a
/// checkpoint: the committed offset, how far in time the scan reaches, and each
/// checkpoint with its revive time and acked bits (for an operator or a failing test
/// asking why a message has not come back yet). Reads only; revives nothing.
pub fn describe_revive_queues(ctx: &BrokerContext) -> String {
    let topic = pop::revive_topic(&ctx.config.broker_cluster_name);
    let now_ms = crate::persist::now_ms();
    let timer = ctx.timer.runtime_info();
    let mut out = format!(
        "now {now_ms}, timer read behind {} s, timer offset behind {}",
        timer.read_behind_s, timer.offset_behind
    );
    for qid in 0..REVIVE_QUEUE_NUM as i32 {
        let (scan, old_offset) = scan_queue(ctx, &topic, qid);
        if scan.checkpoints() == 0 {
            continue;
        }
        let max = ctx.store.max_offset_in_queue(&topic, qid);
        out += &format!(
            "\nrevive queue {qid}: committed {old_offset}, max {max}, scan reaches {}, due {}:",
            scan.end_time_ms(),
            scan.plan().due.len()
        );
        for ck in scan.pending() {
            out += &format!(
                "\n  ck at {} {}/{} start {} revive time {} acked {:#b} of {}",
                ck.revive_offset,
                ck.topic,
                ck.queue_id,
                ck.start_offset,
                ck.revive_time_ms(),
                ck.bit_map,
                ck.num
            );
        }
    }
    out
}

fn add_message(scan: &mut ReviveScan, bytes: &[u8], queue_offset: i64) {
    let Ok(Decoded::Message(rec)) = record::decode_record(bytes, false) else {
        scan.bad_bodies += 1;
        return;
    };
    let props = MessageProperties::parse_bytes(rec.properties);
    let deliver_ms = props
        .get(keys::TIMER_DELIVER_MS)
        .and_then(|v| v.parse().ok())
        .unwrap_or(rec.store_timestamp_ms);
    scan.add(ReviveMessage {
        tags: props.get(keys::TAGS).unwrap_or(""),
        body: rec.body,
        queue_offset,
        deliver_ms,
    });
}

/// Writes a one-message checkpoint (re-put, with back-off) for each message whose retry
/// copy was not stored, so the round moves on and the message is tried again later; an
/// error only when such a checkpoint is not stored either.
fn re_put(
    ctx: &BrokerContext,
    qid: i32,
    due: &DueCheckpoint,
    failed: Vec<(i64, String)>,
) -> Result<(), String> {
    let now_ms = crate::persist::now_ms();
    for (offset, why) in failed {
        let ck = due.ck.re_put_for(offset, now_ms);
        tracing::warn!(
            topic = ck.topic,
            group = ck.group,
            offset,
            re_put = ck.re_put_count(),
            "retry copy not stored ({why}); checkpoint re-put"
        );
        revive_log::put_and_wait(ctx, revive_log::ck_put(ctx, qid, &ck)?)?;
    }
    Ok(())
}

/// Writes the retry copies of a due checkpoint's un-acked messages; the offsets whose copy
/// was not stored, and why. A checkpoint whose topic or group is gone is done (nothing to
/// deliver to).
fn revive_checkpoint(
    ctx: &BrokerContext,
    due: &DueCheckpoint,
) -> Result<Vec<(i64, String)>, String> {
    let ck = &due.ck;
    let mut failed = Vec::new();
    let normal_topic = normal_topic_of(&ck.topic, &ck.group);
    if ctx.topics.select(&normal_topic).is_none() || ctx.groups.get(&ck.group).is_none() {
        return Ok(failed);
    }
    let retry_topic = if ck.topic.starts_with(pop::RETRY_TOPIC_PREFIX) {
        ck.topic.clone()
    } else {
        pop::retry_topic(&ck.topic, &ck.group, ctx.config.enable_retry_topic_v2)
    };
    for offset in &due.unacked_offsets {
        let r = ctx
            .store
            .get_message(&ck.topic, ck.queue_id, *offset, 1, 1 << 24, &AcceptAll);
        let Some(bytes) = r
            .messages
            .first()
            .filter(|_| r.message_queue_offsets.first() == Some(offset))
        else {
            // Gone (retention): nothing left to deliver.
            continue;
        };
        let Ok(Decoded::Message(rec)) = record::decode_record(bytes, false) else {
            continue;
        };
        ensure_retry_topic(ctx, &retry_topic);
        let stored = revive_log::retry_put(ctx, &rec, &retry_topic, ck.pop_time_ms)
            .and_then(|put| revive_log::put_and_wait(ctx, put));
        match stored {
            Ok(()) => {
                let inflight = &ctx.pop.inflight;
                inflight.remove(&ck.topic, &ck.group, ck.pop_time_ms, ck.queue_id, 1);
            }
            Err(why) => failed.push((*offset, why)),
        }
    }
    Ok(failed)
}

/// The topic a checkpoint's messages were popped for (a retry topic's original).
fn normal_topic_of(topic: &str, group: &str) -> String {
    for separator in ['_', '+'] {
        let prefix = format!("{}{group}{separator}", pop::RETRY_TOPIC_PREFIX);
        if let Some(rest) = topic.strip_prefix(&prefix) {
            return rest.to_string();
        }
    }
    topic.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_topics_name_their_original() {
        assert_eq!(normal_topic_of("%RETRY%G_T", "G"), "T");
        assert_eq!(normal_topic_of("%RETRY%G+T_x", "G"), "T_x");
        assert_eq!(normal_topic_of("T", "G"), "T");
    }
}
