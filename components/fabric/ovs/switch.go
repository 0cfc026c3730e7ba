package ovs

// This file says how to talk to Open vSwitch: ovs-vsctl for the database
// (bridge, ports, interfaces), but for the plug's ports (ovsdb.go), and
// ovs-ofctl, through go-openvswitch, for flows. It knows nothing of
// attachments; fabric.go and flows.go do.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	goovs "github.com/digitalocean/go-openvswitch/ovs"
	"k8s.io/klog/v2"
)

// ovsClient runs the Open vSwitch tools against one OVS instance, the one
// whose run dir OVS_RUNDIR names in their environment, and talks to its
// ovsdb-server directly where that saves a tool run in a pod's ADD
// (ovsdb.go).
type ovsClient struct {
	env     []string
	timeout time.Duration
	db      *ovsdbConn
}

func newOVSClient(runDir string, timeout time.Duration) *ovsClient {
	env := os.Environ()
	if runDir != "" {
		env = append(env, "OVS_RUNDIR="+runDir)
	}
	c := &ovsClient{env: env, timeout: timeout}
	c.db = &ovsdbConn{socket: filepath.Join(c.runDir(), "db.sock"), timeout: timeout}
	return c
}

// run runs an OVS tool, with stdin if not nil, and returns what it wrote to
// standard output and standard error.
func (c *ovsClient) run(ctx context.Context, stdin io.Reader, name string, args ...string) (stdout, stderr []byte, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = c.env
	cmd.Stdin = stdin
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	start := time.Now()
	stdout, err = cmd.Output()
	klog.FromContext(ctx).V(5).Info("Ran an OVS tool", "command", name, "args", args, "duration", time.Since(start), "err", err)
	return stdout, errBuf.Bytes(), err
}

// vsctl runs ovs-vsctl. It waits, as ovs-vsctl does by default, until
// ovs-vswitchd has applied a change, so that new ports have their OpenFlow
// numbers when it returns.
func (c *ovsClient) vsctl(ctx context.Context, args ...string) ([]byte, error) {
	stdout, stderr, err := c.run(ctx, nil, "ovs-vsctl", args...)
	if err != nil {
		if said := strings.TrimSpace(string(stderr)); said != "" {
			return nil, fmt.Errorf("ovs-vsctl said %q: %w", said, err)
		}
		return nil, fmt.Errorf("ovs-vsctl: %w", err)
	}
	return stdout, nil
}

// lib returns a go-openvswitch client whose commands run through c, bound to
// ctx. Its ovs-ofctl speaks OpenFlow 1.4: bundles need it, and it prints
// set_field actions as they were written.
func (c *ovsClient) lib(ctx context.Context) *goovs.Client {
	combined := func(stdin io.Reader, cmd string, args []string) ([]byte, error) {
		stdout, stderr, err := c.run(ctx, stdin, cmd, args...)
		return append(stdout, stderr...), err
	}
	return goovs.New(
		goovs.Protocols([]string{goovs.ProtocolOpenFlow14}),
		goovs.Exec(func(cmd string, args ...string) ([]byte, error) { return combined(nil, cmd, args) }),
		goovs.Pipe(func(stdin io.Reader, cmd string, args ...string) ([]byte, error) { return combined(stdin, cmd, args) }),
	)
}

