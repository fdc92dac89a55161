//! Broker commands: `brokerStatus`, `getBrokerConfig`, `updateBrokerConfig`,
//! `cleanExpiredCQ`, `cleanUnusedTopic`, `deleteExpiredCommitLog`, `brokerConsumeStats`.

use std::collections::BTreeMap;
use std::time::Duration;

use ringmq_remoting::body::route::MASTER_ID;
use ringmq_remoting::body::stats::ConsumeStats;
use ringmq_remoting::json::{self, ObjectBuilder, Value};
use ringmq_remoting::{RemotingCommand, RequestCode};

use super::cli::{opt, req, Cmd, Matches};
use super::ctx::{cluster_addrs, cluster_brokers, Ctx};
use super::fmt::{date_time, front, object, string_map_value};
use super::out::{AResult, AdminError, At, Out, Role};

pub const COMMANDS: &[Cmd] = &[
    Cmd {
        name: "brokerStatus",
        desc: "Print a broker's runtime statistics.",
        opts: &[
            opt("b", "brokerAddr", "broker address"),
            opt("c", "clusterName", "every broker of this cluster"),
        ],
        one_of: &[&["brokerAddr", "clusterName"]],
    },
    Cmd {
        name: "getBrokerConfig",
        desc: "Print the configuration of a broker or of every broker of a cluster.",
        opts: &[
            opt("b", "brokerAddr", "broker address"),
            opt("c", "clusterName", "every broker of this cluster"),
        ],
        one_of: &[&["brokerAddr", "clusterName"]],
    },
    Cmd {
        name: "updateBrokerConfig",
        desc: "Change one configuration key of a broker or of a cluster's brokers.",
        opts: &[
            opt("b", "brokerAddr", "broker address"),
            opt("c", "clusterName", "every master of this cluster"),
            opt("a", "updateAllBroker", "with -c: slaves too (any value)"),
            req("k", "key", "configuration key"),
            req("v", "value", "configuration value"),
        ],
        one_of: &[&["brokerAddr", "clusterName"]],
    },
    Cmd {
        name: "cleanExpiredCQ",
        desc: "Delete ConsumeQueue files whose messages are gone from the CommitLog.",
        opts: &[
            opt("b", "brokerAddr", "broker address"),
            opt(
                "c",
                "cluster",
                "every broker of this cluster (default: all)",
            ),
        ],
        one_of: &[],
    },
    Cmd {
        name: "cleanUnusedTopic",
        desc: "Delete topics that have no ConsumeQueue left.",
        opts: &[
            opt("b", "brokerAddr", "broker address"),
            opt(
                "c",
                "cluster",
                "every broker of this cluster (default: all)",
            ),
        ],
        one_of: &[],
    },
    Cmd {
        name: "deleteExpiredCommitLog",
        desc: "Delete expired CommitLog files now instead of at deleteWhen.",
        opts: &[
            opt("b", "brokerAddr", "broker address"),
            opt(
                "c",
                "cluster",
                "every broker of this cluster (default: all)",
            ),
        ],
        one_of: &[],
    },
    Cmd {
        name: "brokerConsumeStats",
        desc: "Print the consume progress of every group on one broker.",
        opts: &[
            req("b", "brokerAddr", "broker address"),
            opt(
                "t",
                "timeoutMillis",
                "request timeout in ms (default 50000)",
            ),
            opt(
                "l",
                "level",
                "only queues lagging at least this much (default 0)",
            ),
            opt("o", "order", "only ordered topics: true|false"),
        ],
        one_of: &[],
    },
];

/// `brokerStatus` lines of one broker: `key: value` sorted, prefixed by the address when
/// several brokers are printed.
pub fn status_lines(addr: &str, kv: &BTreeMap<String, String>, with_addr: bool) -> String {
    let mut s = String::new();
    for (k, v) in kv {
        if with_addr {
            s.push_str(&format!("{addr:<24} {k:<32}: {v}\n"));
        } else {
            s.push_str(&format!("{k:<32}: {v}\n"));
        }
    }
    s
}

