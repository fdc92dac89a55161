//! Timer (arbitrary-delay) messages, features.md §c: [`TimerMessageStore`] moves messages the
//! put transform ([`crate::timer_put`]) parked in `rmq_sys_wheel_timer` into a timing wheel
//! and re-puts each to its `REAL_TOPIC`/`REAL_QID` once its slot is due. Its files are
//! RocketMQ's (`timerwheel`, `timerlog/`, `config/timercheck`, see [`wheel`], [`log`],
//! [`checkpoint`]), so a store moves between the two with its pending timers.
//!
//! One stage thread (never a network or store core) runs upstream's four stages in turn:
//! enqueue-get/put (read the timer topic's ConsumeQueue, append a log unit, link it into its
//! slot) and dequeue-get/put (walk each due slot's chain, load the messages, put them).
//! Puts are synchronous: a slot's read time only advances once all of its messages were
//! taken by the store, and the checkpoint (every `timerFlushIntervalMs`, after the log and
//! the wheel are durable) only names progress already made, so a crash re-delivers at most
//! the slots and messages after the last checkpoint (at-least-once, as upstream) and never
//! loses or advances a timer.
//!
//! Testing: [`TimerMessageStore::run_once`] runs the stages once at the injected clock's time
//! without the thread; dropping a store without [`TimerMessageStore::stop`] is a crash.

pub mod checkpoint;
pub mod log;
pub mod metrics;
pub mod start;
pub mod wheel;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use ringmq_remoting::message::properties::{keys, MessageProperties};
use ringmq_remoting::message::record::{self, Decoded, RecordFields};
use ringmq_store::{
    AcceptAll, GetMessageStatus, PutMessageStatus, PutRequest, PutResult, StoreApi,
};
use ringmq_sync::LockExt;

use crate::clock::Clock;
use crate::metadata::topic_config::TIMER_TOPIC;
use crate::metrics::timer_families::{lateness_bucket, TimerGauges, TIMER_LATENESS_BUCKETS};
use checkpoint::{TimerCheckpoint, TimerCheckpointData};
use log::{TimerLog, TimerUnit, MAGIC_DEFAULT, MAGIC_DELETE, MAGIC_ROLL};
use metrics::TimerMetrics;
use wheel::{TimerWheel, SLOTS_TOTAL};

/// Slots kept free at the far end of the wheel (upstream `TIMER_BLANK_SLOTS`).
pub const TIMER_BLANK_SLOTS: i64 = 60;
/// Records read from the timer topic per store call.
const ENQUEUE_BATCH_MSGS: i32 = 32;
const ENQUEUE_BATCH_BYTES: usize = 4 * 1024 * 1024;
/// Empty slots one pass may step over before the other stages get a turn.
const EMPTY_SLOTS_PER_PASS: usize = 100_000;
/// Longest chain walked in one slot (a cycle in a damaged log must not spin forever).
const MAX_UNITS_PER_SLOT: usize = 10_000_000;
/// How long one re-put may take before it counts as failed.
const PUT_TIMEOUT_MS: u64 = 10_000;
/// Period of the timer log cleanup (upstream: 30 s).
pub const CLEAN_INTERVAL_MS: i64 = 30_000;
/// Deliveries of one slot put at once before their answers are awaited.
const MAX_PUTS_IN_FLIGHT: usize = 256;
/// Attempts of a refused delivery unless `timerEnableRetryUntilSuccess`.
const MAX_PUT_ATTEMPTS: u32 = 3;

/// The settings the timer store reads (broker config keys of features.md §c.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerConfig {
    /// `storePathRootDir`: `timerwheel`, `timerlog/` and `config/timercheck` live here.
    pub root: PathBuf,
    pub precision_ms: i64,
    /// Effective roll window in slots (out-of-range values replaced as upstream does).
    pub roll_window_slots: i64,
    pub flush_interval_ms: i64,
    pub timer_log_segment_bytes: i64,
    pub stop_enqueue: bool,
    pub stop_dequeue: bool,
    pub skip_unknown_error: bool,
    pub retry_until_success: bool,
}

impl TimerConfig {
    pub fn from_broker(config: &crate::config::BrokerConfig) -> Self {
        Self {
            root: config.store_root(),
            precision_ms: i64::from(config.timer_precision_ms.max(1)),
            roll_window_slots: effective_roll_window(i64::from(config.timer_roll_window_slot)),
            flush_interval_ms: config.timer_flush_interval_ms.max(1) as i64,
            timer_log_segment_bytes: config.mapped_file_size_timer_log_bytes as i64,
            stop_enqueue: config.timer_stop_enqueue,
            stop_dequeue: config.timer_stop_dequeue,
            skip_unknown_error: config.timer_skip_unknown_error,
            retry_until_success: config.timer_enable_retry_until_success,
        }
    }
}

/// `timerRollWindowSlot` as upstream applies it: beyond the wheel (minus the blank slots) or
/// below 2 means "the whole wheel".
pub fn effective_roll_window(slots: i64) -> i64 {
    let max = SLOTS_TOTAL as i64 - TIMER_BLANK_SLOTS;
    if slots > max || slots < 2 {
        max
    } else {
        slots
    }
}

