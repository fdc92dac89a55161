# needs: namesrv broker
# timeout: 120
"""send_oneway_python — C++-core oneway sends (SendMessageOneway) are all stored and consumed.

A clustering push consumer is primed on a 4-queue topic; the producer then fires 20 oneway sends
(no response awaited; the C++ core does not set the oneway flag bit, see fixtures/README.md
quirk 2) with distinct bodies, tag TagO and a key each. Passes when the consumer receives all
20 exactly once with their bodies, tags and keys, and a raw pull finds exactly those 20 stored.
Fails if any oneway send is lost, duplicated or altered (e.g. a broker that drops requests it
takes for oneway, or whose late replies confuse the client).
"""

import flows
import pyclient as pc
import rawmq
from scenario import check, env, run

COUNT = 20


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic = flows.topic_for("Oneway")
    rawmq.ensure_topic(broker, ns, topic, queues=4)
    col = flows.Collector("push")
    flows.start_consumer(cleanups, flows.group_for("oneway"), ns, topic, col)
    producer = flows.start_producer(cleanups, flows.group_for("oneway", "PG"), ns)
    flows.prime(producer, topic, col, queues=4)

    bodies = {f"oneway body {i} ✓".encode(): i for i in range(COUNT)}
    for b, i in bodies.items():
        producer.send_oneway(pc.message(topic, b, tags="TagO", keys=f"ow-{i}"))

    got = col.wait_count(COUNT, 30.0)
    col.quiet_for(2.0, 10.0)
    got = col.real()
    seen = [r["body"] for r in got]
    missing = sorted(bodies[b] for b in bodies if b not in seen)
    check(not missing, f"oneway messages never consumed: {missing} (got {len(got)}/{COUNT})")
    dups = sorted({bodies.get(b, -1) for b in seen if seen.count(b) > 1})
    check(not dups, f"oneway messages consumed more than once: {dups}")
    check(len(got) == COUNT, f"consumer got {len(got)} messages, {COUNT} sent")
    for r in got:
        i = bodies[r["body"]]
        check(r["tags"] == "TagO" and r["keys"] == f"ow-{i}", f"msg {i}: tags {r['tags']!r} keys {r['keys']!r}")
    stored = [m for m in rawmq.pull_all(broker, topic, queues=4) if not m["body"].startswith(flows.PROBE_PREFIX)]
    check(sorted(m["body"] for m in stored) == sorted(bodies), f"raw pull finds {len(stored)} stored messages, want the {COUNT} sent")
    return f"{COUNT} oneway sends stored and consumed once each"


if __name__ == "__main__":
    run(body, timeout=110)
