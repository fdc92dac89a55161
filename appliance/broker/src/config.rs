//! `BrokerConfig`: the broker's settings read from `broker.conf` (Java properties) with
//! RocketMQ's key names and defaults (BrokerConfig + MessageStoreConfig + NettyServerConfig keys),
//! printed back with `-p`, and turned into the store's and the server's settings.
//!
//! Unknown keys never stop the broker: they are kept (so `-p` and `GET_BROKER_CONFIG` show them)
//! and reported, distinguishing upstream keys ringmq does not need from plain typos.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use ringmq_remoting::body::topic::perm;
use ringmq_runtime::cores::CoreMap;
use ringmq_runtime::server::ServerTuning;

use crate::config_keys::{self, DefaultKind};

/// `brokerRole` and `flushDiskType` are the store's types: the broker parses and prints
/// them (`ConfigValue` below) and hands them to the store unchanged.
pub use ringmq_store::config::{BrokerRole, FlushDiskType};

/// A value type a config key can hold: parsed from and printed to properties text.
trait ConfigValue: Sized {
    fn parse_value(text: &str) -> Result<Self, String>;
    fn print_value(&self) -> String;
}

macro_rules! int_value {
    ($($t:ty),*) => {$(
        impl ConfigValue for $t {
            fn parse_value(text: &str) -> Result<Self, String> {
                text.trim().parse::<$t>().map_err(|e| format!("expected {} ({e})", stringify!($t)))
            }
            fn print_value(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
int_value!(u16, u32, u64, i32, i64, usize);

impl ConfigValue for bool {
    /// Java's `Boolean.parseBoolean`: only `true` (any case) is true; we are stricter and
    /// reject text that is neither, because a typo silently meaning `false` is a trap.
    fn parse_value(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err("expected true or false".to_string()),
        }
    }
    fn print_value(&self) -> String {
        self.to_string()
    }
}

impl ConfigValue for String {
    fn parse_value(text: &str) -> Result<Self, String> {
        Ok(text.trim().to_string())
    }
    fn print_value(&self) -> String {
        self.clone()
    }
}

impl ConfigValue for Option<String> {
    fn parse_value(text: &str) -> Result<Self, String> {
        let t = text.trim();
        Ok(if t.is_empty() {
            None
        } else {
            Some(t.to_string())
        })
    }
    fn print_value(&self) -> String {
        self.clone().unwrap_or_default()
    }
}

impl ConfigValue for BrokerRole {
    fn parse_value(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_uppercase().as_str() {
            "ASYNC_MASTER" => Ok(Self::AsyncMaster),
            "SYNC_MASTER" => Ok(Self::SyncMaster),
            "SLAVE" => Ok(Self::Slave),
            _ => Err("expected ASYNC_MASTER, SYNC_MASTER or SLAVE".to_string()),
        }
    }
    fn print_value(&self) -> String {
        self.name().to_string()
    }
}

impl ConfigValue for FlushDiskType {
    fn parse_value(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_uppercase().as_str() {
            "ASYNC_FLUSH" => Ok(Self::AsyncFlush),
            "SYNC_FLUSH" => Ok(Self::SyncFlush),
            _ => Err("expected ASYNC_FLUSH or SYNC_FLUSH".to_string()),
        }
    }
    fn print_value(&self) -> String {
        self.name().to_string()
    }
}

macro_rules! broker_config {
    ($( $(#[$doc:meta])* $field:ident : $ty:ty = $key:literal, $default:expr; )*) => {
        /// The broker's configuration. Field names carry units; the RocketMQ key of each field
        /// is in its doc comment.
        #[derive(Debug, Clone, PartialEq)]
        pub struct BrokerConfig {
            $( $(#[$doc])* pub $field: $ty, )*
            /// Keys ringmq does not model, kept verbatim for `-p` and `GET_BROKER_CONFIG`.
            pub extra: BTreeMap<String, String>,
        }

        impl Default for BrokerConfig {
            fn default() -> Self {
                Self { $( $field: $default, )* extra: BTreeMap::new() }
            }
        }

        impl BrokerConfig {
            /// Every modelled key, in declaration order.
            pub const KEYS: &'static [&'static str] = &[$($key),*];

            /// Sets one modelled key; `Ok(false)` when the key is not modelled.
            pub(crate) fn set_known(&mut self, key: &str, value: &str) -> Result<bool, String> {
                match key {
                    $( $key => { self.$field = <$ty as ConfigValue>::parse_value(value)?; Ok(true) } )*
                    _ => Ok(false),
                }
            }

            /// Every modelled key with its current value, as properties text would hold it.
            pub fn entries(&self) -> Vec<(&'static str, String)> {
                vec![$( ($key, ConfigValue::print_value(&self.$field)), )*]
            }
        }
    };
}

fn default_home() -> String {
    std::env::var("HOME").unwrap_or_else(|_| "/root".to_string())
}

fn default_broker_name() -> String {
    // Upstream defaults to the local host name, so two brokers on one host clash unless
    // configured; we keep that behaviour for compatibility.
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "DEFAULT_BROKER".to_string())
}

/// The first non-loopback IPv4 address of this host, as upstream's `NetworkUtil` picks it;
/// `127.0.0.1` when there is none.
pub fn local_ipv4() -> String {
    // SAFETY: getifaddrs fills a linked list we walk read-only and free exactly once.
    unsafe {
        let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
        if libc::getifaddrs(&mut head) != 0 {
            return "127.0.0.1".to_string();
        }
        let mut found = None;
        let mut cur = head;
        while !cur.is_null() {
            let ifa = &*cur;
            if !ifa.ifa_addr.is_null() && (*ifa.ifa_addr).sa_family as i32 == libc::AF_INET {
                let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                if !ip.is_loopback() && !ip.is_unspecified() {
                    found = Some(ip.to_string());
                    break;
                }
            }
            cur = ifa.ifa_next;
        }
        libc::freeifaddrs(head);
        found.unwrap_or_else(|| "127.0.0.1".to_string())
    }
}

pub const DEFAULT_MESSAGE_DELAY_LEVEL: &str =
    "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";

/// Default of `ringmq.pull.zeroCopyMinBytes`: the smallest run at which splicing was not
/// worse than the vectored write on average (server CPU per MB 0.78-1.06x, throughput
/// 0.96-1.07x over four runs; 16 KiB runs averaged worse, 64 KiB runs were always better).
/// `benches/README.md`, "pull body: splice vs vectored write".
pub const DEFAULT_ZERO_COPY_MIN_BYTES: u64 = 32 * 1024;

broker_config! {
    /// `brokerClusterName`
    broker_cluster_name: String = "brokerClusterName", "DefaultCluster".to_string();
    /// `brokerName` (default: the host name)
    broker_name: String = "brokerName", default_broker_name();
    /// `brokerId`: 0 = master, ≥ 1 = slave.
    broker_id: u64 = "brokerId", 0;
    /// `namesrvAddr`: `;`-separated `ip:port` list (default: `$NAMESRV_ADDR`).
    namesrv_addr: Option<String> = "namesrvAddr", std::env::var("NAMESRV_ADDR").ok().filter(|s| !s.is_empty());
    /// `listenPort`: the Remoting port; the VIP channel listens on `listenPort - 2`.
    listen_port: u16 = "listenPort", 10911;
    /// `bindAddress`: the address the listeners bind (NettyServerConfig).
    bind_address: String = "bindAddress", "0.0.0.0".to_string();
    /// `brokerIP1`: the address registered with name servers and written as STOREHOST.
    broker_ip1: String = "brokerIP1", local_ipv4();
    /// `brokerIP2`: the address registered for the HA service; unset = `brokerIP1`.
    broker_ip2: Option<String> = "brokerIP2", None;
    /// `haListenPort`: the HA service port; 0 (the default) = `listenPort + 1`, as upstream
    /// derives it when the key is not set to a positive port.
    ha_listen_port: u16 = "haListenPort", 0;
    /// `storePathRootDir`
    store_path_root_dir: String = "storePathRootDir", format!("{}/store", default_home());
    /// `storePathCommitLog` (default `<storePathRootDir>/commitlog`).
    store_path_commit_log: Option<String> = "storePathCommitLog", None;
    /// `brokerRole`
    broker_role: BrokerRole = "brokerRole", BrokerRole::AsyncMaster;
    /// `flushDiskType`
    flush_disk_type: FlushDiskType = "flushDiskType", FlushDiskType::AsyncFlush;
    /// `brokerPermission`: perm bits (2 write, 4 read).
    broker_permission: u32 = "brokerPermission", 6;
    /// `defaultTopicQueueNums`: queues of `TBW102` and of auto-created topics at most.
    default_topic_queue_nums: u32 = "defaultTopicQueueNums", 8;
    /// `autoCreateTopicEnable`
    auto_create_topic_enable: bool = "autoCreateTopicEnable", true;
    /// `autoCreateSubscriptionGroup`
    auto_create_subscription_group: bool = "autoCreateSubscriptionGroup", true;
    /// `clusterTopicEnable`: create a topic named after the cluster.
    cluster_topic_enable: bool = "clusterTopicEnable", true;
    /// `brokerTopicEnable`: create a topic named after the broker.
    broker_topic_enable: bool = "brokerTopicEnable", true;
    /// `traceTopicEnable`
    trace_topic_enable: bool = "traceTopicEnable", false;
    /// `msgTraceTopicName`
    msg_trace_topic_name: String = "msgTraceTopicName", "RMQ_SYS_TRACE_TOPIC".to_string();
    /// `deleteWhen`: hours of the day (`;`-separated) when expired files are deleted.
    delete_when: String = "deleteWhen", "04".to_string();
    /// `fileReservedTime`: hours a CommitLog file is kept.
    file_reserved_time_hours: u32 = "fileReservedTime", 72;
    /// `messageDelayLevel`
    message_delay_level: String = "messageDelayLevel", DEFAULT_MESSAGE_DELAY_LEVEL.to_string();
    /// `maxMessageSize`: max body bytes of one message (and of a whole batch).
    max_message_size_bytes: u32 = "maxMessageSize", 4 * 1024 * 1024;
    /// `waitTimeMillsInSendQueue`: sends queued longer get `[TIMEOUT_CLEAN_QUEUE]`.
    wait_time_in_send_queue_ms: u64 = "waitTimeMillsInSendQueue", 200;
    /// `waitTimeMillsInPullQueue`
    wait_time_in_pull_queue_ms: u64 = "waitTimeMillsInPullQueue", 5000;
    /// `osPageCacheBusyTimeOutMills`: an append longer than this refuses sends `[PC_SYNCHRONIZED]`.
    os_page_cache_busy_timeout_ms: u64 = "osPageCacheBusyTimeOutMills", 1000;
    /// `brokerFastFailureEnable`
    broker_fast_failure_enable: bool = "brokerFastFailureEnable", true;
    /// `longPollingEnable`
    long_polling_enable: bool = "longPollingEnable", true;
    /// `shortPollingTimeMills`: hold time when long polling is off.
    short_polling_time_ms: u64 = "shortPollingTimeMills", 1000;
    /// `notifyConsumerIdsChangedEnable`
    notify_consumer_ids_changed_enable: bool = "notifyConsumerIdsChangedEnable", true;
    /// `registerNameServerPeriod`
    register_name_server_period_ms: u64 = "registerNameServerPeriod", 30_000;
    /// `registerBrokerTimeoutMills`
    register_broker_timeout_ms: u64 = "registerBrokerTimeoutMills", 24_000;
    /// `flushConsumerOffsetInterval`
    flush_consumer_offset_interval_ms: u64 = "flushConsumerOffsetInterval", 5000;
    /// `channelExpiredTimeout`: a client silent this long is dropped.
    channel_expired_timeout_ms: u64 = "channelExpiredTimeout", 120_000;
    /// `enablePropertyFilter`: allow SQL92 subscriptions.
    enable_property_filter: bool = "enablePropertyFilter", false;
    /// `rejectTransactionMessage`
    reject_transaction_message: bool = "rejectTransactionMessage", false;
    /// `regionId`: echoed as `MSG_REGION` in send responses.
    region_id: String = "regionId", "DefaultRegion".to_string();
    /// `traceOn`: echoed as `TRACE_ON` in send responses.
    trace_on: bool = "traceOn", true;
    /// `slaveReadEnable`
    slave_read_enable: bool = "slaveReadEnable", false;
    /// `litePullMessageEnable`
    lite_pull_message_enable: bool = "litePullMessageEnable", true;
    /// `defaultQueryMaxNum`
    default_query_max_num: u32 = "defaultQueryMaxNum", 32;
    /// `useServerSideResetOffset`
    use_server_side_reset_offset: bool = "useServerSideResetOffset", true;
    /// `mappedFileSizeCommitLog`
    mapped_file_size_commit_log_bytes: u64 = "mappedFileSizeCommitLog", 1024 * 1024 * 1024;
    /// `mappedFileSizeConsumeQueue`
    mapped_file_size_consume_queue_bytes: u64 = "mappedFileSizeConsumeQueue", 300_000 * 20;
    /// `flushIntervalCommitLog`
    flush_interval_commit_log_ms: u64 = "flushIntervalCommitLog", 500;
    /// `syncFlushTimeout`
    sync_flush_timeout_ms: u64 = "syncFlushTimeout", 5000;
    /// `messageIndexEnable`
    message_index_enable: bool = "messageIndexEnable", true;
    /// `maxTransferBytesOnMessageInMemory`
    max_transfer_bytes_on_message_in_memory: u32 = "maxTransferBytesOnMessageInMemory", 256 * 1024;
    /// `maxTransferCountOnMessageInMemory`
    max_transfer_count_on_message_in_memory: u32 = "maxTransferCountOnMessageInMemory", 32;
    /// `diskMaxUsedSpaceRatio`
    disk_max_used_space_ratio_percent: u32 = "diskMaxUsedSpaceRatio", 75;
    /// `aclEnable`: every request needs a known AccessKey and a valid Signature (plain ACL).
    acl_enable: bool = "aclEnable", false;
    /// `timerWheelEnable`: accept timer messages (off → WHEEL_TIMER_NOT_ENABLE).
    timer_wheel_enable: bool = "timerWheelEnable", true;
    /// `enableRetryTopicV2`: POP retry topics named `%RETRY%<group>+<topic>`.
    enable_retry_topic_v2: bool = "enableRetryTopicV2", false;
    /// `retrieveMessageFromPopRetryTopicV1`: with V2 names, pops still drain the V1 topics.
    retrieve_message_from_pop_retry_topic_v1: bool = "retrieveMessageFromPopRetryTopicV1", true;
    /// `enablePopMessageThreshold`: pops skip queues with too many messages in flight.
    enable_pop_message_threshold: bool = "enablePopMessageThreshold", false;
    /// `popInflightMessageThreshold`: the in-flight count above which a queue is skipped.
    pop_inflight_message_threshold: i64 = "popInflightMessageThreshold", 10_000;
    /// `enablePopBufferMerge`: hold POP checkpoints in memory so acks meet them there.
    enable_pop_buffer_merge: bool = "enablePopBufferMerge", false;
    /// `initPopOffsetByCheckMsgInMem`: a new group's first POP with initMode MAX starts at
    /// offset 0 when the queue still starts there and its first message is in memory.
    init_pop_offset_by_check_msg_in_mem: bool = "initPopOffsetByCheckMsgInMem", true;
    /// `popCkStayBufferTime`: longest a held checkpoint stays unwritten.
    pop_ck_stay_buffer_time_ms: u64 = "popCkStayBufferTime", 10_000;
    /// `popCkStayBufferTimeOut`: a held checkpoint is written this long before its revive.
    pop_ck_stay_buffer_time_out_ms: u64 = "popCkStayBufferTimeOut", 3_000;
    /// `popCkMaxBufferSize`: checkpoints held at most.
    pop_ck_max_buffer_size: u32 = "popCkMaxBufferSize", 200_000;
    /// `popCkOffsetMaxQueueSize`: pops of one queue waiting for their offset commit
    /// beyond which checkpoints are no longer held.
    pop_ck_offset_max_queue_size: u32 = "popCkOffsetMaxQueueSize", 20_000;
    /// `timerPrecisionMs`: slot length of the timing wheel.
    timer_precision_ms: u32 = "timerPrecisionMs", 1000;
    /// `recallMessageEnable`: RECALL_MESSAGE may cancel a parked timer message (off by
    /// default, as upstream).
    recall_message_enable: bool = "recallMessageEnable", false;
    /// `allowRecallWhenBrokerNotWriteable`: recalls are served while brokerPermission
    /// forbids writes.
    allow_recall_when_broker_not_writeable: bool = "allowRecallWhenBrokerNotWriteable", true;
    /// `timerMaxDelaySec`: longest accepted timer delay.
    timer_max_delay_sec: u32 = "timerMaxDelaySec", 259_200;
    /// `timerCongestNumEachSlot`: slot count from which timer sends meet flow control.
    timer_congest_num_each_slot: i32 = "timerCongestNumEachSlot", i32::MAX;
    /// `timerRollWindowSlot`: delays beyond this many slots are rolled over.
    timer_roll_window_slot: i32 = "timerRollWindowSlot", 172_800;
    /// `timerFlushIntervalMs`: period of the timer log/wheel/checkpoint flush.
    timer_flush_interval_ms: u64 = "timerFlushIntervalMs", 1000;
    /// `mappedFileSizeTimerLog`: size of one timer log segment.
    mapped_file_size_timer_log_bytes: u64 = "mappedFileSizeTimerLog", 100 * 1024 * 1024;
    /// `timerStopEnqueue`: stop moving new timer messages into the wheel.
    timer_stop_enqueue: bool = "timerStopEnqueue", false;
    /// `timerStopDequeue`: stop delivering due timer messages.
    timer_stop_dequeue: bool = "timerStopDequeue", false;
    /// `timerSkipUnknownError`: drop a timer message on an unknown store error.
    timer_skip_unknown_error: bool = "timerSkipUnknownError", false;
    /// `timerEnableRetryUntilSuccess`: retry a refused delivery forever (else 3 attempts).
    timer_enable_retry_until_success: bool = "timerEnableRetryUntilSuccess", false;
    /// `brokerConfigPath`: the file UPDATE_BROKER_CONFIG writes accepted keys back to. Empty =
    /// the `-c` file when there is one, else `<storePathRootDir>/config/broker.properties`.
    broker_config_path: Option<String> = "brokerConfigPath", None;
    /// `configBlackList`: `;`-separated keys UPDATE_BROKER_CONFIG refuses (NO_PERMISSION), on
    /// top of `brokerConfigPath`, `rocketmqHome` and `configBlackList`, which are always refused.
    config_black_list: String = "configBlackList", "configBlackList;brokerConfigPath".to_string();
    /// `ringmq.cores.network`: comma-separated core ids for the network cores (empty = default).
    ringmq_network_cores: String = "ringmq.cores.network", String::new();
    /// `ringmq.pull.zeroCopyMinBytes`: a pull answer sends each run of records lying back to
    /// back in one CommitLog file from the file (splice, no copy) when the run has at least
    /// this many bytes; shorter runs go from memory. 0 = never from the file.
    ringmq_pull_zero_copy_min_bytes: u64 = "ringmq.pull.zeroCopyMinBytes", DEFAULT_ZERO_COPY_MIN_BYTES;
    /// `enableControllerMode`: the controllers of `controllerAddr` elect this group's master;
    /// the broker starts as a slave and changes role without a restart.
    enable_controller_mode: bool = "enableControllerMode", false;
    /// `controllerAddr`: `;`-separated controller addresses.
    controller_addr: String = "controllerAddr", String::new();
    /// `brokerHeartbeatInterval`: ms between heartbeats to every controller.
    broker_heartbeat_interval_ms: u64 = "brokerHeartbeatInterval", 1000;
    /// `controllerHeartBeatTimeoutMills`: how long a controller waits for the next heartbeat.
    controller_heartbeat_timeout_ms: u64 = "controllerHeartBeatTimeoutMills", 10_000;
    /// `syncBrokerMetadataPeriod`: ms between reads of this group's replica info.
    sync_broker_metadata_period_ms: u64 = "syncBrokerMetadataPeriod", 5000;
    /// `syncControllerMetadataPeriod`: ms between asks for the controller leader.
    sync_controller_metadata_period_ms: u64 = "syncControllerMetadataPeriod", 10_000;
    /// `checkSyncStateSetPeriod`: ms between a master's SyncStateSet checks.
    check_sync_state_set_period_ms: u64 = "checkSyncStateSetPeriod", 5000;
    /// `brokerElectionPriority`: lower is preferred in elections.
    broker_election_priority: i32 = "brokerElectionPriority", i32::MAX;
}

impl BrokerConfig {
    /// Parses `broker.conf` text on top of the defaults. Returns the config and one line per
    /// problem worth telling the operator (unknown key, unparsable value, kept default); none
    /// of them is fatal.
    pub fn from_properties_text(text: &str) -> (BrokerConfig, Vec<String>) {
        let mut config = BrokerConfig::default();
        let mut notes = Vec::new();
        for (key, value) in parse_java_properties(text) {
            config.apply(&key, &value, &mut notes);
        }
        (config, notes)
    }

    /// Applies one `key=value` (from the file or the command line), recording notes.
    pub fn apply(&mut self, key: &str, value: &str, notes: &mut Vec<String>) {
        match self.set_known(key, value) {
            Ok(true) => {}
            Ok(false) if is_store_key(key, value) || is_read_elsewhere(key) => {
                self.extra.insert(key.to_string(), value.to_string());
            }
            Ok(false) => {
                if config_keys::is_upstream_key(key) {
                    notes.push(format!(
                        "config key {key}={value} is a RocketMQ setting ringmq does not use; kept, no effect"
                    ));
                } else {
                    notes.push(format!(
                        "unknown config key {key}={value}; kept, no effect (typo?)"
                    ));
                }
                self.extra.insert(key.to_string(), value.to_string());
            }
            Err(why) => notes.push(format!(
                "config key {key}={value:?} ignored: {why}; keeping the default"
            )),
        }
    }

    /// The whole configuration as Java properties text (`-p` output, `GET_BROKER_CONFIG`).
    /// Derived keys (`brokerIP2`, `haListenPort`) show the value the broker uses.
    pub fn to_properties_text(&self) -> String {
        let mut out = String::new();
        for (key, value) in self.effective_entries() {
            let _ = writeln!(
                out,
                "{}={}",
                escape_properties(key, true),
                escape_properties(&value, false)
            );
        }
        for (key, value) in &self.extra {
            let _ = writeln!(
                out,
                "{}={}",
                escape_properties(key, true),
                escape_properties(value, false)
            );
        }
        out
    }

    /// GET_BROKER_CONFIG's body, as upstream's broker prints it: every key of upstream's four
    /// config classes with its effective value, then ringmq's own keys, sorted by key. A key
    /// ringmq does not model shows the value set in the config file or, unset, upstream's
    /// default; like upstream, a key with no value (e.g. `dLegerGroup`, or `namesrvAddr` with
    /// no name server) is left out.
    pub fn report_properties_text(&self) -> String {
        let cores = config_keys::host_cores();
        let mut all: BTreeMap<&str, String> = BTreeMap::new();
        for k in config_keys::upstream_keys() {
            let value = match k.default {
                DefaultKind::Value(v) => Some(v.to_string()),
                DefaultKind::Null => None,
                DefaultKind::Derived => config_keys::derived_default(k.key, cores),
            };
            if let Some(v) = value {
                all.insert(k.key, v);
            }
        }
        for (key, value) in config_keys::ringmq_key_defaults() {
            all.insert(key, value);
        }
        for (key, value) in self.effective_entries() {
            let absent_upstream =
                config_keys::find(key).is_some_and(|k| !matches!(k.default, DefaultKind::Value(_)));
            if value.is_empty() && absent_upstream {
                all.remove(key);
            } else {
                all.insert(key, value);
            }
        }
        for (key, value) in &self.extra {
            all.insert(key, value.clone());
        }
        let mut out = String::new();
        for (key, value) in all {
            let _ = writeln!(
                out,
                "{}={}",
                escape_properties(key, true),
                escape_properties(&value, false)
            );
        }
        out
    }

    /// Every modelled key with the value the broker uses (derived keys resolved).
    fn effective_entries(&self) -> Vec<(&'static str, String)> {
        let mut entries = self.entries();
        for (key, value) in &mut entries {
            match *key {
                "brokerIP2" => *value = self.effective_broker_ip2().to_string(),
                "haListenPort" => *value = self.effective_ha_listen_port().to_string(),
                _ => {}
            }
        }
        entries
    }

    /// Name-server addresses from `namesrvAddr` (`;`-separated, blanks dropped).
    pub fn namesrv_addrs(&self) -> Vec<String> {
        self.namesrv_addr
            .as_deref()
            .unwrap_or("")
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// `ip:port` this broker registers and writes into STOREHOST.
    pub fn broker_addr(&self) -> String {
        format!("{}:{}", self.broker_ip1, self.listen_port)
    }

    /// `ip:port` of the HA service, registered with the name servers.
    pub fn ha_server_addr(&self) -> String {
        format!(
            "{}:{}",
            self.effective_broker_ip2(),
            self.effective_ha_listen_port()
        )
    }

    /// `brokerIP2`, or `brokerIP1` when it is not set.
    pub fn effective_broker_ip2(&self) -> &str {
        match self.broker_ip2.as_deref().map(str::trim) {
            Some(ip) if !ip.is_empty() => ip,
            _ => &self.broker_ip1,
        }
    }

    /// `haListenPort`, or `listenPort + 1` when it is 0 (unset).
    pub fn effective_ha_listen_port(&self) -> u16 {
        if self.ha_listen_port == 0 {
            self.listen_port.saturating_add(1)
        } else {
            self.ha_listen_port
        }
    }

    pub fn store_root(&self) -> PathBuf {
        PathBuf::from(&self.store_path_root_dir)
    }

    pub fn commit_log_dir(&self) -> PathBuf {
        match &self.store_path_commit_log {
            Some(dir) => PathBuf::from(dir),
            None => self.store_root().join("commitlog"),
        }
    }

    /// `<storePathRootDir>/config`: where topics.json and friends live.
    pub fn config_dir(&self) -> PathBuf {
        self.store_root().join("config")
    }

    pub fn is_master(&self) -> bool {
        self.broker_role != BrokerRole::Slave && self.broker_id == 0
    }

    pub fn is_writeable(&self) -> bool {
        self.broker_permission & perm::WRITE as u32 != 0
    }

    pub fn is_readable(&self) -> bool {
        self.broker_permission & perm::READ as u32 != 0
    }

    /// Delay-level durations in ms (level 1 at index 0), or why `messageDelayLevel` is bad.
    pub fn delay_levels_ms(&self) -> Result<Vec<u64>, String> {
        parse_delay_levels(&self.message_delay_level)
    }
}

/// Parses `messageDelayLevel`: space-separated `<n><s|m|h|d>` tokens.
pub fn parse_delay_levels(text: &str) -> Result<Vec<u64>, String> {
    let mut levels = Vec::new();
    for token in text.split_whitespace() {
        let (num, unit) = token.split_at(token.len() - 1);
        let unit_ms = match unit {
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(format!("delay level {token:?} must end in s, m, h or d")),
        };
        let n: u64 = num
            .parse()
            .map_err(|_| format!("delay level {token:?} is not <number><unit>"))?;
        levels.push(n * unit_ms);
    }
    if levels.is_empty() {
        return Err("messageDelayLevel is empty".to_string());
    }
    Ok(levels)
}

/// Parses Java `.properties` text: `#`/`!` comments, `=`, `:` or blank separators, backslash
/// line continuations and escapes (`\t \n \r \f \uXXXX`). Later duplicates win at apply time.
pub fn parse_java_properties(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut logical = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if logical.is_empty()
            && (trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!'))
        {
            continue;
        }
        // A line ending in an odd number of backslashes continues on the next line.
        let trailing = trimmed.chars().rev().take_while(|c| *c == '\\').count();
        if trailing % 2 == 1 {
            logical.push_str(&trimmed[..trimmed.len() - 1]);
            continue;
        }
        logical.push_str(trimmed);
        let entry = std::mem::take(&mut logical);
        out.push(split_property(&entry));
    }
    if !logical.is_empty() {
        out.push(split_property(&logical));
    }
    out
}

fn split_property(entry: &str) -> (String, String) {
    let chars: Vec<char> = entry.chars().collect();
    let mut i = 0;
    let mut key_end = chars.len();
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '=' | ':' | ' ' | '\t' | '\x0c' => {
                key_end = i;
                break;
            }
            _ => i += 1,
        }
    }
    let key: String = chars[..key_end.min(chars.len())].iter().collect();
    let mut j = key_end;
    while j < chars.len() && matches!(chars[j], ' ' | '\t' | '\x0c') {
        j += 1;
    }
    if j < chars.len() && matches!(chars[j], '=' | ':') {
        j += 1;
    }
    while j < chars.len() && matches!(chars[j], ' ' | '\t' | '\x0c') {
        j += 1;
    }
    let value: String = chars[j.min(chars.len())..].iter().collect();
    (unescape_properties(&key), unescape_properties(&value))
}

fn unescape_properties(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\x0c'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(ch) => out.push(ch),
                    None => out.push_str(&hex),
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

pub(crate) fn escape_properties(text: &str, is_key: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, c) in text.chars().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\x0c' => out.push_str("\\f"),
            '=' | ':' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            ' ' if is_key || i == 0 => out.push_str("\\ "),
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

/// Whether the store reads `key` (a `MessageStoreConfig` key the broker passes through).
fn is_store_key(key: &str, value: &str) -> bool {
    ringmq_store::StoreConfig::default()
        .apply_property(key, value)
        .is_ok_and(|known| known)
}

/// The Remoting server tuning: defaults plus the `ringmq.net.*` keys (receive and listen
/// mode) and the `tls.*` keys, which `BrokerConfig` keeps in `extra`.
pub(crate) fn net_tuning(config: &BrokerConfig) -> Result<ServerTuning, String> {
    let mut tuning = ServerTuning::default();
    tuning
        .apply_net_properties(config.extra.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|e| e.to_string())?;
    tuning.tls = ringmq_tls::server_config(&tls_settings(config)?)?;
    Ok(tuning)
}

/// The broker's own client TLS (`tls.enable=true`), or `None` for plain connections.
pub type ClientTls = Option<std::sync::Arc<rustls::ClientConfig>>;

/// The broker's client TLS for its own connections (`tls.enable=true`), or `None`.
pub(crate) fn tls_client(config: &BrokerConfig) -> Result<ClientTls, String> {
    let settings = tls_settings(config)?;
    if !settings.client_enable {
        return Ok(None);
    }
    ringmq_tls::client_config(&settings).map(Some)
}

/// Upstream's `tls.*` settings: the keys in `broker.conf` (where Apache RocketMQ takes
/// them from `-D` system properties), then `tls.config.file` over them.
pub(crate) fn tls_settings(config: &BrokerConfig) -> Result<ringmq_tls::TlsSettings, String> {
    ringmq_tls::TlsSettings::resolve(|key| config.extra.get(key).cloned())
}

/// The core map `config` asks for and the part of it this host can apply, without
/// logging: the startup check (`config_check`) refuses what this would refuse.
pub(crate) fn plan_core_map(
    config: &BrokerConfig,
    tuning: &ServerTuning,
) -> Result<(CoreMap, CoreMap), String> {
    let real = ringmq_runtime::cores::available_cores();
    let mut keys: Vec<(&str, &str)> = config
        .extra
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    if !config.ringmq_network_cores.trim().is_empty() {
        keys.push(("ringmq.cores.network", config.ringmq_network_cores.as_str()));
    }
    let mut plan = CoreMap::from_properties(keys, real).map_err(|e| e.to_string())?;
    let pin_key = ringmq_runtime::server::PIN_NETWORK_CORES_KEY;
    if config
        .extra
        .get(pin_key)
        .is_some_and(|v| v.trim() != "auto")
    {
        plan.pinned.network = tuning.pin_network_cores;
    }
    let applied = plan.applicable(real);
    Ok((plan, applied))
}

/// Keys kept in `extra` and read by the part of the broker that owns them (the metrics
/// endpoint, the transaction check service, the network core map, the network modes), so
/// they are neither "unused" nor typos.
pub(crate) fn is_read_elsewhere(key: &str) -> bool {
    const KEYS: &[&str] = &[
        "ringmq.metricsPort",
        // The gRPC endpoint (ringmq-grpc), started beside the broker.
        crate::grpc_keys::ENABLE,
        crate::grpc_keys::PORT,
        // Upstream proxy's send check of topic message types, read by ringmq-grpc.
        crate::grpc_keys::TYPE_CHECK,
        "ringmq.aclPlainFile",
        // Where the ACL files live (`<rocketmqHome>/conf/plain_acl.yml`).
        "rocketmqHome",
        "metricsExporterType",
        "metricsPromExporterHost",
        "metricsPromExporterPort",
        "transactionTimeOut",
        "transactionCheckMax",
        "transactionCheckInterval",
    ];
    KEYS.contains(&key)
        || ringmq_tls::settings::KEYS.contains(&key)
        || key.starts_with("ringmq.cores.")
        || key.starts_with(ringmq_runtime::server::NET_KEY_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_rocketmq() {
        let c = BrokerConfig::default();
        assert_eq!(c.broker_cluster_name, "DefaultCluster");
        assert_eq!(c.broker_id, 0);
        assert_eq!(c.listen_port, 10911);
        assert_eq!(c.broker_role, BrokerRole::AsyncMaster);
        assert_eq!(c.flush_disk_type, FlushDiskType::AsyncFlush);
        assert!(c.auto_create_topic_enable);
        assert_eq!(c.default_topic_queue_nums, 8);
        assert_eq!(c.delete_when, "04");
        assert_eq!(c.file_reserved_time_hours, 72);
        assert_eq!(c.max_message_size_bytes, 4_194_304);
        assert_eq!(c.wait_time_in_send_queue_ms, 200);
        assert_eq!(c.os_page_cache_busy_timeout_ms, 1000);
        assert!(c.store_path_root_dir.ends_with("/store"));
        assert_eq!(c.delay_levels_ms().unwrap().len(), 18);
        assert_eq!(c.delay_levels_ms().unwrap()[17], 7_200_000);
    }

    #[test]
    fn parses_broker_conf_and_reports_unknown_keys() {
        let text = "# comment\nbrokerClusterName = C1\nbrokerName=broker-a\nbrokerId=0\n\
                    namesrvAddr=127.0.0.1:9876; 10.0.0.2:9876\nlistenPort:20911\n\
                    brokerRole=SYNC_MASTER\nflushDiskType=SYNC_FLUSH\ndeleteWhen=04\n\
                    sendMessageThreadPoolNums=8\nbrokerNmae=typo\nlistenPort2=x\n\
                    autoCreateTopicEnable=maybe\nstorePathRootDir=/tmp/a\\\n/b\n";
        let (c, notes) = BrokerConfig::from_properties_text(text);
        assert_eq!(c.broker_cluster_name, "C1");
        assert_eq!(c.broker_name, "broker-a");
        assert_eq!(c.listen_port, 20911);
        assert_eq!(c.namesrv_addrs(), vec!["127.0.0.1:9876", "10.0.0.2:9876"]);
        assert_eq!(c.broker_role, BrokerRole::SyncMaster);
        assert_eq!(c.flush_disk_type, FlushDiskType::SyncFlush);
        assert_eq!(c.store_path_root_dir, "/tmp/a/b");
        assert!(c.auto_create_topic_enable, "bad value keeps the default");
        assert_eq!(notes.len(), 4, "{notes:?}");
        assert!(notes
            .iter()
            .any(|n| n.contains("sendMessageThreadPoolNums") && n.contains("does not use")));
        assert!(notes
            .iter()
            .any(|n| n.contains("brokerNmae") && n.contains("typo")));
        assert!(notes.iter().any(|n| n.contains("autoCreateTopicEnable")));
        assert_eq!(
            c.extra.get("sendMessageThreadPoolNums").map(String::as_str),
            Some("8")
        );
        // Store-only keys are passed to the store, not reported.
        let (c, notes) = BrokerConfig::from_properties_text(
            "flushIntervalConsumeQueue=2000\nringmq.writeMode=direct\n",
        );
        assert!(notes.is_empty(), "{notes:?}");
        let sc = crate::disk_store::store_config(&c).unwrap();
        assert_eq!(sc.flush_interval_consume_queue_ms, 2000);
    }

    #[test]
    fn printed_config_reads_back_identically() {
        let (mut c, _) = BrokerConfig::from_properties_text("brokerName=b 1\nregionId=a=b:c\n");
        c.extra.insert("someUnknown".into(), "v\u{e9}".into());
        let text = c.to_properties_text();
        let (back, _) = BrokerConfig::from_properties_text(&text);
        // Derived keys are printed with the value in use, and read back as set.
        c.broker_ip2 = Some(c.broker_ip1.clone());
        c.ha_listen_port = c.listen_port + 1;
        assert_eq!(back, c);
        assert!(text.contains("brokerName=b 1\n"));
    }

    fn parse_report(text: &str) -> Vec<(String, String)> {
        let pairs = parse_java_properties(text);
        assert!(
            pairs.windows(2).all(|w| w[0].0 < w[1].0),
            "sorted by key, no duplicates"
        );
        pairs
    }

    #[test]
    fn broker_config_report_lists_every_upstream_key_with_its_effective_value() {
        let (mut c, _) = BrokerConfig::from_properties_text(
            "listenPort=22010\nmaxMessageSize=1048576\nsendMessageThreadPoolNums=3\n\
             flushIntervalConsumeQueue=2000\ntransactionCheckInterval=45000\ndLegerGroup=g1\n",
        );
        c.namesrv_addr = None;
        let report = parse_report(&c.report_properties_text());
        let value = |k: &str| {
            report
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        for k in config_keys::upstream_keys() {
            let listed = value(k.key).is_some();
            match k.default {
                DefaultKind::Null => {}
                DefaultKind::Value(_) | DefaultKind::Derived if k.key == "rocketmqHome" => {}
                _ if k.key == "namesrvAddr" || k.key == "brokerConfigPath" => {
                    assert!(!listed, "{} has no value here", k.key)
                }
                _ => assert!(listed, "{} missing from GET_BROKER_CONFIG", k.key),
            }
        }
        // Set keys show the set value, modelled ones the value in use, the rest upstream's.
        assert_eq!(value("maxMessageSize"), Some("1048576"));
        assert_eq!(value("sendMessageThreadPoolNums"), Some("3"));
        assert_eq!(value("flushIntervalConsumeQueue"), Some("2000"));
        assert_eq!(value("transactionCheckInterval"), Some("45000"));
        assert_eq!(value("dLegerGroup"), Some("g1"));
        assert_eq!(value("haListenPort"), Some("22011"));
        assert_eq!(value("registerBrokerTimeoutMills"), Some("24000"));
        assert_eq!(value("transactionTimeOut"), Some("6000"));
        assert_eq!(value("serverSocketBacklog"), Some("1024"));
        assert_eq!(value("clientWorkerThreads"), Some("4"));
        assert_eq!(value("ringmq.pull.zeroCopyMinBytes"), Some("32768"));
        assert_eq!(value("ringmq.writeMode"), Some("mmap"));
        assert_eq!(
            value("dLegerPeers"),
            None,
            "no value, not listed (as upstream)"
        );
        assert_eq!(value("storePathCommitLog"), None);
        let cores = config_keys::host_cores();
        assert_eq!(
            value("pullMessageThreadPoolNums"),
            Some((16 + 2 * cores).to_string().as_str())
        );
    }

    /// Keys ringmq models whose default differs from upstream's class default, and why.
    const DEFAULT_DIFFERENCES: &[(&str, &str)] = &[
        ("brokerName", "the host name (derived)"),
        ("brokerIP1", "this host's address (derived)"),
        ("brokerIP2", "brokerIP1 (derived)"),
        ("storePathRootDir", "$HOME/store (derived)"),
        ("namesrvAddr", "$NAMESRV_ADDR (derived)"),
        ("haListenPort", "listenPort + 1 (derived)"),
    ];

    #[test]
    fn modelled_defaults_are_upstream_defaults() {
        let c = BrokerConfig::default();
        let mut differ = Vec::new();
        for (key, value) in c.effective_entries() {
            let Some(k) = config_keys::find(key) else {
                assert!(
                    key.starts_with("ringmq."),
                    "{key} is neither upstream's nor ringmq's"
                );
                continue;
            };
            let upstream = match k.default {
                DefaultKind::Value(v) => v.to_string(),
                DefaultKind::Null => String::new(),
                DefaultKind::Derived => {
                    assert!(DEFAULT_DIFFERENCES.iter().any(|(d, _)| *d == key), "{key}");
                    continue;
                }
            };
            if value != upstream {
                differ.push(format!("{key}: ringmq {value:?}, upstream {upstream:?}"));
            }
        }
        assert!(
            differ.is_empty(),
            "defaults differ without a reason: {differ:#?}"
        );
    }

    #[test]
    fn store_defaults_are_upstream_defaults() {
        let base = format!("{:?}", ringmq_store::StoreConfig::default());
        let mut differ = Vec::new();
        for k in config_keys::upstream_keys() {
            let DefaultKind::Value(v) = k.default else {
                continue;
            };
            let mut sc = ringmq_store::StoreConfig::default();
            if sc.apply_property(k.key, v) == Ok(true) && format!("{sc:?}") != base {
                differ.push(k.key);
            }
        }
        assert!(
            differ.is_empty(),
            "the store's default is not upstream's: {differ:?}"
        );
    }

    #[test]
    fn network_mode_keys_reach_the_server_tuning() {
        use ringmq_runtime::server::{ListenMode, RecvMode};
        let (c, notes) = BrokerConfig::from_properties_text(
            "ringmq.net.recvMode=single\nringmq.net.listenMode=reuseport\n",
        );
        assert!(
            notes.is_empty(),
            "read by the server, not unknown: {notes:?}"
        );
        let tuning = net_tuning(&c).unwrap();
        assert_eq!(tuning.recv_mode, RecvMode::Single);
        assert_eq!(tuning.listen_mode, ListenMode::ReusePort);
        let (c, _) = BrokerConfig::from_properties_text("ringmq.net.recvMode=epoll\n");
        let e = net_tuning(&c).unwrap_err();
        assert!(e.contains("ringmq.net.recvMode"), "{e}");
    }

    #[test]
    fn ha_address_follows_listen_port_and_broker_ip1_unless_set() {
        let (c, _) = BrokerConfig::from_properties_text("listenPort=22010\nbrokerIP1=10.1.2.3\n");
        assert_eq!(c.ha_server_addr(), "10.1.2.3:22011");
        let text = c.to_properties_text();
        assert!(text.contains("\nhaListenPort=22011\n"), "{text}");
        assert!(text.contains("\nbrokerIP2=10.1.2.3\n"), "{text}");
        let (c, _) = BrokerConfig::from_properties_text(
            "listenPort=22010\nbrokerIP1=10.1.2.3\nbrokerIP2=10.9.9.9\nhaListenPort=30000\n",
        );
        assert_eq!(c.ha_server_addr(), "10.9.9.9:30000");
        assert!(c.to_properties_text().contains("\nhaListenPort=30000\n"));
        let defaults = BrokerConfig::default();
        assert_eq!(
            defaults.ha_server_addr(),
            format!("{}:10912", defaults.broker_ip1)
        );
    }

    #[test]
    fn bad_delay_levels_are_rejected() {
        assert!(parse_delay_levels("1s 5x").is_err());
        assert_eq!(parse_delay_levels("2d").unwrap(), vec![172_800_000]);
    }
}
