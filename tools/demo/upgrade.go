package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/components/nodeovs"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/kosimages/catalog"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/ovsenv"
)

// The live upgrade of the cluster demo: guests on different nodes ping each
// other while channels upgrades KOS from oldRelease to newRelease.
const (
	// pingInterval is how often each pair of guests pings.
	pingInterval = 100 * time.Millisecond
	// quietTime is how long the pings run before and after the upgrade,
	// to compare with.
	quietTime = 5 * time.Second
	// underlayBridge holds each node's underlay address in the node's own
	// Open vSwitch, as the userspace datapath needs to tunnel from it.
	underlayBridge = "br-ul"
)

// nodeUnderlays moves each node's address onto bridge underlayBridge of its
// own Open vSwitch, as an operator of userspace-datapath nodes did for
// 0.1.0, whose agent runs no Open vSwitch.
func (d *demo) nodeUnderlays(ctx context.Context, env *cluster.Cluster) error {
	// nodeovs logs each move with klog; the demo says it in its own words.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	say("These nodes' Open vSwitch has no kernel module and so forwards in userspace, where VXLAN tunnels start from an address that an Open vSwitch bridge holds: move each node's address onto a bridge %s, as an operator of KOS %s on such nodes did:", underlayBridge, oldRelease)
	for _, n := range env.Nodes {
		// The record of what moved lives in the node's folder, which goes
		// with the node.
		records := filepath.Join(n.Dir, "underlay")
		if err := os.MkdirAll(records, 0o755); err != nil {
			return err
		}
		u := nodeovs.NewUnderlay(nodeovs.UnderlayConfig{Address: n.IP, Bridge: underlayBridge, DatapathType: "netdev"}, n.OVSRunDir, records)
		if err := (&ovsenv.Netns{Name: n.Netns}).Do(func() error { return u.Ensure(ctx) }); err != nil {
			return fmt.Errorf("moving node %s's address onto %s: %w", n.Name, underlayBridge, err)
		}
		fmt.Printf("    %s: %s on %s\n", n.Name, n.IP, underlayBridge)
	}
	return nil
}

// pushReleasedImages pushes the images of the released version to the
// registry at repo, as the commit that made the release built them with its
// own tooling (catalog.BuildReleased, which keeps them in the repository's
// .cache/released). Where two releases' images have the same tag (etcd,
// when both name one version), the later push replaces the earlier.
func pushReleasedImages(ctx context.Context, root, repo, version string) error {
	say("KOS %[1]s's images are what the commit that made release %[1]s built, with its own tools: build them there (minutes the first time, while Go compiles that commit's libraries; kept in .cache/released after) and push them:", version)
	archive, err := catalog.BuildReleased(ctx, catalog.ReleasedOptions{Root: root, Version: version, Progress: os.Stdout})
	if err != nil {
		return err
	}
	pushed, err := catalog.PushArchive(ctx, archive, repo, false, append(slices.Clone(catalog.Components), catalog.Etcd)...)
	if err != nil {
		return fmt.Errorf("pushing the images of release %s to %s: %w", version, repo, err)
	}
	for _, tag := range slices.Sorted(maps.Keys(pushed)) {
		fmt.Printf("pushed %s\n", pushed[tag])
	}
	return nil
}

