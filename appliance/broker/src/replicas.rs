//! Controller mode on the broker (upstream `ReplicasManager`, spec features.md §g.4): a
//! control thread (`ringmq-replicas`) that finds the controller leader, obtains this
//! broker's controller id ([`identity`]), registers, heartbeats every controller, asks for
//! an election when its set has no live master, and applies every role the controllers
//! decide — from their answers, from NOTIFY_BROKER_ROLE_CHANGED, and from the periodic
//! replica-info read. As master it asks the controller to grow and shrink the
//! SyncStateSet ([`sync_state`]).
//!
//! A role change goes to the store first (which refuses an older epoch), then to the
//! broker's live role, then to [`RoleHooks`]: master-only services, re-registration with
//! the name servers so clients follow.

pub mod api;
pub mod identity;
pub mod sync_state;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ringmq_remoting::body::controller::SyncStateSet;
use ringmq_remoting::header::namesrv::BrokerHeartbeatRequestHeader;

use crate::context::BrokerContext;
use crate::role::MasterView;
use api::{ControllerClient, ControllerResult};
use identity::{Identity, IdentityFiles};

/// The loop's tick: how late a due task or a stop is seen.
const TICK_MS: u64 = 100;
/// Wait between attempts to join the controllers (upstream: 5 s; shorter here so a
/// broker started before its controllers joins soon after they elect a leader).
const START_RETRY_MS: u64 = 1000;
/// How often a master looks for slaves to add to the SyncStateSet.
const EXPAND_CHECK_MS: u64 = 200;
/// Least wait between re-registrations asking the name servers for a new master.
const FOLLOW_RETRY_MS: u64 = 300;
/// Role notices waiting for the thread.
const INBOX_CAPACITY: usize = 16;
/// Each controller request's time-out.
const CALL_TIMEOUT_MS: u64 = 3000;

/// What the broker does around a role change.
pub trait RoleHooks: Send + Sync {
    /// Now master: start master-only services, register as broker 0.
    fn became_master(&self);
    /// Now a slave: stop master-only services, register under the controller id.
    fn became_slave(&self);
    /// Still a slave of `master_addr`: make sure the name servers' answer named it (the
    /// slave learns its master's HA address there).
    fn ensure_following(&self, master_addr: &str);
    /// The store asks to be reopened (a slave that must truncate).
    fn reopen(&self, why: &str);
}

/// The control thread.
pub struct ReplicasManager {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl ReplicasManager {
    pub fn start(ctx: Arc<BrokerContext>, hooks: Arc<dyn RoleHooks>) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel(INBOX_CAPACITY);
        ctx.controller.attach_inbox(tx);
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = stop.clone();
        let handle = std::thread::Builder::new()
            .name("ringmq-replicas".into())
            .spawn(move || Manager::new(ctx, hooks).run(&rx, &thread_stop))?;
        Ok(ReplicasManager {
            stop,
            handle: Some(handle),
        })
    }

    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// When each periodic task is next due.
struct Due {
    start: Instant,
    heartbeat: Instant,
    replica_sync: Instant,
    leader_sync: Instant,
    expand: Instant,
    shrink: Instant,
    follow: Instant,
}

struct Manager {
    ctx: Arc<BrokerContext>,
    hooks: Arc<dyn RoleHooks>,
    client: ControllerClient,
    files: IdentityFiles,
    controller_id: Option<i64>,
    master_epoch: i32,
    master_id: Option<i64>,
    master_addr: Option<String>,
    running: bool,
    reopen_reported: bool,
    due: Due,
}

impl Manager {
    fn new(ctx: Arc<BrokerContext>, hooks: Arc<dyn RoleHooks>) -> Self {
        let addrs: Vec<String> = ctx
            .config
            .controller_addr
            .split(';')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_string)
            .collect();
        let timeout = Duration::from_millis(CALL_TIMEOUT_MS);
        let client = ControllerClient::new(addrs, ctx.tls_client.clone(), timeout);
        let files =
            IdentityFiles::in_store_root(std::path::Path::new(&ctx.config.store_path_root_dir));
        let now = Instant::now();
        Manager {
            ctx,
            hooks,
            client,
            files,
            controller_id: None,
            master_epoch: -1,
            master_id: None,
            master_addr: None,
            running: false,
            reopen_reported: false,
            due: Due {
                start: now,
                heartbeat: now,
                replica_sync: now,
                leader_sync: now,
                expand: now,
                shrink: now,
                follow: now,
            },
        }
    }

