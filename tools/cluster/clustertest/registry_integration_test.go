package clustertest

import (
	"net/http"
	"testing"

	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/registry"
	"github.com/kos-sdn/kos/tools/spawner"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationDetachedRegistry checks that a detached cluster keeps its
// registry (as `localenv up --registry` leaves it): Attach finds it, lists
// it among the processes, and Stop of the attached cluster stops it. A
// control plane without nodes is enough; TestIntegrationThreeNodes checks
// that nodes pull from the registry.
func TestIntegrationDetachedRegistry(t *testing.T) {
	dir := t.TempDir()
	started, err := cluster.Start(t.Context(), cluster.Options{
		ControlPlane: testenv.Options{Dir: dir, Detach: true, Progress: testWriter{t}},
		Registry:     true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = started.Stop() })

	env, err := cluster.Attach(dir)
	if err != nil {
		t.Fatal(err)
	}
	if env.Registry == "" || env.Registry != started.Registry {
		t.Fatalf("the attached cluster's registry is %q, the started one's %q", env.Registry, started.Registry)
	}
	var pid int
	for _, p := range env.Processes() {
		if p.Name == registry.Binary {
			if !p.Running {
				t.Errorf("the attached cluster lists %s (pid %d) as stopped", p.Name, p.PID)
			}
			pid = p.PID
		}
	}
	if pid == 0 {
		t.Fatalf("the attached cluster does not list %s among its processes: %+v", registry.Binary, env.Processes())
	}
	resp, err := http.Get("http://" + env.Registry + "/v2/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v2/ of the attached cluster's registry: %s", resp.Status)
	}

	if err := env.Stop(); err != nil {
		t.Fatal(err)
	}
	if spawner.Alive(pid, "") {
		t.Errorf("the registry (pid %d) runs on after the attached cluster stopped", pid)
	}
}
