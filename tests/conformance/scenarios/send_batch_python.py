# needs: namesrv broker
# timeout: 120
"""send_batch_python — a C++-core batch send (SendBatchMessage: code 310 with m="1") stores every item.

A clustering push consumer is primed on a 4-queue topic; the C core's SendBatchMessage (exposed
by lib/pyclient.send_batch) sends 3 batches of 5 messages, each item with its own body, tag,
keys and a user property. Passes when each batch reports SEND_OK, the items of one batch are
stored in one queue at consecutive queue offsets in batch order, the consumer receives all 15
exactly once with their own tags/keys/properties, and the id the consumer sees for each item is
that item's stored UNIQ_KEY (the C++ 2.1 core returns an empty msgId for a batch send — it does
not join the items' ids like the Java client — so when the result's msgId is non-empty, it
must list the items' ids). Fails if the broker stores the batch as one message, drops or
reorders items, or mixes up per-item properties.
"""

import flows
import pyclient as pc
import rawmq
from scenario import check, env, run

BATCHES, PER = 3, 5


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic = flows.topic_for("Batch")
    rawmq.ensure_topic(broker, ns, topic, queues=4)
    col = flows.Collector("push", props=("item",))
    flows.start_consumer(cleanups, flows.group_for("batch"), ns, topic, col)
    producer = flows.start_producer(cleanups, flows.group_for("batch", "PG"), ns)
    flows.prime(producer, topic, col, queues=4)

    expected = {}
    result_ids = []
    for b in range(BATCHES):
        msgs = []
        for k in range(PER):
            name = f"b{b}-i{k}"
            expected[name.encode()] = {"tags": f"Tag{k % 2}", "keys": f"bk-{b}-{k} other-{k}", "item": name}
            msgs.append(pc.message(topic, name, tags=f"Tag{k % 2}", keys=f"bk-{b}-{k} other-{k}", props={"item": name}))
        r = pc.send_batch(producer, msgs)
        check(r.status == pc.SendStatus.OK, f"batch {b}: status {r.status!r}")
        result_ids.append(r.msg_id)

    got = col.wait_count(BATCHES * PER, 30.0)
    col.quiet_for(2.0, 10.0)
    got = col.real()
    seen = [r["body"] for r in got]
    missing = sorted(n.decode() for n in expected if n not in seen)
    check(not missing, f"batch items never consumed: {missing}")
    check(len(got) == BATCHES * PER, f"consumer got {len(got)} messages, {BATCHES * PER} sent")
    all_ids = ",".join(result_ids)
    for r in got:
        e = expected[r["body"]]
        check(r["tags"] == e["tags"] and r["keys"] == e["keys"] and r["props"]["item"] == e["item"],
              f"item {e['item']}: tags {r['tags']!r} keys {r['keys']!r} item prop {r['props']['item']!r}, want {e}")
        check(not all_ids.strip(",") or r["id"] in all_ids,
              f"item {e['item']}: consumer id {r['id']} not in the batch send results {result_ids}")

    stored = [m for m in rawmq.pull_all(broker, topic, queues=4) if not m["body"].startswith(flows.PROBE_PREFIX)]
    check(len(stored) == BATCHES * PER, f"raw pull finds {len(stored)} stored items, want {BATCHES * PER}")
    consumer_ids = {r["body"]: r["id"] for r in got}
    for m in stored:
        uk = m["properties"].get("UNIQ_KEY")
        check(uk and consumer_ids.get(m["body"]) == uk,
              f"item {m['body']!r}: stored UNIQ_KEY {uk!r}, consumer saw id {consumer_ids.get(m['body'])!r}")
    for b in range(BATCHES):
        items = sorted((m for m in stored if m["body"].startswith(f"b{b}-".encode())), key=lambda m: m["queue_offset"])
        queues = {m["queue_id"] for m in items}
        check(len(queues) == 1, f"batch {b} spread over queues {sorted(queues)}; a batch goes to one queue")
        offs = [m["queue_offset"] for m in items]
        check(offs == list(range(offs[0], offs[0] + PER)), f"batch {b}: queue offsets {offs} not consecutive")
        check([m["body"] for m in items] == [f"b{b}-i{k}".encode() for k in range(PER)],
              f"batch {b}: stored order {[m['body'] for m in items]}")
    return f"{BATCHES} batches of {PER}: items stored consecutively and consumed with their own properties"


if __name__ == "__main__":
    run(body, timeout=110)
