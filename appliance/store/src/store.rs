//! `MessageStore`, the put/get/query API the broker codes against: the public type and its
//! small methods (puts and their refusals, offsets, listeners, topics, retention triggers,
//! metrics). Opening and shutdown are in `store_open`, reads in `store_read`; the state the
//! stages share is `Shared` (`shared.rs`).

use crate::append;
use crate::checkpoint::Checkpoint;
use crate::config::{ConfigValueError, LiveStoreSettings, StoreConfig};
use crate::core_port::{run_callback, CorePorts, Submitted};
use crate::retention::{self, RetentionState};
use crate::shared::{Shared, FLAG_DISK_FULL, FLAG_STAGE_FAILED};
use crate::stage_msg::{AppendMsg, Done};
use crate::types::{ArrivalEvent, HaStatus, PutMessageStatus, PutRequest, PutResult, StoreMetrics};
use crate::util::now_ms;
use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use crate::shared::ArrivalListener;
use ringmq_ring::Notifier;
use ringmq_sync::LockExt;

/// Reasons a put is refused before it reaches the append stage (log and metrics keys).
pub const REFUSED_SHUTTING_DOWN: &str = "SHUTTING_DOWN";
pub const REFUSED_DISK_FULL: &str = "DISK_FULL";
pub const REFUSED_LOGIC_QUEUE_ERROR: &str = "LOGIC_QUEUE_ERROR";
/// The append or flush stage thread ended by a panic.
pub const REFUSED_STAGE_FAILED: &str = "STAGE_FAILED";
/// An append batch has run longer than `osPageCacheBusyTimeOutMills`.
pub const REFUSED_PAGE_CACHE_BUSY: &str = "PAGE_CACHE_BUSY";
/// Direct mode: unflushed bytes above `ringmq.directWriteRingBusyRatio` of the ring.
pub const REFUSED_WRITE_RING_BUSY: &str = "WRITE_RING_BUSY";
/// This store is a slave: it holds the master's CommitLog and takes no puts of its own.
pub const REFUSED_SLAVE: &str = "SLAVE";
/// Controller mode: fewer SyncStateSet members than `minInSyncReplicas`.
pub const REFUSED_IN_SYNC_REPLICAS: &str = "IN_SYNC_REPLICAS_NOT_ENOUGH";
/// The producer → append stage queue is full.
pub const REFUSED_APPEND_QUEUE_FULL: &str = "APPEND_QUEUE_FULL";

/// A periodic thread and its stop signal.
pub(crate) type StopHandle = (SyncSender<()>, JoinHandle<()>);

pub(crate) struct Inner {
    pub(crate) shared: Arc<Shared>,
    pub(crate) put_tx: SyncSender<AppendMsg>,
    /// The append stage, when network cores may run its batches (`append_runner`).
    pub(crate) inline_append: Option<crate::append_runner::WeakAppendHandle>,
    pub(crate) threads: Mutex<Vec<JoinHandle<()>>>,
    /// The HA server (master) or client (slave), if running.
    pub(crate) ha_threads: Mutex<Vec<JoinHandle<()>>>,
    pub(crate) reput_handle: Mutex<Option<JoinHandle<()>>>,
    pub(crate) housekeeping: Mutex<Option<StopHandle>>,
    /// The retention thread and its stop signal.
    pub(crate) cleaner: Mutex<Option<StopHandle>>,
    pub(crate) checkpoint: Arc<Mutex<Checkpoint>>,
    pub(crate) retention: Arc<Mutex<RetentionState>>,
    /// Held for the store's lifetime; released at shutdown so the directory can reopen.
    pub(crate) lock_file: Mutex<Option<File>>,
    pub(crate) shut: AtomicBool,
    /// No `abort` file was found at open: the previous run shut down cleanly.
    pub(crate) last_exit_ok: bool,
}

/// The message store. Cheap to clone; all clones share one store.
#[derive(Clone)]
pub struct MessageStore {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for MessageStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageStore")
            .field("root", &self.inner.shared.config.store_path_root_dir)
            .finish()
    }
}

impl MessageStore {
    pub(crate) fn shared(&self) -> &Shared {
        &self.inner.shared
    }

    /// Whether the previous run shut down cleanly (no `abort` file at open), i.e. this open
    /// ran normal rather than abnormal recovery.
    pub fn last_exit_ok(&self) -> bool {
        self.inner.last_exit_ok
    }

