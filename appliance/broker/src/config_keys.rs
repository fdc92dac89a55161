//! Every configuration key Apache RocketMQ 5.3.4 reads from `broker.conf` (BrokerConfig,
//! MessageStoreConfig, NettyServerConfig, NettyClientConfig) with upstream's default, kept as
//! data in `upstream_broker_config.tsv` beside this file.
//!
//! Two uses: a key in this list that ringmq does not model is reported as "accepted, no effect"
//! instead of "unknown", so operators can tell a typo from a setting ringmq simply does not
//! need; and GET_BROKER_CONFIG lists every one of them, as upstream does, so scripts that read a
//! key find it.

use std::sync::OnceLock;

/// The golden list: key, upstream class, kind, default (tab-separated; `#` comments).
const UPSTREAM_TABLE: &str = include_str!("upstream_broker_config.tsv");

/// How upstream's default of a key is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DefaultKind {
    /// A fixed value (the text, possibly empty).
    Value(&'static str),
    /// No default: upstream leaves the key out of GET_BROKER_CONFIG until it is set.
    Null,
    /// Depends on the host or on another key; see [`derived_default`].
    Derived,
}

/// One upstream key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UpstreamKey {
    pub key: &'static str,
    /// `BrokerConfig`, `MessageStoreConfig`, `NettyServerConfig` or `NettyClientConfig`.
    pub class: &'static str,
    pub default: DefaultKind,
}

/// The upstream keys, sorted bytewise (the table is kept sorted; a test checks it).
pub(crate) fn upstream_keys() -> &'static [UpstreamKey] {
    static KEYS: OnceLock<Vec<UpstreamKey>> = OnceLock::new();
    KEYS.get_or_init(|| parse_table(UPSTREAM_TABLE))
}

/// Whether `key` is one of upstream's broker settings.
pub(crate) fn is_upstream_key(key: &str) -> bool {
    find(key).is_some()
}

/// Upstream's entry for `key`.
pub(crate) fn find(key: &str) -> Option<&'static UpstreamKey> {
    let keys = upstream_keys();
    keys.binary_search_by(|k| k.key.cmp(key))
        .ok()
        .map(|i| &keys[i])
}

fn parse_table(text: &'static str) -> Vec<UpstreamKey> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let mut cols = line.splitn(4, '\t');
            let key = cols.next().unwrap_or_default();
            let class = cols.next().unwrap_or_default();
            let kind = cols.next().unwrap_or_default();
            let value = cols.next().unwrap_or_default();
            let default = match kind {
                "null" => DefaultKind::Null,
                "derived" => DefaultKind::Derived,
                _ => DefaultKind::Value(value),
            };
            UpstreamKey {
                key,
                class,
                default,
            }
        })
        .collect()
}

/// Upstream's default of a `derived` key that ringmq does not model itself: the thread-pool
/// sizes upstream computes from the host's cores (ringmq has no such pools; the value is
/// shown so a script comparing brokers sees what a Java broker on this host would hold) and
/// `rocketmqHome` from `ROCKETMQ_HOME`. `None` when upstream would hold no value.
pub(crate) fn derived_default(key: &str, cores: usize) -> Option<String> {
    let send_threads = cores.min(4);
    let n = match key {
        "sendMessageThreadPoolNums" | "putMessageFutureThreadPoolNums" => send_threads,
        "pullMessageThreadPoolNums"
        | "litePullMessageThreadPoolNums"
        | "processReplyMessageThreadPoolNums" => 16 + 2 * cores,
        "queryMessageThreadPoolNums" => 8 + cores,
        "heartbeatThreadPoolNums" => cores.min(32),
        "endTransactionThreadPoolNums" => (8 + 2 * cores).max(4 * send_threads),
        "clientCallbackExecutorThreads" => cores,
        "rocketmqHome" => {
            return std::env::var("ROCKETMQ_HOME")
                .ok()
                .filter(|h| !h.is_empty())
        }
        _ => return None,
    };
    Some(n.to_string())
}

