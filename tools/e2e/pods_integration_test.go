package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllers/ipam"
	"github.com/kos-sdn/kos/components/controllers/podnetwork"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// The pods' test: what a user of KOS networks runs.
const (
	// podsNamespace holds the pods, their networks and subnets.
	podsNamespace = "e2e-pods"
	// podsCIDR is both subnets' block: two tenants may use the same
	// addresses in their own VNIs.
	podsCIDR = "10.252.0.0/24"
	// podnetPort is where each pod's podnet serves its TCP sink.
	podnetPort = "7777"
	// transferBytes is the size of the TCP transfer between pods on two
	// nodes: 64 MiB, with no MTU set by the test.
	transferBytes = 64 << 20
	// podsIfName is the interface Multus names a pod's first extra network.
	podsIfName = "net1"
)

// The programs of the pods' image.
var (
	podnetBin = images.BinDir + "/podnet"
	pingBin   = "/usr/bin/ping"
)

// networkAttachmentDefinitions is the resource of Multus's
// NetworkAttachmentDefinitions.
var networkAttachmentDefinitions = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// TestIntegrationPods installs the standard release, as
// TestIntegrationStandardRelease does, on three nodes that run Multus, and
// uses KOS as its users do: NetworkAttachmentDefinitions of type kos, pods
// that name them in k8s.v1.cni.cncf.io/networks, and traffic between the
// pods' KOS interfaces across nodes, with nothing set by hand (no MTU, no
// address, no route).
func TestIntegrationPods(t *testing.T) {
	began := time.Now()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	env := startCluster(t, false, true)
	figure(t, "pods-cluster-up", time.Since(began))

	p := &podsTest{standard: newStandard(t, env, root), ips: map[string]netip.Addr{}}
	runStepsDumping(t, func() {
		p.dumpState()
		p.dumpNamespace(podsNamespace)
		p.dumpFabrics()
	}, []step{
		{"images pushed and the release published", p.testPublishPods},
		{"install from s3", p.testInstall},
		{"pods get KOS interfaces", p.testPodsStart},
		{"pods ping across nodes", p.testPodsPing},
		{"64 MiB between pods on two nodes", p.testPodsTransfer},
		{"another VNI reaches nothing", p.testPodsIsolation},
		{"what a pod asks for wrongly fails its ADD and leaks nothing", p.testPodsBadRequests},
		{"a deleted pod leaves nothing", p.testPodsDelete},
	})
	figure(t, "pods-whole-test", time.Since(began))
}

// podsTest is TestIntegrationPods's state.
type podsTest struct {
	*standard
	// image is the podnet image, in the cluster's registry.
	image string
	// blue are the pods on subnet blue, one per node, in node order.
	blue []string
	// green is the pod on subnet green.
	green string
	// ips are the pods' addresses on their KOS networks, by pod.
	ips map[string]netip.Addr
}

// testPublishPods publishes the release (testPublish) and pushes the
// pods' image, podnet and ping, to the cluster's registry.
func (p *podsTest) testPublishPods(t *testing.T) {
	p.testPublish(t)
	ctx := t.Context()
	began := time.Now()
	dir := t.TempDir()
	goFiles, err := images.BuildGo(ctx, images.GoOptions{OutDir: filepath.Join(dir, "bin")}, "github.com/kos-sdn/kos/tools/e2e/podnet")
	if err != nil {
		t.Fatal(err)
	}
	hostFiles, err := images.HostBinaries(ctx, pingBin)
	if err != nil {
		t.Fatal(err)
	}
	layer, err := images.Layer(append(goFiles, hostFiles...))
	if err != nil {
		t.Fatal(err)
	}
	img, err := images.New(images.Config{Entrypoint: []string{podnetBin}, Cmd: []string{"serve", podnetPort}}, layer)
	if err != nil {
		t.Fatal(err)
	}
	p.image = p.env.Registry + "/e2e/podnet:1"
	ref, err := name.NewTag(p.image)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		t.Fatalf("pushing %s: %v", p.image, err)
	}
	t.Logf("pushed %s in %s", p.image, since(began))
}

