//! Store keys a config update changes while the store runs (`MessageStore::set_live_setting`):
//! the next put, pull, flush or retention pass uses the new value.

use super::*;

fn open(dir_name: &str, tweak: impl FnOnce(&mut StoreConfig)) -> MessageStore {
    let mut cfg = config(
        &temp_dir(dir_name),
        FlushDiskType::AsyncFlush,
        WriteMode::Mmap,
    );
    tweak(&mut cfg);
    MessageStore::open(cfg).unwrap()
}

#[test]
fn max_message_size_applies_to_the_next_put_both_ways() {
    let store = open("live-maxsize", |c| c.max_message_size = 100);
    assert_eq!(
        put(&store, "L", 0, "big", 200).status,
        PutMessageStatus::MessageIllegal,
        "start-up limit"
    );
    assert_eq!(store.set_live_setting("maxMessageSize", "1000"), Ok(true));
    assert_eq!(
        put(&store, "L", 0, "big", 200).status,
        PutMessageStatus::PutOk
    );
    assert_eq!(store.set_live_setting("maxMessageSize", "50"), Ok(true));
    assert_eq!(
        put(&store, "L", 0, "mid", 80).status,
        PutMessageStatus::MessageIllegal
    );
}

#[test]
fn transfer_limits_and_memory_ratio_bound_the_next_get() {
    let store = open("live-transfer", |_| {});
    for i in 0..10 {
        assert_eq!(
            put(&store, "L", 0, &format!("k{i}"), 100).status,
            PutMessageStatus::PutOk
        );
    }
    wait_until("dispatch", || store.max_offset_in_queue("L", 0) == 10);
    let got = |store: &MessageStore| {
        store
            .get_message("L", 0, 0, 32, 1 << 20, &AcceptAll)
            .messages
            .len()
    };
    assert_eq!(got(&store), 10);
    assert_eq!(
        store.set_live_setting("maxTransferCountOnMessageInMemory", "3"),
        Ok(true)
    );
    assert_eq!(got(&store), 3, "in-memory count limit");
    assert_eq!(
        store.set_live_setting("maxTransferBytesOnMessageInMemory", "1"),
        Ok(true)
    );
    assert_eq!(got(&store), 1, "in-memory byte limit (at least one record)");
    // With no memory share every record counts as read from disk.
    assert_eq!(
        store.set_live_setting("accessMessageInMemoryMaxRatio", "0"),
        Ok(true)
    );
    assert_eq!(got(&store), 8, "disk limit (default 8 records)");
    assert_eq!(
        store.set_live_setting("maxTransferCountOnMessageInDisk", "2"),
        Ok(true)
    );
    assert_eq!(got(&store), 2, "disk count limit");
    assert_eq!(
        store.set_live_setting("maxTransferBytesOnMessageInDisk", "1"),
        Ok(true)
    );
    assert_eq!(got(&store), 1, "disk byte limit");
}

#[test]
fn flush_retention_and_busy_settings_read_back_changed() {
    let store = open("live-getters", |_| {});
    for (key, value) in [
        ("syncFlushTimeout", "1234"),
        ("flushIntervalCommitLog", "777"),
        ("flushCommitLogLeastPages", "9"),
        ("flushCommitLogThoroughInterval", "4321"),
        ("flushIntervalConsumeQueue", "250"),
        ("flushConsumeQueueLeastPages", "3"),
        ("flushConsumeQueueThoroughInterval", "5000"),
        ("osPageCacheBusyTimeOutMills", "2500"),
        ("fileReservedTime", "5"),
        ("deleteWhen", "01;13"),
        ("diskMaxUsedSpaceRatio", "60"),
        ("diskSpaceWarningLevelRatio", "80"),
        ("diskSpaceCleanForciblyRatio", "70"),
    ] {
        assert_eq!(store.set_live_setting(key, value), Ok(true), "{key}");
    }
    let live = store.live_settings();
    assert_eq!(live.sync_flush_timeout_ms(), 1234);
    assert_eq!(live.flush_interval_commit_log_ms(), 777);
    assert_eq!(live.flush_commit_log_least_pages(), 9);
    assert_eq!(live.flush_commit_log_thorough_interval_ms(), 4321);
    assert_eq!(live.flush_interval_consume_queue_ms(), 250);
    assert_eq!(live.flush_consume_queue_least_pages(), 3);
    assert_eq!(live.flush_consume_queue_thorough_interval_ms(), 5000);
    assert_eq!(live.os_page_cache_busy_timeout_ms(), 2500);
    assert_eq!(live.file_reserved_time_hours(), 5);
    assert!(live.is_delete_hour(13) && live.is_delete_hour(1) && !live.is_delete_hour(4));
    assert_eq!(live.effective_max_used_ratio(), 60);
    assert_eq!(live.effective_warning_ratio(), 80);
    assert_eq!(live.effective_clean_forcibly_ratio(), 70);
    // Puts still go through under the changed settings.
    assert_eq!(put(&store, "L", 0, "k", 10).status, PutMessageStatus::PutOk);
}

#[test]
fn fixed_keys_and_bad_values_change_nothing() {
    let store = open("live-refused", |c| c.max_message_size = 100);
    assert_eq!(
        store.set_live_setting("mappedFileSizeCommitLog", "4096"),
        Ok(false)
    );
    assert_eq!(
        store.set_live_setting("cleanResourceInterval", "1"),
        Ok(false)
    );
    assert!(store.set_live_setting("maxMessageSize", "big").is_err());
    assert_eq!(store.live_settings().max_message_size_bytes(), 100);
}

#[test]
fn consume_queue_flush_waits_for_dirty_pages_and_the_checkpoint_for_a_thorough_pass() {
    let dir = temp_dir("live-cq-flush");
    let mut cfg = config(&dir, FlushDiskType::AsyncFlush, WriteMode::Mmap);
    cfg.flush_interval_consume_queue_ms = 10;
    cfg.flush_consume_queue_thorough_interval_ms = 3_600_000;
    let checkpoint_path = cfg.checkpoint_path();
    let store = MessageStore::open(cfg).unwrap();
    let logics_ts = || {
        ringmq_store::checkpoint::Checkpoint::open(&checkpoint_path)
            .unwrap()
            .1
            .logics_msg_timestamp
    };
    let before = logics_ts();
    assert_eq!(put(&store, "F", 0, "k", 10).status, PutMessageStatus::PutOk);
    wait_until("dispatch", || store.max_offset_in_queue("F", 0) == 1);
    // Twenty ticks: one unit dirties less than flushConsumeQueueLeastPages (2), so no
    // tick may claim it in the checkpoint.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        logics_ts(),
        before,
        "checkpoint advanced without a thorough pass"
    );
    assert_eq!(
        store.set_live_setting("flushConsumeQueueThoroughInterval", "0"),
        Ok(true)
    );
    wait_until("a thorough pass", || logics_ts() > before);
}
