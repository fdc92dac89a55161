#!/usr/bin/env python3
"""rawmq.py — raw Remoting operations on a broker for scenarios to set up and to verify (stdlib only).

Owns what the third-party clients cannot do, or cannot be trusted to check, in a scenario:
  * admin set-up: create a topic (UPDATE_AND_CREATE_TOPIC, 17), create/update a subscription group
    (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 200), wait until the name server routes a topic;
  * verification by raw pulls (PULL_MESSAGE, 11, subscription flag set, no long polling): read a
    queue — e.g. `%DLQ%group` — or check what the broker itself filtered, independent of the
    clients' own client-side tag re-filtering; max offsets (30) and committed offsets (14);
  * a raw SEND_MESSAGE_V2 (to see the broker's own answer code, e.g. for an oversized body);
  * a stored-record decoder (message-format.md §5: v1/v2 magic, IPv4/IPv6 hosts, zlib bodies).
Used from Python scenarios by import, and from Node scenarios through the CLI (one JSON document
on stdout), e.g.
  python3 lib/rawmq.py create-topic --broker 127.0.0.1:10911 --namesrv 127.0.0.1:9876 --topic T
  python3 lib/rawmq.py pull --broker ADDR --topic %DLQ%G --queue 0 --offset 0
  python3 lib/rawmq.py pull-all --broker ADDR --topic T [--subscription 'TagA || TagB']
Every call has a deadline. Nothing here listens.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import sys
import time
import zlib
from typing import Any, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remoting as rm  # noqa: E402

UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
GET_CONSUMER_CONNECTION_LIST = 203
PERM_READ_WRITE = 6
MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20


class RawError(Exception):
    pass


# ---- record decoding -------------------------------------------------------------------------

def _host(buf: bytes, pos: int, v6: bool) -> Tuple[str, int]:
    n = 16 if v6 else 4
    addr = socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, buf[pos:pos + n])
    (port,) = struct.unpack(">i", buf[pos + n:pos + n + 4])
    return f"{addr}:{port}", pos + n + 4


def decode_records(body: bytes) -> List[Dict[str, Any]]:
    """Concatenated stored records (a pull body) -> list of dicts. Raises RawError on garbage."""
    out = []
    pos = 0
    while pos < len(body):
        if pos + 8 > len(body):
            raise RawError(f"truncated record header at byte {pos}")
        total, magic = struct.unpack(">iI", body[pos:pos + 8])
        if magic not in (MAGIC_V1, MAGIC_V2):
            raise RawError(f"record at byte {pos}: unknown magic {magic:#010x}")
        if total < 91 or pos + total > len(body):
            raise RawError(f"record at byte {pos}: bad total size {total} (body has {len(body) - pos} left)")
        rec = body[pos:pos + total]
        (body_crc, queue_id, flag, queue_offset, phys_offset, sys_flag, born_ts) = struct.unpack(
            ">iiiqqiq", rec[8:48])
        p = 48
        born_host, p = _host(rec, p, bool(sys_flag & SYSFLAG_BORNHOST_V6))
        (store_ts,) = struct.unpack(">q", rec[p:p + 8])
        p += 8
        store_host_start = p
        store_host, p = _host(rec, p, bool(sys_flag & SYSFLAG_STOREHOST_V6))
        store_host_raw = rec[store_host_start:p]
        reconsume, prepared, blen = struct.unpack(">iqi", rec[p:p + 16])
        p += 16
        raw_body = rec[p:p + blen]
        p += blen
        if magic == MAGIC_V1:
            tlen = rec[p]
            p += 1
        else:
            (tlen,) = struct.unpack(">h", rec[p:p + 2])
            p += 2
        topic = rec[p:p + tlen].decode("utf-8")
        p += tlen
        (plen,) = struct.unpack(">h", rec[p:p + 2])
        p += 2
        props_s = rec[p:p + plen].decode("utf-8")
        p += plen
        if p != total:
            raise RawError(f"record at byte {pos}: fields end at {p}, total size says {total}")
        msg_body = raw_body
        if sys_flag & SYSFLAG_COMPRESSED:
            try:
                msg_body = zlib.decompress(raw_body)
            except zlib.error as e:
                raise RawError(f"record at byte {pos}: compressed body does not inflate: {e}") from e
        out.append({
            "topic": topic, "queue_id": queue_id, "flag": flag, "queue_offset": queue_offset,
            "phys_offset": phys_offset, "sys_flag": sys_flag, "born_ts": born_ts, "born_host": born_host,
            "store_ts": store_ts, "store_host": store_host, "reconsume_times": reconsume,
            "prepared_tx_offset": prepared, "body": msg_body, "raw_body_len": blen,
            "body_crc": body_crc, "body_crc_ok": (zlib.crc32(raw_body) & 0x7FFFFFFF) == body_crc,
            "properties": rm.parse_properties(props_s),
            "offset_msg_id": (store_host_raw + struct.pack(">q", phys_offset)).hex().upper(),
            "magic": "v1" if magic == MAGIC_V1 else "v2",
        })
        pos += total
    return out


def msg_to_json(m: Dict[str, Any]) -> Dict[str, Any]:
    d = dict(m)
    b = d.pop("body")
    try:
        d["body"] = b.decode("utf-8")
    except UnicodeDecodeError:
        d["body"] = None
    d["body_len"] = len(b)
    d["body_hex_head"] = b[:64].hex()
    return d


# ---- broker operations -----------------------------------------------------------------------

def create_topic(broker: str, topic: str, queues: int = 4, perm: int = PERM_READ_WRITE, order: bool = False,
                 timeout: float = 5.0) -> rm.Frame:
    ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues),
           "writeQueueNums": str(queues), "perm": str(perm), "topicFilterType": "SINGLE_TAG",
           "topicSysFlag": "0", "order": "true" if order else "false"}
    with rm.RemotingClient(broker, timeout=timeout) as c:
        resp = c.request(rm.UPDATE_AND_CREATE_TOPIC, ext)
    if resp.code != rm.SUCCESS:
        raise RawError(f"UPDATE_AND_CREATE_TOPIC {topic}: code {resp.code} remark {resp.remark!r}")
    return resp


def wait_routable(namesrv: str, topic: str, broker: Optional[str] = None, queues: Optional[int] = None,
                  timeout: float = 15.0) -> Dict[str, Any]:
    """Wait until the namesrv routes `topic` (to `broker`, with `queues` write queues if given)."""
    def ok(route: Dict[str, Any]) -> bool:
        if broker and broker not in rm.route_broker_addrs(route):
            return False
        if queues is not None and not any(q.get("writeQueueNums") == queues for q in route.get("queueDatas") or []):
            return False
        return bool(route.get("queueDatas"))

    route = rm.wait_for_route(namesrv, topic, ok, timeout=timeout)
    if route is None or not ok(route):
        raise RawError(f"namesrv {namesrv} did not route topic {topic!r} to {broker or 'a broker'}"
                       f"{'' if queues is None else f' with {queues} queues'} within {timeout:.0f}s "
                       f"(last route: {route})")
    return route


def ensure_topic(broker: str, namesrv: str, topic: str, queues: int = 4, order: bool = False,
                 timeout: float = 15.0) -> Dict[str, Any]:
    create_topic(broker, topic, queues=queues, order=order)
    return wait_routable(namesrv, topic, broker=broker, queues=queues, timeout=timeout)


def subscription_group_body(group: str, retry_max_times: int = 16, retry_queue_nums: int = 1,
                            broadcast: bool = True, orderly: bool = False) -> bytes:
    cfg = {"brokerId": 0, "consumeBroadcastEnable": broadcast, "consumeEnable": True,
           "consumeFromMinEnable": True, "consumeMessageOrderly": orderly, "consumeTimeoutMinute": 15,
           "groupName": group, "groupSysFlag": 0, "notifyConsumerIdsChangedEnable": True,
           "retryMaxTimes": retry_max_times, "retryQueueNums": retry_queue_nums,
           "whichBrokerWhenConsumeSlowly": 1, "attributes": {}}
    return json.dumps(cfg, separators=(",", ":")).encode()


def update_group(broker: str, group: str, retry_max_times: int = 16, timeout: float = 5.0) -> rm.Frame:
    with rm.RemotingClient(broker, timeout=timeout) as c:
        resp = c.request(UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None,
                         subscription_group_body(group, retry_max_times=retry_max_times))
    if resp.code != rm.SUCCESS:
        raise RawError(f"UPDATE_AND_CREATE_SUBSCRIPTIONGROUP {group}: code {resp.code} remark {resp.remark!r}")
    return resp


def send_raw(broker: str, topic: str, body: bytes, properties: Optional[Dict[str, str]] = None, queue_id: int = 0,
             group: str = "PG_rawmq", sys_flag: int = 0, timeout: float = 20.0) -> rm.Frame:
    """One SEND_MESSAGE_V2 (310) like a Java 4.x client; returns the response frame (any code)."""
    ext = {"a": group, "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": str(sys_flag),
           "g": str(int(time.time() * 1000)), "h": "0",
           "i": rm.properties_string(properties or {"WAIT": "true"}), "j": "0", "k": "false", "m": "false"}
    with rm.RemotingClient(broker, timeout=timeout) as c:
        return c.request(rm.SEND_MESSAGE_V2, ext, body, timeout=timeout)


def max_offset(broker: str, topic: str, queue_id: int, timeout: float = 5.0) -> int:
    with rm.RemotingClient(broker, timeout=timeout) as c:
        resp = c.request(rm.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)})
    if resp.code != rm.SUCCESS:
        raise RawError(f"GET_MAX_OFFSET {topic}/{queue_id}: code {resp.code} remark {resp.remark!r}")
    return int(resp.ext_str("offset", "0"))


def committed_offset(broker: str, group: str, topic: str, queue_id: int, timeout: float = 5.0) -> Optional[int]:
    """The group's committed offset, or None when the broker answers QUERY_NOT_FOUND."""
    with rm.RemotingClient(broker, timeout=timeout) as c:
        resp = c.request(rm.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic,
                                                     "queueId": str(queue_id)})
    if resp.code == rm.QUERY_NOT_FOUND:
        return None
    if resp.code != rm.SUCCESS:
        raise RawError(f"QUERY_CONSUMER_OFFSET {group} {topic}/{queue_id}: code {resp.code} remark {resp.remark!r}")
    return int(resp.ext_str("offset", "-1"))


