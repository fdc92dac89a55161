# needs: namesrv broker
# timeout: 180
"""restart_keeps_offsets_python — committed consumer offsets and messages survive a broker restart (C++ core).

A clustering consumer (group G) consumes a first batch of 10 messages on a 4-queue topic and is
shut down (the C++ core commits its offsets with UPDATE_CONSUMER_OFFSET on shutdown); the
scenario waits until the broker reports committed offset = max offset on every queue, then asks
run.py to restart the broker (SIGTERM, start again on the same store). After the restart the
raw max and committed offsets must be unchanged; a second batch of 10 is sent and a new
consumer in group G is started. Passes when it receives exactly the second batch, each message
once: nothing of the first batch (or the probes) is delivered again, nothing is lost. Fails if
offsets or messages are lost on restart (re-delivery or a jump past new messages).
"""

import time

import ctl
import flows
import pyclient as pc
import rawmq
from scenario import check, env, run

COUNT = 10


def committed(broker, group, topic):
    return [rawmq.committed_offset(broker, group, topic, q) for q in range(4)]


def maxes(broker, topic):
    return [rawmq.max_offset(broker, topic, q) for q in range(4)]


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic = flows.topic_for("Restart")
    group = flows.group_for("restart")
    rawmq.ensure_topic(broker, ns, topic, queues=4)

    col1 = flows.Collector("before-restart")
    c1 = pc.new_push_consumer(group, ns)
    c1.subscribe(topic, col1.on_message, "*")
    c1.start()
    p1 = pc.start_producer(flows.group_for("restart", "PG"), ns)
    try:
        flows.prime(p1, topic, col1, queues=4)
        first = [f"first {i}".encode() for i in range(COUNT)]
        for b in first:
            r = p1.send_sync(pc.message(topic, b, tags="TagR"))
            check(r.status == pc.SendStatus.OK, f"send {b!r}: {r.status!r}")
        got = col1.wait_count(COUNT, 30.0)
        check(len(got) == COUNT, f"first batch: consumed {len(got)}/{COUNT} before the restart")
    finally:
        p1.shutdown()
        c1.shutdown()

    before_max = maxes(broker, topic)
    deadline = time.monotonic() + 15
    before = committed(broker, group, topic)
    while before != before_max and time.monotonic() < deadline:
        time.sleep(0.5)
        before = committed(broker, group, topic)
    check(before == before_max, f"after the consumer shut down, committed offsets {before} != max offsets {before_max}")

    print(ctl.restart_broker(), flush=True)
    after_max = maxes(broker, topic)
    after = committed(broker, group, topic)
    check(after_max == before_max, f"max offsets changed across the restart: {before_max} -> {after_max}")
    check(after == before, f"committed offsets changed across the restart: {before} -> {after}")

    # A producer of its own instance: the core's client instance named DEFAULT outlives the
    # first producer (the trace producer of the first consumer keeps it) and may hold the
    # route it fetched while the broker was down, from which the core reports "No route
    # info" without asking the name server again.
    p2 = pc.Producer(flows.group_for("restart2", "PG"), timeout=5000)
    pc.set_producer_instance_name(p2, "after-restart")
    p2.set_name_server_address(ns)
    p2.start()
    cleanups.append(p2.shutdown)
    second = [f"second {i}".encode() for i in range(COUNT)]
    for b in second:
        r = pc.send_sync_while_no_route(p2, pc.message(topic, b, tags="TagR"))
        check(r.status == pc.SendStatus.OK, f"send after restart {b!r}: {r.status!r}")
    col2 = flows.Collector("after-restart")
    flows.start_consumer(cleanups, group, ns, topic, col2, instance="after-restart")
    col2.wait_count(COUNT, 40.0)
    col2.quiet_for(3.0, 15.0)
    bodies = [r["body"] for r in col2.records]
    again = sorted({b.decode() for b in bodies if b in first or b.startswith(flows.PROBE_PREFIX)})
    check(not again, f"after the restart the group re-received {len(again)} committed messages: {again[:8]}")
    missing = [b.decode() for b in second if b not in bodies]
    check(not missing, f"after the restart, messages never consumed: {missing}")
    check(len(bodies) == COUNT, f"after the restart: {len(bodies)} deliveries for {COUNT} new messages")
    return f"offsets {before} kept across the restart; only the {COUNT} new messages were consumed"


if __name__ == "__main__":
    run(body, timeout=170)
