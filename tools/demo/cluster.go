package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

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

// The cluster part of the demo: KOS installed from its channels on a real
// single-node cluster (`localenv up --cluster --node-ovs`), as an operator
// would install it.
const (
	// clusterNetnsPrefix names the guest namespaces of the cluster demo,
	// apart from the SDN demo's, so that each down finds only its own.
	clusterNetnsPrefix = "kos-cdemo-"
	// clusterNamespace holds the cluster demo's Subnet and attachments.
	clusterNamespace = "kos-cluster-demo"
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
	if len(env.Nodes) == 0 || env.Nodes[0].OVSRunDir == "" {
		return fmt.Errorf("the environment in %s has no node with Open vSwitch: start it with localenv up --cluster --node-ovs", d.envDir)
	}
	began := time.Now()

	say("A real single-node cluster: kube-apiserver, kube-controller-manager, kube-scheduler, and node %s with kubelet, containerd and kube-proxy in network namespace %s, with an Open vSwitch of its own.", env.Nodes[0].Name, env.Nodes[0].Netns)
	if err := d.kubectl("get", "nodes", "--show-labels"); err != nil {
		return err
	}

	say("Build the KOS images (no container engine, nothing pulled) and import them into the node's containerd:")
	tarball := filepath.Join(d.envDir, "kos-images.tar")
	if err := d.run("go", "run", "./tools/kosimages", "--root", root, "--out", tarball, "--import", env.Nodes[0].ContainerdAddress); err != nil {
		return err
	}

	etcdDir := kosinstall.VarLib + "/etcd"
	say("The KOS manifests mount %s (the node's Open vSwitch) and %s (the single-node etcd's local volume, whose folder the operator creates) from the node. The node has a mount namespace of its own, in which they are folders of the node's, on this host at:", kosinstall.OVSRunDir, etcdDir)
	if err := os.MkdirAll(env.Nodes[0].HostPath(etcdDir), 0o755); err != nil {
		return fmt.Errorf("creating the node's %s: %w", etcdDir, err)
	}
	fmt.Printf("    %s: %s\n    %s: %s\n", kosinstall.OVSRunDir, env.Nodes[0].HostPath(kosinstall.OVSRunDir), etcdDir, env.Nodes[0].HostPath(etcdDir))

	install := []string{"apply", "channel", "addons/local-channel.yaml", "bootstrap-channel.yaml"}
	say("Install KOS from its channels: the local channel (single-node etcd, userspace agent) and the bootstrap channel. Without --yes, channels shows the plan:")
	if err := d.channelsAt(install...); err != nil {
		return err
	}
	say("Apply it:")
	if err := d.channelsAt(append(install, "--yes")...); err != nil {
		return err
	}

	say("Wait for every KOS pod to be Ready and the KOS API to be Available through the aggregation layer:")
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		return fmt.Errorf("a client of the cluster: %w", err)
	}
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

	upgrade := func(n int) []string {
		return append(install[:len(install):len(install)], fmt.Sprintf("tools/e2e/testdata/upgrade/channel-%d.yaml", n))
	}
	say("Upgrades: a test channel publishes kos-controller-manager 0.1.1-e2e.1, which adds a ConfigMap and a Role:")
	if err := d.channelsAt(append(upgrade(1), "--yes")...); err != nil {
		return err
	}
	if err := d.kubectl("-n", kosinstall.Namespace, "get", "configmaps,roles", "-l", kosinstall.AddonLabel+"=kos-controller-manager"); err != nil {
		return err
	}
	say("Release 0.1.1-e2e.2 renames the ConfigMap and drops the Role. The plan, then the upgrade, which prunes what the release dropped:")
	if err := d.channelsAt(upgrade(2)...); err != nil {
		return err
	}
	if err := d.channelsAt(append(upgrade(2), "--yes")...); err != nil {
		return err
	}
	if err := d.kubectl("-n", kosinstall.Namespace, "get", "configmaps,roles", "-l", kosinstall.AddonLabel+"=kos-controller-manager"); err != nil {
		return err
	}
	if err := d.waitKOS(ctx, kube, agg); err != nil {
		return err
	}
	if err := d.channelsAt("get", "addons"); err != nil {
		return err
	}

	say("Done after %s. The cluster and KOS keep running:", time.Since(began).Round(time.Second))
	fmt.Printf("    export KUBECONFIG=%s\n", d.kubeconfig)
	fmt.Printf("    kubectl -n %s get pods\n", kosinstall.Namespace)
	fmt.Printf("    kubectl get subnets,networkattachments -n %s -o wide\n", clusterNamespace)
	fmt.Printf("    %s get addons\n", filepath.Join(d.binDir, "channels"))
	fmt.Printf("    ip netns exec %sguest-b ping <guest-a's address>\n", clusterNetnsPrefix)
	fmt.Printf("Logs are in %s. Stop it all with: make demo-cluster-down (or go run ./tools/demo --env-dir %s cluster-down)\n", d.envDir, d.envDir)
	return nil
}

// clusterAttachments creates a subnet and two attachments on the node,
// waits for the agent pod to make their interfaces, moves them into two
// guest namespaces and pings between them.
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
  ipv4: 10.78.0.0/24
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
  node: %[2]s
  subnet: blue
`, clusterNamespace, env.Nodes[0].Name)
	file := filepath.Join(d.envDir, "kos-cluster-demo.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		return fmt.Errorf("writing the demo's manifest: %w", err)
	}
	say("A Subnet and two NetworkAttachments on node %s, served by kos-apiserver through kube-apiserver:", env.Nodes[0].Name)
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
	say("kos-controller-manager validated the subnet and gave out addresses; the kos-agent pod made the interfaces in the node's Open vSwitch:")
	if err := d.kubectl("get", "subnets,networkattachments", "-n", clusterNamespace, "-o", "wide"); err != nil {
		return err
	}

	say("Move each interface from the node's namespace into a guest namespace, as a workload would use it, and ping:")
	node := &ovsenv.Netns{Name: env.Nodes[0].Netns}
	var guests []*ovsenv.Netns
	for _, att := range atts {
		g, err := ovsenv.NewNetns(ctx, clusterNetnsPrefix+att.Name)
		if err != nil {
			return err
		}
		guests = append(guests, g)
		ifc := att.Status.IfcName
		fmt.Printf("    %s: %s %s (%s) into namespace %s\n", att.Name, ifc, att.Status.IPv4, att.Status.MACAddress, g.Name)
		if _, err := node.Run(ctx, "ip", "link", "set", ifc, "netns", g.Name); err != nil {
			return err
		}
		for _, cmd := range [][]string{
			{"ip", "addr", "add", att.Status.IPv4 + "/24", "dev", ifc},
			{"ip", "link", "set", ifc, "up"},
			{"ip", "link", "set", "lo", "up"},
		} {
			if _, err := g.Run(ctx, cmd[0], cmd[1:]...); err != nil {
				return err
			}
		}
	}
	fmt.Printf("\n$ ip netns exec %s ping -c 3 %s\n", guests[0].Name, atts[1].Status.IPv4)
	ping := guests[0].Command(ctx, "ping", "-c", "3", "-W", "2", atts[1].Status.IPv4)
	ping.Stdout, ping.Stderr = os.Stdout, os.Stderr
	if err := ping.Run(); err != nil {
		return fmt.Errorf("pinging %s from %s: %w", atts[1].Status.IPv4, guests[0].Name, err)
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
