#!/usr/bin/env bash
# test.sh is `make test`: it installs what the tests need on a bare machine,
# checks the tree (tools/verify.sh), then runs the unit and integration tests
# against real servers that the tests start themselves.
#
# The cluster end-to-end tests (tools/e2e, 10 to 15 minutes) start as soon as
# what they run is built, and run beside the remaining builds, the checks and
# the other tests: they spend much of their time waiting on clusters, and
# this keeps a cold run well under an hour on two cores. Their output is
# printed when they end (and is in the log named when they start).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local
# One compile serves go vet, the tests and the images the tests build (which
# are static and -trimpath, as released): with the same flags everywhere, the
# Go build cache holds each package once, which saves minutes on a cold run.
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath"

began=$(date +%s)
step() { printf '\n==> [%s] %s\n' "$(elapsed)" "$*"; }
elapsed() { local s=$(( $(date +%s) - began )); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

step "installing system packages the tests need"
tools/deps.sh

step "building Kubernetes 1.37 (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy) and etcd 3.6.4 (tools/etcd, the one KOS ships) from the Go module proxy (cached in .cache/)"
KOS_KUBE_BIN_DIR=$(tools/kube/build.sh etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
export KOS_KUBE_BIN_DIR

step "building kOps's own channels command (v1.32.0), which the channels tests run against ours (cached in .cache/; the first build takes several minutes)"
KOS_KOPS_BIN_DIR=$(tools/kops/build.sh)
export KOS_KOPS_BIN_DIR

step "building the S3-compatible test server (versitygw) (cached in .cache/)"
tools/versitygw/build.sh >/dev/null

e2e_log=$(mktemp "${TMPDIR:-/tmp}/kos-e2e.XXXXXX.log")
step "starting the cluster end-to-end tests (./tools/e2e) in the background; their output goes to $e2e_log"
# Its own process group, so that an early exit stops the clusters' tests too.
setsid go test -count=1 -timeout 40m ${GOTEST_FLAGS:-} ./tools/e2e >"$e2e_log" 2>&1 &
e2e_pid=$!
e2e_done=
trap '[ -n "$e2e_done" ] || kill -INT -- "-$e2e_pid" 2>/dev/null || true' EXIT

step "building kube-apiserver 1.29, which the addons' k8s-1.29 manifests are checked against (cached in .cache/)"
KOS_KUBE129_BIN_DIR=$(tools/kube129/build.sh)
export KOS_KUBE129_BIN_DIR

step "building kube-apiserver 1.30, the oldest minor of kos-apiserver's k8s-1.30 releases, which they are checked against (cached in .cache/)"
KOS_KUBE130_BIN_DIR=$(tools/kube130/build.sh)
export KOS_KUBE130_BIN_DIR

step "verifying the tree"
tools/verify.sh

# A count, not a duration: with a duration, Go 1.26's fuzz coordinator can
# report its own deadline as a failure on a loaded machine
# (go.dev/issue/75804, fixed in Go 1.27); a count never races a clock.
step "fuzzing: every fuzz target for ${FUZZTIME:-5000x} (make fuzz runs them longer)"
FUZZTIME=${FUZZTIME:-5000x} tools/fuzz.sh

step "running unit and integration tests (all but ./tools/e2e)"
mapfile -t packages < <(go list ./... | grep -vx "$(go list -m)/tools/e2e")
status=0
go test -count=1 -timeout 40m ${GOTEST_FLAGS:-} "${packages[@]}" || status=1

step "waiting for the cluster end-to-end tests"
e2e_status=0
wait "$e2e_pid" || e2e_status=$?
e2e_done=1
cat "$e2e_log"
rm -f "$e2e_log"
[ "$e2e_status" -eq 0 ] || status=1

step "done: $([ "$status" -eq 0 ] && echo "every test passed" || echo "FAILED (see above)")"
exit "$status"
