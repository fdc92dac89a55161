//! End-to-end tests of the Remoting server over loopback TCP: pipelining with out-of-order
//! deferred answers, bad frames, slow readers, large frames, oneway, overload, idle close,
//! server-side sends, and graceful shutdown. Clients are plain blocking sockets, so these
//! tests check the wire, not our own client code. Every wait is bounded by a timeout.
//!
//! The core scenarios run once per network mode (receive: multishot or single; listen:
//! acceptor or reuseport), see `mode_tests!`; the multishot buffer ring's hard cases (an
//! exhausted ring, a paused reader) have tests of their own.

use std::collections::BinaryHeap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use ringmq_remoting::{FrameDecoder, RemotingCommand, SerializeType};
use ringmq_runtime::{
    not_supported, Connection, ListenMode, RecvMode, Reply, RequestContext, RequestHandler,
    Responder, Response, Server, ServerConfig, ServerTuning,
};

const ECHO_NOW: i32 = 100;
const ECHO_LATER: i32 = 101;
const ONEWAY_NOTE: i32 = 102;
const BIG_NOW: i32 = 103;
const HOLD: i32 = 104;
const REMEMBER_CONN: i32 = 105;
const EXTRA_BODY: i32 = 106;
const SPIN_2MS: i32 = 107;
const RECEIVED_AT: i32 = 108;

const BIG_BODY_BYTES: usize = 64 * 1024;

#[path = "server/hostile.rs"]
mod hostile;
#[path = "server/tls.rs"]
mod tls;

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// xorshift64*: deterministic randomness without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Answers deferred requests from its own thread after a delay, like a store stage would.
struct Delayer {
    tx: Mutex<mpsc::Sender<(Instant, Responder, RemotingCommand)>>,
}

struct Due(Instant, Responder, RemotingCommand);
impl PartialEq for Due {
    fn eq(&self, o: &Self) -> bool {
        self.0 == o.0
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Due {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        o.0.cmp(&self.0) // min-heap on due time
    }
}

impl Delayer {
    fn start() -> Arc<Self> {
        let (tx, rx) = mpsc::channel::<(Instant, Responder, RemotingCommand)>();
        std::thread::spawn(move || {
            let mut heap = BinaryHeap::new();
            loop {
                let wait = heap
                    .peek()
                    .map(|d: &Due| d.0.saturating_duration_since(Instant::now()));
                let got = match wait {
                    Some(w) => rx.recv_timeout(w),
                    None => rx.recv_timeout(Duration::from_secs(3600)),
                };
                match got {
                    Ok((due, r, resp)) => heap.push(Due(due, r, resp)),
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        if heap.is_empty() {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                let now = Instant::now();
                while heap.peek().is_some_and(|d| d.0 <= now) {
                    let Due(_, responder, resp) = heap.pop().unwrap();
                    responder.respond(resp);
                }
            }
        });
        Arc::new(Self { tx: Mutex::new(tx) })
    }
}

struct TestHandler {
    delayer: Arc<Delayer>,
    max_delay_us: u64,
    seed: AtomicU64,
    oneways: AtomicUsize,
    closed: AtomicUsize,
    held: Mutex<Vec<Responder>>,
    remembered: Mutex<Option<Connection>>,
    /// `(received_at, handled_at)` of each RECEIVED_AT request.
    received: Mutex<Vec<(Instant, Instant)>>,
}

impl TestHandler {
    fn new(max_delay_us: u64) -> Arc<Self> {
        Arc::new(Self {
            delayer: Delayer::start(),
            max_delay_us,
            seed: AtomicU64::new(0x9E37_79B9_7F4A_7C15),
            oneways: AtomicUsize::new(0),
            closed: AtomicUsize::new(0),
            held: Mutex::new(Vec::new()),
            remembered: Mutex::new(None),
            received: Mutex::new(Vec::new()),
        })
    }
}

impl RequestHandler for TestHandler {
    fn handle(&self, request: RemotingCommand, ctx: &RequestContext) -> Reply {
        match request.code {
            ECHO_NOW => Reply::Now(
                request
                    .response_to(0, None)
                    .with_body(request.body.clone())
                    .into(),
            ),
            ECHO_LATER => {
                let s = self.seed.fetch_add(0x9E37_79B9, Ordering::Relaxed);
                let delay = Duration::from_micros(Rng(s | 1).below(self.max_delay_us.max(1)));
                let resp = request.response_to(0, None).with_body(request.body.clone());
                let responder = ctx.responder();
                self.delayer
                    .tx
                    .lock()
                    .unwrap()
                    .send((Instant::now() + delay, responder, resp))
                    .unwrap();
                Reply::Later
            }
            ONEWAY_NOTE => {
                self.oneways.fetch_add(1, Ordering::SeqCst);
                // Deliberately answers: the server must not send it for a oneway request.
                Reply::Now(
                    request
                        .response_to(0, Some("must not be sent".into()))
                        .into(),
                )
            }
            BIG_NOW => Reply::Now(
                request
                    .response_to(0, None)
                    .with_body(vec![b'x'; BIG_BODY_BYTES])
                    .into(),
            ),
            HOLD => {
                self.held.lock().unwrap().push(ctx.responder());
                Reply::Later
            }
            REMEMBER_CONN => {
                *self.remembered.lock().unwrap() = Some(ctx.connection().clone());
                Reply::Now(request.response_to(0, None).into())
            }
            EXTRA_BODY => Reply::Now(Response::with_extra_body(
                request
                    .response_to(0, None)
                    .with_body(Bytes::from_static(b"head-")),
                vec![
                    Bytes::from(vec![b'm'; 20_000]),
                    Bytes::from_static(b"-tail"),
                ],
            )),
            RECEIVED_AT => {
                let times = (ctx.received_at(), Instant::now());
                self.received.lock().unwrap().push(times);
                Reply::Now(request.response_to(0, None).into())
            }
            SPIN_2MS => {
                // A misbehaving handler hogging its core: what the stall counter is for.
                let until = Instant::now() + Duration::from_millis(2);
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
                Reply::Now(request.response_to(0, None).into())
            }
            _ => Reply::Now(not_supported(&request).into()),
        }
    }

    fn on_close(&self, _conn: &Connection) {
        self.closed.fetch_add(1, Ordering::SeqCst);
    }
}

fn config(name: &str) -> ServerConfig {
    let mut c = ServerConfig::new("127.0.0.1:0".parse().unwrap(), name);
    c.network_cores = vec![0, 1];
    c
}

/// The network mode a scenario runs in.
#[derive(Debug, Clone, Copy)]
struct NetMode {
    recv: RecvMode,
    listen: ListenMode,
}

impl NetMode {
    fn tuning(self, base: ServerTuning) -> ServerTuning {
        ServerTuning {
            recv_mode: self.recv,
            listen_mode: self.listen,
            ..base
        }
    }

    fn start(
        self,
        cfg: ServerConfig,
        base: ServerTuning,
        handler: Arc<dyn RequestHandler>,
    ) -> Server {
        Server::start_with(cfg, self.tuning(base), handler).expect("start")
    }

    /// The server really ran in this mode: a core that could not set up its buffer ring
    /// falls back to single reads, which would make the multishot runs test nothing new.
    fn assert_in_effect(self, server: &Server) {
        let stats = server.stats();
        let multishot = self.recv == RecvMode::Multishot;
        assert!(
            stats.iter().all(|s| s.recv_multishot == multishot),
            "{self:?}: cores run another receive mode: {stats:?}"
        );
        let arms: u64 = stats.iter().map(|s| s.recv_multishot_arms).sum();
        assert_eq!(arms > 0, multishot, "{self:?}: multishot arms {arms}");
    }
}

/// A blocking Remoting client: frames out, frames in.
struct Client {
    stream: TcpStream,
    buf: BytesMut,
    decoder: FrameDecoder,
}

impl Client {
    fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream
            .set_write_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        Self {
            stream,
            buf: BytesMut::with_capacity(64 * 1024),
            decoder: FrameDecoder::default(),
        }
    }

    fn send(&mut self, cmd: &RemotingCommand) {
        let mut out = BytesMut::new();
        cmd.encode(&mut out);
        self.stream.write_all(&out).expect("send");
    }

    /// The next frame; `Ok(None)` at end of stream.
    fn recv(&mut self) -> io::Result<Option<RemotingCommand>> {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            if let Some(cmd) = self
                .decoder
                .decode(&mut self.buf)
                .map_err(|e| io::Error::other(e.to_string()))?
            {
                return Ok(Some(cmd));
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return Ok(None),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(e),
            }
        }
    }

