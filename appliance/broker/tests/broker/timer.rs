//! Timer messages through a real broker: parked on send, invisible in the real queue until
//! their time, delivered with upstream's properties, kept across a restart; refused as
//! upstream refuses them.

use super::*;

#[test]
fn timer_message_waits_for_its_time_across_a_restart() {
    let dir = temp_dir("timer-e2e");
    let broker = Broker::start(config_with_lines(&dir, "")).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    let sent_at = now_ms();
    let resp = c.call(send(
        "TopicTM",
        1,
        "UNIQ_KEY\u{1}TM1\u{2}TIMER_DELAY_SEC\u{1}2\u{2}",
        b"later",
    ));
    assert_eq!(resp.code, 0, "{:?}", resp.remark);
    assert_eq!(resp.ext_fields.get("queueId"), Some("1"));
    // Parked in the timer topic, not in the real queue.
    wait_max_offset(&mut c, "rmq_sys_wheel_timer", 0, 1);
    let r = c.call(pull("TopicTM", 1, 0, 0x4, 0));
    assert_ne!(r.code, 0, "not pullable before its time");
    drop(c);
    broker.shutdown();

    let broker = Broker::start(config_with_lines(&dir, "")).expect("broker restarts");
    let mut c = Client::connect(broker.local_addr());
    let deadline = Instant::now() + Duration::from_secs(8);
    let found = loop {
        let r = c.call(pull("TopicTM", 1, 0, 0x4, 0));
        if r.code == 0 {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "timer message never delivered: {:?}",
            r.remark
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(now_ms() >= sent_at + 2000, "delivered early");
    let got = records(&found.body);
    assert_eq!(got.len(), 1, "delivered once");
    let (body, props, _) = &got[0];
    assert_eq!(body, b"later");
    let prop = |k: &str| properties::find(props, k).map(str::to_string);
    assert_eq!(prop("UNIQ_KEY").as_deref(), Some("TM1"));
    assert_eq!(prop("TIMER_DELAY_SEC").as_deref(), Some("2"));
    let dequeued: i64 = prop("TIMER_DEQUEUE_MS").unwrap().parse().unwrap();
    let out: i64 = prop("TIMER_OUT_MS").unwrap().parse().unwrap();
    assert!(dequeued >= sent_at + 2000 && out + 1000 >= sent_at + 2000);
    assert!(prop("TIMER_ENQUEUE_MS").is_some());
    assert_eq!((prop("REAL_TOPIC"), prop("REAL_QID")), (None, None));
    assert!(dir.join("timerwheel").exists() && dir.join("config/timercheck").exists());
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn timer_refusals_follow_upstream() {
    let dir = temp_dir("timer-refuse");
    let broker =
        Broker::start(config_with_lines(&dir, "timerMaxDelaySec=10")).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    let r = c.call(send("TopicTR", 0, "TIMER_DELAY_SEC\u{1}11\u{2}", b"x"));
    assert_eq!(r.code, 13, "MESSAGE_ILLEGAL: {:?}", r.remark);
    let r = c.call(send(
        "TopicTR",
        0,
        "TIMER_DELIVER_MS\u{1}1000\u{2}",
        b"past",
    ));
    assert_eq!(r.code, 0, "a past time is delivered at once");
    let got = records(&pull_found(&mut c, pull("TopicTR", 0, 0, 0x4, 0)).body);
    assert_eq!(got[0].0, b"past");
    let info = c.call(RemotingCommand::request(28, 0));
    let text = String::from_utf8_lossy(&info.body).to_string();
    assert!(text.contains("\"timerCongestNum\""), "{text}");
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);

    let dir = temp_dir("timer-off");
    let broker =
        Broker::start(config_with_lines(&dir, "timerWheelEnable=false")).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    let r = c.call(send("TopicTR", 0, "TIMER_DELAY_SEC\u{1}1\u{2}", b"x"));
    assert_eq!(r.code, 1, "SYSTEM_ERROR: {:?}", r.remark);
    assert!(r
        .remark
        .unwrap_or_default()
        .contains("timerWheelEnable is false"));
    assert!(
        !dir.join("timerwheel").exists(),
        "no wheel when timers are off"
    );
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
