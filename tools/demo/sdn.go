package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/testenv"
)

// netnsPrefix names every network namespace the demo makes, so that `down`
// finds them all.
const netnsPrefix = "kos-demo-"

// demoNamespace holds the demo's Subnet and NetworkAttachments.
const demoNamespace = "kos-demo"

// simNode is a simulated node: a network namespace with an Open vSwitch of
// its own and an underlay address on bridge br-ul, which holds the node's end
// of the veth that joins the two nodes.
type simNode struct {
	name   string
	hostIP string
	ns     *ovsenv.Netns
	ovs    *ovsenv.Instance
}

// runSDN starts the KOS SDN next to the local control plane (kos-apiserver
// with its own etcd, kos-controller-manager, two simulated nodes each with
// an Open vSwitch and a kos-agent), creates a subnet and an attachment on
// each node, and pings from one attachment's guest to the other's over
// VXLAN.
func (d *demo) runSDN(ctx context.Context) error {
	env, err := testenv.Attach(d.envDir)
	if err != nil {
		return fmt.Errorf("finding the local control plane in %s: %w", d.envDir, err)
	}

	say("Part two: the KOS SDN. kos-apiserver serves Subnets, NetworkAttachments and IPLocks from an etcd of its own, behind the aggregation layer:")
	kos, err := env.StartKOS(ctx, testenv.KOSOptions{})
	if err != nil {
		return err
	}
	if err := d.kubectl("get", "apiservice", "v1alpha1.network.example.com"); err != nil {
		return err
	}

	say("kos-controller-manager validates subnets and gives attachments addresses (IPAM by IPLock objects):")
	if err := d.startComponent(ctx, env, "kos-controller-manager", "kos-controller-manager",
		"--kubeconfig", env.Kubeconfig,
		"--kos-api-server", kos.URL, "--kos-api-ca-file", kos.CACertFile); err != nil {
		return err
	}

	say("Two simulated nodes, node-a and node-b: network namespaces joined by a veth underlay, each with an Open vSwitch of its own and a kos-agent.")
	nodes := []*simNode{{name: "node-a", hostIP: "192.168.77.1"}, {name: "node-b", hostIP: "192.168.77.2"}}
	if err := d.startNodes(ctx, nodes); err != nil {
		return err
	}
	for _, n := range nodes {
		if err := d.startComponent(ctx, env, "kos-agent-"+n.name, "kos-agent",
			"--kubeconfig", env.Kubeconfig,
			"--kos-api-server", kos.URL, "--kos-api-ca-file", kos.CACertFile,
			"--node-name", n.name, "--host-ip", n.hostIP,
			// The agent runs in the host's network namespace, where no
			// interface holds the simulated node's address, so it cannot
			// read the underlay's MTU: it is told it (a 1500-byte veth,
			// less VXLAN's 50 bytes).
			"--mtu", strconv.Itoa(1500-fabric.VXLANOverhead),
			"--ovs-run-dir", n.ovs.RunDir, "--datapath-type", "netdev",
			// Both agents share the host's network namespace, and so
			// the ports; the demo reads no debug endpoint.
			"--debug-endpoints=false"); err != nil {
			return err
		}
	}

	manifest := filepath.Join(d.envDir, "kos-demo.yaml")
	if err := os.WriteFile(manifest, []byte(sdnManifest), 0o644); err != nil {
		return err
	}
	say("A subnet, and an attachment on each node:")
	fmt.Print(sdnManifest)
	if err := d.kubectl("apply", "-f", manifest); err != nil {
		return err
	}
	client, err := kosclient.NewForConfig(env.RESTConfig)
	if err != nil {
		return err
	}
	atts, err := waitAttachments(ctx, client, demoNamespace, "guest-a", "guest-b")
	if err != nil {
		return fmt.Errorf("attachments guest-a and guest-b (logs in %s): %w", d.envDir, err)
	}
	say("The controllers validated the subnet and gave out addresses; the agents made the interfaces:")
	if err := d.kubectl("get", "subnets,networkattachments,iplocks", "-n", demoNamespace); err != nil {
		return err
	}

	say("Each node's bridge holds four flows per local attachment and three per remote one (node-a):")
	flows, err := nodes[0].ovs.Run(ctx, "ovs-ofctl", "dump-flows", "--no-stats", "kos")
	if err != nil {
		return err
	}
	fmt.Println(strings.TrimRight(flows, "\n"))

	say("Move each interface into a guest namespace, as a workload would use it, and ping across the VXLAN overlay:")
	var guests []*ovsenv.Netns
	for i, n := range nodes {
		g, err := moveToGuest(ctx, n, atts[i])
		if err != nil {
			return err
		}
		guests = append(guests, g)
	}
	for _, n := range nodes {
		if err := n.knowNeighbours(ctx, nodes); err != nil {
			return err
		}
	}
	fmt.Printf("\n$ ip netns exec %s ping -c 3 %s\n", guests[0].Name, atts[1].Status.IPv4)
	ping := guests[0].Command(ctx, "ping", "-c", "3", "-W", "2", atts[1].Status.IPv4)
	ping.Stdout, ping.Stderr = os.Stdout, os.Stderr
	if err := ping.Run(); err != nil {
		return fmt.Errorf("pinging %s from %s across the overlay: %w", atts[1].Status.IPv4, guests[0].Name, err)
	}

	say("Everything KOS serves is in the category kos:")
	return d.kubectl("get", "kos", "-n", demoNamespace)
}