pub async fn broker_status(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let mut all: Vec<(String, Value)> = Vec::new();
    if let Some(addr) = m.get("brokerAddr") {
        let kv = ctx.admin.broker_runtime_info(addr).await.br()?;
        out.raw(status_lines(addr, &kv, false));
        all.push((addr.to_string(), string_map_value(&kv)));
    } else if let Some(cluster) = m.get("clusterName") {
        let addrs = ctx.masters_and_slaves(cluster).await?;
        let mut failures = 0;
        for addr in &addrs {
            match ctx.admin.broker_runtime_info(addr).await {
                Ok(kv) => {
                    out.raw(status_lines(addr, &kv, true));
                    all.push((addr.to_string(), string_map_value(&kv)));
                }
                Err(e) => {
                    failures += 1;
                    out.warn(super::out::describe(Role::Broker, &e));
                }
            }
        }
        if failures > 0 && failures == addrs.len() {
            out.json(object(all));
            return Err(AdminError::failed(format!(
                "no broker of cluster {cluster} answered GET_BROKER_RUNTIME_INFO"
            )));
        }
    }
    out.json(object(all));
    Ok(())
}

/// One broker's block of `getBrokerConfig`: the banner, `key=  value` lines, a blank line.
pub fn config_block(banner: &str, config: &BTreeMap<String, String>) -> String {
    let mut s = format!("============{banner}============\n");
    for (k, v) in config {
        s.push_str(&format!("{k:<50}=  {v}\n"));
    }
    s.push('\n');
    s
}

pub async fn get_broker_config(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let mut all: Vec<(String, Value)> = Vec::new();
    if let Some(addr) = m.get("brokerAddr") {
        let config = ctx.admin.broker_config(addr).await.br()?;
        out.raw(config_block(addr, &config));
        all.push((addr.to_string(), string_map_value(&config)));
    } else if let Some(cluster) = m.get("clusterName") {
        let info = ctx.cluster_info().await?;
        for name in cluster_brokers(&info, cluster)? {
            let Some(bd) = info.broker_addr_table.get(name) else {
                continue;
            };
            let master = bd.broker_addrs.get(&MASTER_ID);
            match master {
                Some(addr) => {
                    let config = ctx.admin.broker_config(addr).await.br()?;
                    out.raw(config_block(&format!("Master: {addr}"), &config));
                    all.push((addr.to_string(), string_map_value(&config)));
                }
                None => out.line("============Master: NO_MASTER============"),
            }
            let master_text = master.map(String::as_str).unwrap_or("NO_MASTER");
            for (id, addr) in bd.broker_addrs.iter().filter(|(id, _)| **id != MASTER_ID) {
                let _ = id;
                let config = ctx.admin.broker_config(addr).await.br()?;
                out.raw(config_block(
                    &format!("My Master: {master_text}=====Slave: {addr}"),
                    &config,
                ));
                all.push((addr.to_string(), string_map_value(&config)));
            }
        }
    }
    out.json(object(all));
    Ok(())
}

/// mqadmin's success line, plus the broker's remark (e.g. "takes effect after restart").
fn update_success_line(addr: &str, remark: Option<&str>) -> String {
    match remark {
        Some(remark) => format!("update broker config success, {addr} ({remark})"),
        None => format!("update broker config success, {addr}"),
    }
}

pub async fn update_broker_config(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let key = m.get("key").unwrap_or_default().to_string();
    let value = m.get("value").unwrap_or_default().to_string();
    if key.is_empty() {
        return Err(AdminError::Usage("-k/--key must not be empty".into()));
    }
    let mut config = BTreeMap::new();
    config.insert(key.clone(), value.clone());
    let mut done = Vec::new();
    if let Some(addr) = m.get("brokerAddr") {
        let remark = ctx.admin.update_broker_config(addr, &config).await.br()?;
        out.line(update_success_line(addr, remark.as_deref()));
        done.push(addr.to_string());
    } else if let Some(cluster) = m.get("clusterName") {
        let addrs = if m.has("updateAllBroker") {
            ctx.masters_and_slaves(cluster).await?
        } else {
            ctx.masters(cluster).await?
        };
        let mut failed = Vec::new();
        for addr in &addrs {
            match ctx.admin.update_broker_config(addr, &config).await {
                Ok(remark) => {
                    out.line(update_success_line(addr, remark.as_deref()));
                    done.push(addr.clone());
                }
                Err(e) => {
                    out.warn(super::out::describe(Role::Broker, &e));
                    failed.push(addr.clone());
                }
            }
        }
        if !failed.is_empty() {
            return Err(AdminError::failed(format!(
                "updating {key} failed on {}",
                failed.join(", ")
            )));
        }
    }
    out.json(
        ObjectBuilder::new()
            .field("brokerAddrs", json::string_array(&done))
            .field("key", key.as_str())
            .field("value", value.as_str())
            .build(),
    );
    Ok(())
}

