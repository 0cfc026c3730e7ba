// Command demo walks a person through KOS on the local control plane.
//
// Part one is the channels addon manager: it serves an example channel over
// HTTPS, shows the plan, applies it, publishes a second release and applies
// that, showing what is updated and pruned. Part two is the SDN:
// kos-apiserver, kos-controller-manager and a kos-agent on each of two
// simulated nodes, a subnet and an attachment per node, and a ping between
// them across the VXLAN overlay.
//
// `make demo` builds the binaries, starts the control plane and runs
// `demo`; `make demo-down` runs `demo down` and stops the control plane.
package main

import (
	"context"
	"encoding/pem"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	flags := flag.NewFlagSet("demo", flag.ContinueOnError)
	flags.Usage = func() {
		fmt.Fprintf(flags.Output(), "Usage: demo [flags]       run the demo on a started local control plane\n       demo [flags] down  stop the SDN parts it started (then stop the control plane with localenv down)\n       demo [flags] cluster       install KOS 0.1.0 on a started multi-node cluster (localenv up --cluster --nodes 3 --registry --multus), upgrade it to 0.2.0 under pings, then to 0.3.0 with pods on KOS networks\n       demo [flags] cluster-down [localenv down flags]  stop the cluster demo and its cluster\n\nFlags:\n")
		flags.PrintDefaults()
	}
	envDir := flags.String("env-dir", ".cache/localenv", "folder of the local control plane (go run ./tools/localenv up)")
	binDir := flags.String("bin-dir", ".cache/bin", "folder holding the channels, kos-controller-manager and kos-agent binaries")
	if err := flags.Parse(args); err != nil {
		return err
	}
	dir, err := filepath.Abs(*envDir)
	if err != nil {
		return err
	}
	switch flags.Arg(0) {
	case "down":
		return downSDN(dir)
	case "cluster-down":
		return downCluster(ctx, dir, flags.Args()[1:])
	case "", "cluster":
	default:
		return fmt.Errorf("unknown command %q; run demo -h", flags.Arg(0))
	}

	bin, err := filepath.Abs(*binDir)
	if err != nil {
		return err
	}
	d := &demo{ctx: ctx, envDir: dir, binDir: bin, kubeconfig: filepath.Join(dir, "kubeconfig")}
	if _, err := os.Stat(d.kubeconfig); err != nil {
		return fmt.Errorf("no kubeconfig at %s: start the control plane first (go run ./tools/localenv up)", d.kubeconfig)
	}
	if flags.Arg(0) == "cluster" {
		return d.runCluster(ctx)
	}
	if err := d.runChannels(ctx); err != nil {
		return err
	}
	if err := d.runSDN(ctx); err != nil {
		return err
	}

	say("Done. Everything is still running:")
	fmt.Printf("    export KUBECONFIG=%s\n", d.kubeconfig)
	fmt.Printf("    kubectl get configmaps,deployments -n hello\n")
	fmt.Printf("    kubectl get greetings -A\n")
	fmt.Printf("    %s get addons\n", filepath.Join(bin, "channels"))
	fmt.Printf("    kubectl get subnets,networkattachments -n %s -o wide\n", demoNamespace)
	fmt.Printf("    ip netns exec %sguest-b ping %s\n", netnsPrefix, "<guest-a's address>")
	fmt.Printf("Logs are in %s. Stop it all with: make demo-down\n", dir)
	return nil
}

// runChannels installs and upgrades two addons from a channel served over
// HTTPS.
func (d *demo) runChannels(ctx context.Context) error {
	srv, stage, err := serveChannel()
	if err != nil {
		return err
	}
	defer srv.Close()
	caFile, err := writeCA(srv)
	if err != nil {
		return err
	}
	defer os.Remove(caFile)
	d.caFile = caFile

	url := srv.URL + "/channel.yaml"
	say("Part one: the channels addon manager. The example channel is served over HTTPS at %s.", url)
	say("It lists two addons, hello (a Deployment, Service and ConfigMaps) and greetings (a CRD with custom resources).")
	say("Without --yes, channels only shows what it would do:")
	if err := d.channels("apply", "channel", url); err != nil {
		return err
	}
	say("Apply it (--wait=false: no pods run on this control plane, so nothing would ever be ready):")
	if err := d.channels("apply", "channel", url, "--yes", "--wait=false"); err != nil {
		return err
	}
	say("What is installed is recorded as annotations on the kube-system namespace:")
	if err := d.channels("get", "addons"); err != nil {
		return err
	}
	say("Running the same channel again changes nothing:")
	if err := d.channels("apply", "channel", url, "--yes", "--wait=false"); err != nil {
		return err
	}

	stage.Store(2)
	say("Now the channel publishes hello 1.1.0 (two replicas, no hello-legacy ConfigMap) and greetings 0.2.0 (a second Greeting, no greetings-reader ClusterRole). Upgrading prunes what the new releases dropped:")
	if err := d.channels("apply", "channel", url); err != nil {
		return err
	}
	if err := d.channels("apply", "channel", url, "--yes", "--wait=false"); err != nil {
		return err
	}
	return d.channels("get", "addons")
}

// serveChannel serves the example channel folder on 127.0.0.1 over TLS.
// /channel.yaml is the channel as currently published: stage1.yaml at first,
// stage2.yaml once the returned stage is set to 2.
func serveChannel() (*httptest.Server, *atomic.Int32, error) {
	_, self, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(self), "channel")
	stage := &atomic.Int32{}
	stage.Store(1)
	files := http.FileServer(http.Dir(dir))
	mux := http.NewServeMux()
	mux.HandleFunc("/channel.yaml", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, filepath.Join(dir, fmt.Sprintf("stage%d.yaml", stage.Load())))
	})
	mux.Handle("/", files)
	srv := httptest.NewUnstartedServer(mux)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("listening on 127.0.0.1: %w", err)
	}
	srv.Listener = ln
	srv.StartTLS()
	return srv, stage, nil
}

// writeCA writes the test server's certificate where the channels binary
// finds it through SSL_CERT_FILE, so it trusts the demo server and no other.
func writeCA(srv *httptest.Server) (string, error) {
	f, err := os.CreateTemp("", "kos-demo-ca-*.pem")
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := pem.Encode(f, &pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}); err != nil {
		return "", fmt.Errorf("writing the demo server's certificate: %w", err)
	}
	return f.Name(), nil
}

type demo struct {
	ctx        context.Context
	envDir     string
	binDir     string
	kubeconfig string
	caFile     string
}

// channels runs the channels binary as a person would, echoing the command.
func (d *demo) channels(args ...string) error {
	return d.show("channels", filepath.Join(d.binDir, "channels"), args, "SSL_CERT_FILE="+d.caFile)
}

// kubectl runs kubectl against the local control plane, echoing the command.
func (d *demo) kubectl(args ...string) error {
	return d.show("kubectl", "kubectl", args)
}

// show echoes a command as a person would type it, then runs it with the
// local control plane's kubeconfig.
func (d *demo) show(name, path string, args []string, env ...string) error {
	fmt.Printf("\n$ %s %s\n", name, strings.Join(args, " "))
	cmd := exec.CommandContext(d.ctx, path, append(args, "--kubeconfig", d.kubeconfig)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

func say(format string, args ...any) {
	fmt.Printf("\n==> "+format+"\n", args...)
}