// sdnManifest is what the demo creates through the main cluster's
// kube-apiserver, which proxies the KOS API group to kos-apiserver.
const sdnManifest = `apiVersion: v1
kind: Namespace
metadata:
  name: kos-demo
---
apiVersion: network.example.com/v1alpha1
kind: Subnet
metadata:
  name: blue
  namespace: kos-demo
spec:
  ipv4: 10.77.0.0/24
  vni: 77
---
apiVersion: network.example.com/v1alpha1
kind: NetworkAttachment
metadata:
  name: guest-a
  namespace: kos-demo
spec:
  node: node-a
  subnet: blue
---
apiVersion: network.example.com/v1alpha1
kind: NetworkAttachment
metadata:
  name: guest-b
  namespace: kos-demo
spec:
  node: node-b
  subnet: blue
`

// startComponent starts one of the module's binaries (from the demo's bin
// folder) as a process of the local environment named name, serving metrics
// on a free loopback port, and waits until its /healthz answers.
func (d *demo) startComponent(ctx context.Context, env *testenv.Env, name, binary string, args ...string) error {
	binary = filepath.Join(d.binDir, binary)
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args = append(args, "--metrics-bind-address", addr)
	fmt.Printf("    %s (metrics on http://%s/metrics, log %s)\n", name, addr, filepath.Join(d.envDir, name+".log"))
	return env.StartProcess(ctx, name, binary, args, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/healthz: %s", resp.Status)
		}
		return nil
	})
}

// freePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startNodes makes the nodes' namespaces, the veth underlay between the
// first two, and an Open vSwitch in each with the underlay address on br-ul.
// The addresses exist only inside these namespaces.
func (d *demo) startNodes(ctx context.Context, nodes []*simNode) error {
	for _, n := range nodes {
		ns, err := ovsenv.NewNetns(ctx, netnsPrefix+n.name)
		if err != nil {
			return err
		}
		n.ns = ns
	}
	if err := ovsenv.AddVethPair(ctx, nodes[0].ns, "ul0", nodes[1].ns, "ul0"); err != nil {
		return err
	}
	for _, n := range nodes {
		inst, err := ovsenv.Start(ctx, ovsenv.Options{Dir: filepath.Join(d.envDir, "ovs-"+n.name), Netns: n.ns.Name, Detach: true})
		if err != nil {
			return err
		}
		n.ovs = inst
		if _, err := inst.Run(ctx, "ovs-vsctl", "add-br", "br-ul", "--", "set", "bridge", "br-ul", "datapath_type=netdev", "--", "add-port", "br-ul", "ul0"); err != nil {
			return err
		}
		for _, cmd := range [][]string{
			{"ip", "addr", "add", n.hostIP + "/24", "dev", "br-ul"},
			{"ip", "link", "set", "br-ul", "up"},
			{"ip", "link", "set", "ul0", "up"},
			// OVS owns ul0: only br-ul, which holds the address, answers ARP.
			{"sysctl", "-qw", "net.ipv4.conf.ul0.arp_ignore=1"},
		} {
			if _, err := n.ns.Run(ctx, cmd[0], cmd[1:]...); err != nil {
				return err
			}
		}
	}
	return nil
}

// knowNeighbours tells n's Open vSwitch the underlay MAC address of every
// other node's tunnel endpoint, so that the first packets are not dropped
// while the userspace datapath resolves it.
func (n *simNode) knowNeighbours(ctx context.Context, nodes []*simNode) error {
	for _, peer := range nodes {
		if peer == n {
			continue
		}
		mac, err := peer.ovs.Run(ctx, "ovs-vsctl", "get", "Interface", "br-ul", "mac_in_use")
		if err != nil {
			return err
		}
		if _, err := n.ovs.Run(ctx, "ovs-appctl", "tnl/neigh/set", "br-ul", peer.hostIP, strings.Trim(strings.TrimSpace(mac), `"`)); err != nil {
			return err
		}
	}
	return nil
}

// moveToGuest moves an attachment's interface from its node into a guest
// namespace of its own and configures its address there.
func moveToGuest(ctx context.Context, n *simNode, att *v1alpha1.NetworkAttachment) (*ovsenv.Netns, error) {
	g, err := ovsenv.NewNetns(ctx, netnsPrefix+att.Name)
	if err != nil {
		return nil, err
	}
	ifc := att.Status.IfcName
	fmt.Printf("    %s: %s %s (%s) from %s into namespace %s\n", att.Name, ifc, att.Status.IPv4, att.Status.MACAddress, n.name, g.Name)
	if _, err := n.ns.Run(ctx, "ip", "link", "set", ifc, "netns", g.Name); err != nil {
		return nil, err
	}
	for _, cmd := range [][]string{
		{"ip", "addr", "add", att.Status.IPv4 + "/24", "dev", ifc},
		// The agent gave the interface room for VXLAN's header already.
		{"ip", "link", "set", ifc, "up"},
		{"ip", "link", "set", "lo", "up"},
	} {
		if _, err := g.Run(ctx, cmd[0], cmd[1:]...); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// downSDN stops what runSDN started outside the environment's processes:
// the Open vSwitch instances and every namespace the demo made. The
// environment's processes (kos-apiserver, its etcd, the controller manager
// and the agents) stop with `localenv down`.
func downSDN(envDir string) error {
	var errs []error
	dirs, _ := filepath.Glob(filepath.Join(envDir, "ovs-*"))
	for _, dir := range dirs {
		inst, err := ovsenv.Attach(dir)
		if err != nil {
			// Already stopped: nothing recorded there runs.
			continue
		}
		if err := inst.Stop(); err != nil {
			errs = append(errs, err)
			continue
		}
		// Its folder is the demo's record that it runs.
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
		fmt.Printf("stopped Open vSwitch in %s\n", dir)
	}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), netnsPrefix) {
			continue
		}
		if err := (&ovsenv.Netns{Name: e.Name()}).Delete(); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Printf("deleted network namespace %s\n", e.Name())
	}
	return errors.Join(errs...)
}
