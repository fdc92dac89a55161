//! The reput stage: reads the CommitLog from the dispatch offset up to the confirm offset
//! (flushed offset under SYNC_FLUSH, max offset under ASYNC_FLUSH), parses each record's
//! header and properties, writes the ConsumeQueue unit and IndexFile entries, and notifies
//! arrival listeners (long polling). The same `Dispatcher` replays records during recovery.
//! A record whose ConsumeQueue write fails is retried with back-off from the same offset
//! until it succeeds; an index write failure leaves records unindexed until it works again.
//! Where the append stage shares the reput stage's core, it runs the pass for its own
//! ASYNC_FLUSH batches while the reput thread idles (`dispatch_here_or_wake`); the reput
//! thread keeps every retry, pause and catch-up.

use crate::consume_queue::ConsumeQueue;
use crate::error::StoreError;
use crate::shared::{ArrivalListener, Shared, FLAG_LOGIC_QUEUE_ERROR};
use crate::types::ArrivalEvent;
use crate::util::{DispatchProperties, FastHash};
use ringmq_remoting::message::record::{self, Decoded, StoredRecord, BLANK_MAGIC};
use ringmq_sync::LockExt;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Delay topic whose tagsCode is the delivery time.
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";
/// Default `messageDelayLevel` in ms (levels 1..=18).
const DELAY_LEVEL_MS: [i64; 18] = [
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000,
    480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
];
/// Longest the reput stage sleeps when idle; appends and flushes wake it sooner.
const REPUT_IDLE_PARK_MS: u64 = 10;
/// Most bytes the reput stage reads and parses at once (the reput offset is published after
/// each chunk, which bounds the lag `dispatch_behind_bytes` reports while catching up).
const REPUT_CHUNK_BYTES: u64 = 1024 * 1024;
/// How often a failed index write is tried again (records in between are not indexed).
pub(crate) const INDEX_RETRY_INTERVAL_MS: u64 = 1000;
/// First and longest pause before dispatching a record whose ConsumeQueue write failed
/// again (doubling in between).
const DISPATCH_RETRY_MIN_MS: u64 = 10;
const DISPATCH_RETRY_MAX_MS: u64 = 1000;

/// tagsCode of a record per `store.md` §7.1.
pub fn record_tags_code(
    topic: &str,
    props: &DispatchProperties<'_>,
    store_timestamp_ms: i64,
) -> i64 {
    if topic == SCHEDULE_TOPIC {
        if let Some(level) = props.delay.and_then(|v| v.parse::<usize>().ok()) {
            if level > 0 {
                return store_timestamp_ms + DELAY_LEVEL_MS[level.min(18) - 1];
            }
        }
        return store_timestamp_ms + 1000;
    }
    ringmq_remoting::message::tags::tags_code(props.tags)
}

/// Builds ConsumeQueue and index entries from records; owned by the reput thread (and by
/// recovery before it).
pub(crate) struct Dispatcher {
    shared: Arc<Shared>,
    cache: HashMap<String, HashMap<i32, Arc<ConsumeQueue>, FastHash>, FastHash>,
    generation: u64,
    /// Set while the index cannot be written: when to try it again.
    index_retry_at: Option<Instant>,
    /// Records left out of the index since it stopped accepting entries.
    index_skipped_records: u64,
}

impl Dispatcher {
    pub fn new(shared: Arc<Shared>) -> Self {
        let generation = shared.topic_generation.load(Ordering::Acquire);
        Dispatcher {
            shared,
            cache: HashMap::default(),
            generation,
            index_retry_at: None,
            index_skipped_records: 0,
        }
    }

