#!/usr/bin/env bash
# build.sh builds the control-plane binaries the tests and the demo run, from the
# Go module proxy, and caches them by version so only the first run pays.
#
#   tools/kube/build.sh [--module DIR] [--toolchain GO] [BINARY...]
#                                               (default: etcd kube-apiserver)
#
# The versions are those the module in DIR requires (default: this folder's,
# Kubernetes 1.37; tools/kube129 and tools/kube130 hold ones for 1.29 and
# 1.30, for the addon checks; tools/kube138 the next minor's beta). GO is
# the go command's GOTOOLCHAIN for these builds alone (default local; 1.38
# needs go1.27.3). etcd is the one KOS ships (tools/etcd/build.sh, 3.6.4),
# copied in: Kubernetes 1.37 and 1.38 require etcd 3.7, which KOS does not
# ship, and 1.29 and 1.30 run on 3.6 as well as on their own 3.5. Binaries
# land in $KOS_CACHE/kube/<version>/ (KOS_CACHE defaults to .cache at the
# repository root, which git ignores). The script prints that folder on stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/tools/gobuild.sh"
if [ "${1:-}" = --module ]; then
  here=$(cd "$2" && pwd)
  shift 2
fi
toolchain=local
if [ "${1:-}" = --toolchain ]; then
  toolchain=$2
  shift 2
fi
version=$(required_version "$here/go.mod" k8s.io/kubernetes)
[ -n "$version" ] || { echo "build.sh: $here/go.mod requires no k8s.io/kubernetes; restore it from git" >&2; exit 2; }
out=${KOS_CACHE:-$root/.cache}/kube/$version
mkdir -p "$out"

bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(etcd kube-apiserver)

major=${version#v}; major=${major%%.*}
minor=${version#v*.}; minor=${minor%%.*}
kube_ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=$version \
 -X k8s.io/component-base/version.gitMajor=$major \
 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$version \
 -X k8s.io/client-go/pkg/version.gitMajor=$major \
 -X k8s.io/client-go/pkg/version.gitMinor=$minor"

cd "$here"

lock_build "$out"
for bin in "${bins[@]}"; do
  if [ "$bin" = etcd ]; then
    # Copied, not linked, so that the folder stands alone; checked on every
    # run, so that a folder made when a module built its own etcd gets the
    # one KOS ships.
    etcd=$("$root/tools/etcd/build.sh")/etcd
    if ! cmp -s "$etcd" "$out/etcd"; then
      cp "$etcd" "$out/etcd.tmp"
      mv "$out/etcd.tmp" "$out/etcd"
    fi
    continue
  fi
  case "$bin" in
    kube-apiserver|kube-controller-manager|kube-scheduler|kube-proxy|kubelet|kubectl)
      pkg=k8s.io/kubernetes/cmd/$bin; ldflags=$kube_ldflags ;;
    *) echo "build.sh: unknown binary $bin (known: etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl)" >&2; exit 2 ;;
  esac
  build_cached "$out" "$bin" "$bin ($version)" "$pkg" "$ldflags" "$toolchain"
done
echo "$out"
