//! Multi-process integration tests: the `ringmq` binary run as a namesrv and a broker
//! child process each, driven through ringmq's own client (issue 6 item 8, issue 10
//! item 5): nothing lost across a SIGTERM restart (SYNC_FLUSH), SIGKILL leaves `abort`
//! and the next start recovers, a restart in the middle of delay delivery and in the
//! middle of a consume, bad input for every request code the broker serves, unknown
//! codes, and malformed frames.
//!
//! Needs `target/debug/ringmq` (build it first: `cargo build -p ringmq-cli`, or set
//! RINGMQ_BIN). Processes listen on 127.0.0.1 only; the broker keeps one port across its
//! restarts, as an operator's would. Only the children started here are signalled, by
//! pid, and a still-running child is killed when its handle drops.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ringmq_client::{
    block_on, Admin, Blocking, ClientConfig, ConsumeResult, Message, MessageExt, MessageQueue,
    Producer, PullConsumer, PushConsumer, PushConsumerConfig, RemotingClient, SendStatus,
    TopicSpec,
};
use ringmq_remoting::RemotingCommand;
use ringmq_tests::{
    base_broker_conf, frame_bytes, free_broker_port, namesrv_conf, pull_all_from, route_brokers,
    unique, wait_until, RawConn, RawRead, ServerProcess, TempDir,
};

const BOOT: Duration = Duration::from_secs(30);
/// How long a SIGTERMed broker may take to flush, checkpoint and exit.
const STOP_BOUND: Duration = Duration::from_secs(20);
const SHORT: Duration = Duration::from_millis(50);

/// Creates `topic` with `queues` queues on the broker at `broker` and waits until the
/// name server at `namesrv` routes it.
fn create_topic_at(namesrv: &str, broker: &str, topic: &str, queues: i32) {
    let ns = namesrv.to_string();
    let a =
        block_on(async move { Admin::new(RemotingClient::new(ClientConfig::default()), vec![ns]) });
    block_on(a.create_topic(broker, &TopicSpec::new(topic).with_queues(queues)))
        .unwrap_or_else(|e| panic!("create {topic}: {e}"));
    wait_until(
        &format!("route of {topic}"),
        Duration::from_secs(15),
        SHORT,
        || route_brokers(namesrv, topic),
    );
}

/// A `ringmq namesrv` child with its config, files and log under `dir`.
fn spawn_namesrv(dir: &TempDir) -> ServerProcess {
    let ns_dir = dir.path().join("namesrv");
    std::fs::create_dir_all(&ns_dir).expect("namesrv dir");
    let ns_conf = dir.path().join("namesrv.conf");
    std::fs::write(&ns_conf, namesrv_conf(&ns_dir, 0)).expect("namesrv.conf");
    ServerProcess::spawn(
        &["namesrv", "-c", ns_conf.to_str().unwrap()],
        &dir.path().join("namesrv.log"),
        BOOT,
    )
}

/// A namesrv process and a broker process sharing a temp directory.
struct ProcCluster {
    namesrv: ServerProcess,
    broker: Option<ServerProcess>,
    broker_conf: PathBuf,
    broker_name: String,
    port: u16,
    dir: TempDir,
    restarts: u32,
}

impl ProcCluster {
    fn start(extra_conf: &str) -> ProcCluster {
        let dir = TempDir::new("proc");
        let namesrv = spawn_namesrv(&dir);
        let broker_name = unique("pbroker");
        let port = free_broker_port();
        let conf = format!(
            "{}listenPort={port}\n{extra_conf}\n",
            base_broker_conf(
                &broker_name,
                &unique("pcluster"),
                &namesrv.addr,
                &dir.path().join("store")
            )
        );
        let broker_conf = dir.path().join("broker.conf");
        std::fs::write(&broker_conf, conf).expect("broker.conf");
        let mut c = ProcCluster {
            namesrv,
            broker: None,
            broker_conf,
            broker_name,
            port,
            dir,
            restarts: 0,
        };
        c.start_broker();
        c
    }

    fn start_broker(&mut self) {
        let log = self
            .dir
            .path()
            .join(format!("broker-{}.log", self.restarts));
        self.restarts += 1;
        let b = ServerProcess::spawn(
            &["broker", "-c", self.broker_conf.to_str().unwrap()],
            &log,
            BOOT,
        );
        assert_eq!(b.addr, format!("127.0.0.1:{}", self.port), "broker address");
        self.broker = Some(b);
        let ns = self.namesrv.addr.clone();
        let name = self.broker_name.clone();
        wait_until(
            "broker registered (TBW102 route)",
            Duration::from_secs(20),
            SHORT,
            || {
                let names = route_brokers(&ns, "TBW102")?;
                if names.contains(&name) {
                    Ok(())
                } else {
                    Err(format!("{names:?}"))
                }
            },
        );
    }

