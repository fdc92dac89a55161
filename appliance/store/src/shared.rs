//! `Shared`: the state the stage threads and the `MessageStore` API share. Each stage
//! still owns its own mutable state; `Shared` is published positions, the tables readers
//! look things up in, running flags and counters. It sits below every stage, so stages
//! depend on it and never on the store that starts them.

use crate::checkpoint::{Checkpoint, CheckpointData};
use crate::commit_log::CommitLog;
use crate::config::{FlushDiskType, LiveStoreSettings, StoreConfig};
use crate::consume_queue::ConsumeQueueTable;
use crate::core_port::{run_callback, CorePorts};
use crate::index::IndexService;
use crate::refusal::{RefusalLog, DEFAULT_REFUSAL_LOG_INTERVAL};
use crate::stage_msg::{Done, Waiter};
use crate::types::{ArrivalEvent, PutMessageStatus, PutResult, StoreMetrics};
use crate::util::physical_memory_bytes;
use ringmq_ring::Notifier;
use ringmq_sync::{LockExt, RwLockExt};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::thread::Thread;

/// A long-polling arrival listener.
pub type ArrivalListener = Arc<dyn Fn(&ArrivalEvent<'_>) + Send + Sync>;

/// Running flag: disk usage above `diskSpaceWarningLevelRatio`.
pub(crate) const FLAG_DISK_FULL: u32 = 1;
/// Running flag: a ConsumeQueue write failed.
pub(crate) const FLAG_LOGIC_QUEUE_ERROR: u32 = 2;
/// Running flag: a pipeline stage thread (append or flush) ended by a panic; puts are
/// refused until the broker restarts, instead of waiting for a stage that is gone.
pub(crate) const FLAG_STAGE_FAILED: u32 = 4;

/// Counters and histograms updated by the stages.
pub(crate) struct MetricsState {
    /// Put requests made on threads that are not attached network cores (those count on
    /// their own core's counter, `CorePorts::put_requests`).
    pub put_requests: AtomicU64,
    pub put_messages: AtomicU64,
    pub put_bytes: AtomicU64,
    pub put_rejected_busy: AtomicU64,
    pub append_batches: AtomicU64,
    pub flush_count: AtomicU64,
    pub flush_waiters_completed: AtomicU64,
    pub flush_timeouts: AtomicU64,
    pub ring_full_waits: AtomicU64,
    /// Perf counter deltas of the append stage's sampled critical sections.
    pub append_perf: crate::perf_event::CounterAccumulator,
    lock_hold_us: Mutex<hdrhistogram::Histogram<u64>>,
    flush_us: Mutex<hdrhistogram::Histogram<u64>>,
}

impl MetricsState {
    fn new() -> Self {
        let h = || {
            Mutex::new(
                hdrhistogram::Histogram::new_with_bounds(1, 60_000_000, 2)
                    .expect("histogram bounds"),
            )
        };
        MetricsState {
            put_requests: AtomicU64::new(0),
            put_messages: AtomicU64::new(0),
            put_bytes: AtomicU64::new(0),
            put_rejected_busy: AtomicU64::new(0),
            append_batches: AtomicU64::new(0),
            flush_count: AtomicU64::new(0),
            flush_waiters_completed: AtomicU64::new(0),
            flush_timeouts: AtomicU64::new(0),
            ring_full_waits: AtomicU64::new(0),
            append_perf: Default::default(),
            lock_hold_us: h(),
            flush_us: h(),
        }
    }

    /// Called by the append stage after each batch that held the tail `held_us`; it never
    /// waits on a metrics reader. The value goes straight into
    /// the shared histogram (O(1)); only when a reader holds it does the value wait in the
    /// stage's `local` one, merged at the next uncontended batch. Merging and resetting walk
    /// every bucket, which per batch cost the append stage a tenth of its CPU.
    pub(crate) fn record_append_batch(
        &self,
        held_us: u64,
        msgs: u64,
        bytes: u64,
        local: &mut hdrhistogram::Histogram<u64>,
    ) {
        self.append_batches.fetch_add(1, Ordering::Relaxed);
        self.put_messages.fetch_add(msgs, Ordering::Relaxed);
        self.put_bytes.fetch_add(bytes, Ordering::Relaxed);
        let held_us = held_us.max(1);
        match self.lock_hold_us.try_lock() {
            Ok(mut h) => {
                let _ = h.record(held_us);
                if !local.is_empty() {
                    let _ = h.add(&*local);
                    local.reset();
                }
            }
            Err(_) => {
                let _ = local.record(held_us);
            }
        }
    }

    pub(crate) fn record_flush(&self, us: u64) {
        self.flush_count.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut h) = self.flush_us.lock() {
            let _ = h.record(us.max(1));
        }
    }
}

