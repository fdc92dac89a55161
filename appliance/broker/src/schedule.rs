//! Delay-level (scheduled) messages, features.md §b: the `messageDelayLevel` grammar, the put
//! hook that parks a `DELAY`-level message in `SCHEDULE_TOPIC_XXXX` queue `level − 1`, and
//! [`ScheduleMessageService`], which re-puts each parked message to its real topic and queue
//! once its level's delay has passed, keeping per-level progress in `config/delayOffset.json`.
//!
//! The service is control-plane work: one thread (never a network or store core) keeps a
//! next-due time per level and runs whichever level is due. Within a level, messages are
//! stored in time order, so the head of the queue decides: not due yet → come back in
//! [`POLL_INTERVAL_MS`]. Each re-put is synchronous (wait for the store's answer) and the
//! level's offset only advances past a message once the store took it, so a crash re-delivers
//! at most the in-flight message and never delivers early. Offsets are persisted every
//! `flushDelayOffsetInterval` ([`FLUSH_DELAY_OFFSET_INTERVAL_MS`]) and at [`ScheduleMessageService::stop`].
//!
//! Testing: [`ScheduleMessageService::deliver_due`] runs one level at a given "now" without
//! the thread, and [`Clock`] can be injected for the threaded service.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::BytesMut;
use ringmq_remoting::message::properties::{keys, MessageProperties};
use ringmq_remoting::message::record::{self, Decoded, RecordFields};
use ringmq_store::{AcceptAll, GetMessageStatus, PutMessageStatus, PutRequest, PutResult};

use crate::context::BrokerContext;
use crate::metadata::topic_config::{SCHEDULE_TOPIC, TRANS_HALF_TOPIC};
use ringmq_sync::LockExt;

/// Most delay levels a `messageDelayLevel` string may define (upstream's default has 18).
pub const MAX_DELAY_LEVELS: usize = 64;
/// Longest single delay accepted (30 days): longer values are almost surely a unit typo.
pub const MAX_DELAY_MS: u64 = 30 * 86_400_000;
/// Wait before the first run after start (upstream: 1000 ms).
pub const FIRST_DELAY_MS: i64 = 1000;
/// Re-check period of a level that is caught up or whose head is not due yet.
pub const POLL_INTERVAL_MS: i64 = 100;
/// Back-off after an unexpected failure of a level's task (upstream: 10 s).
pub const ERROR_BACKOFF_MS: i64 = 10_000;
/// Progress persistence period (upstream `flushDelayOffsetInterval`).
pub const FLUSH_DELAY_OFFSET_INTERVAL_MS: i64 = 10_000;
/// Messages one level delivers per turn before yielding to the other levels.
pub const MAX_DELIVER_PER_TURN: usize = 1024;
/// Records read from a schedule queue per store call.
const READ_BATCH_MSGS: i32 = 32;
const READ_BATCH_BYTES: usize = 4 * 1024 * 1024;
/// How long one re-put may take before the level retries it.
const PUT_TIMEOUT_MS: u64 = 10_000;

/// Parses `messageDelayLevel`: space-separated `<integer><s|m|h|d>` tokens, token *i*
/// (0-based) being level *i + 1*. Returns each level's delay in ms.
pub fn parse_delay_levels(text: &str) -> Result<Vec<u64>, String> {
    let mut levels = Vec::new();
    for token in text.split_whitespace() {
        let Some(unit) = token.chars().last() else {
            continue;
        };
        let unit_ms: u64 = match unit {
            's' => 1000,
            'm' => 60_000,
            'h' => 3_600_000,
            'd' => 86_400_000,
            _ => {
                return Err(format!(
                    "messageDelayLevel token {token:?} must end in s, m, h or d"
                ))
            }
        };
        let digits = &token[..token.len() - unit.len_utf8()];
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("messageDelayLevel token {token:?} is not <integer><unit>"))?;
        let ms = n
            .checked_mul(unit_ms)
            .filter(|ms| *ms <= MAX_DELAY_MS)
            .ok_or_else(|| {
                format!("messageDelayLevel token {token:?} exceeds the {MAX_DELAY_MS} ms maximum")
            })?;
        levels.push(ms);
        if levels.len() > MAX_DELAY_LEVELS {
            return Err(format!(
                "messageDelayLevel defines more than {MAX_DELAY_LEVELS} levels"
            ));
        }
    }
    if levels.is_empty() {
        return Err("messageDelayLevel defines no level".to_string());
    }
    Ok(levels)
}

