//! Orderly POP, PEEK_MESSAGE, POLLING_INFO, BATCH_ACK_MESSAGE and held checkpoints
//! (`enablePopBufferMerge`) against a real broker, driven with the Remoting codes directly.

use std::time::{Duration, Instant};

use ringmq_client::{block_on, ClientConfig, Message, Producer, RemotingClient, SendStatus};
use ringmq_remoting::pop::{BatchAck, BatchAckBody, ExtraInfo};
use ringmq_remoting::{RemotingCommand, RequestCode, ResponseCode};
use ringmq_tests::pop::{
    handle_call, pop_request_with, pop_until, pop_until_invisible, pop_with, PopOptions, PopTarget,
    Popped,
};
use ringmq_tests::{unique, Cluster};

fn target(c: &Cluster, tag: &str) -> PopTarget {
    let topic = unique(&format!("Topic{tag}"));
    super::create_topic(c, &topic, 1);
    PopTarget {
        broker_addr: c.broker_addr(),
        broker_name: c.broker_name.clone(),
        group: unique(&format!("CG-{tag}")),
        topic,
    }
}

fn send(c: &Cluster, topic: &str, bodies: &[&str]) {
    let producer = Producer::new(c.producer_config(&unique("PG-order")));
    for body in bodies {
        let r = block_on(producer.send(&Message::new(topic, body.as_bytes().to_vec())));
        assert_eq!(r.map(|r| r.status).ok(), Some(SendStatus::SendOk));
    }
}

fn call(client: &RemotingClient, addr: &str, request: RemotingCommand) -> RemotingCommand {
    block_on({
        let (client, addr) = (client.clone(), addr.to_string());
        async move { client.invoke(&addr, request, Duration::from_secs(10)).await }
    })
    .expect("answered")
}

fn bodies(popped: &[Popped]) -> Vec<&str> {
    popped.iter().map(|m| m.body.as_str()).collect()
}

fn ordered(invisible_ms: i64, poll_ms: i64) -> PopOptions {
    PopOptions {
        invisible_ms,
        poll_ms,
        order: true,
        ..PopOptions::default()
    }
}

/// An orderly NOTIFICATION that does not wait: whether a pop would find something.
fn orderly_has_msg(client: &RemotingClient, t: &PopTarget) -> bool {
    let mut r = RemotingCommand::request(RequestCode::Notification.code(), 0);
    for (k, v) in [
        ("consumerGroup", t.group.clone()),
        ("topic", t.topic.clone()),
        ("queueId", "-1".to_string()),
        ("pollTime", "0".to_string()),
        ("bornTime", ringmq_broker::persist::now_ms().to_string()),
        ("order", "true".to_string()),
    ] {
        r.ext_fields.insert(k, v);
    }
    let answer = call(client, &t.broker_addr, r);
    assert_eq!(answer.code, 0, "{:?}", answer.remark);
    answer.ext_fields.get("hasMsg") == Some("true")
}

fn ack(client: &RemotingClient, t: &PopTarget, m: &Popped) -> RemotingCommand {
    handle_call(client, t, RequestCode::AckMessage, m, None)
}

