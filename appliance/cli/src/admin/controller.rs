//! Controller commands, with upstream mqadmin's names, options and output:
//! `getControllerMetaData`, `getSyncStateSet`, `electMaster`, `cleanBrokerMetadata`,
//! `getControllerConfig`, `updateControllerConfig`, and `getBrokerEpoch` (asked of the
//! brokers of a broker set or cluster). `-a` takes one controller address or
//! a `;`-separated list; the commands that only the Raft leader answers ask the first
//! controller that responds who leads, then go there (as upstream's admin client does).

use ringmq_remoting::body::controller::{
    BrokerReplicasInfo, ElectMasterResponseBody, EpochEntryCache, ReplicaIdentity,
};
use ringmq_remoting::body::kv::Properties;
use ringmq_remoting::header::controller::*;
use ringmq_remoting::json::{self, ObjectBuilder, Value};
use ringmq_remoting::{RemotingCommand, RequestCode};

use super::cli::{flag, opt, req, Cmd, Matches};
use super::ctx::Ctx;
use super::fmt::object;
use super::namesrv::config_block;
use super::out::{AResult, AdminError, At, Out, Role};

pub const COMMANDS: &[Cmd] = &[
    Cmd {
        name: "getBrokerEpoch",
        desc: "Fetch broker epoch entries.",
        opts: &[
            opt("b", "brokerName", "which broker to fetch"),
            opt("c", "clusterName", "which cluster"),
        ],
        one_of: &[&["brokerName", "clusterName"]],
    },
    Cmd {
        name: "getControllerMetaData",
        desc: "Get controller cluster's metadata.",
        opts: &[req("a", "controllerAddress", "the address of controller")],
        one_of: &[],
    },
    Cmd {
        name: "getSyncStateSet",
        desc: "Fetch syncStateSet for target brokers.",
        opts: &[
            req("a", "controllerAddress", "the address of controller"),
            opt("b", "brokerName", "which broker to fetch"),
            opt("c", "clusterName", "which cluster"),
        ],
        one_of: &[&["brokerName", "clusterName"]],
    },
    Cmd {
        name: "electMaster",
        desc: "Re-elect the specified broker as master.",
        opts: &[
            req("a", "controllerAddress", "The address of controller"),
            req(
                "b",
                "brokerId",
                "The id of the broker which requires to become master",
            ),
            req(
                "bn",
                "brokerName",
                "The broker name of the replicas that require to be manipulated",
            ),
            req("c", "clusterName", "the clusterName of broker"),
        ],
        one_of: &[],
    },
    Cmd {
        name: "cleanBrokerMetadata",
        desc: "Clean metadata of broker on controller.",
        opts: &[
            req("a", "controllerAddress", "The address of controller"),
            opt(
                "b",
                "brokerControllerIdsToClean",
                "The brokerController id list which requires to clean metadata. eg: 1;2;3",
            ),
            req(
                "bn",
                "brokerName",
                "The broker name of the replicas that require to be manipulated",
            ),
            opt("c", "clusterName", "The clusterName of broker"),
            flag(
                "l",
                "cleanLivingBroker",
                "Whether clean up living brokers,default value is false",
            ),
        ],
        one_of: &[],
    },
    Cmd {
        name: "getControllerConfig",
        desc: "Get controller config.",
        opts: &[req(
            "a",
            "controllerAddress",
            "Controller address list, eg: 192.168.0.1:9878;192.168.0.2:9878",
        )],
        one_of: &[],
    },
    Cmd {
        name: "updateControllerConfig",
        desc: "Update controller config.",
        opts: &[
            req(
                "a",
                "controllerAddress",
                "Controller address list, eg: 192.168.0.1:9878;192.168.0.2:9878",
            ),
            req("k", "key", "config key"),
            req("v", "value", "config value"),
        ],
        one_of: &[],
    },
];

fn addresses(m: &Matches) -> Vec<String> {
    m.get("controllerAddress")
        .unwrap_or_default()
        .split(';')
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
        .collect()
}

async fn metadata(ctx: &Ctx, addr: &str) -> AResult<GetMetaDataResponseHeader> {
    let r = ctx
        .call(
            addr,
            RemotingCommand::request(RequestCode::ControllerGetMetadataInfo.code(), 0),
        )
        .await
        .at(Role::Controller)?;
    r.decode_header().map_err(|e| {
        Ctx::bad_body(
            Role::Controller,
            addr,
            RequestCode::ControllerGetMetadataInfo,
            e,
        )
    })
}

