//! Integration tests of ringmq-store through its public API: put/get in both write modes and
//! flush types, roll-over, batches and transactions, recovery (clean, abnormal, hand-made
//! directories laid out per the spec), index queries, retention, a kill -9 crash test of a
//! SYNC_FLUSH writer process and a disk-full (RLIMIT_FSIZE) test.

use bytes::{Bytes, BytesMut};
use ringmq_remoting::message::record::{self, decode_record, encode_record, Decoded, RecordFields};
use ringmq_store::consume_queue::CQ_UNIT_SIZE;
use ringmq_store::{
    AcceptAll, Boundary, FlushDiskType, GetMessageStatus, MessageFilter, MessageStore,
    PutMessageStatus, PutRequest, StoreConfig, WriteMode,
};
use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

static DIRS: AtomicU32 = AtomicU32::new(0);

/// Removes the scratch directories of earlier test runs whose process is gone (names end in
/// `-<pid>-<n>`), so stores left behind by failed or killed runs do not pile up on disk;
/// this run's directories stay for inspection until the next run.
fn remove_stale_dirs(base: &Path) {
    let Ok(rd) = std::fs::read_dir(base) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name.rsplit('-').nth(1).and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let n = DIRS.fetch_add(1, Ordering::Relaxed);
    let base = std::env::temp_dir().join("ringmq-store-it");
    if n == 0 {
        remove_stale_dirs(&base);
    }
    let p = base.join(format!("{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

const SEG: u64 = 64 * 1024;

fn config(dir: &Path, flush: FlushDiskType, mode: WriteMode) -> StoreConfig {
    StoreConfig {
        store_path_root_dir: dir.to_path_buf(),
        mapped_file_size_commit_log: SEG,
        mapped_file_size_consume_queue_units: 32,
        flush_disk_type: flush,
        write_mode: mode,
        flush_interval_commit_log_ms: 20,
        max_hash_slot_num: 128,
        max_index_num: 512,
        direct_write_ring_size_bytes: 256 * 1024,
        ..StoreConfig::default()
    }
}

fn props(key: &str, tags: Option<&str>) -> String {
    let mut p = format!("KEYS\u{1}{key} alt-{key}\u{2}UNIQ_KEY\u{1}U-{key}\u{2}");
    if let Some(t) = tags {
        p.push_str(&format!("TAGS\u{1}{t}\u{2}"));
    }
    p
}

fn encode(topic: &str, queue_id: i32, sys_flag: i32, body: &[u8], props: &str, out: &mut BytesMut) {
    let f = RecordFields {
        queue_id,
        flag: 7,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag,
        born_timestamp_ms: 1_700_000_000_000,
        born_host: "10.0.0.1:5555".parse().unwrap(),
        store_timestamp_ms: 0,
        store_host: "10.0.0.2:10911".parse().unwrap(),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body,
        topic,
        properties: props.as_bytes(),
    };
    encode_record(&f, out).unwrap();
}

fn put(
    store: &MessageStore,
    topic: &str,
    qid: i32,
    key: &str,
    body_len: usize,
) -> ringmq_store::PutResult {
    let mut b = BytesMut::new();
    let body: Vec<u8> = key.bytes().cycle().take(body_len).collect();
    encode(topic, qid, 0, &body, &props(key, Some("TagA")), &mut b);
    store.put_blocking(PutRequest::new(topic, qid, 0, b, 1))
}

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn decode(b: &Bytes) -> record::StoredRecord<'_> {
    match decode_record(b, true).unwrap() {
        Decoded::Message(r) => r,
        Decoded::Blank { .. } => panic!("blank"),
    }
}

fn key_of(r: &record::StoredRecord<'_>) -> String {
    let p = std::str::from_utf8(r.properties).unwrap();
    p.split('\u{2}')
        .find_map(|kv| kv.strip_prefix("KEYS\u{1}"))
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_string()
}

/// Exercises put + get on one configuration.
fn put_get_roundtrip(flush: FlushDiskType, mode: WriteMode) {
    let dir = temp_dir("roundtrip");
    let store = MessageStore::open(config(&dir, flush, mode)).unwrap();
    let mut results = Vec::new();
    for i in 0..200 {
        let r = put(&store, "T1", i % 2, &format!("k{i}"), 100 + i as usize * 7);
        assert_eq!(r.status, PutMessageStatus::PutOk, "put {i}");
        assert_eq!(r.queue_offset, (i / 2) as i64);
        results.push(r);
    }
    wait_until("dispatch", || {
        store.max_offset_in_queue("T1", 0) == 100 && store.max_offset_in_queue("T1", 1) == 100
    });
    let g = store.get_message("T1", 0, 0, 32, 1 << 20, &AcceptAll);
    assert_eq!(g.status, GetMessageStatus::Found);
    assert_eq!(g.messages.len(), 32);
    assert_eq!(g.next_begin_offset, 32);
    for (j, m) in g.messages.iter().enumerate() {
        let r = decode(m);
        assert_eq!(r.queue_offset, j as i64);
        assert_eq!(r.physical_offset, results[j * 2].wrote_offset);
        assert_eq!(key_of(&r), format!("k{}", j * 2));
        assert_eq!(r.flag, 7);
        assert_eq!(r.topic().unwrap(), "T1");
    }
    // Status rules of store.md §12.
    assert_eq!(
        store
            .get_message("T1", 0, 100, 32, 1 << 20, &AcceptAll)
            .status,
        GetMessageStatus::OffsetOverflowOne
    );
    let bad = store.get_message("T1", 0, 150, 32, 1 << 20, &AcceptAll);
    assert_eq!(
        (bad.status, bad.next_begin_offset),
        (GetMessageStatus::OffsetOverflowBadly, 100)
    );
    assert_eq!(
        store
            .get_message("nope", 0, 0, 32, 1 << 20, &AcceptAll)
            .status,
        GetMessageStatus::NoMatchedLogicQueue
    );
    // Roll-over happened (200 messages of ~1 KiB over 64 KiB segments) and every record is
    // reachable by physical offset.
    assert!(std::fs::read_dir(dir.join("commitlog")).unwrap().count() >= 3);
    for r in &results {
        let m = store.look_message_by_offset(r.wrote_offset).unwrap();
        assert_eq!(decode(&m).physical_offset, r.wrote_offset);
    }
    store.shutdown();
    assert!(!dir.join("abort").exists(), "clean shutdown removes abort");
    // Reopen (normal recovery) and read everything back.
    let store = MessageStore::open(config(&dir, flush, mode)).unwrap();
    assert!(
        store.last_exit_ok(),
        "reopen after a clean shutdown is normal"
    );
    assert_eq!(store.max_offset_in_queue("T1", 1), 100);
    let g = store.get_message("T1", 1, 90, 32, 1 << 20, &AcceptAll);
    assert_eq!(g.messages.len(), 10);
    assert_eq!(key_of(&decode(&g.messages[9])), "k199");
    let r = put(&store, "T1", 1, "after", 10);
    assert_eq!(r.queue_offset, 100);
    assert_eq!(
        r.wrote_offset,
        results
            .last()
            .map(|r| r.wrote_offset + r.wrote_bytes as i64)
            .unwrap()
    );
    store.shutdown();
}

#[test]
fn mmap_async_put_get() {
    put_get_roundtrip(FlushDiskType::AsyncFlush, WriteMode::Mmap);
}

#[test]
fn mmap_sync_put_get() {
    put_get_roundtrip(FlushDiskType::SyncFlush, WriteMode::Mmap);
}

#[test]
fn direct_sync_put_get() {
    put_get_roundtrip(FlushDiskType::SyncFlush, WriteMode::Direct);
}

#[test]
fn direct_async_put_get() {
    put_get_roundtrip(FlushDiskType::AsyncFlush, WriteMode::Direct);
}

#[test]
fn roll_over_writes_blank_and_offsets_are_contiguous() {
    let dir = temp_dir("roll");
    let store =
        MessageStore::open(config(&dir, FlushDiskType::SyncFlush, WriteMode::Mmap)).unwrap();
    let mut prev_end = 0i64;
    let mut rolled = 0;
    for i in 0..300 {
        let r = put(&store, "R", 0, &format!("r{i}"), 700 + (i * 37) % 900);
        assert_eq!(r.status, PutMessageStatus::PutOk);
        let start = r.wrote_offset as u64;
        let end = start + r.wrote_bytes as u64;
        assert_eq!(
            start / SEG,
            (end - 1) / SEG,
            "a record never spans segments"
        );
        if r.wrote_offset != prev_end {
            // Jumped over a BLANK filler to the next segment start.
            assert_eq!(start % SEG, 0);
            assert!(SEG - (prev_end as u64 % SEG) >= 8 || (prev_end as u64).is_multiple_of(SEG));
            let seg_name = format!("{:020}", prev_end as u64 / SEG * SEG);
            let data = std::fs::read(dir.join("commitlog").join(seg_name)).unwrap();
            let pos = (prev_end as u64 % SEG) as usize;
            assert_eq!(&data[pos + 4..pos + 8], &record::BLANK_MAGIC.to_be_bytes());
            assert_eq!(
                i32::from_be_bytes(data[pos..pos + 4].try_into().unwrap()) as u64,
                SEG - pos as u64
            );
            rolled += 1;
        }
        prev_end = end as i64;
    }
    assert!(rolled >= 3);
    let mut names: Vec<String> = std::fs::read_dir(dir.join("commitlog"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    for (i, n) in names.iter().enumerate() {
        assert_eq!(n, &format!("{:020}", i as u64 * SEG));
    }
    wait_until("dispatch", || store.max_offset_in_queue("R", 0) == 300);
    // Consume the whole queue in pulls; each record's queue offset is its position.
    let mut next = 0;
    let mut seen = 0;
    while next < 300 {
        let g = store.get_message("R", 0, next, 32, 1 << 20, &AcceptAll);
        assert_eq!(g.status, GetMessageStatus::Found);
        for m in &g.messages {
            assert_eq!(decode(m).queue_offset, seen);
            seen += 1;
        }
        next = g.next_begin_offset;
    }
    assert_eq!(seen, 300);
    // CommitLog and CQ min/max.
    assert_eq!(store.commit_log_min_offset(), 0);
    assert_eq!(store.commit_log_max_offset(), prev_end);
    assert_eq!(store.min_offset_in_queue("R", 0), 0);
    store.shutdown();
}

/// ASYNC_FLUSH/mmap dispatches each batch from the bytes it just wrote (falling back to
/// the log at a roll-over): with four writers forming multi-put batches across several
/// segment roll-overs, every record gets exactly one ConsumeQueue unit at its queue
/// offset, pointing at itself, and exactly one index entry per key.
#[test]
fn concurrent_async_batches_dispatch_every_record_once() {
    const WRITERS: usize = 4;
    const PER_WRITER: usize = 150;
    let dir = temp_dir("async-batches");
    let store =
        MessageStore::open(config(&dir, FlushDiskType::AsyncFlush, WriteMode::Mmap)).unwrap();
    std::thread::scope(|sc| {
        for w in 0..WRITERS {
            let store = store.clone();
            sc.spawn(move || {
                // Up to 32 puts in flight per writer, so the append stage takes batches.
                let (tx, rx) = std::sync::mpsc::sync_channel(32);
                for i in 0..PER_WRITER {
                    if i >= 32 {
                        let r: ringmq_store::PutResult = rx.recv().unwrap();
                        assert_eq!(r.status, PutMessageStatus::PutOk);
                    }
                    let key = format!("w{w}-{i}");
                    let body: Vec<u8> = key.bytes().cycle().take(300 + (i * 53) % 700).collect();
                    let mut b = BytesMut::new();
                    encode("AB", w as i32, 0, &body, &props(&key, Some("TagA")), &mut b);
                    let tx = tx.clone();
                    store.put(
                        PutRequest::new("AB", w as i32, 0, b, 1),
                        Box::new(move |r| {
                            let _ = tx.send(r);
                        }),
                    );
                }
                for _ in 0..PER_WRITER.min(32) {
                    assert_eq!(rx.recv().unwrap().status, PutMessageStatus::PutOk);
                }
            });
        }
    });
    assert!(std::fs::read_dir(dir.join("commitlog")).unwrap().count() >= 3);
    for w in 0..WRITERS as i32 {
        wait_until("dispatch", || {
            store.max_offset_in_queue("AB", w) == PER_WRITER as i64
        });
        let mut next = 0;
        while next < PER_WRITER as i64 {
            let g = store.get_message("AB", w, next, 32, 1 << 20, &AcceptAll);
            assert_eq!(g.status, GetMessageStatus::Found);
            for (j, m) in g.messages.iter().enumerate() {
                let r = decode(m);
                assert_eq!(r.queue_offset, next + j as i64, "unit at its queue offset");
                assert_eq!(r.queue_id, w);
                assert_eq!(key_of(&r), format!("w{w}-{}", next + j as i64));
            }
            next = g.next_begin_offset;
        }
    }
    for w in 0..WRITERS {
        for i in (0..PER_WRITER).step_by(7) {
            let hits = store.query_message("AB", &format!("w{w}-{i}"), 8, 0, i64::MAX);
            assert_eq!(hits.len(), 1, "one index entry for w{w}-{i}");
        }
    }
    store.shutdown();
}

/// Puts records of `body_lens` and checks the roll-over invariants: each record inside
/// one segment, offsets contiguous except for a jump to the next segment start over a
/// BLANK that fills the rest of the old one, queue offsets 0..n; then again after reopen.
fn check_roll_over(mode: WriteMode, body_lens: &[usize]) {
    let dir = temp_dir("roll-prop");
    let cfg = || config(&dir, FlushDiskType::SyncFlush, mode);
    let store = MessageStore::open(cfg()).unwrap();
    let mut records = Vec::with_capacity(body_lens.len());
    let mut prev_end = 0u64;
    for (i, &len) in body_lens.iter().enumerate() {
        let r = put(&store, "P", 0, &format!("p{i}"), len);
        assert_eq!(r.status, PutMessageStatus::PutOk, "put {i} of {len} B");
        assert_eq!(r.queue_offset, i as i64);
        let start = r.wrote_offset as u64;
        let end = start + r.wrote_bytes as u64;
        assert_eq!(start / SEG, (end - 1) / SEG, "put {i} spans segments");
        if start != prev_end {
            assert_eq!(start % SEG, 0, "put {i}: a jump lands on a segment start");
            assert_eq!(
                start / SEG,
                prev_end / SEG + 1,
                "put {i}: jumps one segment"
            );
            assert!(SEG - prev_end % SEG >= 8, "room for the BLANK header");
        }
        records.push((start as i64, r.wrote_bytes));
        prev_end = end;
    }
    store.shutdown();
    let store = MessageStore::open(cfg()).unwrap();
    assert_eq!(store.commit_log_max_offset(), prev_end as i64);
    for (i, &(phys, size)) in records.iter().enumerate() {
        let m = store
            .look_message_by_offset(phys)
            .expect("record after reopen");
        assert_eq!(m.len() as i32, size);
        assert_eq!(decode(&m).queue_offset, i as i64);
    }
    let n = records.len() as i64;
    wait_until("dispatch", || store.max_offset_in_queue("P", 0) == n);
    store.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config {
        cases: 12,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    })]

    #[test]
    fn offsets_stay_contiguous_across_roll_over(
        direct in proptest::bool::ANY,
        body_lens in proptest::collection::vec(
            proptest::prop_oneof![1usize..300, 1usize..60_000],
            1..40,
        ),
    ) {
        let mode = if direct { WriteMode::Direct } else { WriteMode::Mmap };
        check_roll_over(mode, &body_lens);
    }
}

#[test]
fn batch_transactions_and_validation() {
    let dir = temp_dir("batch");
    let store =
        MessageStore::open(config(&dir, FlushDiskType::AsyncFlush, WriteMode::Mmap)).unwrap();
    // A batch of 5: consecutive queue offsets and physical positions.
    let mut b = BytesMut::new();
    for i in 0..5 {
        encode(
            "B",
            3,
            0,
            format!("body{i}").as_bytes(),
            &props(&format!("b{i}"), None),
            &mut b,
        );
    }
    let r = store.put_blocking(PutRequest::new("B", 3, 0, b, 5));
    assert_eq!(
        (r.status, r.queue_offset, r.msg_num),
        (PutMessageStatus::PutOk, 0, 5)
    );
    // Prepared and rollback records get no queue offset; commit records do.
    for (flag, qo) in [
        (record::TRANSACTION_PREPARED_TYPE, 0),
        (record::TRANSACTION_ROLLBACK_TYPE, 0),
        (record::TRANSACTION_COMMIT_TYPE, 5),
    ] {
        let mut b = BytesMut::new();
        encode(
            "B",
            3,
            flag,
            b"tx",
            &props(&format!("tx{flag}"), None),
            &mut b,
        );
        let r = store.put_blocking(PutRequest::new("B", 3, flag, b, 1));
        assert_eq!((r.status, r.queue_offset), (PutMessageStatus::PutOk, qo));
    }
    wait_until("dispatch", || {
        store.max_offset_in_queue("B", 3) == 6 && store.dispatch_behind_bytes() == 0
    });
    let g = store.get_message("B", 3, 0, 100, 1 << 20, &AcceptAll);
    assert_eq!(g.messages.len(), 6);
    let physical: Vec<i64> = g
        .messages
        .iter()
        .map(|m| decode(m).physical_offset)
        .collect();
    for w in physical.windows(2).take(4) {
        assert_eq!(w[1] - w[0], g.messages[0].len() as i64);
    }
    // Prepared messages are indexed (UNIQ_KEY), rollback ones are not.
    let now = ringmq_store::util::now_ms();
    assert_eq!(
        store.query_message("B", "U-tx4", 10, 0, now + 1000).len(),
        1
    );
    assert!(store
        .query_message("B", "U-tx12", 10, 0, now + 1000)
        .is_empty());

    // Validation statuses.
    let mut big = BytesMut::new();
    let cfg = store.config().clone();
    encode("B", 0, 0, &vec![0u8; 70_000], "", &mut big);
    assert_eq!(
        store
            .put_blocking(PutRequest::new("B", 0, 0, big, 1))
            .status,
        PutMessageStatus::MessageIllegal,
        "does not fit a segment"
    );
    let long_topic = "x".repeat(200);
    let mut b = BytesMut::new();
    encode(&long_topic, 0, 0, b"x", "", &mut b);
    assert_eq!(
        store
            .put_blocking(PutRequest::new(long_topic.clone(), 0, 0, b, 1))
            .status,
        PutMessageStatus::MessageIllegal
    );
    let garbage = BytesMut::from(&[0xAB; 100][..]);
    assert_eq!(
        store
            .put_blocking(PutRequest::new("B", 0, 0, garbage, 1))
            .status,
        PutMessageStatus::MessageIllegal
    );
    let mut b = BytesMut::new();
    encode("B", 0, 0, b"x", "", &mut b);
    assert_eq!(
        store
            .put_blocking(PutRequest::new("B", 0, 0, b.clone(), 2))
            .status,
        PutMessageStatus::MessageIllegal,
        "count mismatch"
    );
    assert_eq!(
        store.put_blocking(PutRequest::new("C", 0, 0, b, 1)).status,
        PutMessageStatus::MessageIllegal,
        "topic mismatch"
    );
    let small = MessageStore::open(StoreConfig {
        max_message_size: 10,
        ..config(
            &temp_dir("small"),
            FlushDiskType::AsyncFlush,
            WriteMode::Mmap,
        )
    })
    .unwrap();
    let mut b = BytesMut::new();
    encode("B", 0, 0, &[1u8; 11], "", &mut b);
    assert_eq!(
        small.put_blocking(PutRequest::new("B", 0, 0, b, 1)).status,
        PutMessageStatus::MessageIllegal,
        "body over maxMessageSize"
    );
    assert_eq!(cfg.max_message_size, 4 * 1024 * 1024);
    small.shutdown();
    store.shutdown();
}

struct TagFilter(i64);
impl MessageFilter for TagFilter {
    fn match_by_tags_code(&self, tags_code: Option<i64>) -> bool {
        tags_code == Some(self.0)
    }
}

#[test]
fn filters_index_time_and_listeners() {
    let dir = temp_dir("query");
    let store =
        MessageStore::open(config(&dir, FlushDiskType::AsyncFlush, WriteMode::Mmap)).unwrap();
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    {
        let a = Arc::clone(&arrivals);
        store.add_arrival_listener(Arc::new(move |e| {
            a.lock().unwrap().push((
                e.topic.to_string(),
                e.queue_id,
                e.next_queue_offset,
                e.tags_code,
            ))
        }));
    }
    let t0 = ringmq_store::util::now_ms();
    let mut times = Vec::new();
    for i in 0..20 {
        let mut b = BytesMut::new();
        let tag = if i % 2 == 0 { "TagA" } else { "TagB" };
        encode(
            "Q",
            0,
            0,
            b"body",
            &props(&format!("q{i}"), Some(tag)),
            &mut b,
        );
        let r = store.put_blocking(PutRequest::new("Q", 0, 0, b, 1));
        times.push(r.store_timestamp_ms);
        if i == 9 {
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    wait_until("dispatch", || store.max_offset_in_queue("Q", 0) == 20);
    wait_until("listeners", || arrivals.lock().unwrap().len() == 20);
    let a = arrivals.lock().unwrap().clone();
    assert_eq!(a[0], ("Q".to_string(), 0, 1, 2_598_919));
    assert_eq!(a[19].2, 20);
    // Tag filter: TagA hash 2598919.
    let g = store.get_message("Q", 0, 0, 32, 1 << 20, &TagFilter(2_598_919));
    assert_eq!(g.messages.len(), 10);
    let g = store.get_message("Q", 0, 1, 1, 1 << 20, &TagFilter(12345));
    assert_eq!(g.status, GetMessageStatus::NoMatchedMessage);
    assert_eq!(
        g.next_begin_offset, 20,
        "scanned to the end without a match"
    );
    // Index by key, alternative key and UNIQ_KEY; time range excludes.
    let now = ringmq_store::util::now_ms();
    for k in ["q7", "alt-q7", "U-q7"] {
        let hits = store.query_message("Q", k, 10, t0 - 1000, now + 1000);
        assert_eq!(hits.len(), 1, "key {k}");
        assert_eq!(key_of(&decode(&hits[0])), "q7");
    }
    assert!(store
        .query_message("Q", "q7", 10, now + 10_000, now + 20_000)
        .is_empty());
    assert!(store
        .query_message("Other", "q7", 10, 0, now + 1000)
        .is_empty());
    // Offset by time around the 30 ms gap.
    assert_eq!(
        store.offset_in_queue_by_time("Q", 0, times[10], Boundary::Lower),
        10
    );
    assert_eq!(
        store.offset_in_queue_by_time("Q", 0, times[10] - 1, Boundary::Upper),
        9
    );
    assert_eq!(store.offset_in_queue_by_time("Q", 0, 0, Boundary::Lower), 0);
    assert_eq!(
        store.offset_in_queue_by_time("Q", 0, i64::MAX, Boundary::Lower),
        20
    );
    assert_eq!(store.earliest_message_time("Q", 0), Some(times[0]));
    store.delete_topic("Q");
    assert_eq!(store.max_offset_in_queue("Q", 0), 0);
    assert!(!dir.join("consumequeue").join("Q").exists());
    store.shutdown();
}

/// Builds a store directory by hand, as the spec lays it out (records with offsets and
/// timestamps filled, BLANK filler, a 20-byte-unit ConsumeQueue, a checkpoint), then opens it.
#[test]
fn opens_a_hand_made_store_directory() {
    let dir = temp_dir("handmade");
    let seg = SEG as usize;
    std::fs::create_dir_all(dir.join("commitlog")).unwrap();
    let mut file0 = vec![0u8; seg];
    let mut file1 = vec![0u8; seg];
    let mut units: Vec<(i64, i32, i64)> = Vec::new();
    let mut pos = 0usize;
    let mut in_second = false;
    for i in 0..40i64 {
        let qo = i;
        let mut b = BytesMut::new();
        encode(
            "H",
            0,
            0,
            &vec![b'x'; 3000],
            &props(&format!("h{i}"), Some("TagA")),
            &mut b,
        );
        let file = if in_second { &mut file1 } else { &mut file0 };
        if !in_second && pos + b.len() + 8 > seg {
            file[pos..pos + 4].copy_from_slice(&((seg - pos) as i32).to_be_bytes());
            file[pos + 4..pos + 8].copy_from_slice(&record::BLANK_MAGIC.to_be_bytes());
            in_second = true;
            pos = 0;
        }
        let base = if in_second { seg } else { 0 };
        let phys = (base + pos) as i64;
        record::patch_physical_offset(&mut b, phys);
        record::patch_queue_offset(&mut b, qo);
        record::patch_store_timestamp(&mut b, 1_700_000_000_000 + i);
        let file = if in_second { &mut file1 } else { &mut file0 };
        file[pos..pos + b.len()].copy_from_slice(&b);
        units.push((phys, b.len() as i32, 2_598_919));
        pos += b.len();
    }
    std::fs::write(dir.join("commitlog").join(format!("{:020}", 0)), &file0).unwrap();
    std::fs::write(dir.join("commitlog").join(format!("{:020}", SEG)), &file1).unwrap();
    // ConsumeQueue for only the first 30 messages: recovery must dispatch the rest.
    let cq_dir = dir.join("consumequeue").join("H").join("0");
    std::fs::create_dir_all(&cq_dir).unwrap();
    let units_per_file = 32usize;
    let mut cq = vec![0u8; units_per_file * CQ_UNIT_SIZE];
    for (i, (o, s, t)) in units.iter().take(30).enumerate() {
        let p = i * CQ_UNIT_SIZE;
        cq[p..p + 8].copy_from_slice(&o.to_be_bytes());
        cq[p + 8..p + 12].copy_from_slice(&s.to_be_bytes());
        cq[p + 12..p + 20].copy_from_slice(&t.to_be_bytes());
    }
    std::fs::write(cq_dir.join(format!("{:020}", 0)), &cq).unwrap();
    let store =
        MessageStore::open(config(&dir, FlushDiskType::AsyncFlush, WriteMode::Mmap)).unwrap();
    assert_eq!(store.max_offset_in_queue("H", 0), 40);
    assert_eq!(store.commit_log_max_offset(), (SEG as usize + pos) as i64);
    let mut all = Vec::new();
    let mut next = 0;
    while next < 40 {
        let g = store.get_message("H", 0, next, 32, 1 << 22, &AcceptAll);
        assert_eq!(g.status, GetMessageStatus::Found);
        all.extend(g.messages);
        next = g.next_begin_offset;
    }
    for (i, m) in all.iter().enumerate() {
        let r = decode(m);
        assert_eq!((r.physical_offset, r.queue_offset), (units[i].0, i as i64));
        assert_eq!(key_of(&r), format!("h{i}"));
    }
    assert_eq!(store.query_message("H", "h35", 4, 0, i64::MAX).len(), 1);
    // New appends continue after the hand-written tail with the next queue offset.
    let r = put(&store, "H", 0, "more", 10);
    assert_eq!(
        (r.queue_offset, r.wrote_offset),
        (40, (SEG as usize + pos) as i64)
    );
    store.shutdown();
    // What ringmq wrote is laid out as the spec says: CQ unit 40 points at that record.
    let cq1 = std::fs::read(cq_dir.join(format!("{:020}", 32 * CQ_UNIT_SIZE))).unwrap();
    let p = (40 - 32) * CQ_UNIT_SIZE;
    assert_eq!(
        i64::from_be_bytes(cq1[p..p + 8].try_into().unwrap()),
        r.wrote_offset
    );
    assert_eq!(
        i32::from_be_bytes(cq1[p + 8..p + 12].try_into().unwrap()),
        r.wrote_bytes
    );
    assert_eq!(
        i64::from_be_bytes(cq1[p + 12..p + 20].try_into().unwrap()),
        2_598_919
    );
    let cp = std::fs::read(dir.join("checkpoint")).unwrap();
    assert_eq!(cp.len(), 4096);
    assert!(i64::from_be_bytes(cp[0..8].try_into().unwrap()) >= r.store_timestamp_ms);
}

#[test]
fn abnormal_recovery_truncates_torn_tail_and_dirty_queue() {
    let dir = temp_dir("abnormal");
    let cfg = config(&dir, FlushDiskType::SyncFlush, WriteMode::Mmap);
    let store = MessageStore::open(cfg.clone()).unwrap();
    let mut last = None;
    for i in 0..30 {
        last = Some(put(&store, "A", 0, &format!("a{i}"), 500));
    }
    store.shutdown();
    let last = last.unwrap();
    let end = (last.wrote_offset + last.wrote_bytes as i64) as u64;
    // Simulate a crash mid-append: a torn record after the end, a CQ unit pointing at it,
    // and the abort file left behind.
    let seg_path = dir
        .join("commitlog")
        .join(format!("{:020}", end / SEG * SEG));
    let mut data = std::fs::read(&seg_path).unwrap();
    let pos = (end % SEG) as usize;
    let mut torn = BytesMut::new();
    encode("A", 0, 0, &[9u8; 400], &props("torn", None), &mut torn);
    record::patch_physical_offset(&mut torn, end as i64);
    data[pos..pos + 200].copy_from_slice(&torn[..200]);
    std::fs::write(&seg_path, &data).unwrap();
    let cq_path = dir
        .join("consumequeue")
        .join("A")
        .join("0")
        .join(format!("{:020}", 0));
    let mut cq = std::fs::read(&cq_path).unwrap();
    let p = 30 * CQ_UNIT_SIZE;
    if p + CQ_UNIT_SIZE <= cq.len() {
        cq[p..p + 8].copy_from_slice(&(end as i64).to_be_bytes());
        cq[p + 8..p + 12].copy_from_slice(&(torn.len() as i32).to_be_bytes());
        std::fs::write(&cq_path, &cq).unwrap();
    }
    std::fs::write(dir.join("abort"), "1").unwrap();
    let store = MessageStore::open(cfg).unwrap();
    assert_eq!(store.commit_log_max_offset() as u64, end);
    assert_eq!(store.max_offset_in_queue("A", 0), 30);
    let r = put(&store, "A", 0, "next", 10);
    assert_eq!((r.wrote_offset as u64, r.queue_offset), (end, 30));
    wait_until("dispatch", || store.max_offset_in_queue("A", 0) == 31);
    let g = store.get_message("A", 0, 30, 1, 1 << 20, &AcceptAll);
    assert_eq!(key_of(&decode(&g.messages[0])), "next");
    store.shutdown();
}

#[test]
fn retention_deletes_old_segments_and_queue_files() {
    let dir = temp_dir("retention");
    let mut cfg = config(&dir, FlushDiskType::AsyncFlush, WriteMode::Mmap);
    cfg.file_reserved_time_hours = 0;
    let store = MessageStore::open(cfg).unwrap();
    for i in 0..300 {
        put(&store, "Z", 0, &format!("z{i}"), 900);
    }
    wait_until("dispatch", || {
        store.max_offset_in_queue("Z", 0) == 300 && store.dispatch_behind_bytes() == 0
    });
    // Retention deletes only flushed segments.
    let max = store.commit_log_max_offset() as u64;
    wait_until("flush of the full segments", || {
        store.metrics().commit_log_flushed_offset as u64 >= max - max % SEG
    });
    let before = std::fs::read_dir(dir.join("commitlog")).unwrap().count();
    store.delete_expired_files_now();
    let min = store.commit_log_min_offset();
    assert!(min > 0, "old segments deleted");
    assert!(std::fs::read_dir(dir.join("commitlog")).unwrap().count() < before);
    let qmin = store.min_offset_in_queue("Z", 0);
    assert!(qmin > 0);
    let g = store.get_message("Z", 0, 0, 8, 1 << 20, &AcceptAll);
    assert_eq!(
        (g.status, g.next_begin_offset),
        (GetMessageStatus::OffsetTooSmall, qmin)
    );
    let g = store.get_message("Z", 0, qmin, 8, 1 << 20, &AcceptAll);
    assert_eq!(g.status, GetMessageStatus::Found);
    assert!(decode(&g.messages[0]).physical_offset >= min);
    assert!(store.look_message_by_offset(0).is_none());
    store.shutdown();
    let store =
        MessageStore::open(config(&dir, FlushDiskType::AsyncFlush, WriteMode::Mmap)).unwrap();
    assert_eq!(store.commit_log_min_offset(), min);
    assert_eq!(store.max_offset_in_queue("Z", 0), 300);
    store.shutdown();
}

#[test]
fn sync_flush_groups_concurrent_writers() {
    let dir = temp_dir("group");
    let store =
        MessageStore::open(config(&dir, FlushDiskType::SyncFlush, WriteMode::Mmap)).unwrap();
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let s = store.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    assert_eq!(
                        put(&s, "G", t % 4, &format!("g{t}-{i}"), 100).status,
                        PutMessageStatus::PutOk
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let m = store.metrics();
    assert_eq!(m.put_messages, 800);
    assert!(
        m.flush_count < 800,
        "flushes were grouped: {} flushes",
        m.flush_count
    );
    assert_eq!(m.commit_log_flushed_offset, m.commit_log_max_offset);
    store.shutdown();
}

#[test]
fn second_open_of_a_locked_store_is_refused() {
    let dir = temp_dir("lock");
    let store =
        MessageStore::open(config(&dir, FlushDiskType::AsyncFlush, WriteMode::Mmap)).unwrap();
    let err =
        MessageStore::open(config(&dir, FlushDiskType::AsyncFlush, WriteMode::Mmap)).unwrap_err();
    assert!(
        matches!(err, ringmq_store::StoreError::Locked { .. }),
        "{err}"
    );
    store.shutdown();
}

/// Kills a writer process `rounds` times at random points and checks the reopened store.
/// `loss_window_bytes`: `None` under SYNC_FLUSH (every acknowledged put must survive);
/// under ASYNC_FLUSH the most acknowledged bytes a crash may lose, all at the log's tail.
/// The kill -9 tests run one at a time, so each writer's kill lands at a point of its own
/// progress rather than of another test's load. Run side by side they once showed (1 run
/// in 14, before this session's changes) an ASYNC_FLUSH mmap crash after which an acked key
/// was missing from the index: an open defect the hardening notes track.
static CRASH_TESTS: Mutex<()> = Mutex::new(());

fn crash_rounds(mode: &str, rounds: u64, loss_window_bytes: Option<i64>) {
    let _one_at_a_time = CRASH_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let dir = temp_dir(&format!("crash-{mode}"));
    let bin = env!("CARGO_BIN_EXE_ringmq-store-crash-writer");
    let mut acked: HashMap<String, (i32, i64, i64, i32)> = HashMap::new();
    let mut rng = 0x1234_5678_9abc_def0u64 ^ std::process::id() as u64;
    for round in 0..rounds {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let kill_after_acks = 5 + (rng % 400) as usize;
        let mut child = std::process::Command::new(bin)
            .args([dir.to_str().unwrap(), mode, &round.to_string()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = std::io::BufReader::new(stdout).lines();
        let mut n = 0;
        let started = Instant::now();
        while n < kill_after_acks && started.elapsed() < Duration::from_secs(20) {
            let Some(Ok(l)) = lines.next() else { break };
            let p: Vec<&str> = l.split(' ').collect();
            if p.len() == 6 && p[0] == "ACK" {
                acked.insert(
                    p[1].to_string(),
                    (
                        p[2].parse().unwrap(),
                        p[3].parse().unwrap(),
                        p[4].parse().unwrap(),
                        p[5].parse().unwrap(),
                    ),
                );
                n += 1;
            }
        }
        // SIGKILL at this random point; acks read so far are the ones the test holds the
        // store to (the writer may have acknowledged a few more that we did not read).
        child.kill().unwrap();
        let _ = child.wait();
        assert!(n > 0, "round {round}: the writer acknowledged nothing");
        assert!(
            dir.join("abort").exists(),
            "killed writer leaves abort behind"
        );
        let store = MessageStore::open(StoreConfig {
            mapped_file_size_consume_queue_units: 64,
            max_hash_slot_num: 64,
            max_index_num: 256,
            flush_disk_type: FlushDiskType::SyncFlush,
            write_mode: if mode.starts_with("direct") {
                WriteMode::Direct
            } else {
                WriteMode::Mmap
            },
            direct_write_ring_size_bytes: 256 * 1024,
            ..config(&dir, FlushDiskType::SyncFlush, WriteMode::Mmap)
        })
        .unwrap();
        let max = store.commit_log_max_offset();
        forget_lost_tail(&mut acked, max, loss_window_bytes, round);
        if std::env::var_os("RINGMQ_TEST_VERBOSE").is_some() {
            eprintln!(
                "round {round}: {n} new acks, {} total, log max {max}",
                acked.len()
            );
        }
        for (key, (qid, qo, phys, size)) in &acked {
            let m = store
                .look_message_by_offset(*phys)
                .unwrap_or_else(|| panic!("round {round}: acked {key} at {phys} missing"));
            assert_eq!(m.len() as i32, *size);
            let r = match decode_record(&m, true) {
                Ok(Decoded::Message(r)) => r,
                other => panic!("round {round}: acked {key} at {phys} corrupt: {other:?}"),
            };
            assert_eq!(key_of(&r), *key);
            assert_eq!(r.queue_offset, *qo);
            let g = store.get_message("CrashTopic", *qid, *qo, 1, 1 << 20, &AcceptAll);
            assert_eq!(
                g.status,
                GetMessageStatus::Found,
                "round {round}: {key} not in the ConsumeQueue"
            );
            assert_eq!(decode(&g.messages[0]).physical_offset, *phys);
        }
        // Spot-check the index for a sample of acked keys.
        for (key, (_, _, phys, _)) in acked.iter().take(20) {
            let hits = store.query_message("CrashTopic", key, 4, 0, i64::MAX);
            assert!(
                hits.iter().any(|h| decode(h).physical_offset == *phys),
                "round {round}: {key} not indexed"
            );
        }
        // The ConsumeQueue never points past the log, and every unit matches its record.
        for qid in 0..2 {
            let qmax = store.max_offset_in_queue("CrashTopic", qid);
            let mut next = store.min_offset_in_queue("CrashTopic", qid);
            while next < qmax {
                let g = store.get_message("CrashTopic", qid, next, 32, 1 << 22, &AcceptAll);
                assert_eq!(
                    g.status,
                    GetMessageStatus::Found,
                    "round {round}: hole at {qid}/{next}"
                );
                for (m, qo) in g.messages.iter().zip(&g.message_queue_offsets) {
                    let r = decode(m);
                    assert_eq!(r.queue_offset, *qo);
                    assert!(r.physical_offset + r.total_size as i64 <= max);
                }
                next = g.next_begin_offset;
            }
        }
        store.shutdown();
    }
    assert!(
        loss_window_bytes.is_some() || acked.len() >= rounds as usize,
        "{} acked puts after {rounds} rounds",
        acked.len()
    );
}

/// Under ASYNC_FLUSH, drops from `acked` the puts the crash lost, after checking they are
/// a tail of the log no longer than the window (later rounds reuse their offsets).
fn forget_lost_tail(
    acked: &mut HashMap<String, (i32, i64, i64, i32)>,
    log_max: i64,
    loss_window_bytes: Option<i64>,
    round: u64,
) {
    let lost: Vec<(String, i64)> = acked
        .iter()
        .filter(|(_, (_, _, phys, size))| phys + i64::from(*size) > log_max)
        .map(|(k, (_, _, phys, size))| (k.clone(), phys + i64::from(*size)))
        .collect();
    let Some(window) = loss_window_bytes else {
        assert!(
            lost.is_empty(),
            "round {round}: SYNC_FLUSH lost {} acknowledged puts",
            lost.len()
        );
        return;
    };
    let lost_bytes = lost.iter().map(|(_, end)| end - log_max).max().unwrap_or(0);
    assert!(
        lost_bytes <= window,
        "round {round}: ASYNC_FLUSH lost {lost_bytes} acknowledged bytes, window {window}"
    );
    for (key, _) in lost {
        acked.remove(&key);
    }
}

#[test]
fn kill_9_sync_flush_writer_mmap() {
    crash_rounds("mmap", 20, None);
}

#[test]
fn kill_9_sync_flush_writer_direct() {
    crash_rounds("direct", 8, None);
}

/// A killed process loses nothing it wrote to the page cache: under ASYNC_FLUSH in mmap
/// mode an acknowledged put was already written by the append stage.
#[test]
fn kill_9_async_flush_writer_mmap_loses_nothing() {
    crash_rounds("mmap-async", 6, Some(0));
}

/// In direct mode the unflushed window lives in the write ring (process memory): a crash
/// may lose at most the ring's bytes, and only at the tail.
#[test]
fn kill_9_async_flush_writer_direct_loses_at_most_the_ring() {
    crash_rounds("direct-async", 6, Some(256 * 1024));
}

#[test]
fn file_size_limit_fails_allocation_without_corruption() {
    let dir = temp_dir("fsize");
    let bin = env!("CARGO_BIN_EXE_ringmq-store-crash-writer");
    let out = std::process::Command::new(bin)
        .args([dir.to_str().unwrap(), "mmap", "1", "fsize"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "writer failed: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The limit refuses either the next segment's creation or, when that segment was
    // prepared before the limit, the pwrite that crosses it (EFBIG → UNKNOWN_ERROR).
    assert!(
        text.contains("FAILED Some(CreateMappedFileFailed)")
            || text.contains("FAILED Some(UnknownError)"),
        "{text}"
    );
    assert!(text.contains("FSIZE-OK"));
    // Per queue, in acknowledgement order (each queue has one producer thread).
    let mut acked: HashMap<i32, Vec<&str>> = HashMap::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("ACK ") {
            let (key, q) = rest.split_once(' ').unwrap();
            acked.entry(q.parse().unwrap()).or_default().push(key);
        }
    }
    let store = MessageStore::open(StoreConfig {
        mapped_file_size_consume_queue_units: 64,
        max_hash_slot_num: 64,
        max_index_num: 256,
        ..config(&dir, FlushDiskType::SyncFlush, WriteMode::Mmap)
    })
    .unwrap();
    assert!(store.last_exit_ok());
    for (q, keys) in &acked {
        // No hole and nothing extra: refused puts left their queue offsets unused.
        assert_eq!(
            store.max_offset_in_queue("FsizeTopic", *q),
            keys.len() as i64,
            "queue {q}"
        );
        let mut next = 0;
        let mut i = 0;
        while next < keys.len() as i64 {
            let g = store.get_message("FsizeTopic", *q, next, 32, 1 << 22, &AcceptAll);
            assert_eq!(g.status, GetMessageStatus::Found, "queue {q} at {next}");
            for m in &g.messages {
                let r = decode(m);
                assert_eq!(key_of(&r), keys[i], "queue {q}");
                assert_eq!(r.queue_offset, i as i64);
                i += 1;
            }
            next = g.next_begin_offset;
        }
        assert_eq!(i, keys.len());
    }
    assert_eq!(acked.len(), 4);
    store.shutdown();
}

/// Pages of the file at `path` that are in the page cache, and its page count (mincore over
/// a fresh read-only mapping reports page-cache residency for file mappings).
fn resident_pages(path: &Path) -> (usize, usize) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    let pages = len.div_ceil(4096);
    // SAFETY: read-only shared mapping of a file we opened, checked against MAP_FAILED and
    // unmapped below; it is never dereferenced, only passed to mincore.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    let mut vec = vec![0u8; pages];
    // SAFETY: `vec` has one byte per page of the mapping, as mincore requires.
    let rc = unsafe { libc::mincore(p, len, vec.as_mut_ptr()) };
    let err = std::io::Error::last_os_error();
    // SAFETY: unmapping exactly the mapping made above.
    unsafe { libc::munmap(p, len) };
    assert_eq!(rc, 0, "mincore: {err}");
    (vec.iter().filter(|b| **b & 1 != 0).count(), pages)
}

fn segment_path(dir: &Path, offset: u64) -> PathBuf {
    dir.join("commitlog").join(format!("{offset:020}"))
}

/// The segment the first put goes to exists when `open` returns (the first put never waits
/// for a file to be created), and creating segments neither faults in nor dirties their
/// pages: only the bytes appended reach the page cache (mmap mode), or none at all (direct
/// mode, where reput and readers take recent bytes from the write ring).
#[test]
fn segments_exist_at_open_and_stay_out_of_the_page_cache_until_written() {
    const SEG_1M: u64 = 1024 * 1024;
    for mode in [WriteMode::Mmap, WriteMode::Direct] {
        let dir = temp_dir("prealloc");
        let cfg = StoreConfig {
            mapped_file_size_commit_log: SEG_1M,
            ..config(&dir, FlushDiskType::SyncFlush, mode)
        };
        let store = MessageStore::open(cfg).unwrap();
        let seg0 = segment_path(&dir, 0);
        assert_eq!(
            std::fs::metadata(&seg0).map(|m| m.len()).ok(),
            Some(SEG_1M),
            "{mode:?}: segment 0 created by open"
        );
        assert_eq!(resident_pages(&seg0).0, 0, "{mode:?}: nothing faulted in");
        let mut end = 0;
        for i in 0..10 {
            let r = put(&store, "P", 0, &format!("p{i}"), 1000);
            assert_eq!(r.status, PutMessageStatus::PutOk);
            end = r.wrote_offset as u64 + r.wrote_bytes as u64;
        }
        // The allocator prepares the next segment in the background.
        let seg1 = segment_path(&dir, SEG_1M);
        wait_until("next segment", || {
            std::fs::metadata(&seg1).is_ok_and(|m| m.len() == SEG_1M)
        });
        wait_until("dispatch", || store.max_offset_in_queue("P", 0) == 10);
        let g = store.get_message("P", 0, 0, 32, 1 << 20, &AcceptAll);
        assert_eq!(g.messages.len(), 10);
        let (res0, pages) = resident_pages(&seg0);
        match mode {
            WriteMode::Mmap => assert!(
                res0 <= end.div_ceil(4096) as usize + 1,
                "only appended pages are cached: {res0} of {pages} for {end} bytes"
            ),
            WriteMode::Direct => assert_eq!(
                res0, 0,
                "direct mode: O_DIRECT writes, reads served from the ring"
            ),
        }
        assert_eq!(
            resident_pages(&seg1).0,
            0,
            "{mode:?}: next segment untouched"
        );
        drop(g);
        store.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A store whose log ends exactly at a segment end (BLANK filler) gets its next segment at
/// open, not at the first put.
#[test]
fn reopen_at_a_full_segment_creates_the_next_at_open() {
    let dir = temp_dir("fullseg");
    let cfg = config(&dir, FlushDiskType::SyncFlush, WriteMode::Mmap);
    let store = MessageStore::open(cfg.clone()).unwrap();
    // Fill segment 0 until a put lands in segment 1, then cut the log back to segment 0's
    // end by deleting the later segments while closed.
    let mut i = 0;
    loop {
        let r = put(&store, "F", 0, &format!("f{i}"), 2000);
        i += 1;
        if r.wrote_offset as u64 >= SEG {
            break;
        }
    }
    store.shutdown();
    for e in std::fs::read_dir(dir.join("commitlog")).unwrap() {
        let e = e.unwrap();
        if e.file_name() != *format!("{:020}", 0).as_str() {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    std::fs::write(dir.join("abort"), "1").unwrap();
    let store = MessageStore::open(cfg).unwrap();
    assert_eq!(store.commit_log_max_offset() as u64, SEG);
    assert!(
        segment_path(&dir, SEG).exists(),
        "segment 1 exists before the first put"
    );
    let r = put(&store, "F", 0, "after", 10);
    assert_eq!(r.wrote_offset as u64, SEG);
    store.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Permissions (`r--s`, `rw-s`, ...) of this process's mappings of `path`.
fn mapping_perms(path: &Path) -> Vec<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let want = path.to_str().unwrap();
    maps.lines()
        .filter(|l| l.ends_with(want))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect()
}

/// CommitLog segments are appended to with pwrite into the page cache the mapping shares,
/// and the mapping is read-only, so nothing can store through it: a store through a shared
/// mapping dirties the whole page-cache folio behind the page (2 MiB on ext4 with large
/// folios), and each later flush wrote all of it back (17-19x the log's growth). Consumers
/// still read through the mapping. ConsumeQueue files stay writable mappings.
#[test]
fn commit_log_segments_are_mapped_read_only() {
    for mode in [WriteMode::Mmap, WriteMode::Direct] {
        let dir = temp_dir("readonly");
        let store = MessageStore::open(config(&dir, FlushDiskType::AsyncFlush, mode)).unwrap();
        for i in 0..40 {
            assert_eq!(
                put(&store, "D", 0, &format!("d{i}"), 1000).status,
                PutMessageStatus::PutOk
            );
        }
        wait_until("dispatch", || store.max_offset_in_queue("D", 0) == 40);
        let g = store.get_message("D", 0, 0, 32, 1 << 20, &AcceptAll);
        assert_eq!(g.messages.len(), 32);
        assert_eq!(key_of(&decode(&g.messages[31])), "d31");
        let perms = mapping_perms(&segment_path(&dir, 0));
        assert!(
            !perms.is_empty() && perms.iter().all(|p| p == "r--s"),
            "{mode:?}: segment mappings {perms:?}"
        );
        let cq = dir.join("consumequeue/D/0").join(format!("{:020}", 0));
        assert_eq!(mapping_perms(&cq), vec!["rw-s".to_string()]);
        drop(g);
        store.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// `warmMapedFileEnable`: new segments are zero-filled on disk (written extents, not holes
/// or unwritten ones) before use, without passing through the page cache.
#[test]
fn warm_mapped_file_zero_fills_segments_on_disk() {
    use std::os::fd::AsRawFd;
    let dir = temp_dir("warm");
    let cfg = StoreConfig {
        warm_mapped_file_enable: true,
        ..config(&dir, FlushDiskType::SyncFlush, WriteMode::Mmap)
    };
    let store = MessageStore::open(cfg).unwrap();
    let seg0 = segment_path(&dir, 0);
    let f = std::fs::File::open(&seg0).unwrap();
    for at in [0, SEG - 4096] {
        // SAFETY: plain syscall on an fd we own.
        let data = unsafe { libc::lseek(f.as_raw_fd(), at as libc::off_t, libc::SEEK_DATA) };
        assert_eq!(data, at as i64, "zeros written at {at}");
    }
    assert_eq!(resident_pages(&seg0).0, 0, "zeroed without the page cache");
    for i in 0..100 {
        assert_eq!(
            put(&store, "W", 0, &format!("w{i}"), 900).status,
            PutMessageStatus::PutOk
        );
    }
    wait_until("dispatch", || store.max_offset_in_queue("W", 0) == 100);
    let g = store.get_message("W", 0, 90, 32, 1 << 20, &AcceptAll);
    assert_eq!(key_of(&decode(&g.messages[9])), "w99");
    drop(g);
    store.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Direct mode with a ring much smaller than the log: readers and the reput stage get
/// bytes that left the ring from the file, bytes still in it from the ring, and both are
/// the records that were written.
#[test]
fn direct_reads_are_correct_after_the_ring_wrapped() {
    for flush in [FlushDiskType::SyncFlush, FlushDiskType::AsyncFlush] {
        let dir = temp_dir("ringwrap");
        let cfg = StoreConfig {
            direct_write_ring_size_bytes: 64 * 1024,
            ..config(&dir, flush, WriteMode::Direct)
        };
        let store = MessageStore::open(cfg).unwrap();
        // Slow dispatch down so the reput stage falls more than a ring behind and reads
        // chunks that left the ring from the disk.
        store.add_arrival_listener(Arc::new(|_ev: &ringmq_store::ArrivalEvent<'_>| {
            std::thread::sleep(Duration::from_millis(1));
        }));
        let mut results = Vec::new();
        for i in 0..400 {
            let body = 300 + (i as usize * 37) % 1500;
            // A 64 KiB ring fills up between timed flushes: retry the refusal as clients do.
            let mut r = put(&store, "R", i % 2, &format!("r{i}"), body);
            while r.status == PutMessageStatus::OsPageCacheBusy {
                std::thread::sleep(Duration::from_millis(2));
                r = put(&store, "R", i % 2, &format!("r{i}"), body);
            }
            assert_eq!(r.status, PutMessageStatus::PutOk, "{flush:?} put {i}");
            results.push(r);
        }
        wait_until("dispatch", || {
            store.max_offset_in_queue("R", 0) == 200 && store.max_offset_in_queue("R", 1) == 200
        });
        for (i, r) in results.iter().enumerate() {
            let m = store.look_message_by_offset(r.wrote_offset).unwrap();
            let rec = decode(&m); // CRC-checked
            assert_eq!(key_of(&rec), format!("r{i}"), "{flush:?}");
        }
        for qid in 0..2 {
            let mut next = 0;
            while next < 200 {
                let g = store.get_message("R", qid, next, 32, 1 << 22, &AcceptAll);
                assert_eq!(g.status, GetMessageStatus::Found);
                for (m, qo) in g.messages.iter().zip(&g.message_queue_offsets) {
                    let i = (*qo * 2 + qid as i64) as usize;
                    assert_eq!(key_of(&decode(m)), format!("r{i}"), "{flush:?}");
                }
                next = g.next_begin_offset;
            }
        }
        store.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Shutdown waits at most ~5 s for dispatch to catch up, however slow dispatch is (here:
/// an arrival listener that takes 20 ms per message, 40 s of work), keeps `abort` because
/// dispatch is behind, and the next start redispatches what was missing.
#[test]
fn shutdown_is_bounded_when_dispatch_is_slow() {
    let dir = temp_dir("slowreput");
    // Append and reput on different cores: dispatch runs on the reput thread only and
    // falls behind. On one core the append thread dispatches its own batches, so each
    // put would wait for the slow listener and dispatch would never be behind.
    let cfg = StoreConfig {
        append_core: Some(0),
        reput_core: Some(1),
        ..config(&dir, FlushDiskType::AsyncFlush, WriteMode::Mmap)
    };
    let store = MessageStore::open(cfg.clone()).unwrap();
    store.add_arrival_listener(Arc::new(|_ev: &ringmq_store::ArrivalEvent<'_>| {
        std::thread::sleep(Duration::from_millis(20));
    }));
    for i in 0..2000 {
        assert_eq!(
            put(&store, "S", 0, &format!("s{i}"), 50).status,
            PutMessageStatus::PutOk
        );
    }
    let t = Instant::now();
    store.shutdown();
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "shutdown took {took:?} with dispatch far behind"
    );
    assert!(dir.join("abort").exists(), "dispatch behind: unclean");
    let store = MessageStore::open(cfg).unwrap();
    assert!(!store.last_exit_ok());
    assert_eq!(store.max_offset_in_queue("S", 0), 2000);
    store.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- retention (store.md §11) -------------------------------------------------------
//
// Each test drives retention passes itself (`clean_files_now`, `delete_expired_files_now`)
// with the periodic pass pushed out of the test's lifetime, and replaces retention's clock
// and disk usage through `RetentionProbe`: a disk cannot be filled on demand, nor a
// deleteWhen hour waited for. Segments are 1 MiB; "aging" a segment sets its file's mtime,
// which is what fileReservedTime is measured from.

const RSEG: u64 = 1024 * 1024;
const HOUR_MS: i64 = 3_600_000;

/// Retention's clock and disk usage, as the test sets them.
#[derive(Clone)]
struct RetentionKnobs {
    now_ms: Arc<std::sync::atomic::AtomicI64>,
    used_percent: Arc<AtomicU32>,
}

impl RetentionKnobs {
    fn new() -> Self {
        RetentionKnobs {
            now_ms: Arc::new(std::sync::atomic::AtomicI64::new(wall_ms())),
            used_percent: Arc::new(AtomicU32::new(50)),
        }
    }
    fn probe(&self) -> ringmq_store::config::RetentionProbe {
        let (now, used) = (self.now_ms.clone(), self.used_percent.clone());
        ringmq_store::config::RetentionProbe::default()
            .with_clock(move || now.load(Ordering::SeqCst))
            .with_disk_usage(move |_| Some(used.load(Ordering::SeqCst)))
    }
    fn set_now(&self, ms: i64) {
        self.now_ms.store(ms, Ordering::SeqCst);
    }
    fn set_used(&self, percent: u32) {
        self.used_percent.store(percent, Ordering::SeqCst);
    }
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Two clock readings a few hours ahead (files written now stay far younger than 72 h):
/// `on`, whose local hour becomes deleteWhen, and `off`, in another hour.
fn delete_hours(now_ms: i64) -> (i64, i64) {
    let on = now_ms + 2 * HOUR_MS;
    let hour = ringmq_store::util::local_hour(on);
    let off = (1..=3)
        .map(|k| on + k * HOUR_MS)
        .find(|t| ringmq_store::util::local_hour(*t) != hour)
        .expect("three consecutive hours cannot all have the same local hour");
    (on, off)
}

fn retention_config(dir: &Path, knobs: &RetentionKnobs, on_ms: i64) -> StoreConfig {
    StoreConfig {
        store_path_root_dir: dir.to_path_buf(),
        mapped_file_size_commit_log: RSEG,
        mapped_file_size_consume_queue_units: 64,
        max_hash_slot_num: 64,
        max_index_num: 400,
        delete_when: format!("{:02}", ringmq_store::util::local_hour(on_ms)),
        clean_resource_interval_ms: 3_600_000,
        delete_commit_log_files_interval_ms: 1,
        delete_consume_queue_files_interval_ms: 1,
        retention_probe: knobs.probe(),
        ..StoreConfig::default()
    }
}

/// Appends ~4 KiB messages to `topic`/0 until segment `active` is the one being written.
fn fill_until_segment(
    store: &MessageStore,
    topic: &str,
    active: u64,
) -> Vec<ringmq_store::PutResult> {
    let mut out = Vec::new();
    let limit = (active * RSEG / 4000 + 16) as usize;
    for i in 0..limit {
        if store.commit_log_max_offset() as u64 >= active * RSEG {
            break;
        }
        let r = put(store, topic, 0, &format!("{topic}{i}"), 4000);
        assert_eq!(r.status, PutMessageStatus::PutOk, "put {i}");
        out.push(r);
    }
    assert!(store.commit_log_max_offset() as u64 >= active * RSEG);
    out
}

/// Waits until every byte is dispatched and every segment but the active one flushed:
/// retention deletes neither undispatched nor unflushed segments.
fn wait_dispatched(store: &MessageStore) {
    wait_until("dispatch", || store.dispatch_behind_bytes() == 0);
    let max = store.commit_log_max_offset() as u64;
    let active_from = max - max % RSEG;
    wait_until("flush of the full segments", || {
        store.metrics().commit_log_flushed_offset as u64 >= active_from
    });
}

/// Start offsets of the CommitLog files on disk.
fn segment_files(dir: &Path) -> Vec<u64> {
    let mut v: Vec<u64> = std::fs::read_dir(dir.join("commitlog"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort();
    v
}

fn file_count(dir: &Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

/// Makes segment `index` look last modified at `at_ms`.
fn age_segment(dir: &Path, index: u64, at_ms: i64) {
    let f = std::fs::File::options()
        .write(true)
        .open(segment_path(dir, index * RSEG))
        .unwrap();
    f.set_modified(std::time::UNIX_EPOCH + Duration::from_millis(at_ms as u64))
        .unwrap();
}

fn offsets(segments: std::ops::RangeInclusive<u64>) -> Vec<u64> {
    segments.map(|s| s * RSEG).collect()
}

/// The CommitLog files on disk are segments `expected`, plus perhaps the next one, which
/// the allocator creates ahead of need.
fn assert_segments(dir: &Path, expected: std::ops::RangeInclusive<u64>) {
    let mut files = segment_files(dir);
    if files.last() == Some(&((*expected.end() + 1) * RSEG)) {
        files.pop();
    }
    assert_eq!(files, offsets(expected));
}

/// fileReservedTime is measured from a file's last modification; expired segments go at a
/// deleteWhen hour only, at most deleteFileBatchMax per pass, oldest first, stopping at the
/// first unexpired one; the manual trigger deletes over 20 passes whatever the hour; the
/// segment being written is never deleted.
#[test]
fn retention_deletes_expired_segments_at_the_delete_when_hour() {
    let dir = temp_dir("ret-hour");
    let knobs = RetentionKnobs::new();
    let now = wall_ms();
    let (on, off) = delete_hours(now);
    let mut cfg = retention_config(&dir, &knobs, on);
    cfg.delete_file_batch_max = 2;
    let store = MessageStore::open(cfg).unwrap();
    fill_until_segment(&store, "H", 6);
    wait_dispatched(&store);
    assert_segments(&dir, 0..=6);
    let old = now - 80 * HOUR_MS;
    for s in 0..3 {
        age_segment(&dir, s, old);
    }
    knobs.set_now(off);
    assert_eq!(
        store.clean_files_now(),
        0,
        "not a deleteWhen hour, disk fine"
    );
    assert_eq!(store.commit_log_min_offset(), 0);
    knobs.set_now(on);
    assert_eq!(store.clean_files_now(), 2, "deleteFileBatchMax per pass");
    assert_eq!(store.commit_log_min_offset() as u64, 2 * RSEG);
    assert_eq!(
        store.clean_files_now(),
        1,
        "then the first unexpired stops it"
    );
    assert_eq!(store.clean_files_now(), 0);
    assert_segments(&dir, 3..=6);
    assert_eq!(store.commit_log_min_offset() as u64, 3 * RSEG);

    // Manual trigger (DELETE_EXPIRED_COMMITLOG): 20 passes, whatever the hour.
    knobs.set_now(off);
    age_segment(&dir, 3, old);
    assert_eq!(store.clean_files_now(), 0, "expired, but not the hour");
    store.execute_delete_files_manually();
    assert_eq!(store.clean_files_now(), 1, "manual pass 1");
    for pass in 2..20 {
        assert_eq!(
            store.clean_files_now(),
            0,
            "manual pass {pass}: nothing expired"
        );
    }
    age_segment(&dir, 4, old);
    assert_eq!(store.clean_files_now(), 1, "manual pass 20");
    age_segment(&dir, 5, old);
    assert_eq!(store.clean_files_now(), 0, "the 20 passes are used up");
    assert_eq!(store.delete_expired_files_now(), 1, "one more manual pass");
    // Only the segment being written is left; expired or not, it stays.
    age_segment(&dir, 6, old);
    assert_eq!(store.delete_expired_files_now(), 0);
    knobs.set_now(on);
    assert_eq!(store.clean_files_now(), 0);
    assert_segments(&dir, 6..=6);
    let r = put(&store, "H", 0, "after", 100);
    assert_eq!(r.status, PutMessageStatus::PutOk);
    wait_until("dispatch", || {
        store.max_offset_in_queue("H", 0) == r.queue_offset + 1
    });
    let g = store.get_message("H", 0, r.queue_offset, 1, 1 << 20, &AcceptAll);
    assert_eq!(key_of(&decode(&g.messages[0])), "after");
    store.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Above diskMaxUsedSpaceRatio expired segments go at any hour; above
/// diskSpaceCleanForciblyRatio (with cleanFileForciblyEnable) unexpired ones too, and writes
/// are still accepted below diskSpaceWarningLevelRatio.
#[test]
fn disk_usage_ratios_delete_expired_then_unexpired_segments() {
    let dir = temp_dir("ret-usage");
    let knobs = RetentionKnobs::new();
    let now = wall_ms();
    let (on, off) = delete_hours(now);
    let store = MessageStore::open(retention_config(&dir, &knobs, on)).unwrap();
    knobs.set_now(off);
    fill_until_segment(&store, "U", 6);
    wait_dispatched(&store);
    for s in 0..2 {
        age_segment(&dir, s, now - 80 * HOUR_MS);
    }
    knobs.set_used(75);
    assert_eq!(store.clean_files_now(), 0, "75% is not above 75%");
    knobs.set_used(80);
    assert_eq!(
        store.clean_files_now(),
        2,
        "expired ones, outside deleteWhen"
    );
    assert_eq!(store.clean_files_now(), 0, "the rest is not expired");
    assert_segments(&dir, 2..=6);
    knobs.set_used(86);
    assert_eq!(
        store.clean_files_now(),
        4,
        "forcibly: all but the active one"
    );
    assert_segments(&dir, 6..=6);
    assert!(store.is_writeable(), "86% is below the warning ratio");
    assert_eq!(put(&store, "U", 0, "x", 10).status, PutMessageStatus::PutOk);
    store.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Forced cleaning never deletes a segment the flush stage has not synced: deleting it
/// would leave the flush unable to pass it, and every SYNC_FLUSH put after it timing out.
#[test]
fn forced_cleaning_keeps_segments_not_yet_flushed() {
    let dir = temp_dir("ret-unflushed");
    let knobs = RetentionKnobs::new();
    let (on, off) = delete_hours(wall_ms());
    let mut cfg = retention_config(&dir, &knobs, on);
    // Nothing is flushed until the test says so: the first interval is an hour away (a
    // shorter one would flush the segments the fill completes, as upstream does).
    cfg.flush_interval_commit_log_ms = 3_600_000;
    cfg.flush_commit_log_thorough_interval_ms = 3_600_000;
    cfg.flush_commit_log_least_pages = 1_000_000;
    let store = MessageStore::open(cfg).unwrap();
    knobs.set_now(off);
    fill_until_segment(&store, "N", 3);
    wait_until("dispatch", || store.dispatch_behind_bytes() == 0);
    assert!((store.metrics().commit_log_flushed_offset as u64) < RSEG);
    // Above diskSpaceCleanForciblyRatio, below the warning ratio (puts still accepted).
    knobs.set_used(88);
    assert_eq!(store.clean_files_now(), 0, "unflushed segments stay");
    assert_segments(&dir, 0..=3);
    // Once flushed, they go. The shorter interval applies within the coordinator's poll.
    let live = store.live_settings();
    live.apply("flushCommitLogLeastPages", "0").unwrap();
    live.apply("flushIntervalCommitLog", "10").unwrap();
    wait_until("flushed past segment 2", || {
        store.metrics().commit_log_flushed_offset as u64 >= 3 * RSEG
    });
    assert_eq!(store.clean_files_now(), 3, "flushed segments go");
    store.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without cleanFileForciblyEnable even a full disk deletes only expired segments.
#[test]
fn forced_cleaning_needs_clean_file_forcibly_enable() {
    let dir = temp_dir("ret-noforce");
    let knobs = RetentionKnobs::new();
    let (on, off) = delete_hours(wall_ms());
    let mut cfg = retention_config(&dir, &knobs, on);
    cfg.clean_file_forcibly_enable = false;
    let store = MessageStore::open(cfg).unwrap();
    knobs.set_now(off);
    fill_until_segment(&store, "F", 3);
    wait_dispatched(&store);
    knobs.set_used(89);
    assert_eq!(store.clean_files_now(), 0);
    knobs.set_used(95);
    assert_eq!(store.clean_files_now(), 0);
    assert_segments(&dir, 0..=3);
    assert!(
        !store.is_writeable(),
        "above the warning ratio writes stop regardless"
    );
    store.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Above diskSpaceWarningLevelRatio puts are refused (SERVICE_NOT_AVAILABLE, counted as
/// DISK_FULL) and unexpired segments are cleaned; writes resume once usage is back under
/// diskSpaceCleanForciblyRatio (not merely under the warning ratio, as upstream).
#[test]
fn disk_full_refuses_writes_until_cleaning_brings_usage_down() {
    let dir = temp_dir("ret-full");
    let knobs = RetentionKnobs::new();
    let (on, off) = delete_hours(wall_ms());
    let store = MessageStore::open(retention_config(&dir, &knobs, on)).unwrap();
    knobs.set_now(off);
    fill_until_segment(&store, "W", 3);
    wait_dispatched(&store);
    knobs.set_used(91);
    assert_eq!(store.clean_files_now(), 3, "forced cleaning");
    assert!(!store.is_writeable());
    assert_eq!(
        put(&store, "W", 0, "refused", 10).status,
        PutMessageStatus::ServiceNotAvailable
    );
    assert_eq!(
        store.metrics().put_refusals,
        vec![(ringmq_store::store::REFUSED_DISK_FULL, 1)]
    );
    knobs.set_used(88);
    store.clean_files_now();
    assert!(
        !store.is_writeable(),
        "still above diskSpaceCleanForciblyRatio"
    );
    knobs.set_used(60);
    store.clean_files_now();
    assert!(store.is_writeable());
    let r = put(&store, "W", 0, "resumed", 10);
    assert_eq!(r.status, PutMessageStatus::PutOk);
    wait_until("dispatch", || {
        store.max_offset_in_queue("W", 0) == r.queue_offset + 1
    });
    let g = store.get_message("W", 0, r.queue_offset, 1, 1 << 20, &AcceptAll);
    assert_eq!(key_of(&decode(&g.messages[0])), "resumed");
    store.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// After segments go, ConsumeQueue files wholly below the new CommitLog min offset and stale
/// index files go too; reads below the queue's new min offset answer OFFSET_TOO_SMALL with
/// the min as the next offset; a queue whose messages are all kept is untouched; all of
/// it holds across a restart.
#[test]
fn retention_removes_queue_and_index_files_below_the_new_min_offset() {
    let dir = temp_dir("ret-logics");
    let knobs = RetentionKnobs::new();
    let now = wall_ms();
    let (on, off) = delete_hours(now);
    let cfg = retention_config(&dir, &knobs, on);
    let store = MessageStore::open(cfg.clone()).unwrap();
    knobs.set_now(off);
    let puts = fill_until_segment(&store, "D", 4);
    let kept = put(&store, "E", 0, "kept", 100);
    wait_dispatched(&store);
    let cq_dir = dir.join("consumequeue").join("D").join("0");
    let (cq_before, index_before) = (file_count(&cq_dir), file_count(&dir.join("index")));
    assert!(
        cq_before > 10 && index_before > 4,
        "{cq_before} {index_before}"
    );
    assert_eq!(store.query_message("D", "D0", 8, 0, i64::MAX).len(), 1);
    age_segment(&dir, 0, now - 80 * HOUR_MS);
    age_segment(&dir, 1, now - 80 * HOUR_MS);
    assert_eq!(store.delete_expired_files_now(), 2);
    let min = store.commit_log_min_offset();
    assert_eq!(min as u64, 2 * RSEG);
    assert!(file_count(&cq_dir) < cq_before);
    assert!(file_count(&dir.join("index")) < index_before);
    let qmin = store.min_offset_in_queue("D", 0);
    assert!(qmin > 0);
    let q = qmin as usize;
    assert!(
        puts[q - 1].wrote_offset < min && puts[q].wrote_offset >= min,
        "the queue's min is its first message at or past the CommitLog min"
    );
    for offset in [0, qmin - 1] {
        let g = store.get_message("D", 0, offset, 8, 1 << 20, &AcceptAll);
        assert_eq!(
            (g.status, g.next_begin_offset, g.min_offset),
            (GetMessageStatus::OffsetTooSmall, qmin, qmin)
        );
    }
    let g = store.get_message("D", 0, qmin, 1, 1 << 20, &AcceptAll);
    assert_eq!(g.status, GetMessageStatus::Found);
    assert_eq!(decode(&g.messages[0]).physical_offset, puts[q].wrote_offset);
    assert!(store.query_message("D", "D0", 8, 0, i64::MAX).is_empty());
    let last = format!("D{}", puts.len() - 1);
    assert_eq!(store.query_message("D", &last, 8, 0, i64::MAX).len(), 1);
    assert!(store.look_message_by_offset(0).is_none());
    assert_eq!(store.min_offset_in_queue("E", 0), 0);
    let g = store.get_message("E", 0, 0, 1, 1 << 20, &AcceptAll);
    assert_eq!(g.status, GetMessageStatus::Found);
    assert_eq!(decode(&g.messages[0]).physical_offset, kept.wrote_offset);
    store.shutdown();

    let store = MessageStore::open(cfg).unwrap();
    assert_eq!(store.commit_log_min_offset(), min);
    assert_eq!(store.min_offset_in_queue("D", 0), qmin);
    assert_eq!(
        store.get_message("D", 0, 0, 8, 1 << 20, &AcceptAll).status,
        GetMessageStatus::OffsetTooSmall
    );
    store.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Even forced cleaning of expired segments stops at the first segment the reput stage has
/// not wholly dispatched, and never takes the segment being written.
#[test]
fn retention_never_deletes_undispatched_bytes_or_the_active_segment() {
    let dir = temp_dir("ret-reput");
    let knobs = RetentionKnobs::new();
    let now = wall_ms();
    let (on, off) = delete_hours(now);
    // Append and reput on different cores: dispatch runs on the reput thread only, so
    // appends go on while it is held (on one core the append thread dispatches its own
    // batches and would be held with it).
    let cfg = StoreConfig {
        append_core: Some(0),
        reput_core: Some(1),
        ..retention_config(&dir, &knobs, on)
    };
    let store = MessageStore::open(cfg).unwrap();
    knobs.set_now(off);
    // The reput stage blocks on the "Hold" message until the gate opens.
    let gate = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let entered = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let (gate, entered) = (gate.clone(), entered.clone());
        store.add_arrival_listener(Arc::new(move |ev: &ringmq_store::ArrivalEvent<'_>| {
            if ev.topic != "Hold" {
                return;
            }
            entered.store(true, Ordering::SeqCst);
            let (open, cv) = &*gate;
            let mut g = open.lock().unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            while !*g && Instant::now() < deadline {
                g = cv.wait_timeout(g, Duration::from_millis(50)).unwrap().0;
            }
        }));
    }
    fill_until_segment(&store, "R", 2);
    wait_dispatched(&store);
    let hold = put(&store, "Hold", 0, "hold", 100);
    assert_eq!(hold.wrote_offset as u64 / RSEG, 2);
    fill_until_segment(&store, "R", 5);
    wait_until("reput to reach the held message", || {
        entered.load(Ordering::SeqCst)
    });
    for s in 0..=5 {
        age_segment(&dir, s, now - 80 * HOUR_MS);
    }
    knobs.set_used(95);
    assert_eq!(
        store.clean_files_now(),
        2,
        "segments 0 and 1 are dispatched"
    );
    assert_eq!(store.clean_files_now(), 0, "segment 2 is not");
    assert_segments(&dir, 2..=5);
    assert!(store.dispatch_behind_bytes() > 0);
    {
        let (open, cv) = &*gate;
        *open.lock().unwrap() = true;
        cv.notify_all();
    }
    wait_dispatched(&store);
    assert_eq!(store.clean_files_now(), 3);
    assert_segments(&dir, 5..=5);
    assert_eq!(
        (store.commit_log_max_offset() as u64 - 1) / RSEG,
        5,
        "the one left is the one being written"
    );
    knobs.set_used(50);
    store.clean_files_now();
    assert_eq!(
        put(&store, "R", 0, "more", 10).status,
        PutMessageStatus::PutOk
    );
    let g = store.get_message("Hold", 0, 0, 1, 1 << 20, &AcceptAll);
    assert_eq!(
        g.status,
        GetMessageStatus::OffsetTooSmall,
        "its segment is gone now"
    );
    store.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The append stage's perf counters reach the metrics snapshot: every counter this host
/// can count is present (the others are None), and with sampling on every batch the
/// measured batches are exactly the append batches.
#[test]
fn append_stage_exports_perf_counters() {
    use ringmq_store::perf_event::{CounterKind, ThreadCounters};
    let host = ThreadCounters::open_for_current_thread("test");
    for every in [1, 0] {
        let dir = temp_dir("perf");
        let mut cfg = config(&dir, FlushDiskType::AsyncFlush, WriteMode::Mmap);
        cfg.append_perf_sample_every = every;
        let store = MessageStore::open(cfg).unwrap();
        for i in 0..50 {
            assert_eq!(
                put(&store, "P", 0, &format!("p{i}"), 100).status,
                PutMessageStatus::PutOk
            );
        }
        let m = store.metrics();
        store.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
        let p = m.append_perf;
        if every == 0 || host.available_mask() == 0 {
            assert_eq!(p, Default::default(), "nothing measured");
            continue;
        }
        assert_eq!(p.batches, m.append_batches);
        for kind in CounterKind::ALL {
            assert_eq!(p.get(kind).is_some(), host.is_available(kind), "{kind:?}");
        }
        if let Some(ns) = p.get(CounterKind::TaskClock) {
            assert!(ns > 0, "50 critical sections took no CPU time?");
        }
    }
}

/// Clears the immutable attribute it set, even when the test fails.
struct Immutable(PathBuf);

impl Immutable {
    /// `chattr +i` (root on ext4/xfs); None where the attribute cannot be set.
    fn set(path: PathBuf) -> Option<Immutable> {
        let ok = std::process::Command::new("chattr")
            .arg("+i")
            .arg(&path)
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Immutable(path))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .status();
    }
}

/// A segment whose unlink fails counts as gone for readers (the min offset moves past it)
/// but stays listed, stops that pass, and is deleted again by a later pass
/// (upstream reDeleteHangedFile, every redeleteHangedFileInterval).
#[test]
fn a_segment_whose_unlink_failed_is_deleted_again_later() {
    let dir = temp_dir("ret-hanged");
    let knobs = RetentionKnobs::new();
    let now = wall_ms();
    let (on, off) = delete_hours(now);
    let mut cfg = retention_config(&dir, &knobs, on);
    cfg.redelete_hanged_file_interval_ms = 0;
    let store = MessageStore::open(cfg).unwrap();
    knobs.set_now(off);
    fill_until_segment(&store, "G", 3);
    wait_dispatched(&store);
    for s in 0..2 {
        age_segment(&dir, s, now - 80 * HOUR_MS);
    }
    let Some(pin) = Immutable::set(segment_path(&dir, 0)) else {
        eprintln!("skipped: cannot make a file immutable here (needs root and chattr)");
        store.shutdown();
        return;
    };
    assert_eq!(store.delete_expired_files_now(), 0, "the unlink failed");
    assert!(segment_path(&dir, 0).exists());
    assert_eq!(
        store.commit_log_min_offset() as u64,
        RSEG,
        "readers see it gone"
    );
    assert!(store.look_message_by_offset(0).is_none());
    drop(pin);
    assert_eq!(store.delete_expired_files_now(), 0, "this pass retries it");
    assert!(!segment_path(&dir, 0).exists());
    assert_eq!(store.delete_expired_files_now(), 1, "then the rest goes on");
    assert_segments(&dir, 2..=3);
    store.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[path = "store/autoswitch.rs"]
mod autoswitch;
#[path = "store/faults.rs"]
mod faults;
#[path = "store/live_settings.rs"]
mod live_settings;
#[path = "store/replication.rs"]
mod replication;