/// The broker's timer store, once started (held by [`crate::context::BrokerContext`]).
#[derive(Default)]
pub struct TimerHandle {
    service: Mutex<Option<Arc<TimerMessageStore>>>,
}

/// brokerStatus values of the timer (upstream's runtime-info keys).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TimerRuntimeInfo {
    /// `timerReadBehind`: seconds the dequeue side is behind now.
    pub read_behind_s: i64,
    /// `timerOffsetBehind`: timer-topic messages not yet in the wheel.
    pub offset_behind: i64,
    /// `timerCongestNum`: messages waiting in the wheel.
    pub congest_num: i64,
    pub enqueue_tps: f32,
    pub dequeue_tps: f32,
}

impl TimerHandle {
    pub fn set(&self, service: Arc<TimerMessageStore>) {
        *self.service.lock_unpoisoned() = Some(service);
    }

    pub fn get(&self) -> Option<Arc<TimerMessageStore>> {
        self.service.lock_unpoisoned().clone()
    }

    /// Messages in the slot of `time_ms` for flow control; 0 when no store runs or its state
    /// is busy (a send never waits for the stage thread).
    pub fn slot_num(&self, time_ms: i64) -> i64 {
        self.get().map_or(0, |s| s.slot_num(time_ms))
    }

    /// Stops the store (flushing its files) and forgets it.
    pub fn stop(&self) {
        let service = self.service.lock_unpoisoned().take();
        if let Some(s) = service {
            s.stop();
        }
    }

    /// Zeros when no timer store runs (a slave, or `timerWheelEnable=false`), as upstream.
    pub fn runtime_info(&self) -> TimerRuntimeInfo {
        self.get().map(|s| s.runtime_info()).unwrap_or_default()
    }
}

struct State {
    wheel: TimerWheel,
    log: TimerLog,
    checkpoint: TimerCheckpoint,
    metrics: TimerMetrics,
    curr_read_time_ms: i64,
    curr_write_time_ms: i64,
    curr_queue_offset: i64,
    commit_read_time_ms: i64,
    commit_queue_offset: i64,
    last_flush_ms: i64,
    last_clean_ms: i64,
    enqueued_at_last_flush: u64,
    dequeued_at_last_flush: u64,
}

/// How recent the enqueue stage's last read must be for its age to count as enqueue
/// latency (upstream: 2 s).
const ENQUEUE_LATENCY_WINDOW_MS: i64 = 2_000;

#[derive(Default)]
struct Stats {
    curr_read_time_ms: AtomicI64,
    curr_queue_offset: AtomicI64,
    congest_num: AtomicI64,
    enqueued: AtomicU64,
    dequeued: AtomicU64,
    enqueue_tps_bits: AtomicU32,
    dequeue_tps_bits: AtomicU32,
    lateness_counts: [AtomicU64; TIMER_LATENESS_BUCKETS],
    lateness_sum_ms: AtomicU64,
    /// When the enqueue stage last read a message, and that message's store time
    /// (upstream `lastEnqueueButExpiredTime` / `lastEnqueueButExpiredStoreTime`).
    last_enqueue_read_ms: AtomicI64,
    last_enqueue_store_ms: AtomicI64,
}

/// What the admin requests read without waiting for the stage thread: the checkpoint and
/// the `timermetrics` text as of the last flush (as upstream's in-memory checkpoint).
#[derive(Default)]
struct Published {
    checkpoint: TimerCheckpointData,
    metrics_json: String,
}

/// What one pass of the stages did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PassOutcome {
    /// Timer-topic messages moved into the wheel (or delivered at once).
    pub enqueued: usize,
    /// Messages re-put to their real topic (or rolled back into the timer topic).
    pub delivered: usize,
    /// Slots the read time moved past.
    pub slots_read: usize,
}

