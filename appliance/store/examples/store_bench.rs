//! Store benchmark: append throughput for 128 B / 1 KiB / 16 KiB messages in both write
//! modes and both flush types, each next to a raw sequential write of the same disk taken
//! right after it (same total bytes, same write size, same segment-file layout), then put
//! latency (p50/p99) with 1, 16 and 256 concurrent writers under SYNC_FLUSH and, for the
//! SYNC/ASYNC ratio, 256 writers under ASYNC_FLUSH. Ends with the issue-5 targets as
//! ratios.
//!
//! `cargo run --release -p ringmq-store --example store_bench [-- <dir> [seconds_per_case [filter]]]`
//! (default dir: the system temp dir; default 3 s per case; `filter` keeps the cases whose
//! label contains it, e.g. `16384/Direct/Async` or `lat/`). Prints Markdown tables.
//!
//! The virtio disk of the dev VM swings between runs (and minutes), so every throughput
//! row carries its own raw figures, measured right after the row with the bytes the row
//! wrote: O_DIRECT writes of the flusher's chunk size ([`MAX_CHUNK_BYTES`], one at a time,
//! as `dd oflag=direct`) and buffered writes + fdatasync, both into fallocated files of the
//! benchmark's segment size.

use bytes::BytesMut;
use ringmq_store::direct::MAX_CHUNK_BYTES;
use ringmq_store::util::loopback_record;
use ringmq_store::{
    FlushDiskType, MessageStore, PutMessageStatus, PutRequest, StoreConfig, WriteMode,
};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Producer threads in throughput runs.
const PRODUCERS: usize = 4;
/// Puts in flight per producer in throughput runs.
const WINDOW: usize = 256;
/// Pause of a producer after a refused put.
const REFUSED_BACKOFF: Duration = Duration::from_millis(1);
/// Segment size for benchmark stores (and the raw files).
const SEGMENT_BYTES: u64 = 256 * 1024 * 1024;
/// Least bytes a raw measurement writes (a very slow row still gets a meaningful figure).
const RAW_MIN_BYTES: u64 = 256 * 1024 * 1024;
/// Body size of the latency runs.
const LATENCY_BODY: usize = 1024;
/// Writer threads of the latency runs.
const LATENCY_WRITERS: [usize; 3] = [1, 16, 256];

fn record(topic: &str, queue_id: i32, body_len: usize) -> BytesMut {
    let body = vec![b'x'; body_len];
    let props =
        "UNIQ_KEY\u{1}C0A8010530391B6A3F210BA7F2C40001\u{2}WAIT\u{1}true\u{2}TAGS\u{1}TagA\u{2}";
    loopback_record(topic, queue_id, &body, props.as_bytes())
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
    /// Record bytes acknowledged in the measured window.
    window_bytes: u64,
    lock_p99_us: u64,
    flush_group: f64,
    refused: u64,
    /// Append-stage perf counters over sampled critical sections (printed to stderr).
    append_perf: ringmq_store::perf_event::CounterTotals,
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
            // Puts this producer keeps in flight: the whole window while the store takes
            // them; after a refusal (the store is ahead of the disk) one put per
            // REFUSED_BACKOFF, doubling again on success, as a client backing off would,
            // rather than spinning on the cores the store needs.
            let mut window = WINDOW;
            while !stop.load(Ordering::Relaxed) {
                while inflight < window {
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
                        window = (window * 2).min(WINDOW);
                    } else {
                        if window > 1 || inflight == 0 {
                            std::thread::sleep(REFUSED_BACKOFF);
                        }
                        window = 1;
                    }
                }
            }
            while inflight > 0 && rx.recv().is_ok() {
                inflight -= 1;
            }
        }));
    }
    std::thread::sleep(warmup);
    let m0 = store.metrics();
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
    let m = store.metrics();
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        let _ = h.join();
    }
    store.shutdown();
    drop(store);
    fresh(dir);
    Throughput {
        msgs_per_s: (c1 - c0) as f64 / el,
        mb_per_s: (b1 - b0) as f64 / el / 1e6,
        window_bytes: b1 - b0,
        lock_p99_us: m.lock_hold_p99_us,
        flush_group: m.flush_group_mean,
        refused: m.put_rejected_busy - m0.put_rejected_busy,
        append_perf: m.append_perf,
    }
}

struct Latency {
    p50_us: u64,
    p99_us: u64,
    msgs_per_s: f64,
    flush_group: f64,
}

