//! The flush stage: a coordinator thread that owns the GroupCommit waiters and decides
//! when to flush, and a worker thread that performs one flush at a time (msync of mapped
//! segments, or io_uring O_DIRECT writes + FSYNC DATASYNC in direct mode).
//!
//! SYNC_FLUSH: waiters arrive from the append stage in batches, ordered by target offset.
//! Whenever the worker is idle and bytes are unflushed, the coordinator starts a flush up
//! to the current max offset; while it runs, new waiters pile up and form the next group,
//! so there is no sleep between groups and the group size adapts to the disk's fsync
//! latency. Every waiter at or below the flushed offset completes with PUT_OK; a waiter
//! past its `syncFlushTimeout` deadline completes with FLUSH_DISK_TIMEOUT even if the disk
//! hangs (the coordinator never blocks on the disk itself).
//!
//! ASYNC_FLUSH: every `flushIntervalCommitLog` ms flush if at least
//! `flushCommitLogLeastPages` pages are dirty (or a segment filled), and everything every
//! `flushCommitLogThoroughInterval` ms.

use crate::append::PutCallback;
use crate::config::FlushDiskType;
use crate::direct::DirectFlusher;
use crate::mapped_file::OS_PAGE_SIZE;
use crate::store::Shared;
use crate::types::{PutMessageStatus, PutResult};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A SYNC_FLUSH put waiting for its bytes to reach the disk.
pub(crate) struct Waiter {
    /// End offset of the put's bytes.
    pub target: u64,
    pub deadline: Instant,
    pub result: PutResult,
    pub done: PutCallback,
}

/// Messages to the flush coordinator.
pub(crate) enum FlushMsg {
    Waiters(Vec<Waiter>),
    /// New bytes worth flushing soon (direct-mode ring pressure, WAIT=false puts).
    Wake,
    /// The worker finished a flush.
    Synced {
        target: u64,
        store_timestamp_ms: i64,
        result: Result<(), String>,
        elapsed_us: u64,
    },
    Shutdown(SyncSender<()>),
}

/// A flush job for the worker: flush up to `target`; `store_timestamp_ms` is a store time
/// no later than that of the last record below `target` (for the checkpoint).
pub(crate) struct FlushJob {
    target: u64,
    store_timestamp_ms: i64,
}

/// Poll interval of the SYNC_FLUSH coordinator when idle (upstream's 10 ms wait).
const SYNC_IDLE_POLL_MS: u64 = 10;

