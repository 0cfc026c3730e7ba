package pki

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// CAConfigMap is the ConfigMap in which the signer publishes the CA's
// certificate, under CACertKey (never its key), for the clients that verify
// KOS servers from other namespaces, such as kos-monitoring's Prometheus.
const CAConfigMap = "kos-ca"

// PasswordKey is the key of the password in a generated Secret.
const PasswordKey = "password"

// passwordBytes is how many random bytes a generated password holds (256
// bits), base64url-encoded without padding.
const passwordBytes = 32

// Skipped: the object's namespace does not exist (yet), or kos-pki may not
// read or create the object there (the namespace's owner has not granted
// PublishRules), so nothing was written; the signer tries again within
// PublishRetry. A consumer opts in by granting the rules.
const Skipped Action = "skipped"

// PublishRetry is how soon the signer tries again to publish into a
// namespace that did not exist, such as kos-monitoring before its addon is
// installed: sooner than its usual interval, so a new consumer waits
// seconds, not minutes.
const PublishRetry = 30 * time.Second

// SecretRef names a Secret.
type SecretRef struct {
	Namespace, Name string
}

// String returns namespace/name.
func (r SecretRef) String() string { return r.Namespace + "/" + r.Name }

// ParseSecretRef parses namespace/name.
func ParseSecretRef(s string) (SecretRef, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return SecretRef{}, fmt.Errorf("%q is not namespace/name", s)
	}
	return SecretRef{Namespace: ns, Name: name}, nil
}

// EnsureCAConfigMap makes the ConfigMap CAConfigMap of namespace hold caPEM
// under CACertKey: it creates it, updates one it made that holds another
// certificate (the CA was replaced), and keeps one it did not make. A
// namespace that does not exist, or is being deleted, is Skipped, not an
// error: publishing serves namespaces that may come and go.
func EnsureCAConfigMap(ctx context.Context, client kubernetes.Interface, namespace string, caPEM []byte) (Result, error) {
	configMaps := client.CoreV1().ConfigMaps(namespace)
	ref := klog.KRef(namespace, CAConfigMap)
	r := Result{Object: "configmap " + ref.String(), Action: Kept}
	cm, err := configMaps.Get(ctx, CAConfigMap, metav1.GetOptions{})
	if apierrors.IsForbidden(err) {
		return skip(r, namespace), nil
	}
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: CAConfigMap, Labels: map[string]string{ManagedByLabel: FieldManager}},
			Data:       map[string]string{CACertKey: string(caPEM)},
		}
		_, err = configMaps.Create(ctx, cm, metav1.CreateOptions{FieldManager: FieldManager})
		return created(r, err, "configmaps", namespace)
	}
	if err != nil {
		return r, publishError(err, "reading "+r.Object, "get", "configmaps", namespace)
	}
	if cm.Labels[ManagedByLabel] != FieldManager {
		r.Reason = "not made by kos-pki, not checked"
		return r, nil
	}
	if cm.Data[CACertKey] == string(caPEM) {
		return r, nil
	}
	// The update names the resourceVersion read: a conflict fails this
	// pass, and the next one reads again.
	updated := cm.DeepCopy()
	if updated.Data == nil {
		updated.Data = map[string]string{}
	}
	updated.Data[CACertKey] = string(caPEM)
	if _, err := configMaps.Update(ctx, updated, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
		return r, publishError(err, "updating "+r.Object, "update", "configmaps", namespace)
	}
	r.Action, r.Reason = Renewed, "the CA changed"
	klog.FromContext(ctx).V(2).Info("Published the new CA", "configMap", ref)
	return r, nil
}

