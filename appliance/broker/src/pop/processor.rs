//! POP_MESSAGE (200050), ACK_MESSAGE (200051) and CHANGE_MESSAGE_INVISIBLETIME (200053)
//! in checkpoint mode (features.md §f.4, §f.6), without buffer merging (upstream's default):
//!
//! - a pop reads the retry topic first one time in five (else after the topic, if the
//!   batch is not full), writes one checkpoint per queue it took messages from, and
//!   answers once every checkpoint is stored; only then do the queues' consumer offsets
//!   move past the messages, so a crash before that hands them out again (at least once);
//! - while checkpoints are being stored, later pops of the same queue start after what was
//!   handed out (`PopState`), never hand it out twice;
//! - acks and changes of invisible time are in `ack.rs`, NOTIFICATION in
//!   `notification.rs`; the revive service (`revive.rs`) re-delivers what is not acked.
//!
//! An orderly pop (`order=true`, §f.7) writes no checkpoint: it hands out a batch per
//! queue, commits the queue's offset to the batch start and keeps the batch in
//! `order.rs`; the queue stays blocked until the batch is acked or visible again, and an
//! ack moves the offset to the first un-acked message.
//!
//! A pop that finds nothing waits up to its `pollTime` for a message (`polling.rs`).
//!
//! Not yet: SQL92 expressions for POP; refused with a remark saying so.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use ringmq_remoting::body::topic::perm;
use ringmq_remoting::codes::ResponseCode;
use ringmq_remoting::header::pop::{PopMessageRequestHeader, PopMessageResponseHeader};
use ringmq_remoting::message::properties::{keys, MessageProperties};
use ringmq_remoting::message::record::{self, Decoded};
use ringmq_remoting::pop::{self, ExtraInfo, PopCheckPoint, RetryKind};
use ringmq_remoting::RemotingCommand;
use ringmq_runtime::{Reply, RequestContext, Responder};
use ringmq_store::{GetMessageResult, PutMessageStatus, PutResult};
use ringmq_sync::LockExt;

use super::buffer::{commit, HoldSettings, PopBuffer, QueueRef};
use super::filter::PopFilter;
use super::inflight::InflightCounter;
use super::order::{ConsumerOrderInfoManager, OrderInfo};
use super::polling::{self, Place, Watch};
use super::revive_log;
use crate::context::{error_response, header_error, BrokerContext};
use crate::metadata::topic_config::{PERM_READ, PERM_WRITE};

/// Revive queues of the revive topic (`reviveQueueNum`).
pub const REVIVE_QUEUE_NUM: u32 = 8;
/// One pop in this many reads the retry topic first (`popFromRetryProbability` = 20 %).
const RETRY_FIRST_PERCENT: u32 = 20;
/// A pop arriving later than this after its poll time ended is answered POLLING_TIMEOUT
/// at once (the client gave up on it).
const POLL_LATE_LIMIT_MS: i64 = 500;
/// The longest a pop waits for a message (its `pollTime` is capped to this).
pub(crate) const MAX_POLL_MS: i64 = 120_000;
/// Bytes one pop reads from one queue at most.
const MAX_POP_BYTES_PER_QUEUE: usize = 4 * 1024 * 1024;

/// What pops share: the offsets handed out ahead of the committed ones, and the revive
/// queue counter.
#[derive(Debug, Default)]
pub struct PopState {
    handed_out: Mutex<HashMap<String, i64>>,
    next_revive_qid: AtomicU32,
    /// Pops and notifications waiting for a message now (`polling.rs`).
    pub(crate) polling: AtomicUsize,
    /// The same, by polling key (`polling.rs`).
    pub(crate) polling_by_key: Mutex<HashMap<String, usize>>,
    /// Orderly POP batches (`consumerOrderInfo.json`).
    pub order: ConsumerOrderInfoManager,
    /// Checkpoint pops' offset lines and held checkpoints.
    pub buffer: PopBuffer,
    /// Messages in flight per queue of a group.
    pub inflight: InflightCounter,
}

