"""gRPC against Remoting on one broker, same run (benches/README.md, "gRPC against Remoting").

Starts a name server and one broker (`ringmq.grpc.port` on a free port) on loopback with a
fresh store, then drives the same loads through both front doors with `ringmq bench`,
alternating the protocols in every repeat so a drift of the machine hits both alike:

* send: closed-loop 1 KiB sends, `-w` in flight (Remoting SEND_MESSAGE_V2 against gRPC
  SendMessage);
* drain: N pre-produced messages consumed from the start and acked one by one, and again
  with one ack per batch (Remoting POP_MESSAGE + ACK_MESSAGE / BATCH_ACK_MESSAGE against
  gRPC ReceiveMessage + AckMessage);
* e2e: a fixed send rate with a consumer running, born → consumed latency (Remoting send +
  POP against gRPC send + receive).

For each cell it reports msg/s, latency p50/p99 and the broker's CPU per message (utime +
stime of the broker process around the run), and the ratio gRPC / Remoting of each, from the
median of the repeats. Standard library only; not part of any test suite.

Usage: python3 benches/grpc/run.py [--quick] [--repeats N] [--out DIR]
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "modes"))
import report  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
QUEUES = 4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout_s, what):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("%s did not open port %d within %d s" % (what, port, timeout_s))


def broker_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        return report.parse_proc_stat(f.read())[1]


class Cluster:
    """A name server and one broker on a fresh store under `work`."""

    def __init__(self, binary, work):
        self.binary, self.work = binary, work
        self.ns_port, self.port, self.grpc_port = free_port(), free_port(), free_port()
        self.procs = []
        self.namesrv = "127.0.0.1:%d" % self.ns_port
        self.grpc = "127.0.0.1:%d" % self.grpc_port

    def start(self):
        ns_conf = os.path.join(self.work, "namesrv.conf")
        with open(ns_conf, "w") as f:
            f.write("listenPort=%d\nbindAddress=127.0.0.1\nkvConfigPath=%s/kv.json\n"
                    "configStorePath=%s/namesrv.properties\n"
                    % (self.ns_port, self.work, self.work))
        conf = os.path.join(self.work, "broker.conf")
        with open(conf, "w") as f:
            f.write("\n".join([
                "brokerClusterName=GrpcBench",
                "brokerName=grpc-bench",
                "brokerIP1=127.0.0.1",
                "bindAddress=127.0.0.1",
                "listenPort=%d" % self.port,
                "haListenPort=%d" % free_port(),
                "namesrvAddr=%s" % self.namesrv,
                "storePathRootDir=%s/store" % self.work,
                "autoCreateTopicEnable=true",
                "ringmq.grpc.port=%d" % self.grpc_port,
            ]) + "\n")
        self.procs.append(self._spawn(["namesrv", "-c", ns_conf], "namesrv.log"))
        wait_port(self.ns_port, 30, "the name server")
        self.broker = self._spawn(["broker", "-c", conf], "broker.log")
        self.procs.append(self.broker)
        wait_port(self.port, 60, "the broker")
        wait_port(self.grpc_port, 30, "the broker's gRPC endpoint")

    def _spawn(self, args, log):
        out = open(os.path.join(self.work, log), "w")
        return subprocess.Popen([self.binary] + args, stdout=out, stderr=subprocess.STDOUT)

    def stop(self):
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()

    def create_topic(self, topic):
        """The topic on the broker and routed by the name server (gRPC does not create
        topics on first send, as upstream's proxy does not)."""
        cmd = [self.binary, "admin", "updateTopic", "-n", self.namesrv, "-c", "GrpcBench",
               "-t", topic, "-r", str(QUEUES), "-w", str(QUEUES)]
        deadline = time.time() + 30
        while True:
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode == 0 and "success" in r.stdout:
                return
            if time.time() > deadline:
                raise SystemExit("cannot create topic %s: %s%s" % (topic, r.stdout, r.stderr))
            time.sleep(0.5)

    def bench(self, args, timeout_s):
        """One `ringmq bench` run; (its summary, broker CPU µs per message)."""
        cmd = [self.binary, "bench"] + args + ["-n", self.namesrv, "--quiet", "--json",
                                               "--no-broker-profile"]
        before = broker_ticks(self.broker.pid)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        after = broker_ticks(self.broker.pid)
        if r.returncode != 0:
            raise SystemExit("bench %s failed (%d):\n%s%s"
                             % (" ".join(args), r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
        summary = report.parse_bench_json(r.stdout)
        summary["broker_us_per_msg"] = report.cpu_us_per_msg(before, after, CLK_TCK,
                                                             summary["messages"])
        return summary


def cells(cluster, opts, run_no):
    """The cells of one repeat: (name, protocol, bench args, timeout), in run order."""
    secs = str(opts.measure)
    grpc = ["--grpc", cluster.grpc]
    out = []
    send = ["producer", "-s", "1024", "-w", str(opts.concurrency), "-c", "2", "-d", secs]
    for proto, extra in (("remoting", []), ("grpc", grpc)):
        out.append(("send", proto, send + ["-t", "GrpcBenchSend"] + extra, opts.measure + 60))
    drain = ["consumer", "-t", "GrpcBenchDrain", "-m", str(opts.drain - 64), "-d", "120"]
    for ack, flag in (("ack each", []), ("batch ack", ["--batch-ack"])):
        name = "drain, %s" % ack
        out.append((name, "remoting", drain + ["--pop", "-g", "CG_pop_%d_%s" % (run_no, ack[0])]
                    + flag, 180))
        out.append((name, "grpc", drain + grpc + ["-g", "CG_grpc_%d_%s" % (run_no, ack[0])]
                    + flag, 180))
    e2e = ["e2e", "-s", "1024", "-r", str(opts.rate), "-d", secs]
    for proto, extra in (("remoting", ["--pop"]), ("grpc", grpc)):
        out.append(("e2e %d/s" % opts.rate, proto,
                    e2e + ["-t", "GrpcBenchE2e%s%d" % (proto, run_no),
                           "-g", "CG_e2e_%s_%d" % (proto, run_no)] + extra,
                    opts.measure + 60))
    return out


def run(opts):
    binary = opts.binary or os.path.join(ROOT, "target", "release", "ringmq")
    if not os.access(binary, os.X_OK):
        raise SystemExit("build first: cargo build --release -p ringmq-cli (or --binary)")
    work = tempfile.mkdtemp(prefix="ringmq-grpc-bench.")
    cluster = Cluster(binary, work)
    results = {}
    try:
        cluster.start()
        topics = ["GrpcBenchSend", "GrpcBenchDrain"]
        topics += ["GrpcBenchE2e%s%d" % (p, n) for p in ("remoting", "grpc")
                   for n in range(opts.repeats)]
        for t in topics:
            cluster.create_topic(t)
        # Every drain group starts from the queues' start: produce once, drain many.
        cluster.bench(["producer", "-t", "GrpcBenchDrain", "-m", str(opts.drain), "-s", "1024",
                       "-w", "128"], 300)
        for n in range(opts.repeats):
            for name, proto, args, timeout_s in cells(cluster, opts, n):
                s = cluster.bench(args, timeout_s)
                results.setdefault(name, {}).setdefault(proto, []).append(s)
                print("%-22s %-8s %9.0f msg/s  p50 %8.3f  p99 %8.3f ms  broker %s µs/msg%s"
                      % (name, proto, s["tps"], s["p50_ms"], s["p99_ms"],
                         fmt(s["broker_us_per_msg"], 1),
                         "  failures %d" % s["failures"] if s["failures"] else ""),
                      flush=True)
    finally:
        cluster.stop()
        if opts.keep:
            print("work directory kept: %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return results


def fmt(v, digits=2):
    return "-" if v is None else "%.*f" % (digits, v)


def table(results):
    """The Markdown table: per cell the medians of each protocol and gRPC / Remoting."""
    keys = (("tps", "msg/s", 0), ("p50_ms", "p50 ms", 3), ("p99_ms", "p99 ms", 3),
            ("broker_us_per_msg", "broker µs/msg", 1))
    head = "| cell | " + " | ".join("%s Remoting | gRPC | ratio" % k[1] for k in keys) + " |"
    lines = [head, "|" + "---|" * (1 + 3 * len(keys))]
    for name, by_proto in results.items():
        row = [name]
        for key, _, digits in keys:
            if name.startswith("drain") and key.endswith("_ms"):
                # A drain's latencies only say how old the pre-produced messages were.
                row += ["-", "-", "-"]
                continue
            rem = report.median([s[key] for s in by_proto.get("remoting", [])])
            grpc = report.median([s[key] for s in by_proto.get("grpc", [])])
            row += [fmt(rem, digits), fmt(grpc, digits), fmt(report.ratio(grpc, rem))]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", help="ringmq binary (default target/release/ringmq)")
    p.add_argument("--quick", action="store_true", help="1 repeat, 5 s cells, 50k drain")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--measure", type=int, default=10, help="seconds per send/e2e cell")
    p.add_argument("--drain", type=int, default=200_000, help="messages per drain cell")
    p.add_argument("--rate", type=int, default=5_000, help="e2e send rate, msg/s")
    p.add_argument("-w", "--concurrency", type=int, default=64, help="sends in flight")
    p.add_argument("--out", help="write results.json and results.md here")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    p.add_argument("--render", metavar="RESULTS_JSON",
                   help="print the table of an earlier run's results.json; runs nothing")
    opts = p.parse_args(argv)
    if opts.render:
        with open(opts.render) as f:
            print(table(json.load(f)))
        return
    if opts.quick:
        opts.repeats, opts.measure, opts.drain = 1, 5, 50_000
    results = run(opts)
    md = table(results)
    print()
    print(md)
    if opts.out:
        os.makedirs(opts.out, exist_ok=True)
        with open(os.path.join(opts.out, "results.json"), "w") as f:
            json.dump(results, f, indent=1)
        with open(os.path.join(opts.out, "results.md"), "w") as f:
            f.write(md + "\n")


if __name__ == "__main__":
    main()
