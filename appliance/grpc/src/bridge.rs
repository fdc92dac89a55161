//! The bridge between the gRPC runtime and the broker's processors: one thread owning a
//! [`LocalCore`], on which every gRPC client has one connection (its "channel" in the
//! broker's producer and consumer tables). gRPC handlers post [`Job`]s here and await the
//! answer; the thread calls the broker's handler, maps deferred answers back to their
//! waiters, and forwards broker-initiated requests (transaction check-back) to the client's
//! Telemetry stream.
//!
//! Bounds: at most [`MAX_QUEUED_JOBS`] jobs wait for the thread (a full queue answers
//! TOO_MANY_REQUESTS), at most [`MAX_SESSIONS`] clients are known at once, and a client
//! not heard from for [`SESSION_IDLE_MS`] with nothing in flight is closed, like a Remoting
//! channel whose heartbeats stopped.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use ringmq_remoting::RemotingCommand;
use ringmq_runtime::server::local::{LocalCore, LocalEvent};
use ringmq_runtime::{BodyChunk, Notifier, Reply, RequestHandler, Response};
use tokio::sync::{mpsc, oneshot};

/// Jobs waiting for the bridge thread.
pub const MAX_QUEUED_JOBS: usize = 8192;
/// Clients known at once; a new one past this is refused until an idle one is closed.
pub const MAX_SESSIONS: usize = 65_536;
/// A client silent this long (no RPC, no heartbeat) with nothing in flight is closed:
/// upstream's channel expiry for clients whose heartbeats stopped.
pub const SESSION_IDLE_MS: u64 = 120_000;
/// Broker-initiated requests buffered per Telemetry stream before they are dropped (the
/// broker repeats a transaction check later).
pub const TELEMETRY_BUFFER: usize = 64;
/// How often the thread wakes with nothing posted (idle sweeps).
const IDLE_WAKE_MS: u64 = 1000;

/// A flattened broker answer: the response command with its whole body in memory.
#[derive(Debug)]
pub struct Answer {
    pub command: RemotingCommand,
    pub body: Vec<u8>,
}

/// Why a job got no answer from the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BridgeError {
    /// The job queue or the session table is full.
    Busy(&'static str),
    /// The bridge stopped (broker shutting down).
    Stopped,
    /// A file range of the answer could not be read.
    Read(String),
}

/// Work for the bridge thread.
enum Job {
    Call {
        client_id: Arc<str>,
        peer: SocketAddr,
        request: RemotingCommand,
        reply: oneshot::Sender<Result<Answer, BridgeError>>,
    },
    /// Broker-initiated requests for `client_id` go to `sink` from now on.
    Telemetry {
        client_id: Arc<str>,
        peer: SocketAddr,
        sink: mpsc::Sender<RemotingCommand>,
    },
    /// The client said it is going away (NotifyClientTermination).
    Terminate { client_id: Arc<str> },
}

/// The handle gRPC handlers hold. Cheap to clone.
#[derive(Clone)]
pub struct Bridge {
    inner: Arc<Shared>,
}

struct Shared {
    jobs: ArrayQueue<Job>,
    doorbell: Arc<Notifier>,
    stop: AtomicBool,
}

/// The bridge thread, joined on [`BridgeThread::stop`].
pub struct BridgeThread {
    bridge: Bridge,
    handle: Option<JoinHandle<()>>,
}

impl BridgeThread {
    /// Starts the thread calling `handler`; `local_addr` is the gRPC listener's address
    /// (the local end of every client's connection).
    pub fn start(
        handler: Arc<dyn RequestHandler>,
        local_addr: SocketAddr,
    ) -> std::io::Result<BridgeThread> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let handle = std::thread::Builder::new()
            .name("grpc-bridge".into())
            .spawn(move || {
                let core = match LocalCore::new(handler, local_addr) {
                    Ok(core) => core,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let inner = Arc::new(Shared {
                    jobs: ArrayQueue::new(MAX_QUEUED_JOBS),
                    doorbell: core.doorbell().clone(),
                    stop: AtomicBool::new(false),
                });
                let _ = tx.send(Ok(inner.clone()));
                Worker::new(core, inner).run();
            })?;
        let inner = rx
            .recv()
            .map_err(|_| std::io::Error::other("grpc-bridge thread died at start"))??;
        Ok(BridgeThread {
            bridge: Bridge { inner },
            handle: Some(handle),
        })
    }

    pub fn bridge(&self) -> Bridge {
        self.bridge.clone()
    }

