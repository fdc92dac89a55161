//! Unit tests of `NamesrvProcessor`: every request code through `process`, with byte-exact
//! checks of the bodies clients parse, an injected clock, and bad input.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use ringmq_remoting::body::cluster::{BrokerMemberGroup, ClusterInfo};
use ringmq_remoting::body::kv::KvTable;
use ringmq_remoting::body::register::RegisterBrokerBody;
use ringmq_remoting::body::route::{QueueData, TopicRouteData};
use ringmq_remoting::body::topic::{DataVersion, TopicConfig, TopicList};
use ringmq_remoting::RemotingCommand;

use super::*;

const T0: i64 = 1_700_000_000_000;

struct Harness {
    processor: NamesrvProcessor,
    clock: Arc<AtomicI64>,
    dir: PathBuf,
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn harness_with(tag: &str, edit: impl FnOnce(&mut NamesrvConfig)) -> Harness {
    let dir =
        std::env::temp_dir().join(format!("ringmq-namesrv-proc-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = NamesrvConfig {
        kv_config_path: dir.join("kvConfig.json").display().to_string(),
        config_store_path: dir.join("namesrv.properties").display().to_string(),
        ..NamesrvConfig::default()
    };
    edit(&mut config);
    let clock = Arc::new(AtomicI64::new(T0));
    let c = clock.clone();
    let processor = NamesrvProcessor::new(
        config,
        KvConfigManager::new(),
        Persister::Inline,
        Arc::new(move || c.load(Ordering::SeqCst)),
    );
    Harness {
        processor,
        clock,
        dir,
    }
}

fn harness(tag: &str) -> Harness {
    harness_with(tag, |_| {})
}

const PEER: Peer = Peer {
    connection_id: 1,
    addr: SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 40000),
};

impl Harness {
    fn call(&self, req: &RemotingCommand) -> RemotingCommand {
        self.call_from(req, PEER)
    }

    fn call_from(&self, req: &RemotingCommand, peer: Peer) -> RemotingCommand {
        let resp = self
            .processor
            .process(req, &peer)
            .expect("a two-way request is answered");
        assert!(resp.is_response());
        assert_eq!(resp.opaque, req.opaque);
        resp
    }

    fn advance_ms(&self, ms: i64) {
        self.clock.fetch_add(ms, Ordering::SeqCst);
    }

