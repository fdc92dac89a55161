//! Echo micro-benchmark: request/response throughput and latency of ringmq's Remoting
//! server (pinned compio cores on io_uring) against a plain thread-per-connection blocking
//! server, under the same client load (N connections x pipeline depth), in one run.
//!
//! The client is N connections driven by a few compio (io_uring) client threads, so client
//! overhead stays small and identical for both servers. Both servers decode frames with
//! the same `FrameDecoder`, answer every request with an echo of its body and batch their
//! writes per read, so the difference is the runtime.
//! Also reported: server CPU seconds (from /proc, per thread), messages per server
//! CPU-second and server CPU microseconds per message, which is the per-core efficiency
//! that matters on a loaded broker. `--recv` runs ringmq once per receive mode (multishot
//! into a provided buffer ring, or single reads) in every round, so the modes are compared
//! under the same load drift; `--listen` picks the accept mode.
//!
//! Run (release): `cargo run --release -p ringmq-runtime --example echo_bench -- --help`

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use hdrhistogram::Histogram;
use ringmq_remoting::{FrameDecoder, RemotingCommand, SerializeType};
use ringmq_runtime::{
    cores, ring, spawn_pinned, CoreMap, Full, ListenMode, RecvMode, Reply, RequestContext,
    RequestHandler, Responder, RingReceiver, RingSender, Server, ServerConfig, ServerTuning,
};

#[global_allocator]
static GLOBAL: ringmq_runtime::MiMalloc = ringmq_runtime::MiMalloc;

const ECHO_CODE: i32 = 1;
/// Stage ring capacity for `--stage-core`.
const STAGE_RING_SLOTS: usize = 64 * 1024;
/// Client read chunk; also the baseline server's read chunk (same as ringmq's default).
const READ_CHUNK_BYTES: usize = 64 * 1024;

struct Args {
    conns: usize,
    depth: usize,
    secs: u64,
    warmup_secs: u64,
    body_bytes: usize,
    json: bool,
    network_cores: Vec<usize>,
    only: Option<String>,
    rounds: usize,
    defer_taskrun: bool,
    client_threads: usize,
    client_cores: Option<Vec<usize>>,
    stage_core: Option<usize>,
    recv_modes: Vec<RecvMode>,
    listen_mode: ListenMode,
    recv_buffer_count: u16,
    recv_buffer_bytes: usize,
}

