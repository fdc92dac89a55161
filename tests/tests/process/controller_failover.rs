//! Controller mode end to end, every server its own `ringmq` process on loopback: three
//! controllers elect the master of three brokers of one broker name; a producer sends
//! with `allAckInSyncStateSet=true`, so an acknowledged message is on every SyncStateSet
//! member; the master is killed with SIGKILL at a random point while sends run, round
//! after round. After each round a new master serves sends, the old one restarts and
//! rejoins as a slave (truncating what it alone held), and every acknowledged message is
//! on the current master exactly once (audited by message id). One round also kills the
//! controllers' Raft leader with the master. A slave frozen with SIGSTOP leaves the
//! SyncStateSet, sends go on without it, and it rejoins once thawed.

use super::controller_kill::{admin, agreed_leader};
use super::*;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// Failovers in CI; `benches/controller/broker_failover.sh` runs 100
/// (`RINGMQ_FAILOVER_ROUNDS`), also with upstream's default intervals
/// (`RINGMQ_FAILOVER_DEFAULT_TIMEOUTS=1`).
const ROUNDS: usize = 10;

fn rounds() -> usize {
    std::env::var("RINGMQ_FAILOVER_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ROUNDS)
}

/// The timing keys: tuned for a quick failover, or upstream's defaults.
fn timing_conf() -> (&'static str, &'static str) {
    match std::env::var("RINGMQ_FAILOVER_DEFAULT_TIMEOUTS").as_deref() {
        Ok("1") => (
            "scanNotActiveBrokerInterval=5000\n",
            "brokerHeartbeatInterval=1000\ncontrollerHeartBeatTimeoutMills=10000\n\
             syncBrokerMetadataPeriod=5000\ncheckSyncStateSetPeriod=5000\n\
             haMaxTimeSlaveNotCatchup=15000\n",
        ),
        _ => (
            "scanNotActiveBrokerInterval=500\n",
            "brokerHeartbeatInterval=200\ncontrollerHeartBeatTimeoutMills=3000\n\
             syncBrokerMetadataPeriod=1000\ncheckSyncStateSetPeriod=1000\n\
             haMaxTimeSlaveNotCatchup=5000\n",
        ),
    }
}
/// The round that also kills the controller leader.
const CONTROLLER_KILL_ROUND: usize = 1;
const QUEUES: i32 = 4;
const REJOIN: Duration = Duration::from_secs(60);
const FAILOVER: Duration = Duration::from_secs(30);

fn spawn_controller(dir: &Path, conf: &Path, i: usize) -> ServerProcess {
    let log = dir.join(format!("controller-n{i}.log"));
    ServerProcess::spawn(&["controller", "-c", conf.to_str().unwrap()], &log, BOOT)
}

fn controller_conf(dir: &Path, peers: &str, i: usize) -> PathBuf {
    let conf = dir.join(format!("controller-n{i}.conf"));
    let text = format!(
        "controllerDLegerGroup=g1\ncontrollerDLegerPeers={peers}\ncontrollerDLegerSelfId=n{i}\n\
         controllerStorePath={}\nbindAddress=127.0.0.1\n{}\
         ringmq.controller.heartbeatIntervalMs=100\nringmq.controller.electionTimeoutMinMs=600\n\
         ringmq.controller.electionTimeoutMaxMs=1200\n",
        dir.join(format!("controller-store-n{i}")).display(),
        timing_conf().0
    );
    std::fs::write(&conf, text).expect("controller.conf");
    conf
}

/// One broker process of the group, restartable on its port and store.
struct Node {
    proc: Option<ServerProcess>,
    conf: PathBuf,
    port: u16,
    label: String,
    starts: u32,
}

impl Node {
    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn start(&mut self, dir: &Path) {
        let log = dir.join(format!("{}-{}.log", self.label, self.starts));
        self.starts += 1;
        let p = ServerProcess::spawn(&["broker", "-c", self.conf.to_str().unwrap()], &log, BOOT);
        self.proc = Some(p);
    }
}

struct Group {
    namesrv: ServerProcess,
    controllers: Vec<Option<ServerProcess>>,
    controller_confs: Vec<PathBuf>,
    controller_list: Vec<String>,
    controller_addrs: String,
    name: String,
    nodes: Vec<Node>,
    /// Declared last, so dropped last: every process above is killed (and reaped) before
    /// the directory goes, and none recreates files in it afterwards.
    dir: TempDir,
}

impl Group {
    fn start() -> Group {
        let dir = TempDir::new("controller-failover");
        let namesrv = spawn_namesrv(&dir);
        let addrs: Vec<String> = (0..3)
            .map(|_| format!("127.0.0.1:{}", free_broker_port()))
            .collect();
        let peers: Vec<String> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("n{i}-{a}"))
            .collect();
        let controller_confs: Vec<PathBuf> = (0..3)
            .map(|i| controller_conf(dir.path(), &peers.join(";"), i))
            .collect();
        let controllers = (0..3)
            .map(|i| Some(spawn_controller(dir.path(), &controller_confs[i], i)))
            .collect();
        agreed_leader(&addrs, None);
        let mut group = Group {
            namesrv,
            controllers,
            controller_confs,
            controller_addrs: addrs.join(";"),
            controller_list: addrs,
            name: unique("ctlbroker"),
            nodes: Vec::new(),
            dir,
        };
        let cluster = unique("ctlcluster");
        for i in 0..3 {
            let node = group.node(&cluster, i);
            group.nodes.push(node);
        }
        let dir = group.dir.path().to_path_buf();
        for node in &mut group.nodes {
            node.start(&dir);
        }
        group
    }

    fn node(&self, cluster: &str, i: usize) -> Node {
        let port = free_broker_port();
        let store = self.dir.path().join(format!("store-{i}"));
        let text = format!(
            "{}listenPort={port}\nenableControllerMode=true\ncontrollerAddr={}\n\
             {}allAckInSyncStateSet=true\ninSyncReplicas=2\n\
             minInSyncReplicas=2\n\
             syncFlushTimeout=3000\nhaSendHeartbeatInterval=500\nslaveReadEnable=true\n\
             mappedFileSizeCommitLog=4194304\n",
            base_broker_conf(&self.name, cluster, &self.namesrv.addr, &store)
                .replace("brokerId=0\n", "")
                .replace("mappedFileSizeCommitLog=67108864\n", ""),
            self.controller_addrs,
            timing_conf().1
        );
        let conf = self.dir.path().join(format!("broker-{i}.conf"));
        std::fs::write(&conf, text).expect("broker.conf");
        Node {
            proc: None,
            conf,
            port,
            label: format!("broker-{i}"),
            starts: 0,
        }
    }

    /// The controllers' view: (master address, SyncStateSet size).
    fn sync_state(&self) -> Result<(String, usize), String> {
        let (ok, text) = admin(&[
            "getSyncStateSet",
            "-a",
            &self.controller_addrs,
            "-b",
            &self.name,
        ]);
        let field = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim().to_string())
        };
        match (ok, field("#MasterAddr\t"), field("#SyncStateSetNums\t")) {
            (true, Some(master), Some(n)) if master != "null" && !master.is_empty() => {
                Ok((master, n.parse().map_err(|_| text.clone())?))
            }
            _ => Err(text),
        }
    }

    /// Waits until a master leads a SyncStateSet of all three brokers; returns its address.
    fn wait_full_set(&self, what: &str) -> String {
        wait_until(what, REJOIN, Duration::from_millis(200), || {
            match self.sync_state() {
                Ok((master, 3)) => Ok(master),
                Ok(other) => Err(format!("{other:?}")),
                Err(e) => Err(e),
            }
        })
    }

    /// Kills the controllers' Raft leader; returns its index.
    fn kill_controller_leader(&mut self) -> usize {
        let leader = agreed_leader(&self.controller_list, None);
        let i = self
            .controller_list
            .iter()
            .position(|a| *a == leader)
            .expect("a member leads");
        self.controllers[i]
            .as_mut()
            .expect("controller running")
            .sigkill();
        i
    }

    fn restart_controller(&mut self, i: usize) {
        self.controllers[i] = Some(spawn_controller(
            self.dir.path(),
            &self.controller_confs[i],
            i,
        ));
    }

    /// How often the brokers' logs say they restarted in place to truncate.
    fn truncating_restarts(&self) -> usize {
        (0..3)
            .flat_map(|i| (0..=rounds()).map(move |n| format!("broker-{i}-{n}.log")))
            .filter_map(|f| std::fs::read_to_string(self.dir.path().join(f)).ok())
            .map(|text| text.matches("restarting in place").count())
            .sum()
    }

    fn stop_all(&mut self) {
        for n in &mut self.nodes {
            if let Some(p) = n.proc.as_mut() {
                p.sigterm();
            }
        }
        for c in self.controllers.iter().flatten() {
            c.sigterm();
        }
    }

    fn create_topic_everywhere(&self, topic: &str) {
        for node in &self.nodes {
            let (ns, addr, t) = (self.namesrv.addr.clone(), node.addr(), topic.to_string());
            let a = block_on(async move {
                Admin::new(RemotingClient::new(ClientConfig::default()), vec![ns])
            });
            block_on(a.create_topic(&addr, &TopicSpec::new(&t).with_queues(QUEUES)))
                .unwrap_or_else(|e| panic!("create {t} on {addr}: {e}"));
        }
    }

    fn node_at(&mut self, addr: &str) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.addr() == addr)
            .unwrap_or_else(|| panic!("no broker at {addr}"))
    }
}

