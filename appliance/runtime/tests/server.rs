//! End-to-end tests of the Remoting server over loopback TCP: pipelining with out-of-order
//! deferred answers, bad frames, slow readers, oneway, overload, idle close, server-side
//! sends, and graceful shutdown. Clients are plain blocking sockets, so these tests check
//! the wire, not our own client code. Every wait is bounded by a timeout.

use std::collections::BinaryHeap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use ringmq_remoting::{FrameDecoder, RemotingCommand, SerializeType};
use ringmq_runtime::{
    not_supported, Connection, Reply, RequestContext, RequestHandler, Responder, Response, Server,
    ServerConfig, ServerTuning,
};

const ECHO_NOW: i32 = 100;
const ECHO_LATER: i32 = 101;
const ONEWAY_NOTE: i32 = 102;
const BIG_NOW: i32 = 103;
const HOLD: i32 = 104;
const REMEMBER_CONN: i32 = 105;
const EXTRA_BODY: i32 = 106;
const SPIN_2MS: i32 = 107;

const BIG_BODY_BYTES: usize = 64 * 1024;

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

#[test]
fn pipelined_connections_get_every_response_exactly_once() {
    init_tracing();
    const CONNS: usize = 32;
    const PER_CONN: usize = 2_000;
    let handler = TestHandler::new(3_000);
    let server = Server::start(config("pipeline"), handler.clone()).expect("start");
    let addr = server.local_addr();

    let workers: Vec<_> = (0..CONNS)
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
                    while sent < PER_CONN {
                        batch.clear();
                        let n = (1 + rng.below(64) as usize).min(PER_CONN - sent);
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
                let mut seen = vec![false; PER_CONN];
                let mut in_order = true;
                let mut last = -1i32;
                for _ in 0..PER_CONN {
                    let r = client
                        .recv()
                        .expect("recv")
                        .expect("server closed a healthy connection");
                    assert_eq!(r.code, 0, "remark: {:?}", r.remark);
                    assert!(r.is_response());
                    let i = r.opaque as usize;
                    assert!(i < PER_CONN, "unknown opaque {}", r.opaque);
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
    let in_order: Vec<bool> = workers
        .into_iter()
        .map(|w| w.join().expect("worker"))
        .collect();
    assert!(
        in_order.iter().any(|o| !o),
        "deferred answers should have arrived out of order somewhere"
    );
    let stats = server.stats();
    let requests: u64 = stats.iter().map(|s| s.requests).sum();
    assert_eq!(requests, (CONNS * PER_CONN) as u64);
    assert!(
        stats.iter().all(|s| s.requests > 0),
        "round-robin should use every core: {stats:?}"
    );
    assert_eq!(stats.iter().map(|s| s.in_flight).sum::<u64>(), 0);
    server.shutdown();
}

#[test]
fn malformed_and_oversize_frames_close_only_their_connection() {
    init_tracing();
    let handler = TestHandler::new(100);
    let mut cfg = config("bad-frames");
    cfg.max_frame_bytes = 64 * 1024;
    let server = Server::start(cfg, handler.clone()).expect("start");
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
    server.shutdown();
}

#[test]
fn slow_reader_does_not_stall_other_connections_on_its_core() {
    init_tracing();
    let handler = TestHandler::new(100);
    let mut cfg = config("slow-reader");
    cfg.network_cores = vec![0]; // everyone on one core
    let tuning = ServerTuning {
        max_output_bytes_per_connection: 512 * 1024,
        ..ServerTuning::default()
    };
    let server = Server::start_with(cfg, tuning, handler.clone()).expect("start");
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

#[test]
fn idle_connections_are_closed_and_active_ones_kept() {
    init_tracing();
    let handler = TestHandler::new(100);
    let mut cfg = config("idle");
    cfg.idle_timeout_ms = 300;
    let server = Server::start(cfg, handler.clone()).expect("start");
    let addr = server.local_addr();
    let mut idle = Client::connect(addr);
    let mut active = Client::connect(addr);
    let started = Instant::now();
    let mut i = 0;
    while started.elapsed() < Duration::from_millis(900) {
        active.call(&request(ECHO_NOW, i, SerializeType::RocketMq));
        i += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        idle.closed_by_server(Duration::from_secs(2)),
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

#[test]
fn shutdown_answers_or_fails_every_in_flight_request() {
    init_tracing();
    let handler = TestHandler::new(100_000); // deferred answers up to 100 ms later
    let tuning = ServerTuning {
        drain_timeout_ms: 500,
        ..ServerTuning::default()
    };
    let server = Server::start_with(config("shutdown"), tuning, handler.clone()).expect("start");
    let addr = server.local_addr();
    let mut clients: Vec<Client> = (0..4).map(|_| Client::connect(addr)).collect();
    for (k, c) in clients.iter_mut().enumerate() {
        for i in 0..50 {
            c.send(&request(ECHO_LATER, i, SerializeType::RocketMq));
        }
        for i in 50..55 {
            c.send(&request(HOLD, i, SerializeType::Json));
        }
        // Make sure the server has read them all before shutting down.
        assert_eq!(
            c.call(&request(
                ECHO_NOW,
                1_000 + k as i32,
                SerializeType::RocketMq
            ))
            .code,
            0
        );
    }
    let stopper = std::thread::spawn(move || {
        let started = Instant::now();
        server.shutdown();
        started.elapsed()
    });
    for c in &mut clients {
        let mut ok = 0;
        let mut failed = 0;
        let mut seen = std::collections::HashSet::new();
        loop {
            match c.recv() {
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
