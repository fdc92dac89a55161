//! Reading a `MessageStore`: pulls by queue offset (`get_message`, with the file spans a
//! zero-copy pull sends from), queue offset bounds, lookups by time, physical offset and
//! key. Readers only look at published state in `Shared`; they never wait on a stage.

use crate::commit_log::CommitLog;
use crate::config::{LiveStoreSettings, StoreConfig};
use crate::consume_queue::{ConsumeQueue, CqUnit, CQ_UNIT_SIZE};
use crate::mapped_file::MappedFile;
use crate::shared::Shared;
use crate::store::MessageStore;
use crate::types::{Boundary, FileSpan, GetMessageResult, GetMessageStatus, MessageFilter};
use crate::util::property;
use bytes::Bytes;
use ringmq_remoting::message::record::{self, Decoded};
use ringmq_sync::LockExt;
use std::sync::Arc;

/// Hard cap on one get's bytes (upstream MAX_PULL_MSG_SIZE, 128 MiB).
const MAX_PULL_MSG_SIZE: usize = 128 * 1024 * 1024;

impl MessageStore {
    /// Reads up to `max_msg_nums` messages of a queue from logical `offset` (`store.md` §12).
    pub fn get_message(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_msg_nums: i32,
        max_total_bytes: usize,
        filter: &dyn MessageFilter,
    ) -> GetMessageResult {
        let s = self.shared();
        let Some(cq) = s.cqs.find(topic, queue_id) else {
            return GetMessageResult::empty(GetMessageStatus::NoMatchedLogicQueue, 0, 0, 0);
        };
        let (min, max) = (cq.min_offset(), cq.max_offset());
        if let Some(refused) = check_queue_offset(offset, min, max) {
            return refused;
        }
        let limits = ReadLimits::new(&s.config, max_msg_nums, max_total_bytes);
        let mut read = QueueRead::new(s, limits, offset, min, max);
        read.collect(&cq, offset, filter);
        read.finish()
    }

    /// Next logical offset of a queue (0 if unknown).
    pub fn max_offset_in_queue(&self, topic: &str, queue_id: i32) -> i64 {
        self.shared()
            .cqs
            .find(topic, queue_id)
            .map(|c| c.max_offset())
            .unwrap_or(0)
    }

    /// First logical offset still served (0 if unknown).
    pub fn min_offset_in_queue(&self, topic: &str, queue_id: i32) -> i64 {
        self.shared()
            .cqs
            .find(topic, queue_id)
            .map(|c| c.min_offset())
            .unwrap_or(0)
    }

    fn store_time_at(&self, unit: &CqUnit) -> Option<i64> {
        let rec = self
            .shared()
            .log
            .read_record_sized(unit.commit_log_offset as u64, unit.size as usize)?;
        let sys_flag = i32::from_be_bytes(
            rec.get(record::SYSFLAG_POSITION..record::SYSFLAG_POSITION + 4)?
                .try_into()
                .ok()?,
        );
        let p = record::store_timestamp_position(sys_flag);
        Some(i64::from_be_bytes(rec.get(p..p + 8)?.try_into().ok()?))
    }

