package kubectlkos

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kos-sdn/kos/components/agent/api"
)

func kosObject(kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "network.example.com/v1alpha1", "kind": kind,
		"metadata": map[string]any{"namespace": ns, "name": name,
			"managedFields": []any{map[string]any{"manager": "kubectl"}}},
		"spec": spec,
	}}
}

// readTarGz returns the regular files of a gzipped tar by name.
func readTarGz(t *testing.T, data []byte) map[string]string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = string(b)
	}
	return files
}

// bundleFixture is statusFixture's agents, whose first answers every
// endpoint, and KOS objects in namespaces t1 and t2, Events and a Secret in
// t1.
func bundleFixture(t *testing.T) (*bundleSource, *fake.Clientset) {
	ag, p, _ := statusFixture()
	// The first node's agent answers everything, its flows with a secret
	// someone put in a flow's note.
	p.answers["kos-agent-aaaa GET "+api.PathFlows] = "cookie=0x6b, actions=note:password=hunter2\n"
	p.answers["kos-agent-aaaa GET "+api.PathTunnels] = "# ovs-vsctl show\nPort vtep\n"
	p.answers["kos-agent-aaaa GET "+api.PathRoutes] = "# the node's IPv4 routes\ndefault via 192.168.1.254 dev br-ul\n"
	kube := ag.kube.(*fake.Clientset)
	if _, err := kube.CoreV1().Events("t1").Create(context.Background(), &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: "t1", Name: "a1.1"}, Reason: "ExecFailed", Message: "exit status 1",
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A Secret in the namespace, which the bundle must not read.
	if _, err := kube.CoreV1().Secrets("t1").Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "t1", Name: "s"}, StringData: map[string]string{"token": "t0k3n"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{{
		GroupVersion: "network.example.com/v1alpha1",
		APIResources: []metav1.APIResource{
			{Name: "subnets", Namespaced: true, Kind: "Subnet", Verbs: []string{"get", "list"}},
			{Name: "networkattachments", Namespaced: true, Kind: "NetworkAttachment", Verbs: []string{"get", "list"}},
			{Name: "networkattachments/status", Namespaced: true, Kind: "NetworkAttachment", Verbs: []string{"get"}},
			{Name: "iplocks", Namespaced: true, Kind: "IPLock", Verbs: []string{"get", "list"}},
		},
	}}
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		{Group: "network.example.com", Version: "v1alpha1", Resource: "subnets"}:            "SubnetList",
		{Group: "network.example.com", Version: "v1alpha1", Resource: "networkattachments"}: "NetworkAttachmentList",
		{Group: "network.example.com", Version: "v1alpha1", Resource: "iplocks"}:            "IPLockList",
	},
		kosObject("Subnet", "t1", "s1", map[string]any{"ipv4": "10.1.0.0/24", "vni": int64(4097)}),
		kosObject("NetworkAttachment", "t1", "a1", map[string]any{"node": "node-1", "subnet": "s1"}),
		kosObject("NetworkAttachment", "t2", "other", map[string]any{"node": "node-1", "subnet": "s1"}),
	)
	src := &bundleSource{agents: ag, kube: kube, discovery: kube.Discovery(), dynamic: dyn}
	return src, kube
}

func TestSupportBundle(t *testing.T) {
	t.Parallel()
	src, kube := bundleFixture(t)

	var out bytes.Buffer
	n, problems, err := writeBundle(context.Background(), &out, src, bundleRequest{namespace: "t1", tailLines: 100, now: now})
	if err != nil {
		t.Fatal(err)
	}
	files := readTarGz(t, out.Bytes())
	const top = "kos-support-bundle-20261127T100000Z/"
	var names []string
	for name := range files {
		names = append(names, strings.TrimPrefix(name, top))
	}
	wantNames := []string{
		"README.txt",
		"agents/pods.yaml",
		"errors.txt",
		"namespaces/t1/events.yaml",
		"namespaces/t1/iplocks.yaml",
		"namespaces/t1/networkattachments.yaml",
		"namespaces/t1/subnets.yaml",
		"nodes/node-1/flows.txt",
		"nodes/node-1/logs/kos-agent.log",
		"nodes/node-1/logs/ovs.log",
		"nodes/node-1/routes.txt",
		"nodes/node-1/status.json",
		"nodes/node-1/tunnels.txt",
		"nodes/node-2/logs/kos-agent.log",
		"nodes/node-2/logs/kos-agent.previous.log",
		"nodes/node-2/logs/ovs.log",
		"nodes/node-2/status.json",
		"nodes/node-3/logs/kos-agent.log",
		"nodes/node-3/logs/ovs.log",
		"nodes/node-4/logs/kos-agent.log",
		"nodes/node-4/logs/ovs.log",
	}
	if diff := cmp.Diff(names, wantNames, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("files (-got +want):\n%s", diff)
	}
	if n != len(wantNames) {
		t.Errorf("writeBundle counted %d files, want %d", n, len(wantNames))
	}
	// node-2: three endpoints fail; node-3: four; node-4: not running.
	if problems != 8 {
		t.Errorf("%d problems, want 8:\n%s", problems, files[top+"errors.txt"])
	}
	for _, check := range []struct{ file, want, notWant string }{
		{"nodes/node-1/flows.txt", "note:password=REDACTED", "hunter2"},
		{"nodes/node-1/logs/kos-agent.log", "fake logs", ""},
		{"namespaces/t1/networkattachments.yaml", "name: a1", "managedFields"},
		{"namespaces/t1/networkattachments.yaml", "node: node-1", "name: other"},
		{"namespaces/t1/subnets.yaml", "vni: 4097", ""},
		{"namespaces/t1/events.yaml", "reason: ExecFailed", ""},
		{"agents/pods.yaml", "kos-agent-aaaa", ""},
		{"errors.txt", "node node-4: the agent pod kos-agent-dddd is Pending", ""},
		{"README.txt", "Namespace: t1", ""},
	} {
		got := files[top+check.file]
		if !strings.Contains(got, check.want) || (check.notWant != "" && strings.Contains(got, check.notWant)) {
			t.Errorf("%s: want %q and not %q in:\n%s", check.file, check.want, check.notWant, got)
		}
	}
	for name, data := range files {
		if strings.Contains(data, "t0k3n") {
			t.Errorf("%s holds the Secret's value", name)
		}
	}
	for _, a := range kube.Actions() {
		if a.GetResource().Resource == "secrets" && a.GetVerb() != "create" {
			t.Errorf("the bundle read Secrets: %v", a)
		}
	}
}

