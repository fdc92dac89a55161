//! The core map a broker prints at start is the placement its threads really have: for
//! every thread the map names (network cores, append, flush and its I/O worker, reput, HA),
//! `Cpus_allowed_list` in `/proc/<pid>/task/<tid>/status` is the printed core, or the
//! process's whole CPU set where the map says `unpinned`. Checked for the host's default
//! map, for a stage pinned by its key, and for a plan made for 16 cores
//! (`ringmq.cores.available=16`), whose printed plan is the 16-core default while only
//! cores that exist here are pinned.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ringmq_tests::{base_broker_conf, free_broker_port, unique, ServerProcess, TempDir};

const BOOT: Duration = Duration::from_secs(30);
/// Stage threads start while the store opens; this bounds the wait for all of them.
const THREADS_BOUND: Duration = Duration::from_secs(10);

/// A core list (`0-1`, `0,2-3`) as a sorted list of cores.
fn cores(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((lo, hi)) => out.extend(lo.parse::<usize>().unwrap()..=hi.parse().unwrap()),
            None => out.push(part.parse().unwrap()),
        }
    }
    out.sort_unstable();
    out
}

fn status_field(status: &str, field: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .unwrap_or_else(|| panic!("no {field} in {status}"))
        .trim()
        .to_string()
}

/// Thread name → the CPU set of every thread of that name in process `pid`.
fn thread_affinities(pid: u32) -> BTreeMap<String, Vec<Vec<usize>>> {
    let mut out: BTreeMap<String, Vec<Vec<usize>>> = BTreeMap::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("read task dir");
    for task in tasks.flatten() {
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue; // the thread ended meanwhile
        };
        let name = status_field(&status, "Name:");
        let set = cores(&status_field(&status, "Cpus_allowed_list:"));
        out.entry(name).or_default().push(set);
    }
    out
}

