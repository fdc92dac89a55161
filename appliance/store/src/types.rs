//! The store's request/response vocabulary: PutRequest/PutResult with RocketMQ's
//! PutMessageStatus, GetMessageResult with GetMessageStatus (and the file spans a pull
//! can send from without copying), the message filter hook, arrival events for long
//! polling, and the metrics snapshot.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::mapped_file::MappedFile;

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
    /// Not one of upstream's store statuses: upstream refuses such a send before the store
    /// (BrokerFastFailure's `[TIMEOUT_CLEAN_QUEUE]`); ringmq's send queue is the put ring in
    /// front of the append stage, so the store is where the wait is seen.
    SendQueueTimeout,
}

impl PutMessageStatus {
    /// The Java enum name.
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
            SendQueueTimeout => "SEND_QUEUE_TIMEOUT",
        }
    }
    /// True when the message is stored (PUT_OK and the flush/slave timeouts).
    pub fn is_stored(self) -> bool {
        matches!(
            self,
            PutMessageStatus::PutOk
                | PutMessageStatus::FlushDiskTimeout
                | PutMessageStatus::FlushSlaveTimeout
                | PutMessageStatus::SlaveNotAvailable
        )
    }
}

/// One put: one or more pre-encoded stored records for a single topic-queue.
///
/// Each record in `records` is a complete stored record (`ringmq_remoting::message::record`)
/// with QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP left zero; the append stage fills
/// them in. Several records (a batch send) get consecutive queue offsets.
#[derive(Debug)]
pub struct PutRequest {
    pub topic: String,
    pub queue_id: i32,
    /// The records' SYSFLAG (transaction type decides whether a queue offset is used).
    pub sys_flag: i32,
    pub records: BytesMut,
    pub record_count: u32,
    /// The `WAIT` property (waitStoreMsgOK): when false a SYNC_FLUSH put completes at append.
    pub wait_store_msg_ok: bool,
}

impl PutRequest {
    /// A request for `record_count` records, waiting for the store (`WAIT=true`).
    pub fn new(
        topic: impl Into<String>,
        queue_id: i32,
        sys_flag: i32,
        records: BytesMut,
        record_count: u32,
    ) -> Self {
        PutRequest {
            topic: topic.into(),
            queue_id,
            sys_flag,
            records,
            record_count,
            wait_store_msg_ok: true,
        }
    }
}

/// Runs exactly once with the outcome of a put, on whichever thread completes it.
pub type PutCallback = Box<dyn FnOnce(PutResult) + Send>;

/// Outcome of a put (`PutMessageResult` + `AppendMessageResult`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutResult {
    pub status: PutMessageStatus,
    /// Physical offset of the first record.
    pub wrote_offset: i64,
    /// Bytes of all records.
    pub wrote_bytes: i32,
    /// Queue offset of the first record (0 for prepared/rollback transaction records).
    pub queue_offset: i64,
    pub msg_num: i32,
    pub store_timestamp_ms: i64,
    /// Milliseconds the put waited for the append stage after it was queued.
    pub queued_ms: u32,
}

impl PutResult {
    /// A result for a put that stored nothing.
    pub fn failed(status: PutMessageStatus) -> Self {
        PutResult {
            status,
            wrote_offset: 0,
            wrote_bytes: 0,
            queue_offset: 0,
            msg_num: 0,
            store_timestamp_ms: 0,
            queued_ms: 0,
        }
    }