// testPodsStart makes subnets blue and green (one CIDR block, two VNIs),
// a NetworkAttachmentDefinition of type kos for each, a pod on blue on
// every node and one on green, and waits until they run with their KOS
// interfaces.
func (p *podsTest) testPodsStart(t *testing.T) {
	ctx := t.Context()
	if _, err := p.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podsNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, vni := range map[string]uint32{"blue": 4201, "green": 4202} {
		subnet := &networkv1alpha1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkv1alpha1.SubnetSpec{IPv4: podsCIDR, VNI: vni}}
		if _, err := p.network.NetworkV1alpha1().Subnets(podsNamespace).Create(ctx, subnet, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating subnet %s: %v", name, err)
		}
		p.createNAD(t, name+"-net", map[string]any{"cniVersion": "1.0.0", "type": "kos", "subnet": name})
	}
	began := time.Now()
	for i, n := range p.env.Nodes {
		name := fmt.Sprintf("blue-%d", i+1)
		p.createPod(t, name, n.Name, "blue-net")
		p.blue = append(p.blue, name)
	}
	// green on the second node, beside a blue pod: the VNIs share that
	// node's switch.
	p.green = "green-1"
	p.createPod(t, p.green, p.env.Nodes[1].Name, "green-net")
	for _, name := range append(slices.Clone(p.blue), p.green) {
		p.awaitRunning(t, name, 3*time.Minute)
	}
	figure(t, "pods-created-to-running", time.Since(began))

	// The interface holding the node's address (bridge br-ul of the
	// userspace agent) carries the underlay's MTU; the pods' interfaces
	// get 50 bytes less, which the test does not set.
	want := p.underlayMTU(t, p.env.Nodes[0]) - fabric.VXLANOverhead
	for _, name := range append(slices.Clone(p.blue), p.green) {
		p.ips[name] = p.kosAddress(t, name)
		out := p.exec(t, name, podnetBin, "addr", podsIfName)
		fields := strings.Fields(out)
		if len(fields) < 2 || fields[0] != fmt.Sprint(want) || fields[1] != netip.PrefixFrom(p.ips[name], netip.MustParsePrefix(podsCIDR).Bits()).String() {
			t.Errorf("pod %s: %s is %q, want MTU %d and address %s/%d", name, podsIfName, strings.TrimSpace(out), want, p.ips[name], netip.MustParsePrefix(podsCIDR).Bits())
		}
		t.Logf("pod %s: %s %s", name, podsIfName, strings.TrimSpace(out))
	}
}

// testPodsPing pings every blue pod from every other.
func (p *podsTest) testPodsPing(t *testing.T) {
	for _, from := range p.blue {
		for _, to := range p.blue {
			if from == to {
				continue
			}
			began := time.Now()
			poll.Until(t, time.Minute, fmt.Sprintf("%s to answer %s's ping", to, from), func(ctx context.Context) error {
				_, err := p.execErr(ctx, from, pingBin, "-c", "1", "-W", "2", p.ips[to].String())
				return err
			})
			if out, err := p.execErr(t.Context(), from, pingBin, "-c", "3", "-i", "0.2", "-W", "2", p.ips[to].String()); err != nil {
				t.Errorf("ping %s -> %s (%s) after the first reply (%s): %v\n%s", from, to, p.ips[to], since(began), err, out)
			}
		}
	}
}

