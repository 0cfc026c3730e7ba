package e2e

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/addons/release"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/kosimages/catalog"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// The standard install: what an operator of a real multi-node cluster does.
const (
	// standardNodes is the number of nodes: etcd's three members need three.
	standardNodes = 3
	// registryPrefix is the repository prefix the images are pushed under.
	registryPrefix = "kos"
	// releaseBucket and releasePrefix are where the release is published in
	// S3, as in a kOps state store.
	releaseBucket = "kos-state"
	releasePrefix = "kos/0.3.0"
	// standardNamespace holds the test's subnets and attachments.
	standardNamespace = "e2e-standard"
)

// guestPrefix names the test's guest network namespaces. It holds the
// test's pid: the names are the host's, and a test run beside this one (or
// a demo) must not find its guests under the same names.
var guestPrefix = fmt.Sprintf("kos-e2e-%d-", os.Getpid())

// TestIntegrationStandardRelease installs the standard KOS release on a
// three-node cluster as an operator would: the images pushed to a registry
// the nodes pull from, the release tree written for that registry and
// published to an S3 bucket and an HTTPS server, installed with `channels
// apply channel s3://...`. Then the SDN is used across the nodes, and one
// node is stopped (its attachments become Ready=Unknown, as its agent's
// heartbeat stops) and started again (Ready again). Every step needs the
// ones before it, so a failing step ends the test.
func TestIntegrationStandardRelease(t *testing.T) {
	began := time.Now()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	env := startStandardCluster(t, false)
	figures.Duration(t, "cluster-up", time.Since(began))

	s := newStandard(t, env, root)
	// At the failed step, while the guests are still there.
	runStepsDumping(t, func() {
		s.dumpState()
		s.dumpFabrics()
	}, []step{
		{"images pushed and the release published", s.testPublish},
		{"plan from https", s.testPlanHTTPS},
		{"install from s3", s.testInstall},
		{"standard topology", s.testTopology},
		{"attachments ping across nodes", s.testNetwork},
		{"a node stops", s.testNodeStops},
		{"the node comes back", s.testNodeComesBack},
		{"chaos: every KOS process killed in turn", s.testChaos},
		{"re-apply from https changes nothing", s.testReapplyHTTPS},
	})
	figures.Duration(t, "whole-test", time.Since(began))
}

// standard is the cluster the standard release is installed on, with what
// the steps share.
type standard struct {
	*kos
	// network is the KOS API's client (kos.kos, which the embedding hides).
	network kosclient.Interface
	// https and s3 are the published release tree's folders.
	https servedTree
	s3    string
	// channelsBin is a built channels command, for runs that need their
	// own process environment (SSL_CERT_FILE).
	channelsBin string
	// userspace is the userspace agent's channel, relative to the tree.
	userspace string
	// stopped is the node testNodeStops stops.
	stopped *cluster.Node
	// installed are the channels of the release the shared cluster's
	// install applied (sharedStandard), on disk.
	installed []string

	subnets map[string]netip.Prefix // by name
	guests  map[string]*kosinstall.Guest
}

func newStandard(t *testing.T, env *cluster.Cluster, root string) *standard {
	k := &kos{t: t, env: env, root: root}
	var err error
	if k.kube, err = kubernetes.NewForConfig(env.RESTConfig); err != nil {
		t.Fatal(err)
	}
	if k.kos, err = kosclient.NewForConfig(env.RESTConfig); err != nil {
		t.Fatal(err)
	}
	if k.agg, err = aggregator.NewForConfig(env.RESTConfig); err != nil {
		t.Fatal(err)
	}
	return &standard{kos: k, network: k.kos, subnets: map[string]netip.Prefix{}, guests: map[string]*kosinstall.Guest{}}
}

