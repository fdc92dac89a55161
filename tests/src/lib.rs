//! Shared helpers for ringmq's integration tests (`tests/cluster.rs`, `tests/process.rs`):
//!
//! - [`TempDir`]: a private directory removed on drop (no tempfile crate in the workspace).
//! - [`Cluster`]: a namesrv and a broker started in this process on ephemeral 127.0.0.1
//!   ports, with a test-sized `broker.conf`; shut down (and its data removed) on drop.
//! - [`ServerProcess`]: a `ringmq namesrv|broker` child process whose address is read from
//!   its boot line; SIGTERM/SIGKILL go to that child's pid only, and a still-running child
//!   is killed on drop.
//! - [`wait_until`]: polling with a deadline, for effects the protocol makes asynchronous
//!   (a consume queue is built just after a send is acknowledged, routes are registered
//!   in the background, and so on). Nothing here waits without a deadline.
//! - Raw Remoting frames ([`frame_bytes`], [`RawConn`]) for malformed-input tests, and
//!   small constructors for client configs pointed at a cluster.

pub mod pop;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ringmq_broker::{Broker, BrokerConfig};
use ringmq_client::{
    ClientConfig, MessageExt, MessageQueue, ProducerConfig, PullConsumer, PullConsumerConfig,
    PullOptions, PullStatus, PushConsumerConfig, RemotingClient,
};
use ringmq_namesrv::{Namesrv, NamesrvConfig};
use ringmq_remoting::{FrameDecoder, RemotingCommand};

/// First port [`free_broker_port`] hands out in this process (randomised per run) and
/// the step between two: a broker uses `p - 2` (VIP channel), `p` and `p + 1` (HA).
static NEXT_PORT: std::sync::OnceLock<std::sync::atomic::AtomicU32> = std::sync::OnceLock::new();
const BROKER_PORT_STEP: u32 = 4;

/// The start of the kernel's ephemeral port range (where outgoing connections and port-0
/// binds get their ports); 32768 when it cannot be read.
fn ephemeral_port_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A free 127.0.0.1 port `p` for a broker whose `p - 2` (VIP channel) and `p + 1`
/// (`haListenPort`) are free too, chosen below the ephemeral range: a broker restarted on
/// its port must not find it taken by some client's outgoing connection meanwhile. Ports
/// are handed out once per process, in steps, so parallel tests never pick the same one.
pub fn free_broker_port() -> u16 {
    let top = ephemeral_port_start().clamp(12_000, 65_000);
    let low = 10_002u32;
    let span = (top - 2 - low) / BROKER_PORT_STEP;
    let next = NEXT_PORT.get_or_init(|| {
        let seed = std::process::id()
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
        std::sync::atomic::AtomicU32::new(seed % span)
    });
    for _ in 0..span.min(2_000) {
        let k = next.fetch_add(1, Ordering::Relaxed) % span;
        let p = low + k * BROKER_PORT_STEP;
        let free = [p - 2, p, p + 1]
            .iter()
            .all(|q| std::net::TcpListener::bind(("127.0.0.1", *q as u16)).is_ok());
        if free {
            return p as u16;
        }
    }
    panic!("no free broker port block below {top}");
}

/// Distinguishes names created by one test process (dirs, topics, groups).
static SEQ: AtomicU64 = AtomicU64::new(0);

/// A name unique within this run: `prefix` + pid + counter (topic/group-safe characters).
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// A directory under the system temp dir, removed (with its contents) on drop, unless a
/// test is failing: then it stays, with its logs, and its path is printed.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let path = std::env::temp_dir().join(unique(&format!("ringmq-it-{tag}")));
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept for inspection: {}", self.path.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Polls `probe` every `interval` until it returns `Some` or `timeout` passes; then panics
/// naming `what` and the last observation (so a failure says what was still missing).
pub fn wait_until<T>(
    what: &str,
    timeout: Duration,
    interval: Duration,
    mut probe: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match probe() {
            Ok(v) => return v,
            Err(last) => {
                if Instant::now() >= deadline {
                    panic!("timed out after {timeout:?} waiting for {what}; last: {last}");
                }
            }
        }
        std::thread::sleep(interval);
    }
}