    /// Adds the record's keys to the index. The index only serves queries by key, so a
    /// failure (typically no space for a new index file) never stops dispatch or puts:
    /// records are left out of the index and the write is tried again every
    /// [`INDEX_RETRY_INTERVAL_MS`] until it works.
    fn build_index(&mut self, topic: &str, rec: &StoredRecord<'_>, props: &DispatchProperties<'_>) {
        let Some(index) = &self.shared.index else {
            return;
        };
        // The clock is read only while a failed index write waits for its retry.
        if self.index_retry_at.is_some_and(|at| Instant::now() < at) {
            self.index_skipped_records += 1;
            return;
        }
        // The lock is held until availability is published, so a reader that finds the
        // new entries also sees the index as available.
        let mut idx = index.lock_unpoisoned();
        let built = idx.build_index(
            topic,
            props.uniq_key,
            props.keys,
            rec.physical_offset,
            rec.store_timestamp_ms,
        );
        match built {
            Ok(()) if self.index_retry_at.take().is_some() => {
                self.shared.index_available.store(true, Ordering::Release);
                tracing::info!(
                    skipped_records = self.index_skipped_records,
                    "the message index accepts entries again; records dispatched meanwhile \
                     cannot be queried by key"
                );
                self.index_skipped_records = 0;
            }
            Ok(()) => {}
            Err(e) => {
                if self.index_retry_at.is_none() {
                    self.shared.index_available.store(false, Ordering::Release);
                    tracing::error!(
                        error = %e,
                        retry_ms = INDEX_RETRY_INTERVAL_MS,
                        "building the message index failed; messages are still stored and \
                         consumable, but not indexed by key until the index can be written"
                    );
                }
                self.index_skipped_records += 1;
                self.index_retry_at =
                    Some(Instant::now() + Duration::from_millis(INDEX_RETRY_INTERVAL_MS));
            }
        }
    }

    fn queue(&mut self, topic: &str, queue_id: i32) -> Arc<ConsumeQueue> {
        let g = self.shared.topic_generation.load(Ordering::Acquire);
        if g != self.generation {
            self.cache.clear();
            self.generation = g;
        }
        if let Some(q) = self.cache.get(topic).and_then(|m| m.get(&queue_id)) {
            return Arc::clone(q);
        }
        let q = self.shared.cqs.find_or_create(topic, queue_id);
        self.cache
            .entry(topic.to_string())
            .or_default()
            .insert(queue_id, Arc::clone(&q));
        q
    }

    /// Dispatches one record. Returns the arrival event data when a unit was added.
    pub fn dispatch(
        &mut self,
        rec: &StoredRecord<'_>,
        listeners: &[ArrivalListener],
    ) -> Result<(), StoreError> {
        let topic = match rec.topic() {
            Ok(t) => t,
            Err(_) => {
                tracing::warn!(
                    offset = rec.physical_offset,
                    "skipping record with a non-UTF-8 topic"
                );
                return Ok(());
            }
        };
        #[cfg(any(test, feature = "test-util"))]
        crate::fault::dispatch_panic_if_injected(topic);
        let tx = rec.transaction_type();
        let props = DispatchProperties::parse(rec.properties);
        let tags = record_tags_code(topic, &props, rec.store_timestamp_ms);
        let mut added = false;
        if tx == record::TRANSACTION_NOT_TYPE || tx == record::TRANSACTION_COMMIT_TYPE {
            let cq = self.queue(topic, rec.queue_id);
            // One attempt: the reput loop retries the same record with back-off (and
            // recovery fails the open), so a failure never moves the dispatch position.
            added = cq.put_unit(
                rec.physical_offset,
                rec.total_size as i32,
                tags,
                rec.queue_offset,
            )?;
            // Hundreds of records share each millisecond: a load skips the atomic
            // read-modify-write for all but the first of them.
            let logics_ts = &self.shared.checkpoint_logics_ts;
            if rec.store_timestamp_ms > logics_ts.load(Ordering::Acquire) {
                logics_ts.fetch_max(rec.store_timestamp_ms, Ordering::AcqRel);
            }
        }
        if tx != record::TRANSACTION_ROLLBACK_TYPE {
            self.build_index(topic, rec, &props);
        }
        if added && !listeners.is_empty() {
            let ev = ArrivalEvent {
                topic,
                queue_id: rec.queue_id,
                next_queue_offset: rec.queue_offset + 1,
                tags_code: tags,
                store_timestamp_ms: rec.store_timestamp_ms,
                properties: rec.properties,
            };
            for l in listeners {
                l(&ev);
            }
        }
        Ok(())
    }
}

/// Outcome of dispatching the records of one chunk.
enum Chunk {
    /// `records` whole records (`bytes` bytes) dispatched; the rest of the chunk, if any,
    /// is the start of a record that did not fit.
    Consumed { bytes: u64, records: u32 },
    /// After `bytes` bytes (`records` records) the segment ends: a BLANK filler, or a size
    /// that cannot be a record. Dispatch continues at the next segment.
    SkipSegment { bytes: u64, records: u32 },
    /// The chunk's first record is `0` bytes long, more than the chunk holds.
    NeedBytes(usize),
    /// After `bytes` bytes (`records` records) a record could not be dispatched; it is
    /// dispatched again from there after a pause.
    Failed {
        bytes: u64,
        records: u32,
        error: StoreError,
    },
}