// testPublish builds the KOS images and pushes them to the cluster's
// registry, writes the release tree for that registry, and publishes it
// to an S3 bucket and an HTTPS server on the host's underlay address. It
// also gives every node its local volume for etcd.
func (s *standard) testPublish(t *testing.T) {
	ctx := t.Context()
	began := time.Now()
	repo := s.env.Registry + "/" + registryPrefix
	pushed := s.pushImages(t, repo)
	figures.Duration(t, "images-built-and-pushed", time.Since(began))

	// What the later steps use lives as long as the whole test.
	tree := filepath.Join(s.t.TempDir(), "release")
	written, err := release.Write(ctx, release.Options{Root: s.root, Out: tree, Registry: repo, Digests: pushed})
	if err != nil {
		t.Fatalf("writing the release tree: %v", err)
	}
	// Older releases name images that were not pushed: the tree keeps
	// them by tag. The installed ones are pinned (testTopology).
	t.Logf("images the release names by tag only: %v", written.Unpinned)
	if s.userspace, err = kosinstall.WriteUserspaceAgentChannel(tree); err != nil {
		t.Fatal(err)
	}
	s.s3 = uploadTree(t, s.t, tree, releaseBucket, releasePrefix)
	s.https = serveTree(t, s.t, s.env.Nodes[0].HostIP, tree)
	s.channelsBin = testenv.Build(t, "cmd/channels")

	s.provideVolumes(t)
	figures.Duration(t, "published", time.Since(began))
}

// pushImages builds today's KOS images and pushes them to repo in the
// cluster's registry, and returns them pinned, as catalog.Push does.
func (s *standard) pushImages(t *testing.T, repo string) map[string]string {
	ctx := t.Context()
	versions, err := catalog.AddonVersions(filepath.Join(s.root, "addons"))
	if err != nil {
		t.Fatal(err)
	}
	etcd, err := etcdBinary(ctx, s.root)
	if err != nil {
		t.Fatal(err)
	}
	// This machine's platform only: the nodes are this machine, and
	// cross-building etcd and every component would cost minutes.
	pushed, err := catalog.Push(ctx, catalog.PushOptions{
		Repository: repo,
		Versions:   versions,
		Etcd:       etcd,
		Platforms:  []string{catalog.HostPlatform},
		WorkDir:    filepath.Join(t.TempDir(), "images"),
		Progress:   testWriter{t},
	})
	if err != nil {
		t.Fatalf("pushing the images to %s: %v", repo, err)
	}
	return pushed
}

// provideVolumes gives every node an empty local volume for etcd.
func (s *standard) provideVolumes(t *testing.T) {
	var volumeNodes []kosinstall.VolumeNode
	for _, n := range s.env.Nodes {
		volumeNodes = append(volumeNodes, kosinstall.VolumeNode{Name: n.Name, HostDir: n.HostPath(kosinstall.VolumesDir)})
	}
	if err := kosinstall.ProvideLocalVolumes(t.Context(), s.kube, volumeNodes, resource.MustParse("2Gi")); err != nil {
		t.Fatal(err)
	}
}

// channelsAt returns the channels of the release at base: the userspace
// agent's before the bootstrap channel, whose kernel-datapath agent it
// replaces.
func (s *standard) channelsAt(base string) []string {
	return []string{base + s.userspace, base + "bootstrap-channel.yaml"}
}

// testPlanHTTPS shows the plan from the HTTPS server with the channels
// command, as an operator runs it: every manifest is fetched, checked
// against its hash and dry-run, and all four addons are to be installed.
func (s *standard) testPlanHTTPS(t *testing.T) {
	out := s.channelsProcess(t, append([]string{"apply", "channel"}, s.channelsAt(s.https.URL)...)...)
	for _, name := range []string{"kos-etcd", "kos-apiserver", "kos-controller-manager", "kos-agent"} {
		// NAME CURRENT UPDATE, with no current release.
		if !regexp.MustCompile(`(?m)^` + name + `\s+-\s+\S`).MatchString(out) {
			t.Errorf("the plan from %s does not install %s:\n%s", s.https.URL, name, out)
		}
	}
	if !strings.Contains(out, "Must specify --yes") {
		t.Errorf("the plan from %s has nothing to apply:\n%s", s.https.URL, out)
	}
}

