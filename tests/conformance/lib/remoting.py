"""remoting.py — stdlib-only RocketMQ Remoting codec and blocking client for the conformance tests.

Owns:
  * frame encode/decode (4-byte big-endian frame length, 4-byte header word whose top byte is the
    serialize type: 0 JSON, 1 ROCKETMQ binary; then header; then body), both header encodings;
  * `RemotingClient`, a blocking request/response client over one loopback TCP connection;
  * name-server helpers used by scenarios: `register_broker` (REGISTER_BROKER, code 103, with a
    `RegisterBrokerBody` JSON body), `get_route` (GET_ROUTEINFO_BY_TOPIC, code 105);
  * small message helpers (property strings, offsetMsgId, batch body split).

It never listens (see fake_server.py for the scripted namesrv/broker). Facts come from
spec/remoting.md (shared specs) §2-7 and headers.md §1, §8. Every blocking call has a deadline.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

# ---- request / response codes used here (remoting.md §10-11) ----------------------------------
SEND_MESSAGE = 10
PULL_MESSAGE = 11
QUERY_MESSAGE = 12
QUERY_CONSUMER_OFFSET = 14
UPDATE_CONSUMER_OFFSET = 15
UPDATE_AND_CREATE_TOPIC = 17
SEARCH_OFFSET_BY_TIMESTAMP = 29
GET_MAX_OFFSET = 30
GET_MIN_OFFSET = 31
GET_EARLIEST_MSG_STORETIME = 32
VIEW_MESSAGE_BY_ID = 33
HEART_BEAT = 34
UNREGISTER_CLIENT = 35
CONSUMER_SEND_MSG_BACK = 36
END_TRANSACTION = 37
GET_CONSUMER_LIST_BY_GROUP = 38
CHECK_TRANSACTION_STATE = 39
NOTIFY_CONSUMER_IDS_CHANGED = 40
LOCK_BATCH_MQ = 41
UNLOCK_BATCH_MQ = 42
PUT_KV_CONFIG = 100
GET_KV_CONFIG = 101
DELETE_KV_CONFIG = 102
REGISTER_BROKER = 103
UNREGISTER_BROKER = 104
GET_ROUTEINFO_BY_TOPIC = 105
GET_BROKER_CLUSTER_INFO = 106
GET_KV_CONFIG_BY_VALUE = 217
SEND_MESSAGE_V2 = 310
SEND_BATCH_MESSAGE = 320
GET_CONSUMER_RUNNING_INFO = 307

SUCCESS = 0
SYSTEM_ERROR = 1
SYSTEM_BUSY = 2
REQUEST_CODE_NOT_SUPPORTED = 3
TOPIC_NOT_EXIST = 17
PULL_NOT_FOUND = 19
PULL_RETRY_IMMEDIATELY = 20
PULL_OFFSET_MOVED = 21
QUERY_NOT_FOUND = 22

CODE_NAMES = {
    10: "SEND_MESSAGE", 11: "PULL_MESSAGE", 12: "QUERY_MESSAGE", 14: "QUERY_CONSUMER_OFFSET",
    15: "UPDATE_CONSUMER_OFFSET", 17: "UPDATE_AND_CREATE_TOPIC", 29: "SEARCH_OFFSET_BY_TIMESTAMP",
    30: "GET_MAX_OFFSET", 31: "GET_MIN_OFFSET", 32: "GET_EARLIEST_MSG_STORETIME",
    33: "VIEW_MESSAGE_BY_ID", 34: "HEART_BEAT", 35: "UNREGISTER_CLIENT",
    36: "CONSUMER_SEND_MSG_BACK", 37: "END_TRANSACTION", 38: "GET_CONSUMER_LIST_BY_GROUP",
    39: "CHECK_TRANSACTION_STATE", 40: "NOTIFY_CONSUMER_IDS_CHANGED", 41: "LOCK_BATCH_MQ",
    42: "UNLOCK_BATCH_MQ", 100: "PUT_KV_CONFIG", 101: "GET_KV_CONFIG", 102: "DELETE_KV_CONFIG",
    103: "REGISTER_BROKER", 104: "UNREGISTER_BROKER", 105: "GET_ROUTEINFO_BY_TOPIC",
    106: "GET_BROKER_CLUSTER_INFO", 217: "GET_KV_CONFIG_BY_VALUE", 307: "GET_CONSUMER_RUNNING_INFO",
    310: "SEND_MESSAGE_V2", 320: "SEND_BATCH_MESSAGE",
}

FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2
SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1
MAX_FRAME = 16 * 1024 * 1024  # total bytes incl. the length word (remoting.md §2)

LANGUAGES = ["JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP",
             "GO", "PHP", "OMS", "RUST", "NODE_JS"]

# Version we put in what we send: V5_3_3 (remoting.md §9).
OUR_VERSION = 479


class ProtocolError(Exception):
    """A frame or header that violates remoting.md §2-5."""


# ---- frames ----------------------------------------------------------------------------------

@dataclass
class Frame:
    """One decoded frame. `raw` is exactly what was on the wire (length word included)."""

    raw: bytes
    serialize_type: int
    header_bytes: bytes
    header: Dict[str, Any]
    body: bytes

    @property
    def code(self) -> int:
        return int(self.header.get("code", 0))

    @property
    def opaque(self) -> int:
        return int(self.header.get("opaque", 0))

    @property
    def flag(self) -> int:
        return int(self.header.get("flag", 0))

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    @property
    def ext(self) -> Dict[str, Any]:
        """extFields as sent (values may be str, int, bool: see remoting.md §4)."""
        return self.header.get("extFields") or {}

    def ext_str(self, key: str, default: Optional[str] = None) -> Optional[str]:
        """extFields value as canonical text (4 -> "4", True -> "true"), remoting.md §4 rule 3."""
        v = self.ext.get(key)
        if v is None:
            return default
        return ext_text(v)

    @property
    def remark(self) -> Optional[str]:
        return self.header.get("remark")


def ext_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return json.dumps(v)
    return str(v)


def split_frame_bytes(raw: bytes) -> Tuple[int, int, bytes, bytes]:
    """Return (serialize_type, header_length, header_bytes, body) for one complete raw frame."""
    if len(raw) < 8:
        raise ProtocolError("frame shorter than 8 bytes")
    (frame_len, word) = struct.unpack(">iI", raw[:8])
    if frame_len + 4 != len(raw):
        raise ProtocolError(f"frame length {frame_len} + 4 != {len(raw)} bytes")
    stype = word >> 24
    hlen = word & 0xFFFFFF
    if hlen > frame_len - 4:
        raise ProtocolError(f"header length {hlen} > frame length {frame_len} - 4")
    return stype, hlen, raw[8:8 + hlen], raw[8 + hlen:]


def decode_frame(raw: bytes) -> Frame:
    stype, _hlen, hb, body = split_frame_bytes(raw)
    if stype == SERIALIZE_JSON:
        try:
            header = json.loads(hb.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ProtocolError(f"bad JSON header: {e}") from e
        if not isinstance(header, dict):
            raise ProtocolError("JSON header is not an object")
    elif stype == SERIALIZE_ROCKETMQ:
        header = decode_rocketmq_header(hb)
    else:
        raise ProtocolError(f"unknown serialize type {stype}")
    return Frame(raw=raw, serialize_type=stype, header_bytes=hb, header=header, body=body)


def decode_rocketmq_header(hb: bytes) -> Dict[str, Any]:
    """ROCKETMQ binary header (remoting.md §5) -> the same logical dict as a JSON header."""
    if len(hb) < 21:
        raise ProtocolError("ROCKETMQ header shorter than 21 bytes")
    code, lang, version, opaque, flag, rlen = struct.unpack(">hBhiii", hb[:17])
    pos = 17
    if rlen < 0 or pos + rlen > len(hb):
        raise ProtocolError("bad remark length")
    remark = hb[pos:pos + rlen].decode("utf-8") if rlen else None
    pos += rlen
    (elen,) = struct.unpack(">i", hb[pos:pos + 4])
    pos += 4
    if elen < 0 or pos + elen > len(hb):
        raise ProtocolError("bad extFields length")
    ext: Dict[str, str] = {}
    end = pos + elen
    while pos < end:
        (kl,) = struct.unpack(">h", hb[pos:pos + 2])
        pos += 2
        k = hb[pos:pos + kl].decode("utf-8")
        pos += kl
        (vl,) = struct.unpack(">i", hb[pos:pos + 4])
        pos += 4
        v = hb[pos:pos + vl].decode("utf-8")
        pos += vl
        if pos > end:
            raise ProtocolError("extFields entry overruns its block")
        ext[k] = v
    header: Dict[str, Any] = {
        "code": code,
        "language": LANGUAGES[lang] if lang < len(LANGUAGES) else "OTHER",
        "version": version, "opaque": opaque, "flag": flag,
    }
    if remark is not None:
        header["remark"] = remark
    if elen:
        header["extFields"] = ext
    return header


def encode_json_header(header: Dict[str, Any]) -> bytes:
    """Compact JSON, extFields values forced to strings (remoting.md §4 encoder rule 2)."""
    h = dict(header)
    if "extFields" in h and h["extFields"] is not None:
        h["extFields"] = {k: ext_text(v) for k, v in h["extFields"].items() if v is not None}
    return json.dumps(h, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def encode_frame(header_bytes: bytes, body: bytes = b"", serialize_type: int = SERIALIZE_JSON) -> bytes:
    word = (serialize_type << 24) | len(header_bytes)
    return struct.pack(">iI", 4 + len(header_bytes) + len(body), word) + header_bytes + body


def make_request(code: int, ext: Optional[Dict[str, Any]] = None, body: bytes = b"", *,
                 opaque: int, oneway: bool = False, language: str = "JAVA",
                 version: int = OUR_VERSION) -> bytes:
    h: Dict[str, Any] = {"code": code, "flag": FLAG_ONEWAY if oneway else 0,
                         "language": language, "opaque": opaque,
                         "serializeTypeCurrentRPC": "JSON", "version": version}
    if ext:
        h["extFields"] = ext
    return encode_frame(encode_json_header(h), body)


def acl_sign(ext: Dict[str, Any], body: bytes, access_key: str, secret_key: str) -> Dict[str, str]:
    """`ext` with `AccessKey` and `Signature` added as plain ACL clients sign: HmacSHA1 keyed by
    the secret over every extFields value (not the keys) in key order, then the body; Base64.
    Written from the documented layout, apart from ringmq's own signer, so each checks the other."""
    import base64
    import hashlib
    import hmac
    fields = {k: ext_text(v) for k, v in ext.items() if v is not None and k != "Signature"}
    fields["AccessKey"] = access_key
    content = "".join(fields[k] for k in sorted(fields)).encode("utf-8") + body
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    fields["Signature"] = base64.b64encode(digest).decode("ascii")
    return fields


