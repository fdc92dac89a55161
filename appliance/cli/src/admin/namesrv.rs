//! Name-server commands: `getNamesrvConfig`, `updateNamesrvConfig`, `updateKvConfig`,
//! `deleteKvConfig`, `wipeWritePerm`, `addWritePerm`.

use std::collections::BTreeMap;

use ringmq_remoting::json::{self, ObjectBuilder, Value};
use ringmq_remoting::{RemotingCommand, RequestCode};

use super::cli::{req, Cmd, Matches};
use super::ctx::Ctx;
use super::fmt::{object, string_map_value};
use super::out::{describe, AResult, AdminError, At, Out, Role};

pub const COMMANDS: &[Cmd] = &[
    Cmd {
        name: "getNamesrvConfig",
        desc: "Print the configuration of every name server.",
        opts: &[],
        one_of: &[],
    },
    Cmd {
        name: "updateNamesrvConfig",
        desc: "Change one configuration key on every name server.",
        opts: &[
            req("k", "key", "configuration key"),
            req("v", "value", "configuration value"),
        ],
        one_of: &[],
    },
    Cmd {
        name: "updateKvConfig",
        desc: "Create or update a KV config entry on the name servers.",
        opts: &[
            req("s", "namespace", "namespace"),
            req("k", "key", "key"),
            req("v", "value", "value"),
        ],
        one_of: &[],
    },
    Cmd {
        name: "deleteKvConfig",
        desc: "Delete a KV config entry from the name servers.",
        opts: &[req("s", "namespace", "namespace"), req("k", "key", "key")],
        one_of: &[],
    },
    Cmd {
        name: "wipeWritePerm",
        desc: "Take write permission away from a broker on every name server.",
        opts: &[req("b", "brokerName", "broker name")],
        one_of: &[],
    },
    Cmd {
        name: "addWritePerm",
        desc: "Give write permission back to a broker on every name server.",
        opts: &[req("b", "brokerName", "broker name")],
        one_of: &[],
    },
];

/// One name server's block of `getNamesrvConfig`.
pub fn config_block(addr: &str, config: &BTreeMap<String, String>) -> String {
    let mut s = format!("============{addr}============\n");
    for (k, v) in config {
        s.push_str(&format!("{k:<50}=  {v}\n"));
    }
    s
}

pub async fn get_namesrv_config(ctx: &Ctx, _m: &Matches, out: &mut Out) -> AResult<()> {
    ctx.require_namesrv()?;
    let mut all: Vec<(String, Value)> = Vec::new();
    for addr in &ctx.namesrv {
        let config = ctx.admin.namesrv_config(addr).await.ns()?;
        out.raw(config_block(addr, &config));
        all.push((addr.to_string(), string_map_value(&config)));
    }
    out.json(object(all));
    Ok(())
}

pub async fn update_namesrv_config(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    ctx.require_namesrv()?;
    let key = m.get("key").unwrap_or_default();
    let value = m.get("value").unwrap_or_default();
    let mut config = BTreeMap::new();
    config.insert(key.to_string(), value.to_string());
    for addr in &ctx.namesrv {
        ctx.admin.update_namesrv_config(addr, &config).await.ns()?;
    }
    // mqadmin names the servers only when they came from -n.
    let listed = if m.has("namesrvAddr") {
        java_list(&ctx.namesrv)
    } else {
        String::new()
    };
    out.line(format!(
        "update name server config success!{listed}\n{key} : {value}"
    ));
    out.json(
        ObjectBuilder::new()
            .field("key", key)
            .field("namesrvAddrs", json::string_array(&ctx.namesrv))
            .field("value", value)
            .build(),
    );
    Ok(())
}

/// Java `List.toString`: `[a, b]`.
fn java_list(items: &[String]) -> String {
    format!("[{}]", items.join(", "))
}

pub async fn update_kv_config(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    ctx.require_namesrv()?;
    let (ns, key, value) = (
        m.get("namespace").unwrap_or_default(),
        m.get("key").unwrap_or_default(),
        m.get("value").unwrap_or_default(),
    );
    ctx.admin.kv_put(ns, key, value).await.ns()?;
    out.line("create or update kv config to namespace success.");
    out.json(
        ObjectBuilder::new()
            .field("key", key)
            .field("namespace", ns)
            .field("value", value)
            .build(),
    );
    Ok(())
}

pub async fn delete_kv_config(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    ctx.require_namesrv()?;
    let (ns, key) = (
        m.get("namespace").unwrap_or_default(),
        m.get("key").unwrap_or_default(),
    );
    ctx.admin.kv_delete(ns, key).await.ns()?;
    out.line("delete kv config from namespace success.");
    out.json(
        ObjectBuilder::new()
            .field("key", key)
            .field("namespace", ns)
            .build(),
    );
    Ok(())
}

async fn write_perm(ctx: &Ctx, m: &Matches, out: &mut Out, add: bool) -> AResult<()> {
    ctx.require_namesrv()?;
    let broker = m.get("brokerName").unwrap_or_default();
    let (code, count_key, verb) = if add {
        (RequestCode::AddWritePermOfBroker, "addTopicCount", "add")
    } else {
        (RequestCode::WipeWritePermOfBroker, "wipeTopicCount", "wipe")
    };
    let mut results = Vec::new();
    let mut failures = 0;
    for addr in &ctx.namesrv {
        let req = RemotingCommand::request(code.code(), 0).with_ext("brokerName", broker);
        match ctx.call(addr, req).await {
            Ok(resp) => {
                let n: i64 = resp
                    .ext_fields
                    .get(count_key)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                out.line(format!(
                    "{verb} write perm of broker[{broker}] in name server[{addr}] OK, {n}"
                ));
                results.push(
                    ObjectBuilder::new()
                        .field("namesrvAddr", addr.as_str())
                        .field("topicCount", n)
                        .build(),
                );
            }
            Err(e) => {
                failures += 1;
                out.line(format!(
                    "{verb} write perm of broker[{broker}] in name server[{addr}] Failed"
                ));
                out.warn(describe(Role::Namesrv, &e));
                results.push(
                    ObjectBuilder::new()
                        .field("error", describe(Role::Namesrv, &e))
                        .field("namesrvAddr", addr.as_str())
                        .build(),
                );
            }
        }
    }
    out.json(
        ObjectBuilder::new()
            .field("brokerName", broker)
            .field("results", Value::Array(results))
            .build(),
    );
    if failures > 0 {
        return Err(AdminError::failed(format!(
            "{verb} write perm of broker {broker} failed on {failures} of {} name servers",
            ctx.namesrv.len()
        )));
    }
    Ok(())
}

pub async fn wipe_write_perm(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    write_perm(ctx, m, out, false).await
}

pub async fn add_write_perm(ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    write_perm(ctx, m, out, true).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namesrv_config_block() {
        let mut c = BTreeMap::new();
        c.insert("listenPort".to_string(), "9876".to_string());
        let s = config_block("127.0.0.1:9876", &c);
        assert_eq!(
            s,
            format!(
                "============127.0.0.1:9876============\n{:<50}=  9876\n",
                "listenPort"
            )
        );
        assert_eq!(java_list(&["a:1".into(), "b:2".into()]), "[a:1, b:2]");
    }
}
