//! The state machine through whole scenarios: a broker set registers three replicas,
//! elects, grows and shrinks its SyncStateSet, loses its master, and every rejection
//! upstream names comes back with its code. Events are applied as a consensus log would:
//! encoded, decoded, then applied.

use crate::event::Event;
use crate::heartbeat::tests::hb;
use crate::heartbeat::BrokerLiveTable;
use crate::replicas::{ControllerResult, ReplicasInfo};
use ringmq_remoting::body::controller::{ElectMasterResponseBody, SyncStateSet};
use ringmq_remoting::codes::ResponseCode as C;

fn commit<R>(state: &mut ReplicasInfo, r: &ControllerResult<R>) {
    for e in &r.events {
        state.apply(&Event::decode(&e.encode()).unwrap());
    }
}

fn code(i: i64) -> String {
    format!("127.0.0.{i}:10911;170000000000{i}")
}

/// Three replicas registered with ids 1, 2, 3, all alive, no master yet.
fn three_replicas() -> (ReplicasInfo, BrokerLiveTable) {
    let mut s = ReplicasInfo::default();
    let mut live = BrokerLiveTable::default();
    for i in 1..=3 {
        assert_eq!(s.next_broker_id("b"), i);
        let r = s.apply_broker_id("C", "b", i, &code(i));
        assert_eq!(r.code, C::Success, "{:?}", r.remark);
        commit(&mut s, &r);
        live.on_heartbeat(hb(i, 0, 0, 0), 0);
    }
    (s, live)
}

fn set(ids: &[i64], epoch: i32) -> SyncStateSet {
    SyncStateSet {
        sync_state_set: ids.iter().copied().collect(),
        sync_state_set_epoch: epoch,
    }
}

#[test]
fn broker_ids_are_granted_once_per_check_code() {
    let s = ReplicasInfo::default();
    assert_eq!(
        s.apply_broker_id("C", "b", 2, &code(2)).code,
        C::ControllerBrokerIdInvalid
    );
    let (mut s, _) = three_replicas();
    assert_eq!(
        s.replica_info("b").unwrap().brokers[&2].0,
        "127.0.0.2:10911"
    );
    // The same broker re-applying its id is fine and changes nothing.
    let again = s.apply_broker_id("C", "b", 2, &code(2));
    assert_eq!(again.code, C::Success);
    commit(&mut s, &again);
    assert_eq!(s.next_broker_id("b"), 4);
    let other = s.apply_broker_id("C", "b", 2, "127.0.0.9:10911;1");
    assert_eq!(other.code, C::ControllerBrokerIdInvalid);
    assert!(other.events.is_empty());
}

#[test]
fn first_election_takes_the_asker_then_the_set_grows_and_fences_stale_epochs() {
    let (mut s, live) = three_replicas();
    let view = live.at(0);
    let r = s.elect_master("b", Some(2), false, false, &view);
    assert_eq!(r.code, C::Success);
    assert_eq!(r.response.master_broker_id, Some(2));
    assert_eq!(
        r.response.master_address.as_deref(),
        Some("127.0.0.2:10911")
    );
    assert_eq!(
        (r.response.master_epoch, r.response.sync_state_set_epoch),
        (Some(1), Some(1))
    );
    let body = ElectMasterResponseBody::decode(r.body.as_ref().unwrap()).unwrap();
    assert_eq!(body.sync_state_set, [2].into_iter().collect());
    assert_eq!(body.broker_member_group.unwrap().broker_addrs.len(), 3);
    commit(&mut s, &r);
    let sync = s.sync_state("b").unwrap().clone();
    assert_eq!(
        (
            sync.master_broker_id,
            sync.master_epoch,
            sync.sync_state_set_epoch
        ),
        (Some(2), 1, 1)
    );

    // Another broker asking now finds the master alive.
    let still = s.elect_master("b", Some(3), false, false, &view);
    assert_eq!(still.code, C::ControllerMasterStillExist);
    assert_eq!(still.response.master_broker_id, Some(2));
    assert!(still.events.is_empty());

    let grow = s.alter_sync_state_set("b", 2, 1, &set(&[1, 2, 3], 1), &view);
    assert_eq!(grow.code, C::Success, "{:?}", grow.remark);
    assert_eq!(grow.response.new_sync_state_set_epoch, 2);
    commit(&mut s, &grow);
    assert_eq!(s.sync_state("b").unwrap().sync_state_set.len(), 3);

    let cases = [
        (
            s.alter_sync_state_set("b", 2, 1, &set(&[1, 2, 3], 2), &view),
            C::ControllerAlterSyncStateSetFailed,
        ),
        (
            s.alter_sync_state_set("b", 1, 1, &set(&[1, 2], 2), &view),
            C::ControllerInvalidMaster,
        ),
        (
            s.alter_sync_state_set("b", 2, 0, &set(&[1, 2], 2), &view),
            C::ControllerFencedMasterEpoch,
        ),
        (
            s.alter_sync_state_set("b", 2, 1, &set(&[1, 2], 1), &view),
            C::ControllerFencedSyncStateSetEpoch,
        ),
        (
            s.alter_sync_state_set("b", 2, 1, &set(&[2, 7], 2), &view),
            C::ControllerInvalidReplicas,
        ),
        (
            s.alter_sync_state_set("b", 2, 1, &set(&[1, 3], 2), &view),
            C::ControllerAlterSyncStateSetFailed,
        ),
        (
            s.alter_sync_state_set("x", 2, 1, &set(&[2], 2), &view),
            C::ControllerAlterSyncStateSetFailed,
        ),
    ];
    for (r, want) in cases {
        assert_eq!(r.code, want, "{:?}", r.remark);
        assert!(r.events.is_empty());
    }
    let mut partly = BrokerLiveTable::default();
    partly.on_heartbeat(hb(2, 1, 0, 0), 0);
    let dead = s.alter_sync_state_set("b", 2, 1, &set(&[1, 2], 2), &partly.at(0));
    assert_eq!(dead.code, C::ControllerBrokerNotAlive);
}

