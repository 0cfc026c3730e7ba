package agent_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kos-sdn/kos/components/agent"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestMain stops the control plane the integration tests start on first
// use (testenv.Shared).
func TestMain(m *testing.M) { testenv.Main(m) }

var (
	kosOnce   sync.Once
	kosServer *testenv.KOS
	kosErr    error
)

// kosAPI returns the package's kos-apiserver, registered with the
// aggregator, starting it on first use. Tests share it and keep apart by
// namespace and VNI.
func kosAPI(t testing.TB) *testenv.KOS {
	t.Helper()
	env := testenv.Shared(t)
	kosOnce.Do(func() {
		kosServer, kosErr = env.StartKOS(context.Background(), testenv.KOSOptions{})
	})
	if kosErr != nil {
		t.Fatalf("starting kos-apiserver: %v", kosErr)
	}
	return kosServer
}

// directConfig is an admin configuration straight to kos-apiserver, as
// agents use, with limits that do not slow tests.
func directConfig(t testing.TB) *rest.Config {
	cfg := rest.CopyConfig(kosAPI(t).DirectConfig)
	cfg.QPS, cfg.Burst = 1000, 2000
	return cfg
}

func kosClient(t testing.TB) *kosclient.Clientset {
	t.Helper()
	c, err := kosclient.NewForConfig(directConfig(t))
	if err != nil {
		t.Fatalf("creating a KOS client: %v", err)
	}
	return c
}

// newNamespace creates a namespace in the main cluster, where kos-apiserver's
// admission looks for it.
func newNamespace(t testing.TB) string {
	t.Helper()
	return testenv.Shared(t).NewNamespace(t, "agent-")
}

// api is a test's view of the KOS API: one namespace, and helpers that do
// what users and IPAM do there.
type api struct {
	t      testing.TB
	ctx    context.Context
	client *kosclient.Clientset
	ns     string
}

func newAPI(t testing.TB) *api {
	return &api{t: t, ctx: context.Background(), client: kosClient(t), ns: newNamespace(t)}
}

// node returns the name of a simulated node of the test: nodes are per
// namespace, so that no agent sees the attachments of another test.
func (a *api) node(n string) string { return a.ns + "-" + n }

