#!/usr/bin/env python3
"""fake_ringmq.py — a test double for the `ringmq` binary, to check run.py and the scenarios.

NOT ringmq and not used by CI. It answers to `fake_ringmq.py namesrv -c namesrv.conf` and
`fake_ringmq.py broker -c broker.conf` like ringmq is expected to, backed by
lib/fake_server.FakeServer: the namesrv keeps REGISTER_BROKER registrations and routes from them
(TOPIC_NOT_EXIST for unknown topics); the broker is selftest/fake_rich_broker.RichFakeBroker
(topics, filters, delay, retry/DLQ, transactions, a store kept across restarts under
storePathRootDir, `messageDelayLevel` from broker.conf) and registers its topics with
namesrvAddr every 10 s and whenever they change.

Deliberate faults, to see that scenarios fail (env FAKE_RINGMQ_BREAK):
  client-route   routes answered to third-party clients (request version != 479, i.e. not our
                 own lib/remoting.py) point at a port where nothing listens
  queues         every route announces one more write queue than registered
  crash          the namesrv exits 0.3 s after it starts listening
  and the broker faults listed in selftest/fake_rich_broker.py (no-filter, drop-props, no-delay,
  early-delay, no-dlq, forget-offsets, reorder, no-tx, no-max-size, truncate-body, dup);
  several may be given, comma-separated.
A broker.conf with brokerRole=SLAVE makes it exit with status 77 (run.py: skip the scenario).
Usage: RINGMQ_BIN=tests/conformance/selftest/fake_ringmq.py python3 tests/conformance/run.py
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import remoting as rm  # noqa: E402
from fake_server import FakeServer  # noqa: E402
from fake_rich_broker import RichFakeBroker  # noqa: E402


def read_props(path: str) -> dict:
    props = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if line and not line.startswith(("#", "!")) and "=" in line:
                k, v = line.split("=", 1)
                props[k.strip()] = v.strip()
    return props


def route_filter(mode: set):
    def f(frame: rm.Frame, route: dict) -> dict:
        if "client-route" in mode and frame.header.get("version") != rm.OUR_VERSION:
            for bd in route["brokerDatas"]:
                bd["brokerAddrs"] = {k: "127.0.0.1:9" for k in bd["brokerAddrs"]}
        if "queues" in mode:
            for q in route["queueDatas"]:
                q["writeQueueNums"] += 1
                q["readQueueNums"] += 1
        return route
    return f


def main() -> int:
    if len(sys.argv) != 4 or sys.argv[1] not in ("namesrv", "broker") or sys.argv[2] != "-c":
        print("usage: fake_ringmq.py namesrv|broker -c FILE", file=sys.stderr)
        return 2
    role, props = sys.argv[1], read_props(sys.argv[3])
    mode = os.environ.get("FAKE_RINGMQ_BREAK", "")
    breaks = {w.strip() for w in mode.split(",") if w.strip()}
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    log = lambda s: print(f"[fake-{role}] {s}", flush=True)  # noqa: E731
    port = int(props.get("listenPort", "9876" if role == "namesrv" else "10911"))
    if role == "namesrv":
        srv = FakeServer(namesrv=True, broker=False, namesrv_port=port, route_filter=route_filter(breaks), log=log)
        srv.start()
        log(f"listening on {srv.namesrv_addr} (break mode: {mode or 'none'})")
        if "crash" in breaks:
            stop.wait(0.3)
            log("crashing on purpose")
            os._exit(3)
        stop.wait(600)
    elif props.get("brokerRole", "").upper() == "SLAVE":
        # No replication here: say so with status 77, which run.py reports as a skip.
        log("cannot run as a slave (brokerRole=SLAVE): no replication in this test double")
        return 77
    else:
        wake = threading.Event()
        srv = RichFakeBroker(broker_port=port, cluster=props.get("brokerClusterName", "DefaultCluster"),
                             broker_name=props.get("brokerName", "broker-a"), log=log,
                             store_dir=props.get("storePathRootDir", os.path.join(os.getcwd(), "store")),
                             delay_levels=props.get("messageDelayLevel",
                                                    "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"),
                             breaks=breaks, on_topics_changed=wake.set,
                             tx_check_interval_ms=int(props.get("transactionCheckInterval", "30000")),
                             tx_timeout_ms=int(props.get("transactionTimeOut", "6000")))
        srv.start()
        log(f"listening on {srv.broker_addr} (break modes: {sorted(breaks) or 'none'})")
        deadline = time.monotonic() + 600
        while not stop.is_set() and time.monotonic() < deadline:
            wake.clear()
            try:
                rm.register_broker(props["namesrvAddr"], cluster=srv.cluster, broker_name=srv.broker_name,
                                   broker_addr=srv.broker_addr, topics=srv.topic_configs())
            except (OSError, rm.ProtocolError, TimeoutError) as e:
                log(f"register failed: {e}")
            for _ in range(100):
                if stop.is_set() or wake.is_set():
                    break
                time.sleep(0.1)
        srv.save()
    srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
