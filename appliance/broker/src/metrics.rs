//! Broker metrics: the counters the request path increments, the stage profile read from the
//! store and the network cores, and the two ways they leave the process — the Prometheus
//! `/metrics` page ([`BrokerMetrics::render`], served by [`http`]) and the `ringmq.*` / upstream
//! keys of GET_BROKER_RUNTIME_INFO ([`BrokerMetrics::runtime_info_into`]).
//!
//! Per-thread counters: every thread that records (network cores, the store's completion
//! threads, the long-polling worker) owns one of [`MAX_SLOTS`] cache-line-aligned slots,
//! chosen once per thread. A slot is a `Mutex` that only its owner takes on the hot path, so
//! it is never contended except for the instant a scrape sums it; two threads only share a
//! slot beyond `MAX_SLOTS` threads, and then the mutex keeps the counts right. Recording
//! allocates only the first time a thread sees a topic / (topic, group) / (code, response
//! code) pair; each table is bounded and folds overflow into an `__other` series.
//!
//! Metric names and labels follow RocketMQ 5.x (`rocketmq_messages_in_total` with `topic`,
//! `message_type`, `is_system`; `rocketmq_messages_out_total` with `topic`, `consumer_group`,
//! `is_retry`, `is_system`; `rocketmq_rpc_latency` in milliseconds with `protocol_type`,
//! `request_code`, `response_code`, …; constant labels `cluster`, `node_type`, `node_id`).
//! ringmq's own stage profile is under `ringmq_*`.

pub mod http;
pub mod put_latency;
pub mod text;
pub mod timer_families;

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use ringmq_remoting::codes::{RequestCode, ResponseCode};
use ringmq_remoting::message::properties::{self, keys};

use self::put_latency::PutLatency;
use self::text::{Exposition, Kind};
pub use self::timer_families::{TimerGauges, TimerProbe};
use ringmq_sync::LockExt;

/// The per-send series lookups hash with foldhash (SipHash was a visible share of a send).
type FastHash = foldhash::fast::RandomState;

/// Recording slots; threads beyond this share slots (still correct, just contended).
pub const MAX_SLOTS: usize = 64;
/// Distinct topics with their own `rocketmq_messages_in_total` series.
pub const MAX_TOPICS: usize = 4096;
/// Distinct (topic, consumer group) pairs with their own out series, per slot.
pub const MAX_OUT_SERIES_PER_SLOT: usize = 4096;
/// Distinct (request code, response code, long polling) series per slot.
pub const MAX_RPC_SERIES_PER_SLOT: usize = 512;
/// TPS windows, seconds (upstream reports 10 s, 1 min and 10 min).
pub const TPS_WINDOWS_S: [u64; 3] = [10, 60, 600];
/// Samples kept for the widest TPS window (one per second, plus the window's start).
const TPS_SAMPLES: usize = 601;

/// `rocketmq_rpc_latency` bucket bounds, milliseconds (upstream's RPC view).
pub const RPC_LATENCY_BOUNDS_MS: [f64; 9] =
    [1.0, 3.0, 5.0, 7.0, 10.0, 100.0, 1000.0, 2000.0, 3000.0];
/// `rocketmq_message_size` bucket bounds, bytes (upstream: 1 KiB … 4 MiB).
pub const MESSAGE_SIZE_BOUNDS_BYTES: [f64; 6] = [
    1024.0,
    4096.0,
    524_288.0,
    1_048_576.0,
    2_097_152.0,
    4_194_304.0,
];
/// Label value for series folded together once a table is full.
pub const OVERFLOW_LABEL: &str = "__other";

/// Upstream's `message_type` label values (TopicMessageType, lower case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageType {
    Normal = 0,
    Fifo = 1,
    Delay = 2,
    Transaction = 3,
}

impl MessageType {
    pub const ALL: [MessageType; 4] = [
        MessageType::Normal,
        MessageType::Fifo,
        MessageType::Delay,
        MessageType::Transaction,
    ];

    pub fn label(self) -> &'static str {
        match self {
            MessageType::Normal => "normal",
            MessageType::Fifo => "fifo",
            MessageType::Delay => "delay",
            MessageType::Transaction => "transaction",
        }
    }

    /// Classifies a send by its property string, in upstream's order: a prepared
    /// transaction, then an ordering key, then any delay/timer property.
    pub fn from_properties(props: &str) -> MessageType {
        let mut kind = MessageType::Normal;
        for (k, v) in properties::iter(props) {
            match k {
                keys::TRAN_MSG if v.eq_ignore_ascii_case("true") => {
                    return MessageType::Transaction
                }
                keys::SHARDING_KEY => kind = MessageType::Fifo,
                keys::DELAY
                | keys::TIMER_DELIVER_MS
                | keys::TIMER_DELAY_SEC
                | keys::TIMER_DELAY_MS
                | keys::START_DELIVER_TIME
                    if kind == MessageType::Normal =>
                {
                    kind = MessageType::Delay
                }
                _ => {}
            }
        }
        kind
    }
}

/// Why a request was refused with SYSTEM_BUSY, by the remark prefix clients look for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusyReason {
    /// An append ran longer than `osPageCacheBusyTimeOutMills` (or the store refused).
    PcSynchronized = 0,
    /// Waited in a core's queue longer than `waitTimeMillsInSendQueue`.
    TimeoutCleanQueue = 1,
    PcBusyCleanQueue = 2,
    /// The runtime's in-flight bound (counted by the network cores themselves).
    Overload = 3,
    Other = 4,
}

impl BusyReason {
    pub const COUNT: usize = 5;
    pub const ALL: [BusyReason; 5] = [
        BusyReason::PcSynchronized,
        BusyReason::TimeoutCleanQueue,
        BusyReason::PcBusyCleanQueue,
        BusyReason::Overload,
        BusyReason::Other,
    ];

    /// The remark prefix without brackets (the label value and runtime-info key suffix).
    pub fn label(self) -> &'static str {
        match self {
            BusyReason::PcSynchronized => "PC_SYNCHRONIZED",
            BusyReason::TimeoutCleanQueue => "TIMEOUT_CLEAN_QUEUE",
            BusyReason::PcBusyCleanQueue => "PCBUSY_CLEAN_QUEUE",
            BusyReason::Overload => "OVERLOAD",
            BusyReason::Other => "OTHER",
        }
    }

    pub fn from_remark(remark: Option<&str>) -> BusyReason {
        let r = remark.unwrap_or("");
        for reason in BusyReason::ALL {
            let l = reason.label();
            if r.len() > l.len() + 1
                && r.as_bytes()[0] == b'['
                && r[1..].starts_with(l)
                && r.as_bytes()[l.len() + 1] == b']'
            {
                return reason;
            }
        }
        BusyReason::Other
    }
}

/// A send's series, resolved on the network core before the put so the store's completion
/// (on another thread) records without the topic string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InKey {
    topic_id: u32,
    kind: MessageType,
    is_system: bool,
}

#[derive(Debug, Clone, Copy, Default)]
struct InSeries {
    messages: u64,
    bytes: u64,
    /// `rocketmq_message_size` observations per bucket (not cumulative; last = above all).
    size_counts: [u64; MESSAGE_SIZE_BOUNDS_BYTES.len() + 1],
    size_sum_bytes: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct OutSeries {
    messages: u64,
    bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct RpcKey {
    request_code: i32,
    response_code: i32,
    long_polling: bool,
}

#[derive(Debug, Clone, Copy, Default)]
struct RpcSeries {
    counts: [u64; RPC_LATENCY_BOUNDS_MS.len() + 1],
    sum_us: u64,
}

/// Totals across topics, for runtime info and TPS.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Messages stored (all topics).
    pub put_messages: u64,
    /// Messages stored outside system topics (upstream's msgPutTotal*).
    pub put_messages_user: u64,
    pub put_bytes: u64,
    /// Pull reads that found messages / found none.
    pub get_found: u64,
    pub get_miss: u64,
    /// Messages handed to consumers (all topics / outside system topics).
    pub get_messages: u64,
    pub get_messages_user: u64,
    pub get_bytes: u64,
    /// SYSTEM_BUSY answers by [`BusyReason`] (from the broker's responses; the runtime's own
    /// `[OVERLOAD]` refusals are in its per-core counters).
    pub busy: [u64; BusyReason::COUNT],
    /// Sends answered with anything but SUCCESS (upstream's putMessageFailedTimes).
    pub put_failed: u64,
    /// Every send's whole time, in upstream's buckets.
    pub put_latency: PutLatency,
}

impl Totals {
    fn add(&mut self, o: &Totals) {
        self.put_messages += o.put_messages;
        self.put_messages_user += o.put_messages_user;
        self.put_bytes += o.put_bytes;
        self.get_found += o.get_found;
        self.get_miss += o.get_miss;
        self.get_messages += o.get_messages;
        self.get_messages_user += o.get_messages_user;
        self.get_bytes += o.get_bytes;
        for (a, b) in self.busy.iter_mut().zip(o.busy) {
            *a += b;
        }
        self.put_failed += o.put_failed;
        self.put_latency.add(&o.put_latency);
    }
}

/// One thread's counters.
#[derive(Default)]
struct SlotData {
    totals: Totals,
    /// This thread's cache of topic ids and is-system flags (the registry's lock is taken
    /// on a miss only).
    topic_ids: HashMap<String, (u32, bool), FastHash>,
    /// Indexed by `topic_id * 4 + message type`.
    topic_in: Vec<InSeries>,
    /// topic → consumer group → series.
    out: HashMap<String, HashMap<String, OutSeries, FastHash>, FastHash>,
    out_series: usize,
    rpc: HashMap<RpcKey, RpcSeries, FastHash>,
}

/// SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE: the puts upstream's store
/// statistics time.
fn is_send(request_code: i32) -> bool {
    matches!(
        RequestCode::from_code(request_code),
        Some(RequestCode::SendMessage | RequestCode::SendMessageV2 | RequestCode::SendBatchMessage)
    )
}

/// Aligned so two threads' slots never share a cache line.
#[repr(align(128))]
#[derive(Default)]
struct Slot(Mutex<SlotData>);

struct TopicInfo {
    name: String,
    is_system: bool,
    /// Retry and DLQ topics count in the totals but get no labelled series (as upstream).
    labelled: bool,
}

#[derive(Default)]
struct TopicRegistry {
    ids: HashMap<String, u32, FastHash>,
    topics: Vec<TopicInfo>,
}

/// The id of the `__other` topic series, used once [`MAX_TOPICS`] are registered.
const OVERFLOW_TOPIC_ID: u32 = 0;

static NEXT_THREAD_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD_SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// This thread's slot index, assigned on first use.
fn thread_slot() -> usize {
    THREAD_SLOT.with(|s| {
        let mut v = s.get();
        if v == usize::MAX {
            v = NEXT_THREAD_SLOT.fetch_add(1, Ordering::Relaxed) % MAX_SLOTS;
            s.set(v);
        }
        v
    })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding a slot must not stop the broker from counting.
    m.lock_unpoisoned()
}

/// Reads the store's stage profile (set when the broker runs on the disk store).
pub type StoreProbe = Box<dyn Fn() -> ringmq_store::StoreMetrics + Send + Sync>;
/// Reads the network cores' counters (every server of the broker, main and VIP).
pub type CoreProbe = Box<dyn Fn() -> Vec<ServerCoreStats> + Send + Sync>;

/// One network core's counters, with the server it belongs to.
#[derive(Debug, Clone)]
pub struct ServerCoreStats {
    /// "broker" or "broker-vip".
    pub server: String,
    pub stats: ringmq_runtime::CoreStats,
}

/// The store and core figures ringmq profiles, in one snapshot.
#[derive(Debug, Clone, Default)]
pub struct StageProfile {
    pub store: Option<ringmq_store::StoreMetrics>,
    /// CommitLog flushed offset when the probe was installed: bytes flushed since then are
    /// `commit_log_flushed_offset - flushed_offset_at_start_bytes`.
    pub flushed_offset_at_start_bytes: i64,
    pub cores: Vec<ServerCoreStats>,
}

impl StageProfile {
    /// Mean records per append batch since the store opened.
    pub fn records_per_batch(&self) -> f64 {
        match &self.store {
            Some(s) if s.append_batches > 0 => s.put_messages as f64 / s.append_batches as f64,
            _ => 0.0,
        }
    }

