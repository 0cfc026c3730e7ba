package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/registry"
	"github.com/kos-sdn/kos/tools/testenv"
)

// Exit codes: 0 success, 1 failure, and for status, 3 when the environment
// is not running (the LSB convention for "program is not running").
const (
	exitFailure    = 1
	exitNotRunning = 3
)

// codeError is an error that asks for a particular exit code.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

func exitCode(err error) int {
	var ce *codeError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ce):
		return ce.code
	default:
		return exitFailure
	}
}

// errNoEnvironment is returned when the folder holds no environment.
var errNoEnvironment = errors.New("no local environment")

// options are the flags every subcommand shares.
type options struct {
	dir string
	out io.Writer
	err io.Writer
}

func newCommand(out, errOut io.Writer) *cobra.Command {
	o := &options{out: out, err: errOut}
	cmd := &cobra.Command{
		Use:   "localenv",
		Short: "Run a local Kubernetes control plane (etcd + kube-apiserver) in the background",
		Long: `localenv runs a real etcd and kube-apiserver on 127.0.0.1, detached from
the terminal, with certificates, an admin kubeconfig, RBAC and the aggregation
layer set up. The binaries are built from the Go module proxy on first use
(tools/kube/build.sh, several minutes once) unless $` + testenv.BinDirEnv + ` names a folder
holding them. Everything lives in one folder: certificates, kubeconfig, etcd
data, logs and pid files.

Without --cluster there is no controller manager, scheduler or kubelet:
objects are stored and served, but no pods run. up --cluster adds them, with a
node whose pods really run.`,
		Example: `  go run ./tools/localenv up
  eval "$(go run ./tools/localenv env)"
  kubectl get namespaces
  go run ./tools/localenv down`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if o.dir != "" {
				return nil
			}
			root, err := testenv.RepoRoot()
			if err != nil {
				return fmt.Errorf("choosing the default folder (pass --dir): %w", err)
			}
			o.dir = filepath.Join(root, ".cache", "localenv")
			return nil
		},
	}
	cmd.SetOut(out)
	cmd.SetErr(errOut)
	cmd.CompletionOptions.DisableDefaultCmd = true
	cmd.PersistentFlags().StringVar(&o.dir, "dir", "", "folder of the environment (default <repository>/.cache/localenv)")
	cmd.AddCommand(newUpCommand(o), newDownCommand(o), newStatusCommand(o), newEnvCommand(o))
	return cmd
}

// upOptions are the flags of up.
type upOptions struct {
	timeout    time.Duration
	cluster    bool
	nodes      int
	nodeLabels map[string]string
	nodeOVS    bool
	registry   bool
	multus     bool
}

