package cni_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/components/cni"
)

// pluginEnv, when set to 1, makes the test binary run as kos-cni, so that
// the tests drive the plugin exactly as a runtime does: environment, stdin,
// stdout and exit status.
const pluginEnv = "KOS_CNI_TEST_PLUGIN"

// sandboxPath stands for a sandbox's network namespace (CNI_NETNS): the
// plugin opens it and passes the descriptor, and any file will do for that.
var sandboxPath string

func TestMain(m *testing.M) {
	if os.Getenv(pluginEnv) == "1" {
		cni.Main()
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "kos-cni-test-")
	if err != nil {
		panic(err)
	}
	sandboxPath = filepath.Join(dir, "c1")
	if err := os.WriteFile(sandboxPath, nil, 0o600); err != nil {
		panic(err)
	}
	status := m.Run()
	os.RemoveAll(dir)
	os.Exit(status)
}

// fakeAgent serves the agent's side of the protocol on a Unix socket of
// the test's own: it records each request and answers with answer.
type fakeAgent struct {
	socket string
	answer func(*cni.Request) (int, any)

	mu       sync.Mutex
	requests []cni.Request
	// passed says, per request, whether it came with sandboxPath's file
	// as a descriptor.
	passed []bool
}

func startFakeAgent(t *testing.T, answer func(*cni.Request) (int, any)) *fakeAgent {
	t.Helper()
	a := &fakeAgent{socket: filepath.Join(t.TempDir(), "cni.sock"), answer: answer}
	l, err := net.Listen("unix", a.socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ConnContext: cni.NetnsConnContext, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req cni.Request
		if r.URL.Path != cni.RequestPath || json.NewDecoder(r.Body).Decode(&req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		passed := false
		if f := cni.NetnsFile(r.Context()); f != nil {
			got, err1 := f.Stat()
			want, err2 := os.Stat(sandboxPath)
			passed = err1 == nil && err2 == nil && os.SameFile(got, want)
		}
		a.mu.Lock()
		a.requests = append(a.requests, req)
		a.passed = append(a.passed, passed)
		a.mu.Unlock()
		status, body := a.answer(&req)
		w.WriteHeader(status)
		switch b := body.(type) {
		case nil:
		case string:
			_, _ = w.Write([]byte(b))
		default:
			_ = json.NewEncoder(w).Encode(b)
		}
	})}
	go func() { _ = srv.Serve(cni.NetnsListener(l)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return a
}

func (a *fakeAgent) received() []cni.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]cni.Request(nil), a.requests...)
}

// invocation is one run of the plugin.
type invocation struct {
	command, containerID, netns, ifname, args string
	config                                    map[string]any
	// socket is where the plugin reaches the agent (cni.SocketEnv).
	socket string
}

// run runs kos-cni and returns its standard output and exit status.
func run(t *testing.T, inv invocation) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{
		pluginEnv + "=1",
		"CNI_COMMAND=" + inv.command,
		"CNI_CONTAINERID=" + inv.containerID,
		"CNI_NETNS=" + inv.netns,
		"CNI_IFNAME=" + inv.ifname,
		"CNI_ARGS=" + inv.args,
		"CNI_PATH=/opt/cni/bin",
		// The namespaces here are made up: skel must not check them.
		"CNI_NETNS_OVERRIDE=1",
	}
	if inv.socket != "" {
		cmd.Env = append(cmd.Env, cni.SocketEnv+"="+inv.socket)
	}
	if inv.config != nil {
		data, err := json.Marshal(inv.config)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdin = bytes.NewReader(data)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return stdout.String(), exit.ExitCode()
	case err != nil:
		t.Fatalf("running the plugin: %v (stderr %s)", err, stderr.String())
	}
	return stdout.String(), 0
}

