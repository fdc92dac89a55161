//! `MessageStore`: opens and recovers a store directory, starts the stage threads
//! (allocator, append, flush coordinator + worker, reput, housekeeping, retention) and
//! offers the put/get/query API the broker codes against. Also holds `Shared`, the state
//! the stage threads share (each stage still owns its own mutable state; `Shared` is
//! published positions, tables readers look things up in, and counters).

use crate::append::{self, AppendMsg, AppendStage};
use crate::checkpoint::{Checkpoint, CheckpointData};
use crate::commit_log::{create_segment, AllocatorHandle, CommitLog, SegmentSpec};
use crate::config::{FlushDiskType, StoreConfig, WriteMode};
use crate::consume_queue::{ConsumeQueueTable, CqUnit};
use crate::direct::{DirectFlusher, DirectRing};
use crate::error::StoreError;
use crate::flush::{self, FlushMsg};
use crate::index::IndexService;
use crate::mapped_file::OS_PAGE_SIZE;
use crate::refusal::{RefusalLog, DEFAULT_REFUSAL_LOG_INTERVAL};
use crate::reput::{self, Dispatcher};
use crate::retention::{self, RetentionState};
use crate::types::*;
use crate::util::{now_ms, physical_memory_bytes, property};
use bytes::Bytes;
use ringmq_remoting::message::record::{self, Decoded};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// A long-polling arrival listener.
pub type ArrivalListener = Arc<dyn Fn(&ArrivalEvent<'_>) + Send + Sync>;

/// Running flag: disk usage above `diskSpaceWarningLevelRatio`.
pub(crate) const FLAG_DISK_FULL: u32 = 1;
/// Running flag: a ConsumeQueue write failed.
pub(crate) const FLAG_LOGIC_QUEUE_ERROR: u32 = 2;

/// Reasons a put is refused before it reaches the append stage (log and metrics keys).
pub const REFUSED_SHUTTING_DOWN: &str = "SHUTTING_DOWN";
pub const REFUSED_DISK_FULL: &str = "DISK_FULL";
pub const REFUSED_LOGIC_QUEUE_ERROR: &str = "LOGIC_QUEUE_ERROR";
/// An append batch has run longer than `osPageCacheBusyTimeOutMills`.
pub const REFUSED_PAGE_CACHE_BUSY: &str = "PAGE_CACHE_BUSY";
/// Direct mode: unflushed bytes above `ringmq.directWriteRingBusyRatio` of the ring.
pub const REFUSED_WRITE_RING_BUSY: &str = "WRITE_RING_BUSY";
/// The producer → append stage queue is full.
pub const REFUSED_APPEND_QUEUE_FULL: &str = "APPEND_QUEUE_FULL";

/// Bound of the append → flush queue (batches of waiters; each batch is one append batch).
const FLUSH_QUEUE_BOUND: usize = 4096;
/// Housekeeping tick: CQ/index flush and checkpoint (upstream flushes the checkpoint every 1 s).
const HOUSEKEEPING_TICK_MS: u64 = 1000;
/// Longest shutdown waits for dispatch to catch up (upstream 5 s).
const SHUTDOWN_REPUT_WAIT_MS: u64 = 5000;
/// How long `open` retries a held `lock` file before reporting `Locked`.
const LOCK_RETRY_MS: u64 = 1000;
/// Shortest `cleanResourceInterval` honoured (a smaller value would spin the clean thread).
const MIN_CLEAN_INTERVAL_MS: u64 = 100;
/// Hard cap on one get's bytes (upstream MAX_PULL_MSG_SIZE, 128 MiB).
const MAX_PULL_MSG_SIZE: usize = 128 * 1024 * 1024;

/// Counters and histograms updated by the stages.
pub(crate) struct MetricsState {
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

    /// Called by the append stage after each batch. The stage keeps a local histogram and
    /// merges it only when the shared one is free, so it never waits on a metrics reader.
    pub(crate) fn record_append_batch(
        &self,
        msgs: u64,
        bytes: u64,
        local: &mut hdrhistogram::Histogram<u64>,
    ) {
        self.append_batches.fetch_add(1, Ordering::Relaxed);
        self.put_messages.fetch_add(msgs, Ordering::Relaxed);
        self.put_bytes.fetch_add(bytes, Ordering::Relaxed);
        if let Ok(mut h) = self.lock_hold_us.try_lock() {
            let _ = h.add(&*local);
            local.reset();
        }
    }

    pub(crate) fn record_flush(&self, us: u64) {
        self.flush_count.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut h) = self.flush_us.lock() {
            let _ = h.record(us.max(1));
        }
    }
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
    pub topic_generation: AtomicU64,
    mem_limit_bytes: u64,
    /// False while index entries cannot be written (records are stored and dispatched but
    /// not indexed by key; puts go on).
    pub index_available: AtomicBool,
    /// Refused puts, counted per reason and logged rate-limited.
    pub refusals: RefusalLog,
}

