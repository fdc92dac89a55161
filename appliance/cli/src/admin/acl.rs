//! The plain ACL commands: `updateAclConfig`, `deleteAclConfig`, `updateGlobalWhiteAddr`,
//! `clusterAclConfigVersion` and `getAclConfig`, with upstream's option letters and the
//! lines upstream prints. `-c` reaches every master and slave of the cluster for the
//! changes (each broker keeps its own files) and the masters for the two queries.

use ringmq_remoting::body::acl::BrokerClusterAclConfig;
use ringmq_remoting::header::{
    CreateAccessConfigRequestHeader, DeleteAccessConfigRequestHeader,
    GetBrokerAclConfigResponseHeader, UpdateGlobalWhiteAddrsConfigRequestHeader,
};
use ringmq_remoting::json::{self, string_array, ObjectBuilder, Value};
use ringmq_remoting::{RemotingCommand, RequestCode};

use super::cli::{opt, req, Cmd, Matches, Opt};
use super::ctx::Ctx;
use super::fmt::{date_time, object};
use super::out::{AResult, AdminError, At, Out, Role};

const BROKER_OR_CLUSTER: &[&[&str]] = &[&["brokerAddr", "clusterName"]];

/// The options of the two queries (upstream's help texts, the same for both).
const QUERY_OPTS: &[Opt] = &[
    opt(
        "b",
        "brokerAddr",
        "query acl config version for which broker",
    ),
    opt(
        "c",
        "clusterName",
        "query acl config version for specified cluster",
    ),
];

pub const COMMANDS: &[Cmd] = &[
    Cmd {
        name: "updateAclConfig",
        desc: "Update acl config yaml file in broker.",
        opts: &[
            opt("b", "brokerAddr", "update which broker"),
            opt("c", "clusterName", "update which cluster"),
            req("a", "accessKey", "set accessKey in acl config file"),
            req("s", "secretKey", "set secretKey in acl config file"),
            opt(
                "w",
                "whiteRemoteAddress",
                "set white ip Address for account in acl config file",
            ),
            opt(
                "i",
                "defaultTopicPerm",
                "set default topicPerm in acl config file",
            ),
            opt(
                "u",
                "defaultGroupPerm",
                "set default GroupPerm in acl config file",
            ),
            opt(
                "t",
                "topicPerms",
                "set topicPerms list,eg: topicA=DENY,topicD=SUB",
            ),
            opt(
                "g",
                "groupPerms",
                "set groupPerms list,eg: groupD=DENY,groupD=SUB",
            ),
            opt("m", "admin", "set admin flag in acl config file"),
        ],
        one_of: BROKER_OR_CLUSTER,
    },
    Cmd {
        name: "deleteAclConfig",
        desc: "Delete Acl Config Account in broker.",
        opts: &[
            opt(
                "b",
                "brokerAddr",
                "delete acl config account from which broker",
            ),
            opt(
                "c",
                "clusterName",
                "delete acl config account from which cluster",
            ),
            req("a", "accessKey", "set accessKey in acl config file"),
        ],
        one_of: BROKER_OR_CLUSTER,
    },
    Cmd {
        name: "updateGlobalWhiteAddr",
        desc: "Update global white address for acl Config File in broker.",
        opts: &[
            opt(
                "b",
                "brokerAddr",
                "update global white address to which broker",
            ),
            opt(
                "c",
                "clusterName",
                "update global white address to which cluster",
            ),
            req(
                "g",
                "globalWhiteRemoteAddresses",
                "set globalWhiteRemoteAddress list,eg: 10.10.103.*,192.168.0.*",
            ),
            opt(
                "p",
                "aclFileFullPath",
                "set acl file full path (default: the broker's default ACL file)",
            ),
        ],
        one_of: BROKER_OR_CLUSTER,
    },
    Cmd {
        name: "clusterAclConfigVersion",
        desc: "List all of acl config version information in cluster",
        opts: QUERY_OPTS,
        one_of: BROKER_OR_CLUSTER,
    },
    Cmd {
        name: "getAclConfig",
        desc: "List all of acl config information in cluster",
        opts: QUERY_OPTS,
        one_of: BROKER_OR_CLUSTER,
    },
];

