package agent_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/logging"
	kosscheme "github.com/kos-sdn/kos/components/generated/clientset/versioned/scheme"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// The simulated nodes' underlay addresses. Tests with the logging fabric send
// no traffic; the OVS tests use them only inside namespaces they create.
const (
	hostA = "192.168.100.1"
	hostB = "192.168.100.2"
	hostC = "192.168.100.3"
	hostD = "192.168.100.4"
)

const settle = 30 * time.Second

// TestIntegrationRelevance runs two agents with logging fabrics against the
// real KOS API and checks, as local attachments come and go, that each node
// holds exactly the attachments of the networks it has local attachments in
// and never hears of the others.
func TestIntegrationRelevance(t *testing.T) {
	k := newAPI(t)
	const vni1, vni2 = 101, 102
	k.subnet("s1", "10.1.0.0/24", vni1)
	k.subnet("s2", "10.2.0.0/24", vni2)
	fabA, fabB := logging.New(), logging.New()
	agentA := startAgent(t, agentConfig(t, k.node("a"), hostA, fabA))
	agentB := startAgent(t, agentConfig(t, k.node("b"), hostB, fabB))

	k.attachment("a1", k.node("a"), "s1")
	k.address("a1", "10.1.0.11", vni1)
	k.attachment("b1", k.node("b"), "s1")
	k.address("b1", "10.1.0.12", vni1)
	// Node C runs no agent: its attachments get their host IP by hand.
	k.remote("c1", k.node("c"), "s1", "10.1.0.13", vni1, hostC)
	k.remote("c2", k.node("c"), "s2", "10.2.0.13", vni2, hostC)
	// An attachment without an address yet is nowhere.
	k.attachment("a0", k.node("a"), "s1")

	poll.Until(t, settle, "node A holds network 1", holds(fabA, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni1, "10.1.0.11")},
		Remote: []fabric.RemoteAttachment{remote(vni1, "10.1.0.12", hostB), remote(vni1, "10.1.0.13", hostC)},
	}))
	poll.Until(t, settle, "node B holds network 1", holds(fabB, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni1, "10.1.0.12")},
		Remote: []fabric.RemoteAttachment{remote(vni1, "10.1.0.11", hostA), remote(vni1, "10.1.0.13", hostC)},
	}))
	poll.Until(t, settle, "a1 is ready", k.ready("a1", hostA))
	poll.Until(t, settle, "b1 is ready", k.ready("b1", hostB))
	// The server's Ready condition agrees with what the agents wrote.
	poll.Until(t, settle, "a1's Ready condition", k.readyCondition("a1", metav1.ConditionTrue, v1alpha1.ReasonReady))
	poll.Until(t, settle, "a0's Ready condition", k.readyCondition("a0", metav1.ConditionFalse, v1alpha1.ReasonNoAddress))
	// c1's host IP, written by hand without the MAC address an agent
	// writes, is not an agent's report of its interface.
	poll.Until(t, settle, "c1's Ready condition", k.readyCondition("c1", metav1.ConditionFalse, v1alpha1.ReasonNotImplemented))

	// Network 2 becomes relevant to node A alone.
	k.attachment("a2", k.node("a"), "s2")
	k.address("a2", "10.2.0.11", vni2)
	poll.Until(t, settle, "node A holds networks 1 and 2", holds(fabA, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni1, "10.1.0.11"), local(vni2, "10.2.0.11")},
		Remote: []fabric.RemoteAttachment{remote(vni1, "10.1.0.12", hostB), remote(vni1, "10.1.0.13", hostC), remote(vni2, "10.2.0.13", hostC)},
	}))
	poll.Until(t, settle, "a2 is ready", k.ready("a2", hostA))

	// A remote attachment moves to another host.
	k.hostIP("c1", hostD)
	poll.Until(t, settle, "node A follows c1", holds(fabA, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni1, "10.1.0.11"), local(vni2, "10.2.0.11")},
		Remote: []fabric.RemoteAttachment{remote(vni1, "10.1.0.12", hostB), remote(vni1, "10.1.0.13", hostD), remote(vni2, "10.2.0.13", hostC)},
	}))
	poll.Until(t, settle, "node B follows c1", holds(fabB, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni1, "10.1.0.12")},
		Remote: []fabric.RemoteAttachment{remote(vni1, "10.1.0.11", hostA), remote(vni1, "10.1.0.13", hostD)},
	}))

	// Network 2 loses its only local attachment on node A, and with it
	// its remote ones.
	k.delete("a2")
	poll.Until(t, settle, "node A drops network 2", holds(fabA, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni1, "10.1.0.11")},
		Remote: []fabric.RemoteAttachment{remote(vni1, "10.1.0.12", hostB), remote(vni1, "10.1.0.13", hostD)},
	}))

	// Node B loses its only attachment: node A drops it, and node B
	// drops network 1 altogether.
	k.delete("b1")
	poll.Until(t, settle, "node A drops b1", holds(fabA, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni1, "10.1.0.11")},
		Remote: []fabric.RemoteAttachment{remote(vni1, "10.1.0.13", hostD)},
	}))
	poll.Until(t, settle, "node B holds nothing", holds(fabB, &fabric.Inventory{}))

	// Node B never watched network 2: its network informers heard of
	// network 1 only (a1, b1, c1 and a0 once addressed: a few events
	// each), never of c2 or a2.
	poll.Until(t, settle, "node B watches nothing", func(context.Context) error {
		if n := agentB.counter(t, "kos_agent_relevant_networks", nil); n != 0 {
			return fmt.Errorf("node B watches %g networks", n)
		}
		return nil
	})
	if starts := agentB.counter(t, "kos_agent_network_informer_starts_total", nil); starts != 1 {
		t.Errorf("node B started %g network informers, want 1", starts)
	}
	if starts := agentA.counter(t, "kos_agent_network_informer_starts_total", nil); starts != 2 {
		t.Errorf("node A started %g network informers, want 2", starts)
	}
	if n := agentA.counter(t, "kos_agent_attachment_create_to_ready_seconds", nil); n < 2 {
		t.Errorf("node A observed %g create-to-ready latencies, want at least 2", n)
	}

	// Dissemination: node A gained b1, c1 and c2 as remote attachments
	// (c1's move to another host is not a new one), node B a1 and c1.
	// An attachment addressed while node A watches network 1 is
	// disseminated "while watched".
	const dissemination = "kos_agent_remote_attachment_dissemination_seconds"
	if n := agentA.counter(t, dissemination, nil); n != 3 {
		t.Errorf("node A observed %g dissemination latencies, want 3", n)
	}
	if n := agentB.counter(t, dissemination, nil); n != 2 {
		t.Errorf("node B observed %g dissemination latencies, want 2", n)
	}
	watched := agentA.counter(t, dissemination, map[string]string{"address_written": "while_watched"})
	k.remote("c3", k.node("c"), "s1", "10.1.0.14", vni1, hostC)
	poll.Until(t, settle, "node A holds c3", holds(fabA, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni1, "10.1.0.11")},
		Remote: []fabric.RemoteAttachment{remote(vni1, "10.1.0.13", hostD), remote(vni1, "10.1.0.14", hostC)},
	}))
	if n := agentA.counter(t, dissemination, map[string]string{"address_written": "while_watched"}); n != watched+1 {
		t.Errorf("node A observed %g dissemination latencies while watching, want %g", n, watched+1)
	}
}

