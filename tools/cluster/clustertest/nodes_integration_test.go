package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationThreeNodes checks a cluster of three nodes on one
// underlay: every node pulls the test's image from the cluster's registry,
// each node's private paths are its own, pods on different nodes and the
// host reach each other, a node stops entirely and comes back, and the host
// is left as it was found. No controller manager or scheduler runs: the
// pods name their nodes.
func TestIntegrationThreeNodes(t *testing.T) {
	ctx := t.Context()
	before := snapshotHost(t)
	hello, err := images.GoImage(ctx, images.GoOptions{OutDir: filepath.Join(t.TempDir(), "bin")}, images.Config{},
		"github.com/kos-sdn/kos/tools/cluster/clustertest/hello")
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	env, err := cluster.Start(ctx, cluster.Options{
		ControlPlane: testenv.Options{Progress: testWriter{t}},
		Nodes:        []cluster.NodeOptions{{}, {}, {OVS: true}},
		KubeProxy:    true,
		Registry:     true,
	})
	if err != nil {
		t.Fatalf("starting the cluster: %v", err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = env.Stop()
		}
	})
	t.Logf("three nodes ready in %s", time.Since(began).Round(10*time.Millisecond))
	nodes := make([]cluster.Node, len(env.Nodes))
	for i, n := range env.Nodes {
		nodes[i] = *n
	}
	if env.Registry == "" || !strings.HasPrefix(env.Registry, nodes[0].HostIP.String()+":") {
		t.Fatalf("registry at %q, want one on the host's underlay address %s", env.Registry, nodes[0].HostIP)
	}
	image := env.Registry + "/testenv/hello:1"
	ref, err := name.ParseReference(image, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, hello, remote.WithContext(ctx)); err != nil {
		t.Fatalf("pushing %s: %v", image, err)
	}

	client := kubernetes.NewForConfigOrDie(env.RESTConfig)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A pod on each node writes its name into /var/lib/kos, a hostPath.
	const dataDir = "/var/lib/kos/clustertest"
	for i, n := range nodes {
		name := fmt.Sprintf("hello-%d", i)
		spec := helloPod(name, 8080, false).Spec
		spec.NodeName = n.Name
		spec.AutomountServiceAccountToken = new(bool)
		spec.Containers[0].Image, spec.Containers[0].ImagePullPolicy = image, corev1.PullIfNotPresent
		spec.Containers[0].Args = append(spec.Containers[0].Args, "-write", "/data/"+name)
		spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		dirOrCreate := corev1.HostPathDirectoryOrCreate
		spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dataDir, Type: &dirOrCreate}}}}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "hello"}}, Spec: spec}
		if _, err := client.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ips := make([]string, len(nodes))
	for i := range nodes {
		name := fmt.Sprintf("hello-%d", i)
		poll.Until(t, 2*time.Minute, name+" to be ready", func(context.Context) error { return podReady(ctx, client, metav1.NamespaceDefault, name) })
		p, err := client.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !nodes[i].PodCIDR.Contains(mustAddr(t, p.Status.PodIP)) {
			t.Errorf("pod %s at %s, want in node %s's %s", name, p.Status.PodIP, nodes[i].Name, nodes[i].PodCIDR)
		}
		ips[i] = p.Status.PodIP
	}
	t.Logf("a pod on each node ready %s after the cluster", time.Since(began).Round(10*time.Millisecond))

	t.Run("private paths", func(t *testing.T) {
		for i, n := range nodes {
			for j := range nodes {
				file := n.HostPath(filepath.Join(dataDir, fmt.Sprintf("hello-%d", j)))
				data, err := os.ReadFile(file)
				switch {
				case i == j && err != nil:
					t.Errorf("node %s: %v", n.Name, err)
				case i == j && string(data) != fmt.Sprintf("hello-%d\n", j):
					t.Errorf("%s: got %q, want the pod's name", file, data)
				case i != j && !errors.Is(err, fs.ErrNotExist):
					t.Errorf("node %s has the file of a pod of node %s: %s (%v)", n.Name, nodes[j].Name, file, err)
				}
			}
		}
		if _, err := os.Stat(dataDir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the host has %s (%v): a node's hostPath volume landed on the host", dataDir, err)
		}
	})

	t.Run("pods reach pods on other nodes", func(t *testing.T) {
		for i := range nodes {
			j := (i + 1) % len(nodes)
			out := execIn(t, env, metav1.NamespaceDefault, fmt.Sprintf("hello-%d", i), "hello", "get", "http://"+ips[j]+":8080/")
			if want := fmt.Sprintf("hello from hello-%d\n", j); out != want {
				t.Errorf("from hello-%d to hello-%d: got %q, want %q", i, j, out, want)
			}
		}
	})

	t.Run("host reaches pods on every node", func(t *testing.T) {
		for i := range nodes {
			if got, want := httpGet(t, "http://"+ips[i]+":8080/"), fmt.Sprintf("hello from hello-%d\n", i); got != want {
				t.Errorf("GET hello-%d: got %q, want %q", i, got, want)
			}
		}
	})

	t.Run("stop and start a node", func(t *testing.T) {
		last := nodes[len(nodes)-1]
		name := fmt.Sprintf("hello-%d", len(nodes)-1)
		began := time.Now()
		if err := env.StopNode(ctx, last.Name); err != nil {
			t.Fatal(err)
		}
		t.Logf("stopped node %s in %s", last.Name, time.Since(began).Round(10*time.Millisecond))
		if pids := processesNaming(t, last.Dir); len(pids) > 0 {
			t.Errorf("processes of the stopped node run on: %v", pids)
		}
		if _, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + ips[len(ips)-1] + ":8080/"); err == nil {
			t.Errorf("%s still answers on the stopped node", name)
		}
		// The others run on.
		if got := execIn(t, env, metav1.NamespaceDefault, "hello-0", "hello", "get", "http://"+ips[1]+":8080/"); got != "hello from hello-1\n" {
			t.Errorf("hello-0 to hello-1 with node %s stopped: got %q", last.Name, got)
		}
		if err := os.Remove(last.HostPath(filepath.Join(dataDir, name))); err != nil {
			t.Fatal(err)
		}

		began = time.Now()
		if err := env.StartNode(ctx, last.Name); err != nil {
			t.Fatal(err)
		}
		t.Logf("node %s Ready again in %s", last.Name, time.Since(began).Round(10*time.Millisecond))
		poll.Until(t, 2*time.Minute, name+" to run again", func(context.Context) error {
			p, err := client.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + p.Status.PodIP + ":8080/")
			if err != nil {
				return err
			}
			resp.Body.Close()
			_, err = os.Stat(last.HostPath(filepath.Join(dataDir, name)))
			return err
		})
		t.Logf("%s answers again %s after the node started", name, time.Since(began).Round(10*time.Millisecond))

		// kubelet's root folder is one shared mount: the node's own,
		// which kubelet finds shared and leaves alone (a mount it stacked
		// as it started could fall between the lookups of its servers'
		// socket renames: EXDEV).
		checkKubeletRootMount(t, last)

		// The node's Open vSwitch came back too, and within the node it
		// is /var/run/openvswitch.
		run(t, "nsenter", "--mount="+last.MountNamespace, "--", "test", "-S", "/var/run/openvswitch/db.sock")
		cmd := exec.CommandContext(ctx, "ovs-vsctl", "--timeout=20", "show")
		cmd.Env = append(os.Environ(), "OVS_RUNDIR="+last.HostPath("/var/run/openvswitch"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("ovs-vsctl show on the restarted node: %v: %s", err, out)
		}
	})

	mountNS := mountNamespaces(t, nodes)
	stopped = true
	if err := env.Stop(); err != nil {
		t.Fatalf("stopping the cluster: %v", err)
	}
	for _, n := range nodes {
		checkHostRestored(t, before, env.Dir, n)
	}
	checkMountNamespacesGone(t, mountNS)
}

