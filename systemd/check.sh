#!/usr/bin/env bash
# CI checks for the systemd packaging (these machines do not run systemd as PID 1):
#  1. every unit passes `systemd-analyze verify` (ExecStart pointed at the built binary);
#  2. install.sh --root stages the expected tree; uninstall.sh removes it again;
#  3. the broker, namesrv and controller, started exactly as their units' ExecStart lines say, send
#     READY=1, feed the watchdog and send STOPPING=1 on SIGTERM.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
top="$(dirname "$here")"
bin="${RINGMQ_BIN:-$top/target/debug/ringmq}"
[ -x "$bin" ] || { echo "systemd/check.sh: build first: no binary at $bin" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }

# 1. systemd-analyze verify
if command -v systemd-analyze >/dev/null; then
  mkdir -p "$work/units"
  for unit in ringmq-namesrv.service ringmq-broker@.service ringmq-controller.service ringmq-tuning.service; do
    target="$unit"
    [ "$unit" = "ringmq-broker@.service" ] && target="ringmq-broker@broker-a.service"
    sed "s#/usr/bin/ringmq#$bin#" "$here/$unit" > "$work/units/$target"
  done
  for unit in "$work"/units/*.service; do
    name="$(basename "$unit")"
    # Other units it names (network-online.target, ...) may be missing in a container;
    # only findings about our own unit count.
    findings="$(systemd-analyze verify "$unit" 2>&1 | grep -F "$name" | grep -v 'sysinit.target not found' || true)"
    if [ -z "$findings" ]; then ok "verify $name"; else bad "verify $name: $findings"; fi
  done
else
  bad "systemd-analyze not installed (apt-get install systemd)"
fi

# 2. staged install and uninstall
stage="$work/root"
"$here/install.sh" --root "$stage" --bin "$bin" >/dev/null
missing=""
for f in usr/bin/ringmq usr/bin/mqnamesrv usr/bin/mqbroker usr/bin/mqadmin usr/bin/mqcontroller \
         etc/systemd/system/ringmq-namesrv.service etc/systemd/system/ringmq-broker@.service \
         etc/systemd/system/ringmq-controller.service etc/ringmq/controller.conf \
         etc/systemd/system/ringmq-tuning.service \
         etc/ringmq/namesrv.conf etc/ringmq/broker-a.conf etc/sysctl.d/60-ringmq.conf \
         usr/lib/sysusers.d/ringmq.conf; do
  [ -e "$stage/$f" ] || missing="$missing $f"
done
if [ -z "$missing" ]; then ok "staged install"; else bad "staged install: missing$missing"; fi
if [ "$("$stage/usr/bin/mqnamesrv" -p | grep -c '^listenPort=')" = 1 ]; then
  ok "mqnamesrv link behaves as 'ringmq namesrv'"
else
  bad "mqnamesrv link does not print the namesrv config"
fi
echo "# operator edit" >> "$stage/etc/ringmq/broker-a.conf"
"$here/install.sh" --root "$stage" --bin "$bin" >/dev/null
if grep -q '# operator edit' "$stage/etc/ringmq/broker-a.conf"; then ok "reinstall keeps operator config"; else bad "reinstall overwrote operator config"; fi
"$here/uninstall.sh" --root "$stage" >/dev/null
left="$(cd "$stage" && find . -type f -o -type l | grep -v '^./etc/ringmq/' || true)"
if [ -z "$left" ] && [ -e "$stage/etc/ringmq/broker-a.conf" ]; then ok "uninstall keeps configs, removes the rest"; else bad "uninstall left: $left"; fi
"$here/uninstall.sh" --root "$stage" --purge >/dev/null
if [ -z "$(find "$stage" -type f)" ]; then ok "uninstall --purge"; else bad "uninstall --purge left files"; fi

# 3. readiness and watchdog, run as the units' ExecStart lines
if python3 "$here/notify_check.py" "$bin" "$here" "$work/notify"; then ok "sd_notify READY/WATCHDOG/STOPPING"; else bad "sd_notify readiness/watchdog"; fi

echo "systemd: $passed passed, $failed failed"
[ "$failed" = 0 ]
