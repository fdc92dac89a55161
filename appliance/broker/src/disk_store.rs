//! The production store behind [`BrokerStore`]: `ringmq_store::MessageStore` (CommitLog,
//! ConsumeQueue, IndexFile, recovery), plus building its `StoreConfig` from the broker's
//! configuration (every `broker.conf` key the store understands is passed through).

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

use bytes::Bytes;
use ringmq_store as store;

use crate::config::BrokerConfig;
use crate::store_api::{
    ArrivalEvent, ArrivalListener, Boundary, BrokerStore, FileSpan, GetMessageResult,
    GetMessageStatus, MessageFilter, PutCallback, PutMessageStatus, PutRequest, PutResult,
    QueryMessageResult,
};

/// The store's config for this broker: defaults, then every modelled and extra key of
/// `config` the store knows, then the STOREHOST.
pub fn store_config(config: &BrokerConfig) -> Result<store::StoreConfig, String> {
    let mut sc = store::StoreConfig::default();
    for (key, value) in config
        .entries()
        .into_iter()
        .chain(config.extra.iter().map(|(k, v)| (k.as_str(), v.clone())))
    {
        if key == "storePathCommitLog" && value.is_empty() {
            continue;
        }
        sc.apply_property(key, &value).map_err(|e| format!("{e}"))?;
    }
    sc.store_host = crate::store_api::store_host_addr(&config.broker_ip1, config.listen_port);
    Ok(sc)
}

/// Whether the store accepts `key` (so the broker does not report it as unknown).
pub fn is_store_key(key: &str, value: &str) -> bool {
    store::StoreConfig::default()
        .apply_property(key, value)
        .is_ok_and(|known| known)
}

pub struct DiskStore {
    inner: store::MessageStore,
}

impl DiskStore {
    pub fn open(config: &BrokerConfig) -> Result<Self, String> {
        let sc = store_config(config)?;
        let root = sc.store_path_root_dir.display().to_string();
        let inner = store::MessageStore::open(sc)
            .map_err(|e| format!("cannot open the store at {root}: {e}"))?;
        Ok(Self { inner })
    }

    pub fn inner(&self) -> &store::MessageStore {
        &self.inner
    }
}

fn put_status(s: store::PutMessageStatus) -> PutMessageStatus {
    use store::PutMessageStatus as S;
    match s {
        S::PutOk => PutMessageStatus::PutOk,
        S::FlushDiskTimeout => PutMessageStatus::FlushDiskTimeout,
        S::FlushSlaveTimeout => PutMessageStatus::FlushSlaveTimeout,
        S::SlaveNotAvailable => PutMessageStatus::SlaveNotAvailable,
        S::ServiceNotAvailable => PutMessageStatus::ServiceNotAvailable,
        S::CreateMappedFileFailed => PutMessageStatus::CreateMappedFileFailed,
        S::MessageIllegal => PutMessageStatus::MessageIllegal,
        S::PropertiesSizeExceeded => PutMessageStatus::PropertiesSizeExceeded,
        S::OsPageCacheBusy => PutMessageStatus::OsPageCacheBusy,
        S::UnknownError => PutMessageStatus::UnknownError,
        S::InSyncReplicasNotEnough => PutMessageStatus::InSyncReplicasNotEnough,
        S::PutToRemoteBrokerFail => PutMessageStatus::PutToRemoteBrokerFail,
        S::LmqConsumeQueueNumExceeded => PutMessageStatus::LmqConsumeQueueNumExceeded,
        S::WheelTimerFlowControl => PutMessageStatus::WheelTimerFlowControl,
        S::WheelTimerMsgIllegal => PutMessageStatus::WheelTimerMsgIllegal,
        S::WheelTimerNotEnable => PutMessageStatus::WheelTimerNotEnable,
    }
}

fn get_status(s: store::GetMessageStatus) -> GetMessageStatus {
    use store::GetMessageStatus as S;
    match s {
        S::Found => GetMessageStatus::Found,
        S::NoMatchedMessage => GetMessageStatus::NoMatchedMessage,
        S::MessageWasRemoving => GetMessageStatus::MessageWasRemoving,
        S::OffsetFoundNull => GetMessageStatus::OffsetFoundNull,
        S::OffsetOverflowBadly => GetMessageStatus::OffsetOverflowBadly,
        S::OffsetOverflowOne => GetMessageStatus::OffsetOverflowOne,
        S::OffsetTooSmall => GetMessageStatus::OffsetTooSmall,
        S::NoMatchedLogicQueue => GetMessageStatus::NoMatchedLogicQueue,
        S::NoMessageInQueue => GetMessageStatus::NoMessageInQueue,
    }
}

