// Package daemon runs channels as kOps runs its channels on every
// control-plane node: a Daemon applies its channels again and again (a
// pass: load, plan, apply what is pending, label the node), checks the
// objects of the installed addons for drift and reports or repairs it
// (drift.go: pure planning functions, then a repair step under the
// channels Lease; driftlist.go lists what changed, driftowners.go finds
// who changed it, driftreport.go reports it), and serves /healthz, /readyz and Prometheus metrics.
// It never rolls a release back on its own: an addon left behind its
// channels is reported (metric channels_addon_blocked, a Warning Event)
// until the operator consents (Options.AllowDowngrade).
package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/channels/lease"
)

// maxRetryInterval bounds the wait between passes until the first pass
// succeeds.
const maxRetryInterval = 5 * time.Second

// DefaultFullCheckEvery is how often, in passes, a daemon re-applies every
// object of the installed addons instead of checking them cheaply.
const DefaultFullCheckEvery = 10

// Options configure a Daemon.
type Options struct {
	// Locations are the channels, read again on every pass.
	Locations []string
	// Interval is the time between passes once a pass has succeeded; until
	// then a failed pass is retried after min(5s, Interval).
	Interval time.Duration
	// Apply tunes the applies of each pass. Its Fetcher reads the channels
	// too.
	Apply channels.ApplyOptions
	// RESTConfig, when set, is called at the start of every pass for the
	// configuration of that pass's clients, as kOps's channels builds its
	// clients afresh each pass: a client certificate or token rotated in
	// the kubeconfig is then used from the next pass on, without a restart.
	// When nil, every pass uses the configuration given to New.
	RESTConfig func() (*rest.Config, error)
	// NodeName, when set, names the node whose labels every pass sets to
	// NodeLabels, as kOps's channels does on the control-plane node it runs
	// on (the kubelet may not set node-role labels on its own node).
	NodeName   string
	NodeLabels map[string]string
	// NodeLabelKeys are labels the node must have with any value, as kOps
	// passes node-role labels as bare keys: a pass adds one that is
	// missing with an empty value, and leaves the value of one that is
	// there alone.
	NodeLabelKeys []string
	// FullCheckEvery makes every Nth pass re-apply every object of the
	// installed addons; 0 means DefaultFullCheckEvery. The passes between
	// only list the objects' metadata and re-apply what changed (see Drift).
	FullCheckEvery int
	// Drift says what a pass does with objects of the installed addons
	// that someone changed or deleted; empty means DefaultDrift (report).
	// Objects may say otherwise (DriftAnnotation).
	Drift DriftMode
	// AllowDowngrade is the operator's consent for the daemon to go back:
	// to apply a release older than the installed one, or older than a
	// release a run left pending (failed or not). Without it the daemon
	// never rolls back; it reports the addon and waits.
	AllowDowngrade bool
	// OnPass, when set, is called after each pass with its result.
	OnPass func(PassResult)
}

// PassResult is what one pass of a daemon did.
type PassResult struct {
	// Number counts passes from 1.
	Number int
	// Duration is how long the pass took.
	Duration time.Duration
	// Err is nil when the pass fully succeeded.
	Err error
	// Applied and Failed name the addons applied and failed.
	Applied, Failed []string
	// Drift is what the drift check found and repaired.
	Drift DriftResult
	// Blocked, when not nil, is a *channels.BlockedError naming the addons the pass
	// left behind the channels until someone acts (channels.Plan.Problems); Err
	// holds it too. The daemon then keeps its Interval: passing again
	// sooner changes nothing.
	Blocked error
}

// Daemon applies channels again and again: kOps runs its channels this way
// on every control-plane node. It is ready while its last pass fully
// succeeded.
type Daemon struct {
	config *rest.Config
	// client is the client of the pass under way, built afresh
	// at its start; only Run's goroutine (or Pass's caller) uses it.
	client  *channels.Client
	opts    Options
	metrics *Metrics
	drift   *driftState
	// blocked holds, by addon, why the last pass left it behind the
	// channels, so that an Event is posted when that starts or changes.
	blocked map[string]blockedState
	// last is the result of the last pass, read by the health handlers.
	last    atomic.Pointer[PassResult]
	settled bool
	passes  int
}

