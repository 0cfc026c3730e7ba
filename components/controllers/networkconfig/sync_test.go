package networkconfig

import (
	"context"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllers/keyqueue"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned/fake"
	listers "github.com/kos-sdn/kos/components/generated/listers/network/v1alpha1"
)

func ptr(v int32) *int32 { return &v }

func node(name string, mtu string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if mtu != "" {
		n.Annotations = map[string]string{v1alpha1.UnderlayMTUAnnotation: mtu}
	}
	return n
}

func config(mtu, port *int32, applied *v1alpha1.NetworkConfigStatus) *v1alpha1.NetworkConfig {
	c := &v1alpha1.NetworkConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster", Generation: 1},
		Spec:       v1alpha1.NetworkConfigSpec{OverlayMTU: mtu, TunnelPort: port},
	}
	if applied != nil {
		c.Status = *applied
	}
	return c
}

// written is what one write of the controller sent.
type written struct {
	verb, subresource string
	cfg               *v1alpha1.NetworkConfig
}

// runSync runs one sync of a controller whose caches hold cfg (unless nil)
// and nodes, and returns the writes it made and the metrics it observed.
func runSync(t *testing.T, cfg *v1alpha1.NetworkConfig, nodes ...*corev1.Node) ([]written, *fakeMetrics) {
	t.Helper()
	return runSyncWith(t, cfg, nil, nodes...)
}

// runSyncWith is runSync with attachments in the cache too.
func runSyncWith(t *testing.T, cfg *v1alpha1.NetworkConfig, attachments []*v1alpha1.NetworkAttachment, nodes ...*corev1.Node) ([]written, *fakeMetrics) {
	t.Helper()
	attIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{attachmentsByMTUIndex: attachmentMTU})
	for _, a := range attachments {
		if err := attIndexer.Add(a); err != nil {
			t.Fatal(err)
		}
	}
	var objs []runtime.Object
	configs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if cfg != nil {
		objs = append(objs, cfg)
		if err := configs.Add(cfg); err != nil {
			t.Fatal(err)
		}
	}
	nodeIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range nodes {
		if err := nodeIndexer.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	client := fake.NewSimpleClientset(objs...)
	metrics := &fakeMetrics{}
	c := &Controller{
		client:      client,
		configs:     listers.NewNetworkConfigLister(configs),
		nodes:       corelisters.NewNodeLister(nodeIndexer),
		attachments: attIndexer,
		queue:       keyqueue.New("test"),
		recorder:    record.NewFakeRecorder(10),
		metrics:     metrics,
	}
	if err := c.sync(context.Background(), cache.NewObjectName("", "cluster")); err != nil {
		t.Fatalf("sync: %v", err)
	}
	var out []written
	for _, a := range client.Actions() {
		switch a := a.(type) {
		case k8stesting.CreateAction:
			out = append(out, written{a.GetVerb(), a.GetSubresource(), a.GetObject().(*v1alpha1.NetworkConfig)})
		case k8stesting.UpdateAction:
			out = append(out, written{a.GetVerb(), a.GetSubresource(), a.GetObject().(*v1alpha1.NetworkConfig)})
		}
	}
	return out, metrics
}

type fakeMetrics struct {
	status    *v1alpha1.NetworkConfigStatus
	underlays map[string]int32
}

func (m *fakeMetrics) Observe(st *v1alpha1.NetworkConfigStatus, underlays map[string]int32) {
	m.status, m.underlays = st, underlays
}

func TestSyncCreatesWithDefaults(t *testing.T) {
	tests := []struct {
		name    string
		nodes   []*corev1.Node
		wantMTU int32
	}{
		{"no node reports", []*corev1.Node{node("a", "")}, 1450},
		{"smallest underlay less 50", []*corev1.Node{node("a", "1500"), node("b", "1400"), node("c", "9000"), node("d", "")}, 1350},
		{"malformed reports ignored", []*corev1.Node{node("a", "9000"), node("b", "banana"), node("c", "10")}, 8950},
		{"jumbo underlays capped", []*corev1.Node{node("a", "65000")}, 9216},
		{"tiny underlay floored", []*corev1.Node{node("a", "600")}, 576},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			writes, _ := runSync(t, nil, tc.nodes...)
			if len(writes) != 1 || writes[0].verb != "create" {
				t.Fatalf("writes %+v, want one create", writes)
			}
			want := v1alpha1.NetworkConfigSpec{OverlayMTU: ptr(tc.wantMTU), TunnelPort: ptr(4789)}
			if diff := cmp.Diff(writes[0].cfg.Spec, want); diff != "" {
				t.Errorf("spec created (-got +want):\n%s", diff)
			}
			if writes[0].cfg.Name != "cluster" {
				t.Errorf("created %q, want cluster", writes[0].cfg.Name)
			}
		})
	}
}