pub(crate) fn run_coordinator(
    shared: Arc<Shared>,
    rx: Receiver<FlushMsg>,
    job_tx: SyncSender<FlushJob>,
) {
    crate::util::pin_current_thread(shared.config.flush_core, "flush");
    let cfg = &shared.config;
    let sync = cfg.flush_disk_type == FlushDiskType::SyncFlush;
    let interval = Duration::from_millis(cfg.flush_interval_commit_log_ms.max(1));
    let thorough = Duration::from_millis(cfg.flush_commit_log_thorough_interval_ms);
    let least_pages = u64::from(cfg.flush_commit_log_least_pages);
    let file_size = shared.log.file_size();
    let mut pending: VecDeque<Waiter> = VecDeque::new();
    let mut in_flight = false;
    let mut wake = false;
    let mut last_interval = Instant::now();
    let mut last_thorough = Instant::now();
    let mut shutting: Option<SyncSender<()>> = None;
    let mut write_error = false;
    loop {
        let timeout = if sync || shutting.is_some() {
            let mut t = Duration::from_millis(SYNC_IDLE_POLL_MS);
            if let Some(w) = pending.front() {
                t = t.min(w.deadline.saturating_duration_since(Instant::now()));
            }
            t
        } else {
            interval.saturating_sub(last_interval.elapsed())
        };
        let mut msg = rx.recv_timeout(timeout);
        loop {
            match msg {
                Ok(FlushMsg::Waiters(v)) => pending.extend(v),
                Ok(FlushMsg::Wake) => wake = true,
                Ok(FlushMsg::Synced {
                    target,
                    store_timestamp_ms,
                    result,
                    elapsed_us,
                }) => {
                    in_flight = false;
                    shared.metrics.record_flush(elapsed_us);
                    match result {
                        Ok(()) => {
                            write_error = false;
                            shared
                                .checkpoint_physic_ts
                                .fetch_max(store_timestamp_ms, Ordering::AcqRel);
                            let _ = target;
                        }
                        Err(e) => {
                            if !write_error {
                                tracing::error!(error = %e, "CommitLog flush failed; SYNC_FLUSH puts will time out");
                            }
                            write_error = true;
                        }
                    }
                }
                Ok(FlushMsg::Shutdown(tx)) => shutting = Some(tx),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    if shutting.is_none() {
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
        let flushed = shared.log.flushed_offset();
        let mut completed = 0u64;
        while pending.front().is_some_and(|w| w.target <= flushed) {
            let w = pending.pop_front().expect("front exists");
            (w.done)(w.result);
            completed += 1;
        }
        let now = Instant::now();
        while pending.front().is_some_and(|w| w.deadline <= now) {
            let w = pending.pop_front().expect("front exists");
            let mut r = w.result;
            r.status = PutMessageStatus::FlushDiskTimeout;
            (w.done)(r);
            shared
                .metrics
                .flush_timeouts
                .fetch_add(1, Ordering::Relaxed);
        }
        if completed > 0 {
            shared
                .metrics
                .flush_waiters_completed
                .fetch_add(completed, Ordering::Relaxed);
        }
        let interval_due = !sync && last_interval.elapsed() >= interval;
        if interval_due {
            last_interval = Instant::now();
        }
        if !in_flight {
            let store_ts = shared.log.last_store_timestamp_ms();
            let max = shared.log.max_offset();
            let flushed = shared.log.flushed_offset();
            let dirty = max > flushed;
            let timed = interval_due && {
                let pages = max / OS_PAGE_SIZE - flushed / OS_PAGE_SIZE;
                let crossed_segment = flushed / file_size != max / file_size;
                let thorough_due = last_thorough.elapsed() >= thorough;
                if thorough_due {
                    last_thorough = Instant::now();
                }
                thorough_due || crossed_segment || least_pages == 0 || pages >= least_pages
            };
            let want = dirty && (sync || shutting.is_some() || wake || write_error || timed);
            wake = false;
            if want {
                if write_error {
                    // Do not spin on a failing disk.
                    std::thread::sleep(Duration::from_millis(SYNC_IDLE_POLL_MS));
                }
                if job_tx
                    .send(FlushJob {
                        target: max,
                        store_timestamp_ms: store_ts,
                    })
                    .is_ok()
                {
                    in_flight = true;
                }
            }
        }
        if let Some(tx) = &shutting {
            let done = !in_flight && shared.log.flushed_offset() >= shared.log.max_offset();
            if done || write_error {
                for w in pending.drain(..) {
                    let mut r = w.result;
                    if w.target > shared.log.flushed_offset() {
                        r.status = PutMessageStatus::FlushDiskTimeout;
                    }
                    (w.done)(r);
                }
                let _ = tx.send(());
                return;
            }
        }
    }
}

pub(crate) fn run_worker(
    shared: Arc<Shared>,
    jobs: Receiver<FlushJob>,
    tx: SyncSender<FlushMsg>,
    mut direct: Option<DirectFlusher>,
) {
    crate::util::pin_current_thread(shared.config.flush_core, "flush-worker");
    let sync = shared.config.flush_disk_type == FlushDiskType::SyncFlush;
    while let Ok(job) = jobs.recv() {
        let t0 = Instant::now();
        let from = shared.log.flushed_offset();
        let result = if job.target <= from {
            Ok(())
        } else if let Some(d) = direct.as_mut() {
            d.flush(from, job.target).map_err(|e| e.to_string())
        } else {
            flush_mapped(&shared, from, job.target)
        };
        if result.is_ok() && job.target > from {
            mark_segments_flushed(&shared, from, job.target, direct.is_some());
            shared.log.set_flushed_offset(job.target);
            if sync {
                shared.wake_reput();
            }
        }
        let elapsed_us = t0.elapsed().as_micros() as u64;
        if tx
            .send(FlushMsg::Synced {
                target: job.target,
                store_timestamp_ms: job.store_timestamp_ms,
                result,
                elapsed_us,
            })
            .is_err()
        {
            break;
        }
    }
}

fn flush_mapped(shared: &Shared, from: u64, to: u64) -> Result<(), String> {
    let mut off = from;
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
