//! The append stage: the one owner of the CommitLog tail (RocketMQ's `putMessageLock`
//! critical section). Its batches run on its thread, or on a network core while the
//! thread idles (`append_runner`); one batch at a time either way. It drains PutRequests
//! from the network cores' rings and a bounded shared queue in batches, assigns queue
//! offsets from the topicQueueTable it owns, patches PHYSICALOFFSET / QUEUEOFFSET /
//! STORETIMESTAMP into the pre-encoded records, copies them into the active segment
//! (mmap: one pwritev per batch into the page cache the read-only mapping shares, and
//! under SYNC_FLUSH the start of the batch's writeback) or the write ring (direct), rolls
//! segments with a BLANK filler, publishes the new max offset,
//! and hands completions to the flush stage (SYNC_FLUSH), to the HA stage (SYNC_MASTER:
//! after a slave's ack) or completes them itself (ASYNC_FLUSH). On a slave it also writes
//! the master's replicated bytes unchanged at their physical offset (`AppendMsg::Replica`),
//! so it stays the only writer of the tail.

use crate::commit_log::AllocatorHandle;
use crate::config::{BrokerRole, FlushDiskType, StoreConfig};
use crate::direct::DirectRing;
use crate::mapped_file::{MappedFile, IOV_MAX, OS_PAGE_SIZE};
use crate::reput::ReputHandle;
use crate::shared::Shared;
use crate::stage_msg::{AppendMsg, Done, FlushMsg, FlushPort, HandOver, Waiter};
use crate::types::{PutMessageStatus, PutRequest, PutResult};
use crate::util::{now_ms, panic_text, FastHash};
use bytes::BytesMut;
use ringmq_remoting::message::record::{self, BLANK_RECORD_SIZE};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::types::PutCallback;

/// Which network cores' put rings a batch takes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CoreRings {
    /// Every core's, each in turn (the append thread, shutdown).
    All,
    /// Only this core's: a network core appending inline takes its own puts, whose
    /// records it just built and still holds in its cache, and hands the other cores'
    /// back to them (`CorePorts::end_inline_and_hand_back`).
    Only(usize),
}

/// The append stage's state; lives on its thread.
pub(crate) struct AppendStage {
    shared: Arc<Shared>,
    rx: Receiver<AppendMsg>,
    flush: FlushPort,
    allocator: AllocatorHandle,
    active: Option<Arc<MappedFile>>,
    /// Global write offset (the next record's physical offset).
    wrote: u64,
    /// `topic -> queueId -> next queue offset`.
    topic_queue_table: QueueOffsetTable,
    ring: Option<Arc<DirectRing>>,
    last_store_timestamp_ms: i64,
    lock_hold_us: hdrhistogram::Histogram<u64>,
    /// Failed CommitLog writes not yet reported, and when the last report went out.
    write_errors: u64,
    last_write_error_log: Option<Instant>,
    /// mmap mode: this batch's bytes not yet in the active segment, laid end to end from
    /// `pending_start`; written with one pwritev before the batch is published (or before
    /// a roll-over, or when IOV_MAX buffers are waiting).
    pending: Vec<Pending>,
    pending_start: u64,
    /// mmap ASYNC_FLUSH with inline dispatch: this batch's written bytes, kept (moved, not
    /// copied) from `written_start` on until the batch is dispatched from them
    /// (`reput::dispatch_here_or_wake`), as long as each write continues the last (a
    /// roll-over ends that; dispatch also stops at the BLANK filler). Dispatch then reads
    /// records still in this core's cache instead of the page cache through the mapping.
    written: Vec<Pending>,
    written_start: u64,
    /// Where the bytes in `written` end.
    written_end: u64,
    /// Set when a write failed during this batch: puts of this batch at or past this offset
    /// failed, and the rest of the batch is refused.
    failed_from: Option<u64>,
    /// The core whose ring the next batch reads first.
    next_core: usize,
    /// The flush stage was told to stop (normal shutdown).
    flush_stopped: bool,
    /// How much a batch takes, and how its puts complete.
    limits: BatchLimits,
    /// The batch being assembled or applied (its buffers are reused).
    batch: Batch,
    /// A shutdown request a batch met; the append thread finishes it
    /// (`finish_on_thread`).
    shutdown: Option<SyncSender<()>>,
    /// The stage is done: no batch runs any more, on its thread or inline.
    stopped: bool,
    /// A batch run inline on a network core panicked outside the per-put fence: the cause,
    /// for the append thread to end the stage with.
    broken: Option<String>,
    /// The reput stage, when it shares this stage's core: each ASYNC_FLUSH batch is
    /// dispatched here instead of waking the reput thread (`reput::dispatch_here_or_wake`).
    reput: Option<ReputHandle>,
}

/// Bytes of one put (or a BLANK filler) waiting for the batch's pwritev.
struct Pending {
    bytes: PendingBytes,
    /// `(topic, queue, offset before this put)`: restored if the write fails, so failed puts
    /// leave no hole in the queue offsets.
    undo: Option<(String, i32, i64)>,
}

enum PendingBytes {
    Records(BytesMut),
    Blank([u8; BLANK_RECORD_SIZE]),
}

impl Pending {
    fn as_slice(&self) -> &[u8] {
        match &self.bytes {
            PendingBytes::Records(b) => b,
            PendingBytes::Blank(b) => b,
        }
    }
}

/// Zeros a batch write is padded with up to the next page boundary.
static ZERO_PAGE: [u8; OS_PAGE_SIZE as usize] = [0; OS_PAGE_SIZE as usize];

/// Refusal reasons (log and metrics keys).
pub(crate) const REFUSED_SEND_QUEUE_TIMEOUT: &str = "TIMEOUT_CLEAN_QUEUE";
pub(crate) const REFUSED_APPEND_PANIC: &str = "APPEND_PANIC";

