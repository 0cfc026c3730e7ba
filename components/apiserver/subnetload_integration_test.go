package apiserver_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
)

// subnetLoad is a steady stream of KOS API requests, as tenants and
// controllers make them: every 50 ms (20 requests a second) it creates a
// Subnet, updates one it made (by resourceVersion, as a controller does), or
// lists a page of them, in turn, each request in a goroutine of its own so
// that one that waits does not slow the stream. It never retries: each
// failure is what a client without retries sees.
type subnetLoad struct {
	client *kosclient.Clientset
	ns     string
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	// next numbers the subnets (names, VNIs, CIDRs) across loads.
	next *atomic.Int64
	// idle are subnets the load made whose resourceVersion it knows and
	// which no request of its own is changing: an update takes one and
	// puts it back once answered, so that the load never conflicts with
	// itself.
	idle    []*v1alpha1.Subnet
	sent    map[string]int
	failed  map[string]int
	errors  []string
	started time.Time
}

// loadInterval is the time between two requests of a subnetLoad.
const loadInterval = 50 * time.Millisecond

// startSubnetLoad starts a load on client in namespace ns; next numbers its
// subnets and is shared by the loads on one etcd.
func startSubnetLoad(client *kosclient.Clientset, ns string, next *atomic.Int64) *subnetLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &subnetLoad{client: client, ns: ns, cancel: cancel, next: next,
		sent: map[string]int{}, failed: map[string]int{}, started: time.Now()}
	l.wg.Go(func() {
		tick := time.NewTicker(loadInterval)
		defer tick.Stop()
		for i := 0; ; i++ {
			op := [...]string{"create", "update", "list"}[i%3]
			l.wg.Go(func() { l.do(ctx, op) })
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return l
}

// do sends one request of kind op and records its outcome.
func (l *subnetLoad) do(ctx context.Context, op string) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	subnets := l.client.NetworkV1alpha1().Subnets(l.ns)
	var err error
	switch op {
	case "create":
		n := int(l.next.Add(1))
		s := newSubnet(l.ns, "load-"+strconv.Itoa(n), fmt.Sprintf("10.%d.%d.0/24", 100+n/256, n%256), uint32(100000+n))
		var got *v1alpha1.Subnet
		if got, err = subnets.Create(rctx, s, metav1.CreateOptions{}); err == nil {
			l.putIdle(got)
		}
	case "update":
		l.mu.Lock()
		if len(l.idle) == 0 {
			l.mu.Unlock()
			return
		}
		s := l.idle[0]
		l.idle = l.idle[1:]
		l.mu.Unlock()
		s = s.DeepCopy()
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		gen, _ := strconv.Atoi(s.Labels["load-generation"])
		s.Labels["load-generation"] = strconv.Itoa(gen + 1)
		var got *v1alpha1.Subnet
		if got, err = subnets.Update(rctx, s, metav1.UpdateOptions{}); err == nil {
			l.putIdle(got)
		}
	case "list":
		_, err = subnets.List(rctx, metav1.ListOptions{Limit: 50})
	}
	if ctx.Err() != nil {
		// The load ended under the request: not the server's doing.
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent[op]++
	if err != nil {
		kind := op + ": " + errorKind(err)
		l.failed[kind]++
		l.errors = append(l.errors, time.Now().Format("15:04:05.000")+" "+op+": "+err.Error())
	}
}

func (l *subnetLoad) putIdle(s *v1alpha1.Subnet) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.idle = append(l.idle, s)
}

// loadReport is what a subnetLoad saw.
type loadReport struct {
	took time.Duration
	// sent counts the answered requests by kind (create, update, list).
	sent map[string]int
	// failed counts the failed requests by "<kind>: <errorKind>".
	failed map[string]int
	// errors are the failures, each with its time.
	errors []string
}

// stop ends the load, waits for its requests in flight, and returns what it
// saw.
func (l *subnetLoad) stop() loadReport {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return loadReport{took: time.Since(l.started), sent: l.sent, failed: l.failed, errors: l.errors}
}

// total is how many requests failed.
func (r loadReport) total() int {
	n := 0
	for _, c := range r.failed {
		n += c
	}
	return n
}

// String is a line of figures: requests by kind, then failures by kind.
func (r loadReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d creates, %d updates, %d lists in %s", r.sent["create"], r.sent["update"], r.sent["list"], r.took.Round(100*time.Millisecond))
	if len(r.failed) == 0 {
		b.WriteString("; none failed")
	}
	for _, kind := range slices.Sorted(maps.Keys(r.failed)) {
		fmt.Fprintf(&b, "; %d × %s", r.failed[kind], kind)
	}
	return b.String()
}

// errorKind names the kind of a failed request: its HTTP status and what
// etcd or gRPC said, without the parts that differ between two requests.
func errorKind(err error) string {
	msg := err.Error()
	for _, mark := range []string{"etcdserver: ", "desc = "} {
		if i := strings.LastIndex(msg, mark); i >= 0 {
			msg = msg[i:]
			break
		}
	}
	if len(msg) > 90 {
		msg = msg[:90]
	}
	switch {
	case apierrors.IsAlreadyExists(err):
		msg = "AlreadyExists"
	case apierrors.IsConflict(err):
		msg = "Conflict"
	}
	return fmt.Sprintf("%d %s", statusCode(err), msg)
}

// logLoad logs r's figures under name, and each failure.
func logLoad(t *testing.T, name string, r loadReport) {
	t.Helper()
	t.Logf("%s: %s", name, r)
	for _, e := range r.errors {
		t.Logf("  %s", e)
	}
}
