//! The transaction check service (features.md §d.4): every `transactionCheckInterval`, walk each
//! half queue from the checker's progress and ask producers about half messages nobody ended.
//!
//! One round over a half queue:
//! 1. Start at the committed offsets of group `CID_RMQ_SYS_TRANS` on the half queue and on its op
//!    queue (the queue minimum when none), corrected into the queues' ranges.
//! 2. Read op records (32 at a time) into "half offset → op offset"; an op record whose offsets
//!    all lie behind the half progress is done at once.
//! 3. For each half offset in order: one with an op record is consumed. Otherwise the round
//!    stops at a message stored after the round began or younger than `transactionTimeOut`
//!    (later messages are younger still); the half message is discarded into
//!    `TRANS_CHECK_MAX_TIME_TOPIC` when it was checked `transactionCheckMax` times or is older
//!    than `fileReservedTime`; messages with `CHECK_IMMUNITY_TIME_IN_SECONDS` still inside
//!    their immunity are re-appended with `TRAN_PREPARED_QUEUE_OFFSET` so they are looked at
//!    again later. A message due for a check is re-appended as a copy with one more
//!    `TRANSACTION_CHECK_TIMES`, and CHECK_TRANSACTION_STATE is sent for the copy to a live
//!    producer of its `PGROUP` (none alive: the copy waits for the next round). When op
//!    records were still being read, more are read first: the message's op record may just be
//!    further on.
//! 4. Commit the half progress (first unprocessed offset) and the op progress (past the
//!    contiguous run of fully consumed op records).
//!
//! Every store write is waited for on this control thread. A write that fails for a reason that
//! may pass (busy, no answer) ends the queue's round without moving past the message, so nothing
//! is lost; the next round retries it.
//!
//! Testing: [`TransactionalMessageCheckService::check_once`] runs one round without the thread,
//! and the clock is injectable ([`Clock`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ringmq_remoting::codes::RequestCode;
use ringmq_remoting::header::{CheckTransactionStateRequestHeader, RpcFields};
use ringmq_remoting::message::id;
use ringmq_remoting::message::properties::{keys, MessageProperties};
use ringmq_remoting::message::record::{self, Decoded, RecordFields, RecordVersion, StoredRecord};
use ringmq_remoting::RemotingCommand;
use ringmq_store::{AcceptAll, GetMessageStatus, PutResult};

use super::{
    copy_record, parse_op_body, put_and_wait, CopyTarget, TransactionConfig, OP_REMOVE_TAG,
    TRANS_CHECK_GROUP,
};
use crate::context::BrokerContext;
use crate::metadata::topic_config::{
    PERM_READ, PERM_WRITE, TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC,
};
use crate::schedule::{Clock, SystemClock};
use ringmq_sync::LockExt;

/// Op records read per store call (upstream `OP_MSG_PULL_NUMS`).
const OP_READ_BATCH_MSGS: i32 = 32;
/// Byte cap of one read; op and half records are small, this only bounds a corrupt queue.
const READ_BATCH_BYTES: usize = 4 * 1024 * 1024;
/// Queues of `TRANS_CHECK_MAX_TIME_TOPIC` when the first discard creates it.
const CHECK_MAX_TIME_TOPIC_QUEUES: u32 = 1;

/// Opaque of broker-initiated CHECK_TRANSACTION_STATE requests (oneway: never matched to an
/// answer, but kept distinct so packet captures read well).
static CHECK_OPAQUE: AtomicI32 = AtomicI32::new(1 << 29);

/// What one round did, over all half queues.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckOutcome {
    /// Half messages re-appended for a check.
    pub checked: usize,
    /// CHECK_TRANSACTION_STATE requests handed to a producer connection.
    pub sent: usize,
    /// Half messages moved to `TRANS_CHECK_MAX_TIME_TOPIC`.
    pub discarded: usize,
    /// Half offsets passed because an op record says they are done.
    pub done: usize,
    /// Half messages re-appended because they are inside their check immunity.
    pub immunity_copies: usize,
}