// testInstall installs the release from S3 and waits for KOS to be ready.
func (s *standard) testInstall(t *testing.T) {
	began := time.Now()
	out := s.channelsCLI(t, append(append([]string{"apply", "channel"}, s.channelsAt(s.s3)...), "--yes")...)
	for _, name := range []string{"kos-etcd", "kos-apiserver", "kos-controller-manager", "kos-agent"} {
		if !strings.Contains(out, name+": Installed ") {
			t.Errorf("the install says nothing of installing %s:\n%s", name, out)
		}
	}
	s.waitKOSReady(t, 6*time.Minute)
	figures.Duration(t, "install-to-available", time.Since(began))
}

// testTopology checks the standard releases' shape: three etcd members on
// local volumes on three nodes, two kos-apiservers, two controller managers
// of which one leads, an agent on every node, every pod Ready.
func (s *standard) testTopology(t *testing.T) {
	ctx := t.Context()
	pods := s.kosPods(t)
	byApp := map[string][]corev1.Pod{}
	for _, p := range pods {
		if !podReady(&p) {
			t.Errorf("pod %s/%s on %s is not Ready", p.Namespace, p.Name, p.Spec.NodeName)
		}
		byApp[p.Labels["app.kubernetes.io/name"]] = append(byApp[p.Labels["app.kubernetes.io/name"]], p)
	}
	want := map[string]int{"kos-etcd": 3, "kos-apiserver": 2, "kos-controller-manager": 2, "kos-agent": standardNodes}
	for app, n := range want {
		if len(byApp[app]) != n {
			t.Errorf("%d %s pods, want %d", len(byApp[app]), app, n)
		}
	}
	// etcd: one member per node, each on its node's local volume.
	nodesOf := func(app string) []string {
		var out []string
		for _, p := range byApp[app] {
			out = append(out, p.Spec.NodeName)
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	if got := nodesOf("kos-etcd"); len(got) != 3 {
		t.Errorf("etcd members on nodes %v, want three different nodes", got)
	}
	if got := nodesOf("kos-agent"); len(got) != standardNodes {
		t.Errorf("agents on nodes %v, want one on each of the %d nodes", got, standardNodes)
	}
	for _, p := range byApp["kos-etcd"] {
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			pvc, err := s.kube.CoreV1().PersistentVolumeClaims(p.Namespace).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName != "local-"+p.Spec.NodeName {
				t.Errorf("etcd member %s on %s: claim %s is %s to volume %q, want bound to local-%s", p.Name, p.Spec.NodeName, pvc.Name, pvc.Status.Phase, pvc.Spec.VolumeName, p.Spec.NodeName)
			}
		}
	}
	// The controller managers: one holds the Lease.
	lease, err := s.kube.CoordinationV1().Leases(kosinstall.Namespace).Get(ctx, "kos-controller-manager", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the controller managers' Lease: %v", err)
	}
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	leaders := 0
	for _, p := range byApp["kos-controller-manager"] {
		if strings.HasPrefix(holder, p.Name+"_") {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("Lease kos-controller-manager held by %q: want one of the controller manager pods", holder)
	}
	// Every image came from the registry, pinned by digest.
	for _, p := range pods {
		for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
			if !strings.HasPrefix(c.Image, s.env.Registry+"/") || !strings.Contains(c.Image, "@sha256:") {
				t.Errorf("pod %s container %s: image %s is not pinned in the registry %s", p.Name, c.Name, c.Image, s.env.Registry)
			}
		}
	}
	if err := kosinstall.Ready(ctx, s.kube, s.agg); err != nil {
		t.Error(err)
	}
}

// kosPods returns the pods of every KOS namespace that run all the time:
// not those of Jobs, such as kos-etcd's backups every 6 hours, whose pod
// waits for a volume these nodes do not have.
func (s *standard) kosPods(t *testing.T) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	for _, ns := range kosinstall.Namespaces() {
		list, err := s.kube.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, slices.DeleteFunc(list.Items, ofJob)...)
	}
	return pods
}

