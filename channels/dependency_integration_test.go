package channels

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/channels/api"
	"github.com/kos-sdn/kos/channels/channel"
	"github.com/kos-sdn/kos/channels/internal/channelstest"
	"github.com/kos-sdn/kos/tools/testenv"
)

// crdManifest is a CRD of a namespaced kind with any fields.
func crdManifest(group, kind, plural string) string {
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: %[3]s.%[1]s}
spec:
  group: %[1]s
  scope: Namespaced
  names: {kind: %[2]s, listKind: %[2]sList, plural: %[3]s, singular: %[4]s}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`, group, kind, plural, strings.ToLower(kind))
}

// planAndPreview loads a channel, plans it and previews the plan, failing
// the test on an error.
func planAndPreview(t *testing.T, c *Client, loc string) []AddonPreview {
	t.Helper()
	ctx := context.Background()
	releases, err := Load(ctx, NewFetcher(), loc)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := c.Plan(ctx, releases)
	if err != nil {
		t.Fatal(err)
	}
	previews, err := c.Preview(ctx, plan, PreviewOptions{})
	if err != nil {
		t.Fatalf("Preview: %v", err)
	}
	return previews
}

// notes returns the notes of a preview, as "addon: action object (note)".
func notes(previews []AddonPreview) []string {
	var out []string
	for _, p := range previews {
		for _, ch := range p.Objects {
			if ch.Note != "" {
				out = append(out, fmt.Sprintf("%s: %s %s (%s)", p.Addon, ch.Action, ch, ch.Note))
			}
		}
	}
	return out
}

func TestIntegrationAddonNeedsAnotherAddonsCRD(t *testing.T) {
	dir := t.TempDir()
	// The user sorts before the definer: a run that applied addon by addon
	// would apply the Gadget before its CRD exists.
	user := channelstest.Manifest(channelstest.Namespace("dep-user"), `apiVersion: dep.example.com/v1
kind: Gadget
metadata: {name: g, namespace: dep-user}
spec: {size: 3}
`)
	definer := crdManifest("dep.example.com", "Gadget", "gadgets")
	loc := channelstest.WriteChannel(t, dir, "channel.yaml",
		channelstest.Release{Name: "dep-a-user", Version: "1.0.0", Manifest: user},
		channelstest.Release{Name: "dep-z-definer", Version: "1.0.0", Manifest: definer})

	c := newTestClient(t)
	got := notes(planAndPreview(t, c, loc))
	want := "dep-a-user: create Gadget.dep.example.com dep-user/g (its kind is defined by addon dep-z-definer)"
	if !slices.Contains(got, want) {
		t.Errorf("preview notes %q, want %q among them", got, want)
	}

	res := run(t, c, loc)
	if res.err != nil {
		t.Fatalf("run: %v", res.err)
	}
	dyn, err := dynamic.NewForConfig(testenv.Shared(t).RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	g, err := dyn.Resource(schema.GroupVersionResource{Group: "dep.example.com", Version: "v1", Resource: "gadgets"}).Namespace("dep-user").Get(context.Background(), "g", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Gadget was not applied: %v", err)
	}
	if got := g.GetLabels()[IdentityLabel]; got != "dep-a-user" {
		t.Errorf("Gadget has %s=%q, want dep-a-user", IdentityLabel, got)
	}
	for _, name := range []string{"dep-a-user", "dep-z-definer"} {
		if recordOf(t, channel.DefaultNamespace, name) == "" {
			t.Errorf("addon %s has no install record", name)
		}
	}
}

func TestIntegrationNeedsPKIWithCertManagerInOneChannel(t *testing.T) {
	dir := t.TempDir()
	certManager := crdManifest("cert-manager.io", "Issuer", "issuers")
	pkiUser := channelstest.ConfigMap("default", "pki-dep-user", "x")
	ch := api.Addons{TypeMeta: metav1.TypeMeta{Kind: api.Kind}, ObjectMeta: metav1.ObjectMeta{Name: "pki-dep"}}
	for _, r := range []struct {
		name, manifest string
		needsPKI       bool
	}{{"aaa-pki-user", pkiUser, true}, {"cert-manager", certManager, false}} {
		file := r.name + ".yaml"
		if err := os.WriteFile(filepath.Join(dir, file), []byte(r.manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		ch.Spec.Addons = append(ch.Spec.Addons, &api.AddonSpec{
			Name: &r.name, Version: "1.0.0", Selector: channelstest.SelectorOf(r.name), Manifest: &file,
			ManifestHash: HashManifest([]byte(r.manifest)), NeedsPKI: r.needsPKI,
		})
	}
	data, err := yaml.Marshal(ch)
	if err != nil {
		t.Fatal(err)
	}
	loc := filepath.Join(dir, "channel.yaml")
	if err := os.WriteFile(loc, data, 0o644); err != nil {
		t.Fatal(err)
	}

	c := newTestClient(t)
	got := notes(planAndPreview(t, c, loc))
	want := "aaa-pki-user: create Issuer.cert-manager.io kube-system/aaa-pki-user (needsPKI; addon cert-manager defines the Issuer kind)"
	if !slices.Contains(got, want) {
		t.Errorf("preview notes %q, want %q among them", got, want)
	}

	res := run(t, c, loc)
	if res.err != nil {
		t.Fatalf("run: %v", res.err)
	}
	dyn, err := dynamic.NewForConfig(testenv.Shared(t).RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := dyn.Resource(schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "issuers"}).Namespace(PKINamespace).Get(context.Background(), "aaa-pki-user", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Issuer was not created: %v", err)
	}
	if got, _, _ := unstructured.NestedString(issuer.Object, "spec", "ca", "secretName"); got != PKISecretName("aaa-pki-user") {
		t.Errorf("Issuer signs with Secret %q, want %q", got, PKISecretName("aaa-pki-user"))
	}
	if configMapOf(t, "default", "pki-dep-user") == nil {
		t.Errorf("the needsPKI addon's ConfigMap was not applied")
	}
}
