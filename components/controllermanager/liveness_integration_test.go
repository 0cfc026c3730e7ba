package controllermanager_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kos-sdn/kos/components/agent"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllermanager"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// Short heartbeats for the tests: a 2 s Lease renewed every 500 ms, and
// a 1 s grace, so a silent agent's attachments are due Unknown 3 s after
// its last renewal (40 s and 5 s in production).
const (
	testHeartbeatInterval = 500 * time.Millisecond
	testLeaseDuration     = 2 * time.Second
	testLeaseGrace        = time.Second
)

// TestIntegrationStaleReady: an attachment is Ready while its node's agent
// heartbeats; once the heartbeat stops its Ready goes Unknown within the
// Lease's duration and the grace, and comes back when the heartbeat
// resumes. An attachment of a node whose agent never heartbeat stays Ready
// throughout.
func TestIntegrationStaleReady(t *testing.T) {
	env := testenv.Shared(t)
	c := kosClient(t)
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	ns, leaseNS := newNamespace(t), newNamespace(t)
	m, _ := startManagerWith(t, "manager", controllermanager.Config{
		AttachmentLiveness: true, AgentLeaseNamespace: leaseNS, AgentLeaseGrace: testLeaseGrace,
	})
	waitRunning(t, m)

	s := createSubnet(t, c, newSubnet(ns, "s", "10.120.0.0/24", 120))
	waitValidated(t, c, s)
	beating := readyAttachment(t, c, ns, "beating", "node-beating", s.Name)
	never := readyAttachment(t, c, ns, "never", "node-never", s.Name)

	// The agent of node-beating heartbeats, as kos-agent does.
	stopBeat := startHeartbeat(t, kube, leaseNS, "node-beating")
	// Several Lease durations with the heartbeat: nothing is marked.
	time.Sleep(3 * (testLeaseDuration + testLeaseGrace))
	for _, name := range []string{beating, never} {
		if got := readyOf(t, c, ns, name); got.Status != metav1.ConditionTrue {
			t.Fatalf("attachment %s with a heartbeating (or no) agent: Ready %s (%s: %s), want True", name, got.Status, got.Reason, got.Message)
		}
	}

	stopped := time.Now()
	stopBeat()
	var marked *metav1.Condition
	poll.Until(t, 30*time.Second, "the stopped agent's attachment Unknown", func(ctx context.Context) error {
		marked = readyOf(t, c, ns, beating)
		if marked.Status != metav1.ConditionUnknown {
			return fmt.Errorf("Ready %s (%s)", marked.Status, marked.Reason)
		}
		return nil
	})
	took := time.Since(stopped)
	t.Logf("Ready Unknown %s after the heartbeat stopped (Lease %s, grace %s): %s", took.Round(10*time.Millisecond), testLeaseDuration, testLeaseGrace, marked.Message)
	if marked.Reason != v1alpha1.ReasonAgentNotHeartbeating {
		t.Errorf("reason %q, want %q", marked.Reason, v1alpha1.ReasonAgentNotHeartbeating)
	}
	// The last renewal came before the stop; the controller may see it up
	// to a renewal interval late, and then waits duration and grace.
	if limit := testLeaseDuration + testLeaseGrace + testHeartbeatInterval + 5*time.Second; took > limit {
		t.Errorf("marked %s after the heartbeat stopped, want within %s", took, limit)
	}
	if got := readyOf(t, c, ns, never); got.Status != metav1.ConditionTrue {
		t.Errorf("attachment of a node that never heartbeat: Ready %s (%s), want True", got.Status, got.Reason)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	if metrics := get(t, srv.URL+"/metrics", http.StatusOK); !strings.Contains(metrics, "kos_nodes_not_heartbeating 1\n") {
		t.Errorf("/metrics lacks kos_nodes_not_heartbeating 1 with one silent agent")
	}

	resumed := time.Now()
	startHeartbeat(t, kube, leaseNS, "node-beating")
	poll.Until(t, 30*time.Second, "Ready again once the agent is back", func(ctx context.Context) error {
		if got := readyOf(t, c, ns, beating); got.Status != metav1.ConditionTrue {
			return fmt.Errorf("Ready %s (%s)", got.Status, got.Reason)
		}
		return nil
	})
	t.Logf("Ready True %s after the heartbeat resumed", time.Since(resumed).Round(10*time.Millisecond))
	if metrics := get(t, srv.URL+"/metrics", http.StatusOK); !strings.Contains(metrics, "kos_nodes_not_heartbeating 0\n") {
		t.Errorf("/metrics lacks kos_nodes_not_heartbeating 0 once the agent is back")
	}
}

// TestIntegrationStaleReadyWithoutLeaseRights: a manager that may not read
// the agents' Leases, as with 0.3.0's manifests, runs its other controllers
// and marks nothing, however stale a Lease.
func TestIntegrationStaleReadyWithoutLeaseRights(t *testing.T) {
	env := testenv.Shared(t)
	c := kosClient(t)
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	ns, leaseNS := newNamespace(t), newNamespace(t)
	// A user with no rights in the main cluster: every user may ask what
	// it may do, and its Events are refused, which the manager only logs.
	_, restricted, err := env.NewUserKubeconfig("kos-controller-manager-0.3.0")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// A Lease long stale.
	long := metav1.NewMicroTime(time.Now().Add(-time.Hour))
	if _, err := kube.CoordinationV1().Leases(leaseNS).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "node-stale"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-stale"), LeaseDurationSeconds: ptr.To[int32](2),
			AcquireTime: &long, RenewTime: &long},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m, _ := startManagerWith(t, "restricted", controllermanager.Config{
		Kube: restricted, AttachmentLiveness: true, AgentLeaseNamespace: leaseNS, AgentLeaseGrace: testLeaseGrace,
	})
	waitRunning(t, m)
	s := createSubnet(t, c, newSubnet(ns, "s", "10.121.0.0/24", 121))
	// The subnet validator and IPAM run.
	waitValidated(t, c, s)
	name := readyAttachment(t, c, ns, "stale", "node-stale", s.Name)
	time.Sleep(3 * (testLeaseDuration + testLeaseGrace))
	if got := readyOf(t, c, ns, name); got.Status != metav1.ConditionTrue {
		t.Errorf("attachment of a stale node, with a manager without Lease rights: Ready %s (%s), want True", got.Status, got.Reason)
	}
}

