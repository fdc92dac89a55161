//! Integration tests of ringmq-client against in-test fake servers: tiny blocking
//! `std::net` Remoting responders on 127.0.0.1:0 built on the remoting crate's codec.
//! Covered: pipelining with out-of-order responses, per-request timeout, oneway, the
//! in-flight window, reconnection, server-initiated requests, producer retry on another
//! broker, pull decoding, and the blocking facade.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use ringmq_client::{
    block_on, BlockingClient, ClientConfig, ClientError, Message, MessageQueue, Producer,
    ProducerConfig, PullConsumer, PullConsumerConfig, PullOptions, PullStatus, RemotingClient,
};
use ringmq_remoting::message::record::{encode_record, RecordFields};
use ringmq_remoting::{FrameDecoder, RemotingCommand};

/// What the fake server does with one request.
enum Action {
    Reply(RemotingCommand),
    /// Keep it; answer all held requests in reverse order once `n` are held.
    HoldReverse(usize, RemotingCommand),
    /// Never answer.
    Ignore,
    /// Close the connection without answering.
    Close,
}

type Handler = Arc<dyn Fn(&RemotingCommand) -> Action + Send + Sync>;

struct FakeServer {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    /// Every request received (code, opaque, flag, ext "id").
    seen: Arc<Mutex<Vec<RemotingCommand>>>,
    /// Write side of the latest connection, for server-initiated requests.
    latest: Arc<Mutex<Option<TcpStream>>>,
    /// Responses the client sent to server-initiated requests.
    client_responses: Arc<Mutex<Vec<RemotingCommand>>>,
}

impl FakeServer {
    fn start(handler: Handler) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let latest = Arc::new(Mutex::new(None));
        let client_responses = Arc::new(Mutex::new(Vec::new()));
        let (c, s, l, cr) = (
            connections.clone(),
            seen.clone(),
            latest.clone(),
            client_responses.clone(),
        );
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                c.fetch_add(1, Ordering::SeqCst);
                *l.lock().unwrap() = Some(stream.try_clone().unwrap());
                let (h, s, cr) = (handler.clone(), s.clone(), cr.clone());
                thread::spawn(move || serve(stream, h, s, cr));
            }
        });
        FakeServer {
            addr,
            connections,
            seen,
            latest,
            client_responses,
        }
    }

    fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Sends a request from the server to the client on the latest connection.
    fn push_request(&self, cmd: &RemotingCommand) {
        let mut buf = BytesMut::new();
        cmd.encode(&mut buf);
        let guard = self.latest.lock().unwrap();
        let mut s = guard
            .as_ref()
            .expect("a client connected")
            .try_clone()
            .unwrap();
        s.write_all(&buf).unwrap();
    }
}

fn serve(
    mut stream: TcpStream,
    handler: Handler,
    seen: Arc<Mutex<Vec<RemotingCommand>>>,
    client_responses: Arc<Mutex<Vec<RemotingCommand>>>,
) {
    let decoder = FrameDecoder::default();
    let mut buf = BytesMut::new();
    let mut held: Vec<RemotingCommand> = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let n = match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        while let Some(req) = decoder.decode(&mut buf).unwrap() {
            if req.is_response() {
                client_responses.lock().unwrap().push(req);
                continue;
            }
            seen.lock().unwrap().push(req.clone());
            let mut out = BytesMut::new();
            match handler(&req) {
                Action::Reply(resp) => resp.encode(&mut out),
                Action::HoldReverse(n, resp) => {
                    held.push(resp);
                    if held.len() >= n {
                        for r in held.drain(..).rev() {
                            r.encode(&mut out);
                        }
                    }
                }
                Action::Ignore => {}
                Action::Close => {
                    let _ = stream.shutdown(std::net::Shutdown::Both);
                    return;
                }
            }
            if !out.is_empty() && stream.write_all(&out).is_err() {
                return;
            }
        }
    }
}

fn echo(req: &RemotingCommand) -> RemotingCommand {
    let mut r = req.response_to(0, None);
    r.body = req.body.clone();
    if let Some(id) = req.ext_fields.get("id") {
        r.ext_fields.insert("id", id);
    }
    r
}

fn config() -> ClientConfig {
    ClientConfig {
        request_timeout_ms: 2_000,
        connect_timeout_ms: 1_000,
        ..ClientConfig::default()
    }
}