/// Least time between two log lines about failed CommitLog writes.
const WRITE_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// How much one batch takes, and how its puts complete.
#[derive(Clone, Copy)]
struct BatchLimits {
    max_requests: usize,
    max_bytes: usize,
    /// SYNC_FLUSH: puts that wait for the store complete after the flush.
    sync: bool,
    /// SYNC_MASTER with `inSyncReplicas` ≥ 2: WAIT puts complete after a slave's ack.
    slave_ack: bool,
}

impl BatchLimits {
    fn new(config: &StoreConfig) -> Self {
        BatchLimits {
            max_requests: config.append_batch_max_requests.max(1),
            max_bytes: config.append_batch_max_bytes.max(1),
            sync: config.flush_disk_type == FlushDiskType::SyncFlush,
            // A controller-elected master is a SYNC_MASTER (upstream sets the role so).
            slave_ack: (config.broker_role == BrokerRole::SyncMaster || config.controller_mode)
                && config.in_sync_replicas >= 2,
        }
    }
}

/// One batch's messages and the completions it produces (buffers reused across batches).
#[derive(Default)]
struct Batch {
    msgs: Vec<AppendMsg>,
    /// Puts this stage completes once the batch is published.
    done_now: Vec<(Done, PutResult)>,
    /// SYNC_FLUSH puts handed to the flush stage.
    waiters: Vec<Waiter>,
    /// SYNC_MASTER puts (not under SYNC_FLUSH) handed to the HA stage to wait for an ack.
    slave_waiters: Vec<Waiter>,
    /// Slave: answers to the HA client's replica appends (the new max offset or why not).
    replica_replies: Vec<ReplicaReply>,
}

type ReplicaReply = (SyncSender<Result<u64, String>>, Result<u64, String>);

impl Batch {
    fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }

    fn with_capacity(n: usize) -> Self {
        Batch {
            msgs: Vec::with_capacity(n),
            done_now: Vec::with_capacity(n),
            waiters: Vec::with_capacity(n),
            replica_replies: Vec::new(),
            slave_waiters: Vec::new(),
        }
    }

    /// The batch's write failed from `from` on: those puts are not stored.
    fn fail_from(&mut self, from: u64) {
        let failed =
            |r: &PutResult| r.status == PutMessageStatus::PutOk && r.wrote_offset as u64 >= from;
        for (_, r) in self.done_now.iter_mut() {
            if failed(r) {
                *r = PutResult::failed(PutMessageStatus::UnknownError);
            }
        }
        for waiters in [&mut self.waiters, &mut self.slave_waiters] {
            let mut i = 0;
            while i < waiters.len() {
                if failed(&waiters[i].result) {
                    let w = waiters.swap_remove(i);
                    self.done_now
                        .push((w.done, PutResult::failed(PutMessageStatus::UnknownError)));
                } else {
                    i += 1;
                }
            }
            waiters.sort_by_key(|w| w.target);
        }
    }

    /// Messages and bytes of the batch's stored puts.
    fn stored_totals(&self) -> (u64, u64) {
        let (mut msgs, mut bytes) = (0u64, 0u64);
        for r in self
            .done_now
            .iter()
            .map(|(_, r)| r)
            .chain(self.waiters.iter().map(|w| &w.result))
            .chain(self.slave_waiters.iter().map(|w| &w.result))
            .filter(|r| r.status == PutMessageStatus::PutOk)
        {
            msgs += r.msg_num as u64;
            bytes += r.wrote_bytes as u64;
        }
        (msgs, bytes)
    }
}

impl AppendStage {
    pub fn new(
        shared: Arc<Shared>,
        rx: Receiver<AppendMsg>,
        flush: FlushPort,
        allocator: AllocatorHandle,
        topic_queue_table: QueueOffsetTable,
        ring: Option<Arc<DirectRing>>,
        reput: Option<ReputHandle>,
    ) -> Self {
        let log = &shared.log;
        let wrote = log.max_offset();
        let active = log.last_file().filter(|f| f.contains(wrote));
        let limits = BatchLimits::new(&shared.config);
        AppendStage {
            batch: Batch::with_capacity(limits.max_requests),
            limits,
            shutdown: None,
            stopped: false,
            broken: None,
            flush,
            allocator,
            active,
            wrote,
            topic_queue_table,
            ring,
            last_store_timestamp_ms: 0,
            lock_hold_us: hdrhistogram::Histogram::new_with_bounds(1, 60_000_000, 2)
                .expect("histogram bounds"),
            write_errors: 0,
            last_write_error_log: None,
            pending: Vec::new(),
            pending_start: wrote,
            written: Vec::new(),
            written_start: wrote,
            written_end: wrote,
            failed_from: None,
            next_core: 0,
            flush_stopped: false,
            reput,
            rx,
            shared,
        }
    }

