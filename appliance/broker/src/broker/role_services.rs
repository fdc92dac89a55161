//! What runs only on a master — delay-level delivery, transaction check-back, the timer
//! store, POP revive — started and stopped as one ([`MasterServices`]); and the broker's
//! side of a controller-mode role change ([`BrokerRoleHooks`]): those services, the name
//! server registration that makes clients follow, and the store reopen a diverged slave
//! asks for ([`ReopenSignal`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use ringmq_sync::LockExt;

use crate::context::BrokerContext;
use crate::replicas::RoleHooks;
use crate::schedule::ScheduleMessageService;
use crate::slave_sync::MasterLink;
use crate::transaction::TransactionalMessageCheckService;

/// The master-only services of one master term.
pub struct MasterServices {
    schedule: Option<ScheduleMessageService>,
    transaction_check: Option<TransactionalMessageCheckService>,
    pop_revive: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
}

impl MasterServices {
    /// Starts every service; one that cannot start is logged and left out (the broker
    /// runs without it).
    pub fn start(ctx: &Arc<BrokerContext>) -> MasterServices {
        let schedule = ScheduleMessageService::new(ctx.clone());
        let schedule = match schedule.start() {
            Ok(()) => Some(schedule),
            Err(e) => {
                tracing::error!("delay-level delivery not started: {e}");
                None
            }
        };
        let check = TransactionalMessageCheckService::new(ctx.clone());
        let transaction_check = match check.start() {
            Ok(()) => Some(check),
            Err(e) => {
                tracing::error!("transaction check-back not started: {e}");
                None
            }
        };
        crate::timer::start::start_for_broker(ctx);
        // POP's revive service runs where POP is served: a master with the timer.
        let pop_revive = ctx
            .config
            .timer_wheel_enable
            .then(|| crate::pop::revive::start(ctx.clone()));
        MasterServices {
            schedule,
            transaction_check,
            pop_revive,
        }
    }

    pub fn stop(self, ctx: &BrokerContext) {
        if let Some(svc) = self.schedule {
            svc.stop();
        }
        if let Some(svc) = self.transaction_check {
            svc.stop();
        }
        if let Some((stop, handle)) = self.pop_revive {
            stop.store(true, Ordering::Release);
            let _ = handle.join();
        }
        ctx.timer.stop();
    }
}

/// The master services of the current term, if this broker is master.
pub type MasterTerm = Arc<Mutex<Option<MasterServices>>>;

/// A store reopen a diverged slave asks for: the owner of the process restarts the
/// broker (`ringmq broker` re-executes itself after a clean shutdown).
#[derive(Default)]
pub struct ReopenSignal {
    requested: AtomicBool,
    hook: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
}

impl ReopenSignal {
    pub fn set_hook(&self, hook: Box<dyn Fn() + Send + Sync>) {
        *self.hook.lock_unpoisoned() = Some(hook);
        if self.is_requested() {
            self.fire();
        }
    }

    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::Acquire)
    }

    fn request(&self) {
        self.requested.store(true, Ordering::Release);
        self.fire();
    }

    fn fire(&self) {
        match &*self.hook.lock_unpoisoned() {
            Some(hook) => hook(),
            None => tracing::error!("the store must reopen; restart this broker"),
        }
    }
}

/// The broker's answers to role changes decided by the controllers.
pub struct BrokerRoleHooks {
    pub ctx: Arc<BrokerContext>,
    pub term: MasterTerm,
    pub link: Arc<MasterLink>,
    pub register_now: Box<dyn Fn() + Send + Sync>,
    pub reopen: Arc<ReopenSignal>,
}

impl RoleHooks for BrokerRoleHooks {
    fn became_master(&self) {
        self.link.set_master_addr(None);
        let mut term = self.term.lock_unpoisoned();
        if term.is_none() {
            *term = Some(MasterServices::start(&self.ctx));
        }
        drop(term);
        (self.register_now)();
    }

    fn became_slave(&self) {
        let services = self.term.lock_unpoisoned().take();
        if let Some(services) = services {
            services.stop(&self.ctx);
        }
        self.link.set_master_addr(None);
        (self.register_now)();
    }

    fn ensure_following(&self, master_addr: &str) {
        // The control thread calls this at most every few hundred ms.
        if self.link.master_addr().as_deref() != Some(master_addr) {
            (self.register_now)();
        }
    }

    fn reopen(&self, why: &str) {
        tracing::error!("the store must reopen: {why}");
        self.reopen.request();
    }
}
