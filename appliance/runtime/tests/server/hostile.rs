//! Hostile clients against the server's memory and descriptor bounds: prefixes announcing
//! frames that never come, clients that never read, and connections past the descriptor
//! limit. Memory and descriptor limits are per process, so the scenarios that measure RSS or
//! lower `RLIMIT_NOFILE` run in a child process (this test binary, re-run with one
//! `#[ignore]`d child test selected and `RINGMQ_RUNTIME_CHILD` set); the parent only checks
//! what the child reports. Every wait is bounded.
//!
//! The test binary allocates with mimalloc, as the ringmq binary does, so RSS shows what
//! that allocator keeps.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ringmq_remoting::{RemotingCommand, SerializeType};
use ringmq_runtime::{FdReserve, Server, ServerTuning};

use tracing_subscriber::Layer as _;

use super::{config, request, Client, TestHandler, BIG_NOW, ECHO_NOW};

#[global_allocator]
static GLOBAL: ringmq_runtime::MiMalloc = ringmq_runtime::MiMalloc;

/// Which child scenario this process runs (unset in the parent).
const CHILD_ENV: &str = "RINGMQ_RUNTIME_CHILD";
/// Prefix of the lines a child reports on stdout (libtest prints its own lines too).
const REPORT: &str = "CHILD-REPORT ";
/// A child that outlives this is killed by its own watchdog.
const CHILD_LIMIT: Duration = Duration::from_secs(60);

const MIB: usize = 1024 * 1024;

fn is_child(role: &str) -> bool {
    std::env::var(CHILD_ENV).is_ok_and(|r| r == role)
}

/// Runs the `#[ignore]`d test `hostile::<test_name>` of this binary in a child process.
/// `piped` keeps the child's stdout for the parent to read; otherwise it is shown.
fn spawn_child(test_name: &str, env: &[(&str, String)], piped: bool) -> Child {
    let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
    cmd.args([
        "--exact",
        &format!("hostile::{test_name}"),
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, test_name)
    .stdin(Stdio::piped())
    .stdout(if piped {
        Stdio::piped()
    } else {
        Stdio::inherit()
    })
    .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn child test process")
}

/// Kills the child's process (by its pid) if the test fails before it exits.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the child half `test_name` and fails unless it succeeds.
fn run_child_scenario(test_name: &str) {
    let mut child = ChildGuard(spawn_child(test_name, &[], false));
    let status = child.0.wait().expect("wait for child");
    assert!(
        status.success(),
        "child scenario {test_name} failed: {status}"
    );
}

/// In the child process of `role`: starts its watchdog and returns true; in any other
/// process (the ignored test run directly) returns false.
fn enter_child(role: &str) -> bool {
    if !is_child(role) {
        return false;
    }
    watchdog();
    true
}

fn watchdog() {
    std::thread::spawn(|| {
        std::thread::sleep(CHILD_LIMIT);
        eprintln!("child test process ran past {CHILD_LIMIT:?}; exiting");
        std::process::exit(3);
    });
}

/// Resident set size of this process.
fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .expect("statm resident field");
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    pages * page
}

fn set_nofile_soft(limit: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct we pass; results checked.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = limit.min(lim.rlim_max);
        assert_eq!(
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim),
            0,
            "setrlimit(NOFILE, {limit}): {}",
            io::Error::last_os_error()
        );
    }
}

/// Polls `cond` every 10 ms until it holds or `within` passed; returns whether it held.
fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn sum(server: &Server, f: impl Fn(&ringmq_runtime::CoreStats) -> u64) -> u64 {
    server.stats().iter().map(f).sum()
}

/// The first 72 bytes of a JSON frame whose length word announces `frame_bytes` in all.
fn announcing_prefix(frame_bytes: usize) -> Vec<u8> {
    let mut p = Vec::with_capacity(72);
    p.extend_from_slice(&((frame_bytes - 4) as u32).to_be_bytes());
    p.extend_from_slice(&64u32.to_be_bytes()); // JSON header of 64 bytes
    p.extend_from_slice(&[b' '; 64]);
    p
}

// ---------------------------------------------------------------------------------------
// Item: an announced frame length must not reserve memory
// ---------------------------------------------------------------------------------------