// TestIntegrationAddressClaims checks attachments that claim one address:
// a local claim wins over a remote one, of two local claims the later
// address write wins, and the remote claim takes over once the local ones
// are gone.
func TestIntegrationAddressClaims(t *testing.T) {
	k := newAPI(t)
	const vni = 111
	k.subnet("s1", "10.11.0.0/24", vni)
	fabA := logging.New()
	startAgent(t, agentConfig(t, k.node("a"), hostA, fabA))
	// a9 keeps the network relevant to node A throughout.
	k.attachment("a9", k.node("a"), "s1")
	k.address("a9", "10.11.0.9", vni)
	k.attachment("a1", k.node("a"), "s1")
	k.address("a1", "10.11.0.5", vni)
	poll.Until(t, settle, "a1 is ready", k.ready("a1", hostA))
	// c1 claims a1's address from another node, as when an address moved
	// and the old holder is not gone yet.
	k.remote("c1", k.node("c"), "s1", "10.11.0.5", vni, hostC)
	k.remote("c2", k.node("c"), "s1", "10.11.0.6", vni, hostC)
	poll.Until(t, settle, "the local claim wins", holds(fabA, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni, "10.11.0.5"), local(vni, "10.11.0.9")},
		Remote: []fabric.RemoteAttachment{remote(vni, "10.11.0.6", hostC)},
	}))
	// a2 claims the address too, later: it takes the interface and a1
	// reports that it lost it.
	k.attachment("a2", k.node("a"), "s1")
	k.address("a2", "10.11.0.5", vni)
	poll.Until(t, settle, "a2 is ready", k.ready("a2", hostA))
	conflict := func(context.Context) error {
		st := k.get("a1").Status
		if want := "address 10.11.0.5 of VNI 111 is held by attachment " + k.ns + "/a2"; st.HostIP != "" || len(st.Errors.Host) != 1 || st.Errors.Host[0] != want {
			return fmt.Errorf("a1's status = %+v, want no host and the error %q", st, want)
		}
		return nil
	}
	poll.Until(t, settle, "a1 reports the conflict", conflict)
	k.delete("a2")
	poll.Until(t, settle, "a1 is ready again", k.ready("a1", hostA))
	k.delete("a1")
	poll.Until(t, settle, "the remote claim takes over", holds(fabA, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni, "10.11.0.9")},
		Remote: []fabric.RemoteAttachment{remote(vni, "10.11.0.5", hostC), remote(vni, "10.11.0.6", hostC)},
	}))
	k.delete("a9")
	poll.Until(t, settle, "nothing is left", holds(fabA, &fabric.Inventory{}))
}

