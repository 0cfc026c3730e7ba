package channels

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/kos-sdn/kos/channels/internal/channelstest"
	"github.com/kos-sdn/kos/channels/lease"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// timeline records the events of several runs in the one order they
// happened.
type timeline struct {
	mu     sync.Mutex
	events []string // "<run> <type>"
}

func (tl *timeline) add(run string, e Event) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.events = append(tl.events, run+" "+string(e.Type))
}

func (tl *timeline) snapshot() []string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return append([]string(nil), tl.events...)
}

// checkNotInterleaved fails unless, between one run's Locked and Unlocked,
// the other run did nothing but wait.
func checkNotInterleaved(t *testing.T, events []string, runs ...string) {
	t.Helper()
	for _, run := range runs {
		locked := false
		for _, e := range events {
			switch e {
			case run + " Locked":
				locked = true
			case run + " Unlocked":
				locked = false
			default:
				if locked && e[:len(run)] != run && e[len(e)-len("Waiting"):] != "Waiting" {
					t.Errorf("%q happened while %s held the lease; timeline: %v", e, run, events)
				}
			}
		}
	}
}

func TestIntegrationConcurrentRunsDoNotInterleave(t *testing.T) {
	dir := t.TempDir()
	many := func(prefix string) string {
		var docs []string
		for i := range 20 {
			docs = append(docs, channelstest.ConfigMap("default", fmt.Sprintf("%s-%02d", prefix, i), "1"))
		}
		return channelstest.Manifest(docs...)
	}
	// Names unique to this run let the test run again on one cluster.
	firstName, secondName := "lease-first-"+rand.String(5), "lease-second-"+rand.String(5)
	first := channelstest.WriteChannel(t, dir, "first.yaml", channelstest.Release{Name: firstName, Version: "1.0.0", Manifest: many(firstName)})
	second := channelstest.WriteChannel(t, dir, "second.yaml", channelstest.Release{Name: secondName, Version: "1.0.0", Manifest: many(secondName)})

	// Run A holds the lease until run B reports that it waits for it, so the
	// two runs overlap for certain.
	tl := &timeline{}
	bWaiting := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	results := map[string]runResult{}
	var mu sync.Mutex
	start := func(name, loc string, onEvent func(Event)) {
		wg.Go(func() {
			res := runWith(t, newTestClient(t), ApplyOptions{Identity: "test-" + name, OnEvent: func(e Event) {
				tl.add(name, e)
				if onEvent != nil {
					onEvent(e)
				}
			}}, loc)
			mu.Lock()
			results[name] = res
			mu.Unlock()
		})
	}
	start("A", first, func(e Event) {
		if e.Type != EventLocked {
			return
		}
		select {
		case <-bWaiting:
		case <-time.After(30 * time.Second):
			t.Errorf("run B never reported waiting for the lease")
		}
	})
	// B starts once A holds the lease.
	waitForHolder(t, "test-A")
	start("B", second, func(e Event) {
		if e.Type == EventWaiting {
			once.Do(func() { close(bWaiting) })
		}
	})
	wg.Wait()

	for name, res := range results {
		if res.err != nil {
			t.Errorf("run %s: %v", name, res.err)
		}
	}
	events := tl.snapshot()
	want := []string{"A Locked", "B Waiting", "A Applied", "A Unlocked", "B Locked", "B Applied", "B Unlocked"}
	if diff := cmp.Diff(events, want); diff != "" {
		t.Errorf("timeline (-got +want):\n%s", diff)
	}
	checkNotInterleaved(t, events, "A", "B")
	for _, name := range []string{firstName, secondName} {
		if recordOf(t, "kube-system", name) == "" {
			t.Errorf("addon %s has no record", name)
		}
	}
}

func TestIntegrationConcurrentRunsOfOneChannelApplyOnce(t *testing.T) {
	dir := t.TempDir()
	addon := "lease-once-" + rand.String(5)
	loc := channelstest.WriteChannel(t, dir, "channel.yaml", channelstest.Release{Name: addon, Version: "1.0.0", Manifest: channelstest.ConfigMap("default", addon, "1")})
	tl := &timeline{}
	var wg sync.WaitGroup
	var errs [2]error
	for i, name := range []string{"C", "D"} {
		wg.Go(func() {
			res := runWith(t, newTestClient(t), ApplyOptions{OnEvent: func(e Event) { tl.add(name, e) }}, loc)
			errs[i] = res.err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("run %d: %v", i, err)
		}
	}
	events := tl.snapshot()
	checkNotInterleaved(t, events, "C", "D")
	applied := 0
	for _, e := range events {
		if e[2:] == string(EventApplied) {
			applied++
		}
	}
	// Both planned to install; the one that got the lease second read the
	// record again and found it applied (unless it planned after that).
	if applied != 1 {
		t.Errorf("%d runs applied the addon, want 1; timeline %v", applied, events)
	}
}

// waitForHolder waits until the channels Lease names holder.
func waitForHolder(t *testing.T, holder string) {
	t.Helper()
	poll.Until(t, 30*time.Second, "the lease names "+holder+" as its holder", func(ctx context.Context) error {
		l, err := kube(t).CoordinationV1().Leases(lease.Namespace).Get(ctx, lease.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != holder {
			return fmt.Errorf("holder %v", l.Spec.HolderIdentity)
		}
		return nil
	})
}

func TestIntegrationLeaseForbiddenFailsFast(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	k := kube(t)
	// The user may read namespaces, so it can plan, but not touch Leases.
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "test-channels-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list"}}},
	}
	if _, err := k.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-channels-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "channels-reader"}},
	}
	if _, err := k.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, cfg, err := env.NewUserKubeconfig("channels-reader")
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	loc := channelstest.WriteChannel(t, t.TempDir(), "channel.yaml", channelstest.Release{Name: "lease-forbidden", Version: "1.0.0", Manifest: channelstest.ConfigMap("default", "lease-forbidden", "1")})
	releases, err := Load(ctx, NewFetcher(), loc)
	if err != nil {
		t.Fatal(err)
	}
	// RBAC takes effect once the authorizer's informers see the binding.
	var plan *Plan
	poll.Until(t, 10*time.Second, "a namespace reader plans", func(ctx context.Context) error {
		var err error
		plan, err = c.Plan(ctx, releases)
		return err
	})

	began := time.Now()
	err = c.Apply(ctx, plan, ApplyOptions{})
	t.Logf("Apply: %v", err)
	if err == nil || !strings.Contains(err.Error(), "lease kube-system/channels") || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("Apply without rights on Leases: error %v, want one naming the lease and saying forbidden", err)
	}
	// Giving up takes a few requests, whose time follows the machine's
	// load: a figure (milliseconds on a quiet machine). A run that waited
	// instead would retry every retryPeriod until a lease duration (30 s)
	// passed, or forever; lease.RenewDeadline (18 s) stays below that.
	took := time.Since(began)
	t.Logf("figure lease-forbidden-give-up %.3f s", took.Seconds())
	if took > lease.RenewDeadline {
		t.Errorf("Apply took %s to give up, want it to fail fast", took)
	}
}
