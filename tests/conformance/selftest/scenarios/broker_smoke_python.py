# needs: namesrv broker
# timeout: 60
"""broker_smoke_python — self-test of run.py's namesrv+broker path (selftest only, not a conformance check).

With RINGMQ_BIN=selftest/fake_ringmq.py: the runner must have started both processes, waited for
the broker to be routable, and exported BROKER_ADDR; the real Python producer then sends to the
broker through the name server's TBW102 route.
"""

import os

import pyclient as pc
import remoting as rm
from scenario import check, env, run


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    code, route, _ = rm.get_route(ns, "TBW102")
    check(code == 0 and broker in rm.route_broker_addrs(route), f"TBW102 route {code} {route}")
    check(os.path.isdir(env("RINGMQ_DATA_DIR")), "RINGMQ_DATA_DIR missing")
    p = pc.start_producer("PG-smoke", ns)
    cleanups.append(p.shutdown)
    r = p.send_sync(pc.message(f"Smoke-{os.getpid()}", "smoke"))
    check(r.status == pc.SendStatus.OK, f"status {r.status!r}")
    return f"sent through {ns} to {broker}"


if __name__ == "__main__":
    run(body)
