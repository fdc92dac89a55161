//! The load generator behind `ringmq bench producer|consumer|e2e`, modelled on RocketMQ's
//! benchmark tools (`-n` namesrv, `-t` topic, `-s` size, `-w` in-flight requests) plus what
//! a latency benchmark needs: a fixed duration or message count, an open-loop rate with
//! coordinated-omission correction (latency measured from the *intended* send time), send
//! modes sync/async/oneway/batch, HDR histograms, a report line per second and a final
//! summary (`--json`: one JSON object on the last line).
//!
//! Each worker thread runs its own compio runtime with its own producer/consumer and
//! connections, so the hot path has no cross-thread traffic; threads ship one snapshot per
//! report interval to the main thread, which prints and aggregates. With `--grpc` the
//! workers speak the 5.x gRPC protocol instead, on tokio runtimes (`bench/grpc.rs`).
//!
//! Before and after the run the main thread reads every master broker's runtime info
//! (GET_BROKER_RUNTIME_INFO) and reports what the brokers did meanwhile — append batches,
//! records per batch, the append lock-hold time, fdatasyncs and bytes per fdatasync, reput
//! lag, core stalls, SYSTEM_BUSY refusals — as a `broker:` line and as the summary's
//! `"broker"` JSON object ([`StageDelta`]). `--no-broker-profile` skips it.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use serde::Serialize;

use ringmq_client::admin::{Admin, BrokerStageProfile, StageDelta};
use ringmq_client::blocking::block_on;
use ringmq_client::consumer::{PullConsumer, PullConsumerConfig, PullOptions, PullStatus};
use ringmq_client::error::{ClientError, Result};
use ringmq_client::message::{now_ms, Message, MessageQueue, SendStatus};
use ringmq_client::pop::{PopConsumer, PopConsumerConfig};
use ringmq_client::producer::{Producer, ProducerConfig};
use ringmq_client::transport::{ClientConfig, RemotingClient};

mod grpc;

/// Which side(s) of the broker to load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BenchMode {
    Producer,
    Consumer,
    /// Consumer and producer together; latency is born → consumed.
    E2e,
}

/// How the producer sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SendMode {
    /// `-w` tasks each awaiting one send at a time.
    Sync,
    /// A dispatcher keeping `-w` sends in flight (callback style).
    Async,
    /// Fire and forget; latency is the time to queue the frame.
    Oneway,
    /// `SEND_BATCH_MESSAGE` of `--batch-size` messages per request.
    Batch,
}

/// `ringmq bench` flags.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "bench",
    about = "RocketMQ-protocol load generator (producer, consumer, end-to-end)"
)]
pub struct BenchArgs {
    /// producer | consumer | e2e
    #[arg(value_enum)]
    pub mode: BenchMode,
    /// Name server address(es), `;`-separated.
    #[arg(short = 'n', long = "namesrv", default_value = "127.0.0.1:9876")]
    pub namesrv: String,
    #[arg(short = 't', long = "topic", default_value = "BenchmarkTest")]
    pub topic: String,
    /// Message body size in bytes.
    #[arg(short = 's', long = "size", default_value_t = 1024)]
    pub message_bytes: usize,
    /// Requests in flight across all threads (closed loop: one per worker task).
    #[arg(short = 'w', long = "concurrency", default_value_t = 64)]
    pub concurrency: usize,
    /// TCP connections per broker across all threads.
    #[arg(short = 'c', long = "connections", default_value_t = 1)]
    pub connections: usize,
    /// Client runtime threads.
    #[arg(long = "threads", default_value_t = 1)]
    pub threads: usize,
    /// Run time in seconds (default 10 unless --messages is given).
    #[arg(short = 'd', long = "duration")]
    pub duration_secs: Option<u64>,
    /// Stop after this many messages (producer: sent; consumer: received).
    #[arg(short = 'm', long = "messages")]
    pub message_count: Option<u64>,
    /// Open-loop target rate in messages/s (latency corrected for coordinated omission);
    /// omitted: closed loop as fast as `-w` allows.
    #[arg(short = 'r', long = "rate")]
    pub rate_per_sec: Option<f64>,
    #[arg(long = "send-mode", value_enum, default_value = "sync")]
    pub send_mode: SendMode,
    /// Messages per request in batch mode.
    #[arg(long = "batch-size", default_value_t = 16)]
    pub batch_size: usize,
    /// Tag set on every message.
    #[arg(long = "tags")]
    pub tags: Option<String>,
    /// Put a unique KEYS value on every message (exercises the index).
    #[arg(long = "keys")]
    pub keys: bool,
    /// Producer or consumer group.
    #[arg(short = 'g', long = "group")]
    pub group: Option<String>,
    /// Per-request timeout.
    #[arg(long = "timeout-ms", default_value_t = 3_000)]
    pub timeout_ms: u64,
    /// Consumer: start from the queues' first offset instead of their end.
    #[arg(long = "from-start")]
    pub from_start: bool,
    /// Consumer: POP (5.x) instead of pull: the group pops from every broker of the topic
    /// (from the group's offset, the queues' start for a new group) and acks every message.
    #[arg(long = "pop")]
    pub pop: bool,
    /// With `--pop`: ack each popped batch with one BATCH_ACK_MESSAGE instead of one
    /// ACK_MESSAGE per message.
    #[arg(long = "batch-ack")]
    pub batch_ack: bool,
    /// Report interval in seconds.
    #[arg(long = "interval", default_value_t = 1)]
    pub report_interval_secs: u64,
    /// Run this many seconds before the measured `-d` seconds and leave them out of the
    /// summary (their interval lines are marked `warm-up`): a new topic's first messages
    /// create its ConsumeQueue files and first-touch its pages, which is not the steady
    /// state a latency figure describes. Warm-up messages still count toward `-m`.
    #[arg(long = "warmup", default_value_t = 0)]
    pub warmup_secs: u64,
    /// Print the final summary as one JSON object on the last line.
    #[arg(long = "json")]
    pub json: bool,
    /// No per-interval lines.
    #[arg(long = "quiet")]
    pub quiet: bool,
    /// Do not read the brokers' stage profile (runtime info) before and after the run.
    #[arg(long = "no-broker-profile")]
    pub no_broker_profile: bool,
    /// Sign every request with this ACL account (brokers with aclEnable=true).
    #[arg(long = "access-key", requires = "secret_key")]
    pub access_key: Option<String>,
    /// The secret of --access-key.
    #[arg(long = "secret-key", requires = "access_key")]
    pub secret_key: Option<String>,
    /// Connect with TLS (the broker's port must be permissive or enforcing).
    #[arg(long)]
    pub tls: bool,
    /// Speak RocketMQ 5.x's gRPC protocol to this endpoint (`HOST:PORT`, the broker's
    /// `ringmq.grpc.port`) instead of Remoting: producers send with SendMessage, consumers
    /// receive with ReceiveMessage and ack every message with AckMessage (one per message,
    /// or one per receive with `--batch-ack`). `-n` still names the name server the broker
    /// profile is read through.
    #[arg(long = "grpc", value_name = "HOST:PORT")]
    pub grpc: Option<String>,
    /// tls.properties with the tls.client.* keys (and tls.enable), as upstream's clients
    /// read it; default /etc/rocketmq/tls.properties.
    #[arg(long = "tls-config")]
    pub tls_config: Option<std::path::PathBuf>,
}

