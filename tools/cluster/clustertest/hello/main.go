// Command hello is the workload of the cluster tests: a tiny HTTP server that
// answers with its host name, and a client for it.
//
//	hello [-listen :8080] [-write FILE]
//	                        serve / (hello from <host name>) and /healthz,
//	                        having written the host name to FILE
//	hello get URL           print the body that a GET of URL returns
//	hello api PATH          print what kube-apiserver answers to a GET of PATH,
//	                        reached as pods reach it: through the kubernetes
//	                        Service, with the pod's service-account token
//	hello addrs             print each network interface with its addresses,
//	                        one "NAME ADDRESS/BITS" line per address
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "addrs" {
		if err := addrs(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) == 3 && (os.Args[1] == "get" || os.Args[1] == "api") {
		do := get
		if os.Args[1] == "api" {
			do = api
		}
		if err := do(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	listen := flag.String("listen", ":8080", "address to serve on")
	write := flag.String("write", "", "file to write the host name to before serving")
	flag.Parse()
	if *write != "" {
		host, err := os.Hostname()
		if err == nil {
			err = os.WriteFile(*write, []byte(host+"\n"), 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serve(ctx, *listen); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func serve(ctx context.Context, listen string) error {
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintf(w, "hello from %s\n", host) })
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	fmt.Printf("hello: %s listening on %s\n", host, listen)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		fmt.Println("hello: stopping")
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdown)
	}
}

// addrs prints the addresses of the pod's interfaces, as `ip addr` would
// in an image that has it.
func addrs() error {
	ifaces, err := net.Interfaces()
	if err != nil {
		return err
	}
	for _, iface := range ifaces {
		as, err := iface.Addrs()
		if err != nil {
			return fmt.Errorf("addresses of %s: %w", iface.Name, err)
		}
		for _, a := range as {
			fmt.Printf("%s %s\n", iface.Name, a)
		}
	}
	return nil
}

func get(url string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	return show(&http.Client{Timeout: 10 * time.Second}, req)
}

// serviceAccountDir is where kubelet mounts a pod's service-account token and
// the cluster's CA.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func api(path string) error {
	token, err := os.ReadFile(serviceAccountDir + "/token")
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(serviceAccountDir + "/ca.crt")
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("no certificate in %s/ca.crt", serviceAccountDir)
	}
	host := net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
	req, err := http.NewRequest(http.MethodGet, "https://"+host+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+string(token))
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	return show(client, req)
}

// show prints the body of the answer to req, which must be 200 OK.
func show(client *http.Client, req *http.Request) error {
	url := req.URL.String()
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	_, err = os.Stdout.Write(body)
	return err
}
