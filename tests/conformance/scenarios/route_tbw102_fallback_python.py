# needs: namesrv
# timeout: 60
"""route_tbw102_fallback_python — Python client (C++ core) falls back to TBW102's route for a new topic.

A stand-in broker registers with ringmq's name server carrying only TBW102 (perm 7, the
auto-create template). The producer sends to a topic nobody registered: the name server must
answer TOPIC_NOT_EXIST (17) for it and a route for TBW102, so the client sends to the TBW102
broker asking it to auto-create the topic (defaultTopic c=TBW102). Passes when the send reports
SEND_OK and arrives at the registered broker with the new topic name. Fails if the name server
invents a route for the unknown topic elsewhere, or cannot route TBW102.
"""

import os

from fake_broker import start_registered_broker
import pyclient as pc
import remoting as rm
from scenario import check, env, run


def body(cleanups):
    ns = env("NAMESRV_ADDR")
    topic = f"AutoCreatePy-{os.getpid()}"
    broker = start_registered_broker(ns, [], queues=4)
    cleanups.append(broker.stop)
    code, route, resp = rm.get_route(ns, topic)
    check(code == rm.TOPIC_NOT_EXIST,
          f"namesrv answered code {code} (route {route}) for an unregistered topic; want {rm.TOPIC_NOT_EXIST}")

    producer = pc.start_producer(f"PG-tbw-py-{os.getpid()}", ns)
    cleanups.append(producer.shutdown)
    r = producer.send_sync(pc.message(topic, "auto-create me", tags="TagT"))
    check(r.status == pc.SendStatus.OK, f"send status {r.status!r}, want OK")
    s = broker.wait_for_send(lambda s: s.topic == topic, 10.0)
    check(s is not None, f"the send never reached the TBW102 broker at {broker.broker_addr} "
                         f"(broker saw codes {broker.codes_seen()})")
    check(s.ext.get("c") == "TBW102", f"defaultTopic (c) is {s.ext.get('c')!r}, want 'TBW102'")
    check(s.messages[0]["body"] == b"auto-create me", f"body {s.messages[0]['body']!r}")
    return f"unknown topic {topic} sent via TBW102 route to {broker.broker_addr} (queue {s.queue_id})"


if __name__ == "__main__":
    run(body)
