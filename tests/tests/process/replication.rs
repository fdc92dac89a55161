//! Master/slave replication with every broker its own `ringmq` process (issue 17 item 5):
//! under SYNC_MASTER each acknowledged message is already in the slave's CommitLog at the
//! same physical offset, byte for byte; SIGKILL of the slave under load turns sends into
//! FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE and acknowledges nothing the slave lacks, and
//! the restarted slave catches up; a second slave started beside a master that already
//! has data begins at the master's last segment; SIGKILL of the master leaves every
//! acknowledged message readable from the slaves, through the route as well.
//!
//! The CommitLog files are compared directly: a killed process leaves its writes in the
//! page cache, so the files show exactly what each broker held when it died.

use super::*;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// Small segments, so 10,000 messages of 1 KiB span several and a late slave starts at
/// the master's last one rather than at zero.
const SEGMENT_BYTES: u64 = 4 * 1024 * 1024;
const BODY_BYTES: usize = 1024;
const QUEUES: i32 = 4;
/// How long a SYNC_MASTER send waits for a slave before FLUSH_SLAVE_TIMEOUT.
const SLAVE_WAIT_MS: u64 = 2_000;

/// One broker process of the replica set (`slaveReadEnable=true` on every replica: without
/// it a slave refuses pulls, as upstream's does), restartable on its own port and store.
struct Replica {
    proc: Option<ServerProcess>,
    conf: PathBuf,
    store: PathBuf,
    port: u16,
    label: String,
    starts: u32,
}

impl Replica {
    fn start(&mut self, dir: &Path) {
        let log = dir.join(format!("{}-{}.log", self.label, self.starts));
        self.starts += 1;
        let p = ServerProcess::spawn(&["broker", "-c", self.conf.to_str().unwrap()], &log, BOOT);
        assert_eq!(p.addr, self.addr(), "{} address", self.label);
        self.proc = Some(p);
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn sigkill(&mut self) {
        let mut p = self.proc.take().expect("replica running");
        p.sigkill();
    }
}

/// A namesrv, a master (brokerId 0) and its slaves, all of one broker name.
struct ReplicaSet {
    namesrv: ServerProcess,
    cluster: String,
    broker_name: String,
    master: Replica,
    slaves: Vec<Replica>,
    /// Declared last, so dropped last: the brokers are killed (and reaped) before the
    /// directory goes, and none recreates files in it afterwards.
    dir: TempDir,
}

impl ReplicaSet {
    /// The namesrv and a SYNC_MASTER that waits for one slave (`inSyncReplicas=2`).
    fn start() -> ReplicaSet {
        let dir = TempDir::new("ha-proc");
        let namesrv = spawn_namesrv(&dir);
        let mut set = ReplicaSet {
            namesrv,
            cluster: unique("hacluster"),
            broker_name: unique("habroker"),
            master: Replica {
                proc: None,
                conf: PathBuf::new(),
                store: PathBuf::new(),
                port: 0,
                label: String::new(),
                starts: 0,
            },
            slaves: Vec::new(),
            dir,
        };
        set.master = set.replica(
            "master",
            &format!(
                "brokerRole=SYNC_MASTER\ninSyncReplicas=2\ntotalReplicas=3\n\
                 syncFlushTimeout={SLAVE_WAIT_MS}\n"
            ),
        );
        set.master.start(set.dir.path());
        set.wait_registered(0);
        set
    }

    /// Writes the broker.conf of one replica; `role` holds its role lines.
    fn replica(&self, label: &str, role: &str) -> Replica {
        // haListenPort is listenPort + 1, which free_broker_port keeps free too.
        let port = free_broker_port();
        let store = self.dir.path().join(format!("store-{label}"));
        let conf_text = format!(
            "{}listenPort={port}\n\
             mappedFileSizeCommitLog={SEGMENT_BYTES}\nslaveReadEnable=true\n{role}",
            base_broker_conf(&self.broker_name, &self.cluster, &self.namesrv.addr, &store)
                .replace("brokerId=0\n", "")
                .replace("mappedFileSizeCommitLog=67108864\n", "")
        );
        let conf = self.dir.path().join(format!("{label}.conf"));
        std::fs::write(&conf, conf_text).expect("broker.conf");
        Replica {
            proc: None,
            conf,
            store,
            port,
            label: label.to_string(),
            starts: 0,
        }
    }

