//! The transform rules of features.md §c.2.

use super::*;

const NOW: i64 = 1_700_000_000_123;

fn settings() -> TimerPutSettings {
    TimerPutSettings {
        enable: true,
        precision_ms: 1000,
        max_delay_sec: 259_200,
        congest_num_each_slot: i64::from(i32::MAX),
    }
}

fn run(
    props: &str,
    s: &TimerPutSettings,
) -> (
    Result<TimerPut, PutMessageStatus>,
    MessageProperties,
    String,
    i32,
) {
    let mut p = MessageProperties::parse(props);
    let mut topic = "TopicA".to_string();
    let mut qid = 3;
    let r = transform(&mut p, &mut topic, &mut qid, NOW, s, |_| 0);
    (r, p, topic, qid)
}

#[test]
fn delay_sec_parks_in_the_timer_topic_rounded_down() {
    let (r, p, topic, qid) = run("TIMER_DELAY_SEC\u{1}2\u{2}", &settings());
    // now + 2000 = ...2123 → floor to ...2000.
    let out = (NOW + 2000) / 1000 * 1000;
    assert_eq!(r, Ok(TimerPut::Parked { out_ms: out }));
    assert_eq!((topic.as_str(), qid), (TIMER_TOPIC, 0));
    assert_eq!(p.get("TIMER_OUT_MS"), Some(out.to_string().as_str()));
    assert_eq!(p.get("REAL_TOPIC"), Some("TopicA"));
    assert_eq!(p.get("REAL_QID"), Some("3"));
    assert_eq!(
        p.get("TIMER_DELAY_SEC"),
        Some("2"),
        "the client's property stays"
    );
}

#[test]
fn exact_multiple_goes_one_slot_earlier_and_priority_is_sec_ms_deliver() {
    let at = (NOW / 1000 + 5) * 1000;
    let (r, ..) = run(&format!("TIMER_DELIVER_MS\u{1}{at}\u{2}"), &settings());
    assert_eq!(r, Ok(TimerPut::Parked { out_ms: at - 1000 }));
    // SEC wins over MS and DELIVER_MS; MS wins over DELIVER_MS.
    let (r, ..) = run(&format!("TIMER_DELIVER_MS\u{1}{at}\u{2}TIMER_DELAY_MS\u{1}10000\u{2}TIMER_DELAY_SEC\u{1}20\u{2}"), &settings());
    assert_eq!(
        r,
        Ok(TimerPut::Parked {
            out_ms: (NOW + 20_000) / 1000 * 1000
        })
    );
    let (r, ..) = run(
        &format!("TIMER_DELIVER_MS\u{1}{at}\u{2}TIMER_DELAY_MS\u{1}10000\u{2}"),
        &settings(),
    );
    assert_eq!(
        r,
        Ok(TimerPut::Parked {
            out_ms: (NOW + 10_000) / 1000 * 1000
        })
    );
    for deliver in [NOW + 1, NOW + 999, NOW + 1000, NOW + 123_456] {
        let out = round_to_slot(deliver, 1000);
        assert!(out < deliver && out % 1000 == 0);
        assert!(
            out + 1000 >= deliver,
            "delivered at most one precision late"
        );
    }
}

#[test]
fn refusals_and_immediate_delivery() {
    let (r, ..) = run("TIMER_DELAY_SEC\u{1}soon\u{2}", &settings());
    assert_eq!(r, Err(PutMessageStatus::WheelTimerMsgIllegal));
    let (r, ..) = run("TIMER_DELAY_SEC\u{1}259201\u{2}", &settings());
    assert_eq!(r, Err(PutMessageStatus::WheelTimerMsgIllegal));
    let (r, ..) = run("TIMER_DELAY_SEC\u{1}259200\u{2}", &settings());
    assert!(matches!(r, Ok(TimerPut::Parked { .. })));
    let off = TimerPutSettings {
        enable: false,
        ..settings()
    };
    let (r, ..) = run("TIMER_DELAY_MS\u{1}10\u{2}", &off);
    assert_eq!(r, Err(PutMessageStatus::WheelTimerNotEnable));
    assert_eq!(
        refusal(PutMessageStatus::WheelTimerNotEnable, &off).0,
        ResponseCode::SystemError
    );
    assert_eq!(
        refusal(PutMessageStatus::WheelTimerMsgIllegal, &off).0,
        ResponseCode::MessageIllegal
    );
    // Past time: stored to its own topic untouched; a past delete request is illegal.
    let (r, p, topic, qid) = run("TIMER_DELIVER_MS\u{1}1000\u{2}", &settings());
    assert_eq!(r, Ok(TimerPut::Immediate));
    assert_eq!(
        (topic.as_str(), qid, p.get("TIMER_OUT_MS")),
        ("TopicA", 3, None)
    );
    let (r, ..) = run(
        "TIMER_DELIVER_MS\u{1}1000\u{2}TIMER_DEL_UNIQKEY\u{1}TopicA+U\u{2}",
        &settings(),
    );
    assert_eq!(r, Err(PutMessageStatus::WheelTimerMsgIllegal));
    // Already transformed (or rolled) messages are left alone; so are plain messages.
    let (r, ..) = run(
        "TIMER_DELAY_SEC\u{1}2\u{2}TIMER_OUT_MS\u{1}5\u{2}",
        &settings(),
    );
    assert_eq!(r, Ok(TimerPut::NotTimer));
    let (r, ..) = run("TAGS\u{1}a\u{2}", &settings());
    assert_eq!(r, Ok(TimerPut::NotTimer));
}