fn usage() -> ! {
    eprintln!(
        "echo_bench [--conns N=16] [--depth D=32] [--secs S=5] [--warmup S=1] [--body BYTES=64] \
         [--json] [--cores LIST (default: CoreMap::detect().network)] [--only ringmq|baseline] \
         [--rounds R=2 (alternating order, to cancel drift from other load)] [--defer-taskrun] \
         [--client-threads T=2 (compio client runtimes sharing the connections)] \
         [--client-cores LIST (restrict client threads to these cores; default: anywhere)] \
         [--stage-core C (ringmq answers from a stage thread on core C via ring + Responder)] \
         [--recv multishot,single (ringmq receive modes, each run every round; default: the server default)] \
         [--listen acceptor|reuseport (default acceptor)] \
         [--ring COUNTxBYTES (multishot buffer ring per core; default: the server default)]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut a = Args {
        conns: 16,
        depth: 32,
        secs: 5,
        warmup_secs: 1,
        body_bytes: 64,
        json: false,
        network_cores: CoreMap::detect().network,
        only: None,
        rounds: 2,
        defer_taskrun: false,
        client_threads: 2,
        client_cores: None,
        stage_core: None,
        recv_modes: vec![ServerTuning::default().recv_mode],
        listen_mode: ListenMode::Acceptor,
        recv_buffer_count: ServerTuning::default().recv_buffer_count,
        recv_buffer_bytes: ServerTuning::default().recv_buffer_bytes,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--conns" => a.conns = value().parse().unwrap_or_else(|_| usage()),
            "--depth" => a.depth = value().parse().unwrap_or_else(|_| usage()),
            "--secs" => a.secs = value().parse().unwrap_or_else(|_| usage()),
            "--warmup" => a.warmup_secs = value().parse().unwrap_or_else(|_| usage()),
            "--body" => a.body_bytes = value().parse().unwrap_or_else(|_| usage()),
            "--json" => a.json = true,
            "--defer-taskrun" => a.defer_taskrun = true,
            "--client-threads" => a.client_threads = value().parse().unwrap_or_else(|_| usage()),
            "--stage-core" => a.stage_core = Some(value().parse().unwrap_or_else(|_| usage())),
            "--client-cores" => {
                a.client_cores = Some(cores::parse_core_list(&value()).unwrap_or_else(|_| usage()))
            }
            "--cores" => {
                a.network_cores = cores::parse_core_list(&value()).unwrap_or_else(|_| usage())
            }
            "--only" => a.only = Some(value()),
            "--recv" => {
                a.recv_modes = value()
                    .split(',')
                    .map(|m| m.parse().unwrap_or_else(|_| usage()))
                    .collect()
            }
            "--listen" => a.listen_mode = value().parse().unwrap_or_else(|_| usage()),
            "--ring" => {
                let v = value();
                let (count, bytes) = v.split_once('x').unwrap_or_else(|| usage());
                a.recv_buffer_count = count.parse().unwrap_or_else(|_| usage());
                a.recv_buffer_bytes = bytes.parse().unwrap_or_else(|_| usage());
            }
            "--rounds" => a.rounds = value().parse().unwrap_or_else(|_| usage()),
            _ => usage(),
        }
    }
    if a.conns == 0
        || a.depth == 0
        || a.secs == 0
        || a.rounds == 0
        || a.client_threads == 0
        || a.recv_modes.is_empty()
    {
        usage();
    }
    a
}

