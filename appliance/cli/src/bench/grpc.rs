//! `ringmq bench ... --grpc HOST:PORT`: the producer and consumer loads over RocketMQ 5.x's
//! gRPC protocol (`apache.rocketmq.v2.MessagingService`), so one broker can be measured
//! through both of its front doors with the same flags, histograms and summary.
//!
//! The calls are the ones the official 5.x SDKs make: a producer sends with SendMessage
//! (one message, or `--batch-size` with `--send-mode batch`), a consumer receives with
//! ReceiveMessage (a POP over every queue of the topic on the broker) and acks with
//! AckMessage. Each worker thread runs a tokio current-thread runtime with its own HTTP/2
//! connections (`-c` split over the threads) and `-w` tasks; requests carry the client id
//! every SDK sends. Settings are not exchanged over Telemetry: the broker's defaults for a
//! receive are what the bench wants, and a send needs none.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use ringmq_client::error::{ClientError, Result};
use ringmq_grpc::pb;
use ringmq_grpc::pb::messaging_service_client::MessagingServiceClient;
use ringmq_grpc::pb::receive_message_response::Content;
use tokio::task::JoinSet;
use tonic::transport::{Channel, Endpoint};

use super::{
    deadline_watch, e2e_latency, finish, make_body, next_intended, reporting, share, stamp,
    wall_us, BenchArgs, BenchMode, Control, SendMode, Snapshot, Stats,
};

/// Receives in flight per consumer thread (as `POPS_IN_FLIGHT_PER_BROKER` for Remoting).
const RECEIVES_IN_FLIGHT: usize = super::POPS_IN_FLIGHT_PER_BROKER;
/// Messages per receive (upstream's most per POP).
const RECEIVE_BATCH: i32 = 32;
/// Invisible time of a received message: far longer than an ack takes.
const INVISIBLE_S: i64 = 30;
/// Long-polling time of a receive: the broker's shortest (5 s); a finished run aborts the
/// polls still held instead of waiting for them.
const LONG_POLLING_S: i64 = 5;
/// How often a worker looks at the stop flag to abort its tasks.
const STOP_CHECK_MS: u64 = 20;

type Client = MessagingServiceClient<Channel>;

/// Where the answers of one gRPC call go: a status code other than OK, or the transport's
/// failure, as a failure label of the summary.
fn failure_label(status: Option<&pb::Status>) -> Option<String> {
    let code = status.map_or(pb::Code::Unspecified as i32, |s| s.code);
    match pb::Code::try_from(code) {
        Ok(pb::Code::Ok) => None,
        Ok(c) => Some(c.as_str_name().to_string()),
        Err(_) => Some(format!("code {code}")),
    }
}

fn transport_label(e: &tonic::Status) -> String {
    format!("grpc {:?}", e.code())
}

/// The worker's tokio runtime; a failure is reported on `ready` (and `None` returned).
fn worker_runtime(ready: &mpsc::Sender<Result<()>>) -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            let _ = ready.send(Err(ClientError::Invalid(format!(
                "cannot create the tokio runtime: {e}"
            ))));
            None
        }
    }
}

/// One worker's connections and identity.
struct Session {
    clients: Vec<Client>,
    client_id: String,
    timeout: Duration,
}

