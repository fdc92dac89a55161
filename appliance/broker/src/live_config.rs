//! The broker's live configuration: what UPDATE_BROKER_CONFIG (25) changes while the broker
//! runs, what GET_BROKER_CONFIG (26) reports, and how an accepted update is written back to the
//! broker's config file so it survives a restart (headers.md §9).
//!
//! Every key of an update falls in one class:
//! - **live** ([`LIVE_KEYS`]): the processors read these from [`LiveConfig`]'s atomics on every
//!   request, so the next request sees the new value. Only the admin path takes the lock.
//!   The store keys upstream reads on every use (`ringmq_store::config::LIVE_STORE_KEYS`:
//!   flush intervals, retention, transfer limits, `maxMessageSize`, ...) are live too: the
//!   admin handler hands them to the running store ([`push_to_store`]).
//! - **after restart**: any other key ringmq reads (a `BrokerConfig` field, a store key, a
//!   `ringmq.*` broker key). It is accepted, saved and shown by GET_BROKER_CONFIG, and read at
//!   the next start: the store, the listeners and the schedule service copy their settings
//!   when they start and have no way to change them underneath.
//! - **unused**: a RocketMQ key ringmq has no use for. Accepted and saved, so the file still
//!   reads the same to a Java broker, and reported as having no effect.
//! - **refused**: black-listed keys and keys that cannot change while the broker runs
//!   ([`RUNTIME_FIXED_KEYS`]: its port and where its store lives) get NO_PERMISSION, as upstream
//!   answers for its black list; unknown keys, bad values and values the broker could not start
//!   with get INVALID_PARAMETER with the reason. "Could not start" is decided by
//!   [`check_startable`], the function `Broker::start` itself runs first. A refused update
//!   changes nothing, in memory or on disk.
//!
//! The config file is `brokerConfigPath` (the CLI sets it to the `-c` file), else
//! `<storePathRootDir>/config/broker.properties`, which is upstream's default when
//! `storePathRootDir` is the default. Unlike upstream, which rewrites the file with every
//! effective key, the updated keys are edited in place: the line that sets a key (the last one,
//! since the last one wins) is replaced and new keys are appended, keeping the operator's
//! comments, order and other lines. A full rewrite would also pin values the broker derived at
//! start (`brokerName` = host name, `brokerIP1` = detected address, the port picked for
//! `listenPort=0`) into the operator's file. The file is replaced atomically (temp file, fsync,
//! rename; the previous version is kept as `<file>.bak`), and written before anything changes
//! in memory: when it cannot be written, the update is refused rather than lost at restart.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use ringmq_remoting::codes::ResponseCode;
use ringmq_store as store;

use crate::config::{escape_properties, parse_java_properties, BrokerConfig};
use crate::config_check::{check_startable, CheckScope};
use crate::metadata::subscription_group::SubscriptionGroupManager;
use crate::metadata::topic_config::{
    TopicConfigManager, AUTO_CREATE_TOPIC_KEY_TOPIC, PERM_INHERIT, PERM_PRIORITY, PERM_READ,
    PERM_WRITE,
};
use crate::transaction::settings::TransactionConfig;
use ringmq_remoting::body::topic::DataVersion;
use ringmq_sync::LockExt;

/// Keys whose new value applies to the next request.
pub const LIVE_KEYS: &[&str] = &[
    "brokerPermission",
    "autoCreateTopicEnable",
    "autoCreateSubscriptionGroup",
    "enablePropertyFilter",
    "longPollingEnable",
    "shortPollingTimeMills",
    "waitTimeMillsInSendQueue",
    "brokerFastFailureEnable",
    "useServerSideResetOffset",
    "maxMessageSize",
    "notifyConsumerIdsChangedEnable",
    "defaultQueryMaxNum",
    "rejectTransactionMessage",
    "transactionTimeOut",
    "transactionCheckMax",
    "transactionCheckInterval",
];

/// Keys refused whatever `configBlackList` says: changing where the config lives, or the black
/// list itself, from the network would let a caller escape the black list.
pub const FIXED_BLACK_LIST: [&str; 3] = ["brokerConfigPath", "rocketmqHome", "configBlackList"];

/// Keys an update may not change while the broker runs: the port clients and name servers
/// know it by, and where its store lives (a new place would start it on an empty store).
pub const RUNTIME_FIXED_KEYS: [&str; 3] = ["listenPort", "storePathRootDir", "storePathCommitLog"];

/// ringmq's own broker keys that live in `BrokerConfig::extra` (read at start).
/// When an accepted key takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// On the next request.
    Live,
    /// At the next start of the broker.
    AfterRestart,
    /// Never: a RocketMQ setting ringmq does not use.
    Unused,
}

/// One accepted key: its value before and after (as properties text holds it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyChange {
    pub key: String,
    pub old: Option<String>,
    pub new: String,
    pub effect: Effect,
}

/// What an accepted update did.
#[derive(Debug, Clone, Default)]
pub struct UpdateReport {
    pub changes: Vec<KeyChange>,
    /// The file the update was written to (`None` only for in-memory test contexts).
    pub saved_to: Option<PathBuf>,
    /// Things the operator should know (e.g. a switch that needs a missing topic).
    pub notes: Vec<String>,
}

impl UpdateReport {
    fn pairs(&self, effect: Effect) -> Vec<String> {
        self.changes
            .iter()
            .filter(|c| c.effect == effect)
            .map(|c| format!("{}={}", c.key, c.new))
            .collect()
    }

    /// Whether `key` was part of the update and now has a different value.
    pub fn changed(&self, key: &str) -> bool {
        self.changes
            .iter()
            .any(|c| c.key == key && c.old.as_deref() != Some(c.new.as_str()))
    }

    /// The response remark: which keys apply now, which after a restart, where they were saved.
    pub fn remark(&self) -> String {
        let mut parts = Vec::new();
        let live = self.pairs(Effect::Live);
        if !live.is_empty() {
            parts.push(format!("in effect now: {}", live.join(", ")));
        }
        let restart = self.pairs(Effect::AfterRestart);
        if !restart.is_empty() {
            parts.push(format!(
                "takes effect after restart: {}",
                restart.join(", ")
            ));
        }
        let unused = self.pairs(Effect::Unused);
        if !unused.is_empty() {
            parts.push(format!(
                "saved, but ringmq does not use: {}",
                unused.join(", ")
            ));
        }
        parts.extend(self.notes.iter().cloned());
        match &self.saved_to {
            Some(path) => parts.push(format!("saved to {}", path.display())),
            None => parts.push("not saved (this broker has no config file)".to_string()),
        }
        parts.join("; ")
    }
}