/// 1,000 connections each send a 72-byte prefix announcing a 16 MiB frame and stop: the
/// server keeps every one open holding a few KiB each (RSS grows by less than 64 MiB, not
/// the 16 GiB announced), and RSS falls back once they close.
#[test]
fn announced_16mib_frames_on_1000_connections_hold_little_memory() {
    run_child_scenario("child_announced_frames");
}

#[test]
#[ignore = "run by announced_16mib_frames_on_1000_connections_hold_little_memory"]
fn child_announced_frames() {
    if !enter_child("child_announced_frames") {
        return;
    }
    const CONNS: usize = 1_000;
    set_nofile_soft(4 * CONNS as u64);
    let server = Server::start_with(
        config("announce"),
        ServerTuning::default(),
        TestHandler::new(100),
    )
    .expect("start");
    let addr = server.local_addr();
    let mut c = Client::connect(addr);
    c.call(&request(ECHO_NOW, 1, SerializeType::Json));
    drop(c);
    let before = rss_bytes();

    let prefix = announcing_prefix(ringmq_remoting::DEFAULT_MAX_FRAME_BYTES);
    let mut conns = Vec::with_capacity(CONNS);
    for _ in 0..CONNS {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
        s.write_all(&prefix).expect("write prefix");
        conns.push(s);
    }
    let all_read = wait_until(Duration::from_secs(10), || {
        let st = server.stats();
        st.iter().map(|s| s.connections).sum::<u64>() == CONNS as u64
            && st.iter().map(|s| s.partial_frame_bytes).sum::<u64>() >= (CONNS * 72) as u64
    });
    let held = sum(&server, |s| s.partial_frame_bytes);
    let grown = rss_bytes().saturating_sub(before);
    println!(
        "{REPORT}held={held} rss_growth={grown} closes={}",
        sum(&server, |s| s.partial_frame_closes)
    );
    assert!(all_read, "every prefix read: {:?}", server.stats());
    assert!(
        held <= (CONNS * 16 * 1024) as u64,
        "frame buffers hold {held} bytes for {CONNS} 72-byte prefixes"
    );
    assert_eq!(sum(&server, |s| s.partial_frame_closes), 0);
    assert!(
        grown < 64 * MIB,
        "RSS grew by {grown} bytes for {CONNS} 72-byte prefixes"
    );

    drop(conns);
    assert!(
        wait_until(Duration::from_secs(10), || sum(&server, |s| s.connections)
            == 0),
        "connections closed: {:?}",
        server.stats()
    );
    assert_eq!(sum(&server, |s| s.partial_frame_bytes), 0);
    let settled = wait_until(Duration::from_secs(5), || rss_bytes() < before + 32 * MIB);
    assert!(
        settled,
        "RSS stayed {} bytes above its start after the connections closed",
        rss_bytes().saturating_sub(before)
    );
    server.shutdown();
}

/// 32 connections each send a whole 4 MiB frame and stay open: once the frames are
/// handled, the server gives the memory back (each connection's buffer shrinks back to a
/// small one and the allocator returns the freed pages), so RSS falls back to within
/// 32 MiB of its start instead of keeping the 128 MiB peak.
#[test]
fn memory_of_large_frames_is_returned_after_the_burst() {
    run_child_scenario("child_large_frame_burst");
}

#[test]
#[ignore = "run by memory_of_large_frames_is_returned_after_the_burst"]
fn child_large_frame_burst() {
    if !enter_child("child_large_frame_burst") {
        return;
    }
    const CONNS: usize = 32;
    const FRAME_BODY_BYTES: usize = 4 * MIB;
    let server = Server::start_with(
        config("burst"),
        ServerTuning::default(),
        TestHandler::new(100),
    )
    .expect("start");
    let addr = server.local_addr();
    let mut clients: Vec<Client> = (0..CONNS).map(|_| Client::connect(addr)).collect();
    clients[0].call(&request(ECHO_NOW, 1, SerializeType::Json));
    let before = rss_bytes();

    let mut frame = BytesMut::new();
    let mut big =
        RemotingCommand::request(ECHO_NOW + 1_000, 7).with_body(vec![7u8; FRAME_BODY_BYTES]);
    big.serialize_type = SerializeType::RocketMq;
    big.encode(&mut frame);
    let frame = frame.freeze();
    // Every connection's frame is written before any answer is read, so the server holds
    // them all at once.
    std::thread::scope(|scope| {
        for c in clients.iter_mut() {
            let frame = frame.clone();
            scope.spawn(move || c.stream.write_all(&frame).expect("write frame"));
        }
    });
    for c in clients.iter_mut() {
        let r = c.recv().expect("recv").expect("answer");
        assert_eq!(
            r.code, 3,
            "unknown code is answered REQUEST_CODE_NOT_SUPPORTED"
        );
    }
    let peak = rss_bytes().saturating_sub(before);
    let settled = wait_until(Duration::from_secs(8), || rss_bytes() < before + 32 * MIB);
    println!(
        "{REPORT}peak_growth={peak} now_growth={}",
        rss_bytes().saturating_sub(before)
    );
    assert!(
        settled,
        "RSS stayed {} bytes above its start after {CONNS} frames of {FRAME_BODY_BYTES} bytes were handled",
        rss_bytes().saturating_sub(before)
    );
    // The connections are still usable.
    for (i, c) in clients.iter_mut().enumerate() {
        c.call(&request(ECHO_NOW, 100 + i as i32, SerializeType::Json));
    }
    drop(clients);
    server.shutdown();
}

