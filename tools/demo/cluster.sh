#!/usr/bin/env bash
# cluster.sh is `make demo-cluster`: the whole product as an operator of a
# real cluster installs it. It builds the binaries, starts a fresh local
# cluster of three nodes (kubelet and containerd on each, no Open vSwitch
# installed) with a registry the nodes pull from, and runs `demo cluster`:
# the KOS images pushed to the registry, a release written for it, the
# standard releases (three etcd members on local volumes, two kos-apiservers,
# two controller managers, an agent with its own Open vSwitch on every node)
# installed from its channels, and two attachments on two nodes pinging each
# other across the VXLAN overlay. Everything keeps running afterwards; `make
# demo-cluster-down` stops it.
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOTOOLCHAIN=local
dir=.cache/localenv-cluster

echo "==> Installing the system packages the demo uses (Open vSwitch, iproute2, ping, docker-registry)"
tools/deps.sh

echo "==> Building channels, kos-apiserver, kos-controller-manager and kos-agent"
go build -o .cache/bin/ ./cmd/...

echo "==> Starting a fresh local cluster in $dir (etcd, kube-apiserver, controller manager, scheduler, a registry, and three nodes with kubelet and containerd)"
# The story starts from an empty cluster, so a previous run's is removed.
go run ./tools/demo --env-dir "$dir" cluster-down --purge >/dev/null
go run ./tools/localenv --dir "$dir" up --cluster --nodes 3 --node-ovs=false --registry

go run ./tools/demo --env-dir "$dir" cluster
