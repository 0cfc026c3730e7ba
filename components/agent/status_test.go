package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/components/agent/api"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/logging"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	kosfake "github.com/kos-sdn/kos/components/generated/clientset/versioned/fake"
)

// readableFabric is a logging fabric with a switch that can be read, which
// records the packets it traces.
type readableFabric struct {
	*logging.Fabric
	traced []ovs.Packet
}

func (f *readableFabric) DumpFlows(context.Context) (string, error) { return "flows\n", nil }
func (f *readableFabric) FlowCount(context.Context) (int, error)    { return 7, nil }
func (f *readableFabric) Tunnels(context.Context) (string, error)   { return "tunnels\n", nil }
func (f *readableFabric) Routes(context.Context) (string, error)    { return "ovs routes\n", nil }
func (f *readableFabric) Trace(_ context.Context, p ovs.Packet) (string, error) {
	f.traced = append(f.traced, p)
	return "traced\n", nil
}

// debugAgent returns an agent of node-a, not running, whose local
// informer's store holds atts.
func debugAgent(t *testing.T, fab fabric.Interface, atts ...*v1alpha1.NetworkAttachment) *Agent {
	t.Helper()
	a, err := New(Config{NodeName: "node-a", HostIP: netip.MustParseAddr("192.168.100.1"), Client: kosfake.NewSimpleClientset(), Fabric: fab})
	if err != nil {
		t.Fatal(err)
	}
	for _, att := range atts {
		if err := a.localInformer.GetStore().Add(att); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

func attachment(ns, name, node, ip string, vni uint32) *v1alpha1.NetworkAttachment {
	return &v1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.NetworkAttachmentSpec{Node: node, Subnet: "s"},
		Status:     v1alpha1.NetworkAttachmentStatus{IPv4: ip, AddressVNI: vni},
	}
}

func TestTraceEndpoint(t *testing.T) {
	fab := &readableFabric{Fabric: logging.New()}
	a := debugAgent(t, fab,
		attachment("ns", "a1", "node-a", "10.0.0.2", 4097),
		attachment("ns", "unaddressed", "node-a", "", 0),
		// The store holds only local attachments; one that is not shows
		// that the agent checks all the same.
		attachment("ns", "elsewhere", "node-b", "10.0.0.3", 4097))
	h := a.DebugHandler()
	tests := []struct {
		name     string
		method   string
		body     string
		wantCode int
		want     *ovs.Packet
	}{{
		name: "icmp by default", method: http.MethodPost, wantCode: http.StatusOK,
		body: `{"namespace":"ns","name":"a1","to":"10.0.0.9"}`,
		want: &ovs.Packet{From: fabric.LocalAttachment{VNI: 4097, IP: netip.MustParseAddr("10.0.0.2")}, To: netip.MustParseAddr("10.0.0.9"), Protocol: "icmp"},
	}, {
		name: "tcp", method: http.MethodPost, wantCode: http.StatusOK,
		body: `{"namespace":"ns","name":"a1","to":"10.0.0.9","protocol":"tcp","port":80}`,
		want: &ovs.Packet{From: fabric.LocalAttachment{VNI: 4097, IP: netip.MustParseAddr("10.0.0.2")}, To: netip.MustParseAddr("10.0.0.9"), Protocol: "tcp", Port: 80},
	}, {
		name: "GET", method: http.MethodGet, wantCode: http.StatusMethodNotAllowed,
	}, {
		name: "not JSON", method: http.MethodPost, wantCode: http.StatusBadRequest,
		body: `to=10.0.0.9`,
	}, {
		name: "unknown field", method: http.MethodPost, wantCode: http.StatusBadRequest,
		body: `{"namespace":"ns","name":"a1","to":"10.0.0.9","bridge":"br-int"}`,
	}, {
		name: "flow text as the destination", method: http.MethodPost, wantCode: http.StatusBadRequest,
		body: `{"namespace":"ns","name":"a1","to":"10.0.0.9,in_port=1"}`,
	}, {
		name: "IPv6 destination", method: http.MethodPost, wantCode: http.StatusBadRequest,
		body: `{"namespace":"ns","name":"a1","to":"fd00::1"}`,
	}, {
		name: "bad name", method: http.MethodPost, wantCode: http.StatusBadRequest,
		body: `{"namespace":"ns","name":"A 1","to":"10.0.0.9"}`,
	}, {
		name: "too large", method: http.MethodPost, wantCode: http.StatusBadRequest,
		body: `{"namespace":"ns","name":"a1","to":"10.0.0.9","protocol":"` + strings.Repeat("x", 4<<10) + `"}`,
	}, {
		name: "unknown attachment", method: http.MethodPost, wantCode: http.StatusNotFound,
		body: `{"namespace":"ns","name":"a9","to":"10.0.0.9"}`,
	}, {
		name: "attachment of another node", method: http.MethodPost, wantCode: http.StatusNotFound,
		body: `{"namespace":"ns","name":"elsewhere","to":"10.0.0.9"}`,
	}, {
		name: "no address yet", method: http.MethodPost, wantCode: http.StatusConflict,
		body: `{"namespace":"ns","name":"unaddressed","to":"10.0.0.9"}`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fab.traced = nil
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, api.PathTrace, strings.NewReader(tt.body)))
			if rec.Code != tt.wantCode {
				t.Fatalf("status %d (%s), want %d", rec.Code, strings.TrimSpace(rec.Body.String()), tt.wantCode)
			}
			var want []ovs.Packet
			if tt.want != nil {
				want = []ovs.Packet{*tt.want}
				// The agent enforces no policy: the trace says so after
				// the switch's.
				if got := rec.Body.String(); !strings.HasPrefix(got, "traced\n") || !strings.Contains(got, "No policy isolates an attachment of VNI 4097 on this node") {
					t.Errorf("body %q, want the trace and the policy's part", got)
				}
			}
			if diff := cmp.Diff(fab.traced, want, cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
				t.Errorf("traced packets (-got +want):\n%s", diff)
			}
		})
	}
}

