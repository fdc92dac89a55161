//! Long polling on the owning network core, end to end: pulls parked on several
//! connections (spread over two network cores) are all answered by one arrival; a pull
//! whose tag filter the arrival does not match keeps waiting until its suspend time runs
//! out, then is answered PULL_RETRY_IMMEDIATELY past the skipped message; a parked pull
//! is answered PULL_NOT_FOUND at shutdown.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use ringmq_broker::Broker;
use ringmq_remoting::RemotingCommand;

use super::{config, pull, records, send, temp_dir, wait_max_offset, Client};

/// PULL_NOT_FOUND.
const PULL_NOT_FOUND: i32 = 19;
/// PULL_RETRY_IMMEDIATELY.
const PULL_RETRY_IMMEDIATELY: i32 = 20;
/// sysFlag: suspend + subscription in the request.
const SUSPEND_WITH_SUBSCRIPTION: i32 = 0x2 | 0x4;

/// Parks a pull on a new connection; its answer (and how long it took) arrives on the
/// returned channel.
fn parked_pull(
    addr: std::net::SocketAddr,
    request: RemotingCommand,
) -> mpsc::Receiver<(RemotingCommand, Duration)> {
    let (tx, rx) = mpsc::channel();
    let mut consumer = Client::connect(addr);
    std::thread::spawn(move || {
        let started = Instant::now();
        if let Some(resp) = consumer.call_timeout(request, Duration::from_secs(15)) {
            let _ = tx.send((resp, started.elapsed()));
        }
    });
    rx
}

fn tagged_pull(topic: &str, offset: i64, tag: &str, suspend_ms: i64) -> RemotingCommand {
    let mut r = pull(topic, 0, offset, SUSPEND_WITH_SUBSCRIPTION, suspend_ms);
    r.ext_fields.insert("subscription", tag);
    r
}

#[test]
fn held_pulls_on_every_core_are_woken_by_one_arrival_and_expire_by_filter() {
    let dir = temp_dir("longpoll-cores");
    let mut cfg = config(&dir, None);
    let mut notes = Vec::new();
    cfg.apply("ringmq.cores.network", "0,1", &mut notes);
    assert!(notes.is_empty(), "{notes:?}");
    let broker = Broker::start(cfg).expect("broker starts");
    let addr = broker.local_addr();
    let mut producer = Client::connect(addr);
    assert_eq!(producer.call(send("TopicPC", 0, "", b"first")).code, 0);
    wait_max_offset(&mut producer, "TopicPC", 0, 1);

    let waiting: Vec<_> = (0..4)
        .map(|_| parked_pull(addr, tagged_pull("TopicPC", 1, "*", 20_000)))
        .collect();
    // Held long enough to outlast the checks and the second send below on a loaded host:
    // expired before "second" was dispatched, it would find nothing at offset 1.
    let filtered = parked_pull(addr, tagged_pull("TopicPC", 1, "TagZ", 3_000));
    let deadline = Instant::now() + Duration::from_secs(3);
    while broker.context().hold.held_count() < 5 {
        assert!(Instant::now() < deadline, "the five pulls are parked");
        std::thread::sleep(Duration::from_millis(2));
    }
    let by_core = broker.context().hold.held_by_core();
    assert_eq!(
        by_core.iter().filter(|held| **held > 0).count(),
        2,
        "each core holds the pulls of its own connections: {by_core:?}"
    );
    let sent = "TAGS\u{1}TagA\u{2}";
    assert_eq!(producer.call(send("TopicPC", 0, sent, b"second")).code, 0);
    for rx in &waiting {
        let (resp, waited) = rx.recv_timeout(Duration::from_secs(5)).expect("woken");
        assert_eq!(resp.code, 0, "{:?}", resp.remark);
        assert_eq!(records(&resp.body)[0].0, b"second");
        assert!(
            waited < Duration::from_secs(10),
            "woken, not expired: {waited:?}"
        );
    }
    let (resp, waited) = filtered
        .recv_timeout(Duration::from_secs(10))
        .expect("expired");
    assert_eq!(resp.code, PULL_RETRY_IMMEDIATELY, "{:?}", resp.remark);
    assert_eq!(resp.ext_fields.get("nextBeginOffset"), Some("2"));
    assert!(
        waited >= Duration::from_millis(2_900),
        "TagA does not wake a TagZ pull: answered after {waited:?}"
    );
    assert_eq!(broker.context().hold.held_count(), 0);

    // Shutdown answers what is still parked.
    let last = parked_pull(addr, tagged_pull("TopicPC", 2, "*", 20_000));
    let deadline = Instant::now() + Duration::from_secs(3);
    while broker.context().hold.held_count() < 1 {
        assert!(Instant::now() < deadline, "the last pull is parked");
        std::thread::sleep(Duration::from_millis(2));
    }
    broker.shutdown();
    let (resp, _) = last.recv_timeout(Duration::from_secs(5)).expect("answered");
    assert_eq!(resp.code, PULL_NOT_FOUND, "{:?}", resp.remark);
    let _ = std::fs::remove_dir_all(&dir);
}
