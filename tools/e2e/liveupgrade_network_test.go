package e2e

// This file holds the live upgrade's network: a namespace of subnets and
// attachments given to pods and guests, the snapshot and checks that nothing
// of it changed, and the trickle of attachment creates and deletes beside
// the upgrade.

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/poll"
)

// liveNetwork is a namespace of subnets and attachments with guests, on a
// liveUpgrade's cluster.
type liveNetwork struct {
	lu      *liveUpgrade
	ns      string
	subnets map[string]netip.Prefix
	guests  map[string]*kosinstall.Guest
}

// attachmentState is what must not change of an attachment.
type attachmentState struct {
	uid, node, ipv4, mac, ifcName, hostIP string
}

// newLiveNetwork makes namespace ns with subnets blue and red (other CIDRs
// and VNIs than the standard test's) and an attachment of each on every
// node: blue's are given to pods (podnet, on the cluster's primary network
// only), as under 0.2.0, which has no CNI plugin, a workload got its KOS
// interface (kosinstall.PlumbPod); red's to guests, namespaces of the test.
func (lu *liveUpgrade) newLiveNetwork(t *testing.T, ns string) *liveNetwork {
	ctx := t.Context()
	net := &liveNetwork{lu: lu, ns: ns, subnets: map[string]netip.Prefix{}, guests: map[string]*kosinstall.Guest{}}
	if _, err := lu.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]struct {
		cidr string
		vni  uint32
	}{"blue": {"10.252.0.0/22", 4201}, "red": {"10.253.0.0/24", 4202}} {
		subnet := &networkv1alpha1.Subnet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkv1alpha1.SubnetSpec{IPv4: s.cidr, VNI: s.vni}}
		poll.Until(t, time.Minute, "creating subnet "+name, func(ctx context.Context) error {
			_, err := lu.network.NetworkV1alpha1().Subnets(ns).Create(ctx, subnet, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		})
		net.subnets[name] = netip.MustParsePrefix(s.cidr)
	}
	for i, n := range lu.env.Nodes {
		for _, subnet := range []string{"blue", "red"} {
			net.create(t, fmt.Sprintf("%s-%d", subnet, i+1), subnet, n.Name)
		}
		net.createPod(t, fmt.Sprintf("blue-%d", i+1), n.Name)
	}
	for i := range lu.env.Nodes {
		for _, subnet := range []string{"blue", "red"} {
			net.plumb(t, fmt.Sprintf("%s-%d", subnet, i+1))
		}
	}
	return net
}

