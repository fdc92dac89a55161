#!/usr/bin/env bash
# install.sh — installs the pinned real third-party RocketMQ clients used by the
# conformance tests into the test tree, and nothing else.
#
# Owns:
#   tests/conformance/.venv                 Python venv: rocketmq-client-python 2.0.0 (official
#                                           wrapper) + the C++ core librocketmq.so (2.1.0) taken
#                                           from the sdist of rocketmq-python-cvs 2.1.0.3
#   tests/conformance/node/node_modules     ali-ons 3.12.0 and the official 5.x SDK
#                                           rocketmq-client-nodejs 1.0.8 (gRPC), installed with
#                                           `npm ci` from the committed package.json + lock
#   tests/conformance/.venv5                Python venv: the official 5.x SDK (gRPC),
#                                           rocketmq-python-client 5.1.2, with every dependency
#                                           pinned in python5-requirements.txt (its package
#                                           is also named `rocketmq`, hence its own venv)
#   tests/conformance/.cache                downloaded sdists (checked against pinned sha256)
# All three are gitignored. shared/clients.md says why these packages.
#
# Idempotent: each part writes a stamp file after it verified itself; when the stamp matches
# the pins (and a quick smoke check passes) that part is skipped. Use --force to reinstall.
# Only PyPI and the npm registry are contacted (through pip and npm). No apt needed: the C++
# core only links libc, libstdc++, libz, libpthread, libm, libgcc_s.
#
# Usage: bash tests/conformance/install.sh [--force] [--python-only|--node-only|--python5-only]
# Env:   PYTHON (default python3), NPM (default npm)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/.venv"
VENV5="$HERE/.venv5"
PY5_REQUIREMENTS="$HERE/python5-requirements.txt"
CACHE="$HERE/.cache"
NODE_DIR="$HERE/node"
PYTHON="${PYTHON:-python3}"
NPM="${NPM:-npm}"

# ---- pins -------------------------------------------------------------------------------
PY_WRAPPER_PIN="rocketmq-client-python==2.0.0"
PY_WRAPPER_SDIST="rocketmq-client-python-2.0.0.tar.gz"
PY_WRAPPER_SHA256="692324adaa8107eebd0369117043871d90035ddb1562f9999c5681136f16f738"
PY_CORE_PIN="rocketmq-python-cvs==2.1.0.3"
PY_CORE_SDIST="rocketmq-python-cvs-2.1.0.3.tar.gz"
PY_CORE_SHA256="99e4ce8008554a74193a3ad94b60f939a4666c48ffabbf4c4417a109daf1419d"
PY_CORE_SO_SHA256="ed3fce39f2b926637637a2b8b9122799f207b0cdf98dbd9110505bf43170fa30"
NODE_ALIONS_VERSION="3.12.0"

FORCE=0
DO_PY=1
DO_NODE=1
DO_PY5=1
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    --python-only) DO_NODE=0; DO_PY5=0 ;;
    --node-only) DO_PY=0; DO_PY5=0 ;;
    --python5-only) DO_PY=0; DO_NODE=0 ;;
    -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "install.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

log() { printf '[install] %s\n' "$*"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }
sha256_of() { sha256sum "$1" | awk '{print $1}'; }

# fetch_sdist PIN FILE SHA256: download the sdist of PIN into $CACHE (once) and check its hash.
fetch_sdist() {
  local pin="$1" file="$2" sum="$3"
  mkdir -p "$CACHE"
  if [[ -f "$CACHE/$file" && "$(sha256_of "$CACHE/$file")" == "$sum" ]]; then
    return 0
  fi
  rm -f "$CACHE/$file"
  "$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps \
    --no-binary :all: -d "$CACHE" "$pin"
  if [[ ! -f "$CACHE/$file" ]]; then
    echo "install.sh: pip download $pin did not produce $file" >&2; return 1
  fi
  local got; got="$(sha256_of "$CACHE/$file")"
  if [[ "$got" != "$sum" ]]; then
    echo "install.sh: sha256 mismatch for $file: got $got want $sum" >&2; return 1
  fi
}

py_smoke() {
  # The import loads librocketmq.so through ctypes and binds every symbol ffi.py declares.
  "$VENV/bin/python" - <<'EOF'
import os, rocketmq, rocketmq.client, rocketmq.ffi as ffi
assert os.path.dirname(ffi._DYLIB_PATH) == os.path.dirname(rocketmq.__file__), ffi._DYLIB_PATH
from rocketmq.client import Producer, PushConsumer, Message  # noqa: F401
for sym in ("CreateBatchMessage", "AddMessage", "SendBatchMessage", "DestroyBatchMessage"):
    getattr(ffi.dll, sym)
EOF
}

