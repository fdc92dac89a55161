//! The append stage: the single thread that owns the CommitLog tail (RocketMQ's
//! `putMessageLock` critical section). It drains PutRequests from producers' threads over a
//! bounded queue in batches, assigns queue offsets from the topicQueueTable it owns,
//! patches PHYSICALOFFSET / QUEUEOFFSET / STORETIMESTAMP into the pre-encoded records,
//! copies them into the active segment (mmap: one pwritev per batch into the page cache the
//! read-only mapping shares) or the write ring (direct), rolls segments with a BLANK filler,
//! publishes the new max offset, and hands completions to the flush stage (SYNC_FLUSH) or
//! completes them itself (ASYNC_FLUSH).

use crate::commit_log::AllocatorHandle;
use crate::config::FlushDiskType;
use crate::direct::DirectRing;
use crate::flush::{FlushMsg, Waiter};
use crate::mapped_file::{MappedFile, IOV_MAX, OS_PAGE_SIZE};
use crate::store::Shared;
use crate::types::{PutMessageStatus, PutRequest, PutResult};
use crate::util::now_ms;
use bytes::BytesMut;
use ringmq_remoting::message::record::{self, BLANK_RECORD_SIZE};
use std::collections::HashMap;
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Completion of a put, run on a stage thread.
pub type PutCallback = Box<dyn FnOnce(PutResult) + Send>;

/// Messages to the append stage.
pub(crate) enum AppendMsg {
    Put {
        req: PutRequest,
        done: PutCallback,
    },
    /// Forget a topic's queue offsets (topic deleted).
    DeleteTopic(String),
    /// Finish queued work, stop; the flush stage is told to stop after a final flush.
    Shutdown(SyncSender<()>),
}

/// The append stage's state; lives on its thread.
pub(crate) struct AppendStage {
    shared: Arc<Shared>,
    rx: Receiver<AppendMsg>,
    flush_tx: SyncSender<FlushMsg>,
    allocator: AllocatorHandle,
    active: Option<Arc<MappedFile>>,
    /// Global write offset (the next record's physical offset).
    wrote: u64,
    /// `topic -> queueId -> next queue offset`.
    topic_queue_table: HashMap<String, HashMap<i32, i64>>,
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
    /// Set when a write failed during this batch: puts of this batch at or past this offset
    /// failed, and the rest of the batch is refused.
    failed_from: Option<u64>,
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

/// Least time between two log lines about failed CommitLog writes.
const WRITE_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

impl AppendStage {
    pub fn new(
        shared: Arc<Shared>,
        rx: Receiver<AppendMsg>,
        flush_tx: SyncSender<FlushMsg>,
        allocator: AllocatorHandle,
        topic_queue_table: HashMap<String, HashMap<i32, i64>>,
        ring: Option<Arc<DirectRing>>,
    ) -> Self {
        let log = &shared.log;
        let wrote = log.max_offset();
        let active = log.last_file().filter(|f| f.contains(wrote));
        AppendStage {
            flush_tx,
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
            failed_from: None,
            rx,
            shared,
        }
    }

