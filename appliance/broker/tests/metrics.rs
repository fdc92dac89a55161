//! The metrics surfaces end to end: a real `Broker` (runtime server + disk store) on
//! 127.0.0.1 with `ringmq.metricsPort` set, driven with raw Remoting frames; `/metrics` is
//! scraped over TCP and GET_BROKER_RUNTIME_INFO read before and after the traffic.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ringmq_broker::metrics::http::http_get;
use ringmq_broker::{Broker, BrokerConfig};
use ringmq_remoting::body::kv::KvTable;
use ringmq_remoting::{FrameDecoder, RemotingCommand};

struct Client {
    stream: TcpStream,
    buf: BytesMut,
    decoder: FrameDecoder,
    opaque: i32,
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
        }
    }

    fn call(&mut self, mut cmd: RemotingCommand) -> RemotingCommand {
        self.opaque += 1;
        cmd.opaque = self.opaque;
        let mut out = BytesMut::new();
        cmd.encode(&mut out);
        self.stream.write_all(&out).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(f) = self.decoder.decode(&mut self.buf).expect("valid frame") {
                if f.is_response() && f.opaque == cmd.opaque {
                    return f;
                }
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no answer to request code {}", cmd.code);
            self.stream.set_read_timeout(Some(left)).unwrap();
            let mut chunk = [0u8; 65536];
            let n = self.stream.read(&mut chunk).expect("read from broker");
            assert!(n > 0, "broker closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn runtime_info(&mut self) -> BTreeMap<String, String> {
        let r = self.call(RemotingCommand::request(28, 0));
        assert_eq!(r.code, 0, "{:?}", r.remark);
        KvTable::decode(&r.body).expect("KVTable body").table
    }
}

fn send(topic: &str, body: &[u8]) -> RemotingCommand {
    let mut r = RemotingCommand::request(310, 0);
    for (k, v) in [
        ("a", "PG"),
        ("b", topic),
        ("c", "TBW102"),
        ("d", "4"),
        ("e", "0"),
        ("f", "0"),
        ("g", "1700000000000"),
        ("h", "0"),
        ("i", "WAIT\u{1}true\u{2}"),
        ("j", "0"),
        ("k", "false"),
    ] {
        r.ext_fields.insert(k, v);
    }
    r.with_body(body.to_vec())
}

fn pull(topic: &str, offset: i64) -> RemotingCommand {
    let mut r = RemotingCommand::request(11, 0);
    for (k, v) in [
        ("consumerGroup", "MetricsG"),
        ("topic", topic),
        ("queueId", "0"),
        ("queueOffset", &offset.to_string()),
        ("maxMsgNums", "32"),
        // PULL_FLAG_SUBSCRIPTION: the subscription travels with the pull (no heartbeat).
        ("sysFlag", "4"),
        ("commitOffset", "0"),
        ("suspendTimeoutMillis", "0"),
        ("subscription", "*"),
        ("subVersion", "0"),
    ] {
        r.ext_fields.insert(k, v);
    }
    r
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ringmq-metrics-it-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The value of the first sample line starting with `prefix` (labels included).
fn value(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn scrape_and_runtime_info_move_with_traffic() {
    let dir = temp_dir("scrape");
    let port = free_port();
    let text = format!(
        "brokerClusterName=MetricsCluster\nbrokerName=broker-metrics\nlistenPort=0\n\
         bindAddress=127.0.0.1\nbrokerIP1=127.0.0.1\nstorePathRootDir={}\n\
         mappedFileSizeCommitLog=4194304\nmappedFileSizeConsumeQueue=60000\n\
         ringmq.metricsPort={port}\nmetricsPromExporterHost=127.0.0.1\n",
        dir.display()
    );
    let (config, _notes) = BrokerConfig::from_properties_text(&text);
    let broker = Broker::start(config).expect("broker starts");
    let maddr = broker.metrics_addr().expect("metrics endpoint enabled");
    assert_eq!(maddr.port(), port);

    let (code, before) = http_get(maddr, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert!(before.contains("# TYPE rocketmq_messages_in_total counter"));
    assert!(before.contains("# TYPE ringmq_append_lock_hold_us summary"));
    assert!(before.contains("ringmq_core_stalls_total{"));
    assert!(before.contains("ringmq_core_recv_buffers_exhausted_total{"));
    assert!(before.contains("ringmq_core_recv_multishot{"));
    let base = "cluster=\"MetricsCluster\",node_type=\"broker\",node_id=\"broker-metrics\"";
    let in_series = format!(
        "rocketmq_messages_in_total{{{base},topic=\"MetricsT\",message_type=\"normal\",is_system=\"false\"}}"
    );
    assert_eq!(value(&before, &in_series), None);

    let mut c = Client::connect(broker.local_addr());
    let info_before = c.runtime_info();
    assert_eq!(info_before["msgPutTotalTodayNow"], "0");
    const N: usize = 20;
    for _ in 0..N {
        let r = c.call(send("MetricsT", &[b'x'; 100]));
        assert_eq!(r.code, 0, "send failed: {:?}", r.remark);
    }
    // Pull until all N came back (dispatch runs just after the append).
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = 0i64;
    while got < N as i64 {
        let r = c.call(pull("MetricsT", got));
        assert!(
            Instant::now() < deadline,
            "pulled only {got} of {N}: {} {:?}",
            r.code,
            r.remark
        );
        if r.code == 0 {
            got = r
                .ext_fields
                .get("nextBeginOffset")
                .unwrap()
                .parse()
                .unwrap();
        } else {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    let (code, after) = http_get(maddr, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert_eq!(value(&after, &in_series), Some(N as f64), "{after}");
    let out_series = format!(
        "rocketmq_messages_out_total{{{base},topic=\"MetricsT\",consumer_group=\"MetricsG\",is_retry=\"false\",is_system=\"false\"}}"
    );
    assert_eq!(value(&after, &out_series), Some(N as f64));
    assert!(
        value(
            &after,
            &format!("rocketmq_throughput_in_total{{{base},topic=\"MetricsT\"")
        )
        .unwrap()
            > 0.0
    );
    let send_count = format!(
        "rocketmq_rpc_latency_count{{{base},protocol_type=\"remoting\",request_code=\"send_message_v2\",response_code=\"success\""
    );
    assert_eq!(value(&after, &send_count), Some(N as f64));
    assert!(value(&after, &format!("ringmq_append_records_total{{{base}}}")).unwrap() >= N as f64);
    assert!(value(&after, &format!("ringmq_append_batches_total{{{base}}}")).unwrap() >= 1.0);
    assert!(
        value(
            &after,
            &format!("ringmq_append_lock_hold_us{{{base},quantile=\"1\"}}")
        )
        .unwrap()
            >= 1.0
    );
    assert!(value(&after, &format!("rocketmq_topic_number{{{base}}}")).unwrap() >= 1.0);

    let info = c.runtime_info();
    assert_eq!(info["msgPutTotalTodayNow"], N.to_string());
    assert_eq!(info["msgGetTotalTodayNow"], N.to_string());
    assert_eq!(info["putMessageTimesTotal"], N.to_string());
    let hold: Vec<u64> = info["ringmq.appendLockHoldUs"]
        .split(' ')
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(hold.len(), 3);
    assert!(hold[2] >= 1 && hold[0] <= hold[2], "{hold:?}");
    assert!(info["ringmq.appendBatches"].parse::<u64>().unwrap() >= 1);
    assert!(info["ringmq.recordsPerBatch"].parse::<f64>().unwrap() >= 1.0);
    assert!(info.keys().any(|k| k.starts_with("ringmq.stallCount.core")));
    // The sampler ticked at start, so the 10 s window shows the sends.
    let put_tps: f64 = info["putTps"].split(' ').next().unwrap().parse().unwrap();
    assert!(put_tps > 0.0, "{}", info["putTps"]);

    broker.shutdown();
    assert!(
        TcpStream::connect(maddr).is_err(),
        "endpoint closed at shutdown"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn endpoint_is_off_by_default() {
    let dir = temp_dir("off");
    let text = format!(
        "brokerName=broker-metrics-off\nlistenPort=0\nbindAddress=127.0.0.1\nbrokerIP1=127.0.0.1\n\
         storePathRootDir={}\nmappedFileSizeCommitLog=4194304\nmappedFileSizeConsumeQueue=60000\n",
        dir.display()
    );
    let (config, notes) = BrokerConfig::from_properties_text(&text);
    assert!(notes.is_empty(), "{notes:?}");
    let broker = Broker::start(config).expect("broker starts");
    assert_eq!(broker.metrics_addr(), None);
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