func TestStatusEndpoint(t *testing.T) {
	tests := []struct {
		name      string
		fab       fabric.Interface
		wantFlows int
		read      map[string]int // the text endpoints' codes
	}{
		{"switch", &readableFabric{Fabric: logging.New()}, 7, map[string]int{api.PathFlows: 200, api.PathTunnels: 200, api.PathRoutes: 200}},
		{"no switch", logging.New(), -1, map[string]int{api.PathFlows: 500, api.PathTunnels: 500, api.PathRoutes: 200}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := debugAgent(t, tt.fab, attachment("ns", "a1", "node-a", "10.0.0.2", 4097))
			a.lastReconcile.set(reconcilePeriodic, errors.New("no switch"))
			h := a.DebugHandler()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, api.PathStatus, nil))
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			var got api.Status
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if got.Node != "node-a" || got.HostIP != "192.168.100.1" || got.LocalAttachments != 1 || got.Flows != tt.wantFlows || got.Ready ||
				got.LastReconcileReason != reconcilePeriodic || got.LastReconcileError != "no switch" || got.LastReconcile.IsZero() {
				t.Errorf("status %+v, want node-a at 192.168.100.1, one local attachment, %d flows, not ready, a failed periodic reconcile", got, tt.wantFlows)
			}
			if len(got.Errors) != 2 {
				t.Errorf("errors %q, want not ready and the failed reconcile", got.Errors)
			}
			codes := map[string]int{}
			for path := range tt.read {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
				codes[path] = rec.Code
			}
			if diff := cmp.Diff(codes, tt.read); diff != "" {
				t.Errorf("codes of the text endpoints (-got +want):\n%s", diff)
			}
		})
	}
}

// TestServerServesNoDebug checks that the metrics' handler serves no debug
// endpoint: they have a listener of their own, which checks identity.
func TestServerServesNoDebug(t *testing.T) {
	cfg := ServerConfig{
		Main:  &rest.Config{Host: "http://127.0.0.1:1"},
		KOS:   &rest.Config{Host: "http://127.0.0.1:1"},
		Agent: Config{NodeName: "node-a", HostIP: netip.MustParseAddr("192.168.100.1"), Fabric: logging.New()},
	}
	s, err := cfg.Complete().New()
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{api.PathStatus: 404, api.PathFlows: 404, "/metrics": 200, "/livez": 200} {
		rec := httptest.NewRecorder()
		s.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != want {
			t.Errorf("GET %s: status %d, want %d", path, rec.Code, want)
		}
	}
}
