//! Plain ACL through ringmq's own tools and client: `mqadmin` signs with `--access-key` or
//! with `$ROCKETMQ_HOME/conf/tools.yml` as upstream's tools do, creates, lists, versions
//! and deletes accounts; the producer signs with `ClientConfig::credentials`; `ringmq
//! bench` signs with its flags. Without a signature the same commands are refused.

use std::path::Path;
use std::process::{Command, Output};

use ringmq_acl::Credentials;
use ringmq_client::{block_on, ClientConfig, Message, Producer, SendStatus};
use ringmq_tests::{ringmq_bin, unique, Cluster, TempDir};

const ADMIN: (&str, &str) = ("admin0001", "secret-admin");
const USER: (&str, &str) = ("user00001", "secret-user");

fn mqadmin(args: &[&str], rocketmq_home: Option<&Path>) -> Output {
    let mut cmd = Command::new(ringmq_bin());
    cmd.arg("admin").args(args).env_remove("ROCKETMQ_HOME");
    if let Some(home) = rocketmq_home {
        cmd.env("ROCKETMQ_HOME", home);
    }
    cmd.output().expect("run ringmq admin")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn send_as(c: &Cluster, topic: &str, who: (&str, &str)) -> Result<SendStatus, String> {
    let mut config = c.producer_config(&unique("PG-acl"));
    config.client = ClientConfig {
        credentials: Some(Credentials::new(who.0, who.1)),
        ..config.client
    };
    let topic = topic.to_string();
    block_on(async move {
        let p = Producer::new(config);
        let r = p.send(&Message::new(&topic, b"acl".to_vec())).await;
        r.map(|r| r.status).map_err(|e| e.to_string())
    })
}

#[test]
fn mqadmin_and_the_client_sign_and_the_acl_commands_manage_accounts() {
    let home = TempDir::new("acl-home");
    std::fs::create_dir_all(home.path().join("conf")).unwrap();
    let acl = format!(
        "accounts:\n  - accessKey: {}\n    secretKey: {}\n    admin: true\n",
        ADMIN.0, ADMIN.1
    );
    std::fs::write(home.path().join("conf/plain_acl.yml"), acl).unwrap();
    let c = Cluster::start(&format!(
        "aclEnable=true\nrocketmqHome={}\nautoCreateTopicEnable=true",
        home.path().display()
    ));
    let broker = c.broker_addr();
    let topic = unique("TopicAcl");
    let grant = format!("{topic}=PUB");

    let unsigned = mqadmin(
        &[
            "updateAclConfig",
            "-b",
            &broker,
            "-a",
            USER.0,
            "-s",
            USER.1,
            "-t",
            &grant,
        ],
        None,
    );
    assert!(!unsigned.status.success(), "{}", text(&unsigned));
    assert!(
        text(&unsigned).contains("No accessKey is configured"),
        "{}",
        text(&unsigned)
    );

    let created = mqadmin(
        &[
            "updateAclConfig",
            "-b",
            &broker,
            "-a",
            USER.0,
            "-s",
            USER.1,
            "-t",
            &grant,
            "-i",
            "DENY",
            "--access-key",
            ADMIN.0,
            "--secret-key",
            ADMIN.1,
        ],
        None,
    );
    assert!(created.status.success(), "{}", text(&created));
    assert!(
        text(&created).contains(&format!(
            "create or update plain access config to {broker} success."
        )),
        "{}",
        text(&created)
    );
    assert_eq!(send_as(&c, &topic, USER), Ok(SendStatus::SendOk));
    let other = send_as(&c, &unique("TopicOther"), USER).unwrap_err();
    assert!(other.contains("No default permission for topic"), "{other}");

    // Upstream tools' account file: ROCKETMQ_HOME/conf/tools.yml.
    let tools = format!("accessKey: {}\nsecretKey: {}\n", ADMIN.0, ADMIN.1);
    std::fs::write(home.path().join("conf/tools.yml"), tools).unwrap();
    let versions = mqadmin(
        &["clusterAclConfigVersion", "-b", &broker],
        Some(home.path()),
    );
    assert!(versions.status.success(), "{}", text(&versions));
    let out = text(&versions);
    assert!(
        out.contains("plain_acl.yml") && out.contains(&c.cluster_name),
        "{out}"
    );
    assert!(
        out.contains("get broker's plain access config version success."),
        "{out}"
    );

    let listing = mqadmin(&["getAclConfig", "-b", &broker], Some(home.path()));
    assert!(listing.status.success(), "{}", text(&listing));
    assert!(
        text(&listing).contains(&format!("  accessKey         : {}", USER.0)),
        "{}",
        text(&listing)
    );

    let deleted = mqadmin(
        &["deleteAclConfig", "-b", &broker, "-a", USER.0],
        Some(home.path()),
    );
    assert!(deleted.status.success(), "{}", text(&deleted));
    let refused = send_as(&c, &topic, USER).unwrap_err();
    assert!(refused.contains("No acl config for user00001"), "{refused}");

    // The admin may send anywhere; bench signs with its flags.
    let bench = Command::new(ringmq_bin())
        .args([
            "bench",
            "producer",
            "-n",
            &c.namesrv_addr(),
            "-t",
            &topic,
            "-m",
            "50",
            "-w",
            "4",
            "--quiet",
            "--json",
            "--no-broker-profile",
            "--access-key",
            ADMIN.0,
            "--secret-key",
            ADMIN.1,
        ])
        .output()
        .expect("run ringmq bench");
    assert!(bench.status.success(), "{}", text(&bench));
    let summary = text(&bench);
    assert!(summary.contains("\"failures\":0,"), "{summary}");
    assert!(summary.contains("\"messages\":50,"), "{summary}");
}
