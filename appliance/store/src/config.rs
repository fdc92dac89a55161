//! Store configuration: `MessageStoreConfig` keys with RocketMQ's defaults (`store.md` §14),
//! plus the ringmq-only knobs (write mode, stage cores, queue bounds), and the directory
//! layout derived from `storePathRootDir`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// `flushDiskType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushDiskType {
    /// `SYNC_FLUSH`: a put completes after its bytes are on disk (GroupCommit).
    SyncFlush,
    /// `ASYNC_FLUSH`: a put completes after the append; a timer flushes.
    AsyncFlush,
}

impl FlushDiskType {
    /// The upstream key value.
    pub fn name(self) -> &'static str {
        match self {
            FlushDiskType::SyncFlush => "SYNC_FLUSH",
            FlushDiskType::AsyncFlush => "ASYNC_FLUSH",
        }
    }
}

/// How CommitLog bytes reach the disk (`ringmq.writeMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Classic RocketMQ: append into the mapped segment, msync to flush.
    Mmap,
    /// O_DIRECT writes of 4 KiB-aligned chunks from a registered write ring via io_uring;
    /// recent bytes are served to readers from the ring.
    Direct,
}

/// `brokerRole`: what the store does with replication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerRole {
    /// Serves slaves; puts complete without waiting for them.
    AsyncMaster,
    /// Serves slaves; with `inSyncReplicas` ≥ 2 a WAIT put completes once a slave holds it.
    SyncMaster,
    /// Replicates the master's CommitLog and refuses puts of its own.
    Slave,
}

impl BrokerRole {
    /// The upstream key value.
    pub fn name(self) -> &'static str {
        match self {
            BrokerRole::AsyncMaster => "ASYNC_MASTER",
            BrokerRole::SyncMaster => "SYNC_MASTER",
            BrokerRole::Slave => "SLAVE",
        }
    }
}

