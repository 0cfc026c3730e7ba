package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
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

// keyPair is a certificate with its private key, parsed and PEM-encoded.
type keyPair struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
}

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
	serving, err := ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{
			"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local",
		},
		// 10.96.0.1 is the first address of --service-cluster-ip-range, the
		// ClusterIP of the kubernetes Service.
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
	})
	if err != nil {
		return false, err
	}
	admin, err := clientCA.issueClient(adminUser, []string{"system:masters"})
	if err != nil {
		return false, err
	}
	frontProxyClient, err := frontProxyCA.issueClient(frontProxyClientName, nil)
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
		caCertFile: ca.certPEM, caKeyFile: ca.keyPEM,
		clientCACertFile: clientCA.certPEM, clientCAKeyFile: clientCA.keyPEM,
		frontProxyCACertFile: frontProxyCA.certPEM, frontProxyCAKeyFile: frontProxyCA.keyPEM,
		frontProxyClientCertFile: frontProxyClient.certPEM, frontProxyClientKeyFile: frontProxyClient.keyPEM,
		servingCertFile: serving.certPEM, servingKeyFile: serving.keyPEM,
		adminCertFile: admin.certPEM, adminKeyFile: admin.keyPEM,
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

// newCA makes a self-signed certificate authority.
func newCA(commonName string) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the key of %s: %w", commonName, err)
	}
	tmpl, err := template(&x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}, 10*365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("signing %s: %w", commonName, err)
	}
	return newKeyPair(der, key)
}

// issueClient signs a client certificate for user in groups (its
// organizations, which kube-apiserver reads as groups).
func (ca *keyPair) issueClient(user string, groups []string) (*keyPair, error) {
	return ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// issue signs a leaf certificate from the subject, usages and names in leaf,
// with a new key.
func (ca *keyPair) issue(leaf *x509.Certificate) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the key of %s: %w", leaf.Subject.CommonName, err)
	}
	leaf.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl, err := template(leaf, 365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("signing %s: %w", leaf.Subject.CommonName, err)
	}
	return newKeyPair(der, key)
}

// template completes c with a random serial number and a validity period that
// starts a little in the past, to tolerate clock skew.
func template(c *x509.Certificate, validity time.Duration) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	c.SerialNumber = serial
	c.NotBefore = time.Now().Add(-time.Hour)
	c.NotAfter = time.Now().Add(validity)
	return c, nil
}

func newKeyPair(der []byte, key *ecdsa.PrivateKey) (*keyPair, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing a certificate just made: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &keyPair{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  keyPEM,
	}, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding a private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// loadKeyPair reads a certificate and its EC private key written by ensurePKI.
func loadKeyPair(certFile, keyFile string) (*keyPair, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("reading certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("reading key: %w", err)
	}
	certBlock, _ := pem.Decode(certPEM)
	keyBlock, _ := pem.Decode(keyPEM)
	if certBlock == nil || keyBlock == nil {
		return nil, fmt.Errorf("no PEM data in %s or %s", certFile, keyFile)
	}
	cert, err := x509.ParseCertificate(certBlock.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", certFile, err)
	}
	key, err := x509.ParseECPrivateKey(keyBlock.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", keyFile, err)
	}
	return &keyPair{cert: cert, key: key, certPEM: certPEM, keyPEM: keyPEM}, nil
}
