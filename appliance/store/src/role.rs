//! Role changes without a restart (controller mode): a slave store becomes master once
//! it stops taking its old master's bytes and has dispatched everything it holds; a
//! master becomes a slave at once. Also the controller-mode state the broker reads and
//! sets: epochs, SyncStateSet, confirm offset. Classic deployments never call this:
//! their role is `brokerRole`, fixed at open.

use crate::config::BrokerRole;
use crate::ha::replicas::SyncStateView;
use crate::shared::Shared;
use crate::stage_msg::AppendMsg;
use crate::store::MessageStore;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Longest a promotion waits for the HA client to let go of the append stage.
const CLIENT_STOP_TIMEOUT_MS: u64 = 5_000;
/// Longest a promotion waits for dispatch to reach the CommitLog end (upstream waits
/// without a bound; a store that cannot dispatch is refused the master role).
const DISPATCH_CATCH_UP_TIMEOUT_MS: u64 = 60_000;
const POLL_MS: u64 = 5;

impl MessageStore {
    /// The live role: `brokerRole`, or what the controller last made this store.
    pub fn broker_role(&self) -> BrokerRole {
        self.shared().ha.role()
    }

    /// Controller mode: becomes master of `epoch`. The HA client disconnects, dispatch
    /// catches up, the epoch is recorded at the CommitLog end, the queues continue from
    /// their ConsumeQueues, and only then are puts accepted (as SYNC_MASTER, as upstream
    /// sets the role). Refused for an epoch older than the last recorded one.
    pub fn change_to_master(&self, epoch: i32) -> Result<(), String> {
        let s = self.shared();
        check_epoch(s, epoch)?;
        if !s.ha.is_slave() {
            // Re-elected: the new epoch starts where the log ends now.
            s.ha.replicas.append_epoch(epoch, s.log.max_offset())?;
            tracing::info!(epoch, "store stays master under a new epoch");
            return Ok(());
        }
        s.ha.forget_master();
        wait_until(CLIENT_STOP_TIMEOUT_MS, || {
            !s.ha.connected_to_master.load(Ordering::Acquire)
        })
        .map_err(|ms| format!("the HA client still holds its master after {ms} ms"))?;
        // Everything held becomes visible: the old master's confirm offset no longer binds.
        let max = s.log.max_offset();
        s.ha.replicas
            .confirm_offset
            .store(max as i64, Ordering::Release);
        s.wake_reput();
        wait_until(DISPATCH_CATCH_UP_TIMEOUT_MS, || {
            s.dispatch_behind_bytes() <= 0
        })
        .map_err(|ms| {
            format!(
                "dispatch is {} bytes behind the CommitLog after {ms} ms",
                s.dispatch_behind_bytes()
            )
        })?;
        s.ha.replicas.append_epoch(epoch, s.log.max_offset())?;
        self.rebuild_queue_offsets()?;
        s.ha.set_role(BrokerRole::SyncMaster);
        tracing::info!(
            epoch,
            max_offset = s.log.max_offset(),
            "store is master now"
        );
        Ok(())
    }

    /// Controller mode: becomes a slave under `epoch` (puts refused, former slaves let go
    /// at once); the master's HA address comes with [`Self::update_ha_master_address`].
    pub fn change_to_slave(&self, epoch: i32) -> Result<(), String> {
        let s = self.shared();
        check_epoch(s, epoch)?;
        if !s.ha.is_slave() {
            tracing::info!(epoch, "store is a slave now");
        }
        s.ha.set_role(BrokerRole::Slave);
        Ok(())
    }

    /// Controller mode: this broker's controller id (sent in the HA handshake).
    pub fn set_local_broker_id(&self, broker_id: i64) {
        let replicas = &self.shared().ha.replicas;
        replicas.local_broker_id.store(broker_id, Ordering::Release);
    }

    /// Controller mode: the SyncStateSet the controller confirmed (ignored when older than
    /// the one held). The confirm offset follows at the next slave report.
    pub fn set_sync_state_set(&self, members: &[i64], epoch: i32) {
        let s = self.shared();
        if s.ha.replicas.set_sync_state_set(members, epoch) {
            s.ha.doorbell.notify();
        }
    }

    pub fn sync_state_set(&self) -> SyncStateView {
        self.shared().ha.replicas.sync_state_set()
    }

    /// Controller mode: (epoch, start offset) of every epoch entry, oldest first.
    pub fn epoch_entries(&self) -> Vec<(i32, i64)> {
        self.shared().ha.replicas.epoch_entries()
    }

    /// Controller mode: what every SyncStateSet member holds (-1 unknown).
    pub fn confirm_offset(&self) -> i64 {
        let replicas = &self.shared().ha.replicas;
        replicas.confirm_offset.load(Ordering::Acquire)
    }

    /// Controller mode: why the store must be reopened (a slave that must truncate).
    pub fn reopen_request(&self) -> Option<String> {
        let request = self.shared().ha.replicas.reopen_request();
        request.map(|(offset, why)| format!("{why}; truncate to {offset}"))
    }

    fn rebuild_queue_offsets(&self) -> Result<(), String> {
        let (done, rx) = mpsc::sync_channel(1);
        self.inner
            .put_tx
            .send(AppendMsg::RebuildQueueOffsets(done))
            .map_err(|_| "the append stage is gone".to_string())?;
        self.shared().append_doorbell.notify();
        rx.recv_timeout(Duration::from_millis(CLIENT_STOP_TIMEOUT_MS))
            .map_err(|_| "the append stage did not rebuild the queue offsets".to_string())
    }
}

fn check_epoch(s: &Shared, epoch: i32) -> Result<(), String> {
    let last = s.ha.replicas.last_epoch();
    if epoch < last {
        return Err(format!(
            "master epoch {epoch} is older than this store's last epoch {last}"
        ));
    }
    Ok(())
}

/// Polls `ready` until it holds; `Err(waited_ms)` after `timeout_ms`.
fn wait_until(timeout_ms: u64, ready: impl Fn() -> bool) -> Result<(), u64> {
    let start = Instant::now();
    while !ready() {
        let waited_ms = start.elapsed().as_millis() as u64;
        if waited_ms >= timeout_ms {
            return Err(waited_ms);
        }
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
    Ok(())
}
