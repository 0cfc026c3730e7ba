package v1alpha1

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The label and annotations of the NetworkAttachments that the pod network
// controller makes for a pod's interfaces. They are API, as k8s.io/api keeps
// its well-known labels: the controller writes them, and a node's agent and
// the apiserver read them. Only the controller sets PodUIDLabel: together
// with a controller owner reference to a Pod it marks an attachment as the
// controller's to delete.
const (
	// PodUIDLabel holds the UID of the pod the attachment is for, which
	// tells the attachments of one incarnation of a pod name from those of
	// the next.
	PodUIDLabel = "network.example.com/pod-uid"
	// PodAnnotation holds the name of the pod (which a label value may be
	// too short for).
	PodAnnotation = "network.example.com/pod"
	// InterfaceAnnotation holds the name of the interface in the pod.
	InterfaceAnnotation = "network.example.com/interface"
)

// hashLength is the length of the suffix that keeps apart the names that
// AttachmentName shortens or rewrites: 8 base32 characters, 40 bits.
const hashLength = 8

var nameHash = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// AttachmentName returns the name of the NetworkAttachment that gives a
// pod's interface: <pod>-<interface> when that is a DNS label (at most 63
// lower-case letters, digits and inner dashes), else that name with the
// other characters made dashes, cut to leave room for a dash and a hash of
// the pod and interface names (such as
// "web.v1-net1" → "web-v1-net1-<hash>"). It depends on nothing else, so that
// the controller and a node's agent derive the same name, and it is the
// same for every incarnation of a pod of that name.
//
// Two pods whose names and interfaces join with the same dash (pod a-b
// with interface c, pod a with interface b-c) get the same name: the
// attachment stays the pod's that got it first, and the other pod gets an
// AttachmentConflict Event.
func AttachmentName(pod, ifname string) string {
	name := pod + "-" + ifname
	if len(validation.IsDNS1123Label(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(pod + "/" + ifname))
	suffix := nameHash.EncodeToString(sum[:])[:hashLength]
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	prefix := b.String()
	prefix = prefix[:min(len(prefix), validation.DNS1123LabelMaxLength-1-hashLength)]
	prefix = strings.Trim(prefix, "-")
	if prefix == "" {
		return suffix
	}
	return prefix + "-" + suffix
}
