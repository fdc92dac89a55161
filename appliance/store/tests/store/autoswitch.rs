//! Controller mode's replication between two stores in this process on 127.0.0.1: stores
//! open as slaves, a controller-elected master streams its epochs, the roles swap without
//! a restart, and a former master holding records its successor never received asks for
//! a reopen, truncates there at recovery and rejoins byte-identical.

use super::replication::{commit_log_bytes, eventually, put_range, queue_keys, QUEUES};
use super::{config, temp_dir};
use ringmq_store::{FlushDiskType, MessageStore, PutMessageStatus, StoreConfig, WriteMode};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

const SYNC_BOUND: Duration = Duration::from_secs(20);

fn controller_config(dir: &Path) -> StoreConfig {
    StoreConfig {
        controller_mode: true,
        ha_bind_ip: Some([127, 0, 0, 1].into()),
        ha_listen_port: 0,
        ha_send_heartbeat_interval_ms: 200,
        ..config(dir, FlushDiskType::AsyncFlush, WriteMode::Mmap)
    }
}

fn open(dir: &Path, broker_id: i64) -> (MessageStore, SocketAddr) {
    let store = MessageStore::open(controller_config(dir)).unwrap();
    store.set_local_broker_id(broker_id);
    let addr = store.ha_listen_addr().expect("HA server listening");
    (store, addr)
}

fn follow(slave: &MessageStore, epoch: i32, master: SocketAddr) {
    slave.change_to_slave(epoch).unwrap();
    slave.update_ha_master_address(&master.to_string());
}

fn wait_caught_up(slave: &MessageStore, master: &MessageStore) {
    eventually("the slave to catch up", SYNC_BOUND, || {
        slave.commit_log_max_offset() == master.commit_log_max_offset()
    });
}

fn all_ok(store: &MessageStore, from: u64, to: u64) {
    for r in put_range(store, from, to) {
        assert_eq!(r.status, PutMessageStatus::PutOk);
    }
}

#[test]
fn an_elected_master_streams_its_epochs_and_the_roles_swap_without_restart() {
    let (da, db) = (temp_dir("auto-a"), temp_dir("auto-b"));
    let (a, a_addr) = open(&da, 1);
    let (b, b_addr) = open(&db, 2);
    let refused = put_range(&a, 0, 1);
    assert_eq!(
        refused[0].status,
        PutMessageStatus::ServiceNotAvailable,
        "slave until elected"
    );

    a.change_to_master(1).unwrap();
    follow(&b, 1, a_addr);
    all_ok(&a, 0, 400);
    wait_caught_up(&b, &a);
    assert_eq!(b.epoch_entries(), vec![(1, 0)]);
    let slaves = a.ha_status().slaves;
    assert_eq!(slaves.len(), 1);
    assert_eq!(
        slaves[0].broker_id,
        Some(2),
        "the handshake names the slave"
    );

    // With both in the SyncStateSet the confirm offset is what both hold.
    a.set_sync_state_set(&[1, 2], 1);
    all_ok(&a, 400, 500);
    wait_caught_up(&b, &a);
    let max = a.commit_log_max_offset();
    eventually("the master's confirm offset", SYNC_BOUND, || {
        a.confirm_offset() == max
    });
    eventually("the slave's confirm offset", SYNC_BOUND, || {
        b.confirm_offset() == max
    });

    // B takes over at epoch 2: its queues continue; A follows without a restart.
    b.change_to_master(2).unwrap();
    follow(&a, 2, b_addr);
    all_ok(&b, 500, 600);
    wait_caught_up(&a, &b);
    assert_eq!(a.epoch_entries(), vec![(1, 0), (2, max)]);
    for q in 0..QUEUES {
        let keys = queue_keys(&b, q, 0);
        assert_eq!(keys.len(), 150, "queue {q} holds every put of both epochs");
        // A slave shows what its master confirmed, which the next frame carries.
        eventually("the slave's queue to match", SYNC_BOUND, || {
            queue_keys(&a, q, 0) == keys
        });
    }
    let end = b.commit_log_max_offset() as u64;
    assert_eq!(commit_log_bytes(&da, 0, end), commit_log_bytes(&db, 0, end));
    assert!(a.change_to_master(1).is_err(), "an older epoch is refused");
    a.shutdown();
    b.shutdown();
}

