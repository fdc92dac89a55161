//! The flush stage: a coordinator thread that owns the GroupCommit waiters and decides
//! when to flush, and a worker thread that does the disk work: in mmap mode one msync at
//! a time; in direct mode a stream of pipelined io_uring O_DIRECT writes with
//! FSYNC DATASYNC batches on request (`direct.rs`).
//!
//! SYNC_FLUSH: waiters arrive from the append stage in batches, ordered by target offset.
//! mmap: whenever the worker is idle and bytes are unflushed, the coordinator starts a
//! flush up to the current max offset; while it runs, new waiters pile up and form the
//! next group, which the worker flushes as soon as the running flush ends (it reports
//! each flush and goes on while bytes are unflushed), so there is no sleep between groups
//! and the group size adapts to the disk's fsync latency. The append stage starts the
//! writeback of each batch's whole pages at once, so a flush mostly waits for writes
//! already under way. Direct: the worker writes appended bytes as they come (the append
//! stage wakes it after each batch); the coordinator hands it a durable request for the
//! current max offset as soon as new waiters arrive, and the worker keeps writing while an
//! fdatasync runs and covers every request that arrived meanwhile with the next one. Either
//! way the next flush is started before the completed group's callbacks run (one wake-up
//! per put), so the disk never waits for them. Every waiter at or below the flushed offset
//! completes with PUT_OK; a waiter past its `syncFlushTimeout` deadline completes with
//! FLUSH_DISK_TIMEOUT even if the disk hangs (the coordinator never blocks on the disk).
//!
//! ASYNC_FLUSH: every `flushIntervalCommitLog` ms flush if at least
//! `flushCommitLogLeastPages` pages are dirty (or a segment filled), and everything every
//! `flushCommitLogThoroughInterval` ms. Such a flush is *durable* (ends with an
//! fdatasync / msync); one that comes due while another flush runs is kept due and runs
//! next. In direct mode the worker also writes between durable flushes, continuously, so
//! the write ring drains at the device's rate and the fdatasync cost is paid once per
//! interval (and once per completed segment) rather than per write.

use crate::config::FlushDiskType;
use crate::direct::{DirectFlusher, DirectRing};
use crate::mapped_file::flush_due;
use crate::shared::Shared;
use crate::stage_msg::{FlushMsg, Waiter, WaiterInbox};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A flush job for the worker: make the log durable up to `target`; `store_timestamp_ms`
/// is a store time no later than that of the last record below `target` (for the
/// checkpoint).
pub(crate) struct FlushJob {
    target: u64,
    store_timestamp_ms: i64,
}

/// Poll interval of the SYNC_FLUSH coordinator when idle (upstream's 10 ms wait).
const SYNC_IDLE_POLL_MS: u64 = 10;
/// Bound of the coordinator → worker job queue. Direct mode hands the streaming worker
/// durable requests without waiting for the previous one; the worker drains the queue
/// each round.
pub(crate) const FLUSH_JOB_QUEUE_BOUND: usize = 64;
/// Durable requests the direct worker keeps apart (more are merged into the newest).
const MAX_DURABLE_REQUESTS: usize = 64;
/// How soon the coordinator retries handing over a durable request the full job queue
/// refused.
const JOB_RETRY_MS: u64 = 1;
/// Longest the idle direct worker parks before it looks for work on its own (the append
/// stage and the coordinator unpark it when there is some).
const DIRECT_WORKER_IDLE_PARK_MS: u64 = 100;

/// ASYNC_FLUSH: the longest the coordinator sleeps between looks at the live settings.
const LIVE_SETTINGS_POLL_MS: u64 = 500;

pub(crate) fn run_coordinator(
    shared: Arc<Shared>,
    rx: Receiver<FlushMsg>,
    inbox: Arc<WaiterInbox>,
    job_tx: SyncSender<FlushJob>,
) {
    crate::util::pin_current_thread(shared.config.flush_core, "flush");
    let mut c = Coordinator::new(shared, inbox, job_tx);
    loop {
        let mut msg = match c.take_waiters(true) {
            0 => rx.recv_timeout(c.timeout()),
            _ => rx.try_recv().map_err(|e| match e {
                TryRecvError::Empty => RecvTimeoutError::Timeout,
                TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
            }),
        };
        loop {
            match msg {
                Ok(m) => c.on_message(m),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    if c.shutting.is_none() {
                        return;
                    }
                }
            }
            // Take whatever else is queued without blocking, so a group forms.
            match rx.try_recv() {
                Ok(m) => msg = Ok(m),
                Err(_) => break,
            }
        }
        // Waiters handed over before a message just read (shutdown follows the last ones).
        c.take_waiters(false);
        c.check_interval();
        // The next flush starts before this group's callbacks run (one wake-up per put):
        // the disk does not wait for them.
        c.dispatch();
        c.complete_waiters();
        if c.finish_shutdown() {
            return;
        }
    }
}

