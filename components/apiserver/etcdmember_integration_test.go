package apiserver_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationEtcdMemberKill is issue 36's etcd-restart flap, on a real
// three-member etcd under two kos-apiservers: one as released (its etcd
// readiness checks with a grace, --etcd-readiness-grace) and one with the
// library's behaviour (--etcd-readiness-grace=0). Members are killed with
// SIGKILL and started again 3 s later, as the kubelet restarts a
// container, while /readyz (what the kubelet probes, and what takes a
// replica out of the Service the aggregator proxies to) is probed every
// 500 ms and a client reads and writes every 200 ms.
//
//   - A follower killed: no read fails, nor any write but one in flight
//     to that member when it died: the etcd client sends requests to
//     every member in turn, and retries a write only when it was never
//     sent, so a write whose connection was reset under it comes back
//     Unavailable (seen once, in an integration lane at load 17-30):
//     logged.
//   - The leader killed: /readyz stays 200 and no read fails; a write in
//     flight to the dying leader may time out in etcd ("request timed
//     out", after etcd's 7 s), which clients retry: logged.
//   - Quorum lost for 10 s (two members killed): requests wait for it
//     or fail, as they may; the server with the grace stays ready, while the one
//     without turns unready, as every replica of it does at once: the
//     kubelet takes them all out of the Service once three probes in a row
//     failed, the aggregator has no endpoint left, and the KOS API answers
//     503, discovery included, until the probes pass again.
func TestIntegrationEtcdMemberKill(t *testing.T) {
	env := testenv.Shared(t)
	members := startEtcdCluster(t, filepath.Join(env.BinDir, "etcd"), 3)
	var servers []string
	for _, m := range members {
		servers = append(servers, m.clientURL)
	}
	etcdServers := "--etcd-servers=" + strings.Join(servers, ",")
	released := startKOS(t, testenv.KOSOptions{Name: "etcdmember", DirectOnly: true, ExtraArgs: []string{etcdServers}})
	noGrace := startKOS(t, testenv.KOSOptions{Name: "etcdmember-nograce", DirectOnly: true, ExtraArgs: []string{etcdServers, "--etcd-readiness-grace=0"}})
	client := kosClient(t, released.DirectConfig)
	ns := newNamespace(t)
	mustCreateSubnet(t, client, newSubnet(ns, "s1", "10.91.0.0/24", 91))
	w := &etcdWatch{t: t, client: client, ns: ns}

	t.Run("a follower killed", func(t *testing.T) {
		r := w.observe(t, []*testenv.KOS{released}, func() {
			m := followerOf(t, members)
			restartMember(t, m)
		})
		r.requireReady(t, released)
		if len(r.readErrors) > 0 {
			t.Errorf("KOS API reads failed while one etcd follower of three was away:\n%s", strings.Join(r.readErrors, "\n"))
		}
		for _, e := range r.writeErrors {
			if !inFlightToKilled(e) {
				t.Errorf("a KOS API write failed while one etcd follower of three was away, not by the kill of the member it was sent to: %s", e)
			} else {
				t.Logf("a write in flight to the killed member failed with it: %s", e)
			}
		}
	})
	t.Run("the leader killed", func(t *testing.T) {
		r := w.observe(t, []*testenv.KOS{released}, func() {
			restartMember(t, leaderOf(t, members))
		})
		r.requireReady(t, released)
		if len(r.readErrors) > 0 {
			t.Errorf("KOS API reads failed while the etcd leader was away:\n%s", strings.Join(r.readErrors, "\n"))
		}
		for _, e := range r.writeErrors {
			if !strings.Contains(e, "request timed out") {
				t.Errorf("a KOS API write failed while the etcd leader was away, not by etcd's timeout of a proposal in flight: %s", e)
			} else {
				t.Logf("a write in flight when the leader died timed out in etcd: %s", e)
			}
		}
	})
	t.Run("quorum lost for 10 s", func(t *testing.T) {
		r := w.observe(t, []*testenv.KOS{released, noGrace}, func() {
			leader := leaderOf(t, members)
			other := followerOf(t, members)
			leader.kill(t)
			other.kill(t)
			time.Sleep(10 * time.Second)
			leader.start(t)
			other.start(t)
			for _, m := range []*etcdMember{leader, other} {
				poll.Until(t, time.Minute, "member "+m.name+" healthy again", m.healthy)
			}
		})
		r.requireReady(t, released)
		if len(r.notReady[noGrace]) == 0 {
			t.Errorf("the kos-apiserver without a grace stayed ready through a loss of quorum: the test no longer shows what the grace prevents")
		}
		t.Logf("without a grace: /readyz failed %d times, e.g. %s", len(r.notReady[noGrace]), first(r.notReady[noGrace]))
		t.Logf("%d reads and %d writes failed while etcd had no quorum (they wait for it, up to their 30 s timeout)", len(r.readErrors), len(r.writeErrors))
	})
}

