package e2e

// This file holds TestIntegrationOperate's KOS API outages: an agent that
// starts while kos-apiserver is away, and the API down with the way out
// (docs/operations.md), with the helpers that scale kos-apiserver and read
// the cluster while it is down.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/poll"
)

// testAgentStartsWithoutAPI stops kos-apiserver, deletes the agent pod of
// the second node and watches its new pod for longer than the liveness
// probe lets a failing agent run: it must not restart. Then kos-apiserver
// runs again, the agent becomes Ready, and its node's guests ping.
func (o *operate) testAgentStartsWithoutAPI(t *testing.T) {
	ctx := t.Context()
	node := o.env.Nodes[1].Name
	o.scaleAPIServer(t, 0)
	old := o.firstPod(t, kosinstall.AgentNamespace, "kos-agent", node)
	o.kubectl(t, "-n", kosinstall.AgentNamespace, "delete", "pod", old.Name, "--wait=false")

	// The new pod's agent starts while the API is away.
	var pod *corev1.Pod
	var started time.Time
	poll.Until(t, 2*time.Minute, "a new agent on node "+node+" running", func(ctx context.Context) error {
		p, err := o.agentPod(ctx, node)
		if err != nil {
			return err
		}
		if p.UID == old.UID {
			return errors.New("the old pod is still there")
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.Name == "kos-agent" && c.State.Running != nil {
				pod, started = p, c.State.Running.StartedAt.Time
				return nil
			}
		}
		return fmt.Errorf("pod %s: container kos-agent not running", p.Name)
	})
	// Beyond the liveness window, with a period's margin, the agent runs
	// on, not Ready, never restarted.
	hold := agentLivenessWindow + 15*time.Second
	for time.Since(started) < hold {
		p, err := o.kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.Name != "kos-agent" {
				continue
			}
			if c.RestartCount != 0 || c.State.Running == nil {
				t.Fatalf("agent pod %s, %s after its start with the KOS API away: restarts %d, state %+v, last %+v",
					p.Name, since(started), c.RestartCount, c.State, c.LastTerminationState)
			}
			if c.Ready {
				t.Errorf("agent pod %s is Ready with the KOS API away", p.Name)
			}
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("the agent ran %s with the KOS API away: not restarted, not Ready", since(started))
	figures.Duration(t, "operate-agent-running-without-api", time.Since(started))

	resumed := time.Now()
	o.scaleAPIServer(t, 2)
	figures.Duration(t, "operate-apiserver-ready-after-resume", time.Since(resumed))
	o.waitAgentBack(t, node, pod.CreationTimestamp.Time, 3*time.Minute)
	figures.Duration(t, "operate-agent-ready-after-resume", time.Since(resumed))
	p, err := o.agentPod(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	if n := containerRestarts(p, "kos-agent"); n != 0 {
		t.Errorf("agent pod %s restarted %d times", p.Name, n)
	}
	// The pod's Open vSwitch went with the old pod: the node's guests
	// get their new interfaces.
	for name, g := range o.guests {
		if g.Attachment.Spec.Node == node {
			o.plumb(t, name)
		}
	}
	checkPings(t, o.guestsOf("blue"), 3, 1, time.Minute)
	figures.Duration(t, "operate-agent-pinging-after-resume", time.Since(resumed))
}

// agentPod returns the agent pod of node.
func (o *operate) agentPod(ctx context.Context, node string) (*corev1.Pod, error) {
	pods, err := o.kube.CoreV1().Pods(kosinstall.AgentNamespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	for i, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			return &pods.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no agent pod on node %s", node)
}

// scaleAPIServer scales kos-apiserver to replicas and waits until that
// many of its pods run Ready (or none is left).
func (o *operate) scaleAPIServer(t *testing.T, replicas int) {
	t.Helper()
	o.kubectl(t, "-n", kosinstall.Namespace, "scale", "deploy", "kos-apiserver", fmt.Sprintf("--replicas=%d", replicas))
	poll.Until(t, 3*time.Minute, fmt.Sprintf("%d kos-apiserver pods Ready", replicas), func(ctx context.Context) error {
		pods, err := o.kube.CoreV1().Pods(kosinstall.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=kos-apiserver"})
		if err != nil {
			return err
		}
		ready := 0
		for _, p := range pods.Items {
			if podReady(&p) && p.DeletionTimestamp == nil {
				ready++
			}
		}
		if ready != replicas || (replicas == 0 && len(pods.Items) > 0) {
			return fmt.Errorf("%d pods, %d Ready", len(pods.Items), ready)
		}
		return nil
	})
}

// testAPIDown stops kos-apiserver. The guests keep pinging; kubectl's
// discovery fails; a namespace's deletion stalls until the APIService is
// deleted, as docs/operations.md says. Then kos-apiserver runs again, a
// channels daemon that repairs drift makes the APIService again, and every
// object is back.
func (o *operate) testAPIDown(t *testing.T) {
	ctx := t.Context()
	doomed := []string{doomedNamespace, emptyNamespace}
	for _, ns := range doomed {
		if _, err := o.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	orphan := &networkv1alpha1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Name: "orphan"},
		Spec:       networkv1alpha1.SubnetSpec{IPv4: "10.254.0.0/24", VNI: 4303},
	}
	if _, err := o.network.NetworkV1alpha1().Subnets(doomedNamespace).Create(ctx, orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := o.objects(t, standardNamespace)

	down := time.Now()
	o.scaleAPIServer(t, 0)
	poll.Until(t, time.Minute, "APIService "+kosinstall.APIService+" not Available", func(ctx context.Context) error {
		return o.apiServiceUnavailable(ctx)
	})
	// The data plane forwards on.
	checkPings(t, o.guestsOf("blue"), 3, 1, 30*time.Second)
	// kubectl's discovery leaves the group out.
	if out, err := o.kubectlErr(ctx, "api-resources"); err != nil || strings.Contains(out, "network.example.com") {
		t.Errorf("kubectl api-resources with kos-apiserver down: %v; want the KOS kinds left out:\n%s", err, out)
	}
	if out, err := o.kubectlErr(ctx, "get", "subnets", "-A"); err == nil {
		t.Errorf("kubectl get subnets succeeds with kos-apiserver down:\n%s", out)
	} else {
		t.Logf("with kos-apiserver down: %v", err)
	}

	// Namespace deletions stall: the namespace controller cannot
	// discover the group.
	deleted := time.Now()
	for _, ns := range doomed {
		o.kubectl(t, "delete", "namespace", ns, "--wait=false")
	}
	for _, name := range doomed {
		var cond corev1.NamespaceCondition
		poll.Until(t, 2*time.Minute, "namespace "+name+" to report its discovery failure", func(ctx context.Context) error {
			ns, err := o.kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range ns.Status.Conditions {
				if c.Type == corev1.NamespaceDeletionDiscoveryFailure && c.Status == corev1.ConditionTrue {
					cond = c
					return nil
				}
			}
			return fmt.Errorf("phase %s, conditions %+v", ns.Status.Phase, ns.Status.Conditions)
		})
		t.Logf("namespace %s stalls: %s: %s", name, cond.Reason, cond.Message)
	}
	time.Sleep(5 * time.Second)
	for _, name := range doomed {
		if _, err := o.kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("namespace %s %s after its deletion: %v, want it stalled", name, since(deleted), err)
		}
	}
	figures.Duration(t, "operate-namespace-stalled", time.Since(deleted))

	// The emergency step.
	emergency := time.Now()
	o.kubectl(t, "delete", "apiservice", kosinstall.APIService)
	for _, name := range doomed {
		poll.Until(t, 3*time.Minute, "namespace "+name+" gone", func(ctx context.Context) error {
			_, err := o.kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there (%v)", err)
		})
	}
	figures.Duration(t, "operate-namespaces-gone-after-apiservice-deleted", time.Since(emergency))
	out, err := o.kubectlErr(ctx, "get", "subnets", "-A")
	t.Logf("without the APIService: %v\n%s", err, out)
	checkPings(t, o.guestsOf("blue"), 3, 1, 30*time.Second)

	// The way back: kos-apiserver runs again (the cause fixed), and the
	// APIService is made again.
	back := time.Now()
	o.scaleAPIServer(t, 2)
	// As docs/operations.md says, channels apply of the installed
	// release does not make the APIService again; one pass that repairs
	// drift does.
	out = o.channelsCLI(t, append(append([]string{"apply", "channel"}, o.channels...), "--yes")...)
	_, err = o.agg.ApiregistrationV1().APIServices().Get(ctx, kosinstall.APIService, metav1.GetOptions{})
	if !strings.Contains(out, "No update required") || !apierrors.IsNotFound(err) {
		t.Errorf("channels apply --yes with the APIService deleted: APIService %v; want No update required and none made:\n%s", err, out)
	}
	out = o.channelsCLI(t, append(append([]string{"apply", "channel"}, o.channels...), "--yes", "--drift=repair")...)
	if !strings.Contains(out, "objects repaired") || strings.Contains(out, " 0 objects repaired") {
		t.Errorf("channels apply --yes --drift=repair with the APIService deleted repaired nothing:\n%s", out)
	}
	poll.Until(t, 3*time.Minute, "KOS ready again", func(ctx context.Context) error {
		return kosinstall.Ready(ctx, o.kube, o.agg)
	})
	figures.Duration(t, "operate-api-back", time.Since(back))
	figures.Duration(t, "operate-api-down-whole", time.Since(down))

	if diff := cmp.Diff(o.objects(t, standardNamespace), before); diff != "" {
		t.Errorf("the KOS objects after the API came back differ (-got +want):\n%s", diff)
	}
	// What the deleted namespace held is still in the KOS API, and goes
	// as docs/operations.md says.
	left := o.objects(t, doomedNamespace)
	if len(left) != 1 {
		t.Errorf("KOS objects of the namespace %s deleted without the APIService: %v, want its Subnet left", doomedNamespace, left)
	}
	o.kubectl(t, "-n", doomedNamespace, "delete", "networkattachments,subnets", "--all")
	if left := o.objects(t, doomedNamespace); len(left) != 0 {
		t.Errorf("KOS objects of the deleted namespace %s after deleting them: %v", doomedNamespace, left)
	}
	checkPings(t, o.guestsOf("blue"), 3, 1, 30*time.Second)
}

// apiServiceUnavailable returns nil once the KOS APIService is not
// Available.
func (o *operate) apiServiceUnavailable(ctx context.Context) error {
	svc, err := o.agg.ApiregistrationV1().APIServices().Get(ctx, kosinstall.APIService, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range svc.Status.Conditions {
		if c.Type == apiregistrationv1.Available && c.Status == apiregistrationv1.ConditionTrue {
			return errors.New("still Available")
		}
	}
	return nil
}

// kubectlErr runs the machine's kubectl with the admin kubeconfig and
// returns its output, and its error with its standard error.
func (o *operate) kubectlErr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", o.env.Kubeconfig}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