/// The timing wheel service over the broker's store.
pub struct TimerMessageStore {
    cfg: TimerConfig,
    store: Arc<dyn StoreApi>,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    stats: Stats,
    published: Mutex<Published>,
    running: AtomicBool,
    /// Whether the stage thread was started (then `running == false` means "stopping").
    threaded: AtomicBool,
    wake: (Mutex<bool>, Condvar),
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// What one put attempt of a delivery calls for.
enum Attempt {
    Done,
    Drop,
    Retry,
}

/// How one delivery ended.
enum Put {
    Done,
    Dropped,
    /// The store kept refusing; the slot is retried later.
    Failed,
}

impl TimerMessageStore {
    /// Opens the files under `cfg.root` and recovers (features.md §c.5).
    pub fn open(
        cfg: TimerConfig,
        store: Arc<dyn StoreApi>,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<Self>, String> {
        let p = cfg.precision_ms;
        let mut wheel = TimerWheel::open(&cfg.root.join("timerwheel"), p)?;
        let mut log = TimerLog::open(&cfg.root.join("timerlog"), cfg.timer_log_segment_bytes)?;
        let checkpoint = TimerCheckpoint::open(&cfg.root.join("config").join("timercheck"))?;
        let ck = checkpoint.data;
        let metrics = TimerMetrics::load(
            &cfg.root.join("config").join("timermetrics"),
            clock.now_ms(),
        );
        let mut begin = ck.last_timer_log_flush_pos;
        if log.first_segment().is_some() {
            begin -= log.segment_size_bytes();
        }
        let end = log.recover(begin.max(0), true, |pos, unit| {
            wheel.revise_last_pos(unit.slot_time_ms(), pos)
        })?;
        let mut queue_offset =
            last_unit_queue_offset(&log, store.as_ref(), end).unwrap_or(ck.last_timer_queue_offset);
        queue_offset = queue_offset.min(ck.master_timer_queue_offset);
        let min = store.min_offset_in_queue(TIMER_TOPIC, 0);
        let max = store.max_offset_in_queue(TIMER_TOPIC, 0);
        queue_offset = queue_offset.clamp(min, max.max(min));
        let now_floor = clock.now_ms() / p * p;
        let oldest = now_floor - SLOTS_TOTAL as i64 * p + TIMER_BLANK_SLOTS * p;
        let read_time = ck.last_read_time_ms.max(oldest) / p * p;
        if let Some(first) = wheel.min_first_beyond(read_time, end).filter(|f| *f < end) {
            tracing::warn!(
                first,
                end,
                "timer wheel points past the recovered log; re-linking"
            );
            log.recover(first, false, |pos, unit| {
                wheel.revise_last_pos(unit.slot_time_ms(), pos)
            })?;
        }
        tracing::info!(
            read_time,
            queue_offset,
            log_end = end,
            "timer message store recovered"
        );
        let stats = Stats::default();
        // Counted once here, then kept up to date by enqueue and dequeue.
        stats
            .congest_num
            .store(wheel.all_num(read_time), Ordering::Relaxed);
        stats.curr_read_time_ms.store(read_time, Ordering::Relaxed);
        stats
            .curr_queue_offset
            .store(queue_offset, Ordering::Relaxed);
        let now = clock.now_ms();
        let published = Mutex::new(Published {
            checkpoint: checkpoint.data,
            metrics_json: metrics.encode(),
        });
        Ok(Arc::new(Self {
            state: Mutex::new(State {
                wheel,
                log,
                checkpoint,
                metrics,
                curr_read_time_ms: read_time,
                curr_write_time_ms: now_floor,
                curr_queue_offset: queue_offset,
                commit_read_time_ms: read_time,
                commit_queue_offset: queue_offset,
                last_flush_ms: now,
                last_clean_ms: now,
                enqueued_at_last_flush: 0,
                dequeued_at_last_flush: 0,
            }),
            cfg,
            store,
            clock,
            stats,
            published,
            running: AtomicBool::new(false),
            threaded: AtomicBool::new(false),
            wake: (Mutex::new(false), Condvar::new()),
            thread: Mutex::new(None),
        }))
    }

    /// Starts the stage thread (idempotent).
    pub fn start(self: &Arc<Self>) -> Result<(), String> {
        if self.running.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        *self.wake.0.lock_unpoisoned() = false;
        self.threaded.store(true, Ordering::SeqCst);
        let me = self.clone();
        let handle = std::thread::Builder::new()
            .name("ringmq-timer".to_string())
            .spawn(move || me.stage_loop())
            .map_err(|e| format!("cannot start the timer thread: {e}"))?;
        *self.thread.lock_unpoisoned() = Some(handle);
        Ok(())
    }

    /// Stops the thread after its current step and makes all progress durable.
    pub fn stop(&self) {
        if self.running.swap(false, Ordering::SeqCst) {
            let (lock, cv) = &self.wake;
            *lock.lock_unpoisoned() = true;
            cv.notify_all();
            if let Some(h) = self.thread.lock_unpoisoned().take() {
                let _ = h.join();
            }
        }
        if let Err(e) = self.flush() {
            tracing::error!("timer store flush at stop failed: {e}");
        }
    }

    fn stage_loop(self: Arc<Self>) {
        // Idle wait as upstream: a tenth of a slot.
        let idle_ms = (self.cfg.precision_ms / 10).clamp(1, 100) as u64;
        while self.running.load(Ordering::SeqCst) {
            let out = self.run_once();
            let busy = out.enqueued + out.delivered + out.slots_read > 0;
            let (lock, cv) = &self.wake;
            let stopped = lock.lock_unpoisoned();
            if *stopped {
                break;
            }
            if !busy {
                let _ = cv.wait_timeout(stopped, Duration::from_millis(idle_ms));
            }
        }
    }

    /// Runs enqueue, dequeue and (when due) flush once at the clock's time.
    pub fn run_once(&self) -> PassOutcome {
        let mut out = PassOutcome::default();
        let mut st = self.state.lock_unpoisoned();
        if !self.cfg.stop_enqueue {
            out.enqueued = self.enqueue(&mut st);
        }
        if !self.cfg.stop_dequeue {
            let (slots, delivered) = self.dequeue(&mut st);
            out.slots_read = slots;
            out.delivered = delivered;
        }
        let now = self.clock.now_ms();
        if now - st.last_clean_ms >= CLEAN_INTERVAL_MS {
            st.last_clean_ms = now;
            self.clean_log(&mut st);
        }
        if now - st.last_flush_ms >= self.cfg.flush_interval_ms {
            if let Err(e) = self.flush_state(&mut st, now) {
                tracing::error!("timer store flush failed: {e}");
            }
        }
        out
    }

    /// Deletes full timer log segments whose last message is gone from the CommitLog (its
    /// retention removed it): every unit of such a segment refers to an older message, so
    /// nothing in it can be delivered any more.
    fn clean_log(&self, st: &mut State) {
        for base in st.log.full_segments() {
            let gone = st
                .log
                .last_unit_of_segment(base)
                .is_some_and(|u| self.store.look_message_by_offset(u.offset_py).is_none());
            if !gone {
                break;
            }
            tracing::info!(
                base,
                "timer log segment refers only to deleted messages; removed"
            );
            st.log.remove_segment(base);
        }
    }

    /// Makes the log, the wheel and then the checkpoint durable.
    pub fn flush(&self) -> Result<(), String> {
        let now = self.clock.now_ms();
        let mut st = self.state.lock_unpoisoned();
        self.flush_state(&mut st, now)
    }

    fn flush_state(&self, st: &mut State, now: i64) -> Result<(), String> {
        let flushed = st.log.flush()?;
        st.wheel.flush()?;
        let (read, queue) = (st.commit_read_time_ms, st.commit_queue_offset);
        let ck = &mut st.checkpoint.data;
        if ck.last_read_time_ms != read || ck.last_timer_queue_offset != queue {
            ck.data_version_timestamp_ms = now;
            ck.data_version_counter += 1;
        }
        ck.last_read_time_ms = read;
        ck.last_timer_log_flush_pos = flushed;
        ck.last_timer_queue_offset = queue;
        ck.master_timer_queue_offset = queue;
        st.checkpoint.flush()?;
        st.metrics.persist(now)?;
        *self.published.lock_unpoisoned() = Published {
            checkpoint: st.checkpoint.data,
            metrics_json: st.metrics.encode(),
        };
        self.update_rates(st, now);
        Ok(())
    }

    fn update_rates(&self, st: &mut State, now: i64) {
        let secs = ((now - st.last_flush_ms).max(1) as f32) / 1000.0;
        let enq = self.stats.enqueued.load(Ordering::Relaxed);
        let deq = self.stats.dequeued.load(Ordering::Relaxed);
        let tps = |n: u64, before: u64| (n.saturating_sub(before) as f32 / secs).to_bits();
        self.stats
            .enqueue_tps_bits
            .store(tps(enq, st.enqueued_at_last_flush), Ordering::Relaxed);
        self.stats
            .dequeue_tps_bits
            .store(tps(deq, st.dequeued_at_last_flush), Ordering::Relaxed);
        st.enqueued_at_last_flush = enq;
        st.dequeued_at_last_flush = deq;
        st.last_flush_ms = now;
    }

    fn slot_num(&self, time_ms: i64) -> i64 {
        self.state.try_lock().map_or(0, |st| st.wheel.num(time_ms))
    }

    pub fn runtime_info(&self) -> TimerRuntimeInfo {
        let now = self.clock.now_ms();
        let read = self.stats.curr_read_time_ms.load(Ordering::Relaxed);
        let queue = self.stats.curr_queue_offset.load(Ordering::Relaxed);
        TimerRuntimeInfo {
            read_behind_s: (now - read) / 1000,
            offset_behind: self.store.max_offset_in_queue(TIMER_TOPIC, 0) - queue,
            congest_num: self.stats.congest_num.load(Ordering::Relaxed),
            enqueue_tps: f32::from_bits(self.stats.enqueue_tps_bits.load(Ordering::Relaxed)),
            dequeue_tps: f32::from_bits(self.stats.dequeue_tps_bits.load(Ordering::Relaxed)),
        }
    }

    /// The `/metrics` families' values now. Per-topic counts only when the stage thread is
    /// between passes (a scrape never waits for a delivery).
    pub fn gauges(&self) -> TimerGauges {
        let info = self.runtime_info();
        let read = self.stats.curr_read_time_ms.load(Ordering::Relaxed);
        let timing_by_topic = self
            .state
            .try_lock()
            .map(|st| st.metrics.counts())
            .unwrap_or_default();
        let mut lateness_counts = [0u64; TIMER_LATENESS_BUCKETS];
        for (out, c) in lateness_counts.iter_mut().zip(&self.stats.lateness_counts) {
            *out = c.load(Ordering::Relaxed);
        }
        let now = self.clock.now_ms();
        let enqueue_latency_ms = if now - self.stats.last_enqueue_read_ms.load(Ordering::Relaxed)
            < ENQUEUE_LATENCY_WINDOW_MS
        {
            now - self.stats.last_enqueue_store_ms.load(Ordering::Relaxed)
        } else {
            0
        };
        TimerGauges {
            enqueue_lag_msgs: info.offset_behind,
            dequeue_latency_ms: (now - read).max(0),
            enqueue_latency_ms: enqueue_latency_ms.max(0),
            dequeue_lag_msgs: info.congest_num,
            congest_msgs: info.congest_num,
            timing_by_topic,
            enqueue_total: self.stats.enqueued.load(Ordering::Relaxed),
            dequeue_total: self.stats.dequeued.load(Ordering::Relaxed),
            lateness_counts,
            lateness_sum_ms: self.stats.lateness_sum_ms.load(Ordering::Relaxed),
        }
    }

    /// GET_TIMER_CHECK_POINT's body: the checkpoint's 56 bytes as of the last flush.
    pub fn checkpoint_bytes(&self) -> Vec<u8> {
        let data = self.published.lock_unpoisoned().checkpoint;
        data.encode()[..checkpoint::CHECKPOINT_FIELDS_BYTES].to_vec()
    }

    /// GET_TIMER_METRICS's body: the `timermetrics` JSON as of the last flush.
    pub fn metrics_json(&self) -> String {
        self.published.lock_unpoisoned().metrics_json.clone()
    }

    /// Next timer-topic queue offset to enqueue and the next slot time to deliver.
    pub fn progress(&self) -> (i64, i64) {
        let st = self.state.lock_unpoisoned();
        (st.curr_queue_offset, st.curr_read_time_ms)
    }

    fn move_write_time(&self, st: &mut State) {
        let p = self.cfg.precision_ms;
        let now_floor = self.clock.now_ms() / p * p;
        st.curr_write_time_ms = st.curr_write_time_ms.max(now_floor);
    }

    /// Enqueue stages: one batch of the timer topic into the wheel.
    fn enqueue(&self, st: &mut State) -> usize {
        let offset = st.curr_queue_offset;
        let got = self.store.get_message(
            TIMER_TOPIC,
            0,
            offset,
            ENQUEUE_BATCH_MSGS,
            ENQUEUE_BATCH_BYTES,
            &AcceptAll,
        );
        let mut done = 0;
        match got.status {
            GetMessageStatus::Found => {
                for (i, rec) in got.messages.iter().enumerate() {
                    let q = got
                        .message_queue_offsets
                        .get(i)
                        .copied()
                        .unwrap_or(offset + i as i64);
                    if !self.enqueue_one(st, rec) {
                        // The store refused an immediate delivery: retry from here next pass.
                        break;
                    }
                    st.curr_queue_offset = q + 1;
                    done += 1;
                }
            }
            GetMessageStatus::OffsetTooSmall => st.curr_queue_offset = got.min_offset,
            GetMessageStatus::OffsetOverflowBadly => st.curr_queue_offset = got.max_offset,
            GetMessageStatus::NoMatchedMessage | GetMessageStatus::MessageWasRemoving
                if got.next_begin_offset > offset =>
            {
                st.curr_queue_offset = got.next_begin_offset;
            }
            _ => {}
        }
        st.commit_queue_offset = st.curr_queue_offset;
        self.stats
            .curr_queue_offset
            .store(st.curr_queue_offset, Ordering::Relaxed);
        self.move_write_time(st);
        done
    }

    /// One timer-topic record: into the wheel, or delivered now when its time has passed.
    /// `false` when it must be retried.
    fn enqueue_one(&self, st: &mut State, rec: &Bytes) -> bool {
        let Ok(Decoded::Message(r)) = record::decode_record(rec, false) else {
            tracing::error!("unreadable record in {TIMER_TOPIC}; skipped");
            return true;
        };
        self.stats
            .last_enqueue_read_ms
            .store(self.clock.now_ms(), Ordering::Relaxed);
        self.stats
            .last_enqueue_store_ms
            .store(r.store_timestamp_ms, Ordering::Relaxed);
        let props = MessageProperties::parse_bytes(r.properties);
        let Some(out_ms) = props
            .get(keys::TIMER_OUT_MS)
            .and_then(|v| v.parse::<i64>().ok())
        else {
            tracing::error!(
                offset = r.physical_offset,
                "timer message without TIMER_OUT_MS; skipped"
            );
            return true;
        };
        let is_delete = props.get(keys::TIMER_DEL_UNIQKEY).is_some();
        if !self.cfg.stop_dequeue && out_ms < st.curr_write_time_ms {
            if is_delete {
                return true;
            }
            self.stats.enqueued.fetch_add(1, Ordering::Relaxed);
            return !matches!(self.deliver(st, rec, i64::MAX, false, 0), Put::Failed);
        }
        let real_topic = props.get(keys::REAL_TOPIC).unwrap_or_default();
        match self.do_enqueue(
            st,
            r.physical_offset,
            rec.len() as i32,
            out_ms,
            is_delete,
            real_topic,
        ) {
            Ok(()) => {
                self.stats.enqueued.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(e) => {
                tracing::error!("timer log append failed: {e}; retrying");
                false
            }
        }
    }

    /// Appends a unit for a message due at `delayed_ms` and links it into its slot (a roll
    /// slot when the delay is beyond the roll window).
    fn do_enqueue(
        &self,
        st: &mut State,
        offset_py: i64,
        size_py: i32,
        delayed_ms: i64,
        is_delete: bool,
        real_topic: &str,
    ) -> Result<(), String> {
        let p = self.cfg.precision_ms;
        let write = st.curr_write_time_ms;
        let window = self.cfg.roll_window_slots;
        let mut slot_time = delayed_ms;
        let mut magic = MAGIC_DEFAULT;
        if delayed_ms - write >= window * p {
            magic |= MAGIC_ROLL;
            slot_time = if delayed_ms - write - window * p < window / 3 * p {
                write + window / 2 * p
            } else {
                write + window * p
            };
        }
        if is_delete {
            magic |= MAGIC_DELETE;
        }
        let slot = st.wheel.get_slot(slot_time);
        let unit = TimerUnit {
            prev_pos: slot.last_pos,
            magic,
            curr_write_time_ms: write,
            delay_ms: (slot_time - write) as i32,
            offset_py,
            size_py,
            topic_hash: ringmq_remoting::message::tags::java_string_hash(real_topic),
        };
        let pos = st.log.append(&unit)?;
        let first = if slot.first_pos == -1 {
            pos
        } else {
            slot.first_pos
        };
        let num = if is_delete {
            slot.num - 1
        } else {
            slot.num + 1
        };
        st.wheel.put_slot(slot_time, first, pos, num, slot.magic);
        let change = if is_delete { -1 } else { 1 };
        st.metrics.add(real_topic, change, self.clock.now_ms());
        self.stats.congest_num.fetch_add(change, Ordering::Relaxed);
        Ok(())
    }

    /// Dequeue stages: due slots, oldest first. Returns (slots passed, messages put).
    fn dequeue(&self, st: &mut State) -> (usize, usize) {
        let p = self.cfg.precision_ms;
        let (mut slots, mut delivered, mut empty) = (0, 0, 0);
        while st.curr_read_time_ms < st.curr_write_time_ms && empty < EMPTY_SLOTS_PER_PASS {
            let slot = st.wheel.get_slot(st.curr_read_time_ms);
            if slot.is_empty() {
                empty += 1;
            } else {
                match self.deliver_slot(st, slot.last_pos) {
                    Some(n) => delivered += n,
                    None => break,
                }
                let left = self.stats.congest_num.load(Ordering::Relaxed);
                let after = (left - i64::from(slot.num)).max(0);
                self.stats.congest_num.store(after, Ordering::Relaxed);
            }
            st.curr_read_time_ms += p;
            st.commit_read_time_ms = st.curr_read_time_ms;
            slots += 1;
            if !slot.is_empty() && self.stopping() {
                break;
            }
        }
        self.stats
            .curr_read_time_ms
            .store(st.curr_read_time_ms, Ordering::Relaxed);
        (slots, delivered)
    }

    /// The stage thread is being stopped: finish the current slot, start no new one.
    fn stopping(&self) -> bool {
        self.threaded.load(Ordering::SeqCst) && !self.running.load(Ordering::SeqCst)
    }

    /// Delivers every message of the chain ending at `last_pos`: delete requests first (they
    /// cancel messages of the same slot), then the others in enqueue order. `None` when a
    /// delivery kept failing: the slot is read again later.
    fn deliver_slot(&self, st: &mut State, last_pos: i64) -> Option<usize> {
        let mut units = Vec::new();
        let mut pos = last_pos;
        while pos != -1 && units.len() < MAX_UNITS_PER_SLOT {
            let Some(u) = st.log.read_unit(pos) else {
                tracing::warn!(
                    pos,
                    "timer log unit unreadable; rest of the slot chain skipped"
                );
                break;
            };
            units.push(u);
            // A chain only points backwards; anything else is damage.
            pos = if u.prev_pos < pos { u.prev_pos } else { -1 };
        }
        units.reverse();
        let mut deleted: HashSet<String> = HashSet::new();
        let mut normal = Vec::with_capacity(units.len());
        for u in units {
            if u.is_delete() && !u.is_roll() {
                let key = self
                    .store
                    .look_message_by_offset(u.offset_py)
                    .and_then(|rec| property_of(&rec, keys::TIMER_DEL_UNIQKEY));
                deleted.extend(key);
            } else {
                normal.push(u);
            }
        }
        let mut delivered = 0;
        let mut batch: Vec<(Bytes, i64, bool)> = Vec::with_capacity(MAX_PUTS_IN_FLIGHT);
        for u in normal {
            let Some(rec) = self.store.look_message_by_offset(u.offset_py) else {
                tracing::warn!(
                    offset = u.offset_py,
                    "timer message gone from the CommitLog; skipped"
                );
                continue;
            };
            if !u.is_roll() {
                if let Some(key) = property_of(&rec, keys::TIMER_DEL_UNIQKEY) {
                    deleted.insert(key);
                    continue;
                }
                if !deleted.is_empty() && deleted.contains(&delete_key_of(&rec)) {
                    continue;
                }
            }
            batch.push((rec, u.curr_write_time_ms, u.is_roll()));
            if batch.len() == MAX_PUTS_IN_FLIGHT {
                delivered += self.deliver_many(st, &batch)?;
                batch.clear();
            }
        }
        delivered += self.deliver_many(st, &batch)?;
        Some(delivered)
    }

    /// Puts a batch with all puts in flight at once (the store appends them in order);
    /// those the store did not take go through [`Self::deliver`]'s retries one by one.
    /// `None` when one kept failing while stopping.
    fn deliver_many(&self, st: &mut State, batch: &[(Bytes, i64, bool)]) -> Option<usize> {
        let (tx, rx) = mpsc::channel::<(usize, PutMessageStatus)>();
        let mut sent = Vec::with_capacity(batch.len());
        for (i, (rec, enqueue_time_ms, roll)) in batch.iter().enumerate() {
            let Some((request, _, real_topic, due_ms)) = self.convert(rec, *enqueue_time_ms, *roll)
            else {
                continue;
            };
            let tx = tx.clone();
            self.store.put(
                request,
                Box::new(move |r| {
                    let _ = tx.send((i, r.status));
                }),
            );
            sent.push((i, real_topic, due_ms));
        }
        drop(tx);
        let mut statuses: Vec<Option<PutMessageStatus>> = vec![None; batch.len()];
        let deadline = std::time::Instant::now() + Duration::from_millis(PUT_TIMEOUT_MS);
        for _ in 0..sent.len() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok((i, status)) => statuses[i] = Some(status),
                Err(_) => break,
            }
        }
        let mut delivered = 0;
        for (i, real_topic, due_ms) in sent {
            let (rec, enqueue_time_ms, roll) = &batch[i];
            let outcome = match self.judge(statuses[i], &real_topic) {
                Attempt::Done => {
                    self.note_delivered(st, *enqueue_time_ms, &real_topic, due_ms);
                    Put::Done
                }
                Attempt::Drop => Put::Dropped,
                Attempt::Retry => self.deliver(st, rec, *enqueue_time_ms, *roll, 1),
            };
            match outcome {
                Put::Done => delivered += 1,
                Put::Dropped => {}
                Put::Failed => return None,
            }
        }
        Some(delivered)
    }

