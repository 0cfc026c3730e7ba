package cniserver

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/cni"
)

func TestPickShifted(t *testing.T) {
	att := func(uid, ifname, subnet string) *v1alpha1.NetworkAttachment {
		return &v1alpha1.NetworkAttachment{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:   "ns",
				Name:        v1alpha1.AttachmentName("web", ifname),
				Labels:      map[string]string{v1alpha1.PodUIDLabel: uid},
				Annotations: map[string]string{v1alpha1.PodAnnotation: "web", v1alpha1.InterfaceAnnotation: ifname},
			},
			Spec: v1alpha1.NetworkAttachmentSpec{Subnet: subnet},
		}
	}
	req := func(ifname, subnet string) *cni.Request {
		return &cni.Request{ContainerID: "c1", IfName: ifname, Subnet: subnet, Pod: cni.Pod{Namespace: "ns", Name: "web", UID: "u1"}}
	}
	// plugged says which sandbox interface each attachment was plugged for.
	type plug struct{ containerID, ifname string }
	for _, tt := range []struct {
		name    string
		req     *cni.Request
		atts    []*v1alpha1.NetworkAttachment
		plugged map[string]plug
		want    string // the attachment's interface, "" for none
	}{
		{"one default network", req("net2", "blue"), []*v1alpha1.NetworkAttachment{att("u1", "net1", "blue")}, nil, "net1"},
		{"two default networks", req("net3", "blue"), []*v1alpha1.NetworkAttachment{att("u1", "net1", "blue")}, nil, "net1"},
		{"the entry of the request's subnet", req("net3", "red"),
			[]*v1alpha1.NetworkAttachment{att("u1", "net1", "blue"), att("u1", "net2", "red")}, nil, "net2"},
		{"a definition twice, its first entry plugged as net2", req("net3", "blue"),
			[]*v1alpha1.NetworkAttachment{att("u1", "net2", "blue"), att("u1", "net1", "blue")},
			map[string]plug{"ns/web-net1": {"c1", "net2"}}, "net2"},
		{"a definition twice, the request's own plug again", req("net2", "blue"),
			[]*v1alpha1.NetworkAttachment{att("u1", "net2", "blue"), att("u1", "net1", "blue")},
			map[string]plug{"ns/web-net1": {"c1", "net2"}}, "net1"},
		{"plugged for an earlier sandbox", req("net2", "blue"), []*v1alpha1.NetworkAttachment{att("u1", "net1", "blue")},
			map[string]plug{"ns/web-net1": {"c0", "net2"}}, "net1"},
		{"every candidate plugged for another interface", req("net2", "blue"), []*v1alpha1.NetworkAttachment{att("u1", "net1", "blue")},
			map[string]plug{"ns/web-net1": {"c1", "net3"}}, ""},
		{"an earlier pod's", req("net2", "blue"), []*v1alpha1.NetworkAttachment{att("u0", "net1", "blue")}, nil, ""},
		{"not a pod's", req("net2", "blue"), []*v1alpha1.NetworkAttachment{att("", "net1", "blue")}, nil, ""},
		{"another subnet", req("net2", "blue"), []*v1alpha1.NetworkAttachment{att("u1", "net1", "red")}, nil, ""},
		{"a name the pod asked for", req("net2", "blue"), []*v1alpha1.NetworkAttachment{att("u1", "data0", "blue")}, nil, ""},
		{"a later number", req("net2", "blue"), []*v1alpha1.NetworkAttachment{att("u1", "net2", "blue"), att("u1", "net3", "blue")}, nil, ""},
		{"a request's own name", req("data0", "blue"), []*v1alpha1.NetworkAttachment{att("u1", "net1", "blue")}, nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pluggedFor := func(key string) (string, string, bool) {
				p, ok := tt.plugged[key]
				return p.containerID, p.ifname, ok
			}
			got := ""
			if a := pickShifted(tt.req, tt.atts, pluggedFor); a != nil {
				got = a.Annotations[v1alpha1.InterfaceAnnotation]
			}
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("pickShifted (-got +want):\n%s", diff)
			}
		})
	}
}