/// The coordinator's state (lives on its thread).
struct Coordinator {
    shared: Arc<Shared>,
    inbox: Arc<WaiterInbox>,
    job_tx: SyncSender<FlushJob>,
    sync: bool,
    file_size: u64,
    /// Direct mode's write ring (the worker streams; see `dispatch_direct`).
    ring: Option<Arc<DirectRing>>,
    pending: VecDeque<Waiter>,
    /// mmap: a job is running (one at a time).
    in_flight: bool,
    /// An ASYNC_FLUSH interval flush came due and has not been started yet.
    durable_due: bool,
    /// Direct: target of the last durable request the worker accepted.
    durable_sent: u64,
    /// Direct: a durable request found the job queue full; try again shortly.
    retry_soon: bool,
    last_interval: Instant,
    last_thorough: Instant,
    shutting: Option<SyncSender<()>>,
    write_error: bool,
}

impl Coordinator {
    fn new(shared: Arc<Shared>, inbox: Arc<WaiterInbox>, job_tx: SyncSender<FlushJob>) -> Self {
        let cfg = &shared.config;
        Coordinator {
            inbox,
            job_tx,
            sync: cfg.flush_disk_type == FlushDiskType::SyncFlush,
            file_size: shared.log.file_size(),
            ring: shared.log.ring().cloned(),
            pending: VecDeque::new(),
            in_flight: false,
            durable_due: false,
            durable_sent: 0,
            retry_soon: false,
            last_interval: Instant::now(),
            last_thorough: Instant::now(),
            shutting: None,
            write_error: false,
            shared,
        }
    }

    /// How long to wait for the next message.
    fn timeout(&self) -> Duration {
        if self.retry_soon {
            return Duration::from_millis(JOB_RETRY_MS);
        }
        if self.sync || self.shutting.is_some() {
            let mut t = Duration::from_millis(SYNC_IDLE_POLL_MS);
            if let Some(w) = self.pending.front() {
                t = t.min(w.deadline.saturating_duration_since(Instant::now()));
            }
            return t;
        }
        // Capped so a live change of the interval (say from an hour to 500 ms) applies
        // within a poll, not after the old interval ran out.
        self.interval()
            .saturating_sub(self.last_interval.elapsed())
            .min(Duration::from_millis(LIVE_SETTINGS_POLL_MS))
    }

    /// `flushIntervalCommitLog`, `flushCommitLogThoroughInterval` and
    /// `flushCommitLogLeastPages` are read on each use, so an update applies to the next
    /// interval.
    fn interval(&self) -> Duration {
        Duration::from_millis(self.shared.live.flush_interval_commit_log_ms().max(1))
    }

    fn thorough(&self) -> Duration {
        Duration::from_millis(self.shared.live.flush_commit_log_thorough_interval_ms())
    }

    fn least_pages(&self) -> u64 {
        u64::from(self.shared.live.flush_commit_log_least_pages())
    }

    /// Moves the waiters the append stage handed over into `pending`. With `arm`, when none
    /// came and the next one could start a flush, the next hand-over wakes this thread; a
    /// running mmap flush wakes it when it ends instead (see [`WaiterInbox`]).
    fn take_waiters(&mut self, arm: bool) -> usize {
        let idle = self.ring.is_some() || !self.in_flight || self.shutting.is_some();
        self.inbox.take_into(&mut self.pending, arm && idle)
    }

    fn on_message(&mut self, msg: FlushMsg) {
        match msg {
            // Only runs the loop: waiters are taken from the inbox on every pass, and under
            // SYNC_FLUSH dirty bytes are always flushed.
            FlushMsg::Wake => {}
            FlushMsg::Synced {
                target,
                store_timestamp_ms,
                result,
                elapsed_us,
                continuing,
            } => self.on_synced(target, store_timestamp_ms, result, elapsed_us, continuing),
            FlushMsg::Shutdown(tx) => self.shutting = Some(tx),
        }
    }

