package testenv

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// NewNamespace creates a namespace of its own for a test, named prefix
// and a suffix the API server generates, and returns its name: tests that
// share a control plane (Shared) keep apart by namespace. It is not deleted:
// the control plane goes with the program, and a deletion would only wait
// for controllers some control planes do not run.
func (e *Env) NewNamespace(t testing.TB, prefix string) string {
	t.Helper()
	kube, err := kubernetes.NewForConfig(e.RESTConfig)
	if err != nil {
		t.Fatalf("creating a client: %v", err)
	}
	ns, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	return ns.Name
}
