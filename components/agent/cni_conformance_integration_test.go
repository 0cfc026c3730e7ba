package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/kos-sdn/kos/components/agent/cniserver"
	"github.com/kos-sdn/kos/components/cni"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// pluginRun is one run of the real kos-cni binary, as a runtime makes it.
type pluginRun struct {
	plugin, socket string
	command        string
	version        string
	sb             *sandbox
	// valid is the GC's cni.dev/valid-attachments.
	valid []types.GCAttachment
}

// run runs kos-cni and returns its standard output, and the CNI error code
// it printed (0 when it succeeded).
func (r pluginRun) run(ctx context.Context, t *testing.T) (string, uint) {
	t.Helper()
	conf := map[string]any{"cniVersion": r.version, "name": "blue-net", "type": "kos", "subnet": "blue"}
	if r.command == "GC" {
		conf["cni.dev/valid-attachments"] = r.valid
	}
	stdin, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, r.plugin)
	cmd.Env = []string{
		"CNI_COMMAND=" + r.command,
		"CNI_PATH=" + filepath.Dir(r.plugin),
		cni.SocketEnv + "=" + r.socket,
	}
	if r.command != "GC" && r.command != "STATUS" {
		cmd.Env = append(cmd.Env,
			"CNI_CONTAINERID="+r.sb.containerID,
			"CNI_NETNS=/run/netns/"+r.sb.netns.Name,
			"CNI_IFNAME=net1",
			fmt.Sprintf("CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=%s", r.sb.pod.Namespace, r.sb.pod.Name, r.sb.pod.UID),
		)
	}
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), 0
	case errors.As(err, &exit):
		cniErr := &types.Error{}
		if jerr := json.Unmarshal(stdout.Bytes(), cniErr); jerr != nil || cniErr.Code == 0 {
			t.Fatalf("%s %s: exit %d with %q, which is no CNI error (stderr %s)", r.command, r.version, exit.ExitCode(), stdout.String(), stderr.String())
		}
		return stdout.String(), cniErr.Code
	}
	t.Fatalf("running kos-cni: %v (stderr %s)", err, stderr.String())
	return "", 0
}