impl Shared {
    /// Dispatch bound: flushed offset under SYNC_FLUSH (consumers only see durable
    /// messages), max offset under ASYNC_FLUSH.
    pub fn confirm_offset(&self) -> u64 {
        match self.config.flush_disk_type {
            FlushDiskType::SyncFlush => self.log.flushed_offset(),
            FlushDiskType::AsyncFlush => self.log.max_offset(),
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
    pub fn listeners_snapshot(&self) -> Vec<ArrivalListener> {
        self.listeners
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
    fn is_writeable(&self) -> bool {
        self.running_flags.load(Ordering::Acquire) == 0 && !self.stopping.load(Ordering::Acquire)
    }
    fn checkpoint_data(&self, logics_ts: i64) -> CheckpointData {
        CheckpointData {
            physic_msg_timestamp: self.checkpoint_physic_ts.load(Ordering::Acquire),
            logics_msg_timestamp: logics_ts,
            index_msg_timestamp: self
                .index
                .as_ref()
                .map(|i| {
                    i.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .last_full_end_timestamp()
                })
                .unwrap_or(0),
            master_flushed_offset: 0,
            confirm_phy_offset: self.confirm_offset() as i64,
        }
    }
    /// Flushes ConsumeQueues and index, then persists the checkpoint. The logics timestamp
    /// is read before the queue flush so it never claims more than is on disk.
    pub(crate) fn flush_logics_and_checkpoint(&self, checkpoint: &Mutex<Checkpoint>) {
        let logics_ts = self.checkpoint_logics_ts.load(Ordering::Acquire);
        for cq in self.cqs.all() {
            if let Err(e) = cq.flush() {
                tracing::error!(error = %e, "flushing ConsumeQueue failed");
            }
        }
        if let Some(i) = &self.index {
            if let Err(e) = i.lock().unwrap_or_else(|p| p.into_inner()).flush() {
                tracing::error!(error = %e, "flushing index failed");
            }
        }
        let data = self.checkpoint_data(logics_ts);
        if let Err(e) = checkpoint
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .write(&data)
        {
            tracing::error!(error = %e, "writing checkpoint failed");
        }
    }
}

struct Inner {
    shared: Arc<Shared>,
    put_tx: SyncSender<AppendMsg>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    reput_handle: Mutex<Option<JoinHandle<()>>>,
    housekeeping: Mutex<Option<(SyncSender<()>, JoinHandle<()>)>>,
    /// The retention thread and its stop signal.
    cleaner: Mutex<Option<(SyncSender<()>, JoinHandle<()>)>>,
    checkpoint: Arc<Mutex<Checkpoint>>,
    retention: Arc<Mutex<RetentionState>>,
    /// Held for the store's lifetime; released at shutdown so the directory can reopen.
    lock_file: Mutex<Option<File>>,
    shut: AtomicBool,
    /// No `abort` file was found at open: the previous run shut down cleanly.
    last_exit_ok: bool,
}

/// The message store. Cheap to clone; all clones share one store.
#[derive(Clone)]
pub struct MessageStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for MessageStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageStore")
            .field("root", &self.inner.shared.config.store_path_root_dir)
            .finish()
    }
}

fn lock_store(config: &StoreConfig) -> Result<File, StoreError> {
    let path = config.lock_path();
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| StoreError::io("open", &path, e))?;
    // An open-file-description lock on byte [0,1): conflicts with Java's FileChannel lock
    // (POSIX record lock) and with a second open of the same store in this process.
    let fl = libc::flock {
        l_type: libc::F_WRLCK as i16,
        l_whence: libc::SEEK_SET as i16,
        l_start: 0,
        l_len: 1,
        l_pid: 0,
    };
    // A just-closed holder can keep the lock a moment longer (a process forking between
    // our open and its exec shares the description), so retry briefly before refusing.
    let deadline = Instant::now() + Duration::from_millis(LOCK_RETRY_MS);
    loop {
        // SAFETY: fcntl with a valid fd and a pointer to a local flock struct.
        let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
        if rc == 0 {
            break;
        }
        if Instant::now() >= deadline {
            return Err(StoreError::Locked { path });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = f.write_all(b"lock");
    Ok(f)
}

impl MessageStore {
    /// Opens the store under `config.store_path_root_dir`: locks it, loads and recovers
    /// CommitLog, ConsumeQueues, index and checkpoint, creates the `abort` file and starts
    /// the stage threads.
    pub fn open(config: StoreConfig) -> Result<Self, StoreError> {
        let file_size = config.mapped_file_size_commit_log;
        if file_size < 4 * OS_PAGE_SIZE
            || !file_size.is_multiple_of(OS_PAGE_SIZE)
            || file_size > i32::MAX as u64 + 1
        {
            return Err(StoreError::Config(format!(
                "mappedFileSizeCommitLog {file_size} must be a multiple of 4096 between 16 KiB and 2 GiB"
            )));
        }
        let root = config.store_path_root_dir.clone();
        std::fs::create_dir_all(&root).map_err(|e| StoreError::io("create_dir", &root, e))?;
        let lock_file = lock_store(&config)?;
        let last_exit_ok = !config.abort_path().exists();
        let log = Arc::new(CommitLog::load(&config.commit_log_dir(), file_size)?);
        let cqs = ConsumeQueueTable::load(
            &config.consume_queue_dir(),
            config.consume_queue_file_size_bytes(),
        )?;
        let (checkpoint, cp) = Checkpoint::open(&config.checkpoint_path())?;
        let index = if config.message_index_enable {
            Some(Mutex::new(IndexService::load(
                &config.index_dir(),
                config.max_hash_slot_num.max(1),
                config.max_index_num.max(2),
            )?))
        } else {
            None
        };
        let shared = Arc::new(Shared {
            log: Arc::clone(&log),
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
            checkpoint_physic_ts: AtomicI64::new(cp.physic_msg_timestamp),
            checkpoint_logics_ts: AtomicI64::new(cp.logics_msg_timestamp),
            topic_generation: AtomicU64::new(0),
            mem_limit_bytes: physical_memory_bytes() / 100
                * u64::from(config.access_message_in_memory_max_ratio),
            index_available: AtomicBool::new(true),
            refusals: RefusalLog::new("put", DEFAULT_REFUSAL_LOG_INTERVAL),
            config,
        });
        let config = &shared.config;
        let mut dispatcher = Dispatcher::new(Arc::clone(&shared));
        let recovered = crate::recovery::recover(&shared, &mut dispatcher, last_exit_ok, &cp)?;
        tracing::info!(
            root = %root.display(), last_exit_ok, max_offset = recovered.process_offset,
            redispatched = recovered.redispatched,
            preallocated_kept = recovered.preallocated_kept, "store recovered"
        );
        let direct = config.write_mode == WriteMode::Direct;
        let spec = SegmentSpec {
            file_size,
            warm: config.warm_mapped_file_enable,
            direct,
        };
        let process = recovered.process_offset;
        // The segment the first put goes to exists before `open` returns (and so before the
        // broker reports ready): creating it on the append path would hold the CommitLog
        // tail for as long as creation takes (seconds with warmMapedFileEnable).
        if log.segment_for(process).is_none() {
            let start = process - process % file_size;
            let t = Instant::now();
            let seg = create_segment(&config.commit_log_dir(), start, spec)?;
            log.push_file(seg);
            tracing::info!(
                offset = start,
                warm = spec.warm,
                took_ms = t.elapsed().as_millis() as u64,
                "created the CommitLog segment for the first put"
            );
        }
        let mut table: HashMap<String, HashMap<i32, i64>> = HashMap::new();
        for cq in shared.cqs.all() {
            table
                .entry(cq.topic().to_string())
                .or_default()
                .insert(cq.queue_id(), cq.max_offset());
        }
        // abort: present while running; content = pid.
        let abort = config.abort_path();
        std::fs::write(&abort, std::process::id().to_string())
            .map_err(|e| StoreError::io("write", &abort, e))?;
        if let Ok(d) = File::open(&root) {
            let _ = d.sync_all();
        }
        let checkpoint = Arc::new(Mutex::new(checkpoint));
        shared.flush_logics_and_checkpoint(&checkpoint);

        let ring = if direct {
            let ring = Arc::new(DirectRing::new(config.direct_write_ring_size_bytes)?);
            // Only the segment being written has pages O_DIRECT will rewrite; complete
            // segments keep default read-ahead for cold reads.
            if let Some(seg) = log.segment_for(process) {
                seg.advise_random();
            }
            // The partial last page must be in the ring: flushes rewrite whole pages.
            let page = process / OS_PAGE_SIZE * OS_PAGE_SIZE;
            ring.start_at(page);
            if let Some(seg) = log.segment_for(process) {
                ring.load_from_segment(&seg, page, process);
            }
            log.set_ring(Arc::clone(&ring));
            Some(ring)
        } else {
            None
        };

        let mut threads = Vec::new();
        let (allocator, h) = AllocatorHandle::start(config.commit_log_dir(), spec);
        threads.push(h);
        let (flush_tx, flush_rx) = mpsc::sync_channel::<FlushMsg>(FLUSH_QUEUE_BOUND);
        let (job_tx, job_rx) = mpsc::sync_channel(flush::FLUSH_JOB_QUEUE_BOUND);
        let direct_flusher = match &ring {
            Some(r) => Some(DirectFlusher::new(
                Arc::clone(r),
                config.commit_log_dir(),
                file_size,
            )?),
            None => None,
        };
        {
            let s = Arc::clone(&shared);
            let tx = flush_tx.clone();
            threads.push(spawn("ringmq-flush-io", move || {
                flush::run_worker(s, job_rx, tx, direct_flusher)
            })?);
        }
        {
            let s = Arc::clone(&shared);
            threads.push(spawn("ringmq-flush", move || {
                flush::run_coordinator(s, flush_rx, job_tx)
            })?);
        }
        let (put_tx, put_rx) = mpsc::sync_channel::<AppendMsg>(config.put_queue_capacity.max(1));
        {
            let stage = AppendStage::new(
                Arc::clone(&shared),
                put_rx,
                flush_tx,
                allocator,
                table,
                ring,
            );
            threads.push(spawn("ringmq-append", move || stage.run())?);
        }
        let reput_handle = {
            let s = Arc::clone(&shared);
            let from = recovered.process_offset;
            spawn("ringmq-reput", move || reput::run(s, dispatcher, from))?
        };
        let _ = shared.reput_thread.set(reput_handle.thread().clone());
        let retention = Arc::new(Mutex::new(RetentionState::default()));
        let housekeeping = {
            let (stop_tx, stop_rx) = mpsc::sync_channel::<()>(1);
            let s = Arc::clone(&shared);
            let cp = Arc::clone(&checkpoint);
            let h = spawn("ringmq-housekeeping", move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) =
                    stop_rx.recv_timeout(Duration::from_millis(HOUSEKEEPING_TICK_MS))
                {
                    s.flush_logics_and_checkpoint(&cp);
                    s.refusals.flush();
                }
            })?;
            (stop_tx, h)
        };
        // Retention on its own thread: its pauses between deletions (upstream's
        // deleteCommitLogFilesInterval / deleteConsumeQueueFilesInterval) must not delay
        // the checkpoint.
        let cleaner = {
            let (stop_tx, stop_rx) = mpsc::sync_channel::<()>(1);
            let s = Arc::clone(&shared);
            let ret = Arc::clone(&retention);
            let h = spawn("ringmq-clean", move || {
                let every_ms = s
                    .config
                    .clean_resource_interval_ms
                    .max(MIN_CLEAN_INTERVAL_MS);
                let mut stopped = false;
                // Waits `ms`; false once shutdown asked (and from then on).
                let mut pause = |ms: u64| {
                    stopped = stopped
                        || !matches!(
                            stop_rx.recv_timeout(Duration::from_millis(ms)),
                            Err(mpsc::RecvTimeoutError::Timeout)
                        );
                    !stopped
                };
                while pause(every_ms) {
                    let mut st = ret.lock().unwrap_or_else(|p| p.into_inner());
                    retention::run_once(&s, &mut st, &mut pause);
                }
            })?;
            (stop_tx, h)
        };
        Ok(MessageStore {
            inner: Arc::new(Inner {
                shared,
                put_tx,
                threads: Mutex::new(threads),
                reput_handle: Mutex::new(Some(reput_handle)),
                housekeeping: Mutex::new(Some(housekeeping)),
                cleaner: Mutex::new(Some(cleaner)),
                checkpoint,
                retention,
                lock_file: Mutex::new(Some(lock_file)),
                shut: AtomicBool::new(false),
                last_exit_ok,
            }),
        })
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// Whether the previous run shut down cleanly (no `abort` file at open), i.e. this open
    /// ran normal rather than abnormal recovery.
    pub fn last_exit_ok(&self) -> bool {
        self.inner.last_exit_ok
    }

    /// The configuration the store runs with.
    pub fn config(&self) -> &StoreConfig {
        &self.shared().config
    }

    /// Whether the current append batch has run longer than `osPageCacheBusyTimeOutMills`.
    pub fn is_os_page_cache_busy(&self) -> bool {
        let begin = self.shared().begin_time_in_lock_ms.load(Ordering::Acquire);
        if begin == 0 {
            return false;
        }
        let held = now_ms() - begin;
        held > self.shared().config.os_page_cache_busy_timeout_ms as i64 && held < 10_000_000
    }

    fn direct_ring_busy(&self) -> bool {
        let s = self.shared();
        match s.log.ring() {
            Some(ring) => {
                // Bytes the ring must still hold: not yet written to the files.
                let unflushed = s.log.max_offset().saturating_sub(ring.written());
                unflushed * 100
                    > ring.size() * u64::from(s.config.direct_write_ring_busy_ratio.clamp(1, 100))
            }
            None => false,
        }
    }

    /// Stores one or more pre-encoded records for a topic-queue. `on_done` runs exactly once,
    /// on a stage thread (after the flush under SYNC_FLUSH) or inline for refusals.
    pub fn put(&self, req: PutRequest, on_done: Box<dyn FnOnce(PutResult) + Send>) {
        let s = self.shared();
        s.metrics.put_requests.fetch_add(1, Ordering::Relaxed);
        if s.stopping.load(Ordering::Acquire) {
            s.refusals.refused(REFUSED_SHUTTING_DOWN);
            return on_done(PutResult::failed(PutMessageStatus::ServiceNotAvailable));
        }
        let flags = s.running_flags.load(Ordering::Acquire);
        if flags != 0 {
            s.refusals.refused(if flags & FLAG_DISK_FULL != 0 {
                REFUSED_DISK_FULL
            } else {
                REFUSED_LOGIC_QUEUE_ERROR
            });
            return on_done(PutResult::failed(PutMessageStatus::ServiceNotAvailable));
        }
        if self.is_os_page_cache_busy() {
            s.metrics.put_rejected_busy.fetch_add(1, Ordering::Relaxed);
            s.refusals.refused(REFUSED_PAGE_CACHE_BUSY);
            return on_done(PutResult::failed(PutMessageStatus::OsPageCacheBusy));
        }
        if self.direct_ring_busy() {
            s.metrics.put_rejected_busy.fetch_add(1, Ordering::Relaxed);
            s.refusals.refused(REFUSED_WRITE_RING_BUSY);
            return on_done(PutResult::failed(PutMessageStatus::OsPageCacheBusy));
        }
        if let Err(status) = append::validate(&req, s.config.max_message_size, s.log.file_size()) {
            return on_done(PutResult::failed(status));
        }
        match self
            .inner
            .put_tx
            .try_send(AppendMsg::Put { req, done: on_done })
        {
            Ok(()) => {}
            Err(TrySendError::Full(AppendMsg::Put { done, .. })) => {
                s.metrics.put_rejected_busy.fetch_add(1, Ordering::Relaxed);
                s.refusals.refused(REFUSED_APPEND_QUEUE_FULL);
                done(PutResult::failed(PutMessageStatus::OsPageCacheBusy))
            }
            Err(TrySendError::Disconnected(AppendMsg::Put { done, .. })) => {
                done(PutResult::failed(PutMessageStatus::ServiceNotAvailable))
            }
            Err(_) => {}
        }
    }

    /// Blocking convenience over [`put`](Self::put) (tests, tools; never on a network core).
    pub fn put_blocking(&self, req: PutRequest) -> PutResult {
        let (tx, rx) = mpsc::sync_channel(1);
        self.put(
            req,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        rx.recv()
            .unwrap_or(PutResult::failed(PutMessageStatus::UnknownError))
    }

    /// Reads up to `max_msg_nums` messages of a queue from logical `offset` (`store.md` §12).
    pub fn get_message(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_msg_nums: i32,
        max_total_bytes: usize,
        filter: &dyn MessageFilter,
    ) -> GetMessageResult {
        let s = self.shared();
        let Some(cq) = s.cqs.find(topic, queue_id) else {
            return GetMessageResult::empty(GetMessageStatus::NoMatchedLogicQueue, 0, 0, 0);
        };
        let (min, max) = (cq.min_offset(), cq.max_offset());
        if max == 0 {
            return GetMessageResult::empty(GetMessageStatus::NoMessageInQueue, 0, min, max);
        }
        if offset < min {
            return GetMessageResult::empty(GetMessageStatus::OffsetTooSmall, min, min, max);
        }
        if offset == max {
            return GetMessageResult::empty(GetMessageStatus::OffsetOverflowOne, offset, min, max);
        }
        if offset > max {
            return GetMessageResult::empty(GetMessageStatus::OffsetOverflowBadly, max, min, max);
        }
        let cfg = &s.config;
        let max_msg_nums = max_msg_nums.max(1) as usize;
        let max_filter_bytes =
            cfg.max_filter_message_size
                .max(max_msg_nums * crate::consume_queue::CQ_UNIT_SIZE) as i64;
        let max_pull = max_total_bytes.clamp(100, MAX_PULL_MSG_SIZE);
        let log_max = s.log.max_offset() as i64;
        let mut res = GetMessageResult::empty(GetMessageStatus::NoMatchedMessage, offset, min, max);
        let mut spans = FileSpans::default();
        let mut total_bytes = 0usize;
        let mut max_phy_pulling = 0i64;
        let mut next_phy_file_start = i64::MIN;
        let mut i = offset;
        while i < max {
            if (i - offset) * crate::consume_queue::CQ_UNIT_SIZE as i64 >= max_filter_bytes {
                break;
            }
            let Some(unit) = cq.get_unit(i) else {
                if res.messages.is_empty() {
                    res.status = GetMessageStatus::OffsetFoundNull;
                    res.next_begin_offset = cq.roll_next_file(i);
                }
                break;
            };
            if unit == CqUnit::FILLER || !unit.is_valid() {
                i += 1;
                res.next_begin_offset = i;
                continue;
            }
            let size = unit.size as usize;
            let in_mem = (log_max - unit.commit_log_offset) as u64 <= s.mem_limit_bytes;
            if batch_full(
                cfg,
                size,
                max_msg_nums,
                max_pull,
                total_bytes,
                res.messages.len(),
                in_mem,
            ) || total_bytes >= max_pull
            {
                break;
            }
            max_phy_pulling = unit.commit_log_offset;
            i += 1;
            res.next_begin_offset = i;
            if next_phy_file_start != i64::MIN && unit.commit_log_offset < next_phy_file_start {
                continue;
            }
            if !filter.match_by_tags_code(Some(unit.tags_code)) {
                if total_bytes == 0 {
                    res.status = GetMessageStatus::NoMatchedMessage;
                }
                continue;
            }
            let Some(rec) = s.log.read_record_sized(unit.commit_log_offset as u64, size) else {
                if total_bytes == 0 {
                    res.status = GetMessageStatus::MessageWasRemoving;
                }
                next_phy_file_start = s.log.roll_next_file(unit.commit_log_offset as u64) as i64;
                continue;
            };
            if !filter.match_by_record(&rec) {
                if total_bytes == 0 {
                    res.status = GetMessageStatus::NoMatchedMessage;
                }
                continue;
            }
            total_bytes += rec.len();
            spans.add(
                &s.log,
                res.messages.len(),
                unit.commit_log_offset as u64,
                rec.len(),
            );
            res.messages.push(rec);
            res.message_queue_offsets.push(i - 1);
            res.status = GetMessageStatus::Found;
            next_phy_file_start = i64::MIN;
        }
        res.suggest_pulling_from_slave = (log_max - max_phy_pulling) as u64 > s.mem_limit_bytes;
        res.file_spans = spans.spans;
        res
    }

    /// Next logical offset of a queue (0 if unknown).
    pub fn max_offset_in_queue(&self, topic: &str, queue_id: i32) -> i64 {
        self.shared()
            .cqs
            .find(topic, queue_id)
            .map(|c| c.max_offset())
            .unwrap_or(0)
    }

    /// First logical offset still served (0 if unknown).
    pub fn min_offset_in_queue(&self, topic: &str, queue_id: i32) -> i64 {
        self.shared()
            .cqs
            .find(topic, queue_id)
            .map(|c| c.min_offset())
            .unwrap_or(0)
    }

    fn store_time_at(&self, unit: &CqUnit) -> Option<i64> {
        let rec = self
            .shared()
            .log
            .read_record_sized(unit.commit_log_offset as u64, unit.size as usize)?;
        let sys_flag = i32::from_be_bytes(
            rec.get(record::SYSFLAG_POSITION..record::SYSFLAG_POSITION + 4)?
                .try_into()
                .ok()?,
        );
        let p = record::store_timestamp_position(sys_flag);
        Some(i64::from_be_bytes(rec.get(p..p + 8)?.try_into().ok()?))
    }

    /// The queue offset of the first (Lower) / last (Upper) message stored at or around
    /// `timestamp_ms`: Lower = first with store time >= timestamp (max if none);
    /// Upper = last with store time <= timestamp (min if none).
    pub fn offset_in_queue_by_time(
        &self,
        topic: &str,
        queue_id: i32,
        timestamp_ms: i64,
        boundary: Boundary,
    ) -> i64 {
        let Some(cq) = self.shared().cqs.find(topic, queue_id) else {
            return 0;
        };
        let (mut lo, mut hi) = (cq.min_offset(), cq.max_offset());
        let time = |i: i64| cq.get_unit(i).and_then(|u| self.store_time_at(&u));
        match boundary {
            Boundary::Lower => {
                let end = hi;
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    match time(mid) {
                        Some(t) if t >= timestamp_ms => hi = mid,
                        Some(_) => lo = mid + 1,
                        None => lo = mid + 1,
                    }
                }
                lo.min(end)
            }
            Boundary::Upper => {
                let start = lo;
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    match time(mid) {
                        Some(t) if t <= timestamp_ms => lo = mid + 1,
                        _ => hi = mid,
                    }
                }
                (lo - 1).max(start)
            }
        }
    }

