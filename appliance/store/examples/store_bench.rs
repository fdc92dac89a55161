//! Store benchmark: append throughput for 128 B / 1 KiB / 16 KiB messages in both write
//! modes and both flush types, next to a raw sequential-write measurement of the same disk
//! taken in the same run; then SYNC_FLUSH put latency (p50/p99) with 1, 16 and 256
//! concurrent writers.
//!
//! `cargo run --release -p ringmq-store --example store_bench [-- <dir> [seconds_per_case]]`
//! (default dir: the system temp dir; default 3 s per case). Prints a Markdown table.

use bytes::BytesMut;
use ringmq_remoting::message::record::{encode_record, RecordFields};
use ringmq_store::{
    FlushDiskType, MessageStore, PutMessageStatus, PutRequest, StoreConfig, WriteMode,
};
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Producer threads in throughput runs (each keeps `WINDOW` puts in flight).
const PRODUCERS: usize = 4;
/// Puts in flight per producer in throughput runs.
const WINDOW: usize = 256;
/// Segment size for benchmark stores (smaller than 1 GiB so pre-faulting stays cheap).
const SEGMENT_BYTES: u64 = 256 * 1024 * 1024;
/// Bytes written by the raw sequential-write baseline.
const RAW_BYTES: usize = 1024 * 1024 * 1024;

fn record(topic: &str, queue_id: i32, body_len: usize) -> BytesMut {
    let body = vec![b'x'; body_len];
    let props =
        "UNIQ_KEY\u{1}C0A8010530391B6A3F210BA7F2C40001\u{2}WAIT\u{1}true\u{2}TAGS\u{1}TagA\u{2}";
    let f = RecordFields {
        queue_id,
        flag: 0,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: 0,
        born_timestamp_ms: 1,
        born_host: "127.0.0.1:1".parse().expect("addr"),
        store_timestamp_ms: 0,
        store_host: "127.0.0.1:10911".parse().expect("addr"),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: &body,
        topic,
        properties: props.as_bytes(),
    };
    let mut out = BytesMut::new();
    encode_record(&f, &mut out).expect("encodable");
    out
}

fn config(dir: &Path, flush: FlushDiskType, mode: WriteMode) -> StoreConfig {
    StoreConfig {
        store_path_root_dir: dir.to_path_buf(),
        mapped_file_size_commit_log: SEGMENT_BYTES,
        flush_disk_type: flush,
        write_mode: mode,
        message_index_enable: false,
        max_hash_slot_num: 1000,
        max_index_num: 4000,
        ..StoreConfig::default()
    }
}

fn fresh(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("bench dir");
}

struct Throughput {
    msgs_per_s: f64,
    mb_per_s: f64,
    lock_p99_us: u64,
    flush_group: f64,
}

fn throughput(
    dir: &Path,
    flush: FlushDiskType,
    mode: WriteMode,
    body: usize,
    secs: f64,
) -> Throughput {
    fresh(dir);
    let store = MessageStore::open(config(dir, flush, mode)).expect("open store");
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let mut hs = Vec::new();
    let warmup = Duration::from_millis(300);
    for p in 0..PRODUCERS {
        let (store, stop, count, bytes) =
            (store.clone(), stop.clone(), count.clone(), bytes.clone());
        hs.push(std::thread::spawn(move || {
            let tpl = record("Bench", p as i32, body);
            let (tx, rx) = mpsc::sync_channel::<PutMessageStatus>(WINDOW);
            let mut inflight = 0;
            while !stop.load(Ordering::Relaxed) {
                while inflight < WINDOW {
                    let tx = tx.clone();
                    store.put(
                        PutRequest::new("Bench", p as i32, 0, tpl.clone(), 1),
                        Box::new(move |r| {
                            let _ = tx.send(r.status);
                        }),
                    );
                    inflight += 1;
                }
                if let Ok(s) = rx.recv() {
                    inflight -= 1;
                    if s == PutMessageStatus::PutOk {
                        count.fetch_add(1, Ordering::Relaxed);
                        bytes.fetch_add(tpl.len() as u64, Ordering::Relaxed);
                    }
                }
            }
            while inflight > 0 && rx.recv().is_ok() {
                inflight -= 1;
            }
        }));
    }
    std::thread::sleep(warmup);
    let (c0, b0, t0) = (
        count.load(Ordering::Relaxed),
        bytes.load(Ordering::Relaxed),
        Instant::now(),
    );
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (c1, b1, el) = (
        count.load(Ordering::Relaxed),
        bytes.load(Ordering::Relaxed),
        t0.elapsed().as_secs_f64(),
    );
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        let _ = h.join();
    }
    let m = store.metrics();
    store.shutdown();
    drop(store);
    fresh(dir);
    Throughput {
        msgs_per_s: (c1 - c0) as f64 / el,
        mb_per_s: (b1 - b0) as f64 / el / 1e6,
        lock_p99_us: m.lock_hold_p99_us,
        flush_group: m.flush_group_mean,
    }
}