// TestIntegrationStatusExecAndEvents checks what a local attachment's
// status reports, the allow-list of postCreateExec and postDeleteExec and
// their expansion, and the Events about local attachments.
func TestIntegrationStatusExecAndEvents(t *testing.T) {
	env := testenv.Shared(t)
	k := newAPI(t)
	const vni = 121
	k.subnet("s1", "10.21.0.0/24", vni)
	echo, err := exec.LookPath("echo")
	if err != nil {
		t.Fatal(err)
	}
	touch, err := exec.LookPath("touch")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()

	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	cfg := agentConfig(t, k.node("a"), hostA, logging.New())
	cfg.Recorder = broadcaster.NewRecorder(kosscheme.Scheme, corev1.EventSource{Component: "kos-agent", Host: k.node("a")})
	cfg.AllowedPrograms = []string{echo, touch}
	agentA := startAgent(t, cfg)

	k.attachment("x1", k.node("a"), "s1", func(a *v1alpha1.NetworkAttachment) {
		a.Spec.PostCreateExec = []string{echo, "${ifname}", "${ipv4}", "${mac}"}
		a.Spec.PostDeleteExec = []string{touch, filepath.Join(dir, "deleted-${ifname}-${ipv4}")}
	})
	k.attachment("x2", k.node("a"), "s1", func(a *v1alpha1.NetworkAttachment) {
		a.Spec.PostCreateExec = []string{"/bin/sh", "-c", "echo hi"}
	})
	k.address("x1", "10.21.0.5", vni)
	k.address("x2", "10.21.0.6", vni)
	poll.Until(t, settle, "x1 is ready", k.ready("x1", hostA))
	poll.Until(t, settle, "x2 is ready", k.ready("x2", hostA))

	poll.Until(t, settle, "x1 has a report", k.hasReport("x1"))
	poll.Until(t, settle, "x2 has a report", k.hasReport("x2"))
	x1 := k.get("x1")
	got := *x1.Status.PostCreateExecReport
	want := v1alpha1.ExecReport{
		Command:    []string{echo, "kos061500050079", "10.21.0.5", "06:15:00:05:00:79"},
		ExitStatus: 0,
		StdOut:     "kos061500050079 10.21.0.5 06:15:00:05:00:79\n",
	}
	got.StartTime, got.StopTime = metav1.Time{}, metav1.Time{}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("x1's report (-got +want):\n%s", diff)
	}
	if w := x1.Status.PostCreateExecReport; w.StartTime.IsZero() || w.StopTime.Before(&w.StartTime) {
		t.Errorf("x1's report times: %v to %v", w.StartTime, w.StopTime)
	}
	x2 := k.get("x2").Status.PostCreateExecReport
	if x2.ExitStatus != -1 || !strings.Contains(x2.StdErr, "allow-list") || x2.StdOut != "" {
		t.Errorf("x2's report = %+v, want exit status -1 and an error about the allow-list", x2)
	}
	if n := agentA.counter(t, "kos_agent_execs_total", map[string]string{"which": "create"}); n != 2 {
		t.Errorf("%g postCreateExec runs, want 2 (once each)", n)
	}

	k.delete("x1")
	marker := filepath.Join(dir, "deleted-kos061500050079-10.21.0.5")
	poll.Until(t, settle, "x1's postDeleteExec ran", func(context.Context) error {
		_, err := os.Stat(marker)
		return err
	})

	wantEvents := map[string]string{
		"x1/InterfaceReady":           corev1.EventTypeNormal,
		"x1/PostCreateExec":           corev1.EventTypeNormal,
		"x2/InterfaceReady":           corev1.EventTypeNormal,
		"x2/PostCreateExecNotAllowed": corev1.EventTypeWarning,
	}
	poll.Until(t, settle, "the events were recorded", func(context.Context) error {
		list, err := kube.CoreV1().Events(k.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		got := map[string]string{}
		for _, e := range list.Items {
			if e.InvolvedObject.Kind != "NetworkAttachment" || e.Source.Component != "kos-agent" {
				return fmt.Errorf("event about %v from %v", e.InvolvedObject, e.Source)
			}
			got[e.InvolvedObject.Name+"/"+e.Reason] = e.Type
		}
		if diff := cmp.Diff(got, wantEvents); diff != "" {
			return fmt.Errorf("events (-got +want):\n%s", diff)
		}
		return nil
	})
}

