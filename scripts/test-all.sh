#!/usr/bin/env bash
# Runs every test ringmq has, in the order a failure is cheapest to see:
# format, lints, unit + integration tests, then real third-party clients against the
# built binary. The last line is the conformance runner's "N passed, N failed, N skipped".
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s ==\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "no import circles inside a crate"
python3 scripts/import_cycles.py

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo build (debug binaries used by the integration and conformance tests)"
cargo build --workspace --all-targets

step "cargo test"
cargo test --workspace

step "benchmark harness: unit tests (no broker)"
python3 -m unittest benches/modes/test_run.py

if [ -x systemd/check.sh ]; then
  step "systemd units and staged install"
  systemd/check.sh
fi

step "conformance: captured real-client frames"
python3 tests/conformance/capture/verify_fixtures.py

step "conformance: real third-party clients"
tests/conformance/install.sh
RINGMQ_BIN="$PWD/target/debug/ringmq" python3 tests/conformance/run.py
