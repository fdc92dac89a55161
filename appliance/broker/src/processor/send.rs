//! SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320): validate the request,
//! resolve (or auto-create) the topic, apply the retry/DLQ, delay-level and transaction-half
//! rewrites, encode the CommitLog record(s) on the network core, hand them to the store, and
//! answer from the store's completion (headers.md §1, store.md §5.6-5.7).
//!
//! Single vs batch is decided by the header's `batch`/`m` field, never by the code (C++ sends
//! batches as 310 with `m: "1"`).

use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use ringmq_remoting::body::topic::TopicConfig;
use ringmq_remoting::codes::ResponseCode;
use ringmq_remoting::header::SendMessageHeaderRef;
use ringmq_remoting::message::properties::{self, keys, MessageProperties};
use ringmq_remoting::message::record::{self, RecordFields};
use ringmq_remoting::message::{batch, id, sysflag};
use ringmq_remoting::number::{decimal, I64_DECIMAL_BYTES};
use ringmq_remoting::RemotingCommand;
use ringmq_runtime::{Reply, RequestContext};
use ringmq_store::refusal::{RefusalLog, DEFAULT_REFUSAL_LOG_INTERVAL};
use ringmq_store::{PutMessageStatus, PutRequest, PutResult};

use crate::context::{error_response, header_error, BrokerContext};
use crate::metadata::topic_config::{self as topics, AutoCreate, PERM_READ, PERM_WRITE};
use crate::metrics::MessageType;
pub(crate) use crate::random::random_below;
use ringmq_sync::LockExt;

thread_local! {
    /// Per-core scratch for the stored property string (reused across sends).
    static PROPS_SCRATCH: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(512));
}

/// A message ready for the store, plus what the response needs.
struct Prepared {
    topic: String,
    queue_id: i32,
    /// The queue the producer asked for (a random one when it asked for -1): what the response
    /// names even when the message was parked in a schedule, half or DLQ queue, so the client's
    /// send result points at the queue it chose, as upstream's does.
    response_queue_id: i32,
    sys_flag: i32,
    records: BytesMut,
    record_count: u32,
    /// Record sizes (batches only), to compute each member's offsetMsgId.
    sizes: Vec<u32>,
    uniq_key: Option<String>,
    /// The recall handle of a parked timer message (single sends only, as upstream).
    recall_handle: Option<String>,
    wait_store_msg_ok: bool,
}

/// Processes a send request that waited `queued_ms` before reaching this processor.
pub fn process(
    ctx: &Arc<BrokerContext>,
    mut request: RemotingCommand,
    rc: &RequestContext,
    queued_ms: u64,
) -> Reply {
    let started = rc.received_at();
    // The header first: a malformed send is refused naming its field on any broker.
    let header = match SendMessageHeaderRef::decode_for_code(request.code, &request.ext_fields) {
        Ok(h) => h,
        Err(e) => return header_error(&request, e),
    };
    if !ctx.is_master() {
        return reject_request(&request);
    }
    if ctx.live.broker_fast_failure_enable()
        && queued_ms >= ctx.live.wait_time_in_send_queue_ms()
        && queued_ms > 0
    {
        return reply_error(
            &request,
            ResponseCode::SystemBusy,
            timeout_clean_queue_remark(queued_ms, ctx.store.queued_puts()),
        );
    }
    let born_host = rc.connection().peer_addr();
    let prepared = match prepare(ctx, &request, &header, born_host) {
        Ok(p) => p,
        Err((code, remark)) => return reply_error(&request, code, remark),
    };
    let oneway = request.is_oneway();
    // Metrics series of the original topic (a delay message counts under its topic, as
    // upstream's), resolved here so the store's completion needs no topic string.
    let in_key = ctx.metrics.in_key(
        header.topic,
        MessageType::from_properties(header.properties_or_empty()),
        || ctx.topics.is_system_topic(header.topic),
    );
    let request_code = request.code;
    let mut response = request.response_to(ResponseCode::Success.code(), None);
    // The request's extFields map becomes the response's (the header borrowed from it is
    // no longer used): its two buffers are reused instead of allocated per answer.
    response.ext_fields = std::mem::take(&mut request.ext_fields);
    response.ext_fields.clear();
    let put = PutRequest {
        topic: prepared.topic,
        queue_id: prepared.queue_id,
        sys_flag: prepared.sys_flag,
        records: prepared.records,
        record_count: prepared.record_count,
        wait_store_msg_ok: prepared.wait_store_msg_ok,
    };
    let topic_for_log = if oneway {
        put.topic.clone()
    } else {
        String::new()
    };
    let queue_id = put.queue_id;
    let response_queue_id = prepared.response_queue_id;
    if oneway {
        let ctx_ow = ctx.clone();
        ctx.store.put_received(
            put,
            started,
            Box::new(move |result: PutResult| {
                if result.status_is_stored() {
                    ctx_ow.metrics.record_put(
                        in_key,
                        result.msg_num.max(0) as u64,
                        result.wrote_bytes.max(0) as u64,
                    );
                } else if let Some(line) = ONEWAY_NOT_STORED_LOG.note(result.status.name()) {
                    let suppressed = line.suppressed();
                    tracing::warn!(
                        topic = topic_for_log,
                        queue_id,
                        status = result.status.name(),
                        suppressed,
                        "oneway send not stored"
                    );
                }
            }),
        );
        return Reply::Nothing;
    }
    let responder = rc.responder();
    let ctx2 = ctx.clone();
    let sizes = prepared.sizes;
    let uniq_key = prepared.uniq_key;
    let recall_handle = prepared.recall_handle;
    ctx.store.put_received(
        put,
        started,
        Box::new(move |result: PutResult| {
            let command = put_response(
                &ctx2,
                response,
                response_queue_id,
                &sizes,
                SendIds {
                    uniq_key: uniq_key.as_deref(),
                    recall_handle: recall_handle.as_deref(),
                },
                &result,
            );
            let stored = result.status_is_stored().then(|| {
                (
                    in_key,
                    result.msg_num.max(0) as u64,
                    result.wrote_bytes.max(0) as u64,
                )
            });
            ctx2.metrics.record_send(
                stored,
                request_code,
                command.code,
                command.remark.as_deref(),
                ringmq_runtime::pass_clock().saturating_duration_since(started),
            );
            responder.respond(command);
        }),
    );
    Reply::Later
}

