package noderestriction

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

const agent = "system:serviceaccount:example-com:kos-agent"

func agentOn(nodes ...string) user.Info {
	u := &user.DefaultInfo{Name: agent, Groups: []string{"system:serviceaccounts"}}
	if nodes != nil {
		u.Extra = map[string][]string{serviceaccount.NodeNameKey: nodes}
	}
	return u
}

func TestDecide(t *testing.T) {
	old := &network.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a1"},
		Spec:       network.NetworkAttachmentSpec{Node: "n1", Subnet: "s1"},
		Status:     network.NetworkAttachmentStatus{IPv4: "10.0.0.5", AddressVNI: 7, LockUID: "u1"},
	}
	setImpl := func(st *network.NetworkAttachmentStatus) {
		st.MACAddress, st.IfcName, st.HostIP, st.Errors.Host = "06:00:00:00:00:05", "kos0", "192.168.0.1", []string{"x"}
	}
	tests := []struct {
		name   string
		user   user.Info
		mutate func(*network.NetworkAttachmentStatus)
		want   string // "" means allowed; else a part of the refusal
	}{
		{"agent on the node writes impl", agentOn("n1"), setImpl, ""},
		{"agent on the node writes the exec report", agentOn("n1"),
			func(st *network.NetworkAttachmentStatus) {
				st.PostCreateExecReport = &network.ExecReport{ExitStatus: 1}
			}, ""},
		{"agent on the node writes nothing", agentOn("n1"), func(*network.NetworkAttachmentStatus) {}, ""},
		{"agent on the node clears nil IPAM errors to empty", agentOn("n1"),
			func(st *network.NetworkAttachmentStatus) { st.Errors.IPAM = []string{} }, ""},
		{"agent on another node", agentOn("n2"), setImpl,
			`agent "` + agent + `" of node "n2" may not write the status of attachment ns/a1, which is on node "n1"`},
		{"agent on the node writes the address", agentOn("n1"),
			func(st *network.NetworkAttachmentStatus) { st.IPv4 = "10.0.0.6" },
			`may not change section status.address of the status of attachment ns/a1; it may change only status.execReport and status.impl`},
		{"agent on the node writes the IPAM errors", agentOn("n1"),
			func(st *network.NetworkAttachmentStatus) { setImpl(st); st.Errors.IPAM = []string{"full"} },
			`may not change section status.address`},
		{"agent without a node claim", agentOn(), setImpl, `its credentials name no node (authentication.kubernetes.io/node-name)`},
		{"agent with an empty node claim", agentOn(""), setImpl, `its credentials name no node`},
		{"agent with two node claims", agentOn("n1", "n2"), setImpl, `its credentials name no node`},
		{"controller manager writes the address", &user.DefaultInfo{Name: "system:serviceaccount:example-com:kos-controller-manager"},
			func(st *network.NetworkAttachmentStatus) { st.IPv4 = "10.0.0.6" }, ""},
		{"admin writes everything", &user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}},
			func(st *network.NetworkAttachmentStatus) { setImpl(st); st.IPv4 = "" }, ""},
		{"another service account with a node claim", &user.DefaultInfo{Name: "system:serviceaccount:other:kos-agent",
			Extra: map[string][]string{serviceaccount.NodeNameKey: {"n2"}}}, setImpl, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			att := old.DeepCopy()
			tc.mutate(&att.Status)
			err := Decide(sets.New(DefaultAgents...), tc.user, att, old.DeepCopy())
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Decide: got %v, want allowed", err)
			case tc.want != "" && err == nil:
				t.Errorf("Decide: allowed, want a refusal with %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("Decide: got %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	old := &network.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a1"},
		Spec:       network.NetworkAttachmentSpec{Node: "n1"},
	}
	att := old.DeepCopy()
	att.Status.HostIP = "192.168.0.1"
	attrs := func(subresource string, u user.Info) admission.Attributes {
		return admission.NewAttributesRecord(att, old, v1alpha1.SchemeGroupVersion.WithKind("NetworkAttachment"), "ns", "a1",
			v1alpha1.SchemeGroupVersion.WithResource("networkattachments"), subresource, admission.Update, &metav1.UpdateOptions{}, false, u)
	}
	p := New(DefaultAgents)
	if !p.Handles(admission.Update) || p.Handles(admission.Create) || p.Handles(admission.Delete) {
		t.Errorf("Handles: want updates only")
	}
	err := p.Validate(context.Background(), attrs("status", agentOn("n2")), nil)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("Validate from another node: got %v, want Forbidden", err)
	}
	if want := `networkattachments.network.example.com "a1" is forbidden: agent`; !strings.Contains(err.Error(), want) {
		t.Errorf("Validate from another node: got %q, want it to contain %q", err, want)
	}
	if err := p.Validate(context.Background(), attrs("status", agentOn("n1")), nil); err != nil {
		t.Errorf("Validate from the node: %v", err)
	}
	// The main endpoint keeps the status as it was, and RBAC decides who
	// writes specs.
	if err := p.Validate(context.Background(), attrs("", agentOn("n2")), nil); err != nil {
		t.Errorf("Validate of the main endpoint: %v", err)
	}
	if err := New(nil).Validate(context.Background(), attrs("status", agentOn()), nil); err != nil {
		t.Errorf("Validate with no agents: %v", err)
	}
}
