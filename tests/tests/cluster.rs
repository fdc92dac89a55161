//! In-process integration tests: a namesrv and a broker started in this test process
//! ([`Cluster`]) exercised through ringmq's own client (`ringmq_client`), one feature per
//! test (issue 6 item 8): registration and routes, send/pull fidelity, ordering by key,
//! tag and SQL92 filters, long polling, offsets, push-consumer rebalance, retry and DLQ,
//! delay levels, and the admin calls.
//!
//! Each test starts its own cluster on ephemeral 127.0.0.1 ports with its own store
//! directory, so tests are independent and can run in parallel. Client objects are bound
//! to the thread that created them: tests drive them with `block_on` on the test thread,
//! and push consumers live on their own runtime thread (`Blocking`). Every wait has a
//! deadline; effects the protocol makes asynchronous (consume queue built after the send
//! is acknowledged, index built, routes registered) are polled with bounded retries.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ringmq_client::message::{decode_records, new_uniq_key};
use ringmq_client::{
    block_on, Admin, Blocking, ClientConfig, ClientError, ConsumeResult, Message, MessageExt,
    MessageQueue, Producer, PullConsumer, PullOptions, PullStatus, PushConsumer,
    PushConsumerConfig, QueueSelector, RemotingClient, SendStatus, TopicSpec,
};
use ringmq_remoting::RemotingCommand;
use ringmq_tests::{pull_all_from, route_brokers, unique, wait_until, Cluster};

const SHORT: Duration = Duration::from_millis(50);

// ---------------------------------------------------------------------------------------
// helpers

fn admin(c: &Cluster) -> Admin {
    Admin::new(
        RemotingClient::new(ClientConfig::default()),
        vec![c.namesrv_addr()],
    )
}

/// Creates `topic` with `queues` read/write queues on the broker and waits until the
/// namesrv serves its route (the broker re-registers after a topic change).
fn create_topic(c: &Cluster, topic: &str, queues: i32) {
    let a = admin(c);
    let addr = c.broker_addr();
    let spec = TopicSpec::new(topic).with_queues(queues);
    block_on(a.create_topic(&addr, &spec)).unwrap_or_else(|e| panic!("create {topic}: {e}"));
    let ns = c.namesrv_addr();
    wait_until(
        &format!("route of {topic}"),
        Duration::from_secs(15),
        SHORT,
        || route_brokers(&ns, topic),
    );
}

fn producer(c: &Cluster) -> Producer {
    let cfg = c.producer_config(&unique("PG"));
    block_on(async move { Producer::new(cfg) })
}

fn pull_consumer(c: &Cluster, group: &str) -> PullConsumer {
    let cfg = c.pull_config(group);
    block_on(async move { PullConsumer::new(cfg) })
}

fn mq(c: &Cluster, topic: &str, queue_id: i32) -> MessageQueue {
    MessageQueue::new(topic, c.broker_name.clone(), queue_id)
}

/// What a raw `PULL_MESSAGE` answered: the broker's own filtering, no client re-check.
struct RawPull {
    code: i32,
    next_begin_offset: i64,
    max_offset: i64,
    messages: Vec<MessageExt>,
    remark: String,
}

/// `PULL_MESSAGE` (11) with the subscription in the request (no heartbeat needed).
#[allow(clippy::too_many_arguments)]
async fn raw_pull(
    client: &RemotingClient,
    addr: &str,
    group: &str,
    topic: &str,
    queue_id: i32,
    offset: i64,
    expr: &str,
    expr_type: &str,
    suspend_ms: i64,
) -> Result<RawPull, ClientError> {
    let mut sys_flag = 0x4; // subscription in the request
    if suspend_ms > 0 {
        sys_flag |= 0x2;
    }
    let req = RemotingCommand::request(11, 0)
        .with_ext("consumerGroup", group)
        .with_ext("topic", topic)
        .with_ext("queueId", queue_id.to_string())
        .with_ext("queueOffset", offset.to_string())
        .with_ext("maxMsgNums", "32")
        .with_ext("sysFlag", sys_flag.to_string())
        .with_ext("commitOffset", "0")
        .with_ext("suspendTimeoutMillis", suspend_ms.to_string())
        .with_ext("subscription", expr)
        .with_ext("subVersion", "0")
        .with_ext("expressionType", expr_type);
    let timeout = Duration::from_millis(suspend_ms.max(0) as u64 + 5_000);
    let resp = client.invoke(addr, req, timeout).await?;
    let num = |k: &str| {
        resp.ext_fields
            .get(k)
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(-1)
    };
    let messages = if resp.code == 0 {
        decode_records(&resp.body, "")
    } else {
        Vec::new()
    };
    Ok(RawPull {
        code: resp.code,
        next_begin_offset: num("nextBeginOffset"),
        max_offset: num("maxOffset"),
        remark: resp.remark.clone().unwrap_or_default(),
        messages,
    })
}

/// Pulls every queue in `queue_ids` of `topic` until `expected` messages are in hand.
fn pull_all(
    c: &Cluster,
    topic: &str,
    queue_ids: &[i32],
    expected: usize,
    timeout: Duration,
) -> Vec<MessageExt> {
    pull_all_from(
        &c.broker_addr(),
        &c.broker_name,
        topic,
        queue_ids,
        expected,
        timeout,
    )
}

/// A push consumer on its own runtime thread, recording what its listener saw.
struct PushHandle {
    rt: Blocking<RefCell<Option<PushConsumer>>>,
}

/// One delivery to a listener.
#[derive(Clone, Debug)]
struct Delivery {
    consumer: usize,
    msg_id: String,
    topic: String,
    reconsume_times: i32,
    body: Vec<u8>,
    props: BTreeMap<String, String>,
    at: Instant,
}

type Log = Arc<Mutex<Vec<Delivery>>>;

/// Decides a batch's fate from its first message's reconsume count.
type Verdict = fn(i32) -> ConsumeResult;

