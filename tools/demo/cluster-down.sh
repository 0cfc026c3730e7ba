#!/usr/bin/env bash
# cluster-down.sh is `make demo-cluster-down`: it stops what `make
# demo-cluster` started: the guest namespaces, the cluster with every process
# it runs (localenv down), and gives back the host paths lent to the node.
# Arguments go to `localenv down` (--purge also deletes its folder).
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOTOOLCHAIN=local
go run ./tools/demo --env-dir .cache/localenv-cluster cluster-down "$@"