func newUpCommand(o *options) *cobra.Command {
	u := &upOptions{
		timeout: 2 * time.Minute,
		nodes:   1,
		nodeOVS: true,
		nodeLabels: map[string]string{
			"role.kos.example.com/control":  "true",
			"role.kos.example.com/workload": "true",
		},
	}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start the control plane in the background, or say that it already runs",
		Long: `up starts etcd and kube-apiserver detached, so that they keep running after
the command returns, waits until kube-apiserver is ready and writes DIR/kubeconfig.
When they already run it says so and succeeds. A folder used before keeps its
certificates, its data and, when free, its ports.

With --cluster it also starts kube-controller-manager, kube-scheduler and
--nodes nodes: each runs containerd, kubelet, kube-proxy and Open vSwitch in a
network namespace and a mount namespace of its own (its /var/lib/kos,
/var/run/openvswitch and kubelet's fixed paths are folders of the node's), and
pods really run there and reach Services and each other. The nodes share an
underlay, a bridge of the host, where kube-apiserver then listens instead of
loopback. Images come from the nodes' containerd (import them with ctr, see
the output) or, with --registry, from a registry (Debian's docker-registry)
on that address, which the nodes pull from over plain http (push to it with
go run ./tools/kosimages --push ADDRESS/PREFIX). down stops the nodes and the
registry and removes every trace of them from the host. With --multus the
nodes chain Multus (built from tools/multus) before their network, so that
pods get extra interfaces from NetworkAttachmentDefinitions, whose CRD is
installed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runUp(cmd.Context(), o, u)
		},
	}
	cmd.Flags().DurationVar(&u.timeout, "timeout", u.timeout, "how long to wait for each component to become ready")
	cmd.Flags().BoolVar(&u.cluster, "cluster", false, "also run kube-controller-manager, kube-scheduler and a node with kubelet and containerd")
	cmd.Flags().IntVar(&u.nodes, "nodes", u.nodes, "how many nodes to run, with --cluster")
	cmd.Flags().StringToStringVar(&u.nodeLabels, "node-labels", u.nodeLabels, "labels of every node, with --cluster")
	cmd.Flags().BoolVar(&u.nodeOVS, "node-ovs", u.nodeOVS, "run Open vSwitch in each node's network namespace, with --cluster")
	cmd.Flags().BoolVar(&u.registry, "registry", false, "also run a registry the nodes pull from (on the underlay with --cluster, else on 127.0.0.1)")
	cmd.Flags().BoolVar(&u.multus, "multus", false, "run Multus on the nodes and install the NetworkAttachmentDefinition CRD, with --cluster")
	return cmd
}

func runUp(ctx context.Context, o *options, u *upOptions) error {
	if u.nodes < 1 {
		return fmt.Errorf("--nodes %d: a cluster needs at least one node", u.nodes)
	}
	if u.multus && !u.cluster {
		return errors.New("--multus runs on nodes: give --cluster too")
	}
	timeout := u.timeout
	env, err := cluster.Attach(o.dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	default:
		running, all := countRunning(env.Processes())
		switch {
		case running == all && u.cluster && len(env.Nodes) == 0:
			return fmt.Errorf("the environment in %s runs without a node: run down, then up --cluster", o.dir)
		case running == all && u.cluster && len(env.Nodes) != u.nodes:
			return fmt.Errorf("the environment in %s runs %d nodes, not %d: run down, then up again", o.dir, len(env.Nodes), u.nodes)
		case running == all && u.registry && env.Registry == "":
			return fmt.Errorf("the environment in %s runs without a registry: run down, then up --registry", o.dir)
		case running == all:
			if err := waitReady(ctx, env, timeout); err != nil {
				return fmt.Errorf("the environment in %s runs but is not ready (%w); see the logs there, or run down and up again", o.dir, err)
			}
			fmt.Fprintf(o.out, "Already running in %s.\n", o.dir)
			printUsage(o, env)
			return nil
		case running > 0:
			fmt.Fprintf(o.err, "stopping what is left of an earlier start (%d of %d processes run)\n", running, all)
			if err := env.Stop(); err != nil {
				return err
			}
		}
	}

	opts := cluster.Options{ControlPlane: testenv.Options{Dir: o.dir, Detach: true, Progress: o.err, Timeout: timeout}, Registry: u.registry}
	if u.cluster {
		opts.ControlPlane.Components = []string{testenv.KubeControllerManager, testenv.KubeScheduler}
		for range u.nodes {
			opts.Nodes = append(opts.Nodes, cluster.NodeOptions{Labels: u.nodeLabels, OVS: u.nodeOVS})
		}
		opts.KubeProxy = true
		opts.Multus = u.multus
	}
	env, err = cluster.Start(ctx, opts)
	if err != nil {
		return err
	}
	printUsage(o, env)
	return nil
}

// waitReady waits up to timeout for kube-apiserver's readiness, for an up
// that finds an environment still starting.
func waitReady(ctx context.Context, env *cluster.Cluster, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := env.Ready(ctx)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func printUsage(o *options, env *cluster.Cluster) {
	fmt.Fprintf(o.out, `Kubernetes %s runs at %s (etcd at %s).

Use it:
  export KUBECONFIG=%s
  kubectl get namespaces

Stop it:
  %s down
Logs are in %s.
`, env.Version, env.APIServerURL, env.EtcdURL, shellQuote(env.Kubeconfig), o.selfCommand(), env.Dir)
	if env.Registry != "" {
		fmt.Fprintf(o.out, `
A registry runs at %[1]s (plain http); the nodes pull from it. Push the KOS images:
  go run ./tools/kosimages --push %[1]s/kos
`, env.Registry)
	}
	for _, n := range env.Nodes {
		fmt.Fprintf(o.out, `
Node %s (IP %s, pods in %s) runs pods in network namespace %s
and mount namespace %s; its folder is %s.
Import images (docker-format tarballs) into its containerd:
  ctr --address %s --namespace k8s.io images import IMAGES.tar
`, n.Name, n.IP, n.PodCIDR, n.Netns, shellQuote(n.MountNamespace), shellQuote(n.Dir), shellQuote(n.ContainerdAddress))
		if n.OVSRunDir != "" {
			fmt.Fprintf(o.out, "Its Open vSwitch: OVS_RUNDIR=%s ovs-vsctl show\n", shellQuote(n.OVSRunDir))
		}
	}
}

// selfCommand is how to run this command again, with --dir when it is not
// the default.
func (o *options) selfCommand() string {
	self := "go run ./tools/localenv"
	if root, err := testenv.RepoRoot(); err != nil || o.dir != filepath.Join(root, ".cache", "localenv") {
		self += " --dir " + shellQuote(o.dir)
	}
	return self
}

func newDownCommand(o *options) *cobra.Command {
	purge := false
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the control plane and the nodes",
		Long: `down stops the nodes, kube-apiserver, then etcd, and says what it stopped. The folder
keeps the data and certificates for the next up, unless --purge removes it.
Nothing to stop is not an error.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			env, err := cluster.Attach(o.dir)
			if errors.Is(err, os.ErrNotExist) {
				fmt.Fprintf(o.out, "Nothing to stop: %v in %s.\n", errNoEnvironment, o.dir)
				return purgeDir(o, purge)
			}
			if err != nil {
				return err
			}
			procs := env.Processes()
			if running, _ := countRunning(procs); running == 0 {
				fmt.Fprintf(o.out, "Nothing to stop: the environment in %s is not running.\n", o.dir)
				return purgeDir(o, purge)
			}
			if err := env.Stop(); err != nil {
				return err
			}
			// In the order Cluster.Stop stops them: the node, the registry,
			// kube-apiserver's clients, kube-apiserver, then the etcds.
			// A process of one of several nodes is named NODE/NAME.
			first := []string{"kubelet", "kube-proxy", "nodedns", "containerd", registry.Binary, testenv.KubeScheduler, testenv.KubeControllerManager, "kube-apiserver"}
			base := func(name string) string { return name[strings.LastIndex(name, "/")+1:] }
			for _, name := range first {
				for _, p := range procs {
					if p.Running && base(p.Name) == name {
						fmt.Fprintf(o.out, "Stopped %s (pid %d).\n", p.Name, p.PID)
					}
				}
			}
			for _, p := range procs {
				if p.Running && !slices.Contains(first, base(p.Name)) {
					fmt.Fprintf(o.out, "Stopped %s (pid %d).\n", p.Name, p.PID)
				}
			}
			return purgeDir(o, purge)
		},
	}
	cmd.Flags().BoolVar(&purge, "purge", false, "also remove the folder: data, certificates and logs")
	return cmd
}

