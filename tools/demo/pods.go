package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/kos-sdn/kos/components/fabric"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/e2e/podnet/report"
	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/kosinstall"
)

// The last step of the cluster demo: the upgraded cluster gets release
// podsRelease, whose agent is each node's CNI daemon, and pods on different
// nodes, each with an interface on a KOS subnet (Multus runs kos-cni for
// it), ping each other and move 64 MiB across the nodes.
const (
	// podsRelease is the release that brings pods on KOS networks.
	podsRelease = "0.3.0"
	// podsNamespace holds the pods, their subnet and its
	// NetworkAttachmentDefinition.
	podsNamespace = "kos-pods-demo"
	// podsSubnet is the pods' subnet's address range.
	podsSubnet = "10.79.0.0/24"
	// podsNetwork names the subnet and the NetworkAttachmentDefinition
	// that names it.
	podsNetwork = "red"
	// podsIfName is the interface Multus names a pod's first extra network.
	podsIfName = "net1"
	// podnetPort is where each pod's podnet serves its TCP sink.
	podnetPort = "7777"
	// podsTransfer is the size of the transfer between two pods.
	podsTransfer = 64 << 20
)

// podnetBin and pingBin are the programs of the pods' image.
var (
	podnetBin = images.BinDir + "/podnet"
	pingBin   = "/usr/bin/ping"
)

// clusterPods names the demo's pods, one per node in node order.
var clusterPods = []string{"pod-a", "pod-b", "pod-c"}

