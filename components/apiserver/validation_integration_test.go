package apiserver_test

// This file checks what the API refuses to write: invalid objects, a
// subnet that conflicts with another, and changes to immutable fields.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// statusErrorStrings returns the causes of an Invalid error as
// "<field>: <message>" lines.
func statusErrorStrings(err error) []string {
	status, ok := err.(apierrors.APIStatus)
	if !ok || status.Status().Details == nil {
		return []string{fmt.Sprintf("not an API status error: %v", err)}
	}
	var out []string
	for _, c := range status.Status().Details.Causes {
		out = append(out, c.Field+": "+c.Message)
	}
	return out
}

// checkRefusal checks the error of a write (op): none where want is nil,
// else an Invalid error whose causes are want.
func checkRefusal(t *testing.T, op string, err error, want []string) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("%s: %v, want success", op, err)
		}
		return
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("%s: got %v, want an Invalid error", op, err)
	}
	if diff := cmp.Diff(statusErrorStrings(err), want); diff != "" {
		t.Errorf("causes (-got +want):\n%s", diff)
	}
}

func testCreateValidation(t *testing.T, clients apiClients) {
	ns := newNamespace(t)
	const inside = "must lie inside one RFC 1918 range (10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16)"
	tests := []struct {
		name string
		cidr string
		vni  uint32
		want []string // causes; nil means the create succeeds
	}{
		{"vni 0", "10.10.0.0/24", 0, []string{"spec.vni: Invalid value: 0: must be in [1,2097151]"}},
		{"vni 1", "10.10.1.0/24", 1, nil},
		{"vni 2097151", "10.10.2.0/24", 2097151, nil},
		{"vni 2097152", "10.10.3.0/24", 2097152, []string{"spec.vni: Invalid value: 2097152: must be in [1,2097151]"}},
		{"cidr inside 172.16/12", "172.20.0.0/16", 2, nil},
		{"cidr inside 192.168/16", "192.168.7.0/24", 3, nil},
		{"cidr outside", "100.64.0.0/10", 4, []string{`spec.ipv4: Invalid value: "100.64.0.0/10": ` + inside}},
		{"cidr spanning two ranges", "128.0.0.0/1", 5, []string{`spec.ipv4: Invalid value: "128.0.0.0/1": spans 172.16.0.0/12 and 192.168.0.0/16; ` + inside}},
		{"cidr malformed", "10.0.0.0/40", 6, []string{`spec.ipv4: Invalid value: "10.0.0.0/40": must be an IPv4 CIDR block such as 10.1.0.0/16`}},
		{"both wrong", "banana", 0, []string{
			"spec.vni: Invalid value: 0: must be in [1,2097151]",
			`spec.ipv4: Invalid value: "banana": must be an IPv4 CIDR block such as 10.1.0.0/16`,
		}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSubnet(ns, fmt.Sprintf("s%d", i), tc.cidr, tc.vni)
			_, err := clients.aggregated.NetworkV1alpha1().Subnets(ns).Create(context.Background(), s, metav1.CreateOptions{})
			checkRefusal(t, "create", err, tc.want)
		})
	}

	t.Run("attachment without node or subnet", func(t *testing.T) {
		_, err := clients.aggregated.NetworkV1alpha1().NetworkAttachments(ns).Create(context.Background(), newAttachment(ns, "a", "", ""), metav1.CreateOptions{})
		want := []string{"spec.node: Required value: the name of a node", "spec.subnet: Required value: the name of a Subnet"}
		if diff := cmp.Diff(statusErrorStrings(err), want); diff != "" {
			t.Errorf("causes (-got +want):\n%s", diff)
		}
	})
}

