package validation

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/apis/network"
)

func nodePolicy(change func(*network.NodeNetworkPolicy)) *network.NodeNetworkPolicy {
	p := &network.NodeNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "7.n1", ResourceVersion: "1"},
		Spec: network.NodeNetworkPolicySpec{Node: "n1", VNI: 7, Policies: []network.PolicyModel{{
			Name: "a/web", Selected: []string{"10.0.0.5"}, Ingress: true,
			IngressRules: []network.PolicyRule{{
				Peers: []network.PolicyPeer{{CIDR: "10.0.0.0/24", Except: []string{"10.0.0.128/25"}}},
				Ports: []network.PolicyPort{{Protocol: "TCP", Port: 80, EndPort: 90}, {Protocol: "UDP"}},
			}},
		}}},
	}
	if change != nil {
		change(p)
	}
	return p
}

func TestValidateNodeNetworkPolicy(t *testing.T) {
	tests := []struct {
		name   string
		change func(*network.NodeNetworkPolicy)
		want   []string
	}{
		{"valid", nil, nil},
		{"no policies", func(p *network.NodeNetworkPolicy) { p.Spec.Policies = nil }, nil},
		{"no node, VNI 0", func(p *network.NodeNetworkPolicy) { p.Spec.Node, p.Spec.VNI = "", 0 }, []string{
			"spec.node: Required value: the name of a Node",
			"spec.vni: Invalid value: 0: must be in [1,2097151]",
		}},
		{"bad addresses", func(p *network.NodeNetworkPolicy) {
			p.Spec.Policies[0].Name = ""
			p.Spec.Policies[0].Selected = []string{"fd00::1"}
			p.Spec.Policies[0].IngressRules[0].Peers = []network.PolicyPeer{{CIDR: "10.0.0.0/24", Except: []string{"10.1.0.0/25", "10.0.0.0/16"}}, {CIDR: "nope"}}
		}, []string{
			"spec.policies[0].name: Required value: the policy's namespace/name",
			`spec.policies[0].selected[0]: Invalid value: "fd00::1": must be an IPv4 address`,
			`spec.policies[0].ingressRules[0].peers[0].except[0]: Invalid value: "10.1.0.0/25": must be an IPv4 prefix within cidr`,
			`spec.policies[0].ingressRules[0].peers[0].except[1]: Invalid value: "10.0.0.0/16": must be an IPv4 prefix within cidr`,
			`spec.policies[0].ingressRules[0].peers[1].cidr: Invalid value: "nope": must be an IPv4 prefix`,
		}},
		{"bad ports", func(p *network.NodeNetworkPolicy) {
			p.Spec.Policies[0].IngressRules[0].Ports = []network.PolicyPort{{Protocol: "ICMP"}, {Protocol: "TCP", Port: 70000}, {Protocol: "UDP", Port: 90, EndPort: 80}, {Protocol: "SCTP", EndPort: 5}}
		}, []string{
			`spec.policies[0].ingressRules[0].ports[0].protocol: Unsupported value: "ICMP": supported values: "TCP", "UDP", "SCTP"`,
			"spec.policies[0].ingressRules[0].ports[1].port: Invalid value: 70000: must be in [0,65535]",
			"spec.policies[0].ingressRules[0].ports[2].endPort: Invalid value: 80: must be 0, or in [port,65535] with a port",
			"spec.policies[0].ingressRules[0].ports[3].endPort: Invalid value: 5: must be 0, or in [port,65535] with a port",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := errorStrings(ValidateNodeNetworkPolicy(nodePolicy(tc.change)))
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("ValidateNodeNetworkPolicy mismatch (-got +want):\n%s", diff)
			}
		})
	}
}

func TestValidateNodeNetworkPolicyUpdate(t *testing.T) {
	got := errorStrings(ValidateNodeNetworkPolicyUpdate(nodePolicy(func(p *network.NodeNetworkPolicy) {
		p.Spec.Node, p.Spec.VNI = "n2", 8
		p.Spec.Policies = nil
	}), nodePolicy(nil)))
	want := []string{
		`spec.node: Invalid value: "n2": field is immutable`,
		"spec.vni: Invalid value: 8: field is immutable",
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("ValidateNodeNetworkPolicyUpdate mismatch (-got +want):\n%s", diff)
	}
}