/// Runs `f` on its own thread and gives up after `timeout` (the thread is left behind).
/// For shutdowns that must not hang a test run if the code under test deadlocks.
pub fn with_timeout<T: Send + 'static>(
    what: &str,
    timeout: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name(format!("bounded-{what}"))
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| format!("cannot spawn a thread for {what}: {e}"))?;
    rx.recv_timeout(timeout)
        .map_err(|_| format!("{what} did not finish within {timeout:?}"))
}

/// The used share of the disk under the working directory, as `df` prints it. A broker
/// refuses writes, timer and POP re-puts included, once its partition passes 90 %, so a
/// test that waits for messages names the host's disk when it gives up.
pub fn host_disk_usage() -> String {
    match std::process::Command::new("df")
        .args(["--output=pcent", "."])
        .output()
    {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            let used = text.lines().nth(1).unwrap_or("?").trim().to_string();
            format!("host disk {used} used; brokers refuse writes above 90 %")
        }
        Err(e) => format!("host disk usage unknown: {e}"),
    }
}

/// The `broker.conf` lines every test broker starts from: loopback only, ephemeral port,
/// small CommitLog files (the default 1 GiB would be mapped per broker), and no forced
/// cleaning: on a host whose disk is above `diskSpaceCleanForciblyRatio` (at most 85 %) a
/// broker deletes its oldest segments however young, and a test reading them back would
/// fail for the host's sake. Expired segments are still deleted as usual.
pub fn base_broker_conf(
    broker_name: &str,
    cluster_name: &str,
    namesrv_addr: &str,
    store_root: &Path,
) -> String {
    format!(
        "brokerClusterName={cluster_name}\n\
         brokerName={broker_name}\n\
         brokerId=0\n\
         listenPort=0\n\
         bindAddress=127.0.0.1\n\
         brokerIP1=127.0.0.1\n\
         brokerIP2=127.0.0.1\n\
         namesrvAddr={namesrv_addr}\n\
         storePathRootDir={}\n\
         flushDiskType=ASYNC_FLUSH\n\
         autoCreateTopicEnable=true\n\
         mappedFileSizeCommitLog=67108864\n\
         mappedFileSizeConsumeQueue=600000\n\
         cleanFileForciblyEnable=false\n\
         ringmq.grpc.port=0\n",
        store_root.display()
    )
}

/// The namesrv config of a test: loopback, ephemeral port, files inside `dir`.
pub fn namesrv_conf(dir: &Path, listen_port: u16) -> String {
    format!(
        "listenPort={listen_port}\nbindAddress=127.0.0.1\nkvConfigPath={}\nconfigStorePath={}\n",
        dir.join("kvConfig.json").display(),
        dir.join("namesrv.properties").display()
    )
}

/// A namesrv and one broker in this process.
pub struct Cluster {
    namesrv: Option<Namesrv>,
    broker: Option<Broker>,
    pub broker_name: String,
    pub cluster_name: String,
    broker_conf: String,
    // Dropped last: the servers' files live here.
    dir: TempDir,
}

impl Cluster {
    /// Starts a namesrv, then a broker with [`base_broker_conf`] plus `extra_conf` lines
    /// (later lines win), and waits until the broker's TBW102 route is served.
    pub fn start(extra_conf: &str) -> Cluster {
        let dir = TempDir::new("cluster");
        let ns_dir = dir.path().join("namesrv");
        std::fs::create_dir_all(&ns_dir).expect("namesrv dir");
        let (ns_cfg, unknown) = NamesrvConfig::from_properties_text(&namesrv_conf(&ns_dir, 0));
        assert!(
            unknown.is_empty(),
            "namesrv keys not understood: {unknown:?}"
        );
        let namesrv = Namesrv::start(ns_cfg).expect("namesrv starts");
        let namesrv_addr = namesrv.local_addr().to_string();
        let broker_name = unique("broker");
        let cluster_name = unique("cluster");
        let broker_conf = format!(
            "{}{extra_conf}\n",
            base_broker_conf(
                &broker_name,
                &cluster_name,
                &namesrv_addr,
                &dir.path().join("store")
            )
        );
        let mut cluster = Cluster {
            namesrv: Some(namesrv),
            broker: None,
            broker_name,
            cluster_name,
            broker_conf,
            dir,
        };
        cluster.start_broker();
        cluster
    }

