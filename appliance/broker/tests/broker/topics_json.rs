//! `config/topics.json`, the persisted topic table: the exact bytes the broker saves, and a
//! table written by an upstream Java broker (fastjson layout) loads with every field.

use std::path::PathBuf;

use ringmq_broker::metadata::topic_config::TopicConfigManager;
use ringmq_broker::BrokerConfig;

/// A table as a Java broker writes it: fastjson pretty form (tabs), `topicConfigTable`
/// before `dataVersion`, one read-only ordered MULTI_TAG topic with attributes and more than
/// 8 queues, and one plain topic without an `attributes` field.
const JAVA_TOPICS_JSON: &str = "{\n\
\t\"topicConfigTable\":{\n\
\t\t\"OrderTopic\":{\n\
\t\t\t\"attributes\":{\n\
\t\t\t\t\"+message.type\":\"FIFO\",\n\
\t\t\t\t\"note\":\"say \\\"hi\\\" \u{e9}\\u001F\"\n\
\t\t\t},\n\
\t\t\t\"order\":true,\n\
\t\t\t\"perm\":4,\n\
\t\t\t\"readQueueNums\":24,\n\
\t\t\t\"topicFilterType\":\"MULTI_TAG\",\n\
\t\t\t\"topicName\":\"OrderTopic\",\n\
\t\t\t\"topicSysFlag\":1,\n\
\t\t\t\"writeQueueNums\":32\n\
\t\t},\n\
\t\t\"PlainTopic\":{\n\
\t\t\t\"order\":false,\n\
\t\t\t\"perm\":6,\n\
\t\t\t\"readQueueNums\":8,\n\
\t\t\t\"topicFilterType\":\"SINGLE_TAG\",\n\
\t\t\t\"topicName\":\"PlainTopic\",\n\
\t\t\t\"topicSysFlag\":0,\n\
\t\t\t\"writeQueueNums\":8\n\
\t\t}\n\
\t},\n\
\t\"dataVersion\":{\n\
\t\t\"counter\":7,\n\
\t\t\"stateVersion\":0,\n\
\t\t\"timestamp\":1700000000000\n\
\t}\n\
}";

fn store_root(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("ringmq-topics-json-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn config(root: &std::path::Path) -> BrokerConfig {
    BrokerConfig {
        broker_name: "broker-a".into(),
        broker_cluster_name: "DefaultCluster".into(),
        store_path_root_dir: root.display().to_string(),
        ..BrokerConfig::default()
    }
}

fn write_java_file(c: &BrokerConfig) -> PathBuf {
    let path = c.config_dir().join("topics.json");
    std::fs::create_dir_all(c.config_dir()).unwrap();
    std::fs::write(&path, JAVA_TOPICS_JSON).unwrap();
    path
}

#[test]
fn java_written_topics_json_loads_every_field() {
    let root = store_root("java");
    let c = config(&root);
    write_java_file(&c);
    let m = TopicConfigManager::load(&c).expect("a Java topics.json loads");
    let order = m.select("OrderTopic").expect("OrderTopic from the file");
    assert_eq!(
        (order.read_queue_nums, order.write_queue_nums, order.perm),
        (24, 32, 4)
    );
    assert_eq!((order.topic_sys_flag, order.order), (1, true));
    assert!(order.is_multi_tag() && order.is_readable() && !order.is_writeable());
    assert_eq!(
        order.attributes.get("+message.type").map(String::as_str),
        Some("FIFO")
    );
    assert_eq!(
        order.attributes.get("note").map(String::as_str),
        Some("say \"hi\" \u{e9}\u{1f}")
    );
    let plain = m.select("PlainTopic").expect("PlainTopic from the file");
    assert!(plain.attributes.is_empty() && !plain.is_multi_tag() && !plain.order);
    assert_eq!((plain.read_queue_nums, plain.perm), (8, 6));
    // The system topics are still there, and the file's version is the table's version.
    assert!(m.select("TBW102").is_some() && m.select("SCHEDULE_TOPIC_XXXX").is_some());
    let dv = m.data_version();
    assert_eq!((dv.counter, dv.timestamp), (7, 1_700_000_000_000));
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn saved_topics_json_is_pinned_byte_for_byte() {
    let root = store_root("golden");
    let c = config(&root);
    let path = write_java_file(&c);
    let m = TopicConfigManager::load(&c).unwrap();
    m.persist().unwrap();
    let saved = std::fs::read_to_string(&path).unwrap();
    assert_eq!(saved, SAVED_TOPICS_JSON, "topics.json bytes changed");
    // What was saved loads back to the same table and saves to the same bytes again.
    let again = TopicConfigManager::load(&c).unwrap();
    assert_eq!(again.topic_names(), m.topic_names());
    for name in m.topic_names() {
        assert_eq!(again.select(&name), m.select(&name), "{name}");
    }
    again.persist().unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), SAVED_TOPICS_JSON);
    let _ = std::fs::remove_dir_all(&root);
}