    fn note_delivered(
        &self,
        st: &mut State,
        enqueue_time_ms: i64,
        real_topic: &str,
        due_ms: Option<i64>,
    ) {
        self.stats.dequeued.fetch_add(1, Ordering::Relaxed);
        if let Some(due) = due_ms {
            let lateness_ms = (self.clock.now_ms() - due).max(0);
            self.stats.lateness_counts[lateness_bucket(lateness_ms)]
                .fetch_add(1, Ordering::Relaxed);
            self.stats
                .lateness_sum_ms
                .fetch_add(lateness_ms as u64, Ordering::Relaxed);
        }
        // A message delivered without entering the wheel was never counted.
        if enqueue_time_ms != i64::MAX {
            st.metrics.add(real_topic, -1, self.clock.now_ms());
        }
    }

    /// Upstream's outcome mapping of a delivery put (`None`: no answer in time).
    fn judge(&self, status: Option<PutMessageStatus>, topic: &str) -> Attempt {
        match status {
            Some(PutMessageStatus::PutOk) => Attempt::Done,
            Some(
                PutMessageStatus::MessageIllegal
                | PutMessageStatus::PropertiesSizeExceeded
                | PutMessageStatus::WheelTimerMsgIllegal
                | PutMessageStatus::WheelTimerFlowControl
                | PutMessageStatus::WheelTimerNotEnable,
            ) => {
                tracing::warn!(topic, ?status, "timer message refused for good; dropped");
                Attempt::Drop
            }
            Some(PutMessageStatus::UnknownError) if self.cfg.skip_unknown_error => Attempt::Drop,
            _ => Attempt::Retry,
        }
    }