    fn start_broker(&mut self) {
        let (cfg, _notes) = BrokerConfig::from_properties_text(&self.broker_conf);
        let broker = Broker::start(cfg).unwrap_or_else(|e| panic!("broker starts: {e}"));
        self.broker = Some(broker);
        let ns = self.namesrv_addr();
        wait_until(
            "the broker's TBW102 route on the namesrv",
            Duration::from_secs(20),
            Duration::from_millis(50),
            || route_brokers(&ns, "TBW102").map(|_| ()),
        );
    }

    /// Stops the broker and starts it again on the same store (the port may change).
    pub fn restart_broker(&mut self) {
        if let Some(b) = self.broker.take() {
            with_timeout("broker shutdown", Duration::from_secs(30), move || {
                b.shutdown()
            })
            .expect("broker shuts down");
        }
        self.start_broker();
    }

    pub fn namesrv_addr(&self) -> String {
        self.namesrv
            .as_ref()
            .expect("namesrv running")
            .local_addr()
            .to_string()
    }

    /// `127.0.0.1:port` of the broker's main listener.
    pub fn broker_addr(&self) -> String {
        self.broker
            .as_ref()
            .expect("broker running")
            .local_addr()
            .to_string()
    }

    pub fn broker(&self) -> &Broker {
        self.broker.as_ref().expect("broker running")
    }

