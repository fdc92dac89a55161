#!/usr/bin/env python3
"""cpp_tool.py — the real C++-core client (rocketmq-client-python 2.0.0) as a helper process.

Owns cross-client scenarios' C++ side when the scenario itself is written for another client
(e.g. an ali-ons scenario that needs messages produced — and compressed — by the C++ core).
Run with the conformance venv python; one JSON request on stdin, one JSON answer on stdout:

  {"op": "send", "namesrv": "127.0.0.1:9876", "group": "PG", "topic": "T",
   "mode": "sync" | "oneway" | "batch" | "orderly",      (default sync)
   "compress_over": 4096,                                 (optional: SetProducerCompressMsgBodyOverHowmuch)
   "messages": [{"body": "text" | "body_b64": "..." | "body_pattern": "ab", "body_len": 8192,
                 "tags": "TagA", "keys": "k1 k2", "props": {"k": "v"}, "delay_level": 3,
                 "sharding_key": "order-1"}]}
  -> {"ok": true, "results": [{"status": 0, "msg_id": "...", "offset": 12}, ...]}

  {"op": "consume", "namesrv": ..., "group": "CG", "topic": "T", "expression": "*", "count": 5,
   "timeout": 30, "props": ["color"]}
  -> {"ok": true, "messages": [{"body_b64": ..., "tags": ..., "keys": ..., "id": ..., ...}]}
Errors: {"ok": false, "error": "..."} and exit status 1. Bounded by an internal watchdog.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def body_of(spec: dict) -> bytes:
    if "body_b64" in spec:
        return base64.b64decode(spec["body_b64"])
    if "body_pattern" in spec:
        pat = spec["body_pattern"].encode("utf-8")
        n = int(spec["body_len"])
        return (pat * (n // len(pat) + 1))[:n]
    return str(spec.get("body", "")).encode("utf-8")


def do_send(req: dict) -> dict:
    import pyclient as pc
    mode = req.get("mode", "sync")
    producer = pc.Producer(req["group"], orderly=(mode == "orderly"), timeout=int(req.get("timeout_ms", 5000)))
    producer.set_name_server_address(req["namesrv"])
    if "compress_over" in req:
        pc._dll.SetProducerCompressMsgBodyOverHowmuch.argtypes = [ctypes.c_void_p, ctypes.c_int]
        pc._dll.SetProducerCompressMsgBodyOverHowmuch(producer._handle, int(req["compress_over"]))
    if "max_message_size" in req:
        producer.set_max_message_size(int(req["max_message_size"]))
    producer.start()
    results = []
    try:
        msgs = []
        for spec in req["messages"]:
            m = pc.message(req["topic"], body_of(spec), tags=spec.get("tags"), keys=spec.get("keys"),
                           props=spec.get("props"))
            if spec.get("delay_level"):
                m.set_delay_time_level(int(spec["delay_level"]))
            msgs.append((spec, m))
        if mode == "batch":
            r = pc.send_batch(producer, [m for _, m in msgs])
            results.append({"status": int(r.status), "msg_id": r.msg_id, "offset": r.offset})
        else:
            for spec, m in msgs:
                if mode == "oneway":
                    producer.send_oneway(m)
                    results.append({"status": 0, "msg_id": None, "offset": None})
                elif mode == "orderly":
                    r = producer.send_orderly_with_sharding_key(m, spec.get("sharding_key", "k"))
                    results.append({"status": int(r.status), "msg_id": r.msg_id, "offset": r.offset})
                else:
                    r = producer.send_sync(m)
                    results.append({"status": int(r.status), "msg_id": r.msg_id, "offset": r.offset})
    finally:
        producer.shutdown()
    return {"ok": True, "results": results}


def do_consume(req: dict) -> dict:
    import flows
    cleanups: list = []
    col = flows.Collector("cpp_tool", props=req.get("props", []))
    try:
        flows.start_consumer(cleanups, req["group"], req["namesrv"], req["topic"], col,
                             expression=req.get("expression", "*"))
        got = col.wait_count(int(req.get("count", 1)), float(req.get("timeout", 30)))
        col.quiet_for(1.0, 5.0)
        got = col.real()
    finally:
        for c in reversed(cleanups):
            try:
                c()
            except Exception:  # noqa: BLE001
                pass
    out = []
    for r in got:
        d = {k: v for k, v in r.items() if k != "body"}
        d["body_b64"] = base64.b64encode(r["body"]).decode()
        d["body_len"] = len(r["body"])
        out.append(d)
    return {"ok": True, "messages": out, "errors": col.errors}


def main() -> int:
    def watchdog() -> None:
        print(json.dumps({"ok": False, "error": "cpp_tool.py watchdog: no result within its time limit"}), flush=True)
        os._exit(1)

    req = json.loads(sys.stdin.read())
    t = threading.Timer(float(req.get("watchdog", 80)), watchdog)
    t.daemon = True
    t.start()
    started = time.monotonic()
    try:
        if req.get("op") == "send":
            res = do_send(req)
        elif req.get("op") == "consume":
            res = do_consume(req)
        else:
            res = {"ok": False, "error": f"unknown op {req.get('op')!r}"}
    except Exception as e:  # noqa: BLE001 - report any client failure as data
        res = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    res["seconds"] = round(time.monotonic() - started, 3)
    print(json.dumps(res, ensure_ascii=False), flush=True)
    os._exit(0 if res.get("ok") else 1)


if __name__ == "__main__":
    main()