func TestSyncFillsInWhatSpecLeavesOut(t *testing.T) {
	writes, _ := runSync(t, config(ptr(9000), nil, nil), node("a", "1500"))
	if len(writes) != 1 || writes[0].verb != "update" || writes[0].subresource != "" {
		t.Fatalf("writes %+v, want one update of the spec", writes)
	}
	want := v1alpha1.NetworkConfigSpec{OverlayMTU: ptr(9000), TunnelPort: ptr(4789)}
	if diff := cmp.Diff(writes[0].cfg.Spec, want); diff != "" {
		t.Errorf("spec (-got +want):\n%s", diff)
	}
}

var ignoreTimes = cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")

func TestSyncAppliesAndNeverRecomputes(t *testing.T) {
	// Applied at 1450 when nodes had 1500; a node now reports 1400 and
	// another 1480: the MTU stays, both are reported, smallest first.
	applied := &v1alpha1.NetworkConfigStatus{OverlayMTU: 1450, TunnelPort: 4789}
	writes, metrics := runSync(t, config(ptr(1450), ptr(4789), applied),
		node("a", "1500"), node("b", "1480"), node("c", "1400"))
	if len(writes) != 1 || writes[0].subresource != "status" {
		t.Fatalf("writes %+v, want one status update", writes)
	}
	got := writes[0].cfg
	if *got.Spec.OverlayMTU != 1450 {
		t.Errorf("spec.overlayMTU %d, want 1450 kept", *got.Spec.OverlayMTU)
	}
	want := v1alpha1.NetworkConfigStatus{
		ObservedGeneration: 1, OverlayMTU: 1450, TunnelPort: 4789,
		Underlay: v1alpha1.UnderlayReport{NodesReporting: 3, SmallestMTU: 1400, NodesTooSmall: 2,
			TooSmall: []v1alpha1.NodeUnderlay{{Node: "c", MTU: 1400}, {Node: "b", MTU: 1480}}},
		Conditions: []metav1.Condition{
			{Type: "Applied", Status: "True", Reason: "Applied", ObservedGeneration: 1, Message: "Agents use overlay MTU 1450 and tunnel port 4789"},
			{Type: "UnderlayFits", Status: "False", Reason: "UnderlayTooSmall", ObservedGeneration: 1,
				Message: "2 of 3 nodes have an underlay MTU below 1500, the overlay MTU 1450 plus VXLAN's 50 bytes: c (1400), b (1480); packets larger than their underlay carries are lost"},
		},
	}
	if diff := cmp.Diff(got.Status, want, ignoreTimes); diff != "" {
		t.Errorf("status (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(metrics.underlays, map[string]int32{"a": 1500, "b": 1480, "c": 1400}); diff != "" {
		t.Errorf("underlays observed (-got +want):\n%s", diff)
	}
	if metrics.status == nil || metrics.status.Underlay.NodesTooSmall != 2 {
		t.Errorf("status observed %+v, want 2 nodes too small", metrics.status)
	}
}

func TestSyncWritesNothingWhenUpToDate(t *testing.T) {
	cfg := config(ptr(1450), ptr(4789), nil)
	cfg.Status = Status(cfg, map[string]int32{"a": 1500}, nil)
	if writes, _ := runSync(t, cfg, node("a", "1500")); len(writes) != 0 {
		t.Errorf("writes %+v, want none", writes)
	}
}

func TestSyncRemovesTheForceAnnotationOnceApplied(t *testing.T) {
	cfg := config(ptr(1400), ptr(4789), &v1alpha1.NetworkConfigStatus{OverlayMTU: 1450, TunnelPort: 4789})
	cfg.Generation = 2
	cfg.Annotations = map[string]string{v1alpha1.ForceUnsafeChangeAnnotation: "true", "keep": "me"}
	writes, _ := runSync(t, cfg, node("a", "1500"))
	if len(writes) != 2 || writes[0].subresource != "status" || writes[1].subresource != "" {
		t.Fatalf("writes %+v, want a status update, then an update", writes)
	}
	if st := writes[0].cfg.Status; st.OverlayMTU != 1400 || st.ObservedGeneration != 2 {
		t.Errorf("status applied MTU %d at generation %d, want 1400 at 2", st.OverlayMTU, st.ObservedGeneration)
	}
	if diff := cmp.Diff(writes[1].cfg.Annotations, map[string]string{"keep": "me"}); diff != "" {
		t.Errorf("annotations (-got +want):\n%s", diff)
	}
}

func TestStatusUnderlayConditions(t *testing.T) {
	cfg := config(ptr(1450), ptr(4789), nil)
	many := map[string]int32{}
	for i := range 25 {
		many["n"+strconv.Itoa(i+10)] = 1400
	}
	tests := []struct {
		name      string
		underlays map[string]int32
		want      metav1.Condition
		named     int
	}{
		{"none", nil, metav1.Condition{Type: "UnderlayFits", Status: "Unknown", Reason: "NoUnderlayReports", ObservedGeneration: 1,
			Message: "No node reports its underlay MTU (annotation network.example.com/underlay-mtu)"}, 0},
		{"fits", map[string]int32{"a": 1500, "b": 9000}, metav1.Condition{Type: "UnderlayFits", Status: "True", Reason: "UnderlayFits", ObservedGeneration: 1,
			Message: "All 2 reporting nodes have an underlay MTU of at least 1500, the overlay MTU 1450 plus VXLAN's 50 bytes"}, 0},
		{"25 too small", many, metav1.Condition{Type: "UnderlayFits", Status: "False", Reason: "UnderlayTooSmall", ObservedGeneration: 1,
			Message: "25 of 25 nodes have an underlay MTU below 1500, the overlay MTU 1450 plus VXLAN's 50 bytes: n10 (1400), n11 (1400), n12 (1400), n13 (1400), n14 (1400) and 20 more; packets larger than their underlay carries are lost"}, 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := Status(cfg, tc.underlays, nil)
			got := st.Conditions[1]
			if diff := cmp.Diff(got, tc.want, ignoreTimes); diff != "" {
				t.Errorf("condition (-got +want):\n%s", diff)
			}
			if len(st.Underlay.TooSmall) != tc.named {
				t.Errorf("%d nodes named, want %d", len(st.Underlay.TooSmall), tc.named)
			}
		})
	}
}