    fn run(mut self, rx: &Receiver<MasterView>, stop: &AtomicBool) {
        while !stop.load(Ordering::Acquire) {
            match rx.recv_timeout(Duration::from_millis(TICK_MS)) {
                Ok(view) => {
                    tracing::info!(?view, "role change notice from the controller");
                    self.apply(view);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            self.tick(Instant::now());
        }
    }

    fn tick(&mut self, now: Instant) {
        let ctx = self.ctx.clone();
        let c = &ctx.config;
        if !self.running && now >= self.due.start {
            match self.start_basic() {
                Ok(()) => self.running = true,
                Err(e) => tracing::warn!("joining the controllers failed: {e}; retrying"),
            }
            self.due.start = now + Duration::from_millis(START_RETRY_MS);
        }
        if self.controller_id.is_some() && now >= self.due.heartbeat {
            self.heartbeat();
            self.due.heartbeat =
                now + Duration::from_millis(c.broker_heartbeat_interval_ms.max(100));
        }
        if self.running {
            self.periodic(now);
        }
        if let Some(why) = self.ctx.store.reopen_request() {
            if !self.reopen_reported {
                self.reopen_reported = true;
                self.hooks.reopen(&why);
            }
        }
    }

    fn periodic(&mut self, now: Instant) {
        let ctx = self.ctx.clone();
        let c = &ctx.config;
        if now >= self.due.replica_sync {
            self.due.replica_sync =
                now + Duration::from_millis(c.sync_broker_metadata_period_ms.max(100));
            match self.client.replica_info(&c.broker_name) {
                Ok(view) => self.apply(view),
                Err(e) => tracing::warn!("GET_REPLICA_INFO failed: {e}"),
            }
        }
        if now >= self.due.leader_sync {
            self.due.leader_sync =
                now + Duration::from_millis(c.sync_controller_metadata_period_ms.max(100));
            if let Err(e) = self.client.refresh_leader() {
                tracing::warn!("no controller leader: {e}");
            }
        }
        if self.ctx.is_master() && now >= self.due.expand {
            let shrink_due = now >= self.due.shrink;
            if shrink_due {
                self.due.shrink =
                    now + Duration::from_millis(c.check_sync_state_set_period_ms.max(100));
            }
            self.due.expand = now + Duration::from_millis(EXPAND_CHECK_MS);
            self.check_sync_state_set(shrink_due);
        }
        if !self.ctx.is_master() && now >= self.due.follow {
            self.due.follow = now + Duration::from_millis(FOLLOW_RETRY_MS);
            if let Some(addr) = &self.master_addr {
                self.hooks.ensure_following(addr);
            }
        }
    }

    /// Leader, id, registration, heartbeat, then the role (elected when no master lives).
    fn start_basic(&mut self) -> ControllerResult<()> {
        self.client.refresh_leader()?;
        let id = match self.controller_id {
            Some(id) => id,
            None => self.obtain_id()?,
        };
        let ctx = self.ctx.clone();
        let c = &ctx.config;
        let addr = c.broker_addr();
        let view = self
            .client
            .register(&c.broker_cluster_name, &c.broker_name, id, &addr)?;
        tracing::info!(controller_id = id, ?view, "registered with the controller");
        self.heartbeat();
        let view = match view.master_broker_id {
            Some(_) => view,
            None => self
                .client
                .elect(&c.broker_cluster_name, &c.broker_name, id)?,
        };
        self.apply(view);
        Ok(())
    }

    /// The controller id from `brokerIdentity`, or applied for now (through the
    /// temporary file, so a crash in between asks for the same id again).
    fn obtain_id(&mut self) -> ControllerResult<i64> {
        let ctx = self.ctx.clone();
        let c = &ctx.config;
        let local = |e: String| api::ControllerError {
            code: None,
            message: e,
        };
        if let Some(known) = self.files.load().map_err(local)? {
            if known.cluster_name != c.broker_cluster_name || known.broker_name != c.broker_name {
                return Err(local(format!(
                    "brokerIdentity names {}#{}, but this broker is {}#{}",
                    known.cluster_name, known.broker_name, c.broker_cluster_name, c.broker_name
                )));
            }
            return Ok(self.set_controller_id(known.broker_id));
        }
        let applying = match self.files.load_temp().map_err(local)? {
            Some(t) => t,
            None => {
                let id = self
                    .client
                    .next_broker_id(&c.broker_cluster_name, &c.broker_name)?;
                let t = Identity {
                    cluster_name: c.broker_cluster_name.clone(),
                    broker_name: c.broker_name.clone(),
                    broker_id: id,
                    register_check_code: Some(format!(
                        "{};{}",
                        c.broker_addr(),
                        ringmq_sync::now_ms()
                    )),
                };
                self.files.save_temp(&t).map_err(local)?;
                t
            }
        };
        let code = applying.register_check_code.clone().unwrap_or_default();
        let applied = self.client.apply_broker_id(
            &c.broker_cluster_name,
            &c.broker_name,
            applying.broker_id,
            &code,
        );
        if let Err(e) = applied {
            // Another broker took the id, or the controller forgot it: ask for a new one.
            let _ = self.files.clear_temp();
            return Err(e);
        }
        self.files.save(&applying).map_err(local)?;
        tracing::info!(
            controller_id = applying.broker_id,
            "controller applied this broker's id"
        );
        Ok(self.set_controller_id(applying.broker_id))
    }

    fn set_controller_id(&mut self, id: i64) -> i64 {
        self.controller_id = Some(id);
        self.ctx.controller.set_controller_id(id);
        self.ctx.store.set_local_broker_id(id);
        id
    }

    fn heartbeat(&mut self) {
        let Some(id) = self.controller_id else { return };
        let c = &self.ctx.config;
        let store = &self.ctx.store;
        let header = BrokerHeartbeatRequestHeader {
            cluster_name: c.broker_cluster_name.clone(),
            broker_addr: c.broker_addr(),
            broker_name: c.broker_name.clone(),
            broker_id: Some(id),
            epoch: Some(store.epoch_entries().last().map_or(-1, |e| e.0)),
            max_offset: Some(store.commit_log_max_offset()),
            confirm_offset: Some(store.confirm_offset()),
            heartbeat_timeout_mills: Some(c.controller_heartbeat_timeout_ms as i64),
            election_priority: Some(c.broker_election_priority),
        };
        self.client.heartbeat_all(&header);
    }

    /// Takes the role `view` names when its epoch is newer than the one held; under the
    /// same epoch a master takes a newer SyncStateSet.
    fn apply(&mut self, view: MasterView) {
        let Some(master) = view.master_broker_id else {
            return;
        };
        if view.master_epoch > self.master_epoch {
            match Some(master) == self.controller_id {
                true => self.change_to_master(&view),
                false => self.change_to_slave(&view),
            }
        } else if view.master_epoch == self.master_epoch && self.ctx.is_master() {
            let members: Vec<i64> = view.sync_state_set.iter().copied().collect();
            self.ctx
                .store
                .set_sync_state_set(&members, view.sync_state_set_epoch);
        }
    }

    fn change_to_master(&mut self, view: &MasterView) {
        let epoch = view.master_epoch;
        if let Err(e) = self.ctx.store.change_to_master(epoch) {
            tracing::error!(epoch, "cannot become master: {e}");
            return;
        }
        let members: Vec<i64> = view.sync_state_set.iter().copied().collect();
        self.ctx
            .store
            .set_sync_state_set(&members, view.sync_state_set_epoch);
        self.master_epoch = epoch;
        self.master_id = view.master_broker_id;
        self.master_addr = Some(self.ctx.config.broker_addr());
        self.ctx.role.set_master();
        tracing::info!(epoch, sync_state_set = ?members, "this broker is master now");
        self.hooks.became_master();
    }

    fn change_to_slave(&mut self, view: &MasterView) {
        let epoch = view.master_epoch;
        let Some(id) = self.controller_id else { return };
        if let Err(e) = self.ctx.store.change_to_slave(epoch) {
            tracing::error!(epoch, "cannot become a slave: {e}");
            return;
        }
        let was_master = self.ctx.is_master();
        self.master_epoch = epoch;
        self.master_id = view.master_broker_id;
        self.master_addr = view.master_address.clone();
        self.ctx.role.set_slave(id.max(1) as u64);
        tracing::info!(
            epoch,
            master_id = ?view.master_broker_id,
            master = ?view.master_address,
            was_master,
            "this broker is a slave now"
        );
        self.hooks.became_slave();
    }

    /// Master: asks the controller for the SyncStateSet the slaves' progress calls for.
    fn check_sync_state_set(&mut self, shrink_due: bool) {
        let Some(id) = self.controller_id else { return };
        let store = &self.ctx.store;
        let current = store_sync_state_set(&self.ctx);
        let slaves = store.ha_status().slaves;
        let check = sync_state::SetCheck {
            local_id: id,
            current: &current.sync_state_set,
            slaves: &slaves,
            now_ms: ringmq_sync::now_ms(),
            max_not_catch_up_ms: ha_max_time_slave_not_catch_up_ms(&self.ctx),
            confirm_offset: store.confirm_offset(),
            shrink_due,
        };
        let Some(wanted) = sync_state::wanted(&check) else {
            return;
        };
        let request = SyncStateSet {
            sync_state_set: wanted,
            sync_state_set_epoch: current.sync_state_set_epoch,
        };
        let name = &self.ctx.config.broker_name;
        match self
            .client
            .alter_sync_state_set(name, id, self.master_epoch, &request)
        {
            Ok(set) => {
                let members: Vec<i64> = set.sync_state_set.iter().copied().collect();
                tracing::info!(
                    from = ?current.sync_state_set,
                    to = ?members,
                    epoch = set.sync_state_set_epoch,
                    "SyncStateSet changed"
                );
                store.set_sync_state_set(&members, set.sync_state_set_epoch);
            }
            Err(e) => {
                tracing::warn!(wanted = ?request.sync_state_set, "ALTER_SYNC_STATE_SET failed: {e}");
                // A fenced epoch means this view is stale: read the controller's soon.
                self.due.replica_sync = Instant::now();
            }
        }
    }
}

fn store_sync_state_set(ctx: &BrokerContext) -> SyncStateSet {
    let (members, epoch) = ctx.store.sync_state_set();
    SyncStateSet {
        sync_state_set: members.into_iter().collect::<BTreeSet<i64>>(),
        sync_state_set_epoch: epoch,
    }
}

/// `haMaxTimeSlaveNotCatchup` (a store key; upstream's default 15 s).
fn ha_max_time_slave_not_catch_up_ms(ctx: &BrokerContext) -> u64 {
    ctx.config
        .extra
        .get("haMaxTimeSlaveNotCatchup")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(15_000)
}
