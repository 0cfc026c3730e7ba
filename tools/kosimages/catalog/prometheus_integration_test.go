package catalog

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kos-sdn/kos/release"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/registry"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationPrometheusImage pushes the Prometheus image to a real
// registry, pulls it by the pinned reference PushPrometheus returned,
// unpacks it and runs its entrypoint there with chroot, with nothing but
// what the image holds (the program alone: it is static): it reports the
// version the image is tagged with, which is the one the newest
// kos-monitoring names upstream, and serves as kos-monitoring's manifest
// runs it (user 65534, its flags, its data folder), scraping itself and a
// pod it finds through Kubernetes service discovery in a real
// kube-apiserver. Debian's Prometheus, which the image once packed, has no
// Kubernetes service discovery, and the manifest's configuration crashed it
// on a cluster; this test fails on such a build.
func TestIntegrationPrometheusImage(t *testing.T) {
	ctx := t.Context()
	env := testenv.Shared(t)
	reg := registry.StartT(t, registry.Options{Address: "127.0.0.1"})
	repo := reg.Host() + "/kos-test"
	pinned, err := PushPrometheus(ctx, repo, false)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewDigest(pinned)
	if err != nil {
		t.Fatalf("PushPrometheus returned %q: %v", pinned, err)
	}
	tag, _, _ := strings.Cut(pinned, "@")
	version := strings.TrimPrefix(tag, repo+"/"+Prometheus+":")
	if version == tag || version == "" {
		t.Fatalf("PushPrometheus returned %q, want %s/%s:VERSION@sha256:...", pinned, repo, Prometheus)
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile(filepath.Join(root, "addons", "kos-monitoring", release.Version+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if upstream := "image: quay.io/prometheus/prometheus:v" + version + "\n"; !bytes.Contains(manifest, []byte(upstream)) {
		t.Errorf("kos-monitoring %s does not name %q: tools/prometheus/go.mod builds another version than the manifest runs", release.Version, strings.TrimSpace(upstream))
	}
	img, err := remote.Image(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("pulling %s: %v", ref, err)
	}
	if diff := cmp.Diff([]string{PrometheusProgram}, imageEntrypoint(t, img)); diff != "" {
		t.Errorf("entrypoint (-want +got):\n%s", diff)
	}

	rootfs := filepath.Join(t.TempDir(), "rootfs")
	unpack(t, img, rootfs)
	var got []string
	err = filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(rootfs, p)
		got = append(got, "/"+filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if diff := cmp.Diff([]string{PrometheusProgram}, got); diff != "" {
		t.Errorf("files of the image (-want +got):\n%s", diff)
	}

	out := chroot(t, rootfs, nil, nil, PrometheusProgram, "--version")
	if v, err := PrometheusVersion(out); err != nil || v != version {
		t.Errorf("prometheus --version in the image says %q (%v), want version %s", out, err, version)
	}
	serve(t, rootfs, env)
}

// serve runs the unpacked Prometheus as kos-monitoring's manifest does,
// as user 65534 with its data in /prometheus, scraping every second itself
// (job self) and every pod that Kubernetes service discovery finds in a
// namespace of env's kube-apiserver (job pods, role pod as in the
// manifest), until both targets are up. The namespace holds one pod, which
// the test makes Running at 127.0.0.1 with Prometheus's own port: no
// kubelet runs, so its status is written here.
func serve(t *testing.T, rootfs string, env *testenv.Env) {
	ctx := t.Context()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	portNumber, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}

	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	ns := "prometheus-image"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// No controller manager makes the namespace's default service account,
	// which admission wants before a pod.
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "scraped"},
		Spec: corev1.PodSpec{
			NodeName:                     "prometheus-image-node",
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name:  "metrics",
				Image: "metrics",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(portNumber)}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	pod.Status = corev1.PodStatus{
		Phase:   corev1.PodRunning,
		HostIP:  "127.0.0.1",
		HostIPs: []corev1.HostIP{{IP: "127.0.0.1"}},
		PodIP:   "127.0.0.1",
		PodIPs:  []corev1.PodIP{{IP: "127.0.0.1"}},
	}
	if _, err := kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	config := fmt.Sprintf(`global: {scrape_interval: 1s}
scrape_configs:
- job_name: self
  static_configs: [{targets: [%q]}]
- job_name: pods
  kubernetes_sd_configs:
  - role: pod
    kubeconfig_file: /etc/prometheus/kubeconfig
    namespaces: {names: [%q]}
`, addr, ns)
	kubeconfig, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(rootfs, "etc", "prometheus", "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "etc", "prometheus", "config", "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "etc", "prometheus", "kubeconfig"), kubeconfig, 0o644); err != nil {
		t.Fatal(err)
	}
	// The manifest's emptyDir, which fsGroup 65534 makes writable.
	data := filepath.Join(rootfs, "prometheus")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(data, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	cmd := chrootCommand(t, rootfs, nil, nil, "65534:65534", PrometheusProgram,
		"--config.file=/etc/prometheus/config/prometheus.yml", "--storage.tsdb.path=/prometheus",
		"--storage.tsdb.retention.time=2d", "--web.listen-address="+addr)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
		if t.Failed() {
			t.Logf("prometheus's log:\n%s", log.String())
		}
	}()
	poll.Until(t, time.Minute, "the image's Prometheus to scrape itself and the pod it discovers", func(ctx context.Context) error {
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("prometheus exited: %v", err)
		default:
		}
		u := "http://" + addr + "/api/v1/query?query=" + url.QueryEscape(`up == 1`)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", resp.Status, body)
		}
		for _, job := range []string{"self", "pods"} {
			if !strings.Contains(string(body), `"job":"`+job+`"`) {
				return fmt.Errorf("no target of job %s is up: %s", job, body)
			}
		}
		return nil
	})
}
