package testenv

import (
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/kos-sdn/kos/components/pki"
)

// The files of the credentials that name Options.Address or serve kubelets,
// relative to Env.Dir. Unlike the environment's PKI they are made anew on
// every start: the address changes from one start to the next.
const (
	addressServingCertFile = "apiserver-node.crt"
	addressServingKeyFile  = "apiserver-node.key"
	kubeletClientCertFile  = "apiserver-kubelet-client.crt"
	kubeletClientKeyFile   = "apiserver-kubelet-client.key"
)

// kubeletClientUser is kube-apiserver's user towards kubelets.
const kubeletClientUser = "kube-apiserver-kubelet-client"

// ServiceCIDR is kube-apiserver's --service-cluster-ip-range. Its first
// address is the kubernetes Service's ClusterIP, which kube-apiserver's
// serving certificate names.
var ServiceCIDR = netip.MustParsePrefix("10.96.0.0/16")

// servingNames are the names every serving certificate of kube-apiserver
// holds.
var servingNames = []string{
	"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
	"kubernetes.default.svc.cluster.local",
}

// writeAddressCerts writes kube-apiserver's serving certificate for addr
// (besides loopback) and, for kubelets, its client certificate towards them.
func writeAddressCerts(dir string, addr netip.Addr, kubelets bool) error {
	ca, err := loadCA(filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile))
	if err != nil {
		return fmt.Errorf("loading the CA: %w", err)
	}
	serving, err := issue(ca, pki.Leaf{
		CommonName:  "kube-apiserver",
		Usages:      []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    servingNames,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.IP(ServiceCIDR.Addr().Next().AsSlice()), net.IP(addr.AsSlice())},
	})
	if err != nil {
		return err
	}
	files := map[string][]byte{
		addressServingCertFile: serving.CertPEM,
		addressServingKeyFile:  serving.KeyPEM,
	}
	if kubelets {
		clientCA, err := loadCA(filepath.Join(dir, clientCACertFile), filepath.Join(dir, clientCAKeyFile))
		if err != nil {
			return fmt.Errorf("loading the client CA: %w", err)
		}
		// In system:masters, so that every kubelet lets kube-apiserver in
		// for logs, exec and port forwarding.
		client, err := issueClient(clientCA, kubeletClientUser, []string{"system:masters"})
		if err != nil {
			return err
		}
		files[kubeletClientCertFile], files[kubeletClientKeyFile] = client.CertPEM, client.KeyPEM
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
	}
	return nil
}

// WriteKubeconfig writes a kubeconfig at path with a new client certificate
// for user in groups, for the environment's kube-apiserver: how cluster
// components (kube-controller-manager, kubelets, kube-proxy) get theirs.
func (e *Env) WriteKubeconfig(path, user string, groups ...string) error {
	clientCA, err := loadCA(filepath.Join(e.Dir, clientCACertFile), filepath.Join(e.Dir, clientCAKeyFile))
	if err != nil {
		return fmt.Errorf("loading the client CA: %w", err)
	}
	client, err := issueClient(clientCA, user, groups)
	if err != nil {
		return err
	}
	caPEM, err := os.ReadFile(e.CACertFile)
	if err != nil {
		return fmt.Errorf("reading the CA certificate: %w", err)
	}
	return writeKubeconfig(path, e.APIServerURL, caPEM, client.CertPEM, client.KeyPEM, user)
}

// IssueServingCert writes to certFile and keyFile a serving certificate for
// name and ip signed by the CA that kube-apiserver trusts for servers
// (CACertFile): a kubelet's, which kube-apiserver checks with
// Options.Kubelets.
func (e *Env) IssueServingCert(certFile, keyFile, name string, ip netip.Addr) error {
	ca, err := loadCA(e.CACertFile, filepath.Join(e.Dir, caKeyFile))
	if err != nil {
		return fmt.Errorf("loading the CA: %w", err)
	}
	kp, err := issue(ca, pki.Leaf{
		CommonName:  name,
		Usages:      []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{name},
		IPAddresses: []net.IP{net.IP(ip.AsSlice())},
	})
	if err != nil {
		return err
	}
	if err := os.WriteFile(certFile, kp.CertPEM, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", certFile, err)
	}
	if err := os.WriteFile(keyFile, kp.KeyPEM, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", keyFile, err)
	}
	return nil
}
