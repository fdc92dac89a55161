//! Store micro-benchmarks: the three per-message steps of the store's pipeline, each on
//! its own so a regression points at a stage.
//!
//! - `append`: 32 records of 1 KiB (body) per iteration, mmap mode, ASYNC_FLUSH, 32 MiB
//!   CommitLog segments, either as one batch put (`SEND_BATCH_MESSAGE`'s shape) or as 32
//!   single-record puts in flight at once, completed over a channel (the network cores'
//!   shape, which the append stage groups). Measures the submit queue, validation, offset
//!   patching and the pwritev into the page cache, not the disk: ASYNC_FLUSH completes a
//!   put at append.
//! - `consume_queue`: appending one 20-byte unit to a ConsumeQueue (`ConsumeQueue::put_unit`,
//!   what the reput stage does for every message), 2 MiB queue files.
//! - `get_message`: reading 32 messages of a queue (`MessageStore::get_message`): the
//!   ConsumeQueue read path plus the CommitLog record lookups of a pull.
//!
//! Everything lives in a temporary directory under `target/` (`CARGO_TARGET_TMPDIR`) that
//! is reset every 128 MiB of CommitLog (outside the timed sections) and removed at the end.
//!
//! `cargo bench -p ringmq-store --bench store` (add `-- --quick` for a short run).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ringmq_remoting::message::record::{encode_record, RecordFields};
use ringmq_store::consume_queue::{ConsumeQueueTable, CQ_UNIT_SIZE};
use ringmq_store::{
    AcceptAll, FlushDiskType, GetMessageStatus, MessageStore, PutMessageStatus, PutRequest,
    StoreConfig, WriteMode,
};

/// Body bytes of every benchmark message.
const BODY_BYTES: usize = 1024;
/// Records per iteration of the append benchmarks and per pull of `get_message`.
const BATCH: usize = 32;
/// CommitLog segment size: small, so segment creation and roll-over are part of the run.
const SEGMENT_BYTES: u64 = 32 * 1024 * 1024;
/// CommitLog bytes after which the store is wiped (untimed), bounding the disk used.
const RESET_BYTES: i64 = 128 * 1024 * 1024;
/// Units per ConsumeQueue file (2 MiB files).
const CQ_FILE_UNITS: u32 = 100_000;
/// Units after which the ConsumeQueue benchmark starts a fresh queue (untimed).
const CQ_RESET_UNITS: i64 = 1_000_000;
/// Messages in the queue `get_message` reads from.
const READ_QUEUE_MESSAGES: i64 = 4096;

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ringmq-store-bench-{}-{name}", std::process::id()));
    fresh(&dir);
    dir
}

fn fresh(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("bench dir");
}

fn config(dir: &Path) -> StoreConfig {
    StoreConfig {
        store_path_root_dir: dir.to_path_buf(),
        mapped_file_size_commit_log: SEGMENT_BYTES,
        mapped_file_size_consume_queue_units: CQ_FILE_UNITS,
        flush_disk_type: FlushDiskType::AsyncFlush,
        write_mode: WriteMode::Mmap,
        message_index_enable: false,
        max_hash_slot_num: 1000,
        max_index_num: 4000,
        ..StoreConfig::default()
    }
}

/// One stored record of `topic`/`queue_id` with a 1 KiB body, offsets left for the store.
fn record(topic: &str, queue_id: i32) -> BytesMut {
    let body = vec![b'x'; BODY_BYTES];
    let props = "UNIQ_KEY\u{1}7F00000100012A9F1F2C6B1E5D8C0000\u{2}WAIT\u{1}true\u{2}\
TAGS\u{1}TagA\u{2}";
    let fields = RecordFields {
        queue_id,
        flag: 0,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: 0,
        born_timestamp_ms: 1_718_000_000_000,
        born_host: "192.0.2.7:53211".parse().expect("addr"),
        store_timestamp_ms: 0,
        store_host: "127.0.0.1:10911".parse().expect("addr"),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: &body,
        topic,
        properties: props.as_bytes(),
    };
    let mut out = BytesMut::new();
    encode_record(&fields, &mut out).expect("encodable");
    out
}

