#!/usr/bin/env bash
# bench.sh is `make bench`: it runs every Go benchmark of the module against
# real servers the benchmarks start themselves. BENCHTIME (default 3x) and
# BENCH (a -bench pattern, default all) narrow it. Record the figures in
# docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
tools/deps.sh >/dev/null
KOS_KUBE_BIN_DIR=$(tools/kube/build.sh)
export KOS_KUBE_BIN_DIR
go build -o .cache/bin/channels ./cmd/channels
export KOS_CHANNELS_BIN=$PWD/.cache/bin/channels
# Only the packages that hold benchmarks: the others would start servers for nothing.
pkgs=$(grep -rl --include='*_test.go' '^func Benchmark' . | xargs -n1 dirname | sort -u)
go test -run '^$' -bench "${BENCH:-.}" -benchtime "${BENCHTIME:-3x}" -benchmem $pkgs