#[test]
fn a_diverged_former_master_truncates_at_reopen_and_rejoins() {
    let (da, db) = (temp_dir("diverge-a"), temp_dir("diverge-b"));
    let (a, a_addr) = open(&da, 1);
    let (b, b_addr) = open(&db, 2);
    a.change_to_master(1).unwrap();
    follow(&b, 1, a_addr);
    all_ok(&a, 0, 200);
    wait_caught_up(&b, &a);
    let shared_end = b.commit_log_max_offset();

    // B is elected while A, cut off, still takes puts: A's tail is its own.
    b.change_to_master(2).unwrap();
    all_ok(&a, 200, 300);
    all_ok(&b, 300, 350);
    assert!(a.commit_log_max_offset() > shared_end);
    follow(&a, 2, b_addr);
    eventually("the reopen request", SYNC_BOUND, || {
        a.reopen_request().is_some()
    });
    let why = a.reopen_request().unwrap();
    assert!(why.contains(&format!("truncate to {shared_end}")), "{why}");
    a.shutdown();

    let (a, _) = open(&da, 1);
    assert_eq!(
        a.commit_log_max_offset(),
        shared_end,
        "recovery cut the diverged tail"
    );
    assert_eq!(a.epoch_entries(), vec![(1, 0)]);
    follow(&a, 2, b_addr);
    wait_caught_up(&a, &b);
    let end = b.commit_log_max_offset() as u64;
    assert_eq!(commit_log_bytes(&da, 0, end), commit_log_bytes(&db, 0, end));
    for q in 0..QUEUES {
        let keys = queue_keys(&b, q, 0);
        eventually("the rejoined slave's queue", SYNC_BOUND, || {
            queue_keys(&a, q, 0) == keys
        });
    }
    assert!(a.reopen_request().is_none());
    a.shutdown();
    b.shutdown();
}

#[test]
fn under_all_ack_consumers_see_only_what_every_sync_state_set_member_holds() {
    let (da, db) = (temp_dir("allack-a"), temp_dir("allack-b"));
    let all_ack = |dir: &Path| StoreConfig {
        all_ack_in_sync_state_set: true,
        in_sync_replicas: 2,
        slave_timeout_ms: 300,
        ..controller_config(dir)
    };
    let a = MessageStore::open(all_ack(&da)).unwrap();
    a.set_local_broker_id(1);
    let a_addr = a.ha_listen_addr().expect("HA server listening");
    let b = MessageStore::open(all_ack(&db)).unwrap();
    b.set_local_broker_id(2);
    a.change_to_master(1).unwrap();
    follow(&b, 1, a_addr);
    all_ok(&a, 0, 100); // alone in the set: nobody else has to hold them
    wait_caught_up(&b, &a);
    let visible = |s: &MessageStore| {
        (0..QUEUES)
            .map(|q| queue_keys(s, q, 0).len())
            .sum::<usize>()
    };
    assert_eq!(visible(&a), 100);

    // Broker 3 joins the set but never connects: nothing new is acknowledged or visible.
    a.set_sync_state_set(&[1, 2, 3], 1);
    for r in put_range(&a, 100, 120) {
        assert_eq!(r.status, PutMessageStatus::FlushSlaveTimeout);
    }
    wait_caught_up(&b, &a);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        visible(&a),
        100,
        "the master shows only what every member holds"
    );
    assert_eq!(
        visible(&b),
        100,
        "the slave shows only what the master confirmed"
    );

    // Without broker 3 the confirm offset moves at the next report, and both show all.
    a.set_sync_state_set(&[1, 2], 2);
    eventually("the master's consumers to see all", SYNC_BOUND, || {
        visible(&a) == 120
    });
    eventually("the slave's consumers to see all", SYNC_BOUND, || {
        visible(&b) == 120
    });
    all_ok(&a, 120, 140);
    a.shutdown();
    b.shutdown();
}

#[test]
fn a_master_with_fewer_members_than_min_in_sync_replicas_refuses_puts_before_storing() {
    let dir = temp_dir("min-in-sync");
    let store = MessageStore::open(StoreConfig {
        min_in_sync_replicas: 2,
        ..controller_config(&dir)
    })
    .unwrap();
    store.set_local_broker_id(1);
    store.change_to_master(1).unwrap();
    let before = store.commit_log_max_offset();
    let refused = put_range(&store, 0, 3);
    assert!(refused
        .iter()
        .all(|r| r.status == PutMessageStatus::InSyncReplicasNotEnough));
    assert_eq!(store.commit_log_max_offset(), before, "nothing stored");
    store.set_sync_state_set(&[1, 2], 1);
    // Two members: accepted (no slave holds it, so the wait for broker 2 times out).
    let waited = put_range(&store, 3, 4);
    assert_ne!(waited[0].status, PutMessageStatus::InSyncReplicasNotEnough);
    assert!(store.commit_log_max_offset() > before);
    store.shutdown();
}
