#!/usr/bin/env bash
# build.sh builds kOps's own `channels` command from the Go module proxy, and
# caches it by version so only the first run pays. The channels tests run it
# against KOS's channels in both directions.
#
#   tools/kops/build.sh
#
# The version is the k8s.io/kops that this folder's go.mod requires (v1.32.0:
# the newest the proxy serves here; later releases keep the same apply and
# managed-fields code). The binary lands in $KOS_CACHE/kops/<version>/channels
# (KOS_CACHE defaults to .cache at the repository root, which git ignores). The
# script prints that folder on stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/tools/gobuild.sh"
version=$(required_version "$here/go.mod" k8s.io/kops)
[ -n "$version" ] || { echo "build.sh: $here/go.mod requires no k8s.io/kops; restore it from git" >&2; exit 2; }
out=${KOS_CACHE:-$root/.cache}/kops/$version
mkdir -p "$out"
cd "$here"
lock_build "$out"
build_cached "$out" channels "kOps channels $version" k8s.io/kops/channels/cmd/channels "-s -w"
echo "$out"
