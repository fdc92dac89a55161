//! What a running timer store shows outside: its families on `/metrics` (lags, totals and
//! the delivery lateness histogram) and the admin requests GET_TIMER_CHECK_POINT and
//! GET_TIMER_METRICS, answered as upstream answers them.

use super::*;
use ringmq_broker::metrics::BrokerGauges;

const GET_TIMER_CHECK_POINT: i32 = 60;
const GET_TIMER_METRICS: i32 = 61;

/// The sample value of the line starting with `prefix` (name plus labels).
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn checkpoint_longs(c: &mut Client) -> Vec<i64> {
    let r = c.call(RemotingCommand::request(GET_TIMER_CHECK_POINT, 0));
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(r.body.len(), 56, "seven big-endian longs");
    r.body
        .chunks(8)
        .map(|b| i64::from_be_bytes(b.try_into().unwrap()))
        .collect()
}

fn timing_count(c: &mut Client, topic: &str) -> Option<i64> {
    let r = c.call(RemotingCommand::request(GET_TIMER_METRICS, 0));
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("timer metrics JSON");
    assert!(v.get("dataVersion").is_some(), "{v}");
    v["timingCount"][topic]["count"].as_i64()
}

/// Polls `f` every 50 ms for at most `max_ms` until it holds.
fn eventually(max_ms: u64, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_millis(max_ms);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

#[test]
fn timer_families_and_admin_requests_follow_a_delivery() {
    let dir = temp_dir("timer-observability");
    let broker =
        Broker::start(config_with_lines(&dir, "timerFlushIntervalMs=100\n")).expect("starts");
    let mut c = Client::connect(broker.local_addr());
    let page = || broker.context().metrics.render(&BrokerGauges::default());
    assert_eq!(sample(&page(), "rocketmq_timer_enqueue_total{"), Some(0.0));

    let due_ms = now_ms() + 2500;
    let props = format!("UNIQ_KEY\u{1}TO1\u{2}TIMER_DELIVER_MS\u{1}{due_ms}\u{2}");
    let resp = c.call(send("TopicTO", 0, &props, b"later"));
    assert_eq!(resp.code, 0, "{:?}", resp.remark);

    // Waiting: counted per topic in the published metrics and the checkpoint moved on.
    assert!(eventually(3000, || timing_count(&mut c, "TopicTO") == Some(1)));
    assert!(eventually(3000, || checkpoint_longs(&mut c)[2] >= 1));
    let waiting = page();
    assert_eq!(sample(&waiting, "rocketmq_timer_enqueue_total{"), Some(1.0));
    assert_eq!(
        sample(&waiting, "ringmq_timer_congest_messages{"),
        Some(1.0)
    );
    assert!(waiting.contains("# TYPE rocketmq_timer_enqueue_lag gauge\n"));
    assert!(waiting.contains("# TYPE rocketmq_timer_dequeue_latency gauge\n"));
    assert!(waiting.contains("# TYPE rocketmq_timer_enqueue_latency gauge\n"));
    assert_eq!(sample(&waiting, "rocketmq_timer_dequeue_lag{"), Some(1.0));

    // Delivered: dequeue counted, lateness observed (never early), waiting count back to 0.
    assert!(eventually(6000, || {
        sample(&page(), "rocketmq_timer_dequeue_total{") == Some(1.0)
    }));
    assert!(now_ms() >= due_ms, "delivered early");
    let done = page();
    assert!(done.contains("# TYPE ringmq_timer_delivery_lateness_ms histogram\n"));
    assert_eq!(
        sample(&done, "ringmq_timer_delivery_lateness_ms_count{"),
        Some(1.0)
    );
    let within_5s = done
        .lines()
        .find(|l| {
            l.starts_with("ringmq_timer_delivery_lateness_ms_bucket{") && l.contains("le=\"5000\"")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
    assert_eq!(within_5s, Some(1.0), "{done}");
    assert_eq!(sample(&done, "ringmq_timer_congest_messages{"), Some(0.0));
    assert!(eventually(3000, || timing_count(&mut c, "TopicTO") == Some(0)));
    let ck = checkpoint_longs(&mut c);
    assert!(
        ck[0] >= due_ms / 1000 * 1000,
        "read time past the due slot: {ck:?}"
    );
    drop(c);
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_a_timer_store_admin_requests_fail_and_no_families_show() {
    let dir = temp_dir("timer-observability-off");
    let broker =
        Broker::start(config_with_lines(&dir, "timerWheelEnable=false\n")).expect("starts");
    let mut c = Client::connect(broker.local_addr());
    for (code, remark) in [
        (GET_TIMER_CHECK_POINT, "The checkpoint is null"),
        (GET_TIMER_METRICS, "The timer message store is null"),
    ] {
        let r = c.call(RemotingCommand::request(code, 0));
        assert_eq!(r.code, 1, "SYSTEM_ERROR");
        assert_eq!(r.remark.as_deref(), Some(remark));
    }
    let page = broker.context().metrics.render(&BrokerGauges::default());
    assert!(!page.contains("rocketmq_timer_"), "{page}");
    drop(c);
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
