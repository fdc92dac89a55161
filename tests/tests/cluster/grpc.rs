//! The 5.x gRPC endpoint against a real broker, through a tonic client of the vendored
//! protos: routes, the Settings exchange, sends of every message type, receive / ack /
//! change-invisible over POP, transactions with commit and check-back, and the v2 status
//! of every refusal.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use ringmq_client::{block_on, Admin, ClientConfig, RemotingClient, TopicSpec};
use ringmq_grpc::pb::messaging_service_client::MessagingServiceClient;
use ringmq_grpc::pb::receive_message_response::Content;
use ringmq_grpc::pb::*;
use ringmq_grpc::GrpcServer;
use ringmq_tests::{route_brokers, unique, wait_until, Cluster};
use tokio::sync::mpsc;
use tonic::transport::Channel;

type Client = MessagingServiceClient<Channel>;

/// A cluster with the gRPC endpoint beside its broker.
struct Grpc {
    cluster: Cluster,
    server: Option<GrpcServer>,
    runtime: tokio::runtime::Runtime,
}

impl Drop for Grpc {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.stop();
        }
    }
}

impl Grpc {
    fn start(extra_conf: &str) -> Grpc {
        // RINGMQ_TEST_LOG=debug (an EnvFilter) shows the broker's and the endpoint's logs.
        if let Ok(filter) = std::env::var("RINGMQ_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_test_writer()
                .try_init();
        }
        let cluster = Cluster::start(extra_conf);
        let server = GrpcServer::start_for(cluster.broker())
            .expect("gRPC starts")
            .expect("gRPC is on");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        Grpc {
            cluster,
            server: Some(server),
            runtime,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.server.as_ref().unwrap().local_addr())
    }

    fn client(&self) -> Client {
        let endpoint = self.endpoint();
        self.runtime
            .block_on(MessagingServiceClient::connect(endpoint))
            .expect("gRPC connects")
    }

    fn create_topic(&self, topic: &str, queues: i32, message_type: &str) {
        let admin = Admin::new(
            RemotingClient::new(ClientConfig::default()),
            vec![self.cluster.namesrv_addr()],
        );
        let mut spec = TopicSpec::new(topic).with_queues(queues);
        spec.attributes = Some(format!("+message.type={message_type}"));
        let addr = self.cluster.broker_addr();
        block_on(admin.create_topic(&addr, &spec))
            .unwrap_or_else(|e| panic!("create {topic}: {e}"));
        let ns = self.cluster.namesrv_addr();
        wait_until(
            &format!("route of {topic}"),
            Duration::from_secs(15),
            Duration::from_millis(50),
            || route_brokers(&ns, topic),
        );
    }
}

fn resource(name: &str) -> Option<Resource> {
    Some(Resource {
        resource_namespace: String::new(),
        name: name.into(),
    })
}

fn with_id<T>(client_id: &str, message: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.metadata_mut()
        .insert("x-mq-client-id", client_id.parse().unwrap());
    r.metadata_mut()
        .insert("x-mq-language", "RUST".parse().unwrap());
    r
}

fn code(s: &Option<Status>) -> Code {
    Code::try_from(s.as_ref().map_or(0, |s| s.code)).unwrap_or(Code::Unspecified)
}

/// Opens a Telemetry stream with `settings` and returns the server's first reply and the
/// rest of the stream (kept open for check-backs).
fn telemetry(
    g: &Grpc,
    client: &mut Client,
    client_id: &str,
    settings: Settings,
) -> (
    TelemetryCommand,
    tonic::Streaming<TelemetryCommand>,
    mpsc::Sender<TelemetryCommand>,
) {
    let (tx, rx) = mpsc::channel(8);
    let cmd = TelemetryCommand {
        status: None,
        command: Some(telemetry_command::Command::Settings(settings)),
    };
    g.runtime.block_on(tx.send(cmd)).unwrap();
    let request = with_id(client_id, tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut stream = g
        .runtime
        .block_on(client.telemetry(request))
        .expect("telemetry opens")
        .into_inner();
    let first = g
        .runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), stream.message()).await })
        .expect("settings answered in time")
        .expect("stream healthy")
        .expect("a settings reply");
    (first, stream, tx)
}

fn producer_settings(topic: &str) -> Settings {
    Settings {
        client_type: Some(ClientType::Producer as i32),
        pub_sub: Some(settings::PubSub::Publishing(Publishing {
            topics: vec![resource(topic).unwrap()],
            max_body_size: 0,
            validate_message_type: true,
        })),
        ..Default::default()
    }
}

