#!/usr/bin/env bash
# cluster.sh is `make demo-cluster`: the whole product on a real single-node
# cluster. It builds the binaries, starts a fresh local cluster (kubelet and
# containerd on a node with an Open vSwitch of its own), and runs
# `demo cluster`: the KOS images built and imported, KOS installed from its
# channels, a subnet and two attachments pinging each other, and an upgrade
# that prunes. Everything keeps running afterwards; `make demo-cluster-down`
# stops it.
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOTOOLCHAIN=local
dir=.cache/localenv-cluster

echo "==> Installing the system packages the demo uses (Open vSwitch, iproute2, ping)"
tools/deps.sh

echo "==> Building channels, kos-apiserver, kos-controller-manager and kos-agent"
go build -o .cache/bin/ ./cmd/...

echo "==> Starting a fresh local cluster in $dir (etcd, kube-apiserver, controller manager, scheduler, and a node with kubelet, containerd and Open vSwitch)"
# The story starts from an empty cluster, so a previous run's is removed.
go run ./tools/demo --env-dir "$dir" cluster-down --purge >/dev/null
go run ./tools/localenv --dir "$dir" up --cluster --node-ovs

go run ./tools/demo --env-dir "$dir" cluster