/// Dispatches the whole records of `chunk`, the bytes at global `start` (inside the segment
/// ending at `seg_end`).
fn dispatch_chunk(
    shared: &Shared,
    dispatcher: &mut Dispatcher,
    listeners: &[ArrivalListener],
    start: u64,
    seg_end: u64,
    chunk: &[u8],
) -> Chunk {
    let mut pos = 0usize;
    let mut records = 0u32;
    while pos + record::BLANK_RECORD_SIZE <= chunk.len() {
        // Checked per record: listeners run on this thread and may be slow, and a shutdown
        // that gave up waiting must not wait for a whole chunk of them.
        if records > 0 && shared.reput_may_exit.load(Ordering::Acquire) {
            break;
        }
        let head = &chunk[pos..];
        let offset = start + pos as u64;
        if record::read_magic(head) == Some(BLANK_MAGIC) {
            return Chunk::SkipSegment {
                bytes: pos as u64,
                records,
            };
        }
        let size = record::read_total_size(head).unwrap_or(0);
        if size <= 0 || size as u64 > seg_end - offset {
            tracing::error!(
                offset,
                size,
                "[BUG] unparseable record size; skipping to the next segment"
            );
            return Chunk::SkipSegment {
                bytes: pos as u64,
                records,
            };
        }
        let size = size as usize;
        if pos + size > chunk.len() {
            if pos == 0 {
                return Chunk::NeedBytes(size);
            }
            break;
        }
        match record::decode_record(&chunk[pos..pos + size], false) {
            Ok(Decoded::Message(rec)) => {
                if let Err(error) = dispatcher.dispatch(&rec, listeners) {
                    return Chunk::Failed {
                        bytes: pos as u64,
                        records,
                        error,
                    };
                }
            }
            Ok(Decoded::Blank { .. }) => {}
            Err(e) => {
                tracing::error!(error = %e, offset, "[BUG] undecodable record; skipping it")
            }
        }
        pos += size;
        records += 1;
    }
    Chunk::Consumed {
        bytes: pos as u64,
        records,
    }
}

/// The reput stage's state, shared by the reput thread and, where the core map puts the
/// two stages on one core, the append stage (see [`dispatch_here_or_wake`]).
pub(crate) type ReputHandle = Arc<Mutex<ReputStage>>;

/// The reput stage positioned at `from`, not yet running.
pub(crate) fn new_stage(shared: Arc<Shared>, dispatcher: Dispatcher, from: u64) -> ReputHandle {
    Arc::new(Mutex::new(ReputStage {
        shared,
        dispatcher,
        offset: from,
        scratch: Vec::new(),
        stall: None,
    }))
}

/// Runs the reput loop until shutdown. Records are read a chunk (up to
/// [`REPUT_CHUNK_BYTES`]) at a time and parsed in place: one read per chunk instead of two
/// per record, and in direct mode one copy from the write ring (or one large disk read
/// once the chunk has left the ring) instead of page faults through the mapping. After a
/// shutdown gave up waiting for dispatch to catch up (`reput_may_exit`), the loop stops
/// within one chunk however far behind it is, so shutdown stays bounded; the next start
/// redispatches the rest.
pub(crate) fn run(handle: ReputHandle) {
    let shared = Arc::clone(&handle.lock_unpoisoned().shared);
    crate::util::pin_current_thread(shared.config.reput_core, "reput");
    handle.lock_unpoisoned().publish();
    // Shutdown sets this after appends stopped and dispatch caught up (or gave up).
    while !shared.reput_may_exit.load(Ordering::Acquire) {
        // Bound first: the stage must not stay held while this thread parks or pauses.
        let pass = fenced_pass(&mut handle.lock_unpoisoned(), Pause::Sleep);
        match pass {
            Ok(Pass::Exit) => break,
            Ok(Pass::Stalled) => continue,
            Ok(Pass::Done { records: 0 }) => {
                std::thread::park_timeout(Duration::from_millis(REPUT_IDLE_PARK_MS))
            }
            Ok(Pass::Done { .. }) => {}
            Err(cause) => {
                tracing::error!(
                    cause,
                    "dispatch panicked; retrying from the same record in {DISPATCH_RETRY_MAX_MS} ms"
                );
                pause_unless_exiting(&shared, Duration::from_millis(DISPATCH_RETRY_MAX_MS));
            }
        }
    }
    handle.lock_unpoisoned().publish();
}

