package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/testenv"
)

// The shared clusters: a cluster a run of this package builds once, with
// the standard release installed, for the tests that only read the cluster
// or add namespaced objects of their own (sharedStandard), each in its own
// namespace (standard.namespace). A test that changes what others would see
// (stops a node, kills a process, upgrades, restores, uninstalls) starts a
// cluster of its own, or takes the shared one over as the last to use it
// (takeSharedStandard).
//
// What a test on it may do: create namespaces of its own and objects in
// them, cluster-scoped objects no other test reads (a ClusterRole of its
// own), and read anything. It leaves the cluster as it found it: its
// namespaces are deleted, to the end, when it ends. What it may not do:
// stop a node or a process, change or delete an object of KOS's or
// another test's, change a node's host state.
//
// The pods' tests have a shared cluster of their own, with Multus on every
// node (sharedPods): they use it in turn, and may kill a KOS process or
// restart an agent when they wait until it is back; each deletes its
// namespaces, to the end, when it ends. The last takes it over
// (takeSharedPods), as it changes KOS's own objects.
//
// A test that fails hands its cluster on to nobody: the cluster stops when
// it ends, and the next test starts another, so that one failure does not
// cause the next.
type sharedSlot struct {
	// name is what the logs call the cluster.
	name string
	// multus starts the cluster with Multus on every node.
	multus bool

	mu sync.Mutex
	// c is the running cluster, nil before the first test asks for it and
	// after one took it over or failed on it.
	c   *sharedCluster
	err error
	// gone says why c is nil after a start: the test that took it over
	// or failed on it.
	gone string
}

var (
	shared    = &sharedSlot{name: "shared cluster"}
	sharedPod = &sharedSlot{name: "pods' shared cluster", multus: true}
)

// sharedCluster is what the shared cluster's tests share.
type sharedCluster struct {
	env *cluster.Cluster
	// dir outlives every test: the release tree the install applied,
	// which a later re-apply reads again.
	dir string
	// channels are the installed release's channels (installFromTree).
	channels []string
	// hostsBefore is each node's hostState before the install, by name.
	hostsBefore map[string]string
	// started and installed are how long the cluster took to start and
	// KOS to be installed on it.
	started, installed time.Duration
}

// sharedStandard returns the shared cluster for t, starting it (with the
// standard release installed from its tree, as installFromTree does) when
// no test has yet: standardNodes nodes labelled for KOS, without Open
// vSwitch or Multus of their own, kube-proxy, a registry,
// kube-controller-manager and kube-scheduler (what startStandardCluster
// starts). The *standard is t's own; the cluster stops when the package's
// tests end (testenv.AfterTests). A failed start fails every test that
// asks.
func sharedStandard(t *testing.T, root string) *standard {
	t.Helper()
	return shared.share(t, root)
}

// sharedPods is sharedStandard for the pods' tests: the same cluster and
// release, with Multus on every node.
func sharedPods(t *testing.T, root string) *standard {
	t.Helper()
	return sharedPod.share(t, root)
}

// share returns the slot's cluster for t, starting it when none runs.
func (slot *sharedSlot) share(t *testing.T, root string) *standard {
	t.Helper()
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if slot.err != nil {
		t.Fatalf("the %s did not start: %v", slot.name, slot.err)
	}
	if slot.c == nil {
		if slot.gone != "" {
			t.Logf("%s: starting another %s", slot.gone, slot.name)
		}
		c, err := startShared(t, root, slot)
		if err != nil {
			slot.err = err
			t.Fatalf("starting the %s: %v", slot.name, err)
		}
		slot.c = c
		testenv.AfterTests(c.stop)
	} else {
		t.Logf("on the %s (started in %s, KOS installed in %s)", slot.name, rounded(slot.c.started), rounded(slot.c.installed))
	}
	c := slot.c
	t.Cleanup(func() {
		if t.Failed() {
			slot.drop(t, c, t.Name()+" failed on the "+slot.name)
		}
	})
	return c.standardFor(t, root)
}

// drop stops c, when it is still the slot's, for the reason given.
func (slot *sharedSlot) drop(t *testing.T, c *sharedCluster, why string) {
	slot.mu.Lock()
	mine := slot.c == c
	if mine {
		slot.c, slot.gone = nil, why
	}
	slot.mu.Unlock()
	if mine {
		if err := c.stop(); err != nil {
			t.Errorf("stopping the %s: %v", slot.name, err)
		}
	}
}

// rounded rounds a duration for a log line.
func rounded(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }

// takeSharedStandard returns the shared cluster for t to change as it
// likes: a destructive test that starts from the standard release
// installed from its tree, run after the tests that share the cluster
// (shared_tests_integration_test.go declares them in the order they run).
// The cluster is t's from then on and stops when t ends; a later
// sharedStandard starts another. When no shared cluster runs, it starts
// one for t alone.
func takeSharedStandard(t *testing.T, root string) (*standard, *sharedCluster) {
	t.Helper()
	return shared.take(t, root)
}