    fn broker(&mut self) -> &mut ServerProcess {
        self.broker.as_mut().expect("broker running")
    }

    /// Waits until nothing listens on the broker's port any more.
    fn wait_port_free(&self) {
        let port = self.port;
        wait_until(
            &format!("port {port} released"),
            Duration::from_secs(10),
            SHORT,
            || {
                TcpListener::bind(("127.0.0.1", port))
                    .map(drop)
                    .map_err(|e| e.to_string())
            },
        );
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn abort_file(&self) -> PathBuf {
        self.dir.path().join("store/abort")
    }

    /// SIGTERM; the broker must exit 0 within [`STOP_BOUND`] and leave no `abort` file.
    fn stop_broker_cleanly(&mut self) {
        let b = self.broker.as_mut().expect("broker running");
        b.sigterm();
        let started = Instant::now();
        let status = b.wait_exit(STOP_BOUND);
        let tail = b.log_tail(3000);
        let status = status.unwrap_or_else(|| {
            panic!("broker still running {STOP_BOUND:?} after SIGTERM; log:\n{tail}")
        });
        assert_eq!(
            status.code(),
            Some(0),
            "broker exit status after SIGTERM (took {:?}); log:\n{tail}",
            started.elapsed()
        );
        assert!(
            !self.abort_file().exists(),
            "clean shutdown left {}",
            self.abort_file().display()
        );
        self.broker = None;
    }

    fn producer(&self) -> Producer {
        let cfg = ringmq_client::ProducerConfig {
            group: unique("PG"),
            namesrv_addrs: vec![self.namesrv.addr.clone()],
            route_ttl_ms: 1_000,
            ..Default::default()
        };
        block_on(async move { Producer::new(cfg) })
    }

    fn admin(&self) -> Admin {
        let ns = self.namesrv.addr.clone();
        block_on(async move { Admin::new(RemotingClient::new(ClientConfig::default()), vec![ns]) })
    }

    fn create_topic(&self, topic: &str, queues: i32) {
        create_topic_at(&self.namesrv.addr, &self.addr(), topic, queues);
    }

    fn pull_all(&self, topic: &str, queues: i32, expected: usize) -> Vec<MessageExt> {
        let ids: Vec<i32> = (0..queues).collect();
        pull_all_from(
            &self.addr(),
            &self.broker_name,
            topic,
            &ids,
            expected,
            Duration::from_secs(30),
        )
    }
}

/// Sends `n` messages with distinct, checkable bodies; returns msgId → body.
fn send_n(p: &Producer, topic: &str, n: usize, tag: &str) -> BTreeMap<String, Vec<u8>> {
    block_on(async {
        let mut sent = BTreeMap::new();
        for i in 0..n {
            let body: Vec<u8> = format!("{tag}-{i}-")
                .into_bytes()
                .into_iter()
                .chain((0..(i % 97) as u32 * 13).map(|x| (x * 31 + i as u32) as u8))
                .collect();
            let r = p
                .send(&Message::new(topic, body.clone()))
                .await
                .unwrap_or_else(|e| panic!("send {i}: {e}"));
            assert_eq!(r.status, SendStatus::SendOk, "send {i} stored and flushed");
            sent.insert(r.msg_id, body);
        }
        sent
    })
}

fn assert_same(sent: &BTreeMap<String, Vec<u8>>, got: &[MessageExt]) {
    let mut seen = BTreeSet::new();
    for m in got {
        let body = sent
            .get(&m.msg_id)
            .unwrap_or_else(|| panic!("unexpected message {}", m.msg_id));
        assert!(seen.insert(m.msg_id.clone()), "{} returned twice", m.msg_id);
        assert_eq!(&m.body[..], &body[..], "body of {}", m.msg_id);
    }
    assert_eq!(seen.len(), sent.len(), "every sent message returned");
}

// ---------------------------------------------------------------------------------------
// restarts

#[test]
fn sigterm_exits_zero_and_restart_loses_nothing_with_sync_flush() {
    let mut c = ProcCluster::start("flushDiskType=SYNC_FLUSH");
    let topic = unique("T_restart");
    c.create_topic(&topic, 4);
    let p = c.producer();
    let sent = send_n(&p, &topic, 300, "sync");
    drop(p);

    c.stop_broker_cleanly();
    c.start_broker();
    let got = c.pull_all(&topic, 4, sent.len());
    assert_same(&sent, &got);

    // Still a working broker: new sends land after the recovered ones.
    let p = c.producer();
    let more = send_n(&p, &topic, 20, "after");
    let got = c.pull_all(&topic, 4, sent.len() + more.len());
    let mut all = sent.clone();
    all.extend(more);
    assert_same(&all, &got);

    // A live config update is written to the `-c` file and survives a restart.
    let mut update = BTreeMap::new();
    update.insert("longPollingEnable".to_string(), "false".to_string());
    block_on(c.admin().update_broker_config(&c.addr(), &update)).expect("update broker config");
    c.stop_broker_cleanly();
    let text = std::fs::read_to_string(&c.broker_conf).expect("broker.conf");
    assert!(
        text.lines().any(|l| l.trim() == "longPollingEnable=false"),
        "update saved to the config file:\n{text}"
    );
    c.start_broker();
    let cfg = block_on(c.admin().broker_config(&c.addr())).expect("broker config");
    assert_eq!(
        cfg.get("longPollingEnable").map(String::as_str),
        Some("false"),
        "updated key after the restart"
    );

    // The namesrv stops on SIGTERM with status 0 too.
    c.namesrv.sigterm();
    let status = c.namesrv.wait_exit(STOP_BOUND).expect("namesrv exits");
    assert_eq!(status.code(), Some(0), "namesrv exit status");
}

#[test]
fn sigkill_leaves_abort_file_and_next_start_recovers() {
    let mut c = ProcCluster::start("flushDiskType=SYNC_FLUSH");
    let topic = unique("T_kill");
    c.create_topic(&topic, 2);
    assert!(
        c.abort_file().exists(),
        "a running broker holds the abort file"
    );
    let p = c.producer();
    let sent = send_n(&p, &topic, 200, "killed");
    drop(p);

    c.broker().sigkill();
    c.broker = None;
    assert!(
        c.abort_file().exists(),
        "SIGKILL leaves the abort file for the next start"
    );
    // The dead broker's io_uring still holds its listener for a moment (see
    // `immediate_restart_after_sigkill_binds_the_same_port`); restart once it is gone.
    c.wait_port_free();
    c.start_broker();
    let got = c.pull_all(&topic, 2, sent.len());
    assert_same(&sent, &got);
    // Queue offsets continue after the recovered ones.
    let p = c.producer();
    let more = send_n(&p, &topic, 10, "more");
    let got = c.pull_all(&topic, 2, sent.len() + more.len());
    let mut all = sent.clone();
    all.extend(more);
    assert_same(&all, &got);
    let mut per_queue: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for m in &got {
        per_queue
            .entry(m.queue_id)
            .or_default()
            .push(m.queue_offset);
    }
    for (q, offsets) in per_queue {
        let want: Vec<i64> = (0..offsets.len() as i64).collect();
        assert_eq!(offsets, want, "queue {q} offsets are dense after recovery");
    }
    c.stop_broker_cleanly();
}

/// A crashed broker restarted at once (systemd's default RestartSec is 100 ms) must be
/// able to listen on its port again.
#[test]
fn immediate_restart_after_sigkill_binds_the_same_port() {
    let mut c = ProcCluster::start("");
    for round in 0..5 {
        c.broker().sigkill();
        c.broker = None;
        // No waiting: what a supervisor does.
        c.start_broker();
        assert!(
            c.broker().try_status().is_none(),
            "round {round}: restarted broker is running"
        );
    }
}

#[test]
fn restart_during_delay_delivery_delivers_each_once_and_never_early() {
    // Level 1 = 1 s, level 5 = 8 s.
    let mut c = ProcCluster::start("messageDelayLevel=1s 2s 3s 5s 8s");
    let topic = unique("T_delay_restart");
    c.create_topic(&topic, 1);
    let p = c.producer();
    let mut want: BTreeMap<String, i64> = BTreeMap::new();
    let send = |level: i32, i: usize| {
        let m = Message::new(&topic, format!("level{level}-{i}"))
            .with_delay_level(level)
            .unwrap();
        block_on(p.send(&m)).expect("delayed send").msg_id
    };
    for i in 0..10 {
        want.insert(send(1, i), 1_000);
    }
    // The short ones are delivered before the restart...
    let before = c.pull_all(&topic, 1, 10);
    assert_eq!(before.len(), 10);
    // ...the long ones are still pending when the broker stops.
    let sent_at = Instant::now();
    for i in 0..10 {
        want.insert(send(5, i), 8_000);
    }
    drop(p);
    c.stop_broker_cleanly();
    c.start_broker();
    assert!(
        sent_at.elapsed() < Duration::from_secs(8),
        "restart took {:?}: the delayed messages were due before it finished",
        sent_at.elapsed()
    );
    let got = c.pull_all(&topic, 1, 20);
    // Extra time for a late duplicate to show up.
    std::thread::sleep(Duration::from_millis(3_000));
    let got_later = c.pull_all(&topic, 1, 20);
    assert_eq!(got.len(), got_later.len(), "nothing delivered twice later");
    let mut seen = BTreeSet::new();
    for m in &got {
        let delay = *want
            .get(&m.msg_id)
            .unwrap_or_else(|| panic!("unexpected {}", m.msg_id));
        assert!(
            seen.insert(m.msg_id.clone()),
            "{} delivered twice",
            m.msg_id
        );
        let waited = m.store_timestamp_ms - m.born_timestamp_ms;
        assert!(
            waited >= delay,
            "{} delivered {waited} ms after it was born, before its {delay} ms delay",
            m.msg_id
        );
    }
    assert_eq!(seen.len(), want.len(), "every delayed message delivered");
}

/// One consumed message.
#[derive(Clone, Debug)]
struct Consumed {
    queue_id: i32,
    queue_offset: i64,
    msg_id: String,
}

type Log = Arc<Mutex<Vec<Consumed>>>;

/// A push consumer on its own runtime thread; its listener takes `pause` per message so
/// that the test can act while it is in the middle of the topic.
fn start_push(
    cfg: PushConsumerConfig,
    log: Log,
    pause: Duration,
) -> Blocking<RefCell<Option<PushConsumer>>> {
    let rt = Blocking::start("push", || RefCell::new(None)).expect("consumer thread");
    rt.call(move |slot: Rc<RefCell<Option<PushConsumer>>>| async move {
        let listener: ringmq_client::MessageListener = Rc::new(move |msgs: &[MessageExt]| {
            for m in msgs {
                std::thread::sleep(pause);
                log.lock().unwrap().push(Consumed {
                    queue_id: m.queue_id,
                    queue_offset: m.queue_offset,
                    msg_id: m.msg_id.clone(),
                });
            }
            ConsumeResult::Success
        });
        let c = PushConsumer::start(cfg, listener).await?;
        *slot.borrow_mut() = Some(c);
        Ok(())
    })
    .expect("push consumer starts");
    rt
}

#[test]
fn restart_during_consume_keeps_committed_offsets() {
    let mut c = ProcCluster::start("flushDiskType=SYNC_FLUSH");
    let topic = unique("T_consume_restart");
    c.create_topic(&topic, 4);
    let p = c.producer();
    const N: usize = 400;
    let sent = send_n(&p, &topic, N, "consume");
    drop(p);
    let group = unique("CG_restart");
    let ns = c.namesrv.addr.clone();
    let push_cfg = || {
        let mut cfg = PushConsumerConfig {
            group: group.clone(),
            namesrv_addrs: vec![ns.clone()],
            consume_from: ringmq_client::ConsumeFrom::FirstOffset,
            suspend_ms: 2_000,
            pull_timeout_ms: 10_000,
            pull_error_delay_ms: 300,
            rebalance_interval_ms: 1_000,
            heartbeat_interval_ms: 1_000,
            persist_interval_ms: 300,
            pull_batch_size: 8,
            ..PushConsumerConfig::default()
        };
        cfg.subscriptions.insert(topic.clone(), "*".into());
        cfg
    };

    // Consumer A runs until it is part-way through, then the broker stops under it.
    let log_a: Log = Arc::new(Mutex::new(Vec::new()));
    let a = start_push(push_cfg(), log_a.clone(), Duration::from_millis(10));
    wait_until(
        "consumer A part-way",
        Duration::from_secs(30),
        SHORT,
        || {
            let n = log_a.lock().unwrap().len();
            if n >= N / 4 {
                Ok(())
            } else {
                Err(format!("{n} consumed"))
            }
        },
    );
    // What the broker has acknowledged as committed just before it stops.
    let admin = c.admin();
    let stats =
        block_on(admin.consume_stats(&c.addr(), &group, Some(&topic))).expect("consume stats");
    let committed_before: BTreeMap<i32, i64> = stats
        .offsets
        .iter()
        .map(|(mq, o)| (mq.queue_id, o.consumer_offset))
        .collect();
    assert!(
        committed_before.values().sum::<i64>() > 0,
        "consumer A committed progress: {committed_before:?}"
    );
    c.stop_broker_cleanly();
    // Consumer A goes away with the broker (its in-memory progress is lost with it).
    drop(a);
    let consumed_a = log_a.lock().unwrap().clone();
    assert!(
        consumed_a.len() < N,
        "the restart should happen mid-consume ({} of {N} consumed)",
        consumed_a.len()
    );

    c.start_broker();
    // The offsets survived the restart.
    let q = |id: i32| MessageQueue::new(topic.clone(), c.broker_name.clone(), id);
    let cfg = c_pull_config(&c, &group);
    let pc = block_on(async move { PullConsumer::new(cfg) });
    let mut committed_after = BTreeMap::new();
    for id in 0..4 {
        let off = block_on(pc.query_offset(&q(id)))
            .expect("query offset")
            .unwrap_or(0);
        let before = committed_before.get(&id).copied().unwrap_or(0);
        assert!(
            off >= before,
            "queue {id}: committed offset {off} after restart < {before} before"
        );
        let consumed_max = consumed_a
            .iter()
            .filter(|m| m.queue_id == id)
            .map(|m| m.queue_offset + 1)
            .max()
            .unwrap_or(0);
        assert!(
            off <= consumed_max,
            "queue {id}: committed {off} beyond what was consumed ({consumed_max})"
        );
        committed_after.insert(id, off);
    }

    // Consumer B resumes: nothing committed comes again, nothing is lost.
    let log_b: Log = Arc::new(Mutex::new(Vec::new()));
    let b = start_push(push_cfg(), log_b.clone(), Duration::ZERO);
    let missing = || {
        let a: BTreeSet<String> = consumed_a.iter().map(|m| m.msg_id.clone()).collect();
        let b: BTreeSet<String> = log_b
            .lock()
            .unwrap()
            .iter()
            .map(|m| m.msg_id.clone())
            .collect();
        sent.keys()
            .filter(|id| !a.contains(*id) && !b.contains(*id))
            .count()
    };
    wait_until(
        "every message consumed by A or B",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || match missing() {
            0 => Ok(()),
            n => Err(format!("{n} missing")),
        },
    );
    let consumed_b = log_b.lock().unwrap().clone();
    for m in &consumed_b {
        assert!(
            m.queue_offset >= committed_after[&m.queue_id],
            "committed message redelivered: queue {} offset {} < committed {}",
            m.queue_id,
            m.queue_offset,
            committed_after[&m.queue_id]
        );
        assert!(sent.contains_key(&m.msg_id), "unexpected {}", m.msg_id);
    }
    let _ = b.run(|slot: Rc<RefCell<Option<PushConsumer>>>| async move {
        let c = slot.borrow_mut().take();
        if let Some(c) = c {
            c.shutdown().await;
        }
    });
}

fn c_pull_config(c: &ProcCluster, group: &str) -> ringmq_client::PullConsumerConfig {
    ringmq_client::PullConsumerConfig {
        group: group.to_string(),
        namesrv_addrs: vec![c.namesrv.addr.clone()],
        route_ttl_ms: 1_000,
        client: ClientConfig::default(),
    }
}

// ---------------------------------------------------------------------------------------
// bad input

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Str,
    Int,
    Long,
    Bool,
}