/// One pass with the stage held, publishing the position it reached. A panic in it (a
/// defect in per-record code) is caught and returned as its message: the position stays
/// at the record that panicked, which is dispatched again (units already written are
/// skipped), and counts as a stall until it is, so only the reput thread retries it.
fn fenced_pass(stage: &mut ReputStage, pause: Pause) -> Result<Pass, String> {
    fenced(stage, |stage| stage.pass(pause))
}

/// Runs `work` on the held stage as [`fenced_pass`] describes.
fn fenced(
    stage: &mut ReputStage,
    work: impl FnOnce(&mut ReputStage) -> Pass,
) -> Result<Pass, String> {
    // The caller's guard outlives the unwind, so a caught panic does not poison the stage.
    let pass = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(stage)));
    stage.publish();
    pass.map_err(|panic| {
        let offset = stage.offset;
        stage
            .stall
            .get_or_insert_with(|| DispatchStall::new(offset));
        crate::util::panic_text(panic.as_ref()).to_string()
    })
}

/// Dispatches what the append stage just published on the calling (append) thread when
/// the reput thread is idle and no record is stalled, instead of waking the reput thread:
/// on a host where both stages share a core, that hand-off was a context switch per batch
/// (most of the reput stage's CPU at 10k msg/s on 2 cores). `written` are the bytes the
/// batch wrote from global offset `written_from`, laid end to end: records are decoded
/// from them while they are still in this core's cache, and whatever they do not cover
/// is read from the log as usual. Never blocks: when the reput thread holds the stage,
/// or dispatch fails or panics here, the reput thread is woken and takes over with its
/// usual retries.
pub(crate) fn dispatch_here_or_wake<'a>(
    handle: &ReputHandle,
    shared: &Shared,
    written_from: u64,
    written: impl Iterator<Item = &'a [u8]>,
) {
    let mut stage = match handle.try_lock() {
        Ok(stage) if stage.stall.is_none() => stage,
        _ => {
            shared.wake_reput();
            return;
        }
    };
    let pass = fenced(&mut stage, |stage| {
        match stage.dispatch_written(written_from, written) {
            Some(stalled) => stalled,
            None => stage.pass(Pause::HandOver),
        }
    });
    drop(stage);
    match pass {
        Ok(Pass::Done { .. }) => {}
        Ok(Pass::Stalled | Pass::Exit) => shared.wake_reput(),
        Err(cause) => {
            tracing::error!(
                cause,
                "dispatch on the append thread panicked; the reput thread retries the record"
            );
            shared.wake_reput();
        }
    }
}

/// What a pass does when a record cannot be dispatched.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pause {
    /// Sleep the back-off on this thread (the reput thread).
    Sleep,
    /// Note the failure and return at once: the append stage must not sleep, the reput
    /// thread retries.
    HandOver,
}

/// The reput stage's state; behind [`ReputHandle`].
pub(crate) struct ReputStage {
    shared: Arc<Shared>,
    dispatcher: Dispatcher,
    /// The dispatch position (published as `Shared::reput_offset`).
    offset: u64,
    /// Chunk buffer for reads that cannot borrow the log's memory.
    scratch: Vec<u8>,
    stall: Option<DispatchStall>,
}

/// How one pass over the confirmed bytes ended.
enum Pass {
    /// Dispatched `records` records and caught up, or stopped at a record not yet wholly
    /// confirmed.
    Done { records: u32 },
    /// A record could not be dispatched; the pass was cut short after a pause.
    Stalled,
    /// Shutdown lets the stage exit.
    Exit,
}

/// How one chunk ended.
enum Step {
    /// The position moved without dispatching (below the log's min, or a segment's end).
    Moved,
    /// `records` records dispatched; the pass goes on.
    Dispatched(u32),
    /// Nothing more to dispatch until more bytes are confirmed.
    Wait,
    /// A record could not be dispatched (after the pause).
    Stalled,
}

