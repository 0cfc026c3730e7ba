package apiserver_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/kos-sdn/kos/tools/testenv"
)

// withControllers is the control plane with kube-controller-manager that
// the tests of Kubernetes's own controllers on KOS objects share (garbage
// collection, namespace deletion, quota counting). The shared control plane
// of testenv.Shared has no kube-controller-manager, and the other tests rely
// on that. Started on first use, it is stopped when the test program ends
// (testenv.AfterTests). Each test keeps to namespaces of its own, so what
// one deletes or counts is not another's. Sharing it also shares the
// controllers' discovery of the KOS resources (every 30 s), which each test
// used to wait for again.
var withControllers struct {
	once sync.Once
	env  *testenv.Env
	kos  *testenv.KOS
	err  error
}

// controllersEnv returns the control plane with kube-controller-manager and
// its kos-apiserver, registered with its aggregator.
func controllersEnv(t testing.TB) (*testenv.Env, *testenv.KOS) {
	t.Helper()
	withControllers.once.Do(func() {
		ctx := context.Background()
		env, err := testenv.Start(ctx, testenv.Options{Components: []string{testenv.KubeControllerManager}})
		if err != nil {
			withControllers.err = fmt.Errorf("starting a control plane with kube-controller-manager: %w", err)
			return
		}
		kos, err := env.StartKOS(ctx, testenv.KOSOptions{Name: "controllers"})
		if err != nil {
			withControllers.err = errors.Join(fmt.Errorf("starting kos-apiserver: %w", err), env.Stop())
			return
		}
		withControllers.env, withControllers.kos = env, kos
		testenv.AfterTests(func() error {
			return errors.Join(kos.Stop(), env.Stop())
		})
	})
	if withControllers.err != nil {
		t.Fatal(withControllers.err)
	}
	return withControllers.env, withControllers.kos
}
