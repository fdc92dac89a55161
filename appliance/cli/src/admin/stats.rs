//! `statsAll`: per topic and consumer group, the backlog, in/out TPS and the last 24 hours'
//! message counts, from the brokers' `VIEW_BROKER_STATS_DATA` windows.

use ringmq_remoting::body::stats::{BrokerStatsData, BrokerStatsItem};
use ringmq_remoting::json::{ObjectBuilder, Value};
use ringmq_remoting::{RemotingCommand, RequestCode};

use super::cli::{flag, opt, Cmd, Matches};
use super::ctx::Ctx;
use super::fmt::{double_value, front};
use super::out::{AResult, At, Out};

pub const COMMANDS: &[Cmd] = &[Cmd {
    name: "statsAll",
    desc: "Print TPS, backlog and 24-hour counts of every topic and consumer group.",
    opts: &[
        flag(
            "a",
            "activeTopic",
            "only topics with traffic in the last 24 hours",
        ),
        opt("t", "topic", "only this topic"),
    ],
    one_of: &[],
}];

/// mqadmin's `compute24HourSum`: the day window, else the hour's, else the minute's.
pub fn sum_24h(d: &BrokerStatsData) -> i64 {
    let sum = |i: Option<BrokerStatsItem>| i.map(|x| x.sum).unwrap_or(0);
    [sum(d.stats_day), sum(d.stats_hour), sum(d.stats_minute)]
        .into_iter()
        .find(|s| *s != 0)
        .unwrap_or(0)
}

async fn view_stats(ctx: &Ctx, addr: &str, name: &str, key: &str) -> AResult<BrokerStatsData> {
    let code = RequestCode::ViewBrokerStatsData;
    let req = RemotingCommand::request(code.code(), 0)
        .with_ext("statsName", name)
        .with_ext("statsKey", key);
    let resp = ctx.call(addr, req).await.br()?;
    BrokerStatsData::decode(&resp.body)
        .map_err(|e| Ctx::bad_body(super::out::Role::Broker, addr, code, e))
}

pub fn header() -> String {
    format!(
        "{:<64}  {:<64} {:>12} {:>11} {:>11} {:>14} {:>14}",
        "#Topic",
        "#Consumer Group",
        "#Accumulation",
        "#InTPS",
        "#OutTPS",
        "#InMsg24Hour",
        "#OutMsg24Hour"
    )
}

pub fn group_row(
    topic: &str,
    group: &str,
    backlog: i64,
    in_tps: f64,
    out_tps: f64,
    in_24h: i64,
    out_24h: i64,
) -> String {
    format!(
        "{:<64}  {:<64} {:>12} {:>11.2} {:>11.2} {:>14} {:>14}",
        front(topic, 64),
        front(group, 64),
        backlog,
        in_tps,
        out_tps,
        in_24h,
        out_24h
    )
}

pub fn no_consumer_row(topic: &str, in_tps: f64, in_24h: i64) -> String {
    format!(
        "{:<64}  {:<64} {:>12} {:>11.2} {:>11} {:>14} {:>14}",
        front(topic, 64),
        "",
        0,
        in_tps,
        "",
        in_24h,
        "NO_CONSUMER"
    )
}

