//! Plain ACL in the broker (`aclEnable=true`): opening the ACL files, the check every
//! request on the main and VIP listeners passes before its processor, and the admin
//! requests that read and change the files (codes 50–54).
//!
//! Where the files are: `<home>/conf/plain_acl.yml` and `<home>/conf/acl/**.yml`, as
//! upstream. `<home>` is `rocketmqHome` from broker.conf, else `ROCKETMQ_HOME`, else the
//! store root (`storePathRootDir`), so `ringmq up` keeps its ACL beside its data.
//! `ringmq.aclPlainFile` moves the default file (upstream's `rocketmq.acl.plain.file`
//! property, relative to `<home>`).
//!
//! A refusal answers NO_PERMISSION (16) with the reason upstream gives (upstream's Java
//! broker sends the same text as SYSTEM_ERROR); the connection stays open.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ringmq_acl::config::PlainAclFile;
use ringmq_acl::store::AccountUpdate;
use ringmq_acl::AclStore;
use ringmq_remoting::body::acl::{BrokerClusterAclConfig, PlainAccessConfigBody};
use ringmq_remoting::codes::{acl_failed, RequestCode, ResponseCode};
use ringmq_remoting::header::{
    CreateAccessConfigRequestHeader, DeleteAccessConfigRequestHeader,
    GetBrokerAclConfigResponseHeader, UpdateGlobalWhiteAddrsConfigRequestHeader,
};
use ringmq_remoting::RemotingCommand;
use ringmq_runtime::{Reply, RequestContext};

use crate::config::BrokerConfig;
use crate::context::{header_error, BrokerContext};

use ringmq_acl::store::DEFAULT_PLAIN_FILE;
/// How often the housekeeping thread looks for edited ACL files.
pub const RELOAD_CHECK_MS: u64 = 1000;

/// Opens the ACL files when `aclEnable` is on. A file that does not compile stops the
/// broker from starting, as upstream's does.
pub fn open(config: &BrokerConfig) -> Result<Option<Arc<AclStore>>, String> {
    if !config.acl_enable {
        return Ok(None);
    }
    let home = acl_home(config);
    let store = AclStore::open(&home, Path::new(plain_file(config)))
        .map_err(|e| format!("aclEnable=true but the ACL files cannot be used: {e}"))?;
    tracing::info!(
        default_file = %store.default_file().display(),
        files = store.versions().len(),
        "plain ACL enabled: every request needs a known AccessKey and a valid Signature"
    );
    Ok(Some(Arc::new(store)))
}

/// The default ACL file, relative to the ACL home: `ringmq.aclPlainFile`.
pub fn plain_file(config: &BrokerConfig) -> &str {
    config
        .extra
        .get("ringmq.aclPlainFile")
        .map_or(DEFAULT_PLAIN_FILE, String::as_str)
}

/// `rocketmqHome`, else `ROCKETMQ_HOME`, else the store root.
pub fn acl_home(config: &BrokerConfig) -> PathBuf {
    let configured = config.extra.get("rocketmqHome").cloned();
    let from_env = || std::env::var("ROCKETMQ_HOME").ok();
    configured
        .or_else(from_env)
        .filter(|h| !h.trim().is_empty())
        .map_or_else(|| PathBuf::from(&config.store_path_root_dir), PathBuf::from)
}

/// The check before dispatch: `Some` is the refusal to answer instead of processing.
pub fn refusal(acl: &AclStore, request: &RemotingCommand, rc: &RequestContext) -> Option<Reply> {
    let peer = rc.connection().peer_addr();
    let Err(denied) = acl.check(request, peer.ip()) else {
        return None;
    };
    tracing::warn!(
        peer = %peer,
        code = request.code,
        access_key = request.ext_fields.get(ringmq_acl::signature::ACCESS_KEY).unwrap_or(""),
        "request refused by ACL: {denied}"
    );
    if request.is_oneway() {
        return Some(Reply::Nothing);
    }
    let remark = format!("org.apache.rocketmq.acl.common.AclException: {denied}");
    Some(
        request
            .response_to(ResponseCode::NoPermission.code(), Some(remark))
            .into(),
    )
}

/// Codes 50–54; `None` for any other code.
pub fn process(ctx: &BrokerContext, request: &RemotingCommand) -> Option<Reply> {
    use RequestCode as C;
    let code = RequestCode::from_code(request.code)?;
    let failure_code = match code {
        C::UpdateAndCreateAclConfig => acl_failed::UPDATE_AND_CREATE_ACL_CONFIG,
        C::DeleteAclConfig => acl_failed::DELETE_ACL_CONFIG,
        C::UpdateGlobalWhiteAddrsConfig => acl_failed::UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
        C::GetBrokerClusterAclInfo | C::GetBrokerClusterAclConfig => {
            ResponseCode::SystemError.code()
        }
        _ => return None,
    };
    let Some(acl) = ctx.acl.get() else {
        return Some(refuse(
            request,
            failure_code,
            "ACL is not enabled on this broker (set aclEnable=true in broker.conf and restart)"
                .into(),
        ));
    };
    let now_ms = ringmq_sync::now_ms() as i64;
    let outcome = match code {
        C::UpdateAndCreateAclConfig => update_account(acl, request, now_ms),
        C::DeleteAclConfig => delete_account(acl, request, now_ms),
        C::UpdateGlobalWhiteAddrsConfig => update_global_white(acl, request, now_ms),
        C::GetBrokerClusterAclInfo => Ok(Some(acl_info(ctx, acl, request))),
        _ => Ok(Some(acl_config(acl, request))),
    };
    Some(match outcome {
        Ok(Some(reply)) => reply,
        Ok(None) => request
            .response_to(ResponseCode::Success.code(), None)
            .into(),
        Err(Failure::Header(reply)) => *reply,
        Err(Failure::Refused(remark)) => refuse(request, failure_code, remark),
    })
}

