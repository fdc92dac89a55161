//! Orderly (FIFO) POP state (features.md §f.7): for each queue a group pops in order, the
//! batch last handed out, which of its messages were acked, their own next-visible times
//! and how often each was handed out. A queue is blocked for new pops while any un-acked
//! message of its batch is still invisible; acks move the consumer offset to the first
//! un-acked message. Kept in `config/consumerOrderInfo.json` in upstream's format, so a
//! store moved between brokers keeps its in-flight orderly pops.
//!
//! The table is sharded by queue; a shard's lock is the queue lock of upstream (a pop holds
//! it while it reads the queue, so an ack never interleaves with the pop of the same
//! queue).

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use ringmq_remoting::json::{self, ObjectBuilder, Value};
use ringmq_sync::LockExt;

use crate::persist;

const SHARDS: usize = 16;
/// Queues untouched this long lose their order state (upstream's 24 h clean span).
pub const CLEAN_AFTER_MS: i64 = 24 * 3600 * 1000;
/// Messages one orderly batch holds at most: one bit each in the acked mask.
pub const MAX_BATCH: usize = 64;

/// The batch last handed out from one queue (upstream's `OrderInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OrderInfo {
    pub pop_time_ms: i64,
    /// The invisible time of the pop; `None` in files written before it was kept.
    pub invisible_time_ms: Option<i64>,
    /// Absolute queue offsets of the batch, ascending (the file keeps the first and the
    /// others' distances from it).
    pub offsets: Vec<i64>,
    /// Per-offset next visible times set by CHANGE_MESSAGE_INVISIBLETIME.
    pub next_visible_ms: BTreeMap<i64, i64>,
    /// How often each offset was handed out before this batch (only counts above 0).
    pub consumed: BTreeMap<i64, i32>,
    pub last_consume_ms: i64,
    /// Bit i set = the i-th message of the batch was acked.
    pub acked_bits: u64,
    pub attempt_id: Option<String>,
}

/// What an orderly ack makes of the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    /// Commit this consumer offset.
    Commit(i64),
    /// The ack is for an older pop of the queue (its popTime differs): ignored.
    Stale,
    /// The offset is not in the batch (or there is no batch).
    NotInBatch,
}

impl OrderInfo {
    pub fn new(
        attempt_id: Option<String>,
        pop_time_ms: i64,
        invisible_time_ms: i64,
        offsets: Vec<i64>,
        now_ms: i64,
    ) -> Self {
        assert!(offsets.len() <= MAX_BATCH, "a batch has one acked bit each");
        Self {
            pop_time_ms,
            invisible_time_ms: Some(invisible_time_ms),
            offsets,
            last_consume_ms: now_ms,
            attempt_id,
            ..Default::default()
        }
    }

    fn is_acked(&self, index: usize) -> bool {
        index < 64 && self.acked_bits & (1u64 << index) != 0
    }

    /// When the un-acked message at `index` becomes visible again.
    fn visible_at_ms(&self, index: usize, default_invisible_ms: i64) -> i64 {
        let offset = self.offsets[index];
        self.next_visible_ms
            .get(&offset)
            .copied()
            .unwrap_or_else(|| {
                let invisible_ms = self.invisible_time_ms.unwrap_or(default_invisible_ms);
                self.pop_time_ms.saturating_add(invisible_ms)
            })
    }

    /// Whether a pop (with `attempt_id`, popping with `invisible_ms`) must skip the queue:
    /// some un-acked message of the batch is still invisible, and the pop is not a retry
    /// of the same attempt.
    pub fn blocks(&self, attempt_id: Option<&str>, invisible_ms: i64, now_ms: i64) -> bool {
        if self.offsets.is_empty() {
            return false;
        }
        if attempt_id.is_some() && self.attempt_id.as_deref() == attempt_id {
            return false;
        }
        self.unblock_at_ms(invisible_ms, now_ms) > now_ms
    }

    /// The earliest time the queue stops blocking: the first un-acked message's visible
    /// time if it is still ahead, else `now_ms`.
    pub fn unblock_at_ms(&self, invisible_ms: i64, now_ms: i64) -> i64 {
        (0..self.offsets.len())
            .filter(|&i| !self.is_acked(i))
            .map(|i| self.visible_at_ms(i, invisible_ms))
            .find(|&t| t > now_ms)
            .unwrap_or(now_ms)
    }

    /// The consumer offset the batch allows: its first un-acked message, or past its last.
    pub fn next_offset(&self) -> Option<i64> {
        let last = *self.offsets.last()?;
        Some(
            (0..self.offsets.len())
                .find(|&i| !self.is_acked(i))
                .map_or(last + 1, |i| self.offsets[i]),
        )
    }