    /// Store time of the oldest message still in the queue.
    pub fn earliest_message_time(&self, topic: &str, queue_id: i32) -> Option<i64> {
        let cq = self.shared().cqs.find(topic, queue_id)?;
        let mut i = cq.min_offset();
        while i < cq.max_offset() {
            let u = cq.get_unit(i)?;
            if u != CqUnit::FILLER {
                return self.store_time_at(&u);
            }
            i += 1;
        }
        None
    }

    /// Store time of the message at a queue offset.
    pub fn message_store_time(&self, topic: &str, queue_id: i32, queue_offset: i64) -> Option<i64> {
        let u = self
            .shared()
            .cqs
            .find(topic, queue_id)?
            .get_unit(queue_offset)?;
        self.store_time_at(&u)
    }

    /// The whole record at a physical offset (VIEW_MESSAGE_BY_ID).
    pub fn look_message_by_offset(&self, physical_offset: i64) -> Option<Bytes> {
        if physical_offset < 0 {
            return None;
        }
        self.shared().log.read_record(physical_offset as u64)
    }

    /// The record at a physical offset with a known size.
    pub fn look_message_by_offset_and_size(
        &self,
        physical_offset: i64,
        size: i32,
    ) -> Option<Bytes> {
        if physical_offset < 0 || size <= 0 {
            return None;
        }
        self.shared()
            .log
            .read_record_sized(physical_offset as u64, size as usize)
    }

