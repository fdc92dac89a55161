//! ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME of orderly POP (features.md §f.7): the
//! receipt handle names revive queue 999, and instead of revive-topic records they act on
//! the queue's batch in `order.rs`, under the queue's lock:
//!
//! - an ack marks its message and commits the consumer offset to the first un-acked
//!   message of the batch (past the batch once all are acked); when that opens the queue,
//!   pops waiting on it are woken;
//! - a change of invisible time moves only that message's next visible time (and wakes
//!   the waiting pops to look again); the pop time stays, so the handle keeps naming the
//!   batch.
//!
//! Acks below the committed offset are old news and answered SUCCESS, as upstream does.

use ringmq_remoting::header::pop::ChangeInvisibleTimeResponseHeader;
use ringmq_remoting::pop::ExtraInfo;

use super::order::AckOutcome;
use crate::context::BrokerContext;

/// What an ack or a change of invisible time names.
pub(crate) struct Named<'a> {
    pub topic: &'a str,
    pub group: &'a str,
    pub queue_id: i32,
    pub extra_info: &'a str,
    pub offset: i64,
}

fn committed(ctx: &BrokerContext, n: &Named<'_>) -> i64 {
    ctx.offsets
        .query_offset(n.group, n.topic, n.queue_id)
        .unwrap_or(-1)
}

/// Acks `n.offset` of the orderly pop at `pop_time_ms`; the MESSAGE_ILLEGAL remark when
/// the offset is not in the queue's batch.
pub(crate) fn ack(
    ctx: &BrokerContext,
    n: &Named<'_>,
    pop_time_ms: i64,
    invisible_ms: i64,
) -> Result<(), String> {
    let old = committed(ctx, n);
    if n.offset < old {
        return Ok(());
    }
    let now_ms = crate::persist::now_ms();
    let (outcome, opened) = ctx
        .pop
        .order
        .with_queue(n.topic, n.group, n.queue_id, |slot| {
            if n.offset < committed(ctx, n) {
                return (None, false);
            }
            let outcome = match slot.as_mut() {
                // No batch kept (cleaned, or popped before a restart that lost the file).
                None => AckOutcome::Commit(n.offset + 1),
                Some(info) => info.commit_and_next(n.offset, pop_time_ms, now_ms),
            };
            if let AckOutcome::Commit(next) = outcome {
                // An operator's reset wins over the ack.
                let reset = ctx
                    .offsets
                    .peek_reset_offset(n.group, n.topic, n.queue_id)
                    .is_some();
                if !reset {
                    ctx.offsets
                        .commit_offset(n.group, n.topic, n.queue_id, next);
                }
            }
            let blocked = slot
                .as_ref()
                .is_some_and(|i| i.blocks(None, invisible_ms, now_ms));
            (Some(outcome), !blocked)
        });
    if let Some(AckOutcome::Commit(_)) = outcome {
        let inflight = &ctx.pop.inflight;
        inflight.remove(n.topic, n.group, pop_time_ms, n.queue_id, 1);
    }
    match outcome {
        Some(AckOutcome::Commit(_)) if opened => {
            wake_queue(ctx, n.topic, n.queue_id);
            Ok(())
        }
        Some(AckOutcome::NotInBatch) => Err(format!(
            "offset is illegal, key:{}@{}@{}, old:{old}, commit:{}",
            n.topic, n.group, n.queue_id, n.offset
        )),
        _ => Ok(()),
    }
}

/// Makes `n.offset` invisible for `invisible_ms` from now; the answer keeps the batch's
/// pop time, with the invisible time counted from it.
pub(crate) fn change_invisible_time(
    ctx: &BrokerContext,
    n: &Named<'_>,
    info: &ExtraInfo,
    invisible_ms: i64,
) -> ChangeInvisibleTimeResponseHeader {
    let mut header = ChangeInvisibleTimeResponseHeader {
        pop_time: info.pop_time_ms,
        invisible_time: info.invisible_time_ms,
        revive_qid: info.revive_qid,
    };
    if n.offset < committed(ctx, n) {
        return header;
    }
    let next_visible_ms = crate::persist::now_ms().saturating_add(invisible_ms);
    ctx.pop
        .order
        .with_queue(n.topic, n.group, n.queue_id, |slot| {
            if n.offset < committed(ctx, n) {
                return;
            }
            let kept = slot
                .as_mut()
                .is_some_and(|o| o.set_next_visible(n.offset, info.pop_time_ms, next_visible_ms));
            if !kept {
                tracing::warn!(
                    topic = n.topic,
                    group = n.group,
                    queue_id = n.queue_id,
                    offset = n.offset,
                    "orderly invisible time change for a batch no longer kept"
                );
            }
            header.invisible_time = next_visible_ms.saturating_sub(info.pop_time_ms);
        });
    // The queue may open sooner (or later) than the waiting pops think: they look again.
    wake_queue(ctx, n.topic, n.queue_id);
    header
}

/// Wakes the pops waiting on an orderly queue that just opened, on whichever core they
/// wait (they wait with an accept-all filter and re-run their own).
pub(crate) fn wake_queue(ctx: &BrokerContext, topic: &str, queue_id: i32) {
    let max_offset = ctx.store.max_offset_in_queue(topic, queue_id);
    ctx.hold
        .notify_arrival(topic, queue_id, max_offset.saturating_add(1), 0, &[]);
}