fn request(code: i32, id: usize) -> RemotingCommand {
    RemotingCommand::request(code, 0)
        .with_ext("id", id.to_string())
        .with_body(format!("body-{id}"))
}

#[test]
fn pipelined_requests_match_out_of_order_responses() {
    const N: usize = 64;
    let server = FakeServer::start(Arc::new(|req| Action::HoldReverse(N, echo(req))));
    let addr = server.addr();
    block_on(async move {
        let client = RemotingClient::new(config());
        let mut handles = Vec::new();
        for i in 0..N {
            let (c, a) = (client.clone(), addr.clone());
            handles.push(compio::runtime::spawn(async move {
                c.invoke(&a, request(1000, i), Duration::from_secs(5)).await
            }));
        }
        for (i, h) in handles.into_iter().enumerate() {
            let resp = h.await.unwrap().unwrap();
            assert_eq!(resp.ext_fields.get("id"), Some(i.to_string().as_str()));
            assert_eq!(&resp.body[..], format!("body-{i}").as_bytes());
        }
        assert_eq!(
            client.connection_count(&addr),
            1,
            "all requests shared one connection"
        );
    });
    assert_eq!(server.connections.load(Ordering::SeqCst), 1);
}

#[test]
fn timeout_fails_one_request_and_keeps_the_connection() {
    let server = FakeServer::start(Arc::new(|req| {
        if req.code == 2000 {
            Action::Ignore
        } else {
            Action::Reply(echo(req))
        }
    }));
    let addr = server.addr();
    block_on(async move {
        let client = RemotingClient::new(config());
        let started = Instant::now();
        let err = client
            .invoke(&addr, request(2000, 1), Duration::from_millis(150))
            .await
            .unwrap_err();
        let elapsed = started.elapsed();
        assert!(
            matches!(
                err,
                ClientError::Timeout {
                    request_code: 2000,
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            elapsed >= Duration::from_millis(150) && elapsed < Duration::from_secs(2),
            "{elapsed:?}"
        );
        // The connection survives a timeout.
        let ok = client
            .invoke(&addr, request(1000, 2), Duration::from_secs(2))
            .await
            .unwrap();
        assert_eq!(ok.ext_fields.get("id"), Some("2"));
        assert_eq!(client.connection_count(&addr), 1);
    });
}

#[test]
fn oneway_is_written_with_the_flag_and_not_answered() {
    let server = FakeServer::start(Arc::new(|req| Action::Reply(echo(req))));
    let addr = server.addr();
    block_on(async {
        let client = RemotingClient::new(config());
        client.invoke_oneway(&addr, request(15, 7)).await.unwrap();
        // A round trip afterwards proves the oneway frame was flushed first.
        client
            .invoke(&addr, request(1000, 8), Duration::from_secs(2))
            .await
            .unwrap();
    });
    let seen = server.seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert!(seen[0].is_oneway() && seen[0].code == 15);
    assert!(!seen[1].is_oneway());
}

#[test]
fn in_flight_window_bounds_outstanding_requests() {
    let server = FakeServer::start(Arc::new(|req| Action::HoldReverse(4, echo(req))));
    let addr = server.addr();
    let seen = server.seen.clone();
    block_on(async move {
        let client = RemotingClient::new(ClientConfig {
            max_in_flight_per_connection: 2,
            ..config()
        });
        let mut handles = Vec::new();
        for i in 0..4 {
            let (c, a) = (client.clone(), addr.clone());
            handles.push(compio::runtime::spawn(async move {
                c.invoke(&a, request(1000, i), Duration::from_millis(1_500))
                    .await
            }));
        }
        // The server answers only after 4 arrive, but the window lets only 2 out: both
        // time out, then the next two go out and also time out (the server holds 4).
        // Polled, not one fixed sleep: the two must be seen well before they time out.
        let deadline = std::time::Instant::now() + Duration::from_millis(1_000);
        while seen.lock().unwrap().len() < 2 && std::time::Instant::now() < deadline {
            compio::time::sleep(Duration::from_millis(10)).await;
        }
        compio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            seen.lock().unwrap().len(),
            2,
            "only the window's worth was written"
        );
        let mut timeouts = 0;
        for h in handles {
            if let Err(ClientError::Timeout { .. }) = h.await.unwrap() {
                timeouts += 1;
            }
        }
        assert!(timeouts >= 2, "held requests time out: {timeouts}");
    });
}

#[test]
fn failed_connection_fails_outstanding_and_reconnects() {
    let server = FakeServer::start(Arc::new(|req| {
        if req.code == 3000 {
            Action::Close
        } else {
            Action::Reply(echo(req))
        }
    }));
    let addr = server.addr();
    block_on(async {
        let client = RemotingClient::new(config());
        let err = client
            .invoke(&addr, request(3000, 1), Duration::from_secs(2))
            .await
            .unwrap_err();
        assert!(matches!(err, ClientError::ConnectionClosed { .. }), "{err}");
        let ok = client
            .invoke(&addr, request(1000, 2), Duration::from_secs(2))
            .await
            .unwrap();
        assert_eq!(ok.ext_fields.get("id"), Some("2"));
    });
    assert_eq!(
        server.connections.load(Ordering::SeqCst),
        2,
        "a second connection was opened"
    );
}

#[test]
fn connect_failure_names_the_address() {
    // Bind then drop a listener to get a local port with nothing behind it.
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let err = block_on(async {
        RemotingClient::new(config())
            .invoke(&addr, request(1000, 1), Duration::from_secs(1))
            .await
            .unwrap_err()
    });
    assert!(
        matches!(&err, ClientError::Connect { addr: a, .. } if *a == addr),
        "{err}"
    );
    assert!(err.to_string().contains(&addr));
}

#[test]
fn server_initiated_requests_reach_the_handler() {
    let server = FakeServer::start(Arc::new(|req| Action::Reply(echo(req))));
    let addr = server.addr();
    let (tx, rx) = mpsc::channel::<(i32, bool)>();
    block_on(async {
        let client = RemotingClient::new(config());
        client.set_request_handler(Rc::new(move |_peer, cmd| {
            tx.send((cmd.code, cmd.is_oneway())).unwrap();
            if cmd.code == 307 {
                Some(cmd.response_to(0, Some("running".into())))
            } else {
                None
            }
        }));
        client
            .invoke(&addr, request(1000, 1), Duration::from_secs(2))
            .await
            .unwrap();
        let mut notify = RemotingCommand::request(40, 77).with_ext("consumerGroup", "G");
        notify.mark_oneway();
        server.push_request(&notify);
        server.push_request(&RemotingCommand::request(307, 78));
        server.push_request(&RemotingCommand::request(9999, 79));
        // Let the reader dispatch them and the writer send the answers.
        let deadline = Instant::now() + Duration::from_secs(3);
        while server.client_responses.lock().unwrap().len() < 2 && Instant::now() < deadline {
            compio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    let got: Vec<(i32, bool)> = rx.try_iter().collect();
    assert_eq!(got, vec![(40, true), (307, false), (9999, false)]);
    let responses = server.client_responses.lock().unwrap();
    assert_eq!(responses.len(), 2, "the oneway notify is not answered");
    let by_opaque: HashMap<i32, &RemotingCommand> =
        responses.iter().map(|r| (r.opaque, r)).collect();
    assert_eq!(by_opaque[&78].code, 0);
    assert_eq!(by_opaque[&78].remark.as_deref(), Some("running"));
    assert_eq!(
        by_opaque[&79].code, 3,
        "unknown server requests get REQUEST_CODE_NOT_SUPPORTED"
    );
}

fn route_json(brokers: &[(&str, &str)]) -> String {
    let datas: Vec<String> = brokers
        .iter()
        .map(|(name, addr)| {
            format!(r#"{{"brokerAddrs":{{"0":"{addr}"}},"brokerName":"{name}","cluster":"C","enableActingMaster":false}}"#)
        })
        .collect();
    let queues: Vec<String> = brokers
        .iter()
        .map(|(name, _)| {
            format!(r#"{{"brokerName":"{name}","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}}"#)
        })
        .collect();
    format!(
        r#"{{"brokerDatas":[{}],"filterServerTable":{{}},"queueDatas":[{}]}}"#,
        datas.join(","),
        queues.join(",")
    )
}

fn fake_namesrv(route: String) -> FakeServer {
    FakeServer::start(Arc::new(move |req| {
        if req.code == 105 {
            Action::Reply(req.response_to(0, None).with_body(route.clone()))
        } else {
            Action::Reply(req.response_to(3, Some("not supported".into())))
        }
    }))
}

fn send_ok(req: &RemotingCommand, store_port: u16) -> RemotingCommand {
    req.response_to(0, None)
        .with_ext(
            "msgId",
            format!("7F000001{:08X}0000000000000000", store_port),
        )
        .with_ext("queueId", req.ext_fields.get("e").unwrap_or("0"))
        .with_ext("queueOffset", "41")
        .with_ext("MSG_REGION", "DefaultRegion")
        .with_ext("TRACE_ON", "true")
}

#[test]
fn producer_retries_a_busy_broker_on_another_broker() {
    let busy = FakeServer::start(Arc::new(|req| {
        Action::Reply(req.response_to(2, Some("[PC_SYNCHRONIZED]broker busy".into())))
    }));
    let good = FakeServer::start(Arc::new(|req| Action::Reply(send_ok(req, 10911))));
    let ns = fake_namesrv(route_json(&[
        ("broker-a", &busy.addr()),
        ("broker-b", &good.addr()),
    ]));
    let ns_addr = ns.addr();
    let result = block_on(async move {
        let producer = Producer::new(ProducerConfig {
            group: "PG".into(),
            namesrv_addrs: vec![ns_addr],
            client: config(),
            ..ProducerConfig::default()
        });
        let msg = Message::new("TopicTest", "hello")
            .with_tags("TagA")
            .unwrap();
        // Round-robin starts on broker-a (sorted first): it must move to broker-b.
        producer.send(&msg).await
    })
    .unwrap();
    assert_eq!(result.queue.broker_name, "broker-b");
    assert_eq!(result.queue_offset, 41);
    assert_eq!(result.region_id.as_deref(), Some("DefaultRegion"));
    assert_eq!(
        result.msg_id.len(),
        32,
        "UNIQ_KEY generated: {}",
        result.msg_id
    );
    let sent = good.seen.lock().unwrap();
    assert_eq!(sent.len(), 1);
    let req = &sent[0];
    assert_eq!(req.code, 310);
    assert_eq!(req.ext_fields.get("a"), Some("PG"));
    assert_eq!(req.ext_fields.get("b"), Some("TopicTest"));
    assert_eq!(req.ext_fields.get("c"), Some("TBW102"));
    assert_eq!(req.ext_fields.get("n"), Some("broker-b"));
    let props = req.ext_fields.get("i").unwrap();
    assert!(props.contains("TAGS\u{1}TagA\u{2}"), "{props:?}");
    assert!(
        props.contains(&format!("UNIQ_KEY\u{1}{}\u{2}", result.msg_id)),
        "{props:?}"
    );
    assert_eq!(&req.body[..], b"hello");
    assert_eq!(
        busy.seen.lock().unwrap().len(),
        1,
        "the busy broker was tried once"
    );
}

#[test]
fn producer_does_not_retry_a_non_retryable_code() {
    let illegal = FakeServer::start(Arc::new(|req| {
        Action::Reply(req.response_to(13, Some("too big".into())))
    }));
    let good = FakeServer::start(Arc::new(|req| Action::Reply(send_ok(req, 10911))));
    let ns = fake_namesrv(route_json(&[
        ("broker-a", &illegal.addr()),
        ("broker-b", &good.addr()),
    ]));
    let ns_addr = ns.addr();
    let err = block_on(async move {
        let producer = Producer::new(ProducerConfig {
            namesrv_addrs: vec![ns_addr],
            client: config(),
            ..Default::default()
        });
        producer
            .send(&Message::new("TopicTest", "x"))
            .await
            .unwrap_err()
    });
    assert_eq!(err.response_code(), Some(13), "{err}");
    assert!(err.to_string().contains("too big"), "{err}");
    assert!(good.seen.lock().unwrap().is_empty());
}

#[test]
fn batch_send_uses_code_320_and_the_batch_body() {
    let broker = FakeServer::start(Arc::new(|req| Action::Reply(send_ok(req, 10911))));
    let ns = fake_namesrv(route_json(&[("broker-a", &broker.addr())]));
    let ns_addr = ns.addr();
    let result = block_on(async move {
        let producer = Producer::new(ProducerConfig {
            namesrv_addrs: vec![ns_addr],
            client: config(),
            ..Default::default()
        });
        let msgs = vec![Message::new("T", "one"), Message::new("T", "two")];
        producer.send_batch(&msgs).await.unwrap()
    });
    assert_eq!(result.msg_id.split(',').count(), 2);
    let seen = broker.seen.lock().unwrap();
    assert_eq!(seen[0].code, 320);
    assert_eq!(seen[0].ext_fields.get("m"), Some("true"));
    let items: Vec<_> = ringmq_remoting::message::batch::iter_batch(&seen[0].body)
        .map(|i| i.unwrap())
        .collect();
    assert_eq!(items.len(), 2);
    assert_eq!(items[1].body, b"two");
}

fn stored(topic: &str, queue_offset: i64, body: &[u8]) -> BytesMut {
    let mut out = BytesMut::new();
    encode_record(
        &RecordFields {
            queue_id: 0,
            flag: 0,
            queue_offset,
            physical_offset: 1000 + queue_offset,
            sys_flag: 0,
            born_timestamp_ms: 1_700_000_000_000,
            born_host: "127.0.0.1:40000".parse().unwrap(),
            store_timestamp_ms: 1_700_000_000_500,
            store_host: "127.0.0.1:10911".parse().unwrap(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body,
            topic,
            properties: b"TAGS\x01A\x02UNIQ_KEY\x01ID1\x02",
        },
        &mut out,
    )
    .unwrap();
    out
}

#[test]
fn pull_decodes_records_and_maps_statuses() {
    let broker = FakeServer::start(Arc::new(|req| {
        let offset: i64 = req.ext_fields.get("queueOffset").unwrap().parse().unwrap();
        let header = |r: RemotingCommand, next: i64| {
            r.with_ext("suggestWhichBrokerId", "0")
                .with_ext("nextBeginOffset", next.to_string())
                .with_ext("minOffset", "0")
                .with_ext("maxOffset", "2")
        };
        if offset == 0 {
            let mut body = stored("T", 0, b"m0");
            body.extend_from_slice(&stored("T", 1, b"m1"));
            Action::Reply(
                header(req.response_to(0, Some("FOUND".into())), 2).with_body(body.freeze()),
            )
        } else {
            Action::Reply(header(
                req.response_to(19, Some("OFFSET_OVERFLOW_ONE".into())),
                offset,
            ))
        }
    }));
    let ns = fake_namesrv(route_json(&[("broker-a", &broker.addr())]));
    let ns_addr = ns.addr();
    block_on(async move {
        let consumer = PullConsumer::new(PullConsumerConfig {
            group: "CG".into(),
            namesrv_addrs: vec![ns_addr],
            client: config(),
            ..Default::default()
        });
        let mq = MessageQueue::new("T", "broker-a", 0);
        let r = consumer.pull(&mq, 0, 32).await.unwrap();
        assert_eq!(r.status, PullStatus::Found);
        assert_eq!(r.next_begin_offset, 2);
        assert_eq!(r.messages.len(), 2);
        assert_eq!(&r.messages[1].body[..], b"m1");
        assert_eq!(r.messages[1].queue_offset, 1);
        assert_eq!(r.messages[0].msg_id, "ID1");
        let opts = PullOptions {
            subscription: "B".into(),
            suspend_ms: None,
            ..PullOptions::default()
        };
        let none = consumer.pull_with(&mq, 2, &opts).await.unwrap();
        assert_eq!(none.status, PullStatus::NoNewMsg);
        assert!(none.messages.is_empty());
    });
    let seen = broker.seen.lock().unwrap();
    assert_eq!(seen[0].code, 11);
    assert_eq!(seen[0].ext_fields.get("consumerGroup"), Some("CG"));
    assert_eq!(
        seen[0].ext_fields.get("sysFlag"),
        Some("6"),
        "subscription + suspend bits"
    );
    assert_eq!(seen[1].ext_fields.get("subscription"), Some("B"));
    assert_eq!(seen[1].ext_fields.get("sysFlag"), Some("4"));
}

#[test]
fn blocking_client_runs_calls_from_plain_threads() {
    let server = FakeServer::start(Arc::new(|req| Action::Reply(echo(req))));
    let client = Arc::new(BlockingClient::new(config()).unwrap());
    let mut threads = Vec::new();
    for t in 0..4 {
        let (c, a) = (client.clone(), server.addr());
        threads.push(thread::spawn(move || {
            for i in 0..25 {
                let id = t * 100 + i;
                let r = c
                    .invoke(&a, request(1000, id), Duration::from_secs(2))
                    .unwrap();
                assert_eq!(r.ext_fields.get("id"), Some(id.to_string().as_str()));
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(server.seen.lock().unwrap().len(), 100);
    let body: Bytes = client
        .call(|c: Rc<RemotingClient>| async move {
            Ok(Bytes::from(format!("{}", c.config().request_timeout_ms)))
        })
        .unwrap();
    assert_eq!(&body[..], b"2000");
}

#[derive(Default)]
struct FakeGroup {
    consumer_ids: Vec<String>,
    sent_back: Vec<(String, String)>,
    commits: Vec<(String, i32, i64, bool)>,
    unregistered: bool,
}

#[test]
fn push_consumer_rebalances_consumes_sends_back_and_commits() {
    let state = Arc::new(Mutex::new(FakeGroup::default()));
    let st = state.clone();
    let broker = FakeServer::start(Arc::new(move |req| {
        let mut g = st.lock().unwrap();
        let ok = req.response_to(0, None);
        match req.code {
            34 => {
                let v = ringmq_remoting::json::parse(&req.body).unwrap();
                let id = v.get("clientID").unwrap().as_str().unwrap().to_string();
                if !g.consumer_ids.contains(&id) {
                    g.consumer_ids.push(id);
                }
                Action::Reply(ok)
            }
            38 => {
                let ids: Vec<String> = g.consumer_ids.iter().map(|i| format!("\"{i}\"")).collect();
                Action::Reply(ok.with_body(format!("{{\"consumerIdList\":[{}]}}", ids.join(","))))
            }
            14 => Action::Reply(req.response_to(22, Some("not found".into()))),
            11 => {
                let f = |k: &str| req.ext_fields.get(k).unwrap().to_string();
                let (topic, queue, offset) = (
                    f("topic"),
                    f("queueId"),
                    f("queueOffset").parse::<i64>().unwrap(),
                );
                let header = |r: RemotingCommand, next: i64| {
                    r.with_ext("suggestWhichBrokerId", "0")
                        .with_ext("nextBeginOffset", next.to_string())
                        .with_ext("minOffset", "0")
                        .with_ext("maxOffset", "2")
                };
                if topic == "T" && queue == "0" && offset == 0 {
                    let mut body = stored("T", 0, b"m0");
                    body.extend_from_slice(&stored("T", 1, b"m1"));
                    Action::Reply(header(ok, 2).with_body(body.freeze()))
                } else {
                    drop(g);
                    // A short hold stands in for the broker's long poll.
                    thread::sleep(Duration::from_millis(20));
                    Action::Reply(header(req.response_to(19, None), offset))
                }
            }
            36 => {
                let f = |k: &str| req.ext_fields.get(k).unwrap_or_default().to_string();
                g.sent_back.push((f("group"), f("offset")));
                Action::Reply(ok)
            }
            15 => {
                let f = |k: &str| req.ext_fields.get(k).unwrap().to_string();
                g.commits.push((
                    f("topic"),
                    f("queueId").parse().unwrap(),
                    f("commitOffset").parse().unwrap(),
                    req.is_oneway(),
                ));
                if req.is_oneway() {
                    Action::Ignore
                } else {
                    Action::Reply(ok)
                }
            }
            35 => {
                g.unregistered = true;
                Action::Reply(ok)
            }
            _ => Action::Reply(req.response_to(3, None)),
        }
    }));
    let ns = fake_namesrv(route_json(&[("broker-a", &broker.addr())]));
    let ns_addr = ns.addr();
    let consumed = Rc::new(std::cell::RefCell::new(Vec::<(String, i32)>::new()));
    let seen = consumed.clone();
    block_on(async {
        let mut subscriptions = std::collections::BTreeMap::new();
        subscriptions.insert("T".to_string(), "*".to_string());
        let config = ringmq_client::PushConsumerConfig {
            group: "G".into(),
            namesrv_addrs: vec![ns_addr],
            subscriptions,
            consume_from: ringmq_client::ConsumeFrom::FirstOffset,
            client: config(),
            ..Default::default()
        };
        let listener: ringmq_client::MessageListener = Rc::new(move |msgs| {
            let mut seen = seen.borrow_mut();
            for m in msgs {
                seen.push((String::from_utf8_lossy(&m.body).into_owned(), m.queue_id));
            }
            if msgs.iter().any(|m| &m.body[..] == b"m1") {
                ringmq_client::ConsumeResult::Later
            } else {
                ringmq_client::ConsumeResult::Success
            }
        });
        let consumer = ringmq_client::PushConsumer::start(config, listener)
            .await
            .unwrap();
        // Alone in the group: every queue of T and of %RETRY%G.
        assert_eq!(
            consumer.assigned_queues().len(),
            4,
            "{:?}",
            consumer.assigned_queues()
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while consumed.borrow().len() < 2 && Instant::now() < deadline {
            compio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            *consumed.borrow(),
            vec![("m0".to_string(), 0), ("m1".to_string(), 0)]
        );
        // A second member joins; the broker tells us and we give up half the queues.
        state
            .lock()
            .unwrap()
            .consumer_ids
            .push("zz-other@1#1".into());
        let mut notify = RemotingCommand::request(40, 500).with_ext("consumerGroup", "G");
        notify.mark_oneway();
        broker.push_request(&notify);
        let deadline = Instant::now() + Duration::from_secs(5);
        while consumer.assigned_queues().len() != 2 && Instant::now() < deadline {
            compio::time::sleep(Duration::from_millis(10)).await;
        }
        let mine = consumer.assigned_queues();
        assert_eq!(mine.len(), 2, "{mine:?}");
        assert!(
            mine.iter().all(|q| q.queue_id == 0),
            "the first member keeps the first half: {mine:?}"
        );
        let q0 = MessageQueue::new("T", "broker-a", 0);
        let deadline = Instant::now() + Duration::from_secs(5);
        while consumer.consumed_offset(&q0) != Some(2) && Instant::now() < deadline {
            compio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            consumer.consumed_offset(&q0),
            Some(2),
            "progress moves past the sent-back message"
        );
        consumer.shutdown().await;
    });
    let g = state.lock().unwrap();
    assert_eq!(
        g.sent_back,
        vec![("G".to_string(), "1001".to_string())],
        "m1 (commit-log offset 1001) sent back"
    );
    assert!(
        g.commits
            .iter()
            .any(|(t, q, o, oneway)| t == "T" && *q == 0 && *o == 2 && !oneway),
        "shutdown commits queue 0 at offset 2: {:?}",
        g.commits
    );
    assert!(g.unregistered);
}

/// Throughput smoke test (run with `--ignored --nocapture`): sync sends through the
/// producer against the in-test broker; prints messages per second.
#[test]
#[ignore]
fn producer_throughput_smoke() {
    let broker = FakeServer::start(Arc::new(|req| Action::Reply(send_ok(req, 10911))));
    let ns = fake_namesrv(route_json(&[("broker-a", &broker.addr())]));
    let ns_addr = ns.addr();
    const TASKS: usize = 64;
    const PER_TASK: usize = 3_000;
    let elapsed = block_on(async move {
        let producer = Producer::new(ProducerConfig {
            namesrv_addrs: vec![ns_addr],
            client: config(),
            ..Default::default()
        });
        let msg = Message::new("T", vec![b'x'; 1024]);
        producer.send(&msg).await.unwrap();
        let started = Instant::now();
        let mut handles = Vec::new();
        for _ in 0..TASKS {
            let (p, m) = (producer.clone(), msg.clone());
            handles.push(compio::runtime::spawn(async move {
                for _ in 0..PER_TASK {
                    p.send(&m).await.unwrap();
                }
            }));
        }
        for h in handles {
            h.await.unwrap();
        }
        started.elapsed()
    });
    let n = (TASKS * PER_TASK) as f64;
    println!(
        "{} sync sends in {:?}: {:.0} msg/s",
        n,
        elapsed,
        n / elapsed.as_secs_f64()
    );
}
