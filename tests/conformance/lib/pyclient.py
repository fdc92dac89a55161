"""pyclient.py — thin helpers over the real Python client (rocketmq-client-python 2.0.0 + C++ core 2.1.0).

Owns what the official wrapper does not expose but the C core does (batch send, the compression
threshold), and the common
set-up every scenario and capture program repeats (name server address, send timeout, a started
producer). Import only from the conformance venv (tests/conformance/.venv/bin/python), which
install.sh creates. The C++ core writes its logs under $ROCKETMQ_CLIENT_LOG_DIR (run.py points it
into the scenario's temp dir).
"""

from __future__ import annotations

import ctypes
import time
from ctypes import POINTER, c_int, c_void_p
from typing import Iterable, List, Optional, Tuple

from rocketmq import ffi
from rocketmq.client import Message, Producer, PushConsumer, SendResult, SendStatus  # noqa: F401

_dll = ffi.dll
_dll.CreateBatchMessage.argtypes = []
_dll.CreateBatchMessage.restype = c_void_p
_dll.AddMessage.argtypes = [c_void_p, c_void_p]
_dll.AddMessage.restype = c_int
_dll.SendBatchMessage.argtypes = [c_void_p, c_void_p, POINTER(ffi._CSendResult)]
_dll.SendBatchMessage.restype = c_int
_dll.DestroyBatchMessage.argtypes = [c_void_p]
_dll.DestroyBatchMessage.restype = c_int
_dll.SetPushConsumerMessageTrace.argtypes = [c_void_p, c_int]
_dll.SetPushConsumerMessageTrace.restype = c_int
TRACE_OPEN, TRACE_CLOSE = 0, 1  # CTraceModel in the C API


def message(topic: str, body: str | bytes, tags: Optional[str] = None, keys: Optional[str] = None,
            props: Optional[dict] = None) -> Message:
    m = Message(topic)
    if tags is not None:
        m.set_tags(tags)
    if keys is not None:
        m.set_keys(keys)
    m.set_body(body)
    for k, v in (props or {}).items():
        m.set_property(k, v)
    return m


def send_sync_while_no_route(producer: Producer, message: Message, within_s: float = 10.0) -> SendResult:
    """send_sync, retried while the C++ core answers "No route info of this topic"; any other
    failure, or that one after `within_s`, is raised.

    The core says "No route info" for two client-side states that ringmq's name server does
    not cause: a route cache it refreshes on its own schedule (after a broker restart), and a
    first send to a broker whose TCP connect has not finished (its three attempts fall within
    a millisecond and exclude the broker still connecting, leaving no queue to pick).
    """
    deadline = time.monotonic() + within_s
    while True:
        try:
            return producer.send_sync(message)
        except Exception as e:  # the wrapper raises its own exception types
            if "No route info" not in str(e) or time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


def start_producer(group: str, namesrv: str, orderly: bool = False, timeout_ms: int = 3000) -> Producer:
    p = Producer(group, orderly=orderly, timeout=timeout_ms)
    p.set_name_server_address(namesrv)
    p.start()
    return p


def new_push_consumer(group: str, namesrv: str, orderly: bool = False, broadcast: bool = False,
                      threads: int = 1) -> PushConsumer:
    """A push consumer ready for subscribe()/start().

    Quirk of the 2.1.0 core: ShutdownPushConsumer segfaults (SIGSEGV in the message-trace
    producer's shutdown) unless message trace is OPEN, so trace is switched on here. With trace
    on, the core also resolves RMQ_SYS_TRACE_TOPIC and sends trace messages after consuming.
    """
    from rocketmq.ffi import MessageModel
    model = MessageModel.BROADCASTING if broadcast else MessageModel.CLUSTERING
    c = PushConsumer(group, orderly=orderly, message_model=model)
    c.set_name_server_address(namesrv)
    c.set_thread_count(threads)
    rc = _dll.SetPushConsumerMessageTrace(c._handle, TRACE_OPEN)
    if rc != 0:
        raise RuntimeError(f"SetPushConsumerMessageTrace failed: {rc}")
    return c


_dll.SetProducerCompressMsgBodyOverHowmuch.argtypes = [c_void_p, c_int]
_dll.SetProducerCompressMsgBodyOverHowmuch.restype = c_int


_dll.SetProducerInstanceName.argtypes = [c_void_p, ctypes.c_char_p]
_dll.SetProducerInstanceName.restype = c_int


def set_producer_instance_name(producer: Producer, name: str) -> None:
    """The core's instance name (the Python wrapper exposes it for push consumers only)."""
    rc = _dll.SetProducerInstanceName(producer._handle, name.encode("utf-8"))
    if rc != 0:
        raise RuntimeError(f"SetProducerInstanceName failed: {rc}")


def set_compress_over(producer: Producer, nbytes: int) -> None:
    """SetProducerCompressMsgBodyOverHowmuch: bodies larger than this are zlib-compressed (default 4 KiB)."""
    rc = _dll.SetProducerCompressMsgBodyOverHowmuch(producer._handle, int(nbytes))
    if rc != 0:
        raise RuntimeError(f"SetProducerCompressMsgBodyOverHowmuch failed: {rc}")


def send_batch(producer: Producer, messages: Iterable[Message]) -> SendResult:
    """SendBatchMessage from the C core (sent on the wire as code 310 with m=true)."""
    batch = _dll.CreateBatchMessage()
    if not batch:
        raise RuntimeError("CreateBatchMessage returned NULL")
    keep: List[Message] = list(messages)
    try:
        for m in keep:
            rc = _dll.AddMessage(batch, m._handle)
            if rc != 0:
                raise RuntimeError(f"AddMessage failed: {rc}")
        res = ffi._CSendResult()
        rc = _dll.SendBatchMessage(producer._handle, batch, ctypes.pointer(res))
        if rc != 0:
            raise RuntimeError(f"SendBatchMessage failed: status {rc}: {last_error()}")
        return SendResult(SendStatus(res.sendStatus), res.msgId.decode("utf-8"), res.offset)
    finally:
        _dll.DestroyBatchMessage(batch)


def last_error() -> str:
    try:
        _dll.GetLatestErrorMessage.restype = ctypes.c_char_p
        v = _dll.GetLatestErrorMessage()
        return v.decode("utf-8", "replace") if v else ""
    except AttributeError:
        return ""


def send_result_tuple(r: SendResult) -> Tuple[int, str, int]:
    return int(r.status), r.msg_id, r.offset
