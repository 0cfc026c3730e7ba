package kubectlkos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/kos-sdn/kos/components/agent/api"
)

// tunnel reaches the debug endpoints of an agent since 0.4.0: through a
// port-forward that the kube-apiserver opens to the agent pod (RBAC:
// get and create on pods/portforward), it sends the request with the user's own
// credentials, a bearer token or a client certificate, to the agent, which
// asks the cluster whether the user may (nodes/kos-debug). The pod proxy
// cannot carry them: kube-apiserver takes the credentials off what it
// proxies.
//
// The agent's certificate is self-signed, so it is not checked; the
// port-forward, which the kube-apiserver authenticated, is what says the
// other end is the agent pod.
type tunnel struct {
	config *rest.Config
	kube   kubernetes.Interface
}

// Do implements proxy.
func (t tunnel) Do(ctx context.Context, namespace, name string, port int, method, path string, body []byte) ([]byte, error) {
	local, stop, err := t.forward(ctx, namespace, name, port)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer stop()
	return t.ask(ctx, local, method, path, body)
}

// ask sends the request to the agent at a local port with the user's
// credentials, and returns the answer; an answer other than 200 is an
// error that holds what the agent said.
func (t tunnel) ask(ctx context.Context, local int, method, path string, body []byte) ([]byte, error) {
	client, err := t.client(local)
	if err != nil {
		return nil, err
	}
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "https://127.0.0.1:"+strconv.Itoa(local)+path, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	switch resp.StatusCode {
	// 201 and 204: the agent's probes (POST and DELETE /debug/probes).
	case http.StatusOK, http.StatusCreated, http.StatusNoContent:
		return raw, nil
	}
	return nil, &answerError{method: method, path: path, code: resp.StatusCode, body: strings.TrimSpace(string(raw))}
}

// answerError is an agent's answer that is no success.
type answerError struct {
	method, path string
	code         int
	body         string
}

func (e *answerError) Error() string {
	if e.code == http.StatusUnauthorized || e.code == http.StatusForbidden {
		return fmt.Sprintf("%s %s: %d: %s (the agent lets in users allowed %s/%s of its node; see docs/kubectl-kos.md)",
			e.method, e.path, e.code, e.body, api.DebugResource, api.DebugSubresource)
	}
	return fmt.Sprintf("%s %s: %d: %s", e.method, e.path, e.code, e.body)
}

// notYet reports whether err is an agent's answer that may change once
// its own view of the cluster catches up with the API's: 404 (the
// attachment is not known there yet) or 409 (not Ready or addressed
// there yet).
func notYet(err error) bool {
	var a *answerError
	return errors.As(err, &a) && (a.code == http.StatusNotFound || a.code == http.StatusConflict)
}

// forward opens a port-forward to port of pod namespace/name on a free
// local port, and returns that port and how to close the forward.
func (t tunnel) forward(ctx context.Context, namespace, name string, port int) (int, func(), error) {
	u := t.kube.CoreV1().RESTClient().Post().Namespace(namespace).Resource("pods").Name(name).SubResource("portforward").URL()
	upgradeTransport, upgrader, err := spdy.RoundTripperFor(t.config)
	if err != nil {
		return 0, nil, err
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: upgradeTransport}, http.MethodPost, u)
	// WebSockets first, SPDY for servers without them, as kubectl.
	ws, err := portforward.NewSPDYOverWebsocketDialer(u, t.config)
	if err != nil {
		return 0, nil, err
	}
	dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	stopCh, ready := make(chan struct{}), make(chan struct{})
	var errOut bytes.Buffer
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, stopCh, ready, io.Discard, &errOut)
	if err != nil {
		return 0, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	stop := func() {
		close(stopCh)
		<-done
	}
	select {
	case <-ready:
	case err := <-done:
		if err == nil {
			err = errors.New(strings.TrimSpace(errOut.String()))
		}
		return 0, nil, fmt.Errorf("forwarding port %d of pod %s/%s: %w", port, namespace, name, err)
	case <-ctx.Done():
		stop()
		return 0, nil, ctx.Err()
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		stop()
		return 0, nil, fmt.Errorf("forwarding port %d of pod %s/%s: no local port (%v)", port, namespace, name, err)
	}
	return int(ports[0].Local), stop, nil
}

// client returns an HTTP client with the user's credentials for the agent
// at the forward's local port.
func (t tunnel) client(local int) (*http.Client, error) {
	cfg := rest.CopyConfig(t.config)
	cfg.Host = "https://127.0.0.1:" + strconv.Itoa(local)
	cfg.APIPath = ""
	cfg.TLSClientConfig.Insecure = true
	cfg.TLSClientConfig.CAFile, cfg.TLSClientConfig.CAData, cfg.TLSClientConfig.ServerName = "", nil, ""
	// The agent honours no impersonation: the user asks as themself.
	cfg.Impersonate = rest.ImpersonationConfig{}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("making a client for the agent: %w", err)
	}
	return client, nil
}
