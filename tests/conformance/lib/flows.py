"""flows.py — send/consume building blocks for Python (C++ core) scenarios.

Owns what every produce-then-consume scenario repeats with the real Python client
(rocketmq-client-python 2.0.0 over the C++ core 2.1.0):
  * `Collector`: a thread-safe record of what a push consumer's callback saw (body, tags, keys,
    chosen properties, msg id, queue id/offset, reconsume times, timestamps), with bounded waits;
    the callback's answer can be scripted (e.g. RECONSUME_LATER for some messages);
  * `start_consumer`: a started push consumer (clustering/broadcast, concurrent/orderly) feeding a
    Collector, shut down by the scenario's cleanups;
  * `prime`: send probe messages until the consumer has received one from every queue of the
    topic, so that the consumer's start offsets are settled before the real messages are sent
    (a new group whose offset the broker does not know starts at the queue's max offset:
    messages sent before it is ready could be skipped legitimately);
  * `topic_for` / `group_for`: unique names per scenario process.
Facts about the client used here: bodies travel through C strings (`SetMessageBody`,
`GetMessageBody`), so a body with a NUL byte is cut at the NUL by the wrapper — scenarios use
NUL-free bodies. Received properties are read one by one by name (`GetMessageProperty`).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional

import pyclient as pc
from rocketmq.client import ConsumeStatus

PROBE_PREFIX = b"__probe__"


def topic_for(kind: str) -> str:
    return f"{kind}-{os.getpid()}"


def group_for(kind: str, role: str = "CG") -> str:
    return f"{role}-{kind}-{os.getpid()}"


class Collector:
    """What a consumer callback received. `decide(rec) -> ConsumeStatus` scripts the answer."""

    def __init__(self, name: str = "consumer", props: Iterable[str] = (),
                 decide: Optional[Callable[[Dict[str, Any]], Any]] = None, sleep_s: float = 0.0):
        self.name = name
        self.props = list(props)
        self.decide = decide
        self.sleep_s = sleep_s
        self.records: List[Dict[str, Any]] = []
        self.errors: List[str] = []
        self.cv = threading.Condition()

    def on_message(self, msg: Any) -> Any:
        try:
            rec = {
                "topic": msg.topic,
                "body": msg.body or b"",
                "tags": (msg.tags or b"").decode("utf-8"),
                "keys": (msg.keys or b"").decode("utf-8"),
                "id": msg.id,
                "queue_id": msg.queue_id,
                "queue_offset": msg.queue_offset,
                "reconsume_times": msg.reconsume_times,
                "born_ts": msg.born_timestamp,
                "store_ts": msg.store_timestamp,
                "recv_ms": int(time.time() * 1000),
                "thread": threading.get_ident(),
                "props": {},
            }
            for k in self.props:
                v = msg.get_property(k)
                rec["props"][k] = v.decode("utf-8") if v is not None else None
        except Exception as e:  # a decoding problem must surface as a failure, not a hang
            with self.cv:
                self.errors.append(f"{type(e).__name__}: {e}")
                self.cv.notify_all()
            return ConsumeStatus.CONSUME_SUCCESS
        status = ConsumeStatus.CONSUME_SUCCESS
        if self.decide is not None and not rec["body"].startswith(PROBE_PREFIX):
            status = self.decide(rec)
        rec["answer"] = "RECONSUME_LATER" if status == ConsumeStatus.RECONSUME_LATER else "SUCCESS"
        if self.sleep_s:
            time.sleep(self.sleep_s)
        with self.cv:
            self.records.append(rec)
            self.cv.notify_all()
        return status

    # ---- queries ---------------------------------------------------------------------------

    def real(self) -> List[Dict[str, Any]]:
        with self.cv:
            return [r for r in self.records if not r["body"].startswith(PROBE_PREFIX)]

    def probes(self) -> List[Dict[str, Any]]:
        with self.cv:
            return [r for r in self.records if r["body"].startswith(PROBE_PREFIX)]

    def wait(self, pred: Callable[[List[Dict[str, Any]]], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                if pred(self.records):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cv.wait(min(left, 0.5))

    def wait_count(self, n: int, timeout: float,
                   match: Callable[[Dict[str, Any]], bool] = lambda r: True) -> List[Dict[str, Any]]:
        """Wait until n non-probe records match; returns the matching records (maybe fewer)."""
        def enough(recs: List[Dict[str, Any]]) -> bool:
            return sum(1 for r in recs if not r["body"].startswith(PROBE_PREFIX) and match(r)) >= n
        self.wait(enough, timeout)
        return [r for r in self.real() if match(r)]

    def quiet_for(self, seconds: float, timeout: float) -> None:
        """Wait until no new record arrived for `seconds` (bounded by timeout)."""
        deadline = time.monotonic() + timeout
        last_n, last_t = -1, time.monotonic()
        while time.monotonic() < deadline:
            with self.cv:
                n = len(self.records)
            if n != last_n:
                last_n, last_t = n, time.monotonic()
            elif time.monotonic() - last_t >= seconds:
                return
            time.sleep(0.2)


def start_consumer(cleanups: List[Callable[[], None]], group: str, namesrv: str, topic: str,
                   collector: Collector, expression: str = "*", orderly: bool = False,
                   broadcast: bool = False, threads: int = 1, instance: Optional[str] = None) -> Any:
    c = pc.new_push_consumer(group, namesrv, orderly=orderly, broadcast=broadcast, threads=threads)
    if instance:
        c.set_instance_name(instance)
    c.subscribe(topic, collector.on_message, expression)
    c.start()
    cleanups.append(c.shutdown)
    return c


def start_producer(cleanups: List[Callable[[], None]], group: str, namesrv: str, orderly: bool = False,
                   timeout_ms: int = 5000) -> Any:
    p = pc.start_producer(group, namesrv, orderly=orderly, timeout_ms=timeout_ms)
    cleanups.append(p.shutdown)
    return p


def prime(producer: Any, topic: str, collector: Collector, queues: int = 4, tags: Optional[str] = None,
          timeout: float = 40.0) -> int:
    """Send probes round-robin until `collector` saw a probe from each of `queues` queues.

    Returns the number of probes sent. Raises AssertionError on timeout."""
    deadline = time.monotonic() + timeout
    sent = 0
    while time.monotonic() < deadline:
        seen = {r["queue_id"] for r in collector.probes()}
        if len(seen) >= queues:
            return sent
        for _ in range(queues):
            producer.send_sync(pc.message(topic, PROBE_PREFIX + str(sent).encode(), tags=tags))
            sent += 1
        collector.wait(lambda recs: len({r["queue_id"] for r in recs
                                         if r["body"].startswith(PROBE_PREFIX)}) > len(seen), 2.0)
    seen = sorted({r["queue_id"] for r in collector.probes()})
    raise AssertionError(f"consumer {collector.name} never became ready: after {sent} probes to {topic} it "
                         f"received probes from queues {seen} only (want {queues} queues) within {timeout:.0f}s")
