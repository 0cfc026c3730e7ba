package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/kos-sdn/kos/components/apis/multinetworkpolicy/v1beta1"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/kosinstall"
)

// The last step of the cluster demo: release policyRelease, rendered from
// an operator's configuration file with kos-release, applied live under
// the apps' traffic, then a MultiNetworkPolicy that denies, then allows, a
// TCP connection between pods on two nodes.
const (
	// policyRelease is the release rendered from a configuration file,
	// which brings MultiNetworkPolicy.
	policyRelease = "0.4.0"
	// configuredCPU is the CPU request the operator's configuration sets
	// for the control components, shown on the running Deployments.
	configuredCPU = "50m"
	// probeTimeout bounds a connection attempt; podnet send gives up
	// connecting after 10 s.
	probeTimeout = 30 * time.Second
)

// releaseConfig is the operator's configuration of policyRelease: the
// demo's registry, and smaller CPU requests for a small cluster.
func releaseConfig(repo string) string {
	return fmt.Sprintf(`apiVersion: kos.example.com/v1alpha1
kind: ReleaseConfig
# The registry the nodes pull from, where kosimages --push put the images.
registry: %[1]s
components:
  # A small cluster: the control components ask for less CPU.
  kos-apiserver:
    resources:
      kos-apiserver: {requests: {cpu: %[2]s}}
  kos-controller-manager:
    resources:
      kos-controller-manager: {requests: {cpu: %[2]s}}
`, repo, configuredCPU)
}