impl BenchArgs {
    /// The client settings every connection of the run uses: the request timeout and,
    /// with `--access-key`, the account requests are signed with.
    fn client_config(&self) -> ClientConfig {
        let credentials = match (&self.access_key, &self.secret_key) {
            (Some(ak), Some(sk)) => Some(ringmq_acl::Credentials::new(ak.clone(), sk.clone())),
            _ => None,
        };
        // Checked when the run starts (`tls_check`), so a bad file fails there, once.
        let tls = ringmq_tls::tool_client_config(self.tls, self.tls_config.as_deref())
            .ok()
            .flatten();
        ClientConfig {
            request_timeout_ms: self.timeout_ms,
            credentials,
            tls,
            ..ClientConfig::default()
        }
    }

    /// Fails with the reason when the TLS flags cannot make a client configuration.
    fn tls_check(&self) -> Result<(), String> {
        ringmq_tls::tool_client_config(self.tls, self.tls_config.as_deref()).map(|_| ())
    }

    fn namesrv_addrs(&self) -> Vec<String> {
        self.namesrv
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    }

    fn validate(&self) -> Result<()> {
        let bad = |why: String| Err(ClientError::Invalid(why));
        if self.namesrv_addrs().is_empty() {
            return bad("-n needs at least one name server address".into());
        }
        if self.message_bytes == 0 {
            return bad("-s must be at least 1 byte".into());
        }
        if self.concurrency == 0 || self.threads == 0 || self.connections == 0 {
            return bad("-w, --threads and -c must be at least 1".into());
        }
        if self.send_mode == SendMode::Batch && self.batch_size == 0 {
            return bad("--batch-size must be at least 1".into());
        }
        if let Some(r) = self.rate_per_sec {
            if !(r > 0.0 && r.is_finite()) {
                return bad(format!("-r {r}: the rate must be a positive number"));
            }
        }
        if self.grpc.is_some() {
            if !matches!(self.send_mode, SendMode::Sync | SendMode::Batch) {
                return bad("--grpc sends with --send-mode sync or batch (SendMessage is a unary call: -w of them in flight is the async load)".into());
            }
            if self.tls || self.access_key.is_some() {
                return bad("--grpc speaks plain gRPC without an ACL signature".into());
            }
        }
        if let Err(e) = self.tls_check() {
            return bad(format!("TLS: {e}"));
        }
        Ok(())
    }
}

/// The final result of a run.
#[derive(Debug, Clone, Serialize)]
pub struct BenchSummary {
    pub mode: BenchMode,
    pub elapsed_secs: f64,
    pub messages: u64,
    pub bytes: u64,
    pub tps: f64,
    pub mb_per_s: f64,
    pub avg_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub failures: u64,
    /// Failures by kind (`SYSTEM_BUSY(2)`, `timeout`, ...).
    pub failures_by_code: BTreeMap<String, u64>,
    /// What the master brokers did during the run (absent with `--no-broker-profile` or
    /// when their runtime info could not be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker: Option<StageDelta>,
}

/// The brokers' stage profiles taken before the run.
struct BrokerProbe {
    namesrv_addrs: Vec<String>,
    client: ClientConfig,
    before: Vec<(String, BrokerStageProfile)>,
}

impl BrokerProbe {
    /// A fresh admin client on this thread's runtime (the one used before the run sat idle
    /// for the whole run, so the after-read does not depend on its connection).
    fn admin(namesrv_addrs: &[String], config: &ClientConfig) -> Admin {
        let timeout = Duration::from_millis(config.request_timeout_ms);
        let client = RemotingClient::new(config.clone());
        Admin::new(client, namesrv_addrs.to_vec()).with_timeout(timeout)
    }

    /// Reads every master's profile; None (with a note on stderr) when that fails, so a
    /// broker without runtime info never stops a benchmark.
    fn before(args: &BenchArgs) -> Option<BrokerProbe> {
        let namesrv_addrs = args.namesrv_addrs();
        let client = args.client_config();
        let read = block_on(async {
            let admin = Self::admin(&namesrv_addrs, &client);
            let mut out = Vec::new();
            for addr in admin.all_master_addrs().await? {
                let p = admin.stage_profile(&addr).await?;
                out.push((addr, p));
            }
            Ok::<_, ClientError>(out)
        });
        match read {
            Ok(before) if !before.is_empty() => Some(BrokerProbe {
                namesrv_addrs,
                client,
                before,
            }),
            Ok(_) => {
                eprintln!("note: no broker registered with the name server; no broker profile");
                None
            }
            Err(e) => {
                eprintln!("note: cannot read the brokers' runtime info ({e}); no broker profile");
                None
            }
        }
    }

