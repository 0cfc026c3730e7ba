package apicheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/blang/semver/v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/tools/addons/bundle"
	"github.com/kos-sdn/kos/tools/testenv"
)

// otherServers are the control planes of other minors than tools/kube's
// (1.37), started when some release's kubernetesVersion range has that
// minor at one of its ends (endMinors): each a build module of its own
// (tools/<dir>/build.sh builds etcd and kube-apiserver once and says where
// they are), or the folder that the environment variable env names. 1.38
// is a beta (tools/kube138), which ranges reaching <1.39.0 are checked on.
var otherServers = []struct {
	minor    uint64
	dir, env string
}{
	{38, "kube138", "KOS_KUBE138_BIN_DIR"},
	{30, "kube130", "KOS_KUBE130_BIN_DIR"},
	{29, "kube129", "KOS_KUBE129_BIN_DIR"},
}

// namespace is the namespace of the KOS addons.
const namespace = "example-com"

// server is one running control plane the bundle is checked against.
type server struct {
	env *testenv.Env
	// version is the server's version as kubernetesVersion ranges see it.
	version semver.Version
	kube    kubernetes.Interface
	// aggregates is whether kube-controller-manager runs, whose ClusterRole
	// aggregation gives the view, edit and admin roles the KOS rules.
	aggregates bool
}

func (s *server) String() string { return "v" + s.version.String() }

// The control planes, newest first, started on first use so that the tests
// that need no server run without one.
var (
	serversOnce sync.Once
	running     []*server
	serversErr  error
)

// testServers returns the control planes, starting them the first time a
// test asks; when they cannot start, every test that asks fails.
func testServers(t testing.TB) []*server {
	t.Helper()
	serversOnce.Do(func() { running, serversErr = startServers(context.Background()) })
	if serversErr != nil {
		t.Fatalf("apicheck: the control planes did not start: %v", serversErr)
	}
	return running
}

// repoRoot is the repository root.
var repoRoot string

// TestMain stops the control planes the integration tests start on first
// use.
func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	root, err := testenv.RepoRoot()
	if err != nil {
		fmt.Fprintf(os.Stderr, "apicheck: %v\n", err)
		return 1
	}
	repoRoot = root
	code := m.Run()
	for _, s := range running {
		if err := s.env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "apicheck: stopping Kubernetes %s: %v\n", s, err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// startServers starts a control plane of tools/kube (1.37, with
// kube-controller-manager for ClusterRole aggregation) and one of each of
// otherServers (which build no controller manager) whose minor the
// bundle's ranges claim at an end, at once: each takes seconds, mostly
// waiting.
func startServers(ctx context.Context) ([]*server, error) {
	claimed, err := claimedEndMinors(ctx)
	if err != nil {
		return nil, err
	}
	dirs := []string{""}
	for _, o := range otherServers {
		if !claimed[o.minor] {
			continue
		}
		dir, err := otherBinDir(ctx, repoRoot, fmt.Sprintf("1.%d", o.minor), o.dir, o.env)
		if err != nil {
			return nil, err
		}
		dirs = append(dirs, dir)
	}
	began := time.Now()
	started := make([]*server, len(dirs))
	errs := make([]error, len(dirs))
	var wg sync.WaitGroup
	for i, dir := range dirs {
		wg.Go(func() { started[i], errs[i] = startServer(ctx, dir) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, s := range started {
			if s != nil {
				err = errors.Join(err, s.env.Stop())
			}
		}
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "apicheck: Kubernetes %v started in %s\n", started, time.Since(began).Round(10*time.Millisecond))
	return started, nil
}

// startServer starts etcd and kube-apiserver from binDir ("" for
// tools/kube's, with kube-controller-manager) and makes the namespace of the addons, which dry-run
// applies of namespaced objects need to exist.
func startServer(ctx context.Context, binDir string) (*server, error) {
	opts := testenv.Options{BinDir: binDir}
	if binDir == "" {
		opts.Components = []string{testenv.KubeControllerManager}
	}
	env, err := testenv.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	s := &server{env: env, aggregates: len(opts.Components) > 0}
	if s.version, err = channels.ServerVersion(env.Version); err != nil {
		return nil, errors.Join(err, env.Stop())
	}
	if s.kube, err = kubernetes.NewForConfig(env.RESTConfig); err != nil {
		return nil, errors.Join(err, env.Stop())
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := s.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, errors.Join(fmt.Errorf("creating namespace %s on Kubernetes %s: %w", namespace, s, err), env.Stop())
	}
	return s, nil
}

// claimedEndMinors returns the minors of Kubernetes 1 that some release of
// the bundle's ranges has at one of its ends (endMinors).
func claimedEndMinors(ctx context.Context) (map[uint64]bool, error) {
	b, err := bundle.Load(ctx, repoRoot, bundle.Channels)
	if err != nil {
		return nil, fmt.Errorf("loading the addon bundle: %w", err)
	}
	claimed := map[uint64]bool{}
	for _, f := range b.Folders {
		// A folder that does not load fails TestIntegrationDryRun, and
		// a range that does not parse, there too.
		for _, a := range f.Releases {
			minors, err := endMinors(a.KubernetesVersion)
			if err != nil {
				continue
			}
			for _, m := range minors {
				claimed[m] = true
			}
		}
	}
	return claimed, nil
}

// otherBinDir returns the folder of etcd and kube-apiserver of minor: $env,
// else what tools/<dir>/build.sh builds (minutes the first time, then
// cached).
func otherBinDir(ctx context.Context, root, minor, dir, env string) (string, error) {
	if d := os.Getenv(env); d != "" {
		return d, nil
	}
	script := filepath.Join(root, "tools", dir, "build.sh")
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building kube-apiserver %s with %s (or set %s): %w", minor, script, env, err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

// fits reports whether a release's kubernetesVersion range contains the
// server's version.
func (s *server) fits(a *channels.Addon) bool {
	if a.KubernetesVersion == "" {
		return true
	}
	r, err := semver.ParseRange(a.KubernetesVersion)
	return err == nil && r(s.version)
}
