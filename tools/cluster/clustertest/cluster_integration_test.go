package clustertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// The images the tests run: the hello server, and echo, a host program
// packed with the shared libraries it needs.
const (
	helloTag = "kos.example.com/testenv/hello:1"
	echoTag  = "kos.example.com/testenv/echo:1"
)

// nodeLabels are the labels issue 6's addons select nodes by.
var nodeLabels = map[string]string{
	"role.kos.example.com/control":  "true",
	"role.kos.example.com/workload": "true",
}

func TestIntegrationCluster(t *testing.T) {
	before := snapshotHost(t)
	tarball := buildImages(t)

	// The first start of a program pays for building the pause image and
	// for everything cold; the second shows the steady cost. The second
	// runs detached, as tools/localenv does, and is stopped from its folder
	// alone.
	for i, name := range []string{"first start", "second start, detached"} {
		t.Run(name, func(t *testing.T) {
			// Not t.TempDir(): this subtest's name would make
			// containerd's socket paths too long for a Unix socket.
			dir := shortTempDir(t)
			detach := i == 1
			began := time.Now()
			env, err := cluster.Start(t.Context(), cluster.Options{
				ControlPlane: testenv.Options{
					Dir:        dir,
					Components: []string{testenv.KubeControllerManager, testenv.KubeScheduler},
					Progress:   testWriter{t},
					Detach:     detach,
				},
				Nodes:     []cluster.NodeOptions{{Labels: nodeLabels, OVS: !detach}},
				KubeProxy: true,
			})
			if err != nil {
				t.Fatalf("starting the cluster: %v", err)
			}
			t.Logf("cluster ready in %s (start %d)", time.Since(began).Round(10*time.Millisecond), i+1)
			stopped := false
			t.Cleanup(func() {
				if !stopped {
					_ = env.Stop()
				}
			})

			if i == 0 {
				testWorkloads(t, env, tarball)
				testOVS(t, env)
			} else {
				testNode(t, env)
			}
			t.Logf("memory: %s", memory(t, env))

			node := *env.Nodes[0]
			if detach {
				attached, err := cluster.Attach(dir)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(node, *attached.Nodes[0], cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
					cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
					t.Errorf("attached node (-started +attached):\n%s", diff)
				}
				env = attached
			}
			stopped = true
			began = time.Now()
			if err := env.Stop(); err != nil {
				t.Fatalf("stopping the cluster: %v", err)
			}
			t.Logf("stopped in %s", time.Since(began).Round(10*time.Millisecond))
			checkHostRestored(t, before, dir, node)
		})
	}

	t.Run("abandoned node", func(t *testing.T) {
		testAbandonedNode(t, before)
	})
}

// testAbandonedNode checks that a node whose owner died without stopping it
// (here a detached node's containerd, killed) is cleaned up by the next node
// that starts: its kubelet, shims, containers, mounts, cgroups and network
// namespace go.
func testAbandonedNode(t *testing.T, before hostState) {
	ctx := t.Context()
	dir := t.TempDir()
	abandoned, err := cluster.Start(ctx, cluster.Options{
		ControlPlane: testenv.Options{Dir: dir, Detach: true, Progress: testWriter{t}},
		Nodes:        []cluster.NodeOptions{{}},
	})
	if err != nil {
		t.Fatalf("starting the node to abandon: %v", err)
	}
	t.Cleanup(func() { _ = abandoned.Stop() })
	node := *abandoned.Nodes[0]

	// A running pod, so that there are a shim, containers and mounts to
	// clean up. No scheduler and no controller manager run: the pod names
	// its node, the test makes the ServiceAccount, and the pod mounts no
	// token (the controller manager publishes the CA that goes with it).
	client := kubernetes.NewForConfigOrDie(abandoned.RESTConfig)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pause"},
		Spec: corev1.PodSpec{
			NodeName:                     node.Name,
			AutomountServiceAccountToken: new(bool),
			Containers:                   []corev1.Container{{Name: "pause", Image: images.PauseTag, ImagePullPolicy: corev1.PullNever}},
		},
	}
	if _, err := client.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "the pod to run", func(context.Context) error { return podReady(ctx, client, metav1.NamespaceDefault, "pause") })
	if pids := processesNaming(t, filepath.Join(dir, "node")); len(pids) < 3 {
		t.Fatalf("want kubelet, containerd and a shim naming the node's folder, got %v", pids)
	}

	for _, p := range abandoned.Processes() {
		if p.Name == "containerd" {
			if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
	}
	poll.Until(t, 10*time.Second, "containerd to die", func(context.Context) error {
		for _, p := range abandoned.Processes() {
			if p.Name == "containerd" && p.Running {
				return errors.New("still running")
			}
		}
		return nil
	})

	next, err := cluster.Start(ctx, cluster.Options{ControlPlane: testenv.Options{Progress: testWriter{t}}, Nodes: []cluster.NodeOptions{{}}})
	if err != nil {
		t.Fatalf("starting the next node: %v", err)
	}
	if pids := processesNaming(t, filepath.Join(dir, "node")); len(pids) > 0 {
		t.Errorf("processes of the abandoned node run on: %v", pids)
	}
	if _, err := os.Stat(filepath.Join("/run/netns", node.Netns)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the abandoned node's network namespace %s is still there (%v)", node.Netns, err)
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", node.CgroupRoot)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the abandoned node's cgroup %s is still there (%v)", node.CgroupRoot, err)
	}
	nextDir, nextNode := next.Dir, *next.Nodes[0]
	if err := next.Stop(); err != nil {
		t.Fatalf("stopping the next node: %v", err)
	}
	// What is left of the abandoned environment is its control plane.
	if err := abandoned.Stop(); err != nil {
		t.Fatalf("stopping the rest of the abandoned environment: %v", err)
	}
	checkHostRestored(t, before, dir, node)
	checkHostRestored(t, before, nextDir, nextNode)
}