// policyManifest is the MultiNetworkPolicy named name for the pods'
// network: with allowPort 0 it isolates every pod of podsNamespace on
// podsNetwork for ingress and allows nothing; otherwise it allows TCP
// to allowPort from the namespace's pods.
func policyManifest(name string, allowPort string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: k8s.cni.cncf.io/v1beta1
kind: MultiNetworkPolicy
metadata:
  name: %s
  namespace: %s
  annotations:
    %s: %s
spec:
  podSelector: {}
  policyTypes: [Ingress]
`, name, podsNamespace, v1beta1.PolicyForAnnotation, podsNetwork)
	if allowPort != "" {
		fmt.Fprintf(&b, `  ingress:
  - from:
    - podSelector: {}
    ports:
    - protocol: TCP
      port: %s
`, allowPort)
	}
	return b.String()
}

// runRelease renders policyRelease from a configuration file, upgrades the
// cluster to it while the apps ping each other and hold TCP connections,
// and shows a MultiNetworkPolicy denying, then allowing, a connection
// between the pods of runPods.
func (d *demo) runRelease(ctx context.Context, env *cluster.Cluster, kube kubernetes.Interface, agg aggregator.Interface, apps []*kosinstall.Guest, root, repo string) error {
	began := time.Now()
	say("Release %[1]s is rendered from one source per addon with an operator's configuration file (docs/install.md, \"Configuration\"), and brings MultiNetworkPolicy (docs/policy.md). Build today's images, those of %[1]s (no container engine), and push them, for this machine's platform:", policyRelease)
	if err := d.run("go", "run", "./tools/kosimages", "--root", root, "--push", repo, "--platform", "linux/"+runtime.GOARCH); err != nil {
		return err
	}
	config := filepath.Join(d.envDir, "release-config.yaml")
	if err := os.WriteFile(config, []byte(releaseConfig(repo)), 0o644); err != nil {
		return fmt.Errorf("writing the release configuration: %w", err)
	}
	say("The operator's release configuration, %s; a key left out keeps its default:", config)
	fmt.Print(releaseConfig(repo))
	tree := filepath.Join(d.envDir, "release-"+policyRelease)
	if err := os.RemoveAll(tree); err != nil {
		return err
	}
	say("Render %s with it, every KOS image pinned by the digest the registry has (--resolve); kos-release checks every hash and lints every channel it wrote:", policyRelease)
	rendered := time.Now()
	if err := d.run(filepath.Join(d.binDir, "kos-release"), "render", "--config", config, "--out", tree, "--resolve"); err != nil {
		return err
	}
	renderTook := time.Since(rendered)
	rel, err := kosinstall.WriteReleaseChannel(tree, "kos-"+policyRelease+".yaml", semver.MustParse(policyRelease))
	if err != nil {
		return err
	}
	channel := filepath.Join(tree, rel)
	pinned, err := countPinned(tree)
	if err != nil {
		return err
	}
	fmt.Printf("    rendered in %.1f s; %d image references pinned by digest; the channel of this cluster: %s\n", renderTook.Seconds(), pinned, channel)

	if err := d.upgradeUnderApps(ctx, kube, agg, apps, policyRelease, channel); err != nil {
		return err
	}
	if err := d.channelsAt("get", "addons"); err != nil {
		return err
	}
	say("The configuration reached the running cluster: the control components ask for %s of CPU:", configuredCPU)
	for _, name := range []string{"kos-apiserver", "kos-controller-manager"} {
		dep, err := kube.AppsV1().Deployments(kosinstall.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading Deployment %s: %w", name, err)
		}
		var c corev1.Container
		for _, each := range dep.Spec.Template.Spec.Containers {
			if each.Name == name {
				c = each
			}
		}
		got := c.Resources.Requests.Cpu().String()
		fmt.Printf("    %s: container %s requests cpu %s, image %s\n", name, name, got, c.Image)
		if got != configuredCPU {
			return fmt.Errorf("Deployment %s requests cpu %s, the configuration says %s", name, got, configuredCPU)
		}
	}
	if err := d.runPolicy(ctx, env); err != nil {
		return err
	}
	say("KOS %s, rendered from a configuration file, runs with its policies, %s after this step began.", policyRelease, time.Since(began).Round(time.Second))
	return nil
}

// countPinned counts the image references pinned by digest in the
// manifests of tree.
func countPinned(tree string) (int, error) {
	n := 0
	err := filepath.WalkDir(tree, func(path string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for line := range strings.SplitSeq(string(data), "\n") {
			if strings.Contains(line, "image:") && strings.Contains(line, "@sha256:") {
				n++
			}
		}
		return nil
	})
	return n, err
}

// runPolicy shows a MultiNetworkPolicy on the pods' network: a connection
// from the first pod to the second's sink, on another node, opens; a policy
// isolating the pods for ingress denies it; a second one allowing the
// sink's port lets it open again. Each is a real connection attempt.
func (d *demo) runPolicy(ctx context.Context, env *cluster.Cluster) error {
	client, err := kosclient.NewForConfig(env.RESTConfig)
	if err != nil {
		return fmt.Errorf("a client of the KOS API: %w", err)
	}
	pods := clusterPods[:2]
	atts, err := waitAttachments(ctx, client, podsNamespace, pods[0]+"-"+podsIfName, pods[1]+"-"+podsIfName)
	if err != nil {
		return err
	}
	from, to := pods[0], atts[1]
	target := to.Status.IPv4 + ":" + podnetPort
	say("MultiNetworkPolicy: %s (on %s) opens a TCP connection to the sink of %s at %s (on %s), on network %s: podnet send of no bytes, which gives up connecting after 10 s. Without a policy it opens:", from, atts[0].Spec.Node, pods[1], target, to.Spec.Node, podsNetwork)
	if ok, _ := d.connect(ctx, true, from, target); !ok {
		return fmt.Errorf("%s cannot connect to %s before any policy", from, target)
	}

	for _, step := range []struct {
		name, port, words string
		want              bool
	}{
		{"deny-ingress", "", "isolates every pod of the namespace on network " + podsNetwork + " for ingress and allows nothing", false},
		{"allow-sink", podnetPort, "allows TCP " + podnetPort + " from the namespace's pods; policies add up, so this one opens what the first closed, on that port only", true},
	} {
		manifest := policyManifest(step.name, step.port)
		file := filepath.Join(d.envDir, "kos-policy-"+step.name+".yaml")
		if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
			return fmt.Errorf("writing policy %s: %w", step.name, err)
		}
		say("A MultiNetworkPolicy that %s:", step.words)
		fmt.Print(manifest)
		if err := d.kubectl("apply", "-f", file); err != nil {
			return err
		}
		written := time.Now()
		// The controller publishes the policy to the nodes and each
		// node's agent programs its switch: try until it holds.
		if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			ok, _ := d.connect(ctx, false, from, target)
			return ok == step.want, nil
		}); err != nil {
			return fmt.Errorf("policy %s: the connection from %s to %s still %s after 2 minutes: %w", step.name, from, target, verdict(!step.want), err)
		}
		took := time.Since(written)
		say("The connection is %s %.1f s after the policy was written (attempts of up to 10 s each). Once more, to show it:", verdict(step.want), took.Seconds())
		tried := time.Now()
		ok, _ := d.connect(ctx, true, from, target)
		if ok != step.want {
			return fmt.Errorf("policy %s: the connection from %s to %s %s, want %s", step.name, from, target, verdict(ok), verdict(step.want))
		}
		fmt.Printf("    %s in %.1f s\n", verdict(ok), time.Since(tried).Seconds())
	}
	say("What the controller published: a NodeNetworkPolicy per node and network where a policy isolates an attachment, exactly what that node's switch enforces:")
	if err := d.kubectl("-n", podsNamespace, "get", "multi-networkpolicies,nodenetworkpolicies"); err != nil {
		return err
	}
	return nil
}

// connect opens a TCP connection from pod (in podsNamespace) to target
// with podnet send of no bytes, and says whether it opened.
func (d *demo) connect(ctx context.Context, echo bool, pod, target string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err := d.podExec(ctx, echo, pod, podnetBin, "send", target, "0")
	return err == nil, err
}

// verdict says "allowed" or "denied".
func verdict(ok bool) string {
	if ok {
		return "allowed"
	}
	return "denied"
}