// New returns a daemon on the cluster of config.
func New(config *rest.Config, opts Options) (*Daemon, error) {
	if opts.Interval <= 0 {
		return nil, errors.New("the interval between passes must be positive")
	}
	if len(opts.Locations) == 0 {
		return nil, errors.New("give at least one channel location")
	}
	if opts.Apply.Fetcher == nil {
		opts.Apply.Fetcher = channels.NewFetcher()
	}
	if opts.Apply.Identity == "" {
		opts.Apply.Identity = lease.NewIdentity()
	}
	if opts.FullCheckEvery <= 0 {
		opts.FullCheckEvery = DefaultFullCheckEvery
	}
	if opts.Drift == "" {
		opts.Drift = DefaultDrift
	}
	if _, err := ParseDriftMode(string(opts.Drift)); err != nil {
		return nil, err
	}
	metrics := NewMetrics()
	d := &Daemon{config: config, opts: opts, metrics: metrics, drift: newDriftState(metrics), blocked: map[string]blockedState{}}
	// Refuse a configuration no client can be built from now, not at the
	// first pass.
	if err := d.connect(config); err != nil {
		return nil, err
	}
	return d, nil
}

// connect builds the clients of a pass from config.
func (d *Daemon) connect(config *rest.Config) error {
	c, err := channels.NewClient(config)
	if err != nil {
		return err
	}
	d.client = c
	return nil
}

// Metrics returns the daemon's metrics.
func (d *Daemon) Metrics() *Metrics { return d.metrics }

// Ready reports whether the last pass fully succeeded.
func (d *Daemon) Ready() bool {
	last := d.last.Load()
	return last != nil && last.Err == nil
}

