# needs: namesrv broker
# timeout: 120
"""send_sync_then_push_consume_python — C++-core producer sync-sends, C++-core push consumer gets every message intact.

Topic with 4 queues created on the broker (UPDATE_AND_CREATE_TOPIC); a clustering push consumer
subscribed to `*` is started and primed (it has received a probe from every queue); then 12
messages are sent with SendMessageSync, each with a unicode body, tag TagA/TagB, two keys, and
user properties (ASCII, unicode, numeric text). Passes when every send is SEND_OK, the consumer
receives each message exactly once with the same body, tags, keys and properties, the message id
the consumer sees equals the id the send returned (the UNIQ_KEY), reconsumeTimes is 0, and a raw
pull of the broker's queues shows the same messages stored with that UNIQ_KEY. Fails on a lost,
duplicated or altered message, a mismatched id, or a non-OK send.
"""

import flows
import pyclient as pc
import rawmq
from scenario import check, env, run

COUNT = 12
PROPS = ("color", "greeting", "n")


def expected(i):
    return {
        "body": f"hello {i} — héllo wörld ✓ 消息 🚀 #{i}".encode("utf-8"),
        "tags": "TagA" if i % 2 == 0 else "TagB",
        "keys": f"key-{i} order-{i * 7}",
        "props": {"color": "red" if i % 3 else "blue", "greeting": f"grüße-{i}-ありがとう", "n": str(i)},
    }


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic = flows.topic_for("SyncPush")
    rawmq.ensure_topic(broker, ns, topic, queues=4)

    col = flows.Collector("push", props=PROPS)
    flows.start_consumer(cleanups, flows.group_for("syncpush"), ns, topic, col)
    producer = flows.start_producer(cleanups, flows.group_for("syncpush", "PG"), ns)
    flows.prime(producer, topic, col, queues=4)

    sent = {}
    for i in range(COUNT):
        e = expected(i)
        r = producer.send_sync(pc.message(topic, e["body"], tags=e["tags"], keys=e["keys"], props=e["props"]))
        check(r.status == pc.SendStatus.OK, f"send {i}: status {r.status!r}")
        check(r.msg_id and r.msg_id not in sent, f"send {i}: msg id {r.msg_id!r} empty or repeated")
        sent[r.msg_id] = i

    got = col.wait_count(COUNT, 30.0)
    check(not col.errors, f"consumer callback errors: {col.errors}")
    check(len(got) >= COUNT, f"consumer received {len(got)}/{COUNT} messages within 30 s")
    col.quiet_for(2.0, 10.0)
    got = col.real()
    ids = [r["id"] for r in got]
    dups = sorted({i for i in ids if ids.count(i) > 1})
    check(not dups, f"messages delivered more than once: {dups}")
    check(len(got) == COUNT, f"consumer received {len(got)} messages, sent {COUNT}")
    for r in got:
        check(r["id"] in sent, f"consumer saw msg id {r['id']!r} that no send returned (sent ids {sorted(sent)})")
        i = sent[r["id"]]
        e = expected(i)
        check(r["topic"] == topic, f"msg {i}: topic {r['topic']!r}")
        check(r["body"] == e["body"], f"msg {i}: body {r['body']!r} != sent {e['body']!r}")
        check(r["tags"] == e["tags"], f"msg {i}: tags {r['tags']!r} != {e['tags']!r}")
        check(r["keys"] == e["keys"], f"msg {i}: keys {r['keys']!r} != {e['keys']!r}")
        check(r["props"] == e["props"], f"msg {i}: user properties {r['props']} != {e['props']}")
        check(r["reconsume_times"] == 0, f"msg {i}: reconsumeTimes {r['reconsume_times']}")

    stored = [m for m in rawmq.pull_all(broker, topic, queues=4) if not m["body"].startswith(flows.PROBE_PREFIX)]
    check(len(stored) == COUNT, f"raw pull finds {len(stored)} stored messages, want {COUNT}")
    for m in stored:
        uk = m["properties"].get("UNIQ_KEY")
        check(uk in sent, f"stored record at {m['queue_id']}@{m['queue_offset']} has UNIQ_KEY {uk!r} "
                          f"not returned by any send")
        check(m["body"] == expected(sent[uk])["body"], f"stored body of {uk} differs")
    return f"{COUNT} messages round-tripped (bodies, tags, keys, unicode properties, ids)"


if __name__ == "__main__":
    run(body, timeout=110)
