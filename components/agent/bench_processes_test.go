package agent_test

// This file holds the processes the agents' benchmarks run and measure:
// agents as kos-agent runs them, the controller manager's program, clients
// with connections of their own, and each process's CPU time, memory,
// metrics and CPU profile.

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/agent"
	"github.com/kos-sdn/kos/components/fabric"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	kosscheme "github.com/kos-sdn/kos/components/generated/clientset/versioned/scheme"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/spawner"
	"github.com/kos-sdn/kos/tools/testenv"
)

// startBenchAgent runs an agent for node as kos-agent does with its
// default settings, but for the logging fabric fab: its workers, its
// client limits, a connection of its own to kos-apiserver and to the main
// cluster (unless -agent.shared-connection), and an Event recorder that
// sends to the main cluster. It authenticates to both with token, or as
// the admin when token is "". It runs until the benchmark ends.
func startBenchAgent(b *testing.B, node, hostIP string, fab fabric.Interface, token string) *runningAgent {
	b.Helper()
	opts := agent.NewOptions()
	cfg := agentConfig(b, node, hostIP, fab)
	cfg.FlowCheckPeriod, cfg.ReconcilePeriod, cfg.ExecTimeout = opts.FlowCheckPeriod, opts.ReconcilePeriod, opts.ExecTimeout
	kosCfg, kubeCfg := directConfig(b), rest.CopyConfig(testenv.Shared(b).RESTConfig)
	if token != "" {
		kosCfg, kubeCfg = withToken(kosCfg, token), withToken(kubeCfg, token)
	}
	for _, c := range []*rest.Config{kosCfg, kubeCfg} {
		c.QPS, c.Burst, c.UserAgent = opts.QPS, opts.Burst, "kos-agent/"+node
		if !*benchShared {
			// A Proxy function keeps client-go from sharing the
			// transport of equal configurations.
			c.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
		}
	}
	var err error
	if cfg.Client, err = kosclient.NewForConfig(kosCfg); err != nil {
		b.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(kubeCfg)
	if err != nil {
		b.Fatal(err)
	}
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	b.Cleanup(broadcaster.Shutdown)
	cfg.Recorder = broadcaster.NewRecorder(kosscheme.Scheme, corev1.EventSource{Component: "kos-agent", Host: node})
	cfg.Registerer = prometheus.NewRegistry()
	a, err := agent.New(cfg)
	if err != nil {
		b.Fatalf("creating the agent of %s: %v", node, err)
	}
	// The zero logger discards: five hundred agents' logs would drown
	// the figures.
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Logger{}))
	r := &runningAgent{agent: a, registry: cfg.Registerer.(*prometheus.Registry), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx, opts.Workers) }()
	b.Cleanup(func() { r.stop(b) })
	return r
}

// startManagerProcess runs the kos-controller-manager program with its
// default settings, straight to kos-apiserver, until the benchmark ends,
// with kubeconfig's identity, and returns its process id once it is ready
// (it holds the Lease).
func startManagerProcess(b *testing.B, kubeconfig string) string {
	b.Helper()
	kos := kosAPI(b)
	metrics := freeAddress(b)
	log := filepath.Join(b.TempDir(), "kos-controller-manager.log")
	logFile, err := os.Create(log)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(testenv.Build(b, "cmd/kos-controller-manager"), "--kubeconfig="+kubeconfig,
		"--kos-api-server="+kos.URL, "--kos-api-ca-file="+kos.CACertFile, "--metrics-bind-address="+metrics)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatalf("starting kos-controller-manager: %v", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(done)
	}()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			b.Errorf("kos-controller-manager did not stop within 30s of SIGTERM; its log is %s", log)
		}
	})
	p := &agentProcess{cmd: cmd, metrics: metrics, log: log, done: done}
	poll.Until(b, time.Minute, "kos-controller-manager is ready", func(context.Context) error {
		select {
		case <-done:
			data, _ := os.ReadFile(log)
			return fmt.Errorf("kos-controller-manager exited:\n%s", data)
		default:
		}
		code, body, err := p.get("/readyz")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("/readyz: %d %s", code, body)
		}
		return err
	})
	return strconv.Itoa(cmd.Process.Pid)
}