/// The check service. Master only: the broker starts it with the master role and stops it at
/// shutdown.
pub struct TransactionalMessageCheckService {
    shared: Arc<Checker>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct Checker {
    ctx: Arc<BrokerContext>,
    config: TransactionConfig,
    /// Whether the live transaction keys (UPDATE_BROKER_CONFIG) override `config`.
    follow_live: bool,
    clock: Arc<dyn Clock>,
    running: AtomicBool,
    /// Set by `stop`; wakes the timer wait and the op grace pause.
    stop: (Mutex<bool>, Condvar),
}

impl TransactionalMessageCheckService {
    /// The service with the broker's settings and the system clock.
    pub fn new(ctx: Arc<BrokerContext>) -> Self {
        let config = TransactionConfig::from_broker_config(&ctx.config);
        Self::build(ctx, config, Arc::new(SystemClock), true)
    }

    pub fn with_config(
        ctx: Arc<BrokerContext>,
        config: TransactionConfig,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self::build(ctx, config, clock, false)
    }

    fn build(
        ctx: Arc<BrokerContext>,
        config: TransactionConfig,
        clock: Arc<dyn Clock>,
        follow_live: bool,
    ) -> Self {
        Self {
            shared: Arc::new(Checker {
                ctx,
                config,
                follow_live,
                clock,
                running: AtomicBool::new(false),
                stop: (Mutex::new(false), Condvar::new()),
            }),
            thread: Mutex::new(None),
        }
    }

    pub fn config(&self) -> &TransactionConfig {
        &self.shared.config
    }

    /// One round over every half queue, now.
    pub fn check_once(&self) -> CheckOutcome {
        self.shared.check_all()
    }

    /// Starts the timer thread (idempotent); the first round runs one interval after start.
    pub fn start(&self) -> Result<(), String> {
        if !self.shared.ctx.is_master() {
            return Err("the transaction check service runs on the master only".to_string());
        }
        if self.shared.running.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        *lock(&self.shared.stop.0) = false;
        let shared = self.shared.clone();
        let handle = std::thread::Builder::new()
            .name("ringmq-tx-check".to_string())
            .spawn(move || shared.timer_loop())
            .map_err(|e| {
                self.shared.running.store(false, Ordering::SeqCst);
                format!("cannot start the transaction check thread: {e}")
            })?;
        *lock(&self.thread) = Some(handle);
        tracing::info!(
            interval_ms = self.shared.config.check_interval_ms,
            timeout_ms = self.shared.config.timeout_ms,
            check_max = self.shared.config.check_max,
            "transaction check service started"
        );
        Ok(())
    }

    /// Stops the thread after its current message; progress is in the consumer offset table,
    /// which the broker persists at shutdown.
    pub fn stop(&self) {
        if !self.shared.running.swap(false, Ordering::SeqCst) {
            return;
        }
        {
            let (flag, cv) = &self.shared.stop;
            *lock(flag) = true;
            cv.notify_all();
        }
        if let Some(handle) = lock(&self.thread).take() {
            let _ = handle.join();
        }
        tracing::info!("transaction check service stopped");
    }
}

impl Drop for TransactionalMessageCheckService {
    fn drop(&mut self) {
        self.stop();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock_unpoisoned()
}

/// Op records read so far in a round: which half offsets are done, and which op records are
/// fully consumed.
struct OpIndex {
    /// Half offset → queue offset of the op record that ended it.
    removed: HashMap<i64, i64>,
    /// The same for half offsets behind the half progress: only immunity copies (which name
    /// the offset of the message they copy) look these up.
    removed_earlier: HashMap<i64, i64>,
    /// Op record → half offsets of it not consumed yet.
    pending: HashMap<i64, HashSet<i64>>,
    /// Op records with nothing left to consume.
    done: Vec<i64>,
    /// Where the next op read starts.
    next_offset: i64,
}

/// What the latest op read found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpRead {
    /// Op records; the born time of the last one.
    Found { last_born_ms: i64 },
    /// Nothing (more) in the op queue.
    Empty,
}

impl OpIndex {
    fn new(from: i64) -> Self {
        Self {
            removed: HashMap::new(),
            removed_earlier: HashMap::new(),
            pending: HashMap::new(),
            done: Vec::new(),
            next_offset: from,
        }
    }

