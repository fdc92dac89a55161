//! Master/slave CommitLog replication, the classic protocol of Apache RocketMQ's
//! DefaultHAService: [`protocol`] (the wire format, no I/O), [`master`] (the `ringmq-ha`
//! stage that streams the CommitLog to slaves and collects their acks) and [`slave`] (the
//! client that appends the master's bytes through the append stage), [`ack`] (SYNC_MASTER
//! puts waiting for a slave's acknowledgement), [`lag`] (how long slaves take to
//! acknowledge what the master published). Controller mode's pieces, so far without I/O:
//! [`epoch`] (the epoch cache and its `epochFileCheckpoint` file) and [`autoswitch`] (the
//! auto-switch HA wire format). `HaState` is what these threads share with
//! the append stage and the API; it sits below `Shared`, which holds it.

pub mod ack;
pub mod autoswitch;
pub mod epoch;
pub(crate) mod lag;
pub mod master;
pub mod protocol;
pub mod replicas;
pub mod slave;

use crate::config::BrokerRole;
use crate::stage_msg::Waiter;
use crate::types::{HaSlaveStatus, HaStatus};
use ringmq_ring::Notifier;
use ringmq_sync::LockExt;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Replication state shared by the HA threads, the append stage and the API.
pub(crate) struct HaState {
    /// The live role: `brokerRole` at open, changed by the controller in controller mode.
    role: AtomicU8,
    /// Master: bumped when this store stops being master; the master stage closes the
    /// slave connections of an older generation.
    pub master_generation: AtomicU64,
    /// Rung by the append stage after it publishes, while slaves are connected; the
    /// master stage sleeps on it (with the listener and the connections).
    pub doorbell: Arc<Notifier>,
    /// Slave connections the master stage serves now.
    pub slaves_connected: AtomicUsize,
    /// Highest offset any slave acknowledged (upstream `push2SlaveMaxOffset`).
    pub push_to_slave_max_offset: AtomicU64,
    /// The master stage's view of its slaves, refreshed as acks arrive.
    pub slaves: Mutex<Vec<HaSlaveStatus>>,
    /// Slave: the master's HA address, and a generation bumped when it changes.
    pub master_addr: Mutex<Option<String>>,
    pub master_addr_generation: AtomicU64,
    pub connected_to_master: AtomicBool,
    /// Tells the HA threads to end (store shutdown).
    pub stop: AtomicBool,
    /// SYNC_MASTER puts waiting for a slave's ack, in offset order; the master stage
    /// completes them (upstream GroupTransferService).
    pub slave_waiters: Mutex<VecDeque<Waiter>>,
    /// Master: where the HA server listens (once bound).
    pub listen_addr: OnceLock<SocketAddr>,
    /// Master: publish times of recent CommitLog ends (append stage, while slaves are
    /// connected) and the ages of what slaves acknowledge (HA stage).
    pub publishes: lag::PublishTimeline,
    pub ack_lag: lag::AckLagHistogram,
    /// Controller mode: epochs, SyncStateSet, confirm offset.
    pub replicas: replicas::ReplicaState,
}

impl HaState {
    pub fn new(doorbell: Arc<Notifier>, master_addr: Option<String>, role: BrokerRole) -> Self {
        HaState {
            role: AtomicU8::new(role_code(role)),
            master_generation: AtomicU64::new(0),
            doorbell,
            slaves_connected: AtomicUsize::new(0),
            push_to_slave_max_offset: AtomicU64::new(0),
            slaves: Mutex::new(Vec::new()),
            master_addr: Mutex::new(master_addr),
            master_addr_generation: AtomicU64::new(0),
            connected_to_master: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            listen_addr: OnceLock::new(),
            slave_waiters: Mutex::new(VecDeque::new()),
            publishes: lag::PublishTimeline::new(),
            ack_lag: lag::AckLagHistogram::new(),
            replicas: replicas::ReplicaState::new(),
        }
    }

    pub fn role(&self) -> BrokerRole {
        match self.role.load(Ordering::Acquire) {
            0 => BrokerRole::AsyncMaster,
            1 => BrokerRole::SyncMaster,
            _ => BrokerRole::Slave,
        }
    }

    pub fn is_slave(&self) -> bool {
        self.role() == BrokerRole::Slave
    }

    /// Takes `role` from now on. Leaving the master role closes the slave connections;
    /// leaving the slave role forgets the master (the HA client disconnects).
    pub fn set_role(&self, role: BrokerRole) {
        let was = self.role();
        self.role.store(role_code(role), Ordering::Release);
        if was != BrokerRole::Slave && role == BrokerRole::Slave {
            self.master_generation.fetch_add(1, Ordering::AcqRel);
            self.doorbell.notify();
        }
        if role != BrokerRole::Slave {
            self.forget_master();
        }
    }

    /// Controller mode: how far consumers may see (spec §g.3, "Visibility"). A slave sees
    /// what its master confirmed; a master under `allAckInSyncStateSet` with others in the
    /// SyncStateSet sees what every member holds; otherwise there is no replica bound.
    pub fn replica_dispatch_bound(&self, config: &crate::config::StoreConfig) -> Option<u64> {
        if !config.controller_mode {
            return None;
        }
        let confirm = self.replicas.confirm_offset.load(Ordering::Acquire).max(0) as u64;
        if self.is_slave() {
            return Some(confirm);
        }
        let waits_for_members =
            config.all_ack_in_sync_state_set && self.replicas.sync_state_set_size() > 1;
        waits_for_members.then_some(confirm)
    }

    /// Slave: stop replicating (the HA client disconnects and idles).
    pub fn forget_master(&self) {
        let mut cur = self.master_addr.lock_unpoisoned();
        if cur.take().is_some() {
            self.master_addr_generation.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Append stage, as it publishes `end_offset`: dates it if anyone replicates it.
    pub fn record_publish(&self, end_offset: u64) {
        if self.slaves_connected.load(Ordering::Relaxed) > 0 {
            self.publishes.record(end_offset);
        }
    }

    /// Master stage, on a report that moves a slave's ack from `from` to beyond it: counts
    /// the age of the oldest byte it acknowledges.
    pub fn record_ack(&self, from: u64) {
        if let Some(at_us) = self.publishes.published_at_us(from) {
            let now_us = self.publishes.now_us();
            self.ack_lag.record(now_us.saturating_sub(at_us));
        }
    }

    /// Append stage, after a publish: wakes the master stage if anyone listens.
    pub fn notify_published(&self) {
        if self.slaves_connected.load(Ordering::Acquire) > 0 {
            self.doorbell.notify();
        }
    }

    /// Slave: replicate from `addr` from now on (a change reconnects).
    pub fn set_master_addr(&self, addr: &str) {
        let addr = addr.trim();
        let mut cur = self.master_addr.lock_unpoisoned();
        if cur.as_deref() == Some(addr) || addr.is_empty() {
            return;
        }
        *cur = Some(addr.to_string());
        self.master_addr_generation.fetch_add(1, Ordering::AcqRel);
    }

    pub fn status(&self) -> HaStatus {
        HaStatus {
            slaves: self.slaves.lock_unpoisoned().clone(),
            master_addr: self.master_addr.lock_unpoisoned().clone(),
            connected_to_master: self.connected_to_master.load(Ordering::Acquire),
        }
    }
}

fn role_code(role: BrokerRole) -> u8 {
    match role {
        BrokerRole::AsyncMaster => 0,
        BrokerRole::SyncMaster => 1,
        BrokerRole::Slave => 2,
    }
}
