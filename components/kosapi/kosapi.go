// Package kosapi provides the client configuration with which the KOS
// components (kos-agent, kos-controller-manager) reach the KOS API: straight
// to kos-apiserver through its Service, as the design wants (no load on the
// main cluster's kube-apiserver, which would otherwise proxy every request
// and hold every watch twice), or through the main cluster's kube-apiserver,
// which proxies the group to kos-apiserver (the aggregator path).
//
// Either way the component keeps its main-cluster identity (in a pod, its
// ServiceAccount token): kos-apiserver asks the main cluster about it
// (TokenReview, SubjectAccessReview), so authorization and admission see
// the same user on both paths.
package kosapi

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
)

// Access says how to reach the KOS API.
type Access struct {
	// Server is the URL of kos-apiserver, such as
	// https://kos-apiserver.example-com.svc; empty reaches the KOS API
	// through the main cluster's kube-apiserver.
	Server string
	// CAFile is the CA bundle of kos-apiserver's serving certificate.
	CAFile string
	// CAAPIService names the APIService (such as
	// v1alpha1.network.example.com) whose spec.caBundle is that CA
	// bundle: the one the main cluster's aggregator trusts, which kos-pki
	// keeps. It is read once, by Config.
	CAAPIService string
}

// Validate returns every problem with a, each naming the flags that the
// KOS commands fill Access from: --kos-api-server (Server),
// --kos-api-ca-file (CAFile) and --kos-api-ca-apiservice (CAAPIService).
func (a Access) Validate() []error {
	var errs []error
	if a.Server == "" && (a.CAFile != "" || a.CAAPIService != "") {
		errs = append(errs, errors.New("--kos-api-ca-file and --kos-api-ca-apiservice need --kos-api-server"))
	}
	if a.CAFile != "" && a.CAAPIService != "" {
		errs = append(errs, errors.New("give --kos-api-ca-file or --kos-api-ca-apiservice, not both"))
	}
	return errs
}

// caTimeout bounds reading the CA bundle from the main cluster.
const caTimeout = 30 * time.Second

// Config returns the configuration of a client of the KOS API: a copy of
// main (the main cluster's, whose identity and limits it keeps) pointed at
// kos-apiserver when a.Server is set, trusting the CA bundle a names (the
// system's roots when it names none). With a.CAAPIService it reads that
// APIService from the main cluster, which the identity must be allowed to
// get; a CA bundle replaced later (the operator rotated the CA) takes a
// restart to be seen.
func Config(ctx context.Context, main *rest.Config, a Access) (*rest.Config, error) {
	if err := errors.Join(a.Validate()...); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(main)
	if a.Server == "" {
		return cfg, nil
	}
	cfg.Host, cfg.APIPath = a.Server, ""
	// kos-apiserver's serving certificate is not the main cluster's.
	cfg.TLSClientConfig.CAData, cfg.TLSClientConfig.CAFile = nil, ""
	switch {
	case a.CAFile != "":
		cfg.TLSClientConfig.CAFile = a.CAFile
	case a.CAAPIService != "":
		ca, err := caBundle(ctx, main, a.CAAPIService)
		if err != nil {
			return nil, err
		}
		cfg.TLSClientConfig.CAData = ca
	}
	return cfg, nil
}

// caBundle reads the CA bundle of APIService name from the main cluster.
func caBundle(ctx context.Context, main *rest.Config, name string) ([]byte, error) {
	client, err := aggregator.NewForConfig(main)
	if err != nil {
		return nil, fmt.Errorf("creating an APIService client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, caTimeout)
	defer cancel()
	svc, err := client.ApiregistrationV1().APIServices().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the CA bundle of kos-apiserver from apiservice %s: %w", name, err)
	}
	ca := bytes.TrimSpace(svc.Spec.CABundle)
	if len(ca) == 0 {
		return nil, fmt.Errorf("apiservice %s has no CA bundle yet (kos-pki sets it)", name)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("the CA bundle of apiservice %s holds no PEM certificate", name)
	}
	return svc.Spec.CABundle, nil
}