fn latency(
    dir: &Path,
    flush: FlushDiskType,
    mode: WriteMode,
    writers: usize,
    secs: f64,
) -> Latency {
    fresh(dir);
    let store = MessageStore::open(config(dir, flush, mode)).expect("open store");
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let mut hs = Vec::new();
    for w in 0..writers {
        let (store, stop, measuring) = (store.clone(), stop.clone(), measuring.clone());
        hs.push(std::thread::spawn(move || {
            let mut h =
                hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("hist");
            let tpl = record("Lat", (w % 8) as i32, LATENCY_BODY);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let r =
                    store.put_blocking(PutRequest::new("Lat", (w % 8) as i32, 0, tpl.clone(), 1));
                if r.status == PutMessageStatus::PutOk && measuring.load(Ordering::Relaxed) {
                    let _ = h.record(t.elapsed().as_micros() as u64);
                    n += 1;
                }
            }
            (h, n)
        }));
    }
    std::thread::sleep(Duration::from_millis(300));
    measuring.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    measuring.store(false, Ordering::Relaxed);
    let el = t0.elapsed().as_secs_f64();
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
    Latency {
        p50_us: all.value_at_quantile(0.5),
        p99_us: all.value_at_quantile(0.99),
        msgs_per_s: n as f64 / el,
        flush_group: m.flush_group_mean,
    }
}

/// A page-aligned buffer of one flusher chunk (O_DIRECT needs aligned memory).
fn aligned_chunk() -> (Vec<u8>, usize) {
    let len = MAX_CHUNK_BYTES as usize;
    let mut big = vec![0x5Au8; len + 4096];
    let shift = big.as_ptr().align_offset(4096);
    big[shift..shift + len].fill(0x5A);
    (big, shift)
}

/// Creates raw file `i` of the segment size, blocks reserved like a store segment.
fn raw_file(dir: &Path, i: u64, direct: bool) -> File {
    let path = dir.join(format!("raw{i}"));
    let mut o = OpenOptions::new();
    o.write(true).create(true).truncate(true);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    let f = o.open(&path).expect("raw file");
    // SAFETY: plain syscall on an fd we own.
    let rc = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, SEGMENT_BYTES as libc::off_t) };
    assert_eq!(rc, 0, "fallocate {}", path.display());
    f
}

/// Raw sequential write of `total` bytes (rounded up to chunks) in chunk-sized writes,
/// one at a time, across fallocated segment-sized files, each fdatasynced when full and
/// at the end: MB/s including the fdatasyncs.
fn raw_sequential(dir: &Path, total: u64, direct: bool) -> f64 {
    fresh(dir);
    let (big, shift) = aligned_chunk();
    let chunk = &big[shift..shift + MAX_CHUNK_BYTES as usize];
    let total = total.max(RAW_MIN_BYTES).div_ceil(MAX_CHUNK_BYTES) * MAX_CHUNK_BYTES;
    let t = Instant::now();
    let mut file: Option<File> = None;
    let mut off = 0u64;
    while off < total {
        let pos = off % SEGMENT_BYTES;
        if pos == 0 {
            if let Some(f) = file.take() {
                f.sync_data().expect("fdatasync");
            }
            file = Some(raw_file(dir, off / SEGMENT_BYTES, direct));
        }
        let f = file.as_ref().expect("raw file open");
        f.write_all_at(chunk, pos).expect("raw write");
        off += MAX_CHUNK_BYTES;
    }
    if let Some(f) = file.take() {
        f.sync_data().expect("fdatasync");
    }
    let mb_per_s = total as f64 / t.elapsed().as_secs_f64() / 1e6;
    fresh(dir);
    mb_per_s
}

/// p50 of a 4 KiB append + fdatasync (the floor of one SYNC_FLUSH put's latency).
fn raw_fsync_p50_us(dir: &Path) -> u64 {
    fresh(dir);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.join("fsync"))
        .expect("sync file");
    let page = [0x5Au8; 4096];
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("hist");
    for _ in 0..300 {
        let t = Instant::now();
        f.write_all(&page).expect("write");
        f.sync_data().expect("fdatasync");
        let _ = h.record(t.elapsed().as_micros() as u64);
    }
    fresh(dir);
    h.value_at_quantile(0.5)
}

fn pct(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        100.0 * part / whole
    } else {
        0.0
    }
}

