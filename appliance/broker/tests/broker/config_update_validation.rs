//! UPDATE_BROKER_CONFIG refuses values the broker could not start with (checked by the same
//! function `Broker::start` runs) and keys that cannot change while it runs, answers with the
//! reason, leaves broker.conf untouched, and the broker still starts from that file.

use std::net::TcpListener;
use std::path::Path;

use ringmq_broker::{Broker, BrokerConfig};
use ringmq_remoting::RemotingCommand;

use super::{send, temp_dir, wait_max_offset, Client};

const INVALID_PARAMETER: i32 = 29;
const NO_PERMISSION: i32 = 16;
/// A TEST-NET-2 address: documentation only, assigned to no host.
const FOREIGN_IP: &str = "198.51.100.254";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("an ephemeral port")
        .port()
}

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

#[test]
fn updates_the_broker_could_not_start_with_are_refused_and_not_saved() {
    assert!(
        TcpListener::bind((FOREIGN_IP, 0)).is_err(),
        "{FOREIGN_IP} must not be an address of this host"
    );
    let dir = temp_dir("update-validation");
    std::fs::create_dir_all(&dir).unwrap();
    let conf_path = dir.join("broker.conf");
    let original = format!(
        "brokerName=broker-upd\nlistenPort=0\nbindAddress=127.0.0.1\nbrokerIP1=127.0.0.1\n\
         storePathRootDir={}\nmappedFileSizeCommitLog=4194304\nmappedFileSizeConsumeQueue=60000\n\
         ringmq.metricsPort={}\nmetricsPromExporterHost=127.0.0.1\n",
        dir.join("store").display(),
        free_port()
    );
    std::fs::write(&conf_path, &original).unwrap();
    let broker = Broker::start(config_from_file(&conf_path)).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    assert_eq!(c.call(send("TopicUpd", 0, "", b"kept")).code, 0);
    // The message is dispatched: its ConsumeQueue file exists on disk.
    wait_max_offset(&mut c, "TopicUpd", 0, 1);

    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let refused = [
        (
            "mappedFileSizeCommitLog=0",
            INVALID_PARAMETER,
            "mappedFileSizeCommitLog",
        ),
        (
            "mappedFileSizeCommitLog=1",
            INVALID_PARAMETER,
            "mappedFileSizeCommitLog",
        ),
        (
            "mappedFileSizeCommitLog=4096",
            INVALID_PARAMETER,
            "mappedFileSizeCommitLog",
        ),
        (
            "mappedFileSizeConsumeQueue=1",
            INVALID_PARAMETER,
            "existing file",
        ),
        (
            &format!("bindAddress={FOREIGN_IP}"),
            INVALID_PARAMETER,
            "not an address of this host",
        ),
        (
            &format!("ringmq.metricsPort={taken_port}"),
            INVALID_PARAMETER,
            "ringmq.metricsPort",
        ),
        // A stage core this host does not have: the core map refuses it at start.
        ("ringmq.cores.reput=99", INVALID_PARAMETER, "99"),
        ("deleteWhen=03\nlistenPort=1", NO_PERMISSION, "listenPort"),
        (
            "storePathRootDir=/elsewhere",
            NO_PERMISSION,
            "storePathRootDir",
        ),
    ];
    for (body, code, reason) in refused {
        let r = update(&mut c, body);
        let remark = r.remark.clone().unwrap_or_default();
        assert_eq!(r.code, code, "{body}: {remark}");
        assert!(remark.contains(reason), "{body}: {remark}");
        assert_eq!(
            std::fs::read_to_string(&conf_path).unwrap(),
            original,
            "{body}: broker.conf must not be rewritten"
        );
    }

    // A valid update still succeeds and is saved.
    let r = update(&mut c, "deleteWhen=03\nmappedFileSizeConsumeQueue=60000");
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let saved = std::fs::read_to_string(&conf_path).unwrap();
    assert!(saved.contains("deleteWhen=03\n"), "{saved}");
    drop(c);
    broker.shutdown();

    // The broker starts again from the saved file, with its message.
    let broker = Broker::start(config_from_file(&conf_path)).expect("broker starts again");
    let mut c = Client::connect(broker.local_addr());
    wait_max_offset(&mut c, "TopicUpd", 0, 1);
    drop(c);
    broker.shutdown();
    drop(taken);
    let _ = std::fs::remove_dir_all(&dir);
}
