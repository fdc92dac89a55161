//! Registration across a name server restart: the broker sees the restarted name server
//! close its connection and registers again at once, so its routes are back within a few
//! seconds instead of after the next `registerNameServerPeriod` (30 s).

use std::net::TcpListener;
use std::time::{Duration, Instant};

use ringmq_broker::{Broker, BrokerConfig};
use ringmq_namesrv::{Namesrv, NamesrvConfig};
use ringmq_tests::{base_broker_conf, namesrv_conf, route_brokers, unique, wait_until, TempDir};

/// A loopback port free right now, for a name server that must come back on the same port.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

fn start_namesrv(dir: &std::path::Path, port: u16) -> Namesrv {
    let (cfg, unknown) = NamesrvConfig::from_properties_text(&namesrv_conf(dir, port));
    assert!(unknown.is_empty(), "{unknown:?}");
    // The old listener's port may linger a moment after shutdown: retry for a bounded time.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match Namesrv::start(cfg.clone()) {
            Ok(ns) => return ns,
            Err(e) if Instant::now() < deadline => {
                eprintln!("namesrv on port {port} not up yet: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("namesrv on port {port}: {e}"),
        }
    }
}

#[test]
fn routes_come_back_within_seconds_of_a_namesrv_restart() {
    let dir = TempDir::new("ns-restart");
    let ns_dir = dir.path().join("namesrv");
    std::fs::create_dir_all(&ns_dir).expect("namesrv dir");
    let port = free_port();
    let namesrv = start_namesrv(&ns_dir, port);
    let ns_addr = format!("127.0.0.1:{port}");
    let conf = base_broker_conf(
        &unique("broker"),
        &unique("cluster"),
        &ns_addr,
        &dir.path().join("store"),
    );
    // The default period: without the reconnect the routes would be gone for 30 s or more.
    let (cfg, _) = BrokerConfig::from_properties_text(&conf);
    assert_eq!(cfg.register_name_server_period_ms, 30_000);
    let broker = Broker::start(cfg).expect("broker starts");
    wait_until(
        "the TBW102 route before the restart",
        Duration::from_secs(20),
        Duration::from_millis(50),
        || route_brokers(&ns_addr, "TBW102"),
    );

    namesrv.shutdown();
    let restarted = start_namesrv(&ns_dir, port);
    let since_restart = Instant::now();
    wait_until(
        "the TBW102 route after the namesrv restart",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || route_brokers(&ns_addr, "TBW102"),
    );
    let took = since_restart.elapsed();
    assert!(took < Duration::from_secs(10), "routes back after {took:?}");
    broker.shutdown();
    restarted.shutdown();
}
