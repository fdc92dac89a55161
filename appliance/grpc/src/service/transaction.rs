//! Transactions over gRPC: EndTransaction and the broker's check-back.
//!
//! END_TRANSACTION must name where the half message is (its CommitLog offset and its
//! queue offset in the half topic). Upstream's proxy remembers both for 30 s after the
//! send or the check; ringmq writes them into the transaction id it hands out instead
//! (`<message id>-<CommitLog offset>-<queue offset>`), so a commit needs no state here and
//! works however late it comes, across broker restarts too. The SDKs treat the transaction
//! id as an opaque string they send back.

use ringmq_client::message::decode_records;
use ringmq_remoting::codes::RequestCode;
use ringmq_remoting::header::transaction::{
    CheckTransactionStateRequestHeader, EndTransactionRequestHeader, TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE, TRANSACTION_ROLLBACK_TYPE,
};
use ringmq_remoting::header::CommandHeader;
use ringmq_remoting::RemotingCommand;

use super::Inner;
use crate::convert::{check_topic, incoming};
use crate::metadata::Caller;
use crate::pb::*;
use crate::status::{from_remoting, status};

/// The transaction id of a half message.
pub(super) fn transaction_id(
    message_id: &str,
    commit_log_offset: i64,
    queue_offset: i64,
) -> String {
    format!("{message_id}-{commit_log_offset}-{queue_offset}")
}

/// (message id, CommitLog offset, queue offset) of a transaction id.
pub(super) fn parse_transaction_id(id: &str) -> Option<(&str, i64, i64)> {
    let (rest, queue_offset) = id.rsplit_once('-')?;
    let (message_id, commit_log_offset) = rest.rsplit_once('-')?;
    let (c, q) = (commit_log_offset.parse().ok()?, queue_offset.parse().ok()?);
    (c >= 0 && q >= 0 && !message_id.is_empty()).then_some((message_id, c, q))
}

pub(super) async fn end(inner: &Inner, caller: &Caller, request: &EndTransactionRequest) -> Status {
    let topic = request.topic.as_ref().map_or("", |t| t.name.as_str());
    if let Err(s) = check_topic(topic, inner.ctx.topics.is_system_topic(topic)) {
        return s;
    }
    if request.transaction_id.trim().is_empty() {
        return status(Code::InvalidTransactionId, "transaction id cannot be empty");
    }
    let Some((uniq, commit_log_offset, queue_offset)) =
        parse_transaction_id(&request.transaction_id)
    else {
        return status(
            Code::InvalidTransactionId,
            format!(
                "transaction id `{}` was not handed out by this broker",
                request.transaction_id
            ),
        );
    };
    let resolution = match TransactionResolution::try_from(request.resolution) {
        Ok(TransactionResolution::Commit) => TRANSACTION_COMMIT_TYPE,
        Ok(TransactionResolution::Rollback) => TRANSACTION_ROLLBACK_TYPE,
        _ => TRANSACTION_NOT_TYPE,
    };
    let header = EndTransactionRequestHeader {
        topic: Some(topic.to_string()),
        producer_group: topic.to_string(),
        tran_state_table_offset: queue_offset,
        commit_log_offset,
        commit_or_rollback: resolution,
        from_transaction_check: Some(request.source == TransactionSource::SourceServerCheck as i32),
        msg_id: if request.message_id.is_empty() {
            uniq.to_string()
        } else {
            request.message_id.clone()
        },
        transaction_id: Some(uniq.to_string()),
        rpc: Default::default(),
    };
    let r = RemotingCommand::request(RequestCode::EndTransaction.code(), 0).with_header(&header);
    match inner.call(caller, r).await {
        Ok(a) => from_remoting(a.command.code, a.command.remark.as_deref()),
        Err(s) => s,
    }
}

/// A CHECK_TRANSACTION_STATE for this client as the command the SDKs answer with
/// EndTransaction; `None` for any other broker request, or an unreadable one (logged).
pub(super) fn recover_command(
    inner: &Inner,
    command: &RemotingCommand,
) -> Option<TelemetryCommand> {
    if command.code != RequestCode::CheckTransactionState.code() {
        tracing::debug!(
            code = command.code,
            "broker request with no gRPC form dropped"
        );
        return None;
    }
    let header = match CheckTransactionStateRequestHeader::decode(&command.ext_fields) {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!("unreadable transaction check for a gRPC client: {e}");
            return None;
        }
    };
    let Some(m) = decode_records(&command.body, &inner.ctx.config.broker_name)
        .into_iter()
        .next()
    else {
        tracing::warn!("a transaction check without its half message was dropped");
        return None;
    };
    // The header names the half topic (as a Java broker does); the body has the real one.
    let topic = Resource {
        resource_namespace: String::new(),
        name: m.topic.clone(),
    };
    let message = incoming(&m, &topic, None);
    let uniq = header.msg_id.clone().unwrap_or_else(|| m.msg_id.clone());
    Some(TelemetryCommand {
        status: None,
        command: Some(
            telemetry_command::Command::RecoverOrphanedTransactionCommand(
                RecoverOrphanedTransactionCommand {
                    message: Some(message),
                    transaction_id: transaction_id(
                        &uniq,
                        header.commit_log_offset,
                        header.tran_state_table_offset,
                    ),
                },
            ),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transaction_ids_carry_the_half_message_offsets() {
        let id = transaction_id("7F0000011A2B", 4096, 12);
        assert_eq!(parse_transaction_id(&id), Some(("7F0000011A2B", 4096, 12)));
        assert_eq!(parse_transaction_id("x"), None);
        assert_eq!(parse_transaction_id("a-b-c"), None);
        assert_eq!(parse_transaction_id("-1-2"), None);
        assert_eq!(parse_transaction_id("m-1--2"), None);
    }
}