func attachment(name string, mtu int32) *v1alpha1.NetworkAttachment {
	return &v1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Status:     v1alpha1.NetworkAttachmentStatus{MTU: mtu},
	}
}

func TestSyncCountsAttachmentsWithAnotherMTU(t *testing.T) {
	// A forced change from 1450 to 1400: two interfaces were made before
	// it, one after, and one has none yet.
	cfg := config(ptr(1400), ptr(4789), &v1alpha1.NetworkConfigStatus{OverlayMTU: 1400, TunnelPort: 4789})
	atts := []*v1alpha1.NetworkAttachment{attachment("old1", 1450), attachment("old2", 1450), attachment("new", 1400), attachment("pending", 0)}
	writes, metrics := runSyncWith(t, cfg, atts, node("a", "1500"))
	if len(writes) != 1 || writes[0].subresource != "status" {
		t.Fatalf("writes %+v, want one status update", writes)
	}
	st := writes[0].cfg.Status
	if st.AttachmentsWithOtherMTU != 2 {
		t.Errorf("attachmentsWithOtherMTU %d, want 2", st.AttachmentsWithOtherMTU)
	}
	want := "Agents use overlay MTU 1400 and tunnel port 4789; 2 attachments' interfaces have another MTU until their pods are re-created"
	if got := st.Conditions[0].Message; got != want {
		t.Errorf("Applied message %q, want %q", got, want)
	}
	if metrics.status.AttachmentsWithOtherMTU != 2 {
		t.Errorf("metrics observed %d attachments with another MTU, want 2", metrics.status.AttachmentsWithOtherMTU)
	}
}