def make_response(opaque: int, code: int = SUCCESS, ext: Optional[Dict[str, Any]] = None,
                  body: bytes = b"", remark: Optional[str] = None) -> bytes:
    """A Java-broker-shaped JSON response (always serialize type 0: C++/Node read JSON only)."""
    h: Dict[str, Any] = {"code": code}
    if ext:
        h["extFields"] = ext
    h.update({"flag": FLAG_RESPONSE, "language": "JAVA", "opaque": opaque})
    if remark is not None:
        h["remark"] = remark
    h.update({"serializeTypeCurrentRPC": "JSON", "version": OUR_VERSION})
    return encode_frame(encode_json_header(h), body)


def recv_exact(sock: socket.socket, n: int, deadline: float) -> Optional[bytes]:
    """Read exactly n bytes before `deadline` (time.monotonic()). None on clean EOF at byte 0."""
    chunks: List[bytes] = []
    got = 0
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"timed out reading {n} bytes (got {got})")
        sock.settimeout(min(left, 1.0))
        try:
            chunk = sock.recv(n - got)
        except socket.timeout:
            continue
        if not chunk:
            if got == 0:
                return None
            raise ProtocolError(f"connection closed mid-frame ({got}/{n} bytes)")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame_raw(sock: socket.socket, deadline: float) -> Optional[bytes]:
    """One complete raw frame (length word included), or None on EOF between frames."""
    head = recv_exact(sock, 4, deadline)
    if head is None:
        return None
    (frame_len,) = struct.unpack(">i", head)
    if frame_len < 4 or frame_len + 4 > MAX_FRAME:
        raise ProtocolError(f"bad frame length {frame_len}")
    rest = recv_exact(sock, frame_len, deadline)
    if rest is None:
        raise ProtocolError("connection closed after the length word")
    return head + rest


