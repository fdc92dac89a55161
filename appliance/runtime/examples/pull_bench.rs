//! Pull-body micro-benchmark: how ringmq's Remoting server sends large response bodies that
//! live in a file (a pull answered from a CommitLog segment), two ways, in one run:
//!
//! - `mmap`: one memory chunk per record, each a `Bytes` over a read-only shared mapping of
//!   the file (what a pull sends when `ringmq.pull.zeroCopyMinBytes` is 0 or the run is
//!   short): one vectored send, the kernel copies the page-cache pages into socket buffers;
//! - `splice`: the records as one file range (coalesced, as the store reports contiguous
//!   records), spliced file → pipe → socket through io_uring: no copy of the payload by the
//!   CPU on the send side (the socket references the page-cache pages).
//!
//! Clients are blocking threads, one connection each, one pull in flight per connection
//! (a consumer's pull loop): send a request, read the whole answer, repeat. The file is
//! written first, so it is in the page cache (this measures the send path, not the disk).
//! Modes alternate within each round (ABBA) so drift from other load cancels.
//!
//! Reported per mode: MB/s of bodies received, pulls/s, server CPU seconds in the window
//! (whole process minus the client threads: the network cores plus the kernel's io-wq
//! workers, which run the splices), and server CPU µs per MB.
//!
//! Run (release): `cargo run --release -p ringmq-runtime --example pull_bench -- --help`

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use ringmq_remoting::{RemotingCommand, SerializeType};
use ringmq_runtime::{
    cores, BodyChunk, CoreMap, FileRange, Reply, RequestContext, RequestHandler, Response, Server,
    ServerConfig, ServerTuning, SharedFile,
};

#[global_allocator]
static GLOBAL: ringmq_runtime::MiMalloc = ringmq_runtime::MiMalloc;

const PULL_MMAP: i32 = 1;
const PULL_SPLICE: i32 = 2;

struct Args {
    conns: usize,
    secs: u64,
    warmup_secs: u64,
    records: usize,
    /// Records per file range in splice mode (default: all, one range per body).
    range_records: usize,
    record_sizes: Vec<usize>,
    file_bytes: usize,
    network_cores: Vec<usize>,
    rounds: usize,
}

fn usage() -> ! {
    eprintln!(
        "pull_bench [--conns N=4] [--secs S=5] [--warmup S=1] [--records R=32] \
         [--record-bytes LIST=16384,1024] [--range-records K=all (splice: ranges of K records, \
         like a filtered pull's runs)] [--file-mib M=256] \
         [--cores LIST (default: CoreMap::detect().network)] [--rounds R=2]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        conns: 4,
        secs: 5,
        warmup_secs: 1,
        records: 32,
        range_records: 0,
        record_sizes: vec![16 * 1024, 1024],
        file_bytes: 256 * 1024 * 1024,
        network_cores: CoreMap::detect().network,
        rounds: 2,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--conns" => a.conns = value().parse().unwrap_or_else(|_| usage()),
            "--secs" => a.secs = value().parse().unwrap_or_else(|_| usage()),
            "--warmup" => a.warmup_secs = value().parse().unwrap_or_else(|_| usage()),
            "--records" => a.records = value().parse().unwrap_or_else(|_| usage()),
            "--range-records" => a.range_records = value().parse().unwrap_or_else(|_| usage()),
            "--record-bytes" => {
                a.record_sizes = value()
                    .split(',')
                    .map(|v| v.trim().parse().unwrap_or_else(|_| usage()))
                    .collect()
            }
            "--file-mib" => {
                a.file_bytes = value().parse::<usize>().unwrap_or_else(|_| usage()) * 1024 * 1024
            }
            "--cores" => {
                a.network_cores = cores::parse_core_list(&value()).unwrap_or_else(|_| usage())
            }
            "--rounds" => a.rounds = value().parse().unwrap_or_else(|_| usage()),
            _ => usage(),
        }
    }
    if a.range_records == 0 || a.range_records > a.records {
        a.range_records = a.records;
    }
    let biggest = a.record_sizes.iter().max().copied().unwrap_or(0) * a.records;
    if a.conns == 0 || a.secs == 0 || a.rounds == 0 || biggest == 0 || biggest * 4 > a.file_bytes {
        usage();
    }
    a
}

/// A read-only shared mapping of the whole file.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: read-only memory, never written after the file was created.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(file: &std::fs::File, len: usize) -> Mapping {
        // SAFETY: mapping `len` bytes of a file we opened and sized; checked against
        // MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(
            ptr,
            libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        Mapping {
            ptr: NonNull::new(ptr as *mut u8).expect("non-null mapping"),
            len,
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped; every slice holds an Arc to `self`.
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len) };
    }
}

/// Owner of one record's `Bytes` (keeps the mapping alive).
struct MappedSlice {
    map: Arc<Mapping>,
    pos: usize,
    len: usize,
}

