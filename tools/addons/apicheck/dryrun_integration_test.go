package apicheck

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/blang/semver/v4"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/tools/addons/bundle"
)

// TestIntegrationDryRun applies every manifest of every release of every
// addon folder, with server-side apply and dry-run, on each server whose
// version the release's kubernetesVersion range contains, as channels would
// apply it (its field manager, the selector stamped on), and a pod of each
// workload. The server must accept every object without a warning, and every
// release must fit at least one server.
func TestIntegrationDryRun(t *testing.T) {
	servers := testServers(t)
	ctx := context.Background()
	b, err := bundle.Load(ctx, repoRoot, bundle.Channels)
	if err != nil {
		t.Fatalf("loading the addon bundle: %v", err)
	}
	fetcher := channels.NewFetcher()
	for _, f := range b.Folders {
		if f.LoadErr != nil {
			t.Errorf("%s does not load: %v", f.Index, f.LoadErr)
			continue
		}
		for _, a := range f.Releases {
			release := fmt.Sprintf("%s/%s/%s", f.Name, a.VersionString(), a.ID)
			data, err := fetcher.FetchManifest(ctx, a)
			if err != nil {
				t.Errorf("%s: %v", release, err)
				continue
			}
			tested := 0
			for _, s := range servers {
				if !s.fits(a) {
					continue
				}
				tested++
				t.Run(release+"/"+s.String(), func(t *testing.T) {
					dryRunApply(t, s, a, data)
				})
			}
			if tested == 0 {
				t.Errorf("release %s (kubernetesVersion %q) fits none of the test servers (%v): start a kube-apiserver of its range in tools/addons/apicheck",
					release, a.KubernetesVersion, servers)
			}
			minors, err := endMinors(a.KubernetesVersion)
			if err != nil {
				t.Errorf("%s: %v", release, err)
			}
			for _, minor := range minors {
				if !slices.ContainsFunc(servers, func(s *server) bool { return s.version.Major == 1 && s.version.Minor == minor }) {
					t.Errorf("release %s (kubernetesVersion %q) claims Kubernetes 1.%d, which no test server runs (%v): start a kube-apiserver 1.%d in tools/addons/apicheck or narrow the range",
						release, a.KubernetesVersion, minor, servers, minor)
				}
			}
		}
	}
}

// endMinors returns the oldest and the newest minor of Kubernetes 1 that a
// kubernetesVersion range claims, the two a release's checks must run on;
// only the oldest for a range without an upper bound (the bundle has none
// since the 0.1.0 entries were capped; channels lint refuses an old
// open-ended range beside a newer capped one).
func endMinors(kubernetesVersion string) ([]uint64, error) {
	r, err := semver.ParseRange(kubernetesVersion)
	if kubernetesVersion == "" {
		r, err = func(semver.Version) bool { return true }, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetesVersion %q: %w", kubernetesVersion, err)
	}
	const beyond = 100
	var claimed []uint64
	for minor := uint64(0); minor <= beyond; minor++ {
		if r(semver.Version{Major: 1, Minor: minor}) || r(semver.Version{Major: 1, Minor: minor, Patch: 1000}) {
			claimed = append(claimed, minor)
		}
	}
	switch {
	case len(claimed) == 0:
		return nil, fmt.Errorf("kubernetesVersion %q claims no Kubernetes 1 minor", kubernetesVersion)
	case claimed[len(claimed)-1] == beyond:
		return claimed[:1], nil
	case len(claimed) == 1:
		return claimed, nil
	}
	return []uint64{claimed[0], claimed[len(claimed)-1]}, nil
}

