package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/blang/semver/v4"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/kos-sdn/kos/channels"
	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationKOS installs KOS from the bootstrap channel on a real
// single-node cluster and runs it: every step needs the ones before it, so a
// failing step ends the test.
func TestIntegrationKOS(t *testing.T) {
	began := time.Now()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// Images and cluster at once: the images take seconds once their Go
	// build is cached, the cluster tens of seconds.
	built := make(chan builtImages, 1)
	dir := t.TempDir()
	go func() { built <- buildImages(t.Context(), root, dir) }()

	env, err := cluster.Start(t.Context(), cluster.Options{
		ControlPlane: testenv.Options{
			Components: []string{testenv.KubeControllerManager, testenv.KubeScheduler},
			Progress:   testWriter{t},
		},
		Nodes:     []cluster.NodeOptions{{Labels: kosinstall.NodeLabels()}},
		KubeProxy: true,
	})
	if err != nil {
		<-built
		t.Fatalf("starting the cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	})
	t.Logf("cluster ready after %s", since(began))
	// The single-node etcd's local volume: its folder must exist on the
	// node before the install.
	if err := os.MkdirAll(env.Nodes[0].HostPath(kosinstall.VarLib+"/etcd"), 0o755); err != nil {
		t.Fatal(err)
	}
	images := <-built
	if images.err != nil {
		t.Fatalf("building the images: %v", images.err)
	}
	t.Logf("images built after %s", since(began))
	if err := env.ImportImages(t.Context(), images.tarball); err != nil {
		t.Fatal(err)
	}
	t.Logf("images imported after %s", since(began))

	k := newKOS(t, env, root)
	t.Cleanup(func() {
		if t.Failed() {
			k.dumpState()
		}
	})
	runSteps(t, []step{
		{"install", k.testInstall},
		{"API served through the aggregator", k.testAPI},
		{"attachments addressed and implemented", k.testAttachments},
		{"install records", k.testRecords},
		{"kubernetesVersion variant", k.testVariant},
		{"re-run changes nothing", k.testRerun},
		{"upgrade prunes what the release dropped", k.testUpgrade},
		{"deleted pods come back with the state intact", k.testPodDeletion},
	})
	t.Logf("the whole test took %s", since(began))
}

// kos is the cluster KOS is installed on, with what the steps share.
type kos struct {
	t        *testing.T
	env      *cluster.Cluster
	root     string
	kube     kubernetes.Interface
	kos      kosclient.Interface
	agg      aggregator.Interface
	channels []string // the bootstrap channels, as the install gives them
	server   semver.Version

	// What the attachments step made, which later steps expect to last.
	subnet      *networkv1alpha1.Subnet
	attachments []*networkv1alpha1.NetworkAttachment
}

func newKOS(t *testing.T, env *cluster.Cluster, root string) *kos {
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
	info, err := k.kube.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if k.server, err = channels.ServerVersion(info.GitVersion); err != nil {
		t.Fatal(err)
	}
	// The local channel first: its single-node etcd and userspace agent
	// replace the bootstrap channel's releases of equal version.
	k.channels = []string{
		filepath.Join(root, "addons", "local-channel.yaml"),
		filepath.Join(root, "bootstrap-channel.yaml"),
	}
	return k
}

// testInstall applies the bootstrap channels and waits for every KOS pod to
// be Ready and the APIService to be Available.
func (k *kos) testInstall(t *testing.T) {
	out := k.channelsCLI(t, append(append([]string{"apply", "channel"}, k.channels...), "--yes")...)
	for _, name := range k.expectedAddons(t) {
		if !strings.Contains(out, name+": Installed ") {
			t.Errorf("the install says nothing of installing %s:\n%s", name, out)
		}
	}
	k.waitKOSReady(t, 4*time.Minute)
}

// waitKOSReady waits until KOS is ready (kosinstall.Ready).
func (k *kos) waitKOSReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	poll.Until(t, timeout, "every KOS pod to be Ready and the APIService Available", func(ctx context.Context) error {
		return kosinstall.Ready(ctx, k.kube, k.agg)
	})
}

// testAPI reads the KOS API through kube-apiserver's aggregator, with
// kubectl as people do and with the generated client.
func (k *kos) testAPI(t *testing.T) {
	ctx := t.Context()
	if _, err := k.kos.NetworkV1alpha1().Subnets(kosinstall.Namespace).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("listing subnets through the aggregator: %v", err)
	}
	out := k.kubectl(t, "get", "subnets", "--all-namespaces")
	if !strings.Contains(out, "No resources found") {
		t.Errorf("kubectl get subnets on a new install: got %q, want none found", out)
	}
	out = k.kubectl(t, "api-resources", "--api-group=network.example.com", "-o", "name")
	for _, want := range []string{"subnets.network.example.com", "networkattachments.network.example.com", "iplocks.network.example.com"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl api-resources does not list %s:\n%s", want, out)
		}
	}
}

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

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// wantMAC is the MAC the design gives an attachment: byte 0 from the VNI's
// top bits and the address's first byte, then the address's last three
// bytes and the VNI's low two bytes.
func wantMAC(vni uint32, ip netip.Addr) net.HardwareAddr {
	b := ip.As4()
	return net.HardwareAddr{byte(vni>>13)&0xF8 | (b[0]&2)<<1 | 2, b[1], b[2], b[3], byte(vni >> 8), byte(vni)}
}

