package channels

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kos-sdn/kos/channels/api"
	"github.com/kos-sdn/kos/channels/internal/channelstest"
	"github.com/kos-sdn/kos/tools/testenv"
)

// kstyleLabels are the labels kOps's own addons carry and their prune specs
// select.
const kstyleLabels = "addon.kops.k8s.io/name: kstyle-dns.addons.k8s.io, app.kubernetes.io/managed-by: kops, k8s-addon: kstyle-dns.addons.k8s.io"

func kstyleObject(kind, apiVersion, name, rest string) string {
	return fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata: {name: %s, namespace: kube-system, labels: {%s}}\n%s", apiVersion, kind, name, kstyleLabels, rest)
}

// writeKStyleChannel writes a bootstrap channel in kOps's style: a DNS-like
// addon with a prune spec as kOps gives coredns, and an RBAC addon without
// one. Release 2 of the DNS addon drops ConfigMap kstyle-dns-b and Service
// kstyle-dns, and adds ConfigMap kstyle-dns-c. It returns the channel's
// file:// URL, as kOps's channels needs.
func writeKStyleChannel(t *testing.T, dir string, release int) string {
	t.Helper()
	sa := kstyleObject("ServiceAccount", "v1", "kstyle-dns", "")
	cm := func(name, value string) string {
		return kstyleObject("ConfigMap", "v1", name, fmt.Sprintf("data: {value: %q}\n", value))
	}
	svc := kstyleObject("Service", "v1", "kstyle-dns", "spec: {selector: {k8s-app: kstyle-dns}, ports: [{name: dns, port: 53, protocol: UDP}]}\n")
	deploy := kstyleObject("Deployment", "apps/v1", "kstyle-dns", fmt.Sprintf(`spec:
  replicas: 0
  selector: {matchLabels: {k8s-app: kstyle-dns}}
  template:
    metadata: {labels: {k8s-app: kstyle-dns}}
    spec: {serviceAccountName: kstyle-dns, containers: [{name: dns, image: %s}]}
`, channelstest.PauseImage))
	dns := channelstest.Manifest(sa, cm("kstyle-dns-a", "1"), cm("kstyle-dns-b", "1"), svc, deploy)
	version := "1.0.0"
	if release == 2 {
		dns = channelstest.Manifest(sa, cm("kstyle-dns-a", "2"), cm("kstyle-dns-c", "2"), deploy)
		version = "1.1.0"
	}
	sel := "addon.kops.k8s.io/name=kstyle-dns.addons.k8s.io,app.kubernetes.io/managed-by=kops"
	prune := &api.PruneSpec{Kinds: []api.PruneKindSpec{
		{Kind: "ConfigMap", LabelSelector: sel},
		{Kind: "Service", LabelSelector: sel},
		{Kind: "ServiceAccount", LabelSelector: sel, Namespaces: []string{"kube-system"}},
		{Group: "apps", Kind: "Deployment", LabelSelector: sel, Namespaces: []string{"kube-system"}},
	}}
	rbac := `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kstyle-reader, labels: {k8s-addon: kstyle-rbac.addons.k8s.io}}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [get]}]
`
	loc := channelstest.WriteChannel(t, dir, fmt.Sprintf("kstyle-%d.yaml", release),
		channelstest.Release{Name: "kstyle-dns", Version: version, ID: "k8s-1.12", Manifest: dns, Prune: prune},
		channelstest.Release{Name: "kstyle-rbac", Version: "1.0.0", ID: "k8s-1.9", Manifest: rbac},
	)
	return "file://" + loc
}

