//! The broker on the store's one API: the in-memory store the processor tests run on
//! (`ringmq_store::MemStore`) answers it as the disk store (`MessageStore`) does, and a pull
//! sends a file span straight from the store's segment.

use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use ringmq_broker::processor::pull::pull_body;
use ringmq_runtime::BodyChunk;
use ringmq_store::mapped_file::{MapMode, MappedFile};
use ringmq_store::util::loopback_record;
use ringmq_store::{
    AcceptAll, FileSpan, GetMessageResult, GetMessageStatus, MemStore, MessageStore, PutRequest,
    PutResult, StoreApi, StoreConfig,
};

use super::temp_dir;

const TOPIC: &str = "TopicParity";

/// Puts one record with `KEYS=key` through the trait and waits for its completion.
fn put(store: &dyn StoreApi, key: &str) -> PutResult {
    let props = format!("KEYS\u{1}{key}\u{2}");
    let records = loopback_record(TOPIC, 0, b"parity-body", props.as_bytes());
    let (tx, rx) = mpsc::channel();
    store.put(
        PutRequest::new(TOPIC, 0, 0, records, 1),
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    rx.recv_timeout(Duration::from_secs(5))
        .expect("put completes within 5 s")
}

/// Waits (bounded) until `count` messages of the queue are readable.
fn wait_dispatched(store: &dyn StoreApi, count: i64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.max_offset_in_queue(TOPIC, 0) < count {
        assert!(Instant::now() < deadline, "reput did not dispatch {count}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Everything a broker reads from the store about three puts, minus store times.
fn answers(store: &dyn StoreApi) -> Vec<String> {
    let puts: Vec<PutResult> = ["k0", "k1", "k2"].iter().map(|k| put(store, k)).collect();
    wait_dispatched(store, 3);
    let mut out: Vec<String> = puts
        .iter()
        .map(|p| {
            format!(
                "put {} wrote {}+{} queue {} msgs {}",
                p.status.name(),
                p.wrote_offset,
                p.wrote_bytes,
                p.queue_offset,
                p.msg_num
            )
        })
        .collect();
    for offset in [-1, 0, 2, 3, 7] {
        let r = store.get_message(TOPIC, 0, offset, 32, 1 << 20, &AcceptAll);
        out.push(format!(
            "get {offset}: {} next {} min {} max {} offsets {:?}",
            r.status.name(),
            r.next_begin_offset,
            r.min_offset,
            r.max_offset,
            r.message_queue_offsets
        ));
    }
    let unknown = store.get_message("NoSuchTopic", 0, 0, 32, 1 << 20, &AcceptAll);
    out.push(format!("unknown queue: {}", unknown.status.name()));
    out.push(format!(
        "bounds {}..{} earliest known {} store time of 2 known {}, of 3 known {}",
        store.min_offset_in_queue(TOPIC, 0),
        store.max_offset_in_queue(TOPIC, 0),
        store.earliest_message_time(TOPIC, 0).is_some(),
        store.message_store_time(TOPIC, 0, 2).is_some(),
        store.message_store_time(TOPIC, 0, 3).is_some()
    ));
    out.push(format!(
        "query k1: {} records, commit log ends at {}",
        store.query_message(TOPIC, "k1", 10, 0, i64::MAX).len(),
        store.commit_log_max_offset()
    ));
    let second = store.look_message_by_offset(puts[1].wrote_offset);
    out.push(format!(
        "look at the second put: {:?} bytes",
        second.map(|r| r.len())
    ));
    out
}

#[test]
fn the_in_memory_store_answers_the_store_api_as_the_disk_store_does() {
    let dir = temp_dir("store-parity");
    let disk = MessageStore::open(StoreConfig {
        store_path_root_dir: dir.clone(),
        mapped_file_size_commit_log: 1 << 20,
        ..StoreConfig::default()
    })
    .expect("store opens");
    let from_disk = answers(&disk);
    disk.shutdown();
    let _ = std::fs::remove_dir_all(&dir);

    let from_memory = answers(&MemStore::new());
    assert_eq!(from_memory, from_disk);
}

#[test]
fn a_pull_splices_from_the_segment_the_store_returned() {
    let dir = temp_dir("segment-span");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("00000000000000000000");
    let record = vec![b'r'; 4096];
    std::fs::write(&path, &record).unwrap();
    let segment =
        Arc::new(MappedFile::open(&path, 0, record.len() as u64, MapMode::ReadOnly).expect("maps"));
    let mut result = GetMessageResult::empty(GetMessageStatus::Found, 1, 0, 1);
    result.messages = vec![segment.slice_bytes(0, record.len())];
    result.message_queue_offsets = vec![0];
    result.file_spans = vec![FileSpan {
        first_message: 0,
        message_count: 1,
        segment: segment.clone(),
        file_offset: 0,
        len: record.len(),
    }];

    let body = pull_body(result, 1);
    let [BodyChunk::File(range)] = &body[..] else {
        panic!("one file range expected, got {body:?}");
    };
    assert_eq!(
        Arc::as_ptr(range.file()) as *const u8,
        Arc::as_ptr(&segment) as *const u8,
        "the range holds the store's segment itself, not a wrapper around it"
    );
    assert_eq!(range.read_to_vec().unwrap(), record);
    let _ = std::fs::remove_dir_all(&dir);
}
