# needs: namesrv broker
# timeout: 150
# broker-conf: aclEnable=true
"""acl_session_credentials_python — the C++ core signs with real session credentials against a
broker running plain ACL.

The scenario writes the broker's plain_acl.yml (an admin account for the raw tools, and a user
allowed PUB|SUB on one topic, SUB only on a second, its consumer group allowed SUB) and waits
until the broker has reloaded it. Then:
  * an unsigned raw send is refused with NO_PERMISSION (16) "No accessKey is configured";
  * the C++ producer with the user's AccessKey/SecretKey sends 20 messages: all SEND_OK;
  * the same producer's send to the SUB-only topic fails, and nothing reaches that topic;
  * a producer with the right key and a wrong secret cannot send;
  * a C++ push consumer with the user's credentials receives all 20.
Fails if the broker accepts what the file forbids, or refuses what it allows (for example if the
C++ core's signature, which covers its OnsChannel field and JSON-number header values, does not
verify).
"""

import os
import time

import flows
import pyclient as pc
import rawmq
import remoting as rm
from scenario import check, env, run

ADMIN = ("aclAdmin01", "admin-secret-01")
USER = ("cppUser001", "cpp-user-secret")


def acl_file(topic: str, sub_only: str, group: str, producer_group: str) -> str:
    return f"""accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
  - accessKey: {USER[0]}
    secretKey: {USER[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - {topic}=PUB|SUB
      - {sub_only}=SUB
    groupPerms:
      - {group}=SUB
      - {producer_group}=SUB
"""


def wait_for_rules(broker: str, timeout: float = 15.0) -> None:
    """The broker re-reads its ACL files within about a second of a change."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with rm.RemotingClient(broker, credentials=ADMIN) as c:
            if c.request(26).code == rm.SUCCESS:
                return
        time.sleep(0.3)
    raise AssertionError(f"the broker did not take the new ACL file within {timeout:.0f}s")


def signed_producer(cleanups, group: str, ns: str, secret: str, instance: str = ""):
    p = pc.Producer(group, timeout=5000)
    p.set_name_server_address(ns)
    if instance:
        # Clients of one instance name share one connection factory, and the C++ core signs
        # that factory's heartbeats with the credentials set last: a producer with other
        # credentials needs an instance of its own.
        pc.set_producer_instance_name(p, instance)
    p.set_session_credentials(USER[0], secret, "ALIYUN")
    p.start()
    cleanups.append(p.shutdown)
    return p


def send_error(producer, message):
    """Why the send failed, or None when it was accepted."""
    try:
        producer.send_sync(message)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic, sub_only = flows.topic_for("AclCpp"), flows.topic_for("AclCppSubOnly")
    group, producer_group = flows.group_for("aclcpp"), flows.group_for("aclcpp", "PG")
    conf = os.path.join(env("RINGMQ_DATA_DIR"), "conf", "plain_acl.yml")
    with open(conf, "w") as fh:
        fh.write(acl_file(topic, sub_only, group, producer_group))
    wait_for_rules(broker)

    refused = rawmq.send_raw(broker, topic, b"unsigned")
    check(refused.code == 16 and "No accessKey is configured" in (refused.remark or ""),
          f"unsigned send: code {refused.code} remark {refused.remark!r}")

    os.environ["RINGMQ_ACL_ACCESS_KEY"], os.environ["RINGMQ_ACL_SECRET_KEY"] = ADMIN
    rawmq.ensure_topic(broker, ns, topic, queues=2)
    rawmq.ensure_topic(broker, ns, sub_only, queues=2)

    producer = signed_producer(cleanups, producer_group, ns, USER[1])
    for i in range(20):
        r = producer.send_sync(pc.message(topic, f"acl body {i}".encode(), tags="TagAcl"))
        check(r.status == pc.SendStatus.OK, f"send {i}: {r.status}")

    denied = send_error(producer, pc.message(sub_only, b"must not be stored"))
    check(denied, "a send to the SUB-only topic was accepted")
    print(f"send to the SUB-only topic refused: {denied}", flush=True)
    stored = sum(rawmq.max_offset(broker, sub_only, q) for q in range(2))
    check(stored == 0, f"{stored} messages reached the SUB-only topic")

    forged = signed_producer(cleanups, flows.group_for("aclforged", "PG"), ns, "not-the-secret", "forged")
    check(send_error(forged, pc.message(topic, b"forged")), "a producer with a wrong secret could send")

    col = flows.Collector("acl")
    consumer = pc.new_push_consumer(group, ns)
    consumer.set_session_credentials(USER[0], USER[1], "ALIYUN")
    consumer.subscribe(topic, col.on_message, "*")
    consumer.start()
    cleanups.append(consumer.shutdown)
    got = col.wait_count(20, 60.0, match=lambda r: r["body"].startswith(b"acl body"))
    check(len(got) == 20, f"the signed consumer received {len(got)}/20")
    bodies = sorted(r["body"] for r in got)
    check(bodies == sorted(f"acl body {i}".encode() for i in range(20)), f"bodies differ: {bodies[:3]}")
    return "unsigned refused; C++ core's signed sends, SUB-only refusal, forged-secret refusal and signed consume all as the ACL file says"


if __name__ == "__main__":
    run(body, timeout=140)
