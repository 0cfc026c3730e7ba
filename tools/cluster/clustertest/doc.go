// Package clustertest tests tools/cluster's single-node cluster:
// kube-controller-manager, kube-scheduler and a kubelet with containerd in a
// network namespace of its own, running pods of locally built images. It is a
// package of its own so that only its tests pay for the cluster.
package clustertest