// kstyleObjects lists the objects of the kOps-style channel on a cluster.
func kstyleObjects(t *testing.T, dyn dynamic.Interface) []string {
	t.Helper()
	var out []string
	for _, r := range []struct {
		kind string
		gvr  schema.GroupVersionResource
	}{
		{"ServiceAccount", schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}},
		{"ConfigMap", schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}},
		{"Service", schema.GroupVersionResource{Version: "v1", Resource: "services"}},
		{"Deployment", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}},
		{"ClusterRole", schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}},
	} {
		list, err := dyn.Resource(r.gvr).List(context.Background(), metav1.ListOptions{LabelSelector: "k8s-addon in (kstyle-dns.addons.k8s.io,kstyle-rbac.addons.k8s.io)"})
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range list.Items {
			if u.GetNamespace() == "" {
				out = append(out, r.kind+" "+u.GetName())
			} else {
				out = append(out, r.kind+" "+u.GetNamespace()+"/"+u.GetName())
			}
		}
	}
	sort.Strings(out)
	return out
}

// installRecords returns the install records on kube-system, by addon.
func installRecords(t *testing.T, k kubernetes.Interface) map[string]string {
	t.Helper()
	ns, err := k.CoreV1().Namespaces().Get(context.Background(), "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for key, v := range ns.Annotations {
		if name, ok := strings.CutPrefix(key, AnnotationPrefix); ok {
			out[name] = v
		}
	}
	return out
}

// TestIntegrationKOpsChannelsInterop runs kOps's own channels command (kOps
// v1.32.0, see kopsVersion) and ours on the same clusters, on the KOS bundle
// (bootstrap-channel.yaml) and on a kOps-style bootstrap channel with prune
// specs, in both orders: whichever applies first, the other finds nothing to
// do, every record is there, and a second run of either changes nothing.
// Then the other tool upgrades the kOps-style channel, and exactly what the
// release dropped is gone.
func TestIntegrationKOpsChannelsInterop(t *testing.T) {
	kopsBin := kopsChannels(t)
	oursBin := testenv.Build(t, "cmd/channels")
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bundle := "file://" + filepath.Join(root, "bootstrap-channel.yaml")
	wantAddons := []string{"kos-agent", "kos-apiserver", "kos-controller-manager", "kos-etcd", "kstyle-dns", "kstyle-rbac"}

	for _, first := range []string{"kops", "ours"} {
		t.Run(first+" first", func(t *testing.T) {
			env, err := testenv.Start(context.Background(), testenv.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = env.Stop() })
			k, err := kubernetes.NewForConfig(env.RESTConfig)
			if err != nil {
				t.Fatal(err)
			}
			dyn, err := dynamic.NewForConfig(env.RESTConfig)
			if err != nil {
				t.Fatal(err)
			}
			tools := map[string]tool{
				"kops": {name: "kops", bin: kopsBin, kubeconfig: env.Kubeconfig, home: t.TempDir()},
				"ours": {name: "ours", bin: oursBin, kubeconfig: env.Kubeconfig, home: t.TempDir()},
			}
			a, b := tools["kops"], tools["ours"]
			if first == "ours" {
				a, b = b, a
			}
			dir := t.TempDir()
			v1, v2 := writeKStyleChannel(t, dir, 1), writeKStyleChannel(t, dir, 2)
			// No node runs pods here, as in kOps's bootstrap: ours does not
			// wait for readiness.
			apply := func(tl tool, loc string) string {
				args := []string{"apply", "channel", loc, "--yes"}
				if tl.name == "ours" {
					args = append(args, "--wait=false")
				}
				return tl.mustRun(t, args...)
			}

			for _, loc := range []string{bundle, v1} {
				out := apply(a, loc)
				if strings.Contains(out, "No update required") {
					t.Errorf("%s on a fresh cluster found nothing to do for %s:\n%s", a.name, loc, out)
				}
			}
			records := installRecords(t, k)
			if diff := cmp.Diff(sortedKeys(records), wantAddons); diff != "" {
				t.Fatalf("install records after %s applied both channels (-got +want):\n%s", a.name, diff)
			}
			objects := kstyleObjects(t, dyn)
			wantV1 := []string{
				"ClusterRole kstyle-reader",
				"ConfigMap kube-system/kstyle-dns-a", "ConfigMap kube-system/kstyle-dns-b",
				"Deployment kube-system/kstyle-dns", "Service kube-system/kstyle-dns", "ServiceAccount kube-system/kstyle-dns",
			}
			if diff := cmp.Diff(objects, wantV1); diff != "" {
				t.Errorf("objects of the kOps-style channel (-got +want):\n%s", diff)
			}

			// The other tool, then each once more: nothing to do.
			for _, tl := range []tool{b, a, b} {
				for _, loc := range []string{bundle, v1} {
					if out := apply(tl, loc); !strings.Contains(out, "No update required") {
						t.Errorf("%s after %s applied %s has something to do:\n%s", tl.name, a.name, loc, out)
					}
				}
			}
			if diff := cmp.Diff(installRecords(t, k), records); diff != "" {
				t.Errorf("install records changed by runs with nothing to do (-got +want):\n%s", diff)
			}

			// The other tool upgrades what the first installed.
			apply(b, v2)
			got := kstyleObjects(t, dyn)
			wantV2 := []string{
				"ClusterRole kstyle-reader",
				"ConfigMap kube-system/kstyle-dns-a", "ConfigMap kube-system/kstyle-dns-c",
				"Deployment kube-system/kstyle-dns", "ServiceAccount kube-system/kstyle-dns",
			}
			if diff := cmp.Diff(got, wantV2); diff != "" {
				t.Errorf("objects after %s upgraded what %s installed (-got +want):\n%s", b.name, a.name, diff)
			}
			after := installRecords(t, k)
			if diff := cmp.Diff(sortedKeys(after), wantAddons); diff != "" {
				t.Errorf("install records after the upgrade (-got +want):\n%s", diff)
			}
			for name, v := range records {
				if name != "kstyle-dns" && after[name] != v {
					t.Errorf("record of %s changed by the upgrade of kstyle-dns: %s, was %s", name, after[name], v)
				}
			}
			for _, tl := range []tool{a, b} {
				if out := apply(tl, v2); !strings.Contains(out, "No update required") {
					t.Errorf("%s after %s upgraded has something to do:\n%s", tl.name, b.name, out)
				}
			}
		})
	}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// writeRangeChannel writes a channel of addon above-every-range whose
