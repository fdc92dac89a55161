#!/usr/bin/env python3
"""ringmq mode-matrix benchmark and broker comparison (Python 3 stdlib only).

    python3 benches/modes/run.py [--quick] [--out benches/results/<timestamp>]
    python3 benches/modes/run.py --target HOST:PORT [--pairs N]     # vs another broker
    python3 benches/modes/run.py --baseline OLD_BINARY [--pairs N]   # before/after a change
    python3 benches/modes/run.py --dry-run                           # plan only
    python3 benches/modes/run.py --render benches/results/X/results.json

Owns the orchestration: for every cell of SYNC_FLUSH/ASYNC_FLUSH x mmap/direct (plus
SYNC_MASTER/ASYNC_MASTER with a slave once the broker listens on haListenPort) it starts a
fresh namesrv + broker of its own (free loopback ports, store in a temp dir under the
repo's target/ -- the same disk as the repo), drives the same closed-loop load with
`ringmq bench producer --json` (warm-up run, then the measured run), and samples
/proc/<broker>/stat and /proc/<broker>/task/*/stat around the measured run for broker CPU
per message and the busiest threads. The raw disk is measured in the same run
(disk.py); parsing, ratios and rendering live in report.py; the Remoting calls the
harness makes itself (readiness, runtime info) in remoting.py.

Everything it starts it stops (SIGTERM, then SIGKILL by pid after a timeout); every wait is
bounded; the whole run is held to a time budget (--budget-secs), skipping cells that would
not fit rather than overrunning.
"""

import argparse
import datetime
import json
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import disk  # noqa: E402
import remoting  # noqa: E402
import report  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
DEFAULT_BINARY = os.path.join(REPO, "target", "release", "ringmq")
TMP_BASE = os.path.join(REPO, "target", "modes-bench")
TOPIC = "ModesBench"
CLK_TCK = os.sysconf("SC_CLK_TCK")
O_DIRECT_FLAG = 0o40000  # x86-64/arm64 value of O_DIRECT in /proc/<pid>/fdinfo flags
# Above this used share of the store's file system the harness warns (ringmq, like
# RocketMQ, starts refusing writes around 85-90 %).
DISK_USED_WARN = 0.85
README_BEGIN = "<!-- modes:latest:begin -->"
README_END = "<!-- modes:latest:end -->"