/// Where the put hook sent a delay-level message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parked {
    pub level: i32,
    pub topic: String,
    pub queue_id: i32,
}

/// The put hook (features.md §b.1): for `delay_level > 0`, clamps the level to the configured
/// maximum (rewriting `DELAY` when clamped), records `REAL_TOPIC` / `REAL_QID` and returns the
/// schedule queue to store into. `None` (properties untouched) when there is no delay.
/// Transactional half/rollback messages must not come here (the caller checks the type).
pub fn park_delayed(
    props: &mut MessageProperties,
    topic: &str,
    queue_id: i32,
    delay_level: i32,
    max_level: usize,
) -> Option<Parked> {
    if delay_level <= 0 || max_level == 0 {
        return None;
    }
    let max = i32::try_from(max_level).unwrap_or(i32::MAX);
    let level = delay_level.min(max);
    // Values are plain ASCII digits and a validated topic name, so insert cannot fail.
    if level != delay_level {
        let _ = props.insert(keys::DELAY, &level.to_string());
    }
    let _ = props.insert(keys::REAL_TOPIC, topic);
    let _ = props.insert(keys::REAL_QID, &queue_id.to_string());
    Some(Parked {
        level,
        topic: SCHEDULE_TOPIC.to_string(),
        queue_id: level - 1,
    })
}

/// The tagsCode the dispatcher writes for a `SCHEDULE_TOPIC_XXXX` unit: the deliver time.
pub fn deliver_timestamp_ms(store_timestamp_ms: i64, level: i32, levels_ms: &[u64]) -> i64 {
    let idx = (level.max(1) as usize).min(levels_ms.len().max(1)) - 1;
    store_timestamp_ms.saturating_add(levels_ms.get(idx).copied().unwrap_or(0) as i64)
}

pub use crate::clock::{Clock, SystemClock};

/// What one turn of a level did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnOutcome {
    /// Messages re-put to their real topic this turn.
    pub delivered: usize,
    /// Messages skipped (unreadable, no REAL_TOPIC, half-topic targets).
    pub skipped: usize,
    /// When this level should run again.
    pub next_run_ms: i64,
}

struct Shared {
    ctx: Arc<BrokerContext>,
    clock: Arc<dyn Clock>,
    levels_ms: Vec<u64>,
    /// Next schedule-queue offset to process, per level (index = level − 1).
    offsets: Vec<AtomicI64>,
    running: AtomicBool,
    /// Wakes the timer thread for stop.
    wake: (Mutex<bool>, Condvar),
}

/// The delay-level delivery service. Master only: the broker starts it when it is (or acts
/// as) master and stops it on demotion and at shutdown.
pub struct ScheduleMessageService {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl ScheduleMessageService {
    /// A service over the broker's store and `delayOffset.json` manager with the system clock.
    pub fn new(ctx: Arc<BrokerContext>) -> Self {
        Self::with_clock(ctx, Arc::new(SystemClock))
    }

    pub fn with_clock(ctx: Arc<BrokerContext>, clock: Arc<dyn Clock>) -> Self {
        let levels_ms = ctx.delay_levels_ms.clone();
        let offsets = (0..levels_ms.len()).map(|_| AtomicI64::new(0)).collect();
        let service = Self {
            shared: Arc::new(Shared {
                ctx,
                clock,
                levels_ms,
                offsets,
                running: AtomicBool::new(false),
                wake: (Mutex::new(false), Condvar::new()),
            }),
            thread: Mutex::new(None),
        };
        service.load_offsets();
        service
    }

