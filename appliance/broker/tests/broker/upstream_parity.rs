//! What a producer or consumer gets back matches Apache RocketMQ 5.x message by message: the
//! queue named in send results of parked (delay-level, transaction half) messages, the broker
//! properties stored with batch members and committed transaction messages, and the remarks of
//! common refusals.

use std::collections::BTreeSet;
use std::path::Path;

use ringmq_broker::{Broker, BrokerConfig};
use ringmq_remoting::message::properties;
use ringmq_remoting::message::{batch, id};
use ringmq_remoting::RemotingCommand;

use super::{config, pull, pull_found, records, send, temp_dir, wait_max_offset, Client};

/// Upstream's `FAQUrl.suggestTodo(…)` tail.
const FAQ: &str = "\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details.";
/// Transaction type PREPARED in the send header's sysFlag.
const SYSFLAG_PREPARED: i32 = 0x4;

fn config_with(dir: &Path, settings: &[(&str, &str)]) -> BrokerConfig {
    let mut c = config(dir, None);
    let mut notes = Vec::new();
    for (key, value) in settings {
        c.apply(key, value, &mut notes);
    }
    assert!(notes.is_empty(), "{notes:?}");
    c
}

fn keys_of(props: &str) -> BTreeSet<String> {
    properties::iter(props)
        .map(|(k, _)| k.to_string())
        .collect()
}

