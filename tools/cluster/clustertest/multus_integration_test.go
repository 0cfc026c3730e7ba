package clustertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// The test's secondary network: Debian's bridge plugin on a bridge of each
// node's network namespace, with addresses from host-local in a range that
// lives only in the nodes' and pods' namespaces.
const (
	nadName   = "blue"
	nadBridge = "kos-blue"
)

var nadRange = netip.MustParsePrefix("10.250.0.0/24")

// networkAttachmentDefinitions is the resource Multus reads.
var networkAttachmentDefinitions = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// networkStatus is an entry of the k8s.v1.cni.cncf.io/network-status
// annotation that Multus writes, as far as the test reads it.
type networkStatus struct {
	Name      string   `json:"name"`
	Interface string   `json:"interface"`
	IPs       []string `json:"ips"`
	Default   bool     `json:"default"`
}

// TestIntegrationMultus checks Multus on a cluster of two nodes: a pod on
// each node that names a NetworkAttachmentDefinition (of Debian's bridge
// plugin) gets eth0 from the node's network and net1 from the definition,
// as Multus reports in the pod's network-status annotation and as the pod
// sees itself; deleting the pods frees their addresses of both networks and
// Multus's cache; and the host is left as it was found. No controller
// manager or scheduler runs: the pods name their nodes.
func TestIntegrationMultus(t *testing.T) {
	ctx := t.Context()
	before := snapshotHost(t)
	tarball := buildImages(t)
	began := time.Now()
	env, err := cluster.Start(ctx, cluster.Options{
		ControlPlane: testenv.Options{Progress: testWriter{t}},
		Nodes:        []cluster.NodeOptions{{}, {}},
		Multus:       true,
	})
	if err != nil {
		t.Fatalf("starting the cluster: %v", err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = env.Stop()
		}
	})
	t.Logf("two nodes with Multus ready in %s", time.Since(began).Round(10*time.Millisecond))
	nodes := make([]cluster.Node, len(env.Nodes))
	for i, n := range env.Nodes {
		nodes[i] = *n
	}
	if err := env.ImportImages(ctx, tarball); err != nil {
		t.Fatal(err)
	}

	client := kubernetes.NewForConfigOrDie(env.RESTConfig)
	const ns = "multus"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	config, err := json.Marshal(map[string]any{
		"cniVersion": "1.0.0",
		"name":       nadName,
		"type":       "bridge",
		"bridge":     nadBridge,
		"ipam": map[string]any{
			"type":   "host-local",
			"ranges": [][]map[string]string{{{"subnet": nadRange.String()}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	nad := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1",
		"kind":       "NetworkAttachmentDefinition",
		"metadata":   map[string]any{"name": nadName},
		"spec":       map[string]any{"config": string(config)},
	}}
	if _, err := dynamic.NewForConfigOrDie(env.RESTConfig).Resource(networkAttachmentDefinitions).Namespace(ns).Create(ctx, nad, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the NetworkAttachmentDefinition: %v", err)
	}

	began = time.Now()
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = fmt.Sprintf("blue-%d", i)
		spec := helloPod(names[i], 8080, false).Spec
		spec.NodeName = n.Name
		spec.AutomountServiceAccountToken = new(bool)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: names[i], Annotations: map[string]string{"k8s.v1.cni.cncf.io/networks": nadName}},
			Spec:       spec,
		}
		if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		poll.Until(t, 2*time.Minute, name+" to be ready", func(context.Context) error { return podReady(ctx, client, ns, name) })
	}
	t.Logf("a pod with a secondary network on each node ready in %s", time.Since(began).Round(10*time.Millisecond))

	// held are the address files host-local keeps for the pods: of the
	// node's network (the dataDir its configuration names, in the node's
	// folder) and of the definition's (host-local's default folder under
	// the node's own /var/lib/cni).
	type held struct{ dir, ip string }
	var files []held
	for i, name := range names {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var status []networkStatus
		if err := json.Unmarshal([]byte(p.Annotations["k8s.v1.cni.cncf.io/network-status"]), &status); err != nil {
			t.Fatalf("pod %s's network-status annotation %q: %v", name, p.Annotations["k8s.v1.cni.cncf.io/network-status"], err)
		}
		if len(status) != 2 || len(status[0].IPs) != 1 || len(status[1].IPs) != 1 {
			t.Fatalf("pod %s's network status: got %+v, want eth0 and net1 with an address each", name, status)
		}
		primary, secondary := mustAddr(t, status[0].IPs[0]), mustAddr(t, status[1].IPs[0])
		want := []networkStatus{
			{Name: "kos-node", Interface: "eth0", IPs: []string{p.Status.PodIP}, Default: true},
			{Name: ns + "/" + nadName, Interface: "net1", IPs: status[1].IPs},
		}
		if diff := cmp.Diff(want, status); diff != "" {
			t.Errorf("pod %s's network status (-want +got):\n%s", name, diff)
		}
		t.Logf("pod %s on %s: eth0 %s, net1 %s", name, nodes[i].Name, primary, secondary)
		if !nodes[i].PodCIDR.Contains(primary) {
			t.Errorf("pod %s: eth0 at %s, want in node %s's %s", name, primary, nodes[i].Name, nodes[i].PodCIDR)
		}
		if !nadRange.Contains(secondary) {
			t.Errorf("pod %s: net1 at %s, want in %s", name, secondary, nadRange)
		}

		// What the pod sees of itself.
		var got []string
		for line := range strings.SplitSeq(execIn(t, env, ns, name, "hello", "addrs"), "\n") {
			if iface, addr, ok := strings.Cut(line, " "); ok && iface != "lo" && strings.Contains(addr, ".") {
				got = append(got, line)
			}
		}
		wantAddrs := []string{
			fmt.Sprintf("eth0 %s/%d", primary, nodes[i].PodCIDR.Bits()),
			fmt.Sprintf("net1 %s/%d", secondary, nadRange.Bits()),
		}
		if diff := cmp.Diff(wantAddrs, got); diff != "" {
			t.Errorf("pod %s's IPv4 addresses (-want +got):\n%s", name, diff)
		}
		files = append(files,
			held{filepath.Join(nodes[i].Dir, "ipam", "kos-node"), primary.String()},
			held{nodes[i].HostPath(filepath.Join("/var/lib/cni/networks", nadName)), secondary.String()})
	}
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(f.dir, f.ip)); err != nil {
			t.Errorf("host-local holds no address file for a running pod: %v", err)
		}
	}
	for _, n := range nodes {
		if cached := multusCache(t, n); len(cached) != 1 {
			t.Errorf("node %s: Multus caches %v, want the one sandbox of its pod", n.Name, cached)
		}
	}

	began = time.Now()
	for _, name := range names {
		if err := client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, time.Minute, "the pods to be gone, their addresses freed", func(context.Context) error {
		for _, name := range names {
			if _, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
				return fmt.Errorf("pod %s is still there", name)
			}
		}
		for _, f := range files {
			if _, err := os.Stat(filepath.Join(f.dir, f.ip)); !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%s still holds %s (%v)", f.dir, f.ip, err)
			}
		}
		for _, n := range nodes {
			if cached := multusCache(t, n); len(cached) > 0 {
				return fmt.Errorf("node %s: Multus still caches %v", n.Name, cached)
			}
		}
		return nil
	})
	t.Logf("pods deleted and their addresses freed in %s", time.Since(began).Round(10*time.Millisecond))

	stopped = true
	if err := env.Stop(); err != nil {
		t.Fatalf("stopping the cluster: %v", err)
	}
	for _, n := range nodes {
		checkHostRestored(t, before, env.Dir, n)
	}
}

// multusCache lists the sandboxes whose delegates Multus keeps on the node,
// for DEL.
func multusCache(t *testing.T, n cluster.Node) []string {
	t.Helper()
	entries, err := os.ReadDir(n.HostPath("/var/lib/cni/multus"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return slices.Sorted(slices.Values(out))
}