enum Failure {
    Header(Box<Reply>),
    Refused(String),
}

fn refuse(request: &RemotingCommand, code: i32, remark: String) -> Reply {
    tracing::warn!(
        request_code = request.code,
        response = code,
        "ACL admin request refused: {remark}"
    );
    request.response_to(code, Some(remark)).into()
}

fn decode<H: ringmq_remoting::header::CommandHeader>(
    request: &RemotingCommand,
) -> Result<H, Failure> {
    request
        .decode_header::<H>()
        .map_err(|e| Failure::Header(Box::new(header_error(request, e))))
}

/// Comma-joined lists as upstream's tools send them; blank items are dropped.
fn split_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

fn update_account(
    acl: &AclStore,
    request: &RemotingCommand,
    now_ms: i64,
) -> Result<Option<Reply>, Failure> {
    let h: CreateAccessConfigRequestHeader = decode(request)?;
    let update = AccountUpdate {
        access_key: h.access_key.clone(),
        secret_key: h.secret_key.filter(|s| !s.is_empty()),
        white_remote_address: h.white_remote_address,
        admin: h.admin,
        default_topic_perm: h.default_topic_perm.filter(|s| !s.is_empty()),
        default_group_perm: h.default_group_perm.filter(|s| !s.is_empty()),
        topic_perms: h.topic_perms.as_deref().map(split_list),
        group_perms: h.group_perms.as_deref().map(split_list),
    };
    acl.update_account(&update, now_ms)
        .map_err(Failure::Refused)?;
    tracing::info!(
        access_key = h.access_key,
        "ACL account created or updated by admin request"
    );
    Ok(None)
}

fn delete_account(
    acl: &AclStore,
    request: &RemotingCommand,
    now_ms: i64,
) -> Result<Option<Reply>, Failure> {
    let h: DeleteAccessConfigRequestHeader = decode(request)?;
    acl.delete_account(&h.access_key, now_ms).map_err(|e| {
        Failure::Refused(format!(
            "The accessKey[{}] corresponding to accessConfig has been deleted failed: {e}",
            h.access_key
        ))
    })?;
    tracing::info!(
        access_key = h.access_key,
        "ACL account deleted by admin request"
    );
    Ok(None)
}

fn update_global_white(
    acl: &AclStore,
    request: &RemotingCommand,
    now_ms: i64,
) -> Result<Option<Reply>, Failure> {
    let h: UpdateGlobalWhiteAddrsConfigRequestHeader = decode(request)?;
    let file = h.acl_file_full_path.as_deref().filter(|p| !p.is_empty());
    let addresses = split_list(&h.global_white_addrs);
    acl.update_global_white(addresses, file.map(Path::new), now_ms)
        .map_err(|e| {
            Failure::Refused(format!(
                "The globalWhiteAddresses[{}] has been updated failed: {e}",
                h.global_white_addrs
            ))
        })?;
    tracing::info!(
        addresses = h.global_white_addrs,
        "ACL global white addresses updated by admin request"
    );
    Ok(None)
}

/// GET_BROKER_CLUSTER_ACL_INFO (52): the default file's version and every file's, in the
/// header. `allAclFileVersion` is filled (upstream 5.1's broker leaves it out, and its own
/// tool then fails reading it).
fn acl_info(ctx: &BrokerContext, acl: &AclStore, request: &RemotingCommand) -> Reply {
    let mut all = ringmq_remoting::json::ObjectBuilder::new();
    for (path, version) in acl.versions() {
        let v = ringmq_remoting::json::ObjectBuilder::new()
            .field("counter", version.counter)
            .field("timestamp", version.timestamp)
            .build();
        all = all.field(&path.display().to_string(), v);
    }
    let header = GetBrokerAclConfigResponseHeader {
        version: acl.default_version().to_json(),
        all_acl_file_version: Some(all.build().to_json()),
        broker_name: Some(ctx.config.broker_name.clone()),
        broker_addr: Some(ctx.store_host.to_string()),
        cluster_name: ctx.config.broker_cluster_name.clone(),
    };
    request
        .response_to(ResponseCode::Success.code(), None)
        .with_header(&header)
        .into()
}

/// GET_BROKER_CLUSTER_ACL_CONFIG (54): every file's white addresses and accounts, each
/// access key once (the first file that defines it, as the check counts it).
fn acl_config(acl: &AclStore, request: &RemotingCommand) -> Reply {
    let mut body = BrokerClusterAclConfig::default();
    let mut seen = std::collections::HashSet::new();
    for (_, file) in acl.contents() {
        let PlainAclFile {
            global_white_remote_addresses,
            accounts,
            ..
        } = file;
        body.global_white_addrs
            .extend(global_white_remote_addresses);
        for a in accounts {
            if !seen.insert(a.access_key.clone()) {
                continue;
            }
            body.plain_access_configs.push(PlainAccessConfigBody {
                access_key: a.access_key,
                secret_key: Some(a.secret_key),
                white_remote_address: Some(a.white_remote_address),
                admin: a.admin,
                default_topic_perm: a.default_topic_perm,
                default_group_perm: a.default_group_perm,
                topic_perms: a.topic_perms,
                group_perms: a.group_perms,
            });
        }
    }
    request
        .response_to(ResponseCode::Success.code(), None)
        .with_body(body.encode())
        .into()
}