/// Store configuration; `Default` gives RocketMQ's defaults.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub store_path_root_dir: PathBuf,
    /// `mappedFileSizeCommitLog` (1 GiB).
    pub mapped_file_size_commit_log: u64,
    /// ConsumeQueue units per file (300 000; file = units × 20 bytes).
    pub mapped_file_size_consume_queue_units: u32,
    pub flush_disk_type: FlushDiskType,
    pub write_mode: WriteMode,
    /// `syncFlushTimeout`.
    pub sync_flush_timeout_ms: u64,
    /// `flushIntervalCommitLog`.
    pub flush_interval_commit_log_ms: u64,
    /// `flushCommitLogLeastPages`.
    pub flush_commit_log_least_pages: u32,
    /// `flushCommitLogThoroughInterval`.
    pub flush_commit_log_thorough_interval_ms: u64,
    /// `flushIntervalConsumeQueue`.
    pub flush_interval_consume_queue_ms: u64,
    /// `flushConsumeQueueLeastPages`: a ConsumeQueue file is flushed on a tick only once
    /// its units crossed this many page boundaries (or it is full).
    pub flush_consume_queue_least_pages: u32,
    /// `flushConsumeQueueThoroughInterval`: at least this often every unflushed unit is
    /// flushed and the checkpoint's logics timestamp advances.
    pub flush_consume_queue_thorough_interval_ms: u64,
    /// `maxMessageSize`: limit of one message body.
    pub max_message_size: usize,
    /// `osPageCacheBusyTimeOutMills`.
    pub os_page_cache_busy_timeout_ms: u64,
    /// `fileReservedTime` in hours.
    pub file_reserved_time_hours: u32,
    /// `deleteWhen`: hours separated by `;`.
    pub delete_when: String,
    /// `diskMaxUsedSpaceRatio` (percent).
    pub disk_max_used_space_ratio: u32,
    /// `diskSpaceWarningLevelRatio` (percent): above it writes are refused.
    pub disk_space_warning_level_ratio: u32,
    /// `diskSpaceCleanForciblyRatio` (percent).
    pub disk_space_clean_forcibly_ratio: u32,
    /// `cleanFileForciblyEnable`.
    pub clean_file_forcibly_enable: bool,
    /// `cleanResourceInterval`.
    pub clean_resource_interval_ms: u64,
    /// `deleteFileBatchMax`.
    pub delete_file_batch_max: usize,
    /// `deleteCommitLogFilesInterval`: pause between two CommitLog segment deletions (each
    /// unlink of a large file costs the filesystem a burst of journal work).
    pub delete_commit_log_files_interval_ms: u64,
    /// `deleteConsumeQueueFilesInterval`: pause after each queue that lost files.
    pub delete_consume_queue_files_interval_ms: u64,
    /// `redeleteHangedFileInterval`: how often a segment whose unlink failed is retried.
    pub redelete_hanged_file_interval_ms: u64,
    /// Clock and disk-usage source of retention (tests replace them).
    pub retention_probe: RetentionProbe,
    /// `checkCRCOnRecover`.
    pub check_crc_on_recover: bool,
    /// `messageIndexEnable`.
    pub message_index_enable: bool,
    /// `maxHashSlotNum`.
    pub max_hash_slot_num: u32,
    /// `maxIndexNum`.
    pub max_index_num: u32,
    /// `maxMsgsNumBatch`: cap on query results.
    pub max_msgs_num_batch: usize,
    /// `maxTransferBytesOnMessageInMemory` / `...CountOnMessageInMemory`.
    pub max_transfer_bytes_on_message_in_memory: usize,
    pub max_transfer_count_on_message_in_memory: usize,
    /// `maxTransferBytesOnMessageInDisk` / `...CountOnMessageInDisk`.
    pub max_transfer_bytes_on_message_in_disk: usize,
    pub max_transfer_count_on_message_in_disk: usize,
    /// `accessMessageInMemoryMaxRatio` (percent of physical RAM).
    pub access_message_in_memory_max_ratio: u32,
    /// `maxFilterMessageSize`: bytes of ConsumeQueue scanned per get at least.
    pub max_filter_message_size: usize,
    /// The broker's address as written in STOREHOST.
    pub store_host: SocketAddr,
    /// Core to pin the append stage to (None: not pinned).
    pub append_core: Option<usize>,
    /// Core to pin the flush stage to.
    pub flush_core: Option<usize>,
    /// Core to pin the reput stage to.
    pub reput_core: Option<usize>,
    /// `warmMapedFileEnable`: zero each new CommitLog segment's blocks on disk before use
    /// (in the background allocator, O_DIRECT). Off by default as upstream: a new segment
    /// is only reserved (fallocate), which writes nothing; on, every segment costs its
    /// size in device writes once, and SYNC_FLUSH syncs then overwrite written blocks
    /// instead of converting unwritten extents (no journal commit per sync).
    pub warm_mapped_file_enable: bool,
    /// ringmq: bound of the producer → append stage queue (requests). A full queue answers
    /// OS_PAGE_CACHE_BUSY rather than blocking the producer's core.
    pub put_queue_capacity: usize,
    /// ringmq: most requests the append stage drains into one batch.
    pub append_batch_max_requests: usize,
    /// ringmq: most record bytes the append stage takes into one batch (bounds the
    /// critical-section time a batch can add to OS_PAGE_CACHE_BUSY's clock).
    pub append_batch_max_bytes: usize,
    /// ringmq: size of the direct-mode write ring (registered, 4 KiB aligned).
    pub direct_write_ring_size_bytes: usize,
    /// ringmq: direct mode refuses puts (OS_PAGE_CACHE_BUSY) when unflushed bytes exceed
    /// this percentage of the write ring.
    pub direct_write_ring_busy_ratio: u32,
    /// ringmq: the append stage reads its perf counters (context switches, page faults,
    /// ...) around every N-th batch's critical section (0: never, 1: every batch). A read
    /// costs about as much as a short critical section, hence sampling.
    pub append_perf_sample_every: u32,
    /// ringmq (not a properties key): how long ConsumeQueue writes may keep failing before
    /// puts are refused (LOGIC_QUEUE_ERROR). Upstream retries a failed unit 30 times a
    /// second apart before it marks the error; dispatch here keeps retrying after that
    /// too, and puts are accepted again as soon as a retry succeeds.
    pub logic_queue_error_after_ms: u64,
    /// `brokerRole`: the role a store opens with. In controller mode the controller
    /// decides instead, and the live role is [`crate::MessageStore::broker_role`].
    pub broker_role: BrokerRole,
    /// `enableControllerMode`: the store opens as a slave (it refuses puts until the
    /// controller elects it) and runs both HA ends, so a role change needs no restart.
    pub controller_mode: bool,
    /// `allAckInSyncStateSet` (controller mode): a put that waits for replicas completes
    /// once every SyncStateSet member holds it, and consumers see only such messages.
    pub all_ack_in_sync_state_set: bool,
    /// `syncFromLastFile` (controller mode): an empty slave starts at the master's last
    /// segment rather than its oldest.
    pub sync_from_last_file: bool,
    /// `asyncLearner` (controller mode): this slave never joins the SyncStateSet.
    pub async_learner: bool,
    /// `haMaxTimeSlaveNotCatchup`: a SyncStateSet member that has not caught up for this
    /// long is dropped from the set.
    pub ha_max_time_slave_not_catchup_ms: u64,
    /// `minInSyncReplicas` (controller mode): puts are refused while the SyncStateSet has
    /// fewer members.
    pub min_in_sync_replicas: u32,
    /// `haListenPort` (the broker passes listenPort + 1 unless set).
    pub ha_listen_port: u16,
    /// Where the master's HA server listens (`bindAddress`); None: no HA server (a store
    /// used without a broker).
    pub ha_bind_ip: Option<std::net::IpAddr>,
    /// `haMasterAddress` (`host:port`): the slave's master before the name server tells.
    pub ha_master_address: Option<String>,
    /// `haSendHeartbeatInterval`.
    pub ha_send_heartbeat_interval_ms: u64,
    /// `haHousekeepingInterval`: a connection silent this long is closed.
    pub ha_housekeeping_interval_ms: u64,
    /// `haTransferBatchSize`: most CommitLog bytes in one master frame.
    pub ha_transfer_batch_size_bytes: usize,
    /// `haMaxGapNotInSync`: a slave further behind than this is not in sync.
    pub ha_max_gap_not_in_sync_bytes: u64,
    /// `haFlowControlEnable`.
    pub ha_flow_control_enable: bool,
    /// `maxHaTransferByteInSecond` (per connection, with flow control on).
    pub max_ha_transfer_bytes_per_second: u64,
    /// `slaveTimeout`: how long a SYNC_MASTER put waits for a slave's ack.
    pub slave_timeout_ms: u64,
    /// `inSyncReplicas`: replicas (master included) that must hold a SYNC_MASTER put.
    pub in_sync_replicas: u32,
    /// `totalReplicas`.
    pub total_replicas: u32,
    /// Core to pin the HA stage (`ringmq-ha`) to.
    pub ha_core: Option<usize>,
    /// `ringmq.haThreadNice`: the nice value of the HA threads (master sender, slave
    /// client), -20..=19. Replication lag is scheduling delay when the HA threads share
    /// cores with busy network and append threads; a lower value lets them run first.
    /// Lowering needs `CAP_SYS_NICE` or `LimitNICE=` (the systemd unit sets it); without
    /// either the threads keep the process's value and say so once.
    pub ha_thread_nice: i32,
}

