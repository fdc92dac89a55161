//! Opening and closing a `MessageStore`: lock the directory, load CommitLog, ConsumeQueues,
//! index and checkpoint, run recovery, mark the store running (`abort`), start the stage
//! threads (allocator, append, flush coordinator + worker, reput, housekeeping, retention,
//! and the HA server of a master or the HA client of a slave),
//! and at shutdown stop them in the reverse order. Shutdown lives here because it has to
//! know every thread `open` started.

use crate::append::AppendStage;
use crate::append_runner::{self, AppendHandle, WeakAppendHandle};
use crate::checkpoint::{Checkpoint, CheckpointData};
use crate::commit_log::{create_segment, AllocatorHandle, CommitLog, SegmentSpec};
use crate::config::{BrokerRole, StoreConfig, WriteMode};
use crate::consume_queue::ConsumeQueueTable;
use crate::direct::{DirectFlusher, DirectRing};
use crate::error::StoreError;
use crate::flush;
use crate::index::IndexService;
use crate::mapped_file::OS_PAGE_SIZE;
use crate::reput::{self, Dispatcher, ReputHandle};
use crate::retention::{self, RetentionState};
use crate::shared::{Loaded, Shared, FLAG_DISK_FULL, FLAG_STAGE_FAILED};
use crate::stage_msg::{AppendMsg, FlushMsg, FlushPort, WaiterInbox};
use crate::store::{Inner, MessageStore, StopHandle};
use crate::types::PutMessageStatus;
use ringmq_ring::Notifier;
use ringmq_sync::LockExt;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bound of the append → flush queue (batches of waiters; each batch is one append batch).
const FLUSH_QUEUE_BOUND: usize = 4096;
/// Longest shutdown waits for dispatch to catch up (upstream 5 s).
const SHUTDOWN_REPUT_WAIT_MS: u64 = 5000;
/// How long `open` retries a held `lock` file before reporting `Locked`.
const LOCK_RETRY_MS: u64 = 1000;
/// Shortest `cleanResourceInterval` honoured (a smaller value would spin the clean thread).
const MIN_CLEAN_INTERVAL_MS: u64 = 100;

