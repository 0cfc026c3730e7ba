package channels

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
)

// PKINamespace holds the CA Secret and the Issuer of addons that need PKI,
// as kOps keeps them.
const PKINamespace = "kube-system"

// caValidity is how long the CA of an addon is valid.
const caValidity = 10 * 365 * 24 * time.Hour

// issuerKind is cert-manager's namespaced Issuer.
var issuerKind = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Issuer"}

// PKISecretName is the name of the Secret holding the CA of an addon that
// needs PKI; the Issuer has the addon's name.
func PKISecretName(addon string) string { return addon + "-ca" }

// issuerMapping maps cert-manager's Issuer, or says that cert-manager must
// be installed first. With await (cert-manager's CRDs are applied in the
// same run) it waits for discovery to serve the kind.
func (c *Client) issuerMapping(ctx context.Context, addon string, await bool) (*meta.RESTMapping, error) {
	m, err := c.mapping(ctx, issuerKind, await)
	if meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("the addon needs PKI (needsPKI: true), which takes cert-manager's %s, and the server does not serve it: install cert-manager first", issuerKind.GroupKind())
	}
	if err != nil {
		return nil, fmt.Errorf("finding %s for addon %q: %w", issuerKind.GroupKind(), addon, err)
	}
	return m, nil
}

// installPKI gives an addon that needs PKI what kOps's channels gives it,
// before its manifest is applied: a CA (a self-signed certificate with the
// addon's name as common name) in the TLS Secret kube-system/NAME-ca, and a
// cert-manager Issuer kube-system/NAME that signs with it. Both are created
// only when missing: a CA is never replaced, since what it signed would
// stop being trusted. Neither carries the addon's labels, so pruning never
// deletes them. inRun says that the run applies cert-manager's Issuer CRD:
// then the kind may take a moment to be served, and the Issuer's create is
// retried while cert-manager's webhook, if it has one, cannot answer yet.
func (c *Client) installPKI(ctx context.Context, a *Addon, inRun bool) error {
	mapping, err := c.issuerMapping(ctx, a.Name, inRun)
	if err != nil {
		return err
	}
	secrets := c.Kube.CoreV1().Secrets(PKINamespace)
	name := PKISecretName(a.Name)
	_, err = secrets.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		certPEM, keyPEM, err := newCA(a.Name)
		if err != nil {
			return err
		}
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: PKINamespace, Labels: map[string]string{"app.kubernetes.io/managed-by": FieldManager}},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
		}
		if _, err := secrets.Create(ctx, secret, metav1.CreateOptions{FieldManager: FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the CA Secret %s/%s: %w", PKINamespace, name, err)
		}
	case err != nil:
		return fmt.Errorf("reading the CA Secret %s/%s: %w", PKINamespace, name, err)
	}

	issuer := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": issuerKind.GroupVersion().String(),
		"kind":       issuerKind.Kind,
		"metadata": map[string]any{
			"name": a.Name, "namespace": PKINamespace,
			"labels": map[string]any{"app.kubernetes.io/managed-by": FieldManager},
		},
		"spec": map[string]any{"ca": map[string]any{"secretName": name}},
	}}
	create := func(ctx context.Context) error {
		_, err := c.Dynamic.Resource(mapping.Resource).Namespace(PKINamespace).Create(ctx, issuer, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	err = create(ctx)
	if err != nil && inRun && (apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err)) {
		err = wait.PollUntilContextTimeout(ctx, pollInterval, crdTimeout, false, func(ctx context.Context) (bool, error) {
			err := create(ctx)
			if apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) {
				return false, nil
			}
			return err == nil, err
		})
	}
	if err != nil {
		return fmt.Errorf("creating the Issuer %s/%s: %w", PKINamespace, a.Name, err)
	}
	return nil
}

// newCA makes a self-signed CA certificate for name and its RSA key, in PEM.
func newCA(name string) (certPEM, keyPEM []byte, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the CA key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("generating a serial number: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		DNSNames:              []string{name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the CA certificate: %w", err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	return certPEM, keyPEM, nil
}
