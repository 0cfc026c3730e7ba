package apicheck

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/components/pki"
	"github.com/kos-sdn/kos/tools/addons/bundle"
)

// TestAlternativesGrantTheSame checks that the releases the local channel
// puts in place of the bootstrap channel's (etcd as one member, the agent on
// the userspace datapath) have the same ServiceAccounts and RBAC, so that
// TestIntegrationRBAC, which applies the bootstrap channel's, covers them.
func TestAlternativesGrantTheSame(t *testing.T) {
	ctx := context.Background()
	fetcher := channels.NewFetcher()
	load := func(names ...string) []*channels.Addon {
		var releases []*channels.Addon
		for _, name := range names {
			loaded, err := channels.Load(ctx, fetcher, filepath.Join(repoRoot, name))
			if err != nil {
				t.Fatalf("loading %s: %v", name, err)
			}
			releases = append(releases, loaded...)
		}
		return releases
	}
	bootstrap := load("bootstrap-channel.yaml")
	local := load("addons/local-channel.yaml", "bootstrap-channel.yaml")
	for _, v := range []string{"1.29.0", "1.30.0", "1.37.0"} {
		version := semver.MustParse(v)
		want := identityObjects(t, fetcher, channels.Select(bootstrap, version))
		got := identityObjects(t, fetcher, channels.Select(local, version))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Kubernetes %s: ServiceAccounts and RBAC of the local channel's picks differ from the bootstrap channel's (-bootstrap +local):\n%s", v, diff)
		}
	}
}

// identityObjects returns the objects of the releases that channels applies
// before any other (namespaces, ServiceAccounts, RBAC), as it applies them.
func identityObjects(t *testing.T, fetcher *channels.Fetcher, releases []*channels.Addon) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, a := range releases {
		data, err := fetcher.FetchManifest(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := channels.DecodeObjects(data)
		if err != nil {
			t.Fatalf("decoding %s: %v", a.Manifest, err)
		}
		channels.StampLabels(objs, a.Selector)
		for _, u := range objs {
			if channels.PhaseOf(u.GroupVersionKind().GroupKind()) <= channels.PhaseIdentity {
				out = append(out, u.Object)
			}
		}
	}
	return out
}

// TestImages checks the images of every release: the KOS components' are
// tagged with the release's version, as `make images` builds them, and every
// image is pulled only when the node lacks it, since the images are imported
// into the nodes rather than pulled from a registry.
func TestImages(t *testing.T) {
	ctx := context.Background()
	b, err := bundle.Load(ctx, repoRoot, bundle.Channels)
	if err != nil {
		t.Fatal(err)
	}
	fetcher := channels.NewFetcher()
	for _, f := range b.Folders {
		for _, a := range f.Releases {
			data, err := fetcher.FetchManifest(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := channels.DecodeObjects(data)
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range objs {
				containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
				inits, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "initContainers")
				for _, c := range append(containers, inits...) {
					c := c.(map[string]any)
					image, _ := c["image"].(string)
					where := fmt.Sprintf("%s: %s, container %v", b.Rel(a.Manifest), describeObject(u), c["name"])
					if repo, tag, _ := strings.Cut(image, ":"); strings.HasPrefix(repo, "kos.example.com/kos-") && tag != a.VersionString() {
						t.Errorf("%s: image %s, want the tag %s of the release", where, image, a.VersionString())
					}
					if p := c["imagePullPolicy"]; p != "IfNotPresent" {
						t.Errorf("%s: imagePullPolicy %v, want IfNotPresent", where, p)
					}
				}
			}
		}
	}
}