trait StoredStatus {
    fn status_is_stored(&self) -> bool;
}

impl StoredStatus for PutResult {
    fn status_is_stored(&self) -> bool {
        matches!(
            self.status,
            PutMessageStatus::PutOk
                | PutMessageStatus::FlushDiskTimeout
                | PutMessageStatus::FlushSlaveTimeout
                | PutMessageStatus::SlaveNotAvailable
        )
    }
}

/// Upstream's BrokerFastFailure remark for a send that waited too long for the store:
/// `waited_ms` in the queue, `queue_len` puts queued when it was refused.
pub(crate) fn timeout_clean_queue_remark(waited_ms: u64, queue_len: usize) -> String {
    format!(
        "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: {waited_ms}ms, size of queue: {queue_len}"
    )
}

/// Refusal log limits, one per call site, keyed by status or response code name.
static ONEWAY_NOT_STORED_LOG: RefusalLog =
    RefusalLog::new("oneway send", DEFAULT_REFUSAL_LOG_INTERVAL);
static REFUSED_LOG: RefusalLog = RefusalLog::new("send", DEFAULT_REFUSAL_LOG_INTERVAL);
static NOT_STORED_LOG: RefusalLog = RefusalLog::new("send", DEFAULT_REFUSAL_LOG_INTERVAL);

fn reply_error(request: &RemotingCommand, code: ResponseCode, remark: String) -> Reply {
    if let Some(line) = REFUSED_LOG.note(code.name()) {
        let suppressed = line.suppressed();
        tracing::warn!(code = code.name(), suppressed, "send refused: {remark}");
    }
    if request.is_oneway() {
        return Reply::Nothing;
    }
    error_response(request, code, remark).into()
}

type Refusal = (ResponseCode, String);

/// What a slave answers to a request its role does not serve (sends always; pulls unless
/// `slaveReadEnable`): upstream refuses these before any processing, with this remark.
pub(crate) const REJECT_REQUEST_REMARK: &str =
    "[REJECTREQUEST]system busy, start flow control for a while";

/// SYSTEM_BUSY with [`REJECT_REQUEST_REMARK`] (nothing for a oneway request).
pub(crate) fn reject_request(request: &RemotingCommand) -> Reply {
    if request.is_oneway() {
        return Reply::Nothing;
    }
    error_response(
        request,
        ResponseCode::SystemBusy,
        REJECT_REQUEST_REMARK.to_string(),
    )
    .into()
}

/// Upstream's `FAQUrl.suggestTodo(…)` tail: its common refusals end with this pointer to the
/// FAQ, and clients and operators match on the whole text.
pub(crate) const FAQ_SUGGESTION: &str =
    "\nSee https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details.";

/// Upstream's send-path remark for a topic that does not exist and may not be auto-created.
pub(crate) fn topic_not_exist_remark(topic: &str) -> String {
    format!("topic[{topic}] not exist, apply first please!{FAQ_SUGGESTION}")
}

/// Upstream's send and send-back remark for a `%RETRY%` group that does not exist.
pub(crate) fn subscription_group_not_exist_remark(group: &str) -> String {
    format!("subscription group not exist, {group} {FAQ_SUGGESTION}")
}

/// Upstream's remark for a message the store refuses as illegal: a body over `maxMessageSize`
/// or properties over 32 KiB.
pub(crate) fn message_illegal_remark(max_message_size_bytes: u32) -> String {
    format!(
        "the message is illegal, maybe msg body or properties length not matched. msg body length limit {max_message_size_bytes}B, msg properties length limit 32KB."
    )
}