impl PushHandle {
    fn start(index: usize, cfg: PushConsumerConfig, log: Log, verdict: Verdict) -> PushHandle {
        let rt = Blocking::start(&format!("push-{index}"), || RefCell::new(None))
            .expect("consumer runtime thread");
        rt.call(move |slot: Rc<RefCell<Option<PushConsumer>>>| async move {
            let listener: ringmq_client::MessageListener = Rc::new(move |msgs: &[MessageExt]| {
                let mut l = log.lock().unwrap();
                for m in msgs {
                    l.push(Delivery {
                        consumer: index,
                        msg_id: m.msg_id.clone(),
                        topic: m.topic.clone(),
                        reconsume_times: m.reconsume_times,
                        body: m.body.to_vec(),
                        props: m
                            .properties
                            .iter()
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect(),
                        at: Instant::now(),
                    });
                }
                verdict(msgs.first().map(|m| m.reconsume_times).unwrap_or(0))
            });
            let consumer = PushConsumer::start(cfg, listener).await?;
            *slot.borrow_mut() = Some(consumer);
            Ok(())
        })
        .expect("push consumer starts");
        PushHandle { rt }
    }

    fn assigned(&self) -> Vec<MessageQueue> {
        self.rt
            .run(|slot: Rc<RefCell<Option<PushConsumer>>>| async move {
                slot.borrow()
                    .as_ref()
                    .map(|c| c.assigned_queues())
                    .unwrap_or_default()
            })
            .expect("consumer thread alive")
    }

    fn client_id(&self) -> String {
        self.rt
            .run(|slot: Rc<RefCell<Option<PushConsumer>>>| async move {
                slot.borrow()
                    .as_ref()
                    .map(|c| c.client_id().to_string())
                    .unwrap_or_default()
            })
            .expect("consumer thread alive")
    }

    fn shutdown(self) {
        let _ = self
            .rt
            .run(|slot: Rc<RefCell<Option<PushConsumer>>>| async move {
                let c = slot.borrow_mut().take();
                if let Some(c) = c {
                    c.shutdown().await;
                }
            });
    }
}

fn always_success(_: i32) -> ConsumeResult {
    ConsumeResult::Success
}

fn later_first_time(reconsume_times: i32) -> ConsumeResult {
    if reconsume_times == 0 {
        ConsumeResult::Later
    } else {
        ConsumeResult::Success
    }
}

fn always_later(_: i32) -> ConsumeResult {
    ConsumeResult::Later
}

/// Sends a request on `client` and returns the response.
fn invoke(client: &RemotingClient, addr: &str, req: RemotingCommand) -> RemotingCommand {
    block_on(client.invoke(addr, req, Duration::from_secs(5)))
        .unwrap_or_else(|e| panic!("request to {addr}: {e}"))
}

// ---------------------------------------------------------------------------------------
// registration and routes

/// Regression: the broker once registered on a fresh connection each time and closed it,
/// and the namesrv dropped a broker's routes when its registration connection closed, so
/// routes vanished a moment after they appeared. Routes must stay for longer than that,
/// also after a topic change triggers a re-registration.
#[test]
fn broker_registers_and_routes_stay_after_topic_changes() {
    // Re-register every second (ringmq's floor) so the waits below span several
    // periodic registrations too.
    let c = Cluster::start("registerNameServerPeriod=1000");
    let ns = c.namesrv_addr();
    assert_eq!(
        route_brokers(&ns, "TBW102").expect("TBW102 route"),
        vec![c.broker_name.clone()]
    );

    // An auto-created topic (first send through the TBW102 template).
    let p = producer(&c);
    let auto = unique("T_auto");
    let r = block_on(p.send(&Message::new(&auto, "hello"))).expect("send auto-creates");
    assert_eq!(r.status, SendStatus::SendOk);
    wait_until(
        "route of the auto-created topic",
        Duration::from_secs(15),
        SHORT,
        || route_brokers(&ns, &auto),
    );

    // Still there well after any connection the registration used could have closed.
    std::thread::sleep(Duration::from_millis(2_500));
    for t in ["TBW102", auto.as_str()] {
        assert_eq!(
            route_brokers(&ns, t).unwrap_or_else(|e| panic!("route of {t} lost: {e}")),
            vec![c.broker_name.clone()]
        );
    }

    // A topic change (admin create) re-registers; nothing registered before may vanish.
    let created = unique("T_created");
    create_topic(&c, &created, 3);
    std::thread::sleep(Duration::from_millis(2_500));
    for t in ["TBW102", auto.as_str(), created.as_str()] {
        route_brokers(&ns, t).unwrap_or_else(|e| panic!("route of {t} lost: {e}"));
    }
    let a = admin(&c);
    let route = block_on(a.topic_route(&created)).expect("route");
    let q = &route.queue_datas[0];
    assert_eq!((q.read_queue_nums, q.write_queue_nums), (3, 3));
    let info = block_on(a.cluster_info()).expect("cluster info");
    assert!(
        info.cluster_addr_table
            .get(&c.cluster_name)
            .is_some_and(|names| names.contains(&c.broker_name)),
        "cluster {} lists broker {}",
        c.cluster_name,
        c.broker_name
    );
}

// ---------------------------------------------------------------------------------------
// send and pull

struct Sent {
    body: Vec<u8>,
    tags: String,
    keys: String,
    color: String,
    offset_msg_id: Option<String>,
    position: Option<(i32, i64)>,
}

#[test]
fn sync_oneway_and_batch_sends_pull_back_identical() {
    sends_pull_back_identical("");
}

/// The same in direct write mode, where a network core appends into the write ring
/// inline and the flush worker writes it out with O_DIRECT.
#[test]
fn sync_oneway_and_batch_sends_pull_back_identical_in_direct_write_mode() {
    sends_pull_back_identical("ringmq.writeMode=direct\n");
}

