//! Request processors, one module per family of request codes, and the dispatch of a request
//! to its processor by code (retry send-back and transaction end-handling included).

pub mod admin;
pub mod client_manage;
pub mod controller;
pub mod offset;
pub mod pull;
pub mod query;
pub mod send;

use std::sync::Arc;

use ringmq_remoting::codes::RequestCode;
use ringmq_remoting::RemotingCommand;
use ringmq_runtime::{Reply, RequestContext};

use crate::context::{header_error, BrokerContext};

/// Routes one request to its processor. Unknown codes get REQUEST_CODE_NOT_SUPPORTED; a
/// request missing a required header field gets SYSTEM_ERROR naming the field.
pub fn dispatch(ctx: &Arc<BrokerContext>, request: RemotingCommand, rc: &RequestContext) -> Reply {
    // The runtime runs processors on the network core that decoded the frame, in the same
    // loop iteration: no request waits in a queue before its processor.
    dispatch_after_queue(ctx, request, rc, 0)
}

/// [`dispatch`] for a request that waited `queued_ms` before reaching its processor (sends
/// that waited `waitTimeMillsInSendQueue` are refused with TIMEOUT_CLEAN_QUEUE).
pub(crate) fn dispatch_after_queue(
    ctx: &Arc<BrokerContext>,
    request: RemotingCommand,
    rc: &RequestContext,
    queued_ms: u64,
) -> Reply {
    let Some(code) = RequestCode::from_code(request.code) else {
        return not_supported(&request);
    };
    use RequestCode as C;
    if let C::SendMessage | C::SendMessageV2 | C::SendBatchMessage = code {
        // The send processor's first step is the typed decode, which refuses the same
        // first missing field the check below would: a send's header is read once.
        return send::process(ctx, request, rc, queued_ms);
    }
    // Required header fields are checked here, once, from remoting's typed headers,
    // so no handler acts on a request that lacks one (`@CFNotNull` fields upstream).
    if let Err(e) =
        ringmq_remoting::header::check_required_for_code(request.code, &request.ext_fields)
    {
        return header_error(&request, e);
    }
    match code {
        C::PullMessage | C::LitePullMessage => pull::process(ctx, request, rc),
        C::QueryConsumerOffset => offset::query_consumer_offset(ctx, &request),
        C::UpdateConsumerOffset => offset::update_consumer_offset(ctx, &request),
        C::GetMaxOffset => offset::get_max_offset(ctx, &request),
        C::GetMinOffset => offset::get_min_offset(ctx, &request),
        C::SearchOffsetByTimestamp => offset::search_offset_by_timestamp(ctx, &request),
        C::GetEarliestMsgStoretime => offset::get_earliest_msg_storetime(ctx, &request),
        C::HeartBeat => client_manage::heartbeat(ctx, &request, rc),
        C::UnregisterClient => client_manage::unregister_client(ctx, &request, rc),
        C::CheckClientConfig => client_manage::check_client_config(ctx, &request),
        C::GetConsumerListByGroup => client_manage::get_consumer_list_by_group(ctx, &request),
        C::LockBatchMq => client_manage::lock_batch_mq(ctx, &request),
        C::UnlockBatchMq => client_manage::unlock_batch_mq(ctx, &request),
        C::ViewMessageById => query::view_message_by_id(ctx, &request),
        C::QueryMessage => query::query_message(ctx, &request),
        C::ConsumerSendMsgBack => crate::retry::consumer_send_msg_back(ctx, request, rc),
        C::EndTransaction => crate::transaction::end_transaction(ctx, request, rc),
        C::PopMessage => crate::pop::processor::pop_message(ctx, request, rc),
        C::AckMessage => crate::pop::ack::ack_message(ctx, request, rc),
        C::ChangeMessageInvisibletime => crate::pop::ack::change_invisible_time(ctx, request, rc),
        C::Notification => crate::pop::notification::notification(ctx, request, rc),
        C::PeekMessage => crate::pop::peek::peek_message(ctx, &request),
        C::PollingInfo => crate::pop::peek::polling_info(ctx, &request),
        C::BatchAckMessage => crate::pop::batch_ack::batch_ack_message(ctx, request, rc),
        C::RecallMessage => crate::recall::recall_message(ctx, request, rc),
        _ => match admin::process(ctx, &request, rc) {
            Some(reply) => reply,
            None => match crate::acl::process(ctx, &request) {
                Some(reply) => reply,
                None => not_supported(&request),
            },
        },
    }
}

fn not_supported(request: &RemotingCommand) -> Reply {
    tracing::debug!(
        code = request.code,
        "request code not supported by this broker"
    );
    if request.is_oneway() {
        return Reply::Nothing;
    }
    ringmq_runtime::not_supported(request).into()
}