/// A request code the broker serves and its header (required fields first).
struct Handler {
    code: i32,
    required: &'static [(&'static str, Kind)],
    optional_numbers: &'static [&'static str],
    /// Upstream answers SUCCESS with no header (these codes need none).
    empty_ok: bool,
}

const fn h(
    code: i32,
    required: &'static [(&'static str, Kind)],
    optional_numbers: &'static [&'static str],
    empty_ok: bool,
) -> Handler {
    Handler {
        code,
        required,
        optional_numbers,
        empty_ok,
    }
}

use Kind::{Bool, Int, Long, Str};

const SEND_V1: &[(&str, Kind)] = &[
    ("producerGroup", Str),
    ("topic", Str),
    ("defaultTopic", Str),
    ("defaultTopicQueueNums", Int),
    ("queueId", Int),
    ("sysFlag", Int),
    ("bornTimestamp", Long),
    ("flag", Int),
];
const SEND_V2: &[(&str, Kind)] = &[
    ("a", Str),
    ("b", Str),
    ("c", Str),
    ("d", Int),
    ("e", Int),
    ("f", Int),
    ("g", Long),
    ("h", Int),
];
const PULL: &[(&str, Kind)] = &[
    ("consumerGroup", Str),
    ("topic", Str),
    ("queueId", Int),
    ("queueOffset", Long),
    ("maxMsgNums", Int),
    ("sysFlag", Int),
    ("commitOffset", Long),
    ("suspendTimeoutMillis", Long),
    ("subVersion", Long),
];
const TOPIC_QUEUE: &[(&str, Kind)] = &[("topic", Str), ("queueId", Int)];

