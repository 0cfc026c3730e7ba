package controllermanager_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllermanager"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationNetworkConfig runs the manager's network configuration
// controller against a kos-apiserver of its own (the cluster has one
// NetworkConfig, which the package's shared server must not get) and Nodes
// of the shared kube-apiserver that report their underlay MTUs as agents
// do, as a ServiceAccount with the rights the release must grant. It
// checks that the first start makes every default explicit, that a
// smaller underlay later is reported but recomputes nothing, the metrics,
// and that an unsafe change is refused, then forced and applied.
func TestIntegrationNetworkConfig(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	kos, err := env.StartKOS(ctx, testenv.KOSOptions{Name: "netconf", DirectOnly: true})
	if err != nil {
		t.Fatalf("starting kos-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if err := kos.Stop(); err != nil {
			t.Errorf("stopping kos-apiserver %s: %v", kos.Name, err)
		}
	})
	c, err := versioned.NewForConfig(kos.DirectConfig)
	if err != nil {
		t.Fatal(err)
	}
	configs := c.NetworkV1alpha1().NetworkConfigs()
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}

	// Three nodes: two report their underlay, one does not (yet).
	reports := map[string]string{"netconf-a": "1500", "netconf-b": "9000", "netconf-c": ""}
	for name, mtu := range reports {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if mtu != "" {
			n.Annotations = map[string]string{v1alpha1.UnderlayMTUAnnotation: mtu}
		}
		if _, err := kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating node %s: %v", name, err)
		}
		t.Cleanup(func() {
			if err := kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
				t.Errorf("deleting node %s: %v", name, err)
			}
		})
	}

	// The manager runs with the rights of testdata/network-config-clusterrole.yaml
	// alone, which the 0.4.0 release must grant.
	// The manager's ServiceAccount lives in example-com, which only a KOS
	// server with an APIService creates.
	_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "example-com"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace example-com: %v", err)
	}
	token := managerToken(t, kube, newNamespace(t), "testdata/network-config-clusterrole.yaml")
	asManager := func(cfg *rest.Config) *rest.Config {
		c := rest.AnonymousClientConfig(cfg)
		c.BearerToken = token
		return c
	}
	m, _ := startManagerWith(t, "netconf", controllermanager.Config{
		NetworkConfig: true, Kube: asManager(env.RESTConfig), KOS: asManager(kos.DirectConfig),
	})

	// waitStatus waits until the NetworkConfig's status passes check.
	waitStatus := func(t *testing.T, what string, check func(*v1alpha1.NetworkConfig) error) *v1alpha1.NetworkConfig {
		t.Helper()
		var got *v1alpha1.NetworkConfig
		poll.Until(t, time.Minute, what, func(ctx context.Context) error {
			cfg, err := configs.Get(ctx, v1alpha1.NetworkConfigName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			got = cfg
			return check(cfg)
		})
		return got
	}
	fits := func(cfg *v1alpha1.NetworkConfig) metav1.ConditionStatus {
		if c := meta.FindStatusCondition(cfg.Status.Conditions, v1alpha1.NetworkConfigUnderlayFits); c != nil {
			return c.Status
		}
		return ""
	}

	t.Run("first start makes every default explicit", func(t *testing.T) {
		cfg := waitStatus(t, "the NetworkConfig created and applied", func(cfg *v1alpha1.NetworkConfig) error {
			if cfg.Status.ObservedGeneration != cfg.Generation || cfg.Status.OverlayMTU == 0 {
				return fmt.Errorf("not applied: %+v", cfg.Status)
			}
			return nil
		})
		wantSpec := v1alpha1.NetworkConfigSpec{OverlayMTU: ptr.To[int32](1450), TunnelPort: ptr.To[int32](4789)}
		if diff := cmp.Diff(cfg.Spec, wantSpec); diff != "" {
			t.Errorf("spec (-got +want):\n%s", diff)
		}
		want := v1alpha1.UnderlayReport{NodesReporting: 2, SmallestMTU: 1500}
		if cfg.Status.OverlayMTU != 1450 || cfg.Status.TunnelPort != 4789 || !cmp.Equal(cfg.Status.Underlay, want) || fits(cfg) != metav1.ConditionTrue {
			t.Errorf("status %+v; want 1450/4789 applied, %+v, UnderlayFits True", cfg.Status, want)
		}
	})

	t.Run("a smaller underlay is reported, not recomputed", func(t *testing.T) {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"1400"}}}`, v1alpha1.UnderlayMTUAnnotation)
		if _, err := kube.CoreV1().Nodes().Patch(ctx, "netconf-b", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("annotating node netconf-b: %v", err)
		}
		cfg := waitStatus(t, "node netconf-b reported too small", func(cfg *v1alpha1.NetworkConfig) error {
			if cfg.Status.Underlay.NodesTooSmall != 1 {
				return fmt.Errorf("underlay %+v", cfg.Status.Underlay)
			}
			return nil
		})
		if *cfg.Spec.OverlayMTU != 1450 || cfg.Status.OverlayMTU != 1450 {
			t.Errorf("overlay MTU %d asked, %d applied; want 1450 kept", *cfg.Spec.OverlayMTU, cfg.Status.OverlayMTU)
		}
		want := v1alpha1.UnderlayReport{NodesReporting: 2, SmallestMTU: 1400, NodesTooSmall: 1,
			TooSmall: []v1alpha1.NodeUnderlay{{Node: "netconf-b", MTU: 1400}}}
		if diff := cmp.Diff(cfg.Status.Underlay, want); diff != "" {
			t.Errorf("underlay (-got +want):\n%s", diff)
		}
		if fits(cfg) != metav1.ConditionFalse {
			t.Errorf("UnderlayFits %q, want False", fits(cfg))
		}

		srv := httptest.NewServer(m.Handler())
		defer srv.Close()
		metrics := get(t, srv.URL+"/metrics", http.StatusOK)
		for _, want := range []string{
			"kos_network_overlay_mtu 1450",
			"kos_network_tunnel_port 4789",
			"kos_network_nodes_underlay_too_small 1",
			"kos_network_underlay_mtu_smallest 1400",
			`kos_network_node_underlay_mtu{node="netconf-a"} 1500`,
			`kos_network_node_underlay_mtu{node="netconf-b"} 1400`,
		} {
			if !strings.Contains(metrics, want+"\n") {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	})

	ns := newNamespace(t)
	createSubnet(t, c, newSubnet(ns, "s1", "10.91.0.0/24", 91))
	att := createAttachment(t, c, newAttachment(ns, "a1", "s1"))
	// setAttachmentMTU writes the attachment's interface MTU, as its agent would.
	setAttachmentMTU := func(t *testing.T, mtu int32) {
		t.Helper()
		// IPAM writes the attachment's address meanwhile.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			got, err := c.NetworkV1alpha1().NetworkAttachments(ns).Get(ctx, att.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			got.Status.MTU = mtu
			_, err = c.NetworkV1alpha1().NetworkAttachments(ns).UpdateStatus(ctx, got, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatalf("writing the attachment's MTU: %v", err)
		}
	}
	setMTU := func(mtu int32, annotations map[string]string) error {
		cfg, err := configs.Get(ctx, v1alpha1.NetworkConfigName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cfg.Spec.OverlayMTU = &mtu
		cfg.Annotations = annotations
		_, err = configs.Update(ctx, cfg, metav1.UpdateOptions{})
		return err
	}

	t.Run("a change with an attachment is refused", func(t *testing.T) {
		setAttachmentMTU(t, 1450)
		err := setMTU(1350, nil)
		var status apierrors.APIStatus
		if !apierrors.IsInvalid(err) || !errors.As(err, &status) {
			t.Fatalf("changing the MTU: got %v, want an Invalid error", err)
		}
		msg := status.Status().Message
		for _, part := range []string{
			"spec.overlayMTU: Forbidden: may not change from 1450, the value applied, to 1350 while 1 NetworkAttachment exists",
			`set the annotation network.example.com/force-unsafe-change: "true"`,
		} {
			if !strings.Contains(msg, part) {
				t.Errorf("refusal %q lacks %q", msg, part)
			}
		}
	})

	t.Run("a forced change is applied and the annotation removed", func(t *testing.T) {
		if err := setMTU(1350, map[string]string{v1alpha1.ForceUnsafeChangeAnnotation: "true"}); err != nil {
			t.Fatalf("forcing the change: %v", err)
		}
		cfg := waitStatus(t, "the forced MTU applied", func(cfg *v1alpha1.NetworkConfig) error {
			if cfg.Status.OverlayMTU != 1350 {
				return fmt.Errorf("status.overlayMTU %d", cfg.Status.OverlayMTU)
			}
			if _, ok := cfg.Annotations[v1alpha1.ForceUnsafeChangeAnnotation]; ok {
				return errors.New("the force annotation is still there")
			}
			return nil
		})
		// 1400 carries 1350 plus 50: every node fits again.
		if cfg.Status.Underlay.NodesTooSmall != 0 || fits(cfg) != metav1.ConditionTrue {
			t.Errorf("underlay %+v, UnderlayFits %q; want none too small, True", cfg.Status.Underlay, fits(cfg))
		}
		// The attachment's interface keeps 1450 until it is made again.
		waitStatus(t, "the old interface counted", func(cfg *v1alpha1.NetworkConfig) error {
			if n := cfg.Status.AttachmentsWithOtherMTU; n != 1 {
				return fmt.Errorf("attachmentsWithOtherMTU %d", n)
			}
			return nil
		})
		setAttachmentMTU(t, 1350)
		waitStatus(t, "no interface with another MTU", func(cfg *v1alpha1.NetworkConfig) error {
			if n := cfg.Status.AttachmentsWithOtherMTU; n != 0 {
				return fmt.Errorf("attachmentsWithOtherMTU %d", n)
			}
			return nil
		})
		// The annotation gone, the next change is refused again.
		if err := setMTU(1300, nil); !apierrors.IsInvalid(err) {
			t.Errorf("changing the MTU after a forced change: got %v, want an Invalid error", err)
		}
	})
}
