//! The store's operations as one object-safe trait, [`StoreApi`]: a broker holds
//! `Arc<dyn StoreApi>`, the [`MessageStore`] in production and the in-memory store of the
//! `test-util` feature in its unit tests. Each method has the signature of the
//! `MessageStore` method of the same name, and the implementation here only forwards, so the
//! values (requests, results, statuses, file spans, events) are the store's own types.

use bytes::Bytes;
use ringmq_ring::Notifier;
use std::sync::Arc;

use crate::config::ConfigValueError;
use crate::types::{Boundary, GetMessageResult, HaStatus, MessageFilter, PutCallback, PutRequest};
use crate::{ArrivalListener, MessageStore};

/// Where the index stood when a `QUERY_MESSAGE` was answered (the response's
/// `indexLastUpdateTimestamp` and `indexLastUpdatePhyoffset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexUpdatePoint {
    pub timestamp_ms: i64,
    pub phy_offset: i64,
}

/// What a broker needs from a message store.
pub trait StoreApi: Send + Sync {
    /// Appends; `on_done` runs exactly once, on any thread.
    fn put(&self, request: PutRequest, on_done: PutCallback);
    /// [`StoreApi::put`] for a request received at `received_at` (its send-queue wait
    /// counts from there); stores that do not queue puts ignore it.
    fn put_received(
        &self,
        request: PutRequest,
        received_at: std::time::Instant,
        on_done: PutCallback,
    ) {
        let _ = received_at;
        self.put(request, on_done);
    }
    /// Reads up to `max_msg_nums` messages of a queue from logical `offset`.
    fn get_message(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_msg_nums: i32,
        max_total_bytes: usize,
        filter: &dyn MessageFilter,
    ) -> GetMessageResult;
    fn max_offset_in_queue(&self, topic: &str, queue_id: i32) -> i64;
    fn min_offset_in_queue(&self, topic: &str, queue_id: i32) -> i64;
    fn offset_in_queue_by_time(
        &self,
        topic: &str,
        queue_id: i32,
        timestamp_ms: i64,
        boundary: Boundary,
    ) -> i64;
    /// Store time of the earliest message of the queue, `None` when empty.
    fn earliest_message_time(&self, topic: &str, queue_id: i32) -> Option<i64>;
    /// Store time of the message at `queue_offset`, `None` when absent.
    fn message_store_time(&self, topic: &str, queue_id: i32, queue_offset: i64) -> Option<i64>;
    /// The whole record at a CommitLog offset.
    fn look_message_by_offset(&self, physical_offset: i64) -> Option<Bytes>;
    /// Records of `topic` whose KEYS or UNIQ_KEY equal `key`, stored within
    /// `[begin_ms, end_ms]`; at most `max_num`.
    fn query_message(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin_ms: i64,
        end_ms: i64,
    ) -> Vec<Bytes>;
    /// The index's last update, reported with `query_message` answers.
    fn index_last_update(&self) -> IndexUpdatePoint;
    fn add_arrival_listener(&self, listener: ArrivalListener);
    /// Gives each network core its own put ring and completion ring; core `i` of the
    /// first server waits on `doorbells[i]`, other servers' cores follow. Puts made on other threads keep the shared path.
    /// `max_in_flight_per_core` is the server's bound on a core's outstanding requests.
    fn attach_network_cores(&self, _doorbells: &[Arc<Notifier>], _max_in_flight_per_core: usize) {}
    /// On the calling network core: runs the completions the stages queued for it (the
    /// puts' callbacks) and retries puts that waited for room in its ring. Must not block.
    fn run_core_completions(&self) {}
    /// On the calling network core, after a pass of its requests: appends the puts the
    /// pass queued right here when the append stage is idle, else makes sure the stage
    /// wakes for them. Returns whether completions for this core were produced (the core
    /// runs them before it waits). Must not block.
    fn push_core_puts(&self) -> bool {
        false
    }
    /// Puts that waited this long for the append stage are refused (0: no limit).
    fn set_send_queue_wait_limit_ms(&self, _limit_ms: u64) {}
    /// Sets one of the store keys a config update applies at once
    /// ([`LIVE_STORE_KEYS`](crate::config::LIVE_STORE_KEYS)). `Ok(false)`: this store does not
    /// change the key while it runs.
    fn set_live_setting(&self, _key: &str, _value: &str) -> Result<bool, ConfigValueError> {
        Ok(false)
    }
    /// Puts queued for the append stage right now (all rings and waiting lists).
    fn queued_puts(&self) -> usize {
        0
    }
    /// Slave: replicate from the master's HA address `host:port` (from `haMasterAddress`
    /// or the name server's registration answer); a changed address reconnects.
    fn update_ha_master_address(&self, _addr: &str) {}
    /// Controller mode: become master of `epoch` without a restart.
    fn change_to_master(&self, epoch: i32) -> Result<(), String> {
        Err(format!("this store cannot become master (epoch {epoch})"))
    }
    /// Controller mode: become a slave under `epoch` without a restart.
    fn change_to_slave(&self, epoch: i32) -> Result<(), String> {
        Err(format!("this store cannot become a slave (epoch {epoch})"))
    }
    /// Controller mode: this broker's controller id, for the HA handshake.
    fn set_local_broker_id(&self, _broker_id: i64) {}
    /// Controller mode: the SyncStateSet the controller confirmed.
    fn set_sync_state_set(&self, _members: &[i64], _epoch: i32) {}
    /// Controller mode: the SyncStateSet held (members, epoch).
    fn sync_state_set(&self) -> (Vec<i64>, i32) {
        (Vec::new(), 0)
    }
    /// Controller mode: (epoch, start offset) of every epoch entry, oldest first.
    fn epoch_entries(&self) -> Vec<(i32, i64)> {
        Vec::new()
    }
    /// Controller mode: the offset every SyncStateSet member holds (-1 unknown).
    fn confirm_offset(&self) -> i64 {
        -1
    }
    /// Controller mode: why the store must be reopened (a slave that must truncate).
    fn reopen_request(&self) -> Option<String> {
        None
    }
    /// Replication state: connected slaves (master) or the master link (slave).
    fn ha_status(&self) -> HaStatus {
        HaStatus::default()
    }
    fn commit_log_max_offset(&self) -> i64;
    /// DELETE_EXPIRED_COMMITLOG: the next retention passes delete expired CommitLog
    /// segments whatever the hour (upstream's `executeDeleteFilesManually`).
    fn execute_delete_files_manually(&self);
    fn shutdown(&self);
}

