package testenv

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kos-sdn/kos/tools/poll"
)

// wantKubernetesVersion reads the version tools/kube/build.sh builds: the
// k8s.io/kubernetes requirement of tools/kube/go.mod.
func wantKubernetesVersion(t *testing.T) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "tools", "kube", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		// In a require block, or a single "require k8s.io/kubernetes v..." line.
		if f := strings.Fields(strings.TrimPrefix(line, "require ")); len(f) >= 2 && f[0] == "k8s.io/kubernetes" {
			return f[1]
		}
	}
	t.Fatal("tools/kube/go.mod requires no k8s.io/kubernetes")
	return ""
}

func TestIntegrationStart(t *testing.T) {
	ctx := t.Context()
	began := time.Now()
	env, err := Start(ctx, Options{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("control plane ready in %s", time.Since(began).Round(time.Millisecond))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = env.Stop()
		}
	})

	t.Run("version", func(t *testing.T) {
		client := kubernetes.NewForConfigOrDie(env.RESTConfig)
		info, err := client.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		want := wantKubernetesVersion(t)
		if want != "v1.37.2" {
			t.Logf("tools/kube/go.mod now builds %s", want)
		}
		if got := info.GitVersion; got != want || got == "v0.0.0" {
			t.Errorf("discovery gitVersion = %q, want %q", got, want)
		}
		if got := env.Version; got != want {
			t.Errorf("Env.Version = %q, want %q", got, want)
		}
	})

	t.Run("files", func(t *testing.T) {
		for _, f := range []string{env.Kubeconfig, env.CACertFile, env.ClientCACertFile, env.RequestHeaderCACertFile,
			env.ProxyClientCertFile, env.ProxyClientKeyFile, filepath.Join(env.Dir, "etcd.log"), filepath.Join(env.Dir, "kube-apiserver.log"),
			filepath.Join(env.BinDir, "etcd"), filepath.Join(env.BinDir, "kube-apiserver")} {
			if _, err := os.Stat(f); err != nil {
				t.Error(err)
			}
		}
		for _, u := range []string{env.APIServerURL, env.EtcdURL} {
			if port := urlPort(u); port <= 0 || port >= 32768 {
				t.Errorf("port of %s = %d, want one in (0, 32768)", u, port)
			}
		}
	})

	t.Run("admin kubeconfig", func(t *testing.T) {
		cfg, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		client := kubernetes.NewForConfigOrDie(cfg)
		want := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: metav1.NamespaceDefault},
			Data:       map[string]string{"greeting": "hi"},
		}
		if _, err := client.CoreV1().ConfigMaps(want.Namespace).Create(ctx, want, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := client.CoreV1().ConfigMaps(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(got.Data, want.Data); diff != "" {
			t.Errorf("ConfigMap data (-got +want):\n%s", diff)
		}
	})

	t.Run("user kubeconfig", func(t *testing.T) {
		path, cfg, err := env.NewUserKubeconfig("alice", "testers")
		if err != nil {
			t.Fatal(err)
		}
		fromFile, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatal(err)
		}
		for name, c := range map[string]*kubernetes.Clientset{
			"file":   kubernetes.NewForConfigOrDie(fromFile),
			"config": kubernetes.NewForConfigOrDie(cfg),
		} {
			_, err := c.CoreV1().ConfigMaps(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
			if !apierrors.IsForbidden(err) {
				t.Errorf("%s: listing ConfigMaps without RBAC rights: err = %v, want Forbidden", name, err)
			}
		}

		// Granting the group proves the certificate carries it.
		admin := kubernetes.NewForConfigOrDie(env.RESTConfig)
		role := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "configmap-reader", Namespace: metav1.NamespaceDefault},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list"}}},
		}
		if _, err := admin.RbacV1().Roles(role.Namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "testers-read-configmaps", Namespace: metav1.NamespaceDefault},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "testers"}},
		}
		if _, err := admin.RbacV1().RoleBindings(binding.Namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		user := kubernetes.NewForConfigOrDie(cfg)
		poll.Until(t, 10*time.Second, "a member of testers lists ConfigMaps after the binding", func(ctx context.Context) error {
			_, err := user.CoreV1().ConfigMaps(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
			return err
		})
	})

	t.Run("extra etcd", func(t *testing.T) {
		url, err := env.StartEtcd(ctx, "kos")
		if err != nil {
			t.Fatal(err)
		}
		if url == env.EtcdURL {
			t.Errorf("StartEtcd URL = %s, the main etcd's", url)
		}
		if err := etcdHealthy(ctx, http.DefaultClient, url); err != nil {
			t.Error(err)
		}
		if _, err := env.StartEtcd(ctx, "kos"); err == nil {
			t.Error("a second StartEtcd with the same name succeeded, want an error")
		}
		if _, err := env.StartEtcd(ctx, "Bad_Name"); err == nil {
			t.Error("StartEtcd(\"Bad_Name\") succeeded, want an error")
		}
	})

	procs := env.Processes()
	var names []string
	for _, p := range procs {
		names = append(names, p.Name)
		if !p.Running {
			t.Errorf("%s (pid %d) is not running before Stop", p.Name, p.PID)
		}
	}
	if diff := cmp.Diff(names, []string{"etcd", "kube-apiserver", "etcd-kos"}); diff != "" {
		t.Errorf("process names (-got +want):\n%s", diff)
	}

	began = time.Now()
	stopped = true
	if err := env.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("stopped in %s", time.Since(began).Round(time.Millisecond))
	for _, p := range procs {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(p.PID))); !os.IsNotExist(err) {
			t.Errorf("%s (pid %d) still exists after Stop", p.Name, p.PID)
		}
	}
	if _, err := os.Stat(env.Dir); !os.IsNotExist(err) {
		t.Errorf("working folder %s still exists after Stop (err = %v)", env.Dir, err)
	}
	if !portFree(urlPort(env.APIServerURL)) {
		t.Errorf("kube-apiserver's port %d is still taken after Stop", urlPort(env.APIServerURL))
	}
	if err := env.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestIntegrationStartFailure(t *testing.T) {
	tests := []struct {
		name     string
		opts     Options
		wantErrs []string
	}{
		{
			name:     "kube-apiserver refuses a flag",
			opts:     Options{APIServerFlags: []string{"--no-such-flag"}},
			wantErrs: []string{"kube-apiserver exited while starting", "kube-apiserver.log", "unknown flag: --no-such-flag"},
		},
		{
			name:     "no binaries",
			opts:     Options{BinDir: "/nonexistent-kos-bin"},
			wantErrs: []string{"/nonexistent-kos-bin/etcd", "/nonexistent-kos-bin/kube-apiserver"},
		},
		{
			name:     "unknown component",
			opts:     Options{Components: []string{KubeScheduler, "kube-dns"}},
			wantErrs: []string{`unknown component "kube-dns"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Dir = t.TempDir()
			env, err := Start(t.Context(), tt.opts)
			if err == nil {
				_ = env.Stop()
				t.Fatal("Start succeeded, want an error")
			}
			t.Logf("Start error: %v", err)
			for _, want := range tt.wantErrs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Start error does not mention %q:\n%v", want, err)
				}
			}
			if pids := processesUsing(t, tt.opts.Dir); len(pids) > 0 {
				t.Errorf("processes %v still use %s after a failed Start", pids, tt.opts.Dir)
			}
		})
	}
}

// processesUsing lists the processes whose command line mentions dir.
func processesUsing(t *testing.T, dir string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}