impl PopState {
    fn revive_qid(&self) -> i32 {
        (self.next_revive_qid.fetch_add(1, Ordering::Relaxed) % REVIVE_QUEUE_NUM) as i32
    }

    /// The next offset a checkpoint pop of `key` (`topic@group@queueId`) hands out, when
    /// it is ahead of the committed one.
    pub(crate) fn handed_out(&self, key: &str) -> Option<i64> {
        self.handed_out.lock_unpoisoned().get(key).copied()
    }

    fn hand_out(&self, key: &str, next: i64) {
        let mut map = self.handed_out.lock_unpoisoned();
        let slot = map.entry(key.to_string()).or_insert(next);
        *slot = (*slot).max(next);
    }

    /// Forgets what was handed out of a queue whose offset an operator reset.
    fn forget(&self, key: &str) {
        self.handed_out.lock_unpoisoned().remove(key);
    }

    /// Takes back what a failed checkpoint handed out (if nothing was handed out since).
    fn take_back(&self, key: &str, handed: i64, start: i64) {
        let mut map = self.handed_out.lock_unpoisoned();
        if map.get(key) == Some(&handed) {
            map.insert(key.to_string(), start);
        }
    }
}

/// Where the next pop of `group` reads the queue, without committing anything: the
/// committed offset (the queue's start when none), or past what was handed out ahead of
/// it. What PEEK reads and NOTIFICATION watches.
pub(crate) fn next_pop_offset(ctx: &BrokerContext, group: &str, topic: &str, queue_id: i32) -> i64 {
    let committed = ctx.offsets.query_offset(group, topic, queue_id);
    let start = committed.unwrap_or_else(|| ctx.store.min_offset_in_queue(topic, queue_id));
    let handed = ctx.pop.handed_out(&pop::queue_key(topic, group, queue_id));
    start.max(handed.unwrap_or(i64::MIN))
}

/// The messages one pop took from one queue.
struct QueueTake {
    topic: String,
    queue_id: i32,
    start_offset: i64,
    next_offset: i64,
    offsets: Vec<i64>,
    records: Vec<Bytes>,
}

/// A pop under way: what it read so far.
struct PopBatch<'a> {
    ctx: &'a BrokerContext,
    h: &'a PopMessageRequestHeader,
    /// The pop's expression (`filter.rs`).
    filter: Arc<PopFilter>,
    takes: Vec<QueueTake>,
    found: usize,
    rest: i64,
    /// Every queue read, from where it was read: what a pop that found nothing waits on.
    watches: Vec<Watch>,
    pop_time_ms: i64,
    /// Orderly: `orderCountInfo` of the batch so far.
    order_count_info: String,
    /// Orderly: the earliest time a queue skipped as blocked opens again.
    unblock_at_ms: Option<i64>,
}

