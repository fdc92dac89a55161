//! A master and a slave of one broker group (features.md §g.1, §g.2, §e.1): the slave
//! refuses sends as upstream does, learns its master from the name server's registration
//! answer (the HA address goes to its store), copies the master's topics, groups, consumer
//! offsets and delay offsets, and pull answers carry upstream's `suggestWhichBrokerId`.

use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ringmq_broker::processor::pull::{pull_route, PullRole, PullRoute, PULL_FLAG_SUBSCRIPTION};
use ringmq_broker::{Broker, BrokerConfig};
use ringmq_namesrv::config::NamesrvConfig;
use ringmq_namesrv::server::Namesrv;
use ringmq_remoting::body::subscription::SubscriptionGroupConfig;
use ringmq_remoting::codes::ResponseCode;
use ringmq_remoting::RemotingCommand;
use ringmq_store::util::loopback_record;
use ringmq_store::{
    ArrivalListener, Boundary, GetMessageResult, GetMessageStatus, HaStatus, IndexUpdatePoint,
    MemStore, MessageFilter, PutCallback, PutRequest, StoreApi,
};

use super::{pull, send, temp_dir, Client};

const REJECT_REMARK: &str = "[REJECTREQUEST]system busy, start flow control for a while";

fn broker_config(dir: &Path, namesrv: Option<&str>, extra: &str) -> BrokerConfig {
    let text = format!(
        "brokerName=broker-ms\nbrokerClusterName=ClusterMS\nlistenPort=0\nbindAddress=127.0.0.1\n\
         brokerIP1=127.0.0.1\nstorePathRootDir={}\nmappedFileSizeCommitLog=4194304\n\
         mappedFileSizeConsumeQueue=60000\nflushConsumerOffsetInterval=200\n\
         registerNameServerPeriod=1000\n{}{extra}",
        dir.display(),
        namesrv
            .map(|n| format!("namesrvAddr={n}\n"))
            .unwrap_or_default()
    );
    let (c, notes) = BrokerConfig::from_properties_text(&text);
    assert!(notes.is_empty(), "{notes:?}");
    c
}

fn start_namesrv(dir: &Path) -> Namesrv {
    let text = format!(
        "listenPort=0\nbindAddress=127.0.0.1\nkvConfigPath={}\nconfigStorePath={}\n",
        dir.join("kvConfig.json").display(),
        dir.join("namesrv.properties").display()
    );
    let (cfg, unknown) = NamesrvConfig::from_properties_text(&text);
    assert!(unknown.is_empty(), "{unknown:?}");
    Namesrv::start(cfg).expect("name server starts")
}

/// The in-memory store, recording the HA addresses the broker hands it.
#[derive(Default)]
struct RecordingStore {
    inner: MemStore,
    ha_master_addrs: Mutex<Vec<String>>,
    /// What `ha_status` says of the HA link to the master.
    connected_to_master: std::sync::atomic::AtomicBool,
}

impl RecordingStore {
    fn ha_master_addrs(&self) -> Vec<String> {
        self.ha_master_addrs.lock().unwrap().clone()
    }
}

