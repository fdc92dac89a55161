# needs: namesrv broker
# timeout: 120
"""long_poll_wakeup_python — an idle C++-core push consumer gets a new message promptly (long polling wakes up on arrival).

Push consumers park a PULL_MESSAGE at the broker (sysFlag SUSPEND, suspendTimeoutMillis 15000)
when their queue is empty; the broker must answer it as soon as a message arrives (Java
re-checks on every arrival; its fallback scan is every 5 s). After priming, the consumer is left
idle for 6 s (its pulls are parked), then 5 messages are sent one at a time, 1.5 s apart, each
waited for. Passes when each arrives within 1,000 ms of its send (median under 300 ms). Fails if
a parked pull is only answered on its timeout or a periodic scan (seconds of latency).
"""

import statistics
import time

import flows
import pyclient as pc
import rawmq
from scenario import check, env, run


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic = flows.topic_for("LongPoll")
    rawmq.ensure_topic(broker, ns, topic, queues=4)
    col = flows.Collector("idle")
    flows.start_consumer(cleanups, flows.group_for("longpoll"), ns, topic, col)
    producer = flows.start_producer(cleanups, flows.group_for("longpoll", "PG"), ns)
    flows.prime(producer, topic, col, queues=4)
    time.sleep(6.0)
    lat = []
    for i in range(5):
        b = f"wake {i}".encode()
        t = int(time.time() * 1000)
        r = producer.send_sync(pc.message(topic, b))
        check(r.status == pc.SendStatus.OK, f"send {i}: {r.status!r}")
        got = col.wait_count(1, 20.0, match=lambda x, b=b: x["body"] == b)
        check(got, f"message {i} not delivered within 20 s")
        lat.append(got[0]["recv_ms"] - t)
        time.sleep(1.5)
    check(max(lat) <= 1000, f"delivery latencies after idling {lat} ms: a parked pull was not woken on arrival")
    check(statistics.median(lat) <= 300, f"median delivery latency {statistics.median(lat)} ms ({lat})")
    return f"idle consumer woke up in {lat} ms"


if __name__ == "__main__":
    run(body, timeout=110)
