#!/usr/bin/env bash
# build.sh builds versitygw, the S3-compatible server the tests run, from the Go
# module proxy, and caches it by version so only the first run pays.
#
#   tools/versitygw/build.sh
#
# The binary lands in $KOS_CACHE/versitygw/<version>/ (KOS_CACHE defaults to
# .cache at the repository root, which git ignores). The script prints that
# folder on stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
version=$(awk '$1 == "require" && $2 == "github.com/versity/versitygw" {print $3; exit}' "$here/go.mod")
[ -n "$version" ] || { echo "build.sh: no github.com/versity/versitygw version in $here/go.mod" >&2; exit 2; }
out=${KOS_CACHE:-$root/.cache}/versitygw/$version
mkdir -p "$out"

# Test packages run in parallel and each may call this script: one build at a
# time, and whoever waited finds the binary built.
exec 9>"$out/.build.lock"
if ! flock -n 9; then
  echo "build.sh: another build into $out is running; waiting for it..." >&2
  flock 9
fi
if [ ! -x "$out/versitygw" ]; then
  export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
  cd "$here"
  echo "building versitygw $version from the Go module proxy; the first build takes a few minutes..." >&2
  start=$(date +%s)
  # The temporary name keeps a half-written binary from ever looking built.
  go build -trimpath -ldflags "-s -w" -o "$out/versitygw.tmp.$$" github.com/versity/versitygw/cmd/versitygw
  mv "$out/versitygw.tmp.$$" "$out/versitygw"
  echo "built versitygw in $(( $(date +%s) - start ))s" >&2
fi
echo "$out"