// testNetwork makes two subnets of the same CIDR in two VNIs, an attachment
// of each on every node and one more in the second, gives each to a guest
// namespace, and pings: every guest reaches the others of its VNI across
// nodes, and none reaches the other VNI.
func (s *standard) testNetwork(t *testing.T) {
	ctx := t.Context()
	if _, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: standardNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const cidr = "10.251.0.0/24"
	for name, vni := range map[string]uint32{"blue": 4101, "red": 4102} {
		subnet := &networkv1alpha1.Subnet{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       networkv1alpha1.SubnetSpec{IPv4: cidr, VNI: vni},
		}
		if _, err := s.network.NetworkV1alpha1().Subnets(standardNamespace).Create(ctx, subnet, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating subnet %s: %v", name, err)
		}
		s.subnets[name] = netip.MustParsePrefix(cidr)
	}
	began := time.Now()
	var names []string
	for i, n := range s.env.Nodes {
		for _, subnet := range []string{"blue", "red"} {
			names = append(names, s.attach(t, fmt.Sprintf("%s-%d", subnet, i+1), subnet, n.Name))
		}
	}
	// One more in red: an address red has that blue may not.
	names = append(names, s.attach(t, "red-extra", "red", s.env.Nodes[0].Name))
	for _, name := range names {
		s.plumb(t, name)
	}
	blue, red := s.guestsOf("blue"), s.guestsOf("red")
	first := awaitPing(t, blue[0], blue[1].IP, time.Minute)
	figures.Duration(t, "first-cross-node-ping", time.Since(began))
	t.Logf("the first reply across nodes came %s after the first ping", first.Round(100*time.Millisecond))
	checkPings(t, blue, 5, 1, 30*time.Second)
	checkPings(t, red, 5, 1, 30*time.Second)

	// Isolation: the same address in the other VNI answers from its own
	// VNI's attachment, and an address only the other VNI has does not
	// answer at all.
	blueIPs := map[netip.Addr]*kosinstall.Guest{}
	for _, g := range blue {
		blueIPs[g.IP] = g
	}
	checked := 0
	for _, r := range red {
		if g, ok := blueIPs[r.IP]; ok {
			if g == blue[0] {
				continue
			}
			if lost, err := pingLoss(ctx, blue[0], r.IP, 1); err != nil || lost != 0 {
				t.Errorf("ping %s -> %s: lost %d (%v)", blue[0].Attachment.Name, r.IP, lost, err)
				continue
			}
			mac, err := blue[0].NeighbourMAC(ctx, r.IP)
			if err != nil {
				t.Fatal(err)
			}
			if mac != g.Attachment.Status.MACAddress {
				t.Errorf("guest %s: %s answered from MAC %s, want blue's %s (red's is %s)", blue[0].Attachment.Name, r.IP, mac, g.Attachment.Status.MACAddress, r.Attachment.Status.MACAddress)
			}
			checked++
			continue
		}
		if lost, err := pingLoss(ctx, blue[0], r.IP, 3); err != nil || lost != 3 {
			t.Errorf("guest %s (blue) reached %s, which only red's %s has: %d of 3 lost (%v)", blue[0].Attachment.Name, r.IP, r.Attachment.Name, lost, err)
		}
		checked++
	}
	if checked == 0 {
		t.Error("the isolation check checked nothing")
	}
}

// attach creates an attachment of subnet on node and returns its name.
func (s *standard) attach(t *testing.T, name, subnet, node string) string {
	t.Helper()
	att := &networkv1alpha1.NetworkAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       networkv1alpha1.NetworkAttachmentSpec{Node: node, Subnet: subnet},
	}
	if _, err := s.network.NetworkV1alpha1().NetworkAttachments(standardNamespace).Create(t.Context(), att, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating attachment %s: %v", name, err)
	}
	return name
}

