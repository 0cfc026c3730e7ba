package e2e

// This file holds the chaos step's churn: workers that create and delete
// attachments on every node as tenants do, the informer on attachments they
// read instead of polling, and what the step reads of their progress.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	kosinformers "github.com/kos-sdn/kos/components/generated/informers/externalversions"
	"github.com/kos-sdn/kos/tools/poll"
)

// attachmentWatch is an informer on the attachments of every namespace,
// which the chaos step reads instead of polling the API.
type attachmentWatch struct {
	store cache.Store
}

func newAttachmentWatch(t *testing.T, s *standard) *attachmentWatch {
	factory := kosinformers.NewSharedInformerFactory(s.network, 0)
	inf := factory.Network().V1alpha1().NetworkAttachments().Informer()
	// The informer stops with the step.
	factory.Start(t.Context().Done())
	if !cache.WaitForCacheSync(t.Context().Done(), inf.HasSynced) {
		t.Fatal("the attachments informer did not sync")
	}
	return &attachmentWatch{store: inf.GetStore()}
}

// ready returns nil when the attachment exists, has an address and its
// interface on its node, and no errors; else what it lacks.
func (w *attachmentWatch) ready(namespace, name string) error {
	obj, ok, err := w.store.GetByKey(namespace + "/" + name)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("attachment %s/%s does not exist", namespace, name)
	}
	return attachmentUsable(obj.(*networkv1alpha1.NetworkAttachment))
}

// attachmentUsable returns nil when att has an address and its interface on
// its node, and no errors; else what it lacks.
func attachmentUsable(att *networkv1alpha1.NetworkAttachment) error {
	st := att.Status
	if st.IPv4 == "" || st.IfcName == "" || st.HostIP == "" || len(st.Errors.IPAM) > 0 || len(st.Errors.Host) > 0 {
		return fmt.Errorf("attachment %s/%s on %s: ipv4 %q, ifcName %q, hostIP %q, errors %+v", att.Namespace, att.Name, att.Spec.Node, st.IPv4, st.IfcName, st.HostIP, st.Errors)
	}
	return nil
}

// churn creates and deletes attachments on every node, as tenants do, each
// node's by a worker of its own: create one (in blue and red by turns),
// wait until it is ready, delete the oldest beyond churnLive; every
// churnFlash-th is deleted at once instead. Failed writes are retried.
type churn struct {
	s      *standard
	watch  *attachmentWatch
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	workers []*churnWorker
	stats   churnStats
	// failures are the failed writes, each with its time, in order.
	failures []string
	// readied holds when each attachment that got ready was created, and
	// how long it took.
	readied []churnReady
}

type churnWorker struct {
	node string
	// lastReady is when the newest attachment that got ready was created.
	lastReady time.Time
	// pending is the attachment being waited for, if any.
	pending string
}

type churnReady struct {
	created time.Time
	took    time.Duration
}

// churnStats is what a churn did.
type churnStats struct {
	created, flashed, deleted, failedWrites int
}

func startChurn(s *standard, watch *attachmentWatch) *churn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &churn{s: s, watch: watch, cancel: cancel}
	for i, n := range s.env.Nodes {
		w := &churnWorker{node: n.Name}
		c.workers = append(c.workers, w)
		c.wg.Go(func() { c.run(ctx, i, w) })
	}
	return c
}

// stop stops the workers, waits for them, and returns what they did. It
// may be called more than once.
func (c *churn) stop() churnStats {
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

func (c *churn) run(ctx context.Context, worker int, w *churnWorker) {
	api := c.s.network.NetworkV1alpha1().NetworkAttachments(standardNamespace)
	var live []string
	// write retries a write until it passes or ctx ends.
	write := func(do func(ctx context.Context) error) bool {
		for ctx.Err() == nil {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := do(wctx)
			cancel()
			if err == nil {
				return true
			}
			if ctx.Err() != nil {
				return false
			}
			c.mu.Lock()
			c.stats.failedWrites++
			c.failures = append(c.failures, time.Now().Format("15:04:05.000")+" "+serverSaid(err))
			c.mu.Unlock()
			time.Sleep(churnPause)
		}
		return false
	}
	remove := func(name string) bool {
		if !write(func(ctx context.Context) error {
			err := api.Delete(ctx, name, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}) {
			return false
		}
		c.mu.Lock()
		c.stats.deleted++
		c.mu.Unlock()
		return true
	}
	subnets := []string{"blue", "red"}
	for n := 1; ctx.Err() == nil; n++ {
		name := fmt.Sprintf("%s%d-%d", churnPrefix, worker+1, n)
		att := &networkv1alpha1.NetworkAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       networkv1alpha1.NetworkAttachmentSpec{Node: w.node, Subnet: subnets[n%2]},
		}
		created := time.Now()
		if !write(func(ctx context.Context) error {
			_, err := api.Create(ctx, att, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				// An earlier try that timed out made it.
				return nil
			}
			return err
		}) {
			return
		}
		c.mu.Lock()
		c.stats.created++
		c.mu.Unlock()
		live = append(live, name)
		if n%churnFlash == 0 {
			if !remove(name) {
				return
			}
			live = live[:len(live)-1]
			c.mu.Lock()
			c.stats.flashed++
			c.mu.Unlock()
			continue
		}
		c.mu.Lock()
		w.pending = name
		c.mu.Unlock()
		for c.watch.ready(standardNamespace, name) != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		c.mu.Lock()
		w.pending = ""
		w.lastReady = created
		c.readied = append(c.readied, churnReady{created: created, took: time.Since(created)})
		c.mu.Unlock()
		for len(live) > churnLive {
			if !remove(live[0]) {
				return
			}
			live = live[1:]
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(churnPause):
		}
	}
}

// awaitProgress waits until every worker has had an attachment created
// after since become ready: new attachments work on every node again.
func (c *churn) awaitProgress(t *testing.T, since time.Time, timeout time.Duration) {
	t.Helper()
	poll.Until(t, timeout, "a new attachment ready on every node", func(context.Context) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, w := range c.workers {
			if !w.lastReady.After(since) {
				err := fmt.Errorf("no attachment of node %s created since the kill is ready", w.node)
				if w.pending != "" {
					err = fmt.Errorf("%w: %w", err, c.watch.ready(standardNamespace, w.pending))
				}
				return err
			}
		}
		return nil
	})
}

// failuresFrom returns the failed writes from the n-th on (failedWrites
// before), each with its time.
func (c *churn) failuresFrom(n int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.failures[min(n, len(c.failures)):])
}

// failedWrites returns how many of the churn's writes have failed so far.
func (c *churn) failedWrites() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats.failedWrites
}

// slowestSince returns the longest time an attachment created after since
// took to be ready.
func (c *churn) slowestSince(since time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var slowest time.Duration
	for _, r := range c.readied {
		if r.created.After(since) {
			slowest = max(slowest, r.took)
		}
	}
	return slowest
}
