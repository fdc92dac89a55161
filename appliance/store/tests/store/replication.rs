//! Master/slave CommitLog replication over the classic HA protocol, both stores in this
//! process on 127.0.0.1: a slave's CommitLog is byte-identical to the master's over the
//! replicated range and its ConsumeQueues serve the messages; a fresh slave starts at the
//! master's last segment; bad HA input on either side closes the connection and the
//! master keeps serving; a slave refuses puts of its own.

use super::{config, decode, encode, key_of, props, segment_path, temp_dir, SEG};
use bytes::BytesMut;
use ringmq_store::{
    AcceptAll, BrokerRole, FlushDiskType, MessageStore, PutMessageStatus, PutRequest, PutResult,
    StoreApi, StoreConfig, WriteMode,
};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub(super) const QUEUES: i32 = 4;
const TOPIC: &str = "HA";

fn master_config(dir: &Path, flush: FlushDiskType) -> StoreConfig {
    StoreConfig {
        ha_bind_ip: Some([127, 0, 0, 1].into()),
        ha_listen_port: 0,
        ..config(dir, flush, WriteMode::Mmap)
    }
}

fn slave_config(dir: &Path, master: Option<SocketAddr>) -> StoreConfig {
    StoreConfig {
        broker_role: BrokerRole::Slave,
        ha_master_address: master.map(|a| a.to_string()),
        ..config(dir, FlushDiskType::AsyncFlush, WriteMode::Mmap)
    }
}

fn open_master(dir: &Path, flush: FlushDiskType) -> (MessageStore, SocketAddr) {
    let store = MessageStore::open(master_config(dir, flush)).unwrap();
    let addr = store.ha_listen_addr().expect("HA server listening");
    (store, addr)
}

pub(super) fn request(i: u64) -> PutRequest {
    let qid = (i % QUEUES as u64) as i32;
    let key = format!("k{i}");
    let body: Vec<u8> = key.bytes().cycle().take(100 + (i % 50) as usize).collect();
    let mut b = BytesMut::new();
    encode(TOPIC, qid, 0, &body, &props(&key, None), &mut b);
    PutRequest::new(TOPIC, qid, 0, b, 1)
}

/// Puts messages `from..to` with up to 256 in flight; returns their results in order.
pub(super) fn put_range(store: &MessageStore, from: u64, to: u64) -> Vec<PutResult> {
    let (tx, rx) = mpsc::channel();
    let mut results = vec![None; (to - from) as usize];
    let mut in_flight = 0;
    let mut received = 0;
    for i in from..to {
        if in_flight >= 256 {
            let (j, r): (u64, PutResult) = rx.recv_timeout(Duration::from_secs(20)).unwrap();
            results[(j - from) as usize] = Some(r);
            in_flight -= 1;
            received += 1;
        }
        let tx = tx.clone();
        store.put(
            request(i),
            Box::new(move |r| {
                let _ = tx.send((i, r));
            }),
        );
        in_flight += 1;
    }
    while received < results.len() {
        let (j, r) = rx.recv_timeout(Duration::from_secs(20)).unwrap();
        results[(j - from) as usize] = Some(r);
        received += 1;
    }
    results.into_iter().map(Option::unwrap).collect()
}

