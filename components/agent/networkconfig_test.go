package agent

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/logging"
	kosfake "github.com/kos-sdn/kos/components/generated/clientset/versioned/fake"
)

func TestChooseMTU(t *testing.T) {
	tests := []struct {
		name    string
		own     int
		given   int
		applied int32
		want    mtuChoice
	}{
		{name: "nothing applied: the agent's own", own: 1450, want: mtuChoice{mtu: 1450}},
		{name: "applied wins over the underlay's", own: 1450, applied: 1400, want: mtuChoice{mtu: 1400, applied: true}},
		{name: "applied wins over --mtu, which differs", own: 1300, given: 1300, applied: 1400, want: mtuChoice{mtu: 1400, applied: true, givenDiffers: true}},
		{name: "--mtu equal to the applied", own: 1400, given: 1400, applied: 1400, want: mtuChoice{mtu: 1400, applied: true}},
		{name: "an invalid applied MTU is ignored", own: 1450, applied: 100, want: mtuChoice{mtu: 1450}},
		{name: "too large an applied MTU is ignored", own: 1450, applied: 9217, want: mtuChoice{mtu: 1450}},
		{name: "jumbo frames", own: 8950, applied: 8950, want: mtuChoice{mtu: 8950, applied: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := chooseMTU(tt.own, tt.given, tt.applied)
			if diff := cmp.Diff(got, tt.want, cmp.AllowUnexported(mtuChoice{})); diff != "" {
				t.Errorf("chooseMTU(%d, %d, %d) (-got +want):\n%s", tt.own, tt.given, tt.applied, diff)
			}
		})
	}
}

func configWithStatus(mtu, port int32) *v1alpha1.NetworkConfig {
	return &v1alpha1.NetworkConfig{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.NetworkConfigName},
		Status:     v1alpha1.NetworkConfigStatus{OverlayMTU: mtu, TunnelPort: port},
	}
}

// newConfigAgent returns an agent with a logging fabric of MTU own that
// applies the NetworkConfig, reading it from client.
func newConfigAgent(t *testing.T, client *kosfake.Clientset, own, given int) (*Agent, *logging.Fabric) {
	t.Helper()
	fab := logging.New()
	fab.SetMTU(own)
	a, err := New(Config{NodeName: "node-a", HostIP: netip.MustParseAddr("192.168.100.1"), Client: client, Fabric: fab,
		NetworkConfig: true, GivenMTU: given, UnderlayMTU: 1500})
	if err != nil {
		t.Fatal(err)
	}
	return a, fab
}

func TestNetworkConfigApply(t *testing.T) {
	tests := []struct {
		name    string
		configs []*v1alpha1.NetworkConfig
		want    int
		// wantPort is the fabric's tunnel port; 4789 when 0.
		wantPort int
	}{
		{name: "none: the agent's own", configs: []*v1alpha1.NetworkConfig{nil}, want: 1450},
		{name: "not applied yet", configs: []*v1alpha1.NetworkConfig{configWithStatus(0, 0)}, want: 1450},
		{name: "applied", configs: []*v1alpha1.NetworkConfig{nil, configWithStatus(1400, 4789)}, want: 1400},
		{name: "applied, then changed (forced)", configs: []*v1alpha1.NetworkConfig{configWithStatus(1400, 4789), configWithStatus(1350, 4789)}, want: 1350},
		{name: "another tunnel port", configs: []*v1alpha1.NetworkConfig{configWithStatus(1400, 4790)}, want: 1400, wantPort: 4790},
		{name: "tunnel port changed (forced)", configs: []*v1alpha1.NetworkConfig{configWithStatus(1400, 4789), configWithStatus(1400, 4790)}, want: 1400, wantPort: 4790},
		{name: "tunnel port kept when none is applied", configs: []*v1alpha1.NetworkConfig{configWithStatus(1400, 4790), configWithStatus(0, 0), nil}, want: 1450, wantPort: 4790},
		{name: "an invalid tunnel port is ignored", configs: []*v1alpha1.NetworkConfig{configWithStatus(1400, 70000)}, want: 1400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			a, fab := newConfigAgent(t, kosfake.NewSimpleClientset(), 1450, 0)
			for _, c := range tt.configs {
				a.netConfig.apply(ctx, c)
			}
			if got := fab.MTU(); got != tt.want {
				t.Errorf("the fabric's MTU is %d, want %d", got, tt.want)
			}
			if tt.wantPort == 0 {
				tt.wantPort = fabric.DefaultTunnelPort
			}
			if got := fab.TunnelPort(); got != tt.wantPort {
				t.Errorf("the fabric's tunnel port is %d, want %d", got, tt.wantPort)
			}
			if got := a.MTU(); got != tt.want {
				t.Errorf("the agent's MTU is %d, want %d", got, tt.want)
			}
			if got := testutil.ToFloat64(a.metrics.mtu); got != float64(tt.want) {
				t.Errorf("kos_agent_mtu is %g, want %d", got, tt.want)
			}
			if got := testutil.ToFloat64(a.metrics.underlayMTU); got != 1500 {
				t.Errorf("kos_agent_underlay_mtu is %g, want 1500", got)
			}
		})
	}
}

