//! POP consumption against a real broker, driven with the Remoting codes directly:
//! messages popped and not acked come back after their invisible time through the POP
//! retry topic, acked ones never do, and a changed invisible time moves a message's return.

use std::time::{Duration, Instant};

use ringmq_client::{
    block_on, ClientConfig, Message, PopConsumer, PopConsumerConfig, PopStatus, Producer,
    RemotingClient, SendStatus,
};
use ringmq_remoting::{RemotingCommand, RequestCode, ResponseCode};
use ringmq_tests::pop::{
    handle_call, pop, pop_until, pop_waiting, PopTarget, Popped, INVISIBLE_MS,
};
use ringmq_tests::{unique, Cluster};

#[test]
fn unacked_pops_come_back_after_their_invisible_time_and_acked_ones_never() {
    let c = Cluster::start("");
    let t = PopTarget {
        broker_addr: c.broker_addr(),
        broker_name: c.broker_name.clone(),
        group: unique("CG-pop"),
        topic: unique("TopicPop"),
    };
    let mut config = c.producer_config(&unique("PG-pop"));
    config.client = ClientConfig::default();
    block_on({
        let topic = t.topic.clone();
        async move {
            let p = Producer::new(config);
            for i in 0..6 {
                let r = p
                    .send(&Message::new(&topic, format!("pop-{i}").into_bytes()))
                    .await;
                assert_eq!(r.map(|r| r.status).ok(), Some(SendStatus::SendOk));
            }
        }
    });
    let client = RemotingClient::new(ClientConfig::default());
    let first = pop_until(&client, &t, 6, Duration::from_secs(10));
    let mut bodies: Vec<&str> = first.iter().map(|m| m.body.as_str()).collect();
    bodies.sort();
    assert_eq!(
        bodies,
        ["pop-0", "pop-1", "pop-2", "pop-3", "pop-4", "pop-5"]
    );
    assert!(first.iter().all(|m| m.reconsume_times == 0));
    // Handed out once: an immediate second pop finds nothing.
    assert!(pop(&client, &t, INVISIBLE_MS).is_empty());

    let ack = |m: &Popped| {
        let r = handle_call(&client, &t, RequestCode::AckMessage, m, None);
        assert_eq!(r.code, 0, "ack: {:?}", r.remark);
    };
    let (acked, kept): (Vec<_>, Vec<_>) = first
        .iter()
        .partition(|m| m.body.ends_with(['0', '2', '4']));
    acked.into_iter().for_each(ack);
    let back = pop_until(&client, &t, kept.len(), Duration::from_secs(20));
    let mut back_bodies: Vec<&str> = back.iter().map(|m| m.body.as_str()).collect();
    back_bodies.sort();
    assert_eq!(
        back_bodies,
        ["pop-1", "pop-3", "pop-5"],
        "exactly the un-acked come back; {}",
        revive_state(&c)
    );
    assert!(back.iter().all(|m| m.reconsume_times == 1), "{back:?}");

    // Ack two of the returned through their POP_CK handles; give the third 1 s more.
    back[..2].iter().for_each(ack);
    let code = RequestCode::ChangeMessageInvisibletime;
    let changed = handle_call(&client, &t, code, &back[2], Some(1_000));
    assert_eq!(
        changed.code, 0,
        "change invisible time: {:?}",
        changed.remark
    );
    assert_eq!(changed.ext_fields.get("invisibleTime"), Some("1000"));
    let again = pop_until(&client, &t, 1, Duration::from_secs(20));
    assert_eq!(again.len(), 1, "{again:?}; {}", revive_state(&c));
    assert_eq!(again[0].body, back[2].body);
    assert_eq!(again[0].reconsume_times, 2);
    ack(&again[0]);
    let state = revive_state(&c);
    assert!(
        state.starts_with("now ") && state.contains("timer read behind"),
        "{state}"
    );

    // A malformed handle is refused with a reason.
    let bogus = Popped {
        handle: "1 2".into(),
        ..again[0].clone()
    };
    let refused = handle_call(&client, &t, RequestCode::AckMessage, &bogus, None);
    assert_eq!(
        refused.code,
        ResponseCode::InvalidParameter.code(),
        "{:?}",
        refused.remark
    );
}

/// What the broker's revive stage sees (for a failure message: why nothing came back).
fn revive_state(c: &Cluster) -> String {
    ringmq_broker::pop::revive::describe_revive_queues(c.broker().context())
}

