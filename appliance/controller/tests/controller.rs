//! Controllers as processes would run them, in this process on loopback ports: a
//! three-member Raft group serving brokers' requests, a leader change that keeps the
//! tables, a controller-triggered re-election with its role-change notice, and a restart
//! from disk. Every wait is bounded.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ringmq_controller::{Controller, ControllerConfig};
use ringmq_remoting::body::controller::{BrokerReplicasInfo, SyncStateSet};
use ringmq_remoting::body::kv::Properties;
use ringmq_remoting::header::controller::*;
use ringmq_remoting::header::namesrv::BrokerHeartbeatRequestHeader;
use ringmq_remoting::header::CommandHeader;
use ringmq_remoting::{FrameDecoder, RemotingCommand, RequestCode, ResponseCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(15);
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ringmq-controller-{name}-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

struct Group {
    /// Brokers' heartbeat connections, by (broker id, controller): upstream marks a broker
    /// inactive when its connection closes, so a live broker keeps its own.
    heartbeat_conns: std::collections::HashMap<(i64, usize), ringmq_controller::wire::Conn>,
    ports: Vec<u16>,
    dir: PathBuf,
    members: Vec<Option<Controller>>,
    rt: tokio::runtime::Runtime,
}

fn member_config(ports: &[u16], me: usize, dir: &std::path::Path) -> ControllerConfig {
    let peers: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("n{i}-127.0.0.1:{p}"))
        .collect();
    let text = format!(
        "controllerDLegerGroup=g1\ncontrollerDLegerPeers={}\ncontrollerDLegerSelfId=n{me}\n\
         controllerStorePath={}\nbindAddress=127.0.0.1\nscanNotActiveBrokerInterval=200\n\
         ringmq.controller.heartbeatIntervalMs=50\nringmq.controller.electionTimeoutMinMs=300\n\
         ringmq.controller.electionTimeoutMaxMs=600\n",
        peers.join(";"),
        dir.join(format!("n{me}")).display()
    );
    let load = ControllerConfig::from_properties(&Properties::parse(&text).unwrap());
    assert!(load.unknown_keys.is_empty(), "{:?}", load.unknown_keys);
    load.config
}

impl Group {
    fn start(n: usize, dir: PathBuf) -> Group {
        let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let mut g = Group {
            heartbeat_conns: Default::default(),
            ports,
            dir,
            members: Vec::new(),
            // A worker thread of its own, so the fake brokers answer while the test waits.
            rt: tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap(),
        };
        for i in 0..n {
            let c = g.start_member(i);
            g.members.push(Some(c));
        }
        g
    }

    fn start_member(&self, i: usize) -> Controller {
        Controller::start(member_config(&self.ports, i, &self.dir), None).unwrap()
    }

    fn addr(&self, i: usize) -> SocketAddr {
        format!("127.0.0.1:{}", self.ports[i]).parse().unwrap()
    }

    fn call(&self, i: usize, request: RemotingCommand) -> RemotingCommand {
        self.rt
            .block_on(ringmq_controller::wire::call_once(
                self.addr(i),
                request,
                CALL_TIMEOUT,
            ))
            .unwrap_or_else(|e| panic!("controller {i}: {e}"))
    }