impl PopBatch<'_> {
    fn wanted(&self) -> usize {
        usize::try_from(self.h.max_msg_nums)
            .unwrap_or(0)
            .saturating_sub(self.found)
    }

    /// Reads the queues of `topic` from `first` round-robin (or only `only`).
    fn read_topic(&mut self, topic: &str, only: Option<i32>, first: u32) {
        let Some(tc) = self.ctx.topics.select(topic) else {
            return;
        };
        let queues = tc.read_queue_nums.max(0) as u32;
        let order: Vec<i32> = match only {
            Some(q) => vec![q],
            None => (0..queues)
                .map(|i| ((first + i) % queues.max(1)) as i32)
                .collect(),
        };
        for queue_id in order {
            if self.wanted() == 0 {
                break;
            }
            self.read_queue(topic, queue_id);
        }
    }

    /// Where a pop of the queue starts: a reset offset an operator set, else the committed
    /// offset (or the initial one, committed now), and for checkpoint pops not before what
    /// was handed out already. The flag says whether a reset was taken.
    fn start_offset(&self, topic: &str, queue_id: i32, key: &str) -> (i64, bool) {
        let group = &self.h.consumer_group;
        let store = &self.ctx.store;
        if let Some(reset) = self.ctx.offsets.take_reset_offset(group, topic, queue_id) {
            self.ctx.pop.forget(key);
            self.ctx
                .offsets
                .commit_offset(group, topic, queue_id, reset);
            return (reset, true);
        }
        let committed = self.ctx.offsets.query_offset(group, topic, queue_id);
        let start = committed.unwrap_or_else(|| {
            let min = store.min_offset_in_queue(topic, queue_id);
            // initMode 1 (MAX) starts at the end, except on retry topics and new queues,
            // and (initPopOffsetByCheckMsgInMem) on a queue whose first message is still
            // in memory: a group that starts soon after the queue did sees all of it.
            if self.h.init_mode == 1 && !topic.starts_with(pop::RETRY_TOPIC_PREFIX) {
                if self.ctx.config.init_pop_offset_by_check_msg_in_mem
                    && min <= 0
                    && first_message_in_memory(store.as_ref(), topic, queue_id)
                {
                    0
                } else {
                    (store.max_offset_in_queue(topic, queue_id) - 1)
                        .max(min)
                        .max(0)
                }
            } else {
                min
            }
        });
        if committed.is_none() {
            self.ctx
                .offsets
                .commit_offset(group, topic, queue_id, start);
        }
        if self.h.order {
            return (start, false);
        }
        (
            start.max(self.ctx.pop.handed_out(key).unwrap_or(i64::MIN)),
            false,
        )
    }

    /// `enablePopMessageThreshold`: whether the queue has more than
    /// `popInflightMessageThreshold` messages handed out and not yet acked.
    fn too_many_in_flight(&self, topic: &str, queue_id: i32) -> bool {
        let config = &self.ctx.config;
        config.enable_pop_message_threshold
            && self
                .ctx
                .pop
                .inflight
                .get(topic, &self.h.consumer_group, queue_id)
                > config.pop_inflight_message_threshold
    }

    /// Reads what is wanted from `start`, counts the rest and watches the queue from the
    /// next offset; the read and that next offset.
    fn read_from(&mut self, topic: &str, queue_id: i32, start: i64) -> (GetMessageResult, i64) {
        let want = self.wanted() as i32;
        let store = &self.ctx.store;
        let filter = self.filter.for_topic(topic);
        let result = store.get_message(
            topic,
            queue_id,
            start,
            want,
            MAX_POP_BYTES_PER_QUEUE,
            filter,
        );
        let next = result.next_begin_offset.max(start);
        self.rest += (result.max_offset - next).max(0);
        self.watches.push(Watch {
            topic: topic.to_string(),
            queue_id,
            offset: next,
        });
        (result, next)
    }

    fn read_queue(&mut self, topic: &str, queue_id: i32) {
        if self.h.order {
            return self.read_order_queue(topic, queue_id);
        }
        let group = self.h.consumer_group.clone();
        let key = pop::queue_key(topic, &group, queue_id);
        let (start, _) = self.start_offset(topic, queue_id, &key);
        if self.too_many_in_flight(topic, queue_id) {
            let max_offset = self.ctx.store.max_offset_in_queue(topic, queue_id);
            self.rest += (max_offset - start).max(0);
            return;
        }
        let (result, next) = self.read_from(topic, queue_id, start);
        let mut take = QueueTake {
            topic: topic.to_string(),
            queue_id,
            start_offset: start,
            next_offset: next,
            offsets: Vec::new(),
            records: Vec::new(),
        };
        take.offsets = result.message_queue_offsets;
        take.records = result.messages;
        if take.offsets.is_empty() {
            // Nothing to checkpoint: the offset may move past what the filter skipped,
            // in line after the pops before it.
            if next > start {
                let queue = QueueRef {
                    group: group.clone(),
                    topic: topic.to_string(),
                    queue_id,
                };
                let settings = hold_settings(&self.ctx.config);
                let buffer = &self.ctx.pop.buffer;
                let (place, _) = buffer.add(&key, &queue, next, None, &settings, 0);
                commit(self.ctx, buffer.done(&key, place));
            }
            return;
        }
        self.ctx.pop.hand_out(&key, next);
        let inflight = &self.ctx.pop.inflight;
        inflight.add(topic, &group, queue_id, take.offsets.len());
        self.found += take.offsets.len();
        self.takes.push(take);
    }

    /// Orderly: under the queue's lock, skips a blocked queue (waiting on new messages
    /// only), else hands out a batch from the committed offset and keeps it as the
    /// queue's order state.
    fn read_order_queue(&mut self, topic: &str, queue_id: i32) {
        let ctx = self.ctx;
        let group = self.h.consumer_group.clone();
        let key = pop::queue_key(topic, &group, queue_id);
        ctx.pop.order.with_queue(topic, &group, queue_id, |slot| {
            let (start, reset) = self.start_offset(topic, queue_id, &key);
            if reset {
                *slot = None;
            }
            let (attempt, invisible_ms) = (self.h.attempt_id.as_deref(), self.h.invisible_time);
            if let Some(info) = slot
                .as_ref()
                .filter(|i| i.blocks(attempt, invisible_ms, self.pop_time_ms))
            {
                let at = info.unblock_at_ms(invisible_ms, self.pop_time_ms);
                self.unblock_at_ms = Some(self.unblock_at_ms.map_or(at, |t| t.min(at)));
                let offset = ctx.store.max_offset_in_queue(topic, queue_id);
                self.watches.push(Watch {
                    topic: topic.to_string(),
                    queue_id,
                    offset,
                });
                return;
            }
            ctx.pop.inflight.clear(topic, &group, queue_id);
            let (result, next) = self.read_from(topic, queue_id, start);
            if result.message_queue_offsets.is_empty() {
                if next > start {
                    ctx.offsets.commit_offset(&group, topic, queue_id, next);
                }
                return;
            }
            let offsets = result.message_queue_offsets;
            let mut info = OrderInfo::new(
                self.h.attempt_id.clone(),
                self.pop_time_ms,
                invisible_ms,
                offsets.clone(),
                crate::persist::now_ms(),
            );
            if let Some(previous) = slot.as_ref() {
                info.merge_consumed(previous);
            }
            for &o in &offsets {
                pop::push_order_count_info(
                    &mut self.order_count_info,
                    topic,
                    queue_id,
                    o,
                    info.consumed_times(o),
                );
            }
            pop::push_queue_order_count_info(
                &mut self.order_count_info,
                topic,
                queue_id,
                info.min_consumed_times(),
            );
            *slot = Some(info);
            ctx.offsets.commit_offset(&group, topic, queue_id, start);
            ctx.pop.inflight.add(topic, &group, queue_id, offsets.len());
            self.found += offsets.len();
            self.takes.push(QueueTake {
                topic: topic.to_string(),
                queue_id,
                start_offset: start,
                next_offset: next,
                offsets,
                records: result.messages,
            });
        });
    }
}