#[test]
fn a_pop_that_finds_nothing_waits_for_a_message_and_notification_tells_of_one() {
    let c = Cluster::start("");
    let t = PopTarget {
        broker_addr: c.broker_addr(),
        broker_name: c.broker_name.clone(),
        group: unique("CG-poll"),
        topic: unique("TopicPoll"),
    };
    let producer = Producer::new(c.producer_config(&unique("PG-poll")));
    let send = |body: &str| {
        let r = block_on(producer.send(&Message::new(&t.topic, body.as_bytes().to_vec())));
        assert_eq!(r.map(|r| r.status).ok(), Some(SendStatus::SendOk));
    };
    send("first");
    let client = RemotingClient::new(ClientConfig::default());
    assert_eq!(pop_until(&client, &t, 1, Duration::from_secs(10)).len(), 1);
    assert!(!has_msg(&client, &t, 0), "nothing left to pop");

    // Nothing arrives: the pop waits its poll time, then answers POLLING_TIMEOUT.
    let started = Instant::now();
    assert!(pop_waiting(&client, &t, INVISIBLE_MS, 1_000).is_empty());
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );

    // A message arriving while a pop waits is handed to it at once.
    let waiter = {
        let t = t.clone();
        std::thread::spawn(move || {
            // A client is bound to the thread that made it.
            let client = RemotingClient::new(ClientConfig::default());
            let started = Instant::now();
            (
                pop_waiting(&client, &t, INVISIBLE_MS, 10_000),
                started.elapsed(),
            )
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    send("second");
    let (got, waited) = waiter.join().expect("waiting pop");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].body, "second");
    assert!(
        waited < Duration::from_secs(5),
        "woken by the arrival, not the timeout: {waited:?}"
    );

    send("third");
    // The consume queue trails the send acknowledgement: let the notification wait for it.
    assert!(
        has_msg(&client, &t, 3_000),
        "NOTIFICATION sees the new message"
    );
}

/// NOTIFICATION: whether a pop of `t` would find a message, waiting up to `poll_ms`.
fn has_msg(client: &RemotingClient, t: &PopTarget, poll_ms: i64) -> bool {
    let mut r = RemotingCommand::request(RequestCode::Notification.code(), 0);
    for (k, v) in [
        ("consumerGroup", t.group.clone()),
        ("topic", t.topic.clone()),
        ("queueId", "-1".to_string()),
        ("pollTime", poll_ms.to_string()),
        ("bornTime", ringmq_broker::persist::now_ms().to_string()),
    ] {
        r.ext_fields.insert(k, v);
    }
    let answer = block_on({
        let (client, broker) = (client.clone(), t.broker_addr.clone());
        async move { client.invoke(&broker, r, Duration::from_secs(10)).await }
    })
    .expect("notification answered");
    assert_eq!(answer.code, 0, "{:?}", answer.remark);
    answer.ext_fields.get("hasMsg") == Some("true")
}

#[test]
fn the_client_pop_consumer_and_bench_consumer_pop_and_ack() {
    let c = Cluster::start("");
    let topic = unique("TopicPopBench");
    let producer = Producer::new(c.producer_config(&unique("PG-popbench")));
    for i in 0..220 {
        let body = format!("bench-{i}").into_bytes();
        let r = block_on(producer.send(&Message::new(&topic, body)));
        assert_eq!(r.map(|r| r.status).ok(), Some(SendStatus::SendOk));
    }
    // ringmq's own POP consumer: pop 20, change one's invisible time, ack them all.
    let config = PopConsumerConfig {
        group: unique("CG-popclient"),
        namesrv_addrs: vec![c.namesrv_addr()],
        poll_time_ms: 1_000,
        ..PopConsumerConfig::default()
    };
    let popped = block_on({
        let topic = topic.clone();
        async move {
            let consumer = PopConsumer::new(config);
            let brokers = consumer.brokers(&topic).await.expect("route");
            let (name, addr) = brokers[0].clone();
            let mut got = Vec::new();
            while got.len() < 20 {
                let r = consumer
                    .pop(&name, &addr, &topic, 20 - got.len() as i32)
                    .await;
                let r = r.expect("pop");
                assert_ne!(r.status, PopStatus::PollingFull);
                got.extend(r.messages);
            }
            let mut moved = got[0].clone();
            moved.handle = consumer
                .change_invisible_time(&topic, &got[0], 30_000)
                .await
                .expect("change invisible time");
            consumer
                .ack(&topic, &moved)
                .await
                .expect("ack with the new handle");
            consumer.ack(&topic, &got[1]).await.expect("ack");
            consumer
                .batch_ack(&topic, &got[2..])
                .await
                .expect("one batch ack for the rest");
            got.len()
        }
    });
    assert_eq!(popped, 20);

    // `ringmq bench consumer --pop`: another group pops (and acks) 200 of them.
    let bench = std::process::Command::new(ringmq_tests::ringmq_bin())
        .args([
            "bench",
            "consumer",
            "-n",
            &c.namesrv_addr(),
            "-t",
            &topic,
            "-g",
            &unique("CG-popbench"),
            "--pop",
            "-m",
            "200",
            "-d",
            "60",
            "--quiet",
            "--json",
            "--no-broker-profile",
        ])
        .output()
        .expect("run ringmq bench");
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&bench.stdout),
        String::from_utf8_lossy(&bench.stderr)
    );
    assert!(bench.status.success(), "{out}");
    assert!(out.contains("\"failures\":0,"), "{out}");
    // The last pop's batch is counted whole, so a run may end a little past -m.
    let popped: u64 = out
        .split("\"messages\":")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no message count in {out}"));
    assert!((200..=220).contains(&popped), "{out}");
}
