package cniserver

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned/fake"
)

// TestSubnetPrefix checks that a subnet is read once while attachments
// name its creation time, read again when one names another (the subnet
// made again, with another block), and reported missing once deleted.
func TestSubnetPrefix(t *testing.T) {
	first := metav1.NewTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	second := metav1.NewTime(first.Add(time.Hour))
	subnet := &v1alpha1.Subnet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "blue", CreationTimestamp: first}, Spec: v1alpha1.SubnetSpec{IPv4: "10.1.0.0/16", VNI: 3}}
	client := fake.NewSimpleClientset(subnet)
	gets := 0
	client.PrependReactor("get", "subnets", func(clienttesting.Action) (bool, runtime.Object, error) {
		gets++
		return false, nil, nil
	})
	s := &subnets{client: client}
	ctx := context.Background()
	steps := []struct {
		name     string
		created  *metav1.Time
		change   func()
		wantBits int
		wantGets int
		wantErr  bool
	}{
		{name: "first ADD reads it", wantBits: 16, wantGets: 1},
		{name: "before the wait", wantBits: 16, wantGets: 1},
		{name: "an attachment of that subnet", created: &first, wantBits: 16, wantGets: 1},
		{
			name: "the subnet made again", created: &second, wantBits: 24, wantGets: 2,
			change: func() {
				again := subnet.DeepCopy()
				again.CreationTimestamp, again.Spec.IPv4 = second, "10.2.0.0/24"
				if _, err := client.NetworkV1alpha1().Subnets("ns").Update(ctx, again, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			},
		},
		{name: "after that", created: &second, wantBits: 24, wantGets: 2},
		{
			name: "deleted, and an attachment of an earlier one", created: &first, wantErr: true, wantGets: 3,
			change: func() {
				if err := client.NetworkV1alpha1().Subnets("ns").Delete(ctx, "blue", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			},
		},
		{name: "still deleted", wantErr: true, wantGets: 4},
	}
	for _, st := range steps {
		if st.change != nil {
			st.change()
		}
		bits, cniErr := s.prefix(ctx, "ns", "blue", st.created)
		if (cniErr != nil) != st.wantErr || bits != st.wantBits || gets != st.wantGets {
			t.Errorf("%s: prefix %d, error %v, %d reads; want %d, error %t, %d reads", st.name, bits, cniErr, gets, st.wantBits, st.wantErr, st.wantGets)
		}
	}
}
