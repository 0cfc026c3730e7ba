package channels

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/channels/api"
	"github.com/kos-sdn/kos/tools/testenv"
)

// testRelease is one entry of a channel a test writes; its manifest is
// written next to the channel.
type testRelease struct {
	Name     string
	Version  string
	ID       string
	Manifest string
	// Namespace holds the record; empty means the default.
	Namespace string
	// Hash overrides the manifest's hash; "none" leaves it out.
	Hash               string
	Prune              *api.PruneSpec
	NeedsRollingUpdate api.NeedsRollingUpdate
	// KubernetesVersion and UpgradesFrom are the entry's, when set.
	KubernetesVersion string
	UpgradesFrom      string
}

// selectorOf is the selector writeChannel gives an addon.
func selectorOf(name string) map[string]string {
	return map[string]string{"k8s-addon": name + ".addons.k8s.io"}
}

// writeChannel writes a channel of releases and their manifests into dir and
// returns the channel's location.
func writeChannel(t *testing.T, dir, file string, releases ...testRelease) string {
	t.Helper()
	ch := api.Addons{
		TypeMeta:   metav1.TypeMeta{Kind: api.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: strings.TrimSuffix(file, ".yaml")},
	}
	for _, r := range releases {
		manifest := fmt.Sprintf("%s-%s-%s.yaml", r.Name, r.Version, r.ID)
		if err := os.WriteFile(filepath.Join(dir, manifest), []byte(r.Manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		hash := HashManifest([]byte(r.Manifest))
		switch r.Hash {
		case "":
		case "none":
			hash = ""
		default:
			hash = r.Hash
		}
		spec := &api.AddonSpec{
			Name:               &r.Name,
			Version:            r.Version,
			ID:                 r.ID,
			Selector:           selectorOf(r.Name),
			Manifest:           &manifest,
			ManifestHash:       hash,
			Prune:              r.Prune,
			NeedsRollingUpdate: r.NeedsRollingUpdate,
			KubernetesVersion:  r.KubernetesVersion,
			UpgradesFrom:       r.UpgradesFrom,
		}
		if r.Namespace != "" {
			spec.Namespace = &r.Namespace
		}
		ch.Spec.Addons = append(ch.Spec.Addons, spec)
	}
	data, err := yaml.Marshal(ch)
	if err != nil {
		t.Fatal(err)
	}
	location := filepath.Join(dir, file)
	if err := os.WriteFile(location, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return location
}

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
