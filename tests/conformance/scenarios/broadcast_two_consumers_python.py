# needs: namesrv broker
# timeout: 150
"""broadcast_two_consumers_python — two C++-core broadcasting consumers of one group both get every message.

Two push consumers in the same group with message model BROADCASTING (distinct instance names,
so distinct client ids) subscribe to a 4-queue topic and are primed until each has received a
probe from every queue; then 20 messages are sent. Passes when each consumer receives all 20
exactly once (broadcast: every consumer gets every queue, offsets are per client). Fails if the
broker or rebalance splits the queues between them like clustering, or a consumer misses or
repeats messages.
"""

import flows
import pyclient as pc
import rawmq
from scenario import check, env, run

COUNT = 20


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic = flows.topic_for("Broadcast")
    group = flows.group_for("broadcast")
    rawmq.ensure_topic(broker, ns, topic, queues=4)
    cols = [flows.Collector("bc-1"), flows.Collector("bc-2")]
    for i, col in enumerate(cols):
        flows.start_consumer(cleanups, group, ns, topic, col, broadcast=True, instance=f"bcast{i + 1}")
    producer = flows.start_producer(cleanups, flows.group_for("broadcast", "PG"), ns)
    for col in cols:
        flows.prime(producer, topic, col, queues=4)

    bodies = [f"broadcast {i}".encode() for i in range(COUNT)]
    for b in bodies:
        r = producer.send_sync(pc.message(topic, b, tags="TagBc"))
        check(r.status == pc.SendStatus.OK, f"send {b!r}: {r.status!r}")
    for col in cols:
        col.wait_count(COUNT, 30.0)
    for col in cols:
        col.quiet_for(2.0, 10.0)
    for col in cols:
        got = [r["body"] for r in col.real()]
        missing = [b.decode() for b in bodies if b not in got]
        check(not missing, f"consumer {col.name} missed {len(missing)} of {COUNT}: {missing[:8]} "
                           f"(got from queues {sorted({r['queue_id'] for r in col.real()})})")
        check(len(got) == COUNT, f"consumer {col.name}: {len(got)} deliveries for {COUNT} messages")
    return f"both broadcasting consumers received all {COUNT} messages once"


if __name__ == "__main__":
    run(body, timeout=140)