/// Default of `ringmq.haThreadNice`: measured on 2 cores shared by master, slave and load,
/// it took replication lag p50 at 50k msg/s from about 1 ms to under 0.2 ms.
pub const DEFAULT_HA_THREAD_NICE: i32 = -10;

/// Retention's view of time and disk usage. Production reads the system clock and
/// `statvfs`; tests install their own, since a disk cannot be filled on demand nor a
/// `deleteWhen` hour waited for.
#[derive(Clone, Default)]
pub struct RetentionProbe {
    now_ms: Option<Arc<dyn Fn() -> i64 + Send + Sync>>,
    disk_used_percent: Option<DiskUsageFn>,
}

/// Used percentage of the partition holding a path (None: unknown).
type DiskUsageFn = Arc<dyn Fn(&Path) -> Option<u32> + Send + Sync>;

impl RetentionProbe {
    /// Replaces the clock (ms since the epoch) used for file expiry and the deleteWhen hour.
    pub fn with_clock(mut self, now_ms: impl Fn() -> i64 + Send + Sync + 'static) -> Self {
        self.now_ms = Some(Arc::new(now_ms));
        self
    }
    /// Replaces the used percentage of the partition holding a path (None: unknown).
    pub fn with_disk_usage(
        mut self,
        used_percent: impl Fn(&Path) -> Option<u32> + Send + Sync + 'static,
    ) -> Self {
        self.disk_used_percent = Some(Arc::new(used_percent));
        self
    }
    pub fn now_ms(&self) -> i64 {
        self.now_ms
            .as_ref()
            .map_or_else(ringmq_sync::now_ms, |f| f())
    }
    pub fn disk_used_percent(&self, path: &Path) -> Option<u32> {
        match &self.disk_used_percent {
            Some(f) => f(path),
            None => crate::util::disk_used_percent(path),
        }
    }
}

impl std::fmt::Debug for RetentionProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetentionProbe")
            .field(
                "clock",
                &if self.now_ms.is_some() {
                    "replaced"
                } else {
                    "system"
                },
            )
            .field(
                "disk_usage",
                &if self.disk_used_percent.is_some() {
                    "replaced"
                } else {
                    "statvfs"
                },
            )
            .finish()
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."));
        StoreConfig {
            store_path_root_dir: home.join("store"),
            mapped_file_size_commit_log: 1024 * 1024 * 1024,
            mapped_file_size_consume_queue_units: 300_000,
            flush_disk_type: FlushDiskType::AsyncFlush,
            write_mode: WriteMode::Mmap,
            sync_flush_timeout_ms: 5000,
            flush_interval_commit_log_ms: 500,
            flush_commit_log_least_pages: 4,
            flush_commit_log_thorough_interval_ms: 10_000,
            flush_interval_consume_queue_ms: 1000,
            flush_consume_queue_least_pages: 2,
            flush_consume_queue_thorough_interval_ms: 60_000,
            max_message_size: 4 * 1024 * 1024,
            os_page_cache_busy_timeout_ms: 1000,
            file_reserved_time_hours: 72,
            delete_when: "04".to_string(),
            disk_max_used_space_ratio: 75,
            disk_space_warning_level_ratio: 90,
            disk_space_clean_forcibly_ratio: 85,
            clean_file_forcibly_enable: true,
            clean_resource_interval_ms: 10_000,
            delete_file_batch_max: 10,
            delete_commit_log_files_interval_ms: 100,
            delete_consume_queue_files_interval_ms: 100,
            redelete_hanged_file_interval_ms: 120_000,
            retention_probe: RetentionProbe::default(),
            check_crc_on_recover: true,
            message_index_enable: true,
            max_hash_slot_num: 5_000_000,
            max_index_num: 20_000_000,
            max_msgs_num_batch: 64,
            max_transfer_bytes_on_message_in_memory: 256 * 1024,
            max_transfer_count_on_message_in_memory: 32,
            max_transfer_bytes_on_message_in_disk: 64 * 1024,
            max_transfer_count_on_message_in_disk: 8,
            access_message_in_memory_max_ratio: 40,
            max_filter_message_size: 16_000,
            store_host: SocketAddr::from(([127, 0, 0, 1], 10911)),
            append_core: None,
            flush_core: None,
            reput_core: None,
            warm_mapped_file_enable: false,
            put_queue_capacity: 16 * 1024,
            append_batch_max_requests: 1024,
            append_batch_max_bytes: 1024 * 1024,
            direct_write_ring_size_bytes: 64 * 1024 * 1024,
            direct_write_ring_busy_ratio: 75,
            append_perf_sample_every: 16,
            logic_queue_error_after_ms: 30_000,
            broker_role: BrokerRole::AsyncMaster,
            ha_listen_port: 10912,
            ha_bind_ip: None,
            ha_master_address: None,
            controller_mode: false,
            all_ack_in_sync_state_set: false,
            sync_from_last_file: false,
            async_learner: false,
            ha_max_time_slave_not_catchup_ms: 15_000,
            min_in_sync_replicas: 1,
            ha_send_heartbeat_interval_ms: 5000,
            ha_housekeeping_interval_ms: 20_000,
            ha_transfer_batch_size_bytes: 32 * 1024,
            ha_max_gap_not_in_sync_bytes: 256 * 1024 * 1024,
            ha_flow_control_enable: false,
            max_ha_transfer_bytes_per_second: 100 * 1024 * 1024,
            slave_timeout_ms: 3000,
            in_sync_replicas: 1,
            total_replicas: 1,
            ha_core: None,
            ha_thread_nice: DEFAULT_HA_THREAD_NICE,
        }
    }
}

