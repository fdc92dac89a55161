#!/usr/bin/env python3
"""run.py — conformance scenario runner: real third-party clients against ringmq's own processes.

Owns scenario discovery, the per-scenario environment, mid-scenario process control, wire capture
and the verdict. Stdlib only.

A scenario is one file in tests/conformance/scenarios/, named for the behaviour it checks and the
client it uses (route_resolve_python.py, route_resolve_alions.js). Near its top (first 40 lines)
it declares, as `#` comments (`//` in JS):
  # needs: namesrv            (or: namesrv broker, or: namesrv broker slave, or: none)
  # timeout: 60               (seconds, optional, default 60)
  # broker-conf: key=value    (optional, repeatable: extra broker.conf properties, e.g.
                              #  messageDelayLevel=1s 1s 1s, enablePropertyFilter=true)
  # expect: unsupported: why  (optional: the behaviour is known to be missing; a failure is
                              #  reported as `skip` with this reason, a pass as `ok` + a note)
  # client: python5           (optional: run with tests/conformance/.venv5/bin/python, the
                              #  official 5.x SDK over gRPC, instead of the 4.x Python client)
For each scenario the runner picks free loopback ports, makes a temp dir, writes namesrv.conf /
broker.conf (RocketMQ property keys), starts `ringmq namesrv -c namesrv.conf` and/or
`ringmq broker -c broker.conf`, waits until they listen (and, for a broker, until the namesrv
routes TBW102 to it; for a slave, until the route of TBW102 lists it as brokerId 1 of the
broker's name), then runs the client program with a timeout:
  *.py with tests/conformance/.venv/bin/python (the real Python client), *.js with node
  (NODE_PATH = tests/conformance/node/node_modules, where ali-ons lives).
`controller` (needs broker slave) runs both brokers in controller mode: one `ringmq controller`
process starts first, both brokers get enableControllerMode=true and its controllerAddr (and no
brokerId/brokerRole/haMasterAddress); the first broker is elected master, the second registers
as a slave under its controller id (not necessarily 1). `kill broker` then makes the controller
elect the slave.
`slave` (needs broker) adds a second broker process after the master: same cluster and broker
name, brokerId=1, brokerRole=SLAVE, its own ports and storePathRootDir (<tmp>/data-slave),
haMasterAddress = the master's haListenPort, slaveReadEnable=true (the master gets
slaveReadEnable=true too). `broker-conf:` lines apply to the master only. A binary that cannot
be a slave exits with status 77 at start-up (the self-test's fake does): the scenario is skipped.
Environment given to the program: NAMESRV_ADDR, BROKER_ADDR (if a broker runs), GRPC_ENDPOINT
(the broker's gRPC endpoint, host:port), SLAVE_ADDR (if a slave runs), RINGMQ_BIN,
RINGMQ_DATA_DIR, RINGMQ_CTL, SCENARIO_NAME, SCENARIO_TMP, CONFORMANCE_ROOT, CONFORMANCE_PYTHON
(the venv python, e.g. for lib/fake_broker.py), PYTHONPATH (lib/), HOME and
ROCKETMQ_CLIENT_LOG_DIR (inside the temp dir). Exit status 0 = pass; 77 (or a last line starting
`SKIP:`) = skip with that reason; anything else, a timeout, or a ringmq process dying = FAIL.

Process control (RINGMQ_CTL): a Unix socket in the temp dir. A scenario connects, writes one
line and reads one line back: `restart broker`, `stop broker`, `start broker`, `kill broker`
(SIGKILL, for crash recovery), `restart namesrv`, and the same verbs for `slave` -> `ok ...` /
`error ...`. `broker` is always the master. `start`/`restart` answer after the broker (slave)
listens again and the namesrv routes TBW102 to it (lists it as brokerId 1). Helpers:
lib/ctl.py (Python) and harness.js `ctl()`/`restartBroker()`.

Wire capture (--capture, or RINGMQ_CONF_CAPTURE=1): logging proxies (lib/wireproxy.py) sit in
front of the namesrv and the broker (and the slave); NAMESRV_ADDR/BROKER_ADDR/SLAVE_ADDR point at
them and routes are rewritten to the proxies (BROKER_ADDR_REAL/SLAVE_ADDR_REAL are the brokers). A failed scenario then
prints the decoded frames (last --capture-lines of them; all in <tmp>/wire.txt).

The ringmq binary: $RINGMQ_BIN, else target/release/ringmq, else target/debug/ringmq (repo root).
Only the processes this runner started are stopped, by their own pid (a client program is run in
its own session and that session's process group is killed on timeout). The temp dir of a failed
scenario is kept for inspection, minus its store files over 8 MiB (pre-allocated CommitLog
segments would fill the disk after a few failures); --keep keeps everything, also for passes.

Output: `ok <name>`, `skip <name>: <reason>` or `FAIL <name>: <reason>` (then process logs,
client output and captured frames), and as the last line exactly
`N passed, N failed, N skipped`. Exit status 1 if anything failed. ERROR or panic lines in the
ringmq logs of a passing scenario are shown under its `ok` line, indented and prefixed `!`.
Usage: python3 tests/conformance/run.py [-k SUBSTR]... [--list] [--keep] [-v] [--capture]
       [--capture-lines N] [--bin PATH] [--dir DIR]
Install the clients first: bash tests/conformance/install.sh
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(ROOT))
SCENARIOS = os.path.join(ROOT, "scenarios")
LIB = os.path.join(ROOT, "lib")
VENV_PY = os.path.join(ROOT, ".venv", "bin", "python")
VENV5_PY = os.path.join(ROOT, ".venv5", "bin", "python")
NODE_MODULES = os.path.join(ROOT, "node", "node_modules")
sys.path.insert(0, LIB)
import remoting as rm  # noqa: E402
import wireproxy  # noqa: E402

DEFAULT_TIMEOUT = 60.0
START_TIMEOUT = 20.0       # a ringmq process must listen within this
REGISTER_TIMEOUT = 20.0    # a broker must be routable through the namesrv within this
STOP_GRACE = 5.0
LOG_TAIL = 60
CLUSTER = "ConformanceCluster"
BROKER_NAME = "broker-conf"
SKIP_EXIT = 77
CAPTURE_LINES = 150


class ScenarioFailure(Exception):
    """A scenario verdict of FAIL with a one-line reason."""


class ScenarioSkip(Exception):
    """A scenario verdict of skip (the binary cannot provide a needed process), with a reason."""


@dataclass
class Scenario:
    name: str
    path: str
    kind: str               # "py" or "js"
    needs: List[str]
    timeout: float
    meta_error: Optional[str] = None
    broker_conf: Dict[str, str] = field(default_factory=dict)
    expect_unsupported: Optional[str] = None   # reason, when `# expect: unsupported`
    client: str = ""        # "python5": the 5.x gRPC SDK's venv instead of the 4.x one


@dataclass
class Proc:
    label: str
    popen: subprocess.Popen
    log_path: str


@dataclass
class Run:
    scenario: Scenario
    tmp: str
    procs: List[Proc] = field(default_factory=list)
    client_output: str = ""
    client_log_dir: str = ""
    binary: Optional[str] = None
    base_env: Dict[str, str] = field(default_factory=dict)
    namesrv_conf: str = ""
    namesrv_port: int = 0
    namesrv_addr: str = ""      # the real namesrv (the broker registers here)
    broker_conf: str = ""
    broker_port: int = 0
    grpc_port: int = 0
    broker_addr: str = ""       # the real broker
    slave_conf: str = ""
    slave_port: int = 0
    slave_addr: str = ""        # the real slave broker (brokerId 1 of the same broker name)
    controller_conf: str = ""
    controller_addr: str = ""   # `needs: ... controller`: the brokers' controllerAddr
    proxies: List["wireproxy.WireProxy"] = field(default_factory=list)
    frames: List["wireproxy.Captured"] = field(default_factory=list)
    t0: float = field(default_factory=time.time)
    ctl_log: List[str] = field(default_factory=list)
    log_errors: List[str] = field(default_factory=list)   # ERROR / panic lines of ringmq's logs
    dropped_store: int = 0      # bytes of big store files deleted from a kept failure directory
    skipped: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


# ---- discovery ---------------------------------------------------------------------------

META_RE = re.compile(r"^\s*(?:#|//)\s*(needs|timeout|broker-conf|expect|client)\s*:\s*(.*?)\s*$")


def parse_scenario(path: str) -> Scenario:
    name, ext = os.path.splitext(os.path.basename(path))
    needs: Optional[List[str]] = None
    timeout = DEFAULT_TIMEOUT
    err = None
    broker_conf: Dict[str, str] = {}
    expect_unsupported: Optional[str] = None
    client = ""
    with open(path, encoding="utf-8") as fh:
        for _, line in zip(range(40), fh):
            m = META_RE.match(line)
            if not m:
                continue
            key, val = m.group(1), m.group(2)
            if key == "needs":
                words = val.replace(",", " ").split()
                needs = [] if words == ["none"] else words
                bad = [w for w in needs if w not in ("namesrv", "broker", "slave", "controller")]
                if bad:
                    err = f"unknown process in needs: {' '.join(bad)}"
                if "broker" in needs and "namesrv" not in needs:
                    err = "needs: broker requires namesrv too"
                if "slave" in needs and "broker" not in needs:
                    err = "needs: slave requires broker too"
                if "controller" in needs and "slave" not in needs:
                    err = "needs: controller requires broker and slave too"
            elif key == "timeout":
                try:
                    timeout = float(val)
                except ValueError:
                    err = f"bad timeout: {val!r}"
            elif key == "broker-conf":
                k, eq, v = val.partition("=")
                if not eq or not k.strip():
                    err = f"bad broker-conf (want key=value): {val!r}"
                else:
                    broker_conf[k.strip()] = v.strip()
            elif key == "client":
                if val not in ("python5",):
                    err = f"unknown client: {val!r} (only python5)"
                client = val
            elif key == "expect":
                word, _, why = val.partition(":")
                if word.strip() != "unsupported":
                    err = f"unknown expect: {val!r} (only 'unsupported: reason')"
                else:
                    expect_unsupported = why.strip() or "marked unsupported"
    if needs is None:
        err = err or "no '# needs: namesrv [broker]' line in the first 40 lines"
        needs = []
    return Scenario(name, path, ext[1:], needs, timeout, err, broker_conf, expect_unsupported, client)


def discover(directory: str = SCENARIOS) -> List[Scenario]:
    files = sorted(glob.glob(os.path.join(directory, "*.py")) + glob.glob(os.path.join(directory, "*.js")))
    return [parse_scenario(os.path.abspath(p)) for p in files if not os.path.basename(p).startswith("_")]


def find_binary(cli_bin: Optional[str]) -> Tuple[Optional[str], str]:
    """(path or None, description of where we looked)."""
    explicit = cli_bin or os.environ.get("RINGMQ_BIN")
    if explicit:
        p = os.path.abspath(explicit)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p, p
        return None, f"RINGMQ_BIN={explicit} (not an executable file)"
    tried = [os.path.join(REPO, "target", "release", "ringmq"), os.path.join(REPO, "target", "debug", "ringmq")]
    for p in tried:
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p, p
    return None, "RINGMQ_BIN unset; tried " + ", ".join(os.path.relpath(t, REPO) for t in tried)


# ---- ports and processes -----------------------------------------------------------------

def _bindable(port: int) -> bool:
    if port <= 1024 or port > 65535:
        return False
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_port(taken: set, also_free: Tuple[int, ...] = ()) -> int:
    """A loopback port the OS says is free, with port+d also free for every d in also_free."""
    for _ in range(200):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        group = [port] + [port + d for d in also_free]
        if any(p in taken for p in group):
            continue
        if all(_bindable(p) for p in group[1:]):
            taken.update(group)
            return port
    raise ScenarioFailure("could not find free loopback ports")


def write_conf(path: str, props: Dict[str, object]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("# written by tests/conformance/run.py\n")
        for k, v in props.items():
            fh.write(f"{k}={v}\n")


def start_proc(run: Run, label: str, argv: List[str], env: Dict[str, str]) -> Proc:
    log_path = os.path.join(run.tmp, f"{label}.log")
    log = open(log_path, "ab")  # a restarted process appends to its predecessor's log
    try:
        p = subprocess.Popen(argv, cwd=run.tmp, env=env, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as e:
        raise ScenarioFailure(f"cannot start {label}: {e}") from e
    finally:
        log.close()
    proc = Proc(label, p, log_path)
    run.procs.append(proc)
    return proc


def wait_listening(proc: Proc, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rc = proc.popen.poll()
        if rc is not None:
            raise ScenarioFailure(f"{proc.label} exited with code {rc} before listening on 127.0.0.1:{port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise ScenarioFailure(f"{proc.label} did not listen on 127.0.0.1:{port} within {timeout:.0f}s")


def wait_route(namesrv: str, proc: Proc, timeout: float, routed, what: str) -> None:
    """Polls the namesrv's route of TBW102 (created by autoCreateTopicEnable) until
    `routed(route)` holds; fails if `proc` exits first or `timeout` passes."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        rc = proc.popen.poll()
        if rc is not None:
            raise ScenarioFailure(f"{proc.label} exited with code {rc} while registering")
        try:
            code, route, resp = rm.get_route(namesrv, "TBW102", timeout=2.0)
            if code == rm.SUCCESS and route and routed(route):
                return
            last = f"code {code} remark {resp.remark!r}" if code != rm.SUCCESS else f"route {route}"
        except (OSError, rm.ProtocolError, TimeoutError, ValueError) as e:
            last = f"{type(e).__name__}: {e}"
        time.sleep(0.2)
    raise ScenarioFailure(f"namesrv never {what} within {timeout:.0f}s (last: {last})")