// testRecords checks the install records: every addon at the release the
// channels offer for this cluster.
func (k *kos) testRecords(t *testing.T) {
	want := map[string]record{}
	for _, a := range k.selected(t) {
		want[a.Name] = record{Name: a.Name, Namespace: a.Namespace, Version: a.VersionString(), ID: a.ID, Channel: a.Channel, ManifestHash: a.ManifestHash}
	}
	if diff := cmp.Diff(want, k.records(t)); diff != "" {
		t.Errorf("install records (-want +got):\n%s", diff)
	}
}

// record is an install record as `channels get addons -o json` prints it.
type record struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Version   string `json:"version"`
	ID        string `json:"id"`
	Channel   string `json:"channel"`
	// ManifestHash is that of the manifest applied.
	ManifestHash string `json:"manifestHash"`
}

// records returns the KOS install records `channels get addons` lists, by
// addon name.
func (k *kos) records(t *testing.T) map[string]record {
	t.Helper()
	ours := map[string]bool{}
	for _, name := range k.expectedAddons(t) {
		ours[name] = true
	}
	got := map[string]record{}
	for name, r := range k.listRecords(t) {
		if ours[name] {
			got[name] = r
		}
	}
	return got
}

// listRecords returns every install record `channels get addons` lists, by
// addon name.
func (k *kos) listRecords(t *testing.T) map[string]record {
	t.Helper()
	out := k.channelsCLI(t, "get", "addons", "-o", "json")
	var list struct {
		Items []struct {
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
			Record record `json:"record"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("channels get addons -o json: %v\n%s", err, out)
	}
	got := map[string]record{}
	for _, it := range list.Items {
		r := it.Record
		r.Name, r.Namespace = it.Metadata.Name, it.Metadata.Namespace
		got[r.Name] = r
	}
	return got
}

// selected returns the releases the bootstrap channels offer this cluster,
// as channels picks them.
func (k *kos) selected(t *testing.T) []*channels.Addon {
	t.Helper()
	var releases []*channels.Addon
	for _, loc := range k.channels {
		got, err := channels.Load(t.Context(), channels.NewFetcher(), loc)
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, got...)
	}
	return channels.Select(releases, k.server)
}

// expectedAddons names the addons of the bootstrap channels.
func (k *kos) expectedAddons(t *testing.T) []string {
	var names []string
	for _, a := range k.selected(t) {
		names = append(names, a.Name)
	}
	return names
}

// testVariant checks, without channels' own selection, that the addon with
// Kubernetes variants was installed from the one whose range holds the
// server's version, and that another variant exists that does not.
func (k *kos) testVariant(t *testing.T) {
	var releases []*channels.Addon
	for _, loc := range k.channels {
		got, err := channels.Load(t.Context(), channels.NewFetcher(), loc)
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, got...)
	}
	records := k.records(t)
	variants := 0
	for name, rec := range records {
		var fits, misfits []*channels.Addon
		for _, a := range releases {
			if a.Name != name || a.VersionString() != rec.Version {
				continue
			}
			if a.KubernetesVersion == "" || semver.MustParseRange(a.KubernetesVersion)(k.server) {
				fits = append(fits, a)
			} else {
				misfits = append(misfits, a)
			}
		}
		if len(misfits) == 0 {
			continue
		}
		variants++
		if len(fits) == 0 {
			t.Errorf("addon %s %s: no release fits Kubernetes %s, yet it is installed as %s", name, rec.Version, k.server, rec.ID)
			continue
		}
		if rec.ID != fits[0].ID {
			t.Errorf("addon %s on Kubernetes %s: installed id %s, want %s (range %q)", name, k.server, rec.ID, fits[0].ID, fits[0].KubernetesVersion)
		}
		for _, m := range misfits {
			if m.ID == rec.ID {
				t.Errorf("addon %s on Kubernetes %s: installed id %s is that of range %q", name, k.server, rec.ID, m.KubernetesVersion)
			}
		}
		t.Logf("addon %s on Kubernetes %s: variant %s installed; %d other variant(s) left out", name, k.server, rec.ID, len(misfits))
	}
	if variants == 0 {
		t.Errorf("no installed addon has a release for another Kubernetes version: the variant check checked nothing")
	}
}

// testRerun applies the bootstrap channels again: nothing to do, and no
// object of any addon changes.
func (k *kos) testRerun(t *testing.T) {
	before := k.objectVersions(t)
	out := k.channelsCLI(t, append(append([]string{"apply", "channel"}, k.channels...), "--yes")...)
	if !strings.Contains(out, "No update required") {
		t.Errorf("a re-run of the install has something to do:\n%s", out)
	}
	if diff := cmp.Diff(before, k.objectVersions(t)); diff != "" {
		t.Errorf("a re-run of the install changed objects (-before +after):\n%s", diff)
	}
}

// testUpgrade upgrades one addon to the first test release (a ConfigMap and
// a Role more), then to the second (the ConfigMap renamed, the Role gone):
// the second prunes exactly the old ConfigMap and the Role, and the rest of
// the addon stays as it was.
func (k *kos) testUpgrade(t *testing.T) {
	ctx := t.Context()
	apply := func(n int) string {
		loc, err := filepath.Abs(upgradeChannel(n))
		if err != nil {
			t.Fatal(err)
		}
		return k.channelsCLI(t, append(append([]string{"apply", "channel"}, k.channels...), loc, "--yes")...)
	}
	releases, err := channels.Load(ctx, channels.NewFetcher(), upgradeChannel(1))
	if err != nil {
		t.Fatal(err)
	}
	first := releases[0]

	out := apply(1)
	if !strings.Contains(out, upgradeAddon+": Updated ") || strings.Contains(out, "Pruned") {
		t.Errorf("the first test release: want %s updated and nothing pruned:\n%s", upgradeAddon, out)
	}
	if _, err := k.kube.CoreV1().ConfigMaps(kosinstall.Namespace).Get(ctx, "kos-e2e-settings", metav1.GetOptions{}); err != nil {
		t.Errorf("the first test release's ConfigMap: %v", err)
	}
	role, err := k.kube.RbacV1().Roles(kosinstall.Namespace).Get(ctx, "kos-e2e-reader", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the first test release's Role: %v", err)
	}
	if role.Labels[kosinstall.AddonLabel] != upgradeAddon {
		t.Errorf("Role kos-e2e-reader: label %s=%q, want %q", kosinstall.AddonLabel, role.Labels[kosinstall.AddonLabel], upgradeAddon)
	}
	if got := k.records(t)[upgradeAddon].Version; got != first.VersionString() {
		t.Errorf("record of %s after the first test release: version %s, want %s", upgradeAddon, got, first.VersionString())
	}
	before := k.objectVersions(t)

	out = apply(2)
	if !strings.Contains(out, upgradeAddon+": Updated ") {
		t.Errorf("the second test release: want %s updated:\n%s", upgradeAddon, out)
	}
	var pruned []string
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, "Pruned") {
			pruned = append(pruned, line)
		}
	}
	says := func(words ...string) func(string) bool {
		return func(line string) bool {
			return !slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(line, w) })
		}
	}
	if len(pruned) != 2 || !slices.ContainsFunc(pruned, says("ConfigMap", "kos-e2e-settings")) || !slices.ContainsFunc(pruned, says("Role", "kos-e2e-reader")) {
		t.Errorf("the second test release pruned %q, want the ConfigMap kos-e2e-settings and the Role kos-e2e-reader; output:\n%s", pruned, out)
	}
	if _, err := k.kube.CoreV1().ConfigMaps(kosinstall.Namespace).Get(ctx, "kos-e2e-settings", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap kos-e2e-settings after the second test release: %v, want not found", err)
	}
	if _, err := k.kube.RbacV1().Roles(kosinstall.Namespace).Get(ctx, "kos-e2e-reader", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Role kos-e2e-reader after the second test release: %v, want not found", err)
	}
	if _, err := k.kube.CoreV1().ConfigMaps(kosinstall.Namespace).Get(ctx, "kos-e2e-settings-renamed", metav1.GetOptions{}); err != nil {
		t.Errorf("the second test release's ConfigMap: %v", err)
	}
	// Everything else is as it was: gone are exactly the two pruned
	// objects, new is the renamed ConfigMap, and nothing else changed
	// but the record namespace, which holds the install records.
	after := k.objectVersions(t)
	var gone, added, changed []string
	for key, rv := range before {
		switch now, ok := after[key]; {
		case !ok:
			gone = append(gone, key)
		case now != rv && key != "Namespace//"+kosinstall.Namespace:
			changed = append(changed, key)
		}
	}
	for key := range after {
		if _, ok := before[key]; !ok {
			added = append(added, key)
		}
	}
	slices.Sort(gone)
	want := []string{"ConfigMap/" + kosinstall.Namespace + "/kos-e2e-settings", "Role.rbac.authorization.k8s.io/" + kosinstall.Namespace + "/kos-e2e-reader"}
	if diff := cmp.Diff(want, gone); diff != "" {
		t.Errorf("objects gone after the second test release (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ConfigMap/" + kosinstall.Namespace + "/kos-e2e-settings-renamed"}, added); diff != "" {
		t.Errorf("objects added by the second test release (-want +got):\n%s", diff)
	}
	if len(changed) > 0 {
		t.Errorf("objects changed by the second test release: %v", changed)
	}
	// The upgrade changed no workload: KOS still runs.
	k.waitKOSReady(t, time.Minute)
}

// ofJob says whether a pod is a Job's (kos-etcd's backups), which comes
// and goes on a schedule, not one of KOS's workloads.
func ofJob(p corev1.Pod) bool {
	ref := metav1.GetControllerOf(&p)
	return ref != nil && ref.Kind == "Job"
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
