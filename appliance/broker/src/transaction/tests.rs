//! Transaction tests over the in-memory store: END_TRANSACTION outcomes and refusals, op
//! records, and check-back rounds against a fake producer connection.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringmq_remoting::codes::ResponseCode;
use ringmq_remoting::header::{
    CheckTransactionStateRequestHeader, EndTransactionRequestHeader, TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE, TRANSACTION_ROLLBACK_TYPE,
};
use ringmq_remoting::message::properties::{self, keys};
use ringmq_remoting::message::record::{self, Decoded, RecordVersion};
use ringmq_remoting::message::{id, sysflag};
use ringmq_remoting::RemotingCommand;
use ringmq_runtime::Reply;
use ringmq_store::{AcceptAll, MemStore, PutMessageStatus, StoreApi};

use super::*;
use crate::config::BrokerConfig;
use crate::context::BrokerContext;
use crate::metadata::topic_config::{
    TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC,
};
use crate::schedule::SystemClock;
use crate::test_support::{run, run_deferred, run_on, test_context, FakeChannel};

const PG: &str = "PG_TX";
const BODY: &[u8] = b"order-42 paid";

/// What the send response says about a half message.
#[derive(Debug, Clone)]
struct Half {
    queue_offset: i64,
    commit_log_offset: i64,
    uniq: String,
}

/// Sends a half message (TRAN_MSG, prepared sysflag) born `age_ms` ago.
fn send_half(
    ctx: &Arc<BrokerContext>,
    topic: &str,
    queue_id: i32,
    extra: &str,
    age_ms: i64,
) -> Half {
    let uniq = format!("UNIQ{:028}", rand_suffix());
    let props = format!(
        "TRAN_MSG\u{1}true\u{2}PGROUP\u{1}{PG}\u{2}UNIQ_KEY\u{1}{uniq}\u{2}TAGS\u{1}TagA\u{2}KEYS\u{1}K1\u{2}WAIT\u{1}true\u{2}{extra}"
    );
    let born = (crate::persist::now_ms() - age_ms).to_string();
    let mut r = RemotingCommand::request(310, 1);
    for (k, v) in [
        ("a", PG),
        ("b", topic),
        ("c", "TBW102"),
        ("d", "4"),
        ("e", &queue_id.to_string()),
        ("f", &sysflag::TRANSACTION_PREPARED_TYPE.to_string()),
        ("g", &born),
        ("h", "7"),
        ("i", &props),
    ] {
        r.ext_fields.insert(k, v);
    }
    let resp = run(ctx, r.with_body(BODY.to_vec()));
    assert_eq!(resp.command.code, 0, "{:?}", resp.command.remark);
    let f = &resp.command.ext_fields;
    Half {
        queue_offset: f.get("queueOffset").unwrap().parse().unwrap(),
        commit_log_offset: id::decode_offset_msg_id(f.get("msgId").unwrap())
            .unwrap()
            .commit_log_offset,
        uniq,
    }
}

fn rand_suffix() -> u64 {
    static N: AtomicI64 = AtomicI64::new(1);
    N.fetch_add(1, Ordering::Relaxed) as u64
}

fn end_request(half: &Half, decision: i32, from_check: bool) -> RemotingCommand {
    let header = EndTransactionRequestHeader {
        topic: Some("TopicTx".into()),
        producer_group: PG.into(),
        tran_state_table_offset: half.queue_offset,
        commit_log_offset: half.commit_log_offset,
        commit_or_rollback: decision,
        from_transaction_check: Some(from_check),
        msg_id: half.uniq.clone(),
        transaction_id: Some(half.uniq.clone()),
        ..Default::default()
    };
    RemotingCommand::request(37, 9).with_header(&header)
}

fn records(store: &MemStore, topic: &str, queue_id: i32) -> Vec<bytes::Bytes> {
    store
        .get_message(topic, queue_id, 0, 64, 1 << 22, &AcceptAll)
        .messages
}

fn props_of(raw: &[u8]) -> (record::StoredRecord<'_>, String) {
    let Ok(Decoded::Message(r)) = record::decode_record(raw, true) else {
        panic!("not a message record")
    };
    let p = String::from_utf8(r.properties.to_vec()).unwrap();
    (r, p)
}

