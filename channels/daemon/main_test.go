package daemon

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kos-sdn/kos/tools/testenv"
)

// TestMain stops the control plane the integration tests start on first
// use (testenv.Shared).
func TestMain(m *testing.M) { testenv.Main(m) }

// kube is a clientset of the shared control plane.
func kube(t *testing.T) kubernetes.Interface {
	t.Helper()
	k, err := kubernetes.NewForConfig(testenv.Shared(t).RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// configMapOf reads a ConfigMap; nil when it does not exist.
func configMapOf(t *testing.T, namespace, name string) *corev1.ConfigMap {
	t.Helper()
	cm, err := kube(t).CoreV1().ConfigMaps(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return cm
}