// runPods upgrades the cluster to podsRelease (its images, as its commit
// built them, pushed to repo, the release tree rewritten so that they are
// pinned), then starts a pod
// on each node with an interface on a KOS subnet and shows them talking
// across the nodes. It returns the apps (startApps), which the upgrade ran
// under, for the next upgrade; the caller forgets them (forgetApps).
func (d *demo) runPods(ctx context.Context, env *cluster.Cluster, kube kubernetes.Interface, agg aggregator.Interface, guests []*kosinstall.Guest, root, repo, tree string) (apps []*kosinstall.Guest, err error) {
	began := time.Now()
	say("Release %[1]s brings pods on KOS networks (docs/pods.md): its agent installs kos-cni as each node's /opt/cni/bin/kos and answers it, and kos-controller-manager makes a NetworkAttachment for every pod that names a NetworkAttachmentDefinition of type kos. These nodes run Multus, which calls kos-cni for such a pod.", podsRelease)
	if err := pushReleasedImages(ctx, root, repo, podsRelease); err != nil {
		return apps, err
	}
	say("Write the release again, now that the registry has %s's images, so that they are pinned by digest too, and a channel of the releases up to %s:", podsRelease, podsRelease)
	if err := d.run("go", "run", "./tools/addons", "--root", root, "release", "--registry", repo, "--out", tree); err != nil {
		return apps, err
	}
	rel, err := kosinstall.WriteReleaseChannel(tree, "kos-"+podsRelease+".yaml", semver.MustParse(podsRelease))
	if err != nil {
		return apps, err
	}
	channel := filepath.Join(tree, rel)
	fmt.Printf("    %s\n", channel)
	built := time.Now()

	client, err := kosclient.NewForConfig(env.RESTConfig)
	if err != nil {
		return apps, fmt.Errorf("a client of the KOS API: %w", err)
	}
	image, err := pushPodImage(ctx, env.Registry)
	if err != nil {
		return apps, err
	}
	if apps, err = d.startApps(ctx, env, kube, client, image); err != nil {
		return apps, err
	}
	if err := d.upgradeUnderApps(ctx, kube, agg, apps, podsRelease, channel); err != nil {
		return apps, err
	}
	if err := d.kubectl("-n", kosinstall.AgentNamespace, "get", "pods", "-o", "wide"); err != nil {
		return apps, err
	}
	if len(guests) > 1 {
		from, to := guests[0], guests[1]
		say("The guests from before still reach each other across the nodes:")
		if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := from.Ping(ctx, to.IP, 1, time.Second)
			return got == 1, err
		}); err != nil {
			return apps, fmt.Errorf("no reply from %s to %s after the upgrade to %s: %w", to.IP, from.Name, podsRelease, err)
		}
		fmt.Printf("\n$ ip netns exec %s ping -c 3 %s\n", from.Name, to.IP)
		ping := from.Command(ctx, "ping", "-c", "3", "-W", "2", to.IP.String())
		ping.Stdout, ping.Stderr = os.Stdout, os.Stderr
		if err := ping.Run(); err != nil {
			return apps, fmt.Errorf("pinging %s from %s: %w", to.IP, from.Name, err)
		}
	}

	manifest, pods := podsManifest(env, image)
	file := filepath.Join(d.envDir, "kos-pods-demo.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		return apps, fmt.Errorf("writing the pods' manifest: %w", err)
	}
	say("What a user of KOS networks writes: a Subnet, a NetworkAttachmentDefinition of type kos that names it, and pods that name the definition in their k8s.v1.cni.cncf.io/networks annotation, one on each node. Nothing says an address, a route or an MTU:")
	fmt.Print(manifest)
	if err := d.kubectl("apply", "-f", file); err != nil {
		return apps, err
	}
	created := time.Now()
	if err := waitPodsReady(ctx, kube, podsNamespace, pods...); err != nil {
		return apps, err
	}
	say("The pods run, %s after they were created:", time.Since(created).Round(time.Second))
	if err := d.kubectl("-n", podsNamespace, "get", "pods", "-o", "wide"); err != nil {
		return apps, err
	}
	var names []string
	for _, p := range pods {
		names = append(names, p+"-"+podsIfName)
	}
	atts, err := waitAttachments(ctx, client, podsNamespace, names...)
	if err != nil {
		return apps, err
	}
	say("Each pod's %s is a NetworkAttachment that kos-controller-manager made for it (named after the pod and the interface, owned by the pod); IPAM gave it its address and the node's agent put the pod's end of a veth pair in its place on the node's switch:", podsIfName)
	if err := d.kubectl("-n", podsNamespace, "get", "networkattachments", "-o", "wide"); err != nil {
		return apps, err
	}

	mtu, err := underlayMTU(ctx, env.Nodes[0])
	if err != nil {
		return apps, err
	}
	want := mtu - fabric.VXLANOverhead
	say("Inside the pods, %s: the subnet's prefix length, and MTU %d, the underlay's %d less the %d bytes of VXLAN, which the agent took from its node; nobody set it:", podsIfName, want, mtu, fabric.VXLANOverhead)
	for i, p := range pods {
		out, err := d.podExec(ctx, true, p, podnetBin, "addr", podsIfName)
		if err != nil {
			return apps, err
		}
		fields := strings.Fields(out)
		prefix := netip.PrefixFrom(netip.MustParseAddr(atts[i].Status.IPv4), netip.MustParsePrefix(podsSubnet).Bits())
		if len(fields) < 2 || fields[0] != strconv.Itoa(want) || fields[1] != prefix.String() {
			return apps, fmt.Errorf("pod %s: %s is %q, want MTU %d and address %s", p, podsIfName, strings.TrimSpace(out), want, prefix)
		}
	}

	say("Each pod pings the next, on another node, across the VXLAN overlay:")
	var summary []string
	for i, from := range pods {
		to := atts[(i+1)%len(atts)]
		// The first packets of a new tunnel may be lost while the
		// userspace datapath learns its neighbour.
		first := time.Now()
		if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := d.podExec(ctx, false, from, pingBin, "-c", "1", "-W", "2", to.Status.IPv4)
			return err == nil, nil
		}); err != nil {
			return apps, fmt.Errorf("no reply from %s (%s) to pod %s within a minute: %w", to.Status.IPv4, to.Name, from, err)
		}
		out, err := d.podExec(ctx, true, from, pingBin, "-c", "5", "-i", "0.2", "-W", "2", to.Status.IPv4)
		if err != nil {
			return apps, err
		}
		summary = append(summary, fmt.Sprintf("%s (%s) -> %s (%s): %s; first reply after %s", from, atts[i].Spec.Node, to.Status.IPv4, to.Spec.Node, pingSummary(out), time.Since(first).Round(100*time.Millisecond)))
	}
	say("The pings:")
	for _, s := range summary {
		fmt.Printf("    %s\n", s)
	}

	from, to := pods[0], atts[1]
	say("A TCP transfer over KOS between pods on two nodes: %s sends %d MiB of pseudo-random bytes to the sink of %s (podnet serve, the pod's main process) at %s:%s, and both ends compare SHA-256:", from, podsTransfer>>20, clusterPods[1], to.Status.IPv4, podnetPort)
	out, err := d.podExec(ctx, true, from, podnetBin, "send", to.Status.IPv4+":"+podnetPort, strconv.Itoa(podsTransfer))
	if err != nil {
		return apps, err
	}
	var r report.Transfer
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return apps, fmt.Errorf("reading podnet send's report %q: %w", out, err)
	}
	if r.Sent != r.Received || r.Bytes != podsTransfer {
		return apps, fmt.Errorf("%s -> %s: sent %d bytes with SHA-256 %s, the sink got %s", from, to.Name, r.Bytes, r.Sent, r.Received)
	}
	fmt.Printf("    %d MiB from %s (%s) to %s (%s) arrived intact (SHA-256 %s…) in %.1f s: %.1f MB/s, through each node's userspace datapath on this %d-core machine, with no MTU set by hand.\n",
		r.Bytes>>20, from, atts[0].Spec.Node, clusterPods[1], to.Spec.Node, r.Sent[:min(12, len(r.Sent))], r.Seconds, r.MBps, runtime.NumCPU())
	say("Pods on KOS %s talk across the nodes, %s after this step began (%s of it building and pushing images and writing the release).", podsRelease, time.Since(began).Round(time.Second), built.Sub(began).Round(time.Second))
	return apps, nil
}