    /// Acks `offset` of the pop at `pop_time_ms` (upstream's `commitAndNext`).
    pub fn commit_and_next(&mut self, offset: i64, pop_time_ms: i64, now_ms: i64) -> AckOutcome {
        if self.offsets.is_empty() {
            return AckOutcome::NotInBatch;
        }
        if pop_time_ms != self.pop_time_ms {
            return AckOutcome::Stale;
        }
        let Some(i) = self.offsets.iter().position(|&o| o == offset) else {
            return AckOutcome::NotInBatch;
        };
        self.acked_bits |= 1u64 << i;
        self.last_consume_ms = now_ms;
        AckOutcome::Commit(self.next_offset().expect("the batch is not empty"))
    }

    /// Sets `offset`'s next visible time (CHANGE_MESSAGE_INVISIBLETIME of an orderly
    /// message); false when the pop time does not match the batch.
    pub fn set_next_visible(&mut self, offset: i64, pop_time_ms: i64, at_ms: i64) -> bool {
        if pop_time_ms != self.pop_time_ms {
            return false;
        }
        self.next_visible_ms.insert(offset, at_ms);
        true
    }

    /// Carries the hand-out counts over from the batch this one replaces: a message handed
    /// out again counts once more, unless the pop retried the same attempt.
    pub fn merge_consumed(&mut self, previous: &OrderInfo) {
        if previous.attempt_id.is_some() && previous.attempt_id == self.attempt_id {
            self.consumed = previous.consumed.clone();
            return;
        }
        self.consumed = self
            .offsets
            .iter()
            .filter(|o| previous.offsets.contains(o))
            .map(|&o| (o, previous.consumed.get(&o).copied().unwrap_or(0) + 1))
            .collect();
    }

    /// How often `offset` was handed out before.
    pub fn consumed_times(&self, offset: i64) -> i32 {
        self.consumed.get(&offset).copied().unwrap_or(0)
    }

    /// The least count over the batch (0 when a message was never handed out before): the
    /// per-queue item old clients read.
    pub fn min_consumed_times(&self) -> i32 {
        if self.consumed.len() != self.offsets.len() {
            return 0;
        }
        self.consumed.values().copied().min().unwrap_or(0)
    }

    /// Upstream's JSON object (fastjson field names, sorted).
    pub fn to_value(&self) -> Value {
        let first = self.offsets.first().copied().unwrap_or(0);
        let compact: Vec<Value> = self
            .offsets
            .iter()
            .enumerate()
            .map(|(i, &o)| Value::int(if i == 0 { o } else { o - first }))
            .collect();
        ObjectBuilder::new()
            .field_opt("a", self.attempt_id.as_deref())
            .field("cm", Value::int(self.acked_bits as i64))
            .field_opt("i", self.invisible_time_ms.map(Value::int))
            .field("l", Value::int(self.last_consume_ms))
            .field("o", Value::Array(compact))
            .field(
                "oc",
                json::int_map_value(
                    self.consumed
                        .iter()
                        .map(|(&k, &v)| (k, Value::int(v.into()))),
                ),
            )
            .field(
                "ot",
                json::int_map_value(
                    self.next_visible_ms
                        .iter()
                        .map(|(&k, &v)| (k, Value::int(v))),
                ),
            )
            .field("popTime", Value::int(self.pop_time_ms))
            .build()
    }

