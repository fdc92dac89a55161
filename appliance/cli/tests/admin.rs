//! `ringmq admin` (mqadmin) end to end: the built `ringmq` binary against a namesrv and a
//! broker it starts itself on free 127.0.0.1 ports with a temporary data directory.
//!
//! `live_cluster_commands` runs every command in sequence and reports each step as passed
//! or failed (all steps run; the test fails listing the failed ones). The other tests need
//! no servers: bad flags, unreachable servers, help and the `mqadmin` link name.
//! Only the processes started here are killed, by their own handles.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ringmq_remoting::json::{self, Value};

#[path = "admin/bench.rs"]
mod bench;

const BIN: &str = env!("CARGO_BIN_EXE_ringmq");
/// Longest any single admin command may take before the test kills it.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Output {
    fn describe(&self) -> String {
        format!(
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

fn read_all(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// Runs `program args` with a clean NAMESRV_ADDR (unless given in `env`), killing it after
/// [`COMMAND_TIMEOUT`].
fn run_program(program: &Path, args: &[&str], env: &[(&str, &str)], cwd: Option<&Path>) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_remove("NAMESRV_ADDR")
        .env("RINGMQ_LOG", "warn")
        .stdin(Stdio::null());
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let mut child = cmd.spawn().expect("spawning the ringmq binary");
    let out = read_all(child.stdout.take().unwrap());
    let err = read_all(child.stderr.take().unwrap());
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    let code = loop {
        match child.try_wait().expect("waiting for ringmq") {
            Some(status) => break status.code().unwrap_or(-1),
            None if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break -9;
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    Output {
        code,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

fn admin(args: &[&str]) -> Output {
    let mut full = vec!["admin"];
    full.extend_from_slice(args);
    run_program(Path::new(BIN), &full, &[], None)
}

/// A port nobody listens on (bound, then released).
fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A free port `p` whose `p - 2` (the broker's VIP channel) is free too.
fn free_broker_port() -> u16 {
    for _ in 0..100 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        if p > 1026 && TcpListener::bind(("127.0.0.1", p - 2)).is_ok() {
            return p;
        }
    }
    panic!("no free port pair for the broker");
}

fn wait_for_port(port: u16, what: &str, child: &mut Child, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if TcpStream::connect_timeout(
            &SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_millis(200),
        )
        .is_ok()
        {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{what} exited with {status}:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "{what} did not listen on 127.0.0.1:{port} within 30 s:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// A namesrv and a broker of cluster `AdminCluster`, killed (by handle) on drop.
struct Cluster {
    dir: PathBuf,
    namesrv: Option<Child>,
    broker: Option<Child>,
    ns_addr: String,
    broker_addr: String,
    /// The broker's 5.x gRPC endpoint.
    grpc_addr: String,
}

const CLUSTER: &str = "AdminCluster";
const BROKER: &str = "broker-adm";

impl Cluster {
    fn start() -> Cluster {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("admin-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ns_port = closed_port();
        let broker_port = free_broker_port();
        let grpc_port = closed_port();
        let ns_conf = dir.join("namesrv.conf");
        std::fs::write(
            &ns_conf,
            format!(
                "listenPort={ns_port}\nbindAddress=127.0.0.1\nkvConfigPath={0}/kvConfig.json\nconfigStorePath={0}/namesrv.properties\n",
                dir.display()
            ),
        )
        .unwrap();
        let broker_conf = dir.join("broker.conf");
        std::fs::write(
            &broker_conf,
            format!(
                "brokerClusterName={CLUSTER}\nbrokerName={BROKER}\nbrokerId=0\nlistenPort={broker_port}\n\
                 bindAddress=127.0.0.1\nbrokerIP1=127.0.0.1\nnamesrvAddr=127.0.0.1:{ns_port}\n\
                 storePathRootDir={}\nautoCreateTopicEnable=true\nautoCreateSubscriptionGroup=true\nmappedFileSizeCommitLog=67108864\n\
                 ringmq.grpc.port={grpc_port}\n",
                dir.join("store").display()
            ),
        )
        .unwrap();
        let spawn = |sub: &str, conf: &Path, log: &str| {
            let log = std::fs::File::create(dir.join(log)).unwrap();
            Command::new(BIN)
                .args([sub, "-c", conf.to_str().unwrap()])
                .env("RINGMQ_LOG", "info")
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("starting ringmq {sub}: {e}"))
        };
        // The guard exists before the first spawn, so a failed start still kills what ran.
        let mut c = Cluster {
            dir: dir.clone(),
            namesrv: None,
            broker: None,
            ns_addr: format!("127.0.0.1:{ns_port}"),
            broker_addr: format!("127.0.0.1:{broker_port}"),
            grpc_addr: format!("127.0.0.1:{grpc_port}"),
        };
        let namesrv = c.namesrv.insert(spawn("namesrv", &ns_conf, "namesrv.log"));
        wait_for_port(ns_port, "namesrv", namesrv, &dir.join("namesrv.log"));
        let broker = c.broker.insert(spawn("broker", &broker_conf, "broker.log"));
        wait_for_port(broker_port, "broker", broker, &dir.join("broker.log"));
        wait_for_port(grpc_port, "broker gRPC", broker, &dir.join("broker.log"));
        c
    }

    /// Blocks until the name server serves the TBW102 template route, i.e. the broker's
    /// first registration arrived: a listening broker port says nothing about that, and a
    /// producer that looks its topic up before it fails with TOPIC_NOT_EXIST, as in Java.
    fn wait_registered(&self) {
        if let Err(e) = eventually(30, || ok(&self.admin(&["topicRoute", "-t", "TBW102"]))) {
            panic!(
                "the broker never registered with the name server: {e}\n{}",
                self.log("broker.log")
            );
        }
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    fn admin(&self, args: &[&str]) -> Output {
        let mut full = vec!["admin"];
        full.extend_from_slice(args);
        full.extend_from_slice(&["-n", &self.ns_addr]);
        run_program(Path::new(BIN), &full, &[], Some(&self.dir))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in [self.broker.as_mut(), self.namesrv.as_mut()]
            .into_iter()
            .flatten()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Runs named steps, keeps going after a failure, and reports them all.
struct Steps {
    results: Vec<(String, Result<(), String>)>,
}

impl Steps {
    fn step(&mut self, name: &str, f: impl FnOnce() -> Result<(), String>) -> bool {
        let r = f();
        eprintln!("[{}] {name}", if r.is_ok() { "PASS" } else { "FAIL" });
        if let Err(e) = &r {
            eprintln!("    {}", e.replace('\n', "\n    "));
        }
        let ok = r.is_ok();
        self.results.push((name.to_string(), r));
        ok
    }

    fn finish(self, cluster: &Cluster) {
        let failed: Vec<&str> = self
            .results
            .iter()
            .filter(|(_, r)| r.is_err())
            .map(|(n, _)| n.as_str())
            .collect();
        let passed = self.results.len() - failed.len();
        eprintln!("{passed} of {} admin steps passed", self.results.len());
        if !failed.is_empty() {
            let tail = |s: String| {
                s.lines()
                    .rev()
                    .take(40)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            panic!(
                "failed admin steps: {}\n--- broker log (tail)\n{}\n--- namesrv log (tail)\n{}",
                failed.join(", "),
                tail(cluster.log("broker.log")),
                tail(cluster.log("namesrv.log"))
            );
        }
    }
}

fn ok(out: &Output) -> Result<(), String> {
    if out.code == 0 {
        Ok(())
    } else {
        Err(format!("expected success, got {}", out.describe()))
    }
}

fn contains(out: &Output, needles: &[&str]) -> Result<(), String> {
    ok(out)?;
    for n in needles {
        if !out.stdout.contains(n) {
            return Err(format!("stdout lacks {n:?}: {}", out.describe()));
        }
    }
    Ok(())
}

fn parse_json(out: &Output) -> Result<Value, String> {
    ok(out)?;
    json::parse(out.stdout.trim().as_bytes())
        .map_err(|e| format!("--json output is not JSON ({e}): {}", out.describe()))
}

/// Retries `f` until it passes or `secs` elapse (registration and indexing are async).
fn eventually(secs: u64, mut f: impl FnMut() -> Result<(), String>) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        match f() {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                return Err(format!("still failing after {secs} s: {e}"))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// The whitespace-separated columns of the first stdout line starting with `prefix`.
fn row(out: &Output, prefix: &str) -> Option<Vec<String>> {
    out.stdout
        .lines()
        .find(|l| l.starts_with(prefix))
        .map(|l| l.split_whitespace().map(String::from).collect())
}

#[test]
fn live_cluster_commands() {
    let c = Cluster::start();
    let mut s = Steps {
        results: Vec::new(),
    };
    let (ns, br) = (c.ns_addr.clone(), c.broker_addr.clone());
    const T: &str = "AdminTopic1";
    const G: &str = "AdminGroup1";

    let registered = s.step("clusterList shows the broker (registration)", || {
        eventually(40, || {
            let out = c.admin(&["clusterList"]);
            ok(&out)?;
            let header = out.stdout.lines().next().unwrap_or_default();
            for col in [
                "#Cluster Name",
                "#Broker Name",
                "#BID",
                "#Addr",
                "#Version",
                "#InTPS(LOAD)",
                "#OutTPS(LOAD)",
                "#Timer(Progress)",
                "#PCWait(ms)",
                "#Hour",
                "#SPACE",
                "#ACTIVATED",
            ] {
                if !header.contains(col) {
                    return Err(format!("header lacks {col}: {header}"));
                }
            }
            match row(&out, CLUSTER) {
                Some(cols) if cols[1] == BROKER && cols[2] == "0" && cols[3] == br => Ok(()),
                _ => Err(format!("no row for {BROKER} at {br}: {}", out.describe())),
            }
        })
    });
    if !registered {
        eprintln!(
            "the broker never showed up in the name server; the remaining steps will mostly fail"
        );
    }
    s.step("clusterList -m", || {
        let out = c.admin(&["clusterList", "-m"]);
        contains(&out, &["#InTotalYest", "#OutTotalToday", BROKER])
    });
    s.step("clusterList --json", || {
        let v = parse_json(&c.admin(&["clusterList", "--json"]))?;
        let brokers = v
            .get("brokers")
            .and_then(Value::as_array)
            .ok_or("no brokers array")?;
        brokers
            .iter()
            .find(|b| b.get("addr").and_then(Value::as_str) == Some(br.as_str()))
            .map(|_| ())
            .ok_or_else(|| format!("{br} not listed"))
    });
    s.step("clusterList -i 1 --rounds 2", || {
        let out = c.admin(&["clusterList", "-i", "1", "--rounds", "2"]);
        ok(&out)?;
        let headers = out
            .stdout
            .lines()
            .filter(|l| l.starts_with("#Cluster Name"))
            .count();
        if headers == 2 {
            Ok(())
        } else {
            Err(format!("expected 2 rounds: {}", out.describe()))
        }
    });
    s.step("brokerStatus -b", || {
        contains(
            &c.admin(&["brokerStatus", "-b", &br]),
            &["brokerVersionDesc", "putTps"],
        )
    });
    s.step("brokerStatus -c", || {
        let out = c.admin(&["brokerStatus", "-c", CLUSTER]);
        ok(&out)?;
        if out
            .stdout
            .lines()
            .any(|l| l.starts_with(&br) && l.contains("brokerActive"))
        {
            Ok(())
        } else {
            Err(out.describe())
        }
    });
    s.step("getBrokerConfig -b", || {
        let out = c.admin(&["getBrokerConfig", "-b", &br]);
        contains(
            &out,
            &[
                &format!("============{br}============"),
                &format!("{:<50}=  {BROKER}", "brokerName"),
            ],
        )
    });
    s.step("getBrokerConfig -c", || {
        contains(
            &c.admin(&["getBrokerConfig", "-c", CLUSTER]),
            &[&format!("============Master: {br}============")],
        )
    });
    s.step("updateBrokerConfig -b then getBrokerConfig", || {
        contains(
            &c.admin(&[
                "updateBrokerConfig",
                "-b",
                &br,
                "-k",
                "deleteWhen",
                "-v",
                "03",
            ]),
            &[&format!("update broker config success, {br}")],
        )?;
        contains(
            &c.admin(&["getBrokerConfig", "-b", &br]),
            &[&format!("{:<50}=  03", "deleteWhen")],
        )
    });
    s.step("updateTopic -c", || {
        let out = c.admin(&["updateTopic", "-c", CLUSTER, "-t", T, "-r", "4", "-w", "4"]);
        contains(
            &out,
            &[
                &format!("create topic to {br} success."),
                &format!("TopicConfig [topicName={T}, readQueueNums=4, writeQueueNums=4, perm=RW-"),
            ],
        )
    });
    s.step("topicList has the topic", || {
        eventually(40, || {
            let out = c.admin(&["topicList"]);
            ok(&out)?;
            if out.stdout.lines().any(|l| l == T) {
                Ok(())
            } else {
                Err(out.describe())
            }
        })
    });
    s.step("topicList -c", || {
        contains(
            &c.admin(&["topicList", "-c"]),
            &["#Cluster Name", "#Consumer Group", T],
        )
    });
    s.step("topicList --json", || {
        let v = parse_json(&c.admin(&["topicList", "--json"]))?;
        let list = v
            .get("topicList")
            .and_then(Value::as_array)
            .ok_or("no topicList")?;
        if list.iter().any(|t| t.as_str() == Some(T)) {
            Ok(())
        } else {
            Err(format!("{T} missing from {}", v.to_json()))
        }
    });
    s.step("topicRoute", || {
        contains(
            &c.admin(&["topicRoute", "-t", T]),
            &["\"brokerDatas\"", &format!("\"brokerName\":\"{BROKER}\"")],
        )
    });
    s.step("topicRoute -l", || {
        let out = c.admin(&["topicRoute", "-t", T, "-l"]);
        ok(&out)?;
        let total = row(&out, "Total:").ok_or_else(|| out.describe())?;
        if total == ["Total:", "1", "4", "4"] && out.stdout.contains("#ClusterName") {
            Ok(())
        } else {
            Err(out.describe())
        }
    });
    s.step("topicClusterList", || {
        let out = c.admin(&["topicClusterList", "-t", T]);
        ok(&out)?;
        if out.stdout.lines().any(|l| l == CLUSTER) {
            Ok(())
        } else {
            Err(out.describe())
        }
    });
    s.step("topicStatus", || {
        let out = c.admin(&["topicStatus", "-t", T]);
        contains(
            &out,
            &[
                "#Broker Name",
                "#QID",
                "#Min Offset",
                "#Max Offset",
                "#Last Updated",
                "Topic Put TPS:",
            ],
        )?;
        let rows = out.stdout.lines().filter(|l| l.starts_with(BROKER)).count();
        if rows == 4 {
            Ok(())
        } else {
            Err(format!("expected 4 queue rows: {}", out.describe()))
        }
    });
    s.step("updateTopicPerm -c to 4 and back to 6", || {
        contains(
            &c.admin(&["updateTopicPerm", "-t", T, "-c", CLUSTER, "-p", "4"]),
            &[&format!("update topic perm from 6 to 4 in {br} success.")],
        )?;
        eventually(40, || {
            contains(&c.admin(&["topicRoute", "-t", T]), &["\"perm\":4"])
        })?;
        contains(
            &c.admin(&["updateTopicPerm", "-t", T, "-b", &br, "-p", "6"]),
            &[&format!("update topic perm from 4 to 6 in {br} success.")],
        )?;
        eventually(40, || {
            contains(&c.admin(&["topicRoute", "-t", T]), &["\"perm\":6"])
        })
    });

    let mut msg_id = String::new();
    let mut queue_id = String::new();
    s.step("sendMessage", || {
        let out = c.admin(&[
            "sendMessage",
            "-t",
            T,
            "-p",
            "hello admin",
            "-k",
            "key-adm-1",
            "-c",
            "TagA",
        ]);
        ok(&out)?;
        let header = row(&out, "#Broker Name").ok_or_else(|| out.describe())?;
        if header != ["#Broker", "Name", "#QID", "#Send", "Result", "#MsgId"] {
            return Err(out.describe());
        }
        let cols = row(&out, BROKER).ok_or_else(|| out.describe())?;
        if cols.len() != 4 || cols[2] != "SEND_OK" {
            return Err(out.describe());
        }
        queue_id = cols[1].clone();
        msg_id = cols[3].clone();
        Ok(())
    });
    s.step("sendMessage --json -b -i", || {
        let v = parse_json(&c.admin(&[
            "sendMessage",
            "-t",
            T,
            "-p",
            "second",
            "-b",
            BROKER,
            "-i",
            "2",
            "--json",
        ]))?;
        match (
            v.get("sendStatus").and_then(Value::as_str),
            v.get("queueId").and_then(Value::as_i64),
        ) {
            (Some("SEND_OK"), Some(2)) => Ok(()),
            _ => Err(v.to_json()),
        }
    });
    s.step("queryMsgByKey", || {
        eventually(20, || {
            let out = c.admin(&["queryMsgByKey", "-t", T, "-k", "key-adm-1"]);
            contains(&out, &["#Message ID", "#QID", "#Offset"])?;
            if !msg_id.is_empty() && out.stdout.lines().any(|l| l.starts_with(&msg_id)) {
                Ok(())
            } else {
                Err(out.describe())
            }
        })
    });
    s.step("queryMsgByUniqueKey", || {
        let out = c.admin(&["queryMsgByUniqueKey", "-t", T, "-i", &msg_id]);
        contains(
            &out,
            &[
                &format!("{:<20} {T}", "Topic:"),
                &format!("{:<20} [TagA]", "Tags:"),
                &format!("{:<20} [key-adm-1]", "Keys:"),
                "Message Body Path:",
            ],
        )
    });
    s.step("queryMsgById", || {
        let out = c.admin(&["queryMsgById", "-t", T, "-i", &msg_id]);
        contains(
            &out,
            &[
                "OffsetID:",
                &format!("{:<20} {queue_id}", "Queue ID:"),
                &format!("{:<20} {br}", "Store Host:"),
            ],
        )
    });
    s.step("queryMsgByOffset", || {
        let out = c.admin(&[
            "queryMsgByOffset",
            "-t",
            T,
            "-b",
            BROKER,
            "-i",
            &queue_id,
            "-o",
            "0",
        ]);
        contains(
            &out,
            &["OffsetID:", &format!("{:<20} 0", "Queue Offset:"), "[TagA]"],
        )
    });
    s.step("printMsg", || {
        let out = c.admin(&["printMsg", "-t", T]);
        contains(
            &out,
            &[
                "minOffset=",
                &format!("MSGID: {msg_id} MessageExt [brokerName={BROKER}"),
                "BODY: hello admin",
                "--------",
            ],
        )
    });
    s.step("printMsgByQueue -p -d -f", || {
        let out = c.admin(&[
            "printMsgByQueue",
            "-t",
            T,
            "-a",
            BROKER,
            "-i",
            &queue_id,
            "-p",
            "true",
            "-d",
            "true",
            "-f",
            "true",
        ]);
        contains(
            &out,
            &[
                "BODY: hello admin",
                &format!("Tag: {:<30} Count: 1", "TagA"),
            ],
        )
    });
    s.step("consumeMessage", || {
        contains(
            &c.admin(&["consumeMessage", "-t", T, "-c", "5"]),
            &["Consume ok", "BODY: hello admin"],
        )
    });
    s.step("checkMsgSendRT", || {
        let out = c.admin(&["checkMsgSendRT", "-t", T, "-a", "3", "-s", "16"]);
        contains(&out, &["#Broker Name", "#RT", "Avg RT:"])?;
        let sends = out
            .stdout
            .lines()
            .filter(|l| l.starts_with(BROKER) && l.contains("true"))
            .count();
        if sends == 3 {
            Ok(())
        } else {
            Err(out.describe())
        }
    });
    s.step("clusterRT --rounds 1", || {
        let out = c.admin(&["clusterRT", "-a", "2", "-c", CLUSTER, "--rounds", "1"]);
        contains(&out, &["#Cluster Name", "#RT", "#successCount"])?;
        let cols = row(&out, CLUSTER).ok_or_else(|| out.describe())?;
        if cols[1] == BROKER && cols[3] == "2" {
            Ok(())
        } else {
            Err(out.describe())
        }
    });
    s.step("updateSubGroup -c", || {
        let out = c.admin(&["updateSubGroup", "-c", CLUSTER, "-g", G, "-r", "3"]);
        contains(
            &out,
            &[
                &format!("create subscription group to {br} success."),
                &format!("SubscriptionGroupConfig{{groupName={G}"),
                "retryMaxTimes=3",
            ],
        )
    });

    // A consumer and a producer from ringmq's own client, so connections and offsets exist.
    let online = s.step(
        "client: consumer heartbeat, offset commit, producer heartbeat",
        || {
            use ringmq_client::{
                block_on, Producer, ProducerConfig, PullConsumer, PullConsumerConfig,
            };
            block_on(async {
                let consumer = PullConsumer::new(PullConsumerConfig {
                    group: G.into(),
                    namesrv_addrs: vec![ns.clone()],
                    ..Default::default()
                });
                let mut subs = BTreeMap::new();
                subs.insert(T.to_string(), "*".to_string());
                let body = consumer.heartbeat_body(
                    &subs,
                    "CONSUME_PASSIVELY",
                    "CONSUME_FROM_FIRST_OFFSET",
                );
                consumer
                    .heartbeat_to(&br, &body)
                    .await
                    .map_err(|e| e.to_string())?;
                let qid: i32 = queue_id
                    .parse()
                    .map_err(|_| "no queue id from sendMessage".to_string())?;
                let mq = ringmq_client::MessageQueue::new(T, BROKER, qid);
                consumer
                    .update_offset(&mq, 1, false)
                    .await
                    .map_err(|e| e.to_string())?;
                let producer = Producer::new(ProducerConfig {
                    group: "AdminProducerGroup".into(),
                    namesrv_addrs: vec![ns.clone()],
                    ..Default::default()
                });
                producer.publish_route(T).await.map_err(|e| e.to_string())?;
                producer.heartbeat().await.map_err(|e| e.to_string())?;
                // Keep both alive (and their connections open) for the rest of the test.
                std::mem::forget(consumer);
                std::mem::forget(producer);
                Ok::<(), String>(())
            })
        },
    );
    if !online {
        eprintln!("client setup failed; connection and progress steps will fail");
    }
    // The group's retry topic reaches the name server with the broker's next registration.
    s.step("consumerConnection", || {
        eventually(40, || {
            let out = c.admin(&["consumerConnection", "-g", G]);
            contains(
                &out,
                &[
                    "#ClientId",
                    "#ClientAddr",
                    "#Language",
                    "#Version",
                    "Below is subscription:",
                    "ConsumeType: CONSUME_PASSIVELY",
                    "MessageModel: CLUSTERING",
                ],
            )?;
            if out
                .stdout
                .lines()
                .any(|l| l.starts_with(T) && l.trim_end().ends_with('*'))
            {
                Ok(())
            } else {
                Err(out.describe())
            }
        })
    });
    s.step("producerConnection", || {
        let out = c.admin(&["producerConnection", "-g", "AdminProducerGroup", "-t", T]);
        ok(&out)?;
        if out.stdout.starts_with("0001  ") {
            Ok(())
        } else {
            Err(out.describe())
        }
    });
    s.step("consumerProgress -g -t", || {
        let out = c.admin(&["consumerProgress", "-g", G, "-t", T]);
        contains(
            &out,
            &[
                "#Topic",
                "#Broker Offset",
                "#Consumer Offset",
                "#Diff",
                "#Inflight",
                "#LastTime",
                "Consume TPS:",
                "Consume Diff Total:",
            ],
        )?;
        let cols = out
            .stdout
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|c| c.len() >= 5 && c[0] == T && c[2] == queue_id)
            .ok_or_else(|| out.describe())?;
        if cols[4] == "1" {
            Ok(())
        } else {
            Err(format!("consumer offset should be 1: {}", out.describe()))
        }
    });
    s.step("consumerProgress (all groups)", || {
        eventually(40, || {
            let out = c.admin(&["consumerProgress"]);
            contains(&out, &["#Group", "#Count", "#Diff Total"])?;
            match row(&out, G) {
                Some(cols) if cols.len() >= 4 && cols[1] == "1" && cols[3] == "PUSH" => Ok(()),
                _ => Err(format!("no online PUSH row for {G}: {}", out.describe())),
            }
        })
    });
    s.step("consumerStatus", || {
        // Our client may not answer GET_CONSUMER_RUNNING_INFO; then the error must be one
        // clear line. Either way the table header is printed.
        let out = c.admin(&["consumerStatus", "-g", G]);
        if !out.stdout.contains("#ConsumerRunningInfoFile") {
            return Err(out.describe());
        }
        if out.code == 0
            || out
                .stderr
                .trim()
                .lines()
                .last()
                .is_some_and(|l| l.starts_with("mqadmin consumerStatus:"))
        {
            Ok(())
        } else {
            Err(out.describe())
        }
    });
    s.step("resetOffsetByTime -s 0", || {
        let out = c.admin(&["resetOffsetByTime", "-g", G, "-t", T, "-s", "0"]);
        ok(&out)?;
        if out.stdout.contains(&format!("group[{G}], topic[{T}]"))
            || out
                .stdout
                .contains(&format!("consumerGroup[{G}], topic[{T}]"))
        {
            Ok(())
        } else {
            Err(out.describe())
        }
    });
    s.step("brokerConsumeStats", || {
        contains(
            &c.admin(&["brokerConsumeStats", "-b", &br]),
            &["#Topic", "#Group", "Diff Total:"],
        )
    });
    s.step("statsAll", || {
        let out = c.admin(&["statsAll", "-t", T]);
        contains(
            &out,
            &[
                "#Topic",
                "#Consumer Group",
                "#Accumulation",
                "#InTPS",
                "#OutTPS",
                "#InMsg24Hour",
                "#OutMsg24Hour",
            ],
        )?;
        if out.stdout.lines().any(|l| l.starts_with(T)) {
            Ok(())
        } else {
            Err(out.describe())
        }
    });
    s.step("getNamesrvConfig", || {
        contains(
            &c.admin(&["getNamesrvConfig"]),
            &[&format!("============{ns}============"), "listenPort"],
        )
    });
    s.step("updateNamesrvConfig then getNamesrvConfig", || {
        contains(
            &c.admin(&[
                "updateNamesrvConfig",
                "-k",
                "orderMessageEnable",
                "-v",
                "true",
            ]),
            &[
                "update name server config success!",
                "orderMessageEnable : true",
            ],
        )?;
        contains(
            &c.admin(&["getNamesrvConfig"]),
            &[&format!("{:<50}=  true", "orderMessageEnable")],
        )
    });
    s.step("updateKvConfig / deleteKvConfig", || {
        contains(
            &c.admin(&["updateKvConfig", "-s", "ADMIN_NS", "-k", "k1", "-v", "v1"]),
            &["create or update kv config to namespace success."],
        )?;
        contains(
            &c.admin(&["deleteKvConfig", "-s", "ADMIN_NS", "-k", "k1"]),
            &["delete kv config from namespace success."],
        )
    });
    s.step("wipeWritePerm / addWritePerm", || {
        contains(
            &c.admin(&["wipeWritePerm", "-b", BROKER]),
            &[&format!(
                "wipe write perm of broker[{BROKER}] in name server[{ns}] OK"
            )],
        )?;
        contains(
            &c.admin(&["addWritePerm", "-b", BROKER]),
            &[&format!(
                "add write perm of broker[{BROKER}] in name server[{ns}] OK"
            )],
        )
    });
    s.step("cleanExpiredCQ -b", || {
        contains(&c.admin(&["cleanExpiredCQ", "-b", &br]), &["success"])
    });
    s.step("cleanUnusedTopic -c", || {
        contains(&c.admin(&["cleanUnusedTopic", "-c", CLUSTER]), &["success"])
    });
    s.step("deleteSubGroup -c", || {
        contains(&c.admin(&["deleteSubGroup", "-c", CLUSTER, "-g", G]), &[&format!("delete subscription group [{G}] from broker [{br}] in cluster [{CLUSTER}] success.")])
    });
    s.step("deleteTopic -c, then the route is gone", || {
        contains(
            &c.admin(&["deleteTopic", "-t", T, "-c", CLUSTER]),
            &[
                &format!("delete topic [{T}] from cluster [{CLUSTER}] success."),
                &format!("delete topic [{T}] from NameServer success."),
            ],
        )?;
        let out = c.admin(&["topicRoute", "-t", T]);
        if out.code == 1
            && out.stderr.contains("TOPIC_NOT_EXIST")
            && out.stderr.trim().lines().count() == 1
        {
            Ok(())
        } else {
            Err(out.describe())
        }
    });
    s.step(
        "an unknown topic gives a one-line error naming the name server",
        || {
            let out = c.admin(&["topicStatus", "-t", "NoSuchTopicAdm"]);
            if out.code == 1 && out.stderr.trim().lines().count() == 1 && out.stderr.contains(&ns) {
                Ok(())
            } else {
                Err(out.describe())
            }
        },
    );
    s.finish(&c);
}

fn one_line_error(out: &Output, code: i32, needles: &[&str]) {
    assert_eq!(out.code, code, "{}", out.describe());
    let lines: Vec<&str> = out.stderr.trim().lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "stderr must be one line: {}",
        out.describe()
    );
    for n in needles {
        assert!(
            lines[0].contains(n),
            "stderr lacks {n:?}: {}",
            out.describe()
        );
    }
}

#[test]
fn bad_flags_are_one_line_errors() {
    one_line_error(
        &admin(&["updateTopic", "-t", "T"]),
        2,
        &[
            "mqadmin updateTopic:",
            "-b/--brokerAddr",
            "-c/--clusterName",
        ],
    );
    one_line_error(
        &admin(&["updateTopic", "-b", "127.0.0.1:1", "-t", "T", "-Z", "x"]),
        2,
        &["unrecognized option: -Z"],
    );
    one_line_error(
        &admin(&["topicRoute", "-t"]),
        2,
        &["missing argument for option -t/--topic"],
    );
    one_line_error(
        &admin(&["topicRoute"]),
        2,
        &["missing required option -t/--topic"],
    );
    one_line_error(&admin(&["topicList", "extra"]), 2, &["unexpected argument"]);
    one_line_error(
        &admin(&["updateTopic", "-b", "127.0.0.1:1", "-t", "T", "-r", "many"]),
        2,
        &["--readQueueNums expects a number"],
    );
    one_line_error(
        &admin(&[
            "resetOffsetByTime",
            "-g",
            "G",
            "-t",
            "T",
            "-s",
            "yesterday",
            "-n",
            "127.0.0.1:1",
        ]),
        2,
        &["yesterday"],
    );
    // No name server anywhere.
    one_line_error(
        &admin(&["topicList"]),
        2,
        &["no name server address", "NAMESRV_ADDR"],
    );
}

#[test]
fn unreachable_servers_are_named() {
    let port = closed_port();
    let addr = format!("127.0.0.1:{port}");
    one_line_error(
        &admin(&["topicList", "-n", &addr]),
        1,
        &[
            "mqadmin topicList:",
            &format!("name server {addr}"),
            "unreachable",
        ],
    );
    one_line_error(
        &admin(&["clusterList", "-n", &addr]),
        1,
        &[&format!("name server {addr}")],
    );
    one_line_error(
        &admin(&["brokerStatus", "-b", &addr]),
        1,
        &[&format!("broker {addr}"), "unreachable"],
    );
    one_line_error(
        &admin(&["getBrokerConfig", "-b", &addr, "--json"]),
        1,
        &[&format!("broker {addr}")],
    );
    // NAMESRV_ADDR is honoured like mqadmin's.
    let out = run_program(
        Path::new(BIN),
        &["admin", "topicRoute", "-t", "T"],
        &[("NAMESRV_ADDR", &addr)],
        None,
    );
    one_line_error(&out, 1, &[&format!("name server {addr}")]);
    // The second of two name servers is tried when the first is down.
    let out = admin(&["getNamesrvConfig", "-n", &format!("{addr};{addr}")]);
    one_line_error(&out, 1, &[&format!("name server {addr}")]);
}

#[test]
fn command_list_and_help() {
    let out = admin(&[]);
    assert_eq!(out.code, 0, "{}", out.describe());
    assert!(out
        .stdout
        .starts_with("The most commonly used mqadmin commands are:"));
    for name in [
        "updateTopic",
        "clusterList",
        "consumerProgress",
        "queryMsgByUniqueKey",
        "statsAll",
        "brokerConsumeStats",
    ] {
        assert!(
            out.stdout.lines().any(|l| l.trim_start().starts_with(name)),
            "{name} not listed"
        );
    }
    let out = admin(&["noSuchCommand"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .starts_with("mqadmin: the sub command noSuchCommand does not exist"),
        "{}",
        out.describe()
    );
    assert!(out.stderr.contains("updateTopic"));
    let out = admin(&["help", "updateTopic"]);
    assert_eq!(out.code, 0, "{}", out.describe());
    assert!(
        out.stdout.starts_with("usage: mqadmin updateTopic"),
        "{}",
        out.describe()
    );
    for flag in [
        "-t,--topic <arg>",
        "-c,--clusterName <arg>",
        "-b,--brokerAddr <arg>",
        "-r,--readQueueNums <arg>",
        "-n,--namesrvAddr <arg>",
        "--json",
    ] {
        assert!(out.stdout.contains(flag), "{flag} missing: {}", out.stdout);
    }
    let out = admin(&["clusterList", "-h"]);
    assert!(
        out.code == 0
            && out.stdout.contains("-m,--moreStats")
            && out.stdout.contains("-i,--interval <arg>"),
        "{}",
        out.describe()
    );
}

#[test]
fn mqadmin_link_name_runs_admin() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("mqadmin-link-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("mqadmin");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(BIN, &link).unwrap();
    let out = run_program(&link, &["help", "topicRoute"], &[], None);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.code, 0, "{}", out.describe());
    assert!(
        out.stdout.starts_with("usage: mqadmin topicRoute"),
        "{}",
        out.describe()
    );
    assert!(out.stdout.contains("-l,--list"));
}