def pull(broker: str, topic: str, queue_id: int, offset: int, group: str = "CG_rawmq_verifier",
         max_nums: int = 32, subscription: str = "*", expression_type: str = "TAG",
         timeout: float = 10.0) -> Tuple[int, Dict[str, str], List[Dict[str, Any]], rm.Frame]:
    """One PULL_MESSAGE with the subscription in the request (sysFlag 4: no commit, no suspension).

    Returns (code, response extFields as text, decoded messages, response frame)."""
    ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
           "maxMsgNums": str(max_nums), "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
           "subscription": subscription, "subVersion": str(int(time.time() * 1000)),
           "expressionType": expression_type}
    with rm.RemotingClient(broker, timeout=timeout) as c:
        resp = c.request(rm.PULL_MESSAGE, ext, timeout=timeout)
    fields = {k: rm.ext_text(v) for k, v in resp.ext.items()}
    msgs = decode_records(resp.body) if resp.code == rm.SUCCESS and resp.body else []
    return resp.code, fields, msgs, resp


def pull_queue(broker: str, topic: str, queue_id: int, start: int = 0, subscription: str = "*",
               expression_type: str = "TAG", group: str = "CG_rawmq_verifier", limit: int = 100000,
               timeout: float = 20.0) -> List[Dict[str, Any]]:
    """Everything from `start` to the current end of one queue that matches `subscription`."""
    out: List[Dict[str, Any]] = []
    off = start
    deadline = time.monotonic() + timeout
    while len(out) < limit:
        if time.monotonic() > deadline:
            raise RawError(f"pull_queue {topic}/{queue_id}: not done within {timeout:.0f}s at offset {off}")
        code, fields, msgs, resp = pull(broker, topic, queue_id, off, group=group, subscription=subscription,
                                        expression_type=expression_type)
        nxt = int(fields.get("nextBeginOffset", off) or off)
        if code == rm.SUCCESS:
            if not msgs:
                raise RawError(f"pull {topic}/{queue_id}@{off}: SUCCESS with an empty body")
            out.extend(msgs)
        elif code == rm.PULL_RETRY_IMMEDIATELY:
            pass
        elif code in (rm.PULL_NOT_FOUND, rm.PULL_OFFSET_MOVED):
            return out
        else:
            raise RawError(f"pull {topic}/{queue_id}@{off}: code {code} remark {resp.remark!r}")
        if nxt <= off:
            return out
        off = nxt
    return out


