//! End-to-end tests: a real `Broker` (runtime server + disk store) on 127.0.0.1 with a temp
//! store directory, driven with raw Remoting frames over blocking TCP.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ringmq_broker::{Broker, BrokerConfig};
use ringmq_remoting::message::id;
use ringmq_remoting::message::properties;
use ringmq_remoting::message::record::{decode_record, Decoded};
use ringmq_remoting::{FrameDecoder, RemotingCommand};

#[path = "broker/acl.rs"]
mod acl;
#[path = "broker/config_update_validation.rs"]
mod config_update_validation;
#[path = "broker/layering.rs"]
mod layering;
#[path = "broker/live_config_keys.rs"]
mod live_config_keys;
#[path = "broker/live_store_keys.rs"]
mod live_store_keys;
#[path = "broker/long_polling_cores.rs"]
mod long_polling_cores;
#[path = "broker/master_slave.rs"]
mod master_slave;
#[path = "broker/metadata_json.rs"]
mod metadata_json;
#[path = "broker/pipeline.rs"]
mod pipeline;
#[path = "broker/required_headers.rs"]
mod required_headers;
#[path = "broker/store_api.rs"]
mod store_api;
#[path = "broker/timer.rs"]
mod timer;
#[path = "broker/timer_observability.rs"]
mod timer_observability;
#[path = "broker/topics_json.rs"]
mod topics_json;
#[path = "broker/typed_decoding.rs"]
mod typed_decoding;
#[path = "broker/upstream_parity.rs"]
mod upstream_parity;

struct Client {
    stream: TcpStream,
    buf: BytesMut,
    decoder: FrameDecoder,
    opaque: i32,
    /// Server-initiated requests seen while waiting for responses.
    pushed: Vec<RemotingCommand>,
}

impl Client {
    fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).expect("connect to the broker");
        stream.set_nodelay(true).unwrap();
        Self {
            stream,
            buf: BytesMut::new(),
            decoder: FrameDecoder::default(),
            opaque: 0,
            pushed: Vec::new(),
        }
    }

    fn write(&mut self, cmd: &RemotingCommand) {
        let mut out = BytesMut::new();
        cmd.encode(&mut out);
        self.stream.write_all(&out).unwrap();
    }

    /// Reads the next frame within `timeout`.
    fn next_frame(&mut self, timeout: Duration) -> Option<RemotingCommand> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(cmd) = self
                .decoder
                .decode(&mut self.buf)
                .expect("valid frames from the broker")
            {
                return Some(cmd);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.stream.set_read_timeout(Some(left)).unwrap();
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return None
                }
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    fn call_timeout(
        &mut self,
        mut cmd: RemotingCommand,
        timeout: Duration,
    ) -> Option<RemotingCommand> {
        self.opaque += 1;
        cmd.opaque = self.opaque;
        self.write(&cmd);
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let frame = self.next_frame(left)?;
            if frame.is_response() && frame.opaque == cmd.opaque {
                return Some(frame);
            }
            if !frame.is_response() {
                self.pushed.push(frame);
            }
        }
    }

    fn call(&mut self, cmd: RemotingCommand) -> RemotingCommand {
        let code = cmd.code;
        self.call_timeout(cmd, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("no answer to request code {code}"))
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ringmq-broker-it-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn config(dir: &Path, namesrv: Option<String>) -> BrokerConfig {
    let text = format!(
        "brokerName=broker-it\nlistenPort=0\nbindAddress=127.0.0.1\nbrokerIP1=127.0.0.1\nbrokerIP2=127.0.0.1\n\
         storePathRootDir={}\nmappedFileSizeCommitLog=4194304\nmappedFileSizeConsumeQueue=60000\n\
         flushConsumerOffsetInterval=200\nregisterNameServerPeriod=1000\n{}",
        dir.display(),
        namesrv.map(|n| format!("namesrvAddr={n}\n")).unwrap_or_default()
    );
    let (c, notes) = BrokerConfig::from_properties_text(&text);
    assert!(notes.is_empty(), "{notes:?}");
    c
}

/// [`config`] plus `key=value` lines, each of which must be accepted.
fn config_with_lines(dir: &Path, extra: &str) -> BrokerConfig {
    let mut c = config(dir, None);
    let mut notes = Vec::new();
    for line in extra.lines() {
        if let Some((k, v)) = line.split_once('=') {
            c.apply(k, v, &mut notes);
        }
    }
    assert!(notes.is_empty(), "{notes:?}");
    c
}

/// Wall-clock milliseconds since the epoch.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn send(topic: &str, queue_id: i32, props: &str, body: &[u8]) -> RemotingCommand {
    let mut r = RemotingCommand::request(310, 0);
    for (k, v) in [
        ("a", "PG"),
        ("b", topic),
        ("c", "TBW102"),
        ("d", "4"),
        ("e", &queue_id.to_string()),
        ("f", "0"),
        ("g", "1700000000000"),
        ("h", "0"),
        ("i", props),
        ("j", "0"),
        ("k", "false"),
    ] {
        r.ext_fields.insert(k, v);
    }
    r.with_body(body.to_vec())
}

