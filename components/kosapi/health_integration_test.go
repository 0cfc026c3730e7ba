package kosapi_test

import (
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/components/kosapi"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationDeadConnection shows what DetectDeadConnections buys: a
// watch held to a real kube-apiserver over a connection that falls silent,
// as one to a replica on a node that lost power does (no FIN, no reset,
// no frame), ends within the health check's 15 s, so that the informer
// behind it can list and watch again elsewhere. With client-go's own
// figures it would wait 45 s; the test fails past 30 s.
func TestIntegrationDeadConnection(t *testing.T) {
	env := testenv.Shared(t)
	for _, name := range []string{"HTTP2_READ_IDLE_TIMEOUT_SECONDS", "HTTP2_PING_TIMEOUT_SECONDS"} {
		t.Setenv(name, "") // restored when the test ends
		os.Unsetenv(name)
	}
	if err := kosapi.DetectDeadConnections(); err != nil {
		t.Fatal(err)
	}
	upstream, err := url.Parse(env.RESTConfig.Host)
	if err != nil {
		t.Fatal(err)
	}
	relay := startRelay(t, upstream.Host)
	cfg := rest.CopyConfig(env.RESTConfig)
	cfg.Host = "https://" + relay.addr()
	// A transport of its own, made now: client-go shares transports by
	// their TLS settings, and one made before the variables were set
	// would keep client-go's figures. A Proxy function (that asks for no
	// proxy) makes the configuration one it does not share.
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := client.CoreV1().ConfigMaps(metav1.NamespaceDefault).Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watching through the relay: %v", err)
	}
	defer w.Stop()

	relay.silence()
	silenced := time.Now()
	deadline := time.After(2 * time.Minute)
	for open := true; open; {
		select {
		case _, open = <-w.ResultChan():
		case <-deadline:
			t.Fatal("the watch still open 2 minutes after its connection fell silent")
		}
	}
	took := time.Since(silenced)
	t.Logf("figure dead-connection-found %.1f s", took.Seconds())
	if took > 30*time.Second {
		t.Errorf("the watch ended %s after its connection fell silent, want within the health check's 15 s (client-go's own 45 s fail this)", took.Round(100*time.Millisecond))
	}
}

// relay passes TCP connections on to an upstream address until silence is
// called; from then on it swallows what each side sends, as a path whose
// far end is gone would, and keeps the connections open.
type relay struct {
	ln     net.Listener
	quiet  atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func startRelay(t *testing.T, upstream string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln}
	t.Cleanup(r.close)
	go func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				down.Close()
				continue
			}
			if !r.track(down, up) {
				return
			}
			go r.pipe(up, down)
			go r.pipe(down, up)
		}
	}()
	return r
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) silence() { r.quiet.Store(true) }

// track records conns for close; it closes them and returns false once the
// relay is closed.
func (r *relay) track(conns ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	r.conns = append(r.conns, conns...)
	return true
}

// pipe copies from src to dst until either fails, swallowing what it
// reads once the relay is silent.
func (r *relay) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !r.quiet.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (r *relay) close() {
	r.ln.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for _, c := range r.conns {
		c.Close()
	}
}