    fn call(&mut self, cmd: &RemotingCommand) -> RemotingCommand {
        self.send(cmd);
        let r = self
            .recv()
            .expect("recv")
            .expect("connection closed while waiting for a response");
        assert_eq!(r.opaque, cmd.opaque, "response for the wrong request");
        r
    }

    /// True if the server closed the connection within `within`.
    fn closed_by_server(&mut self, within: Duration) -> bool {
        self.stream.set_read_timeout(Some(within)).unwrap();
        let mut chunk = [0u8; 4096];
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            match self.stream.read(&mut chunk) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut =>
                {
                    return false
                }
                Err(_) => return true, // reset
            }
        }
        false
    }
}

fn request(code: i32, opaque: i32, st: SerializeType) -> RemotingCommand {
    let mut r =
        RemotingCommand::request(code, opaque).with_body(format!("body-{opaque}").into_bytes());
    r.serialize_type = st;
    r
}

/// `conns` clients, each pipelining `per_conn` requests (ECHO_NOW and ECHO_LATER mixed,
/// random batches and pauses, even connections ROCKETMQ headers, odd ones JSON) from a
/// writer thread while reading: checks every request is answered exactly once with its
/// own body. Returns per connection whether its answers came in order.
fn pipeline_clients(addr: SocketAddr, conns: usize, per_conn: usize) -> Vec<bool> {
    let workers: Vec<_> = (0..conns)
        .map(|c| {
            std::thread::spawn(move || {
                let mut client = Client::connect(addr);
                let mut writer = client.stream.try_clone().unwrap();
                let st = if c % 2 == 0 {
                    SerializeType::RocketMq
                } else {
                    SerializeType::Json
                };
                let sender = std::thread::spawn(move || {
                    let mut rng = Rng(0xC0FFEE + c as u64);
                    let mut sent = 0usize;
                    let mut batch = BytesMut::new();
                    while sent < per_conn {
                        batch.clear();
                        let n = (1 + rng.below(64) as usize).min(per_conn - sent);
                        for _ in 0..n {
                            let code = if rng.below(2) == 0 {
                                ECHO_NOW
                            } else {
                                ECHO_LATER
                            };
                            request(code, sent as i32, st).encode(&mut batch);
                            sent += 1;
                        }
                        writer.write_all(&batch).expect("pipelined write");
                        if rng.below(8) == 0 {
                            std::thread::sleep(Duration::from_micros(rng.below(500)));
                        }
                    }
                });
                let mut seen = vec![false; per_conn];
                let mut in_order = true;
                let mut last = -1i32;
                for _ in 0..per_conn {
                    let r = client
                        .recv()
                        .expect("recv")
                        .expect("server closed a healthy connection");
                    assert_eq!(r.code, 0, "remark: {:?}", r.remark);
                    assert!(r.is_response());
                    let i = r.opaque as usize;
                    assert!(i < per_conn, "unknown opaque {}", r.opaque);
                    assert!(!seen[i], "opaque {i} answered twice");
                    seen[i] = true;
                    assert_eq!(
                        r.body,
                        Bytes::from(format!("body-{i}")),
                        "body of opaque {i}"
                    );
                    assert_eq!(r.serialize_type, st);
                    in_order &= r.opaque > last;
                    last = r.opaque;
                }
                sender.join().unwrap();
                in_order
            })
        })
        .collect();
    workers
        .into_iter()
        .map(|w| w.join().expect("worker"))
        .collect()
}

fn pipelined_connections_get_every_response_exactly_once(mode: NetMode) {
    init_tracing();
    const CONNS: usize = 32;
    const PER_CONN: usize = 2_000;
    let handler = TestHandler::new(3_000);
    let server = mode.start(config("pipeline"), ServerTuning::default(), handler.clone());
    let addr = server.local_addr();

    let in_order = pipeline_clients(addr, CONNS, PER_CONN);
    assert!(
        in_order.iter().any(|o| !o),
        "deferred answers should have arrived out of order somewhere"
    );
    let stats = server.stats();
    let requests: u64 = stats.iter().map(|s| s.requests).sum();
    assert_eq!(requests, (CONNS * PER_CONN) as u64);
    // Reuseport: the kernel hashes 32 connections over 2 listeners; all on one core has
    // a probability of 2^-31.
    assert!(
        stats.iter().all(|s| s.requests > 0),
        "connections should land on every core: {stats:?}"
    );
    assert_eq!(stats.iter().map(|s| s.in_flight).sum::<u64>(), 0);
    mode.assert_in_effect(&server);
    server.shutdown();
}

