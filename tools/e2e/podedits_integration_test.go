package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllers/podnetwork"
	"github.com/kos-sdn/kos/tools/e2e/podnet/report"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// The edits' second subnet, which the definition is edited to name.
const (
	editsSubnet = "cyan"
	editsCIDR   = "10.253.0.0/24"
	editsVNI    = podsVNI + 2
	// editsSegment is how many pings each run of ping sends, 0.2 s apart:
	// a run without a reply is 5 s in which a pod was cut off.
	editsSegment = 25
)

// TestIntegrationPodEdits is issue 32's proof on the pods' shared cluster
// (three nodes that run Multus, sharedPods): a pod on each node on one NetworkAttachmentDefinition of type
// kos, the first two pinging each other and holding TCP connections, while
// an operator makes the ordinary edits one after the other: the definition
// edited to another subnet, a kubectl delete of a pod's attachment and of
// the subnet (both refused), the first pod's node's agent killed and
// restarted by kubelet, the
// third pod deleted and its address taken by an attachment on another
// node. The pings go on through all of it (no 5 s without a reply; the loss
// is printed as figures pod-edits-*), the running pods keep their
// attachments, no node keeps a pod's veth that no running pod has, and a
// new pod gets the edited definition's subnet.
func TestIntegrationPodEdits(t *testing.T) {
	began := time.Now()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := &podsTest{standard: sharedPods(t, root), ips: map[string]netip.Addr{}}
	p.deletedAtEnd(t, podsNamespace)
	e := &editsTest{podsTest: p, uids: map[string]types.UID{}}
	runStepsDumping(t, func() {
		p.dumpState()
		p.dumpNamespace(podsNamespace)
		p.dumpFabrics()
	}, []step{
		{"the pods' image pushed", p.testPushPodnet},
		{"a pod on every node", e.testStart},
		{"pings and TCP between two nodes' pods", e.testTraffic},
		{"the definition edited to another subnet", e.testEditDefinition},
		{"a pod's attachment: delete refused", e.testDeleteAttachment},
		{"the subnet: delete refused", e.testDeleteSubnet},
		{"the first pod's agent restarted", e.testAgentRestart},
		{"the third pod's address taken on another node", e.testAddressElsewhere},
		{"a new pod gets the edited definition", e.testNewPod},
		{"no pod was cut off, no veth is left", e.testAftermath},
	})
	figures.Duration(t, "pod-edits-whole-test", time.Since(began))
}

// editsTest is TestIntegrationPodEdits's state.
type editsTest struct {
	*podsTest
	// pods are the pods on blue, one per node, in node order.
	pods []string
	// uids are the UIDs of the running pods' attachments before the
	// edits, by attachment name.
	uids map[string]types.UID
	// pingers ping between the first two pods.
	pingers []*pinger
	chats   []*chatWatch
}

// testStart makes subnets blue and cyan, a definition blue-net of blue,
// and a pod of it on every node, and waits until they run.
func (e *editsTest) testStart(t *testing.T) {
	ctx := t.Context()
	if _, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podsNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		name, cidr string
		vni        uint32
	}{{"blue", podsCIDR, podsVNI}, {editsSubnet, editsCIDR, editsVNI}} {
		subnet := &networkv1alpha1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: s.name}, Spec: networkv1alpha1.SubnetSpec{IPv4: s.cidr, VNI: s.vni}}
		if _, err := e.network.NetworkV1alpha1().Subnets(podsNamespace).Create(ctx, subnet, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating subnet %s: %v", s.name, err)
		}
	}
	e.createNAD(t, "blue-net", map[string]any{"cniVersion": "1.0.0", "type": "kos", "subnet": "blue"})
	for i, n := range e.env.Nodes {
		name := fmt.Sprintf("edit-%d", i+1)
		e.createPod(t, name, n.Name, "blue-net")
		e.pods = append(e.pods, name)
	}
	for _, name := range e.pods {
		e.awaitRunning(t, name, 3*time.Minute)
		e.ips[name] = e.kosAddress(t, name)
		atts := e.attachmentsOf(t, name)
		if len(atts) != 1 {
			t.Fatalf("pod %s has %d attachments, want 1", name, len(atts))
		}
		e.uids[atts[0].Name] = atts[0].UID
		t.Logf("pod %s: %s on %s, attachment %s", name, e.ips[name], atts[0].Spec.Node, atts[0].Name)
	}
}

