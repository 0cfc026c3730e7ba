package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// crdResource is where CustomResourceDefinitions are served.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRD creates the CustomResourceDefinition in file, a path relative
// to the repository's root (such as
// tools/multus/testdata/network-attachment-definitions.yaml), unless one of
// its name exists, and returns once kube-apiserver serves served, the
// resource it defines.
func InstallCRD(ctx context.Context, dyn dynamic.Interface, file string, served schema.GroupVersionResource) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return fmt.Errorf("reading the CRD: %w", err)
	}
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &crd.Object); err != nil {
		return fmt.Errorf("reading the CRD %s: %w", file, err)
	}
	if _, err := dyn.Resource(crdResource).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the CRD %s: %w", crd.GetName(), err)
	}
	// A new CRD is served a moment after it is created.
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		_, err := dyn.Resource(served).List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to be served: %w", served.Resource, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