// dryRunApply applies a release's manifest with dry-run on s and fails the
// test for every object the server refuses or warns about. Then it does the
// same for a pod of each workload, which meets the admission checks of pods
// (service account, priority class, pod security): for those, the
// manifest's namespaces and ServiceAccounts are applied for real first.
func dryRunApply(t *testing.T, s *server, a *channels.Addon, data []byte) {
	ctx := context.Background()
	objs, err := channels.DecodeObjects(data)
	if err != nil {
		t.Fatalf("decoding %s: %v", a.Manifest, err)
	}
	channels.StampLabels(objs, a.Selector)
	var pods []*unstructured.Unstructured
	for _, u := range objs {
		pods = append(pods, podsOf(t, u)...)
	}

	var mu sync.Mutex
	var warnings []string
	cfg := rest.CopyConfig(s.env.RESTConfig)
	cfg.WarningHandler = warningFunc(func(code int, agent, text string) {
		mu.Lock()
		defer mu.Unlock()
		warnings = append(warnings, text)
	})
	client, err := channels.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// channels applies namespaces before what they hold; a dry-run of an
	// object in a namespace the server does not have fails.
	for _, u := range objs {
		if gk := u.GroupVersionKind().GroupKind(); gk.Group == "" && gk.Kind == "Namespace" {
			if err := apply(ctx, client, u, false); err != nil {
				t.Fatalf("applying %s for what it holds: %v", describeObject(u), err)
			}
		}
	}
	for _, u := range objs {
		what := describeObject(u)
		mu.Lock()
		warnings = nil
		mu.Unlock()
		if err := apply(ctx, client, u, true); err != nil {
			t.Errorf("%s: %v", what, err)
			continue
		}
		mu.Lock()
		if len(warnings) > 0 {
			t.Errorf("%s: Kubernetes %s warned: %s", what, s, strings.Join(warnings, "; "))
		}
		mu.Unlock()
	}
	if len(pods) == 0 {
		return
	}
	for _, u := range objs {
		if gk := u.GroupVersionKind().GroupKind(); gk.Group == "" && (gk.Kind == "Namespace" || gk.Kind == "ServiceAccount") {
			if err := apply(ctx, client, u, false); err != nil {
				t.Fatalf("applying %s for the pods: %v", describeObject(u), err)
			}
		}
	}
	for _, pod := range pods {
		what := describeObject(pod)
		mu.Lock()
		warnings = nil
		mu.Unlock()
		if err := apply(ctx, client, pod, true); err != nil {
			t.Errorf("%s: %v", what, err)
			continue
		}
		mu.Lock()
		if len(warnings) > 0 {
			t.Errorf("%s: Kubernetes %s warned: %s", what, s, strings.Join(warnings, "; "))
		}
		mu.Unlock()
	}
}

// podsOf returns a pod like those a workload makes: its template, named
// after it, with the volumes of a StatefulSet's claims as its first member
// has them.
func podsOf(t *testing.T, u *unstructured.Unstructured) []*unstructured.Unstructured {
	t.Helper()
	gvk := u.GroupVersionKind()
	path := []string{"spec", "template"}
	switch {
	case gvk.Group == "apps" && (gvk.Kind == "Deployment" || gvk.Kind == "DaemonSet" || gvk.Kind == "StatefulSet"):
	case gvk.Group == "batch" && gvk.Kind == "CronJob":
		path = []string{"spec", "jobTemplate", "spec", "template"}
	default:
		return nil
	}
	template, ok, err := unstructured.NestedMap(u.Object, path...)
	if err != nil || !ok {
		t.Fatalf("%s has no pod template: %v", describeObject(u), err)
	}
	pod := &unstructured.Unstructured{Object: template}
	pod.SetAPIVersion("v1")
	pod.SetKind("Pod")
	pod.SetName(strings.ToLower(gvk.Kind) + "-" + u.GetName() + "-0")
	pod.SetNamespace(u.GetNamespace())
	claims, _, _ := unstructured.NestedSlice(u.Object, "spec", "volumeClaimTemplates")
	if len(claims) > 0 {
		volumes, _, _ := unstructured.NestedSlice(pod.Object, "spec", "volumes")
		for _, c := range claims {
			name, _, _ := unstructured.NestedString(c.(map[string]any), "metadata", "name")
			volumes = append(volumes, map[string]any{
				"name":                  name,
				"persistentVolumeClaim": map[string]any{"claimName": name + "-" + u.GetName() + "-0"},
			})
		}
		if err := unstructured.SetNestedSlice(pod.Object, volumes, "spec", "volumes"); err != nil {
			t.Fatal(err)
		}
	}
	return []*unstructured.Unstructured{pod}
}

// apply server-side applies one object as channels does, with dry-run when
// asked.
func apply(ctx context.Context, client *channels.Client, u *unstructured.Unstructured, dryRun bool) error {
	gvk := u.GroupVersionKind()
	mapping, err := client.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("the server does not serve %s: %w", gvk, err)
	}
	opts := metav1.ApplyOptions{FieldManager: channels.FieldManager, Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	r := client.Dynamic.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := u.GetNamespace()
		if ns == "" {
			ns = channels.DefaultObjectNamespace
		}
		_, err = r.Namespace(ns).Apply(ctx, u.GetName(), u, opts)
	} else {
		_, err = r.Apply(ctx, u.GetName(), u, opts)
	}
	return err
}

func describeObject(u *unstructured.Unstructured) string {
	if ns := u.GetNamespace(); ns != "" {
		return fmt.Sprintf("%s %s/%s", u.GetKind(), ns, u.GetName())
	}
	return fmt.Sprintf("%s %s", u.GetKind(), u.GetName())
}

// warningFunc turns a function into a rest.WarningHandler.
type warningFunc func(code int, agent, text string)

func (f warningFunc) HandleWarningHeader(code int, agent, text string) { f(code, agent, text) }
