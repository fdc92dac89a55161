//! `NamesrvConfig`: the name server's settings, read from `namesrv.conf` (Java properties
//! with RocketMQ's key names and defaults, `features.md` §h.6) and printed back for `-p`
//! and GET_NAMESRV_CONFIG.
//!
//! As `mqnamesrv` does, one file feeds three Java config objects: `NamesrvConfig`,
//! `NettyServerConfig` (`listenPort`, `bindAddress`, ...) and `NettyClientConfig`. Keys we
//! act on are typed fields; the other Netty keys are accepted and kept (so a Java
//! operator's file loads without noise) but have no effect. Any other key is reported
//! back as unknown — never fatal.
//!
//! Values are applied the way `MixAll.properties2Object` does: integers must parse
//! (surrounding whitespace is tolerated here), booleans are `true` (any case) or false,
//! strings are trimmed. An unparsable value keeps the default and is reported.

use std::collections::BTreeMap;
use std::path::PathBuf;

use ringmq_remoting::body::kv::{Properties, PropertiesError};

/// The name server's default Remoting port.
pub const DEFAULT_LISTEN_PORT: u16 = 9876;

/// Prefix of ringmq-specific keys (core placement etc.): accepted, never "unknown".
pub const RINGMQ_KEY_PREFIX: &str = "ringmq.";

/// Keys UPDATE_NAMESRV_CONFIG may never change, whatever `configBlackList` says.
pub const ALWAYS_BLACKLISTED: [&str; 4] = [
    "configBlackList",
    "configStorePath",
    "kvConfigPath",
    "rocketmqHome",
];

/// Keys the name server reads only when it starts (its listener, its connection idle limit,
/// the expiry scan period, ringmq's core and network settings, which all have the `ringmq.`
/// prefix): UPDATE_NAMESRV_CONFIG refuses them like black-listed keys, since changing them
/// at run time would do nothing but could leave a config file the name server cannot start
/// with (`listenPort=1`).
pub const RUNTIME_FIXED_KEYS: [&str; 4] = [
    "listenPort",
    "bindAddress",
    "serverChannelMaxIdleTimeSeconds",
    "scanNotActiveBrokerInterval",
];

/// Whether UPDATE_NAMESRV_CONFIG must refuse `key` because it is read only at start.
pub fn is_runtime_fixed(key: &str) -> bool {
    RUNTIME_FIXED_KEYS.contains(&key)
        || key.starts_with(RINGMQ_KEY_PREFIX)
        || ringmq_tls::settings::KEYS.contains(&key)
}

/// Netty server/client keys a Java `namesrv.conf` may carry that ringmq's runtime does not
/// use: accepted silently and echoed by `-p`, with their Java defaults.
const ACCEPTED_NETTY_KEYS: [(&str, &str); 29] = [
    ("serverWorkerThreads", "8"),
    ("serverCallbackExecutorThreads", "0"),
    ("serverSelectorThreads", "3"),
    ("serverOnewaySemaphoreValue", "256"),
    ("serverAsyncSemaphoreValue", "64"),
    ("serverSocketSndBufSize", "0"),
    ("serverSocketRcvBufSize", "0"),
    ("writeBufferHighWaterMark", "0"),
    ("writeBufferLowWaterMark", "0"),
    ("serverSocketBacklog", "1024"),
    ("serverNettyWorkerGroupEnable", "true"),
    ("serverPooledByteBufAllocatorEnable", "true"),
    ("enableShutdownGracefully", "false"),
    ("shutdownWaitTimeSeconds", "30"),
    ("useEpollNativeSelector", "false"),
    ("clientWorkerThreads", "4"),
    ("clientCallbackExecutorThreads", "2"),
    ("clientOnewaySemaphoreValue", "65535"),
    ("clientAsyncSemaphoreValue", "65535"),
    ("connectTimeoutMillis", "3000"),
    ("channelNotActiveInterval", "60000"),
    ("isScanAvailableNameSrv", "true"),
    ("clientChannelMaxIdleTimeSeconds", "120"),
    ("clientSocketSndBufSize", "0"),
    ("clientSocketRcvBufSize", "0"),
    ("clientPooledByteBufAllocatorEnable", "false"),
    ("clientCloseSocketIfTimeout", "true"),
    ("useTLS", "false"),
    ("disableCallbackExecutor", "false"),
];

/// A value that can be read from and written to a properties entry.
trait ConfigValue: Sized {
    fn parse_value(text: &str) -> Result<Self, String>;
    fn format_value(&self) -> Option<String>;
}

impl ConfigValue for String {
    fn parse_value(text: &str) -> Result<Self, String> {
        Ok(text.trim().to_owned())
    }
    fn format_value(&self) -> Option<String> {
        Some(self.clone())
    }
}

