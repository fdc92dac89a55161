"""python_cpp.py — capture program: drives the real Python client (C++ core 2.1.0) through one step.

Usage (from the conformance venv): python_cpp.py STEP NAMESRV_ADDR
Steps (each uses its own topic/group so fixtures say what they are):
  send_sync         producer: sync send with tags, keys and a user property
  send_oneway       producer: oneway send
  send_orderly      orderly producer: send with a sharding key
  send_batch        producer: batch of 3 via the C core's SendBatchMessage
  send_compressed   producer: 8 KiB body (over the 4 KiB compression threshold)
  send_delay        producer: delay level 3
  transaction       transaction producer: half message then commit (END_TRANSACTION)
  push_consumer     clustering push consumer: startup, rebalance, pulls, offset commit, shutdown
                    (message trace on: the 2.1.0 core crashes in shutdown otherwise, see pyclient)
  push_orderly      orderly push consumer (queue locks)
  push_broadcast    broadcasting push consumer
  consume_retry     consumer gets 2 messages from the fake broker's store, asks to reconsume one
                    (CONSUMER_SEND_MSG_BACK), commits offsets (UPDATE_CONSUMER_OFFSET)
  producer_heartbeat  producer sends, then idles 33 s for its first (30 s timer) heartbeat
The driver (run_capture.py) runs the scripted listener; this program only talks to the client.
Each step is bounded: sleeps are fixed and the driver kills us after its timeout.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib"))
import pyclient as pc  # noqa: E402
from rocketmq.client import ConsumeStatus, TransactionMQProducer, TransactionStatus  # noqa: E402

# The C++ producer heartbeats on a timer shortly after start; wait so the capture sees it.
HEARTBEAT_WAIT = 3.5


def producer_step(ns: str, step: str) -> None:
    orderly = step == "send_orderly"
    p = pc.start_producer(f"PG_{step}", ns, orderly=orderly)
    time.sleep(HEARTBEAT_WAIT)
    topic = f"Capture_{step}"
    if step == "send_sync":
        r = p.send_sync(pc.message(topic, "hello sync", tags="TagA", keys="key-1 key-2",
                                   props={"color": "red", "n": "42"}))
        print("send_sync", pc.send_result_tuple(r))
    elif step == "send_oneway":
        p.send_oneway(pc.message(topic, "hello oneway", tags="TagB", keys="key-ow"))
        print("send_oneway done")
    elif step == "send_orderly":
        r = p.send_orderly_with_sharding_key(pc.message(topic, "hello orderly", tags="TagC"), "order-17")
        print("send_orderly", pc.send_result_tuple(r))
    elif step == "send_batch":
        r = pc.send_batch(p, [pc.message(topic, f"batch item {i}", tags="TagD", keys=f"bk{i}") for i in range(3)])
        print("send_batch", pc.send_result_tuple(r))
    elif step == "send_compressed":
        body = ("0123456789abcdef" * 512).encode()  # 8 KiB, compressible
        r = p.send_sync(pc.message(topic, body, tags="TagZ"))
        print("send_compressed", pc.send_result_tuple(r))
    elif step == "send_delay":
        m = pc.message(topic, "hello later", tags="TagL")
        m.set_delay_time_level(3)
        r = p.send_sync(m)
        print("send_delay", pc.send_result_tuple(r))
    time.sleep(0.5)
    p.shutdown()


def transaction_step(ns: str) -> None:
    p = TransactionMQProducer("PG_transaction", lambda msg: TransactionStatus.COMMIT)
    p.set_name_server_address(ns)
    p.start()
    time.sleep(HEARTBEAT_WAIT)
    r = p.send_message_in_transaction(pc.message("Capture_transaction", "hello tx", tags="TagT", keys="txk"),
                                      lambda msg, arg: TransactionStatus.COMMIT)
    print("transaction", pc.send_result_tuple(r))
    time.sleep(1.0)
    p.shutdown()


def consumer_step(ns: str, step: str) -> None:
    c = pc.new_push_consumer(f"CG_{step}", ns, orderly=(step == "push_orderly"),
                             broadcast=(step == "push_broadcast"))
    c.subscribe(f"Capture_{step}", lambda msg: ConsumeStatus.CONSUME_SUCCESS, "TagA || TagB")
    c.start()
    time.sleep(8.0)  # rebalance, offset look-up, a few held pulls, one offset persist (5 s)
    c.shutdown()
    print(step, "done")


def consume_retry_step(ns: str) -> None:
    topic = "Capture_consume_retry"
    seen = []

    def on_message(msg):
        body = msg.body.decode() if isinstance(msg.body, bytes) else msg.body
        seen.append(body)
        if body == "retry-me" and seen.count(body) == 1:
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    c = pc.new_push_consumer("CG_consume_retry", ns)
    c.subscribe(topic, on_message, "*")
    c.start()
    time.sleep(2.0)
    p = pc.start_producer("PG_consume_retry", ns)
    for body in ("ok-1", "retry-me"):
        print("sent", pc.send_result_tuple(p.send_sync(pc.message(topic, body, tags="TagA"))))
    time.sleep(7.0)  # deliver, send back, offset persist (every 5 s)
    p.shutdown()
    c.shutdown()
    print("consumed", seen)


def main() -> int:
    step, ns = sys.argv[1], sys.argv[2]
    if step.startswith("send_"):
        producer_step(ns, step)
    elif step == "transaction":
        transaction_step(ns)
    elif step == "consume_retry":
        consume_retry_step(ns)
    elif step == "producer_heartbeat":
        p = pc.start_producer("PG_producer_heartbeat", ns)
        print("sent", pc.send_result_tuple(p.send_sync(pc.message("Capture_producer_heartbeat", "hb"))))
        time.sleep(33.0)
        p.shutdown()
    elif step.startswith("push_"):
        consumer_step(ns, step)
    else:
        print(f"unknown step {step}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
