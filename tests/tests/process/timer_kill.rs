//! Timer messages survive SIGKILL: messages set to TIMER_DELAY_SEC=4 and TIMER_DELIVER_MS
//! = now + 3000 through ringmq's client, the broker killed while they wait and restarted,
//! each is delivered at least once and never before its time.

use super::*;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

#[test]
fn timer_messages_survive_sigkill_and_are_never_early() {
    let mut c = ProcCluster::start("");
    let topic = unique("T_timer_kill");
    c.create_topic(&topic, 2);
    let p = c.producer();
    let mut due: BTreeMap<String, i64> = BTreeMap::new();
    for i in 0..10 {
        let sent_at = now_ms();
        let m = Message::new(&topic, format!("sec-{i}"))
            .with_property("TIMER_DELAY_SEC", "4")
            .unwrap();
        let r = block_on(p.send(&m)).expect("timer send");
        due.insert(r.msg_id, sent_at + 4_000);
        let at = now_ms() + 3_000;
        let m = Message::new(&topic, format!("at-{i}"))
            .with_property("TIMER_DELIVER_MS", &at.to_string())
            .unwrap();
        let r = block_on(p.send(&m)).expect("timer send");
        due.insert(r.msg_id, at);
    }
    drop(p);
    // Past one timer checkpoint (1 s), well before the first is due.
    std::thread::sleep(Duration::from_millis(1_200));
    c.broker().sigkill();
    c.broker = None;
    c.wait_port_free();
    c.start_broker();
    let got = c.pull_all(&topic, 2, due.len());
    let mut seen = BTreeSet::new();
    for m in &got {
        let want = *due
            .get(&m.msg_id)
            .unwrap_or_else(|| panic!("unexpected {}", m.msg_id));
        assert!(
            m.store_timestamp_ms >= want,
            "{} stored at {} before its time {want}",
            m.msg_id,
            m.store_timestamp_ms
        );
        let dequeued: i64 = m
            .properties
            .get("TIMER_DEQUEUE_MS")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{} has no TIMER_DEQUEUE_MS", m.msg_id));
        assert!(dequeued >= want);
        seen.insert(m.msg_id.clone());
    }
    assert_eq!(
        seen.len(),
        due.len(),
        "every timer message delivered after the kill"
    );
    c.stop_broker_cleanly();
}
