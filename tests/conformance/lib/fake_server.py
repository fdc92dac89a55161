"""fake_server.py — a scripted loopback RocketMQ namesrv and/or broker (stdlib only).

Owns `FakeServer`: just enough of the Remoting protocol for real third-party clients to go
through their startup and send/consume paths, while every frame they send is recorded exactly
as received. Used by capture/listener.py (to write wire fixtures), by lib/fake_broker.py (the
stand-in broker that scenarios register with ringmq's namesrv) and by selftest/fake_ringmq.py.

Roles (each on its own 127.0.0.1 port):
  * namesrv: GET_ROUTEINFO_BY_TOPIC (105) answers a route built from REGISTER_BROKER (103)
    registrations if any, else a route to this server's own broker role; KV look-ups answer
    QUERY_NOT_FOUND; GET_BROKER_CLUSTER_INFO answers the registrations.
  * broker: HEART_BEAT; SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE store v1 records in
    memory and answer msgId/queueId/queueOffset; PULL_MESSAGE serves those records (FOUND) or
    answers PULL_NOT_FOUND after a short bounded hold; consumer offsets, consumer list,
    lock/unlock, send-back, unregister. Unknown codes get REQUEST_CODE_NOT_SUPPORTED (3).
Answers are Java-shaped JSON headers (serialize type 0), which every Remoting client reads.
All sockets are loopback; all waits are bounded; stop() closes everything it opened.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remoting as rm  # noqa: E402


@dataclass
class Received:
    """One frame a client sent us."""

    seq: int          # order of arrival across the whole server
    role: str         # "namesrv" or "broker"
    conn: int         # connection number (per server)
    peer: str         # client ip:port
    t: float          # time.time() at arrival
    frame: rm.Frame


@dataclass
class SendRecord:
    """A decoded send request, for assertions."""

    code: int
    topic: str
    queue_id: int
    batch: bool
    messages: List[Dict[str, Any]]   # [{flag, body, properties}]
    ext: Dict[str, Any]
    msg_ids: List[str]
    queue_offset: int


class _Conn:
    def __init__(self, sock: socket.socket, num: int, role: str, peer: str):
        self.sock = sock
        self.num = num
        self.role = role
        self.peer = peer
        self.lock = threading.Lock()
        self.closed = False

    def send(self, data: bytes) -> None:
        with self.lock:
            if self.closed:
                return
            try:
                self.sock.sendall(data)
            except OSError:
                self.closed = True


class FakeServer:
    def __init__(self, *, namesrv: bool = True, broker: bool = True,
                 cluster: str = "DefaultCluster", broker_name: str = "broker-a",
                 queues: int = 4, pull_hold: float = 1.0,
                 namesrv_port: int = 0, broker_port: int = 0,
                 on_frame: Optional[Callable[[Received], None]] = None,
                 route_addr_override: Optional[str] = None,
                 route_filter: Optional[Callable[[rm.Frame, Dict[str, Any]], Dict[str, Any]]] = None,
                 log: Optional[Callable[[str], None]] = None):
        self.want_namesrv = namesrv
        self.want_broker = broker
        self.cluster = cluster
        self.broker_name = broker_name
        self.queues = queues
        self.pull_hold = pull_hold
        self.on_frame = on_frame
        self.route_addr_override = route_addr_override  # self-test: advertise a wrong address
        self.route_filter = route_filter                # self-test: rewrite a route per request
        self.log = log or (lambda s: None)
        self._ports = {"namesrv": namesrv_port, "broker": broker_port}
        self._listeners: Dict[str, socket.socket] = {}
        self._conns: List[_Conn] = []
        self._threads: List[threading.Thread] = []
        self._timers: List[threading.Timer] = []
        self._stop = threading.Event()
        self._cv = threading.Condition()
        self._seq = 0
        self._conn_seq = 0
        self.received: List[Received] = []
        self.sends: List[SendRecord] = []
        self.errors: List[str] = []
        # broker state
        self._store: Dict[Tuple[str, int], List[bytes]] = {}   # (topic, queueId) -> records
        self._consumer_offsets: Dict[Tuple[str, str, int], int] = {}
        self._phys_offset = 0
        self._group_clients: Dict[str, List[str]] = {}
        # namesrv state: brokerAddr -> registration
        self.registrations: Dict[str, Dict[str, Any]] = {}

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self) -> "FakeServer":
        for role, wanted in (("namesrv", self.want_namesrv), ("broker", self.want_broker)):
            if not wanted:
                continue
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", self._ports[role]))
            s.listen(64)
            s.settimeout(0.2)
            self._listeners[role] = s
            t = threading.Thread(target=self._accept_loop, args=(role, s), daemon=True,
                                 name=f"fake-{role}-accept")
            t.start()
            self._threads.append(t)
        return self

    def addr(self, role: str) -> str:
        host, port = self._listeners[role].getsockname()
        return f"{host}:{port}"

    @property
    def namesrv_addr(self) -> str:
        return self.addr("namesrv")

    @property
    def broker_addr(self) -> str:
        return self.addr("broker")

    def stop(self) -> None:
        self._stop.set()
        for t in list(self._timers):
            t.cancel()
        for s in self._listeners.values():
            try:
                s.close()
            except OSError:
                pass
        for c in list(self._conns):
            c.closed = True
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                c.sock.close()
            except OSError:
                pass
        for t in self._threads:
            t.join(timeout=2.0)

    def __enter__(self) -> "FakeServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---- waiting for what clients did ----------------------------------------------------

    def wait_for(self, pred: Callable[[Received], bool], timeout: float) -> Optional[Received]:
        """First received frame matching pred, waiting up to timeout seconds."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                for r in self.received:
                    if pred(r):
                        return r
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cv.wait(min(left, 0.5))

    def wait_for_send(self, pred: Callable[[SendRecord], bool], timeout: float) -> Optional[SendRecord]:
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                for s in self.sends:
                    if pred(s):
                        return s
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cv.wait(min(left, 0.5))

    def codes_seen(self, role: Optional[str] = None) -> List[int]:
        with self._cv:
            return [r.frame.code for r in self.received if role is None or r.role == role]

    # ---- plumbing ------------------------------------------------------------------------

    def _accept_loop(self, role: str, lsock: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                s, peer = lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._cv:
                self._conn_seq += 1
                conn = _Conn(s, self._conn_seq, role, f"{peer[0]}:{peer[1]}")
                self._conns.append(conn)
            self.log(f"{role}: connection {conn.num} from {conn.peer}")
            t = threading.Thread(target=self._conn_loop, args=(conn,), daemon=True,
                                 name=f"fake-{role}-conn{conn.num}")
            t.start()
            self._threads.append(t)

    def _conn_loop(self, conn: _Conn) -> None:
        while not self._stop.is_set() and not conn.closed:
            try:
                # A connection may idle for long; the loop re-arms the deadline per frame and
                # stop() unblocks it by closing the socket.
                raw = rm.read_frame_raw(conn.sock, time.monotonic() + 3600)
            except (OSError, TimeoutError, rm.ProtocolError) as e:
                if not self._stop.is_set() and not isinstance(e, OSError):
                    self.errors.append(f"{conn.role} conn {conn.num}: {e}")
                break
            if raw is None:
                break
            try:
                frame = rm.decode_frame(raw)
            except rm.ProtocolError as e:
                self.errors.append(f"{conn.role} conn {conn.num}: undecodable frame: {e}")
                frame = rm.Frame(raw=raw, serialize_type=-1, header_bytes=b"", header={}, body=b"")
            with self._cv:
                self._seq += 1
                rec = Received(self._seq, conn.role, conn.num, conn.peer, time.time(), frame)
                self.received.append(rec)
                self._cv.notify_all()
            self.log(f"{conn.role}: conn {conn.num} got code {frame.code} "
                     f"({rm.CODE_NAMES.get(frame.code, '?')}) flag {frame.flag} opaque {frame.opaque}")
            if self.on_frame is not None:
                try:
                    self.on_frame(rec)
                except Exception as e:  # a recorder bug must not kill the connection
                    self.errors.append(f"on_frame: {e!r}")
            if frame.serialize_type < 0 or frame.is_response:
                continue
            try:
                self._dispatch(conn, frame)
            except Exception as e:
                self.errors.append(f"{conn.role} conn {conn.num}: handler for code {frame.code}: {e!r}")
                if not frame.is_oneway:
                    conn.send(rm.make_response(frame.opaque, rm.SYSTEM_ERROR, remark=f"fake server: {e!r}"))
        conn.closed = True
        try:
            conn.sock.close()
        except OSError:
            pass

    def _reply(self, conn: _Conn, req: rm.Frame, code: int = rm.SUCCESS,
               ext: Optional[Dict[str, Any]] = None, body: bytes = b"",
               remark: Optional[str] = None) -> None:
        if req.is_oneway:
            return
        conn.send(rm.make_response(req.opaque, code, ext, body, remark))

    def _dispatch(self, conn: _Conn, f: rm.Frame) -> None:
        if conn.role == "namesrv":
            self._namesrv(conn, f)
        else:
            self._broker(conn, f)

    # ---- namesrv role --------------------------------------------------------------------

    def _route_for(self, topic: str) -> Optional[Dict[str, Any]]:
        queue_datas: List[Dict[str, Any]] = []
        broker_datas: Dict[str, Dict[str, Any]] = {}
        with self._cv:
            regs = list(self.registrations.values())
        for reg in regs:
            tc = reg["topics"].get(topic)
            if tc is None:
                continue
            bn = reg["brokerName"]
            if not any(q["brokerName"] == bn for q in queue_datas) and reg["brokerId"] == 0:
                queue_datas.append({"brokerName": bn, "perm": tc.get("perm", 6),
                                    "readQueueNums": tc.get("readQueueNums", 4),
                                    "topicSysFlag": tc.get("topicSysFlag", 0),
                                    "writeQueueNums": tc.get("writeQueueNums", 4)})
            bd = broker_datas.setdefault(bn, {"brokerAddrs": {}, "brokerName": bn,
                                              "cluster": reg["clusterName"],
                                              "enableActingMaster": False, "zoneName": ""})
            addr = self.route_addr_override or reg["brokerAddr"]
            bd["brokerAddrs"][str(reg["brokerId"])] = addr
        if not regs and self.want_broker:
            perm = 7 if topic == "TBW102" else 6
            queue_datas.append({"brokerName": self.broker_name, "perm": perm,
                                "readQueueNums": self.queues, "topicSysFlag": 0,
                                "writeQueueNums": self.queues})
            broker_datas[self.broker_name] = {
                "brokerAddrs": {"0": self.route_addr_override or self.broker_addr},
                "brokerName": self.broker_name, "cluster": self.cluster,
                "enableActingMaster": False, "zoneName": ""}
        if not queue_datas:
            return None
        return {"brokerDatas": sorted(broker_datas.values(), key=lambda b: b["brokerName"]),
                "filterServerTable": {},
                "queueDatas": sorted(queue_datas, key=lambda q: q["brokerName"])}

    def _namesrv(self, conn: _Conn, f: rm.Frame) -> None:
        code = f.code
        if code == rm.GET_ROUTEINFO_BY_TOPIC:
            topic = f.ext_str("topic", "")
            route = self._route_for(topic)
            if route is not None and self.route_filter is not None:
                route = self.route_filter(f, route)
            if route is None:
                self._reply(conn, f, rm.TOPIC_NOT_EXIST,
                            remark=f"No topic route info in name server for the topic: {topic}")
            else:
                self._reply(conn, f, body=json.dumps(route, separators=(",", ":")).encode())
        elif code == rm.REGISTER_BROKER:
            body = json.loads(f.body.decode("utf-8")) if f.body else {}
            wrapper = body.get("topicConfigSerializeWrapper", body)
            reg = {"brokerName": f.ext_str("brokerName", ""), "brokerAddr": f.ext_str("brokerAddr", ""),
                   "clusterName": f.ext_str("clusterName", ""),
                   "brokerId": int(f.ext_str("brokerId", "0") or 0),
                   "topics": wrapper.get("topicConfigTable") or {}}
            with self._cv:
                self.registrations[reg["brokerAddr"]] = reg
            self._reply(conn, f, ext={})
        elif code == rm.UNREGISTER_BROKER:
            with self._cv:
                self.registrations.pop(f.ext_str("brokerAddr", ""), None)
            self._reply(conn, f)
        elif code == rm.GET_BROKER_CLUSTER_INFO:
            with self._cv:
                regs = list(self.registrations.values())
            bat: Dict[str, Any] = {}
            cat: Dict[str, List[str]] = {}
            for r in regs:
                bd = bat.setdefault(r["brokerName"], {"brokerAddrs": {}, "brokerName": r["brokerName"],
                                                      "cluster": r["clusterName"],
                                                      "enableActingMaster": False})
                bd["brokerAddrs"][str(r["brokerId"])] = r["brokerAddr"]
                names = cat.setdefault(r["clusterName"], [])
                if r["brokerName"] not in names:
                    names.append(r["brokerName"])
            body = json.dumps({"brokerAddrTable": bat, "clusterAddrTable": cat}, separators=(",", ":"))
            self._reply(conn, f, body=body.encode())
        elif code in (rm.GET_KV_CONFIG, rm.GET_KV_CONFIG_BY_VALUE):
            self._reply(conn, f, rm.QUERY_NOT_FOUND, remark="No config item")
        else:
            self._reply(conn, f, rm.REQUEST_CODE_NOT_SUPPORTED,
                        remark=f" request type {code} not supported")

    # ---- broker role ---------------------------------------------------------------------

    def _broker(self, conn: _Conn, f: rm.Frame) -> None:
        code = f.code
        if code == rm.HEART_BEAT:
            try:
                hb = json.loads(f.body.decode("utf-8")) if f.body else {}
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                self.errors.append(f"heartbeat body is not JSON: {e}")
                hb = {}
            cid = str(hb.get("clientID", ""))
            with self._cv:
                for cd in hb.get("consumerDataSet") or []:
                    lst = self._group_clients.setdefault(str(cd.get("groupName")), [])
                    if cid and cid not in lst:
                        lst.append(cid)
            self._reply(conn, f, ext={"IS_SUPPORT_HEART_BEAT_V2": "true", "IS_SUB_CHANGE": "true"})
        elif code in (rm.SEND_MESSAGE, rm.SEND_MESSAGE_V2, rm.SEND_BATCH_MESSAGE):
            self._send(conn, f)
        elif code == rm.PULL_MESSAGE:
            self._pull(conn, f)
        elif code == rm.QUERY_CONSUMER_OFFSET:
            key = (f.ext_str("consumerGroup", ""), f.ext_str("topic", ""), int(f.ext_str("queueId", "0") or 0))
            with self._cv:
                stored = self._consumer_offsets.get(key)
                qlen = len(self._store.get(key[1:], []))
            if stored is not None:
                self._reply(conn, f, ext={"offset": str(stored)})
            elif qlen:  # like a Java broker with a fresh queue whose first message is in memory
                self._reply(conn, f, ext={"offset": "0"})
            else:
                self._reply(conn, f, rm.QUERY_NOT_FOUND, remark="Not found, maybe this group consumer boot first")
        elif code == rm.GET_MAX_OFFSET:
            with self._cv:
                n = len(self._store.get((f.ext_str("topic", ""), int(f.ext_str("queueId", "0") or 0)), []))
            self._reply(conn, f, ext={"offset": str(n)})
        elif code in (rm.GET_MIN_OFFSET, rm.SEARCH_OFFSET_BY_TIMESTAMP):
            self._reply(conn, f, ext={"offset": "0"})
        elif code == rm.GET_EARLIEST_MSG_STORETIME:
            self._reply(conn, f, ext={"timestamp": "0"})
        elif code == rm.GET_CONSUMER_LIST_BY_GROUP:
            group = f.ext_str("consumerGroup", "")
            with self._cv:
                ids = list(self._group_clients.get(group, []))
            if ids:
                self._reply(conn, f, body=json.dumps({"consumerIdList": ids}, separators=(",", ":")).encode())
            else:
                self._reply(conn, f, rm.SYSTEM_ERROR, remark=f"no consumer for this group, {group}")
        elif code == rm.LOCK_BATCH_MQ:
            req = json.loads(f.body.decode("utf-8")) if f.body else {}
            body = json.dumps({"lockOKMQSet": req.get("mqSet") or []}, separators=(",", ":"))
            self._reply(conn, f, body=body.encode())
        elif code == rm.UPDATE_CONSUMER_OFFSET:
            key = (f.ext_str("consumerGroup", ""), f.ext_str("topic", ""), int(f.ext_str("queueId", "0") or 0))
            off = int(f.ext_str("commitOffset", "-1") or -1)
            if off >= 0:
                with self._cv:
                    self._consumer_offsets[key] = off
            self._reply(conn, f)
        elif code in (rm.UNLOCK_BATCH_MQ, rm.UNREGISTER_CLIENT, rm.CONSUMER_SEND_MSG_BACK,
                      rm.END_TRANSACTION, rm.UPDATE_AND_CREATE_TOPIC):
            self._reply(conn, f)
        else:
            self._reply(conn, f, rm.REQUEST_CODE_NOT_SUPPORTED,
                        remark=f" request type {code} not supported")

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
        if batch:
            messages = rm.split_batch_body(f.body)
        else:
            messages = [{"flag": int(field("h", "flag", "0")), "body": f.body, "properties": props}]
        now_ms = int(time.time() * 1000)
        with self._cv:
            queue = self._store.setdefault((topic, queue_id), [])
            qoff = len(queue)
            ids = []
            for i, m in enumerate(messages):
                p = dict(m["properties"])
                p.setdefault("UNIQ_KEY", rm.offset_msg_id(self.broker_addr, self._phys_offset) + "FA4E")
                p["CLUSTER"] = self.cluster
                rec = rm.encode_stored_record(
                    topic=topic, queue_id=queue_id, flag=m["flag"], queue_offset=qoff + i,
                    phys_offset=self._phys_offset, sys_flag=sys_flag, born_ts=born_ts,
                    born_host=conn.peer, store_ts=now_ms, store_host=self.broker_addr,
                    body=m["body"], properties=rm.properties_string(p), reconsume_times=reconsume)
                ids.append(rm.offset_msg_id(self.broker_addr, self._phys_offset))
                self._phys_offset += len(rec)
                queue.append(rec)
            srec = SendRecord(f.code, topic, queue_id, batch, messages, dict(f.ext), ids, qoff)
            self.sends.append(srec)
            self._cv.notify_all()
        ext = {"msgId": ",".join(ids), "queueId": str(queue_id), "queueOffset": str(qoff),
               "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
        uniq = props.get("UNIQ_KEY")
        if uniq and not batch:
            ext["transactionId"] = uniq
        self._reply(conn, f, ext=ext)

    def _pull(self, conn: _Conn, f: rm.Frame, held: bool = False) -> None:
        topic = f.ext_str("topic", "")
        queue_id = int(f.ext_str("queueId", "0") or 0)
        offset = int(f.ext_str("queueOffset", "0") or 0)
        max_n = max(1, min(32, int(f.ext_str("maxMsgNums", "32") or 32)))
        with self._cv:
            queue = self._store.get((topic, queue_id), [])
            total = len(queue)
            recs = queue[offset:offset + max_n] if 0 <= offset < total else []
        ext = {"maxOffset": str(total), "minOffset": "0", "suggestWhichBrokerId": "0"}
        if recs:
            ext["nextBeginOffset"] = str(offset + len(recs))
            self._reply(conn, f, rm.SUCCESS, ext=ext, body=b"".join(recs), remark="FOUND")
            return
        ext["nextBeginOffset"] = str(min(max(offset, 0), total))
        suspend_ms = int(f.ext_str("suspendTimeoutMillis", "0") or 0)
        sys_flag = int(f.ext_str("sysFlag", "0") or 0)
        hold = min(self.pull_hold, suspend_ms / 1000.0) if sys_flag & 0x2 else 0.0
        if held or hold <= 0 or f.is_oneway or self._stop.is_set():
            self._reply(conn, f, rm.PULL_NOT_FOUND, ext=ext, remark="no new message")
            return
        # Long polling, bounded by pull_hold: re-run once when the hold ends.
        t = threading.Timer(hold, self._pull, args=(conn, f), kwargs={"held": True})
        t.daemon = True
        self._timers.append(t)
        t.start()
