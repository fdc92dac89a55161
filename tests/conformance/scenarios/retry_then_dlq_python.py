# needs: namesrv broker
# timeout: 200
# broker-conf: messageDelayLevel=1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s
"""retry_then_dlq_python — a message the C++-core consumer keeps failing is retried via %RETRY%group, then lands in %DLQ%group.

Broker with every delay level set to 1 s (messageDelayLevel), so the retry schedule is short.
A clustering push consumer answers RECONSUME_LATER for one message (and CONSUME_SUCCESS for a
second one). The C++ core sends CONSUMER_SEND_MSG_BACK with maxReconsumeTimes 16 (fixed by the
client, and honoured over the group's retryMaxTimes for clients >= V3_4_9), so the failing
message must be delivered 17 times with reconsumeTimes 0, 1, ..., 16 — each retry coming back
through `%RETRY%<group>` (property RETRY_TOPIC = the original topic) no earlier than the 1 s
delay — and then be stored in `%DLQ%<group>` (read with a raw pull: same body, tags, keys, user
property, RETRY_TOPIC, reconsumeTimes 17) and never delivered again. The good message is
delivered once. Fails on a missing or early retry, wrong reconsumeTimes, extra deliveries
beyond the limit, or a missing/altered DLQ record.
"""

import time

import flows
import pyclient as pc
import rawmq
from rocketmq.client import ConsumeStatus
from scenario import check, env, run

MAX = 16  # what the C++ core sends as maxReconsumeTimes


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic = flows.topic_for("RetryDlq")
    group = flows.group_for("retrydlq")
    rawmq.ensure_topic(broker, ns, topic, queues=4)

    def decide(rec):
        return ConsumeStatus.RECONSUME_LATER if rec["body"] == b"fail-me" else ConsumeStatus.CONSUME_SUCCESS

    col = flows.Collector("retry", props=("RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "color"), decide=decide)
    flows.start_consumer(cleanups, group, ns, topic, col)
    producer = flows.start_producer(cleanups, flows.group_for("retrydlq", "PG"), ns)
    flows.prime(producer, topic, col, queues=4)

    r = producer.send_sync(pc.message(topic, b"fail-me", tags="TagR", keys="dlq-key",
                                      props={"color": "grün"}))
    check(r.status == pc.SendStatus.OK, f"send: {r.status!r}")
    producer.send_sync(pc.message(topic, b"good", tags="TagR"))

    fails = col.wait_count(MAX + 1, 120.0, match=lambda x: x["body"] == b"fail-me")
    check(len(fails) == MAX + 1, f"failing message delivered {len(fails)} times within 120 s, want {MAX + 1} "
                                 f"(reconsumeTimes seen: {[f['reconsume_times'] for f in fails]})")
    dlq = f"%DLQ%{group}"
    deadline = time.monotonic() + 20
    stored = []
    while time.monotonic() < deadline and not stored:
        try:
            stored = rawmq.pull_queue(broker, dlq, 0)
        except rawmq.RawError:
            stored = []
        if not stored:
            time.sleep(0.5)
    col.quiet_for(3.0, 10.0)
    fails = [x for x in col.real() if x["body"] == b"fail-me"]
    good = [x for x in col.real() if x["body"] == b"good"]
    check(len(good) == 1, f"the good message was delivered {len(good)} times")
    times = [x["reconsume_times"] for x in fails]
    check(times == list(range(MAX + 1)), f"reconsumeTimes of the deliveries: {times}, want 0..{MAX} in order")
    for prev, x in zip(fails, fails[1:]):
        check(x["props"]["RETRY_TOPIC"] == topic,
              f"retry #{x['reconsume_times']}: RETRY_TOPIC {x['props']['RETRY_TOPIC']!r}, want {topic!r}")
        check(x["topic"] == topic, f"retry #{x['reconsume_times']}: the client reports topic {x['topic']!r}")
        gap = x["recv_ms"] - prev["recv_ms"]
        check(gap >= 900, f"retry #{x['reconsume_times']} came {gap} ms after the previous delivery; delay level is 1 s")
        check(x["props"]["color"] == "grün" and x["tags"] == "TagR" and x["keys"] == "dlq-key",
              f"retry #{x['reconsume_times']}: properties changed: {x['props']} tags {x['tags']!r} keys {x['keys']!r}")
    retry_records = rawmq.pull_all(broker, f"%RETRY%{group}", queues=1)
    check(any(m["body"] == b"fail-me" for m in retry_records),
          f"no fail-me record in %RETRY%{group} ({len(retry_records)} records there)")
    check(len(stored) == 1, f"%DLQ%{group} holds {len(stored)} records, want 1: {[m['body'] for m in stored]}")
    d = stored[0]
    check(d["body"] == b"fail-me", f"DLQ body {d['body']!r}")
    p = d["properties"]
    check(p.get("TAGS") == "TagR" and p.get("KEYS") == "dlq-key" and p.get("color") == "grün",
          f"DLQ record properties changed: {p}")
    check(p.get("RETRY_TOPIC") == topic, f"DLQ record RETRY_TOPIC {p.get('RETRY_TOPIC')!r}, want {topic!r}")
    check(d["reconsume_times"] == MAX + 1, f"DLQ record reconsumeTimes {d['reconsume_times']}, want {MAX + 1}")
    return (f"failing message delivered {MAX + 1} times (reconsumeTimes 0..{MAX}) via %RETRY%, then stored in "
            f"%DLQ% and not delivered again")


if __name__ == "__main__":
    run(body, timeout=190)