/// The file `saved_topics_json_is_pinned_byte_for_byte` expects: two-space indentation,
/// `"key": value`, keys sorted, the system topics of `broker-a` in `DefaultCluster`.
const SAVED_TOPICS_JSON: &str = r#"{
  "dataVersion": {
    "counter": 7,
    "stateVersion": 0,
    "timestamp": 1700000000000
  },
  "topicConfigTable": {
    "BenchmarkTest": {
      "attributes": {},
      "order": false,
      "perm": 6,
      "readQueueNums": 1024,
      "topicFilterType": "SINGLE_TAG",
      "topicName": "BenchmarkTest",
      "topicSysFlag": 0,
      "writeQueueNums": 1024
    },
    "DefaultCluster": {
      "attributes": {},
      "order": false,
      "perm": 7,
      "readQueueNums": 16,
      "topicFilterType": "SINGLE_TAG",
      "topicName": "DefaultCluster",
      "topicSysFlag": 0,
      "writeQueueNums": 16
    },
    "DefaultCluster_REPLY_TOPIC": {
      "attributes": {},
      "order": false,
      "perm": 6,
      "readQueueNums": 1,
      "topicFilterType": "SINGLE_TAG",
      "topicName": "DefaultCluster_REPLY_TOPIC",
      "topicSysFlag": 0,
      "writeQueueNums": 1
    },
    "OFFSET_MOVED_EVENT": {
      "attributes": {},
      "order": false,
      "perm": 6,
      "readQueueNums": 1,
      "topicFilterType": "SINGLE_TAG",
      "topicName": "OFFSET_MOVED_EVENT",
      "topicSysFlag": 0,
      "writeQueueNums": 1
    },
    "OrderTopic": {
      "attributes": {
        "+message.type": "FIFO",
        "note": "say \"hi\" é\u001f"
      },
      "order": true,
      "perm": 4,
      "readQueueNums": 24,
      "topicFilterType": "MULTI_TAG",
      "topicName": "OrderTopic",
      "topicSysFlag": 1,
      "writeQueueNums": 32
    },
    "PlainTopic": {
      "attributes": {},
      "order": false,
      "perm": 6,
      "readQueueNums": 8,
      "topicFilterType": "SINGLE_TAG",
      "topicName": "PlainTopic",
      "topicSysFlag": 0,
      "writeQueueNums": 8
    },
    "RMQ_SYS_TRANS_HALF_TOPIC": {
      "attributes": {},
      "order": false,
      "perm": 6,
      "readQueueNums": 1,
      "topicFilterType": "SINGLE_TAG",
      "topicName": "RMQ_SYS_TRANS_HALF_TOPIC",
      "topicSysFlag": 0,
      "writeQueueNums": 1
    },
    "RMQ_SYS_TRANS_OP_HALF_TOPIC": {
      "attributes": {},
      "order": false,
      "perm": 6,
      "readQueueNums": 1,
      "topicFilterType": "SINGLE_TAG",
      "topicName": "RMQ_SYS_TRANS_OP_HALF_TOPIC",
      "topicSysFlag": 0,
      "writeQueueNums": 1
    },
    "SCHEDULE_TOPIC_XXXX": {
      "attributes": {},
      "order": false,
      "perm": 6,
      "readQueueNums": 18,
      "topicFilterType": "SINGLE_TAG",
      "topicName": "SCHEDULE_TOPIC_XXXX",
      "topicSysFlag": 0,
      "writeQueueNums": 18
    },
    "SELF_TEST_TOPIC": {
      "attributes": {},
      "order": false,
      "perm": 6,
      "readQueueNums": 1,
      "topicFilterType": "SINGLE_TAG",
      "topicName": "SELF_TEST_TOPIC",
      "topicSysFlag": 0,
      "writeQueueNums": 1
    },
    "TBW102": {
      "attributes": {},
      "order": false,
      "perm": 7,
      "readQueueNums": 8,
      "topicFilterType": "SINGLE_TAG",
      "topicName": "TBW102",
      "topicSysFlag": 0,
      "writeQueueNums": 8
    },
    "broker-a": {
      "attributes": {},
      "order": false,
      "perm": 7,
      "readQueueNums": 1,
      "topicFilterType": "SINGLE_TAG",
      "topicName": "broker-a",
      "topicSysFlag": 0,
      "writeQueueNums": 1
    },
    "rmq_sys_REVIVE_LOG_DefaultCluster": {
      "attributes": {},
      "order": false,
      "perm": 6,
      "readQueueNums": 8,
      "topicFilterType": "SINGLE_TAG",
      "topicName": "rmq_sys_REVIVE_LOG_DefaultCluster",
      "topicSysFlag": 0,
      "writeQueueNums": 8
    },
    "rmq_sys_SYNC_BROKER_MEMBER_broker-a": {
      "attributes": {},
      "order": false,
      "perm": 1,
      "readQueueNums": 1,
      "topicFilterType": "SINGLE_TAG",
      "topicName": "rmq_sys_SYNC_BROKER_MEMBER_broker-a",
      "topicSysFlag": 0,
      "writeQueueNums": 1
    },
    "rmq_sys_wheel_timer": {
      "attributes": {},
      "order": false,
      "perm": 6,
      "readQueueNums": 1,
      "topicFilterType": "SINGLE_TAG",
      "topicName": "rmq_sys_wheel_timer",
      "topicSysFlag": 0,
      "writeQueueNums": 1
    }
  }
}"#;
