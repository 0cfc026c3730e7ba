package policy

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned/fake"
)

// recordingSwitch records the policies set, as their String.
type recordingSwitch struct{ set []fabric.NetworkPolicy }

func (s *recordingSwitch) SetPolicy(_ context.Context, p fabric.NetworkPolicy) error {
	s.set = append(s.set, p)
	return nil
}

func nodePolicy(ns string, vni uint32, selected ...string) *v1alpha1.NodeNetworkPolicy {
	return &v1alpha1.NodeNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
		Spec: v1alpha1.NodeNetworkPolicySpec{Node: "n1", VNI: vni, Policies: []v1alpha1.PolicyModel{{
			Name: ns + "/web", Selected: selected, Ingress: true,
			IngressRules: []v1alpha1.PolicyRule{{
				Peers: []v1alpha1.PolicyPeer{{CIDR: "10.0.0.0/24", Except: []string{"10.0.0.128/25"}}},
				Ports: []v1alpha1.PolicyPort{{Protocol: "TCP", Port: 80, EndPort: 90}},
			}},
		}}},
	}
}

func TestSync(t *testing.T) {
	sw := &recordingSwitch{}
	e, err := New(Config{Node: "n1", Client: fake.NewSimpleClientset(), Switch: sw})
	if err != nil {
		t.Fatal(err)
	}
	store := e.informer.GetIndexer()
	sync := func() {
		t.Helper()
		if err := e.sync(context.Background(), "7"); err != nil {
			t.Fatal(err)
		}
	}
	web := nodePolicy("a", 7, "10.0.0.5")
	if err := store.Add(web); err != nil {
		t.Fatal(err)
	}
	sync()
	want := fabric.NetworkPolicy{VNI: 7, Policies: []fabric.Policy{{
		Name: "a/web", Selected: []netip.Addr{netip.MustParseAddr("10.0.0.5")}, Ingress: true,
		IngressRules: []fabric.Rule{{
			Peers: []fabric.Peer{{Prefix: netip.MustParsePrefix("10.0.0.0/24"), Except: []netip.Prefix{netip.MustParsePrefix("10.0.0.128/25")}}},
			Ports: []fabric.Port{{Protocol: fabric.ProtocolTCP, Port: 80, EndPort: 90}},
		}},
	}}}
	opts := cmp.Comparer(func(a, b netip.Addr) bool { return a == b })
	prefixes := cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })
	if diff := cmp.Diff(sw.set, []fabric.NetworkPolicy{want}, opts, prefixes); diff != "" {
		t.Errorf("first sync set (-got +want):\n%s", diff)
	}

	sync()
	if len(sw.set) != 1 {
		t.Errorf("an unchanged policy was set again: %d calls", len(sw.set))
	}

	// The switch lost its flows: the policy is set again.
	e.Reconciled(nil)
	if e.queue.Len() != 1 {
		t.Errorf("a lost policy queued %d networks, want 1", e.queue.Len())
	}
	sync()
	if len(sw.set) != 2 {
		t.Errorf("a lost policy was not set again: %d calls", len(sw.set))
	}

	if err := store.Delete(web); err != nil {
		t.Fatal(err)
	}
	sync()
	if diff := cmp.Diff(sw.set[len(sw.set)-1], fabric.NetworkPolicy{VNI: 7}, opts, prefixes); diff != "" {
		t.Errorf("deleting the last NodeNetworkPolicy set (-got +want):\n%s", diff)
	}
	calls := len(sw.set)
	sync()
	if len(sw.set) != calls {
		t.Errorf("a lifted policy was lifted again")
	}
}

func TestFromSpecRefuses(t *testing.T) {
	bad := nodePolicy("a", 7, "fd00::1")
	bad.Spec.Policies[0].IngressRules[0].Ports[0].Protocol = "ICMP"
	if _, err := FromSpec(bad.Spec); err == nil {
		t.Errorf("FromSpec took an IPv6 address and protocol ICMP")
	}
}

// TestRunForbidden checks that an agent without the right to list
// NodeNetworkPolicies, as under 0.3.0's manifests, programs nothing and
// asks again until it may.
func TestRunForbidden(t *testing.T) {
	client := fake.NewSimpleClientset(nodePolicy("a", 7, "10.0.0.5"))
	var mu sync.Mutex
	asked := 0
	client.PrependReactor("list", "nodenetworkpolicies", func(clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		asked++
		if asked <= 2 {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "network.example.com", Resource: "nodenetworkpolicies"}, "", nil)
		}
		return false, nil, nil
	})
	sw := &syncSwitch{set: make(chan fabric.NetworkPolicy, 10)}
	e, err := New(Config{Node: "n1", Client: client, Switch: sw})
	if err != nil {
		t.Fatal(err)
	}
	e.retry = 10 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, 1) }()
	select {
	case p := <-sw.set:
		if p.VNI != 7 || len(p.Policies) != 1 {
			t.Errorf("set %v, want network 7's one policy", p)
		}
	case <-ctx.Done():
		t.Fatal("the policy was never set once the enforcer might list it")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if asked < 3 {
		t.Errorf("asked %d times, want at least 3 (two refusals, then the informer's list)", asked)
	}
}

// syncSwitch hands each policy set to a channel.
type syncSwitch struct{ set chan fabric.NetworkPolicy }

func (s *syncSwitch) SetPolicy(_ context.Context, p fabric.NetworkPolicy) error {
	s.set <- p
	return nil
}