fn sends_pull_back_identical(extra_conf: &str) {
    let c = Cluster::start(extra_conf);
    let topic = unique("T_ident");
    create_topic(&c, &topic, 2);
    let p = producer(&c);
    let mut sent: HashMap<String, Sent> = HashMap::new();

    let message = |i: usize, body: &[u8]| {
        Message::new(&topic, body.to_vec())
            .with_tags(&format!("tag{i}"))
            .and_then(|m| m.with_keys(&[&format!("key{i}"), "common"]))
            .and_then(|m| m.with_property("color", &format!("c{i}")))
            .expect("valid properties")
    };
    let expect = |i: usize, body: &[u8]| Sent {
        body: body.to_vec(),
        tags: format!("tag{i}"),
        keys: format!("key{i} common"),
        color: format!("c{i}"),
        offset_msg_id: None,
        position: None,
    };

    // Sync: every byte value in the bodies, one body big enough to be compressed.
    for i in 0..6 {
        let body: Vec<u8> = if i == 5 {
            (0..20_000u32).map(|x| (x % 7) as u8).collect()
        } else {
            (0..=255u8).cycle().skip(i).take(300 + i).collect()
        };
        let r = block_on(p.send(&message(i, &body))).expect("sync send");
        assert_eq!(r.status, SendStatus::SendOk);
        let mut e = expect(i, &body);
        e.offset_msg_id = Some(r.offset_msg_id.clone());
        e.position = Some((r.queue.queue_id, r.queue_offset));
        sent.insert(r.msg_id.clone(), e);
    }
    // Oneway: the id is chosen here so the pulled copy can be matched.
    for i in 10..13 {
        let body = format!("oneway body {i}").into_bytes();
        let id = new_uniq_key();
        let m = message(i, &body)
            .with_property("UNIQ_KEY", &id)
            .expect("uniq key");
        block_on(p.send_oneway(&m)).expect("oneway send");
        sent.insert(id, expect(i, &body));
    }
    // Batch.
    let batch: Vec<(usize, Vec<u8>)> = (20..24)
        .map(|i| (i, format!("batch body {i}").into_bytes()))
        .collect();
    let msgs: Vec<Message> = batch.iter().map(|(i, b)| message(*i, b)).collect();
    let r = block_on(p.send_batch(&msgs)).expect("batch send");
    assert_eq!(r.status, SendStatus::SendOk);
    let ids: Vec<&str> = r.msg_id.split(',').collect();
    let offset_ids: Vec<&str> = r.offset_msg_id.split(',').collect();
    assert_eq!(ids.len(), 4, "one id per batch member: {}", r.msg_id);
    assert_eq!(offset_ids.len(), 4, "one offsetMsgId per member");
    for (k, (i, body)) in batch.iter().enumerate() {
        let mut e = expect(*i, body);
        e.offset_msg_id = Some(offset_ids[k].to_string());
        e.position = Some((r.queue.queue_id, r.queue_offset + k as i64));
        sent.insert(ids[k].to_string(), e);
    }

    let got = pull_all(&c, &topic, &[0, 1], sent.len(), Duration::from_secs(15));
    assert_eq!(got.len(), sent.len(), "no message lost or duplicated");
    let mut seen = BTreeSet::new();
    for m in &got {
        let e = sent
            .get(&m.msg_id)
            .unwrap_or_else(|| panic!("unexpected message {}", m.msg_id));
        assert!(seen.insert(m.msg_id.clone()), "{} pulled twice", m.msg_id);
        assert_eq!(m.topic, topic);
        assert_eq!(&m.body[..], &e.body[..], "body of {}", m.msg_id);
        assert_eq!(m.tags(), Some(e.tags.as_str()), "tags of {}", m.msg_id);
        assert_eq!(m.property("KEYS"), Some(e.keys.as_str()));
        assert_eq!(m.property("color"), Some(e.color.as_str()));
        assert_eq!(m.property("UNIQ_KEY"), Some(m.msg_id.as_str()));
        if let Some(id) = &e.offset_msg_id {
            assert_eq!(&m.offset_msg_id, id, "offsetMsgId of {}", m.msg_id);
        }
        if let Some(pos) = e.position {
            assert_eq!(
                (m.queue_id, m.queue_offset),
                pos,
                "position of {}",
                m.msg_id
            );
        }
    }
}

#[test]
fn sharding_key_keeps_order_per_key_over_1000_messages() {
    let c = Cluster::start("");
    let topic = unique("T_order");
    create_topic(&c, &topic, 4);
    let p = producer(&c);
    const N: usize = 1_000;
    const KEYS: usize = 10;
    block_on(async {
        for seq in 0..N {
            let key = format!("order-{}", seq % KEYS);
            let m = Message::new(&topic, format!("{key}:{seq}"))
                .with_keys(&[&key])
                .expect("keys");
            let r = p
                .send_with(&m, &QueueSelector::ByKey(key))
                .await
                .unwrap_or_else(|e| panic!("send {seq}: {e}"));
            assert_eq!(r.status, SendStatus::SendOk);
        }
    });
    let got = pull_all(&c, &topic, &[0, 1, 2, 3], N, Duration::from_secs(30));
    assert_eq!(got.len(), N);
    // (queue, offset)-ordered: per key one queue and increasing sequence numbers.
    let mut per_key: BTreeMap<String, (i32, Vec<usize>)> = BTreeMap::new();
    for m in &got {
        let text = String::from_utf8(m.body.to_vec()).expect("utf8 body");
        let (key, seq) = text.split_once(':').expect("key:seq");
        let seq: usize = seq.parse().expect("seq");
        let e = per_key
            .entry(key.to_string())
            .or_insert((m.queue_id, Vec::new()));
        assert_eq!(e.0, m.queue_id, "key {key} spread over queues");
        e.1.push(seq);
    }
    assert_eq!(per_key.len(), KEYS);
    for (key, (_, seqs)) in &per_key {
        assert_eq!(seqs.len(), N / KEYS, "messages of {key}");
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "{key} out of order: {seqs:?}"
        );
    }
    let queues: BTreeSet<i32> = per_key.values().map(|(q, _)| *q).collect();
    assert!(
        queues.len() >= 2,
        "keys should spread over queues: {queues:?}"
    );
}

// ---------------------------------------------------------------------------------------
// filters

/// Pulls queue 0 of `topic` from 0 to its end with a raw pull (broker-side filtering only).
fn raw_pull_to_end(
    c: &Cluster,
    topic: &str,
    expr: &str,
    expr_type: &str,
    total: i64,
) -> Vec<MessageExt> {
    let client = block_on(async { RemotingClient::new(ClientConfig::default()) });
    let addr = c.broker_addr();
    let group = unique("CG_filter");
    // Wait for all `total` entries to be in the consume queue first.
    wait_until(
        "consume queue to hold every message",
        Duration::from_secs(15),
        SHORT,
        || {
            let r = block_on(raw_pull(&client, &addr, &group, topic, 0, 0, "*", "TAG", 0))
                .map_err(|e| e.to_string())?;
            if r.max_offset >= total {
                Ok(())
            } else {
                Err(format!("max offset {}", r.max_offset))
            }
        },
    );
    let mut out = Vec::new();
    let mut offset = 0;
    for _ in 0..(total + 10) {
        if offset >= total {
            break;
        }
        let r = block_on(raw_pull(
            &client, &addr, &group, topic, 0, offset, expr, expr_type, 0,
        ))
        .expect("pull");
        assert!(
            [0, 19, 20].contains(&r.code),
            "pull with {expr_type} {expr:?} answered {} {}",
            r.code,
            r.remark
        );
        out.extend(r.messages);
        assert!(r.next_begin_offset > offset || r.code == 19, "no progress");
        offset = r.next_begin_offset;
    }
    assert!(
        offset >= total,
        "pull did not reach the end ({offset}/{total})"
    );
    out
}