    /// Reads the same brokers again and returns the difference.
    fn after(self) -> Option<StageDelta> {
        let read = block_on(async {
            let admin = Self::admin(&self.namesrv_addrs, &self.client);
            let mut out = Vec::new();
            for (addr, _) in &self.before {
                out.push(admin.stage_profile(addr).await?);
            }
            Ok::<_, ClientError>(out)
        });
        match read {
            Ok(after) => {
                let mut d = StageDelta::default();
                for ((addr, b), a) in self.before.iter().zip(&after) {
                    d.add(addr, b, a);
                }
                Some(d)
            }
            Err(e) => {
                eprintln!("note: cannot read the brokers' runtime info after the run ({e})");
                None
            }
        }
    }
}

/// Latencies are recorded in microseconds, up to 10 minutes, 3 significant digits.
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("static histogram bounds are valid")
}

/// One worker thread's counts for one interval.
struct Snapshot {
    messages: u64,
    bytes: u64,
    failures: BTreeMap<String, u64>,
    hist: Histogram<u64>,
    /// The worker finished (no more snapshots follow).
    last: bool,
}

/// Per-thread accumulator (single-threaded; shipped out every interval).
struct Stats {
    messages: Cell<u64>,
    bytes: Cell<u64>,
    failures: RefCell<BTreeMap<String, u64>>,
    hist: RefCell<Histogram<u64>>,
}

impl Stats {
    fn new() -> Self {
        Self {
            messages: Cell::new(0),
            bytes: Cell::new(0),
            failures: RefCell::new(BTreeMap::new()),
            hist: RefCell::new(new_histogram()),
        }
    }

    fn ok(&self, messages: u64, bytes: u64, latency: Duration) {
        self.messages.set(self.messages.get() + messages);
        self.bytes.set(self.bytes.get() + bytes);
        let us = (latency.as_micros() as u64).max(1);
        self.hist.borrow_mut().saturating_record(us);
    }

    fn fail(&self, e: &ClientError) {
        self.fail_label(&e.kind_label());
    }

    fn fail_label(&self, label: &str) {
        let mut failures = self.failures.borrow_mut();
        match failures.get_mut(label) {
            Some(n) => *n += 1,
            None => {
                failures.insert(label.to_string(), 1);
            }
        }
    }

    fn take(&self, last: bool) -> Snapshot {
        let hist = std::mem::replace(&mut *self.hist.borrow_mut(), new_histogram());
        Snapshot {
            messages: self.messages.replace(0),
            bytes: self.bytes.replace(0),
            failures: std::mem::take(&mut *self.failures.borrow_mut()),
            hist,
            last,
        }
    }
}

/// Shared stop conditions.
struct Control {
    stop: AtomicBool,
    deadline: Instant,
    /// Messages claimed so far (for `--messages`).
    claimed: AtomicU64,
    limit: Option<u64>,
}

impl Control {
    /// Checked once per request, so it reads a flag, not the clock: each worker thread
    /// runs [`deadline_watch`], which raises `stop` when the deadline passes.
    fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }

    /// Claims `n` messages; false once the message limit is reached.
    fn claim(&self, n: u64) -> bool {
        match self.limit {
            None => true,
            Some(limit) => self.claimed.fetch_add(n, Ordering::Relaxed) < limit,
        }
    }
}

