//! PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361): permission and subscription checks, tag /
//! SQL92 filtering, the store read, GetMessageStatus → response code and next-offset rules,
//! the master/slave routing of `suggestWhichBrokerId` ([`pull_route`]; a slave serves pulls
//! only with `slaveReadEnable`),
//! piggy-backed offset commit, long polling (the pull parks on the network core that
//! received it, [`crate::long_polling`]), and a zero-copy body: the stored records go out
//! as `extra_body` chunks, memory slices of the CommitLog mapping (one vectored write) or,
//! for runs of at least `ringmq.pull.zeroCopyMinBytes`, file ranges spliced from the
//! CommitLog file to the socket ([`pull_body`]). features.md §e.1, headers.md §2.1.

use std::sync::Arc;

use ringmq_remoting::body::subscription::SubscriptionGroupConfig;
use ringmq_remoting::body::topic::TopicConfig;
use ringmq_remoting::codes::{RequestCode, ResponseCode};
use ringmq_remoting::header::PullMessageHeaderRef;
use ringmq_remoting::message::record::{self, Decoded};
use ringmq_remoting::message::tags::TagFilter;
use ringmq_remoting::RemotingCommand;
use ringmq_runtime::{BodyChunk, FileRange, Reply, RequestContext, Response};
use ringmq_store::{FileSpan, GetMessageResult, GetMessageStatus, MessageFilter};

use crate::client::consumer_manager::SubscriptionData;
use crate::context::{header_error, BrokerContext};
use crate::filter::PropertyPredicate;
use crate::long_polling::HeldPull;
use crate::metadata::topic_config as topics;
use crate::processor::send::FAQ_SUGGESTION;

pub use ringmq_remoting::header::{
    PULL_FLAG_CLASS_FILTER, PULL_FLAG_COMMIT_OFFSET, PULL_FLAG_LITE_PULL, PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
};

/// Longest a pull may be parked, whatever the client asks (an explicit bound on held state).
const MAX_SUSPEND_MS: i64 = 3_600_000;

pub use crate::config::DEFAULT_ZERO_COPY_MIN_BYTES;

/// The filter a pull applies while reading.
#[derive(Clone)]
pub enum PullFilter {
    Tag(TagFilter),
    Sql(Arc<dyn PropertyPredicate>),
}

impl PullFilter {
    /// Whether an arriving message (tagsCode, property bytes) wakes a held pull.
    pub fn matches_arrival(&self, tags_code: i64, properties: &[u8]) -> bool {
        match self {
            PullFilter::Tag(t) => t.matches_tags_code(tags_code),
            PullFilter::Sql(p) => std::str::from_utf8(properties)
                .map(|s| p.matches(s))
                .unwrap_or(false),
        }
    }
}

impl MessageFilter for PullFilter {
    fn match_by_tags_code(&self, tags_code: Option<i64>) -> bool {
        match (self, tags_code) {
            (PullFilter::Tag(t), Some(code)) => t.matches_tags_code(code),
            _ => true,
        }
    }

    fn match_by_record(&self, rec: &[u8]) -> bool {
        match self {
            PullFilter::Tag(_) => true,
            PullFilter::Sql(p) => match record::decode_record(rec, false) {
                Ok(Decoded::Message(r)) => std::str::from_utf8(r.properties)
                    .map(|s| p.matches(s))
                    .unwrap_or(false),
                _ => false,
            },
        }
    }
}

enum Outcome {
    Respond(Response),
    Suspend(Suspension),
}

/// A first attempt that found nothing and may wait for an arrival.
struct Suspension {
    filter: PullFilter,
    timeout_ms: i64,
}

/// Processes a pull request.
pub fn process(ctx: &Arc<BrokerContext>, request: RemotingCommand, rc: &RequestContext) -> Reply {
    let started = std::time::Instant::now();
    if !ctx.is_master() && !ctx.config.slave_read_enable {
        return crate::processor::send::reject_request(&request);
    }
    let header = match PullMessageHeaderRef::decode(&request.ext_fields) {
        Ok(h) => h,
        Err(e) => return header_error(&request, e),
    };
    let peer = rc.connection().peer_addr().to_string();
    match execute(ctx, &request, &header, true, &peer) {
        Outcome::Respond(r) => Reply::Now(r),
        Outcome::Suspend(suspension) => {
            let (topic, queue_id, offset) = (
                header.topic.to_owned(),
                header.queue_id,
                header.queue_offset,
            );
            let core = rc.core_index();
            let pull = held_pull(ctx, request, rc, peer, offset, suspension, started);
            ctx.hold.hold(core, &topic, queue_id, pull);
            // A message may have landed between the read and the parking: re-check once.
            let max_offset = ctx.store.max_offset_in_queue(&topic, queue_id);
            if max_offset > offset {
                ctx.hold.wake_below(core, &topic, queue_id, max_offset);
            }
            Reply::Later
        }
    }
}

