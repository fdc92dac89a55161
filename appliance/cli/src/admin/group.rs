//! Consumer- and producer-group commands: `updateSubGroup`, `deleteSubGroup`,
//! `consumerProgress`, `consumerConnection`, `producerConnection`, `consumerStatus`,
//! `resetOffsetByTime`.

use std::collections::BTreeMap;

use ringmq_client::message::now_ms;
use ringmq_client::ClientError;
use ringmq_remoting::body::consumer::{
    Connection, ConsumerConnection, MessageQueue, ResetOffsetBody,
};
use ringmq_remoting::body::heartbeat::{ConsumeType, MessageModel};
use ringmq_remoting::body::stats::ConsumeStats;
use ringmq_remoting::header::{
    GetConsumerRunningInfoRequestHeader, ResetOffsetRequestHeader, SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
};
use ringmq_remoting::json::{self, ObjectBuilder, Value};
use ringmq_remoting::{RemotingCommand, RequestCode, ResponseCode};

use super::cli::{flag, long_only, opt, req, Cmd, Matches};
use super::ctx::{retry_topic, select_addr, Ctx};
use super::fmt::{
    date_time, double_value, front, java_map, parse_timestamp, string_map_value, version_desc,
};
use super::out::{describe, AResult, AdminError, At, Out, Role};
use super::topic::parse_attributes;

pub const COMMANDS: &[Cmd] = &[
    Cmd {
        name: "updateSubGroup",
        desc: "Create or update a subscription group on a broker or on every master of a cluster.",
        opts: &[
            opt("b", "brokerAddr", "broker address"),
            opt("c", "clusterName", "cluster whose masters get the group"),
            req("g", "groupName", "consumer group name"),
            opt("s", "consumeEnable", "consumption allowed: true|false"),
            opt("m", "consumeFromMinEnable", "start from the min offset: true|false"),
            opt("d", "consumeBroadcastEnable", "broadcast consumption: true|false"),
            opt("o", "consumeMessageOrderly", "orderly consumption: true|false"),
            opt("q", "retryQueueNums", "retry queue count"),
            opt("r", "retryMaxTimes", "max redeliveries before the DLQ"),
            opt("p", "groupRetryPolicy", "retry policy JSON, e.g. {\"type\":\"EXPONENTIAL\",\"exponentialRetryPolicy\":{...}}"),
            opt("i", "brokerId", "broker id to consume from"),
            opt("w", "whichBrokerWhenConsumeSlowly", "broker id to consume from when slow"),
            opt("a", "notifyConsumerIdsChanged", "notify consumers of membership changes: true|false"),
            long_only("attributes", "attribute changes, e.g. +key=value,-key"),
        ],
        one_of: &[&["brokerAddr", "clusterName"]],
    },
    Cmd {
        name: "deleteSubGroup",
        desc: "Delete a subscription group from a broker or from every master of a cluster.",
        opts: &[
            opt("b", "brokerAddr", "broker address"),
            opt("c", "clusterName", "cluster whose masters lose the group"),
            req("g", "groupName", "consumer group name"),
            opt("r", "removeOffset", "also remove the group's offsets: true|false"),
        ],
        one_of: &[&["brokerAddr", "clusterName"]],
    },
    Cmd {
        name: "consumerProgress",
        desc: "Print a group's consume progress per queue, or a summary of every group.",
        opts: &[
            opt("g", "groupName", "consumer group name (default: every group)"),
            opt("t", "topicName", "only this topic"),
            opt("s", "showClientIP", "show the client holding each queue: true|false"),
            opt("c", "cluster", "cluster name (or lmq parent topic)"),
        ],
        one_of: &[],
    },
    Cmd {
        name: "consumerConnection",
        desc: "Print the connections and subscriptions of a consumer group.",
        opts: &[req("g", "consumerGroup", "consumer group name"), opt("b", "brokerAddr", "ask this broker")],
        one_of: &[],
    },
    Cmd {
        name: "producerConnection",
        desc: "Print the connections of a producer group.",
        opts: &[req("g", "producerGroup", "producer group name"), req("t", "topic", "a topic the group sends to")],
        one_of: &[],
    },
    Cmd {
        name: "consumerStatus",
        desc: "Ask every consumer of a group for its running state.",
        opts: &[
            req("g", "consumerGroup", "consumer group name"),
            opt("i", "clientId", "only this client"),
            opt("b", "brokerAddr", "ask this broker"),
            flag("s", "jstack", "include the consumer's thread stacks"),
        ],
        one_of: &[],
    },
    Cmd {
        name: "resetOffsetByTime",
        desc: "Move a group's offsets to a point in time (no client restart needed).",
        opts: &[
            req("g", "group", "consumer group name"),
            req("t", "topic", "topic name"),
            req("s", "timestamp", "now, milliseconds, or yyyy-MM-dd#HH:mm:ss:SSS"),
            opt("f", "force", "also move offsets forward: true|false (default true)"),
            opt("c", "cluster", "cluster name (or lmq parent topic)"),
            opt("b", "broker", "broker address (with -q: one queue only)"),
            opt("q", "queue", "queue id (with -b)"),
            opt("o", "offset", "target offset instead of the timestamp's (with -b and -q)"),
        ],
        one_of: &[],
    },
];

// ---- updateSubGroup / deleteSubGroup ------------------------------------------------------