impl Session {
    async fn connect(args: &BenchArgs, thread_no: usize) -> Result<Session> {
        let addr = args.grpc.as_deref().unwrap_or_default();
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| ClientError::Invalid(format!("--grpc {addr}: {e}")))?
            .connect_timeout(Duration::from_millis(args.timeout_ms))
            .tcp_nodelay(true);
        let connections = share(args.connections, args.threads, thread_no).max(1);
        let mut clients = Vec::with_capacity(connections);
        for _ in 0..connections {
            let channel = endpoint.connect().await.map_err(|e| {
                ClientError::Invalid(format!("cannot connect to the gRPC endpoint {addr}: {e}"))
            })?;
            clients.push(MessagingServiceClient::new(channel));
        }
        Ok(Session {
            clients,
            client_id: format!("127.0.0.1@{}@{thread_no}@ringmq-bench", std::process::id()),
            timeout: Duration::from_millis(args.timeout_ms),
        })
    }

    /// The `n`th task's client (tasks spread over the connections).
    fn client(&self, n: usize) -> Client {
        self.clients[n % self.clients.len()].clone()
    }

    /// `message` with the metadata every SDK sends and the per-request timeout.
    fn request<T>(&self, message: T, timeout: Duration) -> tonic::Request<T> {
        let mut r = tonic::Request::new(message);
        if let Ok(v) = self.client_id.parse() {
            r.metadata_mut().insert("x-mq-client-id", v);
        }
        r.metadata_mut().insert(
            "x-mq-language",
            tonic::metadata::MetadataValue::from_static("RUST"),
        );
        r.set_timeout(timeout);
        r
    }

    /// QueryRoute: the topic exists and the endpoint answers before the run starts.
    async fn check_route(&self, topic: &str) -> Result<()> {
        let request = pb::QueryRouteRequest {
            topic: Some(resource(topic)),
            endpoints: None,
        };
        let answer = self
            .client(0)
            .query_route(self.request(request, self.timeout))
            .await
            .map_err(|e| ClientError::Invalid(format!("QueryRoute {topic}: {e}")))?
            .into_inner();
        match failure_label(answer.status.as_ref()) {
            None if !answer.message_queues.is_empty() => Ok(()),
            None => Err(ClientError::Invalid(format!(
                "QueryRoute {topic}: no queue"
            ))),
            Some(code) => Err(ClientError::Invalid(format!(
                "QueryRoute {topic}: {code} {}",
                answer.status.map(|s| s.message).unwrap_or_default()
            ))),
        }
    }
}

fn resource(name: &str) -> pb::Resource {
    pb::Resource {
        resource_namespace: String::new(),
        name: name.to_string(),
    }
}

/// Runs `tasks` on this thread until they end or the run stops (deadline, message count),
/// then aborts what is left: a long poll still held must not stretch the run's time.
async fn run_until_stopped(mut tasks: JoinSet<()>, control: &Control) {
    loop {
        tokio::select! {
            done = tasks.join_next() => if done.is_none() { return },
            () = tokio::time::sleep(Duration::from_millis(STOP_CHECK_MS)) => {
                if !control.running() {
                    tasks.abort_all();
                    while tasks.join_next().await.is_some() {}
                    return;
                }
            }
        }
    }
}

/// Which side of the broker a worker loads.
#[derive(Debug, Clone, Copy)]
pub(super) enum Side {
    Producer,
    Consumer,
}

/// A worker thread: its runtime, connections, a QueryRoute for the topic, the deadline and
/// the reports; then its tasks, on the worker's own thread (`LocalSet`: the stats are per
/// thread, not shared), until they end or the run stops.
pub(super) fn worker_thread(
    side: Side,
    args: BenchArgs,
    thread_no: usize,
    control: Arc<Control>,
    id: usize,
    tx: mpsc::Sender<(usize, Snapshot)>,
    ready: mpsc::Sender<Result<()>>,
) {
    let Some(rt) = worker_runtime(&ready) else {
        return;
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        tokio::task::spawn_local(deadline_watch(control.clone(), tokio::time::sleep));
        let session = match Session::connect(&args, thread_no).await {
            Ok(s) => s,
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        if let Err(e) = session.check_route(&args.topic).await {
            let _ = ready.send(Err(e));
            return;
        }
        let (stats, done, report) = reporting(&args, id, &tx, &ready, tokio::time::sleep);
        tokio::task::spawn_local(report);
        let session = Rc::new(session);
        let tasks = match side {
            Side::Producer => senders(&session, &stats, &args, &control, thread_no),
            Side::Consumer => receivers(&session, &stats, &args, &control),
        };
        run_until_stopped(tasks, &control).await;
        finish(&stats, &done, id, &tx);
    });
}

