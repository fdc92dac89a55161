//! UPDATE_BROKER_CONFIG applies the keys upstream applies at once to the next request, answers
//! "in effect now" for them, and the value is still in force after a restart from the saved
//! file. GET_BROKER_CONFIG lists every upstream key.

use std::path::Path;

use ringmq_broker::{Broker, BrokerConfig};
use ringmq_remoting::RemotingCommand;

use super::{send, temp_dir, Client};

const MESSAGE_ILLEGAL: i32 = 13;
const NO_PERMISSION: i32 = 16;

/// The broker config the file at `path` gives, as `ringmq broker -c` reads it.
fn config_from_file(path: &Path) -> BrokerConfig {
    let text = std::fs::read_to_string(path).expect("broker.conf readable");
    let (mut c, notes) = BrokerConfig::from_properties_text(&text);
    assert!(notes.is_empty(), "{notes:?}");
    c.broker_config_path = Some(path.display().to_string());
    c
}

fn update(c: &mut Client, body: &str) -> RemotingCommand {
    c.call(RemotingCommand::request(25, 0).with_body(body.as_bytes().to_vec()))
}

/// GET_BROKER_CONFIG's value of `key`.
fn broker_config_value(c: &mut Client, key: &str) -> Option<String> {
    let r = c.call(RemotingCommand::request(26, 0));
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let text = String::from_utf8(r.body.to_vec()).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_string))
}

/// A half (prepared transaction) message send.
fn send_half(topic: &str) -> RemotingCommand {
    let mut r = send(
        topic,
        0,
        "TRAN_MSG\u{1}true\u{2}PGROUP\u{1}PG\u{2}",
        b"half",
    );
    r.ext_fields.insert("f", "4");
    r
}

/// What the live keys under test show: the codes of a 2 MiB send and of a half send.
fn observe(c: &mut Client) -> (i32, i32) {
    let big = vec![b'x'; 2 * 1024 * 1024];
    let big_code = c.call(send("TopicLive", 0, "", &big)).code;
    let half_code = c.call(send_half("TopicLive")).code;
    (big_code, half_code)
}

#[test]
fn live_keys_apply_to_the_next_request_and_survive_restart() {
    let dir = temp_dir("live-keys");
    std::fs::create_dir_all(&dir).unwrap();
    let conf_path = dir.join("broker.conf");
    std::fs::write(
        &conf_path,
        format!(
            "brokerName=broker-live\nlistenPort=0\nbindAddress=127.0.0.1\nbrokerIP1=127.0.0.1\n\
             storePathRootDir={}\nmappedFileSizeCommitLog=8388608\nmappedFileSizeConsumeQueue=60000\n",
            dir.join("store").display()
        ),
    )
    .unwrap();
    let broker = Broker::start(config_from_file(&conf_path)).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    assert_eq!(c.call(send("TopicLive", 0, "", b"create")).code, 0);
    assert_eq!(
        observe(&mut c),
        (0, 0),
        "defaults: 2 MiB and half sends pass"
    );

    let r = update(
        &mut c,
        "maxMessageSize=1048576\nrejectTransactionMessage=true\ntransactionCheckInterval=45000\n\
         transactionTimeOut=7000\ntransactionCheckMax=3\ndefaultQueryMaxNum=7\n\
         notifyConsumerIdsChangedEnable=false",
    );
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let remark = r.remark.clone().unwrap_or_default();
    assert!(
        remark.starts_with("in effect now: maxMessageSize=1048576, rejectTransactionMessage=true")
            && !remark.contains("after restart"),
        "{remark}"
    );
    assert_eq!(
        observe(&mut c),
        (MESSAGE_ILLEGAL, NO_PERMISSION),
        "the next sends see the new limits"
    );
    let small = vec![b'y'; 512 * 1024];
    assert_eq!(c.call(send("TopicLive", 0, "", &small)).code, 0);
    assert_eq!(
        broker_config_value(&mut c, "maxMessageSize").as_deref(),
        Some("1048576")
    );
    assert_eq!(
        broker_config_value(&mut c, "transactionCheckInterval").as_deref(),
        Some("45000")
    );
    drop(c);
    broker.shutdown();

    let broker = Broker::start(config_from_file(&conf_path)).expect("broker starts again");
    let mut c = Client::connect(broker.local_addr());
    assert_eq!(
        observe(&mut c),
        (MESSAGE_ILLEGAL, NO_PERMISSION),
        "still in force after restart"
    );
    for (key, value) in [
        ("transactionTimeOut", "7000"),
        ("transactionCheckMax", "3"),
        ("defaultQueryMaxNum", "7"),
        ("notifyConsumerIdsChangedEnable", "false"),
    ] {
        assert_eq!(broker_config_value(&mut c, key).as_deref(), Some(value));
    }
    // Raised again: the next 2 MiB send passes at once, although the store started with the
    // 1 MiB limit.
    let r = update(
        &mut c,
        "maxMessageSize=4194304\nrejectTransactionMessage=false",
    );
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(observe(&mut c), (0, 0), "raised limits in force at once");
    drop(c);
    broker.shutdown();
    let broker = Broker::start(config_from_file(&conf_path)).expect("broker starts a third time");
    let mut c = Client::connect(broker.local_addr());
    assert_eq!(
        observe(&mut c),
        (0, 0),
        "raised limits in force after restart"
    );
    drop(c);
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