/// The POP retry topic a pop with random `draw` (0..100) reads: the V2 name with
/// `enableRetryTopicV2`, except on even draws while `retrieveMessageFromPopRetryTopicV1`
/// drains the V1 topics (one kind per pop, as upstream).
pub(crate) fn pop_retry_topic(
    config: &crate::config::BrokerConfig,
    topic: &str,
    group: &str,
    draw: u32,
) -> String {
    let v2 = config.enable_retry_topic_v2;
    let v1_now = v2 && config.retrieve_message_from_pop_retry_topic_v1 && draw.is_multiple_of(2);
    pop::retry_topic(topic, group, v2 && !v1_now)
}

/// Why the broker refuses to let `group` read `topic` (queue `queue_id`, -1 = any), in
/// upstream's order: broker readable, topic known and readable, queue id, group known and
/// allowed to consume.
pub(crate) fn check_queue_readable(
    ctx: &BrokerContext,
    topic: &str,
    queue_id: i32,
    group: &str,
) -> Result<(), (ResponseCode, String)> {
    use ResponseCode as R;
    if !ctx.live.is_readable() {
        let ip = &ctx.config.broker_ip1;
        return Err((
            R::NoPermission,
            format!("the broker[{ip}] popping message is forbidden"),
        ));
    }
    let Some(tc) = ctx.topics.select(topic) else {
        let remark = format!("topic[{topic}] not exist, apply first please!");
        return Err((R::TopicNotExist, remark));
    };
    if !perm::is_readable(tc.perm) {
        let remark = format!("the topic[{topic}] peeking message is forbidden");
        return Err((R::NoPermission, remark));
    }
    if queue_id >= tc.read_queue_nums {
        let remark = format!(
            "queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{}]",
            tc.read_queue_nums
        );
        return Err((R::InvalidParameter, remark));
    }
    let Some(config) = ctx.groups.find(group) else {
        let remark = format!("subscription group [{group}] does not exist");
        return Err((R::SubscriptionGroupNotExist, remark));
    };
    if !config.consume_enable {
        let remark = format!("subscription group no permission, {group}");
        return Err((R::NoPermission, remark));
    }
    Ok(())
}

