package pki

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// missingNamespace makes the fake refuse creates in namespace as a real
// server does when the namespace does not exist.
func missingNamespace(client *fake.Clientset, namespace string) {
	client.PrependReactor("create", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() != namespace {
			return false, nil, nil
		}
		return true, nil, apierrors.NewNotFound(corev1.Resource("namespaces"), namespace)
	})
}

func TestEnsureCAConfigMap(t *testing.T) {
	ctx := context.Background()
	ca1, _ := NewCA(caCommonName, testNow)
	ca2, _ := NewCA(caCommonName, testNow)
	client := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "theirs", Name: CAConfigMap}, Data: map[string]string{CACertKey: "an operator's"}})
	missingNamespace(client, "missing")
	steps := []struct {
		namespace string
		ca        *CA
		want      string
		wantData  string
	}{
		{"kos-monitoring", ca1, "configmap kos-monitoring/kos-ca created", string(ca1.CertPEM)},
		{"kos-monitoring", ca1, "configmap kos-monitoring/kos-ca kept", string(ca1.CertPEM)},
		{"kos-monitoring", ca2, "configmap kos-monitoring/kos-ca renewed (the CA changed)", string(ca2.CertPEM)},
		{"theirs", ca2, "configmap theirs/kos-ca kept (not made by kos-pki, not checked)", "an operator's"},
		{"missing", ca2, "configmap missing/kos-ca skipped (namespace missing does not exist)", ""},
	}
	for _, s := range steps {
		r, err := EnsureCAConfigMap(ctx, client, s.namespace, s.ca.CertPEM)
		if err != nil {
			t.Fatalf("%s: %v", s.want, err)
		}
		if got := r.String(); got != s.want {
			t.Errorf("got %q, want %q", got, s.want)
		}
		cm, err := client.CoreV1().ConfigMaps(s.namespace).Get(ctx, CAConfigMap, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && s.wantData == "" {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := cm.Data[CACertKey]; got != s.wantData {
			t.Errorf("%s: the ConfigMap holds %.40q, want %.40q", s.want, got, s.wantData)
		}
		if _, ok := cm.Data[CAKeyKey]; ok {
			t.Errorf("%s: the ConfigMap holds the CA's key", s.want)
		}
	}
}

func TestEnsurePasswordSecret(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	missingNamespace(client, "missing")
	grafana := SecretRef{Namespace: "kos-monitoring", Name: "grafana-admin"}
	first, err := EnsurePasswordSecret(ctx, client, grafana)
	if err != nil {
		t.Fatal(err)
	}
	password := string(first.Secret.Data[PasswordKey])
	if first.Action != Created || len(password) != 43 || strings.ContainsAny(password, "+/=") {
		t.Errorf("first: %s, password %q: want created, 43 base64url characters", first, password)
	}
	again, err := EnsurePasswordSecret(ctx, client, grafana)
	if err != nil {
		t.Fatal(err)
	}
	if again.Action != Kept || string(again.Secret.Data[PasswordKey]) != password {
		t.Errorf("again: %s, password changed %v: want kept, the same password", again, string(again.Secret.Data[PasswordKey]) != password)
	}
	other, err := EnsurePasswordSecret(ctx, client, SecretRef{Namespace: "kos-monitoring", Name: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if string(other.Secret.Data[PasswordKey]) == password {
		t.Error("two Secrets got the same password")
	}
	skipped, err := EnsurePasswordSecret(ctx, client, SecretRef{Namespace: "missing", Name: "grafana-admin"})
	if err != nil || skipped.Action != Skipped {
		t.Errorf("in a missing namespace: %s, %v; want skipped", skipped, err)
	}
}

// TestPublishForbidden checks that a namespace where kos-pki may not read
// is skipped (its owner has not opted in), and that one where it may read
// but not update the CA is an error that says what to grant.
func TestPublishForbidden(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "read-only", Name: CAConfigMap, Labels: map[string]string{ManagedByLabel: FieldManager}},
		Data:       map[string]string{CACertKey: "old"},
	})
	client.PrependReactor("*", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "no-rights" || (a.GetNamespace() == "read-only" && a.GetVerb() != "get") {
			return true, nil, apierrors.NewForbidden(corev1.Resource("configmaps"), CAConfigMap, nil)
		}
		return false, nil, nil
	})
	r, err := EnsureCAConfigMap(ctx, client, "no-rights", []byte("ca"))
	if want := "configmap no-rights/kos-ca skipped (not allowed in namespace no-rights: grant pki.PublishRules there to publish)"; err != nil || r.String() != want {
		t.Errorf("no rights: %q, %v; want %q", r, err, want)
	}
	_, err = EnsureCAConfigMap(ctx, client, "read-only", []byte("ca"))
	if want := "updating configmap read-only/kos-ca: grant update on configmaps in namespace read-only to this identity (see pki.PublishRules): "; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %v, want it to start %q", err, want)
	}
}

// TestSignerPublishes runs signer passes that publish into a namespace that
// does not exist yet: the pass succeeds and comes back within
// PublishRetry; once the namespace exists, the next pass publishes and
// the signer waits its usual interval.
func TestSignerPublishes(t *testing.T) {
	leaves, err := SetAll.Leaves(testNamespace)
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	exists := false
	client.PrependReactor("create", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() != "kos-monitoring" || exists {
			return false, nil, nil
		}
		return true, nil, apierrors.NewNotFound(corev1.Resource("namespaces"), "kos-monitoring")
	})
	s := &Signer{
		Run: &EnsureRun{
			cfg: completedEnsureConfig{EnsureConfig{
				Namespace: testNamespace, Leaves: leaves,
				CAConfigMaps: []string{testNamespace, "kos-monitoring"},
				Passwords:    []SecretRef{{Namespace: "kos-monitoring", Name: "grafana-admin"}},
			}},
			ensurer: &Ensurer{Client: client, Namespace: testNamespace, Now: func() time.Time { return testNow }},
		},
		Interval: time.Hour,
		Metrics:  NewSignerMetrics(),
	}
	wait, err := s.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if wait != PublishRetry {
		t.Errorf("with a namespace missing the signer waits %s, want %s", wait, PublishRetry)
	}
	exists = true
	wait, err = s.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if wait != time.Hour {
		t.Errorf("with every namespace there the signer waits %s, want its interval", wait)
	}
	ca, err := client.CoreV1().Secrets(testNamespace).Get(context.Background(), CASecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{testNamespace, "kos-monitoring"} {
		cm, err := client.CoreV1().ConfigMaps(ns).Get(context.Background(), CAConfigMap, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(ca.Data[CACertKey]), cm.Data[CACertKey]); diff != "" {
			t.Errorf("configmap %s/%s (-CA +published):\n%s", ns, CAConfigMap, diff)
		}
	}
	if _, err := client.CoreV1().Secrets("kos-monitoring").Get(context.Background(), "grafana-admin", metav1.GetOptions{}); err != nil {
		t.Errorf("the password Secret: %v", err)
	}
}

func TestParseSecretRef(t *testing.T) {
	for _, s := range []string{"a/b", "", "a", "/b", "a/", "a/b/c"} {
		_, err := ParseSecretRef(s)
		if got, want := err == nil, s == "a/b"; got != want {
			t.Errorf("ParseSecretRef(%q): error %v", s, err)
		}
	}
}
