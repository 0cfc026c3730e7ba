package agent_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// freeAddress returns a loopback address with a port nothing listens on.
func freeAddress(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// agentProcess is kos-agent running as a child process.
type agentProcess struct {
	cmd     *exec.Cmd
	metrics string
	log     string
	done    chan struct{}
}

func startAgentProcess(t testing.TB, bin string, args ...string) *agentProcess {
	t.Helper()
	p := &agentProcess{metrics: freeAddress(t), log: filepath.Join(t.TempDir(), "kos-agent.log"), done: make(chan struct{})}
	logFile, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, append(args, "--metrics-bind-address="+p.metrics, "--debug-bind-address="+freeAddress(t), "--v=2")...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting kos-agent: %v", err)
	}
	go func() {
		_ = p.cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			data, _ := os.ReadFile(p.log)
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			t.Logf("log of kos-agent %v:\n%s", args, strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})
	return p
}

// stop sends SIGTERM and waits for a clean exit.
func (p *agentProcess) stop(t testing.TB) {
	t.Helper()
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if code := p.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("kos-agent exited with status %d after SIGTERM", code)
		}
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Errorf("kos-agent did not stop within 30s of SIGTERM")
	}
}

// get fetches a path of the agent's HTTP endpoint.
func (p *agentProcess) get(path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.metrics+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// TestIntegrationCommand runs kos-agent as a program, twice: one reaches
// kos-apiserver directly, the other through the main cluster's aggregator.
// Their attachments get ready, and both serve /healthz and their metrics.
func TestIntegrationCommand(t *testing.T) {
	env := testenv.Shared(t)
	k := newAPI(t)
	kos := kosAPI(t)
	if !kos.Aggregated {
		t.Fatal("kos-apiserver is not registered with the aggregator")
	}
	const vni = 401
	k.subnet("s1", "10.40.0.0/24", vni)
	bin := testenv.Build(t, "cmd/kos-agent")
	common := []string{"--fabric=logging", "--kubeconfig=" + env.Kubeconfig, "--flow-check-period=500ms"}
	direct := startAgentProcess(t, bin, append(common, "--node-name="+k.node("a"), "--host-ip="+hostA,
		"--kos-api-server="+kos.URL, "--kos-api-ca-file="+kos.CACertFile)...)
	aggregated := startAgentProcess(t, bin, append(common, "--node-name="+k.node("b"), "--host-ip="+hostB)...)

	k.attachment("a1", k.node("a"), "s1")
	k.address("a1", "10.40.0.5", vni)
	k.attachment("b1", k.node("b"), "s1")
	k.address("b1", "10.40.0.6", vni)
	poll.Until(t, settle, "a1 is ready", k.ready("a1", hostA))
	poll.Until(t, settle, "b1 is ready", k.ready("b1", hostB))

	for name, p := range map[string]*agentProcess{"direct": direct, "aggregated": aggregated} {
		poll.Until(t, settle, name+" agent is healthy", func(context.Context) error {
			code, body, err := p.get("/healthz")
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("/healthz: %d %q %v", code, body, err)
			}
			return nil
		})
		poll.Until(t, settle, name+" agent reports its attachments", func(context.Context) error {
			_, body, err := p.get("/metrics")
			if err != nil {
				return err
			}
			for _, want := range []string{
				"kos_agent_local_attachments 1\n",
				"kos_agent_remote_attachments 1\n",
				"kos_agent_relevant_networks 1\n",
				"kos_agent_attachment_create_to_ready_seconds_count 1\n",
				`kos_agent_fabric_operation_duration_seconds_count{operation="create_local"}`,
				"process_resident_memory_bytes",
			} {
				if !strings.Contains(body, want) {
					return fmt.Errorf("/metrics has no %q", want)
				}
			}
			return nil
		})
	}
}

// TestIntegrationCommandFlags checks that bad flags are refused, all at
// once, before anything starts.
func TestCommandFlags(t *testing.T) {
	t.Parallel()
	bin := testenv.Build(t, "cmd/kos-agent")
	out, err := exec.Command(bin, "--fabric=switch", "--host-ip=fe80::1", "--workers=0", "--allowed-programs=bin/echo").CombinedOutput()
	if err == nil {
		t.Fatalf("kos-agent with bad flags succeeded:\n%s", out)
	}
	for _, want := range []string{`--host-ip "fe80::1"`, `--fabric "switch"`, "--workers 0", `"bin/echo" is not an absolute, clean path`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the output has no %q:\n%s", want, out)
		}
	}
}
