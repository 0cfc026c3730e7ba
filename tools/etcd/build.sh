#!/usr/bin/env bash
# build.sh builds etcd at the version this folder's module pins (3.6.4, the
# etcd KOS ships in its kos-etcd image), from the Go module proxy, and caches
# it by version so only the first run pays (about 2 minutes on 2 cores).
#
#   tools/etcd/build.sh
#
# The binary lands in $KOS_CACHE/etcd/<version>/etcd (KOS_CACHE defaults to
# .cache at the repository root, which git ignores). The script prints that
# folder on stdout. tools/kube/build.sh takes its etcd from here when its
# module pins none.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/tools/gobuild.sh"
version=$(required_version "$here/go.mod" go.etcd.io/etcd/server/v3)
[ -n "$version" ] || { echo "build.sh: $here/go.mod requires no etcd server; restore it from git" >&2; exit 2; }
out=${KOS_CACHE:-$root/.cache}/etcd/$version
mkdir -p "$out"
cd "$here"
lock_build "$out"
build_cached "$out" etcd "etcd ($version)" go.etcd.io/etcd/server/v3 "-s -w"
echo "$out"
