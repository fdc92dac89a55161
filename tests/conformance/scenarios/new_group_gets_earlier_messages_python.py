# needs: namesrv broker
# timeout: 120
"""new_group_gets_earlier_messages_python — a brand-new consumer group receives messages sent to a fresh topic before it started (C++ core).

The C++ push consumer starts with CONSUME_FROM_LAST_OFFSET (the wrapper cannot change it). For
a group the broker has no offset for, QUERY_CONSUMER_OFFSET must answer SUCCESS with offset 0
when the queue's min offset is 0 and its first message is still in memory (headers.md §3.1; a
Java broker does), so the consumer starts at the beginning instead of at the max offset. 8
messages are sent to a new 4-queue topic, then a consumer of a new group is started. Passes
when it receives all 8 exactly once. Fails if the broker answers QUERY_NOT_FOUND for a fresh
queue (the client then jumps to the max offset and silently skips the 8 messages).
"""

import flows
import pyclient as pc
import rawmq
from scenario import check, env, run

COUNT = 8


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic = flows.topic_for("NewGroup")
    rawmq.ensure_topic(broker, ns, topic, queues=4)
    producer = flows.start_producer(cleanups, flows.group_for("newgroup", "PG"), ns)
    bodies = [f"early {i}".encode() for i in range(COUNT)]
    for b in bodies:
        r = producer.send_sync(pc.message(topic, b, tags="TagE"))
        check(r.status == pc.SendStatus.OK, f"send {b!r}: {r.status!r}")
    group = flows.group_for("newgroup")
    answers = [rawmq.committed_offset(broker, group, topic, q) for q in range(4)]
    col = flows.Collector("late-starter")
    flows.start_consumer(cleanups, group, ns, topic, col)
    col.wait_count(COUNT, 40.0)
    col.quiet_for(2.0, 10.0)
    got = [r["body"] for r in col.real()]
    missing = [b.decode() for b in bodies if b not in got]
    check(not missing, f"the new group never received {len(missing)} messages sent before it started: {missing} "
                       f"(QUERY_CONSUMER_OFFSET for the unknown group answered {answers}; None = QUERY_NOT_FOUND)")
    check(len(got) == COUNT, f"{len(got)} deliveries for {COUNT} messages")
    return f"new group started at offset 0 (broker answered {answers}) and got all {COUNT} earlier messages"


if __name__ == "__main__":
    run(body, timeout=110)