#[test]
fn a_dead_master_is_replaced_by_the_best_in_sync_replica_and_without_one_the_set_has_none() {
    let (mut s, _) = three_replicas();
    let mut live = BrokerLiveTable::default();
    for i in 1..=3 {
        live.on_heartbeat(hb(i, 1, 1000 * i, 0), 0);
    }
    let r = s.elect_master("b", Some(1), false, false, &live.at(0));
    commit(&mut s, &r);
    let r = s.alter_sync_state_set("b", 1, 1, &set(&[1, 2], 1), &live.at(0));
    commit(&mut s, &r);
    // Master 1 stops sending heartbeats.
    for i in 2..=3 {
        live.on_heartbeat(hb(i, 1, 1000 * i, 0), 5_000);
    }
    assert_eq!(live.scan_inactive(5_000), vec![("C".into(), "b".into(), 1)]);
    let view = live.at(5_000);
    assert_eq!(s.sets_needing_election(&view), vec!["b".to_string()]);
    // Broker 3 has the larger offset but is not in sync: broker 2 wins.
    let r = s.elect_master("b", None, false, false, &view);
    assert_eq!(r.code, C::Success);
    assert_eq!(r.response.master_broker_id, Some(2));
    assert_eq!(r.response.master_epoch, Some(2));
    commit(&mut s, &r);
    assert!(s.sets_needing_election(&view).is_empty());
    // With only broker 3 left and unclean election off, nobody can take over.
    let mut only3 = BrokerLiveTable::default();
    only3.on_heartbeat(hb(3, 1, 3000, 0), 5_000);
    let none = s.elect_master("b", None, false, false, &only3.at(5_000));
    assert_eq!(none.code, C::ControllerMasterNotAvailable);
    let asked = s.elect_master("b", Some(3), false, false, &only3.at(5_000));
    assert_eq!(asked.code, C::ControllerElectMasterFailed);
    assert!(asked.events.is_empty());
    commit(&mut s, &none);
    let sync = s.sync_state("b").unwrap();
    assert_eq!(
        (sync.master_broker_id, sync.master_epoch),
        (None, 3),
        "no master, epoch moved"
    );
    assert_eq!(sync.sync_state_set, [2].into_iter().collect());
    let unclean = s.elect_master("b", None, false, true, &only3.at(5_000));
    assert_eq!(unclean.response.master_broker_id, Some(3));
}

#[test]
fn registration_reports_a_live_master_and_records_a_moved_address() {
    let (mut s, live) = three_replicas();
    let view = live.at(0);
    assert_eq!(
        s.register_broker("C", "x", 1, "a", &view).code,
        C::ControllerBrokerNeedToBeRegistered
    );
    assert_eq!(
        s.register_broker("C", "b", 9, "a", &view).code,
        C::ControllerBrokerNeedToBeRegistered
    );
    let before = s.register_broker("C", "b", 3, "127.0.0.3:10911", &view);
    assert_eq!(before.code, C::Success);
    assert_eq!(before.response.master_broker_id, None);
    assert!(before.events.is_empty());
    let r = s.elect_master("b", Some(1), false, false, &view);
    commit(&mut s, &r);
    let moved = s.register_broker("C", "b", 3, "127.0.0.33:10911", &view);
    assert_eq!(moved.response.master_broker_id, Some(1));
    assert_eq!(
        SyncStateSet::decode(moved.body.as_ref().unwrap()).unwrap(),
        set(&[1], 1)
    );
    commit(&mut s, &moved);
    assert_eq!(
        s.replica_info("b").unwrap().brokers[&3].0,
        "127.0.0.33:10911"
    );
    assert_eq!(s.replica_info_answer("b").response.master_epoch, Some(1));
    assert_eq!(
        s.replica_info_answer("x").code,
        C::ControllerBrokerMetadataNotExist
    );
}

#[test]
fn cleaning_refuses_living_brokers_unless_asked_and_removes_empty_sets() {
    let (mut s, live) = three_replicas();
    let view = live.at(0);
    let r = s.elect_master("b", Some(1), false, false, &view);
    commit(&mut s, &r);
    let bad = C::ControllerInvalidCleanBrokerMetadata;
    assert_eq!(s.clean_broker_data("C", "b", None, false, &view).code, bad);
    assert_eq!(
        s.clean_broker_data("C", "b", Some("3"), false, &view).code,
        bad
    );
    assert_eq!(
        s.clean_broker_data("C", "b", Some("3;x"), true, &view).code,
        bad
    );
    assert_eq!(s.clean_broker_data("C", "zz", None, true, &view).code, bad);
    let r = s.clean_broker_data("C", "b", Some("3"), true, &view);
    assert_eq!(r.code, C::Success);
    commit(&mut s, &r);
    assert!(!s.replica_info("b").unwrap().brokers.contains_key(&3));
    let all = s.clean_broker_data("C", "b", None, true, &view);
    commit(&mut s, &all);
    assert!(s.replica_info("b").is_none() && s.sync_state("b").is_none());
    assert_eq!(s.next_broker_id("b"), 1);
}