// liveUpgrade upgrades KOS from the channel oldChannel to newChannel while
// each guest pings the next one (in node order, round), printing how the
// pings go every second, then says what was measured and checks that the
// users' objects and addresses were kept.
func (d *demo) liveUpgrade(ctx context.Context, env *cluster.Cluster, kube kubernetes.Interface, agg aggregator.Interface, guests []*kosinstall.Guest, oldChannel, newChannel string) error {
	client, err := kosclient.NewForConfig(env.RESTConfig)
	if err != nil {
		return fmt.Errorf("a client of the KOS API: %w", err)
	}
	before, err := snapshotObjects(ctx, client)
	if err != nil {
		return err
	}

	say("Now the upgrade to %[1]s. What channels would do (without --yes): update all four addons; the agent moves to namespace %[2]s, and once everything is ready the %[3]s agent's DaemonSet is pruned. (kube-apiserver warns that the %[3]s agent's pods break the PodSecurity level restricted that %[4]s gets: those are the pods that go.)", newRelease, kosinstall.AgentNamespace, oldRelease, kosinstall.Namespace)
	if err := d.channelsAt("apply", "channel", newChannel); err != nil {
		return err
	}

	say("Start pinging: each guest pings the next on another node, %d times a second, and keeps pinging through the upgrade. Every second a line says how it goes: per pair the replies of the pings sent so far (counted until 2 s ago, leaving each reply time to come), and in all the pings lost and the longest time any pair went without a reply.", time.Second/pingInterval)
	pairs, stop, err := startTraffic(guests, nil)
	if err != nil {
		return err
	}
	defer stop()
	sleep(ctx, quietTime)

	began := time.Now()
	say("Upgrade: apply the %s channel, the pings still going:", newRelease)
	if err := d.channelsAt("apply", "channel", newChannel, "--yes", demoTimeout); err != nil {
		return err
	}
	if err := d.waitKOS(ctx, kube, agg); err != nil {
		return err
	}
	if err := waitOldAgentGone(ctx, kube); err != nil {
		return err
	}
	took := time.Since(began)
	say("KOS %s is ready and the %s agent's pods are gone, %s after channels started. %s more of pings, then stop:", newRelease, oldRelease, took.Round(time.Second), quietTime)
	sleep(ctx, quietTime)
	stop()

	longest, lost, sent := pairTotals(pairs)
	say("The upgrade took %s, from channels apply to every %s pod Ready and the %s agent gone. The pings through it, from %s before to %s after:", took.Round(time.Second), newRelease, oldRelease, quietTime, quietTime)
	for _, p := range pairs {
		fmt.Printf("    %s (%s) -> %s (%s): %d of %d lost, longest gap %s\n", p.from.Attachment.Name, p.from.Attachment.Spec.Node, p.to.Attachment.Name, p.to.Attachment.Spec.Node, p.stats.Lost, p.stats.Sent, seconds(p.stats.LongestGap))
	}
	fmt.Printf("    In all: %d of %d pings lost; the longest time a pair went without a reply: %s.\n", lost, sent, seconds(longest))
	fmt.Printf("    Nothing in the datapath restarts: the %s agents adopt each node's Open vSwitch with its ports and flows (see below). What gap there is comes from around it: on a busy machine the userspace datapath's ovs-vswitchd waits for a CPU while pods start, and a %s agent, whose liveness probe asks the KOS API, may be restarted while kos-apiserver rolls (docs/benchmarks.md has the figures of many runs). A TCP connection rides out gaps of a few seconds by retransmitting.\n", newRelease, oldRelease)

	after, err := snapshotObjects(ctx, client)
	if err != nil {
		return err
	}
	changes := compareObjects(before, after)
	if len(changes) == 0 {
		say("Nothing the users made was lost or changed: %s, the same objects (UIDs) with the same addresses, MACs and interfaces:", before.summary())
	} else {
		say("The upgrade changed what users made:\n    %s", strings.Join(changes, "\n    "))
	}
	if err := d.kubectl("get", "subnets,networkattachments", "-n", clusterNamespace, "-o", "wide"); err != nil {
		return err
	}
	if err := d.showAdopted(ctx, env, before); err != nil {
		return err
	}
	say("The agent runs in namespace %s now, with the control components still in %s; channels records %s:", kosinstall.AgentNamespace, kosinstall.Namespace, newRelease)
	for _, ns := range kosinstall.Namespaces() {
		if err := d.kubectl("-n", ns, "get", "pods", "-o", "wide"); err != nil {
			return err
		}
	}
	if err := d.channelsAt("get", "addons"); err != nil {
		return err
	}
	say("Applying the %s channel again is refused, addon by addon (channels never downgrades):", oldRelease)
	if err := d.channelsAt("apply", "channel", oldChannel, "--yes", demoTimeout); err != nil {
		return err
	}
	if len(changes) > 0 {
		return fmt.Errorf("the upgrade changed %d of the users' objects", len(changes))
	}
	return nil
}

// waitOldAgentGone waits until the pods of the oldRelease agent, in
// kosinstall.Namespace, are gone: channels pruned their DaemonSet, and
// they stop on their own time.
func waitOldAgentGone(ctx context.Context, kube kubernetes.Interface) error {
	var left int
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := kube.CoreV1().Pods(kosinstall.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=kos-agent"})
		if err != nil {
			return false, nil
		}
		left = len(pods.Items)
		return left == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the %s agent's pods to be gone (%d left): %w", oldRelease, left, err)
	}
	return nil
}

// showAdopted shows that the newRelease agents program each node's own
// Open vSwitch: its bridge kos still holds the guests' ports.
func (d *demo) showAdopted(ctx context.Context, env *cluster.Cluster, objs objects) error {
	say("Each node's own Open vSwitch still holds the guests' ports on bridge kos, which the %s agent adopted (it started no Open vSwitch of its own):", newRelease)
	for _, n := range env.Nodes {
		cmd := exec.CommandContext(ctx, "ovs-vsctl", "--timeout=20", "list-ports", "kos")
		cmd.Env = append(os.Environ(), "OVS_RUNDIR="+n.OVSRunDir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("node %s: ovs-vsctl list-ports kos: %w: %s", n.Name, err, out)
		}
		ports := strings.Fields(string(out))
		var held []string
		for _, name := range slices.Sorted(maps.Keys(objs.attachments)) {
			a := objs.attachments[name]
			if a.node != n.Name {
				continue
			}
			if !slices.Contains(ports, a.ifcName) {
				return fmt.Errorf("node %s: bridge kos lacks %s's port %s: %v", n.Name, name, a.ifcName, ports)
			}
			held = append(held, name+"'s "+a.ifcName)
		}
		fmt.Printf("    %s: %d ports, among them %s\n", n.Name, len(ports), strings.Join(held, ", "))
	}
	return nil
}

