//! The send pipeline as DESIGN.md draws it: each network core puts through its own ring
//! into the append stage and gets its completions back on its own ring, so every answer is
//! built on the core that owns the connection; a stage failure answers its put and the
//! broker keeps serving.

use ringmq_broker::Broker;

use super::{config, send, temp_dir, Client};

const SYSTEM_ERROR: i32 = 1;

/// Many connections (spread over both cores) pipelining sends: every send is answered
/// once, with consecutive queue offsets per queue, through the cores' rings.
#[test]
fn pipelined_sends_on_every_core_are_each_answered_once() {
    let dir = temp_dir("pipeline-many");
    let broker = Broker::start(config(&dir, None)).expect("broker starts");
    let mut clients: Vec<Client> = (0..6)
        .map(|_| Client::connect(broker.local_addr()))
        .collect();
    const PER_CLIENT: i32 = 200;
    for (n, c) in clients.iter_mut().enumerate() {
        for i in 0..PER_CLIENT {
            let mut req = send("TopicPipeline", n as i32 % 2, "WAIT\u{1}true\u{2}", b"p");
            req.opaque = i + 1;
            c.write(&req);
        }
    }
    let mut offsets = [Vec::new(), Vec::new()];
    for (n, c) in clients.iter_mut().enumerate() {
        let mut seen = vec![false; PER_CLIENT as usize];
        for _ in 0..PER_CLIENT {
            let r = c
                .next_frame(std::time::Duration::from_secs(10))
                .expect("an answer for every send");
            assert_eq!(r.code, 0, "{:?}", r.remark);
            let slot = &mut seen[(r.opaque - 1) as usize];
            assert!(!*slot, "opaque {} answered twice", r.opaque);
            *slot = true;
            let off: i64 = r.ext_fields.get("queueOffset").unwrap().parse().unwrap();
            offsets[n % 2].push(off);
        }
    }
    for q in &mut offsets {
        q.sort_unstable();
        assert_eq!(*q, (0..q.len() as i64).collect::<Vec<_>>());
    }
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A panic in the append stage's per-message code (injected for one topic) answers that
/// send SYSTEM_ERROR; sends to other topics, and later ones, are stored as before.
#[test]
fn a_panic_in_the_append_stage_answers_its_send_and_the_broker_keeps_serving() {
    let dir = temp_dir("pipeline-panic");
    let broker = Broker::start(config(&dir, None)).expect("broker starts");
    let mut c = Client::connect(broker.local_addr());
    ringmq_store::fault::inject_append_panic("TopicPanicky");
    let ok = c.call(send("TopicSteady", 0, "WAIT\u{1}true\u{2}", b"before"));
    assert_eq!(ok.code, 0, "{:?}", ok.remark);
    for _ in 0..3 {
        let r = c.call(send("TopicPanicky", 0, "WAIT\u{1}true\u{2}", b"boom"));
        assert_eq!(r.code, SYSTEM_ERROR, "{:?}", r.remark);
    }
    let after = c.call(send("TopicSteady", 0, "WAIT\u{1}true\u{2}", b"after"));
    assert_eq!(after.code, 0, "{:?}", after.remark);
    assert_eq!(after.ext_fields.get("queueOffset"), Some("1"));
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
