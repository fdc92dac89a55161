//! The broker administration requests `mqadmin`, dashboards and clients send (headers.md §9):
//! topic and subscription-group CRUD, config dumps, runtime info, topic/consume stats,
//! connection lists, offset reset by timestamp, and the small lookup requests (who consumes a
//! topic, system topics, all consumer/delay offsets).
//!
//! Entry point: [`process`] answers every code in [`ADMIN_CODES`] (and returns `None` for any
//! other code, so the dispatcher can route by "is it admin?"). Each request also has its own
//! `pub fn` taking the context and the request, for direct wiring and tests. All of them are
//! cheap reads or rare metadata writes, answered inline.
//!
//! Bounds: request bodies above [`MAX_ADMIN_BODY_BYTES`] are refused; queue counts of a created
//! topic are limited to [`MAX_QUEUE_NUMS`]; `topicList` of GET_CONSUME_STATS to
//! [`MAX_TOPICS_PER_STATS_REQUEST`] topics.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

use ringmq_remoting::body::consumer::{MessageQueue, ResetOffsetBody};
use ringmq_remoting::body::ha::{HaClientRuntimeInfo, HaConnectionRuntimeInfo, HaRuntimeInfo};
use ringmq_remoting::body::kv::{KvTable, Properties};
use ringmq_remoting::body::stats::{ConsumeStats, OffsetWrapper, TopicOffset, TopicStatsTable};
use ringmq_remoting::body::subscription::SubscriptionGroupConfig;
use ringmq_remoting::body::topic::{
    TopicConfig, TopicConfigAndMappingSerializeWrapper, TopicFilterType,
};
use ringmq_remoting::codes::{RequestCode, ResponseCode};
use ringmq_remoting::header::{
    CreateTopicRequestHeader, DeleteSubscriptionGroupRequestHeader, DeleteTopicRequestHeader,
    GetBrokerConfigResponseHeader, GetConsumeStatsInBrokerHeader, GetConsumeStatsRequestHeader,
    GetConsumerConnectionListRequestHeader, GetProducerConnectionListRequestHeader,
    GetSubscriptionGroupConfigRequestHeader, GetTopicConfigRequestHeader,
    GetTopicStatsInfoRequestHeader, QueryTopicConsumeByWhoRequestHeader,
    QueryTopicsByConsumerRequestHeader, ResetOffsetRequestHeader,
};
use ringmq_remoting::json::{self, ObjectBuilder, Value};
use ringmq_remoting::RemotingCommand;
use ringmq_runtime::{Reply, RequestContext};
use ringmq_store::Boundary;

use crate::context::{error_response, header_error, BrokerContext};
use crate::metadata::topic_config as topics;

/// Largest admin request body accepted (a subscription group config, a properties text).
pub const MAX_ADMIN_BODY_BYTES: usize = 1024 * 1024;
/// Most read or write queues a topic may be created with.
pub const MAX_QUEUE_NUMS: i32 = 32 * 1024;
/// Most topics one GET_CONSUME_STATS `topicList` may name.
pub const MAX_TOPICS_PER_STATS_REQUEST: usize = 4096;
/// What `brokerVersionDesc` reports: the RocketMQ release whose protocol ringmq speaks.
pub const BROKER_VERSION_DESC: &str = "V5_3_4";

/// Every request code [`process`] answers.
pub const ADMIN_CODES: &[RequestCode] = &[
    RequestCode::UpdateAndCreateTopic,
    RequestCode::DeleteTopicInBroker,
    RequestCode::GetAllTopicConfig,
    RequestCode::GetTopicConfig,
    RequestCode::UpdateAndCreateSubscriptiongroup,
    RequestCode::DeleteSubscriptiongroup,
    RequestCode::GetAllSubscriptiongroupConfig,
    RequestCode::GetSubscriptiongroupConfig,
    RequestCode::GetBrokerRuntimeInfo,
    RequestCode::GetTopicStatsInfo,
    RequestCode::GetConsumeStats,
    RequestCode::GetConsumerConnectionList,
    RequestCode::GetProducerConnectionList,
    RequestCode::GetBrokerConfig,
    RequestCode::UpdateBrokerConfig,
    RequestCode::InvokeBrokerToResetOffset,
    RequestCode::CleanExpiredConsumequeue,
    RequestCode::CleanUnusedTopic,
    RequestCode::DeleteExpiredCommitlog,
    RequestCode::GetSystemTopicListFromBroker,
    RequestCode::QueryTopicConsumeByWho,
    RequestCode::QueryTopicsByConsumer,
    RequestCode::GetBrokerConsumeStats,
    RequestCode::GetAllConsumerOffset,
    RequestCode::GetAllDelayOffset,
    RequestCode::GetBrokerHaStatus,
    RequestCode::GetBrokerEpochCache,
    RequestCode::NotifyBrokerRoleChanged,
];

/// Answers an admin request, or `None` when `request.code` is not one of [`ADMIN_CODES`].
pub fn process(
    ctx: &Arc<BrokerContext>,
    request: &RemotingCommand,
    rc: &RequestContext,
) -> Option<Reply> {
    let code = RequestCode::from_code(request.code)?;
    use RequestCode as C;
    let handled = match code {
        C::UpdateAndCreateTopic => update_and_create_topic(ctx, request),
        C::DeleteTopicInBroker => delete_topic(ctx, request),
        C::GetAllTopicConfig => get_all_topic_config(ctx, request),
        C::GetTopicConfig => get_topic_config(ctx, request),
        C::UpdateAndCreateSubscriptiongroup => update_and_create_subscription_group(ctx, request),
        C::DeleteSubscriptiongroup => delete_subscription_group(ctx, request),
        C::GetAllSubscriptiongroupConfig => get_all_subscription_group_config(ctx, request),
        C::GetSubscriptiongroupConfig => get_subscription_group_config(ctx, request),
        C::GetBrokerRuntimeInfo => get_broker_runtime_info(ctx, request),
        C::GetTopicStatsInfo => get_topic_stats_info(ctx, request),
        C::GetConsumeStats => get_consume_stats(ctx, request),
        C::GetConsumerConnectionList => get_consumer_connection_list(ctx, request),
        C::GetProducerConnectionList => get_producer_connection_list(ctx, request),
        C::GetBrokerConfig => get_broker_config(ctx, request),
        C::UpdateBrokerConfig => {
            update_broker_config(ctx, request, &rc.connection().peer_addr().to_string())
        }
        C::InvokeBrokerToResetOffset => invoke_broker_to_reset_offset(ctx, request),
        C::CleanExpiredConsumequeue => clean_expired_consume_queue(ctx, request),
        C::CleanUnusedTopic => clean_unused_topic(ctx, request),
        C::DeleteExpiredCommitlog => delete_expired_commit_log(ctx, request),
        C::GetSystemTopicListFromBroker => get_system_topic_list(ctx, request),
        C::QueryTopicConsumeByWho => query_topic_consume_by_who(ctx, request),
        C::QueryTopicsByConsumer => query_topics_by_consumer(ctx, request),
        C::GetBrokerConsumeStats => get_broker_consume_stats(ctx, request),
        C::GetAllConsumerOffset => ok_body(request, ctx.offsets.encode()),
        C::GetAllDelayOffset => ok_body(request, ctx.delay_offsets.encode()),
        C::GetBrokerHaStatus => ok_body(request, ha_runtime_info(ctx).encode()),
        C::GetBrokerEpochCache => super::controller::broker_epoch_cache(ctx, request).into(),
        C::NotifyBrokerRoleChanged => {
            super::controller::notify_broker_role_changed(ctx, request).into()
        }
        C::GetTimerCheckPoint => get_timer_check_point(ctx, request),
        C::GetTimerMetrics => get_timer_metrics(ctx, request),
        _ => return None,
    };
    Some(handled)
}

/// GET_TIMER_CHECK_POINT: the timer checkpoint's seven big-endian longs, as of its last flush.
pub fn get_timer_check_point(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    match ctx.timer.get() {
        Some(timer) => ok_body(request, timer.checkpoint_bytes()),
        None => fail(request, ResponseCode::SystemError, "The checkpoint is null"),
    }
}

/// GET_TIMER_METRICS: the `timermetrics` JSON (waiting messages per real topic).
pub fn get_timer_metrics(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    match ctx.timer.get() {
        Some(timer) => ok_body(request, timer.metrics_json()),
        None => fail(
            request,
            ResponseCode::SystemError,
            "The timer message store is null",
        ),
    }
}

fn ok(request: &RemotingCommand) -> Reply {
    request
        .response_to(ResponseCode::Success.code(), None)
        .into()
}

fn ok_body(request: &RemotingCommand, body: impl Into<bytes::Bytes>) -> Reply {
    request
        .response_to(ResponseCode::Success.code(), None)
        .with_body(body)
        .into()
}

fn fail(request: &RemotingCommand, code: ResponseCode, remark: impl Into<String>) -> Reply {
    let remark = remark.into();
    tracing::warn!(
        request_code = request.code,
        response = code.name(),
        "admin request refused: {remark}"
    );
    error_response(request, code, remark).into()
}