// TestIntegrationCNIConformance runs the real kos-cni binary against the
// real CNI server of an agent on a real KOS API and Open vSwitch, for each
// command and CNI version kubelet's runtime or Multus may use, with the
// agent up and then down: what each prints and its error code, the
// version of ADD's result, and the pod's interface after ADD, GC and DEL.
func TestIntegrationCNIConformance(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	k := newAPI(t)
	const vni = 235
	k.subnet("blue", "10.235.0.0/24", vni)
	inst := ovsenv.StartT(t, ovsenv.Options{})
	cfg := agentConfig(t, k.node("a"), hostA, ovs.New(ovs.Config{RunDir: inst.RunDir, DatapathType: "netdev", MTU: podMTU}))
	cfg.CNI = cniserver.Config{
		Socket:            filepath.Join(shortDir(t), "cni.sock"),
		Wait:              5 * time.Second,
		HostNetns:         "/run/netns/" + inst.Netns.Name,
		NoChecksumOffload: true,
	}
	running := startAgent(t, cfg)
	plugin := testenv.Build(t, "cmd/kos-cni")

	versions := []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"}
	sandboxes := map[string]*sandbox{}
	addrs := map[string]netip.Addr{}
	for i, v := range versions {
		name := "web-" + strings.ReplaceAll(v, ".", "")
		sb := &sandbox{netns: ovsenv.NetnsT(t), pod: cni.Pod{Namespace: k.ns, Name: name, UID: "uid-" + name}, containerID: "c-" + name}
		addrs[v] = netip.MustParseAddr(fmt.Sprintf("10.235.0.%d", 10+i))
		k.podAttachment(sb.pod, k.node("a"), "blue", addrs[v].String(), vni)
		sandboxes[v] = sb
	}
	poll.Until(t, settle, "the CNI server answers STATUS", func(ctx context.Context) error {
		if out, code := (pluginRun{plugin: plugin, socket: cfg.CNI.Socket, command: "STATUS", version: "1.1.0"}).run(ctx, t); code != 0 {
			return fmt.Errorf("code %d: %s", code, out)
		}
		return nil
	})

	// hasNet1 says whether a sandbox has its interface.
	hasNet1 := func(sb *sandbox) bool {
		_, err := sb.netns.Run(ctx, "ip", "link", "show", "net1")
		return err == nil
	}
	// upTo1_1 and so on give the code a command gets by version: CHECK
	// came with 0.4.0, GC and STATUS with 1.1.0; skel refuses them earlier
	// with code 1 (incompatible CNI versions).
	byVersion := func(old, new uint, since string) map[string]uint {
		m := map[string]uint{}
		reached := false
		for _, v := range versions {
			reached = reached || v == since
			m[v] = old
			if reached {
				m[v] = new
			}
		}
		return m
	}
	all := func(code uint) map[string]uint { return byVersion(code, code, versions[0]) }
	const incompatible = types.ErrIncompatibleCNIVersion

	type step struct {
		command string
		// valid, for GC: whether the sandbox is among the valid
		// attachments; the other sandboxes always are.
		valid    bool
		wantCode map[string]uint
		// wantNet1 is whether the sandbox has net1 afterwards, by code:
		// checked only when set.
		wantNet1 func(code uint) *bool
	}
	yes, no := true, false
	is := func(b *bool) func(uint) *bool { return func(uint) *bool { return b } }
	tests := []struct {
		name    string
		agentUp bool
		steps   []step
	}{{
		name:    "agent up",
		agentUp: true,
		steps: []step{
			{command: "ADD", wantCode: all(0), wantNet1: is(&yes)},
			{command: "CHECK", wantCode: byVersion(incompatible, 0, "0.4.0")},
			{command: "GC", valid: true, wantCode: byVersion(incompatible, 0, "1.1.0"), wantNet1: is(&yes)},
			{command: "STATUS", wantCode: byVersion(incompatible, 0, "1.1.0")},
			// A GC that names no valid attachment releases the sandbox.
			{command: "GC", wantCode: byVersion(incompatible, 0, "1.1.0"), wantNet1: func(code uint) *bool {
				if code == 0 {
					return &no
				}
				return &yes
			}},
			{command: "DEL", wantCode: all(0), wantNet1: is(&no)},
			{command: "DEL", wantCode: all(0)},
			// Plugged again, for the agent-down rows.
			{command: "ADD", wantCode: all(0), wantNet1: is(&yes)},
		},
	}, {
		name: "agent down",
		steps: []step{
			{command: "ADD", wantCode: all(types.ErrTryAgainLater)},
			{command: "CHECK", wantCode: byVersion(incompatible, types.ErrTryAgainLater, "0.4.0")},
			{command: "GC", wantCode: byVersion(incompatible, 0, "1.1.0")},
			{command: "STATUS", wantCode: byVersion(incompatible, types.ErrPluginNotAvailable, "1.1.0")},
			// The pod must be able to go; its interface goes with the
			// namespace, and the agent cleans up when it runs again.
			{command: "DEL", wantCode: all(0)},
		},
	}}
	for _, tt := range tests {
		if !tt.agentUp {
			running.stop(t)
		}
		for _, v := range versions {
			sb := sandboxes[v]
			for i, st := range tt.steps {
				r := pluginRun{plugin: plugin, socket: cfg.CNI.Socket, command: st.command, version: v, sb: sb}
				for _, other := range versions {
					if other != v || st.valid {
						r.valid = append(r.valid, types.GCAttachment{ContainerID: sandboxes[other].containerID, IfName: "net1"})
					}
				}
				out, code := r.run(ctx, t)
				name := fmt.Sprintf("%s: %s of CNI %s (step %d)", tt.name, st.command, v, i+1)
				if code != st.wantCode[v] {
					t.Errorf("%s: code %d, want %d (output %s)", name, code, st.wantCode[v], out)
					continue
				}
				if st.command == "ADD" && code == 0 {
					checkVersionedResult(t, name, out, v, sb, addrs[v])
				}
				if st.wantNet1 != nil {
					if want := st.wantNet1(code); want != nil && hasNet1(sb) != *want {
						t.Errorf("%s: the sandbox has net1: %t, want %t", name, !*want, *want)
					}
				}
			}
		}
	}
	// GC released only the sandbox it was asked to, and the agent, down,
	// served nothing: each sandbox's port stays as its last ADD left it.
	fab := ovs.New(ovs.Config{RunDir: inst.RunDir, DatapathType: "netdev", MTU: podMTU})
	var atts []fabric.LocalAttachment
	for _, v := range versions {
		atts = append(atts, fabric.LocalAttachment{VNI: vni, IP: addrs[v]})
	}
	plugs, err := fab.Plugs(ctx, atts...)
	if err != nil {
		t.Fatal(err)
	}
	if len(plugs) != len(versions) {
		t.Errorf("after the agent went down: plugs %v, want one per sandbox", plugs)
	}
	for _, v := range versions {
		if !hasNet1(sandboxes[v]) {
			t.Errorf("in the end, sandbox of CNI %s has no net1", v)
		}
	}
}

// checkVersionedResult checks that an ADD printed a result of CNI version
// v with the sandbox's interface and address.
func checkVersionedResult(t *testing.T, step, out, v string, sb *sandbox, addr netip.Addr) {
	t.Helper()
	var res struct {
		CNIVersion string `json:"cniVersion"`
		Interfaces []struct {
			Name    string `json:"name"`
			Sandbox string `json:"sandbox"`
		} `json:"interfaces"`
		IPs []struct {
			Version string `json:"version"`
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Errorf("%s: output %q is no result: %v", step, out, err)
		return
	}
	if res.CNIVersion != v {
		t.Errorf("%s: result of version %q, want %q", step, res.CNIVersion, v)
	}
	if len(res.Interfaces) != 1 || res.Interfaces[0].Name != "net1" || res.Interfaces[0].Sandbox != "/run/netns/"+sb.netns.Name {
		t.Errorf("%s: interfaces %+v, want net1 in %s", step, res.Interfaces, sb.netns.Name)
	}
	wantVersion := ""
	if v < "1.0.0" {
		wantVersion = "4" // 0.3.x and 0.4.0 results name the IP version
	}
	if len(res.IPs) != 1 || res.IPs[0].Address != addr.String()+"/24" || res.IPs[0].Version != wantVersion {
		t.Errorf("%s: ips %+v, want %s/24 (version %q)", step, res.IPs, addr, wantVersion)
	}
}
