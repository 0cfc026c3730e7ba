package kubectlkos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"

	"github.com/kos-sdn/kos/components/agent/api"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
)

// Where check's scratch network lives: a Subnet of probeCIDR on the
// highest VNI no Subnet uses, labelled api.ProbeLabel so that an operator can
// find what an interrupted run left.
const (
	probeCIDR      = "172.31.254.0/24"
	maxVNI         = 2097151
	cleanupTimeout = time.Minute
)

// prober reaches the probes of the agents. The real one is the agents'
// debug endpoints (agentProber); tests use one in memory.
type prober interface {
	// Served returns an error wrapping errNotServed when the agent of node
	// does not serve probes.
	Served(ctx context.Context, node string) error
	Start(ctx context.Context, node string, att *v1alpha1.NetworkAttachment) error
	Check(ctx context.Context, node string, req api.ProbeCheckRequest) (api.ProbeCheckResult, error)
	Stop(ctx context.Context, node string, att *v1alpha1.NetworkAttachment) error
}

// PairResult is what the probe on one node found of the probe on another.
type PairResult struct {
	From   string               `json:"from"`
	To     string               `json:"to"`
	Result api.ProbeCheckResult `json:"result"`
	// Error is why the pair could not be checked at all.
	Error string `json:"error,omitempty"`
}

// Passed reports whether every check of the pair passed.
func (p PairResult) Passed() bool {
	return p.Error == "" && p.Result.Ping.OK && p.Result.FullSizePing.OK && p.Result.TCP.OK
}

// Name names the pair as the table and the error do: "from → to".
func (p PairResult) Name() string { return p.From + " → " + p.To }

// datapathCheck makes a scratch network, puts a probe on every node and
// checks every ordered pair of nodes.
type datapathCheck struct {
	kube   kubernetes.Interface
	kos    kosclient.Interface
	probes prober
	// namespace is where the scratch network goes; empty creates a
	// scratch namespace and deletes it after.
	namespace string
	timeout   time.Duration
	// poll is how often readiness is read.
	poll time.Duration
}

// run checks every ordered pair of nodes and returns the pairs sorted.
// Whatever it created it deletes before it returns, also when ctx is
// cancelled (Ctrl-C) or a step failed: the deletes run on a context of
// their own.
func (d *datapathCheck) run(ctx context.Context, nodes []string) (results []PairResult, err error) {
	if len(nodes) < 2 {
		return nil, fmt.Errorf("%d nodes with an agent: a datapath check needs two", len(nodes))
	}
	if err := d.probes.Served(ctx, nodes[0]); err != nil {
		return nil, err
	}
	var undo []func(context.Context) error
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		var errs []error
		for i := len(undo) - 1; i >= 0; i-- {
			if e := undo[i](cctx); e != nil && !apierrors.IsNotFound(e) {
				errs = append(errs, e)
			}
		}
		if len(errs) > 0 {
			err = errors.Join(err, fmt.Errorf("cleaning up the scratch network (objects labelled %s): %w", api.ProbeLabel, errors.Join(errs...)))
		}
	}()

	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	labels := map[string]string{api.ProbeLabel: "true"}
	ns := d.namespace
	if ns == "" {
		created, err := d.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "kos-check-", Labels: labels}}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("creating a scratch namespace: %w", err)
		}
		ns = created.Name
		undo = append(undo, func(ctx context.Context) error {
			return d.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		})
	}
	vni, err := d.freeVNI(ctx)
	if err != nil {
		return nil, err
	}
	subnet, err := d.kos.NetworkV1alpha1().Subnets(ns).Create(ctx, &v1alpha1.Subnet{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kos-check-", Labels: labels},
		Spec:       v1alpha1.SubnetSpec{IPv4: probeCIDR, VNI: vni},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating the scratch Subnet in namespace %s: %w", ns, err)
	}
	// Attachments go before their Subnet: a Subnet in use cannot be
	// deleted, and the server may count a deleted attachment a moment
	// longer (409 Conflict, "subnet in use").
	undo = append(undo, func(ctx context.Context) error {
		var last error
		err := wait.PollUntilContextCancel(ctx, d.poll, true, func(ctx context.Context) (bool, error) {
			last = d.kos.NetworkV1alpha1().Subnets(ns).Delete(ctx, subnet.Name, metav1.DeleteOptions{})
			return !apierrors.IsConflict(last), nil
		})
		if err != nil && last != nil {
			return fmt.Errorf("deleting Subnet %s/%s: %w", ns, subnet.Name, last)
		}
		return last
	})
	atts := make([]*v1alpha1.NetworkAttachment, len(nodes))
	for i, node := range nodes {
		att, err := d.kos.NetworkV1alpha1().NetworkAttachments(ns).Create(ctx, &v1alpha1.NetworkAttachment{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "kos-check-", Labels: labels},
			Spec:       v1alpha1.NetworkAttachmentSpec{Node: node, Subnet: subnet.Name},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("creating the probe attachment of node %s: %w", node, err)
		}
		undo = append(undo, func(ctx context.Context) error {
			return d.kos.NetworkV1alpha1().NetworkAttachments(ns).Delete(ctx, att.Name, metav1.DeleteOptions{})
		})
		atts[i] = att
	}
	for i := range atts {
		if atts[i], err = d.awaitReady(ctx, atts[i]); err != nil {
			return nil, err
		}
		att := atts[i]
		if err := d.startProbe(ctx, att); err != nil {
			return nil, fmt.Errorf("starting the probe on node %s: %w", att.Spec.Node, err)
		}
		undo = append(undo, func(ctx context.Context) error {
			return d.probes.Stop(ctx, att.Spec.Node, att)
		})
	}
	return d.checkPairs(ctx, atts), nil
}

