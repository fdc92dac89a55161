"""fake_rich_broker.py — the broker role of selftest/fake_ringmq.py: enough broker behaviour for the
behaviour scenarios to run their full logic without ringmq (NOT ringmq, not for CI).

Owns `RichFakeBroker`, a lib/fake_server.FakeServer whose broker role adds, in a few hundred lines
of Python: topics (UPDATE_AND_CREATE_TOPIC, auto-create on send, retry topics on heartbeat, DLQ on
send-back) registered with the name server whenever they change; broker-side TAG and SQL92
filtering in PULL_MESSAGE (PULL_RETRY_IMMEDIATELY when nothing examined matched) and long polling
woken by arrivals; delay levels
(`messageDelayLevel`) through a timer; CONSUMER_SEND_MSG_BACK to `%RETRY%group` with
`3 + reconsumeTimes` delay, or `%DLQ%group` once reconsumeTimes >= maxReconsumeTimes;
transactional half messages committed/rolled back by END_TRANSACTION, and checked back with
CHECK_TRANSACTION_STATE on the producer's connection (transactionCheckInterval/TimeOut); the 4 MiB body limit
(MESSAGE_ILLEGAL); UNREGISTER_CLIENT; and a store that survives a restart (pickled under
storePathRootDir on SIGTERM). It is a model written from the specs for exercising scenario
logic, not a reference: when it and ringmq disagree, the specs decide.

Deliberate faults (env FAKE_RINGMQ_BREAK, comma-separated) so scenarios can be seen to fail:
  no-filter       pulls ignore the subscription (no broker-side TAG/SQL92 filtering)
  drop-props      user properties are not stored (system ones are)
  no-delay        delay levels are ignored (delivered at once)
  early-delay     delayed messages are delivered after half their delay
  no-dlq          send-back always retries, never dead-letters
  forget-offsets  consumer offsets are not kept across a restart
  reorder         every 10th message of a queue swaps places with the previous message of the same
                  KEYS in that queue (per-key order broken)
  no-tx           END_TRANSACTION is answered REQUEST_CODE_NOT_SUPPORTED (and half messages are lost)
  no-max-size     bodies above 4 MiB are accepted
  truncate-body   bodies longer than 1 MiB are stored cut to 1 MiB
  dup             every 7th message is stored twice
  slow-poll       parked (long-polling) pulls are not woken when a message arrives, only after
                  their hold time
"""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import remoting as rm  # noqa: E402
from fake_server import FakeServer, SendRecord, _Conn  # noqa: E402

DEFAULT_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
MAX_BODY = 4 * 1024 * 1024
MESSAGE_ILLEGAL = 13
SYSTEM_PROPS = {"TAGS", "KEYS", "UNIQ_KEY", "WAIT", "DELAY", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "REAL_TOPIC",
                "REAL_QID", "TRAN_MSG", "PGROUP", "CLUSTER", "MAX_OFFSET", "MIN_OFFSET", "__SHARDINGKEY",
                "__SHARDING_KEY", "RECONSUME_TIME", "MAX_RECONSUME_TIMES", "TRACE_ON", "MSG_REGION"}


def parse_levels(text: str) -> List[float]:
    unit = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    out = []
    for w in text.split():
        m = re.fullmatch(r"(\d+)([smhd])", w)
        if not m:
            raise ValueError(f"bad delay level {w!r}")
        out.append(int(m.group(1)) * unit[m.group(2)])
    return out


# ---- a small SQL92 evaluator (message-format.md §8 subset) -----------------------------------

_TOKEN = re.compile(r"\s*(?:(?P<num>-?\d+(?:\.\d+)?)|(?P<str>'(?:[^']|'')*')|(?P<op><>|!=|>=|<=|=|>|<|\(|\)|,)"
                    r"|(?P<word>[A-Za-z_][A-Za-z0-9_.]*))")