/// The parked form of a pull that found nothing: woken by a matching arrival, it is
/// re-run and answered through the request's responder.
fn held_pull(
    ctx: &Arc<BrokerContext>,
    request: RemotingCommand,
    rc: &RequestContext,
    peer: String,
    offset: i64,
    Suspension { filter, timeout_ms }: Suspension,
    started: std::time::Instant,
) -> HeldPull {
    let responder = rc.responder();
    let ctx = ctx.clone();
    HeldPull {
        offset,
        deadline_ms: crate::persist::now_ms() + timeout_ms,
        matches_properties: matches!(filter, PullFilter::Sql(_)),
        matcher: Box::new(move |code, props| filter.matches_arrival(code, props)),
        resume: Box::new(move || {
            let response = rerun(&ctx, &request, &peer);
            ctx.metrics.record_rpc(
                request.code,
                response.command.code,
                response.command.remark.as_deref(),
                started.elapsed(),
                true,
            );
            responder.respond(response);
        }),
    }
}

/// A parked pull's re-run. The borrowed header cannot outlive the parking, so it is
/// decoded again from the kept request (it decoded once already).
fn rerun(ctx: &BrokerContext, request: &RemotingCommand, peer: &str) -> Response {
    match PullMessageHeaderRef::decode(&request.ext_fields) {
        Ok(header) => match execute(ctx, request, &header, false, peer) {
            Outcome::Respond(r) => r,
            Outcome::Suspend(_) => unreachable_suspend(request),
        },
        Err(e) => request
            .response_to(ResponseCode::SystemError.code(), Some(e.to_string()))
            .into(),
    }
}

fn unreachable_suspend(request: &RemotingCommand) -> Response {
    // execute() never suspends a re-run; answer "no new message" rather than panic.
    request
        .response_to(
            ResponseCode::PullNotFound.code(),
            Some("OFFSET_OVERFLOW_ONE".into()),
        )
        .into()
}

fn refuse(
    request: &RemotingCommand,
    code: ResponseCode,
    remark: String,
    forbidden: Option<i32>,
) -> Refused {
    tracing::debug!(code = code.name(), "pull refused: {remark}");
    let mut r = request.response_to(code.code(), Some(remark));
    if let Some(kind) = forbidden {
        r.ext_fields.insert("forbiddenType", kind.to_string());
    }
    Refused(Box::new(r))
}

/// The answer of a check that refused the pull (boxed: refusals are the rare path).
struct Refused(Box<RemotingCommand>);

/// A check's value, or the refusal to answer with.
type Checked<T> = Result<T, Refused>;

/// One pull attempt. `first` = the request as received (may suspend and commit offsets);
/// re-runs after long polling pass false.
fn execute(
    ctx: &BrokerContext,
    request: &RemotingCommand,
    h: &PullMessageHeaderRef<'_>,
    first: bool,
    peer: &str,
) -> Outcome {
    match attempt(ctx, request, h, first, peer) {
        Ok(outcome) => outcome,
        Err(Refused(answer)) => Outcome::Respond((*answer).into()),
    }
}

/// The checks in upstream order, the store read, then the answer or the suspension.
fn attempt(
    ctx: &BrokerContext,
    request: &RemotingCommand,
    h: &PullMessageHeaderRef<'_>,
    first: bool,
    peer: &str,
) -> Checked<Outcome> {
    check_broker_readable(ctx, request, h)?;
    let group_config = consuming_group(ctx, request, h)?;
    let topic_config = readable_queue(ctx, request, h, peer)?;
    let subscription = subscription(ctx, request, h, &group_config)?;
    let filter = pull_filter(ctx, request, h, &subscription)?;
    let (code, status_name, result) = read_queue(ctx, h, &filter);
    let route = pull_route(&role_of(ctx), code, &result, &group_config);
    let response = response_header(
        request.response_to(route.code.code(), Some(status_name.to_string())),
        &result,
        route.suggest_which_broker_id,
        &group_config,
        &topic_config,
    );
    let code = route.code;
    record_offsets(ctx, h, first, result.next_begin_offset);
    if let Some(timeout_ms) = suspend_timeout_ms(ctx, h, code, first) {
        return Ok(Outcome::Suspend(Suspension { filter, timeout_ms }));
    }
    let extra_body = if code == ResponseCode::Success {
        pull_body(result, ctx.config.ringmq_pull_zero_copy_min_bytes)
    } else {
        Vec::new()
    };
    Ok(Outcome::Respond(Response {
        command: response,
        extra_body,
    }))
}

