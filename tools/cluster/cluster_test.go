package cluster

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/tools/golden"
)

func TestFreeSubnet(t *testing.T) {
	p := netip.MustParsePrefix
	tests := []struct {
		name    string
		pool    netip.Prefix
		bits    int
		used    []netip.Prefix
		want    netip.Prefix
		wantErr bool
	}{
		{name: "empty", pool: p("192.168.250.0/24"), bits: 30, want: p("192.168.250.0/30")},
		{name: "first taken", pool: p("192.168.250.0/24"), bits: 30, used: []netip.Prefix{p("192.168.250.1/32")}, want: p("192.168.250.4/30")},
		{name: "wide route", pool: p("10.244.0.0/16"), bits: 24, used: []netip.Prefix{p("10.244.0.0/23")}, want: p("10.244.2.0/24")},
		{name: "pool inside a used network", pool: p("10.244.0.0/16"), bits: 24, used: []netip.Prefix{p("10.0.0.0/8")}, wantErr: true},
		{name: "other networks", pool: p("192.168.250.0/24"), bits: 30, used: []netip.Prefix{p("192.0.2.0/24")}, want: p("192.168.250.0/30")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := freeSubnet(tt.pool, tt.bits, tt.used)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("freeSubnet: got %s, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("freeSubnet: got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestLinkNames(t *testing.T) {
	out := strings.Join([]string{
		"1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000\\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00",
		"2: eth0@if31: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP mode DEFAULT group default qlen 1000\\    link/ether 4e:0c:6b:21:94:0a brd ff:ff:ff:ff:ff:ff link-netnsid 0",
		"3: cni0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP mode DEFAULT group default qlen 1000\\    link/ether a6:e2:80:80:6a:06 brd ff:ff:ff:ff:ff:ff",
		"4: veth1c2d3e4f@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue master cni0 state UP mode DEFAULT group default\\    link/ether d2:b8:33:fb:a4:9d brd ff:ff:ff:ff:ff:ff link-netns cni-1",
		"5: br-ul: <BROADCAST,MULTICAST,PROMISC,UP,LOWER_UP> mtu 1500 qdisc fq_codel state UNKNOWN mode DEFAULT group default qlen 1000\\    link/ether 4e:0c:6b:21:94:0a brd ff:ff:ff:ff:ff:ff",
		"",
	}, "\n")
	want := []string{"lo", "eth0", "cni0", "veth1c2d3e4f", "br-ul"}
	if diff := cmp.Diff(want, linkNames(out)); diff != "" {
		t.Errorf("linkNames (-want +got):\n%s", diff)
	}
}

func TestNewNodeState(t *testing.T) {
	ctx := t.Context()
	n, err := newNodeState(ctx, "/tmp/env", 0, NodeOptions{
		PodCIDR: netip.MustParsePrefix("10.99.0.0/24"),
		Labels:  map[string]string{"a": "b"},
	}, underlay{Prefix: netip.MustParsePrefix("192.168.77.5/29")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n.Name != defaultNodeName || n.NodeDir != "/tmp/env/node" || n.Link.String() != "192.168.77.0/29" ||
		n.hostIP().String() != "192.168.77.1" || n.nodeIP().String() != "192.168.77.2" {
		t.Errorf("node: got name %s, folder %s, underlay %s (host %s, node %s)", n.Name, n.NodeDir, n.Link, n.hostIP(), n.nodeIP())
	}
	if n.Netns != n.HostLink || len(n.HostLink) > 15 || len(n.Bridge) > 15 || n.CgroupRoot != "/"+n.Netns {
		t.Errorf("node names: netns %q, host link %q, bridge %q, cgroup %q; want short names", n.Netns, n.HostLink, n.Bridge, n.CgroupRoot)
	}

	// The third node of that cluster: on its underlay and bridge, the
	// next address, a folder and name of its own, and pods apart.
	third, err := newNodeState(ctx, "/tmp/env", 2, NodeOptions{}, underlay{Prefix: n.Link, Bridge: n.Bridge}, []*nodeState{n})
	if err != nil {
		t.Fatal(err)
	}
	if third.Name != "kos-node-3" || third.NodeDir != "/tmp/env/node3" || third.nodeIP().String() != "192.168.77.4" ||
		third.Bridge != n.Bridge || third.Link != n.Link || third.PodCIDR.Overlaps(n.PodCIDR) {
		t.Errorf("third node: got name %s, folder %s, IP %s, bridge %s, underlay %s, pods %s", third.Name, third.NodeDir, third.nodeIP(), third.Bridge, third.Link, third.PodCIDR)
	}
	// A /29 has room for the host and five nodes.
	if _, err := newNodeState(ctx, "/tmp/env", 5, NodeOptions{}, underlay{Prefix: n.Link, Bridge: n.Bridge}, nil); err == nil || !strings.Contains(err.Error(), "no room") {
		t.Errorf("a sixth node on a /29: got error %v, want no room", err)
	}

	// Picked networks avoid the other nodes', of old records too.
	other := &nodeState{Link: netip.MustParsePrefix("192.168.250.0/30"), PodCIDR: netip.MustParsePrefix("10.244.0.0/24")}
	n, err = newNodeState(ctx, "/tmp/env", 0, NodeOptions{}, underlay{}, []*nodeState{other})
	if err != nil {
		t.Fatal(err)
	}
	if n.Link.Overlaps(other.Link) || n.PodCIDR.Overlaps(other.PodCIDR) || !linkPool.Contains(n.Link.Addr()) || !podPool.Contains(n.PodCIDR.Addr()) || n.Link.Bits() != underlayBits {
		t.Errorf("picked underlay %s and pods %s next to a node with %s and %s", n.Link, n.PodCIDR, other.Link, other.PodCIDR)
	}
	if other.nodeIP().String() != "192.168.250.2" {
		t.Errorf("node IP of an old record: got %s, want the link's second address", other.nodeIP())
	}

	_, err = newNodeState(ctx, "/tmp/env", 0, NodeOptions{PodCIDR: netip.MustParsePrefix("10.1.0.0/24")},
		underlay{Prefix: netip.MustParsePrefix("10.1.0.0/31")}, nil)
	for _, want := range []string{"want an IPv4 network of /30 or wider", "overlaps pod CIDR"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad networks: got error %v, want one saying %q", err, want)
		}
	}
}

func TestHostPath(t *testing.T) {
	for _, tt := range []struct{ ovs, in, want string }{
		{in: "/var/lib/kos/etcd", want: "/env/node/root/var/lib/kos/etcd"},
		{in: "/var/lib/kos", want: "/env/node/root/var/lib/kos"},
		{in: "/run/kos/openvswitch/", want: "/env/node/root/var/run/kos/openvswitch"},
		{in: "/var/run/openvswitch", want: "/env/node/root/var/run/openvswitch"},
		{ovs: "/env/node/ovs/run", in: "/var/run/openvswitch/db.sock", want: "/env/node/ovs/run/db.sock"},
		{in: "/var/lib/kos-volumes/pv-1", want: "/env/node/root/var/lib/kos-volumes/pv-1"},
		{in: "/opt/cni/bin/kos", want: "/env/node/root/opt/cni/bin/kos"},
		{in: "/opt/cni", want: "/opt/cni"},
		{in: "/var/lib/kosmos", want: "/var/lib/kosmos"},
		{in: "/etc/hosts", want: "/etc/hosts"},
	} {
		n := Node{Dir: "/env/node", OVSRunDir: tt.ovs}
		if got := n.HostPath(tt.in); got != tt.want {
			t.Errorf("HostPath(%q) with OVS run dir %q: got %q, want %q", tt.in, tt.ovs, got, tt.want)
		}
	}
}

// TestLinkCNIPlugins checks the node's CNI plugin folder: a link to each
// Debian plugin and to Multus, made again on every start, while a plugin a
// DaemonSet installed stays and a link no longer wanted goes.
func TestLinkCNIPlugins(t *testing.T) {
	n := &nodeState{NodeDir: t.TempDir()}
	dir := n.hostPath(cniBinPath)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kos"), []byte("installed"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/gone/plugin", filepath.Join(dir, "gone")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := n.linkCNIPlugins("/cache/multus/v4.2.4/multus"); err != nil {
			t.Fatal(err)
		}
	}
	plugins, err := os.ReadDir(debianCNIDir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"kos": "file", "multus": "/cache/multus/v4.2.4/multus"}
	for _, p := range plugins {
		want[p.Name()] = filepath.Join(debianCNIDir, p.Name())
	}
	got := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			target = "file"
		}
		got[e.Name()] = target
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the node's %s (-want +got):\n%s", cniBinPath, diff)
	}
}

func TestUnescapeMountPath(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:           "/plain",
		`/with\040space`:   "/with space",
		`/tab\011and\134b`: "/tab\tand\\b",
		`/short\04`:        `/short\04`,
		`/not\999octal`:    `/not\999octal`,
	} {
		if got := unescapeMountPath(in); got != want {
			t.Errorf("unescapeMountPath(%q): got %q, want %q", in, got, want)
		}
	}
}

// TestConfigs compares the configurations a node writes with golden files;
// run with -update to rewrite them.
func TestConfigs(t *testing.T) {
	n := &nodeState{
		Dir:        "/env",
		NodeDir:    "/env/node",
		Name:       "kos-node",
		Labels:     map[string]string{"role.kos.example.com/workload": "true", "role.kos.example.com/control": "true"},
		Link:       netip.MustParsePrefix("192.168.250.0/30"),
		Bridge:     "kb-01020304",
		PodCIDR:    netip.MustParsePrefix("10.244.0.0/24"),
		CgroupRoot: "/kos-01020304",
	}
	dir := t.TempDir()
	n.NodeDir = filepath.Join(dir, "node")
	if err := writeCNIConfig(n, true); err != nil {
		t.Fatal(err)
	}
	kubelet, err := writeKubeletConfig("/env/client-ca.crt", n)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := writeProxyConfig(n, "/env/node/kube-proxy.kubeconfig")
	if err != nil {
		t.Fatal(err)
	}
	read := func(path string) string {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.ReplaceAll(string(data), dir, "/env")
	}
	n.NodeDir = "/env/node"
	got := map[string]string{
		"containerd.toml":      containerdConfig("/env/node/containerd", ContainerdOptions{SandboxImage: "kos.example.com/pause:1", CNIConfDir: "/env/node/net.d", CNIBinDir: cniBinPath}),
		"kubelet.json":         read(kubelet),
		"kube-proxy.json":      read(proxy),
		"kubelet-args.txt":     strings.Join(kubeletArgs("/env/node/kubelet.json", n), "\n") + "\n",
		"10-kos-node.conflist": read(filepath.Join(dir, "node", "net.d", "10-kos-node.conflist")),
		"00-multus.conf":       read(filepath.Join(dir, "node", "net.d", "00-multus.conf")),
		"hosts.toml":           registryHosts("192.168.250.1:5000"),
	}
	for name, content := range got {
		golden.Check(t, name, content)
	}
	var js any
	if err := json.Unmarshal([]byte(got["kubelet.json"]), &js); err != nil {
		t.Errorf("kubelet.json is not JSON: %v", err)
	}
}

// TestHostState checks the record of what nodes changed on the host: the
// first node in records the host, a node whose owner died is cleaned up
// after, and the last node out puts the host back.
func TestHostState(t *testing.T) {
	dir := t.TempDir()
	oldLock, oldState, oldPaths, oldSysctls, oldSysctlDir := hostLockFile, HostStateFile, hostPaths, hostSysctls, sysctlDir
	t.Cleanup(func() {
		hostLockFile, HostStateFile, hostPaths, hostSysctls, sysctlDir = oldLock, oldState, oldPaths, oldSysctls, oldSysctlDir
	})
	hostLockFile = filepath.Join(dir, "host.lock")
	HostStateFile = filepath.Join(dir, "host.json")
	existing := filepath.Join(dir, "existing")
	created := filepath.Join(dir, "created")
	if err := os.Mkdir(existing, 0o755); err != nil {
		t.Fatal(err)
	}
	hostPaths = []string{existing, created}
	// Kernel settings as files of a folder of the test's: a node of
	// another test package may be changing the real ones.
	sysctlDir = filepath.Join(dir, "sys")
	hostSysctls = []string{"kernel.panic"}
	if err := os.MkdirAll(filepath.Join(sysctlDir, "kernel"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeSysctl("kernel.panic", "1"); err != nil {
		t.Fatal(err)
	}

	self, selfBinary := selfOwner()
	// A process that has exited, and so owns nothing any more.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	node := func(name string, pid int, binary string) func([]*nodeState) (*nodeState, error) {
		return func([]*nodeState) (*nodeState, error) {
			nodeDir := filepath.Join(dir, name)
			if err := os.Mkdir(nodeDir, 0o755); err != nil {
				return nil, err
			}
			return &nodeState{Dir: nodeDir, NodeDir: nodeDir, Name: name, OwnerPID: pid, OwnerBinary: binary}, nil
		}
	}
	warn := func(err error) { t.Errorf("sweep: %v", err) }

	a, err := joinHost(node("a", self, selfBinary), warn)
	if err != nil {
		t.Fatal(err)
	}
	// A node makes the path; a node that joins later must not record it
	// as the host's own.
	if err := os.Mkdir(created, 0o755); err != nil {
		t.Fatal(err)
	}
	// As kubelet changes the kernel's settings.
	if err := writeSysctl("kernel.panic", "10"); err != nil {
		t.Fatal(err)
	}
	// A node's mount point the host lacks: created, and its outermost
	// new folder recorded.
	mountPoint := filepath.Join(dir, "made", "deep")
	if err := createHostPaths([]string{mountPoint, existing}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mountPoint); err != nil {
		t.Fatal(err)
	}
	b, err := joinHost(node("b", dead.Process.Pid, "true"), warn)
	if err != nil {
		t.Fatal(err)
	}
	st, err := readHostState()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{created, filepath.Join(dir, "made")}, st.Created); diff != "" {
		t.Errorf("created paths (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"kernel.panic": "1"}, st.Sysctls); diff != "" {
		t.Errorf("sysctls (-want +got):\n%s", diff)
	}
	if len(st.Nodes) != 2 {
		t.Fatalf("got %d nodes, want a and b", len(st.Nodes))
	}

	// b's owner is gone: the next join sweeps it.
	c, err := joinHost(node("c", self, selfBinary), warn)
	if err != nil {
		t.Fatal(err)
	}
	if st, err = readHostState(); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range st.Nodes {
		names = append(names, n.Name)
	}
	if diff := cmp.Diff([]string{"a", "c"}, names); diff != "" {
		t.Errorf("nodes after sweeping b (-want +got):\n%s", diff)
	}
	_ = b

	if err := leaveHost(a); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(created); err != nil {
		t.Errorf("a node left while c runs, and %s went: %v", created, err)
	}
	if got, _ := readSysctl("kernel.panic"); got != "10" {
		t.Errorf("kernel.panic after a node left while c runs: got %q, want 10 still", got)
	}
	if err := leaveHost(c); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{created, filepath.Join(dir, "made"), HostStateFile, hostLockFile} {
		if _, err := os.Stat(gone); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after the last node left, %s is still there (%v)", gone, err)
		}
	}
	if _, err := os.Stat(existing); err != nil {
		t.Errorf("%s existed before the nodes and must stay: %v", existing, err)
	}
	if got, err := readSysctl("kernel.panic"); err != nil || got != "1" {
		t.Errorf("kernel.panic after the last node left: got %q (%v), want 1 as before", got, err)
	}

	// HostNodes counts the nodes whose owners live. A record whose every
	// owner died, as a killed program or a machine restored from a
	// snapshot leaves it, counts none, and is cleaned up as the next
	// node's start would: the host put back, the files gone.
	e, err := joinHost(node("e", self, selfBinary), warn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := joinHost(node("f", dead.Process.Pid, "true"), warn); err != nil {
		t.Fatal(err)
	}
	if n, err := HostNodes(); err != nil || n != 1 {
		t.Errorf("HostNodes with a live node and a dead owner's: got %d (%v), want 1", n, err)
	}
	if err := leaveHost(e); err != nil {
		t.Fatal(err)
	}
	if _, err := joinHost(node("g", dead.Process.Pid, "true"), warn); err != nil {
		t.Fatal(err)
	}
	if err := writeSysctl("kernel.panic", "10"); err != nil {
		t.Fatal(err)
	}
	if n, err := HostNodes(); err != nil || n != 0 {
		t.Errorf("HostNodes with only a dead owner's node: got %d (%v), want 0", n, err)
	}
	for _, gone := range []string{HostStateFile, hostLockFile} {
		if _, err := os.Stat(gone); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after HostNodes swept the last node, %s is still there (%v)", gone, err)
		}
	}
	if got, err := readSysctl("kernel.panic"); err != nil || got != "1" {
		t.Errorf("kernel.panic after HostNodes swept the last node: got %q (%v), want 1 as before", got, err)
	}

	// A node that cannot even be set up leaves no record behind.
	_, err = joinHost(func([]*nodeState) (*nodeState, error) { return nil, errors.New("no networks") }, warn)
	if err == nil || err.Error() != "no networks" {
		t.Errorf("joinHost with a failing node: got error %v, want the node's", err)
	}
	for _, gone := range []string{HostStateFile, hostLockFile} {
		if _, err := os.Stat(gone); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after a node failed to join an idle host, %s is there (%v)", gone, err)
		}
	}
}
