# needs: namesrv broker
# timeout: 60
"""ctl_restart_python — self-test: RINGMQ_CTL restarts the broker mid-scenario (selftest only, not a conformance check).

Asks run.py to restart the broker, then checks the namesrv routes TBW102 to it again and it
answers GET_MAX_OFFSET; `stop broker` then `start broker` must work too.
"""

import ctl
import rawmq
import remoting as rm
from scenario import check, env, run


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    print(ctl.restart_broker())
    code, route, _ = rm.get_route(ns, "TBW102")
    check(code == 0 and broker in rm.route_broker_addrs(route), f"after restart: TBW102 route {code} {route}")
    rawmq.max_offset(broker, "TBW102", 0)
    print(ctl.stop_broker())
    print(ctl.start_broker())
    rawmq.max_offset(broker, "TBW102", 0)
    return "restart, stop and start through RINGMQ_CTL"


if __name__ == "__main__":
    run(body)
