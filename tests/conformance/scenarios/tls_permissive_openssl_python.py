# needs: namesrv broker
# timeout: 90
# broker-conf: tls.server.mode=permissive
"""tls_permissive_openssl_python — TLS and plain clients share the broker's and the namesrv's ports.

ringmq runs with upstream's defaults (`tls.server.mode=permissive`, `tls.test.mode.enable=true`:
a self-signed certificate made at start). The real Python client (C++ core 2.1.0, which has no
TLS) sends 5 messages in plain. Then Python's ssl module (OpenSSL, independent of ringmq's
rustls) talks Remoting over TLS 1.3 and over TLS 1.2: it resolves the topic's route on the
namesrv, sends 5 more messages (one of 300 KiB, many records long) to the broker and pulls all
10 back. A plain raw pull on the same port sees the same 10. Fails if a TLS connection is not
TLS (ssl reports no version), if the permissive port refuses either kind of client, or if any
body differs.
"""

import os
import socket
import ssl

import pyclient as pc
import rawmq
import remoting as rm
from scenario import check, env, run

PLAIN = 5


def tls_version(addr: str) -> str:
    host, port = rm.parse_addr(addr)
    with rm.tls_wrap(socket.create_connection((host, port), timeout=5)) as s:
        return s.version() or ""


def body(cleanups):
    ns, broker = env("NAMESRV_ADDR"), env("BROKER_ADDR")
    topic = f"TlsPermissivePy-{os.getpid()}"
    rawmq.ensure_topic(broker, ns, topic, queues=2)
    producer = pc.start_producer(f"PG-tls-py-{os.getpid()}", ns)
    cleanups.append(producer.shutdown)
    expected = []
    for i in range(PLAIN):
        text = f"plain {i}"
        r = producer.send_sync(pc.message(topic, text))
        check(r.status == pc.SendStatus.OK, f"plain send {i}: {r.status!r}")
        expected.append(text.encode())

    versions = []
    for cap in ("", "1.2"):
        os.environ["RINGMQ_TLS"] = "1"
        os.environ["RINGMQ_TLS_MAX"] = cap
        try:
            version = tls_version(broker)
            check(version.startswith("TLSv1.") and (cap != "1.2" or version == "TLSv1.2"),
                  f"TLS version {version!r} with cap {cap or 'none'}")
            check(tls_version(ns).startswith("TLSv1."), "the namesrv's port speaks TLS too")
            versions.append(version)
            code, route, _ = rm.get_route(ns, topic)
            check(code == rm.SUCCESS and route is not None, f"route over TLS: code {code}")
            check(len(rm.route_broker_addrs(route)) == 1, f"route over TLS names {rm.route_broker_addrs(route)}")
            for j in range(2 if cap else 3):
                text = (f"tls {version} {j} " + ("x" * (300 * 1024 if j == 0 else 10))).encode()
                resp = rawmq.send_raw(broker, topic, text, queue_id=j % 2)
                check(resp.code == rm.SUCCESS, f"send over {version}: code {resp.code} {resp.remark}")
                expected.append(text)
            tls_pulled = sorted(m["body"] for m in rawmq.pull_all(broker, topic, queues=2))
        finally:
            os.environ.pop("RINGMQ_TLS", None)
            os.environ.pop("RINGMQ_TLS_MAX", None)
        check(tls_pulled == sorted(expected), f"pull over {version}: {len(tls_pulled)} bodies, "
                                               f"want {len(expected)}")
    plain_pulled = sorted(m["body"] for m in rawmq.pull_all(broker, topic, queues=2))
    check(plain_pulled == sorted(expected), f"plain pull: {len(plain_pulled)} bodies, want {len(expected)}")
    return f"{len(expected)} messages: {PLAIN} plain (C++ core), the rest over {', '.join(versions)} (OpenSSL)"


if __name__ == "__main__":
    run(body)