    pub fn store_root(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    pub fn producer_config(&self, group: &str) -> ProducerConfig {
        ProducerConfig {
            group: group.to_string(),
            namesrv_addrs: vec![self.namesrv_addr()],
            // Routes of auto-created topics appear after the broker re-registers; keep
            // the cache short so tests see them quickly.
            route_ttl_ms: 1_000,
            ..ProducerConfig::default()
        }
    }

    pub fn pull_config(&self, group: &str) -> PullConsumerConfig {
        PullConsumerConfig {
            group: group.to_string(),
            namesrv_addrs: vec![self.namesrv_addr()],
            route_ttl_ms: 1_000,
            client: ClientConfig::default(),
        }
    }

    pub fn push_config(&self, group: &str, topic: &str, expr: &str) -> PushConsumerConfig {
        let mut cfg = PushConsumerConfig {
            group: group.to_string(),
            namesrv_addrs: vec![self.namesrv_addr()],
            consume_from: ringmq_client::ConsumeFrom::FirstOffset,
            // Quick reactions: tests wait seconds, not the Java defaults' tens of seconds.
            suspend_ms: 2_000,
            pull_timeout_ms: 10_000,
            pull_error_delay_ms: 300,
            rebalance_interval_ms: 1_000,
            heartbeat_interval_ms: 1_000,
            persist_interval_ms: 500,
            ..PushConsumerConfig::default()
        };
        cfg.subscriptions
            .insert(topic.to_string(), expr.to_string());
        cfg
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Bounded: a shutdown that deadlocks must fail the test, not hang the run.
        if let Some(b) = self.broker.take() {
            if let Err(e) = with_timeout("broker shutdown", Duration::from_secs(30), move || {
                b.shutdown()
            }) {
                eprintln!("warning: {e}");
            }
        }
        if let Some(n) = self.namesrv.take() {
            if let Err(e) = with_timeout("namesrv shutdown", Duration::from_secs(30), move || {
                n.shutdown()
            }) {
                eprintln!("warning: {e}");
            }
        }
    }
}

/// `GET_ROUTEINFO_BY_TOPIC` on `namesrv`: the broker names in the route, or why not.
/// Runs on its own short-lived client so it can be called from any thread.
pub fn route_brokers(namesrv: &str, topic: &str) -> Result<Vec<String>, String> {
    let ns = namesrv.to_string();
    let topic = topic.to_string();
    ringmq_client::block_on(async move {
        let client = RemotingClient::new(ClientConfig::default());
        let r = ringmq_client::route::fetch_route(&client, &ns, &topic, Duration::from_secs(3))
            .await
            .map_err(|e| e.to_string());
        client.close_all();
        let route = r?;
        if route.broker_datas.is_empty() || route.queue_datas.is_empty() {
            return Err(format!("route of {topic} has no brokers or queues"));
        }
        Ok(route
            .broker_datas
            .iter()
            .map(|b| b.broker_name.clone())
            .collect())
    })
}

/// Pulls queues `queue_ids` of `topic` on the broker at `addr` from offset 0 until at least
/// `expected` messages are in hand (the consume queue trails the send acknowledgement, so
/// this retries until `timeout`), then once more to catch extras. Returns the messages in
/// (queue, offset) order; panics when fewer than `expected` arrive in time.
pub fn pull_all_from(
    addr: &str,
    broker_name: &str,
    topic: &str,
    queue_ids: &[i32],
    expected: usize,
    timeout: Duration,
) -> Vec<MessageExt> {
    let cfg = PullConsumerConfig {
        group: unique("CG_pull_all"),
        namesrv_addrs: Vec::new(),
        route_ttl_ms: 1_000,
        client: ClientConfig::default(),
    };
    let consumer = ringmq_client::block_on(async move { PullConsumer::new(cfg) });
    let mut next: Vec<(i32, i64)> = queue_ids.iter().map(|q| (*q, 0)).collect();
    let mut got: Vec<MessageExt> = Vec::new();
    let deadline = Instant::now() + timeout;
    let opts = PullOptions {
        suspend_ms: None,
        timeout_ms: 5_000,
        ..PullOptions::default()
    };
    let mut last_error = String::new();
    let mut extra_round_done = false;
    loop {
        let mut progressed = false;
        for (q, off) in next.iter_mut() {
            let mq = MessageQueue::new(topic, broker_name, *q);
            match ringmq_client::block_on(consumer.pull_from(addr, &mq, *off, &opts)) {
                Ok(r) => {
                    if r.status == PullStatus::Found {
                        progressed = true;
                        got.extend(r.messages);
                    }
                    if r.next_begin_offset > *off {
                        *off = r.next_begin_offset;
                    }
                }
                Err(e) => last_error = format!("{mq}: {e}"),
            }
        }
        if got.len() >= expected && !progressed {
            if extra_round_done {
                break;
            }
            extra_round_done = true;
            continue;
        }
        if Instant::now() >= deadline {
            panic!(
                "pulled {} of {expected} messages from {topic} at {addr} before the deadline \
                 (last error: {last_error:?}; {})",
                got.len(),
                host_disk_usage()
            );
        }
        if !progressed {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    got.sort_by_key(|m| (m.queue_id, m.queue_offset));
    got
}

// ---------------------------------------------------------------------------------------
// Raw Remoting frames

/// The frame of a JSON-header request with `ext` fields and `body` (what any client sends).
pub fn frame_bytes(code: i32, opaque: i32, ext: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut cmd = RemotingCommand::request(code, opaque).with_body(body.to_vec());
    for (k, v) in ext {
        cmd.ext_fields.insert(*k, *v);
    }
    // The buffer type comes from `encode`'s signature (no direct `bytes` dependency here).
    let mut out = Default::default();
    cmd.encode(&mut out);
    out.to_vec()
}

/// A plain blocking TCP connection speaking raw frames, every read bounded by a timeout.
pub struct RawConn {
    stream: TcpStream,
}

/// What a raw read observed.
#[derive(Debug)]
pub enum RawRead {
    Response(Box<RemotingCommand>),
    /// The peer closed the connection (EOF or reset).
    Closed,
    /// Nothing complete arrived before the deadline.
    TimedOut,
    /// Bytes arrived that are not a frame.
    Garbage(String),
}

impl RawConn {
    pub fn connect(addr: &str) -> RawConn {
        let addr: SocketAddr = addr.parse().expect("socket address");
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(3))
            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream
            .set_write_timeout(Some(Duration::from_secs(5)))
            .expect("write timeout");
        RawConn { stream }
    }

    /// Writes `bytes`; `false` when the peer already closed.
    pub fn send(&mut self, bytes: &[u8]) -> bool {
        self.stream.write_all(bytes).is_ok()
    }

    /// Reads until one whole frame, EOF, or `timeout`.
    pub fn read(&mut self, timeout: Duration) -> RawRead {
        let decoder = FrameDecoder::default();
        let mut buf = Default::default();
        // Fixes the buffer's type for the calls below.
        if let Ok(Some(cmd)) = decoder.decode(&mut buf) {
            return RawRead::Response(Box::new(cmd));
        }
        let deadline = Instant::now() + timeout;
        let mut chunk = [0u8; 8192];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return RawRead::TimedOut;
            }
            let _ = self.stream.set_read_timeout(Some(left));
            match self.stream.read(&mut chunk) {
                Ok(0) => return RawRead::Closed,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return RawRead::TimedOut
                }
                Err(_) => return RawRead::Closed,
            }
            match decoder.decode(&mut buf) {
                Ok(Some(cmd)) => return RawRead::Response(Box::new(cmd)),
                Ok(None) => {}
                Err(e) => return RawRead::Garbage(e.to_string()),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The ringmq binary as child processes

/// The `ringmq` binary: `$RINGMQ_BIN`, else `<target>/debug/ringmq` of this workspace
/// (`$CARGO_TARGET_DIR` or `../target` from this crate). Build it before the tests with
/// `cargo build -p ringmq-cli`; a missing binary fails with that instruction.
pub fn ringmq_bin() -> PathBuf {
    if let Ok(p) = std::env::var("RINGMQ_BIN") {
        return PathBuf::from(p);
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let bin = target.join("debug/ringmq");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p ringmq-cli` first (or set RINGMQ_BIN)",
        bin.display()
    );
    bin
}

/// A running `ringmq namesrv|broker` child.
pub struct ServerProcess {
    child: Option<Child>,
    pub addr: String,
    pub log: PathBuf,
}

impl ServerProcess {
    /// Spawns `ringmq <args>` with stderr (logs) appended to `log` and waits up to
    /// `timeout` for its "boot success ... address <ip:port>" line on stdout.
    pub fn spawn(args: &[&str], log: &Path, timeout: Duration) -> ServerProcess {
        let bin = ringmq_bin();
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("log file");
        let mut child = Command::new(&bin)
            .args(args)
            .env_remove("NAMESRV_ADDR")
            // Not a systemd service, whatever environment the test runs in.
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env("RINGMQ_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel::<String>();
        let log_copy = log.to_path_buf();
        // Reads stdout to its end so the child never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(&log_copy) {
                    let _ = writeln!(f, "[stdout] {line}");
                }
                if !sent && line.contains("boot success") {
                    if let Some(addr) = line.rsplit("address ").next() {
                        let _ = tx.send(addr.trim().to_string());
                        sent = true;
                    }
                }
            }
        });
        let mut proc = ServerProcess {
            child: Some(child),
            addr: String::new(),
            log: log.to_path_buf(),
        };
        match rx.recv_timeout(timeout) {
            Ok(addr) => proc.addr = addr,
            Err(_) => {
                let status = proc.try_status();
                let tail = proc.log_tail(4000);
                panic!(
                    "ringmq {args:?} did not report boot success within {timeout:?} (status {status:?}); log:\n{tail}"
                );
            }
        }
        proc
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("child").id()
    }

    /// Exit status if the child has exited.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    /// Sends SIGTERM to this child (via kill(1): the test crate has no libc dependency).
    pub fn sigterm(&self) {
        self.signal("TERM");
    }

    /// Freezes this child (SIGSTOP) until [`Self::sigcont`].
    pub fn sigstop(&self) {
        self.signal("STOP");
    }

    pub fn sigcont(&self) {
        self.signal("CONT");
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args(["-s", name, &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} {} failed", self.pid());
    }

    /// SIGKILL and reap.
    pub fn sigkill(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits up to `timeout` for the child to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.try_status() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last `max` bytes of the log (for failure messages).
    pub fn log_tail(&self, max: usize) -> String {
        let text = std::fs::read(&self.log).unwrap_or_default();
        let start = text.len().saturating_sub(max);
        String::from_utf8_lossy(&text[start..]).into_owned()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // Only this child, by its own handle.
        self.sigkill();
    }
}
