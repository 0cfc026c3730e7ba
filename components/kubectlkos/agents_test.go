package kubectlkos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestPodProxy sends requests through podProxy to a server that plays the
// kube-apiserver's pod proxy, and checks the paths it asks for and how it
// reports the agent's answers.
func TestPodProxy(t *testing.T) {
	t.Parallel()
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		asked = append(asked, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type")+" "+string(body))
		switch {
		case strings.HasSuffix(r.URL.Path, "/debug/status"):
			w.Write([]byte(`{"node":"n1"}`))
		case strings.HasSuffix(r.URL.Path, "/debug/trace"):
			http.Error(w, "attachment t1/a9 is not on node n1", http.StatusNotFound)
		case strings.HasSuffix(r.URL.Path, "/debug/flows"):
			http.Error(w, "ovs-ofctl: exit status 1", http.StatusInternalServerError)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	p := podProxy{kube: kube}
	tests := []struct {
		method, path, body string
		want, wantErr      string
	}{
		{method: http.MethodGet, path: "/debug/status", want: `{"node":"n1"}`},
		{method: http.MethodPost, path: "/debug/trace", body: `{"name":"a9"}`, wantErr: "POST /debug/trace: 404: attachment t1/a9 is not on node n1"},
		{method: http.MethodGet, path: "/debug/flows", wantErr: "GET /debug/flows: 500: ovs-ofctl: exit status 1"},
		{method: http.MethodGet, path: "/debug/routes", wantErr: "GET /debug/routes: the agent does not serve it (a release older than this plugin?)"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			var body []byte
			if tt.body != "" {
				body = []byte(tt.body)
			}
			got, err := p.Do(context.Background(), "kos-node", "kos-agent-x", 9298, tt.method, tt.path, body)
			if errString(err) != tt.wantErr || string(got) != tt.want {
				t.Errorf("Do: %q, %v; want %q, %q", got, err, tt.want, tt.wantErr)
			}
		})
	}
	want := []string{
		"GET /api/v1/namespaces/kos-node/pods/http:kos-agent-x:9298/proxy/debug/status  ",
		`POST /api/v1/namespaces/kos-node/pods/http:kos-agent-x:9298/proxy/debug/trace application/json {"name":"a9"}`,
		"GET /api/v1/namespaces/kos-node/pods/http:kos-agent-x:9298/proxy/debug/flows  ",
		"GET /api/v1/namespaces/kos-node/pods/http:kos-agent-x:9298/proxy/debug/routes  ",
	}
	if diff := cmp.Diff(asked, want); diff != "" {
		t.Errorf("requests (-got +want):\n%s", diff)
	}
}

// recordingProxy answers every request with answer and err, and records
// the ports it was asked on.
type recordingProxy struct {
	answer []byte
	err    error
	asked  []int
}

func (p *recordingProxy) Do(_ context.Context, _, _ string, port int, _, _ string, _ []byte) ([]byte, error) {
	p.asked = append(p.asked, port)
	return p.answer, p.err
}

// TestAgentsChooseTheWay checks how an agent pod is asked: through the
// tunnel, with the user's credentials, on the port named debug; through
// the pod proxy on the metrics port when there is none (before 0.4.0),
// and through the tunnel on the releases' debug port when that agent does
// not serve the path there (a 0.4.0 agent in a manifest without the port).
func TestAgentsChooseTheWay(t *testing.T) {
	t.Parallel()
	pod := func(ports ...corev1.ContainerPort) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: agentContainer, Ports: ports}}}}
	}
	tests := []struct {
		name                  string
		pod                   *corev1.Pod
		proxyErr              error
		wantProxy, wantTunnel []int
	}{
		{"debug port", pod(corev1.ContainerPort{Name: "metrics", ContainerPort: 9298}, corev1.ContainerPort{Name: "debug", ContainerPort: 9400}), nil, nil, []int{9400}},
		{"metrics port only", pod(corev1.ContainerPort{Name: "metrics", ContainerPort: 9298}), nil, []int{9298}, nil},
		{"not served on the metrics port", pod(corev1.ContainerPort{Name: "metrics", ContainerPort: 9298}), fmt.Errorf("GET /debug/status: %w", errNotServed), []int{9298}, []int{9299}},
		{"another failure of the proxy", pod(), errors.New("forbidden"), []int{9298}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proxy, tunnel := &recordingProxy{err: tt.proxyErr}, &recordingProxy{answer: []byte("ok")}
			a := &agents{proxy: proxy, tunnel: tunnel}
			_, _ = a.get(context.Background(), tt.pod, "/debug/status")
			if diff := cmp.Diff(proxy.asked, tt.wantProxy); diff != "" {
				t.Errorf("ports asked through the pod proxy (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(tunnel.asked, tt.wantTunnel); diff != "" {
				t.Errorf("ports asked through the tunnel (-got +want):\n%s", diff)
			}
		})
	}
}
