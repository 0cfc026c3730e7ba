package pki

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
)

// EnsureOptions are the settings of kos-pki ensure, as its command line
// gives them.
type EnsureOptions struct {
	// Namespace holds the Secrets and the Services the certificates name.
	Namespace string
	// Secrets names the set of Secrets to ensure.
	Secrets string
	// APIService, when set, is the APIService whose CA bundle to set.
	APIService string
	// Kubeconfig reaches the cluster; empty means the in-cluster
	// configuration.
	Kubeconfig string
	// OutDir, when set, receives the data of each ensured Secret.
	OutDir string
	// CAConfigMaps are the namespaces to publish the CA's certificate
	// into, in the ConfigMap CAConfigMap.
	CAConfigMaps []string
	// PasswordSecrets name the Secrets (namespace/name) to make with a
	// random password.
	PasswordSecrets []string
	// LeafValidity is how long a new leaf certificate is valid.
	LeafValidity time.Duration
	// RenewBefore is how long before it expires a leaf is re-issued.
	RenewBefore time.Duration
	// Logs configures logging.
	Logs *logsapi.LoggingConfiguration
}

// NewEnsureOptions returns the default settings of kos-pki ensure.
func NewEnsureOptions() *EnsureOptions {
	return &EnsureOptions{
		Namespace:    DefaultNamespace,
		Secrets:      string(SetAll),
		LeafValidity: LeafValidity,
		RenewBefore:  RenewBefore,
		Logs:         logsapi.NewLoggingConfiguration(),
	}
}

// Flags returns the command-line flags of kos-pki ensure, by section.
func (o *EnsureOptions) Flags() cliflag.NamedFlagSets {
	var sets []string
	for _, s := range Sets {
		sets = append(sets, string(s))
	}
	var fss cliflag.NamedFlagSets
	fs := fss.FlagSet("ensure")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Namespace of the Secrets and of the Services the certificates name.")
	fs.StringVar(&o.Secrets, "secrets", o.Secrets, "Which Secrets to ensure: "+strings.Join(sets, ", ")+".")
	fs.StringVar(&o.APIService, "apiservice", o.APIService, "APIService whose CA bundle to set to the CA, such as v1alpha1.network.example.com; empty sets none.")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig of the cluster; empty means the in-cluster configuration.")
	fs.StringVar(&o.OutDir, "out-dir", o.OutDir, "Also write each ensured Secret's data (never the CA key) into DIR/<secret>/<key>, for the pod's containers; empty writes none.")
	fs.StringSliceVar(&o.CAConfigMaps, "ca-configmap-namespaces", o.CAConfigMaps, "Namespaces to publish the CA's certificate (never its key) into, as ConfigMap "+CAConfigMap+" (key "+CACertKey+"), for clients that verify KOS servers; a namespace that does not exist is skipped and tried again. Each needs pki.PublishRules granted.")
	fs.StringSliceVar(&o.PasswordSecrets, "password-secrets", o.PasswordSecrets, "Secrets (namespace/name) to make, when missing, with a random password under the key "+PasswordKey+", such as kos-monitoring/grafana-admin; an existing one is kept.")
	fs.DurationVar(&o.LeafValidity, "leaf-validity", o.LeafValidity, "How long a new leaf certificate is valid (at most until the CA expires).")
	fs.DurationVar(&o.RenewBefore, "renew-before", o.RenewBefore, "How long before it expires a leaf certificate is re-issued; less than --leaf-validity.")
	logsapi.AddFlags(o.Logs, fss.FlagSet("logs"))
	return fss
}

// Complete fills in the settings that follow from others; there are none
// yet, and it is here so that every KOS command takes the same steps.
func (o *EnsureOptions) Complete() error { return nil }

// Validate returns every problem with the settings at once.
func (o *EnsureOptions) Validate() error {
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("--namespace is empty"))
	} else if _, err := Set(o.Secrets).Leaves(o.Namespace); err != nil {
		errs = append(errs, fmt.Errorf("--secrets: %w", err))
	}
	for _, ns := range o.CAConfigMaps {
		if ns == "" {
			errs = append(errs, errors.New("--ca-configmap-namespaces holds an empty namespace"))
		}
	}
	for _, s := range o.PasswordSecrets {
		if _, err := ParseSecretRef(s); err != nil {
			errs = append(errs, fmt.Errorf("--password-secrets: %w", err))
		}
	}
	switch {
	case o.LeafValidity <= 0:
		errs = append(errs, fmt.Errorf("--leaf-validity is %s, want more than 0", o.LeafValidity))
	case o.RenewBefore <= 0 || o.RenewBefore >= o.LeafValidity:
		errs = append(errs, fmt.Errorf("--renew-before is %s, want more than 0 and less than --leaf-validity (%s)", o.RenewBefore, o.LeafValidity))
	}
	return errors.Join(errs...)
}

// Config turns the settings into the configuration of an ensure run: the
// client configuration (--kubeconfig, or the pod's own without it) and the
// leaf certificates of the set.
func (o *EnsureOptions) Config() (*EnsureConfig, error) {
	leaves, err := Set(o.Secrets).Leaves(o.Namespace)
	if err != nil {
		return nil, fmt.Errorf("--secrets: %w", err)
	}
	var passwords []SecretRef
	for _, s := range o.PasswordSecrets {
		ref, err := ParseSecretRef(s)
		if err != nil {
			return nil, fmt.Errorf("--password-secrets: %w", err)
		}
		passwords = append(passwords, ref)
	}
	var cfg *rest.Config
	if o.Kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("loading the in-cluster configuration (outside a pod, pass --kubeconfig): %w", err)
		}
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("loading --kubeconfig: %w", err)
		}
	}
	return &EnsureConfig{
		REST:         cfg,
		Namespace:    o.Namespace,
		Leaves:       leaves,
		APIService:   o.APIService,
		OutDir:       o.OutDir,
		CAConfigMaps: o.CAConfigMaps,
		Passwords:    passwords,
		LeafValidity: o.LeafValidity,
		RenewBefore:  o.RenewBefore,
		set:          o.Secrets,
	}, nil
}