impl AsRef<[u8]> for MappedSlice {
    fn as_ref(&self) -> &[u8] {
        assert!(self.pos + self.len <= self.map.len);
        // SAFETY: in bounds of the live, read-only mapping (checked above).
        unsafe { std::slice::from_raw_parts(self.map.ptr.as_ptr().add(self.pos), self.len) }
    }
}

/// Answers pulls: request body = record size (8 bytes BE); the body starts at a position
/// that walks through the file, so the whole file is read over the run.
struct PullHandler {
    file: SharedFile,
    map: Arc<Mapping>,
    file_bytes: usize,
    records: usize,
    range_records: usize,
    next: AtomicU64,
}

impl PullHandler {
    fn position(&self, body_bytes: usize, record_bytes: usize) -> usize {
        let n = self.next.fetch_add(1, Ordering::Relaxed) as usize;
        let slots = (self.file_bytes - body_bytes) / record_bytes;
        (n * self.records % slots) * record_bytes
    }
}

impl RequestHandler for PullHandler {
    fn handle(&self, request: RemotingCommand, _ctx: &RequestContext) -> Reply {
        let record_bytes = request
            .body
            .get(..8)
            .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")) as usize)
            .unwrap_or(1024);
        let body_bytes = record_bytes * self.records;
        let pos = self.position(body_bytes, record_bytes);
        let head = request.response_to(0, None);
        let chunks: Vec<BodyChunk> = if request.code == PULL_SPLICE {
            let range_bytes = self.range_records * record_bytes;
            (0..body_bytes.div_ceil(range_bytes))
                .map(|i| {
                    let at = i * range_bytes;
                    let len = range_bytes.min(body_bytes - at);
                    FileRange::new(self.file.clone(), (pos + at) as u64, len)
                        .expect("range inside the file")
                        .into()
                })
                .collect()
        } else {
            (0..self.records)
                .map(|i| {
                    Bytes::from_owner(MappedSlice {
                        map: self.map.clone(),
                        pos: pos + i * record_bytes,
                        len: record_bytes,
                    })
                    .into()
                })
                .collect()
        };
        Reply::Now(Response::with_extra_body(head, chunks))
    }
}

/// utime + stime (clock ticks) of this whole process, exited threads included.
fn process_cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    stat_ticks(&stat)
}

/// utime + stime of a `stat` line (fields 14 and 15, after the ")" closing comm).
fn stat_ticks(stat: &str) -> u64 {
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    field(11) + field(12)
}

/// Summed CPU ticks of the live threads whose name starts with `prefix`.
fn threads_cpu_ticks(prefix: &str) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm"))
                .is_ok_and(|c| c.trim_end().starts_with(prefix))
        })
        .map(|e| stat_ticks(&std::fs::read_to_string(e.path().join("stat")).unwrap_or_default()))
        .sum()
}

fn ticks_to_secs(ticks: u64) -> f64 {
    // SAFETY: sysconf has no pointer arguments.
    ticks as f64 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// One consumer connection: pull, read the whole answer, repeat until `stop`, adding the
/// body bytes of every answer to `received`. The first answer's body is checked against
/// the file.
fn run_client(
    addr: SocketAddr,
    code: i32,
    record_bytes: usize,
    body_bytes: usize,
    data: Arc<Vec<u8>>,
    received: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut request = RemotingCommand::request(code, 0)
        .with_body(Bytes::copy_from_slice(&(record_bytes as u64).to_be_bytes()));
    request.serialize_type = SerializeType::RocketMq;
    let mut out = BytesMut::new();
    let mut frame = Vec::new();
    let mut checked = false;
    let mut opaque = 0;
    while !stop.load(Ordering::Relaxed) {
        opaque += 1;
        request.opaque = opaque;
        out.clear();
        request.encode(&mut out);
        s.write_all(&out).expect("send pull");
        let mut len = [0u8; 4];
        s.read_exact(&mut len).expect("answer length");
        let len = u32::from_be_bytes(len) as usize;
        frame.resize(len, 0);
        s.read_exact(&mut frame).expect("answer");
        assert!(
            len >= body_bytes,
            "answer of {len} bytes, body {body_bytes}"
        );
        if !checked {
            // The body ends the frame; it must be `body_bytes` of the file at a record slot.
            let body = &frame[len - body_bytes..];
            let found = (0..=data.len() - body_bytes)
                .step_by(record_bytes)
                .any(|p| &data[p..p + body_bytes] == body);
            assert!(found, "the answer's body is not a run of the file");
            checked = true;
        }
        received.fetch_add(body_bytes as u64, Ordering::Relaxed);
    }
}

struct Outcome {
    mb_per_sec: f64,
    pulls_per_sec: f64,
    server_cpu_secs: f64,
}

fn measure(
    addr: SocketAddr,
    args: &Args,
    code: i32,
    record_bytes: usize,
    data: &Arc<Vec<u8>>,
) -> Outcome {
    let body_bytes = record_bytes * args.records;
    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..args.conns)
        .map(|i| {
            let (data, received, stop) = (data.clone(), received.clone(), stop.clone());
            std::thread::Builder::new()
                .name(format!("client-{i}"))
                .spawn(move || {
                    run_client(addr, code, record_bytes, body_bytes, data, received, stop)
                })
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_secs(args.warmup_secs));
    let snapshot = || {
        (
            process_cpu_ticks(),
            threads_cpu_ticks("client-"),
            received.load(Ordering::Relaxed),
            Instant::now(),
        )
    };
    let (total0, clients0, bytes0, t0) = snapshot();
    std::thread::sleep(Duration::from_secs(args.secs));
    let (total1, clients1, bytes1, t1) = snapshot();
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().expect("client");
    }
    let window = (t1 - t0).as_secs_f64();
    let bytes = (bytes1 - bytes0) as f64;
    // Server = the whole process minus the client threads (the main thread sleeps).
    let server_ticks = (total1 - total0).saturating_sub(clients1.saturating_sub(clients0));
    Outcome {
        mb_per_sec: bytes / 1e6 / window,
        pulls_per_sec: bytes / body_bytes as f64 / window,
        server_cpu_secs: ticks_to_secs(server_ticks),
    }
}