/// Errors are boxed: a `Reply` is large and the happy path should stay small.
fn decode<H: ringmq_remoting::header::CommandHeader>(
    request: &RemotingCommand,
) -> Result<H, Box<Reply>> {
    request
        .decode_header::<H>()
        .map_err(|e| Box::new(header_error(request, e)))
}

fn body_text(request: &RemotingCommand) -> Result<&str, Box<Reply>> {
    if request.body.len() > MAX_ADMIN_BODY_BYTES {
        return Err(Box::new(fail(
            request,
            ResponseCode::InvalidParameter,
            format!(
                "request body is {} bytes, more than {MAX_ADMIN_BODY_BYTES}",
                request.body.len()
            ),
        )));
    }
    std::str::from_utf8(&request.body).map_err(|_| {
        Box::new(fail(
            request,
            ResponseCode::InvalidParameter,
            "request body is not UTF-8 text",
        ))
    })
}

/// Applies `+key=value,-key` attribute modifications to `attributes`.
fn apply_attribute_changes(
    attributes: &mut BTreeMap<String, String>,
    changes: &str,
) -> Result<(), String> {
    for item in changes.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if let Some(kv) = item.strip_prefix('+') {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("attribute {item:?} must be +key=value"))?;
            if k.is_empty() {
                return Err(format!("attribute {item:?} has an empty key"));
            }
            attributes.insert(k.to_string(), v.to_string());
        } else if let Some(k) = item.strip_prefix('-') {
            attributes.remove(k);
        } else {
            return Err(format!("attribute change {item:?} must start with + or -"));
        }
    }
    if attributes
        .get("message.type")
        .is_some_and(|t| t.eq_ignore_ascii_case("MIXED"))
    {
        return Err("message.type MIXED is not allowed for a topic".to_string());
    }
    Ok(())
}

/// UPDATE_AND_CREATE_TOPIC (17).
pub fn update_and_create_topic(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let h: CreateTopicRequestHeader = match decode(request) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let topic = h.topic.as_str();
    if let Err(e) = topics::validate_topic(topic) {
        return fail(request, ResponseCode::InvalidParameter, e);
    }
    if ctx.topics.is_system_topic(topic) {
        return fail(
            request,
            ResponseCode::InvalidParameter,
            format!("The topic[{topic}] is conflict with system topic."),
        );
    }
    for (name, n) in [
        ("readQueueNums", h.read_queue_nums),
        ("writeQueueNums", h.write_queue_nums),
    ] {
        if !(0..=MAX_QUEUE_NUMS).contains(&n) {
            return fail(
                request,
                ResponseCode::InvalidParameter,
                format!("{name}={n} must be within 0..={MAX_QUEUE_NUMS}"),
            );
        }
    }
    if !(0..=15).contains(&h.perm) {
        return fail(
            request,
            ResponseCode::InvalidParameter,
            format!("perm={} is not a permission bit set (0..=15)", h.perm),
        );
    }
    // Only the exact enum names: no ordinals, no padding.
    let Some(topic_filter_type) = TopicFilterType::from_name(&h.topic_filter_type)
        .filter(|t| t.name() == h.topic_filter_type)
    else {
        return fail(
            request,
            ResponseCode::InvalidParameter,
            format!(
                "topicFilterType={:?} must be SINGLE_TAG or MULTI_TAG",
                h.topic_filter_type
            ),
        );
    };
    let existing = ctx.topics.select(topic);
    let mut attributes = existing
        .as_ref()
        .map(|t| t.attributes.clone())
        .unwrap_or_default();
    if let Some(changes) = h.attributes.as_deref() {
        if let Err(e) = apply_attribute_changes(&mut attributes, changes) {
            return fail(request, ResponseCode::InvalidParameter, e);
        }
    }
    let tc = TopicConfig {
        topic_name: topic.to_string(),
        read_queue_nums: h.read_queue_nums,
        write_queue_nums: h.write_queue_nums,
        perm: h.perm,
        topic_filter_type,
        topic_sys_flag: h.topic_sys_flag.unwrap_or(0).max(0),
        order: h.order,
        attributes,
    };
    if existing.as_deref() == Some(&tc) && !h.force {
        return ok(request);
    }
    tracing::info!(
        topic,
        read = tc.read_queue_nums,
        write = tc.write_queue_nums,
        perm = tc.perm,
        "topic created or updated by admin"
    );
    ctx.topics.update(tc);
    ok(request)
}

/// DELETE_TOPIC_IN_BROKER (215).
pub fn delete_topic(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let h: DeleteTopicRequestHeader = match decode(request) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    // A present but blank topic names nothing to delete: refused as upstream refuses it.
    if h.topic.trim().is_empty() {
        return fail(
            request,
            ResponseCode::InvalidParameter,
            "The specified topic is blank.",
        );
    }
    if ctx.topics.is_system_topic(&h.topic) {
        return fail(
            request,
            ResponseCode::InvalidParameter,
            format!("The topic[{}] is conflict with system topic.", h.topic),
        );
    }
    if ctx.topics.delete(&h.topic) {
        tracing::info!(topic = h.topic, "topic deleted by admin");
    } else {
        tracing::info!(topic = h.topic, "delete of an unknown topic: nothing to do");
    }
    ok(request)
}

/// GET_ALL_TOPIC_CONFIG (21): the whole table (no paging: the header's `totalTopicNum` is
/// left out, which clients read as "complete").
pub fn get_all_topic_config(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let w = ctx.topics.wrapper();
    let body = TopicConfigAndMappingSerializeWrapper {
        mapping_data_version: w.data_version,
        ..w.into()
    };
    ok_body(request, body.encode())
}

/// GET_TOPIC_CONFIG (351).
pub fn get_topic_config(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let h: GetTopicConfigRequestHeader = match decode(request) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    match ctx.topics.select(&h.topic) {
        Some(tc) => ok_body(request, tc.to_value().to_json()),
        None => fail(
            request,
            ResponseCode::SystemError,
            format!("No topic in this broker, topic: {}", h.topic),
        ),
    }
}

/// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200): body = SubscriptionGroupConfig JSON.
pub fn update_and_create_subscription_group(
    ctx: &BrokerContext,
    request: &RemotingCommand,
) -> Reply {
    let text = match body_text(request) {
        Ok(t) => t,
        Err(r) => return *r,
    };
    let sg = match SubscriptionGroupConfig::decode(text.as_bytes()) {
        Ok(sg) => sg,
        Err(e) => {
            return fail(
                request,
                ResponseCode::InvalidParameter,
                format!("body is not a SubscriptionGroupConfig: {e}"),
            )
        }
    };
    if let Err(e) = topics::validate_group(&sg.group_name) {
        return fail(request, ResponseCode::InvalidParameter, e);
    }
    if sg.retry_queue_nums as i64 > MAX_QUEUE_NUMS as i64 {
        return fail(
            request,
            ResponseCode::InvalidParameter,
            format!("retryQueueNums must be at most {MAX_QUEUE_NUMS}"),
        );
    }
    tracing::info!(
        group = sg.group_name,
        "subscription group created or updated by admin"
    );
    ctx.groups.update(sg);
    ok(request)
}

/// DELETE_SUBSCRIPTIONGROUP (207).
pub fn delete_subscription_group(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let h: DeleteSubscriptionGroupRequestHeader = match decode(request) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    ctx.groups.delete(&h.group_name);
    if h.clean_offset {
        ctx.offsets.remove_group(&h.group_name);
    }
    tracing::info!(
        group = h.group_name,
        clean_offset = h.clean_offset,
        "subscription group deleted by admin"
    );
    ok(request)
}

/// GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): the whole table, unpaged.
pub fn get_all_subscription_group_config(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    match serde_json::to_string(&ctx.groups.wrapper().to_value()) {
        Ok(body) => ok_body(request, body),
        Err(e) => fail(
            request,
            ResponseCode::SystemError,
            format!("cannot encode the subscription groups: {e}"),
        ),
    }
}

/// GET_SUBSCRIPTIONGROUP_CONFIG (352).
pub fn get_subscription_group_config(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let h: GetSubscriptionGroupConfigRequestHeader = match decode(request) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    match ctx
        .groups
        .get(&h.group)
        .and_then(|sg| serde_json::to_string(&sg.to_value()).ok())
    {
        Some(body) => ok_body(request, body),
        None => fail(
            request,
            ResponseCode::SubscriptionGroupNotExist,
            format!("No group in this broker, group: {}", h.group),
        ),
    }
}

fn boot_timestamp_ms() -> i64 {
    static BOOT: OnceLock<i64> = OnceLock::new();
    *BOOT.get_or_init(crate::persist::now_ms)
}

/// Sizes of the file system holding `path` (upstream's `File.getTotalSpace`,
/// `getFreeSpace`, `getUsableSpace`), or `None` when `path` does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FsSpace {
    total_bytes: u64,
    free_bytes: u64,
    usable_bytes: u64,
}