// etcdWatch probes kos-apiservers and uses the KOS API while something
// happens to their etcd.
type etcdWatch struct {
	t      *testing.T
	client *kosclient.Clientset
	ns     string
	locks  int
}

// etcdReport is what an observation saw: each server's failed probes, and
// the failed requests, each with its time.
type etcdReport struct {
	probes, requests        int
	notReady                map[*testenv.KOS][]string
	readErrors, writeErrors []string
}

func (r *etcdReport) requireReady(t *testing.T, kos *testenv.KOS) {
	t.Helper()
	t.Logf("%d readiness probes, %d API requests; %s failed %d probes, %d reads and %d writes failed",
		r.probes, r.requests, kos.Name, len(r.notReady[kos]), len(r.readErrors), len(r.writeErrors))
	if len(r.notReady[kos]) > 0 {
		t.Errorf("kos-apiserver %s turned unready:\n%s", kos.Name, strings.Join(r.notReady[kos], "\n"))
	}
}

// observe probes servers' /readyz every 500 ms and reads and writes
// through w's client every 200 ms while action runs, and 15 s after it
// (three of the kubelet's probes).
func (w *etcdWatch) observe(t *testing.T, servers []*testenv.KOS, action func()) *etcdReport {
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	r := &etcdReport{notReady: map[*testenv.KOS][]string{}}
	stamp := func(format string, args ...any) string {
		return time.Now().Format("15:04:05.000") + " " + fmt.Sprintf(format, args...)
	}
	for _, kos := range servers {
		httpClient, err := rest.HTTPClientFor(kos.DirectConfig)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				code, body, err := get(ctx, httpClient, kos.URL+"/readyz")
				mu.Lock()
				r.probes++
				if ctx.Err() == nil && (err != nil || code != http.StatusOK) {
					r.notReady[kos] = append(r.notReady[kos], stamp("%d %v %s", code, err, failedChecks(body)))
				}
				mu.Unlock()
				time.Sleep(500 * time.Millisecond)
			}
		})
	}
	wg.Go(func() {
		for ctx.Err() == nil {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, rerr := w.client.NetworkV1alpha1().Subnets(w.ns).List(rctx, metav1.ListOptions{})
			w.locks++
			lock := &v1alpha1.IPLock{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "l-" + strconv.Itoa(w.locks)}, Spec: v1alpha1.IPLockSpec{SubnetName: "s1"}}
			_, werr := w.client.NetworkV1alpha1().IPLocks(w.ns).Create(rctx, lock, metav1.CreateOptions{})
			cancel()
			mu.Lock()
			r.requests += 2
			if rerr != nil && ctx.Err() == nil {
				r.readErrors = append(r.readErrors, stamp("list: %d %v", statusCode(rerr), rerr))
			}
			if werr != nil && ctx.Err() == nil {
				r.writeErrors = append(r.writeErrors, stamp("create: %d %v", statusCode(werr), werr))
			}
			mu.Unlock()
			time.Sleep(200 * time.Millisecond)
		}
	})
	time.Sleep(2 * time.Second)
	action()
	time.Sleep(15 * time.Second)
	stop()
	wg.Wait()
	return r
}

// restartMember kills m and starts it again 3 s later, and waits until it
// is healthy.
func restartMember(t *testing.T, m *etcdMember) {
	t.Helper()
	killed := time.Now()
	m.kill(t)
	time.Sleep(3 * time.Second)
	m.start(t)
	poll.Until(t, time.Minute, "member "+m.name+" healthy again", m.healthy)
	t.Logf("killed member %s, healthy again %s later", m.name, time.Since(killed).Round(100*time.Millisecond))
}

// statusCode is the HTTP status of an API error, 0 when it has none.
func statusCode(err error) int32 {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Code
	}
	return 0
}

func first(list []string) string {
	if len(list) == 0 {
		return "<none>"
	}
	return list[0]
}

// etcdMember is one member of a test's etcd cluster, run by the test.
type etcdMember struct {
	name, clientURL string
	bin             string
	args            []string
	log             string
	cmd             *exec.Cmd
	done            chan struct{}
}

