package agent_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kos-sdn/kos/components/agent/cniserver"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/cni"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
)

// TestIntegrationCNIStrayVeths runs an agent with its CNI server on a real
// KOS API and Open vSwitch: when a plugged pod's attachment is deleted
// under the live sandbox, the agent deletes the pod's veth with the port,
// so that another pod's attachment that gets the same address is plugged
// and carries traffic; a veth named as an attachment's interface that is
// no port of the switch (left while the agent was down) goes at the
// agent's next reconcile, and a veth of another name stays. A pod whose
// attachment is deleted and made again gets its interface back.
func TestIntegrationCNIStrayVeths(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	k := newAPI(t)
	const vni = 232
	k.subnet("blue", "10.232.0.0/24", vni)
	inst := ovsenv.StartT(t, ovsenv.Options{})
	newFabric := func() *ovs.Fabric {
		return ovs.New(ovs.Config{RunDir: inst.RunDir, DatapathType: "netdev", MTU: podMTU})
	}
	fab := newFabric()
	cfg := agentConfig(t, k.node("a"), hostA, fab)
	cfg.CNI = cniserver.Config{
		Socket:            filepath.Join(shortDir(t), "cni.sock"),
		Wait:              10 * time.Second,
		HostNetns:         "/run/netns/" + inst.Netns.Name,
		NoChecksumOffload: true,
	}
	first := startAgent(t, cfg)
	c := newCNIClient(t, cfg.CNI.Socket)
	poll.Until(t, settle, "the CNI server answers STATUS", func(context.Context) error {
		if _, err := os.Stat(cfg.CNI.Socket); err != nil {
			return err
		}
		if _, cniErr := c.do(cni.Request{Command: cni.CommandStatus}); cniErr != nil {
			return cniErr
		}
		return nil
	})
	hostLink := func(name string) (string, error) {
		return inst.Netns.Run(ctx, "ip", "-o", "-d", "link", "show", name)
	}

	shared := netip.MustParseAddr("10.232.0.10")
	at := fabric.LocalAttachment{VNI: vni, IP: shared}
	old := &sandbox{netns: ovsenv.NetnsT(t), pod: cni.Pod{Namespace: k.ns, Name: "old", UID: "uid-old"}, containerID: "c-old"}
	oldAtt := k.podAttachment(old.pod, k.node("a"), "blue", shared.String(), vni)
	c.mustSucceed(old.request(cni.CommandAdd))
	if out, err := hostLink(at.InterfaceName()); err != nil || !strings.Contains(out, "veth") {
		t.Fatalf("after ADD, %s is %q (%v), want the pod's veth", at.InterfaceName(), out, err)
	}

	// The attachment goes while the sandbox lives: its veth goes with the
	// port, and the pod's dead net1 with it.
	k.delete(oldAtt)
	poll.Until(t, settle, "the deleted attachment's veth to go", func(context.Context) error {
		if out, err := hostLink(at.InterfaceName()); err == nil {
			return fmt.Errorf("%s is still there: %s", at.InterfaceName(), out)
		}
		return nil
	})
	if out, err := old.netns.Run(ctx, "ip", "link", "show", "net1"); err == nil {
		t.Errorf("the old pod still has net1: %s", out)
	}

	// Another pod's attachment gets the address: its interface is made,
	// plugged, and carries traffic to a third pod.
	next := &sandbox{netns: ovsenv.NetnsT(t), pod: cni.Pod{Namespace: k.ns, Name: "next", UID: "uid-next"}, containerID: "c-next"}
	peer := &sandbox{netns: ovsenv.NetnsT(t), pod: cni.Pod{Namespace: k.ns, Name: "peer", UID: "uid-peer"}, containerID: "c-peer"}
	k.podAttachment(next.pod, k.node("a"), "blue", shared.String(), vni)
	k.podAttachment(peer.pod, k.node("a"), "blue", "10.232.0.11", vni)
	c.mustSucceed(next.request(cni.CommandAdd))
	c.mustSucceed(peer.request(cni.CommandAdd))
	poll.Until(t, settle, "the next pod pings the peer", func(ctx context.Context) error {
		_, err := next.netns.Run(ctx, "ping", "-c", "1", "-W", "1", "10.232.0.11")
		return err
	})

	// The next pod's attachment is deleted and made again, with another
	// address, under its live sandbox: the sandbox gets net1 back, with
	// the new address, without a CNI request.
	nextAtt := v1alpha1.AttachmentName(next.pod.Name, "net1")
	k.delete(nextAtt)
	poll.Until(t, settle, "the next pod's net1 to go with its attachment", func(ctx context.Context) error {
		if out, err := next.netns.Run(ctx, "ip", "link", "show", "net1"); err == nil {
			return fmt.Errorf("net1 is still there: %s", out)
		}
		return nil
	})
	k.podAttachment(next.pod, k.node("a"), "blue", "10.232.0.20", vni)
	poll.Until(t, settle, "the next pod's net1 back with its new address", func(ctx context.Context) error {
		out, err := next.netns.Run(ctx, "ip", "-o", "addr", "show", "net1")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "10.232.0.20/24") {
			return fmt.Errorf("net1 has %q, want 10.232.0.20/24", out)
		}
		return nil
	})
	poll.Until(t, settle, "the next pod pings the peer from its new address", func(ctx context.Context) error {
		_, err := next.netns.Run(ctx, "ping", "-c", "1", "-W", "1", "10.232.0.11")
		return err
	})
	if _, cniErr := c.do(next.request(cni.CommandCheck)); cniErr != nil {
		t.Errorf("CHECK of the next pod after its attachment came back: %v", cniErr)
	}

	// Veths left while the agent was down: one named as an attachment's
	// interface that no port holds goes, another stays.
	first.stop(t)
	stray := fabric.LocalAttachment{VNI: vni, IP: netip.MustParseAddr("10.232.0.99")}.InterfaceName()
	for i, name := range []string{stray, "keepme0"} {
		if _, err := inst.Netns.Run(ctx, "ip", "link", "add", name, "type", "veth", "peer", "name", fmt.Sprintf("peer%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Fabric = newFabric()
	startAgent(t, cfg)
	poll.Until(t, settle, "the stray veth to go at the reconcile", func(context.Context) error {
		if out, err := hostLink(stray); err == nil {
			return fmt.Errorf("%s is still there: %s", stray, out)
		}
		return nil
	})
	if _, err := hostLink("keepme0"); err != nil {
		t.Errorf("the veth of another name went: %v", err)
	}
	for _, p := range []*sandbox{next, peer} {
		if _, err := p.netns.Run(ctx, "ip", "link", "show", "net1"); err != nil {
			t.Errorf("pod %s lost net1 at the restart: %v", p.pod.Name, err)
		}
	}
	poll.Until(t, settle, "the next pod pings the peer after the restart", func(ctx context.Context) error {
		_, err := next.netns.Run(ctx, "ping", "-c", "1", "-W", "1", "10.232.0.11")
		return err
	})
}
