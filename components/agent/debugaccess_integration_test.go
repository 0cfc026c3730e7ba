package agent_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kos-sdn/kos/components/agent"
	agentapi "github.com/kos-sdn/kos/components/agent/api"
	"github.com/kos-sdn/kos/components/fabric/logging"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationDebugAccess runs kos-agent's server against a real
// kube-apiserver and asks its debug endpoints as different callers: no
// identity gets 401, a ServiceAccount without rights on nodes/kos-debug
// 403, one with them 200, one allowed get only a 403 for a trace (create),
// a user with a client certificate of the cluster and the rights 200; the
// metrics port answers /metrics without a token and serves no debug path.
func TestIntegrationDebugAccess(t *testing.T) {
	env := testenv.Shared(t)
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ns := newNamespace(t)
	node := "debug-" + ns

	// The roles: all of nodes/kos-debug, and its reads only.
	grant := func(role string, verbs []string, subjects ...rbacv1.Subject) {
		t.Helper()
		name := role + "-" + ns
		cr := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{agentapi.DebugResource + "/" + agentapi.DebugSubresource}, Verbs: verbs}},
		}
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   subjects,
		}
		if _, err := kube.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
			_ = kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	token := func(sa string) string {
		t.Helper()
		if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("requesting a token of %s: %v", sa, err)
		}
		return tr.Status.Token
	}
	saSubject := func(sa string) rbacv1.Subject {
		return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}
	}
	certUser := "kos-debug-user-" + ns
	grant("kos-debug", []string{"get", "create"}, saSubject("reader"), rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: certUser})
	grant("kos-debug-get", []string{"get"}, saSubject("getter"))
	readerToken, getterToken, strangerToken := token("reader"), token("getter"), token("stranger")
	_, certConfig, err := env.NewUserKubeconfig(certUser)
	if err != nil {
		t.Fatal(err)
	}

	metricsAddr, debugAddr := freeAddr(t), freeAddr(t)
	srv, err := agent.ServerConfig{
		Main:               env.RESTConfig,
		KOS:                directConfig(t),
		Agent:              agent.Config{NodeName: node, HostIP: netip.MustParseAddr("192.168.77.1"), Fabric: logging.New()},
		MetricsBindAddress: metricsAddr,
		DebugBindAddress:   debugAddr,
	}.Complete().New()
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig())))
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("the agent's server stopped with: %v", err)
		}
	})

	metrics := "http://" + metricsAddr
	debug := "https://" + debugAddr
	poll.Until(t, settle, "the metrics port to answer", func(ctx context.Context) error {
		code, body, err := ask(ctx, http.DefaultClient, http.MethodGet, metrics+"/metrics", "", "")
		if err != nil {
			return err
		}
		if code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
			return fmt.Errorf("GET /metrics: %d, want 200 with the metrics", code)
		}
		return nil
	})
	if code, _, err := ask(ctx, http.DefaultClient, http.MethodGet, metrics+agentapi.PathStatus, "", ""); err != nil || code != http.StatusNotFound {
		t.Errorf("GET %s on the metrics port: %d, %v; want 404", agentapi.PathStatus, code, err)
	}

	// The server's certificate is self-signed, as kubelet's without one.
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	trace := `{"namespace":"` + ns + `","name":"a1","to":"10.0.0.9"}`
	for _, tt := range []struct {
		name, method, path, token, body string
		want                            int
	}{
		{"no token", http.MethodGet, agentapi.PathStatus, "", "", http.StatusUnauthorized},
		{"no token, flows", http.MethodGet, agentapi.PathFlows, "", "", http.StatusUnauthorized},
		{"no token, tunnels", http.MethodGet, agentapi.PathTunnels, "", "", http.StatusUnauthorized},
		{"no token, routes", http.MethodGet, agentapi.PathRoutes, "", "", http.StatusUnauthorized},
		{"no token, trace", http.MethodPost, agentapi.PathTrace, "", trace, http.StatusUnauthorized},
		{"a token nobody issued", http.MethodGet, agentapi.PathStatus, "not-a-token", "", http.StatusUnauthorized},
		{"no rights", http.MethodGet, agentapi.PathStatus, strangerToken, "", http.StatusForbidden},
		{"no rights, flows", http.MethodGet, agentapi.PathFlows, strangerToken, "", http.StatusForbidden},
		{"no rights, tunnels", http.MethodGet, agentapi.PathTunnels, strangerToken, "", http.StatusForbidden},
		{"no rights, routes", http.MethodGet, agentapi.PathRoutes, strangerToken, "", http.StatusForbidden},
		{"no rights, trace", http.MethodPost, agentapi.PathTrace, strangerToken, trace, http.StatusForbidden},
		{"the role", http.MethodGet, agentapi.PathStatus, readerToken, "", http.StatusOK},
		{"the role, routes", http.MethodGet, agentapi.PathRoutes, readerToken, "", http.StatusOK},
		// The logging fabric has no switch: past the check, the
		// endpoints say so.
		{"the role, trace", http.MethodPost, agentapi.PathTrace, readerToken, trace, http.StatusNotImplemented},
		{"get only", http.MethodGet, agentapi.PathStatus, getterToken, "", http.StatusOK},
		{"get only, trace", http.MethodPost, agentapi.PathTrace, getterToken, trace, http.StatusForbidden},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body, err := ask(ctx, insecure, tt.method, debug+tt.path, tt.token, tt.body)
			if err != nil {
				t.Fatal(err)
			}
			if code != tt.want {
				t.Fatalf("%s %s: %d (%s), want %d", tt.method, tt.path, code, strings.TrimSpace(body), tt.want)
			}
			if tt.path == agentapi.PathStatus && code == http.StatusOK {
				var st agentapi.Status
				if err := json.Unmarshal([]byte(body), &st); err != nil || st.Node != node {
					t.Errorf("status %q (%v), want node %s's", body, err, node)
				}
			}
		})
	}

	// A client certificate of the cluster's client CA, which the agent
	// reads from kube-system/extension-apiserver-authentication.
	tlsConfig, err := rest.TLSConfigFor(certConfig)
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig.InsecureSkipVerify, tlsConfig.RootCAs = true, nil
	withCert := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	poll.Until(t, settle, "a client certificate with the role to get the status", func(ctx context.Context) error {
		code, body, err := ask(ctx, withCert, http.MethodGet, debug+agentapi.PathStatus, "", "")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("GET %s with a client certificate: %d (%s), want 200", agentapi.PathStatus, code, strings.TrimSpace(body))
		}
		return nil
	})
}

// ask sends one request, with token as a bearer token unless empty, and
// returns the answer's status and body.
func ask(ctx context.Context, c *http.Client, method, url, token, body string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
