//! Codec micro-benchmarks for the per-message hot path of a broker's send handling.
//!
//! Every produced message crosses these functions once: the network core splits a
//! `SEND_MESSAGE_V2` frame off the receive buffer and parses its JSON header (or the
//! ROCKETMQ binary header some clients send), reads the message's property string,
//! encodes the stored CommitLog record, and encodes the response frame. They are measured
//! in isolation so a regression in one shows up here before it shows up, diluted, in an
//! end-to-end run (`benches/README.md`).
//!
//! The request is a typical Java client's: the single-letter header `a`..`n` with a
//! property string of `UNIQ_KEY`, `WAIT`, `TAGS`, `KEYS`, and a 1 KiB body. Throughput is
//! reported in bytes for whole frames and records (bandwidth matters there) and in
//! elements (operations) for header and property parsing. The send and pull headers are
//! measured both owned (the clients' typed header) and borrowed (the broker's per-request
//! decode).
//!
//! `cargo bench -p ringmq-remoting --bench codec` (add `-- --quick` for a short run).

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use ringmq_remoting::command::{binary_header, json_header};
use ringmq_remoting::header::{
    PullMessageHeaderRef, PullMessageRequestHeader, SendMessageHeaderRef,
    SendMessageRequestHeaderV2, SendMessageResponseHeader, PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND,
};
use ringmq_remoting::message::properties::MessageProperties;
use ringmq_remoting::message::record::{encode_record, RecordFields};
use ringmq_remoting::{FrameDecoder, RemotingCommand, RequestCode, ResponseCode, SerializeType};

/// Body size of the typical message.
const BODY_BYTES: usize = 1024;

/// A Java producer's property string: 0x01 between name and value, 0x02 after each pair.
const PROPERTIES: &str = "UNIQ_KEY\u{1}7F00000100012A9F1F2C6B1E5D8C0000\u{2}WAIT\u{1}true\u{2}\
TAGS\u{1}TagA\u{2}KEYS\u{1}order-20240611-000042\u{2}";

fn send_header() -> SendMessageRequestHeaderV2 {
    SendMessageRequestHeaderV2 {
        a: "please_rename_unique_group_name".into(),
        b: "TopicTest".into(),
        c: "TBW102".into(),
        d: 4,
        e: 3,
        f: 0,
        g: 1_718_000_000_000,
        h: 0,
        i: Some(PROPERTIES.into()),
        j: Some(0),
        k: Some(false),
        l: Some(16),
        m: Some(false),
        n: Some("broker-a".into()),
    }
}

fn send_request(serialize_type: SerializeType) -> RemotingCommand {
    let mut cmd = RemotingCommand::request(RequestCode::SendMessageV2 as i32, 42)
        .with_header(&send_header())
        .with_body(vec![b'x'; BODY_BYTES]);
    cmd.serialize_type = serialize_type;
    cmd
}

fn send_response(request: &RemotingCommand) -> RemotingCommand {
    request
        .response_to(ResponseCode::Success as i32, None)
        .with_header(&SendMessageResponseHeader {
            msg_id: "7F00000100002A9F0000000000A3B1C0".into(),
            queue_id: 3,
            queue_offset: 123_456,
            transaction_id: Some("7F00000100012A9F1F2C6B1E5D8C0000".into()),
            batch_uniq_id: None,
            recall_handle: None,
        })
}

fn encode(cmd: &RemotingCommand) -> BytesMut {
    let mut out = BytesMut::new();
    cmd.encode(&mut out);
    out
}

/// The header bytes of an encoded frame (after the two length words).
fn header_of(frame: &[u8]) -> &[u8] {
    let word = u32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let len = (word & 0x00FF_FFFF) as usize;
    &frame[8..8 + len]
}

fn frames(c: &mut Criterion) {
    let decoder = FrameDecoder::default();
    let cases = [
        ("send_v2_request", send_request(SerializeType::Json)),
        (
            "send_v2_response",
            send_response(&send_request(SerializeType::Json)),
        ),
    ];
    let mut g = c.benchmark_group("frame");
    for (name, cmd) in &cases {
        let frame = encode(cmd);
        g.throughput(Throughput::Bytes(frame.len() as u64));
        g.bench_function(format!("decode/{name}"), |b| {
            b.iter_batched(
                || frame.clone(),
                |mut buf| {
                    decoder
                        .decode(black_box(&mut buf))
                        .expect("valid frame")
                        .expect("whole frame")
                },
                BatchSize::SmallInput,
            )
        });
        let mut out = BytesMut::with_capacity(frame.len() * 2);
        g.bench_function(format!("encode/{name}"), |b| {
            b.iter(|| {
                out.clear();
                black_box(cmd).encode(&mut out);
                black_box(out.len())
            })
        });
    }
    g.finish();
}

