//! Helper process for the store's crash and disk-full tests (`tests/store.rs`).
//!
//! `ringmq-store-crash-writer <dir> <mode> <seed> [fsize]` opens a store (mode `mmap` or
//! `direct` under SYNC_FLUSH, `mmap-async` or `direct-async` under ASYNC_FLUSH) with small
//! segments and puts messages from 4 producer threads forever, printing one line
//! per acknowledged put (`ACK <key> <queueId> <queueOffset> <physOffset> <size>`) after the
//! store confirmed it; the test kills it with SIGKILL at a random point. With `fsize`, it
//! instead lowers RLIMIT_FSIZE below the segment size after a while, expects the store to
//! refuse puts (CREATE_MAPPED_FILE_FAILED when the limit stops a new segment, UNKNOWN_ERROR
//! when it stops the append's pwrite) without corrupting anything, lifts the limit,
//! expects puts to work again, prints `FSIZE-OK` and shuts down cleanly.

use bytes::BytesMut;
use ringmq_store::util::loopback_record;
use ringmq_store::{
    FlushDiskType, MessageStore, PutMessageStatus, PutRequest, StoreConfig, WriteMode,
};
use ringmq_sync::LockExt;
use std::io::Write;
use std::sync::mpsc;
use std::sync::Arc;

/// Segment size the crash tests use (small, so runs cross many roll-overs).
pub const SEGMENT_BYTES: u64 = 64 * 1024;

fn config(dir: &str, mode: &str) -> StoreConfig {
    StoreConfig {
        store_path_root_dir: dir.into(),
        mapped_file_size_commit_log: SEGMENT_BYTES,
        mapped_file_size_consume_queue_units: 64,
        flush_disk_type: if mode.ends_with("-async") {
            FlushDiskType::AsyncFlush
        } else {
            FlushDiskType::SyncFlush
        },
        write_mode: if mode.starts_with("direct") {
            WriteMode::Direct
        } else {
            WriteMode::Mmap
        },
        max_hash_slot_num: 64,
        max_index_num: 256,
        direct_write_ring_size_bytes: 256 * 1024,
        ..StoreConfig::default()
    }
}

fn encode(topic: &str, queue_id: i32, key: &str, body: &[u8]) -> BytesMut {
    let props = format!("KEYS\u{1}{key}\u{2}UNIQ_KEY\u{1}U{key}\u{2}WAIT\u{1}true\u{2}");
    loopback_record(topic, queue_id, body, props.as_bytes())
}

fn body_for(key: &str, len: usize) -> Vec<u8> {
    key.bytes().cycle().take(len.max(1)).collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!(
            "usage: {} <dir> <mmap|direct|mmap-async|direct-async> <seed> [fsize]",
            args[0]
        );
        std::process::exit(2);
    }
    let (dir, mode, seed) = (&args[1], &args[2], args[3].parse::<u64>().unwrap_or(1));
    let fsize = args.get(4).is_some_and(|a| a == "fsize");
    let store = match MessageStore::open(config(dir, mode)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("open failed: {e}");
            std::process::exit(3);
        }
    };
    if fsize {
        run_fsize(&store);
        return;
    }
    let (line_tx, line_rx) = mpsc::sync_channel::<String>(65536);
    let printer = std::thread::spawn(move || {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        while let Ok(l) = line_rx.recv() {
            if out
                .write_all(l.as_bytes())
                .and_then(|_| out.flush())
                .is_err()
            {
                break;
            }
        }
    });
    let store = Arc::new(store);
    let mut handles = Vec::new();
    for t in 0..4u64 {
        let store = Arc::clone(&store);
        let line_tx = line_tx.clone();
        handles.push(std::thread::spawn(move || {
            let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (t + 1);
            for seq in 0.. {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let key = format!("s{seed}-t{t}-{seq}");
                let qid = (t % 2) as i32;
                let body = body_for(&key, (x % 3000) as usize + 1);
                let rec = encode("CrashTopic", qid, &key, &body);
                let (tx, rx) = mpsc::sync_channel(1);
                store.put(
                    PutRequest::new("CrashTopic", qid, 0, rec, 1),
                    Box::new(move |r| {
                        let _ = tx.send(r);
                    }),
                );
                let Ok(r) = rx.recv() else { return };
                if r.status == PutMessageStatus::PutOk {
                    let line = format!(
                        "ACK {key} {qid} {} {} {}\n",
                        r.queue_offset, r.wrote_offset, r.wrote_bytes
                    );
                    if line_tx.send(line).is_err() {
                        return;
                    }
                }
            }
        }));
    }
    drop(line_tx);
    for h in handles {
        let _ = h.join();
    }
    let _ = printer.join();
}

fn set_fsize_limit(bytes: u64) {
    let lim = libc::rlimit {
        rlim_cur: bytes as libc::rlim_t,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: plain syscalls with a valid struct; ignoring SIGXFSZ turns the signal into
    // an EFBIG error the store reports.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
    }
}

fn run_fsize(store: &MessageStore) {
    let put = |q: i32, key: &str| {
        let rec = encode("FsizeTopic", q, key, &body_for(key, 1000));
        store.put_blocking(PutRequest::new("FsizeTopic", q, 0, rec, 1))
    };
    for i in 0..20 {
        let key = format!("f-0-{i}");
        assert_eq!(put(0, &key).status, PutMessageStatus::PutOk);
        println!("ACK {key} 0");
    }
    set_fsize_limit(SEGMENT_BYTES / 2);
    // Four producers on four queues, so refused writes hit batches of several puts: every
    // put of a failed batch must fail and leave its queue offset unused.
    let first_failure = std::sync::Mutex::new(None);
    std::thread::scope(|sc| {
        for q in 0..4i32 {
            let first_failure = &first_failure;
            sc.spawn(move || {
                let start = if q == 0 { 20 } else { 0 };
                for i in start..start + 1000 {
                    let key = format!("f-{q}-{i}");
                    let r = put(q, &key);
                    if r.status == PutMessageStatus::PutOk {
                        println!("ACK {key} {q}");
                    } else {
                        first_failure.lock_unpoisoned().get_or_insert(r.status);
                        return;
                    }
                }
            });
        }
    });
    let failed = *first_failure.lock_unpoisoned();
    println!("FAILED {:?}", failed);
    set_fsize_limit(u64::MAX);
    std::thread::scope(|sc| {
        for q in 0..4i32 {
            sc.spawn(move || {
                for i in 0..25 {
                    let key = format!("g-{q}-{i}");
                    let r = put(q, &key);
                    if r.status != PutMessageStatus::PutOk {
                        println!("RETRY-FAILED {:?}", r.status);
                        std::process::exit(4);
                    }
                    println!("ACK {key} {q}");
                }
            });
        }
    });
    store.shutdown();
    println!("FSIZE-OK");
}