// requireMultus checks that the cluster has Multus's
// NetworkAttachmentDefinitions, which localenv up --multus installs with
// Multus, before the demo spends minutes on the steps that come first.
func requireMultus(env *cluster.Cluster) error {
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		return fmt.Errorf("a client of the cluster: %w", err)
	}
	if _, err := kube.Discovery().ServerResourcesForGroupVersion("k8s.cni.cncf.io/v1"); err != nil {
		return fmt.Errorf("the cluster has no NetworkAttachmentDefinitions (%w): start it with localenv up --cluster --multus", err)
	}
	return nil
}

// pushPodImage builds the pods' image, podnet (tools/e2e/podnet) and ping,
// without a container engine and pushes it to the registry, returning its
// reference.
func pushPodImage(ctx context.Context, registry string) (string, error) {
	ref := registry + "/demo/podnet:1"
	say("The pods' image: podnet, a small program that serves a TCP sink and an echo, sends to a sink, holds connections to echoes and reports an interface (tools/e2e/podnet), with this host's ping; built without a container engine and pushed as %s", ref)
	dir, err := os.MkdirTemp("", "kos-demo-podnet-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	goFiles, err := images.BuildGo(ctx, images.GoOptions{OutDir: dir}, "github.com/kos-sdn/kos/tools/e2e/podnet")
	if err != nil {
		return "", fmt.Errorf("building podnet: %w", err)
	}
	hostFiles, err := images.HostBinaries(ctx, pingBin)
	if err != nil {
		return "", err
	}
	layer, err := images.Layer(append(goFiles, hostFiles...))
	if err != nil {
		return "", err
	}
	img, err := images.New(images.Config{Entrypoint: []string{podnetBin}, Cmd: []string{"serve", podnetPort}}, layer)
	if err != nil {
		return "", err
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return "", err
	}
	if err := remote.Write(tag, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	return ref, nil
}

// podsManifest returns the pods' namespace, subnet, NetworkAttachmentDefinition
// and a pod on each node (up to three), and the pods' names in node order.
func podsManifest(env *cluster.Cluster, image string) (string, []string) {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: network.example.com/v1alpha1
kind: Subnet
metadata:
  name: %[2]s
  namespace: %[1]s
spec:
  ipv4: %[3]s
  vni: 79
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: %[2]s
  namespace: %[1]s
spec:
  config: '{"cniVersion": "1.0.0", "type": "kos", "subnet": "%[2]s"}'
`, podsNamespace, podsNetwork, podsSubnet)
	pods := clusterPods[:min(len(clusterPods), len(env.Nodes))]
	for i, p := range pods {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  annotations:
    k8s.v1.cni.cncf.io/networks: %s
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  containers:
  - name: podnet
    image: %s
`, p, podsNamespace, podsNetwork, env.Nodes[i].Name, image)
	}
	return b.String(), pods
}