// startEtcdCluster starts n etcd members on free loopback ports, with
// their data in the test's folder, and waits until each is healthy. The
// test's end stops them.
func startEtcdCluster(t *testing.T, bin string, n int) []*etcdMember {
	t.Helper()
	dir := t.TempDir()
	members := make([]*etcdMember, n)
	var initial []string
	peers := make([]string, n)
	for i := range members {
		members[i] = &etcdMember{name: fmt.Sprintf("m%d", i), bin: bin, clientURL: "http://" + freePort(t)}
		peers[i] = "http://" + freePort(t)
		initial = append(initial, members[i].name+"="+peers[i])
	}
	for i, m := range members {
		m.log = filepath.Join(dir, m.name+".log")
		m.args = []string{
			"--name=" + m.name,
			"--data-dir=" + filepath.Join(dir, m.name),
			"--listen-client-urls=" + m.clientURL,
			"--advertise-client-urls=" + m.clientURL,
			"--listen-peer-urls=" + peers[i],
			"--initial-advertise-peer-urls=" + peers[i],
			"--initial-cluster=" + strings.Join(initial, ","),
			"--initial-cluster-state=new",
			"--unsafe-no-fsync",
			"--log-level=warn",
		}
		m.start(t)
		t.Cleanup(func() { m.kill(t) })
	}
	for _, m := range members {
		poll.Until(t, time.Minute, "etcd member "+m.name+" healthy", m.healthy)
	}
	return members
}

func (m *etcdMember) start(t *testing.T) {
	t.Helper()
	log, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	m.cmd = exec.Command(m.bin, m.args...)
	m.cmd.Stdout, m.cmd.Stderr = log, log
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("starting etcd member %s: %v", m.name, err)
	}
	m.done = make(chan struct{})
	go func() {
		_ = m.cmd.Wait()
		log.Close()
		close(m.done)
	}()
}

// kill kills the member with SIGKILL, as the kubelet kills a container
// past its grace, and waits until it is gone.
func (m *etcdMember) kill(t *testing.T) {
	if m.cmd == nil || m.cmd.Process == nil {
		return
	}
	select {
	case <-m.done:
		return
	default:
	}
	_ = m.cmd.Process.Kill()
	<-m.done
}

func (m *etcdMember) healthy(ctx context.Context) error {
	code, body, err := get(ctx, http.DefaultClient, m.clientURL+"/health")
	if err != nil {
		return err
	}
	if code != http.StatusOK || !strings.Contains(body, `"health":"true"`) {
		return fmt.Errorf("etcd member %s: %d %s", m.name, code, body)
	}
	return nil
}

// leaderOf returns the member whose metrics say it leads.
func leaderOf(t *testing.T, members []*etcdMember) *etcdMember {
	t.Helper()
	var leader *etcdMember
	poll.Until(t, time.Minute, "an etcd leader", func(ctx context.Context) error {
		for _, m := range members {
			if leads, err := m.leads(ctx); err == nil && leads {
				leader = m
				return nil
			}
		}
		return errors.New("no member says it leads")
	})
	return leader
}

// followerOf returns a member that follows a leader.
func followerOf(t *testing.T, members []*etcdMember) *etcdMember {
	t.Helper()
	leader := leaderOf(t, members)
	for _, m := range members {
		if m != leader {
			return m
		}
	}
	t.Fatal("no follower")
	return nil
}

// leads reports whether the member's metrics say it leads.
func (m *etcdMember) leads(ctx context.Context) (bool, error) {
	code, body, err := get(ctx, http.DefaultClient, m.clientURL+"/metrics")
	if err != nil {
		return false, err
	}
	if code != http.StatusOK {
		return false, fmt.Errorf("metrics of %s: %d", m.name, code)
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if sc.Text() == "etcd_server_is_leader 1" {
			return true, nil
		}
	}
	return false, nil
}

// get returns the status code and body of a GET of url.
func get(ctx context.Context, client *http.Client, url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second) // the kubelet's probe timeout
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// freePort returns a loopback address with a port free at the time.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// failedChecks keeps the lines of a readyz answer that failed.
func failedChecks(body string) string {
	var failed []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "[-]") {
			failed = append(failed, l)
		}
	}
	if len(failed) == 0 {
		return strings.Join(strings.Fields(body), " ")
	}
	return strings.Join(failed, "; ")
}

// inFlightToKilled reports whether a write's error is that of a request
// whose connection to its etcd member broke as the member was killed.
func inFlightToKilled(e string) bool {
	return strings.Contains(e, "code = Unavailable") &&
		(strings.Contains(e, "connection reset by peer") || strings.Contains(e, "error reading from server") || strings.Contains(e, "EOF"))
}