/// Sends until `stop`, one message at a time, recording the id of each acknowledged
/// message and when its acknowledgement came.
fn send_until(
    namesrv: String,
    topic: String,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(String, Instant)>>>,
) {
    let cfg = ringmq_client::ProducerConfig {
        group: unique("PG"),
        namesrv_addrs: vec![namesrv],
        route_ttl_ms: 200,
        send_timeout_ms: 3_000,
        retry_times: 0,
        ..Default::default()
    };
    block_on(async move {
        let p = Producer::new(cfg);
        let mut i = 0u64;
        while !stop.load(Ordering::Acquire) {
            i += 1;
            let body = format!("failover-{i}").into_bytes();
            match p.send(&Message::new(&topic, body)).await {
                Ok(r) if r.status == SendStatus::SendOk => {
                    acked.lock().unwrap().push((r.msg_id, Instant::now()))
                }
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        p.shutdown().await;
    })
}

#[test]
fn the_master_killed_mid_send_is_replaced_and_no_acknowledged_message_is_lost() {
    let mut g = Group::start();
    let mut master = g.wait_full_set("a master with all three brokers in sync");
    let topic = unique("CtlFailover");
    g.create_topic_everywhere(&topic);
    let mut acked: BTreeSet<String> = BTreeSet::new();
    let mut failovers_ms = Vec::new();
    let mut seed = std::process::id() as u64;
    let rounds = rounds();
    for round in 0..rounds {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(Mutex::new(Vec::new()));
        let sender = {
            let (ns, t, s, a) = (
                g.namesrv.addr.clone(),
                topic.clone(),
                stop.clone(),
                sent.clone(),
            );
            std::thread::spawn(move || send_until(ns, t, s, a))
        };
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        std::thread::sleep(Duration::from_millis(300 + (seed >> 33) % 700));
        let dir = g.dir.path().to_path_buf();
        let old = master.clone();
        g.node_at(&old)
            .proc
            .as_mut()
            .expect("master running")
            .sigkill();
        let killed_at = Instant::now();
        let killed_controller =
            (round == CONTROLLER_KILL_ROUND).then(|| g.kill_controller_leader());
        let new_master = wait_until(
            "a new master",
            FAILOVER,
            Duration::from_millis(50),
            || match g.sync_state() {
                Ok((m, _)) if m != old => Ok(m),
                other => Err(format!("{other:?}")),
            },
        );
        // The sender keeps going until a send lands after the kill (on the new master).
        let first_ms = wait_until(
            "a send after the kill",
            FAILOVER,
            Duration::from_millis(20),
            || {
                let acks = sent.lock().unwrap();
                match acks.iter().find(|(_, at)| *at > killed_at) {
                    Some((_, at)) => Ok(at.duration_since(killed_at).as_millis() as u64),
                    None => Err(format!("{} acknowledged before the kill", acks.len())),
                }
            },
        );
        failovers_ms.push(first_ms);
        stop.store(true, Ordering::Release);
        sender.join().expect("sender thread");
        acked.extend(sent.lock().unwrap().drain(..).map(|(id, _)| id));
        g.node_at(&old).start(&dir);
        if let Some(i) = killed_controller {
            g.restart_controller(i);
        }
        master = g.wait_full_set(&format!("round {round}: the old master back in sync"));
        assert_eq!(
            master, new_master,
            "round {round}: the master stays while the old one rejoins"
        );
        let got = pull_all_from(
            &master,
            &g.name,
            &topic,
            &(0..QUEUES).collect::<Vec<_>>(),
            acked.len(),
            Duration::from_secs(30),
        );
        let mut seen = BTreeSet::new();
        for m in &got {
            assert!(
                seen.insert(m.msg_id.clone()),
                "round {round}: {} twice on {master}",
                m.msg_id
            );
        }
        let missing: Vec<&String> = acked.iter().filter(|id| !seen.contains(*id)).collect();
        assert!(
            missing.is_empty(),
            "round {round}: acknowledged but missing on {master}: {missing:?}"
        );
    }
    // Every broker answers GET_BROKER_EPOCH_CACHE with the epochs it holds.
    let (ok, text) = admin(&["getBrokerEpoch", "-n", &g.namesrv.addr, "-b", &g.name]);
    assert!(ok, "{text}");
    assert_eq!(text.matches("#brokerAddr").count(), 3, "{text}");
    assert!(
        text.matches("#Epoch: EpochEntry{epoch=").count() >= 3 * rounds,
        "{text}"
    );
    let mut sorted = failovers_ms.clone();
    sorted.sort_unstable();
    let at =
        |q: f64| sorted[((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1];
    eprintln!(
        "controller failover: {rounds} rounds, {} acknowledged, none lost or doubled; first send \
         after kill (ms): p50 {} p99 {} max {}; all {failovers_ms:?}; restarts to truncate: {}",
        acked.len(),
        at(0.5),
        at(0.99),
        at(1.0),
        g.truncating_restarts()
    );
    g.stop_all();
}

/// Sends `n` messages; every one must be acknowledged. Returns their ids.
fn send_all(namesrv: &str, topic: &str, n: usize) -> Vec<String> {
    let cfg = ringmq_client::ProducerConfig {
        group: unique("PG"),
        namesrv_addrs: vec![namesrv.to_string()],
        send_timeout_ms: 10_000,
        ..Default::default()
    };
    let topic = topic.to_string();
    block_on(async move {
        let p = Producer::new(cfg);
        let mut ids = Vec::with_capacity(n);
        for i in 0..n {
            let r = p
                .send(&Message::new(&topic, format!("frozen-{i}").into_bytes()))
                .await
                .unwrap_or_else(|e| panic!("send {i}: {e}"));
            assert_eq!(r.status, SendStatus::SendOk, "send {i}");
            ids.push(r.msg_id);
        }
        p.shutdown().await;
        ids
    })
}

#[test]
fn a_frozen_slave_leaves_the_sync_state_set_and_rejoins_when_thawed() {
    let mut g = Group::start();
    let master = g.wait_full_set("a master with all three brokers in sync");
    let topic = unique("CtlFrozen");
    g.create_topic_everywhere(&topic);
    let mut ids = send_all(&g.namesrv.addr, &topic, 50);
    let frozen = g
        .nodes
        .iter()
        .map(Node::addr)
        .find(|a| *a != master)
        .expect("a slave");
    g.node_at(&frozen)
        .proc
        .as_ref()
        .expect("slave running")
        .sigstop();
    wait_until(
        "the frozen slave out of the SyncStateSet",
        REJOIN,
        Duration::from_millis(200),
        || match g.sync_state() {
            Ok((m, 2)) if m == master => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    ids.extend(send_all(&g.namesrv.addr, &topic, 50));
    g.node_at(&frozen)
        .proc
        .as_ref()
        .expect("slave running")
        .sigcont();
    assert_eq!(
        g.wait_full_set("the thawed slave back in the SyncStateSet"),
        master
    );
    ids.extend(send_all(&g.namesrv.addr, &topic, 50));
    // Every acknowledged message is on the thawed slave too (it serves reads).
    let got = pull_all_from(
        &frozen,
        &g.name,
        &topic,
        &(0..QUEUES).collect::<Vec<_>>(),
        ids.len(),
        Duration::from_secs(30),
    );
    let held: BTreeSet<String> = got.into_iter().map(|m| m.msg_id).collect();
    let missing: Vec<&String> = ids.iter().filter(|id| !held.contains(*id)).collect();
    assert!(
        missing.is_empty(),
        "missing on the thawed slave: {missing:?}"
    );
    g.stop_all();
}
