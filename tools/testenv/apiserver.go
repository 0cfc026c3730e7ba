package testenv

// This file starts kube-apiserver on the environment's etcd and tells
// when it is ready.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kos-sdn/kos/tools/spawner"
)

// startAPIServer starts kube-apiserver on the environment's etcd, waits until
// it is ready, and fills in the client side of the Env.
func (e *Env) startAPIServer(ctx context.Context, ps *ports, extraFlags []string, prev *process) error {
	admin, err := loadKeyPair(filepath.Join(e.Dir, adminCertFile), filepath.Join(e.Dir, adminKeyFile))
	if err != nil {
		return fmt.Errorf("loading the admin certificate: %w", err)
	}
	caPEM, err := os.ReadFile(e.CACertFile)
	if err != nil {
		return fmt.Errorf("reading the CA certificate: %w", err)
	}
	file := func(name string) string { return filepath.Join(e.Dir, name) }
	for attempt := 1; ; attempt++ {
		port, err := ps.pick(prev.port(false))
		if err != nil {
			return err
		}
		addr := e.apiServerAddress()
		url := "https://" + addr + ":" + strconv.Itoa(port)
		servingCert, servingKey := file(servingCertFile), file(servingKeyFile)
		if e.address.IsValid() {
			servingCert, servingKey = file(addressServingCertFile), file(addressServingKeyFile)
		}
		args := []string{
			"--etcd-servers=" + e.EtcdURL,
			"--bind-address=" + addr,
			"--advertise-address=" + addr,
			"--secure-port=" + strconv.Itoa(port),
			"--tls-cert-file=" + servingCert,
			"--tls-private-key-file=" + servingKey,
			"--client-ca-file=" + file(clientCACertFile),
			"--authorization-mode=" + e.authorizationModes(),
			"--service-account-issuer=" + serviceAccountIssuer,
			"--service-account-key-file=" + file(serviceAccountPubFile),
			"--service-account-signing-key-file=" + file(serviceAccountKeyFile),
			"--service-cluster-ip-range=" + ServiceCIDR.String(),
			// Endpoints may not hold the loopback address it advertises.
			"--endpoint-reconciler-type=none",
			"--allow-privileged=true",
			"--requestheader-client-ca-file=" + file(frontProxyCACertFile),
			"--requestheader-allowed-names=" + frontProxyClientName,
			"--requestheader-username-headers=X-Remote-User",
			"--requestheader-group-headers=X-Remote-Group",
			"--requestheader-extra-headers-prefix=X-Remote-Extra-",
			"--proxy-client-cert-file=" + file(frontProxyClientCertFile),
			"--proxy-client-key-file=" + file(frontProxyClientKeyFile),
		}
		// Later flags win: the cluster's replace some of the above.
		args = append(args, e.apiServerClusterFlags()...)
		args = append(args, extraFlags...)
		e.printf("starting %s on %s", apiServerName, url)
		p, err := startProcess(e.Dir, apiServerName, filepath.Join(e.BinDir, apiServerName), args, e.detached)
		if err != nil {
			return err
		}
		p.URL = url
		if err := e.track(p); err != nil {
			return err
		}
		e.APIServerURL = url
		e.RESTConfig = newRESTConfig(url, caPEM, admin.CertPEM, admin.KeyPEM)
		client, err := kubernetes.NewForConfig(e.RESTConfig)
		if err != nil {
			return fmt.Errorf("creating a client: %w", err)
		}
		e.printf("waiting for %s to be ready", apiServerName)
		err = p.WaitReady(ctx, e.timeout, func(ctx context.Context) error { return readyz(ctx, client) })
		if err != nil && attempt < 3 && portTaken(p) {
			e.printf("%s lost its port to another program; retrying on another port", apiServerName)
			if err := e.stopLast(); err != nil {
				return err
			}
			prev = nil
			continue
		}
		if err != nil {
			return err
		}
		// Readiness does not wait for the system namespaces, and tests
		// write into kube-system at once.
		err = p.WaitReady(ctx, e.timeout, func(ctx context.Context) error {
			for _, ns := range []string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic} {
				if _, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		info, err := client.Discovery().ServerVersion()
		if err != nil {
			return fmt.Errorf("reading the server version: %w", err)
		}
		e.Version = info.GitVersion
		return writeKubeconfig(e.Kubeconfig, url, caPEM, admin.CertPEM, admin.KeyPEM, adminUser)
	}
}

// portTaken reports whether p died because its port was in use.
func portTaken(p *process) bool {
	return !p.Running() && strings.Contains(spawner.Tail(p.LogFile, 30), "address already in use")
}

// readyz asks kube-apiserver's /readyz.
func readyz(ctx context.Context, client kubernetes.Interface) error {
	body, err := client.CoreV1().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("/readyz: %w: %s", err, lastLines(string(body), 3))
	}
	return nil
}

// lastLines keeps the end of a long body, where /readyz lists what failed.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "; ")
}

// Ready returns nil when kube-apiserver answers /readyz with success.
func (e *Env) Ready(ctx context.Context) error {
	if !e.running(apiServerName) {
		return fmt.Errorf("%s is not running", apiServerName)
	}
	client, err := kubernetes.NewForConfig(e.RESTConfig)
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	return readyz(ctx, client)
}