fn pull(
    topic: &str,
    queue_id: i32,
    offset: i64,
    sys_flag: i32,
    suspend_ms: i64,
) -> RemotingCommand {
    let mut r = RemotingCommand::request(11, 0);
    for (k, v) in [
        ("consumerGroup", "G1".to_string()),
        ("topic", topic.to_string()),
        ("queueId", queue_id.to_string()),
        ("queueOffset", offset.to_string()),
        ("maxMsgNums", "32".to_string()),
        ("sysFlag", sys_flag.to_string()),
        ("commitOffset", "0".to_string()),
        ("suspendTimeoutMillis", suspend_ms.to_string()),
        ("subscription", "*".to_string()),
        ("subVersion", "0".to_string()),
    ] {
        r.ext_fields.insert(k, v);
    }
    r
}

/// Waits (bounded) until the queue's max offset reaches `at_least` (dispatch caught up).
fn wait_max_offset(c: &mut Client, topic: &str, queue_id: i32, at_least: i64) {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let r = c.call(
            RemotingCommand::request(30, 0)
                .with_ext("topic", topic)
                .with_ext("queueId", queue_id.to_string()),
        );
        let max: i64 = r
            .ext_fields
            .get("offset")
            .and_then(|o| o.parse().ok())
            .unwrap_or(-1);
        if max >= at_least {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "queue {topic}/{queue_id} stuck at max offset {max}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Pulls until the message is visible (dispatch runs just after the append), bounded.
fn pull_found(c: &mut Client, request: RemotingCommand) -> RemotingCommand {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let resp = c.call(request.clone());
        if resp.code == 0 || Instant::now() > deadline {
            assert_eq!(resp.code, 0, "{:?}", resp.remark);
            return resp;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Splits a pull body into decoded (body, properties) pairs.
fn records(body: &[u8]) -> Vec<(Vec<u8>, String, i64)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < body.len() {
        let Decoded::Message(r) = decode_record(&body[pos..], true).expect("valid stored record")
        else {
            panic!("blank in pull body")
        };
        out.push((
            r.body.to_vec(),
            String::from_utf8(r.properties.to_vec()).unwrap(),
            r.queue_offset,
        ));
        pos += r.total_size;
    }
    out
}

#[test]
fn send_then_pull_returns_the_same_message() {
    let dir = temp_dir("sendpull");
    let broker = Broker::start(config(&dir, None)).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    let resp = c.call(send("TopicIT", 0, "TAGS\u{1}TagA\u{2}KEYS\u{1}k1 k2\u{2}UNIQ_KEY\u{1}U1\u{2}WAIT\u{1}true\u{2}color\u{1}red\u{2}", b"hello ringmq"));
    assert_eq!(resp.code, 0, "{:?}", resp.remark);
    assert_eq!(resp.ext_fields.get("queueOffset"), Some("0"));
    let msg_id = id::decode_offset_msg_id(resp.ext_fields.get("msgId").unwrap()).unwrap();
    assert_eq!(
        msg_id.store_host,
        broker.local_addr(),
        "STOREHOST is the broker's address"
    );

    // The send is answered at append; the consume queue is built just after (reput), as in
    // RocketMQ, so the first pull may race it.
    let resp = pull_found(&mut c, pull("TopicIT", 0, 0, 0x4, 0));
    let got = records(&resp.body);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, b"hello ringmq");
    assert_eq!(properties::find(&got[0].1, "TAGS"), Some("TagA"));
    assert_eq!(properties::find(&got[0].1, "color"), Some("red"));
    assert_eq!(properties::find(&got[0].1, "UNIQ_KEY"), Some("U1"));
    assert_eq!(resp.ext_fields.get("nextBeginOffset"), Some("1"));

    // VIEW_MESSAGE_BY_ID and QUERY_MESSAGE find it too.
    let view = c.call(
        RemotingCommand::request(33, 0).with_ext("offset", msg_id.commit_log_offset.to_string()),
    );
    assert_eq!(records(&view.body)[0].0, b"hello ringmq");
    let mut q = RemotingCommand::request(12, 0);
    for (k, v) in [
        ("topic", "TopicIT"),
        ("key", "k2"),
        ("maxNum", "10"),
        ("beginTimestamp", "0"),
        ("endTimestamp", "99999999999999"),
    ] {
        q.ext_fields.insert(k, v);
    }
    let mut found = false;
    for _ in 0..50 {
        let r = c.call(q.clone());
        if r.code == 0 {
            assert_eq!(records(&r.body)[0].0, b"hello ringmq");
            found = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(found, "QUERY_MESSAGE by key finds the message");
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn long_poll_wakes_on_arrival() {
    let dir = temp_dir("longpoll");
    let broker = Broker::start(config(&dir, None)).expect("broker starts");
    let addr = broker.local_addr();
    let mut producer = Client::connect(addr);
    assert_eq!(producer.call(send("TopicLP", 0, "", b"first")).code, 0);
    wait_max_offset(&mut producer, "TopicLP", 0, 1);
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let mut consumer = Client::connect(addr);
        let started = Instant::now();
        let resp = consumer
            .call_timeout(
                pull("TopicLP", 0, 1, 0x2 | 0x4, 10_000),
                Duration::from_secs(15),
            )
            .expect("answer");
        tx.send((resp, started.elapsed())).unwrap();
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        rx.try_recv().is_err(),
        "the pull is held while the queue has nothing new"
    );
    assert_eq!(producer.call(send("TopicLP", 0, "", b"second")).code, 0);
    let (resp, waited) = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("woken by the arrival");
    waiter.join().unwrap();
    assert_eq!(resp.code, 0, "{:?}", resp.remark);
    assert_eq!(records(&resp.body)[0].0, b"second");
    assert!(
        waited < Duration::from_secs(5),
        "woken by arrival, not by the 10 s timeout: {waited:?}"
    );

    // With no arrival the pull is answered PULL_NOT_FOUND when its suspend time runs out.
    let started = Instant::now();
    let resp = producer.call(pull("TopicLP", 0, 2, 0x2 | 0x4, 400));
    assert_eq!(resp.code, 19);
    assert!(started.elapsed() >= Duration::from_millis(350));
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn offsets_and_messages_survive_restart() {
    let dir = temp_dir("restart");
    let broker = Broker::start(config(&dir, None)).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    for i in 0..20 {
        let r = c.call(send(
            "TopicRS",
            1,
            &format!("UNIQ_KEY\u{1}U{i}\u{2}"),
            format!("m{i}").as_bytes(),
        ));
        assert_eq!(r.code, 0, "{:?}", r.remark);
    }
    let mut upd = RemotingCommand::request(15, 0);
    for (k, v) in [
        ("consumerGroup", "G1"),
        ("topic", "TopicRS"),
        ("queueId", "1"),
        ("commitOffset", "7"),
    ] {
        upd.ext_fields.insert(k, v);
    }
    assert_eq!(c.call(upd).code, 0);
    drop(c);
    broker.shutdown();

    let broker = Broker::start(config(&dir, None)).expect("broker restarts on the same store");
    let mut c = Client::connect(broker.local_addr());
    let mut q = RemotingCommand::request(14, 0);
    for (k, v) in [
        ("consumerGroup", "G1"),
        ("topic", "TopicRS"),
        ("queueId", "1"),
        ("setZeroIfNotFound", "false"),
    ] {
        q.ext_fields.insert(k, v);
    }
    let r = c.call(q);
    assert_eq!((r.code, r.ext_fields.get("offset")), (0, Some("7")));
    let max = c.call(
        RemotingCommand::request(30, 0)
            .with_ext("topic", "TopicRS")
            .with_ext("queueId", "1"),
    );
    assert_eq!(max.ext_fields.get("offset"), Some("20"));
    let mut bodies = Vec::new();
    let mut offset = 0;
    while offset < 20 {
        let r = c.call(pull("TopicRS", 1, offset, 0x4, 0));
        assert_eq!(r.code, 0, "{:?}", r.remark);
        for (body, _, qo) in records(&r.body) {
            assert_eq!(qo, offset);
            bodies.push(String::from_utf8(body).unwrap());
            offset += 1;
        }
    }
    assert_eq!(bodies, (0..20).map(|i| format!("m{i}")).collect::<Vec<_>>());
    assert!(
        broker.context().topics.select("TopicRS").is_some(),
        "auto-created topic persisted in topics.json"
    );
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn heartbeat_membership_and_notifications() {
    let dir = temp_dir("heartbeat");
    let broker = Broker::start(config(&dir, None)).expect("broker starts");
    let hb = |client: &str| {
        RemotingCommand::request(34, 0).with_body(format!(
            r#"{{"clientID":"{client}","consumerDataSet":[{{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"GH","messageModel":"CLUSTERING","subscriptionDataSet":[{{"expressionType":"TAG","subString":"*","subVersion":1,"topic":"TopicHB"}}]}}],"producerDataSet":[]}}"#
        ))
    };
    let mut c1 = Client::connect(broker.local_addr());
    let r = c1.call(hb("c1"));
    assert_eq!(r.code, 0);
    assert!(r.version > 0, "heartbeat answer carries the broker version");
    let mut c2 = Client::connect(broker.local_addr());
    assert_eq!(c2.call(hb("c2")).code, 0);
    let list = c1.call(RemotingCommand::request(38, 0).with_ext("consumerGroup", "GH"));
    assert_eq!(&list.body[..], br#"{"consumerIdList":["c1","c2"]}"#);
    // c1 is told about c2 joining (server-initiated oneway request).
    let deadline = Instant::now() + Duration::from_secs(3);
    while !c1.pushed.iter().any(|p| p.code == 40) && Instant::now() < deadline {
        if let Some(f) = c1.next_frame(Duration::from_millis(100)) {
            c1.pushed.push(f);
        }
    }
    assert!(c1
        .pushed
        .iter()
        .any(|p| p.code == 40 && p.ext_fields.get("consumerGroup") == Some("GH")));
    // c2's connection closes: it leaves the group.
    drop(c2);
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let list = c1.call(RemotingCommand::request(38, 0).with_ext("consumerGroup", "GH"));
        if &list.body[..] == br#"{"consumerIdList":["c1"]}"# {
            break;
        }
        assert!(Instant::now() < deadline, "closed connection not removed");
        std::thread::sleep(Duration::from_millis(50));
    }
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_never_kills_the_broker() {
    let dir = temp_dir("badinput");
    let broker = Broker::start(config(&dir, None)).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    for code in [
        10, 310, 320, 11, 361, 12, 14, 15, 29, 30, 31, 32, 33, 34, 35, 38, 41, 42, 46,
    ] {
        // No header at all, garbage body.
        let r = c.call(RemotingCommand::request(code, 0).with_body(&b"\xff\x00garbage"[..]));
        assert_ne!(r.code, 0, "code {code} accepted an empty header");
        // Wrong types in every field a handler reads.
        let mut wrong = RemotingCommand::request(code, 0);
        for k in [
            "a",
            "b",
            "e",
            "topic",
            "queueId",
            "queueOffset",
            "maxMsgNums",
            "sysFlag",
            "consumerGroup",
            "offset",
            "timestamp",
            "commitOffset",
            "key",
            "maxNum",
        ] {
            wrong.ext_fields.insert(k, "not-a-number");
        }
        let r = c.call(wrong);
        assert_ne!(r.code, 0, "code {code} accepted wrong types");
    }
    assert_eq!(
        c.call(RemotingCommand::request(9999, 0)).code,
        3,
        "unknown code → REQUEST_CODE_NOT_SUPPORTED"
    );
    // Oversize body on send.
    let r = c.call(send("TopicBig", 0, "", &vec![b'x'; 4 * 1024 * 1024 + 1]));
    assert_eq!(r.code, 13);
    // The connection and the broker still work.
    assert_eq!(c.call(send("TopicOK", 0, "", b"fine")).code, 0);
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn registers_with_the_name_server_and_unregisters_at_shutdown() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let namesrv = listener.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::channel::<RemotingCommand>();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let decoder = FrameDecoder::default();
                let mut buf = BytesMut::new();
                let mut chunk = [0u8; 65536];
                loop {
                    while let Ok(Some(cmd)) = decoder.decode(&mut buf) {
                        let mut out = BytesMut::new();
                        cmd.response_to(0, None).encode(&mut out);
                        let _ = stream.write_all(&out);
                        let _ = tx.send(cmd);
                    }
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    let dir = temp_dir("register");
    let broker = Broker::start(config(&dir, Some(namesrv))).expect("broker starts");
    let reg = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("REGISTER_BROKER arrives");
    assert_eq!(reg.code, 103);
    assert_eq!(reg.ext_fields.get("brokerName"), Some("broker-it"));
    assert_eq!(
        reg.ext_fields.get("brokerAddr").map(str::to_string),
        Some(broker.local_addr().to_string())
    );
    let body: serde_json::Value = serde_json::from_slice(&reg.body).unwrap();
    assert_eq!(
        body["topicConfigSerializeWrapper"]["topicConfigTable"]["TBW102"]["perm"],
        7
    );
    // A new topic triggers an immediate re-registration that carries it.
    let mut c = Client::connect(broker.local_addr());
    assert_eq!(c.call(send("TopicNew", 0, "", b"x")).code, 0);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("re-registration");
        let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
        if body["topicConfigSerializeWrapper"]["topicConfigTable"]
            .get("TopicNew")
            .is_some()
        {
            break;
        }
        assert!(Instant::now() < deadline);
    }
    broker.shutdown();
    let mut saw_unregister = false;
    while let Ok(cmd) = rx.recv_timeout(Duration::from_secs(2)) {
        if cmd.code == 104 {
            saw_unregister = true;
            break;
        }
    }
    assert!(saw_unregister, "UNREGISTER_BROKER at shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `config` plus `ringmq.pull.zeroCopyMinBytes`.
fn config_zero_copy(dir: &Path, zero_copy_min_bytes: u64) -> BrokerConfig {
    let mut c = config(dir, None);
    let mut notes = Vec::new();
    c.apply(
        "ringmq.pull.zeroCopyMinBytes",
        &zero_copy_min_bytes.to_string(),
        &mut notes,
    );
    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!(c.ringmq_pull_zero_copy_min_bytes, zero_copy_min_bytes);
    c
}

/// Whole answers (header fields that matter and body) of the pulls the zero-copy test
/// compares: every message, then tag-filtered (so spans cover only selected records).
fn zero_copy_pulls(c: &mut Client) -> Vec<(i32, Option<String>, Vec<u8>)> {
    let mut out = Vec::new();
    for (offset, sub) in [(0, "*"), (32, "*"), (0, "TagA"), (5, "TagB || TagC")] {
        let mut request = pull("TopicZC", 0, offset, 0x4, 0);
        request.ext_fields.insert("subscription", sub);
        let r = pull_found(c, request);
        out.push((
            r.code,
            r.ext_fields.get("nextBeginOffset").map(String::from),
            r.body.to_vec(),
        ));
    }
    out
}

#[test]
fn pulls_served_from_file_ranges_equal_pulls_served_from_memory() {
    use ringmq_broker::processor::pull::pull_body;
    use ringmq_runtime::BodyChunk;
    use ringmq_store::AcceptAll;

    let dir = temp_dir("zerocopy");
    let broker = Broker::start(config_zero_copy(&dir, 0)).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    for i in 0..64usize {
        let tag = ["TagA", "TagB", "TagC"][i % 3];
        // 16 KiB and 1 KiB bodies, with a non-multiple of 8 in each to misalign records.
        let len = if i % 4 == 0 {
            1_024 + i
        } else {
            16 * 1_024 + i
        };
        let body: Vec<u8> = (0..len).map(|k| (k * 7 + i) as u8).collect();
        let r = c.call(send("TopicZC", 0, &format!("TAGS\u{1}{tag}\u{2}"), &body));
        assert_eq!(r.code, 0, "{:?}", r.remark);
    }
    wait_max_offset(&mut c, "TopicZC", 0, 64);
    let from_memory = zero_copy_pulls(&mut c);
    // maxTransferBytesOnMessageInMemory (256 KiB) caps a pull before maxMsgNums does.
    assert!(records(&from_memory[0].2).len() > 10);
    drop(c);
    broker.shutdown();

    // Same store, every file span now sent by splice.
    let broker = Broker::start(config_zero_copy(&dir, 1)).expect("broker restarts");
    let store_view =
        broker
            .context()
            .store
            .get_message("TopicZC", 0, 0, 32, i32::MAX as usize, &AcceptAll);
    assert_eq!(
        store_view.file_spans.len(),
        1,
        "the disk store describes contiguous records as one file span"
    );
    assert!(
        pull_body(store_view, 1)
            .iter()
            .all(|chunk| matches!(chunk, BodyChunk::File(_))),
        "with zeroCopyMinBytes=1 the whole body is a file range"
    );
    let mut c = Client::connect(broker.local_addr());
    let from_files = zero_copy_pulls(&mut c);
    for (i, (memory, file)) in from_memory.iter().zip(&from_files).enumerate() {
        assert_eq!((memory.0, &memory.1), (file.0, &file.1), "pull {i}");
        assert_eq!(memory.2.len(), file.2.len(), "pull {i} body length");
        assert!(memory.2 == file.2, "pull {i}: body bytes differ");
    }
    let tagged = records(&from_files[2].2);
    assert!(!tagged.is_empty());
    assert!(tagged
        .iter()
        .all(|(_, props, _)| properties::find(props, "TAGS") == Some("TagA")));
    drop(c);
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// GET_MIN_OFFSET (31) of a queue.
fn min_offset(c: &mut Client, topic: &str, queue_id: i32) -> i64 {
    let r = c.call(
        RemotingCommand::request(31, 0)
            .with_ext("topic", topic)
            .with_ext("queueId", queue_id.to_string()),
    );
    assert_eq!(r.code, 0, "{:?}", r.remark);
    r.ext_fields.get("offset").unwrap().parse().unwrap()
}

#[test]
fn delete_expired_commit_log_deletes_outside_delete_when() {
    let dir = temp_dir("delexpired");
    let mut cfg = config(&dir, None);
    let mut notes = Vec::new();
    // Every file is expired at once, but no hour is a delete hour and the disk ratios are
    // out of reach: only the admin command may delete.
    for (k, v) in [
        ("fileReservedTime", "0"),
        ("deleteWhen", "99"),
        ("diskMaxUsedSpaceRatio", "95"),
        ("cleanFileForciblyEnable", "false"),
        ("cleanResourceInterval", "100"),
        ("deleteCommitLogFilesInterval", "0"),
    ] {
        cfg.apply(k, v, &mut notes);
    }
    assert!(notes.is_empty(), "{notes:?}");
    // The host's real disk usage must not decide this test: above the clean-forcibly
    // ratio (clamped to at most 85%) expired files go at any hour, as upstream does.
    let mut sc = ringmq_broker::disk_store::store_config(&cfg).expect("store config");
    sc.retention_probe =
        ringmq_store::config::RetentionProbe::default().with_disk_usage(|_| Some(10));
    let store: std::sync::Arc<dyn ringmq_store::StoreApi> =
        std::sync::Arc::new(ringmq_store::MessageStore::open(sc).expect("store opens"));
    let broker = Broker::start_with_store(cfg, Some(store)).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    let body = vec![b'r'; 128 * 1024];
    // 48 x 128 KiB fills the first 4 MiB segment and starts the second.
    for _ in 0..48 {
        let r = c.call(send("TopicDEL", 0, "WAIT\u{1}true\u{2}", &body));
        assert_eq!(r.code, 0, "{:?}", r.remark);
    }
    wait_max_offset(&mut c, "TopicDEL", 0, 48);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        min_offset(&mut c, "TopicDEL", 0),
        0,
        "nothing is deleted before the command"
    );
    let r = c.call(RemotingCommand::request(329, 0));
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let min = min_offset(&mut c, "TopicDEL", 0);
        if min > 0 {
            assert!(min < 48, "the active segment stays: min offset {min}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "DELETE_EXPIRED_COMMITLOG deleted nothing within 10 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