    /// The index every running member names as leader, once they agree.
    fn wait_leader(&self) -> usize {
        let deadline = Instant::now() + WAIT;
        loop {
            let mut seen = Vec::new();
            for (i, m) in self.members.iter().enumerate() {
                if m.is_some() {
                    let r = self.call(
                        i,
                        RemotingCommand::request(RequestCode::ControllerGetMetadataInfo.code(), 0),
                    );
                    let h: GetMetaDataResponseHeader = r.decode_header().unwrap();
                    seen.push((i, h.is_leader, h.controller_leader_address));
                }
            }
            let leaders: Vec<usize> = seen.iter().filter(|s| s.1).map(|s| s.0).collect();
            if leaders.len() == 1 {
                let addr = self.addr(leaders[0]).to_string();
                if seen.iter().all(|s| s.2.as_deref() == Some(addr.as_str())) {
                    return leaders[0];
                }
            }
            assert!(Instant::now() < deadline, "no agreed leader: {seen:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A heartbeat of broker `id` to controller `i` over that broker's connection.
    fn beat(&mut self, i: usize, id: i64, addr: &str, timeout_ms: i64) -> ResponseCode {
        let target = self.addr(i);
        let rt = &self.rt;
        let conn = match self.heartbeat_conns.entry((id, i)) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(
                rt.block_on(ringmq_controller::wire::Conn::connect(target, CALL_TIMEOUT))
                    .unwrap(),
            ),
        };
        let r = rt
            .block_on(conn.call(heartbeat(id, addr, timeout_ms), CALL_TIMEOUT))
            .unwrap();
        code(&r)
    }

    /// Broker `id` dies: its connections close.
    fn kill_broker(&mut self, id: i64) {
        self.heartbeat_conns.retain(|(b, _), _| *b != id);
    }

    /// Controller `i` stops, then the brokers' connections to it close. In the other order
    /// a leader could see its brokers' connections close first, mark them inactive and
    /// elect a new master before it stops, which is right for the product and not what a
    /// test of a leader change wants.
    fn stop(&mut self, i: usize) {
        if let Some(c) = self.members[i].take() {
            c.shutdown();
        }
        self.heartbeat_conns.retain(|(_, c), _| *c != i);
    }
}

fn req<H: CommandHeader>(code: RequestCode, header: &H) -> RemotingCommand {
    RemotingCommand::request(code.code(), 0).with_header(header)
}

fn heartbeat(broker_id: i64, addr: &str, timeout_ms: i64) -> RemotingCommand {
    req(
        RequestCode::BrokerHeartbeat,
        &BrokerHeartbeatRequestHeader {
            cluster_name: "C".into(),
            broker_addr: addr.into(),
            broker_name: "b".into(),
            broker_id: Some(broker_id),
            epoch: Some(1),
            max_offset: Some(100),
            confirm_offset: Some(100),
            heartbeat_timeout_mills: Some(timeout_ms),
            election_priority: None,
        },
    )
}

fn code(r: &RemotingCommand) -> ResponseCode {
    ResponseCode::from_code(r.code).unwrap_or_else(|| panic!("unknown code {}", r.code))
}

/// A broker's listener that answers every request with SUCCESS and hands it to the test.
fn fake_broker(
    rt: &tokio::runtime::Runtime,
) -> (String, std::sync::mpsc::Receiver<RemotingCommand>) {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    rt.spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = BytesMut::new();
                let decoder = FrameDecoder::default();
                loop {
                    while let Ok(Some(cmd)) = decoder.decode(&mut buf) {
                        let mut out = BytesMut::new();
                        cmd.response_to(0, None).encode(&mut out);
                        let _ = stream.write_all(&out).await;
                        let _ = tx.send(cmd);
                    }
                    if stream.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                        return;
                    }
                }
            });
        }
    });
    (addr, rx)
}

fn register(g: &Group, leader: usize, addr: &str) -> i64 {
    let r = g.call(
        leader,
        req(
            RequestCode::ControllerGetNextBrokerId,
            &GetNextBrokerIdRequestHeader {
                cluster_name: "C".into(),
                broker_name: "b".into(),
            },
        ),
    );
    assert_eq!(code(&r), ResponseCode::Success);
    let id = r
        .decode_header::<GetNextBrokerIdResponseHeader>()
        .unwrap()
        .next_broker_id
        .unwrap();
    let apply = ApplyBrokerIdRequestHeader {
        cluster_name: "C".into(),
        broker_name: "b".into(),
        applied_broker_id: id,
        register_check_code: format!("{addr};1700000000000"),
    };
    let r = g.call(leader, req(RequestCode::ControllerApplyBrokerId, &apply));
    assert_eq!(code(&r), ResponseCode::Success, "{:?}", r.remark);
    id
}

