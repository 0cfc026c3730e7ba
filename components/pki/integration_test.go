package pki_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/components/pki"
	"github.com/kos-sdn/kos/tools/testenv"
)

// allSecrets are the Secrets of pki.SetAll, in the order ensure prints them.
var allSecrets = []string{pki.CASecret, pki.EtcdServerSecret, pki.EtcdPeerSecret, pki.EtcdClientSecret, pki.APIServerServingSecret}

// TestIntegrationEnsure runs ensure for every Secret and an APIService
// twice: the first run creates them all and sets the CA bundle, the second
// changes nothing, and the CA bundle survives channels applying the
// APIService again without one.
func TestIntegrationEnsure(t *testing.T) {
	env := testenv.Shared(t)
	ns := newNamespace(t)
	apiService := applyAPIService(t, ns+".pki.example.com", "v1", ns, 443, 15)
	args := []string{"--kubeconfig", env.Kubeconfig, "--namespace", ns, "--secrets", "all", "--apiservice", apiService}

	began := time.Now()
	got := mustEnsure(t, args...)
	t.Logf("first run, creating 5 secrets: %s", time.Since(began).Round(time.Millisecond))
	want := append(secretLines(ns, "created", allSecrets...), "apiservice "+apiService+" patched")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("first run (-want +got):\n%s", diff)
	}
	ca := checkConsistent(t, ns, pki.SetAll)

	apiServices := aggregatorClient(t).ApiregistrationV1().APIServices()
	svc, err := apiServices.Get(context.Background(), apiService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(svc.Spec.CABundle, ca.CertPEM) {
		t.Errorf("caBundle of %s is not the CA: %q", apiService, svc.Spec.CABundle)
	}

	secretVersions := versions(t, ns)
	svcVersion := svc.ResourceVersion
	began = time.Now()
	got = mustEnsure(t, args...)
	t.Logf("second run, changing nothing: %s", time.Since(began).Round(time.Millisecond))
	want = append(secretLines(ns, "kept", allSecrets...), "apiservice "+apiService+" kept")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("second run (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(secretVersions, versions(t, ns)); diff != "" {
		t.Errorf("second run changed secrets (-before +after):\n%s", diff)
	}

	// An upgrade: channels applies a changed APIService, without caBundle.
	applyAPIService(t, ns+".pki.example.com", "v1", ns, 443, 20)
	svc, err = apiServices.Get(context.Background(), apiService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.VersionPriority != 20 {
		t.Errorf("channels' apply did not take: versionPriority %d", svc.Spec.VersionPriority)
	}
	if svc.ResourceVersion == svcVersion {
		t.Errorf("channels' apply changed nothing")
	}
	if !bytes.Equal(svc.Spec.CABundle, ca.CertPEM) {
		t.Errorf("channels' apply without caBundle reset it to %q", svc.Spec.CABundle)
	}
	got = mustEnsure(t, args...)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("run after channels' apply (-want +got):\n%s", diff)
	}
}

// TestIntegrationConcurrent runs ensure for overlapping sets at once, as the
// init containers of etcd members and kos-apiserver replicas do on a fresh
// install, several times over: each time every run succeeds, each Secret is
// created once, and all leaves are valid from the one CA that remains.
func TestIntegrationConcurrent(t *testing.T) {
	env := testenv.Shared(t)
	sets := []pki.Set{pki.SetEtcd, pki.SetEtcd, pki.SetEtcd, pki.SetAPIServer, pki.SetAPIServer, pki.SetAll}
	for round := range 3 {
		ns := newNamespace(t)
		var wg sync.WaitGroup
		results := make([][]pki.Result, len(sets))
		errs := make([]error, len(sets))
		start := make(chan struct{})
		for i, set := range sets {
			// Each run has a client of its own, as each pod does.
			e := &pki.Ensurer{Client: kubeClient(t, rest.CopyConfig(env.RESTConfig)), Namespace: ns}
			leaves, err := set.Leaves(ns)
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				<-start
				_, results[i], errs[i] = e.Ensure(context.Background(), leaves)
			})
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		created := map[string]int{}
		for _, rs := range results {
			for _, r := range rs {
				if r.Action == pki.Created {
					created[r.Object]++
				}
			}
		}
		want := map[string]int{}
		for _, name := range allSecrets {
			want["secret "+ns+"/"+name] = 1
		}
		if diff := cmp.Diff(want, created); diff != "" {
			t.Errorf("round %d: secrets created (-want +got):\n%s", round, diff)
		}
		checkConsistent(t, ns, pki.SetAll)
	}
}

