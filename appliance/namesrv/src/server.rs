//! The running name server: the [`NamesrvProcessor`] behind the runtime's Remoting server,
//! plus the control threads RocketMQ's NamesrvController runs — the broker-expiry scan
//! every `scanNotActiveBrokerInterval` and the file persister.
//!
//! Requests are answered inline on the network core (`Reply::Now`): every operation is a
//! short critical section on in-memory tables; file writes are handed to the persister.
//! Connections that registered a broker are remembered so the expiry scan can close them
//! (a closed channel makes the broker reconnect and re-register, as with Java).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use ringmq_remoting::{RemotingCommand, RequestCode};
use ringmq_runtime::cores::CoreMap;
use ringmq_runtime::server::{
    Connection, Reply, RequestContext, RequestHandler, Server, ServerConfig, ServerTuning,
};

use crate::config::NamesrvConfig;
use crate::kvconfig::{KvConfigManager, Persister};
use crate::processor::{system_clock, NamesrvProcessor, Peer};

/// Glue between the runtime and the processor.
struct NamesrvHandler {
    processor: Arc<NamesrvProcessor>,
    /// Connections through which a broker registered: closed when the broker expires.
    broker_connections: Mutex<HashMap<u64, Connection>>,
}

impl RequestHandler for NamesrvHandler {
    fn handle(&self, request: RemotingCommand, ctx: &RequestContext) -> Reply {
        if request.is_response() {
            // The name server sends no requests of its own; a stray response is dropped.
            return Reply::Nothing;
        }
        let conn = ctx.connection();
        if request.code == RequestCode::RegisterBroker.code() {
            if let Ok(mut map) = self.broker_connections.lock() {
                map.entry(conn.id()).or_insert_with(|| conn.clone());
            }
        }
        let peer = Peer {
            connection_id: conn.id(),
            addr: conn.peer_addr(),
        };
        match self.processor.process(&request, &peer) {
            Some(response) => Reply::Now(response.into()),
            None => Reply::Nothing,
        }
    }

    fn on_close(&self, conn: &Connection) {
        if let Ok(mut map) = self.broker_connections.lock() {
            map.remove(&conn.id());
        }
        let removed = self.processor.on_connection_closed(conn.id());
        if removed > 0 {
            tracing::info!(peer = %conn.peer_addr(), removed, "broker connection closed; its routes were removed");
        }
    }
}

impl NamesrvHandler {
    fn close_connection(&self, connection_id: u64) {
        let conn = self
            .broker_connections
            .lock()
            .ok()
            .and_then(|mut map| map.remove(&connection_id));
        if let Some(conn) = conn {
            conn.close();
        }
    }
}

/// A running name server.
pub struct Namesrv {
    server: Server,
    processor: Arc<NamesrvProcessor>,
    stop_scan: mpsc::Sender<()>,
    scan_thread: JoinHandle<()>,
    persist_thread: JoinHandle<()>,
}

