package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// process is a channels process the test runs, with its output collected.
type process struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	added chan struct{}
	done  chan struct{}
}

func startProcess(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(testenv.Build(t, "cmd/channels"), args...), added: make(chan struct{}, 1), done: make(chan struct{})}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = p.cmd.Stdout
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go p.collect(out)
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("channels output:\n%s", strings.Join(p.output(), "\n"))
		}
	})
	return p
}

func (p *process) collect(r io.Reader) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		p.mu.Lock()
		p.lines = append(p.lines, s.Text())
		p.mu.Unlock()
		select {
		case p.added <- struct{}{}:
		default:
		}
	}
	_ = p.cmd.Wait()
	close(p.done)
}

func (p *process) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// waitLine waits for a line matching re and returns its submatches.
func (p *process) waitLine(t *testing.T, re *regexp.Regexp, timeout time.Duration) []string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		for _, l := range p.output() {
			if m := re.FindStringSubmatch(l); m != nil {
				return m
			}
		}
		select {
		case <-p.added:
		case <-p.done:
			t.Fatalf("channels exited (%v) before printing a line matching %s", p.cmd.ProcessState, re)
		case <-deadline:
			t.Fatalf("no line matching %s within %s", re, timeout)
		}
	}
}

// get fetches a URL and returns the status code and body.
func get(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// metric returns the value of one sample of the metrics text, or -1.
func metric(body, sample string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// sharedNamespace is declared by both addons of the daemon's channel, as
// KOS's control addons each declare the namespace they share.
const sharedNamespace = `apiVersion: v1
kind: Namespace
metadata:
  name: dmn-shared
  labels: {pod-security.kubernetes.io/enforce: restricted}
`

const daemonManifest = sharedNamespace + `---
apiVersion: v1
kind: ConfigMap
metadata: {name: dmn-config, namespace: default}
data: {mode: fast}
---
apiVersion: v1
kind: Secret
metadata: {name: dmn-secret, namespace: default}
stringData: {token: abc}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: dmn-server, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: dmn-server}}
  template:
    metadata: {labels: {app: dmn-server}}
    spec:
      containers: [{name: server, image: registry.k8s.io/pause:3.10}]
`

// excludeLabel is a label kOps's channels sets on control-plane nodes.
const excludeLabel = "node.kubernetes.io/exclude-from-external-load-balancers"

func TestIntegrationDaemon(t *testing.T) {
	// A control plane of its own, to restart.
	dir := t.TempDir()
	ctx := context.Background()
	env, err := testenv.Start(ctx, testenv.Options{Dir: dir})
	if err != nil {
		t.Fatalf("starting a control plane: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	k, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	// The node channels labels, as kOps's control-plane nodes.
	// One of the labels it is given as a bare key is there already, with a
	// value to keep.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cp-1", Labels: map[string]string{excludeLabel: "true"}}}
	if _, err := k.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	d := channelDir{t: t, dir: t.TempDir()}
	m, hash := d.manifest("dmn.yaml", daemonManifest)
	mb, hashB := d.manifest("dmn-b.yaml", sharedNamespace+`---
apiVersion: v1
kind: ConfigMap
metadata: {name: dmn-b-config, namespace: dmn-shared}
data: {mode: fast}
`)
	loc := d.channel("dmn-channel.yaml", fmt.Sprintf(`kind: Addons
metadata: {name: dmn}
spec:
  addons:
  - {name: dmn, version: 1.0.0, selector: {k8s-addon: dmn.addons.k8s.io}, manifest: %s, manifestHash: %s}
  - {name: dmn-b, version: 1.0.0, selector: {k8s-addon: dmn-b.addons.k8s.io}, manifest: %s, manifestHash: %s}
`, m, hash, mb, hashB))

	const interval = 2 * time.Second
	p := startProcess(t, "apply", "channel", loc, "--yes", "--wait=false", "--interval", interval.String(),
		"--full-check-every", "1000", "--drift=repair", "--metrics-bind-address", "127.0.0.1:0", "--health-bind-address=",
		// Bare keys, as kOps passes them.
		"--node-name", "cp-1", "--node-labels", "node-role.kubernetes.io/control-plane,"+excludeLabel+",kops.k8s.io/instancegroup=control-plane-1",
		"--kubeconfig", env.Kubeconfig)
	addr := p.waitLine(t, regexp.MustCompile(`serving /healthz, /readyz and /metrics on (\S+)`), 30*time.Second)[1]
	base := "http://" + addr
	metrics := func() string {
		_, body, err := get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		return body
	}

	t.Run("applies, labels the node and becomes ready", func(t *testing.T) {
		poll.Until(t, 60*time.Second, "the daemon is ready", func(context.Context) error {
			code, _, err := get(base + "/readyz")
			if code != http.StatusOK {
				return fmt.Errorf("/readyz: %d %v", code, err)
			}
			return nil
		})
		if code, _, err := get(base + "/healthz"); code != http.StatusOK {
			t.Errorf("/healthz: %d %v", code, err)
		}
		ns, err := k.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
		if err != nil || ns.Annotations["addons.k8s.io/dmn"] == "" {
			t.Errorf("no install record of dmn: %v", err)
		}
		node, err := k.CoreV1().Nodes().Get(ctx, "cp-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"node-role.kubernetes.io/control-plane": "", excludeLabel: "true", "kops.k8s.io/instancegroup": "control-plane-1"}
		if diff := cmp.Diff(node.Labels, want); diff != "" {
			t.Errorf("node labels (-got +want):\n%s", diff)
		}
		body := metrics()
		for sample, min := range map[string]float64{
			`channels_passes_total{result="success"}`:    1,
			`channels_addons_applied_total{addon="dmn"}`: 1,
			`channels_last_success_timestamp_seconds`:    float64(time.Now().Add(-time.Minute).Unix()),
			`channels_pass_duration_seconds_count`:       1,
			`process_resident_memory_bytes`:              1,
		} {
			if got := metric(body, sample); got < min {
				t.Errorf("%s = %v, want at least %v", sample, got, min)
			}
		}
	})

	// repairs edits the ConfigMap and the Deployment, deletes the Secret,
	// and waits for the daemon to put them back.
	repairs := func(t *testing.T) {
		t.Helper()
		before := metrics()
		began := time.Now()
		patch := []byte(`{"data":{"mode":"slow"}}`)
		if _, err := k.CoreV1().ConfigMaps("default").Patch(ctx, "dmn-config", types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
			t.Fatal(err)
		}
		if _, err := k.AppsV1().Deployments("default").Patch(ctx, "dmn-server", types.MergePatchType, []byte(`{"spec":{"replicas":5}}`), metav1.PatchOptions{FieldManager: "kubectl-edit"}); err != nil {
			t.Fatal(err)
		}
		if err := k.CoreV1().Secrets("default").Delete(ctx, "dmn-secret", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// Within one interval, and the pass it takes.
		poll.Until(t, interval+3*time.Second, "the daemon repaired the objects", func(context.Context) error {
			cm, err := k.CoreV1().ConfigMaps("default").Get(ctx, "dmn-config", metav1.GetOptions{})
			if err != nil || cm.Data["mode"] != "fast" {
				return fmt.Errorf("ConfigMap dmn-config: %v %v", cm.Data, err)
			}
			dep, err := k.AppsV1().Deployments("default").Get(ctx, "dmn-server", metav1.GetOptions{})
			if err != nil || *dep.Spec.Replicas != 2 {
				return fmt.Errorf("Deployment dmn-server: %v", err)
			}
			if _, err := k.CoreV1().Secrets("default").Get(ctx, "dmn-secret", metav1.GetOptions{}); err != nil {
				return fmt.Errorf("Secret dmn-secret: %v", err)
			}
			return nil
		})
		t.Logf("repaired in %s", time.Since(began).Round(time.Millisecond))
		poll.Until(t, 5*time.Second, "the repairs are counted", func(context.Context) error {
			after := metrics()
			for sample, want := range map[string]float64{
				`channels_drift_objects_repaired_total{drift="changed"}`: 2,
				`channels_drift_objects_repaired_total{drift="deleted"}`: 1,
			} {
				if got := metric(after, sample) - metric(before, sample); got != want {
					return fmt.Errorf("%s went up by %v, want %v", sample, got, want)
				}
			}
			return nil
		})
	}
	t.Run("checks the applied objects on the next pass", func(t *testing.T) {
		poll.Until(t, interval+3*time.Second, "the daemon checked the applied objects", func(context.Context) error {
			if got := metric(metrics(), "channels_drift_objects_checked_total"); got < 3 {
				return fmt.Errorf("channels_drift_objects_checked_total = %v, want at least 3", got)
			}
			return nil
		})
	})
	t.Run("repairs a hand-edited and a hand-deleted object", repairs)

	t.Run("leaves a namespace two addons declare as it is", func(t *testing.T) {
		// Each addon's apply stamps its own labels on the Namespace; were
		// that drift, each pass would take it back from the other.
		before, err := k.CoreV1().Namespaces().Get(ctx, "dmn-shared", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		repaired := metric(metrics(), `channels_drift_objects_repaired_total{drift="changed"}`) + metric(metrics(), `channels_drift_objects_repaired_total{drift="deleted"}`)
		checked := metric(metrics(), "channels_drift_objects_checked_total")
		// Two more passes at least.
		poll.Until(t, 4*interval+5*time.Second, "two more passes checked the objects", func(context.Context) error {
			if got := metric(metrics(), "channels_drift_objects_checked_total"); got < checked+2*6 {
				return fmt.Errorf("channels_drift_objects_checked_total = %v, want at least %v", got, checked+2*6)
			}
			return nil
		})
		after, err := k.CoreV1().Namespaces().Get(ctx, "dmn-shared", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after.ResourceVersion != before.ResourceVersion {
			t.Errorf("namespace dmn-shared was rewritten by passes with nothing to repair: labels %v, then %v", before.Labels, after.Labels)
		}
		if got := metric(metrics(), `channels_drift_objects_repaired_total{drift="changed"}`) + metric(metrics(), `channels_drift_objects_repaired_total{drift="deleted"}`); got != repaired {
			t.Errorf("objects repaired went from %v to %v with nothing changed", repaired, got)
		}
	})

	t.Run("survives the control plane restarting", func(t *testing.T) {
		failures := metric(metrics(), `channels_passes_total{result="failure"}`)
		if err := env.Stop(); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 30*time.Second, "a pass failed while the control plane was down", func(context.Context) error {
			if got := metric(metrics(), `channels_passes_total{result="failure"}`); got <= failures {
				return errors.New("no pass failed while the control plane was down")
			}
			return nil
		})
		if code, _, err := get(base + "/healthz"); code != http.StatusOK {
			t.Errorf("/healthz while the control plane is down: %d %v", code, err)
		}
		if code, body, err := get(base + "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "failed: ") {
			t.Errorf("/readyz after a failed pass: %d %q %v, want 503 with the pass's error", code, body, err)
		}
		env, err = testenv.Start(ctx, testenv.Options{Dir: dir})
		if err != nil {
			t.Fatalf("restarting the control plane: %v", err)
		}
		if k, err = kubernetes.NewForConfig(env.RESTConfig); err != nil {
			t.Fatal(err)
		}
		successes := metric(metrics(), `channels_passes_total{result="success"}`)
		poll.Until(t, 30*time.Second, "a pass succeeded since the control plane came back", func(context.Context) error {
			if got := metric(metrics(), `channels_passes_total{result="success"}`); got <= successes {
				return errors.New("no pass succeeded since the control plane came back")
			}
			return nil
		})
		if code, body, err := get(base + "/readyz"); code != http.StatusOK {
			t.Errorf("/readyz after a good pass: %d %q %v, want 200", code, body, err)
		}
		repairs(t)
	})

	t.Run("stops cleanly on SIGTERM", func(t *testing.T) {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			t.Fatal("channels did not stop within 15s of SIGTERM")
		}
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("exit %d after SIGTERM, want 0", code)
		}
		switch out := p.output(); {
		case len(out) == 0:
			t.Error("channels printed nothing, want its last line to say stopped")
		case !strings.HasSuffix(out[len(out)-1], " stopped"):
			t.Errorf("last line = %q, want it to say stopped", out[len(out)-1])
		}
		// The lease was released.
		if l, err := k.CoordinationV1().Leases("kube-system").Get(ctx, "channels", metav1.GetOptions{}); err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			t.Errorf("lease still held by %q", *l.Spec.HolderIdentity)
		} else if err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
}

// TestIntegrationDaemonKOpsPod runs the daemon as kOps's kops-channels
// static pod runs: with kOps's flags (bare label keys, no listener flags) and
// a kubeconfig whose credentials are rotated while it runs.
func TestIntegrationDaemonKOpsPod(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	k, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	// The default listener's port must be free for the test to mean
	// anything.
	if l, err := net.Listen("tcp", DefaultHealthBindAddress); err != nil {
		t.Fatalf("%s is taken, so the daemon's default listener cannot be tested: %v", DefaultHealthBindAddress, err)
	} else {
		_ = l.Close()
	}

	// Two users, each bound to cluster-admin by a binding the test deletes
	// to take its rights away. The daemon's kubeconfig holds the first;
	// the rotation writes the second's over it.
	users := map[string]string{}
	bind := func(t *testing.T, user string) {
		t.Helper()
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}
		if _, err := k.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	unbind := func(t *testing.T, user string) {
		t.Helper()
		if err := k.RbacV1().ClusterRoleBindings().Delete(ctx, user, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	for _, user := range []string{"kpod-first", "kpod-second"} {
		path, _, err := env.NewUserKubeconfig(user)
		if err != nil {
			t.Fatal(err)
		}
		users[user] = path
		bind(t, user)
		t.Cleanup(func() { unbind(t, user) })
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	// rotate replaces the daemon's kubeconfig with the user's, as a
	// provisioner renames a new file over the old.
	rotate := func(t *testing.T, user string) {
		t.Helper()
		b, err := os.ReadFile(users[user])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(kubeconfig+".new", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(kubeconfig+".new", kubeconfig); err != nil {
			t.Fatal(err)
		}
	}
	rotate(t, "kpod-first")

	const nodeName = "kpod-cp"
	if _, err := k.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.CoreV1().Nodes().Delete(ctx, nodeName, metav1.DeleteOptions{}) })

	d := channelDir{t: t, dir: t.TempDir()}
	m, hash := d.manifest("kpod.yaml", `apiVersion: v1
kind: ConfigMap
metadata: {name: kpod-config, namespace: default}
data: {mode: fast}
`)
	loc := d.channel("kpod-channel.yaml", fmt.Sprintf(`kind: Addons
metadata: {name: kpod}
spec:
  addons:
  - {name: kpod, version: 1.0.0, selector: {k8s-addon: kpod.addons.k8s.io}, manifest: %s, manifestHash: %s}
`, m, hash))

	// kOps's flags (pkg/model/components/channels in kOps 1.36), with a
	// shorter interval and --wait=false, as the cluster has no nodes to
	// run pods.
	p := startProcess(t, "apply", "channel", "--v=4", "--yes", "--interval=1s", "--wait=false",
		"--node-labels="+channels.ControlPlaneLabel, "--node-name="+nodeName,
		"--kubeconfig", kubeconfig, loc)
	p.waitLine(t, regexp.MustCompile(`serving /healthz and /readyz on `+regexp.QuoteMeta(DefaultHealthBindAddress)+`$`), 30*time.Second)
	base := "http://" + DefaultHealthBindAddress
	readyz := func(wantCode int, wantBody string) func(context.Context) error {
		return func(context.Context) error {
			code, body, err := get(base + "/readyz")
			if err != nil {
				return err
			}
			if code != wantCode || !strings.Contains(body, wantBody) {
				return fmt.Errorf("/readyz: %d %q, want %d with %q", code, body, wantCode, wantBody)
			}
			return nil
		}
	}
	hasLabel := func(context.Context) error {
		n, err := k.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if v, ok := n.Labels[channels.ControlPlaneLabel]; !ok || v != "" {
			return fmt.Errorf("node labels %v, want %s with an empty value", n.Labels, channels.ControlPlaneLabel)
		}
		return nil
	}

	t.Run("ready on the default listener, with the bare key labelled", func(t *testing.T) {
		poll.Until(t, 60*time.Second, "the daemon is ready", readyz(http.StatusOK, "ok"))
		if err := hasLabel(ctx); err != nil {
			t.Error(err)
		}
		if code, _, err := get(base + "/healthz"); code != http.StatusOK {
			t.Errorf("/healthz: %d %v", code, err)
		}
	})

	t.Run("a second daemon refuses to start beside it", func(t *testing.T) {
		// As ours would beside kOps's own pod, which holds the port too.
		cmd := exec.Command(testenv.Build(t, "cmd/channels"), "apply", "channel", "--yes", "--interval=1m", "--kubeconfig", kubeconfig, loc)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("second daemon: %v, want exit 1; output:\n%s", err, out)
		}
		if want := "is kOps's kops-channels pod still running on this node?"; !strings.Contains(string(out), want) {
			t.Errorf("second daemon's output:\n%s\nwant it to say %q", out, want)
		}
	})

	t.Run("uses credentials rotated in the kubeconfig", func(t *testing.T) {
		rotate(t, "kpod-second")
		unbind(t, "kpod-first")
		// Until the first user's rights are gone, a pass with its old
		// client would still succeed and prove nothing.
		_, first, err := env.NewUserKubeconfig("kpod-first")
		if err != nil {
			t.Fatal(err)
		}
		kFirst, err := kubernetes.NewForConfig(first)
		if err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 10*time.Second, "the first user lost its rights", func(context.Context) error {
			if _, err := kFirst.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
				return fmt.Errorf("the first user reads node %s: %v", nodeName, err)
			}
			return nil
		})
		// A label removed by hand only comes back by a pass whose clients
		// hold the second user's certificate.
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:null}}}`, channels.ControlPlaneLabel)
		if _, err := k.CoreV1().Nodes().Patch(ctx, nodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 10*time.Second, "the daemon labelled the node again", hasLabel)
		poll.Until(t, 5*time.Second, "the daemon is ready", readyz(http.StatusOK, "ok"))
	})

	t.Run("readiness follows the last pass", func(t *testing.T) {
		unbind(t, "kpod-second")
		poll.Until(t, 15*time.Second, "a failed pass turned /readyz red", readyz(http.StatusServiceUnavailable, "forbidden"))
		if code, _, err := get(base + "/healthz"); code != http.StatusOK {
			t.Errorf("/healthz after a failed pass: %d %v, want 200", code, err)
		}
		bind(t, "kpod-second")
		poll.Until(t, 15*time.Second, "a good pass turned /readyz green", readyz(http.StatusOK, "ok"))
	})
}
