#!/usr/bin/env bash
# build.sh builds kube-apiserver 1.29 from the Go module proxy, with
# tools/kube/build.sh and this folder's module; as the module pins no etcd,
# the etcd beside it is the one KOS ships (tools/etcd). The addon tests check
# the addons' k8s-1.29 manifests against this server. It prints the folder of
# the binaries, as tools/kube/build.sh does.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../kube/build.sh" --module "$here" etcd kube-apiserver