impl Namesrv {
    /// Loads the KV config, binds `bindAddress:listenPort` (port 0 = any free port) and
    /// starts serving. Fails with the cause: an unreadable `kvConfigPath`, a bad address,
    /// a port in use, io_uring unavailable.
    pub fn start(config: NamesrvConfig) -> std::io::Result<Namesrv> {
        let ip: IpAddr = config.bind_address.trim().parse().map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("bindAddress={:?} is not an IP address", config.bind_address),
            )
        })?;
        let listen_addr = SocketAddr::new(ip, config.listen_port);
        let kv = KvConfigManager::load(&config.kv_config_path())?;

        // One network core is plenty for the control plane. `ringmq.cores.network` picks
        // it; by default the core the store's HA stage would use, the least busy one.
        let available = ringmq_runtime::cores::available_cores();
        let core_map = CoreMap::from_properties(
            config
                .ringmq_extra
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
            available,
        )
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?
        // Planned for more cores than this process has (`ringmq.cores.available`): the
        // cores that do not exist here are not used, as the broker does.
        .applicable(available);
        let network_cores = network_cores(
            &core_map,
            config.ringmq_extra.contains_key("ringmq.cores.network"),
        );
        let mut tuning = ServerTuning::default();
        tuning
            .apply_net_properties(
                config
                    .ringmq_extra
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            )
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        // Upstream's `tls.*` keys, from the config file (upstream: `-D` properties), then
        // `tls.config.file` over them.
        let tls = ringmq_tls::TlsSettings::resolve(|key| config.ringmq_extra.get(key).cloned())
            .and_then(|settings| ringmq_tls::server_config(&settings))
            .map_err(|e| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("TLS: {e}"))
            })?;
        tuning.tls = tls;
        let mut server_config = ServerConfig::new(listen_addr, "namesrv");
        server_config.network_cores = network_cores;
        server_config.idle_timeout_ms =
            u64::try_from(config.server_channel_max_idle_time_seconds).unwrap_or(0) * 1000;

        let scan_interval = Duration::from_millis(config.scan_interval_ms());
        let (persister, persist_thread) = Persister::spawn_background()?;
        let processor = Arc::new(NamesrvProcessor::new(config, kv, persister, system_clock()));
        let handler = Arc::new(NamesrvHandler {
            processor: processor.clone(),
            broker_connections: Mutex::new(HashMap::new()),
        });
        let server = match Server::start_with(server_config, tuning, handler.clone()) {
            Ok(server) => server,
            Err(e) => {
                processor.close_persister();
                let _ = persist_thread.join();
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("name server on {listen_addr}: {e}"),
                ));
            }
        };

        let (stop_scan, stop_rx) = mpsc::channel::<()>();
        let scan_handler = handler;
        let scan_thread = std::thread::Builder::new()
            .name("namesrv-scan".into())
            .spawn(move || {
                // First scan one interval after start, then every interval, until stopped.
                while let Err(mpsc::RecvTimeoutError::Timeout) = stop_rx.recv_timeout(scan_interval)
                {
                    let now_ms = scan_handler.processor.now_ms();
                    for expired in scan_handler.processor.scan_not_active_broker(now_ms) {
                        scan_handler.close_connection(expired.connection_id);
                    }
                }
            })?;
        tracing::info!(addr = %server.local_addr(), "name server started");
        Ok(Namesrv {
            server,
            processor,
            stop_scan,
            scan_thread,
            persist_thread,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// The processor (route tables, KV, config) of this server.
    pub fn processor(&self) -> &Arc<NamesrvProcessor> {
        &self.processor
    }

    /// Stops serving (draining in-flight answers), stops the scan, and writes out any
    /// queued KV/config change before returning.
    pub fn shutdown(self) {
        let _ = self.stop_scan.send(());
        if self.scan_thread.join().is_err() {
            tracing::error!("name server scan thread panicked");
        }
        self.server.shutdown();
        self.processor.close_persister();
        if self.persist_thread.join().is_err() {
            tracing::error!("name server persist thread panicked");
        }
        tracing::info!("name server stopped");
    }
}

/// The name server's network cores: `ringmq.cores.network` when set, else the one core
/// the broker's HA stage would use (the least busy), or the last core that exists when the
/// map was planned for more cores than this process has (`ringmq.cores.available`).
fn network_cores(core_map: &CoreMap, explicit: bool) -> Vec<usize> {
    if explicit {
        return core_map.network.clone();
    }
    vec![core_map.ha.min(core_map.available.saturating_sub(1))]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A map planned for 16 cores on a 2-core host places the name server on a core
    /// that exists; on a 16-core host it takes the HA stage's core.
    #[test]
    fn the_name_server_core_exists_whatever_the_plan() {
        let planned = CoreMap::from_properties([("ringmq.cores.available", "16")], 16).unwrap();
        assert_eq!(network_cores(&planned, false), vec![planned.ha]);
        let here = planned.applicable(2);
        let cores = network_cores(&here, false);
        assert!(cores.iter().all(|&c| c < 2), "{cores:?}");
    }
}
