package e2e

// This file holds the live upgrade's steps after the upgrade, rollback with
// ours, downgrade with kOps's and uninstall, and its checks of what is
// installed: the install records, the agents' namespace, and the nodes' Open
// vSwitch adopted.

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/poll"
)

// backupClaim is kos-etcd's PersistentVolumeClaim of backups, and the
// name of the CronJob that writes it (0.3.0 added both).
const backupClaim = "kos-etcd-backup"

// testRollback rolls KOS back from lu.new to lu.old with ours, as
// docs/install.md says ("Rolling back a successful upgrade"), while the
// guests ping and the pods hold TCP connections across nodes, and pods, the
// pods on KOS networks (nil when lu.old has none: deleteAll removed them),
// ping and hold theirs: lu.old's channel is applied with
// --allow-downgrade; the backup claim stays with no step of ours (channels
// never prunes a claim its manifest does not mark deletable). No Subnet or
// attachment is lost or changes, no pod is cut off, traffic goes on as
// through the upgrade (the same limits and figures, named
// live-ours-rollback-*), the records and agents are lu.old's again; when
// lu.old has no backup CronJob, it is pruned and its claim kept.
func (lu *liveUpgrade) testRollback(t *testing.T, net *liveNetwork, pods *podsTest) {
	ctx := t.Context()
	if pods == nil {
		left, err := lu.network.NetworkV1alpha1().NetworkAttachments("").List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.PodUIDLabel})
		if err != nil {
			t.Fatal(err)
		}
		if len(left.Items) > 0 {
			t.Fatalf("attachment %s/%s of a pod on a KOS network is left before the rollback to %s, which has none", left.Items[0].Namespace, left.Items[0].Name, lu.old)
		}
	}
	before := net.snapshot(t)
	traffic := net.startTraffic(t)
	var podTraffic *podTraffic
	if pods != nil {
		podTraffic = lu.startPodTraffic(t, pods, upToGap)
	}

	began := time.Now()
	lu.channelsProcess(t, "apply", "channel", lu.https.URL+lu.oldChannel, "--allow-downgrade", "--yes", "--timeout=8m")
	lu.waitKOSReady(t, 8*time.Minute)
	lu.awaitAgents(t, lu.old)
	figures.Duration(t, "live-ours-rollback-to-ready", time.Since(began))
	rolled := time.Now()
	time.Sleep(10 * time.Second)
	traffic.check(t, "ours-rollback", rolled)
	if podTraffic != nil {
		podTraffic.check(t, "ours-rollback-pods")
	}

	lu.checkInstalled(t, lu.oldChannel, kosinstall.AgentNamespace)
	net.checkKept(t, before)
	lu.checkAdopted(t, before)
	if !lu.releaseHas(t, lu.old, "CronJob", backupClaim) {
		if _, err := lu.kube.BatchV1().CronJobs(kosinstall.Namespace).Get(ctx, backupClaim, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("CronJob %s after the rollback to %s: %v, want it pruned", backupClaim, lu.old, err)
		}
	}
	if _, err := lu.kube.CoreV1().PersistentVolumeClaims(kosinstall.Namespace).Get(ctx, backupClaim, metav1.GetOptions{}); err != nil {
		t.Errorf("PersistentVolumeClaim %s after the rollback to %s: %v, want it kept", backupClaim, lu.old, err)
	}
}

// testKOpsDowngrade applies lu.old's channel with kOps's own channels
// after it upgraded to lu.new, and checks what kOps does: its rule is that
// a release whose manifest hash differs from the record's replaces it,
// older or not, so it applies lu.old again and records it (docs/install.md says
// so). What becomes of the running SDN then is not checked.
func (lu *liveUpgrade) testKOpsDowngrade(t *testing.T) {
	lu.kopsApply(t, lu.oldChannel)
	lu.checkRecords(t, lu.oldChannel, ": kOps's channels applied it over "+lu.new)
	if _, err := lu.kube.AppsV1().DaemonSets(kosinstall.AgentNamespace).Get(t.Context(), "kos-agent", metav1.GetOptions{}); err != nil {
		t.Errorf("the %s agent's DaemonSet after kOps's channels applied the %s channel: %v; want it applied again", lu.old, lu.old, err)
	}
}

// selected returns the releases the channel at the tree's path rel offers
// this cluster.
func (lu *liveUpgrade) selected(t *testing.T, rel string) []*channels.Addon {
	t.Helper()
	releases, err := channels.Load(t.Context(), channels.NewFetcher(), filepath.Join(lu.tree, rel))
	if err != nil {
		t.Fatal(err)
	}
	return channels.Select(releases, lu.server)
}

