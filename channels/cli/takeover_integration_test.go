package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
)

// takeoverChannel writes a channel of addon takeover-a at version whose
// manifest holds the given documents.
func (d channelDir) takeoverChannel(version string, docs ...string) string {
	d.t.Helper()
	m, sum := d.manifest("takeover-a-"+version+".yaml", strings.Join(docs, "---\n"))
	return d.channel("takeover-"+version+".yaml", fmt.Sprintf(`kind: Addons
metadata: {name: takeover}
spec:
  addons:
  - name: takeover-a
    version: %s
    selector: {k8s-addon: takeover-a.addons.k8s.io}
    manifest: %s
    manifestHash: %s
`, version, m, sum))
}

// TestIntegrationPlanTakeover edits an object the addon applied, as
// `kubectl edit` does (an update by another field manager), and creates one
// as kOps's channels does (applied by manager kops, with a field the
// release does not set); the plan of the next release lists, under each
// object, the fields it takes over from which manager and those it
// removes, and applying it does what the plan said.
func TestIntegrationPlanTakeover(t *testing.T) {
	ctx := context.Background()
	d := channelDir{t: t, dir: t.TempDir()}
	k := kubeClient(t)
	edited := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: takeover-edited, namespace: default}\ndata: {replicas: \"2\", other: x}\n"
	fromKOps := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: takeover-kops, namespace: default}\ndata: {kept: \"1\"}\n"
	v1 := d.takeoverChannel("1.0.0", edited)
	if code, _, errOut := runCLI(t, "apply", "channel", v1, "--yes", "--wait=false"); code != 0 {
		t.Fatalf("installing: exit %d, %s", code, errOut)
	}

	// kubectl edit: an update by manager kubectl-edit.
	cm, err := k.CoreV1().ConfigMaps("default").Get(ctx, "takeover-edited", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["replicas"] = "5"
	if _, err := k.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	// kOps's channels: an apply by manager kops.
	kopsCM := corev1ac.ConfigMap("takeover-kops", "default").WithData(map[string]string{"kept": "1", "old": "gone"})
	if _, err := k.CoreV1().ConfigMaps("default").Apply(ctx, kopsCM, metav1.ApplyOptions{FieldManager: "kops"}); err != nil {
		t.Fatal(err)
	}

	v2 := d.takeoverChannel("2.0.0", edited, fromKOps)
	code, out, errOut := runCLI(t, "apply", "channel", v2)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	want := "" +
		"NAME         CURRENT   UPDATE\n" +
		"takeover-a   1.0.0     2.0.0\n" +
		"\n" +
		"takeover-a: update ConfigMap default/takeover-edited\n" +
		"  takes over .data.replicas from kubectl-edit\n" +
		"takeover-a: update ConfigMap default/takeover-kops\n" +
		"  takes over .data.kept from kops\n" +
		"  removes .data.old, owned by kops, which the release does not set\n" +
		"\n" +
		"Must specify --yes to apply changes\n"
	if diff := cmp.Diff(out, want); diff != "" {
		t.Errorf("plan (-got +want):\n%s", diff)
	}

	code, out, errOut = runCLI(t, "apply", "channel", v2, "-o", `jsonpath={range .items[0].objects[*]}{.name}:{range .takeovers[*]}{.manager} {.takenOver} {.removed};{end}{"\n"}{end}`)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	wantJSON := "takeover-edited:kubectl-edit [\".data.replicas\"] ;\ntakeover-kops:kops [\".data.kept\"] [\".data.old\"];\n"
	if diff := cmp.Diff(out, wantJSON); diff != "" {
		t.Errorf("-o jsonpath (-got +want):\n%s", diff)
	}

	// Applying does what the plan said.
	if code, _, errOut := runCLI(t, "apply", "channel", v2, "--yes", "--wait=false"); code != 0 {
		t.Fatalf("applying: exit %d, %s", code, errOut)
	}
	for name, want := range map[string]map[string]string{
		"takeover-edited": {"replicas": "2", "other": "x"},
		"takeover-kops":   {"kept": "1"},
	} {
		cm, err := k.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(cm.Data, want); diff != "" {
			t.Errorf("%s after applying (-got +want):\n%s", name, diff)
		}
	}
}