// TestNetworkConfigStart checks the first read: a NetworkConfig applied is
// taken; a refusal, as under 0.3.0's manifests, keeps the agent's own MTU
// and starts no informer, which would retry and log without end.
func TestNetworkConfigStart(t *testing.T) {
	t.Parallel()
	forbidden := func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: v1alpha1.SchemeGroupVersion.Group, Resource: "networkconfigs"}, "", nil)
	}
	tests := []struct {
		name        string
		objs        []runtime.Object
		refuse      bool
		wantMTU     int
		wantWatches bool
	}{
		{name: "applied", objs: []runtime.Object{configWithStatus(1400, 4789)}, wantMTU: 1400, wantWatches: true},
		{name: "none yet", wantMTU: 1450, wantWatches: true},
		{name: "forbidden", objs: []runtime.Object{configWithStatus(1400, 4789)}, refuse: true, wantMTU: 1450},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			client := kosfake.NewSimpleClientset(tt.objs...)
			if tt.refuse {
				client.PrependReactor("*", "networkconfigs", forbidden)
			}
			a, fab := newConfigAgent(t, client, 1450, 0)
			var wg sync.WaitGroup
			a.netConfig.start(ctx, a, &wg)
			if got := fab.MTU(); got != tt.wantMTU {
				t.Errorf("the fabric's MTU is %d, want %d", got, tt.wantMTU)
			}
			// An informer watches within moments; give it a second.
			deadline := time.Now().Add(time.Second)
			for countVerb(client.Actions(), "watch") == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
			wg.Wait()
			if got := countVerb(client.Actions(), "watch") > 0; got != tt.wantWatches {
				t.Errorf("watched the NetworkConfig: %v, want %v", got, tt.wantWatches)
			}
		})
	}
}

func countVerb(actions []clienttesting.Action, verb string) int {
	var n int
	for _, a := range actions {
		if a.GetVerb() == verb {
			n++
		}
	}
	return n
}

func TestReportUnderlay(t *testing.T) {
	node := func(annotations map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Annotations: annotations}}
	}
	tests := []struct {
		name      string
		node      *corev1.Node
		refuse    string // the verb refused
		wantPatch bool
		want      string
	}{
		{name: "no annotation", node: node(nil), wantPatch: true, want: "1500"},
		{name: "another value", node: node(map[string]string{v1alpha1.UnderlayMTUAnnotation: "9000"}), wantPatch: true, want: "1500"},
		{name: "the same value: no write", node: node(map[string]string{v1alpha1.UnderlayMTUAnnotation: "1500"}), want: "1500"},
		{name: "patch forbidden: carries on", node: node(nil), refuse: "patch", wantPatch: true, want: ""},
		{name: "get forbidden: carries on", node: node(nil), refuse: "get", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			client := kubefake.NewSimpleClientset(tt.node)
			if tt.refuse != "" {
				client.PrependReactor(tt.refuse, "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "node-a", nil)
				})
			}
			reportUnderlay(ctx, client.CoreV1().Nodes(), "node-a", 1500)
			if got := countVerb(client.Actions(), "patch") > 0; got != tt.wantPatch {
				t.Errorf("patched: %v, want %v", got, tt.wantPatch)
			}
			client.ClearActions()
			client.ReactionChain = client.ReactionChain[len(client.ReactionChain)-1:]
			n, err := client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := n.Annotations[v1alpha1.UnderlayMTUAnnotation]; got != tt.want && !(tt.want == "" && got == tt.node.Annotations[v1alpha1.UnderlayMTUAnnotation]) {
				t.Errorf("the annotation is %q, want %q", got, tt.want)
			}
		})
	}
}

