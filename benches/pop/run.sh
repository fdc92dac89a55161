#!/usr/bin/env bash
# POP against pull on one broker, same topic, same load (benches/README.md, "POP"):
#   1. drain: N pre-produced 1 KiB messages consumed from the start by a pull consumer
#      group, then by POP groups (every message acked, one ack per message or one batch
#      ack per pop): msg/s of each = consume and ack throughput;
#   2. end to end at a fixed send rate (-r): born -> consumed latency p50/p99 with pull,
#      then with POP;
#   3. the POP cells again on the same store with enablePopBufferMerge=true (checkpoints
#      held in memory, acks meeting them there).
# Usage: benches/pop/run.sh [N=200000] [RATE=10000] [SECS=10]
set -uo pipefail
N=${1:-200000}
RATE=${2:-10000}
SECS=${3:-10}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${RINGMQ_BIN:-$ROOT/target/release/ringmq}
[ -x "$BIN" ] || { echo "build first: cargo build --release -p ringmq-cli" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ringmq-pop-bench.XXXXXX")
NS_PORT=$((20000 + RANDOM % 20000))
BROKER_PORT=$((NS_PORT + 11))
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
cat > "$WORK/namesrv.conf" <<CONF
listenPort=$NS_PORT
bindAddress=127.0.0.1
kvConfigPath=$WORK/kvConfig.json
configStorePath=$WORK/namesrv.properties
CONF
start_broker() { # enablePopBufferMerge
  cat > "$WORK/broker.conf" <<CONF
brokerClusterName=PopBench
brokerName=pop-bench
listenPort=$BROKER_PORT
bindAddress=127.0.0.1
brokerIP1=127.0.0.1
ringmq.grpc.port=0
namesrvAddr=127.0.0.1:$NS_PORT
storePathRootDir=$WORK/store
autoCreateTopicEnable=true
enablePopBufferMerge=$1
CONF
  "$BIN" broker -c "$WORK/broker.conf" > "$WORK/broker-$1.log" 2>&1 & BROKER_PID=$!
  pids+=("$BROKER_PID")
  sleep 1
  for _ in $(seq 1 100); do
    "$BIN" admin clusterList -n "$NS" 2>/dev/null | grep -q pop-bench && break
    sleep 0.2
  done
}
"$BIN" namesrv -c "$WORK/namesrv.conf" > "$WORK/namesrv.log" 2>&1 & pids+=($!)
sleep 1
NS=127.0.0.1:$NS_PORT
start_broker false
bench() { "$BIN" bench "$@" -n "$NS" --quiet --json --no-broker-profile 2>&1 | tail -1; }
field() { python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(d[sys.argv[2]])" "$1" "$2"; }
report() { # name json
  printf '%-34s %10.0f msg/s   p50 %8.2f ms   p99 %8.2f ms   failures %s\n' "$1" \
    "$(field "$2" tps)" "$(field "$2" p50_ms)" "$(field "$2" p99_ms)" "$(field "$2" failures)"
}
bench producer -t PopBenchDrain -m "$N" -s 1024 -w 256 > /dev/null
# A consumer run ends once it claimed more than -m: ask for one batch less than was sent.
M=$((N - 32))
report "drain: pull (from start)" "$(bench consumer -t PopBenchDrain -g CG_pull_drain --from-start -m "$M" -d 120)"
report "drain: POP + ack" "$(bench consumer -t PopBenchDrain -g CG_pop_drain --pop -m "$M" -d 120)"
report "drain: POP + batch ack" "$(bench consumer -t PopBenchDrain -g CG_pop_drain_b --pop --batch-ack -m "$M" -d 120)"
report "e2e ${RATE}/s: pull" "$(bench e2e -t PopBenchE2ePull -g CG_pull_e2e -r "$RATE" -d "$SECS" -s 1024)"
report "e2e ${RATE}/s: POP + ack" "$(bench e2e -t PopBenchE2ePop -g CG_pop_e2e --pop -r "$RATE" -d "$SECS" -s 1024)"
kill "$BROKER_PID"; wait "$BROKER_PID" 2>/dev/null
start_broker true
report "drain: POP + ack, merge" "$(bench consumer -t PopBenchDrain -g CG_pop_drain_merge --pop -m "$M" -d 120)"
report "drain: POP + batch ack, merge" "$(bench consumer -t PopBenchDrain -g CG_pop_drain_merge_b --pop --batch-ack -m "$M" -d 120)"
report "e2e ${RATE}/s: POP + ack, merge" "$(bench e2e -t PopBenchE2ePopMerge -g CG_pop_e2e_merge --pop -r "$RATE" -d "$SECS" -s 1024)"