// testTraffic starts pings both ways between the first two pods, and
// their TCP chats, each first answered.
func (e *editsTest) testTraffic(t *testing.T) {
	a, b := e.pods[0], e.pods[1]
	for _, pair := range [][2]string{{a, b}, {b, a}} {
		from, to := pair[0], pair[1]
		poll.Until(t, time.Minute, fmt.Sprintf("%s to answer %s's ping", to, from), func(ctx context.Context) error {
			_, err := e.execErr(ctx, from, pingBin, "-c", "1", "-W", "2", e.ips[to].String())
			return err
		})
		e.pingers = append(e.pingers, e.startPinger(from, to, editsSegment))
		e.chats = append(e.chats, e.startLongChat(t, from, e.ips[to]))
	}
}

// testEditDefinition edits blue-net to name subnet cyan: the running pods
// keep their attachments (same UIDs, in blue), each with an
// AttachmentKept event.
func (e *editsTest) testEditDefinition(t *testing.T) {
	ctx := t.Context()
	dyn, err := dynamic.NewForConfig(e.env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	nads := dyn.Resource(networkAttachmentDefinitions).Namespace(podsNamespace)
	nad, err := nads.Get(ctx, "blue-net", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	config, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "type": "kos", "subnet": editsSubnet})
	if err != nil {
		t.Fatal(err)
	}
	nad.Object["spec"] = map[string]any{"config": string(config)}
	if _, err := nads.Update(ctx, nad, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("editing blue-net: %v", err)
	}
	for _, pod := range e.pods {
		poll.Until(t, time.Minute, "pod "+pod+"'s "+podnetwork.ReasonAttachmentKept+" event", func(ctx context.Context) error {
			events, err := e.kube.CoreV1().Events(podsNamespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
			if err != nil {
				return err
			}
			for _, ev := range events.Items {
				if ev.Reason == podnetwork.ReasonAttachmentKept {
					t.Logf("pod %s: %s: %s", pod, ev.Reason, ev.Message)
					return nil
				}
			}
			return fmt.Errorf("%d events, none %s", len(events.Items), podnetwork.ReasonAttachmentKept)
		})
	}
	e.checkKept(t, "after the definition's edit")
}

// testDeleteAttachment deletes the first pod's attachment as the cluster's
// administrator: KOS refuses, saying why, and the attachment stays.
func (e *editsTest) testDeleteAttachment(t *testing.T) {
	att := e.attachmentsOf(t, e.pods[0])[0]
	out, err := e.kubectl(t, "-n", podsNamespace, "delete", "networkattachments.network.example.com", att.Name, "--wait=false")
	t.Logf("kubectl delete networkattachment %s: %v: %s", att.Name, err, strings.TrimSpace(out))
	if err == nil {
		t.Errorf("deleting pod %s's attachment %s succeeded, want it refused", e.pods[0], att.Name)
	}
	e.checkKept(t, "after the attachment's delete")
}

// testDeleteSubnet deletes subnet blue: refused, as its attachments use
// it.
func (e *editsTest) testDeleteSubnet(t *testing.T) {
	out, err := e.kubectl(t, "-n", podsNamespace, "delete", "subnets.network.example.com", "blue", "--wait=false")
	t.Logf("kubectl delete subnet blue: %v: %s", err, strings.TrimSpace(out))
	if err == nil || !strings.Contains(out, "in use") {
		t.Errorf("deleting subnet blue: %v, %q; want it refused as in use", err, out)
	}
	if _, err := e.network.NetworkV1alpha1().Subnets(podsNamespace).Get(t.Context(), "blue", metav1.GetOptions{}); err != nil {
		t.Errorf("subnet blue after its refused delete: %v", err)
	}
	e.checkKept(t, "after the subnet's delete")
}

// testAgentRestart kills the kos-agent of the first pod's node (SIGKILL),
// and waits until kubelet has restarted it and it is Ready. The agent's
// container alone: deleting the agent's pod would also restart the Open
// vSwitch that runs in it on these nodes, which stops the datapath itself
// (the chaos step of TestIntegrationStandardRelease measures that).
func (e *editsTest) testAgentRestart(t *testing.T) {
	node := e.attachmentsOf(t, e.pods[0])[0].Spec.Node
	agent := e.firstPod(t, kosinstall.AgentNamespace, "kos-agent", node)
	restarts := containerRestarts(agent, "kos-agent")
	pid := containerPID(t, agent, "kos-agent")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing kos-agent (PID %d) on %s: %v", pid, node, err)
	}
	killed := time.Now()
	poll.Until(t, 3*time.Minute, "kos-agent on "+node+" restarted and Ready", func(ctx context.Context) error {
		pod, err := e.kube.CoreV1().Pods(kosinstall.AgentNamespace).Get(ctx, agent.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if containerRestarts(pod, "kos-agent") <= restarts || !podReady(pod) {
			return fmt.Errorf("restarts %d, ready %t", containerRestarts(pod, "kos-agent"), podReady(pod))
		}
		return nil
	})
	figures.Duration(t, "pod-edits-agent-killed-to-ready", time.Since(killed))
	e.checkKept(t, "after the agent's restart")
}

// testAddressElsewhere deletes the third pod and, once its attachment is
// gone, creates an attachment on the first node that asks for the third
// pod's address: it becomes ready there, and the third node keeps no veth
// of the pod.
func (e *editsTest) testAddressElsewhere(t *testing.T) {
	ctx := t.Context()
	pod := e.pods[2]
	old := e.attachmentsOf(t, pod)[0]
	e.deletePod(t, pod)
	poll.Until(t, 2*time.Minute, "pod "+pod+" and its attachment to be gone", func(ctx context.Context) error {
		if _, err := e.kube.CoreV1().Pods(podsNamespace).Get(ctx, pod, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod still there (%v)", err)
		}
		if _, err := e.network.NetworkV1alpha1().NetworkAttachments(podsNamespace).Get(ctx, old.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("attachment %s still there (%v)", old.Name, err)
		}
		return nil
	})
	delete(e.uids, old.Name)
	e.pods = e.pods[:2]
	node := e.env.Nodes[0].Name
	att := &networkv1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "moved"},
		Spec:       networkv1alpha1.NetworkAttachmentSpec{Node: node, Subnet: "blue", IPv4: old.Status.IPv4},
	}
	if _, err := e.network.NetworkV1alpha1().NetworkAttachments(podsNamespace).Create(ctx, att, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating attachment moved with %s: %v", old.Status.IPv4, err)
	}
	poll.Until(t, 2*time.Minute, "attachment moved to be ready on "+node+" with "+old.Status.IPv4, func(ctx context.Context) error {
		got, err := e.network.NetworkV1alpha1().NetworkAttachments(podsNamespace).Get(ctx, "moved", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := attachmentReady(got); err != nil {
			return err
		}
		if got.Status.IPv4 != old.Status.IPv4 {
			return fmt.Errorf("address %s, want %s", got.Status.IPv4, old.Status.IPv4)
		}
		return nil
	})
	e.checkKept(t, "after the address moved")
}

