# needs: namesrv broker
# timeout: 120
"""compressed_body_python — bodies the C++ core compresses (over its 4 KiB threshold) are stored compressed and read back intact.

The C++ core zlib-compresses a body larger than compressMsgBodyOverHowmuch (4,096 bytes by
default) and sets sysFlag bit 0. Bodies of 4,000 (not compressed), 8 KiB, 256 KiB (repetitive)
and 100 KiB (pseudo-random printable, barely compressible) are sent to a 4-queue topic. Passes
when the C++-core consumer reads every body back identical, the raw stored records of the
large ones have the compressed flag with a stored length different from the body length and
inflate (zlib) to the original, and the 4,000-byte one is stored raw. Fails if the broker
drops or changes the flag, re-compresses, or corrupts the compressed bytes.
"""

import random

import flows
import pyclient as pc
import rawmq
from scenario import check, env, run


def bodies():
    rnd = random.Random(7)
    return {
        "small": b"s" * 4000,
        "8k": (b"compress me! " * 700)[:8192],
        "256k": (b"0123456789abcdef" * 16384),
        "random": bytes(rnd.randrange(0x21, 0x7F) for _ in range(100 * 1024)),
    }


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic = flows.topic_for("Compressed")
    rawmq.ensure_topic(broker, ns, topic, queues=4)
    col = flows.Collector("zlib")
    flows.start_consumer(cleanups, flows.group_for("compressed"), ns, topic, col)
    producer = flows.start_producer(cleanups, flows.group_for("compressed", "PG"), ns)
    producer.set_max_message_size(4 * 1024 * 1024)
    flows.prime(producer, topic, col, queues=4)

    want = bodies()
    for name, b in want.items():
        r = producer.send_sync(pc.message(topic, b, tags="TagZ", keys=name))
        check(r.status == pc.SendStatus.OK, f"send {name}: {r.status!r}")
    got = col.wait_count(len(want), 30.0)
    col.quiet_for(2.0, 8.0)
    got = {x["keys"]: x["body"] for x in col.real()}
    for name, b in want.items():
        check(name in got, f"{name} body never consumed")
        check(got[name] == b, f"{name}: consumer read {len(got[name])} bytes, sent {len(b)} (content differs)")
    stored = {m["properties"].get("KEYS"): m for m in rawmq.pull_all(broker, topic, queues=4)
              if not m["body"].startswith(flows.PROBE_PREFIX)}
    for name, b in want.items():
        m = stored.get(name)
        check(m is not None, f"{name}: not found by a raw pull")
        check(m["body"] == b, f"{name}: stored body does not inflate to the sent bytes")
        if name == "small":
            check(not m["sys_flag"] & 1 and m["raw_body_len"] == len(b), f"small: sysFlag {m['sys_flag']} len {m['raw_body_len']}")
        else:
            check(m["sys_flag"] & 1 and m["raw_body_len"] != len(b),
                  f"{name}: stored sysFlag {m['sys_flag']} and length {m['raw_body_len']} for a {len(b)}-byte body: not compressed")
    ratio = {n: stored[n]["raw_body_len"] for n in want}
    return f"compressed bodies round-tripped; stored sizes {ratio}"


if __name__ == "__main__":
    run(body, timeout=110)