/// Everything before the store: checks, topic resolution, rewrites, record encoding.
fn prepare(
    ctx: &BrokerContext,
    request: &RemotingCommand,
    header: &SendMessageHeaderRef<'_>,
    born_host: SocketAddr,
) -> Result<Prepared, Refusal> {
    let config = &ctx.config;
    if !ctx.live.is_writeable() {
        return Err((
            ResponseCode::NoPermission,
            format!(
                "the broker[{}] sending message is forbidden",
                config.broker_ip1
            ),
        ));
    }
    let topic = header.topic;
    topics::validate_topic(topic).map_err(|e| (ResponseCode::InvalidParameter, e))?;
    if topics::is_not_allowed_send_topic(topic) {
        return Err((
            ResponseCode::NoPermission,
            format!("Sending message to topic[{topic}] is forbidden."),
        ));
    }
    if let Err(e) = properties::check_header_properties(header.properties_or_empty()) {
        return Err((ResponseCode::MessageIllegal, e.to_string()));
    }
    let topic_sys_flag = if header.is_unit_mode() { 1 } else { 0 };
    // An existing topic is read from this core's snapshot of the table; only an unknown
    // one goes through auto-creation.
    let existing = ctx.topics.with_topic(topic, |tc| tc.map(SendTopic::of));
    let topic_config = match existing {
        Some(tc) => tc,
        None => match ctx.topics.create_topic_in_send(
            ctx.live.auto_create_topic_enable(),
            topic,
            header.default_topic,
            header.default_topic_queue_nums.max(1) as u32,
            topic_sys_flag,
        ) {
            AutoCreate::Existing(tc) | AutoCreate::Created(tc) => SendTopic::of(&tc),
            AutoCreate::NotAllowed(why) => {
                tracing::debug!(topic, "send to an unknown topic refused: {why}");
                return Err((ResponseCode::TopicNotExist, topic_not_exist_remark(topic)));
            }
        },
    };
    if !topic_config.writeable {
        return Err((
            ResponseCode::NoPermission,
            format!("the topic[{topic}] sending message is forbidden"),
        ));
    }
    let max_queues = topic_config.max_queue_nums();
    let mut queue_id = header.queue_id;
    if queue_id >= max_queues {
        return Err((
            ResponseCode::InvalidParameter,
            format!(
                "request queueId[{queue_id}] is illegal, topic[{topic}] has {max_queues} queues (read {} write {}), broker {}",
                topic_config.read_queue_nums, topic_config.write_queue_nums, config.broker_ip1
            ),
        ));
    }
    if queue_id < 0 {
        queue_id = random_below(topic_config.write_queue_nums.max(1) as u32) as i32;
    }
    let mut sys_flag = header.sys_flag;
    if topic_config.multi_tag {
        sys_flag |= sysflag::MULTI_TAGS_FLAG;
    }
    // Live: UPDATE_BROKER_CONFIG may have changed it since start.
    let max_message_size_bytes = ctx.live.max_message_size_bytes();
    if request.body.len() > max_message_size_bytes as usize {
        return Err((
            ResponseCode::MessageIllegal,
            message_illegal_remark(max_message_size_bytes),
        ));
    }
    if header.is_batch() {
        prepare_batch(ctx, request, header, topic, queue_id, sys_flag, born_host)
    } else {
        prepare_single(
            ctx,
            request,
            header,
            topic.to_string(),
            queue_id,
            sys_flag,
            born_host,
        )
    }
}

/// What a send reads of its topic's config, copied out of the table.
#[derive(Clone, Copy)]
struct SendTopic {
    writeable: bool,
    multi_tag: bool,
    read_queue_nums: i32,
    write_queue_nums: i32,
}

impl SendTopic {
    fn of(tc: &TopicConfig) -> Self {
        Self {
            writeable: tc.is_writeable(),
            multi_tag: tc.is_multi_tag(),
            read_queue_nums: tc.read_queue_nums,
            write_queue_nums: tc.write_queue_nums,
        }
    }

    /// Queue ids `0..` this are valid targets (Java's `max(read, write)`).
    fn max_queue_nums(&self) -> i32 {
        self.read_queue_nums.max(self.write_queue_nums)
    }
}