/// Why an update was refused. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateError {
    /// The body holds no `key=value`.
    Empty,
    /// Keys on the black list.
    BlackListed(Vec<String>),
    /// Keys that cannot change while the broker runs ([`RUNTIME_FIXED_KEYS`]).
    FixedAtRunTime(Vec<String>),
    /// An unknown key or a value the key cannot take.
    Invalid {
        key: String,
        value: String,
        why: String,
    },
    /// The values parse, but the broker would refuse to start with them.
    WouldNotStart(String),
    /// The config file could not be written.
    Persist { path: PathBuf, why: String },
}

impl UpdateError {
    /// The response code clients expect for this refusal.
    pub fn response_code(&self) -> ResponseCode {
        match self {
            Self::BlackListed(_) | Self::FixedAtRunTime(_) => ResponseCode::NoPermission,
            Self::Persist { .. } => ResponseCode::SystemError,
            Self::Empty | Self::Invalid { .. } | Self::WouldNotStart(_) => {
                ResponseCode::InvalidParameter
            }
        }
    }
}

impl std::fmt::Display for UpdateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Empty => f.write_str("no key=value in the body"),
            Self::BlackListed(keys) => write!(
                f,
                "Can not update config in black list: {} (these keys are on configBlackList: change them in the broker's config file and restart)",
                keys.join(", ")
            ),
            Self::FixedAtRunTime(keys) => write!(
                f,
                "Can not update config in black list: {} (cannot change while the broker runs: change them in the broker's config file and restart)",
                keys.join(", ")
            ),
            Self::Invalid { key, value, why } => {
                write!(f, "config key {key}={value:?} refused: {why}; nothing was changed")
            }
            Self::WouldNotStart(why) => write!(
                f,
                "refused: the broker would not start with this update ({why}); nothing was changed"
            ),
            Self::Persist { path, why } => write!(
                f,
                "cannot save the update to {}: {why}; nothing was changed (make the file and its directory writable by the broker's user, or point brokerConfigPath in the config file at a writable file)",
                path.display()
            ),
        }
    }
}

impl std::error::Error for UpdateError {}

/// The admin side: the effective configuration and where it is saved.
struct State {
    /// The startup configuration plus every accepted update (what GET_BROKER_CONFIG shows and
    /// the next start will read).
    effective: BrokerConfig,
    file: Option<PathBuf>,
    version: DataVersion,
    /// Fixed at start: `configBlackList` itself cannot be updated.
    black_list: BTreeSet<String>,
    /// The metrics endpoint the broker started with (and listens on, when running).
    held_metrics_addr: Option<std::net::SocketAddr>,
}

/// The live values (atomics read by the processors) and the effective configuration.
pub struct LiveConfig {
    broker_permission: AtomicU32,
    auto_create_topic_enable: AtomicBool,
    auto_create_subscription_group: AtomicBool,
    enable_property_filter: AtomicBool,
    long_polling_enable: AtomicBool,
    short_polling_time_ms: AtomicU64,
    wait_time_in_send_queue_ms: AtomicU64,
    broker_fast_failure_enable: AtomicBool,
    use_server_side_reset_offset: AtomicBool,
    max_message_size_bytes: AtomicU32,
    notify_consumer_ids_changed_enable: AtomicBool,
    default_query_max_num: AtomicU32,
    reject_transaction_message: AtomicBool,
    transaction_timeout_ms: AtomicU64,
    transaction_check_max: AtomicI32,
    transaction_check_interval_ms: AtomicU64,
    state: Mutex<State>,
}

/// Where updates to `config` are saved.
pub fn config_file_path(config: &BrokerConfig) -> PathBuf {
    match config.broker_config_path.as_deref().map(str::trim) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => config.config_dir().join("broker.properties"),
    }
}

impl LiveConfig {
    /// Live values from `config`; updates are saved to [`config_file_path`].
    pub fn new(config: &BrokerConfig) -> Self {
        // The TLS keys too: turning TLS off or pointing it at other files must not be
        // possible from the network, even for an admin account.
        let black_list = FIXED_BLACK_LIST
            .iter()
            .chain(ringmq_tls::settings::KEYS)
            .map(|k| k.to_string())
            .chain(
                config
                    .config_black_list
                    .split(';')
                    .map(str::trim)
                    .filter(|k| !k.is_empty())
                    .map(str::to_string),
            )
            .collect();
        let live = Self {
            broker_permission: AtomicU32::new(0),
            auto_create_topic_enable: AtomicBool::new(false),
            auto_create_subscription_group: AtomicBool::new(false),
            enable_property_filter: AtomicBool::new(false),
            long_polling_enable: AtomicBool::new(false),
            short_polling_time_ms: AtomicU64::new(0),
            wait_time_in_send_queue_ms: AtomicU64::new(0),
            broker_fast_failure_enable: AtomicBool::new(false),
            use_server_side_reset_offset: AtomicBool::new(false),
            max_message_size_bytes: AtomicU32::new(0),
            notify_consumer_ids_changed_enable: AtomicBool::new(false),
            default_query_max_num: AtomicU32::new(0),
            reject_transaction_message: AtomicBool::new(false),
            transaction_timeout_ms: AtomicU64::new(0),
            transaction_check_max: AtomicI32::new(0),
            transaction_check_interval_ms: AtomicU64::new(0),
            state: Mutex::new(State {
                effective: config.clone(),
                file: Some(config_file_path(config)),
                version: DataVersion::new(crate::persist::now_ms()),
                black_list,
                held_metrics_addr: crate::metrics::endpoint_addr(config).ok().flatten(),
            }),
        };
        live.publish(config);
        live
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic under the lock cannot leave State half-updated (it is replaced whole).
        self.state.lock_unpoisoned()
    }