# ---- client ----------------------------------------------------------------------------------

def parse_addr(addr: str) -> Tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


def tls_wrap(sock: socket.socket) -> socket.socket:
    """Wraps a connected socket in TLS per RINGMQ_TLS_MAX / RINGMQ_TLS_CA (see RemotingClient)."""
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ca = os.environ.get("RINGMQ_TLS_CA")
    if ca:
        ctx.load_verify_locations(ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.verify_mode = ssl.CERT_NONE
    if os.environ.get("RINGMQ_TLS_MAX") == "1.2":
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    return ctx.wrap_socket(sock)


class RemotingClient:
    """Blocking client on one connection. Requests the peer sends to us are ignored."""

    _opaque_lock = threading.Lock()
    _next_opaque = 1

    def __init__(self, addr: str, timeout: float = 5.0, credentials: Optional[Tuple[str, str]] = None):
        self.addr = addr
        self.timeout = timeout
        # (accessKey, secretKey): every request is signed for a broker with aclEnable=true.
        # Without one, RINGMQ_ACL_ACCESS_KEY / RINGMQ_ACL_SECRET_KEY name the account, so a
        # scenario can sign every raw request rawmq makes.
        env_ak, env_sk = os.environ.get("RINGMQ_ACL_ACCESS_KEY"), os.environ.get("RINGMQ_ACL_SECRET_KEY")
        self.credentials = credentials or ((env_ak, env_sk) if env_ak and env_sk else None)
        self.sock = socket.create_connection(parse_addr(addr), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # RINGMQ_TLS=1: the connection speaks TLS through Python's ssl module (OpenSSL), an
        # implementation independent of ringmq's. RINGMQ_TLS_MAX=1.2 caps the version;
        # RINGMQ_TLS_CA names a CA to verify the server's chain against (its name is not
        # checked, as RocketMQ clients do not); otherwise any certificate is taken, as
        # upstream's clients take any in test mode.
        if os.environ.get("RINGMQ_TLS") == "1":
            self.sock = tls_wrap(self.sock)

    @classmethod
    def next_opaque(cls) -> int:
        with cls._opaque_lock:
            o = cls._next_opaque
            cls._next_opaque += 1
            return o

    def request(self, code: int, ext: Optional[Dict[str, Any]] = None, body: bytes = b"",
                timeout: Optional[float] = None) -> Frame:
        opaque = self.next_opaque()
        if self.credentials:
            ext = acl_sign(ext or {}, body, *self.credentials)
        self.sock.sendall(make_request(code, ext, body, opaque=opaque))
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            raw = read_frame_raw(self.sock, deadline)
            if raw is None:
                raise ProtocolError(f"{self.addr} closed the connection before answering code {code}")
            f = decode_frame(raw)
            if f.is_response and f.opaque == opaque:
                return f

    def oneway(self, code: int, ext: Optional[Dict[str, Any]] = None, body: bytes = b"") -> None:
        self.sock.sendall(make_request(code, ext, body, opaque=self.next_opaque(), oneway=True))

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "RemotingClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ---- name server helpers ---------------------------------------------------------------------

def topic_config(name: str, queues: int = 4, perm: int = 6, read_queues: Optional[int] = None) -> Dict[str, Any]:
    """A TopicConfig as a Java broker serializes it inside RegisterBrokerBody (headers.md §8.2)."""
    return {"attributes": {}, "order": False, "perm": perm,
            "readQueueNums": queues if read_queues is None else read_queues,
            "topicFilterType": "SINGLE_TAG", "topicName": name, "topicSysFlag": 0,
            "writeQueueNums": queues}


_REGISTRATION_CONNECTIONS: List["RemotingClient"] = []


def register_broker_body(topics: Iterable[Dict[str, Any]], counter: int = 1,
                         timestamp_ms: Optional[int] = None) -> bytes:
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    dv = {"counter": counter, "stateVersion": 0, "timestamp": ts}
    body = {
        "filterServerList": [],
        "topicConfigSerializeWrapper": {
            "dataVersion": dv,
            "mappingDataVersion": {"counter": 0, "stateVersion": 0, "timestamp": ts},
            "topicConfigTable": {t["topicName"]: t for t in topics},
            "topicQueueMappingDetailMap": {},
            "topicQueueMappingInfoMap": {},
        },
    }
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def register_broker(namesrv_addr: str, *, cluster: str, broker_name: str, broker_addr: str,
                    topics: Iterable[Dict[str, Any]], broker_id: int = 0,
                    ha_addr: Optional[str] = None, timeout: float = 5.0) -> Frame:
    """Send REGISTER_BROKER (103) the way a Java 5.x master does. Raises unless code 0."""
    topics = list(topics)
    if len(topics) <= 1:
        # A 5.x namesrv refuses a one-topic table from a broker id it has not seen yet
        # (that shape means "register this single topic"); a real broker's first
        # registration always carries its system topics too.
        topics.append(topic_config("SELF_TEST_TOPIC", queues=1))
    body = register_broker_body(topics)
    host, port = parse_addr(broker_addr)
    ext = {
        "brokerAddr": broker_addr, "brokerId": str(broker_id), "brokerName": broker_name,
        "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF), "clusterName": cluster,
        "compressed": "false", "enableActingMaster": "false",
        "haServerAddr": ha_addr or f"{host}:{port + 1}", "heartbeatTimeoutMillis": "120000",
    }
    # The connection stays open for the life of the process: a namesrv drops a broker's
    # routes when the connection it registered on closes, exactly as Java's does.
    c = RemotingClient(namesrv_addr, timeout=timeout)
    _REGISTRATION_CONNECTIONS.append(c)
    resp = c.request(REGISTER_BROKER, ext, body)
    if resp.code != SUCCESS:
        raise ProtocolError(f"REGISTER_BROKER answered code {resp.code} remark {resp.remark!r}")
    return resp


def get_route(namesrv_addr: str, topic: str, timeout: float = 5.0) -> Tuple[int, Optional[Dict[str, Any]], Frame]:
    """GET_ROUTEINFO_BY_TOPIC (105) -> (code, parsed TopicRouteData or None, response frame)."""
    with RemotingClient(namesrv_addr, timeout=timeout) as c:
        resp = c.request(GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    route = None
    if resp.code == SUCCESS and resp.body:
        route = json.loads(resp.body.decode("utf-8"))
    return resp.code, route, resp


def wait_for_route(namesrv_addr: str, topic: str, predicate: Callable[[Dict[str, Any]], bool],
                   timeout: float = 10.0, interval: float = 0.2) -> Optional[Dict[str, Any]]:
    """Poll the route of `topic` until predicate(route) holds; the last route seen or None."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            code, route, _ = get_route(namesrv_addr, topic, timeout=max(0.5, deadline - time.monotonic()))
        except (OSError, ProtocolError, TimeoutError, ValueError):
            code, route = -1, None
        if code == SUCCESS and route is not None:
            last = route
            if predicate(route):
                return route
        time.sleep(interval)
    return last


def route_broker_addrs(route: Dict[str, Any]) -> List[str]:
    """All broker addresses in a TopicRouteData."""
    out: List[str] = []
    for bd in route.get("brokerDatas") or []:
        out.extend(str(a) for a in (bd.get("brokerAddrs") or {}).values())
    return out


# ---- message helpers -------------------------------------------------------------------------

def parse_properties(s: str) -> Dict[str, str]:
    """Property string (message-format.md §1) -> dict, Java's decoding rule."""
    out: Dict[str, str] = {}
    for piece in s.split("\x02"):
        k, sep, v = piece.partition("\x01")
        if sep and k and v:
            out[k] = v
    return out


def split_batch_body(body: bytes) -> List[Dict[str, Any]]:
    """Batch send body (message-format.md §4) -> [{flag, body, properties}]."""
    out = []
    pos = 0
    while pos < len(body):
        if pos + 20 > len(body):
            raise ProtocolError("truncated batch item")
        size, _magic, _crc, flag, blen = struct.unpack(">iiiii", body[pos:pos + 20])
        mb = body[pos + 20:pos + 20 + blen]
        (plen,) = struct.unpack(">h", body[pos + 20 + blen:pos + 22 + blen])
        props = body[pos + 22 + blen:pos + 22 + blen + plen].decode("utf-8")
        if size != 22 + blen + plen:
            raise ProtocolError(f"batch item size {size} != 22 + {blen} + {plen}")
        out.append({"flag": flag, "body": mb, "properties": parse_properties(props)})
        pos += size
    return out


def properties_string(props: Dict[str, str]) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items())


def host_bytes(addr: str) -> bytes:
    host, port = parse_addr(addr)
    return socket.inet_aton(host) + struct.pack(">i", port)


def encode_stored_record(*, topic: str, queue_id: int, flag: int, queue_offset: int,
                         phys_offset: int, sys_flag: int, born_ts: int, born_host: str,
                         store_ts: int, store_host: str, body: bytes, properties: str,
                         reconsume_times: int = 0, prepared_tx_offset: int = 0) -> bytes:
    """One v1 commit-log record with IPv4 hosts (message-format.md §5.1)."""
    tb = topic.encode("utf-8")
    pb = properties.encode("utf-8")
    if len(tb) > 127:
        raise ValueError("v1 record: topic longer than 127 bytes")
    total = 91 + len(body) + len(tb) + len(pb)
    return b"".join([
        struct.pack(">iIiiiqqiq", total, 0xDAA320A7, zlib.crc32(body) & 0x7FFFFFFF, queue_id, flag,
                    queue_offset, phys_offset, sys_flag, born_ts),
        host_bytes(born_host), struct.pack(">q", store_ts), host_bytes(store_host),
        struct.pack(">iqi", reconsume_times, prepared_tx_offset, len(body)), body,
        struct.pack(">B", len(tb)), tb, struct.pack(">h", len(pb)), pb,
    ])


def offset_msg_id(store_addr: str, phys_offset: int) -> str:
    """offsetMsgId for an IPv4 store host (message-format.md §6.1)."""
    host, port = parse_addr(store_addr)
    return (socket.inet_aton(host) + struct.pack(">iq", port, phys_offset)).hex().upper()
