#!/usr/bin/env bash
# deps.sh installs the Debian packages the tests and the demo use, when they
# are missing. Everything else (etcd, kube-apiserver, versitygw) is built from
# the Go module proxy by the build scripts under tools/.
set -euo pipefail

# Command (or absolute path) → Debian package providing it.
declare -A wanted=(
  [ovs-vswitchd]=openvswitch-switch # the node agent's fabric tests (userspace datapath)
  [ip]=iproute2                     # network namespaces for simulated nodes
  [ping]=iputils-ping               # the demo pings across the overlay
  [containerd]=containerd           # the single-node cluster's container runtime
  [runc]=runc                       # ... and its OCI runtime
  [/usr/lib/cni/bridge]=containernetworking-plugins # ... and its CNI plugins
  [docker-registry]=docker-registry # the OCI registry nodes pull KOS images from (tools/registry)
)

missing=()
for cmd in "${!wanted[@]}"; do
  if [[ $cmd == /* ]]; then
    [ -e "$cmd" ] || missing+=("${wanted[$cmd]}")
  else
    command -v "$cmd" >/dev/null 2>&1 || missing+=("${wanted[$cmd]}")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "system packages: all present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "deps.sh: missing packages ${missing[*]}; install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