    /// The queue offset of the first (Lower) / last (Upper) message stored at or around
    /// `timestamp_ms`: Lower = first with store time >= timestamp (max if none);
    /// Upper = last with store time <= timestamp (min if none).
    pub fn offset_in_queue_by_time(
        &self,
        topic: &str,
        queue_id: i32,
        timestamp_ms: i64,
        boundary: Boundary,
    ) -> i64 {
        let Some(cq) = self.shared().cqs.find(topic, queue_id) else {
            return 0;
        };
        let (mut lo, mut hi) = (cq.min_offset(), cq.max_offset());
        let time = |i: i64| cq.get_unit(i).and_then(|u| self.store_time_at(&u));
        match boundary {
            Boundary::Lower => {
                let end = hi;
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    match time(mid) {
                        Some(t) if t >= timestamp_ms => hi = mid,
                        Some(_) => lo = mid + 1,
                        None => lo = mid + 1,
                    }
                }
                lo.min(end)
            }
            Boundary::Upper => {
                let start = lo;
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    match time(mid) {
                        Some(t) if t <= timestamp_ms => lo = mid + 1,
                        _ => hi = mid,
                    }
                }
                (lo - 1).max(start)
            }
        }
    }

    /// Store time of the oldest message still in the queue.
    pub fn earliest_message_time(&self, topic: &str, queue_id: i32) -> Option<i64> {
        let cq = self.shared().cqs.find(topic, queue_id)?;
        let mut i = cq.min_offset();
        while i < cq.max_offset() {
            let u = cq.get_unit(i)?;
            if u != CqUnit::FILLER {
                return self.store_time_at(&u);
            }
            i += 1;
        }
        None
    }

    /// Store time of the message at a queue offset.
    pub fn message_store_time(&self, topic: &str, queue_id: i32, queue_offset: i64) -> Option<i64> {
        let u = self
            .shared()
            .cqs
            .find(topic, queue_id)?
            .get_unit(queue_offset)?;
        self.store_time_at(&u)
    }

    /// The whole record at a physical offset (VIEW_MESSAGE_BY_ID).
    pub fn look_message_by_offset(&self, physical_offset: i64) -> Option<Bytes> {
        if physical_offset < 0 {
            return None;
        }
        self.shared().log.read_record(physical_offset as u64)
    }

    /// The record at a physical offset with a known size.
    pub fn look_message_by_offset_and_size(
        &self,
        physical_offset: i64,
        size: i32,
    ) -> Option<Bytes> {
        if physical_offset < 0 || size <= 0 {
            return None;
        }
        self.shared()
            .log
            .read_record_sized(physical_offset as u64, size as usize)
    }

    /// Records of `topic` whose KEYS or UNIQ_KEY equal `key`, stored within
    /// `[begin_ms, end_ms]`, newest index files first; at most `max_num` (capped by
    /// `maxMsgsNumBatch`). Hash collisions are filtered out by checking the records.
    pub fn query_message(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin_ms: i64,
        end_ms: i64,
    ) -> Vec<Bytes> {
        let s = self.shared();
        let Some(index) = &s.index else {
            return Vec::new();
        };
        let max_num = max_num.min(s.config.max_msgs_num_batch).max(1);
        let offsets = index
            .lock_unpoisoned()
            .query(topic, key, max_num * 2, begin_ms, end_ms);
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for off in offsets {
            if out.len() >= max_num || !seen.insert(off) {
                continue;
            }
            let Some(rec) = s.log.read_record(off as u64) else {
                continue;
            };
            let ok = match record::decode_record(&rec, false) {
                Ok(Decoded::Message(r)) => {
                    r.topic_bytes == topic.as_bytes()
                        && (property(r.properties, "UNIQ_KEY") == Some(key)
                            || property(r.properties, "KEYS")
                                .is_some_and(|k| k.split(' ').any(|t| t == key)))
                }
                _ => false,
            };
            if ok {
                out.push(rec);
            }
        }
        out
    }
}

/// The empty result for an offset outside `[min, max)` or an empty queue; None when
/// `offset` can be read.
fn check_queue_offset(offset: i64, min: i64, max: i64) -> Option<GetMessageResult> {
    let (status, next) = if max == 0 {
        (GetMessageStatus::NoMessageInQueue, 0)
    } else if offset < min {
        (GetMessageStatus::OffsetTooSmall, min)
    } else if offset == max {
        (GetMessageStatus::OffsetOverflowOne, offset)
    } else if offset > max {
        (GetMessageStatus::OffsetOverflowBadly, max)
    } else {
        return None;
    };
    Some(GetMessageResult::empty(status, next, min, max))
}

/// Where one `get_message` stops, from the request and the configuration.
struct ReadLimits {
    max_msg_nums: usize,
    /// ConsumeQueue bytes scanned at most (`maxFilterMessageSize`, at least one unit per
    /// message asked for).
    max_filter_bytes: i64,
    max_pull_bytes: usize,
}

impl ReadLimits {
    fn new(cfg: &StoreConfig, max_msg_nums: i32, max_total_bytes: usize) -> Self {
        let max_msg_nums = max_msg_nums.max(1) as usize;
        ReadLimits {
            max_msg_nums,
            max_filter_bytes: cfg.max_filter_message_size.max(max_msg_nums * CQ_UNIT_SIZE) as i64,
            max_pull_bytes: max_total_bytes.clamp(100, MAX_PULL_MSG_SIZE),
        }
    }
}

/// One `get_message` in progress: the records taken so far and their file spans.
struct QueueRead<'a> {
    shared: &'a Shared,
    limits: ReadLimits,
    /// CommitLog max offset when the read started (what is "in memory" is measured from it).
    log_max: i64,
    res: GetMessageResult,
    spans: FileSpans,
    total_bytes: usize,
    max_phy_pulling: i64,
    /// After a record the log no longer holds: the start of the next segment; units below
    /// it are skipped without reading. `i64::MIN` when not skipping.
    next_phy_file_start: i64,
}

