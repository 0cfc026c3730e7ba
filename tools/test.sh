#!/usr/bin/env bash
# test.sh is `make test`, what CI runs: it installs what the tests need on a
# bare machine and builds the servers they run (cached in .cache/), checks
# the tree (tools/verify.sh), then runs the lanes in order (tools/lanes.sh):
# unit, the fuzz targets, integration, and cluster, whose packages start
# nodes one at a time so that nothing else loads the machine under them.
# Every part runs even when one before it failed; the run ends with each
# part's time and result.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
# One compile serves go vet, the tests and the images the tests build (which
# are static and -trimpath, as released): with the same flags everywhere, the
# Go build cache holds each package once, which saves minutes on a cold run.
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath"

# The figures the tests measure are written down as data (tools/figures),
# one JSON line each, beside the run's other output.
mkdir -p _output
export KOS_FIGURES="$PWD/_output/figures.jsonl"
: >"$KOS_FIGURES"
# So are the runbooks' blocks the cluster tests run as the docs write them
# (tools/docrun): one JSON line per block, with its page and heading.
export KOS_DOCRUN="$PWD/_output/docrun.jsonl"
: >"$KOS_DOCRUN"

began=$(date +%s)
step() { printf '\n==> [%s] %s\n' "$(elapsed)" "$*"; }
elapsed() { local s=$(( $(date +%s) - began )); printf '%dm%02ds' $((s / 60)) $((s % 60)); }
# lap NAME CMD...: runs a part of the run to its end, records its time and
# result for the summary, and carries on when it fails, so that one run
# reports every lane.
status=0
laps=()
lap() {
	local name=$1 t0 rc=0
	shift
	t0=$(date +%s)
	"$@" || rc=$?
	local s=$(( $(date +%s) - t0 ))
	laps+=("$(printf '  %-20s %3dm%02ds  %s' "$name" $((s / 60)) $((s % 60)) "$([ $rc -eq 0 ] && echo passed || echo FAILED)")")
	[ $rc -eq 0 ] || status=1
}

step "installing system packages the tests need"
tools/deps.sh

step "building Kubernetes 1.37 (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy) and etcd 3.6.4 (tools/etcd, the one KOS ships) from the Go module proxy (cached in .cache/)"
KOS_KUBE_BIN_DIR=$(tools/kube/build.sh etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
export KOS_KUBE_BIN_DIR

step "building kOps's own channels command (v1.32.0), which the channels tests run against ours (cached in .cache/; the first build takes several minutes)"
KOS_KOPS_BIN_DIR=$(tools/kops/build.sh)
export KOS_KOPS_BIN_DIR

step "building Prometheus 3.16.0 and promtool, which the monitoring tests run and pack into the image the test cluster pulls in place of quay.io's (cached in .cache/; the first build takes 2-4 minutes)"
KOS_PROMETHEUS_BIN_DIR=$(tools/prometheus/build.sh)
export KOS_PROMETHEUS_BIN_DIR

step "building the S3-compatible test server (versitygw) (cached in .cache/)"
tools/versitygw/build.sh >/dev/null

step "building Multus's thin CNI plugin, which the test cluster's nodes run (cached in .cache/)"
tools/multus/build.sh >/dev/null

step "building kube-apiserver 1.29, which the addons' k8s-1.29 manifests are checked against (cached in .cache/)"
KOS_KUBE129_BIN_DIR=$(tools/kube129/build.sh)
export KOS_KUBE129_BIN_DIR

step "building kube-apiserver 1.30, the oldest minor of kos-apiserver's k8s-1.30 releases, which they are checked against (cached in .cache/)"
KOS_KUBE130_BIN_DIR=$(tools/kube130/build.sh)
export KOS_KUBE130_BIN_DIR

s=$(( $(date +%s) - began ))
laps+=("$(printf '  %-20s %3dm%02ds' "packages and builds" $((s / 60)) $((s % 60)))")

step "verifying the tree"
lap verify tools/verify.sh

step "unit lane (make unit): every test but TestIntegration*, no servers"
lap unit tools/lanes.sh unit

# A count, not a duration: with a duration, Go 1.26's fuzz coordinator can
# report its own deadline as a failure on a loaded machine
# (go.dev/issue/75804, fixed in Go 1.27); a count never races a clock.
step "fuzzing: every fuzz target for ${FUZZTIME:-5000x} (make fuzz runs them longer)"
lap fuzz env FUZZTIME="${FUZZTIME:-5000x}" tools/fuzz.sh

step "integration lane (make integration): control plane, kos-apiserver, S3, Open vSwitch"
lap integration tools/lanes.sh integration

step "cluster lane (make cluster): the packages that start nodes, one at a time"
lap cluster tools/lanes.sh cluster

# A release's range may reach the next minor only on the evidence of a run
# on its beta: the beta lane runs when some range reaches 1.38.
if grep -qE '^[[:space:]]*kubernetesVersion:.*<1\.39\.0' addons/*/addon.yaml; then
	step "beta lane: the pods test on Kubernetes 1.38.0-beta.0 nodes (tools/kube138, built with Go 1.27.3 for that build alone; cached in .cache/)"
	lap beta tools/lanes.sh beta
else
	step "beta lane: skipped, as no release's range reaches Kubernetes 1.38 (tools/lanes.sh beta runs it)"
fi

step "figures measured: $(wc -l <"$KOS_FIGURES") in _output/figures.jsonl (go run ./tools/figures/table _output/figures.jsonl)"
step "runbook blocks run as the docs write them: $(wc -l <"$KOS_DOCRUN") in _output/docrun.jsonl, under $(sed 's/,"line".*//' "$KOS_DOCRUN" | sort -u | wc -l) headings"

step "done: $([ "$status" -eq 0 ] && echo "every test passed" || echo "FAILED (see above)")"
printf '%s\n' "${laps[@]}"
exit "$status"
