//! END_TRANSACTION (37), features.md §d.2: the producer's (or a check answer's) decision on a
//! half message.
//!
//! The half record is found by `commitLogOffset` and must be a record of the half topic whose
//! `PGROUP`, queue offset and CommitLog offset match the header. COMMIT writes the final record to
//! `REAL_TOPIC`/`REAL_QID` and, once the store kept it, the op record; ROLLBACK writes only the op
//! record. The answer (requests are normally oneway, so usually there is none) is given after the
//! store completed, from the store's completion: the network core never waits.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use ringmq_remoting::codes::ResponseCode;
use ringmq_remoting::header::{
    EndTransactionRequestHeader, TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
};
use ringmq_remoting::message::properties::{keys, MessageProperties};
use ringmq_remoting::message::record::{self, Decoded, StoredRecord};
use ringmq_remoting::message::sysflag::{self, TransactionType};
use ringmq_remoting::RemotingCommand;
use ringmq_runtime::{Reply, RequestContext, Responder};
use ringmq_store::{PutMessageStatus, PutRequest, PutResult};

use super::{
    copy_record, encode_op_record, end_immunity_ms, is_stored, CopyTarget, TransactionConfig,
};
use crate::context::{error_response, header_error, BrokerContext};
use crate::metadata::topic_config::TRANS_HALF_TOPIC;

/// The remark upstream answers when `commitLogOffset` does not lead to a half message.
pub const HALF_NOT_FOUND: &str = "Find prepared transaction message failed";

/// Where the answer goes once the store is done: nowhere for oneway requests (the outcome is
/// logged instead), else the deferred responder.
enum Answer {
    Oneway,
    TwoWay {
        responder: Responder,
        /// Boxed: the answer waits in the store's completion, which stays small.
        template: Box<RemotingCommand>,
        started: Instant,
    },
}

impl Answer {
    fn send(self, ctx: &BrokerContext, code: ResponseCode, remark: Option<String>) {
        match self {
            Answer::Oneway => {
                if code != ResponseCode::Success {
                    tracing::warn!(
                        code = code.name(),
                        "oneway END_TRANSACTION failed: {}",
                        remark.as_deref().unwrap_or("")
                    );
                }
            }
            Answer::TwoWay {
                responder,
                mut template,
                started,
            } => {
                template.code = code.code();
                template.remark = remark;
                ctx.metrics.record_rpc(
                    ringmq_remoting::codes::RequestCode::EndTransaction.code(),
                    template.code,
                    template.remark.as_deref(),
                    started.elapsed(),
                    false,
                );
                responder.respond(*template);
            }
        }
    }
}

/// An immediate refusal: answered when two-way, logged either way.
fn refuse(request: &RemotingCommand, code: ResponseCode, remark: impl Into<String>) -> Reply {
    let remark = remark.into();
    tracing::warn!(
        code = code.name(),
        oneway = request.is_oneway(),
        "END_TRANSACTION refused: {remark}"
    );
    if request.is_oneway() {
        return Reply::Nothing;
    }
    error_response(request, code, remark).into()
}

/// Why an END_TRANSACTION is refused: the response code and its remark.
type Refusal = (ResponseCode, String);

/// Processes END_TRANSACTION.
pub fn end_transaction(
    ctx: &Arc<BrokerContext>,
    request: RemotingCommand,
    rc: &RequestContext,
) -> Reply {
    let started = Instant::now();
    let header: EndTransactionRequestHeader = match request.decode_header() {
        Ok(h) => h,
        Err(e) => return header_error(&request, e),
    };
    if !ctx.is_master() {
        return refuse(
            &request,
            ResponseCode::SlaveNotAvailable,
            format!(
                "the broker[{}] is a slave; end transactions on the master",
                ctx.config.broker_ip1
            ),
        );
    }
    let Some(commit) = decision(&header, rc) else {
        return Reply::Nothing;
    };
    let Some(bytes) = ctx.store.look_message_by_offset(header.commit_log_offset) else {
        return refuse(
            &request,
            ResponseCode::SystemError,
            format!(
                "{HALF_NOT_FOUND} (no record at commitLogOffset {})",
                header.commit_log_offset
            ),
        );
    };
    let puts = verified_half(ctx, &header, &bytes)
        .and_then(|(half, props)| decision_puts(ctx, &half, props, commit));
    let puts = match puts {
        Ok(p) => p,
        Err((code, remark)) => return refuse(&request, code, remark),
    };
    let answer = if request.is_oneway() {
        Answer::Oneway
    } else {
        Answer::TwoWay {
            responder: rc.responder(),
            template: Box::new(request.response_to(ResponseCode::Success.code(), None)),
            started,
        }
    };
    match puts.final_put {
        Some(put) => store_commit(ctx, put, puts.op, puts.half_offset, answer),
        None => store_rollback(ctx, puts.op, answer),
    }
    match request.is_oneway() {
        true => Reply::Nothing,
        false => Reply::Later,
    }
}

