package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/testenv"
)

// The cluster part of the demo: KOS installed and upgraded live on a real
// three-node cluster (`localenv up --cluster --nodes 3 --registry`) as an
// operator of a real cluster would: the images pushed to a registry the
// nodes pull from, a release written for that registry, local volumes for
// etcd, and channels. Release 0.1.0 goes in first, as a cluster installed
// before 0.2.0 runs it; guests on different nodes then ping each other
// while channels upgrades KOS to 0.2.0.
const (
	// clusterNetnsPrefix names the guest namespaces of the cluster demo,
	// apart from the SDN demo's, so that each down finds only its own.
	clusterNetnsPrefix = "kos-cdemo-"
	// clusterNamespace holds the cluster demo's Subnet and attachments.
	clusterNamespace = "kos-cluster-demo"
	// clusterSubnet is the demo subnet's address range.
	clusterSubnet = "10.78.0.0/24"
	// oldRelease and newRelease are the KOS releases the demo installs
	// and upgrades to.
	oldRelease = "0.1.0"
	newRelease = "0.2.0"
)

// runCluster runs the cluster demo on the started cluster in d.envDir.
func (d *demo) runCluster(ctx context.Context) error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	env, err := cluster.Attach(d.envDir)
	if err != nil {
		return fmt.Errorf("finding the local cluster in %s: %w", d.envDir, err)
	}
	if len(env.Nodes) < 2 || env.Registry == "" || env.Nodes[0].OVSRunDir == "" {
		return fmt.Errorf("the environment in %s has %d nodes, registry %q and node Open vSwitch %t: start it with localenv up --cluster --nodes 3 --registry --multus", d.envDir, len(env.Nodes), env.Registry, env.Nodes[0].OVSRunDir != "")
	}
	if err := requireMultus(env); err != nil {
		return err
	}
	began := time.Now()

	say("A real cluster of %d nodes: kube-apiserver, kube-controller-manager and kube-scheduler on this host, and on each node kubelet, containerd, kube-proxy and Open vSwitch in network and mount namespaces of their own, on one underlay. A registry runs at %s.", len(env.Nodes), env.Registry)
	say("The story: this cluster runs KOS %[1]s, whose agent programs each node's own Open vSwitch, and upgrades to KOS %[2]s while workloads on different nodes talk to each other. (The %[2]s agent brings its Open vSwitch in its pod, or adopts the node's when there is one, as here.)", oldRelease, newRelease)
	if err := d.kubectl("get", "nodes", "-o", "wide"); err != nil {
		return err
	}
	if err := d.nodeUnderlays(ctx, env); err != nil {
		return err
	}

	repo := env.Registry + "/kos"
	for _, v := range []string{oldRelease, newRelease} {
		if err := pushReleasedImages(ctx, root, repo, v); err != nil {
			return err
		}
	}

	tree := filepath.Join(d.envDir, "release")
	say("Write the release for that registry: the channels and manifests of every release, every image renamed and pinned by digest, every hash recomputed. This is the tree an operator copies to a web server or an S3 bucket:")
	if err := d.run("go", "run", "./tools/addons", "--root", root, "release", "--registry", repo, "--out", tree); err != nil {
		return err
	}
	channelOf := map[string]string{}
	for _, v := range []string{oldRelease, newRelease} {
		rel, err := kosinstall.WriteReleaseChannel(tree, "kos-"+v+".yaml", semver.MustParse(v))
		if err != nil {
			return err
		}
		channelOf[v] = filepath.Join(tree, rel)
	}
	fmt.Printf("    and two channels that stand for what the operator published then and now: %s (the releases up to %s) and %s (up to %s), both with the agent on Open vSwitch's userspace datapath (these nodes have no kernel module)\n",
		filepath.Base(channelOf[oldRelease]), oldRelease, filepath.Base(channelOf[newRelease]), newRelease)

	say("etcd's three members keep their data on the cluster's default StorageClass. These nodes have no storage provisioner, so, as on bare metal, a StorageClass without one and a local PersistentVolume per node under %s:", kosinstall.VolumesDir)
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		return fmt.Errorf("a client of the cluster: %w", err)
	}
	var nodes []kosinstall.VolumeNode
	for _, n := range env.Nodes {
		nodes = append(nodes, kosinstall.VolumeNode{Name: n.Name, HostDir: n.HostPath(kosinstall.VolumesDir)})
	}
	if err := kosinstall.ProvideLocalVolumes(ctx, kube, nodes, resource.MustParse("2Gi")); err != nil {
		return err
	}
	if err := d.kubectl("get", "storageclass,persistentvolumes"); err != nil {
		return err
	}

	say("Install KOS %s, as the cluster got it back then:", oldRelease)
	if err := d.channelsAt("apply", "channel", channelOf[oldRelease], "--yes", demoTimeout); err != nil {
		return err
	}
	say("Wait for every KOS pod to be Ready and the KOS API to be Available through the aggregation layer:")
	agg, err := aggregator.NewForConfig(env.RESTConfig)
	if err != nil {
		return fmt.Errorf("a client of the aggregator: %w", err)
	}
	if err := d.waitKOS(ctx, kube, agg); err != nil {
		return err
	}
	if err := d.kubectl("-n", kosinstall.Namespace, "get", "pods", "-o", "wide"); err != nil {
		return err
	}

	guests, err := d.clusterAttachments(ctx, env)
	if err != nil {
		return err
	}
	if err := d.liveUpgrade(ctx, env, kube, agg, guests, channelOf[oldRelease], channelOf[newRelease]); err != nil {
		return err
	}
	apps, err := d.runPods(ctx, env, kube, agg, guests, root, repo, tree)
	defer forgetApps(apps)
	if err != nil {
		return err
	}
	if err := d.runRelease(ctx, env, kube, agg, apps, root, repo); err != nil {
		return err
	}

	say("Done after %s. The cluster, KOS and the pods keep running:", time.Since(began).Round(time.Second))
	fmt.Printf("    export KUBECONFIG=%s\n", d.kubeconfig)
	fmt.Printf("    kubectl get pods -A -o wide\n")
	fmt.Printf("    kubectl get subnets,networkattachments -n %s -o wide\n", clusterNamespace)
	fmt.Printf("    %s get addons\n", filepath.Join(d.binDir, "channels"))
	fmt.Printf("    ip netns exec %sguest-b ping <guest-a's address>\n", clusterNetnsPrefix)
	fmt.Printf("    kubectl -n %s get pods,networkattachments -o wide\n", podsNamespace)
	fmt.Printf("    kubectl -n %s exec %s -- ping <%s's address on %s>\n", podsNamespace, clusterPods[0], clusterPods[1], podsIfName)
	fmt.Printf("    kubectl -n %s exec %s -- %s send <%s's address on %s>:%s 1000000\n", podsNamespace, clusterPods[0], podnetBin, clusterPods[1], podsIfName, podnetPort)
	fmt.Printf("    kubectl -n %s get multi-networkpolicies,nodenetworkpolicies\n", podsNamespace)
	fmt.Printf("Logs are in %s. Stop it all with: make demo-cluster-down (or go run ./tools/demo --env-dir %s cluster-down)\n", d.envDir, d.envDir)
	return nil
}

