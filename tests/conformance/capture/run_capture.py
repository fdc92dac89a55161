#!/usr/bin/env python3
"""run_capture.py — regenerates tests/conformance/fixtures/<client>/ from the real clients.

Owns the capture plan: which client programs (capture/programs/) run which steps against the
scripted listener (capture/listener.py + lib/fake_server.py). For each client it wipes the old
fixture files of that client, then runs every step as its own client process against a fresh
listener (one FixtureRecorder per client, so numbering is continuous), then writes index.json.

Usage: python3 tests/conformance/capture/run_capture.py [--client python-cpp|alions] [-k STEP --out DIR]
Needs install.sh to have run. Loopback only; every step is killed after --step-timeout seconds.
Captured bytes vary between runs (timestamps, pids, signatures); commit one capture.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "lib"))
sys.path.insert(0, HERE)
from fake_server import FakeServer  # noqa: E402
from listener import FixtureRecorder  # noqa: E402

VENV_PY = os.path.join(ROOT, ".venv", "bin", "python")
NODE_MODULES = os.path.join(ROOT, "node", "node_modules")

PLAN = {
    "python-cpp": {
        "cmd": [VENV_PY, os.path.join(HERE, "programs", "python_cpp.py")],
        "steps": ["send_sync", "send_oneway", "send_orderly", "send_batch", "send_compressed",
                  "send_delay", "transaction", "push_consumer", "push_orderly", "push_broadcast",
                  "consume_retry", "producer_heartbeat"],
    },
    "alions": {
        "cmd": ["node", os.path.join(HERE, "programs", "alions.js")],
        "steps": ["send", "send_sharding", "send_delay", "send_compressed",
                  "push_consumer", "push_sql", "push_broadcast", "consume_retry"],
    },
}


def capture_client(client: str, only: str | None, step_timeout: float, verbose: bool,
                   out_base: str) -> bool:
    plan = PLAN[client]
    out_dir = os.path.join(out_base, client)
    os.makedirs(out_dir, exist_ok=True)
    for p in glob.glob(os.path.join(out_dir, "*.bin")) + glob.glob(os.path.join(out_dir, "*.json")):
        os.remove(p)
    rec = FixtureRecorder(out_dir, client)
    ok = True
    runs = []
    for step in plan["steps"]:
        if only and only not in step:
            continue
        rec.set_program(step)
        tmp = tempfile.mkdtemp(prefix=f"ringmq-capture-{client}-")
        env = dict(os.environ)
        env.update({"HOME": tmp, "ROCKETMQ_CLIENT_LOG_DIR": os.path.join(tmp, "clientlogs"),
                    "NODE_PATH": NODE_MODULES})
        log = (lambda s: print(f"    [srv] {s}", flush=True)) if verbose else None
        srv = FakeServer(on_frame=rec, log=log).start()
        t0 = time.monotonic()
        try:
            proc = subprocess.run(plan["cmd"] + [step, srv.namesrv_addr], cwd=tmp, env=env,
                                  capture_output=True, text=True, timeout=step_timeout)
            rc, out = proc.returncode, (proc.stdout + proc.stderr).strip()
        except subprocess.TimeoutExpired as e:
            rc, out = "timeout", ((e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""))
        finally:
            time.sleep(0.3)  # let in-flight frames land
            srv.stop()
        dt = time.monotonic() - t0
        codes = srv.codes_seen()
        status = "ok" if rc == 0 else f"FAIL(rc={rc})"
        print(f"  {client}/{step}: {status} in {dt:.1f}s, frames {codes}")
        if rc != 0 or verbose:
            print("    " + out.replace("\n", "\n    "))
        for e in srv.errors:
            print(f"    server error: {e}")
        runs.append({"program": step, "exit": rc, "seconds": round(dt, 1), "codes": codes})
        ok = ok and rc == 0
        shutil.rmtree(tmp, ignore_errors=True)
    rec.write_index({"runs": runs, "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    print(f"  {client}: {len(rec.entries)} fixtures in {os.path.relpath(out_dir, os.getcwd())}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--client", choices=sorted(PLAN), action="append")
    ap.add_argument("-k", dest="only", help="only steps containing this substring")
    ap.add_argument("--step-timeout", type=float, default=60.0)
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "fixtures"),
                    help="base directory (default: the committed fixtures/)")
    args = ap.parse_args()
    if args.only and os.path.abspath(args.out) == os.path.join(ROOT, "fixtures"):
        ap.error("-k captures a subset: give --out DIR so the committed fixtures stay whole")
    ok = True
    for client in args.client or sorted(PLAN):
        ok = capture_client(client, args.only, args.step_timeout, args.verbose, args.out) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