impl ConfigValue for Option<String> {
    fn parse_value(text: &str) -> Result<Self, String> {
        Ok(Some(text.trim().to_owned()))
    }
    fn format_value(&self) -> Option<String> {
        self.clone()
    }
}

impl ConfigValue for bool {
    fn parse_value(text: &str) -> Result<Self, String> {
        // Java's Boolean.parseBoolean: anything but "true" is false. Report the odd ones.
        match text.trim() {
            t if t.eq_ignore_ascii_case("true") => Ok(true),
            t if t.eq_ignore_ascii_case("false") => Ok(false),
            other => Err(format!("{other:?} is not true or false")),
        }
    }
    fn format_value(&self) -> Option<String> {
        Some(self.to_string())
    }
}

macro_rules! impl_int_value {
    ($($t:ty),*) => {$(
        impl ConfigValue for $t {
            fn parse_value(text: &str) -> Result<Self, String> {
                text.trim().parse::<$t>().map_err(|_| format!("{:?} is not a valid {}", text, stringify!($t)))
            }
            fn format_value(&self) -> Option<String> {
                Some(self.to_string())
            }
        }
    )*};
}
impl_int_value!(i32, i64, u16);

macro_rules! namesrv_config {
    ($( $(#[$doc:meta])* $key:literal => $field:ident : $ty:ty = $default:expr ),* $(,)?) => {
        /// Name server settings, field names as RocketMQ's keys (`features.md` §h.6).
        #[derive(Debug, Clone, PartialEq)]
        pub struct NamesrvConfig {
            $( $(#[$doc])* pub $field: $ty, )*
            /// Accepted Netty keys that have no effect here, with their values.
            pub accepted_netty: BTreeMap<String, String>,
            /// ringmq's own keys (`ringmq.cores.network`, ...), passed to the runtime.
            pub ringmq_extra: BTreeMap<String, String>,
        }

        impl Default for NamesrvConfig {
            fn default() -> Self {
                Self {
                    $( $field: $default, )*
                    accepted_netty: ACCEPTED_NETTY_KEYS
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                    ringmq_extra: BTreeMap::new(),
                }
            }
        }

        impl NamesrvConfig {
            /// Every key ringmq acts on, in print order.
            pub const KEYS: &'static [&'static str] = &[$($key),*];

            /// Sets one key. `Ok(false)` = not a key of this config.
            fn set_key(&mut self, key: &str, value: &str) -> Result<bool, String> {
                match key {
                    $( $key => { self.$field = <$ty as ConfigValue>::parse_value(value)?; Ok(true) } )*
                    _ => Ok(false),
                }
            }

            fn entries(&self) -> Vec<(&'static str, Option<String>)> {
                vec![$( ($key, ConfigValue::format_value(&self.$field)), )*]
            }
        }
    };
}

fn home_dir() -> String {
    std::env::var("HOME").unwrap_or_else(|_| ".".to_owned())
}

namesrv_config! {
    /// `rocketmqHome`: install directory (env `ROCKETMQ_HOME`); informational here.
    "rocketmqHome" => rocketmq_home: Option<String> = std::env::var("ROCKETMQ_HOME").ok(),
    /// File holding the KV config (`{"configTable":{...}}`).
    "kvConfigPath" => kv_config_path: String = format!("{}/namesrv/kvConfig.json", home_dir()),
    /// Where UPDATE_NAMESRV_CONFIG persists the whole config (the `-c` file when given).
    "configStorePath" => config_store_path: String = format!("{}/namesrv/namesrv.properties", home_dir()),
    "productEnvName" => product_env_name: String = "center".to_owned(),
    /// Accepted; the cluster-test fallback route lookup is not implemented.
    "clusterTest" => cluster_test: bool = false,
    /// Put `orderTopicConf` (KV namespace ORDER_TOPIC_CONFIG) into route answers.
    "orderMessageEnable" => order_message_enable: bool = false,
    /// Answer REGISTER_BROKER with the ORDER_TOPIC_CONFIG table.
    "returnOrderTopicConfigToBroker" => return_order_topic_config_to_broker: bool = true,
    "clientRequestThreadPoolNums" => client_request_thread_pool_nums: i32 = 8,
    "defaultThreadPoolNums" => default_thread_pool_nums: i32 = 16,
    "clientRequestThreadPoolQueueCapacity" => client_request_thread_pool_queue_capacity: i32 = 50_000,
    "defaultThreadPoolQueueCapacity" => default_thread_pool_queue_capacity: i32 = 10_000,
    /// Period of the broker-expiry scan.
    "scanNotActiveBrokerInterval" => scan_not_active_broker_interval: i64 = 5_000,
    "unRegisterBrokerQueueCapacity" => un_register_broker_queue_capacity: i32 = 3_000,
    /// Present a slave as acting master when a broker set lost its master.
    "supportActingMaster" => support_acting_master: bool = false,
    "enableAllTopicList" => enable_all_topic_list: bool = true,
    "enableTopicList" => enable_topic_list: bool = true,
    /// Accepted; NOTIFY_MIN_BROKER_ID_CHANGE is not sent.
    "notifyMinBrokerIdChanged" => notify_min_broker_id_changed: bool = false,
    /// Run a controller in this process (`ringmq namesrv` starts it from the same file).
    "enableControllerInNamesrv" => enable_controller_in_namesrv: bool = false,
    "needWaitForService" => need_wait_for_service: bool = false,
    "waitSecondsForService" => wait_seconds_for_service: i32 = 45,
    "deleteTopicWithBrokerRegistration" => delete_topic_with_broker_registration: bool = false,
    "configBlackList" => config_black_list: String = "configBlackList;configStorePath;kvConfigPath".to_owned(),
    /// NettyServerConfig: the Remoting port.
    "listenPort" => listen_port: u16 = DEFAULT_LISTEN_PORT,
    /// NettyServerConfig: the listen address.
    "bindAddress" => bind_address: String = "0.0.0.0".to_owned(),
    /// NettyServerConfig: idle connections are closed after this many seconds.
    "serverChannelMaxIdleTimeSeconds" => server_channel_max_idle_time_seconds: i32 = 120,
}

/// The outcome of reading a config: the config, the keys nobody knows (log them), and the
/// values that did not parse (the default was kept; log them too).
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigLoad {
    pub config: NamesrvConfig,
    pub unknown_keys: Vec<String>,
    pub invalid_values: Vec<String>,
}

impl NamesrvConfig {
    /// Reads `namesrv.conf` text. Unknown keys come back as a list to log; a value that
    /// does not parse keeps its default and is logged here. Text that is not valid
    /// properties at all (a malformed `\u` escape) is logged and yields the defaults; use
    /// [`NamesrvConfig::load`] to get that error instead.
    pub fn from_properties_text(text: &str) -> (NamesrvConfig, Vec<String>) {
        match Self::load(text) {
            Ok(load) => {
                for problem in &load.invalid_values {
                    tracing::warn!("namesrv config: {problem}; keeping the default");
                }
                (load.config, load.unknown_keys)
            }
            Err(e) => {
                tracing::error!(
                    "namesrv config is not valid Java properties ({e}); using defaults"
                );
                (NamesrvConfig::default(), Vec::new())
            }
        }
    }

    /// Strict reading: properties syntax errors are returned.
    pub fn load(text: &str) -> Result<ConfigLoad, PropertiesError> {
        let props = Properties::parse(text)?;
        Ok(Self::from_properties(&props))
    }

    /// Applies `props` over the defaults.
    pub fn from_properties(props: &Properties) -> ConfigLoad {
        let mut config = NamesrvConfig::default();
        let (unknown_keys, invalid_values) = config.apply(props);
        ConfigLoad {
            config,
            unknown_keys,
            invalid_values,
        }
    }

    /// Applies `props` to this config (UPDATE_NAMESRV_CONFIG, or a file over defaults).
    /// Returns (unknown keys, invalid-value messages).
    pub fn apply(&mut self, props: &Properties) -> (Vec<String>, Vec<String>) {
        let mut unknown = Vec::new();
        let mut invalid = Vec::new();
        for (key, value) in props.iter() {
            match self.set_key(key, value) {
                Ok(true) => {}
                Ok(false) => {
                    if let Some(slot) = self.accepted_netty.get_mut(key) {
                        *slot = value.trim().to_owned();
                    } else if key.starts_with(RINGMQ_KEY_PREFIX)
                        || ringmq_tls::settings::KEYS.contains(&key)
                    {
                        self.ringmq_extra
                            .insert(key.to_owned(), value.trim().to_owned());
                    } else {
                        unknown.push(key.to_owned());
                    }
                }
                Err(why) => invalid.push(format!("{key}: {why}")),
            }
        }
        (unknown, invalid)
    }

    /// Every setting as Java properties text (`key=value` lines): ours first, then the
    /// accepted Netty keys. Unset optional values (`rocketmqHome`) are omitted, as Java
    /// omits nulls.
    pub fn to_properties(&self) -> Properties {
        let mut props = Properties::new();
        for (key, value) in self.entries() {
            if let Some(v) = value {
                props.set(key, v);
            }
        }
        for (k, v) in self.accepted_netty.iter().chain(&self.ringmq_extra) {
            props.set(k.as_str(), v.as_str());
        }
        props
    }

    /// [`NamesrvConfig::to_properties`] as text, for `-p` and GET_NAMESRV_CONFIG.
    pub fn to_properties_text(&self) -> String {
        self.to_properties().to_text()
    }

    /// The keys UPDATE_NAMESRV_CONFIG refuses: the fixed ones plus `configBlackList`.
    pub fn black_list(&self) -> Vec<String> {
        let mut list: Vec<String> = ALWAYS_BLACKLISTED.iter().map(|s| s.to_string()).collect();
        for key in self
            .config_black_list
            .split(';')
            .map(str::trim)
            .filter(|k| !k.is_empty())
        {
            if !list.iter().any(|k| k == key) {
                list.push(key.to_owned());
            }
        }
        list
    }

    pub fn kv_config_path(&self) -> PathBuf {
        PathBuf::from(&self.kv_config_path)
    }

    /// `scanNotActiveBrokerInterval`, clamped to at least 100 ms so a zero or negative
    /// value cannot spin the scan thread.
    pub fn scan_interval_ms(&self) -> u64 {
        self.scan_not_active_broker_interval.max(100) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_rocketmq() {
        let c = NamesrvConfig::default();
        assert_eq!(c.listen_port, 9876);
        assert_eq!(c.scan_not_active_broker_interval, 5000);
        assert!(c.kv_config_path.ends_with("/namesrv/kvConfig.json"));
        assert!(c.config_store_path.ends_with("/namesrv/namesrv.properties"));
        assert!(
            c.return_order_topic_config_to_broker && c.enable_all_topic_list && c.enable_topic_list
        );
        assert!(!c.order_message_enable && !c.cluster_test && !c.support_acting_master);
        assert_eq!(c.wait_seconds_for_service, 45);
        assert_eq!(
            c.config_black_list,
            "configBlackList;configStorePath;kvConfigPath"
        );
    }

    #[test]
    fn reads_keys_reports_unknown_and_invalid() {
        let text = "listenPort=19876\nkvConfigPath = /tmp/kv.json \norderMessageEnable=TRUE\n\
                    serverWorkerThreads=4\nbrokerClusterName=Oops\nscanNotActiveBrokerInterval=abc\n";
        let load = NamesrvConfig::load(text).unwrap();
        assert_eq!(load.config.listen_port, 19876);
        assert_eq!(load.config.kv_config_path, "/tmp/kv.json");
        assert!(load.config.order_message_enable);
        assert_eq!(load.config.accepted_netty["serverWorkerThreads"], "4");
        assert_eq!(load.unknown_keys, vec!["brokerClusterName".to_string()]);
        assert_eq!(load.invalid_values.len(), 1);
        assert!(load.invalid_values[0].starts_with("scanNotActiveBrokerInterval"));
        assert_eq!(load.config.scan_not_active_broker_interval, 5000);

        let (config, unknown) = NamesrvConfig::from_properties_text(text);
        assert_eq!(config, load.config);
        assert_eq!(unknown, load.unknown_keys);
    }

    #[test]
    fn bad_syntax_is_an_error_for_load_and_defaults_for_the_lenient_path() {
        assert!(NamesrvConfig::load("listenPort=\\u12").is_err());
        let (config, unknown) = NamesrvConfig::from_properties_text("listenPort=\\u12");
        assert_eq!(config, NamesrvConfig::default());
        assert!(unknown.is_empty());
    }

    #[test]
    fn printed_text_reads_back_identically() {
        let mut c = NamesrvConfig {
            listen_port: 1234,
            rocketmq_home: Some("/opt/rocketmq".into()),
            ..NamesrvConfig::default()
        };
        c.accepted_netty.insert("useTLS".into(), "true".into());
        c.ringmq_extra
            .insert("ringmq.cores.network".into(), "1".into());
        let text = c.to_properties_text();
        assert!(text.contains("listenPort=1234\n"));
        assert!(text.contains("rocketmqHome=/opt/rocketmq\n"));
        let (back, unknown) = NamesrvConfig::from_properties_text(&text);
        assert!(unknown.is_empty(), "{unknown:?}");
        assert_eq!(back, c);
    }

    #[test]
    fn black_list_merges_configured_keys() {
        let c = NamesrvConfig {
            config_black_list: "listenPort; kvConfigPath".into(),
            ..NamesrvConfig::default()
        };
        let list = c.black_list();
        assert!(list.contains(&"listenPort".to_string()));
        assert!(list.contains(&"rocketmqHome".to_string()));
        assert_eq!(list.iter().filter(|k| *k == "kvConfigPath").count(), 1);
    }
}