impl MessageStore {
    /// Opens the store under `config.store_path_root_dir`: locks it, loads and recovers
    /// CommitLog, ConsumeQueues, index and checkpoint, creates the `abort` file and starts
    /// the stage threads.
    pub fn open(config: StoreConfig) -> Result<Self, StoreError> {
        check_commit_log_file_size(config.mapped_file_size_commit_log)?;
        let root = config.store_path_root_dir.clone();
        std::fs::create_dir_all(&root).map_err(|e| StoreError::io("create_dir", &root, e))?;
        let lock_file = lock_store(&config)?;
        let last_exit_ok = !config.abort_path().exists();
        let (loaded, checkpoint) = load(config)?;
        let cp = loaded.checkpoint;
        let doorbell = Notifier::new().map_err(|e| StoreError::io("eventfd", &root, e))?;
        let ha_doorbell = Notifier::new().map_err(|e| StoreError::io("eventfd", &root, e))?;
        let shared = Arc::new(Shared::new(
            loaded,
            Arc::new(doorbell),
            Arc::new(ha_doorbell),
        ));
        let (dispatcher, process_offset) = recover(&shared, last_exit_ok, &cp)?;
        open_replica_state(&shared, process_offset)?;
        let spec = segment_spec(&shared.config);
        create_first_put_segment(&shared.log, &shared.config, process_offset, spec)?;
        let table = crate::append::queue_offset_table(&shared.cqs);
        let checkpoint = Arc::new(Mutex::new(checkpoint));
        mark_running(&shared, &checkpoint)?;
        let ring = start_write_ring(&shared, process_offset)?;
        let reput = reput::new_stage(Arc::clone(&shared), dispatcher, process_offset);
        let AppendStarted {
            put_tx,
            threads,
            inline,
        } = start_append_and_flush(&shared, spec, table, ring, &reput)?;
        let ha_threads = start_ha(&shared, &put_tx);
        let reput_handle = start_reput(&shared, reput)?;
        let housekeeping = start_housekeeping(&shared, &checkpoint)?;
        let retention = Arc::new(Mutex::new(RetentionState::default()));
        let cleaner = start_cleaner(&shared, &retention)?;
        Ok(MessageStore {
            inner: Arc::new(Inner {
                shared,
                put_tx,
                inline_append: inline,
                threads: Mutex::new(threads),
                ha_threads: Mutex::new(ha_threads),
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

    /// Clean shutdown: drain puts, final flush, let dispatch catch up (up to 5 s), flush
    /// queues/index/checkpoint, and remove `abort` when everything is consistent.
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }
}

fn check_commit_log_file_size(file_size: u64) -> Result<(), StoreError> {
    if file_size < 4 * OS_PAGE_SIZE
        || !file_size.is_multiple_of(OS_PAGE_SIZE)
        || file_size > i32::MAX as u64 + 1
    {
        return Err(StoreError::Config(format!(
            "mappedFileSizeCommitLog {file_size} must be a multiple of 4096 between 16 KiB and 2 GiB"
        )));
    }
    Ok(())
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

/// Loads CommitLog segments, ConsumeQueues, the checkpoint and (if enabled) the index.
fn load(config: StoreConfig) -> Result<(Loaded, Checkpoint), StoreError> {
    let log = CommitLog::load(&config.commit_log_dir(), config.mapped_file_size_commit_log)?;
    let cqs = ConsumeQueueTable::load(
        &config.consume_queue_dir(),
        config.consume_queue_file_size_bytes(),
    )?;
    let (checkpoint, data) = Checkpoint::open(&config.checkpoint_path())?;
    let index = if config.message_index_enable {
        Some(Mutex::new(IndexService::load(
            &config.index_dir(),
            config.max_hash_slot_num.max(1),
            config.max_index_num.max(2),
        )?))
    } else {
        None
    };
    let loaded = Loaded {
        config,
        log: Arc::new(log),
        cqs,
        index,
        checkpoint: data,
    };
    Ok((loaded, checkpoint))
}

/// Runs recovery with the dispatcher the reput stage then continues with; returns it and
/// the end of the last valid record.
fn recover(
    shared: &Arc<Shared>,
    last_exit_ok: bool,
    cp: &CheckpointData,
) -> Result<(Dispatcher, u64), StoreError> {
    let mut dispatcher = Dispatcher::new(Arc::clone(shared));
    let recovered = crate::recovery::recover(shared, &mut dispatcher, last_exit_ok, cp)?;
    tracing::info!(
        root = %shared.config.store_path_root_dir.display(), last_exit_ok,
        max_offset = recovered.process_offset, redispatched = recovered.redispatched,
        preallocated_kept = recovered.preallocated_kept, "store recovered"
    );
    Ok((dispatcher, recovered.process_offset))
}

/// Controller mode: loads the epoch file against the recovered log and forgets a
/// truncation recovery has made.
fn open_replica_state(shared: &Shared, max_offset: u64) -> Result<(), StoreError> {
    if !shared.config.controller_mode {
        return Ok(());
    }
    let root = &shared.config.store_path_root_dir;
    let min_offset = shared.log.min_offset();
    shared
        .ha
        .replicas
        .open(root, min_offset, max_offset)
        .map_err(|e| StoreError::io("load epochFileCheckpoint", root, e))?;
    let marker = crate::ha::replicas::truncate_file(root);
    match std::fs::remove_file(&marker) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(StoreError::io("remove the truncation file", &marker, e))
        }
        _ => Ok(()),
    }
}

fn segment_spec(config: &StoreConfig) -> SegmentSpec {
    SegmentSpec {
        file_size: config.mapped_file_size_commit_log,
        warm: config.warm_mapped_file_enable,
        direct: config.write_mode == WriteMode::Direct,
    }
}

/// The segment the first put goes to exists before `open` returns (and so before the
/// broker reports ready): creating it on the append path would hold the CommitLog tail for
/// as long as creation takes (seconds with warmMapedFileEnable).
fn create_first_put_segment(
    log: &CommitLog,
    config: &StoreConfig,
    process_offset: u64,
    spec: SegmentSpec,
) -> Result<(), StoreError> {
    if log.segment_for(process_offset).is_some() {
        return Ok(());
    }
    let start = process_offset - process_offset % spec.file_size;
    let t = Instant::now();
    let seg = create_segment(&config.commit_log_dir(), start, spec)?;
    log.push_file(seg);
    tracing::info!(
        offset = start,
        warm = spec.warm,
        took_ms = t.elapsed().as_millis() as u64,
        "created the CommitLog segment for the first put"
    );
    Ok(())
}

/// Creates `abort` (present while running; content = pid) and persists the recovered
/// queues, index and checkpoint.
fn mark_running(shared: &Shared, checkpoint: &Mutex<Checkpoint>) -> Result<(), StoreError> {
    let abort = shared.config.abort_path();
    std::fs::write(&abort, std::process::id().to_string())
        .map_err(|e| StoreError::io("write", &abort, e))?;
    if let Ok(d) = File::open(&shared.config.store_path_root_dir) {
        let _ = d.sync_all();
    }
    shared.flush_logics_and_checkpoint(checkpoint, 0);
    Ok(())
}

/// Direct mode: the write ring, starting at the page that holds `process_offset`.
fn start_write_ring(
    shared: &Shared,
    process_offset: u64,
) -> Result<Option<Arc<DirectRing>>, StoreError> {
    if shared.config.write_mode != WriteMode::Direct {
        return Ok(None);
    }
    let log = &shared.log;
    let ring = Arc::new(DirectRing::new(shared.config.direct_write_ring_size_bytes)?);
    // Only the segment being written has pages O_DIRECT will rewrite; complete
    // segments keep default read-ahead for cold reads.
    if let Some(seg) = log.segment_for(process_offset) {
        seg.advise_random();
    }
    // The partial last page must be in the ring: flushes rewrite whole pages.
    let page = process_offset / OS_PAGE_SIZE * OS_PAGE_SIZE;
    ring.start_at(page);
    if let Some(seg) = log.segment_for(process_offset) {
        ring.load_from_segment(&seg, page, process_offset);
    }
    log.set_ring(Arc::clone(&ring));
    Ok(Some(ring))
}

/// Starts the allocator, the flush worker and coordinator, and the append stage.
fn start_append_and_flush(
    shared: &Arc<Shared>,
    spec: SegmentSpec,
    table: crate::append::QueueOffsetTable,
    ring: Option<Arc<DirectRing>>,
    reput: &ReputHandle,
) -> Result<AppendStarted, StoreError> {
    let config = &shared.config;
    let mut threads = Vec::new();
    let (allocator, h) = AllocatorHandle::start(config.commit_log_dir(), spec);
    threads.push(h);
    let (flush_tx, flush_rx) = mpsc::sync_channel::<FlushMsg>(FLUSH_QUEUE_BOUND);
    let (job_tx, job_rx) = mpsc::sync_channel(flush::FLUSH_JOB_QUEUE_BOUND);
    let direct_flusher = match &ring {
        Some(r) => Some(DirectFlusher::new(
            Arc::clone(r),
            config.commit_log_dir(),
            spec.file_size,
        )?),
        None => None,
    };
    let (s, tx) = (Arc::clone(shared), flush_tx.clone());
    threads.push(spawn("ringmq-flush-io", move || {
        flush::run_worker(s, job_rx, tx, direct_flusher)
    })?);
    let inbox = Arc::new(WaiterInbox::new());
    let (s, i) = (Arc::clone(shared), Arc::clone(&inbox));
    threads.push(spawn("ringmq-flush", move || {
        let shared = Arc::clone(&s);
        guard_stage("flush", &shared, move || {
            flush::run_coordinator(s, flush_rx, i, job_tx)
        })
    })?);
    let (put_tx, put_rx) = mpsc::sync_channel::<AppendMsg>(config.put_queue_capacity.max(1));
    // Stages that share a core (the 2-core default leaves both unpinned) hand dispatch over
    // by running it, not by a context switch; on separate cores they pipeline.
    let same_core = config.append_core == config.reput_core;
    let reput = same_core.then(|| Arc::clone(reput));
    let stage = AppendStage::new(
        Arc::clone(shared),
        put_rx,
        FlushPort {
            tx: flush_tx,
            inbox,
        },
        allocator,
        table,
        ring,
        reput,
    );
    // An unpinned stage may run a batch on the network core that queued it while the
    // stage is live (`AppendStage::runs_inline`; in direct mode also only while the
    // write ring has room for the batch).
    let inline_allowed = config.append_core.is_none() && stage.runs_inline();
    let handle: AppendHandle = Arc::new(Mutex::new(stage));
    let inline = inline_allowed.then(|| Arc::downgrade(&handle));
    let s = Arc::clone(shared);
    threads.push(spawn("ringmq-append", move || {
        guard_stage("append", &s, move || append_runner::run(handle))
    })?);
    Ok(AppendStarted {
        put_tx,
        threads,
        inline,
    })
}

/// What [`start_append_and_flush`] started.
struct AppendStarted {
    /// The shared queue into the append stage (puts made off the network cores).
    put_tx: SyncSender<AppendMsg>,
    threads: Vec<JoinHandle<()>>,
    /// The stage, when network cores may run its batches (`append_runner`).
    inline: Option<WeakAppendHandle>,
}

/// Starts replication: the HA server of a master, the HA client of a slave, both in
/// controller mode (each idles while the store holds the other role).
fn start_ha(shared: &Arc<Shared>, put_tx: &SyncSender<AppendMsg>) -> Vec<JoinHandle<()>> {
    let server = || crate::ha::master::start(shared);
    let client = || crate::ha::slave::start(shared, put_tx.clone());
    match (shared.config.controller_mode, shared.config.broker_role) {
        (true, _) => server().into_iter().chain(client()).collect(),
        (false, BrokerRole::Slave) => client().into_iter().collect(),
        (false, _) => server().into_iter().collect(),
    }
}

/// Starts the reput thread and lets the other stages wake it.
fn start_reput(shared: &Arc<Shared>, reput: ReputHandle) -> Result<JoinHandle<()>, StoreError> {
    let handle = spawn("ringmq-reput", move || reput::run(reput))?;
    shared.set_reput_thread(handle.thread().clone());
    Ok(handle)
}

/// Flushes ConsumeQueues, index and checkpoint, and summarises refused puts, every tick.
fn start_housekeeping(
    shared: &Arc<Shared>,
    checkpoint: &Arc<Mutex<Checkpoint>>,
) -> Result<StopHandle, StoreError> {
    let (stop_tx, stop_rx) = mpsc::sync_channel::<()>(1);
    let s = Arc::clone(shared);
    let cp = Arc::clone(checkpoint);
    let h = spawn("ringmq-housekeeping", move || {
        // The open made a thorough pass (`mark_running`); the next is due an interval on.
        let mut last_thorough = Instant::now();
        // `flushIntervalConsumeQueue` and the flush thresholds are read each tick so an
        // update applies at once.
        while let Err(mpsc::RecvTimeoutError::Timeout) = stop_rx.recv_timeout(
            Duration::from_millis(s.live.flush_interval_consume_queue_ms()),
        ) {
            let thorough_every =
                Duration::from_millis(s.live.flush_consume_queue_thorough_interval_ms());
            let least_pages = if last_thorough.elapsed() < thorough_every {
                s.live.flush_consume_queue_least_pages()
            } else {
                last_thorough = Instant::now();
                0
            };
            s.flush_logics_and_checkpoint(&cp, least_pages);
            s.refusals.flush();
        }
    })?;
    Ok((stop_tx, h))
}

/// Retention on its own thread: its pauses between deletions (upstream's
/// deleteCommitLogFilesInterval / deleteConsumeQueueFilesInterval) must not delay the
/// checkpoint.
fn start_cleaner(
    shared: &Arc<Shared>,
    retention: &Arc<Mutex<RetentionState>>,
) -> Result<StopHandle, StoreError> {
    let (stop_tx, stop_rx) = mpsc::sync_channel::<()>(1);
    let s = Arc::clone(shared);
    let ret = Arc::clone(retention);
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
            let mut st = ret.lock_unpoisoned();
            retention::run_once(&s, &mut st, &mut pause);
        }
    })?;
    Ok((stop_tx, h))
}