/// Why a pop is refused before reading, as upstream checks in order; else its filter.
fn check_pop(
    ctx: &BrokerContext,
    h: &PopMessageRequestHeader,
) -> Result<PopFilter, (ResponseCode, String)> {
    use ResponseCode as R;
    let late_ms = crate::persist::now_ms()
        .saturating_sub(h.born_time)
        .saturating_sub(h.poll_time);
    if late_ms > POLL_LATE_LIMIT_MS {
        return Err((
            R::PollingTimeout,
            format!("the pop arrived {late_ms} ms after its poll time ended"),
        ));
    }
    if h.invisible_time < 0 {
        let remark = format!("invisibleTime {} is negative", h.invisible_time);
        return Err((R::InvalidParameter, remark));
    }
    if h.max_msg_nums <= 0 || h.max_msg_nums > pop::MAX_CK_MESSAGES as i32 {
        return Err((
            R::InvalidParameter,
            format!("the broker pops 1 to 32 messages, not {}", h.max_msg_nums),
        ));
    }
    if !ctx.config.timer_wheel_enable {
        return Err((
            R::SystemError,
            "POP needs the timer: timerWheelEnable is false".into(),
        ));
    }
    if !ctx.is_master() {
        return Err((R::SystemError, "POP is served by the master only".into()));
    }
    let sql = match h.exp_type.as_deref() {
        None => false,
        Some(t) if t.eq_ignore_ascii_case("TAG") => false,
        Some(t) if t.eq_ignore_ascii_case("SQL92") => true,
        Some(t) => {
            return Err((R::SubscriptionParseFailed, format!("unknown expType {t:?}")));
        }
    };
    check_queue_readable(ctx, &h.topic, h.queue_id, &h.consumer_group)?;
    let exp = h.exp.as_deref().unwrap_or("*");
    if !sql {
        return crate::filter::tag::parse_subscription(exp)
            .map(PopFilter::tag)
            .map_err(|why| (R::SubscriptionParseFailed, why));
    }
    match ctx.sql92.map(|compile| compile(exp)) {
        Some(Ok(predicate)) => Ok(PopFilter::sql(predicate)),
        Some(Err(e)) => Err((
            R::SubscriptionParseFailed,
            format!("parse the pop's expression failed: {e}"),
        )),
        None => Err((
            R::SystemError,
            "SQL92 filtering is not available in this broker build".into(),
        )),
    }
}

/// POP_MESSAGE.
pub fn pop_message(
    ctx: &Arc<BrokerContext>,
    request: RemotingCommand,
    rc: &RequestContext,
) -> Reply {
    let h: PopMessageRequestHeader = match request.decode_header() {
        Ok(h) => h,
        Err(e) => return header_error(&request, e),
    };
    let filter = match check_pop(ctx, &h) {
        Ok(filter) => filter,
        Err((code, remark)) => return Reply::Now(error_response(&request, code, remark).into()),
    };
    let now_ms = crate::persist::now_ms();
    let deadline_ms = now_ms + h.poll_time.clamp(0, MAX_POLL_MS);
    let attempt = PopAttempt {
        request,
        h,
        filter: Arc::new(filter),
        responder: rc.responder(),
        core: rc.core_index(),
        deadline_ms,
    };
    attempt.run(ctx);
    Reply::Later
}

