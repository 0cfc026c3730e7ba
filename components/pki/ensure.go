package pki

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// FieldManager is the field manager of every write of the package, so that
// an APIService's CA bundle stays owned by it when other appliers, such as
// channels, apply the rest of the object.
const FieldManager = "kos-pki"

// ManagedByLabel marks the Secrets the package made, with the value
// FieldManager. It renews only those: a leaf Secret an operator made stays as
// it is.
const ManagedByLabel = "app.kubernetes.io/managed-by"

// caCommonName is the subject of the CAs the package makes.
const caCommonName = "kos-ca"

// maxAttempts bounds how often one Secret is read again after losing a race
// to another run.
const maxAttempts = 5

// Action says what ensuring did to an object.
type Action string

// The actions.
const (
	// Created: the object did not exist and now does.
	Created Action = "created"
	// Kept: the object was left as it was.
	Kept Action = "kept"
	// Renewed: a leaf certificate was re-issued into its existing Secret.
	Renewed Action = "renewed"
	// Patched: an APIService's CA bundle was set.
	Patched Action = "patched"
)

// Result says what ensuring did to one object.
type Result struct {
	// Object names it, such as "secret example-com/kos-ca".
	Object string
	// Action is what was done.
	Action Action
	// Reason says why a Secret was renewed, or kept without a check.
	Reason string
	// Secret is the Secret as it now is; nil for an APIService.
	Secret *corev1.Secret
}

// String is the one line kos-pki prints for the result.
func (r Result) String() string {
	if r.Reason == "" {
		return r.Object + " " + string(r.Action)
	}
	return r.Object + " " + string(r.Action) + " (" + r.Reason + ")"
}

// Ensurer makes the Secrets of the KOS PKI exist in one namespace, keeps the
// ones that do, and renews the leaf certificates that need it.
type Ensurer struct {
	// Client reads and writes the Secrets.
	Client kubernetes.Interface
	// Namespace holds the Secrets.
	Namespace string
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// LeafValidity is how long a leaf it issues is valid; 0 means
	// LeafValidity.
	LeafValidity time.Duration
	// RenewBefore is how long before it expires a leaf is re-issued; 0
	// means RenewBefore.
	RenewBefore time.Duration
}

func (e *Ensurer) validity() time.Duration {
	if e.LeafValidity <= 0 {
		return LeafValidity
	}
	return e.LeafValidity
}

func (e *Ensurer) renewBefore() time.Duration {
	if e.RenewBefore <= 0 {
		return RenewBefore
	}
	return e.RenewBefore
}

func (e *Ensurer) now() time.Time {
	if e.Now == nil {
		return time.Now()
	}
	return e.Now()
}

// Ensure ensures the CA and then every leaf, in order, and returns what it
// did to each. It stops at the first error, returning the results so far.
func (e *Ensurer) Ensure(ctx context.Context, leaves []Leaf) (*CA, []Result, error) {
	ca, r, err := e.EnsureCA(ctx)
	if err != nil {
		return nil, nil, err
	}
	results := []Result{r}
	for _, l := range leaves {
		r, err := e.EnsureLeaf(ctx, ca, l)
		if err != nil {
			return ca, results, err
		}
		results = append(results, r)
	}
	return ca, results, nil
}

// EnsureCA returns the CA of CASecret, making it first when the Secret does
// not exist. An existing CA is never replaced; one that cannot be used is an
// error that says how to start over.
func (e *Ensurer) EnsureCA(ctx context.Context) (*CA, Result, error) {
	logger := klog.FromContext(ctx)
	secrets := e.Client.CoreV1().Secrets(e.Namespace)
	ref := klog.KRef(e.Namespace, CASecret)
	r := Result{Object: "secret " + ref.String(), Action: Kept}

	s, err := secrets.Get(ctx, CASecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		var ca *CA
		ca, err = NewCA(caCommonName, e.now())
		if err != nil {
			return nil, r, err
		}
		s, err = secrets.Create(ctx, e.caSecret(ca), metav1.CreateOptions{FieldManager: FieldManager})
		switch {
		case err == nil:
			r.Action = Created
		case apierrors.IsAlreadyExists(err):
			// Another run made it first; everything is signed by the
			// winner's CA, never by this one.
			logger.V(2).Info("Lost the race to create the CA", "secret", ref)
			s, err = secrets.Get(ctx, CASecret, metav1.GetOptions{})
		default:
			return nil, r, apiError(err, "creating secret "+ref.String(), "create", e.Namespace)
		}
	}
	if err != nil {
		return nil, r, apiError(err, "reading secret "+ref.String(), "get", e.Namespace)
	}
	ca, err := ParseCA(s.Data[CACertKey], s.Data[CAKeyKey])
	if err != nil {
		return nil, r, fmt.Errorf("secret %s holds no usable CA (delete it to make a new one, which re-issues every certificate): %w", ref, err)
	}
	if left := ca.Cert.NotAfter.Sub(e.now()); left < e.validity() {
		logger.Info("The KOS CA expires soon; leaf certificates end with it. Delete the CA Secret to make a new one", "secret", ref, "notAfter", ca.Cert.NotAfter)
	}
	r.Secret = s
	logger.V(2).Info("Ensured the CA", "secret", ref, "action", r.Action)
	return ca, r, nil
}

