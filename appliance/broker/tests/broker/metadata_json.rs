//! The persisted consumer metadata (`config/subscriptionGroup.json`, `consumerOffset.json`,
//! `delayOffset.json`) and the admin answers built from it: the exact bytes the broker saves
//! and serves, for tables an upstream Java broker wrote (fastjson layout, bare numeric keys).

use std::path::{Path, PathBuf};

use ringmq_broker::metadata::consumer_offset::ConsumerOffsetManager;
use ringmq_broker::metadata::delay_offset::DelayOffsetManager;
use ringmq_broker::metadata::subscription_group::{SubscriptionGroupManager, SYSTEM_GROUPS};
use ringmq_broker::{Broker, BrokerConfig};
use ringmq_remoting::RemotingCommand;

use super::{config, temp_dir, Client};

/// A group table as a Java broker writes it (tabs): one group with every field, attributes
/// needing escapes, a retry policy and a subscription set whose keys are not sorted, and one
/// group with an empty name (named by its key), an explicit null policy and defaults for the rest.
const JAVA_GROUPS_JSON: &str = "{\n\
\t\"dataVersion\":{\"counter\":4,\"stateVersion\":1,\"timestamp\":1700000000000},\n\
\t\"forbiddenTable\":{\"G_ORDER\":{\"T1\":2}},\n\
\t\"subscriptionGroupTable\":{\n\
\t\t\"G_ORDER\":{\n\
\t\t\t\"attributes\":{\"+x\":\"1\",\"note\":\"a \\\"q\\\" \u{e9}\\u001F\"},\n\
\t\t\t\"brokerId\":0,\n\
\t\t\t\"consumeBroadcastEnable\":false,\n\
\t\t\t\"consumeEnable\":true,\n\
\t\t\t\"consumeFromMinEnable\":false,\n\
\t\t\t\"consumeMessageOrderly\":true,\n\
\t\t\t\"consumeTimeoutMinute\":20,\n\
\t\t\t\"groupName\":\"G_ORDER\",\n\
\t\t\t\"groupRetryPolicy\":{\"type\":\"EXPONENTIAL\",\"exponentialRetryPolicy\":{\"multiplier\":2,\"initial\":1000,\"max\":6.0E4}},\n\
\t\t\t\"groupSysFlag\":0,\n\
\t\t\t\"notifyConsumerIdsChangedEnable\":false,\n\
\t\t\t\"retryMaxTimes\":3,\n\
\t\t\t\"retryQueueNums\":2,\n\
\t\t\t\"subscriptionDataSet\":[{\"topic\":\"T1\",\"expressionType\":\"TAG\",\"expression\":\"a||b\"}],\n\
\t\t\t\"whichBrokerWhenConsumeSlowly\":1\n\
\t\t},\n\
\t\t\"G_MIN\":{\"groupName\":\"\",\"groupRetryPolicy\":null,\"retryMaxTimes\":-1}\n\
\t}\n\
}";

fn store_config(root: &Path) -> BrokerConfig {
    BrokerConfig {
        store_path_root_dir: root.display().to_string(),
        ..BrokerConfig::default()
    }
}

fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `text` with the value of every `"timestamp"` key replaced by `T`, after checking each is
/// a time between `from_ms` and now: the files restamp their version when saved.
fn mask_timestamps(text: &str, from_ms: i64) -> String {
    let now_ms = ringmq_broker::persist::now_ms();
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("\"timestamp\":") {
        let key_end = at + "\"timestamp\":".len();
        let value_at = key_end + (rest.len() - key_end - rest[key_end..].trim_start().len());
        out.push_str(&rest[..value_at]);
        let digits: String = rest[value_at..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        let ts: i64 = digits.parse().expect("a numeric timestamp");
        assert!((from_ms..=now_ms).contains(&ts), "timestamp {ts} not fresh");
        out.push('T');
        rest = &rest[value_at + digits.len()..];
    }
    out.push_str(rest);
    out
}

#[test]
fn saved_subscription_group_json_is_pinned_byte_for_byte() {
    let root = temp_dir("groups-json");
    let c = store_config(&root);
    let path = write_file(&c.config_dir(), "subscriptionGroup.json", JAVA_GROUPS_JSON);
    let m = SubscriptionGroupManager::load(&c).expect("a Java subscriptionGroup.json loads");
    let g = m.get("G_ORDER").unwrap();
    assert_eq!((g.retry_max_times, g.retry_queue_nums), (3, 2));
    assert!(g.consume_message_orderly && !g.consume_broadcast_enable);
    assert_eq!(m.forbidden("G_ORDER", "T1"), 2);
    assert_eq!(m.get("G_MIN").unwrap().group_name, "G_MIN");
    m.persist().unwrap();
    let saved = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        saved,
        saved_groups_json(),
        "subscriptionGroup.json bytes changed"
    );
    // What was saved loads back and saves to the same bytes again, except that the null
    // policy left out of the file reads back as the default one.
    let again = SubscriptionGroupManager::load(&c).unwrap();
    again.persist().unwrap();
    let g_min = "\"groupName\": \"G_MIN\",\n";
    let g_min_default_policy = format!(
        "{g_min}      \"groupRetryPolicy\": {{\n        \"type\": \"CUSTOMIZED\"\n      }},\n"
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        saved_groups_json().replace(g_min, &g_min_default_policy)
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn subscription_group_json_without_a_version_starts_a_fresh_one() {
    let root = temp_dir("groups-json-fresh");
    let c = store_config(&root);
    write_file(
        &c.config_dir(),
        "subscriptionGroup.json",
        "{\"subscriptionGroupTable\":{\"G\":{\"groupName\":\"G\",\"retryQueueNums\":4}}}",
    );
    let before_ms = ringmq_broker::persist::now_ms();
    let m = SubscriptionGroupManager::load(&c).unwrap();
    assert_eq!(m.get("G").unwrap().retry_queue_nums, 4);
    let version = m.wrapper().data_version;
    assert_eq!((version.counter, version.state_version), (0, 0));
    let now_ms = ringmq_broker::persist::now_ms();
    assert!(
        (before_ms..=now_ms).contains(&version.timestamp),
        "{version:?}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn subscription_group_admin_answers_are_pinned_byte_for_byte() {
    let dir = temp_dir("groups-admin");
    let c = config(&dir, None);
    write_file(&c.config_dir(), "subscriptionGroup.json", JAVA_GROUPS_JSON);
    let started_ms = ringmq_broker::persist::now_ms();
    let broker = Broker::start(c).expect("broker starts");
    let mut client = Client::connect(broker.local_addr());

    // GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): the whole table, compact.
    let all = client.call(RemotingCommand::request(201, 0));
    assert_eq!(all.code, 0, "{:?}", all.remark);
    // GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): the file's content, compact.
    assert_eq!(
        String::from_utf8_lossy(&all.body),
        compact(&saved_groups_json())
    );

    // GET_SUBSCRIPTIONGROUP_CONFIG (352): one group, or SUBSCRIPTION_GROUP_NOT_EXIST (26).
    let get = |client: &mut Client, group: &str| {
        client.call(RemotingCommand::request(352, 0).with_ext("group", group))
    };
    let one = get(&mut client, "G_ORDER");
    assert_eq!(one.code, 0, "{:?}", one.remark);
    let g_order = compact(SAVED_G_ORDER);
    assert_eq!(
        String::from_utf8_lossy(&one.body),
        g_order.strip_prefix("\"G_ORDER\":").unwrap()
    );
    let missing = get(&mut client, "G_NONE");
    assert_eq!(missing.code, 26);
    assert_eq!(
        missing.remark.as_deref(),
        Some("No group in this broker, group: G_NONE")
    );

    // UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) with a sparse body; the group reads back
    // with upstream defaults for every absent field.
    let created = client.call(
        RemotingCommand::request(200, 0).with_body(
            br#"{"groupName":"G_NEW","retryQueueNums":3,"groupRetryPolicy":{"type":"CUSTOMIZED","customizedRetryPolicy":{"next":[1000,2000]}}}"#
                .to_vec(),
        ),
    );
    assert_eq!(created.code, 0, "{:?}", created.remark);
    let new = get(&mut client, "G_NEW");
    assert_eq!(String::from_utf8_lossy(&new.body), G_NEW_BODY);

    // The version that update stamped reaches the file, in the file's layout.
    let saved =
        std::fs::read_to_string(broker_config_dir(&dir).join("subscriptionGroup.json")).unwrap();
    assert!(
        mask_timestamps(&saved, started_ms).starts_with(
            "{\n  \"dataVersion\": {\n    \"counter\": 5,\n    \"stateVersion\": 1,\n    \"timestamp\": T\n  },"
        ),
        "{saved}"
    );

    // GET_BROKER_CONFIG (26): the configuration's version header, compact.
    let conf = client.call(RemotingCommand::request(26, 0));
    assert_eq!(conf.code, 0, "{:?}", conf.remark);
    let version = conf.ext_fields.get("version").expect("a version header");
    assert_eq!(
        mask_timestamps(version, started_ms - 60_000),
        "{\"counter\":0,\"stateVersion\":0,\"timestamp\":T}"
    );
    drop(client);
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

fn broker_config_dir(root: &Path) -> PathBuf {
    root.join("config")
}

/// Checks an offsets manager just loaded: it encodes as `loaded` (the file's version kept),
/// and saving writes `saved` to `path` (the counter bumped, the timestamp restamped, masked).
fn assert_loaded_then_saved(
    encode: impl Fn() -> String,
    persist: impl Fn() -> std::io::Result<()>,
    path: &Path,
    loaded: &str,
    saved: &str,
) {
    assert_eq!(encode(), loaded);
    let before_ms = ringmq_broker::persist::now_ms();
    persist().unwrap();
    let text = std::fs::read_to_string(path).unwrap();
    assert_eq!(mask_timestamps(&text, before_ms), saved);
}

/// A Java-written offset table: bare queue-id keys, keys out of order.
const JAVA_OFFSETS_JSON: &str = "{\n\
\t\"offsetTable\":{\n\
\t\t\"T2@G\":{1:7,0:-1},\n\
\t\t\"T1@G\":{0:12, 12 :5}\n\
\t},\n\
\t\"dataVersion\":{\"counter\":9,\"stateVersion\":2,\"timestamp\":1700000000000}\n\
}";

#[test]
fn consumer_offset_json_is_pinned_byte_for_byte() {
    let dir = temp_dir("offsets-json").join("config");
    let path = write_file(&dir, "consumerOffset.json", JAVA_OFFSETS_JSON);
    let m = ConsumerOffsetManager::load(&dir).expect("a Java consumerOffset.json loads");
    assert_eq!(m.query_offset("G", "T1", 12), Some(5));
    // The body of GET_ALL_CONSUMER_OFFSET is the file's.
    assert_loaded_then_saved(
        || m.encode(),
        || m.persist(),
        &path,
        "{\"dataVersion\":{\"counter\":9,\"stateVersion\":2,\"timestamp\":1700000000000},\
         \"offsetTable\":{\"T1@G\":{0:12,12:5},\"T2@G\":{0:-1,1:7}}}",
        "{\"dataVersion\":{\"counter\":10,\"stateVersion\":2,\"timestamp\":T},\
         \"offsetTable\":{\"T1@G\":{0:12,12:5},\"T2@G\":{0:-1,1:7}}}",
    );
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn consumer_offset_json_without_a_version_starts_a_fresh_one() {
    let dir = temp_dir("offsets-json-fresh").join("config");
    write_file(
        &dir,
        "consumerOffset.json",
        "{\"offsetTable\":{\"T@G\":{3:4}}}",
    );
    let before_ms = ringmq_broker::persist::now_ms();
    let m = ConsumerOffsetManager::load(&dir).unwrap();
    assert_eq!(
        mask_timestamps(&m.encode(), before_ms),
        "{\"dataVersion\":{\"counter\":0,\"stateVersion\":0,\"timestamp\":T},\
         \"offsetTable\":{\"T@G\":{3:4}}}"
    );
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn delay_offset_json_is_pinned_byte_for_byte() {
    let dir = temp_dir("delay-json").join("config");
    let path = write_file(
        &dir,
        "delayOffset.json",
        "{\n\t\"offsetTable\":{3:12,1:5},\n\t\"dataVersion\":{\"counter\":2,\"timestamp\":1700000000000}\n}",
    );
    let m = DelayOffsetManager::load(&dir).expect("a Java delayOffset.json loads");
    // The body of GET_ALL_DELAY_OFFSET is the file's.
    assert_loaded_then_saved(
        || m.encode(),
        || m.persist(),
        &path,
        "{\"dataVersion\":{\"counter\":2,\"stateVersion\":0,\"timestamp\":1700000000000},\
         \"offsetTable\":{1:5,3:12}}",
        "{\"dataVersion\":{\"counter\":3,\"stateVersion\":0,\"timestamp\":T},\
         \"offsetTable\":{1:5,3:12}}",
    );
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

/// The start of the file `saved_subscription_group_json_is_pinned_byte_for_byte` expects:
/// two-space indentation, `"key": value`, keys sorted, the version and forbidden table as read.
const SAVED_GROUPS_HEAD: &str = r#"{
  "dataVersion": {
    "counter": 4,
    "stateVersion": 1,
    "timestamp": 1700000000000
  },
  "forbiddenTable": {
    "G_ORDER": {
      "T1": 2
    }
  },
  "subscriptionGroupTable": {
"#;

/// `G_MIN` as saved: its key as name, upstream defaults, the null policy left out.
const SAVED_G_MIN: &str = r#"    "G_MIN": {
      "attributes": {},
      "brokerId": 0,
      "consumeBroadcastEnable": true,
      "consumeEnable": true,
      "consumeFromMinEnable": true,
      "consumeMessageOrderly": false,
      "consumeTimeoutMinute": 15,
      "groupName": "G_MIN",
      "groupSysFlag": 0,
      "notifyConsumerIdsChangedEnable": true,
      "retryMaxTimes": -1,
      "retryQueueNums": 1,
      "whichBrokerWhenConsumeSlowly": 1
    }"#;

/// `G_ORDER` as saved: keys sorted inside the policy and the subscription set too, the
/// policy's `6.0E4` written as `60000.0`, the control character escaped in lower case.
const SAVED_G_ORDER: &str = r#"    "G_ORDER": {
      "attributes": {
        "+x": "1",
        "note": "a \"q\" é\u001f"
      },
      "brokerId": 0,
      "consumeBroadcastEnable": false,
      "consumeEnable": true,
      "consumeFromMinEnable": false,
      "consumeMessageOrderly": true,
      "consumeTimeoutMinute": 20,
      "groupName": "G_ORDER",
      "groupRetryPolicy": {
        "exponentialRetryPolicy": {
          "initial": 1000,
          "max": 60000.0,
          "multiplier": 2
        },
        "type": "EXPONENTIAL"
      },
      "groupSysFlag": 0,
      "notifyConsumerIdsChangedEnable": false,
      "retryMaxTimes": 3,
      "retryQueueNums": 2,
      "subscriptionDataSet": [
        {
          "expression": "a||b",
          "expressionType": "TAG",
          "topic": "T1"
        }
      ],
      "whichBrokerWhenConsumeSlowly": 1
    }"#;

/// A system group as saved: every field at its upstream default.
fn saved_system_group(name: &str) -> String {
    format!(
        r#"    "{name}": {{
      "attributes": {{}},
      "brokerId": 0,
      "consumeBroadcastEnable": true,
      "consumeEnable": true,
      "consumeFromMinEnable": true,
      "consumeMessageOrderly": false,
      "consumeTimeoutMinute": 15,
      "groupName": "{name}",
      "groupRetryPolicy": {{
        "type": "CUSTOMIZED"
      }},
      "groupSysFlag": 0,
      "notifyConsumerIdsChangedEnable": true,
      "retryMaxTimes": 16,
      "retryQueueNums": 1,
      "whichBrokerWhenConsumeSlowly": 1
    }}"#
    )
}

/// The whole `subscriptionGroup.json` for `JAVA_GROUPS_JSON`: the system groups and the
/// file's two, sorted by name.
fn saved_groups_json() -> String {
    let mut groups: Vec<(String, String)> = SYSTEM_GROUPS
        .iter()
        .map(|g| (g.to_string(), saved_system_group(g)))
        .collect();
    groups.push(("G_MIN".into(), SAVED_G_MIN.into()));
    groups.push(("G_ORDER".into(), SAVED_G_ORDER.into()));
    groups.sort();
    let entries: Vec<String> = groups.into_iter().map(|(_, text)| text).collect();
    format!("{SAVED_GROUPS_HEAD}{}\n  }}\n}}", entries.join(",\n"))
}

/// `pretty` (two-space layout, no line breaks inside strings) in the compact form.
fn compact(pretty: &str) -> String {
    pretty
        .lines()
        .map(str::trim_start)
        .collect::<String>()
        .replace("\": ", "\":")
}

/// GET_SUBSCRIPTIONGROUP_CONFIG's body for `G_NEW` as UPDATE_AND_CREATE_SUBSCRIPTIONGROUP sent it.
const G_NEW_BODY: &str = concat!(
    r#"{"attributes":{},"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":true,"consumeFromMinEnable":true,"consumeMessageOrderly":false,"consumeTimeoutMinute":15,"groupName":"G_NEW""#,
    r#","groupRetryPolicy":{"customizedRetryPolicy":{"next":[1000,2000]},"type":"CUSTOMIZED"},"groupSysFlag":0,"notifyConsumerIdsChangedEnable":true,"retryMaxTimes":16,"retryQueueNums":3,"whichBrokerWhenConsumeSlowly":1}"#,
);
