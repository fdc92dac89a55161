#!/usr/bin/env bash
# Broker failover soak in controller mode: the CI test
# `controller_failover::the_master_killed_mid_send_is_replaced_and_no_acknowledged_message_is_lost`
# (3 controllers, 3 brokers, allAckInSyncStateSet with minInSyncReplicas=2, SIGKILL of the
# master mid-send each round, audit by message id) run for many rounds, with the tuned
# intervals and with upstream's defaults. Prints each run's "first send after kill"
# distribution (p50/p99/max) and fails on any lost or doubled acknowledged message.
#
#   benches/controller/broker_failover.sh [ROUNDS]        (default 100)
#
# Runs target/debug/ringmq, built here (RINGMQ_BIN names another build): failover time is
# set by the intervals, not by the build's speed.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-100}"
cargo build -p ringmq-cli >/dev/null
for defaults in 0 1; do
  label=$([ "$defaults" = 1 ] && echo "upstream default intervals" || echo "tuned intervals")
  echo "== $rounds failovers, $label (binary ${RINGMQ_BIN:-target/debug/ringmq})"
  RINGMQ_FAILOVER_ROUNDS="$rounds" RINGMQ_FAILOVER_DEFAULT_TIMEOUTS="$defaults" \
    cargo test -q -p ringmq-tests --test process \
    controller_failover::the_master_killed_mid_send -- --nocapture 2>&1 |
    grep -E "controller failover:|panicked|FAILED|test result"
done