    /// The configuration the store runs with.
    pub fn config(&self) -> &StoreConfig {
        &self.shared().config
    }

    /// Whether the current append batch has run longer than `osPageCacheBusyTimeOutMills`.
    pub fn is_os_page_cache_busy(&self) -> bool {
        let begin = self.shared().begin_time_in_lock_ms.load(Ordering::Acquire);
        if begin == 0 {
            return false;
        }
        let held = now_ms() - begin;
        held > self.shared().live.os_page_cache_busy_timeout_ms() as i64 && held < 10_000_000
    }

    fn direct_ring_busy(&self) -> bool {
        let s = self.shared();
        match s.log.ring() {
            Some(ring) => {
                // Bytes the ring must still hold: not yet written to the files.
                let unflushed = s.log.max_offset().saturating_sub(ring.written());
                unflushed * 100
                    > ring.size() * u64::from(s.config.direct_write_ring_busy_ratio.clamp(1, 100))
            }
            None => false,
        }
    }

    /// Stores one or more pre-encoded records for a topic-queue. `on_done` runs exactly once,
    /// on a stage thread (after the flush under SYNC_FLUSH) or inline for refusals.
    pub fn put(&self, req: PutRequest, on_done: Box<dyn FnOnce(PutResult) + Send>) {
        self.put_received(req, Instant::now(), on_done);
    }

    /// [`MessageStore::put`] for a request received at `received_at`: its wait in the send
    /// queue (`waitTimeMillsInSendQueue`) counts from there, so a network core passes the
    /// clock reading it already took instead of reading it again for every put.
    pub fn put_received(
        &self,
        req: PutRequest,
        received_at: Instant,
        on_done: Box<dyn FnOnce(PutResult) + Send>,
    ) {
        let s = self.shared();
        s.count_put_request();
        if s.stopping.load(Ordering::Acquire) {
            s.refusals.refused(REFUSED_SHUTTING_DOWN);
            return on_done(PutResult::failed(PutMessageStatus::ServiceNotAvailable));
        }
        if s.ha.is_slave() {
            s.refusals.refused(REFUSED_SLAVE);
            return on_done(PutResult::failed(PutMessageStatus::ServiceNotAvailable));
        }
        if s.config.controller_mode
            && s.ha.replicas.sync_state_set_size() < s.config.min_in_sync_replicas as usize
        {
            s.refusals.refused(REFUSED_IN_SYNC_REPLICAS);
            return on_done(PutResult::failed(PutMessageStatus::InSyncReplicasNotEnough));
        }
        let flags = s.running_flags.load(Ordering::Acquire);
        if flags != 0 {
            s.refusals.refused(if flags & FLAG_DISK_FULL != 0 {
                REFUSED_DISK_FULL
            } else if flags & FLAG_STAGE_FAILED != 0 {
                REFUSED_STAGE_FAILED
            } else {
                REFUSED_LOGIC_QUEUE_ERROR
            });
            return on_done(PutResult::failed(PutMessageStatus::ServiceNotAvailable));
        }
        if self.is_os_page_cache_busy() {
            s.metrics.put_rejected_busy.fetch_add(1, Ordering::Relaxed);
            s.refusals.refused(REFUSED_PAGE_CACHE_BUSY);
            return on_done(PutResult::failed(PutMessageStatus::OsPageCacheBusy));
        }
        if self.direct_ring_busy() {
            s.metrics.put_rejected_busy.fetch_add(1, Ordering::Relaxed);
            s.refusals.refused(REFUSED_WRITE_RING_BUSY);
            return on_done(PutResult::failed(PutMessageStatus::OsPageCacheBusy));
        }
        if let Err(status) =
            append::validate(&req, s.live.max_message_size_bytes(), s.log.file_size())
        {
            return on_done(PutResult::failed(status));
        }
        let msg = AppendMsg::Put {
            req,
            done: Done::new(on_done),
            enqueued: received_at,
        };
        let msg = match s.core_ports.get() {
            Some(ports) => match ports.submit(msg) {
                Submitted::Queued => return,
                Submitted::Full(msg) => return self.refuse_queue_full(msg),
                Submitted::NotACore(msg) => msg,
            },
            None => msg,
        };
        match self.inner.put_tx.try_send(msg) {
            Ok(()) => s.append_doorbell.notify(),
            Err(TrySendError::Full(msg)) => self.refuse_queue_full(msg),
            Err(TrySendError::Disconnected(AppendMsg::Put { done, .. })) => run_callback(
                done,
                PutResult::failed(PutMessageStatus::ServiceNotAvailable),
            ),
            Err(_) => {}
        }
    }

