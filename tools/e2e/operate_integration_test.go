package e2e

// This file holds TestIntegrationOperate's state (the test is declared in
// shared_tests_integration_test.go, in the order the shared cluster runs its
// tests), its network step, the listing of objects the steps compare before
// and after, and the uninstall with each node's host state before and after.
// The backup and restore are in operate_backup_test.go; the KOS API's
// outages in operate_apidown_test.go; the configured release in
// configured_operate_test.go.

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/ovsenv"
)

// What the operations test uses besides the standard test's names.
const (
	// backupBucket and backupPrefix are where the backups go: the names
	// docs/backup.md's commands use, so that they run as written.
	backupBucket = "kos-backups"
	backupPrefix = "cluster-a/"
	// backupVolume is the local volume the backup claim binds to.
	backupVolume = "local-backups"
	// doomedNamespace, with a Subnet, and emptyNamespace, with nothing,
	// are deleted while the KOS API is down.
	doomedNamespace = "e2e-operate-doomed"
	emptyNamespace  = "e2e-operate-empty"
	// agentLivenessWindow is how long the agent's liveness probe lets a
	// failing agent run (addons/kos-agent/0.3.0.yaml: every 10 s, 3
	// failures).
	agentLivenessWindow = 30 * time.Second
)

// operate is the operations test's state.
type operate struct {
	*standard
	// channels are the installed release's channels.
	channels []string
	// hostsBefore is each node's hostState before the install, by name.
	hostsBefore map[string]string
}

// testNetwork makes subnet blue with an attachment on every node, each
// given to a guest, and checks they ping each other.
func (o *operate) testNetwork(t *testing.T) {
	ctx := t.Context()
	if _, err := o.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: standardNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const cidr = "10.253.0.0/24"
	subnet := &networkv1alpha1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Name: "blue"},
		Spec:       networkv1alpha1.SubnetSpec{IPv4: cidr, VNI: 4301},
	}
	if _, err := o.network.NetworkV1alpha1().Subnets(standardNamespace).Create(ctx, subnet, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	o.subnets["blue"] = netip.MustParsePrefix(cidr)
	for i, n := range o.env.Nodes {
		o.plumb(t, o.attach(t, fmt.Sprintf("blue-%d", i+1), "blue", n.Name))
	}
	checkPings(t, o.guestsOf("blue"), 3, 1, time.Minute)
}