// TestKeptMTU checks that after a change of the MTU in use, the status of
// a pod's interface (a plug) goes on reporting the MTU the interface has,
// while that of an internal port follows the change.
func TestKeptMTU(t *testing.T) {
	plugged := address{vni: 7, ip: netip.MustParseAddr("10.0.0.1")}
	internal := address{vni: 7, ip: netip.MustParseAddr("10.0.0.2")}
	impl := func(addr address, mtu int32) implStatus {
		mac := v1alpha1.MACAddress(addr.vni, addr.ip)
		return implStatus{mac: mac.String(), ifcName: v1alpha1.InterfaceName(mac), hostIP: "192.168.100.1", mtu: mtu}
	}
	tests := []struct {
		name      string
		addr      address
		want, got implStatus
		wantMTU   int32
	}{
		{name: "a plug keeps its MTU", addr: plugged, want: impl(plugged, 1400), got: impl(plugged, 1450), wantMTU: 1450},
		{name: "an internal port follows", addr: internal, want: impl(internal, 1400), got: impl(internal, 1450), wantMTU: 1400},
		{name: "a first report", addr: plugged, want: impl(plugged, 1400), got: implStatus{}, wantMTU: 1400},
		{name: "the same MTU", addr: plugged, want: impl(plugged, 1400), got: impl(plugged, 1400), wantMTU: 1400},
		{name: "another host", addr: plugged, want: impl(plugged, 1400), got: func() implStatus { s := impl(plugged, 1450); s.hostIP = "192.168.100.2"; return s }(), wantMTU: 1400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			a, fab := newConfigAgent(t, kosfake.NewSimpleClientset(), 1450, 0)
			at := func(addr address) fabric.LocalAttachment { return fabric.LocalAttachment{VNI: addr.vni, IP: addr.ip} }
			if err := fab.CreateLocal(ctx, at(internal)); err != nil {
				t.Fatal(err)
			}
			if err := fab.PlugLocal(ctx, fabric.Plug{LocalAttachment: at(plugged), Owner: "sandbox/eth1"}); err != nil {
				t.Fatal(err)
			}
			fab.SetMTU(1400)
			if got := a.keptMTU(ctx, tt.addr, tt.want, tt.got); got != tt.wantMTU {
				t.Errorf("keptMTU = %d, want %d", got, tt.wantMTU)
			}
		})
	}
}

// TestWatchUnderlay checks that the agent reports its underlay at start and
// again when its MTU changes, and keeps the last one read when a read
// fails.
func TestWatchUnderlay(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kube := kubefake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	a, _ := newConfigAgent(t, kosfake.NewSimpleClientset(), 1450, 0)
	a.nodes = kube.CoreV1().Nodes()
	// find reads what the test sends, and then the last MTU it sent; an
	// MTU of 0 is a failed read.
	reads := make(chan underlay)
	current := underlay{name: "eth0", mtu: 1500}
	find := func(netip.Addr) (underlay, error) {
		select {
		case u := <-reads:
			if u.mtu == 0 {
				return underlay{}, errNoUnderlay
			}
			current = u
		default:
		}
		return current, nil
	}
	done := make(chan struct{})
	go func() { a.watchUnderlay(ctx, time.Millisecond, find); close(done) }()
	annotation := func() string {
		n, err := kube.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Annotations[v1alpha1.UnderlayMTUAnnotation]
	}
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for annotation() != want {
			if time.Now().After(deadline) {
				t.Fatalf("the annotation is %q, want %q", annotation(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("1500")
	reads <- underlay{} // a failed read changes nothing
	reads <- underlay{name: "eth0", mtu: 9000}
	waitFor("9000")
	if got := testutil.ToFloat64(a.metrics.underlayMTU); got != 9000 {
		t.Errorf("kos_agent_underlay_mtu is %g, want 9000", got)
	}
	cancel()
	<-done
}
