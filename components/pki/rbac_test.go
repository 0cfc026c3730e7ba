package pki

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRules(t *testing.T) {
	secretRules := func(names ...string) []rbacv1.PolicyRule {
		return []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: append([]string{"kos-ca"}, names...)},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"update"}, ResourceNames: names},
		}
	}
	tests := []struct {
		set           Set
		apiService    string
		wantNamespace []rbacv1.PolicyRule
		wantCluster   []rbacv1.PolicyRule
	}{{
		set:           SetEtcd,
		wantNamespace: secretRules("kos-etcd-server", "kos-etcd-peer"),
	}, {
		set:           SetAPIServer,
		apiService:    "v1alpha1.network.example.com",
		wantNamespace: secretRules("kos-etcd-client", "kos-apiserver-serving"),
		wantCluster: []rbacv1.PolicyRule{{
			APIGroups: []string{"apiregistration.k8s.io"}, Resources: []string{"apiservices"},
			Verbs: []string{"get", "patch"}, ResourceNames: []string{"v1alpha1.network.example.com"},
		}},
	}, {
		set:           SetAll,
		wantNamespace: secretRules("kos-etcd-server", "kos-etcd-peer", "kos-etcd-client", "kos-apiserver-serving"),
	}}
	for _, tt := range tests {
		t.Run(string(tt.set), func(t *testing.T) {
			namespaced, cluster, err := Rules(tt.set, tt.apiService)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantNamespace, namespaced); diff != "" {
				t.Errorf("namespaced rules (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantCluster, cluster); diff != "" {
				t.Errorf("cluster rules (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWriteFiles(t *testing.T) {
	dir := t.TempDir()
	secrets := []*corev1.Secret{{
		ObjectMeta: metav1.ObjectMeta{Name: "kos-ca"},
		Data:       map[string][]byte{"ca.crt": []byte("ca cert"), "ca.key": []byte("ca key")},
	}, {
		ObjectMeta: metav1.ObjectMeta{Name: "kos-etcd-server"},
		Data:       map[string][]byte{"tls.crt": []byte("cert"), "tls.key": []byte("key"), "ca.crt": []byte("ca cert"), "../escape": []byte("no")},
	}}
	for _, s := range secrets {
		if err := WriteFiles(dir, s); err != nil {
			t.Fatal(err)
		}
	}
	// Written again, files are replaced.
	secrets[1].Data["tls.crt"] = []byte("cert 2")
	if err := WriteFiles(dir, secrets[1]); err != nil {
		t.Fatal(err)
	}
	type file struct {
		Data string
		Mode os.FileMode
	}
	got := map[string]file{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		got[rel] = file{string(data), info.Mode().Perm()}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]file{
		"kos-ca/ca.crt":           {"ca cert", 0o644},
		"kos-etcd-server/ca.crt":  {"ca cert", 0o644},
		"kos-etcd-server/tls.crt": {"cert 2", 0o644},
		"kos-etcd-server/tls.key": {"key", 0o600},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}