impl ReputStage {
    fn may_exit(&self) -> bool {
        self.shared.reput_may_exit.load(Ordering::Acquire)
    }

    fn publish(&self) {
        self.shared
            .reput_offset
            .store(self.offset, Ordering::Release);
    }

    /// Dispatches the records of `written` (bytes laid end to end from global offset
    /// `from`) while they continue the dispatch position and are confirmed. Stops at the
    /// first buffer that does not, or that does not dispatch whole (a BLANK filler, or a
    /// slave's replicated piece that ends inside a record); the pass that follows reads on
    /// from the log. A record that fails is handled as the pass would: the stage stalls
    /// there (returned as `Some(Pass::Stalled)`) and the reput thread retries it.
    fn dispatch_written<'a>(
        &mut self,
        from: u64,
        written: impl Iterator<Item = &'a [u8]>,
    ) -> Option<Pass> {
        if self.offset != from {
            return None;
        }
        let confirm = self.shared.confirm_offset();
        let listeners = self.shared.listeners_snapshot();
        for buf in written {
            let end = self.offset + buf.len() as u64;
            if end > confirm || self.may_exit() {
                break;
            }
            let seg_end = self.shared.log.roll_next_file(self.offset);
            let chunk = dispatch_chunk(
                &self.shared,
                &mut self.dispatcher,
                &listeners,
                self.offset,
                seg_end,
                buf,
            );
            let (bytes, records, whole) = match chunk {
                Chunk::Consumed { bytes, records } => (bytes, records, bytes == buf.len() as u64),
                Chunk::Failed {
                    bytes,
                    records,
                    error,
                } => {
                    self.stalled(bytes, records, &error, Pause::HandOver);
                    return Some(Pass::Stalled);
                }
                // The pass rolls past the BLANK filler, reading from the log.
                Chunk::SkipSegment { bytes, records } => (bytes, records, false),
                Chunk::NeedBytes(_) => (0, 0, false),
            };
            self.note_progress(records);
            self.offset += bytes;
            if !whole {
                break;
            }
        }
        // Not published here: the pass that follows runs under `fenced`, which publishes
        // the position once it ends.
        None
    }

    /// Dispatches chunk after chunk up to the confirm offset.
    fn pass(&mut self, pause: Pause) -> Pass {
        let confirm = self.shared.confirm_offset();
        let listeners = self.shared.listeners_snapshot();
        let mut records = 0u32;
        while self.offset < confirm {
            if self.may_exit() {
                return Pass::Exit;
            }
            match self.next_chunk(confirm, &listeners, pause) {
                Step::Moved => continue,
                Step::Dispatched(n) => {
                    records += n;
                    self.publish();
                }
                Step::Wait => break,
                Step::Stalled => return Pass::Stalled,
            }
        }
        Pass::Done { records }
    }

    /// Reads and dispatches the next chunk of the segment at the dispatch position.
    fn next_chunk(&mut self, confirm: u64, listeners: &[ArrivalListener], pause: Pause) -> Step {
        let log = &self.shared.log;
        let min = log.min_offset();
        if self.offset < min {
            tracing::warn!(
                reput = self.offset,
                min,
                "dispatch offset below the CommitLog min offset; moving up"
            );
            self.offset = min;
            return Step::Moved;
        }
        let seg_end = log.roll_next_file(self.offset);
        if seg_end - self.offset < record::BLANK_RECORD_SIZE as u64 {
            self.offset = seg_end;
            return Step::Moved;
        }
        let limit = confirm.min(seg_end);
        let mut want = (limit - self.offset).min(REPUT_CHUNK_BYTES) as usize;
        loop {
            if want < record::BLANK_RECORD_SIZE {
                return Step::Wait; // not even a record header is confirmed yet
            }
            let Some(span) = log.read_span(self.offset, want, &mut self.scratch) else {
                return Step::Wait;
            };
            let chunk = dispatch_chunk(
                &self.shared,
                &mut self.dispatcher,
                listeners,
                self.offset,
                seg_end,
                span.bytes(),
            );
            match chunk {
                Chunk::Failed {
                    bytes,
                    records,
                    error,
                } => return self.stalled(bytes, records, &error, pause),
                Chunk::Consumed { bytes, records } => {
                    self.note_progress(records);
                    self.offset += bytes;
                    if records == 0 {
                        return Step::Wait; // the next record is not wholly confirmed yet
                    }
                    return Step::Dispatched(records);
                }
                Chunk::SkipSegment { bytes, records } => {
                    self.note_progress(records);
                    self.offset = self.shared.log.roll_next_file(self.offset + bytes);
                    return Step::Dispatched(records);
                }
                // A record larger than the chunk (up to maxMessageSize + 64 KiB): read
                // exactly it once it is wholly confirmed.
                Chunk::NeedBytes(n) if n > want && self.offset + n as u64 <= limit => want = n,
                Chunk::NeedBytes(_) => return Step::Wait,
            }
        }
    }

    /// Records dispatched end a dispatch stall.
    fn note_progress(&mut self, records: u32) {
        if records > 0 {
            end_stall(&self.shared, &mut self.stall);
        }
    }

    /// `records` records (`bytes` bytes) were dispatched before one failed: publishes the
    /// position of the failed record and (on the reput thread) pauses before it is tried
    /// again.
    fn stalled(&mut self, bytes: u64, records: u32, error: &StoreError, pause: Pause) -> Step {
        self.offset += bytes;
        self.publish();
        self.note_progress(records);
        let (shared, offset) = (&self.shared, self.offset);
        let back_off = self
            .stall
            .get_or_insert_with(|| DispatchStall::new(offset))
            .failed(shared, offset, error);
        if pause == Pause::Sleep {
            pause_unless_exiting(shared, back_off);
        }
        Step::Stalled
    }
}