/// With a small per-core bound on partial-frame bytes, clients that each send part of a
/// large frame and stall are closed (the largest holders first) so the core's total stays
/// near the bound, while a client sending whole small frames is still answered.
#[test]
fn partial_frames_over_the_core_bound_close_the_largest_holders() {
    super::init_tracing();
    const BOUND: usize = 2 * MIB;
    let mut cfg = config("partial-bound");
    cfg.network_cores = vec![0];
    let tuning = ServerTuning {
        max_partial_frame_bytes_per_core: BOUND,
        ..ServerTuning::default()
    };
    let server = Server::start_with(cfg, tuning, TestHandler::new(100)).expect("start");
    let addr = server.local_addr();
    let mut good = Client::connect(addr);
    good.call(&request(ECHO_NOW, 1, SerializeType::Json));

    let mut prefix = announcing_prefix(ringmq_remoting::DEFAULT_MAX_FRAME_BYTES);
    prefix.resize(512 * 1024, b' ');
    let mut stallers = Vec::new();
    for _ in 0..16 {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
        s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        // A closed connection may refuse part of the write: that is the point.
        let _ = s.write_all(&prefix);
        stallers.push(s);
    }
    let closed_some = wait_until(Duration::from_secs(10), || {
        sum(&server, |s| s.partial_frame_closes) > 0
            && sum(&server, |s| s.partial_frame_bytes) <= (BOUND + MIB) as u64
    });
    let stats = server.stats();
    assert!(closed_some, "partial-frame bound enforced: {stats:?}");
    assert!(
        stats[0].partial_frame_bytes <= (BOUND + MIB) as u64,
        "{stats:?}"
    );
    good.call(&request(ECHO_NOW, 2, SerializeType::Json));
    drop(stallers);
    server.shutdown();
}

// ---------------------------------------------------------------------------------------
// Item: clients that never read
// ---------------------------------------------------------------------------------------