    /// Bytes made durable since start.
    pub fn flushed_bytes(&self) -> u64 {
        self.store.as_ref().map_or(0, |s| {
            (s.commit_log_flushed_offset - self.flushed_offset_at_start_bytes).max(0) as u64
        })
    }

    /// Mean bytes per fdatasync/msync since start.
    pub fn bytes_per_fdatasync(&self) -> f64 {
        match &self.store {
            Some(s) if s.flush_count > 0 => self.flushed_bytes() as f64 / s.flush_count as f64,
            _ => 0.0,
        }
    }

    /// Stall counts per CPU (a CPU running both the main and the VIP server's core sums them).
    pub fn stalls_by_cpu(&self) -> BTreeMap<usize, u64> {
        let mut m = BTreeMap::new();
        for c in &self.cores {
            *m.entry(c.stats.cpu).or_insert(0) += c.stats.loop_stats.stalls;
        }
        m
    }

    /// `[OVERLOAD]` refusals by the network cores.
    pub fn overload_refusals(&self) -> u64 {
        self.cores.iter().map(|c| c.stats.rejected_busy).sum()
    }
}

/// Put/get totals at the last two local midnights (upstream's BrokerStats).
#[derive(Debug, Default)]
struct Daily {
    day: i64,
    put_today_morning: u64,
    get_today_morning: u64,
    put_yesterday_morning: u64,
    get_yesterday_morning: u64,
}

/// The broker's metrics state; lives in the `BrokerContext`.
pub struct BrokerMetrics {
    cluster: String,
    node_id: String,
    slots: Box<[Slot]>,
    topics: Mutex<TopicRegistry>,
    store_probe: OnceLock<(StoreProbe, i64)>,
    core_probe: OnceLock<CoreProbe>,
    timer_probe: OnceLock<TimerProbe>,
    /// (when, totals) once a second, newest last.
    samples: Mutex<VecDeque<(Instant, Totals)>>,
    daily: Mutex<Daily>,
}

impl std::fmt::Debug for BrokerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerMetrics")
            .field("cluster", &self.cluster)
            .field("node_id", &self.node_id)
            .finish()
    }
}

impl BrokerMetrics {
    /// `cluster` / `node_id` become the constant labels (brokerClusterName / brokerName).
    pub fn new(cluster: &str, node_id: &str) -> Self {
        let mut registry = TopicRegistry::default();
        registry.topics.push(TopicInfo {
            name: OVERFLOW_LABEL.to_string(),
            is_system: false,
            labelled: true,
        });
        Self {
            cluster: cluster.to_string(),
            node_id: node_id.to_string(),
            slots: (0..MAX_SLOTS).map(|_| Slot::default()).collect(),
            topics: Mutex::new(registry),
            store_probe: OnceLock::new(),
            core_probe: OnceLock::new(),
            timer_probe: OnceLock::new(),
            samples: Mutex::new(VecDeque::with_capacity(TPS_SAMPLES)),
            daily: Mutex::new(Daily {
                day: local_day(crate::persist::now_ms()),
                ..Daily::default()
            }),
        }
    }

    /// Installs the store's profile reader (once; later calls are ignored).
    pub fn set_store_probe(&self, probe: StoreProbe) {
        let start = probe().commit_log_flushed_offset;
        let _ = self.store_probe.set((probe, start));
    }

    /// Installs the network cores' counter reader (once).
    pub fn set_core_probe(&self, probe: CoreProbe) {
        let _ = self.core_probe.set(probe);
    }

    /// Installs the timer store's reader (once).
    pub fn set_timer_probe(&self, probe: TimerProbe) {
        let _ = self.timer_probe.set(probe);
    }