/// Every request code the broker serves (issue 10 item 5's list).
const HANDLERS: &[Handler] = &[
    h(10, SEND_V1, &["reconsumeTimes", "maxReconsumeTimes"], false),
    h(310, SEND_V2, &["j", "l"], false),
    h(320, SEND_V2, &["j", "l"], false),
    h(11, PULL, &["maxMsgBytes", "requestSource"], false),
    h(361, PULL, &["maxMsgBytes", "requestSource"], false),
    h(
        12,
        &[
            ("topic", Str),
            ("key", Str),
            ("maxNum", Int),
            ("beginTimestamp", Long),
            ("endTimestamp", Long),
        ],
        &[],
        false,
    ),
    h(
        14,
        &[("consumerGroup", Str), ("topic", Str), ("queueId", Int)],
        &[],
        false,
    ),
    h(
        15,
        &[
            ("consumerGroup", Str),
            ("topic", Str),
            ("queueId", Int),
            ("commitOffset", Long),
        ],
        &[],
        false,
    ),
    h(
        29,
        &[("topic", Str), ("queueId", Int), ("timestamp", Long)],
        &[],
        false,
    ),
    h(30, TOPIC_QUEUE, &[], false),
    h(31, TOPIC_QUEUE, &[], false),
    h(32, TOPIC_QUEUE, &[], false),
    h(33, &[("offset", Long)], &[], false),
    // Heartbeat, lock/unlock and check-client-config carry JSON bodies, no header.
    h(34, &[], &[], false),
    h(35, &[("clientID", Str)], &[], false),
    h(
        36,
        &[("offset", Long), ("group", Str), ("delayLevel", Int)],
        &["maxReconsumeTimes"],
        false,
    ),
    h(38, &[("consumerGroup", Str)], &[], false),
    h(41, &[], &[], false),
    h(42, &[], &[], false),
    h(46, &[], &[], false),
    h(
        17,
        &[
            ("topic", Str),
            ("defaultTopic", Str),
            ("readQueueNums", Int),
            ("writeQueueNums", Int),
            ("perm", Int),
            ("topicFilterType", Str),
            ("order", Bool),
        ],
        &["topicSysFlag"],
        false,
    ),
    h(21, &[], &["topicSeq", "maxTopicNum"], true),
    h(200, &[], &[], false),
    h(201, &[], &["groupSeq", "maxGroupNum"], true),
    h(202, &[("topic", Str)], &[], false),
    h(203, &[("consumerGroup", Str)], &[], false),
    h(204, &[("producerGroup", Str)], &[], false),
    h(207, &[("groupName", Str)], &[], false),
    h(208, &[("consumerGroup", Str)], &[], false),
    h(215, &[("topic", Str)], &[], false),
    h(
        222,
        &[
            ("group", Str),
            ("topic", Str),
            ("timestamp", Long),
            ("isForce", Bool),
        ],
        &["queueId", "offset"],
        false,
    ),
    // UPDATE_BROKER_CONFIG: upstream treats a missing body as "nothing to change".
    h(25, &[], &[], true),
    h(26, &[], &[], true),
    h(28, &[], &[], true),
    h(351, &[("topic", Str)], &[], false),
    h(352, &[("group", Str)], &[], false),
];