    /// Append thread, once before its first batch: placement, priority, and the next
    /// segment prepared ahead of need.
    pub(crate) fn start_on_thread(&mut self) {
        crate::util::pin_current_thread(self.shared.config.append_core, "append");
        if self.shared.config.broker_role == crate::config::BrokerRole::Slave {
            // A slave's append stage writes what its HA client hands it: it is a link of
            // the replication path and runs at the HA threads' priority.
            crate::util::set_current_thread_nice(self.shared.config.ha_thread_nice, "append");
        }
        if let Some(a) = &self.active {
            self.allocator.prepare(a.from_offset() + a.size());
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Whether a batch may run on a network core rather than the append thread now: the
    /// stage is live, no batch a core left for the append thread waits in it, and, in
    /// direct mode, the write ring has room for the largest batch (a network core must
    /// never wait for the flusher).
    pub(crate) fn runs_inline(&self) -> bool {
        !self.stopped
            && self.broken.is_none()
            && self.shutdown.is_none()
            && self.batch.is_empty()
            && self.ring_has_room(self.limits.max_bytes, self.limits.max_requests)
    }

    /// Whether the batch just taken (`batch_bytes`) may run on a network core: in direct
    /// mode only when the write ring has room for all of it. A batch may pass
    /// `max_bytes` by one put, so [`runs_inline`](Self::runs_inline) alone does not
    /// promise that.
    pub(crate) fn batch_runs_inline(&self, batch_bytes: usize) -> bool {
        self.ring_has_room(batch_bytes, self.batch.msgs.len())
    }

    /// Direct mode: whether the write ring can take `bytes` of records in `puts` puts
    /// with no wait for the flusher. Besides the records, a batch moves the write offset
    /// over the BLANK filler of every segment it ends, each shorter than the put that did
    /// not fit plus a BLANK header. The room a writer saw does not shrink while it holds
    /// the stage (an HA send pins no lower, `DirectRing::send_pinned`), so a batch checked
    /// here does not wait for the flusher.
    fn ring_has_room(&self, bytes: usize, puts: usize) -> bool {
        let Some(ring) = &self.ring else { return true };
        let most_bytes = 2 * bytes as u64 + (puts * BLANK_RECORD_SIZE) as u64;
        self.wrote + most_bytes <= ring.room_end()
    }

    /// Whether the batch taken last is empty.
    pub(crate) fn batch_is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    /// Whether the batch taken last stopped at a limit: more may be queued behind it.
    pub(crate) fn batch_is_full(&self, batch_bytes: usize) -> bool {
        self.batch.msgs.len() >= self.limits.max_requests || batch_bytes >= self.limits.max_bytes
    }

    /// Appends the batch just taken (`batch_bytes` of records), publishes it and completes
    /// its puts. `perf` samples the append thread's counters (None inline: the counters
    /// follow the thread that opened them). A shutdown the batch met is kept for
    /// [`finish_on_thread`](Self::finish_on_thread).
    pub(crate) fn process(
        &mut self,
        batch_bytes: usize,
        mut perf: Option<&mut crate::perf_event::BatchSampler>,
    ) {
        let mut batch = std::mem::take(&mut self.batch);
        // Normally empty: what a batch that ended early (a panic) kept is stale.
        self.written.clear();
        // Wait for write-ring room before the batch is timed as lock hold: the wait is
        // the disk's pace, not work on the CommitLog tail.
        self.wait_ring_room(batch_bytes as u64);
        if let Some(p) = perf.as_deref_mut() {
            p.begin();
        }
        let t0 = Instant::now();
        let now = now_ms().max(self.last_store_timestamp_ms);
        self.last_store_timestamp_ms = now;
        self.shared
            .begin_time_in_lock_ms
            .store(now, Ordering::Release);
        // `syncFlushTimeout` is read per batch so an update applies to the next puts.
        let sync_timeout = Duration::from_millis(self.shared.live.sync_flush_timeout_ms());
        let limits = self.limits;
        if let Some(tx) = self.append_batch(&mut batch, now, t0 + sync_timeout, &limits) {
            self.shutdown = Some(tx);
        }
        let _ = self.commit();
        if let Some(from) = self.failed_from.take() {
            batch.fail_from(from);
        }
        let (msgs, bytes) = batch.stored_totals();
        self.publish(now);
        self.shared
            .begin_time_in_lock_ms
            .store(0, Ordering::Release);
        let held_us = t0.elapsed().as_micros() as u64;
        if let Some(p) = perf {
            p.end(&self.shared.metrics.append_perf);
        }
        self.record_batch(held_us, msgs, bytes);
        self.complete(&mut batch, &limits);
        self.written.clear();
        self.batch = batch;
    }

    /// Append thread: ends the stage when a batch met a shutdown request (the flush stage
    /// is told to stop after its final flush, and puts still queued are refused) or when
    /// a batch run inline panicked (the panic resumes here, so the stage ends as if it had
    /// panicked on its thread). Returns whether the stage is done.
    pub(crate) fn finish_on_thread(&mut self) -> bool {
        if let Some(cause) = self.broken.take() {
            self.stopped = true;
            panic!("{cause}");
        }
        let Some(tx) = self.shutdown.take() else {
            return self.stopped;
        };
        self.refuse_core_puts();
        let _ = self.flush.tx.send(FlushMsg::Shutdown(tx));
        self.flush_stopped = true;
        self.stopped = true;
        true
    }

    /// A batch run inline panicked outside the per-put fence with `cause`.
    pub(crate) fn mark_broken(&mut self, cause: String) {
        self.broken = Some(cause);
    }

    /// The stage's thread ended (its store is gone, or it panicked): no batch runs any
    /// more, and the flush stage is stopped (after its final flush), so the store's
    /// shutdown does not wait for a flush stage nobody will ever stop.
    pub(crate) fn end(&mut self) {
        self.stopped = true;
        if !self.flush_stopped {
            self.flush_stopped = true;
            let (ack, _) = std::sync::mpsc::sync_channel(1);
            let _ = self.flush.tx.try_send(FlushMsg::Shutdown(ack));
        }
    }

    /// Takes what is queued into the batch, up to the batch limits: the shared queue first,
    /// then the cores' rings (starting at a different core each batch, so no core's puts
    /// wait behind another's); returns the batch's record bytes, those of a batch a
    /// network core left for the append thread included. None once the store is gone and
    /// nothing is left.
    pub(crate) fn take_queued(&mut self, cores: CoreRings) -> Option<usize> {
        let mut bytes: usize = self.batch.msgs.iter().map(AppendMsg::put_bytes).sum();
        loop {
            if self.batch_is_full(bytes) {
                return Some(bytes);
            }
            match self.rx.try_recv() {
                Ok(m) => {
                    bytes += m.put_bytes();
                    self.batch.msgs.push(m);
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) if self.batch.is_empty() => return None,
                Err(TryRecvError::Disconnected) => break,
            }
        }
        Some(bytes + self.take_core_puts(cores, bytes))
    }

    /// Shutdown: puts still in the cores' rings or waiting for room are answered
    /// SERVICE_NOT_AVAILABLE (new puts are already refused: the store is stopping).
    fn refuse_core_puts(&mut self) {
        let refused = PutResult::failed(PutMessageStatus::ServiceNotAvailable);
        while self.take_core_puts(CoreRings::All, 0) > 0 || !self.batch.is_empty() {
            for msg in self.batch.msgs.drain(..) {
                if let AppendMsg::Put { done, .. } = msg {
                    self.shared.complete_put(done, refused);
                }
            }
        }
        if let Some(ports) = self.shared.core_ports.get() {
            ports.fail_waiting(PutMessageStatus::ServiceNotAvailable);
        }
        self.shared.ring_cores();
    }

    /// Takes puts from the cores' rings into the batch (each core in turn, or only the
    /// one `cores` names), up to the batch limits, the batch holding `already` bytes;
    /// returns the bytes taken.
    fn take_core_puts(&mut self, cores: CoreRings, already: usize) -> usize {
        let Some(ports) = self.shared.core_ports.get() else {
            return 0;
        };
        let count = ports.len();
        let (first, rings) = match cores {
            CoreRings::All => {
                let first = self.next_core;
                self.next_core = (self.next_core + 1) % count.max(1);
                (first, count)
            }
            CoreRings::Only(core) => (core, 1),
        };
        let mut bytes = 0;
        for k in 0..rings {
            let room = self
                .limits
                .max_requests
                .saturating_sub(self.batch.msgs.len());
            let budget = self.limits.max_bytes.saturating_sub(already + bytes);
            if room == 0 || budget == 0 {
                break;
            }
            bytes += ports.take_puts((first + k) % count, &mut self.batch.msgs, room, budget);
        }
        bytes
    }

    /// Appends the batch's puts and applies its other messages; returns the shutdown
    /// request if the batch held one.
    fn append_batch(
        &mut self,
        batch: &mut Batch,
        now: i64,
        flush_deadline: Instant,
        limits: &BatchLimits,
    ) -> Option<SyncSender<()>> {
        let mut shutdown = None;
        let wait_limit_ms = self.shared.send_queue_wait_limit_ms.load(Ordering::Relaxed);
        let started = Instant::now();
        for msg in batch.msgs.drain(..) {
            match msg {
                AppendMsg::Put {
                    req,
                    done,
                    enqueued,
                } => {
                    let queued_ms = started.saturating_duration_since(enqueued).as_millis() as u64;
                    if wait_limit_ms > 0 && queued_ms >= wait_limit_ms {
                        self.shared.refusals.refused(REFUSED_SEND_QUEUE_TIMEOUT);
                        batch
                            .done_now
                            .push((done, PutResult::queue_timeout(queued_ms)));
                        continue;
                    }
                    #[cfg(any(test, feature = "test-util"))]
                    crate::fault::stage_panic_if_injected(&req.topic);
                    let wait = req.wait_store_msg_ok;
                    let mut r = self.append_guarded(req, now);
                    r.queued_ms = u32::try_from(queued_ms).unwrap_or(u32::MAX);
                    let target = (r.wrote_offset + i64::from(r.wrote_bytes)) as u64;
                    let stored = wait && r.status == PutMessageStatus::PutOk;
                    let then_slave = stored && limits.slave_ack && self.slave_ok(target, &mut r);
                    if limits.sync && stored && r.status == PutMessageStatus::PutOk {
                        batch.waiters.push(Waiter {
                            target,
                            deadline: flush_deadline,
                            result: r,
                            done,
                            then_slave,
                        });
                    } else if then_slave {
                        batch.slave_waiters.push(Waiter {
                            target,
                            deadline: started,
                            result: r,
                            done,
                            then_slave,
                        });
                    } else {
                        batch.done_now.push((done, r));
                    }
                }
                AppendMsg::Replica {
                    phy_offset,
                    bytes,
                    reply,
                } => {
                    let r = self.append_replica(phy_offset, &bytes);
                    batch.replica_replies.push((reply, r));
                }
                AppendMsg::DeleteTopic(t) => {
                    self.topic_queue_table.remove(&t);
                }
                AppendMsg::RebuildQueueOffsets(done) => {
                    self.topic_queue_table = queue_offset_table(&self.shared.cqs);
                    let _ = done.try_send(());
                }
                AppendMsg::Shutdown(tx) => shutdown = Some(tx),
            }
        }
        shutdown
    }

    /// Adds one batch to the lock-hold metrics; warns about a batch that held the tail long.
    fn record_batch(&mut self, held_us: u64, msgs: u64, bytes: u64) {
        self.shared
            .metrics
            .record_append_batch(held_us, msgs, bytes, &mut self.lock_hold_us);
        if held_us > 500_000 {
            tracing::warn!(
                held_us,
                "append batch held the CommitLog tail for over 500 ms"
            );
        }
    }

    /// After the batch is published: hands SYNC_FLUSH waiters to the flush stage, wakes the
    /// direct flusher, completes the rest, and (ASYNC_FLUSH) wakes dispatch.
    fn complete(&self, batch: &mut Batch, limits: &BatchLimits) {
        if limits.sync {
            // An empty hand-over still wakes an idle coordinator: WAIT=false puts' bytes
            // get flushed soon too.
            match self.flush.inbox.hand_over(&mut batch.waiters) {
                HandOver::Taken => {}
                // A full queue holds a wake-up already.
                HandOver::Wake => drop(self.flush.tx.try_send(FlushMsg::Wake)),
                HandOver::Refused(waiters) => {
                    // Flush stage gone (shutdown race): complete as stored-but-unconfirmed.
                    for w in waiters {
                        self.shared.complete_flush_timeout(w);
                    }
                }
            }
        }
        if let Some(ring) = &self.ring {
            // The direct flusher writes appended bytes as they come.
            ring.wake_flusher();
        }
        for (done, r) in batch.done_now.drain(..) {
            self.shared.complete_put(done, r);
        }
        self.shared.ring_cores();
        if !batch.slave_waiters.is_empty() {
            crate::ha::ack::wait_for_slave(&self.shared, std::mem::take(&mut batch.slave_waiters));
        }
        self.shared.ha.notify_published();
        let published = self.shared.log.max_offset();
        for (reply, r) in batch.replica_replies.drain(..) {
            // A batch write that failed after this append un-did it.
            let r = r.and_then(|end| match end <= published {
                true => Ok(end),
                false => Err(format!("CommitLog write failed below offset {end}")),
            });
            let _ = reply.try_send(r);
        }
        if !limits.sync {
            match &self.reput {
                Some(reput) => {
                    let written = self.written.iter().map(Pending::as_slice);
                    crate::reput::dispatch_here_or_wake(
                        reput,
                        &self.shared,
                        self.written_start,
                        written,
                    )
                }
                None => self.shared.wake_reput(),
            }
        }
    }

    /// Makes this batch visible: segment and CommitLog max offsets.
    fn publish(&mut self, now: i64) {
        if let Some(a) = &self.active {
            a.set_wrote(self.wrote - a.from_offset());
        }
        if let Some(ring) = &self.ring {
            ring.zero_to_page_end(self.wrote);
        }
        self.shared.log.set_last_store_timestamp_ms(now);
        self.shared.log.set_max_offset(self.wrote);
        self.shared.ha.record_publish(self.wrote);
    }

    /// Switches to the segment starting at the current write offset. Pending bytes of the
    /// old segment are written before (see the BLANK branch of `append`).
    fn roll(&mut self) -> Result<(), String> {
        debug_assert!(self.pending.is_empty(), "roll with unwritten bytes");
        let file_size = self.shared.log.file_size();
        if let Some(a) = &self.active {
            a.set_wrote(file_size);
        }
        let next = self.wrote - self.wrote % file_size;
        let f = self.allocator.take(next)?;
        self.shared.log.push_file(Arc::clone(&f));
        self.active = Some(f);
        Ok(())
    }

    /// Waits (direct mode) for ring room inside a batch. The flusher writes only published
    /// bytes, so when the records appended so far in this batch are what fills the ring,
    /// they are published first: otherwise the stage would wait for room that only its own
    /// publication can free, and every put would hang. Publishing early only makes those
    /// records readable before their puts are acknowledged, as between any two batches.
    ///
    /// The wait is for all `len` bytes about to be written (a put is at most a ring less a
    /// page, `check_put_size`, so the room always comes once everything is published):
    /// waiting for less would let the write overwrite ring bytes not yet in the file.
    fn wait_ring_room_in_batch(&mut self, len: u64) {
        let Some(ring) = &self.ring else { return };
        let end = self.wrote + len;
        if end > ring.room_end() && self.wrote > self.shared.log.max_offset() {
            self.publish(self.last_store_timestamp_ms);
        }
        self.wait_ring_room_to(end);
    }

    /// Waits (direct mode) before a batch until the write ring has room for its `len`
    /// bytes, at most half the ring: a larger batch waits again per put.
    fn wait_ring_room(&self, len: u64) {
        let Some(ring) = &self.ring else { return };
        self.wait_ring_room_to(self.wrote + len.min(ring.size() / 2));
    }

    /// Waits (direct mode) until global offset `end` may be written; the flusher frees
    /// room as its writes complete and unparks this thread.
    fn wait_ring_room_to(&self, end: u64) {
        let Some(ring) = &self.ring else { return };
        let waited = ring.wait_room(end, || ring.wake_flusher());
        if waited {
            self.shared
                .metrics
                .ring_full_waits
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// mmap mode: queues `p` (the bytes at the current write offset) for the batch's
    /// pwritev, writing what is queued first when IOV_MAX buffers are waiting. Does not
    /// advance `wrote`. Err (with `p` back): a write failed (`failed_from` is set).
    fn stage(&mut self, p: Pending) -> Result<(), Pending> {
        if self.pending.len() >= IOV_MAX - 1 && self.commit().is_err() {
            return Err(p);
        }
        if self.pending.is_empty() {
            self.pending_start = self.wrote;
        }
        self.pending.push(p);
        Ok(())
    }

    /// After a successful write of the pending bytes (up to `end`): keeps them for
    /// dispatch where the batch is dispatched inline and they continue the bytes kept so
    /// far; drops them otherwise.
    fn keep_written(&mut self, end: u64) {
        let inline_dispatch = self.reput.is_some() && !self.limits.sync;
        if inline_dispatch && self.written.is_empty() {
            self.written_start = self.pending_start;
            self.written_end = self.pending_start;
        }
        if inline_dispatch && self.written_end == self.pending_start {
            self.written.append(&mut self.pending);
            self.written_end = end;
        } else {
            self.pending.clear();
        }
    }

    /// mmap mode: writes the pending bytes into the active segment with pwritev (see
    /// `MappedFile::write_through` for why not through the mapping). On failure the pending
    /// puts are undone: `wrote` and their queue offsets go back, nothing past `wrote` is
    /// published, and the next put overwrites whatever reached the file.
    fn commit(&mut self) -> Result<(), ()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut bufs: Vec<&[u8]> = self.pending.iter().map(Pending::as_slice).collect();
        let end = self.pending_start + bufs.iter().map(|b| b.len() as u64).sum::<u64>();
        let res = match &self.active {
            Some(a) => {
                // End the write on a page boundary with zeros (the file holds zeros past the
                // log's end anyway, and the next batch overwrites them): a buffered write
                // that ends inside a page whose blocks are written on disk (warmed
                // segments, files written by Java) must first read that page, under the
                // CommitLog tail; a whole-page write needs no read.
                let pad = (end.div_ceil(OS_PAGE_SIZE) * OS_PAGE_SIZE - end) as usize;
                if pad > 0 {
                    bufs.push(&ZERO_PAGE[..pad]);
                }
                let pos = self.pending_start - a.from_offset();
                let written = a.write_through_vectored(pos, &bufs);
                if written.is_ok() && self.limits.sync {
                    // SYNC_FLUSH: the disk starts on the batch's whole pages now, while the
                    // running flush still waits, so the next flush mostly waits for writes
                    // already under way (about +5 % msg/s at 1024 in flight on 2 cores). The
                    // partial last page is left to the next batch or the flush. This runs
                    // with the tail held, on a network core when the batch runs inline:
                    // sync_file_range WRITE only queues the pages, but can wait for room
                    // in a full device queue.
                    let whole_pages_end = (end - a.from_offset()) / OS_PAGE_SIZE * OS_PAGE_SIZE;
                    a.start_writeback(pos / OS_PAGE_SIZE * OS_PAGE_SIZE, whole_pages_end);
                }
                written
            }
            None => unreachable!("pending bytes without an active segment"),
        };
        match res {
            Ok(()) => {
                self.keep_written(end);
                Ok(())
            }
            Err(e) => {
                let mut failed = 0u64;
                for p in self.pending.drain(..).rev() {
                    if let Some((topic, queue_id, base)) = p.undo {
                        failed += 1;
                        if let Some(m) = self.topic_queue_table.get_mut(&topic) {
                            m.insert(queue_id, base);
                        }
                    }
                }
                self.wrote = self.pending_start;
                self.failed_from = Some(self.pending_start);
                self.write_errors += failed.max(1);
                let due = self
                    .last_write_error_log
                    .is_none_or(|t| t.elapsed() >= WRITE_ERROR_LOG_INTERVAL);
                if due {
                    tracing::error!(error = %e, offset = self.wrote, failed_puts = self.write_errors, "CommitLog write failed; puts refused");
                    self.write_errors = 0;
                    self.last_write_error_log = Some(Instant::now());
                }
                Err(())
            }
        }
    }

    /// [`append`](Self::append) with a fence: a panic in the per-put code fails only this
    /// put (SYSTEM_ERROR to its sender), is logged with its cause, and leaves the tail as
    /// it was before the put, so the stage goes on serving every other put.
    fn append_guarded(&mut self, mut req: PutRequest, now: i64) -> PutResult {
        let base = self.next_queue_offset(&req.topic, req.queue_id);
        let before = (self.wrote, self.pending.len());
        match catch_unwind(AssertUnwindSafe(|| self.append(&mut req, now))) {
            Ok(r) => r,
            Err(panic) => {
                let cause = panic_text(panic.as_ref());
                tracing::error!(
                    topic = req.topic,
                    queue_id = req.queue_id,
                    "the append stage panicked on a put ({cause}); the put is refused and the \
                     stage goes on"
                );
                self.wrote = before.0;
                self.pending.truncate(before.1);
                if !req.topic.is_empty() {
                    self.set_next_queue_offset(&req.topic, req.queue_id, base);
                }
                self.shared.refusals.refused(REFUSED_APPEND_PANIC);
                PutResult::failed(PutMessageStatus::UnknownError)
            }
        }
    }

    fn append(&mut self, req: &mut PutRequest, now: i64) -> PutResult {
        #[cfg(any(test, feature = "test-util"))]
        crate::fault::panic_if_injected(&req.topic);
        if self.failed_from.is_some() {
            // A write failed earlier in this batch: the disk refuses writes right now.
            self.write_errors += 1;
            return PutResult::failed(PutMessageStatus::UnknownError);
        }
        let len = req.records.len() as u64;
        if let Err(status) = self.check_put_size(len) {
            return PutResult::failed(status);
        }
        if let Err(status) = self.make_room(len) {
            return PutResult::failed(status);
        }
        let tx_type = req.sys_flag & record::SYSFLAG_TRANSACTION_MASK;
        let uses_queue_offset =
            tx_type == record::TRANSACTION_NOT_TYPE || tx_type == record::TRANSACTION_COMMIT_TYPE;
        let base_queue_offset = if uses_queue_offset {
            self.next_queue_offset(&req.topic, req.queue_id)
        } else {
            0
        };
        let start = self.wrote;
        let queue_offsets = uses_queue_offset.then_some(base_queue_offset);
        let n = patch_records(&mut req.records[..], start, now, queue_offsets);
        if uses_queue_offset {
            self.set_next_queue_offset(&req.topic, req.queue_id, base_queue_offset + n);
        }
        if let Err(status) = self.write_records(req, queue_offsets) {
            return PutResult::failed(status);
        }
        self.wrote += len;
        PutResult {
            status: PutMessageStatus::PutOk,
            wrote_offset: start as i64,
            wrote_bytes: len as i32,
            queue_offset: base_queue_offset,
            msg_num: n as i32,
            store_timestamp_ms: now,
            queued_ms: 0,
        }
    }

    /// SYNC_MASTER: whether a slave is close enough to wait for (upstream 4.x `isSlaveOK`:
    /// connected, and within `haMaxGapNotInSync`); if not, the stored put answers
    /// SLAVE_NOT_AVAILABLE at once.
    fn slave_ok(&self, target: u64, r: &mut PutResult) -> bool {
        let ha = &self.shared.ha;
        if self.shared.config.controller_mode {
            return self.replicas_needed();
        }
        let acked = ha.push_to_slave_max_offset.load(Ordering::Acquire);
        let ok = ha.slaves_connected.load(Ordering::Acquire) > 0
            && target.saturating_sub(acked) < self.shared.config.ha_max_gap_not_in_sync_bytes;
        if !ok {
            r.status = PutMessageStatus::SlaveNotAvailable;
        }
        ok
    }

    /// Controller mode (upstream's auto-switch rule): a put waits for every SyncStateSet
    /// member under `allAckInSyncStateSet`, else for `inSyncReplicas` replicas; needing only
    /// this master, it does not wait. (`minInSyncReplicas` refused it before the append.)
    fn replicas_needed(&self) -> bool {
        let c = &self.shared.config;
        let needed = match c.all_ack_in_sync_state_set {
            true => self.shared.ha.replicas.sync_state_set_size(),
            false => c.in_sync_replicas as usize,
        };
        needed > 1
    }

    /// Slave: writes the master's bytes unchanged at `phy_offset`, rolling segments where
    /// the master's do (same segment size: its BLANK fillers arrive as data). Returns the
    /// new write offset.
    fn append_replica(&mut self, phy_offset: u64, bytes: &[u8]) -> Result<u64, String> {
        if self.failed_from.is_some() {
            return Err("a CommitLog write failed earlier in this batch".into());
        }
        if phy_offset != self.wrote {
            self.restart_empty_log_at(phy_offset)?;
        }
        let file_size = self.shared.log.file_size();
        let mut rest = bytes;
        while !rest.is_empty() {
            let needs_roll = match &self.active {
                None => true,
                Some(a) => self.wrote >= a.from_offset() + file_size,
            };
            if needs_roll {
                self.commit()
                    .map_err(|()| "CommitLog write failed before a roll-over".to_string())?;
                self.roll()?;
            }
            let room = (file_size - self.wrote % file_size) as usize;
            let (piece, tail) = rest.split_at(room.min(rest.len()));
            self.write_replica_piece(piece)?;
            self.wrote += piece.len() as u64;
            rest = tail;
        }
        Ok(self.wrote)
    }

    fn write_replica_piece(&mut self, piece: &[u8]) -> Result<(), String> {
        if self.ring.is_some() {
            self.wait_ring_room_in_batch(piece.len() as u64);
            if let Some(ring) = &self.ring {
                ring.write(self.wrote, piece);
            }
            return Ok(());
        }
        let p = Pending {
            bytes: PendingBytes::Records(BytesMut::from(piece)),
            undo: None,
        };
        self.stage(p)
            .map_err(|_| format!("CommitLog write failed at offset {}", self.wrote))
    }

    /// Slave: an empty log takes the master's first frame at any segment start (a fresh
    /// slave receives from the start of the master's last segment): the empty segment
    /// made at open goes, and the log starts at `offset`. A log with data never moves.
    fn restart_empty_log_at(&mut self, offset: u64) -> Result<(), String> {
        let file_size = self.shared.log.file_size();
        let empty = self.wrote == 0 && self.shared.log.max_offset() == 0 && self.pending.is_empty();
        if !empty {
            return Err(format!(
                "master offset {offset} is not this slave's CommitLog max offset {}",
                self.wrote
            ));
        }
        if !offset.is_multiple_of(file_size) {
            return Err(format!(
                "an empty slave can start only at a segment start; master sent offset {offset}"
            ));
        }
        if let Some(ring) = &self.ring {
            ring.restart_empty_at(offset);
        }
        for f in self.shared.log.remove_files(|f| f.from_offset() < offset) {
            if let Err(e) = f.destroy() {
                tracing::warn!(error = %e, path = %f.path().display(), "could not delete an empty CommitLog segment");
            }
        }
        self.active = None;
        self.wrote = offset;
        self.pending_start = offset;
        self.shared.log.set_flushed_offset(offset);
        tracing::info!(
            offset,
            "empty slave CommitLog starts at the master's offset"
        );
        Ok(())
    }

    /// Refuses a put that could never fit a segment (or, in direct mode, the write ring).
    fn check_put_size(&self, len: u64) -> Result<(), PutMessageStatus> {
        if len + BLANK_RECORD_SIZE as u64 > self.shared.log.file_size() {
            return Err(PutMessageStatus::MessageIllegal);
        }
        if let Some(ring) = &self.ring {
            // The ring discipline can never make room for more than this at once.
            if len > ring.size() - OS_PAGE_SIZE {
                tracing::warn!(
                    bytes = len,
                    ring_bytes = ring.size(),
                    "put larger than the direct write ring (ringmq.directWriteRingSize); refused"
                );
                return Err(PutMessageStatus::MessageIllegal);
            }
        }
        Ok(())
    }

    /// Makes the active segment one that has room for `len` bytes and a BLANK after them:
    /// opens one when there is none or the last is full, and ends a segment without that
    /// room with a BLANK filler and rolls over.
    fn make_room(&mut self, len: u64) -> Result<(), PutMessageStatus> {
        let file_size = self.shared.log.file_size();
        let needs_roll = match &self.active {
            None => true,
            Some(a) => self.wrote >= a.from_offset() + file_size,
        };
        if needs_roll {
            if let Err(e) = self.roll() {
                tracing::error!(error = %e, offset = self.wrote, "no CommitLog segment to append to");
                return Err(PutMessageStatus::CreateMappedFileFailed);
            }
        }
        let pos = self.wrote % file_size;
        if pos + len + BLANK_RECORD_SIZE as u64 <= file_size {
            return Ok(());
        }
        // END_OF_FILE: BLANK filler, then the whole request goes to the next segment.
        self.write_blank(file_size - pos)?;
        // The old segment's bytes go out before the switch.
        if self.commit().is_err() {
            return Err(PutMessageStatus::UnknownError);
        }
        if let Err(e) = self.roll() {
            tracing::error!(error = %e, offset = self.wrote, "CommitLog roll-over failed");
            return Err(PutMessageStatus::CreateMappedFileFailed);
        }
        Ok(())
    }

    /// Fills the `remaining` bytes of the active segment with a BLANK record.
    fn write_blank(&mut self, remaining: u64) -> Result<(), PutMessageStatus> {
        let mut blank = [0u8; BLANK_RECORD_SIZE];
        record::encode_blank(remaining as i32, &mut blank);
        match self.ring.is_some() {
            true => {
                self.wait_ring_room_in_batch(BLANK_RECORD_SIZE as u64);
                if let Some(ring) = &self.ring {
                    ring.write(self.wrote, &blank);
                }
            }
            false => {
                let blank = Pending {
                    bytes: PendingBytes::Blank(blank),
                    undo: None,
                };
                if self.stage(blank).is_err() {
                    return Err(PutMessageStatus::UnknownError);
                }
            }
        }
        self.wrote += remaining;
        Ok(())
    }

    fn next_queue_offset(&self, topic: &str, queue_id: i32) -> i64 {
        self.topic_queue_table
            .get(topic)
            .and_then(|m| m.get(&queue_id))
            .copied()
            .unwrap_or(0)
    }

    fn set_next_queue_offset(&mut self, topic: &str, queue_id: i32, next: i64) {
        match self.topic_queue_table.get_mut(topic) {
            Some(m) => *m.entry(queue_id).or_insert(0) = next,
            None => {
                self.topic_queue_table
                    .entry(topic.to_string())
                    .or_default()
                    .insert(queue_id, next);
            }
        }
    }

    /// Writes the patched records at the write offset: into the write ring (direct) or the
    /// batch's pending bytes (mmap). `base_queue_offset` is what a failed write restores.
    fn write_records(
        &mut self,
        req: &mut PutRequest,
        base_queue_offset: Option<i64>,
    ) -> Result<(), PutMessageStatus> {
        if self.ring.is_some() {
            self.wait_ring_room_in_batch(req.records.len() as u64);
            if let Some(ring) = &self.ring {
                ring.write(self.wrote, &req.records);
            }
            return Ok(());
        }
        let undo =
            base_queue_offset.map(|base| (std::mem::take(&mut req.topic), req.queue_id, base));
        let p = Pending {
            bytes: PendingBytes::Records(std::mem::take(&mut req.records)),
            undo,
        };
        if let Err(p) = self.stage(p) {
            // Earlier pending puts were undone by the failed write; undo this one.
            if let Some((topic, queue_id, base)) = p.undo {
                if let Some(m) = self.topic_queue_table.get_mut(&topic) {
                    m.insert(queue_id, base);
                }
            }
            return Err(PutMessageStatus::UnknownError);
        }
        Ok(())
    }
}

/// Patches PHYSICALOFFSET (from `start`), STORETIMESTAMP and QUEUEOFFSET (consecutive from
/// `base_queue_offset`, 0 for records that take none) into a put's records; returns how
/// many records it holds.
fn patch_records(buf: &mut [u8], start: u64, now: i64, base_queue_offset: Option<i64>) -> i64 {
    let mut off = 0usize;
    let mut n = 0i64;
    while off + record::MIN_HEADER_SIZE <= buf.len() {
        let size = record::read_total_size(&buf[off..]).unwrap_or(0) as usize;
        if size < record::MIN_HEADER_SIZE || off + size > buf.len() {
            break; // validated by `MessageStore::put`; defensive stop
        }
        let r = &mut buf[off..off + size];
        record::patch_physical_offset(r, (start + off as u64) as i64);
        record::patch_store_timestamp(r, now);
        record::patch_queue_offset(r, base_queue_offset.map_or(0, |base| base + n));
        off += size;
        n += 1;
    }
    n
}

/// Checks a request on the producer's thread before it is queued, so bad input never
/// reaches the serialization point. Returns the failure status, if any.
pub(crate) fn validate(
    req: &PutRequest,
    max_message_size: usize,
    file_size: u64,
) -> Result<(), PutMessageStatus> {
    let tlen = req.topic.len();
    if tlen > 255 || (tlen > 127 && !req.topic.starts_with("%RETRY%")) || tlen == 0 {
        return Err(PutMessageStatus::MessageIllegal);
    }
    if req.records.is_empty()
        || req.record_count == 0
        || req.records.len() as u64 + BLANK_RECORD_SIZE as u64 > file_size
    {
        return Err(PutMessageStatus::MessageIllegal);
    }
    let mut off = 0usize;
    let mut n = 0u32;
    while off < req.records.len() {
        let rec = match record::decode_record(&req.records[off..], false) {
            Ok(record::Decoded::Message(r)) => r,
            Ok(record::Decoded::Blank { .. }) => return Err(PutMessageStatus::MessageIllegal),
            Err(record::RecordError::PropertiesTooLong { .. }) => {
                return Err(PutMessageStatus::PropertiesSizeExceeded)
            }
            Err(_) => return Err(PutMessageStatus::MessageIllegal),
        };
        if rec.body.len() > max_message_size
            || rec.total_size > max_message_size + 64 * 1024
            || rec.topic_bytes != req.topic.as_bytes()
            || rec.queue_id != req.queue_id
        {
            return Err(PutMessageStatus::MessageIllegal);
        }
        off += rec.total_size;
        n += 1;
    }
    if n != req.record_count {
        return Err(PutMessageStatus::MessageIllegal);
    }
    if req.record_count > 1 && req.sys_flag & record::SYSFLAG_TRANSACTION_MASK != 0 {
        // Transactional batches are refused upstream too.
        return Err(PutMessageStatus::MessageIllegal);
    }
    Ok(())
}

/// Topic → queue id → next queue offset, looked up once per put on the append stage.
pub(crate) type QueueOffsetTable = HashMap<String, HashMap<i32, i64, FastHash>, FastHash>;

/// The next queue offset of every ConsumeQueue: where the append stage continues after
/// recovery, and after a slave becomes master.
pub(crate) fn queue_offset_table(
    cqs: &crate::consume_queue::ConsumeQueueTable,
) -> QueueOffsetTable {
    let mut table = QueueOffsetTable::default();
    for cq in cqs.all() {
        table
            .entry(cq.topic().to_string())
            .or_default()
            .insert(cq.queue_id(), cq.max_offset());
    }
    table
}