fn fs_space(path: &std::path::Path) -> Option<FsSpace> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs only writes into the zeroed struct we pass; `c` is a valid C string.
    let s = unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c.as_ptr(), &mut s) != 0 {
            return None;
        }
        s
    };
    let block = s.f_frsize as u64;
    Some(FsSpace {
        total_bytes: s.f_blocks as u64 * block,
        free_bytes: s.f_bfree as u64 * block,
        usable_bytes: s.f_bavail as u64 * block,
    })
}

/// Upstream's disk ratio (`getDiskPartitionSpaceUsedPercent`): used / (used + usable), with
/// the root-reserved blocks left out, rounded up to whole percent; -1 when unknown. The same
/// formula retention applies, so what operators see is what deletes files.
fn disk_used_ratio(space: Option<FsSpace>) -> f64 {
    let Some(s) = space.filter(|s| s.total_bytes > 0) else {
        return -1.0;
    };
    let used = s.total_bytes - s.free_bytes;
    let entire = used + s.usable_bytes;
    if entire == 0 {
        return -1.0;
    }
    let percent = (used as u128 * 100).div_ceil(entire as u128);
    percent as f64 / 100.0
}

/// A double as Java's `String.valueOf` prints it for the values runtime info holds
/// ("0.68", "1.0", "-1.0").
fn java_double(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e7 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

/// The disk keys: `commitLogDirCapacity` (the file system of `storePathRootDir`),
/// `commitLogDiskRatio` (and `commitLogDiskRatio_<dir>` per CommitLog directory) and
/// `consumeQueueDiskRatio`.
fn disk_info_into(t: &mut BTreeMap<String, String>, config: &crate::config::BrokerConfig) {
    let root = config.store_root();
    if let Some(s) = fs_space(&root) {
        t.insert(
            "commitLogDirCapacity".to_string(),
            format!(
                "Total : {}, Free : {}.",
                crate::metrics::human_readable_bytes(s.total_bytes),
                crate::metrics::human_readable_bytes(s.free_bytes)
            ),
        );
    }
    let commit_log_dir = config.commit_log_dir();
    let ratio = disk_used_ratio(fs_space(&commit_log_dir));
    t.insert(
        format!("commitLogDiskRatio_{}", commit_log_dir.display()),
        java_double(ratio),
    );
    t.insert("commitLogDiskRatio".to_string(), java_double(ratio));
    t.insert(
        "consumeQueueDiskRatio".to_string(),
        java_double(disk_used_ratio(fs_space(&root.join("consumequeue")))),
    );
}

/// `scheduleMessageOffset_<level>`: "delivered offset,max offset" of each delay level's
/// schedule queue; the delivered offset as `delayOffset.json` holds it (flushed every 10 s).
fn schedule_info_into(t: &mut BTreeMap<String, String>, ctx: &BrokerContext) {
    for level in 1..=ctx.delay_levels_ms.len() as i32 {
        let delivered = ctx.delay_offsets.offset(level).unwrap_or(0);
        let max = ctx
            .store
            .max_offset_in_queue(topics::SCHEDULE_TOPIC, level - 1);
        t.insert(
            format!("scheduleMessageOffset_{level}"),
            format!("{delivered},{max}"),
        );
    }
}

/// The thread-pool queue capacities upstream reports, from the configured (or upstream's
/// default) `*QueueCapacity` keys; ringmq has no such pools, so the sizes beside them read 0.
fn queue_capacities_into(t: &mut BTreeMap<String, String>, config: &crate::config::BrokerConfig) {
    for (info_key, config_key) in [
        ("sendThreadPoolQueueCapacity", "sendThreadPoolQueueCapacity"),
        ("pullThreadPoolQueueCapacity", "pullThreadPoolQueueCapacity"),
        (
            "litePullThreadPoolQueueCapacity",
            "litePullThreadPoolQueueCapacity",
        ),
        (
            "queryThreadPoolQueueCapacity",
            "queryThreadPoolQueueCapacity",
        ),
        ("ackThreadPoolQueueCapacity", "ackThreadPoolQueueCapacity"),
        (
            "EndTransactionThreadPoolQueueCapacity",
            "endTransactionPoolQueueCapacity",
        ),
    ] {
        let value =
            config.extra.get(config_key).cloned().or_else(|| {
                match crate::config_keys::find(config_key)?.default {
                    crate::config_keys::DefaultKind::Value(v) => Some(v.to_string()),
                    _ => None,
                }
            });
        t.insert(
            info_key.to_string(),
            value.unwrap_or_else(|| "0".to_string()),
        );
    }
}

fn total_mem_kbytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// GET_BROKER_RUNTIME_INFO (28): KVTable with the keys mqadmin reads (numbers as text).
/// Keys for machinery ringmq does not have (thread-pool queues other than sends, the timer
/// wheel where none runs) read 0, never absent (mqadmin fails on a missing key). Put/get
/// totals, the `putTps`/`get*Tps` "10s 60s 600s" strings, put latency and the `ringmq.*`
/// stage profile keys come from [`crate::metrics::BrokerMetrics::runtime_info_into`].
pub fn get_broker_runtime_info(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    ok_body(request, runtime_info(ctx).encode())
}

pub fn runtime_info(ctx: &BrokerContext) -> KvTable {
    let now = crate::persist::now_ms();
    let boot = boot_timestamp_ms();
    let max_offset = ctx.store.commit_log_max_offset();
    let mut t = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        t.insert(k.to_string(), v);
    };
    put("brokerVersionDesc", BROKER_VERSION_DESC.to_string());
    put("brokerVersion", ringmq_remoting::RINGMQ_VERSION.to_string());
    // Upstream: the delay and transaction check-back services run, which only a master does.
    put("brokerActive", ctx.is_master().to_string());
    for k in [
        "msgPutTotalTodayNow",
        "msgGetTotalTodayNow",
        "msgPutTotalTodayMorning",
        "msgGetTotalTodayMorning",
        "msgPutTotalYesterdayMorning",
        "msgGetTotalYesterdayMorning",
        "putMessageTimesTotal",
        "putMessageSizeTotal",
        "getMessageEntireTimeMax",
        "dispatchMaxBuffer",
        "dispatchBehindBytes",
        "pageCacheLockTimeMills",
        "pullThreadPoolQueueSize",
        "litePullThreadPoolQueueSize",
        "queryThreadPoolQueueSize",
        "ackThreadPoolQueueSize",
        "sendThreadPoolQueueHeadWaitTimeMills",
        "pullThreadPoolQueueHeadWaitTimeMills",
        "queryThreadPoolQueueHeadWaitTimeMills",
        "litePullThreadPoolQueueHeadWaitTimeMills",
        "ackThreadPoolQueueHeadWaitTimeMills",
        "EndTransactionQueueSize",
        "remainTransientStoreBufferNumbs",
        "startAcceptSendRequestTimeStamp",
        "commitLogMinOffset",
    ] {
        put(k, "0".to_string());
    }
    let timer = ctx.timer.runtime_info();
    put("timerReadBehind", timer.read_behind_s.to_string());
    put("timerOffsetBehind", timer.offset_behind.to_string());
    put("timerCongestNum", timer.congest_num.to_string());
    put("timerEnqueueTps", format!("{:?}", timer.enqueue_tps));
    put("timerDequeueTps", format!("{:?}", timer.dequeue_tps));
    put("putMessageAverageSize", "0.0".to_string());
    put("remainHowManyDataToFlush", "0 B".to_string());
    for k in [
        "putTps",
        "getTransferredTps",
        "getFoundTps",
        "getMissTps",
        "getTotalTps",
    ] {
        put(k, "0.0 0.0 0.0".to_string());
    }
    // Sends waiting for the append stage: ringmq's send queue is the cores' put rings.
    put(
        "sendThreadPoolQueueSize",
        ctx.store.queued_puts().to_string(),
    );
    put("commitLogMaxOffset", max_offset.to_string());
    let earliest = ctx
        .topics
        .topic_names()
        .iter()
        .flat_map(|topic| {
            let n = ctx.topics.select(topic).map_or(0, |tc| tc.max_queue_nums());
            (0..n).filter_map(move |q| ctx.store.earliest_message_time(topic, q))
        })
        .min()
        .unwrap_or(0);
    put("earliestMessageTimeStamp", earliest.to_string());
    put("totalMemKBytes", total_mem_kbytes().to_string());
    put("bootTimestamp", boot.to_string());
    let up_s = (now - boot).max(0) / 1000;
    put(
        "runtime",
        format!(
            "[ {} days, {} hours, {} minutes, {} seconds ]",
            up_s / 86_400,
            up_s / 3600 % 24,
            up_s / 60 % 60,
            up_s % 60
        ),
    );
    disk_info_into(&mut t, &ctx.config);
    queue_capacities_into(&mut t, &ctx.config);
    schedule_info_into(&mut t, ctx);
    // Real put/get totals, TPS windows and ringmq's stage profile over the placeholders.
    ctx.metrics.runtime_info_into(&mut t);
    KvTable { table: t }
}