// waitRunning waits until m's controllers run.
func waitRunning(t *testing.T, m *controllermanager.Manager) {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	poll.Until(t, time.Minute, "the manager ready", func(ctx context.Context) error {
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	})
}

// readyAttachment creates an attachment on node, waits for IPAM's address,
// writes the status the node's agent writes once it set the interface up,
// waits for the server to derive Ready True, and returns its name.
func readyAttachment(t *testing.T, c versioned.Interface, ns, name, node, subnet string) string {
	t.Helper()
	att := newAttachment(ns, name, subnet)
	att.Spec.Node = node
	createAttachment(t, c, att)
	poll.Until(t, time.Minute, "attachment "+name+" Ready", func(ctx context.Context) error {
		got, err := c.NetworkV1alpha1().NetworkAttachments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Status.IPv4 == "" {
			return errors.New("no address yet")
		}
		if ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.NetworkAttachmentReady); ready != nil && ready.Status == metav1.ConditionTrue {
			return nil
		}
		mac := v1alpha1.MACAddress(got.Status.AddressVNI, netip.MustParseAddr(got.Status.IPv4))
		got.Status.MACAddress, got.Status.IfcName = mac.String(), v1alpha1.InterfaceName(mac)
		got.Status.HostIP, got.Status.MTU = "192.168.0.1", 1450
		if _, err := c.NetworkV1alpha1().NetworkAttachments(ns).UpdateStatus(ctx, got.ForStatusWrite(), metav1.UpdateOptions{}); err != nil {
			return err
		}
		return errors.New("implemented; Ready not derived yet")
	})
	return name
}

func readyOf(t *testing.T, c versioned.Interface, ns, name string) *metav1.Condition {
	t.Helper()
	got, err := c.NetworkV1alpha1().NetworkAttachments(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.NetworkAttachmentReady)
	if ready == nil {
		t.Fatalf("attachment %s has no Ready condition", name)
	}
	return ready
}

// startHeartbeat runs kos-agent's heartbeat for node with the tests' short
// Lease until the returned stop is called or the test ends.
func startHeartbeat(t *testing.T, kube kubernetes.Interface, ns, node string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	hb := &agent.Heartbeat{Client: kube.CoordinationV1(), Namespace: ns, Node: node,
		Interval: testHeartbeatInterval, Duration: testLeaseDuration}
	done := make(chan struct{})
	go func() { defer close(done); hb.Run(ctx) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}