/// The addresses a clean command goes to: `-b`, else every broker of `-c` (or of all
/// clusters).
async fn clean_targets(ctx: &Ctx, m: &Matches) -> AResult<Vec<String>> {
    if let Some(addr) = m.get("brokerAddr") {
        return Ok(vec![addr.to_string()]);
    }
    let info = ctx.cluster_info().await?;
    match m.get("cluster").filter(|c| !c.is_empty()) {
        Some(c) => cluster_addrs(&info, c),
        None => {
            let mut all = Vec::new();
            for c in info.cluster_addr_table.keys() {
                all.extend(cluster_addrs(&info, c)?);
            }
            Ok(all)
        }
    }
}

async fn clean(ctx: &Ctx, m: &Matches, out: &mut Out, code: RequestCode) -> AResult<()> {
    let targets = clean_targets(ctx, m).await?;
    let mut result = false;
    for addr in &targets {
        ctx.call(addr, RemotingCommand::request(code.code(), 0))
            .await
            .br()?;
        result = true;
    }
    out.line(if result { "success" } else { "false" });
    out.json(
        ObjectBuilder::new()
            .field("brokerAddrs", json::string_array(&targets))
            .field("success", result)
            .build(),
    );
    Ok(())
}

pub async fn clean_expired_cq(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    clean(ctx, m, out, RequestCode::CleanExpiredConsumequeue).await
}

pub async fn clean_unused_topic(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    clean(ctx, m, out, RequestCode::CleanUnusedTopic).await
}

pub async fn delete_expired_commit_log(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    clean(ctx, m, out, RequestCode::DeleteExpiredCommitlog).await
}

/// `ConsumeStatsList` (GET_BROKER_CONSUME_STATS body): group → stats per topic.
#[derive(Debug, Default)]
pub struct ConsumeStatsList {
    pub groups: Vec<(String, Vec<ConsumeStats>)>,
    pub total_diff: i64,
}

pub fn parse_consume_stats_list(body: &[u8]) -> Result<ConsumeStatsList, String> {
    let v = json::parse(body).map_err(|e| e.to_string())?;
    let mut list = ConsumeStatsList {
        total_diff: v.get("totalDiff").and_then(Value::as_i64).unwrap_or(0),
        ..Default::default()
    };
    for entry in v
        .get("consumeStatsList")
        .and_then(Value::as_array)
        .unwrap_or(&[])
    {
        for (k, stats) in entry.as_object().unwrap_or(&[]) {
            let group = k.key_text().unwrap_or_default().to_string();
            let mut parsed = Vec::new();
            for s in stats.as_array().unwrap_or(&[]) {
                // Re-read each element with the body decoder (MessageQueue object keys).
                parsed.push(
                    ConsumeStats::decode(s.to_fastjson().as_bytes())
                        .map_err(|e| format!("group {group}: {e}"))?,
                );
            }
            list.groups.push((group, parsed));
        }
    }
    Ok(list)
}

/// `brokerConsumeStats` text: queues lagging at least `level` that were ever consumed.
pub fn consume_stats_list_text(list: &ConsumeStatsList, level: i64) -> String {
    let mut s = format!(
        "{:<64}  {:<64}  {:<32}  {:<4}  {:<20}  {:<20}  {:<20}  {}\n",
        "#Topic",
        "#Group",
        "#Broker Name",
        "#QID",
        "#Broker Offset",
        "#Consumer Offset",
        "#Diff",
        "#LastTime"
    );
    for (group, stats) in &list.groups {
        for cs in stats {
            for (mq, o) in &cs.offset_table {
                let diff = o.broker_offset - o.consumer_offset;
                if diff < level || o.last_timestamp <= 0 {
                    continue;
                }
                s.push_str(&format!(
                    "{:<64}  {:<64}  {:<32}  {:<4}  {:<20}  {:<20}  {:<20}  {}\n",
                    front(&mq.topic, 64),
                    group,
                    front(&mq.broker_name, 32),
                    mq.queue_id,
                    o.broker_offset,
                    o.consumer_offset,
                    diff,
                    date_time(o.last_timestamp)
                ));
            }
        }
    }
    s.push_str(&format!("\nDiff Total: {}\n", list.total_diff));
    s
}