// EnsurePasswordSecret makes the Secret ref hold a random password under
// PasswordKey, such as the Grafana admin's of kos-monitoring, so that no
// manifest ever carries one. An existing Secret is kept as it is, whoever
// made it: delete it to have a new password made. A namespace that does not
// exist, or is being deleted, is Skipped.
func EnsurePasswordSecret(ctx context.Context, client kubernetes.Interface, ref SecretRef) (Result, error) {
	secrets := client.CoreV1().Secrets(ref.Namespace)
	r := Result{Object: "secret " + ref.String(), Action: Kept}
	s, err := secrets.Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsForbidden(err) {
		return skip(r, ref.Namespace), nil
	}
	if err == nil {
		r.Secret = s
		return r, nil
	}
	if !apierrors.IsNotFound(err) {
		return r, publishError(err, "reading "+r.Object, "get", "secrets", ref.Namespace)
	}
	password, err := newPassword()
	if err != nil {
		return r, err
	}
	s = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name, Labels: map[string]string{ManagedByLabel: FieldManager}},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{PasswordKey: password},
	}
	s, err = secrets.Create(ctx, s, metav1.CreateOptions{FieldManager: FieldManager})
	if apierrors.IsAlreadyExists(err) {
		// Made since the read, by another run or by hand: keep it.
		r.Reason = "made by another"
		return r, nil
	}
	r, err = created(r, err, "secrets", ref.Namespace)
	if r.Action == Created {
		r.Secret = s
	}
	return r, err
}

// skip returns r skipped because kos-pki may not publish into namespace.
func skip(r Result, namespace string) Result {
	r.Action, r.Reason = Skipped, "not allowed in namespace "+namespace+": grant pki.PublishRules there to publish"
	return r
}

// created turns the outcome of a create into a result.
func created(r Result, err error, resource, namespace string) (Result, error) {
	switch {
	case err == nil:
		r.Action = Created
	case namespaceGone(err):
		r.Action, r.Reason = Skipped, "namespace "+namespace+" does not exist"
	case apierrors.IsForbidden(err):
		return skip(r, namespace), nil
	case apierrors.IsAlreadyExists(err):
		// Made since the read: the next pass checks it.
	default:
		return r, publishError(err, "creating "+r.Object, "create", resource, namespace)
	}
	return r, nil
}

// namespaceGone reports whether a create failed because its namespace does
// not exist or is being deleted.
func namespaceGone(err error) bool {
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return true
	}
	status, ok := err.(apierrors.APIStatus)
	return ok && apierrors.IsNotFound(err) && status.Status().Details != nil && status.Status().Details.Kind == "namespaces"
}

// newPassword returns passwordBytes random bytes, base64url-encoded.
func newPassword() ([]byte, error) {
	b := make([]byte, passwordBytes)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("reading random bytes for a password: %w", err)
	}
	out := make([]byte, base64.RawURLEncoding.EncodedLen(len(b)))
	base64.RawURLEncoding.Encode(out, b)
	return out, nil
}

// publishError wraps an error of a request on the published objects with
// what was being done and, when RBAC denied it, what to grant.
func publishError(err error, doing, verb, resource, namespace string) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("%s: grant %s on %s in namespace %s to this identity (see pki.PublishRules): %w", doing, verb, resource, namespace, err)
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// publish publishes the CA into every namespace of c.CAConfigMaps and
// makes the password Secrets of c.Passwords. It returns what it did to each,
// and whether something was skipped.
func (r *EnsureRun) publish(ctx context.Context, ca *CA) (results []Result, skipped bool, err error) {
	client := r.ensurer.Client
	for _, ns := range r.cfg.CAConfigMaps {
		res, err := EnsureCAConfigMap(ctx, client, ns, ca.CertPEM)
		if err != nil {
			return results, skipped, err
		}
		results = append(results, res)
		skipped = skipped || res.Action == Skipped
	}
	for _, ref := range r.cfg.Passwords {
		res, err := EnsurePasswordSecret(ctx, client, ref)
		if err != nil {
			return results, skipped, err
		}
		results = append(results, res)
		skipped = skipped || res.Action == Skipped
	}
	return results, skipped, nil
}