impl StoreApi for RecordingStore {
    fn put(&self, request: PutRequest, on_done: PutCallback) {
        self.inner.put(request, on_done)
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
        self.inner.get_message(
            topic,
            queue_id,
            offset,
            max_msg_nums,
            max_total_bytes,
            filter,
        )
    }
    fn max_offset_in_queue(&self, topic: &str, queue_id: i32) -> i64 {
        self.inner.max_offset_in_queue(topic, queue_id)
    }
    fn min_offset_in_queue(&self, topic: &str, queue_id: i32) -> i64 {
        self.inner.min_offset_in_queue(topic, queue_id)
    }
    fn offset_in_queue_by_time(
        &self,
        topic: &str,
        queue_id: i32,
        timestamp_ms: i64,
        boundary: Boundary,
    ) -> i64 {
        self.inner
            .offset_in_queue_by_time(topic, queue_id, timestamp_ms, boundary)
    }
    fn earliest_message_time(&self, topic: &str, queue_id: i32) -> Option<i64> {
        self.inner.earliest_message_time(topic, queue_id)
    }
    fn message_store_time(&self, topic: &str, queue_id: i32, queue_offset: i64) -> Option<i64> {
        self.inner.message_store_time(topic, queue_id, queue_offset)
    }
    fn look_message_by_offset(&self, physical_offset: i64) -> Option<Bytes> {
        self.inner.look_message_by_offset(physical_offset)
    }
    fn query_message(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin_ms: i64,
        end_ms: i64,
    ) -> Vec<Bytes> {
        self.inner
            .query_message(topic, key, max_num, begin_ms, end_ms)
    }
    fn index_last_update(&self) -> IndexUpdatePoint {
        self.inner.index_last_update()
    }
    fn add_arrival_listener(&self, listener: ArrivalListener) {
        self.inner.add_arrival_listener(listener)
    }
    fn update_ha_master_address(&self, addr: &str) {
        self.ha_master_addrs.lock().unwrap().push(addr.to_string());
    }
    fn ha_status(&self) -> HaStatus {
        HaStatus {
            slaves: Vec::new(),
            master_addr: self.ha_master_addrs.lock().unwrap().last().cloned(),
            connected_to_master: self
                .connected_to_master
                .load(std::sync::atomic::Ordering::SeqCst),
        }
    }
    fn commit_log_max_offset(&self) -> i64 {
        self.inner.commit_log_max_offset()
    }
    fn execute_delete_files_manually(&self) {
        self.inner.execute_delete_files_manually()
    }
    fn shutdown(&self) {
        self.inner.shutdown()
    }
}

/// Starts a slave (brokerId 1) on a recording in-memory store.
fn start_slave(dir: &Path, namesrv: Option<&str>, extra: &str) -> (Broker, Arc<RecordingStore>) {
    let store = Arc::new(RecordingStore::default());
    let config = broker_config(
        dir,
        namesrv,
        &format!("brokerRole=SLAVE\nbrokerId=1\n{extra}"),
    );
    let broker = Broker::start_with_store(config, Some(store.clone() as Arc<dyn StoreApi>))
        .expect("slave starts");
    (broker, store)
}

/// Waits (bounded by `limit`) until `done` holds; says whether it did.
fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

