//! An in-memory [`StoreApi`] with the real store's semantics (offset statuses, prepared
//! transaction records outside the queues, arrival events, filtering, key lookups), for the
//! broker's processor tests without disks or stage threads. Compiled with the `test-util`
//! feature only; it keeps every record until dropped and splices nothing (no file spans).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, RwLock};

use bytes::Bytes;
use ringmq_remoting::message::properties;
use ringmq_remoting::message::record::{self, Decoded};
use ringmq_remoting::message::tags;

use crate::api::{IndexUpdatePoint, StoreApi};
use crate::types::{
    ArrivalEvent, Boundary, GetMessageResult, GetMessageStatus, MessageFilter, PutCallback,
    PutMessageStatus, PutRequest, PutResult,
};
use crate::ArrivalListener;
use ringmq_sync::{LockExt, RwLockExt};

struct QueueEntry {
    phys_offset: i64,
    tags_code: i64,
    store_ts: i64,
}

#[derive(Default)]
struct MemInner {
    log: BTreeMap<i64, Bytes>,
    next_phys: i64,
    queues: HashMap<(String, i32), Vec<QueueEntry>>,
    /// (topic, key) → commit-log offsets, for QUERY_MESSAGE.
    index: HashMap<(String, String), Vec<i64>>,
    last_index_ts: i64,
    last_index_phys: i64,
}

/// The in-memory store (module doc).
pub struct MemStore {
    inner: Mutex<MemInner>,
    listeners: RwLock<Vec<ArrivalListener>>,
    /// Forced put status for flow-control tests.
    forced_status: Mutex<Option<PutMessageStatus>>,
}

impl Default for MemStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemStore {
    pub fn new() -> Self {
        Self {
            inner: Mutex::new(MemInner::default()),
            listeners: RwLock::new(Vec::new()),
            forced_status: Mutex::new(None),
        }
    }

    /// Makes every later put fail with `status` (None = normal).
    pub fn force_put_status(&self, status: Option<PutMessageStatus>) {
        *self.forced_status.lock_unpoisoned() = status;
    }
}

impl StoreApi for MemStore {
    fn put(&self, mut request: PutRequest, on_done: PutCallback) {
        if let Some(status) = *self.forced_status.lock_unpoisoned() {
            on_done(PutResult::failed(status));
            return;
        }
        let now = crate::util::now_ms();
        let mut events: Vec<(String, i32, i64, i64, Vec<u8>)> = Vec::new();
        let result = {
            let mut inner = self.inner.lock_unpoisoned();
            let key = (request.topic.clone(), request.queue_id);
            let prepared = matches!(
                request.sys_flag & record::SYSFLAG_TRANSACTION_MASK,
                record::TRANSACTION_PREPARED_TYPE | record::TRANSACTION_ROLLBACK_TYPE
            );
            let first_queue_offset = if prepared {
                0
            } else {
                inner.queues.get(&key).map_or(0, |q| q.len() as i64)
            };
            let first_phys = inner.next_phys;
            let mut pos = 0usize;
            let mut count = 0i64;
            let buf = &mut request.records[..];
            while pos < buf.len() {
                let Some(size) = record::read_total_size(&buf[pos..]) else {
                    break;
                };
                let size = size as usize;
                if size == 0 || pos + size > buf.len() {
                    break;
                }
                let rec = &mut buf[pos..pos + size];
                let phys = inner.next_phys;
                let queue_offset = if prepared {
                    0
                } else {
                    first_queue_offset + count
                };
                record::patch_queue_offset(rec, queue_offset);
                record::patch_physical_offset(rec, phys);
                record::patch_store_timestamp(rec, now);
                let bytes = Bytes::copy_from_slice(rec);
                let (tags_code, props) = match record::decode_record(&bytes, false) {
                    Ok(Decoded::Message(r)) => {
                        let props = std::str::from_utf8(r.properties).unwrap_or("");
                        (
                            tags::tags_code(properties::find(props, properties::keys::TAGS)),
                            r.properties.to_vec(),
                        )
                    }
                    _ => (0, Vec::new()),
                };
                if let Ok(props_str) = std::str::from_utf8(&props) {
                    for (k, v) in properties::iter(props_str) {
                        if k == properties::keys::KEYS {
                            for one in v.split(' ').filter(|s| !s.is_empty()) {
                                inner
                                    .index
                                    .entry((request.topic.clone(), one.to_string()))
                                    .or_default()
                                    .push(phys);
                            }
                        } else if k == properties::keys::UNIQ_KEY {
                            inner
                                .index
                                .entry((request.topic.clone(), v.to_string()))
                                .or_default()
                                .push(phys);
                        }
                    }
                }
                inner.last_index_ts = now;
                inner.last_index_phys = phys;
                inner.log.insert(phys, bytes);
                inner.next_phys += size as i64;
                if !prepared {
                    inner
                        .queues
                        .entry(key.clone())
                        .or_default()
                        .push(QueueEntry {
                            phys_offset: phys,
                            tags_code,
                            store_ts: now,
                        });
                    events.push((
                        request.topic.clone(),
                        request.queue_id,
                        queue_offset + 1,
                        tags_code,
                        props,
                    ));
                }
                pos += size;
                count += 1;
            }
            PutResult {
                status: if count > 0 {
                    PutMessageStatus::PutOk
                } else {
                    PutMessageStatus::MessageIllegal
                },
                wrote_offset: first_phys,
                wrote_bytes: (inner.next_phys - first_phys) as i32,
                queue_offset: first_queue_offset,
                msg_num: count as i32,
                store_timestamp_ms: now,
                queued_ms: 0,
            }
        };
        on_done(result);
        let listeners = self.listeners.read_unpoisoned().clone();
        for (topic, queue_id, next, tags_code, props) in &events {
            let ev = ArrivalEvent {
                topic,
                queue_id: *queue_id,
                next_queue_offset: *next,
                tags_code: *tags_code,
                store_timestamp_ms: now,
                properties: props,
            };
            for l in &listeners {
                l(&ev);
            }
        }
    }

