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