    /// Stores every live key of `c` into its atomic. Relaxed: each key is read on its own and
    /// nothing else is published through them.
    fn publish(&self, c: &BrokerConfig) {
        let r = Ordering::Relaxed;
        self.broker_permission.store(c.broker_permission, r);
        self.auto_create_topic_enable
            .store(c.auto_create_topic_enable, r);
        self.auto_create_subscription_group
            .store(c.auto_create_subscription_group, r);
        self.enable_property_filter
            .store(c.enable_property_filter, r);
        self.long_polling_enable.store(c.long_polling_enable, r);
        self.short_polling_time_ms.store(c.short_polling_time_ms, r);
        self.wait_time_in_send_queue_ms
            .store(c.wait_time_in_send_queue_ms, r);
        self.broker_fast_failure_enable
            .store(c.broker_fast_failure_enable, r);
        self.use_server_side_reset_offset
            .store(c.use_server_side_reset_offset, r);
        self.max_message_size_bytes
            .store(c.max_message_size_bytes, r);
        self.notify_consumer_ids_changed_enable
            .store(c.notify_consumer_ids_changed_enable, r);
        self.default_query_max_num.store(c.default_query_max_num, r);
        self.reject_transaction_message
            .store(c.reject_transaction_message, r);
        let tx = TransactionConfig::from_broker_config(c);
        self.transaction_timeout_ms.store(tx.timeout_ms, r);
        self.transaction_check_max.store(tx.check_max, r);
        self.transaction_check_interval_ms
            .store(tx.check_interval_ms, r);
    }

    /// Where updates are saved; `None` keeps them in memory (unit tests).
    pub fn set_config_file(&self, file: Option<PathBuf>) {
        self.state().file = file;
    }

    pub fn config_file(&self) -> Option<PathBuf> {
        self.state().file.clone()
    }

    /// `brokerPermission` (2 write, 4 read).
    pub fn broker_permission(&self) -> u32 {
        self.broker_permission.load(Ordering::Relaxed)
    }

    pub fn is_writeable(&self) -> bool {
        self.broker_permission() & PERM_WRITE != 0
    }

    pub fn is_readable(&self) -> bool {
        self.broker_permission() & PERM_READ != 0
    }

    pub fn auto_create_topic_enable(&self) -> bool {
        self.auto_create_topic_enable.load(Ordering::Relaxed)
    }

    pub fn auto_create_subscription_group(&self) -> bool {
        self.auto_create_subscription_group.load(Ordering::Relaxed)
    }

    pub fn enable_property_filter(&self) -> bool {
        self.enable_property_filter.load(Ordering::Relaxed)
    }

    pub fn long_polling_enable(&self) -> bool {
        self.long_polling_enable.load(Ordering::Relaxed)
    }

    pub fn short_polling_time_ms(&self) -> u64 {
        self.short_polling_time_ms.load(Ordering::Relaxed)
    }

    pub fn wait_time_in_send_queue_ms(&self) -> u64 {
        self.wait_time_in_send_queue_ms.load(Ordering::Relaxed)
    }

    pub fn broker_fast_failure_enable(&self) -> bool {
        self.broker_fast_failure_enable.load(Ordering::Relaxed)
    }

    /// The store's send-queue wait limit: `waitTimeMillsInSendQueue` while
    /// `brokerFastFailureEnable`, else 0 (no limit).
    pub fn send_queue_wait_limit_ms(&self) -> u64 {
        if self.broker_fast_failure_enable() {
            self.wait_time_in_send_queue_ms()
        } else {
            0
        }
    }

    pub fn use_server_side_reset_offset(&self) -> bool {
        self.use_server_side_reset_offset.load(Ordering::Relaxed)
    }

    /// `maxMessageSize`: the largest message body (and batch body) a send may carry.
    pub fn max_message_size_bytes(&self) -> u32 {
        self.max_message_size_bytes.load(Ordering::Relaxed)
    }

    pub fn notify_consumer_ids_changed_enable(&self) -> bool {
        self.notify_consumer_ids_changed_enable
            .load(Ordering::Relaxed)
    }

    pub fn default_query_max_num(&self) -> u32 {
        self.default_query_max_num.load(Ordering::Relaxed)
    }

    pub fn reject_transaction_message(&self) -> bool {
        self.reject_transaction_message.load(Ordering::Relaxed)
    }

    /// `base` with the live transaction keys (`transactionTimeOut`, `transactionCheckMax`,
    /// `transactionCheckInterval`) as they are now.
    pub fn transaction_config(&self, base: &TransactionConfig) -> TransactionConfig {
        let r = Ordering::Relaxed;
        TransactionConfig {
            timeout_ms: self.transaction_timeout_ms.load(r),
            check_max: self.transaction_check_max.load(r),
            check_interval_ms: self.transaction_check_interval_ms.load(r),
            ..base.clone()
        }
    }

    /// The effective configuration (startup values plus accepted updates).
    pub fn effective(&self) -> BrokerConfig {
        self.state().effective.clone()
    }

    /// GET_BROKER_CONFIG's body: the effective configuration as properties text.
    pub fn properties_text(&self) -> String {
        self.state().effective.report_properties_text()
    }

    /// Bumped by every accepted update (GET_BROKER_CONFIG's `version` header).
    pub fn data_version(&self) -> DataVersion {
        self.state().version
    }

    /// Validates `props` as a whole, saves them to the config file, then applies them. Either
    /// every key is accepted or nothing changes. Later duplicates of a key win.
    pub fn update(&self, props: &[(String, String)]) -> Result<UpdateReport, UpdateError> {
        let mut updates: Vec<(String, String)> = Vec::with_capacity(props.len());
        for (key, value) in props {
            let (key, value) = (key.trim(), value.trim());
            updates.retain(|(k, _)| k != key);
            updates.push((key.to_string(), value.to_string()));
        }
        if updates.is_empty() {
            return Err(UpdateError::Empty);
        }
        let mut state = self.state();
        let refused: Vec<String> = updates
            .iter()
            .filter(|(k, _)| state.black_list.contains(k))
            .map(|(k, _)| k.clone())
            .collect();
        if !refused.is_empty() {
            return Err(UpdateError::BlackListed(refused));
        }
        let fixed: Vec<String> = updates
            .iter()
            .filter(|(k, _)| RUNTIME_FIXED_KEYS.contains(&k.as_str()))
            .map(|(k, _)| k.clone())
            .collect();
        if !fixed.is_empty() {
            return Err(UpdateError::FixedAtRunTime(fixed));
        }
        let mut candidate = state.effective.clone();
        let mut changes = Vec::with_capacity(updates.len());
        let mut saved = Vec::with_capacity(updates.len());
        for (key, value) in &updates {
            let old = value_of(&candidate, key);
            let effect = apply_key(&mut candidate, key, value)?;
            let new = value_of(&candidate, key).unwrap_or_else(|| value.clone());
            saved.push((key.clone(), new.clone()));
            changes.push(KeyChange {
                key: key.clone(),
                old,
                new,
                effect,
            });
        }
        let scope = CheckScope {
            held_metrics_addr: state.held_metrics_addr,
            store_files: true,
        };
        if let Err(why) = check_startable(&candidate, scope) {
            // A problem the running configuration has as well (the machine changed under
            // it) is not this update's doing and must not block unrelated keys.
            if check_startable(&state.effective, scope).err().as_ref() != Some(&why) {
                return Err(UpdateError::WouldNotStart(why));
            }
        }
        if let Some(path) = &state.file {
            save(path, &saved).map_err(|e| UpdateError::Persist {
                path: path.clone(),
                why: e.to_string(),
            })?;
        }
        self.publish(&candidate);
        state.effective = candidate;
        state.version.next_version(crate::persist::now_ms());
        Ok(UpdateReport {
            changes,
            saved_to: state.file.clone(),
            notes: Vec::new(),
        })
    }
}

