package pki

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	aggregator "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
)

// requestTimeout bounds each request, so that an init container facing an
// unreachable API server fails and is retried by the kubelet rather than
// hanging.
const requestTimeout = 30 * time.Second

// NewCommand returns the kos-pki command. It prints one line per object it
// ensured to out; errors go to errOut.
func NewCommand(out, errOut io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "kos-pki",
		Short: "Make and keep the KOS certificates inside the cluster",
		Long: `kos-pki makes the certificates of KOS inside the cluster, so that no operator
ever runs openssl: a CA, the KOS etcd's server, peer and client certificates
and kos-apiserver's serving certificate, each in a Secret, and the CA bundle of
the KOS APIService. It runs as an init container of the etcd and kos-apiserver
pods.`,
		SilenceUsage: true,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	root.AddCommand(newEnsureCommand(out))
	return root
}

// ensureOptions are the flags of kos-pki ensure.
type ensureOptions struct {
	namespace  string
	secrets    string
	apiService string
	kubeconfig string
	outDir     string
	logs       *logsapi.LoggingConfiguration
}

func newEnsureCommand(out io.Writer) *cobra.Command {
	o := &ensureOptions{
		namespace: DefaultNamespace,
		secrets:   string(SetAll),
		logs:      logsapi.NewLoggingConfiguration(),
	}
	var sets []string
	for _, s := range Sets {
		sets = append(sets, string(s))
	}
	cmd := &cobra.Command{
		Use:   "ensure",
		Short: "Make the missing KOS Secrets, keep the others, renew stale certificates",
		Long: `ensure makes the KOS Secrets of a set exist: the CA (kos-ca) and the leaf
certificates it signs (etcd: kos-etcd-server, kos-etcd-peer; apiserver:
kos-etcd-client, kos-apiserver-serving; all: every one). An existing Secret is
kept, so certificates survive re-applies and upgrades; a leaf certificate whose
names no longer match or that expires within 30 days is re-issued by the
existing CA. With --apiservice it also sets that APIService's CA bundle. It
prints one line per object: created, kept, renewed or patched. Many runs at
once end with one consistent set of Secrets.`,
		Example: `  # In the init container of an etcd member:
  kos-pki ensure --secrets etcd
  # In the init container of kos-apiserver:
  kos-pki ensure --secrets apiserver --apiservice v1alpha1.network.example.com`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("kos-pki ensure takes no arguments, got %q", args)
			}
			if err := logsapi.ValidateAndApply(o.logs, nil); err != nil {
				return err
			}
			defer logs.FlushLogs()
			return o.run(cmd, out)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.namespace, "namespace", o.namespace, "Namespace of the Secrets and of the Services the certificates name.")
	fs.StringVar(&o.secrets, "secrets", o.secrets, "Which Secrets to ensure: "+strings.Join(sets, ", ")+".")
	fs.StringVar(&o.apiService, "apiservice", o.apiService, "APIService whose CA bundle to set to the CA, such as v1alpha1.network.example.com; empty sets none.")
	fs.StringVar(&o.kubeconfig, "kubeconfig", o.kubeconfig, "Kubeconfig of the cluster; empty means the in-cluster configuration.")
	fs.StringVar(&o.outDir, "out-dir", o.outDir, "Also write each ensured Secret's data (never the CA key) into DIR/<secret>/<key>, for the pod's containers; empty writes none.")
	logsapi.AddFlags(o.logs, fs)
	return cmd
}

func (o *ensureOptions) run(cmd *cobra.Command, out io.Writer) error {
	ctx := cmd.Context()
	began := time.Now()
	if o.namespace == "" {
		return errors.New("--namespace is empty")
	}
	leaves, err := Set(o.secrets).Leaves(o.namespace)
	if err != nil {
		return fmt.Errorf("--secrets: %w", err)
	}
	cfg, err := o.restConfig()
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	e := &Ensurer{Client: kube, Namespace: o.namespace}
	ca, results, err := e.Ensure(ctx, leaves)
	for _, r := range results {
		fmt.Fprintln(out, r)
	}
	if err != nil {
		return err
	}
	if o.outDir != "" {
		for _, r := range results {
			if err := WriteFiles(o.outDir, r.Secret); err != nil {
				return err
			}
		}
	}
	if o.apiService != "" {
		agg, err := aggregator.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("creating an aggregator client: %w", err)
		}
		r, err := EnsureCABundle(ctx, agg.ApiregistrationV1().APIServices(), o.apiService, ca.CertPEM)
		if err != nil {
			return err
		}
		fmt.Fprintln(out, r)
	}
	klog.FromContext(ctx).V(1).Info("Ensured the KOS PKI", "namespace", o.namespace, "secrets", o.secrets, "duration", time.Since(began))
	return nil
}

// restConfig loads --kubeconfig, or the pod's own configuration without it.
func (o *ensureOptions) restConfig() (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if o.kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("loading the in-cluster configuration (outside a pod, pass --kubeconfig): %w", err)
		}
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("loading --kubeconfig: %w", err)
		}
	}
	cfg.Timeout = requestTimeout
	cfg.UserAgent = "kos-pki"
	return cfg, nil
}