// checkPairs asks each probe to reach every other one.
func (d *datapathCheck) checkPairs(ctx context.Context, atts []*v1alpha1.NetworkAttachment) []PairResult {
	var results []PairResult
	for _, from := range atts {
		for _, to := range atts {
			if from == to {
				continue
			}
			r := PairResult{From: from.Spec.Node, To: to.Spec.Node}
			mtu := int(min(from.Status.MTU, to.Status.MTU))
			res, err := d.probes.Check(ctx, from.Spec.Node, api.ProbeCheckRequest{
				Namespace: from.Namespace, Name: from.Name, To: to.Status.IPv4, MTU: mtu, TimeoutSeconds: 2,
			})
			if err != nil {
				r.Error = err.Error()
			}
			r.Result = res
			results = append(results, r)
		}
	}
	slices.SortFunc(results, func(a, b PairResult) int {
		if c := strings.Compare(a.From, b.From); c != 0 {
			return c
		}
		return strings.Compare(a.To, b.To)
	})
	return results
}

// freeVNI returns the highest VNI no Subnet uses.
func (d *datapathCheck) freeVNI(ctx context.Context) (uint32, error) {
	list, err := d.kos.NetworkV1alpha1().Subnets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("listing Subnets to find a free VNI: %w", err)
	}
	used := map[uint32]bool{}
	for _, s := range list.Items {
		used[s.Spec.VNI] = true
	}
	for vni := uint32(maxVNI); vni > 0; vni-- {
		if !used[vni] {
			return vni, nil
		}
	}
	return 0, errors.New("no free VNI")
}

// startProbe starts att's probe on its node. The agent sees the
// attachment through a cache of its own, which may be a moment behind the
// Ready the API showed (awaitReady): while it answers so (notYet), the
// start is tried again, until ctx ends.
func (d *datapathCheck) startProbe(ctx context.Context, att *v1alpha1.NetworkAttachment) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, d.poll, true, func(ctx context.Context) (bool, error) {
		last = d.probes.Start(ctx, att.Spec.Node, att)
		if notYet(last) {
			return false, nil
		}
		return last == nil, last
	})
	if err != nil && last != nil && !errors.Is(err, last) {
		return fmt.Errorf("%w (%w)", last, err)
	}
	return err
}

// awaitReady waits until att has an address, an MTU and is Ready.
func (d *datapathCheck) awaitReady(ctx context.Context, att *v1alpha1.NetworkAttachment) (*v1alpha1.NetworkAttachment, error) {
	var got *v1alpha1.NetworkAttachment
	err := wait.PollUntilContextCancel(ctx, d.poll, true, func(ctx context.Context) (bool, error) {
		a, err := d.kos.NetworkV1alpha1().NetworkAttachments(att.Namespace).Get(ctx, att.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil // transient: the deadline says when to stop
		}
		got = a
		return a.Status.IPv4 != "" && a.Status.MTU > 0 && meta.IsStatusConditionTrue(a.Status.Conditions, v1alpha1.NetworkAttachmentReady), nil
	})
	if err != nil {
		why := "no answer"
		if got != nil {
			why = fmt.Sprintf("address %q, MTU %d, errors %+v", got.Status.IPv4, got.Status.MTU, got.Status.Errors)
		}
		return nil, fmt.Errorf("the probe attachment %s/%s of node %s did not become Ready within %s (%s): %w", att.Namespace, att.Name, att.Spec.Node, d.timeout, why, err)
	}
	return got, nil
}

// failedPairs returns the names of the pairs that failed a check.
func failedPairs(results []PairResult) []string {
	var names []string
	for _, r := range results {
		if !r.Passed() {
			names = append(names, r.Name())
		}
	}
	return names
}

