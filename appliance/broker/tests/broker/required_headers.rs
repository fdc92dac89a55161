//! Requests missing a required header field (`@CFNotNull` upstream) are refused with
//! SYSTEM_ERROR and a remark naming the field, and nothing is stored; a delete of a blank
//! topic is refused with INVALID_PARAMETER.

use ringmq_broker::Broker;
use ringmq_remoting::RemotingCommand;

use super::{config, send, temp_dir, wait_max_offset, Client};

const SYSTEM_ERROR: i32 = 1;
const INVALID_PARAMETER: i32 = 29;

/// The queue's max offset (GET_MAX_OFFSET), i.e. how many messages it holds.
fn max_offset(c: &mut Client, topic: &str, queue_id: i32) -> i64 {
    let r = c.call(
        RemotingCommand::request(30, 0)
            .with_ext("topic", topic)
            .with_ext("queueId", queue_id.to_string()),
    );
    assert_eq!(r.code, 0, "{:?}", r.remark);
    r.ext_fields
        .get("offset")
        .and_then(|o| o.parse().ok())
        .expect("max offset in the answer")
}

/// A SEND_MESSAGE (10) with every field under its long name.
fn send_v1(topic: &str) -> RemotingCommand {
    let mut r = RemotingCommand::request(10, 0);
    for (k, v) in [
        ("producerGroup", "PG"),
        ("topic", topic),
        ("defaultTopic", "TBW102"),
        ("defaultTopicQueueNums", "4"),
        ("queueId", "0"),
        ("sysFlag", "0"),
        ("bornTimestamp", "1700000000000"),
        ("flag", "0"),
        ("properties", "WAIT\u{1}true\u{2}"),
    ] {
        r.ext_fields.insert(k, v);
    }
    r.with_body(b"v1 body".to_vec())
}

fn assert_refused_naming(resp: &RemotingCommand, field: &str, what: &str) {
    assert_eq!(resp.code, SYSTEM_ERROR, "{what}: {:?}", resp.remark);
    let remark = resp.remark.as_deref().unwrap_or("");
    assert!(
        remark.contains(&format!("<{field}>")),
        "{what}: remark {remark:?} does not name {field}"
    );
}

#[test]
fn sends_missing_a_required_field_are_refused_naming_it_and_store_nothing() {
    let dir = temp_dir("required-send");
    let broker = Broker::start(config(&dir, None)).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    let topic = "TopicRequiredFields";
    // One complete send of each kind creates the topic and shows both are accepted.
    let ok = c.call(send(topic, 0, "WAIT\u{1}true\u{2}", b"complete v2"));
    assert_eq!(ok.code, 0, "{:?}", ok.remark);
    let ok = c.call(send_v1(topic));
    assert_eq!(ok.code, 0, "{:?}", ok.remark);
    wait_max_offset(&mut c, topic, 0, 2);

    for field in ["a", "b", "c", "d", "e", "f", "g", "h"] {
        for code in [310, 320] {
            let mut request = send(topic, 0, "WAIT\u{1}true\u{2}", b"incomplete v2");
            request.code = code;
            request.ext_fields.remove(field);
            let resp = c.call(request);
            assert_refused_naming(&resp, field, &format!("code {code} without {field}"));
        }
    }
    for field in [
        "producerGroup",
        "topic",
        "defaultTopic",
        "defaultTopicQueueNums",
        "queueId",
        "sysFlag",
        "bornTimestamp",
        "flag",
    ] {
        let mut request = send_v1(topic);
        request.ext_fields.remove(field);
        let resp = c.call(request);
        assert_refused_naming(&resp, field, &format!("SEND_MESSAGE without {field}"));
    }
    // An empty number is as good as absent (Go and C++ send "" for unset fields).
    let mut request = send(topic, 0, "", b"empty sysFlag");
    request.ext_fields.insert("f", "");
    assert_refused_naming(&c.call(request), "f", "code 310 with f empty");

    // A later complete send lands right after the two accepted ones: nothing else was
    // appended in between.
    let ok = c.call(send(topic, 0, "WAIT\u{1}true\u{2}", b"complete again"));
    assert_eq!(ok.code, 0, "{:?}", ok.remark);
    assert_eq!(ok.ext_fields.get("queueOffset"), Some("2"));
    wait_max_offset(&mut c, topic, 0, 3);
    assert_eq!(
        max_offset(&mut c, topic, 0),
        3,
        "only complete sends were stored"
    );
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn delete_topic_with_a_blank_or_missing_topic_is_refused() {
    let dir = temp_dir("required-delete");
    let broker = Broker::start(config(&dir, None)).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    let topic = "TopicKeptByBlankDelete";
    let ok = c.call(send(topic, 0, "WAIT\u{1}true\u{2}", b"stays"));
    assert_eq!(ok.code, 0, "{:?}", ok.remark);

    for blank in ["", "  "] {
        let resp = c.call(RemotingCommand::request(215, 0).with_ext("topic", blank));
        assert_eq!(
            resp.code, INVALID_PARAMETER,
            "topic {blank:?}: {:?}",
            resp.remark
        );
        assert_eq!(
            resp.remark.as_deref(),
            Some("The specified topic is blank."),
            "topic {blank:?}"
        );
    }
    let resp = c.call(RemotingCommand::request(215, 0));
    assert_refused_naming(&resp, "topic", "DELETE_TOPIC_IN_BROKER without topic");

    // The topic is still there: its config answers and its message is still counted.
    let config = c.call(RemotingCommand::request(351, 0).with_ext("topic", topic));
    assert_eq!(config.code, 0, "{:?}", config.remark);
    wait_max_offset(&mut c, topic, 0, 1);
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