pub(super) fn eventually(what: &str, bound: Duration, f: impl Fn() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < bound, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// CommitLog bytes `[from, to)` read from the segment files of the store in `dir`.
pub(super) fn commit_log_bytes(dir: &Path, from: u64, to: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity((to - from) as usize);
    let mut off = from;
    while off < to {
        let start = off - off % SEG;
        let data = std::fs::read(segment_path(dir, start)).unwrap();
        let end = to.min(start + SEG);
        out.extend_from_slice(&data[(off - start) as usize..(end - start) as usize]);
        off = end;
    }
    out
}

/// Keys of a queue's messages on `store` from queue offset `from`, in queue order.
pub(super) fn queue_keys(store: &MessageStore, qid: i32, from: i64) -> Vec<String> {
    let mut keys = Vec::new();
    let mut next = from;
    for _ in 0..10_000 {
        let r = store.get_message(TOPIC, qid, next, 32, 1 << 20, &AcceptAll);
        if r.messages.is_empty() {
            break;
        }
        keys.extend(r.messages.iter().map(|m| key_of(&decode(m))));
        next = r.next_begin_offset;
    }
    keys
}

/// 10,000 puts on a master reach a slave that connected while the master was empty: the
/// slave's CommitLog bytes equal the master's over the whole range (segments roll at the
/// same places, BLANK fillers included), its reput builds ConsumeQueues that serve every
/// message in order, and both sides report the link in `ha_status`.
#[test]
fn slave_replicates_10000_puts_byte_identically_and_serves_them() {
    let (mdir, sdir) = (temp_dir("ha-master"), temp_dir("ha-slave"));
    let (master, addr) = open_master(&mdir, FlushDiskType::AsyncFlush);
    let slave = MessageStore::open(slave_config(&sdir, Some(addr))).unwrap();
    eventually("the slave to connect", Duration::from_secs(10), || {
        slave.ha_status().connected_to_master && master.ha_status().slaves.len() == 1
    });
    let t = Instant::now();
    let results = put_range(&master, 0, 10_000);
    assert!(results.iter().all(|r| r.status == PutMessageStatus::PutOk));
    let max = master.commit_log_max_offset();
    assert!(max as u64 > 10 * SEG, "the data spans many segments");
    eventually("the slave to catch up", Duration::from_secs(30), || {
        slave.commit_log_max_offset() == max
    });
    let lag_ms = t.elapsed().as_millis();
    eprintln!("10,000 puts ({max} bytes) replicated in {lag_ms} ms");
    assert!(
        commit_log_bytes(&mdir, 0, max as u64) == commit_log_bytes(&sdir, 0, max as u64),
        "slave CommitLog differs from the master's"
    );
    eventually("the slave to dispatch", Duration::from_secs(10), || {
        slave.dispatch_behind_bytes() == 0
    });
    for qid in 0..QUEUES {
        let want: Vec<String> = (0..10_000u64)
            .filter(|i| (i % QUEUES as u64) as i32 == qid)
            .map(|i| format!("k{i}"))
            .collect();
        assert_eq!(queue_keys(&slave, qid, 0), want, "queue {qid} on the slave");
    }
    eventually("the master to see the ack", Duration::from_secs(10), || {
        let st = master.ha_status();
        st.slaves.len() == 1 && st.slaves[0].ack_offset == max && st.slaves[0].in_sync
    });
    // Through the broker's trait as well.
    let api: &dyn StoreApi = &slave;
    let st = api.ha_status();
    assert_eq!(st.master_addr, Some(addr.to_string()));
    assert!(st.connected_to_master);
    let api: &dyn StoreApi = &master;
    assert_eq!(api.ha_status().slaves[0].ack_offset, max);
    // Every report that moved the ack was dated against the master's publishes.
    let lag = master.metrics().ha_ack_lag_counts;
    assert!(
        lag.iter().sum::<u64>() > 0,
        "no replication lag recorded: {lag:?}"
    );
    assert_eq!(slave.metrics().ha_ack_lag_counts.iter().sum::<u64>(), 0);
    slave.shutdown();
    master.shutdown();
}

/// Direct write mode on both sides: the master streams from its write ring and files, the
/// slave appends through its own write ring; once both flushed, their CommitLog files are
/// identical and the slave serves every message.
#[test]
fn direct_mode_master_and_slave_replicate_byte_identically() {
    let (mdir, sdir) = (temp_dir("ha-master-direct"), temp_dir("ha-slave-direct"));
    // Flush every page at once, so the files can be compared without waiting for
    // flushCommitLogThoroughInterval.
    let mcfg = StoreConfig {
        write_mode: WriteMode::Direct,
        flush_commit_log_least_pages: 0,
        // Room for every put in flight: a busy ring would refuse puts (OS_PAGE_CACHE_BUSY).
        direct_write_ring_size_bytes: 4 << 20,
        ..master_config(&mdir, FlushDiskType::AsyncFlush)
    };
    let master = MessageStore::open(mcfg).unwrap();
    let addr = master.ha_listen_addr().unwrap();
    let scfg = StoreConfig {
        write_mode: WriteMode::Direct,
        flush_commit_log_least_pages: 0,
        ..slave_config(&sdir, Some(addr))
    };
    let slave = MessageStore::open(scfg).unwrap();
    // Connected before the first put, so the slave replicates from offset 0.
    eventually("the slave's first report", Duration::from_secs(10), || {
        master.ha_status().slaves.iter().any(|s| s.in_sync)
    });
    let results = put_range(&master, 0, 3000);
    let refused: Vec<_> = results
        .iter()
        .filter(|r| r.status != PutMessageStatus::PutOk)
        .collect();
    assert!(
        refused.is_empty(),
        "{} refused, first {:?}",
        refused.len(),
        refused.first()
    );
    let max = master.commit_log_max_offset();
    eventually(
        "the slave to catch up and both to flush",
        Duration::from_secs(30),
        || {
            slave.commit_log_max_offset() == max
                && slave.flush_behind_bytes() == 0
                && master.flush_behind_bytes() == 0
                && slave.dispatch_behind_bytes() == 0
        },
    );
    assert!(commit_log_bytes(&mdir, 0, max as u64) == commit_log_bytes(&sdir, 0, max as u64));
    for qid in 0..QUEUES {
        assert_eq!(
            queue_keys(&slave, qid, 0).len(),
            750,
            "queue {qid} on the slave"
        );
    }
    // A slave joining now starts at the master's last segment, whose pages the flusher has
    // written: the master sends those from the file and only the partial tail page from
    // the write ring.
    let late_dir = temp_dir("ha-slave-direct-late");
    let late = MessageStore::open(StoreConfig {
        write_mode: WriteMode::Direct,
        flush_commit_log_least_pages: 0,
        ..slave_config(&late_dir, Some(addr))
    })
    .unwrap();
    let (max, from) = (max as u64, max as u64 - max as u64 % SEG);
    eventually(
        "the late slave to catch up",
        Duration::from_secs(30),
        || late.commit_log_max_offset() as u64 == max && late.flush_behind_bytes() == 0,
    );
    assert!(commit_log_bytes(&mdir, from, max) == commit_log_bytes(&late_dir, from, max));
    late.shutdown();
    slave.shutdown();
    master.shutdown();
}

/// A slave that starts empty beside a master holding several segments receives from the
/// start of the master's last segment only (upstream's rule for a slave reporting 0): its
/// CommitLog begins there, equals the master's from there on, and its ConsumeQueues serve
/// the messages of that range at the master's queue offsets.
#[test]
fn an_empty_slave_starts_at_the_masters_last_segment() {
    empty_slave_starts_at_the_masters_last_segment(WriteMode::Mmap, "mmap");
}

/// The same in direct mode: the slave's write ring moves to the master's offset.
#[test]
fn an_empty_direct_mode_slave_starts_at_the_masters_last_segment() {
    empty_slave_starts_at_the_masters_last_segment(WriteMode::Direct, "direct");
}

fn empty_slave_starts_at_the_masters_last_segment(mode: WriteMode, tag: &str) {
    let (mdir, sdir) = (
        temp_dir(&format!("ha-master-data-{tag}")),
        temp_dir(&format!("ha-slave-late-{tag}")),
    );
    let (master, addr) = open_master(&mdir, FlushDiskType::AsyncFlush);
    let results = put_range(&master, 0, 2000);
    assert!(results.iter().all(|r| r.status == PutMessageStatus::PutOk));
    let max = master.commit_log_max_offset() as u64;
    let last_start = max - max % SEG;
    assert!(last_start >= 3 * SEG);
    let scfg = StoreConfig {
        write_mode: mode,
        // Every page reaches the file at once, so the files can be compared.
        flush_commit_log_least_pages: 0,
        ..slave_config(&sdir, None)
    };
    let slave = MessageStore::open(scfg).unwrap();
    slave.update_ha_master_address(&addr.to_string());
    eventually(
        "the slave to catch up and flush",
        Duration::from_secs(20),
        || slave.commit_log_max_offset() as u64 == max && slave.flush_behind_bytes() == 0,
    );
    assert_eq!(slave.commit_log_min_offset() as u64, last_start);
    assert!(
        !segment_path(&sdir, 0).exists(),
        "no segment below the start"
    );
    assert!(commit_log_bytes(&mdir, last_start, max) == commit_log_bytes(&sdir, last_start, max));
    eventually("both to dispatch", Duration::from_secs(10), || {
        slave.dispatch_behind_bytes() == 0 && master.dispatch_behind_bytes() == 0
    });
    let first_replicated = results
        .iter()
        .position(|r| r.wrote_offset as u64 >= last_start)
        .unwrap() as u64;
    for qid in 0..QUEUES {
        let from = (first_replicated..2000)
            .find(|i| (i % QUEUES as u64) as i32 == qid)
            .unwrap();
        let want: Vec<String> = (from..2000)
            .filter(|i| (i % QUEUES as u64) as i32 == qid)
            .map(|i| format!("k{i}"))
            .collect();
        let qoff = results[from as usize].queue_offset;
        assert_eq!(
            queue_keys(&slave, qid, qoff),
            want,
            "queue {qid} on the slave"
        );
        assert_eq!(
            slave.max_offset_in_queue(TOPIC, qid),
            master.max_offset_in_queue(TOPIC, qid)
        );
    }
    slave.shutdown();
    master.shutdown();
}

/// Reads from `s` until the peer closes (true) or `bound` passes (false).
fn closed_within(s: &mut TcpStream, bound: Duration) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let t = Instant::now();
    let mut buf = [0u8; 4096];
    while t.elapsed() < bound {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

/// A connection reporting an offset past the master's end (a diverged slave, or another
/// master dialling in) or a negative one is closed by the master; a truncated report and
/// a vanished peer do no harm. The master keeps taking puts and a real slave replicates
/// from it afterwards.
#[test]
fn bad_reports_close_the_connection_and_the_master_keeps_serving() {
    let (mdir, sdir) = (temp_dir("ha-master-bad"), temp_dir("ha-slave-after-bad"));
    let (master, addr) = open_master(&mdir, FlushDiskType::AsyncFlush);
    assert!(put_range(&master, 0, 100)
        .iter()
        .all(|r| r.status == PutMessageStatus::PutOk));
    let max = master.commit_log_max_offset();
    for report in [max + 1, i64::MAX, -1] {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(&report.to_be_bytes()).unwrap();
        assert!(
            closed_within(&mut c, Duration::from_secs(5)),
            "report {report} must close the connection"
        );
    }
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(&[0, 0, 0]).unwrap();
    drop(c);
    assert!(put_range(&master, 100, 200)
        .iter()
        .all(|r| r.status == PutMessageStatus::PutOk));
    let (slave, _) = caught_up_slave(&master, &sdir, addr);
    slave.shutdown();
    master.shutdown();
}

/// A slave opened in `dir` against the master at `addr`, once it holds everything the
/// master has now; returns it with that max offset.
fn caught_up_slave(master: &MessageStore, dir: &Path, addr: SocketAddr) -> (MessageStore, i64) {
    let slave = MessageStore::open(slave_config(dir, Some(addr))).unwrap();
    let max = master.commit_log_max_offset();
    eventually("the slave to catch up", Duration::from_secs(20), || {
        slave.commit_log_max_offset() == max
    });
    (slave, max)
}

/// A fake master listening on 127.0.0.1 for one slave connection: returns the slave's
/// first report and the stream.
fn accept_slave(listener: &TcpListener) -> (i64, TcpStream) {
    let (mut s, _) = listener.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut report = [0u8; 8];
    s.read_exact(&mut report).unwrap();
    (i64::from_be_bytes(report), s)
}

/// The slave closes the connection on a garbage frame header and on bytes sent at an
/// offset other than its CommitLog end, and appends nothing in either case; it reports
/// its max offset as soon as it connects.
#[test]
fn a_slave_closes_on_garbage_frames_and_offset_mismatch_and_appends_nothing() {
    let (mdir, sdir) = (temp_dir("ha-real-master"), temp_dir("ha-slave-fake"));
    // Give the slave some real data first, so a wrong offset is a mismatch.
    let (master, addr) = open_master(&mdir, FlushDiskType::AsyncFlush);
    assert!(put_range(&master, 0, 10)
        .iter()
        .all(|r| r.status == PutMessageStatus::PutOk));
    let (slave, max) = caught_up_slave(&master, &sdir, addr);
    master.shutdown();

    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    slave.update_ha_master_address(&fake.local_addr().unwrap().to_string());
    let (report, mut s) = accept_slave(&fake);
    assert_eq!(report, max, "the slave reports its max offset at once");
    // Header: offset, then a negative body size.
    let mut garbage = max.to_be_bytes().to_vec();
    garbage.extend_from_slice(&(-7i32).to_be_bytes());
    s.write_all(&garbage).unwrap();
    assert!(
        closed_within(&mut s, Duration::from_secs(5)),
        "garbage header closes"
    );
    assert_eq!(slave.commit_log_max_offset(), max);

    // The slave reconnects after 5 s.
    let (_, mut s) = accept_slave(&fake);
    // At a segment start past the slave's end: only the offset check can refuse it.
    let next_segment = max - max % SEG as i64 + SEG as i64;
    let mut frame = next_segment.to_be_bytes().to_vec();
    frame.extend_from_slice(&16i32.to_be_bytes());
    frame.extend_from_slice(&[0xAB; 16]);
    s.write_all(&frame).unwrap();
    assert!(
        closed_within(&mut s, Duration::from_secs(5)),
        "offset mismatch closes"
    );
    assert_eq!(slave.commit_log_max_offset(), max, "nothing appended");
    slave.shutdown();
}

/// A slave store refuses puts of its own (SERVICE_NOT_AVAILABLE): only the master writes
/// its CommitLog.
#[test]
fn a_slave_refuses_puts() {
    let dir = temp_dir("ha-slave-put");
    let slave = MessageStore::open(slave_config(&dir, None)).unwrap();
    let r = slave.put_blocking(request(0));
    assert_eq!(r.status, PutMessageStatus::ServiceNotAvailable);
    assert_eq!(slave.commit_log_max_offset(), 0);
    slave.shutdown();
}

fn sync_master_config(dir: &Path, flush: FlushDiskType) -> StoreConfig {
    StoreConfig {
        broker_role: BrokerRole::SyncMaster,
        in_sync_replicas: 2,
        total_replicas: 2,
        slave_timeout_ms: 300,
        ..master_config(dir, flush)
    }
}

/// SYNC_MASTER (inSyncReplicas 2): every put completes PUT_OK only once the slave holds
/// its bytes — checked in each put's own callback — under ASYNC_FLUSH and SYNC_FLUSH.
fn sync_master_acks_after_the_slave(flush: FlushDiskType) {
    let (mdir, sdir) = (temp_dir("ha-sync-master"), temp_dir("ha-sync-slave"));
    let master = MessageStore::open(sync_master_config(&mdir, flush)).unwrap();
    let addr = master.ha_listen_addr().unwrap();
    let slave = MessageStore::open(slave_config(&sdir, Some(addr))).unwrap();
    eventually("the slave's first report", Duration::from_secs(10), || {
        master.ha_status().slaves.len() == 1
    });
    let (tx, rx) = mpsc::channel();
    let n = 1000u64;
    let t = Instant::now();
    for i in 0..n {
        let (tx, slave) = (tx.clone(), slave.clone());
        master.put(
            request(i),
            Box::new(move |r| {
                let end = r.wrote_offset + i64::from(r.wrote_bytes);
                let _ = tx.send((r.status, slave.commit_log_max_offset() >= end));
            }),
        );
    }
    for _ in 0..n {
        let (status, slave_has_it) = rx.recv_timeout(Duration::from_secs(20)).unwrap();
        assert_eq!(status, PutMessageStatus::PutOk);
        assert!(
            slave_has_it,
            "a put was acknowledged before the slave held it"
        );
    }
    eprintln!(
        "{flush:?}: {n} SYNC_MASTER puts, all in flight, acknowledged in {} ms",
        t.elapsed().as_millis()
    );
    assert_eq!(
        master.metrics().put_messages,
        n,
        "puts waiting for the slave count as stored in the append metrics"
    );
    slave.shutdown();
    master.shutdown();
}

#[test]
fn sync_master_acks_after_the_slave_async_flush() {
    sync_master_acks_after_the_slave(FlushDiskType::AsyncFlush);
}

#[test]
fn sync_master_acks_after_the_slave_sync_flush() {
    sync_master_acks_after_the_slave(FlushDiskType::SyncFlush);
}

/// SYNC_MASTER with a slave that stops acknowledging: a waiting put answers
/// FLUSH_SLAVE_TIMEOUT after slaveTimeout (its bytes stay stored); once the slave is gone,
/// puts answer SLAVE_NOT_AVAILABLE at once; with no slave at all likewise.
#[test]
fn sync_master_times_out_without_acks_and_refuses_without_a_slave() {
    let dir = temp_dir("ha-sync-timeout");
    let master = MessageStore::open(sync_master_config(&dir, FlushDiskType::AsyncFlush)).unwrap();
    let addr = master.ha_listen_addr().unwrap();
    assert_eq!(
        master.put_blocking(request(0)).status,
        PutMessageStatus::SlaveNotAvailable,
        "no slave connected"
    );
    let mut fake = TcpStream::connect(addr).unwrap();
    fake.write_all(&0i64.to_be_bytes()).unwrap();
    eventually(
        "the master to see the slave",
        Duration::from_secs(10),
        || master.ha_status().slaves.len() == 1,
    );
    let t = Instant::now();
    let (tx, rx) = mpsc::channel();
    master.put(
        request(1),
        Box::new(move |r| {
            let _ = tx.send(r.status);
        }),
    );
    // The slave stays connected (and silent) until the put answered: a slave that left
    // before the put reached the append stage would make it SLAVE_NOT_AVAILABLE instead.
    let status = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    drop(fake);
    assert_eq!(status, PutMessageStatus::FlushSlaveTimeout);
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "waited for slaveTimeout"
    );
    eventually(
        "the master to drop the slave",
        Duration::from_secs(10),
        || master.ha_status().slaves.is_empty(),
    );
    assert_eq!(
        master.put_blocking(request(2)).status,
        PutMessageStatus::SlaveNotAvailable
    );
    master.shutdown();
}

/// Reads one master frame (header and body) from `s`.
fn read_frame(s: &mut TcpStream) -> (i64, Vec<u8>) {
    let mut header = [0u8; 12];
    s.read_exact(&mut header).unwrap();
    let offset = i64::from_be_bytes(header[..8].try_into().unwrap());
    let size = i32::from_be_bytes(header[8..].try_into().unwrap());
    let mut body = vec![0u8; size as usize];
    s.read_exact(&mut body).unwrap();
    (offset, body)
}

/// The master's side of the wire, byte for byte: a connection reporting 0 gets frames
/// from the start of the last segment, each a 12-byte big-endian header and at most
/// haTransferBatchSize bytes equal to the segment file's; when caught up, heartbeats
/// (body size 0) every haSendHeartbeatInterval; a slave silent for
/// haHousekeepingInterval is closed.
#[test]
fn master_frames_heartbeats_and_housekeeping_on_the_wire() {
    let dir = temp_dir("ha-wire");
    let cfg = StoreConfig {
        ha_send_heartbeat_interval_ms: 100,
        // Timed from the slave's only report, so it must outlast reading the whole
        // transfer and the first heartbeat on a loaded host.
        ha_housekeeping_interval_ms: 3_000,
        ha_transfer_batch_size_bytes: 4096,
        ..master_config(&dir, FlushDiskType::AsyncFlush)
    };
    let master = MessageStore::open(cfg).unwrap();
    let addr = master.ha_listen_addr().unwrap();
    assert!(put_range(&master, 0, 1000)
        .iter()
        .all(|r| r.status == PutMessageStatus::PutOk));
    let max = master.commit_log_max_offset();
    let last_start = max - max % SEG as i64;
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&0i64.to_be_bytes()).unwrap();
    let mut got = Vec::new();
    let mut next = last_start;
    while next < max {
        let (offset, body) = read_frame(&mut s);
        assert_eq!(
            offset, next,
            "frames are contiguous from the last segment start"
        );
        assert!(!body.is_empty() && body.len() <= 4096, "batch size bound");
        next += body.len() as i64;
        got.extend_from_slice(&body);
    }
    assert_eq!(next, max);
    assert!(got == commit_log_bytes(&dir, last_start as u64, max as u64));
    let t = Instant::now();
    let (offset, body) = read_frame(&mut s);
    assert_eq!((offset, body.len()), (max, 0), "heartbeat when idle");
    assert!(t.elapsed() < Duration::from_secs(2));
    // Silent from now on: the master closes after the housekeeping interval.
    assert!(closed_within(&mut s, Duration::from_secs(10)));
    master.shutdown();
}