    /// Records of `topic` whose KEYS or UNIQ_KEY equal `key`, stored within
    /// `[begin_ms, end_ms]`, newest index files first; at most `max_num` (capped by
    /// `maxMsgsNumBatch`). Hash collisions are filtered out by checking the records.
    pub fn query_message(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin_ms: i64,
        end_ms: i64,
    ) -> Vec<Bytes> {
        let s = self.shared();
        let Some(index) = &s.index else {
            return Vec::new();
        };
        let max_num = max_num.min(s.config.max_msgs_num_batch).max(1);
        let offsets = index.lock().unwrap_or_else(|p| p.into_inner()).query(
            topic,
            key,
            max_num * 2,
            begin_ms,
            end_ms,
        );
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for off in offsets {
            if out.len() >= max_num || !seen.insert(off) {
                continue;
            }
            let Some(rec) = s.log.read_record(off as u64) else {
                continue;
            };
            let ok = match record::decode_record(&rec, false) {
                Ok(Decoded::Message(r)) => {
                    r.topic_bytes == topic.as_bytes()
                        && (property(r.properties, "UNIQ_KEY") == Some(key)
                            || property(r.properties, "KEYS")
                                .is_some_and(|k| k.split(' ').any(|t| t == key)))
                }
                _ => false,
            };
            if ok {
                out.push(rec);
            }
        }
        out
    }