/// Runs the benchmark to completion, printing per-interval lines (unless `--quiet`) and
/// the summary (as JSON on the last line with `--json`). Returns the summary.
pub fn run_bench(args: BenchArgs) -> Result<BenchSummary> {
    args.validate()?;
    let duration = match (args.duration_secs, args.message_count) {
        (Some(d), _) => Duration::from_secs(d),
        (None, Some(_)) => Duration::from_secs(24 * 3600),
        (None, None) => Duration::from_secs(10),
    };
    let report_every = Duration::from_secs(args.report_interval_secs.max(1));
    // Whole intervals, so the summary starts exactly where an interval line does.
    let warmup_intervals = args.warmup_secs.div_ceil(report_every.as_secs());
    let warmup = Duration::from_secs(warmup_intervals.saturating_mul(report_every.as_secs()));
    let control = Arc::new(Control {
        stop: AtomicBool::new(false),
        deadline: Instant::now() + warmup + duration,
        claimed: AtomicU64::new(0),
        limit: args.message_count,
    });
    let probe = if args.no_broker_profile {
        None
    } else {
        BrokerProbe::before(&args)
    };
    let (tx, rx) = mpsc::channel::<(usize, Snapshot)>();
    let mut handles = Vec::new();
    let mut workers = 0usize;
    let consumer_side = matches!(args.mode, BenchMode::Consumer | BenchMode::E2e);
    let producer_side = matches!(args.mode, BenchMode::Producer | BenchMode::E2e);
    // In e2e mode the consumer threads report (latency = born → consumed); producer
    // threads still run but their snapshots are not part of the summary.
    let (ready_tx, ready_rx) = mpsc::channel::<Result<()>>();
    if consumer_side && producer_side {
        // Consumers need the topic's route before anything is produced; a first send
        // creates a new topic from TBW102 the way a producer would.
        ensure_topic(&args)?;
    }
    if consumer_side {
        for t in 0..args.threads {
            let (a, c, tx, ready) = (args.clone(), control.clone(), tx.clone(), ready_tx.clone());
            let id = workers;
            workers += 1;
            handles.push(spawn_worker(format!("bench-consumer-{t}"), move || {
                consumer_thread(a, t, c, id, tx, ready)
            })?);
        }
        // Consumers position themselves before any message is produced.
        for _ in 0..args.threads {
            wait_ready(&ready_rx, &control)?;
        }
    }
    let reporting_workers = workers;
    if producer_side {
        for t in 0..args.threads {
            let (a, c, tx, ready) = (args.clone(), control.clone(), tx.clone(), ready_tx.clone());
            let id = workers;
            workers += 1;
            handles.push(spawn_worker(format!("bench-producer-{t}"), move || {
                producer_thread(a, t, c, id, tx, ready)
            })?);
        }
        for _ in 0..args.threads {
            wait_ready(&ready_rx, &control)?;
        }
    }
    drop(tx);
    let mut measured_since = Instant::now();
    let counted = |id: usize| match args.mode {
        BenchMode::E2e => id < reporting_workers,
        _ => true,
    };
    let mut total = new_histogram();
    let (mut total_msgs, mut total_bytes) = (0u64, 0u64);
    let mut total_failures: BTreeMap<String, u64> = BTreeMap::new();
    // Interval aggregation: one line once every live worker delivered its snapshot.
    let mut live = vec![true; workers];
    let mut pending: Vec<Option<Snapshot>> = (0..workers).map(|_| None).collect();
    let mut interval_no = 0u64;
    if !args.quiet {
        println!("{}", interval_header(args.mode));
    }
    while live.iter().any(|l| *l) {
        let (id, snap) = match rx.recv_timeout(report_every * 4) {
            Ok(x) => x,
            // A worker that died without its last snapshot must not hang the run.
            Err(mpsc::RecvTimeoutError::Timeout) if handles.iter().all(|h| h.is_finished()) => {
                break
            }
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        if snap.last {
            live[id] = false;
        }
        match &mut pending[id] {
            Some(p) => merge(p, snap),
            slot @ None => *slot = Some(snap),
        }
        let complete = (0..workers).all(|i| pending[i].is_some() || !live[i]);
        if complete {
            interval_no += 1;
            let mut line = Snapshot {
                messages: 0,
                bytes: 0,
                failures: BTreeMap::new(),
                hist: new_histogram(),
                last: false,
            };
            for (i, p) in pending.iter_mut().enumerate() {
                if let Some(s) = p.take() {
                    if counted(i) {
                        merge(&mut line, s);
                    }
                }
            }
            let warming = interval_no <= warmup_intervals;
            if !args.quiet {
                let mark = if warming { "  warm-up" } else { "" };
                println!("{}{mark}", interval_line(interval_no, report_every, &line));
            }
            if warming {
                measured_since = Instant::now();
                continue;
            }
            total_msgs += line.messages;
            total_bytes += line.bytes;
            let _ = total.add(&line.hist);
            for (k, v) in &line.failures {
                *total_failures.entry(k.clone()).or_insert(0) += v;
            }
        }
    }
    for h in handles {
        if h.join().is_err() {
            return Err(ClientError::Invalid(
                "a benchmark worker thread panicked".into(),
            ));
        }
    }
    // Up to the deadline, not to the last snapshot: after it a consumer still waits out
    // its last long poll (up to a second) with nothing left to receive.
    let measured_until = Instant::now().min(control.deadline);
    let elapsed = measured_until
        .saturating_duration_since(measured_since)
        .as_secs_f64()
        .max(1e-9);
    let ms = |us: u64| us as f64 / 1000.0;
    let empty = total.is_empty();
    let summary = BenchSummary {
        mode: args.mode,
        elapsed_secs: elapsed,
        messages: total_msgs,
        bytes: total_bytes,
        tps: total_msgs as f64 / elapsed,
        mb_per_s: total_bytes as f64 / elapsed / (1024.0 * 1024.0),
        avg_ms: if empty { 0.0 } else { total.mean() / 1000.0 },
        p50_ms: if empty {
            0.0
        } else {
            ms(total.value_at_quantile(0.50))
        },
        p99_ms: if empty {
            0.0
        } else {
            ms(total.value_at_quantile(0.99))
        },
        p999_ms: if empty {
            0.0
        } else {
            ms(total.value_at_quantile(0.999))
        },
        max_ms: if empty { 0.0 } else { ms(total.max()) },
        failures: total_failures.values().sum(),
        failures_by_code: total_failures,
        broker: probe.and_then(BrokerProbe::after),
    };
    println!(
        "summary: {} msgs in {:.1}s, {:.0} msg/s, {:.2} MB/s, RT avg {:.3} p50 {:.3} p99 {:.3} p999 {:.3} max {:.3} ms, {} failures{}",
        summary.messages,
        summary.elapsed_secs,
        summary.tps,
        summary.mb_per_s,
        summary.avg_ms,
        summary.p50_ms,
        summary.p99_ms,
        summary.p999_ms,
        summary.max_ms,
        summary.failures,
        failure_text(&summary.failures_by_code)
    );
    if let Some(b) = &summary.broker {
        println!("{}", b.summary_line());
    }
    if args.json {
        println!("{}", serde_json::to_string(&summary).unwrap_or_default());
    }
    Ok(summary)
}

fn spawn_worker(
    name: String,
    f: impl FnOnce() + Send + 'static,
) -> Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(f)
        .map_err(|e| ClientError::Invalid(format!("cannot spawn {name}: {e}")))
}

fn wait_ready(ready_rx: &mpsc::Receiver<Result<()>>, control: &Control) -> Result<()> {
    match ready_rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => {
            control.stop.store(true, Ordering::Relaxed);
            Err(e)
        }
        Err(_) => {
            control.stop.store(true, Ordering::Relaxed);
            Err(ClientError::Invalid(
                "a benchmark worker did not start within 30 s".into(),
            ))
        }
    }
}

fn merge(into: &mut Snapshot, from: Snapshot) {
    into.messages += from.messages;
    into.bytes += from.bytes;
    let _ = into.hist.add(&from.hist);
    for (k, v) in from.failures {
        *into.failures.entry(k).or_insert(0) += v;
    }
    into.last |= from.last;
}

fn interval_header(mode: BenchMode) -> String {
    let what = if mode == BenchMode::Producer {
        "send RT"
    } else {
        "born->consumed"
    };
    format!(
        "# sec      msg/s     MB/s   {what} ms: avg      p50      p99     p999      max   failures"
    )
}

fn interval_line(n: u64, every: Duration, s: &Snapshot) -> String {
    let secs = every.as_secs_f64();
    let ms = |us: u64| us as f64 / 1000.0;
    let (avg, p50, p99, p999, max) = if s.hist.is_empty() {
        (0.0, 0.0, 0.0, 0.0, 0.0)
    } else {
        (
            s.hist.mean() / 1000.0,
            ms(s.hist.value_at_quantile(0.5)),
            ms(s.hist.value_at_quantile(0.99)),
            ms(s.hist.value_at_quantile(0.999)),
            ms(s.hist.max()),
        )
    };
    let failures: u64 = s.failures.values().sum();
    format!(
        "{:5} {:10.0} {:8.2} {:>17.3} {:8.3} {:8.3} {:8.3} {:8.3} {:10}{}",
        n as f64 * secs,
        s.messages as f64 / secs,
        s.bytes as f64 / secs / (1024.0 * 1024.0),
        avg,
        p50,
        p99,
        p999,
        max,
        failures,
        failure_text(&s.failures)
    )
}