// Run runs passes until ctx is cancelled, and then returns nil: it stops
// between passes, or in a pass at its next request. A pass in which
// anything failed is retried after min(5s, Interval) until one fully
// succeeds, and after Interval from then on.
func (d *Daemon) Run(ctx context.Context) error {
	retry := min(maxRetryInterval, d.opts.Interval)
	for {
		res := d.Pass(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if d.opts.OnPass != nil {
			d.opts.OnPass(res)
		}
		wait := d.opts.Interval
		if !d.settled {
			wait = retry
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Pass runs one pass: it reads discovery afresh, loads the channels,
// plans, applies what is pending, labels the node, and checks the
// installed addons for drift, reporting or repairing it (Options.Drift).
func (d *Daemon) Pass(ctx context.Context) PassResult {
	d.passes++
	res := PassResult{Number: d.passes}
	began := time.Now()
	err := d.pass(ctx, &res)
	res.Err = errors.Join(err, res.Blocked)
	res.Duration = time.Since(began)
	// A pass cut short by ctx says nothing about the cluster. /readyz
	// changes before the metrics do, so one who saw the metrics change
	// finds it changed.
	if ctx.Err() == nil {
		d.last.Store(&res)
	}
	d.metrics.observePass(res, began)
	if err == nil {
		d.settled = true
	}
	if res.Err == nil {
		return res
	}
	klog.FromContext(ctx).V(1).Info("Pass failed", "pass", res.Number, "err", res.Err)
	return res
}

func (d *Daemon) pass(ctx context.Context, res *PassResult) error {
	// Fresh clients each pass: credentials rotate, and CRDs and aggregated
	// APIs come and go (the new clients read discovery afresh). client-go
	// shares transports between clients of equal TLS configuration, so
	// this opens no new connections while the credentials stay the same.
	if d.opts.RESTConfig != nil {
		cfg, err := d.opts.RESTConfig()
		if err != nil {
			return err
		}
		d.config = cfg
	}
	if err := d.connect(d.config); err != nil {
		return err
	}
	c := d.client
	var releases []*channels.Addon
	for _, loc := range d.opts.Locations {
		got, err := channels.Load(ctx, d.opts.Apply.Fetcher, loc)
		if err != nil {
			return err
		}
		releases = append(releases, got...)
	}
	plan, err := c.PlanWith(ctx, releases, d.decideOptions())
	if err != nil {
		return err
	}
	var errs []error
	res.Blocked = plan.Problems()
	if err := d.reportBlocked(ctx, plan); err != nil {
		errs = append(errs, err)
	}
	if len(plan.Pending()) > 0 {
		failed := map[string]bool{}
		err := c.Apply(ctx, plan, d.opts.Apply)
		var applyErr *channels.ApplyError
		if errors.As(err, &applyErr) {
			for _, f := range applyErr.Failed {
				failed[f.Addon] = true
				res.Failed = append(res.Failed, f.Addon)
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
		if err == nil || applyErr != nil {
			for _, it := range plan.Pending() {
				if !failed[it.Addon.Name] {
					res.Applied = append(res.Applied, it.Addon.Name)
				}
			}
		}
		// What was applied is checked afresh by the drift check below.
		for _, it := range plan.Pending() {
			d.drift.forget(it.Addon.Name)
		}
	}
	if d.opts.NodeName != "" {
		if err := labelNode(ctx, c.Kube, d.opts.NodeName, d.opts.NodeLabels, d.opts.NodeLabelKeys); err != nil {
			errs = append(errs, err)
		}
	}
	full := (res.Number-1)%d.opts.FullCheckEvery == 0
	drift, err := d.checkDrift(ctx, plan, full)
	res.Drift = drift
	if err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// labelNode sets labels on a node with a merge patch, unless it has them,
// and adds each of keys it lacks with an empty value.
func labelNode(ctx context.Context, kube kubernetes.Interface, name string, labels map[string]string, keys []string) error {
	if len(labels) == 0 && len(keys) == 0 {
		return nil
	}
	node, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading node %s to label it: %w", name, err)
	}
	missing := map[string]string{}
	for k, v := range labels {
		if got, ok := node.Labels[k]; !ok || got != v {
			missing[k] = v
		}
	}
	for _, k := range keys {
		if _, ok := node.Labels[k]; !ok {
			if _, set := labels[k]; !set {
				missing[k] = ""
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": missing}})
	if err != nil {
		return fmt.Errorf("encoding the labels of node %s: %w", name, err)
	}
	_, err = kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: channels.FieldManager})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("labelling node %s: it does not exist; check --node-name", name)
	}
	if err != nil {
		return fmt.Errorf("labelling node %s: %w", name, err)
	}
	return nil
}

// HealthHandler serves /healthz, which answers while the daemon runs (a
// liveness check), and /readyz, which answers 200 while the last pass fully
// succeeded and 503 with that pass's error otherwise (a readiness check, as
// the readiness probe of kOps's kops-channels pod reads it).
func (d *Daemon) HealthHandler() http.Handler {
	mux := http.NewServeMux()
	d.handleHealth(mux)
	return mux
}

// Handler serves what HealthHandler serves and Prometheus /metrics.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	d.handleHealth(mux)
	mux.Handle("/metrics", d.metrics.Handler())
	return mux
}

func (d *Daemon) handleHealth(mux *http.ServeMux) {
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		last := d.last.Load()
		switch {
		case last == nil:
			http.Error(w, "no pass has finished yet", http.StatusServiceUnavailable)
		case last.Err != nil:
			http.Error(w, fmt.Sprintf("pass %d failed: %v", last.Number, last.Err), http.StatusServiceUnavailable)
		default:
			fmt.Fprintf(w, "ok: pass %d succeeded\n", last.Number)
		}
	})
}

// decideOptions are the rules of the daemon's plans: it never goes back on
// its own (Unattended), only with the operator's consent.
func (d *Daemon) decideOptions() channels.DecideOptions {
	return channels.DecideOptions{AllowDowngrade: d.opts.AllowDowngrade, Unattended: true}
}

// reportBlocked sets the metric channels_addon_blocked for every addon the
// plan leaves behind its channels, and posts a Warning Event on the
// addon's record namespace when an addon becomes blocked or its reason
// changes; an addon no longer blocked loses its series.
func (d *Daemon) reportBlocked(ctx context.Context, plan *channels.Plan) error {
	now := map[string]blockedState{}
	var errs []error
	for _, b := range plan.Blocked() {
		st := blockedState{kind: b.Kind, message: b.Err.Error()}
		d.metrics.setBlocked(b.Name, b.Kind, true)
		if was, ok := d.blocked[b.Name]; ok && was == st {
			now[b.Name] = st
			continue
		}
		klog.FromContext(ctx).Info("Addon left behind its channels", "addon", b.Name, "reason", b.Kind, "message", st.message)
		if err := postBlockedEvent(ctx, d.client.Kube, d.opts.Apply.Identity, b); err != nil {
			// Not remembered: the next pass posts it again.
			errs = append(errs, err)
			st.message = ""
		}
		now[b.Name] = st
	}
	for name, was := range d.blocked {
		if st, ok := now[name]; !ok || st.kind != was.kind {
			d.metrics.setBlocked(name, was.kind, false)
		}
	}
	d.blocked = now
	return errors.Join(errs...)
}

// blockedState is why an addon was blocked at the last pass.
type blockedState struct {
	kind, message string
}

// postBlockedEvent posts a Warning Event on the record namespace of an
// addon that a plan leaves behind its channels; its reason is the kind of
// block (NoReleaseFits, UpgradePathRefused, RollbackRefused). Events of a
// Namespace, which is cluster-scoped, go to the default namespace, where
// kubectl looks for them.
func postBlockedEvent(ctx context.Context, kube kubernetes.Interface, instance string, b channels.BlockedAddon) error {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{GenerateName: b.Namespace + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject:      corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: b.Namespace},
		Reason:              b.Kind,
		Message:             fmt.Sprintf("addon %s: %v", b.Name, b.Err),
		Type:                corev1.EventTypeWarning,
		Source:              corev1.EventSource{Component: channels.FieldManager},
		ReportingController: channels.FieldManager,
		ReportingInstance:   instance,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
	}
	if _, err := kube.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("posting the event of blocked addon %s: %w", b.Name, err)
	}
	return nil
}
