package e2e

// This file holds TestIntegrationKOS's attachment steps: a subnet and two
// attachments addressed by the controllers and implemented by the agent, the
// MAC the design gives them, and their state kept while every KOS workload's
// pod is deleted and comes back.

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/poll"
)

// testAttachments creates a subnet and two attachments on the node: the
// controllers validate the subnet and address the attachments, the agent
// pod implements them in the node's Open vSwitch and reports their
// interfaces.
func (k *kos) testAttachments(t *testing.T) {
	ctx := t.Context()
	ns := "e2e"
	if _, err := k.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	subnet := &networkv1alpha1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Name: "blue"},
		Spec:       networkv1alpha1.SubnetSpec{IPv4: "10.240.0.0/24", VNI: 4097},
	}
	created, err := k.kos.NetworkV1alpha1().Subnets(ns).Create(ctx, subnet, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a subnet through the aggregator: %v", err)
	}
	k.subnet = created
	for _, name := range []string{"a1", "a2"} {
		att := &networkv1alpha1.NetworkAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       networkv1alpha1.NetworkAttachmentSpec{Node: k.env.Nodes[0].Name, Subnet: subnet.Name},
		}
		if _, err := k.kos.NetworkV1alpha1().NetworkAttachments(ns).Create(ctx, att, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, time.Minute, "the subnet to be validated", func(context.Context) error {
		s, err := k.kos.NetworkV1alpha1().Subnets(ns).Get(ctx, subnet.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !s.Status.Validated {
			return fmt.Errorf("subnet %s not validated: %v", s.Name, s.Status.Errors)
		}
		k.subnet = s
		return nil
	})
	cidr := netip.MustParsePrefix(subnet.Spec.IPv4)
	poll.Until(t, time.Minute, "the attachments to be addressed and implemented", func(context.Context) error {
		list, err := k.kos.NetworkV1alpha1().NetworkAttachments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != 2 {
			return fmt.Errorf("%d attachments, want 2", len(list.Items))
		}
		k.attachments = nil
		for i := range list.Items {
			a := &list.Items[i]
			st := a.Status
			if st.IPv4 == "" || st.IfcName == "" || st.MACAddress == "" || st.HostIP == "" {
				return fmt.Errorf("attachment %s: ipv4 %q, ifcName %q, macAddress %q, hostIP %q, errors %+v",
					a.Name, st.IPv4, st.IfcName, st.MACAddress, st.HostIP, st.Errors)
			}
			k.attachments = append(k.attachments, a)
		}
		return nil
	})
	if k.attachments[0].Status.IPv4 == k.attachments[1].Status.IPv4 {
		t.Errorf("both attachments have address %s", k.attachments[0].Status.IPv4)
	}
	for _, a := range k.attachments {
		st := a.Status
		ip, err := netip.ParseAddr(st.IPv4)
		if err != nil || !cidr.Contains(ip) {
			t.Errorf("attachment %s: address %q is not in %s", a.Name, st.IPv4, cidr)
			continue
		}
		if st.AddressVNI != subnet.Spec.VNI {
			t.Errorf("attachment %s: addressVNI %d, want %d", a.Name, st.AddressVNI, subnet.Spec.VNI)
		}
		mac := wantMAC(subnet.Spec.VNI, ip)
		if st.MACAddress != mac.String() {
			t.Errorf("attachment %s: macAddress %s, want %s", a.Name, st.MACAddress, mac)
		}
		if want := "kos" + strings.ReplaceAll(mac.String(), ":", ""); st.IfcName != want {
			t.Errorf("attachment %s: ifcName %s, want %s", a.Name, st.IfcName, want)
		}
		if st.HostIP != k.env.Nodes[0].IP.String() {
			t.Errorf("attachment %s: hostIP %s, want the node's %s", a.Name, st.HostIP, k.env.Nodes[0].IP)
		}
		// The interface is a port of the node's bridge, and a network
		// interface in the node's network namespace.
		if got := k.ovs(t, "get", "Interface", st.IfcName, "mac_in_use"); strings.Trim(got, `"`) != st.MACAddress {
			t.Errorf("interface %s in the node's Open vSwitch: MAC %s, want %s", st.IfcName, got, st.MACAddress)
		}
		if out, err := exec.CommandContext(t.Context(), "ip", "netns", "exec", k.env.Nodes[0].Netns, "ip", "link", "show", st.IfcName).CombinedOutput(); err != nil {
			t.Errorf("interface %s in the node's network namespace: %v: %s", st.IfcName, err, out)
		}
	}
	out := k.kubectl(t, "get", "networkattachments", "-n", ns, "-o", "name")
	if got, want := strings.Fields(out), []string{"networkattachment.network.example.com/a1", "networkattachment.network.example.com/a2"}; !slices.Equal(got, want) {
		t.Errorf("kubectl get networkattachments: got %v, want %v", got, want)
	}
}