// TestPKIRules checks that the RBAC of the certificates follows the code
// that makes them. Up to 0.1.0, each kos-pki init container signed its own
// set: the Roles kos-etcd-pki and kos-apiserver-pki grant exactly what
// pki.Rules says for it, and kos-apiserver's ClusterRole holds the rule for
// the APIService's CA bundle. From 0.2.0 on, only the signer kos-pki (addon
// kos-apiserver) does: its Role and ClusterRole grant exactly pki.Rules(all),
// and no other Role or ClusterRole of the bundle names a Secret or may do
// more than get an APIService (kos-agent and kos-controller-manager read the
// KOS APIService's CA bundle, to trust kos-apiserver when they reach it
// directly).
func TestPKIRules(t *testing.T) {
	const apiService = "v1alpha1.network.example.com"
	etcdRules, _, err := pki.Rules(pki.SetEtcd, "")
	if err != nil {
		t.Fatal(err)
	}
	apiserverRules, apiserverClusterRules, err := pki.Rules(pki.SetAPIServer, apiService)
	if err != nil {
		t.Fatal(err)
	}
	signerRules, signerClusterRules, err := pki.Rules(pki.SetAll, apiService)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b, err := bundle.Load(ctx, repoRoot, bundle.Channels)
	if err != nil {
		t.Fatal(err)
	}
	fetcher := channels.NewFetcher()
	checked, signers := 0, 0
	for _, f := range b.Folders {
		for _, a := range f.Releases {
			data, err := fetcher.FetchManifest(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := channels.DecodeObjects(data)
			if err != nil {
				t.Fatal(err)
			}
			manifest := b.Rel(a.Manifest)
			if a.VersionString() != "0.1.0" {
				if a.Name == "kos-apiserver" {
					signers++
					if diff := cmp.Diff(signerRules, rules(t, objs, "Role", "kos-pki")); diff != "" {
						t.Errorf("%s: Role kos-pki differs from pki.Rules(all) (-pki +manifest):\n%s", manifest, diff)
					}
					if diff := cmp.Diff(signerClusterRules, rules(t, objs, "ClusterRole", "kos-pki")); diff != "" {
						t.Errorf("%s: ClusterRole kos-pki differs from pki.Rules(all, %s) (-pki +manifest):\n%s", manifest, apiService, diff)
					}
				}
				for _, u := range objs {
					if u.GroupVersionKind().Group != rbacv1.GroupName || (u.GetKind() != "Role" && u.GetKind() != "ClusterRole") || u.GetName() == "kos-pki" {
						continue
					}
					for _, r := range rules(t, objs, u.GetKind(), u.GetName()) {
						readOnly := !slices.ContainsFunc(r.Verbs, func(v string) bool { return v != "get" })
						if slices.Contains(r.Resources, "secrets") || (slices.Contains(r.Resources, "apiservices") && !readOnly) {
							t.Errorf("%s: %s %s grants %v on %v: only the signer kos-pki may", manifest, u.GetKind(), u.GetName(), r.Verbs, r.Resources)
						}
					}
				}
				continue
			}
			switch a.Name {
			case "kos-etcd":
				checked++
				if diff := cmp.Diff(etcdRules, rules(t, objs, "Role", "kos-etcd-pki")); diff != "" {
					t.Errorf("%s: Role kos-etcd-pki differs from pki.Rules(etcd) (-pki +manifest):\n%s", manifest, diff)
				}
			case "kos-apiserver":
				checked++
				if diff := cmp.Diff(apiserverRules, rules(t, objs, "Role", "kos-apiserver-pki")); diff != "" {
					t.Errorf("%s: Role kos-apiserver-pki differs from pki.Rules(apiserver) (-pki +manifest):\n%s", manifest, diff)
				}
				cluster := rules(t, objs, "ClusterRole", "kos-apiserver")
				for _, want := range apiserverClusterRules {
					if !slices.ContainsFunc(cluster, func(r rbacv1.PolicyRule) bool { return cmp.Equal(r, want) }) {
						t.Errorf("%s: ClusterRole kos-apiserver lacks the rule %+v of pki.Rules(apiserver, %s)", manifest, want, apiService)
					}
				}
			}
		}
	}
	if checked == 0 || signers == 0 {
		t.Errorf("found %d releases of kos-etcd or kos-apiserver 0.1.0 and %d of kos-apiserver with the signer, want some of each", checked, signers)
	}
}

// rules returns the rules of the RBAC role of that kind and name among objs.
func rules(t *testing.T, objs []*unstructured.Unstructured, kind, name string) []rbacv1.PolicyRule {
	t.Helper()
	for _, u := range objs {
		if u.GroupVersionKind().Group != rbacv1.GroupName || u.GetKind() != kind || u.GetName() != name {
			continue
		}
		var role rbacv1.ClusterRole // a Role's rules read the same
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &role); err != nil {
			t.Fatalf("%s %s: %v", kind, name, err)
		}
		return role.Rules
	}
	t.Errorf("no %s %s", kind, name)
	return nil
}