    /// Reads the next batch of op records of `queue_id`; offsets below `min_half` are already
    /// behind the half progress and ignored.
    fn read_more(&mut self, ctx: &BrokerContext, queue_id: i32, min_half: i64) -> OpRead {
        let got = ctx.store.get_message(
            TRANS_OP_HALF_TOPIC,
            queue_id,
            self.next_offset,
            OP_READ_BATCH_MSGS,
            READ_BATCH_BYTES,
            &AcceptAll,
        );
        if got.status != GetMessageStatus::Found || got.messages.is_empty() {
            if got.next_begin_offset > self.next_offset {
                // Holes (expired files): step over them, they hold nothing readable.
                for skipped in self.next_offset..got.next_begin_offset {
                    self.done.push(skipped);
                }
                self.next_offset = got.next_begin_offset;
            }
            return OpRead::Empty;
        }
        let mut last_born_ms = 0;
        for (i, raw) in got.messages.iter().enumerate() {
            let op_offset = got
                .message_queue_offsets
                .get(i)
                .copied()
                .unwrap_or(self.next_offset + i as i64);
            let rec = match record::decode_record(raw, false) {
                Ok(Decoded::Message(r)) => r,
                _ => {
                    tracing::error!(queue_id, op_offset, "unreadable op record; skipped");
                    self.done.push(op_offset);
                    continue;
                }
            };
            last_born_ms = rec.born_timestamp_ms;
            let props = MessageProperties::parse_bytes(rec.properties);
            let mut members = HashSet::new();
            if props.get(keys::TAGS) == Some(OP_REMOVE_TAG) {
                for half_offset in parse_op_body(rec.body) {
                    if half_offset >= min_half {
                        self.removed.insert(half_offset, op_offset);
                        members.insert(half_offset);
                    } else {
                        self.removed_earlier.insert(half_offset, op_offset);
                    }
                }
            } else {
                tracing::error!(
                    queue_id,
                    op_offset,
                    tags = props.get(keys::TAGS).unwrap_or(""),
                    "op record without the 'd' tag; ignored"
                );
            }
            if members.is_empty() {
                self.done.push(op_offset);
            } else {
                self.pending.insert(op_offset, members);
            }
        }
        self.next_offset = got.next_begin_offset.max(self.next_offset);
        OpRead::Found { last_born_ms }
    }

    /// Consumes `half_offset` if an op record ended it.
    fn consume(&mut self, half_offset: i64) -> bool {
        let Some(op_offset) = self.removed.remove(&half_offset) else {
            return false;
        };
        if let Some(members) = self.pending.get_mut(&op_offset) {
            members.remove(&half_offset);
            if members.is_empty() {
                self.pending.remove(&op_offset);
                self.done.push(op_offset);
            }
        }
        true
    }

    /// For an immunity copy: whether the original half offset was ended; its op record counts
    /// as consumed then. Upstream only finds op records read in the same round as the original
    /// offset; a producer usually ends the transaction after the copy was made, so the earlier
    /// offsets are looked up too.
    fn consume_original(&mut self, original_half_offset: i64) -> bool {
        if let Some(op_offset) = self.removed.remove(&original_half_offset) {
            self.pending.remove(&op_offset);
            self.done.push(op_offset);
            return true;
        }
        self.removed_earlier.remove(&original_half_offset).is_some()
    }

    /// The op progress: `from` moved past the contiguous run of done op records.
    fn progress(&mut self, from: i64) -> i64 {
        self.done.sort_unstable();
        self.done.dedup();
        let mut next = from;
        for &o in &self.done {
            match o.cmp(&next) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => next += 1,
                std::cmp::Ordering::Greater => break,
            }
        }
        next
    }
}

/// How a half message inside its check immunity was dealt with.
enum Immunity {
    /// Re-appended to be looked at again later.
    Copied,
    /// The producer ended the transaction of the message it is a copy of.
    Ended,
}

/// What to do with the half message at the current offset.
enum Step {
    /// Move past it.
    Advance,
    /// End the queue's round here (retry from it next round).
    Stop,
}

impl Checker {
    /// The settings for this round: the live transaction keys when following them.
    fn settings(&self) -> TransactionConfig {
        if self.follow_live {
            self.ctx.live.transaction_config(&self.config)
        } else {
            self.config.clone()
        }
    }

    fn stopping(&self) -> bool {
        *lock(&self.stop.0)
    }