// create creates an attachment, trying again while the KOS API fails.
func (net *liveNetwork) create(t *testing.T, name, subnet, node string) {
	t.Helper()
	att := &networkv1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       networkv1alpha1.NetworkAttachmentSpec{Node: node, Subnet: subnet},
	}
	poll.Until(t, time.Minute, "creating attachment "+name, func(ctx context.Context) error {
		_, err := net.lu.network.NetworkV1alpha1().NetworkAttachments(net.ns).Create(ctx, att, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

// createPod creates a podnet pod on node, on the cluster's primary network
// only.
func (net *liveNetwork) createPod(t *testing.T, name, node string) {
	t.Helper()
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			AutomountServiceAccountToken:  new(bool),
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{{Name: "podnet", Image: net.lu.podImage, ImagePullPolicy: corev1.PullIfNotPresent}},
		},
	}
	if _, err := net.lu.kube.CoreV1().Pods(net.ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
}

// plumb waits until the attachment is ready and gives its interface to a
// guest: its pod, on blue.
func (net *liveNetwork) plumb(t *testing.T, name string) {
	t.Helper()
	poll.Until(t, 2*time.Minute, "attachment "+name+" to be ready and given to its guest", func(ctx context.Context) error {
		att, err := net.lu.network.NetworkV1alpha1().NetworkAttachments(net.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := attachmentReady(att); err != nil {
			return err
		}
		node := net.lu.node(t, att.Spec.Node)
		subnet := net.subnets[att.Spec.Subnet]
		var g *kosinstall.Guest
		if att.Spec.Subnet == "blue" {
			pod, perr := net.lu.kube.CoreV1().Pods(net.ns).Get(ctx, name, metav1.GetOptions{})
			if perr != nil {
				return perr
			}
			if !podReady(pod) {
				return fmt.Errorf("pod %s is not ready: %s", name, pod.Status.Phase)
			}
			g, err = kosinstall.PlumbPod(ctx, node.Netns, pod, att, subnet)
		} else {
			g, err = kosinstall.PlumbGuest(ctx, node.Netns, guestPrefix+net.ns[len("e2e-live-"):]+"-"+name, att, subnet)
		}
		if err != nil {
			return err
		}
		net.guests[name] = g
		return nil
	})
}

// attachmentReady returns nil when the attachment has its address and its
// interface on its node.
func attachmentReady(att *networkv1alpha1.NetworkAttachment) error {
	st := att.Status
	if st.IPv4 == "" || st.IfcName == "" || st.HostIP == "" || st.MACAddress == "" {
		return fmt.Errorf("attachment %s: ipv4 %q, ifcName %q, hostIP %q, mac %q, errors %+v", att.Name, st.IPv4, st.IfcName, st.HostIP, st.MACAddress, st.Errors)
	}
	return nil
}

// guestsOf returns the guests of a subnet's attachments, in node order.
func (net *liveNetwork) guestsOf(subnet string) []*kosinstall.Guest {
	var out []*kosinstall.Guest
	for i := range net.lu.env.Nodes {
		out = append(out, net.guests[fmt.Sprintf("%s-%d", subnet, i+1)])
	}
	return out
}

// snapshot returns the state of the namespace's attachments by name, and
// checks that both subnets are there.
func (net *liveNetwork) snapshot(t *testing.T) map[string]attachmentState {
	t.Helper()
	atts, err := net.lu.network.NetworkV1alpha1().NetworkAttachments(net.ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]attachmentState{}
	for _, a := range atts.Items {
		if strings.HasPrefix(a.Name, "trickle-") {
			continue
		}
		out[a.Name] = attachmentState{uid: string(a.UID), node: a.Spec.Node, ipv4: a.Status.IPv4, mac: a.Status.MACAddress, ifcName: a.Status.IfcName, hostIP: a.Status.HostIP}
	}
	return out
}

// checkKept checks that the subnets and every attachment of before are
// there, the same objects with the same addresses and interfaces.
func (net *liveNetwork) checkKept(t *testing.T, before map[string]attachmentState) {
	t.Helper()
	subnets, err := net.lu.network.NetworkV1alpha1().Subnets(net.ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(subnets.Items) != len(net.subnets) {
		t.Errorf("%d subnets in %s after the upgrade, want %d", len(subnets.Items), net.ns, len(net.subnets))
	}
	var after map[string]attachmentState
	poll.Until(t, 2*time.Minute, "every attachment to be ready", func(ctx context.Context) error {
		after = net.snapshot(t)
		for name, a := range after {
			if a.ifcName == "" || a.hostIP == "" || a.ipv4 == "" {
				return fmt.Errorf("attachment %s not ready: %+v", name, a)
			}
		}
		return nil
	})
	for name, b := range before {
		a, ok := after[name]
		switch {
		case !ok:
			t.Errorf("attachment %s lost in the upgrade", name)
		case a != b:
			t.Errorf("attachment %s changed in the upgrade: %+v, was %+v", name, a, b)
		}
	}
}

// deleteGuests deletes the network's guest namespaces and its pods (not
// waiting for them to go).
func (net *liveNetwork) deleteGuests(t *testing.T) {
	for _, g := range net.guests {
		if err := g.Delete(); err != nil {
			t.Error(err)
		}
	}
	if err := net.lu.kube.CoreV1().Pods(net.ns).DeleteCollection(t.Context(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Error(err)
	}
}

// trickle creates an attachment every liveTrickleEvery, round the nodes,
// and deletes its oldest beyond liveTrickleLive, until stop.
type trickle struct {
	net  *liveNetwork
	quit chan struct{}
	done chan struct{}
	stop func()

	// Written by the trickle's goroutine until done is closed.
	created, deleted, failed int
	live                     []string
	lastErr                  error
}

func (tr *trickle) String() string {
	return fmt.Sprintf("%d attachments created, %d deleted, %d writes failed (and were tried again; last: %v), %d left", tr.created, tr.deleted, tr.failed, tr.lastErr, len(tr.live))
}

func (net *liveNetwork) startTrickle(t *testing.T) *trickle {
	tr := &trickle{net: net, quit: make(chan struct{}), done: make(chan struct{})}
	tr.stop = sync.OnceFunc(func() {
		close(tr.quit)
		<-tr.done
	})
	client := net.lu.network.NetworkV1alpha1().NetworkAttachments(net.ns)
	nodes := net.lu.env.Nodes
	go func() {
		defer close(tr.done)
		ticker := time.NewTicker(liveTrickleEvery)
		defer ticker.Stop()
		next := 0 // the next attachment to create, until it is
		for {
			select {
			case <-tr.quit:
				return
			case <-ticker.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			name := fmt.Sprintf("trickle-%d", next)
			att := &networkv1alpha1.NetworkAttachment{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec:       networkv1alpha1.NetworkAttachmentSpec{Node: nodes[next%len(nodes)].Name, Subnet: "blue"},
			}
			if _, err := client.Create(ctx, att, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				tr.failed++
				tr.lastErr = err
			} else {
				tr.created++
				tr.live = append(tr.live, name)
				next++
			}
			if len(tr.live) > liveTrickleLive {
				err := client.Delete(ctx, tr.live[0], metav1.DeleteOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					tr.failed++
					tr.lastErr = err
				} else {
					tr.deleted++
					tr.live = tr.live[1:]
				}
			}
			cancel()
		}
	}()
	return tr
}

// checkReady checks, once the trickle stopped, that its attachments left
// become ready and those it deleted are gone.
func (tr *trickle) checkReady(t *testing.T) {
	t.Helper()
	if tr.created < 10 {
		t.Errorf("the trickle created only %d attachments", tr.created)
	}
	client := tr.net.lu.network.NetworkV1alpha1().NetworkAttachments(tr.net.ns)
	poll.Until(t, 2*time.Minute, "the trickle's attachments to be ready, and only those", func(ctx context.Context) error {
		list, err := client.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var names []string
		for _, a := range list.Items {
			if !strings.HasPrefix(a.Name, "trickle-") {
				continue
			}
			names = append(names, a.Name)
			if err := attachmentReady(&a); err != nil {
				return err
			}
		}
		slices.Sort(names)
		want := slices.Sorted(slices.Values(tr.live))
		if !slices.Equal(names, want) {
			return fmt.Errorf("trickle attachments %v, want %v", names, want)
		}
		return nil
	})
}