/// The brokers a command talks to: `-b`, or every broker of `-c` (masters only for the
/// queries).
async fn targets(ctx: &Ctx, m: &Matches, masters_only: bool) -> AResult<Vec<String>> {
    match (m.get("brokerAddr"), m.get("clusterName")) {
        (Some(addr), _) => Ok(vec![addr.trim().to_string()]),
        (None, Some(cluster)) if masters_only => ctx.masters(cluster.trim()).await,
        (None, Some(cluster)) => ctx.masters_and_slaves(cluster.trim()).await,
        (None, None) => Err(AdminError::Usage("-b or -c is required".into())),
    }
}

fn trimmed(m: &Matches, key: &str) -> Option<String> {
    m.get(key).map(|v| v.trim().to_string())
}

/// upstream's `PlainAccessConfig.toString()`, which updateAclConfig prints last.
fn account_text(h: &CreateAccessConfigRequestHeader) -> String {
    let quoted = |v: &Option<String>| match v {
        Some(v) => format!("'{v}'"),
        None => "'null'".to_string(),
    };
    let list = |v: &Option<String>| {
        let items: Vec<&str> = v.as_deref().map_or(Vec::new(), |s| s.split(',').collect());
        format!("[{}]", items.join(", "))
    };
    format!(
        "PlainAccessConfig{{accessKey='{}', whiteRemoteAddress={}, admin={}, defaultTopicPerm={}, defaultGroupPerm={}, topicPerms={}, groupPerms={}}}",
        h.access_key,
        quoted(&h.white_remote_address),
        h.admin.unwrap_or(false),
        quoted(&h.default_topic_perm),
        quoted(&h.default_group_perm),
        list(&h.topic_perms),
        list(&h.group_perms),
    )
}

pub async fn update_acl_config(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    // Boolean.parseBoolean: "true" in any case, anything else false.
    let admin = trimmed(m, "admin").map(|v| v.eq_ignore_ascii_case("true"));
    let header = CreateAccessConfigRequestHeader {
        access_key: trimmed(m, "accessKey").unwrap_or_default(),
        secret_key: trimmed(m, "secretKey"),
        white_remote_address: trimmed(m, "whiteRemoteAddress"),
        admin,
        default_topic_perm: trimmed(m, "defaultTopicPerm"),
        default_group_perm: trimmed(m, "defaultGroupPerm"),
        topic_perms: trimmed(m, "topicPerms"),
        group_perms: trimmed(m, "groupPerms"),
    };
    let code = RequestCode::UpdateAndCreateAclConfig;
    let done = change_each(
        ctx,
        m,
        code,
        &header,
        "create or update plain access config to",
        out,
    )
    .await?;
    out.line(account_text(&header));
    out.json(object([("updated", done)]));
    Ok(())
}

pub async fn delete_acl_config(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let header = DeleteAccessConfigRequestHeader {
        access_key: trimmed(m, "accessKey").unwrap_or_default(),
    };
    let code = RequestCode::DeleteAclConfig;
    let done = change_each(
        ctx,
        m,
        code,
        &header,
        "delete plain access config account from",
        out,
    )
    .await?;
    out.line(format!("account's accessKey is:{}", header.access_key));
    out.json(object([("deleted", done)]));
    Ok(())
}

pub async fn update_global_white_addr(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let header = UpdateGlobalWhiteAddrsConfigRequestHeader {
        global_white_addrs: trimmed(m, "globalWhiteRemoteAddresses").unwrap_or_default(),
        acl_file_full_path: trimmed(m, "aclFileFullPath"),
    };
    let code = RequestCode::UpdateGlobalWhiteAddrsConfig;
    let done = change_each(
        ctx,
        m,
        code,
        &header,
        "update global white remote addresses to",
        out,
    )
    .await?;
    out.json(object([("updated", done)]));
    Ok(())
}