var pairColumns = []metav1.TableColumnDefinition{
	{Name: "From", Type: "string"},
	{Name: "To", Type: "string"},
	{Name: "Ping", Type: "string"},
	{Name: "Full-size ping", Type: "string", Description: "A ping of the network's MTU with Don't Fragment set"},
	{Name: "TCP", Type: "string"},
	{Name: "Detail", Type: "string"},
}

// printPairs writes one row per ordered pair of nodes.
func printPairs(w io.Writer, results []PairResult, noHeaders bool) error {
	table := &metav1.Table{ColumnDefinitions: pairColumns}
	for _, r := range results {
		var details []string
		for _, o := range []api.ProbeOutcome{r.Result.Ping, r.Result.FullSizePing, r.Result.TCP} {
			if !o.OK && o.Detail != "" {
				details = append(details, o.Detail)
			}
		}
		if r.Error != "" {
			details = append([]string{r.Error}, details...)
		}
		table.Rows = append(table.Rows, metav1.TableRow{Cells: []any{
			r.From, r.To, outcome(r.Result.Ping, r.Error), outcome(r.Result.FullSizePing, r.Error), outcome(r.Result.TCP, r.Error), summarize(details, 100),
		}})
	}
	return printers.NewTablePrinter(printers.PrintOptions{NoHeaders: noHeaders}).PrintObj(table, w)
}

func outcome(o api.ProbeOutcome, pairErr string) string {
	switch {
	case pairErr != "":
		return "-"
	case o.OK:
		return "ok"
	}
	return "FAIL"
}

// agentProber is prober through the agents' debug endpoints, with the
// user's credentials (create on nodes/kos-debug, as trace).
type agentProber struct{ agents *agents }

func (p agentProber) pod(ctx context.Context, node string) (*corev1.Pod, error) {
	return p.agents.onNode(ctx, node)
}

// Served implements prober.
func (p agentProber) Served(ctx context.Context, node string) error {
	pod, err := p.pod(ctx, node)
	if err != nil {
		return err
	}
	_, err = p.agents.get(ctx, pod, api.PathProbes)
	return err
}

// Start implements prober.
func (p agentProber) Start(ctx context.Context, node string, att *v1alpha1.NetworkAttachment) error {
	pod, err := p.pod(ctx, node)
	if err != nil {
		return err
	}
	body, err := json.Marshal(api.ProbeRequest{Namespace: att.Namespace, Name: att.Name})
	if err != nil {
		return err
	}
	_, err = p.agents.post(ctx, pod, api.PathProbes, body)
	return err
}

// Check implements prober.
func (p agentProber) Check(ctx context.Context, node string, req api.ProbeCheckRequest) (api.ProbeCheckResult, error) {
	var res api.ProbeCheckResult
	pod, err := p.pod(ctx, node)
	if err != nil {
		return res, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return res, err
	}
	raw, err := p.agents.post(ctx, pod, api.PathProbeCheck, body)
	if err != nil {
		return res, err
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return res, fmt.Errorf("decoding the agent's answer: %w", err)
	}
	return res, nil
}

// Stop implements prober.
func (p agentProber) Stop(ctx context.Context, node string, att *v1alpha1.NetworkAttachment) error {
	pod, err := p.pod(ctx, node)
	if err != nil {
		return err
	}
	q := url.Values{"namespace": {att.Namespace}, "name": {att.Name}}
	_, err = p.agents.do(ctx, pod, "DELETE", api.PathProbes+"?"+q.Encode(), nil)
	return err
}

// check runs the datapath check on the nodes that have an agent and sums
// it up as one CheckResult, which names every pair that failed.
func (d *datapathCheck) check(ctx context.Context, agents []NodeStatus) (CheckResult, []PairResult) {
	var nodes []string
	for _, st := range agents {
		if st.Pod != "" && !slices.Contains(nodes, st.Node) {
			nodes = append(nodes, st.Node)
		}
	}
	r := CheckResult{Check: "datapath"}
	pairs, err := d.run(ctx, nodes)
	switch {
	case errors.Is(err, errNotServed):
		r.Passed, r.Skipped = true, true
		r.Detail = "the agents serve no probes (a release before probes): only status was checked"
		return r, nil
	case err != nil:
		r.Detail = err.Error()
		if failed := failedPairs(pairs); len(failed) > 0 {
			r.Detail = fmt.Sprintf("pairs failed: %s; %v", strings.Join(failed, ", "), err)
		}
		return r, pairs
	}
	if failed := failedPairs(pairs); len(failed) > 0 {
		r.Detail = fmt.Sprintf("%d of %d pairs failed: %s", len(failed), len(pairs), strings.Join(failed, ", "))
		return r, pairs
	}
	r.Passed = true
	r.Detail = fmt.Sprintf("%d pairs of %d nodes: ping, full-size ping and TCP", len(pairs), len(nodes))
	return r, pairs
}