/// The leader's address, from the first of `-a` that answers.
async fn leader(ctx: &Ctx, m: &Matches) -> AResult<String> {
    let mut last = AdminError::Usage("-a names no controller".into());
    for addr in addresses(m) {
        match metadata(ctx, &addr).await {
            Ok(meta) => {
                return meta.controller_leader_address.ok_or_else(|| {
                    AdminError::Failed(format!("controller {addr} knows no leader yet; try again"))
                })
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

pub async fn get_controller_meta_data(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let addr = addresses(m).into_iter().next().unwrap_or_default();
    let meta = metadata(ctx, &addr).await?;
    let mut text = format!(
        "\n#ControllerGroup\t{}\n#ControllerLeaderId\t{}\n#ControllerLeaderAddress\t{}",
        meta.group.as_deref().unwrap_or("null"),
        meta.controller_leader_id.as_deref().unwrap_or("null"),
        meta.controller_leader_address.as_deref().unwrap_or("null")
    );
    let peers: Vec<&str> = meta
        .peers
        .as_deref()
        .unwrap_or_default()
        .split(';')
        .filter(|p| !p.is_empty())
        .collect();
    for peer in &peers {
        text.push_str(&format!("\n#Peer:\t{peer}"));
    }
    text.push('\n');
    out.raw(text);
    out.json(
        ObjectBuilder::new()
            .field_opt(
                "controllerLeaderAddress",
                meta.controller_leader_address.as_deref(),
            )
            .field_opt("controllerLeaderId", meta.controller_leader_id.as_deref())
            .field_opt("group", meta.group.as_deref())
            .field("isLeader", meta.is_leader)
            .field("peers", json::string_array(&peers))
            .build(),
    );
    Ok(())
}

fn replica_text(r: &ReplicaIdentity) -> String {
    format!(
        "ReplicaIdentity{{brokerName='{}', brokerId={}, brokerAddress='{}', alive={}}}",
        r.broker_name, r.broker_id, r.broker_address, r.alive
    )
}

/// Upstream's `getSyncStateSet` text for one answer.
pub fn sync_state_text(info: &BrokerReplicasInfo) -> String {
    let mut s = String::new();
    for (name, r) in &info.replicas_info_table {
        s.push_str(&format!(
            "\n#brokerName\t{name}\n#MasterBrokerId\t{}\n#MasterAddr\t{}\n#MasterEpoch\t{}\n#SyncStateSetEpoch\t{}\n#SyncStateSetNums\t{}\n",
            r.master_broker_id.map_or("null".to_string(), |id| id.to_string()),
            r.master_address.as_deref().unwrap_or("null"),
            r.master_epoch,
            r.sync_state_set_epoch,
            r.in_sync_replicas.len()
        ));
        for m in &r.in_sync_replicas {
            s.push_str(&format!("\nInSyncReplica:\t{}\n", replica_text(m)));
        }
        for m in &r.not_in_sync_replicas {
            s.push_str(&format!("\nNotInSyncReplica:\t{}\n", replica_text(m)));
        }
    }
    s
}

pub async fn get_sync_state_set(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let names: Vec<String> = match (m.get("brokerName"), m.get("clusterName")) {
        (Some(b), _) => vec![b.trim().to_string()],
        (None, Some(c)) => {
            let info = ctx.cluster_info().await?;
            info.cluster_addr_table
                .get(c.trim())
                .map(|set| set.iter().cloned().collect())
                .unwrap_or_default()
        }
        (None, None) => Vec::new(),
    };
    if names.is_empty() {
        return Ok(());
    }
    let leader = leader(ctx, m).await?;
    let code = RequestCode::ControllerGetSyncStateData;
    let request = RemotingCommand::request(code.code(), 0)
        .with_body(json::string_array(&names).to_json().into_bytes());
    let r = ctx.call(&leader, request).await.at(Role::Controller)?;
    let info = BrokerReplicasInfo::decode(&r.body)
        .map_err(|e| Ctx::bad_body(Role::Controller, &leader, code, e))?;
    out.raw(sync_state_text(&info));
    out.json(json::parse(&info.encode()).expect("encoded JSON parses"));
    Ok(())
}

pub async fn elect_master(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let broker_id: i64 = m
        .get("brokerId")
        .unwrap_or_default()
        .trim()
        .parse()
        .map_err(|_| AdminError::Usage("-b brokerId must be a number".into()))?;
    let broker_name = m.get("brokerName").unwrap_or_default().trim().to_string();
    let cluster = m.get("clusterName").unwrap_or_default().trim().to_string();
    let leader = leader(ctx, m).await?;
    let code = RequestCode::ControllerElectMaster;
    let request = RemotingCommand::request(code.code(), 0).with_header(&ElectMasterRequestHeader {
        cluster_name: cluster.clone(),
        broker_name: broker_name.clone(),
        broker_id,
        designate_elect: true,
        invoke_time: Some(now_ms()),
    });
    let r = ctx.call(&leader, request).await.at(Role::Controller)?;
    let h: ElectMasterResponseHeader = r
        .decode_header()
        .map_err(|e| Ctx::bad_body(Role::Controller, &leader, code, e))?;
    let body = ElectMasterResponseBody::decode(&r.body)
        .map_err(|e| Ctx::bad_body(Role::Controller, &leader, code, e))?;
    let mut text = format!(
        "\n#ClusterName\t{cluster}\n#BrokerName\t{broker_name}\n#BrokerMasterAddr\t{}\n#MasterEpoch\t{}\n#SyncStateSetEpoch\t{}\n",
        h.master_address.as_deref().unwrap_or("null"),
        h.master_epoch.map_or("null".into(), |e| e.to_string()),
        h.sync_state_set_epoch.map_or("null".into(), |e| e.to_string()),
    );
    if let Some(group) = &body.broker_member_group {
        text.push_str(&format!("\n#BrokerMemberGroup\t{}\n", group.broker_name));
        for (id, addr) in &group.broker_addrs {
            text.push_str(&format!("\t#Broker\t{id}\t{addr}\n"));
        }
    }
    out.raw(text);
    out.json(
        ObjectBuilder::new()
            .field("brokerName", broker_name.as_str())
            .field("clusterName", cluster.as_str())
            .field_opt("masterAddress", h.master_address.as_deref())
            .field_opt("masterBrokerId", h.master_broker_id)
            .field_opt("masterEpoch", h.master_epoch)
            .field_opt("syncStateSetEpoch", h.sync_state_set_epoch)
            .build(),
    );
    Ok(())
}

pub async fn clean_broker_metadata(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let broker_name = m.get("brokerName").unwrap_or_default().trim().to_string();
    let leader = leader(ctx, m).await?;
    let request = RemotingCommand::request(RequestCode::CleanBrokerData.code(), 0).with_header(
        &CleanControllerBrokerDataRequestHeader {
            cluster_name: m.get("clusterName").map(|c| c.trim().to_string()),
            broker_name: broker_name.clone(),
            broker_controller_ids_to_clean: m
                .get("brokerControllerIdsToClean")
                .map(|c| c.trim().to_string()),
            is_clean_living_broker: m.has("cleanLivingBroker"),
            invoke_time: Some(now_ms()),
        },
    );
    ctx.call(&leader, request).await.at(Role::Controller)?;
    out.line(format!(
        "clear broker {broker_name} metadata from controller success! "
    ));
    out.json(
        ObjectBuilder::new()
            .field("brokerName", broker_name.as_str())
            .build(),
    );
    Ok(())
}

pub async fn get_controller_config(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let mut all: Vec<(String, Value)> = Vec::new();
    for addr in addresses(m) {
        let code = RequestCode::GetControllerConfig;
        let r = ctx
            .call(&addr, RemotingCommand::request(code.code(), 0))
            .await
            .at(Role::Controller)?;
        let text = String::from_utf8_lossy(&r.body);
        let props = Properties::parse(&text)
            .map_err(|e| Ctx::bad_body(Role::Controller, &addr, code, e))?;
        let config: std::collections::BTreeMap<String, String> = props
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        out.raw(config_block(&addr, &config));
        all.push((addr.clone(), super::fmt::string_map_value(&config)));
    }
    out.json(object(all));
    Ok(())
}

pub async fn update_controller_config(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let key = m.get("key").unwrap_or_default().trim().to_string();
    let value = m.get("value").unwrap_or_default().trim().to_string();
    let addrs = addresses(m);
    for addr in &addrs {
        let request = RemotingCommand::request(RequestCode::UpdateControllerConfig.code(), 0)
            .with_body(format!("{key}={value}\n").into_bytes());
        ctx.call(addr, request).await.at(Role::Controller)?;
    }
    out.line(format!(
        "update controller config success![{}]\n{key} : {value}",
        addrs.join(", ")
    ));
    out.json(
        ObjectBuilder::new()
            .field("controllerAddrs", json::string_array(&addrs))
            .field("key", key.as_str())
            .field("value", value.as_str())
            .build(),
    );
    Ok(())
}

/// Upstream's `getBrokerEpoch` text for one broker; the last entry ends at the max offset.
pub fn epoch_text(addr: &str, cache: &EpochEntryCache) -> String {
    let mut s = format!(
        "\n#clusterName\t{}\n#brokerName\t{}\n#brokerAddr\t{addr}\n#brokerId\t{}",
        cache.cluster_name, cache.broker_name, cache.broker_id
    );
    let last = cache.epoch_list.len().saturating_sub(1);
    for (i, e) in cache.epoch_list.iter().enumerate() {
        let end = if i == last {
            cache.max_offset
        } else {
            e.end_offset
        };
        s.push_str(&format!(
            "\n#Epoch: EpochEntry{{epoch={}, startOffset={}, endOffset={end}}}",
            e.epoch, e.start_offset
        ));
    }
    s.push('\n');
    s
}

pub async fn get_broker_epoch(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let addrs: Vec<String> = match (m.get("brokerName"), m.get("clusterName")) {
        (Some(name), _) => {
            let info = ctx.cluster_info().await?;
            info.broker_addr_table
                .get(name.trim())
                .map(|b| b.broker_addrs.values().cloned().collect())
                .unwrap_or_default()
        }
        (None, Some(cluster)) => ctx.masters_and_slaves(cluster.trim()).await?,
        (None, None) => Vec::new(),
    };
    let mut all: Vec<(String, Value)> = Vec::new();
    for addr in &addrs {
        let code = RequestCode::GetBrokerEpochCache;
        let r = ctx
            .call(addr, RemotingCommand::request(code.code(), 0))
            .await
            .br()?;
        let cache = EpochEntryCache::decode(&r.body)
            .map_err(|e| Ctx::bad_body(Role::Broker, addr, code, e))?;
        out.raw(epoch_text(addr, &cache));
        all.push((
            addr.clone(),
            json::parse(&cache.encode()).expect("encoded JSON parses"),
        ));
    }
    out.json(object(all));
    Ok(())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_state_text_has_upstream_labels_and_java_to_string_replicas() {
        let info = BrokerReplicasInfo::decode(
            concat!(
                r#"{"replicasInfoTable":{"b":{"inSyncReplicas":[{"alive":true,"brokerAddress":"127.0.0.1:10911","brokerId":1,"brokerName":"b"}],"#,
                r#""masterAddress":"127.0.0.1:10911","masterBrokerId":1,"masterEpoch":2,"syncStateSetEpoch":3,"#,
                r#""notInSyncReplicas":[{"alive":false,"brokerAddress":"127.0.0.1:10912","brokerId":2,"brokerName":"b"}]}}}"#
            )
            .as_bytes(),
        )
        .unwrap();
        let text = sync_state_text(&info);
        assert!(text.starts_with("\n#brokerName\tb\n#MasterBrokerId\t1\n#MasterAddr\t127.0.0.1:10911\n#MasterEpoch\t2\n#SyncStateSetEpoch\t3\n#SyncStateSetNums\t1\n"), "{text}");
        assert!(text.contains("\nInSyncReplica:\tReplicaIdentity{brokerName='b', brokerId=1, brokerAddress='127.0.0.1:10911', alive=true}\n"), "{text}");
        assert!(text.contains("\nNotInSyncReplica:\tReplicaIdentity{brokerName='b', brokerId=2, brokerAddress='127.0.0.1:10912', alive=false}\n"), "{text}");
    }

    #[test]
    fn epoch_text_closes_the_last_entry_at_the_max_offset() {
        let cache = EpochEntryCache::decode(
            br#"{"brokerId":1,"brokerName":"b","clusterName":"C","epochList":[{"epoch":1,"startOffset":0,"endOffset":100},{"epoch":2,"startOffset":100}],"maxOffset":150}"#,
        )
        .unwrap();
        assert_eq!(
            epoch_text("127.0.0.1:10911", &cache),
            "\n#clusterName\tC\n#brokerName\tb\n#brokerAddr\t127.0.0.1:10911\n#brokerId\t1\n#Epoch: EpochEntry{epoch=1, startOffset=0, endOffset=100}\n#Epoch: EpochEntry{epoch=2, startOffset=100, endOffset=150}\n"
        );
    }
}
