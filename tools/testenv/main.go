package testenv

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// Main starts one environment for a test package, runs its tests and stops
// the environment. Use it from TestMain:
//
//	var env *testenv.Env
//
//	func TestMain(m *testing.M) { testenv.Main(m, &env) }
//
// When the control plane cannot start, Main says why on stderr and exits
// non-zero: the tests of the package fail, they are never skipped. An
// interrupt stops the environment before the program exits.
func Main(m *testing.M, env **Env) {
	os.Exit(runMain(m, env))
}

func runMain(m *testing.M, env **Env) int {
	began := time.Now()
	e, err := Start(context.Background(), Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: the control plane did not start: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "testenv: Kubernetes %s at %s, started in %s\n", e.Version, e.APIServerURL, time.Since(began).Round(10*time.Millisecond))
	*env = e

	// The children would die with this program anyway; stopping them here
	// also removes the working folder.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-signals
		fmt.Fprintf(os.Stderr, "testenv: %s: stopping the control plane\n", sig)
		_ = e.Stop()
		os.Exit(1)
	}()

	code := m.Run()
	signal.Stop(signals)
	if err := e.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stopping the control plane: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
