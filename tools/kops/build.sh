#!/usr/bin/env bash
# build.sh builds kOps's own `channels` command from the Go module proxy, and
# caches it by version so only the first run pays. The channels tests run it
# against KOS's channels in both directions.
#
#   tools/kops/build.sh
#
# The version is the k8s.io/kops that this folder's go.mod requires (v1.32.0:
# the newest the proxy serves here; later releases keep the same apply and
# managed-fields code). The binary lands in $KOS_CACHE/kops/<version>/channels
# (KOS_CACHE defaults to .cache at the repository root, which git ignores). The
# script prints that folder on stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
version=$(awk '$1 == "k8s.io/kops" {print $2; exit} $1 == "require" && $2 == "k8s.io/kops" {print $3; exit}' "$here/go.mod")
[ -n "$version" ] || { echo "build.sh: $here/go.mod requires no k8s.io/kops; restore it from git" >&2; exit 2; }
out=${KOS_CACHE:-$root/.cache}/kops/$version
mkdir -p "$out"

# Test packages run in parallel and each may call this script: one build at a
# time, and whoever waited finds the binary built.
exec 9>"$out/.build.lock"
if ! flock -n 9; then
  echo "build.sh: another build into $out is running; waiting for it..." >&2
  flock 9
fi
if [ ! -x "$out/channels" ]; then
  export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
  cd "$here"
  echo "building kOps channels $version from the Go module proxy; the first build takes several minutes..." >&2
  start=$(date +%s)
  # The temporary name keeps a half-written binary from ever looking built.
  go build -trimpath -ldflags "-s -w" -o "$out/channels.tmp.$$" k8s.io/kops/channels/cmd/channels
  mv "$out/channels.tmp.$$" "$out/channels"
  echo "built kOps channels $version in $(( $(date +%s) - start ))s" >&2
fi
echo "$out"
