"""Just enough of RocketMQ's Remoting protocol (stdlib sockets) for the benchmark harness.

Owns: framing one JSON-header request, decoding the response (JSON or ROCKETMQ binary
header), and the three calls the harness needs -- GET_ROUTEINFO_BY_TOPIC (105) on a name
server to know a broker registered, GET_BROKER_RUNTIME_INFO (28) on a broker to read its
counters (KVTable body), and a TCP probe. Everything else goes through `ringmq bench`.

Pure helpers (`encode_request`, `decode_frame`, `parse_kvtable`) are unit-tested without
sockets in test_run.py.
"""

import base64
import hashlib
import hmac
import json
import socket
import struct

GET_BROKER_RUNTIME_INFO = 28
GET_ROUTEINFO_BY_TOPIC = 105
GET_BROKER_HA_STATUS = 907
SUCCESS = 0


class RemotingError(Exception):
    pass


# (accessKey, secretKey) every call signs with, for brokers running plain ACL; see `signing`.
_credentials = None


class signing:
    """`with signing(("ak", "sk")):` signs every call made inside (the ACL cell's probes)."""

    def __init__(self, credentials):
        self.credentials = credentials

    def __enter__(self):
        global _credentials
        self.saved, _credentials = _credentials, self.credentials
        return self

    def __exit__(self, *exc):
        global _credentials
        _credentials = self.saved


def signed_fields(ext_fields, body, credentials):
    """`ext_fields` plus AccessKey and Signature: HmacSHA1(secret, the values in key order,
    then the body), Base64."""
    access_key, secret_key = credentials
    fields = {k: str(v) for k, v in (ext_fields or {}).items() if k != "Signature"}
    fields["AccessKey"] = access_key
    content = "".join(fields[k] for k in sorted(fields)).encode() + body
    digest = hmac.new(secret_key.encode(), content, hashlib.sha1).digest()
    fields["Signature"] = base64.b64encode(digest).decode()
    return fields


def encode_request(code, opaque, ext_fields=None, body=b""):
    """One frame: total length, header length (type byte 0 = JSON), JSON header, body."""
    if _credentials:
        ext_fields = signed_fields(ext_fields, body, _credentials)
    header = {
        "code": code,
        "extFields": dict(ext_fields or {}),
        "flag": 0,
        "language": "JAVA",
        "opaque": opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": 453,
    }
    hbytes = json.dumps(header, separators=(",", ":")).encode()
    total = 4 + len(hbytes) + len(body)
    return struct.pack(">ii", total, len(hbytes) & 0xFFFFFF) + hbytes + body


def _decode_binary_header(h):
    """ROCKETMQ (type 1) header -> dict shaped like the JSON header."""
    if len(h) < 21:
        raise RemotingError("binary header shorter than 21 bytes")
    code, _lang, version, opaque, flag, rlen = struct.unpack(">hBhiii", h[:17])
    pos = 17
    remark = h[pos:pos + rlen].decode("utf-8", "replace") if rlen > 0 else None
    pos += max(rlen, 0)
    (elen,) = struct.unpack(">i", h[pos:pos + 4])
    pos += 4
    ext = {}
    end = pos + max(elen, 0)
    while pos + 2 <= end:
        (klen,) = struct.unpack(">h", h[pos:pos + 2])
        pos += 2
        key = h[pos:pos + klen].decode("utf-8", "replace")
        pos += klen
        (vlen,) = struct.unpack(">i", h[pos:pos + 4])
        pos += 4
        ext[key] = h[pos:pos + vlen].decode("utf-8", "replace")
        pos += vlen
    return {"code": code, "version": version, "opaque": opaque, "flag": flag,
            "remark": remark, "extFields": ext}


def decode_frame(frame):
    """`frame` is everything after the 4-byte total length. Returns (header dict, body)."""
    if len(frame) < 4:
        raise RemotingError("frame shorter than its header-length word")
    (word,) = struct.unpack(">I", frame[:4])
    stype, hlen = word >> 24, word & 0xFFFFFF
    if 4 + hlen > len(frame):
        raise RemotingError("header length %d exceeds the frame" % hlen)
    hbytes = frame[4:4 + hlen]
    if stype == 0:
        header = json.loads(hbytes.decode("utf-8", "replace"))
    elif stype == 1:
        header = _decode_binary_header(hbytes)
    else:
        raise RemotingError("unknown serialize type %d" % stype)
    return header, frame[4 + hlen:]


def parse_kvtable(body):
    """KVTable body (fastjson `{"table":{...}}`) -> dict of str -> str."""
    if not body:
        return {}
    obj = json.loads(body.decode("utf-8", "replace"))
    table = obj.get("table", obj) if isinstance(obj, dict) else {}
    return {str(k): str(v) for k, v in table.items()}


def _read_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise RemotingError("connection closed after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return bytes(buf)


def call(addr, code, ext_fields=None, body=b"", timeout=3.0, opaque=1):
    """One request/response over a fresh connection. Returns (header, body)."""
    host, port = split_addr(addr)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(encode_request(code, opaque, ext_fields, body))
        # A bounded number of frames: skip anything that is not our response.
        for _ in range(16):
            (total,) = struct.unpack(">i", _read_exact(sock, 4))
            if total < 4 or total > 64 * 1024 * 1024:
                raise RemotingError("implausible frame length %d" % total)
            header, rbody = decode_frame(_read_exact(sock, total))
            if header.get("flag", 0) & 1 and header.get("opaque") == opaque:
                return header, rbody
    raise RemotingError("no response with opaque %d" % opaque)


def split_addr(addr):
    host, _, port = addr.rpartition(":")
    return (host or "127.0.0.1"), int(port)


def probe(addr, timeout=0.5):
    """True when something accepts TCP connections on addr."""
    try:
        with socket.create_connection(split_addr(addr), timeout=timeout):
            return True
    except OSError:
        return False


def route_code(namesrv, topic, timeout=2.0):
    """Response code of GET_ROUTEINFO_BY_TOPIC (0 = the topic has a route)."""
    header, _ = call(namesrv, GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, timeout=timeout)
    return header.get("code")


def runtime_info(broker, timeout=3.0):
    """GET_BROKER_RUNTIME_INFO as a dict, or raises RemotingError/OSError."""
    header, body = call(broker, GET_BROKER_RUNTIME_INFO, timeout=timeout)
    if header.get("code") != SUCCESS:
        raise RemotingError("GET_BROKER_RUNTIME_INFO answered code %s: %s"
                            % (header.get("code"), header.get("remark")))
    return parse_kvtable(body)


def ha_status(broker, timeout=1.0):
    """GET_BROKER_HA_STATUS (HARuntimeInfo) as a dict, or raises RemotingError/OSError."""
    header, body = call(broker, GET_BROKER_HA_STATUS, timeout=timeout)
    if header.get("code") != SUCCESS:
        raise RemotingError("GET_BROKER_HA_STATUS answered code %s: %s"
                            % (header.get("code"), header.get("remark")))
    return json.loads(body.decode("utf-8"))
