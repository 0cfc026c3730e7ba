package backupmetrics

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// TestManifestsGrantRules reads the Role kos-pki-etcd-backup of the
// kos-apiserver releases that run kos-pki with --etcd-backup-cronjob: it
// grants Rules, to kos-pki's ServiceAccount. (TestIntegrationBackupMetrics
// of package pki runs kos-pki with these rules only.)
func TestManifestsGrantRules(t *testing.T) {
	files, err := filepath.Glob("../../../addons/kos-apiserver/0.4.0-*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no kos-apiserver 0.4.0 manifests (%v)", err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "--etcd-backup-cronjob=kos-etcd-backup") {
			t.Errorf("%s: kos-pki has no --etcd-backup-cronjob", file)
		}
		var role *rbacv1.Role
		var binding *rbacv1.RoleBinding
		for _, doc := range strings.Split(string(data), "\n---\n") {
			var head struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if head.Metadata.Name != "kos-pki-etcd-backup" {
				continue
			}
			switch head.Kind {
			case "Role":
				role = &rbacv1.Role{}
				err = yaml.UnmarshalStrict([]byte(doc), role)
			case "RoleBinding":
				binding = &rbacv1.RoleBinding{}
				err = yaml.UnmarshalStrict([]byte(doc), binding)
			}
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
		}
		if role == nil || binding == nil {
			t.Fatalf("%s: no Role and RoleBinding kos-pki-etcd-backup", file)
		}
		if diff := cmp.Diff(role.Rules, Rules()); diff != "" {
			t.Errorf("%s: the Role's rules (-got +want):\n%s", file, diff)
		}
		want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "kos-pki", Namespace: role.Namespace}}
		if diff := cmp.Diff(binding.Subjects, want); diff != "" || binding.RoleRef.Name != role.Name {
			t.Errorf("%s: the RoleBinding binds %s to (-got +want):\n%s", file, binding.RoleRef.Name, diff)
		}
	}
}
