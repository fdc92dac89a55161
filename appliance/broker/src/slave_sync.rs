//! A slave's link to its master (features.md §g.1, §g.2): the master addresses the name
//! server returns at registration, the HA address handed to the store, and the metadata
//! sync (upstream `SlaveSynchronize`) that copies the master's topics (GET_ALL_TOPIC_CONFIG,
//! 21), consumer offsets (43), delay offsets (45) and subscription groups (201) every
//! [`SYNC_PERIOD_MS`], each applied to this broker's manager and persisted.
//!
//! Runs on its own control thread with blocking sockets (the registration thread's
//! transport): a slow or dead master only delays this thread, each call bounded by
//! [`SYNC_CALL_TIMEOUT_MS`].

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use ringmq_remoting::body::subscription::SubscriptionGroupWrapper;
use ringmq_remoting::body::topic::TopicConfigAndMappingSerializeWrapper;
use ringmq_remoting::codes::{RequestCode, ResponseCode};
use ringmq_remoting::RemotingCommand;
use ringmq_sync::LockExt;

use crate::context::BrokerContext;

/// How often a slave copies its master's metadata.
pub const SYNC_PERIOD_MS: u64 = 10_000;

/// Longest one metadata request to the master may take.
pub const SYNC_CALL_TIMEOUT_MS: u64 = 3_000;

/// Shortest `haMasterAddress` taken as set (upstream's `HA_ADDRESS_MIN_LENGTH`).
const HA_ADDRESS_MIN_LENGTH: usize = 6;

static OPAQUE: AtomicI32 = AtomicI32::new(1);

/// The configured `haMasterAddress`, when it names an address.
pub fn configured_ha_master_address(ctx: &BrokerContext) -> Option<&str> {
    ctx.config
        .extra
        .get("haMasterAddress")
        .map(|a| a.trim())
        .filter(|a| a.len() >= HA_ADDRESS_MIN_LENGTH)
}

/// What a slave knows of its master: its remoting address (for the metadata sync), as the
/// name server last answered it.
#[derive(Debug, Default)]
pub struct MasterLink {
    master_addr: Mutex<Option<String>>,
}

impl MasterLink {
    pub fn master_addr(&self) -> Option<String> {
        self.master_addr.lock_unpoisoned().clone()
    }

    pub fn set_master_addr(&self, addr: Option<String>) {
        let mut current = self.master_addr.lock_unpoisoned();
        if *current != addr {
            tracing::info!(old = ?*current, new = ?addr, "master address changed");
            *current = addr;
        }
    }