// checkRecords checks that the install records are the releases the
// channel at the tree's path rel offers this cluster; why, if not empty,
// says why they should be.
func (lu *liveUpgrade) checkRecords(t *testing.T, rel, why string) {
	t.Helper()
	want := map[string]string{}
	for _, a := range lu.selected(t, rel) {
		want[a.Name] = a.ManifestHash
	}
	got := map[string]string{}
	for name, r := range lu.listRecords(t) {
		if _, ok := want[name]; ok {
			got[name] = r.ManifestHash
		}
	}
	if !maps.EqualFunc(want, got, strings.EqualFold) {
		t.Errorf("install records: manifest hashes %v, want %v, of %s%s", got, want, rel, why)
	}
}

// pairWatch is a ping watch between two guests.
type pairWatch struct {
	from, to *kosinstall.Guest
	watch    *kosinstall.PingWatch
	stats    kosinstall.PingStats
}

// checkInstalled checks that the install records are the releases the
// channel at the tree's path rel offers this cluster, and that the agent
// runs in namespace agentNS.
func (lu *liveUpgrade) checkInstalled(t *testing.T, rel, agentNS string) {
	t.Helper()
	lu.checkRecords(t, rel, "")
	// Readiness is a probe's last answer, which a loaded machine may fail
	// once: every agent must be ready again within a few probe periods,
	// not at the instant of the check.
	poll.Until(t, time.Minute, "every agent of DaemonSet "+agentNS+"/kos-agent to be ready", func(ctx context.Context) error {
		ds, err := lu.kube.AppsV1().DaemonSets(agentNS).Get(ctx, "kos-agent", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ds.Status.NumberReady != int32(len(lu.env.Nodes)) {
			return fmt.Errorf("%d ready, want %d", ds.Status.NumberReady, len(lu.env.Nodes))
		}
		return nil
	})
}

// checkAdopted checks that the lu.new agents program the nodes' own Open
// vSwitch: its bridge kos still holds the attachments' ports, and no Open
// vSwitch of the pod runs beside it.
func (lu *liveUpgrade) checkAdopted(t *testing.T, atts map[string]attachmentState) {
	t.Helper()
	for _, n := range lu.env.Nodes {
		if _, err := os.Stat(filepath.Join(n.HostPath("/var/run/kos/openvswitch"), "db.sock")); err == nil {
			t.Errorf("node %s: an Open vSwitch of the agent's pod runs beside the node's own", n.Name)
		}
		cmd := exec.CommandContext(t.Context(), "ovs-vsctl", "--timeout=20", "list-ports", "kos")
		cmd.Env = append(os.Environ(), "OVS_RUNDIR="+n.OVSRunDir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("node %s: ovs-vsctl list-ports kos: %v: %s", n.Name, err, out)
		}
		ports := strings.Fields(string(out))
		for name, a := range atts {
			if a.node == n.Name && !slices.Contains(ports, a.ifcName) {
				t.Errorf("node %s: bridge kos of the node's own Open vSwitch lacks %s's port %s: %v", n.Name, name, a.ifcName, ports)
			}
		}
	}
}

// testUninstall deletes etcd's claims, the KOS addons with our channels,
// their namespaces and the nodes' bridge kos, and gives etcd fresh volumes, so that the next
// install starts from nothing.
func (lu *liveUpgrade) testUninstall(t *testing.T) {
	ctx := t.Context()
	began := time.Now()
	// channels keeps the claims (the KOS API's data and its backups) and
	// with them their namespace; this test throws them away, as
	// docs/install.md's uninstall says to by hand. Claims being deleted
	// hold no namespace.
	if err := lu.kube.CoreV1().PersistentVolumeClaims(kosinstall.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	lu.channelsCLI(t, "delete", "addon", "kos-agent", "kos-controller-manager", "kos-apiserver", "kos-etcd", "--include-namespaces", "--include-crds", "--yes")
	poll.Until(t, 4*time.Minute, "the KOS namespaces to be gone", func(ctx context.Context) error {
		for _, ns := range kosinstall.Namespaces() {
			if _, err := lu.kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("namespace %s: %v", ns, err)
			}
		}
		return nil
	})
	for _, n := range lu.env.Nodes {
		name := "local-" + n.Name
		if err := lu.kube.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		poll.Until(t, time.Minute, "PersistentVolume "+name+" to be gone", func(ctx context.Context) error {
			_, err := lu.kube.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there: %v", err)
		})
		if err := os.RemoveAll(filepath.Join(n.HostPath(kosinstall.VolumesDir), name)); err != nil {
			t.Fatal(err)
		}
		if n.OVSRunDir != "" {
			cmd := exec.CommandContext(ctx, "ovs-vsctl", "--timeout=20", "--if-exists", "del-br", "kos")
			cmd.Env = append(os.Environ(), "OVS_RUNDIR="+n.OVSRunDir)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("node %s: ovs-vsctl del-br kos: %v: %s", n.Name, err, out)
			}
		}
		// The database of the Open vSwitch the agent's pod ran, which
		// outlives the pod on the node.
		if err := os.RemoveAll(n.HostPath(agentOVSDBDir)); err != nil {
			t.Fatal(err)
		}
	}
	lu.provideVolumes(t)
	figures.Duration(t, "live-uninstall", time.Since(began))
}
