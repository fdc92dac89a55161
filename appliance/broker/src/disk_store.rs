//! The broker's disk store: the `StoreConfig` built from the broker's configuration (every
//! `broker.conf` key the store understands is passed through, then the STOREHOST) and
//! opening `ringmq_store::MessageStore` with it.

use std::net::SocketAddr;

use ringmq_store as store;

use crate::config::BrokerConfig;

/// The store's config for this broker: defaults, then every modelled and extra key of
/// `config` the store knows, then the STOREHOST.
pub fn store_config(config: &BrokerConfig) -> Result<store::StoreConfig, String> {
    let mut sc = store::StoreConfig::default();
    for (key, value) in config
        .entries()
        .into_iter()
        .chain(config.extra.iter().map(|(k, v)| (k.as_str(), v.clone())))
    {
        if key == "storePathCommitLog" && value.is_empty() {
            continue;
        }
        sc.apply_property(key, &value).map_err(|e| format!("{e}"))?;
    }
    sc.store_host = store_host_addr(&config.broker_ip1, config.listen_port);
    // Replication: the HA server listens beside the broker (haListenPort, listenPort + 1
    // unless set).
    sc.ha_listen_port = config.effective_ha_listen_port();
    sc.ha_bind_ip = config.bind_address.parse().ok();
    Ok(sc)
}

/// Opens the store `config` describes (recovering it if the last exit was not clean).
pub fn open(config: &BrokerConfig) -> Result<store::MessageStore, String> {
    let sc = store_config(config)?;
    let root = sc.store_path_root_dir.display().to_string();
    store::MessageStore::open(sc).map_err(|e| format!("cannot open the store at {root}: {e}"))
}

/// The STOREHOST the broker writes: `brokerIP1:listenPort`, falling back to loopback when
/// `brokerIP1` is not an IP literal.
pub fn store_host_addr(ip: &str, port: u16) -> SocketAddr {
    let ip = ip
        .parse()
        .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
    SocketAddr::new(ip, port)
}

#[cfg(test)]
mod ha_mapping_tests {
    use super::*;

    /// broker.conf's replication keys reach the store: the role, the master's HA address,
    /// the SYNC_MASTER knobs, and the HA port (listenPort + 1 when unset) on bindAddress.
    #[test]
    fn broker_conf_replication_keys_reach_the_store_config() {
        let (mut config, _) = BrokerConfig::from_properties_text(
            "brokerRole=SLAVE\nbrokerId=1\nhaMasterAddress=127.0.0.1:20912\n\
             inSyncReplicas=2\nslaveTimeout=1500\nbindAddress=127.0.0.1\n",
        );
        config.listen_port = 20911;
        let sc = store_config(&config).unwrap();
        assert_eq!(sc.broker_role, store::BrokerRole::Slave);
        assert_eq!(sc.ha_master_address.as_deref(), Some("127.0.0.1:20912"));
        assert_eq!((sc.in_sync_replicas, sc.slave_timeout_ms), (2, 1500));
        assert_eq!(sc.ha_listen_port, 20912);
        assert_eq!(sc.ha_bind_ip, Some([127, 0, 0, 1].into()));
    }
}
