//! The store as the broker's processors see it: one object-safe trait over the operations the
//! broker needs (put with a completion callback, get for pull, offsets, lookups, arrival
//! events), so the processors are tested against [`MemStore`] without disks or threads and run
//! against `ringmq_store::MessageStore` in production.
//!
//! The value types mirror `ringmq_store::types` field for field (PutRequest, PutResult,
//! GetMessageResult with its file spans, statuses, MessageFilter, ArrivalEvent).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::{Arc, Mutex, RwLock};

use bytes::{Bytes, BytesMut};
use ringmq_remoting::message::properties;
use ringmq_remoting::message::record::{self, Decoded};
use ringmq_remoting::message::tags;

/// `PutMessageStatus` (`store.md` §5.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PutMessageStatus {
    PutOk,
    FlushDiskTimeout,
    FlushSlaveTimeout,
    SlaveNotAvailable,
    ServiceNotAvailable,
    CreateMappedFileFailed,
    MessageIllegal,
    PropertiesSizeExceeded,
    OsPageCacheBusy,
    UnknownError,
    InSyncReplicasNotEnough,
    PutToRemoteBrokerFail,
    LmqConsumeQueueNumExceeded,
    WheelTimerFlowControl,
    WheelTimerMsgIllegal,
    WheelTimerNotEnable,
}

impl PutMessageStatus {
    pub fn name(self) -> &'static str {
        use PutMessageStatus::*;
        match self {
            PutOk => "PUT_OK",
            FlushDiskTimeout => "FLUSH_DISK_TIMEOUT",
            FlushSlaveTimeout => "FLUSH_SLAVE_TIMEOUT",
            SlaveNotAvailable => "SLAVE_NOT_AVAILABLE",
            ServiceNotAvailable => "SERVICE_NOT_AVAILABLE",
            CreateMappedFileFailed => "CREATE_MAPPED_FILE_FAILED",
            MessageIllegal => "MESSAGE_ILLEGAL",
            PropertiesSizeExceeded => "PROPERTIES_SIZE_EXCEEDED",
            OsPageCacheBusy => "OS_PAGE_CACHE_BUSY",
            UnknownError => "UNKNOWN_ERROR",
            InSyncReplicasNotEnough => "IN_SYNC_REPLICAS_NOT_ENOUGH",
            PutToRemoteBrokerFail => "PUT_TO_REMOTE_BROKER_FAIL",
            LmqConsumeQueueNumExceeded => "LMQ_CONSUME_QUEUE_NUM_EXCEEDED",
            WheelTimerFlowControl => "WHEEL_TIMER_FLOW_CONTROL",
            WheelTimerMsgIllegal => "WHEEL_TIMER_MSG_ILLEGAL",
            WheelTimerNotEnable => "WHEEL_TIMER_NOT_ENABLE",
        }
    }
}

/// One put: pre-encoded stored records for a single topic-queue, QUEUEOFFSET,
/// PHYSICALOFFSET and STORETIMESTAMP left zero for the append stage.
#[derive(Debug)]
pub struct PutRequest {
    pub topic: String,
    pub queue_id: i32,
    pub sys_flag: i32,
    pub records: BytesMut,
    pub record_count: u32,
    pub keys: Option<String>,
    pub wait_store_msg_ok: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutResult {
    pub status: PutMessageStatus,
    pub wrote_offset: i64,
    pub wrote_bytes: i32,
    pub queue_offset: i64,
    pub msg_num: i32,
    pub store_timestamp_ms: i64,
}

impl PutResult {
    pub fn failed(status: PutMessageStatus) -> Self {
        PutResult {
            status,
            wrote_offset: 0,
            wrote_bytes: 0,
            queue_offset: 0,
            msg_num: 0,
            store_timestamp_ms: 0,
        }
    }
}

/// `GetMessageStatus` (`store.md` §12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GetMessageStatus {
    Found,
    NoMatchedMessage,
    MessageWasRemoving,
    OffsetFoundNull,
    OffsetOverflowBadly,
    OffsetOverflowOne,
    OffsetTooSmall,
    NoMatchedLogicQueue,
    NoMessageInQueue,
}

impl GetMessageStatus {
    pub fn name(self) -> &'static str {
        use GetMessageStatus::*;
        match self {
            Found => "FOUND",
            NoMatchedMessage => "NO_MATCHED_MESSAGE",
            MessageWasRemoving => "MESSAGE_WAS_REMOVING",
            OffsetFoundNull => "OFFSET_FOUND_NULL",
            OffsetOverflowBadly => "OFFSET_OVERFLOW_BADLY",
            OffsetOverflowOne => "OFFSET_OVERFLOW_ONE",
            OffsetTooSmall => "OFFSET_TOO_SMALL",
            NoMatchedLogicQueue => "NO_MATCHED_LOGIC_QUEUE",
            NoMessageInQueue => "NO_MESSAGE_IN_QUEUE",
        }
    }
}