// ensureBridge creates the bridge and its tunnel port unless they exist, in
// one transaction, and sets their configuration either way: the tunnel
// port's UDP port is udpPort. Setting options that do not change the
// port's configuration changes nothing in ovs-vswitchd. An empty
// datapathType leaves the datapath to OVS (the kernel's); tests use the
// userspace one, "netdev", which must be set in the transaction that
// creates the bridge.
//
// fail_mode=secure keeps a bridge without flows (as after an ovs-vswitchd
// restart, before the agent repairs it) from acting as a learning switch,
// which would carry traffic between virtual networks.
func (c *ovsClient) ensureBridge(ctx context.Context, bridge, datapathType, tunnelPort string, udpPort int) error {
	bridgeSettings := []string{"fail_mode=secure"}
	if datapathType != "" {
		bridgeSettings = append(bridgeSettings, "datapath_type="+datapathType)
	}
	args := []string{"--may-exist", "add-br", bridge, "--", "set", "Bridge", bridge}
	args = append(args, bridgeSettings...)
	args = append(args,
		"--", "--may-exist", "add-port", bridge, tunnelPort,
		"--", "set", "Interface", tunnelPort, "type=vxlan", "options:key=flow", "options:remote_ip=flow",
		fmt.Sprintf("options:dst_port=%d", udpPort))
	if _, err := c.vsctl(ctx, args...); err != nil {
		return fmt.Errorf("creating bridge %s and port %s: %w", bridge, tunnelPort, err)
	}
	return nil
}

// internalPort is an OVS internal port: a network interface of the host
// that the bridge owns.
type internalPort struct {
	name        string
	mac         string
	mtu         int // asked of OVS (mtu_request) when not zero
	externalIDs map[string]string
}

// addInternalPorts creates or updates internal ports, all in one
// transaction.
func (c *ovsClient) addInternalPorts(ctx context.Context, bridge string, ports []internalPort) error {
	var args []string
	for _, p := range ports {
		args = append(args,
			"--", "--may-exist", "add-port", bridge, p.name,
			"--", "set", "Interface", p.name, "type=internal", fmt.Sprintf("mac=%q", p.mac))
		if p.mtu != 0 {
			args = append(args, fmt.Sprintf("mtu_request=%d", p.mtu))
		}
		for k, v := range p.externalIDs {
			args = append(args, fmt.Sprintf("external_ids:%s=%q", k, v))
		}
	}
	if _, err := c.vsctl(ctx, args...); err != nil {
		return fmt.Errorf("adding %d ports to bridge %s: %w", len(ports), bridge, err)
	}
	return nil
}

// systemPort is a port whose network interface exists already, made by
// someone else, such as the host end of a veth pair.
type systemPort struct {
	name        string
	externalIDs map[string]string
}

// addSystemPorts adds existing interfaces as ports, or updates the ports
// they are, all in one transaction.
func (c *ovsClient) addSystemPorts(ctx context.Context, bridge string, ports []systemPort) error {
	var args []string
	for _, p := range ports {
		args = append(args,
			"--", "--may-exist", "add-port", bridge, p.name,
			"--", "set", "Interface", p.name, "type=system")
		for k, v := range p.externalIDs {
			args = append(args, fmt.Sprintf("external_ids:%s=%q", k, v))
		}
	}
	if _, err := c.vsctl(ctx, args...); err != nil {
		return fmt.Errorf("adding %d existing interfaces to bridge %s: %w", len(ports), bridge, err)
	}
	return nil
}

// deletePorts deletes ports that exist, and waits until ovs-vswitchd has
// let go of them: over the kept OVSDB connection, or, when that does not
// work, with ovs-vsctl.
func (c *ovsClient) deletePorts(ctx context.Context, bridge string, names []string) error {
	err := c.deletePortsDirect(ctx, bridge, names)
	if err == nil {
		return nil
	}
	klog.FromContext(ctx).V(3).Info("Deleting ports over OVSDB did not work; running ovs-vsctl", "bridge", bridge, "count", len(names), "err", err)
	return c.deletePortsVsctl(ctx, bridge, names)
}

// deletePortsVsctl deletes ports that exist, all in one ovs-vsctl
// transaction.
func (c *ovsClient) deletePortsVsctl(ctx context.Context, bridge string, names []string) error {
	var args []string
	for _, n := range names {
		args = append(args, "--", "--if-exists", "del-port", bridge, n)
	}
	if _, err := c.vsctl(ctx, args...); err != nil {
		return fmt.Errorf("deleting %d ports from bridge %s: %w", len(names), bridge, err)
	}
	return nil
}