#[test]
fn tag_filter_on_pull_and_sql92_refused_when_disabled() {
    let c = Cluster::start("");
    let topic = unique("T_tags");
    create_topic(&c, &topic, 1);
    let p = producer(&c);
    let mut expected = Vec::new();
    block_on(async {
        for i in 0..30 {
            let tag = ["A", "B", "C"][i % 3];
            let mut m = Message::new(&topic, format!("m{i}"));
            if i != 7 {
                m = m.with_tags(tag).unwrap();
                if tag != "B" {
                    expected.push(format!("m{i}"));
                }
            }
            let q = QueueSelector::Queue(mq(&c, &topic, 0));
            p.send_with(&m, &q).await.expect("send");
        }
    });
    let got = raw_pull_to_end(&c, &topic, "A || C", "TAG", 30);
    let bodies: Vec<String> = got
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    assert_eq!(bodies, expected, "broker-side tag filter");

    // SQL92 while enablePropertyFilter=false: SYSTEM_ERROR, as upstream.
    let client = block_on(async { RemotingClient::new(ClientConfig::default()) });
    let r = block_on(raw_pull(
        &client,
        &c.broker_addr(),
        "CG_sql_off",
        &topic,
        0,
        0,
        "a > 1",
        "SQL92",
        0,
    ))
    .expect("answer");
    assert_eq!(
        r.code, 1,
        "SQL92 with the property filter off: {}",
        r.remark
    );
}

#[test]
fn sql92_filter_on_pull() {
    let c = Cluster::start("enablePropertyFilter=true");
    let topic = unique("T_sql");
    create_topic(&c, &topic, 1);
    let p = producer(&c);
    block_on(async {
        for i in 0..20 {
            let m = Message::new(&topic, format!("m{i}"))
                .with_tags(if i % 2 == 0 { "even" } else { "odd" })
                .and_then(|m| m.with_property("a", &i.to_string()))
                .and_then(|m| m.with_property("b", if i % 4 == 0 { "x" } else { "y" }))
                .unwrap();
            let q = QueueSelector::Queue(mq(&c, &topic, 0));
            p.send_with(&m, &q).await.expect("send");
        }
    });
    let cases: [(&str, Vec<usize>); 3] = [
        ("a >= 5 AND a < 15", (5..15).collect()),
        ("b = 'x' AND a > 3", vec![4, 8, 12, 16]),
        ("TAGS = 'odd' AND a BETWEEN 10 AND 13", vec![11, 13]),
    ];
    for (expr, want) in cases {
        let got = raw_pull_to_end(&c, &topic, expr, "SQL92", 20);
        let bodies: Vec<String> = got
            .iter()
            .map(|m| String::from_utf8_lossy(&m.body).into_owned())
            .collect();
        let want: Vec<String> = want.iter().map(|i| format!("m{i}")).collect();
        assert_eq!(bodies, want, "SQL92 {expr}");
    }
}

// ---------------------------------------------------------------------------------------
// long polling

#[test]
fn long_poll_wakes_on_arrival_and_times_out_with_not_found() {
    let c = Cluster::start("");
    let topic = unique("T_lp");
    create_topic(&c, &topic, 1);
    let addr = c.broker_addr();

    // A pull parked before the send returns right after the message is stored.
    let (t, a) = (topic.clone(), addr.clone());
    let puller = std::thread::spawn(move || {
        let client = block_on(async { RemotingClient::new(ClientConfig::default()) });
        let r = block_on(raw_pull(&client, &a, "CG_lp", &t, 0, 0, "*", "TAG", 10_000));
        (r.map(|r| (r.code, r.messages)), Instant::now())
    });
    std::thread::sleep(Duration::from_millis(1_000));
    let p = producer(&c);
    let sent_at = Instant::now();
    let r = block_on(p.send_with(
        &Message::new(&topic, "wake up"),
        &QueueSelector::Queue(mq(&c, &topic, 0)),
    ))
    .expect("send");
    let (answer, answered_at) = puller.join().expect("puller thread");
    let (code, msgs) = answer.expect("pull answered");
    assert_eq!(code, 0, "held pull finds the message");
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].msg_id, r.msg_id);
    let lag = answered_at.saturating_duration_since(sent_at);
    assert!(
        answered_at >= sent_at,
        "the pull was answered before the send: it was not held"
    );
    assert!(
        lag < Duration::from_millis(1_000),
        "held pull woke {lag:?} after the send"
    );

    // A held pull filtering on TagA ignores a TagB arrival and wakes for TagA.
    let (t, a) = (topic.clone(), addr.clone());
    let puller = std::thread::spawn(move || {
        let client = block_on(async { RemotingClient::new(ClientConfig::default()) });
        let r = block_on(raw_pull(
            &client, &a, "CG_lp", &t, 0, 1, "TagA", "TAG", 10_000,
        ));
        (r.map(|r| (r.code, r.messages)), Instant::now())
    });
    std::thread::sleep(Duration::from_millis(1_000));
    let q0 = QueueSelector::Queue(mq(&c, &topic, 0));
    block_on(
        p.send_with(
            &Message::new(&topic, "not for you")
                .with_tags("TagB")
                .unwrap(),
            &q0,
        ),
    )
    .expect("send TagB");
    std::thread::sleep(Duration::from_millis(1_000));
    assert!(
        !puller.is_finished(),
        "a held TagA pull was answered by a TagB arrival"
    );
    let sent_at = Instant::now();
    let r = block_on(p.send_with(
        &Message::new(&topic, "for you").with_tags("TagA").unwrap(),
        &q0,
    ))
    .expect("send TagA");
    let (answer, answered_at) = puller.join().expect("puller thread");
    let (code, msgs) = answer.expect("pull answered");
    assert_eq!(code, 0, "held TagA pull finds the TagA message");
    let ids: Vec<&str> = msgs.iter().map(|m| m.msg_id.as_str()).collect();
    assert_eq!(ids, vec![r.msg_id.as_str()], "only the TagA message");
    let lag = answered_at.saturating_duration_since(sent_at);
    assert!(
        lag < Duration::from_millis(1_000),
        "woke {lag:?} after the TagA send"
    );

    // Nothing arrives: PULL_NOT_FOUND after the suspend timeout (upstream checks held
    // requests every 5 s, so allow that much beyond the timeout).
    let client = block_on(async { RemotingClient::new(ClientConfig::default()) });
    let start = Instant::now();
    let r = block_on(raw_pull(
        &client, &addr, "CG_lp", &topic, 0, 3, "*", "TAG", 2_000,
    ))
    .expect("answer");
    let took = start.elapsed();
    assert_eq!(r.code, 19, "PULL_NOT_FOUND after the hold: {}", r.remark);
    assert_eq!(r.next_begin_offset, 3);
    assert!(
        took >= Duration::from_millis(1_900),
        "answered after {took:?}, before the 2 s suspend timeout"
    );
    assert!(
        took <= Duration::from_millis(7_500),
        "answered after {took:?}"
    );
}