#[derive(Debug, Clone)]
pub struct GetMessageResult {
    pub status: GetMessageStatus,
    pub next_begin_offset: i64,
    pub min_offset: i64,
    pub max_offset: i64,
    pub messages: Vec<Bytes>,
    pub message_queue_offsets: Vec<i64>,
    pub suggest_pulling_from_slave: bool,
    /// Runs of `messages` that may be sent straight from their CommitLog file (zero copy),
    /// in order, not overlapping; records outside every span go from memory. Empty for a
    /// store without files ([`MemStore`]).
    pub file_spans: Vec<FileSpan>,
}

/// An open CommitLog segment a response can splice bytes from; the `Arc` keeps it open
/// after retention deleted the file.
pub type SegmentFile = Arc<dyn AsFd + Send + Sync>;

/// `messages[first_message..first_message + message_count]`, laid end to end, are exactly
/// the bytes `[file_offset, file_offset + len)` of `file` (`ringmq_store::FileSpan`).
#[derive(Clone)]
pub struct FileSpan {
    pub first_message: usize,
    pub message_count: usize,
    pub file: SegmentFile,
    pub file_offset: u64,
    pub len: usize,
}

impl fmt::Debug for FileSpan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileSpan")
            .field("first_message", &self.first_message)
            .field("message_count", &self.message_count)
            .field("fd", &self.file.as_fd().as_raw_fd())
            .field("file_offset", &self.file_offset)
            .field("len", &self.len)
            .finish()
    }
}

impl GetMessageResult {
    pub fn empty(status: GetMessageStatus, next: i64, min: i64, max: i64) -> Self {
        GetMessageResult {
            status,
            next_begin_offset: next,
            min_offset: min,
            max_offset: max,
            messages: Vec::new(),
            message_queue_offsets: Vec::new(),
            suggest_pulling_from_slave: false,
            file_spans: Vec::new(),
        }
    }
}

/// Consumer-side filtering applied while reading.
pub trait MessageFilter {
    fn match_by_tags_code(&self, tags_code: Option<i64>) -> bool;
    fn match_by_record(&self, _record: &[u8]) -> bool {
        true
    }
}

pub struct AcceptAll;

impl MessageFilter for AcceptAll {
    fn match_by_tags_code(&self, _tags_code: Option<i64>) -> bool {
        true
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boundary {
    Lower,
    Upper,
}

/// Published for every dispatched message (drives long polling).
#[derive(Debug, Clone, Copy)]
pub struct ArrivalEvent<'a> {
    pub topic: &'a str,
    pub queue_id: i32,
    pub next_queue_offset: i64,
    pub tags_code: i64,
    pub store_timestamp_ms: i64,
    pub properties: &'a [u8],
}

/// `QUERY_MESSAGE` answer: records plus the index's last update point.
#[derive(Debug, Clone, Default)]
pub struct QueryMessageResult {
    pub messages: Vec<Bytes>,
    pub index_last_update_timestamp: i64,
    pub index_last_update_phyoffset: i64,
}

pub type PutCallback = Box<dyn FnOnce(PutResult) + Send>;
pub type ArrivalListener = Arc<dyn Fn(&ArrivalEvent<'_>) + Send + Sync>;

/// What the broker needs from a message store.
pub trait BrokerStore: Send + Sync {
    /// Appends; `on_done` runs exactly once, on any thread.
    fn put(&self, request: PutRequest, on_done: PutCallback);
    fn get_message(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_msg_nums: i32,
        max_total_bytes: i32,
        filter: &dyn MessageFilter,
    ) -> GetMessageResult;
    fn max_offset_in_queue(&self, topic: &str, queue_id: i32) -> i64;
    fn min_offset_in_queue(&self, topic: &str, queue_id: i32) -> i64;
    fn offset_in_queue_by_time(
        &self,
        topic: &str,
        queue_id: i32,
        timestamp_ms: i64,
        boundary: Boundary,
    ) -> i64;
    /// Store time of the earliest message of the queue, `None` when empty.
    fn earliest_message_time(&self, topic: &str, queue_id: i32) -> Option<i64>;
    /// Store time of the message at `queue_offset`, `None` when absent.
    fn message_store_time(&self, topic: &str, queue_id: i32, queue_offset: i64) -> Option<i64>;
    /// The whole record at a CommitLog offset.
    fn look_message_by_offset(&self, commit_log_offset: i64) -> Option<Bytes>;
    fn query_message(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin_ms: i64,
        end_ms: i64,
    ) -> QueryMessageResult;
    fn add_arrival_listener(&self, listener: ArrivalListener);
    fn commit_log_max_offset(&self) -> i64;
    /// DELETE_EXPIRED_COMMITLOG: the next retention passes delete expired CommitLog
    /// segments whatever the hour (upstream's `executeDeleteFilesManually`).
    fn execute_delete_files_manually(&self);
    fn shutdown(&self);
}

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

/// An in-memory store with the real one's semantics (offset statuses, arrival events,
/// filtering), for processor tests and for a broker run without disks.
pub struct MemStore {
    inner: Mutex<MemInner>,
    listeners: RwLock<Vec<ArrivalListener>>,
    /// Forced put status for flow-control tests.
    forced_status: Mutex<Option<PutMessageStatus>>,
    clock: Box<dyn Fn() -> i64 + Send + Sync>,
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
            clock: Box::new(crate::persist::now_ms),
        }
    }