// TestIntegrationRenew renews leaves that near their end or whose names
// changed, by the CA that exists.
func TestIntegrationRenew(t *testing.T) {
	env := testenv.Shared(t)
	ns := newNamespace(t)
	mustEnsure(t, "--kubeconfig", env.Kubeconfig, "--namespace", ns)
	before := versions(t, ns)

	later := time.Now().Add(pki.LeafValidity - pki.RenewBefore + time.Hour)
	e := &pki.Ensurer{Client: kubeClient(t, env.RESTConfig), Namespace: ns, Now: func() time.Time { return later }}
	leaves, _ := pki.SetAll.Leaves(ns)
	ca, results, err := e.Ensure(context.Background(), leaves)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range results {
		got = append(got, r.Object+" "+string(r.Action))
	}
	want := append(secretLines(ns, "kept", pki.CASecret), secretLines(ns, "renewed", allSecrets[1:]...)...)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("renewal (-want +got):\n%s", diff)
	}
	after := versions(t, ns)
	if before[pki.CASecret] != after[pki.CASecret] {
		t.Errorf("the CA Secret changed")
	}
	for _, l := range leaves {
		s := resultSecret(results, l.Secret)
		if reason := ca.Check(l, s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey], s.Data[pki.CACertKey], later); reason != "" {
			t.Errorf("renewed %s: %s", l.Secret, reason)
		}
	}

	serving := pki.APIServerServing(ns)
	serving.DNSNames = append(serving.DNSNames, "kos.example.org")
	r, err := (&pki.Ensurer{Client: kubeClient(t, env.RESTConfig), Namespace: ns, Now: func() time.Time { return later }}).EnsureLeaf(context.Background(), ca, serving)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.String(), "secret "+ns+"/kos-apiserver-serving renewed (names changed)"; got != want {
		t.Errorf("after a name change: %q, want %q", got, want)
	}
}

func resultSecret(results []pki.Result, name string) *corev1.Secret {
	for _, r := range results {
		if r.Secret != nil && r.Secret.Name == name {
			return r.Secret
		}
	}
	return nil
}