/// The broker serves pulls (brokerPermission), and lite pulls when enabled.
fn check_broker_readable(
    ctx: &BrokerContext,
    request: &RemotingCommand,
    h: &PullMessageHeaderRef<'_>,
) -> Checked<()> {
    let config = &ctx.config;
    if !ctx.live.is_readable() {
        return Err(refuse(
            request,
            ResponseCode::NoPermission,
            format!(
                "the broker[{}] pulling message is forbidden",
                config.broker_ip1
            ),
            Some(1),
        ));
    }
    let lite = request.code == RequestCode::LitePullMessage.code()
        || h.sys_flag & PULL_FLAG_LITE_PULL != 0;
    if lite && !config.lite_pull_message_enable {
        return Err(refuse(
            request,
            ResponseCode::NoPermission,
            format!(
                "the broker[{}] for lite pull consumer is forbidden",
                config.broker_ip1
            ),
            Some(1),
        ));
    }
    Ok(())
}

/// The consumer group exists (or was auto-created) and may consume.
fn consuming_group(
    ctx: &BrokerContext,
    request: &RemotingCommand,
    h: &PullMessageHeaderRef<'_>,
) -> Checked<Arc<SubscriptionGroupConfig>> {
    let Some(group_config) = ctx.groups.find(h.consumer_group) else {
        return Err(refuse(
            request,
            ResponseCode::SubscriptionGroupNotExist,
            format!(
                "subscription group [{}] does not exist, {FAQ_SUGGESTION}",
                h.consumer_group
            ),
            None,
        ));
    };
    if !group_config.consume_enable {
        return Err(refuse(
            request,
            ResponseCode::NoPermission,
            format!("subscription group no permission, {}", h.consumer_group),
            Some(2),
        ));
    }
    Ok(group_config)
}

/// The topic exists, is readable, and has the requested read queue.
fn readable_queue(
    ctx: &BrokerContext,
    request: &RemotingCommand,
    h: &PullMessageHeaderRef<'_>,
    peer: &str,
) -> Checked<Arc<TopicConfig>> {
    let Some(topic_config) = ctx.topics.select(h.topic) else {
        return Err(refuse(
            request,
            ResponseCode::TopicNotExist,
            format!(
                "topic[{}] not exist, apply first please! {FAQ_SUGGESTION}",
                h.topic
            ),
            None,
        ));
    };
    if !topic_config.is_readable() {
        return Err(refuse(
            request,
            ResponseCode::NoPermission,
            format!("the topic[{}] pulling message is forbidden", h.topic),
            Some(3),
        ));
    }
    if h.queue_id < 0 || h.queue_id >= topic_config.read_queue_nums {
        return Err(refuse(
            request,
            ResponseCode::InvalidParameter,
            format!(
                "queueId[{}] is illegal, topic:[{}] topicConfig.readQueueNums:[{}] consumer:[{peer}]",
                h.queue_id, h.topic, topic_config.read_queue_nums
            ),
            None,
        ));
    }
    Ok(topic_config)
}

/// The subscription: from the request, or the one the group registered by heartbeat.
fn subscription(
    ctx: &BrokerContext,
    request: &RemotingCommand,
    h: &PullMessageHeaderRef<'_>,
    group_config: &SubscriptionGroupConfig,
) -> Checked<SubscriptionData> {
    if h.sys_flag & PULL_FLAG_SUBSCRIPTION != 0 {
        return Ok(SubscriptionData::build(
            h.topic,
            h.subscription.unwrap_or("*"),
            h.expression_type.unwrap_or("TAG"),
            h.sub_version,
        ));
    }
    registered_subscription(ctx, request, h, group_config)
}

/// The subscription the group registered by heartbeat, if it may pull with it.
fn registered_subscription(
    ctx: &BrokerContext,
    request: &RemotingCommand,
    h: &PullMessageHeaderRef<'_>,
    group_config: &SubscriptionGroupConfig,
) -> Checked<SubscriptionData> {
    let Some(group_info) = ctx.consumers.group(h.consumer_group) else {
        return Err(refuse(
            request,
            ResponseCode::SubscriptionNotExist,
            format!("the consumer's group info not exist{FAQ_SUGGESTION}"),
            None,
        ));
    };
    if group_info.is_broadcasting() && !group_config.consume_broadcast_enable {
        return Err(refuse(
            request,
            ResponseCode::NoPermission,
            format!(
                "the consumer group[{}] can not consume by broadcast way",
                h.consumer_group
            ),
            Some(4),
        ));
    }
    if ctx.groups.forbidden(h.consumer_group, h.topic) & topics::PERM_READ != 0 {
        return Err(refuse(
            request,
            ResponseCode::NoPermission,
            format!(
                "the consumer group[{}] is forbidden for topic[{}]",
                h.consumer_group, h.topic
            ),
            Some(5),
        ));
    }
    let Some(sub) = group_info.subscriptions.get(h.topic).cloned() else {
        return Err(refuse(
            request,
            ResponseCode::SubscriptionNotExist,
            format!("the consumer's subscription not exist{FAQ_SUGGESTION}"),
            None,
        ));
    };
    if sub.sub_version < h.sub_version {
        return Err(refuse(
            request,
            ResponseCode::SubscriptionNotLatest,
            format!(
                "the consumer's subscription not latest, group: {} {} < {}",
                h.consumer_group, sub.sub_version, h.sub_version
            ),
            None,
        ));
    }
    Ok(sub)
}