// testNewPod starts a pod on blue-net, which now names cyan: its
// attachment is in cyan.
func (e *editsTest) testNewPod(t *testing.T) {
	const pod = "edit-new"
	e.createPod(t, pod, e.env.Nodes[2].Name, "blue-net")
	e.awaitRunning(t, pod, 3*time.Minute)
	atts := e.attachmentsOf(t, pod)
	if len(atts) != 1 || atts[0].Spec.Subnet != editsSubnet || !netip.MustParsePrefix(editsCIDR).Contains(netip.MustParseAddr(atts[0].Status.IPv4)) {
		t.Fatalf("pod %s's attachments: %+v; want one in %s (%s)", pod, atts, editsSubnet, editsCIDR)
	}
	t.Logf("pod %s: attachment %s in %s with %s", pod, atts[0].Name, atts[0].Spec.Subnet, atts[0].Status.IPv4)
	e.pods = append(e.pods, pod)
}

// testAftermath stops the traffic and checks it: no run of pings went
// unanswered, at most a tenth of the pings were lost, every TCP
// connection survived; and every node's pod veths
// are those of the running pods' attachments there.
func (e *editsTest) testAftermath(t *testing.T) {
	sent, lost, cut := 0, 0, 0
	for _, p := range e.pingers {
		st := p.stop()
		t.Logf("pings %s -> %s: %d sent, %d lost, %d runs of %d without a reply", p.from, p.to, st.sent, st.lost, st.cut, editsSegment)
		sent += st.sent
		lost += st.lost
		cut += st.cut
		if st.cut > 0 {
			t.Errorf("pings %s -> %s: %d runs of %d pings (5 s each) without a reply: the pod was cut off", p.from, p.to, st.cut, editsSegment)
		}
		if st.sent == 0 {
			t.Errorf("pings %s -> %s: none sent", p.from, p.to)
		}
	}
	figures.Count(t, "pod-edits-pings-lost", lost, fmt.Sprintf("of %d over %d pairs at one per 0.2 s", sent, len(e.pingers)))
	if lost*10 > sent {
		t.Errorf("pings: %d of %d lost, want at most a tenth: no edit may stop a running pod's traffic", lost, sent)
	}
	figures.Count(t, "pod-edits-cut-off-runs", cut, fmt.Sprintf("runs of %d pings without a reply", editsSegment))
	checkChats(t, "pod-edits", e.chats)

	// Each node's host ends of pods' veths are those of the running
	// pods' attachments on it.
	want := map[string][]string{}
	for _, pod := range e.pods {
		for _, att := range e.attachmentsOf(t, pod) {
			want[att.Spec.Node] = append(want[att.Spec.Node], att.Status.IfcName)
		}
	}
	for _, n := range e.env.Nodes {
		poll.Until(t, time.Minute, "node "+n.Name+"'s pod veths to be its running pods'", func(ctx context.Context) error {
			out, err := exec.CommandContext(ctx, "ip", "-n", n.Netns, "-o", "link", "show", "type", "veth").CombinedOutput()
			if err != nil {
				return fmt.Errorf("ip link: %v: %s", err, out)
			}
			var got []string
			for line := range strings.SplitSeq(string(out), "\n") {
				f := strings.Fields(line)
				if len(f) < 2 {
					continue
				}
				name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
				if strings.HasPrefix(name, "kos") {
					got = append(got, name)
				}
			}
			slices.Sort(got)
			w := slices.Clone(want[n.Name])
			slices.Sort(w)
			if !slices.Equal(got, w) {
				return fmt.Errorf("veths %v, want %v", got, w)
			}
			return nil
		})
	}
}