// TestIntegrationRBAC runs ensure as users with exactly the rules of
// pki.Rules: they succeed, create, keep and renew; users without them get
// a one-line error that says what to grant.
func TestIntegrationRBAC(t *testing.T) {
	env := testenv.Shared(t)
	ns := newNamespace(t)
	admin := kubeClient(t, env.RESTConfig)
	apiService := applyAPIService(t, ns+".pki.example.com", "v1", ns, 443, 15)
	grant := func(user string, set pki.Set, apiService string) {
		t.Helper()
		namespaced, cluster, err := pki.Rules(set, apiService)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		name := "kos-pki-" + user
		subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
		if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: namespaced}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   subjects,
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if cluster == nil {
			return
		}
		name += "-" + ns
		if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: cluster}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   subjects,
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	user := func(name string) (string, *rest.Config) {
		t.Helper()
		path, cfg, err := env.NewUserKubeconfig(name)
		if err != nil {
			t.Fatal(err)
		}
		return path, cfg
	}

	etcdUser := "system:serviceaccount:" + ns + ":kos-etcd"
	apiUser := "system:serviceaccount:" + ns + ":kos-apiserver"
	grant(etcdUser, pki.SetEtcd, "")
	grant(apiUser, pki.SetAPIServer, apiService)
	etcdKubeconfig, etcdConfig := user(etcdUser)
	apiKubeconfig, apiConfig := user(apiUser)
	nobodyKubeconfig, _ := user("system:serviceaccount:" + ns + ":nobody")

	got := mustEnsure(t, "--kubeconfig", etcdKubeconfig, "--namespace", ns, "--secrets", "etcd")
	if diff := cmp.Diff(secretLines(ns, "created", pki.CASecret, pki.EtcdServerSecret, pki.EtcdPeerSecret), got); diff != "" {
		t.Errorf("etcd run (-want +got):\n%s", diff)
	}
	got = mustEnsure(t, "--kubeconfig", apiKubeconfig, "--namespace", ns, "--secrets", "apiserver", "--apiservice", apiService)
	want := append(secretLines(ns, "kept", pki.CASecret), secretLines(ns, "created", pki.EtcdClientSecret, pki.APIServerServingSecret)...)
	want = append(want, "apiservice "+apiService+" patched")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("apiserver run (-want +got):\n%s", diff)
	}
	// Denied runs after the allowed ones, so that they meet the Secrets
	// they may not read rather than making them.
	tests := []struct {
		name       string
		kubeconfig string
		args       []string
		wantErr    string
	}{{
		name:       "no rights",
		kubeconfig: nobodyKubeconfig,
		args:       []string{"--secrets", "etcd"},
		wantErr:    "Error: reading secret " + ns + "/kos-ca: grant get on secrets in namespace " + ns + " to this identity: ",
	}, {
		name:       "etcd rights, apiserver secrets",
		kubeconfig: etcdKubeconfig,
		args:       []string{"--secrets", "apiserver"},
		wantErr:    "Error: reading secret " + ns + "/kos-etcd-client: grant get on secrets in namespace " + ns + " to this identity: ",
	}, {
		name:       "etcd rights, an APIService",
		kubeconfig: etcdKubeconfig,
		args:       []string{"--secrets", "etcd", "--apiservice", apiService},
		wantErr:    "Error: reading apiservice " + apiService + ": grant get on apiservices.apiregistration.k8s.io named " + apiService + " to this identity: ",
	}, {
		name:       "apiserver rights, another APIService",
		kubeconfig: apiKubeconfig,
		args:       []string{"--secrets", "apiserver", "--apiservice", "v1.other.example.com"},
		wantErr:    "Error: reading apiservice v1.other.example.com: grant get on apiservices.apiregistration.k8s.io named v1.other.example.com to this identity: ",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, err := runEnsure(t, append([]string{"--kubeconfig", tt.kubeconfig, "--namespace", ns}, tt.args...)...)
			if err == nil {
				t.Fatalf("succeeded, want %q", tt.wantErr)
			}
			t.Logf("%s", errOut)
			if !strings.HasPrefix(errOut, tt.wantErr) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("error output %q, want one line starting %q", errOut, tt.wantErr)
			}
		})
	}

	checkConsistent(t, ns, pki.SetAll)

	// Renewal needs update, which the rules grant for the set's leaves.
	later := time.Now().Add(pki.LeafValidity - pki.RenewBefore + time.Hour)
	for _, c := range []struct {
		set pki.Set
		cfg *rest.Config
	}{{pki.SetEtcd, etcdConfig}, {pki.SetAPIServer, apiConfig}} {
		leaves, _ := c.set.Leaves(ns)
		e := &pki.Ensurer{Client: kubeClient(t, c.cfg), Namespace: ns, Now: func() time.Time { return later }}
		_, results, err := e.Ensure(context.Background(), leaves)
		if err != nil {
			t.Fatalf("renewing %s as its user: %v", c.set, err)
		}
		for _, r := range results[1:] {
			if r.Action != pki.Renewed {
				t.Errorf("renewing %s as its user: %s", c.set, r)
			}
		}
	}
}