/// Defaults of ringmq's own keys that are not `BrokerConfig` fields (the store's, the network
/// server's, the metrics endpoint's), shown by GET_BROKER_CONFIG beside upstream's keys.
/// The `ringmq.cores.*` keys have no fixed default (the core map is planned per host).
pub(crate) fn ringmq_key_defaults() -> Vec<(&'static str, String)> {
    use ringmq_runtime::server as net;
    vec![
        ("ringmq.appendPerfSampleEvery", "16".to_string()),
        ("ringmq.directWriteRingSize", (64u64 << 20).to_string()),
        (
            "ringmq.haThreadNice",
            ringmq_store::config::DEFAULT_HA_THREAD_NICE.to_string(),
        ),
        ("ringmq.metricsPort", "0".to_string()),
        (
            crate::grpc_keys::ENABLE,
            crate::grpc_keys::DEFAULT_ENABLE.to_string(),
        ),
        (
            crate::grpc_keys::PORT,
            crate::grpc_keys::DEFAULT_PORT.to_string(),
        ),
        (
            "ringmq.aclPlainFile",
            ringmq_acl::store::DEFAULT_PLAIN_FILE.to_string(),
        ),
        (net::FD_RESERVE_KEY, "auto".to_string()),
        (net::LISTEN_MODE_KEY, "acceptor".to_string()),
        (
            net::MAX_OUTPUT_BYTES_PER_CORE_KEY,
            net::DEFAULT_MAX_OUTPUT_BYTES_PER_CORE.to_string(),
        ),
        (
            net::MAX_PARTIAL_FRAME_BYTES_PER_CORE_KEY,
            net::DEFAULT_MAX_PARTIAL_FRAME_BYTES_PER_CORE.to_string(),
        ),
        (net::PIN_NETWORK_CORES_KEY, "auto".to_string()),
        (net::RECV_MODE_KEY, "single".to_string()),
        ("ringmq.writeMode", "mmap".to_string()),
    ]
}

/// The host's core count as the JVM reports it (`availableProcessors`).
pub(crate) fn host_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_complete_and_well_formed() {
        let keys = upstream_keys();
        assert_eq!(keys.len(), 441, "upstream 5.3.4 reports 441 keys");
        assert!(
            keys.windows(2).all(|w| w[0].key < w[1].key),
            "sorted, no duplicates"
        );
        for k in keys {
            assert!(
                matches!(
                    k.class,
                    "BrokerConfig"
                        | "MessageStoreConfig"
                        | "NettyServerConfig"
                        | "NettyClientConfig"
                ),
                "{k:?}"
            );
        }
        assert_eq!(
            find("maxMessageSize").map(|k| k.default),
            Some(DefaultKind::Value("4194304"))
        );
        assert_eq!(
            find("registerBrokerTimeoutMills").map(|k| k.default),
            Some(DefaultKind::Value("24000"))
        );
        assert_eq!(
            find("transactionCheckInterval").map(|k| k.default),
            Some(DefaultKind::Value("30000"))
        );
        assert_eq!(
            find("dLegerGroup").map(|k| k.default),
            Some(DefaultKind::Null)
        );
        assert!(is_upstream_key("brokerName"));
        assert!(!is_upstream_key("brokerNmae"));
    }

    #[test]
    fn ringmq_key_defaults_are_the_defaults_in_use() {
        let store_base = format!("{:?}", ringmq_store::StoreConfig::default());
        let net_base = format!("{:?}", ringmq_runtime::server::ServerTuning::default());
        for (key, value) in ringmq_key_defaults() {
            let mut sc = ringmq_store::StoreConfig::default();
            if sc.apply_property(key, &value) == Ok(true) {
                assert_eq!(format!("{sc:?}"), store_base, "{key}={value}");
                continue;
            }
            if key.starts_with(ringmq_runtime::server::NET_KEY_PREFIX) {
                let mut t = ringmq_runtime::server::ServerTuning::default();
                t.apply_net_properties([(key, value.as_str())]).unwrap();
                assert_eq!(format!("{t:?}"), net_base, "{key}={value}");
                continue;
            }
            let (mut c, _) = crate::config::BrokerConfig::from_properties_text("");
            if key == "ringmq.aclPlainFile" {
                let unset = crate::acl::plain_file(&c).to_string();
                c.extra.insert(key.to_string(), value);
                assert_eq!(crate::acl::plain_file(&c), unset);
                continue;
            }
            // Read by ringmq-grpc, which takes its defaults from `grpc_keys` itself.
            if key == crate::grpc_keys::ENABLE || key == crate::grpc_keys::PORT {
                continue;
            }
            assert_eq!(key, "ringmq.metricsPort");
            c.extra.insert(key.to_string(), value);
            assert_eq!(crate::metrics::endpoint_addr(&c), Ok(None));
        }
    }

    #[test]
    fn derived_thread_pool_defaults_follow_upstream_formulas() {
        // Values a Java broker reports on 1-core and 8-core hosts.
        for (cores, send, pull, query, heartbeat, end_tx) in
            [(1, 1, 18, 9, 1, 10), (8, 4, 32, 16, 8, 24)]
        {
            let d = |k| derived_default(k, cores).unwrap();
            assert_eq!(d("sendMessageThreadPoolNums"), send.to_string());
            assert_eq!(d("pullMessageThreadPoolNums"), pull.to_string());
            assert_eq!(d("queryMessageThreadPoolNums"), query.to_string());
            assert_eq!(d("heartbeatThreadPoolNums"), heartbeat.to_string());
            assert_eq!(d("endTransactionThreadPoolNums"), end_tx.to_string());
        }
    }
}