#[allow(clippy::too_many_arguments)]
fn prepare_single(
    ctx: &BrokerContext,
    request: &RemotingCommand,
    header: &SendMessageHeaderRef<'_>,
    mut topic: String,
    mut queue_id: i32,
    mut sys_flag: i32,
    born_host: SocketAddr,
) -> Result<Prepared, Refusal> {
    let config = &ctx.config;
    let response_queue_id = queue_id;
    let raw = header.properties_or_empty();
    // One pass over the properties for everything the broker reacts to.
    let (mut uniq, mut delay, mut tran, mut pop_ck, mut wait) = (None, None, false, false, true);
    let mut timer_seen = false;
    for (k, v) in properties::iter(raw) {
        match k {
            k if crate::timer_put::is_timer_key(k) => timer_seen = true,
            keys::UNIQ_KEY => uniq = Some(v),
            keys::DELAY => delay = Some(v),
            keys::TRAN_MSG => tran = v.eq_ignore_ascii_case("true"),
            keys::POP_CK => pop_ck = true,
            keys::WAIT => wait = !v.eq_ignore_ascii_case("false"),
            _ => {}
        }
    }
    let delay_level: i32 = match delay {
        Some(d) => d.trim().parse().map_err(|_| {
            (
                ResponseCode::MessageIllegal,
                format!("the DELAY property {d:?} is not an integer delay level"),
            )
        })?,
        None => 0,
    };
    let uniq_key: String = match uniq {
        Some(u) => u.to_string(),
        None => ctx
            .uniq_keys
            .lock_unpoisoned()
            .next_id(crate::persist::now_ms()),
    };

    // Retry topic: DLQ when the message has been reconsumed too often (or the group holds
    // orderly locks).
    let mut to_dlq = false;
    if let Some(group) = topic.strip_prefix(topics::RETRY_GROUP_TOPIC_PREFIX) {
        let Some(group_config) = ctx.groups.find(group) else {
            return Err((
                ResponseCode::SubscriptionGroupNotExist,
                subscription_group_not_exist_remark(group),
            ));
        };
        let max_reconsume = header
            .max_reconsume_times
            .unwrap_or(group_config.retry_max_times);
        if header.reconsume_times_or_zero() > max_reconsume || ctx.locks.has_unexpired_lock(group) {
            let dlq = topics::dlq_topic(group);
            let tc = ctx
                .topics
                .create_topic_of_retry(&dlq, 1, PERM_READ | PERM_WRITE);
            if !tc.is_writeable() {
                return Err((
                    ResponseCode::NoPermission,
                    format!("the topic[{dlq}] sending message is forbidden"),
                ));
            }
            tracing::info!(
                group,
                reconsume = header.reconsume_times_or_zero(),
                max_reconsume,
                "retry message goes to {dlq}"
            );
            topic = dlq;
            queue_id = 0;
            to_dlq = true;
        }
    }
    let half = tran && !(header.reconsume_times_or_zero() > 0 && delay_level > 0);
    if half && ctx.live.reject_transaction_message() {
        return Err((
            ResponseCode::NoPermission,
            format!(
                "the broker[{}] sending transaction message is forbidden",
                config.broker_ip1
            ),
        ));
    }
    let tx_type = sys_flag & sysflag::TRANSACTION_TYPE_MASK;
    let scheduled = !half
        && !to_dlq
        && delay_level > 0
        && (tx_type == sysflag::TRANSACTION_NOT_TYPE
            || tx_type == sysflag::TRANSACTION_COMMIT_TYPE);
    // Timer messages (features.md §c.2) are rewritten before the record is built.
    let mut timer_props = None;
    if timer_seen
        && !half
        && (tx_type == sysflag::TRANSACTION_NOT_TYPE || tx_type == sysflag::TRANSACTION_COMMIT_TYPE)
    {
        timer_props =
            crate::timer_put::apply_for_send(ctx, raw, delay_level, &mut topic, &mut queue_id)?;
    }

    let mut records = BytesMut::new();
    let mut recall_handle = None;
    let encoded = PROPS_SCRATCH.with(|scratch| {
        let mut props = scratch.borrow_mut();
        props.clear();
        if !(to_dlq || half || scheduled || pop_ck || timer_props.is_some()) {
            // Fast path: the client's string verbatim, plus what the broker always adds.
            props.extend_from_slice(raw.as_bytes());
            if !props.is_empty() && props.last() != Some(&properties::PROPERTY_SEPARATOR) {
                props.push(properties::PROPERTY_SEPARATOR);
            }
            if uniq.is_none() {
                properties::encode_entry_into(&mut props, keys::UNIQ_KEY, &uniq_key);
            }
            properties::encode_entry_into(&mut props, keys::CLUSTER, &config.broker_cluster_name);
        } else {
            if let Some(parked) = &timer_props {
                recall_handle =
                    crate::recall::RecallHandle::for_parked(parked, &config.broker_name, &uniq_key);
            }
            let mut map = timer_props
                .take()
                .unwrap_or_else(|| MessageProperties::parse(raw));
            map.remove(keys::POP_CK);
            let _ = map.insert(keys::UNIQ_KEY, &uniq_key);
            let _ = map.insert(keys::CLUSTER, &config.broker_cluster_name);
            if to_dlq {
                let _ = map.insert(keys::DELAY, "0");
            } else if half {
                let _ = map.insert(keys::TRANSACTION_ID, &uniq_key);
                let _ = map.insert(keys::REAL_TOPIC, &topic);
                let _ = map.insert(keys::REAL_QID, &queue_id.to_string());
                topic = topics::TRANS_HALF_TOPIC.to_string();
                queue_id = 0;
                sys_flag =
                    sysflag::reset_transaction_value(sys_flag, sysflag::TransactionType::NotType);
            } else if scheduled {
                // The schedule module's put hook: REAL_TOPIC/REAL_QID, level clamp, queue.
                if let Some(parked) = crate::schedule::park_delayed(
                    &mut map,
                    &topic,
                    queue_id,
                    delay_level,
                    ctx.delay_levels_ms.len(),
                ) {
                    topic = parked.topic;
                    queue_id = parked.queue_id;
                }
            }
            map.encode_into(&mut props);
        }
        let fields = RecordFields {
            queue_id,
            flag: header.flag,
            queue_offset: 0,
            physical_offset: 0,
            sys_flag,
            born_timestamp_ms: header.born_timestamp,
            born_host,
            store_timestamp_ms: 0,
            store_host: ctx.store_host,
            reconsume_times: header.reconsume_times_or_zero(),
            prepared_transaction_offset: 0,
            body: &request.body,
            topic: &topic,
            properties: &props,
        };
        record::encode_record(&fields, &mut records)
    });
    if let Err(e) = encoded {
        return Err((
            ResponseCode::MessageIllegal,
            format!("the message cannot be stored: {e}"),
        ));
    }
    Ok(Prepared {
        topic,
        queue_id,
        response_queue_id,
        sys_flag,
        records,
        record_count: 1,
        sizes: Vec::new(),
        uniq_key: Some(uniq_key),
        recall_handle,
        wait_store_msg_ok: wait,
    })
}