fn failure_text(f: &BTreeMap<String, u64>) -> String {
    if f.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = f.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!(" [{}]", parts.join(" "))
}

/// Splits `total` over `parts` as evenly as possible; part `i`'s share.
fn share(total: usize, parts: usize, i: usize) -> usize {
    total / parts + usize::from(i < total % parts)
}

/// Ships a snapshot every interval while the worker runs; the worker ships the last one
/// itself the moment it finishes, so the run's elapsed time ends with the work.
/// `sleep` is the worker runtime's timer (compio's, or tokio's for `--grpc`).
async fn reporter<F: std::future::Future>(
    stats: Rc<Stats>,
    done: Rc<Cell<bool>>,
    every: Duration,
    id: usize,
    tx: mpsc::Sender<(usize, Snapshot)>,
    sleep: impl Fn(Duration) -> F,
) {
    loop {
        sleep(every).await;
        if done.get() || tx.send((id, stats.take(false))).is_err() {
            return;
        }
    }
}

/// Raises `control.stop` at the run's deadline (one timer per worker thread instead of a
/// clock read per request); `sleep` is the worker runtime's timer.
async fn deadline_watch<F: std::future::Future>(
    control: Arc<Control>,
    sleep: impl FnOnce(Duration) -> F,
) {
    let left = control.deadline.saturating_duration_since(Instant::now());
    if !left.is_zero() {
        sleep(left).await;
    }
    control.stop.store(true, Ordering::Relaxed);
}

/// Open loop: the intended start of the next request of `per_request` messages at `rate`
/// messages/s from `started` (latency counts from it, so a stalled broker shows up as
/// latency instead of silently lowering the send rate). None in a closed loop.
fn next_intended(
    rate: Option<f64>,
    started: Instant,
    next_slot: &Cell<u64>,
    per_request: u64,
) -> Option<Instant> {
    let r = rate?;
    let slot = next_slot.get();
    next_slot.set(slot + per_request);
    Some(started + Duration::from_secs_f64(slot as f64 / r))
}

/// Marks the worker finished and ships its final snapshot.
fn finish(stats: &Stats, done: &Cell<bool>, id: usize, tx: &mpsc::Sender<(usize, Snapshot)>) {
    done.set(true);
    let _ = tx.send((id, stats.take(true)));
}

/// Sends one small message so the broker auto-creates `args.topic` (consumers placed
/// after it never see it).
fn ensure_topic(args: &BenchArgs) -> Result<()> {
    block_on(async {
        let producer = Producer::new(ProducerConfig {
            group: "benchmark_topic_setup".into(),
            namesrv_addrs: args.namesrv_addrs(),
            send_timeout_ms: args.timeout_ms,
            ..ProducerConfig::default()
        });
        let sent = producer
            .send(&Message::new(
                args.topic.clone(),
                &b"ringmq bench setup"[..],
            ))
            .await
            .map(|_| ());
        producer.shutdown().await;
        sent
    })
}

/// The worker's own compio runtime; a failure is reported on `ready` (and `None` returned).
fn worker_runtime(ready: &mpsc::Sender<Result<()>>) -> Option<compio::runtime::Runtime> {
    match compio::runtime::Runtime::new() {
        Ok(rt) => Some(rt),
        Err(e) => {
            let _ = ready.send(Err(ClientError::Invalid(format!(
                "cannot create the compio runtime: {e}"
            ))));
            None
        }
    }
}

fn producer_thread(
    args: BenchArgs,
    thread_no: usize,
    control: Arc<Control>,
    id: usize,
    tx: mpsc::Sender<(usize, Snapshot)>,
    ready: mpsc::Sender<Result<()>>,
) {
    if args.grpc.is_some() {
        let side = grpc::Side::Producer;
        return grpc::worker_thread(side, args, thread_no, control, id, tx, ready);
    }
    let Some(rt) = worker_runtime(&ready) else {
        return;
    };
    rt.block_on(async move {
        compio::runtime::spawn(deadline_watch(control.clone(), compio::time::sleep)).detach();
        let connections = share(args.connections, args.threads, thread_no).max(1);
        let producer = Producer::new(ProducerConfig {
            group: args
                .group
                .clone()
                .unwrap_or_else(|| "benchmark_producer".into()),
            namesrv_addrs: args.namesrv_addrs(),
            send_timeout_ms: args.timeout_ms,
            compress_threshold_bytes: None,
            client: ClientConfig {
                connections_per_address: connections,
                ..args.client_config()
            },
            ..ProducerConfig::default()
        });
        if let Err(e) = producer.publish_route(&args.topic).await {
            let _ = ready.send(Err(ClientError::Invalid(format!(
                "no route for topic {} from name server {}: {e}",
                args.topic, args.namesrv
            ))));
            return;
        }
        let (stats, done) = start_reporting(&args, id, &tx, &ready);
        let body = Bytes::from(make_body(args.message_bytes));
        let template = {
            let mut m = Message::new(args.topic.clone(), body);
            if let Some(t) = &args.tags {
                m = m
                    .with_tags(t)
                    .unwrap_or_else(|_| Message::new(args.topic.clone(), Bytes::new()));
            }
            m
        };
        let tasks = share(args.concurrency, args.threads, thread_no).max(1);
        let rate = args.rate_per_sec.map(|r| r / args.threads as f64);
        let started = Instant::now();
        let next_slot = Rc::new(Cell::new(0u64));
        let mut joins = Vec::new();
        for _ in 0..tasks {
            let (p, a, c, s, t, slot) = (
                producer.clone(),
                args.clone(),
                control.clone(),
                stats.clone(),
                template.clone(),
                next_slot.clone(),
            );
            joins.push(compio::runtime::spawn(async move {
                send_loop(p, a, c, s, t, rate, started, slot).await;
            }));
        }
        for j in joins {
            let _ = j.await;
        }
        finish(&stats, &done, id, &tx);
    });
}

