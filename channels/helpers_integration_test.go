package channels

import (
	"context"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/tools/testenv"
)

// runResult is what one run did.
type runResult struct {
	plan   *Plan
	events []Event
	err    error
}

// of returns the messages of the events of one type, sorted.
func (r runResult) of(t EventType) []string {
	var out []string
	for _, e := range r.events {
		if e.Type == t {
			out = append(out, e.String())
		}
	}
	sort.Strings(out)
	return out
}

// run loads the channels, plans and applies, as `channels apply channel
// --yes` does.
func run(t *testing.T, c *Client, locations ...string) runResult {
	t.Helper()
	return runWith(t, c, ApplyOptions{}, locations...)
}

func runWith(t *testing.T, c *Client, opts ApplyOptions, locations ...string) runResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var releases []*Addon
	for _, loc := range locations {
		got, err := Load(ctx, NewFetcher(), loc)
		if err != nil {
			t.Fatalf("Load(%s): %v", loc, err)
		}
		releases = append(releases, got...)
	}
	plan, err := c.Plan(ctx, releases)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	var res runResult
	res.plan = plan
	user := opts.OnEvent
	opts.OnEvent = func(e Event) {
		res.events = append(res.events, e)
		if user != nil {
			user(e)
		}
	}
	res.err = c.Apply(ctx, plan, opts)
	return res
}

// newTestClient is a Client on the test control plane.
func newTestClient(t *testing.T) *Client {
	t.Helper()
	env := testenv.Shared(t)
	c, err := NewClient(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// kube is a clientset for checking what is on the cluster.
func kube(t *testing.T) kubernetes.Interface {
	t.Helper()
	env := testenv.Shared(t)
	k, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// recordOf returns the raw install record of an addon, "" when none.
func recordOf(t *testing.T, namespace, name string) string {
	t.Helper()
	ns, err := kube(t).CoreV1().Namespaces().Get(context.Background(), namespace, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return ns.Annotations[AnnotationPrefix+name]
}

// configMapNames lists the names of the ConfigMaps of a namespace.
func configMapNames(t *testing.T, namespace string) []string {
	t.Helper()
	list, err := kube(t).CoreV1().ConfigMaps(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, cm := range list.Items {
		if cm.Name == "kube-root-ca.crt" || cm.DeletionTimestamp != nil {
			continue
		}
		out = append(out, cm.Name)
	}
	sort.Strings(out)
	return out
}

// requestLog records the requests a client makes.
type requestLog struct {
	mu   sync.Mutex
	reqs []string
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		l.mu.Lock()
		l.reqs = append(l.reqs, req.Method+" "+req.URL.Path)
		l.mu.Unlock()
		return rt.RoundTrip(req)
	})
}

func (l *requestLog) requests() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.reqs...)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// newCountingClient is a Client whose requests are logged.
func newCountingClient(t *testing.T) (*Client, *requestLog) {
	t.Helper()
	env := testenv.Shared(t)
	log := &requestLog{}
	cfg := rest.CopyConfig(env.RESTConfig)
	cfg.Wrap(log.wrap)
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, log
}