// plumb waits until the attachment has an address and its interface on its
// node, then gives the interface to the attachment's guest.
func (s *standard) plumb(t *testing.T, name string) {
	t.Helper()
	_, again := s.guests[name]
	poll.Until(t, 2*time.Minute, "attachment "+name+" to be addressed and given to its guest", func(ctx context.Context) error {
		att, err := s.network.NetworkV1alpha1().NetworkAttachments(standardNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := att.Status
		if st.IPv4 == "" || st.IfcName == "" || st.HostIP == "" {
			return fmt.Errorf("attachment %s: ipv4 %q, ifcName %q, hostIP %q, errors %+v", name, st.IPv4, st.IfcName, st.HostIP, st.Errors)
		}
		node := s.node(t, att.Spec.Node)
		g, err := kosinstall.PlumbGuest(ctx, node.Netns, guestPrefix+name, att, s.subnets[att.Spec.Subnet])
		if err != nil {
			return err
		}
		s.guests[name] = g
		return nil
	})
	if !again {
		// The guests last as long as the whole test.
		s.t.Cleanup(func() {
			if err := s.guests[name].Delete(); err != nil {
				s.t.Error(err)
			}
		})
	}
}

// guestsOf returns the guests of a subnet's attachments on each node, in
// node order.
func (s *standard) guestsOf(subnet string) []*kosinstall.Guest {
	var out []*kosinstall.Guest
	for i := range s.env.Nodes {
		if g := s.guests[fmt.Sprintf("%s-%d", subnet, i+1)]; g != nil {
			out = append(out, g)
		}
	}
	return out
}

func (s *standard) node(t *testing.T, name string) *cluster.Node {
	t.Helper()
	for _, n := range s.env.Nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %s", name)
	return nil
}

// testNodeStops stops the last node entirely: the KOS API stays available
// (etcd keeps its quorum with two members), a new attachment still gets an
// address and an interface, and the guests of the other two nodes keep
// pinging each other.
func (s *standard) testNodeStops(t *testing.T) {
	ctx := t.Context()
	s.stopped = s.env.Nodes[len(s.env.Nodes)-1]
	began := time.Now()
	if err := s.env.StopNode(ctx, s.stopped.Name); err != nil {
		t.Fatalf("stopping node %s: %v", s.stopped.Name, err)
	}
	stopped := time.Now()
	figures.Duration(t, "node-stop", stopped.Sub(began))
	// A write through the KOS API, and the controllers act on it. A
	// request in flight to the stopped etcd member fails (its connection
	// times out), so the write is tried until it passes, as a client
	// would; how long that takes is the API's gap.
	began = time.Now()
	const late = "blue-late"
	failures := 0
	poll.Until(t, time.Minute, "a write through the KOS API", func(ctx context.Context) error {
		att := &networkv1alpha1.NetworkAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: late},
			Spec:       networkv1alpha1.NetworkAttachmentSpec{Node: s.env.Nodes[0].Name, Subnet: "blue"},
		}
		_, err := s.network.NetworkV1alpha1().NetworkAttachments(standardNamespace).Create(ctx, att, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			failures++
			t.Logf("creating attachment %s with node %s down: %v", late, s.stopped.Name, err)
			return err
		}
		return nil
	})
	figures.Duration(t, "first-write-with-a-node-down", time.Since(began))
	t.Logf("%d writes failed before one passed", failures)
	s.plumb(t, late)
	figures.Duration(t, "attachment-with-a-node-down", time.Since(began))
	reads := 0
	poll.Until(t, 2*time.Minute, "ten reads of the KOS API in a row to succeed", func(ctx context.Context) error {
		if _, err := s.network.NetworkV1alpha1().Subnets(standardNamespace).List(ctx, metav1.ListOptions{}); err != nil {
			reads = 0
			return err
		}
		if reads++; reads < 10 {
			return fmt.Errorf("%d reads in a row so far", reads)
		}
		return nil
	})
	var alive []*kosinstall.Guest
	for _, g := range s.guestsOf("blue") {
		if g.Attachment.Spec.Node != s.stopped.Name {
			alive = append(alive, g)
		}
	}
	alive = append(alive, s.guests[late])
	checkPings(t, alive, 10, 1, 30*time.Second)
	// Its agent renews its heartbeat no more: its attachments are no
	// longer known to be Ready (issue 36's stale Ready), the others are.
	s.awaitReadiness(t, s.stopped.Name, metav1.ConditionUnknown, stopped, 3*time.Minute, "stale-ready-unknown-after-node-stop")
}