/// `SubscriptionGroupConfig` as mqadmin's updateSubGroup builds it.
#[derive(Debug, Clone, PartialEq)]
pub struct SubGroupConf {
    pub group_name: String,
    pub consume_enable: bool,
    pub consume_from_min_enable: bool,
    pub consume_broadcast_enable: bool,
    pub consume_message_orderly: bool,
    pub retry_queue_nums: i32,
    pub retry_max_times: i32,
    /// `None`: the default CUSTOMIZED policy.
    pub group_retry_policy: Option<Value>,
    pub broker_id: i64,
    pub which_broker_when_consume_slowly: i64,
    pub notify_consumer_ids_changed_enable: bool,
    pub attributes: BTreeMap<String, String>,
}

impl SubGroupConf {
    /// updateSubGroup's defaults: broadcast and from-min are off unless asked for.
    pub fn new(group: &str) -> Self {
        Self {
            group_name: group.to_string(),
            consume_enable: true,
            consume_from_min_enable: false,
            consume_broadcast_enable: false,
            consume_message_orderly: false,
            retry_queue_nums: 1,
            retry_max_times: 16,
            group_retry_policy: None,
            broker_id: 0,
            which_broker_when_consume_slowly: 1,
            notify_consumer_ids_changed_enable: true,
            attributes: BTreeMap::new(),
        }
    }

    pub fn from_matches(m: &Matches) -> AResult<Self> {
        let mut c = Self::new(m.get("groupName").unwrap_or_default());
        c.consume_enable = m.boolean("consumeEnable", c.consume_enable);
        c.consume_from_min_enable = m.boolean("consumeFromMinEnable", c.consume_from_min_enable);
        c.consume_broadcast_enable =
            m.boolean("consumeBroadcastEnable", c.consume_broadcast_enable);
        c.consume_message_orderly = m.boolean("consumeMessageOrderly", c.consume_message_orderly);
        c.retry_queue_nums = m.num("retryQueueNums", c.retry_queue_nums)?;
        c.retry_max_times = m.num("retryMaxTimes", c.retry_max_times)?;
        if let Some(p) = m.get("groupRetryPolicy") {
            let v = json::parse_str(p)
                .map_err(|e| format!("-p/--groupRetryPolicy is not JSON: {e}"))?;
            if v.as_object().is_none() {
                return Err(AdminError::Usage(
                    "-p/--groupRetryPolicy must be a JSON object".into(),
                ));
            }
            c.group_retry_policy = Some(v);
        }
        c.broker_id = m.num("brokerId", c.broker_id)?;
        c.which_broker_when_consume_slowly = m.num(
            "whichBrokerWhenConsumeSlowly",
            c.which_broker_when_consume_slowly,
        )?;
        c.notify_consumer_ids_changed_enable = m.boolean(
            "notifyConsumerIdsChanged",
            c.notify_consumer_ids_changed_enable,
        );
        if let Some(a) = m.get("attributes") {
            c.attributes = parse_attributes(a)?;
        }
        Ok(c)
    }

    fn policy_value(&self) -> Value {
        self.group_retry_policy
            .clone()
            .unwrap_or_else(|| ObjectBuilder::new().field("type", "CUSTOMIZED").build())
    }

    /// The request body: fastjson's alphabetical bean form.
    pub fn to_value(&self) -> Value {
        ObjectBuilder::new()
            .field("attributes", string_map_value(&self.attributes))
            .field("brokerId", self.broker_id)
            .field("consumeBroadcastEnable", self.consume_broadcast_enable)
            .field("consumeEnable", self.consume_enable)
            .field("consumeFromMinEnable", self.consume_from_min_enable)
            .field("consumeMessageOrderly", self.consume_message_orderly)
            .field("consumeTimeoutMinute", 15)
            .field("groupName", self.group_name.as_str())
            .field("groupRetryPolicy", self.policy_value())
            .field("groupSysFlag", 0)
            .field(
                "notifyConsumerIdsChangedEnable",
                self.notify_consumer_ids_changed_enable,
            )
            .field("retryMaxTimes", self.retry_max_times)
            .field("retryQueueNums", self.retry_queue_nums)
            .field(
                "whichBrokerWhenConsumeSlowly",
                self.which_broker_when_consume_slowly,
            )
            .build()
    }