pub async fn broker_consume_stats(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let addr = m.get("brokerAddr").unwrap_or_default();
    let timeout: u64 = m.num("timeoutMillis", 50_000)?;
    let level: i64 = m.num("level", 0)?;
    let order = m.boolean("order", false);
    let code = RequestCode::GetBrokerConsumeStats;
    let req = RemotingCommand::request(code.code(), 0).with_ext("isOrder", order.to_string());
    let resp = ctx
        .client
        .invoke(addr, req, Duration::from_millis(timeout))
        .await
        .br()?;
    let resp = ringmq_client::transport::expect_success(addr, code.code(), resp).br()?;
    let list = parse_consume_stats_list(&resp.body)
        .map_err(|e| Ctx::bad_body(Role::Broker, addr, code, e))?;
    out.raw(consume_stats_list_text(&list, level));
    let groups: Vec<Value> = list
        .groups
        .iter()
        .map(|(g, stats)| {
            let rows: Vec<Value> = stats
                .iter()
                .flat_map(|cs| cs.offset_table.iter())
                .map(|(mq, o)| {
                    ObjectBuilder::new()
                        .field("brokerName", mq.broker_name.as_str())
                        .field("brokerOffset", o.broker_offset)
                        .field("consumerOffset", o.consumer_offset)
                        .field("lastTimestamp", o.last_timestamp)
                        .field("queueId", mq.queue_id)
                        .field("topic", mq.topic.as_str())
                        .build()
                })
                .collect();
            ObjectBuilder::new()
                .field("group", g.as_str())
                .field("offsets", Value::Array(rows))
                .build()
        })
        .collect();
    out.json(
        ObjectBuilder::new()
            .field("brokerAddr", addr)
            .field("groups", Value::Array(groups))
            .field("totalDiff", list.total_diff)
            .build(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_config_lines() {
        let mut kv = BTreeMap::new();
        kv.insert("putTps".to_string(), "0.0 0.0 0.0".to_string());
        kv.insert("brokerActive".to_string(), "true".to_string());
        let s = status_lines("127.0.0.1:10911", &kv, false);
        assert_eq!(
            s,
            format!(
                "{:<32}: true\n{:<32}: 0.0 0.0 0.0\n",
                "brokerActive", "putTps"
            )
        );
        let s = status_lines("127.0.0.1:10911", &kv, true);
        assert!(s.starts_with("127.0.0.1:10911          brokerActive"));
        let block = config_block("127.0.0.1:10911", &kv);
        assert!(block.starts_with("============127.0.0.1:10911============\n"));
        assert!(block.contains(&format!("{:<50}=  true\n", "brokerActive")));
        assert!(block.ends_with("\n\n"));
    }

    #[test]
    fn consume_stats_list_parses_and_filters() {
        let body = br#"{"brokerAddr":"127.0.0.1:10911","consumeStatsList":[{"G1":[{"consumeTps":0.0,"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T1"}:{"brokerOffset":10,"consumerOffset":4,"lastTimestamp":1700000000000,"pullOffset":4},{"brokerName":"broker-a","queueId":1,"topic":"T1"}:{"brokerOffset":5,"consumerOffset":0,"lastTimestamp":0,"pullOffset":0}}}]}],"totalDiff":11}"#;
        let list = parse_consume_stats_list(body).unwrap();
        assert_eq!(list.groups.len(), 1);
        assert_eq!(list.groups[0].1[0].offset_table.len(), 2);
        let text = consume_stats_list_text(&list, 0);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("#Topic"));
        // Queue 1 was never consumed (lastTimestamp 0): mqadmin skips it.
        assert_eq!(lines.len(), 4, "{text}");
        let cols: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(&cols[..7], &["T1", "G1", "broker-a", "0", "10", "4", "6"]);
        assert_eq!(lines[3], "Diff Total: 11");
        assert_eq!(consume_stats_list_text(&list, 7).lines().count(), 3);
    }
}
