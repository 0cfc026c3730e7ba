package channels

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/channels/internal/channelstest"
	"github.com/kos-sdn/kos/tools/testenv"
)

// write is one object write a run sent: the resource it went to ("" for
// the Namespace itself), and when it was sent and answered.
type write struct {
	resource, name string
	sent, answered time.Time
}

// writeLog records the writes a client sends into one namespace.
type writeLog struct {
	namespace string
	mu        sync.Mutex
	writes    []write
}

func (l *writeLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodPatch {
			return rt.RoundTrip(req)
		}
		w, ok := l.parse(req.URL.Path)
		if !ok {
			return rt.RoundTrip(req)
		}
		w.sent = time.Now()
		resp, err := rt.RoundTrip(req)
		w.answered = time.Now()
		l.mu.Lock()
		l.writes = append(l.writes, w)
		l.mu.Unlock()
		return resp, err
	})
}

// parse reads .../namespaces/NS (the Namespace) or
// .../namespaces/NS/RESOURCE/NAME.
func (l *writeLog) parse(path string) (write, bool) {
	_, rest, ok := strings.Cut(path, "/namespaces/"+l.namespace)
	if !ok {
		return write{}, false
	}
	if rest == "" {
		return write{name: l.namespace}, true
	}
	parts := strings.Split(strings.TrimPrefix(rest, "/"), "/")
	if len(parts) != 2 {
		return write{}, false
	}
	return write{resource: parts[0], name: parts[1]}, true
}

func (l *writeLog) all() []write {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]write(nil), l.writes...)
}

// newWriteLogClient is a Client whose writes into namespace are logged.
func newWriteLogClient(t *testing.T, namespace string) (*Client, *writeLog) {
	t.Helper()
	log := &writeLog{namespace: namespace}
	cfg := rest.CopyConfig(testenv.Shared(t).RESTConfig)
	cfg.Wrap(log.wrap)
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, log
}

// service is a ClusterIP Service, which the server gives an address (a
// write of its own).
func service(namespace, name string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: %s, namespace: %s}\nspec: {selector: {app: %s}, ports: [{port: 80}]}\n", name, namespace, name)
}

// serviceAccount is a ServiceAccount.
func serviceAccount(namespace, name string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: %s, namespace: %s}\n", name, namespace)
}

// TestIntegrationApplyInParallelKeepsTheWaves applies a release of many
// objects listed in no useful order, the Namespace last: the objects of a
// wave go out several at once, yet none is sent before its Namespace is
// answered, and no Deployment before every object of the wave before it.
func TestIntegrationApplyInParallelKeepsTheWaves(t *testing.T) {
	t.Parallel()
	const ns = "parallel-waves"
	c, log := newWriteLogClient(t, ns)
	var docs []string
	for i := range 12 {
		docs = append(docs, deployment(ns, fmt.Sprintf("d-%02d", i)))
		docs = append(docs, channelstest.ConfigMap(ns, fmt.Sprintf("cm-%02d", i), "1"))
		docs = append(docs, service(ns, fmt.Sprintf("svc-%02d", i)))
		docs = append(docs, serviceAccount(ns, fmt.Sprintf("sa-%02d", i)))
	}
	docs = append(docs, channelstest.Namespace(ns))
	ch := channelstest.WriteChannel(t, t.TempDir(), "waves.yaml", channelstest.Release{Name: "parallel-waves", Version: "1.0.0", Manifest: channelstest.Manifest(docs...)})
	if res := runWith(t, c, ApplyOptions{Parallelism: 8}, ch); res.err != nil {
		t.Fatalf("apply: %v", res.err)
	}

	writes := log.all()
	if len(writes) != len(docs) {
		t.Fatalf("the run wrote %d objects into %s, want %d", len(writes), ns, len(docs))
	}
	var namespace write
	var lastWave1 time.Time
	for _, w := range writes {
		switch w.resource {
		case "":
			namespace = w
		case "configmaps", "services", "serviceaccounts":
			if w.answered.After(lastWave1) {
				lastWave1 = w.answered
			}
		}
	}
	inFlight, most := 0, 0
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, w := range writes {
		if w.resource != "" && w.sent.Before(namespace.answered) {
			t.Errorf("%s/%s was sent before its Namespace was answered", w.resource, w.name)
		}
		if w.resource == "deployments" && w.sent.Before(lastWave1) {
			t.Errorf("Deployment %s was sent before the ConfigMaps, Services and ServiceAccounts were all answered", w.name)
		}
		edges = append(edges, edge{w.sent, 1}, edge{w.answered, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta < edges[j].delta
	})
	for _, e := range edges {
		inFlight += e.delta
		most = max(most, inFlight)
	}
	if most < 2 || most > 8 {
		t.Errorf("at most %d writes were in flight at once, want 2 to 8 (Parallelism 8)", most)
	}
	for _, resource := range []string{"configmaps", "services", "serviceaccounts", "deployments"} {
		n := 0
		for _, w := range writes {
			if w.resource == resource {
				n++
			}
		}
		if n != 12 {
			t.Errorf("the run wrote %d %s, want 12", n, resource)
		}
	}
}

// TestIntegrationApplyInParallelReportsFailuresInOrder applies a wave in
// which the server refuses two objects: the run applies every other object
// of the wave, sends nothing of the waves after it, and names the two
// refused objects in manifest order, the same on a second run.
func TestIntegrationApplyInParallelReportsFailuresInOrder(t *testing.T) {
	t.Parallel()
	const ns = "parallel-failures"
	c, log := newWriteLogClient(t, ns)
	// A ConfigMap key may not hold a space: the server refuses it.
	refused := func(name string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: %s}\ndata: {\"bad key\": x}\n", name, ns)
	}
	docs := []string{channelstest.Namespace(ns), deployment(ns, "after")}
	var want []string
	for i := range 30 {
		name := fmt.Sprintf("cm-%02d", i)
		if i == 4 || i == 21 {
			docs = append(docs, refused(name))
			continue
		}
		docs = append(docs, channelstest.ConfigMap(ns, name, "1"))
		want = append(want, name)
	}
	ch := channelstest.WriteChannel(t, t.TempDir(), "failures.yaml", channelstest.Release{Name: "parallel-failures", Version: "1.0.0", Manifest: channelstest.Manifest(docs...)})

	var messages []string
	for attempt := range 2 {
		res := runWith(t, c, ApplyOptions{Parallelism: 16}, ch)
		var applyErr *ApplyError
		if !errors.As(res.err, &applyErr) {
			t.Fatalf("run %d: error %v, want an *ApplyError", attempt, res.err)
		}
		msg := res.err.Error()
		first := strings.Index(msg, "ConfigMap "+ns+"/cm-04")
		second := strings.Index(msg, "ConfigMap "+ns+"/cm-21")
		if first < 0 || second < 0 || second < first {
			t.Errorf("run %d: error %q does not name cm-04 and then cm-21", attempt, msg)
		}
		messages = append(messages, msg)
	}
	if messages[0] != messages[1] {
		t.Errorf("the two runs failed differently:\n%s\n%s", messages[0], messages[1])
	}
	if diff := cmp.Diff(configMapNames(t, ns), want); diff != "" {
		t.Errorf("ConfigMaps after the failed runs (-got +want):\n%s", diff)
	}
	for _, w := range log.all() {
		if w.resource == "deployments" {
			t.Errorf("Deployment %s was sent although the wave before it failed", w.name)
		}
	}
}
