//! `ringmq admin` / `mqadmin`: operator commands with Apache RocketMQ's sub-command names,
//! option letters and long names, printing the columns mqadmin prints (scripts keep
//! parsing them) or, with `--json`, one JSON document per result.
//!
//! `mqadmin` alone (or `mqadmin help`) lists the commands, `mqadmin help <command>` shows
//! a command's options. The name servers come from `-n 'a:9876;b:9876'` or
//! `$NAMESRV_ADDR`. Exit status: 0 done, 1 a server failed or refused (one line on stderr
//! naming it and why), 2 bad command line.
//!
//! One module per family: [`topic`], [`cluster`], [`broker`], [`group`] (consumer and
//! producer groups, offsets), [`message`], [`namesrv`], [`stats`]; [`cli`] parses,
//! [`out`] prints and words errors, [`ctx`] holds the connection and shared lookups.

mod acl;
mod broker;
mod cli;
mod cluster;
mod controller;
mod ctx;
mod fmt;
mod group;
mod ha;
mod message;
mod namesrv;
mod out;
mod stats;
mod topic;

use std::process::ExitCode;

use cli::{Cmd, Matches};
use ctx::Ctx;
use out::{AResult, AdminError, Out};

/// Every command, grouped by family in listing order.
fn commands() -> Vec<&'static Cmd> {
    [
        topic::COMMANDS,
        cluster::COMMANDS,
        acl::COMMANDS,
        broker::COMMANDS,
        group::COMMANDS,
        ha::COMMANDS,
        controller::COMMANDS,
        message::COMMANDS,
        namesrv::COMMANDS,
        stats::COMMANDS,
    ]
    .into_iter()
    .flat_map(|family| family.iter())
    .collect()
}

fn find(name: &str) -> Option<&'static Cmd> {
    commands().into_iter().find(|c| c.name == name)
}

fn command_list() -> String {
    cli::command_list(&commands())
}

async fn dispatch(name: &str, ctx: &Ctx, m: &Matches, out: &mut Out) -> AResult<()> {
    match name {
        "updateTopic" => topic::update_topic(ctx, m, out).await,
        "deleteTopic" => topic::delete_topic(ctx, m, out).await,
        "topicList" => topic::topic_list(ctx, m, out).await,
        "topicRoute" => topic::topic_route(ctx, m, out).await,
        "topicStatus" => topic::topic_status(ctx, m, out).await,
        "topicClusterList" => topic::topic_cluster_list(ctx, m, out).await,
        "updateTopicPerm" => topic::update_topic_perm(ctx, m, out).await,
        "clusterList" => cluster::cluster_list(ctx, m, out).await,
        "clusterRT" => cluster::cluster_rt(ctx, m, out).await,
        "brokerStatus" => broker::broker_status(ctx, m, out).await,
        "getBrokerConfig" => broker::get_broker_config(ctx, m, out).await,
        "updateBrokerConfig" => broker::update_broker_config(ctx, m, out).await,
        "cleanExpiredCQ" => broker::clean_expired_cq(ctx, m, out).await,
        "cleanUnusedTopic" => broker::clean_unused_topic(ctx, m, out).await,
        "deleteExpiredCommitLog" => broker::delete_expired_commit_log(ctx, m, out).await,
        "brokerConsumeStats" => broker::broker_consume_stats(ctx, m, out).await,
        "haStatus" => ha::ha_status(ctx, m, out).await,
        "getBrokerEpoch" => controller::get_broker_epoch(ctx, m, out).await,
        "getControllerMetaData" => controller::get_controller_meta_data(ctx, m, out).await,
        "getSyncStateSet" => controller::get_sync_state_set(ctx, m, out).await,
        "electMaster" => controller::elect_master(ctx, m, out).await,
        "cleanBrokerMetadata" => controller::clean_broker_metadata(ctx, m, out).await,
        "getControllerConfig" => controller::get_controller_config(ctx, m, out).await,
        "updateControllerConfig" => controller::update_controller_config(ctx, m, out).await,
        "updateAclConfig" => acl::update_acl_config(ctx, m, out).await,
        "deleteAclConfig" => acl::delete_acl_config(ctx, m, out).await,
        "updateGlobalWhiteAddr" => acl::update_global_white_addr(ctx, m, out).await,
        "clusterAclConfigVersion" => acl::cluster_acl_config_version(ctx, m, out).await,
        "getAclConfig" => acl::get_acl_config(ctx, m, out).await,
        "updateSubGroup" => group::update_sub_group(ctx, m, out).await,
        "deleteSubGroup" => group::delete_sub_group(ctx, m, out).await,
        "consumerProgress" => group::consumer_progress(ctx, m, out).await,
        "consumerConnection" => group::consumer_connection(ctx, m, out).await,
        "producerConnection" => group::producer_connection(ctx, m, out).await,
        "consumerStatus" => group::consumer_status(ctx, m, out).await,
        "resetOffsetByTime" => group::reset_offset_by_time(ctx, m, out).await,
        "queryMsgById" => message::query_msg_by_id(ctx, m, out).await,
        "queryMsgByKey" => message::query_msg_by_key(ctx, m, out).await,
        "queryMsgByUniqueKey" => message::query_msg_by_unique_key(ctx, m, out).await,
        "queryMsgByOffset" => message::query_msg_by_offset(ctx, m, out).await,
        "printMsg" => message::print_msg(ctx, m, out).await,
        "printMsgByQueue" => message::print_msg_by_queue(ctx, m, out).await,
        "sendMessage" => message::send_message(ctx, m, out).await,
        "consumeMessage" => message::consume_message(ctx, m, out).await,
        "checkMsgSendRT" => message::check_msg_send_rt(ctx, m, out).await,
        "getNamesrvConfig" => namesrv::get_namesrv_config(ctx, m, out).await,
        "updateNamesrvConfig" => namesrv::update_namesrv_config(ctx, m, out).await,
        "updateKvConfig" => namesrv::update_kv_config(ctx, m, out).await,
        "deleteKvConfig" => namesrv::delete_kv_config(ctx, m, out).await,
        "wipeWritePerm" => namesrv::wipe_write_perm(ctx, m, out).await,
        "addWritePerm" => namesrv::add_write_perm(ctx, m, out).await,
        "statsAll" => stats::stats_all(ctx, m, out).await,
        other => Err(AdminError::Usage(format!(
            "the sub command {other} is listed but not wired"
        ))),
    }
}