async fn topic_detail(
    ctx: &Ctx,
    topic: &str,
    active_only: bool,
    out: &mut Out,
    rows: &mut Vec<Value>,
) -> AResult<()> {
    let route = ctx.route(topic).await?;
    let groups = ctx.topic_consume_by_who(topic).await.unwrap_or_default();
    let masters: Vec<String> = route
        .broker_datas
        .iter()
        .filter_map(|b| b.broker_addrs.get(&0).cloned())
        .collect();
    let (mut in_tps, mut in_24h) = (0.0f64, 0i64);
    for addr in &masters {
        if let Ok(d) = view_stats(ctx, addr, "TOPIC_PUT_NUMS", topic).await {
            in_tps += d.stats_minute.map(|m| m.tps).unwrap_or(0.0);
            in_24h += sum_24h(&d);
        }
    }
    if groups.is_empty() {
        if !active_only || in_24h > 0 {
            out.line(no_consumer_row(topic, in_tps, in_24h));
            rows.push(
                ObjectBuilder::new()
                    .field("inMsg24Hour", in_24h)
                    .field("inTps", double_value(in_tps))
                    .field("topic", topic)
                    .build(),
            );
        }
        return Ok(());
    }
    for group in &groups {
        let (mut out_tps, mut out_24h) = (0.0f64, 0i64);
        for addr in &masters {
            if let Ok(d) =
                view_stats(ctx, addr, "GROUP_GET_NUMS", &format!("{topic}@{group}")).await
            {
                out_tps += d.stats_minute.map(|m| m.tps).unwrap_or(0.0);
                out_24h += sum_24h(&d);
            }
        }
        let backlog = ctx
            .examine_consume_stats(group, Some(topic))
            .await
            .map(|s| s.total_diff().max(0))
            .unwrap_or(0);
        if !active_only || in_24h > 0 || out_24h > 0 {
            out.line(group_row(
                topic, group, backlog, in_tps, out_tps, in_24h, out_24h,
            ));
            rows.push(
                ObjectBuilder::new()
                    .field("accumulation", backlog)
                    .field("consumerGroup", group.as_str())
                    .field("inMsg24Hour", in_24h)
                    .field("inTps", double_value(in_tps))
                    .field("outMsg24Hour", out_24h)
                    .field("outTps", double_value(out_tps))
                    .field("topic", topic)
                    .build(),
            );
        }
    }
    Ok(())
}

pub async fn stats_all(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    ctx.require_namesrv()?;
    let topics = ctx.admin.all_topics().await.ns()?;
    out.line(header());
    let active_only = m.has("activeTopic");
    let only = m.get("topic").filter(|t| !t.is_empty());
    let mut rows = Vec::new();
    for topic in &topics {
        if topic.starts_with("%RETRY%") || topic.starts_with("%DLQ%") {
            continue;
        }
        if only.is_some_and(|t| t != topic) {
            continue;
        }
        // Like mqadmin, a topic that cannot be examined is skipped, but said so.
        if let Err(e) = topic_detail(ctx, topic, active_only, out, &mut rows).await {
            out.warn(format!("topic {topic}: {}", e.message()));
        }
    }
    out.json(
        ObjectBuilder::new()
            .field("rows", Value::Array(rows))
            .build(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_prefer_the_longest_window() {
        let item = |sum| {
            Some(BrokerStatsItem {
                sum,
                tps: 0.0,
                avgpt: 0.0,
            })
        };
        assert_eq!(
            sum_24h(&BrokerStatsData {
                stats_minute: item(3),
                stats_hour: item(40),
                stats_day: item(0)
            }),
            40
        );
        assert_eq!(
            sum_24h(&BrokerStatsData {
                stats_minute: item(3),
                stats_hour: None,
                stats_day: None
            }),
            3
        );
        assert_eq!(sum_24h(&BrokerStatsData::default()), 0);
    }

    #[test]
    fn rows_align_with_the_header() {
        let h = header();
        assert!(h.starts_with("#Topic"));
        // "#Accumulation" is one wider than its 12-column field, in mqadmin too.
        assert_eq!(h.len(), group_row("T", "G", 1, 0.5, 0.25, 2, 3).len() + 1);
        let cols: Vec<String> = group_row("T", "G", 1, 0.5, 0.25, 2, 3)
            .split_whitespace()
            .map(String::from)
            .collect();
        assert_eq!(cols, vec!["T", "G", "1", "0.50", "0.25", "2", "3"]);
        assert!(no_consumer_row("T", 0.0, 9)
            .trim_end()
            .ends_with("NO_CONSUMER"));
        assert_eq!(
            group_row("T", "G", 1, 0.5, 0.25, 2, 3).len(),
            no_consumer_row("T", 0.0, 9).len()
        );
    }
}