    fn slot(&self) -> MutexGuard<'_, SlotData> {
        lock(&self.slots[thread_slot()].0)
    }

    /// Resolves a send's series on the calling (network) thread. `is_system` is asked only
    /// the first time the broker sees the topic.
    pub fn in_key(
        &self,
        topic: &str,
        kind: MessageType,
        is_system: impl FnOnce() -> bool,
    ) -> InKey {
        let mut slot = self.slot();
        if let Some(&(topic_id, is_system)) = slot.topic_ids.get(topic) {
            return InKey {
                topic_id,
                kind,
                is_system,
            };
        }
        let (id, system) = {
            let mut reg = lock(&self.topics);
            match reg.ids.get(topic) {
                Some(&id) => (id, reg.topics[id as usize].is_system),
                None if reg.topics.len() >= MAX_TOPICS => (OVERFLOW_TOPIC_ID, is_system()),
                None => {
                    let system = is_system();
                    let id = reg.topics.len() as u32;
                    reg.topics.push(TopicInfo {
                        name: topic.to_string(),
                        is_system: system,
                        labelled: !crate::metadata::topic_config::is_retry_or_dlq_topic(topic),
                    });
                    reg.ids.insert(topic.to_string(), id);
                    (id, system)
                }
            }
        };
        // The per-thread cache is bounded like the registry (overflow topics are not cached,
        // they resolve through the registry's map miss each time, which is rare by design).
        if id != OVERFLOW_TOPIC_ID {
            slot.topic_ids.insert(topic.to_string(), (id, system));
        }
        InKey {
            topic_id: id,
            kind,
            is_system: system,
        }
    }

    /// A put completed with `messages` records of `bytes` stored (call for stored puts only).
    pub fn record_put(&self, key: InKey, messages: u64, bytes: u64) {
        Self::put_into(&mut self.slot(), key, messages, bytes);
    }

    /// A send answered: [`Self::record_put`] when its records were stored (`stored`: the
    /// messages and bytes), then [`Self::record_rpc`], under one lock of the slot.
    pub fn record_send(
        &self,
        stored: Option<(InKey, u64, u64)>,
        request_code: i32,
        response_code: i32,
        remark: Option<&str>,
        elapsed: Duration,
    ) {
        let mut slot = self.slot();
        if let Some((key, messages, bytes)) = stored {
            Self::put_into(&mut slot, key, messages, bytes);
        }
        Self::rpc_into(
            &mut slot,
            request_code,
            response_code,
            remark,
            elapsed,
            false,
        );
    }

    fn put_into(slot: &mut SlotData, key: InKey, messages: u64, bytes: u64) {
        slot.totals.put_messages += messages;
        if !key.is_system {
            slot.totals.put_messages_user += messages;
        }
        slot.totals.put_bytes += bytes;
        let idx = key.topic_id as usize * 4 + key.kind as usize;
        if slot.topic_in.len() <= idx {
            slot.topic_in.resize(idx + 1, InSeries::default());
        }
        let s = &mut slot.topic_in[idx];
        s.messages += messages;
        s.bytes += bytes;
        if let Some(avg) = bytes.checked_div(messages) {
            let b = MESSAGE_SIZE_BOUNDS_BYTES
                .iter()
                .position(|&bound| avg as f64 <= bound)
                .unwrap_or(MESSAGE_SIZE_BOUNDS_BYTES.len());
            s.size_counts[b] += 1;
            s.size_sum_bytes += avg;
        }
    }

    /// A pull read: `messages` records of `bytes` handed out (0 = a miss).
    pub fn record_get(
        &self,
        topic: &str,
        group: &str,
        messages: u64,
        bytes: u64,
        is_system: impl FnOnce() -> bool,
    ) {
        let mut slot = self.slot();
        if messages == 0 {
            slot.totals.get_miss += 1;
            return;
        }
        slot.totals.get_found += 1;
        slot.totals.get_messages += messages;
        slot.totals.get_bytes += bytes;
        let system = is_system();
        if !system {
            slot.totals.get_messages_user += messages;
        }
        if crate::metadata::topic_config::is_retry_or_dlq_topic(topic) {
            return;
        }
        let full = slot.out_series >= MAX_OUT_SERIES_PER_SLOT;
        let known = slot
            .out
            .get(topic)
            .is_some_and(|groups| groups.contains_key(group));
        let (t, g) = if known || !full {
            (topic, group)
        } else {
            (OVERFLOW_LABEL, OVERFLOW_LABEL)
        };
        if !known && !full {
            slot.out_series += 1;
        }
        let groups = match slot.out.get_mut(t) {
            Some(g) => g,
            None => slot.out.entry(t.to_string()).or_default(),
        };
        let s = match groups.get_mut(g) {
            Some(s) => s,
            None => groups.entry(g.to_string()).or_default(),
        };
        s.messages += messages;
        s.bytes += bytes;
    }

    /// A response left: its latency for `rocketmq_rpc_latency`, and SYSTEM_BUSY refusals by
    /// reason.
    pub fn record_rpc(
        &self,
        request_code: i32,
        response_code: i32,
        remark: Option<&str>,
        elapsed: Duration,
        long_polling: bool,
    ) {
        let mut slot = self.slot();
        Self::rpc_into(
            &mut slot,
            request_code,
            response_code,
            remark,
            elapsed,
            long_polling,
        );
    }

    fn rpc_into(
        slot: &mut SlotData,
        request_code: i32,
        response_code: i32,
        remark: Option<&str>,
        elapsed: Duration,
        long_polling: bool,
    ) {
        let us = elapsed.as_micros().min(u64::MAX as u128) as u64;
        if response_code == ResponseCode::SystemBusy.code() {
            slot.totals.busy[BusyReason::from_remark(remark) as usize] += 1;
        }
        if is_send(request_code) {
            slot.totals.put_latency.record(elapsed.as_millis() as u64);
            if response_code != ResponseCode::Success.code() {
                slot.totals.put_failed += 1;
            }
        }
        let mut key = RpcKey {
            request_code,
            response_code,
            long_polling,
        };
        // The bound is checked first: below it (always, but for a flood of odd codes) a
        // record costs one map lookup, not two.
        if slot.rpc.len() >= MAX_RPC_SERIES_PER_SLOT && !slot.rpc.contains_key(&key) {
            key = RpcKey {
                request_code: i32::MIN,
                response_code: i32::MIN,
                long_polling,
            };
        }
        let s = slot.rpc.entry(key).or_default();
        let b = RPC_LATENCY_BOUNDS_MS
            .iter()
            .position(|&ms| us as f64 <= ms * 1000.0)
            .unwrap_or(RPC_LATENCY_BOUNDS_MS.len());
        s.counts[b] += 1;
        s.sum_us += us;
    }

    /// Sums every slot's totals.
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for s in self.slots.iter() {
            t.add(&lock(&s.0).totals);
        }
        t
    }

    /// The stage profile now (store and cores), empty parts when no probe is installed.
    pub fn stage_profile(&self) -> StageProfile {
        let (store, start) = match self.store_probe.get() {
            Some((p, start)) => (Some(p()), *start),
            None => (None, 0),
        };
        StageProfile {
            store,
            flushed_offset_at_start_bytes: start,
            cores: self.core_probe.get().map(|p| p()).unwrap_or_default(),
        }
    }

    /// The once-a-second tick: a TPS sample, and the midnight roll-over of the daily totals.
    pub fn sample(&self) {
        self.sample_at(Instant::now(), crate::persist::now_ms());
    }

    fn sample_at(&self, now: Instant, now_ms: i64) {
        let t = self.totals();
        {
            let mut s = lock(&self.samples);
            if s.len() >= TPS_SAMPLES {
                s.pop_front();
            }
            s.push_back((now, t));
        }
        let day = local_day(now_ms);
        let mut d = lock(&self.daily);
        if day != d.day {
            d.day = day;
            d.put_yesterday_morning = d.put_today_morning;
            d.get_yesterday_morning = d.get_today_morning;
            d.put_today_morning = t.put_messages_user;
            d.get_today_morning = t.get_messages_user;
        }
    }

    /// Rates over the last `window_s` seconds, ending now, from the once-a-second samples:
    /// the window starts at the newest sample at least `window_s` old (or the oldest one
    /// while the broker is younger than the window). 0 with no sample yet.
    fn rate(&self, now: Instant, current: &Totals, window_s: u64, f: fn(&Totals) -> u64) -> f64 {
        let samples = lock(&self.samples);
        let window = Duration::from_secs(window_s);
        let begin = samples
            .iter()
            .rev()
            .find(|(at, _)| now.saturating_duration_since(*at) >= window)
            .or_else(|| samples.front());
        let Some((at, t)) = begin else { return 0.0 };
        let secs = now.saturating_duration_since(*at).as_secs_f64();
        if secs < 0.001 {
            return 0.0;
        }
        f(current).saturating_sub(f(t)) as f64 / secs
    }

    /// Upstream's "10s 60s 600s" rate string.
    fn tps_text(&self, now: Instant, current: &Totals, f: fn(&Totals) -> u64) -> String {
        let [a, b, c] = TPS_WINDOWS_S.map(|w| self.rate(now, current, w, f));
        format!("{a:?} {b:?} {c:?}")
    }

    /// Writes the runtime-info keys this module owns into `t` (replacing placeholders):
    /// upstream's put/get totals and TPS strings, and ringmq's stage profile.
    ///
    /// ringmq keys (all numbers as text):
    /// - `ringmq.appendLockHoldUs`: "p50 p99 max" of the append critical section per batch,
    ///   µs, since the store opened;
    /// - `ringmq.haAckLagMs`: "p50 p99 count" of the master's replication lag (the age of
    ///   the oldest byte each slave report acknowledged), bucket upper bounds in ms, since
    ///   the store opened; `ringmq.haAckLagMsBuckets`: its counts, "bound:count" per bucket;
    /// - `ringmq.appendBatches`, `ringmq.appendRecords`: counters; `ringmq.recordsPerBatch`:
    ///   their ratio;
    /// - `ringmq.flushLatencyUs`: "p50 p99" per fdatasync/msync, µs; `ringmq.flushCount`,
    ///   `ringmq.flushedBytes` (since start): counters; `ringmq.bytesPerFdatasync`: ratio;
    /// - `ringmq.reputLagBytes`: CommitLog bytes not yet dispatched to queues;
    /// - `ringmq.stallCount.core<cpu>`: network-core loop iterations busy > 500 µs;
    /// - `ringmq.busyRefusals.<REASON>`: SYSTEM_BUSY answers by remark prefix
    ///   (OVERLOAD = the network cores' in-flight bound);
    /// - `ringmq.putRejectedBusy`: puts the store refused as busy;
    /// - `ringmq.putMessagesTotal`, `ringmq.getMessagesTotal`: messages stored / handed to
    ///   consumers since start, every topic (msgPut/GetTotalTodayNow leave system topics
    ///   out, as upstream; BenchmarkTest is one of them).
    pub fn runtime_info_into(&self, t: &mut BTreeMap<String, String>) {
        let now = Instant::now();
        let cur = self.totals();
        self.traffic_info_into(t, now, &cur);
        self.put_latency_info_into(t, now, &cur);
        let p = self.stage_profile();
        stage_profile_info_into(t, &p);
        for reason in BusyReason::ALL {
            let mut n = cur.busy[reason as usize];
            if reason == BusyReason::Overload {
                n += p.overload_refusals();
            }
            t.insert(
                format!("ringmq.busyRefusals.{}", reason.label()),
                n.to_string(),
            );
        }
    }

    /// `putLatency99`, `putLatency999` and `putMessageDistributeTime` over the last minute
    /// (upstream's window), `putMessageEntireTimeMax` and `putMessageFailedTimes` since
    /// start.
    fn put_latency_info_into(&self, t: &mut BTreeMap<String, String>, now: Instant, cur: &Totals) {
        let minute_ago = {
            let samples = lock(&self.samples);
            samples
                .iter()
                .rev()
                .find(|(at, _)| now.saturating_duration_since(*at) >= Duration::from_secs(60))
                .or_else(|| samples.front())
                .map(|(_, t)| t.put_latency)
                .unwrap_or_default()
        };
        let window = cur.put_latency.since(&minute_ago);
        let mut put = |k: &str, v: String| {
            t.insert(k.to_string(), v);
        };
        put("putLatency99", format!("{:.2}", window.quantile_ms(0.99)));
        put("putLatency999", format!("{:.2}", window.quantile_ms(0.999)));
        put("putMessageDistributeTime", window.distribution_text());
        put(
            "putMessageEntireTimeMax",
            cur.put_latency.max_ms.to_string(),
        );
        put("putMessageFailedTimes", cur.put_failed.to_string());
    }

    /// Message counts (today, yesterday, since start) and the put/get TPS keys.
    fn traffic_info_into(&self, t: &mut BTreeMap<String, String>, now: Instant, cur: &Totals) {
        let mut put = |k: &str, v: String| {
            t.insert(k.to_string(), v);
        };
        {
            let d = lock(&self.daily);
            put("msgPutTotalTodayNow", cur.put_messages_user.to_string());
            put("msgGetTotalTodayNow", cur.get_messages_user.to_string());
            put("msgPutTotalTodayMorning", d.put_today_morning.to_string());
            put("msgGetTotalTodayMorning", d.get_today_morning.to_string());
            put(
                "msgPutTotalYesterdayMorning",
                d.put_yesterday_morning.to_string(),
            );
            put(
                "msgGetTotalYesterdayMorning",
                d.get_yesterday_morning.to_string(),
            );
        }
        put("ringmq.putMessagesTotal", cur.put_messages.to_string());
        put("ringmq.getMessagesTotal", cur.get_messages.to_string());
        put("putTps", self.tps_text(now, cur, |t| t.put_messages));
        put("getFoundTps", self.tps_text(now, cur, |t| t.get_found));
        put("getMissTps", self.tps_text(now, cur, |t| t.get_miss));
        put(
            "getTotalTps",
            self.tps_text(now, cur, |t| t.get_found + t.get_miss),
        );
        let transferred = self.tps_text(now, cur, |t| t.get_messages);
        // Older mqadmin/dashboards read the historical misspelling.
        put("getTransferedTps", transferred.clone());
        put("getTransferredTps", transferred);
    }

    /// The whole `/metrics` page. `gauges` are the broker-level values the caller reads
    /// from its managers (topic and group counts, permission).
    pub fn render(&self, gauges: &BrokerGauges) -> String {
        let mut e = Exposition::new(&[
            ("cluster", &self.cluster),
            ("node_type", "broker"),
            ("node_id", &self.node_id),
        ]);
        self.render_broker_gauges(&mut e, gauges);
        self.render_messages(&mut e);
        self.render_rpc(&mut e);
        self.render_stage_profile(&mut e);
        if let Some(timer) = self.timer_probe.get().and_then(|p| p()) {
            timer_families::render(&mut e, &timer);
        }
        e.finish()
    }

    fn render_broker_gauges(&self, e: &mut Exposition, g: &BrokerGauges) {
        e.family(
            "rocketmq_broker_permission",
            Kind::Gauge,
            "Broker permission bits (brokerPermission).",
        );
        e.sample("rocketmq_broker_permission", &[], u64::from(g.permission));
        e.family(
            "rocketmq_topic_number",
            Kind::Gauge,
            "Topics on this broker.",
        );
        e.sample("rocketmq_topic_number", &[], g.topics);
        e.family(
            "rocketmq_consumer_group_number",
            Kind::Gauge,
            "Subscription groups on this broker.",
        );
        e.sample("rocketmq_consumer_group_number", &[], g.consumer_groups);
    }

    fn render_messages(&self, e: &mut Exposition) {
        let (topic_in, out) = self.summed_message_series();
        let topics: Vec<(String, bool, bool)> = {
            let reg = lock(&self.topics);
            reg.topics
                .iter()
                .map(|t| (t.name.clone(), t.is_system, t.labelled))
                .collect()
        };
        let series: Vec<InLabels<'_>> = topic_in
            .iter()
            .enumerate()
            .filter(|(_, s)| s.messages > 0)
            .filter_map(|(i, s)| {
                let (name, system, labelled) = topics.get(i / 4)?;
                labelled.then_some((
                    name.as_str(),
                    MessageType::ALL[i % 4].label(),
                    bool_label(*system),
                    s,
                ))
            })
            .collect();
        render_messages_in(e, &series);
        let system_topic = |t: &str| topics.iter().any(|(name, system, _)| *system && name == t);
        render_messages_out(e, &out, &system_topic);
    }

    /// The produce series (indexed topic id × 4 + message type) and the consume series (by
    /// topic and group), summed over the slots; each slot's lock is held only to copy.
    fn summed_message_series(&self) -> (Vec<InSeries>, BTreeMap<(String, String), OutSeries>) {
        let mut topic_in: Vec<InSeries> = Vec::new();
        let mut out: BTreeMap<(String, String), OutSeries> = BTreeMap::new();
        for s in self.slots.iter() {
            let d = lock(&s.0);
            if topic_in.len() < d.topic_in.len() {
                topic_in.resize(d.topic_in.len(), InSeries::default());
            }
            for (acc, x) in topic_in.iter_mut().zip(&d.topic_in) {
                acc.messages += x.messages;
                acc.bytes += x.bytes;
                acc.size_sum_bytes += x.size_sum_bytes;
                for (a, b) in acc.size_counts.iter_mut().zip(x.size_counts) {
                    *a += b;
                }
            }
            for (topic, groups) in &d.out {
                for (group, x) in groups {
                    let acc = out.entry((topic.clone(), group.clone())).or_default();
                    acc.messages += x.messages;
                    acc.bytes += x.bytes;
                }
            }
        }
        (topic_in, out)
    }

    fn render_rpc(&self, e: &mut Exposition) {
        let mut rpc: BTreeMap<(i32, i32, bool), RpcSeries> = BTreeMap::new();
        let mut busy = [0u64; BusyReason::COUNT];
        for s in self.slots.iter() {
            let d = lock(&s.0);
            for (k, x) in &d.rpc {
                let acc = rpc
                    .entry((k.request_code, k.response_code, k.long_polling))
                    .or_default();
                for (a, b) in acc.counts.iter_mut().zip(x.counts) {
                    *a += b;
                }
                acc.sum_us += x.sum_us;
            }
            for (a, b) in busy.iter_mut().zip(d.totals.busy) {
                *a += b;
            }
        }
        e.family(
            "rocketmq_rpc_latency",
            Kind::Histogram,
            "Request processing time in milliseconds, by request and response code.",
        );
        for ((req, resp, long_polling), s) in &rpc {
            let req_label = request_code_label(*req);
            let resp_label = response_code_label(*resp);
            e.histogram(
                "rocketmq_rpc_latency",
                &[
                    ("protocol_type", "remoting"),
                    ("request_code", &req_label),
                    ("response_code", &resp_label),
                    ("is_long_polling", bool_label(*long_polling)),
                    ("result", "success"),
                ],
                &RPC_LATENCY_BOUNDS_MS,
                &s.counts,
                s.sum_us as f64 / 1000.0,
            );
        }
        let overload: u64 = self
            .core_probe
            .get()
            .map(|p| p().iter().map(|c| c.stats.rejected_busy).sum())
            .unwrap_or(0);
        e.family(
            "ringmq_backpressure_refusals_total",
            Kind::Counter,
            "SYSTEM_BUSY answers by the remark prefix clients read (back-pressure).",
        );
        for reason in BusyReason::ALL {
            let mut n = busy[reason as usize];
            if reason == BusyReason::Overload {
                n += overload;
            }
            e.sample(
                "ringmq_backpressure_refusals_total",
                &[("reason", reason.label())],
                n,
            );
        }
    }

    fn render_stage_profile(&self, e: &mut Exposition) {
        let p = self.stage_profile();
        if let Some(s) = &p.store {
            render_append_stage(e, &p, s);
            render_flush_stage(e, &p, s);
            render_store_backlog(e, s);
            render_append_perf(e, &s.append_perf);
            render_replication_lag(e, s);
        }
        render_core_stats(e, &p.cores);
    }
}