#[test]
fn a_three_controller_group_elects_serves_fails_over_and_restarts_from_disk() {
    let dir = scratch_dir("group");
    let mut g = Group::start(3, dir.clone());
    let leader = g.wait_leader();
    let follower = (leader + 1) % 3;

    // Followers refuse reads and writes; every member answers metadata and config.
    let next = req(
        RequestCode::ControllerGetNextBrokerId,
        &GetNextBrokerIdRequestHeader {
            cluster_name: "C".into(),
            broker_name: "b".into(),
        },
    );
    assert_eq!(
        code(&g.call(follower, next)),
        ResponseCode::ControllerNotLeader
    );
    let cfg = g.call(
        follower,
        RemotingCommand::request(RequestCode::GetControllerConfig.code(), 0),
    );
    assert!(std::str::from_utf8(&cfg.body)
        .unwrap()
        .contains("controllerDLegerSelfId=n"));
    let bad = g.call(
        leader,
        RemotingCommand::request(RequestCode::ControllerElectMaster.code(), 0),
    );
    assert_eq!(
        code(&bad),
        ResponseCode::ControllerInvalidRequest,
        "{:?}",
        bad.remark
    );

    // Two brokers register; the first elects itself.
    let (addr1, _notices1) = fake_broker(&g.rt);
    let (addr2, notices2) = fake_broker(&g.rt);
    assert_eq!(register(&g, leader, &addr1), 1);
    assert_eq!(register(&g, leader, &addr2), 2);
    for i in 0..3 {
        assert_eq!(g.beat(i, 1, &addr1, 60_000), ResponseCode::Success);
        assert_eq!(g.beat(i, 2, &addr2, 60_000), ResponseCode::Success);
    }
    let elect = |id: i64| {
        req(
            RequestCode::ControllerElectMaster,
            &ElectMasterRequestHeader {
                cluster_name: "C".into(),
                broker_name: "b".into(),
                broker_id: id,
                designate_elect: false,
                invoke_time: None,
            },
        )
    };
    let r = g.call(leader, elect(1));
    assert_eq!(code(&r), ResponseCode::Success, "{:?}", r.remark);
    let h: ElectMasterResponseHeader = r.decode_header().unwrap();
    assert_eq!((h.master_broker_id, h.master_epoch), (Some(1), Some(1)));
    // A broker-asked election is announced to the live members too.
    let first = notices2
        .recv_timeout(WAIT)
        .expect("broker 2 hears of master 1");
    let n: NotifyBrokerRoleChangedRequestHeader = first.decode_header().unwrap();
    assert_eq!((n.master_broker_id, n.master_epoch), (Some(1), Some(1)));

    // The master takes broker 2 into its SyncStateSet.
    let mut alter = req(
        RequestCode::ControllerAlterSyncStateSet,
        &AlterSyncStateSetRequestHeader {
            broker_name: "b".into(),
            master_broker_id: 1,
            master_epoch: 1,
            invoke_time: None,
        },
    );
    let synced = SyncStateSet {
        sync_state_set: [1, 2].into_iter().collect(),
        sync_state_set_epoch: 1,
    };
    alter.body = synced.encode().into();
    let r = g.call(leader, alter);
    assert_eq!(code(&r), ResponseCode::Success, "{:?}", r.remark);

    // The leader goes; the other two elect one and kept every table.
    g.stop(leader);
    let leader2 = g.wait_leader();
    assert_ne!(leader2, leader);
    let mut data = RemotingCommand::request(RequestCode::ControllerGetSyncStateData.code(), 0);
    data.body = br#"["b"]"#.to_vec().into();
    let info = BrokerReplicasInfo::decode(&g.call(leader2, data).body).unwrap();
    let b = &info.replicas_info_table["b"];
    assert_eq!(
        (b.master_broker_id, b.master_epoch, b.sync_state_set_epoch),
        (Some(1), 1, 2)
    );
    assert_eq!(b.in_sync_replicas.len(), 2);

    // Broker 1 (the master) dies; the new leader elects broker 2 and tells it.
    g.kill_broker(1);
    let notice = notices2
        .recv_timeout(WAIT)
        .expect("a role change notice reaches broker 2");
    assert_eq!(notice.code, RequestCode::NotifyBrokerRoleChanged.code());
    let n: NotifyBrokerRoleChangedRequestHeader = notice.decode_header().unwrap();
    assert_eq!((n.master_broker_id, n.master_epoch), (Some(2), Some(2)));
    assert_eq!(n.master_address.as_deref(), Some(addr2.as_str()));
    assert_eq!(
        SyncStateSet::decode(&notice.body).unwrap().sync_state_set,
        [2].into_iter().collect()
    );

    // Everyone stops; restarted from disk, the group still knows broker 2 is master.
    for i in 0..3 {
        g.stop(i);
    }
    for i in 0..3 {
        let c = g.start_member(i);
        g.members[i] = Some(c);
    }
    let leader3 = g.wait_leader();
    let r = g.call(
        leader3,
        req(
            RequestCode::ControllerGetReplicaInfo,
            &GetReplicaInfoRequestHeader {
                broker_name: "b".into(),
            },
        ),
    );
    assert_eq!(code(&r), ResponseCode::Success, "{:?}", r.remark);
    let h: GetReplicaInfoResponseHeader = r.decode_header().unwrap();
    assert_eq!((h.master_broker_id, h.master_epoch), (Some(2), Some(2)));
    for i in 0..3 {
        g.stop(i);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_single_controller_needs_no_peers_and_applies_config_updates() {
    let dir = scratch_dir("single");
    let port = free_port();
    let text = format!(
        "listenPort={port}\nbindAddress=127.0.0.1\ncontrollerStorePath={}\n\
         ringmq.controller.heartbeatIntervalMs=50\nringmq.controller.electionTimeoutMinMs=150\n\
         ringmq.controller.electionTimeoutMaxMs=300\n",
        dir.display()
    );
    let config = ControllerConfig::from_properties(&Properties::parse(&text).unwrap()).config;
    let file = dir.join("controller.conf");
    let c = Controller::start(config, Some(file.clone())).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let addr = c.local_addr();
    let call = |r: RemotingCommand| {
        rt.block_on(ringmq_controller::wire::call_once(addr, r, CALL_TIMEOUT))
            .unwrap()
    };
    let deadline = Instant::now() + WAIT;
    while !c.is_leader() {
        assert!(
            Instant::now() < deadline,
            "a one-member group elects itself"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut update = RemotingCommand::request(RequestCode::UpdateControllerConfig.code(), 0);
    update.body = b"enableElectUncleanMaster=true\n".to_vec().into();
    assert_eq!(code(&call(update)), ResponseCode::Success);
    assert!(std::fs::read_to_string(&file)
        .unwrap()
        .contains("enableElectUncleanMaster=true"));
    let mut refused = RemotingCommand::request(RequestCode::UpdateControllerConfig.code(), 0);
    refused.body = b"controllerStorePath=/elsewhere\n".to_vec().into();
    let r = call(refused);
    assert_ne!(code(&r), ResponseCode::Success);
    assert!(r.remark.unwrap().contains("controllerStorePath"));
    let unknown = call(RemotingCommand::request(12_345, 0));
    assert_eq!(code(&unknown), ResponseCode::RequestCodeNotSupported);
    let no_id = call(req(
        RequestCode::BrokerHeartbeat,
        &BrokerHeartbeatRequestHeader {
            cluster_name: "C".into(),
            broker_addr: "127.0.0.1:1".into(),
            broker_name: "b".into(),
            ..Default::default()
        },
    ));
    assert_eq!(code(&no_id), ResponseCode::ControllerInvalidRequest);
    let mut garbage = RemotingCommand::request(ringmq_controller::consensus::RAFT_VOTE, 0);
    garbage.body = b"not json".to_vec().into();
    assert_eq!(code(&call(garbage)), ResponseCode::SystemError);
    c.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