/// The tag or SQL92 filter of the subscription.
fn pull_filter(
    ctx: &BrokerContext,
    request: &RemotingCommand,
    h: &PullMessageHeaderRef<'_>,
    subscription: &SubscriptionData,
) -> Checked<PullFilter> {
    if subscription.is_tag_type() {
        return Ok(PullFilter::Tag(subscription.tag_filter()));
    }
    if subscription.expression_type != "SQL92" {
        return Err(refuse(
            request,
            ResponseCode::SubscriptionParseFailed,
            format!("unknown expressionType {:?}", subscription.expression_type),
            None,
        ));
    }
    if !ctx.live.enable_property_filter() {
        return Err(refuse(
            request,
            ResponseCode::SystemError,
            "The broker does not support consumer to filter message by SQL92".to_string(),
            None,
        ));
    }
    if topics::is_retry_or_dlq_topic(h.topic) {
        // filterSupportRetry=false: retry messages are not SQL-filtered.
        return Ok(PullFilter::Tag(TagFilter::All));
    }
    sql_filter(ctx, request, &subscription.sub_string)
}

/// A compiled SQL92 expression.
fn sql_filter(
    ctx: &BrokerContext,
    request: &RemotingCommand,
    expression: &str,
) -> Checked<PullFilter> {
    match ctx.sql92.map(|compile| compile(expression)) {
        Some(Ok(predicate)) => Ok(PullFilter::Sql(predicate)),
        Some(Err(e)) => Err(refuse(
            request,
            ResponseCode::SubscriptionParseFailed,
            format!("parse the consumer's subscription failed: {e}"),
            None,
        )),
        None => Err(refuse(
            request,
            ResponseCode::SystemError,
            "SQL92 filtering is not available in this broker build".to_string(),
            None,
        )),
    }
}

/// The store read (or a pending server-side offset reset): response code, remark, result.
fn read_queue(
    ctx: &BrokerContext,
    h: &PullMessageHeaderRef<'_>,
    filter: &PullFilter,
) -> (ResponseCode, &'static str, GetMessageResult) {
    let reset = if ctx.live.use_server_side_reset_offset() {
        ctx.offsets
            .take_reset_offset(h.consumer_group, h.topic, h.queue_id)
    } else {
        None
    };
    if let Some(target) = reset {
        let min = ctx.store.min_offset_in_queue(h.topic, h.queue_id);
        let max = ctx.store.max_offset_in_queue(h.topic, h.queue_id);
        let r = GetMessageResult::empty(GetMessageStatus::OffsetTooSmall, target, min, max);
        return (ResponseCode::PullOffsetMoved, "OFFSET_RESET", r);
    }
    let max_bytes = h.max_msg_bytes.filter(|b| *b > 0).unwrap_or(i32::MAX) as usize;
    let result = ctx.store.get_message(
        h.topic,
        h.queue_id,
        h.queue_offset,
        h.max_msg_nums.max(1),
        max_bytes,
        filter,
    );
    record_get(ctx, h, &result);
    let code = status_code(result.status, h.queue_offset);
    (code, result.status.name(), result)
}

/// Counts what the read found (messages and bytes by topic and group).
fn record_get(ctx: &BrokerContext, h: &PullMessageHeaderRef<'_>, result: &GetMessageResult) {
    let (messages, bytes) = if result.status == GetMessageStatus::Found {
        (
            result.messages.len() as u64,
            result.messages.iter().map(|m| m.len() as u64).sum(),
        )
    } else {
        (0, 0)
    };
    ctx.metrics
        .record_get(h.topic, h.consumer_group, messages, bytes, || {
            ctx.topics.is_system_topic(h.topic)
        });
}

/// What the pull routing rule looks at: this broker's role and settings.
#[derive(Debug, Clone, Copy)]
pub struct PullRole {
    pub is_master: bool,
    pub slave_read_enable: bool,
    /// `offsetCheckInSlave`: a slave answers PULL_OFFSET_MOVED itself instead of asking the
    /// client to retry.
    pub offset_check_in_slave: bool,
    /// A slave's HA link to its master is up (always true on a master): only then does a
    /// slave send consumers back to the master.
    pub master_online: bool,
}

fn role_of(ctx: &BrokerContext) -> PullRole {
    let is_master = ctx.is_master();
    PullRole {
        is_master,
        master_online: is_master || ctx.store.ha_status().connected_to_master,
        slave_read_enable: ctx.config.slave_read_enable,
        offset_check_in_slave: ctx
            .config
            .extra
            .get("offsetCheckInSlave")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
    }
}

/// The answer's code and `suggestWhichBrokerId` after the master/slave routing rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullRoute {
    pub code: ResponseCode,
    pub suggest_which_broker_id: u64,
}