// netConf returns a network configuration naming subnet blue. The socket
// is the test's (the plugin learns it from cni.SocketEnv, see TestCommands),
// not the configuration's.
func netConf(_ string, mods ...func(map[string]any)) map[string]any {
	c := map[string]any{"cniVersion": "1.0.0", "name": "blue-net", "type": "kos", "subnet": "blue"}
	for _, m := range mods {
		m(c)
	}
	return c
}

const podArgs = "IgnoreUnknown=1;K8S_POD_NAMESPACE=tenant-a;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=c1;K8S_POD_UID=0d7c6f0e-8d2f-4a4b-9c1e-3d5f6a7b8c9d"

var pod = cni.Pod{Namespace: "tenant-a", Name: "web-0", UID: "0d7c6f0e-8d2f-4a4b-9c1e-3d5f6a7b8c9d"}

func addOf(socket string, mods ...func(map[string]any)) invocation {
	return invocation{command: "ADD", containerID: "c1", netns: sandboxPath, ifname: "net1", args: podArgs, config: netConf(socket, mods...)}
}

// result is what the fake agent answers to ADD.
func result() *types100.Result {
	ip, ipnet, _ := net.ParseCIDR("10.20.0.5/24")
	ipnet.IP = ip
	_, subnet, _ := net.ParseCIDR("10.20.0.0/24")
	zero := 0
	return &types100.Result{
		CNIVersion: "1.0.0",
		Interfaces: []*types100.Interface{{Name: "net1", Mac: "06:14:00:05:00:07", Mtu: 1450, Sandbox: "/var/run/netns/c1"}},
		IPs:        []*types100.IPConfig{{Interface: &zero, Address: *ipnet}},
		Routes:     []*types.Route{{Dst: *subnet}},
	}
}

// decode decodes JSON output into a generic value, for comparison.
func decode(t *testing.T, out string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("output %q is not JSON: %v", out, err)
	}
	return v
}