// checkKept checks that the running pods still have the attachments they
// started with, in blue, and that each pinger's pings are answered.
func (e *editsTest) checkKept(t *testing.T, when string) {
	t.Helper()
	for _, pod := range e.pods {
		for _, att := range e.attachmentsOf(t, pod) {
			if uid, ok := e.uids[att.Name]; ok && (uid != att.UID || att.Spec.Subnet != "blue") {
				t.Errorf("%s: pod %s's attachment %s is UID %s in %s, want %s in blue: it was replaced", when, pod, att.Name, att.UID, att.Spec.Subnet, uid)
			}
		}
	}
	for _, p := range e.pingers {
		poll.Until(t, 30*time.Second, fmt.Sprintf("%s: %s's pings to %s answered", when, p.from, p.to), func(context.Context) error {
			return p.answeredSince(time.Now().Add(-5 * time.Second))
		})
	}
}

// startLongChat is startChat for a chat that outlives the step that
// starts it: it stops when checkChats stops it, or when the whole test
// ends.
func (e *editsTest) startLongChat(t *testing.T, pod string, to netip.Addr) *chatWatch {
	t.Helper()
	o := report.ChatOptions{Kubeconfig: e.env.Kubeconfig, Namespace: podsNamespace, Pod: pod, Binary: podnetBin, Conns: chatConns, Every: chatEvery, For: 20 * time.Minute,
		To: []netip.AddrPort{netip.AddrPortFrom(to, echoPort)}}
	w, err := report.StartChat(o)
	if err != nil {
		t.Fatal(err)
	}
	e.t.Cleanup(func() { w.Stop() })
	poll.Until(t, time.Minute, "pod "+pod+"'s chat to have an echo on every connection", func(context.Context) error {
		if err := w.EndedEarly(); err != nil {
			return err
		}
		return w.Report().Settled()
	})
	return &chatWatch{pod: pod, ChatWatch: w}
}

// kubectl runs kubectl with the cluster's administrator's kubeconfig and
// returns what it wrote.
func (e *editsTest) kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", e.env.Kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}
