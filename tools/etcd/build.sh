#!/usr/bin/env bash
# build.sh builds etcd at the version this folder's module pins (3.6.4, the
# etcd KOS ships in its kos-etcd image), from the Go module proxy, and caches
# it by version so only the first run pays (about 2 minutes on 2 cores).
#
#   tools/etcd/build.sh
#
# The binary lands in $KOS_CACHE/etcd/<version>/etcd (KOS_CACHE defaults to
# .cache at the repository root, which git ignores). The script prints that
# folder on stdout. tools/kube/build.sh takes its etcd from here when its
# module pins none.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
version=$(awk '{sub(/^require /, "")} $1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' "$here/go.mod")
[ -n "$version" ] || { echo "build.sh: $here/go.mod requires no etcd server; restore it from git" >&2; exit 2; }
out=${KOS_CACHE:-$root/.cache}/etcd/$version
mkdir -p "$out"

export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
cd "$here"

# Test packages run in parallel and each may call this script: one build at a
# time, and whoever waited finds the binary built.
exec 9>"$out/.build.lock"
if ! flock -n 9; then
  echo "build.sh: another build into $out is running; waiting for it..." >&2
  flock 9
fi
if [ ! -x "$out/etcd" ]; then
  echo "building etcd ($version) from the Go module proxy; the first build takes a few minutes..." >&2
  start=$(date +%s)
  go build -trimpath -ldflags "-s -w" -o "$out/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$out/etcd.tmp" "$out/etcd"
  echo "built etcd in $(( $(date +%s) - start ))s" >&2
fi
echo "$out"