#[allow(clippy::too_many_arguments)]
async fn send_loop(
    producer: Producer,
    args: BenchArgs,
    control: Arc<Control>,
    stats: Rc<Stats>,
    template: Message,
    rate: Option<f64>,
    started: Instant,
    next_slot: Rc<Cell<u64>>,
) {
    let per_request = if args.send_mode == SendMode::Batch {
        args.batch_size as u64
    } else {
        1
    };
    let body_len = template.body.len() as u64;
    let mut key_counter = 0u64;
    while control.running() {
        if !control.claim(per_request) {
            control.stop.store(true, Ordering::Relaxed);
            break;
        }
        let intended = match next_intended(rate, started, &next_slot, per_request) {
            Some(at) => {
                let now = Instant::now();
                if at > now {
                    compio::time::sleep(at - now).await;
                }
                at
            }
            None => Instant::now(),
        };
        // The template is sent by reference unless each message needs its own KEYS or
        // (e2e) its own send time: a clone per message (topic and property map) was
        // measurable load-generator CPU.
        let keyed;
        let msg = if args.mode == BenchMode::E2e {
            keyed = stamped(&template, wall_us(intended));
            &keyed
        } else if args.keys {
            key_counter += 1;
            let key = format!("{}-{}-{key_counter}", std::process::id(), now_ms());
            keyed = template
                .clone()
                .with_keys(&[&key])
                .unwrap_or_else(|_| template.clone());
            &keyed
        } else {
            &template
        };
        let outcome = match args.send_mode {
            SendMode::Sync => producer.send(msg).await.map(|r| r.status),
            SendMode::Async => {
                // Callback style: the send runs as its own task; this loop only waits for
                // its slot to free up, which is what bounds in-flight requests to `-w`.
                let p = producer.clone();
                let m = msg.clone();
                match compio::runtime::spawn(async move { p.send(&m).await.map(|r| r.status) })
                    .await
                {
                    Ok(r) => r,
                    Err(_) => Err(ClientError::Shutdown),
                }
            }
            SendMode::Oneway => producer.send_oneway(msg).await.map(|()| SendStatus::SendOk),
            SendMode::Batch => {
                let batch: Vec<Message> = (0..args.batch_size).map(|_| msg.clone()).collect();
                producer.send_batch(&batch).await.map(|r| r.status)
            }
        };
        match outcome {
            Ok(SendStatus::SendOk) => {
                stats.ok(per_request, per_request * body_len, intended.elapsed())
            }
            // Stored, but not as asked (no slave, a flush or slave timeout): a SYNC_FLUSH
            // or SYNC_MASTER figure must not count these as acknowledged.
            Ok(status) => stats.fail_label(status.name()),
            Err(e) => stats.fail(&e),
        }
    }
}

/// The first bytes of an e2e message body: this tag, then the intended send time in
/// microseconds since the Unix epoch (little endian). The message's born timestamp has
/// only millisecond resolution, too coarse for sub-millisecond end-to-end latency.
const SEND_TIME_TAG: &[u8; 4] = b"RMQT";
const SEND_TIME_BYTES: usize = 12;

/// Wall-clock microseconds of `at`, an instant of this run, from one anchor taken once
/// (producer and consumer share the process, hence the clock; later wall-clock steps do
/// not skew the measurement).
fn wall_us(at: Instant) -> u64 {
    static ANCHOR: std::sync::OnceLock<(Instant, u64)> = std::sync::OnceLock::new();
    let (anchor, anchor_us) = *ANCHOR.get_or_init(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        (Instant::now(), now.as_micros() as u64)
    });
    if at >= anchor {
        anchor_us + at.duration_since(anchor).as_micros() as u64
    } else {
        anchor_us.saturating_sub(anchor.duration_since(at).as_micros() as u64)
    }
}

/// A copy of `template` whose body starts with the send time (bodies shorter than the
/// stamp are sent as they are and measured by born timestamp).
fn stamped(template: &Message, send_us: u64) -> Message {
    let mut m = template.clone();
    if m.body.len() >= SEND_TIME_BYTES {
        let mut body = m.body.to_vec();
        stamp(&mut body, send_us);
        m.body = Bytes::from(body);
    }
    m
}

/// Writes the send-time stamp at the start of `body` (one at least `SEND_TIME_BYTES` long;
/// shorter bodies are left as they are).
fn stamp(body: &mut [u8], send_us: u64) {
    if body.len() >= SEND_TIME_BYTES {
        body[..4].copy_from_slice(SEND_TIME_TAG);
        body[4..SEND_TIME_BYTES].copy_from_slice(&send_us.to_le_bytes());
    }
}

/// End-to-end latency of a consumed message: from the stamped send time in microseconds
/// when the body carries one, else from the born timestamp (milliseconds).
fn e2e_latency(body: &[u8], born_ms: i64, now: Instant) -> Duration {
    if body.len() >= SEND_TIME_BYTES && &body[..4] == SEND_TIME_TAG {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(&body[4..SEND_TIME_BYTES]);
        let sent_us = u64::from_le_bytes(raw);
        return Duration::from_micros(wall_us(now).saturating_sub(sent_us));
    }
    Duration::from_millis((now_ms() - born_ms).max(0) as u64)
}

fn make_body(len: usize) -> Vec<u8> {
    // Printable and not all-equal, so accidental compression or dedup shows up.
    (0..len).map(|i| b'a' + (i % 26) as u8).collect()
}

/// Tells the run this worker is ready and starts its periodic reports on the compio
/// runtime; returns the worker's stats and the flag that ends the reports.
fn start_reporting(
    args: &BenchArgs,
    id: usize,
    tx: &mpsc::Sender<(usize, Snapshot)>,
    ready: &mpsc::Sender<Result<()>>,
) -> (Rc<Stats>, Rc<Cell<bool>>) {
    let (stats, done, report) = reporting(args, id, tx, ready, compio::time::sleep);
    compio::runtime::spawn(report).detach();
    (stats, done)
}

