# needs: namesrv broker
# timeout: 120
"""transaction_python — C++-core transactional producer: a committed half message is delivered, a rolled-back one never is.

First asks the broker whether it handles END_TRANSACTION (37) at all, with a raw request for a
half message that does not exist: REQUEST_CODE_NOT_SUPPORTED means the broker has no
transactions yet, and the scenario exits SKIP with that reason (it does not pass). Otherwise a
clustering consumer is primed and the C++ core's TransactionMQProducer sends two half messages
(sysFlag PREPARED, TRAN_MSG=true, PGROUP) whose local transactions answer COMMIT and ROLLBACK;
the core then sends END_TRANSACTION commit (8) / rollback (12). Passes when the committed
message is delivered exactly once with its body, tags, keys and user property within 15 s,
the rolled-back one is never delivered (watched for 8 more seconds) and is not in the topic
(raw pull). Fails on a missing/duplicated commit, a delivered rollback, or a half message
visible before its END_TRANSACTION.
"""

import flows
import pyclient as pc
import rawmq
import remoting as rm
from rocketmq.client import TransactionMQProducer, TransactionStatus
from scenario import check, env, run, skip


def broker_handles_end_transaction(broker):
    ext = {"producerGroup": "PG_probe_tx", "tranStateTableOffset": "0", "commitLogOffset": "987654321",
           "commitOrRollback": "12", "fromTransactionCheck": "false", "msgId": "00" * 16, "transactionId": "00" * 16}
    with rm.RemotingClient(broker, timeout=5.0) as c:
        resp = c.request(rm.END_TRANSACTION, ext)
    return resp.code != rm.REQUEST_CODE_NOT_SUPPORTED, resp


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    ok, resp = broker_handles_end_transaction(broker)
    if not ok:
        skip(f"broker answers END_TRANSACTION (37) with REQUEST_CODE_NOT_SUPPORTED "
             f"(remark {resp.remark!r}): transactions not implemented")
    topic = flows.topic_for("Tx")
    rawmq.ensure_topic(broker, ns, topic, queues=4)
    col = flows.Collector("tx", props=("stage",))
    flows.start_consumer(cleanups, flows.group_for("tx"), ns, topic, col)
    prober = flows.start_producer(cleanups, flows.group_for("tx-probe", "PG"), ns)
    flows.prime(prober, topic, col, queues=4)

    decided = {}

    def local(msg, _args):
        b = msg.body
        decided[b] = TransactionStatus.COMMIT if b == b"commit me" else TransactionStatus.ROLLBACK
        return decided[b]

    def checker(msg):
        return TransactionStatus.COMMIT if msg.body == b"commit me" else TransactionStatus.ROLLBACK

    tp = TransactionMQProducer(flows.group_for("tx", "PG"), checker)
    tp.set_name_server_address(ns)
    tp.start()
    cleanups.append(tp.shutdown)
    results = {}
    for b in (b"commit me", b"roll me back"):
        r = tp.send_message_in_transaction(pc.message(topic, b, tags="TagTx", keys=b.decode().replace(" ", "-"),
                                                      props={"stage": "tx"}), local)
        check(r.status == pc.SendStatus.OK, f"half message {b!r}: status {r.status!r}")
        results[b] = r
    check(set(decided) == {b"commit me", b"roll me back"}, f"local transactions ran for {sorted(decided)}")

    got = col.wait_count(1, 15.0, match=lambda x: x["body"] == b"commit me")
    check(got, "the committed message was not delivered within 15 s")
    col.quiet_for(8.0, 20.0)
    real = col.real()
    commits = [x for x in real if x["body"] == b"commit me"]
    rollbacks = [x for x in real if x["body"] == b"roll me back"]
    check(len(commits) == 1, f"committed message delivered {len(commits)} times")
    check(not rollbacks, "the rolled-back message was delivered")
    c = commits[0]
    check(c["tags"] == "TagTx" and c["keys"] == "commit-me" and c["props"]["stage"] == "tx",
          f"committed message: tags {c['tags']!r} keys {c['keys']!r} props {c['props']}")
    stored = [m["body"] for m in rawmq.pull_all(broker, topic, queues=4) if not m["body"].startswith(flows.PROBE_PREFIX)]
    check(stored == [b"commit me"], f"topic holds {stored}, want only the committed message")
    return "commit delivered once, rollback never delivered nor stored in the topic"


if __name__ == "__main__":
    run(body, timeout=110)