    /// Reads the persisted offsets and corrects each into its queue's [min, max] (a store
    /// that lost its tail, or a fresh store under an old `delayOffset.json`).
    fn load_offsets(&self) {
        let s = &self.shared;
        for (i, slot) in s.offsets.iter().enumerate() {
            let level = i as i32 + 1;
            let saved = s.ctx.delay_offsets.offset(level).unwrap_or(0);
            let min = s.ctx.store.min_offset_in_queue(SCHEDULE_TOPIC, level - 1);
            let max = s.ctx.store.max_offset_in_queue(SCHEDULE_TOPIC, level - 1);
            let corrected = saved.clamp(min, max.max(min));
            if corrected != saved {
                tracing::warn!(
                    level,
                    saved,
                    min,
                    max,
                    corrected,
                    "delay offset outside its schedule queue; corrected"
                );
            }
            slot.store(corrected, Ordering::SeqCst);
        }
    }

    pub fn levels_ms(&self) -> &[u64] {
        &self.shared.levels_ms
    }

    /// Next schedule-queue offset of `level` (1-based).
    pub fn offset(&self, level: i32) -> Option<i64> {
        let idx = usize::try_from(level.checked_sub(1)?).ok()?;
        self.shared
            .offsets
            .get(idx)
            .map(|o| o.load(Ordering::SeqCst))
    }

    /// Copies the in-memory offsets into the manager and writes `delayOffset.json`.
    pub fn persist(&self) {
        self.shared.persist();
    }

    /// Runs `level` once as of `now_ms`: delivers every due message from its current offset
    /// (at most [`MAX_DELIVER_PER_TURN`]) and says when to come back.
    pub fn deliver_due(&self, level: i32, now_ms: i64) -> TurnOutcome {
        self.shared.run_level(level, now_ms)
    }

    /// Starts the timer thread (idempotent). Refuses on a slave, which only mirrors offsets.
    pub fn start(&self) -> Result<(), String> {
        if !self.shared.ctx.is_master() {
            return Err("the schedule service runs on the master only".to_string());
        }
        if self.shared.running.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        *self.shared.wake.0.lock_unpoisoned() = false;
        self.load_offsets();
        let shared = self.shared.clone();
        let handle = std::thread::Builder::new()
            .name("ringmq-schedule".to_string())
            .spawn(move || shared.timer_loop())
            .map_err(|e| format!("cannot start the schedule thread: {e}"))?;
        *self.thread.lock_unpoisoned() = Some(handle);
        tracing::info!(
            levels = self.shared.levels_ms.len(),
            "schedule message service started"
        );
        Ok(())
    }

    /// Stops the thread (after its current message) and persists progress.
    pub fn stop(&self) {
        if !self.shared.running.swap(false, Ordering::SeqCst) {
            return;
        }
        {
            let (lock, cv) = &self.shared.wake;
            *lock.lock_unpoisoned() = true;
            cv.notify_all();
        }
        if let Some(handle) = self.thread.lock_unpoisoned().take() {
            let _ = handle.join();
        }
        self.shared.persist();
        tracing::info!("schedule message service stopped; delay offsets persisted");
    }
}

impl Drop for ScheduleMessageService {
    fn drop(&mut self) {
        self.stop();
    }
}

enum Step {
    Delivered,
    Skipped,
    /// The store refused or timed out: retry this message later.
    Retry,
}

impl Shared {
    fn persist(&self) {
        for (i, o) in self.offsets.iter().enumerate() {
            self.ctx
                .delay_offsets
                .update(i as i32 + 1, o.load(Ordering::SeqCst));
        }
        if let Err(e) = self.ctx.delay_offsets.persist() {
            tracing::error!("cannot persist delayOffset.json: {e}; progress since the last flush will be redelivered after a crash");
        }
    }