    fn on_synced(
        &mut self,
        target: u64,
        store_timestamp_ms: i64,
        result: Result<(), String>,
        elapsed_us: u64,
        continuing: bool,
    ) {
        // A chained mmap flush is still running (`FlushMsg::Synced::continuing`).
        self.in_flight = continuing;
        self.shared.metrics.record_flush(elapsed_us);
        match result {
            Ok(()) => {
                self.write_error = false;
                debug_assert!(self.shared.log.flushed_offset() >= target);
                self.shared
                    .checkpoint_physic_ts
                    .fetch_max(store_timestamp_ms, Ordering::AcqRel);
            }
            Err(e) => {
                self.durable_sent = 0; // ask again (after a pause, in `dispatch`)
                if !self.write_error {
                    tracing::error!(error = %e, "CommitLog flush failed; SYNC_FLUSH puts will time out");
                }
                self.write_error = true;
            }
        }
    }

    /// ASYNC_FLUSH: marks an interval flush due when the interval passed and enough is
    /// dirty.
    fn check_interval(&mut self) {
        if self.sync || self.last_interval.elapsed() < self.interval() {
            return;
        }
        self.last_interval = Instant::now();
        let max = self.shared.log.max_offset();
        let flushed = self.shared.log.flushed_offset();
        let crossed_segment = flushed / self.file_size != max / self.file_size;
        let least_pages = if self.last_thorough.elapsed() >= self.thorough() {
            self.last_thorough = Instant::now();
            0
        } else {
            self.least_pages()
        };
        self.durable_due |= flush_due(max, flushed, least_pages, crossed_segment);
    }

    /// Whether the bytes up to the max offset should be made durable now.
    fn wants_durable(&self, max: u64) -> bool {
        max > self.shared.log.flushed_offset()
            && (self.sync || self.shutting.is_some() || self.durable_due || self.write_error)
    }

    /// Starts the next flush if one is due.
    fn dispatch(&mut self) {
        self.retry_soon = false;
        // The store time first: the append stage publishes it before the max offset, so
        // it is no later than that of the last record below `max`.
        let store_timestamp_ms = self.shared.log.last_store_timestamp_ms();
        let max = self.shared.log.max_offset();
        if !self.wants_durable(max) {
            return;
        }
        let job = FlushJob {
            target: max,
            store_timestamp_ms,
        };
        if let Some(ring) = &self.ring {
            // Direct: the worker streams and takes requests at any time.
            if max <= self.durable_sent {
                return;
            }
            self.pause_if_failing();
            match self.job_tx.try_send(job) {
                Ok(()) => {
                    self.durable_sent = max;
                    self.durable_due = false;
                    ring.wake_flusher();
                }
                Err(TrySendError::Full(_)) => self.retry_soon = true,
                Err(TrySendError::Disconnected(_)) => {}
            }
        } else if !self.in_flight {
            self.pause_if_failing();
            if self.job_tx.send(job).is_ok() {
                self.in_flight = true;
                self.durable_due = false;
            }
        }
    }

    /// Does not spin on a failing disk.
    fn pause_if_failing(&self) {
        if self.write_error {
            std::thread::sleep(Duration::from_millis(SYNC_IDLE_POLL_MS));
        }
    }

    /// Completes the waiters the flushed offset passed, and those past their deadline.
    fn complete_waiters(&mut self) {
        let flushed = self.shared.log.flushed_offset();
        let mut completed = 0u64;
        let mut to_slave = Vec::new();
        while self.pending.front().is_some_and(|w| w.target <= flushed) {
            let w = self.pending.pop_front().expect("front exists");
            if w.then_slave {
                to_slave.push(w);
            } else {
                self.shared.complete_put(w.done, w.result);
            }
            completed += 1;
        }
        let now = Instant::now();
        while self.pending.front().is_some_and(|w| w.deadline <= now) {
            let w = self.pending.pop_front().expect("front exists");
            self.shared.complete_flush_timeout(w);
            self.shared
                .metrics
                .flush_timeouts
                .fetch_add(1, Ordering::Relaxed);
        }
        if completed > 0 {
            self.shared
                .metrics
                .flush_waiters_completed
                .fetch_add(completed, Ordering::Relaxed);
        }
        if !to_slave.is_empty() {
            crate::ha::ack::wait_for_slave(&self.shared, to_slave);
        }
        self.shared.ring_cores();
    }

