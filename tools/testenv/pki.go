package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/kos-sdn/kos/components/pki"
)

// The files of the environment's PKI, relative to Env.Dir. Three separate CAs
// keep the roles apart, as in a real cluster: a client that trusts the serving
// CA cannot mint client certificates, and the front-proxy CA signs only the
// aggregator's client certificate.
const (
	caCertFile               = "ca.crt"
	caKeyFile                = "ca.key"
	clientCACertFile         = "client-ca.crt"
	clientCAKeyFile          = "client-ca.key"
	frontProxyCACertFile     = "front-proxy-ca.crt"
	frontProxyCAKeyFile      = "front-proxy-ca.key"
	frontProxyClientCertFile = "front-proxy-client.crt"
	frontProxyClientKeyFile  = "front-proxy-client.key"
	servingCertFile          = "apiserver.crt"
	servingKeyFile           = "apiserver.key"
	adminCertFile            = "admin.crt"
	adminKeyFile             = "admin.key"
	serviceAccountKeyFile    = "sa.key"
	serviceAccountPubFile    = "sa.pub"
)

// frontProxyClientName is the common name of the aggregator's client
// certificate, and so the one name --requestheader-allowed-names admits.
const frontProxyClientName = "front-proxy-client"

// adminUser is the user name of the admin client certificate.
const adminUser = "kos-admin"

// ensurePKI writes the environment's certificates and keys into dir unless all
// of them are already there, so that a restarted environment keeps the
// credentials people saved. It reports whether it wrote them.
func ensurePKI(dir string) (bool, error) {
	all := []string{
		caCertFile, caKeyFile, clientCACertFile, clientCAKeyFile,
		frontProxyCACertFile, frontProxyCAKeyFile, frontProxyClientCertFile, frontProxyClientKeyFile,
		servingCertFile, servingKeyFile, adminCertFile, adminKeyFile,
		serviceAccountKeyFile, serviceAccountPubFile,
	}
	missing := false
	for _, name := range all {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			missing = true
			break
		}
	}
	if !missing {
		return false, nil
	}

	ca, err := newCA("kos-testenv-ca")
	if err != nil {
		return false, err
	}
	clientCA, err := newCA("kos-testenv-client-ca")
	if err != nil {
		return false, err
	}
	frontProxyCA, err := newCA("kos-testenv-front-proxy-ca")
	if err != nil {
		return false, err
	}
	serving, err := issue(ca, pki.Leaf{
		CommonName: "kube-apiserver",
		Usages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:   servingNames,
		// 10.96.0.1 is the first address of --service-cluster-ip-range, the
		// ClusterIP of the kubernetes Service.
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
	})
	if err != nil {
		return false, err
	}
	admin, err := issueClient(clientCA, adminUser, []string{"system:masters"})
	if err != nil {
		return false, err
	}
	frontProxyClient, err := issueClient(frontProxyCA, frontProxyClientName, nil)
	if err != nil {
		return false, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return false, fmt.Errorf("generating the service-account key: %w", err)
	}
	saKeyPEM, err := encodeKey(saKey)
	if err != nil {
		return false, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return false, fmt.Errorf("encoding the service-account public key: %w", err)
	}

	files := map[string][]byte{
		caCertFile: ca.CertPEM, caKeyFile: ca.KeyPEM,
		clientCACertFile: clientCA.CertPEM, clientCAKeyFile: clientCA.KeyPEM,
		frontProxyCACertFile: frontProxyCA.CertPEM, frontProxyCAKeyFile: frontProxyCA.KeyPEM,
		frontProxyClientCertFile: frontProxyClient.CertPEM, frontProxyClientKeyFile: frontProxyClient.KeyPEM,
		servingCertFile: serving.CertPEM, servingKeyFile: serving.KeyPEM,
		adminCertFile: admin.CertPEM, adminKeyFile: admin.KeyPEM,
		serviceAccountKeyFile: saKeyPEM,
		serviceAccountPubFile: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return false, fmt.Errorf("writing %s: %w", name, err)
		}
	}
	return true, nil
}

// The certificates come from components/pki, the project's one CA.

// newCA makes a self-signed certificate authority.
func newCA(commonName string) (*pki.CA, error) {
	return pki.NewCA(commonName, time.Now())
}

// issue signs a leaf certificate for l, with a new key.
func issue(ca *pki.CA, l pki.Leaf) (*pki.KeyPair, error) {
	if l.Secret == "" {
		// Only named in errors here.
		l.Secret = l.CommonName
	}
	return ca.Issue(l, time.Now())
}

// issueClient signs a client certificate for user in groups (its
// organizations, which kube-apiserver reads as groups).
func issueClient(ca *pki.CA, user string, groups []string) (*pki.KeyPair, error) {
	return issue(ca, pki.Leaf{CommonName: user, Organization: groups, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

// loadCA reads a CA that ensurePKI wrote.
func loadCA(certFile, keyFile string) (*pki.CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("reading the CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("reading the CA key: %w", err)
	}
	ca, err := pki.ParseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", certFile, err)
	}
	return ca, nil
}

// loadKeyPair reads a certificate and its private key that ensurePKI wrote.
func loadKeyPair(certFile, keyFile string) (*pki.KeyPair, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("reading certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("reading key: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("reading %s and %s: %w", certFile, keyFile, err)
	}
	return &pki.KeyPair{Cert: pair.Leaf, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// encodeKey PEM-encodes the service-account key as kube-apiserver and
// kube-controller-manager read it.
func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding a private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}
