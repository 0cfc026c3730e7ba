package cli

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// issuerCRD is the least of cert-manager's Issuer CRD that the test needs:
// the kind, served at cert-manager.io/v1, namespaced.
const issuerCRD = `{
  "apiVersion": "apiextensions.k8s.io/v1",
  "kind": "CustomResourceDefinition",
  "metadata": {"name": "issuers.cert-manager.io"},
  "spec": {
    "group": "cert-manager.io",
    "scope": "Namespaced",
    "names": {"kind": "Issuer", "listKind": "IssuerList", "plural": "issuers", "singular": "issuer"},
    "versions": [{"name": "v1", "served": true, "storage": true,
      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
  }
}`

func TestIntegrationNeedsPKI(t *testing.T) {
	ctx := context.Background()
	d := channelDir{t: t, dir: t.TempDir()}
	m, hash := d.manifest("pki.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: pki-a, namespace: default}\n")
	loc := d.channel("pki-channel.yaml", fmt.Sprintf(`kind: Addons
metadata: {name: pki}
spec:
  addons:
  - {name: pki-a, version: 1.0.0, needsPKI: true, selector: {k8s-addon: pki-a.addons.k8s.io}, manifest: %s, manifestHash: %s}
`, m, hash))

	t.Run("without cert-manager the plan fails", func(t *testing.T) {
		code, _, errOut := runCLI(t, "apply", "channel", loc)
		if code != 1 || !strings.Contains(errOut, "needsPKI") || !strings.Contains(errOut, "install cert-manager first") {
			t.Errorf("exit %d, stderr %q; want 1 and an error that says to install cert-manager", code, errOut)
		}
	})

	dyn, err := dynamic.NewForConfig(testenv.Shared(t).RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	crd := &unstructured.Unstructured{}
	if err := crd.UnmarshalJSON([]byte(issuerCRD)); err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	issuers := dyn.Resource(schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "issuers"}).Namespace("kube-system")
	poll.Until(t, 30*time.Second, "issuers are served", func(context.Context) error {
		if _, err := issuers.List(ctx, metav1.ListOptions{}); err != nil {
			return fmt.Errorf("issuers not served yet: %v", err)
		}
		return nil
	})

	t.Run("the plan shows the CA Secret and Issuer", func(t *testing.T) {
		code, out, errOut := runCLI(t, "apply", "channel", loc)
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		for _, want := range []string{"pki-a: create Secret kube-system/pki-a-ca (needsPKI)\n", "pki-a: create Issuer.cert-manager.io kube-system/pki-a (needsPKI)\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("stdout %q does not contain %q", out, want)
			}
		}
	})

	var firstCA []byte
	t.Run("apply creates them", func(t *testing.T) {
		if code, _, errOut := runCLI(t, "apply", "channel", loc, "--yes"); code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		secret, err := kubeClient(t).CoreV1().Secrets("kube-system").Get(ctx, "pki-a-ca", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if secret.Type != corev1.SecretTypeTLS || len(secret.Data["tls.key"]) == 0 {
			t.Errorf("Secret pki-a-ca: type %s, keys %d", secret.Type, len(secret.Data))
		}
		block, _ := pem.Decode(secret.Data["tls.crt"])
		if block == nil {
			t.Fatal("tls.crt holds no PEM")
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if !cert.IsCA || cert.Subject.CommonName != "pki-a" || cert.CheckSignatureFrom(cert) != nil {
			t.Errorf("tls.crt: CA %v, CN %q: want a self-signed CA named pki-a", cert.IsCA, cert.Subject.CommonName)
		}
		firstCA = secret.Data["tls.crt"]
		issuer, err := issuers.Get(ctx, "pki-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got, _, _ := unstructured.NestedString(issuer.Object, "spec", "ca", "secretName"); got != "pki-a-ca" {
			t.Errorf("Issuer pki-a: spec.ca.secretName = %q, want pki-a-ca", got)
		}
	})

	t.Run("an upgrade keeps the CA", func(t *testing.T) {
		m2, hash2 := d.manifest("pki-2.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: pki-a2, namespace: default}\n")
		loc2 := d.channel("pki-channel-2.yaml", fmt.Sprintf(`kind: Addons
metadata: {name: pki}
spec:
  addons:
  - {name: pki-a, version: 1.1.0, needsPKI: true, selector: {k8s-addon: pki-a.addons.k8s.io}, manifest: %s, manifestHash: %s}
`, m2, hash2))
		if code, _, errOut := runCLI(t, "apply", "channel", loc2, "--yes"); code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		secret, err := kubeClient(t).CoreV1().Secrets("kube-system").Get(ctx, "pki-a-ca", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if string(secret.Data["tls.crt"]) != string(firstCA) {
			t.Error("the upgrade replaced the CA")
		}
		if _, err := issuers.Get(ctx, "pki-a", metav1.GetOptions{}); err != nil {
			t.Errorf("Issuer pki-a after the upgrade: %v", err)
		}
	})
}