/// Sets `key` on `c` and says when it takes effect, or why it cannot be accepted.
fn apply_key(c: &mut BrokerConfig, key: &str, value: &str) -> Result<Effect, UpdateError> {
    let invalid = |why: String| UpdateError::Invalid {
        key: key.to_string(),
        value: value.to_string(),
        why,
    };
    match c.set_known(key, value) {
        Ok(true) => {
            check_value(c, key).map_err(invalid)?;
            return Ok(if LIVE_KEYS.contains(&key) || is_live_store_key(key) {
                Effect::Live
            } else {
                Effect::AfterRestart
            });
        }
        Ok(false) => {}
        Err(why) => return Err(invalid(why)),
    }
    let effect = match store::StoreConfig::default().apply_property(key, value) {
        Ok(true) if is_live_store_key(key) => Effect::Live,
        Ok(true) => Effect::AfterRestart,
        Err(e) => return Err(invalid(e.to_string())),
        Ok(false) if LIVE_KEYS.contains(&key) => {
            check_live_extra(key, value).map_err(invalid)?;
            Effect::Live
        }
        Ok(false) if crate::config::is_read_elsewhere(key) => Effect::AfterRestart,
        Ok(false) if crate::config_keys::is_upstream_key(key) => Effect::Unused,
        Ok(false) => {
            return Err(invalid(
                "not a RocketMQ or ringmq broker setting (typo? key names are case-sensitive)"
                    .to_string(),
            ))
        }
    };
    c.extra.insert(key.to_string(), value.to_string());
    Ok(effect)
}

/// Whether the store reads `key` on every use, so an update reaches it at once through
/// [`push_to_store`].
fn is_live_store_key(key: &str) -> bool {
    store::config::LIVE_STORE_KEYS.contains(&key)
}

/// Hands the store the live store keys of an accepted update (flush intervals, retention,
/// transfer limits, `maxMessageSize`, ...). Each value was already checked by
/// [`LiveConfig::update`] with the store's own parser, so a refusal here means the store
/// changed its rules; it is logged and the rest still apply.
pub fn push_to_store(report: &UpdateReport, store: &dyn store::StoreApi) {
    for c in report.changes.iter().filter(|c| is_live_store_key(&c.key)) {
        match store.set_live_setting(&c.key, &c.new) {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                key = c.key,
                "the store does not change this key while it runs"
            ),
            Err(e) => {
                tracing::error!(key = c.key, error = %e, "the store refused a live config value")
            }
        }
    }
}

/// Value rules of the live keys kept in `BrokerConfig::extra` (the transaction keys): a value
/// the service would not read must not be reported as in effect.
fn check_live_extra(key: &str, value: &str) -> Result<(), String> {
    let parsed = match key {
        "transactionCheckMax" => value.trim().parse::<i32>().map(|_| ()),
        _ => value.trim().parse::<u64>().map(|_| ()),
    };
    parsed.map_err(|e| format!("expected a number ({e})"))
}

/// Value rules beyond the type of a modelled key.
fn check_value(c: &BrokerConfig, key: &str) -> Result<(), String> {
    match key {
        "brokerPermission" => {
            let known = PERM_PRIORITY | PERM_READ | PERM_WRITE | PERM_INHERIT;
            if c.broker_permission & !known != 0 {
                return Err(
                    "permission bits are 2 (write) and 4 (read): 6 = read-write, 4 = read-only, 2 = write-only"
                        .to_string(),
                );
            }
            Ok(())
        }
        "messageDelayLevel" => c.delay_levels_ms().map(|_| ()),
        _ => Ok(()),
    }
}

/// The current value of `key` as properties text holds it.
fn value_of(c: &BrokerConfig, key: &str) -> Option<String> {
    c.entries()
        .into_iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
        .or_else(|| c.extra.get(key).cloned())
}

/// Applies an update to the broker: [`LiveConfig::update`], then what a changed key means for
/// the rest of the broker (group auto-creation, re-registration with the reduced permission).
/// `caller` (the client's address) is logged with every accepted key. Takes the managers a
/// changed key reaches rather than the broker context, which owns `live`.
pub fn apply_update(
    live: &LiveConfig,
    topics: &TopicConfigManager,
    groups: &SubscriptionGroupManager,
    props: &[(String, String)],
    caller: &str,
) -> Result<UpdateReport, UpdateError> {
    tracing::info!(caller, ?props, "broker config update requested");
    let mut report = live.update(props)?;
    // Read back from the atomics rather than the report: a concurrent update may have landed
    // between the two, and the latest value must win.
    groups.set_auto_create(live.auto_create_subscription_group());
    if report.changed("brokerPermission") {
        // Name servers must see the new permission now, not at the next periodic registration.
        topics.mark_changed();
    }
    if report.changed("autoCreateTopicEnable")
        && live.auto_create_topic_enable()
        && topics.select(AUTO_CREATE_TOPIC_KEY_TOPIC).is_none()
    {
        report.notes.push(format!(
            "the template topic {AUTO_CREATE_TOPIC_KEY_TOPIC} does not exist on this broker (it started with autoCreateTopicEnable=false), so unknown topics are still refused: create it (updateTopic -t {AUTO_CREATE_TOPIC_KEY_TOPIC} -p 7) or restart the broker"
        ));
    }
    let file = report
        .saved_to
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "(not saved)".to_string());
    for c in &report.changes {
        let old = c.old.as_deref().unwrap_or("");
        match c.effect {
            Effect::Live => tracing::info!(
                caller,
                key = c.key,
                old,
                new = c.new,
                file,
                "broker config updated; in effect now"
            ),
            Effect::AfterRestart => tracing::warn!(
                caller,
                key = c.key,
                old,
                new = c.new,
                file,
                "broker config saved; takes effect after restart"
            ),
            Effect::Unused => tracing::warn!(
                caller,
                key = c.key,
                new = c.new,
                file,
                "broker config saved; ringmq does not use this RocketMQ setting"
            ),
        }
    }
    for note in &report.notes {
        tracing::warn!(caller, "{note}");
    }
    Ok(report)
}