install_python() {
  local t0; t0="$(now)"
  local stamp="$VENV/.ringmq-pins"
  local want="$PY_WRAPPER_PIN $PY_CORE_PIN so=$PY_CORE_SO_SHA256"
  if [[ $FORCE -eq 0 && -f "$stamp" && "$(cat "$stamp")" == "$want" ]] && py_smoke 2>/dev/null; then
    log "python: already installed ($want), skipped in $(elapsed "$t0") s"
    return 0
  fi
  log "python: installing $PY_WRAPPER_PIN + librocketmq.so from $PY_CORE_PIN"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  fetch_sdist "$PY_WRAPPER_PIN" "$PY_WRAPPER_SDIST" "$PY_WRAPPER_SHA256"
  fetch_sdist "$PY_CORE_PIN" "$PY_CORE_SDIST" "$PY_CORE_SHA256"
  # The official wrapper (pure Python, sdist only on PyPI). Installed from the verified sdist.
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    "$CACHE/$PY_WRAPPER_SDIST"
  # The C++ core: rocketmq/librocketmq.so from the rocketmq-python-cvs sdist, placed next to
  # the official wrapper's ffi.py (which prefers a library in its own package folder).
  local tmp; tmp="$(mktemp -d)"
  tar -xzf "$CACHE/$PY_CORE_SDIST" -C "$tmp" "rocketmq-python-cvs-2.1.0.3/rocketmq/librocketmq.so"
  local so="$tmp/rocketmq-python-cvs-2.1.0.3/rocketmq/librocketmq.so"
  if [[ "$(sha256_of "$so")" != "$PY_CORE_SO_SHA256" ]]; then
    echo "install.sh: librocketmq.so sha256 mismatch" >&2; rm -rf "$tmp"; return 1
  fi
  local pkgdir
  pkgdir="$("$VENV/bin/python" -c 'import importlib.util,os;print(os.path.dirname(importlib.util.find_spec("rocketmq").origin))')"
  [[ -f "$pkgdir/ffi.py" ]] || { echo "install.sh: no ffi.py in $pkgdir" >&2; return 1; }
  install -m 0755 "$so" "$pkgdir/librocketmq.so"
  rm -rf "$tmp"
  py_smoke
  printf '%s' "$want" > "$stamp"
  log "python: ok ($pkgdir/librocketmq.so) in $(elapsed "$t0") s"
}

node_smoke() {
  (cd "$NODE_DIR" && node -e '
    const v = require("ali-ons/package.json").version;
    if (v !== process.argv[1]) { console.error("ali-ons version " + v); process.exit(1); }
    const ons = require("ali-ons");
    if (!ons.Producer || !ons.Consumer || !ons.Message) process.exit(1);
    const v5 = require("rocketmq-client-nodejs/package.json").version;
    if (v5 !== "1.0.8") { console.error("rocketmq-client-nodejs version " + v5); process.exit(1); }
  ' "$NODE_ALIONS_VERSION")
}

install_node() {
  local t0; t0="$(now)"
  local stamp="$NODE_DIR/node_modules/.ringmq-pins"
  local want="ali-ons@$NODE_ALIONS_VERSION lock=$(sha256_of "$NODE_DIR/package-lock.json")"
  if [[ $FORCE -eq 0 && -f "$stamp" && "$(cat "$stamp")" == "$want" ]] && node_smoke 2>/dev/null; then
    log "node: already installed ($want), skipped in $(elapsed "$t0") s"
    return 0
  fi
  log "node: npm ci (ali-ons@$NODE_ALIONS_VERSION) in $NODE_DIR"
  (cd "$NODE_DIR" && "$NPM" ci --no-audit --no-fund --loglevel=error)
  node_smoke
  printf '%s' "$want" > "$stamp"
  log "node: ok in $(elapsed "$t0") s"
}

py5_smoke() {
  "$VENV5/bin/python" -c '
from rocketmq import Producer, SimpleConsumer, PushConsumer, ClientConfiguration, Credentials
import importlib.metadata as m
assert m.version("rocketmq-python-client") == "5.1.2", m.version("rocketmq-python-client")
'
}

install_python5() {
  local t0; t0="$(now)"
  local stamp="$VENV5/.ringmq-pins"
  local want; want="requirements=$(sha256_of "$PY5_REQUIREMENTS")"
  if [[ $FORCE -eq 0 && -f "$stamp" && "$(cat "$stamp")" == "$want" ]] && py5_smoke 2>/dev/null; then
    log "python5: already installed ($want), skipped in $(elapsed "$t0") s"
    return 0
  fi
  log "python5: installing rocketmq-python-client 5.1.2 from $PY5_REQUIREMENTS"
  rm -rf "$VENV5"
  "$PYTHON" -m venv "$VENV5"
  "$VENV5/bin/python" -m pip install --quiet --disable-pip-version-check -r "$PY5_REQUIREMENTS"
  py5_smoke
  printf '%s' "$want" > "$stamp"
  log "python5: ok in $(elapsed "$t0") s"
}

T0="$(now)"
if [[ $DO_PY -eq 1 ]]; then install_python; fi
if [[ $DO_PY5 -eq 1 ]]; then install_python5; fi
if [[ $DO_NODE -eq 1 ]]; then install_node; fi
log "done in $(elapsed "$T0") s"