    /// Shutting down: once everything is flushed (or the disk fails), completes what is
    /// left and acknowledges. Returns whether the coordinator is done.
    fn finish_shutdown(&mut self) -> bool {
        let Some(tx) = &self.shutting else {
            return false;
        };
        let flushed = self.shared.log.flushed_offset();
        let done = !self.in_flight && flushed >= self.shared.log.max_offset();
        if !done && !self.write_error {
            return false;
        }
        for w in std::mem::take(&mut self.pending) {
            if w.target > flushed {
                self.shared.complete_flush_timeout(w);
            } else {
                self.shared.complete_put(w.done, w.result);
            }
        }
        self.shared.ring_cores();
        let _ = tx.send(());
        true
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        // Ending by a panic: no waiter is left without an answer (a normal shutdown
        // completed them all already).
        let mut left = std::mem::take(&mut self.pending);
        left.extend(self.inbox.close());
        for w in left {
            self.shared.complete_flush_timeout(w);
        }
        self.shared.ring_cores();
        // The direct worker parks when idle: close the job queue (swap the sender for a
        // dead one) and let it see that now.
        let (dead, _) = std::sync::mpsc::sync_channel(0);
        drop(std::mem::replace(&mut self.job_tx, dead));
        if let Some(ring) = &self.ring {
            ring.wake_flusher();
        }
    }
}

pub(crate) fn run_worker(
    shared: Arc<Shared>,
    jobs: Receiver<FlushJob>,
    tx: SyncSender<FlushMsg>,
    direct: Option<DirectFlusher>,
) {
    if let Some(d) = direct {
        return run_direct_worker(shared, jobs, tx, d);
    }
    crate::util::pin_current_thread(shared.config.flush_core, "flush-worker");
    let sync = shared.config.flush_disk_type == FlushDiskType::SyncFlush;
    while let Ok(mut job) = jobs.recv() {
        loop {
            let t0 = Instant::now();
            let from = shared.log.flushed_offset();
            let result = if job.target <= from {
                Ok(())
            } else {
                flush_mapped(&shared, from, job.target)
            };
            if result.is_ok() && job.target > from {
                mark_segments_flushed(&shared, from, job.target, false);
                shared.log.set_flushed_offset(job.target);
                if sync {
                    shared.wake_reput();
                }
            }
            let elapsed_us = t0.elapsed().as_micros() as u64;
            // SYNC_FLUSH: what was appended during this flush is flushed next, at once: a
            // round trip through the coordinator first left the disk idle while both
            // threads waited for a core on a busy host.
            let next = match &result {
                Ok(()) if sync => next_sync_job(&shared, job.target),
                _ => None,
            };
            let synced = FlushMsg::Synced {
                target: job.target,
                store_timestamp_ms: job.store_timestamp_ms,
                result,
                elapsed_us,
                continuing: next.is_some(),
            };
            if tx.send(synced).is_err() {
                return;
            }
            match next {
                Some(n) => job = n,
                None => break,
            }
        }
    }
}

/// The flush of the bytes appended past `flushed`, if any (mmap SYNC_FLUSH chaining).
fn next_sync_job(shared: &Shared, flushed: u64) -> Option<FlushJob> {
    // The store time first, as the coordinator reads it (see `Coordinator::dispatch`).
    let store_timestamp_ms = shared.log.last_store_timestamp_ms();
    let max = shared.log.max_offset();
    (max > flushed).then_some(FlushJob {
        target: max,
        store_timestamp_ms,
    })
}

/// A durable request the direct worker has not satisfied yet.
struct DurableRequest {
    target: u64,
    store_timestamp_ms: i64,
}

