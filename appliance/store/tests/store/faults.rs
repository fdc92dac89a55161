//! Faults the store must ride out without a restart (issue 14): a ConsumeQueue file that
//! cannot be created stalls dispatch at the failing record until it can be, an index file
//! that cannot be created leaves puts and pulls working and the index comes back by
//! itself, and a clean restart keeps the pre-allocated next CommitLog segment quietly.
//!
//! Failures are injected by putting a regular file where the store needs a directory
//! (creating files below it then fails with ENOTDIR, whoever runs the test, root
//! included) and removed by deleting it again.

use super::{config, put, segment_path, temp_dir, SEG};
use ringmq_store::{
    AcceptAll, FlushDiskType, MessageStore, PutMessageStatus, StoreConfig, WriteMode,
};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Polls `f` every 5 ms for up to `bound`; false when it never held.
fn eventually(bound: Duration, f: impl Fn() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < bound {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    f()
}

/// Keys of the messages of `topic`-0 from queue offset 0, in queue order.
fn keys_in_queue(store: &MessageStore, topic: &str) -> Vec<String> {
    let r = store.get_message(topic, 0, 0, 32, 1 << 20, &AcceptAll);
    r.messages
        .iter()
        .map(|m| super::key_of(&super::decode(m)))
        .collect()
}

/// Two puts to a new topic are acknowledged while its ConsumeQueue directory cannot be
/// created. Dispatch stalls at the first of them, retrying: once the failure has lasted
/// `logic_queue_error_after_ms` puts are refused (SERVICE_NOT_AVAILABLE). When the
/// directory can be created again, dispatch resumes at the same record without a restart:
/// both acknowledged messages become pullable in order and puts are accepted again.
/// Under SYNC_FLUSH the reput thread meets the failure; under ASYNC_FLUSH (append and
/// reput sharing a core, the 2-core default) the append thread does, hands over without
/// sleeping, and the reput thread retries.
#[test]
fn consume_queue_creation_failure_stalls_dispatch_and_recovers_without_restart() {
    for flush in [FlushDiskType::SyncFlush, FlushDiskType::AsyncFlush] {
        cq_creation_failure_stalls_and_recovers(flush);
    }
}

fn cq_creation_failure_stalls_and_recovers(flush: FlushDiskType) {
    let dir = temp_dir("cq-fault");
    let cfg = StoreConfig {
        logic_queue_error_after_ms: 300,
        ..config(&dir, flush, WriteMode::Mmap)
    };
    let blocker = cfg.consume_queue_dir().join("NEWT");
    let store = MessageStore::open(cfg).unwrap();
    assert_eq!(
        put(&store, "OLD", 0, "o0", 100).status,
        PutMessageStatus::PutOk
    );
    std::fs::create_dir_all(blocker.parent().unwrap()).unwrap();
    std::fs::write(&blocker, b"not a directory").unwrap();

    for key in ["n0", "n1"] {
        let r = put(&store, "NEWT", 0, key, 100);
        assert_eq!(
            r.status,
            PutMessageStatus::PutOk,
            "acknowledged before the grace ends"
        );
    }
    assert!(
        eventually(Duration::from_secs(5), || !store.is_writeable()),
        "puts are refused once ConsumeQueue writes have failed for the grace period"
    );
    assert_eq!(
        put(&store, "OLD", 0, "refused", 100).status,
        PutMessageStatus::ServiceNotAvailable
    );
    assert_eq!(
        store.max_offset_in_queue("NEWT", 0),
        0,
        "not dispatched yet"
    );
    assert!(
        store.dispatch_behind_bytes() > 0,
        "the dispatch position waits at the record"
    );

    std::fs::remove_file(&blocker).unwrap();
    assert!(
        eventually(Duration::from_secs(5), || store.is_writeable()
            && store.max_offset_in_queue("NEWT", 0) == 2),
        "dispatch recovers by itself once the queue file can be created"
    );
    assert_eq!(
        keys_in_queue(&store, "NEWT"),
        vec!["n0", "n1"],
        "nothing skipped"
    );
    assert_eq!(store.dispatch_behind_bytes(), 0);
    assert_eq!(
        put(&store, "NEWT", 0, "n2", 100).status,
        PutMessageStatus::PutOk
    );
    assert!(eventually(Duration::from_secs(5), || {
        store.max_offset_in_queue("NEWT", 0) == 3
    }));
    assert_eq!(keys_in_queue(&store, "OLD"), vec!["o0"]);
    store.shutdown();
    assert!(
        !dir.join("abort").exists(),
        "a recovered stall shuts down cleanly"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Under ASYNC_FLUSH with append and reput on one core (both unpinned, the 2-core
/// default) the append thread dispatches its own batches while the reput thread idles;
/// with the two stages on different cores every record is dispatched by the reput thread.
#[test]
fn append_dispatches_its_batches_only_when_it_shares_the_reput_core() {
    for (cores, topic) in [((None, None), "DHERE"), ((Some(0), Some(1)), "DTHERE")] {
        let dir = temp_dir("dispatch-here");
        let cfg = StoreConfig {
            append_core: cores.0,
            reput_core: cores.1,
            ..config(&dir, FlushDiskType::AsyncFlush, WriteMode::Mmap)
        };
        let store = MessageStore::open(cfg).unwrap();
        let threads = Arc::new(Mutex::new(Vec::<String>::new()));
        let seen = Arc::clone(&threads);
        store.add_arrival_listener(Arc::new(move |_| {
            let name = std::thread::current().name().unwrap_or("?").to_string();
            seen.lock().unwrap().push(name);
        }));
        for n in 0..20 {
            let r = put(&store, topic, 0, &format!("k{n}"), 100);
            assert_eq!(r.status, PutMessageStatus::PutOk);
            // One put per batch, as at a low rate.
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(eventually(Duration::from_secs(5), || {
            store.max_offset_in_queue(topic, 0) == 20
        }));
        store.shutdown();
        let threads = threads.lock().unwrap().clone();
        assert_eq!(threads.len(), 20, "{threads:?}");
        let on_append = threads.iter().filter(|t| *t == "ringmq-append").count();
        let on_reput = threads.iter().filter(|t| *t == "ringmq-reput").count();
        assert_eq!(on_append + on_reput, 20, "{threads:?}");
        match cores {
            (None, None) => assert!(on_append > 0, "never dispatched inline: {threads:?}"),
            _ => assert_eq!(on_reput, 20, "{threads:?}"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// With a new index file impossible to create (as on a full disk), puts are still
/// accepted and the messages pulled; only the key lookup misses them. Once the index
/// directory is usable again the index resumes by itself: new messages are found by key.
#[test]
fn index_file_creation_failure_keeps_puts_and_the_index_recovers() {
    let dir = temp_dir("index-fault");
    // Each put indexes 3 keys (KEYS "k alt-k" and UNIQ_KEY): one message fills a file of
    // 3 entries, so every put needs a new index file.
    let cfg = StoreConfig {
        max_hash_slot_num: 16,
        max_index_num: 4,
        ..config(&dir, FlushDiskType::SyncFlush, WriteMode::Mmap)
    };
    let index_dir = cfg.index_dir();
    let moved = dir.join("index-moved");
    let store = MessageStore::open(cfg).unwrap();
    let found = |key: &str| !store.query_message("IX", key, 4, 0, i64::MAX).is_empty();
    assert_eq!(
        put(&store, "IX", 0, "a", 50).status,
        PutMessageStatus::PutOk
    );
    assert!(eventually(Duration::from_secs(5), || found("a")));

    std::fs::rename(&index_dir, &moved).unwrap();
    std::fs::write(&index_dir, b"not a directory").unwrap();
    for key in ["b", "c"] {
        let r = put(&store, "IX", 0, key, 50);
        assert_eq!(
            r.status,
            PutMessageStatus::PutOk,
            "puts go on without the index"
        );
    }
    assert!(eventually(Duration::from_secs(5), || {
        store.max_offset_in_queue("IX", 0) == 3
    }));
    assert_eq!(keys_in_queue(&store, "IX"), vec!["a", "b", "c"]);
    assert!(!store.is_index_available());
    assert!(
        store.is_writeable(),
        "an index failure does not refuse puts"
    );
    assert!(!found("b"));

    std::fs::remove_file(&index_dir).unwrap();
    std::fs::rename(&moved, &index_dir).unwrap();
    // The index is retried about once a second: keep putting until a new key is found.
    let t = Instant::now();
    let mut i = 0;
    let recovered = loop {
        let key = format!("d{i}");
        assert_eq!(
            put(&store, "IX", 0, &key, 50).status,
            PutMessageStatus::PutOk
        );
        if eventually(Duration::from_millis(200), || found(&key)) {
            break true;
        }
        if t.elapsed() > Duration::from_secs(10) {
            break false;
        }
        i += 1;
    };
    assert!(
        recovered,
        "the index resumes by itself once files can be created"
    );
    assert!(store.is_index_available());
    assert!(
        found("a"),
        "entries from before the failure are still there"
    );
    store.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Collects formatted tracing events (for the thread it is installed on).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Opens the store with warning-level events of this thread (recovery runs on it)
/// captured; returns the store and the captured text.
fn open_capturing_warnings(cfg: StoreConfig) -> (MessageStore, String) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let store = tracing::subscriber::with_default(subscriber, || MessageStore::open(cfg).unwrap());
    let text = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
    (store, text)
}

fn inode(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().ino()
}

/// After a clean shutdown the next start logs no warning and keeps the empty next
/// segment the allocator had prepared: the same file (inode) is used when the log rolls
/// into it, and what is written there survives another restart.
#[test]
fn clean_restart_keeps_the_preallocated_segment_without_warnings() {
    for mode in [WriteMode::Mmap, WriteMode::Direct] {
        keeps_the_preallocated_segment(mode);
    }
}

fn keeps_the_preallocated_segment(mode: WriteMode) {
    let dir = temp_dir("keep-next");
    let cfg = config(&dir, FlushDiskType::SyncFlush, mode);
    let store = MessageStore::open(cfg.clone()).unwrap();
    for i in 0..10 {
        assert_eq!(
            put(&store, "K", 0, &format!("k{i}"), 500).status,
            PutMessageStatus::PutOk
        );
    }
    let next = segment_path(&dir, SEG);
    assert!(
        eventually(Duration::from_secs(5), || {
            std::fs::metadata(&next).is_ok_and(|m| m.len() == SEG)
        }),
        "the allocator prepares the next segment"
    );
    let prepared = inode(&next);
    store.shutdown();
    assert!(!dir.join("abort").exists());

    let (store, warnings) = open_capturing_warnings(cfg.clone());
    assert!(
        warnings.is_empty(),
        "a clean start warns about nothing:\n{warnings}"
    );
    assert!(next.exists(), "the prepared segment is kept");
    assert_eq!(inode(&next), prepared, "and not re-created");
    // Roll into it: the log uses the kept file.
    let mut i = 10;
    while put(&store, "K", 0, &format!("k{i}"), 500).wrote_offset as u64 <= SEG {
        i += 1;
        assert!(i < 1000, "the log rolls within a segment's worth of puts");
    }
    assert_eq!(inode(&next), prepared, "the kept file is the one written");
    let count = i + 1;
    assert!(eventually(Duration::from_secs(5), || {
        store.max_offset_in_queue("K", 0) == count as i64
    }));
    store.shutdown();

    let (store, warnings) = open_capturing_warnings(cfg);
    assert!(warnings.is_empty(), "{warnings}");
    assert_eq!(store.max_offset_in_queue("K", 0), count as i64);
    let last = store.get_message("K", 0, count as i64 - 1, 1, 1 << 20, &AcceptAll);
    assert_eq!(
        last.messages.len(),
        1,
        "the record in the kept segment survives a restart"
    );
    store.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