// testPodsTransfer sends 64 MiB from the first node's pod to the second's
// over KOS and checks it arrived intact; then the same over the pods'
// primary network (the nodes' underlay, unencapsulated), for the ratio.
func (p *podsTest) testPodsTransfer(t *testing.T) {
	from, to := p.blue[0], p.blue[1]
	kos := p.transfer(t, from, netip.AddrPortFrom(p.ips[to], 7777).String())
	pod, err := p.kube.CoreV1().Pods(podsNamespace).Get(t.Context(), to, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	primary := p.transfer(t, from, pod.Status.PodIP+":"+podnetPort)
	t.Logf("figure pods-tcp-kos %.1f MB/s", kos.MBps)
	t.Logf("figure pods-tcp-primary %.1f MB/s", primary.MBps)
	t.Logf("figure pods-tcp-ratio %.2f (KOS over the primary network, one run, same tool)", kos.MBps/primary.MBps)
}

// transferReport is podnet send's report.
type transferReport struct {
	Bytes    int64   `json:"bytes"`
	Sent     string  `json:"sent"`
	Received string  `json:"received"`
	Seconds  float64 `json:"seconds"`
	MBps     float64 `json:"MBps"`
}

func (p *podsTest) transfer(t *testing.T, from, to string) transferReport {
	t.Helper()
	out, err := p.execErr(t.Context(), from, podnetBin, "send", to, fmt.Sprint(transferBytes))
	var r transferReport
	if jerr := json.Unmarshal([]byte(out), &r); jerr != nil || err != nil {
		t.Fatalf("sending %d bytes %s -> %s: %v (report %q)", transferBytes, from, to, err, out)
	}
	if r.Sent != r.Received {
		t.Fatalf("sending %d bytes %s -> %s: sent SHA-256 %s, the sink got %s", transferBytes, from, to, r.Sent, r.Received)
	}
	t.Logf("%s -> %s: %d bytes intact in %.1f s (%.1f MB/s)", from, to, r.Bytes, r.Seconds, r.MBps)
	return r
}

// testPodsIsolation checks that the green pod, on a node that has a blue
// pod, reaches none of the blue pods' addresses (green has none of them)
// while it shares their CIDR block.
func (p *podsTest) testPodsIsolation(t *testing.T) {
	checked := 0
	for _, b := range p.blue {
		if p.ips[b] == p.ips[p.green] {
			continue
		}
		out, err := p.execErr(t.Context(), p.green, pingBin, "-c", "3", "-i", "0.2", "-W", "1", p.ips[b].String())
		if err == nil {
			t.Errorf("pod %s (green) reached %s of %s (blue):\n%s", p.green, p.ips[b], b, out)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("the isolation check checked nothing: green's address is every blue pod's")
	}
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
	lockName := ipam.LockName(4201, addr)
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
	figure(t, "pods-delete-to-clean", time.Since(began))
}

// underlayMTU returns the MTU of the node's interface that holds its
// address.
func (p *podsTest) underlayMTU(t *testing.T, n *cluster.Node) int {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "ip", "-n", n.Netns, "-o", "-4", "addr", "show", "to", n.IP.String()+"/32").CombinedOutput()
	fields := strings.Fields(string(out))
	if err != nil || len(fields) < 2 {
		t.Fatalf("node %s: the interface holding %s: %v: %s", n.Name, n.IP, err, out)
	}
	ifc := fields[1]
	out, err = exec.CommandContext(t.Context(), "ip", "-n", n.Netns, "-o", "link", "show", ifc).CombinedOutput()
	if err != nil {
		t.Fatalf("node %s: ip link show %s: %v: %s", n.Name, ifc, err, out)
	}
	f := strings.Fields(string(out))
	for i := range f[:len(f)-1] {
		if f[i] == "mtu" {
			v, err := strconv.Atoi(f[i+1])
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("node %s: no MTU in %q", n.Name, out)
	return 0
}

// createNAD creates a NetworkAttachmentDefinition of the config.
func (p *podsTest) createNAD(t *testing.T, name string, config map[string]any) {
	t.Helper()
	data, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	nad := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1",
		"kind":       "NetworkAttachmentDefinition",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"config": string(data)},
	}}
	dyn, err := dynamic.NewForConfig(p.env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(networkAttachmentDefinitions).Namespace(podsNamespace).Create(t.Context(), nad, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating NetworkAttachmentDefinition %s: %v", name, err)
	}
}

// createPod creates a podnet pod on node with the networks annotation.
func (p *podsTest) createPod(t *testing.T, name, node, networks string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"k8s.v1.cni.cncf.io/networks": networks}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			AutomountServiceAccountToken:  new(bool),
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name:            "podnet",
				Image:           p.image,
				ImagePullPolicy: corev1.PullIfNotPresent,
			}},
		},
	}
	if _, err := p.kube.CoreV1().Pods(podsNamespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
}

