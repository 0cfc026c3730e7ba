package pki

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	apiregistrationclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/typed/apiregistration/v1"
)

// requestTimeout bounds each request, so that an init container facing an
// unreachable API server fails and is retried by the kubelet rather than
// hanging.
const requestTimeout = 30 * time.Second

// EnsureConfig is the configuration of an ensure run. Build it with
// EnsureOptions, or directly, and Complete it before New.
type EnsureConfig struct {
	// REST reaches the cluster.
	REST *rest.Config
	// Namespace holds the Secrets.
	Namespace string
	// Leaves are the leaf certificates to ensure, besides the CA.
	Leaves []Leaf
	// APIService, when set, is the APIService whose CA bundle to set.
	APIService string
	// OutDir, when set, receives the data of each ensured Secret.
	OutDir string
	// CAConfigMaps are the namespaces to publish the CA's certificate into
	// (EnsureCAConfigMap).
	CAConfigMaps []string
	// Passwords are the Secrets to make with a random password
	// (EnsurePasswordSecret).
	Passwords []SecretRef
	// LeafValidity and RenewBefore are the leaves' lifetime and renewal
	// margin; 0 means the package's LeafValidity and RenewBefore.
	LeafValidity, RenewBefore time.Duration

	// set names the set of Leaves, for the log.
	set string
}

// CompletedEnsureConfig is an EnsureConfig whose defaults are filled in;
// only Complete makes one, so New never runs on a half-set configuration.
type CompletedEnsureConfig struct {
	*completedEnsureConfig
}

type completedEnsureConfig struct {
	EnsureConfig
}

// Complete fills in the defaults of c: each request times out after
// requestTimeout, under the user agent kos-pki.
func (c EnsureConfig) Complete() CompletedEnsureConfig {
	c.REST = rest.CopyConfig(c.REST)
	c.REST.Timeout = requestTimeout
	c.REST.UserAgent = "kos-pki"
	return CompletedEnsureConfig{&completedEnsureConfig{EnsureConfig: c}}
}

// EnsureRun is an ensure run ready to go: its clients and what to ensure.
type EnsureRun struct {
	cfg         completedEnsureConfig
	ensurer     *Ensurer
	apiServices apiregistrationclient.APIServiceInterface
}

// New builds the run's clients. It changes nothing in the cluster.
func (c CompletedEnsureConfig) New() (*EnsureRun, error) {
	if c.REST == nil {
		return nil, errors.New("no client configuration")
	}
	kube, err := kubernetes.NewForConfig(c.REST)
	if err != nil {
		return nil, fmt.Errorf("creating a client: %w", err)
	}
	r := &EnsureRun{cfg: *c.completedEnsureConfig, ensurer: &Ensurer{Client: kube, Namespace: c.Namespace, LeafValidity: c.LeafValidity, RenewBefore: c.RenewBefore}}
	if c.APIService != "" {
		agg, err := aggregator.NewForConfig(c.REST)
		if err != nil {
			return nil, fmt.Errorf("creating an aggregator client: %w", err)
		}
		r.apiServices = agg.ApiregistrationV1().APIServices()
	}
	return r, nil
}

// Run ensures the CA and the leaf Secrets, writes their files when OutDir
// is set and the APIService's CA bundle when APIService is, publishes the
// CA and makes the password Secrets, and prints one line per object to out.
// It starts no goroutine.
func (r *EnsureRun) Run(ctx context.Context, out io.Writer) error {
	began := time.Now()
	ca, results, err := r.ensurer.Ensure(ctx, r.cfg.Leaves)
	for _, res := range results {
		fmt.Fprintln(out, res)
	}
	if err != nil {
		return err
	}
	if r.cfg.OutDir != "" {
		for _, res := range results {
			if err := WriteFiles(r.cfg.OutDir, res.Secret); err != nil {
				return err
			}
		}
	}
	if r.apiServices != nil {
		res, err := EnsureCABundle(ctx, r.apiServices, r.cfg.APIService, ca.CertPEM)
		if err != nil {
			return err
		}
		fmt.Fprintln(out, res)
	}
	published, _, err := r.publish(ctx, ca)
	for _, res := range published {
		fmt.Fprintln(out, res)
	}
	if err != nil {
		return err
	}
	klog.FromContext(ctx).V(1).Info("Ensured the KOS PKI", "namespace", r.cfg.Namespace, "secrets", r.cfg.set, "duration", time.Since(began))
	return nil
}
