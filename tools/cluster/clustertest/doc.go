// Package clustertest tests tools/cluster's clusters: one node with
// kube-controller-manager, kube-scheduler and a kubelet with containerd in
// namespaces of its own, running pods of locally built images; and three
// nodes on one underlay, whose private paths, pod networks and stop and
// start it checks. It is a package of its own so that only its tests pay
// for the clusters.
package clustertest
