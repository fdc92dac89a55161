//! Plain ACL end to end (`aclEnable=true`): every request code is refused without a
//! signature; each resource-bearing code is checked four ways (no signature, a wrong
//! signature, a right one without permission, a right one with permission); the ACL admin
//! requests change the file and the rules at once; an edit on disk is picked up; a broken
//! file stops the broker from starting.

use std::path::Path;
use std::time::{Duration, Instant};

use ringmq_acl::{sign, Credentials};
use ringmq_broker::{Broker, BrokerConfig};
use ringmq_remoting::codes::RequestCode;
use ringmq_remoting::RemotingCommand;

use super::{config_with_lines, pull, send, temp_dir, Client};

const NO_PERMISSION: i32 = 16;

const ACL_FILE: &str = "\
globalWhiteRemoteAddresses:
accounts:
  - accessKey: producer01
    secretKey: secret-producer
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - TopicAllowed=PUB|SUB
      - TopicSubOnly=SUB
    groupPerms:
      - GroupAllowed=SUB
  - accessKey: admin0001
    secretKey: secret-admin
    admin: true
";

fn user() -> Credentials {
    creds("producer01", "secret-producer")
}

fn admin() -> Credentials {
    creds("admin0001", "secret-admin")
}

fn creds(ak: &str, sk: &str) -> Credentials {
    Credentials::new(ak, sk)
}

fn signed(mut request: RemotingCommand, c: &Credentials) -> RemotingCommand {
    sign(&mut request, c);
    request
}

fn acl_broker(name: &str, file: &str) -> (Broker, std::path::PathBuf) {
    let dir = temp_dir(name);
    std::fs::create_dir_all(dir.join("conf")).unwrap();
    std::fs::write(dir.join("conf/plain_acl.yml"), file).unwrap();
    let config = acl_config(&dir);
    (Broker::start(config).expect("broker starts with ACL"), dir)
}

fn acl_config(dir: &Path) -> BrokerConfig {
    config_with_lines(
        dir,
        &format!("aclEnable=true\nrocketmqHome={}\n", dir.display()),
    )
}

fn request(code: i32, fields: &[(&str, &str)], body: &[u8]) -> RemotingCommand {
    let mut r = RemotingCommand::request(code, 0);
    for (k, v) in fields {
        r.ext_fields.insert(*k, *v);
    }
    r.with_body(body.to_vec())
}

fn pull_from(topic: &str, group: &str) -> RemotingCommand {
    let mut r = pull(topic, 0, 0, 0, 0);
    r.ext_fields.insert("consumerGroup", group);
    r
}

fn heartbeat(group: &str, topic: &str) -> RemotingCommand {
    let body = format!(
        r#"{{"clientID":"acl-it","producerDataSet":[],"consumerDataSet":[{{"groupName":"{group}",
        "consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",
        "subscriptionDataSet":[{{"topic":"{topic}","subString":"*","tagsSet":[],"codeSet":[],"subVersion":0}}],"unitMode":false}}]}}"#
    );
    request(34, &[], body.as_bytes())
}

/// Requests that touch a topic or group, each in a form the user may send and a form it
/// may not, with the reason the second is refused.
fn permission_table() -> Vec<(&'static str, RemotingCommand, RemotingCommand, &'static str)> {
    let offset = |topic: &str, group: &str| {
        request(
            15,
            &[
                ("consumerGroup", group),
                ("topic", topic),
                ("queueId", "0"),
                ("commitOffset", "0"),
            ],
            b"",
        )
    };
    vec![
        (
            "send",
            send("TopicAllowed", 0, "", b"x"),
            send("TopicSubOnly", 0, "", b"x"),
            "No permission for topic:TopicSubOnly",
        ),
        (
            "send to an unlisted topic",
            send("TopicAllowed", 0, "", b"x"),
            send("TopicOther", 0, "", b"x"),
            "No default permission for topic:TopicOther",
        ),
        (
            "pull",
            pull_from("TopicSubOnly", "GroupAllowed"),
            pull_from("TopicSubOnly", "GroupOther"),
            "No default permission for group:GroupOther",
        ),
        (
            "heartbeat",
            heartbeat("GroupAllowed", "TopicAllowed"),
            heartbeat("GroupAllowed", "TopicOther"),
            "No default permission for topic:TopicOther",
        ),
        (
            "update offset",
            offset("TopicAllowed", "GroupAllowed"),
            offset("TopicOther", "GroupAllowed"),
            "No default permission for topic:TopicOther",
        ),
        (
            "send back",
            request(
                36,
                &[
                    ("group", "GroupAllowed"),
                    ("offset", "0"),
                    ("delayLevel", "0"),
                    ("originMsgId", "x"),
                    ("originTopic", "TopicAllowed"),
                ],
                b"",
            ),
            request(
                36,
                &[
                    ("group", "GroupOther"),
                    ("offset", "0"),
                    ("delayLevel", "0"),
                ],
                b"",
            ),
            "No default permission for group:GroupOther",
        ),
        (
            "consumer list",
            request(38, &[("consumerGroup", "GroupAllowed")], b""),
            request(38, &[("consumerGroup", "GroupOther")], b""),
            "No default permission for group:GroupOther",
        ),
        (
            "query message",
            request(
                12,
                &[
                    ("topic", "TopicAllowed"),
                    ("key", "k"),
                    ("maxNum", "1"),
                    ("beginTimestamp", "0"),
                    ("endTimestamp", "1"),
                ],
                b"",
            ),
            request(
                12,
                &[
                    ("topic", "TopicOther"),
                    ("key", "k"),
                    ("maxNum", "1"),
                    ("beginTimestamp", "0"),
                    ("endTimestamp", "1"),
                ],
                b"",
            ),
            "No default permission for topic:TopicOther",
        ),
        (
            "admin code",
            request(26, &[], b""),
            request(
                17,
                &[
                    ("topic", "T"),
                    ("readQueueNums", "1"),
                    ("writeQueueNums", "1"),
                    ("perm", "6"),
                ],
                b"",
            ),
            "Need admin permission for request code=17, but accessKey=producer01 is not",
        ),
    ]
}

