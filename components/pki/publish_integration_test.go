package pki_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/pki"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationPublish runs ensure as a user with exactly pki.Rules(all)
// in the PKI's namespace and pki.PublishRules in a consumer's: it publishes
// the CA's certificate there and makes the password Secret, keeps both on
// the next run, and skips a namespace that does not exist (where it has no
// rights either), as the real server reports it; as an admin, it skips the
// namespace because it does not exist.
func TestIntegrationPublish(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	admin := kubeClient(t, env.RESTConfig)
	ns, consumer := newNamespace(t), newNamespace(t)
	missing := consumer + "-missing"
	user := "system:serviceaccount:" + ns + ":kos-pki"
	namespaced, _, err := pki.Rules(pki.SetEtcd, "")
	if err != nil {
		t.Fatal(err)
	}
	for namespace, rules := range map[string][]rbacv1.PolicyRule{
		ns:       append(namespaced, pki.PublishRules(true)...),
		consumer: pki.PublishRules(true, "grafana-admin"),
	} {
		if _, err := admin.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "kos-pki"}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "kos-pki"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "kos-pki"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig, _, err := env.NewUserKubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--kubeconfig", kubeconfig, "--namespace", ns, "--secrets", "etcd",
		"--ca-configmap-namespaces", ns + "," + consumer + "," + missing,
		"--password-secrets", consumer + "/grafana-admin," + missing + "/grafana-admin"}
	got := mustEnsure(t, args...)
	want := append(secretLines(ns, "created", pki.CASecret, pki.EtcdServerSecret, pki.EtcdPeerSecret),
		"configmap "+ns+"/kos-ca created",
		"configmap "+consumer+"/kos-ca created",
		"configmap "+missing+"/kos-ca skipped (not allowed in namespace "+missing+": grant pki.PublishRules there to publish)",
		"secret "+consumer+"/grafana-admin created",
		"secret "+missing+"/grafana-admin skipped (not allowed in namespace "+missing+": grant pki.PublishRules there to publish)",
	)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("first run (-want +got):\n%s", diff)
	}
	ca, err := admin.CoreV1().Secrets(ns).Get(ctx, pki.CASecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := admin.CoreV1().ConfigMaps(consumer).Get(ctx, pki.CAConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"ca.crt": string(ca.Data["ca.crt"])}, cm.Data); diff != "" {
		t.Errorf("the published CA (-want +got):\n%s", diff)
	}
	secret, err := admin.CoreV1().Secrets(consumer).Get(ctx, "grafana-admin", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(secret.Data[pki.PasswordKey]); n != 43 {
		t.Errorf("the password has %d characters, want 43", n)
	}

	got = mustEnsure(t, args...)
	want = append(secretLines(ns, "kept", pki.CASecret, pki.EtcdServerSecret, pki.EtcdPeerSecret),
		"configmap "+ns+"/kos-ca kept",
		"configmap "+consumer+"/kos-ca kept",
		"configmap "+missing+"/kos-ca skipped (not allowed in namespace "+missing+": grant pki.PublishRules there to publish)",
		"secret "+consumer+"/grafana-admin kept",
		"secret "+missing+"/grafana-admin skipped (not allowed in namespace "+missing+": grant pki.PublishRules there to publish)",
	)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("second run (-want +got):\n%s", diff)
	}
	adminKubeconfig, _, err := env.NewUserKubeconfig("kos-pki-admin", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	got = mustEnsure(t, "--kubeconfig", adminKubeconfig, "--namespace", ns, "--secrets", "etcd", "--ca-configmap-namespaces", missing)
	if want := "configmap " + missing + "/kos-ca skipped (namespace " + missing + " does not exist)"; got[len(got)-1] != want {
		t.Errorf("as an admin: %q, want the last line %q", got, want)
	}
	again, err := admin.CoreV1().Secrets(consumer).Get(ctx, "grafana-admin", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(again.Data[pki.PasswordKey]) != string(secret.Data[pki.PasswordKey]) {
		t.Error("the second run changed the password")
	}
}