    /// Converts a parked message and puts it to its real queue (or, when rolling, back into
    /// the timer topic), retrying as upstream does.
    fn deliver(
        &self,
        st: &mut State,
        rec: &[u8],
        enqueue_time_ms: i64,
        roll: bool,
        attempts_done: u32,
    ) -> Put {
        let Some((request, topic, real_topic, due_ms)) = self.convert(rec, enqueue_time_ms, roll)
        else {
            return Put::Dropped;
        };
        let mut attempts = attempts_done;
        loop {
            if attempts > 0 && self.stopping() {
                return Put::Failed;
            }
            if attempts > 0 {
                std::thread::sleep(Duration::from_millis(
                    (self.cfg.precision_ms / 2).max(1) as u64
                ));
            }
            attempts += 1;
            let status = self.put_and_wait(copy_request(&request));
            match self.judge(status, &topic) {
                Attempt::Done => {
                    self.note_delivered(st, enqueue_time_ms, &real_topic, due_ms);
                    return Put::Done;
                }
                Attempt::Drop => return Put::Dropped,
                Attempt::Retry => {}
            }
            let give_up = !self.cfg.retry_until_success && attempts >= MAX_PUT_ATTEMPTS;
            if give_up {
                tracing::error!(
                    topic,
                    ?status,
                    attempts,
                    "timer message delivery failed; dropped"
                );
                return Put::Dropped;
            }
        }
    }