func testConflictCheck(t *testing.T, clients apiClients) {
	ctx := context.Background()
	ns, other := newNamespace(t), newNamespace(t)
	subnets := clients.direct.NetworkV1alpha1().Subnets
	mustCreateSubnet(t, clients.direct, newSubnet(ns, "first", "10.20.0.0/24", 20))

	// The check reads the server's cache, which trails etcd a little; wait
	// until the cache holds the first subnet.
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := subnets(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		return err == nil && len(list.Items) == 1, err
	})
	if err != nil {
		t.Fatalf("waiting for the cache: %v", err)
	}

	tests := []struct {
		name   string
		subnet *v1alpha1.Subnet
		want   []string
	}{
		{"overlapping CIDR", newSubnet(ns, "overlap", "10.20.0.128/25", 20), []string{
			`spec.ipv4: Invalid value: "10.20.0.128/25": CIDR overlaps with ` + ns + `/first's (10.20.0.0/24)`,
		}},
		{"other namespace", newSubnet(other, "elsewhere", "10.21.0.0/24", 20), []string{
			"spec.vni: Invalid value: 20: same VNI but different namespace wrt " + ns + "/first",
		}},
		{"disjoint CIDR, same namespace", newSubnet(ns, "second", "10.20.1.0/24", 20), nil},
		{"overlapping CIDR on another VNI", newSubnet(other, "other-vni", "10.20.0.0/24", 21), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := subnets(tc.subnet.Namespace).Create(ctx, tc.subnet, metav1.CreateOptions{})
			checkRefusal(t, "create", err, tc.want)
		})
	}
}

// updated returns an update (with the client's Update) of a copy of obj
// that edit changed.
func updated[T interface{ DeepCopy() T }](ctx context.Context, obj T, edit func(T), update func(context.Context, T, metav1.UpdateOptions) (T, error)) func() error {
	return func() error {
		o := obj.DeepCopy()
		edit(o)
		_, err := update(ctx, o, metav1.UpdateOptions{})
		return err
	}
}

func testImmutability(t *testing.T, clients apiClients) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := clients.aggregated.NetworkV1alpha1()
	subnet := mustCreateSubnet(t, clients.aggregated, newSubnet(ns, "s1", "10.30.0.0/24", 30))
	att := mustCreateAttachment(t, clients.aggregated, newAttachment(ns, "a1", "node-1", "s1"))
	lock, err := c.IPLocks(ns).Create(ctx, &v1alpha1.IPLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "v1-30-10-30-0-5"},
		Spec:       v1alpha1.IPLockSpec{SubnetName: "s1"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating an IP lock: %v", err)
	}

	tests := []struct {
		name   string
		update func() error
		want   []string
	}{
		{"subnet vni", updated(ctx, subnet, func(s *v1alpha1.Subnet) { s.Spec.VNI = 31 }, c.Subnets(ns).Update),
			[]string{"spec.vni: Invalid value: 31: field is immutable"}},
		{"subnet cidr", updated(ctx, subnet, func(s *v1alpha1.Subnet) { s.Spec.IPv4 = "10.30.1.0/24" }, c.Subnets(ns).Update),
			[]string{`spec.ipv4: Invalid value: "10.30.1.0/24": field is immutable`}},
		{"attachment node and subnet", updated(ctx, att, func(a *v1alpha1.NetworkAttachment) { a.Spec.Node, a.Spec.Subnet = "node-2", "s2" }, c.NetworkAttachments(ns).Update),
			[]string{`spec.node: Invalid value: "node-2": field is immutable`, `spec.subnet: Invalid value: "s2": field is immutable`}},
		{"IP lock subnet", updated(ctx, lock, func(l *v1alpha1.IPLock) { l.Spec.SubnetName = "s2" }, c.IPLocks(ns).Update),
			[]string{`spec.subnetName: Invalid value: "s2": field is immutable`}},
		{"attachment exec commands may change", updated(ctx, att, func(a *v1alpha1.NetworkAttachment) { a.Spec.PostCreateExec = []string{"/bin/true"} }, c.NetworkAttachments(ns).Update),
			nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkRefusal(t, "update", tc.update(), tc.want)
		})
	}
	got, err := c.Subnets(ns).Get(ctx, "s1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting the subnet: %v", err)
	}
	if diff := cmp.Diff(got.Spec, subnet.Spec); diff != "" {
		t.Errorf("subnet spec after refused updates (-got +want):\n%s", diff)
	}
}