// takeSharedPods is takeSharedStandard for the pods' shared cluster.
func takeSharedPods(t *testing.T, root string) (*standard, *sharedCluster) {
	t.Helper()
	return sharedPod.take(t, root)
}

// take hands the slot's cluster over to t.
func (slot *sharedSlot) take(t *testing.T, root string) (*standard, *sharedCluster) {
	t.Helper()
	slot.mu.Lock()
	c := slot.c
	slot.c, slot.gone = nil, t.Name()+" took the "+slot.name+" over"
	slot.mu.Unlock()
	if c == nil {
		var err error
		if c, err = startShared(t, root, slot); err != nil {
			t.Fatalf("starting the cluster: %v", err)
		}
	} else {
		t.Logf("taking the %s over (started in %s, KOS installed in %s)", slot.name, rounded(c.started), rounded(c.installed))
	}
	t.Cleanup(func() {
		if err := c.stop(); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	})
	return c.standardFor(t, root), c
}

// startShared starts the slot's cluster and installs the standard release
// on it. What it logs goes to t, which may end before the cluster does:
// the cluster's own progress lines go to the program's standard error.
func startShared(t *testing.T, root string, slot *sharedSlot) (_ *sharedCluster, err error) {
	t.Helper()
	began := time.Now()
	var nodes []cluster.NodeOptions
	for i := 1; i <= standardNodes; i++ {
		nodes = append(nodes, cluster.NodeOptions{Name: fmt.Sprintf("kos-node-%d", i), Labels: kosinstall.NodeLabels()})
	}
	env, err := cluster.Start(context.Background(), cluster.Options{
		ControlPlane: testenv.Options{
			Components: []string{testenv.KubeControllerManager, testenv.KubeScheduler},
			Progress:   prefixWriter{w: os.Stderr, prefix: slot.name + ": "},
		},
		Nodes:     nodes,
		KubeProxy: true,
		Registry:  true,
		// Multus only for the pods' cluster: with it every pod sandbox
		// asks kube-apiserver for its pod, and on a loaded machine (load
		// 45-60) the install's sandboxes timed out and channels lost its
		// Lease, twice.
		Multus: slot.multus,
	})
	if err != nil {
		return nil, err
	}
	c := &sharedCluster{env: env, started: time.Since(began), hostsBefore: map[string]string{}}
	// Stopped unless it returns, be it by an error or by t.Fatal.
	ok := false
	defer func() {
		if !ok {
			err = errors.Join(err, c.stop())
		}
	}()
	figures.Duration(t, "shared-cluster-up", c.started)
	if c.dir, err = os.MkdirTemp("", "kos-e2e-shared-"); err != nil {
		return nil, err
	}
	for _, n := range env.Nodes {
		c.hostsBefore[n.Name] = hostState(t, n)
	}
	s := c.standardFor(t, root)
	// The install is a step of t, so that its failure shows as one.
	if !t.Run(slot.name+": install", func(t *testing.T) { c.channels = s.installTreeInto(t, c.dir) }) {
		s.dumpState()
		return nil, errors.New("the install failed")
	}
	c.installed = time.Since(began) - c.started
	figures.Duration(t, "shared-install", c.installed)
	ok = true
	return c, nil
}

// standardFor returns a *standard of t on the shared cluster.
func (c *sharedCluster) standardFor(t *testing.T, root string) *standard {
	s := newStandard(t, c.env, root)
	s.installed = c.channels
	return s
}

// stop stops the cluster and removes its folder. Calling it again does
// nothing.
func (c *sharedCluster) stop() error {
	err := c.env.Stop()
	if c.dir != "" {
		err = errors.Join(err, os.RemoveAll(c.dir))
		c.dir = ""
	}
	return err
}

// namespace creates namespace name for t and deletes it when t ends,
// waiting until it is gone with everything in it, so that the next test on
// a shared cluster finds what it would find on a new one.
func (s *standard) namespace(t *testing.T, name string) string {
	t.Helper()
	if _, err := s.kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.deletedAtEnd(s.t, name)
	return name
}

// deletedAtEnd deletes namespaces names (those of them there are) when t
// ends, and waits until they are gone with everything in them: a test on
// a shared cluster whose steps make namespaces calls it first.
func (s *standard) deletedAtEnd(t *testing.T, names ...string) {
	kube := s.kube
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		for _, name := range names {
			if err := kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting namespace %s: %v", name, err)
			}
		}
		for _, name := range names {
			for {
				_, err := kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					break
				}
				if ctx.Err() != nil {
					t.Errorf("namespace %s still there 3 minutes after its deletion (%v)", name, err)
					return
				}
				time.Sleep(time.Second)
			}
		}
	})
}

// prefixWriter writes each line written to it to w, after prefix.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	for line := range strings.SplitSeq(strings.TrimRight(string(b), "\n"), "\n") {
		if _, err := fmt.Fprintf(p.w, "%s%s\n", p.prefix, line); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}