/// A pop being served: read now, or wait (long polling) and read again when woken.
struct PopAttempt {
    request: RemotingCommand,
    h: PopMessageRequestHeader,
    filter: Arc<PopFilter>,
    responder: Responder,
    core: usize,
    deadline_ms: i64,
}

impl PopAttempt {
    fn run(self, ctx: &Arc<BrokerContext>) {
        let pop_time_ms = crate::persist::now_ms();
        let h = &self.h;
        let revive_qid = if h.order {
            pop::ORDER_REVIVE_QUEUE
        } else {
            ctx.pop.revive_qid()
        };
        let draw = crate::random::random_below(100);
        let retry_topic = pop_retry_topic(&ctx.config, &h.topic, &h.consumer_group, draw);
        let mut batch = PopBatch {
            ctx,
            h,
            filter: self.filter.clone(),
            takes: Vec::new(),
            found: 0,
            rest: 0,
            watches: Vec::new(),
            pop_time_ms,
            order_count_info: String::new(),
            unblock_at_ms: None,
        };
        let only = (h.queue_id >= 0).then_some(h.queue_id);
        // Orderly pops never read retry topics: their messages come back in place.
        let with_retry = !h.order;
        if with_retry && draw < RETRY_FIRST_PERCENT {
            batch.read_topic(&retry_topic, None, draw);
        }
        batch.read_topic(&h.topic, only, draw);
        if with_retry && draw >= RETRY_FIRST_PERCENT {
            batch.read_topic(&retry_topic, None, draw);
        }
        let PopBatch {
            takes,
            rest,
            watches,
            order_count_info,
            unblock_at_ms,
            ..
        } = batch;
        if !takes.is_empty() {
            let head = AnswerHead {
                pop_time_ms,
                revive_qid,
                rest,
                order_count_info: h.order.then_some(order_count_info),
            };
            let answer = PopAnswer::build(ctx, h, &self.request, takes, head);
            if h.order {
                // The offsets were committed and the batch kept while reading.
                self.responder.respond(answer.response);
                return;
            }
            answer.store_checkpoints(ctx.clone(), self.responder, revive_qid);
            return;
        }
        if pop_time_ms >= self.deadline_ms || watches.is_empty() {
            return self.refuse(ResponseCode::PollingTimeout, "no new message");
        }
        let key = pop::queue_key(&h.topic, &h.consumer_group, h.queue_id);
        if !polling::reserve(ctx, &key) {
            let remark = format!(
                "{} pops already wait on this broker, or {} on {key}",
                polling::MAX_POP_POLLING,
                polling::POP_POLLING_SIZE
            );
            return self.refuse(ResponseCode::PollingFull, &remark);
        }
        // A blocked orderly queue is looked at again when it opens (an ack wakes it
        // sooner).
        let deadline_ms = unblock_at_ms.map_or(self.deadline_ms, |t| t.min(self.deadline_ms));
        let place = Place { key, deadline_ms };
        // Orderly waits wake on any arrival or ack of their queues: the re-run filters.
        let filter = if h.order {
            Arc::new(PopFilter::all())
        } else {
            self.filter.clone()
        };
        let (core, ctx2) = (self.core, ctx.clone());
        let fire: polling::Fire = Box::new(move || self.run(&ctx2));
        polling::park(ctx, core, &watches, filter, place, fire);
    }

    fn refuse(self, code: ResponseCode, remark: &str) {
        self.responder
            .respond(error_response(&self.request, code, remark));
    }
}

/// The header fields of a pop's answer besides those of the request.
struct AnswerHead {
    pop_time_ms: i64,
    revive_qid: i32,
    rest: i64,
    /// Orderly pops only.
    order_count_info: Option<String>,
}

/// The answer of a pop that found messages, waiting for its checkpoints.
struct PopAnswer {
    response: RemotingCommand,
    group: String,
    takes: Vec<QueueTake>,
    checkpoints: Vec<PopCheckPoint>,
}