// waitPodsReady waits until the named pods in namespace ns are Ready.
func waitPodsReady(ctx context.Context, kube kubernetes.Interface, ns string, names ...string) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, n := range names {
			pod, err := kube.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				last = err
				return false, nil
			}
			ready := false
			for _, c := range pod.Status.Conditions {
				ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
			}
			if !ready {
				last = fmt.Errorf("pod %s is %s", n, pod.Status.Phase)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the pods: %w (%v); see kubectl -n %s describe pods", err, last, ns)
	}
	return nil
}

// podExec runs a command in a pod of podsNamespace with kubectl exec and
// returns its output; with echo it shows the command and the output.
func (d *demo) podExec(ctx context.Context, echo bool, pod string, command ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	args := append([]string{"-n", podsNamespace, "exec", pod, "--"}, command...)
	if echo {
		fmt.Printf("\n$ kubectl %s\n", strings.Join(args, " "))
	}
	// The command's output alone is returned: kubectl's own messages
	// (such as client-go's "Unknown stream id" of a WebSocket exec) go to
	// its standard error, and would spoil a report the caller reads.
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", d.kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if echo {
		fmt.Print(stdout.String())
		fmt.Print(stderr.String())
	}
	if err != nil {
		return stdout.String() + stderr.String(), fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return stdout.String(), nil
}

// underlayMTU returns the MTU of the node's interface that holds its
// address.
func underlayMTU(ctx context.Context, n *cluster.Node) (int, error) {
	out, err := exec.CommandContext(ctx, "ip", "-n", n.Netns, "-o", "-4", "addr", "show", "to", n.IP.String()+"/32").CombinedOutput()
	fields := strings.Fields(string(out))
	if err != nil || len(fields) < 2 {
		return 0, fmt.Errorf("node %s: the interface holding %s: %v: %s", n.Name, n.IP, err, out)
	}
	out, err = exec.CommandContext(ctx, "ip", "-n", n.Netns, "-o", "link", "show", fields[1]).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("node %s: ip link show %s: %w: %s", n.Name, fields[1], err, out)
	}
	f := strings.Fields(string(out))
	for i := range f[:len(f)-1] {
		if f[i] == "mtu" {
			return strconv.Atoi(f[i+1])
		}
	}
	return 0, fmt.Errorf("node %s: no MTU in %q", n.Name, out)
}

// pingSummary returns ping's summary ("5 packets transmitted, 5 received,
// 0% packet loss" and the round trips) in one line.
func pingSummary(out string) string {
	var parts []string
	for line := range strings.SplitSeq(out, "\n") {
		line = strings.TrimSpace(line)
		if strings.Contains(line, "packets transmitted") || strings.HasPrefix(line, "rtt") {
			parts = append(parts, line)
		}
	}
	if len(parts) == 0 {
		return strings.TrimSpace(out)
	}
	return strings.Join(parts, "; ")
}