func (a *api) subnet(name, cidr string, vni uint32) {
	a.t.Helper()
	s := &v1alpha1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.SubnetSpec{IPv4: cidr, VNI: vni},
	}
	if _, err := a.client.NetworkV1alpha1().Subnets(a.ns).Create(a.ctx, s, metav1.CreateOptions{}); err != nil {
		a.t.Fatalf("creating subnet %s: %v", name, err)
	}
	// Tests use fixed VNIs; another run in this process may reuse them.
	// kos-apiserver refuses to delete a subnet in use, so its attachments
	// go first, and again while a pod-network controller of the test still
	// makes its pods' attachments anew.
	a.t.Cleanup(func() {
		// Not poll.Until: the test's context is over when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		inSubnet := metav1.ListOptions{FieldSelector: v1alpha1.FieldSubnet + "=" + name}
		for {
			err := a.client.NetworkV1alpha1().NetworkAttachments(a.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, inSubnet)
			if err == nil {
				err = a.client.NetworkV1alpha1().Subnets(a.ns).Delete(ctx, name, metav1.DeleteOptions{})
			}
			if err == nil || apierrors.IsNotFound(err) {
				return
			}
			if ctx.Err() != nil {
				a.t.Errorf("deleting subnet %s and its attachments: %v", name, err)
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// attachment creates an attachment on node in subnet; mods change it first.
func (a *api) attachment(name, node, subnet string, mods ...func(*v1alpha1.NetworkAttachment)) {
	a.t.Helper()
	att := &v1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.NetworkAttachmentSpec{Node: node, Subnet: subnet},
	}
	for _, m := range mods {
		m(att)
	}
	if _, err := a.client.NetworkV1alpha1().NetworkAttachments(a.ns).Create(a.ctx, att, metav1.CreateOptions{}); err != nil {
		a.t.Fatalf("creating attachment %s: %v", name, err)
	}
}

// updateStatus changes an attachment's status through /status, retrying on
// conflicts with the agents' writes.
func (a *api) updateStatus(name string, change func(*v1alpha1.NetworkAttachmentStatus)) {
	a.t.Helper()
	atts := a.client.NetworkV1alpha1().NetworkAttachments(a.ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		att, err := atts.Get(a.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(&att.Status)
		_, err = atts.UpdateStatus(a.ctx, att, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		a.t.Fatalf("updating the status of %s: %v", name, err)
	}
}

// address gives an attachment an address, as IPAM does: an attachment with
// another address loses it first, since the server lets no address change
// into another.
func (a *api) address(name, ip string, vni uint32) {
	a.t.Helper()
	if st := a.get(name).Status; st.IPv4 != "" && (st.IPv4 != ip || st.AddressVNI != vni) {
		a.updateStatus(name, func(st *v1alpha1.NetworkAttachmentStatus) {
			st.IPv4, st.AddressVNI, st.LockUID = "", 0, ""
		})
	}
	a.updateStatus(name, func(st *v1alpha1.NetworkAttachmentStatus) {
		st.IPv4, st.AddressVNI = ip, vni
		st.LockUID = "test-lock-" + name
	})
}

// hostIP sets an attachment's host IP, as the agent of a node without one
// in the test would.
func (a *api) hostIP(name, ip string) {
	a.t.Helper()
	a.updateStatus(name, func(st *v1alpha1.NetworkAttachmentStatus) { st.HostIP = ip })
}

// remote creates an attachment on a node that runs no agent in the test,
// with its address and host IP.
func (a *api) remote(name, node, subnet, ip string, vni uint32, host string) {
	a.t.Helper()
	a.attachment(name, node, subnet)
	a.address(name, ip, vni)
	a.hostIP(name, host)
}

func (a *api) delete(name string) {
	a.t.Helper()
	if err := a.client.NetworkV1alpha1().NetworkAttachments(a.ns).Delete(a.ctx, name, metav1.DeleteOptions{}); err != nil {
		a.t.Fatalf("deleting attachment %s: %v", name, err)
	}
}

func (a *api) get(name string) *v1alpha1.NetworkAttachment {
	a.t.Helper()
	att, err := a.client.NetworkV1alpha1().NetworkAttachments(a.ns).Get(a.ctx, name, metav1.GetOptions{})
	if err != nil {
		a.t.Fatalf("getting attachment %s: %v", name, err)
	}
	return att
}

// runningAgent is an agent running in the test process.
type runningAgent struct {
	agent    *agent.Agent
	registry *prometheus.Registry
	cancel   context.CancelFunc
	done     chan error
	stopOnce sync.Once
}

// agentConfig returns the configuration of a test agent for node, with
// short periods so that repairs show quickly.
func agentConfig(t testing.TB, node, hostIP string, fab fabric.Interface) agent.Config {
	return agent.Config{
		NodeName:        node,
		HostIP:          netip.MustParseAddr(hostIP),
		Client:          kosClient(t),
		Fabric:          fab,
		FlowCheckPeriod: 200 * time.Millisecond,
		ReconcilePeriod: time.Minute,
		ExecTimeout:     10 * time.Second,
	}
}

// startAgent runs an agent until the test ends or stop is called.
func startAgent(t testing.TB, cfg agent.Config) *runningAgent {
	t.Helper()
	reg := prometheus.NewRegistry()
	if cfg.Registerer == nil {
		cfg.Registerer = reg
	}
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatalf("creating the agent of %s: %v", cfg.NodeName, err)
	}
	logger := klog.LoggerWithValues(ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2))), "agent", cfg.NodeName)
	if _, bench := t.(*testing.B); bench {
		// A benchmark's log is always printed; fifty agents' would
		// drown its figures.
		logger = klog.Logger{} // the zero logger discards
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	r := &runningAgent{agent: a, registry: reg, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx, 2) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop stops the agent and waits until Run returned; it may be called more
// than once.
func (r *runningAgent) stop(t testing.TB) {
	t.Helper()
	r.stopOnce.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("agent Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("the agent did not stop within 30s")
		}
	})
}

// counter returns the sum of the values of a metric family (counters and
// gauges; sample counts of histograms) whose labels include all of labels.
func (r *runningAgent) counter(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	return gathered(t, r.registry, name, labels)
}

// gathered sums a metric family of a registry as counter does.
func gathered(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// inventoryOf lists a fabric.
func inventoryOf(ctx context.Context, f fabric.Interface) (*fabric.Inventory, error) {
	inv, err := f.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the fabric: %w", err)
	}
	return inv, nil
}

// holds returns a check that the fabric holds exactly want.
func holds(f fabric.Interface, want *fabric.Inventory) func(context.Context) error {
	return func(context.Context) error {
		got, err := inventoryOf(context.Background(), f)
		if err != nil {
			return err
		}
		if diff := cmp.Diff(got, want, cmpopts.EquateComparable(netip.Addr{}), cmpopts.EquateEmpty()); diff != "" {
			return fmt.Errorf("the fabric differs (-got +want):\n%s", diff)
		}
		return nil
	}
}

// hasReport returns a check that an attachment's status has a
// postCreateExec report.
func (a *api) hasReport(name string) func(context.Context) error {
	return func(context.Context) error {
		att, err := a.client.NetworkV1alpha1().NetworkAttachments(a.ns).Get(a.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if att.Status.PostCreateExecReport == nil {
			return fmt.Errorf("%s has no postCreateExec report", name)
		}
		return nil
	}
}

// ready returns a check that an attachment's status reports its interface
// on the node with hostIP.
func (a *api) ready(name, hostIP string) func(context.Context) error {
	return func(context.Context) error {
		att, err := a.client.NetworkV1alpha1().NetworkAttachments(a.ns).Get(a.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		addr, err := netip.ParseAddr(att.Status.IPv4)
		if err != nil {
			return fmt.Errorf("%s has no address: %w", name, err)
		}
		mac := v1alpha1.MACAddress(att.Status.AddressVNI, addr)
		want := v1alpha1.NetworkAttachmentStatus{
			MACAddress: mac.String(),
			IfcName:    v1alpha1.InterfaceName(mac),
			HostIP:     hostIP,
		}
		got := v1alpha1.NetworkAttachmentStatus{
			MACAddress: att.Status.MACAddress,
			IfcName:    att.Status.IfcName,
			HostIP:     att.Status.HostIP,
			Errors:     v1alpha1.NetworkAttachmentErrors{Host: att.Status.Errors.Host},
		}
		if diff := cmp.Diff(got, want, cmpopts.EquateEmpty()); diff != "" {
			return fmt.Errorf("status of %s (-got +want):\n%s", name, diff)
		}
		return nil
	}
}

func local(vni uint32, ip string) fabric.LocalAttachment {
	return fabric.LocalAttachment{VNI: vni, IP: netip.MustParseAddr(ip)}
}

func remote(vni uint32, ip, host string) fabric.RemoteAttachment {
	return fabric.RemoteAttachment{VNI: vni, IP: netip.MustParseAddr(ip), HostIP: netip.MustParseAddr(host)}
}

// joinLines joins lines with newlines, with one at the end.
func joinLines(lines []string) string { return strings.Join(lines, "\n") + "\n" }