    fn refuse_queue_full(&self, msg: AppendMsg) {
        let s = self.shared();
        s.metrics.put_rejected_busy.fetch_add(1, Ordering::Relaxed);
        s.refusals.refused(REFUSED_APPEND_QUEUE_FULL);
        if let AppendMsg::Put { done, .. } = msg {
            run_callback(done, PutResult::failed(PutMessageStatus::OsPageCacheBusy));
        }
    }

    /// Gives each network core of the broker's servers its own put ring into the append stage and
    /// its own completion ring back (see `core_port`). `max_in_flight_per_core` is the
    /// server's bound on a core's outstanding requests, which bounds its completions. Puts
    /// made on any other thread keep the shared queue. Attaching twice keeps the first.
    pub fn attach_network_cores(&self, doorbells: &[Arc<Notifier>], max_in_flight_per_core: usize) {
        let s = self.shared();
        let put_slots = (s.config.put_queue_capacity / doorbells.len().max(1)).max(64);
        let ports = CorePorts::new(
            doorbells,
            s.append_doorbell.clone(),
            put_slots,
            max_in_flight_per_core.max(put_slots),
        );
        if s.core_ports.set(ports).is_err() {
            tracing::warn!("network cores were already attached to the store; keeping the first");
        }
    }

    /// On a network core: runs its put completions and retries its waiting puts. On any
    /// other thread, or a core that was not attached, does nothing.
    pub fn run_core_completions(&self) {
        let s = self.shared();
        if let Some(ports) = s.core_ports.get() {
            ports.run_current_core(s.send_queue_wait_limit_ms.load(Ordering::Relaxed));
        }
    }

    /// On a network core, after a pass of its requests: the puts the pass queued in its
    /// ring are appended right here when the append thread is idle, else the thread is
    /// woken for them. Returns whether this core has completions to run. On any other
    /// thread, or a core that was not attached, does nothing.
    pub fn push_core_puts(&self) -> bool {
        let s = self.shared();
        let Some(ports) = s.core_ports.get() else {
            return false;
        };
        if !ports.end_pass() {
            return false;
        }
        match &self.inner.inline_append {
            Some(stage) => crate::append_runner::append_here_or_wake(stage, s),
            None => {
                s.append_doorbell.notify();
                false
            }
        }
    }

    /// Puts queued for the append stage right now: the shared queue is not counted
    /// (std's channel does not tell), every core's ring and waiting list is.
    pub fn queued_puts(&self) -> usize {
        self.shared().core_ports.get().map_or(0, |p| p.queued())
    }

    /// `waitTimeMillsInSendQueue` while `brokerFastFailureEnable`, else 0 (no limit): puts
    /// that wait longer for the append stage are refused with `SendQueueTimeout`.
    pub fn set_send_queue_wait_limit_ms(&self, limit_ms: u64) {
        self.shared()
            .send_queue_wait_limit_ms
            .store(limit_ms, Ordering::Relaxed);
    }

    /// Sets one of [`LIVE_STORE_KEYS`](crate::config::LIVE_STORE_KEYS) while the store runs;
    /// the stages read it on their next use. `Ok(false)`: a key fixed when the store opened.
    pub fn set_live_setting(&self, key: &str, value: &str) -> Result<bool, ConfigValueError> {
        self.shared().live.apply(key, value)
    }

    /// The live settings as they are now.
    pub fn live_settings(&self) -> &LiveStoreSettings {
        &self.shared().live
    }

