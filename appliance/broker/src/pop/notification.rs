//! NOTIFICATION (200054), the gRPC proxy's "is there anything to pop?": answered at once
//! when a queue of the topic or one of the group's POP retry queues holds a message past
//! what the group was handed, else after waiting (as a pop waits, `polling.rs`) up to its
//! `pollTime`. For an orderly group a queue whose batch is still invisible has nothing to
//! offer, and retry topics are not looked at.

use std::sync::Arc;

use ringmq_remoting::codes::ResponseCode;
use ringmq_remoting::header::pop::{NotificationRequestHeader, NotificationResponseHeader};
use ringmq_remoting::pop;
use ringmq_remoting::RemotingCommand;
use ringmq_runtime::{Reply, RequestContext, Responder};

use super::filter::PopFilter;
use super::polling::{self, Place, Watch};
use super::processor::{next_pop_offset, MAX_POLL_MS};
use crate::context::{error_response, header_error, BrokerContext};

/// NOTIFICATION (the gRPC proxy's "is there anything to pop?"): answers `hasMsg` at once
/// when a queue of the topic or the group's retry queue holds a message past the group's
/// offset, else waits up to `pollTime` for one.
pub fn notification(
    ctx: &Arc<BrokerContext>,
    request: RemotingCommand,
    rc: &RequestContext,
) -> Reply {
    let h: NotificationRequestHeader = match request.decode_header() {
        Ok(h) => h,
        Err(e) => return header_error(&request, e),
    };
    let refuse = |code, remark: String| Reply::Now(error_response(&request, code, remark).into());
    let Some(tc) = ctx.topics.select(&h.topic) else {
        return refuse(
            ResponseCode::TopicNotExist,
            format!("topic[{}] not exist", h.topic),
        );
    };
    if h.queue_id >= tc.read_queue_nums {
        return refuse(
            ResponseCode::InvalidParameter,
            format!("queueId[{}] is illegal", h.queue_id),
        );
    }
    if ctx.groups.find(&h.consumer_group).is_none() {
        let remark = format!("subscription group [{}] does not exist", h.consumer_group);
        return refuse(ResponseCode::SubscriptionGroupNotExist, remark);
    }
    let deadline_ms = crate::persist::now_ms() + h.poll_time.clamp(0, MAX_POLL_MS);
    let notice = Notice {
        request,
        h,
        responder: rc.responder(),
        core: rc.core_index(),
        deadline_ms,
    };
    notice.run(ctx);
    Reply::Later
}

/// A NOTIFICATION being served.
struct Notice {
    request: RemotingCommand,
    h: NotificationRequestHeader,
    responder: Responder,
    core: usize,
    deadline_ms: i64,
}

impl Notice {
    /// The queues a pop of this group would read, from the group's offsets (read-only:
    /// nothing is committed for a queue never popped).
    fn watches(&self, ctx: &BrokerContext) -> Vec<Watch> {
        let (group, topic) = (&self.h.consumer_group, &self.h.topic);
        let mut queues: Vec<(String, i32)> = match self.h.queue_id {
            q if q >= 0 => vec![(topic.clone(), q)],
            _ => {
                let n = ctx.topics.select(topic).map_or(0, |tc| tc.read_queue_nums);
                (0..n).map(|q| (topic.clone(), q)).collect()
            }
        };
        // Orderly pops never read retry topics.
        for v2 in [false, true].into_iter().filter(|_| !self.h.order) {
            let retry = pop::retry_topic(topic, group, v2);
            if ctx.topics.select(&retry).is_some() {
                queues.push((retry, 0));
            }
        }
        queues
            .into_iter()
            .map(|(topic, queue_id)| {
                if self.h.order && self.blocked(ctx, &topic, queue_id) {
                    // Nothing there is news until the batch is acked (which wakes this)
                    // or more arrives.
                    let offset = ctx.store.max_offset_in_queue(&topic, queue_id);
                    return Watch {
                        topic,
                        queue_id,
                        offset,
                    };
                }
                let offset = next_pop_offset(ctx, group, &topic, queue_id);
                Watch {
                    topic,
                    queue_id,
                    offset,
                }
            })
            .collect()
    }

    /// Whether an orderly queue holds a batch that is still invisible (as upstream, the
    /// batch's own invisible time counts: the notification carries none).
    fn blocked(&self, ctx: &BrokerContext, topic: &str, queue_id: i32) -> bool {
        let (group, attempt) = (&self.h.consumer_group, self.h.attempt_id.as_deref());
        let now_ms = crate::persist::now_ms();
        ctx.pop.order.with_queue(topic, group, queue_id, |slot| {
            slot.as_ref()
                .is_some_and(|info| info.blocks(attempt, 0, now_ms))
        })
    }

    fn run(self, ctx: &Arc<BrokerContext>) {
        let watches = self.watches(ctx);
        let has_msg = watches
            .iter()
            .any(|w| ctx.store.max_offset_in_queue(&w.topic, w.queue_id) > w.offset);
        if has_msg || crate::persist::now_ms() >= self.deadline_ms || watches.is_empty() {
            return self.answer(has_msg, false);
        }
        let key = pop::queue_key(&self.h.topic, &self.h.consumer_group, self.h.queue_id);
        if !polling::reserve(ctx, &key) {
            return self.answer(false, true);
        }
        let place = Place {
            key,
            deadline_ms: self.deadline_ms,
        };
        let (core, ctx2) = (self.core, ctx.clone());
        let fire: polling::Fire = Box::new(move || self.run(&ctx2));
        polling::park(ctx, core, &watches, Arc::new(PopFilter::all()), place, fire);
    }

    fn answer(self, has_msg: bool, polling_full: bool) {
        let mut response = self.request.response_to(ResponseCode::Success.code(), None);
        response.set_header(&NotificationResponseHeader {
            has_msg,
            polling_full,
        });
        self.responder.respond(response);
    }
}