// bridgePorts returns the names of the ports of a bridge.
func (c *ovsClient) bridgePorts(ctx context.Context, bridge string) ([]string, error) {
	ports, err := c.lib(ctx).VSwitch.ListPorts(bridge)
	if err != nil {
		return nil, fmt.Errorf("listing the ports of bridge %s: %w", bridge, err)
	}
	return ports, nil
}

// interfaceRow is what KOS reads of a row of the Interface table.
type interfaceRow struct {
	Name   string
	Type   string
	MAC    string // the mac column: what was asked for, "" if nothing
	OFPort int    // 0 before ovs-vswitchd numbers the port, -1 when it failed
	// MTURequest is the MTU asked for (the mtu_request column), 0 if none.
	MTURequest int
	Error      string // why the interface does not work, if it does not
	// ExternalIDs is where KOS keeps what a port is for.
	ExternalIDs map[string]string
}

// interfaceColumns are the columns of the Interface table in an
// interfaceRow.
const interfaceColumns = "name,type,mac,ofport,mtu_request,error,external_ids"

// interfaces reads the named rows of the Interface table, or every row
// when no name is given.
func (c *ovsClient) interfaces(ctx context.Context, names ...string) ([]interfaceRow, error) {
	args := append([]string{"--format=json", "--data=json", "--columns=" + interfaceColumns, "list", "Interface"}, names...)
	out, err := c.vsctl(ctx, args...)
	if err != nil {
		return nil, fmt.Errorf("reading interfaces: %w", err)
	}
	return parseInterfaces(out)
}

// interfacesIfExist reads the rows of the Interface table of those of
// names that exist: over the kept OVSDB connection, or, when that does not
// work, with ovs-vsctl.
func (c *ovsClient) interfacesIfExist(ctx context.Context, names ...string) ([]interfaceRow, error) {
	rows, err := c.interfacesDirect(ctx, names)
	if err == nil {
		return rows, nil
	}
	klog.FromContext(ctx).V(3).Info("Reading interfaces over OVSDB did not work; running ovs-vsctl", "count", len(names), "err", err)
	args := append([]string{"--if-exists", "--format=json", "--data=json", "--columns=" + interfaceColumns, "list", "Interface"}, names...)
	out, err := c.vsctl(ctx, args...)
	if err != nil {
		return nil, fmt.Errorf("reading interfaces: %w", err)
	}
	return parseInterfaces(out)
}

