//! Cluster commands: `clusterList` (broker table from the name server plus each broker's
//! runtime info) and `clusterRT` (send round trips per broker).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ringmq_client::message::now_ms;
use ringmq_client::{Message, Producer, ProducerConfig};
use ringmq_remoting::body::cluster::ClusterInfo;
use ringmq_remoting::json::{ObjectBuilder, Value};

use super::cli::{flag, long_only, opt, Cmd, Matches, Repeat};
use super::ctx::Ctx;
use super::fmt::{date_time_at_offset, double_value, string_map_value};
use super::out::{AResult, AdminError, Out, Role};

pub const COMMANDS: &[Cmd] = &[
    Cmd {
        name: "clusterList",
        desc: "List the brokers of every cluster with their load.",
        opts: &[
            flag(
                "m",
                "moreStats",
                "print message counts of yesterday and today instead",
            ),
            opt("i", "interval", "repeat every N seconds until interrupted"),
            opt("c", "clusterName", "only this cluster"),
            long_only("rounds", "stop after N repetitions of -i (ringmq)"),
        ],
        one_of: &[],
    },
    Cmd {
        name: "clusterRT",
        desc: "Measure the send round trip to every broker of a cluster.",
        opts: &[
            opt("a", "amount", "messages per broker (default 100)"),
            opt("s", "size", "message size in bytes (default 128)"),
            opt("c", "cluster", "cluster name (default: every cluster)"),
            opt(
                "p",
                "print log",
                "print as tlog lines: true|false (default false)",
            ),
            opt(
                "m",
                "machine room",
                "machine room name for tlog lines (default noname)",
            ),
            opt("i", "interval", "seconds between rounds (default 10)"),
            long_only(
                "rounds",
                "stop after N rounds (ringmq; default: until interrupted)",
            ),
        ],
        one_of: &[],
    },
];

/// One broker address of the cluster table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRow {
    pub cluster: String,
    pub broker_name: String,
    pub broker_id: i64,
    pub addr: String,
}

/// Clusters to show (`-c`, else all, sorted) and their broker addresses in name/id order.
pub fn broker_rows(info: &ClusterInfo, only: Option<&str>) -> Vec<BrokerRow> {
    let clusters: Vec<String> = match only {
        Some(c) if !c.is_empty() => vec![c.to_string()],
        _ => info.cluster_addr_table.keys().cloned().collect(),
    };
    let mut rows = Vec::new();
    for cluster in clusters {
        let Some(names) = info.cluster_addr_table.get(&cluster) else {
            continue;
        };
        for name in names {
            let Some(bd) = info.broker_addr_table.get(name) else {
                continue;
            };
            for (id, addr) in &bd.broker_addrs {
                rows.push(BrokerRow {
                    cluster: cluster.clone(),
                    broker_name: name.clone(),
                    broker_id: *id,
                    addr: addr.clone(),
                });
            }
        }
    }
    rows
}

fn first_number(v: Option<&String>) -> f64 {
    v.and_then(|s| s.split(' ').next())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0.0)
}

/// mqadmin prints a missing runtime key as `null`, and every key as "" when the broker
/// could not be asked at all.
fn kv_text<'a>(kv: Option<&'a BTreeMap<String, String>>, key: &str, missing: &'a str) -> &'a str {
    match kv {
        None => "",
        Some(t) => t.get(key).map(String::as_str).unwrap_or(missing),
    }
}

pub const BASE_HEADER: [&str; 12] = [
    "#Cluster Name",
    "#Broker Name",
    "#BID",
    "#Addr",
    "#Version",
    "#InTPS(LOAD)",
    "#OutTPS(LOAD)",
    "#Timer(Progress)",
    "#PCWait(ms)",
    "#Hour",
    "#SPACE",
    "#ACTIVATED",
];

fn base_line(c: &[String; 12], header: bool) -> String {
    // The header left-aligns #PCWait and #ACTIVATED, the rows right-align them.
    if header {
        format!(
            "{:<22}  {:<22}  {:<4}  {:<22} {:<16}  {:>16}  {:>30}  {:<22}  {:<11}  {:<12}  {:<8}  {:<10}",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11]
        )
    } else {
        format!(
            "{:<22}  {:<22}  {:<4}  {:<22} {:<16}  {:>16}  {:>30}  {:<22}  {:>11}  {:<12}  {:<8}  {:>10}",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11]
        )
    }
}