/// Sends one ACL change to every target broker, printing upstream's
/// `<what> <addr> success.` line after each; the addresses changed, as a JSON array.
async fn change_each(
    ctx: &Ctx,
    m: &Matches,
    code: RequestCode,
    header: &impl ringmq_remoting::header::CommandHeader,
    what: &str,
    out: &mut Out,
) -> AResult<Value> {
    let mut done = Vec::new();
    for addr in targets(ctx, m, false).await? {
        let request = RemotingCommand::request(code.code(), 0).with_header(header);
        ctx.call(&addr, request).await.br()?;
        out.line(format!("{what} {addr} success."));
        done.push(Value::from(addr.as_str()));
    }
    Ok(Value::Array(done))
}

/// One row per ACL file of one broker: cluster, broker, address, file, counter, time.
fn version_rows(h: &GetBrokerAclConfigResponseHeader, addr: &str) -> AResult<Vec<[String; 6]>> {
    let all = h.all_acl_file_version.as_deref().unwrap_or("{}");
    let files = json::parse(all.as_bytes())
        .map_err(|e| Ctx::bad_body(Role::Broker, addr, RequestCode::GetBrokerClusterAclInfo, e))?;
    let mut rows = Vec::new();
    for (path, version) in files.as_object().unwrap_or(&[]) {
        let path = path.as_str().unwrap_or_default().to_string();
        let number = |k: &str| version.get(k).and_then(Value::as_i64).unwrap_or(0);
        rows.push([
            h.cluster_name.clone(),
            h.broker_name.clone().unwrap_or_default(),
            h.broker_addr.clone().unwrap_or_else(|| addr.to_string()),
            path,
            number("counter").to_string(),
            date_time(number("timestamp")),
        ]);
    }
    Ok(rows)
}

fn version_line(cols: &[String; 6]) -> String {
    format!(
        "{:<16}  {:<22}  {:<22}  {:<20}  {:<22}  {:<22}",
        cols[0], cols[1], cols[2], cols[3], cols[4], cols[5]
    )
}

pub async fn cluster_acl_config_version(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let by_cluster = m.get("brokerAddr").is_none();
    if by_cluster {
        let header = [
            "#Cluster Name",
            "#Broker Name",
            "#Broker Addr",
            "#AclFilePath",
            "#AclConfigVersionNum",
            "#AclLastUpdateTime",
        ]
        .map(String::from);
        out.line(version_line(&header));
    }
    let mut docs = Vec::new();
    for addr in targets(ctx, m, true).await? {
        let request = RemotingCommand::request(RequestCode::GetBrokerClusterAclInfo.code(), 0);
        let resp = ctx.call(&addr, request).await.br()?;
        let h: GetBrokerAclConfigResponseHeader = resp.decode_header().map_err(|e| {
            Ctx::bad_body(Role::Broker, &addr, RequestCode::GetBrokerClusterAclInfo, e)
        })?;
        for row in version_rows(&h, &addr)? {
            out.line(version_line(&row));
            docs.push(Value::Array(
                row.iter().map(|c| Value::from(c.as_str())).collect(),
            ));
        }
        if !by_cluster {
            out.line(format!(
                "get broker's plain access config version success. Address:{addr} "
            ));
        }
    }
    if by_cluster {
        out.line("get cluster's plain access config version success.");
    }
    out.json(Value::Array(docs));
    Ok(())
}

