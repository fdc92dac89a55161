# needs: namesrv broker
# timeout: 150
"""crash_restart_keeps_messages_python — messages acknowledged SEND_OK survive a broker kill -9 and restart.

The C++-core producer sync-sends 30 messages (SEND_OK each) to a 4-queue topic; run.py then
SIGKILLs the broker (no shutdown, no flush, the store's abort marker stays) and starts it again
on the same store (crash recovery). Passes when, after recovery, a raw pull finds exactly the 30
messages with intact bodies, tags and UNIQ_KEYs at the same queue offsets, and 10 messages sent
after the restart get the next queue offsets (nothing overwritten, no gap) and are readable
too. With the default ASYNC_FLUSH the data is still in the page cache after a process kill, so
losing an acknowledged message here means recovery truncated or mis-read the commit log or
consume queues. Fails on a lost, altered or duplicated message or a queue offset reused.
"""

import ctl
import flows
import pyclient as pc
import rawmq
from scenario import check, env, run

BEFORE, AFTER = 30, 10


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic = flows.topic_for("Crash")
    rawmq.ensure_topic(broker, ns, topic, queues=4)
    p1 = pc.start_producer(flows.group_for("crash", "PG"), ns, timeout_ms=5000)
    sent = {}
    try:
        for i in range(BEFORE):
            r = p1.send_sync(pc.message(topic, f"before crash {i} ✓", tags=f"T{i % 3}", keys=f"ck{i}"))
            check(r.status == pc.SendStatus.OK, f"send {i}: {r.status!r}")
            sent[r.msg_id] = (f"before crash {i} ✓".encode(), f"T{i % 3}")
    finally:
        p1.shutdown()
    stored1 = {m["properties"].get("UNIQ_KEY"): m for m in rawmq.pull_all(broker, topic, queues=4)}
    check(set(stored1) == set(sent), f"before the crash a raw pull finds {len(stored1)} of {BEFORE} messages")
    max1 = [rawmq.max_offset(broker, topic, q) for q in range(4)]

    print(ctl.kill_broker(), flush=True)
    print(ctl.start_broker(), flush=True)

    stored2 = {m["properties"].get("UNIQ_KEY"): m for m in rawmq.pull_all(broker, topic, queues=4)}
    lost = sorted(sent[k][0].decode() for k in sent if k not in stored2)
    check(not lost, f"{len(lost)} acknowledged messages lost by the crash: {lost[:6]}")
    check(len(stored2) == BEFORE, f"after recovery {len(stored2)} messages, want {BEFORE}")
    for k, (b, tag) in sent.items():
        m = stored2[k]
        check(m["body"] == b and m["properties"].get("TAGS") == tag, f"{b!r}: recovered as {m['body']!r} tag {m['properties'].get('TAGS')!r}")
        o = stored1[k]
        check((m["queue_id"], m["queue_offset"]) == (o["queue_id"], o["queue_offset"]),
              f"{b!r}: was at {o['queue_id']}@{o['queue_offset']}, recovered at {m['queue_id']}@{m['queue_offset']}")
    max2 = [rawmq.max_offset(broker, topic, q) for q in range(4)]
    check(max2 == max1, f"max offsets {max1} before the crash, {max2} after recovery")

    p2 = flows.start_producer(cleanups, flows.group_for("crash2", "PG"), ns)
    for i in range(AFTER):
        r = p2.send_sync(pc.message(topic, f"after crash {i}", tags="TA"))
        check(r.status == pc.SendStatus.OK, f"send after recovery {i}: {r.status!r}")
    stored3 = rawmq.pull_all(broker, topic, queues=4)
    check(len(stored3) == BEFORE + AFTER, f"after new sends a raw pull finds {len(stored3)}, want {BEFORE + AFTER}")
    for q in range(4):
        offs = sorted(m["queue_offset"] for m in stored3 if m["queue_id"] == q)
        check(offs == list(range(len(offs))), f"queue {q}: offsets {offs} have gaps or repeats")
    return f"{BEFORE} acknowledged messages recovered after kill -9 at the same offsets; {AFTER} more appended after them"


if __name__ == "__main__":
    run(body, timeout=140)