/// GET_BROKER_HA_STATUS (907): upstream's `HARuntimeInfo`. A master lists its connected
/// slaves with their acknowledged offset, lag (`diff`) and transfer start; a slave names
/// the master HA address it replicates from and its CommitLog max offset. Counters the
/// store does not keep (bytes per second, read/write timestamps) read 0.
pub fn ha_runtime_info(ctx: &BrokerContext) -> HaRuntimeInfo {
    let ha = ctx.store.ha_status();
    let max_offset = ctx.store.commit_log_max_offset();
    if ctx.is_master() {
        let connections: Vec<HaConnectionRuntimeInfo> = ha
            .slaves
            .iter()
            .map(|s| HaConnectionRuntimeInfo {
                addr: s.addr.clone(),
                slave_ack_offset: s.ack_offset,
                diff: max_offset - s.ack_offset,
                in_sync: s.in_sync,
                transferred_byte_in_second: 0,
                transfer_from_where: s.transfer_from_where,
            })
            .collect();
        HaRuntimeInfo {
            master: true,
            master_commit_log_max_offset: max_offset,
            in_sync_slave_nums: connections.iter().filter(|c| c.in_sync).count() as i32,
            ha_connection_info: connections,
            ha_client_runtime_info: HaClientRuntimeInfo::default(),
        }
    } else {
        HaRuntimeInfo {
            ha_client_runtime_info: HaClientRuntimeInfo {
                master_addr: ha.master_addr,
                max_offset,
                ..Default::default()
            },
            ..Default::default()
        }
    }
}

/// GET_TOPIC_STATS_INFO (202).
pub fn get_topic_stats_info(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let h: GetTopicStatsInfoRequestHeader = match decode(request) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let Some(tc) = ctx.topics.select(&h.topic) else {
        return fail(
            request,
            ResponseCode::TopicNotExist,
            format!("topic[{}] not exist", h.topic),
        );
    };
    let mut table = TopicStatsTable::default();
    for q in 0..tc.max_queue_nums() {
        let min = ctx.store.min_offset_in_queue(&h.topic, q).max(0);
        let max = ctx.store.max_offset_in_queue(&h.topic, q).max(0);
        let last = if max > 0 {
            ctx.store
                .message_store_time(&h.topic, q, max - 1)
                .unwrap_or(0)
        } else {
            0
        };
        table.offset_table.insert(
            MessageQueue::new(h.topic.clone(), ctx.config.broker_name.clone(), q),
            TopicOffset {
                min_offset: min,
                max_offset: max,
                last_update_timestamp: last,
            },
        );
    }
    ok_body(request, table.encode())
}

/// ConsumeStats of `group` over `topics` (§9.7 rules per read queue).
pub fn consume_stats(ctx: &BrokerContext, group: &str, topic_names: &[String]) -> ConsumeStats {
    let mut stats = ConsumeStats::default();
    for topic in topic_names {
        let Some(tc) = ctx.topics.select(topic) else {
            continue;
        };
        for q in 0..tc.read_queue_nums {
            let broker_offset = ctx.store.max_offset_in_queue(topic, q).max(0);
            let consumer_offset = ctx
                .offsets
                .query_offset(group, topic, q)
                .unwrap_or(0)
                .max(0);
            let pull_offset = ctx
                .offsets
                .pull_offset(group, topic, q)
                .unwrap_or(0)
                .max(consumer_offset);
            let last_timestamp = if consumer_offset > 0 {
                ctx.store
                    .message_store_time(topic, q, consumer_offset - 1)
                    .unwrap_or(0)
            } else {
                0
            };
            stats.offset_table.insert(
                MessageQueue::new(topic.clone(), ctx.config.broker_name.clone(), q),
                OffsetWrapper {
                    broker_offset,
                    consumer_offset,
                    pull_offset,
                    last_timestamp,
                },
            );
        }
    }
    stats
}

/// The topics a consume-stats request covers (`topicList`, else `topic`, else the group's
/// offset topics; restricted to live subscriptions when the group is online).
fn stats_topics(
    ctx: &BrokerContext,
    group: &str,
    topic: Option<&str>,
    topic_list: Option<&str>,
) -> Result<Vec<String>, String> {
    if let Some(list) = topic_list.filter(|l| !l.is_empty()) {
        let names: Vec<String> = list
            .split(';')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect();
        if names.len() > MAX_TOPICS_PER_STATS_REQUEST {
            return Err(format!(
                "topicList names {} topics, more than {MAX_TOPICS_PER_STATS_REQUEST}",
                names.len()
            ));
        }
        return Ok(names);
    }
    let candidates = match topic.filter(|t| !t.is_empty()) {
        Some(t) => vec![t.to_string()],
        None => ctx.offsets.topics_of_group(group),
    };
    Ok(match ctx.consumers.group(group) {
        Some(info) if !info.subscriptions.is_empty() => candidates
            .into_iter()
            .filter(|t| info.subscriptions.contains_key(t))
            .collect(),
        _ => candidates,
    })
}

/// GET_CONSUME_STATS (208).
pub fn get_consume_stats(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let h: GetConsumeStatsRequestHeader = match decode(request) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let names = match stats_topics(
        ctx,
        &h.consumer_group,
        h.topic.as_deref(),
        h.topic_list.as_deref(),
    ) {
        Ok(n) => n,
        Err(e) => return fail(request, ResponseCode::InvalidParameter, e),
    };
    if let Some(t) = h.topic.as_deref().filter(|t| !t.is_empty()) {
        if ctx.topics.select(t).is_none() {
            return fail(
                request,
                ResponseCode::TopicNotExist,
                format!("topic[{t}] not exist"),
            );
        }
    }
    ok_body(
        request,
        consume_stats(ctx, &h.consumer_group, &names).encode(),
    )
}

fn connection_value(info: &crate::client::consumer_manager::ClientChannelInfo) -> Value {
    ObjectBuilder::new()
        .field("clientAddr", info.channel.peer_addr().to_string())
        .field("clientId", info.client_id.as_str())
        .field("language", info.language.as_str())
        .field("version", info.version)
        .build()
}

/// GET_CONSUMER_CONNECTION_LIST (203).
pub fn get_consumer_connection_list(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let h: GetConsumerConnectionListRequestHeader = match decode(request) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let Some(info) = ctx
        .consumers
        .group(&h.consumer_group)
        .filter(|g| !g.channels.is_empty())
    else {
        return fail(
            request,
            ResponseCode::ConsumerNotOnline,
            format!("the consumer group[{}] not online", h.consumer_group),
        );
    };
    let body = ObjectBuilder::new()
        .field(
            "connectionSet",
            Value::Array(info.channels.values().map(connection_value).collect()),
        )
        .field("consumeFromWhere", info.consume_from_where.as_str())
        .field("consumeType", info.consume_type.as_str())
        .field("messageModel", info.message_model.as_str())
        .field(
            "subscriptionTable",
            json::map_value(
                info.subscriptions
                    .iter()
                    .map(|(t, s)| (t.as_str(), s.to_json_value())),
            ),
        )
        .build();
    ok_body(request, body.to_json())
}

/// GET_PRODUCER_CONNECTION_LIST (204).
pub fn get_producer_connection_list(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let h: GetProducerConnectionListRequestHeader = match decode(request) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let conns = ctx.producers.connections(&h.producer_group);
    if conns.is_empty() {
        return fail(
            request,
            ResponseCode::SystemError,
            format!("the producer group[{}] not exist", h.producer_group),
        );
    }
    let body = ObjectBuilder::new()
        .field(
            "connectionSet",
            Value::Array(conns.iter().map(connection_value).collect()),
        )
        .build();
    ok_body(request, body.to_json())
}

/// GET_BROKER_CONFIG (26): the effective configuration (startup values plus accepted
/// updates) as Properties text; header `version` = the config's DataVersion JSON, bumped by
/// every accepted UPDATE_BROKER_CONFIG.
pub fn get_broker_config(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    request
        .response_to(ResponseCode::Success.code(), None)
        .with_body(with_live_role(ctx, ctx.live.properties_text()))
        .with_header(&GetBrokerConfigResponseHeader {
            version: Some(ctx.live.data_version().encode()),
        })
        .into()
}

/// In controller mode `brokerRole` and `brokerId` are what the controllers made this
/// broker, as upstream's GET_BROKER_CONFIG shows them.
fn with_live_role(ctx: &BrokerContext, text: String) -> String {
    if !ctx.config.enable_controller_mode {
        return text;
    }
    let role = ctx.role.broker_role(&ctx.config).name();
    let id = ctx.role.broker_id();
    text.lines()
        .map(|line| match line.split_once('=') {
            Some(("brokerRole", _)) => format!("brokerRole={role}\n"),
            Some(("brokerId", _)) => format!("brokerId={id}\n"),
            _ => format!("{line}\n"),
        })
        .collect()
}

