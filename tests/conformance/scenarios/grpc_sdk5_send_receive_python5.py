# needs: namesrv broker
# timeout: 150
# client: python5
# broker-conf: recallMessageEnable=true
"""grpc_sdk5_send_receive_python5 — the official 5.x Python SDK (gRPC, rocketmq-python-client
5.1.2) sends and receives through the broker's gRPC endpoint.

Topics are made with `ringmq admin updateTopic -a +message.type=…` (NORMAL, FIFO, DELAY). The
SDK's Producer sends a normal message with a tag, a key and a user property, five FIFO messages
of one message group, and a delay message due in 3 s. A SimpleConsumer receives the normal
message with everything intact (body digest checked by the SDK: not corrupted, delivery attempt
1), changes its invisible duration and acks it; nothing comes back after the ack. A PushConsumer
of a new group gets the five FIFO messages in order; another SimpleConsumer gets the delay
message no earlier than 2 s after the send (the SDK sends whole seconds), and never a second
delay message of the same time that the Producer recalled with its receipt's recall handle
(RecallMessage; `recallMessageEnable=true`). A send to a FIFO topic
without a message group is refused by the SDK or the broker, never stored as FIFO. Fails on any
missing, altered, duplicated or early message.
"""

import os
import subprocess
import time

from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, FilterExpression, Message,
                      MessageListener, Producer, PushConsumer, SimpleConsumer)
from scenario import check, env, run


def make_topic(topic, kind):
    out = subprocess.run([env("RINGMQ_BIN"), "admin", "updateTopic", "-b", env("BROKER_ADDR"),
                          "-t", topic, "-r", "4", "-w", "4", "-a", f"+message.type={kind}"],
                         capture_output=True, text=True, timeout=30)
    check(out.returncode == 0, f"updateTopic {topic}: {out.stdout} {out.stderr}")


def drain(cfg, group, topic, want, secs, cleanups):
    c = SimpleConsumer(cfg, group, {topic: FilterExpression("*")}, await_duration=5)
    c.startup()
    cleanups.append(c.shutdown)
    got, end = [], time.time() + secs
    while len(got) < want and time.time() < end:
        for m in c.receive(16, 15):
            got.append((m, time.time()))
    return c, got


def body(cleanups):
    cfg = ClientConfiguration(env("GRPC_ENDPOINT"), Credentials())
    for topic, kind in (("GrpcNormal", "NORMAL"), ("GrpcFifo", "FIFO"), ("GrpcDelay", "DELAY")):
        make_topic(topic, kind)
    p = Producer(cfg, ("GrpcNormal", "GrpcFifo", "GrpcDelay"))
    p.startup()
    cleanups.append(p.shutdown)

    m = Message()
    m.topic, m.body, m.tag, m.keys = "GrpcNormal", b"hello grpc", "TagA", "key-1"
    m.add_property("color", "red")
    sent = p.send(m)
    check(sent.message_id, "no message id in the send receipt")
    for i in range(5):
        f = Message()
        f.topic, f.body, f.message_group = "GrpcFifo", f"fifo-{i}".encode(), "order-1"
        p.send(f)
    d = Message()
    d.topic, d.body, d.delivery_timestamp = "GrpcDelay", b"later", int(time.time()) + 3
    delay_sent = time.time()
    p.send(d)
    r = Message()
    r.topic, r.body, r.delivery_timestamp = "GrpcDelay", b"recalled", d.delivery_timestamp
    to_recall = p.send(r)
    check(to_recall.recall_handle, "no recall handle in a delay message's send receipt")
    recalled_id = p.recall_message("GrpcDelay", to_recall.recall_handle)
    check(recalled_id == to_recall.message_id,
          f"recall answered {recalled_id}, sent {to_recall.message_id}")
    refused = False
    try:
        n = Message()
        n.topic, n.body = "GrpcFifo", b"no group"
        p.send(n)
    except Exception as e:  # the SDK or the broker refuses a NORMAL message on a FIFO topic
        refused = True
        print("normal message on a FIFO topic refused:", e)
    check(refused, "a message without a group was accepted on a FIFO topic")

    c, got = drain(cfg, "GrpcSimple", "GrpcNormal", 1, 30, cleanups)
    check(len(got) == 1, f"simple consumer got {len(got)} messages, want 1")
    r = got[0][0]
    check(r.message_id == sent.message_id, f"message id {r.message_id} != {sent.message_id}")
    check(r.body == b"hello grpc" and r.tag == "TagA" and "key-1" in r.keys,
          f"body/tag/keys altered: {r.body!r} {r.tag!r} {r.keys!r}")
    check(r.properties.get("color") == "red", f"user property lost: {r.properties}")
    check(not r.corrupted, "the SDK found the body digest wrong")
    check(r.delivery_attempt == 1, f"delivery attempt {r.delivery_attempt}")
    c.change_invisible_duration(r, 20)
    c.ack(r)
    again = c.receive(16, 15)
    check(not again, f"an acked message came back: {[m.body for m in again]}")

    pushed = []

    class Listener(MessageListener):
        def consume(self, message):
            pushed.append(message.body)
            return ConsumeResult.SUCCESS

    pc = PushConsumer(cfg, "GrpcPush", Listener(), {"GrpcFifo": FilterExpression("*")})
    pc.startup()
    cleanups.append(pc.shutdown)
    end = time.time() + 30
    while len(pushed) < 5 and time.time() < end:
        time.sleep(0.2)
    check(pushed == [f"fifo-{i}".encode() for i in range(5)], f"FIFO order broken: {pushed}")

    dc, late = drain(cfg, "GrpcDelayGroup", "GrpcDelay", 1, 30, cleanups)
    check(len(late) == 1 and late[0][0].body == b"later", f"delay message: {late}")
    waited = late[0][1] - delay_sent
    check(waited >= 2.0, f"the delay message came after {waited:.1f} s, before its time")
    # Both were due in the same second: the recalled one would have come by now.
    extra = dc.receive(16, 15)
    check(not extra, f"a recalled message was delivered: {[m.body for m in extra]}")
    return (f"normal, FIFO (push, in order) and delay ({waited:.1f} s) delivered intact; "
            "the recalled delay message never came")


run(body, timeout=140)