/// Why a configuration key could not be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigValueError {
    pub key: String,
    pub value: String,
}

impl std::fmt::Display for ConfigValueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "invalid value {:?} for store config key {}",
            self.value, self.key
        )
    }
}

impl std::error::Error for ConfigValueError {}

impl StoreConfig {
    /// `<root>/commitlog`.
    pub fn commit_log_dir(&self) -> PathBuf {
        self.store_path_root_dir.join("commitlog")
    }
    /// `<root>/consumequeue`.
    pub fn consume_queue_dir(&self) -> PathBuf {
        self.store_path_root_dir.join("consumequeue")
    }
    /// `<root>/index`.
    pub fn index_dir(&self) -> PathBuf {
        self.store_path_root_dir.join("index")
    }
    /// `<root>/checkpoint`.
    pub fn checkpoint_path(&self) -> PathBuf {
        self.store_path_root_dir.join("checkpoint")
    }
    /// `<root>/abort`.
    pub fn abort_path(&self) -> PathBuf {
        self.store_path_root_dir.join("abort")
    }
    /// `<root>/lock`.
    pub fn lock_path(&self) -> PathBuf {
        self.store_path_root_dir.join("lock")
    }
    /// `<root>/config`, where the broker's metadata JSON files live.
    pub fn config_dir(&self) -> PathBuf {
        self.store_path_root_dir.join("config")
    }

    /// Applies one `broker.conf` key if it is a store key. Returns `Ok(false)` for keys
    /// this config does not know (the caller reports them), `Err` for a bad value.
    pub fn apply_property(&mut self, key: &str, value: &str) -> Result<bool, ConfigValueError> {
        let v = value.trim();
        let bad = || ConfigValueError {
            key: key.to_string(),
            value: value.to_string(),
        };
        fn num<T: std::str::FromStr>(
            v: &str,
            bad: impl Fn() -> ConfigValueError,
        ) -> Result<T, ConfigValueError> {
            v.parse().map_err(|_| bad())
        }
        fn boolean(v: &str, bad: impl Fn() -> ConfigValueError) -> Result<bool, ConfigValueError> {
            match v {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(bad()),
            }
        }
        match key {
            "storePathRootDir" => self.store_path_root_dir = PathBuf::from(v),
            "mappedFileSizeCommitLog" => self.mapped_file_size_commit_log = num(v, bad)?,
            "mappedFileSizeConsumeQueue" => {
                let bytes: u64 = num(v, bad)?;
                self.mapped_file_size_consume_queue_units = bytes.div_ceil(20) as u32;
            }
            "flushDiskType" => {
                self.flush_disk_type = match v {
                    "SYNC_FLUSH" => FlushDiskType::SyncFlush,
                    "ASYNC_FLUSH" => FlushDiskType::AsyncFlush,
                    _ => return Err(bad()),
                }
            }
            "ringmq.writeMode" => {
                self.write_mode = match v {
                    "mmap" => WriteMode::Mmap,
                    "direct" => WriteMode::Direct,
                    _ => return Err(bad()),
                }
            }
            "transientStorePoolEnable" => {
                if boolean(v, bad)? {
                    self.write_mode = WriteMode::Direct;
                }
            }
            "syncFlushTimeout" => self.sync_flush_timeout_ms = num(v, bad)?,
            "flushIntervalCommitLog" => self.flush_interval_commit_log_ms = num(v, bad)?,
            "flushCommitLogLeastPages" => self.flush_commit_log_least_pages = num(v, bad)?,
            "flushCommitLogThoroughInterval" => {
                self.flush_commit_log_thorough_interval_ms = num(v, bad)?
            }
            "flushIntervalConsumeQueue" => self.flush_interval_consume_queue_ms = num(v, bad)?,
            "flushConsumeQueueLeastPages" => self.flush_consume_queue_least_pages = num(v, bad)?,
            "flushConsumeQueueThoroughInterval" => {
                self.flush_consume_queue_thorough_interval_ms = num(v, bad)?
            }
            "maxMessageSize" => self.max_message_size = num(v, bad)?,
            "osPageCacheBusyTimeOutMills" => self.os_page_cache_busy_timeout_ms = num(v, bad)?,
            "fileReservedTime" => self.file_reserved_time_hours = num(v, bad)?,
            "deleteWhen" => self.delete_when = v.to_string(),
            "diskMaxUsedSpaceRatio" => self.disk_max_used_space_ratio = num(v, bad)?,
            "diskSpaceWarningLevelRatio" => self.disk_space_warning_level_ratio = num(v, bad)?,
            "diskSpaceCleanForciblyRatio" => self.disk_space_clean_forcibly_ratio = num(v, bad)?,
            "cleanFileForciblyEnable" => self.clean_file_forcibly_enable = boolean(v, bad)?,
            "cleanResourceInterval" => self.clean_resource_interval_ms = num(v, bad)?,
            "deleteFileBatchMax" => self.delete_file_batch_max = num(v, bad)?,
            "deleteCommitLogFilesInterval" => {
                self.delete_commit_log_files_interval_ms = num(v, bad)?
            }
            "deleteConsumeQueueFilesInterval" => {
                self.delete_consume_queue_files_interval_ms = num(v, bad)?
            }
            "redeleteHangedFileInterval" => self.redelete_hanged_file_interval_ms = num(v, bad)?,
            "checkCRCOnRecover" => self.check_crc_on_recover = boolean(v, bad)?,
            "messageIndexEnable" => self.message_index_enable = boolean(v, bad)?,
            "maxHashSlotNum" => self.max_hash_slot_num = num(v, bad)?,
            "maxIndexNum" => self.max_index_num = num(v, bad)?,
            "maxMsgsNumBatch" => self.max_msgs_num_batch = num(v, bad)?,
            "maxTransferBytesOnMessageInMemory" => {
                self.max_transfer_bytes_on_message_in_memory = num(v, bad)?
            }
            "maxTransferCountOnMessageInMemory" => {
                self.max_transfer_count_on_message_in_memory = num(v, bad)?
            }
            "maxTransferBytesOnMessageInDisk" => {
                self.max_transfer_bytes_on_message_in_disk = num(v, bad)?
            }
            "maxTransferCountOnMessageInDisk" => {
                self.max_transfer_count_on_message_in_disk = num(v, bad)?
            }
            "accessMessageInMemoryMaxRatio" => {
                self.access_message_in_memory_max_ratio = num(v, bad)?
            }
            "maxFilterMessageSize" => self.max_filter_message_size = num(v, bad)?,
            "warmMapedFileEnable" => self.warm_mapped_file_enable = boolean(v, bad)?,
            "ringmq.cores.append" => self.append_core = Some(num(v, bad)?),
            "ringmq.cores.flush" => self.flush_core = Some(num(v, bad)?),
            "ringmq.cores.reput" => self.reput_core = Some(num(v, bad)?),
            "ringmq.cores.ha" => self.ha_core = Some(num(v, bad)?),
            "ringmq.haThreadNice" => {
                self.ha_thread_nice = num(v, bad)?;
                if !(-20..=19).contains(&self.ha_thread_nice) {
                    return Err(bad());
                }
            }
            "ringmq.directWriteRingSize" => self.direct_write_ring_size_bytes = num(v, bad)?,
            "ringmq.appendPerfSampleEvery" => self.append_perf_sample_every = num(v, bad)?,
            _ => return self.apply_ha_property(key, v),
        }
        Ok(true)
    }