/// Where the consumer should pull next (features.md §e.1). With `slaveReadEnable` a
/// master sends a consumer whose data lies beyond the store's in-memory window to the
/// group's `whichBrokerWhenConsumeSlowly`, otherwise to the group's `brokerId`; without it,
/// always to the master. A slave serving data the master holds in memory points back to
/// the master, and asks for an immediate retry there when it found nothing (the master may
/// have more than this slave replicated), while its master is online; the client falls
/// back to the slave on its own when the route has no master. A slave never moves a consumer's offset unless
/// `offsetCheckInSlave`: its queue may simply lag the master's.
pub fn pull_route(
    role: &PullRole,
    code: ResponseCode,
    result: &GetMessageResult,
    group_config: &SubscriptionGroupConfig,
) -> PullRoute {
    let mut suggest = if !role.slave_read_enable {
        MASTER_ID
    } else if result.suggest_pulling_from_slave {
        group_config.which_broker_when_consume_slowly
    } else {
        group_config.broker_id
    };
    let mut code = code;
    // Upstream redirects only while the group's lowest broker id is the master's: with
    // the master gone the slave answers for itself, so pulls at the end of a queue wait
    // here (long polling) instead of spinning between client and slave.
    if !role.is_master && role.master_online && !result.suggest_pulling_from_slave {
        suggest = MASTER_ID;
        if result.status != GetMessageStatus::Found {
            code = ResponseCode::PullRetryImmediately;
        }
    }
    if code == ResponseCode::PullOffsetMoved && !role.is_master && !role.offset_check_in_slave {
        suggest = group_config.broker_id;
        code = ResponseCode::PullRetryImmediately;
    }
    PullRoute {
        code,
        suggest_which_broker_id: suggest,
    }
}

/// The master's broker id (`MixAll.MASTER_ID`).
const MASTER_ID: u64 = 0;

/// The answer's header fields: where to pull next, the queue's bounds, the flags.
fn response_header(
    mut response: RemotingCommand,
    result: &GetMessageResult,
    suggest: u64,
    group_config: &SubscriptionGroupConfig,
    topic_config: &TopicConfig,
) -> RemotingCommand {
    let f = &mut response.ext_fields;
    f.insert("suggestWhichBrokerId", suggest.to_string());
    f.insert("nextBeginOffset", result.next_begin_offset.to_string());
    f.insert("minOffset", result.min_offset.to_string());
    f.insert("maxOffset", result.max_offset.to_string());
    f.insert("topicSysFlag", topic_config.topic_sys_flag.to_string());
    f.insert("groupSysFlag", group_config.group_sys_flag.to_string());
    response
}

/// Remembers the pull offset, and commits the piggy-backed consume offset (first attempt
/// on a master only).
fn record_offsets(
    ctx: &BrokerContext,
    h: &PullMessageHeaderRef<'_>,
    first: bool,
    next_begin_offset: i64,
) {
    ctx.offsets
        .record_pull_offset(h.consumer_group, h.topic, h.queue_id, next_begin_offset);
    if first && h.sys_flag & PULL_FLAG_COMMIT_OFFSET != 0 && ctx.is_master() && h.commit_offset >= 0
    {
        ctx.offsets
            .commit_offset(h.consumer_group, h.topic, h.queue_id, h.commit_offset);
    }
}

/// How long to park a first attempt that found nothing and may be suspended: the
/// client's suspendTimeoutMillis under long polling, shortPollingTimeMills otherwise.
fn suspend_timeout_ms(
    ctx: &BrokerContext,
    h: &PullMessageHeaderRef<'_>,
    code: ResponseCode,
    first: bool,
) -> Option<i64> {
    if code != ResponseCode::PullNotFound || !first || h.sys_flag & PULL_FLAG_SUSPEND == 0 {
        return None;
    }
    Some(if ctx.live.long_polling_enable() {
        h.suspend_timeout_millis.clamp(0, MAX_SUSPEND_MS)
    } else {
        ctx.live.short_polling_time_ms().min(MAX_SUSPEND_MS as u64) as i64
    })
}

/// The body of a FOUND answer: the records in order, each file span of at least
/// `zero_copy_min_bytes` bytes as one file range (no copy: spliced from the CommitLog file
/// to the socket, worth its per-run system calls only for large runs), every other record
/// from memory. 0 sends everything from memory. The bytes on the wire are the same either
/// way; a span that does not match its records (a store bug) is logged and sent from
/// memory.
pub fn pull_body(result: GetMessageResult, zero_copy_min_bytes: u64) -> Vec<BodyChunk> {
    let GetMessageResult {
        messages,
        file_spans,
        ..
    } = result;
    let mut body = Vec::with_capacity(messages.len());
    let mut spans = file_spans
        .into_iter()
        .filter(|s| zero_copy_min_bytes > 0 && s.len as u64 >= zero_copy_min_bytes)
        .peekable();
    let mut i = 0;
    while i < messages.len() {
        // Spans the walk already passed (overlapping an earlier one) cannot be used.
        while spans.next_if(|s| s.first_message < i).is_some() {
            tracing::error!("[BUG] overlapping file spans in a pull result; sending from memory");
        }
        if let Some(span) = spans.next_if(|s| s.first_message == i) {
            if let Some(range) = span_range(&messages, &span) {
                body.push(BodyChunk::File(range));
                i += span.message_count;
                continue;
            }
        }
        body.push(BodyChunk::Memory(messages[i].clone()));
        i += 1;
    }
    body
}

