package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

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

// The cluster part of the demo: the standard KOS releases installed on a
// real three-node cluster (`localenv up --cluster --nodes 3 --node-ovs=false
// --registry`) as an operator of a real cluster would: the images pushed
// to a registry the nodes pull from, a release written for that registry,
// local volumes for etcd, and channels.
const (
	// clusterNetnsPrefix names the guest namespaces of the cluster demo,
	// apart from the SDN demo's, so that each down finds only its own.
	clusterNetnsPrefix = "kos-cdemo-"
	// clusterNamespace holds the cluster demo's Subnet and attachments.
	clusterNamespace = "kos-cluster-demo"
	// clusterSubnet is the demo subnet's address range.
	clusterSubnet = "10.78.0.0/24"
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
	if len(env.Nodes) < 2 || env.Registry == "" {
		return fmt.Errorf("the environment in %s has %d nodes and registry %q: start it with localenv up --cluster --nodes 3 --node-ovs=false --registry", d.envDir, len(env.Nodes), env.Registry)
	}
	began := time.Now()

	say("A real cluster of %d nodes: kube-apiserver, kube-controller-manager and kube-scheduler on this host, and on each node kubelet, containerd and kube-proxy in network and mount namespaces of their own, on one underlay. No node has Open vSwitch installed. A registry runs at %s.", len(env.Nodes), env.Registry)
	if err := d.kubectl("get", "nodes", "-o", "wide"); err != nil {
		return err
	}

	repo := env.Registry + "/kos"
	say("Build the KOS images (no container engine) and push them to the registry, for this machine's platform (without --platform, also linux/arm64):")
	if err := d.run("go", "run", "./tools/kosimages", "--root", root, "--push", repo, "--platform", "linux/"+runtime.GOARCH); err != nil {
		return err
	}

	tree := filepath.Join(d.envDir, "release")
	say("Write the release for that registry: the channels and manifests, every image renamed and pinned by digest, every hash recomputed. This is the tree an operator copies to a web server or an S3 bucket:")
	if err := d.run("go", "run", "./tools/addons", "--root", root, "release", "--registry", repo, "--out", tree); err != nil {
		return err
	}
	userspace, err := kosinstall.WriteUserspaceAgentChannel(tree)
	if err != nil {
		return err
	}
	fmt.Printf("    and %s: the agent's userspace-datapath release alone (these nodes' OVS has no kernel module)\n", userspace)

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

	install := []string{"apply", "channel", filepath.Join(tree, userspace), filepath.Join(tree, "bootstrap-channel.yaml")}
	say("Install KOS from the release's channels. Without --yes, channels shows the plan:")
	if err := d.channelsAt(install...); err != nil {
		return err
	}
	say("Apply it:")
	if err := d.channelsAt(append(install, "--yes")...); err != nil {
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
	for _, ns := range kosinstall.Namespaces() {
		if err := d.kubectl("-n", ns, "get", "pods", "-o", "wide"); err != nil {
			return err
		}
	}
	if err := d.kubectl("get", "apiservice", kosinstall.APIService); err != nil {
		return err
	}
	say("What is installed, as channels records it:")
	if err := d.channelsAt("get", "addons"); err != nil {
		return err
	}

	if err := d.clusterAttachments(ctx, env); err != nil {
		return err
	}

	say("Done after %s. The cluster and KOS keep running:", time.Since(began).Round(time.Second))
	fmt.Printf("    export KUBECONFIG=%s\n", d.kubeconfig)
	fmt.Printf("    kubectl get pods -A -o wide\n")
	fmt.Printf("    kubectl get subnets,networkattachments -n %s -o wide\n", clusterNamespace)
	fmt.Printf("    %s get addons\n", filepath.Join(d.binDir, "channels"))
	fmt.Printf("    ip netns exec %sguest-b ping <guest-a's address>\n", clusterNetnsPrefix)
	fmt.Printf("Logs are in %s. Stop it all with: make demo-cluster-down (or go run ./tools/demo --env-dir %s cluster-down)\n", d.envDir, d.envDir)
	return nil
}

// clusterAttachments creates a subnet and an attachment on each of the
// first two nodes, waits for the agents to make their interfaces, gives
// each to a guest namespace and pings from one to the other across the
// VXLAN overlay between the nodes.
func (d *demo) clusterAttachments(ctx context.Context, env *cluster.Cluster) error {
	manifest := fmt.Sprintf(`apiVersion: v1
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
  ipv4: %[4]s
  vni: 78
---
apiVersion: network.example.com/v1alpha1
kind: NetworkAttachment
metadata:
  name: guest-a
  namespace: %[1]s
spec:
  node: %[2]s
  subnet: blue
---
apiVersion: network.example.com/v1alpha1
kind: NetworkAttachment
metadata:
  name: guest-b
  namespace: %[1]s
spec:
  node: %[3]s
  subnet: blue
`, clusterNamespace, env.Nodes[0].Name, env.Nodes[1].Name, clusterSubnet)
	file := filepath.Join(d.envDir, "kos-cluster-demo.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		return fmt.Errorf("writing the demo's manifest: %w", err)
	}
	say("A Subnet, and a NetworkAttachment on each of nodes %s and %s, served by kos-apiserver through kube-apiserver:", env.Nodes[0].Name, env.Nodes[1].Name)
	fmt.Print(manifest)
	if err := d.kubectl("apply", "-f", file); err != nil {
		return err
	}
	client, err := kosclient.NewForConfig(env.RESTConfig)
	if err != nil {
		return fmt.Errorf("a client of the KOS API: %w", err)
	}
	atts, err := waitAttachments(ctx, client, clusterNamespace, "guest-a", "guest-b")
	if err != nil {
		return err
	}
	say("kos-controller-manager validated the subnet and gave out addresses; the agent pods made the interfaces in their nodes' Open vSwitch, which runs in the agent pod:")
	if err := d.kubectl("get", "subnets,networkattachments", "-n", clusterNamespace, "-o", "wide"); err != nil {
		return err
	}

	say("Move each interface from its node's namespace into a guest namespace, as a workload would use it, and ping across the nodes:")
	var guests []*kosinstall.Guest
	for i, att := range atts {
		g, err := kosinstall.PlumbGuest(ctx, env.Nodes[i].Netns, clusterNetnsPrefix+att.Name, att, netip.MustParsePrefix(clusterSubnet))
		if err != nil {
			return err
		}
		guests = append(guests, g)
		fmt.Printf("    %s: %s %s (%s) on %s into namespace %s\n", att.Name, att.Status.IfcName, att.Status.IPv4, att.Status.MACAddress, att.Spec.Node, g.Name)
	}
	// The first packets of a new tunnel may be lost while the userspace
	// datapath learns its neighbour: wait for a first reply.
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := guests[0].Ping(ctx, guests[1].IP, 1, time.Second)
		return got == 1, err
	}); err != nil {
		return fmt.Errorf("no reply from %s to %s across the nodes: %w", guests[1].IP, guests[0].Name, err)
	}
	fmt.Printf("\n$ ip netns exec %s ping -c 3 %s\n", guests[0].Name, guests[1].IP)
	ping := guests[0].Command(ctx, "ping", "-c", "3", "-W", "2", guests[1].IP.String())
	ping.Stdout, ping.Stderr = os.Stdout, os.Stderr
	if err := ping.Run(); err != nil {
		return fmt.Errorf("pinging %s from %s: %w", guests[1].IP, guests[0].Name, err)
	}
	return nil
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