// mountNamespaces returns the mount namespaces of the nodes, as
// /proc/PID/ns/mnt links name them.
func mountNamespaces(t *testing.T, nodes []cluster.Node) []string {
	t.Helper()
	var out []string
	for _, n := range nodes {
		var st fs.FileInfo
		st, err := os.Stat(n.MountNamespace)
		if err != nil {
			t.Fatalf("node %s's mount namespace: %v", n.Name, err)
		}
		out = append(out, fmt.Sprintf("mnt:[%d]", inode(st)))
	}
	return out
}

// checkMountNamespacesGone fails when a process is still in one of the
// mount namespaces.
func checkMountNamespacesGone(t *testing.T, namespaces []string) {
	t.Helper()
	links, err := filepath.Glob("/proc/[0-9]*/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	for _, link := range links {
		ns, err := os.Readlink(link)
		if err != nil {
			continue
		}
		for _, gone := range namespaces {
			if ns == gone {
				cmdline, _ := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(link)), "cmdline"))
				t.Errorf("a process is still in a node's mount namespace %s: %s", ns, strings.ReplaceAll(string(cmdline), "\x00", " "))
			}
		}
	}
}

// checkKubeletRootMount checks that within node n's mount namespace exactly
// one mount is at kubelet's root folder, and that it is shared.
func checkKubeletRootMount(t *testing.T, n cluster.Node) {
	t.Helper()
	root, err := filepath.EvalSymlinks(filepath.Join(n.Dir, "kubelet"))
	if err != nil {
		t.Fatal(err)
	}
	info := run(t, "nsenter", "--mount="+n.MountNamespace, "--", "cat", "/proc/self/mountinfo")
	var at []string
	for line := range strings.SplitSeq(strings.TrimSpace(info), "\n") {
		// ID parent major:minor root mount-point options optional... - type source super
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == root {
			at = append(at, line)
		}
	}
	if len(at) != 1 || !strings.Contains(at[0], " shared:") {
		t.Errorf("the mounts at kubelet's root folder %s in node %s: %q; want one, shared", root, n.Name, at)
	}
}