    /// Stops the thread; waiters still due get [`BridgeError::Stopped`].
    pub fn stop(mut self) {
        self.bridge.inner.stop.store(true, Ordering::Release);
        self.bridge.inner.doorbell.notify();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Bridge {
    /// Calls the broker with `request` on `client_id`'s connection and waits for the
    /// answer, however long the broker keeps it (a long poll answers within its own
    /// suspend time). The request's opaque is assigned here.
    pub async fn call(
        &self,
        client_id: &Arc<str>,
        peer: SocketAddr,
        request: RemotingCommand,
    ) -> Result<Answer, BridgeError> {
        let (reply, answer) = oneshot::channel();
        self.post(Job::Call {
            client_id: client_id.clone(),
            peer,
            request,
            reply,
        })?;
        answer.await.unwrap_or(Err(BridgeError::Stopped))
    }

    /// Routes broker-initiated requests for `client_id` to `sink`.
    pub fn attach_telemetry(
        &self,
        client_id: &Arc<str>,
        peer: SocketAddr,
        sink: mpsc::Sender<RemotingCommand>,
    ) -> Result<(), BridgeError> {
        self.post(Job::Telemetry {
            client_id: client_id.clone(),
            peer,
            sink,
        })
    }

    /// Closes `client_id`'s connection: the broker drops it from its client tables.
    pub fn terminate(&self, client_id: &Arc<str>) -> Result<(), BridgeError> {
        self.post(Job::Terminate {
            client_id: client_id.clone(),
        })
    }

    fn post(&self, job: Job) -> Result<(), BridgeError> {
        if self.inner.stop.load(Ordering::Acquire) {
            return Err(BridgeError::Stopped);
        }
        self.inner
            .jobs
            .push(job)
            .map_err(|_| BridgeError::Busy("the gRPC bridge queue is full"))?;
        self.inner.doorbell.notify();
        Ok(())
    }
}

/// One client's connection on the local core.
struct Session {
    conn_id: u64,
    last_seen: Instant,
    telemetry: Option<mpsc::Sender<RemotingCommand>>,
    next_opaque: i32,
}

/// The bridge thread's state.
struct Worker {
    core: LocalCore,
    shared: Arc<Shared>,
    sessions: HashMap<Arc<str>, Session>,
    by_conn: HashMap<u64, Arc<str>>,
    waiters: HashMap<(u64, i32), oneshot::Sender<Result<Answer, BridgeError>>>,
    last_sweep: Instant,
}

impl Worker {
    fn new(core: LocalCore, shared: Arc<Shared>) -> Self {
        Self {
            core,
            shared,
            sessions: HashMap::new(),
            by_conn: HashMap::new(),
            waiters: HashMap::new(),
            last_sweep: Instant::now(),
        }
    }

    fn run(mut self) {
        tracing::info!("grpc bridge started");
        while !self.shared.stop.load(Ordering::Acquire) {
            self.shared
                .doorbell
                .wait_timeout(Duration::from_millis(IDLE_WAKE_MS));
            // The doorbell's protocol: clear its flag, then drain everything it guards.
            self.shared.doorbell.begin_drain();
            // Jobs first, bounded by what was queued when the pass began.
            for _ in 0..self.shared.jobs.len() {
                match self.shared.jobs.pop() {
                    Some(job) => self.run_job(job),
                    None => break,
                }
            }
            while let Some(event) = self.core.next_event() {
                self.on_event(event);
            }
            if self.last_sweep.elapsed() >= Duration::from_millis(IDLE_WAKE_MS) {
                self.sweep_idle();
                self.last_sweep = Instant::now();
            }
        }
        while let Some(job) = self.shared.jobs.pop() {
            if let Job::Call { reply, .. } = job {
                let _ = reply.send(Err(BridgeError::Stopped));
            }
        }
        for (_, w) in self.waiters.drain() {
            let _ = w.send(Err(BridgeError::Stopped));
        }
        let conns: Vec<u64> = self.by_conn.keys().copied().collect();
        for id in conns {
            self.core.close(id);
        }
        tracing::info!("grpc bridge stopped");
    }

    fn run_job(&mut self, job: Job) {
        match job {
            Job::Call {
                client_id,
                peer,
                request,
                reply,
            } => self.run_call(client_id, peer, request, reply),
            Job::Telemetry {
                client_id,
                peer,
                sink,
            } => {
                if let Some(session) = self.session(&client_id, peer) {
                    session.telemetry = Some(sink);
                }
            }
            Job::Terminate { client_id } => {
                if let Some(s) = self.sessions.remove(&client_id) {
                    self.close_conn(s.conn_id);
                }
            }
        }
    }

    fn run_call(
        &mut self,
        client_id: Arc<str>,
        peer: SocketAddr,
        mut request: RemotingCommand,
        reply: oneshot::Sender<Result<Answer, BridgeError>>,
    ) {
        let Some(session) = self.session(&client_id, peer) else {
            let _ = reply.send(Err(BridgeError::Busy("too many gRPC clients")));
            return;
        };
        // Opaques are unique per connection among requests in flight: positive, wrapping.
        session.next_opaque = session.next_opaque.checked_add(1).unwrap_or(1);
        request.opaque = session.next_opaque;
        let (conn_id, opaque) = (session.conn_id, request.opaque);
        match self.core.call(conn_id, request) {
            Some(Reply::Now(response)) => {
                let _ = reply.send(flatten(response));
            }
            Some(Reply::Later) => {
                self.waiters.insert((conn_id, opaque), reply);
            }
            // A oneway request, or a connection closed under us: nothing will come.
            Some(Reply::Nothing) | None => {
                let _ = reply.send(Err(BridgeError::Stopped));
            }
        }
    }

    /// The session of `client_id`, opened on first use; `None` when the table is full.
    fn session(&mut self, client_id: &Arc<str>, peer: SocketAddr) -> Option<&mut Session> {
        if !self.sessions.contains_key(client_id) {
            if self.sessions.len() >= MAX_SESSIONS {
                tracing::warn!(client = %client_id, "gRPC client refused: {MAX_SESSIONS} clients known");
                return None;
            }
            let conn_id = self.core.open(peer).id();
            self.by_conn.insert(conn_id, client_id.clone());
            self.sessions.insert(
                client_id.clone(),
                Session {
                    conn_id,
                    last_seen: Instant::now(),
                    telemetry: None,
                    next_opaque: 0,
                },
            );
        }
        let session = self.sessions.get_mut(client_id)?;
        session.last_seen = Instant::now();
        Some(session)
    }

    fn on_event(&mut self, event: LocalEvent) {
        match event {
            LocalEvent::Answer {
                conn_id,
                opaque,
                response,
            } => {
                if let Some(w) = self.waiters.remove(&(conn_id, opaque)) {
                    let _ = w.send(flatten(response));
                }
            }
            LocalEvent::Oneway { conn_id, command } => {
                let sink = self
                    .by_conn
                    .get(&conn_id)
                    .and_then(|c| self.sessions.get(c))
                    .and_then(|s| s.telemetry.as_ref());
                match sink {
                    Some(sink) => {
                        if sink.try_send(command).is_err() {
                            tracing::debug!(
                                conn = conn_id,
                                "telemetry stream full or gone; broker request dropped"
                            );
                        }
                    }
                    None => tracing::debug!(
                        conn = conn_id,
                        code = command.code,
                        "broker request for a gRPC client without a Telemetry stream dropped"
                    ),
                }
            }
            LocalEvent::Close { conn_id } => {
                if let Some(client) = self.by_conn.get(&conn_id).cloned() {
                    self.sessions.remove(&client);
                    self.close_conn(conn_id);
                }
            }
        }
    }

    fn close_conn(&mut self, conn_id: u64) {
        self.by_conn.remove(&conn_id);
        self.core.close(conn_id);
        // Dropped senders: their waiters see the bridge gone.
        self.waiters.retain(|(c, _), _| *c != conn_id);
    }

    fn sweep_idle(&mut self) {
        let idle = Duration::from_millis(SESSION_IDLE_MS);
        let busy: std::collections::HashSet<u64> = self.waiters.keys().map(|(c, _)| *c).collect();
        let expired: Vec<Arc<str>> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.last_seen.elapsed() >= idle && !busy.contains(&s.conn_id))
            .filter(|(_, s)| s.telemetry.as_ref().is_none_or(|t| t.is_closed()))
            .map(|(c, _)| c.clone())
            .collect();
        for client in expired {
            if let Some(s) = self.sessions.remove(&client) {
                tracing::info!(client = %client, "gRPC client idle for {SESSION_IDLE_MS} ms; closed");
                self.close_conn(s.conn_id);
            }
        }
    }
}

/// The answer with its body chunks read into one buffer.
fn flatten(response: Response) -> Result<Answer, BridgeError> {
    let Response {
        mut command,
        extra_body,
    } = response;
    let mut body = std::mem::take(&mut command.body).to_vec();
    for chunk in extra_body {
        match chunk {
            BodyChunk::Memory(bytes) => body.extend_from_slice(&bytes),
            BodyChunk::File(range) => {
                let bytes = range
                    .read_to_vec()
                    .map_err(|e| BridgeError::Read(format!("reading a CommitLog range: {e}")))?;
                body.extend_from_slice(&bytes);
            }
        }
    }
    Ok(Answer { command, body })
}
