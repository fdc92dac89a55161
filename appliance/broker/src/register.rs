//! Name-server registration (features.md §h.2, headers.md §8.2-8.3): REGISTER_BROKER to every
//! name server every `registerNameServerPeriod` (30 s) and right after a topic change, with the
//! topic table as `RegisterBrokerBody`; UNREGISTER_BROKER at shutdown.
//!
//! Runs on its own control thread with blocking sockets: registration is off the hot cores and
//! a slow or dead name server only delays this thread (bounded by `registerBrokerTimeoutMills`).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ringmq_remoting::codes::{RequestCode, ResponseCode};
use ringmq_remoting::{FrameDecoder, RemotingCommand};

use crate::context::BrokerContext;

static OPAQUE: AtomicI32 = AtomicI32::new(1);

/// Sends one request and waits for its response on a fresh connection, within `timeout`.
pub fn call(
    addr: &str,
    request: &RemotingCommand,
    timeout: Duration,
) -> Result<RemotingCommand, String> {
    let mut stream = connect(addr, timeout)?;
    call_on(&mut stream, addr, request, timeout)
}

fn connect(addr: &str, timeout: Duration) -> Result<TcpStream, String> {
    let sock: SocketAddr = addr
        .to_socket_addrs()
        .map_err(|e| format!("bad name server address {addr:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("name server address {addr:?} resolves to nothing"))?;
    let stream =
        TcpStream::connect_timeout(&sock, timeout).map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Sends `request` on `stream` and reads until its response arrives or `timeout` passes.
fn call_on(
    stream: &mut TcpStream,
    addr: &str,
    request: &RemotingCommand,
    timeout: Duration,
) -> Result<RemotingCommand, String> {
    let deadline = Instant::now() + timeout;
    let mut out = BytesMut::new();
    request.encode(&mut out);
    stream.set_write_timeout(Some(timeout)).ok();
    stream
        .write_all(&out)
        .map_err(|e| format!("write to {addr}: {e}"))?;
    let decoder = FrameDecoder::default();
    let mut buf = BytesMut::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    loop {
        while let Some(cmd) = decoder
            .decode(&mut buf)
            .map_err(|e| format!("bad frame from {addr}: {e}"))?
        {
            if cmd.is_response() && cmd.opaque == request.opaque {
                return Ok(cmd);
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "{addr} did not answer within {} ms",
                timeout.as_millis()
            ));
        }
        stream.set_read_timeout(Some(left)).ok();
        let n = stream
            .read(&mut chunk)
            .map_err(|e| format!("read from {addr}: {e}"))?;
        if n == 0 {
            return Err(format!("{addr} closed the connection before answering"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// One long-lived connection per name server, owned by the registration thread.
///
/// A name server drops a broker's routes the moment the connection it registered on
/// closes (as Java's does), so registering on a fresh connection each time would make
/// the broker vanish from routes right after every registration. A failed call drops its
/// connection; the next call reconnects.
#[derive(Default)]
pub struct NamesrvConnections {
    streams: HashMap<String, TcpStream>,
}

impl NamesrvConnections {
    pub fn call(
        &mut self,
        addr: &str,
        request: &RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, String> {
        let mut stream = match self.streams.remove(addr) {
            Some(stream) => stream,
            None => connect(addr, timeout)?,
        };
        let response = call_on(&mut stream, addr, request, timeout)?;
        self.streams.insert(addr.to_string(), stream);
        Ok(response)
    }
}

/// The REGISTER_BROKER body: `{"filterServerList":[],"topicConfigSerializeWrapper":{…}}`.
pub fn register_body(ctx: &BrokerContext) -> String {
    let mut wrapper = ctx.topics.wrapper();
    // A broker made read-only or write-only (brokerPermission, also at runtime) advertises
    // every topic with the reduced permission, so clients route sends or pulls to other
    // brokers instead of being refused here.
    if !ctx.live.is_writeable() || !ctx.live.is_readable() {
        let broker_perm = ctx.live.broker_permission();
        for tc in wrapper.topic_config_table.values_mut() {
            tc.perm &= broker_perm;
        }
    }
    let dv = wrapper.data_version.to_json();
    let table =
        serde_json::to_string(&wrapper.topic_config_table).unwrap_or_else(|_| "{}".to_string());
    format!(
        "{{\"filterServerList\":[],\"topicConfigSerializeWrapper\":{{\"dataVersion\":{dv},\"mappingDataVersion\":{dv},\"topicConfigTable\":{table},\"topicQueueMappingDetailMap\":{{}},\"topicQueueMappingInfoMap\":{{}}}}}}"
    )
}

fn register_request(ctx: &BrokerContext) -> RemotingCommand {
    let body = register_body(ctx);
    let crc = (crc32fast::hash(body.as_bytes()) & 0x7FFF_FFFF) as i32;
    let c = &ctx.config;
    RemotingCommand::request(
        RequestCode::RegisterBroker.code(),
        OPAQUE.fetch_add(1, Ordering::Relaxed),
    )
    .with_ext("brokerName", c.broker_name.as_str())
    .with_ext("brokerAddr", c.broker_addr())
    .with_ext("clusterName", c.broker_cluster_name.as_str())
    .with_ext("haServerAddr", c.ha_server_addr())
    .with_ext("brokerId", c.broker_id.to_string())
    .with_ext("heartbeatTimeoutMillis", "120000")
    .with_ext("enableActingMaster", "false")
    .with_ext("compressed", "false")
    .with_ext("bodyCrc32", crc.to_string())
    .with_body(body)
}

/// Registers with every configured name server once; returns how many accepted.
pub fn register_all(ctx: &BrokerContext, connections: &mut NamesrvConnections) -> usize {
    let timeout = Duration::from_millis(ctx.config.register_broker_timeout_ms.clamp(100, 60_000));
    let mut ok = 0;
    for addr in ctx.config.namesrv_addrs() {
        let request = register_request(ctx);
        match connections.call(&addr, &request, timeout) {
            Ok(r) if r.code == ResponseCode::Success.code() => {
                ok += 1;
                tracing::debug!(namesrv = addr, "registered broker");
            }
            Ok(r) => {
                tracing::warn!(namesrv = addr, code = r.code, remark = ?r.remark, "name server refused REGISTER_BROKER")
            }
            Err(e) => tracing::warn!(namesrv = addr, "REGISTER_BROKER failed: {e}"),
        }
    }
    ok
}

/// Unregisters from every name server (shutdown).
pub fn unregister_all(ctx: &BrokerContext, connections: &mut NamesrvConnections) {
    let c = &ctx.config;
    for addr in c.namesrv_addrs() {
        let request = RemotingCommand::request(
            RequestCode::UnregisterBroker.code(),
            OPAQUE.fetch_add(1, Ordering::Relaxed),
        )
        .with_ext("brokerName", c.broker_name.as_str())
        .with_ext("brokerAddr", c.broker_addr())
        .with_ext("clusterName", c.broker_cluster_name.as_str())
        .with_ext("brokerId", c.broker_id.to_string());
        if let Err(e) = connections.call(&addr, &request, Duration::from_secs(3)) {
            tracing::warn!(namesrv = addr, "UNREGISTER_BROKER failed: {e}");
        }
    }
}

enum Signal {
    Now,
    Stop,
}

/// The registration thread: periodic, on demand, unregister at stop.
pub struct Registrar {
    tx: Sender<Signal>,
    handle: Option<JoinHandle<()>>,
}

impl Registrar {
    /// Starts the thread and returns once the first registration round has been tried
    /// (bounded by the per-namesrv timeout), so a broker reports itself ready only after
    /// it is routable — or after every name server had its chance to answer.
    pub fn start(ctx: Arc<BrokerContext>) -> Self {
        let (tx, rx) = mpsc::channel();
        let (first_round_tx, first_round_rx) = mpsc::sync_channel::<usize>(1);
        let first_round_wait = Duration::from_millis(
            ctx.config.register_broker_timeout_ms.clamp(100, 60_000)
                * (ctx.config.namesrv_addrs().len() as u64 + 1),
        );
        let period = Duration::from_millis(
            ctx.config
                .register_name_server_period_ms
                .clamp(1000, 60_000),
        );
        let handle = std::thread::Builder::new()
            .name("ringmq-register".into())
            .spawn(move || {
                if ctx.config.namesrv_addrs().is_empty() {
                    tracing::warn!("namesrvAddr is not set: this broker is not registered with any name server");
                }
                let mut connections = NamesrvConnections::default();
                let mut first_round = Some(first_round_tx);
                loop {
                    let accepted = if ctx.config.namesrv_addrs().is_empty() {
                        0
                    } else {
                        register_all(&ctx, &mut connections)
                    };
                    if let Some(done) = first_round.take() {
                        let _ = done.send(accepted);
                    }
                    match rx.recv_timeout(period) {
                        Ok(Signal::Now) | Err(RecvTimeoutError::Timeout) => {
                            // Coalesce bursts of topic changes into one registration.
                            while let Ok(Signal::Now) = rx.try_recv() {}
                        }
                        Ok(Signal::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                unregister_all(&ctx, &mut connections);
            })
            .expect("spawn the registration thread");
        match first_round_rx.recv_timeout(first_round_wait) {
            Ok(accepted) => tracing::info!(accepted, "first name server registration done"),
            Err(_) => tracing::warn!(
                wait_ms = first_round_wait.as_millis() as u64,
                "first name server registration still pending; starting anyway"
            ),
        }
        Self {
            tx,
            handle: Some(handle),
        }
    }

    /// A sender that triggers an immediate registration (for topic changes).
    pub fn trigger(&self) -> impl Fn() + Send + Sync + 'static {
        let tx = std::sync::Mutex::new(self.tx.clone());
        move || {
            let _ = tx.lock().map(|t| t.send(Signal::Now));
        }
    }

    pub fn stop(mut self) {
        let _ = self.tx.send(Signal::Stop);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;
    use crate::store_api::MemStore;

    #[test]
    fn body_carries_the_topic_table() {
        let ctx = BrokerContext::for_tests(BrokerConfig::default(), Arc::new(MemStore::new()));
        let body: serde_json::Value = serde_json::from_str(&register_body(&ctx)).unwrap();
        let tbw = &body["topicConfigSerializeWrapper"]["topicConfigTable"]["TBW102"];
        assert_eq!(tbw["perm"], 7);
        assert_eq!(tbw["topicName"], "TBW102");
        assert!(body["topicConfigSerializeWrapper"]["dataVersion"]["counter"].is_number());
        let req = register_request(&ctx);
        assert_eq!(req.code, 103);
        assert_eq!(req.ext_fields.get("brokerId"), Some("0"));
        let crc = (crc32fast::hash(&req.body) & 0x7FFF_FFFF).to_string();
        assert_eq!(req.ext_fields.get("bodyCrc32"), Some(crc.as_str()));
    }

    #[test]
    fn call_reports_unreachable_name_server() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        let err = call(
            &addr,
            &RemotingCommand::request(105, 1),
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert!(err.contains("connect"), "{err}");
    }
}
