// Command nodedns is the cluster DNS of a tools/cluster node: it answers A
// queries for the Services and headless Services' endpoints of the cluster
// from the Kubernetes API, on one address (the node's IP, in the node's
// network namespace), and NXDOMAIN for every other name. It never forwards
// a query anywhere.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	listen := flag.String("listen", "", "the UDP address to answer on, such as 192.168.250.2:53")
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig to read Services and EndpointSlices with")
	domain := flag.String("domain", "cluster.local", "the cluster domain")
	interval := flag.Duration("interval", time.Second, "how often to list Services and EndpointSlices")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, *listen, *kubeconfig, *domain, *interval); err != nil {
		log.Fatalf("nodedns: %v", err)
	}
}

func run(ctx context.Context, listen, kubeconfig, domain string, interval time.Duration) error {
	if listen == "" || kubeconfig == "" {
		return errors.New("-listen and -kubeconfig are required")
	}
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	conn, err := net.ListenPacket("udp4", listen)
	if err != nil {
		return fmt.Errorf("listening: %w", err)
	}
	s := &server{client: client, domain: domain}
	// The first answers wait for the first listing.
	s.refresh(ctx)
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				conn.Close()
				return
			case <-tick.C:
				s.refresh(ctx)
			}
		}
	}()
	log.Printf("answering on %s for %s", conn.LocalAddr(), domain)
	buf := make([]byte, 4096)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("reading a query: %w", err)
		}
		msg, ok := s.lookup(ctx, buf[:n])
		if !ok {
			continue
		}
		if _, err := conn.WriteTo(msg, from); err != nil {
			log.Printf("answering %s: %v", from, err)
		}
	}
}

// server holds the records of the last listing.
type server struct {
	client kubernetes.Interface
	domain string

	mu      sync.Mutex
	records records
	listed  time.Time
}

// refresh lists the Services and EndpointSlices and replaces the records;
// on an error it keeps the old ones.
func (s *server) refresh(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	began := time.Now()
	services, err := s.client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		log.Printf("listing Services: %v", err)
		return
	}
	slices, err := s.client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		log.Printf("listing EndpointSlices: %v", err)
		return
	}
	r := buildRecords(s.domain, services.Items, slices.Items)
	s.mu.Lock()
	s.records, s.listed = r, began
	s.mu.Unlock()
}

// lookup answers a query, listing again first when the name is unknown and
// the records are older than 200ms.
func (s *server) lookup(ctx context.Context, query []byte) ([]byte, bool) {
	s.mu.Lock()
	r, listed := s.records, s.listed
	s.mu.Unlock()
	msg, ok := r.answer(query)
	if !ok || !nxdomain(msg) || time.Since(listed) < 200*time.Millisecond {
		return msg, ok
	}
	s.refresh(ctx)
	s.mu.Lock()
	r = s.records
	s.mu.Unlock()
	return r.answer(query)
}

// nxdomain reports whether a response says the name does not exist.
func nxdomain(msg []byte) bool {
	// The RCODE is the low four bits of the fourth byte.
	return len(msg) > 3 && msg[3]&0x0f == 3
}