// ---------------------------------------------------------------------------------------
// offsets

#[test]
fn offsets_commit_query_piggyback_and_survive_restart() {
    let mut c = Cluster::start("");
    let topic = unique("T_off");
    create_topic(&c, &topic, 1);
    let p = producer(&c);
    block_on(async {
        for i in 0..10 {
            p.send_with(
                &Message::new(&topic, format!("m{i}")),
                &QueueSelector::Queue(mq(&c, &topic, 0)),
            )
            .await
            .expect("send");
        }
    });
    let group = unique("CG_off");
    let consumer = pull_consumer(&c, &group);
    let q = mq(&c, &topic, 0);
    assert_eq!(
        block_on(consumer.query_offset(&q)).expect("query"),
        None,
        "fresh group has no offset"
    );
    block_on(consumer.update_offset(&q, 3, false)).expect("commit 3");
    assert_eq!(block_on(consumer.query_offset(&q)).unwrap(), Some(3));

    // Commit piggybacked on a pull (PullSysFlag bit 0).
    let opts = PullOptions {
        suspend_ms: None,
        commit_offset: Some(5),
        timeout_ms: 5_000,
        ..PullOptions::default()
    };
    wait_until("pull with commit", Duration::from_secs(10), SHORT, || {
        block_on(consumer.pull_with(&q, 5, &opts))
            .map_err(|e| e.to_string())
            .and_then(|r| match r.status {
                PullStatus::Found => Ok(()),
                s => Err(format!("{s:?}")),
            })
    });
    assert_eq!(block_on(consumer.query_offset(&q)).unwrap(), Some(5));

    // Oneway commit, as push consumers do it: visible shortly after.
    block_on(consumer.update_offset(&q, 7, true)).expect("oneway commit");
    wait_until(
        "oneway commit applied",
        Duration::from_secs(5),
        SHORT,
        || match block_on(consumer.query_offset(&q)) {
            Ok(Some(7)) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    let a = admin(&c);
    let stats = block_on(a.consume_stats(&c.broker_addr(), &group, Some(&topic))).expect("stats");
    let o = stats.offsets.get(&q).expect("queue in consume stats");
    assert_eq!((o.broker_offset, o.consumer_offset), (10, 7));
    assert_eq!(stats.diff_total(), 3);

    // Committed offsets are persisted at shutdown and loaded at start.
    c.restart_broker();
    let consumer = pull_consumer(&c, &group);
    wait_until(
        "offset after a restart",
        Duration::from_secs(10),
        SHORT,
        || match block_on(consumer.query_offset(&q)) {
            Ok(Some(7)) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
}

// ---------------------------------------------------------------------------------------
// push consumers

#[test]
fn push_consumers_rebalance_and_consume_each_message_once() {
    let c = Cluster::start("");
    let topic = unique("T_push");
    create_topic(&c, &topic, 8);
    let group = unique("CG_push");
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let c1 = PushHandle::start(
        1,
        c.push_config(&group, &topic, "*"),
        log.clone(),
        always_success,
    );
    let c2 = PushHandle::start(
        2,
        c.push_config(&group, &topic, "*"),
        log.clone(),
        always_success,
    );
    let topic_queues = |h: &PushHandle| -> Vec<i32> {
        h.assigned()
            .into_iter()
            .filter(|q| q.topic == topic)
            .map(|q| q.queue_id)
            .collect()
    };
    let (a1, a2) = wait_until(
        "average allocation over two members",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || {
            let (a1, a2) = (topic_queues(&c1), topic_queues(&c2));
            if a1.len() == 4 && a2.len() == 4 {
                Ok((a1, a2))
            } else {
                Err(format!("c1 {a1:?} c2 {a2:?}"))
            }
        },
    );
    // Average allocation: contiguous halves in client-id order.
    let (first, second) = if c1.client_id() < c2.client_id() {
        (a1, a2)
    } else {
        (a2, a1)
    };
    assert_eq!(first, vec![0, 1, 2, 3]);
    assert_eq!(second, vec![4, 5, 6, 7]);

    let p = producer(&c);
    const N: usize = 200;
    let mut sent = BTreeSet::new();
    block_on(async {
        for i in 0..N {
            let r = p
                .send(&Message::new(&topic, format!("m{i}")))
                .await
                .expect("send");
            sent.insert(r.msg_id);
        }
    });
    wait_until(
        "every message consumed",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            let n = log.lock().unwrap().len();
            if n >= N {
                Ok(())
            } else {
                Err(format!("{n}/{N}"))
            }
        },
    );
    // Give duplicates a chance to show up before judging.
    std::thread::sleep(Duration::from_millis(2_000));
    let log_handle = log.clone();
    let log = log.lock().unwrap().clone();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for d in &log {
        *counts.entry(d.msg_id.as_str()).or_default() += 1;
    }
    let dups: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dups.is_empty(), "consumed more than once: {dups:?}");
    let consumed: BTreeSet<String> = counts.keys().map(|s| s.to_string()).collect();
    assert_eq!(consumed, sent, "consumed exactly the sent messages");
    for who in [1, 2] {
        assert!(
            log.iter().any(|d| d.consumer == who),
            "consumer {who} got nothing"
        );
    }

    // A member leaves (committing first): the other takes over all queues and carries
    // on from the committed offsets, still without duplicates.
    c2.shutdown();
    wait_until(
        "the remaining member owns every queue",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || {
            let a1 = topic_queues(&c1);
            if a1 == (0..8).collect::<Vec<i32>>() {
                Ok(())
            } else {
                Err(format!("c1 {a1:?}"))
            }
        },
    );
    block_on(async {
        for i in N..N + 100 {
            let r = p
                .send(&Message::new(&topic, format!("m{i}")))
                .await
                .expect("send");
            sent.insert(r.msg_id);
        }
    });
    let all_log = log_handle.clone();
    wait_until(
        "messages after the leave consumed",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            let n = all_log.lock().unwrap().len();
            if n >= N + 100 {
                Ok(())
            } else {
                Err(format!("{n}/{}", N + 100))
            }
        },
    );
    std::thread::sleep(Duration::from_millis(1_500));
    let log = all_log.lock().unwrap().clone();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for d in &log {
        *counts.entry(d.msg_id.as_str()).or_default() += 1;
    }
    let dups: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dups.is_empty(), "consumed more than once: {dups:?}");
    let consumed: BTreeSet<String> = counts.keys().map(|s| s.to_string()).collect();
    assert_eq!(consumed, sent, "consumed exactly the sent messages");
    assert!(
        log[N..].iter().all(|d| d.consumer == 1),
        "only the remaining member consumes after the leave"
    );
    c1.shutdown();
}

