# needs: namesrv broker
# timeout: 180
"""broker_restart_live_clients_python — C++-core producer and consumer keep working across a broker restart without app-level retries.

A producer and a clustering push consumer stay running while run.py restarts the broker
(SIGTERM, start again on the same store; the broker unregisters and re-registers with the name
server). 10 messages are consumed before the restart; 10 are sent right after it with the same
producer object. Passes when every post-restart send succeeds (the client may retry inside one
send call, the scenario does not resend), the same consumer receives all 10 new messages once,
and none of the 10 earlier ones is delivered again. Fails if clients cannot reconnect, sends
fail, or offsets are lost so that old messages come back.
"""

import ctl
import flows
import pyclient as pc
import rawmq
from scenario import check, env, run

COUNT = 10


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic = flows.topic_for("LiveRestart")
    rawmq.ensure_topic(broker, ns, topic, queues=4)
    col = flows.Collector("live")
    flows.start_consumer(cleanups, flows.group_for("liverestart"), ns, topic, col)
    producer = flows.start_producer(cleanups, flows.group_for("liverestart", "PG"), ns)
    flows.prime(producer, topic, col, queues=4)
    before = [f"before {i}".encode() for i in range(COUNT)]
    for b in before:
        check(producer.send_sync(pc.message(topic, b)).status == pc.SendStatus.OK, f"send {b!r}")
    check(len(col.wait_count(COUNT, 30.0)) == COUNT, "messages before the restart not consumed")
    col.quiet_for(1.5, 10.0)

    print(ctl.restart_broker(), flush=True)
    after = [f"after {i}".encode() for i in range(COUNT)]
    failures = []
    for b in after:
        try:
            r = producer.send_sync(pc.message(topic, b))
            if r.status != pc.SendStatus.OK:
                failures.append(f"{b.decode()}: status {r.status!r}")
        except Exception as e:  # the producer object must survive the restart by itself
            failures.append(f"{b.decode()}: {type(e).__name__}: {str(e)[:120]}")
    check(not failures, f"{len(failures)} sends failed after the broker restart: {failures[:3]}")
    col.wait_count(2 * COUNT, 60.0)
    col.quiet_for(3.0, 15.0)
    got = [r["body"] for r in col.real()]
    missing = [b.decode() for b in after if b not in got]
    check(not missing, f"after the restart the live consumer never received {missing}")
    again = sorted({b.decode() for b in before if got.count(b) > 1})
    check(not again, f"messages consumed before the restart were delivered again: {again}")
    dups = sorted({b.decode() for b in after if got.count(b) > 1})
    check(not dups, f"post-restart messages delivered twice: {dups}")
    return f"producer and consumer survived the restart; {COUNT} new messages consumed once, no old ones again"


if __name__ == "__main__":
    run(body, timeout=170)
