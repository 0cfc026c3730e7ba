#!/usr/bin/env bash
# bench.sh is `make bench`: it runs every Go benchmark of the module against
# real servers the benchmarks start themselves, each with the -benchtime and
# flags that docs/benchmarks.md names for its figures (the scale benchmarks
# run their experiment once: -benchtime 1x). BENCH (an extended regular
# expression) keeps only the lines whose benchmark names match it, such as
# BENCH='IPAMBound|Agents$'; BENCHTIME overrides every line's -benchtime.
#
# Every result's metrics are also written down as data (tools/figures), one
# JSON line per metric, in $KOS_FIGURES (by default _output/bench.jsonl).
# To cite them in docs/benchmarks.md, append the file to
# docs/figures/bench.jsonl and make the page's tables of figures again:
# go run ./tools/figures/doc -write docs/benchmarks.md (make verify checks
# that they match).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
mkdir -p _output
export KOS_FIGURES=${KOS_FIGURES:-$PWD/_output/bench.jsonl}
figures_bin=$(mktemp -d)
trap 'rm -rf "$figures_bin"' EXIT
go build -o "$figures_bin/bench-figures" ./tools/figures/bench
tools/deps.sh >/dev/null
KOS_KUBE_BIN_DIR=$(tools/kube/build.sh)
export KOS_KUBE_BIN_DIR
go build -o .cache/bin/channels ./cmd/channels
export KOS_CHANNELS_BIN=$PWD/.cache/bin/channels

# package, -bench pattern, -benchtime, more flags (timeout, benchmark flags)
benchmarks='
./tools/bench ^(BenchmarkColdInstall|BenchmarkNoOp|BenchmarkUpgradePrune|BenchmarkReadyInstall|BenchmarkNoOpRequests)$ 3x
./tools/bench ^BenchmarkVersusKubectl$ 3x -timeout 20m
./tools/bench ^BenchmarkDriftPass$ 20x
./tools/bench ^BenchmarkDaemonRSS$ 1x -timeout 30m
./channels/diff ^BenchmarkUnified$ 1s
./components/apiserver ^(BenchmarkAttachmentCreate|BenchmarkAttachmentList)$ 2000x
./components/fabric/ovs ^BenchmarkRemoteAttachments$ 3x
./components/fabric/ovs ^BenchmarkPolicyScale$ 3x
./components/controllermanager ^BenchmarkIPAMBound$ 1x -timeout 40m
./components/controllermanager ^BenchmarkIPAM$ 1x -timeout 40m
./components/agent ^BenchmarkAgents$ 1x -timeout 60m -agent.agents 100 -agent.attachments 1000 -agent.rate 50
./components/agent ^BenchmarkAgentMemory$ 1x -agent.relevant 1000
./components/agent ^BenchmarkCNIAdd$ 50x
'
status=0
while read -r pkg pattern benchtime flags; do
	[[ -n $pkg ]] || continue
	# The benchmarks the line runs, by name, for BENCH to match.
	names=$(tr -d '^$()' <<<"$pattern" | tr '|' '\n')
	if [[ -n ${BENCH:-} ]] && ! grep -Eq -- "$BENCH" <<<"$names"; then
		continue
	fi
	# shellcheck disable=SC2086 # flags are words
	go test "$pkg" -run '^$' -bench "$pattern" -benchtime "${BENCHTIME:-$benchtime}" -benchmem $flags |
		"$figures_bin/bench-figures" || status=1
done <<<"$benchmarks"
echo "==> figures: $(wc -l <"$KOS_FIGURES") in $KOS_FIGURES (go run ./tools/figures/table $KOS_FIGURES)"
exit $status