// TestIntegrationFlowsLost makes the fabric lose its flows, as an
// ovs-vswitchd restart does, and checks that the agent re-installs them.
func TestIntegrationFlowsLost(t *testing.T) {
	k := newAPI(t)
	const vni = 131
	k.subnet("s1", "10.31.0.0/24", vni)
	fab := logging.New()
	agentA := startAgent(t, agentConfig(t, k.node("a"), hostA, fab))
	k.attachment("a1", k.node("a"), "s1")
	k.address("a1", "10.31.0.5", vni)
	k.remote("c1", k.node("c"), "s1", "10.31.0.6", vni, hostC)
	whole := &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni, "10.31.0.5")},
		Remote: []fabric.RemoteAttachment{remote(vni, "10.31.0.6", hostC)},
	}
	poll.Until(t, settle, "the fabric is whole", holds(fab, whole))
	fab.LoseFlows()
	poll.Until(t, settle, "the fabric is whole again", holds(fab, whole))
	if n := agentA.counter(t, "kos_agent_reconciles_total", map[string]string{"reason": "flows_lost", "result": "ok"}); n != 1 {
		t.Errorf("%g reconciles for lost flows, want 1", n)
	}
}

// TestIntegrationReconcileOnStart changes attachments while the agent is
// down and checks that a new agent on the same fabric adopts what matches,
// removes orphans and adds what is missing.
func TestIntegrationReconcileOnStart(t *testing.T) {
	k := newAPI(t)
	const vni1, vni2 = 141, 142
	k.subnet("s1", "10.41.0.0/24", vni1)
	k.subnet("s2", "10.42.0.0/24", vni2)
	fab := logging.New()
	first := startAgent(t, agentConfig(t, k.node("a"), hostA, fab))
	k.attachment("a1", k.node("a"), "s1")
	k.address("a1", "10.41.0.1", vni1)
	k.attachment("a2", k.node("a"), "s1")
	k.address("a2", "10.41.0.2", vni1)
	k.attachment("a3", k.node("a"), "s2")
	k.address("a3", "10.42.0.3", vni2)
	k.remote("c1", k.node("c"), "s1", "10.41.0.11", vni1, hostC)
	k.remote("c2", k.node("c"), "s1", "10.41.0.12", vni1, hostC)
	k.remote("c3", k.node("c"), "s2", "10.42.0.13", vni2, hostC)
	poll.Until(t, settle, "the fabric holds everything", holds(fab, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni1, "10.41.0.1"), local(vni1, "10.41.0.2"), local(vni2, "10.42.0.3")},
		Remote: []fabric.RemoteAttachment{remote(vni1, "10.41.0.11", hostC), remote(vni1, "10.41.0.12", hostC), remote(vni2, "10.42.0.13", hostC)},
	}))
	first.stop(t)

	// While the agent is down: a local attachment goes, taking network 2
	// with it; another comes; remote ones go, come and move.
	k.delete("a3")
	k.delete("a2")
	k.attachment("a4", k.node("a"), "s1")
	k.address("a4", "10.41.0.4", vni1)
	k.delete("c1")
	k.hostIP("c2", hostD)
	k.remote("c4", k.node("c"), "s1", "10.41.0.14", vni1, hostC)
	// Something the agent never made: an orphan it must remove.
	if err := fab.CreateRemote(context.Background(), remote(vni1, "10.41.0.99", hostB)); err != nil {
		t.Fatal(err)
	}
	second := startAgent(t, agentConfig(t, k.node("a"), hostA, fab))
	poll.Until(t, settle, "the fabric matches", holds(fab, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni1, "10.41.0.1"), local(vni1, "10.41.0.4")},
		Remote: []fabric.RemoteAttachment{remote(vni1, "10.41.0.12", hostD), remote(vni1, "10.41.0.14", hostC)},
	}))
	poll.Until(t, settle, "a4 is ready", k.ready("a4", hostA))
	if n := second.counter(t, "kos_agent_reconciles_total", map[string]string{"reason": "start", "result": "ok"}); n != 1 {
		t.Errorf("%g reconciles on start, want 1", n)
	}
}

