"""Runs namesrv, broker and controller exactly as their units' ExecStart lines say (binary and config
paths swapped for test ones) with NOTIFY_SOCKET on a socket of ours, and checks that each
sends READY=1 once serving, WATCHDOG=1 at least twice, and STOPPING=1 then exits 0 on
SIGTERM. Usage: notify_check.py BIN UNIT_DIR WORK_DIR"""

import os
import shlex
import signal
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def exec_start(unit_path, instance=None):
    for line in open(unit_path, encoding="utf-8"):
        if line.startswith("ExecStart="):
            cmd = line[len("ExecStart="):].strip()
            return cmd.replace("%i", instance) if instance else cmd
    raise SystemExit(f"no ExecStart in {unit_path}")


def run_unit(name, argv, work, timeout_s=60):
    sock_path = os.path.join(work, f"{name}.notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    sock.settimeout(1.0)
    env = dict(os.environ, NOTIFY_SOCKET=sock_path, WATCHDOG_USEC="1000000", HOME=work)
    log = open(os.path.join(work, f"{name}.log"), "wb")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    seen = []
    try:
        deadline = time.time() + timeout_s
        while time.time() < deadline and seen.count("WATCHDOG=1") < 2:
            if proc.poll() is not None:
                break
            try:
                seen.append(sock.recv(4096).decode())
            except socket.timeout:
                pass
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        try:
            while True:
                seen.append(sock.recv(4096).decode())
        except (socket.timeout, BlockingIOError, OSError):
            pass
    finally:
        if proc.poll() is None:
            proc.kill()
        sock.close()
    problems = []
    if "READY=1" not in seen:
        problems.append("no READY=1")
    elif seen.index("READY=1") != 0:
        problems.append(f"READY=1 not first: {seen[:3]}")
    if seen.count("WATCHDOG=1") < 2:
        problems.append(f"only {seen.count('WATCHDOG=1')} WATCHDOG=1")
    if "STOPPING=1" not in seen:
        problems.append("no STOPPING=1")
    if code != 0:
        problems.append(f"exit code {code}")
    if problems:
        print(f"{name}: {', '.join(problems)}; log:", file=sys.stderr)
        print(open(os.path.join(work, f"{name}.log"), errors="replace").read()[-4000:], file=sys.stderr)
        return False
    return True


def main():
    binary, unit_dir, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    ns_port, broker_port, controller_port = free_port(), free_port(), free_port()
    conf_dir = os.path.join(work, "etc")
    os.makedirs(conf_dir, exist_ok=True)
    with open(os.path.join(conf_dir, "namesrv.conf"), "w") as f:
        f.write(f"listenPort={ns_port}\nkvConfigPath={work}/kvConfig.json\n")
    with open(os.path.join(conf_dir, "broker-t.conf"), "w") as f:
        f.write(f"brokerName=broker-t\nlistenPort={broker_port}\nnamesrvAddr=127.0.0.1:{ns_port}\n"
                f"storePathRootDir={work}/store\nringmq.grpc.port=0\n")

    with open(os.path.join(conf_dir, "controller.conf"), "w") as f:
        f.write(f"listenPort={controller_port}\ncontrollerStorePath={work}/controller\n")

    def argv_of(unit, instance=None):
        cmd = exec_start(os.path.join(unit_dir, unit), instance)
        cmd = cmd.replace("/usr/bin/ringmq", binary).replace("/etc/ringmq", conf_dir)
        return shlex.split(cmd)

    ok = True
    ns_argv = argv_of("ringmq-namesrv.service")
    # The broker registers with a live namesrv; keep one up (not under test) meanwhile.
    bg = subprocess.Popen(ns_argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          env=dict(os.environ, HOME=work))
    try:
        time.sleep(1.0)
        ok &= run_unit("broker", argv_of("ringmq-broker@.service", "broker-t"), work)
    finally:
        bg.send_signal(signal.SIGTERM)
        try:
            bg.wait(timeout=20)
        except subprocess.TimeoutExpired:
            bg.kill()
    ok &= run_unit("namesrv", ns_argv, work)
    ok &= run_unit("controller", argv_of("ringmq-controller.service"), work)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