/// A produce series with its labels: topic, message type, is_system.
type InLabels<'a> = (&'a str, &'static str, &'static str, &'a InSeries);

fn in_labels<'a>(&(topic, kind, system, _): &InLabels<'a>) -> [(&'static str, &'a str); 3] {
    [
        ("topic", topic),
        ("message_type", kind),
        ("is_system", system),
    ]
}

/// Messages and bytes stored and the message-size histogram, by topic and message type.
fn render_messages_in(e: &mut Exposition, series: &[InLabels<'_>]) {
    e.family(
        "rocketmq_messages_in_total",
        Kind::Counter,
        "Messages stored, by topic and message type.",
    );
    for s in series {
        e.sample("rocketmq_messages_in_total", &in_labels(s), s.3.messages);
    }
    e.family(
        "rocketmq_throughput_in_total",
        Kind::Counter,
        "Bytes stored, by topic and message type.",
    );
    for s in series {
        e.sample("rocketmq_throughput_in_total", &in_labels(s), s.3.bytes);
    }
    e.family(
        "rocketmq_message_size",
        Kind::Histogram,
        "Stored message size in bytes (mean of each send).",
    );
    for s in series {
        e.histogram(
            "rocketmq_message_size",
            &in_labels(s),
            &MESSAGE_SIZE_BOUNDS_BYTES,
            &s.3.size_counts,
            s.3.size_sum_bytes as f64,
        );
    }
}

/// Messages and bytes handed to consumers, by topic and consumer group.
fn render_messages_out(
    e: &mut Exposition,
    out: &BTreeMap<(String, String), OutSeries>,
    system_topic: &dyn Fn(&str) -> bool,
) {
    type Field = fn(&OutSeries) -> u64;
    let families: [(&str, &str, Field); 2] = [
        (
            "rocketmq_messages_out_total",
            "Messages handed to consumers, by topic and consumer group.",
            |s| s.messages,
        ),
        (
            "rocketmq_throughput_out_total",
            "Bytes handed to consumers, by topic and consumer group.",
            |s| s.bytes,
        ),
    ];
    for (name, help, field) in families {
        e.family(name, Kind::Counter, help);
        for ((topic, group), s) in out {
            let system = bool_label(system_topic(topic) || is_sys_group(group));
            e.sample(
                name,
                &[
                    ("topic", topic),
                    ("consumer_group", group),
                    ("is_retry", "false"),
                    ("is_system", system),
                ],
                field(s),
            );
        }
    }
}

/// `bytes` as upstream's runtime info prints sizes: "512 B", "1.5 KiB", "252.0 GiB".
pub(crate) fn human_readable_bytes(bytes: u64) -> String {
    const UNIT: f64 = 1024.0;
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let exp = ((bytes as f64).ln() / UNIT.ln()) as i32;
    let prefix = ['K', 'M', 'G', 'T', 'P', 'E'][(exp - 1).clamp(0, 5) as usize];
    format!("{:.1} {prefix}iB", bytes as f64 / UNIT.powi(exp))
}

/// The store's put totals, the append/flush stage keys and the per-core stall counts.
fn stage_profile_info_into(t: &mut BTreeMap<String, String>, p: &StageProfile) {
    let mut put = |k: &str, v: String| {
        t.insert(k.to_string(), v);
    };
    let s = p.store.clone().unwrap_or_default();
    // Upstream reports at least 1 (it divides by this for the average).
    put("putMessageTimesTotal", s.put_messages.max(1).to_string());
    put("putMessageSizeTotal", s.put_bytes.to_string());
    put(
        "putMessageAverageSize",
        format!("{:?}", s.put_bytes as f64 / s.put_messages.max(1) as f64),
    );
    if p.store.is_some() {
        put("dispatchBehindBytes", s.dispatch_behind_bytes.to_string());
        let unflushed = (s.commit_log_max_offset - s.commit_log_flushed_offset).max(0);
        put(
            "remainHowManyDataToFlush",
            human_readable_bytes(unflushed as u64),
        );
    }
    put(
        "ringmq.appendLockHoldUs",
        format!(
            "{} {} {}",
            s.lock_hold_p50_us, s.lock_hold_p99_us, s.lock_hold_max_us
        ),
    );
    let lag = (
        &ringmq_store::HA_ACK_LAG_BOUNDS_MS[..],
        &s.ha_ack_lag_counts[..],
    );
    put(
        "ringmq.haAckLagMs",
        format!(
            "{} {} {}",
            bucket_quantile(lag.0, lag.1, 0.5),
            bucket_quantile(lag.0, lag.1, 0.99),
            lag.1.iter().sum::<u64>()
        ),
    );
    let buckets: Vec<String> = lag
        .1
        .iter()
        .enumerate()
        .map(|(i, n)| match lag.0.get(i) {
            Some(b) => format!("{b}:{n}"),
            None => format!("inf:{n}"),
        })
        .collect();
    put("ringmq.haAckLagMsBuckets", buckets.join(" "));
    put("ringmq.appendBatches", s.append_batches.to_string());
    put("ringmq.appendRecords", s.put_messages.to_string());
    put(
        "ringmq.recordsPerBatch",
        format!("{:.2}", p.records_per_batch()),
    );
    put(
        "ringmq.flushLatencyUs",
        format!("{} {}", s.flush_p50_us, s.flush_p99_us),
    );
    put("ringmq.flushCount", s.flush_count.to_string());
    put("ringmq.flushedBytes", p.flushed_bytes().to_string());
    put(
        "ringmq.bytesPerFdatasync",
        format!("{:.0}", p.bytes_per_fdatasync()),
    );
    put(
        "ringmq.reputLagBytes",
        s.dispatch_behind_bytes.max(0).to_string(),
    );
    put("ringmq.putRejectedBusy", s.put_rejected_busy.to_string());
    // Append-stage perf counters over sampled critical sections: `batches=N name=v ...`
    // (only the counters this host can count).
    if s.append_perf.values.iter().any(Option::is_some) {
        put("ringmq.appendPerfCounters", s.append_perf.summary());
    }
    for (cpu, stalls) in p.stalls_by_cpu() {
        put(&format!("ringmq.stallCount.core{cpu}"), stalls.to_string());
    }
}

/// The append stage: critical-section time, batches, records and records per batch.
fn render_append_stage(e: &mut Exposition, p: &StageProfile, s: &ringmq_store::StoreMetrics) {
    e.family(
        "ringmq_append_lock_hold_us",
        Kind::Summary,
        "Append stage critical-section time per batch (the lock-hold time), microseconds, since the store opened.",
    );
    for (q, v) in [
        ("0.5", s.lock_hold_p50_us),
        ("0.99", s.lock_hold_p99_us),
        ("1", s.lock_hold_max_us),
    ] {
        e.sample("ringmq_append_lock_hold_us", &[("quantile", q)], v);
    }
    e.sample("ringmq_append_lock_hold_us_count", &[], s.append_batches);
    e.family(
        "ringmq_append_batches_total",
        Kind::Counter,
        "Append stage batches.",
    );
    e.sample("ringmq_append_batches_total", &[], s.append_batches);
    e.family(
        "ringmq_append_records_total",
        Kind::Counter,
        "Records appended to the CommitLog.",
    );
    e.sample("ringmq_append_records_total", &[], s.put_messages);
    e.family(
        "ringmq_append_records_per_batch",
        Kind::Gauge,
        "Mean records per append batch since the store opened.",
    );
    e.sample(
        "ringmq_append_records_per_batch",
        &[],
        p.records_per_batch(),
    );
}

/// The flush stage: sync latency, bytes made durable, and how many waiters one sync serves.
fn render_flush_stage(e: &mut Exposition, p: &StageProfile, s: &ringmq_store::StoreMetrics) {
    e.family(
        "ringmq_flush_latency_us",
        Kind::Summary,
        "CommitLog flush (fdatasync/msync) latency, microseconds, since the store opened.",
    );
    for (q, v) in [("0.5", s.flush_p50_us), ("0.99", s.flush_p99_us)] {
        e.sample("ringmq_flush_latency_us", &[("quantile", q)], v);
    }
    e.sample("ringmq_flush_latency_us_count", &[], s.flush_count);
    e.family(
        "ringmq_flushed_bytes_total",
        Kind::Counter,
        "CommitLog bytes made durable since start.",
    );
    e.sample("ringmq_flushed_bytes_total", &[], p.flushed_bytes());
    e.family(
        "ringmq_bytes_per_fdatasync",
        Kind::Gauge,
        "Mean bytes made durable per fdatasync/msync since start.",
    );
    e.sample("ringmq_bytes_per_fdatasync", &[], p.bytes_per_fdatasync());
    e.family(
        "ringmq_flush_group_mean",
        Kind::Gauge,
        "Mean SYNC_FLUSH waiters completed per flush.",
    );
    e.sample("ringmq_flush_group_mean", &[], s.flush_group_mean);
}

/// The master's replication lag histogram (`ringmq_store::ha::lag`).
fn render_replication_lag(e: &mut Exposition, s: &ringmq_store::StoreMetrics) {
    const NAME: &str = "ringmq_ha_ack_lag_ms";
    e.family(
        NAME,
        Kind::Histogram,
        "Master: age, when a slave's report acknowledged it, of the oldest CommitLog byte the report acknowledged, in milliseconds.",
    );
    e.histogram(
        NAME,
        &[],
        &ringmq_store::HA_ACK_LAG_BOUNDS_MS,
        &s.ha_ack_lag_counts,
        s.ha_ack_lag_sum_us as f64 / 1000.0,
    );
}

/// Quantile `q` of a bucketed histogram as the bucket's upper bound ("inf" above them all,
/// "-" when empty).
fn bucket_quantile(bounds: &[f64], counts: &[u64], q: f64) -> String {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return "-".into();
    }
    let rank = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, n) in counts.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return bounds.get(i).map_or("inf".into(), |b| format!("{b}"));
        }
    }
    "inf".into()
}