    fn put_and_wait(&self, request: PutRequest) -> Option<PutMessageStatus> {
        let (tx, rx) = mpsc::channel::<PutResult>();
        self.store.put(
            request,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        rx.recv_timeout(Duration::from_millis(PUT_TIMEOUT_MS))
            .ok()
            .map(|r| r.status)
    }

    /// The record to put for a due message: TIMER_ENQUEUE_MS / TIMER_DEQUEUE_MS (and
    /// TIMER_ROLL_TIMES when rolling) added, REAL_TOPIC/REAL_QID turned back into the topic
    /// and queue. Returns the request, the topic it goes to, the real topic and (unless it
    /// rolls) the time its slot became due (the lateness reference); `None` (dropped) for a message that names no real queue.
    fn convert(
        &self,
        rec: &[u8],
        enqueue_time_ms: i64,
        roll: bool,
    ) -> Option<(PutRequest, String, String, Option<i64>)> {
        let Ok(Decoded::Message(r)) = record::decode_record(rec, false) else {
            tracing::error!("unreadable timer message; dropped");
            return None;
        };
        let mut props = MessageProperties::parse_bytes(r.properties);
        let _ = props.insert(keys::TIMER_ENQUEUE_MS, &enqueue_time_ms.to_string());
        if roll {
            let times = props
                .get(keys::TIMER_ROLL_TIMES)
                .and_then(|t| t.parse::<i32>().ok())
                .unwrap_or(0);
            let _ = props.insert(keys::TIMER_ROLL_TIMES, &(times + 1).to_string());
        }
        let _ = props.insert(keys::TIMER_DEQUEUE_MS, &self.clock.now_ms().to_string());
        let _ = props.insert(keys::WAIT, "false");
        let real_topic = props.get(keys::REAL_TOPIC).unwrap_or_default().to_string();
        // TIMER_OUT_MS is the slot start; the slot is due once it has fully passed.
        let due_ms = props
            .get(keys::TIMER_OUT_MS)
            .and_then(|v| v.parse::<i64>().ok())
            .filter(|_| !roll)
            .map(|out| out + self.cfg.precision_ms);
        let (topic, queue_id) = if roll {
            (r.topic().ok()?.to_string(), r.queue_id)
        } else {
            let topic = props.remove(keys::REAL_TOPIC);
            let qid = props
                .remove(keys::REAL_QID)
                .and_then(|q| q.parse::<i32>().ok());
            match (topic, qid) {
                (Some(t), Some(q)) => (t, q),
                _ => {
                    tracing::error!("timer message without REAL_TOPIC/REAL_QID; dropped");
                    return None;
                }
            }
        };
        let mut prop_bytes = Vec::with_capacity(r.properties.len() + 64);
        props.encode_into(&mut prop_bytes);
        let fields = RecordFields {
            queue_id,
            flag: r.flag,
            queue_offset: 0,
            physical_offset: 0,
            sys_flag: r.sys_flag,
            born_timestamp_ms: r.born_timestamp_ms,
            born_host: r.born_host,
            store_timestamp_ms: 0,
            store_host: r.store_host,
            reconsume_times: r.reconsume_times,
            prepared_transaction_offset: r.prepared_transaction_offset,
            body: r.body,
            topic: &topic,
            properties: &prop_bytes,
        };
        let mut records = BytesMut::with_capacity(fields.encoded_size());
        if let Err(e) = record::encode_record(&fields, &mut records) {
            tracing::error!(topic, "timer message cannot be re-encoded ({e}); dropped");
            return None;
        }
        let request = PutRequest {
            topic: topic.clone(),
            queue_id,
            sys_flag: r.sys_flag,
            records,
            record_count: 1,
            wait_store_msg_ok: false,
        };
        Some((request, topic, real_topic, due_ms))
    }
}

/// Another put of the same record (a retried delivery).
fn copy_request(r: &PutRequest) -> PutRequest {
    PutRequest {
        topic: r.topic.clone(),
        queue_id: r.queue_id,
        sys_flag: r.sys_flag,
        records: r.records.clone(),
        record_count: r.record_count,
        wait_store_msg_ok: r.wait_store_msg_ok,
    }
}

/// The timer-topic queue offset after the message the log's last unit refers to.
fn last_unit_queue_offset(log: &TimerLog, store: &dyn StoreApi, end: i64) -> Option<i64> {
    let unit = log.read_unit(end - log::UNIT_SIZE_BYTES as i64)?;
    let rec = store.look_message_by_offset(unit.offset_py)?;
    match record::decode_record(&rec, false) {
        Ok(Decoded::Message(r)) => Some(r.queue_offset + 1),
        _ => None,
    }
}

fn property_of(rec: &[u8], key: &str) -> Option<String> {
    match record::decode_record(rec, false) {
        Ok(Decoded::Message(r)) => MessageProperties::parse_bytes(r.properties)
            .get(key)
            .map(str::to_string),
        _ => None,
    }
}

/// `REAL_TOPIC + "+" + UNIQ_KEY`: what a delete request names in TIMER_DEL_UNIQKEY.
fn delete_key_of(rec: &[u8]) -> String {
    let Ok(Decoded::Message(r)) = record::decode_record(rec, false) else {
        return String::new();
    };
    let props = MessageProperties::parse_bytes(r.properties);
    format!(
        "{}+{}",
        props.get(keys::REAL_TOPIC).unwrap_or_default(),
        props.get(keys::UNIQ_KEY).unwrap_or_default()
    )
}

#[cfg(test)]
#[path = "timer_tests.rs"]
mod tests;