impl<'a> QueueRead<'a> {
    fn new(shared: &'a Shared, limits: ReadLimits, offset: i64, min: i64, max: i64) -> Self {
        QueueRead {
            shared,
            limits,
            log_max: shared.log.max_offset() as i64,
            res: GetMessageResult::empty(GetMessageStatus::NoMatchedMessage, offset, min, max),
            spans: FileSpans::default(),
            total_bytes: 0,
            max_phy_pulling: 0,
            next_phy_file_start: i64::MIN,
        }
    }

    /// Walks the queue from `offset` until a limit is reached or the queue ends.
    fn collect(&mut self, cq: &ConsumeQueue, offset: i64, filter: &dyn MessageFilter) {
        let max = self.res.max_offset;
        let mut i = offset;
        while i < max {
            if (i - offset) * CQ_UNIT_SIZE as i64 >= self.limits.max_filter_bytes {
                break;
            }
            let Some(unit) = cq.get_unit(i) else {
                if self.res.messages.is_empty() {
                    self.res.status = GetMessageStatus::OffsetFoundNull;
                    self.res.next_begin_offset = cq.roll_next_file(i);
                }
                break;
            };
            if unit == CqUnit::FILLER || !unit.is_valid() {
                i += 1;
                self.res.next_begin_offset = i;
                continue;
            }
            if self.is_full(&unit) {
                break;
            }
            self.max_phy_pulling = unit.commit_log_offset;
            i += 1;
            self.res.next_begin_offset = i;
            let skipped = self.next_phy_file_start != i64::MIN
                && unit.commit_log_offset < self.next_phy_file_start;
            if !skipped {
                self.take(&unit, i - 1, filter);
            }
        }
    }

    /// Whether the record of `unit` would exceed this read's count or byte limits.
    fn is_full(&self, unit: &CqUnit) -> bool {
        let in_mem =
            (self.log_max - unit.commit_log_offset) as u64 <= self.shared.mem_limit_bytes();
        batch_full(
            &self.shared.live,
            unit.size as usize,
            self.limits.max_msg_nums,
            self.limits.max_pull_bytes,
            self.total_bytes,
            self.res.messages.len(),
            in_mem,
        ) || self.total_bytes >= self.limits.max_pull_bytes
    }

    /// Reads the record of `unit` (at `queue_offset`) and keeps it if the filter matches.
    fn take(&mut self, unit: &CqUnit, queue_offset: i64, filter: &dyn MessageFilter) {
        if !filter.match_by_tags_code(Some(unit.tags_code)) {
            self.note_miss(GetMessageStatus::NoMatchedMessage);
            return;
        }
        let log = &self.shared.log;
        let Some(rec) = log.read_record_sized(unit.commit_log_offset as u64, unit.size as usize)
        else {
            self.note_miss(GetMessageStatus::MessageWasRemoving);
            self.next_phy_file_start = log.roll_next_file(unit.commit_log_offset as u64) as i64;
            return;
        };
        if !filter.match_by_record(&rec) {
            self.note_miss(GetMessageStatus::NoMatchedMessage);
            return;
        }
        self.total_bytes += rec.len();
        self.spans.add(
            log,
            self.res.messages.len(),
            unit.commit_log_offset as u64,
            rec.len(),
        );
        self.res.messages.push(rec);
        self.res.message_queue_offsets.push(queue_offset);
        self.res.status = GetMessageStatus::Found;
        self.next_phy_file_start = i64::MIN;
    }

    /// A unit that yields no record sets the status only while nothing has been taken.
    fn note_miss(&mut self, status: GetMessageStatus) {
        if self.total_bytes == 0 {
            self.res.status = status;
        }
    }

    fn finish(mut self) -> GetMessageResult {
        self.res.suggest_pulling_from_slave =
            (self.log_max - self.max_phy_pulling) as u64 > self.shared.mem_limit_bytes();
        self.res.file_spans = self.spans.spans;
        self.res
    }
}

/// Builds [`GetMessageResult::file_spans`] as records are taken: a record joins the last
/// span when it starts where that span ends, in the same segment, and directly follows
/// the span's last record in `messages`.
#[derive(Default)]
struct FileSpans {
    spans: Vec<FileSpan>,
    /// The segment of the last record looked up (consecutive records share it).
    segment: Option<Arc<MappedFile>>,
}