/// What the store has not caught up with or refused: the reput lag, busy refusals, and the
/// CommitLog's written end.
fn render_store_backlog(e: &mut Exposition, s: &ringmq_store::StoreMetrics) {
    e.family(
        "ringmq_reput_lag_bytes",
        Kind::Gauge,
        "CommitLog bytes not yet dispatched to consume queues and index.",
    );
    e.sample(
        "ringmq_reput_lag_bytes",
        &[],
        s.dispatch_behind_bytes.max(0) as u64,
    );
    e.family(
        "ringmq_store_put_rejected_busy_total",
        Kind::Counter,
        "Puts the store refused as busy.",
    );
    e.sample(
        "ringmq_store_put_rejected_busy_total",
        &[],
        s.put_rejected_busy,
    );
    e.family(
        "ringmq_commitlog_max_offset_bytes",
        Kind::Gauge,
        "CommitLog max (written) offset.",
    );
    e.sample(
        "ringmq_commitlog_max_offset_bytes",
        &[],
        s.commit_log_max_offset.max(0) as u64,
    );
}

/// One per-core family of the network runtime: name, kind, help, and the field it reads.
type CoreFamily = (
    &'static str,
    Kind,
    &'static str,
    fn(&ringmq_runtime::CoreStats) -> u64,
);

/// The network cores' loop and receive counters, in the order the page lists them.
const CORE_LOOP_FAMILIES: [CoreFamily; 11] = [
    (
        "ringmq_core_stalls_total",
        Kind::Counter,
        "Network core loop iterations busy longer than the stall threshold (500 us).",
        |s| s.loop_stats.stalls,
    ),
    (
        "ringmq_core_loop_iterations_total",
        Kind::Counter,
        "Network core loop iterations.",
        |s| s.loop_stats.iterations,
    ),
    (
        "ringmq_core_busy_us_total",
        Kind::Counter,
        "Network core busy time, microseconds.",
        |s| s.loop_stats.busy_ns / 1000,
    ),
    (
        "ringmq_core_loop_max_busy_us",
        Kind::Gauge,
        "Longest single network core loop iteration, microseconds.",
        |s| s.loop_stats.max_busy_ns / 1000,
    ),
    (
        "ringmq_core_requests_total",
        Kind::Counter,
        "Requests decoded by the network core.",
        |s| s.requests,
    ),
    (
        "ringmq_core_connections",
        Kind::Gauge,
        "Open connections owned by the network core.",
        |s| s.connections,
    ),
    (
        "ringmq_core_recv_multishot",
        Kind::Gauge,
        "1 when the core receives with multishot into its provided buffer ring.",
        |s| u64::from(s.recv_multishot),
    ),
    (
        "ringmq_core_recv_multishot_arms_total",
        Kind::Counter,
        "Multishot receives armed (re-arms follow ring exhaustion and kernel ends).",
        |s| s.recv_multishot_arms,
    ),
    (
        "ringmq_core_recv_buffers_exhausted_total",
        Kind::Counter,
        "Times the core's provided buffer ring ran dry (ENOBUFS).",
        |s| s.recv_buffers_exhausted,
    ),
    (
        "ringmq_core_read_pauses_total",
        Kind::Counter,
        "Connections whose reads paused because their output was backed up.",
        |s| s.read_pauses,
    ),
    (
        "ringmq_core_bad_frames_total",
        Kind::Counter,
        "Connections closed after a malformed or oversize frame.",
        |s| s.bad_frames,
    ),
];

