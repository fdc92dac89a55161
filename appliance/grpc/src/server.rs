//! Starting and stopping the gRPC endpoint: its settings from `broker.conf`, its listener,
//! the tokio runtime thread that serves it (off the network cores) and the bridge thread
//! that calls the broker.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use ringmq_broker::context::BrokerContext;
use ringmq_broker::grpc_keys;
use ringmq_broker::Broker;
use ringmq_runtime::RequestHandler;
use tokio::sync::oneshot;
use tonic::transport::server::TcpIncoming;

use crate::bridge::BridgeThread;
use crate::pb::messaging_service_server::MessagingServiceServer;
use crate::service::Messaging;

/// `ringmq.grpc.enable`: whether the broker serves gRPC (default true).
pub const ENABLE_KEY: &str = grpc_keys::ENABLE;
/// `ringmq.grpc.port`: where (default 8081, upstream proxy's `grpcServerPort`; 0 picks a
/// free port, for tests).
pub const PORT_KEY: &str = grpc_keys::PORT;
pub const DEFAULT_PORT: u16 = grpc_keys::DEFAULT_PORT;
/// How long a stopping endpoint lets calls in flight finish.
pub const SHUTDOWN_GRACE_MS: u64 = 2000;
/// Largest gRPC message accepted: a batch of 4 MiB bodies with their properties.
pub const MAX_DECODING_BYTES: usize = 16 << 20;

/// The endpoint's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcSettings {
    pub enable: bool,
    pub port: u16,
}

impl GrpcSettings {
    /// Reads `ringmq.grpc.*` from the broker's config.
    pub fn from_broker(ctx: &BrokerContext) -> Result<Self, String> {
        let extra = |k: &str| ctx.config.extra.get(k).map(|v| v.trim().to_string());
        let enable = match extra(ENABLE_KEY).as_deref() {
            None => grpc_keys::DEFAULT_ENABLE,
            Some("true") => true,
            Some("false") => false,
            Some(v) => return Err(format!("{ENABLE_KEY}={v:?} is neither true nor false")),
        };
        let port = match extra(PORT_KEY) {
            None => DEFAULT_PORT,
            Some(v) => v
                .parse()
                .map_err(|_| format!("{PORT_KEY}={v:?} is not a port number"))?,
        };
        Ok(Self { enable, port })
    }
}

/// A running gRPC endpoint.
pub struct GrpcServer {
    local_addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    bridge: Option<BridgeThread>,
}

impl GrpcServer {
    /// Starts the endpoint `broker.conf` asks for beside `broker`; `Ok(None)` when
    /// `ringmq.grpc.enable=false`.
    pub fn start_for(broker: &Broker) -> Result<Option<GrpcServer>, String> {
        let ctx = broker.context();
        let settings = GrpcSettings::from_broker(ctx)?;
        if !settings.enable {
            tracing::info!("gRPC endpoint off ({ENABLE_KEY}=false)");
            return Ok(None);
        }
        let ip = bind_ip(ctx);
        let addr = SocketAddr::new(ip, settings.port);
        Self::start(ctx.clone(), broker.handler(), addr).map(Some)
    }

    /// Serves gRPC on `addr`, calling `handler` for `ctx`'s broker.
    pub fn start(
        ctx: Arc<BrokerContext>,
        handler: Arc<dyn RequestHandler>,
        addr: SocketAddr,
    ) -> Result<GrpcServer, String> {
        let listener = TcpListener::bind(addr).map_err(|e| {
            format!("the gRPC endpoint cannot listen on {addr}: {e} (pick a free {PORT_KEY}, or set {ENABLE_KEY}=false)")
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("gRPC listener on {addr}: {e}"))?;
        let local_addr = listener
            .local_addr()
            .map_err(|e| format!("gRPC listener on {addr}: {e}"))?;
        let bridge = BridgeThread::start(handler, local_addr)
            .map_err(|e| format!("cannot start the gRPC bridge: {e}"))?;
        let service = Messaging::new(ctx, bridge.bridge(), local_addr);
        let (shutdown, stopped) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("grpc".into())
            .spawn(move || serve(listener, service, stopped))
            .map_err(|e| format!("cannot start the gRPC thread: {e}"))?;
        tracing::info!(addr = %local_addr, "gRPC endpoint (apache.rocketmq.v2) started");
        Ok(GrpcServer {
            local_addr,
            shutdown: Some(shutdown),
            thread: Some(thread),
            bridge: Some(bridge),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, ends open streams and joins both threads. Call before the broker's
    /// own shutdown, so no gRPC request reaches a stopping broker.
    pub fn stop(mut self) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(b) = self.bridge.take() {
            b.stop();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        tracing::info!(addr = %self.local_addr, "gRPC endpoint stopped");
    }
}

/// The broker's own bind address (`ringmq.bindAddress`), so both protocols listen alike.
fn bind_ip(ctx: &BrokerContext) -> IpAddr {
    ctx.config
        .bind_address
        .parse()
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
}

/// The gRPC thread: a current-thread tokio runtime serving until `stopped` fires.
fn serve(listener: TcpListener, service: Messaging, stopped: oneshot::Receiver<()>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("gRPC endpoint cannot build its runtime: {e}");
            return;
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!("gRPC endpoint cannot adopt its listener: {e}");
                return;
            }
        };
        // Accepted sockets get TCP_NODELAY here: the builder's `tcp_nodelay` applies only
        // to listeners tonic binds itself. Without it a small answer written after another
        // waits for the client's delayed ACK (milliseconds per AckMessage).
        let incoming = match TcpIncoming::from_listener(listener, true, None) {
            Ok(i) => i,
            Err(e) => {
                tracing::error!("gRPC endpoint cannot adopt its listener: {e}");
                return;
            }
        };
        let svc = MessagingServiceServer::new(service)
            .max_decoding_message_size(MAX_DECODING_BYTES)
            .max_encoding_message_size(MAX_DECODING_BYTES);
        let (drain, draining) = oneshot::channel::<()>();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = draining.await;
                }),
        );
        let _ = stopped.await;
        let _ = drain.send(());
        // Telemetry streams stay open for as long as their clients run: calls in flight
        // get a grace period, then the runtime drops whatever is left.
        match tokio::time::timeout(Duration::from_millis(SHUTDOWN_GRACE_MS), server).await {
            Ok(Ok(Err(e))) => tracing::error!("gRPC endpoint failed: {e}"),
            Ok(_) => {}
            Err(_) => tracing::info!(
                "gRPC calls still open {SHUTDOWN_GRACE_MS} ms after shutdown began; closed"
            ),
        }
    });
}