#[test]
fn consume_later_comes_back_through_retry_topic() {
    // Level 3 (what a first send-back uses) is 3 s here.
    let c = Cluster::start("messageDelayLevel=1s 2s 3s");
    let topic = unique("T_later");
    create_topic(&c, &topic, 1);
    let group = unique("CG_later");
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let h = PushHandle::start(
        1,
        c.push_config(&group, &topic, "*"),
        log.clone(),
        later_first_time,
    );
    let p = producer(&c);
    let mut sent = BTreeMap::new();
    for i in 0..3 {
        let body = format!("retry me {i}");
        let m = Message::new(&topic, body.clone())
            .with_tags("TagR")
            .and_then(|m| m.with_property("color", "blue"))
            .unwrap();
        let r = block_on(p.send(&m)).expect("send");
        sent.insert(r.msg_id, body);
    }
    wait_until(
        "first and retried deliveries",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            let n = log.lock().unwrap().len();
            if n >= 6 {
                Ok(())
            } else {
                Err(format!("{n}/6 deliveries"))
            }
        },
    );
    // Successful retries are not delivered again.
    std::thread::sleep(Duration::from_millis(4_000));
    let log = log.lock().unwrap().clone();
    assert_eq!(log.len(), 6, "deliveries: {log:#?}");
    for (id, body) in &sent {
        let ds: Vec<&Delivery> = log.iter().filter(|d| &d.msg_id == id).collect();
        assert_eq!(ds.len(), 2, "{id} delivered {} times", ds.len());
        let (first, retry) = (ds[0], ds[1]);
        assert_eq!(first.reconsume_times, 0);
        assert_eq!(retry.reconsume_times, 1, "reconsumeTimes + 1");
        assert_eq!(retry.body, body.as_bytes());
        assert_eq!(retry.topic, topic, "listener sees the original topic");
        assert_eq!(
            retry.props.get("RETRY_TOPIC").map(String::as_str),
            Some(topic.as_str())
        );
        assert_eq!(retry.props.get("color").map(String::as_str), Some("blue"));
        assert_eq!(retry.props.get("TAGS").map(String::as_str), Some("TagR"));
        assert_eq!(
            retry.props.get("REAL_TOPIC").map(String::as_str),
            Some(format!("%RETRY%{group}").as_str()),
            "came back through the retry topic"
        );
        let gap = retry.at.duration_since(first.at);
        // The broker schedules from the retry record's store timestamp, which has
        // millisecond resolution (truncated), so the due instant may precede the exact
        // 3 s mark by up to a millisecond; anything more would be an early delivery.
        assert!(
            gap + Duration::from_millis(2) >= Duration::from_millis(3_000),
            "retry after {gap:?}, before delay level 3 (3 s)"
        );
    }
    // The retry topic holds the three send-backs.
    let a = admin(&c);
    let max = block_on(a.max_offset(&c.broker_addr(), &format!("%RETRY%{group}"), 0))
        .expect("retry topic exists");
    assert_eq!(max, 3);
    h.shutdown();
}

/// `CONSUMER_SEND_MSG_BACK` without `maxReconsumeTimes`: the group's `retryMaxTimes`
/// (lowered to 2 with UPDATE_AND_CREATE_SUBSCRIPTIONGROUP) decides when to DLQ.
#[test]
fn send_back_past_group_retry_max_times_goes_to_dlq() {
    let c = Cluster::start("messageDelayLevel=1s 2s 3s");
    let addr = c.broker_addr();
    let topic = unique("T_dlq");
    create_topic(&c, &topic, 1);
    let group = unique("CG_dlq");
    let client = block_on(async { RemotingClient::new(ClientConfig::default()) });
    let body = format!(
        "{{\"groupName\":\"{group}\",\"consumeEnable\":true,\"consumeFromMinEnable\":true,\
         \"consumeBroadcastEnable\":true,\"consumeMessageOrderly\":false,\"retryQueueNums\":1,\
         \"retryMaxTimes\":2,\"brokerId\":0,\"whichBrokerWhenConsumeSlowly\":1,\
         \"notifyConsumerIdsChangedEnable\":true}}"
    );
    let r = invoke(
        &client,
        &addr,
        RemotingCommand::request(200, 0).with_body(body.into_bytes()),
    );
    assert_eq!(
        r.code, 0,
        "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: {:?}",
        r.remark
    );
    let r = invoke(
        &client,
        &addr,
        RemotingCommand::request(352, 0).with_ext("group", group.clone()),
    );
    assert_eq!(r.code, 0, "GET_SUBSCRIPTIONGROUP_CONFIG: {:?}", r.remark);
    let cfg = ringmq_remoting::json::parse(&r.body).expect("json body");
    assert_eq!(
        cfg.get("retryMaxTimes").and_then(|v| v.as_i64()),
        Some(2),
        "stored group config"
    );

    let p = producer(&c);
    let sent = block_on(p.send(&Message::new(&topic, "poison").with_keys(&["pk"]).unwrap()))
        .expect("send");
    let send_back = |m: &MessageExt| {
        let req = RemotingCommand::request(36, 0)
            .with_ext("offset", m.commit_log_offset.to_string())
            .with_ext("group", group.clone())
            .with_ext("delayLevel", "1")
            .with_ext("originMsgId", m.msg_id.clone())
            .with_ext("originTopic", topic.clone());
        let r = invoke(&client, &addr, req);
        assert_eq!(r.code, 0, "send back: {:?}", r.remark);
    };
    // Waits (long polling) for message `offset` of queue 0 of `t`.
    let fetch = |t: &str, offset: i64| -> MessageExt {
        wait_until(
            &format!("{t}@{offset}"),
            Duration::from_secs(20),
            SHORT,
            || {
                let r = block_on(raw_pull(
                    &client, &addr, &group, t, 0, offset, "*", "TAG", 2_000,
                ))
                .map_err(|e| e.to_string())?;
                r.messages
                    .into_iter()
                    .next()
                    .ok_or_else(|| format!("code {} {}", r.code, r.remark))
            },
        )
    };
    let original = fetch(&topic, 0);
    assert_eq!(original.msg_id, sent.msg_id);
    send_back(&original);
    let retry_topic = format!("%RETRY%{group}");
    let r1 = fetch(&retry_topic, 0);
    assert_eq!(r1.reconsume_times, 1);
    send_back(&r1);
    let r2 = fetch(&retry_topic, 1);
    assert_eq!(r2.reconsume_times, 2);
    // reconsumeTimes 2 ≥ retryMaxTimes 2: dead letter, no delay.
    send_back(&r2);
    let dead = fetch(&format!("%DLQ%{group}"), 0);
    for m in [&r1, &r2, &dead] {
        assert_eq!(m.msg_id, sent.msg_id, "UNIQ_KEY kept");
        assert_eq!(&m.body[..], b"poison");
        assert_eq!(m.property("KEYS"), Some("pk"));
        assert_eq!(m.property("RETRY_TOPIC"), Some(topic.as_str()));
    }
    assert_eq!(dead.reconsume_times, 3);
    // ORIGIN_MESSAGE_ID: the first hop's offsetMsgId, carried over on later hops.
    for m in [&r1, &r2, &dead] {
        assert_eq!(
            m.property("ORIGIN_MESSAGE_ID"),
            Some(original.offset_msg_id.as_str()),
            "ORIGIN_MESSAGE_ID of reconsume {}",
            m.reconsume_times
        );
    }
    std::thread::sleep(Duration::from_millis(1_500));
    let a = admin(&c);
    assert_eq!(
        block_on(a.max_offset(&addr, &retry_topic, 0)).unwrap(),
        2,
        "no third retry"
    );
}