/// Runs a pipeline stage; if it ends by a panic (outside the per-put code, which fences
/// its own), says so, makes the store refuse puts from now on, and answers the puts still
/// queued in the cores' rings. Puts the dead stage held are answered as its state unwinds
/// (a dropped callback's responder answers SYSTEM_ERROR).
fn guard_stage(name: &str, shared: &Shared, run: impl FnOnce()) {
    let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) else {
        return;
    };
    let cause = crate::util::panic_text(panic.as_ref());
    tracing::error!(
        stage = name,
        "the {name} stage stopped on a panic ({cause}); the store refuses puts \
         (SERVICE_NOT_AVAILABLE) until the broker restarts"
    );
    shared.set_flag(FLAG_STAGE_FAILED);
    if let Some(ports) = shared.core_ports.get() {
        ports.fail_all(PutMessageStatus::ServiceNotAvailable);
    }
    shared.ring_cores();
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, StoreError> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .map_err(|e| StoreError::io("spawn thread", name, e))
}

impl Inner {
    fn shutdown(&self) {
        if self.shut.swap(true, Ordering::AcqRel) {
            return;
        }
        let s = &self.shared;
        s.stopping.store(true, Ordering::Release);
        stop_thread(&self.cleaner);
        self.stop_ha();
        self.stop_append_and_flush();
        self.stop_reput();
        stop_thread(&self.housekeeping);
        s.flush_logics_and_checkpoint(&self.checkpoint, 0);
        s.refusals.flush();
        remove_abort_if_consistent(s);
        for h in self.threads.lock_unpoisoned().drain(..) {
            // Append and flush stages have stopped; the allocator and flush worker stop
            // once their senders (owned by those stages) are gone.
            let _ = h.join();
        }
        drop(self.lock_file.lock_unpoisoned().take());
    }