    fn get_message(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_msg_nums: i32,
        max_total_bytes: usize,
        filter: &dyn MessageFilter,
    ) -> GetMessageResult {
        use GetMessageStatus::*;
        let inner = self.inner.lock_unpoisoned();
        let Some(queue) = inner.queues.get(&(topic.to_string(), queue_id)) else {
            return GetMessageResult::empty(NoMatchedLogicQueue, 0, 0, 0);
        };
        let max = queue.len() as i64;
        let min = 0;
        if max == 0 {
            return GetMessageResult::empty(NoMessageInQueue, 0, min, max);
        }
        if offset < min {
            return GetMessageResult::empty(OffsetTooSmall, min, min, max);
        }
        if offset == max {
            return GetMessageResult::empty(OffsetOverflowOne, offset, min, max);
        }
        if offset > max {
            return GetMessageResult::empty(OffsetOverflowBadly, max, min, max);
        }
        let mut result = GetMessageResult::empty(NoMatchedMessage, offset, min, max);
        let mut bytes = 0usize;
        let max_bytes = max_total_bytes.max(100);
        let mut off = offset;
        while off < max && (result.messages.len() as i32) < max_msg_nums.max(1) {
            let entry = &queue[off as usize];
            let Some(rec) = inner.log.get(&entry.phys_offset) else {
                result.status = MessageWasRemoving;
                off += 1;
                continue;
            };
            if !result.messages.is_empty() && bytes + rec.len() > max_bytes {
                break;
            }
            off += 1;
            if !filter.match_by_tags_code(Some(entry.tags_code)) || !filter.match_by_record(rec) {
                continue;
            }
            bytes += rec.len();
            result.messages.push(rec.clone());
            result.message_queue_offsets.push(off - 1);
            result.status = Found;
        }
        result.next_begin_offset = off;
        result
    }

    fn max_offset_in_queue(&self, topic: &str, queue_id: i32) -> i64 {
        self.inner
            .lock_unpoisoned()
            .queues
            .get(&(topic.to_string(), queue_id))
            .map_or(0, |q| q.len() as i64)
    }

    fn min_offset_in_queue(&self, _topic: &str, _queue_id: i32) -> i64 {
        0
    }

    fn offset_in_queue_by_time(
        &self,
        topic: &str,
        queue_id: i32,
        timestamp_ms: i64,
        boundary: Boundary,
    ) -> i64 {
        let inner = self.inner.lock_unpoisoned();
        let Some(q) = inner.queues.get(&(topic.to_string(), queue_id)) else {
            return 0;
        };
        match boundary {
            Boundary::Lower => q
                .iter()
                .position(|e| e.store_ts >= timestamp_ms)
                .unwrap_or(q.len()) as i64,
            Boundary::Upper => q
                .iter()
                .rposition(|e| e.store_ts <= timestamp_ms)
                .map_or(0, |p| p as i64),
        }
    }

    fn earliest_message_time(&self, topic: &str, queue_id: i32) -> Option<i64> {
        self.inner
            .lock_unpoisoned()
            .queues
            .get(&(topic.to_string(), queue_id))
            .and_then(|q| q.first())
            .map(|e| e.store_ts)
    }

    fn message_store_time(&self, topic: &str, queue_id: i32, queue_offset: i64) -> Option<i64> {
        let inner = self.inner.lock_unpoisoned();
        let q = inner.queues.get(&(topic.to_string(), queue_id))?;
        usize::try_from(queue_offset)
            .ok()
            .and_then(|i| q.get(i))
            .map(|e| e.store_ts)
    }

    fn look_message_by_offset(&self, physical_offset: i64) -> Option<Bytes> {
        self.inner
            .lock_unpoisoned()
            .log
            .get(&physical_offset)
            .cloned()
    }

    fn query_message(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin_ms: i64,
        end_ms: i64,
    ) -> Vec<Bytes> {
        let inner = self.inner.lock_unpoisoned();
        let mut out = Vec::new();
        let Some(offsets) = inner.index.get(&(topic.to_string(), key.to_string())) else {
            return out;
        };
        for phys in offsets {
            if out.len() >= max_num {
                break;
            }
            let Some(rec) = inner.log.get(phys) else {
                continue;
            };
            let ts = match record::decode_record(rec, false) {
                Ok(Decoded::Message(r)) => r.store_timestamp_ms,
                _ => continue,
            };
            if ts >= begin_ms && ts <= end_ms {
                out.push(rec.clone());
            }
        }
        out
    }

    fn index_last_update(&self) -> IndexUpdatePoint {
        let inner = self.inner.lock_unpoisoned();
        IndexUpdatePoint {
            timestamp_ms: inner.last_index_ts,
            phy_offset: inner.last_index_phys,
        }
    }

    fn add_arrival_listener(&self, listener: ArrivalListener) {
        self.listeners.write_unpoisoned().push(listener);
    }

    fn commit_log_max_offset(&self) -> i64 {
        self.inner.lock_unpoisoned().next_phys
    }

    /// The in-memory store keeps no files and expires nothing: there is nothing to delete.
    fn execute_delete_files_manually(&self) {}

    fn shutdown(&self) {}
}