/// Tells the run this worker is ready; returns the worker's stats, the flag that ends the
/// reports, and the report loop for the worker's runtime to spawn (`sleep` is its timer).
fn reporting<F: std::future::Future>(
    args: &BenchArgs,
    id: usize,
    tx: &mpsc::Sender<(usize, Snapshot)>,
    ready: &mpsc::Sender<Result<()>>,
    sleep: fn(Duration) -> F,
) -> (
    Rc<Stats>,
    Rc<Cell<bool>>,
    impl std::future::Future<Output = ()>,
) {
    let _ = ready.send(Ok(()));
    let stats = Rc::new(Stats::new());
    let done = Rc::new(Cell::new(false));
    let every = Duration::from_secs(args.report_interval_secs.max(1));
    let report = reporter(stats.clone(), done.clone(), every, id, tx.clone(), sleep);
    (stats, done, report)
}

/// Popping tasks per broker in one consumer thread: pops in flight at once, so an ack
/// round trip does not idle the broker.
const POPS_IN_FLIGHT_PER_BROKER: usize = 4;

/// A `--pop` consumer thread: pops from every broker of the topic and acks each message
/// (a failed ack counts as a failure; the message comes back after its invisible time).
fn pop_consumer_thread(
    args: BenchArgs,
    control: Arc<Control>,
    id: usize,
    tx: mpsc::Sender<(usize, Snapshot)>,
    ready: mpsc::Sender<Result<()>>,
) {
    let Some(rt) = worker_runtime(&ready) else {
        return;
    };
    rt.block_on(async move {
        compio::runtime::spawn(deadline_watch(control.clone(), compio::time::sleep)).detach();
        let consumer = PopConsumer::new(PopConsumerConfig {
            group: args
                .group
                .clone()
                .unwrap_or_else(|| "benchmark_consumer".into()),
            namesrv_addrs: args.namesrv_addrs(),
            client: args.client_config(),
            // Short waits so the run ends promptly at its deadline.
            poll_time_ms: 1_000,
            ..PopConsumerConfig::default()
        });
        let brokers = match consumer.brokers(&args.topic).await {
            Ok(b) if !b.is_empty() => b,
            other => {
                let why = other
                    .err()
                    .map_or("no broker".to_string(), |e| e.to_string());
                let _ = ready.send(Err(ClientError::Invalid(format!(
                    "no route for topic {} from name server {}: {why}",
                    args.topic, args.namesrv
                ))));
                return;
            }
        };
        let (stats, done) = start_reporting(&args, id, &tx, &ready);
        let mut joins = Vec::new();
        let batch_ack = args.batch_ack;
        for (name, addr) in brokers {
            for _ in 0..POPS_IN_FLIGHT_PER_BROKER {
                let (c, ctl, s) = (consumer.clone(), control.clone(), stats.clone());
                let (name, addr, topic) = (name.clone(), addr.clone(), args.topic.clone());
                joins.push(compio::runtime::spawn(async move {
                    while ctl.running() {
                        match c.pop(&name, &addr, &topic, 32).await {
                            Ok(r) => {
                                let now = Instant::now();
                                if !ctl.claim(r.messages.len() as u64) {
                                    ctl.stop.store(true, Ordering::Relaxed);
                                }
                                if batch_ack && !r.messages.is_empty() {
                                    let acked = c.batch_ack(&topic, &r.messages).await;
                                    for m in &r.messages {
                                        let body = &m.message.body;
                                        let born = m.message.born_timestamp_ms;
                                        match &acked {
                                            Ok(()) => s.ok(
                                                1,
                                                body.len() as u64,
                                                e2e_latency(body, born, now),
                                            ),
                                            Err(e) => s.fail(e),
                                        }
                                    }
                                    continue;
                                }
                                for m in &r.messages {
                                    let body = &m.message.body;
                                    let lat = e2e_latency(body, m.message.born_timestamp_ms, now);
                                    match c.ack(&topic, m).await {
                                        Ok(()) => s.ok(1, body.len() as u64, lat),
                                        Err(e) => s.fail(&e),
                                    }
                                }
                            }
                            Err(e) => {
                                s.fail(&e);
                                compio::time::sleep(Duration::from_millis(100)).await;
                            }
                        }
                    }
                }));
            }
        }
        for j in joins {
            let _ = j.await;
        }
        finish(&stats, &done, id, &tx);
    });
}

