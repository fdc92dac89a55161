#!/usr/bin/env bash
# perf-lock.sh — where does the broker spend CPU, and how long does the append stage hold
# the CommitLog tail (the "lock-hold time")?
#
# Starts `ringmq up` (namesrv + broker, one process) on free loopback ports with a temporary
# data directory, attaches `perf stat` (software events; cycles/instructions too when the
# PMU is usable) and `perf record` to it, drives `ringmq bench producer` for N seconds, and
# writes a report into benches/results/perf-<timestamp>/:
#   report.md            summary: bench figures, broker stage-profile deltas, the append
#                        stage's own perf counters, perf stat, CPU by thread, top symbols
#   bench.txt            the bench output (last line: JSON summary with a "broker" key)
#   perf-stat.txt        perf stat output
#   perf-threads.txt     perf report by thread (comm) and DSO
#   perf-symbols.txt     perf report, top symbols by self time
#   runtime-before.txt / runtime-after.txt   `mqadmin brokerStatus` before/after
#   broker.log.gz        the broker's log (compressed: overload runs log one WARN per refusal)
# perf.data is deleted afterwards unless --keep-data is given (it is large).
#
# Usage: benches/perf-lock.sh [-d SECONDS] [-s BYTES] [-w CONCURRENCY] [-c CONNECTIONS] [-t TOPIC]
#                             [--send-mode sync|async|oneway|batch] [--threads N]
#                             [--call-graph fp|dwarf|lbr] [--build] [--keep-data]
# Environment: RINGMQ_BIN (default target/release/ringmq).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${RINGMQ_BIN:-$ROOT/target/release/ringmq}
DURATION_S=10
SIZE_BYTES=1024
CONCURRENCY=64
CONNECTIONS=1
THREADS=1
SEND_MODE=sync
# Not BenchmarkTest: that is a system topic upstream (excluded from msgPutTotal*, refused by
# updateTopic).
TOPIC=PerfLockTest
CALL_GRAPH=fp
BUILD=0
KEEP_DATA=0

while [ $# -gt 0 ]; do
    case "$1" in
        -d) DURATION_S=$2; shift 2 ;;
        -s) SIZE_BYTES=$2; shift 2 ;;
        -w) CONCURRENCY=$2; shift 2 ;;
        -c) CONNECTIONS=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        -t) TOPIC=$2; shift 2 ;;
        --send-mode) SEND_MODE=$2; shift 2 ;;
        --call-graph) CALL_GRAPH=$2; shift 2 ;;
        --build) BUILD=1; shift ;;
        --keep-data) KEEP_DATA=1; shift ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "perf-lock.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
done

log() { echo "[perf-lock] $*" >&2; }

# ---- perf ---------------------------------------------------------------------------
if ! command -v perf >/dev/null 2>&1 || ! perf --version >/dev/null 2>&1; then
    log "perf not found; installing linux-perf with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq linux-perf >/dev/null || apt-get install -y -qq linux-tools-generic >/dev/null
fi
command -v perf >/dev/null || { log "perf is still missing; giving up"; exit 1; }

# Software events always work in a VM; hardware ones only when the PMU is exposed.
EVENTS=task-clock,context-switches,cpu-migrations,page-faults
# With -x, a counted event starts its line with a number, an unusable one with "<not ...>".
if perf stat -x, -e instructions true 2>&1 >/dev/null | grep -q '^[0-9]'; then
    EVENTS=$EVENTS,cycles,instructions
    HW=yes
else
    HW="no (no PMU access here: software events only)"
fi

# ---- binary -------------------------------------------------------------------------
if [ "$BUILD" = 1 ] || [ ! -x "$BIN" ]; then
    log "building the release binary"
    (cd "$ROOT" && cargo build --release -p ringmq-cli)
fi

