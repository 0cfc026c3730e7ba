#!/usr/bin/env bash
# run.sh is `make demo`: it builds the binaries, starts a fresh local control
# plane, and runs the demo: installing and upgrading addons from a channel
# served over HTTPS, then the KOS SDN on two simulated nodes with a ping
# across the VXLAN overlay; then, on a real three-node cluster of its own
# with a registry (tools/demo/cluster.sh), KOS as an operator runs it:
# images pushed, a release written for the registry, KOS 0.1.0 installed
# from its channel, guests on the three nodes pinging each other, and the
# 0.2.0 channel applied while the pings go on, with what they measured;
# then 0.3.0, and pods on the three nodes talking over a KOS network;
# then 0.4.0, rendered from an operator's configuration file, applied live,
# and a MultiNetworkPolicy denying, then allowing, a connection between pods.
# Everything keeps running afterwards; `make demo-down` stops it all.
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOTOOLCHAIN=local

echo "==> Installing the system packages the demo uses (Open vSwitch, iproute2, ping)"
tools/deps.sh

echo "==> Building channels, kos-apiserver, kos-controller-manager and kos-agent"
go build -o .cache/bin/ ./cmd/...

echo "==> Starting a fresh local control plane (etcd and kube-apiserver, built from the Go module proxy on first use)"
# The story starts from an empty cluster, so a previous demo's is removed.
tools/demo/down.sh --purge >/dev/null
go run ./tools/localenv up

go run ./tools/demo

echo
echo "==> Part three: KOS on a real three-node cluster from a registry, installed at 0.1.0 with channels, upgraded live to 0.2.0, then 0.3.0 with pods on KOS networks talking across nodes, then 0.4.0 rendered from a configuration file, with a MultiNetworkPolicy"
tools/demo/cluster.sh