/// Restricts the calling thread to `cores` (any of them; the kernel balances within).
fn restrict_to(cores: &[usize]) {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes within it for ids < CPU_SETSIZE,
    // and sched_setaffinity reads exactly size_of::<cpu_set_t>() bytes from it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cores.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            eprintln!(
                "warning: cannot restrict thread to cores {cores:?}: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

fn echo(request: &RemotingCommand) -> RemotingCommand {
    request.response_to(0, None).with_body(request.body.clone())
}

/// Answers inline, or (with `--stage-core`) hands every request to a stage thread through
/// a bounded ring and answers from there with the `Responder`: the broker's send path
/// (network core -> append stage -> completion back to the network core).
struct EchoHandler {
    stage: Option<RingSender<(Responder, RemotingCommand)>>,
}

impl RequestHandler for EchoHandler {
    fn handle(&self, request: RemotingCommand, ctx: &RequestContext) -> Reply {
        let Some(stage) = &self.stage else {
            return Reply::Now(echo(&request).into());
        };
        let response = echo(&request);
        match stage.try_send((ctx.responder(), response)) {
            Ok(()) => Reply::Later,
            // A full ring hands the pair back; answering through the responder keeps the
            // one-answer rule.
            Err(Full((responder, _))) => {
                responder
                    .respond(request.response_to(2, Some("[OVERLOAD] stage ring full".into())));
                Reply::Later
            }
        }
    }
}

/// The stage thread: drain the ring in batches, answer each request.
fn run_stage(rx: RingReceiver<(Responder, RemotingCommand)>, stop: Arc<AtomicBool>) {
    const STAGE_BATCH: usize = 1024;
    let mut batch = Vec::with_capacity(STAGE_BATCH);
    while !stop.load(Ordering::Relaxed) || !rx.is_empty() {
        if rx.drain(&mut batch, STAGE_BATCH) == 0 {
            rx.wait_timeout(Duration::from_millis(10));
            continue;
        }
        for (responder, response) in batch.drain(..) {
            responder.respond(response);
        }
    }
}

/// The baseline: one blocking thread per connection, read -> decode all -> write all.
fn start_baseline(server_cores: Vec<usize>) -> (SocketAddr, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind baseline");
    let addr = listener.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    std::thread::Builder::new()
        .name("base-accept".into())
        .spawn(move || {
            for (i, stream) in listener.incoming().enumerate() {
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_nodelay(true);
                let server_cores = server_cores.clone();
                let _ = std::thread::Builder::new()
                    .name(format!("base-conn-{i}"))
                    .spawn(move || {
                        // Same cores as ringmq's network cores: a per-core comparison.
                        restrict_to(&server_cores);
                        let decoder = FrameDecoder::default();
                        let mut rbuf = BytesMut::with_capacity(READ_CHUNK_BYTES);
                        let mut wbuf = BytesMut::with_capacity(READ_CHUNK_BYTES);
                        let mut chunk = vec![0u8; READ_CHUNK_BYTES];
                        loop {
                            let n = match stream.read(&mut chunk) {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            rbuf.extend_from_slice(&chunk[..n]);
                            while let Ok(Some(req)) = decoder.decode(&mut rbuf) {
                                echo(&req).encode(&mut wbuf);
                            }
                            if stream.write_all(&wbuf).is_err() {
                                return;
                            }
                            wbuf.clear();
                        }
                    });
            }
        })
        .expect("spawn baseline acceptor");
    (addr, stop)
}

struct ClientResult {
    count: u64,
    hist: Histogram<u64>,
}

/// One pipelined connection (a compio task): keeps `depth` requests outstanding until
/// `stop`, then collects the answers still in flight.
async fn run_conn(
    addr: SocketAddr,
    depth: usize,
    body: Bytes,
    st: SerializeType,
    measure_from: Instant,
    stop: Arc<AtomicBool>,
) -> ClientResult {
    use compio::buf::{IntoInner, IoBufMut};
    use compio::io::{AsyncRead, AsyncWriteExt};
    let mut stream = compio::net::TcpStream::connect(addr)
        .await
        .expect("client connect");
    stream.set_nodelay(true).unwrap();
    let decoder = FrameDecoder::default();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    let mut count = 0u64;
    // Echo answers come back in order, so slot `opaque % depth` is free when reused.
    let mut sent_at = vec![Instant::now(); depth];
    let mut next_opaque = 0i32;
    let mut out = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut rbuf = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let send = |out: &mut BytesMut, sent_at: &mut Vec<Instant>, next: &mut i32| {
        let mut req = RemotingCommand::request(ECHO_CODE, *next).with_body(body.clone());
        req.serialize_type = st;
        req.encode(out);
        sent_at[*next as usize % depth] = Instant::now();
        *next = next.wrapping_add(1) & i32::MAX;
    };
    for _ in 0..depth {
        send(&mut out, &mut sent_at, &mut next_opaque);
    }
    let mut outstanding = depth;
    loop {
        if !out.is_empty() {
            let compio::BufResult(res, back) = stream.write_all(out).await;
            res.expect("client write");
            out = back;
            out.clear();
        }
        if outstanding == 0 {
            break;
        }
        rbuf.reserve(READ_CHUNK_BYTES);
        let compio::BufResult(res, back) = stream.read(rbuf.uninit()).await;
        rbuf = back.into_inner();
        match res {
            Ok(0) => panic!("server closed the connection"),
            Ok(_) => {}
            Err(e) => panic!("client read failed: {e}"),
        }
        let stopping = stop.load(Ordering::Relaxed);
        while let Some(resp) = decoder.decode(&mut rbuf).expect("bad response frame") {
            let now = Instant::now();
            outstanding -= 1;
            if now >= measure_from && !stopping {
                let latency = now.duration_since(sent_at[resp.opaque as usize % depth]);
                hist.saturating_record(latency.as_micros() as u64);
                count += 1;
            }
            if !stopping {
                send(&mut out, &mut sent_at, &mut next_opaque);
                outstanding += 1;
            }
        }
    }
    ClientResult { count, hist }
}

/// A client thread: its own compio runtime driving `conns` connections.
fn run_client_thread(
    conns: usize,
    addr: SocketAddr,
    depth: usize,
    body: Bytes,
    st: SerializeType,
    measure_from: Instant,
    stop: Arc<AtomicBool>,
) -> ClientResult {
    let rt = compio::runtime::Runtime::new().expect("client io_uring runtime");
    rt.block_on(async move {
        let tasks: Vec<_> = (0..conns)
            .map(|_| {
                compio::runtime::spawn(run_conn(
                    addr,
                    depth,
                    body.clone(),
                    st,
                    measure_from,
                    stop.clone(),
                ))
            })
            .collect();
        let mut total = ClientResult {
            count: 0,
            hist: Histogram::new_with_bounds(1, 60_000_000, 3).unwrap(),
        };
        for t in tasks {
            let r = t.await.expect("client connection task");
            total.count += r.count;
            total.hist.add(&r.hist).unwrap();
        }
        total
    })
}

/// utime + stime (clock ticks) of each live thread of this process whose name starts with
/// `prefix`, by thread id.
fn thread_cpu_ticks(prefix: &str) -> std::collections::HashMap<u64, u64> {
    let mut ticks = std::collections::HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return ticks;
    };
    for entry in dir.flatten() {
        let Some(tid) = entry
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<u64>().ok())
        else {
            continue;
        };
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if !comm.trim_end().starts_with(prefix) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // After the ")" closing comm come fields 3.. (state first); utime and stime are
        // fields 14 and 15.
        if let Some((_, rest)) = stat.rsplit_once(')') {
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: u64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
            let stime: u64 = fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
            ticks.insert(tid, utime + stime);
        }
    }
    ticks
}