// objects returns what must not change of every Subnet, NetworkAttachment
// and IPLock of namespace ("" for all), by kind/namespace/name.
func (o *operate) objects(t *testing.T, namespace string) map[string]string {
	t.Helper()
	ctx := t.Context()
	api := o.network.NetworkV1alpha1()
	out := map[string]string{}
	subnets, err := api.Subnets(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subnets.Items {
		out["Subnet/"+s.Namespace+"/"+s.Name] = fmt.Sprintf("uid %s, %s VNI %d", s.UID, s.Spec.IPv4, s.Spec.VNI)
	}
	atts, err := api.NetworkAttachments(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range atts.Items {
		st := a.Status
		out["NetworkAttachment/"+a.Namespace+"/"+a.Name] = fmt.Sprintf("uid %s, node %s, subnet %s, %s %s on %s at %s, lock %s",
			a.UID, a.Spec.Node, a.Spec.Subnet, st.IPv4, st.MACAddress, st.IfcName, st.HostIP, st.LockUID)
	}
	locks, err := api.IPLocks(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range locks.Items {
		owner := ""
		if ref := metav1.GetControllerOf(&l); ref != nil {
			owner = ref.Name + " " + string(ref.UID)
		}
		out["IPLock/"+l.Namespace+"/"+l.Name] = fmt.Sprintf("uid %s, subnet %s, owner %s", l.UID, l.Spec.SubnetName, owner)
	}
	return out
}

// testUninstall uninstalls KOS as docs/install.md's "Uninstalling" says,
// running its blocks as written (docrun): the attachments deleted while the
// agents run, the addons deleted, every node cleaned up by
// docs/examples/kos-node-cleanup.yaml with the release's kos-agent image
// (the page's KOS_AGENT_IMAGE), and the clean-up's objects deleted. Every node's host
// state is then what it was before the install.
func (o *operate) testUninstall(t *testing.T) {
	ctx := t.Context()
	began := time.Now()
	// The check sees what KOS did to each node.
	for _, n := range o.env.Nodes {
		if during := hostState(t, n); during == o.hostsBefore[n.Name] {
			t.Errorf("node %s with KOS installed is as before the install:\n%s", n.Name, during)
		}
	}
	ds, err := o.kube.AppsV1().DaemonSets(kosinstall.AgentNamespace).Get(ctx, "kos-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	image := ""
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "kos-agent" {
			image = c.Image
		}
	}
	o.kubectl(t, "delete", "networkattachments", "--all", "-n", standardNamespace, "--timeout=2m")
	o.kubectl(t, "delete", "namespace", standardNamespace, "--timeout=2m")

	// Steps 2 to 4 run as the page writes them, with the image the
	// release ran for the page's KOS_AGENT_IMAGE.
	page := filepath.Join(o.root, "docs", "install.md")
	blocks := o.runbook(t, page, "## Uninstalling")
	if len(blocks) != 3 {
		t.Fatalf("docs/install.md's Uninstalling has %d blocks to run, want 3 (the addons, the nodes, the clean-up's objects)", len(blocks))
	}
	o.runDoc(t, blocks[0])
	figures.Duration(t, "operate-addons-deleted", time.Since(began))
	// The page's sed replaces the example's image, whatever its version.
	example, err := os.ReadFile(filepath.Join(o.root, "docs", "examples", "kos-node-cleanup.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(example, []byte("image: kos.example.com/kos-agent:")) {
		t.Fatal("docs/examples/kos-node-cleanup.yaml names no kos.example.com/kos-agent image for the page's sed to replace")
	}
	o.runDocVars(t, map[string]string{"KOS_AGENT_IMAGE": image}, blocks[1])
	o.runDoc(t, blocks[2])
	figures.Duration(t, "operate-uninstall", time.Since(began))

	for _, n := range o.env.Nodes {
		if diff := cmp.Diff(hostState(t, n), o.hostsBefore[n.Name]); diff != "" {
			t.Errorf("node %s after the uninstall differs from before the install (-after +before):\n%s", n.Name, diff)
		}
	}
}

// hostPathsKOSUses are the node paths KOS writes to: the CNI plugin, the
// agent's sockets and run dirs, kos-ovs's database, and the node's Open
// vSwitch run dir the agent's pod mounts.
var hostPathsKOSUses = []string{"/opt/cni/bin/kos", "/var/run/kos", "/var/lib/kos", "/var/run/openvswitch"}

// hostState describes what of node n KOS may change: its network
// namespace's interfaces (but those of the cluster's own CNI, bridge cni0
// and its pods' veths, which come and go with pods) with their addresses,
// its IPv4 routes (but cni0's), and the files under hostPathsKOSUses (an
// empty folder counts as none).
func hostState(t *testing.T, n *cluster.Node) string {
	t.Helper()
	ctx := t.Context()
	var b strings.Builder
	node := &ovsenv.Netns{Name: n.Netns}
	links, err := node.Run(ctx, "ip", "-o", "link", "show")
	if err != nil {
		t.Fatal(err)
	}
	ofCNI := map[string]bool{}
	for line := range strings.SplitSeq(strings.TrimSpace(links), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if name == "cni0" || strings.Contains(line, " master cni0 ") {
			ofCNI[name] = true
			continue
		}
		fmt.Fprintf(&b, "link %s\n", name)
	}
	addrs, err := node.Run(ctx, "ip", "-o", "addr", "show")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(addrs), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || ofCNI[f[1]] || f[2] == "inet6" && strings.HasPrefix(f[3], "fe80:") {
			continue
		}
		fmt.Fprintf(&b, "address %s %s %s\n", f[1], f[2], f[3])
	}
	routes, err := node.Run(ctx, "ip", "-4", "route", "show")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(strings.TrimSpace(routes), "\n") {
		if !strings.Contains(line+" ", " dev cni0 ") {
			fmt.Fprintf(&b, "route %s\n", strings.TrimSpace(line))
		}
	}
	for _, p := range hostPathsKOSUses {
		root := n.HostPath(p)
		err := filepath.WalkDir(root, func(file string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() {
				rel, _ := filepath.Rel(root, file)
				fmt.Fprintf(&b, "file %s\n", filepath.Join(p, rel))
			}
			return nil
		})
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	return b.String()
}