#[test]
fn flow_control_by_slot_count() {
    let s = TimerPutSettings {
        congest_num_each_slot: 10,
        ..settings()
    };
    let mut p = MessageProperties::parse("TIMER_DELAY_SEC\u{1}2\u{2}");
    let (mut topic, mut qid) = ("T".to_string(), 0);
    let r = transform(&mut p, &mut topic, &mut qid, NOW, &s, |_| 20);
    assert_eq!(r, Err(PutMessageStatus::WheelTimerFlowControl));
    assert_eq!(topic, "T", "a refused message is not rewritten");
    let r = transform(&mut p, &mut topic, &mut qid, NOW, &s, |_| 10);
    assert!(matches!(r, Ok(TimerPut::Parked { .. })));
    assert!(!is_reject(10, 10, 999));
    assert!(is_reject(20, 10, 0));
    assert!(is_reject(11, 10, 999));
    assert!(!is_reject(19, 10, 0));
}

#[test]
fn timer_keys_are_config_keys_with_upstream_defaults() {
    let defaults = crate::config::BrokerConfig::default();
    let s = TimerPutSettings::from_config(&defaults);
    assert_eq!(s, settings());
    let report = defaults.report_properties_text();
    for line in [
        "timerWheelEnable=true",
        "timerPrecisionMs=1000",
        "timerMaxDelaySec=259200",
        "timerCongestNumEachSlot=2147483647",
        "timerRollWindowSlot=172800",
        "mappedFileSizeTimerLog=104857600",
        "timerGetMessageThreadNum=3",
    ] {
        assert!(report.lines().any(|l| l == line), "{line} missing");
    }
    let (c, notes) = crate::config::BrokerConfig::from_properties_text(
        "timerWheelEnable=false\ntimerPrecisionMs=100\ntimerMaxDelaySec=60\n",
    );
    assert!(notes.is_empty(), "{notes:?}");
    let s = TimerPutSettings::from_config(&c);
    assert_eq!(
        (s.enable, s.precision_ms, s.max_delay_sec),
        (false, 100, 60)
    );
    let report = c.report_properties_text();
    assert!(
        report.lines().any(|l| l == "timerPrecisionMs=100"),
        "effective value shown"
    );
    assert!(report.lines().any(|l| l == "timerWheelEnable=false"));
}

fn send_with(
    ctx: &std::sync::Arc<crate::context::BrokerContext>,
    props: &str,
) -> ringmq_remoting::RemotingCommand {
    let mut r = ringmq_remoting::RemotingCommand::request(310, 1);
    for (k, v) in [
        ("a", "PG"),
        ("b", "TopicS"),
        ("c", "TBW102"),
        ("d", "4"),
        ("e", "1"),
        ("f", "0"),
        ("g", "1700000000000"),
        ("h", "0"),
        ("i", props),
    ] {
        r.ext_fields.insert(k, v);
    }
    crate::test_support::run(ctx, r.with_body(b"b".to_vec())).command
}

fn stored_props(store: &ringmq_store::MemStore, topic: &str, qid: i32) -> MessageProperties {
    use ringmq_remoting::message::record::{decode_record, Decoded};
    use ringmq_store::StoreApi;
    let got = store.get_message(topic, qid, 0, 1, 1 << 20, &ringmq_store::AcceptAll);
    assert_eq!(got.messages.len(), 1, "one message in {topic}/{qid}");
    let Ok(Decoded::Message(r)) = decode_record(&got.messages[0], false) else {
        panic!("unreadable record")
    };
    MessageProperties::parse_bytes(r.properties)
}

#[test]
fn send_path_parks_timer_messages_and_lets_delay_levels_win() {
    use crate::config::BrokerConfig;
    let (ctx, store) = crate::test_support::test_context(BrokerConfig::default());
    let resp = send_with(&ctx, "TIMER_DELAY_SEC\u{1}5\u{2}UNIQ_KEY\u{1}U\u{2}");
    assert_eq!(resp.code, 0, "{:?}", resp.remark);
    assert_eq!(resp.ext_fields.get("queueId"), Some("1"));
    let p = stored_props(&store, TIMER_TOPIC, 0);
    assert!(p.get("TIMER_OUT_MS").is_some());
    assert_eq!(
        (p.get("REAL_TOPIC"), p.get("REAL_QID")),
        (Some("TopicS"), Some("1"))
    );
    // A delay level wins: timer properties are dropped and the message is scheduled.
    let resp = send_with(&ctx, "DELAY\u{1}3\u{2}TIMER_DELAY_SEC\u{1}5\u{2}");
    assert_eq!(resp.code, 0, "{:?}", resp.remark);
    let p = stored_props(&store, crate::metadata::topic_config::SCHEDULE_TOPIC, 2);
    assert_eq!(
        (p.get("TIMER_DELAY_SEC"), p.get("DELAY")),
        (None, Some("3"))
    );

    let off = BrokerConfig {
        timer_wheel_enable: false,
        ..BrokerConfig::default()
    };
    let (ctx, _) = crate::test_support::test_context(off);
    let resp = send_with(&ctx, "TIMER_DELAY_MS\u{1}500\u{2}");
    assert_eq!(resp.code, ResponseCode::SystemError.code());
    let resp = send_with(&ctx, "TAGS\u{1}t\u{2}");
    assert_eq!(resp.code, 0, "plain messages unaffected");
}
