# needs: namesrv broker
# timeout: 120
"""tag_filter_python — a C++-core consumer subscribed to `TagA || TagB` gets exactly the TagA/TagB messages.

30 messages are sent round the tags TagA, TagB, TagC, `taga` (case differs) and no tag at all to
a 4-queue topic, after a consumer subscribed with `TagA || TagB` was primed (with TagA probes).
Passes when the consumer receives every TagA and TagB message exactly once and nothing else,
and when a raw pull of each queue with the same subscription (broker-side filter, independent
of the C++ core's own client-side tag re-check) returns only TagA/TagB records, all of them.
Fails if a subscribed message is lost, or the broker delivers non-matching tags (the client
would hide that; the raw pull shows it).
"""

import flows
import pyclient as pc
import rawmq
from scenario import check, env, run

TAGS = ["TagA", "TagB", "TagC", "taga", None]
COUNT = 30
SUB = "TagA || TagB"


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic = flows.topic_for("TagFilter")
    rawmq.ensure_topic(broker, ns, topic, queues=4)
    col = flows.Collector("tagged")
    flows.start_consumer(cleanups, flows.group_for("tagfilter"), ns, topic, col, expression=SUB)
    producer = flows.start_producer(cleanups, flows.group_for("tagfilter", "PG"), ns)
    flows.prime(producer, topic, col, queues=4, tags="TagA")

    want = set()
    for i in range(COUNT):
        tag = TAGS[i % len(TAGS)]
        b = f"m{i} tag={tag}".encode()
        r = producer.send_sync(pc.message(topic, b, tags=tag))
        check(r.status == pc.SendStatus.OK, f"send {i}: {r.status!r}")
        if tag in ("TagA", "TagB"):
            want.add(b)
    col.wait_count(len(want), 30.0)
    col.quiet_for(3.0, 15.0)
    got = [r["body"] for r in col.real()]
    extra = sorted(b.decode() for b in got if b not in want)
    check(not extra, f"consumer subscribed to {SUB!r} received non-matching messages: {extra}")
    missing = sorted(b.decode() for b in want if b not in got)
    check(not missing, f"matching messages never consumed: {missing}")
    check(len(got) == len(want), f"{len(got)} deliveries for {len(want)} matching messages (duplicates)")

    filtered = [m for m in rawmq.pull_all(broker, topic, queues=4, subscription=SUB)
                if not m["body"].startswith(flows.PROBE_PREFIX)]
    wrong = sorted(m["body"].decode() for m in filtered if m["properties"].get("TAGS") not in ("TagA", "TagB"))
    check(not wrong, f"broker-side filter: a raw pull with subscription {SUB!r} returned {wrong}")
    check(sorted(m["body"] for m in filtered) == sorted(want),
          f"broker-side filter: raw pull returned {len(filtered)} records, want the {len(want)} TagA/TagB ones")
    return f"{len(want)} of {COUNT} messages matched {SUB!r}; client and broker-side filter agree"


if __name__ == "__main__":
    run(body, timeout=110)