// clusterGuests names the demo's attachments, one per node in node order.
var clusterGuests = []string{"guest-a", "guest-b", "guest-c"}

// clusterAttachments creates a subnet and an attachment on each node (up
// to three), waits for the agents to make their interfaces, gives each to
// a guest namespace and pings from the first to the second across the
// VXLAN overlay between the nodes. It returns the guests in node order.
func (d *demo) clusterAttachments(ctx context.Context, env *cluster.Cluster) ([]*kosinstall.Guest, error) {
	var manifest strings.Builder
	fmt.Fprintf(&manifest, `apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: network.example.com/v1alpha1
kind: Subnet
metadata:
  name: blue
  namespace: %[1]s
spec:
  ipv4: %[2]s
  vni: 78
`, clusterNamespace, clusterSubnet)
	names := clusterGuests[:min(len(clusterGuests), len(env.Nodes))]
	var on []string
	for i, name := range names {
		fmt.Fprintf(&manifest, `---
apiVersion: network.example.com/v1alpha1
kind: NetworkAttachment
metadata:
  name: %s
  namespace: %s
spec:
  node: %s
  subnet: blue
`, name, clusterNamespace, env.Nodes[i].Name)
		on = append(on, env.Nodes[i].Name)
	}
	file := filepath.Join(d.envDir, "kos-cluster-demo.yaml")
	if err := os.WriteFile(file, []byte(manifest.String()), 0o644); err != nil {
		return nil, fmt.Errorf("writing the demo's manifest: %w", err)
	}
	say("A Subnet, and a NetworkAttachment on each of nodes %s, served by kos-apiserver through kube-apiserver:", strings.Join(on, ", "))
	fmt.Print(manifest.String())
	if err := d.kubectl("apply", "-f", file); err != nil {
		return nil, err
	}
	client, err := kosclient.NewForConfig(env.RESTConfig)
	if err != nil {
		return nil, fmt.Errorf("a client of the KOS API: %w", err)
	}
	atts, err := waitAttachments(ctx, client, clusterNamespace, names...)
	if err != nil {
		return nil, err
	}
	say("kos-controller-manager validated the subnet and gave out addresses; the agents made the interfaces in their nodes' Open vSwitch:")
	if err := d.kubectl("get", "subnets,networkattachments", "-n", clusterNamespace, "-o", "wide"); err != nil {
		return nil, err
	}

	say("Move each interface from its node's namespace into a guest namespace, as a workload would use it, and ping across the nodes:")
	var guests []*kosinstall.Guest
	for i, att := range atts {
		g, err := kosinstall.PlumbGuest(ctx, env.Nodes[i].Netns, clusterNetnsPrefix+att.Name, att, netip.MustParsePrefix(clusterSubnet))
		if err != nil {
			return nil, err
		}
		guests = append(guests, g)
		fmt.Printf("    %s: %s %s (%s) on %s into namespace %s\n", att.Name, att.Status.IfcName, att.Status.IPv4, att.Status.MACAddress, att.Spec.Node, g.Name)
	}
	if err := awaitRing(ctx, guests); err != nil {
		return nil, err
	}
	fmt.Printf("\n$ ip netns exec %s ping -c 3 %s\n", guests[0].Name, guests[1].IP)
	ping := guests[0].Command(ctx, "ping", "-c", "3", "-W", "2", guests[1].IP.String())
	ping.Stdout, ping.Stderr = os.Stdout, os.Stderr
	if err := ping.Run(); err != nil {
		return nil, fmt.Errorf("pinging %s from %s: %w", guests[1].IP, guests[0].Name, err)
	}
	return guests, nil
}

