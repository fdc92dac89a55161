//! Client and lookup requests are read through remoting's typed headers and its one
//! fastjson-tolerant body reader: heartbeat and lock bodies in the fastjson dialect
//! (trailing commas, `L`-suffixed longs, bare numeric keys) are accepted, a missing
//! required header field is refused naming it, and UPDATE_CONSUMER_OFFSET keeps its own
//! INVALID_PARAMETER answer.

use ringmq_broker::Broker;
use ringmq_remoting::RemotingCommand;

use super::{config, temp_dir, Client};

const SYSTEM_ERROR: i32 = 1;
const INVALID_PARAMETER: i32 = 29;

#[test]
fn fastjson_dialect_heartbeat_and_lock_bodies_are_accepted() {
    let dir = temp_dir("typed-bodies");
    let broker = Broker::start(config(&dir, None)).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    // A trailing comma and an `L`-suffixed subVersion: fastjson writes and reads both.
    let heartbeat = r#"{"clientID":"fj-1","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"GFJ","messageModel":"CLUSTERING","subscriptionDataSet":[{"expressionType":"TAG","subString":"*","subVersion":1700000000000L,"topic":"TopicFJ"},]}],"producerDataSet":[],}"#;
    let r = c.call(RemotingCommand::request(34, 0).with_body(heartbeat));
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let list = c.call(RemotingCommand::request(38, 0).with_ext("consumerGroup", "GFJ"));
    assert_eq!(&list.body[..], br#"{"consumerIdList":["fj-1"]}"#);

    let lock = r#"{"clientId":"fj-1","consumerGroup":"GFJ","mqSet":[{"brokerName":"broker-it","queueId":1L,"topic":"TopicFJ"},],"onlyThisBroker":false}"#;
    let r = c.call(RemotingCommand::request(41, 0).with_body(lock));
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(
        &r.body[..],
        br#"{"lockOKMQSet":[{"brokerName":"broker-it","queueId":1,"topic":"TopicFJ"}]}"#
    );
    let r = c.call(RemotingCommand::request(42, 0).with_body(lock));
    assert_eq!(r.code, 0, "{:?}", r.remark);

    // An empty owner is refused like a missing one.
    let ownerless = r#"{"clientId":"","consumerGroup":"GFJ","mqSet":[]}"#;
    let r = c.call(RemotingCommand::request(41, 0).with_body(ownerless));
    assert_eq!(r.code, SYSTEM_ERROR);
    assert!(r.remark.as_deref().unwrap_or("").contains("clientId"));
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_required_fields_are_refused_naming_them() {
    let dir = temp_dir("typed-headers");
    let broker = Broker::start(config(&dir, None)).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    // (code, the fields sent, the required field left out)
    type Case = (i32, &'static [(&'static str, &'static str)], &'static str);
    let cases: &[Case] = &[
        (30, &[("topic", "T")], "queueId"),
        (29, &[("topic", "T"), ("queueId", "0")], "timestamp"),
        (14, &[("topic", "T"), ("queueId", "0")], "consumerGroup"),
        (33, &[], "offset"),
        (35, &[("consumerGroup", "G")], "clientID"),
        (38, &[], "consumerGroup"),
    ];
    for (code, present, missing) in cases {
        let mut request = RemotingCommand::request(*code, 0);
        for (k, v) in *present {
            request.ext_fields.insert(*k, *v);
        }
        let r = c.call(request);
        assert_eq!(r.code, SYSTEM_ERROR, "code {code}: {:?}", r.remark);
        let remark = r.remark.unwrap_or_default();
        assert!(
            remark.contains(&format!("<{missing}>")),
            "code {code}: remark {remark:?} does not name {missing}"
        );
    }
    let update = RemotingCommand::request(15, 0)
        .with_ext("consumerGroup", "G")
        .with_ext("topic", "T")
        .with_ext("queueId", "0");
    let r = c.call(update);
    assert_eq!(r.code, INVALID_PARAMETER, "{:?}", r.remark);
    assert!(r.remark.unwrap_or_default().contains("<commitOffset>"));
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