/// 100 clients flood requests for 64 KiB answers and never read: each core's queued
/// output stays under its bound (plus one connection's batch), the hogs are closed, and
/// a client that reads keeps getting answers within a few seconds.
#[test]
fn never_reading_clients_stay_under_the_core_output_bound() {
    super::init_tracing();
    const HOGS: usize = 100;
    const REQUESTS_PER_HOG: usize = 200;
    const BOUND: usize = 16 * MIB;
    let tuning = ServerTuning {
        max_output_bytes_per_core: BOUND,
        ..ServerTuning::default()
    };
    let per_conn = tuning.max_output_bytes_per_connection;
    let server = Server::start_with(config("hogs"), tuning, TestHandler::new(100)).expect("start");
    let addr = server.local_addr();
    let mut good = Client::connect(addr);
    good.call(&request(ECHO_NOW, 1, SerializeType::Json));

    let mut wire = BytesMut::new();
    for i in 0..REQUESTS_PER_HOG {
        request(BIG_NOW, i as i32, SerializeType::RocketMq).encode(&mut wire);
    }
    let wire = wire.freeze();
    let mut hogs = Vec::with_capacity(HOGS);
    for _ in 0..HOGS {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        // A small receive window: the server's output queues in the server, not in the
        // kernel buffers of this test.
        socket.set_recv_buffer_size(64 * 1024).expect("SO_RCVBUF");
        socket
            .connect_timeout(&addr.into(), Duration::from_secs(5))
            .expect("connect");
        let mut s: TcpStream = socket.into();
        s.set_nonblocking(true).unwrap();
        let mut sent = 0;
        // Bounded: at most the whole request batch, and stops when the socket is full.
        while sent < wire.len() {
            match s.write(&wire[sent..]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => break,
            }
        }
        hogs.push(s);
    }

    let mut slowest = Duration::ZERO;
    for i in 0..20 {
        let started = Instant::now();
        good.call(&request(ECHO_NOW, 10 + i, SerializeType::Json));
        slowest = slowest.max(started.elapsed());
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = server.stats();
    for s in &stats {
        assert!(
            s.output_bytes_peak <= (BOUND + per_conn + MIB) as u64,
            "core {} held up to {} output bytes (bound {BOUND}): {stats:?}",
            s.index,
            s.output_bytes_peak
        );
    }
    assert!(
        stats.iter().map(|s| s.output_closes).sum::<u64>() > 0,
        "hogs closed: {stats:?}"
    );
    assert!(
        slowest < Duration::from_secs(3),
        "a reading client waited {slowest:?} for an answer"
    );
    drop(hogs);
    server.shutdown();
}

// ---------------------------------------------------------------------------------------
// Item: the descriptor limit
// ---------------------------------------------------------------------------------------

/// A child process running a server under a low `RLIMIT_NOFILE`, answering `stats` on
/// its stdin with counters, the warnings it logged, and how many spare files it can open.
struct FdChild {
    guard: ChildGuard,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    addr: SocketAddr,
}

/// Spare files the child tries to open when asked for stats: the store's needs.
const SPARE_FILES: usize = 32;

impl FdChild {
    fn spawn(nofile: u64, fd_reserve: &str) -> Self {
        let mut child = spawn_child(
            "child_fd_server",
            &[
                ("RINGMQ_TEST_NOFILE", nofile.to_string()),
                ("RINGMQ_TEST_FD_RESERVE", fd_reserve.to_string()),
            ],
            true,
        );
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut me = Self {
            guard: ChildGuard(child),
            stdin,
            stdout,
            addr: "127.0.0.1:1".parse().unwrap(),
        };
        let line = me.report();
        me.addr = line
            .strip_prefix("addr=")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("child did not report its address: {line}"));
        me
    }

    /// The next report line (the child reports within seconds; its watchdog bounds it).
    fn report(&mut self) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.stdout.read_line(&mut line).expect("read child stdout");
            assert!(n > 0, "child exited without reporting");
            // libtest may print "test <name> ... " on the same line first.
            if let Some(at) = line.find(REPORT) {
                return line[at + REPORT.len()..].trim_end().to_string();
            }
        }
    }

    fn stats(&mut self) -> HashMap<String, u64> {
        writeln!(self.stdin, "stats").expect("ask child");
        self.stdin.flush().unwrap();
        let line = self.report();
        line.split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.parse().expect("numeric stat")))
            .collect()
    }

    fn quit(mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.guard.0.try_wait() {
                assert!(status.success(), "child failed: {status}");
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("child did not exit after quit");
    }
}

/// One echo round trip on a fresh connection; false if the server closed it or did not
/// answer within `within`.
fn echo_on_fresh_connection(addr: SocketAddr, within: Duration) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, within) else {
        return false;
    };
    s.set_read_timeout(Some(within)).unwrap();
    let mut out = BytesMut::new();
    request(ECHO_NOW, 5, SerializeType::Json).encode(&mut out);
    if s.write_all(&out).is_err() {
        return false;
    }
    let mut first = [0u8; 4];
    s.read_exact(&mut first).is_ok()
}