    /// Reads upstream's JSON object; `None` when a field has the wrong shape.
    pub fn from_value(v: &Value) -> Option<Self> {
        let int = |k: &str| v.get_present(k).and_then(Value::as_i64);
        let compact: Vec<i64> = match v.get_present("o") {
            None => Vec::new(),
            Some(list) => list
                .as_array()?
                .iter()
                .map(Value::as_i64)
                .collect::<Option<_>>()?,
        };
        if compact.len() > MAX_BATCH {
            return None;
        }
        let first = compact.first().copied().unwrap_or(0);
        let offsets = compact
            .iter()
            .enumerate()
            .map(|(i, &d)| if i == 0 { d } else { first + d })
            .collect();
        let int_map = |k: &str| -> Option<BTreeMap<i64, i64>> {
            let Some(obj) = v.get_present(k) else {
                return Some(BTreeMap::new());
            };
            obj.as_object()?
                .iter()
                .map(|(k, v)| Some((k.key_text()?.parse().ok()?, v.as_i64()?)))
                .collect()
        };
        let consumed = int_map("oc")?
            .into_iter()
            .map(|(k, v)| Some((k, i32::try_from(v).ok()?)))
            .collect::<Option<_>>()?;
        Some(Self {
            pop_time_ms: int("popTime").unwrap_or(0),
            invisible_time_ms: int("i"),
            offsets,
            next_visible_ms: int_map("ot")?,
            consumed,
            last_consume_ms: int("l").unwrap_or(0),
            acked_bits: int("cm").unwrap_or(0) as u64,
            attempt_id: v
                .get_present("a")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
    }
}

/// `topic@group`, queue id: one orderly-popped queue.
type QueueKey = (String, i32);

/// Every queue's [`OrderInfo`] (upstream's `ConsumerOrderInfoManager`).
#[derive(Debug, Default)]
pub struct ConsumerOrderInfoManager {
    path: OnceLock<PathBuf>,
    /// The body last written (or read): an unchanged table is not written again.
    written: Mutex<String>,
    shards: [Mutex<HashMap<QueueKey, OrderInfo>>; SHARDS],
    hasher: std::collections::hash_map::RandomState,
}

impl ConsumerOrderInfoManager {
    /// Reads `consumerOrderInfo.json` (or its `.bak`) from `config_dir` and keeps the path
    /// for [`Self::persist`]. A file that cannot be read is reported, not fatal: orderly
    /// queues then start unblocked.
    pub fn load(&self, config_dir: &std::path::Path) {
        let path = config_dir.join("consumerOrderInfo.json");
        let read = persist::read_config_file(&path, |text| {
            json::parse_str(text).map_err(|e| e.to_string())
        });
        let _ = self.path.set(path.clone());
        *self.written.lock_unpoisoned() = self.encode();
        let value = match read {
            Ok(Some(v)) => v,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(path = %path.display(), "orderly POP state not read: {e}");
                return;
            }
        };
        let mut loaded = 0usize;
        let tables = value.get_present("table").and_then(Value::as_object);
        for (key, queues) in tables.unwrap_or(&[]) {
            let (Some(key), Some(queues)) = (key.key_text(), queues.as_object()) else {
                continue;
            };
            for (queue, info) in queues {
                let queue_id = queue.key_text().and_then(|q| q.parse::<i32>().ok());
                if let (Some(queue_id), Some(info)) = (queue_id, OrderInfo::from_value(info)) {
                    self.with_queue_key((key.to_string(), queue_id), |slot| *slot = Some(info));
                    loaded += 1;
                }
            }
        }
        *self.written.lock_unpoisoned() = self.encode();
        tracing::info!(queues = loaded, "orderly POP state loaded");
    }

    fn shard(&self, key: &QueueKey) -> &Mutex<HashMap<QueueKey, OrderInfo>> {
        &self.shards[self.hasher.hash_one(key) as usize % SHARDS]
    }

    fn with_queue_key<R>(&self, key: QueueKey, f: impl FnOnce(&mut Option<OrderInfo>) -> R) -> R {
        let mut shard = self.shard(&key).lock_unpoisoned();
        let mut slot = shard.remove(&key);
        let r = f(&mut slot);
        if let Some(info) = slot {
            shard.insert(key, info);
        }
        r
    }

    /// Runs `f` on the queue's state (absent = never popped in order, or cleared) under
    /// the queue's lock; `f` may replace or clear it.
    pub fn with_queue<R>(
        &self,
        topic: &str,
        group: &str,
        queue_id: i32,
        f: impl FnOnce(&mut Option<OrderInfo>) -> R,
    ) -> R {
        let key = (
            crate::metadata::consumer_offset::offset_key(topic, group),
            queue_id,
        );
        self.with_queue_key(key, f)
    }

    /// Forgets queues untouched for [`CLEAN_AFTER_MS`] and those `keep` rejects
    /// (`topic@group`, queue id), as upstream's clean before each write.
    pub fn clean(&self, now_ms: i64, keep: &dyn Fn(&str, i32) -> bool) {
        for shard in &self.shards {
            shard.lock_unpoisoned().retain(|(key, queue_id), info| {
                now_ms - info.last_consume_ms <= CLEAN_AFTER_MS && keep(key, *queue_id)
            });
        }
    }

    /// The file body: `{"table":{"topic@group":{queueId:{...}}}}` with bare queue ids, as
    /// fastjson writes it.
    pub fn encode(&self) -> String {
        let mut all: BTreeMap<String, BTreeMap<i32, Value>> = BTreeMap::new();
        for shard in &self.shards {
            for ((key, queue_id), info) in shard.lock_unpoisoned().iter() {
                all.entry(key.clone())
                    .or_default()
                    .insert(*queue_id, info.to_value());
            }
        }
        let table = json::map_value(all.into_iter().map(|(key, queues)| {
            let queues = json::int_map_value(queues.into_iter().map(|(q, v)| (i64::from(q), v)));
            (Value::str(key), queues)
        }));
        ObjectBuilder::new()
            .field("table", table)
            .build()
            .to_fastjson()
    }

    /// Writes the file (when [`Self::load`] named one) if the table changed since it was
    /// last written or read: the housekeeping calls this every few seconds, and most
    /// brokers never pop in order.
    pub fn persist(&self) -> std::io::Result<()> {
        let Some(path) = self.path.get() else {
            return Ok(());
        };
        let body = self.encode();
        let mut written = self.written.lock_unpoisoned();
        if *written == body {
            return Ok(());
        }
        persist::write_config_file(path, &body)?;
        *written = body;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(offsets: &[i64]) -> OrderInfo {
        OrderInfo::new(Some("a1".into()), 1_000, 10_000, offsets.to_vec(), 1_000)
    }

    #[test]
    fn a_batch_blocks_until_acked_or_visible_again() {
        let mut info = batch(&[5, 6, 9]);
        assert!(info.blocks(None, 10_000, 2_000));
        assert!(
            !info.blocks(Some("a1"), 10_000, 2_000),
            "a retry of the attempt"
        );
        assert!(info.blocks(Some("a2"), 10_000, 2_000));
        assert!(!info.blocks(None, 10_000, 11_000), "invisible time over");
        assert_eq!(info.commit_and_next(6, 1_000, 2_000), AckOutcome::Commit(5));
        assert_eq!(info.commit_and_next(5, 1_000, 2_000), AckOutcome::Commit(9));
        assert!(info.blocks(None, 10_000, 2_000));
        assert_eq!(
            info.commit_and_next(9, 1_000, 2_000),
            AckOutcome::Commit(10)
        );
        assert!(!info.blocks(None, 10_000, 2_000), "all acked");
        assert_eq!(
            info.commit_and_next(7, 1_000, 2_000),
            AckOutcome::NotInBatch
        );
        assert_eq!(info.commit_and_next(9, 999, 2_000), AckOutcome::Stale);
    }

    #[test]
    fn a_changed_invisible_time_moves_only_its_message() {
        let mut info = batch(&[5, 6]);
        assert!(info.set_next_visible(5, 1_000, 30_000));
        assert!(!info.set_next_visible(6, 7, 30_000), "another pop's handle");
        assert_eq!(info.unblock_at_ms(10_000, 2_000), 30_000);
        assert_eq!(info.commit_and_next(5, 1_000, 2_000), AckOutcome::Commit(6));
        assert_eq!(info.unblock_at_ms(10_000, 2_000), 11_000);
        assert_eq!(info.unblock_at_ms(10_000, 12_000), 12_000);
    }

    #[test]
    fn hand_out_counts_grow_per_new_attempt() {
        let first = batch(&[5, 6]);
        let mut second = OrderInfo::new(Some("a2".into()), 20_000, 10_000, vec![5, 6, 7], 0);
        second.merge_consumed(&first);
        assert_eq!((second.consumed_times(5), second.consumed_times(7)), (1, 0));
        assert_eq!(second.min_consumed_times(), 0, "7 is new");
        let mut third = OrderInfo::new(Some("a3".into()), 40_000, 10_000, vec![5, 6], 0);
        third.merge_consumed(&second);
        assert_eq!(
            (third.consumed_times(5), third.min_consumed_times()),
            (2, 2)
        );
        let mut retry = OrderInfo::new(Some("a3".into()), 41_000, 10_000, vec![5, 6], 0);
        retry.merge_consumed(&third);
        assert_eq!(
            retry.consumed_times(5),
            2,
            "same attempt: not counted again"
        );
    }

    #[test]
    fn the_file_is_upstreams_and_round_trips() {
        let m = ConsumerOrderInfoManager::default();
        let mut info = batch(&[100, 101, 104]);
        info.set_next_visible(101, 1_000, 50_000);
        info.consumed.insert(100, 2);
        info.acked_bits = 0b10;
        m.with_queue("T", "G", 3, |slot| *slot = Some(info.clone()));
        let text = m.encode();
        assert_eq!(
            text,
            "{\"table\":{\"T@G\":{3:{\"a\":\"a1\",\"cm\":2,\"i\":10000,\"l\":1000,\
             \"o\":[100,1,4],\"oc\":{100:2},\"ot\":{101:50000},\"popTime\":1000}}}}"
        );
        let dir = std::env::temp_dir().join(format!("ringmq-order-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("consumerOrderInfo.json"), &text).unwrap();
        let back = ConsumerOrderInfoManager::default();
        back.load(&dir);
        assert_eq!(back.with_queue("T", "G", 3, |s| s.clone()), Some(info));
        back.clean(1_000 + CLEAN_AFTER_MS + 1, &|_, _| true);
        assert_eq!(back.with_queue("T", "G", 3, |s| s.clone()), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