# ---- ports and directories ----------------------------------------------------------
# A broker also binds listenPort-2 (VIP channel) and listenPort+1 (HA), so pick a base
# whose neighbours are free too.
read -r NAMESRV_PORT BROKER_PORT < <(python3 - <<'EOF'
import random, socket
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); return True
    except OSError:
        return False
    finally:
        s.close()
for _ in range(200):
    n = random.randint(20000, 40000)
    b = n + 100
    if all(free(p) for p in (n, b - 2, b, b + 1)):
        print(n, b); break
EOF
)
[ -n "${BROKER_PORT:-}" ] || { log "no free ports found"; exit 1; }
NAMESRV=127.0.0.1:$NAMESRV_PORT
BROKER=127.0.0.1:$BROKER_PORT
STAMP=$(date +%Y%m%d-%H%M%S)
OUT=$ROOT/benches/results/perf-$STAMP
mkdir -p "$OUT"
DATA=$(mktemp -d /tmp/ringmq-perf-lock.XXXXXX)

BROKER_PID=
cleanup() {
    if [ -n "$BROKER_PID" ] && kill -0 "$BROKER_PID" 2>/dev/null; then
        kill -TERM "$BROKER_PID" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$BROKER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$BROKER_PID" 2>/dev/null || true
    fi
    rm -rf "$DATA"
}
trap cleanup EXIT

# ---- broker -------------------------------------------------------------------------
log "starting ringmq up (namesrv $NAMESRV, broker $BROKER, data $DATA)"
"$BIN" up --data "$DATA" --namesrv-port "$NAMESRV_PORT" --broker-port "$BROKER_PORT" --grpc-port 0 \
    >"$OUT/broker.log" 2>&1 &
BROKER_PID=$!
for i in $(seq 1 300); do
    if "$BIN" admin brokerStatus -n "$NAMESRV" -b "$BROKER" >/dev/null 2>&1; then break; fi
    kill -0 "$BROKER_PID" 2>/dev/null || { log "broker exited; see $OUT/broker.log"; tail -20 "$OUT/broker.log" >&2; exit 1; }
    [ "$i" = 300 ] && { log "broker not answering after 30 s"; exit 1; }
    sleep 0.1
done
# The topic exists before the clock starts (auto-creation is not what we profile).
"$BIN" admin updateTopic -n "$NAMESRV" -b "$BROKER" -t "$TOPIC" -r 8 -w 8 >/dev/null 2>&1 || true
sleep 1
"$BIN" admin brokerStatus -n "$NAMESRV" -b "$BROKER" >"$OUT/runtime-before.txt" 2>&1 || true

# ---- measure ------------------------------------------------------------------------
PERF_S=$((DURATION_S + 2))
log "perf stat ($EVENTS) + perf record (-g, call graph $CALL_GRAPH) for ${PERF_S}s; bench producer ${DURATION_S}s"
perf stat -e "$EVENTS" -p "$BROKER_PID" -o "$OUT/perf-stat.txt" -- sleep "$PERF_S" &
STAT_PID=$!
perf record -F 999 -g --call-graph "$CALL_GRAPH" -p "$BROKER_PID" -o "$OUT/perf.data" -- sleep "$PERF_S" \
    >"$OUT/perf-record.log" 2>&1 &
RECORD_PID=$!
sleep 0.5
"$BIN" bench producer -n "$NAMESRV" -t "$TOPIC" -d "$DURATION_S" -s "$SIZE_BYTES" \
    -w "$CONCURRENCY" -c "$CONNECTIONS" --threads "$THREADS" --send-mode "$SEND_MODE" \
    --quiet --json >"$OUT/bench.txt" 2>&1 || log "bench exited non-zero (see bench.txt)"
wait "$STAT_PID" || true
wait "$RECORD_PID" || true
"$BIN" admin brokerStatus -n "$NAMESRV" -b "$BROKER" >"$OUT/runtime-after.txt" 2>&1 || true