/// `Some(true)` for COMMIT, `Some(false)` for ROLLBACK; `None` (logged, no answer, as upstream)
/// for UNKNOWN, which the checker asks about again later, and for an unknown type.
fn decision(header: &EndTransactionRequestHeader, rc: &RequestContext) -> Option<bool> {
    let from_check = header.from_transaction_check.unwrap_or(false);
    let commit = match header.commit_or_rollback {
        TRANSACTION_COMMIT_TYPE => true,
        TRANSACTION_ROLLBACK_TYPE => false,
        TRANSACTION_NOT_TYPE => {
            tracing::info!(
                peer = %rc.connection().peer_addr(),
                group = header.producer_group,
                msg_id = header.msg_id,
                from_check,
                "producer reports its transaction as unknown; will check back"
            );
            return None;
        }
        other => {
            tracing::warn!(
                peer = %rc.connection().peer_addr(),
                group = header.producer_group,
                commit_or_rollback = other,
                "END_TRANSACTION with an unknown commitOrRollback (8 commit, 12 rollback, 0 unknown); ignored"
            );
            return None;
        }
    };
    if from_check {
        tracing::info!(
            peer = %rc.connection().peer_addr(),
            group = header.producer_group,
            msg_id = header.msg_id,
            commit,
            "check answer from producer"
        );
    }
    Some(commit)
}

/// The half record in `bytes` and its properties, once it is the one the header names: a
/// record of the half topic, still within its check immunity (producer answers only), with
/// the header's producer group, queue offset and CommitLog offset.
fn verified_half<'a>(
    ctx: &BrokerContext,
    header: &EndTransactionRequestHeader,
    bytes: &'a Bytes,
) -> Result<(StoredRecord<'a>, MessageProperties), Refusal> {
    let half = decode_half(bytes).map_err(|why| {
        (
            ResponseCode::SystemError,
            format!(
                "{HALF_NOT_FOUND} (commitLogOffset {}: {why})",
                header.commit_log_offset
            ),
        )
    })?;
    let props = MessageProperties::parse_bytes(half.properties);
    if !header.from_transaction_check.unwrap_or(false) {
        check_immunity(ctx, &half, &props)?;
    }
    let wrong = |remark: &str| Err((ResponseCode::SystemError, remark.to_string()));
    if props.get(keys::PGROUP) != Some(header.producer_group.as_str()) {
        return wrong("The producer group wrong");
    }
    if half.queue_offset != header.tran_state_table_offset {
        return wrong("The transaction state table offset wrong");
    }
    if half.physical_offset != header.commit_log_offset {
        return wrong("The commit log offset wrong");
    }
    Ok((half, props))
}

/// A producer's answer comes too late once the half message is older than its check
/// immunity (when it has one): the broker's own check decides then.
fn check_immunity(
    ctx: &BrokerContext,
    half: &StoredRecord<'_>,
    props: &MessageProperties,
) -> Result<(), Refusal> {
    let Some(immunity) = props
        .get(keys::CHECK_IMMUNITY_TIME_IN_SECONDS)
        .filter(|v| !v.is_empty())
    else {
        return Ok(());
    };
    let timeout_ms = ctx
        .live
        .transaction_config(&TransactionConfig::default())
        .timeout_ms_i64();
    let age_ms = crate::persist::now_ms() - half.born_timestamp_ms;
    if age_ms > end_immunity_ms(immunity, timeout_ms) {
        return Err((
            ResponseCode::IllegalOperation,
            format!(
                "the half message is {age_ms} ms old, past its check immunity ({immunity} s); the broker decides through its own check now"
            ),
        ));
    }
    Ok(())
}

/// The puts a decision needs.
struct DecisionPuts {
    /// The committed message (COMMIT only).
    final_put: Option<PutRequest>,
    /// The op record that marks the half message as decided.
    op: PutRequest,
    /// Queue offset of the half message (for the logs).
    half_offset: i64,
}

fn decision_puts(
    ctx: &BrokerContext,
    half: &StoredRecord<'_>,
    props: MessageProperties,
    commit: bool,
) -> Result<DecisionPuts, Refusal> {
    let system_error = |e: String| (ResponseCode::SystemError, e);
    let op = encode_op_record(ctx, half.queue_id, half.queue_offset).map_err(system_error)?;
    let final_put = match commit {
        true => Some(final_record(ctx, half, props).map_err(system_error)?),
        false => None,
    };
    Ok(DecisionPuts {
        final_put,
        op,
        half_offset: half.queue_offset,
    })
}

