#!/usr/bin/env python3
"""fake_broker.py — a stand-in broker registered with a real name server, for route scenarios.

Owns `start_registered_broker` (in-process use by Python scenarios) and a CLI for scenarios in
other languages. The broker is lib/fake_server.FakeServer with only its broker role: it accepts
heartbeats and sends and records them. It registers itself with the given name server through
REGISTER_BROKER (103) exactly like a Java master (RegisterBrokerBody JSON), so a client that
resolves a topic route from that name server sends to it — and only then.

CLI (JSON lines on stdout, one per event; exits on stdin EOF, SIGTERM or after --duration):
  fake_broker.py --namesrv 127.0.0.1:9876 --topic T [--topic T2] [--queues 4] [--no-tbw102]
  -> {"event":"ready","broker_addr":"127.0.0.1:P","broker_name":"...","cluster":"..."}
  -> {"event":"frame","code":34,"flag":0,"ext":{...}}                      for every request
  -> {"event":"send","topic":"T","queue_id":1,"batch":false,"msg_ids":[..],"queue_offset":0,
      "messages":[{"flag":0,"body":"<utf-8 or hex>","properties":{...}}]}  for every send
  -> {"event":"error","message":"..."} when registration fails (then exit status 2)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import Iterable, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remoting as rm  # noqa: E402
from fake_server import FakeServer, Received  # noqa: E402

REREGISTER_EVERY = 10.0  # seconds; a name server forgets a broker after 120 s without it


def register(srv: FakeServer, namesrv: str, topics: Iterable[dict]) -> None:
    topics = list(topics)
    # A real broker always registers its system topics too. A first registration carrying
    # exactly one topic is refused by a 5.x name server ("register broker failed": it takes it
    # for a single-topic update from a broker it does not know), so never send just one.
    if len(topics) < 2:
        topics.append(rm.topic_config("SELF_TEST_TOPIC", queues=1, perm=6))
    rm.register_broker(namesrv, cluster=srv.cluster, broker_name=srv.broker_name,
                       broker_addr=srv.broker_addr, topics=topics)


def start_registered_broker(namesrv: str, topics: List[str], *, queues: int = 4,
                            broker_name: Optional[str] = None, cluster: str = "FakeCluster",
                            with_tbw102: bool = True, on_frame=None,
                            wait_routable: float = 10.0) -> FakeServer:
    """Start a fake broker, register it with `namesrv`, and wait until the name server routes
    the first topic (or TBW102) to it. Raises AssertionError with a readable message if the
    name server refuses the registration or never routes to it."""
    name = broker_name or f"fake-broker-{os.getpid()}"
    srv = FakeServer(namesrv=False, broker=True, broker_name=name, cluster=cluster,
                     queues=queues, on_frame=on_frame).start()
    tcs = [rm.topic_config(t, queues=queues) for t in topics]
    if with_tbw102:
        tcs.append(rm.topic_config("TBW102", queues=8, perm=7))
    try:
        register(srv, namesrv, tcs)
    except (OSError, rm.ProtocolError, TimeoutError) as e:
        srv.stop()
        raise AssertionError(f"REGISTER_BROKER to the name server {namesrv} failed: {e}") from e
    probe = topics[0] if topics else "TBW102"
    route = rm.wait_for_route(namesrv, probe, lambda r: srv.broker_addr in rm.route_broker_addrs(r),
                              timeout=wait_routable)
    if route is None or srv.broker_addr not in rm.route_broker_addrs(route):
        srv.stop()
        raise AssertionError(f"name server {namesrv} did not route {probe!r} to the registered "
                             f"broker {srv.broker_addr} within {wait_routable:.0f}s; last route: {route}")
    srv._registered_topics = tcs  # for re-registration by the CLI
    return srv


def _text_or_hex(b: bytes) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return "hex:" + b.hex()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--namesrv", required=True)
    ap.add_argument("--topic", action="append", default=[])
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--broker-name")
    ap.add_argument("--cluster", default="FakeCluster")
    ap.add_argument("--no-tbw102", action="store_true")
    ap.add_argument("--duration", type=float, default=300.0)
    args = ap.parse_args()

    out_lock = threading.Lock()

    def emit(obj: dict) -> None:
        with out_lock:
            sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
            sys.stdout.flush()

    def on_frame(rec: Received) -> None:
        f = rec.frame
        emit({"event": "frame", "code": f.code, "flag": f.flag, "ext": f.ext})

    try:
        srv = start_registered_broker(args.namesrv, args.topic, queues=args.queues,
                                      broker_name=args.broker_name, cluster=args.cluster,
                                      with_tbw102=not args.no_tbw102, on_frame=on_frame)
    except AssertionError as e:
        emit({"event": "error", "message": str(e)})
        return 2
    emit({"event": "ready", "broker_addr": srv.broker_addr, "broker_name": srv.broker_name,
          "cluster": srv.cluster})

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def watch_stdin() -> None:  # parent gone => stdin EOF => stop
        try:
            while sys.stdin.readline():
                pass
        except (OSError, ValueError):
            pass
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    reported = 0
    deadline = time.monotonic() + args.duration
    next_register = time.monotonic() + REREGISTER_EVERY
    while not stop.is_set() and time.monotonic() < deadline:
        stop.wait(0.05)
        with srv._cv:
            new = srv.sends[reported:]
        for s in new:
            emit({"event": "send", "code": s.code, "topic": s.topic, "queue_id": s.queue_id,
                  "batch": s.batch, "msg_ids": s.msg_ids, "queue_offset": s.queue_offset,
                  "messages": [{"flag": m["flag"], "body": _text_or_hex(m["body"]),
                                "properties": m["properties"]} for m in s.messages]})
        reported += len(new)
        if time.monotonic() >= next_register:
            next_register = time.monotonic() + REREGISTER_EVERY
            try:
                register(srv, args.namesrv, srv._registered_topics)
            except (OSError, rm.ProtocolError, TimeoutError) as e:
                emit({"event": "error", "message": f"re-register failed: {e}"})
    srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
