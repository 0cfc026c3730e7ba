#!/usr/bin/env bash
# build.sh builds Prometheus and promtool from the Go module proxy, static
# (CGO_ENABLED=0), and caches them by version so only the first run pays.
# kos-monitoring's manifest runs quay.io/prometheus/prometheus; the test
# cluster cannot pull it, so tools/kosimages/catalog packs this build into
# the image it pushes instead, and tools/monitoring tests the shipped rules
# with this promtool. Debian's package will not do: it is 2.42, built without
# Kubernetes service discovery, which the manifest's configuration uses.
#
#   tools/prometheus/build.sh
#
# The version is the github.com/prometheus/prometheus that this folder's
# go.mod requires (v0.316.0, the module version of Prometheus 3.16.0, which
# the manifest names). Prometheus 3 leaves out service discovery plugins by
# build tag: remove_all_sd,enable_kubernetes_sd keeps only Kubernetes's,
# the only one the manifest uses, and cuts the cold build to about 2.5
# minutes on two cores (2.53.3 with every plugin took over 17 at load 30).
# The web UI's assets are not built in (no builtinassets tag): the tests
# read the HTTP API only. `prometheus --version` says the module's VERSION
# file, as upstream's release build does. The binaries land in
# $KOS_CACHE/prometheus/<version>/ (KOS_CACHE defaults to .cache at the
# repository root, which git ignores). The script prints that folder on
# stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/tools/gobuild.sh"
module=github.com/prometheus/prometheus
version=$(required_version "$here/go.mod" "$module")
[ -n "$version" ] || { echo "build.sh: $here/go.mod requires no $module; restore it from git" >&2; exit 2; }
out=${KOS_CACHE:-$root/.cache}/prometheus/$version
mkdir -p "$out"
cd "$here"
lock_build "$out"
if [ ! -x "$out/prometheus" ] || [ ! -x "$out/promtool" ]; then
  dir=$(GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod download -json "$module" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  release=$(cat "$dir/VERSION")
  v=github.com/prometheus/common/version
  ldflags="-s -w -X $v.Version=$release -X $v.Revision=$module@$version -X $v.Branch=HEAD -X $v.BuildUser=tools/prometheus"
  export BUILD_TAGS=remove_all_sd,enable_kubernetes_sd
  build_cached "$out" prometheus "Prometheus $release" "$module/cmd/prometheus" "$ldflags"
  build_cached "$out" promtool "promtool $release" "$module/cmd/promtool" "$ldflags"
fi
echo "$out"
