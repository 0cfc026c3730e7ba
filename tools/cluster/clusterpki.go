package testenv

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// The files of the cluster components' credentials, relative to Env.Dir.
// Unlike the environment's PKI they are made anew on every start: they name
// the node's addresses, which change from one start to the next.
const (
	nodeServingCertFile   = "apiserver-node.crt"
	nodeServingKeyFile    = "apiserver-node.key"
	kubeletClientCertFile = "apiserver-kubelet-client.crt"
	kubeletClientKeyFile  = "apiserver-kubelet-client.key"
	controllerManagerFile = "kube-controller-manager.kubeconfig"
	schedulerFile         = "kube-scheduler.kubeconfig"
)

// Within the node's folder.
const (
	kubeletKubeconfigFile  = "kubelet.kubeconfig"
	kubeletServingCertFile = "kubelet.crt"
	kubeletServingKeyFile  = "kubelet.key"
)

// The users of the cluster components, as RBAC's default bindings and the
// Node authorizer expect them.
const (
	controllerManagerUser = "system:kube-controller-manager"
	schedulerUser         = "system:kube-scheduler"
	nodesGroup            = "system:nodes"
	kubeletClientUser     = "kube-apiserver-kubelet-client"
)

// writeNodeCerts writes the certificates that name the node's addresses:
// kube-apiserver's serving certificate for the host's end of the node link
// (besides loopback), kube-apiserver's client certificate for kubelets, and
// the kubelet's serving certificate for the node's IP.
func writeNodeCerts(dir string, n *nodeState) error {
	ca, err := loadKeyPair(filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile))
	if err != nil {
		return fmt.Errorf("loading the CA: %w", err)
	}
	clientCA, err := loadKeyPair(filepath.Join(dir, clientCACertFile), filepath.Join(dir, clientCAKeyFile))
	if err != nil {
		return fmt.Errorf("loading the client CA: %w", err)
	}
	serving, err := ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{
			"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local",
		},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1"), net.IP(n.hostIP().AsSlice())},
	})
	if err != nil {
		return err
	}
	// In system:masters, so that every kubelet lets kube-apiserver in for
	// logs, exec and port forwarding.
	kubeletClient, err := clientCA.issueClient(kubeletClientUser, []string{"system:masters"})
	if err != nil {
		return err
	}
	kubeletServing, err := ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: n.Name},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{n.Name},
		IPAddresses: []net.IP{net.IP(n.nodeIP().AsSlice())},
	})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(n.NodeDir, 0o755); err != nil {
		return fmt.Errorf("creating the node's folder: %w", err)
	}
	files := map[string][]byte{
		filepath.Join(dir, nodeServingCertFile):          serving.certPEM,
		filepath.Join(dir, nodeServingKeyFile):           serving.keyPEM,
		filepath.Join(dir, kubeletClientCertFile):        kubeletClient.certPEM,
		filepath.Join(dir, kubeletClientKeyFile):         kubeletClient.keyPEM,
		filepath.Join(n.NodeDir, kubeletServingCertFile): kubeletServing.certPEM,
		filepath.Join(n.NodeDir, kubeletServingKeyFile):  kubeletServing.keyPEM,
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return nil
}

// writeComponentKubeconfig writes a kubeconfig at path for a new client
// certificate of user in groups, for the kube-apiserver at server.
func writeComponentKubeconfig(dir, path, server, user string, groups []string) error {
	clientCA, err := loadKeyPair(filepath.Join(dir, clientCACertFile), filepath.Join(dir, clientCAKeyFile))
	if err != nil {
		return fmt.Errorf("loading the client CA: %w", err)
	}
	client, err := clientCA.issueClient(user, groups)
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, caCertFile))
	if err != nil {
		return fmt.Errorf("reading the CA certificate: %w", err)
	}
	return writeKubeconfig(path, server, caPEM, client.certPEM, client.keyPEM, user)
}