/// Escapes a value for a properties file a person reads: only what Java's loader would
/// otherwise misread (backslashes, line breaks, a leading blank, non-ASCII, which Java reads as
/// ISO-8859-1). `=`, `:` and `#` are fine inside a value.
fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for (i, ch) in value.chars().enumerate() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\x0c' => out.push_str("\\f"),
            ' ' if i == 0 => out.push_str("\\ "),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04X}");
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// `text` (a properties file) with each `(key, value)` of `updates` set: the logical line that
/// defines the key last is replaced (continuation lines included), keys not present are
/// appended. Comments, blank lines, order and line endings of everything else are kept.
pub fn rewrite_properties(text: &str, updates: &[(String, String)]) -> String {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    // (first physical line, last physical line, key) of every logical line.
    let mut entries: Vec<(usize, usize, String)> = Vec::new();
    let mut open: Option<usize> = None;
    let close = |first: usize, last: usize, entries: &mut Vec<_>| {
        if let Some((key, _)) = parse_java_properties(&lines[first..=last].concat())
            .into_iter()
            .next()
        {
            entries.push((first, last, key));
        }
    };
    for (i, raw) in lines.iter().enumerate() {
        let trimmed = raw.trim_end_matches(['\n', '\r']).trim_start();
        if open.is_none()
            && (trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!'))
        {
            continue;
        }
        let first = *open.get_or_insert(i);
        // An odd number of trailing backslashes continues the logical line.
        if trimmed.chars().rev().take_while(|c| *c == '\\').count() % 2 == 1 {
            continue;
        }
        open = None;
        close(first, i, &mut entries);
    }
    if let Some(first) = open {
        close(first, lines.len() - 1, &mut entries);
    }

    // replacement[first] = the new line; dropped = the rest of a replaced span.
    let mut replacement: Vec<Option<String>> = vec![None; lines.len()];
    let mut dropped = vec![false; lines.len()];
    let mut appended = Vec::new();
    for (key, value) in updates {
        let line = format!("{}={}", escape_properties(key, true), escape_value(value));
        match entries.iter().rev().find(|(_, _, k)| k == key) {
            Some(&(first, last, _)) => {
                let ending = if lines[last].ends_with("\r\n") {
                    "\r\n"
                } else {
                    "\n"
                };
                replacement[first] = Some(format!("{line}{ending}"));
                for d in &mut dropped[first + 1..=last] {
                    *d = true;
                }
            }
            None => appended.push(line),
        }
    }
    let mut out = String::with_capacity(text.len() + 64);
    for (i, raw) in lines.iter().enumerate() {
        match &replacement[i] {
            Some(line) => out.push_str(line),
            None if dropped[i] => {}
            None => out.push_str(raw),
        }
    }
    if !appended.is_empty() && !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    for line in appended {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Writes `updates` into the properties file at `path` (created when missing) atomically.
fn save(path: &Path, updates: &[(String, String)]) -> io::Result<()> {
    // Through a symlink to its target, so the link (often /etc/... → a managed file) survives.
    let target = match std::fs::canonicalize(path) {
        Ok(p) => p,
        Err(e) if e.kind() == io::ErrorKind::NotFound => path.to_path_buf(),
        Err(e) => return Err(e),
    };
    let (old, permissions) = match std::fs::read_to_string(&target) {
        Ok(text) => (Some(text), Some(std::fs::metadata(&target)?.permissions())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => (None, None),
        Err(e) => return Err(e),
    };
    let text = rewrite_properties(old.as_deref().unwrap_or(""), updates);
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir)?;
    let tmp = sibling(&target, ".tmp");
    let written = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(text.as_bytes())?;
        if let Some(p) = permissions {
            // The operator's mode (e.g. 0640 for a file holding credentials) is kept.
            file.set_permissions(p)?;
        }
        file.sync_all()?;
        if old.is_some() {
            // The version before this update, for a manual rollback (upstream keeps one too).
            if let Err(e) = std::fs::copy(&target, sibling(&target, ".bak")) {
                tracing::warn!(file = %target.display(), "cannot keep the previous config as .bak: {e}");
            }
        }
        std::fs::rename(&tmp, &target)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::BrokerContext;
    use crate::processor::pull::{PULL_FLAG_SUBSCRIPTION, PULL_FLAG_SUSPEND};
    use crate::test_support::{run, send_simple, test_context};
    use ringmq_remoting::RemotingCommand;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// A scratch directory removed when the test ends (pass or fail).
    struct TmpDir(PathBuf);

    impl std::ops::Deref for TmpDir {
        type Target = std::path::Path;
        fn deref(&self) -> &std::path::Path {
            &self.0
        }
    }

    impl Drop for TmpDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn tmp_dir(name: &str) -> TmpDir {
        let dir = std::env::temp_dir().join(format!("ringmq-live-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TmpDir(dir)
    }

    fn kv(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// UPDATE_BROKER_CONFIG through the admin processor, as mqadmin sends it.
    fn update(ctx: &Arc<BrokerContext>, body: &str) -> RemotingCommand {
        run(
            ctx,
            RemotingCommand::request(25, 1).with_body(body.to_string()),
        )
        .command
    }

    fn get_config(ctx: &Arc<BrokerContext>) -> (BrokerConfig, RemotingCommand) {
        let r = run(ctx, RemotingCommand::request(26, 1)).command;
        assert_eq!(r.code, 0, "{:?}", r.remark);
        let (c, _) = BrokerConfig::from_properties_text(std::str::from_utf8(&r.body).unwrap());
        (c, r)
    }

    /// A SEND_MESSAGE_V2 whose answer is returned whatever its code.
    fn send(ctx: &Arc<BrokerContext>, topic: &str) -> RemotingCommand {
        let mut r = RemotingCommand::request(310, 1);
        for (k, v) in [
            ("a", "PG"),
            ("b", topic),
            ("c", "TBW102"),
            ("d", "4"),
            ("e", "0"),
            ("f", "0"),
            ("g", "1700000000000"),
            ("h", "0"),
            ("i", "WAIT\u{1}true\u{2}"),
        ] {
            r.ext_fields.insert(k, v);
        }
        run(ctx, r.with_body(b"live".to_vec())).command
    }

    /// A suspending pull at `offset` (the request asks to be held 3000 ms when nothing is there).
    fn pull_suspended(
        ctx: &Arc<BrokerContext>,
        topic: &str,
        offset: i64,
    ) -> (RemotingCommand, Duration) {
        let mut r = RemotingCommand::request(11, 3);
        for (k, v) in [
            ("consumerGroup", "G1"),
            ("topic", topic),
            ("queueId", "0"),
            ("queueOffset", &offset.to_string()),
            ("maxMsgNums", "32"),
            (
                "sysFlag",
                &(PULL_FLAG_SUSPEND | PULL_FLAG_SUBSCRIPTION).to_string(),
            ),
            ("subscription", "*"),
            ("commitOffset", "0"),
            ("suspendTimeoutMillis", "3000"),
            ("subVersion", "0"),
        ] {
            r.ext_fields.insert(k, v);
        }
        let started = Instant::now();
        let resp = run(ctx, r).command;
        (resp, started.elapsed())
    }

    #[test]
    fn auto_create_topic_switch_applies_to_the_next_send() {
        let (ctx, _) = test_context(BrokerConfig::default());
        assert_eq!(send(&ctx, "LiveAuto1").code, 0);
        let r = update(&ctx, "autoCreateTopicEnable=false\n");
        assert_eq!(r.code, 0, "{:?}", r.remark);
        assert!(r
            .remark
            .as_deref()
            .unwrap()
            .contains("in effect now: autoCreateTopicEnable=false"));
        let refused = send(&ctx, "LiveAuto2");
        assert_eq!(refused.code, ResponseCode::TopicNotExist.code());
        assert!(refused
            .remark
            .unwrap()
            .starts_with("topic[LiveAuto2] not exist, apply first please!"));
        // Topics that exist keep working.
        assert_eq!(send(&ctx, "LiveAuto1").code, 0);
        assert_eq!(update(&ctx, "autoCreateTopicEnable=true").code, 0);
        assert_eq!(send(&ctx, "LiveAuto2").code, 0);
    }

    #[test]
    fn read_only_permission_refuses_sends_and_is_advertised() {
        let (ctx, _) = test_context(BrokerConfig::default());
        send_simple(&ctx, "LivePerm", 0, "", b"before");
        let version = ctx.topics.data_version().counter;
        assert_eq!(update(&ctx, "brokerPermission=4").code, 0);
        let r = send(&ctx, "LivePerm");
        assert_eq!(r.code, ResponseCode::NoPermission.code(), "{:?}", r.remark);
        assert!(!ctx.live.is_writeable() && ctx.live.is_readable());
        // Re-registration: a new topic data version, every topic advertised without write.
        assert!(ctx.topics.data_version().counter > version);
        let body: serde_json::Value =
            serde_json::from_str(&crate::register::register_body(&ctx)).unwrap();
        let table = body["topicConfigSerializeWrapper"]["topicConfigTable"]
            .as_object()
            .unwrap();
        assert_eq!(table["LivePerm"]["perm"], 4);
        assert!(table
            .values()
            .all(|tc| tc["perm"].as_u64().unwrap() & 2 == 0));
        // Reads still work; back to read-write, sends work again.
        let (pulled, _) = pull_suspended(&ctx, "LivePerm", 0);
        assert_eq!(pulled.code, 0, "{:?}", pulled.remark);
        assert_eq!(update(&ctx, "brokerPermission=6").code, 0);
        assert_eq!(send(&ctx, "LivePerm").code, 0);
        let body: serde_json::Value =
            serde_json::from_str(&crate::register::register_body(&ctx)).unwrap();
        assert_eq!(
            body["topicConfigSerializeWrapper"]["topicConfigTable"]["LivePerm"]["perm"],
            6
        );
        // Write-only: pulls refused.
        assert_eq!(update(&ctx, "brokerPermission=2").code, 0);
        let (pulled, _) = pull_suspended(&ctx, "LivePerm", 0);
        assert_eq!(pulled.code, ResponseCode::NoPermission.code());
    }

    #[test]
    fn short_polling_and_queue_wait_switches() {
        let (ctx, _) = test_context(BrokerConfig::default());
        send_simple(&ctx, "LivePoll", 0, "", b"one");
        let r = update(&ctx, "longPollingEnable=false\nshortPollingTimeMills=50\n");
        assert_eq!(r.code, 0, "{:?}", r.remark);
        let (resp, took) = pull_suspended(&ctx, "LivePoll", 1);
        assert_eq!(resp.code, ResponseCode::PullNotFound.code());
        assert!(
            took < Duration::from_millis(2000),
            "held {took:?}: the 3000 ms suspend of the request should not apply"
        );
        // waitTimeMillsInSendQueue: a send queued 100 ms is refused only under a 50 ms limit.
        let queued = |ctx: &Arc<BrokerContext>| {
            let mut r = RemotingCommand::request(310, 1);
            for (k, v) in [
                ("a", "PG"),
                ("b", "LivePoll"),
                ("c", "TBW102"),
                ("d", "4"),
                ("e", "0"),
                ("f", "0"),
                ("g", "1"),
                ("h", "0"),
                ("i", ""),
            ] {
                r.ext_fields.insert(k, v);
            }
            crate::test_support::run_with_queue_delay(ctx, r.with_body(b"q".to_vec()), 100).command
        };
        assert_eq!(queued(&ctx).code, 0);
        assert_eq!(update(&ctx, "waitTimeMillsInSendQueue=50").code, 0);
        let busy = queued(&ctx);
        assert_eq!(busy.code, ResponseCode::SystemBusy.code());
        assert!(busy.remark.unwrap().contains("[TIMEOUT_CLEAN_QUEUE]"));
        assert_eq!(update(&ctx, "brokerFastFailureEnable=false").code, 0);
        assert_eq!(queued(&ctx).code, 0);
    }

    #[test]
    fn group_auto_creation_and_flags_follow_updates() {
        let (ctx, _) = test_context(BrokerConfig::default());
        assert!(ctx.groups.find("LiveGroupA").is_some());
        let r = update(
            &ctx,
            "autoCreateSubscriptionGroup=false\nenablePropertyFilter=true\nuseServerSideResetOffset=false\n",
        );
        assert_eq!(r.code, 0, "{:?}", r.remark);
        assert!(ctx.groups.find("LiveGroupB").is_none());
        assert!(
            ctx.groups.find("LiveGroupA").is_some(),
            "existing groups stay"
        );
        assert!(ctx.live.enable_property_filter());
        assert!(!ctx.live.use_server_side_reset_offset());
    }

    #[test]
    fn black_listed_keys_are_refused_and_change_nothing() {
        let dir = tmp_dir("black");
        let cfg = BrokerConfig {
            config_black_list: "brokerName;listenPort".into(),
            ..BrokerConfig::default()
        };
        let (ctx, _) = test_context(cfg);
        let file = dir.join("broker.conf");
        ctx.live.set_config_file(Some(file.clone()));
        for body in [
            "brokerConfigPath=/tmp/x",
            "rocketmqHome=/x",
            "configBlackList=",
            "brokerName=other",
            "autoCreateTopicEnable=false\nlistenPort=1",
        ] {
            let r = update(&ctx, body);
            assert_eq!(r.code, ResponseCode::NoPermission.code(), "{body}");
            assert!(r.remark.unwrap().contains("black list"));
        }
        assert!(ctx.live.auto_create_topic_enable(), "nothing applied");
        assert!(!file.exists(), "nothing saved");
        assert_eq!(ctx.live.data_version().counter, 0);
    }

    #[test]
    fn bad_values_and_unknown_keys_name_the_key() {
        let (ctx, _) = test_context(BrokerConfig::default());
        for (body, key) in [
            ("autoCreateTopicEnable=maybe", "autoCreateTopicEnable"),
            ("brokerPermission=rw", "brokerPermission"),
            ("brokerPermission=64", "brokerPermission"),
            ("shortPollingTimeMills=-1", "shortPollingTimeMills"),
            ("messageDelayLevel=1s 5x", "messageDelayLevel"),
            (
                "flushIntervalConsumeQueue=soon",
                "flushIntervalConsumeQueue",
            ),
            ("autoCreateTopicEnabel=false", "autoCreateTopicEnabel"),
            ("longPollingEnable=false\nnoSuchKey=1", "noSuchKey"),
        ] {
            let r = update(&ctx, body);
            assert_eq!(r.code, ResponseCode::InvalidParameter.code(), "{body}");
            let remark = r.remark.unwrap();
            assert!(remark.contains(key), "{body}: {remark}");
        }
        // Parses, but the broker could not start with it.
        let r = update(&ctx, "bindAddress=localhost");
        assert_eq!(r.code, ResponseCode::InvalidParameter.code());
        assert!(r.remark.unwrap().contains("bindAddress"));
        assert_eq!(update(&ctx, "").code, ResponseCode::InvalidParameter.code());
        assert!(
            ctx.live.long_polling_enable(),
            "a refused update applies nothing"
        );
        let (c, _) = get_config(&ctx);
        assert!(c.auto_create_topic_enable && c.long_polling_enable);
        assert_eq!(c.bind_address, "0.0.0.0");
    }

    #[test]
    fn update_is_saved_in_place_and_read_back_at_restart() {
        let dir = tmp_dir("save");
        let file = dir.join("broker.conf");
        let original = "# operator's broker.conf\nbrokerClusterName = C1\r\nbrokerName=b1\n\
                        deleteWhen=04\n! old value below wins\ndeleteWhen=05\n\
                        messageDelayLevel=1s 5s \\\n   10s\nautoCreateTopicEnable=true";
        std::fs::write(&file, original).unwrap();
        let (mut cfg, _) = BrokerConfig::from_properties_text(original);
        cfg.broker_config_path = Some(file.display().to_string());
        let (ctx, _) = test_context(cfg);
        ctx.live
            .set_config_file(Some(config_file_path(&ctx.config)));
        let r = update(
            &ctx,
            "deleteWhen=03\nautoCreateTopicEnable=false\nmessageDelayLevel=2s 4s\n\
             sendMessageThreadPoolNums=16\nregionId=r:1 #a\n",
        );
        assert_eq!(r.code, 0, "{:?}", r.remark);
        let remark = r.remark.unwrap();
        assert!(
            remark.contains("in effect now: deleteWhen=03, autoCreateTopicEnable=false"),
            "{remark}"
        );
        assert!(
            remark.contains("takes effect after restart: messageDelayLevel=2s 4s, regionId=r:1 #a"),
            "{remark}"
        );
        assert!(
            remark.contains("ringmq does not use: sendMessageThreadPoolNums=16"),
            "{remark}"
        );
        assert!(remark.contains(&file.display().to_string()), "{remark}");

        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(
            text,
            "# operator's broker.conf\nbrokerClusterName = C1\r\nbrokerName=b1\n\
             deleteWhen=04\n! old value below wins\ndeleteWhen=03\n\
             messageDelayLevel=2s 4s\nautoCreateTopicEnable=false\n\
             sendMessageThreadPoolNums=16\nregionId=r:1 #a\n"
        );
        assert_eq!(
            std::fs::read_to_string(sibling(&file, ".bak")).unwrap(),
            original
        );
        assert!(!sibling(&file, ".tmp").exists());

        // GET shows the new values (live and restart-only) with a new version.
        let (shown, resp) = get_config(&ctx);
        assert_eq!(shown.delete_when, "03");
        assert!(!shown.auto_create_topic_enable);
        assert_eq!(shown.extra["sendMessageThreadPoolNums"], "16");
        assert!(resp
            .ext_fields
            .get("version")
            .unwrap()
            .contains("\"counter\":1"));
        // Restart-only keys keep their startup value in the running broker.
        assert_eq!(ctx.delay_levels_ms[0], 1000);

        // The next start reads what was saved.
        let (restarted, notes) = BrokerConfig::from_properties_text(&text);
        assert_eq!(restarted.delete_when, "03");
        assert!(!restarted.auto_create_topic_enable);
        assert_eq!(restarted.delay_levels_ms().unwrap(), vec![2000, 4000]);
        assert_eq!(restarted.region_id, "r:1 #a");
        assert_eq!(restarted.broker_cluster_name, "C1");
        assert_eq!(notes.len(), 1, "only the unused RocketMQ key: {notes:?}");
        let (ctx2, _) = test_context(restarted);
        assert!(!ctx2.live.auto_create_topic_enable());
        assert_eq!(
            send(&ctx2, "AfterRestart").code,
            ResponseCode::TopicNotExist.code()
        );
    }

    #[test]
    fn unwritable_file_refuses_the_update() {
        let dir = tmp_dir("unwritable");
        let blocker = dir.join("not-a-dir");
        std::fs::write(&blocker, "").unwrap();
        let (ctx, _) = test_context(BrokerConfig::default());
        ctx.live
            .set_config_file(Some(blocker.join("config/broker.properties")));
        let r = update(&ctx, "autoCreateTopicEnable=false");
        assert_eq!(r.code, ResponseCode::SystemError.code());
        let remark = r.remark.unwrap();
        assert!(
            remark.contains("cannot save the update to") && remark.contains("nothing was changed"),
            "{remark}"
        );
        assert!(ctx.live.auto_create_topic_enable());
        assert!(get_config(&ctx).0.auto_create_topic_enable);
    }

    #[test]
    fn missing_file_is_created_with_the_updated_keys() {
        let dir = tmp_dir("create");
        let cfg = BrokerConfig {
            store_path_root_dir: dir.display().to_string(),
            ..BrokerConfig::default()
        };
        let live = LiveConfig::new(&cfg);
        let file = dir.join("config/broker.properties");
        assert_eq!(live.config_file(), Some(file.clone()));
        let report = live
            .update(&kv(&[("deleteWhen", "02"), ("deleteWhen", "01")]))
            .unwrap();
        assert_eq!(report.changes.len(), 1, "later duplicates win");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "deleteWhen=01\n");
        assert_eq!(live.effective().delete_when, "01");
    }

    #[test]
    fn rewrite_keeps_everything_but_the_updated_lines() {
        let up = |text: &str, pairs: &[(&str, &str)]| rewrite_properties(text, &kv(pairs));
        assert_eq!(up("", &[("a", "1")]), "a=1\n");
        assert_eq!(up("x=1", &[("a", "1")]), "x=1\na=1\n");
        assert_eq!(up("a=1\r\nb=2\r\n", &[("a", "9")]), "a=9\r\nb=2\r\n");
        // A comment that looks like the key is not the key.
        assert_eq!(up("#a=1\na : 2\n", &[("a", "3")]), "#a=1\na=3\n");
        // A continued value is replaced whole; a file ending mid-continuation too.
        assert_eq!(up("a=1 \\\n  2\nb=3\n", &[("a", "4")]), "a=4\nb=3\n");
        assert_eq!(up("b=3\na=1\\\n", &[("a", "4")]), "b=3\na=4\n");
        // Values that need escaping read back as written.
        let text = up("", &[("k", " lead\\tab\té")]);
        assert_eq!(text, "k=\\ lead\\\\tab\\t\\u00E9\n");
        let back = parse_java_properties(&text);
        assert_eq!(back, vec![("k".to_string(), " lead\\tab\té".to_string())]);
    }

    #[test]
    fn every_live_key_reaches_its_atomic() {
        let live = LiveConfig::new(&BrokerConfig::default());
        live.set_config_file(None);
        let defaults = BrokerConfig::default();
        let flipped = |key: &str| -> String {
            let v = value_of(&defaults, key).unwrap_or_else(|| {
                match crate::config_keys::find(key).map(|k| k.default) {
                    Some(crate::config_keys::DefaultKind::Value(v)) => v.to_string(),
                    other => panic!("{key}: no default ({other:?})"),
                }
            });
            match v.as_str() {
                "true" => "false".into(),
                "false" => "true".into(),
                "6" => "4".into(),
                n => (n.parse::<u64>().unwrap() + 7).to_string(),
            }
        };
        let updates: Vec<(String, String)> = LIVE_KEYS
            .iter()
            .map(|k| (k.to_string(), flipped(k)))
            .collect();
        let report = live.update(&updates).unwrap();
        assert!(report.changes.iter().all(|c| c.effect == Effect::Live));
        let now = [
            ("brokerPermission", live.broker_permission().to_string()),
            (
                "autoCreateTopicEnable",
                live.auto_create_topic_enable().to_string(),
            ),
            (
                "autoCreateSubscriptionGroup",
                live.auto_create_subscription_group().to_string(),
            ),
            (
                "enablePropertyFilter",
                live.enable_property_filter().to_string(),
            ),
            ("longPollingEnable", live.long_polling_enable().to_string()),
            (
                "shortPollingTimeMills",
                live.short_polling_time_ms().to_string(),
            ),
            (
                "waitTimeMillsInSendQueue",
                live.wait_time_in_send_queue_ms().to_string(),
            ),
            (
                "brokerFastFailureEnable",
                live.broker_fast_failure_enable().to_string(),
            ),
            (
                "useServerSideResetOffset",
                live.use_server_side_reset_offset().to_string(),
            ),
            ("maxMessageSize", live.max_message_size_bytes().to_string()),
            (
                "notifyConsumerIdsChangedEnable",
                live.notify_consumer_ids_changed_enable().to_string(),
            ),
            (
                "defaultQueryMaxNum",
                live.default_query_max_num().to_string(),
            ),
            (
                "rejectTransactionMessage",
                live.reject_transaction_message().to_string(),
            ),
            (
                "transactionTimeOut",
                live.transaction_config(&Default::default())
                    .timeout_ms
                    .to_string(),
            ),
            (
                "transactionCheckMax",
                live.transaction_config(&Default::default())
                    .check_max
                    .to_string(),
            ),
            (
                "transactionCheckInterval",
                live.transaction_config(&Default::default())
                    .check_interval_ms
                    .to_string(),
            ),
        ];
        assert_eq!(now.len(), LIVE_KEYS.len());
        for (key, value) in now {
            assert_eq!(value, flipped(key), "{key}");
        }
    }
}