fn prepare_batch(
    ctx: &BrokerContext,
    request: &RemotingCommand,
    header: &SendMessageHeaderRef<'_>,
    topic: &str,
    queue_id: i32,
    sys_flag: i32,
    born_host: SocketAddr,
) -> Result<Prepared, Refusal> {
    if topic.len() > topics::TOPIC_MAX_LENGTH {
        return Err((
            ResponseCode::MessageIllegal,
            format!("message topic length too long {}", topic.len()),
        ));
    }
    if topic.starts_with(topics::RETRY_GROUP_TOPIC_PREFIX) {
        return Err((
            ResponseCode::MessageIllegal,
            "batch request does not support retry group".to_string(),
        ));
    }
    if sys_flag & sysflag::TRANSACTION_TYPE_MASK == sysflag::TRANSACTION_PREPARED_TYPE {
        return Err((
            ResponseCode::MessageIllegal,
            "batch messages cannot be transactional".to_string(),
        ));
    }
    let items = batch::decode_batch(&request.body, ctx.live.max_message_size_bytes() as usize)
        .map_err(|e| (ResponseCode::MessageIllegal, format!("bad batch body: {e}")))?;
    let mut records = BytesMut::with_capacity(request.body.len() + items.len() * 160);
    let mut sizes = Vec::with_capacity(items.len());
    let mut wait = true;
    let cluster = ctx.config.broker_cluster_name.as_str();
    let mut member_props: Vec<u8> = Vec::with_capacity(256);
    for item in &items {
        if properties::find_bytes(item.properties, keys::DELAY.as_bytes())
            .is_some_and(|d| d != b"0")
        {
            return Err((
                ResponseCode::MessageIllegal,
                "batch messages cannot carry a delay level".to_string(),
            ));
        }
        if properties::find_bytes(item.properties, keys::WAIT.as_bytes())
            .is_some_and(|w| w.eq_ignore_ascii_case(b"false"))
        {
            wait = false;
        }
        member_props_with_cluster(&mut member_props, item.properties, cluster);
        let fields = RecordFields {
            queue_id,
            flag: item.flag,
            queue_offset: 0,
            physical_offset: 0,
            sys_flag,
            born_timestamp_ms: header.born_timestamp,
            born_host,
            store_timestamp_ms: 0,
            store_host: ctx.store_host,
            reconsume_times: header.reconsume_times_or_zero(),
            prepared_transaction_offset: 0,
            body: item.body,
            topic,
            properties: &member_props,
        };
        let size = record::encode_record(&fields, &mut records).map_err(|e| {
            (
                ResponseCode::MessageIllegal,
                format!("batch member cannot be stored: {e}"),
            )
        })?;
        sizes.push(size as u32);
    }
    let uniq_key =
        properties::find(header.properties_or_empty(), keys::UNIQ_KEY).map(str::to_string);
    Ok(Prepared {
        topic: topic.to_string(),
        queue_id,
        response_queue_id: queue_id,
        sys_flag,
        records,
        record_count: items.len() as u32,
        sizes,
        uniq_key,
        recall_handle: None,
        wait_store_msg_ok: wait,
    })
}

/// A batch member's stored properties: its own, then `CLUSTER`, as upstream's batch encoder
/// appends the broker-added batch properties to every member. The rest of the batch header's
/// properties is not merged: it carries the batch's own UNIQ_KEY, which would give every member
/// the same message id (upstream stopped merging them for that reason, apache/rocketmq#9416).
fn member_props_with_cluster(out: &mut Vec<u8>, own: &[u8], cluster: &str) {
    out.clear();
    out.extend_from_slice(own);
    if !own.is_empty() && own.last() != Some(&properties::PROPERTY_SEPARATOR) {
        out.push(properties::PROPERTY_SEPARATOR);
    }
    properties::encode_entry_into(out, keys::CLUSTER, cluster);
}

/// The ids a send answer names besides the offset message id.
#[derive(Clone, Copy)]
struct SendIds<'a> {
    /// The message's UNIQ_KEY (`transactionId` in the answer).
    uniq_key: Option<&'a str>,
    /// A parked timer message's recall handle.
    recall_handle: Option<&'a str>,
}