fn headers(c: &mut Criterion) {
    let json_frame = encode(&send_request(SerializeType::Json));
    let binary_frame = encode(&send_request(SerializeType::RocketMq));
    let mut g = c.benchmark_group("header");
    g.throughput(Throughput::Elements(1));
    let json = header_of(&json_frame);
    g.bench_function("json_decode/send_v2", |b| {
        b.iter(|| json_header::read(black_box(json)).expect("valid JSON header"))
    });
    let binary = header_of(&binary_frame);
    g.bench_function("binary_decode/send_v2", |b| {
        b.iter(|| binary_header::read(black_box(binary)).expect("valid binary header"))
    });
    // The typed view the send handler takes of the decoded extFields.
    let cmd = send_request(SerializeType::Json);
    g.bench_function("typed_decode/send_v2", |b| {
        b.iter(|| {
            black_box(&cmd)
                .decode_header::<SendMessageRequestHeaderV2>()
                .expect("valid send header")
        })
    });
    // The borrowed view the broker's send handler takes (strings into the extFields).
    g.bench_function("borrowed_decode/send_v2", |b| {
        b.iter(|| {
            SendMessageHeaderRef::decode_for_code(black_box(cmd.code), black_box(&cmd.ext_fields))
                .expect("valid send header")
        })
    });
    let pull = pull_request();
    g.bench_function("typed_decode/pull", |b| {
        b.iter(|| {
            black_box(&pull)
                .decode_header::<PullMessageRequestHeader>()
                .expect("valid pull header")
        })
    });
    g.bench_function("borrowed_decode/pull", |b| {
        b.iter(|| {
            PullMessageHeaderRef::decode(black_box(&pull.ext_fields)).expect("valid pull header")
        })
    });
    g.finish();
}

/// A push consumer's pull: long polling with the subscription in the request.
fn pull_request() -> RemotingCommand {
    RemotingCommand::request(RequestCode::PullMessage as i32, 43).with_header(
        &PullMessageRequestHeader {
            consumer_group: "please_rename_unique_group_name_4".into(),
            topic: "TopicTest".into(),
            queue_id: 3,
            queue_offset: 123_456,
            max_msg_nums: 32,
            sys_flag: PULL_FLAG_SUSPEND | PULL_FLAG_SUBSCRIPTION | PULL_FLAG_COMMIT_OFFSET,
            commit_offset: 123_400,
            suspend_timeout_millis: 15_000,
            subscription: Some("TagA || TagB".into()),
            sub_version: 1_718_000_000_000,
            expression_type: Some("TAG".into()),
            max_msg_bytes: None,
            request_source: None,
            proxy_forward_client_id: None,
            rpc: Default::default(),
        },
    )
}

fn record(c: &mut Criterion) {
    let body = vec![b'x'; BODY_BYTES];
    let fields = RecordFields {
        queue_id: 3,
        flag: 0,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: 0,
        born_timestamp_ms: 1_718_000_000_000,
        born_host: "192.0.2.7:53211".parse().expect("addr"),
        store_timestamp_ms: 0,
        store_host: "127.0.0.1:10911".parse().expect("addr"),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: &body,
        topic: "TopicTest",
        properties: PROPERTIES.as_bytes(),
    };
    let size = fields.encoded_size();
    let mut g = c.benchmark_group("record");
    g.throughput(Throughput::Bytes(size as u64));
    let mut out = BytesMut::with_capacity(size * 2);
    g.bench_function("encode/1KiB", |b| {
        b.iter(|| {
            out.clear();
            encode_record(black_box(&fields), &mut out).expect("encodable")
        })
    });
    g.finish();
}

fn properties(c: &mut Criterion) {
    let mut g = c.benchmark_group("properties");
    g.throughput(Throughput::Elements(1));
    g.bench_function("parse/4_entries", |b| {
        b.iter(|| MessageProperties::parse(black_box(PROPERTIES)))
    });
    g.finish();
}

criterion_group!(benches, frames, headers, record, properties);
criterion_main!(benches);
