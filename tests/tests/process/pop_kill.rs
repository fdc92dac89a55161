//! POP state survives SIGKILL: messages popped and never acked, the broker killed before
//! their invisible time ends and restarted, come back to a pop after the restart. The
//! consumer offsets are persisted every 100 ms here, so the queue itself no longer hands
//! them out after the restart: they come back only as retry copies revived from the
//! checkpoints stored before the kill.

use super::*;
use ringmq_client::{ClientConfig, RemotingClient};
use ringmq_tests::pop::{pop_until, PopTarget};

#[test]
fn popped_messages_come_back_after_sigkill() {
    let mut c = ProcCluster::start("flushConsumerOffsetInterval=100");
    let topic = unique("T_pop_kill");
    c.create_topic(&topic, 2);
    let p = c.producer();
    let sent: BTreeSet<String> = (0..10).map(|i| format!("pop-kill-{i}")).collect();
    for body in &sent {
        block_on(p.send(&Message::new(&topic, body.clone()))).expect("send");
    }
    drop(p);
    let t = PopTarget {
        broker_addr: c.addr(),
        broker_name: c.broker_name.clone(),
        group: unique("CG_pop_kill"),
        topic: topic.clone(),
    };
    let client = RemotingClient::new(ClientConfig::default());
    let popped = pop_until(&client, &t, sent.len(), Duration::from_secs(10));
    assert_eq!(popped.len(), sent.len(), "{popped:?}");
    drop(client);
    // Past one timer checkpoint (1 s), well before the invisible time (3 s) ends.
    std::thread::sleep(Duration::from_millis(1_200));
    c.broker().sigkill();
    c.broker = None;
    c.wait_port_free();
    c.start_broker();
    let client = RemotingClient::new(ClientConfig::default());
    let mut seen = BTreeSet::new();
    let mut revived = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    while seen.len() < sent.len() && Instant::now() < deadline {
        for m in pop_until(&client, &t, 1, Duration::from_secs(2)) {
            revived.push(m.reconsume_times);
            seen.insert(m.body);
        }
    }
    assert_eq!(
        seen, sent,
        "every popped, un-acked message comes back after the kill"
    );
    assert!(
        revived.iter().all(|r| *r >= 1),
        "they came back revived (reconsume times {revived:?}), not from the queue again"
    );
    drop(client);
    c.stop_broker_cleanly();
}