/// UPDATE_BROKER_CONFIG (25): applies and saves the Properties body through
/// [`crate::live_config::apply_update`]. The remark of a success says which keys are in effect
/// now and which after a restart; a refusal (black list, unknown key, bad value, unwritable
/// config file) changes nothing. `caller` is logged with every accepted key.
pub fn update_broker_config(ctx: &BrokerContext, request: &RemotingCommand, caller: &str) -> Reply {
    let text = match body_text(request) {
        Ok(t) => t,
        Err(r) => return *r,
    };
    let props = match Properties::parse(text) {
        Ok(p) => p,
        Err(e) => {
            return fail(
                request,
                ResponseCode::InvalidParameter,
                format!("body is not Java properties text: {e}"),
            )
        }
    };
    let props: Vec<(String, String)> = props
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    match crate::live_config::apply_update(&ctx.live, &ctx.topics, &ctx.groups, &props, caller) {
        Ok(report) => {
            // The store enforces the send-queue wait itself; hand it the new limit.
            ctx.store
                .set_send_queue_wait_limit_ms(ctx.live.send_queue_wait_limit_ms());
            crate::live_config::push_to_store(&report, ctx.store.as_ref());
            request
                .response_to(ResponseCode::Success.code(), Some(report.remark()))
                .into()
        }
        Err(e) => fail(request, e.response_code(), e.to_string()),
    }
}

/// INVOKE_BROKER_TO_RESET_OFFSET (222).
pub fn invoke_broker_to_reset_offset(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let h: ResetOffsetRequestHeader = match decode(request) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    if !ctx.is_master() {
        return fail(
            request,
            ResponseCode::SystemError,
            "offsets can only be reset on the master",
        );
    }
    let Some(tc) = ctx.topics.select(&h.topic) else {
        return fail(
            request,
            ResponseCode::TopicNotExist,
            format!("[reset offset] topic does not exist, topic={}", h.topic),
        );
    };
    if ctx.groups.find(&h.group).is_none() {
        return fail(
            request,
            ResponseCode::SubscriptionGroupNotExist,
            format!(
                "[reset offset] subscription group does not exist, group={}",
                h.group
            ),
        );
    }
    let queues: Vec<i32> = if h.queue_id >= 0 {
        if h.queue_id >= tc.max_queue_nums() {
            return fail(
                request,
                ResponseCode::InvalidParameter,
                format!("queueId {} is not a queue of {}", h.queue_id, h.topic),
            );
        }
        vec![h.queue_id]
    } else {
        (0..tc.read_queue_nums).collect()
    };
    let mut body = ResetOffsetBody::default();
    for q in queues {
        let min = ctx.store.min_offset_in_queue(&h.topic, q);
        let max = ctx.store.max_offset_in_queue(&h.topic, q);
        let target = match h.offset.filter(|o| *o >= 0) {
            Some(o) => o.clamp(min, max),
            None if h.timestamp < 0 => max,
            None => ctx
                .store
                .offset_in_queue_by_time(&h.topic, q, h.timestamp, Boundary::Lower),
        };
        let current = ctx.offsets.query_offset(&h.group, &h.topic, q);
        // Without force, only move a group backwards (replay), never skip ahead.
        let target = match current {
            Some(c) if !h.is_force && target > c => c,
            _ => target,
        };
        body.offset_table.insert(
            MessageQueue::new(h.topic.clone(), ctx.config.broker_name.clone(), q),
            target,
        );
    }
    if ctx.live.use_server_side_reset_offset() {
        for (mq, off) in &body.offset_table {
            ctx.offsets
                .set_reset_offset(&h.group, &mq.topic, mq.queue_id, *off);
        }
        tracing::info!(
            group = h.group,
            topic = h.topic,
            queues = body.offset_table.len(),
            "offsets reset (server side)"
        );
        return ok_body(request, body.encode());
    }
    // Legacy path: the consumers reset themselves on RESET_CONSUMER_CLIENT_OFFSET (220).
    let channels = ctx.consumers.channels(&h.group);
    if channels.is_empty() {
        return fail(
            request,
            ResponseCode::ConsumerNotOnline,
            format!(
                "Consumer not online, so can not reset offset, Group: {}",
                h.group
            ),
        );
    }
    let payload = body.encode();
    for ch in channels {
        let mut push = RemotingCommand::request(RequestCode::ResetConsumerClientOffset as i32, 0)
            .with_ext("topic", h.topic.as_str())
            .with_ext("group", h.group.as_str())
            .with_ext("timestamp", h.timestamp.to_string())
            .with_ext("isForce", h.is_force.to_string())
            .with_body(payload.clone());
        push.mark_oneway();
        if !ch.send_oneway(push) {
            tracing::warn!(group = h.group, peer = %ch.peer_addr(), "could not push RESET_CONSUMER_CLIENT_OFFSET");
        }
    }
    for (mq, off) in &body.offset_table {
        ctx.offsets
            .commit_offset(&h.group, &mq.topic, mq.queue_id, *off);
    }
    ok_body(request, payload)
}

/// CLEAN_EXPIRED_CONSUMEQUEUE (306): the store drops consume queues together with their
/// commit-log files, so there is nothing left to clean on demand.
pub fn clean_expired_consume_queue(_ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    tracing::info!("CLEAN_EXPIRED_CONSUMEQUEUE: consume queues expire with their commit-log files; nothing to do");
    ok(request)
}

/// CLEAN_UNUSED_TOPIC (316): see [`clean_expired_consume_queue`].
pub fn clean_unused_topic(_ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    tracing::info!("CLEAN_UNUSED_TOPIC: no store files of deleted topics are kept; nothing to do");
    ok(request)
}

/// DELETE_EXPIRED_COMMITLOG (329): expired CommitLog segments go over the next retention
/// passes, outside `deleteWhen` (files younger than `fileReservedTime` stay unless the disk
/// is past `diskSpaceCleanForciblyRatio`).
pub fn delete_expired_commit_log(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    tracing::info!("DELETE_EXPIRED_COMMITLOG: deleting expired CommitLog files now");
    ctx.store.execute_delete_files_manually();
    ok(request)
}

fn topic_list_body(names: impl IntoIterator<Item = String>) -> String {
    let set: BTreeSet<String> = names.into_iter().collect();
    ObjectBuilder::new()
        .field("topicList", json::string_array(&set))
        .build()
        .to_json()
}

/// GET_SYSTEM_TOPIC_LIST_FROM_BROKER (305).
pub fn get_system_topic_list(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let names = ctx
        .topics
        .topic_names()
        .into_iter()
        .filter(|t| ctx.topics.is_system_topic(t));
    ok_body(request, topic_list_body(names))
}

/// QUERY_TOPIC_CONSUME_BY_WHO (300): groups online on the topic or holding offsets on it.
pub fn query_topic_consume_by_who(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let h: QueryTopicConsumeByWhoRequestHeader = match decode(request) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let mut groups: BTreeSet<String> = ctx
        .consumers
        .groups_of_topic(&h.topic)
        .into_iter()
        .collect();
    groups.extend(ctx.offsets.groups_of_topic(&h.topic));
    let body = ObjectBuilder::new()
        .field("groupList", json::string_array(&groups))
        .build();
    ok_body(request, body.to_json())
}

/// QUERY_TOPICS_BY_CONSUMER (343).
pub fn query_topics_by_consumer(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let h: QueryTopicsByConsumerRequestHeader = match decode(request) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let mut topics: BTreeSet<String> = ctx.offsets.topics_of_group(&h.group).into_iter().collect();
    if let Some(info) = ctx.consumers.group(&h.group) {
        topics.extend(info.subscriptions.keys().cloned());
    }
    let body = ObjectBuilder::new()
        .field("brokerAddr", ctx.config.broker_addr())
        .field("topicList", json::string_array(&topics))
        .build();
    ok_body(request, body.to_json())
}

