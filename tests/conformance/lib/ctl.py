"""ctl.py — ask run.py to stop/start/restart ringmq processes in the middle of a scenario (stdlib only).

Owns the client side of run.py's RINGMQ_CTL Unix socket: one command line out, one answer line
back (`ok ...` or `error ...`). `restart_broker()` returns once the new broker listens and the
name server routes TBW102 to it again (run.py waits for that before answering). The same verbs
work on `slave` (the brokerId 1 process of `needs: ... slave`); `broker` is the master.
"""

from __future__ import annotations

import os
import socket


class CtlError(AssertionError):
    pass


def command(line: str, timeout: float = 60.0) -> str:
    path = os.environ.get("RINGMQ_CTL")
    if not path:
        raise CtlError("RINGMQ_CTL is not set: run the scenario through tests/conformance/run.py")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(line.encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    answer = data.decode("utf-8", "replace").strip()
    if not answer.startswith("ok"):
        raise CtlError(f"run.py control {line!r} answered {answer!r}")
    return answer


def restart_broker(timeout: float = 60.0) -> str:
    return command("restart broker", timeout)


def stop_broker(timeout: float = 30.0) -> str:
    return command("stop broker", timeout)


def start_broker(timeout: float = 60.0) -> str:
    return command("start broker", timeout)


def kill_broker(timeout: float = 30.0) -> str:
    return command("kill broker", timeout)


def stop_slave(timeout: float = 30.0) -> str:
    return command("stop slave", timeout)


def start_slave(timeout: float = 60.0) -> str:
    return command("start slave", timeout)
