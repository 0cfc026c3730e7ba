package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"
)

// Lifetimes of the certificates the package issues, and when a leaf is
// re-issued.
const (
	// CAValidity is how long a new CA is valid.
	CAValidity = 10 * 365 * 24 * time.Hour
	// LeafValidity is how long a new leaf certificate is valid, unless its
	// CA expires sooner.
	LeafValidity = 365 * 24 * time.Hour
	// RenewBefore is how long before it expires a leaf is re-issued.
	RenewBefore = 30 * 24 * time.Hour

	// backdate makes certificates valid a little before they are made, so
	// that a peer whose clock lags the issuer's accepts them at once.
	backdate = time.Hour
)

// CA is a certificate authority: its certificate and the private key that
// signs with it.
type CA struct {
	// Cert is the CA certificate.
	Cert *x509.Certificate
	// CertPEM is Cert, PEM-encoded: the bundle clients trust.
	CertPEM []byte
	// Key is the CA's private key.
	Key crypto.Signer
	// KeyPEM is Key, PEM-encoded.
	KeyPEM []byte
}

// KeyPair is a leaf certificate with its private key.
type KeyPair struct {
	// Cert is the certificate.
	Cert *x509.Certificate
	// CertPEM and KeyPEM are the certificate and its private key,
	// PEM-encoded.
	CertPEM, KeyPEM []byte
}

// NewCA makes a self-signed CA with an ECDSA P-256 key, valid for
// CAValidity from now. It signs leaf certificates only (path length 0).
func NewCA(commonName string, now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("signing the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the CA certificate just made: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, CertPEM: encodeCert(der), Key: key, KeyPEM: keyPEM}, nil
}

// ParseCA reads a CA from its PEM-encoded certificate and private key
// (PKCS #8, SEC 1 EC or PKCS #1 RSA), as an operator may bring their own.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("reading the CA certificate: %w", err)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, errors.New("the CA certificate may not sign certificates")
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("reading the CA key: %w", err)
	}
	if !publicKeysEqual(key.Public(), cert.PublicKey) {
		return nil, errors.New("the CA key does not belong to the CA certificate")
	}
	return &CA{Cert: cert, CertPEM: certPEM, Key: key, KeyPEM: keyPEM}, nil
}

// Issue signs a new leaf certificate for l with a new ECDSA P-256 key,
// valid for LeafValidity from now or until the CA expires, whichever comes
// first.
func (ca *CA) Issue(l Leaf, now time.Time) (*KeyPair, error) {
	return ca.IssueFor(l, now, LeafValidity)
}

// IssueFor is Issue with a validity other than LeafValidity, such as the
// short one of a rotation test.
func (ca *CA) IssueFor(l Leaf, now time.Time, validity time.Duration) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the key of %s: %w", l.Secret, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: l.CommonName, Organization: l.Organization},
		DNSNames:              l.DNSNames,
		IPAddresses:           l.IPAddresses,
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           l.Usages,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("signing the certificate of %s: %w", l.Secret, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the certificate of %s just made: %w", l.Secret, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &KeyPair{Cert: cert, CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// Check returns why the PEM-encoded certificate, key and CA bundle of a
// Secret no longer do for l at now, or "" when they still do: the pair
// must match, the certificate must be valid now and for more than
// RenewBefore, be signed by this CA for every usage of l, and hold exactly
// l's common name, organization, names and usages; caPEM must be this CA's
// certificate.
func (ca *CA) Check(l Leaf, certPEM, keyPEM, caPEM []byte, now time.Time) string {
	return ca.CheckFor(l, certPEM, keyPEM, caPEM, now, RenewBefore)
}

// CheckFor is Check with a renewal margin other than RenewBefore.
func (ca *CA) CheckFor(l Leaf, certPEM, keyPEM, caPEM []byte, now time.Time, renewBefore time.Duration) string {
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return "certificate or key missing"
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return "certificate and key unreadable or not a pair"
	}
	cert, err := parseCert(certPEM)
	if err != nil {
		return "certificate unreadable"
	}
	switch {
	case now.Before(cert.NotBefore):
		return "not valid before " + cert.NotBefore.UTC().Format(time.DateTime)
	case !now.Before(cert.NotAfter):
		return "expired " + cert.NotAfter.UTC().Format(time.DateOnly)
	case cert.NotAfter.Sub(now) < renewBefore:
		return "expires " + cert.NotAfter.UTC().Format(time.DateOnly)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return "not signed by the CA"
	}
	switch {
	case cert.Subject.CommonName != l.CommonName:
		return "common name changed"
	case !sameStrings(cert.Subject.Organization, l.Organization):
		return "organization changed"
	case !sameStrings(cert.DNSNames, l.DNSNames) || !sameIPs(cert, l):
		return "names changed"
	case !sameUsages(cert.ExtKeyUsage, l.Usages):
		return "usages changed"
	case !bytes.Equal(caPEM, ca.CertPEM):
		return "CA bundle differs"
	}
	// A CA of an operator's may restrict the usages it signs for.
	for _, usage := range l.Usages {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			return "usages not allowed by the CA"
		}
	}
	return ""
}

func sameStrings(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func sameIPs(cert *x509.Certificate, l Leaf) bool {
	var got, want []string
	for _, ip := range cert.IPAddresses {
		got = append(got, ip.String())
	}
	for _, ip := range l.IPAddresses {
		want = append(want, ip.String())
	}
	return sameStrings(got, want)
}

func sameUsages(a, b []x509.ExtKeyUsage) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// newSerial returns a random 128-bit serial number, so that certificates of
// CAs made by racing runs never share one.
func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	return serial, nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding a private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// parseCert reads the first certificate of a PEM bundle.
func parseCert(data []byte) (*x509.Certificate, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, errors.New("no PEM certificate")
		}
		if block.Type == "CERTIFICATE" {
			return x509.ParseCertificate(block.Bytes)
		}
	}
}

// parseKey reads the first private key of PEM data.
func parseKey(data []byte) (crypto.Signer, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, errors.New("no PEM private key")
		}
		switch block.Type {
		case "PRIVATE KEY":
			key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
			if err != nil {
				return nil, err
			}
			signer, ok := key.(crypto.Signer)
			if !ok {
				return nil, fmt.Errorf("a %T cannot sign", key)
			}
			return signer, nil
		case "EC PRIVATE KEY":
			return x509.ParseECPrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			return x509.ParsePKCS1PrivateKey(block.Bytes)
		}
	}
}

// publicKeysEqual compares public keys of any type the standard library
// knows, all of which have an Equal method.
func publicKeysEqual(a, b crypto.PublicKey) bool {
	k, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(b)
}
