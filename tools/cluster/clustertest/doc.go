// Package clustertest tests tools/cluster's clusters: one node with
// kube-controller-manager, kube-scheduler and a kubelet with containerd in
// namespaces of its own, running pods of locally built images; three nodes
// on one underlay, whose private paths, pod networks and stop and start it
// checks; and two nodes running Multus, whose pods get a second interface
// from a NetworkAttachmentDefinition. It is a package of its own so that
// only its tests pay for the clusters.
package clustertest
