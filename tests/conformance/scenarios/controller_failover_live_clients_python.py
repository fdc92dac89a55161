# needs: namesrv broker slave controller
# timeout: 240
"""controller_failover_live_clients_python — C++-core producer and consumer keep working through a controller-mode master failover.

Two brokers of one name run in controller mode under one `ringmq controller`; the first is
elected master. A producer and a clustering push consumer stay running while run.py kills the
master with SIGKILL; the controller elects the slave, which registers as broker 0, and the
clients find it through the name server. 10 messages are consumed before the kill (and the
consumer's offsets reach the slave first); then 10 are sent with the same producer object,
each retried by the scenario until one attempt is acknowledged. Passes when every message is
acknowledged, the consumer receives all 10 new ones, a new message appears twice only if its
send was retried (the client's own retries), and none of the 10 earlier ones comes back.
Fails if the clients cannot follow the new master, a message is lost, or offsets are lost.
"""

import time

import ctl
import flows
import pyclient as pc
import rawmq
from scenario import check, env, run

COUNT = 10
# A send is retried for this long: the name server's route names the new master within about
# a second, but the client only asks it every 30 s (pollNameServerInterval).
SEND_DEADLINE_S = 90.0
# The consumer persists offsets every 5 s and the slave copies them every 10 s.
OFFSETS_REACH_SLAVE_S = 16.0


def send_until_acknowledged(producer, topic, body):
    """Returns how many attempts it took; raises when none was acknowledged in time."""
    deadline, attempts, last = time.monotonic() + SEND_DEADLINE_S, 0, ""
    while time.monotonic() < deadline:
        attempts += 1
        try:
            r = producer.send_sync(pc.message(topic, body))
            if r.status == pc.SendStatus.OK:
                return attempts
            last = f"status {r.status!r}"
        except Exception as e:  # the producer object must survive the failover by itself
            last = f"{type(e).__name__}: {str(e)[:120]}"
        time.sleep(0.5)
    raise AssertionError(f"{body!r} not acknowledged in {SEND_DEADLINE_S:.0f} s: {last}")


def body(cleanups):
    ns, master, slave = env("NAMESRV_ADDR"), env("BROKER_ADDR"), env("SLAVE_ADDR")
    topic = flows.topic_for("Failover")
    rawmq.create_topic(slave, topic, queues=4)
    rawmq.ensure_topic(master, ns, topic, queues=4)
    col = flows.Collector("failover")
    flows.start_consumer(cleanups, flows.group_for("failover"), ns, topic, col)
    producer = flows.start_producer(cleanups, flows.group_for("failover", "PG"), ns)
    flows.prime(producer, topic, col, queues=4)
    before = [f"before {i}".encode() for i in range(COUNT)]
    for b in before:
        check(producer.send_sync(pc.message(topic, b)).status == pc.SendStatus.OK, f"send {b!r}")
    check(len(col.wait_count(COUNT, 30.0)) == COUNT, "messages before the failover not consumed")
    col.quiet_for(OFFSETS_REACH_SLAVE_S, OFFSETS_REACH_SLAVE_S + 10.0)

    print(ctl.kill_broker(), flush=True)
    after = [f"after {i}".encode() for i in range(COUNT)]
    retried = {b for b in after if send_until_acknowledged(producer, topic, b) > 1}
    col.wait_count(2 * COUNT, 90.0)
    col.quiet_for(3.0, 15.0)
    got = [r["body"] for r in col.real()]
    missing = [b.decode() for b in after if b not in got]
    check(not missing, f"after the failover the live consumer never received {missing}")
    again = sorted({b.decode() for b in before if got.count(b) > 1})
    check(not again, f"messages consumed before the failover were delivered again: {again}")
    dups = sorted({b.decode() for b in after if got.count(b) > 1 and b not in retried})
    check(not dups, f"messages sent once delivered twice: {dups}")
    return (f"clients followed the new master; {COUNT} new messages consumed "
            f"({len(retried)} needed the scenario's retries), no old ones again")


if __name__ == "__main__":
    run(body, timeout=230)
