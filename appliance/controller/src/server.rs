//! A running controller: the consensus group member and its request path on a control
//! thread with its own single-threaded tokio runtime, behind one Remoting listener (a
//! runtime network core) that serves brokers, mqadmin and the Raft traffic of the other
//! controllers. Started by `ringmq controller -c controller.conf` or inside the name
//! server (`enableControllerInNamesrv=true`).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use openraft::BasicNode;
use ringmq_remoting::RemotingCommand;
use ringmq_runtime::server::{
    Connection, Reply, RequestContext, RequestHandler, Server, ServerConfig,
};

use crate::config::ControllerConfig;
use crate::consensus::log_store::LogStore;
use crate::consensus::network::NetworkFactory;
use crate::consensus::state_machine::{SharedState, StateMachine};
use crate::consensus::{NodeId, Raft};
use crate::manager::Manager;

/// Entries between snapshots; the log behind a snapshot is purged.
const SNAPSHOT_EVERY_ENTRIES: u64 = 5_000;

struct Handler {
    manager: Arc<Manager>,
    control: tokio::runtime::Handle,
}

impl RequestHandler for Handler {
    fn handle(&self, request: RemotingCommand, ctx: &RequestContext) -> Reply {
        if request.is_response() {
            return Reply::Nothing;
        }
        let oneway = ctx.is_oneway();
        let responder = ctx.responder();
        let conn_id = ctx.connection().id();
        let manager = self.manager.clone();
        self.control.spawn(async move {
            let response = manager.process(request, conn_id).await;
            responder.respond(response);
        });
        if oneway {
            Reply::Nothing
        } else {
            Reply::Later
        }
    }

    fn on_close(&self, conn: &Connection) {
        self.manager.on_connection_closed(conn.id());
    }
}

/// A running controller.
pub struct Controller {
    server: Option<Server>,
    local_addr: SocketAddr,
    manager: Arc<Manager>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    control_thread: Option<JoinHandle<()>>,
}

fn invalid(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
}

impl Controller {
    /// Opens the Raft log under `controllerStorePath`, joins the group named by the
    /// config, and serves on this member's address. `config_file` is where
    /// UPDATE_CONTROLLER_CONFIG saves changes.
    pub fn start(
        config: ControllerConfig,
        config_file: Option<PathBuf>,
    ) -> std::io::Result<Controller> {
        let (peers, me) = config.members().map_err(invalid)?;
        let (heartbeat_ms, election_min_ms, election_max_ms) =
            config.raft_timing_ms().map_err(invalid)?;
        let bind: IpAddr = config.bind_address().parse().map_err(|_| {
            invalid(format!(
                "bindAddress={:?} is not an IP address",
                config.bind_address()
            ))
        })?;
        let listen = SocketAddr::new(bind, peers[me].addr.port());
        let store = config.store_path();
        let raft_config = openraft::Config {
            cluster_name: config.group(),
            heartbeat_interval: heartbeat_ms,
            election_timeout_min: election_min_ms,
            election_timeout_max: election_max_ms,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(SNAPSHOT_EVERY_ENTRIES),
            max_in_snapshot_log_to_keep: 1_000,
            ..Default::default()
        }
        .validate()
        .map_err(invalid)?;

        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let state = SharedState::default();
        let log_store = LogStore::open(&store)?;
        let state_machine = StateMachine::open(&store, state.clone())?;
        let members: std::collections::BTreeMap<NodeId, BasicNode> = peers
            .iter()
            .enumerate()
            .map(|(i, p)| (i as NodeId, BasicNode::new(p.addr.to_string())))
            .collect();
        let node_id = me as NodeId;
        let raft: Raft = runtime
            .block_on(Raft::new(
                node_id,
                Arc::new(raft_config),
                NetworkFactory,
                log_store,
                state_machine,
            ))
            .map_err(|e| std::io::Error::other(format!("Raft group did not start: {e}")))?;
        // Every new member proposes the same first membership; a member whose log already
        // holds one (a restart) does not, and one whose peer was first is told so and
        // goes on.
        let initialized = runtime
            .block_on(raft.is_initialized())
            .map_err(|e| std::io::Error::other(format!("Raft group did not start: {e}")))?;
        if !initialized {
            if let Err(e) = runtime.block_on(raft.initialize(members)) {
                tracing::debug!(error = %e, "Raft group already initialized by a peer");
            }
        }
        let manager = Arc::new(Manager::new(
            raft,
            node_id,
            peers.clone(),
            state,
            config,
            config_file,
        ));

        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (handle_tx, handle_rx) = mpsc::channel();
        let scan_manager = manager.clone();
        let control_thread = std::thread::Builder::new()
            .name("ringmq-controller".into())
            .spawn(move || {
                let _ = handle_tx.send(runtime.handle().clone());
                runtime.block_on(async move {
                    let scan = tokio::spawn(scan_manager.clone().run_scan());
                    let watch = tokio::spawn(scan_manager.clone().watch_leader());
                    let _ = stop_rx.await;
                    scan.abort();
                    watch.abort();
                    if let Err(e) = scan_manager.raft.shutdown().await {
                        tracing::warn!(error = %e, "Raft group did not stop cleanly");
                    }
                });
            })?;
        let control = handle_rx
            .recv()
            .map_err(|_| std::io::Error::other("controller thread ended at start"))?;

        let mut server_config = ServerConfig::new(listen, "controller");
        let cores = ringmq_runtime::cores::CoreMap::detect();
        server_config.network_cores = vec![cores.ha.min(cores.available.saturating_sub(1))];
        let handler = Arc::new(Handler {
            manager: manager.clone(),
            control,
        });
        let server = match Server::start(server_config, handler) {
            Ok(s) => s,
            Err(e) => {
                let _ = stop.send(());
                let _ = control_thread.join();
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("controller on {listen}: {e}"),
                ));
            }
        };
        tracing::info!(addr = %server.local_addr(), id = %peers[me].id, members = peers.len(), store = %store.display(), "controller started");
        Ok(Controller {
            local_addr: server.local_addr(),
            server: Some(server),
            manager,
            stop: Some(stop),
            control_thread: Some(control_thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn is_leader(&self) -> bool {
        self.manager.is_leader()
    }

    /// The current leader's index in the peer list, if known.
    pub fn leader(&self) -> Option<u64> {
        self.manager.leader()
    }

    /// Stops serving, then stops the Raft member and the control thread.
    pub fn shutdown(mut self) {
        self.stop_all();
    }

    fn stop_all(&mut self) {
        let Some(stop) = self.stop.take() else {
            return;
        };
        // Requests still in flight are answered by the server's drain before the Raft
        // member goes away; the connections the drain closes are not broker deaths.
        self.manager.begin_stop();
        if let Some(server) = self.server.take() {
            server.shutdown();
        }
        let _ = stop.send(());
        if let Some(t) = self.control_thread.take() {
            if t.join().is_err() {
                tracing::error!("controller thread panicked");
            }
        }
        tracing::info!("controller stopped");
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop_all();
    }
}