def wait_broker_routable(namesrv: str, broker_addr: str, broker: Proc, timeout: float) -> None:
    """The namesrv must route TBW102 to our broker."""
    wait_route(namesrv, broker, timeout, lambda route: broker_addr in rm.route_broker_addrs(route),
               f"routed TBW102 to broker {broker_addr}")


def wait_slave_routable(namesrv: str, slave_addr: str, slave: Proc, timeout: float,
                        any_id: bool = False) -> None:
    """The namesrv's route of TBW102 must list our slave as brokerId 1 of BROKER_NAME (any
    slave id in controller mode, where the controller assigns it)."""
    def listed(route) -> bool:
        for bd in route.get("brokerDatas") or []:
            addrs = {str(k): str(v) for k, v in (bd.get("brokerAddrs") or {}).items()}
            if bd.get("brokerName") != BROKER_NAME:
                continue
            if any_id and any(v == slave_addr and k != "0" for k, v in addrs.items()):
                return True
            if addrs.get("1") == slave_addr:
                return True
        return False
    wait_route(namesrv, slave, timeout, listed,
               f"listed slave {slave_addr} as a slave of {BROKER_NAME} in the route of TBW102")


def stop_proc(proc: Proc) -> None:
    p = proc.popen
    if p.poll() is not None:
        return
    try:
        p.terminate()
        p.wait(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(timeout=STOP_GRACE)
    except ProcessLookupError:
        pass


def kill_session(p: subprocess.Popen) -> None:
    """Kill the process group led by p (a client we started with start_new_session)."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def tail(path: str, n: int = LOG_TAIL) -> str:
    try:
        with open(path, "rb") as fh:
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError as e:
        return f"(cannot read {path}: {e})"
    cut = lines[-n:]
    head = f"(last {len(cut)} of {len(lines)} lines)\n" if len(lines) > n else ""
    return head + "\n".join(cut)


# ---- one scenario ------------------------------------------------------------------------

def client_argv(sc: Scenario) -> List[str]:
    if sc.kind == "py" and sc.client == "python5":
        if not os.path.exists(VENV5_PY):
            raise ScenarioFailure("Python 5.x SDK venv missing: run bash tests/conformance/install.sh")
        return [VENV5_PY, sc.path]
    if sc.kind == "py":
        if not os.path.exists(VENV_PY):
            raise ScenarioFailure("Python client venv missing: run bash tests/conformance/install.sh")
        return [VENV_PY, sc.path]
    if not os.path.isdir(os.path.join(NODE_MODULES, "ali-ons")):
        raise ScenarioFailure("node clients missing: run bash tests/conformance/install.sh")
    node = shutil.which("node")
    if not node:
        raise ScenarioFailure("node not found on PATH")
    return [node, sc.path]


def start_namesrv(run: Run) -> None:
    p = start_proc(run, "namesrv", [run.binary, "namesrv", "-c", run.namesrv_conf], run.base_env)
    wait_listening(p, run.namesrv_port, START_TIMEOUT)


def start_broker(run: Run) -> None:
    p = start_proc(run, "broker", [run.binary, "broker", "-c", run.broker_conf], run.base_env)
    wait_listening(p, run.broker_port, START_TIMEOUT)
    wait_broker_routable(run.namesrv_addr, run.broker_addr, p, REGISTER_TIMEOUT)


def start_slave(run: Run) -> None:
    p = start_proc(run, "slave", [run.binary, "broker", "-c", run.slave_conf], run.base_env)
    try:
        wait_listening(p, run.slave_port, START_TIMEOUT)
    except ScenarioFailure:
        if p.popen.returncode == SKIP_EXIT:
            lines = [ln for ln in tail(p.log_path, 5).splitlines() if ln.strip()]
            raise ScenarioSkip(f"the binary cannot run a slave broker (exit status {SKIP_EXIT}"
                               + (f": {lines[-1].strip()[:200]}" if lines else "") + ")")
        raise
    wait_slave_routable(run.namesrv_addr, run.slave_addr, p, REGISTER_TIMEOUT,
                        any_id="controller" in run.scenario.needs)


def start_controller(run: Run) -> None:
    port = int(run.controller_addr.rsplit(":", 1)[1])
    p = start_proc(run, "controller", [run.binary, "controller", "-c", run.controller_conf], run.base_env)
    wait_listening(p, port, START_TIMEOUT)


def controller_mode(run: Run, props: Dict[str, object]) -> Dict[str, object]:
    """A broker's properties in controller mode: the controllers, not brokerId/brokerRole, decide."""
    props = {k: v for k, v in props.items() if k not in ("brokerId", "brokerRole", "haMasterAddress")}
    props.update({"enableControllerMode": "true", "controllerAddr": run.controller_addr})
    return props


def find_proc(run: Run, label: str) -> Optional[Proc]:
    for p in reversed(run.procs):
        if p.label == label:
            return p
    return None


def ctl_command(run: Run, line: str) -> str:
    """Execute one control command for the scenario (see the module docstring)."""
    words = line.split()
    if len(words) != 2 or words[0] not in ("restart", "stop", "start", "kill") \
            or words[1] not in ("broker", "namesrv", "slave"):
        return f"error unknown command {line!r}"
    verb, label = words
    if label not in run.scenario.needs:
        return f"error this scenario does not run a {label}"
    t = time.monotonic()
    with run.lock:
        proc = find_proc(run, label)
        running = proc is not None and proc.popen.poll() is None
        try:
            if verb in ("stop", "restart", "kill") and running:
                if verb == "kill":
                    proc.popen.kill()
                    proc.popen.wait(timeout=STOP_GRACE)
                else:
                    stop_proc(proc)
                run.procs.remove(proc)
                run.ctl_log.append(f"{time.time() - run.t0:8.3f}s {verb}: {label} pid {proc.popen.pid} "
                                   f"exited with {proc.popen.returncode}")
            if verb in ("stop", "kill"):
                return f"ok {label} stopped"
            if verb == "start" and running:
                return f"error {label} is already running"
            {"broker": start_broker, "slave": start_slave, "namesrv": start_namesrv}[label](run)
            new = find_proc(run, label)
            run.ctl_log.append(f"{time.time() - run.t0:8.3f}s {verb}: {label} pid {new.popen.pid} up "
                               f"after {time.monotonic() - t:.1f}s")
            return f"ok {label} running pid {new.popen.pid} after {time.monotonic() - t:.1f}s"
        except ScenarioFailure as e:
            run.ctl_log.append(f"{time.time() - run.t0:8.3f}s {verb} {label} failed: {e}")
            return f"error {e}"
        except (OSError, subprocess.SubprocessError) as e:
            return f"error {type(e).__name__}: {e}"


class CtlServer:
    """The RINGMQ_CTL Unix socket: one command line in, one answer line out, per connection."""

    def __init__(self, run: Run):
        self.run = run
        self.path = os.path.join(run.tmp, "ctl.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(4)
        self.sock.settimeout(0.2)
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True, name="ctl")
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop_ev.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        with c:
            c.settimeout(10.0)
            data = b""
            try:
                while not data.endswith(b"\n") and len(data) < 1000:
                    chunk = c.recv(1000)
                    if not chunk:
                        break
                    data += chunk
                answer = ctl_command(self.run, data.decode("utf-8", "replace").strip())
                c.settimeout(None)
                c.sendall(answer.encode() + b"\n")
            except OSError:
                pass

    def close(self) -> None:
        self.stop_ev.set()
        try:
            self.sock.close()
        except OSError:
            pass


def run_scenario(sc: Scenario, binary: Optional[str], bin_desc: str, keep: bool,
                 capture: bool = False) -> Tuple[bool, str, Run]:
    tmp = tempfile.mkdtemp(prefix=f"ringmq-conf-{sc.name}-")
    run = Run(sc, tmp, binary=binary)
    ok, reason = False, ""
    ctl: Optional[CtlServer] = None
    try:
        if sc.meta_error:
            raise ScenarioFailure(sc.meta_error)
        if sc.needs and binary is None:
            raise ScenarioFailure(f"ringmq binary not found ({bin_desc}); build it or set RINGMQ_BIN")
        argv = client_argv(sc)
        home = os.path.join(tmp, "home")
        data = os.path.join(tmp, "data")
        run.client_log_dir = os.path.join(tmp, "clientlogs")
        for d in (home, data, run.client_log_dir):
            os.makedirs(d, exist_ok=True)
        base_env = dict(os.environ)
        base_env["HOME"] = home
        run.base_env = base_env
        taken: set = set()
        env = dict(base_env)
        env.update({"SCENARIO_NAME": sc.name, "SCENARIO_TMP": tmp, "CONFORMANCE_ROOT": ROOT,
                    "CONFORMANCE_PYTHON": VENV_PY if os.path.exists(VENV_PY) else sys.executable,
                    "PYTHONPATH": LIB + os.pathsep + base_env.get("PYTHONPATH", ""),
                    "PYTHONUNBUFFERED": "1", "NODE_PATH": NODE_MODULES,
                    "ROCKETMQ_CLIENT_LOG_DIR": run.client_log_dir, "RINGMQ_DATA_DIR": data})
        if binary:
            env["RINGMQ_BIN"] = binary
        if "namesrv" in sc.needs:
            run.namesrv_port = free_port(taken)
            run.namesrv_addr = f"127.0.0.1:{run.namesrv_port}"
            run.namesrv_conf = os.path.join(tmp, "namesrv.conf")
            write_conf(run.namesrv_conf, {"listenPort": run.namesrv_port})
            start_namesrv(run)
            env["NAMESRV_ADDR"] = run.namesrv_addr
        if "controller" in sc.needs:
            port = free_port(taken)
            run.controller_addr = f"127.0.0.1:{port}"
            run.controller_conf = os.path.join(tmp, "controller.conf")
            write_conf(run.controller_conf, {
                "listenPort": port, "controllerStorePath": os.path.join(tmp, "controller-store")})
            start_controller(run)
        if "broker" in sc.needs:
            # listenPort-2 (VIP channel) and listenPort+1 (HA) must be free too.
            run.broker_port = free_port(taken, also_free=(-2, 1))
            run.broker_addr = f"127.0.0.1:{run.broker_port}"
            run.broker_conf = os.path.join(tmp, "broker.conf")
            run.grpc_port = free_port(taken)
            props: Dict[str, object] = {
                "brokerClusterName": CLUSTER, "brokerName": BROKER_NAME, "brokerId": 0,
                "listenPort": run.broker_port, "haListenPort": run.broker_port + 1, "brokerIP1": "127.0.0.1",
                "namesrvAddr": run.namesrv_addr, "storePathRootDir": data,
                "autoCreateTopicEnable": "true",
                "ringmq.grpc.port": run.grpc_port,
                # 64 MiB segments instead of 1 GiB: a scenario writes a few MiB, and CI
                # machines may have little disk to spare for pre-allocated files.
                "mappedFileSizeCommitLog": 64 * 1024 * 1024,
            }
            if "slave" in sc.needs:
                props["slaveReadEnable"] = "true"
            props.update(sc.broker_conf)
            if "controller" in sc.needs:
                props = controller_mode(run, props)
            write_conf(run.broker_conf, props)
            start_broker(run)
            env["BROKER_ADDR"] = run.broker_addr
            env["BROKER_ADDR_REAL"] = run.broker_addr
            env["GRPC_ENDPOINT"] = f"127.0.0.1:{run.grpc_port}"
        if "slave" in sc.needs:
            run.slave_port = free_port(taken, also_free=(-2, 1))
            run.slave_addr = f"127.0.0.1:{run.slave_port}"
            run.slave_conf = os.path.join(tmp, "slave.conf")
            slave_data = os.path.join(tmp, "data-slave")
            os.makedirs(slave_data, exist_ok=True)
            slave_props: Dict[str, object] = {
                "brokerClusterName": CLUSTER, "brokerName": BROKER_NAME, "brokerId": 1,
                "brokerRole": "SLAVE", "listenPort": run.slave_port, "haListenPort": run.slave_port + 1,
                "brokerIP1": "127.0.0.1", "namesrvAddr": run.namesrv_addr, "storePathRootDir": slave_data,
                "haMasterAddress": f"127.0.0.1:{run.broker_port + 1}", "slaveReadEnable": "true",
                "autoCreateTopicEnable": "true", "mappedFileSizeCommitLog": 64 * 1024 * 1024,
                "ringmq.grpc.enable": "false",
            }
            if "controller" in sc.needs:
                slave_props = controller_mode(run, slave_props)
            write_conf(run.slave_conf, slave_props)
            start_slave(run)
            env["SLAVE_ADDR"] = run.slave_addr
            env["SLAVE_ADDR_REAL"] = run.slave_addr
        if sc.needs:
            ctl = CtlServer(run)
            env["RINGMQ_CTL"] = ctl.path
        if capture and sc.needs:
            start_capture(run, env)
        ok, reason = run_client(run, argv, env)
        with run.lock:
            for proc in run.procs:
                rc = proc.popen.poll()
                if rc is not None:
                    ok, reason = False, f"{proc.label} exited with code {rc} during the scenario" + (
                        f" (client: {reason})" if reason else "")
                    run.skipped = False
    except ScenarioFailure as e:
        ok, reason = False, str(e)
    except ScenarioSkip as e:
        ok, reason = False, str(e)
        run.skipped = True
    finally:
        if ctl is not None:
            ctl.close()
        for px in run.proxies:
            px.stop()
        with run.lock:
            for proc in reversed(run.procs):
                stop_proc(proc)
        run.log_errors = scan_log_errors(run)
        if (ok or run.skipped) and not keep:
            shutil.rmtree(tmp, ignore_errors=True)
        elif not keep:
            run.dropped_store = sum(drop_big_store_files(os.path.join(tmp, d)) for d in ("data", "data-slave"))
    return ok, reason, run


def drop_big_store_files(data_dir: str, limit: int = 8 * 1024 * 1024) -> int:
    """Delete store files above `limit` bytes (pre-allocated CommitLog segments: 64 MiB-1 GiB each)
    from a kept failure directory, so failures do not fill the disk; --keep keeps everything.
    Returns the number of bytes freed."""
    freed = 0
    for root, _dirs, files in os.walk(data_dir):
        for name in files:
            p = os.path.join(root, name)
            try:
                size = os.path.getsize(p)
                if size > limit:
                    os.remove(p)
                    freed += size
            except OSError:
                pass
    return freed


ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


def scan_log_errors(run: Run, limit: int = 5) -> List[str]:
    """ERROR-level and panic lines from the ringmq processes' logs (shown even for passing
    scenarios: a broker can pass a scenario while logging that something went wrong)."""
    out: List[str] = []
    for label in ("namesrv", "broker", "slave"):
        path = os.path.join(run.tmp, f"{label}.log")
        try:
            with open(path, "rb") as fh:
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            continue
        for line in text.splitlines():
            plain = ANSI_RE.sub("", line)
            if " ERROR " in plain or "panicked at" in plain:
                out.append(f"{label}: {plain.strip()[:300]}")
    return out[:limit] + ([f"... and {len(out) - limit} more"] if len(out) > limit else [])


def start_capture(run: Run, env: Dict[str, str]) -> None:
    """Put logging proxies in front of the namesrv (rewriting broker addresses) and the broker."""
    lock = threading.Lock()
    rewriters = []
    for label, real, var in (("broker", run.broker_addr, "BROKER_ADDR"), ("slave", run.slave_addr, "SLAVE_ADDR")):
        if real:
            px = wireproxy.WireProxy(label, real, t0=run.t0, sink=run.frames, lock=lock).start()
            run.proxies.append(px)
            env[var] = px.addr
            rewriters.append(wireproxy.addr_rewriter(real, px.addr))

    def rewrite_all(body: bytes) -> bytes:
        for f in rewriters:
            body = f(body)
        return body

    rewrite = rewrite_all if rewriters else None
    ns_px = wireproxy.WireProxy("namesrv", run.namesrv_addr, t0=run.t0, rewrite=rewrite, sink=run.frames,
                                lock=lock).start()
    run.proxies.append(ns_px)
    env["NAMESRV_ADDR"] = ns_px.addr
    env["NAMESRV_ADDR_REAL"] = run.namesrv_addr


def run_client(run: Run, argv: List[str], env: Dict[str, str]) -> Tuple[bool, str]:
    sc = run.scenario
    out_path = os.path.join(run.tmp, "client.out")
    with open(out_path, "wb") as out:
        p = subprocess.Popen(argv, cwd=run.tmp, env=env, stdin=subprocess.DEVNULL, stdout=out,
                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout=sc.timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            kill_session(p)   # the client's own helpers (e.g. a fake broker) go with it
            try:
                p.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                pass
    with open(out_path, "rb") as fh:
        run.client_output = fh.read().decode("utf-8", "replace")
    if rc is None:
        return False, f"timed out after {sc.timeout:.0f}s"
    lines = [ln for ln in run.client_output.strip().splitlines() if ln.strip()]
    if rc == SKIP_EXIT or (lines and lines[-1].startswith("SKIP:")):
        skip_lines = [ln for ln in lines if ln.startswith("SKIP:")]
        run.skipped = True
        why = skip_lines[-1][len("SKIP:"):].strip() if skip_lines else f"exit status {rc}"
        return False, why[:300]
    if rc != 0:
        lines = [ln for ln in run.client_output.strip().splitlines() if ln.strip()]
        fail_lines = [ln for ln in lines if ln.startswith(("FAIL", "AssertionError", "Error"))]
        last = (fail_lines or lines or [f"exit status {rc}"])[-1].strip()
        if last.startswith("FAIL:"):
            last = last[len("FAIL:"):].strip()
        return False, f"{last[:300]} (exit status {rc})"
    return True, ""


def print_failure_details(run: Run, capture_lines: int = CAPTURE_LINES) -> None:
    def block(title: str, text: str) -> None:
        print(f"    --- {title} ---")
        for line in (text.rstrip() or "(empty)").splitlines():
            print(f"    | {line}")

    shown = set()
    for proc in run.procs:
        shown.add(proc.log_path)
        block(f"{proc.label} log ({proc.log_path})", tail(proc.log_path))
    for label in ("namesrv", "broker", "slave"):   # also processes stopped through RINGMQ_CTL
        path = os.path.join(run.tmp, f"{label}.log")
        if path not in shown and os.path.exists(path):
            block(f"{label} log ({path}, process stopped)", tail(path))
    if run.client_output or os.path.exists(os.path.join(run.tmp, "client.out")):
        block("client output", "\n".join(run.client_output.splitlines()[-LOG_TAIL * 2:]))
    for path in sorted(glob.glob(os.path.join(run.client_log_dir or "/nonexistent", "*")))[:3]:
        block(f"client library log {os.path.basename(path)}", tail(path, 30))
    if run.ctl_log:
        block("process control (RINGMQ_CTL)", "\n".join(run.ctl_log))
    if run.proxies:
        with run.lock:
            frames = sorted(run.frames, key=lambda c: c.t)
        lines = wireproxy.describe(frames, run.t0)
        for px in run.proxies:
            lines.extend(f"proxy error: {e}" for e in px.errors[:20])
        wire = os.path.join(run.tmp, "wire.txt")
        try:
            with open(wire, "w", encoding="utf-8") as fh:
                fh.write("\n".join(lines) + "\n")
        except OSError as e:
            wire = f"(cannot write {wire}: {e})"
        quiet = wireproxy.quiet_filter(frames)
        qlines = wireproxy.describe(quiet, run.t0)
        shown = qlines[-capture_lines:] if capture_lines > 0 else []
        head = (f"(last {len(shown)} lines of {len(quiet)} frames without heartbeats, offset calls, trace "
                f"sends and empty pulls; all {len(frames)} frames in {wire})\n")
        block(f"wire capture: {len(frames)} frames through the proxies", head + "\n".join(shown))
    elif run.scenario.needs:
        print("    (re-run with --capture to see the frames exchanged)")
    dropped = (f"; store files over 8 MiB ({run.dropped_store // (1024 * 1024)} MiB) deleted, --keep keeps them"
               if run.dropped_store else "")
    print(f"    (scenario files kept in {run.tmp}{dropped})")


# ---- main --------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description="Run ringmq conformance scenarios with real clients.")
    ap.add_argument("-k", dest="filters", action="append", default=[],
                    help="only scenarios whose name contains this substring (repeatable: any)")
    ap.add_argument("--list", action="store_true", help="list scenarios and what they need")
    ap.add_argument("--keep", action="store_true", help="keep temp dirs of passing scenarios")
    ap.add_argument("-v", "--verbose", action="store_true", help="print client output of passing scenarios")
    ap.add_argument("--bin", help="ringmq binary (overrides RINGMQ_BIN)")
    ap.add_argument("--dir", default=SCENARIOS, help="scenario directory (default: scenarios/)")
    ap.add_argument("--capture", action="store_true",
                    default=os.environ.get("RINGMQ_CONF_CAPTURE", "") not in ("", "0"),
                    help="interpose logging proxies; print decoded frames of failed scenarios")
    ap.add_argument("--capture-lines", type=int, default=CAPTURE_LINES,
                    help=f"how many capture lines to print per failure (default {CAPTURE_LINES})")
    args = ap.parse_args()

    scenarios = [s for s in discover(args.dir) if not args.filters or any(f in s.name for f in args.filters)]
    if args.list:
        for s in scenarios:
            print(f"{s.name:40s} needs: {' '.join(s.needs) or 'none':20s} timeout: {s.timeout:.0f}s"
                  + (f"  [expect unsupported: {s.expect_unsupported}]" if s.expect_unsupported else "")
                  + (f"  [error: {s.meta_error}]" if s.meta_error else ""))
        return 0

    binary, bin_desc = find_binary(args.bin)
    if binary is None and any(s.needs for s in scenarios):
        print(f"error: ringmq binary not found: {bin_desc}. Build it (cargo build --release) "
              f"or set RINGMQ_BIN=/path/to/ringmq.", flush=True)

    def on_sigterm(*_: object) -> None:
        raise KeyboardInterrupt()

    signal.signal(signal.SIGTERM, on_sigterm)
    passed = failed = skipped = 0
    try:
        for sc in scenarios:
            ok, reason, run = run_scenario(sc, binary, bin_desc, args.keep, capture=args.capture)
            if ok:
                passed += 1
                note = (f" (marked 'expect: unsupported: {sc.expect_unsupported}' but passes now: "
                        f"remove the mark)") if sc.expect_unsupported else ""
                print(f"ok {sc.name}{note}", flush=True)
                for e in run.log_errors:
                    print(f"    ! {e}")
                if args.verbose and run.client_output.strip():
                    for line in run.client_output.rstrip().splitlines():
                        print(f"    | {line}")
            elif run.skipped:
                skipped += 1
                print(f"skip {sc.name}: {reason}", flush=True)
                if args.verbose and run.client_output.strip():
                    for line in run.client_output.rstrip().splitlines():
                        print(f"    | {line}")
            elif sc.expect_unsupported and not sc.meta_error:
                skipped += 1
                print(f"skip {sc.name}: {sc.expect_unsupported} (expected unsupported; failed with: {reason})",
                      flush=True)
                if args.verbose:
                    print_failure_details(run, args.capture_lines)
            else:
                failed += 1
                print(f"FAIL {sc.name}: {reason}", flush=True)
                print_failure_details(run, args.capture_lines)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        failed += 1
    if not scenarios:
        print("no scenarios matched", flush=True)
    print(f"{passed} passed, {failed} failed, {skipped} skipped", flush=True)
    return 1 if failed or not scenarios else 0


if __name__ == "__main__":
    sys.exit(main())