/// CPU seconds used between two snapshots by threads alive in both (threads of an earlier
/// round that exit meanwhile must not count negative).
fn cpu_secs_between(
    before: &std::collections::HashMap<u64, u64>,
    after: &std::collections::HashMap<u64, u64>,
) -> f64 {
    // SAFETY: sysconf has no pointer arguments.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let ticks: u64 = after
        .iter()
        .filter_map(|(tid, t)| before.get(tid).map(|b| t.saturating_sub(*b)))
        .sum();
    ticks as f64 / hz
}

/// (stalls, loop iterations, eventfd wake-ups) of the ringmq cores.
type LoopCounters = (u64, u64, u64);

struct Outcome {
    name: String,
    msgs_per_sec: f64,
    p50_us: u64,
    p99_us: u64,
    p999_us: u64,
    server_cpu_secs: f64,
}

fn load(name: String, addr: SocketAddr, args: &Args, cpu_prefix: &str) -> Outcome {
    let st = if args.json {
        SerializeType::Json
    } else {
        SerializeType::RocketMq
    };
    let body = Bytes::from(vec![b'e'; args.body_bytes]);
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let measure_from = start + Duration::from_secs(args.warmup_secs);
    let threads = args.client_threads.min(args.conns);
    let clients: Vec<_> = (0..threads)
        .map(|i| {
            let (body, stop) = (body.clone(), stop.clone());
            let depth = args.depth;
            // Spread connections evenly over the client threads.
            let conns = args.conns / threads + usize::from(i < args.conns % threads);
            let client_cores = args.client_cores.clone();
            std::thread::Builder::new()
                .name(format!("client-{i}"))
                .spawn(move || {
                    if let Some(c) = &client_cores {
                        restrict_to(c);
                    }
                    run_client_thread(conns, addr, depth, body, st, measure_from, stop)
                })
                .unwrap()
        })
        .collect();
    std::thread::sleep(measure_from.saturating_duration_since(Instant::now()));
    let cpu_before = thread_cpu_ticks(cpu_prefix);
    let measured_start = Instant::now();
    std::thread::sleep(Duration::from_secs(args.secs));
    stop.store(true, Ordering::Relaxed);
    let measured = measured_start.elapsed().as_secs_f64();
    let cpu = cpu_secs_between(&cpu_before, &thread_cpu_ticks(cpu_prefix));
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    let mut count = 0;
    for c in clients {
        let r = c.join().expect("client thread");
        count += r.count;
        hist.add(&r.hist).unwrap();
    }
    Outcome {
        name,
        msgs_per_sec: count as f64 / measured,
        p50_us: hist.value_at_quantile(0.50),
        p99_us: hist.value_at_quantile(0.99),
        p999_us: hist.value_at_quantile(0.999),
        server_cpu_secs: cpu,
    }
}