fn consumer_settings(group: &str, topic: &str) -> Settings {
    Settings {
        client_type: Some(ClientType::SimpleConsumer as i32),
        pub_sub: Some(settings::PubSub::Subscription(Subscription {
            group: resource(group),
            subscriptions: vec![SubscriptionEntry {
                topic: resource(topic),
                expression: Some(FilterExpression {
                    r#type: FilterType::Tag as i32,
                    expression: "*".into(),
                }),
            }],
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn message(topic: &str, body: &str) -> Message {
    Message {
        topic: resource(topic),
        user_properties: [("color".to_string(), "red".to_string())].into(),
        system_properties: Some(SystemProperties {
            tag: Some("TagA".into()),
            keys: vec!["k1".into()],
            message_id: unique("MSGID"),
            message_type: MessageType::Normal as i32,
            born_timestamp: Some(prost_types::Timestamp {
                seconds: born_seconds(),
                nanos: 0,
            }),
            ..Default::default()
        }),
        body: body.as_bytes().to_vec(),
    }
}

/// Now, in whole seconds (a born time the broker's age checks accept).
fn born_seconds() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    now.as_secs() as i64
}

fn send(g: &Grpc, client: &mut Client, id: &str, messages: Vec<Message>) -> SendMessageResponse {
    g.runtime
        .block_on(client.send_message(with_id(id, SendMessageRequest { messages })))
        .expect("send answered")
        .into_inner()
}

/// One ReceiveMessage: (status, messages, whether the last frame was the server clock).
fn receive(
    g: &Grpc,
    client: &mut Client,
    id: &str,
    group: &str,
    topic: &str,
    poll_s: i64,
) -> (Code, Vec<Message>, bool) {
    let request = ReceiveMessageRequest {
        group: resource(group),
        message_queue: Some(MessageQueue {
            topic: resource(topic),
            id: 0,
            ..Default::default()
        }),
        filter_expression: Some(FilterExpression {
            r#type: FilterType::Tag as i32,
            expression: "*".into(),
        }),
        batch_size: 32,
        invisible_duration: Some(prost_types::Duration {
            seconds: 15,
            nanos: 0,
        }),
        auto_renew: false,
        long_polling_timeout: Some(prost_types::Duration {
            seconds: poll_s,
            nanos: 0,
        }),
        attempt_id: None,
    };
    let mut request = with_id(id, request);
    request.set_timeout(Duration::from_secs(poll_s as u64 + 10));
    g.runtime.block_on(async {
        let mut stream = client
            .receive_message(request)
            .await
            .expect("receive")
            .into_inner();
        let mut frames = Vec::new();
        while let Some(f) = stream.message().await.expect("stream") {
            frames.push(f.content.expect("frame content"));
        }
        let status = match frames.first() {
            Some(Content::Status(s)) => Code::try_from(s.code).unwrap(),
            other => panic!("the first frame is not the status: {other:?}"),
        };
        let clock_last = matches!(frames.last(), Some(Content::DeliveryTimestamp(_)));
        let messages = frames
            .into_iter()
            .filter_map(|f| match f {
                Content::Message(m) => Some(m),
                _ => None,
            })
            .collect();
        (status, messages, clock_last)
    })
}

fn ack(g: &Grpc, client: &mut Client, id: &str, group: &str, topic: &str, m: &Message) -> Code {
    let sp = m.system_properties.as_ref().unwrap();
    let r = AckMessageRequest {
        group: resource(group),
        topic: resource(topic),
        entries: vec![AckMessageEntry {
            message_id: sp.message_id.clone(),
            receipt_handle: sp.receipt_handle.clone().unwrap_or_default(),
            lite_topic: None,
        }],
    };
    let r = g
        .runtime
        .block_on(client.ack_message(with_id(id, r)))
        .unwrap()
        .into_inner();
    code(&r.status)
}

#[test]
fn grpc_routes_settings_send_receive_ack_and_change_invisible() {
    let g = Grpc::start("");
    let topic = unique("TopicGrpc");
    let group = unique("CG-grpc");
    g.create_topic(&topic, 4, "NORMAL");
    let mut c = g.client();

    // Route: four read-write queues at this endpoint.
    let route = g
        .runtime
        .block_on(c.query_route(with_id(
            "p1",
            QueryRouteRequest {
                topic: resource(&topic),
                endpoints: None,
            },
        )))
        .unwrap()
        .into_inner();
    assert_eq!(code(&route.status), Code::Ok);
    assert_eq!(route.message_queues.len(), 4);
    let port = g.server.as_ref().unwrap().local_addr().port();
    for (i, q) in route.message_queues.iter().enumerate() {
        assert_eq!(q.id, i as i32);
        assert_eq!(q.permission, Permission::ReadWrite as i32);
        assert_eq!(q.accept_message_types, vec![MessageType::Normal as i32]);
        let b = q.broker.as_ref().unwrap();
        assert_eq!((b.name.as_str(), b.id), (g.cluster.broker_name.as_str(), 0));
        let ep = b.endpoints.as_ref().unwrap();
        assert_eq!(ep.scheme, AddressScheme::IPv4 as i32);
        assert_eq!(
            (ep.addresses[0].host.as_str(), ep.addresses[0].port),
            ("127.0.0.1", i32::from(port))
        );
    }

    // Producer settings: the server's advice comes back with status OK.
    let (reply, mut producer_stream, _tx) = telemetry(&g, &mut c, "p1", producer_settings(&topic));
    assert_eq!(code(&reply.status), Code::Ok);
    let Some(telemetry_command::Command::Settings(s)) = reply.command else {
        panic!("no settings")
    };
    let Some(settings::PubSub::Publishing(p)) = s.pub_sub else {
        panic!("no publishing")
    };
    assert_eq!(p.max_body_size, 4 * 1024 * 1024);
    let backoff = s.backoff_policy.expect("backoff");
    assert_eq!(backoff.max_attempts, 3);
    assert!(matches!(
        backoff.strategy,
        Some(retry_policy::Strategy::ExponentialBackoff(_))
    ));

    // The first reply comes once more, for clients that missed it (the Node.js SDK).
    let again = g
        .runtime
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(5), producer_stream.message()).await
        })
        .expect("the settings reply repeated within 5 s")
        .expect("stream healthy")
        .expect("a command");
    assert!(matches!(
        again.command,
        Some(telemetry_command::Command::Settings(_))
    ));

    // Three sends, one entry each, echoing the message ids.
    let mut sent = BTreeSet::new();
    for i in 0..3 {
        let m = message(&topic, &format!("grpc-{i}"));
        let id = m.system_properties.as_ref().unwrap().message_id.clone();
        let r = send(&g, &mut c, "p1", vec![m]);
        assert_eq!(code(&r.status), Code::Ok, "{:?}", r.status);
        assert_eq!(r.entries.len(), 1);
        assert_eq!(r.entries[0].message_id, id);
        sent.insert(id);
    }

    // A simple consumer receives all three, fully described, and acks them.
    let (reply, _cstream, _ctx) = telemetry(&g, &mut c, "c1", consumer_settings(&group, &topic));
    assert_eq!(code(&reply.status), Code::Ok);
    let hb = g
        .runtime
        .block_on(c.heartbeat(with_id(
            "c1",
            HeartbeatRequest {
                group: resource(&group),
                client_type: ClientType::SimpleConsumer as i32,
            },
        )))
        .unwrap()
        .into_inner();
    assert_eq!(code(&hb.status), Code::Ok);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < 3 && Instant::now() < deadline {
        let (status, messages, clock_last) = receive(&g, &mut c, "c1", &group, &topic, 5);
        assert!(clock_last, "the stream ends with the server's time");
        assert!(
            matches!(status, Code::Ok | Code::MessageNotFound),
            "{status:?}"
        );
        got.extend(messages);
    }
    assert_eq!(got.len(), 3);
    let ids: BTreeSet<String> = got
        .iter()
        .map(|m| m.system_properties.as_ref().unwrap().message_id.clone())
        .collect();
    assert_eq!(ids, sent);
    for m in &got {
        let sp = m.system_properties.as_ref().unwrap();
        assert_eq!(sp.tag.as_deref(), Some("TagA"));
        assert_eq!(sp.keys, vec!["k1".to_string()]);
        assert_eq!(sp.delivery_attempt, Some(1));
        assert_eq!(sp.body_encoding, Encoding::Identity as i32);
        assert_eq!(sp.message_type, MessageType::Normal as i32);
        let digest = sp.body_digest.as_ref().unwrap();
        assert_eq!(digest.r#type, DigestType::Md5 as i32);
        assert_eq!(digest.checksum.len(), 32);
        assert_eq!(digest.checksum, digest.checksum.to_ascii_uppercase());
        let born = sp.born_timestamp.as_ref().map_or(0, |t| t.seconds);
        assert!(
            (born_seconds() - 60..=born_seconds()).contains(&born),
            "born {born}"
        );
        assert_eq!(
            m.user_properties.get("color").map(String::as_str),
            Some("red")
        );
        assert_eq!(sp.receipt_handle.as_ref().unwrap().split(' ').count(), 9);
    }

    // One message's invisible time changes: its new handle acks it.
    let first = &got[0];
    let sp = first.system_properties.as_ref().unwrap();
    let changed = g
        .runtime
        .block_on(c.change_invisible_duration(with_id(
            "c1",
            ChangeInvisibleDurationRequest {
                group: resource(&group),
                topic: resource(&topic),
                receipt_handle: sp.receipt_handle.clone().unwrap(),
                invisible_duration: Some(prost_types::Duration {
                    seconds: 30,
                    nanos: 0,
                }),
                message_id: sp.message_id.clone(),
                lite_topic: None,
                suspend: None,
            },
        )))
        .unwrap()
        .into_inner();
    assert_eq!(code(&changed.status), Code::Ok, "{:?}", changed.status);
    assert_ne!(&changed.receipt_handle, sp.receipt_handle.as_ref().unwrap());
    let mut renewed = first.clone();
    renewed.system_properties.as_mut().unwrap().receipt_handle = Some(changed.receipt_handle);
    assert_eq!(ack(&g, &mut c, "c1", &group, &topic, &renewed), Code::Ok);
    for m in &got[1..] {
        assert_eq!(ack(&g, &mut c, "c1", &group, &topic, m), Code::Ok);
    }
    // Nothing comes back: everything was acked.
    let (status, messages, _) = receive(&g, &mut c, "c1", &group, &topic, 5);
    assert_eq!((status, messages.len()), (Code::MessageNotFound, 0));

    let bye = g
        .runtime
        .block_on(c.notify_client_termination(with_id(
            "c1",
            NotifyClientTerminationRequest {
                group: resource(&group),
            },
        )))
        .unwrap()
        .into_inner();
    assert_eq!(code(&bye.status), Code::Ok);
}

#[test]
fn grpc_refusals_carry_the_v2_codes() {
    let g = Grpc::start("");
    let topic = unique("TopicGrpcBad");
    let fifo_topic = unique("TopicGrpcFifo");
    g.create_topic(&topic, 2, "NORMAL");
    g.create_topic(&fifo_topic, 2, "FIFO");
    let mut c = g.client();
    // A recall names a DELAY topic (the type check), and recallMessageEnable is off by
    // default, as upstream's: a recall is then FORBIDDEN.
    let r = recall(&g, &mut c, &topic, "djEgVCBiIDEgaWQ=");
    assert_eq!(
        code(&r.status),
        Code::MessagePropertyConflictWithType,
        "{:?}",
        r.status
    );
    let delay_topic = unique("TopicGrpcDelay");
    g.create_topic(&delay_topic, 1, "DELAY");
    let r = recall(&g, &mut c, &delay_topic, "djEgVCBiIDEgaWQ=");
    assert_eq!(code(&r.status), Code::Forbidden, "{:?}", r.status);
    let route = |c: &mut Client, id: &str, t: &str| {
        let r = g.runtime.block_on(c.query_route(with_id(
            id,
            QueryRouteRequest {
                topic: resource(t),
                endpoints: None,
            },
        )));
        code(&r.unwrap().into_inner().status)
    };
    assert_eq!(route(&mut c, "x", "NoSuchTopic"), Code::TopicNotFound);
    assert_eq!(route(&mut c, "x", "bad topic!"), Code::IllegalTopic);
    assert_eq!(
        route(&mut c, "x", "SCHEDULE_TOPIC_XXXX"),
        Code::IllegalTopic
    );
    // No client id.
    let r = g
        .runtime
        .block_on(c.query_route(tonic::Request::new(QueryRouteRequest {
            topic: resource(&topic),
            endpoints: None,
        })))
        .unwrap()
        .into_inner();
    assert_eq!(code(&r.status), Code::ClientIdRequired);
    // Heartbeat before any settings.
    let hb = g
        .runtime
        .block_on(c.heartbeat(with_id(
            "nobody",
            HeartbeatRequest {
                group: None,
                client_type: 1,
            },
        )))
        .unwrap()
        .into_inner();
    assert_eq!(code(&hb.status), Code::UnrecognizedClientType);

    let sent = |c: &mut Client, messages: Vec<Message>| code(&send(&g, c, "p", messages).status);
    assert_eq!(sent(&mut c, vec![]), Code::MessageCorrupted);
    let mut big = message(&topic, "x");
    big.body = vec![b'x'; 4 * 1024 * 1024 + 1];
    assert_eq!(sent(&mut c, vec![big]), Code::MessageBodyTooLarge);
    let mut empty = message(&topic, "x");
    empty.body.clear();
    assert_eq!(sent(&mut c, vec![empty]), Code::MessageBodyEmpty);
    let mut reserved = message(&topic, "x");
    reserved.user_properties.insert("TAGS".into(), "x".into());
    assert_eq!(
        sent(&mut c, vec![reserved]),
        Code::IllegalMessagePropertyKey
    );
    let mut no_id = message(&topic, "x");
    no_id.system_properties.as_mut().unwrap().message_id.clear();
    assert_eq!(sent(&mut c, vec![no_id]), Code::IllegalMessageId);
    assert_eq!(
        sent(&mut c, vec![message("NoSuchTopic", "x")]),
        Code::TopicNotFound
    );
    // A normal message to a FIFO topic, and a FIFO one to a normal topic.
    assert_eq!(
        sent(&mut c, vec![message(&fifo_topic, "x")]),
        Code::MessagePropertyConflictWithType
    );
    let mut fifo = message(&topic, "x");
    fifo.system_properties.as_mut().unwrap().message_group = Some("g".into());
    assert_eq!(
        sent(&mut c, vec![fifo]),
        Code::MessagePropertyConflictWithType
    );
    let mut mixed = message(&topic, "x");
    mixed.topic = resource(&fifo_topic);
    assert_eq!(
        sent(&mut c, vec![message(&topic, "x"), mixed]),
        Code::MessageCorrupted
    );

    // Receipt handles that are not ours, or expired.
    let fake = Message {
        system_properties: Some(SystemProperties {
            message_id: "x".into(),
            receipt_handle: Some("not a handle".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        ack(&g, &mut c, "c", "CG-x", &topic, &fake),
        Code::InvalidReceiptHandle
    );
    let mut expired = fake.clone();
    expired.system_properties.as_mut().unwrap().receipt_handle =
        Some(format!("0 1000 1000 0 0 {} 0 0 0", g.cluster.broker_name));
    assert_eq!(
        ack(&g, &mut c, "c", "CG-x", &topic, &expired),
        Code::InvalidReceiptHandle
    );
    // An invisible time out of range, and a group that is not a group.
    let bad_invisible = g
        .runtime
        .block_on(c.change_invisible_duration(with_id(
            "c",
            ChangeInvisibleDurationRequest {
                group: resource("CG-x"),
                topic: resource(&topic),
                receipt_handle: "0 1 2 3 0 b 0 0 0".into(),
                invisible_duration: Some(prost_types::Duration {
                    seconds: -1,
                    nanos: 0,
                }),
                ..Default::default()
            },
        )))
        .unwrap()
        .into_inner();
    assert_eq!(code(&bad_invisible.status), Code::IllegalInvisibleTime);
    let (status, _, clock_last) = receive(&g, &mut c, "c", "bad group!", &topic, 5);
    assert_eq!(status, Code::IllegalConsumerGroup);
    assert!(clock_last);
    // Transactions the broker never handed out.
    let end = g
        .runtime
        .block_on(c.end_transaction(with_id(
            "p",
            end_tx(
                &topic,
                "m",
                "garbage",
                TransactionResolution::Commit,
                TransactionSource::SourceClient,
            ),
        )))
        .unwrap()
        .into_inner();
    assert_eq!(code(&end.status), Code::InvalidTransactionId);
    let get = g
        .runtime
        .block_on(c.get_offset(with_id("c", GetOffsetRequest::default())))
        .unwrap()
        .into_inner();
    assert_eq!(code(&get.status), Code::IllegalTopic, "{:?}", get.status);
    // RPCs this broker does not serve answer NOT_IMPLEMENTED, not a transport error.
    let lite = g
        .runtime
        .block_on(c.sync_lite_subscription(with_id("c", SyncLiteSubscriptionRequest::default())))
        .unwrap()
        .into_inner();
    assert_eq!(code(&lite.status), Code::NotImplemented);
}

/// PullMessage from queue offsets, the group's stored offset (UpdateOffset, GetOffset) and
/// a queue's offsets (QueryOffset) agree with what was sent.
#[test]
fn grpc_pull_and_offsets_follow_the_queues() {
    let g = Grpc::start("");
    let topic = unique("TopicGrpcPull");
    let group = unique("CG-pull");
    g.create_topic(&topic, 2, "NORMAL");
    let mut c = g.client();
    for i in 0..4 {
        let r = send(&g, &mut c, "p", vec![message(&topic, &format!("pull-{i}"))]);
        assert_eq!(code(&r.status), Code::Ok, "{:?}", r.status);
    }
    let mq = |id: i32| MessageQueue {
        topic: resource(&topic),
        id,
        ..Default::default()
    };
    let query = |c: &mut Client, id: i32, policy: QueryOffsetPolicy, at_ms: Option<i64>| {
        let request = QueryOffsetRequest {
            message_queue: Some(mq(id)),
            query_offset_policy: policy as i32,
            timestamp: at_ms.map(|ms| prost_types::Timestamp {
                seconds: ms / 1000,
                nanos: 0,
            }),
        };
        let r = g
            .runtime
            .block_on(c.query_offset(with_id("c", request)))
            .unwrap()
            .into_inner();
        assert_eq!(code(&r.status), Code::Ok, "{:?}", r.status);
        r.offset
    };
    let pull = |c: &mut Client, id: i32, offset: i64, poll_ms: i64| {
        let request = PullMessageRequest {
            group: resource(&group),
            message_queue: Some(mq(id)),
            offset,
            batch_size: 32,
            filter_expression: Some(FilterExpression {
                r#type: FilterType::Tag as i32,
                expression: "*".into(),
            }),
            long_polling_timeout: Some(prost_types::Duration {
                seconds: poll_ms / 1000,
                nanos: (poll_ms % 1000) as i32 * 1_000_000,
            }),
        };
        g.runtime.block_on(async {
            let mut stream = c
                .pull_message(with_id("c", request))
                .await
                .expect("pull")
                .into_inner();
            let mut frames = Vec::new();
            while let Some(f) = stream.message().await.expect("stream") {
                frames.push(f.content.expect("frame content"));
            }
            frames
        })
    };
    // A send is answered once stored; the queues show it once reput has dispatched it.
    wait_until(
        "the 4 sends in the queues",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || match (0..2)
            .map(|id| query(&mut c, id, QueryOffsetPolicy::End, None))
            .sum::<i64>()
        {
            4 => Ok(()),
            n => Err(format!("{n} so far")),
        },
    );
    let mut total = 0;
    for id in 0..2 {
        assert_eq!(query(&mut c, id, QueryOffsetPolicy::Beginning, None), 0);
        let end = query(&mut c, id, QueryOffsetPolicy::End, None);
        let at = query(&mut c, id, QueryOffsetPolicy::Timestamp, Some(0));
        assert!((0..=end).contains(&at), "offset at time 0: {at}, end {end}");
        total += end;

        let frames = pull(&mut c, id, 0, 0);
        let Some(pull_message_response::Content::Status(s)) = frames.first() else {
            panic!("the first frame is not the status: {frames:?}")
        };
        let bodies: Vec<String> = frames
            .iter()
            .filter_map(|f| match f {
                pull_message_response::Content::Message(m) => {
                    Some(String::from_utf8(m.body.clone()).unwrap())
                }
                _ => None,
            })
            .collect();
        assert_eq!(bodies.len() as i64, end, "{s:?}");
        assert!(bodies.iter().all(|b| b.starts_with("pull-")), "{bodies:?}");
        assert_eq!(
            frames.last(),
            Some(&pull_message_response::Content::NextOffset(end))
        );
        // At the end of the queue: nothing, and the same next offset, after the long poll.
        let frames = pull(&mut c, id, end, 500);
        let Some(pull_message_response::Content::Status(s)) = frames.first() else {
            panic!("no status: {frames:?}")
        };
        assert_eq!(s.code, Code::MessageNotFound as i32, "{s:?}");
        assert_eq!(
            frames.last(),
            Some(&pull_message_response::Content::NextOffset(end))
        );

        let get = |c: &mut Client| {
            let request = GetOffsetRequest {
                group: resource(&group),
                message_queue: Some(mq(id)),
            };
            g.runtime
                .block_on(c.get_offset(with_id("c", request)))
                .unwrap()
                .into_inner()
        };
        assert_eq!(code(&get(&mut c).status), Code::OffsetNotFound);
        let update = UpdateOffsetRequest {
            group: resource(&group),
            message_queue: Some(mq(id)),
            offset: end,
        };
        let r = g
            .runtime
            .block_on(c.update_offset(with_id("c", update)))
            .unwrap()
            .into_inner();
        assert_eq!(code(&r.status), Code::Ok, "{:?}", r.status);
        let got = get(&mut c);
        assert_eq!((code(&got.status), got.offset), (Code::Ok, end));
    }
    assert_eq!(total, 4, "every message is in one of the two queues");
    let bad = pull(&mut c, 0, -1, 0);
    assert!(
        matches!(&bad[..], [pull_message_response::Content::Status(s)] if s.code == Code::IllegalOffset as i32),
        "{bad:?}"
    );
    let no_queue = pull(&mut c, -1, 0, 0);
    assert!(
        matches!(&no_queue[..], [pull_message_response::Content::Status(s)] if s.code == Code::BadRequest as i32),
        "{no_queue:?}"
    );
}

#[test]
fn grpc_fifo_groups_keep_their_queue_and_delay_messages_wait() {
    let g = Grpc::start("");
    let fifo_topic = unique("TopicGrpcFifo");
    let delay_topic = unique("TopicGrpcDelay");
    g.create_topic(&fifo_topic, 8, "FIFO");
    g.create_topic(&delay_topic, 2, "DELAY");
    let mut c = g.client();
    let mut queues = BTreeSet::new();
    for i in 0..10 {
        let mut m = message(&fifo_topic, &format!("f{i}"));
        m.system_properties.as_mut().unwrap().message_group = Some("order-1".into());
        m.system_properties.as_mut().unwrap().message_type = MessageType::Fifo as i32;
        let r = send(&g, &mut c, "p", vec![m]);
        assert_eq!(code(&r.status), Code::Ok, "{:?}", r.status);
        assert_eq!(
            r.entries[0].offset,
            i64::from(i),
            "one queue, offsets in order"
        );
        queues.insert(r.entries[0].offset - i64::from(i));
    }
    assert_eq!(queues.len(), 1);

    let group = unique("CG-delay");
    let (reply, _s, _t) = telemetry(&g, &mut c, "dc", consumer_settings(&group, &delay_topic));
    assert_eq!(code(&reply.status), Code::Ok);
    let deliver_at = std::time::SystemTime::now() + Duration::from_secs(3);
    let at = deliver_at.duration_since(std::time::UNIX_EPOCH).unwrap();
    let mut m = message(&delay_topic, "later");
    m.system_properties.as_mut().unwrap().message_type = MessageType::Delay as i32;
    m.system_properties.as_mut().unwrap().delivery_timestamp = Some(prost_types::Timestamp {
        seconds: at.as_secs() as i64,
        nanos: 0,
    });
    let sent_at = Instant::now();
    let r = send(&g, &mut c, "p", vec![m]);
    assert_eq!(code(&r.status), Code::Ok, "{:?}", r.status);
    let mut got = Vec::new();
    while got.is_empty() && sent_at.elapsed() < Duration::from_secs(30) {
        got = receive(&g, &mut c, "dc", &group, &delay_topic, 5).1;
    }
    assert_eq!(got.len(), 1, "the delayed message arrives");
    assert!(
        sent_at.elapsed() >= Duration::from_millis(2000),
        "not before its time"
    );
    let sp = got[0].system_properties.as_ref().unwrap();
    assert_eq!(sp.message_type, MessageType::Delay as i32);
    assert_eq!(
        sp.delivery_timestamp.as_ref().map(|t| t.seconds),
        Some(at.as_secs() as i64)
    );
}

fn recall(g: &Grpc, c: &mut Client, topic: &str, handle: &str) -> RecallMessageResponse {
    let request = RecallMessageRequest {
        topic: resource(topic),
        recall_handle: handle.to_string(),
    };
    g.runtime
        .block_on(c.recall_message(with_id("p", request)))
        .expect("recall answered")
        .into_inner()
}

/// A delay message is recalled with the handle its send answered with: it never arrives,
/// while its neighbour in the same slot does; a recall after delivery or with a broken
/// handle is refused.
#[test]
fn grpc_recall_cancels_a_delay_message_before_its_time() {
    let g = Grpc::start("recallMessageEnable=true\n");
    let topic = unique("TopicGrpcRecall");
    g.create_topic(&topic, 2, "DELAY");
    let mut c = g.client();
    let at = (std::time::SystemTime::now() + Duration::from_secs(4))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let delayed = |body: &str| {
        let mut m = message(&topic, body);
        let sp = m.system_properties.as_mut().unwrap();
        sp.message_type = MessageType::Delay as i32;
        sp.delivery_timestamp = Some(prost_types::Timestamp {
            seconds: at.as_secs() as i64,
            nanos: 0,
        });
        m
    };
    let sent_at = Instant::now();
    let recalled = send(&g, &mut c, "p", vec![delayed("recalled")]);
    let kept = send(&g, &mut c, "p", vec![delayed("kept")]);
    for r in [&recalled, &kept] {
        assert_eq!(code(&r.status), Code::Ok, "{:?}", r.status);
        assert!(!r.entries[0].recall_handle.is_empty(), "{r:?}");
    }
    let r = recall(&g, &mut c, &topic, &recalled.entries[0].recall_handle);
    assert_eq!(code(&r.status), Code::Ok, "{:?}", r.status);
    assert_eq!(r.message_id, recalled.entries[0].message_id);
    let broken = recall(&g, &mut c, &topic, "not a handle");
    assert_eq!(code(&broken.status), Code::InternalServerError);
    assert!(
        broken
            .status
            .as_ref()
            .unwrap()
            .message
            .contains("recall handle is invalid"),
        "{broken:?}"
    );

    let group = unique("CG-recall");
    let mut got = Vec::new();
    while got.is_empty() && sent_at.elapsed() < Duration::from_secs(30) {
        got = receive(&g, &mut c, "rc", &group, &topic, 5).1;
    }
    // Both were in one slot: a second receive would find the recalled one if it came.
    got.extend(receive(&g, &mut c, "rc", &group, &topic, 5).1);
    let bodies: Vec<&[u8]> = got.iter().map(|m| m.body.as_slice()).collect();
    assert_eq!(
        bodies,
        vec![b"kept".as_slice()],
        "only the kept message arrives"
    );

    let late = recall(&g, &mut c, &topic, &kept.entries[0].recall_handle);
    assert_eq!(code(&late.status), Code::InternalServerError);
    assert!(
        late.status
            .as_ref()
            .unwrap()
            .message
            .contains("timestamp invalid"),
        "{late:?}"
    );
}

fn end_tx(
    topic: &str,
    message_id: impl Into<String>,
    transaction_id: impl Into<String>,
    resolution: TransactionResolution,
    source: TransactionSource,
) -> EndTransactionRequest {
    EndTransactionRequest {
        topic: resource(topic),
        message_id: message_id.into(),
        transaction_id: transaction_id.into(),
        resolution: resolution as i32,
        source: source as i32,
        trace_context: String::new(),
    }
}

#[test]
fn grpc_transactions_commit_and_answer_check_backs() {
    let g = Grpc::start("transactionCheckInterval=1000\ntransactionTimeOut=1000\n");
    let topic = unique("TopicGrpcTx");
    let group = unique("CG-tx");
    g.create_topic(&topic, 2, "TRANSACTION");
    let mut c = g.client();
    let (reply, mut checks, _keep) = telemetry(&g, &mut c, "txp", producer_settings(&topic));
    assert_eq!(code(&reply.status), Code::Ok);
    let half = |body: &str| {
        let mut m = message(&topic, body);
        m.system_properties.as_mut().unwrap().message_type = MessageType::Transaction as i32;
        m
    };

    // Committed by the client.
    let r = send(&g, &mut c, "txp", vec![half("committed")]);
    assert_eq!(code(&r.status), Code::Ok, "{:?}", r.status);
    let e = &r.entries[0];
    assert!(!e.transaction_id.is_empty());
    let end = g
        .runtime
        .block_on(c.end_transaction(with_id(
            "txp",
            end_tx(
                &topic,
                e.message_id.clone(),
                e.transaction_id.clone(),
                TransactionResolution::Commit,
                TransactionSource::SourceClient,
            ),
        )))
        .unwrap()
        .into_inner();
    assert_eq!(code(&end.status), Code::Ok, "{:?}", end.status);

    // Left open: the broker asks through the Telemetry stream; the answer rolls it back.
    let r = send(&g, &mut c, "txp", vec![half("rolled-back")]);
    assert_eq!(code(&r.status), Code::Ok);
    let open_id = r.entries[0].message_id.clone();
    // The stream repeats its first Settings reply once (for the Node.js SDK); skip it.
    let check = g
        .runtime
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(30), async {
                loop {
                    let c = checks
                        .message()
                        .await
                        .expect("stream healthy")
                        .expect("a command");
                    if !matches!(c.command, Some(telemetry_command::Command::Settings(_))) {
                        return c;
                    }
                }
            })
            .await
        })
        .expect("a check-back within 30 s");
    let Some(telemetry_command::Command::RecoverOrphanedTransactionCommand(rc)) = check.command
    else {
        panic!("expected a transaction check, got {check:?}");
    };
    let m = rc.message.expect("the half message");
    assert_eq!(m.body, b"rolled-back");
    assert_eq!(m.system_properties.as_ref().unwrap().message_id, open_id);
    let end = g
        .runtime
        .block_on(c.end_transaction(with_id(
            "txp",
            end_tx(
                &topic,
                open_id,
                rc.transaction_id,
                TransactionResolution::Rollback,
                TransactionSource::SourceServerCheck,
            ),
        )))
        .unwrap()
        .into_inner();
    assert_eq!(code(&end.status), Code::Ok, "{:?}", end.status);

    // Only the committed one is delivered.
    let (reply, _s, _t) = telemetry(&g, &mut c, "txc", consumer_settings(&group, &topic));
    assert_eq!(code(&reply.status), Code::Ok);
    let mut bodies = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let (_, got, _) = receive(&g, &mut c, "txc", &group, &topic, 5);
        if got.is_empty() && !bodies.is_empty() {
            break;
        }
        bodies.extend(got.into_iter().map(|m| m.body));
    }
    assert_eq!(bodies, vec![b"committed".to_vec()]);
}
