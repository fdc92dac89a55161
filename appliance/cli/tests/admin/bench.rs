//! `ringmq bench` from the built binary: the load generator lives in the cli crate (the
//! client library carries no command-line parser) and runs producer, consumer and e2e
//! against a live namesrv and broker, with the exit codes scripts rely on.

use super::*;

/// The summary JSON object `--json` prints on the last stdout line.
fn summary(out: &Output) -> Value {
    let last = out.stdout.lines().last().unwrap_or_default();
    json::parse_str(last)
        .unwrap_or_else(|e| panic!("summary line is not JSON ({e}): {}", out.describe()))
}

fn number(summary: &Value, key: &str) -> u64 {
    summary
        .get(key)
        .and_then(Value::as_i64)
        .and_then(|n| u64::try_from(n).ok())
        .unwrap_or_else(|| panic!("summary has no number {key:?}: {summary:?}"))
}

fn bench(cluster: &Cluster, mode: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "bench",
        mode,
        "-n",
        &cluster.ns_addr,
        "-t",
        "BenchCli",
        "-s",
        "100",
        "-w",
        "4",
        "--duration",
        "1",
        "--json",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    run_program(Path::new(BIN), &args, &[], Some(&cluster.dir))
}

/// Producer, consumer (from the start, so it reads what the producer stored) and e2e each
/// run for a second against the cluster and report messages and no failures.
#[test]
fn bench_modes_run_against_a_live_cluster() {
    let cluster = Cluster::start();
    cluster.wait_registered();
    let out = bench(&cluster, "producer", &[]);
    assert_eq!(out.code, 0, "{}", out.describe());
    let produced = summary(&out);
    assert!(number(&produced, "messages") > 0, "{produced:?}");
    assert_eq!(number(&produced, "failures"), 0, "{produced:?}");
    assert_eq!(
        number(&produced, "bytes"),
        number(&produced, "messages") * 100
    );

    // `--warmup 1`: the first interval is printed, marked, and left out of the summary,
    // which holds exactly the messages of the lines after it.
    let mut args = vec![
        "bench",
        "producer",
        "-n",
        &cluster.ns_addr,
        "-t",
        "BenchCli",
    ];
    args.extend_from_slice(&["-s", "100", "-w", "4", "-d", "1", "--warmup", "1", "--json"]);
    let out = run_program(Path::new(BIN), &args, &[], Some(&cluster.dir));
    assert_eq!(out.code, 0, "{}", out.describe());
    let lines: Vec<&str> = out.stdout.lines().filter(|l| !l.starts_with('#')).collect();
    let interval_messages = |warming: bool| -> u64 {
        lines
            .iter()
            .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
            .filter(|l| l.ends_with("warm-up") == warming)
            .map(|l| l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap())
            .sum()
    };
    let warmed = out
        .stdout
        .lines()
        .filter(|l| l.ends_with("warm-up"))
        .count();
    assert_eq!(warmed, 1, "one warm-up interval: {}", out.describe());
    assert!(interval_messages(true) > 0, "{}", out.describe());
    let measured = summary(&out);
    assert_eq!(
        number(&measured, "messages"),
        interval_messages(false),
        "{}",
        out.describe()
    );

    let out = bench(&cluster, "consumer", &["--from-start", "-g", "BenchCliG"]);
    assert_eq!(out.code, 0, "{}", out.describe());
    assert!(number(&summary(&out), "messages") > 0, "{}", out.describe());

    let out = bench(&cluster, "e2e", &["-g", "BenchCliE2e"]);
    assert_eq!(out.code, 0, "{}", out.describe());
    let e2e = summary(&out);
    assert_eq!(number(&e2e, "failures"), 0, "{e2e:?}");
}

/// `--grpc`: the same loads over the 5.x protocol. A producer's SendMessage calls, then a
/// consumer group receiving and acking what was sent (one AckMessage per message, then one
/// per receive), then e2e; every run counts messages and no failure.
#[test]
fn bench_over_grpc_sends_receives_and_acks() {
    let cluster = Cluster::start();
    cluster.wait_registered();
    let created = cluster.admin(&[
        "updateTopic",
        "-c",
        CLUSTER,
        "-t",
        "BenchCli",
        "-r",
        "4",
        "-w",
        "4",
    ]);
    assert_eq!(created.code, 0, "{}", created.describe());
    let run = |mode: &str, extra: &[&str]| {
        let mut args = vec!["--grpc", cluster.grpc_addr.as_str()];
        args.extend_from_slice(extra);
        let out = bench(&cluster, mode, &args);
        assert_eq!(out.code, 0, "{}", out.describe());
        let s = summary(&out);
        assert!(number(&s, "messages") > 0, "{}", out.describe());
        assert_eq!(number(&s, "failures"), 0, "{}", out.describe());
        s
    };
    let produced = run("producer", &[]);
    assert_eq!(
        number(&produced, "bytes"),
        number(&produced, "messages") * 100
    );
    let half = (number(&produced, "messages") / 2).max(1).to_string();
    run("consumer", &["-g", "BenchGrpcG", "-m", &half]);
    run(
        "consumer",
        &["-g", "BenchGrpcG", "-m", &half, "--batch-ack"],
    );
    run("e2e", &["-g", "BenchGrpcE2e"]);

    // Flags gRPC cannot honour are refused up front (exit 1, the reason on stderr).
    let oneway = bench(
        &cluster,
        "producer",
        &["--grpc", &cluster.grpc_addr, "--send-mode", "oneway"],
    );
    assert_eq!(oneway.code, 1, "{}", oneway.describe());
    assert!(oneway.stderr.contains("--grpc"), "{}", oneway.describe());
}

/// `--help` exits 0, a bad mode exits 2 (clap's usage error), and an unreachable name
/// server fails with exit 1 and names the address instead of hanging.
#[test]
fn bench_exit_codes() {
    let run = |args: &[&str]| run_program(Path::new(BIN), args, &[], None);
    let help = run(&["bench", "--help"]);
    assert_eq!(help.code, 0, "{}", help.describe());
    assert!(
        help.stdout.contains("load generator"),
        "{}",
        help.describe()
    );

    let bad = run(&["bench", "sideways"]);
    assert_eq!(bad.code, 2, "{}", bad.describe());

    let dead = format!("127.0.0.1:{}", closed_port());
    let out = run(&[
        "bench",
        "producer",
        "-n",
        &dead,
        "--duration",
        "1",
        "--quiet",
    ]);
    assert_eq!(out.code, 1, "{}", out.describe());
    assert!(out.stderr.contains(&dead), "{}", out.describe());
}
