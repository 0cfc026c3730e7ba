package e2e

import (
	"context"
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
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kos-sdn/kos/tools/testenv"
)

// A release tree is published as an operator would: copied to a web server
// that speaks HTTPS, and uploaded to an S3 bucket (the kOps state store).

// servedTree is a folder served over HTTPS.
type servedTree struct {
	// URL is the folder's URL, ending in "/".
	URL string
	// CAFile holds the CA certificate that signed the server's, in PEM, for
	// SSL_CERT_FILE: a client that trusts it trusts this server and no other.
	CAFile string
}

// serveTree serves dir over HTTPS on addr (an address of this host) at a
// free port, with a certificate for addr signed by a CA of its own, until
// owner (t or a test it runs in) ends.
func serveTree(t, owner *testing.T, addr netip.Addr, dir string) servedTree {
	t.Helper()
	caCert, caKey, err := newCA()
	if err != nil {
		t.Fatal(err)
	}
	serving, err := newServingCert(caCert, caKey, addr)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(owner.TempDir(), "release-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caCert.Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(addr.String(), "0"))
	if err != nil {
		t.Fatalf("listening on %s: %v", addr, err)
	}
	srv := &http.Server{
		Handler:           http.FileServer(http.Dir(dir)),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{serving}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	owner.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			owner.Errorf("stopping the release's HTTPS server: %v", err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			owner.Errorf("the release's HTTPS server: %v", err)
		}
	})
	return servedTree{URL: "https://" + ln.Addr().String() + "/", CAFile: caFile}
}

// newCA makes a self-signed CA certificate and its key.
func newCA() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("making the CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kos-e2e release CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("making the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the CA certificate: %w", err)
	}
	return cert, key, nil
}

// newServingCert makes a serving certificate for addr signed by the CA.
func newServingCert(ca *x509.Certificate, caKey *ecdsa.PrivateKey, addr netip.Addr) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("making the serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: addr.String()},
		IPAddresses:  []net.IP{addr.AsSlice()},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("making the serving certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// uploadTree starts a real S3-compatible server (versitygw), creates bucket
// and uploads every file of dir under prefix, and points channels at the
// server as a user would: S3_ENDPOINT and credentials in the environment
// alone. The server runs until owner (t or a test it runs in) ends. It
// returns the s3:// URL of the folder, ending in "/".
func uploadTree(t, owner *testing.T, dir, bucket, prefix string) string {
	t.Helper()
	ctx := t.Context()
	// Not ctx: the server outlives t.
	srv, err := testenv.StartS3(owner.Context(), owner.TempDir())
	if err != nil {
		t.Fatalf("starting the S3 server: %v", err)
	}
	owner.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			owner.Errorf("stopping the S3 server: %v", err)
		}
	})
	if err := srv.CreateBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		return srv.Put(ctx, bucket, prefix+"/"+filepath.ToSlash(rel), data)
	})
	if err != nil {
		t.Fatalf("uploading %s to s3://%s/%s: %v", dir, bucket, prefix, err)
	}
	owner.Setenv("S3_ENDPOINT", srv.Endpoint)
	owner.Setenv("AWS_REGION", srv.Region)
	owner.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	owner.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	owner.Setenv("AWS_PROFILE", "")
	owner.Setenv("AWS_CONFIG_FILE", filepath.Join(owner.TempDir(), "none"))
	owner.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(owner.TempDir(), "none"))
	owner.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return "s3://" + bucket + "/" + prefix + "/"
}
