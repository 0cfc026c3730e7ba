package cli

import (
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationRepairOnce deletes an object of an installed addon, as an
// operator deletes an APIService in an emergency: applying the channel again
// plans nothing and leaves it deleted, while --drift=repair without
// --interval makes it again in one pass and exits; --drift=report only
// reports it.
func TestIntegrationRepairOnce(t *testing.T) {
	env := testenv.Shared(t)
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	d := channelDir{t: t, dir: t.TempDir()}
	m, hash := d.manifest("rep.yaml", `apiVersion: v1
kind: ConfigMap
metadata: {name: rep-keep, namespace: default}
data: {k: v}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: rep-lost, namespace: default}
data: {k: v}
`)
	loc := d.channel("rep-channel.yaml", fmt.Sprintf(`kind: Addons
metadata: {name: rep}
spec:
  addons:
  - {name: rep, version: 1.0.0, selector: {k8s-addon: rep.addons.k8s.io}, manifest: %s, manifestHash: %s}
`, m, hash))
	if code, _, errOut := runCLI(t, "apply", "channel", loc, "--yes", "--wait=false"); code != 0 {
		t.Fatalf("install: exit %d: %s", code, errOut)
	}
	cms := kube.CoreV1().ConfigMaps("default")
	lose := func() {
		t.Helper()
		if err := cms.Delete(t.Context(), "rep-lost", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	exists := func() bool {
		t.Helper()
		_, err := cms.Get(t.Context(), "rep-lost", metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	lose()

	t.Run("applying again plans nothing", func(t *testing.T) {
		code, out, errOut := runCLI(t, "apply", "channel", loc, "--yes", "--wait=false")
		if code != 0 || !strings.Contains(out, "No update required") {
			t.Fatalf("exit %d, stdout %q, stderr %q; want No update required", code, out, errOut)
		}
		if exists() {
			t.Fatal("a plain apply made the deleted object again; this test assumes it does not")
		}
	})
	// report first: it must leave the object deleted for repair to find.
	for _, tt := range []struct {
		drift      string
		wantOut    string
		wantExists bool
	}{
		{"report", "0 objects repaired, 1 reported drifted (--drift=report)", false},
		{"repair", "1 objects repaired, 0 reported drifted (--drift=repair)", true},
	} {
		t.Run("--drift="+tt.drift, func(t *testing.T) {
			code, out, errOut := runCLI(t, "apply", "channel", loc, "--yes", "--wait=false", "--drift="+tt.drift)
			if code != 0 || !strings.Contains(out, tt.wantOut) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %q", code, out, errOut, tt.wantOut)
			}
			if got := exists(); got != tt.wantExists {
				t.Errorf("after --drift=%s the deleted object exists: %t, want %t", tt.drift, got, tt.wantExists)
			}
		})
	}
	t.Run("--drift needs --yes", func(t *testing.T) {
		lose()
		code, _, errOut := runCLI(t, "apply", "channel", loc, "--drift=repair")
		if code != 2 || !strings.Contains(errOut, "it needs --yes") {
			t.Errorf("exit %d, stderr %q; want 2 and that it needs --yes", code, errOut)
		}
		if exists() {
			t.Error("a refused command line repaired the object")
		}
	})
}
