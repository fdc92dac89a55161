# needs: namesrv broker
# timeout: 150
# broker-conf: transactionCheckInterval=2000
# broker-conf: transactionTimeOut=3000
"""transaction_check_back_python — a half message left UNKNOWN is resolved by the broker's check-back (CHECK_TRANSACTION_STATE) to the C++-core producer.

Broker with a 2 s transactionCheckInterval and a 3 s transactionTimeOut. The C++ core's
TransactionMQProducer sends two half messages whose local transactions answer UNKNOWN (no
END_TRANSACTION decision). The broker must then send CHECK_TRANSACTION_STATE (39) to a live
producer of the group (PGROUP), carrying the half message re-encoded as a stored record; the
producer's checker answers COMMIT for one and ROLLBACK for the other and the core replies with
END_TRANSACTION (fromTransactionCheck=true). Passes when the checker was asked about both
messages (with their bodies and user property intact), the committed one is delivered exactly
once within 30 s, and the rolled-back one is never delivered nor stored in the topic. Skips if
the broker does not handle END_TRANSACTION at all. Fails if no check-back arrives, the checker
sees a mangled message, or the decisions are not applied.
"""

import threading
import time

import flows
import pyclient as pc
import rawmq
import remoting as rm
from rocketmq.client import TransactionMQProducer, TransactionStatus
from scenario import check, env, run, skip


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    with rm.RemotingClient(broker, timeout=5.0) as c:
        resp = c.request(rm.END_TRANSACTION, {"producerGroup": "PG_probe_tx", "tranStateTableOffset": "0",
                                              "commitLogOffset": "987654321", "commitOrRollback": "12",
                                              "fromTransactionCheck": "false", "msgId": "00" * 16})
    if resp.code == rm.REQUEST_CODE_NOT_SUPPORTED:
        skip(f"broker answers END_TRANSACTION with REQUEST_CODE_NOT_SUPPORTED ({resp.remark!r})")
    topic = flows.topic_for("TxCheck")
    rawmq.ensure_topic(broker, ns, topic, queues=4)
    col = flows.Collector("txcheck", props=("stage",))
    flows.start_consumer(cleanups, flows.group_for("txcheck"), ns, topic, col)
    prober = flows.start_producer(cleanups, flows.group_for("txcheck-probe", "PG"), ns)
    flows.prime(prober, topic, col, queues=4)

    checked = []
    lock = threading.Lock()

    def checker(msg):
        with lock:
            checked.append({"body": msg.body, "stage": (msg.get_property("stage") or b"").decode(),
                            "topic": msg.topic, "t": time.time()})
        return TransactionStatus.COMMIT if msg.body == b"commit on check" else TransactionStatus.ROLLBACK

    tp = TransactionMQProducer(flows.group_for("txcheck", "PG"), checker)
    tp.set_name_server_address(ns)
    tp.start()
    cleanups.append(tp.shutdown)
    t0 = time.time()
    for b in (b"commit on check", b"rollback on check"):
        r = tp.send_message_in_transaction(pc.message(topic, b, tags="TagTxC", props={"stage": "half"}),
                                           lambda m, a: TransactionStatus.UNKNOWN)
        check(r.status == pc.SendStatus.OK, f"half message {b!r}: status {r.status!r}")
    early = col.wait_count(1, 2.0, match=lambda x: x["body"].endswith(b"on check"))
    check(not early, f"a half message with an UNKNOWN local state was delivered before any check: {early}")

    got = col.wait_count(1, 40.0, match=lambda x: x["body"] == b"commit on check")
    with lock:
        seen = list(checked)
    check(seen, "the broker never sent CHECK_TRANSACTION_STATE for the UNKNOWN half messages within 40 s")
    check(got, f"checker was asked about {[c['body'] for c in seen]} but the committed message was not delivered")
    col.quiet_for(6.0, 20.0)
    with lock:
        seen = list(checked)
    bodies = {c["body"] for c in seen}
    check(bodies == {b"commit on check", b"rollback on check"},
          f"check-back asked about {sorted(bodies)}, want both half messages")
    for c in seen:
        check(c["stage"] == "half" and c["topic"] == topic,
              f"check-back message {c['body']!r}: topic {c['topic']!r}, property stage {c['stage']!r}")
    first_check = min(c["t"] for c in seen) - t0
    real = col.real()
    commits = [x for x in real if x["body"] == b"commit on check"]
    check(len(commits) == 1, f"committed-on-check message delivered {len(commits)} times")
    check(not [x for x in real if x["body"] == b"rollback on check"], "the rolled-back-on-check message was delivered")
    stored = [m["body"] for m in rawmq.pull_all(broker, topic, queues=4) if not m["body"].startswith(flows.PROBE_PREFIX)]
    check(stored == [b"commit on check"], f"topic holds {stored}, want only the committed message")
    return (f"first check-back {first_check:.1f} s after sending; {len(seen)} checks; commit delivered once, "
            f"rollback dropped")


if __name__ == "__main__":
    run(body, timeout=140)