    fn timer_loop(self: Arc<Self>) {
        let start = self.clock.now_ms();
        let mut next_due: Vec<i64> = vec![start + FIRST_DELAY_MS; self.levels_ms.len()];
        let mut next_flush = start + FLUSH_DELAY_OFFSET_INTERVAL_MS;
        while self.running.load(Ordering::SeqCst) {
            let now = self.clock.now_ms();
            for (i, due) in next_due.iter_mut().enumerate() {
                if !self.running.load(Ordering::SeqCst) {
                    break;
                }
                if *due <= now {
                    *due = self.run_level(i as i32 + 1, now).next_run_ms;
                }
            }
            if now >= next_flush {
                self.persist();
                next_flush = now + FLUSH_DELAY_OFFSET_INTERVAL_MS;
            }
            let earliest = next_due
                .iter()
                .copied()
                .min()
                .unwrap_or(now + POLL_INTERVAL_MS)
                .min(next_flush);
            let wait_ms = (earliest - self.clock.now_ms()).clamp(1, POLL_INTERVAL_MS);
            let (lock, cv) = &self.wake;
            let stopped = lock.lock_unpoisoned();
            if *stopped {
                break;
            }
            let _ = cv.wait_timeout(stopped, Duration::from_millis(wait_ms as u64));
        }
    }

    fn run_level(&self, level: i32, now_ms: i64) -> TurnOutcome {
        let mut out = TurnOutcome {
            delivered: 0,
            skipped: 0,
            next_run_ms: now_ms + POLL_INTERVAL_MS,
        };
        let Some(idx) = usize::try_from(level - 1)
            .ok()
            .filter(|i| *i < self.offsets.len())
        else {
            return out;
        };
        let delay_ms = self.levels_ms[idx] as i64;
        let queue_id = level - 1;
        let store = &self.ctx.store;
        while out.delivered + out.skipped < MAX_DELIVER_PER_TURN {
            let offset = self.offsets[idx].load(Ordering::SeqCst);
            let got = store.get_message(
                SCHEDULE_TOPIC,
                queue_id,
                offset,
                READ_BATCH_MSGS,
                READ_BATCH_BYTES,
                &AcceptAll,
            );
            match got.status {
                GetMessageStatus::Found => {}
                GetMessageStatus::OffsetTooSmall | GetMessageStatus::OffsetOverflowBadly => {
                    // Expired files removed the head, or the store lost its tail: move into range.
                    let corrected = if got.status == GetMessageStatus::OffsetTooSmall {
                        got.min_offset
                    } else {
                        got.max_offset
                    };
                    tracing::warn!(
                        level,
                        offset,
                        corrected,
                        "schedule offset out of range; corrected"
                    );
                    self.offsets[idx].store(corrected, Ordering::SeqCst);
                    return out;
                }
                GetMessageStatus::NoMatchedMessage | GetMessageStatus::MessageWasRemoving
                    if got.next_begin_offset > offset =>
                {
                    self.offsets[idx].store(got.next_begin_offset, Ordering::SeqCst);
                    continue;
                }
                _ => return out,
            }
            for (i, rec) in got.messages.iter().enumerate() {
                let unit_offset = got
                    .message_queue_offsets
                    .get(i)
                    .copied()
                    .unwrap_or(offset + i as i64);
                let decoded = match record::decode_record(rec, false) {
                    Ok(Decoded::Message(r)) => r,
                    _ => {
                        tracing::error!(
                            level,
                            unit_offset,
                            "unreadable record in the schedule queue; skipped"
                        );
                        self.offsets[idx].store(unit_offset + 1, Ordering::SeqCst);
                        out.skipped += 1;
                        continue;
                    }
                };
                let mut deliver_at = decoded.store_timestamp_ms.saturating_add(delay_ms);
                // Clock-skew guard: a deliver time further out than the level's delay means
                // the store time came from a clock ahead of ours; deliver now.
                if deliver_at > now_ms.saturating_add(delay_ms) {
                    deliver_at = now_ms;
                }
                if deliver_at > now_ms {
                    out.next_run_ms = (deliver_at).min(now_ms + POLL_INTERVAL_MS);
                    return out;
                }
                match self.deliver(&decoded, level) {
                    Step::Delivered => out.delivered += 1,
                    Step::Skipped => out.skipped += 1,
                    Step::Retry => return out,
                }
                self.offsets[idx].store(unit_offset + 1, Ordering::SeqCst);
            }
            if got.messages.is_empty() {
                return out;
            }
        }
        // Full turn: others get a go, then this level continues right away.
        out.next_run_ms = now_ms;
        out
    }

