package e2e

// This file holds the chaos step's checks of what a kill left behind: no
// address held twice in a VNI, every IPLock held by its attachment and every
// address locked, and every node's switch holding exactly the ports and
// flows of the attachments there are.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/controllers/ipam"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/poll"
)

// checkAftermath checks, when says with what, that no two attachments of a
// VNI share an address, that every attachment is ready, that every IPLock
// belongs to the attachment that holds its address and every address has
// its lock, and that every node's switch holds exactly the ports and flows
// of the attachments there are. The last two may take a moment to settle
// after the churn; not settling within a minute is a failure.
func (s *standard) checkAftermath(t *testing.T, when string) {
	if err := s.duplicateAddresses(t); err != nil {
		t.Fatal(err)
	}
	figures.Count(t, "chaos-duplicate-addresses", 0, "addresses")
	poll.Until(t, 2*time.Minute, "every attachment ready "+when, func(ctx context.Context) error {
		list, err := s.network.NetworkV1alpha1().NetworkAttachments("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var errs []error
		for _, a := range list.Items {
			errs = append(errs, attachmentUsable(&a))
		}
		return errors.Join(errs...)
	})
	poll.Until(t, time.Minute, "no leaked or missing IPLock "+when, s.lockProblems)
	figures.Count(t, "chaos-leaked-iplocks", 0, "locks")
	poll.Until(t, time.Minute, "no stale or missing port or flow on any node "+when, func(ctx context.Context) error {
		list, err := s.network.NetworkV1alpha1().NetworkAttachments("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var errs []error
		for _, n := range s.env.Nodes {
			errs = append(errs, fabricProblems(ctx, n, list.Items))
		}
		return errors.Join(errs...)
	})
	figures.Count(t, "chaos-stale-flows-or-ports", 0, "flows")
	if err := s.duplicateAddresses(t); err != nil {
		t.Fatal(err)
	}
}

// duplicateAddresses returns an error naming every address that two
// attachments of one VNI hold, nil when there is none.
func (s *standard) duplicateAddresses(t *testing.T) error {
	holders := map[string][]string{}
	for _, a := range s.allAttachments(t) {
		if a.Status.IPv4 != "" {
			addr := fmt.Sprintf("%d/%s", a.Status.AddressVNI, a.Status.IPv4)
			holders[addr] = append(holders[addr], a.Namespace+"/"+a.Name)
		}
	}
	var dups []string
	for addr, names := range holders {
		if len(names) > 1 {
			dups = append(dups, fmt.Sprintf("%s held by %v", addr, names))
		}
	}
	if len(dups) > 0 {
		slices.Sort(dups)
		return fmt.Errorf("%d duplicate addresses: %s", len(dups), strings.Join(dups, "; "))
	}
	return nil
}

// allAttachments lists the attachments of every namespace. Right after a
// kill the main kube-apiserver may answer 503 for a moment while its
// aggregator catches up with the restarted replica (see apiSteady); a list
// that fails is tried again for up to a minute, each failure logged.
func (s *standard) allAttachments(t *testing.T) []networkv1alpha1.NetworkAttachment {
	t.Helper()
	var list *networkv1alpha1.NetworkAttachmentList
	poll.Until(t, time.Minute, "the attachments listed", func(ctx context.Context) error {
		l, err := s.network.NetworkV1alpha1().NetworkAttachments("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("listing the attachments: %v", err)
			return err
		}
		list = l
		return nil
	})
	return list.Items
}

// lockProblems returns nil when every IPLock is held by the attachment
// that its controller owner reference names, and whose address (VNI and
// IPv4) its name encodes, and every attachment with an address has its
// lock; else an error naming every leaked and missing lock.
func (s *standard) lockProblems(ctx context.Context) error {
	atts, err := s.network.NetworkV1alpha1().NetworkAttachments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	locks, err := s.network.NetworkV1alpha1().IPLocks("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	byUID := map[string]*networkv1alpha1.NetworkAttachment{}
	for i, a := range atts.Items {
		byUID[string(a.UID)] = &atts.Items[i]
	}
	var problems []string
	locked := map[string]bool{}
	for _, l := range locks.Items {
		owner := metav1.GetControllerOf(&l)
		var att *networkv1alpha1.NetworkAttachment
		if owner != nil {
			att = byUID[string(owner.UID)]
		}
		vni, ip, err := ipam.ParseLockName(l.Name)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("IPLock %s/%s: %v", l.Namespace, l.Name, err))
		case att == nil || att.Namespace != l.Namespace || att.Name != owner.Name:
			problems = append(problems, fmt.Sprintf("IPLock %s/%s leaked: its owner %v does not exist", l.Namespace, l.Name, owner))
		case att.Status.AddressVNI != vni || att.Status.IPv4 != ip.String() || att.Status.LockUID != string(l.UID):
			problems = append(problems, fmt.Sprintf("IPLock %s/%s leaked: its owner %s holds %d/%s with lock %s", l.Namespace, l.Name, att.Name, att.Status.AddressVNI, att.Status.IPv4, att.Status.LockUID))
		default:
			locked[string(att.UID)] = true
		}
	}
	for _, a := range atts.Items {
		if a.Status.IPv4 != "" && !locked[string(a.UID)] {
			problems = append(problems, fmt.Sprintf("attachment %s/%s holds %d/%s without its IPLock", a.Namespace, a.Name, a.Status.AddressVNI, a.Status.IPv4))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d IPLock problems: %s", len(problems), strings.Join(problems, "; "))
	}
	return nil
}

// fabricProblems returns nil when node's switch holds exactly what the
// attachments call for: a whole local attachment (interface and flows) for
// each of the node's attachments with an address, the flows of a whole
// remote attachment towards its node for each attachment of another node
// in a network that has one of the node's, and nothing else: no other port
// on the bridge and no other flow. Otherwise its error lists what is stale
// and what is missing.
func fabricProblems(ctx context.Context, node *cluster.Node, atts []networkv1alpha1.NetworkAttachment) error {
	type network struct {
		namespace string
		vni       uint32
	}
	relevant := map[network]bool{}
	wantPorts := []string{ovs.TunnelPort}
	var wantLocal, wantRemote []string
	for _, a := range atts {
		ip, err := netip.ParseAddr(a.Status.IPv4)
		if err != nil || a.Spec.Node != node.Name {
			continue
		}
		relevant[network{a.Namespace, a.Status.AddressVNI}] = true
		l := fabric.LocalAttachment{VNI: a.Status.AddressVNI, IP: ip}
		wantLocal = append(wantLocal, l.String())
		wantPorts = append(wantPorts, l.InterfaceName())
	}
	for _, a := range atts {
		ip, err := netip.ParseAddr(a.Status.IPv4)
		host, herr := netip.ParseAddr(a.Status.HostIP)
		if err != nil || herr != nil || a.Spec.Node == node.Name || !relevant[network{a.Namespace, a.Status.AddressVNI}] {
			continue
		}
		wantRemote = append(wantRemote, fabric.RemoteAttachment{VNI: a.Status.AddressVNI, IP: ip, HostIP: host}.String())
	}
	runDir := node.HostPath(agentOVSRunDir)
	inv, err := ovs.New(ovs.Config{RunDir: runDir, Timeout: 20 * time.Second}).List(ctx)
	if err != nil {
		return fmt.Errorf("node %s: %w", node.Name, err)
	}
	var problems []string
	compare := func(what string, got, want []string) {
		slices.Sort(got)
		slices.Sort(want)
		for _, g := range got {
			if !slices.Contains(want, g) {
				problems = append(problems, "stale "+what+" "+g)
			}
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				problems = append(problems, "missing "+what+" "+w)
			}
		}
	}
	compare("local attachment", stringsOf(inv.Local), wantLocal)
	compare("remote attachment", stringsOf(inv.Remote), wantRemote)
	compare("partial local attachment", stringsOf(inv.PartialLocal), nil)
	compare("partial remote attachment", stringsOf(inv.PartialRemote), nil)

	// What the inventory does not see: ports and flows that name no
	// attachment.
	env := append(os.Environ(), "OVS_RUNDIR="+runDir)
	out, err := runEnv(ctx, env, "ovs-vsctl", "--timeout=20", "list-ports", ovs.DefaultBridge)
	if err != nil {
		return fmt.Errorf("node %s: %w", node.Name, err)
	}
	compare("port", strings.Fields(out), wantPorts)
	out, err = runEnv(ctx, env, "ovs-ofctl", "-O", "OpenFlow14", "dump-flows", ovs.DefaultBridge)
	if err != nil {
		return fmt.Errorf("node %s: %w", node.Name, err)
	}
	flows := 0
	for line := range strings.SplitSeq(out, "\n") {
		if !strings.Contains(line, "cookie=") {
			continue
		}
		flows++
		if !strings.Contains(line, "cookie=0x6b") {
			problems = append(problems, "flow of no KOS attachment: "+strings.TrimSpace(line))
		}
	}
	// The default flows, then four per local and three per remote
	// attachment (components/fabric/ovs/flows.go).
	if want := 4 + 4*len(wantLocal) + 3*len(wantRemote); flows != want {
		problems = append(problems, fmt.Sprintf("%d flows, want %d", flows, want))
	}
	if len(problems) > 0 {
		return fmt.Errorf("node %s: %s", node.Name, strings.Join(problems, "; "))
	}
	return nil
}

func stringsOf[S fmt.Stringer](list []S) []string {
	out := make([]string, 0, len(list))
	for _, x := range list {
		out = append(out, x.String())
	}
	return out
}

// runEnv runs name with args and environment env and returns its standard
// output; the error holds its standard error.
func runEnv(ctx context.Context, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}
