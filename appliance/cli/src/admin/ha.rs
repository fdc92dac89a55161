//! `haStatus`: replication as each master sees it (every slave's acknowledged offset and
//! how many bytes it is behind), or as a slave sees its master, from
//! GET_BROKER_HA_STATUS (907). Columns and labels are upstream mqadmin's.

use ringmq_remoting::body::ha::HaRuntimeInfo;
use ringmq_remoting::json::{self, Value};
use ringmq_remoting::{RemotingCommand, RequestCode};

use super::cli::{long_only, opt, Cmd, Matches, Repeat};
use super::ctx::Ctx;
use super::fmt::{human_time, object};
use super::out::{AResult, At, Out, Role};

pub const COMMANDS: &[Cmd] = &[Cmd {
    name: "haStatus",
    desc: "Print replication status: each slave's acknowledged offset and lag behind its master.",
    opts: &[
        opt("b", "brokerAddr", "broker address (master or slave)"),
        opt("c", "clusterName", "every master of this cluster"),
        opt("i", "interval", "repeat every N seconds until interrupted"),
        long_only("rounds", "stop after N repetitions of -i (ringmq)"),
    ],
    one_of: &[&["brokerAddr", "clusterName"]],
}];

/// The text upstream's `HAStatusSubCommand` prints for one broker.
pub fn status_text(addr: &str, info: &HaRuntimeInfo) -> String {
    let mut s = String::new();
    if info.master {
        s.push_str(&format!(
            "\n#MasterAddr\t{addr}\n#MasterCommitLogMaxOffset\t{}\n#SlaveNum\t{}\n#InSyncSlaveNum\t{}\n",
            info.master_commit_log_max_offset,
            info.ha_connection_info.len(),
            info.in_sync_slave_nums
        ));
        s.push_str(&format!(
            "{:<32}  {:<16} {:>16} {:>16} {:>16} {:>16}\n",
            "#SlaveAddr",
            "#SlaveAckOffset",
            "#Diff",
            "#TransferSpeed(KB/s)",
            "#Status",
            "#TransferFromWhere"
        ));
        for c in &info.ha_connection_info {
            s.push_str(&format!(
                "{:<32}  {:<16} {:>16} {:>16.2} {:>16} {:>16}\n",
                c.addr,
                c.slave_ack_offset,
                c.diff,
                c.transferred_byte_in_second as f64 / 1024.0,
                if c.in_sync { "OK" } else { "Fall Behind" },
                c.transfer_from_where
            ));
        }
    } else {
        let c = &info.ha_client_runtime_info;
        s.push_str(&format!(
            "\n#MasterAddr\t{}\n#CommitLogMaxOffset\t{}\n#TransferSpeed(KB/s)\t{:.2}\n\
             #LastReadTime\t{}\n#LastWriteTime\t{}\n#MasterFlushOffset\t{}\n",
            c.master_addr.as_deref().unwrap_or("null"),
            c.max_offset,
            c.transferred_byte_in_second as f64 / 1024.0,
            human_time(c.last_read_timestamp),
            human_time(c.last_write_timestamp),
            c.master_flush_offset
        ));
    }
    s
}

async fn fetch(ctx: &Ctx, addr: &str) -> AResult<HaRuntimeInfo> {
    let code = RequestCode::GetBrokerHaStatus;
    let resp = ctx
        .call(addr, RemotingCommand::request(code.code(), 0))
        .await
        .br()?;
    HaRuntimeInfo::decode(&resp.body).map_err(|e| Ctx::bad_body(Role::Broker, addr, code, e))
}

pub async fn ha_status(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let mut repeat = Repeat::from_matches(m, 3)?;
    loop {
        let addrs = match (m.get("brokerAddr"), m.get("clusterName")) {
            (Some(addr), _) => vec![addr.trim().to_string()],
            (None, Some(cluster)) => ctx.masters(cluster.trim()).await?,
            (None, None) => Vec::new(),
        };
        let mut all: Vec<(String, Value)> = Vec::new();
        for addr in &addrs {
            let info = fetch(ctx, addr).await?;
            out.raw(status_text(addr, &info));
            let doc = json::parse(info.encode().as_bytes()).expect("encoded JSON parses");
            all.push((addr.clone(), doc));
        }
        out.json(object(all));
        if !repeat.another_round() {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringmq_remoting::body::ha::{HaClientRuntimeInfo, HaConnectionRuntimeInfo};

    #[test]
    fn master_text_has_upstream_labels_and_a_row_per_slave() {
        let info = HaRuntimeInfo {
            master: true,
            master_commit_log_max_offset: 5120,
            in_sync_slave_nums: 1,
            ha_connection_info: vec![HaConnectionRuntimeInfo {
                addr: "127.0.0.1:51234".into(),
                slave_ack_offset: 4096,
                diff: 1024,
                in_sync: true,
                transferred_byte_in_second: 2048,
                transfer_from_where: 0,
            }],
            ..Default::default()
        };
        let text = status_text("127.0.0.1:10911", &info);
        assert!(text.contains("#MasterAddr\t127.0.0.1:10911\n#MasterCommitLogMaxOffset\t5120\n#SlaveNum\t1\n#InSyncSlaveNum\t1\n"), "{text}");
        let row = text.lines().last().unwrap();
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols, ["127.0.0.1:51234", "4096", "1024", "2.00", "OK", "0"]);
    }

    #[test]
    fn slave_text_names_its_master() {
        let info = HaRuntimeInfo {
            ha_client_runtime_info: HaClientRuntimeInfo {
                master_addr: Some("127.0.0.1:10912".into()),
                max_offset: 77,
                ..Default::default()
            },
            ..Default::default()
        };
        let text = status_text("127.0.0.1:10921", &info);
        assert!(
            text.contains("#MasterAddr\t127.0.0.1:10912\n#CommitLogMaxOffset\t77\n"),
            "{text}"
        );
    }
}