    /// Makes every later put fail with `status` (None = normal).
    pub fn force_put_status(&self, status: Option<PutMessageStatus>) {
        *self.forced_status.lock().unwrap() = status;
    }
}

impl BrokerStore for MemStore {
    fn put(&self, mut request: PutRequest, on_done: PutCallback) {
        if let Some(status) = *self.forced_status.lock().unwrap() {
            on_done(PutResult::failed(status));
            return;
        }
        let now = (self.clock)();
        let mut events: Vec<(String, i32, i64, i64, Vec<u8>)> = Vec::new();
        let result = {
            let mut inner = self.inner.lock().unwrap();
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
            }
        };
        on_done(result);
        let listeners = self.listeners.read().unwrap().clone();
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
        max_total_bytes: i32,
        filter: &dyn MessageFilter,
    ) -> GetMessageResult {
        use GetMessageStatus::*;
        let inner = self.inner.lock().unwrap();
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
        let max_bytes = max_total_bytes.max(100) as usize;
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
            .lock()
            .unwrap()
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
        let inner = self.inner.lock().unwrap();
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
            .lock()
            .unwrap()
            .queues
            .get(&(topic.to_string(), queue_id))
            .and_then(|q| q.first())
            .map(|e| e.store_ts)
    }

    fn message_store_time(&self, topic: &str, queue_id: i32, queue_offset: i64) -> Option<i64> {
        let inner = self.inner.lock().unwrap();
        let q = inner.queues.get(&(topic.to_string(), queue_id))?;
        usize::try_from(queue_offset)
            .ok()
            .and_then(|i| q.get(i))
            .map(|e| e.store_ts)
    }

    fn look_message_by_offset(&self, commit_log_offset: i64) -> Option<Bytes> {
        self.inner
            .lock()
            .unwrap()
            .log
            .get(&commit_log_offset)
            .cloned()
    }

    fn query_message(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin_ms: i64,
        end_ms: i64,
    ) -> QueryMessageResult {
        let inner = self.inner.lock().unwrap();
        let mut out = QueryMessageResult {
            messages: Vec::new(),
            index_last_update_timestamp: inner.last_index_ts,
            index_last_update_phyoffset: inner.last_index_phys,
        };
        if let Some(offsets) = inner.index.get(&(topic.to_string(), key.to_string())) {
            for phys in offsets {
                if out.messages.len() >= max_num {
                    break;
                }
                if let Some(rec) = inner.log.get(phys) {
                    let ts = match record::decode_record(rec, false) {
                        Ok(Decoded::Message(r)) => r.store_timestamp_ms,
                        _ => continue,
                    };
                    if ts >= begin_ms && ts <= end_ms {
                        out.messages.push(rec.clone());
                    }
                }
            }
        }
        out
    }

    fn add_arrival_listener(&self, listener: ArrivalListener) {
        self.listeners.write().unwrap().push(listener);
    }

    fn commit_log_max_offset(&self) -> i64 {
        self.inner.lock().unwrap().next_phys
    }

    /// The in-memory store keeps no files and expires nothing: there is nothing to delete.
    fn execute_delete_files_manually(&self) {}

    fn shutdown(&self) {}
}

/// The STOREHOST the broker writes: `brokerIP1:listenPort`, falling back to loopback when
/// `brokerIP1` is not an IP literal.
pub fn store_host_addr(ip: &str, port: u16) -> SocketAddr {
    let ip = ip
        .parse()
        .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
    SocketAddr::new(ip, port)
}