/// GET_BROKER_CONSUME_STATS (317): ConsumeStats of every online group, per subscribed topic.
pub fn get_broker_consume_stats(ctx: &BrokerContext, request: &RemotingCommand) -> Reply {
    let h: GetConsumeStatsInBrokerHeader = match decode(request) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let is_order = h.is_order;
    let mut list = Vec::new();
    let mut total_diff: i64 = 0;
    let groups = ctx.groups.wrapper().subscription_group_table;
    for (group, sg) in groups {
        if is_order && !sg.consume_message_orderly {
            continue;
        }
        let Some(info) = ctx.consumers.group(&group) else {
            continue;
        };
        let mut per_topic = Vec::new();
        for topic in info.subscriptions.keys() {
            if topic.starts_with(topics::RETRY_GROUP_TOPIC_PREFIX) {
                continue;
            }
            let stats = consume_stats(ctx, &group, std::slice::from_ref(topic));
            total_diff = total_diff.saturating_add(stats.total_diff());
            per_topic.push(json::parse_str(&stats.encode()).unwrap_or(Value::Null));
        }
        if !per_topic.is_empty() {
            list.push(json::map_value([(group.as_str(), Value::Array(per_topic))]));
        }
    }
    let body = ObjectBuilder::new()
        .field("brokerAddr", ctx.config.broker_addr())
        .field("consumeStatsList", Value::Array(list))
        .field("totalDiff", total_diff)
        .build();
    ok_body(request, body.to_json())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;
    use crate::test_support::{heartbeat_consumer, send_simple, test_context, FakeChannel};
    use ringmq_remoting::header::CommandHeader;

    fn call(ctx: &Arc<BrokerContext>, req: RemotingCommand) -> RemotingCommand {
        match process(ctx, &req, &FakeChannel::new(1).request_context(&req)).expect("admin code") {
            Reply::Now(r) => r.command,
            other => panic!("unexpected {other:?}"),
        }
    }

    fn req<H: CommandHeader>(code: RequestCode, h: &H) -> RemotingCommand {
        RemotingCommand::request(code as i32, 1).with_header(h)
    }

    fn fields(pairs: &[(&str, &str)]) -> ringmq_remoting::ExtFields {
        pairs.iter().map(|(k, v)| (*k, *v)).collect()
    }

    fn create_topic(
        ctx: &Arc<BrokerContext>,
        topic: &str,
        queues: &str,
        extra: &[(&str, &str)],
    ) -> RemotingCommand {
        let mut f = fields(&[
            ("topic", topic),
            ("defaultTopic", "TBW102"),
            ("readQueueNums", queues),
            ("writeQueueNums", queues),
            ("perm", "6"),
            ("topicFilterType", "SINGLE_TAG"),
            ("order", "false"),
        ]);
        for (k, v) in extra {
            f.insert(*k, *v);
        }
        let mut r = RemotingCommand::request(RequestCode::UpdateAndCreateTopic as i32, 1);
        r.ext_fields = f;
        call(ctx, r)
    }

    fn body_json(r: &RemotingCommand) -> Value {
        json::parse(&r.body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&r.body)))
    }

    /// The value at a dotted `path` (object keys, array indexes) of `v`.
    fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
        path.split('.').fold(v, |v, key| {
            let item = match (v.as_array(), key.parse::<usize>()) {
                (Some(items), Ok(i)) => items.get(i),
                _ => v.get(key),
            };
            item.unwrap_or_else(|| panic!("no {key:?} in {}", v.to_json()))
        })
    }

    #[test]
    fn non_admin_codes_are_left_to_the_dispatcher() {
        let (ctx, _) = test_context(BrokerConfig::default());
        let r = RemotingCommand::request(RequestCode::SendMessage as i32, 1);
        assert!(process(&ctx, &r, &FakeChannel::new(1).request_context(&r)).is_none());
        let r = RemotingCommand::request(999_999, 1);
        assert!(process(&ctx, &r, &FakeChannel::new(1).request_context(&r)).is_none());
    }

    #[test]
    fn topic_crud() {
        let (ctx, _) = test_context(BrokerConfig::default());
        let r = create_topic(
            &ctx,
            "AdminTopic",
            "4",
            &[("attributes", "+message.type=NORMAL")],
        );
        assert_eq!(r.code, 0, "{:?}", r.remark);
        let tc = ctx.topics.select("AdminTopic").unwrap();
        assert_eq!(
            (tc.read_queue_nums, tc.write_queue_nums, tc.perm),
            (4, 4, 6)
        );
        assert_eq!(
            tc.attributes.get("message.type").map(String::as_str),
            Some("NORMAL")
        );
        // Bad inputs.
        assert_eq!(
            create_topic(&ctx, "bad topic", "4", &[]).code,
            ResponseCode::InvalidParameter.code()
        );
        assert_eq!(
            create_topic(&ctx, "SCHEDULE_TOPIC_XXXX", "4", &[]).code,
            ResponseCode::InvalidParameter.code()
        );
        assert_eq!(
            create_topic(&ctx, "T2", "-1", &[]).code,
            ResponseCode::InvalidParameter.code()
        );
        assert_eq!(
            create_topic(&ctx, "T2", "4", &[("topicFilterType", "X")]).code,
            ResponseCode::InvalidParameter.code()
        );
        assert_eq!(
            create_topic(&ctx, "T2", "4", &[("attributes", "+message.type=MIXED")]).code,
            ResponseCode::InvalidParameter.code()
        );
        assert_eq!(
            create_topic(&ctx, "T2", "4", &[("perm", "99")]).code,
            ResponseCode::InvalidParameter.code()
        );
        let mut missing = RemotingCommand::request(17, 1);
        missing.ext_fields = fields(&[("topic", "T3")]);
        assert_eq!(call(&ctx, missing).code, ResponseCode::SystemError.code());
        // Get one / all.
        let r = call(
            &ctx,
            req(
                RequestCode::GetTopicConfig,
                &GetTopicConfigRequestHeader {
                    topic: "AdminTopic".into(),
                    ..Default::default()
                },
            ),
        );
        assert_eq!(
            String::from_utf8_lossy(&r.body),
            r#"{"attributes":{"message.type":"NORMAL"},"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"AdminTopic","topicSysFlag":0,"writeQueueNums":4}"#
        );
        let r = call(
            &ctx,
            req(
                RequestCode::GetTopicConfig,
                &GetTopicConfigRequestHeader {
                    topic: "Nope".into(),
                    ..Default::default()
                },
            ),
        );
        assert_eq!(r.code, ResponseCode::SystemError.code());
        let r = call(
            &ctx,
            RemotingCommand::request(RequestCode::GetAllTopicConfig as i32, 1),
        );
        let v = body_json(&r);
        assert_eq!(
            at(&v, "topicConfigTable.AdminTopic.topicName").as_str(),
            Some("AdminTopic")
        );
        assert!(at(&v, "dataVersion.counter").as_i64().unwrap() >= 1);
        assert_eq!(at(&v, "mappingDataVersion"), at(&v, "dataVersion"));
        let keys: Vec<&str> = v
            .as_object()
            .unwrap()
            .iter()
            .filter_map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(
            keys,
            [
                "dataVersion",
                "mappingDataVersion",
                "topicConfigTable",
                "topicQueueMappingDetailMap",
                "topicQueueMappingInfoMap"
            ]
        );
        // Delete.
        let del = |t: &str| {
            call(
                &ctx,
                req(
                    RequestCode::DeleteTopicInBroker,
                    &DeleteTopicRequestHeader {
                        topic: t.into(),
                        ..Default::default()
                    },
                ),
            )
        };
        assert_eq!(del("AdminTopic").code, 0);
        assert!(ctx.topics.select("AdminTopic").is_none());
        assert_eq!(del("TBW102").code, ResponseCode::InvalidParameter.code());
    }

    #[test]
    fn subscription_group_crud() {
        let (ctx, _) = test_context(BrokerConfig::default());
        let body =
            r#"{"groupName":"GA","retryMaxTimes":5,"retryQueueNums":2,"consumeEnable":false}"#;
        let r = call(&ctx, RemotingCommand::request(200, 1).with_body(body));
        assert_eq!(r.code, 0, "{:?}", r.remark);
        let g = ctx.groups.get("GA").unwrap();
        assert_eq!(
            (
                g.retry_max_times,
                g.retry_queue_nums,
                g.consume_enable,
                g.consume_timeout_minute
            ),
            (5, 2, false, 15)
        );
        assert_eq!(
            call(&ctx, RemotingCommand::request(200, 1).with_body("{nope")).code,
            ResponseCode::InvalidParameter.code()
        );
        assert_eq!(
            call(
                &ctx,
                RemotingCommand::request(200, 1).with_body(r#"{"groupName":"bad group"}"#)
            )
            .code,
            ResponseCode::InvalidParameter.code()
        );
        let get = |g: &str| {
            call(
                &ctx,
                req(
                    RequestCode::GetSubscriptiongroupConfig,
                    &GetSubscriptionGroupConfigRequestHeader {
                        group: g.into(),
                        ..Default::default()
                    },
                ),
            )
        };
        assert_eq!(
            at(&body_json(&get("GA")), "retryMaxTimes").as_i64(),
            Some(5)
        );
        assert_eq!(
            get("Nope").code,
            ResponseCode::SubscriptionGroupNotExist.code()
        );
        let all = call(&ctx, RemotingCommand::request(201, 1));
        assert_eq!(
            at(&body_json(&all), "subscriptionGroupTable.GA.groupName").as_str(),
            Some("GA")
        );
        ctx.offsets.commit_offset("GA", "T", 0, 5);
        let mut del = RemotingCommand::request(207, 1);
        del.ext_fields = fields(&[("groupName", "GA"), ("cleanOffset", "true")]);
        assert_eq!(call(&ctx, del).code, 0);
        assert!(ctx.groups.get("GA").is_none());
        assert_eq!(ctx.offsets.query_offset("GA", "T", 0), None);
    }

    /// Every key upstream's GET_BROKER_RUNTIME_INFO answers with (5.3.4: the store's stats,
    /// the broker's own keys; `remainHowManyDataToCommit` only with a transient store pool),
    /// besides `commitLogDiskRatio_<dir>` and `scheduleMessageOffset_<level>`.
    const UPSTREAM_RUNTIME_INFO_KEYS: &[&str] = &[
        "EndTransactionQueueSize",
        "EndTransactionThreadPoolQueueCapacity",
        "ackThreadPoolQueueCapacity",
        "ackThreadPoolQueueHeadWaitTimeMills",
        "ackThreadPoolQueueSize",
        "bootTimestamp",
        "brokerActive",
        "brokerVersionDesc",
        "commitLogDirCapacity",
        "commitLogDiskRatio",
        "commitLogMaxOffset",
        "commitLogMinOffset",
        "consumeQueueDiskRatio",
        "dispatchBehindBytes",
        "dispatchMaxBuffer",
        "earliestMessageTimeStamp",
        "getFoundTps",
        "getMessageEntireTimeMax",
        "getMissTps",
        "getTotalTps",
        "getTransferredTps",
        "litePullThreadPoolQueueCapacity",
        "litePullThreadPoolQueueHeadWaitTimeMills",
        "litePullThreadPoolQueueSize",
        "msgGetTotalTodayMorning",
        "msgGetTotalTodayNow",
        "msgGetTotalYesterdayMorning",
        "msgPutTotalTodayMorning",
        "msgPutTotalTodayNow",
        "msgPutTotalYesterdayMorning",
        "pageCacheLockTimeMills",
        "pullThreadPoolQueueCapacity",
        "pullThreadPoolQueueHeadWaitTimeMills",
        "pullThreadPoolQueueSize",
        "putLatency99",
        "putLatency999",
        "putMessageAverageSize",
        "putMessageDistributeTime",
        "putMessageEntireTimeMax",
        "putMessageFailedTimes",
        "putMessageSizeTotal",
        "putMessageTimesTotal",
        "putTps",
        "queryThreadPoolQueueCapacity",
        "queryThreadPoolQueueHeadWaitTimeMills",
        "queryThreadPoolQueueSize",
        "remainHowManyDataToFlush",
        "remainTransientStoreBufferNumbs",
        "runtime",
        "sendThreadPoolQueueCapacity",
        "sendThreadPoolQueueHeadWaitTimeMills",
        "sendThreadPoolQueueSize",
        "startAcceptSendRequestTimeStamp",
        "timerCongestNum",
        "timerDequeueTps",
        "timerEnqueueTps",
        "timerOffsetBehind",
        "timerReadBehind",
    ];

    #[test]
    fn runtime_info_has_every_upstream_key_in_upstream_format() {
        let root = std::env::temp_dir().join(format!("ringmq-rt-info-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let config = BrokerConfig {
            store_path_root_dir: root.display().to_string(),
            ..BrokerConfig::default()
        };
        let (ctx, _) = test_context(config);
        send_simple(&ctx, "RtTopic", 0, "", b"x");
        let r = call(&ctx, RemotingCommand::request(28, 1));
        let kv = KvTable::decode(&r.body).unwrap();
        let missing: Vec<&str> = UPSTREAM_RUNTIME_INFO_KEYS
            .iter()
            .copied()
            .filter(|k| !kv.table.contains_key(*k))
            .collect();
        assert!(missing.is_empty(), "missing {missing:?}");
        let per_dir = format!("commitLogDiskRatio_{}", root.join("commitlog").display());
        assert!(kv.table.contains_key(&per_dir), "missing {per_dir}");
        for level in 1..=18 {
            let v = &kv.table[&format!("scheduleMessageOffset_{level}")];
            let (delivered, max) = v.split_once(',').unwrap();
            assert!(
                delivered.parse::<i64>().is_ok() && max.parse::<i64>().is_ok(),
                "{v}"
            );
        }
        let space = fs_space(&root).unwrap();
        assert_eq!(
            kv.table["commitLogDirCapacity"],
            format!(
                "Total : {}, Free : {}.",
                crate::metrics::human_readable_bytes(space.total_bytes),
                crate::metrics::human_readable_bytes(space.free_bytes)
            )
        );
        assert!(kv.table["commitLogDirCapacity"].ends_with(" GiB.") || space.total_bytes < 1 << 30);
        assert_eq!(kv.table["timerEnqueueTps"], "0.0");
        assert_eq!(kv.table["remainHowManyDataToFlush"], "0 B");
        assert_eq!(kv.table["EndTransactionThreadPoolQueueCapacity"], "100000");
        assert!(kv.table["commitLogMaxOffset"].parse::<i64>().unwrap() > 0);
        assert!(kv.table["earliestMessageTimeStamp"].parse::<i64>().unwrap() > 0);
        // No sampler tick yet (no broker thread in this test): rates read 0.
        let first_tps: f64 = kv.table["putTps"]
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(first_tps, 0.0);
        assert_eq!(kv.table["msgPutTotalTodayNow"], "1");
        assert_eq!(kv.table["putMessageAverageSize"], "0.0");
        for k in [
            "ringmq.appendLockHoldUs",
            "ringmq.recordsPerBatch",
            "ringmq.flushLatencyUs",
            "ringmq.bytesPerFdatasync",
            "ringmq.reputLagBytes",
            "ringmq.busyRefusals.PC_SYNCHRONIZED",
            "getTransferedTps",
            "totalMemKBytes",
        ] {
            assert!(kv.table.contains_key(k), "missing {k}");
        }
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn disk_ratio_and_sizes_use_upstream_formulas() {
        // 700 used of 1000, 250 usable (50 reserved for root): upstream 700/950 rounded up.
        let s = FsSpace {
            total_bytes: 1000,
            free_bytes: 300,
            usable_bytes: 250,
        };
        assert_eq!(java_double(disk_used_ratio(Some(s))), "0.74");
        assert_eq!(java_double(disk_used_ratio(None)), "-1.0");
        let full = FsSpace {
            total_bytes: 1000,
            free_bytes: 0,
            usable_bytes: 0,
        };
        assert_eq!(java_double(disk_used_ratio(Some(full))), "1.0");
        let h = crate::metrics::human_readable_bytes;
        assert_eq!(h(512), "512 B");
        assert_eq!(h(1536), "1.5 KiB");
        assert_eq!(h(252 << 30), "252.0 GiB");
        assert_eq!(h(32_104_000_000), "29.9 GiB");
    }

    #[test]
    fn runtime_info_counts_puts_gets_and_tps_after_a_tick() {
        let (ctx, _) = test_context(BrokerConfig::default());
        ctx.metrics.sample();
        // Rates need a window longer than a millisecond.
        std::thread::sleep(std::time::Duration::from_millis(5));
        for _ in 0..3 {
            send_simple(&ctx, "RtTopic2", 0, "", b"xyz");
        }
        let kv = KvTable::decode(&call(&ctx, RemotingCommand::request(28, 1)).body).unwrap();
        assert_eq!(kv.table["msgPutTotalTodayNow"], "3");
        assert_eq!(kv.table["msgGetTotalTodayNow"], "0");
        let tps: Vec<f64> = kv.table["putTps"]
            .split(' ')
            .map(|v| v.parse().unwrap())
            .collect();
        assert!(tps.len() == 3 && tps.iter().all(|v| *v > 0.0), "{tps:?}");
    }

    #[test]
    fn topic_and_consume_stats() {
        let (ctx, _) = test_context(BrokerConfig::default());
        for _ in 0..3 {
            send_simple(&ctx, "StatTopic", 1, "", b"x");
        }
        let r = call(
            &ctx,
            req(
                RequestCode::GetTopicStatsInfo,
                &GetTopicStatsInfoRequestHeader {
                    topic: "StatTopic".into(),
                    ..Default::default()
                },
            ),
        );
        let t = TopicStatsTable::decode(&r.body).unwrap();
        assert_eq!(t.offset_table.len(), 4);
        let q1 =
            &t.offset_table[&MessageQueue::new("StatTopic", ctx.config.broker_name.clone(), 1)];
        assert_eq!((q1.min_offset, q1.max_offset), (0, 3));
        assert!(q1.last_update_timestamp > 0);
        let r = call(
            &ctx,
            req(
                RequestCode::GetTopicStatsInfo,
                &GetTopicStatsInfoRequestHeader {
                    topic: "None".into(),
                    ..Default::default()
                },
            ),
        );
        assert_eq!(r.code, ResponseCode::TopicNotExist.code());
        ctx.offsets.commit_offset("SG", "StatTopic", 1, 2);
        let h = GetConsumeStatsRequestHeader {
            consumer_group: "SG".into(),
            ..Default::default()
        };
        let r = call(&ctx, req(RequestCode::GetConsumeStats, &h));
        let s = ConsumeStats::decode(&r.body).unwrap();
        let w = s.offset_table[&MessageQueue::new("StatTopic", ctx.config.broker_name.clone(), 1)];
        assert_eq!(
            (w.broker_offset, w.consumer_offset, w.pull_offset),
            (3, 2, 2)
        );
        assert!(w.last_timestamp > 0);
        assert_eq!(s.total_diff(), 1);
        let by_who = call(
            &ctx,
            req(
                RequestCode::QueryTopicConsumeByWho,
                &QueryTopicConsumeByWhoRequestHeader {
                    topic: "StatTopic".into(),
                    ..Default::default()
                },
            ),
        );
        assert_eq!(at(&body_json(&by_who), "groupList.0").as_str(), Some("SG"));
        let by_group = call(
            &ctx,
            req(
                RequestCode::QueryTopicsByConsumer,
                &QueryTopicsByConsumerRequestHeader {
                    group: "SG".into(),
                    ..Default::default()
                },
            ),
        );
        assert_eq!(
            at(&body_json(&by_group), "topicList.0").as_str(),
            Some("StatTopic")
        );
        let all = call(
            &ctx,
            RemotingCommand::request(RequestCode::GetAllConsumerOffset as i32, 1),
        );
        assert!(std::str::from_utf8(&all.body)
            .unwrap()
            .contains("\"StatTopic@SG\":{1:2}"));
    }

    #[test]
    fn connections_and_broker_consume_stats() {
        let (ctx, _) = test_context(BrokerConfig::default());
        let h = GetConsumerConnectionListRequestHeader {
            consumer_group: "CG".into(),
            ..Default::default()
        };
        assert_eq!(
            call(&ctx, req(RequestCode::GetConsumerConnectionList, &h)).code,
            ResponseCode::ConsumerNotOnline.code()
        );
        ctx.groups.find("CG");
        ctx.topics
            .update(TopicConfig::new("CTopic").with_queues(2, 2));
        heartbeat_consumer(&ctx, "CG", "CTopic", "*", 1);
        let r = call(&ctx, req(RequestCode::GetConsumerConnectionList, &h));
        assert_eq!(r.code, 0, "{:?}", r.remark);
        let v = body_json(&r);
        assert_eq!(
            at(&v, "connectionSet.0.clientId").as_str(),
            Some("client-1")
        );
        assert_eq!(at(&v, "messageModel").as_str(), Some("CLUSTERING"));
        assert_eq!(
            at(&v, "subscriptionTable.CTopic.subString").as_str(),
            Some("*")
        );
        let p = GetProducerConnectionListRequestHeader {
            producer_group: "NoPG".into(),
            ..Default::default()
        };
        assert_eq!(
            call(&ctx, req(RequestCode::GetProducerConnectionList, &p)).code,
            ResponseCode::SystemError.code()
        );
        let r = call(
            &ctx,
            RemotingCommand::request(RequestCode::GetBrokerConsumeStats as i32, 1)
                .with_ext("isOrder", "false"),
        );
        // MessageQueue object keys: only the fastjson-dialect reader parses this.
        let v = json::parse(&r.body).unwrap();
        let list = v
            .get("consumeStatsList")
            .and_then(|l| l.as_array())
            .unwrap();
        let per_topic = list[0].get("CG").and_then(|x| x.as_array()).unwrap();
        let stats = ConsumeStats::decode(per_topic[0].to_json().as_bytes()).unwrap();
        assert_eq!(stats.offset_table.len(), 2);
    }

    #[test]
    fn broker_config_get_and_update() {
        let (ctx, _) = test_context(BrokerConfig::default());
        let r = call(&ctx, RemotingCommand::request(26, 1));
        let text = std::str::from_utf8(&r.body).unwrap();
        assert!(text.contains("brokerClusterName=DefaultCluster"));
        assert!(r.ext_fields.get("version").unwrap().contains("counter"));
        // Every upstream key with a value is listed, as a Java broker lists it.
        let listed: std::collections::BTreeSet<String> = crate::config::parse_java_properties(text)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        let missing: Vec<&str> = crate::config_keys::upstream_keys()
            .iter()
            .filter(|k| matches!(k.default, crate::config_keys::DefaultKind::Value(_)))
            .map(|k| k.key)
            .filter(|k| !listed.contains(*k))
            .collect();
        assert!(missing.is_empty(), "GET_BROKER_CONFIG lacks {missing:?}");
        let up = |body: &str| {
            call(
                &ctx,
                RemotingCommand::request(25, 1).with_body(body.to_string()),
            )
        };
        assert_eq!(
            up("rocketmqHome=/x").code,
            ResponseCode::NoPermission.code()
        );
        assert_eq!(
            up("autoCreateTopicEnable=maybe").code,
            ResponseCode::InvalidParameter.code()
        );
        assert_eq!(
            up("noSuchKeyAtAll=1").code,
            ResponseCode::InvalidParameter.code()
        );
        assert_eq!(up("").code, ResponseCode::InvalidParameter.code());
        let r = up("autoCreateTopicEnable=false");
        assert_eq!(r.code, ResponseCode::Success.code(), "{:?}", r.remark);
        let r = call(&ctx, RemotingCommand::request(26, 1));
        let text = std::str::from_utf8(&r.body).unwrap();
        assert!(
            text.contains("autoCreateTopicEnable=false\n"),
            "GET shows the live value"
        );
        assert!(r
            .ext_fields
            .get("version")
            .unwrap()
            .contains("\"counter\":1"));
    }

    #[test]
    fn reset_offset_by_timestamp_server_side() {
        let (ctx, _) = test_context(BrokerConfig::default());
        ctx.topics
            .update(TopicConfig::new("RTopic").with_queues(1, 1));
        for _ in 0..5 {
            send_simple(&ctx, "RTopic", 0, "", b"x");
        }
        ctx.offsets.commit_offset("RG", "RTopic", 0, 5);
        let mut r = RemotingCommand::request(222, 1);
        r.ext_fields = fields(&[
            ("group", "RG"),
            ("topic", "RTopic"),
            ("timestamp", "0"),
            ("isForce", "true"),
        ]);
        let resp = call(&ctx, r.clone());
        assert_eq!(resp.code, 0, "{:?}", resp.remark);
        let body = ResetOffsetBody::decode(&resp.body).unwrap();
        assert_eq!(
            body.offset_table.values().copied().collect::<Vec<_>>(),
            vec![0]
        );
        assert_eq!(ctx.offsets.peek_reset_offset("RG", "RTopic", 0), Some(0));
        assert_eq!(ctx.offsets.query_offset("RG", "RTopic", 0), Some(0));
        // Without force, a reset never moves a group forward.
        ctx.offsets.commit_offset("RG", "RTopic", 0, 1);
        r.ext_fields.insert("isForce", "false");
        r.ext_fields.insert("timestamp", "-1");
        let body = ResetOffsetBody::decode(&call(&ctx, r.clone()).body).unwrap();
        assert_eq!(
            body.offset_table.values().copied().collect::<Vec<_>>(),
            vec![1]
        );
        r.ext_fields.insert("topic", "Missing");
        assert_eq!(call(&ctx, r).code, ResponseCode::TopicNotExist.code());
    }

    #[test]
    fn reset_offset_legacy_push() {
        let cfg = BrokerConfig {
            use_server_side_reset_offset: false,
            ..BrokerConfig::default()
        };
        let (ctx, _) = test_context(cfg);
        ctx.topics
            .update(TopicConfig::new("LTopic").with_queues(1, 1));
        let mut r = RemotingCommand::request(222, 1);
        r.ext_fields = fields(&[
            ("group", "LG"),
            ("topic", "LTopic"),
            ("timestamp", "0"),
            ("isForce", "true"),
        ]);
        assert_eq!(
            call(&ctx, r.clone()).code,
            ResponseCode::ConsumerNotOnline.code()
        );
        let ch = FakeChannel::new(7);
        let hb = r#"{"clientID":"c7","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"LG","messageModel":"CLUSTERING","subscriptionDataSet":[{"expressionType":"TAG","subString":"*","subVersion":1,"topic":"LTopic"}]}]}"#;
        crate::test_support::run_on(&ctx, RemotingCommand::request(34, 1).with_body(hb), &ch);
        assert_eq!(call(&ctx, r).code, 0);
        let pushed = ch
            .sent()
            .into_iter()
            .find(|c| c.code == RequestCode::ResetConsumerClientOffset as i32)
            .expect("220 pushed");
        assert_eq!(pushed.ext_fields.get("group"), Some("LG"));
        assert!(pushed.is_oneway());
        assert!(ResetOffsetBody::decode(&pushed.body).is_ok());
    }

    #[test]
    fn small_lookups() {
        let (ctx, _) = test_context(BrokerConfig::default());
        let r = call(
            &ctx,
            RemotingCommand::request(RequestCode::GetSystemTopicListFromBroker as i32, 1),
        );
        let v = body_json(&r);
        let list: Vec<&str> = at(&v, "topicList")
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x.as_str())
            .collect();
        assert!(list.contains(&"SCHEDULE_TOPIC_XXXX") && list.contains(&"TBW102"));
        assert_eq!(call(&ctx, RemotingCommand::request(306, 1)).code, 0);
        assert_eq!(call(&ctx, RemotingCommand::request(316, 1)).code, 0);
        let d = call(
            &ctx,
            RemotingCommand::request(RequestCode::GetAllDelayOffset as i32, 1),
        );
        assert!(std::str::from_utf8(&d.body)
            .unwrap()
            .contains("offsetTable"));
        let big = RemotingCommand::request(200, 1).with_body(vec![b' '; MAX_ADMIN_BODY_BYTES + 1]);
        assert_eq!(call(&ctx, big).code, ResponseCode::InvalidParameter.code());
    }

    #[test]
    fn attribute_changes() {
        let mut a = BTreeMap::new();
        apply_attribute_changes(&mut a, "+x=1,+y=2").unwrap();
        apply_attribute_changes(&mut a, "-x").unwrap();
        assert_eq!(a.len(), 1);
        assert!(apply_attribute_changes(&mut a, "x=1").is_err());
        assert!(apply_attribute_changes(&mut a, "+=1").is_err());
    }
}