    pub fn commit_log_max_offset(&self) -> i64 {
        self.shared().log.max_offset() as i64
    }
    pub fn commit_log_min_offset(&self) -> i64 {
        self.shared().log.min_offset() as i64
    }
    /// Bytes stored but not yet dispatched to ConsumeQueue/index.
    pub fn dispatch_behind_bytes(&self) -> i64 {
        let s = self.shared();
        s.confirm_offset() as i64 - s.reput_offset.load(Ordering::Acquire) as i64
    }
    /// Bytes appended but not yet on disk.
    pub fn flush_behind_bytes(&self) -> i64 {
        let s = self.shared();
        s.log.max_offset() as i64 - s.log.flushed_offset() as i64
    }

    /// Registers a listener called by the reput stage for each dispatched message.
    pub fn add_arrival_listener(&self, l: Arc<dyn Fn(&ArrivalEvent<'_>) + Send + Sync>) {
        self.shared()
            .listeners
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(l);
    }

    /// Deletes a topic's ConsumeQueues and forgets its queue offsets (CommitLog records stay
    /// until retention removes their segments).
    pub fn delete_topic(&self, topic: &str) {
        let s = self.shared();
        let _ = self
            .inner
            .put_tx
            .send(AppendMsg::DeleteTopic(topic.to_string()));
        s.cqs.remove_topic(topic);
        s.topic_generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Names of topics that have ConsumeQueues.
    pub fn topics(&self) -> Vec<String> {
        let mut t: Vec<String> = self
            .shared()
            .cqs
            .all()
            .iter()
            .map(|c| c.topic().to_string())
            .collect();
        t.sort();
        t.dedup();
        t
    }

    /// False when disk full, ConsumeQueue writes have been failing for
    /// `logic_queue_error_after_ms`, or shut down.
    pub fn is_writeable(&self) -> bool {
        self.shared().is_writeable()
    }

    /// False while the index cannot be written (e.g. no space for a new index file):
    /// puts and pulls go on, records dispatched meanwhile cannot be queried by key. It is
    /// retried about once a second and turns true again by itself.
    pub fn is_index_available(&self) -> bool {
        self.shared().index_available.load(Ordering::Acquire)
    }

    /// Runs one retention pass now as if triggered by the admin command
    /// (`executeDeleteFilesManually`): expired files are deleted regardless of the hour.
    /// Returns the CommitLog segments deleted.
    pub fn delete_expired_files_now(&self) -> usize {
        let mut st = self
            .inner
            .retention
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        st.manual_delete_remaining = st.manual_delete_remaining.max(1);
        self.retention_pass(&mut st)
    }

    /// Runs one retention pass now, the same as the periodic one every
    /// `cleanResourceInterval` (disk-usage check, deleteWhen hour, pending manual passes).
    /// Returns the CommitLog segments deleted.
    pub fn clean_files_now(&self) -> usize {
        let mut st = self
            .inner
            .retention
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        self.retention_pass(&mut st)
    }

    fn retention_pass(&self, st: &mut RetentionState) -> usize {
        let s = &self.inner.shared;
        retention::run_once(s, st, &mut |ms| {
            std::thread::sleep(Duration::from_millis(ms));
            !s.stopping.load(Ordering::Acquire)
        })
    }

    /// Makes the next 20 retention passes delete expired files whatever the hour (upstream
    /// `executeDeleteFilesManually`, the DELETE_EXPIRED_COMMITLOG admin command).
    pub fn execute_delete_files_manually(&self) {
        self.inner
            .retention
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .manual_delete_remaining = retention::MANUAL_DELETE_PASSES;
        tracing::info!(
            "executeDeleteFilesManually: expired files are deleted over the next 20 passes"
        );
    }

    /// Counters and latency summaries.
    pub fn metrics(&self) -> StoreMetrics {
        let s = self.shared();
        let m = &s.metrics;
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
        StoreMetrics {
            put_requests: m.put_requests.load(Ordering::Relaxed),
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
            commit_log_max_offset: s.log.max_offset() as i64,
            commit_log_flushed_offset: s.log.flushed_offset() as i64,
            dispatch_behind_bytes: self.dispatch_behind_bytes(),
            consume_queue_count: s.cqs.len(),
            writeable: s.is_writeable(),
            put_refusals: s.refusals.totals(),
            append_perf: m.append_perf.snapshot(),
        }
    }

    /// Clean shutdown: drain puts, final flush, let dispatch catch up (up to 5 s), flush
    /// queues/index/checkpoint, and remove `abort` when everything is consistent.
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }
}

impl Inner {
    fn shutdown(&self) {
        if self.shut.swap(true, Ordering::AcqRel) {
            return;
        }
        let s = &self.shared;
        s.stopping.store(true, Ordering::Release);
        if let Some((stop, h)) = self
            .cleaner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let _ = stop.send(());
            drop(stop);
            let _ = h.join();
        }
        let (tx, rx) = mpsc::sync_channel(1);
        if self.put_tx.send(AppendMsg::Shutdown(tx)).is_ok() {
            let wait = Duration::from_millis(s.config.sync_flush_timeout_ms + 10_000);
            if rx.recv_timeout(wait).is_err() {
                tracing::error!("append/flush stages did not stop in time");
            }
        }
        let deadline = Instant::now() + Duration::from_millis(SHUTDOWN_REPUT_WAIT_MS);
        while s.reput_offset.load(Ordering::Acquire) < s.confirm_offset()
            && Instant::now() < deadline
        {
            s.wake_reput();
            std::thread::sleep(Duration::from_millis(1));
        }
        s.reput_may_exit.store(true, Ordering::Release);
        s.wake_reput();
        if let Some(h) = self
            .reput_handle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let _ = h.join();
        }
        if let Some((stop, h)) = self
            .housekeeping
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let _ = stop.send(());
            let _ = h.join();
        }
        s.flush_logics_and_checkpoint(&self.checkpoint);
        s.refusals.flush();
        let behind = s.confirm_offset() as i64 - s.reput_offset.load(Ordering::Acquire) as i64;
        let flushed_all = s.log.flushed_offset() >= s.log.max_offset();
        // Upstream also keeps `abort` while the disk is full (its check is "writeable"), but
        // DISK_FULL only refuses new puts: what is stored is flushed and dispatched all the
        // same, so the store is consistent and the next start need not recover abnormally
        // (replaying and re-indexing from the checkpoint). Only the flags that mean a
        // ConsumeQueue or index write was lost keep it.
        let damage = s.running_flags.load(Ordering::Acquire) & !FLAG_DISK_FULL;
        if damage == 0 && behind == 0 && flushed_all {
            if let Err(e) = std::fs::remove_file(s.config.abort_path()) {
                tracing::error!(error = %e, "could not remove the abort file; next start recovers abnormally");
            }
        } else {
            tracing::warn!(
                behind,
                flushed_all,
                running_flags = damage,
                "unclean shutdown: abort file kept, next start recovers abnormally"
            );
        }
        for h in self
            .threads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            // Append and flush stages have stopped; the allocator and flush worker stop
            // once their senders (owned by those stages) are gone.
            let _ = h.join();
        }
        drop(
            self.lock_file
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, StoreError> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .map_err(|e| StoreError::io("spawn thread", name, e))
}

