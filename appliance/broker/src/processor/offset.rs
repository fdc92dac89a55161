//! Consumer offsets and queue offset lookups: QUERY_CONSUMER_OFFSET (14),
//! UPDATE_CONSUMER_OFFSET (15), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
//! SEARCH_OFFSET_BY_TIMESTAMP (29), GET_EARLIEST_MSG_STORETIME (32). headers.md §3,
//! features.md §e.3. All answered inline on the network core (memory lookups).

use ringmq_remoting::codes::ResponseCode;
use ringmq_remoting::header::{
    BoundaryType, GetEarliestMsgStoretimeRequestHeader, GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader, QueryConsumerOffsetRequestHeader, SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
};
use ringmq_remoting::message::record::{self, Decoded};
use ringmq_remoting::RemotingCommand;
use ringmq_store::{AcceptAll, Boundary};

use ringmq_runtime::Reply;

use crate::context::{error_response, header_error, BrokerContext};

fn with_offset(request: &RemotingCommand, key: &str, value: i64) -> Reply {
    request
        .response_to(ResponseCode::Success.code(), None)
        .with_ext(key, value.to_string())
        .into()
}

pub fn query_consumer_offset(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let QueryConsumerOffsetRequestHeader {
        consumer_group: group,
        topic,
        queue_id,
        set_zero_if_not_found: set_zero,
        ..
    } = match request.decode_header() {
        Ok(h) => h,
        Err(e) => return header_error(request, e),
    };
    let offset = ctx
        .offsets
        .peek_reset_offset(&group, &topic, queue_id)
        .or_else(|| ctx.offsets.query_offset(&group, &topic, queue_id));
    if let Some(offset) = offset {
        return with_offset(request, "offset", offset);
    }
    if set_zero == Some(false) {
        return error_response(
            request,
            ResponseCode::QueryNotFound,
            "Not found, do not set to zero, maybe this group boot first",
        )
        .into();
    }
    let min = ctx.store.min_offset_in_queue(&topic, queue_id);
    if min <= 0 && first_message_in_memory(ctx, &topic, queue_id) {
        return with_offset(request, "offset", 0);
    }
    error_response(
        request,
        ResponseCode::QueryNotFound,
        "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
    )
    .into()
}

/// Upstream answers 0 for a never-committed queue only while its first message is still
/// "in memory" (within `accessMessageInMemoryMaxRatio` = 40 % of RAM of the CommitLog end);
/// otherwise a new group starts where its consume-from-where policy says.
fn first_message_in_memory(ctx: &BrokerContext, topic: &str, queue_id: i32) -> bool {
    let got = ctx
        .store
        .get_message(topic, queue_id, 0, 1, 1 << 20, &AcceptAll);
    let Some(first) = got.messages.first() else {
        return true;
    };
    let Ok(Decoded::Message(rec)) = record::decode_record(first, false) else {
        return true;
    };
    let behind = ctx.store.commit_log_max_offset() - rec.physical_offset;
    behind <= physical_memory_bytes() / 100 * 40
}

fn physical_memory_bytes() -> i64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages <= 0 || page <= 0 {
        return i64::MAX / 2;
    }
    pages.saturating_mul(page)
}

pub fn update_consumer_offset(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let parsed = request.decode_header::<UpdateConsumerOffsetRequestHeader>();
    let (group, topic, queue_id, offset) = match parsed {
        Ok(h) => (h.consumer_group, h.topic, h.queue_id, h.commit_offset),
        Err(e) => {
            tracing::warn!("UPDATE_CONSUMER_OFFSET with a bad header: {e}");
            if request.is_oneway() {
                return Reply::Nothing;
            }
            return error_response(request, ResponseCode::InvalidParameter, e.to_string()).into();
        }
    };
    let answer = |code: ResponseCode, remark: Option<String>| -> Reply {
        if request.is_oneway() {
            if code != ResponseCode::Success {
                tracing::warn!(
                    group,
                    topic,
                    queue_id,
                    "oneway offset update refused: {}",
                    remark.unwrap_or_default()
                );
            }
            Reply::Nothing
        } else {
            request.response_to(code.code(), remark).into()
        }
    };
    if ctx.groups.find(&group).is_none() {
        return answer(
            ResponseCode::SubscriptionGroupNotExist,
            Some(format!("subscription group not exist, {group}")),
        );
    }
    if ctx.topics.select(&topic).is_none() {
        return answer(
            ResponseCode::TopicNotExist,
            Some(format!("topic[{topic}] not exist")),
        );
    }
    if queue_id < 0 || offset < 0 {
        return answer(
            ResponseCode::InvalidParameter,
            Some(format!("bad queueId {queue_id} or commitOffset {offset}")),
        );
    }
    if ctx.live.use_server_side_reset_offset()
        && ctx
            .offsets
            .peek_reset_offset(&group, &topic, queue_id)
            .is_some()
    {
        return answer(
            ResponseCode::Success,
            Some("Offset has been previously reset".to_string()),
        );
    }
    ctx.offsets.commit_offset(&group, &topic, queue_id, offset);
    answer(ResponseCode::Success, None)
}

