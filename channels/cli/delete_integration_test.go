package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/tools/testenv"
)

// kubeClient is a clientset on the test control plane.
func kubeClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	k, err := kubernetes.NewForConfig(testenv.Shared(t).RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// exists reports whether a ConfigMap or, with name only, a Namespace exists
// and is not being deleted.
func configMapExists(t *testing.T, namespace, name string) bool {
	t.Helper()
	cm, err := kubeClient(t).CoreV1().ConfigMaps(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return cm.DeletionTimestamp == nil
}

func namespaceActive(t *testing.T, name string) bool {
	t.Helper()
	ns, err := kubeClient(t).CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return ns.DeletionTimestamp == nil
}

func recordAnnotation(t *testing.T, namespace, name string) (string, bool) {
	t.Helper()
	ns, err := kubeClient(t).CoreV1().Namespaces().Get(context.Background(), namespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, ok := ns.Annotations[channels.AnnotationPrefix+name]
	return v, ok
}

func TestIntegrationDeleteAddon(t *testing.T) {
	d := channelDir{t: t, dir: t.TempDir()}
	// Two addons with the same selector, as kOps gives its networking
	// addons, and a third with its own.
	a, aHash := d.manifest("del-a.yaml", `apiVersion: v1
kind: Namespace
metadata: {name: del-a-ns}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: del-a, namespace: default}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: del-a-inner, namespace: del-a-ns}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: del-a}
rules: []
`)
	b, bHash := d.manifest("del-b.yaml", `apiVersion: v1
kind: ConfigMap
metadata: {name: del-b, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: del-b}
rules: []
`)
	c, cHash := d.manifest("del-c.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: del-c, namespace: default}\n")
	loc := d.channel("del.yaml", fmt.Sprintf(`kind: Addons
metadata: {name: del}
spec:
  addons:
  - {name: del-a, version: 1.0.0, namespace: cli-delete, selector: {role.kubernetes.io/networking: "1"}, manifest: %s, manifestHash: %s}
  - {name: del-b, version: 1.0.0, namespace: cli-delete, selector: {role.kubernetes.io/networking: "1"}, manifest: %s, manifestHash: %s}
  - {name: del-c, version: 1.0.0, namespace: cli-delete, selector: {k8s-addon: del-c.addons.k8s.io}, manifest: %s, manifestHash: %s}
`, a, aHash, b, bHash, c, cHash))
	if code, _, errOut := runCLI(t, "apply", "channel", loc, "--yes"); code != 0 {
		t.Fatalf("installing: exit %d, %s", code, errOut)
	}

	t.Run("without --yes only lists", func(t *testing.T) {
		code, out, errOut := runCLI(t, "delete", "addon", "del-a", "-n", "cli-delete")
		if code != 0 || errOut != "" {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		want := "" +
			"del-a: delete ConfigMap default/del-a\n" +
			"del-a: delete ConfigMap del-a-ns/del-a-inner\n" +
			"del-a: delete ClusterRole.rbac.authorization.k8s.io del-a\n" +
			"del-a: keep Namespace del-a-ns (a Namespace: deleted only when asked)\n" +
			"del-a: remove install record addons.k8s.io/del-a from namespace cli-delete\n" +
			"\n" +
			"Must specify --yes to delete\n"
		if diff := cmp.Diff(out, want); diff != "" {
			t.Errorf("stdout (-got +want):\n%s", diff)
		}
		if !configMapExists(t, "default", "del-a") {
			t.Error("a plan deleted ConfigMap del-a")
		}
	})

	t.Run("--yes deletes only that addon", func(t *testing.T) {
		code, out, errOut := runCLI(t, "delete", "addon", "del-a", "-n", "cli-delete", "--yes")
		if code != 0 || errOut != "" {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		for _, want := range []string{"del-a: Deleted ConfigMap default/del-a\n", "del-a: Deleted the install record of 1.0.0\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("stdout %q does not contain %q", out, want)
			}
		}
		if configMapExists(t, "default", "del-a") || configMapExists(t, "del-a-ns", "del-a-inner") {
			t.Error("del-a's ConfigMaps are still there")
		}
		if _, err := kubeClient(t).RbacV1().ClusterRoles().Get(context.Background(), "del-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ClusterRole del-a: %v, want NotFound", err)
		}
		if !namespaceActive(t, "del-a-ns") {
			t.Error("Namespace del-a-ns was deleted without --include-namespaces")
		}
		if _, ok := recordAnnotation(t, "cli-delete", "del-a"); ok {
			t.Error("del-a's record is still there")
		}
		// The other addons, one of them with the same selector, are whole.
		if !configMapExists(t, "default", "del-b") || !configMapExists(t, "default", "del-c") {
			t.Error("another addon's ConfigMap was deleted")
		}
		if _, err := kubeClient(t).RbacV1().ClusterRoles().Get(context.Background(), "del-b", metav1.GetOptions{}); err != nil {
			t.Errorf("ClusterRole del-b: %v", err)
		}
		for _, name := range []string{"del-b", "del-c"} {
			if _, ok := recordAnnotation(t, "cli-delete", name); !ok {
				t.Errorf("the record of %s is gone", name)
			}
		}
		if code, out, _ := runCLI(t, "apply", "channel", loc); code != 0 || !strings.Contains(out, "del-a") || strings.Contains(out, "del-b") {
			t.Errorf("after the delete, the plan is %q; want del-a to install again, and only it", out)
		}
	})

	t.Run("a deleted addon is gone", func(t *testing.T) {
		code, _, errOut := runCLI(t, "delete", "addon", "del-a", "-n", "cli-delete")
		if code != 1 || !strings.Contains(errOut, `addon "del-a" has no install record in namespace cli-delete`) {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})

	t.Run("--include-namespaces", func(t *testing.T) {
		if code, _, errOut := runCLI(t, "apply", "channel", loc, "--yes"); code != 0 {
			t.Fatalf("reinstalling: exit %d, %s", code, errOut)
		}
		code, out, errOut := runCLI(t, "delete", "addon", "del-a", "del-c", "-n", "cli-delete", "--include-namespaces", "--yes")
		if code != 0 || errOut != "" {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		if !strings.Contains(out, "del-a: Deleted Namespace del-a-ns\n") {
			t.Errorf("stdout %q does not report the namespace deleted", out)
		}
		if namespaceActive(t, "del-a-ns") || configMapExists(t, "default", "del-c") {
			t.Error("Namespace del-a-ns or ConfigMap del-c is still there")
		}
		if !configMapExists(t, "default", "del-b") {
			t.Error("del-b's ConfigMap was deleted")
		}
	})
}

// TestIntegrationDeleteKeepsNamespaceWithKeptObject deletes an addon with
// --include-namespaces whose Namespace holds a kept ConfigMap: the plan
// and --yes print the same keep line, naming the ConfigMap, and the
// Namespace and the ConfigMap stay.
func TestIntegrationDeleteKeepsNamespaceWithKeptObject(t *testing.T) {
	d := channelDir{t: t, dir: t.TempDir()}
	m, hash := d.manifest("held.yaml", `apiVersion: v1
kind: Namespace
metadata: {name: held-ns}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: held-kept, namespace: held-ns, annotations: {`+channels.KeepAnnotation+`: "true"}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: held-plain, namespace: held-ns}
`)
	loc := d.channel("held-channel.yaml", fmt.Sprintf(`kind: Addons
metadata: {name: held}
spec:
  addons:
  - {name: held, version: 1.0.0, namespace: cli-held, selector: {k8s-addon: held.addons.k8s.io}, manifest: %s, manifestHash: %s}
`, m, hash))
	if code, _, errOut := runCLI(t, "apply", "channel", loc, "--yes"); code != 0 {
		t.Fatalf("installing: exit %d, %s", code, errOut)
	}
	keepLine := "held: keep Namespace held-ns (it holds objects channels keeps, which deleting it would delete: ConfigMap held-ns/held-kept; " +
		"to delete it, delete them yourself first (their data go with them), then the Namespace (kubectl delete namespace held-ns))\n"
	for _, args := range [][]string{nil, {"--yes"}} {
		code, out, errOut := runCLI(t, append([]string{"delete", "addon", "held", "-n", "cli-held", "--include-namespaces"}, args...)...)
		if code != 0 || errOut != "" {
			t.Fatalf("delete %v: exit %d, stderr %q", args, code, errOut)
		}
		if !strings.Contains(out, keepLine) {
			t.Errorf("delete %v: stdout %q does not contain %q", args, out, keepLine)
		}
	}
	if !namespaceActive(t, "held-ns") || !configMapExists(t, "held-ns", "held-kept") {
		t.Error("Namespace held-ns or its kept ConfigMap is gone")
	}
	if configMapExists(t, "held-ns", "held-plain") {
		t.Error("ConfigMap held-plain is still there")
	}
}