impl FileSpans {
    /// Records `messages[index]`, `len` bytes at CommitLog offset `offset`, if it may be
    /// sent from its file: in direct mode not while the write ring holds any of it (those
    /// bytes may not be in the file yet, and a partial last page is rewritten).
    fn add(&mut self, log: &CommitLog, index: usize, offset: u64, len: usize) {
        let end = offset + len as u64;
        if log.ring().is_some_and(|ring| ring.holds_any_before(end)) {
            return;
        }
        let cached = self
            .segment
            .as_ref()
            .is_some_and(|seg| seg.contains(offset) && !seg.is_removed());
        if !cached {
            self.segment = log.segment_for(offset);
        }
        let Some(seg) = self.segment.as_ref() else {
            return;
        };
        let pos = offset - seg.from_offset();
        if pos + len as u64 > seg.size() {
            return; // the read refuses such a record; never describe it as a file range
        }
        if let Some(last) = self.spans.last_mut() {
            let joins = Arc::ptr_eq(&last.segment, seg)
                && last.file_offset + last.len as u64 == pos
                && last.first_message + last.message_count == index;
            if joins {
                last.message_count += 1;
                last.len += len;
                return;
            }
        }
        self.spans.push(FileSpan {
            first_message: index,
            message_count: 1,
            segment: Arc::clone(seg),
            file_offset: pos,
            len,
        });
    }
}

