//! Disk use of `ringmq up` (issue 14 item 12): a fresh `up` with one message stored
//! (ConsumeQueue and index files created) takes well under the 2 GiB a production broker
//! allocates at start, as README's "Disk use" section says.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use ringmq_client::{block_on, Message, Producer, ProducerConfig, SendStatus};
use ringmq_tests::{unique, wait_until, TempDir};

use super::{free_broker_port, BOOT, SHORT};

/// What README states `up` takes at start: two 64 MiB CommitLog segments plus small
/// ConsumeQueue, index and metadata files.
const UP_DISK_BOUND_BYTES: u64 = 160 * 1024 * 1024;

/// A child killed (by pid, through its handle) if the test ends early.
struct UpProcess(Child);

impl Drop for UpProcess {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Bytes of disk allocated under `dir` (blocks, so fallocated space counts in full).
fn allocated_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
            } else {
                total += m.blocks() * 512;
            }
        }
    }
    total
}

fn segment_count(commit_log: &Path) -> usize {
    std::fs::read_dir(commit_log)
        .map(|rd| rd.flatten().count())
        .unwrap_or(0)
}

/// `ringmq up` starts, stores a keyed message, prepares its next CommitLog segment and
/// stays under [`UP_DISK_BOUND_BYTES`] of allocated disk.
#[test]
fn up_takes_modest_disk_at_start() {
    let dir = TempDir::new("up-disk");
    let data = dir.path().join("data");
    let broker_port = free_broker_port();
    let namesrv_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free namesrv port")
        .port();
    let log = std::fs::File::create(dir.path().join("up.log")).expect("log file");
    let mut child = Command::new(ringmq_tests::ringmq_bin())
        .args(["up", "--data", data.to_str().unwrap()])
        .args(["--namesrv-port", &namesrv_port.to_string()])
        .args(["--broker-port", &broker_port.to_string()])
        .args(["--grpc-port", "0"])
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("spawn ringmq up");
    let stdout = child.stdout.take().expect("piped stdout");
    let up = UpProcess(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("ringmq is up") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(BOOT)
        .expect("`ringmq up` did not report ready");

    let producer = block_on(async move {
        Producer::new(ProducerConfig {
            group: unique("PG"),
            namesrv_addrs: vec![format!("127.0.0.1:{namesrv_port}")],
            route_ttl_ms: 1_000,
            ..Default::default()
        })
    });
    let topic = unique("UpDisk");
    let message = Message::new(&topic, "hello")
        .with_keys(&["order-1"])
        .expect("keys");
    wait_until(
        "a send to a new topic",
        Duration::from_secs(30),
        SHORT,
        || match block_on(producer.send(&message)) {
            Ok(r) if r.status == SendStatus::SendOk => Ok(()),
            Ok(r) => Err(format!("{:?}", r.status)),
            Err(e) => Err(e.to_string()),
        },
    );
    let store = data.join("store");
    wait_until(
        "the prepared next segment",
        Duration::from_secs(10),
        SHORT,
        || {
            let n = segment_count(&store.join("commitlog"));
            let has_index =
                std::fs::read_dir(store.join("index")).is_ok_and(|mut rd| rd.next().is_some());
            if n >= 2 && has_index {
                Ok(())
            } else {
                Err(format!("{n} segments, index file: {has_index}"))
            }
        },
    );
    let used = allocated_bytes(&data);
    assert!(
        used <= UP_DISK_BOUND_BYTES,
        "`ringmq up` takes {} MiB at start, more than {} MiB",
        used >> 20,
        UP_DISK_BOUND_BYTES >> 20
    );
    drop(producer);
    drop(up);
}
