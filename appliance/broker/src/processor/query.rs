//! Message lookup: VIEW_MESSAGE_BY_ID (33, by CommitLog offset) and QUERY_MESSAGE (12, by key
//! or UNIQ_KEY within a time range through the index). headers.md §4. Bodies are the stored
//! records, sent as zero-copy `extra_body` chunks.

use ringmq_remoting::codes::ResponseCode;
use ringmq_remoting::header::{
    QueryMessageRequestHeader, QueryMessageResponseHeader, ViewMessageRequestHeader,
};
use ringmq_remoting::RemotingCommand;

use ringmq_runtime::{Reply, Response};

use crate::context::{error_response, header_error, BrokerContext};

/// Upper bound on records one QUERY_MESSAGE returns (`maxMsgsNumBatch`).
const MAX_QUERY_RESULTS: usize = 64;

pub fn view_message_by_id(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let offset = match request.decode_header::<ViewMessageRequestHeader>() {
        Ok(h) => h.offset,
        Err(e) => return header_error(request, e),
    };
    match ctx.store.look_message_by_offset(offset) {
        Some(record) => Reply::Now(Response {
            command: request.response_to(ResponseCode::Success.code(), None),
            extra_body: vec![record.into()],
        }),
        None => error_response(
            request,
            ResponseCode::SystemError,
            format!("can not find message by the offset, {offset}"),
        )
        .into(),
    }
}

pub fn query_message(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let h = match request.decode_header::<QueryMessageRequestHeader>() {
        Ok(h) => h,
        Err(e) => return header_error(request, e),
    };
    let max = if h.unique_key_query.unwrap_or(false) {
        ctx.live.default_query_max_num() as usize
    } else {
        h.max_num.max(1) as usize
    }
    .min(MAX_QUERY_RESULTS);
    let records =
        ctx.store
            .query_message(&h.topic, &h.key, max, h.begin_timestamp, h.end_timestamp);
    if records.is_empty() {
        return error_response(
            request,
            ResponseCode::QueryNotFound,
            "can not find message, maybe time range not correct",
        )
        .into();
    }
    let index = ctx.store.index_last_update();
    let command = request
        .response_to(ResponseCode::Success.code(), None)
        .with_header(&QueryMessageResponseHeader {
            index_last_update_timestamp: index.timestamp_ms,
            index_last_update_phyoffset: index.phy_offset,
        });
    Reply::Now(Response {
        command,
        extra_body: records.into_iter().map(Into::into).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;
    use crate::test_support::*;
    use ringmq_remoting::message::id;

    #[test]
    fn view_and_query() {
        let (ctx, _store) = test_context(BrokerConfig::default());
        let resp = send_simple(&ctx, "T", 0, "TagA", b"hello");
        let msg_id =
            id::decode_offset_msg_id(resp.command.ext_fields.get("msgId").unwrap()).unwrap();
        let view = run(
            &ctx,
            RemotingCommand::request(33, 1)
                .with_ext("offset", msg_id.commit_log_offset.to_string()),
        );
        assert_eq!(view.command.code, 0);
        assert_eq!(view.extra_body.len(), 1);
        let missing = run(
            &ctx,
            RemotingCommand::request(33, 1).with_ext("offset", "999999"),
        );
        assert_eq!(missing.command.code, 1);
        assert_eq!(run(&ctx, RemotingCommand::request(33, 1)).command.code, 1);

        let q = |key: &str, unique: bool| {
            let mut r = RemotingCommand::request(12, 1)
                .with_ext("topic", "T")
                .with_ext("key", key)
                .with_ext("maxNum", "32")
                .with_ext("beginTimestamp", "0")
                .with_ext("endTimestamp", i64::MAX.to_string());
            if unique {
                r = r.with_ext("_UNIQUE_KEY_QUERY", "true");
            }
            run(&ctx, r)
        };
        let uniq = resp
            .command
            .ext_fields
            .get("transactionId")
            .unwrap()
            .to_string();
        let by_uniq = q(&uniq, true);
        assert_eq!(by_uniq.command.code, 0);
        assert_eq!(by_uniq.extra_body.len(), 1);
        assert!(by_uniq
            .command
            .ext_fields
            .get("indexLastUpdatePhyoffset")
            .is_some());
        assert_eq!(
            q("KEY-1", false).extra_body.len(),
            1,
            "KEYS property indexed"
        );
        assert_eq!(q("nothing", false).command.code, 22);
    }
}