/// The producer's `-w` share of send tasks.
fn senders(
    session: &Rc<Session>,
    stats: &Rc<Stats>,
    args: &BenchArgs,
    control: &Arc<Control>,
    thread_no: usize,
) -> JoinSet<()> {
    let tasks = share(args.concurrency, args.threads, thread_no).max(1);
    let rate = args.rate_per_sec.map(|r| r / args.threads as f64);
    let started = Instant::now();
    let next_slot = Rc::new(Cell::new(0u64));
    let sent = Rc::new(Cell::new(0u64));
    let body = Rc::new(make_body(args.message_bytes));
    let mut set = JoinSet::new();
    for n in 0..tasks {
        let task = SendTask {
            client: session.client(n),
            session: session.clone(),
            stats: stats.clone(),
            control: control.clone(),
            args: args.clone(),
            body: body.clone(),
            next_slot: next_slot.clone(),
            sent: sent.clone(),
            thread_no,
        };
        set.spawn_local(task.run(rate, started));
    }
    set
}

/// One producer task: sends one request at a time.
struct SendTask {
    client: Client,
    session: Rc<Session>,
    stats: Rc<Stats>,
    control: Arc<Control>,
    args: BenchArgs,
    body: Rc<Vec<u8>>,
    next_slot: Rc<Cell<u64>>,
    /// Messages built by this thread (the message ids' counter).
    sent: Rc<Cell<u64>>,
    thread_no: usize,
}

impl SendTask {
    async fn run(mut self, rate: Option<f64>, started: Instant) {
        let per_request = match self.args.send_mode {
            SendMode::Batch => self.args.batch_size as u64,
            _ => 1,
        };
        let body_len = self.body.len() as u64;
        while self.control.running() {
            if !self.control.claim(per_request) {
                self.control.stop.store(true, Ordering::Relaxed);
                break;
            }
            let intended = match next_intended(rate, started, &self.next_slot, per_request) {
                Some(at) => {
                    tokio::time::sleep_until(at.into()).await;
                    at
                }
                None => Instant::now(),
            };
            let messages = (0..per_request).map(|_| self.message(intended)).collect();
            let request = pb::SendMessageRequest { messages };
            let request = self.session.request(request, self.session.timeout);
            match self.client.send_message(request).await {
                Ok(answer) => match failure_label(answer.get_ref().status.as_ref()) {
                    None => self
                        .stats
                        .ok(per_request, per_request * body_len, intended.elapsed()),
                    Some(code) => self.stats.fail_label(&code),
                },
                Err(e) => self.stats.fail_label(&transport_label(&e)),
            }
        }
    }

    /// A message as an SDK builds it: a unique id, the born time, the body (stamped with
    /// the intended send time in e2e mode).
    fn message(&self, intended: Instant) -> pb::Message {
        let n = self.sent.get();
        self.sent.set(n + 1);
        let mut body = self.body.as_ref().clone();
        if self.args.mode == BenchMode::E2e {
            stamp(&mut body, wall_us(intended));
        }
        let born_ms = (wall_us(intended) / 1_000) as i64;
        pb::Message {
            topic: Some(resource(&self.args.topic)),
            user_properties: Default::default(),
            system_properties: Some(pb::SystemProperties {
                tag: self.args.tags.clone(),
                message_id: format!("{:08X}{:04X}{n:020X}", std::process::id(), self.thread_no),
                message_type: pb::MessageType::Normal as i32,
                born_timestamp: Some(prost_types::Timestamp {
                    seconds: born_ms / 1_000,
                    nanos: ((born_ms % 1_000) * 1_000_000) as i32,
                }),
                ..Default::default()
            }),
            body,
        }
    }
}

/// The consumer's receive tasks.
fn receivers(
    session: &Rc<Session>,
    stats: &Rc<Stats>,
    args: &BenchArgs,
    control: &Arc<Control>,
) -> JoinSet<()> {
    let group = args
        .group
        .clone()
        .unwrap_or_else(|| "benchmark_consumer".into());
    let mut set = JoinSet::new();
    for n in 0..RECEIVES_IN_FLIGHT {
        let task = ReceiveTask {
            client: session.client(n),
            session: session.clone(),
            stats: stats.clone(),
            control: control.clone(),
            group: group.clone(),
            topic: args.topic.clone(),
            batch_ack: args.batch_ack,
        };
        set.spawn_local(task.run());
    }
    set
}

/// One consumer task: receives a batch, acks it, again.
struct ReceiveTask {
    client: Client,
    session: Rc<Session>,
    stats: Rc<Stats>,
    control: Arc<Control>,
    group: String,
    topic: String,
    batch_ack: bool,
}