func encode(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestVersion(t *testing.T) {
	out, status := run(t, invocation{command: "VERSION"})
	if status != 0 {
		t.Fatalf("VERSION exited with %d: %s", status, out)
	}
	want := map[string]any{"cniVersion": "1.1.0", "supportedVersions": []any{"0.3.1", "0.4.0", "1.0.0", "1.1.0"}}
	if diff := cmp.Diff(decode(t, out), any(want)); diff != "" {
		t.Errorf("VERSION output (-got +want):\n%s", diff)
	}
}

// TestCommands runs each command against a fake agent and checks what the
// plugin printed, its exit status and what it asked of the agent.
func TestCommands(t *testing.T) {
	ok := func(*cni.Request) (int, any) { return http.StatusOK, nil }
	okResult := func(*cni.Request) (int, any) { return http.StatusOK, result() }
	wantAdd := cni.Request{Command: "ADD", ContainerID: "c1", Netns: sandboxPath, IfName: "net1", Pod: pod, Network: "blue-net", Subnet: "blue"}
	downSocket := func(t *testing.T) string { return filepath.Join(t.TempDir(), "absent.sock") }

	tests := []struct {
		name   string
		answer func(*cni.Request) (int, any)
		// invoke returns the invocations to run against the agent's socket;
		// the last one's output is checked.
		invoke       func(socket string) []invocation
		agentDown    bool
		wantStatus   int
		wantOut      any // decoded JSON; nil for no output
		wantRequests []cni.Request
		// wantMsgPrefix, when set, is checked instead of the whole msg.
		wantMsgPrefix string
	}{{
		name:         "ADD prints the agent's result",
		answer:       okResult,
		invoke:       func(s string) []invocation { return []invocation{addOf(s)} },
		wantOut:      result(),
		wantRequests: []cni.Request{wantAdd},
	}, {
		name:         "a repeated ADD prints the same result",
		answer:       okResult,
		invoke:       func(s string) []invocation { return []invocation{addOf(s), addOf(s)} },
		wantOut:      result(),
		wantRequests: []cni.Request{wantAdd, wantAdd},
	}, {
		name:   "ADD forwards the addresses asked for",
		answer: okResult,
		invoke: func(s string) []invocation {
			inv := addOf(s, func(c map[string]any) {
				c["runtimeConfig"] = map[string]any{"ips": []string{"10.20.0.5/24"}}
			})
			inv.args += ";IP=10.20.0.6"
			return []invocation{inv}
		},
		wantOut: result(),
		wantRequests: []cni.Request{func() cni.Request {
			r := wantAdd
			r.IPs = []string{"10.20.0.5/24", "10.20.0.6"}
			return r
		}()},
	}, {
		name:   "ADD forwards the MAC address asked for",
		answer: okResult,
		invoke: func(s string) []invocation {
			return []invocation{addOf(s, func(c map[string]any) {
				c["runtimeConfig"] = map[string]any{"mac": "02:00:00:00:00:01"}
			})}
		},
		wantOut: result(),
		wantRequests: []cni.Request{func() cni.Request {
			r := wantAdd
			r.MAC = "02:00:00:00:00:01"
			return r
		}()},
	}, {
		name: "ADD prints the agent's error",
		answer: func(*cni.Request) (int, any) {
			return http.StatusNotFound, types.NewError(types.ErrInvalidNetworkConfig, "subnet blue not found in namespace tenant-a", "")
		},
		invoke:       func(s string) []invocation { return []invocation{addOf(s)} },
		wantStatus:   1,
		wantOut:      types.NewError(types.ErrInvalidNetworkConfig, "subnet blue not found in namespace tenant-a", ""),
		wantRequests: []cni.Request{wantAdd},
	}, {
		name:          "ADD without the agent says where it looked",
		agentDown:     true,
		invoke:        func(s string) []invocation { return []invocation{addOf(s)} },
		wantStatus:    1,
		wantOut:       types.NewError(types.ErrTryAgainLater, "kos-agent not reachable at ", ""),
		wantMsgPrefix: "kos-agent not reachable at ",
	}, {
		name:   "ADD of a configuration naming the plugin's socket",
		answer: okResult,
		invoke: func(s string) []invocation {
			return []invocation{addOf(s, func(c map[string]any) { c["socket"] = s })}
		},
		wantOut:      result(),
		wantRequests: []cni.Request{wantAdd},
	}, {
		name:   "ADD of a configuration naming another socket is refused",
		answer: okResult,
		invoke: func(s string) []invocation {
			return []invocation{addOf(s, func(c map[string]any) { c["socket"] = "/tmp/elsewhere.sock" })}
		},
		wantStatus:    1,
		wantOut:       types.NewError(types.ErrInvalidNetworkConfig, `network configuration "blue-net" sets "socket" to /tmp/elsewhere.sock: kos-cni reaches kos-agent only at `, ""),
		wantMsgPrefix: `network configuration "blue-net" sets "socket" to /tmp/elsewhere.sock: kos-cni reaches kos-agent only at `,
	}, {
		name:   "CHECK of a configuration naming another socket is refused",
		answer: ok,
		invoke: func(s string) []invocation {
			inv := addOf(s, func(c map[string]any) { c["socket"] = "/tmp/elsewhere.sock" })
			inv.command = "CHECK"
			return []invocation{inv}
		},
		wantStatus:    1,
		wantOut:       types.NewError(types.ErrInvalidNetworkConfig, `network configuration "blue-net" sets "socket" to /tmp/elsewhere.sock: kos-cni reaches kos-agent only at `, ""),
		wantMsgPrefix: `network configuration "blue-net" sets "socket" to /tmp/elsewhere.sock: kos-cni reaches kos-agent only at `,
	}, {
		name:   "DEL of a configuration naming another socket goes to the plugin's",
		answer: ok,
		invoke: func(s string) []invocation {
			return []invocation{{command: "DEL", containerID: "c1", ifname: "net1", args: podArgs, config: netConf(s, func(c map[string]any) { c["socket"] = "/tmp/elsewhere.sock" })}}
		},
		wantRequests: []cni.Request{{Command: "DEL", ContainerID: "c1", IfName: "net1", Pod: pod, Network: "blue-net", Subnet: "blue"}},
	}, {
		name:   "ADD of a configuration without a subnet",
		answer: okResult,
		invoke: func(s string) []invocation {
			return []invocation{addOf(s, func(c map[string]any) { delete(c, "subnet") })}
		},
		wantStatus: 1,
		wantOut:    types.NewError(types.ErrInvalidNetworkConfig, `network configuration "blue-net" names no subnet: set "subnet" to the name of a KOS Subnet in the pod's namespace`, ""),
	}, {
		name:   "ADD without a pod",
		answer: okResult,
		invoke: func(s string) []invocation {
			inv := addOf(s)
			inv.args = ""
			return []invocation{inv}
		},
		wantStatus: 1,
		wantOut:    types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_ARGS names no pod (K8S_POD_NAMESPACE and K8S_POD_NAME): kos-cni attaches Kubernetes pods only", ""),
	}, {
		name:   "ADD of an unsupported CNI version",
		answer: okResult,
		invoke: func(s string) []invocation {
			return []invocation{addOf(s, func(c map[string]any) { c["cniVersion"] = "0.2.0" })}
		},
		wantStatus: 1,
		wantOut:    types.NewError(types.ErrIncompatibleCNIVersion, "incompatible CNI versions", `config is "0.2.0", plugin supports ["0.3.1" "0.4.0" "1.0.0" "1.1.0"]`),
	}, {
		name:   "ADD of CNI version 0.3.1 prints a 0.3.1 result",
		answer: okResult,
		invoke: func(s string) []invocation {
			return []invocation{addOf(s, func(c map[string]any) { c["cniVersion"] = "0.3.1" })}
		},
		wantOut: map[string]any{
			"cniVersion": "0.3.1",
			// 0.3.1 has no MTU.
			"interfaces": []any{map[string]any{"name": "net1", "mac": "06:14:00:05:00:07", "sandbox": "/var/run/netns/c1"}},
			"ips":        []any{map[string]any{"version": "4", "interface": 0, "address": "10.20.0.5/24"}},
			"routes":     []any{map[string]any{"dst": "10.20.0.0/24"}},
			"dns":        map[string]any{},
		},
		wantRequests: []cni.Request{wantAdd},
	}, {
		name:   "CHECK of CNI version 0.4.0 forwards the previous result as 1.x's",
		answer: ok,
		invoke: func(s string) []invocation {
			inv := addOf(s, func(c map[string]any) {
				c["cniVersion"] = "0.4.0"
				c["prevResult"] = map[string]any{
					"cniVersion": "0.4.0",
					"interfaces": []any{map[string]any{"name": "net1", "mac": "06:14:00:05:00:07", "mtu": 1450, "sandbox": "/var/run/netns/c1"}},
					"ips":        []any{map[string]any{"version": "4", "interface": 0, "address": "10.20.0.5/24"}},
					"routes":     []any{map[string]any{"dst": "10.20.0.0/24"}},
				}
			})
			inv.command = "CHECK"
			return []invocation{inv}
		},
		wantRequests: []cni.Request{func() cni.Request {
			r := wantAdd
			r.Command = "CHECK"
			// 0.4.0 has no MTU.
			r.PrevResult = json.RawMessage(`{"cniVersion":"1.1.0","interfaces":[{"mac":"06:14:00:05:00:07","name":"net1","sandbox":"/var/run/netns/c1"}],"ips":[{"address":"10.20.0.5/24","interface":0}],"routes":[{"dst":"10.20.0.0/24"}]}`)
			return r
		}()},
	}, {
		name:         "ADD when the agent answers what is no CNI error",
		answer:       func(*cni.Request) (int, any) { return http.StatusInternalServerError, "boom\n" },
		invoke:       func(s string) []invocation { return []invocation{addOf(s)} },
		wantStatus:   1,
		wantOut:      types.NewError(types.ErrInternal, "kos-agent answered 500 Internal Server Error: boom", ""),
		wantRequests: []cni.Request{wantAdd},
	}, {
		name:   "DEL of an unknown container",
		answer: ok,
		invoke: func(s string) []invocation {
			return []invocation{{command: "DEL", containerID: "unknown", ifname: "net1", config: netConf(s)}}
		},
		wantRequests: []cni.Request{{Command: "DEL", ContainerID: "unknown", IfName: "net1", Network: "blue-net", Subnet: "blue"}},
	}, {
		name:   "ADD of a network namespace that does not exist",
		answer: okResult,
		invoke: func(s string) []invocation {
			inv := addOf(s)
			inv.netns = "/var/run/netns/gone"
			return []invocation{inv}
		},
		wantStatus: 1,
		wantOut:    types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_NETNS /var/run/netns/gone: the network namespace does not exist", ""),
	}, {
		name:   "DEL of a network namespace that went first",
		answer: ok,
		invoke: func(s string) []invocation {
			return []invocation{{command: "DEL", containerID: "c1", netns: "/var/run/netns/gone", ifname: "net1", args: podArgs, config: netConf(s)}}
		},
		wantRequests: []cni.Request{{Command: "DEL", ContainerID: "c1", Netns: "/var/run/netns/gone", IfName: "net1", Pod: pod, Network: "blue-net", Subnet: "blue"}},
	}, {
		name:      "DEL without the agent succeeds",
		agentDown: true,
		invoke: func(s string) []invocation {
			return []invocation{{command: "DEL", containerID: "c1", netns: "/var/run/netns/c1", ifname: "net1", args: podArgs, config: netConf(s)}}
		},
	}, {
		name:   "CHECK forwards the previous result",
		answer: ok,
		invoke: func(s string) []invocation {
			inv := addOf(s, func(c map[string]any) { c["prevResult"] = result() })
			inv.command = "CHECK"
			return []invocation{inv}
		},
		wantRequests: []cni.Request{func() cni.Request {
			r := wantAdd
			r.Command = "CHECK"
			r.PrevResult = json.RawMessage(encode(t, result()))
			return r
		}()},
	}, {
		name: "CHECK prints the agent's error",
		answer: func(*cni.Request) (int, any) {
			return http.StatusConflict, types.NewError(types.ErrInternal, "interface net1 has MAC address 02:00:00:00:00:01, want 06:14:00:05:00:07", "")
		},
		invoke: func(s string) []invocation {
			inv := addOf(s)
			inv.command = "CHECK"
			return []invocation{inv}
		},
		wantStatus:   1,
		wantOut:      types.NewError(types.ErrInternal, "interface net1 has MAC address 02:00:00:00:00:01, want 06:14:00:05:00:07", ""),
		wantRequests: []cni.Request{func() cni.Request { r := wantAdd; r.Command = "CHECK"; return r }()},
	}, {
		name:   "STATUS with the agent",
		answer: ok,
		invoke: func(s string) []invocation {
			return []invocation{{command: "STATUS", config: netConf(s, func(c map[string]any) { c["cniVersion"] = "1.1.0" })}}
		},
		wantRequests: []cni.Request{{Command: "STATUS", Network: "blue-net", Subnet: "blue"}},
	}, {
		name:   "GC forwards the valid attachments",
		answer: ok,
		invoke: func(s string) []invocation {
			return []invocation{{command: "GC", config: netConf(s, func(c map[string]any) {
				c["cniVersion"] = "1.1.0"
				c["cni.dev/valid-attachments"] = []any{map[string]any{"containerID": "c1", "ifname": "net1"}}
			})}}
		},
		wantRequests: []cni.Request{{Command: "GC", Network: "blue-net", Subnet: "blue", Valid: []cni.Attachment{{ContainerID: "c1", IfName: "net1"}}}},
	}, {
		name:      "GC without the agent succeeds",
		agentDown: true,
		invoke: func(s string) []invocation {
			return []invocation{{command: "GC", config: netConf(s, func(c map[string]any) { c["cniVersion"] = "1.1.0" })}}
		},
	}, {
		name:   "GC of CNI version 1.0.0 is refused",
		answer: ok,
		invoke: func(s string) []invocation {
			return []invocation{{command: "GC", config: netConf(s)}}
		},
		wantStatus: 1,
		wantOut:    types.NewError(types.ErrIncompatibleCNIVersion, "config version does not allow GC", ""),
	}, {
		name:      "STATUS without the agent",
		agentDown: true,
		invoke: func(s string) []invocation {
			return []invocation{{command: "STATUS", config: netConf(s, func(c map[string]any) { c["cniVersion"] = "1.1.0" })}}
		},
		wantStatus:    1,
		wantOut:       types.NewError(types.ErrPluginNotAvailable, "kos-agent not reachable at ", ""),
		wantMsgPrefix: "kos-agent not reachable at ",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var agent *fakeAgent
			var socket string
			if tt.agentDown {
				socket = downSocket(t)
			} else {
				agent = startFakeAgent(t, tt.answer)
				socket = agent.socket
			}
			var out string
			var status int
			for _, inv := range tt.invoke(socket) {
				if inv.socket == "" {
					inv.socket = socket
				}
				out, status = run(t, inv)
			}
			if status != tt.wantStatus {
				t.Errorf("exit status %d, want %d (output %s)", status, tt.wantStatus, out)
			}
			switch {
			case tt.wantOut == nil && out != "":
				t.Errorf("output %q, want none", out)
			case tt.wantOut != nil:
				got := decode(t, out)
				if tt.wantMsgPrefix != "" {
					m, _ := got.(map[string]any)
					if msg, _ := m["msg"].(string); strings.HasPrefix(msg, tt.wantMsgPrefix+socket) {
						m["msg"] = tt.wantMsgPrefix
					}
				}
				if diff := cmp.Diff(got, decode(t, encode(t, tt.wantOut))); diff != "" {
					t.Errorf("output (-got +want):\n%s", diff)
				}
			}
			if agent != nil {
				if diff := cmp.Diff(agent.received(), tt.wantRequests, cmp.Comparer(func(a, b json.RawMessage) bool {
					return bytes.Equal(compact(a), compact(b))
				})); diff != "" {
					t.Errorf("requests to the agent (-got +want):\n%s", diff)
				}
				// The namespace travels as a descriptor whenever it
				// exists.
				for i, r := range agent.received() {
					if want := r.Netns == sandboxPath; agent.passed[i] != want {
						t.Errorf("request %d (%s of %q) came with the namespace's descriptor: %t, want %t", i, r.Command, r.Netns, agent.passed[i], want)
					}
				}
			}
		})
	}
}

func compact(raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}

// TestInstall runs `kos-cni install` twice into a folder, as the agent's
// init container does on each start, and checks that the folder then holds
// the program, executable, and nothing else.
func TestInstall(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "kos")
	for range 2 {
		cmd := exec.Command(os.Args[0], cni.InstallCommand, dst)
		cmd.Env = []string{pluginEnv + "=1"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("install: %v: %s", err, out)
		}
	}
	want, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the program", dst)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("%s: mode %v (%v), want 0755", dst, fi.Mode(), err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Errorf("the folder holds %v (%v), want only kos", entries, err)
	}
	cmd := exec.Command(os.Args[0], cni.InstallCommand)
	cmd.Env = []string{pluginEnv + "=1"}
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "usage: kos-cni install <path>") {
		t.Errorf("install without a path: %v, %q; want a usage error", err, out)
	}
}