fn latency(dir: &Path, mode: WriteMode, writers: usize, secs: f64) -> (u64, u64, f64, f64) {
    fresh(dir);
    let store =
        MessageStore::open(config(dir, FlushDiskType::SyncFlush, mode)).expect("open store");
    let stop = Arc::new(AtomicBool::new(false));
    let mut hs = Vec::new();
    for w in 0..writers {
        let (store, stop) = (store.clone(), stop.clone());
        hs.push(std::thread::spawn(move || {
            let mut h =
                hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("hist");
            let tpl = record("Lat", (w % 8) as i32, 1024);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let r =
                    store.put_blocking(PutRequest::new("Lat", (w % 8) as i32, 0, tpl.clone(), 1));
                if r.status == PutMessageStatus::PutOk {
                    let _ = h.record(t.elapsed().as_micros() as u64);
                    n += 1;
                }
            }
            (h, n)
        }));
    }
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    let mut all = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("hist");
    let mut n = 0;
    for h in hs {
        if let Ok((h, c)) = h.join() {
            let _ = all.add(&h);
            n += c;
        }
    }
    let m = store.metrics();
    store.shutdown();
    drop(store);
    fresh(dir);
    (
        all.value_at_quantile(0.5),
        all.value_at_quantile(0.99),
        n as f64 / secs,
        m.flush_group_mean,
    )
}

/// Raw sequential write of the same disk: buffered 1 MiB writes + one fdatasync, and
/// O_DIRECT 1 MiB writes; plus the latency of a 4 KiB write + fdatasync.
fn raw_disk(dir: &Path) -> (f64, f64, u64) {
    fresh(dir);
    let path = dir.join("raw");
    let buf = vec![0x5Au8; 1 << 20];
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .expect("raw file");
    let t = Instant::now();
    let mut off = 0;
    while off < RAW_BYTES {
        f.write_all_at(&buf, off as u64).expect("raw write");
        off += buf.len();
    }
    f.sync_data().expect("fdatasync");
    let buffered = RAW_BYTES as f64 / t.elapsed().as_secs_f64() / 1e6;
    drop(f);
    let _ = std::fs::remove_file(&path);
    // O_DIRECT needs an aligned buffer: carve one out of a larger allocation.
    let mut big = vec![0x5Au8; (1 << 20) + 4096];
    let shift = big.as_ptr().align_offset(4096);
    let aligned = &mut big[shift..shift + (1 << 20)];
    aligned.fill(0x5A);
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .expect("raw direct file");
    let t = Instant::now();
    let mut off = 0;
    while off < RAW_BYTES {
        f.write_all_at(aligned, off as u64).expect("direct write");
        off += aligned.len();
    }
    f.sync_data().expect("fdatasync");
    let direct = RAW_BYTES as f64 / t.elapsed().as_secs_f64() / 1e6;
    drop(f);
    let _ = std::fs::remove_file(&path);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .expect("sync file");
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("hist");
    for i in 0..300u64 {
        let t = Instant::now();
        f.write_all(&buf[..4096]).expect("write");
        f.sync_data().expect("fdatasync");
        let _ = h.record(t.elapsed().as_micros() as u64);
        let _ = i;
    }
    let _ = std::fs::remove_file(&path);
    (buffered, direct, h.value_at_quantile(0.5))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir: PathBuf = args
        .get(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("ringmq-store-bench"));
    let secs: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3.0);
    println!(
        "store bench in {} ({} cores, {secs} s per case)\n",
        dir.display(),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );
    let (buffered, direct, fsync_us) = raw_disk(&dir);
    println!("raw disk: sequential buffered write+fdatasync {buffered:.0} MB/s, O_DIRECT 1 MiB writes {direct:.0} MB/s, 4 KiB write+fdatasync p50 {fsync_us} µs\n");
    println!("| body | mode | flush | msgs/s | MB/s | % of raw buffered | lock-hold p99 µs | waiters/flush |");
    println!("|---:|---|---|---:|---:|---:|---:|---:|");
    for body in [128usize, 1024, 16 * 1024] {
        for mode in [WriteMode::Mmap, WriteMode::Direct] {
            for flush in [FlushDiskType::AsyncFlush, FlushDiskType::SyncFlush] {
                let t = throughput(&dir, flush, mode, body, secs);
                println!(
                    "| {body} | {mode:?} | {flush:?} | {:.0} | {:.1} | {:.0}% | {} | {:.1} |",
                    t.msgs_per_s,
                    t.mb_per_s,
                    100.0 * t.mb_per_s / buffered,
                    t.lock_p99_us,
                    t.flush_group
                );
            }
        }
    }
    println!("\nSYNC_FLUSH put latency, 1 KiB body, put_blocking per writer thread:\n");
    println!("| mode | writers | p50 µs | p99 µs | puts/s | waiters/flush |");
    println!("|---|---:|---:|---:|---:|---:|");
    for mode in [WriteMode::Mmap, WriteMode::Direct] {
        for writers in [1usize, 16, 256] {
            let (p50, p99, rate, group) = latency(&dir, mode, writers, secs);
            println!("| {mode:?} | {writers} | {p50} | {p99} | {rate:.0} | {group:.1} |");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