// pingPair is one guest pinging another.
type pingPair struct {
	from, to *kosinstall.Guest
	watch    *kosinstall.PingWatch
	// stats is what the watch measured once stopped.
	stats kosinstall.PingStats
}

// progress prints a line every second on how the pings go, and what extra
// adds, until stop.
type progress struct {
	pairs   []*pingPair
	extra   func() string
	started time.Time
	quit    chan struct{}
	done    chan struct{}
}

func startProgress(pairs []*pingPair, extra func() string) *progress {
	p := &progress{pairs: pairs, extra: extra, started: time.Now(), quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		ticker := time.NewTicker(time.Second)
		defer ticker.Stop()
		for {
			select {
			case <-p.quit:
				return
			case now := <-ticker.C:
				// One write per line, so that the lines of channels,
				// which writes to the same terminal, stay whole.
				line := progressLine(now.Sub(p.started), p.stats())
				if p.extra != nil {
					line += p.extra()
				}
				fmt.Print(line + "\n")
			}
		}
	}()
	return p
}

func (p *progress) stats() []pairStats {
	var out []pairStats
	for _, pair := range p.pairs {
		out = append(out, pairStats{from: short(pair.from), to: short(pair.to), stats: pair.watch.Stats()})
	}
	return out
}

func (p *progress) stop() {
	close(p.quit)
	<-p.done
}

// pairStats is what one pair measured so far, for progressLine.
type pairStats struct {
	from, to string
	stats    kosinstall.PingStats
}

// progressLine is the line of how the pings go after elapsed, such as
//
//	ping 1:05  a>b 630/630  b>c 629/630  c>a 630/630  lost 1  longest gap 0.4s
func progressLine(elapsed time.Duration, pairs []pairStats) string {
	var b strings.Builder
	s := int(elapsed.Round(time.Second) / time.Second)
	fmt.Fprintf(&b, "    ping %d:%02d ", s/60, s%60)
	lost := 0
	var longest time.Duration
	for _, p := range pairs {
		fmt.Fprintf(&b, " %s>%s %d/%d", p.from, p.to, p.stats.Received, p.stats.Sent)
		lost += p.stats.Lost
		longest = max(longest, p.stats.LongestGap)
	}
	fmt.Fprintf(&b, "  lost %d  longest gap %s", lost, seconds(longest))
	return b.String()
}

// short is a guest's short name in progress lines: "a" for guest-a or
// app-a.
func short(g *kosinstall.Guest) string {
	name := g.Attachment.Name
	return name[strings.LastIndex(name, "-")+1:]
}

// seconds formats d in seconds with one decimal, "0.4s".
func seconds(d time.Duration) string {
	return fmt.Sprintf("%.1fs", d.Seconds())
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// objects is what users made in the demo's namespace, as the upgrade must
// keep it.
type objects struct {
	subnets     map[string]string // UID by name
	attachments map[string]attachmentState
}

// attachmentState is what must not change of an attachment.
type attachmentState struct {
	uid, node, ipv4, mac, ifcName, hostIP string
}

func (o objects) summary() string {
	return fmt.Sprintf("%d Subnet%s and %d NetworkAttachments", len(o.subnets), plural(len(o.subnets)), len(o.attachments))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// snapshotObjects reads the demo namespace's subnets and attachments,
// trying again while the KOS API does not answer.
func snapshotObjects(ctx context.Context, client kosclient.Interface) (objects, error) {
	var o objects
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		subnets, err := client.NetworkV1alpha1().Subnets(clusterNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			last = err
			return false, nil
		}
		atts, err := client.NetworkV1alpha1().NetworkAttachments(clusterNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			last = err
			return false, nil
		}
		o = objects{subnets: map[string]string{}, attachments: map[string]attachmentState{}}
		for _, s := range subnets.Items {
			o.subnets[s.Name] = string(s.UID)
		}
		for _, a := range atts.Items {
			o.attachments[a.Name] = attachmentState{uid: string(a.UID), node: a.Spec.Node, ipv4: a.Status.IPv4, mac: a.Status.MACAddress, ifcName: a.Status.IfcName, hostIP: a.Status.HostIP}
		}
		return true, nil
	})
	if err != nil {
		return o, fmt.Errorf("listing the demo's subnets and attachments: %w (%v)", err, last)
	}
	return o, nil
}

// compareObjects returns, one line each, what after lost or changed of
// before.
func compareObjects(before, after objects) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(before.subnets)) {
		switch uid, ok := after.subnets[name]; {
		case !ok:
			out = append(out, "subnet "+name+" lost")
		case uid != before.subnets[name]:
			out = append(out, "subnet "+name+" replaced by another object (UID "+uid+", was "+before.subnets[name]+")")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(before.attachments)) {
		b := before.attachments[name]
		switch a, ok := after.attachments[name]; {
		case !ok:
			out = append(out, "attachment "+name+" lost")
		case a != b:
			out = append(out, fmt.Sprintf("attachment %s changed: %+v, was %+v", name, a, b))
		}
	}
	return out
}
