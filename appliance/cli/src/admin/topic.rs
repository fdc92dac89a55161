//! Topic commands: `updateTopic`, `deleteTopic`, `topicList`, `topicRoute`, `topicStatus`,
//! `topicClusterList`, `updateTopicPerm`.

use std::collections::BTreeMap;

use ringmq_remoting::body::route::TopicRouteData;
use ringmq_remoting::body::stats::TopicStatsTable;
use ringmq_remoting::header::CreateTopicRequestHeader;
use ringmq_remoting::json::{self, ObjectBuilder, Value};
use ringmq_remoting::{RemotingCommand, RequestCode};

use super::cli::{flag, opt, req, Cmd, Matches};
use super::ctx::{select_addr, Ctx};
use super::fmt::{front, human_time, java_double_text, java_map, perm_string, string_map_value};
use super::out::{AResult, AdminError, At, Out};

pub const ORDER_TOPIC_CONFIG: &str = "ORDER_TOPIC_CONFIG";

pub const COMMANDS: &[Cmd] = &[
    Cmd {
        name: "updateTopic",
        desc: "Create or update a topic on a broker or on every master of a cluster.",
        opts: &[
            opt("b", "brokerAddr", "broker address to create the topic on"),
            opt("c", "clusterName", "cluster whose masters get the topic"),
            opt(
                "a",
                "attributes",
                "attribute changes, e.g. +message.type=FIFO,-key",
            ),
            req("t", "topic", "topic name"),
            opt("r", "readQueueNums", "read queue count (default 8)"),
            opt("w", "writeQueueNums", "write queue count (default 8)"),
            opt(
                "p",
                "perm",
                "permission: 2 write, 4 read, 6 read+write (default 6)",
            ),
            opt("o", "order", "ordered topic: true|false"),
            opt("u", "unit", "unit topic: true|false"),
            opt("s", "hasUnitSub", "has unit subscription: true|false"),
        ],
        one_of: &[&["brokerAddr", "clusterName"]],
    },
    Cmd {
        name: "deleteTopic",
        desc: "Delete a topic from the masters of a cluster and from the name servers.",
        opts: &[
            req("t", "topic", "topic name"),
            req("c", "clusterName", "cluster to delete the topic from"),
        ],
        one_of: &[],
    },
    Cmd {
        name: "topicList",
        desc: "List the topics the name server knows.",
        opts: &[flag(
            "c",
            "clusterModel",
            "also print each topic's cluster and consumer groups",
        )],
        one_of: &[],
    },
    Cmd {
        name: "topicRoute",
        desc: "Print a topic's route from the name server.",
        opts: &[
            req("t", "topic", "topic name"),
            flag("l", "list", "print the route as a table"),
        ],
        one_of: &[],
    },
    Cmd {
        name: "topicStatus",
        desc: "Print the min/max offset of every queue of a topic.",
        opts: &[
            req("t", "topic", "topic name"),
            opt(
                "c",
                "cluster",
                "cluster name (or lmq parent topic) to look the brokers up by",
            ),
        ],
        one_of: &[],
    },
    Cmd {
        name: "topicClusterList",
        desc: "Print the clusters a topic lives in.",
        opts: &[req("t", "topic", "topic name")],
        one_of: &[],
    },
    Cmd {
        name: "updateTopicPerm",
        desc: "Change a topic's permission on a broker or on every master of a cluster.",
        opts: &[
            opt("b", "brokerAddr", "broker address (a master)"),
            opt("c", "clusterName", "cluster whose masters are changed"),
            req("t", "topic", "topic name"),
            req("p", "perm", "permission: 2 write, 4 read, 6 read+write"),
        ],
        one_of: &[&["brokerAddr", "clusterName"]],
    },
];

/// What `UPDATE_AND_CREATE_TOPIC` carries, printed like Java's `TopicConfig.toString`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConf {
    pub topic_name: String,
    pub read_queue_nums: i32,
    pub write_queue_nums: i32,
    pub perm: i32,
    pub topic_filter_type: String,
    pub topic_sys_flag: i32,
    pub order: bool,
    /// `+key` → value, `-key` → "" (mqadmin's AttributeParser map).
    pub attributes: BTreeMap<String, String>,
}