    /// A put refused unstored after waiting `waited_ms` for the append stage.
    pub fn queue_timeout(waited_ms: u64) -> Self {
        PutResult {
            queued_ms: u32::try_from(waited_ms).unwrap_or(u32::MAX),
            ..PutResult::failed(PutMessageStatus::SendQueueTimeout)
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
    /// The Java enum name.
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

/// Outcome of `get_message`.
#[derive(Debug, Clone)]
pub struct GetMessageResult {
    pub status: GetMessageStatus,
    pub next_begin_offset: i64,
    pub min_offset: i64,
    pub max_offset: i64,
    /// Whole stored records. In mmap mode each borrows its segment (no copy).
    pub messages: Vec<Bytes>,
    /// Queue offsets of `messages`, same order.
    pub message_queue_offsets: Vec<i64>,
    pub suggest_pulling_from_slave: bool,
    /// The runs of `messages` that may be sent straight from their segment file (zero
    /// copy), in order, not overlapping. A record outside every span (in direct mode: one
    /// still in the write ring) must be sent from its `Bytes`.
    pub file_spans: Vec<FileSpan>,
}

/// Consecutive records of a [`GetMessageResult`] that lie back to back in one CommitLog
/// segment file: `messages[first_message..first_message + message_count]`, laid end to
/// end, are exactly the file's bytes `[file_offset, file_offset + len)`.
///
/// Only bytes that never change again are covered: every byte below the CommitLog's max
/// offset in mmap mode; in direct mode, only bytes the write ring no longer holds (whole
/// pages whose O_DIRECT write completed and that are never rewritten).
#[derive(Debug, Clone)]
pub struct FileSpan {
    pub first_message: usize,
    pub message_count: usize,
    /// The segment; the `Arc` keeps its file open (and mapped) even after retention
    /// deleted it.
    pub segment: Arc<MappedFile>,
    /// Position of the first byte inside the segment file.
    pub file_offset: u64,
    pub len: usize,
}

/// A segment is the file a pull response splices from: `Arc<MappedFile>` coerces to the
/// runtime's shared file handle as it is, so a span reaches the socket without a wrapper.
impl AsFd for MappedFile {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file().as_fd()
    }
}

impl GetMessageResult {
    /// A result without records (the broker answers an offset reset with one).
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
    /// Total bytes of the returned records.
    pub fn buffer_total_size(&self) -> usize {
        self.messages.iter().map(|m| m.len()).sum()
    }
}

/// Consumer-side filtering applied while reading (`MessageFilter`).
pub trait MessageFilter {
    /// Pre-filter on the ConsumeQueue unit's tagsCode.
    fn match_by_tags_code(&self, tags_code: Option<i64>) -> bool;
    /// Filter on the whole stored record (SQL92 on properties); default accepts.
    fn match_by_record(&self, _record: &[u8]) -> bool {
        true
    }
}

/// A filter that accepts everything.
pub struct AcceptAll;

impl MessageFilter for AcceptAll {
    fn match_by_tags_code(&self, _tags_code: Option<i64>) -> bool {
        true
    }
}

/// Which queue offset `offset_in_queue_by_time` returns when several messages share a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boundary {
    Lower,
    Upper,
}

/// Published by the reput stage for every dispatched message (drives long polling).
#[derive(Debug, Clone, Copy)]
pub struct ArrivalEvent<'a> {
    pub topic: &'a str,
    pub queue_id: i32,
    /// The queue's next logical offset after this message.
    pub next_queue_offset: i64,
    pub tags_code: i64,
    pub store_timestamp_ms: i64,
    /// Raw property string of the record.
    pub properties: &'a [u8],
}

/// Upper bounds (ms) of the replication-lag buckets: the age of the oldest byte a slave's
/// report acknowledged, measured by the master (`ha::lag`).
pub const HA_ACK_LAG_BOUNDS_MS: [f64; 15] = [
    0.25, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 7.5, 10.0, 25.0, 50.0, 100.0, 250.0, 1000.0, 5000.0,
];
/// Buckets of that histogram: one per bound and one above them all.
pub const HA_ACK_LAG_BUCKETS: usize = HA_ACK_LAG_BOUNDS_MS.len() + 1;

/// A snapshot of store counters.
#[derive(Debug, Clone, Default)]
pub struct StoreMetrics {
    pub put_requests: u64,
    pub put_messages: u64,
    pub put_bytes: u64,
    pub put_rejected_busy: u64,
    pub append_batches: u64,
    /// Append critical-section ("lock-hold") time per batch, microseconds.
    pub lock_hold_p50_us: u64,
    pub lock_hold_p99_us: u64,
    pub lock_hold_max_us: u64,
    pub flush_count: u64,
    /// Waiters completed per flush, mean.
    pub flush_group_mean: f64,
    pub flush_p50_us: u64,
    pub flush_p99_us: u64,
    pub commit_log_max_offset: i64,
    pub commit_log_flushed_offset: i64,
    pub dispatch_behind_bytes: i64,
    pub consume_queue_count: usize,
    pub writeable: bool,
    /// Puts refused before the append stage, per reason (`store::REFUSED_*`), since open.
    pub put_refusals: Vec<(&'static str, u64)>,
    /// Perf counters (context switches, page faults, ...) summed over the append stage's
    /// sampled critical sections (`ringmq.appendPerfSampleEvery`).
    pub append_perf: crate::perf_event::CounterTotals,
    /// Master: slave acknowledgements per bucket of [`HA_ACK_LAG_BOUNDS_MS`] (not
    /// cumulative) and the sum of their ages, since the store opened.
    pub ha_ack_lag_counts: [u64; HA_ACK_LAG_BUCKETS],
    pub ha_ack_lag_sum_us: u64,
}

/// One slave connected to this master's HA port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaSlaveStatus {
    /// The slave's address as the master sees the connection.
    pub addr: String,
    /// The CommitLog offset the slave last reported holding.
    pub ack_offset: i64,
    /// Within `haMaxGapNotInSync` of the master's max offset.
    pub in_sync: bool,
    /// The offset the transfer to this slave started from.
    pub transfer_from_where: i64,
    /// Controller mode: the slave's controller-assigned broker id (from its handshake).
    pub broker_id: Option<i64>,
    /// Controller mode: the slave is an `asyncLearner` (never in the SyncStateSet).
    pub async_learner: bool,
    /// Controller mode: when (ms since the epoch) the slave last held everything this
    /// master had sent it; 0 never.
    pub caught_up_at_ms: i64,
}

/// Replication as this broker's store sees it (brokerStatus, clusterList, pull routing).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HaStatus {
    /// Master: the slaves connected now.
    pub slaves: Vec<HaSlaveStatus>,
    /// Slave: the master HA address it replicates from, if any.
    pub master_addr: Option<String>,
    /// Slave: whether its HA connection to the master is up.
    pub connected_to_master: bool,
}