// TestIntegrationBinary runs the kos-pki binary as an init container does:
// it prints one line per Secret and exits 0, or prints one line of error
// and exits non-zero.
func TestIntegrationBinary(t *testing.T) {
	env := testenv.Shared(t)
	bin := testenv.Build(t, "cmd/kos-pki")
	ns := newNamespace(t)
	run := func(kubeconfig string) (stdout, stderr string, err error, took time.Duration) {
		var out, errOut bytes.Buffer
		cmd := exec.Command(bin, "ensure", "--kubeconfig", kubeconfig, "--namespace", ns, "--secrets", "etcd")
		cmd.Stdout, cmd.Stderr = &out, &errOut
		began := time.Now()
		err = cmd.Run()
		return out.String(), errOut.String(), err, time.Since(began)
	}
	out, errOut, err, took := run(env.Kubeconfig)
	if err != nil {
		t.Fatalf("first run: %v\n%s", err, errOut)
	}
	t.Logf("kos-pki ensure --secrets etcd, creating 3 secrets: %s", took.Round(time.Millisecond))
	if diff := cmp.Diff(strings.Join(secretLines(ns, "created", pki.CASecret, pki.EtcdServerSecret, pki.EtcdPeerSecret), "\n")+"\n", out); diff != "" {
		t.Errorf("first run (-want +got):\n%s", diff)
	}
	out, _, err, took = run(env.Kubeconfig)
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	t.Logf("kos-pki ensure --secrets etcd, keeping 3 secrets: %s", took.Round(time.Millisecond))
	if diff := cmp.Diff(strings.Join(secretLines(ns, "kept", pki.CASecret, pki.EtcdServerSecret, pki.EtcdPeerSecret), "\n")+"\n", out); diff != "" {
		t.Errorf("second run (-want +got):\n%s", diff)
	}

	nobody, _, err := env.NewUserKubeconfig("system:serviceaccount:" + ns + ":nobody")
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, err, _ = run(nobody)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Errorf("run without rights: %v, want a non-zero exit", err)
	}
	if out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "grant get on secrets in namespace "+ns) {
		t.Errorf("run without rights printed %q and %q, want one line of error naming what to grant", out, errOut)
	}
}

// TestIntegrationFlags checks the command's own errors.
func TestIntegrationFlags(t *testing.T) {
	env := testenv.Shared(t)
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"unknown set", []string{"--secrets", "kube", "--kubeconfig", env.Kubeconfig}, `--secrets: unknown set of secrets "kube", want one of etcd, apiserver, all`},
		{"no namespace", []string{"--namespace", "", "--kubeconfig", env.Kubeconfig}, "--namespace is empty"},
		{"outside a pod", nil, "loading the in-cluster configuration (outside a pod, pass --kubeconfig): unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined"},
		{"arguments", []string{"etcd"}, `kos-pki ensure takes no arguments, got ["etcd"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "outside a pod" {
				t.Setenv("KUBERNETES_SERVICE_HOST", "")
			}
			_, _, err := runEnsure(t, tt.args...)
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// TestIntegrationOutDir checks that --out-dir leaves the Secrets' files
// for the pod's containers, without the CA key.
func TestIntegrationOutDir(t *testing.T) {
	env := testenv.Shared(t)
	ns := newNamespace(t)
	dir := t.TempDir()
	mustEnsure(t, "--kubeconfig", env.Kubeconfig, "--namespace", ns, "--secrets", "apiserver", "--out-dir", dir)
	secrets := kubeClient(t, env.RESTConfig).CoreV1().Secrets(ns)
	for _, name := range []string{pki.CASecret, pki.EtcdClientSecret, pki.APIServerServingSecret} {
		s, err := secrets.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		files := readDir(t, filepath.Join(dir, name))
		want := map[string][]byte{}
		for k, v := range s.Data {
			if k != pki.CAKeyKey {
				want[k] = v
			}
		}
		if diff := cmp.Diff(want, files); diff != "" {
			t.Errorf("files of %s (-want +got):\n%s", name, diff)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{pki.APIServerServingSecret, pki.CASecret, pki.EtcdClientSecret}; !cmp.Equal(want, names) {
		t.Errorf("folders %q, want %q", names, want)
	}
}

// readDir returns the files of a folder by name.
func readDir(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = data
	}
	return out
}
