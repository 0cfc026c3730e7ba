package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newTestCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("test-ca", testNow)
	if err != nil {
		t.Fatalf("NewCA: %v", err)
	}
	return ca
}

func issue(t *testing.T, ca *CA, l Leaf, now time.Time) *KeyPair {
	t.Helper()
	kp, err := ca.Issue(l, now)
	if err != nil {
		t.Fatalf("issuing %s: %v", l.Secret, err)
	}
	return kp
}

func TestNewCA(t *testing.T) {
	ca := newTestCA(t)
	got := struct {
		IsCA, MaxPathLenZero bool
		CommonName           string
		Validity             time.Duration
		Curve                string
	}{ca.Cert.IsCA, ca.Cert.MaxPathLenZero, ca.Cert.Subject.CommonName, ca.Cert.NotAfter.Sub(testNow), curveName(ca.Cert)}
	want := got
	want.IsCA, want.MaxPathLenZero, want.CommonName, want.Validity, want.Curve = true, true, "test-ca", CAValidity, "P-256"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CA (-want +got):\n%s", diff)
	}
	again, err := ParseCA(ca.CertPEM, ca.KeyPEM)
	if err != nil {
		t.Fatalf("ParseCA of a new CA: %v", err)
	}
	if !again.Cert.Equal(ca.Cert) {
		t.Errorf("ParseCA read another certificate")
	}
}

func curveName(c *x509.Certificate) string {
	if k, ok := c.PublicKey.(*ecdsa.PublicKey); ok {
		return k.Curve.Params().Name
	}
	return ""
}

// TestIssueVerifies checks that every leaf verifies against its CA for each
// of its names and usages, and for no usage it lacks.
func TestIssueVerifies(t *testing.T) {
	ca := newTestCA(t)
	other := newTestCA(t)
	leaves, err := SetAll.Leaves("example-com")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leaves {
		t.Run(l.Secret, func(t *testing.T) {
			kp := issue(t, ca, l, testNow)
			if got := kp.Cert.NotAfter.Sub(testNow); got != LeafValidity {
				t.Errorf("validity %s, want %s", got, LeafValidity)
			}
			if got := curveName(kp.Cert); got != "P-256" {
				t.Errorf("key curve %q, want P-256", got)
			}
			roots := x509.NewCertPool()
			roots.AddCert(ca.Cert)
			otherRoots := x509.NewCertPool()
			otherRoots.AddCert(other.Cert)
			// Wildcards stand for the members of the StatefulSet.
			var names []string
			for _, n := range l.DNSNames {
				names = append(names, strings.Replace(n, "*", "kos-etcd-0", 1))
			}
			for _, ip := range l.IPAddresses {
				names = append(names, ip.String())
			}
			if len(names) == 0 {
				names = []string{""} // a client certificate names no host
			}
			for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
				granted := false
				for _, u := range l.Usages {
					granted = granted || u == usage
				}
				for _, name := range names {
					_, err := kp.Cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, CurrentTime: testNow, KeyUsages: []x509.ExtKeyUsage{usage}})
					if granted && err != nil {
						t.Errorf("verifying for %q, usage %d: %v", name, usage, err)
					}
					if !granted && err == nil {
						t.Errorf("verified for %q with usage %d it does not have", name, usage)
					}
					if _, err := kp.Cert.Verify(x509.VerifyOptions{Roots: otherRoots, DNSName: name, CurrentTime: testNow, KeyUsages: []x509.ExtKeyUsage{usage}}); err == nil {
						t.Errorf("verified for %q against another CA", name)
					}
				}
			}
			if _, err := kp.Cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "elsewhere.example.org", CurrentTime: testNow, KeyUsages: l.Usages}); len(l.DNSNames) > 0 && err == nil {
				t.Errorf("verified for a name it does not hold")
			}
		})
	}
}