    /// Like Java's `SubscriptionGroupConfig.toString`.
    pub fn java_string(&self) -> String {
        let policy = match &self.group_retry_policy {
            None => "GroupRetryPolicy{type=CUSTOMIZED, exponentialRetryPolicy=null, customizedRetryPolicy=null}".to_string(),
            Some(v) => v.to_json(),
        };
        format!(
            "SubscriptionGroupConfig{{groupName={}, consumeEnable={}, consumeFromMinEnable={}, consumeBroadcastEnable={}, consumeMessageOrderly={}, retryQueueNums={}, retryMaxTimes={}, groupRetryPolicy={policy}, brokerId={}, whichBrokerWhenConsumeSlowly={}, notifyConsumerIdsChangedEnable={}, groupSysFlag=0, consumeTimeoutMinute=15, subscriptionDataSet=null, attributes={}}}",
            self.group_name,
            self.consume_enable,
            self.consume_from_min_enable,
            self.consume_broadcast_enable,
            self.consume_message_orderly,
            self.retry_queue_nums,
            self.retry_max_times,
            self.broker_id,
            self.which_broker_when_consume_slowly,
            self.notify_consumer_ids_changed_enable,
            java_map(self.attributes.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        )
    }
}

async fn create_sub_group(ctx: &Ctx, addr: &str, conf: &SubGroupConf) -> Result<(), ClientError> {
    let req = RemotingCommand::request(RequestCode::UpdateAndCreateSubscriptiongroup.code(), 0)
        .with_body(conf.to_value().to_json());
    ctx.call(addr, req).await.map(|_| ())
}

pub async fn update_sub_group(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let conf = SubGroupConf::from_matches(m)?;
    let mut done = Vec::new();
    if let Some(addr) = m.get("brokerAddr") {
        create_sub_group(ctx, addr, &conf).await.br()?;
        out.line(format!("create subscription group to {addr} success."));
        done.push(addr.to_string());
    } else if let Some(cluster) = m.get("clusterName") {
        let mut failed = Vec::new();
        for addr in ctx.masters(cluster).await? {
            match create_sub_group(ctx, &addr, &conf).await {
                Ok(()) => {
                    out.line(format!("create subscription group to {addr} success."));
                    done.push(addr);
                }
                Err(e) => {
                    out.warn(describe(Role::Broker, &e));
                    failed.push(addr);
                }
            }
        }
        if !failed.is_empty() {
            return Err(AdminError::failed(format!(
                "creating subscription group {} failed on {}",
                conf.group_name,
                failed.join(", ")
            )));
        }
    }
    out.line(conf.java_string());
    out.json(
        ObjectBuilder::new()
            .field("brokerAddrs", json::string_array(&done))
            .field("subscriptionGroupConfig", conf.to_value())
            .build(),
    );
    Ok(())
}

async fn delete_sub_group_at(
    ctx: &Ctx,
    addr: &str,
    group: &str,
    clean_offset: bool,
) -> AResult<()> {
    let req = RemotingCommand::request(RequestCode::DeleteSubscriptiongroup.code(), 0)
        .with_ext("groupName", group)
        .with_ext("cleanOffset", clean_offset.to_string());
    ctx.call(addr, req).await.br().map(|_| ())
}

pub async fn delete_sub_group(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let group = m.get("groupName").unwrap_or_default();
    let clean_offset = m.boolean("removeOffset", false);
    let mut done = Vec::new();
    if let Some(addr) = m.get("brokerAddr") {
        delete_sub_group_at(ctx, addr, group, clean_offset).await?;
        out.line(format!(
            "delete subscription group [{group}] from broker [{addr}] success."
        ));
        done.push(addr.to_string());
    } else if let Some(cluster) = m.get("clusterName") {
        for addr in ctx.masters(cluster).await? {
            delete_sub_group_at(ctx, &addr, group, clean_offset).await?;
            out.line(format!("delete subscription group [{group}] from broker [{addr}] in cluster [{cluster}] success."));
            done.push(addr);
        }
        // Like mqadmin: the group's retry and DLQ topics go too; failures are reported only.
        for topic in [retry_topic(group), format!("%DLQ%{group}")] {
            for addr in &done {
                if let Err(e) = ctx.admin.delete_topic_in_broker(addr, &topic).await {
                    out.warn(describe(Role::Broker, &e));
                }
            }
            if let Err(e) = ctx
                .admin
                .delete_topic_in_namesrv(&topic, Some(cluster))
                .await
            {
                out.warn(describe(Role::Namesrv, &e));
            }
        }
    }
    out.json(
        ObjectBuilder::new()
            .field("brokerAddrs", json::string_array(&done))
            .field("cleanOffset", clean_offset)
            .field("groupName", group)
            .build(),
    );
    Ok(())
}

// ---- consumerProgress ----------------------------------------------------------------------

/// The per-queue table of `consumerProgress -g`; `client_ips` adds the `#Client IP` column.
pub fn progress_text(
    stats: &ConsumeStats,
    client_ips: Option<&BTreeMap<MessageQueue, String>>,
) -> String {
    let mut s = match client_ips {
        Some(_) => format!(
            "{:<64}  {:<32}  {:<4}  {:<20}  {:<20}  {:<20} {:<20} {:<20}{}\n",
            "#Topic",
            "#Broker Name",
            "#QID",
            "#Broker Offset",
            "#Consumer Offset",
            "#Client IP",
            "#Diff",
            "#Inflight",
            "#LastTime"
        ),
        None => format!(
            "{:<64}  {:<32}  {:<4}  {:<20}  {:<20}  {:<20} {:<20}{}\n",
            "#Topic",
            "#Broker Name",
            "#QID",
            "#Broker Offset",
            "#Consumer Offset",
            "#Diff",
            "#Inflight",
            "#LastTime"
        ),
    };
    let (mut diff_total, mut inflight_total) = (0i64, 0i64);
    for (mq, o) in &stats.offset_table {
        let diff = o.broker_offset - o.consumer_offset;
        let inflight = o.pull_offset - o.consumer_offset;
        diff_total += diff;
        inflight_total += inflight;
        let last = if o.last_timestamp == 0 {
            "N/A".to_string()
        } else {
            date_time(o.last_timestamp)
        };
        match client_ips {
            Some(ips) => s.push_str(&format!(
                "{:<64}  {:<32}  {:<4}  {:<20}  {:<20}  {:<20} {:<20} {:<20} {}\n",
                front(&mq.topic, 64),
                front(&mq.broker_name, 32),
                mq.queue_id,
                o.broker_offset,
                o.consumer_offset,
                ips.get(mq).map(String::as_str).unwrap_or("N/A"),
                diff,
                inflight,
                last
            )),
            None => s.push_str(&format!(
                "{:<64}  {:<32}  {:<4}  {:<20}  {:<20}  {:<20} {:<20} {}\n",
                front(&mq.topic, 64),
                front(&mq.broker_name, 32),
                mq.queue_id,
                o.broker_offset,
                o.consumer_offset,
                diff,
                inflight,
                last
            )),
        }
    }
    s.push('\n');
    s.push_str(&format!("Consume TPS: {:.2}\n", stats.consume_tps));
    s.push_str(&format!("Consume Diff Total: {diff_total}\n"));
    s.push_str(&format!("Consume Inflight Total: {inflight_total}\n"));
    s
}

pub fn consume_stats_value(group: &str, stats: &ConsumeStats) -> Value {
    let rows: Vec<Value> = stats
        .offset_table
        .iter()
        .map(|(mq, o)| {
            ObjectBuilder::new()
                .field("brokerName", mq.broker_name.as_str())
                .field("brokerOffset", o.broker_offset)
                .field("consumerOffset", o.consumer_offset)
                .field("diff", o.broker_offset - o.consumer_offset)
                .field("inflight", o.pull_offset - o.consumer_offset)
                .field("lastTimestamp", o.last_timestamp)
                .field("pullOffset", o.pull_offset)
                .field("queueId", mq.queue_id)
                .field("topic", mq.topic.as_str())
                .build()
        })
        .collect();
    ObjectBuilder::new()
        .field("consumeTps", double_value(stats.consume_tps))
        .field("diffTotal", stats.total_diff())
        .field("group", group)
        .field("offsetTable", Value::Array(rows))
        .build()
}

/// One row of `consumerProgress` without `-g`.
#[derive(Debug, Clone, Default)]
pub struct GroupSummary {
    pub group: String,
    pub count: usize,
    pub version: i32,
    pub consume_type: Option<ConsumeType>,
    pub message_model: Option<MessageModel>,
    pub tps: i64,
    pub diff_total: i64,
}

pub fn summary_header() -> String {
    format!(
        "{:<64}  {:<6}  {:<24} {:<5}  {:<14}  {:<7}  {}",
        "#Group", "#Count", "#Version", "#Type", "#Model", "#TPS", "#Diff Total"
    )
}

pub fn summary_row(g: &GroupSummary) -> String {
    let online = g.count > 0;
    let version = if online {
        version_desc(g.version)
    } else {
        "OFFLINE".into()
    };
    let ty = match (online, g.consume_type) {
        (false, _) => "",
        (true, Some(ConsumeType::ConsumeActively)) => "PULL",
        (true, _) => "PUSH",
    };
    let model = match (online, g.consume_type, g.message_model) {
        (true, Some(ConsumeType::ConsumePassively), Some(mm)) => mm.name(),
        _ => "",
    };
    format!(
        "{:<64}  {:<6}  {:<24} {:<5}  {:<14}  {:<7}  {}",
        front(&g.group, 64),
        g.count,
        version,
        ty,
        model,
        g.tps,
        g.diff_total
    )
}

/// Which client holds each queue, from the consumers' running info (`mqTable` keys).
async fn queue_owners(ctx: &Ctx, group: &str, out: &mut Out) -> BTreeMap<MessageQueue, String> {
    let mut owners = BTreeMap::new();
    let cc = match ctx.examine_consumer_connection(group).await {
        Ok(Ok(cc)) => cc,
        Ok(Err(e)) => {
            out.warn(describe(Role::Broker, &e));
            return owners;
        }
        Err(e) => {
            out.warn(e.message());
            return owners;
        }
    };
    for conn in &cc.connection_set {
        match running_info(ctx, None, group, &conn.client_id, false).await {
            Ok(info) => {
                let ip = conn
                    .client_id
                    .split('@')
                    .next()
                    .unwrap_or_default()
                    .to_string();
                for mq in running_info_queues(&info) {
                    owners.insert(mq, ip.clone());
                }
            }
            Err(e) => out.warn(e.message()),
        }
    }
    owners
}

pub async fn consumer_progress(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    if let Some(group) = m.get("groupName") {
        let stats = ctx.examine_consume_stats(group, m.get("topicName")).await?;
        let show_ip = m
            .get("showClientIP")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let owners = if show_ip {
            Some(queue_owners(ctx, group, out).await)
        } else {
            None
        };
        out.raw(progress_text(&stats, owners.as_ref()));
        out.json(consume_stats_value(group, &stats));
        return Ok(());
    }
    ctx.require_namesrv()?;
    let topics = ctx.admin.all_topics().await.ns()?;
    out.line(summary_header());
    let mut rows = Vec::new();
    for topic in &topics {
        let Some(group) = topic.strip_prefix("%RETRY%") else {
            continue;
        };
        let mut g = GroupSummary {
            group: group.to_string(),
            ..Default::default()
        };
        if let Ok(stats) = ctx.examine_consume_stats(group, None).await {
            g.tps = stats.consume_tps as i64;
            g.diff_total = stats.total_diff();
        }
        if let Ok(Ok(cc)) = ctx.examine_consumer_connection(group).await {
            g.count = cc.connection_set.len();
            g.version = cc
                .connection_set
                .iter()
                .map(|c| c.version)
                .min()
                .unwrap_or(0);
            g.consume_type = cc.consume_type;
            g.message_model = cc.message_model;
        }
        out.line(summary_row(&g));
        rows.push(
            ObjectBuilder::new()
                .field(
                    "consumeType",
                    g.consume_type.map(|t| t.name()).unwrap_or(""),
                )
                .field("count", g.count as i64)
                .field("diffTotal", g.diff_total)
                .field("group", g.group.as_str())
                .field(
                    "messageModel",
                    g.message_model.map(|t| t.name()).unwrap_or(""),
                )
                .field("tps", g.tps)
                .field(
                    "version",
                    if g.count > 0 {
                        version_desc(g.version)
                    } else {
                        "OFFLINE".into()
                    },
                )
                .build(),
        );
    }
    out.json(
        ObjectBuilder::new()
            .field("groups", Value::Array(rows))
            .build(),
    );
    Ok(())
}

// ---- connections -----------------------------------------------------------------------------

pub fn connection_value(c: &Connection) -> Value {
    ObjectBuilder::new()
        .field("clientAddr", c.client_addr.as_str())
        .field("clientId", c.client_id.as_str())
        .field("language", c.language.name())
        .field("version", version_desc(c.version))
        .build()
}

/// `consumerConnection` text.
pub fn consumer_connection_text(cc: &ConsumerConnection) -> String {
    let mut s = format!(
        "{:<36} {:<22} {:<10} {}\n",
        "#ClientId", "#ClientAddr", "#Language", "#Version"
    );
    for c in &cc.connection_set {
        s.push_str(&format!(
            "{:<36} {:<22} {:<10} {}\n",
            c.client_id,
            c.client_addr,
            c.language.name(),
            version_desc(c.version)
        ));
    }
    s.push_str("\nBelow is subscription:\n");
    s.push_str(&format!("{:<20} {}\n", "#Topic", "#SubExpression"));
    for sd in cc.subscription_table.values() {
        s.push_str(&format!("{:<20} {}\n", sd.topic, sd.sub_string));
    }
    s.push('\n');
    let name = |n: Option<&'static str>| n.unwrap_or("null");
    s.push_str(&format!(
        "ConsumeType: {}\n",
        name(cc.consume_type.map(|t| t.name()))
    ));
    s.push_str(&format!(
        "MessageModel: {}\n",
        name(cc.message_model.map(|t| t.name()))
    ));
    s.push_str(&format!(
        "ConsumeFromWhere: {}\n",
        name(cc.consume_from_where.map(|t| t.name()))
    ));
    s
}

pub async fn consumer_connection(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let group = m.get("consumerGroup").unwrap_or_default();
    let cc = match m.get("brokerAddr") {
        Some(addr) => ctx.consumer_connection_at(addr, group).await.br()?,
        None => ctx.examine_consumer_connection(group).await?.br()?,
    };
    out.raw(consumer_connection_text(&cc));
    let subs: Vec<Value> = cc
        .subscription_table
        .values()
        .map(|sd| {
            ObjectBuilder::new()
                .field("subExpression", sd.sub_string.as_str())
                .field("topic", sd.topic.as_str())
                .build()
        })
        .collect();
    out.json(
        ObjectBuilder::new()
            .field(
                "connections",
                Value::Array(cc.connection_set.iter().map(connection_value).collect()),
            )
            .field_opt("consumeFromWhere", cc.consume_from_where.map(|t| t.name()))
            .field_opt("consumeType", cc.consume_type.map(|t| t.name()))
            .field("group", group)
            .field_opt("messageModel", cc.message_model.map(|t| t.name()))
            .field("subscriptions", Value::Array(subs))
            .build(),
    );
    Ok(())
}

pub fn producer_connection_text(conns: &[Connection]) -> String {
    let mut s = String::new();
    for (i, c) in conns.iter().enumerate() {
        s.push_str(&format!(
            "{:04}  {:<32} {:<22} {:<8} {}\n",
            i + 1,
            c.client_id,
            c.client_addr,
            c.language.name(),
            version_desc(c.version)
        ));
    }
    s
}

pub async fn producer_connection(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let group = m.get("producerGroup").unwrap_or_default();
    let topic = m.get("topic").unwrap_or_default();
    let route = ctx.route(topic).await?;
    let addr = route
        .broker_datas
        .iter()
        .find_map(select_addr)
        .ok_or_else(|| AdminError::failed(format!("the route of topic {topic} has no broker")))?;
    let pc = ctx.producer_connection_at(&addr, group).await?;
    if pc.connection_set.is_empty() {
        return Err(AdminError::failed(format!(
            "broker {addr} has no connection of producer group {group}"
        )));
    }
    out.raw(producer_connection_text(&pc.connection_set));
    out.json(
        ObjectBuilder::new()
            .field(
                "connections",
                Value::Array(pc.connection_set.iter().map(connection_value).collect()),
            )
            .field("group", group)
            .build(),
    );
    Ok(())
}

// ---- consumerStatus --------------------------------------------------------------------------

/// `GET_CONSUMER_RUNNING_INFO` (307) through a broker of the group (or `broker`).
async fn running_info(
    ctx: &Ctx,
    broker: Option<&str>,
    group: &str,
    client_id: &str,
    jstack: bool,
) -> AResult<Value> {
    let addr = match broker {
        Some(a) => a.to_string(),
        None => {
            let route = ctx.route(&retry_topic(group)).await?;
            route
                .broker_datas
                .iter()
                .find_map(select_addr)
                .ok_or_else(|| {
                    AdminError::failed(format!("the route of {} has no broker", retry_topic(group)))
                })?
        }
    };
    let header = GetConsumerRunningInfoRequestHeader {
        consumer_group: group.to_string(),
        client_id: client_id.to_string(),
        jstack_enable: jstack,
        ..Default::default()
    };
    let code = RequestCode::GetConsumerRunningInfo;
    let req = RemotingCommand::request(code.code(), 0).with_header(&header);
    let resp = ctx.call(&addr, req).await.br()?;
    json::parse(&resp.body).map_err(|e| {
        Ctx::bad_body(
            Role::Broker,
            &addr,
            code,
            format!("ConsumerRunningInfo of {client_id}: {e}"),
        )
    })
}

/// The queues a consumer reports holding (`mqTable` keys).
pub fn running_info_queues(info: &Value) -> Vec<MessageQueue> {
    match info.get("mqTable") {
        Some(Value::Object(entries)) => entries
            .iter()
            .filter_map(|(k, _)| MessageQueue::from_json(k, "mqTable").ok())
            .collect(),
        _ => Vec::new(),
    }
}

/// mqadmin's analysis: same subscriptions everywhere, and no queue held twice.
pub fn analyze(infos: &BTreeMap<String, Value>) -> (bool, bool) {
    let subs: Vec<String> = infos
        .values()
        .map(|v| {
            v.get("subscriptionSet")
                .map(|s| s.to_json())
                .unwrap_or_default()
        })
        .collect();
    let same = subs.windows(2).all(|w| w[0] == w[1]);
    let mut seen = std::collections::BTreeSet::new();
    let rebalance_ok = infos
        .values()
        .flat_map(running_info_queues)
        .all(|mq| seen.insert(mq));
    (same, same && rebalance_ok)
}

pub async fn consumer_status(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let group = m.get("consumerGroup").unwrap_or_default();
    let broker = m.get("brokerAddr");
    let jstack = m.has("jstack");
    if let Some(client) = m.get("clientId") {
        let info = running_info(ctx, broker, group, client, jstack).await?;
        out.line(info.to_pretty_json());
        out.json(info);
        return Ok(());
    }
    let cc = match broker {
        Some(addr) => ctx.consumer_connection_at(addr, group).await.br()?,
        None => ctx.examine_consumer_connection(group).await?.br()?,
    };
    let now = now_ms();
    out.line(format!(
        "{:<10} {:<40} {:<20} {}",
        "#Index", "#ClientId", "#Version", "#ConsumerRunningInfoFile"
    ));
    let mut infos = BTreeMap::new();
    let mut rows = Vec::new();
    for (i, conn) in cc.connection_set.iter().enumerate() {
        match running_info(ctx, broker, group, &conn.client_id, jstack).await {
            Ok(info) => {
                let path = format!("{now}/{}", conn.client_id);
                if let Err(e) = std::fs::create_dir_all(now.to_string())
                    .and_then(|_| std::fs::write(&path, info.to_pretty_json()))
                {
                    out.warn(format!("cannot write {path}: {e}"));
                }
                out.line(format!(
                    "{:<10} {:<40} {:<20} {}",
                    i + 1,
                    conn.client_id,
                    version_desc(conn.version),
                    path
                ));
                rows.push(
                    ObjectBuilder::new()
                        .field("clientId", conn.client_id.as_str())
                        .field("file", path.as_str())
                        .field("runningInfo", info.clone())
                        .field("version", version_desc(conn.version))
                        .build(),
                );
                infos.insert(conn.client_id.clone(), info);
            }
            Err(e) => out.warn(e.message()),
        }
    }
    let mut verdict = None;
    if !infos.is_empty() {
        let (same, rebalance_ok) = analyze(&infos);
        if same {
            out.line("\n\nSame subscription in the same group of consumer");
            out.line(format!(
                "\nRebalance {}",
                if rebalance_ok { "OK" } else { "Failed" }
            ));
        } else {
            out.line("\n\nWARN: Different subscription in the same group of consumer!!!");
        }
        verdict = Some((rebalance_ok, same));
    } else if !cc.connection_set.is_empty() {
        return Err(AdminError::failed(format!(
            "no consumer of group {group} reported its running info"
        )));
    }
    out.json(
        ObjectBuilder::new()
            .field("clients", Value::Array(rows))
            .field("group", group)
            .field_opt("rebalanceOk", verdict.map(|v| v.0))
            .field_opt("sameSubscription", verdict.map(|v| v.1))
            .build(),
    );
    Ok(())
}

// ---- resetOffsetByTime -----------------------------------------------------------------------

async fn search_offset(
    ctx: &Ctx,
    addr: &str,
    topic: &str,
    queue_id: i32,
    timestamp: i64,
) -> AResult<i64> {
    let header = SearchOffsetRequestHeader {
        topic: topic.into(),
        queue_id,
        timestamp,
        ..Default::default()
    };
    let code = RequestCode::SearchOffsetByTimestamp;
    let resp = ctx
        .call(
            addr,
            RemotingCommand::request(code.code(), 0).with_header(&header),
        )
        .await
        .br()?;
    resp.ext_fields
        .get("offset")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| Ctx::bad_body(Role::Broker, addr, code, "no offset in the response"))
}

