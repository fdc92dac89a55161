# needs: namesrv broker
# timeout: 120
"""body_empty_python — what happens to an empty body with the C++ core, and that the broker stores/serves one.

The C++ core 2.1 refuses an empty body itself (Validators: "the message body length is zero"),
so nothing reaches the broker; the scenario checks that this client-side refusal happens and no
record is stored. Since the broker side must still accept an empty body from clients that send
one (ali-ons does, see body_empty_alions; the Java broker accepts it), a raw SEND_MESSAGE_V2 with
a 0-byte body is sent too: it must be SEND_OK, and the primed C++-core push consumer must then
receive it with an empty body and its tag. Fails if the C++ client's empty send reaches the
store, or if the broker refuses, mangles or cannot serve a stored 0-byte body.
"""

import flows
import pyclient as pc
import rawmq
from scenario import check, env, run


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic = flows.topic_for("BodyEmpty")
    rawmq.ensure_topic(broker, ns, topic, queues=1)
    col = flows.Collector("empty")
    flows.start_consumer(cleanups, flows.group_for("bodyempty"), ns, topic, col)
    producer = flows.start_producer(cleanups, flows.group_for("bodyempty", "PG"), ns)
    flows.prime(producer, topic, col, queues=1)

    refused = None
    try:
        r = producer.send_sync(pc.message(topic, b"", tags="TagEmptyCpp"))
        print(f"C++ core sent an empty body: {r}", flush=True)
    except Exception as e:
        refused = f"{type(e).__name__}: {e}"
        print(f"C++ core refused the empty body: {refused}", flush=True)
    check(refused, "the C++ 2.1 core accepted an empty body (it is expected to refuse it client-side): "
                   "update this scenario to check the round trip instead")

    resp = rawmq.send_raw(broker, topic, b"", {"TAGS": "TagEmptyRaw", "KEYS": "empty-raw", "WAIT": "true"})
    check(resp.code == 0, f"broker refused a 0-byte body: code {resp.code} remark {resp.remark!r}")
    got = col.wait_count(1, 30.0, match=lambda x: x["tags"] == "TagEmptyRaw")
    check(got, "the C++-core consumer never received the stored empty-body message")
    check(got[0]["body"] == b"", f"empty body read back as {got[0]['body']!r}")
    col.quiet_for(2.0, 8.0)
    cpp = [x for x in col.real() if x["tags"] == "TagEmptyCpp"]
    check(not cpp, f"the refused C++ empty-body message was delivered: {cpp}")
    stored = [m for m in rawmq.pull_all(broker, topic, queues=1) if not m["body"].startswith(flows.PROBE_PREFIX)]
    check(len(stored) == 1 and stored[0]["raw_body_len"] == 0 and stored[0]["properties"].get("TAGS") == "TagEmptyRaw",
          f"stored non-probe records: {[(m['raw_body_len'], m['properties'].get('TAGS')) for m in stored]}")
    return f"C++ core refuses empty bodies ({refused[:60]}...); broker stores and serves a 0-byte body"


if __name__ == "__main__":
    run(body, timeout=110)