/// Direct mode's worker: streams the appended bytes to the files (see `DirectFlusher`)
/// and makes them durable as requested, telling the coordinator each time the flushed
/// offset moves. When nothing is in flight and nothing is left to write it parks; the
/// append stage unparks it after each batch and the coordinator after each request.
fn run_direct_worker(
    shared: Arc<Shared>,
    jobs: Receiver<FlushJob>,
    tx: SyncSender<FlushMsg>,
    mut flusher: DirectFlusher,
) {
    crate::util::pin_current_thread(shared.config.flush_core, "flush-worker");
    if let Some(ring) = shared.log.ring() {
        ring.set_flusher();
    }
    let sync = shared.config.flush_disk_type == FlushDiskType::SyncFlush;
    let mut requests: VecDeque<DurableRequest> = VecDeque::with_capacity(MAX_DURABLE_REQUESTS);
    // After a failure nothing is written until the coordinator asks again (it paces
    // retries).
    let mut paused = false;
    loop {
        loop {
            match jobs.try_recv() {
                Ok(job) => {
                    paused = false;
                    take_request(&mut requests, job);
                }
                Err(TryRecvError::Empty) => break,
                // The coordinator is gone (shutdown, after the final flush).
                Err(TryRecvError::Disconnected) => return,
            }
        }
        if !paused {
            let durable_to = requests.back().map_or(0, |r| r.target);
            flusher.submit(shared.log.max_offset(), durable_to);
        }
        if flusher.is_idle() && !flusher.has_failure() {
            if !report_synced(&shared, &flusher, &mut requests, &tx, sync) {
                return;
            }
            std::thread::park_timeout(Duration::from_millis(DIRECT_WORKER_IDLE_PARK_MS));
            continue;
        }
        if let Some(e) = flusher.reap() {
            paused = true;
            requests.clear(); // the coordinator asks again
            let msg = FlushMsg::Synced {
                target: flusher.synced(),
                store_timestamp_ms: 0,
                result: Err(e.to_string()),
                elapsed_us: flusher.last_sync_us(),
                continuing: false,
            };
            if tx.send(msg).is_err() {
                return;
            }
        }
        if !report_synced(&shared, &flusher, &mut requests, &tx, sync) {
            return;
        }
    }
}

fn take_request(requests: &mut VecDeque<DurableRequest>, job: FlushJob) {
    let full = requests.len() >= MAX_DURABLE_REQUESTS;
    match requests.back_mut() {
        Some(last) if full || last.target >= job.target => {
            if job.target > last.target {
                last.target = job.target;
                last.store_timestamp_ms = job.store_timestamp_ms;
            }
        }
        _ => requests.push_back(DurableRequest {
            target: job.target,
            store_timestamp_ms: job.store_timestamp_ms,
        }),
    }
}

/// Publishes the flusher's durable end as the flushed offset if it moved, and tells the
/// coordinator. Returns false when the coordinator is gone.
fn report_synced(
    shared: &Shared,
    flusher: &DirectFlusher,
    requests: &mut VecDeque<DurableRequest>,
    tx: &SyncSender<FlushMsg>,
    sync: bool,
) -> bool {
    let synced = flusher.synced();
    let from = shared.log.flushed_offset();
    if synced <= from {
        return true;
    }
    mark_segments_flushed(shared, from, synced, true);
    shared.log.set_flushed_offset(synced);
    if sync {
        shared.wake_reput();
    }
    let mut store_timestamp_ms = 0;
    while requests.front().is_some_and(|r| r.target <= synced) {
        let r = requests.pop_front().expect("front exists");
        store_timestamp_ms = store_timestamp_ms.max(r.store_timestamp_ms);
    }
    tx.send(FlushMsg::Synced {
        target: synced,
        store_timestamp_ms,
        result: Ok(()),
        elapsed_us: flusher.last_sync_us(),
        continuing: false,
    })
    .is_ok()
}

fn flush_mapped(shared: &Shared, from: u64, to: u64) -> Result<(), String> {
    // Bytes below the CommitLog's first segment were deleted (by an operator: retention
    // keeps unflushed segments); there is nothing left of them to sync.
    let mut off = from.max(shared.log.min_offset().min(to));
    while off < to {
        let seg = shared
            .log
            .segment_for(off)
            .ok_or_else(|| format!("no CommitLog segment holds offset {off}"))?;
        let end = to.min(seg.from_offset() + seg.size());
        seg.flush_range(off - seg.from_offset(), end - seg.from_offset())
            .map_err(|e| e.to_string())?;
        off = end;
    }
    Ok(())
}

fn mark_segments_flushed(shared: &Shared, from: u64, to: u64, direct: bool) {
    let mut off = from;
    while off < to {
        let Some(seg) = shared.log.segment_for(off) else {
            break;
        };
        let end = to.min(seg.from_offset() + seg.size());
        seg.set_flushed(end - seg.from_offset());
        if direct && end == seg.from_offset() + seg.size() {
            // Complete on disk: O_DIRECT never touches its pages again, so reads of it
            // (consumers far behind) may read around again.
            seg.advise_normal();
        }
        off = end;
    }
}

