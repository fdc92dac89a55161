//! Name-server registration (features.md §h.2, headers.md §8.2-8.3): REGISTER_BROKER to every
//! name server every `registerNameServerPeriod` (30 s) and right after a topic change, with the
//! topic table as `RegisterBrokerBody`; UNREGISTER_BROKER at shutdown.
//!
//! A name server that restarted has no routes of this broker: its closed connection is seen
//! within [`WATCH_INTERVAL_MS`] and the broker registers again on a fresh connection at once,
//! retrying with short back-off steps ([`RETRY_BACKOFF_MS`]) while it is still down, so
//! routes come back seconds after the restart rather than up to two periods later.
//!
//! A slave takes its master's addresses from the answer ([`RegisterAnswers`], which the slave's master link implements).
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
use ringmq_remoting::body::register::RegisterBrokerBody;
use ringmq_remoting::body::topic::TopicConfigAndMappingSerializeWrapper;
use ringmq_remoting::codes::{RequestCode, ResponseCode};
use ringmq_remoting::{FrameDecoder, RemotingCommand};

use crate::config::ClientTls;
use crate::context::BrokerContext;

/// Who hears the name servers' answers to a registration (a slave learns its master's
/// addresses from them). A trait here keeps this module below the slave sync.
pub trait RegisterAnswers: Send + Sync {
    fn on_register_answer(&self, ctx: &BrokerContext, answer: &RemotingCommand);
}

static OPAQUE: AtomicI32 = AtomicI32::new(1);

/// Sends one request and waits for its response on a fresh connection, within `timeout`.
pub fn call(
    addr: &str,
    request: &RemotingCommand,
    timeout: Duration,
    tls: &ClientTls,
) -> Result<RemotingCommand, String> {
    let mut stream = connect(addr, timeout, tls)?;
    call_on(&mut stream, addr, request, timeout)
}

/// A connection to a name server or a master: plain, or TLS when the broker runs with
/// `tls.enable=true` (their ports may be `enforcing`).
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Self::Plain(s) => s,
            Self::Tls(s) => &s.sock,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Self::Plain(s) => s.read(buf),
            Self::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Plain(s) => s.write(buf),
            Self::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Plain(s) => s.flush(),
            Self::Tls(s) => s.flush(),
        }
    }
}