    /// Adds and starts slave `broker_id`; it learns the master's HA address from its
    /// registration answer.
    fn add_slave(&mut self, broker_id: i64) {
        let slave = self.replica(
            &format!("slave{broker_id}"),
            &format!("brokerRole=SLAVE\nbrokerId={broker_id}\n"),
        );
        self.slaves.push(slave);
        let s = self.slaves.last_mut().expect("just added");
        s.start(self.dir.path());
        self.wait_registered(broker_id);
    }

    /// The tails of the slaves' logs, for failure messages.
    fn slave_logs(&self) -> String {
        self.slaves
            .iter()
            .filter_map(|s| {
                let text = std::fs::read_to_string(&s.proc.as_ref()?.log).ok()?;
                let lines: Vec<&str> = text
                    .lines()
                    .filter(|l| {
                        l.contains("WARN") || l.contains("ERROR") || l.contains("slave_sync")
                    })
                    .filter(|l| !l.contains("connect failed"))
                    .collect();
                let from = lines.len().saturating_sub(15);
                Some(format!("--- {}\n{}", s.label, lines[from..].join("\n")))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn slave(&mut self, broker_id: i64) -> &mut Replica {
        &mut self.slaves[broker_id as usize - 1]
    }

    /// Waits until the namesrv routes TBW102 to replica `broker_id` of this broker name.
    fn wait_registered(&self, broker_id: i64) {
        let ns = self.namesrv.addr.clone();
        let name = self.broker_name.clone();
        wait_until(
            &format!("broker id {broker_id} registered"),
            Duration::from_secs(20),
            SHORT,
            || {
                let addrs = broker_addrs(&ns, "TBW102", &name)?;
                if addrs.contains_key(&broker_id) {
                    Ok(())
                } else {
                    Err(format!("{addrs:?}"))
                }
            },
        );
    }

    fn create_topic(&self, topic: &str) {
        create_topic_at(&self.namesrv.addr, &self.master.addr(), topic, QUEUES);
    }
}

/// Replica id → address of `broker_name` in the route of `topic`.
fn broker_addrs(
    namesrv: &str,
    topic: &str,
    broker_name: &str,
) -> Result<BTreeMap<i64, String>, String> {
    let ns = namesrv.to_string();
    let topic = topic.to_string();
    let name = broker_name.to_string();
    block_on(async move {
        let client = RemotingClient::new(ClientConfig::default());
        let r = ringmq_client::route::fetch_route(&client, &ns, &topic, Duration::from_secs(3))
            .await
            .map_err(|e| e.to_string());
        client.close_all();
        let route = r?;
        Ok(route
            .broker_datas
            .iter()
            .find(|b| b.broker_name == name)
            .map(|b| b.broker_addrs.clone().into_iter().collect())
            .unwrap_or_default())
    })
}

/// One send's outcome as the producer saw it.
#[derive(Debug, Clone)]
struct Sent {
    status: Option<SendStatus>,
    msg_id: String,
    physical_offset: u64,
    body: Vec<u8>,
}

/// The CommitLog offset inside an IPv4 offsetMsgId (4-byte host, 4-byte port, 8-byte
/// offset, in hex).
fn physical_offset(offset_msg_id: &str) -> u64 {
    assert_eq!(offset_msg_id.len(), 32, "IPv4 offsetMsgId {offset_msg_id}");
    u64::from_str_radix(&offset_msg_id[16..], 16).expect("hex offset")
}

fn body_of(tag: &str, i: usize) -> Vec<u8> {
    let mut b = format!("{tag}-{i}-").into_bytes();
    b.resize(BODY_BYTES, b'a' + (i % 26) as u8);
    b
}

/// Sends up to `count` messages from one producer of its own, stopping early when `stop`
/// is set; every outcome is returned, errors included (status None).
fn send_from_one_producer(
    namesrv: &str,
    topic: &str,
    tag: &str,
    count: usize,
    stop: &AtomicBool,
) -> Vec<Sent> {
    let cfg = ringmq_client::ProducerConfig {
        group: unique("PG_ha"),
        namesrv_addrs: vec![namesrv.to_string()],
        route_ttl_ms: 1_000,
        // One attempt: a SYNC_MASTER answer must reach the test as it was given.
        retry_times: 0,
        send_timeout_ms: SLAVE_WAIT_MS + 3_000,
        ..Default::default()
    };
    let p = block_on(async move { Producer::new(cfg) });
    let mut out = Vec::with_capacity(count.min(4096));
    for i in 0..count {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let body = body_of(tag, i);
        let m = Message::new(topic, body.clone());
        out.push(match block_on(p.send(&m)) {
            Ok(r) => Sent {
                status: Some(r.status),
                physical_offset: physical_offset(&r.offset_msg_id),
                msg_id: r.msg_id,
                body,
            },
            Err(_) => Sent {
                status: None,
                msg_id: String::new(),
                physical_offset: 0,
                body,
            },
        });
    }
    out
}

/// Sends `per_thread` messages from each of `threads` producers at once.
fn send_load(
    set: &ReplicaSet,
    topic: &str,
    tag: &str,
    threads: usize,
    per_thread: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<Sent> {
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (ns, topic, tag) = (
                set.namesrv.addr.clone(),
                topic.to_string(),
                format!("{tag}{t}"),
            );
            let stop = stop.clone();
            std::thread::spawn(move || send_from_one_producer(&ns, &topic, &tag, per_thread, &stop))
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().expect("sender thread"))
        .collect()
}

/// `len` bytes of the CommitLog under `store` from physical offset `at`, if its segment
/// holds them.
fn commit_log_bytes(store: &Path, at: u64, len: usize) -> Option<Vec<u8>> {
    let base = at - at % SEGMENT_BYTES;
    let path = store.join("commitlog").join(format!("{base:020}"));
    let data = std::fs::read(path).ok()?;
    let from = (at - base) as usize;
    data.get(from..from + len).map(<[u8]>::to_vec)
}

/// The whole record at `at` in the master's CommitLog (its first 4 bytes are its size).
fn master_record(master_store: &Path, at: u64) -> Vec<u8> {
    let head = commit_log_bytes(master_store, at, 4).expect("master holds the record");
    let size = u32::from_be_bytes(head.try_into().expect("4 bytes")) as usize;
    assert!(size > BODY_BYTES, "record at {at} has size {size}");
    commit_log_bytes(master_store, at, size).expect("master holds the whole record")
}

/// Every message in `sent` is in `slave_store` at its physical offset, byte-identical to
/// the master's record (the body is checked against what was sent too).
fn assert_slave_holds(master_store: &Path, slave_store: &Path, sent: &[&Sent], what: &str) {
    for s in sent {
        let record = master_record(master_store, s.physical_offset);
        assert!(
            record.windows(s.body.len()).any(|w| w == s.body.as_slice()),
            "{what}: master record at {} is not the body sent",
            s.physical_offset
        );
        let on_slave = commit_log_bytes(slave_store, s.physical_offset, record.len());
        assert!(
            on_slave.as_deref() == Some(record.as_slice()),
            "{what}: {} (offset {}) acknowledged but not byte-identical on the slave",
            s.msg_id,
            s.physical_offset
        );
    }
}

/// The end of the last record among `sent` (the CommitLog end once they are all written).
fn end_of(master_store: &Path, sent: &[&Sent]) -> u64 {
    sent.iter()
        .map(|s| s.physical_offset + master_record(master_store, s.physical_offset).len() as u64)
        .max()
        .expect("at least one message")
}

/// Waits until `slave_store` holds the master's CommitLog bytes `[from, to)`, then checks
/// them byte for byte.
fn assert_ranges_identical(master_store: &Path, slave_store: &Path, from: u64, to: u64) {
    let mut at = from;
    while at < to {
        let seg_end = (at - at % SEGMENT_BYTES + SEGMENT_BYTES).min(to);
        let len = (seg_end - at) as usize;
        let want = commit_log_bytes(master_store, at, len).expect("master range");
        wait_until(
            &format!("slave holds [{at}, {seg_end})"),
            Duration::from_secs(30),
            SHORT,
            || match commit_log_bytes(slave_store, at, len) {
                Some(got) if got == want => Ok(()),
                Some(_) => Err("bytes differ (still arriving?)".to_string()),
                None => Err("segment missing".to_string()),
            },
        );
        at = seg_end;
    }
}

/// Sends one probe at a time until one is SEND_OK: the slave's HA connection is up (a
/// registered slave may not have connected yet, and SYNC_MASTER then answers
/// SLAVE_NOT_AVAILABLE, as upstream does). Returns every probe sent.
fn wait_replicating(set: &ReplicaSet, topic: &str) -> Vec<Sent> {
    let no_stop = Arc::new(AtomicBool::new(false));
    let mut probes = Vec::new();
    wait_until(
        "a SEND_OK through the slave",
        Duration::from_secs(30),
        SHORT,
        || {
            let batch = send_load(set, topic, "probe", 1, 1, &no_stop);
            let status = batch[0].status;
            probes.extend(batch);
            if status == Some(SendStatus::SendOk) {
                Ok(())
            } else {
                Err(format!("{status:?}"))
            }
        },
    );
    probes
}

/// `ringmq admin <args>` against the replica set's namesrv: its stdout, or why it failed.
fn admin(set: &ReplicaSet, args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new(ringmq_tests::ringmq_bin())
        .arg("admin")
        .args(args)
        .args(["-n", &set.namesrv.addr])
        .output()
        .map_err(|e| format!("run ringmq admin: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "{args:?}: {}\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Waits until `admin haStatus` on the cluster's master reports `slaves` slaves, each
/// `OK` and 0 bytes behind when `caught_up`.
fn wait_ha_status(set: &ReplicaSet, slaves: usize, caught_up: bool) -> String {
    let mut text = String::new();
    wait_until(
        &format!("haStatus shows {slaves} slave(s)"),
        Duration::from_secs(20),
        SHORT,
        || {
            text = admin(set, &["haStatus", "-c", &set.cluster])?;
            let rows: Vec<&str> = text
                .lines()
                .skip_while(|l| !l.starts_with("#SlaveAddr"))
                .skip(1)
                .collect();
            let ok = text.contains(&format!("#SlaveNum\t{slaves}\n"))
                && rows.len() == slaves
                && (!caught_up
                    || rows.iter().all(|r| {
                        let cols: Vec<&str> = r.split_whitespace().collect();
                        cols.get(2) == Some(&"0") && cols.get(4) == Some(&"OK")
                    }));
            if ok {
                Ok(())
            } else {
                Err(text.clone())
            }
        },
    );
    text
}

/// Waits until the master has picked where some slave's transfer starts (`haStatus`'s
/// `#TransferFromWhere` column reads `from`). A slave registers with the name server before
/// its HA connection reports an offset, and the start is chosen from the master's max
/// offset at that report, so writes sent before it would move the start.
fn wait_transfer_from(set: &ReplicaSet, from: u64) {
    wait_until(
        &format!("haStatus shows a slave transferring from {from}"),
        Duration::from_secs(20),
        SHORT,
        || {
            let text = admin(set, &["haStatus", "-c", &set.cluster])?;
            let started = text
                .lines()
                .skip_while(|l| !l.starts_with("#SlaveAddr"))
                .skip(1)
                .any(|r| r.split_whitespace().last() == Some(from.to_string().as_str()));
            if started {
                Ok(())
            } else {
                Err(text)
            }
        },
    );
}

fn ok_sends(all: &[Sent]) -> Vec<&Sent> {
    all.iter()
        .filter(|s| s.status == Some(SendStatus::SendOk))
        .collect()
}

#[test]
fn sync_master_acks_only_what_the_slave_holds_across_a_slave_kill() {
    let mut set = ReplicaSet::start();
    set.add_slave(1);
    let topic = unique("T_ha_kill_slave");
    set.create_topic(&topic);
    wait_replicating(&set, &topic);
    let no_stop = Arc::new(AtomicBool::new(false));

    // 10,000 messages, every one acknowledged and byte-identical on the slave.
    let first = send_load(&set, &topic, "a", 4, 2_500, &no_stop);
    let acked = ok_sends(&first);
    assert_eq!(
        acked.len(),
        first.len(),
        "with the slave up every send is SEND_OK; first failures: {:?}",
        first
            .iter()
            .filter(|s| s.status != Some(SendStatus::SendOk))
            .take(3)
            .map(|s| (&s.status, &s.msg_id))
            .collect::<Vec<_>>()
    );
    let (master_store, slave_store) = (set.master.store.clone(), set.slave(1).store.clone());
    assert_slave_holds(&master_store, &slave_store, &acked, "slave up");
    let end = end_of(&master_store, &acked);
    assert_ranges_identical(&master_store, &slave_store, 0, end);
    // The operator's view: both replicas in clusterList, the slave caught up in haStatus.
    let listed = admin(&set, &["clusterList", "-c", &set.cluster]).expect("clusterList");
    for id in ["0", "1"] {
        assert!(
            listed.lines().any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.get(1) == Some(&set.broker_name.as_str()) && cols.get(2) == Some(&id)
            }),
            "clusterList lists broker id {id}:\n{listed}"
        );
    }
    wait_ha_status(&set, 1, true);
    let pulled = pull_all_from(
        &set.slave(1).addr(),
        &set.broker_name,
        &topic,
        &(0..QUEUES).collect::<Vec<_>>(),
        acked.len(),
        Duration::from_secs(60),
    );
    let bodies: BTreeSet<&[u8]> = pulled.iter().map(|m| m.body.as_ref()).collect();
    assert!(
        acked.iter().all(|s| bodies.contains(s.body.as_slice())),
        "the slave serves every acknowledged message"
    );

    // SIGKILL the slave in the middle of the load.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (stop, ns, topic) = (stop.clone(), set.namesrv.addr.clone(), topic.clone());
        // Bounded: at most 20,000 sends, and the test stops it a few seconds in.
        std::thread::spawn(move || send_from_one_producer(&ns, &topic, "load", 20_000, &stop))
    };
    std::thread::sleep(Duration::from_millis(1_000));
    set.slave(1).sigkill();
    std::thread::sleep(Duration::from_millis(SLAVE_WAIT_MS + 2_000));
    stop.store(true, Ordering::Release);
    let second = load.join().expect("load thread");
    let acked2 = ok_sends(&second);
    let refused: Vec<_> = second
        .iter()
        .filter_map(|s| s.status)
        .filter(|s| {
            matches!(
                s,
                SendStatus::FlushSlaveTimeout | SendStatus::SlaveNotAvailable
            )
        })
        .collect();
    assert!(
        !acked2.is_empty(),
        "sends were acknowledged before the kill"
    );
    assert!(
        !refused.is_empty(),
        "with the slave gone sends answer FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE: {:?}",
        second
            .iter()
            .map(|s| format!("{:?}", s.status))
            .collect::<BTreeSet<_>>()
    );
    wait_ha_status(&set, 0, false);
    // What the killed slave's files hold is what it held when it died.
    assert_slave_holds(&master_store, &slave_store, &acked2, "slave killed");

    // The slave restarts on its store and catches up; sends are acknowledged again.
    let dir = set.dir.path().to_path_buf();
    set.slave(1).start(&dir);
    let third = wait_replicating(&set, &topic);
    let last = ok_sends(&third);
    let end = end_of(&master_store, &last);
    assert_ranges_identical(&master_store, &slave_store, 0, end);
}

#[test]
fn after_a_master_kill_every_acknowledged_message_is_read_from_the_slaves() {
    let mut set = ReplicaSet::start();
    set.add_slave(1);
    let topic = unique("T_ha_kill_master");
    set.create_topic(&topic);
    let probes = wait_replicating(&set, &topic);
    let no_stop = Arc::new(AtomicBool::new(false));
    let first = send_load(&set, &topic, "a", 4, 1_500, &no_stop);
    assert_eq!(ok_sends(&first).len(), first.len(), "all acknowledged");
    let master_store = set.master.store.clone();
    let end_first = end_of(&master_store, &ok_sends(&first));
    assert!(
        end_first > SEGMENT_BYTES,
        "the first batch spans segments: {end_first}"
    );

    // A second slave beside a master that already has data starts at its last segment.
    let last_segment_at_join = end_first - end_first % SEGMENT_BYTES;
    set.add_slave(2);
    wait_transfer_from(&set, last_segment_at_join);
    let second = send_load(&set, &topic, "b", 4, 1_500, &no_stop);
    assert_eq!(ok_sends(&second).len(), second.len(), "all acknowledged");
    let end = end_of(&master_store, &ok_sends(&second));
    let slave2_store = set.slave(2).store.clone();
    assert_ranges_identical(&master_store, &slave2_store, last_segment_at_join, end);
    assert!(
        commit_log_bytes(&slave2_store, 0, 4).is_none_or(|b| b == [0; 4]),
        "the late slave did not copy the master's first segment"
    );

    // A slave learns new topics from its master every 10 s (upstream's period), and
    // without the topic it answers pulls TOPIC_NOT_EXIST: let that round happen first.
    let slave1 = set.slave(1).addr();
    let probe_cfg = ringmq_client::PullConsumerConfig {
        group: unique("CG_ha_probe"),
        namesrv_addrs: Vec::new(),
        route_ttl_ms: 1_000,
        client: ClientConfig::default(),
    };
    let probe = block_on(async move { PullConsumer::new(probe_cfg) });
    let mq0 = MessageQueue::new(&topic, &set.broker_name, 0);
    let opts = ringmq_client::PullOptions {
        suspend_ms: None,
        ..Default::default()
    };
    wait_until(
        "slave 1 serves the topic",
        Duration::from_secs(30),
        SHORT,
        || block_on(probe.pull_from(&slave1, &mq0, 0, &opts)).map_err(|e| e.to_string()),
    );
    set.master.sigkill();
    let all: Vec<&Sent> = ok_sends(&probes)
        .into_iter()
        .chain(first.iter())
        .chain(second.iter())
        .collect();
    let slave1_store = set.slave(1).store.clone();
    assert_slave_holds(&master_store, &slave1_store, &all, "master killed");

    // Consumers read on from slave 1: directly, and through the route once the master is
    // gone from it.
    let ns = set.namesrv.addr.clone();
    let name = set.broker_name.clone();
    wait_until(
        "the route without the master",
        Duration::from_secs(30),
        SHORT,
        || {
            let addrs = broker_addrs(&ns, &topic, &name)?;
            if addrs.contains_key(&0) {
                Err(format!("{addrs:?}"))
            } else {
                Ok(())
            }
        },
    );
    let cfg = ringmq_client::PullConsumerConfig {
        group: unique("CG_ha"),
        namesrv_addrs: vec![ns],
        route_ttl_ms: 1_000,
        client: ClientConfig::default(),
    };
    let consumer = block_on(async move { PullConsumer::new(cfg) });
    let want: BTreeSet<&[u8]> = all.iter().map(|s| s.body.as_slice()).collect();
    let mut bodies: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut offsets = [0i64; QUEUES as usize];
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last_error = String::new();
    // Round-robin over the queues until every acknowledged body is in hand (the slave may
    // still be learning the topic from the master's copy, or dispatching).
    while want.iter().any(|b| !bodies.contains(*b)) {
        assert!(
            Instant::now() < deadline,
            "{} of {} acknowledged messages read through the route within 60 s (last error: \
             {last_error}); slave logs:\n{}",
            bodies.len(),
            want.len(),
            set.slave_logs()
        );
        let mut progressed = false;
        for (q, offset) in offsets.iter_mut().enumerate() {
            let mq = MessageQueue::new(&topic, &set.broker_name, q as i32);
            match block_on(consumer.pull(&mq, *offset, 32)) {
                Ok(r) => {
                    progressed |= !r.messages.is_empty();
                    bodies.extend(r.messages.iter().map(|m| m.body.to_vec()));
                    *offset = (*offset).max(r.next_begin_offset);
                }
                Err(e) => last_error = e.to_string(),
            }
        }
        if !progressed {
            std::thread::sleep(SHORT);
        }
    }
    assert_eq!(
        bodies.len(),
        want.len(),
        "nothing but the acknowledged messages"
    );
}