    pub fn run(mut self) {
        crate::util::pin_current_thread(self.shared.config.append_core, "append");
        let max_batch = self.shared.config.append_batch_max_requests.max(1);
        let max_batch_bytes = self.shared.config.append_batch_max_bytes.max(1);
        let sync = self.shared.config.flush_disk_type == FlushDiskType::SyncFlush;
        let timeout = Duration::from_millis(self.shared.config.sync_flush_timeout_ms);
        if let Some(ring) = &self.ring {
            ring.set_writer();
        }
        // Prepare the next segment ahead of need.
        if let Some(a) = &self.active {
            self.allocator.prepare(a.from_offset() + a.size());
        }
        let mut batch: Vec<AppendMsg> = Vec::with_capacity(max_batch);
        let mut done_now: Vec<(PutCallback, PutResult)> = Vec::with_capacity(max_batch);
        let mut waiters: Vec<Waiter> = Vec::with_capacity(max_batch);
        let mut perf = crate::perf_event::BatchSampler::open(
            "append",
            self.shared.config.append_perf_sample_every,
            &self.shared.metrics.append_perf,
        );
        loop {
            match self.rx.recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
            let mut batch_bytes = msg_bytes(&batch[0]);
            while batch.len() < max_batch && batch_bytes < max_batch_bytes {
                match self.rx.try_recv() {
                    Ok(m) => {
                        batch_bytes += msg_bytes(&m);
                        batch.push(m);
                    }
                    Err(_) => break,
                }
            }
            // Wait for write-ring room before the batch is timed as lock hold: the wait
            // is the disk's pace, not work on the CommitLog tail.
            self.wait_ring_room(batch_bytes as u64);
            perf.begin();
            let t0 = Instant::now();
            let now = now_ms().max(self.last_store_timestamp_ms);
            self.last_store_timestamp_ms = now;
            self.shared
                .begin_time_in_lock_ms
                .store(now, std::sync::atomic::Ordering::Release);
            let mut shutdown = None;
            for msg in batch.drain(..) {
                match msg {
                    AppendMsg::Put { req, done } => {
                        let wait = req.wait_store_msg_ok;
                        let r = self.append(req, now);
                        if sync && wait && r.status == PutMessageStatus::PutOk {
                            waiters.push(Waiter {
                                target: (r.wrote_offset + i64::from(r.wrote_bytes)) as u64,
                                deadline: t0 + timeout,
                                result: r,
                                done,
                            });
                        } else {
                            done_now.push((done, r));
                        }
                    }
                    AppendMsg::DeleteTopic(t) => {
                        self.topic_queue_table.remove(&t);
                    }
                    AppendMsg::Shutdown(tx) => shutdown = Some(tx),
                }
            }
            let _ = self.commit();
            if let Some(from) = self.failed_from.take() {
                // The batch's write failed from `from` on: those puts are not stored.
                let failed = |r: &PutResult| {
                    r.status == PutMessageStatus::PutOk && r.wrote_offset as u64 >= from
                };
                for (_, r) in done_now.iter_mut() {
                    if failed(r) {
                        *r = PutResult::failed(PutMessageStatus::UnknownError);
                    }
                }
                let mut i = 0;
                while i < waiters.len() {
                    if failed(&waiters[i].result) {
                        let w = waiters.swap_remove(i);
                        done_now.push((w.done, PutResult::failed(PutMessageStatus::UnknownError)));
                    } else {
                        i += 1;
                    }
                }
                waiters.sort_by_key(|w| w.target);
            }
            let (mut msgs, mut bytes) = (0u64, 0u64);
            for r in done_now
                .iter()
                .map(|(_, r)| r)
                .chain(waiters.iter().map(|w| &w.result))
                .filter(|r| r.status == PutMessageStatus::PutOk)
            {
                msgs += r.msg_num as u64;
                bytes += r.wrote_bytes as u64;
            }
            self.publish(now);
            self.shared
                .begin_time_in_lock_ms
                .store(0, std::sync::atomic::Ordering::Release);
            let held_us = t0.elapsed().as_micros() as u64;
            perf.end(&self.shared.metrics.append_perf);
            let _ = self.lock_hold_us.record(held_us.max(1));
            self.shared
                .metrics
                .record_append_batch(msgs, bytes, &mut self.lock_hold_us);
            if held_us > 500_000 {
                tracing::warn!(
                    held_us,
                    "append batch held the CommitLog tail for over 500 ms"
                );
            }
            if !waiters.is_empty() {
                let w = std::mem::replace(&mut waiters, Vec::with_capacity(max_batch));
                if let Err(e) = self.flush_tx.send(FlushMsg::Waiters(w)) {
                    // Flush stage gone (shutdown race): complete as stored-but-unconfirmed.
                    if let FlushMsg::Waiters(w) = e.0 {
                        for w in w {
                            let mut r = w.result;
                            r.status = PutMessageStatus::FlushDiskTimeout;
                            (w.done)(r);
                        }
                    }
                }
            } else if sync {
                // WAIT=false puts: the bytes still get flushed soon.
                let _ = self.flush_tx.try_send(FlushMsg::Wake);
            }
            if let Some(ring) = &self.ring {
                // The direct flusher writes appended bytes as they come.
                ring.wake_flusher();
            }
            for (done, r) in done_now.drain(..) {
                done(r);
            }
            if !sync {
                self.shared.wake_reput();
            }
            if let Some(tx) = shutdown {
                let _ = self.flush_tx.send(FlushMsg::Shutdown(tx));
                break;
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

    /// Waits (direct mode) until the write ring has room for `len` more bytes (at most
    /// half the ring is asked for at once: a batch larger than that waits again per put).
    /// The flusher frees room as its writes complete and unparks this thread.
    fn wait_ring_room(&self, len: u64) {
        let Some(ring) = &self.ring else { return };
        let end = self.wrote + len.min(ring.size() / 2);
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

    /// mmap mode: writes the pending bytes into the active segment with pwritev (see
    /// `MappedFile::write_through` for why not through the mapping). On failure the pending
    /// puts are undone: `wrote` and their queue offsets go back, nothing past `wrote` is
    /// published, and the next put overwrites whatever reached the file.
    fn commit(&mut self) -> Result<(), ()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let res = match &self.active {
            Some(a) => {
                let mut bufs: Vec<&[u8]> = self.pending.iter().map(Pending::as_slice).collect();
                // End the write on a page boundary with zeros (the file holds zeros past the
                // log's end anyway, and the next batch overwrites them): a buffered write
                // that ends inside a page whose blocks are written on disk (warmed
                // segments, files written by Java) must first read that page, under the
                // CommitLog tail; a whole-page write needs no read.
                let end: u64 =
                    self.pending_start + bufs.iter().map(|b| b.len() as u64).sum::<u64>();
                let pad = (end.div_ceil(OS_PAGE_SIZE) * OS_PAGE_SIZE - end) as usize;
                if pad > 0 {
                    bufs.push(&ZERO_PAGE[..pad]);
                }
                a.write_through_vectored(self.pending_start - a.from_offset(), &bufs)
            }
            None => unreachable!("pending bytes without an active segment"),
        };
        match res {
            Ok(()) => {
                self.pending.clear();
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

    fn append(&mut self, mut req: PutRequest, now: i64) -> PutResult {
        if self.failed_from.is_some() {
            // A write failed earlier in this batch: the disk refuses writes right now.
            self.write_errors += 1;
            return PutResult::failed(PutMessageStatus::UnknownError);
        }
        let file_size = self.shared.log.file_size();
        let len = req.records.len() as u64;
        if len + BLANK_RECORD_SIZE as u64 > file_size {
            return PutResult::failed(PutMessageStatus::MessageIllegal);
        }
        if let Some(ring) = &self.ring {
            // The ring discipline can never make room for more than this at once.
            if len > ring.size() - OS_PAGE_SIZE {
                tracing::warn!(
                    bytes = len,
                    ring_bytes = ring.size(),
                    "put larger than the direct write ring (ringmq.directWriteRingSize); refused"
                );
                return PutResult::failed(PutMessageStatus::MessageIllegal);
            }
        }
        let needs_roll = match &self.active {
            None => true,
            Some(a) => self.wrote >= a.from_offset() + file_size,
        };
        if needs_roll {
            if let Err(e) = self.roll() {
                tracing::error!(error = %e, offset = self.wrote, "no CommitLog segment to append to");
                return PutResult::failed(PutMessageStatus::CreateMappedFileFailed);
            }
        }
        let pos = self.wrote % file_size;
        if pos + len + BLANK_RECORD_SIZE as u64 > file_size {
            // END_OF_FILE: BLANK filler, then the whole request goes to the next segment.
            let remaining = file_size - pos;
            let mut blank = [0u8; BLANK_RECORD_SIZE];
            record::encode_blank(remaining as i32, &mut blank);
            match &self.ring {
                Some(ring) => {
                    self.wait_ring_room(BLANK_RECORD_SIZE as u64);
                    ring.write(self.wrote, &blank);
                }
                None => {
                    let blank = Pending {
                        bytes: PendingBytes::Blank(blank),
                        undo: None,
                    };
                    if self.stage(blank).is_err() {
                        return PutResult::failed(PutMessageStatus::UnknownError);
                    }
                }
            }
            self.wrote += remaining;
            // The old segment's bytes go out before the switch.
            if self.commit().is_err() {
                return PutResult::failed(PutMessageStatus::UnknownError);
            }
            if let Err(e) = self.roll() {
                tracing::error!(error = %e, offset = self.wrote, "CommitLog roll-over failed");
                return PutResult::failed(PutMessageStatus::CreateMappedFileFailed);
            }
        }
        let tx_type = req.sys_flag & record::SYSFLAG_TRANSACTION_MASK;
        let uses_queue_offset =
            tx_type == record::TRANSACTION_NOT_TYPE || tx_type == record::TRANSACTION_COMMIT_TYPE;
        let base_queue_offset = if uses_queue_offset {
            match self
                .topic_queue_table
                .get(req.topic.as_str())
                .and_then(|m| m.get(&req.queue_id))
            {
                Some(v) => *v,
                None => 0,
            }
        } else {
            0
        };
        let start = self.wrote;
        let buf = &mut req.records[..];
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
            record::patch_queue_offset(
                r,
                if uses_queue_offset {
                    base_queue_offset + n
                } else {
                    0
                },
            );
            off += size;
            n += 1;
        }
        if uses_queue_offset {
            match self.topic_queue_table.get_mut(req.topic.as_str()) {
                Some(m) => *m.entry(req.queue_id).or_insert(0) = base_queue_offset + n,
                None => {
                    self.topic_queue_table
                        .entry(req.topic.clone())
                        .or_default()
                        .insert(req.queue_id, base_queue_offset + n);
                }
            }
        }
        match &self.ring {
            Some(ring) => {
                self.wait_ring_room(len);
                ring.write(self.wrote, &req.records);
            }
            None => {
                let undo = uses_queue_offset.then(|| {
                    (
                        std::mem::take(&mut req.topic),
                        req.queue_id,
                        base_queue_offset,
                    )
                });
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
                    return PutResult::failed(PutMessageStatus::UnknownError);
                }
            }
        }
        self.wrote += len;
        PutResult {
            status: PutMessageStatus::PutOk,
            wrote_offset: start as i64,
            wrote_bytes: len as i32,
            queue_offset: base_queue_offset,
            msg_num: n as i32,
            store_timestamp_ms: now,
        }
    }
}

fn msg_bytes(m: &AppendMsg) -> usize {
    match m {
        AppendMsg::Put { req, .. } => req.records.len(),
        _ => 0,
    }
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