fn malformed_and_oversize_frames_close_only_their_connection(mode: NetMode) {
    init_tracing();
    let handler = TestHandler::new(100);
    let mut cfg = config("bad-frames");
    cfg.max_frame_bytes = 64 * 1024;
    let server = mode.start(cfg, ServerTuning::default(), handler.clone());
    let addr = server.local_addr();

    let mut good = Client::connect(addr);
    assert_eq!(
        good.call(&request(ECHO_NOW, 1, SerializeType::Json)).body,
        Bytes::from("body-1")
    );

    let mut oversize = Client::connect(addr);
    oversize
        .stream
        .write_all(&(1_000_000u32).to_be_bytes())
        .unwrap();
    oversize.stream.write_all(&[0u8; 64]).unwrap();

    let mut bad_type = Client::connect(addr);
    let mut frame = Vec::new();
    frame.extend_from_slice(&12u32.to_be_bytes());
    frame.extend_from_slice(&((7u32 << 24) | 8).to_be_bytes()); // serialize type 7
    frame.extend_from_slice(&[0u8; 8]);
    bad_type.stream.write_all(&frame).unwrap();

    let mut too_short = Client::connect(addr);
    too_short.stream.write_all(&2u32.to_be_bytes()).unwrap();
    too_short.stream.write_all(&[0u8; 8]).unwrap();

    let mut bad_json = Client::connect(addr);
    let header = b"{not json at all";
    let mut frame = Vec::new();
    frame.extend_from_slice(&((4 + header.len()) as u32).to_be_bytes());
    frame.extend_from_slice(&(header.len() as u32).to_be_bytes());
    frame.extend_from_slice(header);
    bad_json.stream.write_all(&frame).unwrap();

    for (name, c) in [
        ("oversize", &mut oversize),
        ("type 7", &mut bad_type),
        ("too short", &mut too_short),
        ("bad json", &mut bad_json),
    ] {
        assert!(
            c.closed_by_server(Duration::from_secs(5)),
            "{name} frame did not close its connection"
        );
    }
    for i in 2..50 {
        let st = if i % 2 == 0 {
            SerializeType::Json
        } else {
            SerializeType::RocketMq
        };
        assert_eq!(
            good.call(&request(ECHO_NOW, i, st)).body,
            Bytes::from(format!("body-{i}"))
        );
    }
    let bad: u64 = server.stats().iter().map(|s| s.bad_frames).sum();
    assert_eq!(bad, 4);
    mode.assert_in_effect(&server);
    server.shutdown();
}