/// What `getAclConfig` prints for one broker.
pub fn acl_config_text(config: &BrokerClusterAclConfig) -> String {
    let list = |items: &[String]| format!("[{}]", items.join(", "));
    let mut s = format!(
        "\n{:<20}: {}\n\naccounts:\n",
        "globalWhiteRemoteAddresses",
        list(&config.global_white_addrs)
    );
    for a in &config.plain_access_configs {
        let opt = |v: &Option<String>| v.clone().unwrap_or_default();
        for (name, value) in [
            ("accessKey", a.access_key.clone()),
            ("secretKey", opt(&a.secret_key)),
            ("whiteRemoteAddress", opt(&a.white_remote_address)),
            ("admin", a.admin.to_string()),
            ("defaultTopicPerm", opt(&a.default_topic_perm)),
            ("defaultGroupPerm", opt(&a.default_group_perm)),
            ("topicPerms", list(&a.topic_perms)),
            ("groupPerms", list(&a.group_perms)),
        ] {
            s.push_str(&format!("  {name:<18}: {value}\n"));
        }
        s.push('\n');
    }
    s
}

pub async fn get_acl_config(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    let code = RequestCode::GetBrokerClusterAclConfig;
    let mut docs = Vec::new();
    for addr in targets(ctx, m, true).await? {
        let resp = ctx
            .call(&addr, RemotingCommand::request(code.code(), 0))
            .await
            .br()?;
        let config = BrokerClusterAclConfig::decode(&resp.body)
            .map_err(|e| Ctx::bad_body(Role::Broker, &addr, code, e))?;
        out.raw(acl_config_text(&config));
        let accounts = config.plain_access_configs.iter().map(|a| {
            ObjectBuilder::new()
                .field("accessKey", a.access_key.as_str())
                .field("admin", a.admin)
                .field("groupPerms", string_array(&a.group_perms))
                .field("topicPerms", string_array(&a.topic_perms))
                .build()
        });
        docs.push((
            addr.clone(),
            ObjectBuilder::new()
                .field("accounts", Value::Array(accounts.collect()))
                .field("globalWhiteAddrs", string_array(&config.global_white_addrs))
                .build(),
        ));
    }
    out.json(object(docs));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringmq_remoting::body::acl::PlainAccessConfigBody;

    #[test]
    fn update_prints_upstreams_account_text() {
        let h = CreateAccessConfigRequestHeader {
            access_key: "rocketmq3".into(),
            admin: Some(false),
            default_topic_perm: Some("DENY".into()),
            topic_perms: Some("topicA=DENY,topicD=SUB".into()),
            ..Default::default()
        };
        assert_eq!(
            account_text(&h),
            "PlainAccessConfig{accessKey='rocketmq3', whiteRemoteAddress='null', admin=false, defaultTopicPerm='DENY', defaultGroupPerm='null', topicPerms=[topicA=DENY, topicD=SUB], groupPerms=[]}"
        );
    }

    #[test]
    fn version_rows_come_from_every_file() {
        let h = GetBrokerAclConfigResponseHeader {
            version: "{}".into(),
            all_acl_file_version: Some(
                r#"{"/h/conf/plain_acl.yml":{"counter":3,"timestamp":0}}"#.into(),
            ),
            broker_name: Some("broker-a".into()),
            broker_addr: Some("127.0.0.1:10911".into()),
            cluster_name: "DefaultCluster".into(),
        };
        let rows = version_rows(&h, "x").unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0][3], "/h/conf/plain_acl.yml");
        assert_eq!(rows[0][4], "3");
        let line = version_line(&rows[0]);
        assert!(line.starts_with("DefaultCluster    broker-a  "), "{line}");
    }

    #[test]
    fn config_text_lists_each_account_field() {
        let text = acl_config_text(&BrokerClusterAclConfig {
            global_white_addrs: vec!["10.10.103.*".into(), "192.168.0.*".into()],
            plain_access_configs: vec![PlainAccessConfigBody {
                access_key: "RocketMQ".into(),
                admin: true,
                topic_perms: vec!["topicA=DENY".into()],
                ..Default::default()
            }],
        });
        assert!(
            text.contains("globalWhiteRemoteAddresses: [10.10.103.*, 192.168.0.*]\n"),
            "{text}"
        );
        assert!(
            text.contains("\naccounts:\n  accessKey         : RocketMQ\n"),
            "{text}"
        );
        assert!(
            text.contains("  topicPerms        : [topicA=DENY]\n"),
            "{text}"
        );
    }
}
