//! Three `ringmq controller` processes as one Raft group on loopback: the Raft leader is
//! killed with SIGKILL; the other two elect a new leader that still holds what the old one
//! committed (a broker id applied before the kill stays taken), and the killed controller,
//! restarted on its store, rejoins under the new leader. mqadmin's controller commands are
//! the probe, as an operator would use them.

use std::process::Command;
use std::time::Duration;

use ringmq_remoting::RemotingCommand;
use ringmq_tests::{
    frame_bytes, free_broker_port, wait_until, RawConn, RawRead, ServerProcess, TempDir,
};

const BOOT: Duration = Duration::from_secs(30);
const ELECT: Duration = Duration::from_secs(20);

pub(super) fn admin(args: &[&str]) -> (bool, String) {
    let out = Command::new(ringmq_tests::ringmq_bin())
        .arg("admin")
        .args(args)
        .output()
        .expect("run ringmq admin");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// The leader address `addr` reports, if it knows one.
fn leader_seen_by(addr: &str) -> Option<String> {
    let (ok, text) = admin(&["getControllerMetaData", "-a", addr]);
    if !ok {
        return None;
    }
    text.lines()
        .find_map(|l| l.strip_prefix("#ControllerLeaderAddress\t"))
        .filter(|a| *a != "null")
        .map(str::to_string)
}

/// Waits until every address in `addrs` reports the same leader, other than `not`, and
/// returns it.
pub(super) fn agreed_leader(addrs: &[String], not: Option<&str>) -> String {
    wait_until(
        "an agreed controller leader",
        ELECT,
        Duration::from_millis(200),
        || {
            let seen: Vec<Option<String>> = addrs.iter().map(|a| leader_seen_by(a)).collect();
            match &seen[0] {
                Some(l)
                    if Some(l.as_str()) != not && seen.iter().all(|s| s.as_ref() == Some(l)) =>
                {
                    Ok(l.clone())
                }
                _ => Err(format!("{seen:?}")),
            }
        },
    )
}

fn call(addr: &str, code: i32, ext: &[(&str, &str)]) -> RemotingCommand {
    let mut conn = RawConn::connect(addr);
    assert!(conn.send(&frame_bytes(code, 1, ext, b"")));
    match conn.read(Duration::from_secs(10)) {
        RawRead::Response(r) => *r,
        other => panic!("controller {addr}: {other:?}"),
    }
}

fn apply_broker_id(addr: &str, id: &str, check_code: &str) -> i32 {
    call(
        addr,
        1013,
        &[
            ("clusterName", "C"),
            ("brokerName", "b"),
            ("appliedBrokerId", id),
            ("registerCheckCode", check_code),
        ],
    )
    .code
}

#[test]
fn a_killed_controller_leader_is_replaced_and_rejoins_without_losing_commits() {
    let dir = TempDir::new("controller-kill");
    let ports: Vec<u16> = (0..3).map(|_| free_broker_port()).collect();
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let peers: Vec<String> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| format!("n{i}-{a}"))
        .collect();
    let spawn = |i: usize| {
        let conf = dir.path().join(format!("controller-n{i}.conf"));
        std::fs::write(
            &conf,
            format!(
                "controllerDLegerGroup=g1\ncontrollerDLegerPeers={}\ncontrollerDLegerSelfId=n{i}\n\
                 controllerStorePath={}\nbindAddress=127.0.0.1\n\
                 ringmq.controller.heartbeatIntervalMs=100\nringmq.controller.electionTimeoutMinMs=600\n\
                 ringmq.controller.electionTimeoutMaxMs=1200\n",
                peers.join(";"),
                dir.path().join(format!("store-n{i}")).display()
            ),
        )
        .unwrap();
        let log = dir.path().join(format!("controller-n{i}.log"));
        ServerProcess::spawn(&["controller", "-c", conf.to_str().unwrap()], &log, BOOT)
    };
    let mut procs: Vec<Option<ServerProcess>> = (0..3).map(|i| Some(spawn(i))).collect();

    let leader = agreed_leader(&addrs, None);
    let l = addrs
        .iter()
        .position(|a| *a == leader)
        .expect("leader is a member");
    let follower = &addrs[(l + 1) % 3];
    assert_eq!(
        apply_broker_id(follower, "1", "127.0.0.1:10911;1"),
        2007,
        "a follower answers NOT_LEADER"
    );
    assert_eq!(apply_broker_id(&leader, "1", "127.0.0.1:10911;1"), 0);

    procs[l].as_mut().unwrap().sigkill();
    let survivors: Vec<String> = addrs.iter().filter(|a| **a != leader).cloned().collect();
    let new_leader = agreed_leader(&survivors, Some(&leader));
    // Committed before the kill: id 1 is bound to the first broker's check code.
    assert_eq!(
        apply_broker_id(&new_leader, "1", "127.0.0.1:10999;2"),
        2014,
        "BROKER_ID_INVALID"
    );
    assert_eq!(apply_broker_id(&new_leader, "2", "127.0.0.1:10912;1"), 0);

    procs[l] = Some(spawn(l));
    let after = agreed_leader(&addrs, None);
    assert_eq!(
        after, new_leader,
        "the restarted controller follows the new leader"
    );
    let (ok, text) = admin(&["getSyncStateSet", "-a", &addrs[l], "-b", "b"]);
    assert!(ok, "{text}");
    assert!(text.contains("#brokerName\tb"), "{text}");
    assert!(
        text.contains("brokerId=2"),
        "the restarted member's leader knows id 2: {text}"
    );
    for p in procs.iter_mut().flatten() {
        p.sigterm();
    }
}