/// Counts WARN events, for the child's report.
struct WarnCounter(Arc<AtomicUsize>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for WarnCounter {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if *event.metadata().level() == tracing::Level::WARN {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[test]
#[ignore = "run by the descriptor-limit tests"]
fn child_fd_server() {
    if !enter_child("child_fd_server") {
        return;
    }
    use tracing_subscriber::layer::SubscriberExt;
    let warns = Arc::new(AtomicUsize::new(0));
    let subscriber = tracing_subscriber::registry()
        .with(WarnCounter(warns.clone()))
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(io::stderr)
                .with_filter(tracing_subscriber::filter::LevelFilter::WARN),
        );
    tracing::subscriber::set_global_default(subscriber).expect("subscriber");
    let nofile: u64 = std::env::var("RINGMQ_TEST_NOFILE")
        .unwrap()
        .parse()
        .unwrap();
    let reserve: FdReserve = std::env::var("RINGMQ_TEST_FD_RESERVE")
        .unwrap()
        .parse()
        .unwrap();
    set_nofile_soft(nofile);
    let mut cfg = config("fd-limit");
    cfg.network_cores = vec![0];
    let tuning = ServerTuning {
        fd_reserve: reserve,
        ..ServerTuning::default()
    };
    let server = Server::start_with(cfg, tuning, TestHandler::new(100)).expect("start");
    println!("{REPORT}addr={}", server.local_addr());
    for line in io::stdin().lock().lines() {
        match line.expect("stdin").trim() {
            "stats" => {
                let spare: Vec<std::fs::File> = (0..SPARE_FILES)
                    .map_while(|_| std::fs::File::open("/dev/null").ok())
                    .collect();
                let st = &server.stats()[0];
                println!(
                    "{REPORT}warns={} accept_errors={} refused={} connections={} spare_files={}",
                    warns.load(Ordering::Relaxed),
                    st.accept_errors,
                    st.accept_refused_fd_reserve,
                    st.connections,
                    spare.len()
                );
            }
            _ => break,
        }
    }
    server.shutdown();
}

/// At the descriptor limit (reserve off) accept fails with EMFILE: the server backs off
/// (a few failed accepts and one warning in 1.5 s, not one every 20 ms), keeps running,
/// and accepts again once connections close.
#[test]
fn accept_at_the_descriptor_limit_backs_off_and_recovers() {
    const NOFILE: u64 = 128;
    let mut child = FdChild::spawn(NOFILE, "0");
    let addr = child.addr;
    let mut conns = Vec::new();
    for _ in 0..NOFILE + 40 {
        conns.push(TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect"));
    }
    let at_limit = wait_until(Duration::from_secs(5), || {
        child.stats()["accept_errors"] > 0
    });
    assert!(at_limit, "the server reached the descriptor limit");
    std::thread::sleep(Duration::from_millis(1_500));
    let st = child.stats();
    assert!(
        st["warns"] <= 2,
        "accept failures logged {} warnings in 1.5 s: {st:?}",
        st["warns"]
    );
    assert!(
        st["accept_errors"] <= 20,
        "accept retried {} times in 1.5 s at the limit: {st:?}",
        st["accept_errors"]
    );
    // Close everything: the server closes its ends, then accepts what waits in the backlog.
    drop(conns);
    let recovered = wait_until(Duration::from_secs(10), || {
        echo_on_fresh_connection(addr, Duration::from_secs(3))
    });
    assert!(
        recovered,
        "accepting again after connections closed: {:?}",
        child.stats()
    );
    child.quit();
}

/// With the default reserve (max(64, limit / 10)) the server refuses connections before
/// the limit: accept never fails, the process can still open files, refusals are
/// logged once (rate-limited), and a connection is answered again after the others close.
#[test]
fn descriptor_reserve_refuses_connections_before_the_limit() {
    const NOFILE: u64 = 256;
    let mut child = FdChild::spawn(NOFILE, "auto");
    let addr = child.addr;
    let mut conns = Vec::new();
    for _ in 0..NOFILE + 40 {
        conns.push(TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect"));
    }
    let refusing = wait_until(Duration::from_secs(5), || child.stats()["refused"] > 0);
    let st = child.stats();
    assert!(refusing, "connections refused near the limit: {st:?}");
    assert_eq!(st["accept_errors"], 0, "the limit was never hit: {st:?}");
    assert_eq!(
        st["spare_files"], SPARE_FILES as u64,
        "the process can still open files: {st:?}"
    );
    assert!(
        st["connections"] <= NOFILE - 64,
        "connections kept within the reserve: {st:?}"
    );
    assert!(
        st["warns"] <= 2,
        "refusals are rate-limited in the log: {st:?}"
    );
    drop(conns);
    let recovered = wait_until(Duration::from_secs(10), || {
        echo_on_fresh_connection(addr, Duration::from_secs(3))
    });
    assert!(
        recovered,
        "accepting again after connections closed: {:?}",
        child.stats()
    );
    child.quit();
}