    /// Applies a successful REGISTER_BROKER answer on a slave: the master's HA address goes
    /// to the store (unless `haMasterAddress` is configured, which the store got at start),
    /// and the master's remoting address is kept for the metadata sync. A master ignores it.
    fn learn_from_register_answer(&self, ctx: &BrokerContext, answer: &RemotingCommand) {
        if ctx.is_master() {
            return;
        }
        let field = |key: &str| {
            answer
                .ext_fields
                .get(key)
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        if configured_ha_master_address(ctx).is_none() {
            if let Some(ha) = field("haServerAddr") {
                ctx.store.update_ha_master_address(&ha);
            }
        }
        self.set_master_addr(field("masterAddr"));
    }
}

/// Sends `code` to the master and returns the body of its SUCCESS answer.
fn fetch_body(
    ctx: &BrokerContext,
    master_addr: &str,
    code: RequestCode,
) -> Result<Vec<u8>, String> {
    let request = RemotingCommand::request(code.code(), OPAQUE.fetch_add(1, Ordering::Relaxed));
    let timeout = Duration::from_millis(SYNC_CALL_TIMEOUT_MS);
    let answer = crate::register::call(master_addr, &request, timeout, &ctx.tls_client)?;
    if answer.code != ResponseCode::Success.code() {
        return Err(format!(
            "{code:?} refused by the master {master_addr}: code {} {:?}",
            answer.code, answer.remark
        ));
    }
    Ok(answer.body.to_vec())
}

/// Topics: when the master's data version differs, this broker's table becomes the
/// master's. Returns whether anything was copied.
pub fn sync_topic_config(ctx: &BrokerContext, master_addr: &str) -> Result<bool, String> {
    let body = fetch_body(ctx, master_addr, RequestCode::GetAllTopicConfig)?;
    let wrapper = TopicConfigAndMappingSerializeWrapper::decode(&body)
        .map_err(|e| format!("topic table from {master_addr}: {e}"))?;
    if wrapper.data_version == ctx.topics.data_version() {
        return Ok(false);
    }
    let count = wrapper.topic_config_table.len();
    ctx.topics.replace_from_master(
        wrapper.topic_config_table.into_values(),
        wrapper.data_version,
    );
    tracing::info!(
        master = master_addr,
        topics = count,
        "topic table copied from the master"
    );
    Ok(true)
}

/// Subscription groups: when the master's data version differs, this broker's groups
/// become the master's. Returns whether anything was copied.
pub fn sync_subscription_group_config(
    ctx: &BrokerContext,
    master_addr: &str,
) -> Result<bool, String> {
    let body = fetch_body(ctx, master_addr, RequestCode::GetAllSubscriptiongroupConfig)?;
    let wrapper = SubscriptionGroupWrapper::decode(&body)
        .map_err(|e| format!("subscription groups from {master_addr}: {e}"))?;
    if wrapper.data_version == ctx.groups.data_version() {
        return Ok(false);
    }
    let count = wrapper.subscription_group_table.len();
    ctx.groups.replace_from_master(wrapper);
    tracing::info!(
        master = master_addr,
        groups = count,
        "subscription groups copied from the master"
    );
    Ok(true)
}

/// `offsetTable` of an offsets body (fastjson dialect: bare integer keys).
fn offset_table(
    body: &[u8],
    what: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let text = String::from_utf8_lossy(body);
    let value: serde_json::Value =
        serde_json::from_str(&crate::persist::fastjson_to_standard(&text))
            .map_err(|e| format!("{what}: {e}"))?;
    Ok(value
        .get("offsetTable")
        .and_then(|t| t.as_object())
        .cloned()
        .unwrap_or_default())
}

/// Consumer offsets: every offset the master holds overwrites this broker's (offsets only
/// the slave knows stay). Returns how many queue offsets were copied.
pub fn sync_consumer_offset(ctx: &BrokerContext, master_addr: &str) -> Result<usize, String> {
    let body = fetch_body(ctx, master_addr, RequestCode::GetAllConsumerOffset)?;
    let table = offset_table(&body, "consumer offsets from the master")?;
    let mut copied = 0;
    for (key, queues) in &table {
        let Some((topic, group)) = key.split_once('@') else {
            continue;
        };
        let Some(queues) = queues.as_object() else {
            continue;
        };
        for (queue_id, offset) in queues {
            if let (Ok(q), Some(o)) = (queue_id.parse::<i32>(), offset.as_i64()) {
                ctx.offsets.commit_offset(group, topic, q, o);
                copied += 1;
            }
        }
    }
    ctx.offsets
        .persist()
        .map_err(|e| format!("cannot persist consumerOffset.json: {e}"))?;
    Ok(copied)
}

/// Delay offsets: the master's progress per delay level, so a slave that becomes master
/// would not deliver delayed messages twice. Returns how many levels were copied.
pub fn sync_delay_offset(ctx: &BrokerContext, master_addr: &str) -> Result<usize, String> {
    let body = fetch_body(ctx, master_addr, RequestCode::GetAllDelayOffset)?;
    let table = offset_table(&body, "delay offsets from the master")?;
    let mut copied = 0;
    for (level, offset) in &table {
        if let (Ok(l), Some(o)) = (level.parse::<i32>(), offset.as_i64()) {
            ctx.delay_offsets.update(l, o);
            copied += 1;
        }
    }
    ctx.delay_offsets
        .persist()
        .map_err(|e| format!("cannot persist delayOffset.json: {e}"))?;
    Ok(copied)
}

/// One sync round, in upstream's order; a failed step is logged and the others still run.
pub fn sync_all(ctx: &BrokerContext, link: &MasterLink) {
    if ctx.is_master() {
        return;
    }
    let Some(master_addr) = link.master_addr() else {
        return;
    };
    if master_addr == ctx.config.broker_addr() {
        return;
    }
    if let Err(e) = sync_topic_config(ctx, &master_addr) {
        tracing::warn!(master = master_addr, "topic sync failed: {e}");
    }
    if let Err(e) = sync_consumer_offset(ctx, &master_addr) {
        tracing::warn!(master = master_addr, "consumer offset sync failed: {e}");
    }
    if let Err(e) = sync_delay_offset(ctx, &master_addr) {
        tracing::warn!(master = master_addr, "delay offset sync failed: {e}");
    }
    if let Err(e) = sync_subscription_group_config(ctx, &master_addr) {
        tracing::warn!(master = master_addr, "subscription group sync failed: {e}");
    }
}

/// The slave's sync thread: a round at start (the first registration already told it the
/// master), then one every [`SYNC_PERIOD_MS`], until stopped.
pub struct SlaveSynchronizer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    handle: Option<JoinHandle<()>>,
}

impl SlaveSynchronizer {
    pub fn start(ctx: Arc<BrokerContext>, link: Arc<MasterLink>) -> std::io::Result<Self> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let thread_stop = stop.clone();
        let handle = std::thread::Builder::new()
            .name("ringmq-slave-sync".into())
            .spawn(move || sync_loop(&ctx, &link, &thread_stop))?;
        Ok(Self {
            stop,
            handle: Some(handle),
        })
    }

    pub fn stop(mut self) {
        *self.stop.0.lock_unpoisoned() = true;
        self.stop.1.notify_all();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn sync_loop(ctx: &BrokerContext, link: &MasterLink, stop: &(Mutex<bool>, Condvar)) {
    let period = Duration::from_millis(SYNC_PERIOD_MS);
    loop {
        sync_all(ctx, link);
        let stopped = stop.0.lock_unpoisoned();
        let (stopped, _) = match stop.1.wait_timeout_while(stopped, period, |s| !*s) {
            Ok(r) => r,
            Err(poisoned) => poisoned.into_inner(),
        };
        if *stopped {
            return;
        }
    }
}

impl crate::register::RegisterAnswers for MasterLink {
    fn on_register_answer(&self, ctx: &BrokerContext, answer: &RemotingCommand) {
        self.learn_from_register_answer(ctx, answer);
    }
}
