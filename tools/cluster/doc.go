// Package cluster runs a local Kubernetes cluster whose pods really run: the
// control plane of tools/testenv and N nodes.
//
// The nodes share one underlay: a bridge of the host, per cluster, on a
// small network of its own (a free /27 of 192.168.250.0/24 unless
// Options.Underlay says otherwise), where the host has the first address
// (kube-apiserver listens there) and each node, a network namespace of its
// own joined to the bridge by a veth pair, the next ones. Nodes reach each
// other directly on it. Each node's pods are on a bridge of the node with
// addresses from its PodCIDR, which the host and every other node route to
// the node's IP: pods on different nodes reach each other, and the host
// reaches every pod (aggregated API servers).
//
// Each node also has a mount namespace of its own, in which containerd
// (Debian's, with runc and the Debian CNI plugins, and a pause image built
// by tools/images), kubelet, kube-proxy (Options.KubeProxy) and its DNS
// server run, and with them every container of its pods. There the paths
// of NodePaths (/var/lib/kos, /var/run/kos, /var/run/openvswitch,
// /var/lib/kos-volumes, /opt/cni/bin, and the fixed paths of kubelet and
// containerd) are bind mounts of folders of the node's, so that hostPath
// volumes resolve per node; Node.HostPath names the host-side folder behind
// a node's path. The node's /opt/cni/bin, where its containerd finds CNI
// plugins, links to Debian's plugins, and a DaemonSet may add its own. With
// NodeOptions.OVS, an Open vSwitch instance runs in the node's network
// namespace and is the node's /var/run/openvswitch. Every other file the
// node's processes can be told about is under its folder too.
//
// The node's cluster DNS is tools/cluster/nodedns, a node process on the
// node's IP that answers for Services (and headless Services' pods) in
// cluster.local from the API and NXDOMAIN for every other name, never
// forwarding; the node routes the Service range to its loopback interface,
// so that hostNetwork pods reach Service IPs through kube-proxy too. Images
// come from tarballs imported with Cluster.ImportImages, or from the
// cluster's registry (Options.Registry: Debian's docker-registry through
// tools/registry, on the host's underlay address, Cluster.Registry), which
// every node's containerd pulls from over plain http; a detached cluster's
// registry is detached with it, Attach finds it and Stop stops it.
//
// With Options.Multus, every node runs Multus's thin plugin (tools/multus)
// in front of its network: pods annotated k8s.v1.cni.cncf.io/networks get
// an interface for each NetworkAttachmentDefinition they name, made by a
// plugin of the node's /opt/cni/bin; Start applies the definitions' CRD and
// Multus's RBAC first.
//
// Cluster.StopNode stops a node entirely (kubelet, kube-proxy, DNS, every
// process of its pods, containerd, its mount namespace) and StartNode brings
// it back as a rebooted node. Stop removes every trace of the cluster:
// processes (shims and containers too), mounts and mount namespaces,
// cgroups, network namespaces, links and the bridge, and, when the last node
// on the host stops, the mount points and fixed host paths nodes created and
// the kernel settings kubelet changes. A node whose owner died is cleaned up
// by the next node that starts. Without kube-controller-manager there is no
// garbage collection, no default ServiceAccounts, and namespaces hang in
// Terminating when deleted.
package cluster
