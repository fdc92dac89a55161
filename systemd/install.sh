#!/usr/bin/env bash
# Installs ringmq as system services: the binary (plus mqnamesrv/mqbroker/mqadmin links),
# the units, example configs, the sysctl file and the `ringmq` user.
#   systemd/install.sh [--root DIR] [--bin PATH]
# --root DIR stages everything under DIR (no user is created, systemctl is not called),
# which is how CI checks the result.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
top="$(dirname "$here")"
root=""
bin="$top/target/release/ringmq"
while [ $# -gt 0 ]; do
  case "$1" in
    --root) root="${2:?--root needs a directory}"; shift 2 ;;
    --bin) bin="${2:?--bin needs a path}"; shift 2 ;;
    *) echo "install.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "install.sh: no ringmq binary at $bin (cargo build --release first, or --bin PATH)" >&2; exit 1; }

install -d "$root/usr/bin" "$root/etc/systemd/system" "$root/etc/ringmq" \
  "$root/etc/sysctl.d" "$root/usr/lib/sysusers.d" "$root/var/lib/ringmq" \
  "$root/usr/share/doc/ringmq"
install -m 0755 "$bin" "$root/usr/bin/ringmq"
for alias in mqnamesrv mqbroker mqadmin mqcontroller; do
  ln -sfn ringmq "$root/usr/bin/$alias"
done
for unit in ringmq-namesrv.service ringmq-broker@.service ringmq-controller.service ringmq-tuning.service; do
  install -m 0644 "$here/$unit" "$root/etc/systemd/system/$unit"
done
# Never overwrite an operator's config.
[ -e "$root/etc/ringmq/namesrv.conf" ] || install -m 0644 "$here/conf/namesrv.conf" "$root/etc/ringmq/namesrv.conf"
[ -e "$root/etc/ringmq/controller.conf" ] || install -m 0644 "$here/conf/controller.conf" "$root/etc/ringmq/controller.conf"
[ -e "$root/etc/ringmq/broker-a.conf" ] || install -m 0644 "$here/conf/broker-a.conf" "$root/etc/ringmq/broker-a.conf"
install -m 0644 "$top/kernel-tuning/60-ringmq.conf" "$root/etc/sysctl.d/60-ringmq.conf"
install -m 0644 "$here/ringmq.sysusers" "$root/usr/lib/sysusers.d/ringmq.conf"
install -m 0644 "$top/README.md" "$root/usr/share/doc/ringmq/README.md"

if [ -z "$root" ]; then
  getent passwd ringmq >/dev/null || useradd --system --home-dir /var/lib/ringmq --shell /usr/sbin/nologin ringmq
  chown ringmq:ringmq /var/lib/ringmq
  systemctl daemon-reload
  echo "installed; start with: systemctl enable --now ringmq-tuning ringmq-namesrv ringmq-broker@broker-a"
else
  echo "staged under $root"
fi
