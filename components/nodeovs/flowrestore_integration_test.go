package nodeovs

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/tools/ovsenv"
)

// TestIntegrationFlowRestoreWait restarts kos-ovs, as the agent pod's ovs
// container restarts, under a switch with two pods plugged, while a
// stand-in for the agent repairs the switch as the agent does (Ensure
// every 200 ms; on lost flows, the attachments again and FlowsRestored)
// and one pod pings the other every 20 ms. With --flow-restore-wait,
// kos-ovs starts ovs-vswitchd on its existing database with
// other_config:flow-restore-wait=true, and the stand-in's FlowsRestored
// removes it; when nothing does, kos-ovs removes it itself once the wait
// has passed. The ping gaps are logged: with the userspace datapath, the
// only one here, nothing survives the restart for the key to keep.
func TestIntegrationFlowRestoreWait(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait string
		// agent says whether the stand-in runs after the restart.
		agent bool
		// sawWait is whether the stand-in should find the key set.
		sawWait bool
	}{
		{name: "no wait", wait: "0s", agent: true},
		{name: "wait", wait: "1m", agent: true, sawWait: true},
		{name: "wait, no agent", wait: "2s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			ns := ovsenv.NetnsT(t)
			dir := t.TempDir()
			runDir := filepath.Join(dir, "run")
			k := startKOSOVS(t, ns, dir, "--flow-restore-wait="+tc.wait)
			waitReady(t, ns, k)

			fab := ovs.New(ovs.Config{RunDir: runDir, DatapathType: "netdev"})
			if _, err := fab.Ensure(ctx); err != nil {
				t.Fatal(err)
			}
			a := fabric.LocalAttachment{VNI: 7, IP: netip.MustParseAddr("10.7.0.1")}
			b := fabric.LocalAttachment{VNI: 7, IP: netip.MustParseAddr("10.7.0.2")}
			podA := plugPod(t, ctx, fab, ns, a)
			plugPod(t, ctx, fab, ns, b)
			if got, err := podA.Ping(ctx, b.IP, 3, time.Second); err != nil || got != 3 {
				t.Fatalf("ping before the restart: %d of 3 replies (%v)", got, err)
			}

			flowRestoreWait := func() string {
				cmd := exec.CommandContext(ctx, "ovs-vsctl", "--timeout=5", "--if-exists", "get", "Open_vSwitch", ".", "other_config:"+ovs.FlowRestoreWait)
				cmd.Env = append(os.Environ(), "OVS_RUNDIR="+runDir)
				out, _ := cmd.Output()
				return strings.Trim(strings.TrimSpace(string(out)), `"`)
			}
			// The stand-in for the agent.
			var (
				mu       sync.Mutex
				repaired time.Time
				sawWait  bool
			)
			standIn, stopStandIn := context.WithCancel(ctx)
			var wg sync.WaitGroup
			if tc.agent {
				wg.Go(func() {
					for standIn.Err() == nil {
						time.Sleep(200 * time.Millisecond)
						lost, err := fab.Ensure(standIn)
						if err != nil || !lost {
							continue
						}
						if err := fab.CreateLocal(standIn, a, b); err != nil {
							continue
						}
						waiting := flowRestoreWait() == "true"
						if err := fab.FlowsRestored(standIn); err != nil {
							t.Errorf("FlowsRestored: %v", err)
						}
						mu.Lock()
						repaired, sawWait = time.Now(), sawWait || waiting
						mu.Unlock()
					}
				})
			}
			// The pinger records the longest run of lost replies.
			var gap time.Duration
			wg.Go(func() {
				last := time.Now()
				for standIn.Err() == nil {
					if got, _ := podA.Ping(standIn, b.IP, 1, 20*time.Millisecond); got == 1 {
						gap, last = max(gap, time.Since(last)), time.Now()
					}
				}
			})

			time.Sleep(300 * time.Millisecond)
			stopped := time.Now()
			if err := k.Stop(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			k = startKOSOVS(t, ns, dir, "--flow-restore-wait="+tc.wait)
			waitReady(t, ns, k)
			answered := time.Since(stopped)
			if !tc.agent {
				if got := flowRestoreWait(); got != "true" {
					t.Errorf("%s after kos-ovs started again: %q, want true", ovs.FlowRestoreWait, got)
				}
			}
			deadline := time.Now().Add(30 * time.Second)
			for flowRestoreWait() != "" && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
			if got := flowRestoreWait(); got != "" {
				t.Errorf("%s 30s after the restart: %q, want it removed", ovs.FlowRestoreWait, got)
			}
			cleared := time.Since(stopped)
			if tc.agent {
				deadline := time.Now().Add(30 * time.Second)
				for {
					mu.Lock()
					done := !repaired.IsZero()
					mu.Unlock()
					if done || time.Now().After(deadline) {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			// Let the pings resume before the gap is read; with no agent
			// the pods have no flows.
			if got, err := podA.Ping(ctx, b.IP, 50, 200*time.Millisecond); tc.agent && (err != nil || got == 0) {
				t.Errorf("ping after the restart: %d of 50 replies (%v)", got, err)
			}
			stopStandIn()
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			if sawWait != tc.sawWait {
				t.Errorf("the stand-in found %s set: %t, want %t", ovs.FlowRestoreWait, sawWait, tc.sawWait)
			}
			if !tc.agent {
				t.Logf("--flow-restore-wait=%s: kos-ovs answered %s after it was stopped, removed the key after %s",
					tc.wait, answered.Round(time.Millisecond), cleared.Round(time.Millisecond))
				return
			}
			t.Logf("--flow-restore-wait=%s: kos-ovs answered %s after it was stopped, flows repaired after %s, key gone after %s; longest ping gap %s",
				tc.wait, answered.Round(time.Millisecond), repaired.Sub(stopped).Round(time.Millisecond), cleared.Round(time.Millisecond), gap.Round(time.Millisecond))
		})
	}
}

// plugPod plugs a veth pair in place of att's port, its other end in a
// pod's namespace with att's addresses, and returns the pod's namespace.
func plugPod(t *testing.T, ctx context.Context, fab *ovs.Fabric, node *ovsenv.Netns, att fabric.LocalAttachment) *ovsenv.Netns {
	t.Helper()
	pod := ovsenv.NetnsT(t)
	if err := ovsenv.AddVethPair(ctx, node, att.InterfaceName(), pod, "net1"); err != nil {
		t.Fatal(err)
	}
	if _, err := node.Run(ctx, "ip", "link", "set", att.InterfaceName(), "up"); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"ip", "link", "set", "net1", "address", att.MAC().String()},
		{"ip", "addr", "add", att.IP.String() + "/24", "dev", "net1"},
		{"ip", "link", "set", "net1", "up"},
	} {
		if _, err := pod.Run(ctx, cmd[0], cmd[1:]...); err != nil {
			t.Fatal(err)
		}
	}
	if err := fab.PlugLocal(ctx, fabric.Plug{LocalAttachment: att, Owner: "pod"}); err != nil {
		t.Fatalf("PlugLocal: %v", err)
	}
	return pod
}