    /// Blocking convenience over [`put`](Self::put) (tests, tools; never on a network core).
    pub fn put_blocking(&self, req: PutRequest) -> PutResult {
        let (tx, rx) = mpsc::sync_channel(1);
        self.put(
            req,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        rx.recv()
            .unwrap_or(PutResult::failed(PutMessageStatus::UnknownError))
    }

    pub fn commit_log_max_offset(&self) -> i64 {
        self.shared().log.max_offset() as i64
    }
    pub fn commit_log_min_offset(&self) -> i64 {
        self.shared().log.min_offset() as i64
    }
    /// Bytes stored but not yet dispatched to ConsumeQueue/index.
    pub fn dispatch_behind_bytes(&self) -> i64 {
        self.shared().dispatch_behind_bytes()
    }
    /// Bytes appended but not yet on disk.
    pub fn flush_behind_bytes(&self) -> i64 {
        let s = self.shared();
        s.log.max_offset() as i64 - s.log.flushed_offset() as i64
    }

    /// Registers a listener called by the reput stage for each dispatched message.
    pub fn add_arrival_listener(&self, l: Arc<dyn Fn(&ArrivalEvent<'_>) + Send + Sync>) {
        self.shared().add_listener(l);
    }

    /// Deletes a topic's ConsumeQueues and forgets its queue offsets (CommitLog records stay
    /// until retention removes their segments).
    pub fn delete_topic(&self, topic: &str) {
        let s = self.shared();
        if self
            .inner
            .put_tx
            .send(AppendMsg::DeleteTopic(topic.to_string()))
            .is_ok()
        {
            s.append_doorbell.notify();
        }
        s.cqs.remove_topic(topic);
        s.topic_generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Names of topics that have ConsumeQueues.
    pub fn topics(&self) -> Vec<String> {
        let mut t: Vec<String> = self
            .shared()
            .cqs
            .all()
            .iter()
            .map(|c| c.topic().to_string())
            .collect();
        t.sort();
        t.dedup();
        t
    }

    /// False when disk full, ConsumeQueue writes have been failing for
    /// `logic_queue_error_after_ms`, or shut down.
    pub fn is_writeable(&self) -> bool {
        self.shared().is_writeable()
    }

    /// False while the index cannot be written (e.g. no space for a new index file):
    /// puts and pulls go on, records dispatched meanwhile cannot be queried by key. It is
    /// retried about once a second and turns true again by itself.
    pub fn is_index_available(&self) -> bool {
        self.shared().index_available.load(Ordering::Acquire)
    }

    /// Runs one retention pass now as if triggered by the admin command
    /// (`executeDeleteFilesManually`): expired files are deleted regardless of the hour.
    /// Returns the CommitLog segments deleted.
    pub fn delete_expired_files_now(&self) -> usize {
        let mut st = self.inner.retention.lock_unpoisoned();
        st.manual_delete_remaining = st.manual_delete_remaining.max(1);
        self.retention_pass(&mut st)
    }

    /// Runs one retention pass now, the same as the periodic one every
    /// `cleanResourceInterval` (disk-usage check, deleteWhen hour, pending manual passes).
    /// Returns the CommitLog segments deleted.
    pub fn clean_files_now(&self) -> usize {
        let mut st = self.inner.retention.lock_unpoisoned();
        self.retention_pass(&mut st)
    }

    fn retention_pass(&self, st: &mut RetentionState) -> usize {
        let s = &self.inner.shared;
        retention::run_once(s, st, &mut |ms| {
            std::thread::sleep(Duration::from_millis(ms));
            !s.stopping.load(Ordering::Acquire)
        })
    }

    /// Makes the next 20 retention passes delete expired files whatever the hour (upstream
    /// `executeDeleteFilesManually`, the DELETE_EXPIRED_COMMITLOG admin command).
    pub fn execute_delete_files_manually(&self) {
        self.inner
            .retention
            .lock_unpoisoned()
            .manual_delete_remaining = retention::MANUAL_DELETE_PASSES;
        tracing::info!(
            "executeDeleteFilesManually: expired files are deleted over the next 20 passes"
        );
    }

    /// Slave: replicate from the master's HA address `host:port`; a change reconnects.
    pub fn update_ha_master_address(&self, addr: &str) {
        self.shared().ha.set_master_addr(addr);
    }

    /// Replication state: connected slaves (master) or the master link (slave).
    pub fn ha_status(&self) -> HaStatus {
        self.shared().ha.status()
    }

    /// Where this master's HA server listens, once bound.
    pub fn ha_listen_addr(&self) -> Option<std::net::SocketAddr> {
        self.shared().ha.listen_addr.get().copied()
    }

    /// Counters and latency summaries.
    pub fn metrics(&self) -> StoreMetrics {
        self.shared().store_metrics()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::FLAG_LOGIC_QUEUE_ERROR;
    use crate::test_util::small_config;

    fn put_one(store: &MessageStore, key: &str) -> PutResult {
        let props = format!("KEYS\u{1}{key}\u{2}");
        let out = crate::util::loopback_record("DF", 0, b"body", props.as_bytes());
        store.put_blocking(PutRequest::new("DF", 0, 0, out, 1))
    }

    /// A full disk refuses puts but does not make the store inconsistent: shutdown removes
    /// `abort` and the next start is normal. A lost ConsumeQueue write does keep `abort`.
    /// Refusals are counted per reason.
    #[test]
    fn disk_full_shuts_down_cleanly_and_lost_queue_writes_do_not() {
        let dir = crate::test_util::temp_dir("diskfull");
        let store = MessageStore::open(small_config(&dir)).unwrap();
        assert!(store.last_exit_ok(), "fresh store");
        assert_eq!(put_one(&store, "a").status, PutMessageStatus::PutOk);
        store.inner.shared.set_flag(FLAG_DISK_FULL);
        for _ in 0..1000 {
            assert_eq!(
                put_one(&store, "refused").status,
                PutMessageStatus::ServiceNotAvailable
            );
        }
        assert_eq!(
            store.metrics().put_refusals,
            vec![(REFUSED_DISK_FULL, 1000)]
        );
        store.shutdown();
        assert!(
            !dir.join("abort").exists(),
            "disk full alone is a clean stop"
        );

        let store = MessageStore::open(small_config(&dir)).unwrap();
        assert!(store.last_exit_ok());
        assert_eq!(store.max_offset_in_queue("DF", 0), 1);
        assert!(
            store.is_writeable(),
            "DISK_FULL is re-evaluated, not persisted"
        );
        store.inner.shared.set_flag(FLAG_LOGIC_QUEUE_ERROR);
        store.shutdown();
        assert!(
            dir.join("abort").exists(),
            "a lost queue write is not clean"
        );
        let store = MessageStore::open(small_config(&dir)).unwrap();
        assert!(!store.last_exit_ok());
        assert_eq!(store.max_offset_in_queue("DF", 0), 1);
        store.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A put made on an attached network core goes through that core's ring, and its
    /// callback runs on the core (when the core wakes on its doorbell), not on a stage.
    #[test]
    fn a_core_puts_through_its_ring_and_completes_on_its_own_thread() {
        let dir = crate::test_util::temp_dir("coreport");
        let store = MessageStore::open(small_config(&dir)).unwrap();
        let doorbell = Arc::new(Notifier::new().unwrap());
        store.attach_network_cores(std::slice::from_ref(&doorbell), 1024);
        let s2 = store.clone();
        let core = std::thread::spawn(move || {
            ringmq_ring::enter_core(0, &doorbell);
            let me = std::thread::current().id();
            let (tx, rx) = mpsc::channel();
            for i in 0..100 {
                let body = format!("m{i}");
                let rec = crate::util::loopback_record("CP", 1, body.as_bytes(), b"");
                let tx = tx.clone();
                s2.put(
                    PutRequest::new("CP", 1, 0, rec, 1),
                    Box::new(move |r| {
                        let _ = tx.send((r, std::thread::current().id()));
                    }),
                );
            }
            let mut got = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(10);
            while got.len() < 100 && Instant::now() < deadline {
                doorbell.wait_timeout(Duration::from_millis(50));
                doorbell.begin_drain();
                s2.run_core_completions();
                got.extend(rx.try_iter());
            }
            (me, got)
        });
        let (me, got) = core.join().unwrap();
        assert_eq!(got.len(), 100, "every put completed");
        let mut offsets: Vec<i64> = got.iter().map(|(r, _)| r.queue_offset).collect();
        offsets.sort_unstable();
        assert_eq!(offsets, (0..100).collect::<Vec<_>>());
        assert!(got.iter().all(|(r, _)| r.status == PutMessageStatus::PutOk));
        assert!(
            got.iter().all(|(_, t)| *t == me),
            "callbacks ran on the core"
        );
        store.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Runs `f` on a thread that is attached network core 0 of `store` and pushes its
    /// puts along after each pass, as a real core does.
    fn on_core<T: Send + 'static>(
        store: &MessageStore,
        f: impl FnOnce(&MessageStore) -> T + Send + 'static,
    ) -> T {
        let doorbell = Arc::new(Notifier::new().unwrap());
        store.attach_network_cores(std::slice::from_ref(&doorbell), 1024);
        let store = store.clone();
        // Let the append thread settle into its idle wait (start-up may have rung it).
        let deadline = Instant::now() + Duration::from_secs(5);
        while store.inner.shared.append_doorbell.is_pending() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20));
        std::thread::spawn(move || {
            ringmq_ring::enter_core(0, &doorbell);
            assert!(
                !store.push_core_puts(),
                "a pass that queued nothing runs nothing"
            );
            f(&store)
        })
        .join()
        .unwrap()
    }

    /// Puts `body` to `topic`/`queue_id`; its result goes to `tx`.
    fn put_answering_to(
        store: &MessageStore,
        topic: &str,
        queue_id: i32,
        body: &[u8],
        tx: &mpsc::Sender<PutResult>,
    ) {
        let rec = crate::util::loopback_record(topic, queue_id, body, b"");
        let tx = tx.clone();
        store.put(
            PutRequest::new(topic, queue_id, 0, rec, 1),
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
    }

    /// The core's answer to a put whose result goes to `rx`: runs the core's completions
    /// until it comes or its callback is dropped (bounded). Needed where the append thread
    /// may have taken the batch: its idle wait ends every `IDLE_WAIT`, and a batch it runs
    /// completes on the core after the pass.
    fn answer_on_core(
        store: &MessageStore,
        rx: &mpsc::Receiver<PutResult>,
    ) -> Result<PutResult, mpsc::RecvTimeoutError> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            store.run_core_completions();
            match rx.recv_timeout(Duration::from_millis(5)) {
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                answer => return answer,
            }
        }
    }

    /// While the append thread idles, a core that queued puts appends them itself at the
    /// end of its pass and runs their callbacks: no wake-up of the append thread, none
    /// of the core. (The append thread's periodic idle look may take a pass's batch now
    /// and then; such a pass is answered after it.)
    #[test]
    fn a_core_appends_its_own_puts_while_the_append_thread_idles() {
        let dir = crate::test_util::temp_dir("inline");
        let store = MessageStore::open(small_config(&dir)).unwrap();
        let appender_writes = store.inner.shared.append_doorbell.writes();
        let (got, inline_passes) = on_core(&store, |store| {
            let (tx, rx) = mpsc::channel();
            let (mut got, mut inline_passes) = (Vec::new(), 0u64);
            for pass in 0..10 {
                for i in 0..5 {
                    let body = format!("m{pass}-{i}");
                    put_answering_to(store, "INL", 2, body.as_bytes(), &tx);
                }
                if store.push_core_puts() {
                    inline_passes += 1;
                    store.run_core_completions();
                    let done: Vec<PutResult> = rx.try_iter().collect();
                    assert_eq!(done.len(), 5, "pass {pass}: answered in the same pass");
                    got.extend(done);
                } else {
                    for _ in 0..5 {
                        got.push(answer_on_core(store, &rx).expect("answered after the pass"));
                    }
                }
            }
            (got, inline_passes)
        });
        let offsets: Vec<i64> = got.iter().map(|r| r.queue_offset).collect();
        assert_eq!(offsets, (0..50).collect::<Vec<_>>(), "in order, no hole");
        assert!(got.iter().all(|r| r.status == PutMessageStatus::PutOk));
        assert!(inline_passes >= 8, "{inline_passes} of 10 passes ran here");
        // A core pays a wake-up only for a pass whose batch the thread was running.
        assert!(
            store.inner.shared.append_doorbell.writes() - appender_writes <= 10 - inline_passes,
            "the append thread was woken for passes the core ran itself"
        );
        assert_eq!(store.max_offset_in_queue("INL", 2), 50);
        store.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Direct mode: a core appends its own puts inline while the write ring has room for
    /// the whole batch. A batch the ring cannot take at once (a put larger than half the
    /// ring here) is left to the append thread, which may wait for the flusher: the core
    /// never waits, and every put is answered in order.
    #[test]
    fn a_direct_mode_core_appends_inline_only_while_the_write_ring_has_room() {
        let dir = crate::test_util::temp_dir("inlinedirect");
        let config = crate::StoreConfig {
            write_mode: crate::config::WriteMode::Direct,
            mapped_file_size_commit_log: 1024 * 1024,
            direct_write_ring_size_bytes: 256 * 1024,
            append_batch_max_bytes: 16 * 1024,
            ..small_config(&dir)
        };
        let store = MessageStore::open(config).unwrap();
        let (got, inline_passes, big_ran_here) = on_core(&store, |store| {
            let (tx, rx) = mpsc::channel();
            let (mut got, mut inline_passes) = (Vec::new(), 0u64);
            for pass in 0..10 {
                for i in 0..5 {
                    let body = format!("d{pass}-{i}");
                    put_answering_to(store, "INLD", 0, body.as_bytes(), &tx);
                }
                if store.push_core_puts() {
                    inline_passes += 1;
                }
                for _ in 0..5 {
                    got.push(answer_on_core(store, &rx).expect("answered"));
                }
            }
            put_answering_to(store, "INLD", 0, &vec![b'x'; 200 * 1024], &tx);
            let big_ran_here = store.push_core_puts();
            got.push(answer_on_core(store, &rx).expect("the large put is answered"));
            (got, inline_passes, big_ran_here)
        });
        let offsets: Vec<i64> = got.iter().map(|r| r.queue_offset).collect();
        assert_eq!(offsets, (0..51).collect::<Vec<_>>(), "in order, no hole");
        assert!(got.iter().all(|r| r.status == PutMessageStatus::PutOk));
        assert!(inline_passes >= 8, "{inline_passes} of 10 passes ran here");
        assert!(
            !big_ran_here,
            "a batch the ring cannot take is the append thread's"
        );
        assert_eq!(store.max_offset_in_queue("INLD", 0), 51);
        store.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A batch run on a core that panics outside the per-put fence ends the append stage
    /// as a panic on its thread does: the core keeps running, and later puts are refused
    /// SERVICE_NOT_AVAILABLE at once.
    #[test]
    fn a_panic_in_a_batch_run_on_a_core_ends_the_stage_and_the_core_goes_on() {
        let dir = crate::test_util::temp_dir("inlinepanic");
        let store = MessageStore::open(small_config(&dir)).unwrap();
        crate::fault::inject_stage_panic("CORESTAGEKILL");
        let after = on_core(&store, |store| {
            let put = |topic: &str| {
                let (tx, rx) = mpsc::channel();
                put_answering_to(store, topic, 0, b"body", &tx);
                drop(tx);
                store.push_core_puts();
                answer_on_core(store, &rx)
            };
            assert_eq!(put("BEFORE").unwrap().status, PutMessageStatus::PutOk);
            assert!(put("CORESTAGEKILL").is_err(), "its callback is dropped");
            let deadline = Instant::now() + Duration::from_secs(5);
            while store.is_writeable() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            put("AFTER").map(|r| r.status)
        });
        assert_eq!(after, Ok(PutMessageStatus::ServiceNotAvailable));
        store.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A panic in the append stage's per-put code fails that put only: the stage goes on,
    /// other puts store, and the queue offsets have no hole.
    #[test]
    fn a_panic_in_the_append_stage_fails_one_put_and_the_stage_goes_on() {
        let dir = crate::test_util::temp_dir("appendpanic");
        let store = MessageStore::open(small_config(&dir)).unwrap();
        crate::fault::inject_append_panic("PANICKY");
        let put = |topic: &str| {
            let rec = crate::util::loopback_record(topic, 0, b"body", b"");
            store.put_blocking(PutRequest::new(topic, 0, 0, rec, 1))
        };
        assert_eq!(put("GOOD").queue_offset, 0);
        for _ in 0..3 {
            assert_eq!(put("PANICKY").status, PutMessageStatus::UnknownError);
        }
        let after = put("GOOD");
        assert_eq!(after.status, PutMessageStatus::PutOk);
        assert_eq!(after.queue_offset, 1, "no hole in GOOD's queue offsets");
        assert_eq!(
            store.max_offset_in_queue("PANICKY", 0),
            0,
            "nothing of it stored"
        );
        assert_eq!(
            store.metrics().put_refusals,
            vec![(crate::append::REFUSED_APPEND_PANIC, 3)]
        );
        store.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A panic while a record is dispatched (a defect in per-record code) is caught on
    /// whichever thread dispatched it (the append thread under ASYNC_FLUSH on a shared
    /// core, the reput thread under SYNC_FLUSH); the record is dispatched again and
    /// becomes pullable, and puts go on being accepted: neither stage ends.
    #[test]
    fn a_panic_in_dispatch_is_retried_and_puts_go_on() {
        use crate::config::FlushDiskType;
        for (flush, topic) in [
            (FlushDiskType::AsyncFlush, "DPANA"),
            (FlushDiskType::SyncFlush, "DPANS"),
        ] {
            let dir = crate::test_util::temp_dir("dispatchpanic");
            let config = StoreConfig {
                flush_disk_type: flush,
                ..small_config(&dir)
            };
            let store = MessageStore::open(config).unwrap();
            let put = || {
                let rec = crate::util::loopback_record(topic, 0, b"body", b"");
                store
                    .put_blocking(PutRequest::new(topic, 0, 0, rec, 1))
                    .status
            };
            let dispatched = |n: i64| {
                let deadline = Instant::now() + Duration::from_secs(10);
                while store.max_offset_in_queue(topic, 0) < n && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
                store.max_offset_in_queue(topic, 0) == n
            };
            assert_eq!(put(), PutMessageStatus::PutOk);
            assert!(dispatched(1), "{flush:?}");
            crate::fault::inject_dispatch_panic_once(topic);
            assert_eq!(put(), PutMessageStatus::PutOk, "{flush:?}");
            assert_eq!(put(), PutMessageStatus::PutOk, "{flush:?}");
            assert!(
                dispatched(3),
                "{flush:?}: the record that panicked is dispatched again"
            );
            assert!(
                !crate::fault::dispatch_panic_pending(topic),
                "the fault fired"
            );
            let pulled = store.get_message(topic, 0, 0, 32, 1 << 20, &crate::AcceptAll);
            assert_eq!(pulled.messages.len(), 3, "{flush:?}");
            assert_eq!(put(), PutMessageStatus::PutOk, "{flush:?}");
            assert!(dispatched(4), "{flush:?}");
            store.shutdown();
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    /// If the append stage thread itself dies, the put it held is answered (not lost) and
    /// every later put is refused SERVICE_NOT_AVAILABLE at once instead of hanging.
    #[test]
    fn a_dead_append_stage_refuses_puts_instead_of_hanging_them() {
        let dir = crate::test_util::temp_dir("stagedead");
        let store = MessageStore::open(small_config(&dir)).unwrap();
        crate::fault::inject_stage_panic("STAGEKILL");
        let put = |topic: &str| {
            let rec = crate::util::loopback_record(topic, 0, b"body", b"");
            store.put_blocking(PutRequest::new(topic, 0, 0, rec, 1))
        };
        assert_eq!(put("BEFORE").status, PutMessageStatus::PutOk);
        assert_ne!(put("STAGEKILL").status, PutMessageStatus::PutOk);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while store.is_writeable() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        for _ in 0..3 {
            assert_eq!(put("AFTER").status, PutMessageStatus::ServiceNotAvailable);
        }
        assert!(store
            .metrics()
            .put_refusals
            .contains(&(REFUSED_STAGE_FAILED, 3)));
        store.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A crash that lands between two page writes (direct mode) leaves the last record's
    /// head on disk and its properties zero; its body CRC still holds. Recovery ends the
    /// log before it instead of keeping a record with half its properties.
    #[test]
    fn recovery_drops_a_record_torn_across_pages() {
        let dir = crate::test_util::temp_dir("torn");
        let store = MessageStore::open(small_config(&dir)).unwrap();
        let put = |key: &str| {
            let props = format!("KEYS\u{1}{key}\u{2}UNIQ_KEY\u{1}{key}-uniq\u{2}");
            let rec = crate::util::loopback_record("TORN", 0, b"body", props.as_bytes());
            store.put_blocking(PutRequest::new("TORN", 0, 0, rec, 1))
        };
        let first = put("first-key");
        let second = put("second-key");
        assert_eq!(second.status, PutMessageStatus::PutOk);
        let first_end = (first.wrote_offset + i64::from(first.wrote_bytes)) as u64;
        let second_end = (second.wrote_offset + i64::from(second.wrote_bytes)) as u64;
        store.shutdown();
        let segment = store.config().commit_log_dir().join(format!("{:020}", 0));
        let mut bytes = std::fs::read(&segment).unwrap();
        // The properties' last 12 bytes never reached the disk.
        bytes[second_end as usize - 12..second_end as usize].fill(0);
        std::fs::write(&segment, &bytes).unwrap();
        std::fs::write(dir.join("abort"), b"").unwrap();
        let store = MessageStore::open(small_config(&dir)).unwrap();
        assert_eq!(store.commit_log_max_offset() as u64, first_end);
        assert_eq!(store.max_offset_in_queue("TORN", 0), 1);
        store.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
