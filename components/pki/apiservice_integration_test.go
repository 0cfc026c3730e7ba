package pki_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/pki"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationRunRestoresCABundle runs `kos-pki run` with passes an
// hour apart, deletes its APIService and makes it again without a CA
// bundle, as channels --drift=repair does after someone deleted it
// (docs/operations.md): the signer sets the bundle again within
// APIServiceCheckInterval, not at its next pass.
func TestIntegrationRunRestoresCABundle(t *testing.T) {
	env := testenv.Shared(t)
	ns := newNamespace(t)
	apiService := applyAPIService(t, ns+".pki.example.com", "v1", ns, 443, 15)
	apiServices := aggregatorClient(t).ApiregistrationV1().APIServices()
	t.Cleanup(func() {
		if err := apiServices.Delete(context.Background(), apiService, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting apiservice %s: %v", apiService, err)
		}
	})

	ctx := t.Context()
	stdout := startRun(t, "--kubeconfig", env.Kubeconfig, "--namespace", ns, "--secrets", "all",
		"--apiservice", apiService, "--interval", "1h",
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0]))

	var caPEM []byte
	poll.Until(t, time.Minute, "the first pass to set the CA bundle", func(ctx context.Context) error {
		svc, err := apiServices.Get(ctx, apiService, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(svc.Spec.CABundle) == 0 {
			return fmt.Errorf("apiservice %s has no CA bundle yet", apiService)
		}
		caPEM = svc.Spec.CABundle
		return nil
	})

	if err := apiServices.Delete(ctx, apiService, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	applyAPIService(t, ns+".pki.example.com", "v1", ns, 443, 15)
	made := time.Now()
	poll.Until(t, 3*pki.APIServiceCheckInterval, "the CA bundle of the APIService made again", func(ctx context.Context) error {
		svc, err := apiServices.Get(ctx, apiService, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !bytes.Equal(svc.Spec.CABundle, caPEM) {
			return fmt.Errorf("apiservice %s has the CA bundle %q", apiService, svc.Spec.CABundle)
		}
		return nil
	})
	t.Logf("the APIService made again had its CA bundle after %s (passes an hour apart)", time.Since(made).Round(100*time.Millisecond))
	if n := strings.Count(stdout.String(), "apiservice "+apiService+" patched"); n != 2 {
		t.Errorf("kos-pki run printed %d patched lines for the APIService, want 2 (the first pass, the check):\n%s", n, stdout.String())
	}
}

// startRun runs `kos-pki run` with args until the test ends, and returns
// its standard output; the test fails if the command does.
func startRun(t *testing.T, args ...string) *syncBuffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	cmd := pki.NewCommand(&stdout, &stderr)
	cmd.SetArgs(append([]string{"run"}, args...))
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("kos-pki run: %v\n%s", err, stderr.String())
		}
	})
	return &stdout
}
