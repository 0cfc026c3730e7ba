package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Client rate limits: client-go's defaults (5 requests per second, bursts of
// 10) would make the tests measure the client's throttle, not the server.
const (
	clientQPS   = 200
	clientBurst = 400
)

// contextName names the cluster, user and context in the kubeconfig files.
const contextName = "kos-local"

// newRESTConfig is a client configuration for a client certificate, trusting
// the environment's CA.
func newRESTConfig(server string, caPEM, certPEM, keyPEM []byte) *rest.Config {
	return &rest.Config{
		Host: server,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   caPEM,
			CertData: certPEM,
			KeyData:  keyPEM,
		},
		QPS:   clientQPS,
		Burst: clientBurst,
	}
}

// writeKubeconfig writes a self-contained kubeconfig (certificates embedded)
// for a client certificate.
func writeKubeconfig(path, server string, caPEM, certPEM, keyPEM []byte, user string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[contextName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts[contextName] = &clientcmdapi.Context{Cluster: contextName, AuthInfo: user}
	cfg.CurrentContext = contextName
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}

// loadRESTConfig reads a kubeconfig written by writeKubeconfig and raises its
// rate limits.
func loadRESTConfig(path string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", path, err)
	}
	cfg.QPS, cfg.Burst = clientQPS, clientBurst
	return cfg, nil
}

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// NewUserKubeconfig writes a kubeconfig into Dir for a new client certificate
// with the given user name and groups, and returns its path and a client
// configuration for it. Such a user has only the rights RBAC grants it, which
// is what RBAC tests need.
func (e *Env) NewUserKubeconfig(user string, groups ...string) (string, *rest.Config, error) {
	if user == "" {
		return "", nil, fmt.Errorf("user name is empty")
	}
	clientCA, err := loadCA(filepath.Join(e.Dir, clientCACertFile), filepath.Join(e.Dir, clientCAKeyFile))
	if err != nil {
		return "", nil, fmt.Errorf("loading the client CA: %w", err)
	}
	client, err := issueClient(clientCA, user, groups)
	if err != nil {
		return "", nil, err
	}
	caPEM, err := os.ReadFile(e.CACertFile)
	if err != nil {
		return "", nil, fmt.Errorf("reading the CA certificate: %w", err)
	}
	usersDir := filepath.Join(e.Dir, "users")
	if err := os.MkdirAll(usersDir, 0o755); err != nil {
		return "", nil, fmt.Errorf("creating %s: %w", usersDir, err)
	}
	// One user may be asked for several times, with different groups.
	f, err := os.CreateTemp(usersDir, strings.Trim(unsafeFileChars.ReplaceAllString(user, "_"), "_")+"-*.kubeconfig")
	if err != nil {
		return "", nil, fmt.Errorf("creating a kubeconfig for %s: %w", user, err)
	}
	path := f.Name()
	if err := f.Close(); err != nil {
		return "", nil, fmt.Errorf("creating a kubeconfig for %s: %w", user, err)
	}
	if err := writeKubeconfig(path, e.APIServerURL, caPEM, client.CertPEM, client.KeyPEM, user); err != nil {
		return "", nil, err
	}
	return path, newRESTConfig(e.APIServerURL, caPEM, client.CertPEM, client.KeyPEM), nil
}
