#!/usr/bin/env bash
# down.sh is `make demo-down`: it stops what the demo started: the three-node
# cluster of part three (tools/demo/cluster-down.sh), the SDN parts of part
# two (Open vSwitch instances, network namespaces) and then the local control
# plane with every process it runs. Arguments go to `localenv down`
# (--purge also deletes its folder).
set -euo pipefail
cd "$(dirname "$0")/../.."
export GOTOOLCHAIN=local
tools/demo/cluster-down.sh "$@"
go run ./tools/demo down
go run ./tools/localenv down "$@"