fn batch_full(
    live: &LiveStoreSettings,
    size: usize,
    max_msg_nums: usize,
    max_pull: usize,
    total: usize,
    count: usize,
    in_mem: bool,
) -> bool {
    if total == 0 || count == 0 {
        return false;
    }
    if count + 1 > max_msg_nums || total + size > max_pull {
        return true;
    }
    let (max_bytes, max_count) = if in_mem {
        live.max_transfer_in_memory()
    } else {
        live.max_transfer_in_disk()
    };
    total + size > max_bytes || count > max_count.saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::small_config;
    use crate::types::{AcceptAll, PutMessageStatus, PutRequest, PutResult};
    use crate::{StoreConfig, WriteMode};
    use std::time::{Duration, Instant};

    /// Puts `count` records of 1-3 bodies' worth of bytes to topic FS queue 0.
    fn put_records(store: &MessageStore, count: usize) -> Vec<PutResult> {
        (0..count)
            .map(|i| {
                let props = format!("KEYS\u{1}k{i}\u{2}");
                let body = vec![b'a' + (i % 26) as u8; 40 + (i % 3) * 50];
                let out = crate::util::loopback_record("FS", 0, &body, props.as_bytes());
                // A small direct-mode ring may be full between flushes: retry the refusal
                // as clients do, for a bounded time.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                loop {
                    let r = store.put_blocking(PutRequest::new("FS", 0, 0, out.clone(), 1));
                    if r.status != PutMessageStatus::OsPageCacheBusy
                        || std::time::Instant::now() > deadline
                    {
                        assert_eq!(r.status, PutMessageStatus::PutOk, "put {i}");
                        break r;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
            })
            .collect()
    }

    /// Waits (bounded) until the reput stage has dispatched `count` records of FS/0.
    fn wait_dispatched(store: &MessageStore, count: i64) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while store.max_offset_in_queue("FS", 0) < count {
            assert!(Instant::now() < deadline, "reput did not catch up");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The spans' file bytes, in order, with the records outside every span from memory:
    /// what a zero-copy pull puts on the wire.
    fn wire_bytes(r: &GetMessageResult) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let mut out = Vec::new();
        let mut i = 0;
        let mut spans = r.file_spans.iter().peekable();
        while i < r.messages.len() {
            match spans.peek() {
                Some(span) if span.first_message == i => {
                    let mut buf = vec![0u8; span.len];
                    span.segment
                        .file()
                        .read_exact_at(&mut buf, span.file_offset)
                        .expect("span inside its file");
                    out.extend_from_slice(&buf);
                    i += span.message_count;
                    spans.next();
                }
                _ => {
                    out.extend_from_slice(&r.messages[i]);
                    i += 1;
                }
            }
        }
        assert!(spans.next().is_none(), "every span starts at a record");
        out
    }

    struct EvenKeysOnly;
    impl MessageFilter for EvenKeysOnly {
        fn match_by_tags_code(&self, _: Option<i64>) -> bool {
            true
        }
        fn match_by_record(&self, rec: &[u8]) -> bool {
            match record::decode_record(rec, false) {
                Ok(Decoded::Message(r)) => property(r.properties, "KEYS")
                    .and_then(|key| key.strip_prefix('k'))
                    .and_then(|n| n.parse::<u32>().ok())
                    .is_some_and(|n| n % 2 == 0),
                _ => false,
            }
        }
    }

    #[test]
    fn mmap_reads_describe_contiguous_records_as_file_spans() {
        let dir = crate::test_util::temp_dir("spans");
        let store = MessageStore::open(small_config(&dir)).unwrap();
        // 64 KiB segments and ~150-byte records: the log rolls over to a second segment.
        let puts = put_records(&store, 600);
        wait_dispatched(&store, 600);
        let concat = |r: &GetMessageResult| -> Vec<u8> {
            r.messages.iter().flat_map(|m| m.iter().copied()).collect()
        };

        let r = store.get_message("FS", 0, 0, 32, usize::MAX, &AcceptAll);
        assert_eq!(r.messages.len(), 32);
        assert_eq!(
            r.file_spans.len(),
            1,
            "contiguous records coalesce into one span"
        );
        let span = &r.file_spans[0];
        assert_eq!((span.first_message, span.message_count), (0, 32));
        assert_eq!(span.file_offset, 0);
        assert_eq!(span.len, r.buffer_total_size());
        assert_eq!(wire_bytes(&r), concat(&r));

        // A filter that drops every other record: one span per kept record.
        let r = store.get_message("FS", 0, 0, 32, usize::MAX, &EvenKeysOnly);
        assert!(r.messages.len() > 1);
        assert_eq!(r.file_spans.len(), r.messages.len());
        assert_eq!(wire_bytes(&r), concat(&r));

        // Across the segment boundary: one span per segment.
        let file_size = 64 * 1024;
        let first_in_second = puts
            .iter()
            .position(|p| p.wrote_offset >= file_size)
            .expect("the log rolled over") as i64;
        let r = store.get_message("FS", 0, first_in_second - 3, 6, usize::MAX, &AcceptAll);
        assert_eq!(r.messages.len(), 6);
        assert_eq!(r.file_spans.len(), 2, "{:?}", r.file_spans);
        assert_eq!(r.file_spans[0].message_count, 3);
        assert_eq!(r.file_spans[1].first_message, 3);
        assert_eq!(r.file_spans[1].file_offset, 0);
        assert!(!Arc::ptr_eq(
            &r.file_spans[0].segment,
            &r.file_spans[1].segment
        ));
        assert_eq!(wire_bytes(&r), concat(&r));

        // A span keeps its segment file open after retention deleted it.
        let span = r.file_spans[0].clone();
        drop(r);
        span.segment.destroy().unwrap();
        let mut buf = vec![0u8; span.len];
        use std::os::unix::fs::FileExt;
        span.segment
            .file()
            .read_exact_at(&mut buf, span.file_offset)
            .unwrap();
        store.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn direct_mode_keeps_write_ring_bytes_out_of_file_spans() {
        let dir = crate::test_util::temp_dir("spans-direct");
        let config = StoreConfig {
            write_mode: WriteMode::Direct,
            direct_write_ring_size_bytes: 64 * 1024,
            mapped_file_size_commit_log: 1024 * 1024,
            ..small_config(&dir)
        };
        let store = MessageStore::open(config).unwrap();
        // ~90 KiB through a 64 KiB ring: the oldest records have left it.
        put_records(&store, 600);
        wait_dispatched(&store, 600);
        let concat = |r: &GetMessageResult| -> Vec<u8> {
            r.messages.iter().flat_map(|m| m.iter().copied()).collect()
        };
        let old = store.get_message("FS", 0, 0, 32, usize::MAX, &AcceptAll);
        assert_eq!(
            old.file_spans.len(),
            1,
            "records the ring let go of are file spans"
        );
        assert_eq!(old.file_spans[0].message_count, 32);
        assert_eq!(wire_bytes(&old), concat(&old));
        let recent = store.get_message("FS", 0, 568, 32, usize::MAX, &AcceptAll);
        assert_eq!(recent.messages.len(), 32);
        assert!(
            recent.file_spans.is_empty(),
            "records the ring still holds are sent from memory: {:?}",
            recent.file_spans
        );
        store.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