    fn register(
        &self,
        name: &str,
        id: i64,
        addr: &str,
        topics: &[TopicConfig],
        counter: i64,
    ) -> RemotingCommand {
        self.call(&register_request(name, id, addr, topics, counter))
    }
}

fn request(code: RequestCode, fields: &[(&str, &str)]) -> RemotingCommand {
    let mut req = RemotingCommand::request(code.code(), 42);
    for (k, v) in fields {
        req.ext_fields.insert(*k, *v);
    }
    req
}

fn topic(name: &str, queues: i32) -> TopicConfig {
    let mut tc = TopicConfig::new(name);
    tc.read_queue_nums = queues;
    tc.write_queue_nums = queues;
    tc
}

fn register_body(topics: &[TopicConfig], counter: i64) -> RegisterBrokerBody {
    let mut body = RegisterBrokerBody::default();
    body.topic_config_serialize_wrapper.data_version = DataVersion {
        state_version: 0,
        timestamp: T0,
        counter,
    };
    for t in topics {
        body.topic_config_serialize_wrapper
            .topic_config_table
            .insert(t.topic_name.clone(), t.clone());
    }
    body
}

fn register_request(
    name: &str,
    id: i64,
    addr: &str,
    topics: &[TopicConfig],
    counter: i64,
) -> RemotingCommand {
    let id_text = id.to_string();
    let ha = format!("{}:10912", addr.rsplit_once(':').map_or(addr, |(ip, _)| ip));
    request(
        RequestCode::RegisterBroker,
        &[
            ("brokerName", name),
            ("brokerAddr", addr),
            ("clusterName", "DefaultCluster"),
            ("haServerAddr", &ha),
            ("brokerId", &id_text),
            ("enableActingMaster", "false"),
            ("compressed", "false"),
            ("bodyCrc32", "0"),
        ],
    )
    .with_body(register_body(topics, counter).encode_json())
}

fn route_request(topic: &str) -> RemotingCommand {
    request(RequestCode::GetRouteinfoByTopic, &[("topic", topic)])
}

fn body_text(resp: &RemotingCommand) -> &str {
    std::str::from_utf8(&resp.body).unwrap()
}

fn code(c: ResponseCode) -> i32 {
    c.code()
}

#[test]
fn route_answer_is_byte_exact() {
    let h = harness("route");
    let resp = h.register(
        "broker-a",
        0,
        "10.0.0.1:10911",
        &[topic("T1", 4), topic("TBW102", 8)],
        1,
    );
    assert_eq!(resp.code, 0, "{:?}", resp.remark);
    let resp = h.call(&route_request("T1"));
    assert_eq!(resp.code, 0);
    assert_eq!(
        body_text(&resp),
        r#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911"},"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#
    );
}

#[test]
fn missing_topic_is_topic_not_exist_with_upstream_remark() {
    let h = harness("missing");
    let resp = h.call(&route_request("Nope"));
    assert_eq!(resp.code, code(ResponseCode::TopicNotExist));
    assert_eq!(resp.code, 17);
    assert_eq!(
        resp.remark.as_deref(),
        Some("No topic route info in name server for the topic: Nope\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details.")
    );
    assert!(resp.body.is_empty());
}

#[test]
fn route_json_flavour_per_client_version() {
    let h = harness("flavour");
    h.register(
        "broker-a",
        0,
        "10.0.0.1:10911",
        &[topic("T1", 4), topic("T2", 4)],
        1,
    );
    // Default: standard JSON for everybody, including Go (317) and C++ (333).
    let mut go = route_request("T1");
    go.version = 317;
    assert!(body_text(&h.call(&go)).contains(r#"{"0":"10.0.0.1:10911"}"#));
    // Java-exact mode: old clients get fastjson's bare keys unless they ask otherwise.
    h.processor.set_legacy_route_json(true);
    assert!(body_text(&h.call(&go)).contains(r#"{0:"10.0.0.1:10911"}"#));
    go.ext_fields.insert("acceptStandardJsonOnly", "true");
    assert!(body_text(&h.call(&go)).contains(r#"{"0":"10.0.0.1:10911"}"#));
    let mut java = route_request("T1");
    java.version = 481;
    assert!(body_text(&h.call(&java)).contains(r#"{"0":"10.0.0.1:10911"}"#));
}

#[test]
fn cluster_info_is_byte_exact() {
    let h = harness("cluster");
    h.register(
        "broker-a",
        0,
        "10.0.0.1:10911",
        &[topic("T1", 4), topic("T2", 4)],
        1,
    );
    h.register(
        "broker-a",
        1,
        "10.0.0.2:10911",
        &[topic("T1", 4), topic("T2", 4)],
        1,
    );
    let resp = h.call(&request(RequestCode::GetBrokerClusterInfo, &[]));
    assert_eq!(resp.code, 0);
    assert_eq!(
        body_text(&resp),
        r#"{"brokerAddrTable":{"broker-a":{"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"},"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}"#
    );
    assert_eq!(
        ClusterInfo::decode(&resp.body).unwrap().broker_addr_table["broker-a"]
            .broker_addrs
            .len(),
        2
    );
}

#[test]
fn slave_registration_answers_master_addresses() {
    let h = harness("slave");
    let master = h.register(
        "broker-a",
        0,
        "10.0.0.1:10911",
        &[topic("T1", 4), topic("T2", 4)],
        1,
    );
    assert!(master.ext_fields.get("masterAddr").is_none());
    let slave = h.register(
        "broker-a",
        1,
        "10.0.0.2:10911",
        &[topic("T1", 4), topic("T2", 4)],
        1,
    );
    assert_eq!(slave.code, 0);
    assert_eq!(slave.ext_fields.get("masterAddr"), Some("10.0.0.1:10911"));
    assert_eq!(slave.ext_fields.get("haServerAddr"), Some("10.0.0.1:10912"));
}

#[test]
fn compressed_and_crc_checked_registration() {
    let h = harness("compressed");
    let body = register_body(&[topic("C1", 2), topic("C2", 2)], 3).encode_compressed();
    let crc = (crc32fast::hash(&body) & 0x7FFF_FFFF).to_string();
    let mut req = register_request("broker-c", 0, "10.0.0.3:10911", &[], 3);
    req.ext_fields.insert("compressed", "true");
    req.ext_fields.insert("bodyCrc32", crc.as_str());
    req.body = body.into();
    assert_eq!(h.call(&req).code, 0);
    assert_eq!(
        h.processor.routes().queue_datas("C2").unwrap()["broker-c"].read_queue_nums,
        2
    );

    req.ext_fields.insert("bodyCrc32", "12345");
    let resp = h.call(&req);
    assert_eq!(
        (resp.code, resp.remark.as_deref()),
        (1, Some("crc32 not match"))
    );
}

#[test]
fn register_response_carries_order_topic_config() {
    let h = harness_with("order", |c| c.order_message_enable = true);
    let put = request(
        RequestCode::PutKvConfig,
        &[
            ("namespace", "ORDER_TOPIC_CONFIG"),
            ("key", "T1"),
            ("value", "broker-a:4"),
        ],
    );
    assert_eq!(h.call(&put).code, 0);
    let resp = h.register(
        "broker-a",
        0,
        "10.0.0.1:10911",
        &[topic("T1", 4), topic("T2", 4)],
        1,
    );
    assert_eq!(body_text(&resp), r#"{"table":{"T1":"broker-a:4"}}"#);
    let route = TopicRouteData::decode(&h.call(&route_request("T1")).body).unwrap();
    assert_eq!(route.order_topic_conf.as_deref(), Some("broker-a:4"));
    assert!(body_text(&h.call(&route_request("T1")))
        .contains(r#""orderTopicConf":"broker-a:4","queueDatas""#));
    assert!(TopicRouteData::decode(&h.call(&route_request("T2")).body)
        .unwrap()
        .order_topic_conf
        .is_none());
}

#[test]
fn bad_input_gets_the_right_codes() {
    let h = harness("bad");
    // Missing required header field.
    let mut req = register_request(
        "broker-a",
        0,
        "10.0.0.1:10911",
        &[topic("T", 1), topic("U", 1)],
        1,
    );
    req.ext_fields.remove("clusterName");
    let resp = h.call(&req);
    assert_eq!(resp.code, 1);
    assert!(
        resp.remark.as_deref().unwrap().contains("clusterName"),
        "{:?}",
        resp.remark
    );
    // Wrong header type.
    let mut req = register_request(
        "broker-a",
        0,
        "10.0.0.1:10911",
        &[topic("T", 1), topic("U", 1)],
        1,
    );
    req.ext_fields.insert("brokerId", "zero");
    let resp = h.call(&req);
    assert_eq!(resp.code, 1);
    assert!(
        resp.remark.as_deref().unwrap().contains("brokerId"),
        "{:?}",
        resp.remark
    );
    // Malformed body.
    let req = register_request("broker-a", 0, "10.0.0.1:10911", &[], 1)
        .with_body("{\"topicConfigSerializeWrapper\":[");
    let resp = h.call(&req);
    assert_eq!(resp.code, 1);
    assert!(
        resp.remark
            .as_deref()
            .unwrap()
            .starts_with("Failed to decode RegisterBrokerBody"),
        "{:?}",
        resp.remark
    );
    let mut req = register_request("broker-a", 0, "10.0.0.1:10911", &[], 1)
        .with_body(vec![0x78, 0x9c, 1, 2, 3]);
    req.ext_fields.insert("compressed", "true");
    assert_eq!(h.call(&req).code, 1);
    // Nothing of the refused registrations stuck.
    assert!(h
        .processor
        .routes()
        .get_all_cluster_info()
        .broker_addr_table
        .is_empty());
    // Unknown and non-namesrv codes.
    let resp = h.call(&RemotingCommand::request(9999, 7));
    assert_eq!(
        (resp.code, resp.remark.as_deref()),
        (3, Some(" request type 9999 not supported"))
    );
    let resp = h.call(&RemotingCommand::request(
        RequestCode::SendMessage.code(),
        8,
    ));
    assert_eq!(
        (resp.code, resp.remark.as_deref()),
        (3, Some(" request type 10 not supported"))
    );
    // Route lookup without a topic; QUERY_DATA_VERSION with a garbage body.
    assert_eq!(
        h.call(&request(RequestCode::GetRouteinfoByTopic, &[])).code,
        1
    );
    let qdv = request(
        RequestCode::QueryDataVersion,
        &[
            ("brokerName", "b"),
            ("brokerAddr", "a:1"),
            ("clusterName", "c"),
            ("brokerId", "0"),
        ],
    )
    .with_body("nope");
    assert_eq!(h.call(&qdv).code, 1);
    // Register topic with a non-JSON body.
    let rt = request(RequestCode::RegisterTopicInNamesrv, &[("topic", "X")]).with_body("[}");
    assert_eq!(h.call(&rt).code, 1);
}

#[test]
fn oneway_requests_get_no_answer() {
    let h = harness("oneway");
    let mut req = register_request(
        "broker-a",
        0,
        "10.0.0.1:10911",
        &[topic("T", 1), topic("U", 1)],
        1,
    );
    req.mark_oneway();
    assert!(h.processor.process(&req, &PEER).is_none());
    assert!(
        h.processor.routes().queue_datas("T").is_some(),
        "the oneway request was still applied"
    );
    let mut unknown = RemotingCommand::request(9999, 1);
    unknown.mark_oneway();
    assert!(h.processor.process(&unknown, &PEER).is_none());
}

#[test]
fn kv_config_round_trip_and_persistence() {
    let h = harness("kv");
    let put = request(
        RequestCode::PutKvConfig,
        &[("namespace", "ns"), ("key", "k"), ("value", "v")],
    );
    assert_eq!(h.call(&put).code, 0);
    let get = request(
        RequestCode::GetKvConfig,
        &[("namespace", "ns"), ("key", "k")],
    );
    assert_eq!(h.call(&get).ext_fields.get("value"), Some("v"));
    let list = h.call(&request(
        RequestCode::GetKvlistByNamespace,
        &[("namespace", "ns")],
    ));
    assert_eq!(KvTable::decode(&list.body).unwrap().table["k"], "v");
    let file = std::fs::read_to_string(h.dir.join("kvConfig.json")).unwrap();
    assert_eq!(file, r#"{"configTable":{"ns":{"k":"v"}}}"#);
    assert_eq!(
        KvConfigManager::load(&h.dir.join("kvConfig.json"))
            .unwrap()
            .get("ns", "k"),
        Some("v")
    );

    assert_eq!(
        h.call(&request(
            RequestCode::DeleteKvConfig,
            &[("namespace", "ns"), ("key", "k")]
        ))
        .code,
        0
    );
    let resp = h.call(&get);
    assert_eq!(
        (resp.code, resp.remark.as_deref()),
        (22, Some("No config item, Namespace: ns Key: k"))
    );
    let resp = h.call(&request(
        RequestCode::GetKvlistByNamespace,
        &[("namespace", "other")],
    ));
    assert_eq!(
        (resp.code, resp.remark.as_deref()),
        (22, Some("No config item, Namespace: other"))
    );
    assert_eq!(
        h.call(&request(
            RequestCode::PutKvConfig,
            &[("namespace", "ns"), ("key", "k")]
        ))
        .code,
        1
    );
}

#[test]
fn namesrv_config_get_and_update() {
    let h = harness("config");
    let resp = h.call(&request(RequestCode::GetNamesrvConfig, &[]));
    assert!(body_text(&resp).contains("listenPort=9876\n"));
    assert!(body_text(&resp).contains("enableAllTopicList=true\n"));

    let update = request(RequestCode::UpdateNamesrvConfig, &[])
        .with_body("enableAllTopicList=false\nnoSuchKey=1\n");
    assert_eq!(h.call(&update).code, 0);
    let resp = h.call(&request(RequestCode::GetAllTopicListFromNameserver, &[]));
    assert_eq!((resp.code, resp.remark.as_deref()), (1, Some("disable")));
    let stored = std::fs::read_to_string(h.dir.join("namesrv.properties")).unwrap();
    assert!(stored.contains("enableAllTopicList=false\n"), "{stored}");

    for key in [
        "kvConfigPath",
        "configStorePath",
        "rocketmqHome",
        "configBlackList",
    ] {
        let bad =
            request(RequestCode::UpdateNamesrvConfig, &[]).with_body(format!("{key}=/tmp/x\n"));
        let resp = h.call(&bad);
        assert_eq!(
            (resp.code, resp.remark.as_deref()),
            (16, Some("Can not update config in black list.")),
            "{key}"
        );
    }
    let garbage = request(RequestCode::UpdateNamesrvConfig, &[]).with_body("a=\\uZZZZ");
    assert_eq!(
        h.call(&garbage).remark.as_deref(),
        Some("string2Properties error")
    );
    assert!(!h.processor.config().enable_all_topic_list);
}

#[test]
fn namesrv_config_update_refuses_start_only_keys_and_bad_values() {
    let h = harness("config-refused");
    let stored = h.dir.join("namesrv.properties");
    for (body, code, reason) in [
        ("listenPort=1\n", 16, "listenPort"),
        (
            "enableTopicList=false\nbindAddress=198.51.100.254\n",
            16,
            "bindAddress",
        ),
        ("ringmq.cores.network=0\n", 16, "ringmq.cores.network"),
        (
            "scanNotActiveBrokerInterval=1\n",
            16,
            "scanNotActiveBrokerInterval",
        ),
        ("enableTopicList=maybe\n", 29, "enableTopicList"),
        (
            "enableAllTopicList=false\ndefaultThreadPoolNums=many\n",
            29,
            "defaultThreadPoolNums",
        ),
    ] {
        let resp = h.call(&request(RequestCode::UpdateNamesrvConfig, &[]).with_body(body));
        let remark = resp.remark.clone().unwrap_or_default();
        assert_eq!(resp.code, code, "{body}: {remark}");
        assert!(remark.contains(reason), "{body}: {remark}");
        assert!(!stored.exists(), "{body}: nothing saved");
    }
    let config = h.processor.config();
    assert_eq!(config.listen_port, 9876);
    assert!(config.enable_topic_list && config.enable_all_topic_list);
    // A valid update still succeeds and is saved.
    let ok = request(RequestCode::UpdateNamesrvConfig, &[]).with_body("enableTopicList=false\n");
    assert_eq!(h.call(&ok).code, 0);
    assert!(!h.processor.config().enable_topic_list);
    let text = std::fs::read_to_string(&stored).unwrap();
    assert!(text.contains("enableTopicList=false\n") && text.contains("listenPort=9876\n"));
}

#[test]
fn topic_lists_and_admin_edits() {
    let h = harness("lists");
    let mut unit = topic("UNIT_T", 1);
    unit.topic_sys_flag = 1;
    h.register("broker-a", 0, "10.0.0.1:10911", &[topic("T1", 4), unit], 1);
    let all = TopicList::decode(
        &h.call(&request(RequestCode::GetAllTopicListFromNameserver, &[]))
            .body,
    )
    .unwrap();
    assert_eq!(all.topic_list.len(), 2);
    let by_cluster = h.call(&request(
        RequestCode::GetTopicsByCluster,
        &[("cluster", "DefaultCluster")],
    ));
    assert_eq!(body_text(&by_cluster), r#"{"topicList":["T1","UNIT_T"]}"#);
    let unknown = h.call(&request(
        RequestCode::GetTopicsByCluster,
        &[("cluster", "Nope")],
    ));
    assert_eq!(
        (unknown.code, body_text(&unknown)),
        (0, r#"{"topicList":[]}"#)
    );
    let sys = h.call(&request(RequestCode::GetSystemTopicListFromNs, &[]));
    assert_eq!(
        body_text(&sys),
        r#"{"brokerAddr":"10.0.0.1:10911","topicList":["DefaultCluster","broker-a"]}"#
    );
    let unit_list = h.call(&request(RequestCode::GetUnitTopicList, &[]));
    assert_eq!(body_text(&unit_list), r#"{"topicList":["UNIT_T"]}"#);
    assert_eq!(
        body_text(&h.call(&request(RequestCode::GetHasUnitSubTopicList, &[]))),
        r#"{"topicList":[]}"#
    );
    assert_eq!(
        body_text(&h.call(&request(RequestCode::GetHasUnitSubUnunitTopicList, &[]))),
        r#"{"topicList":[]}"#
    );

    let wipe = h.call(&request(
        RequestCode::WipeWritePermOfBroker,
        &[("brokerName", "broker-a")],
    ));
    assert_eq!(wipe.ext_fields.get("wipeTopicCount"), Some("2"));
    let route = TopicRouteData::decode(&h.call(&route_request("T1")).body).unwrap();
    assert_eq!(route.queue_datas[0].perm, 4);
    let add = h.call(&request(
        RequestCode::AddWritePermOfBroker,
        &[("brokerName", "broker-a")],
    ));
    assert_eq!(add.ext_fields.get("addTopicCount"), Some("2"));
    assert_eq!(
        h.call(&request(RequestCode::WipeWritePermOfBroker, &[]))
            .code,
        1
    );

    // Register a topic route for a known broker, then delete it per cluster and globally.
    let qd = QueueData {
        broker_name: "broker-a".into(),
        read_queue_nums: 2,
        write_queue_nums: 2,
        perm: 6,
        topic_sys_flag: 0,
    };
    let body = TopicRouteData {
        queue_datas: vec![qd],
        ..Default::default()
    }
    .encode(KeyStyle::Quoted);
    let rt = request(RequestCode::RegisterTopicInNamesrv, &[("topic", "NEW")]).with_body(body);
    assert_eq!(h.call(&rt).code, 0);
    assert_eq!(h.call(&route_request("NEW")).code, 0);
    let del = request(
        RequestCode::DeleteTopicInNamesrv,
        &[("topic", "NEW"), ("clusterName", "DefaultCluster")],
    );
    assert_eq!(h.call(&del).code, 0);
    assert_eq!(h.call(&route_request("NEW")).code, 17);
    assert_eq!(
        h.call(&request(
            RequestCode::DeleteTopicInNamesrv,
            &[("topic", "T1")]
        ))
        .code,
        0
    );
    assert_eq!(h.call(&route_request("T1")).code, 17);
}

#[test]
fn data_version_heartbeat_member_group_and_unregister() {
    let h = harness("dv");
    h.register(
        "broker-a",
        0,
        "10.0.0.1:10911",
        &[topic("T1", 4), topic("T2", 4)],
        5,
    );
    let fields = [
        ("brokerName", "broker-a"),
        ("brokerAddr", "10.0.0.1:10911"),
        ("clusterName", "DefaultCluster"),
        ("brokerId", "0"),
    ];
    let same = DataVersion {
        state_version: 0,
        timestamp: T0,
        counter: 5,
    };
    let resp = h.call(&request(RequestCode::QueryDataVersion, &fields).with_body(same.encode()));
    assert_eq!(resp.ext_fields.get("changed"), Some("false"));
    assert_eq!(DataVersion::decode(&resp.body).unwrap(), same);
    let newer = DataVersion { counter: 6, ..same };
    let resp = h.call(&request(RequestCode::QueryDataVersion, &fields).with_body(newer.encode()));
    assert_eq!(resp.ext_fields.get("changed"), Some("true"));

    h.advance_ms(100_000);
    let hb = request(
        RequestCode::BrokerHeartbeat,
        &[
            ("clusterName", "DefaultCluster"),
            ("brokerAddr", "10.0.0.1:10911"),
            ("brokerName", "broker-a"),
        ],
    );
    assert_eq!(h.call(&hb).code, 0);
    assert_eq!(
        h.processor
            .routes()
            .broker_live_info("DefaultCluster", "10.0.0.1:10911")
            .unwrap()
            .last_update_timestamp_ms,
        T0 + 100_000
    );

    let group = h.call(&request(
        RequestCode::GetBrokerMemberGroup,
        &[
            ("clusterName", "DefaultCluster"),
            ("brokerName", "broker-a"),
        ],
    ));
    assert_eq!(
        body_text(&group),
        r#"{"brokerMemberGroup":{"brokerAddrs":{"0":"10.0.0.1:10911"},"brokerName":"broker-a","cluster":"DefaultCluster"}}"#
    );
    assert_eq!(
        BrokerMemberGroup::decode_response_body(&group.body)
            .unwrap()
            .unwrap()
            .broker_addrs
            .len(),
        1
    );

    assert_eq!(
        h.call(&request(RequestCode::UnregisterBroker, &fields))
            .code,
        0
    );
    assert_eq!(h.call(&route_request("T1")).code, 17);
    assert_eq!(
        h.call(&request(RequestCode::UnregisterBroker, &fields[..3]))
            .code,
        1
    );
}

#[test]
fn expiry_with_injected_clock_and_connection_close() {
    let h = harness("expiry");
    h.register(
        "broker-a",
        0,
        "10.0.0.1:10911",
        &[topic("T1", 4), topic("A", 1)],
        1,
    );
    let other = Peer {
        connection_id: 2,
        ..PEER
    };
    h.call_from(
        &register_request(
            "broker-b",
            0,
            "10.0.0.2:10911",
            &[topic("T1", 4), topic("B", 1)],
            1,
        ),
        other,
    );
    h.advance_ms(120_000);
    assert!(h
        .processor
        .scan_not_active_broker(h.processor.now_ms())
        .is_empty());
    // broker-b keeps registering; broker-a goes silent.
    h.call_from(
        &register_request(
            "broker-b",
            0,
            "10.0.0.2:10911",
            &[topic("T1", 4), topic("B", 1)],
            1,
        ),
        other,
    );
    h.advance_ms(1);
    let expired = h.processor.scan_not_active_broker(h.processor.now_ms());
    assert_eq!(expired.len(), 1);
    assert_eq!(
        (
            expired[0].addr.broker_addr.as_str(),
            expired[0].connection_id
        ),
        ("10.0.0.1:10911", 1)
    );
    assert_eq!(h.call(&route_request("A")).code, 17);
    let route = TopicRouteData::decode(&h.call(&route_request("T1")).body).unwrap();
    assert_eq!(route.broker_datas.len(), 1);
    // Closing broker-b's connection removes it at once.
    assert_eq!(h.processor.on_connection_closed(2), 1);
    assert_eq!(h.call(&route_request("T1")).code, 17);
}

#[test]
fn wait_for_service_window() {
    let h = harness_with("wait", |c| {
        c.need_wait_for_service = true;
        c.wait_seconds_for_service = 45;
    });
    h.register(
        "broker-a",
        0,
        "10.0.0.1:10911",
        &[topic("T1", 4), topic("T2", 4)],
        1,
    );
    let resp = h.call(&route_request("T1"));
    assert_eq!(
        (resp.code, resp.remark.as_deref()),
        (1, Some("name server not ready"))
    );
    h.advance_ms(45_000);
    assert_eq!(h.call(&route_request("T1")).code, 0);
}

#[test]
fn zone_mode_filters_brokers_of_other_zones() {
    let h = harness("zone");
    let mut a = register_request(
        "broker-a",
        0,
        "10.0.0.1:10911",
        &[topic("T1", 4), topic("T2", 4)],
        1,
    );
    a.ext_fields.insert(ZONE_NAME_KEY, "zone-a");
    h.call(&a);
    let mut b = register_request(
        "broker-b",
        0,
        "10.0.0.2:10911",
        &[topic("T1", 4), topic("T2", 4)],
        1,
    );
    b.ext_fields.insert(ZONE_NAME_KEY, "zone-b");
    h.call(&b);
    let mut req = route_request("T1");
    req.ext_fields.insert(ZONE_MODE_KEY, "true");
    req.ext_fields.insert(ZONE_NAME_KEY, "ZONE-A");
    let route = TopicRouteData::decode(&h.call(&req).body).unwrap();
    assert_eq!(route.broker_datas.len(), 1);
    assert_eq!(route.broker_datas[0].zone_name.as_deref(), Some("zone-a"));
    assert_eq!(route.queue_datas.len(), 1);
    assert!(body_text(&h.call(&route_request("T1"))).contains(r#""zoneName":"zone-b""#));
}

#[test]
fn concurrent_registrations_and_lookups() {
    let h = Arc::new(harness("race"));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let h = h.clone();
            std::thread::spawn(move || {
                let peer = Peer {
                    connection_id: t as u64 + 10,
                    ..PEER
                };
                for round in 0..50i64 {
                    let name = format!("broker-{t}");
                    let addr = format!("10.0.1.{t}:10911");
                    let topics = [topic("SHARED", 4), topic(&format!("OWN-{t}"), 2)];
                    let resp =
                        h.call_from(&register_request(&name, 0, &addr, &topics, round), peer);
                    assert_eq!(resp.code, 0, "{:?}", resp.remark);
                    let route = h.call_from(&route_request("SHARED"), peer);
                    assert_eq!(route.code, 0);
                    let parsed = TopicRouteData::decode(&route.body).unwrap();
                    assert_eq!(parsed.queue_datas.len(), parsed.broker_datas.len());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let route = TopicRouteData::decode(&h.call(&route_request("SHARED")).body).unwrap();
    assert_eq!(route.broker_datas.len(), 8);
    assert_eq!(h.processor.routes().live_broker_count(), 8);
    let cluster = ClusterInfo::decode(
        &h.call(&request(RequestCode::GetBrokerClusterInfo, &[]))
            .body,
    )
    .unwrap();
    assert_eq!(cluster.cluster_addr_table["DefaultCluster"].len(), 8);
}