impl PopAnswer {
    /// The answer, and (checkpoint pops only) a checkpoint per queue taken from.
    fn build(
        ctx: &BrokerContext,
        h: &PopMessageRequestHeader,
        request: &RemotingCommand,
        takes: Vec<QueueTake>,
        head: AnswerHead,
    ) -> Self {
        let AnswerHead {
            pop_time_ms,
            revive_qid,
            rest,
            order_count_info,
        } = head;
        let broker_name = ctx.config.broker_name.clone();
        let (mut start_info, mut msg_info) = (String::new(), String::new());
        let mut body = BytesMut::new();
        let mut checkpoints = Vec::with_capacity(takes.len());
        for take in &takes {
            pop::push_start_offset_info(
                &mut start_info,
                &take.topic,
                take.queue_id,
                take.start_offset,
            );
            pop::push_msg_offset_info(&mut msg_info, &take.topic, take.queue_id, &take.offsets);
            if !h.order {
                checkpoints.push(PopCheckPoint {
                    start_offset: take.start_offset,
                    pop_time_ms,
                    invisible_time_ms: h.invisible_time,
                    num: take.offsets.len() as u8,
                    queue_id: take.queue_id,
                    topic: take.topic.clone(),
                    group: h.consumer_group.clone(),
                    queue_offset_diff: take
                        .offsets
                        .iter()
                        .map(|o| (o - take.start_offset) as i32)
                        .collect(),
                    broker_name: Some(broker_name.clone()),
                    ..Default::default()
                });
            }
            let retry = RetryKind::of_topic(&take.topic);
            for (bytes, offset) in take.records.iter().zip(&take.offsets) {
                if retry == RetryKind::Normal {
                    body.extend_from_slice(bytes);
                    continue;
                }
                let handle = ExtraInfo {
                    ck_start_offset: take.start_offset,
                    pop_time_ms,
                    invisible_time_ms: h.invisible_time,
                    revive_qid,
                    retry,
                    broker_name: broker_name.clone(),
                    queue_id: take.queue_id,
                    msg_queue_offset: Some(*offset),
                };
                as_original_topic(bytes, &h.topic, &handle.to_string(), &mut body);
            }
        }
        let header = PopMessageResponseHeader {
            pop_time: pop_time_ms,
            invisible_time: h.invisible_time,
            revive_qid,
            rest_num: rest,
            start_offset_info: Some(start_info),
            msg_offset_info: Some(msg_info),
            order_count_info,
        };
        let mut response = request.response_to(ResponseCode::Success.code(), None);
        response.set_header(&header);
        response.body = body.freeze();
        Self {
            response,
            group: h.consumer_group.clone(),
            takes,
            checkpoints,
        }
    }

    /// Gives every checkpoint its place in its queue's line (`buffer.rs`), holds those the
    /// buffer may hold and stores the others; answers when all are stored. A checkpoint
    /// that is not stored fails the pop (its messages were never handed out for good).
    fn store_checkpoints(self, ctx: Arc<BrokerContext>, responder: Responder, revive_qid: i32) {
        let settings = hold_settings(&ctx.config);
        let now_ms = crate::persist::now_ms();
        let mut puts = Vec::new();
        for (take, ck) in self.takes.iter().zip(&self.checkpoints) {
            let key = pop::queue_key(&take.topic, &self.group, take.queue_id);
            let queue = QueueRef {
                group: self.group.clone(),
                topic: take.topic.clone(),
                queue_id: take.queue_id,
            };
            let hold = Some((ck.clone(), revive_qid));
            let buffer = &ctx.pop.buffer;
            let (place, held) = buffer.add(&key, &queue, take.next_offset, hold, &settings, now_ms);
            if !held {
                puts.push((key, place, revive_log::ck_put(&ctx, revive_qid, ck)));
            }
        }
        let pending = Arc::new(AtomicUsize::new(puts.len()));
        let failure: Arc<Mutex<Option<String>>> = Arc::default();
        let shared = Arc::new(Mutex::new(Some((self, responder))));
        if puts.is_empty() {
            if let Some((answer, responder)) = shared.lock_unpoisoned().take() {
                answer.finish(&ctx, responder, None);
            }
            return;
        }
        for (key, place, put) in puts {
            let finish = {
                let (ctx, pending, failure, shared) = (
                    ctx.clone(),
                    pending.clone(),
                    failure.clone(),
                    shared.clone(),
                );
                move |error: Option<String>| {
                    let line = match &error {
                        None => ctx.pop.buffer.done(&key, place),
                        Some(_) => ctx.pop.buffer.drop_place(&key, place),
                    };
                    commit(&ctx, line);
                    if let Some(e) = error {
                        failure.lock_unpoisoned().get_or_insert(e);
                    }
                    if pending.fetch_sub(1, Ordering::AcqRel) == 1 {
                        if let Some((answer, responder)) = shared.lock_unpoisoned().take() {
                            answer.finish(&ctx, responder, failure.lock_unpoisoned().take());
                        }
                    }
                }
            };
            match put {
                Ok(put) => ctx.store.put(
                    put,
                    Box::new(move |r: PutResult| {
                        let error = (r.status != PutMessageStatus::PutOk)
                            .then(|| format!("checkpoint not stored: {}", r.status.name()));
                        finish(error)
                    }),
                ),
                Err(e) => finish(Some(format!("checkpoint not written: {e}"))),
            }
        }
    }

