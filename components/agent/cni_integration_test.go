package agent_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kos-sdn/kos/components/agent/cniserver"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/cni"
	"github.com/kos-sdn/kos/components/fabric"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
)

// podMTU is the MTU of the test's fabric, and so of its pods' interfaces.
const podMTU = 1450

// cniClient sends CNI requests to an agent's socket, as kos-cni does.
type cniClient struct {
	t      *testing.T
	socket string
	client *http.Client
}

func newCNIClient(t *testing.T, socket string) *cniClient {
	return &cniClient{t: t, socket: socket, client: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}}
}

// do sends req and returns the result of an ADD, or the CNI error.
func (c *cniClient) do(req cni.Request) (*types100.Result, *types.Error) {
	c.t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := c.client.Post("http://kos-agent"+cni.RequestPath, "application/json", bytes.NewReader(body))
	if err != nil {
		c.t.Fatalf("%s: %v", req.Command, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		cniErr := &types.Error{}
		if err := json.Unmarshal(answer, cniErr); err != nil {
			c.t.Fatalf("%s: answer %s %q is no CNI error: %v", req.Command, resp.Status, answer, err)
		}
		return nil, cniErr
	}
	if len(answer) == 0 {
		return nil, nil
	}
	res := &types100.Result{}
	if err := json.Unmarshal(answer, res); err != nil {
		c.t.Fatalf("%s: answer %q is no CNI result: %v", req.Command, answer, err)
	}
	return res, nil
}

// mustSucceed fails the test when a request failed.
func (c *cniClient) mustSucceed(req cni.Request) *types100.Result {
	c.t.Helper()
	res, cniErr := c.do(req)
	if cniErr != nil {
		c.t.Fatalf("%s of container %s: %v (code %d)", req.Command, req.ContainerID, cniErr, cniErr.Code)
	}
	return res
}

// sandbox is a pod's sandbox in a test: a network namespace and the
// requests the runtime would make for its interface net1.
type sandbox struct {
	netns       *ovsenv.Netns
	pod         cni.Pod
	containerID string
}

func (s *sandbox) request(command string) cni.Request {
	return cni.Request{
		Command: command, ContainerID: s.containerID, Netns: "/run/netns/" + s.netns.Name, IfName: "net1",
		Pod: s.pod, Network: "blue-net", Subnet: "blue",
	}
}

// podAttachment creates the attachment of interface net1 of a pod, as
// kos-controller-manager does, and gives it ip, as IPAM does.
func (a *api) podAttachment(pod cni.Pod, node, subnet, ip string, vni uint32) string {
	a.t.Helper()
	name := v1alpha1.AttachmentName(pod.Name, "net1")
	a.attachment(name, node, subnet, func(att *v1alpha1.NetworkAttachment) {
		att.Labels = map[string]string{v1alpha1.PodUIDLabel: pod.UID}
		att.Annotations = map[string]string{v1alpha1.PodAnnotation: pod.Name, v1alpha1.InterfaceAnnotation: "net1"}
	})
	if ip != "" {
		a.address(name, ip, vni)
	}
	return name
}

// shortDir returns a folder for Unix sockets, whose paths must be short,
// removed when the test ends.
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kos-cni")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// transfer sends size bytes over TCP from one namespace to another
// address, and returns an error unless they arrive intact.
func transfer(ctx context.Context, from, to *ovsenv.Netns, dst netip.Addr, size int) error {
	var l net.Listener
	if err := to.Do(func() error {
		var err error
		l, err = net.Listen("tcp4", netip.AddrPortFrom(dst, 5001).String())
		return err
	}); err != nil {
		return err
	}
	defer l.Close()
	received := make(chan [32]byte, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			received <- [32]byte{}
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		h := sha256.New()
		_, _ = io.Copy(h, c)
		received <- [32]byte(h.Sum(nil))
	}()
	var conn net.Conn
	if err := from.Do(func() error {
		var err error
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp4", netip.AddrPortFrom(dst, 5001).String())
		return err
	}); err != nil {
		return err
	}
	data := bytes.Repeat([]byte("kos pods carry bulk traffic. "), size/29+1)[:size]
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	_, err := conn.Write(data)
	conn.Close()
	if err != nil {
		return fmt.Errorf("sending: %w", err)
	}
	select {
	case got := <-received:
		if got != sha256.Sum256(data) {
			return fmt.Errorf("%d bytes arrived damaged or short", size)
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// TestIntegrationCNI runs an agent with its CNI server on a real KOS API
// and Open vSwitch, and drives it as kos-cni would for two pods: ADD plugs
// a veth pair into each pod's namespace with the attachment's MAC address,
// address, MTU and subnet route, and they ping and carry TCP; CHECK passes;
// the interfaces survive an ovs-vswitchd restart and an agent restart; a
// stale DEL removes nothing; DEL removes the pod's interface and leaves
// the attachment without a port, as it was before its ADD (a pod's
// attachment's only port is its veth); a new sandbox's ADD replaces an
// internal port an older agent made; ADDs fail with messages that say
// why.
func TestIntegrationCNI(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	k := newAPI(t)
	const vni = 231
	k.subnet("blue", "10.231.0.0/24", vni)
	inst := ovsenv.StartT(t, ovsenv.Options{})
	newFabric := func() *ovs.Fabric {
		return ovs.New(ovs.Config{RunDir: inst.RunDir, DatapathType: "netdev", MTU: podMTU})
	}
	fab := newFabric()
	cfg := agentConfig(t, k.node("a"), hostA, fab)
	cfg.CNI = cniserver.Config{
		Socket:            filepath.Join(shortDir(t), "cni.sock"),
		Wait:              5 * time.Second,
		HostNetns:         "/run/netns/" + inst.Netns.Name,
		NoChecksumOffload: true,
	}
	first := startAgent(t, cfg)
	c := newCNIClient(t, cfg.CNI.Socket)

	pods := []*sandbox{
		{netns: ovsenv.NetnsT(t), pod: cni.Pod{Namespace: k.ns, Name: "web-0", UID: "uid-web-0"}, containerID: "c0"},
		{netns: ovsenv.NetnsT(t), pod: cni.Pod{Namespace: k.ns, Name: "web-1", UID: "uid-web-1"}, containerID: "c1"},
	}
	ips := []netip.Addr{netip.MustParseAddr("10.231.0.10"), netip.MustParseAddr("10.231.0.11")}
	atts := make([]fabric.LocalAttachment, len(pods))
	for i, p := range pods {
		k.podAttachment(p.pod, k.node("a"), "blue", ips[i].String(), vni)
		atts[i] = fabric.LocalAttachment{VNI: vni, IP: ips[i]}
	}

	// The socket answers once the agent has reconciled.
	serving := func() {
		t.Helper()
		poll.Until(t, settle, "the CNI server answers STATUS", func(context.Context) error {
			if _, err := os.Stat(cfg.CNI.Socket); err != nil {
				return err
			}
			if _, cniErr := c.do(cni.Request{Command: cni.CommandStatus}); cniErr != nil {
				return cniErr
			}
			return nil
		})
	}
	serving()
	// The agent has reconciled with both attachments, and made them no
	// port: the ADD plugs the only one.
	for _, att := range atts {
		if out, err := inst.Netns.Run(ctx, "ip", "-o", "link", "show", att.InterfaceName()); err == nil {
			t.Errorf("before the ADDs, %s exists: %s; want no port before the pod's veth", att.InterfaceName(), out)
		}
	}

	for i, p := range pods {
		began := time.Now()
		res := c.mustSucceed(p.request(cni.CommandAdd))
		t.Logf("ADD of %s took %s", p.pod.Name, time.Since(began).Round(time.Millisecond))
		zero := 0
		want := &types100.Result{
			CNIVersion: types100.ImplementedSpecVersion,
			Interfaces: []*types100.Interface{{Name: "net1", Mac: atts[i].MAC().String(), Mtu: podMTU, Sandbox: "/run/netns/" + p.netns.Name}},
			IPs:        []*types100.IPConfig{{Interface: &zero, Address: net.IPNet{IP: ips[i].AsSlice(), Mask: net.CIDRMask(24, 32)}}},
			Routes:     []*types.Route{{Dst: net.IPNet{IP: net.IPv4(10, 231, 0, 0).To4(), Mask: net.CIDRMask(24, 32)}}},
		}
		if diff := cmp.Diff(res, want); diff != "" {
			t.Errorf("result of ADD of %s (-got +want):\n%s", p.pod.Name, diff)
		}
	}
	links, err := pods[0].netns.Run(ctx, "ip", "-o", "link", "show", "net1")
	if err != nil || !strings.Contains(links, fmt.Sprintf("mtu %d", podMTU)) || !strings.Contains(links, atts[0].MAC().String()) {
		t.Errorf("net1 of web-0: %q (%v), want MTU %d and MAC %s", links, err, podMTU, atts[0].MAC())
	}
	routes, err := pods[0].netns.Run(ctx, "ip", "route", "show", "dev", "net1")
	if err != nil || !strings.Contains(routes, "10.231.0.0/24") {
		t.Errorf("routes of net1 of web-0: %q (%v), want one to 10.231.0.0/24", routes, err)
	}

	wantPlugs := []fabric.Plug{{LocalAttachment: atts[0], Owner: "c0/net1"}, {LocalAttachment: atts[1], Owner: "c1/net1"}}
	checkPlugs := func(step string, f *ovs.Fabric, want []fabric.Plug) {
		t.Helper()
		got, err := f.Plugs(ctx, atts...)
		if err != nil {
			t.Fatalf("%s: Plugs: %v", step, err)
		}
		if diff := cmp.Diff(got, want, cmpopts.EquateComparable(netip.Addr{}), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: plugs (-got +want):\n%s", step, diff)
		}
	}
	carries := func(step string) {
		t.Helper()
		poll.Until(t, settle, step+": web-0 pings web-1", func(ctx context.Context) error {
			if got, err := pods[0].netns.Ping(ctx, ips[1], 1, time.Second); err != nil || got != 1 {
				return fmt.Errorf("%d of 1 replies (%v)", got, err)
			}
			return nil
		})
		if got, err := pods[0].netns.Ping(ctx, ips[1], 3, time.Second); err != nil || got != 3 {
			t.Errorf("%s: ping from web-0 to web-1: %d of 3 replies (%v), want 3", step, got, err)
		}
		if err := transfer(ctx, pods[1].netns, pods[0].netns, ips[0], 8<<20); err != nil {
			t.Errorf("%s: 8 MiB over TCP from web-1 to web-0: %v", step, err)
		}
	}
	checkPlugs("added", fab, wantPlugs)
	carries("added")
	for _, p := range pods {
		if _, cniErr := c.do(p.request(cni.CommandCheck)); cniErr != nil {
			t.Errorf("CHECK of %s: %v", p.pod.Name, cniErr)
		}
	}

	if err := inst.RestartVSwitchd(ctx); err != nil {
		t.Fatal(err)
	}
	carries("after an ovs-vswitchd restart")
	checkPlugs("after an ovs-vswitchd restart", fab, wantPlugs)

	first.stop(t)
	fab = newFabric()
	cfg.Fabric = fab
	startAgent(t, cfg)
	serving()
	poll.Until(t, settle, "the restarted agent holds both pods", holds(fab, &fabric.Inventory{Local: atts}))
	carries("after an agent restart")
	checkPlugs("after an agent restart", fab, wantPlugs)

	// A DEL of an earlier sandbox of web-0 removes nothing of the current one.
	stale := pods[0].request(cni.CommandDel)
	stale.ContainerID, stale.Netns = "c0-earlier", ""
	c.mustSucceed(stale)
	checkPlugs("after a stale DEL", fab, wantPlugs)
	if _, cniErr := c.do(pods[0].request(cni.CommandCheck)); cniErr != nil {
		t.Errorf("CHECK of web-0 after a stale DEL: %v", cniErr)
	}

	// DEL removes web-0's interface and its port, and makes none in its
	// place. A DEL again, or of an unknown container, succeeds.
	c.mustSucceed(pods[0].request(cni.CommandDel))
	if out, err := pods[0].netns.Run(ctx, "ip", "link", "show", "net1"); err == nil {
		t.Errorf("web-0 still has net1 after DEL: %s", out)
	}
	if out, err := inst.Netns.Run(ctx, "ip", "-o", "link", "show", atts[0].InterfaceName()); err == nil {
		t.Errorf("after DEL, %s is %q, want no interface", atts[0].InterfaceName(), out)
	}
	checkPlugs("after DEL", fab, wantPlugs[1:])
	if err := holds(fab, &fabric.Inventory{Local: atts[1:]})(ctx); err != nil {
		t.Errorf("after DEL: %v", err)
	}
	c.mustSucceed(pods[0].request(cni.CommandDel))
	unknown := pods[0].request(cni.CommandDel)
	unknown.ContainerID, unknown.Pod = "unknown", cni.Pod{Namespace: k.ns, Name: "nobody"}
	c.mustSucceed(unknown)
	if _, cniErr := c.do(pods[0].request(cni.CommandCheck)); cniErr == nil {
		t.Errorf("CHECK of web-0 after DEL passed, want an error")
	}
	// A new sandbox of web-0 gets its interface again, in place of an
	// internal port such as a 0.3.0 agent made for a pod's attachment.
	if err := fab.CreateLocal(ctx, atts[0]); err != nil {
		t.Fatal(err)
	}
	pods[0].containerID = "c0-again"
	c.mustSucceed(pods[0].request(cni.CommandAdd))
	carries("after web-0's new sandbox")
	checkPlugs("after web-0's new sandbox", fab, []fabric.Plug{{LocalAttachment: atts[0], Owner: "c0-again/net1"}, wantPlugs[1]})

	// An ADD that comes before its pod's attachment waits for it.
	late := &sandbox{netns: ovsenv.NetnsT(t), pod: cni.Pod{Namespace: k.ns, Name: "web-2", UID: "uid-web-2"}, containerID: "c2"}
	added := make(chan *types.Error, 1)
	go func() {
		_, cniErr := c.do(late.request(cni.CommandAdd))
		added <- cniErr
	}()
	time.Sleep(500 * time.Millisecond)
	addressed := time.Now()
	k.podAttachment(late.pod, k.node("a"), "blue", "10.231.0.12", vni)
	if cniErr := <-added; cniErr != nil {
		t.Errorf("ADD of web-2 before its attachment: %v", cniErr)
	} else {
		t.Logf("ADD of web-2 answered %s after its attachment was made", time.Since(addressed).Round(time.Millisecond))
		if got, err := late.netns.Ping(ctx, ips[1], 3, time.Second); err != nil || got != 3 {
			t.Errorf("ping from web-2 to web-1: %d of 3 replies (%v), want 3", got, err)
		}
	}

	// ADDs that cannot succeed say why.
	noSubnet := pods[1].request(cni.CommandAdd)
	noSubnet.Subnet = "green"
	nobody := (&sandbox{netns: pods[1].netns, pod: cni.Pod{Namespace: k.ns, Name: "nobody", UID: "uid-nobody"}, containerID: "c9"}).request(cni.CommandAdd)
	// IPAM refused the address web-3 asked for: its ADD fails with IPAM's
	// message at once, not after the wait.
	refused := &sandbox{netns: pods[1].netns, pod: cni.Pod{Namespace: k.ns, Name: "web-3", UID: "uid-web-3"}, containerID: "c3"}
	const taken = "Requested address 10.231.0.11 is taken by NetworkAttachment web-1-net1"
	k.updateStatus(k.podAttachment(refused.pod, k.node("a"), "blue", "", vni), func(st *v1alpha1.NetworkAttachmentStatus) {
		st.Errors.IPAM = []string{taken}
	})
	for _, tt := range []struct {
		name     string
		req      cni.Request
		wantCode uint
		wantMsg  string
	}{
		{"subnet missing", noSubnet, types.ErrInvalidNetworkConfig, fmt.Sprintf("subnet green not found in namespace %s", k.ns)},
		{"no attachment", nobody, types.ErrTryAgainLater, fmt.Sprintf("waited 5s: no NetworkAttachment %s/nobody-net1 for interface net1 of pod %s/nobody on node %s", k.ns, k.ns, k.node("a"))},
		{"address refused", refused.request(cni.CommandAdd), types.ErrTryAgainLater, fmt.Sprintf("NetworkAttachment %s/web-3-net1 has no address: %s", k.ns, taken)},
	} {
		began := time.Now()
		_, cniErr := c.do(tt.req)
		took := time.Since(began)
		if cniErr == nil || cniErr.Code != tt.wantCode || !strings.HasPrefix(cniErr.Msg, tt.wantMsg) {
			t.Errorf("%s: ADD failed with %v, want code %d and a message starting %q", tt.name, cniErr, tt.wantCode, tt.wantMsg)
		}
		t.Logf("%s: ADD failed after %s", tt.name, took.Round(time.Millisecond))
		if !strings.HasPrefix(tt.wantMsg, "waited") && took > cfg.CNI.Wait/2 {
			t.Errorf("%s: ADD failed after %s, want well within the wait of %s", tt.name, took.Round(time.Millisecond), cfg.CNI.Wait)
		}
	}
}