pub fn main(args: &[String]) -> ExitCode {
    let Some(name) = args.first().map(String::as_str) else {
        print!("{}", command_list());
        return ExitCode::SUCCESS;
    };
    if matches!(name, "help" | "-h" | "--help") {
        return match args.get(1) {
            None => {
                print!("{}", command_list());
                ExitCode::SUCCESS
            }
            Some(sub) => match find(sub) {
                Some(cmd) => {
                    print!("{}", cli::help_text(cmd));
                    ExitCode::SUCCESS
                }
                None => {
                    eprintln!(
                        "mqadmin: the sub command {sub} does not exist\n\n{}",
                        command_list()
                    );
                    ExitCode::from(2)
                }
            },
        };
    }
    let Some(cmd) = find(name) else {
        eprintln!(
            "mqadmin: the sub command {name} does not exist\n\n{}",
            command_list()
        );
        return ExitCode::from(2);
    };
    let m = match cli::parse(cmd, &args[1..]) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("mqadmin {name}: {e} (see 'mqadmin help {name}')");
            return ExitCode::from(2);
        }
    };
    if m.help() {
        print!("{}", cli::help_text(cmd));
        return ExitCode::SUCCESS;
    }
    let namesrv = ctx::namesrv_addrs(m.get("namesrvAddr"));
    let credentials = match ctx::credentials(m.get("access-key"), m.get("secret-key")) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mqadmin {name}: {e}");
            return ExitCode::from(2);
        }
    };
    let tls = match ringmq_tls::tool_client_config(
        m.has("tls"),
        m.get("tls-config").map(std::path::Path::new),
    ) {
        Ok(tls) => tls,
        Err(e) => {
            eprintln!("mqadmin {name}: TLS: {e}");
            return ExitCode::from(2);
        }
    };
    let mut out = Out::stdout(m.json());
    let result = ringmq_client::block_on(async {
        let ctx = Ctx::new(namesrv, credentials, tls);
        dispatch(cmd.name, &ctx, &m, &mut out).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ AdminError::Usage(_)) => {
            eprintln!("mqadmin {name}: {}", e.message());
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("mqadmin {name}: {}", e.message());
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_command_is_wired_and_unique() {
        let names: Vec<&str> = commands().iter().map(|c| c.name).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "duplicate command names");
        // A command dispatch does not know yields a Usage error before any I/O; every
        // listed command must be known to dispatch (checked by source inspection here).
        let src = include_str!("admin.rs");
        for n in &names {
            assert!(
                src.contains(&format!("\"{n}\" =>")),
                "{n} is not dispatched"
            );
        }
    }

    #[test]
    fn required_commands_exist() {
        for n in [
            "updateTopic",
            "deleteTopic",
            "topicList",
            "topicRoute",
            "topicStatus",
            "topicClusterList",
            "updateTopicPerm",
            "clusterList",
            "brokerStatus",
            "getBrokerConfig",
            "updateBrokerConfig",
            "updateSubGroup",
            "deleteSubGroup",
            "consumerProgress",
            "consumerConnection",
            "producerConnection",
            "consumerStatus",
            "resetOffsetByTime",
            "queryMsgById",
            "queryMsgByKey",
            "queryMsgByOffset",
            "queryMsgByUniqueKey",
            "printMsg",
            "printMsgByQueue",
            "sendMessage",
            "consumeMessage",
            "checkMsgSendRT",
            "clusterRT",
            "statsAll",
            "getNamesrvConfig",
            "updateNamesrvConfig",
            "updateKvConfig",
            "deleteKvConfig",
            "wipeWritePerm",
            "addWritePerm",
            "cleanExpiredCQ",
            "cleanUnusedTopic",
            "deleteExpiredCommitLog",
            "brokerConsumeStats",
            "haStatus",
            "getBrokerEpoch",
            "getControllerMetaData",
            "getSyncStateSet",
            "electMaster",
            "cleanBrokerMetadata",
            "getControllerConfig",
            "updateControllerConfig",
        ] {
            assert!(find(n).is_some(), "{n} missing");
        }
    }

    #[test]
    fn option_letters_do_not_clash_within_a_command() {
        for c in commands() {
            let opts = c.all_opts();
            for (i, a) in opts.iter().enumerate() {
                for b in &opts[i + 1..] {
                    assert_ne!(
                        a.long.trim(),
                        b.long.trim(),
                        "{}: --{} twice",
                        c.name,
                        a.long
                    );
                    if a.short.is_some() {
                        assert_ne!(a.short, b.short, "{}: -{:?} twice", c.name, a.short);
                    }
                }
            }
            for group in c.one_of {
                for l in *group {
                    assert!(
                        opts.iter().any(|o| o.long == *l),
                        "{}: one_of names unknown --{l}",
                        c.name
                    );
                }
            }
        }
    }

    #[test]
    fn mqadmin_option_spellings() {
        // Spot checks against mqadmin's option tables.
        let o = |cmd: &str, short: &str| {
            find(cmd)
                .unwrap()
                .all_opts()
                .into_iter()
                .find(|x| x.short == Some(short))
                .map(|x| (x.long.trim(), x.arg, x.required))
        };
        assert_eq!(o("updateTopic", "t"), Some(("topic", true, true)));
        assert_eq!(o("updateTopic", "c"), Some(("clusterName", true, false)));
        assert_eq!(o("clusterList", "m"), Some(("moreStats", false, false)));
        assert_eq!(o("clusterList", "i"), Some(("interval", true, false)));
        assert_eq!(o("topicRoute", "l"), Some(("list", false, false)));
        assert_eq!(o("consumerProgress", "g"), Some(("groupName", true, false)));
        assert_eq!(
            o("consumerConnection", "g"),
            Some(("consumerGroup", true, true))
        );
        assert_eq!(o("resetOffsetByTime", "s"), Some(("timestamp", true, true)));
        assert_eq!(o("resetOffsetByTime", "c"), Some(("cluster", true, false)));
        assert_eq!(o("queryMsgByKey", "k"), Some(("msgKey", true, true)));
        assert_eq!(o("printMsgByQueue", "a"), Some(("brokerName", true, true)));
        assert_eq!(o("sendMessage", "p"), Some(("body", true, true)));
        assert_eq!(o("updateKvConfig", "s"), Some(("namespace", true, true)));
        assert_eq!(o("wipeWritePerm", "b"), Some(("brokerName", true, true)));
        assert_eq!(
            o("brokerConsumeStats", "b"),
            Some(("brokerAddr", true, true))
        );
        assert_eq!(o("statsAll", "a"), Some(("activeTopic", false, false)));
        assert_eq!(
            o("getNamesrvConfig", "n"),
            Some(("namesrvAddr", true, false))
        );
    }
}