/// Nice values of the threads named `name` in process `pid` (field 19 of `stat`).
fn thread_nice(pid: u32, name: &str) -> Vec<i32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("read task dir");
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ...`: fields after the comm start at field 3.
        let Some((comm, rest)) = stat.split_once(" (").and_then(|(_, r)| r.rsplit_once(") "))
        else {
            continue;
        };
        if comm == name {
            if let Some(nice) = rest.split_whitespace().nth(16).and_then(|v| v.parse().ok()) {
                out.push(nice);
            }
        }
    }
    out
}

/// Whether this test runs as root (so the broker may lower a thread's nice value).
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| status_field(&s, "Uid:").split_whitespace().nth(1) == Some("0"))
        .unwrap_or(false)
}

/// `key=value` pairs of the map line `prefix ...` in the broker's log.
fn printed_map(log: &str, prefix: &str) -> BTreeMap<String, String> {
    let line = log
        .lines()
        .filter(|l| prefix.starts_with("planned") || !l.contains("planned"))
        .find_map(|l| l.find(prefix).map(|i| &l[i..]))
        .unwrap_or_else(|| panic!("no `{prefix}` line in the log:\n{log}"));
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_end_matches('"').to_string()))
        .collect()
}

/// Starts a broker with `extra` config lines, waits for its stage threads, and checks each
/// named thread's affinity against the printed map. Returns the broker's log.
fn check_broker(extra: &str) -> String {
    let dir = TempDir::new("core-map");
    let store = dir.path().join("store");
    let conf = dir.path().join("broker.conf");
    // A port whose haListenPort (+1) is free: with listenPort=0 the port after the
    // ephemeral one may be any other process's, and the HA stage would not start.
    let port = free_broker_port();
    let text = format!(
        "{}{extra}\n",
        base_broker_conf(&unique("cmbroker"), &unique("cmcluster"), "", &store)
            .replace("listenPort=0\n", &format!("listenPort={port}\n"))
    );
    std::fs::write(&conf, text).expect("write broker.conf");
    let broker = ServerProcess::spawn(
        &["broker", "-c", conf.to_str().unwrap()],
        &dir.path().join("broker.log"),
        BOOT,
    );
    let pid = broker.pid();
    let proc_status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let whole = cores(&status_field(&proc_status, "Cpus_allowed_list:"));
    // A test that places the HA stage by its key also requires the thread to exist.
    let want_ha = extra.contains("ringmq.cores.ha");
    let mut stages = vec![
        "ringmq-append",
        "ringmq-flush",
        "ringmq-flush-io",
        "ringmq-reput",
    ];
    if want_ha {
        stages.push("ringmq-ha");
    }
    let log = std::fs::read_to_string(&broker.log).expect("broker log");
    let map = printed_map(&log, "cores: available=");
    let expect = |placement: &str| {
        if placement == "unpinned" {
            whole.clone()
        } else {
            cores(placement)
        }
    };
    let key_of = |stage: &str| match stage {
        "ringmq-append" => "append",
        "ringmq-flush" | "ringmq-flush-io" => "flush",
        "ringmq-reput" => "reput",
        _ => "ha",
    };
    // Each stage thread pins itself once it runs: wait until every one exists and sits
    // where the map says (or the bound passes and the asserts below report it).
    let deadline = Instant::now() + THREADS_BOUND;
    let threads = loop {
        let t = thread_affinities(pid);
        let settled = stages
            .iter()
            .all(|s| t.get(*s) == Some(&vec![expect(&map[key_of(s)])]));
        if settled || Instant::now() > deadline {
            break t;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    for (thread, key) in [
        ("ringmq-append", "append"),
        ("ringmq-flush", "flush"),
        ("ringmq-flush-io", "flush"),
        ("ringmq-reput", "reput"),
    ] {
        let sets = threads
            .get(thread)
            .unwrap_or_else(|| panic!("no {thread} thread: {threads:?}"));
        assert_eq!(sets, &vec![expect(&map[key])], "{thread} vs map {map:?}");
    }
    // The HA stage runs while the master serves slaves on haListenPort (it is left out,
    // with a log line, when that port cannot be bound).
    match threads.get("ringmq-ha") {
        Some(sets) => assert_eq!(sets, &vec![expect(&map["ha"])], "ringmq-ha vs map {map:?}"),
        None => assert!(!want_ha, "no ringmq-ha thread: {threads:?}"),
    }
    if want_ha {
        // ringmq.haThreadNice (default -10): applied where the process may lower it.
        let nice = thread_nice(pid, "ringmq-ha");
        let allowed: &[i32] = if running_as_root() { &[-10] } else { &[-10, 0] };
        assert!(
            nice.len() == 1 && allowed.contains(&nice[0]),
            "ringmq-ha nice {nice:?}, want one of {allowed:?}"
        );
    }
    let network = &map["network"];
    let net_threads: Vec<_> = threads
        .iter()
        .filter(|(name, _)| name.starts_with("broker-net-"))
        .collect();
    assert!(
        !net_threads.is_empty(),
        "no network core threads: {threads:?}"
    );
    for (name, sets) in net_threads {
        let want = if network == "unpinned" {
            whole.clone()
        } else {
            let index: usize = name["broker-net-".len()..].parse().unwrap();
            vec![cores(network)[index]]
        };
        assert_eq!(sets, &vec![want], "{name} vs map {map:?}");
    }
    log
}

#[test]
fn default_core_map_is_the_threads_real_placement() {
    let real = std::thread::available_parallelism().map_or(1, |n| n.get());
    let log = check_broker("");
    let map = printed_map(&log, "cores: available=");
    if real <= 2 {
        // The small-host default (README, "Core map"): nothing pinned, and said so.
        for key in ["network", "append", "flush", "reput", "ha"] {
            assert_eq!(map[key], "unpinned", "{key} in {map:?}");
        }
    }
}

#[test]
fn a_stage_pinned_by_its_key_runs_on_that_core() {
    let log = check_broker("ringmq.cores.append=0");
    let map = printed_map(&log, "cores: available=");
    assert_eq!(map["append"], "0", "{map:?}");
}

#[test]
fn the_ha_stage_runs_on_the_core_its_key_names() {
    let log = check_broker("ringmq.cores.ha=0");
    let map = printed_map(&log, "cores: available=");
    assert_eq!(map["ha"], "0", "{map:?}");
}

#[test]
fn a_sixteen_core_plan_is_printed_and_only_real_cores_are_pinned() {
    let log = check_broker("ringmq.cores.available=16");
    let plan = printed_map(&log, "planned cores: available=");
    let want = [
        ("available", "16"),
        ("network", "0-11"),
        ("append", "15"),
        ("flush", "14"),
        ("reput", "13"),
        ("ha", "12"),
    ];
    for (key, value) in want {
        assert_eq!(plan[key], value, "{key} in the plan {plan:?}");
    }
}
