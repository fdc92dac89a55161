//! The reput stage: reads the CommitLog from the dispatch offset up to the confirm offset
//! (flushed offset under SYNC_FLUSH, max offset under ASYNC_FLUSH), parses each record's
//! header and properties, writes the ConsumeQueue unit and IndexFile entries, and notifies
//! arrival listeners (long polling). The same `Dispatcher` replays records during recovery.

use crate::consume_queue::ConsumeQueue;
use crate::error::StoreError;
use crate::store::Shared;
use crate::types::ArrivalEvent;
use crate::util::{property, tags_code};
use ringmq_remoting::message::record::{self, Decoded, StoredRecord, BLANK_MAGIC};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Delay topic whose tagsCode is the delivery time.
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";
/// Default `messageDelayLevel` in ms (levels 1..=18).
const DELAY_LEVEL_MS: [i64; 18] = [
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000, 420_000,
    480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
];
/// Longest the reput stage sleeps when idle; appends and flushes wake it sooner.
const REPUT_IDLE_PARK_MS: u64 = 10;
/// Records dispatched between publications of the reput offset (bounds the lag seen by
/// `dispatch_behind_bytes` while a backlog is replayed).
const REPUT_PUBLISH_EVERY: u32 = 256;

/// tagsCode of a record per `store.md` §7.1.
pub fn record_tags_code(topic: &str, props: &[u8], store_timestamp_ms: i64) -> i64 {
    if topic == SCHEDULE_TOPIC {
        if let Some(level) = property(props, "DELAY").and_then(|v| v.parse::<usize>().ok()) {
            if level > 0 {
                return store_timestamp_ms + DELAY_LEVEL_MS[level.min(18) - 1];
            }
        }
        return store_timestamp_ms + 1000;
    }
    property(props, "TAGS").map(tags_code).unwrap_or(0)
}

/// Builds ConsumeQueue and index entries from records; owned by the reput thread (and by
/// recovery before it).
pub(crate) struct Dispatcher {
    shared: Arc<Shared>,
    cache: HashMap<String, HashMap<i32, Arc<ConsumeQueue>>>,
    generation: u64,
}

impl Dispatcher {
    pub fn new(shared: Arc<Shared>) -> Self {
        let generation = shared.topic_generation.load(Ordering::Acquire);
        Dispatcher {
            shared,
            cache: HashMap::new(),
            generation,
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
        listeners: &[crate::store::ArrivalListener],
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
        let tx = rec.transaction_type();
        let tags = record_tags_code(topic, rec.properties, rec.store_timestamp_ms);
        let mut added = false;
        if tx == record::TRANSACTION_NOT_TYPE || tx == record::TRANSACTION_COMMIT_TYPE {
            let cq = self.queue(topic, rec.queue_id);
            let mut attempt = 0;
            loop {
                match cq.put_unit(
                    rec.physical_offset,
                    rec.total_size as i32,
                    tags,
                    rec.queue_offset,
                ) {
                    Ok(a) => {
                        added = a;
                        break;
                    }
                    Err(e) if attempt < 3 => {
                        attempt += 1;
                        tracing::warn!(error = %e, "writing ConsumeQueue unit failed; retrying");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Err(e) => {
                        self.shared.set_flag(crate::store::FLAG_LOGIC_QUEUE_ERROR);
                        return Err(e);
                    }
                }
            }
            self.shared
                .checkpoint_logics_ts
                .fetch_max(rec.store_timestamp_ms, Ordering::AcqRel);
        }
        if tx != record::TRANSACTION_ROLLBACK_TYPE {
            if let Some(index) = &self.shared.index {
                let uniq = property(rec.properties, "UNIQ_KEY");
                let keys = property(rec.properties, "KEYS");
                let mut idx = index.lock().unwrap_or_else(|p| p.into_inner());
                if let Err(e) = idx.build_index(
                    topic,
                    uniq,
                    keys,
                    rec.physical_offset,
                    rec.store_timestamp_ms,
                ) {
                    self.shared.set_flag(crate::store::FLAG_INDEX_ERROR);
                    tracing::error!(error = %e, "building the message index failed; index disabled until restart");
                }
            }
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

/// Runs the reput loop from `from` until shutdown (after catching up, bounded by 5 s).
pub(crate) fn run(shared: Arc<Shared>, mut dispatcher: Dispatcher, from: u64) {
    crate::util::pin_current_thread(shared.config.reput_core, "reput");
    let log = Arc::clone(&shared.log);
    let file_size = log.file_size();
    let mut reput = from;
    shared.reput_offset.store(reput, Ordering::Release);
    loop {
        // Shutdown sets this only after appends stopped and dispatch caught up (or gave up).
        if shared.reput_may_exit.load(Ordering::Acquire) {
            break;
        }
        let confirm = shared.confirm_offset();
        let listeners = shared.listeners_snapshot();
        let mut progressed = 0u32;
        while reput < confirm {
            let min = log.min_offset();
            if reput < min {
                tracing::warn!(
                    reput,
                    min,
                    "dispatch offset below the CommitLog min offset; moving up"
                );
                reput = min;
                continue;
            }
            let remaining_in_file = file_size - reput % file_size;
            if remaining_in_file < record::BLANK_RECORD_SIZE as u64 {
                reput = log.roll_next_file(reput);
                continue;
            }
            let Some(head) = log.read(reput, record::BLANK_RECORD_SIZE) else {
                break;
            };
            let size = record::read_total_size(&head).unwrap_or(0);
            if record::read_magic(&head) == Some(BLANK_MAGIC) {
                reput = log.roll_next_file(reput);
                continue;
            }
            if size <= 0 || size as u64 > remaining_in_file {
                tracing::error!(
                    offset = reput,
                    size,
                    "[BUG] unparseable record size; skipping to the next segment"
                );
                reput = log.roll_next_file(reput);
                continue;
            }
            if reput + size as u64 > confirm {
                break;
            }
            let Some(bytes) = log.read(reput, size as usize) else {
                break;
            };
            match record::decode_record(&bytes, false) {
                Ok(Decoded::Message(rec)) => {
                    if let Err(e) = dispatcher.dispatch(&rec, &listeners) {
                        tracing::error!(error = %e, offset = reput, "dispatch failed; store no longer writeable");
                    }
                }
                Ok(Decoded::Blank { .. }) => {}
                Err(e) => {
                    tracing::error!(error = %e, offset = reput, "[BUG] undecodable record; skipping it")
                }
            }
            reput += size as u64;
            progressed += 1;
            if progressed.is_multiple_of(REPUT_PUBLISH_EVERY) {
                shared.reput_offset.store(reput, Ordering::Release);
            }
        }
        shared.reput_offset.store(reput, Ordering::Release);
        if progressed == 0 {
            std::thread::park_timeout(Duration::from_millis(REPUT_IDLE_PARK_MS));
        }
    }
}
