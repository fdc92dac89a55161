# needs: namesrv broker
# timeout: 120
# client: python5
# broker-conf: transactionCheckInterval=1000
# broker-conf: transactionTimeOut=2000
"""grpc_sdk5_transaction_python5 — transactions of the official 5.x Python SDK over gRPC:
commit, rollback, and a half message left open that the broker's check-back resolves.

The topic is TRANSACTION-typed. The SDK's Producer (with a TransactionChecker) commits one
half message, rolls one back and leaves a third open. The broker asks about the open one
through the client's Telemetry stream (RecoverOrphanedTransactionCommand); the checker sees its
body and answers ROLLBACK. Passes when only the committed message is delivered, exactly once,
and the checker was asked about the open message and no other. Fails if no check-back comes
within 30 s, or a rolled-back message is delivered.
"""

import subprocess
import time

from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer,
                      SimpleConsumer, TransactionChecker, TransactionResolution)
from scenario import check, env, run

asked = []


class Checker(TransactionChecker):
    def check(self, message):
        asked.append(message.body)
        return TransactionResolution.ROLLBACK


def body(cleanups):
    out = subprocess.run([env("RINGMQ_BIN"), "admin", "updateTopic", "-b", env("BROKER_ADDR"),
                          "-t", "GrpcTx", "-r", "2", "-w", "2", "-a", "+message.type=TRANSACTION"],
                         capture_output=True, text=True, timeout=30)
    check(out.returncode == 0, f"updateTopic: {out.stdout} {out.stderr}")
    cfg = ClientConfiguration(env("GRPC_ENDPOINT"), Credentials())
    p = Producer(cfg, ("GrpcTx",), checker=Checker())
    p.startup()
    cleanups.append(p.shutdown)
    for text, decide in ((b"tx-commit", "commit"), (b"tx-rollback", "rollback"), (b"tx-open", None)):
        tx = p.begin_transaction()
        m = Message()
        m.topic, m.body = "GrpcTx", text
        p.send(m, tx)
        if decide == "commit":
            tx.commit()
        elif decide == "rollback":
            tx.rollback()
    end = time.time() + 30
    while b"tx-open" not in asked and time.time() < end:
        time.sleep(0.2)
    check(b"tx-open" in asked, "no check-back for the open transaction within 30 s")
    c = SimpleConsumer(cfg, "GrpcTxGroup", {"GrpcTx": FilterExpression("*")}, await_duration=5)
    c.startup()
    cleanups.append(c.shutdown)
    got, end = [], time.time() + 15
    while time.time() < end:
        batch = c.receive(16, 15)
        for m in batch:
            got.append(m.body)
            c.ack(m)
        if got and not batch:
            break
    check(got == [b"tx-commit"], f"delivered {got}, want only the committed message")
    check(set(asked) == {b"tx-open"}, f"the checker was asked about {asked}")
    return "commit delivered once; rollback and checked-back rollback never delivered"


run(body, timeout=110)