impl StoreApi for MessageStore {
    fn put(&self, request: PutRequest, on_done: PutCallback) {
        MessageStore::put(self, request, on_done);
    }

    fn put_received(
        &self,
        request: PutRequest,
        received_at: std::time::Instant,
        on_done: PutCallback,
    ) {
        MessageStore::put_received(self, request, received_at, on_done);
    }

    fn get_message(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_msg_nums: i32,
        max_total_bytes: usize,
        filter: &dyn MessageFilter,
    ) -> GetMessageResult {
        MessageStore::get_message(
            self,
            topic,
            queue_id,
            offset,
            max_msg_nums,
            max_total_bytes,
            filter,
        )
    }

    fn max_offset_in_queue(&self, topic: &str, queue_id: i32) -> i64 {
        MessageStore::max_offset_in_queue(self, topic, queue_id)
    }

    fn min_offset_in_queue(&self, topic: &str, queue_id: i32) -> i64 {
        MessageStore::min_offset_in_queue(self, topic, queue_id)
    }

    fn offset_in_queue_by_time(
        &self,
        topic: &str,
        queue_id: i32,
        timestamp_ms: i64,
        boundary: Boundary,
    ) -> i64 {
        MessageStore::offset_in_queue_by_time(self, topic, queue_id, timestamp_ms, boundary)
    }

    fn earliest_message_time(&self, topic: &str, queue_id: i32) -> Option<i64> {
        MessageStore::earliest_message_time(self, topic, queue_id)
    }

    fn message_store_time(&self, topic: &str, queue_id: i32, queue_offset: i64) -> Option<i64> {
        MessageStore::message_store_time(self, topic, queue_id, queue_offset)
    }

    fn look_message_by_offset(&self, physical_offset: i64) -> Option<Bytes> {
        MessageStore::look_message_by_offset(self, physical_offset)
    }

    fn query_message(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin_ms: i64,
        end_ms: i64,
    ) -> Vec<Bytes> {
        MessageStore::query_message(self, topic, key, max_num, begin_ms, end_ms)
    }

    /// The reput stage indexes every record as it dispatches it and keeps no update time
    /// of its own, so the point reported is now and the CommitLog's end.
    fn index_last_update(&self) -> IndexUpdatePoint {
        IndexUpdatePoint {
            timestamp_ms: crate::util::now_ms(),
            phy_offset: MessageStore::commit_log_max_offset(self),
        }
    }