// TestSupportBundleAll checks -A (every namespace with KOS objects, and
// only those) and the control plane's files: pods, logs of every
// container (and previous runs), status, the APIService.
func TestSupportBundleAll(t *testing.T) {
	t.Parallel()
	src, kube := bundleFixture(t)
	cp, _ := controlPlaneFixture(t)
	for _, pod := range []string{"kos-apiserver-7d9-aaaa", "kos-apiserver-7d9-bbbb", "kos-etcd-0", "kos-etcd-1", "kos-etcd-2", "kos-pki-5f4-cccc"} {
		p, err := cp.kube.CoreV1().Pods(DefaultControlPlaneNamespace).Get(context.Background(), pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kube.CoreV1().Pods(DefaultControlPlaneNamespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cp.kube = kube
	src.controlPlane = cp

	var out bytes.Buffer
	_, _, err := writeBundle(context.Background(), &out, src, bundleRequest{allNamespaces: true, tailLines: 100, since: 90 * time.Minute, now: now})
	if err != nil {
		t.Fatal(err)
	}
	files := readTarGz(t, out.Bytes())
	const top = "kos-support-bundle-20261127T100000Z/"
	var names []string
	for name := range files {
		if n := strings.TrimPrefix(name, top); strings.HasPrefix(n, "control-plane/") || strings.HasPrefix(n, "namespaces/") {
			names = append(names, n)
		}
	}
	wantNames := []string{
		"control-plane/apiservice.yaml",
		"control-plane/kos-apiserver-7d9-aaaa/logs/kos-apiserver.log",
		"control-plane/kos-apiserver-7d9-bbbb/logs/kos-apiserver.log",
		"control-plane/kos-apiserver-7d9-bbbb/logs/kos-apiserver.previous.log",
		"control-plane/kos-etcd-0/logs/kos-etcd.log",
		"control-plane/kos-etcd-1/logs/kos-etcd.log",
		"control-plane/kos-etcd-1/logs/kos-etcd.previous.log",
		"control-plane/kos-etcd-2/logs/kos-etcd.log",
		"control-plane/kos-pki-5f4-cccc/logs/kos-pki.log",
		"control-plane/pods.yaml",
		"control-plane/status.json",
		"namespaces/t1/events.yaml",
		"namespaces/t1/iplocks.yaml",
		"namespaces/t1/networkattachments.yaml",
		"namespaces/t1/subnets.yaml",
		"namespaces/t2/events.yaml",
		"namespaces/t2/iplocks.yaml",
		"namespaces/t2/networkattachments.yaml",
		"namespaces/t2/subnets.yaml",
	}
	if diff := cmp.Diff(names, wantNames, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("files (-got +want):\n%s", diff)
	}
	for _, check := range []struct{ file, want string }{
		{"namespaces/t2/networkattachments.yaml", "name: other"},
		{"control-plane/status.json", `"leader":true`},
		{"control-plane/status.json", `"name":"kos-etcd-server"`},
		{"control-plane/apiservice.yaml", "reason: MissingEndpoints"},
		{"control-plane/pods.yaml", "name: kos-etcd-0"},
		{"errors.txt", "control plane: kos-controller-manager <none>: no kos-controller-manager pod"},
		{"README.txt", "Logs: the last 100 lines of the last 1h30m0s"},
	} {
		if got := files[top+check.file]; !strings.Contains(got, check.want) {
			t.Errorf("%s: want %q in:\n%s", check.file, check.want, got)
		}
	}
	// Every log was asked for the last 90 minutes.
	logs := 0
	for _, a := range kube.Actions() {
		if g, ok := a.(k8stesting.GenericAction); ok && a.GetSubresource() == "log" {
			logs++
			if opts, ok := g.GetValue().(*corev1.PodLogOptions); !ok || opts.SinceSeconds == nil || *opts.SinceSeconds != 5400 {
				t.Errorf("log request %v: want sinceSeconds 5400", g.GetValue())
			}
		}
	}
	if logs == 0 {
		t.Error("no log was asked for")
	}
}