# ---- report -------------------------------------------------------------------------
perf report -i "$OUT/perf.data" --stdio --no-children -g none --sort comm,dso --percent-limit 0.5 \
    2>/dev/null | grep -v '^$' >"$OUT/perf-threads.txt" || true
perf report -i "$OUT/perf.data" --stdio --no-children -g none --sort comm,symbol --percent-limit 0.3 \
    2>/dev/null | grep -v '^$' | sed -E 's/[[:space:]]+-[[:space:]]+-[[:space:]]*$//; s/[[:space:]]+$//' \
    >"$OUT/perf-symbols.txt" || true
[ "$KEEP_DATA" = 1 ] || rm -f "$OUT/perf.data"

BENCH_JSON=$(grep '^{' "$OUT/bench.txt" | tail -1 || true)
{
    echo "# perf-lock report $STAMP"
    echo
    echo "- host: $(nproc) CPUs, kernel $(uname -r); hardware counters: $HW"
    echo "- load: ringmq bench producer -s $SIZE_BYTES -w $CONCURRENCY -c $CONNECTIONS --threads $THREADS --send-mode $SEND_MODE for ${DURATION_S}s (client on the same host)"
    echo "- broker: ringmq up (mmap, ASYNC_FLUSH defaults), a temporary data directory ($(df -T "$DATA" 2>/dev/null | awk 'NR==2{print $2}'))"
    echo "- broker log: $(grep -c WARN "$OUT/broker.log" || true) WARN lines, $(grep -c ERROR "$OUT/broker.log" || true) ERROR lines"
    echo
    echo "## Client figures"
    echo '```'
    grep -E '^summary:' "$OUT/bench.txt" || tail -3 "$OUT/bench.txt"
    echo '```'
    echo
    echo "## Broker stage profile (deltas over the run; lock-hold/flush quantiles since broker start)"
    echo '```'
    grep -E '^broker:' "$OUT/bench.txt" || echo "(no broker line: see bench.txt)"
    if [ -n "$BENCH_JSON" ]; then
        python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(json.dumps(d.get("broker"), indent=2))' "$BENCH_JSON" 2>/dev/null || true
    fi
    echo '```'
    echo
    echo "## Append-stage perf counters (inside sampled critical sections, deltas over the run)"
    echo '```'
    # ringmq.appendPerfCounters: "batches=N task_clock_ns=.. context_switches=.. ..."
    python3 - "$OUT/runtime-before.txt" "$OUT/runtime-after.txt" <<'PY' || true
import sys
def counters(path):
    for line in open(path, errors="replace"):
        key, _, value = line.partition(":")
        if key.strip() == "ringmq.appendPerfCounters":
            return {k: int(v) for k, v in (kv.split("=") for kv in value.split())}
    return {}
before, after = counters(sys.argv[1]), counters(sys.argv[2])
if not after:
    print("(no ringmq.appendPerfCounters in brokerStatus: perf events unavailable or sampling off)")
else:
    batches = after.get("batches", 0) - before.get("batches", 0)
    print(f"sampled batches: {batches}")
    for k, v in after.items():
        if k != "batches":
            d = v - before.get(k, 0)
            print(f"{k}: {d} ({d / batches:.3f} per sampled batch)" if batches else f"{k}: {d}")
PY
    echo '```'
    echo
    echo "## perf stat (broker process)"
    echo '```'
    grep -v '^#' "$OUT/perf-stat.txt" | grep -v '^$' || true
    echo '```'
    echo
    echo "## CPU samples by thread and DSO (self time)"
    echo '```'
    grep -v '^#' "$OUT/perf-threads.txt" | head -25 || true
    echo '```'
    echo
    echo "## Top symbols (self time, by thread)"
    echo '```'
    grep -v '^#' "$OUT/perf-symbols.txt" | head -40 || true
    echo '```'
} >"$OUT/report.md"

gzip -f "$OUT/broker.log"
log "report: $OUT/report.md"
cat "$OUT/report.md"
