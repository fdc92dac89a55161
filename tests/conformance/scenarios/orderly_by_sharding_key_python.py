# needs: namesrv broker
# timeout: 240
"""orderly_by_sharding_key_python — 1,000 messages over 10 sharding keys are consumed in send order per key.

C++-core orderly producer (SendMessageOrderlyByShardingKey: the queue is chosen by the key's
hash) sends 1,000 messages, sequence numbers 0..99 for each of 10 keys, interleaved; an orderly
push consumer (queue locks via LOCK_BATCH_MQ, one thread per queue) was primed first. Passes
when every key's messages all went to one queue, the consumer receives all 1,000 exactly once,
and for every key the sequence numbers arrive strictly in order 0..99. Fails on loss,
duplicates, or any out-of-order delivery within a key (e.g. a broker that reorders a queue or
mis-serves LOCK_BATCH_MQ so two consumers interleave).
"""

import collections

import flows
import pyclient as pc
import rawmq
from scenario import check, env, run

KEYS, PER_KEY = 10, 100


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic = flows.topic_for("Orderly")
    rawmq.ensure_topic(broker, ns, topic, queues=4)
    col = flows.Collector("orderly")
    flows.start_consumer(cleanups, flows.group_for("orderly"), ns, topic, col, orderly=True)
    prober = flows.start_producer(cleanups, flows.group_for("orderly-probe", "PG"), ns)
    flows.prime(prober, topic, col, queues=4)
    producer = flows.start_producer(cleanups, flows.group_for("orderly", "PG"), ns, orderly=True)

    queue_of = collections.defaultdict(set)
    for seq in range(PER_KEY):
        for k in range(KEYS):
            key = f"order-{k}"
            r = producer.send_orderly_with_sharding_key(
                pc.message(topic, f"{key}:{seq}", tags="TagOrd", keys=key), key)
            check(r.status == pc.SendStatus.OK, f"send {key}:{seq}: status {r.status!r}")
    total = KEYS * PER_KEY
    got = col.wait_count(total, 120.0)
    col.quiet_for(2.0, 15.0)
    got = col.real()
    per_key = collections.defaultdict(list)
    for r in got:
        key, _, seq = r["body"].decode().partition(":")
        per_key[key].append(int(seq))
        queue_of[key].add(r["queue_id"])
    for k in range(KEYS):
        key = f"order-{k}"
        seqs = per_key.get(key, [])
        check(len(queue_of[key]) == 1, f"{key}: messages consumed from queues {sorted(queue_of[key])}, want one queue")
        missing = sorted(set(range(PER_KEY)) - set(seqs))
        check(not missing, f"{key}: {len(missing)} messages never consumed, first {missing[:10]}")
        check(len(seqs) == PER_KEY, f"{key}: {len(seqs)} deliveries for {PER_KEY} messages (duplicates)")
        bad = next((i for i in range(1, len(seqs)) if seqs[i] <= seqs[i - 1]), None)
        check(bad is None, f"{key}: out of order at delivery {bad}: ... {seqs[max(0, (bad or 1) - 3):(bad or 1) + 3]} ...")
    check(len(got) == total, f"consumer got {len(got)} messages, {total} sent")
    return f"{total} messages, {KEYS} keys: each key on one queue, consumed in order, no loss or duplicate"


if __name__ == "__main__":
    run(body, timeout=230)
