# needs: namesrv broker
# timeout: 90
"""timer_delay_and_deliver_ms_python — C++-core messages with TIMER_DELAY_SEC=5 and TIMER_DELIVER_MS=now+3 s arrive at their time, not earlier.

A primed clustering consumer is running. The producer sends, at time T0, one message with the
user property TIMER_DELAY_SEC=5, one with TIMER_DELIVER_MS=T0+3000 and one plain message.
Passes when the plain message arrives at once (< 5 s), the TIMER_DELIVER_MS message no earlier
than T0+3000 and at most 5 s later, the TIMER_DELAY_SEC message no earlier than T0+5000 and at
most 5 s after the sends ended, each once, with topic, tags and body intact and the broker's
TIMER_OUT_MS / TIMER_ENQUEUE_MS / TIMER_DEQUEUE_MS properties present. Fails on early delivery,
a delivery much later than asked, loss or duplication.
"""

import time

import flows
import pyclient as pc
import rawmq
from scenario import check, env, run

LATE_MS = 5_000
BROKER_PROPS = ["TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS"]


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic = flows.topic_for("TimerMsg")
    rawmq.ensure_topic(broker, ns, topic, queues=4)
    col = flows.Collector("timer", props=BROKER_PROPS)
    flows.start_consumer(cleanups, flows.group_for("timer"), ns, topic, col)
    producer = flows.start_producer(cleanups, flows.group_for("timer", "PG"), ns)
    flows.prime(producer, topic, col, queues=4)

    t0 = int(time.time() * 1000)
    deliver_at = t0 + 3000
    sends = [
        ("delay-sec", {"TIMER_DELAY_SEC": "5"}),
        ("deliver-ms", {"TIMER_DELIVER_MS": str(deliver_at)}),
        ("now", {}),
    ]
    for text, props in sends:
        r = producer.send_sync(pc.message(topic, text, tags="TagT", props=props))
        check(r.status == pc.SendStatus.OK, f"send {text}: {r.status!r}")
    t1 = int(time.time() * 1000)

    now = col.wait_count(1, 10.0, match=lambda x: x["body"] == b"now")
    check(now and now[0]["recv_ms"] - t1 < 5000, "the plain message did not arrive at once")
    col.wait_count(2, (5000 + LATE_MS + 10_000) / 1000, match=lambda x: x["body"] in (b"delay-sec", b"deliver-ms"))
    col.quiet_for(1.5, 6.0)
    got = {}
    for x in col.real():
        got.setdefault(x["body"], []).append(x)
    for text, earliest, latest in [(b"deliver-ms", deliver_at, deliver_at + LATE_MS),
                                   (b"delay-sec", t0 + 5000, t1 + 5000 + LATE_MS)]:
        recs = got.get(text, [])
        check(len(recs) == 1, f"{text!r}: {len(recs)} deliveries, want 1")
        x = recs[0]
        check(x["recv_ms"] >= earliest, f"{text!r} arrived {earliest - x['recv_ms']} ms early")
        check(x["recv_ms"] <= latest, f"{text!r} arrived {x['recv_ms'] - earliest} ms after its time")
        check(x["topic"] == topic and x["tags"] == "TagT", f"{text!r}: topic {x['topic']!r} tags {x['tags']!r}")
        for k in BROKER_PROPS:
            check(x["props"].get(k), f"{text!r}: property {k} missing")
    lat = {t.decode(): got[t][0]["recv_ms"] - t0 for t in (b"deliver-ms", b"delay-sec")}
    return f"timer messages arrived after {lat} ms (asked 3000 and 5000); plain one at once"


if __name__ == "__main__":
    run(body, timeout=80)