def pull_all(broker: str, topic: str, queues: Optional[int] = None, subscription: str = "*",
             expression_type: str = "TAG", group: str = "CG_rawmq_verifier",
             timeout: float = 30.0) -> List[Dict[str, Any]]:
    """pull_queue over queues 0..queues-1 (default: the topic's read queues from the max offsets)."""
    out: List[Dict[str, Any]] = []
    n = queues if queues is not None else 16
    for q in range(n):
        if queues is None:
            try:
                if max_offset(broker, topic, q) <= 0:
                    continue
            except RawError:
                continue
        out.extend(pull_queue(broker, topic, q, subscription=subscription, expression_type=expression_type,
                              group=group, timeout=timeout))
    return out


def wait_messages(broker: str, topic: str, count: int, queues: Optional[int] = None, timeout: float = 20.0,
                  **kw: Any) -> List[Dict[str, Any]]:
    """Poll pull_all until at least `count` messages are in `topic`; returns what is there."""
    deadline = time.monotonic() + timeout
    got: List[Dict[str, Any]] = []
    while True:
        try:
            got = pull_all(broker, topic, queues=queues, **kw)
        except (RawError, OSError, rm.ProtocolError, TimeoutError):
            got = got
        if len(got) >= count or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


# ---- CLI for Node scenarios ------------------------------------------------------------------

