package monitoring

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/tools/testenv"
)

// warningFunc turns a function into a rest.WarningHandler.
type warningFunc func(code int, agent, text string)

func (f warningFunc) HandleWarningHeader(code int, agent, text string) { f(code, agent, text) }

// TestIntegrationOperatorDryRun applies every object of the Prometheus
// Operator variant with server-side apply, dry-run and strict field
// validation, as channels would (its field manager, the selector stamped
// on), on a real kube-apiserver with CRDs of PodMonitor and PrometheusRule
// that hold exactly the fields the variant uses (testdata/crds): the server
// must accept every object without a warning. tools/addons/apicheck does
// the same for the releases of the bundle's channels, which this variant's
// channel is not one of: a plain cluster has no such CRDs.
func TestIntegrationOperatorDryRun(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	var mu sync.Mutex
	var warnings []string
	cfg := rest.CopyConfig(env.RESTConfig)
	cfg.WarningHandler = warningFunc(func(code int, agent, text string) {
		mu.Lock()
		defer mu.Unlock()
		warnings = append(warnings, text)
	})
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for file, resource := range map[string]string{"podmonitors.yaml": "podmonitors", "prometheusrules.yaml": "prometheusrules"} {
		served := schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: resource}
		if err := testenv.InstallCRD(ctx, dyn, "tools/monitoring/testdata/crds/"+file, served); err != nil {
			t.Fatal(err)
		}
	}
	client, err := channels.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	objs := operatorObjects(t)
	channels.StampLabels(objs, map[string]string{"addon.kos.example.com/name": "kos-monitoring"})
	apply := func(u *unstructured.Unstructured, dryRun bool) error {
		gvk := u.GroupVersionKind()
		mapping, err := client.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return err
		}
		data, err := json.Marshal(u.Object)
		if err != nil {
			return err
		}
		force := true
		opts := metav1.PatchOptions{FieldManager: channels.FieldManager, Force: &force, FieldValidation: "Strict"}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		var r dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			r = dyn.Resource(mapping.Resource).Namespace(u.GetNamespace())
		}
		_, err = r.Patch(ctx, u.GetName(), types.ApplyPatchType, data, opts)
		return err
	}
	// As channels applies them: the namespace and the ServiceAccounts
	// first, for real, so that what they hold meets them.
	for _, u := range objs {
		if u.GetKind() == "Namespace" || u.GetKind() == "ServiceAccount" {
			if err := apply(u, false); err != nil {
				t.Fatalf("applying %s %s: %v", u.GetKind(), u.GetName(), err)
			}
		}
	}
	for _, u := range objs {
		mu.Lock()
		warnings = nil
		mu.Unlock()
		if err := apply(u, true); err != nil {
			t.Errorf("%s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
			continue
		}
		mu.Lock()
		if len(warnings) > 0 {
			t.Errorf("%s %s/%s: the server warned: %s", u.GetKind(), u.GetNamespace(), u.GetName(), strings.Join(warnings, "; "))
		}
		mu.Unlock()
	}
}
