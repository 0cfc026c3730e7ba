package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kos-sdn/kos/components/agent/cniserver"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/cni"
	"github.com/kos-sdn/kos/components/controllermanager"
	"github.com/kos-sdn/kos/components/controllers/podnetwork"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// debianCNIPlugins is where Debian's containernetworking-plugins puts the
// reference plugins; the test's runtime finds its primary network there.
const debianCNIPlugins = "/usr/lib/cni"

// TestIntegrationPodChain runs the whole chain that gives a pod its KOS
// interface, with everything real but kubelet: kube-apiserver with the
// NetworkAttachmentDefinition CRD, kos-apiserver, kos-controller-manager's
// IPAM and pod-network controllers, an agent with its CNI server on Open
// vSwitch, Multus's thin plugin and kos-cni. The test is the container
// runtime: for two pods bound to the agent's node by hand, it runs Multus
// as containerd does, with a loopback-only primary network and kos-cni as
// the plugin "kos". Each pod gets net1 with its attachment's address and
// MTU, they ping each other, a repeated ADD (to kos-cni, as Multus
// delegates it) changes nothing, a pod that asks for a taken address fails
// its ADD at once with IPAM's message, DEL removes net1, and DEL again
// succeeds.
func TestIntegrationPodChain(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	if _, err := os.Stat(filepath.Join(debianCNIPlugins, "loopback")); err != nil {
		t.Fatalf("the runtime's primary network needs the loopback plugin: %v", err)
	}
	env := testenv.Shared(t)
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	installNADCRD(t, dyn)
	k := newAPI(t)
	const vni = 232
	k.subnet("blue", "10.232.0.0/24", vni)
	// Started after the subnet, so stopped before the subnet's cleanup,
	// which would otherwise race it making the pods' attachments anew.
	startControllerManager(t)

	inst := ovsenv.StartT(t, ovsenv.Options{})
	cfg := agentConfig(t, k.node("a"), hostA, ovs.New(ovs.Config{RunDir: inst.RunDir, DatapathType: "netdev", MTU: podMTU}))
	cfg.CNI = cniserver.Config{
		Socket:            filepath.Join(shortDir(t), "cni.sock"),
		Wait:              time.Minute,
		HostNetns:         "/run/netns/" + inst.Netns.Name,
		NoChecksumOffload: true,
	}
	startAgent(t, cfg)

	blue := `{"cniVersion":"1.0.0","type":"kos","subnet":"blue"}`
	createNAD(t, dyn.Resource(podnetwork.NetworkAttachmentDefinitions).Namespace(k.ns), "blue", blue)
	// Without kube-controller-manager, no one makes the ServiceAccount that
	// admission wants pods to have.
	if _, err := kube.CoreV1().ServiceAccounts(k.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rt := newRuntime(t, env.Kubeconfig)
	// kos-cni reaches the test agent's socket, not the node's.
	rt.socket = cfg.CNI.Socket

	newPod := func(name, networks string) *podSandbox {
		t.Helper()
		p, err := kube.CoreV1().Pods(k.ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{podnetwork.NetworksAnnotation: networks}},
			Spec: corev1.PodSpec{
				NodeName:   k.node("a"),
				Containers: []corev1.Container{{Name: "main", Image: "kos.example.com/pause:never-pulled"}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating pod %s: %v", name, err)
		}
		return &podSandbox{pod: p, netns: ovsenv.NetnsT(t), containerID: "sandbox-" + name}
	}
	pods := []*podSandbox{newPod("web-0", "blue"), newPod("web-1", "blue")}

	// ADD: each pod gets net1 as its attachment says.
	addrs := make([]netip.Addr, len(pods))
	for i, p := range pods {
		began := time.Now()
		if out, err := rt.run(ctx, "ADD", p); err != nil {
			t.Fatalf("ADD of %s: %v\n%s\nMultus's log:\n%s", p.pod.Name, err, out, rt.log())
		}
		t.Logf("ADD of %s through Multus took %s", p.pod.Name, time.Since(began).Round(time.Millisecond))
		addrs[i] = checkNet1(ctx, t, k, p)
	}
	pings := func(step string) {
		t.Helper()
		for i, p := range pods {
			dst := addrs[1-i]
			poll.Until(t, settle, fmt.Sprintf("%s: %s pings %s", step, p.pod.Name, dst), func(ctx context.Context) error {
				if got, err := p.netns.Ping(ctx, dst, 1, time.Second); err != nil || got != 1 {
					return fmt.Errorf("%d of 1 replies (%v)", got, err)
				}
				return nil
			})
			if got, err := p.netns.Ping(ctx, dst, 3, time.Second); err != nil || got != 3 {
				t.Errorf("%s: ping from %s to %s: %d of 3 replies (%v), want 3", step, p.pod.Name, dst, got, err)
			}
		}
	}
	pings("added")

	// A repeated ADD of the same sandbox leaves net1 as it was. It goes to
	// kos-cni straight, as Multus sends it: Multus itself refuses an ADD
	// for an interface name the sandbox has (validateIfName), and then
	// deletes what it added; runtimes send no second ADD without a DEL.
	delegated := `{"cniVersion":"1.0.0","name":"blue","type":"kos","subnet":"blue"}`
	if out, err := rt.runPlugin(ctx, "ADD", pods[0], "kos", "net1", delegated); err != nil {
		t.Fatalf("second ADD of %s, to kos-cni: %v\n%s", pods[0].pod.Name, err, out)
	}
	if again := checkNet1(ctx, t, k, pods[0]); again != addrs[0] {
		t.Errorf("after a second ADD, %s has address %s, want %s", pods[0].pod.Name, again, addrs[0])
	}
	pings("after a repeated ADD")

	// A pod that asks for web-1's address fails its ADD with IPAM's
	// message, at once rather than after the agent's wait.
	taker := newPod("web-2", fmt.Sprintf(`[{"name":"blue","ips":["%s/24"]}]`, addrs[1]))
	began := time.Now()
	out, err := rt.run(ctx, "ADD", taker)
	took := time.Since(began)
	t.Logf("ADD of %s, which asks for a taken address, failed after %s", taker.pod.Name, took.Round(time.Millisecond))
	if want := fmt.Sprintf("Requested address %s is taken", addrs[1]); err == nil || !strings.Contains(out, want) {
		t.Errorf("ADD of %s: %v, %s; want a failure that says %q", taker.pod.Name, err, out, want)
	}
	if took > cfg.CNI.Wait/2 {
		t.Errorf("ADD of %s failed after %s, want well within the agent's wait of %s", taker.pod.Name, took.Round(time.Millisecond), cfg.CNI.Wait)
	}
	if out, err := rt.run(ctx, "DEL", taker); err != nil {
		t.Errorf("DEL of %s after its failed ADD: %v\n%s", taker.pod.Name, err, out)
	}

	// DEL removes net1; DEL again succeeds.
	for _, p := range pods {
		if out, err := rt.run(ctx, "DEL", p); err != nil {
			t.Fatalf("DEL of %s: %v\n%s\nMultus's log:\n%s", p.pod.Name, err, out, rt.log())
		}
		if out, err := p.netns.Run(ctx, "ip", "link", "show", "net1"); err == nil {
			t.Errorf("%s still has net1 after DEL: %s", p.pod.Name, out)
		}
		if out, err := rt.run(ctx, "DEL", p); err != nil {
			t.Errorf("second DEL of %s: %v\n%s", p.pod.Name, err, out)
		}
	}
}

// podSandbox is a pod's sandbox as the test's runtime made it.
type podSandbox struct {
	pod         *corev1.Pod
	netns       *ovsenv.Netns
	containerID string
}

// checkNet1 checks that a pod's net1 has its attachment's address, with the
// subnet's prefix, and MTU, and returns the address.
func checkNet1(ctx context.Context, t *testing.T, k *api, p *podSandbox) netip.Addr {
	t.Helper()
	att := k.get(v1alpha1.AttachmentName(p.pod.Name, "net1"))
	addr, err := netip.ParseAddr(att.Status.IPv4)
	if err != nil {
		t.Fatalf("attachment %s after ADD: no address (%v): %+v", att.Name, err, att.Status)
	}
	if att.Status.MTU != podMTU {
		t.Errorf("attachment %s: status.mtu %d, want %d", att.Name, att.Status.MTU, podMTU)
	}
	link, err := p.netns.Run(ctx, "ip", "-o", "link", "show", "net1")
	if err != nil || !strings.Contains(link, fmt.Sprintf(" mtu %d ", att.Status.MTU)) || !strings.Contains(link, att.Status.MACAddress) {
		t.Errorf("net1 of %s: %q (%v), want MTU %d and MAC %s", p.pod.Name, link, err, att.Status.MTU, att.Status.MACAddress)
	}
	ips, err := p.netns.Run(ctx, "ip", "-o", "-4", "addr", "show", "dev", "net1")
	if want := " inet " + addr.String() + "/24 "; err != nil || !strings.Contains(ips, want) {
		t.Errorf("addresses of net1 of %s: %q (%v), want %s", p.pod.Name, ips, err, strings.TrimSpace(want))
	}
	return addr
}

// runtime runs CNI requests for pods' sandboxes as containerd does: it runs
// Multus's thin plugin with the node's configuration on stdin and the
// request in CNI_* variables.
type runtime struct {
	t      *testing.T
	multus string
	conf   []byte
	binDir string
	logDir string
	// socket, when set, is where kos-cni reaches the agent (cni.SocketEnv),
	// which Multus passes on to its delegates with its environment.
	socket string
}

// newRuntime makes a node's CNI setup in temporary folders: a binary folder
// with Debian's plugins and kos-cni as "kos", and a Multus configuration
// whose primary network is loopback alone and whose cache is the test's.
func newRuntime(t *testing.T, kubeconfig string) *runtime {
	t.Helper()
	r := &runtime{t: t, multus: multusBinary(t), binDir: t.TempDir(), logDir: t.TempDir()}
	plugins, err := os.ReadDir(debianCNIPlugins)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plugins {
		if err := os.Symlink(filepath.Join(debianCNIPlugins, p.Name()), filepath.Join(r.binDir, p.Name())); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{"kos": testenv.Build(t, "cmd/kos-cni"), "multus": r.multus} {
		if err := os.Symlink(target, filepath.Join(r.binDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	r.conf, err = json.Marshal(map[string]any{
		"cniVersion": "1.0.0",
		"name":       "multus-cni-network",
		"type":       "multus",
		"kubeconfig": kubeconfig,
		"binDir":     r.binDir,
		"cniDir":     filepath.Join(t.TempDir(), "multus"),
		"logFile":    filepath.Join(r.logDir, "multus.log"),
		"logLevel":   "verbose",
		"delegates": []any{map[string]any{
			"cniVersion": "1.0.0",
			"name":       "primary",
			"plugins":    []any{map[string]any{"type": "loopback"}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// run runs a CNI command for a sandbox's eth0, which Multus gives the
// primary network, and returns what Multus wrote.
func (r *runtime) run(ctx context.Context, command string, p *podSandbox) (string, error) {
	return r.runPlugin(ctx, command, p, "multus", "eth0", string(r.conf))
}

// runPlugin runs a plugin of the binary folder with conf for a sandbox's
// interface ifname, and returns what it wrote.
func (r *runtime) runPlugin(ctx context.Context, command string, p *podSandbox, plugin, ifname, conf string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(r.binDir, plugin))
	cmd.Env = append(os.Environ(),
		"CNI_COMMAND="+command,
		"CNI_CONTAINERID="+p.containerID,
		"CNI_NETNS=/run/netns/"+p.netns.Name,
		"CNI_IFNAME="+ifname,
		fmt.Sprintf("CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=%s;K8S_POD_UID=%s",
			p.pod.Namespace, p.pod.Name, p.containerID, p.pod.UID),
		"CNI_PATH="+r.binDir,
	)
	if r.socket != "" {
		cmd.Env = append(cmd.Env, cni.SocketEnv+"="+r.socket)
	}
	cmd.Stdin = strings.NewReader(conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return strings.TrimSpace(stdout.String() + "\n" + stderr.String()), err
}

// log returns Multus's log.
func (r *runtime) log() string {
	data, err := os.ReadFile(filepath.Join(r.logDir, "multus.log"))
	if err != nil {
		return err.Error()
	}
	return string(data)
}

var (
	multusOnce sync.Once
	multusPath string
	multusErr  error
)

// multusBinary returns Multus's thin plugin as tools/multus/build.sh builds
// it, into its cache, once per test process; the script prints the folder
// that holds it.
func multusBinary(t *testing.T) string {
	t.Helper()
	multusOnce.Do(func() {
		root, err := testenv.RepoRoot()
		if err != nil {
			multusErr = err
			return
		}
		var stdout bytes.Buffer
		cmd := exec.Command("bash", filepath.Join(root, "tools", "multus", "build.sh"))
		cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			multusErr = fmt.Errorf("building Multus: %w", err)
			return
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		multusPath = filepath.Join(strings.TrimSpace(lines[len(lines)-1]), "multus")
		_, multusErr = os.Stat(multusPath)
	})
	if multusErr != nil {
		t.Fatal(multusErr)
	}
	return multusPath
}

// installNADCRD creates the NetworkAttachmentDefinition CRD the test
// cluster's Multus reads, unless it exists, and waits until it is served.
func installNADCRD(t testing.TB, dyn dynamic.Interface) {
	t.Helper()
	if err := testenv.InstallCRD(context.Background(), dyn, "tools/multus/testdata/network-attachment-definitions.yaml", podnetwork.NetworkAttachmentDefinitions); err != nil {
		t.Fatal(err)
	}
}

func createNAD(t testing.TB, nads dynamic.ResourceInterface, name, config string) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1",
		"kind":       "NetworkAttachmentDefinition",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"config": config},
	}}
	if _, err := nads.Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating NetworkAttachmentDefinition %s: %v", name, err)
	}
}

// startControllerManager runs kos-controller-manager's subnet validator,
// IPAM and pod-network controllers in the test process, as admin, until the
// test ends. They see every namespace: tests that play IPAM themselves must
// not run beside it.
func startControllerManager(t testing.TB) {
	t.Helper()
	m, err := controllermanager.Config{
		Kube: testenv.Shared(t).RESTConfig, KOS: directConfig(t),
		SubnetValidatorWorkers: 1, IPAMWorkers: 2, PodNetworks: true, PodNetworkWorkers: 2,
	}.Complete().New()
	if err != nil {
		t.Fatalf("creating kos-controller-manager: %v", err)
	}
	logger := klog.LoggerWithValues(ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2))), "component", "kos-controller-manager")
	if _, bench := t.(*testing.B); bench {
		logger = klog.Logger{} // a benchmark's log is always printed
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("kos-controller-manager: %v", err)
		}
	})
}