/// What `open` has loaded from disk before the stages start.
pub(crate) struct Loaded {
    pub config: StoreConfig,
    pub log: Arc<CommitLog>,
    pub cqs: ConsumeQueueTable,
    pub index: Option<Mutex<IndexService>>,
    pub checkpoint: CheckpointData,
}

/// State shared by the stage threads and the API.
pub(crate) struct Shared {
    pub config: StoreConfig,
    pub log: Arc<CommitLog>,
    pub cqs: ConsumeQueueTable,
    pub index: Option<Mutex<IndexService>>,
    listeners: RwLock<Vec<ArrivalListener>>,
    pub reput_offset: AtomicU64,
    pub running_flags: AtomicU32,
    pub stopping: AtomicBool,
    pub reput_may_exit: AtomicBool,
    pub begin_time_in_lock_ms: AtomicI64,
    reput_thread: OnceLock<Thread>,
    pub metrics: MetricsState,
    pub checkpoint_physic_ts: AtomicI64,
    pub checkpoint_logics_ts: AtomicI64,
    /// The logics timestamp the last full ConsumeQueue flush made durable: what the
    /// checkpoint claims between thorough passes (`flushConsumeQueueThoroughInterval`).
    logics_flushed_ts: AtomicI64,
    pub topic_generation: AtomicU64,
    /// The store keys an update may change while the store runs (read on every use).
    pub live: LiveStoreSettings,
    /// Physical memory, read once: `accessMessageInMemoryMaxRatio` is a share of it.
    physical_memory_bytes: u64,
    /// False while index entries cannot be written (records are stored and dispatched but
    /// not indexed by key; puts go on).
    pub index_available: AtomicBool,
    /// Refused puts, counted per reason and logged rate-limited.
    pub refusals: RefusalLog,
    /// The append stage waits on this; every producer rings it after queuing.
    pub append_doorbell: Arc<Notifier>,
    /// The network cores' put and completion rings, once the broker attached its cores.
    pub core_ports: OnceLock<CorePorts>,
    /// `waitTimeMillsInSendQueue` while `brokerFastFailureEnable` (0: no limit): a put
    /// that waited longer for the append stage is refused unstored.
    pub send_queue_wait_limit_ms: AtomicU64,
    /// Replication: the master stage's doorbell and acks, the slave's master link.
    pub ha: crate::ha::HaState,
}

impl Shared {
    pub fn new(loaded: Loaded, append_doorbell: Arc<Notifier>, ha_doorbell: Arc<Notifier>) -> Self {
        let Loaded {
            config,
            log,
            cqs,
            index,
            checkpoint,
        } = loaded;
        Shared {
            log,
            cqs,
            index,
            listeners: RwLock::new(Vec::new()),
            reput_offset: AtomicU64::new(0),
            running_flags: AtomicU32::new(0),
            stopping: AtomicBool::new(false),
            reput_may_exit: AtomicBool::new(false),
            begin_time_in_lock_ms: AtomicI64::new(0),
            reput_thread: OnceLock::new(),
            metrics: MetricsState::new(),
            checkpoint_physic_ts: AtomicI64::new(checkpoint.physic_msg_timestamp),
            checkpoint_logics_ts: AtomicI64::new(checkpoint.logics_msg_timestamp),
            logics_flushed_ts: AtomicI64::new(checkpoint.logics_msg_timestamp),
            topic_generation: AtomicU64::new(0),
            live: LiveStoreSettings::new(&config),
            physical_memory_bytes: physical_memory_bytes(),
            index_available: AtomicBool::new(true),
            refusals: RefusalLog::new("put", DEFAULT_REFUSAL_LOG_INTERVAL),
            append_doorbell,
            core_ports: OnceLock::new(),
            send_queue_wait_limit_ms: AtomicU64::new(0),
            ha: crate::ha::HaState::new(
                ha_doorbell,
                config.ha_master_address.clone(),
                if config.controller_mode {
                    crate::config::BrokerRole::Slave
                } else {
                    config.broker_role
                },
            ),
            config,
        }
    }