// releases are 1.0.0 and 1.1.0 with the given kubernetesVersion ranges ("-"
// leaves a release out), each a ConfigMap naming its version, and returns
// its file:// URL.
func writeRangeChannel(t *testing.T, dir, file, range100, range110 string) string {
	t.Helper()
	var entries []string
	for _, r := range []struct{ version, kubernetesVersion string }{{"1.0.0", range100}, {"1.1.0", range110}} {
		if r.kubernetesVersion == "-" {
			continue
		}
		m := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: above-every-range, namespace: kube-system, labels: {k8s-addon: above-every-range.addons.k8s.io}}\ndata: {version: %q}\n", r.version)
		name := "above-every-range-" + r.version + ".yaml"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(m), 0o644); err != nil {
			t.Fatal(err)
		}
		entry := fmt.Sprintf("  - name: above-every-range\n    version: %s\n    id: k8s-1.20\n    manifest: %s\n    manifestHash: %s\n    selector: {k8s-addon: above-every-range.addons.k8s.io}\n", r.version, name, HashManifest([]byte(m)))
		if r.kubernetesVersion != "" {
			entry += fmt.Sprintf("    kubernetesVersion: %q\n", r.kubernetesVersion)
		}
		entries = append(entries, entry)
	}
	path := filepath.Join(dir, file)
	if err := os.WriteFile(path, []byte("kind: Addons\nmetadata: {name: above-every-range}\nspec:\n  addons:\n"+strings.Join(entries, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	return "file://" + path
}

// TestIntegrationKOpsChannelsAboveEveryRange runs kOps's channels and ours
// on a cluster whose Kubernetes minor is above the top of every range of a
// channel, after either installed release 1.1.0 of the addon. With both
// releases capped there (what channels lint passes), neither tool changes
// anything and 1.1.0 stays; kOps's finds nothing to do, ours fails naming
// the cluster's version and the range offered (the cliff is not silent). With 1.0.0's range left open-ended (the
// time bomb lint refuses), ours refuses the downgrade and kOps's channels,
// which takes the last entry that fits whatever its version, installs 1.0.0.
func TestIntegrationKOpsChannelsAboveEveryRange(t *testing.T) {
	kopsBin := kopsChannels(t)
	oursBin := testenv.Build(t, "cmd/channels")
	for _, installer := range []string{"kops", "ours"} {
		t.Run(installer+" installs", func(t *testing.T) {
			env, err := testenv.Start(context.Background(), testenv.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = env.Stop() })
			k, err := kubernetes.NewForConfig(env.RESTConfig)
			if err != nil {
				t.Fatal(err)
			}
			info, err := k.Discovery().ServerVersion()
			if err != nil {
				t.Fatal(err)
			}
			version, err := ServerVersion(info.GitVersion)
			if err != nil {
				t.Fatal(err)
			}
			top := fmt.Sprintf("<1.%d.0", version.Minor) // just below the cluster
			dir := t.TempDir()
			installed := writeRangeChannel(t, dir, "installed.yaml", "-", "")
			capped := writeRangeChannel(t, dir, "capped.yaml", ">=1.20.0 "+top, ">=1.20.0 "+top)
			bomb := writeRangeChannel(t, dir, "bomb.yaml", ">=1.20.0", ">=1.20.0 "+top)
			for _, c := range []struct {
				loc  string
				want int
			}{{capped, 0}, {bomb, 1}} {
				releases, err := Load(context.Background(), NewFetcher(), c.loc)
				if err != nil {
					t.Fatal(err)
				}
				if got := len(Lint(releases)); got != c.want {
					t.Errorf("Lint(%s) found %d problems, want %d: %v", c.loc, got, c.want, Lint(releases))
				}
			}

			tools := map[string]tool{
				"kops": {name: "kops", bin: kopsBin, kubeconfig: env.Kubeconfig, home: t.TempDir()},
				"ours": {name: "ours", bin: oursBin, kubeconfig: env.Kubeconfig, home: t.TempDir()},
			}
			apply := func(tl tool, loc string) string {
				args := []string{"apply", "channel", loc, "--yes"}
				if tl.name == "ours" {
					args = append(args, "--wait=false")
				}
				return tl.mustRun(t, args...)
			}
			installedVersion := func() string {
				cm, err := k.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "above-every-range", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return cm.Data["version"]
			}
			apply(tools[installer], installed)
			record := installRecords(t, k)["above-every-range"]
			if got := installedVersion(); got != "1.1.0" || record == "" {
				t.Fatalf("after %s installed: version %q, record %q", installer, got, record)
			}

			// Neither tool changes anything; kOps's says there is nothing
			// to do, ours that the cluster fell off the channel's ranges.
			for _, name := range []string{"kops", "ours", "kops", "ours"} {
				if name == "kops" {
					if out := apply(tools[name], capped); !strings.Contains(out, "No update required") {
						t.Errorf("kops on the capped channel has something to do:\n%s", out)
					}
					continue
				}
				out, code := tools[name].run(t, "apply", "channel", capped, "--yes", "--wait=false")
				want := fmt.Sprintf(`addon "above-every-range": no release fits Kubernetes %s: the channels offer 1.1.0 (k8s-1.20) for >=1.20.0 %s`, version, top)
				if code != 1 || !strings.Contains(out, want) || strings.Contains(out, "No update required") {
					t.Errorf("ours on the capped channel: exit %d, want 1 and %q:\n%s", code, want, out)
				}
			}
			if got := installedVersion(); got != "1.1.0" || installRecords(t, k)["above-every-range"] != record {
				t.Errorf("the capped channel changed the addon: version %q, record %q, was %q", got, installRecords(t, k)["above-every-range"], record)
			}

			out := apply(tools["ours"], bomb)
			if !strings.Contains(out, "downgrade refused") || !strings.Contains(out, "No update required") {
				t.Errorf("ours on the time-bombed channel does not refuse the downgrade:\n%s", out)
			}
			if got := installedVersion(); got != "1.1.0" {
				t.Errorf("ours on the time-bombed channel installed %s", got)
			}
			apply(tools["kops"], bomb)
			if got := installedVersion(); got != "1.0.0" {
				t.Errorf("kOps's channels on the time-bombed channel left %s; it takes the last entry that fits, 1.0.0, which is why lint refuses the channel", got)
			}
		})
	}
}

// TestIntegrationKOpsChannelsReadUpgradesFrom shows that kOps's channels
// (v1.32.0) loads and applies a channel whose releases carry upgradesFrom,
// the field ours refuses jumps by: kOps decodes channels leniently and
// ignores it. Ours then finds the record kOps wrote up to date; and after
// ours went 0.1.0 -> 0.2.0 -> 0.3.0 on another addon, kOps's channels finds
// nothing to do.
func TestIntegrationKOpsChannelsReadUpgradesFrom(t *testing.T) {
	kopsBin := kopsChannels(t)
	oursBin := testenv.Build(t, "cmd/channels")
	env, err := testenv.Start(context.Background(), testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	k, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	kops := tool{name: "kops", bin: kopsBin, kubeconfig: env.Kubeconfig, home: t.TempDir()}
	ours := tool{name: "ours", bin: oursBin, kubeconfig: env.Kubeconfig, home: t.TempDir()}
	dir := t.TempDir()
	channel := func(file, name string, versions ...string) string {
		var releases []channelstest.Release
		for _, v := range versions {
			r := channelstest.Release{Name: name, Version: v, ID: "k8s-1.20",
				Manifest: kstyleObject("ConfigMap", "v1", name, fmt.Sprintf("data: {version: %q}\n", v))}
			if v == "0.3.0" {
				r.UpgradesFrom = "0.2.0"
			}
			releases = append(releases, r)
		}
		loc := channelstest.WriteChannel(t, dir, file, releases...)
		data, err := os.ReadFile(loc)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(file, "path") && !strings.Contains(string(data), "upgradesFrom: 0.2.0") {
			t.Fatalf("channel %s does not carry upgradesFrom:\n%s", file, data)
		}
		return "file://" + loc
	}

	kopsFirst := channel("kops-path.yaml", "kstyle-path", "0.1.0", "0.2.0", "0.3.0")
	out := kops.mustRun(t, "apply", "channel", kopsFirst, "--yes")
	if strings.Contains(out, "No update required") {
		t.Errorf("kOps's channels did not apply the channel with upgradesFrom:\n%s", out)
	}
	if record := installRecords(t, k)["kstyle-path"]; !strings.Contains(record, `"manifestHash"`) {
		t.Fatalf("kOps's channels wrote no record for the channel with upgradesFrom: %q", record)
	}
	if out := ours.mustRun(t, "apply", "channel", kopsFirst, "--yes", "--wait=false"); !strings.Contains(out, "No update required") {
		t.Errorf("ours after kOps's channels applied the channel with upgradesFrom:\n%s", out)
	}
	if out := kops.mustRun(t, "get", "addons"); !strings.Contains(out, "kstyle-path") {
		t.Errorf("kOps's get addons does not list the addon:\n%s", out)
	}

	ours.mustRun(t, "apply", "channel", channel("ours-old.yaml", "kstyle-path2", "0.1.0", "0.2.0"), "--yes", "--wait=false")
	oursPath := channel("ours-path.yaml", "kstyle-path2", "0.1.0", "0.2.0", "0.3.0")
	if out := ours.mustRun(t, "apply", "channel", oursPath, "--yes", "--wait=false"); !strings.Contains(out, "kstyle-path2: Updated 0.2.0 (k8s-1.20) -> 0.3.0 (k8s-1.20)") {
		t.Errorf("ours through the path:\n%s", out)
	}
	if out := kops.mustRun(t, "apply", "channel", oursPath, "--yes"); !strings.Contains(out, "No update required") {
		t.Errorf("kOps's channels after ours upgraded through the path:\n%s", out)
	}
}