    /// Re-puts one parked message to its real topic and queue and waits for the store.
    fn deliver(&self, rec: &record::StoredRecord<'_>, level: i32) -> Step {
        let mut props = MessageProperties::parse_bytes(rec.properties);
        let (Some(real_topic), Some(real_qid)) = (
            props.get(keys::REAL_TOPIC).map(str::to_string),
            props
                .get(keys::REAL_QID)
                .and_then(|q| q.parse::<i32>().ok()),
        ) else {
            tracing::error!(
                level,
                offset = rec.queue_offset,
                "parked message without REAL_TOPIC/REAL_QID; skipped"
            );
            return Step::Skipped;
        };
        if real_topic == TRANS_HALF_TOPIC {
            tracing::error!(
                level,
                offset = rec.queue_offset,
                "[BUG] a half message reached the schedule topic; dropped"
            );
            return Step::Skipped;
        }
        props.remove(keys::DELAY);
        props.remove(keys::TIMER_DELIVER_MS);
        props.remove(keys::TIMER_DELAY_SEC);
        let _ = props.insert(keys::WAIT, "false");
        let mut prop_bytes = Vec::with_capacity(rec.properties.len() + 16);
        props.encode_into(&mut prop_bytes);
        let fields = RecordFields {
            queue_id: real_qid,
            flag: rec.flag,
            queue_offset: 0,
            physical_offset: 0,
            sys_flag: rec.sys_flag,
            born_timestamp_ms: rec.born_timestamp_ms,
            born_host: rec.born_host,
            store_timestamp_ms: 0,
            store_host: self.ctx.store_host,
            reconsume_times: rec.reconsume_times,
            prepared_transaction_offset: rec.prepared_transaction_offset,
            body: rec.body,
            topic: &real_topic,
            properties: &prop_bytes,
        };
        let mut records = BytesMut::with_capacity(fields.encoded_size());
        if let Err(e) = record::encode_record(&fields, &mut records) {
            tracing::error!(
                level,
                topic = real_topic,
                "parked message cannot be re-encoded ({e}); skipped"
            );
            return Step::Skipped;
        }
        let request = PutRequest {
            topic: real_topic.clone(),
            queue_id: real_qid,
            sys_flag: rec.sys_flag,
            records,
            record_count: 1,
            wait_store_msg_ok: false,
        };
        let (tx, rx) = mpsc::channel::<PutResult>();
        self.ctx.store.put(
            request,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        match rx.recv_timeout(Duration::from_millis(PUT_TIMEOUT_MS)) {
            Ok(r) if r.status == PutMessageStatus::PutOk => Step::Delivered,
            Ok(r) => {
                tracing::warn!(
                    level,
                    topic = real_topic,
                    status = r.status.name(),
                    "delayed message re-put refused; retrying"
                );
                Step::Retry
            }
            Err(_) => {
                tracing::warn!(
                    level,
                    topic = real_topic,
                    "delayed message re-put got no answer in {PUT_TIMEOUT_MS} ms; retrying"
                );
                Step::Retry
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;
    use crate::test_support::{run, test_context};
    use ringmq_remoting::message::properties;
    use ringmq_remoting::RemotingCommand;
    use ringmq_store::{MemStore, StoreApi};

    fn send_delayed(ctx: &Arc<BrokerContext>, topic: &str, level: i32, body: &str) {
        let mut r = RemotingCommand::request(310, 1);
        let props = format!("DELAY\u{1}{level}\u{2}TAGS\u{1}T1\u{2}KEYS\u{1}K\u{2}");
        for (k, v) in [
            ("a", "PG"),
            ("b", topic),
            ("c", "TBW102"),
            ("d", "4"),
            ("e", "1"),
            ("f", "0"),
            ("g", "1700000000000"),
            ("h", "0"),
            ("i", props.as_str()),
        ] {
            r.ext_fields.insert(k, v);
        }
        let resp = run(ctx, r.with_body(body.as_bytes().to_vec()));
        assert_eq!(resp.command.code, 0, "{:?}", resp.command.remark);
    }

    fn parked_store_time(store: &MemStore, level: i32, offset: i64) -> i64 {
        let got = store.get_message(SCHEDULE_TOPIC, level - 1, offset, 1, 1 << 20, &AcceptAll);
        let Ok(Decoded::Message(r)) = record::decode_record(&got.messages[0], false) else {
            panic!()
        };
        r.store_timestamp_ms
    }

    struct FixedClock(AtomicI64);
    impl Clock for FixedClock {
        fn now_ms(&self) -> i64 {
            self.0.load(Ordering::SeqCst)
        }
    }

    #[test]
    fn parses_levels_like_upstream() {
        let d = parse_delay_levels(crate::config::DEFAULT_MESSAGE_DELAY_LEVEL).unwrap();
        assert_eq!(d.len(), 18);
        assert_eq!((d[0], d[2], d[4], d[17]), (1000, 10_000, 60_000, 7_200_000));
        assert_eq!(parse_delay_levels("1d").unwrap(), vec![86_400_000]);
        for bad in ["", "1x", "s", "1.5s", "-1s", "1é", "99999999999999d", "31d"] {
            assert!(parse_delay_levels(bad).is_err(), "{bad:?}");
        }
        let many = vec!["1s"; MAX_DELAY_LEVELS + 1].join(" ");
        assert!(parse_delay_levels(&many).is_err());
    }

    #[test]
    fn put_hook_parks_and_clamps() {
        let mut p = MessageProperties::parse("DELAY\u{1}40\u{2}");
        let parked = park_delayed(&mut p, "TopicA", 3, 40, 18).unwrap();
        assert_eq!(
            parked,
            Parked {
                level: 18,
                topic: SCHEDULE_TOPIC.into(),
                queue_id: 17
            }
        );
        assert_eq!(p.get("DELAY"), Some("18"));
        assert_eq!(p.get("REAL_TOPIC"), Some("TopicA"));
        assert_eq!(p.get("REAL_QID"), Some("3"));
        let mut q = MessageProperties::new();
        assert!(park_delayed(&mut q, "T", 0, 0, 18).is_none());
        assert!(q.is_empty());
        assert_eq!(deliver_timestamp_ms(1000, 3, &[1000, 5000, 10_000]), 11_000);
        assert_eq!(deliver_timestamp_ms(1000, 99, &[1000, 5000]), 6000);
    }

    #[test]
    fn delivers_only_when_due_and_restores_real_topic() {
        let (ctx, store) = test_context(BrokerConfig::default());
        send_delayed(&ctx, "TopicA", 3, "m0");
        send_delayed(&ctx, "TopicA", 3, "m1");
        let svc = ScheduleMessageService::new(ctx.clone());
        let stored = parked_store_time(&store, 3, 0);
        // One ms before the 10 s of level 3: nothing moves.
        let out = svc.deliver_due(3, stored + 9_999);
        assert_eq!(out.delivered, 0);
        assert!(out.next_run_ms <= stored + 10_000);
        assert_eq!(store.max_offset_in_queue("TopicA", 1), 0);
        assert_eq!(svc.offset(3), Some(0));
        // Due (skew guard cannot trigger: now is after the store time).
        let second_stored = parked_store_time(&store, 3, 1);
        let out = svc.deliver_due(3, second_stored + 10_000);
        assert_eq!(out.delivered, 2);
        assert_eq!(svc.offset(3), Some(2));
        let got = store.get_message("TopicA", 1, 0, 10, 1 << 20, &AcceptAll);
        assert_eq!(got.messages.len(), 2);
        let Ok(Decoded::Message(r)) = record::decode_record(&got.messages[0], true) else {
            panic!()
        };
        assert_eq!(r.body, b"m0");
        assert_eq!(r.queue_id, 1);
        let props = std::str::from_utf8(r.properties).unwrap();
        assert_eq!(properties::find(props, "DELAY"), None);
        assert_eq!(properties::find(props, "REAL_TOPIC"), Some("TopicA"));
        assert_eq!(properties::find(props, "REAL_QID"), Some("1"));
        assert_eq!(properties::find(props, "TAGS"), Some("T1"));
        assert_eq!(properties::find(props, "WAIT"), Some("false"));
        assert_eq!(r.born_timestamp_ms, 1_700_000_000_000);
        // Caught up: nothing more.
        assert_eq!(svc.deliver_due(3, second_stored + 20_000).delivered, 0);
    }

    #[test]
    fn refused_put_keeps_offset_and_retries() {
        let (ctx, store) = test_context(BrokerConfig::default());
        send_delayed(&ctx, "TopicB", 1, "x");
        let svc = ScheduleMessageService::new(ctx.clone());
        let t = parked_store_time(&store, 1, 0);
        store.force_put_status(Some(PutMessageStatus::OsPageCacheBusy));
        let out = svc.deliver_due(1, t + 1000);
        assert_eq!(out.delivered, 0);
        assert_eq!(
            svc.offset(1),
            Some(0),
            "no progress past an undelivered message"
        );
        store.force_put_status(None);
        assert_eq!(svc.deliver_due(1, t + 1000).delivered, 1);
        assert_eq!(svc.offset(1), Some(1));
    }

    #[test]
    fn progress_survives_restart_without_loss_or_early_delivery() {
        let dir = std::env::temp_dir().join(format!(
            "ringmq-schedule-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = Arc::new(MemStore::new());
        let make_ctx = || {
            let config = BrokerConfig::default();
            let topics = crate::metadata::topic_config::TopicConfigManager::new(&config, None);
            let groups =
                crate::metadata::subscription_group::SubscriptionGroupManager::new(&config, None);
            let delay = crate::metadata::delay_offset::DelayOffsetManager::load(&dir).unwrap();
            BrokerContext::new(
                config,
                topics,
                groups,
                crate::metadata::consumer_offset::ConsumerOffsetManager::new(None),
                delay,
                store.clone() as Arc<dyn StoreApi>,
            )
        };
        let ctx = make_ctx();
        send_delayed(&ctx, "TopicC", 2, "a");
        send_delayed(&ctx, "TopicC", 2, "b");
        let t0 = parked_store_time(&store, 2, 0);
        let t1 = parked_store_time(&store, 2, 1);
        let svc = ScheduleMessageService::new(ctx.clone());
        // Deliver only the first (pretend the second is not due yet).
        if t1 > t0 {
            assert_eq!(svc.deliver_due(2, t0 + 5000).delivered, 1);
        } else {
            assert_eq!(svc.deliver_due(2, t0 + 5000).delivered, 2);
        }
        let done = svc.offset(2).unwrap();
        svc.persist(); // what stop() does at shutdown
        drop(svc);
        let text = std::fs::read_to_string(dir.join("delayOffset.json")).unwrap();
        assert!(text.contains(&format!("2:{done}")), "{text}");
        // "Restart": a new context over the same files and store.
        let ctx2 = make_ctx();
        let svc2 = ScheduleMessageService::new(ctx2);
        assert_eq!(svc2.offset(2), Some(done));
        assert_eq!(svc2.deliver_due(2, t1 + 4_999).delivered, 0, "never early");
        svc2.deliver_due(2, t1 + 5_000);
        assert_eq!(
            store.max_offset_in_queue("TopicC", 1),
            2,
            "each message exactly once"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn threaded_service_with_injected_clock() {
        let (ctx, store) = test_context(BrokerConfig::default());
        send_delayed(&ctx, "TopicD", 1, "z");
        let t = parked_store_time(&store, 1, 0);
        let clock = Arc::new(FixedClock(AtomicI64::new(t)));
        let svc = ScheduleMessageService::with_clock(ctx.clone(), clock.clone());
        svc.start().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            store.max_offset_in_queue("TopicD", 1),
            0,
            "clock frozen before the due time"
        );
        clock.0.store(t + FIRST_DELAY_MS + 1000, Ordering::SeqCst);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while store.max_offset_in_queue("TopicD", 1) == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        svc.stop();
        assert_eq!(store.max_offset_in_queue("TopicD", 1), 1);
        assert_eq!(
            ctx.delay_offsets.offset(1),
            Some(1),
            "stop persisted the progress"
        );
        let slave = BrokerConfig {
            broker_id: 1,
            ..BrokerConfig::default()
        };
        let (sctx, _) = test_context(slave);
        assert!(ScheduleMessageService::new(sctx).start().is_err());
    }
}