#[test]
fn orderly_pops_hold_their_queue_until_acked_or_visible_again() {
    let mut c = Cluster::start("");
    let t = target(&c, "PopOrder");
    let client = RemotingClient::new(ClientConfig::default());
    send(&c, &t.topic, &["m0", "m1", "m2", "m3", "m4"]);
    wait_visible(&client, &t, "m4");

    let (first, answer) = pop_with(&client, &t, &ordered(2_000, 0));
    assert_eq!(bodies(&first), ["m0", "m1", "m2", "m3", "m4"]);
    assert_eq!(answer.ext_fields.get("reviveQid"), Some("999"));
    let counts = answer.ext_fields.get("orderCountInfo").unwrap_or_default();
    assert!(
        counts.contains("0 qo0%0 0") && counts.ends_with(";0 0 0"),
        "{counts}"
    );
    // The queue is held: another pop gets nothing while the batch is invisible, and an
    // orderly NOTIFICATION says so.
    assert!(pop_with(&client, &t, &ordered(2_000, 0)).0.is_empty());
    assert!(!orderly_has_msg(&client, &t));
    for m in &first[..2] {
        assert_eq!(ack(&client, &t, m).code, 0);
    }
    assert!(pop_with(&client, &t, &ordered(2_000, 0)).0.is_empty());

    // A waiting pop is answered when the batch turns visible: the un-acked ones again,
    // counted once more.
    let started = Instant::now();
    let (again, answer) = pop_with(&client, &t, &ordered(2_000, 5_000));
    assert_eq!(
        bodies(&again),
        ["m2", "m3", "m4"],
        "{:?}",
        started.elapsed()
    );
    let counts = answer.ext_fields.get("orderCountInfo").unwrap_or_default();
    assert!(
        counts.contains("0 qo0%2 1") && counts.ends_with(";0 0 1"),
        "{counts}"
    );
    for m in &again {
        assert_eq!(ack(&client, &t, m).code, 0);
    }
    assert!(!orderly_has_msg(&client, &t), "all acked, nothing new");

    // An ack that opens the queue wakes the pop waiting on it.
    send(&c, &t.topic, &["m5", "m6"]);
    wait_visible(&client, &t, "m6");
    assert!(orderly_has_msg(&client, &t));
    let (m5, _) = pop_with(
        &client,
        &t,
        &PopOptions {
            invisible_ms: 60_000,
            ..ordered(0, 0)
        },
    );
    assert_eq!(bodies(&m5), ["m5", "m6"]);
    let old = Popped {
        queue_offset: 4,
        ..m5[0].clone()
    };
    assert_eq!(
        ack(&client, &t, &old).code,
        0,
        "below the committed offset: old news"
    );
    let stranger = Popped {
        queue_offset: 7,
        ..m5[0].clone()
    };
    let refused = ack(&client, &t, &stranger);
    assert_eq!(
        refused.code,
        ResponseCode::MessageIllegal.code(),
        "not in the batch"
    );
    let waiter = {
        let t = t.clone();
        std::thread::spawn(move || {
            let client = RemotingClient::new(ClientConfig::default());
            pop_with(&client, &t, &ordered(60_000, 8_000)).0
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(ack(&client, &t, &m5[0]).code, 0);
    // m6 alone: un-acked and invisible for a minute, so the queue stays held ...
    let code = RequestCode::ChangeMessageInvisibletime;
    let changed = handle_call(&client, &t, code, &m5[1], Some(0));
    assert_eq!(changed.code, 0, "{:?}", changed.remark);
    // ... until its invisible time is changed to now: the waiter gets it again.
    let woken = waiter.join().expect("the waiting pop");
    assert_eq!(bodies(&woken), ["m6"]);
    let m6 = woken[0].clone();

    // The held batch survives a restart (consumerOrderInfo.json).
    c.restart_broker();
    let t = PopTarget {
        broker_addr: c.broker_addr(),
        ..t
    };
    let client = RemotingClient::new(ClientConfig::default());
    assert!(pop_with(&client, &t, &ordered(60_000, 0)).0.is_empty());
    assert_eq!(ack(&client, &t, &m6).code, 0);
    send(&c, &t.topic, &["m7"]);
    let (last, _) = pop_with(&client, &t, &ordered(60_000, 3_000));
    assert_eq!(bodies(&last), ["m7"]);
    let file = c.store_root().join("config/consumerOrderInfo.json");
    let text = std::fs::read_to_string(&file).expect("consumerOrderInfo.json");
    assert!(
        text.contains(&format!("\"{}@{}\"", t.topic, t.group)),
        "{text}"
    );
}

fn peek(client: &RemotingClient, t: &PopTarget) -> RemotingCommand {
    let mut r = RemotingCommand::request(RequestCode::PeekMessage.code(), 0);
    r.ext_fields.insert("consumerGroup", t.group.clone());
    r.ext_fields.insert("topic", t.topic.clone());
    r.ext_fields.insert("queueId", "-1".to_string());
    r.ext_fields.insert("maxMsgNums", "32".to_string());
    call(client, &t.broker_addr, r)
}

/// Peeks until `body` is among what a pop would get (the send answer comes before the
/// message is in its consume queue).
fn wait_visible(client: &RemotingClient, t: &PopTarget, body: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !String::from_utf8_lossy(&peek(client, t).body).contains(body) {
        assert!(Instant::now() < deadline, "{body} never became visible");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn polling_num(client: &RemotingClient, t: &PopTarget) -> i64 {
    let mut r = RemotingCommand::request(RequestCode::PollingInfo.code(), 0);
    r.ext_fields.insert("consumerGroup", t.group.clone());
    r.ext_fields.insert("topic", t.topic.clone());
    r.ext_fields.insert("queueId", "-1".to_string());
    let answer = call(client, &t.broker_addr, r);
    assert_eq!(answer.code, 0, "{:?}", answer.remark);
    answer
        .ext_fields
        .get("pollingNum")
        .and_then(|n| n.parse().ok())
        .expect("pollingNum")
}

fn batch_ack(client: &RemotingClient, t: &PopTarget, body: Vec<u8>) -> RemotingCommand {
    let mut r = RemotingCommand::request(RequestCode::BatchAckMessage.code(), 0);
    r.body = body.into();
    call(client, &t.broker_addr, r)
}

#[test]
fn peek_polling_info_and_batch_ack() {
    let c = Cluster::start("");
    let t = target(&c, "PopPeek");
    let client = RemotingClient::new(ClientConfig::default());
    send(&c, &t.topic, &["p0", "p1", "p2"]);
    wait_visible(&client, &t, "p2");

    // A peek shows what a pop would get and moves nothing.
    for _ in 0..2 {
        let peeked = peek(&client, &t);
        assert_eq!(peeked.code, 0, "{:?}", peeked.remark);
        let text = String::from_utf8_lossy(&peeked.body).into_owned();
        assert!(["p0", "p1", "p2"].iter().all(|b| text.contains(b)));
    }
    let popped = pop_until(&client, &t, 3, Duration::from_secs(10));
    assert_eq!(bodies(&popped), ["p0", "p1", "p2"]);
    let peeked = peek(&client, &t);
    assert_eq!(peeked.code, ResponseCode::PullNotFound.code(), "handed out");

    // A pop that waits shows in POLLING_INFO.
    assert_eq!(polling_num(&client, &t), 0);
    let waiter = {
        let t = t.clone();
        std::thread::spawn(move || {
            let client = RemotingClient::new(ClientConfig::default());
            let waiting = PopOptions {
                invisible_ms: 60_000,
                poll_ms: 3_000,
                ..PopOptions::default()
            };
            pop_with(&client, &t, &waiting).0.len()
        })
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    while polling_num(&client, &t) == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(polling_num(&client, &t), 1);
    assert_eq!(waiter.join().expect("the waiting pop"), 0);
    assert_eq!(polling_num(&client, &t), 0);

    // One batch ack for p0 and p2: only p1 comes back.
    let info = ExtraInfo::parse(&popped[0].handle).expect("handle");
    let bits = [&popped[0], &popped[2]]
        .iter()
        .map(|m| (m.queue_offset - info.ck_start_offset) as usize)
        .collect();
    let body = BatchAckBody {
        broker_name: Some(info.broker_name.clone()),
        acks: vec![BatchAck::for_handle(&t.group, &t.topic, &info, bits)],
    };
    let answer = batch_ack(&client, &t, body.encode().into_bytes());
    assert_eq!(answer.code, 0, "{:?}", answer.remark);
    let back = pop_until(&client, &t, 1, Duration::from_secs(20));
    assert_eq!(bodies(&back), ["p1"]);
    assert_eq!(ack(&client, &t, &back[0]).code, 0);
    let more = pop_until(&client, &t, 1, Duration::from_secs(4));
    assert!(more.is_empty(), "{more:?}");

    let empty = batch_ack(&client, &t, b"{\"acks\":[]}".to_vec());
    assert_eq!(empty.code, ResponseCode::NoMessage.code());
    let garbage = batch_ack(&client, &t, b"{\"acks\":7".to_vec());
    assert_eq!(garbage.code, ResponseCode::MessageIllegal.code());
}

#[test]
fn held_checkpoints_take_their_acks_in_memory() {
    let c = Cluster::start("enablePopBufferMerge=true");
    let t = target(&c, "PopHeld");
    let client = RemotingClient::new(ClientConfig::default());
    send(&c, &t.topic, &["h0", "h1", "h2", "h3", "h4", "h5"]);
    // 8 s invisible: far enough from the revive time to be held (3 s + 1.5 s ahead).
    let invisible_ms = 8_000;
    let first = pop_until_invisible(&client, &t, 6, Duration::from_secs(10), invisible_ms);
    assert_eq!(bodies(&first), ["h0", "h1", "h2", "h3", "h4", "h5"]);
    let buffer = &c.broker().context().pop.buffer;
    assert!(buffer.held_count() > 0, "the checkpoint is held");
    for m in first.iter().step_by(2) {
        assert_eq!(ack(&client, &t, m).code, 0);
    }
    // The held checkpoint is written with its acks when due; the others come back.
    let back = pop_until_invisible(&client, &t, 3, Duration::from_secs(25), invisible_ms);
    assert_eq!(bodies(&back), ["h1", "h3", "h5"]);
    assert!(back.iter().all(|m| m.reconsume_times == 1), "{back:?}");
    for m in &back {
        assert_eq!(ack(&client, &t, m).code, 0);
    }
    // Acked in memory to the last: nothing held, nothing written, nothing comes back.
    assert_eq!(buffer.held_count(), 0);
    let more = pop_until_invisible(&client, &t, 1, Duration::from_secs(12), invisible_ms);
    assert!(more.is_empty(), "{more:?}");
}

#[test]
fn a_sql92_pop_hands_out_only_what_matches() {
    // POP compiles SQL92 whatever enablePropertyFilter says (as upstream).
    let c = Cluster::start("");
    let t = target(&c, "PopSql");
    let producer = Producer::new(c.producer_config(&unique("PG-sql")));
    for i in 0..6 {
        let m = Message::new(&t.topic, format!("s{i}").into_bytes())
            .with_property("a", &i.to_string())
            .expect("a property");
        let r = block_on(producer.send(&m));
        assert_eq!(r.map(|r| r.status).ok(), Some(SendStatus::SendOk));
    }
    let client = RemotingClient::new(ClientConfig::default());
    wait_visible(&client, &t, "s5");
    let sql = |exp: &str| PopOptions {
        invisible_ms: 60_000,
        expression: Some(("SQL92".into(), exp.into())),
        ..PopOptions::default()
    };
    let (got, answer) = pop_with(&client, &t, &sql("a >= 3"));
    assert_eq!(bodies(&got), ["s3", "s4", "s5"], "{:?}", answer.remark);
    // The ones skipped are behind the group now: nothing more matches.
    assert!(pop_with(&client, &t, &sql("a < 3")).0.is_empty());
    let request = pop_request_with(&t.group, &t.topic, &sql("a >>> 3"));
    let bad = call(&client, &t.broker_addr, request);
    assert_eq!(bad.code, ResponseCode::SubscriptionParseFailed.code());
}

#[test]
fn with_retry_topic_v2_messages_come_back_through_the_v2_topic() {
    let c = Cluster::start("enableRetryTopicV2=true");
    let t = target(&c, "PopV2");
    let client = RemotingClient::new(ClientConfig::default());
    send(&c, &t.topic, &["v0"]);
    let first = pop_until_invisible(&client, &t, 1, Duration::from_secs(10), 2_000);
    assert_eq!(bodies(&first), ["v0"]);
    let back = pop_until_invisible(&client, &t, 1, Duration::from_secs(20), 60_000);
    assert_eq!(bodies(&back), ["v0"]);
    let info = ExtraInfo::parse(&back[0].handle).expect("handle");
    assert_eq!(info.retry, ringmq_remoting::pop::RetryKind::RetryV2);
    let topics = &c.broker().context().topics;
    assert!(topics
        .select(&format!("%RETRY%{}+{}", t.group, t.topic))
        .is_some());
    assert!(topics
        .select(&format!("%RETRY%{}_{}", t.group, t.topic))
        .is_none());
    assert_eq!(ack(&client, &t, &back[0]).code, 0);
}

#[test]
fn pops_skip_a_queue_with_too_many_messages_in_flight() {
    let c = Cluster::start("enablePopMessageThreshold=true\npopInflightMessageThreshold=2");
    let t = target(&c, "PopInflight");
    let client = RemotingClient::new(ClientConfig::default());
    send(&c, &t.topic, &["i0", "i1", "i2", "i3", "i4"]);
    wait_visible(&client, &t, "i4");
    let long = PopOptions {
        invisible_ms: 60_000,
        ..PopOptions::default()
    };
    let (first, _) = pop_with(&client, &t, &long);
    assert_eq!(bodies(&first), ["i0", "i1", "i2", "i3", "i4"]);
    send(&c, &t.topic, &["i5"]);
    wait_visible(&client, &t, "i5");
    assert!(pop_with(&client, &t, &long).0.is_empty(), "5 in flight > 2");
    for m in &first[..3] {
        assert_eq!(ack(&client, &t, m).code, 0);
    }
    let (next, _) = pop_with(&client, &t, &long);
    assert_eq!(bodies(&next), ["i5"], "2 in flight is not above 2");
}

#[test]
fn a_shutdown_writes_held_checkpoints_with_their_acks() {
    let mut c = Cluster::start("enablePopBufferMerge=true");
    let t = target(&c, "PopHeldStop");
    let client = RemotingClient::new(ClientConfig::default());
    send(&c, &t.topic, &["d0", "d1", "d2"]);
    wait_visible(&client, &t, "d2");
    let invisible_ms = 8_000;
    let (first, _) = pop_with(
        &client,
        &t,
        &PopOptions {
            invisible_ms,
            ..PopOptions::default()
        },
    );
    assert_eq!(bodies(&first), ["d0", "d1", "d2"]);
    assert_eq!(c.broker().context().pop.buffer.held_count(), 1);
    assert_eq!(ack(&client, &t, &first[1]).code, 0);
    c.restart_broker();
    let t = PopTarget {
        broker_addr: c.broker_addr(),
        ..t
    };
    let client = RemotingClient::new(ClientConfig::default());
    // Written and committed at shutdown: not handed out again at once ...
    assert!(pop_with(
        &client,
        &t,
        &PopOptions {
            invisible_ms,
            ..PopOptions::default()
        }
    )
    .0
    .is_empty());
    // ... but the un-acked two come back after their invisible time, the acked one never.
    let back = pop_until_invisible(&client, &t, 2, Duration::from_secs(25), 60_000);
    assert_eq!(bodies(&back), ["d0", "d2"]);
    assert!(back.iter().all(|m| m.reconsume_times == 1), "{back:?}");
}

#[test]
fn hostile_pop_requests_get_clear_codes_and_the_broker_keeps_serving() {
    let c = Cluster::start("");
    let t = target(&c, "PopHostile");
    let client = RemotingClient::new(ClientConfig::default());
    send(&c, &t.topic, &["h0"]);
    wait_visible(&client, &t, "h0");
    let options = PopOptions {
        invisible_ms: 60_000,
        ..PopOptions::default()
    };
    let mut r = pop_request_with(&t.group, &t.topic, &options);
    r.ext_fields.insert("bornTime", i64::MIN.to_string());
    assert_eq!(
        call(&client, &t.broker_addr, r).code,
        ResponseCode::PollingTimeout.code()
    );
    let mut r = pop_request_with(&t.group, &t.topic, &options);
    r.ext_fields.insert("invisibleTime", "-1".to_string());
    assert_eq!(
        call(&client, &t.broker_addr, r).code,
        ResponseCode::InvalidParameter.code()
    );
    let mut r = pop_request_with(&t.group, &t.topic, &options);
    r.ext_fields.insert("invisibleTime", i64::MAX.to_string());
    r.ext_fields.insert("order", "true".to_string());
    let (popped, _) = {
        let answer = call(&client, &t.broker_addr, r);
        assert_eq!(answer.code, 0, "{:?}", answer.remark);
        (answer.body.len(), ())
    };
    assert!(popped > 0);
    // The orderly batch is invisible "forever": a pop finds the queue held, no overflow.
    assert!(pop_with(&client, &t, &ordered(1_000, 0)).0.is_empty());
    let edge = format!(
        "{{\"acks\":[{{\"b\":\"/w==\",\"c\":\"{}\",\"q\":0,\"rq\":999,\"so\":{},\"t\":\"{}\"}}]}}",
        t.group,
        i64::MAX,
        t.topic
    );
    assert_eq!(
        batch_ack(&client, &t, edge.into_bytes()).code,
        0,
        "nothing in range"
    );
    let m = Popped {
        body: String::new(),
        queue_offset: 0,
        reconsume_times: 0,
        handle: format!("0 {} 1000 999 0 {} 0 0", i64::MIN, t.broker_name),
    };
    let code = RequestCode::ChangeMessageInvisibletime;
    let changed = handle_call(&client, &t, code, &m, Some(-5));
    assert_eq!(changed.code, ResponseCode::InvalidParameter.code());
    let changed = handle_call(&client, &t, code, &m, Some(i64::MAX));
    assert_eq!(changed.code, 0, "{:?}", changed.remark);
    assert_eq!(peek(&client, &t).code, 0, "still serving");
}