    /// Stops the HA stage or client before the append stage, whose queue the client feeds.
    fn stop_ha(&self) {
        self.shared.ha.stop.store(true, Ordering::Release);
        self.shared.ha.doorbell.notify();
        for h in std::mem::take(&mut *self.ha_threads.lock_unpoisoned()) {
            let _ = h.join();
        }
    }

    /// Lets the append stage finish queued puts and the flush stage its final flush.
    fn stop_append_and_flush(&self) {
        let (tx, rx) = mpsc::sync_channel(1);
        if self.put_tx.send(AppendMsg::Shutdown(tx)).is_ok() {
            self.shared.append_doorbell.notify();
            let wait = Duration::from_millis(self.shared.config.sync_flush_timeout_ms + 10_000);
            if rx.recv_timeout(wait).is_err() {
                tracing::error!("append/flush stages did not stop in time");
            }
        }
    }

    /// Lets dispatch catch up (bounded), then stops the reput stage.
    fn stop_reput(&self) {
        let s = &self.shared;
        let deadline = Instant::now() + Duration::from_millis(SHUTDOWN_REPUT_WAIT_MS);
        while s.reput_offset.load(Ordering::Acquire) < s.confirm_offset()
            && Instant::now() < deadline
        {
            s.wake_reput();
            std::thread::sleep(Duration::from_millis(1));
        }
        s.reput_may_exit.store(true, Ordering::Release);
        s.wake_reput();
        if let Some(h) = self.reput_handle.lock_unpoisoned().take() {
            let _ = h.join();
        }
    }
}

/// Signals a periodic thread to stop and waits for it.
fn stop_thread(handle: &Mutex<Option<StopHandle>>) {
    if let Some((stop, h)) = handle.lock_unpoisoned().take() {
        let _ = stop.send(());
        drop(stop);
        let _ = h.join();
    }
}

/// Removes `abort` when everything stored is flushed and dispatched, so the next start
/// recovers normally.
fn remove_abort_if_consistent(s: &Shared) {
    let behind = s.dispatch_behind_bytes();
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
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown();
    }
}
