package e2e

// This file holds the steps of TestIntegrationPods that restart, refuse and
// delete: kos-agent and ovs-vswitchd killed under pod traffic, pods that ask
// for what cannot be given, and deleted pods that leave nothing, with or
// without their node's agent.

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/controllers/ipam"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/poll"
)

// testPodsRestarts kills the kos-agent of the second blue pod's node while
// the first pings it: the pings go on (the switch keeps its flows); then
// ovs-vswitchd of that node: the pings come back by themselves, once the
// restarted daemon has the pod's veth port again and the agent its flows.
func (p *podsTest) testPodsRestarts(t *testing.T) {
	from, to := p.blue[0], p.blue[1]
	node := p.node(t, p.env.Nodes[1].Name)
	agent := p.firstPod(t, kosinstall.AgentNamespace, "kos-agent", node.Name)
	restarts := containerRestarts(agent, "kos-agent")
	pid := containerPID(t, agent, "kos-agent")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing kos-agent (PID %d) on %s: %v", pid, node.Name, err)
	}
	killed := time.Now()
	// While kubelet restarts it: 20 pings at 0.2 s, a few of which may
	// meet a loaded machine.
	out, err := p.execErr(t.Context(), from, pingBin, "-c", "20", "-i", "0.2", "-W", "1", p.ips[to].String())
	lost := pingLost(out)
	t.Logf("pings %s -> %s while %s's kos-agent restarts: %d of 20 lost (%v)", from, to, node.Name, lost, err)
	if lost < 0 || lost > 4 {
		t.Errorf("pings %s -> %s while the agent was down: %d of 20 lost, want traffic to go on:\n%s", from, to, lost, out)
	}
	poll.Until(t, 3*time.Minute, "kos-agent on "+node.Name+" restarted and Ready", func(ctx context.Context) error {
		pod, err := p.kube.CoreV1().Pods(kosinstall.AgentNamespace).Get(ctx, agent.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if containerRestarts(pod, "kos-agent") <= restarts || !podReady(pod) {
			return fmt.Errorf("restarts %d, ready %t", containerRestarts(pod, "kos-agent"), podReady(pod))
		}
		return nil
	})
	figures.Duration(t, "pods-agent-killed-to-ready", time.Since(killed))

	pid = vswitchdPID(t, node)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing ovs-vswitchd (PID %d) on %s: %v", pid, node.Name, err)
	}
	killed = time.Now()
	poll.Until(t, 3*time.Minute, fmt.Sprintf("%s to answer %s's ping after ovs-vswitchd died", to, from), func(ctx context.Context) error {
		_, err := p.execErr(ctx, from, pingBin, "-c", "1", "-W", "1", p.ips[to].String())
		return err
	})
	figures.Duration(t, "pods-vswitchd-killed-to-ping", time.Since(killed))
	// And the bulk path too.
	p.transfer(t, from, netip.AddrPortFrom(p.ips[to], 7777).String())
}

// pingLost returns how many of ping's echo requests went unanswered, from
// its summary line, or -1 without one.
func pingLost(out string) int {
	for line := range strings.SplitSeq(out, "\n") {
		var sent, received int
		if _, err := fmt.Sscanf(strings.TrimSpace(line), "%d packets transmitted, %d received", &sent, &received); err == nil {
			return sent - received
		}
	}
	return -1
}