fn slow_reader_does_not_stall_other_connections_on_its_core(mode: NetMode) {
    init_tracing();
    let handler = TestHandler::new(100);
    let mut cfg = config("slow-reader");
    cfg.network_cores = vec![0]; // everyone on one core
    let tuning = ServerTuning {
        max_output_bytes_per_connection: 512 * 1024,
        ..ServerTuning::default()
    };
    let server = mode.start(cfg, tuning, handler.clone());
    let addr = server.local_addr();

    // The slow client asks for 64 KiB answers and never reads them.
    let slow = Client::connect(addr);
    let mut slow_writer = slow.stream.try_clone().unwrap();
    slow_writer
        .set_write_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let flood = std::thread::spawn(move || {
        let mut frame = BytesMut::new();
        let mut written = 0usize;
        for i in 0..20_000 {
            frame.clear();
            // 4 KiB requests: far more than socket buffers hold, so the writes must block
            // once the server stops reading.
            request(BIG_NOW, i, SerializeType::RocketMq)
                .with_body(vec![b'r'; 4096])
                .encode(&mut frame);
            if slow_writer.write_all(&frame).is_err() {
                break; // the socket was shut down at the end of the test, or timed out
            }
            written += 1;
        }
        written
    });

    // Wait until the server has paused reading from the slow connection.
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.stats()[0].read_pauses == 0 {
        assert!(
            Instant::now() < deadline,
            "server never paused the slow reader: {:?}",
            server.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    let mut fast = Client::connect(addr);
    let started = Instant::now();
    for i in 0..500 {
        let r = fast.call(&request(
            if i % 2 == 0 { ECHO_NOW } else { ECHO_LATER },
            i,
            SerializeType::Json,
        ));
        assert_eq!(r.body, Bytes::from(format!("body-{i}")));
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "fast client was stalled: {:?}",
        started.elapsed()
    );

    slow.stream.shutdown(std::net::Shutdown::Both).unwrap();
    let written = flood.join().unwrap();
    assert!(
        written < 20_000,
        "the slow client should have been blocked by the server not reading"
    );
    mode.assert_in_effect(&server);
    server.shutdown();
}

/// A request's receive time is the clock reading of the core pass that read its frame:
/// never before the client sent it (a stale reading from an idle core would be), never
/// after its handler ran.
#[test]
fn a_request_is_timed_from_the_pass_that_read_it() {
    init_tracing();
    let handler = TestHandler::new(100);
    let server = Server::start(config("received_at"), handler.clone()).expect("start");
    let mut c = Client::connect(server.local_addr());
    for i in 0..20 {
        if i % 5 == 4 {
            // Let the core go idle, so the next request starts a pass of its own.
            std::thread::sleep(Duration::from_millis(30));
        }
        let sent = Instant::now();
        c.call(&request(RECEIVED_AT, i, SerializeType::Json));
        let answered = Instant::now();
        let (received_at, handled_at) = handler.received.lock().unwrap().pop().unwrap();
        assert!(
            sent <= received_at,
            "request {i} timed from before it was sent"
        );
        assert!(
            received_at <= handled_at,
            "request {i} received after it was handled"
        );
        assert!(
            handled_at <= answered,
            "request {i} handled after its answer arrived"
        );
    }
    server.shutdown();
}

#[test]
fn oneway_requests_get_no_response() {
    init_tracing();
    let handler = TestHandler::new(100);
    let server = Server::start(config("oneway"), handler.clone()).expect("start");
    let mut c = Client::connect(server.local_addr());
    for i in 0..10 {
        let mut r = request(ONEWAY_NOTE, i, SerializeType::RocketMq);
        r.mark_oneway();
        c.send(&r);
    }
    let answer = c.call(&request(ECHO_NOW, 99, SerializeType::RocketMq));
    assert_eq!(
        answer.opaque, 99,
        "the first frame back must answer the normal request"
    );
    assert_eq!(handler.oneways.load(Ordering::SeqCst), 10);
    c.stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    match c.recv() {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut => {}
        other => panic!("expected silence after the oneways, got {other:?}"),
    }
    server.shutdown();
}

#[test]
fn in_flight_bound_answers_system_busy() {
    init_tracing();
    let handler = TestHandler::new(100);
    let mut cfg = config("overload");
    cfg.max_in_flight_per_connection = 4;
    let server = Server::start(cfg, handler.clone()).expect("start");
    let mut c = Client::connect(server.local_addr());
    for i in 0..10 {
        c.send(&request(HOLD, i, SerializeType::Json));
    }
    let mut busy = Vec::new();
    for _ in 0..6 {
        let r = c.recv().unwrap().unwrap();
        assert_eq!(r.code, 2, "SYSTEM_BUSY expected, got {r:?}");
        assert!(
            r.remark.as_deref().unwrap_or("").starts_with("[OVERLOAD]"),
            "{:?}",
            r.remark
        );
        busy.push(r.opaque);
    }
    busy.sort_unstable();
    assert_eq!(busy, vec![4, 5, 6, 7, 8, 9]);
    // Releasing the held requests frees the slots: answers arrive, then new work is admitted.
    for r in handler.held.lock().unwrap().drain(..) {
        r.respond(RemotingCommand::request(0, 0));
    }
    let mut answered: Vec<i32> = (0..4).map(|_| c.recv().unwrap().unwrap().opaque).collect();
    answered.sort_unstable();
    assert_eq!(
        answered,
        vec![0, 1, 2, 3],
        "the responder sets the request's opaque"
    );
    assert_eq!(
        c.call(&request(ECHO_LATER, 50, SerializeType::Json)).code,
        0
    );
    assert_eq!(
        server.stats().iter().map(|s| s.rejected_busy).sum::<u64>(),
        6
    );
    server.shutdown();
}

#[test]
fn dropped_responder_answers_system_error() {
    init_tracing();
    let handler = TestHandler::new(100);
    let server = Server::start(config("dropped"), handler.clone()).expect("start");
    let mut c = Client::connect(server.local_addr());
    c.send(&request(HOLD, 7, SerializeType::RocketMq));
    let deadline = Instant::now() + Duration::from_secs(5);
    while handler.held.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    handler.held.lock().unwrap().clear();
    let r = c.recv().unwrap().unwrap();
    assert_eq!((r.opaque, r.code), (7, 1));
    server.shutdown();
}

fn idle_connections_are_closed_and_active_ones_kept(mode: NetMode) {
    init_tracing();
    let handler = TestHandler::new(100);
    let mut cfg = config("idle");
    // Far above the active client's 50 ms between calls, so a stalled test thread does
    // not let the active connection go idle too.
    cfg.idle_timeout_ms = 1_000;
    let server = mode.start(cfg, ServerTuning::default(), handler.clone());
    let addr = server.local_addr();
    let mut idle = Client::connect(addr);
    let mut active = Client::connect(addr);
    let started = Instant::now();
    let mut i = 0;
    while started.elapsed() < Duration::from_millis(2_500) {
        active.call(&request(ECHO_NOW, i, SerializeType::RocketMq));
        i += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        idle.closed_by_server(Duration::from_secs(4)),
        "idle connection was not closed"
    );
    assert_eq!(
        active
            .call(&request(ECHO_NOW, 10_000, SerializeType::RocketMq))
            .opaque,
        10_000
    );
    let deadline = Instant::now() + Duration::from_secs(2);
    while handler.closed.load(Ordering::SeqCst) < 1 {
        assert!(Instant::now() < deadline, "on_close was not called");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(server.stats().iter().map(|s| s.idle_closed).sum::<u64>(), 1);
    mode.assert_in_effect(&server);
    server.shutdown();
}

#[test]
fn server_side_send_oneway_close_and_extra_body() {
    init_tracing();
    let handler = TestHandler::new(100);
    let server = Server::start(config("server-send"), handler.clone()).expect("start");
    let mut c = Client::connect(server.local_addr());
    c.call(&request(REMEMBER_CONN, 1, SerializeType::Json));
    let conn = handler
        .remembered
        .lock()
        .unwrap()
        .clone()
        .expect("connection remembered");
    assert!(conn.is_alive());
    assert_eq!(conn.peer_addr(), c.stream.local_addr().unwrap());
    assert!(conn.send_oneway(RemotingCommand::request(40, 555).with_body(&b"notify"[..])));
    let pushed = c.recv().unwrap().unwrap();
    assert_eq!((pushed.code, pushed.opaque), (40, 555));
    assert!(pushed.is_oneway() && !pushed.is_response());
    assert_eq!(pushed.body, Bytes::from_static(b"notify"));

    let r = c.call(&request(EXTRA_BODY, 2, SerializeType::RocketMq));
    let mut expected = b"head-".to_vec();
    expected.extend(std::iter::repeat_n(b'm', 20_000));
    expected.extend_from_slice(b"-tail");
    assert_eq!(r.body, Bytes::from(expected));

    let r = c.call(&request(4242, 3, SerializeType::Json));
    assert_eq!(r.code, 3);
    assert_eq!(
        r.remark.as_deref(),
        Some(" request type 4242 not supported")
    );

    conn.close();
    assert!(!conn.is_alive());
    assert!(c.closed_by_server(Duration::from_secs(5)));
    assert!(!conn.send_oneway(RemotingCommand::request(40, 556)));
    server.shutdown();
}

fn shutdown_answers_or_fails_every_in_flight_request(mode: NetMode) {
    init_tracing();
    let handler = TestHandler::new(100_000); // deferred answers up to 100 ms later
    let tuning = ServerTuning {
        drain_timeout_ms: 500,
        ..ServerTuning::default()
    };
    let server = mode.start(config("shutdown"), tuning, handler.clone());
    let addr = server.local_addr();
    let mut clients: Vec<Client> = (0..4).map(|_| Client::connect(addr)).collect();
    // Deferred answers that arrive before the marker below (a delay can be ~0).
    let mut early: Vec<Vec<RemotingCommand>> = vec![Vec::new(); clients.len()];
    for (k, c) in clients.iter_mut().enumerate() {
        for i in 0..50 {
            c.send(&request(ECHO_LATER, i, SerializeType::RocketMq));
        }
        for i in 50..55 {
            c.send(&request(HOLD, i, SerializeType::Json));
        }
        // Make sure the server has read them all before shutting down.
        let marker = 1_000 + k as i32;
        c.send(&request(ECHO_NOW, marker, SerializeType::RocketMq));
        loop {
            let r = c.recv().expect("recv").expect("closed before the marker");
            if r.opaque == marker {
                assert_eq!(r.code, 0);
                break;
            }
            early[k].push(r);
        }
    }
    mode.assert_in_effect(&server);
    let stopper = std::thread::spawn(move || {
        let started = Instant::now();
        server.shutdown();
        started.elapsed()
    });
    for (c, early) in clients.iter_mut().zip(early) {
        let mut ok = 0;
        let mut failed = 0;
        let mut seen = std::collections::HashSet::new();
        let mut early = early.into_iter();
        loop {
            match early
                .next()
                .map(|r| Ok(Some(r)))
                .unwrap_or_else(|| c.recv())
            {
                Ok(Some(r)) => {
                    assert!(seen.insert(r.opaque), "opaque {} answered twice", r.opaque);
                    match r.code {
                        0 => {
                            assert!(r.opaque < 50);
                            ok += 1;
                        }
                        1 => {
                            assert!((50..55).contains(&r.opaque));
                            assert!(
                                r.remark.as_deref().unwrap_or("").contains("GO_AWAY"),
                                "{:?}",
                                r.remark
                            );
                            failed += 1;
                        }
                        other => panic!("unexpected code {other}"),
                    }
                }
                Ok(None) => break,
                Err(e) => panic!("connection broke instead of closing cleanly: {e}"),
            }
        }
        assert_eq!(
            (ok, failed),
            (50, 5),
            "every in-flight request must be answered or failed"
        );
    }
    let took = stopper.join().unwrap();
    assert!(took < Duration::from_secs(5), "shutdown took {took:?}");
    assert_eq!(handler.closed.load(Ordering::SeqCst), 4);
}

#[test]
fn stall_counter_and_core_handles() {
    init_tracing();
    let handler = TestHandler::new(100);
    let server = Server::start(config("stalls"), handler.clone()).expect("start");
    let mut c = Client::connect(server.local_addr());
    c.call(&request(ECHO_NOW, 0, SerializeType::RocketMq));
    let before = server.stalls();
    for i in 1..4 {
        c.call(&request(SPIN_2MS, i, SerializeType::RocketMq));
    }
    assert!(
        server.stalls() >= before + 3,
        "three 2 ms handler calls must count as stalls: {:?}",
        server.stats()
    );

    let (tx, rx) = mpsc::channel();
    let handles = server.core_handles();
    assert_eq!(handles.len(), 2);
    for h in &handles {
        let tx = tx.clone();
        let index = h.index();
        assert!(h.execute(move || {
            let _ = tx.send((index, std::thread::current().name().map(String::from)));
        }));
    }
    let mut ran: Vec<(usize, Option<String>)> = (0..2)
        .map(|_| {
            rx.recv_timeout(Duration::from_secs(5))
                .expect("closure did not run")
        })
        .collect();
    ran.sort();
    assert_eq!(
        ran,
        vec![
            (0, Some("stalls-net-0".to_string())),
            (1, Some("stalls-net-1".to_string()))
        ]
    );
    server.shutdown();
}

/// A handler that takes numbers another thread pushed into a per-core ring, in
/// `on_core_wake`, recording the core thread it ran on.
struct RingTaker {
    rings: Vec<ringmq_runtime::RingReceiver<u32>>,
    taken: Mutex<Vec<(usize, u32, Option<String>)>>,
    wakes: AtomicUsize,
}

impl RequestHandler for RingTaker {
    fn handle(&self, request: RemotingCommand, _ctx: &RequestContext) -> Reply {
        Reply::Now(request.response_to(0, None).into())
    }

    fn on_core_wake(&self, core: usize) {
        self.wakes.fetch_add(1, Ordering::Relaxed);
        let name = std::thread::current().name().map(String::from);
        while let Some(v) = self.rings[core].try_recv() {
            self.taken.lock().unwrap().push((core, v, name.clone()));
        }
    }
}

/// A stage thread pushes into a ring sharing a core's doorbell and rings it: the core
/// wakes and takes the items in `on_core_wake`, on its own thread; and an idle core still
/// calls `on_core_wake` (its tick), so per-core timers held by the handler fire.
#[test]
fn doorbell_wakes_the_core_into_on_core_wake_and_idle_cores_tick() {
    init_tracing();
    let cfg = config("wake");
    // The rings need the cores' doorbells, which exist once the server starts: the
    // handler reads rings from a slot filled right after.
    let slot: Arc<std::sync::OnceLock<Arc<RingTaker>>> = Arc::new(std::sync::OnceLock::new());
    struct Late(Arc<std::sync::OnceLock<Arc<RingTaker>>>);
    impl RequestHandler for Late {
        fn handle(&self, request: RemotingCommand, ctx: &RequestContext) -> Reply {
            self.0.get().expect("set").handle(request, ctx)
        }
        fn on_core_wake(&self, core: usize) {
            if let Some(h) = self.0.get() {
                h.on_core_wake(core);
            }
        }
    }
    let server = Server::start(cfg, Arc::new(Late(slot.clone()))).expect("start");
    let mut senders = Vec::new();
    let mut rings = Vec::new();
    for h in server.core_handles() {
        let (tx, rx) = ringmq_runtime::ring_with_notifier(16, h.doorbell().clone());
        senders.push(tx);
        rings.push(rx);
    }
    let taker = Arc::new(RingTaker {
        rings,
        taken: Mutex::new(Vec::new()),
        wakes: AtomicUsize::new(0),
    });
    assert!(slot.set(taker.clone()).is_ok());
    let before = taker.wakes.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        taker.wakes.load(Ordering::Relaxed) >= before + 4,
        "idle cores tick into on_core_wake"
    );
    std::thread::spawn(move || {
        for (core, tx) in senders.iter().enumerate() {
            for v in 0..3 {
                tx.try_push(core as u32 * 10 + v).unwrap();
            }
            tx.flush();
        }
    })
    .join()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while taker.taken.lock().unwrap().len() < 6 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut taken = taker.taken.lock().unwrap().clone();
    taken.sort();
    assert_eq!(
        taken,
        vec![
            (0, 0, Some("wake-net-0".to_string())),
            (0, 1, Some("wake-net-0".to_string())),
            (0, 2, Some("wake-net-0".to_string())),
            (1, 10, Some("wake-net-1".to_string())),
            (1, 11, Some("wake-net-1".to_string())),
            (1, 12, Some("wake-net-1".to_string())),
        ]
    );
    server.shutdown();
}

#[test]
fn io_uring_setup_failure_is_an_error_naming_the_cause() {
    init_tracing();
    let handler = TestHandler::new(100);
    // Zero submission entries makes io_uring_setup(2) fail with EINVAL on every kernel.
    let tuning = ServerTuning {
        io_uring_entries: 0,
        ..ServerTuning::default()
    };
    let err = Server::start_with(config("no-ring"), tuning, handler)
        .expect_err("a ring with 0 entries cannot start");
    let text = err.to_string();
    assert!(text.contains("io_uring setup failed"), "{text}");
    assert!(
        text.contains("no-ring"),
        "the error names the server: {text}"
    );
}

/// A request whose body is `len` bytes of a pattern that depends on `opaque`, so a
/// misplaced or mangled byte shows.
fn large_request(opaque: i32, len: usize) -> RemotingCommand {
    let body: Vec<u8> = (0..len)
        .map(|j| (j as u32).wrapping_mul(31).wrapping_add(opaque as u32) as u8)
        .collect();
    let mut r = RemotingCommand::request(ECHO_NOW, opaque).with_body(body);
    r.serialize_type = SerializeType::RocketMq;
    r
}

/// 4 MiB bodies (and odd sizes around the ring's buffer size) between small frames, on
/// several connections at once, come back byte for byte.
fn large_frames_are_assembled(mode: NetMode) {
    init_tracing();
    const CONNS: usize = 3;
    let sizes: Vec<usize> = vec![
        4 << 20,
        10,
        16 * 1024 - 1,
        16 * 1024 + 1,
        (4 << 20) - 17,
        100,
        1 << 20,
        33 * 1024,
        3,
    ];
    let handler = TestHandler::new(100);
    let server = mode.start(config("large"), ServerTuning::default(), handler.clone());
    let addr = server.local_addr();
    let workers: Vec<_> = (0..CONNS)
        .map(|c| {
            let sizes = sizes.clone();
            std::thread::spawn(move || {
                let mut client = Client::connect(addr);
                let mut writer = client.stream.try_clone().unwrap();
                let n = sizes.len();
                let to_send = sizes.clone();
                // The echoes come back while we still send: write from another thread.
                let sender = std::thread::spawn(move || {
                    for (i, &len) in to_send.iter().enumerate() {
                        let mut frame = BytesMut::new();
                        large_request((c * 100 + i) as i32, len).encode(&mut frame);
                        writer.write_all(&frame).expect("large write");
                    }
                });
                for (i, &len) in sizes.iter().enumerate().take(n) {
                    let r = client
                        .recv()
                        .expect("recv")
                        .expect("server closed the connection");
                    let opaque = (c * 100 + i) as i32;
                    assert_eq!(r.opaque, opaque, "echoes answer in order");
                    assert_eq!(r.body.len(), len, "body length of opaque {opaque}");
                    assert!(
                        r.body == large_request(opaque, len).body,
                        "body bytes of opaque {opaque} differ"
                    );
                }
                sender.join().unwrap();
            })
        })
        .collect();
    for w in workers {
        w.join().expect("large-frame client");
    }
    mode.assert_in_effect(&server);
    server.shutdown();
}

/// Runs each core scenario in one network mode, as a module of tests named after it.
macro_rules! mode_tests {
    ($module:ident, $recv:expr, $listen:expr) => {
        mod $module {
            use super::*;
            const MODE: NetMode = NetMode {
                recv: $recv,
                listen: $listen,
            };
            #[test]
            fn pipelined_connections_get_every_response_exactly_once() {
                super::pipelined_connections_get_every_response_exactly_once(MODE);
            }
            #[test]
            fn malformed_and_oversize_frames_close_only_their_connection() {
                super::malformed_and_oversize_frames_close_only_their_connection(MODE);
            }
            #[test]
            fn slow_reader_does_not_stall_other_connections_on_its_core() {
                super::slow_reader_does_not_stall_other_connections_on_its_core(MODE);
            }
            #[test]
            fn idle_connections_are_closed_and_active_ones_kept() {
                super::idle_connections_are_closed_and_active_ones_kept(MODE);
            }
            #[test]
            fn shutdown_answers_or_fails_every_in_flight_request() {
                super::shutdown_answers_or_fails_every_in_flight_request(MODE);
            }
            #[test]
            fn large_frames_are_assembled() {
                super::large_frames_are_assembled(MODE);
            }
        }
    };
}

mode_tests!(
    multishot_acceptor,
    RecvMode::Multishot,
    ListenMode::Acceptor
);
mode_tests!(single_acceptor, RecvMode::Single, ListenMode::Acceptor);
mode_tests!(
    multishot_reuseport,
    RecvMode::Multishot,
    ListenMode::ReusePort
);
mode_tests!(single_reuseport, RecvMode::Single, ListenMode::ReusePort);

#[test]
fn tiny_buffer_ring_under_many_connections_delivers_every_response() {
    init_tracing();
    // Two 1 KiB buffers per core for 24 connections pipelining batches of up to 64
    // requests (~2 KiB): the ring runs dry at once and over and over.
    let tuning = ServerTuning {
        recv_mode: RecvMode::Multishot,
        recv_buffer_count: 2,
        recv_buffer_bytes: 1024,
        ..ServerTuning::default()
    };
    let handler = TestHandler::new(1_000);
    let server = Server::start_with(config("tiny-ring"), tuning, handler.clone()).expect("start");
    pipeline_clients(server.local_addr(), 24, 1_000);
    let stats = server.stats();
    assert_eq!(
        stats.iter().map(|s| s.requests).sum::<u64>(),
        24 * 1_000,
        "{stats:?}"
    );
    let exhausted: u64 = stats.iter().map(|s| s.recv_buffers_exhausted).sum();
    assert!(
        exhausted > 0,
        "a 2-buffer ring under 24 pipelining connections must run dry: {stats:?}"
    );
    NetMode {
        recv: RecvMode::Multishot,
        listen: ListenMode::Acceptor,
    }
    .assert_in_effect(&server);
    server.shutdown();
}

#[test]
fn paused_slow_reader_holds_no_ring_buffers() {
    init_tracing();
    let handler = TestHandler::new(100);
    let mut cfg = config("paused-ring");
    cfg.network_cores = vec![0]; // one core, one ring
    let tuning = ServerTuning {
        recv_mode: RecvMode::Multishot,
        recv_buffer_count: 16,
        recv_buffer_bytes: 4096,
        max_output_bytes_per_connection: 512 * 1024,
        ..ServerTuning::default()
    };
    let server = Server::start_with(cfg, tuning, handler.clone()).expect("start");
    let addr = server.local_addr();

    // The slow client asks for 16 MiB of answers in one small burst (it fits the ring, so
    // it arrives through the multishot) and never reads them: the server pauses it.
    let mut slow = Client::connect(addr);
    let mut burst = BytesMut::new();
    for i in 0..256 {
        request(BIG_NOW, i, SerializeType::RocketMq).encode(&mut burst);
    }
    assert!(burst.len() < 16 * 4096);
    slow.stream.write_all(&burst).unwrap();
    // Settled: paused, and no request dispatched for a while (the answers cannot drain to
    // a client that does not read, so it stays paused).
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = (u64::MAX, Instant::now());
    loop {
        assert!(
            Instant::now() < deadline,
            "the slow reader never settled: {:?}",
            server.stats()
        );
        std::thread::sleep(Duration::from_millis(20));
        let stats = server.stats();
        if stats[0].requests != last.0 {
            last = (stats[0].requests, Instant::now());
        } else if stats[0].read_pauses > 0 && last.1.elapsed() >= Duration::from_millis(300) {
            break;
        }
    }
    // More requests arrive while it is paused: 128 KiB, twice the ring. A paused
    // connection that kept its multishot armed would take every ring buffer for them and
    // hold it, and every receive of the fast client would end with ENOBUFS.
    let mut more = BytesMut::new();
    for i in 256..288 {
        request(ECHO_NOW, i, SerializeType::RocketMq)
            .with_body(vec![b'r'; 4096])
            .encode(&mut more);
    }
    slow.stream.write_all(&more).unwrap();
    std::thread::sleep(Duration::from_millis(100));

    let exhausted_before = server.stats()[0].recv_buffers_exhausted;
    let mut fast = Client::connect(addr);
    for i in 0..300 {
        let r = fast.call(&request(ECHO_NOW, i, SerializeType::Json));
        assert_eq!(r.body, Bytes::from(format!("body-{i}")));
    }
    let stats = server.stats();
    assert_eq!(
        stats[0].recv_buffers_exhausted, exhausted_before,
        "the paused connection held ring buffers: {stats:?}"
    );
    assert!(stats[0].recv_multishot);
    slow.stream.shutdown(std::net::Shutdown::Both).unwrap();
    server.shutdown();
}

#[test]
fn reuseport_waits_for_a_port_still_listening_instead_of_joining_it() {
    init_tracing();
    let tuning = ServerTuning {
        listen_mode: ListenMode::ReusePort,
        ..ServerTuning::default()
    };
    let first = Server::start_with(config("reuse-a"), tuning.clone(), TestHandler::new(100))
        .expect("start the first server");
    let addr = first.local_addr();
    let first_stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopping = first_stopping.clone();
    let second = std::thread::spawn(move || {
        let mut cfg = config("reuse-b");
        cfg.listen_addr = addr;
        let started = Server::start_with(cfg, tuning, TestHandler::new(100));
        (started, stopping.load(Ordering::SeqCst))
    });
    // Give the second server time to (wrongly) join the first one's port.
    std::thread::sleep(Duration::from_millis(300));
    first_stopping.store(true, Ordering::SeqCst);
    first.shutdown();
    let (started, after_first_stopped) = second.join().unwrap();
    let second = started.expect("the second server binds once the first one is gone");
    assert!(
        after_first_stopped,
        "the second server joined a port another server still listened on"
    );
    assert_eq!(second.local_addr(), addr);
    let mut c = Client::connect(addr);
    assert_eq!(c.call(&request(ECHO_NOW, 1, SerializeType::Json)).code, 0);
    second.shutdown();
}

#[test]
fn net_properties_choose_modes_and_reject_typos() {
    let mut t = ServerTuning::default();
    t.apply_net_properties([
        ("ringmq.net.recvMode", "single"),
        ("ringmq.net.listenMode", " ReusePort "),
        ("ringmq.cores.network", "0-1"), // another component's key: ignored
    ])
    .expect("valid keys");
    assert_eq!(t.recv_mode, RecvMode::Single);
    assert_eq!(t.listen_mode, ListenMode::ReusePort);
    t.apply_net_properties([("ringmq.net.recvMode", "multishot")])
        .unwrap();
    assert_eq!(t.recv_mode, RecvMode::Multishot);

    let e = t
        .apply_net_properties([("ringmq.net.recvMode", "multi")])
        .unwrap_err();
    assert_eq!(e.key, "ringmq.net.recvMode");
    assert!(e.to_string().contains("multishot or single"), "{e}");
    let e = t
        .apply_net_properties([("ringmq.net.listenmode", "acceptor")])
        .unwrap_err();
    assert!(e.to_string().contains("unknown key"), "{e}");
    assert_eq!(
        t.recv_mode,
        RecvMode::Multishot,
        "a bad value changes nothing"
    );
}

#[test]
fn impossible_buffer_ring_settings_are_refused_at_start() {
    init_tracing();
    for (count, bytes) in [
        (0u16, 4096usize),
        (40_000, 4096),
        (1024, 0),
        (32_768, 1 << 20),
    ] {
        let tuning = ServerTuning {
            recv_mode: RecvMode::Multishot,
            recv_buffer_count: count,
            recv_buffer_bytes: bytes,
            ..ServerTuning::default()
        };
        let err = Server::start_with(config("bad-ring"), tuning, TestHandler::new(100))
            .expect_err("impossible ring settings must not start");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
        assert!(err.to_string().contains("recv_buffer"), "{err}");
    }
}

// ---------------------------------------------------------------------------------------
// File-range bodies (splice): frames mixing memory chunks and file ranges
// ---------------------------------------------------------------------------------------

mod file_bodies {
    use super::*;
    use ringmq_runtime::{BodyChunk, FileRange, SharedFile};

    /// Answers with the request's opaque in the body (small frames between the big ones).
    pub const SMALL: i32 = 200;
    /// Answers with a body mixing memory chunks and file ranges ([`mixed_body`]).
    pub const MIXED: i32 = 201;
    /// Answers with a 12 MiB memory body: more than loopback socket buffers hold, so
    /// frames queued behind it wait while the client does not read.
    pub const HUGE_MEMORY: i32 = 202;
    /// Answers with the whole file as one range, taking the handler's file handle: the
    /// queued range is then the only thing keeping the file open.
    pub const TAKE_FILE: i32 = 203;

    pub const HUGE_MEMORY_BYTES: usize = 12 * 1024 * 1024;

    pub struct FileHandler {
        pub data: Vec<u8>,
        pub file: Mutex<Option<SharedFile>>,
        pub handled: AtomicUsize,
    }

    /// `data[offset..offset + len]`, as the bytes a range over the file must produce.
    fn piece(data: &[u8], offset: usize, len: usize) -> &[u8] {
        &data[offset..offset + len]
    }

    /// (chunk, expected bytes) pairs of the MIXED body: a range larger than any pipe load,
    /// ranges at offsets that are not page-aligned, memory chunks between and around them,
    /// and two back-to-back ranges.
    pub fn mixed_body(file: &SharedFile, data: &[u8]) -> Vec<(BodyChunk, Vec<u8>)> {
        let big_len = ringmq_runtime::server::PIPE_TARGET_BYTES * 2 + 4_099;
        let range = |offset: usize, len: usize| {
            (
                BodyChunk::from(FileRange::new(file.clone(), offset as u64, len).unwrap()),
                piece(data, offset, len).to_vec(),
            )
        };
        let memory = |bytes: Vec<u8>| (BodyChunk::from(Bytes::from(bytes.clone())), bytes);
        vec![
            memory(b"<mem>".to_vec()),
            range(4_096 * 3 + 17, big_len),
            memory(vec![b'M'; 300 * 1024]),
            range(1, 100),
            range(101, 7_777),
            memory(b"</mem>".to_vec()),
        ]
    }

    impl RequestHandler for FileHandler {
        fn handle(&self, request: RemotingCommand, _ctx: &RequestContext) -> Reply {
            self.handled.fetch_add(1, Ordering::SeqCst);
            let head = request.response_to(0, None);
            match request.code {
                SMALL => Reply::Now(
                    head.with_body(format!("small-{}", request.opaque).into_bytes())
                        .into(),
                ),
                MIXED => {
                    let file = self.file.lock().unwrap().clone().expect("file kept");
                    let chunks = mixed_body(&file, &self.data).into_iter().map(|(c, _)| c);
                    Reply::Now(Response::with_extra_body(
                        head.with_body(Bytes::from_static(b"head|")),
                        chunks,
                    ))
                }
                HUGE_MEMORY => Reply::Now(Response::with_extra_body(
                    head,
                    vec![Bytes::from(vec![b'h'; HUGE_MEMORY_BYTES])],
                )),
                TAKE_FILE => {
                    let file = self
                        .file
                        .lock()
                        .unwrap()
                        .take()
                        .expect("file not taken yet");
                    let range = FileRange::new(file, 0, self.data.len()).unwrap();
                    Reply::Now(Response::with_extra_body(head, vec![range]))
                }
                _ => Reply::Now(not_supported(&request).into()),
            }
        }
    }

    /// Removes the file when dropped (also when the test fails).
    pub struct TempPath(pub std::path::PathBuf);

    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    pub fn temp_file(name: &str, len: usize) -> (TempPath, Vec<u8>, SharedFile) {
        let path =
            std::env::temp_dir().join(format!("ringmq-server-it-{name}-{}", std::process::id()));
        let mut rng = Rng(0xF11E + len as u64);
        let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file: SharedFile = Arc::new(std::fs::File::open(&path).unwrap());
        (TempPath(path), data, file)
    }
}

#[test]
fn file_range_bodies_arrive_byte_identical_and_in_order() {
    use file_bodies::*;
    init_tracing();
    let (path, data, file) = temp_file("mixed", 4 * 1024 * 1024);
    let handler = Arc::new(FileHandler {
        data: data.clone(),
        file: Mutex::new(Some(file.clone())),
        handled: AtomicUsize::new(0),
    });
    let server = Server::start(config("file-bodies"), handler.clone()).expect("start");
    let mut expected_mixed = b"head|".to_vec();
    for (_, bytes) in mixed_body(&file, &data) {
        expected_mixed.extend_from_slice(&bytes);
    }
    // Several connections (both cores, so both cores' pipe pools), each pipelining small
    // and mixed frames, so ranges interleave with other frames in one output queue.
    let workers: Vec<_> = (0..4)
        .map(|c| {
            let expected_mixed = expected_mixed.clone();
            let addr = server.local_addr();
            std::thread::spawn(move || {
                let mut client = Client::connect(addr);
                const FRAMES: i32 = 24;
                let mut batch = BytesMut::new();
                for i in 0..FRAMES {
                    let code = if (i + c) % 3 == 0 { MIXED } else { SMALL };
                    request(code, i, SerializeType::RocketMq).encode(&mut batch);
                }
                client.stream.write_all(&batch).unwrap();
                for i in 0..FRAMES {
                    let r = client.recv().expect("recv").expect("server closed");
                    assert_eq!(r.opaque, i, "responses come in request order");
                    assert_eq!(r.code, 0, "{:?}", r.remark);
                    if (i + c) % 3 == 0 {
                        assert_eq!(r.body.len(), expected_mixed.len());
                        assert!(r.body == expected_mixed, "mixed body {i} differs");
                    } else {
                        assert_eq!(r.body, Bytes::from(format!("small-{i}")));
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("client");
    }
    server.shutdown();
    drop(path);
}

#[test]
fn a_file_unlinked_after_its_range_was_queued_is_still_sent_whole() {
    use file_bodies::*;
    init_tracing();
    let (path, data, file) = temp_file("unlinked", 3 * 1024 * 1024 + 1_234);
    let handler = Arc::new(FileHandler {
        data: data.clone(),
        file: Mutex::new(Some(file)),
        handled: AtomicUsize::new(0),
    });
    // Room for both answers in the output queue, so the second request is read and
    // answered while the first answer is still waiting for the client.
    let tuning = ServerTuning {
        max_output_bytes_per_connection: 4 * HUGE_MEMORY_BYTES,
        ..ServerTuning::default()
    };
    let server =
        Server::start_with(config("file-unlinked"), tuning, handler.clone()).expect("start");
    let mut client = Client::connect(server.local_addr());
    // The huge frame fills the socket buffers (the client is not reading yet), so the
    // range queued behind it cannot have been sent when the file is unlinked.
    client.send(&request(HUGE_MEMORY, 1, SerializeType::Json));
    client.send(&request(TAKE_FILE, 2, SerializeType::Json));
    let deadline = Instant::now() + Duration::from_secs(5);
    while handler.handled.load(Ordering::SeqCst) < 2 {
        assert!(Instant::now() < deadline, "the requests were not handled");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(
        handler.file.lock().unwrap().is_none(),
        "only the queued range holds the file"
    );
    std::fs::remove_file(&path.0).unwrap();
    let huge = client.recv().expect("recv").expect("huge frame");
    assert_eq!((huge.opaque, huge.body.len()), (1, HUGE_MEMORY_BYTES));
    let r = client.recv().expect("recv").expect("file frame");
    assert_eq!(r.opaque, 2);
    assert_eq!(r.body.len(), data.len());
    assert!(r.body == data, "the unlinked file's bytes differ");
    // The connection stays healthy afterwards.
    let r = client.call(&request(SMALL, 3, SerializeType::Json));
    assert_eq!(r.body, Bytes::from("small-3"));
    server.shutdown();
}