// benchRoles are the processes whose CPU BenchmarkAgents reports, by
// role: "agents" is this process.
var benchRoles = []string{"kos-apiserver", "kos-etcd", "controller-manager", "agents", "kube-apiserver", "kube-etcd"}

// benchPIDs are the process ids of benchRoles ("self" for this process).
type benchPIDs map[string]string

// benchProcesses returns the process ids of the package's kos-apiserver,
// its etcd, the main cluster's kube-apiserver and its etcd, the controller
// manager (manager) and this process.
func benchProcesses(b *testing.B, manager string) benchPIDs {
	kos := kosAPI(b)
	pids := benchPIDs{"controller-manager": manager, "agents": "self"}
	for _, p := range testenv.Shared(b).Processes() {
		role := map[string]string{
			"kos-apiserver-" + kos.Name: "kos-apiserver",
			"etcd-kos-" + kos.Name:      "kos-etcd",
			"kube-apiserver":            "kube-apiserver",
			"etcd":                      "kube-etcd",
		}[p.Name]
		if role != "" && p.Running {
			pids[role] = strconv.Itoa(p.PID)
		}
	}
	for _, role := range benchRoles {
		if pids[role] == "" {
			b.Fatalf("no %s runs", role)
		}
	}
	return pids
}

// cpuTimes are the CPU times (user and system) of benchRoles.
type cpuTimes map[string]time.Duration

func (p benchPIDs) cpu(b *testing.B) cpuTimes {
	out := cpuTimes{}
	for role, pid := range p {
		out[role] = processCPU(b, pid)
	}
	return out
}

func (c cpuTimes) since(before cpuTimes) cpuTimes {
	out := cpuTimes{}
	for role, t := range c {
		out[role] = t - before[role]
	}
	return out
}

// ownConnection returns a KOS client with a connection of its own: a Proxy
// function keeps client-go from sharing the transport of equal
// configurations.
func ownConnection(b *testing.B) kosclient.Interface {
	cfg := directConfig(b)
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	c, err := kosclient.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// profileServer writes a CPU profile of kos-apiserver over the next d (at
// least a second) to file, and sends the outcome on the channel it returns;
// with no file it sends nil at once.
func profileServer(b *testing.B, file string, d time.Duration) <-chan error {
	done := make(chan error, 1)
	if file == "" {
		done <- nil
		return done
	}
	cfg := directConfig(b)
	cfg.Timeout = d + time.Minute
	c, err := kosclient.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		data, err := c.RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(max(1, int(d.Seconds())))).DoRaw(context.Background())
		if err == nil {
			err = os.WriteFile(file, data, 0o644)
		}
		done <- err
	}()
	return done
}

// processCPU returns the user and system time of process pid ("self" for
// this one).
func processCPU(b *testing.B, pid string) time.Duration {
	b.Helper()
	d, err := spawner.CPUTime(pid)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// rssMiB returns the resident memory of process pid.
func rssMiB(b *testing.B, pid string) float64 {
	n, _ := strconv.Atoi(pid)
	rss, _ := processMemory(b, n)
	return rss
}

// processMemory returns the resident memory of process pid and its
// anonymous part (heap and stacks, not the binary's pages), in MiB.
func processMemory(b *testing.B, pid int) (rss, anon float64) {
	b.Helper()
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		b.Fatalf("reading the memory of process %d: %v", pid, err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		name, value, _ := strings.Cut(line, ":")
		kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 64)
		switch {
		case name != "VmRSS" && name != "RssAnon":
		case err != nil:
			b.Fatalf("parsing %q: %v", line, err)
		case name == "VmRSS":
			rss = kb / 1024
		default:
			anon = kb / 1024
		}
	}
	return rss, anon
}

// metric returns the value of an unlabelled metric of the agent process.
func (p *agentProcess) metric(b *testing.B, name string) float64 {
	b.Helper()
	_, body, err := p.get("/metrics")
	if err != nil {
		b.Fatalf("scraping the agent: %v", err)
	}
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("parsing %q: %v", line, err)
			}
			return f
		}
	}
	b.Fatalf("the agent has no metric %s", name)
	return 0
}
