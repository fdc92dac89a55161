# needs: namesrv
# timeout: 60
"""route_resolve_python — the Python client (C++ core 2.1.0) resolves a topic route from ringmq's namesrv.

A stand-in broker (lib/fake_broker.py) registers itself with ringmq's name server through
REGISTER_BROKER with topic T (3 read/write queues) and TBW102. The real producer, given only
NAMESRV_ADDR, sends 6 messages to T. Passes when every send reports SEND_OK, all 6 arrive at the
registered broker's address for topic T with the right bodies/tags/keys, and they spread over
exactly queues {0,1,2} (so the client saw the broker address *and* writeQueueNums from the
route). Fails if the name server routes nowhere, to a wrong address, or with wrong queue counts:
then the sends never arrive or land on other queues.
"""

import os

from fake_broker import start_registered_broker
import pyclient as pc
from scenario import check, env, run

QUEUES = 3
COUNT = 6


def body(cleanups):
    ns = env("NAMESRV_ADDR")
    topic = f"RouteResolvePy-{os.getpid()}"
    broker = start_registered_broker(ns, [topic], queues=QUEUES)
    cleanups.append(broker.stop)
    producer = pc.start_producer(f"PG-route-py-{os.getpid()}", ns)
    cleanups.append(producer.shutdown)

    results = []
    for i in range(COUNT):
        # The first send may meet the core's connect race (see send_sync_while_no_route);
        # every send still has to reach the registered broker below.
        r = pc.send_sync_while_no_route(producer, pc.message(topic, f"route body {i}", tags="TagR", keys=f"rk{i}"))
        check(r.status == pc.SendStatus.OK, f"send {i}: status {r.status!r}, want OK")
        results.append(r)

    arrived = []
    for i in range(COUNT):
        s = broker.wait_for_send(lambda s, i=i: s.topic == topic and s.messages[0]["body"] == f"route body {i}".encode(), 10.0)
        check(s is not None, f"send {i} never reached the broker registered at {broker.broker_addr} "
                             f"(broker saw codes {broker.codes_seen()})")
        arrived.append(s)
    for i, (r, s) in enumerate(zip(results, arrived)):
        props = s.messages[0]["properties"]
        check(props.get("TAGS") == "TagR", f"send {i}: TAGS {props.get('TAGS')!r}")
        check(props.get("KEYS") == f"rk{i}", f"send {i}: KEYS {props.get('KEYS')!r}")
        check(r.msg_id == props.get("UNIQ_KEY"), f"send {i}: client msg id {r.msg_id} != UNIQ_KEY {props.get('UNIQ_KEY')}")
    queues = sorted({s.queue_id for s in arrived})
    check(queues == list(range(QUEUES)), f"sends used queues {queues}, route announced {QUEUES} write queues")
    return f"{COUNT} sends routed via {ns} to {broker.broker_addr}, queues {queues}"


if __name__ == "__main__":
    run(body)
