package controllermanager_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// churnDuration is how long the churn of each test lasts.
const churnDuration = 20 * time.Second

// churn creates and deletes subnets and attachments in namespaces, at
// random, until ctx ends. Subnets come from a few small, partly overlapping
// blocks on a few VNIs, so that conflicts and full subnets are common; now
// and then two conflicting subnets are created at the same moment, which
// the server's own check cannot stop. It returns how many writes succeeded.
func churn(ctx context.Context, t *testing.T, c versioned.Interface, seed uint64, namespaces []string, vnis []uint32) int {
	t.Logf("churn seed %d", seed)
	blocks := func(vni uint32) []string {
		return []string{
			fmt.Sprintf("10.%d.0.0/28", vni-100), fmt.Sprintf("10.%d.0.0/29", vni-100),
			fmt.Sprintf("10.%d.0.16/28", vni-100), fmt.Sprintf("10.%d.1.0/30", vni-100),
		}
	}
	var mu sync.Mutex
	writes := 0
	count := func(err error) {
		if err == nil {
			mu.Lock()
			writes++
			mu.Unlock()
		}
	}
	// Two rivals that stay all along, so that the managers always have a
	// conflict to settle, whatever the random churn below happens to make.
	seedRivals(ctx, t, c, namespaces, vnis[0], blocks(vnis[0])[0])

	var wg sync.WaitGroup
	// Subnets.
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(seed, 1))
		for ctx.Err() == nil {
			ns := namespaces[rng.IntN(len(namespaces))]
			name := fmt.Sprintf("s%d", rng.IntN(6))
			vni := vnis[rng.IntN(len(vnis))]
			s := newSubnet(ns, name, blocks(vni)[rng.IntN(4)], vni)
			if rng.IntN(4) == 0 {
				// A rival at the same moment, overlapping or elsewhere.
				rns := namespaces[rng.IntN(len(namespaces))]
				r := newSubnet(rns, fmt.Sprintf("s%d", rng.IntN(6)), blocks(vni)[rng.IntN(4)], vni)
				var pair sync.WaitGroup
				for _, x := range []*v1alpha1.Subnet{s, r} {
					pair.Go(func() {
						_, err := c.NetworkV1alpha1().Subnets(x.Namespace).Create(ctx, x, metav1.CreateOptions{})
						count(err)
					})
				}
				pair.Wait()
			} else {
				_, err := c.NetworkV1alpha1().Subnets(ns).Create(ctx, s, metav1.CreateOptions{})
				if apierrors.IsAlreadyExists(err) {
					err = c.NetworkV1alpha1().Subnets(ns).Delete(ctx, name, metav1.DeleteOptions{})
				}
				count(err)
			}
			sleep(ctx, time.Duration(50+rng.IntN(150))*time.Millisecond)
		}
	})
	// Attachments.
	for w := range 3 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(2+w)))
			for ctx.Err() == nil {
				ns := namespaces[rng.IntN(len(namespaces))]
				name := fmt.Sprintf("a%d", rng.IntN(40))
				_, err := c.NetworkV1alpha1().NetworkAttachments(ns).Create(ctx, newAttachment(ns, name, fmt.Sprintf("s%d", rng.IntN(6))), metav1.CreateOptions{})
				if apierrors.IsAlreadyExists(err) {
					err = c.NetworkV1alpha1().NetworkAttachments(ns).Delete(ctx, name, metav1.DeleteOptions{})
				}
				count(err)
				sleep(ctx, time.Duration(10+rng.IntN(40))*time.Millisecond)
			}
		})
	}
	// Validated never goes back, so two conflicting validated subnets
	// would be a lasting fault: look for one all along.
	wg.Go(func() {
		rivalsSeen := 0
		for ctx.Err() == nil {
			snap, err := takeSnapshot(ctx, c, namespaces...)
			if err == nil {
				if err := snap.noConflictingValidated(); err != nil {
					t.Errorf("during the churn: %v", err)
				}
				if snap.hasRivals() {
					rivalsSeen++
				}
			}
			sleep(ctx, 250*time.Millisecond)
		}
		t.Logf("conflicting subnets existed in %d snapshots", rivalsSeen)
		if rivalsSeen == 0 {
			t.Error("the churn never made conflicting subnets exist at once")
		}
	})
	wg.Wait()
	return writes
}

// seedRivals creates two overlapping subnets of one VNI at the same moment,
// named rival-a and rival-b (names the churn never touches), in the first
// namespace. The server's own conflict check is best effort against its
// cache, so creating them one after the other would be refused; created at
// once they usually both pass. It tries again until both exist.
func seedRivals(ctx context.Context, t *testing.T, c versioned.Interface, namespaces []string, vni uint32, block string) {
	t.Helper()
	ns := namespaces[0]
	subnets := c.NetworkV1alpha1().Subnets(ns)
	for attempt := 1; attempt <= 50; attempt++ {
		var pair sync.WaitGroup
		errs := make([]error, 2)
		for i, name := range []string{"rival-a", "rival-b"} {
			pair.Go(func() {
				_, errs[i] = subnets.Create(ctx, newSubnet(ns, name, block, vni), metav1.CreateOptions{})
			})
		}
		pair.Wait()
		if errs[0] == nil && errs[1] == nil {
			t.Logf("rival subnets created at once after %d attempts", attempt)
			return
		}
		for _, name := range []string{"rival-a", "rival-b"} {
			if err := subnets.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatalf("deleting %s/%s to try again: %v", ns, name, err)
			}
		}
	}
	t.Fatalf("could not make two conflicting subnets exist at once in 50 attempts: the server's best-effort check refused one each time")
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// checkInvariants waits until the managers have caught up with the churn
// and checks that no address is held twice in a VNI, no two conflicting
// subnets are validated, and every attachment of a validated subnet has an
// address unless the subnet is full.
func checkInvariants(t *testing.T, c versioned.Interface, namespaces []string) {
	t.Helper()
	var snap *snapshot
	poll.Until(t, 2*time.Minute, "the managers caught up", func(ctx context.Context) error {
		s, err := takeSnapshot(ctx, c, namespaces...)
		if err != nil {
			return err
		}
		snap = s
		if err := s.noConflictingValidated(); err != nil {
			return err
		}
		if err := s.uniqueAddresses(); err != nil {
			return err
		}
		return s.addressesSettled()
	})
	validated, addressed := 0, 0
	for _, s := range snap.subnets {
		if s.Status.Validated {
			validated++
		}
	}
	for _, a := range snap.attachments {
		if a.Status.IPv4 != "" {
			addressed++
		}
	}
	t.Logf("after the churn: %d subnets (%d validated), %d attachments (%d addressed), %d locks",
		len(snap.subnets), validated, len(snap.attachments), addressed, len(snap.locks))
	if validated == 0 || addressed == 0 {
		t.Errorf("the churn left %d validated subnets and %d addressed attachments; want some of each", validated, addressed)
	}
}

