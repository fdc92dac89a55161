//! POP consumption against a real broker, driven with the Remoting codes directly:
//! messages popped and not acked come back after their invisible time through the POP
//! retry topic, acked ones never do, and a changed invisible time moves a message's return.

use std::time::Duration;

use ringmq_client::{block_on, ClientConfig, Message, Producer, RemotingClient, SendStatus};
use ringmq_remoting::{RequestCode, ResponseCode};
use ringmq_tests::pop::{handle_call, pop, pop_until, PopTarget, Popped, INVISIBLE_MS};
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
        "exactly the un-acked come back"
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
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].body, back[2].body);
    assert_eq!(again[0].reconsume_times, 2);
    ack(&again[0]);

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