impl ReceiveTask {
    async fn run(mut self) {
        while self.control.running() {
            match self.receive().await {
                Ok(messages) => {
                    let now = Instant::now();
                    if !self.control.claim(messages.len() as u64) {
                        self.control.stop.store(true, Ordering::Relaxed);
                    }
                    self.ack(&messages, now).await;
                }
                Err(label) => {
                    self.stats.fail_label(&label);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// One ReceiveMessage; an empty answer (MESSAGE_NOT_FOUND after the long poll) is no
    /// failure.
    async fn receive(&mut self) -> std::result::Result<Vec<pb::Message>, String> {
        let request = pb::ReceiveMessageRequest {
            group: Some(resource(&self.group)),
            message_queue: Some(pb::MessageQueue {
                topic: Some(resource(&self.topic)),
                id: -1,
                ..Default::default()
            }),
            filter_expression: Some(pb::FilterExpression {
                r#type: pb::FilterType::Tag as i32,
                expression: "*".into(),
            }),
            batch_size: RECEIVE_BATCH,
            invisible_duration: Some(prost_types::Duration {
                seconds: INVISIBLE_S,
                nanos: 0,
            }),
            auto_renew: false,
            long_polling_timeout: Some(prost_types::Duration {
                seconds: LONG_POLLING_S,
                nanos: 0,
            }),
            attempt_id: None,
        };
        let wait = self.session.timeout + Duration::from_secs(LONG_POLLING_S as u64);
        let request = self.session.request(request, wait);
        let mut stream = self
            .client
            .receive_message(request)
            .await
            .map_err(|e| transport_label(&e))?
            .into_inner();
        let mut messages = Vec::new();
        while let Some(frame) = stream.message().await.map_err(|e| transport_label(&e))? {
            match frame.content {
                Some(Content::Status(s)) => {
                    if s.code == pb::Code::MessageNotFound as i32 {
                        return Ok(Vec::new());
                    }
                    if let Some(code) = failure_label(Some(&s)) {
                        return Err(code);
                    }
                }
                Some(Content::Message(m)) => messages.push(m),
                _ => {}
            }
        }
        Ok(messages)
    }

    /// Acks `messages` and counts each acked message with its born → received latency.
    /// One AckMessage per message, all of a receive in flight at once (as an SDK consumer
    /// acking from its consumption threads), or one AckMessage for all with `--batch-ack`.
    async fn ack(&mut self, messages: &[pb::Message], received: Instant) {
        let per_call = if self.batch_ack { messages.len() } else { 1 };
        let calls = messages.chunks(per_call.max(1)).map(|chunk| {
            let request = pb::AckMessageRequest {
                group: Some(resource(&self.group)),
                topic: Some(resource(&self.topic)),
                entries: chunk.iter().map(ack_entry).collect(),
            };
            let request = self.session.request(request, self.session.timeout);
            let mut client = self.client.clone();
            async move {
                let outcome = match client.ack_message(request).await {
                    Ok(answer) => failure_label(answer.get_ref().status.as_ref()),
                    Err(e) => Some(transport_label(&e)),
                };
                (chunk, outcome)
            }
        });
        for (chunk, outcome) in futures_util::future::join_all(calls).await {
            for m in chunk {
                match &outcome {
                    None => {
                        let latency = e2e_latency(&m.body, born_ms(m), received);
                        self.stats.ok(1, m.body.len() as u64, latency);
                    }
                    Some(code) => self.stats.fail_label(code),
                }
            }
        }
    }
}

fn ack_entry(m: &pb::Message) -> pb::AckMessageEntry {
    let sp = m.system_properties.as_ref();
    pb::AckMessageEntry {
        message_id: sp.map(|sp| sp.message_id.clone()).unwrap_or_default(),
        receipt_handle: sp
            .and_then(|sp| sp.receipt_handle.clone())
            .unwrap_or_default(),
        lite_topic: None,
    }
}

/// The born time of a received message, in milliseconds (0 when it has none).
fn born_ms(m: &pb::Message) -> i64 {
    m.system_properties
        .as_ref()
        .and_then(|sp| sp.born_timestamp.as_ref())
        .map_or(0, |t| t.seconds * 1_000 + i64::from(t.nanos) / 1_000_000)
}