/// One printed throughput row, kept for the targets at the end.
struct Row {
    body: usize,
    mode: WriteMode,
    flush: FlushDiskType,
    t: Throughput,
    raw_direct: f64,
    raw_buffered: f64,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir: PathBuf = args
        .get(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("ringmq-store-bench"));
    let secs: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let filter = args.get(3).cloned().unwrap_or_default();
    println!(
        "store bench in {} ({} cores, {secs} s per case)\n",
        dir.display(),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );
    println!(
        "4 KiB write+fdatasync p50 {} µs. Raw columns: the same bytes as the row, written \
         right after it in {} KiB sequential writes to fallocated {} MiB files — O_DIRECT \
         one write at a time, and buffered + fdatasync.\n",
        raw_fsync_p50_us(&dir),
        MAX_CHUNK_BYTES / 1024,
        SEGMENT_BYTES >> 20
    );
    println!("| body B | mode | flush | msgs/s | MB/s | raw O_DIRECT MB/s | % of raw O_DIRECT | raw buffered MB/s | % of raw buffered | refused puts | lock-hold p99 µs | waiters/flush |");
    println!("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut rows: Vec<Row> = Vec::new();
    for body in [128usize, 1024, 16 * 1024] {
        for mode in [WriteMode::Mmap, WriteMode::Direct] {
            for flush in [FlushDiskType::AsyncFlush, FlushDiskType::SyncFlush] {
                if !format!("{body}/{mode:?}/{flush:?}").contains(&filter) {
                    continue;
                }
                let t = throughput(&dir, flush, mode, body, secs);
                let raw_direct = raw_sequential(&dir, t.window_bytes, true);
                let raw_buffered = raw_sequential(&dir, t.window_bytes, false);
                println!(
                    "| {body} | {mode:?} | {flush:?} | {:.0} | {:.1} | {raw_direct:.0} | {:.0}% | {raw_buffered:.0} | {:.0}% | {} | {} | {:.1} |",
                    t.msgs_per_s,
                    t.mb_per_s,
                    pct(t.mb_per_s, raw_direct),
                    pct(t.mb_per_s, raw_buffered),
                    t.refused,
                    t.lock_p99_us,
                    t.flush_group
                );
                eprintln!(
                    "{body}/{mode:?}/{flush:?} append perf: {}",
                    t.append_perf.summary()
                );
                rows.push(Row {
                    body,
                    mode,
                    flush,
                    t,
                    raw_direct,
                    raw_buffered,
                });
            }
        }
    }
    println!(
        "\nPut latency, {LATENCY_BODY} B body, put_blocking per writer thread (ASYNC_FLUSH only \
         with 256 writers, for the SYNC/ASYNC ratio):\n"
    );
    println!("| mode | flush | writers | p50 µs | p99 µs | msgs/s | waiters/flush |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    let mut lat: Vec<(WriteMode, FlushDiskType, usize, Latency)> = Vec::new();
    for mode in [WriteMode::Mmap, WriteMode::Direct] {
        let cases = LATENCY_WRITERS
            .iter()
            .map(|w| (FlushDiskType::SyncFlush, *w))
            .chain([(FlushDiskType::AsyncFlush, 256)]);
        for (flush, writers) in cases {
            if !format!("lat/{mode:?}/{flush:?}/{writers}").contains(&filter) {
                continue;
            }
            let l = latency(&dir, flush, mode, writers, secs);
            println!(
                "| {mode:?} | {flush:?} | {writers} | {} | {} | {:.0} | {:.1} |",
                l.p50_us, l.p99_us, l.msgs_per_s, l.flush_group
            );
            lat.push((mode, flush, writers, l));
        }
    }
    print_targets(&rows, &lat);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The issue-5 targets as ratios of figures from this run.
fn print_targets(rows: &[Row], lat: &[(WriteMode, FlushDiskType, usize, Latency)]) {
    println!("\nTargets (issue 5):\n");
    let row = |body, mode, flush| {
        rows.iter()
            .find(|r| r.body == body && r.mode == mode && r.flush == flush)
    };
    if let Some(r) = row(16 * 1024, WriteMode::Direct, FlushDiskType::AsyncFlush) {
        println!(
            "- direct/ASYNC_FLUSH 16 KiB ≥ 80% of raw sequential write: {:.0}% of raw O_DIRECT, {:.0}% of raw buffered",
            pct(r.t.mb_per_s, r.raw_direct),
            pct(r.t.mb_per_s, r.raw_buffered)
        );
    }
    for mode in [WriteMode::Mmap, WriteMode::Direct] {
        let find = |flush| {
            lat.iter()
                .find(|(m, f, w, _)| *m == mode && *f == flush && *w == 256)
                .map(|(_, _, _, l)| l.msgs_per_s)
        };
        let (Some(sync), Some(asyncf)) = (
            find(FlushDiskType::SyncFlush),
            find(FlushDiskType::AsyncFlush),
        ) else {
            continue;
        };
        let windowed = row(LATENCY_BODY, mode, FlushDiskType::AsyncFlush)
            .map(|r| {
                format!(
                    ", {:.0}% of the windowed ASYNC_FLUSH {LATENCY_BODY} B row ({} puts in flight)",
                    pct(sync, r.t.msgs_per_s),
                    PRODUCERS * WINDOW
                )
            })
            .unwrap_or_default();
        println!(
            "- {mode:?}: SYNC_FLUSH with 256 writers ≥ 50% of ASYNC_FLUSH: {:.0}% of ASYNC_FLUSH with the same 256 writers{windowed}",
            pct(sync, asyncf)
        );
    }
}
