// Command demo walks a person through the channels addon manager on the local
// control plane: it serves an example channel over HTTPS, shows the plan,
// applies it, publishes a second release and applies that, showing what is
// updated and pruned. `make demo` runs it after starting the control plane.
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
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	kubeconfig := flag.String("kubeconfig", ".cache/localenv/kubeconfig", "kubeconfig of the cluster to install the example addons into")
	channelsBin := flag.String("channels", ".cache/bin/channels", "path of the channels binary")
	flag.Parse()

	kc, err := filepath.Abs(*kubeconfig)
	if err != nil {
		return err
	}
	if _, err := os.Stat(kc); err != nil {
		return fmt.Errorf("no kubeconfig at %s: start the control plane first (go run ./tools/localenv up)", kc)
	}

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

	url := srv.URL + "/channel.yaml"
	d := &demo{ctx: ctx, bin: *channelsBin, kubeconfig: kc, caFile: caFile}

	say("The example channel is served over HTTPS at %s.", url)
	say("It lists two addons, hello (a Deployment, Service and ConfigMaps) and greetings (a CRD with custom resources).")
	say("Without --yes, channels only shows what it would do:")
	if err := d.channels("apply", "channel", url); err != nil {
		return err
	}
	say("Apply it:")
	if err := d.channels("apply", "channel", url, "--yes"); err != nil {
		return err
	}
	say("What is installed is recorded as annotations on the kube-system namespace:")
	if err := d.channels("get", "addons"); err != nil {
		return err
	}
	say("Running the same channel again changes nothing:")
	if err := d.channels("apply", "channel", url, "--yes"); err != nil {
		return err
	}

	stage.Store(2)
	say("Now the channel publishes hello 1.1.0 (two replicas, no hello-legacy ConfigMap) and greetings 0.2.0 (a second Greeting, no greetings-reader ClusterRole). Upgrading prunes what the new releases dropped:")
	if err := d.channels("apply", "channel", url); err != nil {
		return err
	}
	if err := d.channels("apply", "channel", url, "--yes"); err != nil {
		return err
	}
	if err := d.channels("get", "addons"); err != nil {
		return err
	}

	say("Done. The control plane is still running:")
	fmt.Printf("    export KUBECONFIG=%s\n", kc)
	fmt.Printf("    kubectl get configmaps,deployments -n hello\n")
	fmt.Printf("    kubectl get greetings -A\n")
	fmt.Printf("    %s get addons\n", d.bin)
	fmt.Printf("Stop it with: make demo-down\n")
	return nil
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
	bin        string
	kubeconfig string
	caFile     string
}

// channels runs the channels binary as a person would, echoing the command.
func (d *demo) channels(args ...string) error {
	fmt.Printf("\n$ channels %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(d.ctx, d.bin, append(args, "--kubeconfig", d.kubeconfig)...)
	cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+d.caFile)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("channels %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

func say(format string, args ...any) {
	fmt.Printf("\n==> "+format+"\n", args...)
}