// TestIntegrationRemoteWithoutHost checks that the server keeps a remote
// attachment out of an agent's network informer while it has no host (its
// agent has not made its interface yet), and delivers it once it has one.
func TestIntegrationRemoteWithoutHost(t *testing.T) {
	k := newAPI(t)
	const vni = 151
	k.subnet("s1", "10.7.0.0/24", vni)
	fabA := logging.New()
	agentA := startAgent(t, agentConfig(t, k.node("a"), hostA, fabA))
	network := map[string]string{"informer": "network"}
	notified := func(want float64) func(context.Context) error {
		return func(context.Context) error {
			if n := agentA.counter(t, "kos_agent_attachment_notifications_total", network); n != want {
				return fmt.Errorf("the network informer had %g notifications, want %g", n, want)
			}
			return nil
		}
	}

	// a1's network informer starts once a1 has its address, before a1 has
	// its host: it hears of a1 once, when agent A writes that host.
	k.attachment("a1", k.node("a"), "s1")
	k.address("a1", "10.7.0.11", vni)
	poll.Until(t, settle, "a1 is ready", k.ready("a1", hostA))
	poll.Until(t, settle, "the network informer heard of a1's host", notified(1))

	// c1 has an address but no host; c2 has both. Events reach an informer
	// in the order of their writes, so once c2 is on the switch, c1 would
	// have been heard of had the server sent it.
	k.attachment("c1", k.node("c"), "s1")
	k.address("c1", "10.7.0.13", vni)
	k.remote("c2", k.node("c"), "s1", "10.7.0.14", vni, hostC)
	poll.Until(t, settle, "node A holds c2", holds(fabA, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni, "10.7.0.11")},
		Remote: []fabric.RemoteAttachment{remote(vni, "10.7.0.14", hostC)},
	}))
	if err := notified(2)(context.Background()); err != nil {
		t.Errorf("after c1 (no host) and c2 (with host): %v", err)
	}

	// c1 gets its host: it is delivered, once, and programmed.
	k.hostIP("c1", hostC)
	poll.Until(t, settle, "node A holds c1", holds(fabA, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni, "10.7.0.11")},
		Remote: []fabric.RemoteAttachment{remote(vni, "10.7.0.13", hostC), remote(vni, "10.7.0.14", hostC)},
	}))
	if err := notified(3)(context.Background()); err != nil {
		t.Errorf("after c1 got its host: %v", err)
	}

	// c1 loses its host: it leaves the informer's view and the switch.
	k.hostIP("c1", "")
	poll.Until(t, settle, "node A drops c1", holds(fabA, &fabric.Inventory{
		Local:  []fabric.LocalAttachment{local(vni, "10.7.0.11")},
		Remote: []fabric.RemoteAttachment{remote(vni, "10.7.0.14", hostC)},
	}))
}
