// Package cluster runs a local Kubernetes cluster whose pods really run: the
// control plane of tools/testenv and a node.
//
// A node is a network namespace of its own, joined to the host by a veth
// pair on a private link network, where containerd (Debian's, with runc and
// the Debian CNI plugins, and a pause image built by tools/images), kubelet,
// kube-proxy (Options.KubeProxy) and, if asked, Open vSwitch run with every
// file they can be told about under the cluster's folder; kube-apiserver
// then listens on the host's end of the link, and pods reach it through the
// kubernetes Service. The node's cluster DNS is tools/cluster/nodedns, a
// node process on the node's IP that answers for Services (and headless
// Services' pods) in cluster.local from the API and NXDOMAIN for every other
// name, never forwarding; the node routes the Service range to its loopback
// interface, so that hostNetwork pods reach Service IPs through kube-proxy
// too. Images come only from tarballs imported with Cluster.ImportImages.
//
// Stop removes every trace of the node: processes (shims and containers
// too), mounts, cgroups, the namespace and its link, and, when the last node
// on the host stops, the few fixed host paths kubelet and containerd create
// and the kernel settings kubelet changes. A node whose owner died is
// cleaned up by the next node that starts. Without kube-controller-manager
// there is no garbage collection, no default ServiceAccounts, and namespaces
// hang in Terminating when deleted.
//
// Options.Nodes holds one node for now; the state (Cluster.Nodes, the state
// file, the host record) is kept per node so that more can follow.
package cluster
