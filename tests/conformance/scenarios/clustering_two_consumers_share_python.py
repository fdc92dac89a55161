# needs: namesrv broker
# timeout: 150
"""clustering_two_consumers_share_python — two C++-core consumers of one clustering group split the queues; each message is consumed once by the group.

Two push consumers (distinct instance names) join the same CLUSTERING group on a 4-queue topic;
the broker must list both in GET_CONSUMER_LIST_BY_GROUP (and notify them of the change) so that
each one's rebalance takes 2 of the 4 queues. Once both have received probes from 2 queues each
(4 in total), 40 messages are sent. Passes when every message is consumed exactly once by the
group, both consumers consumed some, and no queue was served to both. Fails if the broker
reports only one consumer (one consumer takes all queues while the other also pulls: duplicates)
or loses messages.
"""

import time

import flows
import pyclient as pc
import rawmq
from scenario import check, env, run

COUNT = 40


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic = flows.topic_for("Share")
    group = flows.group_for("share")
    rawmq.ensure_topic(broker, ns, topic, queues=4)
    cols = [flows.Collector("c1"), flows.Collector("c2")]
    for i, col in enumerate(cols):
        flows.start_consumer(cleanups, group, ns, topic, col, instance=f"share{i + 1}")
    producer = flows.start_producer(cleanups, flows.group_for("share", "PG"), ns)

    # Probe until the two consumers together cover all 4 queues, each with some, and the
    # split has been stable for a few seconds (rebalance runs every 20 s in the C++ core, and
    # right after a consumer joins, both may briefly hold the same queue).
    deadline = time.monotonic() + 75
    stable_since, last_split, sent = None, None, 0
    while time.monotonic() < deadline:
        for _ in range(4):
            producer.send_sync(pc.message(topic, flows.PROBE_PREFIX + str(sent).encode()))
            sent += 1
        time.sleep(1.0)
        recent = [{r["queue_id"] for r in c.probes()[-8:]} for c in cols]
        split = (frozenset(recent[0]), frozenset(recent[1]))
        ok = recent[0] and recent[1] and not (recent[0] & recent[1]) and len(recent[0] | recent[1]) == 4
        if ok and split == last_split:
            stable_since = stable_since or time.monotonic()
            if time.monotonic() - stable_since >= 3:
                break
        else:
            stable_since = None
        last_split = split
    check(stable_since, f"the two consumers never settled on disjoint halves of the queues within 75 s "
                        f"(recent probe queues: c1 {sorted(last_split[0])}, c2 {sorted(last_split[1])})")

    bodies = [f"shared {i}".encode() for i in range(COUNT)]
    for b in bodies:
        r = producer.send_sync(pc.message(topic, b, tags="TagS"))
        check(r.status == pc.SendStatus.OK, f"send {b!r}: {r.status!r}")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sum(len(c.real()) for c in cols) < COUNT:
        time.sleep(0.5)
    for c in cols:
        c.quiet_for(2.0, 10.0)
    got = [r["body"] for c in cols for r in c.real()]
    missing = [b.decode() for b in bodies if b not in got]
    check(not missing, f"messages consumed by neither consumer: {missing[:8]}")
    dups = sorted({b.decode() for b in got if got.count(b) > 1})
    check(not dups, f"messages consumed twice by the group: {dups[:8]}")
    q1 = {r["queue_id"] for r in cols[0].real()}
    q2 = {r["queue_id"] for r in cols[1].real()}
    check(cols[0].real() and cols[1].real(), f"one consumer got nothing: c1 {len(cols[0].real())}, c2 {len(cols[1].real())}")
    check(not (q1 & q2), f"queues {sorted(q1 & q2)} were served to both consumers")
    return f"group split the queues {sorted(q1)} / {sorted(q2)}; {COUNT} messages consumed once"


if __name__ == "__main__":
    run(body, timeout=140)
