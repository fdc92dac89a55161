#!/usr/bin/env python3
"""listener.py — frame-capture listener: a scripted loopback namesrv + broker that records fixtures.

Owns the fixture file format under tests/conformance/fixtures/<client>/:
  NNN-<code>.bin   the frame exactly as received (4-byte length word included), byte for byte
  NNN-<code>.json  readable sibling: decoded header, exact header text, body (text or hex),
                   decoded body where known (heartbeat JSON, batch items, properties), raw hex
  index.json       one entry per fixture (file, program, role, code, sizes, sha256) plus how many
                   further frames per code were seen but not kept
NNN is the arrival order within the client's capture session (three digits, from 001).

The server side is lib/fake_server.py (namesrv role answers GET_ROUTEINFO_BY_TOPIC with a route
to its own broker role; broker role answers heartbeats, sends, pulls...). Stdlib only.

Standalone use (then point any client at the printed namesrv address):
  python3 tests/conformance/capture/listener.py --out /tmp/fx --duration 60
capture/run_capture.py drives the real clients through it and rewrites fixtures/.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import threading
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import remoting as rm  # noqa: E402
from fake_server import FakeServer, Received  # noqa: E402


def _body_view(code: int, frame: rm.Frame) -> Dict[str, Any]:
    """Readable view of a request body: JSON / text / hex, plus decoded structure we know."""
    body = frame.body
    out: Dict[str, Any] = {}
    if not body:
        return out
    try:
        text = body.decode("utf-8")
        printable = all(ch.isprintable() or ch in "\n\r\t" for ch in text)
    except UnicodeDecodeError:
        text, printable = None, False
    if text is not None and printable:
        out["body_text"] = text
        try:
            out["body_json"] = json.loads(text)
        except json.JSONDecodeError:
            pass
    else:
        out["body_hex"] = body.hex()
    batch = (frame.ext_str("m") or frame.ext_str("batch") or "").lower() in ("true", "1")
    if code in (rm.SEND_MESSAGE, rm.SEND_MESSAGE_V2, rm.SEND_BATCH_MESSAGE) and (batch or code == rm.SEND_BATCH_MESSAGE):
        try:
            out["batch_items"] = [
                {"flag": m["flag"], "body_text": m["body"].decode("utf-8", "replace"),
                 "properties": m["properties"]}
                for m in rm.split_batch_body(body)]
        except (rm.ProtocolError, ValueError) as e:
            out["batch_items_error"] = str(e)
    return out


class FixtureRecorder:
    """Writes every received frame of one client session into `out_dir` (see module doc)."""

    def __init__(self, out_dir: str, client: str, max_per_code: int = 6):
        self.out_dir = out_dir
        self.client = client
        self.max_per_code = max_per_code
        self.program = "standalone"
        self.entries: List[Dict[str, Any]] = []
        self.dropped: Dict[str, Dict[str, int]] = {}
        self._per_code: Dict[tuple, int] = {}
        self._lock = threading.Lock()
        self._n = 0
        os.makedirs(out_dir, exist_ok=True)

    def set_program(self, name: str) -> None:
        with self._lock:
            self.program = name

    def __call__(self, rec: Received) -> None:
        f = rec.frame
        with self._lock:
            key = (self.program, f.code)
            seen = self._per_code.get(key, 0)
            self._per_code[key] = seen + 1
            if seen >= self.max_per_code:
                d = self.dropped.setdefault(self.program, {})
                d[str(f.code)] = d.get(str(f.code), 0) + 1
                return
            self._n += 1
            n = self._n
            program = self.program
        base = f"{n:03d}-{f.code}"
        with open(os.path.join(self.out_dir, base + ".bin"), "wb") as fh:
            fh.write(f.raw)
        try:
            stype, hlen, hb, body = rm.split_frame_bytes(f.raw)
        except rm.ProtocolError:
            stype, hlen, hb, body = -1, 0, b"", b""
        entry = {
            "file": base + ".bin", "seq": n, "client": self.client, "program": program,
            "role": rec.role, "connection": rec.conn,
            "code": f.code, "code_name": rm.CODE_NAMES.get(f.code, "?"),
            "flag": f.flag, "oneway": f.is_oneway, "opaque": f.opaque,
            "language": f.header.get("language"), "version": f.header.get("version"),
            "serialize_type": stype, "frame_bytes": len(f.raw), "header_length": hlen,
            "body_length": len(body), "sha256": hashlib.sha256(f.raw).hexdigest(),
        }
        detail = dict(entry)
        detail["header_text"] = hb.decode("utf-8", "replace")
        detail["header"] = f.header
        props = f.ext_str("i") if f.code in (rm.SEND_MESSAGE_V2, rm.SEND_BATCH_MESSAGE) else f.ext_str("properties")
        if props:
            detail["properties_decoded"] = rm.parse_properties(props)
        detail.update(_body_view(f.code, f))
        detail["raw_hex"] = f.raw.hex()
        with open(os.path.join(self.out_dir, base + ".json"), "w", encoding="utf-8") as fh:
            json.dump(detail, fh, indent=2, ensure_ascii=False, sort_keys=False)
            fh.write("\n")
        with self._lock:
            self.entries.append(entry)

    def write_index(self, extra: Optional[Dict[str, Any]] = None) -> str:
        with self._lock:
            idx = {"client": self.client, "fixtures": sorted(self.entries, key=lambda e: e["seq"]),
                   "not_kept_beyond_max_per_code": self.dropped, "max_per_code": self.max_per_code}
        if extra:
            idx.update(extra)
        path = os.path.join(self.out_dir, "index.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(idx, fh, indent=2, ensure_ascii=False)
            fh.write("\n")
        return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="fixture directory to write")
    ap.add_argument("--client", default="unknown", help="client name recorded in the index")
    ap.add_argument("--namesrv-port", type=int, default=0)
    ap.add_argument("--broker-port", type=int, default=0)
    ap.add_argument("--duration", type=float, default=120.0, help="stop after this many seconds")
    ap.add_argument("--max-per-code", type=int, default=6)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()

    rec = FixtureRecorder(args.out, args.client, args.max_per_code)
    log = (lambda s: print(f"[listener] {s}", file=sys.stderr, flush=True)) if args.verbose else None
    srv = FakeServer(namesrv_port=args.namesrv_port, broker_port=args.broker_port, on_frame=rec, log=log)
    srv.start()
    print(f"READY namesrv={srv.namesrv_addr} broker={srv.broker_addr}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait(args.duration)
    srv.stop()
    rec.write_index()
    for e in srv.errors:
        print(f"[listener] error: {e}", file=sys.stderr)
    print(f"recorded {len(rec.entries)} frames into {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