def log(msg):
    print("[modes %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


# ---------------------------------------------------------------- plan

def matrix_cells():
    """The base matrix: flush type x write mode, all ASYNC_MASTER without a slave."""
    cells = []
    for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        for wm in ("mmap", "direct"):
            cells.append({"name": "%s/%s" % (flush, wm), "flush": flush, "write_mode": wm,
                          "role": "ASYNC_MASTER", "slave": False})
    return cells


# The account the ACL cell's broker file holds and every request of that cell signs with.
ACL_ACCOUNT = ("benchAdmin01", "bench-secret-01")


def acl_cells():
    """ASYNC_FLUSH/mmap with plain ACL on and every request signed: the cost of the check."""
    return [{"name": "ASYNC_FLUSH/mmap+ACL", "flush": "ASYNC_FLUSH", "write_mode": "mmap",
             "role": "ASYNC_MASTER", "slave": False, "acl": True}]


def tls_cells():
    """ASYNC_FLUSH/mmap with every bench connection in TLS (the port is permissive with
    upstream's test-mode certificate, its default, so the harness's own probes stay plain):
    the cost of the record layer."""
    return [{"name": "ASYNC_FLUSH/mmap+TLS", "flush": "ASYNC_FLUSH", "write_mode": "mmap",
             "role": "ASYNC_MASTER", "slave": False, "tls": True}]


def acl_file():
    """plain_acl.yml of the ACL cell: one admin account, no white addresses."""
    return ("accounts:\n  - accessKey: %s\n    secretKey: %s\n    admin: true\n" % ACL_ACCOUNT)


def ha_cells():
    """Replication cells, run only when the master listens on haListenPort: both roles under
    both flush types (mmap), and ASYNC_MASTER in direct mode, where the HA stage sends
    from the write ring."""
    cells = [{"name": "%s/mmap+%s" % (flush, role), "flush": flush, "write_mode": "mmap",
              "role": role, "slave": True}
             for flush in ("ASYNC_FLUSH", "SYNC_FLUSH") for role in ("ASYNC_MASTER", "SYNC_MASTER")]
    cells.append({"name": "ASYNC_FLUSH/direct+ASYNC_MASTER", "flush": "ASYNC_FLUSH",
                  "write_mode": "direct", "role": "ASYNC_MASTER", "slave": True})
    return cells


def settings(args):
    """Timing and load for this run; --quick shrinks timing, flags override."""
    quick = args.quick
    s = {
        "warmup_secs": args.warmup if args.warmup is not None else (3 if quick else 5),
        "measure_secs": args.measure if args.measure is not None else (8 if quick else 25),
        "repeats": args.repeats if args.repeats is not None else (1 if quick else 2),
        "concurrency": args.concurrency,
        "connections": args.connections,
        "threads": args.threads,
        "size": args.size,
        "calibrate": args.concurrency is None and not quick,
        "budget_secs": args.budget_secs or (360 if quick else 1260),
        "quick": quick,
    }
    if s["concurrency"] is None and not s["calibrate"]:
        s["concurrency"] = 256
    return s


def namesrv_conf(port, d):
    return ("listenPort=%d\nkvConfigPath=%s\nconfigStorePath=%s\n"
            % (port, os.path.join(d, "namesrv", "kvConfig.json"),
               os.path.join(d, "namesrv", "namesrv.properties")))


def broker_conf(cell, port, namesrv_port, store_dir, broker_id=0, role=None, name="bench",
                ha_master=None):
    """broker.conf text with RocketMQ key names; `role` overrides the cell's (for the slave),
    `ha_master` is the slave's haMasterAddress."""
    lines = [
        "brokerClusterName=ModesBench",
        "brokerName=%s" % name,
        "brokerId=%d" % broker_id,
        "brokerIP1=127.0.0.1",
        "brokerIP2=127.0.0.1",
        "listenPort=%d" % port,
        "haListenPort=%d" % (port + 1),
        "ringmq.grpc.port=0",
        "namesrvAddr=127.0.0.1:%d" % namesrv_port,
        "storePathRootDir=%s" % store_dir,
        "flushDiskType=%s" % cell["flush"],
        "ringmq.writeMode=%s" % cell["write_mode"],
        "brokerRole=%s" % (role or cell["role"]),
        "autoCreateTopicEnable=true",
    ]
    if cell.get("acl"):
        lines += ["aclEnable=true", "rocketmqHome=%s" % os.path.dirname(store_dir)]
    if cell.get("tls"):
        # Upstream's defaults, spelled out: TLS and plain clients on one port.
        lines += ["tls.server.mode=permissive", "tls.test.mode.enable=true"]
    if ha_master:
        # Without it a slave learns the master's HA address from its registration answer,
        # which names the master only once the master has registered (up to 30 s later).
        lines.append("haMasterAddress=%s" % ha_master)
    if (role or cell["role"]) == "SYNC_MASTER":
        # RocketMQ 5 waits for a slave only when two replicas must hold a message
        # (spec features.md g.1: with inSyncReplicas=1 a SYNC_MASTER acks at once).
        lines += ["inSyncReplicas=2", "totalReplicas=2"]
    # --set KEY=VALUE lines come last: in a properties file the later line wins.
    lines += ["%s=%s" % kv for kv in cell.get("extra_conf", [])]
    return "\n".join(lines) + "\n"


def bench_argv(binary, namesrv, s, secs, concurrency=None, topic=TOPIC, rate=None, acl=False,
               tls=False):
    argv = [binary, "bench", "producer", "-n", namesrv, "-t", topic,
            "-s", str(s["size"]), "-w", str(concurrency or s["concurrency"]),
            "-c", str(s["connections"]), "--threads", str(s["threads"]),
            "-d", str(int(secs)), "--send-mode", "sync", "--timeout-ms", "5000",
            "--quiet", "--json"]
    if rate:
        argv += ["-r", str(rate)]
    if acl:
        argv += ["--access-key", ACL_ACCOUNT[0], "--secret-key", ACL_ACCOUNT[1]]
    if tls:
        argv += ["--tls"]
    return argv


def cell_estimate_secs(s):
    # disk probe + start (incl. 1 GiB segment allocation) + warm-up + measured + stop
    return 2 + 8 + s["warmup_secs"] + s["measure_secs"] + 6


# ---------------------------------------------------------------- processes

def port_free(port):
    for host in ("0.0.0.0", "127.0.0.1"):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                return False
    return True


def pick_ports(count_brokers=1):
    """A namesrv port and broker ports p with p-2 (VIP channel), p and p+1 (HA) all free,
    below the ephemeral range so client sockets do not take them mid-run."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(12000, 30000, 10)
        wanted = [base] + [base + 5 + 5 * i + d for i in range(count_brokers) for d in (-2, 0, 1)]
        if all(port_free(p) for p in wanted):
            return base, [base + 5 + 5 * i for i in range(count_brokers)]
    raise RuntimeError("no free port block found on 127.0.0.1")


class Proc:
    """A child process we started, its output in a log file; stopped only by its pid."""

    def __init__(self, argv, log_path, env=None):
        self.log_path = log_path
        self.logf = open(log_path, "wb")
        self.p = subprocess.Popen(argv, stdout=self.logf, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=env)
        self.pid = self.p.pid

    def alive(self):
        return self.p.poll() is None

    def stop(self, timeout=20.0):
        """SIGTERM, then SIGKILL after `timeout`. Records how long the graceful stop took
        (`stop_secs`) and whether it had to be killed (`killed`)."""
        self.stop_secs, self.killed = 0.0, False
        if self.p.poll() is None:
            t0 = time.monotonic()
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log("pid %d did not stop in %.0fs after SIGTERM; SIGKILL" % (self.pid, timeout))
                self.killed = True
                os.kill(self.pid, signal.SIGKILL)
                self.p.wait(timeout=10)
            self.stop_secs = time.monotonic() - t0
        self.logf.close()
        self._trim()
        return self.p.returncode

    def _trim(self):
        try:
            if os.path.getsize(self.log_path) > 1024 * 1024:
                text = self.text()
                with open(self.log_path, "w") as f:
                    f.write(report.trim_log(text))
        except OSError:
            pass

    def tail(self, n=15):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return ""

    def text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""


def wait_until(pred, timeout, what, alive=None, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise RuntimeError("%s: the process exited" % what)
        try:
            if pred():
                return
        except (OSError, remoting.RemotingError, ValueError):
            pass
        time.sleep(step)
    raise RuntimeError("%s: not ready within %.0fs" % (what, timeout))


class Cluster:
    """namesrv + broker (+ slave) for one cell, in a fresh store under TMP_BASE."""

    def __init__(self, binary, cell, logdir, tag):
        self.binary, self.cell, self.logdir, self.tag = binary, cell, logdir, tag
        self.procs = []
        self.broker = self.slave = None
        os.makedirs(TMP_BASE, exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix="cell-", dir=TMP_BASE)

    def start(self):
        env = dict(os.environ)
        env.setdefault("RINGMQ_LOG", "info")
        n_brokers = 2 if self.cell.get("slave") else 1
        ns_port, broker_ports = pick_ports(n_brokers)
        self.namesrv = "127.0.0.1:%d" % ns_port
        self.broker_addr = "127.0.0.1:%d" % broker_ports[0]
        self.ha_port = broker_ports[0] + 1
        if self.cell.get("acl"):
            os.makedirs(os.path.join(self.dir, "conf"), exist_ok=True)
            with open(os.path.join(self.dir, "conf", "plain_acl.yml"), "w") as f:
                f.write(acl_file())
        ns_conf = os.path.join(self.dir, "namesrv.conf")
        with open(ns_conf, "w") as f:
            f.write(namesrv_conf(ns_port, self.dir))
        ns = Proc([self.binary, "namesrv", "-c", ns_conf],
                  os.path.join(self.logdir, "%s.namesrv.log" % self.tag), env)
        self.procs.append(ns)
        wait_until(lambda: remoting.probe(self.namesrv), 30, "namesrv", ns.alive)
        confs = [(broker_ports[0], 0, None, "store-master")]
        if self.cell.get("slave"):
            confs.append((broker_ports[1], 1, "SLAVE", "store-slave"))
        for port, bid, role, sub in confs:
            path = os.path.join(self.dir, "broker-%d.conf" % bid)
            with open(path, "w") as f:
                f.write(broker_conf(self.cell, port, ns_port, os.path.join(self.dir, sub),
                                    broker_id=bid, role=role,
                                    ha_master="127.0.0.1:%d" % self.ha_port if bid else None))
            p = Proc([self.binary, "broker", "-c", path],
                     os.path.join(self.logdir, "%s.broker%d.log" % (self.tag, bid)), env)
            self.procs.append(p)
            if bid == 0:
                self.broker = p
            else:
                self.slave = p
            wait_until(lambda: remoting.probe("127.0.0.1:%d" % port), 60,
                       "broker %d" % bid, p.alive)
        # The bench auto-creates its topic from TBW102's route: wait for the registration.
        wait_until(lambda: remoting.route_code(self.namesrv, "TBW102") == remoting.SUCCESS,
                   40, "broker registration with the namesrv", self.broker.alive, step=0.25)

    def slave_connected(self):
        """True once the master reports a slave on its HA port."""
        try:
            return bool(remoting.ha_status(self.broker_addr).get("haConnectionInfo"))
        except (OSError, remoting.RemotingError, ValueError):
            return False

    def ha_listening(self):
        return remoting.probe("127.0.0.1:%d" % self.ha_port)

    def stop(self):
        broker_log = ""
        for p in reversed(self.procs):
            p.stop()
        if self.broker is not None:
            broker_log = self.broker.text()
        shutil.rmtree(self.dir, ignore_errors=True)
        return broker_log


def disk_used_ratio(path):
    """Used share of the file system the way the broker's retention computes it
    (upstream's used / (used + usable)); writes are refused above 90 %."""
    st = os.statvfs(path)
    used = st.f_blocks - st.f_bfree
    return used / float(used + st.f_bavail) if used + st.f_bavail else 0.0


def read_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        return report.parse_proc_stat(f.read())[1]


def read_tasks(pid):
    out = {}
    base = "/proc/%d/task" % pid
    try:
        tids = os.listdir(base)
    except OSError:
        return out
    for tid in tids:
        try:
            with open("%s/%s/stat" % (base, tid)) as f:
                out[int(tid)] = report.parse_proc_stat(f.read())
        except (OSError, ValueError):
            continue
    return out


def read_machine():
    with open("/proc/stat") as f:
        return report.parse_cpu_line(f.readline())


def block_device(path):
    """(major, minor) of the device holding `path`, for /proc/diskstats."""
    st = os.stat(path)
    return os.major(st.st_dev), os.minor(st.st_dev)


def device_written_bytes(dev):
    """Bytes written to the block device so far (sectors written × 512); None if unknown."""
    try:
        with open("/proc/diskstats") as f:
            return report.parse_diskstats_written(f.read(), dev)
    except OSError:
        return None


def proc_io(pid, field):
    """A /proc/<pid>/io counter: `write_bytes` (bytes the process caused to be written to
    storage, charged when it dirties page-cache pages or issues direct I/O) or
    `read_bytes` (bytes it caused to be read from storage: page-cache misses, direct reads)."""
    try:
        with open("/proc/%d/io" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def proc_write_bytes(pid):
    return proc_io(pid, "write_bytes")


def dirty_mib():
    try:
        with open("/proc/meminfo") as f:
            return report.parse_meminfo_kib(f.read(), "Dirty") / 1024.0
    except (OSError, TypeError):
        return None


def commitlog_fds(pid):
    """(fds open on a commitlog file, how many of them with O_DIRECT): checks that the
    write mode asked for is the one the broker uses."""
    total = direct = 0
    base = "/proc/%d/fd" % pid
    try:
        fds = os.listdir(base)
    except OSError:
        return 0, 0
    for fd in fds:
        try:
            target = os.readlink("%s/%s" % (base, fd))
        except OSError:
            continue
        if "/commitlog/" not in target:
            continue
        total += 1
        try:
            with open("/proc/%d/fdinfo/%s" % (pid, fd)) as f:
                for line in f:
                    if line.startswith("flags:") and int(line.split()[1], 8) & O_DIRECT_FLAG:
                        direct += 1
        except (OSError, ValueError):
            continue
    return total, direct


def run_bench(argv, timeout):
    """Runs one bench process; returns (summary or None, stdout, stderr, client CPU secs).

    Reaped with wait4 so the load generator's own CPU time is known.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        status, usage = None, None
        while True:
            pid, st, ru = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                status, usage = st, ru
                break
            if time.monotonic() > deadline:
                log("bench pid %d ran past %.0fs; SIGKILL" % (p.pid, timeout))
                os.kill(p.pid, signal.SIGKILL)
                _, status, usage = os.wait4(p.pid, 0)
                break
            time.sleep(0.05)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    try:
        summary = report.parse_bench_json(stdout)
    except ValueError:
        summary = None
    return summary, stdout, stderr, usage.ru_utime + usage.ru_stime


def safe_runtime_info(addr):
    try:
        return remoting.runtime_info(addr)
    except (OSError, remoting.RemotingError, ValueError):
        return {}


class LagSampler(threading.Thread):
    """Samples the master's GET_BROKER_HA_STATUS every `period` seconds while a run goes:
    (t, master max offset, the slowest slave's bytes behind). Bounded: at most
    `max_samples` samples are kept."""

    def __init__(self, master_addr, period=0.02, max_samples=100000):
        super().__init__(daemon=True)
        self.addr, self.period, self.max_samples = master_addr, period, max_samples
        self.samples, self.errors = [], 0
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set() and len(self.samples) < self.max_samples:
            t = time.monotonic()
            try:
                st = remoting.ha_status(self.addr)
                conns = st.get("haConnectionInfo") or []
                if st.get("master") and conns:
                    diff = max(int(c.get("diff", 0)) for c in conns)
                    self.samples.append((t, int(st.get("masterCommitLogMaxOffset", 0)), diff))
            except (OSError, remoting.RemotingError, ValueError):
                self.errors += 1
            self._halt.wait(max(0.0, self.period - (time.monotonic() - t)))

    def finish(self):
        self._halt.set()
        self.join(timeout=5)
        return self.samples


def measured_run(binary, cluster, s, concurrency=None, secs=None, rate=None):
    """One measured bench run with CPU, thread, log-offset and lock-hold sampling (and
    replication lag when the cell has a slave)."""
    secs = secs or s["measure_secs"]
    pid = cluster.broker.pid
    info0 = safe_runtime_info(cluster.broker_addr)
    sampler = LagSampler(cluster.broker_addr) if cluster.slave is not None else None
    if sampler:
        sampler.start()
    dev = block_device(TMP_BASE)
    dw0, pw0, pr0 = device_written_bytes(dev), proc_write_bytes(pid), proc_io(pid, "read_bytes")
    ticks0, tasks0, mach0 = read_ticks(pid), read_tasks(pid), read_machine()
    w0 = time.monotonic()
    summary, stdout, stderr, client_cpu = run_bench(
        bench_argv(binary, cluster.namesrv, s, secs, concurrency, rate=rate,
                   acl=cluster.cell.get("acl"), tls=cluster.cell.get("tls")),
        timeout=secs + 60)
    ticks1, tasks1, mach1 = read_ticks(pid), read_tasks(pid), read_machine()
    samples = sampler.finish() if sampler else None
    wall = time.monotonic() - w0
    dw1, pw1, pr1 = device_written_bytes(dev), proc_write_bytes(pid), proc_io(pid, "read_bytes")
    info1 = safe_runtime_info(cluster.broker_addr)
    run = {"bench": summary, "concurrency": concurrency or s["concurrency"]}
    if rate:
        run["rate"] = rate
    if sampler:
        run["replication"] = report.replication_lag(samples) or {}
        run["replication"]["broker"] = report.ack_lag_window(info0, info1)
        run["ha_status_errors"] = sampler.errors
    if summary is None:
        run["error"] = (stderr.strip().splitlines() or stdout.strip().splitlines() or ["?"])[-1]
        return run
    msgs, elapsed = summary.get("messages", 0), summary.get("elapsed_secs") or secs
    run["broker_cpu_us_per_msg"] = report.cpu_us_per_msg(ticks0, ticks1, CLK_TCK, msgs)
    run["client_cpu_us_per_msg"] = client_cpu * 1e6 / msgs if msgs else None
    run["threads"] = report.thread_cpu(tasks0, tasks1, CLK_TCK, elapsed)
    dbusy, dio, dtotal = (mach1[i] - mach0[i] for i in range(3))
    run["machine_busy_pct"] = 100.0 * dbusy / dtotal if dtotal else None
    run["iowait_pct"] = 100.0 * dio / dtotal if dtotal else None
    # CPU (in cores) used during the window by everything that is neither this broker nor
    # the load generator: other work on a shared machine makes the cell's numbers suspect.
    run["other_cores"] = report.other_cores(
        run["machine_busy_pct"], os.cpu_count() or 1,
        (ticks1 - ticks0) / float(CLK_TCK), client_cpu, wall)
    try:
        dlog = int(info1.get("commitLogMaxOffset", 0)) - int(info0.get("commitLogMaxOffset", 0))
        run["log_mib_per_s"] = dlog / report.MIB / elapsed if dlog > 0 else None
    except ValueError:
        dlog, run["log_mib_per_s"] = 0, None
    if sampler and dlog > 0:
        ha_secs = report.thread_cpu_secs(tasks0, tasks1, CLK_TCK, "ringmq-ha")
        run["ha_cpu_us_per_mib"] = ha_secs * 1e6 / (dlog / report.MIB)
    # What reached the device during the window (all writers on it, including writeback
    # of pages dirtied earlier): device bytes per CommitLog byte shows write amplification,
    # e.g. zero-filled pre-faulted segments being written back.
    if dw0 is not None and dw1 is not None:
        run["device_write_mib_per_s"] = (dw1 - dw0) / report.MIB / wall
        run["device_bytes_per_log_byte"] = (dw1 - dw0) / dlog if dlog > 0 else None
    if pw0 is not None and pw1 is not None and dlog > 0:
        # The broker's own share, unaffected by other processes on the device: > 1 means
        # it dirties or writes more than the records it appends (e.g. pre-faulted pages).
        run["broker_write_bytes_per_log_byte"] = (pw1 - pw0) / dlog
    if pr0 is not None and pr1 is not None and dlog > 0:
        # A producer-only load should read nothing back from the disk; reads here mean a
        # stage (reput, typically) re-reads what was just written from the device.
        run["broker_read_bytes_per_log_byte"] = (pr1 - pr0) / dlog
    run["dirty_mib_end"] = dirty_mib()
    try:
        with open("/proc/%d/status" % pid) as f:
            st = f.read()
        # RssAnon is the broker's own memory; RssFile counts mapped CommitLog pages.
        run["rss_anon_mib"] = report.parse_meminfo_kib(st, "RssAnon") / 1024.0
        run["rss_file_mib"] = report.parse_meminfo_kib(st, "RssFile") / 1024.0
    except (OSError, TypeError):
        pass
    # ringmq.appendLockHoldUs is cumulative since the store opened: warm-up included.
    run["lock_hold"] = report.extract_lock_hold(info1)
    if run["lock_hold"]:
        run["lock_hold_source"] = "runtime info after the window (since broker start)"
    run["store_window"] = report.window_store_stats(info0, info1, elapsed)
    keep = lambda kv: {k: v for k, v in kv.items()  # noqa: E731
                       if k.lower().startswith("ringmq") or "lock" in k.lower()}
    run["runtime_info_ringmq_before"] = keep(info0)
    run["runtime_info_ringmq"] = keep(info1)
    run["commitlog_fds"], run["commitlog_direct_fds"] = commitlog_fds(pid)
    return run


# ---------------------------------------------------------------- the matrix

# Replication lag is judged at a fixed rate (the bar: p99 <= 5 ms at 50k msg/s under
# ASYNC_MASTER), not at saturation, where the slave shares two cores with everything.
PACED_RATE = 50000


def paced_run(binary, cluster, s):
    """A shorter run at PACED_RATE msg/s on the same cluster: throughput and lag only."""
    secs = max(3, min(10, s["measure_secs"] // 2))
    r = measured_run(binary, cluster, s, secs=secs, rate=PACED_RATE)
    if not r.get("bench"):
        return {"rate": PACED_RATE, "error": r.get("error")}
    return {"rate": PACED_RATE, "secs": secs, "tps": r["bench"]["tps"],
            "p99_ms": r["bench"]["p99_ms"], "failures": r["bench"]["failures"],
            "replication": r.get("replication"),
            "ha_cpu_us_per_mib": r.get("ha_cpu_us_per_mib")}


def run_cell(binary, cell, s, logdir, tag, notes):
    """Fresh cluster, warm-up, one measured run. Returns a run dict (or one with error)."""
    # The ACL cell's broker refuses unsigned requests: the harness's own probes sign too.
    with remoting.signing(ACL_ACCOUNT if cell.get("acl") else None):
        return run_cell_signed(binary, cell, s, logdir, tag, notes)


def run_cell_signed(binary, cell, s, logdir, tag, notes):
    try:
        disk_probe = disk.probe(TMP_BASE)
    except OSError as e:
        disk_probe = {"error": str(e)}
    cluster = Cluster(binary, cell, logdir, tag)
    run = {}
    try:
        cluster.start()
        if cell.get("slave") and not cluster.ha_listening():
            run = {"skip": "HA not available: nothing listens on haListenPort %d"
                   % cluster.ha_port}
            return run
        if cell.get("slave"):
            # Measuring before the slave attaches would time a master without a slave.
            wait_until(cluster.slave_connected, 30, "the slave's HA connection",
                       cluster.slave.alive, step=0.2)
        warm, _, werr, _ = run_bench(bench_argv(binary, cluster.namesrv, s, s["warmup_secs"],
                                                acl=cell.get("acl"), tls=cell.get("tls")),
                                     timeout=s["warmup_secs"] + 60)
        if warm is None:
            run = {"error": "warm-up failed: %s" % (werr.strip().splitlines() or ["?"])[-1]}
            return run
        run = measured_run(binary, cluster, s)
        run["disk_probe"] = disk_probe
        if cell.get("slave") and run.get("bench"):
            run["paced"] = paced_run(binary, cluster, s)
        if cell["write_mode"] == "direct" and run.get("commitlog_fds") and \
                not run.get("commitlog_direct_fds"):
            notes.append("%s: no commitlog fd of the broker had O_DIRECT during the run — "
                         "ringmq.writeMode=direct may not be applied" % cell["name"])
        return run
    except (RuntimeError, OSError) as e:
        tail = cluster.broker.tail() if cluster.broker else ""
        run = {"error": "%s%s" % (e, ("\n" + tail) if tail else "")}
        return run
    finally:
        broker_log = cluster.stop()
        if cluster.broker is not None and run.get("bench"):
            run["broker_stop_secs"] = cluster.broker.stop_secs
            run["broker_killed"] = cluster.broker.killed
            # Shutdown problems are worth a note: a SIGTERM must end in a clean store.
            if cluster.broker.killed:
                notes.append("%s: the broker did not exit within 20 s of SIGTERM (killed)"
                             % cell["name"])
            elif cluster.broker.stop_secs > 5:
                notes.append("%s: the broker took %.1f s to exit after SIGTERM"
                             % (cell["name"], cluster.broker.stop_secs))
            for line in report.shutdown_problems(broker_log):
                notes.append("%s: broker log at shutdown: %s" % (cell["name"], line))
        lh = report.extract_lock_hold_from_log(broker_log)
        if lh and run.get("bench") and not run.get("lock_hold"):
            # Only a shutdown-time histogram: the whole broker life, warm-up included.
            run["lock_hold"] = lh
            run["lock_hold_source"] = "broker log at shutdown"


def calibrate(binary, s, logdir, deadline):
    """Smallest in-flight count that saturates both ASYNC_FLUSH and SYNC_FLUSH (mmap)."""
    steps = [32, 128, 512, 1024]
    chosen, record = [], {}
    for cell in [c for c in matrix_cells() if c["write_mode"] == "mmap"]:
        if time.monotonic() + 10 + len(steps) * 6 > deadline:
            break
        cluster = Cluster(binary, cell, logdir, "calibrate-" + cell["flush"])
        sweep = []
        try:
            cluster.start()
            run_bench(bench_argv(binary, cluster.namesrv, s, 3, concurrency=128), timeout=60)
            for w in steps:
                r, _, _, _ = run_bench(bench_argv(binary, cluster.namesrv, s, 5, concurrency=w),
                                       timeout=65)
                sweep.append((w, r["tps"] if r else None))
                log("calibrate %s: -w %d -> %s msg/s" % (cell["name"], w,
                                                         "%.0f" % r["tps"] if r else "failed"))
        except (RuntimeError, OSError) as e:
            log("calibrate %s failed: %s" % (cell["name"], e))
        finally:
            cluster.stop()
        record[cell["name"]] = sweep
        w = report.choose_concurrency(sweep)
        if w:
            chosen.append(w)
    return (max(chosen) if chosen else 256), record


def run_matrix(args, s, out):
    t_start = time.monotonic()
    deadline = t_start + s["budget_secs"]
    logdir = os.path.join(out, "logs")
    os.makedirs(logdir, exist_ok=True)
    result = {"meta": meta(args, s), "notes": [], "cells": []}
    notes = result["notes"]
    os.makedirs(TMP_BASE, exist_ok=True)
    if not args.no_disk:
        log("measuring the raw disk under %s" % TMP_BASE)
        result["disk"] = disk.measure(TMP_BASE, quick=s["quick"], log=log)
        log("raw sequential %.0f MiB/s; group commit %.0f MiB/s; lone fdatasync p50 %.2f ms" % (
            result["disk"]["raw_seq_mib_per_s"], result["disk"]["group_commit"]["mib_per_s"],
            result["disk"]["lone_fdatasync"]["write4k_fdatasync_p50_ms"]))
    if s["calibrate"]:
        w, record = calibrate(args.binary, s, logdir, deadline)
        s["concurrency"] = w
        result["calibration"] = record
        log("in-flight concurrency for every cell: %d" % w)
    result["meta"]["concurrency"] = s["concurrency"]
    cells = matrix_cells()
    if not args.no_ha:
        cells += ha_cells()
    if not args.no_acl:
        cells += acl_cells()
    if not args.no_tls:
        cells += tls_cells()
    if args.cells:
        wanted = set(args.cells.split(","))
        cells = [c for c in cells if c["name"] in wanted]
    for c in cells:
        c["runs"] = []
        c["extra_conf"] = extra_conf(args)
    # Passes alternate the cell order (ABBA) so slow drift (page cache, disk) cancels.
    ha_skip, disk_warned = None, False
    for rep in range(s["repeats"]):
        order = cells if rep % 2 == 0 else list(reversed(cells))
        for cell in order:
            if cell.get("slave") and ha_skip:
                cell["status"], cell["note"] = "skipped", ha_skip
                continue
            if time.monotonic() + cell_estimate_secs(s) > deadline:
                msg = "%s pass %d skipped: would exceed the %ds budget" % (
                    cell["name"], rep + 1, s["budget_secs"])
                notes.append(msg)
                log(msg)
                continue
            used = disk_used_ratio(TMP_BASE)
            if used > DISK_USED_WARN and not disk_warned:
                disk_warned = True
                msg = ("the store's file system is %.0f%% full: the broker refuses writes "
                       "(SERVICE_NOT_AVAILABLE) near its disk-full limits, so failures and low "
                       "msg/s may come from that" % (used * 100))
                notes.append(msg)
                log("WARNING: " + msg)
            log("cell %s (pass %d/%d)" % (cell["name"], rep + 1, s["repeats"]))
            tag = "%s-%d" % (cell["name"].replace("/", "_").replace("+", "_"), rep + 1)
            run = run_cell(args.binary, cell, s, logdir, tag, notes)
            if "skip" in run:
                ha_skip = run["skip"]
                cell["status"], cell["note"] = "skipped", run["skip"]
                log(run["skip"])
                continue
            cell["runs"].append(run)
            if run.get("bench"):
                b = run["bench"]
                log("  %.0f msg/s, p50 %.2f p99 %.2f p99.9 %.2f ms, %s failures, broker %.1f µs/msg"
                    % (b["tps"], b["p50_ms"], b["p99_ms"], b["p999_ms"], b["failures"],
                       run.get("broker_cpu_us_per_msg") or 0))
                log("  busiest threads: " + ", ".join("%s %.0f%%" % t for t in run["threads"]))
            else:
                log("  FAILED: %s" % run.get("error"))
    for cell in cells:
        if cell.get("status") == "skipped":
            continue
        ok = [r for r in cell["runs"] if r.get("bench")]
        if not ok:
            cell["status"] = "failed"
            errs = [r.get("error", "") for r in cell["runs"]]
            cell["note"] = (errs[-1].splitlines()[0] if errs and errs[-1] else "not run")
        else:
            cell["status"] = "ok"
    if ha_skip:
        notes.append("Replication cells skipped — " + ha_skip + ".")
    if not args.no_disk and time.monotonic() < deadline:
        log("measuring the raw disk again (drift check)")
        result["disk_end"] = disk.measure(TMP_BASE, quick=s["quick"], log=log)
        # The physical limit is the best the device showed in this run.
        result["disk"]["raw_seq_mib_per_s"] = max(
            result["disk"]["raw_seq_mib_per_s"], result["disk_end"]["raw_seq_mib_per_s"])
        result["disk"]["best_group_commit_mib_per_s"] = max(
            (d.get("group_commit") or {}).get("mib_per_s", 0)
            for d in (result["disk"], result["disk_end"]))
    lh_any = any(r.get("lock_hold") for c in cells for r in c["runs"])
    if not lh_any:
        notes.append("Lock-hold time: not exposed by the broker yet (no runtime-info key "
                     "containing `lockHold`); see benches/README.md for the interface the "
                     "harness reads.")
    result["cells"] = cells
    result["meta"]["wall_secs"] = time.monotonic() - t_start
    return result


def meta(args, s):
    rev = ""
    try:
        rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    m = dict(s)
    m.update({"started": datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
              "cpus": os.cpu_count(), "kernel": platform.release(), "git": rev,
              "binary": args.binary, "argv": sys.argv[1:],
              "broker_conf_extra": args.set or []})
    return m


def scrub_repo_paths(out):
    """Rewrites the repository's absolute path as "./" in every text file of `out` (the
    broker logs name their store directories), so saved results read the same on any
    machine."""
    prefix = REPO.rstrip("/") + "/"
    for root, _, files in os.walk(out):
        for name in files:
            path = os.path.join(root, name)
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except (UnicodeDecodeError, OSError):
                continue
            if prefix in text:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text.replace(prefix, "./"))


def write_outputs(result, out, kind="modes"):
    os.makedirs(out, exist_ok=True)
    try:
        return _write_outputs(result, out, kind)
    finally:
        scrub_repo_paths(out)


def _write_json_and_markdown(result, out, stem, render):
    """`<stem>.json` and `<stem>.md` (rendered by `render`) in `out`; returns the Markdown."""
    with open(os.path.join(out, stem + ".json"), "w") as f:
        json.dump(result, f, indent=1)
    md = render(result)
    with open(os.path.join(out, stem + ".md"), "w") as f:
        f.write(md + "\n")
    return md


def _write_outputs(result, out, kind):
    if kind == "builds":
        return _write_json_and_markdown(result, out, "builds", report.render_builds_markdown)
    if kind == "compare":
        return _write_json_and_markdown(result, out, "compare", report.render_compare_markdown)
    md = _write_json_and_markdown(result, out, "results", report.render_markdown)
    size = result.get("meta", {}).get("size", 1024)
    rows = [report.summarize_cell(c, size, result.get("disk")) for c in result.get("cells", [])]
    raw = (result.get("disk") or {}).get("raw_seq_mib_per_s")
    with open(os.path.join(out, "throughput.svg"), "w") as f:
        f.write(report.render_throughput_svg(rows, raw, size))
    with open(os.path.join(out, "latency.svg"), "w") as f:
        f.write(report.render_latency_svg(rows))
    return md


def replace_readme_block(text, md, source):
    """README text with the marked block replaced by `md` (minus its title line); None
    when the markers are missing. Everything outside the markers is kept as is."""
    if README_BEGIN not in text or README_END not in text:
        return None
    body = "%s\n\n_From `%s`:_\n\n![throughput](%s/throughput.svg) ![latency](%s/latency.svg)" \
        "\n\n%s\n\n%s" % (README_BEGIN, source, source, source,
                          md.split("\n", 1)[-1].strip(), README_END)
    head, rest = text.split(README_BEGIN, 1)
    tail = rest.split(README_END, 1)[1]
    return head + body + tail


def update_readme(md, out, path=None):
    """Put the latest table into benches/README.md between the markers."""
    path = path or os.path.join(REPO, "benches", "README.md")
    with open(path) as f:
        text = f.read()
    new = replace_readme_block(text, md, os.path.relpath(out, os.path.join(REPO, "benches")))
    if new is None:
        log("README has no %s ... %s block; not updated" % (README_BEGIN, README_END))
        return
    with open(path, "w") as f:
        f.write(new)
    log("benches/README.md updated")


# ---------------------------------------------------------------- --target

def extra_conf(args):
    """--set KEY=VALUE pairs as [(key, value)]."""
    out = []
    for item in args.set or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit("--set wants KEY=VALUE, got %r" % item)
        out.append((key.strip(), value.strip()))
    return out


def parse_mode(text):
    flush, _, wm = text.partition("/")
    flush, wm = flush.upper(), (wm or "mmap").lower()
    if flush not in ("ASYNC_FLUSH", "SYNC_FLUSH") or wm not in ("mmap", "direct"):
        raise SystemExit("--ringmq-mode wants FLUSH/WRITE, e.g. ASYNC_FLUSH/mmap")
    return {"name": "%s/%s" % (flush, wm), "flush": flush, "write_mode": wm,
            "role": "ASYNC_MASTER", "slave": False}


def run_compare(args, s, out):
    """Alternating runs against our ringmq and the target namesrv, N pairs, ABBA order."""
    if s["concurrency"] is None:
        s["concurrency"] = 256
    logdir = os.path.join(out, "logs")
    os.makedirs(logdir, exist_ok=True)
    cell = parse_mode(args.ringmq_mode)
    cell["extra_conf"] = extra_conf(args)
    topic = args.topic
    result = {"meta": meta(args, s), "pairs": [], "notes": []}
    result["meta"].update({"target": args.target, "ringmq_mode": cell["name"],
                           "pairs": args.pairs})
    if not remoting.probe(args.target, timeout=2):
        raise SystemExit("target %s does not accept connections" % args.target)
    try:
        code = remoting.route_code(args.target, topic)
    except (OSError, remoting.RemotingError) as e:
        raise SystemExit("target %s did not answer GET_ROUTEINFO_BY_TOPIC: %s" % (args.target, e))
    if code != remoting.SUCCESS:
        result["notes"].append("topic %s had no route on the target (code %s); relying on "
                               "autoCreateTopicEnable there" % (topic, code))
    cluster = Cluster(args.binary, cell, logdir, "compare-ringmq")
    try:
        cluster.start()
        sides = {"ringmq": cluster.namesrv, "target": args.target}
        for side, ns in sides.items():
            log("warm-up %s (%s)" % (side, ns))
            run_bench(bench_argv(args.binary, ns, s, s["warmup_secs"], topic=topic),
                      timeout=s["warmup_secs"] + 60)
        for i in range(args.pairs):
            order = ["ringmq", "target"] if i % 2 == 0 else ["target", "ringmq"]
            got = {}
            for side in order:
                if side == "ringmq":
                    run = measured_run(args.binary, cluster, s)
                    got[side] = run
                else:
                    t0 = read_ticks(args.target_pid) if args.target_pid else None
                    b, _, err, ccpu = run_bench(
                        bench_argv(args.binary, args.target, s, s["measure_secs"], topic=topic),
                        timeout=s["measure_secs"] + 60)
                    run = {"bench": b}
                    if b is None:
                        run["error"] = (err.strip().splitlines() or ["?"])[-1]
                    elif t0 is not None:
                        run["broker_cpu_us_per_msg"] = report.cpu_us_per_msg(
                            t0, read_ticks(args.target_pid), CLK_TCK, b["messages"])
                    got[side] = run
            rb, tb = got["ringmq"].get("bench"), got["target"].get("bench")
            if rb and tb:
                pair = report.pair_ratios(rb, tb)
                pair["ringmq_cpu_us_per_msg"] = got["ringmq"].get("broker_cpu_us_per_msg")
                pair["target_cpu_us_per_msg"] = got["target"].get("broker_cpu_us_per_msg")
                result["pairs"].append(pair)
                log("pair %d: ringmq %.0f msg/s, target %.0f msg/s, ratio %.2f; p99 %.2f vs %.2f ms"
                    % (i + 1, pair["ringmq_tps"], pair["target_tps"], pair["tps_ratio"] or 0,
                       pair["ringmq_p99_ms"], pair["target_p99_ms"]))
            else:
                msg = "pair %d failed: ringmq %s, target %s" % (
                    i + 1, got["ringmq"].get("error", "ok"), got["target"].get("error", "ok"))
                result["notes"].append(msg)
                log(msg)
    finally:
        cluster.stop()
    result["median_tps_ratio"] = report.median(p["tps_ratio"] for p in result["pairs"])
    result["median_p99_ratio"] = report.median(p["p99_ratio"] for p in result["pairs"])
    log("median tps ratio (ringmq/target): %s" % result["median_tps_ratio"])
    return result


def build_cells(args):
    """The cells a --baseline comparison runs: --cells, else the four flush x write modes."""
    cells = matrix_cells() + ha_cells() + acl_cells() + tls_cells()
    if args.cells:
        wanted = set(args.cells.split(","))
        chosen = [c for c in cells if c["name"] in wanted]
        unknown = wanted - {c["name"] for c in chosen}
        if unknown:
            raise SystemExit("unknown cell(s): %s" % ", ".join(sorted(unknown)))
        return chosen
    return matrix_cells()


def run_builds(args, s, out):
    """Two ringmq builds on the same cells, pair by pair in ABBA order, each run on a fresh
    broker after its own warm-up: the before/after of a change in one sitting, with the
    sitting's drift (page cache, host) cancelling instead of posing as the change."""
    if s["concurrency"] is None:
        s["concurrency"] = 256
    logdir = os.path.join(out, "logs")
    os.makedirs(logdir, exist_ok=True)
    result = {"meta": meta(args, s), "cells": [], "notes": []}
    result["meta"].update({"baseline": args.baseline, "candidate": args.binary,
                           "pairs": args.pairs})
    sides = [("baseline", args.baseline), ("candidate", args.binary)]
    cells = build_cells(args)
    # The first broker of a sitting runs slower than the rest (host memory, page cache):
    # one unmeasured run takes that hit instead of the first pair's first side.
    log("settling run (not measured): baseline, %s" % cells[0]["name"])
    settle = dict(cells[0], extra_conf=extra_conf(args))
    run_cell(args.baseline, settle, s, logdir, "settle", [])
    for cell in cells:
        cell["extra_conf"] = extra_conf(args)
        name = cell["name"].replace("/", "_").replace("+", "_")
        pairs = []
        for i in range(args.pairs):
            got = {}
            for side, binary in (sides if i % 2 == 0 else list(reversed(sides))):
                log("cell %s pair %d/%d: %s" % (cell["name"], i + 1, args.pairs, side))
                got[side] = run_cell(binary, cell, s, logdir, "%s-%s-%d" % (name, side, i + 1),
                                     result["notes"])
            pair = report.build_pair(got["baseline"], got["candidate"])
            if pair is None:
                msg = "%s pair %d failed: baseline %s, candidate %s" % (
                    cell["name"], i + 1, got["baseline"].get("error", "ok"),
                    got["candidate"].get("error", "ok"))
                result["notes"].append(msg)
                log(msg)
                continue
            pairs.append(pair)
            log("  msg/s %.0f -> %.0f (x%.3f), broker µs/msg %.2f -> %.2f"
                % (pair["baseline_tps"], pair["candidate_tps"], pair["tps_ratio"] or 0,
                   pair["baseline_cpu_us_per_msg"] or 0, pair["candidate_cpu_us_per_msg"] or 0))
        result["cells"].append({"name": cell["name"], "pairs": pairs,
                                "median": report.build_medians(pairs)})
    return result


# ---------------------------------------------------------------- main

def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short cells, one pass (~4-5 min)")
    ap.add_argument("--out", help="results folder (default benches/results/<timestamp>)")
    ap.add_argument("--binary", default=DEFAULT_BINARY, help="ringmq binary")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and configs, run nothing")
    ap.add_argument("--render", metavar="RESULTS_JSON", help="re-render md/svg from a results.json")
    ap.add_argument("--update-readme", action="store_true",
                    help="put the new table into benches/README.md's latest-results block")
    ap.add_argument("--cells", help="comma-separated cell names to run (default: all)")
    ap.add_argument("--no-ha", action="store_true", help="skip the replication cells")
    ap.add_argument("--no-acl", action="store_true",
                    help="skip the ACL cell (ASYNC_FLUSH/mmap with aclEnable and signed requests)")
    ap.add_argument("--no-tls", action="store_true",
                    help="skip the TLS cell (ASYNC_FLUSH/mmap with every bench connection in TLS)")
    ap.add_argument("--no-disk", action="store_true", help="skip the raw-disk measurements")
    ap.add_argument("--warmup", type=int, help="warm-up seconds per cell")
    ap.add_argument("--measure", type=int, help="measured seconds per cell")
    ap.add_argument("--repeats", type=int, help="passes over the matrix")
    ap.add_argument("-w", "--concurrency", type=int,
                    help="sends in flight (default: calibrated; 256 with --quick/--target)")
    ap.add_argument("-c", "--connections", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="bench client threads")
    ap.add_argument("-s", "--size", type=int, default=1024, help="message body bytes")
    ap.add_argument("--budget-secs", type=int, help="hard budget for the whole run")
    ap.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="extra broker.conf line for every broker (repeatable), e.g. "
                         "--set messageIndexEnable=false")
    ap.add_argument("--target", metavar="HOST:PORT",
                    help="compare with the RocketMQ-compatible namesrv at HOST:PORT")
    ap.add_argument("--pairs", type=int, default=None, help="alternating pairs for --target or --baseline")
    ap.add_argument("--target-pid", type=int, help="the target broker's pid (CPU per message)")
    ap.add_argument("--ringmq-mode", default="ASYNC_FLUSH/mmap",
                    help="ringmq side of --target: FLUSH/WRITE (default ASYNC_FLUSH/mmap)")
    ap.add_argument("-t", "--topic", default=TOPIC, help="topic for --target runs")
    ap.add_argument("--baseline", metavar="BINARY",
                    help="compare --binary with this ringmq build, cell by cell, in "
                         "alternating pairs (--pairs, default 4; --cells picks the cells)")
    return ap


def dry_run(args, s):
    print("plan (dry run): %s" % ("quick" if s["quick"] else "full"))
    print("  binary: %s (%s)" % (args.binary, "present" if os.path.exists(args.binary) else "MISSING"))
    print("  store dirs under: %s" % TMP_BASE)
    print("  load: %d B bodies, sync sends, -w %s, -c %d, --threads %d; warm-up %ds, measure %ds, "
          "%d pass(es)" % (s["size"], s["concurrency"] or "calibrated", s["connections"],
                           s["threads"], s["warmup_secs"], s["measure_secs"], s["repeats"]))
    cells = matrix_cells() + ([] if args.no_ha else ha_cells()) + \
        ([] if args.no_acl else acl_cells()) + ([] if args.no_tls else tls_cells())
    est = (60 if not args.no_disk else 0) + (90 if s["calibrate"] else 0) + \
        len(cells) * s["repeats"] * cell_estimate_secs(s)
    print("  cells: %s" % ", ".join(c["name"] for c in cells))
    print("  estimated wall time: %.1f min (budget %.1f min)" % (est / 60, s["budget_secs"] / 60))
    for c in cells[:1] + cells[-1:]:
        c["extra_conf"] = extra_conf(args)
        print("\n# broker.conf for %s (ports are picked at run time)" % c["name"])
        print(broker_conf(c, 10911, 9876, os.path.join(TMP_BASE, "cell-XXXX", "store-master")))
    print("# bench command")
    print(" ".join(bench_argv(args.binary, "127.0.0.1:9876", dict(s, concurrency=s["concurrency"] or 256),
                              s["measure_secs"])))


def main(argv=None):
    args = build_parser().parse_args(argv)
    s = settings(args)
    if args.render:
        with open(args.render) as f:
            result = json.load(f)
        out = args.out or os.path.dirname(os.path.abspath(args.render))
        kind = "builds" if "baseline" in result.get("meta", {}) else \
            "compare" if "pairs" in result else "modes"
        md = write_outputs(result, out, kind)
        print(md)
        if args.update_readme and kind == "modes":
            update_readme(md, out)
        return 0
    if args.dry_run:
        dry_run(args, s)
        return 0
    if not os.path.exists(args.binary):
        print("ringmq binary not found at %s; build it with "
              "`cargo build --release -p ringmq-cli`" % args.binary, file=sys.stderr)
        return 2
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = os.path.abspath(args.out or os.path.join(REPO, "benches", "results", stamp))
    os.makedirs(out, exist_ok=True)
    if args.baseline and not os.path.exists(args.baseline):
        print("baseline binary not found at %s" % args.baseline, file=sys.stderr)
        return 2
    if args.target:
        args.pairs = args.pairs or (3 if args.quick else 5)
        result = run_compare(args, s, out)
        md = write_outputs(result, out, "compare")
    elif args.baseline:
        # Even, so each build goes first equally often.
        args.pairs = args.pairs or 4
        result = run_builds(args, s, out)
        md = write_outputs(result, out, "builds")
    else:
        result = run_matrix(args, s, out)
        md = write_outputs(result, out)
        if args.update_readme:
            update_readme(md, out)
    print()
    print(md)
    log("results in %s" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