#[cfg(test)]
mod tests {
    use crate::config::WriteMode;
    use crate::types::{PutMessageStatus, PutRequest};
    use crate::{FlushDiskType, MessageStore, StoreConfig};
    use bytes::BytesMut;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    fn config(dir: &std::path::Path, flush: FlushDiskType, mode: WriteMode) -> StoreConfig {
        StoreConfig {
            store_path_root_dir: dir.to_path_buf(),
            mapped_file_size_commit_log: 256 * 1024,
            mapped_file_size_consume_queue_units: 64,
            max_hash_slot_num: 64,
            max_index_num: 256,
            flush_disk_type: flush,
            write_mode: mode,
            direct_write_ring_size_bytes: 128 * 1024,
            ..StoreConfig::default()
        }
    }

    fn record(i: usize, body_len: usize) -> BytesMut {
        let props = format!("KEYS\u{1}k{i}\u{2}");
        let body = vec![b'a' + (i % 26) as u8; body_len];
        crate::util::loopback_record("FL", 0, &body, props.as_bytes())
    }

    /// Puts `count` records from 4 threads with up to 64 in flight each, retrying the
    /// refusals a client would retry; `check` sees every acknowledgement.
    fn put_many(
        store: &MessageStore,
        count: usize,
        body_len: usize,
        check: impl Fn(&crate::PutResult, i64) + Send + Sync + Copy + 'static,
    ) {
        std::thread::scope(|sc| {
            for t in 0..4 {
                let store = store.clone();
                sc.spawn(move || {
                    let (tx, rx) = mpsc::sync_channel(64);
                    let mine: Vec<usize> = (t..count).step_by(4).collect();
                    let mut next = 0;
                    let mut in_flight = 0;
                    while next < mine.len() || in_flight > 0 {
                        while next < mine.len() && in_flight < 64 {
                            let (tx, s) = (tx.clone(), store.clone());
                            let req = PutRequest::new("FL", 0, 0, record(mine[next], body_len), 1);
                            store.put(
                                req,
                                Box::new(move |r| {
                                    let flushed = s.metrics().commit_log_flushed_offset;
                                    let _ = tx.send((r, flushed));
                                }),
                            );
                            next += 1;
                            in_flight += 1;
                        }
                        // Bounded: a put whose callback never runs is a stage that hung.
                        let (r, flushed) = rx
                            .recv_timeout(Duration::from_secs(30))
                            .expect("a put callback runs within 30 s");
                        in_flight -= 1;
                        if r.status == PutMessageStatus::OsPageCacheBusy {
                            std::thread::sleep(Duration::from_millis(1));
                            next -= 1; // order does not matter here: put it again
                            continue;
                        }
                        assert_eq!(r.status, PutMessageStatus::PutOk);
                        check(&r, flushed);
                    }
                });
            }
        });
    }

    /// SYNC_FLUSH acknowledges a put only once the flushed offset (durable bytes) covers
    /// it, in both write modes, with groups forming under concurrency.
    #[test]
    fn sync_flush_acknowledges_only_durable_puts() {
        for mode in [WriteMode::Mmap, WriteMode::Direct] {
            let dir = crate::test_util::temp_dir("flush_sync_ack");
            let store = MessageStore::open(config(&dir, FlushDiskType::SyncFlush, mode)).unwrap();
            put_many(&store, 2000, 300, |r, flushed| {
                assert!(
                    flushed >= r.wrote_offset + i64::from(r.wrote_bytes),
                    "acknowledged at {} + {} with flushed {flushed}",
                    r.wrote_offset,
                    r.wrote_bytes
                );
            });
            let m = store.metrics();
            assert!(
                m.flush_group_mean >= 1.0,
                "{mode:?}: {}",
                m.flush_group_mean
            );
            store.shutdown();
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    /// ASYNC_FLUSH in direct mode: the worker streams writes continuously, and the
    /// interval flush that comes due meanwhile still runs: the flushed offset catches up
    /// with the log, across segments and ring wraps.
    #[test]
    fn direct_async_interval_flush_catches_up_while_streaming() {
        let dir = crate::test_util::temp_dir("flush_async_direct");
        let cfg = StoreConfig {
            flush_interval_commit_log_ms: 10,
            flush_commit_log_least_pages: 0,
            ..config(&dir, FlushDiskType::AsyncFlush, WriteMode::Direct)
        };
        let store = MessageStore::open(cfg).unwrap();
        // ~1.2 MiB: several segments, ~10 laps of the ring.
        put_many(&store, 3000, 400, |_, _| {});
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let m = store.metrics();
            if m.commit_log_flushed_offset == m.commit_log_max_offset {
                break;
            }
            assert!(Instant::now() < deadline, "flushed offset stuck: {m:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
        store.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
