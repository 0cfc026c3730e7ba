package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"

	"github.com/kos-sdn/kos/components/pki"
)

// startEtcd starts one etcd with its data in Dir/<name>, on the ports prev
// had when they are free (prev may be nil) or on others picked from ps, and
// waits until it is healthy. With certs it serves clients over TLS only and
// requires a client certificate. Without fsync it runs with
// --unsafe-no-fsync, as tests may. It retries with other ports when another
// program took one between picking and binding it.
func (e *Env) startEtcd(ctx context.Context, ps *ports, name string, prev *process, certs *etcdTLS, fsync bool) (*process, error) {
	for attempt := 1; ; attempt++ {
		clientPort, err := ps.pick(prev.port(false))
		if err != nil {
			return nil, err
		}
		peerPort, err := ps.pick(prev.port(true))
		if err != nil {
			return nil, err
		}
		scheme := "http"
		if certs != nil {
			scheme = "https"
		}
		clientURL := scheme + "://127.0.0.1:" + strconv.Itoa(clientPort)
		peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
		args := []string{
			"--name=" + name,
			"--data-dir=" + filepath.Join(e.Dir, name),
			"--listen-client-urls=" + clientURL,
			"--advertise-client-urls=" + clientURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=" + name + "=" + peerURL,
			"--log-level=warn",
		}
		if !fsync {
			// Tests and local use trade durability for speed.
			args = append(args, "--unsafe-no-fsync")
		}
		if certs != nil {
			args = append(args, "--cert-file="+certs.serverCertFile, "--key-file="+certs.serverKeyFile,
				"--trusted-ca-file="+certs.caFile, "--client-cert-auth")
		}
		e.printf("starting %s on %s", name, clientURL)
		p, err := e.runEtcd(ctx, name, args, clientURL, peerURL, certs)
		if err != nil && attempt < 3 && p != nil && portTaken(p) {
			e.printf("%s lost a port to another program; retrying on other ports", name)
			prev = nil
			continue
		}
		if err != nil {
			return nil, err
		}
		return p, nil
	}
}

// runEtcd starts the etcd name with args, which make it serve on clientURL
// and peerURL, and waits until it is healthy. It fails at once when the
// environment is stopped or an etcd of that name runs. When etcd does not
// become healthy, runEtcd stops it, drops it from the environment and
// returns it with the error, so that the caller can tell whether it lost a
// port.
func (e *Env) runEtcd(ctx context.Context, name string, args []string, clientURL, peerURL string, certs *etcdTLS) (*process, error) {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return nil, errors.New("the environment is stopped")
	}
	for _, p := range e.procs {
		if p.Name == name && p.Running() {
			e.mu.Unlock()
			return nil, fmt.Errorf("%s already runs at %s", name, p.URL)
		}
	}
	p, err := startProcess(e.Dir, name, filepath.Join(e.BinDir, "etcd"), args, e.detached)
	if err == nil {
		p.URL, p.PeerURL = clientURL, peerURL
		err = e.track(p)
	}
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	client := http.DefaultClient
	if certs != nil {
		client = certs.client
	}
	err = p.WaitReady(ctx, e.timeout, func(ctx context.Context) error { return etcdHealthy(ctx, client, clientURL) })
	if err != nil {
		return p, errors.Join(err, e.untrack(p))
	}
	return p, nil
}

// untrack stops p after a failed start and drops it from the environment.
func (e *Env) untrack(p *process) error {
	err := p.Stop(stopGrace)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.procs = slices.DeleteFunc(e.procs, func(q *process) bool { return q == p })
	return errors.Join(err, e.saveState())
}

// etcdHealthy asks etcd's /health endpoint, which every etcd since 3.3
// serves on its client URL, through client.
func etcdHealthy(ctx context.Context, client *http.Client, clientURL string) error {
	body, err := getHealth(ctx, client, clientURL+"/health")
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	var health struct {
		Health string `json:"health"`
	}
	if err := json.Unmarshal(body, &health); err != nil || health.Health != "true" {
		return fmt.Errorf("etcd not healthy: %s", body)
	}
	return nil
}

// etcdTLS are the files of an etcd that serves clients over TLS only and
// requires a client certificate, and the client that checks its health.
// Only the etcd of a KOS server has them.
type etcdTLS struct {
	caFile, serverCertFile, serverKeyFile, clientCertFile, clientKeyFile string

	client *http.Client
}

// newEtcdTLS writes a CA, a serving certificate for 127.0.0.1 and a
// client certificate for kos-apiserver into dir.
func newEtcdTLS(dir string) (*etcdTLS, error) {
	ca, err := newCA("kos-etcd-ca")
	if err != nil {
		return nil, err
	}
	server, err := issue(ca, pki.Leaf{
		CommonName:  "kos-etcd",
		Usages:      []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	})
	if err != nil {
		return nil, err
	}
	client, err := issueClient(ca, "kos-apiserver", nil)
	if err != nil {
		return nil, err
	}
	t := &etcdTLS{
		caFile:         filepath.Join(dir, "ca.crt"),
		serverCertFile: filepath.Join(dir, "server.crt"),
		serverKeyFile:  filepath.Join(dir, "server.key"),
		clientCertFile: filepath.Join(dir, "client.crt"),
		clientKeyFile:  filepath.Join(dir, "client.key"),
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	for path, data := range map[string][]byte{
		t.caFile:         ca.CertPEM,
		t.serverCertFile: server.CertPEM,
		t.serverKeyFile:  server.KeyPEM,
		t.clientCertFile: client.CertPEM,
		t.clientKeyFile:  client.KeyPEM,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, fmt.Errorf("writing %s: %w", path, err)
		}
	}
	cert, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("loading the etcd client certificate: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	t.client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs:      roots,
		Certificates: []tls.Certificate{cert},
	}}}
	return t, nil
}

var etcdNamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// StartEtcd starts another etcd, named etcd-<name> in Dir (data, log and pid
// file), on free loopback ports, and returns its client URL once it is
// healthy. Stop stops it with the rest.
func (e *Env) StartEtcd(ctx context.Context, name string) (string, error) {
	if !etcdNamePattern.MatchString(name) {
		return "", fmt.Errorf("etcd name %q: want lowercase letters, digits and inner dashes", name)
	}
	var ps ports
	p, err := e.startEtcd(ctx, &ps, etcdName+"-"+name, nil, nil, false)
	if err != nil {
		return "", err
	}
	return p.URL, nil
}