func TestLeavesNames(t *testing.T) {
	ip := []net.IP{net.IPv4(127, 0, 0, 1)}
	tests := []struct {
		leaf      Leaf
		wantDNS   []string
		wantIP    []net.IP
		wantCN    string
		wantUsage []x509.ExtKeyUsage
	}{
		{EtcdServer("ns1"), []string{"kos-etcd", "kos-etcd.ns1", "kos-etcd.ns1.svc", "*.kos-etcd", "*.kos-etcd.ns1", "*.kos-etcd.ns1.svc", "*.kos-etcd.ns1.svc.cluster.local", "localhost"}, ip, "kos-etcd",
			[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}},
		{EtcdPeer("ns1"), []string{"kos-etcd", "kos-etcd.ns1", "kos-etcd.ns1.svc", "*.kos-etcd", "*.kos-etcd.ns1", "*.kos-etcd.ns1.svc", "*.kos-etcd.ns1.svc.cluster.local", "localhost"}, ip, "kos-etcd",
			[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}},
		{EtcdClient(), nil, nil, "kos-apiserver", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		{APIServerServing("ns1"), []string{"kos-apiserver", "kos-apiserver.ns1", "kos-apiserver.ns1.svc", "kos-apiserver.ns1.svc.cluster.local", "localhost"}, ip, "kos-apiserver",
			[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
	}
	for _, tt := range tests {
		t.Run(tt.leaf.Secret, func(t *testing.T) {
			if diff := cmp.Diff(tt.wantDNS, tt.leaf.DNSNames); diff != "" {
				t.Errorf("DNS names (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantIP, tt.leaf.IPAddresses); diff != "" {
				t.Errorf("IP addresses (-want +got):\n%s", diff)
			}
			if tt.leaf.CommonName != tt.wantCN {
				t.Errorf("common name %q, want %q", tt.leaf.CommonName, tt.wantCN)
			}
			if diff := cmp.Diff(tt.wantUsage, tt.leaf.Usages); diff != "" {
				t.Errorf("usages (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSetLeaves(t *testing.T) {
	tests := []struct {
		set     Set
		want    []string
		wantErr bool
	}{
		{SetEtcd, []string{EtcdServerSecret, EtcdPeerSecret}, false},
		{SetAPIServer, []string{EtcdClientSecret, APIServerServingSecret}, false},
		{SetAll, []string{EtcdServerSecret, EtcdPeerSecret, EtcdClientSecret, APIServerServingSecret}, false},
		{"kube", nil, true},
	}
	for _, tt := range tests {
		t.Run(string(tt.set), func(t *testing.T) {
			leaves, err := tt.set.Leaves("ns")
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want one: %v", err, tt.wantErr)
			}
			var got []string
			for _, l := range leaves {
				got = append(got, l.Secret)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("secrets (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	ca := newTestCA(t)
	other := newTestCA(t)
	l := APIServerServing("example-com")
	kp := issue(t, ca, l, testNow)
	otherKP := issue(t, other, l, testNow)
	ownKey := issue(t, ca, l, testNow).KeyPEM
	moved := APIServerServing("elsewhere")
	renamed := l
	renamed.CommonName = "someone"
	bothUsages := l
	bothUsages.Usages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	bothKP := issue(t, ca, bothUsages, testNow)

	tests := []struct {
		name                string
		leaf                Leaf
		cert, key, caBundle []byte
		now                 time.Time
		want                string
	}{
		{name: "fresh", leaf: l, cert: kp.CertPEM, key: kp.KeyPEM, caBundle: ca.CertPEM, now: testNow, want: ""},
		{name: "months later", leaf: l, cert: kp.CertPEM, key: kp.KeyPEM, caBundle: ca.CertPEM, now: testNow.Add(300 * 24 * time.Hour), want: ""},
		{name: "within 30 days of expiry", leaf: l, cert: kp.CertPEM, key: kp.KeyPEM, caBundle: ca.CertPEM, now: testNow.Add(LeafValidity - RenewBefore + time.Minute), want: "expires 2027-03-01"},
		{name: "expired", leaf: l, cert: kp.CertPEM, key: kp.KeyPEM, caBundle: ca.CertPEM, now: testNow.Add(LeafValidity + time.Hour), want: "expired 2027-03-01"},
		{name: "not valid yet", leaf: l, cert: kp.CertPEM, key: kp.KeyPEM, caBundle: ca.CertPEM, now: testNow.Add(-2 * time.Hour), want: "not valid before 2026-03-01 11:00:00"},
		{name: "names changed", leaf: moved, cert: kp.CertPEM, key: kp.KeyPEM, caBundle: ca.CertPEM, now: testNow, want: "names changed"},
		{name: "common name changed", leaf: renamed, cert: kp.CertPEM, key: kp.KeyPEM, caBundle: ca.CertPEM, now: testNow, want: "common name changed"},
		{name: "usage added", leaf: bothUsages, cert: kp.CertPEM, key: kp.KeyPEM, caBundle: ca.CertPEM, now: testNow, want: "usages changed"},
		{name: "usage removed", leaf: l, cert: bothKP.CertPEM, key: bothKP.KeyPEM, caBundle: ca.CertPEM, now: testNow, want: "usages changed"},
		{name: "signed by another CA", leaf: l, cert: otherKP.CertPEM, key: otherKP.KeyPEM, caBundle: ca.CertPEM, now: testNow, want: "not signed by the CA"},
		{name: "key of another certificate", leaf: l, cert: kp.CertPEM, key: ownKey, caBundle: ca.CertPEM, now: testNow, want: "certificate and key unreadable or not a pair"},
		{name: "CA bundle of another CA", leaf: l, cert: kp.CertPEM, key: kp.KeyPEM, caBundle: other.CertPEM, now: testNow, want: "CA bundle differs"},
		{name: "no certificate", leaf: l, key: kp.KeyPEM, caBundle: ca.CertPEM, now: testNow, want: "certificate or key missing"},
		{name: "garbage", leaf: l, cert: []byte("garbage"), key: kp.KeyPEM, caBundle: ca.CertPEM, now: testNow, want: "certificate and key unreadable or not a pair"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ca.Check(tt.leaf, tt.cert, tt.key, tt.caBundle, tt.now)
			if got != tt.want {
				t.Errorf("Check = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestCheckRestrictedCA checks a CA of an operator's that signs for server
// authentication only: a certificate it signed for client authentication
// too is not good.
func TestCheckRestrictedCA(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "servers only"},
		NotBefore:             testNow.Add(-time.Hour),
		NotAfter:              testNow.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := ParseCA(encodeCert(der), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		leaf Leaf
		want string
	}{
		{APIServerServing("ns"), ""},
		{EtcdServer("ns"), "usages not allowed by the CA"},
	}
	for _, tt := range tests {
		t.Run(tt.leaf.Secret, func(t *testing.T) {
			kp := issue(t, ca, tt.leaf, testNow)
			got := ca.Check(tt.leaf, kp.CertPEM, kp.KeyPEM, ca.CertPEM, testNow)
			if got != tt.want {
				t.Errorf("Check = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestIssueEndsWithCA(t *testing.T) {
	ca := newTestCA(t)
	late := testNow.Add(CAValidity - 100*24*time.Hour)
	kp := issue(t, ca, EtcdClient(), late)
	if !kp.Cert.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("leaf issued 100 days before the CA expires ends %s, want the CA's end %s", kp.Cert.NotAfter, ca.Cert.NotAfter)
	}
}

func TestParseCA(t *testing.T) {
	ca := newTestCA(t)
	leaf := issue(t, ca, EtcdClient(), testNow)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sec1, err := x509.MarshalECPrivateKey(ca.Key.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	sec1PEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})
	otherKeyPEM, err := encodeKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		cert, key []byte
		wantErr   string
	}{
		{name: "PKCS #8", cert: ca.CertPEM, key: ca.KeyPEM},
		{name: "SEC 1", cert: ca.CertPEM, key: sec1PEM},
		{name: "a leaf", cert: leaf.CertPEM, key: leaf.KeyPEM, wantErr: "the CA certificate may not sign certificates"},
		{name: "another key", cert: ca.CertPEM, key: otherKeyPEM, wantErr: "the CA key does not belong to the CA certificate"},
		{name: "no key", cert: ca.CertPEM, wantErr: "reading the CA key: no PEM private key"},
		{name: "no certificate", key: ca.KeyPEM, wantErr: "reading the CA certificate: no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseCA(tt.cert, tt.key)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.wantErr {
				t.Errorf("error %q, want %q", got, tt.wantErr)
			}
		})
	}
}