fn print_row(o: &Outcome, secs: u64) {
    let msgs = o.msgs_per_sec * secs as f64;
    println!(
        "{:<18} {:>12.0} {:>8} {:>8} {:>8} {:>12.2} {:>14.0} {:>12.2}",
        o.name,
        o.msgs_per_sec,
        o.p50_us,
        o.p99_us,
        o.p999_us,
        o.server_cpu_secs,
        msgs / o.server_cpu_secs,
        o.server_cpu_secs * 1e6 / msgs
    );
}

fn bench_ringmq(args: &Args, recv_mode: RecvMode) -> (Outcome, Option<LoopCounters>) {
    let mut cfg = ServerConfig::new("127.0.0.1:0".parse().unwrap(), "echo");
    cfg.network_cores = args.network_cores.clone();
    let tuning = ServerTuning {
        io_uring_defer_taskrun: args.defer_taskrun,
        recv_mode,
        listen_mode: args.listen_mode,
        recv_buffer_count: args.recv_buffer_count,
        recv_buffer_bytes: args.recv_buffer_bytes,
        ..ServerTuning::default()
    };
    let stage_stop = Arc::new(AtomicBool::new(false));
    let (stage, stage_thread) = match args.stage_core {
        Some(core) => {
            // Bounded well above conns x depth, so the ring never refuses in this bench.
            let (tx, rx) = ring(STAGE_RING_SLOTS).expect("stage ring");
            let stop = stage_stop.clone();
            let t = spawn_pinned("echo-stage", core, move || run_stage(rx, stop)).unwrap();
            (Some(tx), Some(t))
        }
        None => (None, None),
    };
    let server = Server::start_with(cfg, tuning, Arc::new(EchoHandler { stage }))
        .expect("start ringmq server");
    let o = load(
        format!("ringmq/{recv_mode}"),
        server.local_addr(),
        args,
        "echo-net-",
    );
    let stats = server.stats();
    if recv_mode == RecvMode::Multishot {
        let exhausted: u64 = stats.iter().map(|s| s.recv_buffers_exhausted).sum();
        let arms: u64 = stats.iter().map(|s| s.recv_multishot_arms).sum();
        if stats.iter().any(|s| !s.recv_multishot) {
            eprintln!("warning: a core fell back to single reads (see its log line)");
        }
        eprintln!(
            "ringmq/{recv_mode}: multishot arms {arms}, buffer ring exhausted {exhausted} times"
        );
    }
    let stalls: u64 = stats.iter().map(|s| s.loop_stats.stalls).sum();
    let iterations: u64 = stats.iter().map(|s| s.loop_stats.iterations).sum();
    let wakeups: u64 = stats.iter().map(|s| s.wakeups).sum();
    server.shutdown();
    stage_stop.store(true, Ordering::Relaxed);
    if let Some(t) = stage_thread {
        t.join().expect("stage thread");
    }
    (o, Some((stalls, iterations, wakeups)))
}

fn bench_baseline(args: &Args) -> (Outcome, Option<LoopCounters>) {
    let (addr, stop) = start_baseline(args.network_cores.clone());
    let o = load("baseline".to_string(), addr, args, "base-");
    stop.store(true, Ordering::Relaxed);
    let _ = TcpStream::connect(addr); // unblock the acceptor so it sees `stop`
    (o, None)
}

