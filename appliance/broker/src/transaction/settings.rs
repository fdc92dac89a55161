//! The transaction settings (`transactionTimeOut`, `transactionCheckMax`,
//! `transactionCheckInterval`, `fileReservedTime`) and their defaults: below the checker and
//! the live config, which both read them.

use crate::config::BrokerConfig;

/// `transactionTimeOut` default: a half message younger than this is not checked.
pub const DEFAULT_TRANSACTION_TIMEOUT_MS: u64 = 6_000;
/// `transactionCheckMax` default: checks before a half message is discarded.
pub const DEFAULT_TRANSACTION_CHECK_MAX: i32 = 15;
/// `transactionCheckInterval` default: period of the check service.
pub const DEFAULT_TRANSACTION_CHECK_INTERVAL_MS: u64 = 30_000;
/// Shortest accepted check period: a smaller value would spin the control thread.
pub const MIN_TRANSACTION_CHECK_INTERVAL_MS: u64 = 10;
/// The transaction settings (features.md §d.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionConfig {
    /// `transactionTimeOut`: minimum age of a half message before it is checked, and the default
    /// check immunity.
    pub timeout_ms: u64,
    /// `transactionCheckMax`: a half message checked this often is discarded.
    pub check_max: i32,
    /// `transactionCheckInterval`: period of the check service.
    pub check_interval_ms: u64,
    /// `fileReservedTime`: half messages older than this are discarded without a check (their
    /// CommitLog file may be deleted any moment).
    pub file_reserved_time_hours: u32,
    /// Upstream's one-second pause when the op queue is drained but a half message may still get
    /// its op record (a commit in flight); tests set it to 0.
    pub op_grace_ms: u64,
    /// Longest time one round spends on one half queue (upstream: 60 s); the rest waits for the
    /// next round.
    pub max_round_per_queue_ms: u64,
}

impl Default for TransactionConfig {
    fn default() -> Self {
        Self {
            timeout_ms: DEFAULT_TRANSACTION_TIMEOUT_MS,
            check_max: DEFAULT_TRANSACTION_CHECK_MAX,
            check_interval_ms: DEFAULT_TRANSACTION_CHECK_INTERVAL_MS,
            file_reserved_time_hours: 72,
            op_grace_ms: 1_000,
            max_round_per_queue_ms: 60_000,
        }
    }
}

impl TransactionConfig {
    /// The settings from `broker.conf` (`transactionTimeOut`, `transactionCheckMax`,
    /// `transactionCheckInterval`, `fileReservedTime`); a bad value keeps the default and says so.
    pub fn from_broker_config(config: &BrokerConfig) -> Self {
        let d = Self::default();
        Self {
            timeout_ms: extra_value(config, "transactionTimeOut", d.timeout_ms),
            check_max: extra_value(config, "transactionCheckMax", d.check_max),
            check_interval_ms: extra_value(config, "transactionCheckInterval", d.check_interval_ms)
                .max(MIN_TRANSACTION_CHECK_INTERVAL_MS),
            file_reserved_time_hours: config.file_reserved_time_hours,
            ..d
        }
    }

    /// `transactionTimeOut` as the signed type ages are computed in.
    pub(crate) fn timeout_ms_i64(&self) -> i64 {
        i64::try_from(self.timeout_ms).unwrap_or(i64::MAX)
    }
}

fn extra_value<T: std::str::FromStr + Copy + std::fmt::Display>(
    config: &BrokerConfig,
    key: &str,
    default: T,
) -> T {
    match config.extra.get(key).map(|v| v.trim()) {
        None | Some("") => default,
        Some(text) => text.parse().unwrap_or_else(|_| {
            tracing::warn!("config key {key}={text:?} is not a valid number; using {default}");
            default
        }),
    }
}