/// Required upstream, but not indispensable: `headers.md` §0.1 asks the broker to be
/// lenient there, so a send without them may be stored (with defaults) or refused.
fn dispensable(code: i32, field: &str) -> bool {
    match code {
        10 => matches!(
            field,
            "producerGroup"
                | "defaultTopic"
                | "defaultTopicQueueNums"
                | "sysFlag"
                | "bornTimestamp"
                | "flag"
        ),
        310 | 320 => matches!(field, "a" | "c" | "d" | "f" | "g" | "h"),
        _ => false,
    }
}

/// A valid value for a header field (the existing topic, a scratch group, ...).
fn valid_value(field: &str, kind: Kind, topic: &str, group: &str) -> String {
    match (field, kind) {
        ("topic" | "b", _) => topic.to_string(),
        ("defaultTopic" | "c", _) => "TBW102".into(),
        ("topicFilterType", _) => "SINGLE_TAG".into(),
        ("perm", _) => "6".into(),
        ("readQueueNums" | "writeQueueNums" | "defaultTopicQueueNums" | "d", _) => "4".into(),
        ("maxMsgNums" | "maxNum", _) => "4".into(),
        ("endTimestamp", _) => i64::MAX.to_string(),
        ("timestamp" | "bornTimestamp" | "g", _) => "1700000000000".into(),
        ("delayLevel", _) => "1".into(),
        (_, Str) => group.to_string(),
        (_, Int | Long) => "0".into(),
        (_, Bool) => "false".into(),
    }
}