    fn finish(self, ctx: &BrokerContext, responder: Responder, failure: Option<String>) {
        match failure {
            None => responder.respond(self.response),
            Some(e) => {
                for take in &self.takes {
                    let key = pop::queue_key(&take.topic, &self.group, take.queue_id);
                    ctx.pop.take_back(&key, take.next_offset, take.start_offset);
                }
                tracing::warn!(group = self.group, "pop failed: {e}");
                let mut response = self.response;
                response.code = ResponseCode::SystemError.code();
                response.remark = Some(e);
                response.body = Bytes::new();
                response.ext_fields = Default::default();
                responder.respond(response);
            }
        }
    }
}

/// The buffer's settings from the broker's (`popCk*`, `enablePopBufferMerge`).
pub(crate) fn hold_settings(config: &crate::config::BrokerConfig) -> HoldSettings {
    HoldSettings {
        enabled: config.enable_pop_buffer_merge,
        stay_ms: config.pop_ck_stay_buffer_time_ms as i64,
        stay_timeout_ms: config.pop_ck_stay_buffer_time_out_ms as i64,
        max_held: config.pop_ck_max_buffer_size as usize,
        max_line: config.pop_ck_offset_max_queue_size as usize,
    }
}

/// Re-encodes a retry-topic record as the original topic's, with its receipt handle in
/// `POP_CK` (upstream's default `popResponseReturnActualRetryTopic=false`).
fn as_original_topic(bytes: &[u8], topic: &str, handle: &str, out: &mut BytesMut) {
    let Ok(Decoded::Message(rec)) = record::decode_record(bytes, false) else {
        out.extend_from_slice(bytes);
        return;
    };
    let mut props = MessageProperties::parse_bytes(rec.properties);
    if props.insert(keys::POP_CK, handle).is_err() {
        out.extend_from_slice(bytes);
        return;
    }
    let mut prop_bytes = Vec::with_capacity(rec.properties.len() + handle.len() + 8);
    props.encode_into(&mut prop_bytes);
    let fields = rec.fields_as(topic, &prop_bytes);
    if record::encode_record(&fields, out).is_err() {
        out.extend_from_slice(bytes);
    }
}

/// Creates the POP retry topic of `group` on `topic` if absent (one queue, read-write).
pub fn ensure_retry_topic(ctx: &BrokerContext, retry_topic: &str) {
    ctx.topics
        .create_topic_of_retry(retry_topic, 1, PERM_READ | PERM_WRITE);
}

/// Whether queue offset 0 holds a message the store still serves from memory (upstream
/// `checkInMemByConsumeOffset`: not far enough behind the CommitLog end to send a pull
/// to a slave).
fn first_message_in_memory(store: &dyn ringmq_store::StoreApi, topic: &str, queue_id: i32) -> bool {
    let r = store.get_message(topic, queue_id, 0, 1, 64 * 1024, &ringmq_store::AcceptAll);
    r.status == ringmq_store::GetMessageStatus::Found && !r.suggest_pulling_from_slave
}
