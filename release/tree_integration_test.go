package release

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/tools/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestIntegrationConfiguredRelease renders a release with a configuration
// that sets every key, applies its bootstrap and monitoring channels with
// channels on a real kube-apiserver, and reads every setting back from the
// objects the cluster holds; every field of every rendered object must be
// there as rendered. (The Prometheus Operator's channel needs its CRDs: its
// settings are read back from the render in TestEveryKey.)
func TestIntegrationConfiguredRelease(t *testing.T) {
	out := writeTree(t, everyKey(t))
	// live holds the cluster's objects of each applied manifest, from
	// both kinds of cluster.
	live := tree{}
	for _, flavour := range []struct {
		name     string
		channels []string
		// operator installs the Prometheus Operator's CRDs first.
		operator bool
	}{
		{name: "standard", channels: []string{"bootstrap-channel.yaml", "addons/monitoring-channel.yaml"}},
		{name: "local, Prometheus Operator", channels: []string{"addons/local-channel.yaml", "bootstrap-channel.yaml", "addons/kos-monitoring/prometheus-operator/channel.yaml"}, operator: true},
	} {
		t.Run(flavour.name, func(t *testing.T) {
			applyAndRead(t, out, flavour.channels, flavour.operator, live)
		})
	}
	runChecks(t, live, everyKeyChecks())
}

// applyAndRead applies the channels of the tree at out on a new control
// plane and adds the cluster's objects of each applied manifest to live,
// checking that each holds every field of its render.
func applyAndRead(t *testing.T, out string, chans []string, operator bool, live tree) {
	ctx := context.Background()
	env, err := testenv.Start(ctx, testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	dyn, err := dynamic.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	if operator {
		for file, resource := range map[string]string{"podmonitors.yaml": "podmonitors", "prometheusrules.yaml": "prometheusrules"} {
			served := schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: resource}
			if err := testenv.InstallCRD(ctx, dyn, "tools/monitoring/testdata/crds/"+file, served); err != nil {
				t.Fatal(err)
			}
		}
	}
	fetcher := channels.NewFetcher()
	var releases []*channels.Addon
	for _, ch := range chans {
		loaded, err := channels.Load(ctx, fetcher, filepath.Join(out, ch))
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, loaded...)
	}
	client, err := channels.NewClient(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := client.Plan(ctx, releases)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Apply(ctx, plan, channels.ApplyOptions{Fetcher: fetcher}); err != nil {
		t.Fatalf("applying the configured release: %v", err)
	}

	disc, err := discovery.NewDiscoveryClientForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	objects, manifests := 0, 0
	for _, it := range plan.Items {
		data, err := fetcher.FetchManifest(ctx, it.Addon)
		if err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(filepath.Join(out, "addons"), it.Addon.Manifest)
		if err != nil {
			t.Fatal(err)
		}
		rel = filepath.ToSlash(rel)
		rendered, err := channels.DecodeObjects(data)
		if err != nil {
			t.Fatal(err)
		}
		manifests++
		for _, want := range rendered {
			got, err := get(ctx, dyn, mapper, want)
			if err != nil {
				t.Errorf("%s: %v", rel, err)
				continue
			}
			// Every addon that runs in a namespace declares it, and the
			// last one applied stamps its label on it (addons/README.md).
			if want.GetKind() != "Namespace" {
				if diff := contained(want.Object, got.Object, ""); diff != "" {
					t.Errorf("%s: %s %s differs in the cluster from its render: %s", rel, want.GetKind(), want.GetName(), diff)
				}
			}
			live[rel] = append(live[rel], got)
			objects++
		}
	}
	t.Logf("%d objects of %d manifests applied and read back", objects, manifests)
}

// get reads the cluster's copy of obj.
func get(ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	gvk := obj.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		r = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
	}
	return r.Get(ctx, obj.GetName(), metav1.GetOptions{})
}

// contained returns where want is not part of got ("" when it is): every
// field of want, with its value; lists element by element.
func contained(want, got any, at string) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: %v, want an object", at, got)
		}
		for k, v := range w {
			if d := contained(v, g[k], at+"."+k); d != "" {
				return d
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s: %v, want %v", at, got, want)
		}
		for i := range w {
			if d := contained(w[i], g[i], fmt.Sprintf("%s[%d]", at, i)); d != "" {
				return d
			}
		}
		return ""
	}
	if got == nil && want != nil && reflect.ValueOf(want).IsZero() {
		// The server leaves out a field at its zero value (false, 0, "").
		return ""
	}
	if !cmp.Equal(want, got) {
		return fmt.Sprintf("%s: %v, want %v", at, got, want)
	}
	return ""
}
