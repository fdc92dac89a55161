# needs: namesrv broker
# timeout: 120
"""property_roundtrip_python — unicode tags, many keys and 30 unusual user properties survive send, store and consume (C++ core).

One message carries a unicode tag (`标签-A`), five space-separated keys (unicode and emoji
included), and 30 user properties whose values mix unicode, emoji, spaces and the characters
`= : ; , " ' \\ / ?` — plus one 3,000-character unicode value (about 8 KiB of UTF-8; the whole
property string stays under the 32,767-byte limit). Passes when the C++-core consumer reads
back every tag, key and property value exactly, and the raw stored record's property string
decodes to the same values. Fails if any byte of the property string is re-encoded, truncated
or reordered into a different key/value split.
"""

import flows
import pyclient as pc
import rawmq
from scenario import check, env, run

TAG = "标签-A"
KEYS = "k1 k2 κλειδί-3 🔑4 ключ_5"


def props():
    specials = ["grüße", "naïve café", "数据=值", "a:b;c,d", '"quoted"', "it's", "back\\slash", "/path?q=1&r=2",
                "emoji 🚀🔥", "tab\tinside", "  padded  ", "שלום", "مرحبا", "ñ-ü-ö-ä", "x" * 100]
    out = {f"p{i:02d}": specials[i % len(specials)] + f" #{i}" for i in range(30)}
    out["long"] = ("長い値-ü-🚀 " * 300)[:3000]
    return out


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic = flows.topic_for("Props")
    rawmq.ensure_topic(broker, ns, topic, queues=4)
    want = props()
    col = flows.Collector("props", props=list(want))
    flows.start_consumer(cleanups, flows.group_for("props"), ns, topic, col)
    producer = flows.start_producer(cleanups, flows.group_for("props", "PG"), ns)
    flows.prime(producer, topic, col, queues=4)

    r = producer.send_sync(pc.message(topic, "property carrier", tags=TAG, keys=KEYS, props=want))
    check(r.status == pc.SendStatus.OK, f"send: {r.status!r}")
    got = col.wait_count(1, 30.0)
    check(len(got) == 1, "the message was not consumed within 30 s")
    g = got[0]
    check(g["tags"] == TAG, f"tags {g['tags']!r}, sent {TAG!r}")
    check(g["keys"] == KEYS, f"keys {g['keys']!r}, sent {KEYS!r}")
    for k, v in want.items():
        check(g["props"][k] == v, f"property {k}: consumer read {g['props'][k]!r}, sent {v!r}")
    stored = [m for m in rawmq.pull_all(broker, topic, queues=4) if m["body"] == b"property carrier"]
    check(len(stored) == 1, f"raw pull finds {len(stored)} copies")
    sp = stored[0]["properties"]
    check(sp.get("TAGS") == TAG and sp.get("KEYS") == KEYS, f"stored TAGS {sp.get('TAGS')!r} KEYS {sp.get('KEYS')!r}")
    for k, v in want.items():
        check(sp.get(k) == v, f"stored property {k}: {sp.get(k)!r}, sent {v!r}")
    return f"tag, 5 keys and {len(want)} user properties round-tripped byte for byte"


if __name__ == "__main__":
    run(body, timeout=110)