#[test]
fn slave_refuses_sends_and_unreadable_pulls_as_upstream() {
    let dir = temp_dir("slave-refuses");
    let (slave, _) = start_slave(&dir, None, "");
    let mut c = Client::connect(slave.local_addr());
    let r = c.call(send("TopicSlave", 0, "", b"x"));
    assert_eq!(r.code, ResponseCode::SystemBusy.code());
    assert_eq!(r.remark.as_deref(), Some(REJECT_REMARK));
    let send_back = RemotingCommand::request(36, 0)
        .with_ext("offset", "0")
        .with_ext("group", "G1")
        .with_ext("delayLevel", "0")
        .with_ext("originMsgId", "00")
        .with_ext("originTopic", "TopicSlave")
        .with_ext("unitMode", "false")
        .with_ext("maxReconsumeTimes", "16");
    let r = c.call(send_back);
    assert_eq!(r.code, ResponseCode::SystemBusy.code(), "{:?}", r.remark);
    assert_eq!(r.remark.as_deref(), Some(REJECT_REMARK));
    // slaveReadEnable is off by default: the slave serves no pulls either.
    let r = c.call(pull("TopicSlave", 0, 0, 0, 0));
    assert_eq!(r.code, ResponseCode::SystemBusy.code());
    assert_eq!(r.remark.as_deref(), Some(REJECT_REMARK));
    slave.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn slave_must_have_a_broker_id_above_zero() {
    let dir = temp_dir("slave-id-zero");
    let config = broker_config(&dir, None, "brokerRole=SLAVE\nbrokerId=0\n");
    let err = match Broker::start(config) {
        Ok(b) => {
            b.shutdown();
            panic!("a slave with brokerId 0 started");
        }
        Err(e) => e.to_string(),
    };
    assert!(err.contains("Slave's brokerId must be > 0"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_master_configured_with_another_id_runs_as_broker_zero() {
    let dir = temp_dir("master-id");
    let broker = Broker::start(broker_config(&dir, None, "brokerId=3\n")).expect("master starts");
    assert_eq!(broker.context().config.broker_id, 0);
    let mut c = Client::connect(broker.local_addr());
    assert_eq!(c.call(send("TopicM", 0, "", b"x")).code, 0);
    broker.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

fn create_group(c: &mut Client, group: &str) {
    let body = format!("{{\"groupName\":\"{group}\",\"retryMaxTimes\":5}}");
    let r = c.call(RemotingCommand::request(200, 0).with_body(body.into_bytes()));
    assert_eq!(r.code, 0, "{:?}", r.remark);
}

fn commit_offset(c: &mut Client, group: &str, topic: &str, queue_id: i32, offset: i64) {
    let r = c.call(
        RemotingCommand::request(15, 0)
            .with_ext("consumerGroup", group)
            .with_ext("topic", topic)
            .with_ext("queueId", queue_id.to_string())
            .with_ext("commitOffset", offset.to_string()),
    );
    assert_eq!(r.code, 0, "{:?}", r.remark);
}

#[test]
fn slave_learns_its_master_and_copies_its_metadata() {
    let root = temp_dir("master-slave");
    let namesrv = start_namesrv(&root.join("ns"));
    let ns = namesrv.local_addr().to_string();
    let master = Broker::start(broker_config(&root.join("m"), Some(&ns), "")).expect("master");
    let mut mc = Client::connect(master.local_addr());
    assert_eq!(mc.call(send("TopicMS", 0, "", b"x")).code, 0);
    create_group(&mut mc, "GroupMS");
    commit_offset(&mut mc, "GroupMS", "TopicMS", 0, 1);
    // The delay-level progress GET_ALL_DELAY_OFFSET reports.
    master.context().delay_offsets.update(2, 7);

    let (slave, store) = start_slave(&root.join("s"), Some(&ns), "");
    let master_addr = master.local_addr().to_string();
    let master_ha = format!("127.0.0.1:{}", master.local_addr().port() + 1);
    assert_eq!(slave.master_addr().as_deref(), Some(master_addr.as_str()));
    assert_eq!(store.ha_master_addrs().first(), Some(&master_ha));

    let sctx = slave.context().clone();
    let copied = wait_for(Duration::from_secs(5), || {
        sctx.topics.select("TopicMS").is_some()
            && sctx.groups.get("GroupMS").is_some()
            && sctx.offsets.query_offset("GroupMS", "TopicMS", 0) == Some(1)
            && sctx.delay_offsets.offset(2) == Some(7)
    });
    assert!(copied, "the first sync copies topics, groups and offsets");
    assert_eq!(sctx.groups.get("GroupMS").unwrap().retry_max_times, 5);
    assert_eq!(
        sctx.topics.data_version(),
        master.context().topics.data_version()
    );
    let on_disk = std::fs::read_to_string(root.join("s/config/topics.json")).unwrap();
    assert!(on_disk.contains("TopicMS"), "the copy is persisted");
    let on_disk = std::fs::read_to_string(root.join("s/config/subscriptionGroup.json")).unwrap();
    assert!(on_disk.contains("GroupMS"), "the copy is persisted");

    // Later changes arrive with the periodic sync (every 10 s).
    assert_eq!(mc.call(send("TopicLater", 0, "", b"y")).code, 0);
    commit_offset(&mut mc, "GroupMS", "TopicMS", 0, 2);
    let later = wait_for(Duration::from_secs(12), || {
        sctx.topics.select("TopicLater").is_some()
            && sctx.offsets.query_offset("GroupMS", "TopicMS", 0) == Some(2)
    });
    assert!(later, "the periodic sync copies later changes within 12 s");

    // brokerStatus and haStatus tell the roles apart.
    let active = |c: &mut Client| -> String {
        let r = c.call(RemotingCommand::request(28, 0));
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        v["table"]["brokerActive"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let mut sc = Client::connect(slave.local_addr());
    assert_eq!(active(&mut mc), "true");
    assert_eq!(active(&mut sc), "false");
    let r = sc.call(RemotingCommand::request(907, 0));
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let ha: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(ha["master"], false);
    assert_eq!(ha["haClientRuntimeInfo"]["masterAddr"], master_ha.as_str());
    let r = mc.call(RemotingCommand::request(907, 0));
    let ha: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(ha["master"], true);

    // The slave refuses sends even with its topics known.
    let r = sc.call(send("TopicMS", 0, "", b"z"));
    assert_eq!(r.code, ResponseCode::SystemBusy.code());

    slave.shutdown();
    master.shutdown();
    namesrv.shutdown();
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn configured_ha_master_address_wins_over_the_registration_answer() {
    let root = temp_dir("ha-master-address");
    let namesrv = start_namesrv(&root.join("ns"));
    let ns = namesrv.local_addr().to_string();
    let master = Broker::start(broker_config(&root.join("m"), Some(&ns), "")).expect("master");
    let (slave, store) = start_slave(&root.join("s"), Some(&ns), "haMasterAddress=127.0.0.1:1\n");
    assert_eq!(store.ha_master_addrs(), vec!["127.0.0.1:1".to_string()]);
    assert_eq!(
        slave.master_addr(),
        Some(master.local_addr().to_string()),
        "the metadata sync still follows the name server's masterAddr"
    );
    // The master leaves the name server: the slave's next registration (every 1 s here)
    // learns it has no master now, and the slave keeps serving.
    master.shutdown();
    assert!(
        wait_for(Duration::from_secs(5), || slave.master_addr().is_none()),
        "the slave forgets a master the name server no longer lists"
    );
    let mut c = Client::connect(slave.local_addr());
    let r = c.call(RemotingCommand::request(28, 0));
    assert_eq!(r.code, 0, "{:?}", r.remark);
    slave.shutdown();
    namesrv.shutdown();
    let _ = std::fs::remove_dir_all(&root);
}

/// Puts one message straight into a slave's store, as replication would.
fn replicate(store: &RecordingStore, topic: &str, body: &[u8]) {
    let records = loopback_record(topic, 0, body, b"");
    let (tx, rx) = mpsc::channel();
    store.inner.put(
        PutRequest::new(topic, 0, 0, records, 1),
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    rx.recv_timeout(Duration::from_secs(5))
        .expect("put completes");
}

#[test]
fn a_readable_slave_serves_replicated_data_and_points_back_to_the_master() {
    let dir = temp_dir("slave-read");
    let (slave, store) = start_slave(&dir, None, "slaveReadEnable=true\n");
    slave
        .context()
        .topics
        .update(ringmq_remoting::body::topic::TopicConfig::new("TopicRead").with_queues(1, 1));
    replicate(&store, "TopicRead", b"replicated");
    store
        .connected_to_master
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let mut c = Client::connect(slave.local_addr());
    let r = c.call(pull("TopicRead", 0, 0, PULL_FLAG_SUBSCRIPTION, 0));
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(r.ext_fields.get("suggestWhichBrokerId"), Some("0"));
    // Nothing more here: retry at once on the master.
    let r = c.call(pull("TopicRead", 0, 1, PULL_FLAG_SUBSCRIPTION, 0));
    assert_eq!(r.code, ResponseCode::PullRetryImmediately.code());
    assert_eq!(r.ext_fields.get("suggestWhichBrokerId"), Some("0"));
    // With the master gone the slave answers for itself (a long poll would wait here).
    store
        .connected_to_master
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let r = c.call(pull("TopicRead", 0, 1, PULL_FLAG_SUBSCRIPTION, 0));
    assert_eq!(r.code, ResponseCode::PullNotFound.code(), "{:?}", r.remark);
    slave.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

fn result(status: GetMessageStatus, from_slave: bool) -> GetMessageResult {
    GetMessageResult {
        status,
        next_begin_offset: 1,
        min_offset: 0,
        max_offset: 1,
        messages: Vec::new(),
        message_queue_offsets: Vec::new(),
        suggest_pulling_from_slave: from_slave,
        file_spans: Vec::new(),
    }
}

fn route(
    is_master: bool,
    slave_read_enable: bool,
    code: ResponseCode,
    status: GetMessageStatus,
    from_slave: bool,
) -> PullRoute {
    let role = PullRole {
        is_master,
        slave_read_enable,
        offset_check_in_slave: false,
        master_online: true,
    };
    let mut group = SubscriptionGroupConfig::new("G");
    group.which_broker_when_consume_slowly = 1;
    pull_route(&role, code, &result(status, from_slave), &group)
}

#[test]
fn pull_route_follows_upstream_suggest_which_broker_id() {
    use GetMessageStatus::{Found, NoMessageInQueue, OffsetFoundNull};
    use ResponseCode::{PullNotFound, PullOffsetMoved, PullRetryImmediately, Success};
    let at = |code, id| PullRoute {
        code,
        suggest_which_broker_id: id,
    };
    // Master, slave reading off: always the master.
    assert_eq!(route(true, false, Success, Found, true), at(Success, 0));
    // Master, slave reading on: a consumer beyond the in-memory window goes to broker 1.
    assert_eq!(route(true, true, Success, Found, true), at(Success, 1));
    assert_eq!(route(true, true, Success, Found, false), at(Success, 0));
    assert_eq!(
        route(true, true, PullNotFound, OffsetFoundNull, false),
        at(PullNotFound, 0)
    );
    // Slave: data the master has in memory → back to the master; nothing found → retry.
    assert_eq!(route(false, true, Success, Found, false), at(Success, 0));
    assert_eq!(
        route(false, true, PullNotFound, OffsetFoundNull, false),
        at(PullRetryImmediately, 0)
    );
    // Slave serving cold data keeps the consumer.
    assert_eq!(route(false, true, Success, Found, true), at(Success, 1));
    // A slave does not move offsets unless offsetCheckInSlave.
    assert_eq!(
        route(false, true, PullOffsetMoved, NoMessageInQueue, true),
        at(PullRetryImmediately, 0)
    );
    let mut role = PullRole {
        is_master: false,
        slave_read_enable: true,
        offset_check_in_slave: true,
        master_online: true,
    };
    let group = SubscriptionGroupConfig::new("G");
    // With the master gone a slave answers for itself: nothing found is PULL_NOT_FOUND
    // (the pull is held), not a retry that would spin between client and slave.
    role.master_online = false;
    assert_eq!(
        pull_route(&role, PullNotFound, &result(OffsetFoundNull, false), &group),
        at(PullNotFound, 0)
    );
    assert_eq!(
        pull_route(&role, Success, &result(Found, false), &group),
        at(Success, 0)
    );
    role.master_online = true;
    assert_eq!(
        pull_route(
            &role,
            PullOffsetMoved,
            &result(NoMessageInQueue, true),
            &group
        ),
        at(PullOffsetMoved, 1)
    );
}

#[test]
fn replicated_messages_are_pulled_from_the_slave_with_the_master_down() {
    let root = temp_dir("ms-replication");
    let namesrv = start_namesrv(&root.join("ns"));
    let ns = namesrv.local_addr().to_string();
    let master = Broker::start(broker_config(&root.join("m"), Some(&ns), "")).expect("master");
    let mut mc = Client::connect(master.local_addr());
    for i in 0..10 {
        let r = mc.call(send("TopicRepl", 0, "", format!("m{i}").as_bytes()));
        assert_eq!(r.code, 0, "{:?}", r.remark);
    }
    let slave = Broker::start(broker_config(
        &root.join("s"),
        Some(&ns),
        "brokerRole=SLAVE\nbrokerId=1\nslaveReadEnable=true\n",
    ))
    .expect("slave");
    let sctx = slave.context().clone();
    assert!(
        wait_for(Duration::from_secs(10), || sctx
            .store
            .max_offset_in_queue("TopicRepl", 0)
            >= 10),
        "the slave replicated the master's messages: {:?}",
        sctx.store.ha_status()
    );
    // haStatus on the master lists the slave with its acknowledged offset and lag.
    let mut connections = || -> serde_json::Value {
        let r = mc.call(RemotingCommand::request(907, 0));
        let ha: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        ha["haConnectionInfo"].clone()
    };
    let mut last = serde_json::Value::Null;
    let acked = wait_for(Duration::from_secs(10), || {
        last = connections();
        last.as_array().is_some_and(|c| {
            c.len() == 1
                && c[0]["slaveAckOffset"].as_i64() == Some(sctx.store.commit_log_max_offset())
        })
    });
    assert!(acked, "the master reports its slave: {last}");
    assert_eq!(last[0]["diff"], 0);
    master.shutdown();
    let mut c = Client::connect(slave.local_addr());
    let r = c.call(pull("TopicRepl", 0, 0, PULL_FLAG_SUBSCRIPTION, 0));
    assert_eq!(r.code, 0, "{:?}", r.remark);
    slave.shutdown();
    namesrv.shutdown();
    let _ = std::fs::remove_dir_all(&root);
}
