#!/usr/bin/env bash
# build.sh builds the Kubernetes 1.38 beta (v1.38.0-beta.0) from the Go
# module proxy, with tools/kube/build.sh and this folder's module, so that
# KOS is tested on the next minor before it ships: kube-apiserver for the
# addon checks of releases whose range reaches 1.38 (tools/addons/apicheck),
# and with kube-controller-manager, kube-scheduler, kubelet and kube-proxy a
# whole cluster (tools/cluster, with KOS_KUBE_BIN_DIR set to the folder).
# Kubernetes 1.38 requires Go 1.27: these builds alone run with
# GOTOOLCHAIN=go1.27.3, which the go command fetches from the module proxy
# (about 76 MB, once); the KOS module stays on Go 1.26. As the module pins
# no etcd, the etcd beside the binaries is the one KOS ships (tools/etcd).
#
#   tools/kube138/build.sh [BINARY...]     (default: etcd kube-apiserver)
#
# It prints the folder of the binaries, as tools/kube/build.sh does.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -gt 0 ] || set -- etcd kube-apiserver
exec "$here/../kube/build.sh" --module "$here" --toolchain go1.27.3 "$@"
