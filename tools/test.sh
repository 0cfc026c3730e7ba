#!/usr/bin/env bash
# test.sh is `make test`: it installs what the tests need on a bare machine,
# checks the tree (tools/verify.sh), then runs the unit and integration tests
# against real servers that the tests start themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local

step() { printf '\n==> %s\n' "$*"; }

step "installing system packages the tests need"
tools/deps.sh

step "building Kubernetes 1.37 (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy) and etcd 3.6.4 (tools/etcd, the one KOS ships) from the Go module proxy (cached in .cache/)"
KOS_KUBE_BIN_DIR=$(tools/kube/build.sh etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
export KOS_KUBE_BIN_DIR

step "building kube-apiserver 1.29, which the addons' k8s-1.29 manifests are checked against (cached in .cache/)"
KOS_KUBE129_BIN_DIR=$(tools/kube129/build.sh)
export KOS_KUBE129_BIN_DIR

step "building kube-apiserver 1.30, the oldest minor of kos-apiserver's k8s-1.30 releases, which they are checked against (cached in .cache/)"
KOS_KUBE130_BIN_DIR=$(tools/kube130/build.sh)
export KOS_KUBE130_BIN_DIR

step "building kOps's own channels command (v1.32.0), which the channels tests run against ours (cached in .cache/; the first build takes several minutes)"
KOS_KOPS_BIN_DIR=$(tools/kops/build.sh)
export KOS_KOPS_BIN_DIR

step "building the S3-compatible test server (versitygw) (cached in .cache/)"
tools/versitygw/build.sh >/dev/null

step "verifying the tree"
tools/verify.sh

# A count, not a duration: with a duration, Go 1.26's fuzz coordinator can
# report its own deadline as a failure on a loaded machine
# (go.dev/issue/75804, fixed in Go 1.27); a count never races a clock.
step "fuzzing: every fuzz target for ${FUZZTIME:-5000x} (make fuzz runs them longer)"
FUZZTIME=${FUZZTIME:-5000x} tools/fuzz.sh

step "running unit and integration tests"
go test -count=1 -timeout 40m ${GOTEST_FLAGS:-} ./...