fn connect(addr: &str, timeout: Duration, tls: &ClientTls) -> Result<Stream, String> {
    let sock: SocketAddr = addr
        .to_socket_addrs()
        .map_err(|e| format!("bad address {addr:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("address {addr:?} resolves to nothing"))?;
    let stream =
        TcpStream::connect_timeout(&sock, timeout).map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let Some(config) = tls else {
        return Ok(Stream::Plain(stream));
    };
    let name = rustls::pki_types::ServerName::IpAddress(sock.ip().into());
    let conn = rustls::ClientConnection::new(config.clone(), name)
        .map_err(|e| format!("TLS to {addr}: {e}"))?;
    stream.set_read_timeout(Some(timeout)).ok();
    stream.set_write_timeout(Some(timeout)).ok();
    let mut tls = rustls::StreamOwned::new(conn, stream);
    while tls.conn.is_handshaking() {
        tls.conn
            .complete_io(&mut tls.sock)
            .map_err(|e| format!("TLS handshake with {addr} failed: {e}"))?;
    }
    Ok(Stream::Tls(Box::new(tls)))
}

/// Sends `request` on `stream` and reads until its response arrives or `timeout` passes.
fn call_on(
    stream: &mut Stream,
    addr: &str,
    request: &RemotingCommand,
    timeout: Duration,
) -> Result<RemotingCommand, String> {
    let deadline = Instant::now() + timeout;
    let mut out = BytesMut::new();
    request.encode(&mut out);
    stream.tcp().set_write_timeout(Some(timeout)).ok();
    stream
        .write_all(&out)
        .and_then(|()| stream.flush())
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
        stream.tcp().set_read_timeout(Some(left)).ok();
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
/// the broker vanish from routes right after every registration. A call that fails on a
/// kept connection (the name server restarted since) is tried once more, at once, on a
/// fresh connection within what is left of its timeout.
#[derive(Default)]
pub struct NamesrvConnections {
    streams: HashMap<String, Stream>,
    tls: ClientTls,
}

impl NamesrvConnections {
    pub fn new(tls: ClientTls) -> Self {
        Self {
            streams: HashMap::new(),
            tls,
        }
    }

    pub fn call(
        &mut self,
        addr: &str,
        request: &RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, String> {
        let deadline = Instant::now() + timeout;
        if let Some(mut stream) = self.streams.remove(addr) {
            match call_on(&mut stream, addr, request, timeout) {
                Ok(response) => {
                    self.streams.insert(addr.to_string(), stream);
                    return Ok(response);
                }
                Err(e) => {
                    tracing::info!(namesrv = addr, "kept connection failed ({e}); reconnecting")
                }
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "{addr} did not answer within {} ms",
                timeout.as_millis()
            ));
        }
        let mut stream = connect(addr, left, &self.tls)?;
        let response = call_on(&mut stream, addr, request, left)?;
        self.streams.insert(addr.to_string(), stream);
        Ok(response)
    }

    /// Drops every kept connection the name server has closed (it restarted, or expired
    /// this broker) and returns their addresses. Never blocks.
    pub fn take_closed(&mut self) -> Vec<String> {
        let closed: Vec<String> = self
            .streams
            .iter()
            .filter(|(_, stream)| is_closed_by_peer(stream.tcp()))
            .map(|(addr, _)| addr.clone())
            .collect();
        for addr in &closed {
            self.streams.remove(addr);
        }
        closed
    }
}

/// Whether the peer closed `stream`: a non-blocking peek sees end of stream or an error.
/// Name servers send nothing unasked, so pending bytes would be a stray answer, not a close.
fn is_closed_by_peer(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return true;
    }
    let mut byte = [0u8; 1];
    let closed = match stream.peek(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    };
    closed || stream.set_nonblocking(false).is_err()
}

/// The REGISTER_BROKER body: `{"filterServerList":[],"topicConfigSerializeWrapper":{…}}`.
pub fn register_body(ctx: &BrokerContext) -> String {
    let mut wrapper = ctx.topics.wrapper();
    // A broker made read-only or write-only (brokerPermission, also at runtime) advertises
    // every topic with the reduced permission, so clients route sends or pulls to other
    // brokers instead of being refused here.
    if !ctx.live.is_writeable() || !ctx.live.is_readable() {
        // Permission bits fit in the low nibble, so the mask is the same as a Java int.
        let broker_perm = ctx.live.broker_permission() as i32;
        for tc in wrapper.topic_config_table.values_mut() {
            tc.perm &= broker_perm;
        }
    }
    RegisterBrokerBody {
        topic_config_serialize_wrapper: TopicConfigAndMappingSerializeWrapper {
            mapping_data_version: wrapper.data_version,
            ..wrapper.into()
        },
        filter_server_list: Vec::new(),
    }
    .encode_json()
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
    .with_ext("brokerId", ctx.role.broker_id().to_string())
    .with_ext("heartbeatTimeoutMillis", "120000")
    .with_ext("enableActingMaster", "false")
    .with_ext("compressed", "false")
    .with_ext("bodyCrc32", crc.to_string())
    .with_body(body)
}

/// Registers with every name server of `addrs` once; returns those that did not accept.
/// The first accepting answer is handed to `link` (a slave learns its master there).
pub fn register_with(
    ctx: &BrokerContext,
    connections: &mut NamesrvConnections,
    addrs: &[String],
    link: &dyn RegisterAnswers,
) -> Vec<String> {
    if !ctx.role.is_decided() {
        // Controller mode before the first election: no route may name this broker yet.
        tracing::debug!("role not decided by the controllers yet; not registering");
        return Vec::new();
    }
    let timeout = Duration::from_millis(ctx.config.register_broker_timeout_ms.clamp(100, 60_000));
    let mut failed = Vec::new();
    let mut answered = false;
    for addr in addrs {
        let request = register_request(ctx);
        match connections.call(addr, &request, timeout) {
            Ok(r) if r.code == ResponseCode::Success.code() => {
                tracing::debug!(namesrv = addr, "registered broker");
                if !answered {
                    answered = true;
                    link.on_register_answer(ctx, &r);
                }
                continue;
            }
            Ok(r) => {
                tracing::warn!(namesrv = addr, code = r.code, remark = ?r.remark, "name server refused REGISTER_BROKER")
            }
            Err(e) => tracing::warn!(namesrv = addr, "REGISTER_BROKER failed: {e}"),
        }
        failed.push(addr.clone());
    }
    failed
}

/// Registers with every configured name server once; returns how many accepted.
pub fn register_all(
    ctx: &BrokerContext,
    connections: &mut NamesrvConnections,
    link: &dyn RegisterAnswers,
) -> usize {
    let addrs = ctx.config.namesrv_addrs();
    addrs.len() - register_with(ctx, connections, &addrs, link).len()
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
        .with_ext("brokerId", ctx.role.broker_id().to_string());
        if let Err(e) = connections.call(&addr, &request, Duration::from_secs(3)) {
            tracing::warn!(namesrv = addr, "UNREGISTER_BROKER failed: {e}");
        }
    }
}

enum Signal {
    Now,
    Stop,
}

/// Waits before retrying name servers that did not accept a registration, one step per
/// failed round; after the last step the normal period applies again.
const RETRY_BACKOFF_MS: [u64; 5] = [500, 1000, 2000, 4000, 8000];

/// How often kept connections are checked for a close by the name server while waiting.
const WATCH_INTERVAL_MS: u64 = 250;

/// What ended a wait between registration rounds.
enum Wake {
    /// The wait ran out: the period, or a retry back-off step.
    Elapsed,
    /// A topic changed: register with every name server now.
    Changed,
    /// These name servers closed their connection: register with them again now.
    ConnectionsLost(Vec<String>),
    Stop,
}

/// Waits up to `wait` for a signal, checking the kept connections every
/// [`WATCH_INTERVAL_MS`].
fn wait_for_wake(
    rx: &mpsc::Receiver<Signal>,
    connections: &mut NamesrvConnections,
    wait: Duration,
) -> Wake {
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Wake::Elapsed;
        }
        match rx.recv_timeout(left.min(Duration::from_millis(WATCH_INTERVAL_MS))) {
            Ok(Signal::Now) => {
                // Coalesce bursts of topic changes into one registration, keeping a Stop.
                loop {
                    match rx.try_recv() {
                        Ok(Signal::Now) => {}
                        Ok(Signal::Stop) => return Wake::Stop,
                        Err(_) => return Wake::Changed,
                    }
                }
            }
            Ok(Signal::Stop) | Err(RecvTimeoutError::Disconnected) => return Wake::Stop,
            Err(RecvTimeoutError::Timeout) => {
                let lost = connections.take_closed();
                if !lost.is_empty() {
                    return Wake::ConnectionsLost(lost);
                }
            }
        }
    }
}

