package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/channels"
)

// TestIntegrationAdoptFlag declares a ConfigMap a user made: the plan shows
// adopt and fails, as --yes does, until --adopt is given.
func TestIntegrationAdoptFlag(t *testing.T) {
	ctx := context.Background()
	d := channelDir{t: t, dir: t.TempDir()}
	k := kubeClient(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cli-foreign", Namespace: "default"}, Data: map[string]string{"key": "mine"}}
	if _, err := k.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{FieldManager: "kubectl-create"}); err != nil {
		t.Fatal(err)
	}
	m, hash := d.manifest("adopt.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cli-foreign, namespace: default}\ndata: {key: release}\n")
	loc := d.channel("adopt-channel.yaml", fmt.Sprintf(`kind: Addons
metadata: {name: cli-adopt}
spec:
  addons:
  - name: cli-adopt
    version: 1.0.0
    namespace: cli-adopt
    selector: {k8s-addon: cli-adopt.addons.k8s.io}
    manifest: %s
    manifestHash: %s
`, m, hash))

	code, out, errOut := runCLI(t, "apply", "channel", loc)
	if code != 1 {
		t.Errorf("plan without --adopt: exit %d, want 1", code)
	}
	for _, want := range []string{
		"cli-adopt: adopt ConfigMap default/cli-foreign (neither channels nor kOps made it)",
		"cli-adopt: error: ConfigMap default/cli-foreign exists and neither channels nor kOps's channels made it (fields of kubectl-create)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "nothing was changed") {
		t.Errorf("stderr %q, want the hint that nothing changed", errOut)
	}
	if code, _, errOut := runCLI(t, "apply", "channel", loc, "--yes", "--wait=false"); code != 1 || !strings.Contains(errOut, "--adopt") {
		t.Errorf("--yes without --adopt: exit %d, stderr %q, want 1 naming --adopt", code, errOut)
	}

	if code, out, errOut := runCLI(t, "apply", "channel", loc, "--adopt"); code != 0 || !strings.Contains(out, "cli-adopt: adopt ConfigMap default/cli-foreign") {
		t.Errorf("plan with --adopt: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, "apply", "channel", loc, "--yes", "--wait=false", "--adopt"); code != 0 {
		t.Fatalf("--yes --adopt: exit %d, %s", code, errOut)
	}
	// Other tests of the shared cluster list every install record.
	t.Cleanup(func() {
		if code, _, errOut := runCLI(t, "delete", "addon", "cli-adopt", "-n", "cli-adopt", "--yes"); code != 0 {
			t.Errorf("deleting the addon: exit %d, %s", code, errOut)
		}
	})
	got, err := k.CoreV1().ConfigMaps("default").Get(ctx, "cli-foreign", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{got.Data["key"], got.Labels[channels.IdentityLabel]}, []string{"release", "cli-adopt"}); diff != "" {
		t.Errorf("adopted ConfigMap's value and owner (-got +want):\n%s", diff)
	}
}