fn register_producer(ctx: &Arc<BrokerContext>, channel: &Arc<FakeChannel>) {
    let body = format!(r#"{{"clientID":"producer-1","producerDataSet":[{{"groupName":"{PG}"}}]}}"#);
    let resp = run_on(
        ctx,
        RemotingCommand::request(34, 1).with_body(body),
        channel,
    );
    assert_eq!(resp.command.code, 0);
}

fn checker(ctx: &Arc<BrokerContext>, check_max: i32) -> TransactionalMessageCheckService {
    let config = TransactionConfig {
        check_max,
        op_grace_ms: 0,
        ..TransactionConfig::default()
    };
    TransactionalMessageCheckService::with_config(ctx.clone(), config, Arc::new(SystemClock))
}

/// One check round that starts strictly after everything stored so far (store times are ms).
fn round(svc: &TransactionalMessageCheckService) -> CheckOutcome {
    std::thread::sleep(Duration::from_millis(3));
    svc.check_once()
}

fn checks_sent(channel: &FakeChannel) -> Vec<RemotingCommand> {
    channel
        .sent()
        .into_iter()
        .filter(|c| c.code == 39)
        .collect()
}

#[test]
fn commit_puts_the_message_in_its_real_queue_and_marks_the_half_done() {
    let (ctx, store) = test_context(BrokerConfig::default());
    let half = send_half(&ctx, "TopicTx", 2, "", 1_000);
    assert!(
        records(&store, "TopicTx", 2).is_empty(),
        "half messages are invisible"
    );
    let resp = run(&ctx, end_request(&half, TRANSACTION_COMMIT_TYPE, false));
    assert_eq!(resp.command.code, 0, "{:?}", resp.command.remark);

    let got = records(&store, "TopicTx", 2);
    assert_eq!(got.len(), 1);
    let (r, p) = props_of(&got[0]);
    assert_eq!(r.topic().unwrap(), "TopicTx");
    assert_eq!(r.queue_id, 2);
    assert_eq!(r.queue_offset, 0);
    assert_eq!(r.body, BODY);
    assert_eq!(r.flag, 7);
    assert_eq!(
        sysflag::transaction_value(r.sys_flag),
        sysflag::TRANSACTION_COMMIT_TYPE
    );
    assert_eq!(r.prepared_transaction_offset, half.commit_log_offset);
    // Upstream 5.x stores the half message's properties unchanged.
    assert_eq!(properties::find(&p, keys::REAL_TOPIC), Some("TopicTx"));
    assert_eq!(properties::find(&p, keys::REAL_QID), Some("2"));
    assert_eq!(properties::find(&p, keys::TRAN_MSG), Some("true"));
    assert_eq!(properties::find(&p, keys::WAIT), Some("true"));
    assert_eq!(properties::find(&p, keys::TAGS), Some("TagA"));
    assert_eq!(
        properties::find(&p, keys::UNIQ_KEY),
        Some(half.uniq.as_str())
    );
    assert_eq!(
        properties::find(&p, keys::TRANSACTION_ID),
        Some(half.uniq.as_str())
    );
    assert_eq!(properties::find(&p, keys::PGROUP), Some(PG));
    // Indexed under its keys like any message.
    assert_eq!(
        store.query_message("TopicTx", "K1", 10, 0, i64::MAX).len(),
        1
    );

    let ops = records(&store, TRANS_OP_HALF_TOPIC, 0);
    assert_eq!(ops.len(), 1);
    let (op, op_props) = props_of(&ops[0]);
    assert_eq!(op.body, format!("{},", half.queue_offset).as_bytes());
    assert_eq!(properties::find(&op_props, keys::TAGS), Some("d"));
    assert_eq!(properties::find(&op_props, keys::WAIT), Some("false"));
    assert!(properties::find(&op_props, keys::UNIQ_KEY).is_some());
    assert_eq!(op.sys_flag & sysflag::TRANSACTION_TYPE_MASK, 0);
    assert_eq!(op.store_host, ctx.store_host);
}

#[test]
fn oneway_commit_is_applied_without_an_answer() {
    let (ctx, store) = test_context(BrokerConfig::default());
    let half = send_half(&ctx, "TopicTx", 0, "", 1_000);
    let mut req = end_request(&half, TRANSACTION_COMMIT_TYPE, false);
    req.mark_oneway();
    let (handled, _rx) = run_deferred(&ctx, req);
    assert!(matches!(handled, Reply::Nothing));
    assert_eq!(records(&store, "TopicTx", 0).len(), 1);
    assert_eq!(records(&store, TRANS_OP_HALF_TOPIC, 0).len(), 1);
}

#[test]
fn rollback_only_marks_done_and_unknown_does_nothing() {
    let (ctx, store) = test_context(BrokerConfig::default());
    let half = send_half(&ctx, "TopicTx", 1, "", 1_000);
    let (handled, _rx) = run_deferred(&ctx, end_request(&half, TRANSACTION_NOT_TYPE, false));
    assert!(matches!(handled, Reply::Nothing), "unknown gets no answer");
    assert!(records(&store, TRANS_OP_HALF_TOPIC, 0).is_empty());

    let resp = run(&ctx, end_request(&half, TRANSACTION_ROLLBACK_TYPE, false));
    assert_eq!(resp.command.code, 0, "{:?}", resp.command.remark);
    assert!(records(&store, "TopicTx", 1).is_empty());
    let ops = records(&store, TRANS_OP_HALF_TOPIC, 0);
    assert_eq!(ops.len(), 1);
    assert_eq!(props_of(&ops[0]).0.body, b"0,");
}

#[test]
fn bad_input_is_answered_with_a_code() {
    let (ctx, store) = test_context(BrokerConfig::default());
    let half = send_half(&ctx, "TopicTx", 0, "", 1_000);
    let code = |req: RemotingCommand| {
        let r = run(&ctx, req).command;
        (r.code, r.remark.unwrap_or_default())
    };

    let mut req = end_request(&half, TRANSACTION_COMMIT_TYPE, false);
    req.ext_fields.remove("producerGroup");
    let (c, remark) = code(req);
    assert_eq!(c, ResponseCode::SystemError.code());
    assert!(remark.contains("producerGroup"), "{remark}");

    let mut req = end_request(&half, TRANSACTION_COMMIT_TYPE, false);
    req.ext_fields.insert("commitLogOffset", "not-a-number");
    assert_eq!(code(req).0, ResponseCode::SystemError.code());

    for bad_offset in [999_999, -1, half.commit_log_offset + 3] {
        let wrong = Half {
            commit_log_offset: bad_offset,
            ..half.clone()
        };
        let (c, remark) = code(end_request(&wrong, TRANSACTION_COMMIT_TYPE, false));
        assert_eq!(c, ResponseCode::SystemError.code());
        assert!(remark.starts_with(end::HALF_NOT_FOUND), "{remark}");
    }

    // A normal message is not a half message, even with matching offsets.
    let normal = crate::test_support::send_simple(&ctx, "TopicN", 0, "", b"x");
    let normal_offset = id::decode_offset_msg_id(normal.command.ext_fields.get("msgId").unwrap())
        .unwrap()
        .commit_log_offset;
    let not_half = Half {
        queue_offset: 0,
        commit_log_offset: normal_offset,
        uniq: "U".into(),
    };
    let (c, remark) = code(end_request(&not_half, TRANSACTION_COMMIT_TYPE, false));
    assert_eq!(c, ResponseCode::SystemError.code());
    assert!(remark.starts_with(end::HALF_NOT_FOUND), "{remark}");

    let mut req = end_request(&half, TRANSACTION_COMMIT_TYPE, false);
    req.ext_fields.insert("producerGroup", "OTHER");
    assert_eq!(code(req).1, "The producer group wrong");
    let mut req = end_request(&half, TRANSACTION_COMMIT_TYPE, false);
    req.ext_fields.insert("tranStateTableOffset", "5");
    assert_eq!(code(req).1, "The transaction state table offset wrong");

    // Oneway garbage: no answer, no panic, nothing written.
    let mut req = RemotingCommand::request(37, 3);
    req.mark_oneway();
    assert!(matches!(run_deferred(&ctx, req).0, Reply::Nothing));
    let (handled, _rx) = run_deferred(&ctx, end_request(&half, 5, false));
    assert!(
        matches!(handled, Reply::Nothing),
        "unknown decision value is ignored"
    );

    // The store refuses the final message: upstream's answer, and the half stays undecided.
    store.force_put_status(Some(PutMessageStatus::OsPageCacheBusy));
    let (c, remark) = code(end_request(&half, TRANSACTION_COMMIT_TYPE, false));
    assert_eq!(c, ResponseCode::SystemError.code());
    assert!(remark.starts_with("OS page cache busy"), "{remark}");
    store.force_put_status(None);
    assert!(records(&store, "TopicTx", 0).is_empty());
    assert!(records(&store, TRANS_OP_HALF_TOPIC, 0).is_empty());

    let slave = BrokerConfig {
        broker_id: 1,
        ..BrokerConfig::default()
    };
    let (sctx, _) = test_context(slave);
    assert_eq!(
        run(&sctx, end_request(&half, TRANSACTION_COMMIT_TYPE, false))
            .command
            .code,
        ResponseCode::SlaveNotAvailable.code()
    );
}

#[test]
fn late_producer_decision_past_check_immunity_is_illegal_unless_from_a_check() {
    let (ctx, store) = test_context(BrokerConfig::default());
    // Immunity 1 s is below transactionTimeOut (6 s), so 6 s applies; born 10 s ago.
    let half = send_half(
        &ctx,
        "TopicTx",
        0,
        "CHECK_IMMUNITY_TIME_IN_SECONDS\u{1}1\u{2}",
        10_000,
    );
    let resp = run(&ctx, end_request(&half, TRANSACTION_COMMIT_TYPE, false));
    assert_eq!(resp.command.code, ResponseCode::IllegalOperation.code());
    assert!(records(&store, "TopicTx", 0).is_empty());
    let resp = run(&ctx, end_request(&half, TRANSACTION_COMMIT_TYPE, true));
    assert_eq!(resp.command.code, 0, "{:?}", resp.command.remark);
    assert_eq!(records(&store, "TopicTx", 0).len(), 1);
    // Within its immunity a producer may still decide.
    let young = send_half(
        &ctx,
        "TopicTx",
        0,
        "CHECK_IMMUNITY_TIME_IN_SECONDS\u{1}60\u{2}",
        10_000,
    );
    assert_eq!(
        run(&ctx, end_request(&young, TRANSACTION_ROLLBACK_TYPE, false))
            .command
            .code,
        0
    );
}

#[test]
fn unknown_then_check_back_then_commit_from_the_check() {
    let (ctx, store) = test_context(BrokerConfig::default());
    let producer = FakeChannel::new(77);
    register_producer(&ctx, &producer);
    let half = send_half(&ctx, "TopicTx", 3, "", 10_000);
    let (handled, _rx) = run_deferred(&ctx, end_request(&half, TRANSACTION_NOT_TYPE, false));
    assert!(matches!(handled, Reply::Nothing));

    let svc = checker(&ctx, 15);
    let out = round(&svc);
    assert_eq!((out.checked, out.sent, out.discarded), (1, 1, 0), "{out:?}");
    let sent = checks_sent(&producer);
    assert_eq!(sent.len(), 1);
    let cmd = &sent[0];
    assert!(cmd.is_oneway());
    let h: CheckTransactionStateRequestHeader = cmd.decode_header().unwrap();
    // The check names the re-appended copy (half queue offset 1), not the original.
    assert_eq!(h.tran_state_table_offset, 1);
    assert_ne!(h.commit_log_offset, half.commit_log_offset);
    assert_eq!(h.msg_id.as_deref(), Some(half.uniq.as_str()));
    assert_eq!(h.transaction_id.as_deref(), Some(half.uniq.as_str()));
    assert_eq!(
        h.offset_msg_id.as_deref(),
        Some(id::encode_offset_msg_id(&ctx.store_host, h.commit_log_offset).as_str())
    );
    assert_eq!(
        h.rpc.broker_name.as_deref(),
        Some(ctx.config.broker_name.as_str())
    );
    let Ok(Decoded::Message(body)) = record::decode_record(&cmd.body, true) else {
        panic!("the body is a message record")
    };
    assert_eq!(body.version, RecordVersion::V1);
    assert_eq!(body.topic().unwrap(), "TopicTx");
    assert_eq!(body.queue_id, 3);
    assert_eq!(body.queue_offset, 1);
    assert_eq!(body.physical_offset, h.commit_log_offset);
    assert_eq!(body.body, BODY);
    let bp = std::str::from_utf8(body.properties).unwrap();
    assert_eq!(
        properties::find(bp, keys::TRANSACTION_CHECK_TIMES),
        Some("1")
    );
    assert_eq!(properties::find(bp, keys::PGROUP), Some(PG));
    assert_eq!(
        ctx.offsets
            .query_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0),
        Some(1),
        "the original is consumed by the checker"
    );

    // The producer answers the check for the copy.
    let copy = Half {
        queue_offset: h.tran_state_table_offset,
        commit_log_offset: h.commit_log_offset,
        uniq: half.uniq.clone(),
    };
    let resp = run(&ctx, end_request(&copy, TRANSACTION_COMMIT_TYPE, true));
    assert_eq!(resp.command.code, 0, "{:?}", resp.command.remark);
    let got = records(&store, "TopicTx", 3);
    assert_eq!(got.len(), 1);
    let (r, p) = props_of(&got[0]);
    assert_eq!(r.body, BODY);
    assert_eq!(r.prepared_transaction_offset, copy.commit_log_offset);
    assert_eq!(
        properties::find(&p, keys::UNIQ_KEY),
        Some(half.uniq.as_str())
    );

    // Next round: the copy is done, nothing more is asked; both progresses move on.
    let out = round(&svc);
    assert_eq!((out.checked, out.sent, out.done), (0, 0, 1), "{out:?}");
    assert_eq!(checks_sent(&producer).len(), 1);
    assert_eq!(
        ctx.offsets
            .query_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0),
        Some(2)
    );
    assert_eq!(
        ctx.offsets
            .query_offset(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0),
        Some(1)
    );
}