/// An open store in its own directory, reopened empty once it holds `RESET_BYTES`.
struct Scratch {
    dir: PathBuf,
    store: Option<MessageStore>,
}

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = scratch(name);
        let store = MessageStore::open(config(&dir)).expect("open store");
        Scratch {
            dir,
            store: Some(store),
        }
    }

    /// The store, wiped first if it has grown past the bound.
    fn store(&mut self) -> &MessageStore {
        let full = self
            .store
            .as_ref()
            .is_some_and(|s| s.commit_log_max_offset() >= RESET_BYTES);
        if full {
            self.close();
            fresh(&self.dir);
            self.store = Some(MessageStore::open(config(&self.dir)).expect("reopen store"));
        }
        self.store.as_ref().expect("open store")
    }

    fn close(&mut self) {
        if let Some(s) = self.store.take() {
            s.shutdown();
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        self.close();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn append(c: &mut Criterion) {
    let mut scratch = Scratch::new("append");
    let one = record("Bench", 0);
    let mut batch = BytesMut::new();
    for _ in 0..BATCH {
        batch.extend_from_slice(&one);
    }
    let mut g = c.benchmark_group("append");
    g.throughput(Throughput::Bytes(batch.len() as u64));
    g.bench_function("batch_put/32x1KiB", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let store = scratch.store();
                let t = Instant::now();
                let r =
                    store.put_blocking(PutRequest::new("Bench", 0, 0, batch.clone(), BATCH as u32));
                spent += t.elapsed();
                assert_eq!(r.status, PutMessageStatus::PutOk, "{r:?}");
            }
            spent
        })
    });
    g.bench_function("window_put/32x1KiB", |b| {
        let (tx, rx) = mpsc::sync_channel::<PutMessageStatus>(BATCH);
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let store = scratch.store();
                let t = Instant::now();
                for _ in 0..BATCH {
                    let tx = tx.clone();
                    store.put(
                        PutRequest::new("Bench", 0, 0, one.clone(), 1),
                        Box::new(move |r| {
                            let _ = tx.send(r.status);
                        }),
                    );
                }
                for _ in 0..BATCH {
                    let status = rx.recv().expect("put completes");
                    assert_eq!(status, PutMessageStatus::PutOk);
                }
                spent += t.elapsed();
            }
            spent
        })
    });
    g.finish();
}

fn consume_queue(c: &mut Criterion) {
    let dir = scratch("cq");
    let file_bytes = u64::from(CQ_FILE_UNITS) * CQ_UNIT_SIZE as u64;
    let record_bytes = (BODY_BYTES + 100) as i32;
    let mut table: Option<ConsumeQueueTable> = None;
    let mut next = 0i64;
    let mut g = c.benchmark_group("consume_queue");
    g.throughput(Throughput::Elements(1));
    g.bench_function("put_unit", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            let mut left = iters as i64;
            while left > 0 {
                if next >= CQ_RESET_UNITS {
                    table = None;
                    fresh(&dir);
                    next = 0;
                }
                let cq = table
                    .get_or_insert_with(|| {
                        ConsumeQueueTable::load(&dir, file_bytes).expect("load queues")
                    })
                    .find_or_create("Bench", 0);
                let n = left.min(CQ_RESET_UNITS - next);
                let t = Instant::now();
                for i in next..next + n {
                    let added = cq
                        .put_unit(i * i64::from(record_bytes), record_bytes, 0x2A, i)
                        .expect("put unit");
                    black_box(added);
                }
                spent += t.elapsed();
                next += n;
                left -= n;
            }
            spent
        })
    });
    g.finish();
    drop(table);
    let _ = std::fs::remove_dir_all(&dir);
}

fn get_message(c: &mut Criterion) {
    let mut scratch = Scratch::new("read");
    let store = scratch.store().clone();
    let one = record("Read", 0);
    let mut batch = BytesMut::new();
    for _ in 0..BATCH {
        batch.extend_from_slice(&one);
    }
    for _ in 0..READ_QUEUE_MESSAGES / BATCH as i64 {
        let r = store.put_blocking(PutRequest::new("Read", 0, 0, batch.clone(), BATCH as u32));
        assert_eq!(r.status, PutMessageStatus::PutOk, "{r:?}");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.max_offset_in_queue("Read", 0) < READ_QUEUE_MESSAGES {
        assert!(Instant::now() < deadline, "reput did not dispatch in 30 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut g = c.benchmark_group("get_message");
    g.throughput(Throughput::Bytes((one.len() * BATCH) as u64));
    let mut offset = 0i64;
    g.bench_function("pull/32x1KiB", |b| {
        b.iter(|| {
            let r = store.get_message("Read", 0, offset, BATCH as i32, 256 * 1024, &AcceptAll);
            assert_eq!(r.status, GetMessageStatus::Found);
            assert_eq!(r.messages.len(), BATCH);
            offset = (offset + BATCH as i64) % READ_QUEUE_MESSAGES;
            r
        })
    });
    g.finish();
    drop(store);
    scratch.close();
}

criterion_group!(benches, append, consume_queue, get_message);
criterion_main!(benches);
