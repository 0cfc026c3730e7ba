#!/usr/bin/env bash
# build.sh builds versitygw, the S3-compatible server the tests run, from the Go
# module proxy, and caches it by version so only the first run pays.
#
#   tools/versitygw/build.sh
#
# The binary lands in $KOS_CACHE/versitygw/<version>/ (KOS_CACHE defaults to
# .cache at the repository root, which git ignores). The script prints that
# folder on stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/tools/gobuild.sh"
version=$(required_version "$here/go.mod" github.com/versity/versitygw)
[ -n "$version" ] || { echo "build.sh: $here/go.mod requires no github.com/versity/versitygw; restore it from git" >&2; exit 2; }
out=${KOS_CACHE:-$root/.cache}/versitygw/$version
mkdir -p "$out"
cd "$here"
lock_build "$out"
build_cached "$out" versitygw "versitygw $version" github.com/versity/versitygw/cmd/versitygw "-s -w"
echo "$out"
