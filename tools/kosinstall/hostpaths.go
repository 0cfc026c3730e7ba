package kosinstall

// The host paths the KOS manifests mount from their node. On a node of
// tools/cluster they are the node's own (see cluster.NodePaths and
// cluster.Node.HostPath): each node has a mount namespace of its own in
// which they are bind mounts of folders of the node's, so nothing needs
// lending on the host.
const (
	// OVSRunDir is where the agent's DaemonSet finds the node's Open
	// vSwitch; on a node with an Open vSwitch instance of its own it is
	// that instance's run dir.
	OVSRunDir = "/var/run/openvswitch"
	// VarLib holds the single-node etcd's data (VarLib/etcd).
	VarLib = "/var/lib/kos"
)