fn main() {
    let args = parse_args();
    let path = std::env::temp_dir().join(format!("ringmq-pull-bench-{}", std::process::id()));
    let data: Vec<u8> = (0..args.file_bytes)
        .map(|i| (i as u64).wrapping_mul(0x9E37_79B9) as u8 ^ (i >> 13) as u8)
        .collect();
    std::fs::write(&path, &data).expect("write the data file");
    let file = std::fs::File::open(&path).expect("open the data file");
    let map = Arc::new(Mapping::new(&file, args.file_bytes));
    // The descriptor and the mapping keep it; nothing is left behind if the run fails.
    std::fs::remove_file(&path).expect("unlink the data file");
    let file: SharedFile = Arc::new(file);
    let data = Arc::new(data);

    let mut cfg = ServerConfig::new("127.0.0.1:0".parse().unwrap(), "pull");
    cfg.network_cores = args.network_cores.clone();
    let handler = Arc::new(PullHandler {
        file,
        map,
        file_bytes: args.file_bytes,
        records: args.records,
        range_records: args.range_records,
        next: AtomicU64::new(0),
    });
    let server = Server::start_with(cfg, ServerTuning::default(), handler).expect("server");
    let addr = server.local_addr();
    println!(
        "pull_bench: {} conns, 1 pull in flight each, {} records per pull ({} per file range), \
         {} s per cell (+{} s warm-up), {} rounds (ABBA), network cores {:?}, {} MiB file in \
         the page cache",
        args.conns,
        args.records,
        args.range_records,
        args.secs,
        args.warmup_secs,
        args.rounds,
        args.network_cores,
        args.file_bytes / (1024 * 1024)
    );
    println!(
        "{:<7} {:>8} {:>9} {:>10} {:>10} {:>12} {:>14}",
        "mode", "record", "body", "MB/s", "pulls/s", "server_cpu_s", "cpu_us_per_MB"
    );
    for &record_bytes in &args.record_sizes {
        let mut sums = [(0.0f64, 0.0f64, 0.0f64); 2];
        for round in 0..args.rounds {
            let order = if round % 2 == 0 {
                [PULL_MMAP, PULL_SPLICE]
            } else {
                [PULL_SPLICE, PULL_MMAP]
            };
            for code in order {
                let o = measure(addr, &args, code, record_bytes, &data);
                let name = if code == PULL_SPLICE {
                    "splice"
                } else {
                    "mmap"
                };
                let cpu_us_per_mb = o.server_cpu_secs * 1e6 / (o.mb_per_sec * args.secs as f64);
                println!(
                    "{name:<7} {record_bytes:>8} {:>9} {:>10.0} {:>10.0} {:>12.2} {:>14.1}",
                    record_bytes * args.records,
                    o.mb_per_sec,
                    o.pulls_per_sec,
                    o.server_cpu_secs,
                    cpu_us_per_mb
                );
                let slot = &mut sums[usize::from(code == PULL_SPLICE)];
                slot.0 += o.mb_per_sec;
                slot.1 += o.server_cpu_secs;
                slot.2 += o.mb_per_sec * args.secs as f64;
            }
        }
        let per = |s: (f64, f64, f64)| (s.0 / args.rounds as f64, s.1 * 1e6 / s.2);
        let (mmap_mbps, mmap_cpu) = per(sums[0]);
        let (splice_mbps, splice_cpu) = per(sums[1]);
        println!(
            "summary record={record_bytes} body={} range={}: mmap {mmap_mbps:.0} MB/s {mmap_cpu:.1} cpu_us/MB, \
             splice {splice_mbps:.0} MB/s {splice_cpu:.1} cpu_us/MB; splice/mmap throughput {:.2}, \
             cpu per MB {:.2}",
            record_bytes * args.records,
            record_bytes * args.range_records,
            splice_mbps / mmap_mbps,
            splice_cpu / mmap_cpu
        );
    }
    server.shutdown();
}
