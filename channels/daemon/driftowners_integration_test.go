package daemon

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kos-sdn/kos/channels/internal/channelstest"
	"github.com/kos-sdn/kos/tools/testenv"
)

// controlledWebhook is a ValidatingWebhookConfiguration whose caBundle is a
// placeholder that an injector (cert-manager's cainjector) fills in; it
// matches no namespace, so it never calls its (missing) service.
func controlledWebhook(name string) string {
	return fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: %[1]s}
webhooks:
- name: check.%[1]s.example.com
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Ignore
  namespaceSelector: {matchLabels: {%[1]s: never}}
  clientConfig:
    service: {namespace: default, name: %[1]s}
    caBundle: Cg==
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]
`, name)
}

// TestIntegrationDriftRespectsControllers installs an addon with a
// Deployment, a ConfigMap and a webhook configuration, then changes them
// as people and controllers do: kubectl-edit changes the Deployment's image
// and the ConfigMap's data, an HPA (kube-controller-manager, through the
// scale subresource) its replicas, and cainjector the webhook's caBundle.
// In repair mode a pass reverts what kubectl-edit changed and leaves the
// replicas and the caBundle as the controllers set them, reporting those
// with their managers' names (Event, channels_drifted_object with drift
// "controller"); a second pass changes nothing. In report mode the Events
// say the ConfigMap was changed by hand by kubectl-edit, and the
// Deployment's replicas were set by kube-controller-manager, not by hand.
func TestIntegrationDriftRespectsControllers(t *testing.T) {
	for _, mode := range []DriftMode{DriftRepair, DriftReport} {
		t.Run(string(mode), func(t *testing.T) {
			ctx := context.Background()
			name := "owners-" + string(mode)
			ns := name
			k := kube(t)
			loc := channelstest.WriteChannel(t, t.TempDir(), "channel.yaml", channelstest.Release{Name: name, Version: "1.0.0", Manifest: channelstest.Manifest(
				channelstest.Namespace(ns),
				channelstest.ConfigMap(ns, "settings", "release"),
				channelstest.DeploymentWithReplicas(ns, "app", 2),
				controlledWebhook(name),
			)})
			d, err := New(testenv.Shared(t).RESTConfig, Options{Locations: []string{loc}, Interval: time.Hour, Drift: mode})
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 2; i++ {
				if res := d.Pass(ctx); res.Err != nil {
					t.Fatalf("pass %d: %v", i, res.Err)
				}
			}
			t.Cleanup(func() {
				_ = k.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
			})

			// People.
			edit := metav1.PatchOptions{FieldManager: "kubectl-edit"}
			if _, err := k.CoreV1().ConfigMaps(ns).Patch(ctx, "settings", types.MergePatchType, []byte(`{"data":{"key":"by hand"}}`), edit); err != nil {
				t.Fatal(err)
			}
			image := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"registry.k8s.io/pause:by-hand"}]}}}}`)
			if _, err := k.AppsV1().Deployments(ns).Patch(ctx, "app", types.StrategicMergePatchType, image, edit); err != nil {
				t.Fatal(err)
			}
			// Controllers: an HPA scales through the scale subresource as
			// kube-controller-manager; cainjector fills in the caBundle.
			scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 5}}
			if _, err := k.AppsV1().Deployments(ns).UpdateScale(ctx, "app", scale, metav1.UpdateOptions{FieldManager: "kube-controller-manager"}); err != nil {
				t.Fatal(err)
			}
			wh, err := k.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			wh.Webhooks[0].ClientConfig.CABundle = []byte("injected CA")
			if _, err := k.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, wh, metav1.UpdateOptions{FieldManager: "cainjector"}); err != nil {
				t.Fatal(err)
			}

			res := d.Pass(ctx)
			if res.Err != nil {
				t.Fatalf("pass after the changes: %v", res.Err)
			}
			cm, err := k.CoreV1().ConfigMaps(ns).Get(ctx, "settings", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			dep, err := k.AppsV1().Deployments(ns).Get(ctx, "app", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			wh, err = k.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{
				"data":     cm.Data["key"],
				"image":    dep.Spec.Template.Spec.Containers[0].Image,
				"replicas": fmt.Sprint(*dep.Spec.Replicas),
				"caBundle": string(wh.Webhooks[0].ClientConfig.CABundle),
			}
			want := map[string]string{"data": "by hand", "image": "registry.k8s.io/pause:by-hand", "replicas": "5", "caBundle": "injected CA"}
			if mode == DriftRepair {
				want["data"], want["image"] = "release", channelstest.PauseImage
			}
			if diff := cmp.Diff(got, want); diff != "" {
				t.Errorf("objects after the pass (-got +want):\n%s", diff)
			}
			wantSeries := []string{
				name + " Deployment.apps " + ns + "/app controller",
				name + " ValidatingWebhookConfiguration.admissionregistration.k8s.io /" + name + " controller",
			}
			if mode == DriftReport {
				wantSeries = []string{
					name + " ConfigMap " + ns + "/settings changed",
					name + " Deployment.apps " + ns + "/app changed",
					name + " ValidatingWebhookConfiguration.admissionregistration.k8s.io /" + name + " controller",
				}
			}
			series := driftedSeries(t, d)
			sort.Strings(series)
			if diff := cmp.Diff(series, wantSeries); diff != "" {
				t.Errorf("channels_drifted_object (-got +want):\n%s", diff)
			}

			messages := map[string]string{}
			for _, evNS := range []string{ns, metav1.NamespaceDefault} {
				events, err := k.CoreV1().Events(evNS).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", DriftEventReason).String()})
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range events.Items {
					if e.InvolvedObject.Name == "app" || e.InvolvedObject.Name == "settings" || e.InvolvedObject.Name == name {
						messages[e.InvolvedObject.Kind] = e.Message
					}
				}
			}
			wantIn := map[string][]string{
				"Deployment":                     {"kube-controller-manager: .spec.replicas"},
				"ValidatingWebhookConfiguration": {`cainjector: .webhooks[name="check.` + name + `.example.com"].clientConfig.caBundle`, "controllers set since"},
			}
			if mode == DriftRepair {
				wantIn["Deployment"] = append(wantIn["Deployment"], "controllers set since")
			} else {
				wantIn["ConfigMap"] = []string{"changed by hand (kubectl-edit: .data.key)"}
				wantIn["Deployment"] = append(wantIn["Deployment"], `changed by hand (kubectl-edit: .spec.template.spec.containers[name="c"].image)`, "fields controllers set (kube-controller-manager: .spec.replicas) are left to them")
			}
			for kind, parts := range wantIn {
				for _, p := range parts {
					if !strings.Contains(messages[kind], p) {
						t.Errorf("the Drifted event of the %s does not say %q: %q", kind, p, messages[kind])
					}
				}
				if strings.Contains(messages[kind], "by hand") && kind == "ValidatingWebhookConfiguration" {
					t.Errorf("the Drifted event of the %s calls a controller's change by hand: %q", kind, messages[kind])
				}
			}
			if mode == DriftRepair {
				if _, ok := messages["ConfigMap"]; ok {
					t.Errorf("a Drifted event for the repaired ConfigMap: %q", messages["ConfigMap"])
				}
				again := d.Pass(ctx)
				if again.Err != nil || again.Drift.Changed != 0 || again.Drift.Reported != 0 {
					t.Errorf("a pass after the repair: %+v, err %v; want nothing repaired or newly reported", again.Drift, again.Err)
				}
				dep, err := k.AppsV1().Deployments(ns).Get(ctx, "app", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if *dep.Spec.Replicas != 5 {
					t.Errorf("replicas after a second pass = %d, want the controller's 5", *dep.Spec.Replicas)
				}
			}
		})
	}
}