/// The send response for a store outcome (store.md §5.7). `queueId` is the queue the producer
/// asked for and `queueOffset` the offset in the queue actually written, as upstream answers.
fn put_response(
    ctx: &BrokerContext,
    mut response: RemotingCommand,
    response_queue_id: i32,
    sizes: &[u32],
    ids: SendIds<'_>,
    result: &PutResult,
) -> RemotingCommand {
    let uniq_key = ids.uniq_key;
    use PutMessageStatus as S;
    let (code, remark): (ResponseCode, Option<String>) = match result.status {
        S::PutOk => (ResponseCode::Success, None),
        S::FlushDiskTimeout => (ResponseCode::FlushDiskTimeout, None),
        S::FlushSlaveTimeout => (ResponseCode::FlushSlaveTimeout, None),
        S::SlaveNotAvailable => (ResponseCode::SlaveNotAvailable, None),
        S::ServiceNotAvailable => (
            ResponseCode::ServiceNotAvailable,
            Some("service not available now. It may be caused by one of the following reasons: the broker's disk is full, messages are put to the slave, message store has been shut down, etc.".to_string()),
        ),
        S::CreateMappedFileFailed => (ResponseCode::SystemError, Some("create mapped file failed, server is busy or broken.".to_string())),
        S::MessageIllegal | S::PropertiesSizeExceeded => (
            ResponseCode::MessageIllegal,
            Some(message_illegal_remark(ctx.live.max_message_size_bytes())),
        ),
        S::OsPageCacheBusy => (
            ResponseCode::SystemBusy,
            Some("[PC_SYNCHRONIZED]broker busy, start flow control for a while".to_string()),
        ),
        S::InSyncReplicasNotEnough => (ResponseCode::SystemError, Some("in-sync replicas not enough".to_string())),
        S::LmqConsumeQueueNumExceeded => (
            ResponseCode::SystemError,
            Some("[LMQ_CONSUME_QUEUE_NUM_EXCEEDED]broker config enableLmq and enableMultiDispatch, lmq consumeQueue num exceed maxLmqConsumeQueueNum config num".to_string()),
        ),
        S::WheelTimerMsgIllegal => (ResponseCode::MessageIllegal, Some("timer message delay exceeds the maximum".to_string())),
        S::WheelTimerFlowControl => (ResponseCode::SystemError, Some("timer message is under flow control".to_string())),
        S::WheelTimerNotEnable => (ResponseCode::SystemError, Some("accurate timer message is not enabled, timerWheelEnable is false".to_string())),
        S::UnknownError | S::PutToRemoteBrokerFail => (ResponseCode::SystemError, Some("UNKNOWN_ERROR".to_string())),
        S::SendQueueTimeout => (
            ResponseCode::SystemBusy,
            Some(timeout_clean_queue_remark(u64::from(result.queued_ms), ctx.store.queued_puts())),
        ),
    };
    response.code = code.code();
    response.remark = remark;
    if !result.status_is_stored() {
        if let Some(line) = NOT_STORED_LOG.note(result.status.name()) {
            let suppressed = line.suppressed();
            tracing::warn!(status = result.status.name(), suppressed, "send not stored");
        }
        return response;
    }
    // This runs for every send, on the network core that owns the connection (the store
    // hands completions back to it): the header is built from borrowed text into the
    // request's map (cleared in `process`), with the id and numbers formatted in scratch
    // space, so the response allocates nothing unless the map must grow.
    MSG_ID_SCRATCH.with(|scratch| {
        let mut msg_id = scratch.borrow_mut();
        msg_id.clear();
        if sizes.len() > 1 {
            let mut offset = result.wrote_offset;
            for (i, size) in sizes.iter().enumerate() {
                if i > 0 {
                    msg_id.push(',');
                }
                id::write_offset_msg_id(&mut msg_id, &ctx.store_host, offset);
                offset += *size as i64;
            }
        } else {
            id::write_offset_msg_id(&mut msg_id, &ctx.store_host, result.wrote_offset);
        }
        let region = ctx.config.region_id.as_str();
        let f = &mut response.ext_fields;
        f.reserve(
            7,
            msg_id.len()
                + region.len()
                + uniq_key.map_or(0, str::len)
                + ids.recall_handle.map_or(0, str::len)
                + 112,
        );
        f.insert_str("msgId", &msg_id);
        let mut digits = [0u8; I64_DECIMAL_BYTES];
        f.insert_str(
            "queueId",
            decimal(&mut digits, i64::from(response_queue_id)),
        );
        f.insert_str("queueOffset", decimal(&mut digits, result.queue_offset));
        if let Some(u) = uniq_key {
            f.insert_str("transactionId", u);
        }
        if let Some(h) = ids.recall_handle {
            f.insert_str("recallHandle", h);
        }
        f.insert_str(keys::MSG_REGION, region);
        f.insert_str(
            keys::TRACE_ON,
            if ctx.config.trace_on { "true" } else { "false" },
        );
    });
    response
}

