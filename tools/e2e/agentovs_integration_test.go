package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// agentOVSRunDir is the run dir of the Open vSwitch the agent's pod runs
// (kos-agent 0.2.0): a host path of the node (Node.HostPath finds it).
const agentOVSRunDir = "/var/run/kos/openvswitch"

// agentOVSDBDir holds that Open vSwitch's database (--db-dir), which
// outlives the pod.
const agentOVSDBDir = "/var/lib/kos/openvswitch"

// TestIntegrationAgentOVS installs KOS from the channels on a node that runs
// no Open vSwitch of its own: the agent's pod runs it (container ovs,
// kos-ovs), with the userspace datapath, the node's address moved onto
// br-ul, and no privileged container. Then ovs-vswitchd is killed: the ovs
// container is restarted, the address is back on br-ul and the agent
// installs its flows again.
func TestIntegrationAgentOVS(t *testing.T) {
	began := time.Now()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	built := make(chan builtImages, 1)
	dir := t.TempDir()
	go func() { built <- buildImages(t.Context(), root, dir) }()

	env, err := cluster.Start(t.Context(), cluster.Options{
		ControlPlane: testenv.Options{
			Components: []string{testenv.KubeControllerManager, testenv.KubeScheduler},
			Progress:   testWriter{t},
		},
		// No Open vSwitch on the node.
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
	node := env.Nodes[0]
	if node.OVSRunDir != "" {
		t.Fatalf("the node runs Open vSwitch (%s); the test wants one without", node.OVSRunDir)
	}
	images := <-built
	if images.err != nil {
		t.Fatalf("building the images: %v", images.err)
	}
	t.Logf("cluster up and images built after %s", since(began))
	// The single-node etcd's local volume is a folder of the control
	// node, which its operator makes.
	if err := os.MkdirAll(node.HostPath("/var/lib/kos/etcd"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := env.ImportImages(t.Context(), images.tarball); err != nil {
		t.Fatal(err)
	}

	k := newKOS(t, env, root)
	t.Cleanup(func() {
		if t.Failed() {
			k.dumpState()
		}
	})
	k.testInstall(t)
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("KOS ready after %s", since(began))

	pod := agentPod(t, k)
	checkLeastPrivilege(t, pod)
	ovs := func(t *testing.T, program string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), program, append([]string{"--timeout=20"}, args...)...)
		cmd.Env = append(os.Environ(), "OVS_RUNDIR="+node.HostPath(agentOVSRunDir))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %s: %v: %s", program, strings.Join(args, " "), err, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	underlay := func(t *testing.T) {
		t.Helper()
		ovs(t, "ovs-vsctl", "br-exists", "kos")
		if got := ovs(t, "ovs-vsctl", "get", "Bridge", "br-ul", "datapath_type"); got != "netdev" {
			t.Errorf("datapath_type of br-ul: %s, want netdev", got)
		}
		poll.Until(t, time.Minute, "the node's address on br-ul", func(ctx context.Context) error {
			out, err := exec.CommandContext(ctx, "ip", "-n", node.Netns, "-4", "-o", "addr", "show", "dev", "br-ul").Output()
			if err != nil {
				return err
			}
			if !strings.Contains(string(out), " "+node.IP.String()+"/") {
				return fmt.Errorf("br-ul holds %q", out)
			}
			return nil
		})
	}
	flows := func(t *testing.T) []string {
		t.Helper()
		out := ovs(t, "ovs-ofctl", "-O", "OpenFlow14", "dump-flows", "kos", "--no-stats")
		var lines []string
		for _, l := range strings.Split(out, "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.Contains(l, "reply") {
				lines = append(lines, l)
			}
		}
		slices.Sort(lines)
		return lines
	}
	underlay(t)
	before := flows(t)
	if len(before) == 0 {
		t.Fatal("bridge kos has no flows")
	}

	// Kill ovs-vswitchd: kos-ovs stops ovsdb-server and exits, kubelet
	// restarts the container, and the agent finds the flows gone.
	killed := time.Now()
	pid := vswitchdPID(t, node)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	restarts := func(p *corev1.Pod) int32 {
		for _, s := range p.Status.ContainerStatuses {
			if s.Name == "ovs" {
				return s.RestartCount
			}
		}
		return -1
	}
	was := restarts(pod)
	poll.Until(t, 3*time.Minute, "the ovs container restarted and the pod Ready", func(ctx context.Context) error {
		p, err := k.kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n := restarts(p); n <= was {
			return fmt.Errorf("ovs restarted %d times", n)
		}
		if !podReady(p) {
			return errors.New("pod not Ready")
		}
		return nil
	})
	underlay(t)
	poll.Until(t, time.Minute, "the agent's flows back on bridge kos", func(ctx context.Context) error {
		if got := flows(t); !slices.Equal(got, before) {
			return fmt.Errorf("flows %q, want %q", got, before)
		}
		return nil
	})
	t.Logf("recovered %s after ovs-vswitchd was killed", since(killed))
	k.waitKOSReady(t, time.Minute)
	t.Logf("the whole test took %s", since(began))
}

// agentPod returns the agent's pod, failing the test unless there is one.
func agentPod(t *testing.T, k *kos) *corev1.Pod {
	t.Helper()
	pods, err := k.kube.CoreV1().Pods(kosinstall.AgentNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=kos-agent"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Fatalf("%d agent pods in %s, want 1", len(pods.Items), kosinstall.AgentNamespace)
	}
	return &pods.Items[0]
}

// checkLeastPrivilege checks that no container of the agent's pod is
// privileged, that each drops every capability, and which it adds: the
// agent, from 0.3.0, those it needs to make pods' veth pairs and configure
// their ends inside the pods' network namespaces, and from 0.4.0 the raw
// sockets of kubectl kos check's probes.
func checkLeastPrivilege(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	want := map[string][]corev1.Capability{"ovs": {"NET_ADMIN", "NET_RAW"}, "kos-agent": {"NET_ADMIN", "NET_RAW", "SYS_ADMIN"}}
	for _, c := range pod.Spec.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.Capabilities == nil {
			t.Errorf("container %s: no capabilities set", c.Name)
			continue
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("container %s is privileged", c.Name)
		}
		if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("container %s drops %v, want ALL", c.Name, sc.Capabilities.Drop)
		}
		if got := sc.Capabilities.Add; !slices.Equal(got, want[c.Name]) {
			t.Errorf("container %s adds %v, want %v", c.Name, got, want[c.Name])
		}
	}
}

// vswitchdPID returns the host PID of the ovs-vswitchd of the agent's pod
// on node: the one in the node's network namespace connected to the
// database socket of the agent's run dir (the pid file holds its PID in the
// container's PID namespace).
func vswitchdPID(t *testing.T, node *cluster.Node) int {
	t.Helper()
	want := "unix:" + filepath.Join(agentOVSRunDir, "db.sock")
	var netns syscall.Stat_t
	if err := syscall.Stat(filepath.Join("/run/netns", node.Netns), &netns); err != nil {
		t.Fatal(err)
	}
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(data), "\x00")
		if filepath.Base(args[0]) != "ovs-vswitchd" || !slices.Contains(args, want) {
			continue
		}
		var ns syscall.Stat_t
		if err := syscall.Stat(filepath.Join(filepath.Dir(p), "ns", "net"), &ns); err != nil || ns.Ino != netns.Ino || ns.Dev != netns.Dev {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	t.Fatalf("no ovs-vswitchd runs with %s in network namespace %s", want, node.Netns)
	return 0
}
