package main

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kos-sdn/kos/tools/registry"
	"github.com/kos-sdn/kos/tools/testenv"
)

// result is what one run of the localenv binary did.
type result struct {
	code   int
	stdout string
	stderr string
}

// TestIntegrationUpStatusDown runs the real command as a person would: up
// --registry returns while the control plane and the registry keep running,
// a second up finds them, status and env report them, and down stops them.
func TestIntegrationUpStatusDown(t *testing.T) {
	bin := testenv.Build(t, "tools/localenv")
	dir := filepath.Join(t.TempDir(), "env")
	run := func(args ...string) result {
		t.Helper()
		cmd := exec.Command(bin, append(args, "--dir", dir)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		code := 0
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			t.Fatalf("running localenv %v: %v", args, err)
		}
		return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
	}
	t.Cleanup(func() {
		// Whatever failed above, leave no detached process behind.
		run("down")
		for _, name := range []string{"kube-apiserver", "etcd"} {
			if pid := readPID(t, dir, name); pid > 0 && strings.Contains(cmdline(pid), dir) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if r, err := registry.Attach(filepath.Join(dir, "registry")); err == nil && r.Running() {
			_ = r.Stop()
		}
	})

	began := time.Now()
	up := run("up", "--registry")
	t.Logf("up took %s", time.Since(began).Round(time.Millisecond))
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if up.code != 0 || !strings.Contains(up.stdout, "export KUBECONFIG="+kubeconfig) {
		t.Fatalf("up: exit %d\nstdout:\n%s\nstderr:\n%s", up.code, up.stdout, up.stderr)
	}
	for _, want := range []string{"starting the registry", "starting etcd", "starting kube-apiserver", "ready in"} {
		if !strings.Contains(up.stderr, want) {
			t.Errorf("up's progress does not mention %q:\n%s", want, up.stderr)
		}
	}
	reg, err := registry.Attach(filepath.Join(dir, "registry"))
	if err != nil {
		t.Fatalf("finding the registry up started: %v", err)
	}
	if !strings.Contains(up.stdout, "A registry runs at "+reg.Host()) {
		t.Errorf("up does not name the registry %s:\n%s", reg.Host(), up.stdout)
	}
	pids := map[string]int{"etcd": readPID(t, dir, "etcd"), "kube-apiserver": readPID(t, dir, "kube-apiserver"), "docker-registry": reg.PID()}

	// up has exited; the control plane must still serve.
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().Get(t.Context(), metav1.NamespaceSystem, metav1.GetOptions{}); err != nil {
		t.Errorf("reading kube-system after up returned: %v", err)
	}
	if resp, err := http.Get("http://" + reg.Host() + "/v2/"); err != nil {
		t.Errorf("the registry after up returned: %v", err)
	} else {
		resp.Body.Close()
	}

	if status := run("status"); status.code != 0 || !strings.Contains(status.stdout, "Ready: Kubernetes v") {
		t.Errorf("status while running: exit %d, stdout:\n%s\nstderr:\n%s", status.code, status.stdout, status.stderr)
	}
	again := run("up")
	if again.code != 0 || !strings.Contains(again.stdout, "Already running") {
		t.Errorf("second up: exit %d, stdout:\n%s\nstderr:\n%s", again.code, again.stdout, again.stderr)
	}
	againPIDs := map[string]int{"etcd": readPID(t, dir, "etcd"), "kube-apiserver": readPID(t, dir, "kube-apiserver"), "docker-registry": reg.PID()}
	if r, err := registry.Attach(filepath.Join(dir, "registry")); err != nil || r.PID() != reg.PID() || !r.Running() {
		t.Errorf("the registry after a second up: %v, want pid %d running", err, reg.PID())
	}
	if diff := cmp.Diff(againPIDs, pids); diff != "" {
		t.Errorf("pids after a second up (-got +want):\n%s", diff)
	}
	if env := run("env"); env.code != 0 || env.stdout != "export KUBECONFIG="+kubeconfig+"\n" {
		t.Errorf("env: exit %d, stdout %q", env.code, env.stdout)
	}

	down := run("down")
	wantDown := "Stopped docker-registry (pid " + strconv.Itoa(pids["docker-registry"]) + ").\n" +
		"Stopped kube-apiserver (pid " + strconv.Itoa(pids["kube-apiserver"]) + ").\n" +
		"Stopped etcd (pid " + strconv.Itoa(pids["etcd"]) + ").\n"
	if down.code != 0 || down.stdout != wantDown {
		t.Errorf("down: exit %d, stdout %q, want %q; stderr:\n%s", down.code, down.stdout, wantDown, down.stderr)
	}
	for name, pid := range pids {
		if strings.Contains(cmdline(pid), dir) || (name == "docker-registry" && reg.Running()) {
			t.Errorf("%s (pid %d) still runs after down", name, pid)
		}
	}
	if status := run("status"); status.code != 3 {
		t.Errorf("status after down: exit %d, want 3; stdout:\n%s", status.code, status.stdout)
	}
	if purge := run("down", "--purge"); purge.code != 0 || !strings.Contains(purge.stdout, "Nothing to stop") {
		t.Errorf("down --purge after down: exit %d, stdout %q", purge.code, purge.stdout)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still exists after down --purge (err = %v)", dir, err)
	}
}

// readPID reads DIR/<name>.pid, or returns 0.
func readPID(t *testing.T, dir, name string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name+".pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Errorf("pid file of %s: %v", name, err)
	}
	return pid
}

// cmdline returns a live process's command line, or "" when it is gone or
// a zombie.
func cmdline(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	return string(data)
}