/// With haFlowControlEnable, a slave far behind receives at most
/// maxHaTransferByteInSecond per second.
#[test]
fn flow_control_bounds_the_transfer_rate() {
    let dir = temp_dir("ha-flow");
    let cfg = StoreConfig {
        ha_flow_control_enable: true,
        max_ha_transfer_bytes_per_second: 40 * 1024,
        ..master_config(&dir, FlushDiskType::AsyncFlush)
    };
    let master = MessageStore::open(cfg).unwrap();
    let addr = master.ha_listen_addr().unwrap();
    assert!(put_range(&master, 0, 400)
        .iter()
        .all(|r| r.status == PutMessageStatus::PutOk));
    let max = master.commit_log_max_offset();
    assert!(max > 90 * 1024);
    let from = max - 90 * 1024;
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let t = Instant::now();
    s.write_all(&from.to_be_bytes()).unwrap();
    let mut next = from;
    while next < max {
        let (offset, body) = read_frame(&mut s);
        assert_eq!(offset, next);
        next += body.len() as i64;
    }
    // 90 KiB at 40 KiB per second: the third second's window carries the last bytes.
    assert!(
        t.elapsed() >= Duration::from_millis(1900),
        "too fast: {:?}",
        t.elapsed()
    );
    master.shutdown();
}