    /// Bytes behind the CommitLog max offset still served from memory
    /// (`accessMessageInMemoryMaxRatio` of physical memory, as it is now).
    pub fn mem_limit_bytes(&self) -> u64 {
        self.physical_memory_bytes / 100 * u64::from(self.live.access_message_in_memory_max_ratio())
    }

    /// Dispatch bound: flushed offset under SYNC_FLUSH (consumers only see durable
    /// messages), max offset under ASYNC_FLUSH; in controller mode no further than the
    /// replicas allow ([`crate::ha::HaState::replica_dispatch_bound`]).
    pub fn confirm_offset(&self) -> u64 {
        let local = match self.config.flush_disk_type {
            FlushDiskType::SyncFlush => self.log.flushed_offset(),
            FlushDiskType::AsyncFlush => self.log.max_offset(),
        };
        match self.ha.replica_dispatch_bound(&self.config) {
            Some(bound) => local.min(bound),
            None => local,
        }
    }
    /// Bytes stored but not yet dispatched to ConsumeQueue/index.
    pub fn dispatch_behind_bytes(&self) -> i64 {
        self.confirm_offset() as i64 - self.reput_offset.load(Ordering::Acquire) as i64
    }
    /// Records the reput thread, so stages can wake it when there is new work.
    pub fn set_reput_thread(&self, thread: Thread) {
        let _ = self.reput_thread.set(thread);
    }
    /// Counts a put request (`put_requests`): on its network core's own counter, or on
    /// the shared one for puts made on other threads.
    pub(crate) fn count_put_request(&self) {
        let on_core = self
            .core_ports
            .get()
            .is_some_and(CorePorts::count_put_request);
        if !on_core {
            self.metrics.put_requests.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Stage thread: the put is finished; its callback runs on the core it came from, or
    /// here for puts made elsewhere. Call [`ring_cores`](Self::ring_cores) after a batch.
    pub fn complete_put(&self, done: Done, result: PutResult) {
        match self.core_ports.get() {
            Some(ports) => ports.complete(done, result),
            None => run_callback(done, result),
        }
    }

    /// Completes a SYNC_FLUSH waiter whose bytes were stored but not confirmed durable
    /// (deadline passed, or the flush stage is gone) with FLUSH_DISK_TIMEOUT.
    pub(crate) fn complete_flush_timeout(&self, waiter: Waiter) {
        let mut result = waiter.result;
        result.status = PutMessageStatus::FlushDiskTimeout;
        self.complete_put(waiter.done, result);
    }

    /// Stage thread, after a batch of completions: one wake-up per core that got any.
    pub fn ring_cores(&self) {
        if let Some(ports) = self.core_ports.get() {
            ports.ring_cores();
        }
    }

    pub fn wake_reput(&self) {
        if let Some(t) = self.reput_thread.get() {
            t.unpark();
        }
    }
    pub fn set_flag(&self, flag: u32) {
        self.running_flags.fetch_or(flag, Ordering::AcqRel);
    }
    pub fn clear_flag(&self, flag: u32) {
        self.running_flags.fetch_and(!flag, Ordering::AcqRel);
    }
    pub fn add_listener(&self, listener: ArrivalListener) {
        self.listeners.write_unpoisoned().push(listener);
    }
    pub fn listeners_snapshot(&self) -> Vec<ArrivalListener> {
        self.listeners.read_unpoisoned().clone()
    }
    pub fn is_writeable(&self) -> bool {
        self.running_flags.load(Ordering::Acquire) == 0 && !self.stopping.load(Ordering::Acquire)
    }
    fn checkpoint_data(&self, logics_ts: i64) -> CheckpointData {
        CheckpointData {
            physic_msg_timestamp: self.checkpoint_physic_ts.load(Ordering::Acquire),
            logics_msg_timestamp: logics_ts,
            index_msg_timestamp: self
                .index
                .as_ref()
                .map(|i| i.lock_unpoisoned().last_full_end_timestamp())
                .unwrap_or(0),
            master_flushed_offset: 0,
            confirm_phy_offset: self.confirm_offset() as i64,
        }
    }
    /// Flushes ConsumeQueues and the newest index file, then persists the checkpoint
    /// (upstream's FlushConsumeQueueService tick). `least_pages` 0 is a thorough pass:
    /// every unflushed unit goes to disk, and the checkpoint's logics timestamp
    /// advances to what was dispatched before the pass began. Otherwise only ConsumeQueue
    /// files past `least_pages` dirty pages are flushed and the checkpoint keeps the last
    /// thorough pass's logics timestamp, so it never claims more than is on disk.
    pub(crate) fn flush_logics_and_checkpoint(
        &self,
        checkpoint: &Mutex<Checkpoint>,
        least_pages: u32,
    ) {
        let dispatched_ts = self.checkpoint_logics_ts.load(Ordering::Acquire);
        let mut all_flushed = true;
        for cq in self.cqs.all() {
            if let Err(e) = cq.flush(least_pages) {
                all_flushed = false;
                tracing::error!(error = %e, "flushing ConsumeQueue failed");
            }
        }
        if least_pages == 0 && all_flushed {
            self.logics_flushed_ts
                .fetch_max(dispatched_ts, Ordering::AcqRel);
        }
        // Outside the index lock: the msync can take milliseconds and the reput stage
        // takes that lock for every record it indexes.
        let newest_index = self
            .index
            .as_ref()
            .and_then(|i| i.lock_unpoisoned().newest_mapping());
        if let Some(mf) = newest_index {
            if let Err(e) = mf.flush_range(0, mf.size()) {
                tracing::error!(error = %e, "flushing index failed");
            }
        }
        let data = self.checkpoint_data(self.logics_flushed_ts.load(Ordering::Acquire));
        if let Err(e) = checkpoint.lock_unpoisoned().write(&data) {
            tracing::error!(error = %e, "writing checkpoint failed");
        }
    }

    /// Counters and latency summaries.
    pub fn store_metrics(&self) -> StoreMetrics {
        let m = &self.metrics;
        let (p50, p99, pmax) = m
            .lock_hold_us
            .lock()
            .map(|h| (h.value_at_quantile(0.5), h.value_at_quantile(0.99), h.max()))
            .unwrap_or_default();
        let (f50, f99) = m
            .flush_us
            .lock()
            .map(|h| (h.value_at_quantile(0.5), h.value_at_quantile(0.99)))
            .unwrap_or_default();
        let flushes = m.flush_count.load(Ordering::Relaxed);
        let (ha_ack_lag_counts, ha_ack_lag_sum_us) = self.ha.ack_lag.snapshot();
        StoreMetrics {
            put_requests: m.put_requests.load(Ordering::Relaxed)
                + self.core_ports.get().map_or(0, CorePorts::put_requests),
            put_messages: m.put_messages.load(Ordering::Relaxed),
            put_bytes: m.put_bytes.load(Ordering::Relaxed),
            put_rejected_busy: m.put_rejected_busy.load(Ordering::Relaxed),
            append_batches: m.append_batches.load(Ordering::Relaxed),
            lock_hold_p50_us: p50,
            lock_hold_p99_us: p99,
            lock_hold_max_us: pmax,
            flush_count: flushes,
            flush_group_mean: if flushes == 0 {
                0.0
            } else {
                m.flush_waiters_completed.load(Ordering::Relaxed) as f64 / flushes as f64
            },
            flush_p50_us: f50,
            flush_p99_us: f99,
            commit_log_max_offset: self.log.max_offset() as i64,
            commit_log_flushed_offset: self.log.flushed_offset() as i64,
            dispatch_behind_bytes: self.dispatch_behind_bytes(),
            consume_queue_count: self.cqs.len(),
            writeable: self.is_writeable(),
            put_refusals: self.refusals.totals(),
            append_perf: m.append_perf.snapshot(),
            ha_ack_lag_counts,
            ha_ack_lag_sum_us,
        }
    }
}