/// The per-core memory and descriptor bounds of the network runtime: what was held, and how
/// many connections were closed or refused to keep within them.
const CORE_BOUND_FAMILIES: [CoreFamily; 7] = [
    (
        "ringmq_core_partial_frame_bytes",
        Kind::Gauge,
        "Frame-buffer bytes held for frames not yet complete.",
        |s| s.partial_frame_bytes,
    ),
    (
        "ringmq_core_partial_frame_closes_total",
        Kind::Counter,
        "Connections closed because the core's partial-frame bytes went over their bound.",
        |s| s.partial_frame_closes,
    ),
    (
        "ringmq_core_output_bytes",
        Kind::Gauge,
        "Unsent output bytes held in memory for the core's connections.",
        |s| s.output_bytes,
    ),
    (
        "ringmq_core_output_bytes_peak",
        Kind::Gauge,
        "The most unsent output bytes the core has held.",
        |s| s.output_bytes_peak,
    ),
    (
        "ringmq_core_output_closes_total",
        Kind::Counter,
        "Connections closed because the core's output bytes went over their bound.",
        |s| s.output_closes,
    ),
    (
        "ringmq_core_accept_errors_total",
        Kind::Counter,
        "Failed accepts (e.g. EMFILE at the descriptor limit), each followed by a back-off.",
        |s| s.accept_errors,
    ),
    (
        "ringmq_core_accept_refused_fd_reserve_total",
        Kind::Counter,
        "Connections closed right after accept to keep the descriptor reserve free.",
        |s| s.accept_refused_fd_reserve,
    ),
];

/// Every per-core family, one sample per network core labelled with its server, core index
/// and CPU. Nothing when no server reported cores.
fn render_core_stats(e: &mut Exposition, cores: &[ServerCoreStats]) {
    if cores.is_empty() {
        return;
    }
    for (name, kind, help, field) in CORE_LOOP_FAMILIES.into_iter().chain(CORE_BOUND_FAMILIES) {
        e.family(name, kind, help);
        for c in cores {
            let (core, cpu) = (c.stats.index.to_string(), c.stats.cpu.to_string());
            e.sample(
                name,
                &[("server", &c.server), ("core", &core), ("cpu", &cpu)],
                field(&c.stats),
            );
        }
    }
}

/// Broker-level gauges read from the managers at scrape time.
#[derive(Debug, Clone, Copy, Default)]
pub struct BrokerGauges {
    pub permission: u32,
    pub topics: u64,
    pub consumer_groups: u64,
}

fn bool_label(b: bool) -> &'static str {
    if b {
        "true"
    } else {
        "false"
    }
}

/// Upstream's system consumer groups (`MixAll.isSysConsumerGroup`: the `CID_RMQ_SYS_` prefix).
fn is_sys_group(group: &str) -> bool {
    group.starts_with("CID_RMQ_SYS_")
}

/// `request_code` label: upstream's constant name in lower case, the number when unknown.
fn request_code_label(code: i32) -> String {
    if code == i32::MIN {
        return OVERFLOW_LABEL.to_string();
    }
    RequestCode::from_code(code)
        .map(|c| c.name().to_ascii_lowercase())
        .unwrap_or_else(|| code.to_string())
}

fn response_code_label(code: i32) -> String {
    if code == i32::MIN {
        return OVERFLOW_LABEL.to_string();
    }
    ResponseCode::from_code(code)
        .map(|c| c.name().to_ascii_lowercase())
        .unwrap_or_else(|| code.to_string())
}

/// Days since the epoch in the local time zone (the daily totals roll at local midnight,
/// as upstream's schedule does).
fn local_day(now_ms: i64) -> i64 {
    let secs = now_ms.div_euclid(1000) as libc::time_t;
    // SAFETY: localtime_r writes only into `tm`, which we own; `secs` is a valid time_t.
    let offset_s = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&secs, &mut tm).is_null() {
            0
        } else {
            tm.tm_gmtoff
        }
    };
    (now_ms.div_euclid(1000) + offset_s).div_euclid(86_400)
}

/// The `/metrics` page of a broker.
/// The append stage's perf counters (`ringmq_append_<counter>_total`), summed over its
/// sampled critical sections; a counter this host cannot count is left out rather than
/// shown as 0.
fn render_append_perf(e: &mut Exposition, perf: &ringmq_store::perf_event::CounterTotals) {
    use ringmq_store::perf_event::CounterKind;
    if perf.values.iter().all(Option::is_none) {
        return;
    }
    e.family(
        "ringmq_append_perf_sampled_batches_total",
        Kind::Counter,
        "Append batches whose critical section was measured with perf counters (every ringmq.appendPerfSampleEvery-th batch); the ringmq_append_*_total perf counters sum over these.",
    );
    e.sample(
        "ringmq_append_perf_sampled_batches_total",
        &[],
        perf.batches,
    );
    for kind in CounterKind::ALL {
        let Some(v) = perf.get(kind) else { continue };
        let help = match kind {
            CounterKind::TaskClock => "CPU time of the append thread inside sampled critical sections, nanoseconds (perf task-clock).",
            CounterKind::ContextSwitches => "Context switches of the append thread inside sampled critical sections (perf context-switches).",
            CounterKind::CpuMigrations => "CPU migrations of the append thread inside sampled critical sections (perf cpu-migrations).",
            CounterKind::PageFaults => "Page faults taken by the append thread inside sampled critical sections (perf page-faults).",
            CounterKind::CpuCycles => "CPU cycles of the append thread inside sampled critical sections (perf cycles).",
            CounterKind::Instructions => "Instructions retired by the append thread inside sampled critical sections (perf instructions).",
        };
        let name = format!("ringmq_append_{}_total", kind.name());
        e.family(&name, Kind::Counter, help);
        e.sample(&name, &[], v);
    }
}

