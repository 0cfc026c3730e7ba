package daemon

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/channels/internal/channelstest"
	"github.com/kos-sdn/kos/tools/testenv"
)

// annotatedConfigMap is a ConfigMap with one annotation.
func annotatedConfigMap(namespace, name, value, key, annotation string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: %s, annotations: {%s: %q}}\ndata: {key: %q}\n",
		name, namespace, key, annotation, value)
}

// driftedSeries returns the channels_drifted_object series of a daemon, as
// "addon kind namespace/name drift".
func driftedSeries(t *testing.T, d *Daemon) []string {
	t.Helper()
	families, err := d.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		if f.GetName() != "channels_drifted_object" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			out = append(out, fmt.Sprintf("%s %s %s/%s %s", l["addon"], l["kind"], l["namespace"], l["name"], l["drift"]))
		}
	}
	return out
}

func TestIntegrationDriftModes(t *testing.T) {
	for _, mode := range []DriftMode{DriftRepair, DriftReport, DriftOff} {
		t.Run(string(mode), func(t *testing.T) {
			ctx := context.Background()
			name := "drift-" + string(mode)
			ns := name
			dir := t.TempDir()
			loc := channelstest.WriteChannel(t, dir, "channel.yaml", channelstest.Release{Name: name, Version: "1.0.0", Manifest: channelstest.Manifest(
				channelstest.Namespace(ns),
				channelstest.ConfigMap(ns, "edited", "release"),
				annotatedConfigMap(ns, "opted-out", "release", DriftAnnotation, "off"),
				annotatedConfigMap(ns, "seed", "release", channels.CreateOnlyAnnotation, "true"),
				annotatedConfigMap(ns, "seed-deleted", "release", channels.CreateOnlyAnnotation, "true"),
			)})
			d, err := New(testenv.Shared(t).RESTConfig, Options{Locations: []string{loc}, Interval: time.Hour, Drift: mode})
			if err != nil {
				t.Fatal(err)
			}
			// The first pass installs the addon, the second looks at its
			// objects for the first time.
			for i := 1; i <= 2; i++ {
				if res := d.Pass(ctx); res.Err != nil {
					t.Fatalf("pass %d: %v", i, res.Err)
				}
			}
			cms := kube(t).CoreV1().ConfigMaps(ns)
			// Hand edits: three ConfigMaps changed, one deleted.
			for _, cm := range []string{"edited", "opted-out", "seed"} {
				patch := []byte(`{"data":{"key":"by hand"}}`)
				if _, err := cms.Patch(ctx, cm, "application/merge-patch+json", patch, metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
					t.Fatal(err)
				}
			}
			if err := cms.Delete(ctx, "seed-deleted", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			res := d.Pass(ctx)
			if res.Err != nil {
				t.Fatalf("pass after the edits: %v", res.Err)
			}
			values := map[string]string{}
			for _, cm := range []string{"edited", "opted-out", "seed", "seed-deleted"} {
				got := configMapOf(t, ns, cm)
				values[cm] = "(deleted)"
				if got != nil {
					values[cm] = got.Data["key"]
				}
			}
			want := map[string]string{"edited": "by hand", "opted-out": "by hand", "seed": "by hand", "seed-deleted": "(deleted)"}
			wantResult := DriftResult{Checked: 5}
			var wantSeries []string
			switch mode {
			case DriftRepair:
				want["edited"], want["seed-deleted"] = "release", "release"
				wantResult.Changed, wantResult.Deleted = 1, 1
			case DriftReport:
				wantResult.Reported = 2
				wantSeries = []string{name + " ConfigMap " + ns + "/edited changed", name + " ConfigMap " + ns + "/seed-deleted deleted"}
			case DriftOff:
				wantResult.Checked = 0
			}
			if diff := cmp.Diff(values, want); diff != "" {
				t.Errorf("ConfigMaps after the pass (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(res.Drift, wantResult); diff != "" {
				t.Errorf("drift result (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(driftedSeries(t, d), wantSeries); diff != "" {
				t.Errorf("channels_drifted_object (-got +want):\n%s", diff)
			}
			events, err := kube(t).CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", DriftEventReason).String()})
			if err != nil {
				t.Fatal(err)
			}
			var reported []string
			for _, e := range events.Items {
				reported = append(reported, e.InvolvedObject.Name)
			}
			sort.Strings(reported)
			var wantEvents []string
			if mode == DriftReport {
				wantEvents = []string{"edited", "seed-deleted"}
			}
			if diff := cmp.Diff(reported, wantEvents); diff != "" {
				t.Errorf("Drifted events (-got +want):\n%s", diff)
			}
			if mode != DriftReport {
				return
			}
			// Reported once: a pass that finds the same drift says nothing
			// new. Undoing the edit clears its series.
			if res := d.Pass(ctx); res.Err != nil || res.Drift.Reported != 0 {
				t.Errorf("third pass: reported %d, err %v; want 0, nil", res.Drift.Reported, res.Err)
			}
			patch := []byte(`{"data":{"key":"release"}}`)
			if _, err := cms.Patch(ctx, "edited", "application/merge-patch+json", patch, metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
				t.Fatal(err)
			}
			if res := d.Pass(ctx); res.Err != nil {
				t.Fatalf("fourth pass: %v", res.Err)
			}
			if diff := cmp.Diff(driftedSeries(t, d), []string{name + " ConfigMap " + ns + "/seed-deleted deleted"}); diff != "" {
				t.Errorf("channels_drifted_object after the edit was undone (-got +want):\n%s", diff)
			}
		})
	}
}