// testNodeComesBack starts the stopped node again: it becomes Ready, its
// agent and etcd member catch up, and its guests, given their interfaces
// again, ping the others.
func (s *standard) testNodeComesBack(t *testing.T) {
	ctx := t.Context()
	began := time.Now()
	back := s.stopped
	if err := s.env.StartNode(ctx, back.Name); err != nil {
		t.Fatalf("starting node %s: %v", back.Name, err)
	}
	s.stopped = nil
	figures.Duration(t, "node-start", time.Since(began))
	// Until the node's kubelet reports on its pods, they keep the status
	// of before the stop, Ready; the node's interfaces are the ones its
	// agent keeps only once the agent's first reconcile is done.
	s.waitAgentBack(t, back.Name, began, 4*time.Minute)
	s.waitKOSReady(t, 4*time.Minute)
	figures.Duration(t, "node-back-to-kos-ready", time.Since(began))
	s.awaitReadiness(t, back.Name, metav1.ConditionTrue, began, time.Minute, "stale-ready-back-after-node-start")
	for name, g := range s.guests {
		if g.Attachment.Spec.Node == back.Name {
			s.plumb(t, name)
		}
	}
	figures.Duration(t, "node-back-to-guests-replumbed", time.Since(began))
	checkPings(t, s.guestsOf("blue"), 5, 1, time.Minute)
	checkPings(t, s.guestsOf("red"), 5, 1, time.Minute)
	figures.Duration(t, "node-back-to-pinging", time.Since(began))
}

// waitAgentBack waits until the agent pod of node runs again after the node
// started (at since): every container started since then and Ready. The
// agent is Ready once its first reconcile of the node's switch is done.
func (s *standard) waitAgentBack(t *testing.T, node string, since time.Time, timeout time.Duration) {
	t.Helper()
	// Start times have a resolution of a second.
	since = since.Truncate(time.Second)
	poll.Until(t, timeout, "the agent on node "+node+" to run again and be Ready", func(ctx context.Context) error {
		pods, err := s.kube.CoreV1().Pods(kosinstall.AgentNamespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			return fmt.Errorf("no agent pod on node %s", node)
		}
		for _, p := range pods.Items {
			if len(p.Status.ContainerStatuses) == 0 {
				return fmt.Errorf("pod %s: no container status yet", p.Name)
			}
			for _, c := range p.Status.ContainerStatuses {
				running := c.State.Running
				switch {
				case running == nil:
					return fmt.Errorf("pod %s: container %s not running", p.Name, c.Name)
				case running.StartedAt.Time.Before(since):
					return fmt.Errorf("pod %s: container %s runs since %s, before the node started", p.Name, c.Name, running.StartedAt.Format(time.RFC3339))
				case !c.Ready:
					return fmt.Errorf("pod %s: container %s not Ready", p.Name, c.Name)
				}
			}
		}
		return nil
	})
}

// testReapplyHTTPS applies the same release from the HTTPS server: nothing
// to do.
func (s *standard) testReapplyHTTPS(t *testing.T) {
	out := s.channelsProcess(t, append(append([]string{"apply", "channel"}, s.channelsAt(s.https.URL)...), "--yes")...)
	if !strings.Contains(out, "No update required") {
		t.Errorf("applying the release again from %s has something to do:\n%s", s.https.URL, out)
	}
}