// TestIntegrationTwoManagersInProcess runs two managers with leader
// election off, each with its own clients and informers, under churn.
func TestIntegrationTwoManagersInProcess(t *testing.T) {
	c := kosClient(t)
	namespaces := []string{newNamespace(t), newNamespace(t)}
	startManager(t, "manager-1", 2)
	startManager(t, "manager-2", 2)
	ctx, cancel := context.WithTimeout(context.Background(), churnDuration)
	defer cancel()
	writes := churn(ctx, t, c, rand.Uint64(), namespaces, []uint32{140, 141, 142})
	t.Logf("%d writes of churn", writes)
	checkInvariants(t, c, namespaces)
}

// TestIntegrationTwoManagersKilled runs two kos-controller-manager
// processes with leader election off under churn, killing each (SIGKILL)
// and starting it again in turn.
func TestIntegrationTwoManagersKilled(t *testing.T) {
	c := kosClient(t)
	kos := startKOS(t)
	namespaces := []string{newNamespace(t), newNamespace(t)}
	managers := []*managerProcess{
		startManagerProcess(t, kos, "manager-1"),
		startManagerProcess(t, kos, "manager-2"),
	}
	ctx, cancel := context.WithTimeout(context.Background(), churnDuration)
	defer cancel()
	killer := make(chan struct{})
	go func() {
		defer close(killer)
		for _, m := range managers {
			sleep(ctx, churnDuration/4)
			m.kill(t)
			sleep(ctx, 2*time.Second)
			m.start(t)
		}
	}()
	writes := churn(ctx, t, c, rand.Uint64(), namespaces, []uint32{150, 151, 152})
	<-killer
	t.Logf("%d writes of churn", writes)
	checkInvariants(t, c, namespaces)

	// The processes serve metrics and health on their own address.
	for _, m := range managers {
		metrics := get(t, "http://"+m.metricsAddr+"/metrics", 200)
		if !containsAll(metrics, "kos_attachment_create_to_address_seconds_bucket", `workqueue_adds_total{name="kos_ipam"}`) {
			t.Errorf("%s: /metrics lacks the address latency or the queue metrics", m.name)
		}
		get(t, "http://"+m.metricsAddr+"/healthz", 200)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// httpGet returns the status code of a GET.
func httpGet(ctx context.Context, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// managerProcess is a kos-controller-manager process talking to
// kos-apiserver directly, without leader election.
type managerProcess struct {
	name        string
	args        []string
	logFile     string
	metricsAddr string
	cmd         *exec.Cmd
	done        chan struct{}
}

func startManagerProcess(t *testing.T, kos *testenv.KOS, name string) *managerProcess {
	t.Helper()
	env := testenv.Shared(t)
	m := &managerProcess{
		name:        name,
		logFile:     filepath.Join(t.TempDir(), name+".log"),
		metricsAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))),
	}
	m.args = []string{
		"--kubeconfig=" + env.Kubeconfig,
		"--kos-api-server=" + kos.URL,
		"--kos-api-ca-file=" + kos.CACertFile,
		"--leader-elect=false",
		"--ipam-workers=2",
		"--metrics-bind-address=" + m.metricsAddr,
		"--v=1",
	}
	m.start(t)
	t.Cleanup(func() { m.kill(t) })
	return m
}

func (m *managerProcess) start(t *testing.T) {
	t.Helper()
	log, err := os.OpenFile(m.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	m.cmd = exec.Command(testenv.Build(t, "cmd/kos-controller-manager"), m.args...)
	m.cmd.Stdout, m.cmd.Stderr = log, log
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", m.name, err)
	}
	m.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(m.cmd, m.done)
	poll.Until(t, time.Minute, m.name+" ready", func(ctx context.Context) error {
		select {
		case <-m.done:
			data, _ := os.ReadFile(m.logFile)
			t.Fatalf("%s exited while starting; log:\n%s", m.name, data)
		default:
		}
		resp, err := httpGet(ctx, "http://"+m.metricsAddr+"/readyz")
		if err != nil {
			return err
		}
		if resp != 200 {
			return fmt.Errorf("/readyz: %d", resp)
		}
		return nil
	})
}

// kill sends SIGKILL: the process gets no chance to finish its writes.
func (m *managerProcess) kill(t *testing.T) {
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
	t.Logf("killed %s", m.name)
}

func freePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		port := 10000 + rand.IntN(32768-10000)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatal("no free port below 32768 on 127.0.0.1")
	return 0
}
