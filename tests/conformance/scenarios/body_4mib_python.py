# needs: namesrv broker
# timeout: 150
"""body_4mib_python — a body of exactly maxMessageSize (4,194,304 bytes) round-trips; one byte more is refused by the broker (C++ core).

Compression is switched off for this producer (threshold raised to 64 MiB) so the 4 MiB body
travels and is stored as is, and the client's own size limit (C++ core default: 128 KiB,
checked in Validators.cpp before anything is sent) is raised to 8 MiB so the broker's limit is
what is tested. A body of exactly 4 MiB (the broker's default maxMessageSize,
which limits the body: `body length > maxMessageSize` is MESSAGE_ILLEGAL) must be SEND_OK,
stored uncompressed with that length, and read back identical by the C++-core consumer. Then
a body of 4 MiB + 1 byte is sent: the broker must
refuse it (the client reports a failure; a raw SEND_MESSAGE_V2 of the same body must be
answered MESSAGE_ILLEGAL, code 13, as the Java broker does) and nothing is stored. Fails if the 4 MiB body is refused, altered or truncated, or the
oversized one is stored.
"""

import hashlib
import random

import flows
import pyclient as pc
import rawmq
from scenario import check, env, run

LIMIT = 4 * 1024 * 1024


def printable(n, seed):
    rnd = random.Random(seed)
    alphabet = bytes(range(0x21, 0x7F))
    return bytes(rnd.choice(alphabet) for _ in range(4096)) * (n // 4096) + bytes(rnd.choice(alphabet) for _ in range(n % 4096))


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic = flows.topic_for("Body4M")
    rawmq.ensure_topic(broker, ns, topic, queues=4)
    col = flows.Collector("big")
    flows.start_consumer(cleanups, flows.group_for("body4m"), ns, topic, col)
    producer = flows.start_producer(cleanups, flows.group_for("body4m", "PG"), ns, timeout_ms=20000)
    pc.set_compress_over(producer, 64 * 1024 * 1024)
    producer.set_max_message_size(8 * 1024 * 1024)
    flows.prime(producer, topic, col, queues=4)

    exact = printable(LIMIT, 1)
    r = producer.send_sync(pc.message(topic, exact, tags="TagBig", keys="exact"))
    check(r.status == pc.SendStatus.OK, f"4 MiB send: {r.status!r}")
    got = col.wait_count(1, 60.0)
    check(len(got) == 1, "the 4 MiB message was not consumed within 60 s")
    g = got[0]["body"]
    check(len(g) == LIMIT and hashlib.sha256(g).digest() == hashlib.sha256(exact).digest(),
          f"consumer read {len(g)} bytes (sha256 {hashlib.sha256(g).hexdigest()[:16]}), sent {LIMIT} "
          f"(sha256 {hashlib.sha256(exact).hexdigest()[:16]})")

    over = printable(LIMIT + 1, 2)
    err = None
    try:
        r2 = producer.send_sync(pc.message(topic, over, tags="TagBig", keys="over"))
        err = f"accepted with status {r2.status!r}, msg id {r2.msg_id}"
    except Exception as e:  # the wrapper raises on a failed send
        print(f"oversized send refused: {type(e).__name__}: {e}", flush=True)
    check(err is None, f"a body of maxMessageSize + 1 bytes was {err}")
    # The C++ core hides the broker's answer behind a generic error ("No route info" after its
    # retries); ask the broker directly what it answers for the same body.
    resp = rawmq.send_raw(broker, topic, over, {"KEYS": "over-raw", "WAIT": "true"})
    check(resp.code == 13, f"broker answered an oversized body (4 MiB + 1) with code {resp.code} "
                           f"remark {resp.remark!r}; want MESSAGE_ILLEGAL (13)")

    col.quiet_for(2.0, 10.0)
    stored = [m for m in rawmq.pull_all(broker, topic, queues=4) if not m["body"].startswith(flows.PROBE_PREFIX)]
    check(len(stored) == 1, f"raw pull finds {len(stored)} stored big messages (want only the 4 MiB one): "
                            f"{[(m['raw_body_len'], m['properties'].get('KEYS')) for m in stored]}")
    s = stored[0]
    check(s["raw_body_len"] == LIMIT and not s["sys_flag"] & 1, f"stored body length {s['raw_body_len']}, sysFlag {s['sys_flag']}")
    check(s["body"] == exact, "stored 4 MiB body differs from the sent one")
    check(len(col.real()) == 1, f"consumer got {len(col.real())} big messages")
    return "4,194,304-byte body stored and consumed intact; 4,194,305 bytes refused by the broker"


if __name__ == "__main__":
    run(body, timeout=140)
