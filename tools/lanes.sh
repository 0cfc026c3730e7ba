#!/usr/bin/env bash
# lanes.sh runs one test lane: `make unit`, `make integration` or `make
# cluster` (tools/lanes.sh unit|integration|cluster). make test runs the
# three in that order, after the builds they need.
#
#   unit         every test but TestIntegration*, in every package: no
#                server, no node, nothing changed on the host (seconds to a
#                minute once compiled).
#   integration  TestIntegration* outside the cluster packages: a control
#                plane, kos-apiserver, S3, Open vSwitch and network
#                namespaces, all on loopback or in namespaces the tests make.
#   cluster      TestIntegration* of the cluster packages, which start nodes
#                (containerd, kubelet), one package at a time, so that a
#                cluster's test has the host to itself.
#   beta         the cluster tests $BETA_TESTS (default: the pods test) once
#                more, on the next minor's beta: Kubernetes 1.38.0-beta.0
#                (tools/kube138) for the control plane and the nodes. It
#                needs a release whose range reaches 1.38; the tests refuse
#                loudly when there is none.
#
# Each lane sets $KOS_TEST_LANE, and the helpers that start servers (tools/
# testenv, ovsenv, registry) or nodes (tools/cluster) refuse to in a lane
# below theirs (tools/lane): a unit test that starts etcd fails, it does not
# slow the lane down unseen.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN=local

# The packages whose tests start nodes.
cluster_packages=(./tools/cluster/clustertest ./tools/e2e)

lane=${1:-}
case $lane in
unit | integration | cluster | beta) ;;
*)
	echo "usage: tools/lanes.sh unit|integration|cluster|beta" >&2
	exit 2
	;;
esac
export KOS_TEST_LANE=$lane
[ "$lane" != beta ] || KOS_TEST_LANE=cluster

# The test programs of the unit and integration lanes share the commands
# they build (tools/testenv.Build): each is linked once a lane, not once a
# package; kos-apiserver alone was linked by ten packages.
if [ "$lane" = unit ] || [ "$lane" = integration ]; then
	KOS_TEST_BUILDS=$(mktemp -d "${TMPDIR:-/tmp}/kos-test-builds.XXXXXX")
	export KOS_TEST_BUILDS
	trap 'rm -rf "$KOS_TEST_BUILDS"' EXIT
fi

# The cluster lanes' nodes, registries and kos-etcd members write and
# fsync under $TMPDIR. In CI the cluster lane ran 1.4x slower than here
# while the other lanes did not, and importing the pause image, mostly
# disk work, took 1.2 s against 0.4 s: a slow fsync is the likeliest cause.
# So the lane puts $TMPDIR on a tmpfs of its own, where fsync costs
# nothing, and takes it down at the end. KOS_LANE_TMPFS=0 keeps $TMPDIR;
# KOS_LANE_TMPFS_SIZE caps the tmpfs (12g; a whole lane used at most
# 3.1 GB here). The folder's name is short: socket paths under it must fit
# in 104 bytes (containerd's limit).
if [ "$lane" = cluster ] || [ "$lane" = beta ]; then
	if [ "${KOS_LANE_TMPFS:-1}" != 0 ]; then
		lane_tmp=$(mktemp -d /tmp/kXXXX)
		if mount -t tmpfs -o "size=${KOS_LANE_TMPFS_SIZE:-12g},mode=1777" kos-lane "$lane_tmp"; then
			trap 'umount -l "$lane_tmp" && rmdir "$lane_tmp"' EXIT
			export TMPDIR=$lane_tmp
			echo "==> $lane lane: TMPDIR is $lane_tmp, a tmpfs of ${KOS_LANE_TMPFS_SIZE:-12g} (KOS_LANE_TMPFS=0 keeps yours)"
		else
			rmdir "$lane_tmp"
			echo "==> $lane lane: could not mount a tmpfs (not root?); TMPDIR stays ${TMPDIR:-/tmp}" >&2
		fi
	fi
fi

began=$(date +%s)
status=0
case $lane in
unit)
	go test -count=1 -skip '^TestIntegration' ${GOTEST_FLAGS:-} ./... || status=1
	;;
integration)
	mapfile -t packages < <(go list ./... | grep -vxF -f <(go list "${cluster_packages[@]}"))
	go test -count=1 -timeout 60m -run '^TestIntegration' ${GOTEST_FLAGS:-} "${packages[@]}" || status=1
	;;
cluster)
	# One package at a time, each to the end even when one fails. The
	# timeout is past CI's whole budget: ./tools/e2e took 53 minutes in a
	# CI run, and a go test timeout prints a panic, not the failing step.
	# Nodes of another program (a demo left running, a local environment)
	# share the host with the lane's: its tests pass beside them, slower,
	# and the host checks cannot see the last node out restore the host.
	if [ -s /tmp/kos-testenv-host.json ]; then
		echo "==> cluster lane: nodes of another program run on this host; the tests share it with them (make demo-down stops a demo's):" >&2
		grep -o '"nodeDir": *"[^"]*"' /tmp/kos-testenv-host.json | sed 's/.*: *"\(.*\)"/    \1/' >&2 || true
	fi
	for p in "${cluster_packages[@]}"; do
		echo "==> cluster lane: $p"
		go test -count=1 -timeout 85m -run '^TestIntegration' ${GOTEST_FLAGS:-} "$p" || status=1
	done
	;;
beta)
	# tools/testenv and tools/cluster take every Kubernetes binary from
	# $KOS_KUBE_BIN_DIR; the etcd beside them is the one KOS ships.
	if KOS_KUBE_BIN_DIR=$(tools/kube138/build.sh etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy); then
		export KOS_KUBE_BIN_DIR
		go test -count=1 -timeout 60m -run "${BETA_TESTS:-^TestIntegrationPods\$}" ${GOTEST_FLAGS:-} ./tools/e2e || status=1
	else
		echo "==> beta lane: building Kubernetes 1.38.0-beta.0 failed (tools/kube138/build.sh)" >&2
		status=1
	fi
	;;
esac
s=$(($(date +%s) - began))
printf '==> %s lane: %s in %dm%02ds\n' "$lane" "$([ $status -eq 0 ] && echo passed || echo FAILED)" $((s / 60)) $((s % 60))
exit $status
