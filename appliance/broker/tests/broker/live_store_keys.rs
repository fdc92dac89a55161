//! UPDATE_BROKER_CONFIG applies the store keys upstream reads on every use (flush intervals,
//! retention, transfer limits, `osPageCacheBusyTimeOutMills`, `syncFlushTimeout`,
//! `maxMessageSize`) to the running store at once, answers "in effect now" for them, and the
//! store opened at the next start reads the saved values.

use std::path::Path;
use std::sync::Arc;

use ringmq_broker::{Broker, BrokerConfig};
use ringmq_remoting::RemotingCommand;
use ringmq_store::{MessageStore, StoreApi};

use super::{pull, pull_found, records, send, temp_dir, wait_max_offset, Client};

const MESSAGE_ILLEGAL: i32 = 13;
const TOPIC: &str = "TopicLiveStore";

fn config_from_file(path: &Path) -> BrokerConfig {
    let text = std::fs::read_to_string(path).expect("broker.conf readable");
    let (mut c, notes) = BrokerConfig::from_properties_text(&text);
    assert!(notes.is_empty(), "{notes:?}");
    c.broker_config_path = Some(path.display().to_string());
    c
}

/// A broker on the store its config file describes; the store handle is kept to read the
/// values it runs with.
fn start(conf_path: &Path) -> (Broker, Arc<MessageStore>) {
    let cfg = config_from_file(conf_path);
    // The ratios set below sit under many hosts' real disk usage; a fixed usage keeps
    // retention from refusing writes or deleting files in the middle of the test.
    let mut sc = ringmq_broker::disk_store::store_config(&cfg).expect("store config");
    sc.retention_probe =
        ringmq_store::config::RetentionProbe::default().with_disk_usage(|_| Some(10));
    let store = Arc::new(MessageStore::open(sc).expect("store opens"));
    let api: Arc<dyn StoreApi> = store.clone();
    let broker = Broker::start_with_store(cfg, Some(api)).expect("broker starts");
    (broker, store)
}

fn update(c: &mut Client, body: &str) -> RemotingCommand {
    c.call(RemotingCommand::request(25, 0).with_body(body.as_bytes().to_vec()))
}

/// How many records one pull of up to 32 from offset 0 returns.
fn pulled(c: &mut Client) -> usize {
    let resp = pull_found(c, pull(TOPIC, 0, 0, 0x4, 0));
    records(&resp.body).len()
}

/// The store settings the update below sets, as the store's getters report them.
fn assert_store_has_updated_values(store: &MessageStore, when: &str) {
    let live = store.live_settings();
    assert_eq!(live.flush_interval_commit_log_ms(), 777, "{when}");
    assert_eq!(live.flush_commit_log_least_pages(), 9, "{when}");
    assert_eq!(live.flush_commit_log_thorough_interval_ms(), 4321, "{when}");
    assert_eq!(live.flush_interval_consume_queue_ms(), 250, "{when}");
    assert_eq!(live.sync_flush_timeout_ms(), 1234, "{when}");
    assert_eq!(live.os_page_cache_busy_timeout_ms(), 2500, "{when}");
    assert_eq!(live.file_reserved_time_hours(), 5, "{when}");
    assert!(live.is_delete_hour(13) && !live.is_delete_hour(4), "{when}");
    assert_eq!(live.effective_max_used_ratio(), 60, "{when}");
    assert_eq!(live.effective_warning_ratio(), 80, "{when}");
    assert_eq!(live.effective_clean_forcibly_ratio(), 70, "{when}");
    assert_eq!(live.max_transfer_in_memory().1, 3, "{when}");
    assert_eq!(live.max_message_size_bytes(), 4 * 1024 * 1024, "{when}");
}

const UPDATE: &str = "maxMessageSize=4194304\nflushIntervalCommitLog=777\n\
    flushCommitLogLeastPages=9\nflushCommitLogThoroughInterval=4321\nflushIntervalConsumeQueue=250\nsyncFlushTimeout=1234\n\
    osPageCacheBusyTimeOutMills=2500\nfileReservedTime=5\ndeleteWhen=01;13\n\
    diskMaxUsedSpaceRatio=60\ndiskSpaceWarningLevelRatio=80\ndiskSpaceCleanForciblyRatio=70\n\
    maxTransferCountOnMessageInMemory=3\n";

#[test]
fn store_keys_apply_to_the_running_store_and_survive_restart() {
    let dir = temp_dir("live-store-keys");
    std::fs::create_dir_all(&dir).unwrap();
    let conf_path = dir.join("broker.conf");
    std::fs::write(
        &conf_path,
        format!(
            "brokerName=broker-live-store\nlistenPort=0\nbindAddress=127.0.0.1\nbrokerIP1=127.0.0.1\n\
             storePathRootDir={}\nmappedFileSizeCommitLog=8388608\nmappedFileSizeConsumeQueue=60000\n\
             maxMessageSize=1048576\n",
            dir.join("store").display()
        ),
    )
    .unwrap();
    let (broker, store) = start(&conf_path);
    let mut c = Client::connect(broker.local_addr());
    for i in 0..10 {
        let r = c.call(send(TOPIC, 0, "", format!("m{i}").as_bytes()));
        assert_eq!(r.code, 0, "{:?}", r.remark);
    }
    wait_max_offset(&mut c, TOPIC, 0, 10);
    let big = vec![b'x'; 2 * 1024 * 1024];
    assert_eq!(c.call(send(TOPIC, 0, "", &big)).code, MESSAGE_ILLEGAL);
    assert_eq!(pulled(&mut c), 10, "default in-memory count limit is 32");

    let r = update(&mut c, UPDATE);
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let remark = r.remark.unwrap_or_default();
    assert!(
        remark.starts_with("in effect now: maxMessageSize=4194304, flushIntervalCommitLog=777")
            && !remark.contains("after restart"),
        "{remark}"
    );
    assert_store_has_updated_values(&store, "after the update");
    assert_eq!(pulled(&mut c), 3, "maxTransferCountOnMessageInMemory");
    // Above the limit the store opened with: the store itself now takes it.
    assert_eq!(c.call(send(TOPIC, 0, "", &big)).code, 0);
    wait_max_offset(&mut c, TOPIC, 0, 11);
    // No share of memory: every record counts as read from disk and its limit applies.
    let r = update(
        &mut c,
        "accessMessageInMemoryMaxRatio=0\nmaxTransferCountOnMessageInDisk=2",
    );
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(pulled(&mut c), 2, "maxTransferCountOnMessageInDisk");
    let r = update(&mut c, "maxTransferBytesOnMessageInDisk=1");
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(pulled(&mut c), 1, "maxTransferBytesOnMessageInDisk");
    let r = update(&mut c, "accessMessageInMemoryMaxRatio=40");
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(pulled(&mut c), 3, "back in memory: its count limit again");
    let r = update(&mut c, "maxTransferBytesOnMessageInMemory=1");
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(pulled(&mut c), 1, "maxTransferBytesOnMessageInMemory");
    drop(c);
    broker.shutdown();
    drop(store);

    let (broker, store) = start(&conf_path);
    let mut c = Client::connect(broker.local_addr());
    assert_store_has_updated_values(&store, "after restart");
    assert_eq!(
        store.live_settings().access_message_in_memory_max_ratio(),
        40
    );
    assert_eq!(pulled(&mut c), 1, "byte limits still in force");
    assert_eq!(c.call(send(TOPIC, 0, "", &big)).code, 0);
    drop(c);
    broker.shutdown();
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