// testPodsDelWithoutAgent freezes the kos-agent of the first blue pod's
// node (SIGSTOP: its socket accepts and never answers) and deletes the
// pod: kos-cni's DEL gives up on the agent and succeeds, so the pod goes,
// and its attachment with it.
func (p *podsTest) testPodsDelWithoutAgent(t *testing.T) {
	pod := p.blue[0]
	got, err := p.kube.CoreV1().Pods(podsNamespace).Get(t.Context(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agent := p.firstPod(t, kosinstall.AgentNamespace, "kos-agent", got.Spec.NodeName)
	pid := containerPID(t, agent, "kos-agent")
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stopping kos-agent (PID %d): %v", pid, err)
	}
	stopped := true
	resume := func() {
		if stopped {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			stopped = false
		}
	}
	defer resume()
	began := time.Now()
	p.deletePod(t, pod)
	poll.Until(t, 2*time.Minute, "pod "+pod+" to be gone while its agent is stopped", func(ctx context.Context) error {
		if _, err := p.kube.CoreV1().Pods(podsNamespace).Get(ctx, pod, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	figures.Duration(t, "pods-delete-without-agent", time.Since(began))
	resume()
	p.awaitNoAttachmentsUID(t, pod, string(got.UID), time.Minute)
}

// testPodsBadRequests starts pods whose networks cannot be given: a NAD
// naming a missing subnet, a malformed NAD, an address outside the subnet
// and one another pod holds. Each pod's events carry the plugin's message,
// and once the pods are deleted no attachment of theirs is left.
func (p *podsTest) testPodsBadRequests(t *testing.T) {
	p.createNAD(t, "missing-net", map[string]any{"cniVersion": "1.0.0", "type": "kos", "subnet": "nope"})
	p.createNAD(t, "nosubnet-net", map[string]any{"cniVersion": "1.0.0", "type": "kos"})
	node := p.env.Nodes[0].Name
	taken := p.ips[p.blue[1]]
	cases := []struct{ pod, networks, want string }{
		{"bad-missing", "missing-net", "subnet nope"},
		{"bad-config", "nosubnet-net", "names no subnet"},
		{"bad-outside", `[{"name":"blue-net","ips":["10.99.0.5/24"]}]`, "10.99.0.5"},
		{"bad-taken", fmt.Sprintf(`[{"name":"blue-net","ips":["%s/24"]}]`, taken), taken.String()},
	}
	for _, c := range cases {
		p.createPod(t, c.pod, node, c.networks)
	}
	for _, c := range cases {
		poll.Until(t, 3*time.Minute, "pod "+c.pod+"'s events to carry the plugin's message ("+c.want+")", func(ctx context.Context) error {
			events, err := p.kube.CoreV1().Events(podsNamespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + c.pod})
			if err != nil {
				return err
			}
			var seen []string
			for _, e := range events.Items {
				if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, c.want) {
					t.Logf("pod %s: %s: %s", c.pod, e.Reason, e.Message)
					return nil
				}
				seen = append(seen, e.Reason+": "+e.Message)
			}
			return fmt.Errorf("events: %q", seen)
		})
	}
	for _, c := range cases {
		p.deletePod(t, c.pod)
	}
	for _, c := range cases {
		p.awaitNoAttachments(t, c.pod, 30*time.Second)
	}
	// The taken address is still its owner's.
	if out, err := p.execErr(t.Context(), p.blue[0], pingBin, "-c", "1", "-W", "2", taken.String()); err != nil {
		t.Errorf("after a pod asked for %s, its owner %s does not answer: %v\n%s", taken, p.blue[1], err, out)
	}
}

// testPodsDelete deletes the third node's pod and checks that its
// attachment, its address's lock and the veth pair on the node are gone
// within 10 s.
func (p *podsTest) testPodsDelete(t *testing.T) {
	ctx := t.Context()
	pod := p.blue[2]
	atts := p.attachmentsOf(t, pod)
	if len(atts) != 1 {
		t.Fatalf("pod %s has %d attachments, want 1", pod, len(atts))
	}
	att := atts[0]
	ifc := att.Status.IfcName
	addr, err := netip.ParseAddr(att.Status.IPv4)
	if err != nil {
		t.Fatalf("attachment %s's address %q: %v", att.Name, att.Status.IPv4, err)
	}
	lockName := ipam.LockName(podsVNI, addr)
	node := p.node(t, att.Spec.Node)
	if _, err := exec.CommandContext(ctx, "ip", "-n", node.Netns, "link", "show", ifc).CombinedOutput(); err != nil {
		t.Fatalf("node %s has no interface %s for pod %s before the delete: %v", node.Name, ifc, pod, err)
	}
	began := time.Now()
	p.deletePod(t, pod)
	poll.Until(t, 2*time.Minute, "pod "+pod+" to be gone", func(ctx context.Context) error {
		if _, err := p.kube.CoreV1().Pods(podsNamespace).Get(ctx, pod, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	poll.Until(t, 10*time.Second, "pod "+pod+"'s attachment, lock and veth to be gone", func(ctx context.Context) error {
		if _, err := p.network.NetworkV1alpha1().NetworkAttachments(podsNamespace).Get(ctx, att.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("attachment %s: %v", att.Name, err)
		}
		if _, err := p.network.NetworkV1alpha1().IPLocks(podsNamespace).Get(ctx, lockName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("lock %s: %v", lockName, err)
		}
		if out, err := exec.CommandContext(ctx, "ip", "-n", node.Netns, "link", "show", ifc).CombinedOutput(); err == nil {
			return fmt.Errorf("node %s still has %s: %s", node.Name, ifc, out)
		}
		return nil
	})
	figures.Duration(t, "pods-delete-to-clean", time.Since(began))
}