/// Sends bad requests and records every one that was not answered as expected.
struct Probe {
    client: RemotingClient,
    addr: String,
    failures: Vec<String>,
    sent: usize,
}

impl Probe {
    /// Sends one request; it must be answered, and with an error unless `success_ok`.
    fn check(
        &mut self,
        code: i32,
        what: &str,
        ext: Vec<(String, String)>,
        body: Option<&[u8]>,
        success_ok: bool,
    ) {
        let mut req = RemotingCommand::request(code, 0);
        for (k, v) in &ext {
            req.ext_fields.insert(k.clone(), v.clone());
        }
        if let Some(b) = body {
            req = req.with_body(b.to_vec());
        }
        self.sent += 1;
        match block_on(self.client.invoke(&self.addr, req, Duration::from_secs(5))) {
            Ok(resp) => {
                if resp.code == 0 && !success_ok {
                    self.failures.push(format!(
                        "code {code} {what}: SUCCESS (remark {:?}); expected an error",
                        resp.remark
                    ));
                }
            }
            Err(e) => self
                .failures
                .push(format!("code {code} {what}: no answer: {e}")),
        }
    }
}

const GARBAGE: &[u8] = b"\x00\xff{\"not\":json\x01\x02]]]\xc3\x28 garbage \x7f";