// testNode checks the node: Ready with the labels asked for, at the IP the
// environment says.
func testNode(t *testing.T, env *cluster.Cluster) {
	client := kubernetes.NewForConfigOrDie(env.RESTConfig)
	node, err := client.CoreV1().Nodes().Get(t.Context(), env.Nodes[0].Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range nodeLabels {
		if node.Labels[k] != v {
			t.Errorf("node label %s: got %q, want %q", k, node.Labels[k], v)
		}
	}
	var internal []string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			internal = append(internal, a.Address)
		}
	}
	if diff := cmp.Diff([]string{env.Nodes[0].IP.String()}, internal); diff != "" {
		t.Errorf("node InternalIP (-want +got):\n%s", diff)
	}
}

func testWorkloads(t *testing.T, env *cluster.Cluster, tarball string) {
	ctx := t.Context()
	testNode(t, env)
	began := time.Now()
	if err := env.ImportImages(ctx, tarball); err != nil {
		t.Fatal(err)
	}
	t.Logf("imported the images in %s", time.Since(began).Round(time.Millisecond))

	client := kubernetes.NewForConfigOrDie(env.RESTConfig)
	ns := "clustertest"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Pods are refused until the namespace has its default ServiceAccount.
	poll.Until(t, 30*time.Second, "the default ServiceAccount", func(context.Context) error {
		_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err
	})

	began = time.Now()
	replicas := int32(2)
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "hello"}},
			Template: helloPod("hello", 8080, false),
		},
	}
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "hello-ds"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "hello-ds"}},
			Template: helloPod("hello-ds", 8080, false),
		},
	}
	ds.Spec.Template.Spec.NodeSelector = map[string]string{"role.kos.example.com/workload": "true"}
	if _, err := client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	host := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hello-host"}, Spec: helloPod("hello-host", 18080, true).Spec}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, host, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	echo := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "echo", Image: echoTag, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/usr/bin/echo", "echo from a host binary"},
			}},
		},
	}
	if _, err := client.CoreV1().Pods(ns).Create(ctx, echo, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	poll.Until(t, 2*time.Minute, "the Deployment, DaemonSet and host-network pod to be ready", func(context.Context) error {
		d, err := client.AppsV1().Deployments(ns).Get(ctx, "hello", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas != replicas {
			return fmt.Errorf("deployment: %d of %d replicas ready", d.Status.ReadyReplicas, replicas)
		}
		ds, err := client.AppsV1().DaemonSets(ns).Get(ctx, "hello-ds", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ds.Status.NumberReady != 1 || ds.Status.DesiredNumberScheduled != 1 {
			return fmt.Errorf("daemonset: %d of %d ready", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled)
		}
		return podReady(ctx, client, ns, "hello-host")
	})
	t.Logf("Deployment, DaemonSet and host-network pod ready %s after creation", time.Since(began).Round(10*time.Millisecond))

	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=hello"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != int(replicas) {
		t.Fatalf("got %d hello pods, want %d", len(pods.Items), replicas)
	}
	first, second := pods.Items[0], pods.Items[1]
	for _, p := range pods.Items {
		if p.Spec.NodeName != env.Nodes[0].Name || !env.Nodes[0].PodCIDR.Contains(mustAddr(t, p.Status.PodIP)) {
			t.Errorf("pod %s: on node %q at %s, want on %s in %s", p.Name, p.Spec.NodeName, p.Status.PodIP, env.Nodes[0].Name, env.Nodes[0].PodCIDR)
		}
	}

	t.Run("logs", func(t *testing.T) {
		logs, err := client.CoreV1().Pods(ns).GetLogs(first.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := "hello: " + first.Name + " listening on :8080"; !strings.Contains(string(logs), want) {
			t.Errorf("logs of %s: got %q, want a line %q", first.Name, logs, want)
		}
	})

	t.Run("exec", func(t *testing.T) {
		// From one pod to another over the node's pod bridge.
		out := execIn(t, env, ns, first.Name, "hello", "get", "http://"+second.Status.PodIP+":8080/")
		if want := "hello from " + second.Name + "\n"; out != want {
			t.Errorf("exec in %s: got %q, want %q", first.Name, out, want)
		}
	})

	t.Run("pods reach kube-apiserver", func(t *testing.T) {
		// Through the kubernetes Service, which kube-proxy maps to
		// kube-apiserver on the host's end of the node link, trusting the
		// cluster's CA and with the pod's own token.
		out := execIn(t, env, ns, first.Name, "hello", "api", "/version")
		if !strings.Contains(out, `"gitVersion": "`+env.Version+`"`) {
			t.Errorf("GET /version from pod %s: got %q, want gitVersion %s", first.Name, out, env.Version)
		}
	})

	t.Run("pods resolve Services", func(t *testing.T) {
		// The node's DNS server answers for the Service's name, by its
		// full name and through the pods' search list, and kube-proxy maps
		// its ClusterIP to a hello pod; hostNetwork pods reach the
		// ClusterIP too, through the node's route for the Service range.
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "hello"},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": "hello"},
				Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}
		svc, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		from := map[string]bool{first.Name: true, second.Name: true}
		check := func(pod, url string) {
			t.Helper()
			var out string
			poll.Until(t, 30*time.Second, "a hello pod to answer at "+url+" from "+pod, func(context.Context) error {
				var err error
				out, err = execOut(ctx, env, ns, pod, "hello", "get", url)
				return err
			})
			if name, ok := strings.CutPrefix(strings.TrimSpace(out), "hello from "); !ok || !from[name] {
				t.Errorf("GET %s from %s: got %q, want hello from %s or %s", url, pod, out, first.Name, second.Name)
			}
		}
		check(first.Name, "http://hello."+ns+".svc.cluster.local/")
		check(first.Name, "http://hello/")
		check("hello-host", "http://"+svc.Spec.ClusterIP+"/")
	})

	t.Run("host network", func(t *testing.T) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, "hello-host", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.PodIP != env.Nodes[0].IP.String() {
			t.Errorf("host-network pod IP: got %s, want the node's %s", p.Status.PodIP, env.Nodes[0].IP)
		}
		// The pod shares the node's network namespace: the host reaches
		// it at the node's IP, as kube-apiserver reaches the kubelet. It
		// also shares the host's UTS namespace, so it has the host's name.
		hostname, err := os.Hostname()
		if err != nil {
			t.Fatal(err)
		}
		body := httpGet(t, "http://"+env.Nodes[0].IP.String()+":18080/")
		if want := "hello from " + hostname + "\n"; body != want {
			t.Errorf("GET from the host-network pod: got %q, want %q", body, want)
		}
	})

	t.Run("host reaches pods", func(t *testing.T) {
		// As kube-apiserver reaches aggregated API servers that run as
		// pods.
		body := httpGet(t, "http://"+first.Status.PodIP+":8080/")
		if want := "hello from " + first.Name + "\n"; body != want {
			t.Errorf("GET from pod %s: got %q, want %q", first.Name, body, want)
		}
	})

	t.Run("host binary image", func(t *testing.T) {
		poll.Until(t, time.Minute, "the echo pod to succeed", func(context.Context) error {
			p, err := client.CoreV1().Pods(ns).Get(ctx, "echo", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase == corev1.PodFailed {
				return fmt.Errorf("echo failed: %+v", p.Status.ContainerStatuses)
			}
			if p.Status.Phase != corev1.PodSucceeded {
				return fmt.Errorf("echo is %s", p.Status.Phase)
			}
			return nil
		})
		logs, err := client.CoreV1().Pods(ns).GetLogs("echo", &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(logs), "echo from a host binary\n"; got != want {
			t.Errorf("echo's logs: got %q, want %q", got, want)
		}
	})
}

// testOVS checks the node's Open vSwitch: tools on the host reach it through
// its run dir, and the interfaces of its bridges appear in the node's
// network namespace.
func testOVS(t *testing.T, env *cluster.Cluster) {
	if env.Nodes[0].OVSRunDir == "" {
		t.Fatal("the node has no Open vSwitch run dir")
	}
	ovs := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "ovs-vsctl", append([]string{"--timeout=20"}, args...)...)
		cmd.Env = append(os.Environ(), "OVS_RUNDIR="+env.Nodes[0].OVSRunDir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("ovs-vsctl %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	ovs("--may-exist", "add-br", "br-test", "--", "set", "bridge", "br-test", "datapath_type=netdev")
	if got := ovs("list-br"); got != "br-test" {
		t.Errorf("bridges: got %q, want br-test", got)
	}
	run(t, "ip", "netns", "exec", env.Nodes[0].Netns, "ip", "link", "show", "br-test")
}

// helloPod is a pod template of the hello server on port, ready when it
// answers /healthz.
func helloPod(app string, port int32, hostNetwork bool) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			HostNetwork:                   hostNetwork,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name:            "hello",
				Image:           helloTag,
				ImagePullPolicy: corev1.PullNever,
				Args:            []string{"-listen", ":" + strconv.Itoa(int(port))},
				Ports:           []corev1.ContainerPort{{ContainerPort: port}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
						Path: "/healthz", Port: intstr.FromInt32(port),
					}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

// buildImages builds the test images into one tarball.
func buildImages(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	dir := t.TempDir()
	began := time.Now()
	hello, err := images.GoImage(ctx, images.GoOptions{OutDir: filepath.Join(dir, "bin")}, images.Config{},
		"github.com/kos-sdn/kos/tools/cluster/clustertest/hello")
	if err != nil {
		t.Fatal(err)
	}
	files, err := images.HostBinaries(ctx, "/usr/bin/echo")
	if err != nil {
		t.Fatal(err)
	}
	layer, err := images.Layer(files)
	if err != nil {
		t.Fatal(err)
	}
	echo, err := images.New(images.Config{Entrypoint: []string{"/usr/bin/echo"}}, layer)
	if err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(dir, "images.tar")
	if err := images.Write(tarball, map[string]v1.Image{helloTag: hello, echoTag: echo}); err != nil {
		t.Fatal(err)
	}
	t.Logf("built the test images in %s", time.Since(began).Round(time.Millisecond))
	return tarball
}

// execIn runs a command in a pod's container through kube-apiserver and the
// kubelet, as kubectl exec does, and returns its standard output.
func execIn(t *testing.T, env *cluster.Cluster, ns, pod string, command ...string) string {
	t.Helper()
	out, err := execOut(t.Context(), env, ns, pod, command...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// execOut runs command in the pod's first container and returns its
// standard output.
func execOut(ctx context.Context, env *cluster.Cluster, ns, pod string, command ...string) (string, error) {
	client := kubernetes.NewForConfigOrDie(env.RESTConfig)
	req := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	exec, err := remotecommand.NewSPDYExecutor(env.RESTConfig, http.MethodPost, req.URL())
	if err != nil {
		return "", fmt.Errorf("exec %v in %s: %w", command, pod, err)
	}
	var stdout, stderr bytes.Buffer
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return "", fmt.Errorf("exec %v in %s (stderr: %s): %w", command, pod, bytes.TrimSpace(stderr.Bytes()), err)
	}
	return stdout.String(), nil
}

func podReady(ctx context.Context, client kubernetes.Interface, ns, name string) error {
	p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return nil
		}
	}
	return fmt.Errorf("pod %s is %s, not ready: %+v", name, p.Status.Phase, p.Status.ContainerStatuses)
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("pod IP %q: %v", s, err)
	}
	return a
}

// shortTempDir makes a folder with a short name in the temporary folder,
// removed when the test ends.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
	})
	return dir
}