#[test]
fn ended_and_young_half_messages_are_not_checked() {
    let (ctx, store) = test_context(BrokerConfig::default());
    let producer = FakeChannel::new(5);
    register_producer(&ctx, &producer);
    let committed = send_half(&ctx, "TopicTx", 0, "", 20_000);
    assert_eq!(
        run(
            &ctx,
            end_request(&committed, TRANSACTION_COMMIT_TYPE, false)
        )
        .command
        .code,
        0
    );
    let young = send_half(&ctx, "TopicTx", 0, "", 0);
    let svc = checker(&ctx, 15);
    let out = round(&svc);
    assert_eq!((out.checked, out.done), (0, 1), "{out:?}");
    assert!(checks_sent(&producer).is_empty());
    // Stopped at the young one, which stays for a later round.
    assert_eq!(
        ctx.offsets
            .query_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0),
        Some(young.queue_offset)
    );
    assert_eq!(
        store.max_offset_in_queue(TRANS_HALF_TOPIC, 0),
        2,
        "no copies"
    );
}

#[test]
fn check_max_discards_into_the_check_max_time_topic() {
    let (ctx, store) = test_context(BrokerConfig::default());
    let producer = FakeChannel::new(6);
    register_producer(&ctx, &producer);
    send_half(&ctx, "TopicTx", 0, "", 10_000);
    let svc = checker(&ctx, 3);
    for n in 1..=3 {
        let out = round(&svc);
        assert_eq!((out.sent, out.discarded), (1, 0), "round {n}: {out:?}");
    }
    let times: Vec<String> = checks_sent(&producer)
        .iter()
        .map(|c| {
            let Ok(Decoded::Message(r)) = record::decode_record(&c.body, false) else {
                panic!()
            };
            let p = std::str::from_utf8(r.properties).unwrap();
            properties::find(p, keys::TRANSACTION_CHECK_TIMES)
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(times, ["1", "2", "3"]);
    let out = round(&svc);
    assert_eq!((out.sent, out.discarded), (0, 1), "{out:?}");
    let parked = records(&store, TRANS_CHECK_MAX_TIME_TOPIC, 0);
    assert_eq!(parked.len(), 1);
    let (r, p) = props_of(&parked[0]);
    assert_eq!(r.body, BODY);
    assert_eq!(properties::find(&p, keys::REAL_TOPIC), Some("TopicTx"));
    assert!(ctx.topics.select(TRANS_CHECK_MAX_TIME_TOPIC).is_some());
    // Nothing left to do.
    let out = round(&svc);
    assert_eq!(out, CheckOutcome::default());
    assert_eq!(checks_sent(&producer).len(), 3);
}

#[test]
fn inside_check_immunity_the_message_is_kept_until_its_producer_ends_it() {
    let (ctx, store) = test_context(BrokerConfig::default());
    let producer = FakeChannel::new(10);
    register_producer(&ctx, &producer);
    let half = send_half(
        &ctx,
        "TopicTx",
        0,
        "CHECK_IMMUNITY_TIME_IN_SECONDS\u{1}60\u{2}",
        10_000,
    );
    let svc = checker(&ctx, 15);
    let out = round(&svc);
    assert_eq!((out.immunity_copies, out.checked), (1, 0), "{out:?}");
    let copies = records(&store, TRANS_HALF_TOPIC, 0);
    assert_eq!(copies.len(), 2);
    let (_, p) = props_of(&copies[1]);
    assert_eq!(
        properties::find(&p, keys::TRAN_PREPARED_QUEUE_OFFSET),
        Some("0"),
        "the copy names the original offset"
    );
    // The producer commits the original within its immunity.
    let resp = run(&ctx, end_request(&half, TRANSACTION_COMMIT_TYPE, false));
    assert_eq!(resp.command.code, 0, "{:?}", resp.command.remark);
    let out = round(&svc);
    assert_eq!(
        (out.done, out.immunity_copies, out.checked),
        (1, 0, 0),
        "{out:?}"
    );
    assert!(checks_sent(&producer).is_empty());
    assert_eq!(
        store.max_offset_in_queue(TRANS_HALF_TOPIC, 0),
        2,
        "no more copies"
    );
    assert_eq!(
        ctx.offsets
            .query_offset(TRANS_CHECK_GROUP, TRANS_OP_HALF_TOPIC, 0),
        Some(1)
    );
}

#[test]
fn without_a_live_producer_the_copy_waits_for_the_next_round() {
    let (ctx, store) = test_context(BrokerConfig::default());
    send_half(&ctx, "TopicTx", 0, "", 10_000);
    let svc = checker(&ctx, 15);
    let out = round(&svc);
    assert_eq!((out.checked, out.sent), (1, 0), "{out:?}");
    assert_eq!(store.max_offset_in_queue(TRANS_HALF_TOPIC, 0), 2);
    let producer = FakeChannel::new(8);
    register_producer(&ctx, &producer);
    let out = round(&svc);
    assert_eq!((out.checked, out.sent), (1, 1), "{out:?}");
    assert_eq!(checks_sent(&producer).len(), 1);
}

#[test]
fn a_refused_recheck_keeps_the_half_message_for_the_next_round() {
    let (ctx, store) = test_context(BrokerConfig::default());
    send_half(&ctx, "TopicTx", 0, "", 10_000);
    let svc = checker(&ctx, 15);
    store.force_put_status(Some(PutMessageStatus::OsPageCacheBusy));
    let out = round(&svc);
    assert_eq!(out.checked, 0);
    assert_eq!(
        ctx.offsets
            .query_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0),
        None,
        "no progress past an unchecked message"
    );
    store.force_put_status(None);
    assert_eq!(round(&svc).checked, 1);
}

#[test]
fn op_bodies_and_settings_parse_leniently() {
    assert_eq!(parse_op_body(b"17,18,x,,21,"), vec![17, 18, 21]);
    assert_eq!(parse_op_body(b""), Vec::<i64>::new());
    assert_eq!(end_immunity_ms("1", 6000), 6000);
    assert_eq!(end_immunity_ms("60", 6000), 60_000);
    assert_eq!(end_immunity_ms("junk", 6000), 6000);

    let mut c = BrokerConfig::default();
    assert_eq!(
        TransactionConfig::from_broker_config(&c),
        TransactionConfig::default()
    );
    c.extra.insert("transactionTimeOut".into(), "2000".into());
    c.extra.insert("transactionCheckMax".into(), "x".into());
    c.extra
        .insert("transactionCheckInterval".into(), "1".into());
    let t = TransactionConfig::from_broker_config(&c);
    assert_eq!(t.timeout_ms, 2000);
    assert_eq!(
        t.check_max, DEFAULT_TRANSACTION_CHECK_MAX,
        "bad value keeps the default"
    );
    assert_eq!(t.check_interval_ms, MIN_TRANSACTION_CHECK_INTERVAL_MS);
}

#[test]
fn threaded_service_checks_on_its_interval_and_stops() {
    let (ctx, _store) = test_context(BrokerConfig::default());
    let producer = FakeChannel::new(9);
    register_producer(&ctx, &producer);
    send_half(&ctx, "TopicTx", 0, "", 10_000);
    let config = TransactionConfig {
        check_interval_ms: 20,
        op_grace_ms: 0,
        ..TransactionConfig::default()
    };
    let svc =
        TransactionalMessageCheckService::with_config(ctx.clone(), config, Arc::new(SystemClock));
    svc.start().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while checks_sent(&producer).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    svc.stop();
    assert!(!checks_sent(&producer).is_empty(), "a check within 5 s");

    let slave = BrokerConfig {
        broker_id: 1,
        ..BrokerConfig::default()
    };
    let (sctx, _) = test_context(slave);
    assert!(TransactionalMessageCheckService::new(sctx).start().is_err());
}
