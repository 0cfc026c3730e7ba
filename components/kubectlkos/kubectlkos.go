// Package kubectlkos is the kubectl plugin `kubectl kos`, which helps an
// operator troubleshoot KOS: per-node agent status, a packet trace through a
// node's switch, and a support bundle. It follows kubectl's conventions
// (cli-runtime's kubeconfig flags, IO streams and printers) and reaches the
// node agents only through the kube-apiserver, so that the user's own
// credentials and RBAC decide what they may see; it never connects to a
// node itself. Agents since 0.4.0 are reached through a port-forward,
// which carries the user's credentials on to the agent, which asks the
// cluster whether the user may read its node (nodes/kos-debug); older ones
// through the pod proxy.
package kubectlkos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"

	"github.com/kos-sdn/kos/internal/cmdline"
)

// Defaults of the agent flags: where the releases since 0.2.0 run the node
// agent.
const (
	DefaultAgentNamespace = "kos-node"
	DefaultAgentSelector  = "app.kubernetes.io/name=kos-agent"
)

// Main runs the plugin with args (without the program name) and returns its
// exit code: 0 on success, 1 when the command failed, 2 when it was used
// wrongly. An error is written to streams.ErrOut as one line.
func Main(ctx context.Context, args []string, streams genericiooptions.IOStreams) int {
	cmd := NewCommand(streams)
	if args == nil {
		args = []string{} // cobra takes nil for os.Args
	}
	cmd.SetArgs(args)
	return cmdline.Exit(streams.ErrOut, cmd.ExecuteContext(ctx))
}

// NewCommand returns the root command, kubectl-kos, which kubectl runs as
// `kubectl kos`.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{
		config:  genericclioptions.NewConfigFlags(true),
		streams: streams,
	}
	cmd := &cobra.Command{
		Use:   "kubectl-kos",
		Short: "Troubleshoot KOS: status, health checks, packet traces, support bundles",
		Long: `kubectl kos helps troubleshoot KOS, the SDN of network attachments.

It reads the KOS API with your credentials and reaches the node agents (the
kos-agent pods) through the kube-apiserver, never directly: what you may see
is what your RBAC allows (pods/portforward, pods/proxy and pods/log on the
agent pods, and get and create on nodes/kos-debug, which each agent checks
with your credentials; see docs/kubectl-kos.md).`,
		Example: `  # The control plane and every node's agent: versions, etcd, certificates, attachments, errors.
  kubectl kos status

  # Health checks, exit code 0 when every one passes, 1 when one fails.
  kubectl kos check

  # What the switch of attachment a1's node does with a ping from a1 to 10.1.0.7.
  kubectl kos trace a1 --to 10.1.0.7 -n tenant-a

  # Logs, flows, tunnels, routes and the KOS objects of a namespace, in one archive.
  kubectl kos support-bundle -n tenant-a -o bundle.tar.gz`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cmdline.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
		// kubectl runs the binary kubectl-kos as `kubectl kos`: help says so.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl kos"},
	}
	// kubectl completes a plugin's arguments through a script of its own
	// (kubectl_complete-kos), not this command.
	cmd.CompletionOptions.DisableDefaultCmd = true
	cmd.SetIn(streams.In)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return cmdline.UsageErrorf(c, "%v", err)
	})
	o.config.AddFlags(cmd.PersistentFlags())
	cmd.PersistentFlags().StringVar(&o.agentNamespace, "agent-namespace", DefaultAgentNamespace, "The namespace of the kos-agent pods")
	cmd.PersistentFlags().StringVar(&o.agentSelector, "agent-selector", DefaultAgentSelector, "The label selector of the kos-agent pods")
	cmd.PersistentFlags().StringVar(&o.controlPlaneNamespace, "control-plane-namespace", DefaultControlPlaneNamespace, "The namespace of kos-etcd, kos-pki, kos-apiserver and kos-controller-manager")
	cmd.AddCommand(newStatusCommand(o), newCheckCommand(o), newTraceCommand(o), newSupportBundleCommand(o))
	return cmd
}

// options holds what every command shares.
type options struct {
	config                *genericclioptions.ConfigFlags
	streams               genericiooptions.IOStreams
	agentNamespace        string
	agentSelector         string
	controlPlaneNamespace string
}

// clients are the clients of one command run.
type clients struct {
	config  *rest.Config
	kube    kubernetes.Interface
	kos     kosclient.Interface
	dynamic dynamic.Interface
}

// clients connects to the cluster the kubeconfig flags select.
func (o *options) clients() (*clients, error) {
	cfg, err := o.config.ToRESTConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, errors.New("no cluster configured: pass --kubeconfig or set KUBECONFIG")
		}
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = rest.NewWarningWriter(o.streams.ErrOut, rest.WarningWriterOptions{Deduplicate: true})
	cfg.UserAgent = "kubectl-kos"
	c := &clients{config: cfg}
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.kos, err = kosclient.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	return c, nil
}

// namespace returns the namespace of -n, or of the kubeconfig's context.
func (o *options) namespace() (string, error) {
	ns, _, err := o.config.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("finding the namespace: %w", err)
	}
	return ns, nil
}

// agents returns the agents the flags select, reached through c's
// kube-apiserver.
func (o *options) agents(c *clients) *agents {
	return &agents{
		kube:      c.kube,
		namespace: o.agentNamespace,
		selector:  o.agentSelector,
		proxy:     podProxy{kube: c.kube},
		tunnel:    tunnel{config: c.config, kube: c.kube},
	}
}

// controlPlane returns the control plane the flags select, read through
// c's kube-apiserver.
func (o *options) controlPlane(c *clients) *controlPlane {
	return &controlPlane{kube: c.kube, dynamic: c.dynamic, namespace: o.controlPlaneNamespace, proxy: podProxy{kube: c.kube}}
}

// warnf writes a warning to the error stream, as kubectl does.
func (o *options) warnf(format string, args ...any) {
	fmt.Fprintf(o.streams.ErrOut, "Warning: "+format+"\n", args...)
}

// datapath returns the datapath check the flags select: in -n's namespace
// when given, else in a scratch namespace.
func (o *options) datapath(c *clients, timeout time.Duration) *datapathCheck {
	ns := ""
	if o.config.Namespace != nil {
		ns = *o.config.Namespace
	}
	return &datapathCheck{
		kube: c.kube, kos: c.kos, probes: agentProber{agents: o.agents(c)},
		namespace: ns, timeout: timeout, poll: time.Second,
	}
}
