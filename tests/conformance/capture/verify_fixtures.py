#!/usr/bin/env python3
"""verify_fixtures.py — checks that the committed wire fixtures are intact and self-consistent.

Owns no data; reads tests/conformance/fixtures/<client>/index.json and, for every entry, checks:
the .bin exists and matches the recorded sha256 and size; its frame length word equals the file
size - 4; the header-length word (top byte = serialize type) fits; the header decodes (JSON) and
equals the decoded header in the .json sibling; header text in the sibling is byte-exact;
splitting into header + body and re-framing gives the same bytes; JSON bodies (heartbeat, lock)
parse; batch bodies split into items that cover the body exactly. Stdlib only, no network.
Prints one line per failure and ends with `N passed, N failed` (one check per fixture).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "lib"))
import remoting as rm  # noqa: E402


def check_one(client_dir: str, entry: dict) -> str | None:
    path = os.path.join(client_dir, entry["file"])
    try:
        raw = open(path, "rb").read()
    except OSError as e:
        return f"cannot read: {e}"
    if hashlib.sha256(raw).hexdigest() != entry["sha256"]:
        return "sha256 differs from index.json"
    if len(raw) != entry["frame_bytes"]:
        return f"size {len(raw)} != index {entry['frame_bytes']}"
    stype, hlen, hb, body = rm.split_frame_bytes(raw)
    if stype != entry["serialize_type"] or hlen != entry["header_length"] or len(body) != entry["body_length"]:
        return "frame words disagree with index.json"
    if rm.encode_frame(hb, body, stype) != raw:
        return "re-framing header+body does not reproduce the bytes"
    frame = rm.decode_frame(raw)
    if frame.code != entry["code"] or frame.flag != entry["flag"] or frame.opaque != entry["opaque"]:
        return "code/flag/opaque disagree with index.json"
    sib = json.load(open(os.path.join(client_dir, entry["file"][:-4] + ".json"), encoding="utf-8"))
    if sib["header"] != frame.header:
        return "decoded header differs from the .json sibling"
    if sib["header_text"].encode("utf-8") != hb:
        return "header_text in the .json sibling is not byte-exact"
    if sib.get("raw_hex") and bytes.fromhex(sib["raw_hex"]) != raw:
        return "raw_hex in the .json sibling differs from the .bin"
    if frame.code in (rm.HEART_BEAT, rm.LOCK_BATCH_MQ, rm.UNLOCK_BATCH_MQ) and body:
        json.loads(body.decode("utf-8"))
    batch = (frame.ext_str("m") or frame.ext_str("batch") or "").lower() in ("true", "1")
    if frame.code in (rm.SEND_MESSAGE_V2, rm.SEND_BATCH_MESSAGE) and batch:
        items = rm.split_batch_body(body)
        if not items:
            return "batch body has no items"
    return None


def main() -> int:
    base = os.path.join(ROOT, "fixtures")
    passed = failed = 0
    for client in sorted(os.listdir(base)):
        idx_path = os.path.join(base, client, "index.json")
        if not os.path.isfile(idx_path):
            continue
        idx = json.load(open(idx_path, encoding="utf-8"))
        for entry in idx["fixtures"]:
            try:
                err = check_one(os.path.join(base, client), entry)
            except Exception as e:  # any decode error is a failed fixture
                err = f"{type(e).__name__}: {e}"
            if err:
                failed += 1
                print(f"FAIL {client}/{entry['file']}: {err}")
            else:
                passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