thread_local! {
    /// Scratch for the offsetMsgId(s) of a send response (reused on whichever thread runs
    /// the store's completion).
    static MSG_ID_SCRATCH: RefCell<String> = RefCell::new(String::with_capacity(64));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;
    use crate::test_support::*;
    use ringmq_remoting::message::record::{decode_record, Decoded};
    use ringmq_store::{AcceptAll, StoreApi};

    fn v2(topic: &str, props: &str) -> RemotingCommand {
        let mut r = RemotingCommand::request(310, 7);
        for (k, v) in [
            ("a", "PG"),
            ("b", topic),
            ("c", "TBW102"),
            ("d", "4"),
            ("e", "0"),
            ("f", "0"),
            ("g", "1700000000000"),
            ("h", "0"),
            ("i", props),
            ("j", "0"),
            ("k", "false"),
        ] {
            r.ext_fields.insert(k, v);
        }
        r.with_body(&b"Hello"[..])
    }

    #[test]
    fn sends_single_message_and_answers_with_offset_msg_id() {
        let (ctx, store) = test_context(BrokerConfig::default());
        let req = v2(
            "TopicA",
            "TAGS\u{1}TagA\u{2}UNIQ_KEY\u{1}ABC\u{2}WAIT\u{1}true\u{2}",
        );
        let resp = run(&ctx, req);
        assert_eq!(resp.command.code, 0, "{:?}", resp.command.remark);
        let f = &resp.command.ext_fields;
        assert_eq!(f.get("queueId"), Some("0"));
        assert_eq!(f.get("queueOffset"), Some("0"));
        assert_eq!(f.get("transactionId"), Some("ABC"));
        assert_eq!(f.get("MSG_REGION"), Some("DefaultRegion"));
        assert_eq!(f.get("TRACE_ON"), Some("true"));
        let msg_id = id::decode_offset_msg_id(f.get("msgId").unwrap()).unwrap();
        let stored = store
            .look_message_by_offset(msg_id.commit_log_offset)
            .unwrap();
        let Decoded::Message(rec) = decode_record(&stored, true).unwrap() else {
            panic!()
        };
        assert_eq!(rec.body, b"Hello");
        assert_eq!(rec.topic().unwrap(), "TopicA");
        let props = std::str::from_utf8(rec.properties).unwrap();
        assert_eq!(properties::find(props, "TAGS"), Some("TagA"));
        assert_eq!(properties::find(props, "CLUSTER"), Some("DefaultCluster"));
        assert_eq!(rec.born_timestamp_ms, 1_700_000_000_000);
        // auto-created from TBW102 with the client's 4 queues
        assert_eq!(ctx.topics.select("TopicA").unwrap().write_queue_nums, 4);
    }

    #[test]
    fn v1_long_names_and_generated_uniq_key() {
        let (ctx, store) = test_context(BrokerConfig::default());
        let mut r = RemotingCommand::request(10, 1);
        for (k, v) in [
            ("producerGroup", "PG"),
            ("topic", "TopicB"),
            ("defaultTopic", "TBW102"),
            ("defaultTopicQueueNums", "4"),
            ("queueId", "-1"),
            ("sysFlag", "0"),
            ("bornTimestamp", "1"),
            ("flag", "0"),
            ("properties", ""),
        ] {
            r.ext_fields.insert(k, v);
        }
        let resp = run(&ctx, r.with_body(&b"x"[..]));
        assert_eq!(resp.command.code, 0, "{:?}", resp.command.remark);
        let uniq = resp
            .command
            .ext_fields
            .get("transactionId")
            .unwrap()
            .to_string();
        assert_eq!(uniq.len(), 32);
        let got = store.get_message(
            "TopicB",
            resp.command
                .ext_fields
                .get("queueId")
                .unwrap()
                .parse()
                .unwrap(),
            0,
            1,
            1 << 20,
            &AcceptAll,
        );
        assert_eq!(got.messages.len(), 1);
    }

    #[test]
    fn batch_by_field_not_code() {
        let (ctx, store) = test_context(BrokerConfig::default());
        let mut body = Vec::new();
        for i in 0..3 {
            batch::encode_batch_item(
                &mut body,
                0,
                format!("m{i}").as_bytes(),
                format!("UNIQ_KEY\u{1}U{i}\u{2}").as_bytes(),
            )
            .unwrap();
        }
        let mut req = v2("TopicC", "");
        req.ext_fields.insert("m", "1");
        let resp = run(&ctx, req.with_body(body));
        assert_eq!(resp.command.code, 0, "{:?}", resp.command.remark);
        let ids: Vec<&str> = resp
            .command
            .ext_fields
            .get("msgId")
            .unwrap()
            .split(',')
            .collect();
        assert_eq!(ids.len(), 3);
        let got = store.get_message("TopicC", 0, 0, 10, 1 << 20, &AcceptAll);
        assert_eq!(got.messages.len(), 3);
        let Decoded::Message(r2) = decode_record(&got.messages[2], true).unwrap() else {
            panic!()
        };
        assert_eq!(r2.body, b"m2");
        assert_eq!(r2.queue_offset, 2);
    }

    #[test]
    fn bad_input_gets_rocketmq_codes() {
        let (ctx, store) = test_context(BrokerConfig::default());
        // missing required header
        let mut r = v2("T", "");
        r.ext_fields.remove("b");
        assert_eq!(run(&ctx, r).command.code, ResponseCode::SystemError.code());
        // malformed number
        let mut r = v2("T", "");
        r.ext_fields.insert("e", "zero");
        let resp = run(&ctx, r);
        assert_eq!(resp.command.code, ResponseCode::SystemError.code());
        assert!(resp.command.remark.unwrap().contains('e'));
        assert_eq!(
            run(&ctx, v2("bad topic", "")).command.code,
            ResponseCode::InvalidParameter.code()
        );
        assert_eq!(
            run(&ctx, v2(&"x".repeat(128), "")).command.code,
            ResponseCode::InvalidParameter.code()
        );
        assert_eq!(
            run(&ctx, v2("SCHEDULE_TOPIC_XXXX", "")).command.code,
            ResponseCode::NoPermission.code()
        );
        let mut r = v2("T", "");
        r.ext_fields.insert("c", "NoTemplate");
        assert_eq!(
            run(&ctx, r).command.code,
            ResponseCode::TopicNotExist.code()
        );
        let mut r = v2("TopicQ", "");
        r.ext_fields.insert("e", "99");
        assert_eq!(
            run(&ctx, r).command.code,
            ResponseCode::InvalidParameter.code()
        );
        let big = v2("TopicBig", "").with_body(vec![0u8; 4 * 1024 * 1024 + 1]);
        assert_eq!(
            run(&ctx, big).command.code,
            ResponseCode::MessageIllegal.code()
        );
        let mut bad_batch = v2("TopicBB", "");
        bad_batch.ext_fields.insert("m", "true");
        assert_eq!(
            run(&ctx, bad_batch.with_body(&b"\x00\x00\x00\x30garbage"[..]))
                .command
                .code,
            ResponseCode::MessageIllegal.code()
        );
        let mut bad_delay = v2("TopicD", "DELAY\u{1}soon\u{2}");
        bad_delay.ext_fields.insert("i", "DELAY\u{1}soon\u{2}");
        assert_eq!(
            run(&ctx, bad_delay).command.code,
            ResponseCode::MessageIllegal.code()
        );
        // store statuses
        store.force_put_status(Some(PutMessageStatus::OsPageCacheBusy));
        let resp = run(&ctx, v2("TopicA", ""));
        assert_eq!(resp.command.code, ResponseCode::SystemBusy.code());
        assert!(resp
            .command
            .remark
            .unwrap()
            .starts_with("[PC_SYNCHRONIZED]"));
        store.force_put_status(Some(PutMessageStatus::FlushDiskTimeout));
        let resp = run(&ctx, v2("TopicA", ""));
        assert_eq!(resp.command.code, ResponseCode::FlushDiskTimeout.code());
        assert!(
            resp.command.ext_fields.get("msgId").is_some(),
            "stored-with-status keeps the header"
        );
        store.force_put_status(Some(PutMessageStatus::ServiceNotAvailable));
        assert_eq!(
            run(&ctx, v2("TopicA", "")).command.code,
            ResponseCode::ServiceNotAvailable.code()
        );
        store.force_put_status(Some(PutMessageStatus::MessageIllegal));
        assert_eq!(
            run(&ctx, v2("TopicA", "")).command.code,
            ResponseCode::MessageIllegal.code()
        );
    }

    #[test]
    fn queued_too_long_is_timeout_clean_queue() {
        let (ctx, _store) = test_context(BrokerConfig::default());
        let resp = run_with_queue_delay(&ctx, v2("TopicA", ""), 250);
        assert_eq!(resp.command.code, ResponseCode::SystemBusy.code());
        assert!(resp
            .command
            .remark
            .unwrap()
            .starts_with("[TIMEOUT_CLEAN_QUEUE]"));
    }

    /// A parked timer message's answer carries its recall handle (one past its slot, this
    /// broker, its UNIQ_KEY); a plain or delay-level message's carries none.
    #[test]
    fn timer_message_answer_carries_a_recall_handle() {
        let (ctx, _store) = test_context(BrokerConfig::default());
        let at = crate::persist::now_ms() + 60_000;
        let props = format!("TIMER_DELIVER_MS\u{1}{at}\u{2}UNIQ_KEY\u{1}U1\u{2}");
        let resp = run(&ctx, v2("TopicA", &props));
        assert_eq!(resp.command.code, 0, "{:?}", resp.command.remark);
        let handle = resp
            .command
            .ext_fields
            .get("recallHandle")
            .expect("a handle");
        let h = crate::recall::RecallHandle::decode(handle).unwrap();
        let precision = ctx.config.timer_precision_ms as i64;
        let out_ms = crate::timer_put::round_to_slot(at, precision);
        assert_eq!(h.topic, "TopicA");
        assert_eq!(h.broker_name, ctx.config.broker_name);
        assert_eq!(h.timestamp, (out_ms + 1).to_string());
        assert_eq!(h.message_id, "U1");
        for plain in [
            "UNIQ_KEY\u{1}U2\u{2}",
            "DELAY\u{1}3\u{2}UNIQ_KEY\u{1}U3\u{2}",
        ] {
            let resp = run(&ctx, v2("TopicA", plain));
            assert_eq!(resp.command.code, 0);
            assert_eq!(resp.command.ext_fields.get("recallHandle"), None);
        }
    }

    #[test]
    fn delay_level_goes_to_schedule_topic() {
        let (ctx, store) = test_context(BrokerConfig::default());
        let resp = run(&ctx, v2("TopicA", "DELAY\u{1}3\u{2}UNIQ_KEY\u{1}U\u{2}"));
        assert_eq!(resp.command.code, 0);
        let got = store.get_message("SCHEDULE_TOPIC_XXXX", 2, 0, 1, 1 << 20, &AcceptAll);
        let Decoded::Message(rec) = decode_record(&got.messages[0], false).unwrap() else {
            panic!()
        };
        let props = std::str::from_utf8(rec.properties).unwrap();
        assert_eq!(properties::find(props, "REAL_TOPIC"), Some("TopicA"));
        assert_eq!(properties::find(props, "REAL_QID"), Some("0"));
        assert_eq!(store.max_offset_in_queue("TopicA", 0), 0);
    }

    #[test]
    fn retry_over_max_goes_to_dlq_and_half_message_to_half_topic() {
        let (ctx, store) = test_context(BrokerConfig::default());
        let mut r = v2("%RETRY%G1", "UNIQ_KEY\u{1}U\u{2}");
        r.ext_fields.insert("j", "17");
        r.ext_fields.insert("l", "16");
        assert_eq!(run(&ctx, r).command.code, 0);
        assert_eq!(store.max_offset_in_queue("%DLQ%G1", 0), 1);
        let r = v2(
            "TopicT",
            "TRAN_MSG\u{1}true\u{2}PGROUP\u{1}PG\u{2}UNIQ_KEY\u{1}TX1\u{2}",
        );
        let resp = run(&ctx, r);
        assert_eq!(resp.command.code, 0);
        assert_eq!(resp.command.ext_fields.get("transactionId"), Some("TX1"));
        let got = store.get_message("RMQ_SYS_TRANS_HALF_TOPIC", 0, 0, 1, 1 << 20, &AcceptAll);
        let Decoded::Message(rec) = decode_record(&got.messages[0], false).unwrap() else {
            panic!()
        };
        let props = std::str::from_utf8(rec.properties).unwrap();
        assert_eq!(properties::find(props, "REAL_TOPIC"), Some("TopicT"));
        assert_eq!(properties::find(props, "__transactionId__"), Some("TX1"));
        let cfg = BrokerConfig {
            reject_transaction_message: true,
            ..BrokerConfig::default()
        };
        let (ctx2, _) = test_context(cfg);
        let r = v2("TopicT", "TRAN_MSG\u{1}true\u{2}");
        assert_eq!(
            run(&ctx2, r).command.code,
            ResponseCode::NoPermission.code()
        );
    }

    #[test]
    fn cpp_numeric_and_boolean_forms_accepted() {
        let (ctx, _store) = test_context(BrokerConfig::default());
        let mut r = v2("TopicCpp", "");
        r.ext_fields.insert("k", "0");
        r.ext_fields.insert("AccessKey", "");
        r.ext_fields.insert("Signature", "");
        assert_eq!(run(&ctx, r).command.code, 0);
    }
}
