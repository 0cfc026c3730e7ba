package e2e

// This file holds TestIntegrationPods, its state and its first steps: the
// pods' image pushed, the pods started with their KOS interfaces, pings and
// a transfer between them, and another VNI's pod isolated. The injection
// step is in pods_injection_test.go, the restarts and deletes in
// pods_restarts_test.go, and how the steps handle pods in
// pods_objects_test.go.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/tools/e2e/podnet/report"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// The pods' test: what a user of KOS networks runs.
const (
	// podsNamespace holds the pods, their networks and subnets.
	podsNamespace = "e2e-pods"
	// podsCIDR is both subnets' block: two tenants may use the same
	// addresses in their own VNIs (podsVNI and the next), which no other
	// test of a cluster that also runs this one uses.
	podsCIDR = "10.254.0.0/24"
	podsVNI  = 4301
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

// TestIntegrationPods uses KOS as its users do, on the pods' shared
// cluster (three nodes that run Multus, the standard release installed
// from its tree): NetworkAttachmentDefinitions of type kos, pods that name
// them in k8s.v1.cni.cncf.io/networks, and traffic between the pods' KOS
// interfaces across nodes, with nothing set by hand (no MTU, no address,
// no route).
func TestIntegrationPods(t *testing.T) {
	began := time.Now()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := &podsTest{standard: sharedPods(t, root), ips: map[string]netip.Addr{}}
	figures.Duration(t, "pods-cluster-up", time.Since(began))
	p.deletedAtEnd(t, podsNamespace)
	requireNewestFits(t, p.kos)
	runStepsDumping(t, func() {
		p.dumpState()
		p.dumpNamespace(podsNamespace)
		p.dumpFabrics()
	}, []step{
		{"the pods' image pushed", p.testPushPodnet},
		{"pods get KOS interfaces", p.testPodsStart},
		{"pods ping across nodes", p.testPodsPing},
		{"64 MiB between pods on two nodes", p.testPodsTransfer},
		{"another VNI reaches nothing", p.testPodsIsolation},
		{"injected and spoofed frames reach nothing", p.testPodsInjection},
		{"kos-agent and ovs-vswitchd killed under pod traffic", p.testPodsRestarts},
		{"what a pod asks for wrongly fails its ADD and leaks nothing", p.testPodsBadRequests},
		{"a deleted pod leaves nothing", p.testPodsDelete},
		{"a pod goes while its node's agent does not answer", p.testPodsDelWithoutAgent},
	})
	figures.Duration(t, "pods-whole-test", time.Since(began))
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

// testPushPodnet pushes the pods' image, podnet and ping, to the
// cluster's registry.
func (p *podsTest) testPushPodnet(t *testing.T) {
	p.image = pushPodnet(t, p.env.Registry)
}

// pushPodnet builds the pods' image, podnet and ping, and pushes it to the
// cluster's registry; it returns the image's name.
func pushPodnet(t *testing.T, registry string) string {
	t.Helper()
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
	image := registry + "/e2e/podnet:1"
	ref, err := name.NewTag(image)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		t.Fatalf("pushing %s: %v", image, err)
	}
	t.Logf("pushed %s in %s", image, since(began))
	return image
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
	for name, vni := range map[string]uint32{"blue": podsVNI, "green": podsVNI + 1} {
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
	figures.Duration(t, "pods-created-to-running", time.Since(began))

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

func (p *podsTest) transfer(t *testing.T, from, to string) report.Transfer {
	t.Helper()
	out, err := p.execErr(t.Context(), from, podnetBin, "send", to, fmt.Sprint(transferBytes))
	var r report.Transfer
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
