#!/usr/bin/env bash
# build.sh builds Prometheus from the Go module proxy, static (CGO_ENABLED=0),
# and caches it by version so only the first run pays. kos-monitoring's
# manifest runs quay.io/prometheus/prometheus; the test cluster cannot pull
# it, so tools/kosimages/catalog packs this build into the image it pushes
# instead. Debian's package will not do: it is built without Kubernetes
# service discovery, which the manifest's configuration uses.
#
#   tools/prometheus/build.sh
#
# The version is the github.com/prometheus/prometheus that this folder's
# go.mod requires (v0.53.3, the module version of Prometheus 2.53.3, which the
# manifest names); go.mod repeats the replace and exclude lines of Prometheus's
# own go.mod, which hold only in the main module. `prometheus --version` says
# the version in the module's VERSION file, as upstream's release build does.
# The binary lands in $KOS_CACHE/prometheus/<version>/prometheus (KOS_CACHE
# defaults to .cache at the repository root, which git ignores). The script
# prints that folder on stdout.
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
if [ ! -x "$out/prometheus" ]; then
  dir=$(GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod download -json "$module" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  release=$(cat "$dir/VERSION")
  v=github.com/prometheus/common/version
  build_cached "$out" prometheus "Prometheus $release" "$module/cmd/prometheus" \
    "-s -w -X $v.Version=$release -X $v.Revision=$module@$version -X $v.Branch=HEAD -X $v.BuildUser=tools/prometheus"
fi
echo "$out"