/// The registration thread's loop: a round, then a wait; rounds that leave name servers
/// unregistered are retried after short back-off steps instead of a whole period, and a
/// name server that closes the connection (a restart) is registered with again at once.
fn registration_loop(
    ctx: &BrokerContext,
    link: &dyn RegisterAnswers,
    rx: &mpsc::Receiver<Signal>,
    first_round: mpsc::SyncSender<usize>,
    period: Duration,
) {
    let mut connections = NamesrvConnections::new(ctx.tls_client.clone());
    let mut first_round = Some(first_round);
    let mut targets = ctx.config.namesrv_addrs();
    let mut failed_rounds = 0usize;
    loop {
        let failed = register_with(ctx, &mut connections, &targets, link);
        if let Some(done) = first_round.take() {
            let _ = done.send(targets.len() - failed.len());
        }
        let retry_wait = if failed.is_empty() {
            failed_rounds = 0;
            None
        } else {
            failed_rounds += 1;
            RETRY_BACKOFF_MS.get(failed_rounds - 1).copied()
        };
        let wait = retry_wait.map_or(period, Duration::from_millis);
        targets = match wait_for_wake(rx, &mut connections, wait) {
            Wake::Elapsed if retry_wait.is_some() => failed,
            Wake::Elapsed | Wake::Changed => ctx.config.namesrv_addrs(),
            Wake::ConnectionsLost(lost) => {
                tracing::info!(namesrv = ?lost, "name server closed the connection; registering again");
                failed_rounds = 0;
                lost
            }
            Wake::Stop => break,
        };
    }
    unregister_all(ctx, &mut connections);
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
    pub fn start(ctx: Arc<BrokerContext>, link: Arc<dyn RegisterAnswers>) -> Self {
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
                registration_loop(&ctx, &*link, &rx, first_round_tx, period);
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
    use ringmq_store::MemStore;

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
    fn registration_carries_the_ha_address_of_this_broker() {
        let ha_of = |text: &str| {
            let (config, _) = BrokerConfig::from_properties_text(text);
            let ctx = BrokerContext::for_tests(config, Arc::new(MemStore::new()));
            let req = register_request(&ctx);
            req.ext_fields.get("haServerAddr").map(str::to_string)
        };
        let base = "listenPort=22010\nbrokerIP1=192.0.2.7\n";
        assert_eq!(ha_of(base).as_deref(), Some("192.0.2.7:22011"));
        assert_eq!(
            ha_of(&format!("{base}haListenPort=23000\n")).as_deref(),
            Some("192.0.2.7:23000")
        );
        assert_eq!(
            ha_of(&format!("{base}brokerIP2=198.51.100.9\n")).as_deref(),
            Some("198.51.100.9:22011")
        );
        assert_eq!(
            ha_of(&format!(
                "{base}brokerIP2=198.51.100.9\nhaListenPort=23000\n"
            ))
            .as_deref(),
            Some("198.51.100.9:23000")
        );
    }

    /// A name server that answers one request per connection and then closes it, as a
    /// restarted one leaves the broker's kept connection dead.
    fn one_answer_per_connection(connections: usize) -> (String, std::thread::JoinHandle<()>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let handle = std::thread::spawn(move || {
            for _ in 0..connections {
                let (mut stream, _) = listener.accept().unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
                let decoder = FrameDecoder::default();
                let mut buf = BytesMut::new();
                let mut chunk = [0u8; 4096];
                let request = loop {
                    if let Some(cmd) = decoder.decode(&mut buf).unwrap() {
                        break cmd;
                    }
                    let n = stream.read(&mut chunk).unwrap();
                    assert!(n > 0, "client closed before sending");
                    buf.extend_from_slice(&chunk[..n]);
                };
                let mut out = BytesMut::new();
                request.response_to(0, None).encode(&mut out);
                stream.write_all(&out).unwrap();
            }
        });
        (addr, handle)
    }

    #[test]
    fn a_dead_kept_connection_is_replaced_at_once() {
        let (addr, server) = one_answer_per_connection(2);
        let mut connections = NamesrvConnections::default();
        let timeout = Duration::from_secs(3);
        let first = connections.call(&addr, &RemotingCommand::request(103, 1), timeout);
        assert_eq!(first.unwrap().code, 0);
        // Let the close reach this side, so the kept connection is dead but not yet dropped.
        std::thread::sleep(Duration::from_millis(100));
        let second = connections.call(&addr, &RemotingCommand::request(103, 2), timeout);
        assert_eq!(second.unwrap().code, 0, "answered on a fresh connection");
        server.join().unwrap();
    }

    #[test]
    fn connections_closed_by_the_name_server_are_noticed() {
        let (addr, server) = one_answer_per_connection(1);
        let mut connections = NamesrvConnections::default();
        let r = connections.call(
            &addr,
            &RemotingCommand::request(103, 1),
            Duration::from_secs(3),
        );
        assert_eq!(r.unwrap().code, 0);
        server.join().unwrap();
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut lost = connections.take_closed();
        while lost.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            lost = connections.take_closed();
        }
        assert_eq!(lost, vec![addr]);
        assert!(connections.take_closed().is_empty());
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
            &None,
        )
        .unwrap_err();
        assert!(err.contains("connect"), "{err}");
    }
}
