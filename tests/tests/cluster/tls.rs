//! TLS across a whole cluster with upstream's `tls.*` keys: a name server and a broker on
//! `enforcing` ports with certificates from files, the broker registering over TLS
//! (`tls.enable=true`, trusting the CA), ringmq's producer and pull consumer, `mqadmin`
//! and `ringmq bench` connecting with `--tls` and a `tls.properties` of the client keys.
//! A plain client is turned away by both ports.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use ringmq_broker::{Broker, BrokerConfig};
use ringmq_client::{
    block_on, ClientConfig, Message, MessageQueue, Producer, ProducerConfig, PullConsumer,
    PullConsumerConfig, PullStatus, SendStatus,
};
use ringmq_namesrv::{Namesrv, NamesrvConfig};
use ringmq_tests::{
    base_broker_conf, frame_bytes, namesrv_conf, ringmq_bin, unique, RawConn, RawRead, TempDir,
};

/// Writes a CA, a server certificate it signed (naming a host, not the loopback address:
/// RocketMQ clients check the chain only) and its key; returns the server-side `tls.*`
/// lines and the tools' `tls.properties` path.
fn pki(dir: &Path) -> (String, std::path::PathBuf) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "ringmq cluster test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["rocketmq.example".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("server.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
    let client_keys = format!(
        "tls.test.mode.enable=false\ntls.client.authServer=true\ntls.client.trustCertPath={}\n",
        dir.join("ca.pem").display()
    );
    let tools = dir.join("tls.properties");
    std::fs::write(&tools, &client_keys).unwrap();
    let server = format!(
        "tls.server.mode=enforcing\ntls.test.mode.enable=false\ntls.server.certPath={}\n\
         tls.server.keyPath={}\ntls.config.file={}\n",
        dir.join("server.pem").display(),
        dir.join("server.key").display(),
        dir.join("absent.properties").display()
    );
    (server, tools)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn refuses_plain(addr: &str) -> bool {
    let mut raw = RawConn::connect(addr);
    raw.send(&frame_bytes(105, 1, &[], b""));
    matches!(raw.read(Duration::from_secs(5)), RawRead::Closed)
}

#[test]
fn an_enforcing_cluster_serves_tls_clients_tools_and_registration() {
    let dir = TempDir::new("tls-cluster");
    let (server_keys, tools) = pki(dir.path());
    let client_tls = ringmq_tls::tool_client_config(true, Some(&tools))
        .expect("client settings")
        .expect("TLS on");

    let ns_dir = dir.path().join("namesrv");
    std::fs::create_dir_all(&ns_dir).unwrap();
    let (ns_cfg, unknown) =
        NamesrvConfig::from_properties_text(&format!("{}{server_keys}", namesrv_conf(&ns_dir, 0)));
    assert!(unknown.is_empty(), "{unknown:?}");
    let namesrv = Namesrv::start(ns_cfg).expect("namesrv starts");
    let ns = namesrv.local_addr().to_string();

    let broker_name = unique("broker");
    let (cfg, _) =
        BrokerConfig::from_properties_text(&format!(
        "{}{server_keys}tls.enable=true\ntls.client.authServer=true\ntls.client.trustCertPath={}\n",
        base_broker_conf(&broker_name, &unique("cluster"), &ns, &dir.path().join("store")),
        dir.path().join("ca.pem").display()
    ));
    let broker = Broker::start(cfg).expect("broker starts");
    let broker_addr = broker.local_addr().to_string();

    let topic = unique("TopicTls");
    let client = ClientConfig {
        tls: Some(client_tls.clone()),
        ..ClientConfig::default()
    };
    let producer_cfg = ProducerConfig {
        group: unique("PG-tls"),
        namesrv_addrs: vec![ns.clone()],
        route_ttl_ms: 1_000,
        client: client.clone(),
        ..ProducerConfig::default()
    };
    let pull_cfg = PullConsumerConfig {
        group: unique("CG-tls"),
        namesrv_addrs: vec![ns.clone()],
        client,
        ..PullConsumerConfig::default()
    };
    let (sent, pulled) = block_on({
        let topic = topic.clone();
        let broker_name = broker_name.clone();
        async move {
            let producer = Producer::new(producer_cfg);
            // The route appears once the broker registered over TLS and created the topic.
            let deadline = Instant::now() + Duration::from_secs(20);
            let mut sent = 0;
            while sent < 20 {
                let body = format!("tls-{sent}").into_bytes();
                let msg = Message::new(&topic, body);
                match producer.send(&msg).await {
                    Ok(r) if r.status == SendStatus::SendOk => sent += 1,
                    other if Instant::now() > deadline => panic!("send over TLS: {other:?}"),
                    _ => compio::time::sleep(Duration::from_millis(100)).await,
                }
            }
            // The consume queue trails the send acknowledgement: pull until all are in.
            let consumer = PullConsumer::new(pull_cfg);
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let mut pulled = Vec::new();
                for queue_id in 0..4 {
                    let mq = MessageQueue::new(&topic, broker_name.clone(), queue_id);
                    let r = consumer.pull(&mq, 0, 32).await.expect("pull over TLS");
                    if r.status == PullStatus::Found {
                        pulled.extend(r.messages.into_iter().map(|m| m.body.to_vec()));
                    }
                }
                if pulled.len() >= sent || Instant::now() > deadline {
                    break (sent, pulled);
                }
                compio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    assert_eq!(sent, 20);
    let mut bodies: Vec<String> = pulled
        .iter()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    bodies.sort();
    let mut expected: Vec<String> = (0..20).map(|i| format!("tls-{i}")).collect();
    expected.sort();
    assert_eq!(bodies, expected);

    let tools = tools.display().to_string();
    let listed = Command::new(ringmq_bin())
        .args([
            "admin",
            "clusterList",
            "-n",
            &ns,
            "--tls",
            "--tls-config",
            &tools,
        ])
        .output()
        .expect("run mqadmin");
    assert!(listed.status.success(), "{}", text(&listed));
    assert!(text(&listed).contains(&broker_name), "{}", text(&listed));
    let plain = Command::new(ringmq_bin())
        .args(["admin", "clusterList", "-n", &ns])
        .output()
        .expect("run mqadmin");
    assert!(!plain.status.success(), "{}", text(&plain));

    let bench = Command::new(ringmq_bin())
        .args([
            "bench",
            "producer",
            "-n",
            &ns,
            "-t",
            &topic,
            "-m",
            "200",
            "-s",
            "20000",
            "-w",
            "4",
            "--quiet",
            "--json",
            "--no-broker-profile",
            "--tls",
            "--tls-config",
            &tools,
        ])
        .output()
        .expect("run ringmq bench");
    assert!(bench.status.success(), "{}", text(&bench));
    let summary = text(&bench);
    assert!(summary.contains("\"failures\":0,"), "{summary}");
    assert!(summary.contains("\"messages\":200,"), "{summary}");

    assert!(refuses_plain(&broker_addr), "a plain client on the broker");
    assert!(refuses_plain(&ns), "a plain client on the namesrv");
    broker.shutdown();
    namesrv.shutdown();
}