    /// Waits `ms` or until stop; true when stopped.
    fn pause(&self, ms: u64) -> bool {
        let (flag, cv) = &self.stop;
        let guard = lock(flag);
        if *guard {
            return true;
        }
        let (guard, _) = cv
            .wait_timeout(guard, Duration::from_millis(ms))
            .unwrap_or_else(|p| p.into_inner());
        *guard
    }

    fn timer_loop(self: Arc<Self>) {
        while self.running.load(Ordering::SeqCst) {
            if self.pause(self.settings().check_interval_ms) {
                break;
            }
            let began = Instant::now();
            let out = self.check_all();
            tracing::debug!(
                elapsed_ms = began.elapsed().as_millis() as u64,
                checked = out.checked,
                sent = out.sent,
                discarded = out.discarded,
                done = out.done,
                "transaction check round"
            );
        }
    }

    fn check_all(&self) -> CheckOutcome {
        let mut out = CheckOutcome::default();
        let Some(tc) = self.ctx.topics.select(TRANS_HALF_TOPIC) else {
            tracing::warn!("{TRANS_HALF_TOPIC} does not exist; nothing to check");
            return out;
        };
        for queue_id in 0..tc.read_queue_nums {
            if self.stopping() {
                break;
            }
            self.check_queue(queue_id, &mut out);
        }
        out
    }

    /// The checker's progress on a queue, corrected into the queue's range.
    fn progress_of(&self, topic: &str, queue_id: i32) -> i64 {
        let store = &self.ctx.store;
        let (min, max) = (
            store.min_offset_in_queue(topic, queue_id),
            store.max_offset_in_queue(topic, queue_id),
        );
        let saved = self
            .ctx
            .offsets
            .query_offset(TRANS_CHECK_GROUP, topic, queue_id);
        let offset = saved.unwrap_or(min).clamp(min, max.max(min));
        if saved.is_some_and(|s| s != offset) {
            tracing::warn!(
                topic,
                queue_id,
                saved,
                min,
                max,
                offset,
                "transaction check progress outside its queue; corrected"
            );
        }
        offset
    }