fn assert_refused(r: &RemotingCommand, why: &str, what: &str) {
    assert_eq!(r.code, NO_PERMISSION, "{what}: {:?}", r.remark);
    let remark = r.remark.as_deref().unwrap_or_default();
    assert!(
        remark.contains(why),
        "{what}: remark {remark:?} lacks {why:?}"
    );
}

#[test]
fn every_code_is_refused_unsigned_and_each_resource_is_checked_four_ways() {
    let (broker, dir) = acl_broker("acl-table", ACL_FILE);
    let mut c = Client::connect(broker.local_addr());

    let codes = (0..=5_000)
        .chain(200_000..=200_200)
        .filter(|&code| RequestCode::from_code(code).is_some());
    let mut checked = 0;
    for code in codes {
        let r = c.call(RemotingCommand::request(code, 0));
        assert_refused(
            &r,
            "No accessKey is configured",
            &format!("unsigned code {code}"),
        );
        checked += 1;
    }
    assert!(checked > 140, "only {checked} request codes known");

    for (what, allowed, denied, why) in permission_table() {
        let forged = signed(allowed.clone(), &creds("producer01", "not-the-secret"));
        assert_refused(
            &c.call(forged),
            "Check signature failed for accessKey=producer01",
            what,
        );
        let mut tampered = signed(allowed.clone(), &user());
        tampered.ext_fields.insert("zzz", "added after signing");
        assert_refused(&c.call(tampered), "Check signature failed", what);
        assert_refused(&c.call(signed(denied.clone(), &user())), why, what);
        let r = c.call(signed(allowed.clone(), &user()));
        assert_ne!(
            r.code, NO_PERMISSION,
            "{what} with permission: {:?}",
            r.remark
        );
        let r = c.call(signed(denied, &admin()));
        assert_ne!(r.code, NO_PERMISSION, "{what} as admin: {:?}", r.remark);
    }
    let stranger = signed(
        send("TopicAllowed", 0, "", b"x"),
        &creds("nobody-here", "secret-x"),
    );
    assert_refused(
        &c.call(stranger),
        "No acl config for nobody-here",
        "unknown key",
    );
    let ok = c.call(signed(send("TopicAllowed", 0, "", b"body"), &user()));
    assert_eq!(ok.code, 0, "an allowed send is stored: {:?}", ok.remark);
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn admin_requests_change_the_rules_at_once_and_edits_on_disk_are_picked_up() {
    let (broker, dir) = acl_broker("acl-admin", ACL_FILE);
    let mut c = Client::connect(broker.local_addr());
    let new_account = [
        ("accessKey", "consumer77"),
        ("secretKey", "secret-consumer"),
        ("defaultTopicPerm", "PUB"),
        ("topicPerms", "TopicAllowed=DENY,TopicX=PUB"),
    ];
    let r = c.call(signed(request(50, &new_account, b""), &user()));
    assert_refused(
        &r,
        "Need admin permission for request code=50",
        "a user creating an account",
    );
    let r = c.call(signed(request(50, &new_account, b""), &admin()));
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let fresh = creds("consumer77", "secret-consumer");
    assert_eq!(c.call(signed(send("TopicX", 0, "", b"x"), &fresh)).code, 0);
    assert_refused(
        &c.call(signed(send("TopicAllowed", 0, "", b"x"), &fresh)),
        "No permission for topic:TopicAllowed",
        "new rules",
    );
    let text = std::fs::read_to_string(dir.join("conf/plain_acl.yml")).unwrap();
    assert!(
        text.contains("consumer77") && text.contains("dataVersion"),
        "{text}"
    );

    let bad = [
        ("accessKey", "consumer78"),
        ("secretKey", "secret-c"),
        ("topicPerms", "T=EVERYTHING"),
    ];
    let r = c.call(signed(request(50, &bad, b""), &admin()));
    assert_eq!(r.code, 209, "{:?}", r.remark);

    let info = c.call(signed(request(52, &[], b""), &user()));
    assert_eq!(info.code, 0, "{:?}", info.remark);
    let version = info
        .ext_fields
        .get("version")
        .unwrap_or_default()
        .to_string();
    assert!(version.contains("\"counter\":1"), "{version}");
    assert!(info
        .ext_fields
        .get("allAclFileVersion")
        .unwrap_or_default()
        .contains("plain_acl.yml"));

    let listing = c.call(signed(request(54, &[], b""), &admin()));
    assert_eq!(listing.code, 0);
    let body = String::from_utf8(listing.body.to_vec()).unwrap();
    assert!(body.contains("\"accessKey\":\"consumer77\""), "{body}");
    assert_refused(
        &c.call(signed(request(54, &[], b""), &user())),
        "Need admin permission",
        "54 as a user",
    );

    let r = c.call(signed(
        request(51, &[("accessKey", "consumer77")], b""),
        &admin(),
    ));
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_refused(
        &c.call(signed(send("TopicX", 0, "", b"x"), &fresh)),
        "No acl config for consumer77",
        "deleted",
    );
    let r = c.call(signed(
        request(51, &[("accessKey", "consumer77")], b""),
        &admin(),
    ));
    assert_eq!(r.code, 210, "{:?}", r.remark);

    let r = c.call(signed(
        request(53, &[("globalWhiteAddrs", "127.0.0.1")], b""),
        &admin(),
    ));
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_ne!(
        c.call(RemotingCommand::request(26, 0)).code,
        NO_PERMISSION,
        "white-listed peer"
    );
    let r = c.call(request(53, &[("globalWhiteAddrs", "300.1.1.1")], b""));
    assert_eq!(r.code, 211, "{:?}", r.remark);

    // An operator's edit: the white list goes and a new account arrives.
    let edited = format!("{ACL_FILE}  - accessKey: edited001\n    secretKey: secret-edited\n    defaultTopicPerm: PUB\n");
    std::fs::write(dir.join("conf/plain_acl.yml"), edited).unwrap();
    wait_until("the edited file to take effect", || {
        c.call(RemotingCommand::request(26, 0)).code == NO_PERMISSION
    });
    let by_edit = creds("edited001", "secret-edited");
    assert_eq!(
        c.call(signed(send("TopicAllowed", 0, "", b"x"), &by_edit))
            .code,
        0
    );

    // A broken edit keeps the rules that worked.
    std::fs::write(
        dir.join("conf/plain_acl.yml"),
        "accounts:\n  - accessKey: [broken\n",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!(
        c.call(signed(send("TopicAllowed", 0, "", b"x"), &by_edit))
            .code,
        0
    );
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn acl_requests_without_acl_and_a_broken_file_at_start_are_clear_errors() {
    let dir = temp_dir("acl-off");
    let broker = Broker::start(config_with_lines(&dir, "")).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    let r = c.call(request(51, &[("accessKey", "consumer77")], b""));
    assert_eq!(r.code, 210);
    assert!(r.remark.unwrap_or_default().contains("aclEnable=true"));
    // Unsigned requests pass when ACL is off, and signed ones too (the C++ core always signs).
    assert_eq!(c.call(send("TopicAny", 0, "", b"x")).code, 0);
    assert_eq!(
        c.call(signed(send("TopicAny", 0, "", b"x"), &user())).code,
        0
    );
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);

    let dir = temp_dir("acl-broken");
    std::fs::create_dir_all(dir.join("conf")).unwrap();
    std::fs::write(
        dir.join("conf/plain_acl.yml"),
        "accounts:\n  - accessKey: short\n    secretKey: x\n",
    )
    .unwrap();
    let err = Broker::start(acl_config(&dir))
        .err()
        .expect("a broken ACL file stops the start");
    assert!(err.to_string().contains("aclEnable=true"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