/// The file range of `span` if it covers exactly its records' bytes.
fn span_range(messages: &[bytes::Bytes], span: &FileSpan) -> Option<FileRange> {
    let covered = span
        .first_message
        .checked_add(span.message_count)
        .and_then(|end| messages.get(span.first_message..end));
    let covered_bytes = covered.map(|c| c.iter().map(|m| m.len()).sum::<usize>());
    if span.message_count == 0 || covered_bytes != Some(span.len) {
        tracing::error!(
            ?span,
            records = messages.len(),
            "[BUG] file span does not match its records; sending them from memory"
        );
        return None;
    }
    match FileRange::new(span.segment.clone(), span.file_offset, span.len) {
        Ok(range) => Some(range),
        Err(e) => {
            tracing::error!(
                ?span,
                "[BUG] file span is not a valid file range ({e}); sending from memory"
            );
            None
        }
    }
}

/// GetMessageStatus → response code (features.md §e.1).
pub fn status_code(status: GetMessageStatus, request_offset: i64) -> ResponseCode {
    use GetMessageStatus as S;
    match status {
        S::Found => ResponseCode::Success,
        S::MessageWasRemoving | S::NoMatchedMessage => ResponseCode::PullRetryImmediately,
        S::NoMatchedLogicQueue | S::NoMessageInQueue => {
            if request_offset != 0 {
                ResponseCode::PullOffsetMoved
            } else {
                ResponseCode::PullNotFound
            }
        }
        S::OffsetFoundNull | S::OffsetOverflowOne => ResponseCode::PullNotFound,
        S::OffsetOverflowBadly | S::OffsetTooSmall => ResponseCode::PullOffsetMoved,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;
    use crate::test_support::*;
    use ringmq_store::mapped_file::{MapMode, MappedFile};
    use std::time::Duration;

    fn pull(topic: &str, queue_offset: i64, sys_flag: i32, sub: Option<&str>) -> RemotingCommand {
        let mut r = RemotingCommand::request(11, 3);
        for (k, v) in [
            ("consumerGroup", "G1"),
            ("topic", topic),
            ("queueId", "0"),
            ("queueOffset", &queue_offset.to_string()),
            ("maxMsgNums", "32"),
            ("sysFlag", &sys_flag.to_string()),
            ("commitOffset", "0"),
            ("suspendTimeoutMillis", "300"),
            ("subVersion", "0"),
        ] {
            r.ext_fields.insert(k, v);
        }
        if let Some(s) = sub {
            r.ext_fields.insert("subscription", s);
        }
        r
    }

    #[test]
    fn send_then_pull_returns_stored_records_zero_copy() {
        let (ctx, _store) = test_context(BrokerConfig::default());
        send_simple(&ctx, "TopicP", 0, "TagA", b"one");
        send_simple(&ctx, "TopicP", 0, "TagB", b"two");
        let resp = run(&ctx, pull("TopicP", 0, PULL_FLAG_SUBSCRIPTION, Some("*")));
        assert_eq!(resp.command.code, 0, "{:?}", resp.command.remark);
        assert_eq!(resp.command.remark.as_deref(), Some("FOUND"));
        assert_eq!(resp.extra_body.len(), 2);
        assert_eq!(resp.command.ext_fields.get("nextBeginOffset"), Some("2"));
        assert_eq!(resp.command.ext_fields.get("maxOffset"), Some("2"));
        assert_eq!(
            resp.command.ext_fields.get("suggestWhichBrokerId"),
            Some("0")
        );
        let BodyChunk::Memory(second) = &resp.extra_body[1] else {
            panic!("a store without files answers from memory")
        };
        let Decoded::Message(r) = record::decode_record(second, true).unwrap() else {
            panic!()
        };
        assert_eq!(r.body, b"two");
        // Tag filter: only TagB.
        let resp = run(
            &ctx,
            pull("TopicP", 0, PULL_FLAG_SUBSCRIPTION, Some("TagB")),
        );
        assert_eq!(resp.extra_body.len(), 1);
        // Nothing matches → retry immediately with the advanced offset.
        let resp = run(
            &ctx,
            pull("TopicP", 0, PULL_FLAG_SUBSCRIPTION, Some("TagZ")),
        );
        assert_eq!(resp.command.code, ResponseCode::PullRetryImmediately.code());
        assert_eq!(resp.command.ext_fields.get("nextBeginOffset"), Some("2"));
    }

    #[test]
    fn offset_statuses_map_to_codes() {
        let (ctx, _store) = test_context(BrokerConfig::default());
        send_simple(&ctx, "TopicO", 0, "", b"x");
        let r = run(&ctx, pull("TopicO", 1, PULL_FLAG_SUBSCRIPTION, Some("*")));
        assert_eq!(
            (r.command.code, r.command.remark.as_deref()),
            (19, Some("OFFSET_OVERFLOW_ONE"))
        );
        assert_eq!(r.command.ext_fields.get("nextBeginOffset"), Some("1"));
        let r = run(&ctx, pull("TopicO", 9, PULL_FLAG_SUBSCRIPTION, Some("*")));
        assert_eq!(r.command.code, 21);
        assert_eq!(r.command.ext_fields.get("nextBeginOffset"), Some("1"));
        ctx.topics
            .update(ringmq_remoting::body::topic::TopicConfig::new("Empty"));
        let r = run(&ctx, pull("Empty", 0, PULL_FLAG_SUBSCRIPTION, Some("*")));
        assert_eq!(r.command.code, 19);
        let r = run(&ctx, pull("Empty", 5, PULL_FLAG_SUBSCRIPTION, Some("*")));
        assert_eq!(r.command.code, 21);
        assert_eq!(r.command.ext_fields.get("nextBeginOffset"), Some("0"));
        // server-side reset is one-shot
        ctx.offsets.set_reset_offset("G1", "TopicO", 0, 0);
        let r = run(&ctx, pull("TopicO", 1, PULL_FLAG_SUBSCRIPTION, Some("*")));
        assert_eq!(
            (r.command.code, r.command.remark.as_deref()),
            (21, Some("OFFSET_RESET"))
        );
        let r = run(&ctx, pull("TopicO", 0, PULL_FLAG_SUBSCRIPTION, Some("*")));
        assert_eq!(r.command.code, 0);
    }

    #[test]
    fn checks_in_order() {
        let (ctx, _store) = test_context(BrokerConfig::default());
        let mut r = pull("TopicX", 0, 0, None);
        r.ext_fields.remove("queueOffset");
        assert_eq!(run(&ctx, r).command.code, ResponseCode::SystemError.code());
        assert_eq!(
            run(&ctx, pull("NoSuchTopic", 0, 4, Some("*"))).command.code,
            17
        );
        send_simple(&ctx, "TopicX", 0, "", b"x");
        let mut r = pull("TopicX", 0, 4, Some("*"));
        r.ext_fields.insert("queueId", "99");
        assert_eq!(run(&ctx, r).command.code, 29);
        // No heartbeat yet and no subscription bit: 24.
        assert_eq!(run(&ctx, pull("TopicX", 0, 0, None)).command.code, 24);
        // SQL92 without enablePropertyFilter: 1.
        let mut r = pull("TopicX", 0, 4, Some("a > 1"));
        r.ext_fields.insert("expressionType", "SQL92");
        assert_eq!(run(&ctx, r).command.code, 1);
        let mut bad_group = pull("TopicX", 0, 4, Some("*"));
        bad_group.ext_fields.insert("consumerGroup", "bad group!");
        assert_eq!(run(&ctx, bad_group).command.code, 26);
        let cfg = BrokerConfig {
            auto_create_subscription_group: false,
            ..BrokerConfig::default()
        };
        let (ctx2, _) = test_context(cfg);
        send_simple(&ctx2, "TopicX", 0, "", b"x");
        assert_eq!(run(&ctx2, pull("TopicX", 0, 4, Some("*"))).command.code, 26);
    }

    #[test]
    fn heartbeat_subscription_serves_pull_and_commit_piggyback() {
        let (ctx, _store) = test_context(BrokerConfig::default());
        send_simple(&ctx, "TopicH", 0, "TagA", b"x");
        heartbeat_consumer(&ctx, "G1", "TopicH", "TagA", 5);
        let mut r = pull("TopicH", 0, PULL_FLAG_COMMIT_OFFSET, None);
        r.ext_fields.insert("commitOffset", "0");
        assert_eq!(run(&ctx, r).command.code, 0);
        assert_eq!(ctx.offsets.query_offset("G1", "TopicH", 0), Some(0));
        let mut newer = pull("TopicH", 0, 0, None);
        newer.ext_fields.insert("subVersion", "6");
        assert_eq!(run(&ctx, newer).command.code, 25);
    }

    #[test]
    fn long_poll_wakes_on_arrival_and_times_out() {
        let (ctx, _store) = test_context(BrokerConfig::default());
        ctx.topics
            .update(ringmq_remoting::body::topic::TopicConfig::new("TopicL"));
        let (handled, rx) = run_deferred(
            &ctx,
            pull(
                "TopicL",
                0,
                PULL_FLAG_SUBSCRIPTION | PULL_FLAG_SUSPEND,
                Some("TagA"),
            ),
        );
        assert!(matches!(handled, Reply::Later));
        assert_eq!(ctx.hold.held_count(), 1);
        // No network core runs here: the test does the core's per-pass work itself.
        send_simple(&ctx, "TopicL", 0, "TagB", b"other tag: keeps holding");
        ctx.on_core_wake(0);
        assert!(rx.try_recv().is_err());
        send_simple(&ctx, "TopicL", 0, "TagA", b"wake");
        ctx.on_core_wake(0);
        let resp = rx.try_recv().expect("woken");
        assert_eq!(resp.command.code, 0);
        assert_eq!(resp.extra_body.len(), 1);
        // Timeout (300 ms) answers PULL_NOT_FOUND, and not before.
        let parked_at = std::time::Instant::now();
        let (_, rx) = run_deferred(
            &ctx,
            pull(
                "TopicL",
                2,
                PULL_FLAG_SUBSCRIPTION | PULL_FLAG_SUSPEND,
                Some("*"),
            ),
        );
        let resp = await_answer(&ctx, &rx, Duration::from_secs(3)).expect("expired");
        assert_eq!(resp.command.code, 19);
        assert!(parked_at.elapsed() >= Duration::from_millis(290));
    }

    /// Three records back to back in a file, from offset 7; returns the records and the
    /// (already unlinked) file.
    fn records_in_file(name: &str) -> (Vec<bytes::Bytes>, Arc<MappedFile>) {
        let records: Vec<bytes::Bytes> = [&b"first-record"[..], b"second", b"third-record!"]
            .iter()
            .map(|r| bytes::Bytes::copy_from_slice(r))
            .collect();
        let path =
            std::env::temp_dir().join(format!("ringmq-pull-body-{name}-{}", std::process::id()));
        let mut content = vec![b'#'; 7]; // the records start at a non-zero offset
        for r in &records {
            content.extend_from_slice(r);
        }
        std::fs::write(&path, &content).unwrap();
        let file = MappedFile::open(&path, 0, content.len() as u64, MapMode::ReadOnly).unwrap();
        std::fs::remove_file(&path).unwrap();
        (records, Arc::new(file))
    }

    fn result_with(records: &[bytes::Bytes], spans: Vec<FileSpan>) -> GetMessageResult {
        let mut r = GetMessageResult::empty(GetMessageStatus::Found, 3, 0, 3);
        r.messages = records.to_vec();
        r.message_queue_offsets = vec![0, 1, 2];
        r.file_spans = spans;
        r
    }

    fn wire(body: &[BodyChunk]) -> Vec<u8> {
        body.iter()
            .flat_map(|c| match c {
                BodyChunk::Memory(b) => b.to_vec(),
                BodyChunk::File(r) => r.read_to_vec().expect("range readable"),
            })
            .collect()
    }

    #[test]
    fn pull_body_sends_long_enough_spans_from_the_file_and_the_rest_from_memory() {
        let (records, file) = records_in_file("threshold");
        let expected: Vec<u8> = records.iter().flat_map(|r| r.to_vec()).collect();
        let span = |first: usize, count: usize, offset: u64, len: usize| FileSpan {
            first_message: first,
            message_count: count,
            segment: file.clone(),
            file_offset: offset,
            len,
        };
        // Records 1 and 2 are one 19-byte span at file offset 7 + 12.
        let spans = || vec![span(1, 2, 19, 19)];
        let kinds = |body: &[BodyChunk]| -> Vec<&str> {
            body.iter()
                .map(|c| match c {
                    BodyChunk::Memory(_) => "mem",
                    BodyChunk::File(_) => "file",
                })
                .collect()
        };

        let off = pull_body(result_with(&records, spans()), 0);
        assert_eq!(
            kinds(&off),
            ["mem", "mem", "mem"],
            "0 turns file ranges off"
        );
        let short = pull_body(result_with(&records, spans()), 20);
        assert_eq!(
            kinds(&short),
            ["mem", "mem", "mem"],
            "a span under the minimum"
        );
        let on = pull_body(result_with(&records, spans()), 19);
        assert_eq!(kinds(&on), ["mem", "file"]);
        assert_eq!(wire(&on), expected, "the same bytes either way");
        assert_eq!(wire(&off), expected);

        // A span whose length does not match its records is not trusted.
        let bad = pull_body(result_with(&records, vec![span(1, 2, 19, 18)]), 1);
        assert_eq!(kinds(&bad), ["mem", "mem", "mem"]);
        // Nor one that runs past the records, nor one overlapping an earlier span.
        let past = pull_body(result_with(&records, vec![span(2, 5, 25, 13)]), 1);
        assert_eq!(kinds(&past), ["mem", "mem", "mem"]);
        let overlapping = pull_body(
            result_with(&records, vec![span(0, 2, 7, 18), span(1, 2, 19, 19)]),
            1,
        );
        assert_eq!(kinds(&overlapping), ["file", "mem"]);
        assert_eq!(wire(&overlapping), expected);
    }
}
