//! The broker's live role. Outside controller mode it is `brokerRole` and `brokerId` as
//! configured, for the whole run. In controller mode the controllers decide: the broker
//! starts as an undecided slave (it refuses writes and stays out of the name servers'
//! routes), then becomes master (broker id 0 in routes, as upstream) or a slave under its
//! controller-assigned id, as often as the controllers elect. [`ControllerLink`] is how the
//! request path hands the controllers' role notices to the control thread
//! ([`crate::replicas`]).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Mutex;

use ringmq_sync::LockExt;

use crate::config::{BrokerConfig, BrokerRole};

pub struct LiveRole {
    master: AtomicBool,
    /// The id registered with name servers: 0 for a master.
    broker_id: AtomicU64,
    /// Whether the role is known (always, outside controller mode).
    decided: AtomicBool,
}

impl LiveRole {
    pub fn new(config: &BrokerConfig) -> Self {
        let controller = config.enable_controller_mode;
        LiveRole {
            master: AtomicBool::new(!controller && config.is_master()),
            broker_id: AtomicU64::new(config.broker_id),
            decided: AtomicBool::new(!controller),
        }
    }

    pub fn is_master(&self) -> bool {
        self.master.load(Ordering::Acquire)
    }

    pub fn broker_id(&self) -> u64 {
        self.broker_id.load(Ordering::Acquire)
    }

    pub fn is_decided(&self) -> bool {
        self.decided.load(Ordering::Acquire)
    }

    /// The role name a master or slave reports (upstream's controller mode makes every
    /// master a SYNC_MASTER).
    pub fn broker_role(&self, config: &BrokerConfig) -> BrokerRole {
        match (self.is_master(), config.enable_controller_mode) {
            (false, _) => BrokerRole::Slave,
            (true, true) => BrokerRole::SyncMaster,
            (true, false) => config.broker_role,
        }
    }

    /// Controller mode: master (registered as broker 0).
    pub fn set_master(&self) {
        self.broker_id.store(0, Ordering::Release);
        self.master.store(true, Ordering::Release);
        self.decided.store(true, Ordering::Release);
    }

    /// Controller mode: a slave registered under its controller id.
    pub fn set_slave(&self, controller_id: u64) {
        self.master.store(false, Ordering::Release);
        self.broker_id.store(controller_id, Ordering::Release);
        self.decided.store(true, Ordering::Release);
    }
}

/// Who masters a broker set, as a controller answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MasterView {
    pub master_broker_id: Option<i64>,
    pub master_address: Option<String>,
    pub master_epoch: i32,
    pub sync_state_set_epoch: i32,
    pub sync_state_set: BTreeSet<i64>,
}

/// What the request path shares with the control thread.
pub struct ControllerLink {
    inbox: Mutex<Option<SyncSender<MasterView>>>,
    controller_id: AtomicI64,
}

impl Default for ControllerLink {
    fn default() -> Self {
        ControllerLink {
            inbox: Mutex::new(None),
            controller_id: AtomicI64::new(-1),
        }
    }
}

impl ControllerLink {
    pub(crate) fn attach_inbox(&self, tx: SyncSender<MasterView>) {
        *self.inbox.lock_unpoisoned() = Some(tx);
    }

    pub(crate) fn set_controller_id(&self, id: i64) {
        self.controller_id.store(id, Ordering::Release);
    }

    /// NOTIFY_BROKER_ROLE_CHANGED: hands the new role to the control thread. False when
    /// no thread runs (not in controller mode) or its inbox is full.
    pub fn notify(&self, view: MasterView) -> bool {
        match &*self.inbox.lock_unpoisoned() {
            Some(tx) => tx.try_send(view).is_ok(),
            None => false,
        }
    }

    /// This broker's controller-assigned id, once known.
    pub fn controller_id(&self) -> Option<i64> {
        Some(self.controller_id.load(Ordering::Acquire)).filter(|id| *id >= 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_roles_are_the_configured_ones_and_controller_mode_starts_undecided() {
        let classic = BrokerConfig::default();
        let role = LiveRole::new(&classic);
        assert!(role.is_master() && role.is_decided());
        assert_eq!(role.broker_role(&classic), classic.broker_role);
        let controlled = BrokerConfig {
            enable_controller_mode: true,
            ..BrokerConfig::default()
        };
        let role = LiveRole::new(&controlled);
        assert!(!role.is_master() && !role.is_decided());
        role.set_master();
        assert_eq!(
            (role.broker_id(), role.broker_role(&controlled)),
            (0, BrokerRole::SyncMaster)
        );
        role.set_slave(3);
        assert_eq!(
            (role.broker_id(), role.broker_role(&controlled)),
            (3, BrokerRole::Slave)
        );
    }
}