async fn update_offset(
    ctx: &Ctx,
    addr: &str,
    group: &str,
    topic: &str,
    queue_id: i32,
    offset: i64,
) -> AResult<()> {
    let header = UpdateConsumerOffsetRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        commit_offset: offset,
        ..Default::default()
    };
    let req =
        RemotingCommand::request(RequestCode::UpdateConsumerOffset.code(), 0).with_header(&header);
    ctx.call(addr, req).await.br().map(|_| ())
}

async fn invoke_reset(
    ctx: &Ctx,
    addr: &str,
    header: &ResetOffsetRequestHeader,
) -> Result<BTreeMap<MessageQueue, i64>, ClientError> {
    let code = RequestCode::InvokeBrokerToResetOffset;
    let resp = ctx
        .call(
            addr,
            RemotingCommand::request(code.code(), 0).with_header(header),
        )
        .await?;
    if resp.body.is_empty() {
        return Ok(BTreeMap::new());
    }
    ResetOffsetBody::decode(&resp.body)
        .map(|b| b.offset_table)
        .map_err(|e| ClientError::Protocol {
            addr: addr.to_string(),
            request_code: code.code(),
            reason: e.to_string(),
        })
}

pub fn reset_table(rows: &BTreeMap<MessageQueue, i64>) -> String {
    let mut s = format!(
        "{:<40}  {:<40}  {:<40}\n",
        "#brokerName", "#queueId", "#offset"
    );
    for (mq, off) in rows {
        s.push_str(&format!(
            "{:<40}  {:<40}  {:<40}\n",
            front(&mq.broker_name, 32),
            mq.queue_id,
            off
        ));
    }
    s
}