class Sql92:
    def __init__(self, text: str):
        self.toks: List[Tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise ValueError(f"SQL92: cannot parse at {text[pos:]!r}")
            kind = m.lastgroup
            self.toks.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0
        self.tree = self._or()
        if self.i != len(self.toks):
            raise ValueError(f"SQL92: trailing tokens {self.toks[self.i:]}")

    def _peek(self, *words: str) -> bool:
        return self.i < len(self.toks) and self.toks[self.i][1].upper() in words

    def _take(self) -> Tuple[str, str]:
        t = self.toks[self.i]
        self.i += 1
        return t

    def _or(self) -> Any:
        left = self._and()
        while self._peek("OR"):
            self._take()
            left = ("or", left, self._and())
        return left

    def _and(self) -> Any:
        left = self._not()
        while self._peek("AND"):
            self._take()
            left = ("and", left, self._not())
        return left

    def _not(self) -> Any:
        if self._peek("NOT"):
            self._take()
            return ("not", self._not())
        return self._cmp()

    def _cmp(self) -> Any:
        left = self._primary()
        if self._peek("=", "<>", "!=", ">", "<", ">=", "<="):
            op = self._take()[1]
            return ("cmp", op, left, self._primary())
        if self._peek("IS"):
            self._take()
            neg = False
            if self._peek("NOT"):
                self._take()
                neg = True
            if not self._peek("NULL"):
                raise ValueError("SQL92: IS without NULL")
            self._take()
            return ("isnull", neg, left)
        neg = False
        if self._peek("NOT"):
            self._take()
            neg = True
        if self._peek("IN"):
            self._take()
            if self._take()[1] != "(":
                raise ValueError("SQL92: IN without (")
            items = [self._primary()]
            while self._peek(","):
                self._take()
                items.append(self._primary())
            if self._take()[1] != ")":
                raise ValueError("SQL92: IN without )")
            return ("in", neg, left, items)
        if self._peek("BETWEEN"):
            self._take()
            lo = self._primary()
            if not self._peek("AND"):
                raise ValueError("SQL92: BETWEEN without AND")
            self._take()
            return ("between", neg, left, lo, self._primary())
        return left

    def _primary(self) -> Any:
        kind, val = self._take()
        if val == "(":
            e = self._or()
            if self._take()[1] != ")":
                raise ValueError("SQL92: missing )")
            return e
        if kind == "num":
            return ("lit", float(val))
        if kind == "str":
            return ("lit", val[1:-1].replace("''", "'"))
        if val.upper() in ("TRUE", "FALSE"):
            return ("lit", val.upper() == "TRUE")
        return ("prop", val)

    def eval(self, props: Dict[str, str]) -> bool:
        return self._ev(self.tree, props) is True

    def _ev(self, n: Any, p: Dict[str, str]) -> Any:
        kind = n[0]
        if kind == "lit":
            return n[1]
        if kind == "prop":
            return p.get(n[1])
        if kind == "or":
            return self._ev(n[1], p) is True or self._ev(n[2], p) is True
        if kind == "and":
            return self._ev(n[1], p) is True and self._ev(n[2], p) is True
        if kind == "not":
            v = self._ev(n[1], p)
            return None if v is None else not v
        if kind == "isnull":
            v = self._ev(n[2], p)
            return (v is not None) if n[1] else (v is None)
        if kind == "cmp":
            a, b = self._ev(n[2], p), self._ev(n[3], p)
            if a is None or b is None:
                return False
            a, b = _coerce(a, b)
            return {"=": a == b, "<>": a != b, "!=": a != b, ">": a > b, "<": a < b, ">=": a >= b, "<=": a <= b}[n[1]]
        if kind == "in":
            a = self._ev(n[2], p)
            if a is None:
                return False
            hit = any(_coerce(a, self._ev(x, p))[0] == _coerce(a, self._ev(x, p))[1] for x in n[3])
            return not hit if n[1] else hit
        if kind == "between":
            a, lo, hi = self._ev(n[2], p), self._ev(n[3], p), self._ev(n[4], p)
            if a is None:
                return False
            a1, lo1 = _coerce(a, lo)
            a2, hi1 = _coerce(a, hi)
            hit = lo1 <= a1 and a2 <= hi1
            return not hit if n[1] else hit
        raise ValueError(f"SQL92: bad node {n}")


def _coerce(a: Any, b: Any) -> Tuple[Any, Any]:
    if isinstance(a, (int, float)) or isinstance(b, (int, float)):
        try:
            return float(a), float(b)
        except (TypeError, ValueError):
            return str(a), str(b)
    return a, b


# ---- the broker ------------------------------------------------------------------------------

class RichFakeBroker(FakeServer):
    def __init__(self, *, store_dir: str, delay_levels: str = DEFAULT_LEVELS, breaks: Optional[set] = None,
                 on_topics_changed: Optional[Callable[[], None]] = None, tx_check_interval_ms: int = 30000,
                 tx_timeout_ms: int = 6000, **kw: Any):
        super().__init__(namesrv=False, broker=True, **kw)
        self.store_dir = store_dir
        self.levels = parse_levels(delay_levels)
        self.breaks = breaks or set()
        self.on_topics_changed = on_topics_changed or (lambda: None)
        self.topics: Dict[str, Dict[str, Any]] = {}
        self.meta: Dict[Tuple[str, int], List[Dict[str, Any]]] = {}   # parallel to _store
        self.by_phys: Dict[int, Dict[str, Any]] = {}
        self.half: Dict[int, Dict[str, Any]] = {}
        self.delayed: List[Dict[str, Any]] = []
        self.subs: Dict[Tuple[str, str], Tuple[str, str]] = {}        # (group, topic) -> (expr, type)
        self.parked: Dict[Tuple[str, int], List[Dict[str, Any]]] = {}  # long-polling pulls per queue
        self.stored_count = 0
        self._load()
        self._save_lock = threading.Lock()
        self.tx_check_interval = tx_check_interval_ms / 1000.0
        self.tx_timeout = tx_timeout_ms / 1000.0
        self.half_conns: Dict[int, _Conn] = {}
        for target, name in ((self._delay_loop, "fake-delay"), (self._tx_check_loop, "fake-tx-check")):
            t = threading.Thread(target=target, daemon=True, name=name)
            t.start()
            self._threads.append(t)

    # ---- persistence ---------------------------------------------------------------------

    @property
    def _state_path(self) -> str:
        return os.path.join(self.store_dir, "fake_broker_state.pickle")

    def _load(self) -> None:
        try:
            with open(self._state_path, "rb") as fh:
                st = pickle.load(fh)
        except (OSError, EOFError, pickle.UnpicklingError) as e:
            self.log(f"no saved state loaded ({type(e).__name__}: {e})")
            return
        self.topics, self._store, self.meta = st["topics"], st["store"], st["meta"]
        self.by_phys, self.half, self.delayed = st["by_phys"], st["half"], st["delayed"]
        self._phys_offset = st["phys"]
        if "forget-offsets" not in self.breaks:
            self._consumer_offsets = st["offsets"]
        self.log(f"loaded saved state: {len(self.by_phys)} messages, {len(self.topics)} topics, "
                 f"{len(self._consumer_offsets)} offsets")

    def save(self, offsets: bool = True) -> None:
        with self._cv:
            kept = self._consumer_offsets
            if not offsets:
                try:
                    with open(self._state_path, "rb") as fh:
                        kept = pickle.load(fh).get("offsets", {})
                except (OSError, EOFError, pickle.UnpicklingError):
                    kept = {}
            st = {"topics": self.topics, "store": self._store, "meta": self.meta, "by_phys": self.by_phys,
                  "half": self.half, "delayed": self.delayed, "phys": self._phys_offset,
                  "offsets": kept}
            os.makedirs(self.store_dir, exist_ok=True)
            tmp = self._state_path + ".tmp"
            with open(tmp, "wb") as fh:
                pickle.dump(st, fh)
            os.replace(tmp, self._state_path)

    def persist(self) -> None:
        """Like a page cache that outlives the process: every change reaches the disk before the
        reply, so a kill -9 loses no acknowledged message (consumer offsets only at stop)."""
        with self._save_lock:
            try:
                self.save(offsets=False)
            except Exception as e:  # noqa: BLE001 - a test double must say why it cannot save
                self.log(f"saving state failed: {type(e).__name__}: {e}")

    # ---- topics ----------------------------------------------------------------------------

    def topic_configs(self) -> List[Dict[str, Any]]:
        with self._cv:
            tcs = [rm.topic_config(n, queues=c["queues"], perm=c["perm"]) for n, c in self.topics.items()]
        names = {t["topicName"] for t in tcs}
        if "TBW102" not in names:
            tcs.append(rm.topic_config("TBW102", 8, 7))
        if "SELF_TEST_TOPIC" not in names:
            tcs.append(rm.topic_config("SELF_TEST_TOPIC", 1, 6))
        return tcs

    def _ensure_topic(self, name: str, queues: int, perm: int = 6) -> None:
        changed = False
        with self._cv:
            cur = self.topics.get(name)
            if cur is None or cur["queues"] != queues or cur["perm"] != perm:
                self.topics[name] = {"queues": queues, "perm": perm}
                changed = True
        if changed:
            self.on_topics_changed()

    # ---- storing ---------------------------------------------------------------------------

    def _append(self, topic: str, queue_id: int, flag: int, sys_flag: int, born_ts: int, born_host: str,
                body: bytes, props: Dict[str, str], reconsume: int, prepared: int = 0) -> Tuple[int, int, str]:
        """Append to a topic queue now. Caller holds self._cv. Returns (phys, queue offset, offsetMsgId)."""
        if "truncate-body" in self.breaks and len(body) > 1024 * 1024:
            body = body[:1024 * 1024]
        if "drop-props" in self.breaks:
            props = {k: v for k, v in props.items() if k in SYSTEM_PROPS}
        queue = self._store.setdefault((topic, queue_id), [])
        meta = self.meta.setdefault((topic, queue_id), [])
        qoff = len(queue)
        phys = self._phys_offset
        store_ts = int(time.time() * 1000)
        rec = rm.encode_stored_record(topic=topic, queue_id=queue_id, flag=flag, queue_offset=qoff,
                                      phys_offset=phys, sys_flag=sys_flag, born_ts=born_ts, born_host=born_host,
                                      store_ts=store_ts, store_host=self.broker_addr, body=body,
                                      properties=rm.properties_string(props), reconsume_times=reconsume,
                                      prepared_tx_offset=prepared)
        self._phys_offset += len(rec)
        queue.append(rec)
        m = {"topic": topic, "queue_id": queue_id, "flag": flag, "sys_flag": sys_flag, "born_ts": born_ts,
             "born_host": born_host, "body": body, "props": dict(props), "reconsume": reconsume, "phys": phys,
             "qoff": qoff, "store_ts": store_ts}
        meta.append(m)
        self.by_phys[phys] = m
        if "reorder" in self.breaks and qoff % 10 == 9 and props.get("KEYS"):
            j = next((k for k in range(qoff - 1, -1, -1) if meta[k]["props"].get("KEYS") == props["KEYS"]), None)
            if j is not None:
                prev = meta[j]
                meta[j], meta[qoff] = m, prev
                m["qoff"], prev["qoff"] = j, qoff
                queue[j], queue[qoff] = self._encode(m), self._encode(prev)
        self.stored_count += 1
        self._wake_queue(topic, queue_id)
        if "dup" in self.breaks and self.stored_count % 7 == 0:
            self._append(topic, queue_id, flag, sys_flag, born_ts, born_host, body, props, reconsume, prepared)
        self._cv.notify_all()
        return phys, qoff, rm.offset_msg_id(self.broker_addr, phys)

    def _encode(self, m: Dict[str, Any]) -> bytes:
        return rm.encode_stored_record(topic=m["topic"], queue_id=m["queue_id"], flag=m["flag"],
                                       queue_offset=m["qoff"], phys_offset=m["phys"], sys_flag=m["sys_flag"],
                                       born_ts=m["born_ts"], born_host=m["born_host"], store_ts=m["store_ts"],
                                       store_host=self.broker_addr, body=m["body"],
                                       properties=rm.properties_string(m["props"]), reconsume_times=m["reconsume"])

    def _schedule(self, due: float, entry: Dict[str, Any]) -> None:
        with self._cv:
            entry["due"] = due
            self.delayed.append(entry)
            self._cv.notify_all()

    def _delay_loop(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            with self._cv:
                due = [e for e in self.delayed if e["due"] <= now]
                self.delayed = [e for e in self.delayed if e["due"] > now]
                for e in due:
                    self._append(e["topic"], e["queue_id"], e["flag"], e["sys_flag"], e["born_ts"], e["born_host"],
                                 e["body"], e["props"], e["reconsume"])
            if due:
                self.persist()
            self._stop.wait(0.05)

    def _tx_check_loop(self) -> None:
        """CHECK_TRANSACTION_STATE (39) to the producer connection of each half message older
        than the transaction timeout, every check interval (headers.md §7.3)."""
        opaque = 1_000_000
        while not self._stop.wait(self.tx_check_interval):
            if "no-tx" in self.breaks:
                continue
            now = time.time()
            with self._cv:
                due = [(phys, h) for phys, h in self.half.items() if now - h.get("t", now) >= self.tx_timeout]
            for phys, h in due:
                conn = self.half_conns.get(phys)
                if conn is None or conn.closed:
                    continue
                props = dict(h["props"], TRAN_MSG="true", PGROUP=h.get("pgroup", ""))
                rec = rm.encode_stored_record(topic=h["topic"], queue_id=h["queue_id"], flag=h["flag"], queue_offset=0,
                                              phys_offset=phys, sys_flag=0, born_ts=h["born_ts"],
                                              born_host=h["born_host"], store_ts=int(h.get("t", now) * 1000),
                                              store_host=self.broker_addr, body=h["body"],
                                              properties=rm.properties_string(props), reconsume_times=h["reconsume"])
                uniq = h["props"].get("UNIQ_KEY", "")
                ext = {"topic": h["topic"], "tranStateTableOffset": "0", "commitLogOffset": str(phys),
                       "msgId": uniq, "transactionId": uniq, "offsetMsgId": rm.offset_msg_id(self.broker_addr, phys),
                       "bname": self.broker_name}
                opaque += 1
                conn.send(rm.make_request(rm.CHECK_TRANSACTION_STATE, ext, rec, opaque=opaque, oneway=True))

    def _level_delay(self, level: int) -> float:
        level = max(1, min(level, len(self.levels)))
        d = self.levels[level - 1]
        if "no-delay" in self.breaks:
            return 0.0
        if "early-delay" in self.breaks:
            return d / 2
        return d

    # ---- dispatch --------------------------------------------------------------------------

    def _broker(self, conn: _Conn, f: rm.Frame) -> None:
        code = f.code
        if code == rm.UPDATE_AND_CREATE_TOPIC:
            self._ensure_topic(f.ext_str("topic", ""), int(f.ext_str("writeQueueNums", "4") or 4),
                               int(f.ext_str("perm", "6") or 6))
            self._reply(conn, f)
        elif code == 200:  # UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
            self._reply(conn, f)
        elif code == rm.HEART_BEAT:
            try:
                hb = json.loads(f.body.decode("utf-8")) if f.body else {}
            except (UnicodeDecodeError, json.JSONDecodeError):
                hb = {}
            for cd in hb.get("consumerDataSet") or []:
                group = str(cd.get("groupName"))
                self._ensure_topic(f"%RETRY%{group}", 1)
                for sd in cd.get("subscriptionDataSet") or []:
                    with self._cv:
                        self.subs[(group, str(sd.get("topic")))] = (str(sd.get("subString", "*")),
                                                                    str(sd.get("expressionType") or "TAG"))
            super()._broker(conn, f)
        elif code == rm.UNREGISTER_CLIENT:
            group = f.ext_str("consumerGroup", "")
            cid = f.ext_str("clientID", "")
            with self._cv:
                if group in self._group_clients and cid in self._group_clients[group]:
                    self._group_clients[group].remove(cid)
            self._reply(conn, f)
        elif code == rm.CONSUMER_SEND_MSG_BACK:
            self._send_back(conn, f)
        elif code == rm.END_TRANSACTION:
            self._end_tx(conn, f)
        else:
            super()._broker(conn, f)

    def _send(self, conn: _Conn, f: rm.Frame) -> None:
        v2 = f.code in (rm.SEND_MESSAGE_V2, rm.SEND_BATCH_MESSAGE)

        def field(short: str, long: str, default: str = "") -> str:
            return f.ext_str(short if v2 else long, default) or default

        topic = field("b", "topic")
        queue_id = max(0, int(field("e", "queueId", "0")))
        sys_flag = int(field("f", "sysFlag", "0"))
        born_ts = int(field("g", "bornTimestamp", "0"))
        reconsume = int(field("j", "reconsumeTimes", "0"))
        batch = field("m", "batch").lower() in ("true", "1") or f.code == rm.SEND_BATCH_MESSAGE
        props = rm.parse_properties(field("i", "properties"))
        if len(f.body) > MAX_BODY and "no-max-size" not in self.breaks:
            self._reply(conn, f, MESSAGE_ILLEGAL,
                        remark=f"the message body size over max value, MAX: {MAX_BODY}")
            return
        if topic not in self.topics and not topic.startswith(("%RETRY%", "%DLQ%", "rmq_sys_")):
            self._ensure_topic(topic, int(field("d", "defaultTopicQueueNums", "4")))
        elif topic.startswith("rmq_sys_") and topic not in self.topics:
            self._ensure_topic(topic, 1)
        messages = rm.split_batch_body(f.body) if batch else [
            {"flag": int(field("h", "flag", "0")), "body": f.body, "properties": props}]
        ids, qoff = [], -1
        tx_id = None
        with self._cv:
            for m in messages:
                p = dict(m["properties"])
                p.setdefault("UNIQ_KEY", rm.offset_msg_id(self.broker_addr, self._phys_offset) + "FA4E")
                p["CLUSTER"] = self.cluster
                if p.get("TRAN_MSG") == "true" and sys_flag & 0xC == 0x4:
                    phys = self._phys_offset
                    self._phys_offset += 1000 + len(m["body"])
                    self.half[phys] = {"topic": topic, "queue_id": queue_id, "flag": m["flag"], "sys_flag": 0,
                                       "born_ts": born_ts, "born_host": conn.peer, "body": m["body"],
                                       "props": {k: v for k, v in p.items() if k not in ("TRAN_MSG", "PGROUP")},
                                       "reconsume": reconsume, "t": time.time(), "pgroup": p.get("PGROUP", "")}
                    self.half_conns[phys] = conn
                    ids.append(rm.offset_msg_id(self.broker_addr, phys))
                    tx_id = p["UNIQ_KEY"]
                    qoff = 0
                    continue
                level = int(p.get("DELAY", "0") or 0)
                if level > 0 and not topic.startswith("%DLQ%"):
                    phys = self._phys_offset
                    self._phys_offset += 1000 + len(m["body"])
                    self.delayed.append({"due": time.time() + self._level_delay(level), "topic": topic,
                                         "queue_id": queue_id, "flag": m["flag"], "sys_flag": sys_flag,
                                         "born_ts": born_ts, "born_host": conn.peer, "body": m["body"],
                                         "props": {k: v for k, v in p.items() if k != "DELAY"},
                                         "reconsume": reconsume})
                    ids.append(rm.offset_msg_id(self.broker_addr, phys))
                    qoff = max(qoff, 0)
                    continue
                _, q, mid = self._append(topic, queue_id, m["flag"], sys_flag, born_ts, conn.peer, m["body"], p,
                                         reconsume)
                ids.append(mid)
                qoff = q if qoff < 0 else qoff
            self.sends.append(SendRecord(f.code, topic, queue_id, batch, messages, dict(f.ext), ids, qoff))
            self._cv.notify_all()
        ext = {"msgId": ",".join(ids), "queueId": str(queue_id), "queueOffset": str(max(qoff, 0)),
               "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
        uniq = props.get("UNIQ_KEY") or tx_id
        if uniq and not batch:
            ext["transactionId"] = uniq
        self.persist()
        self._reply(conn, f, ext=ext)

    def _send_back(self, conn: _Conn, f: rm.Frame) -> None:
        group = f.ext_str("group", "")
        phys = int(f.ext_str("offset", "-1") or -1)
        delay_level = int(f.ext_str("delayLevel", "0") or 0)
        max_times = int(f.ext_str("maxReconsumeTimes", "16") or 16)
        with self._cv:
            orig = self.by_phys.get(phys)
        if orig is None:
            self._reply(conn, f, rm.SYSTEM_ERROR, remark=f"look message by offset failed, {phys}")
            return
        props = dict(orig["props"])
        props.setdefault("RETRY_TOPIC", orig["topic"])
        props.setdefault("ORIGIN_MESSAGE_ID", f.ext_str("originMsgId", "") or rm.offset_msg_id(self.broker_addr, phys))
        props["WAIT"] = "false"
        entry = {"flag": orig["flag"], "sys_flag": orig["sys_flag"], "born_ts": orig["born_ts"],
                 "born_host": orig["born_host"], "body": orig["body"], "props": props,
                 "reconsume": orig["reconsume"] + 1, "queue_id": 0}
        if (orig["reconsume"] >= max_times or delay_level < 0) and "no-dlq" not in self.breaks:
            self._ensure_topic(f"%DLQ%{group}", 1)
            with self._cv:
                self._append(f"%DLQ%{group}", 0, entry["flag"], entry["sys_flag"], entry["born_ts"],
                             entry["born_host"], entry["body"], props, entry["reconsume"])
        else:
            level = delay_level if delay_level > 0 else 3 + orig["reconsume"]
            self._ensure_topic(f"%RETRY%{group}", 1)
            entry["topic"] = f"%RETRY%{group}"
            self._schedule(time.time() + self._level_delay(level), entry)
        self.persist()
        self._reply(conn, f)

    def _end_tx(self, conn: _Conn, f: rm.Frame) -> None:
        if "no-tx" in self.breaks:
            self._reply(conn, f, rm.REQUEST_CODE_NOT_SUPPORTED, remark=" request type 37 not supported")
            return
        phys = int(f.ext_str("commitLogOffset", "-1") or -1)
        kind = int(f.ext_str("commitOrRollback", "0") or 0)
        with self._cv:
            h = self.half.get(phys)
            if h is None:
                self._reply(conn, f, rm.SYSTEM_ERROR, remark="Find prepared transaction message failed")
                return
            if kind == 8:
                del self.half[phys]
                self._append(h["topic"], h["queue_id"], h["flag"], 0x8, h["born_ts"], h["born_host"], h["body"],
                             h["props"], h["reconsume"], prepared=phys)
            elif kind == 12:
                del self.half[phys]
        self.persist()
        self._reply(conn, f)

    def _matcher(self, group: str, topic: str, f: rm.Frame) -> Callable[[Dict[str, Any]], bool]:
        if "no-filter" in self.breaks:
            return lambda m: True
        sys_flag = int(f.ext_str("sysFlag", "0") or 0)
        if sys_flag & 4:
            expr, etype = f.ext_str("subscription", "*") or "*", f.ext_str("expressionType", "TAG") or "TAG"
        else:
            expr, etype = self.subs.get((group, topic), ("*", "TAG"))
        if etype.upper() == "SQL92":
            q = Sql92(expr)
            return lambda m: q.eval({k: v for k, v in m["props"].items()})
        tags = {t.strip() for t in expr.split("||") if t.strip()}
        if not tags or "*" in tags:
            return lambda m: True
        return lambda m: m["props"].get("TAGS") in tags

    def _pull(self, conn: _Conn, f: rm.Frame, held: bool = False) -> None:
        topic = f.ext_str("topic", "")
        group = f.ext_str("consumerGroup", "")
        queue_id = int(f.ext_str("queueId", "0") or 0)
        offset = int(f.ext_str("queueOffset", "0") or 0)
        max_n = max(1, min(32, int(f.ext_str("maxMsgNums", "32") or 32)))
        try:
            match = self._matcher(group, topic, f)
        except ValueError as e:
            self._reply(conn, f, 23, remark=f"parse the consumer's subscription failed: {e}")
            return
        with self._cv:
            queue = self._store.get((topic, queue_id), [])
            meta = self.meta.get((topic, queue_id), [])
            total = len(queue)
            picked, pos, budget = [], offset, 256 * 1024
            while 0 <= pos < total and len(picked) < max_n:
                if match(meta[pos]):
                    if picked and budget - len(queue[pos]) < 0:
                        break
                    picked.append(queue[pos])
                    budget -= len(queue[pos])
                pos += 1
        ext = {"maxOffset": str(total), "minOffset": "0", "suggestWhichBrokerId": "0"}
        if picked:
            ext["nextBeginOffset"] = str(pos)
            self._reply(conn, f, rm.SUCCESS, ext=ext, body=b"".join(picked), remark="FOUND")
            return
        if 0 <= offset < pos:
            ext["nextBeginOffset"] = str(pos)
            self._reply(conn, f, rm.PULL_RETRY_IMMEDIATELY, ext=ext, remark="NO_MATCHED_MESSAGE")
            return
        sys_flag = int(f.ext_str("sysFlag", "0") or 0)
        suspend_ms = int(f.ext_str("suspendTimeoutMillis", "0") or 0)
        if held or not sys_flag & 0x2 or suspend_ms <= 0 or self._stop.is_set():
            ext["nextBeginOffset"] = str(min(max(offset, 0), total))
            self._reply(conn, f, rm.PULL_NOT_FOUND, ext=ext, remark="no new message")
            return
        # Long polling: park until a message arrives on this queue (unless slow-poll) or the hold ends.
        entry: Dict[str, Any] = {"conn": conn, "frame": f, "done": False}
        timer = threading.Timer(min(self.pull_hold * 5, suspend_ms / 1000.0), self._wake, args=(entry,))
        timer.daemon = True
        entry["timer"] = timer
        with self._cv:
            self.parked.setdefault((topic, queue_id), []).append(entry)
            self._timers.append(timer)
        timer.start()

    def _wake(self, entry: Dict[str, Any]) -> None:
        with self._cv:
            if entry["done"]:
                return
            entry["done"] = True
            entry["timer"].cancel()
        self._pull(entry["conn"], entry["frame"], held=True)

    def _wake_queue(self, topic: str, queue_id: int) -> None:
        """Caller holds self._cv: answer the pulls parked on this queue, outside the lock."""
        if "slow-poll" in self.breaks:
            return
        for entry in self.parked.pop((topic, queue_id), []):
            t = threading.Timer(0.0, self._wake, args=(entry,))
            t.daemon = True
            t.start()