// wantMAC is the MAC the design gives an attachment: byte 0 from the VNI's
// top bits and the address's first byte, then the address's last three
// bytes and the VNI's low two bytes.
func wantMAC(vni uint32, ip netip.Addr) net.HardwareAddr {
	b := ip.As4()
	return net.HardwareAddr{byte(vni>>13)&0xF8 | (b[0]&2)<<1 | 2, b[1], b[2], b[3], byte(vni >> 8), byte(vni)}
}

// testPodDeletion deletes a pod of each KOS workload: each comes back, and
// the KOS API still serves the subnet and the attachments, with their
// status, and the agent has their interfaces again.
func (k *kos) testPodDeletion(t *testing.T) {
	ctx := t.Context()
	pods, err := k.kube.CoreV1().Pods(kosinstall.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// One pod of each workload, the etcd member among them: the KOS API's
	// state lives in its data on the node.
	owners := map[string]bool{}
	deleted := map[types.UID]string{}
	pods.Items = slices.DeleteFunc(pods.Items, ofJob)
	for _, p := range pods.Items {
		owner := p.Name
		if ref := metav1.GetControllerOf(&p); ref != nil {
			owner = ref.Kind + "/" + ref.Name
		}
		if owners[owner] {
			continue
		}
		owners[owner] = true
		if err := k.kube.CoreV1().Pods(kosinstall.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deleted[p.UID] = p.Name
	}
	t.Logf("deleted pods %v", slices.Sorted(maps.Values(deleted)))
	poll.Until(t, 3*time.Minute, "as many KOS pods as before to be Ready, none of them a deleted one", func(context.Context) error {
		now, err := k.kube.CoreV1().Pods(kosinstall.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		ready := 0
		for _, p := range slices.DeleteFunc(now.Items, ofJob) {
			if name, ok := deleted[p.UID]; ok {
				return fmt.Errorf("pod %s is still there", name)
			}
			if podReady(&p) {
				ready++
			}
		}
		if ready != len(pods.Items) {
			return fmt.Errorf("%d of %d pods ready", ready, len(pods.Items))
		}
		return nil
	})
	k.waitKOSReady(t, time.Minute)

	// The state is intact, as the KOS API serves it.
	s, err := k.kos.NetworkV1alpha1().Subnets(k.subnet.Namespace).Get(ctx, k.subnet.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the subnet after the pods came back: %v", err)
	}
	if s.UID != k.subnet.UID || !s.Status.Validated {
		t.Errorf("the subnet after the pods came back: uid %s validated %t, want uid %s validated", s.UID, s.Status.Validated, k.subnet.UID)
	}
	poll.Until(t, time.Minute, "the attachments to be served as they were, and implemented again", func(context.Context) error {
		for _, a := range k.attachments {
			got, err := k.kos.NetworkV1alpha1().NetworkAttachments(a.Namespace).Get(ctx, a.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if got.UID != a.UID || got.Status.IPv4 != a.Status.IPv4 || got.Status.MACAddress != a.Status.MACAddress ||
				got.Status.IfcName != a.Status.IfcName || got.Status.HostIP != a.Status.HostIP {
				return fmt.Errorf("attachment %s: got uid %s %+v, want uid %s %+v", a.Name, got.UID, got.Status, a.UID, a.Status)
			}
			if _, err := k.ovsErr(t.Context(), "get", "Interface", a.Status.IfcName, "mac_in_use"); err != nil {
				return fmt.Errorf("attachment %s: interface %s: %w", a.Name, a.Status.IfcName, err)
			}
		}
		return nil
	})
	out := k.kubectl(t, "get", "subnets", "-n", k.subnet.Namespace, "-o", "name")
	if strings.TrimSpace(out) != "subnet.network.example.com/"+k.subnet.Name {
		t.Errorf("kubectl get subnets after the pods came back: %q", out)
	}
}