/// A record whose dispatch keeps failing (a ConsumeQueue file that cannot be created:
/// no file descriptors, no space, an unwritable directory). The dispatch position stays
/// at the record and it is tried again with back-off for as long as it takes; puts are
/// accepted for `logic_queue_error_after_ms` (what was stored becomes consumable once
/// dispatch catches up), then refused with LOGIC_QUEUE_ERROR until a retry succeeds.
struct DispatchStall {
    offset: u64,
    since: Instant,
    attempts: u32,
    refusing_puts: bool,
}

impl DispatchStall {
    fn new(offset: u64) -> Self {
        DispatchStall {
            offset,
            since: Instant::now(),
            attempts: 0,
            refusing_puts: false,
        }
    }

    /// Notes one more failure at `offset`; returns how long to wait before the next try.
    fn failed(&mut self, shared: &Shared, offset: u64, error: &StoreError) -> Duration {
        if offset != self.offset {
            // Records before the failing one went through: a new failure, new clock.
            *self = DispatchStall::new(offset);
        }
        self.attempts += 1;
        let failing_ms = self.since.elapsed().as_millis() as u64;
        // First failure, then every 16th: at the longest pause that is one line per 16 s.
        if self.attempts == 1 || self.attempts.is_multiple_of(16) {
            tracing::warn!(
                error = %error, offset, attempts = self.attempts, failing_ms,
                "dispatching a record to its ConsumeQueue failed; retrying from the same offset"
            );
        }
        if !self.refusing_puts && failing_ms >= shared.config.logic_queue_error_after_ms {
            self.refusing_puts = true;
            shared.set_flag(FLAG_LOGIC_QUEUE_ERROR);
            tracing::error!(
                error = %error, offset, failing_ms,
                "ConsumeQueue writes keep failing; refusing puts until dispatch recovers"
            );
        }
        let exp = self.attempts.saturating_sub(1).min(16);
        Duration::from_millis((DISPATCH_RETRY_MIN_MS << exp).min(DISPATCH_RETRY_MAX_MS))
    }
}

/// The stalled record has been dispatched: accept puts again if they were refused.
fn end_stall(shared: &Shared, stall: &mut Option<DispatchStall>) {
    let Some(s) = stall.take() else { return };
    if s.refusing_puts {
        shared.clear_flag(FLAG_LOGIC_QUEUE_ERROR);
    }
    tracing::info!(
        offset = s.offset,
        attempts = s.attempts,
        failing_ms = s.since.elapsed().as_millis() as u64,
        "dispatch recovered; nothing was skipped"
    );
}

/// Sleeps `pause` (appends wake the thread; it goes back to sleep) unless shutdown lets
/// the reput stage exit meanwhile.
fn pause_unless_exiting(shared: &Shared, pause: Duration) {
    let until = Instant::now() + pause;
    while !shared.reput_may_exit.load(Ordering::Acquire) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        std::thread::park_timeout(left);
    }
}