def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ct = sub.add_parser("create-topic")
    ct.add_argument("--broker", required=True)
    ct.add_argument("--namesrv")
    ct.add_argument("--topic", required=True)
    ct.add_argument("--queues", type=int, default=4)
    ct.add_argument("--order", action="store_true")
    ug = sub.add_parser("update-group")
    ug.add_argument("--broker", required=True)
    ug.add_argument("--group", required=True)
    ug.add_argument("--retry-max-times", type=int, default=16)
    for name in ("pull", "pull-all", "wait-messages"):
        p = sub.add_parser(name)
        p.add_argument("--broker", required=True)
        p.add_argument("--topic", required=True)
        p.add_argument("--queue", type=int, default=0)
        p.add_argument("--queues", type=int)
        p.add_argument("--offset", type=int, default=0)
        p.add_argument("--subscription", default="*")
        p.add_argument("--expression-type", default="TAG")
        p.add_argument("--count", type=int, default=1)
        p.add_argument("--timeout", type=float, default=20.0)
    mo = sub.add_parser("offsets")
    mo.add_argument("--broker", required=True)
    mo.add_argument("--topic", required=True)
    mo.add_argument("--group")
    mo.add_argument("--queues", type=int, default=4)
    a = ap.parse_args(argv)
    try:
        if a.cmd == "create-topic":
            create_topic(a.broker, a.topic, queues=a.queues, order=a.order)
            route = wait_routable(a.namesrv, a.topic, broker=a.broker, queues=a.queues) if a.namesrv else None
            res: Any = {"ok": True, "route": route}
        elif a.cmd == "update-group":
            update_group(a.broker, a.group, retry_max_times=a.retry_max_times)
            res = {"ok": True}
        elif a.cmd == "pull":
            code, fields, msgs, resp = pull(a.broker, a.topic, a.queue, a.offset, subscription=a.subscription,
                                            expression_type=a.expression_type)
            res = {"ok": True, "code": code, "remark": resp.remark, "ext": fields,
                   "messages": [msg_to_json(m) for m in msgs]}
        elif a.cmd == "pull-all":
            msgs = pull_all(a.broker, a.topic, queues=a.queues, subscription=a.subscription,
                            expression_type=a.expression_type, timeout=a.timeout)
            res = {"ok": True, "messages": [msg_to_json(m) for m in msgs]}
        elif a.cmd == "wait-messages":
            msgs = wait_messages(a.broker, a.topic, a.count, queues=a.queues, subscription=a.subscription,
                                 expression_type=a.expression_type, timeout=a.timeout)
            res = {"ok": True, "messages": [msg_to_json(m) for m in msgs]}
        else:  # offsets
            res = {"ok": True, "max": [max_offset(a.broker, a.topic, q) for q in range(a.queues)]}
            if a.group:
                res["committed"] = [committed_offset(a.broker, a.group, a.topic, q) for q in range(a.queues)]
    except (RawError, OSError, rm.ProtocolError, TimeoutError, ValueError) as e:
        res = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    print(json.dumps(res, ensure_ascii=False))
    return 0 if res.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
