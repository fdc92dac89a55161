//! PEEK_MESSAGE (200052) and POLLING_INFO (200055), the read-only POP requests:
//!
//! - a peek returns the messages a pop of the group would see next (the retry topic first
//!   one time in five, as a pop), without a checkpoint, without moving any offset and
//!   without making them invisible; PULL_NOT_FOUND when there are none;
//! - polling info counts the pops waiting under `topic@group@queueId`.

use std::sync::Arc;

use bytes::BytesMut;
use ringmq_remoting::codes::ResponseCode;
use ringmq_remoting::header::pop::{
    PeekMessageRequestHeader, PollingInfoRequestHeader, PollingInfoResponseHeader,
    PopMessageResponseHeader,
};
use ringmq_remoting::message::tags::TagFilter;
use ringmq_remoting::pop;
use ringmq_remoting::RemotingCommand;
use ringmq_runtime::Reply;
use ringmq_store::GetMessageStatus;

use super::polling;
use super::processor::{check_queue_readable, next_pop_offset, pop_retry_topic};
use crate::context::{error_response, header_error, BrokerContext};
use crate::filter::tag::TagMessageFilter;

/// Bytes one peek reads from one queue at most.
const MAX_PEEK_BYTES_PER_QUEUE: usize = 4 * 1024 * 1024;

/// What a peek gathered.
struct Peek<'a> {
    ctx: &'a BrokerContext,
    group: &'a str,
    max: usize,
    found: usize,
    rest: i64,
    body: BytesMut,
}

impl Peek<'_> {
    fn read_queue(&mut self, topic: &str, queue_id: i32) {
        let offset = next_pop_offset(self.ctx, self.group, topic, queue_id);
        let max_offset = self.ctx.store.max_offset_in_queue(topic, queue_id);
        self.rest += (max_offset - offset).max(0);
        if self.found >= self.max {
            return;
        }
        let all = TagMessageFilter::exact(TagFilter::All);
        let want = (self.max - self.found) as i32;
        let store = &self.ctx.store;
        let mut result = store.get_message(
            topic,
            queue_id,
            offset,
            want,
            MAX_PEEK_BYTES_PER_QUEUE,
            &all,
        );
        if matches!(
            result.status,
            GetMessageStatus::OffsetTooSmall | GetMessageStatus::OffsetOverflowBadly
        ) {
            // The offset was outside the queue: read from where the store points.
            let from = result.next_begin_offset;
            result = store.get_message(topic, queue_id, from, want, MAX_PEEK_BYTES_PER_QUEUE, &all);
        }
        self.found += result.messages.len();
        for m in &result.messages {
            self.body.extend_from_slice(m);
        }
    }

    fn read_topic(&mut self, topic: &str, only: Option<i32>, draw: u32) {
        let Some(tc) = self.ctx.topics.select(topic) else {
            return;
        };
        let queues = tc.read_queue_nums.max(0) as u32;
        match only {
            Some(q) => self.read_queue(topic, q),
            None => {
                for i in 0..queues {
                    self.read_queue(topic, ((draw + i) % queues) as i32);
                }
            }
        }
    }
}

/// PEEK_MESSAGE.
pub fn peek_message(ctx: &Arc<BrokerContext>, request: &RemotingCommand) -> Reply {
    let h: PeekMessageRequestHeader = match request.decode_header() {
        Ok(h) => h,
        Err(e) => return header_error(request, e),
    };
    if let Err((code, remark)) = check_queue_readable(ctx, &h.topic, h.queue_id, &h.consumer_group)
    {
        return Reply::Now(error_response(request, code, remark).into());
    }
    let mut peek = Peek {
        ctx,
        group: &h.consumer_group,
        max: h.max_msg_nums.clamp(1, pop::MAX_CK_MESSAGES as i32) as usize,
        found: 0,
        rest: 0,
        body: BytesMut::new(),
    };
    let draw = crate::random::random_below(100);
    let retry_first = draw.is_multiple_of(5);
    let retry_topic = pop_retry_topic(&ctx.config, &h.topic, &h.consumer_group, draw);
    if retry_first {
        peek.read_topic(&retry_topic, None, draw);
    }
    peek.read_topic(&h.topic, (h.queue_id >= 0).then_some(h.queue_id), draw);
    if !retry_first && peek.found < peek.max {
        peek.read_topic(&retry_topic, None, draw);
    }
    let (code, status) = if peek.found > 0 {
        (ResponseCode::Success, "FOUND")
    } else {
        (ResponseCode::PullNotFound, "NO_MESSAGE_IN_QUEUE")
    };
    let mut response = request.response_to(code.code(), Some(status.to_string()));
    response.set_header(&PopMessageResponseHeader {
        pop_time: 0,
        invisible_time: 0,
        revive_qid: 0,
        rest_num: peek.rest,
        start_offset_info: None,
        msg_offset_info: None,
        order_count_info: None,
    });
    response.body = peek.body.freeze();
    Reply::Now(response.into())
}

/// POLLING_INFO.
pub fn polling_info(ctx: &Arc<BrokerContext>, request: &RemotingCommand) -> Reply {
    let h: PollingInfoRequestHeader = match request.decode_header() {
        Ok(h) => h,
        Err(e) => return header_error(request, e),
    };
    if let Err((code, remark)) = check_queue_readable(ctx, &h.topic, h.queue_id, &h.consumer_group)
    {
        return Reply::Now(error_response(request, code, remark).into());
    }
    let key = pop::queue_key(&h.topic, &h.consumer_group, h.queue_id);
    let waiting = polling::waiting_under(ctx, &key);
    let mut response = request.response_to(ResponseCode::Success.code(), None);
    response.set_header(&PollingInfoResponseHeader {
        polling_num: i32::try_from(waiting).unwrap_or(i32::MAX),
    });
    Reply::Now(response.into())
}