pub fn get_max_offset(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    match request.decode_header::<GetMaxOffsetRequestHeader>() {
        Ok(h) => with_offset(
            request,
            "offset",
            ctx.store.max_offset_in_queue(&h.topic, h.queue_id),
        ),
        Err(e) => header_error(request, e),
    }
}

pub fn get_min_offset(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    match request.decode_header::<GetMinOffsetRequestHeader>() {
        Ok(h) => with_offset(
            request,
            "offset",
            ctx.store.min_offset_in_queue(&h.topic, h.queue_id),
        ),
        Err(e) => header_error(request, e),
    }
}

pub fn search_offset_by_timestamp(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    match request.decode_header::<SearchOffsetRequestHeader>() {
        Ok(h) => {
            let b = match h.boundary_type.unwrap_or_default() {
                BoundaryType::Lower => Boundary::Lower,
                BoundaryType::Upper => Boundary::Upper,
            };
            with_offset(
                request,
                "offset",
                ctx.store
                    .offset_in_queue_by_time(&h.topic, h.queue_id, h.timestamp, b),
            )
        }
        Err(e) => header_error(request, e),
    }
}

pub fn get_earliest_msg_storetime(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    match request.decode_header::<GetEarliestMsgStoretimeRequestHeader>() {
        Ok(h) => with_offset(
            request,
            "timestamp",
            ctx.store
                .earliest_message_time(&h.topic, h.queue_id)
                .unwrap_or(-1),
        ),
        Err(e) => header_error(request, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;
    use crate::test_support::*;

    fn req(code: i32, fields: &[(&str, &str)]) -> RemotingCommand {
        let mut r = RemotingCommand::request(code, 1);
        for (k, v) in fields {
            r.ext_fields.insert(*k, *v);
        }
        r
    }

    #[test]
    fn offsets_round_trip_and_not_found_rules() {
        let (ctx, _store) = test_context(BrokerConfig::default());
        send_simple(&ctx, "T", 0, "", b"a");
        send_simple(&ctx, "T", 0, "", b"b");
        let q = |set_zero: &str| {
            let mut fields = vec![("consumerGroup", "G"), ("topic", "T"), ("queueId", "0")];
            if !set_zero.is_empty() {
                fields.push(("setZeroIfNotFound", set_zero));
            }
            run(&ctx, req(14, &fields)).command
        };
        assert_eq!(q("false").code, 22);
        let r = q("");
        assert_eq!(
            (r.code, r.ext_fields.get("offset")),
            (0, Some("0")),
            "fresh queue in memory → 0"
        );
        let u = run(
            &ctx,
            req(
                15,
                &[
                    ("consumerGroup", "G"),
                    ("topic", "T"),
                    ("queueId", "0"),
                    ("commitOffset", "2"),
                ],
            ),
        );
        assert_eq!(u.command.code, 0);
        assert_eq!(q("false").ext_fields.get("offset"), Some("2"));
        let bad = run(
            &ctx,
            req(
                15,
                &[
                    ("consumerGroup", "G"),
                    ("topic", "Nope"),
                    ("queueId", "0"),
                    ("commitOffset", "2"),
                ],
            ),
        );
        assert_eq!(bad.command.code, 17);
        let bad = run(
            &ctx,
            req(
                15,
                &[
                    ("consumerGroup", "G"),
                    ("topic", "T"),
                    ("queueId", "x"),
                    ("commitOffset", "2"),
                ],
            ),
        );
        assert_eq!(bad.command.code, ResponseCode::InvalidParameter.code());
        let bad = run(&ctx, req(14, &[("topic", "T"), ("queueId", "0")]));
        assert_eq!(bad.command.code, 1);
    }

    #[test]
    fn queue_offset_lookups() {
        let (ctx, _store) = test_context(BrokerConfig::default());
        let t0 = crate::persist::now_ms();
        send_simple(&ctx, "T", 0, "", b"a");
        send_simple(&ctx, "T", 0, "", b"b");
        let get = |code: i32, extra: &[(&str, &str)]| {
            let mut f = vec![("topic", "T"), ("queueId", "0")];
            f.extend_from_slice(extra);
            run(&ctx, req(code, &f)).command
        };
        assert_eq!(get(30, &[]).ext_fields.get("offset"), Some("2"));
        assert_eq!(get(31, &[]).ext_fields.get("offset"), Some("0"));
        let ts = get(32, &[])
            .ext_fields
            .get("timestamp")
            .unwrap()
            .parse::<i64>()
            .unwrap();
        assert!(ts >= t0);
        assert_eq!(
            get(29, &[("timestamp", &(t0 - 1000).to_string())])
                .ext_fields
                .get("offset"),
            Some("0")
        );
        assert_eq!(
            get(
                29,
                &[("timestamp", "9999999999999"), ("boundaryType", "upper")]
            )
            .ext_fields
            .get("offset"),
            Some("1")
        );
        assert_eq!(
            get(29, &[("timestamp", "1"), ("boundaryType", "sideways")]).code,
            1
        );
        assert_eq!(run(&ctx, req(30, &[("topic", "T")])).command.code, 1);
    }
}
