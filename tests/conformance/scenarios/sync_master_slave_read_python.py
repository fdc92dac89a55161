# needs: namesrv broker slave
# timeout: 180
# broker-conf: brokerRole=SYNC_MASTER
# broker-conf: inSyncReplicas=2
# broker-conf: totalReplicas=2
"""sync_master_slave_read_python — C++-core producer sends to a SYNC_MASTER with a slave; a new consumer reads everything from the slave while the master is stopped.

run.py starts a master (brokerRole=SYNC_MASTER, inSyncReplicas=2: a send waits for the slave)
and a slave (brokerId 1, same broker name, slaveReadEnable=true). A probe is sent until it
answers SEND_OK (before the slave has attached, the master answers SLAVE_NOT_AVAILABLE), then 40
messages, each of which must be SEND_OK. Raw pulls against SLAVE_ADDR are polled until the slave
serves all 40 (it copies the master's topic config periodically; until then it answers
TOPIC_NOT_EXIST). Then the master is stopped and a push consumer of a new group starts: the
route lists only the slave (brokerId 1), so the client must query offsets and pull from it.
Passes when every one of the 40 bodies arrives and the slave, with its master gone, answers a
pull at the end of a queue PULL_NOT_FOUND (a long poll waits there instead of spinning).
Offset commits to the slave may fail. Fails if sends are not SEND_OK, the slave never holds the messages, or the
client cannot consume them from the slave.
"""

import time

import ctl
import flows
import pyclient as pc
import rawmq
from scenario import check, env, run

COUNT = 40
QUEUES = 4


def status_name(st):
    try:
        return pc.SendStatus(st).name
    except Exception:  # not a known enum value
        return repr(st)


def body(cleanups):
    ns, broker, slave = env("NAMESRV_ADDR"), env("BROKER_ADDR"), env("SLAVE_ADDR")
    topic = flows.topic_for("SyncSlave")
    rawmq.ensure_topic(broker, ns, topic, queues=QUEUES)
    producer = flows.start_producer(cleanups, flows.group_for("syncslave", "PG"), ns)

    # The slave may not have attached to the master's HA port yet: probe until SEND_OK.
    deadline = time.monotonic() + 30.0
    probes, last = 0, None
    while True:
        try:
            r = producer.send_sync(pc.message(topic, flows.PROBE_PREFIX + str(probes).encode()))
            probes += 1
            if r.status == pc.SendStatus.OK:
                break
            last = status_name(r.status)
        except Exception as e:  # the client may raise on a non-OK answer
            last = f"{type(e).__name__}: {str(e)[:200]}"
            probes += 1
        check(time.monotonic() < deadline, f"no probe send answered SEND_OK within 30 s ({probes} tries, last: {last})")
        time.sleep(0.5)
    print(f"probe SEND_OK after {probes} tries (last other answer: {last})", flush=True)

    bodies = [f"sync-slave {i}".encode() for i in range(COUNT)]
    bad = []
    for b in bodies:
        try:
            r = producer.send_sync(pc.message(topic, b, tags="TagS"))
            if r.status != pc.SendStatus.OK:
                bad.append(f"{b.decode()}: {status_name(r.status)}")
        except Exception as e:
            bad.append(f"{b.decode()}: {type(e).__name__}: {str(e)[:200]}")
    check(not bad, f"{len(bad)} of {COUNT} sends to the SYNC_MASTER were not SEND_OK: {bad[:5]}")

    # The slave serves the topic once it has copied the topic config and the replicated data.
    deadline = time.monotonic() + 40.0
    on_slave, last_err = [], None
    while time.monotonic() < deadline:
        try:
            on_slave = [m["body"] for m in rawmq.pull_all(slave, topic, queues=QUEUES, timeout=10.0)]
            last_err = None
        except (rawmq.RawError, OSError, TimeoutError) as e:
            last_err = f"{type(e).__name__}: {e}"
        if all(b in on_slave for b in bodies):
            break
        time.sleep(1.0)
    missing = [b.decode() for b in bodies if b not in on_slave]
    check(not missing, f"raw pulls from the slave {slave} within 40 s lack {len(missing)} of {COUNT} messages "
                       f"(got {len(on_slave)} records; last pull error: {last_err})")
    print(f"slave serves all {COUNT} messages to raw pulls", flush=True)

    print(ctl.stop_broker(), flush=True)
    col = flows.Collector("slave-reader")
    flows.start_consumer(cleanups, flows.group_for("syncslave"), ns, topic, col)
    col.wait_count(COUNT, 60.0)
    col.quiet_for(2.0, 10.0)
    got = [r["body"] for r in col.real()]
    missing = [b.decode() for b in bodies if b not in got]
    check(not missing, f"with the master stopped, the consumer received {len(set(got))} of {COUNT} messages from the "
                       f"slave; missing {missing[:10]}{' ...' if len(missing) > 10 else ''}")
    # With its master gone the slave answers for itself: a pull at the end of a queue is
    # PULL_NOT_FOUND (19), so a long poll waits there, not PULL_RETRY_IMMEDIATELY (20), which
    # sends the client straight back and makes it spin. The slave notices the closed HA link
    # within moments of the stop.
    end = rawmq.max_offset(slave, topic, 0)
    deadline = time.monotonic() + 10.0
    while True:
        code, fields, _, resp = rawmq.pull(slave, topic, 0, end)
        if code == 19 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    check(code == 19, f"with the master stopped, a pull at the end of queue 0 on the slave answered code {code} "
                      f"(remark {resp.remark!r}, suggestWhichBrokerId {fields.get('suggestWhichBrokerId')}); "
                      f"want PULL_NOT_FOUND (19)")
    return (f"{COUNT} sends SEND_OK on the SYNC_MASTER (probe OK after {probes} tries); the slave held them and a "
            f"new consumer got all {COUNT} from it with the master stopped ({len(got)} deliveries)")


if __name__ == "__main__":
    run(body, timeout=170)
