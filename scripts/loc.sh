#!/usr/bin/env bash
# Rust lines of each crate's production code: src/ only (no tests/, benches/, examples/),
# and each file counted up to its first `#[cfg(test)]` (inline test modules sit at the end
# of a file by this project's habit). Blank lines and `//` comment lines are not counted.
# Usage: scripts/loc.sh [GIT-REV]   (no rev: the working tree)
set -euo pipefail
cd "$(dirname "$0")/.."
rev="${1:-}"
list() {
  if [ -n "$rev" ]; then git ls-tree -r --name-only "$rev" -- "$1"; else git ls-files -co --exclude-standard -- "$1"; fi
}
show() {
  if [ -n "$rev" ]; then git show "$rev:$1"; else cat "$1"; fi
}
total=0
for crate in appliance/*/; do
  crate=${crate%/}
  n=0
  for f in $(list "$crate/src" | grep '\.rs$'); do
    c=$(show "$f" | awk '/^[[:space:]]*#\[cfg\(test\)\]/ { done = 1 } done { next } /^[[:space:]]*$/ { next } /^[[:space:]]*\/\// { next } { n++ } END { print n+0 }')
    n=$((n + c))
  done
  printf '%-12s %7d\n' "${crate#appliance/}" "$n"
  total=$((total + n))
done
printf '%-12s %7d\n' total "$total"
