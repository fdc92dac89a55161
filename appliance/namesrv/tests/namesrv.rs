//! Integration tests: a real `Namesrv` on 127.0.0.1:0, driven over TCP with raw Remoting
//! frames from a small blocking client (what a broker, a client and mqadmin send).
//! Every wait is bounded.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ringmq_namesrv::{Namesrv, NamesrvConfig};
use ringmq_remoting::body::register::RegisterBrokerBody;
use ringmq_remoting::body::topic::{DataVersion, TopicConfig};
use ringmq_remoting::{FrameDecoder, RemotingCommand, RequestCode, SerializeType};

const IO_TIMEOUT: Duration = Duration::from_secs(5);

struct Client {
    stream: TcpStream,
    buf: BytesMut,
    next_opaque: i32,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let stream =
            TcpStream::connect_timeout(&addr, IO_TIMEOUT).expect("connect to the name server");
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        Client {
            stream,
            buf: BytesMut::new(),
            next_opaque: 1,
        }
    }

    fn send(&mut self, mut req: RemotingCommand) -> i32 {
        req.opaque = self.next_opaque;
        self.next_opaque += 1;
        let mut out = BytesMut::new();
        req.encode(&mut out);
        self.stream.write_all(&out).expect("write request");
        req.opaque
    }

    fn read_response(&mut self) -> RemotingCommand {
        let decoder = FrameDecoder::default();
        loop {
            if let Some(cmd) = decoder
                .decode(&mut self.buf)
                .expect("a well-formed response frame")
            {
                return cmd;
            }
            let mut chunk = [0u8; 8192];
            let n = self
                .stream
                .read(&mut chunk)
                .expect("response within the timeout");
            assert!(n > 0, "name server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn call(&mut self, req: RemotingCommand) -> RemotingCommand {
        let opaque = self.send(req);
        let resp = self.read_response();
        assert!(resp.is_response());
        assert_eq!(resp.opaque, opaque);
        resp
    }
}

fn request(code: RequestCode, fields: &[(&str, &str)]) -> RemotingCommand {
    let mut req = RemotingCommand::request(code.code(), 0);
    for (k, v) in fields {
        req.ext_fields.insert(*k, *v);
    }
    req
}

fn register_request(name: &str, id: i64, addr: &str, topics: &[(&str, i32)]) -> RemotingCommand {
    let mut body = RegisterBrokerBody::default();
    body.topic_config_serialize_wrapper.data_version = DataVersion {
        state_version: 0,
        timestamp: 1,
        counter: 1,
    };
    for (topic, queues) in topics {
        let mut tc = TopicConfig::new(*topic);
        tc.read_queue_nums = *queues;
        tc.write_queue_nums = *queues;
        body.topic_config_serialize_wrapper
            .topic_config_table
            .insert(topic.to_string(), tc);
    }
    let id = id.to_string();
    request(
        RequestCode::RegisterBroker,
        &[
            ("brokerName", name),
            ("brokerAddr", addr),
            ("clusterName", "DefaultCluster"),
            ("haServerAddr", "127.0.0.1:10912"),
            ("brokerId", &id),
            ("enableActingMaster", "false"),
            ("compressed", "false"),
            ("bodyCrc32", "0"),
        ],
    )
    .with_body(body.encode_json())
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ringmq-namesrv-it-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn start(dir: &std::path::Path) -> Namesrv {
    let config = NamesrvConfig {
        bind_address: "127.0.0.1".into(),
        listen_port: 0,
        kv_config_path: dir.join("kvConfig.json").display().to_string(),
        config_store_path: dir.join("namesrv.properties").display().to_string(),
        ..NamesrvConfig::default()
    };
    Namesrv::start(config).expect("name server starts on 127.0.0.1:0")
}

#[test]
fn register_then_route_over_tcp() {
    let dir = temp_dir("route");
    let ns = start(&dir);
    let mut broker = Client::connect(ns.local_addr());
    let resp = broker.call(register_request(
        "broker-a",
        0,
        "10.0.0.1:10911",
        &[("T1", 4), ("TBW102", 8)],
    ));
    assert_eq!(resp.code, 0, "{:?}", resp.remark);

    let mut client = Client::connect(ns.local_addr());
    let resp = client.call(request(
        RequestCode::GetRouteinfoByTopic,
        &[("topic", "T1")],
    ));
    assert_eq!(resp.code, 0);
    assert_eq!(
        std::str::from_utf8(&resp.body).unwrap(),
        r#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911"},"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#
    );

    let resp = client.call(request(
        RequestCode::GetRouteinfoByTopic,
        &[("topic", "Nope")],
    ));
    assert_eq!(resp.code, 17);
    assert!(resp
        .remark
        .unwrap()
        .starts_with("No topic route info in name server for the topic: Nope"));

    let resp = client.call(RemotingCommand::request(12345, 0));
    assert_eq!(
        (resp.code, resp.remark.as_deref()),
        (3, Some(" request type 12345 not supported"))
    );

    // A ROCKETMQ-binary-header request is answered in the same serialization.
    let mut binary = request(RequestCode::GetBrokerClusterInfo, &[]);
    binary.serialize_type = SerializeType::RocketMq;
    let resp = client.call(binary);
    assert_eq!(resp.code, 0);
    assert_eq!(resp.serialize_type, SerializeType::RocketMq);
    assert!(std::str::from_utf8(&resp.body)
        .unwrap()
        .contains(r#""clusterAddrTable":{"DefaultCluster":["broker-a"]}"#));

    ns.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn closing_the_broker_connection_removes_its_routes() {
    let dir = temp_dir("close");
    let ns = start(&dir);
    let mut broker = Client::connect(ns.local_addr());
    assert_eq!(
        broker
            .call(register_request(
                "broker-a",
                0,
                "10.0.0.1:10911",
                &[("T1", 4), ("T2", 4)]
            ))
            .code,
        0
    );
    let mut client = Client::connect(ns.local_addr());
    assert_eq!(
        client
            .call(request(
                RequestCode::GetRouteinfoByTopic,
                &[("topic", "T1")]
            ))
            .code,
        0
    );

    drop(broker);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let code = client
            .call(request(
                RequestCode::GetRouteinfoByTopic,
                &[("topic", "T1")],
            ))
            .code;
        if code == 17 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "route still present 5 s after the broker's connection closed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    ns.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn oneway_requests_are_applied_but_not_answered() {
    let dir = temp_dir("oneway");
    let ns = start(&dir);
    let mut client = Client::connect(ns.local_addr());
    let mut put = request(
        RequestCode::PutKvConfig,
        &[("namespace", "ns"), ("key", "k"), ("value", "v")],
    );
    put.mark_oneway();
    client.send(put);
    let resp = client.call(request(
        RequestCode::GetKvConfig,
        &[("namespace", "ns"), ("key", "k")],
    ));
    assert_eq!((resp.code, resp.ext_fields.get("value")), (0, Some("v")));
    ns.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn kv_config_survives_a_restart() {
    let dir = temp_dir("restart");
    let ns = start(&dir);
    let mut client = Client::connect(ns.local_addr());
    let put = request(
        RequestCode::PutKvConfig,
        &[
            ("namespace", "ORDER_TOPIC_CONFIG"),
            ("key", "T1"),
            ("value", "broker-a:4"),
        ],
    );
    assert_eq!(client.call(put).code, 0);
    drop(client);
    ns.shutdown();
    assert_eq!(
        std::fs::read_to_string(dir.join("kvConfig.json")).unwrap(),
        r#"{"configTable":{"ORDER_TOPIC_CONFIG":{"T1":"broker-a:4"}}}"#
    );

    let ns = start(&dir);
    let mut client = Client::connect(ns.local_addr());
    let resp = client.call(request(
        RequestCode::GetKvlistByNamespace,
        &[("namespace", "ORDER_TOPIC_CONFIG")],
    ));
    assert_eq!(
        (resp.code, std::str::from_utf8(&resp.body).unwrap()),
        (0, r#"{"table":{"T1":"broker-a:4"}}"#)
    );
    ns.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn config_errors_are_reported_at_start() {
    let dir = temp_dir("badstart");
    let config = NamesrvConfig {
        bind_address: "not-an-ip".into(),
        kv_config_path: dir.join("kvConfig.json").display().to_string(),
        ..NamesrvConfig::default()
    };
    let err = Namesrv::start(config)
        .err()
        .expect("a bad bindAddress is refused");
    assert!(err.to_string().contains("bindAddress"), "{err}");

    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("kvConfig.json"), "{{{").unwrap();
    let config = NamesrvConfig {
        bind_address: "127.0.0.1".into(),
        listen_port: 0,
        kv_config_path: dir.join("kvConfig.json").display().to_string(),
        ..NamesrvConfig::default()
    };
    let err = Namesrv::start(config)
        .err()
        .expect("a corrupt kvConfig.json is refused");
    assert!(err.to_string().contains("kvConfig.json"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