func (p *podsTest) deletePod(t *testing.T, name string) {
	t.Helper()
	if err := p.kube.CoreV1().Pods(podsNamespace).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting pod %s: %v", name, err)
	}
}

func (p *podsTest) awaitRunning(t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	poll.Until(t, timeout, "pod "+name+" to run", func(ctx context.Context) error {
		pod, err := p.kube.CoreV1().Pods(podsNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("%s: %v", pod.Status.Phase, pod.Status.Conditions)
	})
}

// kosAddress returns the pod's address on its KOS interface, as Multus
// reports it in the pod's network-status annotation.
func (p *podsTest) kosAddress(t *testing.T, pod string) netip.Addr {
	t.Helper()
	got, err := p.kube.CoreV1().Pods(podsNamespace).Get(t.Context(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var statuses []struct {
		Name      string   `json:"name"`
		Interface string   `json:"interface"`
		IPs       []string `json:"ips"`
	}
	raw := got.Annotations["k8s.v1.cni.cncf.io/network-status"]
	if err := json.Unmarshal([]byte(raw), &statuses); err != nil {
		t.Fatalf("pod %s's network-status %q: %v", pod, raw, err)
	}
	for _, s := range statuses {
		if s.Interface == podsIfName && len(s.IPs) > 0 {
			a, err := netip.ParseAddr(s.IPs[0])
			if err != nil {
				t.Fatal(err)
			}
			if !netip.MustParsePrefix(podsCIDR).Contains(a) {
				t.Fatalf("pod %s's %s has %s, outside %s", pod, podsIfName, a, podsCIDR)
			}
			return a
		}
	}
	t.Fatalf("pod %s's network-status names no %s with an address: %s", pod, podsIfName, raw)
	return netip.Addr{}
}

// attachmentsOf returns the NetworkAttachments that stand for the pod's
// interfaces.
func (p *podsTest) attachmentsOf(t *testing.T, pod string) []networkv1alpha1.NetworkAttachment {
	t.Helper()
	got, err := p.kube.CoreV1().Pods(podsNamespace).Get(t.Context(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.attachmentsOfUID(t, string(got.UID))
}

func (p *podsTest) attachmentsOfUID(t *testing.T, uid string) []networkv1alpha1.NetworkAttachment {
	t.Helper()
	list, err := p.network.NetworkV1alpha1().NetworkAttachments(podsNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: podnetwork.PodUIDLabel + "=" + uid})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// awaitNoAttachments waits until no attachment names the deleted pod.
func (p *podsTest) awaitNoAttachments(t *testing.T, pod string, timeout time.Duration) {
	t.Helper()
	poll.Until(t, timeout, "no attachment of pod "+pod+" to be left", func(ctx context.Context) error {
		list, err := p.network.NetworkV1alpha1().NetworkAttachments(podsNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, a := range list.Items {
			for _, o := range a.OwnerReferences {
				if o.Kind == "Pod" && o.Name == pod {
					return fmt.Errorf("attachment %s is left", a.Name)
				}
			}
		}
		return nil
	})
}

// exec runs a command in the pod and returns its output.
func (p *podsTest) exec(t *testing.T, pod string, command ...string) string {
	t.Helper()
	out, err := p.execErr(t.Context(), pod, command...)
	if err != nil {
		t.Fatalf("in pod %s: %v\n%s", pod, err, out)
	}
	return out
}

// execErr runs a command in the pod with kubectl exec, as a user does.
func (p *podsTest) execErr(ctx context.Context, pod string, command ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	args := append([]string{"--kubeconfig", p.env.Kubeconfig, "-n", podsNamespace, "exec", pod, "--"}, command...)
	out, err := exec.CommandContext(ctx, "kubectl", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl exec %s -- %s: %w", pod, strings.Join(command, " "), err)
	}
	return string(out), nil
}
