package apiserver_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/testenv"
)

func int32Ptr(v int32) *int32 { return &v }

// TestIntegrationNetworkConfig checks the cluster's NetworkConfig on a
// kos-apiserver of its own, with no controller manager: the test writes
// the status the manager would. It checks validation with field paths,
// the guard against unsafe changes with its message, the force annotation
// and kubectl's view, through the aggregator (this server is the last one
// started without DirectOnly, so the APIService points to it).
func TestIntegrationNetworkConfig(t *testing.T) {
	kos := startKOS(t, testenv.KOSOptions{Name: "netconf"})
	c := kosClient(t, kos.DirectConfig).NetworkV1alpha1()
	ctx := context.Background()

	t.Run("bad values are refused with their field paths", func(t *testing.T) {
		tests := []struct {
			name string
			cfg  *v1alpha1.NetworkConfig
			want []string
		}{
			{"another name", &v1alpha1.NetworkConfig{ObjectMeta: metav1.ObjectMeta{Name: "mine"}}, []string{
				`metadata.name: Invalid value: "mine": must be "cluster": a cluster has one NetworkConfig`,
			}},
			{"MTU and port out of range", &v1alpha1.NetworkConfig{
				ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
				Spec:       v1alpha1.NetworkConfigSpec{OverlayMTU: int32Ptr(10000), TunnelPort: int32Ptr(0)},
			}, []string{
				"spec.overlayMTU: Invalid value: 10000: must be in [576,9216]",
				"spec.tunnelPort: Invalid value: 0: must be in [1,65535]",
			}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				_, err := c.NetworkConfigs().Create(ctx, tc.cfg, metav1.CreateOptions{})
				if !apierrors.IsInvalid(err) {
					t.Fatalf("create: got %v, want an Invalid error", err)
				}
				if diff := cmp.Diff(statusErrorStrings(err), tc.want); diff != "" {
					t.Errorf("causes (-got +want):\n%s", diff)
				}
			})
		}
	})

	cfg, err := c.NetworkConfigs().Create(ctx, &v1alpha1.NetworkConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec:       v1alpha1.NetworkConfigSpec{OverlayMTU: int32Ptr(1450), TunnelPort: int32Ptr(4789)},
		// The server drops a status sent on creation: nothing is applied.
		Status: v1alpha1.NetworkConfigStatus{OverlayMTU: 9000},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the NetworkConfig: %v", err)
	}
	if cfg.Status.OverlayMTU != 0 || cfg.Namespace != "" {
		t.Errorf("created with status.overlayMTU %d in namespace %q, want 0 and cluster-scoped", cfg.Status.OverlayMTU, cfg.Namespace)
	}
	apply := func(t *testing.T) {
		t.Helper()
		cfg, err := c.NetworkConfigs().Get(ctx, "cluster", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Status.OverlayMTU, cfg.Status.TunnelPort = *cfg.Spec.OverlayMTU, *cfg.Spec.TunnelPort
		if _, err := c.NetworkConfigs().UpdateStatus(ctx, cfg, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("applying: %v", err)
		}
	}
	setMTU := func(mtu int32, annotations map[string]string) (*v1alpha1.NetworkConfig, error) {
		cfg, err := c.NetworkConfigs().Get(ctx, "cluster", metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		cfg.Spec.OverlayMTU = &mtu
		cfg.Annotations = annotations
		return c.NetworkConfigs().Update(ctx, cfg, metav1.UpdateOptions{})
	}
	apply(t)

	t.Run("a change without attachments is allowed", func(t *testing.T) {
		got, err := setMTU(1400, nil)
		if err != nil {
			t.Fatalf("changing the MTU with no attachments: %v", err)
		}
		if got.Generation != 2 || got.Status.OverlayMTU != 1450 {
			t.Errorf("generation %d, status.overlayMTU %d; want 2 and 1450 until applied", got.Generation, got.Status.OverlayMTU)
		}
		apply(t)
	})

	ns := newNamespace(t)
	mustCreateSubnet(t, kosClient(t, kos.DirectConfig), newSubnet(ns, "s1", "10.90.0.0/24", 90))
	for i := range 3 {
		mustCreateAttachment(t, kosClient(t, kos.DirectConfig), newAttachment(ns, fmt.Sprintf("a%d", i), "node-1", "s1"))
	}

	t.Run("a change with attachments is refused with its message", func(t *testing.T) {
		_, err := setMTU(1300, nil)
		if !apierrors.IsInvalid(err) {
			t.Fatalf("changing the MTU with attachments: got %v, want an Invalid error", err)
		}
		want := []string{`spec.overlayMTU: Forbidden: may not change from 1400, the value applied, to 1300 while 3 NetworkAttachments exist: ` +
			`interfaces that exist keep the old MTU until their pods are re-created, and packets larger than the smaller MTU between them are lost; ` +
			`to change it anyway, set the annotation network.example.com/force-unsafe-change: "true" in the same update (docs/install.md, "Network configuration")`}
		if diff := cmp.Diff(statusErrorStrings(err), want); diff != "" {
			t.Errorf("causes (-got +want):\n%s", diff)
		}
		// Metadata edits still pass.
		cfg, err := c.NetworkConfigs().Get(ctx, "cluster", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Labels = map[string]string{"owner": "ops"}
		if _, err := c.NetworkConfigs().Update(ctx, cfg, metav1.UpdateOptions{}); err != nil {
			t.Errorf("labelling: %v", err)
		}
	})

	t.Run("the force annotation lets it through", func(t *testing.T) {
		got, err := setMTU(1300, map[string]string{v1alpha1.ForceUnsafeChangeAnnotation: "true"})
		if err != nil {
			t.Fatalf("forcing the change: %v", err)
		}
		if *got.Spec.OverlayMTU != 1300 || got.Status.OverlayMTU != 1400 {
			t.Errorf("spec %d, status %d; want 1300 asked, 1400 still applied", *got.Spec.OverlayMTU, got.Status.OverlayMTU)
		}
	})

	t.Run("deletion is refused while attachments exist, unless forced", func(t *testing.T) {
		// The forced update above left the annotation (the controller
		// manager removes it once it applies the change): take it off.
		cfg, err := c.NetworkConfigs().Get(ctx, "cluster", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Annotations = nil
		if _, err := c.NetworkConfigs().Update(ctx, cfg, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("removing the annotation: %v", err)
		}
		err = c.NetworkConfigs().Delete(ctx, "cluster", metav1.DeleteOptions{})
		want := `Operation cannot be fulfilled on networkconfigs.network.example.com "cluster": 3 NetworkAttachments exist: ` +
			`kos-controller-manager would create the configuration again with an overlay MTU computed anew from the nodes' underlays; ` +
			`to delete it anyway, first set the annotation network.example.com/force-unsafe-change: "true" on it`
		if !apierrors.IsConflict(err) || err.Error() != want {
			t.Errorf("deleting: got %v, want a Conflict:\n%s", err, want)
		}
	})

	t.Run("kubectl", func(t *testing.T) {
		cacheDir := filepath.Join(t.TempDir(), "kubectl-cache")
		out := kubectlEventually(t, "--cache-dir="+cacheDir, "get", "netconf")
		var rows [][]string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			rows = append(rows, f[:len(f)-1]) // the age changes
		}
		want := [][]string{{"NAME", "MTU", "PORT", "APPLIED-MTU", "APPLIED-PORT", "TOO-SMALL"}, {"cluster", "1300", "4789", "1400", "4789", "0"}}
		if diff := cmp.Diff(rows, want); diff != "" {
			t.Errorf("kubectl get netconf (-got +want):\n%s", diff)
		}
		explain := kubectlEventually(t, "--cache-dir="+cacheDir, "explain", "networkconfig.spec.overlayMTU")
		if !strings.Contains(explain, "[576,9216]") {
			t.Errorf("kubectl explain networkconfig.spec.overlayMTU lacks the range:\n%s", explain)
		}
	})

	t.Run("forced deletion", func(t *testing.T) {
		cfg, err := c.NetworkConfigs().Get(ctx, "cluster", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Annotations = map[string]string{v1alpha1.ForceUnsafeChangeAnnotation: "true"}
		if _, err := c.NetworkConfigs().Update(ctx, cfg, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("annotating: %v", err)
		}
		if err := c.NetworkConfigs().Delete(ctx, "cluster", metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting, forced: %v", err)
		}
	})
}