    fn add_arrival_listener(&self, listener: ArrivalListener) {
        MessageStore::add_arrival_listener(self, listener);
    }

    fn attach_network_cores(&self, doorbells: &[Arc<Notifier>], max_in_flight_per_core: usize) {
        MessageStore::attach_network_cores(self, doorbells, max_in_flight_per_core);
    }

    fn run_core_completions(&self) {
        MessageStore::run_core_completions(self);
    }

    fn push_core_puts(&self) -> bool {
        MessageStore::push_core_puts(self)
    }

    fn set_send_queue_wait_limit_ms(&self, limit_ms: u64) {
        MessageStore::set_send_queue_wait_limit_ms(self, limit_ms);
    }

    fn set_live_setting(&self, key: &str, value: &str) -> Result<bool, ConfigValueError> {
        MessageStore::set_live_setting(self, key, value)
    }

    fn queued_puts(&self) -> usize {
        MessageStore::queued_puts(self)
    }

    fn update_ha_master_address(&self, addr: &str) {
        MessageStore::update_ha_master_address(self, addr)
    }
    fn change_to_master(&self, epoch: i32) -> Result<(), String> {
        MessageStore::change_to_master(self, epoch)
    }
    fn change_to_slave(&self, epoch: i32) -> Result<(), String> {
        MessageStore::change_to_slave(self, epoch)
    }
    fn set_local_broker_id(&self, broker_id: i64) {
        MessageStore::set_local_broker_id(self, broker_id)
    }
    fn set_sync_state_set(&self, members: &[i64], epoch: i32) {
        MessageStore::set_sync_state_set(self, members, epoch)
    }
    fn sync_state_set(&self) -> (Vec<i64>, i32) {
        let view = MessageStore::sync_state_set(self);
        (view.members, view.epoch)
    }
    fn epoch_entries(&self) -> Vec<(i32, i64)> {
        MessageStore::epoch_entries(self)
    }
    fn confirm_offset(&self) -> i64 {
        MessageStore::confirm_offset(self)
    }
    fn reopen_request(&self) -> Option<String> {
        MessageStore::reopen_request(self)
    }
    fn ha_status(&self) -> HaStatus {
        MessageStore::ha_status(self)
    }
    fn commit_log_max_offset(&self) -> i64 {
        MessageStore::commit_log_max_offset(self)
    }

    fn execute_delete_files_manually(&self) {
        MessageStore::execute_delete_files_manually(self);
    }

    fn shutdown(&self) {
        MessageStore::shutdown(self);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::config::StoreConfig;
    use crate::types::{AcceptAll, GetMessageStatus, PutMessageStatus};

    /// A `MessageStore` used only through `&dyn StoreApi` puts, reads (with the file span a
    /// pull splices from) and finds by key exactly as through its own methods.
    #[test]
    fn message_store_serves_the_trait() {
        let dir = crate::test_util::temp_dir("api");
        let store = MessageStore::open(StoreConfig {
            store_path_root_dir: dir.clone(),
            mapped_file_size_commit_log: 64 * 1024,
            ..StoreConfig::default()
        })
        .unwrap();
        let api: &dyn StoreApi = &store;
        let record = crate::util::loopback_record("TA", 0, b"body", b"KEYS\x01k1\x02");
        let (tx, rx) = mpsc::channel();
        api.put(
            PutRequest::new("TA", 0, 0, record, 1),
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        let put = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(put.status, PutMessageStatus::PutOk);
        let deadline = Instant::now() + Duration::from_secs(5);
        while api.max_offset_in_queue("TA", 0) < 1 {
            assert!(Instant::now() < deadline, "reput did not dispatch");
            std::thread::sleep(Duration::from_millis(2));
        }

        let got = api.get_message("TA", 0, 0, 32, 1 << 20, &AcceptAll);
        assert_eq!(got.status, GetMessageStatus::Found);
        assert_eq!(got.messages.len(), 1);
        assert_eq!(
            got.file_spans.len(),
            1,
            "mmap mode describes the record as a span"
        );
        assert_eq!(api.query_message("TA", "k1", 10, 0, i64::MAX).len(), 1);
        assert_eq!(
            api.index_last_update().phy_offset,
            store.commit_log_max_offset()
        );
        assert_eq!(
            api.look_message_by_offset(put.wrote_offset)
                .map(|r| r.len()),
            Some(put.wrote_bytes as usize)
        );
        api.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
