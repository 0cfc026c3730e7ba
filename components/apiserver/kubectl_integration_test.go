package apiserver_test

// This file checks the API through kubectl: printer columns, the kos
// category, server-side apply and explain.

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

func testKubectl(t *testing.T, clients apiClients) {
	ctx := context.Background()
	ns := newNamespace(t)
	mustCreateSubnet(t, clients.direct, newSubnet(ns, "s1", "10.80.0.0/16", 80))
	a := mustCreateAttachment(t, clients.direct, newAttachment(ns, "a1", "node-1", "s1"))
	a.Status.IPv4, a.Status.MACAddress, a.Status.HostIP = "10.80.0.5", "06:00:50:00:05:00", "192.168.3.4"
	if _, err := clients.direct.NetworkV1alpha1().NetworkAttachments(ns).UpdateStatus(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting the attachment status: %v", err)
	}
	if _, err := clients.direct.NetworkV1alpha1().IPLocks(ns).Create(ctx, &v1alpha1.IPLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "v1-80-10-80-0-5"},
		Spec:       v1alpha1.IPLockSpec{SubnetName: "s1"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating an IP lock: %v", err)
	}
	cacheDir := filepath.Join(t.TempDir(), "kubectl-cache")

	table := func(args ...string) [][]string {
		out := kubectl(t, append([]string{"--cache-dir=" + cacheDir, "-n", ns, "get"}, args...)...)
		var rows [][]string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			fields := strings.Fields(line)
			// The age changes while the test runs.
			rows = append(rows, fields[:len(fields)-1])
		}
		return rows
	}
	tests := []struct {
		args []string
		want [][]string
	}{
		{[]string{"subnets"}, [][]string{{"NAME", "VNI", "CIDR", "VALIDATED"}, {"s1", "80", "10.80.0.0/16", "false"}}},
		{[]string{"sn"}, [][]string{{"NAME", "VNI", "CIDR", "VALIDATED"}, {"s1", "80", "10.80.0.0/16", "false"}}},
		// The MAC address is not the one of the address: no agent has set it up.
		{[]string{"na"}, [][]string{{"NAME", "SUBNET", "NODE", "IPV4", "MAC", "HOST", "IP", "READY"}, {"a1", "s1", "node-1", "10.80.0.5", "06:00:50:00:05:00", "192.168.3.4", "False"}}},
		{[]string{"na", "-o", "wide"}, [][]string{{"NAME", "SUBNET", "NODE", "IPV4", "MAC", "HOST", "IP", "READY", "REASON"}, {"a1", "s1", "node-1", "10.80.0.5", "06:00:50:00:05:00", "192.168.3.4", "False", "NotImplemented"}}},
		{[]string{"ipl"}, [][]string{{"NAME", "SUBNET", "OWNER"}, {"v1-80-10-80-0-5", "s1", "<none>"}}},
	}
	for _, tc := range tests {
		t.Run("get "+strings.Join(tc.args, " "), func(t *testing.T) {
			if diff := cmp.Diff(table(tc.args...), tc.want); diff != "" {
				t.Errorf("kubectl get %s (-got +want):\n%s", strings.Join(tc.args, " "), diff)
			}
		})
	}

	t.Run("get kos", func(t *testing.T) {
		out := kubectl(t, "--cache-dir="+cacheDir, "-n", ns, "get", "kos", "-o", "name")
		got := strings.Fields(out)
		slices.Sort(got)
		want := []string{
			"iplock.network.example.com/v1-80-10-80-0-5",
			"networkattachment.network.example.com/a1",
			"subnet.network.example.com/s1",
		}
		if diff := cmp.Diff(got, want); diff != "" {
			t.Errorf("kubectl get kos (-got +want):\n%s", diff)
		}
	})

	t.Run("apply --server-side", func(t *testing.T) {
		manifest := filepath.Join(t.TempDir(), "subnet.yaml")
		yaml := `apiVersion: network.example.com/v1alpha1
kind: Subnet
metadata:
  name: applied
  namespace: ` + ns + `
extendedMetadata:
  writes:
  - section: spec
    serverTime: "2001-01-01T00:00:00.000000Z"
spec:
  ipv4: 10.81.0.0/16
  vni: 81
status:
  validated: true
`
		if err := os.WriteFile(manifest, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		for range 2 { // the second apply is a no-op update
			kubectl(t, "--cache-dir="+cacheDir, "apply", "--server-side", "--field-manager=test", "-f", manifest)
		}
		got, err := clients.aggregated.NetworkV1alpha1().Subnets(ns).Get(ctx, "applied", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("getting the applied subnet: %v", err)
		}
		if got.Spec != (v1alpha1.SubnetSpec{IPv4: "10.81.0.0/16", VNI: 81}) {
			t.Errorf("applied spec = %+v", got.Spec)
		}
		if got.Status.Validated {
			t.Errorf("server-side apply validated the subnet")
		}
		if at, _ := got.ExtendedMetadata.Writes.Time(v1alpha1.SectionSpec); at.Year() == 2001 {
			t.Errorf("server-side apply forged the spec write time: %v", got.ExtendedMetadata.Writes)
		}
	})

	explains := []struct {
		field string
		want  []string
	}{
		{"subnets", []string{"KIND:       Subnet", "Subnet is a block of IPv4 addresses on a virtual network", "extendedMetadata"}},
		{"subnets.spec.vni", []string{"VXLAN network identifier", "[1,2097151]"}},
		{"networkattachments.status.addressVNI", []string{"VNI of the virtual network that the address lives on"}},
		{"networkattachments.extendedMetadata.writes", []string{"serverTime", "section"}},
		{"iplocks.spec.subnetName", []string{"name of the Subnet the address was taken from"}},
	}
	for _, tc := range explains {
		t.Run("explain "+tc.field, func(t *testing.T) {
			out := kubectlEventually(t, "--cache-dir="+cacheDir, "explain", tc.field)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("kubectl explain %s does not say %q:\n%s", tc.field, w, out)
				}
			}
		})
	}
}