pub fn base_header() -> String {
    base_line(&BASE_HEADER.map(String::from), true)
}

/// The row of one broker in the default `clusterList` table; `kv` is its runtime info
/// (`None` when it could not be fetched).
pub fn base_row(
    row: &BrokerRow,
    kv: Option<&BTreeMap<String, String>>,
    now: i64,
) -> (String, Value) {
    let get = |k: &str| kv.and_then(|t| t.get(k));
    let tps_in = first_number(get("putTps"));
    let tps_out = first_number(get("getTransferredTps"));
    let num_i = |k: &str| {
        get(k)
            .and_then(|v| v.trim().parse::<i64>().ok())
            .unwrap_or(0)
    };
    let num_f = |k: &str| {
        get(k)
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let version = kv_text(kv, "brokerVersionDesc", "null");
    let in_col = format!(
        "{tps_in:9.2}({},{}ms)",
        kv_text(kv, "sendThreadPoolQueueSize", "null"),
        kv_text(kv, "sendThreadPoolQueueHeadWaitTimeMills", "null")
    );
    let out_col = format!(
        "{tps_out:9.2}({},{}ms|{},{}ms)",
        kv_text(kv, "pullThreadPoolQueueSize", "null"),
        kv_text(kv, "pullThreadPoolQueueHeadWaitTimeMills", "null"),
        kv_text(kv, "ackThreadPoolQueueSize", "N"),
        kv_text(kv, "ackThreadPoolQueueHeadWaitTimeMills", "N")
    );
    let timer = format!(
        "{}-{}({:.1}w, {:.1}, {:.1})",
        num_i("timerReadBehind"),
        num_i("timerOffsetBehind"),
        num_i("timerCongestNum") as f64 / 10000.0,
        num_f("timerEnqueueTps"),
        num_f("timerDequeueTps")
    );
    let hour = match get("earliestMessageTimeStamp").and_then(|v| v.trim().parse::<i64>().ok()) {
        Some(ts) => (now - ts) as f64 / 1000.0 / 60.0 / 60.0,
        None => 0.0,
    };
    let space = num_f("commitLogDiskRatio");
    let active = get("brokerActive")
        .map(|v| v.eq_ignore_ascii_case("true"))
        .unwrap_or(false);
    let pc_wait = kv_text(kv, "pageCacheLockTimeMills", "null");
    let cols = [
        row.cluster.clone(),
        row.broker_name.clone(),
        row.broker_id.to_string(),
        row.addr.clone(),
        version.to_string(),
        in_col,
        out_col,
        timer,
        pc_wait.to_string(),
        format!("{hour:2.2}"),
        format!("{space:.4}"),
        active.to_string(),
    ];
    let json = ObjectBuilder::new()
        .field("addr", row.addr.as_str())
        .field("brokerActive", active)
        .field("brokerId", row.broker_id)
        .field("brokerName", row.broker_name.as_str())
        .field("clusterName", row.cluster.as_str())
        .field("commitLogDiskRatio", double_value(space))
        .field("hour", double_value(hour))
        .field("inTps", double_value(tps_in))
        .field("outTps", double_value(tps_out))
        .field_opt("runtimeInfo", kv.map(string_map_value))
        .field("version", version)
        .build();
    (base_line(&cols, false), json)
}

pub fn more_header() -> String {
    format!(
        "{:<16}  {:<32} {:>14} {:>14} {:>14} {:>14}",
        "#Cluster Name",
        "#Broker Name",
        "#InTotalYest",
        "#OutTotalYest",
        "#InTotalToday",
        "#OutTotalToday"
    )
}

/// A `clusterList -m` row: message counts derived from the daily counters.
pub fn more_row(row: &BrokerRow, kv: Option<&BTreeMap<String, String>>) -> (String, Value) {
    let n = |k: &str| {
        kv.and_then(|t| t.get(k))
            .and_then(|v| v.trim().parse::<i64>().ok())
    };
    let counts = (|| {
        Some((
            n("msgPutTotalTodayMorning")? - n("msgPutTotalYesterdayMorning")?,
            n("msgGetTotalTodayMorning")? - n("msgGetTotalYesterdayMorning")?,
            n("msgPutTotalTodayNow")? - n("msgPutTotalTodayMorning")?,
            n("msgGetTotalTodayNow")? - n("msgGetTotalTodayMorning")?,
        ))
    })()
    .unwrap_or((0, 0, 0, 0));
    let text = format!(
        "{:<16}  {:<32} {:>14} {:>14} {:>14} {:>14}",
        row.cluster, row.broker_name, counts.0, counts.1, counts.2, counts.3
    );
    let json = ObjectBuilder::new()
        .field("addr", row.addr.as_str())
        .field("brokerId", row.broker_id)
        .field("brokerName", row.broker_name.as_str())
        .field("clusterName", row.cluster.as_str())
        .field("inTotalToday", counts.2)
        .field("inTotalYest", counts.0)
        .field("outTotalToday", counts.3)
        .field("outTotalYest", counts.1)
        .build();
    (text, json)
}

pub async fn cluster_list(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let mut repeat = Repeat::from_matches(m, 0)?;
    loop {
        let info = ctx.cluster_info().await?;
        if let Some(c) = m.get("clusterName") {
            super::ctx::cluster_brokers(&info, c)?;
        }
        let rows = broker_rows(&info, m.get("clusterName"));
        let more = m.has("moreStats");
        out.line(if more { more_header() } else { base_header() });
        let mut json_rows = Vec::new();
        for row in &rows {
            let kv = match ctx.admin.broker_runtime_info(&row.addr).await {
                Ok(kv) => Some(kv),
                Err(e) => {
                    out.warn(super::out::describe(Role::Broker, &e));
                    None
                }
            };
            let (text, json) = if more {
                more_row(row, kv.as_ref())
            } else {
                base_row(row, kv.as_ref(), now_ms())
            };
            out.line(text);
            json_rows.push(json);
        }
        out.json(
            ObjectBuilder::new()
                .field("brokers", Value::Array(json_rows))
                .build(),
        );
        if !repeat.another_round() {
            break;
        }
    }
    Ok(())
}

pub async fn cluster_rt(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let amount: u64 = m.num("amount", 100)?;
    let size: usize = m.num("size", 128)?;
    let interval: u64 = m.num("interval", 10)?;
    let tlog = m.boolean("print log", false);
    let room = m.get("machine room").unwrap_or("noname").to_string();
    let rounds: Option<u64> = match m.get("rounds") {
        Some(_) => Some(m.num("rounds", 1)?),
        None => None,
    };
    if amount == 0 {
        return Err(AdminError::Usage("-a/--amount must be at least 1".into()));
    }
    let info = ctx.cluster_info().await?;
    let clusters: Vec<String> = match m.get("cluster") {
        Some(c) => vec![c.to_string()],
        None => info.cluster_addr_table.keys().cloned().collect(),
    };
    let producer = Producer::with_client(
        ctx.client.clone(),
        ProducerConfig {
            group: now_ms().to_string(),
            namesrv_addrs: ctx.namesrv.clone(),
            ..ProducerConfig::default()
        },
    );
    if !tlog {
        out.line(format!(
            "{:<24}  {:<24}  {:<4}  {:<8}  {:<8}",
            "#Cluster Name", "#Broker Name", "#RT", "#successCount", "#failCount"
        ));
    }
    let body = "a".repeat(size);
    let mut round = 0u64;
    loop {
        round += 1;
        let mut json_rows = Vec::new();
        for cluster in &clusters {
            let Some(names) = info.cluster_addr_table.get(cluster) else {
                out.line(format!("cluster [{cluster}] not exist"));
                break;
            };
            for name in names {
                let msg = Message::new(name.clone(), body.clone().into_bytes());
                let (mut ok, mut failed, mut elapsed) = (0u64, 0u64, Duration::ZERO);
                for i in 0..amount {
                    let start = Instant::now();
                    match producer.send(&msg).await {
                        Ok(_) => ok += 1,
                        Err(e) => {
                            failed += 1;
                            if failed == 1 {
                                out.warn(format!(
                                    "send to topic {name} failed: {}",
                                    super::out::describe(Role::Broker, &e)
                                ));
                            }
                        }
                    }
                    if i != 0 {
                        elapsed += start.elapsed();
                    }
                }
                let rt = if amount > 1 {
                    elapsed.as_secs_f64() * 1000.0 / (amount - 1) as f64
                } else {
                    0.0
                };
                if tlog {
                    out.line(format!(
                        "{}|{room}|{cluster}|{name}|{}",
                        date_time_at_offset(now_ms(), 8),
                        rt.round() as i64
                    ));
                } else {
                    out.line(format!(
                        "{:<24}  {:<24}  {:<8}  {:<16}  {:<16}",
                        cluster,
                        name,
                        format!("{rt:.2}"),
                        ok,
                        failed
                    ));
                }
                json_rows.push(
                    ObjectBuilder::new()
                        .field("brokerName", name.as_str())
                        .field("clusterName", cluster.as_str())
                        .field("failCount", failed as i64)
                        .field("rt", double_value(rt))
                        .field("successCount", ok as i64)
                        .build(),
                );
            }
        }
        out.json(
            ObjectBuilder::new()
                .field("brokers", Value::Array(json_rows))
                .build(),
        );
        if rounds.is_some_and(|r| round >= r) {
            break;
        }
        std::thread::sleep(Duration::from_secs(interval));
    }
    producer.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> ClusterInfo {
        ClusterInfo::decode(br#"{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},"brokerName":"broker-a","cluster":"DefaultCluster"}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}"#).unwrap()
    }

    #[test]
    fn rows_follow_cluster_name_and_id() {
        let rows = broker_rows(&info(), None);
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].broker_id, rows[0].addr.as_str()),
            (0, "127.0.0.1:10911")
        );
        assert_eq!(rows[1].broker_id, 1);
        assert!(broker_rows(&info(), Some("Other")).is_empty());
    }

    #[test]
    fn base_table_matches_mqadmin_columns() {
        let header = base_header();
        assert!(header.starts_with("#Cluster Name           #Broker Name            #BID  #Addr                  #Version"), "{header}");
        assert!(header.trim_end().ends_with("#ACTIVATED"));
        let mut kv = BTreeMap::new();
        for (k, v) in [
            ("brokerVersionDesc", "V5_3_3"),
            ("putTps", "12.5 10.0 9.0"),
            ("getTransferredTps", "3.25 1 1"),
            ("sendThreadPoolQueueSize", "0"),
            ("sendThreadPoolQueueHeadWaitTimeMills", "0"),
            ("pullThreadPoolQueueSize", "1"),
            ("pullThreadPoolQueueHeadWaitTimeMills", "2"),
            ("pageCacheLockTimeMills", "0"),
            ("earliestMessageTimeStamp", "1000"),
            ("commitLogDiskRatio", "0.5"),
            ("brokerActive", "true"),
            ("timerCongestNum", "20000"),
        ] {
            kv.insert(k.to_string(), v.to_string());
        }
        let row = &broker_rows(&info(), None)[0];
        let (text, json) = base_row(row, Some(&kv), 1000 + 2 * 3_600_000);
        let cols: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(
            &cols[..5],
            &[
                "DefaultCluster",
                "broker-a",
                "0",
                "127.0.0.1:10911",
                "V5_3_3"
            ]
        );
        assert!(text.contains("    12.50(0,0ms)"), "{text}");
        assert!(text.contains("     3.25(1,2ms|N,Nms)"), "{text}");
        assert!(text.contains("0-0(2.0w, 0.0, 0.0)"), "{text}");
        assert!(text.contains("2.00"), "{text}");
        assert!(text.contains("0.5000"), "{text}");
        assert!(text.trim_end().ends_with("true"));
        assert!(json.to_json().contains(r#""inTps":12.5"#));
        // A broker that could not be asked: empty texts, zeros, not active.
        let (text, _) = base_row(row, None, 0);
        assert!(text.contains("     0.00(,ms)"), "{text}");
        assert!(text.trim_end().ends_with("false"));
        // Missing keys print as null, like Java's String.format of a null.
        let (text, _) = base_row(row, Some(&BTreeMap::new()), 0);
        assert!(text.contains("(null,nullms)"), "{text}");
    }

    #[test]
    fn more_stats_subtract_the_daily_counters() {
        let mut kv = BTreeMap::new();
        for (k, v) in [
            ("msgPutTotalYesterdayMorning", "10"),
            ("msgPutTotalTodayMorning", "25"),
            ("msgPutTotalTodayNow", "40"),
            ("msgGetTotalYesterdayMorning", "1"),
            ("msgGetTotalTodayMorning", "3"),
            ("msgGetTotalTodayNow", "7"),
        ] {
            kv.insert(k.to_string(), v.to_string());
        }
        let row = &broker_rows(&info(), None)[0];
        let (text, _) = more_row(row, Some(&kv));
        let cols: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(
            cols,
            vec!["DefaultCluster", "broker-a", "15", "2", "15", "4"]
        );
        assert!(more_header().starts_with("#Cluster Name     #Broker Name"));
    }
}
