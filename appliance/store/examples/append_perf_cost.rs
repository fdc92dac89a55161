//! What the append stage's perf counters cost, to choose `ringmq.appendPerfSampleEvery`:
//! `cargo run --release -p ringmq-store --example append_perf_cost [-- <dir> [seconds]]`.
//!
//! 1. Which counters this host can count, and the time of one `ThreadCounters::read`
//!    (one `read(2)` per counter group; a measured batch costs two).
//! 2. The worst case for per-batch overhead: one writer doing `put_blocking` of 128-byte
//!    messages (ASYNC_FLUSH, mmap), so every batch holds one put, with sampling off, every
//!    16th batch and every batch; twice each, interleaved. Prints puts/s, put latency and
//!    what the counters saw per measured batch.

use bytes::BytesMut;
use ringmq_store::perf_event::{CounterKind, CounterValues, ThreadCounters};
use ringmq_store::util::loopback_record;
use ringmq_store::{MessageStore, PutMessageStatus, PutRequest, StoreConfig};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const READS: u32 = 200_000;
const BODY_BYTES: usize = 128;

fn read_cost() {
    let c = ThreadCounters::open_for_current_thread("append_perf_cost");
    for kind in CounterKind::ALL {
        match c.unavailable(kind) {
            None => println!("{:>16}: counted", kind.name()),
            Some(u) => println!("{:>16}: unavailable: {}", kind.name(), u.reason),
        }
    }
    let mut v = CounterValues::default();
    if let Err(e) = c.read(&mut v) {
        eprintln!("reading the counters failed: {e}");
        std::process::exit(1);
    }
    let t = Instant::now();
    for _ in 0..READS {
        let _ = c.read(&mut v);
    }
    let read_ns = t.elapsed().as_nanos() / u128::from(READS);
    let t = Instant::now();
    for _ in 0..READS {
        std::hint::black_box(Instant::now());
    }
    let now_ns = t.elapsed().as_nanos() / u128::from(READS);
    println!("ThreadCounters::read: {read_ns} ns per call; Instant::now: {now_ns} ns\n");
}

fn record() -> BytesMut {
    let body = vec![b'x'; BODY_BYTES];
    loopback_record("Cost", 0, &body, b"TAGS\x01A\x02")
}

fn run(dir: &Path, sample_every: u32, secs: f64) {
    let _ = std::fs::remove_dir_all(dir);
    let store = MessageStore::open(StoreConfig {
        store_path_root_dir: dir.to_path_buf(),
        mapped_file_size_commit_log: 256 * 1024 * 1024,
        message_index_enable: false,
        append_perf_sample_every: sample_every,
        ..StoreConfig::default()
    })
    .expect("open store");
    let tpl = record();
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("hist");
    let (start, mut n) = (Instant::now(), 0u64);
    while start.elapsed() < Duration::from_secs_f64(secs) {
        let t = Instant::now();
        let r = store.put_blocking(PutRequest::new("Cost", 0, 0, tpl.clone(), 1));
        if r.status == PutMessageStatus::PutOk {
            let _ = h.record((t.elapsed().as_nanos() as u64).max(1));
            n += 1;
        }
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    let m = store.metrics();
    store.shutdown();
    let _ = std::fs::remove_dir_all(dir);
    let p = m.append_perf;
    let per_batch = |k: CounterKind| match (p.get(k), p.batches) {
        (Some(v), b) if b > 0 => format!("{:.3}", v as f64 / b as f64),
        _ => "-".into(),
    };
    println!(
        "| {sample_every} | {rate:.0} | {} | {} | {} | {} | {} | {} |",
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.99),
        p.batches,
        per_batch(CounterKind::TaskClock),
        per_batch(CounterKind::ContextSwitches),
        per_batch(CounterKind::PageFaults),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir: PathBuf = args
        .get(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("ringmq-append-perf-cost"));
    let secs: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3.0);
    read_cost();
    println!("one writer, put_blocking, {BODY_BYTES} B, ASYNC_FLUSH, mmap, {secs} s per run:\n");
    println!("| sample every | puts/s | put p50 ns | put p99 ns | measured batches | task ns/batch | ctx switches/batch | page faults/batch |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for _ in 0..2 {
        for every in [0, 16, 1] {
            run(&dir, every, secs);
        }
    }
}
