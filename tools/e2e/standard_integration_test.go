package e2e

// This file holds TestIntegrationStandardRelease, the cluster its steps
// share, and the steps that publish, plan, install, check and re-apply the
// release. The attachments, their guests and pings are in
// standard_network_test.go; the node's stop and start in
// standard_nodestop_test.go; the chaos step in chaos_test.go.

import (
	"bytes"
	"fmt"
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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/addons/release"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/kosimages/catalog"
	"github.com/kos-sdn/kos/tools/kosinstall"
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
		// The chaos step comes after the node's return, so that its
		// kills also meet a cluster that has just healed.
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
