# needs: namesrv broker
# timeout: 120
"""delay_level_3_python — a C++-core message with delay level 3 is delivered 10 s after it was sent, not earlier.

Default broker delay levels (level 3 = 10 s). A primed clustering consumer is running; the
producer sends 3 messages with SetDelayTimeLevel(3) and one without delay, at time T0. Passes
when the undelayed message arrives at once (< 5 s), every delayed message arrives no earlier
than T0 + 10 s and no later than T0 + 15 s (the spec's 100 ms schedule tick plus pull latency,
with slack for a loaded machine), with body, tags, keys and topic intact and reconsumeTimes 0,
and each exactly once. Fails on early delivery, a delivery much later than the level, loss or
duplication.
"""

import time

import flows
import pyclient as pc
import rawmq
from scenario import check, env, run

DELAY_MS = 10_000
LATE_MS = 5_000


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic = flows.topic_for("Delay3")
    rawmq.ensure_topic(broker, ns, topic, queues=4)
    col = flows.Collector("delay")
    flows.start_consumer(cleanups, flows.group_for("delay3"), ns, topic, col)
    producer = flows.start_producer(cleanups, flows.group_for("delay3", "PG"), ns)
    flows.prime(producer, topic, col, queues=4)

    t0 = int(time.time() * 1000)
    for i in range(3):
        m = pc.message(topic, f"delayed {i}", tags="TagD", keys=f"dk{i}")
        m.set_delay_time_level(3)
        r = producer.send_sync(m)
        check(r.status == pc.SendStatus.OK, f"delayed send {i}: {r.status!r}")
    r = producer.send_sync(pc.message(topic, "now", tags="TagN"))
    check(r.status == pc.SendStatus.OK, f"undelayed send: {r.status!r}")
    t1 = int(time.time() * 1000)

    now = col.wait_count(1, 10.0, match=lambda x: x["body"] == b"now")
    check(now, "the undelayed message never arrived")
    check(now[0]["recv_ms"] - t1 < 5000, f"the undelayed message took {now[0]['recv_ms'] - t1} ms")
    early = [x for x in col.real() if x["body"].startswith(b"delayed")]
    check(not early, f"delayed messages arrived before the undelayed one was consumed: {[x['body'] for x in early]}")
    got = col.wait_count(3, (DELAY_MS + LATE_MS + 10_000) / 1000, match=lambda x: x["body"].startswith(b"delayed"))
    col.quiet_for(2.0, 8.0)
    got = [x for x in col.real() if x["body"].startswith(b"delayed")]
    check(len(got) == 3, f"{len(got)} delayed deliveries, want 3: {[x['body'] for x in got]}")
    for x in got:
        after = x["recv_ms"] - t0
        check(after >= DELAY_MS, f"{x['body']!r} delivered {after} ms after the send started: earlier than delay level 3 (10 s)")
        check(x["recv_ms"] - t1 <= DELAY_MS + LATE_MS,
              f"{x['body']!r} delivered {x['recv_ms'] - t1} ms after the sends ended: much later than 10 s")
        i = int(x["body"].split()[-1])
        check(x["tags"] == "TagD" and x["keys"] == f"dk{i}" and x["topic"] == topic,
              f"{x['body']!r}: tags {x['tags']!r} keys {x['keys']!r} topic {x['topic']!r}")
        check(x["reconsume_times"] == 0, f"{x['body']!r}: reconsumeTimes {x['reconsume_times']}")
    lat = sorted(x["recv_ms"] - t0 for x in got)
    return f"3 delayed messages arrived {lat} ms after sending (level 3 = 10 s); undelayed at once"


if __name__ == "__main__":
    run(body, timeout=110)