// channelsProcess runs the built channels command as an operator does,
// trusting the release server's CA through SSL_CERT_FILE, and returns its
// output, failing the test when it fails.
func (s *standard) channelsProcess(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), s.channelsBin, append(args, "--kubeconfig", s.env.Kubeconfig)...)
	cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+s.https.CAFile)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("channels %s:\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("channels %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// dumpFabrics logs, for a failed run, the end of every agent's log and how
// the switch of each running node differs from what the attachments call
// for: a lost ping is explained by one or the other.
func (s *standard) dumpFabrics() {
	t := s.t
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pods, err := s.kube.CoreV1().Pods(kosinstall.AgentNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("listing the agents: %v", err)
		pods = &corev1.PodList{}
	}
	// The agent's log, and that of kos-ovs, which runs the node's Open
	// vSwitch beside it.
	for _, p := range pods.Items {
		for _, c := range []struct {
			name  string
			lines int64
		}{{"kos-agent", 40}, {"ovs", 30}} {
			logs, err := s.kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.name, TailLines: &c.lines}).DoRaw(ctx)
			if err != nil {
				t.Logf("the log of container %s on %s: %v", c.name, p.Spec.NodeName, err)
				continue
			}
			t.Logf("the end of the log of container %s on %s:\n%s", c.name, p.Spec.NodeName, logs)
		}
	}
	atts, err := s.network.NetworkV1alpha1().NetworkAttachments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("listing the attachments: %v", err)
		return
	}
	for _, n := range s.env.Nodes {
		if n == s.stopped {
			continue
		}
		// Where the node's underlay address is.
		node := &ovsenv.Netns{Name: n.Netns}
		for _, args := range [][]string{{"ip", "-o", "addr", "show"}, {"ip", "route", "show"}} {
			out, err := node.Run(ctx, args[0], args[1:]...)
			t.Logf("node %s: %s (err %v):\n%s", n.Name, strings.Join(args, " "), err, out)
		}
		if err := fabricProblems(ctx, n, atts.Items); err != nil {
			t.Logf("fabric: %v", err)
		} else {
			t.Logf("fabric: node %s holds what the attachments call for", n.Name)
		}
		// What Open vSwitch thinks of each port (a port it believes down
		// drops what it should send) and what its datapath did.
		runDir := n.HostPath(agentOVSRunDir)
		env := append(os.Environ(), "OVS_RUNDIR="+runDir)
		// ovs-vswitchd's pid file names a pid of the pod's namespace: reach
		// its control socket by path.
		ctl, _ := filepath.Glob(filepath.Join(runDir, "ovs-vswitchd.*.ctl"))
		ctl = append(ctl, "ovs-vswitchd")
		for _, args := range [][]string{
			{"ovs-vsctl", "--timeout=20", "--columns=name,ofport,admin_state,link_state,statistics", "list", "interface"},
			{"ovs-ofctl", "-O", "OpenFlow14", "dump-flows", "kos"},
			{"ovs-appctl", "--timeout=20", "-t", ctl[0], "dpctl/dump-flows", "-m"},
			{"ovs-appctl", "--timeout=20", "-t", ctl[0], "ovs/route/show"},
			{"ovs-appctl", "--timeout=20", "-t", ctl[0], "tnl/neigh/show"},
			{"ovs-appctl", "--timeout=20", "-t", ctl[0], "tnl/ports/show", "-v"},
		} {
			out, err := runEnv(ctx, env, args[0], args[1:]...)
			t.Logf("node %s: %s (err %v):\n%s", n.Name, strings.Join(args, " "), err, out)
		}
	}
	// And what each guest sees.
	for _, name := range slices.Sorted(maps.Keys(s.guests)) {
		g := s.guests[name]
		for _, args := range [][]string{{"ip", "-s", "link"}, {"ip", "addr"}, {"ip", "neigh"}} {
			out, err := g.Run(ctx, args[0], args[1:]...)
			t.Logf("guest %s (%s): %s (err %v):\n%s", g.Name, g.IP, strings.Join(args, " "), err, out)
		}
	}
}