pub async fn reset_offset_by_time(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let group = m.get("group").unwrap_or_default();
    let topic = m.get("topic").unwrap_or_default();
    let ts_text = m.get("timestamp").unwrap_or_default();
    let timestamp = if ts_text == "now" {
        now_ms()
    } else {
        parse_timestamp(ts_text).map_err(AdminError::Usage)?
    };
    let force = m.boolean("force", true);
    let queue: i32 = m.num("queue", -1)?;
    let offset: Option<i64> = match m.get("offset") {
        Some(_) => Some(m.num("offset", 0)?),
        None => None,
    };
    if let (Some(addr), true) = (m.get("broker"), queue >= 0) {
        out.line(format!(
            "start reset consumer offset by specified, group[{group}], topic[{topic}], queueId[{queue}], broker[{addr}], timestamp(string)[{ts_text}], timestamp(long)[{timestamp}]"
        ));
        let target = match offset {
            Some(o) => o,
            None => search_offset(ctx, addr, topic, queue, timestamp).await?,
        };
        out.line(format!("reset consumer offset to {target}"));
        if target > 0 {
            update_offset(ctx, addr, group, topic, queue, target).await?;
            let header = ResetOffsetRequestHeader {
                group: group.into(),
                topic: topic.into(),
                queue_id: queue,
                offset: Some(target),
                timestamp: 0,
                is_force: true,
                ..Default::default()
            };
            invoke_reset(ctx, addr, &header).await.br()?;
        }
        out.json(
            ObjectBuilder::new()
                .field("brokerAddr", addr)
                .field("group", group)
                .field("offset", target)
                .field("queueId", queue)
                .field("topic", topic)
                .build(),
        );
        return Ok(());
    }
    let route = ctx.route(topic).await?;
    let header = ResetOffsetRequestHeader {
        group: group.into(),
        topic: topic.into(),
        queue_id: -1,
        offset: None,
        timestamp,
        is_force: force,
        ..Default::default()
    };
    let mut table = BTreeMap::new();
    for bd in &route.broker_datas {
        let Some(addr) = select_addr(bd) else {
            continue;
        };
        match invoke_reset(ctx, &addr, &header).await {
            Ok(t) => table.extend(t),
            Err(e) if AdminError::is_code(&e, ResponseCode::ConsumerNotOnline) => {
                // No consumer online: rewrite the stored offsets directly, as mqadmin does.
                return reset_offline(ctx, &route, group, topic, timestamp, force, ts_text, out)
                    .await;
            }
            Err(e) => return Err(e).br(),
        }
    }
    out.line(format!(
        "start reset consumer offset by specified, group[{group}], topic[{topic}], force[{force}], timestamp(string)[{ts_text}], timestamp(long)[{timestamp}]"
    ));
    out.raw(reset_table(&table));
    let rows: Vec<Value> = table
        .iter()
        .map(|(mq, o)| {
            ObjectBuilder::new()
                .field("brokerName", mq.broker_name.as_str())
                .field("offset", *o)
                .field("queueId", mq.queue_id)
                .build()
        })
        .collect();
    out.json(
        ObjectBuilder::new()
            .field("force", force)
            .field("group", group)
            .field("offsetTable", Value::Array(rows))
            .field("timestamp", timestamp)
            .field("topic", topic)
            .build(),
    );
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn reset_offline(
    ctx: &Ctx,
    route: &ringmq_remoting::body::route::TopicRouteData,
    group: &str,
    topic: &str,
    timestamp: i64,
    force: bool,
    ts_text: &str,
    out: &mut Out,
) -> AResult<()> {
    out.line(format!(
        "reset consumer offset by specified consumerGroup[{group}], topic[{topic}], force[{force}], timestamp(string)[{ts_text}], timestamp(long)[{timestamp}]"
    ));
    out.line(format!(
        "{:<20}  {:<20}  {:<20}  {:<20}  {:<20}  {:<20}",
        "#brokerName",
        "#queueId",
        "#brokerOffset",
        "#consumerOffset",
        "#timestampOffset",
        "#resetOffset"
    ));
    let mut rows = Vec::new();
    for bd in &route.broker_datas {
        let Some(addr) = bd.broker_addrs.get(&0).cloned() else {
            continue;
        };
        let stats = ctx.consume_stats(&addr, group, Some(topic)).await?;
        for (mq, o) in &stats.offset_table {
            let target = search_offset(ctx, &addr, topic, mq.queue_id, timestamp).await?;
            let mut reset_to = o.consumer_offset;
            if force || target <= o.consumer_offset {
                reset_to = target;
                update_offset(ctx, &addr, group, topic, mq.queue_id, target).await?;
            }
            out.line(format!(
                "{:<20}  {:<20}  {:<20}  {:<20}  {:<20}  {:<20}",
                front(&mq.broker_name, 32),
                mq.queue_id,
                o.broker_offset,
                o.consumer_offset,
                target,
                reset_to
            ));
            rows.push(
                ObjectBuilder::new()
                    .field("brokerName", mq.broker_name.as_str())
                    .field("brokerOffset", o.broker_offset)
                    .field("consumerOffset", o.consumer_offset)
                    .field("queueId", mq.queue_id)
                    .field("resetOffset", reset_to)
                    .field("timestampOffset", target)
                    .build(),
            );
        }
    }
    out.json(
        ObjectBuilder::new()
            .field("force", force)
            .field("group", group)
            .field("rollbackStats", Value::Array(rows))
            .field("timestamp", timestamp)
            .field("topic", topic)
            .build(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringmq_remoting::body::stats::OffsetWrapper;

    #[test]
    fn sub_group_body_and_text() {
        let mut m = Matches::default();
        m.set("groupName", "G1");
        m.set("retryMaxTimes", "3");
        m.set("consumeBroadcastEnable", "true");
        let c = SubGroupConf::from_matches(&m).unwrap();
        let body = c.to_value().to_json();
        assert!(body.starts_with(r#"{"attributes":{},"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":true,"consumeFromMinEnable":false"#), "{body}");
        assert!(body.contains(r#""groupName":"G1","groupRetryPolicy":{"type":"CUSTOMIZED"}"#));
        assert!(body.contains(r#""retryMaxTimes":3,"retryQueueNums":1"#));
        assert!(c.java_string().starts_with("SubscriptionGroupConfig{groupName=G1, consumeEnable=true, consumeFromMinEnable=false, consumeBroadcastEnable=true"));
        m.set("groupRetryPolicy", "not json");
        assert!(SubGroupConf::from_matches(&m).is_err());
    }

    #[test]
    fn progress_table_and_totals() {
        let mut s = ConsumeStats {
            consume_tps: 1.5,
            ..Default::default()
        };
        s.offset_table.insert(
            MessageQueue::new("T1", "broker-a", 0),
            OffsetWrapper {
                broker_offset: 10,
                consumer_offset: 4,
                pull_offset: 6,
                last_timestamp: 0,
            },
        );
        s.offset_table.insert(
            MessageQueue::new("T1", "broker-a", 1),
            OffsetWrapper {
                broker_offset: 3,
                consumer_offset: 3,
                pull_offset: 3,
                last_timestamp: 1_700_000_000_000,
            },
        );
        let text = progress_text(&s, None);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("#Topic"));
        assert!(
            lines[0].ends_with(&format!("{:<20}#LastTime", "#Inflight")),
            "{}",
            lines[0]
        );
        let cols: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            cols,
            vec!["T1", "broker-a", "0", "10", "4", "6", "2", "N/A"]
        );
        assert_eq!(
            &lines[4..],
            &[
                "Consume TPS: 1.50",
                "Consume Diff Total: 6",
                "Consume Inflight Total: 2"
            ]
        );
        let mut ips = BTreeMap::new();
        ips.insert(
            MessageQueue::new("T1", "broker-a", 0),
            "10.0.0.9".to_string(),
        );
        let text = progress_text(&s, Some(&ips));
        assert!(text.lines().nth(1).unwrap().contains("10.0.0.9"));
        assert!(text.lines().nth(2).unwrap().contains("N/A"));
    }

    #[test]
    fn summary_rows() {
        let offline = GroupSummary {
            group: "G0".into(),
            diff_total: 5,
            ..Default::default()
        };
        let row = summary_row(&offline);
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols, vec!["G0", "0", "OFFLINE", "0", "5"]);
        let online = GroupSummary {
            group: "G1".into(),
            count: 2,
            version: 479,
            consume_type: Some(ConsumeType::ConsumePassively),
            message_model: Some(MessageModel::Clustering),
            tps: 3,
            diff_total: 0,
        };
        let row = summary_row(&online);
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cols,
            vec!["G1", "2", "V5_3_3", "PUSH", "CLUSTERING", "3", "0"]
        );
        assert!(summary_header().starts_with("#Group"));
    }

    #[test]
    fn connection_texts() {
        let cc = ConsumerConnection::decode(br#"{"connectionSet":[{"clientAddr":"127.0.0.1:5000","clientId":"127.0.0.1@1#2","language":"JAVA","version":479}],"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","subscriptionTable":{"T1":{"classFilterMode":false,"codeSet":[],"expressionType":"TAG","subString":"*","subVersion":1,"tagsSet":[],"topic":"T1"}}}"#).unwrap();
        let text = consumer_connection_text(&cc);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            format!(
                "{:<36} {:<22} {:<10} #Version",
                "#ClientId", "#ClientAddr", "#Language"
            )
        );
        assert!(lines[1].starts_with("127.0.0.1@1#2"));
        assert!(lines[1].ends_with("JAVA       V5_3_3"), "{}", lines[1]);
        assert_eq!(lines[3], "Below is subscription:");
        assert_eq!(lines[5], format!("{:<20} *", "T1"));
        assert_eq!(lines[7], "ConsumeType: CONSUME_PASSIVELY");
        assert_eq!(lines[9], "ConsumeFromWhere: CONSUME_FROM_LAST_OFFSET");
        let p = producer_connection_text(&cc.connection_set);
        assert!(p.starts_with("0001  127.0.0.1@1#2"), "{p}");
    }

    #[test]
    fn running_info_analysis() {
        let a = json::parse(br#"{"mqTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{}},"subscriptionSet":[{"topic":"T","subString":"*"}]}"#).unwrap();
        let b = json::parse(br#"{"mqTable":{{"brokerName":"b","queueId":1,"topic":"T"}:{}},"subscriptionSet":[{"topic":"T","subString":"*"}]}"#).unwrap();
        let mut infos = BTreeMap::new();
        infos.insert("c1".to_string(), a.clone());
        infos.insert("c2".to_string(), b);
        assert_eq!(analyze(&infos), (true, true));
        infos.insert("c3".to_string(), a);
        assert_eq!(analyze(&infos), (true, false));
        assert_eq!(
            running_info_queues(&infos["c1"]),
            vec![MessageQueue::new("T", "b", 0)]
        );
    }

    #[test]
    fn reset_table_rows() {
        let mut t = BTreeMap::new();
        t.insert(MessageQueue::new("T", "broker-a", 1), 42i64);
        let s = reset_table(&t);
        let cols: Vec<&str> = s.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(cols, vec!["broker-a", "1", "42"]);
    }
}
