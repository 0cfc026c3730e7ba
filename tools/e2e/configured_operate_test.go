package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/testenv"
)

// The cluster step of the configured release, run by TestIntegrationOperate.

// testConfiguredRelease installs, over the standard release, the release
// rendered by kos-release from the configuration that sets every key: as
// an operator does it, with the pull Secret and the PriorityClass it names
// made first, the etcd members' StatefulSet and the backup claim let go as
// docs/install.md says (their volume settings reach no running object
// otherwise), the tree published on an HTTPS server and applied with our
// channels. Once KOS is ready, the guests ping across the nodes, new
// attachments on every node do too, and every setting is read back from
// the live objects.
func (o *operate) testConfiguredRelease(t *testing.T) {
	ctx := t.Context()
	began := time.Now()
	bin := testenv.Build(t, "cmd/kos-release")
	o.channelsBin = testenv.Build(t, "cmd/channels")

	pc := &schedulingv1.PriorityClass{
		ObjectMeta:  metav1.ObjectMeta{Name: configuredPriorityClass},
		Value:       1000000,
		Description: "KOS's pods in the configured release of the e2e tests",
	}
	if _, err := o.kube.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The registry asks for no credentials: these are never used, as an
	// operator's would be for a registry that asks.
	for _, ns := range kosinstall.Namespaces() {
		o.kubectl(t, "-n", ns, "create", "secret", "docker-registry", configuredPullSecret,
			"--docker-server="+o.env.Registry, "--docker-username=e2e", "--docker-password=e2e")
	}
	// kos-controller-manager's image by digest alone, the one the standard
	// install pinned.
	cm, err := o.kube.AppsV1().Deployments(kosinstall.Namespace).Get(ctx, "kos-controller-manager", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var digest string
	for _, c := range cm.Spec.Template.Spec.Containers {
		if c.Name == "kos-controller-manager" {
			_, digest, _ = strings.Cut(c.Image, "@")
		}
	}
	if digest == "" {
		t.Fatalf("kos-controller-manager's container has no image pinned by digest: %+v", cm.Spec.Template.Spec.Containers)
	}
	p := configuredParams{registry: o.env.Registry + "/" + registryPrefix, controllerManagerDigest: digest}

	tree := renderConfigured(t, bin, o.t.TempDir(), configuredRelease(p), true)
	userspace, err := kosinstall.WriteUserspaceAgentChannel(tree)
	if err != nil {
		t.Fatal(err)
	}
	o.https = serveTree(t, o.t, o.env.Nodes[0].HostIP, tree)
	figures.Duration(t, "operate-configured-rendered", time.Since(began))

	// The volume settings, as docs/install.md says: the members'
	// StatefulSet goes (not its pods nor their claims), and so does the
	// backup claim with the volume it was bound to; the new claim gets a
	// volume of its size.
	o.runDoc(t, o.runbook(t, filepath.Join(o.root, "docs", "install.md"), "### Changing etcd's volumes on a running cluster")...)
	o.kubectl(t, "delete", "pv", backupVolume, "--timeout=60s")
	o.provideBackupVolume(t, backupVolume+"-configured", configuredBackupSize)

	applied := time.Now()
	o.userspace = userspace
	o.channels = o.channelsAt(o.https.URL)
	// Each addon rolls its pods, etcd's three members one at a time: on a
	// loaded machine that may take longer than channels' default wait.
	out := o.channelsProcess(t, append(append([]string{"apply", "channel"}, o.channels...), "--yes", "--timeout=10m")...)
	for _, name := range []string{"kos-etcd", "kos-apiserver", "kos-controller-manager", "kos-agent"} {
		if !strings.Contains(out, name+": Updated ") {
			t.Errorf("the apply of the configured release says nothing of updating %s:\n%s", name, out)
		}
	}
	o.waitKOSReady(t, 10*time.Minute)
	figures.Duration(t, "operate-configured-apply-to-ready", time.Since(applied))

	// The agents' pods were replaced, with their Open vSwitch: the guests
	// get their new interfaces, then new attachments on every node.
	for name := range o.guests {
		o.plumb(t, name)
	}
	checkPings(t, o.guestsOf("blue"), 3, 1, time.Minute)
	o.addNetwork(t, "green", "10.253.1.0/24", 4302)
	figures.Duration(t, "operate-configured-apply-to-pinging", time.Since(applied))

	live, err := o.liveObjects()
	if err != nil {
		t.Fatal(err)
	}
	var installed []settingCheck
	for _, c := range configuredChecks(p) {
		if c.renderOnly == "" {
			installed = append(installed, c)
		}
	}
	reportSettings(t, runChecks(installed, live))
	// And the pods run with them.
	for _, pod := range o.kosPods(t) {
		if pod.DeletionTimestamp != nil {
			continue
		}
		if pod.Spec.PriorityClassName != configuredPriorityClass || len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.ImagePullSecrets[0].Name != configuredPullSecret {
			t.Errorf("pod %s/%s runs with priority class %q and pull secrets %v, want %s and %s", pod.Namespace, pod.Name, pod.Spec.PriorityClassName, pod.Spec.ImagePullSecrets, configuredPriorityClass, configuredPullSecret)
		}
	}
}

// addNetwork makes subnet name with an attachment on every node, each given
// to a guest, and checks they ping each other.
func (o *operate) addNetwork(t *testing.T, name, cidr string, vni uint32) {
	t.Helper()
	o.createSubnet(t, name, cidr, vni)
	for i, n := range o.env.Nodes {
		o.plumb(t, o.attach(t, fmt.Sprintf("%s-%d", name, i+1), name, n.Name))
	}
	checkPings(t, o.guestsOf(name), 3, 1, time.Minute)
}

// createSubnet makes subnet name of the operate test's namespace.
func (o *operate) createSubnet(t *testing.T, name, cidr string, vni uint32) {
	t.Helper()
	subnet := &networkv1alpha1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       networkv1alpha1.SubnetSpec{IPv4: cidr, VNI: vni},
	}
	if _, err := o.network.NetworkV1alpha1().Subnets(standardNamespace).Create(t.Context(), subnet, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	o.subnets[name] = netip.MustParsePrefix(cidr)
}

// liveResources are the resources of the kinds the installed checks read.
var liveResources = map[string]schema.GroupVersionResource{
	"Deployment":            {Group: "apps", Version: "v1", Resource: "deployments"},
	"StatefulSet":           {Group: "apps", Version: "v1", Resource: "statefulsets"},
	"DaemonSet":             {Group: "apps", Version: "v1", Resource: "daemonsets"},
	"CronJob":               {Group: "batch", Version: "v1", Resource: "cronjobs"},
	"PersistentVolumeClaim": {Version: "v1", Resource: "persistentvolumeclaims"},
}

// liveObjects returns the live objects a check reads.
func (o *operate) liveObjects() (func(settingCheck) ([]sourcedObject, error), error) {
	dyn, err := dynamic.NewForConfig(o.env.RESTConfig)
	if err != nil {
		return nil, err
	}
	return func(c settingCheck) ([]sourcedObject, error) {
		gvr, ok := liveResources[c.kind]
		if !ok || c.name == "" {
			return nil, fmt.Errorf("the test reads no live %s", c.kind)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		u, err := dyn.Resource(gvr).Namespace(c.namespace).Get(ctx, c.name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return []sourcedObject{{where: "live", obj: u.Object}}, nil
	}, nil
}