/// A push consumer that always answers Later with `max_reconsume_times` 1: the header
/// value decides (delivered twice, then dead-lettered).
#[test]
fn push_consumer_past_max_reconsume_times_dead_letters() {
    let c = Cluster::start("messageDelayLevel=1s 2s 3s");
    let topic = unique("T_dlq_push");
    create_topic(&c, &topic, 1);
    let group = unique("CG_dlq_push");
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let mut cfg = c.push_config(&group, &topic, "*");
    cfg.max_reconsume_times = 1;
    let h = PushHandle::start(1, cfg, log.clone(), always_later);
    let p = producer(&c);
    let sent = block_on(p.send(&Message::new(&topic, "never ok"))).expect("send");
    let a = admin(&c);
    let addr = c.broker_addr();
    let dlq = format!("%DLQ%{group}");
    wait_until(
        "message in the DLQ",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || match block_on(a.max_offset(&addr, &dlq, 0)) {
            Ok(1) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    std::thread::sleep(Duration::from_millis(1_000));
    let log = log.lock().unwrap().clone();
    let times: Vec<i32> = log
        .iter()
        .filter(|d| d.msg_id == sent.msg_id)
        .map(|d| d.reconsume_times)
        .collect();
    assert_eq!(times, vec![0, 1], "delivered once, retried once, then DLQ");
    h.shutdown();
}

// ---------------------------------------------------------------------------------------
// delay levels

/// Sends one message per `(level, delay)` and checks each arrives no earlier than its
/// delay after it was born and not much later.
fn check_delays(c: &Cluster, levels: &[(i32, i64)], slack_ms: i64) {
    let topic = unique("T_delay");
    create_topic(c, &topic, 1);
    let p = producer(c);
    let mut want: HashMap<String, i64> = HashMap::new();
    for (level, delay_ms) in levels {
        let m = Message::new(&topic, format!("level {level}"))
            .with_delay_level(*level)
            .unwrap();
        let r = block_on(p.send_with(&m, &QueueSelector::Queue(mq(c, &topic, 0)))).expect("send");
        want.insert(r.msg_id, *delay_ms);
    }
    let longest = levels.iter().map(|l| l.1).max().unwrap_or(0);
    let got = pull_all(
        c,
        &topic,
        &[0],
        levels.len(),
        Duration::from_millis((longest + 15_000) as u64),
    );
    assert_eq!(got.len(), levels.len(), "each delayed message once");
    for m in &got {
        let delay = *want.get(&m.msg_id).expect("sent message");
        let waited = m.store_timestamp_ms - m.born_timestamp_ms;
        assert!(
            waited >= delay,
            "{} delivered after {waited} ms, before its {delay} ms delay",
            m.msg_id
        );
        assert!(
            waited <= delay + slack_ms,
            "{} delivered after {waited} ms, delay {delay} ms",
            m.msg_id
        );
        assert_eq!(m.property("DELAY"), None, "DELAY cleared on delivery");
        assert_eq!(m.property("REAL_TOPIC"), Some(topic.as_str()));
    }
}

#[test]
fn delay_levels_from_broker_config() {
    // Level 4 is beyond the 3 configured levels: clamped to level 3.
    let c = Cluster::start("messageDelayLevel=1s 2s 3s");
    check_delays(&c, &[(1, 1_000), (2, 2_000), (3, 3_000), (4, 3_000)], 3_000);
}

#[test]
fn delay_level_3_default_is_10_seconds() {
    let c = Cluster::start("");
    check_delays(&c, &[(3, 10_000)], 3_000);
}

// ---------------------------------------------------------------------------------------
// admin

#[test]
fn admin_topics_stats_connections_config_and_lookup() {
    let c = Cluster::start("");
    let addr = c.broker_addr();
    let a = admin(&c);
    let topic = unique("T_admin");
    create_topic(&c, &topic, 3);
    let all = block_on(a.all_topic_config(&addr)).expect("all topic config");
    let tc = all
        .topic_config_table
        .get(&topic)
        .expect("created topic listed");
    assert_eq!(
        (tc.read_queue_nums, tc.write_queue_nums, tc.perm),
        (3, 3, 6)
    );

    let p = producer(&c);
    let mut results = Vec::new();
    block_on(async {
        for i in 0..5 {
            let m = Message::new(&topic, format!("admin {i}"))
                .with_keys(&[&format!("order-{i}"), "shared"])
                .unwrap();
            results.push(p.send(&m).await.expect("send"));
        }
    });
    let stats = wait_until(
        "topic stats count the sends",
        Duration::from_secs(10),
        SHORT,
        || {
            let s = block_on(a.topic_stats(&addr, &topic)).map_err(|e| e.to_string())?;
            let total: i64 = s.offsets.values().map(|o| o.max_offset).sum();
            if total == 5 {
                Ok(s)
            } else {
                Err(format!("{total} stored"))
            }
        },
    );
    assert_eq!(stats.offsets.len(), 3, "one entry per queue");
    for (q, o) in &stats.offsets {
        assert_eq!(o.min_offset, 0, "{q}");
        assert_eq!(
            o.last_update_timestamp > 0,
            o.max_offset > 0,
            "{q}: lastUpdateTimestamp is the last store time, 0 when empty: {o:?}"
        );
    }

    // Consume stats and consumer connection of a heartbeat-registered consumer.
    let group = unique("CG_admin");
    let consumer = pull_consumer(&c, &group);
    let mut subs = BTreeMap::new();
    subs.insert(topic.clone(), "TagA || TagB".to_string());
    let hb = consumer.heartbeat_body(&subs, "CONSUME_ACTIVELY", "CONSUME_FROM_FIRST_OFFSET");
    block_on(consumer.heartbeat_to(&addr, &hb)).expect("heartbeat");
    for r in &results {
        block_on(consumer.update_offset(&r.queue, r.queue_offset + 1, false)).expect("commit");
    }
    let cs = block_on(a.consume_stats(&addr, &group, Some(&topic))).expect("consume stats");
    assert_eq!(cs.offsets.len(), 3);
    assert_eq!(cs.diff_total(), 0, "all committed: {cs:?}");
    for (q, o) in &cs.offsets {
        assert_eq!(o.consumer_offset, o.broker_offset, "{q}");
        assert_eq!(
            o.last_timestamp > 0,
            o.consumer_offset > 0,
            "{q}: lastTimestamp is the store time of the last consumed message: {o:?}"
        );
    }
    let conn = block_on(a.consumer_connection(&addr, &group)).expect("consumer connection");
    assert_eq!(conn.connections.len(), 1);
    assert_eq!(conn.connections[0].client_id, consumer.client_id());
    assert_eq!(
        conn.subscriptions.get(&topic).map(String::as_str),
        Some("TagA || TagB")
    );
    assert_eq!(conn.consume_type.as_deref(), Some("CONSUME_ACTIVELY"));
    let ids = block_on(consumer.consumer_ids(&addr)).expect("consumer list");
    assert_eq!(ids, vec![consumer.client_id().to_string()]);

    // Broker config.
    let cfg = block_on(a.broker_config(&addr)).expect("broker config");
    assert_eq!(
        cfg.get("brokerName").map(String::as_str),
        Some(c.broker_name.as_str())
    );
    assert_eq!(
        cfg.get("brokerClusterName").map(String::as_str),
        Some(c.cluster_name.as_str())
    );
    let runtime = block_on(a.broker_runtime_info(&addr)).expect("runtime info");
    assert!(runtime.contains_key("msgPutTotalTodayNow"), "{runtime:?}");

    // Query by key (index built asynchronously) and by UNIQ_KEY; view by offsetMsgId.
    let found = wait_until("query by key", Duration::from_secs(10), SHORT, || {
        let v = block_on(a.query_message_by_key(&topic, "shared", 32, 0, i64::MAX))
            .map_err(|e| e.to_string())?;
        if v.len() == 5 {
            Ok(v)
        } else {
            Err(format!("{} hits", v.len()))
        }
    });
    let ids: BTreeSet<&str> = found.iter().map(|m| m.msg_id.as_str()).collect();
    let want: BTreeSet<&str> = results.iter().map(|r| r.msg_id.as_str()).collect();
    assert_eq!(ids, want);
    let one = block_on(a.query_message_by_key(&topic, "order-3", 32, 0, i64::MAX)).unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(&one[0].body[..], b"admin 3");
    let by_id = block_on(a.query_message_by_uniq_key(&topic, &results[2].msg_id)).unwrap();
    assert_eq!(by_id.len(), 1);
    assert_eq!(&by_id[0].body[..], b"admin 2");
    let viewed = block_on(a.view_message(&results[4].offset_msg_id)).expect("view by id");
    assert_eq!(&viewed.body[..], b"admin 4");
    assert_eq!(viewed.msg_id, results[4].msg_id);
    assert_eq!(viewed.topic, topic);
}

#[test]
fn admin_update_broker_config_applies_live() {
    let c = Cluster::start("");
    let addr = c.broker_addr();
    let a = admin(&c);
    let p = producer(&c);
    let before = unique("T_before");
    block_on(p.send(&Message::new(&before, "auto-created"))).expect("auto-create allowed");

    let mut update = BTreeMap::new();
    update.insert("autoCreateTopicEnable".to_string(), "false".to_string());
    block_on(a.update_broker_config(&addr, &update)).expect("update broker config");
    let cfg = block_on(a.broker_config(&addr)).expect("broker config");
    assert_eq!(
        cfg.get("autoCreateTopicEnable").map(String::as_str),
        Some("false")
    );
    // The next send to an unknown topic is refused: TOPIC_NOT_EXIST.
    let after = unique("T_after");
    match block_on(p.send(&Message::new(&after, "must not be created"))) {
        Err(ClientError::Response { code: 17, .. }) => {}
        other => panic!("send to an unknown topic with auto-create off: {other:?}"),
    }
    let all = block_on(a.all_topic_config(&addr)).expect("topics");
    assert!(all.topic_config_table.contains_key(&before));
    assert!(!all.topic_config_table.contains_key(&after));

    // Black-listed keys are refused with NO_PERMISSION and change nothing.
    let mut bad = BTreeMap::new();
    bad.insert("brokerConfigPath".to_string(), "/tmp/elsewhere".to_string());
    match block_on(a.update_broker_config(&addr, &bad)) {
        Err(ClientError::Response { code: 16, .. }) => {}
        other => panic!("black-listed key: {other:?}"),
    }
}

#[path = "cluster/acl.rs"]
mod acl;
#[path = "cluster/grpc.rs"]
mod grpc;
#[path = "cluster/namesrv_restart.rs"]
mod namesrv_restart;
#[path = "cluster/pop.rs"]
mod pop;
#[path = "cluster/pop_order.rs"]
mod pop_order;
#[path = "cluster/tls.rs"]
mod tls;
