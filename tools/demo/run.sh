#!/usr/bin/env bash
# run.sh is `make demo`: it starts a fresh local control plane, builds the
# channels CLI, and walks through installing and upgrading addons from a
# channel served over HTTPS. The control plane keeps
# running afterwards; `make demo-down` stops it.
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOTOOLCHAIN=local

echo "==> Building the channels CLI"
go build -o .cache/bin/channels ./cmd/channels

echo "==> Starting a fresh local control plane (etcd and kube-apiserver, built from the Go module proxy on first use)"
# The story starts from an empty cluster, so a previous demo's one is removed.
go run ./tools/localenv down --purge >/dev/null
go run ./tools/localenv up

go run ./tools/demo --kubeconfig .cache/localenv/kubeconfig --channels .cache/bin/channels