fn main() {
    let args = parse_args();
    println!(
        "echo bench: conns={} depth={} body={}B header={} warmup={}s measure={}s ringmq network cores={} listen={} ring={}x{}B (machine: {} cores)",
        args.conns,
        args.depth,
        args.body_bytes,
        if args.json { "JSON" } else { "ROCKETMQ" },
        args.warmup_secs,
        args.secs,
        cores::format_core_list(&args.network_cores),
        args.listen_mode,
        args.recv_buffer_count,
        args.recv_buffer_bytes,
        cores::available_cores()
    );
    if let Some(c) = args.stage_core {
        println!("ringmq answers through a stage thread on core {c} (ring + Responder); the baseline answers inline");
    }
    let run_ringmq = args.only.as_deref() != Some("baseline");
    let run_baseline = args.only.as_deref() != Some("ringmq");

    let mut results: Vec<(Outcome, Option<LoopCounters>)> = Vec::new();
    for round in 0..args.rounds {
        // Alternate which server goes first, so slow drift in background load does not
        // always favour the same one.
        let order: [bool; 2] = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for ringmq_turn in order {
            if ringmq_turn && run_ringmq {
                // Alternate the receive modes' order too.
                let mut modes = args.recv_modes.clone();
                if round % 2 == 1 {
                    modes.reverse();
                }
                for mode in modes {
                    results.push(bench_ringmq(&args, mode));
                }
            } else if !ringmq_turn && run_baseline {
                results.push(bench_baseline(&args));
            }
        }
    }

    println!(
        "{:<18} {:>12} {:>8} {:>8} {:>8} {:>12} {:>14} {:>12}",
        "server",
        "msgs/s",
        "p50_us",
        "p99_us",
        "p999_us",
        "server_cpu_s",
        "msgs/cpu_s",
        "cpu_us/msg"
    );
    for (o, _) in &results {
        print_row(o, args.secs);
    }
    for (o, extra) in &results {
        if let Some((stalls, iterations, wakeups)) = extra {
            println!(
                "{}: {:.0} msgs/s per network core; loop iterations {iterations}, stalls (>500us busy) {stalls}, eventfd wake-ups {wakeups}",
                o.name,
                o.msgs_per_sec / args.network_cores.len() as f64
            );
        }
    }
    let mean = |name: &str| -> Option<Outcome> {
        let rows: Vec<&Outcome> = results
            .iter()
            .map(|(o, _)| o)
            .filter(|o| o.name == name)
            .collect();
        if rows.is_empty() {
            return None;
        }
        let n = rows.len() as f64;
        let avg = |f: &dyn Fn(&Outcome) -> f64| rows.iter().map(|o| f(o)).sum::<f64>() / n;
        Some(Outcome {
            name: rows[0].name.clone(),
            msgs_per_sec: avg(&|o| o.msgs_per_sec),
            p50_us: avg(&|o| o.p50_us as f64) as u64,
            p99_us: avg(&|o| o.p99_us as f64) as u64,
            p999_us: avg(&|o| o.p999_us as f64) as u64,
            server_cpu_secs: avg(&|o| o.server_cpu_secs),
        })
    };
    let eff = |o: &Outcome| o.msgs_per_sec / o.server_cpu_secs;
    let ratio = |label: &str, r: &Outcome, b: &Outcome| {
        println!(
            "ratio {label} (mean of {} rounds): throughput {:.2}x, p50 {:.2}x, p99 {:.2}x, msgs per server cpu-second {:.2}x",
            args.rounds,
            r.msgs_per_sec / b.msgs_per_sec,
            r.p50_us as f64 / b.p50_us.max(1) as f64,
            r.p99_us as f64 / b.p99_us.max(1) as f64,
            eff(r) / eff(b)
        );
    };
    let baseline = mean("baseline");
    for mode in &args.recv_modes {
        if let (Some(r), Some(b)) = (mean(&format!("ringmq/{mode}")), &baseline) {
            ratio(&format!("ringmq/{mode} vs baseline"), &r, b);
        }
    }
    if let (Some(m), Some(s)) = (mean("ringmq/multishot"), mean("ringmq/single")) {
        ratio("multishot vs single", &m, &s);
    }
}