/// COMMIT: stores the final message, then (only once it is stored) the op record, and
/// answers after both.
fn store_commit(
    ctx: &Arc<BrokerContext>,
    put: PutRequest,
    op: PutRequest,
    half_offset: i64,
    answer: Answer,
) {
    let (ctx2, topic) = (ctx.clone(), put.topic.clone());
    ctx.store.put(
        put,
        Box::new(move |result: PutResult| {
            if !is_stored(result.status) {
                let (code, remark) = final_put_refusal(&ctx2, result.status);
                tracing::warn!(
                    topic,
                    half_offset,
                    status = result.status.name(),
                    "committed message not stored; the half message stays and will be checked"
                );
                answer.send(&ctx2, code, Some(remark));
                return;
            }
            let ctx3 = ctx2.clone();
            ctx2.store.put(
                op,
                Box::new(move |op_result: PutResult| {
                    // The message is delivered either way; without its op record the
                    // checker asks the producer again, who answers commit again.
                    if !is_stored(op_result.status) {
                        tracing::error!(
                            half_offset,
                            status = op_result.status.name(),
                            "op record of a committed transaction not stored; the producer will be asked again"
                        );
                    }
                    answer.send(&ctx3, ResponseCode::Success, None);
                }),
            );
        }),
    );
}

/// ROLLBACK: stores the op record only and answers once it is stored.
fn store_rollback(ctx: &Arc<BrokerContext>, op: PutRequest, answer: Answer) {
    let ctx2 = ctx.clone();
    ctx.store.put(
        op,
        Box::new(move |result: PutResult| {
            if is_stored(result.status) {
                answer.send(&ctx2, ResponseCode::Success, None);
            } else {
                answer.send(
                    &ctx2,
                    ResponseCode::SystemError,
                    Some(format!(
                        "the rollback could not be recorded ({}); the broker will check the transaction again",
                        result.status.name()
                    )),
                );
            }
        }),
    );
}

/// The record at a CommitLog offset, if it is a message of the half topic.
fn decode_half(bytes: &Bytes) -> Result<StoredRecord<'_>, String> {
    match record::decode_record(bytes, false) {
        Ok(Decoded::Message(r)) => match r.topic() {
            Ok(TRANS_HALF_TOPIC) => Ok(r),
            Ok(other) => Err(format!(
                "the record there belongs to topic {other}, not to {TRANS_HALF_TOPIC}"
            )),
            Err(e) => Err(format!("unreadable record: {e}")),
        },
        Ok(Decoded::Blank { .. }) => Err("the offset is the end-of-file filler".to_string()),
        Err(e) => Err(format!("no record starts there: {e}")),
    }
}

/// The committed message: the half message back in its real topic/queue as a COMMIT-type
/// record pointing at the half record (features.md §d.2 step 6). Its properties are the half
/// message's, unchanged: upstream 5.x removes REAL_TOPIC, REAL_QID and TRAN_MSG and sets
/// WAIT=false only on its in-memory copy after the stored property string was already built, so
/// the record it stores (and consumers see) keeps all of them, `__transactionId__` included.
fn final_record(
    ctx: &BrokerContext,
    half: &StoredRecord<'_>,
    props: MessageProperties,
) -> Result<PutRequest, String> {
    let topic = props
        .get(keys::REAL_TOPIC)
        .filter(|t| !t.is_empty())
        .ok_or("the half message has no REAL_TOPIC property")?
        .to_string();
    let queue_id: i32 = props
        .get(keys::REAL_QID)
        .and_then(|q| q.trim().parse().ok())
        .ok_or("the half message has no valid REAL_QID property")?;
    let sys_flag = sysflag::reset_transaction_value(half.sys_flag, TransactionType::Commit);
    // The committed record points back at its half record (PREPARED TRANSACTION OFFSET).
    let target = CopyTarget {
        topic: &topic,
        queue_id,
        sys_flag,
        prepared_transaction_offset: half.physical_offset,
    };
    copy_record(ctx, half, &target, &props)
}

/// Upstream's answer for a final message the store refused (EndTransactionProcessor).
fn final_put_refusal(ctx: &BrokerContext, status: PutMessageStatus) -> (ResponseCode, String) {
    use PutMessageStatus as S;
    match status {
        S::CreateMappedFileFailed => (ResponseCode::SystemError, "Create mapped file failed.".into()),
        S::MessageIllegal | S::PropertiesSizeExceeded => (
            ResponseCode::MessageIllegal,
            format!(
                "The message is illegal, maybe msg body or properties length not matched. msg body length limit {}B, msg properties length limit 32KB.",
                ctx.live.max_message_size_bytes()
            ),
        ),
        S::ServiceNotAvailable => (ResponseCode::ServiceNotAvailable, "Service not available now.".into()),
        S::OsPageCacheBusy => (
            ResponseCode::SystemError,
            "OS page cache busy, please try another machine".into(),
        ),
        S::InSyncReplicasNotEnough => (ResponseCode::SystemError, "in-sync replicas not enough".into()),
        S::PutToRemoteBrokerFail => (ResponseCode::SystemError, "put to remote broker fail".into()),
        other => (ResponseCode::SystemError, other.name().to_string()),
    }
}
