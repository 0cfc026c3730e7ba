#!/usr/bin/env bash
# cluster.sh is `make demo-cluster`: KOS installed and upgraded live, as an
# operator of a real cluster does it. It builds the binaries, starts a fresh
# local cluster of three nodes (kubelet, containerd and Open vSwitch on each)
# with a registry the nodes pull from, and runs `demo cluster`: the images
# of KOS 0.1.0 (built from the commit of that release) and 0.2.0 pushed, a
# release written for the registry, KOS 0.1.0 installed from its channel
# (three etcd members on local volumes, two kos-apiservers, two controller
# managers, an agent programming each node's Open vSwitch), a guest on each
# node pinging the next across the VXLAN overlay, and the 0.2.0 channel
# applied with the pings going: it prints them every second, then the
# longest gap, the pings lost, and whether the subnets and attachments kept
# their objects and addresses. Then 0.3.0's images (built at its commit)
# are pushed, the 0.3.0 channel applied under the traffic of pods on each
# node, and pods with an interface on a KOS subnet through Multus ping each
# other and move 64 MiB across the nodes. Last, today's images are pushed,
# 0.4.0 rendered from an operator's configuration file with kos-release
# and applied under the same traffic, and a MultiNetworkPolicy denies, then
# allows, a TCP connection between pods on two nodes.
# Everything keeps running afterwards; `make demo-cluster-down` stops it.
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOTOOLCHAIN=local
dir=.cache/localenv-cluster

echo "==> Installing the system packages the demo uses (Open vSwitch, iproute2, ping, docker-registry)"
tools/deps.sh

echo "==> Building channels, kos-apiserver, kos-controller-manager and kos-agent"
go build -o .cache/bin/ ./cmd/...

echo "==> Starting a fresh local cluster in $dir (etcd, kube-apiserver, controller manager, scheduler, a registry, and three nodes with kubelet, containerd, Open vSwitch and Multus)"
# The story starts from an empty cluster, so a previous run's is removed.
go run ./tools/demo --env-dir "$dir" cluster-down --purge >/dev/null
go run ./tools/localenv --dir "$dir" up --cluster --nodes 3 --registry --multus

go run ./tools/demo --env-dir "$dir" cluster