/// Where the broker's metrics endpoint listens: `ringmq.metricsPort` when above 0, else
/// upstream's `metricsExporterType=PROM` with `metricsPromExporterHost` /
/// `metricsPromExporterPort` (default 5557). Returns an error text for an unusable value.
pub fn endpoint_addr(
    config: &crate::config::BrokerConfig,
) -> Result<Option<std::net::SocketAddr>, String> {
    // Read from the unmodelled keys or, once config.rs models a key, from its entries, so
    // this keeps working whichever way the key is declared.
    let entries = config.entries();
    let extra = |k: &str| {
        config
            .extra
            .get(k)
            .cloned()
            .or_else(|| {
                entries
                    .iter()
                    .find(|(e, _)| *e == k)
                    .map(|(_, v)| v.clone())
            })
            .map(|v| v.trim().to_string())
    };
    let host = extra("metricsPromExporterHost")
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "0.0.0.0".to_string());
    let own_port = match extra("ringmq.metricsPort") {
        Some(p) => p
            .parse::<u16>()
            .map_err(|_| format!("ringmq.metricsPort={p:?} is not a port number"))?,
        None => 0,
    };
    let port = match own_port {
        p if p > 0 => p,
        _ if extra("metricsExporterType").is_some_and(|t| t.eq_ignore_ascii_case("PROM")) => {
            match extra("metricsPromExporterPort") {
                Some(p) => p
                    .parse::<u16>()
                    .map_err(|_| format!("metricsPromExporterPort={p:?} is not a port number"))?,
                None => 5557,
            }
        }
        _ => 0,
    };
    if port == 0 {
        return Ok(None);
    }
    let ip: std::net::IpAddr = host
        .parse()
        .map_err(|_| format!("metricsPromExporterHost={host:?} is not an IP address"))?;
    Ok(Some(std::net::SocketAddr::new(ip, port)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_lines<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        text.lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .collect()
    }

    fn value_of(text: &str, prefix: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    #[test]
    fn message_type_follows_upstream_order() {
        let p = |pairs: &[(&str, &str)]| {
            let mut s = String::new();
            for (k, v) in pairs {
                s.push_str(k);
                s.push('\u{1}');
                s.push_str(v);
                s.push('\u{2}');
            }
            MessageType::from_properties(&s)
        };
        assert_eq!(p(&[]), MessageType::Normal);
        assert_eq!(p(&[("DELAY", "3")]), MessageType::Delay);
        assert_eq!(
            p(&[("__SHARDINGKEY", "k"), ("DELAY", "3")]),
            MessageType::Fifo
        );
        assert_eq!(
            p(&[("DELAY", "3"), ("TRAN_MSG", "true")]),
            MessageType::Transaction
        );
        assert_eq!(p(&[("TRAN_MSG", "false")]), MessageType::Normal);
    }

    #[test]
    fn busy_reason_from_remark_prefix() {
        use BusyReason::*;
        let r = |s: &str| BusyReason::from_remark(Some(s));
        assert_eq!(r("[PC_SYNCHRONIZED]broker busy"), PcSynchronized);
        assert_eq!(r("[TIMEOUT_CLEAN_QUEUE]broker busy"), TimeoutCleanQueue);
        assert_eq!(r("[PCBUSY_CLEAN_QUEUE]x"), PcBusyCleanQueue);
        assert_eq!(r("[OVERLOAD]system busy"), Overload);
        assert_eq!(r("PC_SYNCHRONIZED"), Other);
        assert_eq!(BusyReason::from_remark(None), Other);
    }

    /// Sends' whole times reach runtime info as upstream's put-latency keys; other
    /// requests do not count, and failed sends are counted as failed puts.
    #[test]
    fn send_latency_fills_upstreams_put_latency_keys() {
        let m = BrokerMetrics::new("C", "B");
        for _ in 0..100 {
            m.record_rpc(310, 0, None, Duration::from_micros(2_500), false);
        }
        m.record_rpc(11, 0, None, Duration::from_secs(30), true);
        m.record_rpc(10, 14, None, Duration::from_micros(300), false);
        let mut t = BTreeMap::new();
        m.runtime_info_into(&mut t);
        // 100 of 101 puts took 2 ms (bucket 1–2 ms), one 0 ms.
        assert_eq!(
            t["putLatency99"], "1.98",
            "upstream's interpolation: 1 + (99 - 1) / 100"
        );
        assert_eq!(
            t["putMessageDistributeTime"],
            "[<=0ms]:1 [0~10ms]:100 [10~50ms]:0 [50~100ms]:0 [100~200ms]:0 [200~500ms]:0 \
             [500ms~1s]:0 [1~2s]:0 [2~3s]:0 [3~4s]:0 [4~5s]:0 [5~10s]:0 [10s~]:0 "
        );
        assert_eq!(
            t["putMessageEntireTimeMax"], "2",
            "the 30 s pull is not a put"
        );
        assert_eq!(t["putMessageFailedTimes"], "1");
    }

    #[test]
    fn counters_from_many_threads_sum_on_scrape() {
        let m = std::sync::Arc::new(BrokerMetrics::new("C1", "b-a"));
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let m = m.clone();
                std::thread::spawn(move || {
                    let k = m.in_key("T1", MessageType::Normal, || false);
                    for _ in 0..100 {
                        m.record_put(k, 2, 2000);
                    }
                    let d = m.in_key("T1", MessageType::Delay, || false);
                    m.record_put(d, 1, 5000);
                    m.record_get("T1", "G1", 3, 300, || false);
                    m.record_get("T1", "G1", 0, 0, || false);
                    m.record_rpc(310, 0, None, Duration::from_micros(500 + i), false);
                    m.record_rpc(
                        310,
                        2,
                        Some("[PC_SYNCHRONIZED]broker busy"),
                        Duration::from_millis(4),
                        false,
                    );
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let t = m.totals();
        assert_eq!(t.put_messages, 4 * 201);
        assert_eq!(t.put_messages_user, 4 * 201);
        assert_eq!(t.put_bytes, 4 * 205_000);
        assert_eq!((t.get_found, t.get_miss, t.get_messages), (4, 4, 12));
        assert_eq!(t.busy[BusyReason::PcSynchronized as usize], 4);

        let text = m.render(&BrokerGauges {
            permission: 6,
            topics: 3,
            consumer_groups: 1,
        });
        let base = "cluster=\"C1\",node_type=\"broker\",node_id=\"b-a\"";
        assert!(text.contains(&format!(
            "rocketmq_messages_in_total{{{base},topic=\"T1\",message_type=\"normal\",is_system=\"false\"}} 800\n"
        )), "{text}");
        assert!(text.contains(&format!(
            "rocketmq_messages_in_total{{{base},topic=\"T1\",message_type=\"delay\",is_system=\"false\"}} 4\n"
        )));
        assert!(text.contains(&format!(
            "rocketmq_throughput_in_total{{{base},topic=\"T1\",message_type=\"normal\",is_system=\"false\"}} 800000\n"
        )));
        assert!(text.contains(&format!(
            "rocketmq_messages_out_total{{{base},topic=\"T1\",consumer_group=\"G1\",is_retry=\"false\",is_system=\"false\"}} 12\n"
        )));
        assert!(text.contains(&format!("rocketmq_topic_number{{{base}}} 3\n")));
        assert!(text.contains(&format!("rocketmq_consumer_group_number{{{base}}} 1\n")));
        assert!(text.contains("# TYPE rocketmq_rpc_latency histogram\n"));
        // 4 sends under 1 ms, 4 busy answers in the 5 ms bucket.
        let ok = format!("{base},protocol_type=\"remoting\",request_code=\"send_message_v2\",response_code=\"success\",is_long_polling=\"false\",result=\"success\"");
        assert_eq!(
            value_of(
                &text,
                &format!("rocketmq_rpc_latency_bucket{{{ok},le=\"1\"}}")
            ),
            Some(4.0)
        );
        assert_eq!(
            value_of(&text, &format!("rocketmq_rpc_latency_count{{{ok}}}")),
            Some(4.0)
        );
        let busy = format!("{base},protocol_type=\"remoting\",request_code=\"send_message_v2\",response_code=\"system_busy\"");
        let busy_lines: Vec<&str> = sample_lines(&text, "rocketmq_rpc_latency_bucket")
            .into_iter()
            .filter(|l| l.contains(&busy))
            .collect();
        assert_eq!(busy_lines.len(), RPC_LATENCY_BOUNDS_MS.len() + 1);
        assert!(busy_lines[1].ends_with("le=\"3\"} 0"), "{busy_lines:?}");
        assert!(busy_lines[2].ends_with("le=\"5\"} 4"), "{busy_lines:?}");
        assert!(busy_lines.last().unwrap().ends_with("le=\"+Inf\"} 4"));
        assert_eq!(
            value_of(
                &text,
                &format!("ringmq_backpressure_refusals_total{{{base},reason=\"PC_SYNCHRONIZED\"}}")
            ),
            Some(4.0)
        );
        // Message size: 1000-byte sends land in le=1024, 5000-byte ones in le=524288.
        let sz = format!("rocketmq_message_size_bucket{{{base},topic=\"T1\",message_type=\"normal\",is_system=\"false\",le=\"1024\"}}");
        assert_eq!(value_of(&text, &sz), Some(400.0));
    }

    #[test]
    fn retry_topics_count_in_totals_but_not_as_series_and_system_topics_are_not_user_puts() {
        let m = BrokerMetrics::new("C", "B");
        let r = m.in_key("%RETRY%G", MessageType::Normal, || false);
        m.record_put(r, 1, 10);
        let s = m.in_key("SCHEDULE_TOPIC_XXXX", MessageType::Delay, || true);
        m.record_put(s, 1, 10);
        let t = m.totals();
        assert_eq!((t.put_messages, t.put_messages_user), (2, 1));
        let text = m.render(&BrokerGauges::default());
        assert!(!text.contains("%RETRY%G"));
        assert!(text.contains(
            "topic=\"SCHEDULE_TOPIC_XXXX\",message_type=\"delay\",is_system=\"true\"} 1"
        ));
    }

    #[test]
    fn topic_table_is_bounded() {
        let m = BrokerMetrics::new("C", "B");
        for i in 0..MAX_TOPICS + 10 {
            let k = m.in_key(&format!("T{i}"), MessageType::Normal, || false);
            m.record_put(k, 1, 1);
        }
        let text = m.render(&BrokerGauges::default());
        assert!(text.contains("topic=\"__other\""));
        assert_eq!(m.totals().put_messages, (MAX_TOPICS + 10) as u64);
    }

    #[test]
    fn tps_and_daily_totals() {
        let m = BrokerMetrics::new("C", "B");
        // A sample two seconds old, so the rate has a measurable window.
        let t0 = Instant::now() - Duration::from_secs(2);
        m.sample_at(t0, 0);
        let k = m.in_key("T", MessageType::Normal, || false);
        m.record_put(k, 500, 500);
        let mut kv = BTreeMap::new();
        m.runtime_info_into(&mut kv);
        assert_eq!(kv["msgPutTotalTodayNow"], "500");
        let tps: Vec<f64> = kv["putTps"]
            .split(' ')
            .map(|v| v.parse().unwrap())
            .collect();
        assert_eq!(tps.len(), 3);
        assert!(tps.iter().all(|v| *v > 0.0), "{tps:?}");
        // A window's rate: 500 messages over the 10 s since the matching sample.
        let now = t0 + Duration::from_secs(10);
        assert!(tps.iter().all(|v| *v > 200.0 && *v <= 250.0), "{tps:?}");
        let cur = m.totals();
        let r = m.rate(now, &cur, 10, |t| t.put_messages);
        assert!((r - 50.0).abs() < 1e-6, "{r}");
        // Midnight: today's morning becomes yesterday's.
        let day_ms = 86_400_000i64;
        m.sample_at(t0, day_ms * 3);
        m.record_put(k, 7, 7);
        m.sample_at(t0, day_ms * 4);
        let mut kv = BTreeMap::new();
        m.runtime_info_into(&mut kv);
        assert_eq!(kv["msgPutTotalTodayMorning"], "507");
        assert_eq!(kv["msgPutTotalYesterdayMorning"], "500");
        assert_eq!(kv["ringmq.appendLockHoldUs"], "0 0 0");
        assert_eq!(kv["ringmq.busyRefusals.OVERLOAD"], "0");
    }

    #[test]
    fn replication_lag_is_in_runtime_info_and_on_metrics() {
        let m = BrokerMetrics::new("C", "B");
        let mut counts = [0u64; ringmq_store::HA_ACK_LAG_BUCKETS];
        counts[0] = 90; // <= 0.25 ms
        counts[6] = 9; // <= 5 ms
        counts[ringmq_store::HA_ACK_LAG_BUCKETS - 1] = 1;
        m.set_store_probe(Box::new(move || ringmq_store::StoreMetrics {
            ha_ack_lag_counts: counts,
            ha_ack_lag_sum_us: 9_000_000,
            ..Default::default()
        }));
        let mut kv = BTreeMap::new();
        m.runtime_info_into(&mut kv);
        assert_eq!(kv["ringmq.haAckLagMs"], "0.25 5 100");
        assert!(kv["ringmq.haAckLagMsBuckets"].starts_with("0.25:90 0.5:0 "));
        assert!(kv["ringmq.haAckLagMsBuckets"].ends_with(" 5000:0 inf:1"));
        let text = m.render(&BrokerGauges::default());
        assert!(text.contains("ringmq_ha_ack_lag_ms_bucket{cluster=\"C\",node_type=\"broker\",node_id=\"B\",le=\"5\"} 99"), "{text}");
        assert!(text.contains(
            "ringmq_ha_ack_lag_ms_count{cluster=\"C\",node_type=\"broker\",node_id=\"B\"} 100"
        ));
        assert_eq!(bucket_quantile(&[1.0], &[0, 0], 0.99), "-");
        assert_eq!(bucket_quantile(&[1.0], &[1, 1], 0.99), "inf");
    }

    #[test]
    fn append_perf_counters_are_exported_only_when_counted() {
        use ringmq_store::perf_event::{CounterKind, CounterTotals, COUNTER_KINDS};
        let m = BrokerMetrics::new("C", "B");
        let mut values = [None; COUNTER_KINDS];
        values[CounterKind::ContextSwitches as usize] = Some(7);
        values[CounterKind::PageFaults as usize] = Some(3);
        values[CounterKind::TaskClock as usize] = Some(91_000);
        m.set_store_probe(Box::new(move || ringmq_store::StoreMetrics {
            append_batches: 40,
            append_perf: CounterTotals { batches: 5, values },
            ..Default::default()
        }));
        let text = m.render(&BrokerGauges::default());
        let base = "cluster=\"C\",node_type=\"broker\",node_id=\"B\"";
        for (name, v) in [
            ("ringmq_append_perf_sampled_batches_total", 5.0),
            ("ringmq_append_context_switches_total", 7.0),
            ("ringmq_append_page_faults_total", 3.0),
            ("ringmq_append_task_clock_ns_total", 91_000.0),
        ] {
            assert_eq!(
                value_of(&text, &format!("{name}{{{base}}}")),
                Some(v),
                "{name}"
            );
            assert!(text.contains(&format!("# TYPE {name} counter\n")), "{name}");
        }
        assert!(
            !text.contains("ringmq_append_cpu_cycles_total"),
            "unavailable: absent"
        );
        assert!(!text.contains("ringmq_append_instructions_total"));
        assert!(!text.contains("ringmq_append_cpu_migrations_total"));
        let mut kv = BTreeMap::new();
        m.runtime_info_into(&mut kv);
        assert_eq!(
            kv["ringmq.appendPerfCounters"],
            "batches=5 task_clock_ns=91000 context_switches=7 page_faults=3"
        );

        // A store that counts nothing (sampling off, or no perf events at all) shows none.
        let m = BrokerMetrics::new("C", "B");
        m.set_store_probe(Box::new(ringmq_store::StoreMetrics::default));
        assert!(!m
            .render(&BrokerGauges::default())
            .contains("ringmq_append_perf"));
        let mut kv = BTreeMap::new();
        m.runtime_info_into(&mut kv);
        assert!(!kv.contains_key("ringmq.appendPerfCounters"));
    }

    /// A core whose every counter is `base` plus a distinct offset.
    fn core_with(server: &str, index: usize, base: u64) -> ServerCoreStats {
        let stats = ringmq_runtime::CoreStats {
            index,
            cpu: index + 10,
            connections: base + 1,
            requests: base + 2,
            bad_frames: base + 3,
            read_pauses: base + 4,
            recv_multishot: true,
            recv_multishot_arms: base + 5,
            recv_buffers_exhausted: base + 6,
            partial_frame_bytes: base + 7,
            partial_frame_closes: base + 8,
            output_bytes: base + 9,
            output_bytes_peak: base + 10,
            output_closes: base + 11,
            accept_errors: base + 12,
            accept_refused_fd_reserve: base + 13,
            loop_stats: ringmq_runtime::StallStats {
                iterations: base + 14,
                stalls: base + 15,
                max_busy_ns: (base + 16) * 1000,
                busy_ns: (base + 17) * 1000,
            },
            ..Default::default()
        };
        ServerCoreStats {
            server: server.to_string(),
            stats,
        }
    }

    type StoreFamily = (&'static str, &'static str, &'static [(&'static str, f64)]);

    /// Store families of the stage profile: name, kind, and (sample suffix, value) pairs;
    /// `B` stands for the broker's labels.
    const STAGE_STORE_FAMILIES: [StoreFamily; 11] = [
        (
            "ringmq_append_lock_hold_us",
            "summary",
            &[
                ("{B,quantile=\"0.5\"}", 11.0),
                ("{B,quantile=\"0.99\"}", 12.0),
                ("{B,quantile=\"1\"}", 13.0),
                ("_count{B}", 4.0),
            ],
        ),
        ("ringmq_append_batches_total", "counter", &[("{B}", 4.0)]),
        ("ringmq_append_records_total", "counter", &[("{B}", 10.0)]),
        ("ringmq_append_records_per_batch", "gauge", &[("{B}", 2.5)]),
        (
            "ringmq_flush_latency_us",
            "summary",
            &[
                ("{B,quantile=\"0.5\"}", 21.0),
                ("{B,quantile=\"0.99\"}", 22.0),
                ("_count{B}", 5.0),
            ],
        ),
        ("ringmq_flushed_bytes_total", "counter", &[("{B}", 1000.0)]),
        ("ringmq_bytes_per_fdatasync", "gauge", &[("{B}", 200.0)]),
        ("ringmq_flush_group_mean", "gauge", &[("{B}", 2.5)]),
        ("ringmq_reput_lag_bytes", "gauge", &[("{B}", 31.0)]),
        (
            "ringmq_store_put_rejected_busy_total",
            "counter",
            &[("{B}", 32.0)],
        ),
        (
            "ringmq_commitlog_max_offset_bytes",
            "gauge",
            &[("{B}", 33.0)],
        ),
    ];

    /// Per-core families: name, kind, and the offset of its field from the core's base
    /// (None: the multishot flag, 1).
    const STAGE_CORE_FAMILIES: [(&str, &str, Option<u64>); 18] = [
        ("ringmq_core_stalls_total", "counter", Some(15)),
        ("ringmq_core_loop_iterations_total", "counter", Some(14)),
        ("ringmq_core_busy_us_total", "counter", Some(17)),
        ("ringmq_core_loop_max_busy_us", "gauge", Some(16)),
        ("ringmq_core_requests_total", "counter", Some(2)),
        ("ringmq_core_connections", "gauge", Some(1)),
        ("ringmq_core_recv_multishot", "gauge", None),
        ("ringmq_core_recv_multishot_arms_total", "counter", Some(5)),
        (
            "ringmq_core_recv_buffers_exhausted_total",
            "counter",
            Some(6),
        ),
        ("ringmq_core_read_pauses_total", "counter", Some(4)),
        ("ringmq_core_bad_frames_total", "counter", Some(3)),
        ("ringmq_core_partial_frame_bytes", "gauge", Some(7)),
        ("ringmq_core_partial_frame_closes_total", "counter", Some(8)),
        ("ringmq_core_output_bytes", "gauge", Some(9)),
        ("ringmq_core_output_bytes_peak", "gauge", Some(10)),
        ("ringmq_core_output_closes_total", "counter", Some(11)),
        ("ringmq_core_accept_errors_total", "counter", Some(12)),
        (
            "ringmq_core_accept_refused_fd_reserve_total",
            "counter",
            Some(13),
        ),
    ];

    /// The stage-profile part of the page: each family is listed in this order with its kind,
    /// and each sample carries the value of its own store or core field.
    #[test]
    fn stage_profile_families_read_their_own_fields_in_page_order() {
        use std::sync::atomic::{AtomicI64, Ordering};
        let m = BrokerMetrics::new("C", "B");
        // The flushed offset grows by 1000 bytes between the probe's install and the scrape.
        let flushed = AtomicI64::new(0);
        m.set_store_probe(Box::new(move || ringmq_store::StoreMetrics {
            lock_hold_p50_us: 11,
            lock_hold_p99_us: 12,
            lock_hold_max_us: 13,
            append_batches: 4,
            put_messages: 10,
            flush_p50_us: 21,
            flush_p99_us: 22,
            flush_count: 5,
            flush_group_mean: 2.5,
            dispatch_behind_bytes: 31,
            put_rejected_busy: 32,
            commit_log_max_offset: 33,
            commit_log_flushed_offset: flushed.fetch_add(1000, Ordering::Relaxed) + 1000,
            ..Default::default()
        }));
        m.set_core_probe(Box::new(|| {
            vec![core_with("broker", 0, 100), core_with("broker-vip", 1, 200)]
        }));
        let text = m.render(&BrokerGauges::default());
        let base = "cluster=\"C\",node_type=\"broker\",node_id=\"B\"";
        let mut last_type_at = 0;
        let mut in_order = |name: &str, kind: &str| {
            let at = text
                .find(&format!("# TYPE {name} {kind}\n"))
                .unwrap_or_else(|| panic!("{name} {kind} missing:\n{text}"));
            assert!(at > last_type_at, "{name} out of order");
            last_type_at = at;
        };
        for (name, kind, samples) in STAGE_STORE_FAMILIES {
            in_order(name, kind);
            for (suffix, v) in samples {
                let line = format!("{name}{}", suffix.replace('B', base));
                assert_eq!(value_of(&text, &format!("{line} ")), Some(*v), "{line}");
            }
        }
        for (name, kind, offset) in STAGE_CORE_FAMILIES {
            in_order(name, kind);
            for (server, index, core_base) in [("broker", 0, 100), ("broker-vip", 1, 200)] {
                let line = format!(
                    "{name}{{{base},server=\"{server}\",core=\"{index}\",cpu=\"{}\"}} ",
                    index + 10
                );
                let want = offset.map_or(1, |o| core_base + o) as f64;
                assert_eq!(value_of(&text, &line), Some(want), "{line}");
            }
        }
    }

    #[test]
    fn endpoint_from_config_keys() {
        let mut c = crate::config::BrokerConfig::default();
        assert_eq!(endpoint_addr(&c), Ok(None));
        c.extra.insert("metricsExporterType".into(), "PROM".into());
        assert_eq!(endpoint_addr(&c), Ok(Some("0.0.0.0:5557".parse().unwrap())));
        // 0 is "not set": upstream's PROM exporter settings still apply.
        c.extra.insert("ringmq.metricsPort".into(), "0".into());
        assert_eq!(endpoint_addr(&c), Ok(Some("0.0.0.0:5557".parse().unwrap())));
        c.extra.remove("metricsExporterType");
        assert_eq!(endpoint_addr(&c), Ok(None));
        c.extra.insert("ringmq.metricsPort".into(), "9999".into());
        c.extra
            .insert("metricsPromExporterHost".into(), "127.0.0.1".into());
        assert_eq!(
            endpoint_addr(&c),
            Ok(Some("127.0.0.1:9999".parse().unwrap()))
        );
        c.extra.insert("ringmq.metricsPort".into(), "x".into());
        assert!(endpoint_addr(&c).is_err());
    }
}