// waitAttachments waits until the named attachments in namespace ns have
// an address and an interface, and returns them in that order.
func waitAttachments(ctx context.Context, client kosclient.Interface, ns string, names ...string) ([]*v1alpha1.NetworkAttachment, error) {
	atts := make([]*v1alpha1.NetworkAttachment, len(names))
	var last error
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for i, name := range names {
			att, err := client.NetworkV1alpha1().NetworkAttachments(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				last = err
				return false, nil
			}
			if att.Status.IPv4 == "" || att.Status.IfcName == "" {
				last = fmt.Errorf("attachment %s has address %q and interface %q so far", name, att.Status.IPv4, att.Status.IfcName)
				return false, nil
			}
			atts[i] = att
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the attachments: %w (%v)", err, last)
	}
	return atts, nil
}

// waitKOS waits until KOS is ready (kosinstall.Ready), saying how it goes
// now and then.
func (d *demo) waitKOS(ctx context.Context, kube kubernetes.Interface, agg aggregator.Interface) error {
	var last error
	shown := time.Now()
	err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		last = kosinstall.Ready(ctx, kube, agg)
		if last != nil && time.Since(shown) > 15*time.Second {
			fmt.Printf("    waiting: %v\n", last)
			shown = time.Now()
		}
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for KOS to be ready: %w (%v); see kubectl -n %s get pods and the logs in %s", err, last, kosinstall.Namespace, d.envDir)
	}
	return nil
}

// channelsAt runs the channels binary with no extra environment, echoing
// the command.
func (d *demo) channelsAt(args ...string) error {
	return d.show("channels", filepath.Join(d.binDir, "channels"), args)
}

// run echoes and runs a command in the working directory, without a
// kubeconfig.
func (d *demo) run(name string, args ...string) error {
	fmt.Printf("\n$ %s %s\n", name, strings.Join(args, " "))
	cmd := exec.CommandContext(d.ctx, name, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

// downCluster stops the cluster demo: deletes its guest namespaces, then
// stops the cluster with `localenv down` (passing it localenvArgs).
func downCluster(ctx context.Context, envDir string, localenvArgs []string) error {
	var errs []error
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), clusterNetnsPrefix) {
			continue
		}
		if err := (&ovsenv.Netns{Name: e.Name()}).Delete(); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Printf("deleted network namespace %s\n", e.Name())
	}
	args := append([]string{"run", "./tools/localenv", "--dir", envDir, "down"}, localenvArgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		errs = append(errs, fmt.Errorf("go %s: %w", strings.Join(args, " "), err))
	}
	return errors.Join(errs...)
}

// demoTimeout is how long the demo's applies wait for their addons to be
// ready: channels' default of 5 minutes was too short for a rollout of
// three nodes on a busy two-core machine (load 28: the upgrade to 0.3.0
// was 2 of 3 agents after 5 minutes, and on its way).
const demoTimeout = "--timeout=10m"