#[test]
fn bad_input_for_every_handler_gets_an_answer_and_broker_stays_up() {
    let mut c = ProcCluster::start("");
    let addr = c.addr();
    let topic = unique("T_bad");
    c.create_topic(&topic, 2);
    // A dedicated scratch group; deleting or resetting it harms nothing.
    let group = unique("G_bad");
    let mut probe = Probe {
        client: block_on(async { RemotingClient::new(ClientConfig::default()) }),
        addr: addr.clone(),
        failures: Vec::new(),
        sent: 0,
    };

    // Creating and deleting topics work on a scratch name, not on the topic in use.
    let scratch = unique("T_bad_scratch");
    for hd in HANDLERS {
        let t = if matches!(hd.code, 17 | 215) {
            &scratch
        } else {
            &topic
        };
        let valid: Vec<(String, String)> = hd
            .required
            .iter()
            .map(|(f, k)| (f.to_string(), valid_value(f, *k, t, &group)))
            .collect();
        // Batches need the batch flag to be batches.
        let with_batch = |mut v: Vec<(String, String)>| {
            if hd.code == 320 {
                v.push(("m".into(), "true".into()));
            }
            v
        };
        probe.check(hd.code, "no header, no body", Vec::new(), None, hd.empty_ok);
        probe.check(
            hd.code,
            "no header, garbage body",
            Vec::new(),
            Some(GARBAGE),
            hd.empty_ok,
        );
        // Each required field missing in turn.
        for (i, (f, _)) in hd.required.iter().enumerate() {
            let mut ext = valid.clone();
            ext.remove(i);
            probe.check(
                hd.code,
                &format!("missing {f}"),
                with_batch(ext),
                Some(b"body"),
                dispensable(hd.code, f),
            );
        }
        // Each number wrong: text, out of range for i64, out of range for its type.
        for (i, (f, k)) in hd.required.iter().enumerate() {
            if !matches!(k, Int | Long) {
                continue;
            }
            let mut bad = vec![("abc", false), ("99999999999999999999", false)];
            if *k == Int {
                bad.push(("9223372036854775807", false));
            } else {
                // In range: the handler decides (offset far beyond the end, ...).
                bad.push(("9223372036854775807", true));
                bad.push(("-9223372036854775808", true));
            }
            for (value, success_ok) in bad {
                let mut ext = valid.clone();
                ext[i].1 = value.to_string();
                probe.check(
                    hd.code,
                    &format!("{f}={value}"),
                    with_batch(ext),
                    Some(b"body"),
                    success_ok,
                );
            }
        }
        // Optional numbers may be read leniently; they still need an answer.
        for f in hd.optional_numbers {
            for value in ["abc", "99999999999999999999"] {
                let mut ext = valid.clone();
                ext.push((f.to_string(), value.to_string()));
                probe.check(
                    hd.code,
                    &format!("optional {f}={value}"),
                    with_batch(ext),
                    Some(b"body"),
                    true,
                );
            }
        }
        // Valid header, garbage body.
        if !hd.required.is_empty() || hd.code == 320 {
            probe.check(
                hd.code,
                "valid header, garbage body",
                with_batch(valid.clone()),
                Some(GARBAGE),
                // Bodies are opaque except for batches.
                hd.code != 320,
            );
        }
        // Still alive after each handler's round.
        let alive = RemotingCommand::request(30, 0)
            .with_ext("topic", topic.clone())
            .with_ext("queueId", "0");
        if let Err(e) = block_on(probe.client.invoke(&addr, alive, Duration::from_secs(5))) {
            probe
                .failures
                .push(format!("broker not answering after code {}: {e}", hd.code));
            break;
        }
    }
    let (failures, sent_count) = (probe.failures, probe.sent);
    assert!(sent_count > 300, "only {sent_count} bad requests sent");
    assert!(
        c.broker().try_status().is_none(),
        "broker process exited; log:\n{}",
        c.broker().log_tail(3000)
    );
    // A normal send still works.
    let p = c.producer();
    let r = block_on(p.send(&Message::new(&topic, "still fine"))).expect("send after bad input");
    assert_eq!(r.status, SendStatus::SendOk);
    assert!(
        failures.is_empty(),
        "{} of {sent_count} bad requests mishandled:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn unknown_codes_answer_not_supported_and_bad_frames_close_only_their_connection() {
    let mut c = ProcCluster::start("");
    let addr = c.addr();
    let topic = unique("T_frames");
    c.create_topic(&topic, 1);

    // A connection that must survive everything below.
    let mut good = RawConn::connect(&addr);
    let mut opaque = 100;
    let mut good_roundtrip = |stage: &str| {
        opaque += 1;
        let f = frame_bytes(
            30,
            opaque,
            &[("topic", topic.as_str()), ("queueId", "0")],
            b"",
        );
        assert!(good.send(&f), "{stage}: the good connection was closed");
        match good.read(Duration::from_secs(5)) {
            RawRead::Response(r) => {
                assert_eq!(r.code, 0, "{stage}: GET_MAX_OFFSET on the good connection");
                assert_eq!(r.opaque, opaque);
            }
            other => panic!("{stage}: good connection answered {other:?}"),
        }
    };
    good_roundtrip("start");

    for code in [12345, 99999, -7, 0] {
        let mut conn = RawConn::connect(&addr);
        assert!(conn.send(&frame_bytes(code, 7, &[], b"")));
        match conn.read(Duration::from_secs(5)) {
            RawRead::Response(r) => {
                assert_eq!(r.code, 3, "unknown code {code}: REQUEST_CODE_NOT_SUPPORTED");
                assert_eq!(r.opaque, 7);
                assert!(r.is_response());
            }
            other => panic!("unknown code {code}: {other:?}"),
        }
    }
    good_roundtrip("after unknown codes");

    let valid = frame_bytes(30, 9, &[("topic", topic.as_str()), ("queueId", "0")], b"");
    let header_len = u32::from_be_bytes(valid[4..8].try_into().unwrap()) & 0x00FF_FFFF;
    // Header length larger than the frame.
    let mut header_beyond = valid.clone();
    header_beyond[5..8].copy_from_slice(&(header_len + 1000).to_be_bytes()[1..]);
    let not_json = {
        let text = b"this is not a json header";
        let mut f = ((4 + text.len()) as u32).to_be_bytes().to_vec();
        f.extend_from_slice(&(text.len() as u32).to_be_bytes());
        f.extend_from_slice(text);
        f
    };
    let mut bad_type = valid.clone();
    bad_type[4] = 7; // unknown serialize type
                     // (name, bytes, must the connection close?)
    let cases: Vec<(&str, Vec<u8>, bool)> = vec![
        (
            "oversize frame (2 GiB length)",
            [0x7F, 0xFF, 0xFF, 0xFF, 0, 0, 0, 2, b'{', b'}'].to_vec(),
            true,
        ),
        (
            "frame length above 16 MiB",
            (17u32 * 1024 * 1024)
                .to_be_bytes()
                .into_iter()
                .chain([0, 0, 0, 2, b'{', b'}'])
                .collect(),
            true,
        ),
        ("zero-length frame", vec![0, 0, 0, 0], true),
        (
            "negative length",
            vec![0xFF, 0xFF, 0xFF, 0xF0, 0, 0, 0, 0],
            true,
        ),
        ("header length beyond the frame", header_beyond, true),
        // Upstream closes on any decode failure; an error answer is tolerated here.
        ("header is not JSON", not_json, false),
        ("unknown serialize type", bad_type, false),
        (
            "random bytes",
            (0..64u32).map(|i| (i * 97 + 13) as u8).collect(),
            false,
        ),
    ];

    for (name, bytes, must_close) in cases {
        let mut conn = RawConn::connect(&addr);
        let _ = conn.send(&bytes);
        match conn.read(Duration::from_secs(5)) {
            RawRead::Closed => {}
            RawRead::Response(r) if !must_close && r.code != 0 => {
                eprintln!(
                    "{name}: answered {} {:?} instead of closing",
                    r.code, r.remark
                );
            }
            other => panic!("{name}: expected the connection to close, got {other:?}"),
        }
        good_roundtrip(name);
    }
    assert!(
        c.broker().try_status().is_none(),
        "broker process exited; log:\n{}",
        c.broker().log_tail(3000)
    );
}

#[path = "process/broker_print_ha.rs"]
mod broker_print_ha;
#[path = "process/controller_failover.rs"]
mod controller_failover;
#[path = "process/controller_kill.rs"]
mod controller_kill;
#[path = "process/core_map.rs"]
mod core_map;
#[path = "process/pop_kill.rs"]
mod pop_kill;
#[path = "process/replication.rs"]
mod replication;
#[path = "process/timer_kill.rs"]
mod timer_kill;
#[path = "process/up_disk.rs"]
mod up_disk;
