#!/usr/bin/env bash
# Removes what install.sh installed. Data under /var/lib/ringmq and configs under
# /etc/ringmq stay unless --purge is given.
#   systemd/uninstall.sh [--root DIR] [--purge]
set -euo pipefail
root=""
purge=0
while [ $# -gt 0 ]; do
  case "$1" in
    --root) root="${2:?--root needs a directory}"; shift 2 ;;
    --purge) purge=1; shift ;;
    *) echo "uninstall.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
units="ringmq-namesrv.service ringmq-broker@.service ringmq-controller.service ringmq-tuning.service"
if [ -z "$root" ] && command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
  systemctl disable --now ringmq-namesrv.service ringmq-controller.service ringmq-tuning.service 2>/dev/null || true
  systemctl stop 'ringmq-broker@*' 2>/dev/null || true
fi
for unit in $units; do rm -f "$root/etc/systemd/system/$unit"; done
rm -f "$root/usr/bin/ringmq" "$root/usr/bin/mqnamesrv" "$root/usr/bin/mqbroker" "$root/usr/bin/mqadmin" "$root/usr/bin/mqcontroller"
rm -f "$root/etc/sysctl.d/60-ringmq.conf" "$root/usr/lib/sysusers.d/ringmq.conf"
rm -rf "$root/usr/share/doc/ringmq"
if [ "$purge" = 1 ]; then
  rm -rf "$root/etc/ringmq" "$root/var/lib/ringmq"
fi
if [ -z "$root" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
echo "uninstalled${root:+ from $root}"