#[test]
fn delay_level_send_answers_the_queue_id_the_producer_asked_for() {
    let dir = temp_dir("parity-delay");
    let broker = Broker::start(config(&dir, None)).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    // Level 3 parks in SCHEDULE_TOPIC_XXXX queue 2; the producer asked for queue 3.
    let resp = c.call(send(
        "TopicParityDelay",
        3,
        "DELAY\u{1}3\u{2}UNIQ_KEY\u{1}UD1\u{2}WAIT\u{1}true\u{2}",
        b"later",
    ));
    assert_eq!(resp.code, 0, "{:?}", resp.remark);
    assert_eq!(resp.ext_fields.get("queueId"), Some("3"));
    assert_eq!(resp.ext_fields.get("queueOffset"), Some("0"));
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn half_message_send_answers_the_queue_id_the_producer_asked_for() {
    let dir = temp_dir("parity-half");
    let broker = Broker::start(config(&dir, None)).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    let mut request = send(
        "TopicParityHalf",
        2,
        "TRAN_MSG\u{1}true\u{2}PGROUP\u{1}PG\u{2}UNIQ_KEY\u{1}UH1\u{2}WAIT\u{1}true\u{2}",
        b"half",
    );
    request.ext_fields.insert("f", SYSFLAG_PREPARED.to_string());
    let resp = c.call(request);
    assert_eq!(resp.code, 0, "{:?}", resp.remark);
    // The half message is stored in RMQ_SYS_TRANS_HALF_TOPIC queue 0.
    assert_eq!(resp.ext_fields.get("queueId"), Some("2"));
    assert_eq!(resp.ext_fields.get("transactionId"), Some("UH1"));
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_batch_member_carries_the_cluster_property_and_its_own_uniq_key() {
    let dir = temp_dir("parity-batch");
    let broker = Broker::start(config(&dir, None)).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    let mut body = Vec::new();
    for (i, props) in [
        "UNIQ_KEY\u{1}UB0\u{2}WAIT\u{1}true\u{2}",
        // no trailing separator: the broker must add one before CLUSTER
        "UNIQ_KEY\u{1}UB1\u{2}TAGS\u{1}TagB",
        "",
    ]
    .iter()
    .enumerate()
    {
        batch::encode_batch_item(&mut body, 0, format!("m{i}").as_bytes(), props.as_bytes())
            .unwrap();
    }
    let mut request = send(
        "TopicParityBatch",
        0,
        "UNIQ_KEY\u{1}UBATCH\u{2}WAIT\u{1}true\u{2}",
        &body,
    );
    request.code = 320;
    request.ext_fields.insert("m", "true");
    let resp = c.call(request);
    assert_eq!(resp.code, 0, "{:?}", resp.remark);

    // Members are dispatched one by one after the append: wait for all three.
    wait_max_offset(&mut c, "TopicParityBatch", 0, 3);
    let got = records(&pull_found(&mut c, pull("TopicParityBatch", 0, 0, 0x4, 0)).body);
    assert_eq!(got.len(), 3);
    for (i, (body, props, _)) in got.iter().enumerate() {
        assert_eq!(body, format!("m{i}").as_bytes());
        assert_eq!(
            properties::find(props, "CLUSTER"),
            Some("DefaultCluster"),
            "member {i}: {props:?}"
        );
    }
    assert_eq!(properties::find(&got[0].1, "UNIQ_KEY"), Some("UB0"));
    assert_eq!(properties::find(&got[1].1, "UNIQ_KEY"), Some("UB1"));
    assert_eq!(properties::find(&got[1].1, "TAGS"), Some("TagB"));
    assert_eq!(keys_of(&got[2].1), BTreeSet::from(["CLUSTER".to_string()]));
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn committed_transaction_message_keeps_the_half_message_properties() {
    let dir = temp_dir("parity-commit");
    let broker = Broker::start(config(&dir, None)).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    let mut request = send(
        "TopicParityTx",
        1,
        "TRAN_MSG\u{1}true\u{2}PGROUP\u{1}PG\u{2}UNIQ_KEY\u{1}UTX1\u{2}TAGS\u{1}TagT\u{2}WAIT\u{1}true\u{2}",
        b"committed",
    );
    request.ext_fields.insert("f", SYSFLAG_PREPARED.to_string());
    let resp = c.call(request);
    assert_eq!(resp.code, 0, "{:?}", resp.remark);
    let msg_id = resp.ext_fields.get("msgId").unwrap().to_string();
    let commit_log_offset = id::decode_offset_msg_id(&msg_id).unwrap().commit_log_offset;
    let mut end = RemotingCommand::request(37, 0);
    for (k, v) in [
        ("producerGroup", "PG".to_string()),
        (
            "tranStateTableOffset",
            resp.ext_fields.get("queueOffset").unwrap().to_string(),
        ),
        ("commitLogOffset", commit_log_offset.to_string()),
        ("commitOrRollback", "8".to_string()),
        ("fromTransactionCheck", "false".to_string()),
        ("msgId", msg_id.clone()),
        ("transactionId", "UTX1".to_string()),
    ] {
        end.ext_fields.insert(k, v);
    }
    let ended = c.call(end);
    assert_eq!(ended.code, 0, "{:?}", ended.remark);

    let got = records(&pull_found(&mut c, pull("TopicParityTx", 1, 0, 0x4, 0)).body);
    assert_eq!(got.len(), 1);
    let props = &got[0].1;
    let want: BTreeSet<String> = [
        "TRAN_MSG",
        "PGROUP",
        "UNIQ_KEY",
        "TAGS",
        "WAIT",
        "CLUSTER",
        "__transactionId__",
        "REAL_TOPIC",
        "REAL_QID",
    ]
    .iter()
    .map(|k| k.to_string())
    .collect();
    assert_eq!(keys_of(props), want, "{props:?}");
    assert_eq!(properties::find(props, "REAL_TOPIC"), Some("TopicParityTx"));
    assert_eq!(properties::find(props, "REAL_QID"), Some("1"));
    assert_eq!(properties::find(props, "TRAN_MSG"), Some("true"));
    assert_eq!(properties::find(props, "WAIT"), Some("true"));
    assert_eq!(properties::find(props, "__transactionId__"), Some("UTX1"));
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every remark that differs from `want`, as (what, code, remark, want).
type Mismatches = Vec<(&'static str, i32, Option<String>, String)>;

fn check_remark(
    mismatches: &mut Mismatches,
    what: &'static str,
    resp: &RemotingCommand,
    code: i32,
    want: String,
) {
    if resp.code != code || resp.remark.as_deref() != Some(want.as_str()) {
        mismatches.push((what, resp.code, resp.remark.clone(), want));
    }
}

#[test]
fn common_refusals_carry_upstream_remarks() {
    let dir = temp_dir("parity-remarks");
    let broker = Broker::start(config_with(
        &dir,
        &[
            ("maxMessageSize", "1024"),
            ("autoCreateSubscriptionGroup", "false"),
        ],
    ))
    .expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    let mut mismatches = Mismatches::new();

    let resp = c.call(send("TopicParityBig", 0, "", &[7u8; 1025]));
    check_remark(
        &mut mismatches,
        "body over maxMessageSize (MESSAGE_ILLEGAL)",
        &resp,
        13,
        "the message is illegal, maybe msg body or properties length not matched. msg body length limit 1024B, msg properties length limit 32KB.".to_string(),
    );

    let mut unknown = send("TopicParityNone", 0, "", b"x");
    unknown.ext_fields.insert("c", "NoSuchTemplate");
    let resp = c.call(unknown);
    check_remark(
        &mut mismatches,
        "send to an unknown topic (TOPIC_NOT_EXIST)",
        &resp,
        17,
        format!("topic[TopicParityNone] not exist, apply first please!{FAQ}"),
    );

    let resp = c.call(send("%RETRY%NoSuchGroup", 0, "", b"x"));
    check_remark(
        &mut mismatches,
        "send to the retry topic of an unknown group (SUBSCRIPTION_GROUP_NOT_EXIST)",
        &resp,
        26,
        format!("subscription group not exist, NoSuchGroup {FAQ}"),
    );

    // The pull helper pulls as group G1, which does not exist yet.
    let resp = c.call(pull("TopicParityBig", 0, 0, 0x4, 0));
    check_remark(
        &mut mismatches,
        "pull by an unknown group (SUBSCRIPTION_GROUP_NOT_EXIST)",
        &resp,
        26,
        format!("subscription group [G1] does not exist, {FAQ}"),
    );
    let create_group = RemotingCommand::request(200, 0)
        .with_body(br#"{"groupName":"G1","consumeEnable":true}"#.to_vec());
    let created = c.call(create_group);
    assert_eq!(created.code, 0, "{:?}", created.remark);
    let resp = c.call(pull("TopicParityNone", 0, 0, 0x4, 0));
    check_remark(
        &mut mismatches,
        "pull from an unknown topic (TOPIC_NOT_EXIST)",
        &resp,
        17,
        format!("topic[TopicParityNone] not exist, apply first please! {FAQ}"),
    );

    let mut read_only = RemotingCommand::request(17, 0);
    for (k, v) in [
        ("topic", "TopicParityRO"),
        ("defaultTopic", "TBW102"),
        ("readQueueNums", "1"),
        ("writeQueueNums", "1"),
        ("perm", "4"),
        ("topicFilterType", "SINGLE_TAG"),
        ("order", "false"),
    ] {
        read_only.ext_fields.insert(k, v);
    }
    let created = c.call(read_only);
    assert_eq!(created.code, 0, "{:?}", created.remark);
    let resp = c.call(send("TopicParityRO", 0, "", b"x"));
    check_remark(
        &mut mismatches,
        "send to a read-only topic (NO_PERMISSION)",
        &resp,
        16,
        "the topic[TopicParityRO] sending message is forbidden".to_string(),
    );
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(mismatches.is_empty(), "{mismatches:#?}");
}

#[test]
fn the_epoch_cache_request_gets_upstreams_answer_outside_controller_mode() {
    let dir = temp_dir("parity-epoch");
    let broker = Broker::start(config(&dir, None)).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    let resp = c.call(RemotingCommand::request(
        ringmq_remoting::RequestCode::GetBrokerEpochCache.code(),
        0,
    ));
    assert_eq!(resp.code, ringmq_remoting::ResponseCode::SystemError.code());
    assert_eq!(
        resp.remark.as_deref(),
        Some("this request only for controllerMode ")
    );
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