func purgeDir(o *options, purge bool) error {
	if !purge {
		return nil
	}
	// A node stopped without its record may have left its mount
	// namespace mounted in the folder.
	if err := cluster.UnmountUnder(o.dir); err != nil {
		return fmt.Errorf("removing %s: %w", o.dir, err)
	}
	if err := os.RemoveAll(o.dir); err != nil {
		return fmt.Errorf("removing %s: %w", o.dir, err)
	}
	fmt.Fprintf(o.out, "Removed %s.\n", o.dir)
	return nil
}

func newStatusCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Report whether the control plane runs",
		Long: `status lists the processes of the environment and asks kube-apiserver
whether it is ready. It exits 0 when everything runs and is ready, 3 when the
environment is stopped, partly stopped or not ready, and 1 on other errors.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env, err := cluster.Attach(o.dir)
			if errors.Is(err, os.ErrNotExist) {
				return &codeError{exitNotRunning, fmt.Errorf("%w in %s: start one with %s up", errNoEnvironment, o.dir, o.selfCommand())}
			}
			if err != nil {
				return err
			}
			procs := env.Processes()
			for _, p := range procs {
				state := "stopped"
				if p.Running {
					state = "running"
				}
				fmt.Fprintf(o.out, "%-23s %-8s pid %-8d %s\n", p.Name, state, p.PID, p.URL)
			}
			if running, all := countRunning(procs); running < all {
				return &codeError{exitNotRunning, fmt.Errorf("%d of %d processes run: start with %s up", running, all, o.selfCommand())}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			if err := env.Ready(ctx); err != nil {
				return &codeError{exitNotRunning, fmt.Errorf("kube-apiserver is not ready: %w", err)}
			}
			fmt.Fprintf(o.out, "Ready: Kubernetes %s; export KUBECONFIG=%s\n", env.Version, shellQuote(env.Kubeconfig))
			return nil
		},
	}
}

func newEnvCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "env",
		Short: "Print the shell line that points kubectl at the control plane",
		Long: `env prints "export KUBECONFIG=DIR/kubeconfig", for eval "$(go run ./tools/localenv env)".
It fails when the folder holds no environment, and warns on stderr when the
environment is not running.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			env, err := cluster.Attach(o.dir)
			if errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("%w in %s: start one with %s up", errNoEnvironment, o.dir, o.selfCommand())
			}
			if err != nil {
				return err
			}
			if running, all := countRunning(env.Processes()); running < all {
				fmt.Fprintf(o.err, "localenv: warning: %d of %d processes run; start them with %s up\n", running, all, o.selfCommand())
			}
			fmt.Fprintf(o.out, "export KUBECONFIG=%s\n", shellQuote(env.Kubeconfig))
			return nil
		},
	}
}

func countRunning(procs []testenv.ProcessStatus) (running, all int) {
	for _, p := range procs {
		if p.Running {
			running++
		}
	}
	return running, len(procs)
}

// shellQuote quotes s for a POSIX shell when it holds anything but the
// characters paths usually have.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
