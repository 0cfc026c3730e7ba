package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/e2e/podnet/report"
	"github.com/kos-sdn/kos/tools/kosinstall"
)

// The workloads of KOS 0.2.0 in the cluster demo. Release 0.2.0 has no CNI
// plugin: a pod got its interface on a KOS network as a plain
// NetworkAttachment on its node, whose interface was moved into the pod by
// hand. The demo makes such pods on every node, and they ping each other
// and hold TCP connections while channels upgrades KOS to podsRelease.
const (
	// appsNamespace holds the pods of 0.2.0's kind; their attachments are
	// in clusterNamespace, on the guests' subnet.
	appsNamespace = "kos-apps-demo"
	// echoPort is where podnet serve echoes (its sink's port plus one).
	echoPort = 7778
	// chatConns is how many TCP connections each pod holds to the next.
	chatConns = 2
)

// appPods names the pods of 0.2.0's kind, one per node in node order; each
// one's attachment has the same name.
var appPods = []string{"app-a", "app-b", "app-c"}

// startApps starts a pod on each node (up to three) on the cluster's
// primary network only, gives each a plain attachment's interface on the
// guests' subnet, as an operator of KOS 0.2.0 did, and returns them as
// guests in node order, each pinging the next.
func (d *demo) startApps(ctx context.Context, env *cluster.Cluster, kube kubernetes.Interface, client kosclient.Interface, image string) ([]*kosinstall.Guest, error) {
	names := appPods[:min(len(appPods), len(env.Nodes))]
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", appsNamespace)
	for i, name := range names {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
  namespace: %[2]s
spec:
  nodeName: %[3]s
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  containers:
  - name: podnet
    image: %[4]s
---
apiVersion: network.example.com/v1alpha1
kind: NetworkAttachment
metadata:
  name: %[1]s
  namespace: %[5]s
spec:
  node: %[3]s
  subnet: blue
`, name, appsNamespace, env.Nodes[i].Name, image, clusterNamespace)
	}
	file := filepath.Join(d.envDir, "kos-apps-demo.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		return nil, fmt.Errorf("writing the apps' manifest: %w", err)
	}
	say("Before the upgrade, workloads as KOS %[1]s had them: %[1]s has no CNI plugin, so a pod on a KOS network was a pod on the cluster's network, given the interface of a plain NetworkAttachment on its node by hand. A pod and an attachment on each node:", newRelease)
	fmt.Print(b.String())
	if err := d.kubectl("apply", "-f", file); err != nil {
		return nil, err
	}
	if err := waitPodsReady(ctx, kube, appsNamespace, names...); err != nil {
		return nil, err
	}
	atts, err := waitAttachments(ctx, client, clusterNamespace, names...)
	if err != nil {
		return nil, err
	}
	say("Move each attachment's interface from its node's network namespace into its pod's (found from the host through a process of the pod):")
	var apps []*kosinstall.Guest
	for i, att := range atts {
		pod, err := kube.CoreV1().Pods(appsNamespace).Get(ctx, names[i], metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading pod %s: %w", names[i], err)
		}
		g, err := kosinstall.PlumbPod(ctx, env.Nodes[i].Netns, pod, att, netip.MustParsePrefix(clusterSubnet))
		if err != nil {
			return apps, err
		}
		apps = append(apps, g)
		fmt.Printf("    %s: %s %s (%s) on %s into pod %s\n", att.Name, att.Status.IfcName, att.Status.IPv4, att.Status.MACAddress, att.Spec.Node, pod.Name)
	}
	return apps, awaitRing(ctx, apps)
}

// awaitRing waits until each guest has a reply from the next (in order,
// round): the first packets of a new tunnel may be lost while the userspace
// datapath learns its neighbour.
func awaitRing(ctx context.Context, guests []*kosinstall.Guest) error {
	for i, from := range guests {
		to := guests[(i+1)%len(guests)]
		if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := from.Ping(ctx, to.IP, 1, time.Second)
			return got == 1, err
		}); err != nil {
			return fmt.Errorf("no reply from %s to %s across the nodes: %w", to.IP, from.Attachment.Name, err)
		}
	}
	return nil
}

// forgetApps removes the names startApps gave the pods' network namespaces
// on the host; the pods and their namespaces stay.
func forgetApps(apps []*kosinstall.Guest) {
	for _, g := range apps {
		if err := g.Delete(); err != nil {
			fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		}
	}
}

// upgradeUnderApps applies channel, of release, while the apps ping each other and hold
// TCP connections, printing how they go every second, and says what was
// measured: the longest gap, the pings lost and the TCP connections that
// survived.
func (d *demo) upgradeUnderApps(ctx context.Context, kube kubernetes.Interface, agg aggregator.Interface, apps []*kosinstall.Guest, release, channel string) error {
	chats, err := d.startChats(ctx, apps)
	if err != nil {
		return err
	}
	defer chats.stop()
	say("Start the traffic: each pod pings the next on another node %d times a second, and holds %d TCP connections to the next one's echo (podnet chat, a line each way every 100 ms, each checked). Every second a line says how it goes; tcp is the connections alive of those opened, and the longest a connection waited for an echo.", time.Second/pingInterval, chatConns)
	pairs, stop, err := startTraffic(apps, chats.summary)
	if err != nil {
		return err
	}
	defer stop()
	sleep(ctx, quietTime)

	began := time.Now()
	say("Upgrade to %s, the traffic still going:", release)
	if err := d.channelsAt("apply", "channel", channel, "--yes", demoTimeout); err != nil {
		return err
	}
	if err := d.waitKOS(ctx, kube, agg); err != nil {
		return err
	}
	took := time.Since(began)
	say("KOS %s is ready, %s after channels started. %s more of traffic, then stop:", release, took.Round(time.Second), quietTime)
	sleep(ctx, quietTime)
	stop()
	tcp := chats.stop()

	say("The pods' traffic through the upgrade, from %s before to %s after:", quietTime, quietTime)
	longest, lost, sent := pairTotals(pairs)
	for _, p := range pairs {
		fmt.Printf("    ping %s (%s) -> %s (%s): %d of %d lost, longest gap %s\n", p.from.Attachment.Name, p.from.Attachment.Spec.Node, p.to.Attachment.Name, p.to.Attachment.Spec.Node, p.stats.Lost, p.stats.Sent, seconds(p.stats.LongestGap))
	}
	fmt.Printf("    In all: %d of %d pings lost; the longest time a pair went without a reply: %s.\n", lost, sent, seconds(longest))
	fmt.Printf("    TCP: %d of %d connections survived; %d lines sent, %d echoed; the longest a connection waited for an echo: %s.\n",
		tcp.Alive, tcp.Opened, tcp.Sent, tcp.Echoed, seconds(tcp.LongestStall()))
	for _, e := range tcp.Errors {
		fmt.Printf("    ended: %s\n", e)
	}
	fmt.Printf("    The %s agents adopt each node's Open vSwitch, with the pods' ports and flows: nothing on the path restarts.\n", release)
	if tcp.Alive < tcp.Opened {
		return fmt.Errorf("%d of %d TCP connections between the pods ended during the upgrade", tcp.Opened-tcp.Alive, tcp.Opened)
	}
	return nil
}

// startTraffic starts each guest pinging the next (in order, round), and a
// progress line every second with what extra adds (if not nil). It returns
// the pairs and a function that stops it all, after which each pair's stats
// hold what it measured.
func startTraffic(guests []*kosinstall.Guest, extra func() string) ([]*pingPair, func(), error) {
	var pairs []*pingPair
	stopPings := func() {
		for _, p := range pairs {
			p.stats = p.watch.Stop()
		}
	}
	for i, from := range guests {
		to := guests[(i+1)%len(guests)]
		w, err := kosinstall.WatchPing(from, to.IP, pingInterval)
		if err != nil {
			stopPings()
			return nil, nil, err
		}
		pairs = append(pairs, &pingPair{from: from, to: to, watch: w})
	}
	progress := startProgress(pairs, extra)
	return pairs, sync.OnceFunc(func() {
		progress.stop()
		stopPings()
	}), nil
}

// pairTotals returns the longest gap and the pings lost and sent of the
// stopped pairs.
func pairTotals(pairs []*pingPair) (longest time.Duration, lost, sent int) {
	for _, p := range pairs {
		longest = max(longest, p.stats.LongestGap)
		sent += p.stats.Sent
		lost += p.stats.Lost
	}
	return longest, lost, sent
}

// chats are podnet chat processes, one per pod, run with kubectl exec.
type chats []*report.ChatWatch

// startChats runs podnet chat in each app's pod to the next app's echo, and
// waits until every connection has had an echo.
func (d *demo) startChats(ctx context.Context, apps []*kosinstall.Guest) (chats, error) {
	var c chats
	for i, from := range apps {
		to := apps[(i+1)%len(apps)]
		w, err := report.StartChat(report.ChatOptions{
			Kubeconfig: d.kubeconfig, Namespace: appsNamespace, Pod: from.Attachment.Name, Binary: podnetBin,
			Conns: chatConns, Every: pingInterval, For: 30 * time.Minute,
			To: []netip.AddrPort{netip.AddrPortFrom(to.IP, echoPort)},
		})
		if err != nil {
			c.stop()
			return nil, err
		}
		c = append(c, w)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, w := range c {
			if err := w.EndedEarly(); err != nil {
				return false, err
			}
		}
		return c.total().Settled() == nil, nil
	})
	if err != nil {
		c.stop()
		return nil, fmt.Errorf("the pods' TCP connections did not all answer within a minute (%s): %w", c.total(), err)
	}
	return c, nil
}

// total sums the newest reports of every chat.
func (c chats) total() report.Chat {
	var all []report.Chat
	for _, w := range c {
		all = append(all, w.Report())
	}
	return report.Sum(all...)
}

// summary is the chats' part of a progress line.
func (c chats) summary() string {
	r := c.total()
	return fmt.Sprintf("  tcp %d/%d longest wait %s", r.Alive, r.Opened, seconds(r.LongestStall()))
}

// stop ends the chats and returns their last reports, summed.
func (c chats) stop() report.Chat {
	var all []report.Chat
	for _, w := range c {
		all = append(all, w.Stop())
	}
	return report.Sum(all...)
}