/// Builds [`GetMessageResult::file_spans`] as records are taken: a record joins the last
/// span when it starts where that span ends, in the same segment, and directly follows
/// the span's last record in `messages`.
#[derive(Default)]
struct FileSpans {
    spans: Vec<FileSpan>,
    /// The segment of the last record looked up (consecutive records share it).
    segment: Option<Arc<crate::mapped_file::MappedFile>>,
}

impl FileSpans {
    /// Records `messages[index]`, `len` bytes at CommitLog offset `offset`, if it may be
    /// sent from its file: in direct mode not while the write ring holds any of it (those
    /// bytes may not be in the file yet, and a partial last page is rewritten).
    fn add(&mut self, log: &CommitLog, index: usize, offset: u64, len: usize) {
        let end = offset + len as u64;
        if log.ring().is_some_and(|ring| ring.holds_any_before(end)) {
            return;
        }
        let cached = self
            .segment
            .as_ref()
            .is_some_and(|seg| seg.contains(offset) && !seg.is_removed());
        if !cached {
            self.segment = log.segment_for(offset);
        }
        let Some(seg) = self.segment.as_ref() else {
            return;
        };
        let pos = offset - seg.from_offset();
        if pos + len as u64 > seg.size() {
            return; // the read refuses such a record; never describe it as a file range
        }
        if let Some(last) = self.spans.last_mut() {
            let joins = Arc::ptr_eq(&last.segment, seg)
                && last.file_offset + last.len as u64 == pos
                && last.first_message + last.message_count == index;
            if joins {
                last.message_count += 1;
                last.len += len;
                return;
            }
        }
        self.spans.push(FileSpan {
            first_message: index,
            message_count: 1,
            segment: Arc::clone(seg),
            file_offset: pos,
            len,
        });
    }
}

