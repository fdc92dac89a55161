"""wireproxy.py — a logging loopback TCP proxy for Remoting traffic (stdlib only).

Owns "wire capture": run.py --capture puts one `WireProxy` in front of the name server and one in
front of the broker, gives the client the proxies' addresses, and on a failed scenario prints the
frames that went through, decoded (code names, opaque, extFields, remark, and body summaries:
property strings of sends, records of pull responses, JSON bodies).

How the broker's traffic is caught: the name-server proxy rewrites every response body that
names the real broker address (routes, cluster info) to name the broker proxy instead, so
clients connect to the broker through its proxy. Connections a client makes to an address it
decoded from a message (C++ send-back to a record's store host, END_TRANSACTION to the address
in an offsetMsgId) bypass the proxy and are not captured.

Each direction is parsed frame by frame; client-to-server bytes are forwarded unchanged, the
server-to-client direction is re-framed only when a body is rewritten. Bodies above 64 KiB are
kept as their first 4 KiB plus their length. All sockets are loopback; stop() closes them.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remoting as rm  # noqa: E402

KEEP_BODY = 64 * 1024
KEEP_HEAD = 4 * 1024
MAX_FRAMES = 50000


@dataclass
class Captured:
    t: float
    label: str       # proxy label, e.g. "namesrv" / "broker"
    conn: int
    to_server: bool
    raw: bytes       # frame bytes, maybe with a truncated body
    body_len: int
    truncated: bool


class WireProxy:
    def __init__(self, label: str, upstream: str, t0: Optional[float] = None,
                 rewrite: Optional[Callable[[bytes], bytes]] = None,
                 sink: Optional[List[Captured]] = None, lock: Optional[threading.Lock] = None):
        self.label = label
        self.upstream = upstream
        self.rewrite = rewrite
        self.t0 = t0 if t0 is not None else time.time()
        self.frames: List[Captured] = sink if sink is not None else []
        self.lock = lock or threading.Lock()
        self._stop = threading.Event()
        self._conn_seq = 0
        self._socks: List[socket.socket] = []
        self._threads: List[threading.Thread] = []
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.listener.settimeout(0.2)
        self.errors: List[str] = []

    @property
    def addr(self) -> str:
        h, p = self.listener.getsockname()
        return f"{h}:{p}"

    def start(self) -> "WireProxy":
        t = threading.Thread(target=self._accept_loop, daemon=True, name=f"proxy-{self.label}")
        t.start()
        self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        try:
            self.listener.close()
        except OSError:
            pass
        for s in list(self._socks):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                c, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                u = socket.create_connection(rm.parse_addr(self.upstream), timeout=5.0)
            except OSError as e:
                self.errors.append(f"{self.label}: upstream {self.upstream}: {e}")
                c.close()
                continue
            for s in (c, u):
                s.settimeout(None)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self._conn_seq += 1
                num = self._conn_seq
                self._socks.extend([c, u])
            for src, dst, to_server in ((c, u, True), (u, c, False)):
                t = threading.Thread(target=self._pump, args=(src, dst, num, to_server), daemon=True,
                                     name=f"proxy-{self.label}-{num}-{'up' if to_server else 'down'}")
                t.start()
                self._threads.append(t)

    def _record(self, num: int, to_server: bool, frame: bytes) -> None:
        blen = len(frame)
        truncated = False
        keep = frame
        if len(frame) > KEEP_BODY:
            keep = frame[:KEEP_HEAD + 8 + (struct.unpack(">I", frame[4:8])[0] & 0xFFFFFF)]
            truncated = True
        with self.lock:
            if len(self.frames) < MAX_FRAMES:
                self.frames.append(Captured(time.time(), self.label, num, to_server, keep, blen, truncated))

    def _pump(self, src: socket.socket, dst: socket.socket, num: int, to_server: bool) -> None:
        buf = bytearray()
        try:
            while not self._stop.is_set():
                try:
                    chunk = src.recv(262144)
                except OSError:
                    break
                if not chunk:
                    break
                buf.extend(chunk)
                out = bytearray()
                while len(buf) >= 4:
                    (flen,) = struct.unpack(">i", buf[:4])
                    if flen < 4 or flen + 4 > rm.MAX_FRAME:
                        # Not Remoting framing: forward everything raw from here on.
                        self.errors.append(f"{self.label} conn {num}: bad frame length {flen}; passing through")
                        out.extend(buf)
                        buf.clear()
                        break
                    if len(buf) < flen + 4:
                        break
                    frame = bytes(buf[:flen + 4])
                    del buf[:flen + 4]
                    if not to_server and self.rewrite is not None:
                        frame = self._rewrite(frame)
                    self._record(num, to_server, frame)
                    out.extend(frame)
                if out:
                    dst.sendall(out)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _rewrite(self, frame: bytes) -> bytes:
        try:
            stype, hlen, hb, body = rm.split_frame_bytes(frame)
        except rm.ProtocolError:
            return frame
        if not body:
            return frame
        new = self.rewrite(body)  # type: ignore[misc]
        if new == body:
            return frame
        return rm.encode_frame(hb, new, stype)


def addr_rewriter(real: str, proxy: str) -> Callable[[bytes], bytes]:
    a, b = real.encode(), proxy.encode()
    return lambda body: body.replace(a, b)


# ---- decoding for humans ---------------------------------------------------------------------

def _short(s: str, n: int = 300) -> str:
    return s if len(s) <= n else s[:n] + f"…(+{len(s) - n})"


def _props(s: str) -> str:
    return _short(json.dumps(rm.parse_properties(s), ensure_ascii=False), 400)


NOISE_CODES = {rm.HEART_BEAT, rm.UPDATE_CONSUMER_OFFSET, rm.UNREGISTER_CLIENT, rm.GET_CONSUMER_LIST_BY_GROUP,
               rm.LOCK_BATCH_MQ, rm.UNLOCK_BATCH_MQ, rm.QUERY_CONSUMER_OFFSET, rm.GET_MAX_OFFSET}


def _peek(c: Captured) -> Optional[Tuple[int, int, int, str]]:
    """(code, opaque, flag, topic) of a captured frame, or None if undecodable."""
    try:
        word = struct.unpack(">I", c.raw[4:8])[0]
        stype, hlen = word >> 24, word & 0xFFFFFF
        f = rm.decode_frame(rm.encode_frame(c.raw[8:8 + hlen], b"", stype))
    except (rm.ProtocolError, struct.error, ValueError):
        return None
    ext = f.ext
    return f.code, f.opaque, f.flag, str(ext.get("b", ext.get("topic", "")))


def quiet_filter(frames: List[Captured]) -> List[Captured]:
    """Drop routine traffic for the printed excerpt: heartbeats, offset commits/queries, client
    list and lock calls, message-trace sends, and pulls answered PULL_NOT_FOUND — with their
    responses. wire.txt keeps everything."""
    req: Dict[Tuple[str, int, int], Tuple[int, str]] = {}
    resp_code: Dict[Tuple[str, int, int], int] = {}
    peeks = []
    for c in frames:
        p = _peek(c)
        peeks.append(p)
        if p is None:
            continue
        key = (c.label, c.conn, p[1])
        if p[2] & rm.FLAG_RESPONSE:
            resp_code[key] = p[0]
        else:
            req[key] = (p[0], p[3])
    out = []
    for c, p in zip(frames, peeks):
        if p is None:
            out.append(c)
            continue
        key = (c.label, c.conn, p[1])
        code, topic = req.get(key, (None, ""))
        if code in NOISE_CODES or topic.startswith("rmq_sys_TRACE"):
            continue
        if code == rm.PULL_MESSAGE and resp_code.get(key) in (rm.PULL_NOT_FOUND, None):
            continue
        out.append(c)
    return out


def describe(frames: List[Captured], t0: float, limit_body: int = 300) -> List[str]:
    """One or more text lines per frame, in capture order."""
    try:
        import rawmq  # local import: rawmq imports remoting too
    except ImportError:  # pragma: no cover
        rawmq = None  # type: ignore[assignment]
    req_codes: Dict[Tuple[str, int, int], int] = {}
    lines: List[str] = []
    for c in frames:
        arrow = "->" if c.to_server else "<-"
        who = f"{c.label}#{c.conn}"
        try:
            if c.truncated:
                word = struct.unpack(">I", c.raw[4:8])[0]
                stype, hlen = word >> 24, word & 0xFFFFFF
                hb, body = c.raw[8:8 + hlen], c.raw[8 + hlen:]
            else:
                stype, _hlen, hb, body = rm.split_frame_bytes(c.raw)
            f = rm.decode_frame(rm.encode_frame(hb, b"", stype))
        except (rm.ProtocolError, struct.error) as e:
            lines.append(f"{c.t - t0:8.3f}s {who} {arrow} undecodable frame ({len(c.raw)} bytes): {e}")
            continue
        h = f.header
        ext = h.get("extFields") or {}
        key = (c.label, c.conn, f.opaque)
        blen = c.body_len - 8 - len(hb) if c.truncated else len(body)
        if not f.is_response:
            req_codes[(c.label, c.conn, f.opaque)] = f.code
            name = rm.CODE_NAMES.get(f.code, "?")
            ow = " oneway" if f.is_oneway else ""
            lines.append(f"{c.t - t0:8.3f}s {who} {arrow} REQ {f.code} {name} opaque={f.opaque}{ow} "
                         f"lang={h.get('language')} v={h.get('version')} ext={_short(json.dumps(ext, ensure_ascii=False), 600)}"
                         f" body={blen}B")
            code = f.code
            if code in (rm.SEND_MESSAGE, rm.SEND_MESSAGE_V2, rm.SEND_BATCH_MESSAGE):
                props = ext.get("i", ext.get("properties", ""))
                lines.append(f"            properties={_props(str(props))}")
                batch = str(ext.get("m", ext.get("batch", ""))).lower() in ("1", "true") or code == rm.SEND_BATCH_MESSAGE
                if batch and not c.truncated:
                    try:
                        for i, item in enumerate(rm.split_batch_body(body)):
                            lines.append(f"            item {i}: body={_short(repr(item['body']), 80)} "
                                         f"props={_short(json.dumps(item['properties'], ensure_ascii=False), 200)}")
                    except rm.ProtocolError as e:
                        lines.append(f"            batch body undecodable: {e}")
                else:
                    lines.append(f"            body={_short(repr(body[:limit_body]), limit_body)}")
            elif body:
                lines.append(f"            body={_body_text(body, limit_body)}")
        else:
            req = req_codes.pop(key, None)
            name = rm.CODE_NAMES.get(req, "?") if req is not None else "?"
            lines.append(f"{c.t - t0:8.3f}s {who} {arrow} RSP to {req}:{name} opaque={f.opaque} code={f.code} "
                         f"remark={_short(str(h.get('remark')), 200)!s} ext={_short(json.dumps(ext, ensure_ascii=False), 400)}"
                         f" body={blen}B{' (truncated)' if c.truncated else ''}")
            if req == rm.PULL_MESSAGE and f.code == rm.SUCCESS and body and rawmq is not None and not c.truncated:
                try:
                    for m in rawmq.decode_records(body):
                        p = m["properties"]
                        lines.append(f"            rec {m['topic']}/{m['queue_id']}@{m['queue_offset']} "
                                     f"phys={m['phys_offset']} sysFlag={m['sys_flag']} reconsume={m['reconsume_times']} "
                                     f"tags={p.get('TAGS')} keys={p.get('KEYS')} uniq={p.get('UNIQ_KEY')} "
                                     f"body={_body_text(m['body'], 80)!r}")
                except Exception as e:  # noqa: BLE001 - show anything the decoder hits
                    lines.append(f"            pull body undecodable: {e}")
            elif body:
                lines.append(f"            body={_body_text(body, limit_body)}")
    return lines


def _body_text(body: bytes, n: int) -> str:
    try:
        return _short(body.decode("utf-8"), n)
    except UnicodeDecodeError:
        return f"hex {body[:n // 2].hex()}{'…' if len(body) > n // 2 else ''}"