/// A CommitLog segment as the file a response splices from: holding the `Arc` keeps the
/// segment's descriptor open (and its mapping alive) until the bytes are sent.
struct SegmentFd(Arc<store::mapped_file::MappedFile>);

impl AsFd for SegmentFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.file().as_fd()
    }
}

fn file_span(s: store::FileSpan) -> FileSpan {
    FileSpan {
        first_message: s.first_message,
        message_count: s.message_count,
        file: Arc::new(SegmentFd(s.segment)),
        file_offset: s.file_offset,
        len: s.len,
    }
}

struct FilterBridge<'a>(&'a dyn MessageFilter);

impl store::MessageFilter for FilterBridge<'_> {
    fn match_by_tags_code(&self, tags_code: Option<i64>) -> bool {
        self.0.match_by_tags_code(tags_code)
    }
    fn match_by_record(&self, record: &[u8]) -> bool {
        self.0.match_by_record(record)
    }
}

impl BrokerStore for DiskStore {
    fn put(&self, request: PutRequest, on_done: PutCallback) {
        let mut req = store::PutRequest::new(
            request.topic,
            request.queue_id,
            request.sys_flag,
            request.records,
            request.record_count,
        );
        req.keys = request.keys;
        req.wait_store_msg_ok = request.wait_store_msg_ok;
        self.inner.put(
            req,
            Box::new(move |r: store::PutResult| {
                on_done(PutResult {
                    status: put_status(r.status),
                    wrote_offset: r.wrote_offset,
                    wrote_bytes: r.wrote_bytes,
                    queue_offset: r.queue_offset,
                    msg_num: r.msg_num,
                    store_timestamp_ms: r.store_timestamp_ms,
                })
            }),
        );
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
        let r = self.inner.get_message(
            topic,
            queue_id,
            offset,
            max_msg_nums,
            max_total_bytes.max(0) as usize,
            &FilterBridge(filter),
        );
        GetMessageResult {
            status: get_status(r.status),
            next_begin_offset: r.next_begin_offset,
            min_offset: r.min_offset,
            max_offset: r.max_offset,
            messages: r.messages,
            message_queue_offsets: r.message_queue_offsets,
            suggest_pulling_from_slave: r.suggest_pulling_from_slave,
            file_spans: r.file_spans.into_iter().map(file_span).collect(),
        }
    }

    fn max_offset_in_queue(&self, topic: &str, queue_id: i32) -> i64 {
        self.inner.max_offset_in_queue(topic, queue_id)
    }

    fn min_offset_in_queue(&self, topic: &str, queue_id: i32) -> i64 {
        self.inner.min_offset_in_queue(topic, queue_id)
    }

    fn offset_in_queue_by_time(
        &self,
        topic: &str,
        queue_id: i32,
        timestamp_ms: i64,
        boundary: Boundary,
    ) -> i64 {
        let b = match boundary {
            Boundary::Lower => store::Boundary::Lower,
            Boundary::Upper => store::Boundary::Upper,
        };
        self.inner
            .offset_in_queue_by_time(topic, queue_id, timestamp_ms, b)
    }

    fn earliest_message_time(&self, topic: &str, queue_id: i32) -> Option<i64> {
        self.inner.earliest_message_time(topic, queue_id)
    }

    fn message_store_time(&self, topic: &str, queue_id: i32, queue_offset: i64) -> Option<i64> {
        self.inner.message_store_time(topic, queue_id, queue_offset)
    }

    fn look_message_by_offset(&self, commit_log_offset: i64) -> Option<Bytes> {
        self.inner.look_message_by_offset(commit_log_offset)
    }

    fn query_message(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin_ms: i64,
        end_ms: i64,
    ) -> QueryMessageResult {
        let messages = self
            .inner
            .query_message(topic, key, max_num, begin_ms, end_ms);
        QueryMessageResult {
            messages,
            index_last_update_timestamp: crate::persist::now_ms(),
            index_last_update_phyoffset: self.inner.commit_log_max_offset(),
        }
    }

    fn add_arrival_listener(&self, listener: ArrivalListener) {
        self.inner
            .add_arrival_listener(Arc::new(move |ev: &store::ArrivalEvent<'_>| {
                listener(&ArrivalEvent {
                    topic: ev.topic,
                    queue_id: ev.queue_id,
                    next_queue_offset: ev.next_queue_offset,
                    tags_code: ev.tags_code,
                    store_timestamp_ms: ev.store_timestamp_ms,
                    properties: ev.properties,
                })
            }));
    }

    fn commit_log_max_offset(&self) -> i64 {
        self.inner.commit_log_max_offset()
    }

    fn execute_delete_files_manually(&self) {
        self.inner.execute_delete_files_manually();
    }

    fn shutdown(&self) {
        self.inner.shutdown();
    }
}