impl TopicConf {
    pub fn new(topic: &str) -> Self {
        Self {
            topic_name: topic.to_string(),
            read_queue_nums: 8,
            write_queue_nums: 8,
            perm: 6,
            topic_filter_type: "SINGLE_TAG".into(),
            topic_sys_flag: 0,
            order: false,
            attributes: BTreeMap::new(),
        }
    }

    pub fn java_string(&self) -> String {
        format!(
            "TopicConfig [topicName={}, readQueueNums={}, writeQueueNums={}, perm={}, topicFilterType={}, topicSysFlag={}, order={}, attributes={}]",
            self.topic_name,
            self.read_queue_nums,
            self.write_queue_nums,
            perm_string(self.perm),
            self.topic_filter_type,
            self.topic_sys_flag,
            self.order,
            java_map(self.attributes.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        )
    }

    pub fn to_value(&self) -> Value {
        ObjectBuilder::new()
            .field("attributes", string_map_value(&self.attributes))
            .field("order", self.order)
            .field("perm", self.perm)
            .field("readQueueNums", self.read_queue_nums)
            .field("topicFilterType", self.topic_filter_type.as_str())
            .field("topicName", self.topic_name.as_str())
            .field("topicSysFlag", self.topic_sys_flag)
            .field("writeQueueNums", self.write_queue_nums)
            .build()
    }

    fn request(&self) -> RemotingCommand {
        let header = CreateTopicRequestHeader {
            topic: self.topic_name.clone(),
            default_topic: "TBW102".into(),
            read_queue_nums: self.read_queue_nums,
            write_queue_nums: self.write_queue_nums,
            perm: self.perm,
            topic_filter_type: self.topic_filter_type.clone(),
            topic_sys_flag: Some(self.topic_sys_flag),
            order: self.order,
            attributes: Some(attributes_text(&self.attributes)),
            ..Default::default()
        };
        RemotingCommand::request(RequestCode::UpdateAndCreateTopic.code(), 0).with_header(&header)
    }
}

/// mqadmin's `AttributeParser.parseToMap`: `+a=b,+c=d,-e`; `+` needs a value, `-` none.
pub fn parse_attributes(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut map = BTreeMap::new();
    if text.trim().is_empty() {
        return Ok(map);
    }
    let mut seen = std::collections::BTreeSet::new();
    for item in text.split(',') {
        let bad = || format!("attribute {item:?} must look like +key=value or -key");
        let (key, value) = if let Some(rest) = item.strip_prefix('+') {
            let (k, v) = rest.split_once('=').ok_or_else(bad)?;
            if k.is_empty() || v.is_empty() || v.contains('=') {
                return Err(bad());
            }
            (k, v)
        } else if let Some(k) = item.strip_prefix('-') {
            if k.is_empty() || k.contains('=') {
                return Err(bad());
            }
            (k, "")
        } else {
            return Err(bad());
        };
        if !seen.insert(key.to_string()) {
            return Err(format!("attribute {key:?} is given twice"));
        }
        map.insert(format!("{}{key}", &item[..1]), value.to_string());
    }
    Ok(map)
}

/// The header text of an attribute map (`AttributeParser.parseToString`).
pub fn attributes_text(map: &BTreeMap<String, String>) -> String {
    map.iter()
        .map(|(k, v)| {
            if k.starts_with('+') {
                format!("{k}={v}")
            } else {
                k.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Merges `brokerName:queueNum` entries into an existing order conf (`a:4;b:4`).
pub fn merge_order_conf(old: Option<&str>, new: &str) -> String {
    let mut entries: Vec<(String, String)> = Vec::new();
    for part in old.unwrap_or("").split(';').chain(new.split(';')) {
        if let Some((b, n)) = part.split_once(':') {
            match entries.iter_mut().find(|(k, _)| k == b) {
                Some(e) => e.1 = n.to_string(),
                None => entries.push((b.to_string(), n.to_string())),
            }
        }
    }
    entries
        .iter()
        .map(|(b, n)| format!("{b}:{n}"))
        .collect::<Vec<_>>()
        .join(";")
}

async fn create_topic(ctx: &Ctx, addr: &str, conf: &TopicConf) -> AResult<()> {
    ctx.call(addr, conf.request()).await.br().map(|_| ())
}

pub async fn update_topic(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let mut conf = TopicConf::new(m.get("topic").unwrap_or_default());
    conf.read_queue_nums = m.num("readQueueNums", 8)?;
    conf.write_queue_nums = m.num("writeQueueNums", 8)?;
    conf.perm = m.num("perm", 6)?;
    if let Some(a) = m.get("attributes") {
        conf.attributes = parse_attributes(a)?;
    }
    let unit = m.boolean("unit", false);
    let unit_sub = m.boolean("hasUnitSub", false);
    conf.topic_sys_flag = i32::from(unit) | (i32::from(unit_sub) << 1);
    conf.order = m.boolean("order", false);
    let mut written = Vec::new();
    let mut order_conf = None;
    if let Some(addr) = m.get("brokerAddr") {
        create_topic(ctx, addr, &conf).await?;
        written.push(addr.to_string());
        if conf.order {
            let name = ctx.broker_name_of(addr).await?;
            let entry = format!("{name}:{}", conf.write_queue_nums);
            let old = ctx
                .admin
                .kv_get(ORDER_TOPIC_CONFIG, &conf.topic_name)
                .await
                .ns()?;
            let merged = merge_order_conf(old.as_deref(), &entry);
            ctx.admin
                .kv_put(ORDER_TOPIC_CONFIG, &conf.topic_name, &merged)
                .await
                .ns()?;
            out.line(format!(
                "set broker orderConf. isOrder={}, orderConf=[{entry}]",
                conf.order
            ));
            order_conf = Some(merged);
        }
        out.line(format!("create topic to {addr} success."));
    } else if let Some(cluster) = m.get("clusterName") {
        let masters = ctx.masters(cluster).await?;
        if masters.is_empty() {
            return Err(AdminError::failed(format!(
                "cluster {cluster} has no master broker"
            )));
        }
        for addr in &masters {
            create_topic(ctx, addr, &conf).await?;
            out.line(format!("create topic to {addr} success."));
            written.push(addr.clone());
        }
        if conf.order {
            let info = ctx.cluster_info().await?;
            let names = super::ctx::cluster_brokers(&info, cluster)?;
            let entry = names
                .iter()
                .map(|n| format!("{n}:{}", conf.write_queue_nums))
                .collect::<Vec<_>>()
                .join(";");
            ctx.admin
                .kv_put(ORDER_TOPIC_CONFIG, &conf.topic_name, &entry)
                .await
                .ns()?;
            out.line(format!(
                "set cluster orderConf. isOrder={}, orderConf=[{entry}]",
                conf.order
            ));
            order_conf = Some(entry);
        }
    }
    out.line(conf.java_string());
    out.json(
        ObjectBuilder::new()
            .field("brokerAddrs", json::string_array(&written))
            .field_opt("orderConf", order_conf)
            .field("topicConfig", conf.to_value())
            .build(),
    );
    Ok(())
}

pub async fn delete_topic(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let topic = m.get("topic").unwrap_or_default();
    let cluster = m.get("clusterName").unwrap_or_default();
    let masters = ctx.masters(cluster).await?;
    for addr in &masters {
        ctx.admin.delete_topic_in_broker(addr, topic).await.br()?;
    }
    out.line(format!(
        "delete topic [{topic}] from cluster [{cluster}] success."
    ));
    ctx.admin
        .delete_topic_in_namesrv(topic, Some(cluster))
        .await
        .ns()?;
    out.line(format!("delete topic [{topic}] from NameServer success."));
    out.json(
        ObjectBuilder::new()
            .field("brokerAddrs", json::string_array(&masters))
            .field("clusterName", cluster)
            .field("namesrvAddrs", json::string_array(&ctx.namesrv))
            .field("topic", topic)
            .build(),
    );
    Ok(())
}

fn is_retry_or_dlq(topic: &str) -> bool {
    topic.starts_with("%RETRY%") || topic.starts_with("%DLQ%")
}

pub async fn topic_list(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    ctx.require_namesrv()?;
    let topics = ctx.admin.all_topics().await.ns()?;
    if !m.has("clusterModel") {
        for t in &topics {
            out.line(t);
        }
        out.json(
            ObjectBuilder::new()
                .field("topicList", json::string_array(&topics))
                .build(),
        );
        return Ok(());
    }
    let info = ctx.cluster_info().await?;
    out.line(format!(
        "{:<20}  {:<48}  {:<48}",
        "#Cluster Name", "#Topic", "#Consumer Group"
    ));
    let mut rows = Vec::new();
    for topic in topics.iter().filter(|t| !is_retry_or_dlq(t)) {
        // Like mqadmin, a topic whose route or consumers cannot be read still gets a row.
        let mut cluster = String::new();
        let mut groups = Vec::new();
        if let Ok(route) = ctx.route(topic).await {
            if let Some(bd) = route.broker_datas.first() {
                cluster = info
                    .cluster_addr_table
                    .iter()
                    .find(|(_, names)| names.contains(&bd.broker_name))
                    .map(|(c, _)| c.clone())
                    .unwrap_or_default();
            }
            groups = ctx.topic_consume_by_who(topic).await.unwrap_or_default();
        }
        if groups.is_empty() {
            groups.push(String::new());
        }
        for g in groups {
            out.line(format!(
                "{:<20}  {:<64}  {:<64}",
                front(&cluster, 20),
                front(topic, 64),
                front(&g, 64)
            ));
            rows.push(
                ObjectBuilder::new()
                    .field("clusterName", cluster.as_str())
                    .field("consumerGroup", g.as_str())
                    .field("topic", topic.as_str())
                    .build(),
            );
        }
    }
    out.json(
        ObjectBuilder::new()
            .field("rows", Value::Array(rows))
            .build(),
    );
    Ok(())
}

const ROUTE_FORMAT_WIDTHS: [usize; 6] = [45, 32, 50, 10, 11, 5];

fn route_row(cols: [String; 6]) -> String {
    let mut s = String::new();
    for (i, c) in cols.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(&format!("{c:<w$}", w = ROUTE_FORMAT_WIDTHS[i]));
    }
    s
}

/// `topicRoute -l`: one row per broker name, then totals.
pub fn route_table(route: &TopicRouteData) -> String {
    let mut out = String::new();
    out.push_str(&route_row(
        [
            "#ClusterName",
            "#BrokerName",
            "#BrokerAddrs",
            "#ReadQueue",
            "#WriteQueue",
            "#Perm",
        ]
        .map(String::from),
    ));
    out.push('\n');
    let mut brokers: Vec<_> = route.broker_datas.iter().collect();
    brokers.sort_by(|a, b| a.broker_name.cmp(&b.broker_name));
    let (mut total_read, mut total_write) = (0i64, 0i64);
    let mut names = std::collections::BTreeSet::new();
    for q in &route.queue_datas {
        names.insert(q.broker_name.clone());
    }
    for bd in brokers {
        let Some(q) = route
            .queue_datas
            .iter()
            .find(|q| q.broker_name == bd.broker_name)
        else {
            continue;
        };
        total_read += i64::from(q.read_queue_nums);
        total_write += i64::from(q.write_queue_nums);
        let addrs: Vec<(String, &str)> = bd
            .broker_addrs
            .iter()
            .map(|(id, a)| (id.to_string(), a.as_str()))
            .collect();
        out.push_str(&route_row([
            bd.cluster.clone(),
            bd.broker_name.clone(),
            java_map(addrs.iter().map(|(id, a)| (id.as_str(), *a))),
            q.read_queue_nums.to_string(),
            q.write_queue_nums.to_string(),
            q.perm.to_string(),
        ]));
        out.push('\n');
    }
    out.push_str(&"-".repeat(158));
    out.push('\n');
    out.push_str(&route_row([
        "Total:".into(),
        names.len().to_string(),
        String::new(),
        total_read.to_string(),
        total_write.to_string(),
        String::new(),
    ]));
    out.push('\n');
    out
}

pub async fn topic_route(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let topic = m.get("topic").unwrap_or_default();
    let route = ctx.route(topic).await?;
    if m.has("list") {
        out.raw(route_table(&route));
    } else {
        out.line(route.to_value().to_pretty_json());
    }
    out.json(route.to_value());
    Ok(())
}

/// `topicStatus` text: a row per queue, then the put TPS.
pub fn topic_status_text(stats: &TopicStatsTable) -> String {
    let mut out = format!(
        "{:<32}  {:<4}  {:<20}  {:<20}    {}\n",
        "#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"
    );
    for (mq, o) in &stats.offset_table {
        let last = if o.last_update_timestamp > 0 {
            human_time(o.last_update_timestamp)
        } else {
            String::new()
        };
        out.push_str(&format!(
            "{:<32}  {:<4}  {:<20}  {:<20}    {}\n",
            front(&mq.broker_name, 32),
            mq.queue_id,
            o.min_offset,
            o.max_offset,
            last
        ));
    }
    out.push('\n');
    out.push_str(&format!(
        "Topic Put TPS: {}\n",
        java_double_text(stats.topic_put_tps)
    ));
    out
}

pub fn topic_stats_value(topic: &str, stats: &TopicStatsTable) -> Value {
    let rows: Vec<Value> = stats
        .offset_table
        .iter()
        .map(|(mq, o)| {
            ObjectBuilder::new()
                .field("brokerName", mq.broker_name.as_str())
                .field("lastUpdateTimestamp", o.last_update_timestamp)
                .field("maxOffset", o.max_offset)
                .field("minOffset", o.min_offset)
                .field("queueId", mq.queue_id)
                .build()
        })
        .collect();
    ObjectBuilder::new()
        .field("offsetTable", Value::Array(rows))
        .field("topic", topic)
        .field("topicPutTps", super::fmt::double_value(stats.topic_put_tps))
        .build()
}

pub async fn topic_status(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let topic = m.get("topic").unwrap_or_default();
    let stats = match m.get("cluster") {
        None => ctx.examine_topic_stats(topic, topic).await?,
        Some(cluster) => match ctx.examine_topic_stats(topic, cluster).await {
            Ok(s) => s,
            Err(route_err) => {
                // No topic named after the cluster: ask the cluster's brokers directly.
                let info = ctx.cluster_info().await?;
                if !info.cluster_addr_table.contains_key(cluster) {
                    return Err(route_err);
                }
                let mut merged = TopicStatsTable::default();
                for name in super::ctx::cluster_brokers(&info, cluster)? {
                    if let Some(addr) = info.broker_addr_table.get(name).and_then(select_addr) {
                        let t = ctx.topic_stats(&addr, topic).await?;
                        merged.offset_table.extend(t.offset_table);
                        merged.topic_put_tps += t.topic_put_tps;
                    }
                }
                merged
            }
        },
    };
    out.raw(topic_status_text(&stats));
    out.json(topic_stats_value(topic, &stats));
    Ok(())
}

pub async fn topic_cluster_list(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let topic = m.get("topic").unwrap_or_default();
    let info = ctx.cluster_info().await?;
    let route = ctx.route(topic).await?;
    let mut clusters = Vec::new();
    if let Some(bd) = route.broker_datas.first() {
        for (c, names) in &info.cluster_addr_table {
            if names.contains(&bd.broker_name) {
                clusters.push(c.clone());
            }
        }
    }
    for c in &clusters {
        out.line(c);
    }
    out.json(
        ObjectBuilder::new()
            .field("clusters", json::string_array(&clusters))
            .field("topic", topic)
            .build(),
    );
    Ok(())
}

pub async fn update_topic_perm(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let topic = m.get("topic").unwrap_or_default();
    let perm: i32 = m.num("perm", 0)?;
    let route = ctx.route(topic).await?;
    let first = route.queue_datas.first().ok_or_else(|| {
        AdminError::failed(format!("the route of topic {topic} has no queue data"))
    })?;
    let mut conf = TopicConf::new(topic);
    conf.read_queue_nums = first.read_queue_nums;
    conf.write_queue_nums = first.write_queue_nums;
    conf.topic_sys_flag = first.topic_sys_flag;
    conf.perm = perm;
    let json_result = |old: i32, addrs: &[String]| {
        ObjectBuilder::new()
            .field("brokerAddrs", json::string_array(addrs))
            .field("oldPerm", old)
            .field("perm", perm)
            .field("topic", topic)
            .build()
    };
    if let Some(addr) = m.get("brokerAddr") {
        let name = route
            .broker_datas
            .iter()
            .find(|b| b.broker_addrs.get(&0).map(String::as_str) == Some(addr))
            .map(|b| b.broker_name.clone())
            .ok_or_else(|| {
                AdminError::failed(format!(
                    "{addr} is not the master of a broker in the route of topic {topic}"
                ))
            })?;
        let old = route
            .queue_datas
            .iter()
            .find(|q| q.broker_name == name)
            .map(|q| q.perm)
            .unwrap_or(0);
        if old == perm {
            out.line("new perm equals to the old one!");
            out.json(json_result(old, &[]));
            return Ok(());
        }
        create_topic(ctx, addr, &conf).await?;
        out.line(format!(
            "update topic perm from {old} to {perm} in {addr} success."
        ));
        out.line(format!("{}.", conf.java_string()));
        out.json(json_result(old, &[addr.to_string()]));
    } else if let Some(cluster) = m.get("clusterName") {
        let masters = ctx.masters(cluster).await?;
        for addr in &masters {
            create_topic(ctx, addr, &conf).await?;
            out.line(format!(
                "update topic perm from {} to {perm} in {addr} success.",
                first.perm
            ));
        }
        out.json(json_result(first.perm, &masters));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringmq_remoting::body::consumer::MessageQueue;
    use ringmq_remoting::body::stats::TopicOffset;

    #[test]
    fn topic_config_prints_like_java() {
        let mut c = TopicConf::new("T1");
        c.attributes = parse_attributes("+message.type=FIFO").unwrap();
        assert_eq!(
            c.java_string(),
            "TopicConfig [topicName=T1, readQueueNums=8, writeQueueNums=8, perm=RW-, topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false, attributes={+message.type=FIFO}]"
        );
        let req = c.request();
        assert_eq!(req.code, 17);
        assert_eq!(req.ext_fields.get("readQueueNums"), Some("8"));
        assert_eq!(req.ext_fields.get("defaultTopic"), Some("TBW102"));
        assert_eq!(req.ext_fields.get("attributes"), Some("+message.type=FIFO"));
    }

    #[test]
    fn attributes_parse_and_reject() {
        let m = parse_attributes("+a=b,-c").unwrap();
        assert_eq!(attributes_text(&m), "+a=b,-c");
        for bad in ["a=b", "+a", "-c=d", "+=x", "+a=b,+a=c"] {
            assert!(parse_attributes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn order_conf_merges_by_broker() {
        assert_eq!(merge_order_conf(None, "b1:8"), "b1:8");
        assert_eq!(merge_order_conf(Some("b1:4;b2:4"), "b1:8"), "b1:8;b2:4");
    }

    #[test]
    fn route_table_has_java_columns_and_totals() {
        let body = br#"{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"},"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#;
        let route = TopicRouteData::decode(body).unwrap();
        let t = route_table(&route);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("#ClusterName                                  #BrokerName"));
        assert!(lines[1].starts_with("DefaultCluster"));
        assert!(lines[1].contains("{0=127.0.0.1:10911}"));
        assert_eq!(lines[2], "-".repeat(158));
        let total: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(total, vec!["Total:", "1", "4", "4"]);
    }

    #[test]
    fn topic_status_rows() {
        let mut s = TopicStatsTable::default();
        s.offset_table.insert(
            MessageQueue::new("T", "broker-a", 1),
            TopicOffset {
                min_offset: 0,
                max_offset: 7,
                last_update_timestamp: 0,
            },
        );
        s.offset_table.insert(
            MessageQueue::new("T", "broker-a", 0),
            TopicOffset {
                min_offset: 2,
                max_offset: 12,
                last_update_timestamp: 1_700_000_000_000,
            },
        );
        let text = topic_status_text(&s);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "#Broker Name                      #QID  #Min Offset           #Max Offset             #Last Updated");
        assert!(lines[1].starts_with("broker-a                          0     2                     12                      20"), "{}", lines[1]);
        assert_eq!(
            lines[2].trim_end(),
            "broker-a                          1     0                     7"
        );
        assert_eq!(lines[4], "Topic Put TPS: 0.0");
        let v = topic_stats_value("T", &s).to_json();
        assert!(v.contains(r#""maxOffset":12"#), "{v}");
    }
}