fn batch_full(
    cfg: &StoreConfig,
    size: usize,
    max_msg_nums: usize,
    max_pull: usize,
    total: usize,
    count: usize,
    in_mem: bool,
) -> bool {
    if total == 0 || count == 0 {
        return false;
    }
    if count + 1 > max_msg_nums || total + size > max_pull {
        return true;
    }
    if in_mem {
        total + size > cfg.max_transfer_bytes_on_message_in_memory
            || count
                > cfg
                    .max_transfer_count_on_message_in_memory
                    .saturating_sub(1)
    } else {
        total + size > cfg.max_transfer_bytes_on_message_in_disk
            || count > cfg.max_transfer_count_on_message_in_disk.saturating_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small_config(dir: &std::path::Path) -> StoreConfig {
        StoreConfig {
            store_path_root_dir: dir.to_path_buf(),
            mapped_file_size_commit_log: 64 * 1024,
            mapped_file_size_consume_queue_units: 32,
            max_hash_slot_num: 64,
            max_index_num: 256,
            ..StoreConfig::default()
        }
    }

    fn put_one(store: &MessageStore, key: &str) -> PutResult {
        let props = format!("KEYS\u{1}{key}\u{2}");
        let out = crate::util::loopback_record("DF", 0, b"body", props.as_bytes());
        store.put_blocking(PutRequest::new("DF", 0, 0, out, 1))
    }

    /// A full disk refuses puts but does not make the store inconsistent: shutdown removes
    /// `abort` and the next start is normal. A lost ConsumeQueue write does keep `abort`.
    /// Refusals are counted per reason.
    #[test]
    fn disk_full_shuts_down_cleanly_and_lost_queue_writes_do_not() {
        let dir = crate::test_util::temp_dir("diskfull");
        let store = MessageStore::open(small_config(&dir)).unwrap();
        assert!(store.last_exit_ok(), "fresh store");
        assert_eq!(put_one(&store, "a").status, PutMessageStatus::PutOk);
        store.inner.shared.set_flag(FLAG_DISK_FULL);
        for _ in 0..1000 {
            assert_eq!(
                put_one(&store, "refused").status,
                PutMessageStatus::ServiceNotAvailable
            );
        }
        assert_eq!(
            store.metrics().put_refusals,
            vec![(REFUSED_DISK_FULL, 1000)]
        );
        store.shutdown();
        assert!(
            !dir.join("abort").exists(),
            "disk full alone is a clean stop"
        );

        let store = MessageStore::open(small_config(&dir)).unwrap();
        assert!(store.last_exit_ok());
        assert_eq!(store.max_offset_in_queue("DF", 0), 1);
        assert!(
            store.is_writeable(),
            "DISK_FULL is re-evaluated, not persisted"
        );
        store.inner.shared.set_flag(FLAG_LOGIC_QUEUE_ERROR);
        store.shutdown();
        assert!(
            dir.join("abort").exists(),
            "a lost queue write is not clean"
        );
        let store = MessageStore::open(small_config(&dir)).unwrap();
        assert!(!store.last_exit_ok());
        assert_eq!(store.max_offset_in_queue("DF", 0), 1);
        store.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Puts `count` records of 1-3 bodies' worth of bytes to topic FS queue 0.
    fn put_records(store: &MessageStore, count: usize) -> Vec<PutResult> {
        (0..count)
            .map(|i| {
                let props = format!("KEYS\u{1}k{i}\u{2}");
                let body = vec![b'a' + (i % 26) as u8; 40 + (i % 3) * 50];
                let out = crate::util::loopback_record("FS", 0, &body, props.as_bytes());
                // A small direct-mode ring may be full between flushes: retry the refusal
                // as clients do, for a bounded time.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                loop {
                    let r = store.put_blocking(PutRequest::new("FS", 0, 0, out.clone(), 1));
                    if r.status != PutMessageStatus::OsPageCacheBusy
                        || std::time::Instant::now() > deadline
                    {
                        assert_eq!(r.status, PutMessageStatus::PutOk, "put {i}");
                        break r;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
            })
            .collect()
    }

    /// Waits (bounded) until the reput stage has dispatched `count` records of FS/0.
    fn wait_dispatched(store: &MessageStore, count: i64) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while store.max_offset_in_queue("FS", 0) < count {
            assert!(Instant::now() < deadline, "reput did not catch up");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The spans' file bytes, in order, with the records outside every span from memory:
    /// what a zero-copy pull puts on the wire.
    fn wire_bytes(r: &GetMessageResult) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let mut out = Vec::new();
        let mut i = 0;
        let mut spans = r.file_spans.iter().peekable();
        while i < r.messages.len() {
            match spans.peek() {
                Some(span) if span.first_message == i => {
                    let mut buf = vec![0u8; span.len];
                    span.segment
                        .file()
                        .read_exact_at(&mut buf, span.file_offset)
                        .expect("span inside its file");
                    out.extend_from_slice(&buf);
                    i += span.message_count;
                    spans.next();
                }
                _ => {
                    out.extend_from_slice(&r.messages[i]);
                    i += 1;
                }
            }
        }
        assert!(spans.next().is_none(), "every span starts at a record");
        out
    }

    struct EvenKeysOnly;
    impl MessageFilter for EvenKeysOnly {
        fn match_by_tags_code(&self, _: Option<i64>) -> bool {
            true
        }
        fn match_by_record(&self, rec: &[u8]) -> bool {
            match record::decode_record(rec, false) {
                Ok(Decoded::Message(r)) => property(r.properties, "KEYS")
                    .and_then(|key| key.strip_prefix('k'))
                    .and_then(|n| n.parse::<u32>().ok())
                    .is_some_and(|n| n % 2 == 0),
                _ => false,
            }
        }
    }

    #[test]
    fn mmap_reads_describe_contiguous_records_as_file_spans() {
        let dir = crate::test_util::temp_dir("spans");
        let store = MessageStore::open(small_config(&dir)).unwrap();
        // 64 KiB segments and ~150-byte records: the log rolls over to a second segment.
        let puts = put_records(&store, 600);
        wait_dispatched(&store, 600);
        let concat = |r: &GetMessageResult| -> Vec<u8> {
            r.messages.iter().flat_map(|m| m.iter().copied()).collect()
        };

        let r = store.get_message("FS", 0, 0, 32, usize::MAX, &AcceptAll);
        assert_eq!(r.messages.len(), 32);
        assert_eq!(
            r.file_spans.len(),
            1,
            "contiguous records coalesce into one span"
        );
        let span = &r.file_spans[0];
        assert_eq!((span.first_message, span.message_count), (0, 32));
        assert_eq!(span.file_offset, 0);
        assert_eq!(span.len, r.buffer_total_size());
        assert_eq!(wire_bytes(&r), concat(&r));

        // A filter that drops every other record: one span per kept record.
        let r = store.get_message("FS", 0, 0, 32, usize::MAX, &EvenKeysOnly);
        assert!(r.messages.len() > 1);
        assert_eq!(r.file_spans.len(), r.messages.len());
        assert_eq!(wire_bytes(&r), concat(&r));

        // Across the segment boundary: one span per segment.
        let file_size = 64 * 1024;
        let first_in_second = puts
            .iter()
            .position(|p| p.wrote_offset >= file_size)
            .expect("the log rolled over") as i64;
        let r = store.get_message("FS", 0, first_in_second - 3, 6, usize::MAX, &AcceptAll);
        assert_eq!(r.messages.len(), 6);
        assert_eq!(r.file_spans.len(), 2, "{:?}", r.file_spans);
        assert_eq!(r.file_spans[0].message_count, 3);
        assert_eq!(r.file_spans[1].first_message, 3);
        assert_eq!(r.file_spans[1].file_offset, 0);
        assert!(!Arc::ptr_eq(
            &r.file_spans[0].segment,
            &r.file_spans[1].segment
        ));
        assert_eq!(wire_bytes(&r), concat(&r));

        // A span keeps its segment file open after retention deleted it.
        let span = r.file_spans[0].clone();
        drop(r);
        span.segment.destroy().unwrap();
        let mut buf = vec![0u8; span.len];
        use std::os::unix::fs::FileExt;
        span.segment
            .file()
            .read_exact_at(&mut buf, span.file_offset)
            .unwrap();
        store.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn direct_mode_keeps_write_ring_bytes_out_of_file_spans() {
        let dir = crate::test_util::temp_dir("spans-direct");
        let config = StoreConfig {
            write_mode: WriteMode::Direct,
            direct_write_ring_size_bytes: 64 * 1024,
            mapped_file_size_commit_log: 1024 * 1024,
            ..small_config(&dir)
        };
        let store = MessageStore::open(config).unwrap();
        // ~90 KiB through a 64 KiB ring: the oldest records have left it.
        put_records(&store, 600);
        wait_dispatched(&store, 600);
        let concat = |r: &GetMessageResult| -> Vec<u8> {
            r.messages.iter().flat_map(|m| m.iter().copied()).collect()
        };
        let old = store.get_message("FS", 0, 0, 32, usize::MAX, &AcceptAll);
        assert_eq!(
            old.file_spans.len(),
            1,
            "records the ring let go of are file spans"
        );
        assert_eq!(old.file_spans[0].message_count, 32);
        assert_eq!(wire_bytes(&old), concat(&old));
        let recent = store.get_message("FS", 0, 568, 32, usize::MAX, &AcceptAll);
        assert_eq!(recent.messages.len(), 32);
        assert!(
            recent.file_spans.is_empty(),
            "records the ring still holds are sent from memory: {:?}",
            recent.file_spans
        );
        store.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