// EnsureLeaf makes l's Secret exist with a certificate signed by ca. It
// keeps an existing Secret whose certificate still does (see CA.Check), or
// that the package did not make, and re-issues the certificate of any other.
// Losing a race to another run, it reads the Secret again and judges the
// winner's certificate the same way. A CA that cannot sign a certificate
// that would pass the check is an error.
func (e *Ensurer) EnsureLeaf(ctx context.Context, ca *CA, l Leaf) (Result, error) {
	logger := klog.FromContext(ctx)
	secrets := e.Client.CoreV1().Secrets(e.Namespace)
	ref := klog.KRef(e.Namespace, l.Secret)
	r := Result{Object: "secret " + ref.String()}

	for range maxAttempts {
		s, err := secrets.Get(ctx, l.Secret, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			kp, err := e.issue(ca, l)
			if err != nil {
				return r, err
			}
			s, err = secrets.Create(ctx, e.leafSecret(l, ca, kp), metav1.CreateOptions{FieldManager: FieldManager})
			if apierrors.IsAlreadyExists(err) {
				logger.V(2).Info("Lost the race to create a secret; reading the winner's", "secret", ref)
				continue
			}
			if err != nil {
				return r, apiError(err, "creating secret "+ref.String(), "create", e.Namespace)
			}
			r.Action, r.Secret = Created, s
			logger.V(2).Info("Ensured a certificate", "secret", ref, "action", r.Action)
			return r, nil
		}
		if err != nil {
			return r, apiError(err, "reading secret "+ref.String(), "get", e.Namespace)
		}
		if s.Labels[ManagedByLabel] != FieldManager {
			r.Action, r.Reason, r.Secret = Kept, "not made by kos-pki, not checked", s
			return r, nil
		}
		reason := ca.CheckFor(l, s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey], s.Data[CACertKey], e.now(), e.renewBefore())
		if reason == "" {
			r.Action, r.Secret = Kept, s
			logger.V(2).Info("Ensured a certificate", "secret", ref, "action", r.Action)
			return r, nil
		}
		kp, err := e.issue(ca, l)
		if err != nil {
			return r, err
		}
		// The update names the resourceVersion read, so of two runs
		// renewing at once one fails and judges the other's certificate.
		renewed := s.DeepCopy()
		if renewed.Data == nil {
			renewed.Data = map[string][]byte{}
		}
		renewed.Data[corev1.TLSCertKey] = kp.CertPEM
		renewed.Data[corev1.TLSPrivateKeyKey] = kp.KeyPEM
		renewed.Data[CACertKey] = ca.CertPEM
		s, err = secrets.Update(ctx, renewed, metav1.UpdateOptions{FieldManager: FieldManager})
		if apierrors.IsConflict(err) {
			logger.V(2).Info("Lost the race to renew a secret; reading the winner's", "secret", ref)
			continue
		}
		if err != nil {
			return r, apiError(err, "renewing secret "+ref.String(), "update", e.Namespace)
		}
		r.Action, r.Reason, r.Secret = Renewed, reason, s
		logger.V(2).Info("Renewed a certificate", "secret", ref, "reason", reason, "notAfter", kp.Cert.NotAfter)
		return r, nil
	}
	return r, fmt.Errorf("secret %s changed under every one of %d attempts to ensure it", ref, maxAttempts)
}

// issue signs a certificate for l and checks it as a later run would, so
// that a CA that cannot sign a good one (it expires within RenewBefore, or
// an operator's CA restricts the usages) is an error rather than a renewal
// on every run.
func (e *Ensurer) issue(ca *CA, l Leaf) (*KeyPair, error) {
	now := e.now()
	kp, err := ca.IssueFor(l, now, e.validity())
	if err != nil {
		return nil, err
	}
	if reason := ca.CheckFor(l, kp.CertPEM, kp.KeyPEM, ca.CertPEM, now, e.renewBefore()); reason != "" {
		return nil, fmt.Errorf("the CA of secret %s cannot sign a lasting certificate for %s (%s): replace the CA, or delete its Secret to make a new one", klog.KRef(e.Namespace, CASecret), l.Secret, reason)
	}
	return kp, nil
}

func (e *Ensurer) caSecret(ca *CA) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: e.Namespace,
			Name:      CASecret,
			Labels:    map[string]string{ManagedByLabel: FieldManager},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{CACertKey: ca.CertPEM, CAKeyKey: ca.KeyPEM},
	}
}

func (e *Ensurer) leafSecret(l Leaf, ca *CA, kp *KeyPair) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: e.Namespace,
			Name:      l.Secret,
			Labels:    map[string]string{ManagedByLabel: FieldManager},
		},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       kp.CertPEM,
			corev1.TLSPrivateKeyKey: kp.KeyPEM,
			CACertKey:               ca.CertPEM,
		},
	}
}

// apiError wraps an error of a request on secrets with what was being done
// and, when RBAC denied it or the namespace is missing, what to do.
func apiError(err error, doing, verb, namespace string) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s: grant %s on secrets in namespace %s to this identity: %w", doing, verb, namespace, err)
	case verb == "create" && apierrors.IsNotFound(err):
		return fmt.Errorf("%s: create namespace %s first: %w", doing, namespace, err)
	}
	return fmt.Errorf("%s: %w", doing, err)
}