    fn check_queue(&self, queue_id: i32, out: &mut CheckOutcome) {
        let started = Instant::now();
        let round_start_ms = self.clock.now_ms();
        let timeout_ms = self.settings().timeout_ms_i64();
        let half_start = self.progress_of(TRANS_HALF_TOPIC, queue_id);
        let op_start = self.progress_of(TRANS_OP_HALF_TOPIC, queue_id);
        let mut ops = OpIndex::new(op_start);
        let mut last_read = ops.read_more(&self.ctx, queue_id, half_start);
        let mut offset = half_start;
        let mut jumped = false;
        loop {
            if self.stopping() {
                break;
            }
            if started.elapsed() > Duration::from_millis(self.config.max_round_per_queue_ms) {
                tracing::info!(
                    queue_id,
                    offset,
                    "transaction check round hit its time limit; continuing next round"
                );
                break;
            }
            if ops.consume(offset) {
                out.done += 1;
                offset += 1;
                continue;
            }
            let got = self.ctx.store.get_message(
                TRANS_HALF_TOPIC,
                queue_id,
                offset,
                1,
                READ_BATCH_BYTES,
                &AcceptAll,
            );
            let raw = match got.status {
                GetMessageStatus::Found if !got.messages.is_empty() => got.messages[0].clone(),
                GetMessageStatus::NoMessageInQueue
                | GetMessageStatus::OffsetOverflowOne
                | GetMessageStatus::NoMatchedLogicQueue => break,
                status => {
                    // A hole (expired file, removed record): one jump forward per round.
                    if jumped || got.next_begin_offset <= offset {
                        tracing::warn!(
                            queue_id,
                            offset,
                            status = status.name(),
                            "half message unreadable; retrying next round"
                        );
                        break;
                    }
                    tracing::info!(
                        queue_id,
                        offset,
                        next = got.next_begin_offset,
                        status = status.name(),
                        "half queue hole; skipping ahead"
                    );
                    jumped = true;
                    offset = got.next_begin_offset;
                    continue;
                }
            };
            let rec = match record::decode_record(&raw, false) {
                Ok(Decoded::Message(r)) => r,
                _ => {
                    tracing::error!(queue_id, offset, "unreadable half record; skipped");
                    offset += 1;
                    continue;
                }
            };
            if rec.store_timestamp_ms >= round_start_ms {
                // Stored after this round began (e.g. a copy it just wrote): later ones are
                // newer still. Checked before the discard rule (upstream checks after), so the
                // last check's answer gets a whole interval to arrive before the message is
                // parked.
                break;
            }
            let mut props = MessageProperties::parse_bytes(rec.properties);
            let times = props
                .get(keys::TRANSACTION_CHECK_TIMES)
                .and_then(|t| t.trim().parse::<i32>().ok());
            let now_ms = self.clock.now_ms();
            let age_ms = now_ms - rec.born_timestamp_ms;
            let reserved_ms = i64::from(self.config.file_reserved_time_hours) * 3_600_000;
            let checked_out = times.is_some_and(|t| t >= self.settings().check_max);
            if checked_out || age_ms > reserved_ms {
                if !checked_out {
                    // Upstream counts this look as a check too; the parked copy shows it.
                    let _ = props.insert(
                        keys::TRANSACTION_CHECK_TIMES,
                        &times.map_or(1, |t| t + 1).to_string(),
                    );
                }
                match self.discard(&rec, &props, checked_out) {
                    Step::Advance => {
                        out.discarded += 1;
                        offset += 1;
                        continue;
                    }
                    Step::Stop => break,
                }
            }
            let _ = props.insert(
                keys::TRANSACTION_CHECK_TIMES,
                &times.map_or(1, |t| t + 1).to_string(),
            );
            let immunity_prop = props
                .get(keys::CHECK_IMMUNITY_TIME_IN_SECONDS)
                .map(str::to_string);
            let immunity_ms = match &immunity_prop {
                Some(text) => match text.trim().parse::<i64>() {
                    Ok(-1) | Err(_) => timeout_ms,
                    Ok(s) => s.saturating_mul(1000),
                },
                None => timeout_ms,
            };
            if immunity_prop.is_some() {
                if age_ms <= immunity_ms {
                    match self.inside_immunity(&rec, &mut props, &mut ops) {
                        Some(Immunity::Copied) => {
                            out.immunity_copies += 1;
                            offset += 1;
                            continue;
                        }
                        Some(Immunity::Ended) => {
                            out.done += 1;
                            offset += 1;
                            continue;
                        }
                        None => {}
                    }
                }
            } else if (0..=timeout_ms).contains(&age_ms) {
                break; // too young; the rest of the queue is younger
            }
            let need_check = match last_read {
                OpRead::Empty => age_ms > immunity_ms,
                OpRead::Found { last_born_ms } => last_born_ms - round_start_ms > timeout_ms,
            } || age_ms <= -1;
            if need_check {
                match self.check_one(&rec, &props, out) {
                    Step::Advance => offset += 1,
                    Step::Stop => break,
                }
                continue;
            }
            if last_read == OpRead::Empty {
                // No op records left and still not due (inside its immunity): next round.
                break;
            }
            // Its op record may be further on in the op queue.
            last_read = ops.read_more(&self.ctx, queue_id, half_start);
            if last_read == OpRead::Empty
                && self.config.op_grace_ms > 0
                && self.pause(self.config.op_grace_ms)
            {
                break;
            }
        }
        if offset != half_start {
            self.ctx
                .offsets
                .commit_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, queue_id, offset);
        }
        let op_progress = ops.progress(op_start);
        if op_progress != op_start {
            self.ctx.offsets.commit_offset(
                TRANS_CHECK_GROUP,
                TRANS_OP_HALF_TOPIC,
                queue_id,
                op_progress,
            );
        }
        tracing::debug!(
            queue_id,
            half_from = half_start,
            half_to = offset,
            op_from = op_start,
            op_to = op_progress,
            "transaction check of a half queue done"
        );
    }

    /// A half message with `CHECK_IMMUNITY_TIME_IN_SECONDS`, still inside its immunity: keep it
    /// for later by re-appending it with the offset it was first seen at. `None` when it cannot
    /// be kept that way (the caller then decides as for any other message).
    fn inside_immunity(
        &self,
        rec: &StoredRecord<'_>,
        props: &mut MessageProperties,
        ops: &mut OpIndex,
    ) -> Option<Immunity> {
        match props.get(keys::TRAN_PREPARED_QUEUE_OFFSET) {
            None => {
                let _ = props.insert(
                    keys::TRAN_PREPARED_QUEUE_OFFSET,
                    &rec.queue_offset.to_string(),
                );
            }
            Some(text) => {
                let original = text.trim().parse::<i64>().unwrap_or(-1);
                if original == -1 {
                    return None;
                }
                if ops.consume_original(original) {
                    return Some(Immunity::Ended);
                }
            }
        }
        let target = CopyTarget {
            topic: TRANS_HALF_TOPIC,
            queue_id: rec.queue_id,
            sys_flag: rec.sys_flag,
            prepared_transaction_offset: rec.prepared_transaction_offset,
        };
        let put = copy_record(&self.ctx, rec, &target, props)
            .map_err(|e| tracing::error!(offset = rec.queue_offset, "{e}"))
            .ok()?;
        match put_and_wait(&self.ctx, put) {
            Ok(_) => Some(Immunity::Copied),
            Err(e) => {
                tracing::warn!(
                    offset = rec.queue_offset,
                    "immunity copy of a half message not stored ({e})"
                );
                None
            }
        }
    }

    /// Parks a half message that will not be checked any more in `TRANS_CHECK_MAX_TIME_TOPIC`.
    fn discard(
        &self,
        rec: &StoredRecord<'_>,
        props: &MessageProperties,
        checked_out: bool,
    ) -> Step {
        let tc = self.ctx.topics.create_topic_of_retry(
            TRANS_CHECK_MAX_TIME_TOPIC,
            CHECK_MAX_TIME_TOPIC_QUEUES,
            PERM_READ | PERM_WRITE,
        );
        let uniq = props.get(keys::UNIQ_KEY).unwrap_or("");
        let real_topic = props.get(keys::REAL_TOPIC).unwrap_or("");
        let why = if checked_out {
            format!("checked {} times", self.settings().check_max)
        } else {
            format!(
                "older than fileReservedTime ({} h)",
                self.config.file_reserved_time_hours
            )
        };
        let target = CopyTarget {
            topic: &tc.topic_name,
            queue_id: 0,
            sys_flag: rec.sys_flag,
            prepared_transaction_offset: rec.prepared_transaction_offset,
        };
        let put = match copy_record(&self.ctx, rec, &target, props) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(
                    uniq,
                    real_topic,
                    "half message {why} cannot be parked ({e}); dropped"
                );
                return Step::Advance;
            }
        };
        match put_and_wait(&self.ctx, put) {
            Ok(_) => {
                tracing::warn!(
                    uniq,
                    real_topic,
                    half_offset = rec.queue_offset,
                    "transaction never ended ({why}); half message parked in {TRANS_CHECK_MAX_TIME_TOPIC}"
                );
                Step::Advance
            }
            Err(e) if e.is_permanent() => {
                tracing::error!(
                    uniq,
                    real_topic,
                    "half message {why} cannot be parked ({e}); dropped"
                );
                Step::Advance
            }
            Err(e) => {
                tracing::warn!(
                    uniq,
                    real_topic,
                    "half message {why} not parked yet ({e}); retrying next round"
                );
                Step::Stop
            }
        }
    }

    /// Re-appends a copy of the half message (the copy becomes the message to end) and asks a
    /// producer about it.
    fn check_one(
        &self,
        rec: &StoredRecord<'_>,
        props: &MessageProperties,
        out: &mut CheckOutcome,
    ) -> Step {
        let real_qid = props
            .get(keys::REAL_QID)
            .and_then(|q| q.trim().parse::<i32>().ok());
        let (Some(real_topic), Some(real_qid), Some(group)) = (
            props.get(keys::REAL_TOPIC).filter(|t| !t.is_empty()),
            real_qid,
            props.get(keys::PGROUP).filter(|g| !g.is_empty()),
        ) else {
            // No producer could ever end it: park it instead of asking forever.
            tracing::error!(
                half_offset = rec.queue_offset,
                "half message without REAL_TOPIC/REAL_QID/PGROUP cannot be checked"
            );
            return match self.discard(rec, props, false) {
                Step::Advance => {
                    out.discarded += 1;
                    Step::Advance
                }
                Step::Stop => Step::Stop,
            };
        };
        let target = CopyTarget {
            topic: TRANS_HALF_TOPIC,
            queue_id: rec.queue_id,
            sys_flag: rec.sys_flag,
            prepared_transaction_offset: rec.prepared_transaction_offset,
        };
        let put = match copy_record(&self.ctx, rec, &target, props) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(
                    half_offset = rec.queue_offset,
                    "half message cannot be re-appended for a check ({e})"
                );
                return match self.discard(rec, props, false) {
                    Step::Advance => {
                        out.discarded += 1;
                        Step::Advance
                    }
                    Step::Stop => Step::Stop,
                };
            }
        };
        let copy = match put_and_wait(&self.ctx, put) {
            Ok(r) => r,
            Err(e) if e.is_permanent() => {
                tracing::error!(
                    half_offset = rec.queue_offset,
                    "half message cannot be re-appended for a check ({e})"
                );
                return match self.discard(rec, props, false) {
                    Step::Advance => {
                        out.discarded += 1;
                        Step::Advance
                    }
                    Step::Stop => Step::Stop,
                };
            }
            Err(e) => {
                tracing::warn!(
                    half_offset = rec.queue_offset,
                    "half message copy for a check not stored ({e}); retrying next round"
                );
                return Step::Stop;
            }
        };
        out.checked += 1;
        if self.send_check(rec, props, &copy, real_topic, real_qid, group) {
            out.sent += 1;
        }
        Step::Advance
    }

    /// CHECK_TRANSACTION_STATE for the re-appended copy, oneway, to one live producer of `group`.
    fn send_check(
        &self,
        rec: &StoredRecord<'_>,
        props: &MessageProperties,
        copy: &PutResult,
        real_topic: &str,
        real_qid: i32,
        group: &str,
    ) -> bool {
        let uniq = props.get(keys::UNIQ_KEY).map(str::to_string);
        let Some(channel) = self.ctx.producers.any_channel(group) else {
            tracing::warn!(
                group,
                uniq = uniq.as_deref().unwrap_or(""),
                "no live producer of the group to ask about its transaction; asking again next round"
            );
            return false;
        };
        let mut prop_bytes = Vec::with_capacity(rec.properties.len() + 32);
        props.encode_into(&mut prop_bytes);
        // The body is the message as the producer sent it: real topic and queue, v1 layout
        // (clients decode only v1 here), offsets of the copy the answer must name.
        let fields = RecordFields {
            queue_id: real_qid,
            queue_offset: copy.queue_offset,
            physical_offset: copy.wrote_offset,
            ..rec.fields_as(real_topic, &prop_bytes)
        };
        let mut body = BytesMut::with_capacity(fields.encoded_size());
        if let Err(e) = record::encode_record_with_version(&fields, RecordVersion::V1, &mut body) {
            tracing::error!(
                group,
                real_topic,
                "check request body cannot be encoded ({e}); not sent"
            );
            return false;
        }
        let header = CheckTransactionStateRequestHeader {
            // A Java broker names the half topic here (it sets the header before restoring the
            // real topic on the message); clients read the topic from the body.
            topic: Some(TRANS_HALF_TOPIC.to_string()),
            tran_state_table_offset: copy.queue_offset,
            commit_log_offset: copy.wrote_offset,
            msg_id: uniq.clone(),
            transaction_id: uniq.clone(),
            offset_msg_id: Some(id::encode_offset_msg_id(
                &self.ctx.store_host,
                copy.wrote_offset,
            )),
            rpc: RpcFields {
                broker_name: Some(self.ctx.config.broker_name.clone()),
                ..RpcFields::default()
            },
        };
        let mut cmd = RemotingCommand::request(
            RequestCode::CheckTransactionState.code(),
            CHECK_OPAQUE.fetch_add(1, Ordering::Relaxed),
        )
        .with_header(&header)
        .with_body(body.freeze());
        cmd.mark_oneway();
        let sent = channel.send_oneway(cmd);
        if sent {
            tracing::info!(
                group,
                peer = %channel.peer_addr(),
                uniq = uniq.as_deref().unwrap_or(""),
                half_offset = copy.queue_offset,
                "asked the producer about its transaction"
            );
        } else {
            tracing::warn!(
                group,
                peer = %channel.peer_addr(),
                "transaction check not sent (connection gone); asking again next round"
            );
        }
        sent
    }
}