fn consumer_thread(
    args: BenchArgs,
    thread_no: usize,
    control: Arc<Control>,
    id: usize,
    tx: mpsc::Sender<(usize, Snapshot)>,
    ready: mpsc::Sender<Result<()>>,
) {
    if args.grpc.is_some() {
        let side = grpc::Side::Consumer;
        return grpc::worker_thread(side, args, thread_no, control, id, tx, ready);
    }
    if args.pop {
        return pop_consumer_thread(args, control, id, tx, ready);
    }
    let Some(rt) = worker_runtime(&ready) else {
        return;
    };
    rt.block_on(async move {
        compio::runtime::spawn(deadline_watch(control.clone(), compio::time::sleep)).detach();
        let consumer = PullConsumer::new(PullConsumerConfig {
            group: args
                .group
                .clone()
                .unwrap_or_else(|| "benchmark_consumer".into()),
            namesrv_addrs: args.namesrv_addrs(),
            client: args.client_config(),
            ..PullConsumerConfig::default()
        });
        let queues = match consumer.subscribe_queues(&args.topic).await {
            Ok(q) if !q.is_empty() => q,
            Ok(_) => {
                let _ = ready.send(Err(ClientError::Invalid(format!(
                    "topic {} has no readable queue",
                    args.topic
                ))));
                return;
            }
            Err(e) => {
                let _ = ready.send(Err(ClientError::Invalid(format!(
                    "no route for topic {} from name server {}: {e}",
                    args.topic, args.namesrv
                ))));
                return;
            }
        };
        let mine: Vec<MessageQueue> = queues
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % args.threads == thread_no)
            .map(|(_, q)| q)
            .collect();
        let mut starts = Vec::new();
        for mq in &mine {
            let start = if args.from_start {
                consumer.min_offset(mq).await
            } else {
                consumer.max_offset(mq).await
            };
            match start {
                Ok(o) => starts.push(o),
                Err(e) => {
                    let _ = ready.send(Err(ClientError::Invalid(format!(
                        "cannot read the offsets of {mq}: {e}"
                    ))));
                    return;
                }
            }
        }
        let (stats, done) = start_reporting(&args, id, &tx, &ready);
        let mut joins = Vec::new();
        for (mq, start) in mine.into_iter().zip(starts) {
            let (c, ctl, s) = (consumer.clone(), control.clone(), stats.clone());
            let timeout_ms = args.timeout_ms;
            joins.push(compio::runtime::spawn(async move {
                let mut offset = start;
                // Short holds so the run ends promptly at its deadline.
                let opts = PullOptions {
                    suspend_ms: Some(1_000),
                    timeout_ms: timeout_ms.max(3_000),
                    ..PullOptions::default()
                };
                while ctl.running() {
                    match c.pull_with(&mq, offset, &opts).await {
                        Ok(r) => {
                            if r.status == PullStatus::Found {
                                let now = Instant::now();
                                let n = r.messages.len() as u64;
                                if !ctl.claim(n) {
                                    ctl.stop.store(true, Ordering::Relaxed);
                                }
                                for m in &r.messages {
                                    let lat = e2e_latency(&m.body, m.born_timestamp_ms, now);
                                    s.ok(1, m.body.len() as u64, lat);
                                }
                            }
                            offset = r.next_begin_offset;
                        }
                        Err(e) => {
                            s.fail(&e);
                            compio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            }));
        }
        for j in joins {
            let _ = j.await;
        }
        finish(&stats, &done, id, &tx);
    });
}

/// `ringmq bench producer|consumer|e2e ...`; `args[0]` is the program name, as clap wants.
/// Exit codes: 0 after a run or `--help`, 2 for bad flags, 1 when the run fails.
pub fn main(args: &[String]) -> ExitCode {
    let bench_args = match BenchArgs::try_parse_from(args) {
        Ok(bench_args) => bench_args,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run_bench(bench_args) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ringmq: bench failed: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An e2e body carries its send time in microseconds; latency is measured from it,
    /// not from the millisecond born timestamp, and short bodies fall back to that.
    #[test]
    fn e2e_latency_comes_from_the_stamped_send_time_in_microseconds() {
        let template = Message::new("T", Bytes::from(make_body(64)));
        let sent = Instant::now();
        let m = stamped(&template, wall_us(sent));
        assert_eq!(&m.body[..4], SEND_TIME_TAG);
        assert_eq!(m.body.len(), 64);
        let later = sent + Duration::from_micros(250);
        let lat = e2e_latency(&m.body, 0, later).as_micros();
        // Each instant is truncated to whole microseconds on its own.
        assert!((249..=251).contains(&lat), "{lat} µs");
        let short = stamped(
            &Message::new("T", Bytes::from_static(b"tiny")),
            wall_us(sent),
        );
        assert_eq!(&short.body[..], b"tiny");
        let born_ms = now_ms() - 5;
        assert!(e2e_latency(&short.body, born_ms, Instant::now()) >= Duration::from_millis(4));
    }

    #[test]
    fn flags_parse_like_rocketmq_tools() {
        let a = BenchArgs::try_parse_from([
            "bench",
            "producer",
            "-n",
            "10.0.0.1:9876;10.0.0.2:9876",
            "-t",
            "T",
            "-s",
            "2048",
            "-w",
            "128",
            "-c",
            "4",
            "--duration",
            "30",
            "--send-mode",
            "batch",
            "--batch-size",
            "8",
            "-r",
            "50000",
            "--json",
        ])
        .unwrap();
        assert_eq!(a.mode, BenchMode::Producer);
        assert_eq!(a.namesrv_addrs(), vec!["10.0.0.1:9876", "10.0.0.2:9876"]);
        assert_eq!(
            (a.message_bytes, a.concurrency, a.connections),
            (2048, 128, 4)
        );
        assert_eq!(a.duration_secs, Some(30));
        assert_eq!(a.send_mode, SendMode::Batch);
        assert_eq!(a.rate_per_sec, Some(50_000.0));
        assert!(a.json);
        assert!(a.validate().is_ok());
        let bad = BenchArgs::try_parse_from(["bench", "producer", "-w", "0"]).unwrap();
        assert!(bad.validate().is_err());
        assert!(BenchArgs::try_parse_from(["bench", "sideways"]).is_err());
    }

    /// The load generator's flags live here so the client library needs no command-line
    /// parser: its manifest names no clap dependency.
    #[test]
    fn client_library_does_not_depend_on_clap() {
        let manifest = include_str!("../../client/Cargo.toml");
        let clap_lines: Vec<&str> = manifest
            .lines()
            .filter(|l| l.trim_start().starts_with("clap"))
            .collect();
        assert!(clap_lines.is_empty(), "{clap_lines:?}");
    }

    #[test]
    fn shares_split_evenly() {
        let parts: Vec<usize> = (0..3).map(|i| share(10, 3, i)).collect();
        assert_eq!(parts, vec![4, 3, 3]);
        assert_eq!(parts.iter().sum::<usize>(), 10);
    }

    #[test]
    fn stats_snapshot_resets_and_merges() {
        let s = Stats::new();
        s.ok(1, 1024, Duration::from_millis(2));
        s.ok(1, 1024, Duration::from_millis(4));
        s.fail(&ClientError::Response {
            addr: "a".into(),
            request_code: 310,
            code: 2,
            remark: String::new(),
        });
        let mut snap = s.take(false);
        assert_eq!((snap.messages, snap.bytes), (2, 2048));
        assert_eq!(snap.failures.get("SYSTEM_BUSY(2)"), Some(&1));
        assert_eq!(snap.hist.len(), 2);
        let again = s.take(true);
        assert_eq!(again.messages, 0);
        merge(&mut snap, again);
        assert!(snap.last);
        assert!(interval_line(1, Duration::from_secs(1), &snap).contains("SYSTEM_BUSY(2)=1"));
    }
}
