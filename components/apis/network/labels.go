package network

// Labels of the NetworkAttachments that stand for pods' interfaces. The
// pod-network controller puts them on each attachment it makes for an
// interface of a pod (in the pod's namespace, owned by the pod), and the
// node agent's CNI server finds the attachment of a CNI request by them:
// by LabelPodUID and LabelPodInterface, or by LabelPodName and
// LabelPodInterface when the runtime did not say the pod's UID.
const (
	// LabelPodNamespace is the namespace of the pod, which is also the
	// attachment's.
	LabelPodNamespace = "network.example.com/pod-namespace"
	// LabelPodName is the name of the pod.
	LabelPodName = "network.example.com/pod-name"
	// LabelPodUID is the UID of the pod.
	LabelPodUID = "network.example.com/pod-uid"
	// LabelPodInterface is the name of the interface in the pod, such as
	// net1: the CNI request's CNI_IFNAME.
	LabelPodInterface = "network.example.com/pod-interface"
)
