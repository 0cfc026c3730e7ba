package apiserver_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"

	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/testenv"
)

// kosServers counts the kos-apiservers this test program started, so that
// each gets a name, and so an etcd, of its own, also under -count.
var kosServers atomic.Int64

// startKOS starts a kos-apiserver with an etcd of its own, named
// <opts.Name>-<n>, and stops the server when the test ends; its etcd stops
// with the environment.
func startKOS(t testing.TB, opts testenv.KOSOptions) *testenv.KOS {
	t.Helper()
	opts.Name = fmt.Sprintf("%s-%d", opts.Name, kosServers.Add(1))
	kos, err := env.StartKOS(context.Background(), opts)
	if err != nil {
		t.Fatalf("starting kos-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if err := kos.Stop(); err != nil {
			t.Errorf("stopping kos-apiserver %s: %v", kos.Name, err)
		}
	})
	return kos
}

// kosClient returns a KOS clientset for cfg.
func kosClient(t testing.TB, cfg *rest.Config) *kosclient.Clientset {
	t.Helper()
	c, err := kosclient.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("creating a KOS client: %v", err)
	}
	return c
}

// kubectl runs kubectl as the test environment's admin and returns its
// standard output.
func kubectl(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig=" + env.Kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\nstderr: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}
