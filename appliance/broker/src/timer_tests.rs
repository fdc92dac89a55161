//! The timer files' byte layout (upstream's), and the wheel + log delivering every message at
//! or after its time across restarts and crashes.

use super::checkpoint::{TimerCheckpoint, TimerCheckpointData, CHECKPOINT_SIZE_BYTES};
use super::log::{TimerLog, TimerUnit, BLANK_MAGIC_CODE};
use super::wheel::{TimerWheel, WHEEL_LENGTH_BYTES};
use super::*;
use crate::timer_put::{transform, TimerPut, TimerPutSettings};
use ringmq_store::MemStore;
use std::collections::HashMap;
use std::path::Path;

const T0_MS: i64 = 1_700_000_000_000;

struct FixedClock(AtomicI64);

impl Clock for FixedClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl FixedClock {
    fn advance(&self, ms: i64) -> i64 {
        self.0.fetch_add(ms, Ordering::SeqCst) + ms
    }
}

fn temp_root(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ringmq-timer-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn small_config(root: &Path) -> TimerConfig {
    TimerConfig {
        root: root.to_path_buf(),
        precision_ms: 100,
        roll_window_slots: 10,
        flush_interval_ms: 1000,
        // Eight units and a blank: segment changes happen often.
        timer_log_segment_bytes: 8 * 52 + 16,
        stop_enqueue: false,
        stop_dequeue: false,
        skip_unknown_error: false,
        retry_until_success: false,
    }
}

/// Parks a message as the send path would at `now_ms`; returns its delivery time.
fn park(store: &MemStore, now_ms: i64, uniq: &str, delay_ms: i64, extra: &str) -> i64 {
    let settings = TimerPutSettings {
        enable: true,
        precision_ms: 100,
        max_delay_sec: 3600,
        congest_num_each_slot: i64::from(i32::MAX),
    };
    let mut props = MessageProperties::parse(&format!(
        "UNIQ_KEY\u{1}{uniq}\u{2}TIMER_DELAY_MS\u{1}{delay_ms}\u{2}{extra}"
    ));
    let (mut topic, mut qid) = ("TopicT".to_string(), 2);
    let r = transform(&mut props, &mut topic, &mut qid, now_ms, &settings, |_| 0);
    assert!(matches!(r, Ok(TimerPut::Parked { .. })), "{r:?}");
    put_record(store, &topic, qid, &props, uniq.as_bytes());
    now_ms + delay_ms
}

fn put_record(store: &MemStore, topic: &str, qid: i32, props: &MessageProperties, body: &[u8]) {
    let mut prop_bytes = Vec::new();
    props.encode_into(&mut prop_bytes);
    let fields = RecordFields {
        queue_id: qid,
        flag: 0,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: 0,
        born_timestamp_ms: 1,
        born_host: "127.0.0.1:1".parse().unwrap(),
        store_timestamp_ms: 0,
        store_host: "127.0.0.1:2".parse().unwrap(),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body,
        topic,
        properties: &prop_bytes,
    };
    let mut records = BytesMut::new();
    record::encode_record(&fields, &mut records).unwrap();
    let (tx, rx) = mpsc::channel();
    store.put(
        PutRequest {
            topic: topic.to_string(),
            queue_id: qid,
            sys_flag: 0,
            records,
            record_count: 1,
            wait_store_msg_ok: true,
        },
        Box::new(move |r| {
            let _ = tx.send(r.status);
        }),
    );
    assert_eq!(rx.recv().unwrap(), PutMessageStatus::PutOk);
}

/// Every message of TopicT queue 2: (body, properties).
fn delivered(store: &MemStore) -> Vec<(String, HashMap<String, String>)> {
    let got = store.get_message("TopicT", 2, 0, 100_000, usize::MAX, &AcceptAll);
    got.messages
        .iter()
        .map(|m| {
            let Ok(Decoded::Message(r)) = record::decode_record(m, false) else {
                panic!("unreadable delivered record")
            };
            let props = MessageProperties::parse_bytes(r.properties);
            let map = props
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            (String::from_utf8(r.body.to_vec()).unwrap(), map)
        })
        .collect()
}

#[test]
fn wheel_file_layout_is_upstreams() {
    let root = temp_root("wheel-golden");
    let path = root.join("timerwheel");
    let mut wheel = TimerWheel::open(&path, 1000).unwrap();
    wheel.put_slot(5_000, 52, 104, 2, 0);
    wheel.flush().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), WHEEL_LENGTH_BYTES);
    assert_eq!(WHEEL_LENGTH_BYTES, 38_707_200);
    let mut want = Vec::new();
    want.extend_from_slice(&5i64.to_be_bytes());
    want.extend_from_slice(&52i64.to_be_bytes());
    want.extend_from_slice(&104i64.to_be_bytes());
    want.extend_from_slice(&2i32.to_be_bytes());
    want.extend_from_slice(&0i32.to_be_bytes());
    assert_eq!(&bytes[5 * 32..6 * 32], &want[..]);
    assert!(bytes[..5 * 32].iter().all(|b| *b == 0));
    // Same index one wheel turn later: another time, so empty.
    let turn_ms = 2 * SLOTS_TOTAL as i64 * 1000;
    assert!(wheel.get_slot(5_000 + turn_ms).is_empty());
    drop(wheel);
    let reopened = TimerWheel::open(&path, 1000).unwrap();
    assert_eq!(reopened.get_slot(5_500).last_pos, 104);
    std::fs::write(root.join("short"), [0u8; 10]).unwrap();
    assert!(TimerWheel::open(&root.join("short"), 1000).is_err());
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn log_unit_blank_checkpoint_and_metrics_layout_are_upstreams() {
    let unit = TimerUnit {
        prev_pos: -1,
        magic: MAGIC_DEFAULT | MAGIC_ROLL,
        curr_write_time_ms: 0x0102_0304_0506_0708,
        delay_ms: 1000,
        offset_py: 4096,
        size_py: 300,
        topic_hash: ringmq_remoting::message::tags::java_string_hash("TopicA"),
    };
    let b = unit.encode();
    let mut want = Vec::new();
    want.extend_from_slice(&52i32.to_be_bytes());
    want.extend_from_slice(&(-1i64).to_be_bytes());
    want.extend_from_slice(&3i32.to_be_bytes());
    want.extend_from_slice(&0x0102_0304_0506_0708i64.to_be_bytes());
    want.extend_from_slice(&1000i32.to_be_bytes());
    want.extend_from_slice(&4096i64.to_be_bytes());
    want.extend_from_slice(&300i32.to_be_bytes());
    // "TopicA".hashCode() in Java.
    want.extend_from_slice(&(-1_784_167_150i32).to_be_bytes());
    want.extend_from_slice(&[0u8; 8]);
    assert_eq!(&b[..], &want[..]);
    assert_eq!(TimerUnit::decode(&b), Some(unit));
    assert_eq!(BLANK_MAGIC_CODE as u32, 0xCBD4_3194);

    // Segment of two units and 20 spare bytes: the third unit starts the next file.
    let root = temp_root("log-golden");
    let dir = root.join("timerlog");
    let mut log = TimerLog::open(&dir, 2 * 52 + 20).unwrap();
    assert_eq!(log.append(&unit).unwrap(), 0);
    assert_eq!(log.append(&unit).unwrap(), 52);
    assert_eq!(log.append(&unit).unwrap(), 124);
    log.flush().unwrap();
    let first = std::fs::read(dir.join("00000000000000000000")).unwrap();
    assert_eq!(first.len(), 124);
    let mut blank = Vec::new();
    blank.extend_from_slice(&20i32.to_be_bytes());
    blank.extend_from_slice(&[0u8; 8]);
    blank.extend_from_slice(&0xCBD4_3194u32.to_be_bytes());
    assert_eq!(&first[104..120], &blank[..]);
    let second = std::fs::read(dir.join("00000000000000000124")).unwrap();
    assert_eq!(&second[..52], &want[..]);
    // Recovery finds the end after the blank and the third unit.
    let mut log = TimerLog::open(&dir, 2 * 52 + 20).unwrap();
    let mut seen = Vec::new();
    let end = log.recover(0, true, |pos, _| seen.push(pos)).unwrap();
    assert_eq!((end, seen), (176, vec![0, 52, 124]));

    let path = root.join("config").join("timercheck");
    let mut ck = TimerCheckpoint::open(&path).unwrap();
    assert!(!ck.existed);
    ck.data = TimerCheckpointData {
        last_read_time_ms: 1,
        last_timer_log_flush_pos: 2,
        last_timer_queue_offset: 3,
        master_timer_queue_offset: 4,
        state_version: 5,
        data_version_timestamp_ms: 6,
        data_version_counter: 7,
    };
    ck.flush().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), CHECKPOINT_SIZE_BYTES);
    for i in 0..7 {
        assert_eq!(&bytes[i * 8..i * 8 + 8], &(i as i64 + 1).to_be_bytes());
    }
    assert_eq!(TimerCheckpoint::open(&path).unwrap().data, ck.data);

    let path = root.join("config").join("timermetrics");
    let mut m = super::metrics::TimerMetrics::load(&path, 5);
    m.add("TopicA", 3, 9);
    m.persist(11).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let compact: String = text.split_whitespace().collect();
    assert_eq!(
        compact,
        r#"{"dataVersion":{"counter":1,"stateVersion":0,"timestamp":11},"timingCount":{"TopicA":{"count":3,"timeStamp":9}}}"#
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn delivers_at_its_time_with_upstream_properties_and_cancels() {
    let root = temp_root("deliver");
    let store = Arc::new(MemStore::new());
    let clock = Arc::new(FixedClock(AtomicI64::new(T0_MS + 37)));
    let svc = TimerMessageStore::open(small_config(&root), store.clone(), clock.clone()).unwrap();
    let now = clock.now_ms();
    let due = park(&store, now, "U1", 500, "");
    // A second message cancelled by a delete request for the same time.
    park(&store, now, "U2", 500, "");
    park(
        &store,
        now,
        "D2",
        500,
        "TIMER_DEL_UNIQKEY\u{1}TopicT+U2\u{2}",
    );
    // Beyond the 10-slot roll window: rolled, then delivered.
    let rolled_due = park(&store, now, "U3", 2_500, "");
    assert_eq!(svc.runtime_info().offset_behind, 4);
    svc.run_once();
    let info = svc.runtime_info();
    // Three messages in, one delete request out (upstream's slot count).
    assert_eq!((info.offset_behind, info.congest_num), (0, 2));
    svc.flush().unwrap();
    let metrics_path = root.join("config").join("timermetrics");
    let m = super::metrics::TimerMetrics::load(&metrics_path, 0);
    assert_eq!(
        m.count("TopicT"),
        2,
        "pending per real topic in timermetrics"
    );
    while clock.now_ms() + 100 < due {
        clock.advance(100);
        svc.run_once();
        assert!(delivered(&store).is_empty(), "nothing before its time");
    }
    for _ in 0..30 {
        clock.advance(100);
        svc.run_once();
    }
    let got = delivered(&store);
    let bodies: Vec<&str> = got.iter().map(|(b, _)| b.as_str()).collect();
    assert_eq!(bodies, vec!["U1", "U3"], "U2 was cancelled");
    let (_, p) = &got[0];
    assert!(p["TIMER_DEQUEUE_MS"].parse::<i64>().unwrap() >= due);
    assert!(p.contains_key("TIMER_OUT_MS") && p.contains_key("TIMER_ENQUEUE_MS"));
    assert!(!p.contains_key("REAL_TOPIC") && !p.contains_key("REAL_QID"));
    assert_eq!(p["WAIT"], "false");
    assert_eq!(svc.runtime_info().congest_num, 0);
    svc.flush().unwrap();
    let m = super::metrics::TimerMetrics::load(&metrics_path, 0);
    assert_eq!(m.count("TopicT"), 0);
    assert!(svc.runtime_info().read_behind_s <= 1);
    let (_, p3) = &got[1];
    // 2500 ms with a 1000 ms window: rolled at +1000 and +2100, then due.
    assert_eq!(p3["TIMER_ROLL_TIMES"], "2");
    assert!(p3["TIMER_DEQUEUE_MS"].parse::<i64>().unwrap() >= rolled_due);
    svc.stop();
    let _ = std::fs::remove_dir_all(&root);
}

/// A small deterministic generator (xorshift) so a failing seed can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Random delays, clock steps and restarts: every message is delivered, never before its
/// time; exactly once when restarts are clean, at least once when they are crashes.
fn run_scenario(seed: u64, crashes: bool) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let root = temp_root(&format!("prop-{seed}-{crashes}"));
    let store = Arc::new(MemStore::new());
    let clock = Arc::new(FixedClock(AtomicI64::new(T0_MS + rng.below(1000) as i64)));
    let open = || TimerMessageStore::open(small_config(&root), store.clone(), clock.clone());
    let mut svc = open().unwrap();
    let mut due: HashMap<String, i64> = HashMap::new();
    let (mut restarts, mut n) = (0, 0);
    for _ in 0..300 {
        for _ in 0..rng.below(6) {
            let key = format!("M{n}");
            n += 1;
            let delay = 1 + rng.below(3_000) as i64;
            due.insert(key.clone(), park(&store, clock.now_ms(), &key, delay, ""));
        }
        clock.advance(rng.below(250) as i64);
        svc.run_once();
        if rng.below(30) == 0 {
            restarts += 1;
            if crashes {
                drop(svc);
            } else {
                svc.stop();
            }
            svc = open().unwrap();
        }
    }
    let last_due = due.values().copied().max().unwrap_or(0);
    for _ in 0..200 {
        if clock.now_ms() > last_due + 1_000 {
            break;
        }
        clock.advance(100);
        svc.run_once();
    }
    svc.run_once();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (body, props) in delivered(&store) {
        let at: i64 = props["TIMER_DEQUEUE_MS"].parse().unwrap();
        let want = due[&body];
        assert!(
            at >= want,
            "seed {seed}: {body} delivered at {at}, due {want}"
        );
        *seen.entry(body).or_default() += 1;
    }
    for key in due.keys() {
        let times = seen.get(key).copied().unwrap_or(0);
        assert!(times >= 1, "seed {seed}: {key} lost ({restarts} restarts)");
        if !crashes {
            assert_eq!(times, 1, "seed {seed}: {key} delivered {times} times");
        }
    }
    svc.stop();
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn property_every_message_once_at_or_after_its_time_across_clean_restarts() {
    for seed in 1..=4 {
        run_scenario(seed, false);
    }
}

#[test]
fn property_every_message_at_least_once_at_or_after_its_time_across_crashes() {
    for seed in 1..=4 {
        run_scenario(seed, true);
    }
}

/// A store whose CommitLog lost everything below `gone_below` (retention), else the MemStore.
struct ExpiringStore {
    inner: MemStore,
    gone_below: AtomicI64,
}

impl StoreApi for ExpiringStore {
    fn put(&self, request: PutRequest, on_done: ringmq_store::PutCallback) {
        self.inner.put(request, on_done)
    }
    fn get_message(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_msg_nums: i32,
        max_total_bytes: usize,
        filter: &dyn ringmq_store::MessageFilter,
    ) -> ringmq_store::GetMessageResult {
        self.inner.get_message(
            topic,
            queue_id,
            offset,
            max_msg_nums,
            max_total_bytes,
            filter,
        )
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
        boundary: ringmq_store::Boundary,
    ) -> i64 {
        self.inner
            .offset_in_queue_by_time(topic, queue_id, timestamp_ms, boundary)
    }
    fn earliest_message_time(&self, topic: &str, queue_id: i32) -> Option<i64> {
        self.inner.earliest_message_time(topic, queue_id)
    }
    fn message_store_time(&self, topic: &str, queue_id: i32, queue_offset: i64) -> Option<i64> {
        self.inner.message_store_time(topic, queue_id, queue_offset)
    }
    fn look_message_by_offset(&self, physical_offset: i64) -> Option<Bytes> {
        if physical_offset < self.gone_below.load(Ordering::SeqCst) {
            return None;
        }
        self.inner.look_message_by_offset(physical_offset)
    }
    fn query_message(&self, t: &str, k: &str, n: usize, b: i64, e: i64) -> Vec<Bytes> {
        self.inner.query_message(t, k, n, b, e)
    }
    fn index_last_update(&self) -> ringmq_store::IndexUpdatePoint {
        self.inner.index_last_update()
    }
    fn add_arrival_listener(&self, listener: ringmq_store::ArrivalListener) {
        self.inner.add_arrival_listener(listener)
    }
    fn commit_log_max_offset(&self) -> i64 {
        self.inner.commit_log_max_offset()
    }
    fn execute_delete_files_manually(&self) {}
    fn shutdown(&self) {}
}

#[test]
fn log_segments_of_deleted_messages_are_removed_but_not_the_last() {
    let root = temp_root("clean");
    let store = Arc::new(ExpiringStore {
        inner: MemStore::new(),
        gone_below: AtomicI64::new(0),
    });
    let clock = Arc::new(FixedClock(AtomicI64::new(T0_MS)));
    let svc = TimerMessageStore::open(small_config(&root), store.clone(), clock.clone()).unwrap();
    // 20 messages far in the future: three segments of eight units.
    for i in 0..20 {
        park(&store.inner, clock.now_ms(), &format!("C{i}"), 500_000, "");
    }
    while svc.run_once().enqueued > 0 {}
    let segment_files = || std::fs::read_dir(root.join("timerlog")).unwrap().count();
    assert_eq!(segment_files(), 3);
    clock.advance(CLEAN_INTERVAL_MS);
    svc.run_once();
    assert_eq!(segment_files(), 3, "messages still there: nothing removed");
    // Retention removed everything: the two full segments go, the one being written stays.
    store.gone_below.store(i64::MAX, Ordering::SeqCst);
    clock.advance(CLEAN_INTERVAL_MS);
    svc.run_once();
    assert_eq!(segment_files(), 1);
    svc.stop();
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn refused_delivery_is_retried_and_a_permanent_refusal_dropped() {
    let root = temp_root("retry");
    let store = Arc::new(MemStore::new());
    let clock = Arc::new(FixedClock(AtomicI64::new(T0_MS)));
    let cfg = TimerConfig {
        retry_until_success: true,
        ..small_config(&root)
    };
    let svc = TimerMessageStore::open(cfg, store.clone(), clock.clone()).unwrap();
    let due = park(&store, clock.now_ms(), "R1", 300, "");
    svc.run_once();
    clock.advance(due - clock.now_ms() + 200);
    store.force_put_status(Some(PutMessageStatus::OsPageCacheBusy));
    let clear = {
        let store = store.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            store.force_put_status(None);
        })
    };
    for _ in 0..20 {
        svc.run_once();
    }
    clear.join().unwrap();
    assert_eq!(
        delivered(&store).len(),
        1,
        "busy store: retried until taken"
    );

    let due = park(&store, clock.now_ms(), "R2", 300, "");
    svc.run_once();
    clock.advance(due - clock.now_ms() + 200);
    store.force_put_status(Some(PutMessageStatus::MessageIllegal));
    for _ in 0..20 {
        svc.run_once();
    }
    store.force_put_status(None);
    let (_, read_time) = svc.progress();
    assert!(
        read_time > due - 100,
        "the slot was passed, not retried forever"
    );
    let bodies: Vec<String> = delivered(&store).into_iter().map(|(b, _)| b).collect();
    assert_eq!(bodies, vec!["R1"], "an illegal message is dropped");
    svc.stop();
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn gauges_measure_lateness_from_the_slot_end_and_admin_views_follow_flushes() {
    let root = temp_root("gauges");
    let store = Arc::new(MemStore::new());
    let clock = Arc::new(FixedClock(AtomicI64::new(T0_MS + 37)));
    let svc = TimerMessageStore::open(small_config(&root), store.clone(), clock.clone()).unwrap();
    let opened = svc.checkpoint_bytes();
    assert_eq!(opened.len(), 56);
    // Due at +537: slot +500, which ends (and is delivered from) +600.
    park(&store, clock.now_ms(), "L1", 500, "");
    park(&store, clock.now_ms(), "L2", 900, "");
    svc.run_once();
    let g = svc.gauges();
    assert_eq!(
        (g.enqueue_total, g.congest_msgs, g.enqueue_lag_msgs),
        (2, 2, 0)
    );
    assert_eq!(g.timing_by_topic, vec![("TopicT".to_string(), 2)]);
    assert_eq!(svc.checkpoint_bytes(), opened, "unchanged until a flush");
    for _ in 0..6 {
        clock.advance(100);
        svc.run_once();
    }
    // L1 delivered at +637: 37 ms after its slot ended.
    let g = svc.gauges();
    assert_eq!(g.dequeue_total, 1);
    assert_eq!(g.lateness_sum_ms, 37);
    assert_eq!(g.lateness_counts[lateness_bucket(37)], 1);
    // L2 (slot +900, ends +1000) delivered after a 3 s stall of the stage: 2637 ms late.
    clock.advance(3_000);
    svc.run_once();
    let g = svc.gauges();
    assert_eq!((g.dequeue_total, g.congest_msgs), (2, 0));
    assert_eq!(g.lateness_sum_ms, 37 + 2_637);
    assert_eq!(g.lateness_counts[lateness_bucket(2_637)], 1);
    assert_eq!(g.lateness_counts.iter().sum::<u64>(), 2);
    svc.flush().unwrap();
    let ck = TimerCheckpointData::decode(&svc.checkpoint_bytes());
    assert_eq!(ck.last_timer_queue_offset, 2);
    assert!(ck.last_read_time_ms > T0_MS + 900);
    let json: serde_json::Value = serde_json::from_str(&svc.metrics_json()).unwrap();
    assert_eq!(json["timingCount"]["TopicT"]["count"], 0);
    svc.stop();
    let _ = std::fs::remove_dir_all(&root);
}