// parseInterfaces decodes the JSON table that interfaces asks for.
func parseInterfaces(out []byte) ([]interfaceRow, error) {
	var table struct {
		Headings []string            `json:"headings"`
		Data     [][]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(out, &table); err != nil {
		return nil, fmt.Errorf("decoding the Interface table: %w", err)
	}
	rows := make([]interfaceRow, 0, len(table.Data))
	for _, data := range table.Data {
		if len(data) != len(table.Headings) {
			return nil, fmt.Errorf("decoding the Interface table: a row has %d columns, want %d", len(data), len(table.Headings))
		}
		var row interfaceRow
		var errs []error
		for i, h := range table.Headings {
			var err error
			switch h {
			case "name":
				row.Name, err = ovsdbString(data[i])
			case "type":
				row.Type, err = ovsdbString(data[i])
			case "mac":
				row.MAC, err = ovsdbString(data[i])
			case "error":
				row.Error, err = ovsdbString(data[i])
			case "ofport":
				row.OFPort, err = ovsdbInt(data[i])
			case "mtu_request":
				row.MTURequest, err = ovsdbInt(data[i])
			case "external_ids":
				row.ExternalIDs, err = ovsdbMap(data[i])
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("column %s: %w", h, err))
			}
		}
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("decoding the Interface table: %w", err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// OVSDB's JSON (RFC 7047) writes an optional value as the value itself or,
// when absent, as the empty set ["set",[]]; a map as ["map",[[k,v],...]].

func ovsdbString(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	return "", ovsdbEmptySet(raw)
}

func ovsdbInt(raw json.RawMessage) (int, error) {
	var n int
	if err := json.Unmarshal(raw, &n); err == nil {
		return n, nil
	}
	return 0, ovsdbEmptySet(raw)
}

func ovsdbEmptySet(raw json.RawMessage) error {
	var set []json.RawMessage
	if err := json.Unmarshal(raw, &set); err != nil || len(set) != 2 || string(set[0]) != `"set"` {
		return fmt.Errorf("unexpected value %s", raw)
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(set[1], &elems); err != nil || len(elems) != 0 {
		return fmt.Errorf("unexpected set %s", raw)
	}
	return nil
}

func ovsdbMap(raw json.RawMessage) (map[string]string, error) {
	var m []json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || len(m) != 2 || string(m[0]) != `"map"` {
		return nil, fmt.Errorf("unexpected map %s", raw)
	}
	var pairs [][2]string
	if err := json.Unmarshal(m[1], &pairs); err != nil {
		return nil, fmt.Errorf("unexpected map %s: %w", raw, err)
	}
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		out[p[0]] = p[1]
	}
	return out, nil
}

// flowMod is a change to a bridge's flows: deletions, then additions.
type flowMod struct {
	deletes []*goovs.MatchFlow
	adds    []*goovs.Flow
}

// bundle applies flow changes, in order, in one OpenFlow bundle: one
// ovs-ofctl run, applied atomically, so packets never see half of a change.
// A change can thus replace flows by deleting them first.
func (c *ovsClient) bundle(ctx context.Context, bridge string, mods ...flowMod) error {
	var nDel, nAdd int
	for _, m := range mods {
		nDel += len(m.deletes)
		nAdd += len(m.adds)
	}
	if nDel == 0 && nAdd == 0 {
		return nil
	}
	err := c.lib(ctx).OpenFlow.AddFlowBundle(bridge, func(tx *goovs.FlowTransaction) error {
		for _, m := range mods {
			tx.Delete(m.deletes...)
			tx.Add(m.adds...)
		}
		return tx.Commit()
	})
	if err != nil {
		return fmt.Errorf("deleting %d and adding %d flows on bridge %s: %w", nDel, nAdd, bridge, err)
	}
	return nil
}

// dumpFlows returns the flows of a bridge that match.
func (c *ovsClient) dumpFlows(ctx context.Context, bridge string, match *goovs.MatchFlow) (flows []*goovs.Flow, err error) {
	// The library's parser of ovs-ofctl's output panics on some flows
	// (unbalanced parentheses in the actions, found by FuzzDumpedFlow); a
	// flow someone else put on the bridge must not crash the agent.
	defer func() {
		if r := recover(); r != nil {
			flows, err = nil, fmt.Errorf("reading the flows of bridge %s: ovs-ofctl printed a flow that cannot be parsed: %v", bridge, r)
		}
	}()
	flows, err = c.lib(ctx).OpenFlow.DumpFlowsWithFlowArgs(bridge, match)
	if err != nil {
		return nil, fmt.Errorf("reading the flows of bridge %s: %w", bridge, err)
	}
	for _, f := range flows {
		fixTunnelSource(f)
	}
	return flows, nil
}

// parseFlow parses one flow as ovs-ofctl dump-flows prints it, with the
// library's parser, turning its panics into errors.
func parseFlow(line string) (f *goovs.Flow, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("parsing flow %q: %v", line, r)
		}
	}()
	f = new(goovs.Flow)
	if err := f.UnmarshalText([]byte(line)); err != nil {
		return nil, fmt.Errorf("parsing flow %q: %w", line, err)
	}
	fixTunnelSource(f)
	return f, nil
}