    /// The replication keys of [`apply_property`](Self::apply_property).
    fn apply_ha_property(&mut self, key: &str, v: &str) -> Result<bool, ConfigValueError> {
        let bad = || ConfigValueError {
            key: key.to_string(),
            value: v.to_string(),
        };
        fn num<T: std::str::FromStr>(
            v: &str,
            bad: impl Fn() -> ConfigValueError,
        ) -> Result<T, ConfigValueError> {
            v.parse().map_err(|_| bad())
        }
        match key {
            "brokerRole" => {
                self.broker_role = match v {
                    "ASYNC_MASTER" => BrokerRole::AsyncMaster,
                    "SYNC_MASTER" => BrokerRole::SyncMaster,
                    "SLAVE" => BrokerRole::Slave,
                    _ => return Err(bad()),
                }
            }
            "haListenPort" => self.ha_listen_port = num(v, bad)?,
            "enableControllerMode" => self.controller_mode = flag(v).ok_or_else(bad)?,
            "allAckInSyncStateSet" => self.all_ack_in_sync_state_set = flag(v).ok_or_else(bad)?,
            "syncFromLastFile" => self.sync_from_last_file = flag(v).ok_or_else(bad)?,
            "asyncLearner" => self.async_learner = flag(v).ok_or_else(bad)?,
            "haMaxTimeSlaveNotCatchup" => self.ha_max_time_slave_not_catchup_ms = num(v, bad)?,
            "minInSyncReplicas" => self.min_in_sync_replicas = num(v, bad)?,
            "haMasterAddress" => {
                self.ha_master_address = (!v.is_empty()).then(|| v.to_string());
            }
            "haSendHeartbeatInterval" => self.ha_send_heartbeat_interval_ms = num(v, bad)?,
            "haHousekeepingInterval" => self.ha_housekeeping_interval_ms = num(v, bad)?,
            "haTransferBatchSize" => self.ha_transfer_batch_size_bytes = num(v, bad)?,
            "haMaxGapNotInSync" => self.ha_max_gap_not_in_sync_bytes = num(v, bad)?,
            "haFlowControlEnable" => {
                self.ha_flow_control_enable = match v {
                    "true" => true,
                    "false" => false,
                    _ => return Err(bad()),
                }
            }
            "maxHaTransferByteInSecond" => self.max_ha_transfer_bytes_per_second = num(v, bad)?,
            "slaveTimeout" => self.slave_timeout_ms = num(v, bad)?,
            "inSyncReplicas" => self.in_sync_replicas = num(v, bad)?,
            "totalReplicas" => self.total_replicas = num(v, bad)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `diskSpaceWarningLevelRatio` clamped to [35, 90] as upstream does.
    pub fn effective_warning_ratio(&self) -> u32 {
        self.disk_space_warning_level_ratio.clamp(35, 90)
    }
    /// `diskSpaceCleanForciblyRatio` clamped to [30, 85].
    pub fn effective_clean_forcibly_ratio(&self) -> u32 {
        self.disk_space_clean_forcibly_ratio.clamp(30, 85)
    }
    /// `diskMaxUsedSpaceRatio` clamped to [10, 95].
    pub fn effective_max_used_ratio(&self) -> u32 {
        self.disk_max_used_space_ratio.clamp(10, 95)
    }
    /// Bytes of one ConsumeQueue file.
    pub fn consume_queue_file_size_bytes(&self) -> u64 {
        u64::from(self.mapped_file_size_consume_queue_units.max(1))
            * crate::consume_queue::CQ_UNIT_SIZE as u64
    }
}

/// The store keys an update may change while the store runs: upstream's `MessageStoreConfig`
/// reads each of them on every use, so `updateBrokerConfig` applies them at once. Every other
/// store key is fixed when the store opens (sizes, paths, stage layout, the retention
/// schedule's `cleanResourceInterval`, which upstream also reads only when it schedules).
/// Shortest housekeeping period honoured.
pub const MIN_HOUSEKEEPING_TICK_MS: u64 = 10;

pub const LIVE_STORE_KEYS: &[&str] = &[
    "syncFlushTimeout",
    "flushIntervalCommitLog",
    "flushCommitLogLeastPages",
    "flushCommitLogThoroughInterval",
    "flushIntervalConsumeQueue",
    "flushConsumeQueueLeastPages",
    "flushConsumeQueueThoroughInterval",
    "maxMessageSize",
    "osPageCacheBusyTimeOutMills",
    "fileReservedTime",
    "deleteWhen",
    "diskMaxUsedSpaceRatio",
    "diskSpaceWarningLevelRatio",
    "diskSpaceCleanForciblyRatio",
    "maxTransferBytesOnMessageInMemory",
    "maxTransferCountOnMessageInMemory",
    "maxTransferBytesOnMessageInDisk",
    "maxTransferCountOnMessageInDisk",
    "accessMessageInMemoryMaxRatio",
];

/// The current values of [`LIVE_STORE_KEYS`]: atomics the stages read on every use, so a
/// change needs no lock on the put, pull or flush paths. Relaxed: each value is read on its
/// own and publishes nothing else.
#[derive(Debug)]
pub struct LiveStoreSettings {
    sync_flush_timeout_ms: AtomicU64,
    flush_interval_commit_log_ms: AtomicU64,
    flush_commit_log_least_pages: AtomicU32,
    flush_commit_log_thorough_interval_ms: AtomicU64,
    /// The housekeeping period: each tick flushes the ConsumeQueues past the dirty-page
    /// threshold, the index and the checkpoint.
    flush_interval_consume_queue_ms: AtomicU64,
    flush_consume_queue_least_pages: AtomicU32,
    flush_consume_queue_thorough_interval_ms: AtomicU64,
    max_message_size_bytes: AtomicUsize,
    os_page_cache_busy_timeout_ms: AtomicU64,
    file_reserved_time_hours: AtomicU32,
    /// `deleteWhen` as a bit per hour of the day (bit h set: delete at hour h).
    delete_hours_mask: AtomicU32,
    disk_max_used_space_ratio: AtomicU32,
    disk_space_warning_level_ratio: AtomicU32,
    disk_space_clean_forcibly_ratio: AtomicU32,
    max_transfer_bytes_in_memory: AtomicUsize,
    max_transfer_count_in_memory: AtomicUsize,
    max_transfer_bytes_in_disk: AtomicUsize,
    max_transfer_count_in_disk: AtomicUsize,
    access_message_in_memory_max_ratio: AtomicU32,
}

/// `deleteWhen` ("04", "04;05") as a bit per hour; hours outside 0..=23 never match.
pub fn delete_hours_mask(delete_when: &str) -> u32 {
    delete_when
        .split(';')
        .filter_map(|h| h.trim().parse::<u32>().ok())
        .filter(|h| *h < 24)
        .fold(0, |mask, h| mask | (1 << h))
}

impl LiveStoreSettings {
    /// The values `config` was opened with.
    pub fn new(config: &StoreConfig) -> Self {
        let s = LiveStoreSettings {
            sync_flush_timeout_ms: AtomicU64::new(0),
            flush_interval_commit_log_ms: AtomicU64::new(0),
            flush_commit_log_least_pages: AtomicU32::new(0),
            flush_commit_log_thorough_interval_ms: AtomicU64::new(0),
            flush_interval_consume_queue_ms: AtomicU64::new(0),
            flush_consume_queue_least_pages: AtomicU32::new(0),
            flush_consume_queue_thorough_interval_ms: AtomicU64::new(0),
            max_message_size_bytes: AtomicUsize::new(0),
            os_page_cache_busy_timeout_ms: AtomicU64::new(0),
            file_reserved_time_hours: AtomicU32::new(0),
            delete_hours_mask: AtomicU32::new(0),
            disk_max_used_space_ratio: AtomicU32::new(0),
            disk_space_warning_level_ratio: AtomicU32::new(0),
            disk_space_clean_forcibly_ratio: AtomicU32::new(0),
            max_transfer_bytes_in_memory: AtomicUsize::new(0),
            max_transfer_count_in_memory: AtomicUsize::new(0),
            max_transfer_bytes_in_disk: AtomicUsize::new(0),
            max_transfer_count_in_disk: AtomicUsize::new(0),
            access_message_in_memory_max_ratio: AtomicU32::new(0),
        };
        for key in LIVE_STORE_KEYS {
            s.publish(config, key);
        }
        s
    }

    /// Sets one of [`LIVE_STORE_KEYS`] from its properties text. `Ok(false)`: not a live
    /// store key (nothing changes); `Err`: a value the key cannot take (nothing changes).
    pub fn apply(&self, key: &str, value: &str) -> Result<bool, ConfigValueError> {
        if !LIVE_STORE_KEYS.contains(&key) {
            return Ok(false);
        }
        // Parse with the start-up parser so both accept exactly the same values.
        let mut parsed = StoreConfig::default();
        parsed.apply_property(key, value)?;
        self.publish(&parsed, key);
        Ok(true)
    }

    /// Copies `key`'s value from `c` into its atomic.
    fn publish(&self, c: &StoreConfig, key: &str) {
        let r = Ordering::Relaxed;
        match key {
            "syncFlushTimeout" => self.sync_flush_timeout_ms.store(c.sync_flush_timeout_ms, r),
            "flushIntervalCommitLog" => self
                .flush_interval_commit_log_ms
                .store(c.flush_interval_commit_log_ms, r),
            "flushCommitLogLeastPages" => self
                .flush_commit_log_least_pages
                .store(c.flush_commit_log_least_pages, r),
            "flushCommitLogThoroughInterval" => self
                .flush_commit_log_thorough_interval_ms
                .store(c.flush_commit_log_thorough_interval_ms, r),
            "flushIntervalConsumeQueue" => self
                .flush_interval_consume_queue_ms
                .store(c.flush_interval_consume_queue_ms, r),
            "flushConsumeQueueLeastPages" => self
                .flush_consume_queue_least_pages
                .store(c.flush_consume_queue_least_pages, r),
            "flushConsumeQueueThoroughInterval" => self
                .flush_consume_queue_thorough_interval_ms
                .store(c.flush_consume_queue_thorough_interval_ms, r),
            "maxMessageSize" => self.max_message_size_bytes.store(c.max_message_size, r),
            "osPageCacheBusyTimeOutMills" => self
                .os_page_cache_busy_timeout_ms
                .store(c.os_page_cache_busy_timeout_ms, r),
            "fileReservedTime" => self
                .file_reserved_time_hours
                .store(c.file_reserved_time_hours, r),
            "deleteWhen" => self
                .delete_hours_mask
                .store(delete_hours_mask(&c.delete_when), r),
            "diskMaxUsedSpaceRatio" => self
                .disk_max_used_space_ratio
                .store(c.disk_max_used_space_ratio, r),
            "diskSpaceWarningLevelRatio" => self
                .disk_space_warning_level_ratio
                .store(c.disk_space_warning_level_ratio, r),
            "diskSpaceCleanForciblyRatio" => self
                .disk_space_clean_forcibly_ratio
                .store(c.disk_space_clean_forcibly_ratio, r),
            "maxTransferBytesOnMessageInMemory" => self
                .max_transfer_bytes_in_memory
                .store(c.max_transfer_bytes_on_message_in_memory, r),
            "maxTransferCountOnMessageInMemory" => self
                .max_transfer_count_in_memory
                .store(c.max_transfer_count_on_message_in_memory, r),
            "maxTransferBytesOnMessageInDisk" => self
                .max_transfer_bytes_in_disk
                .store(c.max_transfer_bytes_on_message_in_disk, r),
            "maxTransferCountOnMessageInDisk" => self
                .max_transfer_count_in_disk
                .store(c.max_transfer_count_on_message_in_disk, r),
            "accessMessageInMemoryMaxRatio" => self
                .access_message_in_memory_max_ratio
                .store(c.access_message_in_memory_max_ratio, r),
            _ => {}
        }
    }

    pub fn sync_flush_timeout_ms(&self) -> u64 {
        self.sync_flush_timeout_ms.load(Ordering::Relaxed)
    }
    pub fn flush_interval_commit_log_ms(&self) -> u64 {
        self.flush_interval_commit_log_ms.load(Ordering::Relaxed)
    }
    pub fn flush_commit_log_least_pages(&self) -> u32 {
        self.flush_commit_log_least_pages.load(Ordering::Relaxed)
    }
    pub fn flush_commit_log_thorough_interval_ms(&self) -> u64 {
        self.flush_commit_log_thorough_interval_ms
            .load(Ordering::Relaxed)
    }
    /// ConsumeQueue/index/checkpoint flush period, at least 10 ms (a smaller value would
    /// spin the housekeeping thread).
    pub fn flush_interval_consume_queue_ms(&self) -> u64 {
        self.flush_interval_consume_queue_ms
            .load(Ordering::Relaxed)
            .max(MIN_HOUSEKEEPING_TICK_MS)
    }
    pub fn flush_consume_queue_least_pages(&self) -> u32 {
        self.flush_consume_queue_least_pages.load(Ordering::Relaxed)
    }
    pub fn flush_consume_queue_thorough_interval_ms(&self) -> u64 {
        self.flush_consume_queue_thorough_interval_ms
            .load(Ordering::Relaxed)
    }
    pub fn max_message_size_bytes(&self) -> usize {
        self.max_message_size_bytes.load(Ordering::Relaxed)
    }
    pub fn os_page_cache_busy_timeout_ms(&self) -> u64 {
        self.os_page_cache_busy_timeout_ms.load(Ordering::Relaxed)
    }
    pub fn file_reserved_time_hours(&self) -> u32 {
        self.file_reserved_time_hours.load(Ordering::Relaxed)
    }
    /// Whether `deleteWhen` names `hour` (0..=23).
    pub fn is_delete_hour(&self, hour: i32) -> bool {
        (0..24).contains(&hour) && self.delete_hours_mask.load(Ordering::Relaxed) & (1 << hour) != 0
    }
    /// `diskSpaceWarningLevelRatio` clamped to [35, 90], as upstream clamps it.
    pub fn effective_warning_ratio(&self) -> u32 {
        self.disk_space_warning_level_ratio
            .load(Ordering::Relaxed)
            .clamp(35, 90)
    }
    /// `diskSpaceCleanForciblyRatio` clamped to [30, 85].
    pub fn effective_clean_forcibly_ratio(&self) -> u32 {
        self.disk_space_clean_forcibly_ratio
            .load(Ordering::Relaxed)
            .clamp(30, 85)
    }
    /// `diskMaxUsedSpaceRatio` clamped to [10, 95].
    pub fn effective_max_used_ratio(&self) -> u32 {
        self.disk_max_used_space_ratio
            .load(Ordering::Relaxed)
            .clamp(10, 95)
    }
    /// (bytes, count) one pull may take of records still in memory.
    pub fn max_transfer_in_memory(&self) -> (usize, usize) {
        (
            self.max_transfer_bytes_in_memory.load(Ordering::Relaxed),
            self.max_transfer_count_in_memory.load(Ordering::Relaxed),
        )
    }
    /// (bytes, count) one pull may take of records read from disk.
    pub fn max_transfer_in_disk(&self) -> (usize, usize) {
        (
            self.max_transfer_bytes_in_disk.load(Ordering::Relaxed),
            self.max_transfer_count_in_disk.load(Ordering::Relaxed),
        )
    }
    pub fn access_message_in_memory_max_ratio(&self) -> u32 {
        self.access_message_in_memory_max_ratio
            .load(Ordering::Relaxed)
    }
}

/// A `true`/`false` value of the replication keys.
fn flag(v: &str) -> Option<bool> {
    match v {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_rocketmq_defaults() {
        let c = StoreConfig::default();
        assert_eq!(c.mapped_file_size_commit_log, 1_073_741_824);
        assert_eq!(c.consume_queue_file_size_bytes(), 6_000_000);
        assert_eq!(c.flush_disk_type, FlushDiskType::AsyncFlush);
        assert_eq!(c.sync_flush_timeout_ms, 5000);
        assert_eq!(c.max_message_size, 4_194_304);
        assert_eq!(c.delete_when, "04");
    }

    /// The replication keys keep upstream's defaults (§g.8) and parse from broker.conf.
    #[test]
    fn ha_keys_have_upstream_defaults_and_parse() {
        let mut c = StoreConfig::default();
        assert_eq!(c.broker_role, BrokerRole::AsyncMaster);
        assert_eq!(c.ha_listen_port, 10912);
        assert_eq!(
            (
                c.ha_send_heartbeat_interval_ms,
                c.ha_housekeeping_interval_ms
            ),
            (5000, 20_000)
        );
        assert_eq!(c.ha_transfer_batch_size_bytes, 32_768);
        assert_eq!(c.ha_max_gap_not_in_sync_bytes, 268_435_456);
        assert!(!c.ha_flow_control_enable);
        assert_eq!(c.max_ha_transfer_bytes_per_second, 104_857_600);
        assert_eq!(c.slave_timeout_ms, 3000);
        assert_eq!((c.in_sync_replicas, c.total_replicas), (1, 1));
        for (k, v) in [
            ("brokerRole", "SYNC_MASTER"),
            ("haMasterAddress", "127.0.0.1:10912"),
            ("haTransferBatchSize", "65536"),
            ("inSyncReplicas", "2"),
            ("slaveTimeout", "1500"),
            ("haFlowControlEnable", "true"),
            ("ringmq.cores.ha", "1"),
        ] {
            assert_eq!(c.apply_property(k, v), Ok(true), "{k}");
        }
        assert_eq!(c.broker_role, BrokerRole::SyncMaster);
        assert_eq!(c.ha_master_address.as_deref(), Some("127.0.0.1:10912"));
        assert_eq!(c.ha_transfer_batch_size_bytes, 65_536);
        assert_eq!((c.in_sync_replicas, c.slave_timeout_ms), (2, 1500));
        assert!(c.ha_flow_control_enable);
        assert_eq!(c.ha_core, Some(1));
        assert_eq!(c.ha_thread_nice, DEFAULT_HA_THREAD_NICE);
        assert!(c.apply_property("ringmq.haThreadNice", "-5").unwrap());
        assert_eq!(c.ha_thread_nice, -5);
        assert!(c.apply_property("ringmq.haThreadNice", "-21").is_err());
        assert!(c.apply_property("ringmq.haThreadNice", "x").is_err());
        assert!(c.apply_property("brokerRole", "LEADER").is_err());
        assert_eq!(c.apply_property("haMasterAddress", ""), Ok(true));
        assert_eq!(c.ha_master_address, None);
    }

    #[test]
    fn properties_apply_and_report_unknown_keys() {
        let mut c = StoreConfig::default();
        assert_eq!(c.apply_property("flushDiskType", "SYNC_FLUSH"), Ok(true));
        assert_eq!(c.flush_disk_type, FlushDiskType::SyncFlush);
        assert_eq!(
            c.apply_property("transientStorePoolEnable", "true"),
            Ok(true)
        );
        assert_eq!(c.write_mode, WriteMode::Direct);
        assert_eq!(
            c.apply_property("mappedFileSizeConsumeQueue", "6000000"),
            Ok(true)
        );
        assert_eq!(c.mapped_file_size_consume_queue_units, 300_000);
        assert!(!c.warm_mapped_file_enable);
        assert_eq!(c.apply_property("warmMapedFileEnable", "true"), Ok(true));
        assert!(c.warm_mapped_file_enable);
        assert_eq!(c.apply_property("warmMapedFileEnable", "false"), Ok(true));
        assert!(!c.warm_mapped_file_enable, "false turns warming off again");
        assert_eq!(
            c.apply_property("deleteCommitLogFilesInterval", "0"),
            Ok(true)
        );
        assert_eq!(c.delete_commit_log_files_interval_ms, 0);
        assert_eq!(
            c.apply_property("redeleteHangedFileInterval", "5000"),
            Ok(true)
        );
        assert_eq!(c.redelete_hanged_file_interval_ms, 5000);
        assert_eq!(
            c.apply_property("ringmq.appendPerfSampleEvery", "1"),
            Ok(true)
        );
        assert_eq!(c.append_perf_sample_every, 1);
        // Unlinking never waits for readers here (a mapping outlives its file), so there
        // is nothing to destroy forcibly: the broker reports the key as unused.
        assert_eq!(
            c.apply_property("destroyMapedFileIntervalForcibly", "1000"),
            Ok(false)
        );
        assert_eq!(c.apply_property("brokerName", "x"), Ok(false));
        assert!(c.apply_property("maxMessageSize", "lots").is_err());
    }
}
