#!/usr/bin/env bash
# build.sh builds Multus's thin CNI plugin (`multus`, the meta-plugin that runs
# the node's primary CNI and then the plugins a pod's
# k8s.v1.cni.cncf.io/networks annotation names) from the Go module proxy, and
# caches it by version so only the first run pays. The test cluster's nodes
# run it in front of their primary CNI.
#
#   tools/multus/build.sh
#
# The version is the gopkg.in/k8snetworkplumbingwg/multus-cni.v4 that this
# folder's go.mod requires (v4.2.4; its go.mod has no replace lines to mirror).
# The binary lands in $KOS_CACHE/multus/<version>/multus (KOS_CACHE defaults to
# .cache at the repository root, which git ignores). The script prints that
# folder on stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/tools/gobuild.sh"
module=gopkg.in/k8snetworkplumbingwg/multus-cni.v4
version=$(required_version "$here/go.mod" "$module")
[ -n "$version" ] || { echo "build.sh: $here/go.mod requires no $module; restore it from git" >&2; exit 2; }
out=${KOS_CACHE:-$root/.cache}/multus/$version
mkdir -p "$out"
cd "$here"
lock_build "$out"
# `multus --version` reports the version, as upstream's hack/build-go.sh sets it.
build_cached "$out" multus "Multus thin plugin $version" "$module/cmd/multus" \
  "-s -w -X $module/pkg/multus.version=$version"
echo "$out"
