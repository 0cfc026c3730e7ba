// Package nodecleanup is `kos-agent cleanup`: it removes from a node what
// kos-agent's pod made there, once the kos-agent addon is gone. It lives
// beside package nodeovs, whose Open vSwitch it starts from its database
// to delete KOS's bridges with their devices, and apart from the agent,
// which runs none of it. What it removes (as the 0.3.0 manifests run the
// pod, both variants):
//
//   - bridge kos (Bridge) with its VXLAN port and the attachments' ports, in
//     the Open vSwitch the agent programmed: the node's own one when it ran
//     (--host-ovs-run-dir, adopted), else the one kos-ovs ran from the
//     database in /var/lib/kos/openvswitch. ovs-vswitchd exits without
//     --cleanup when the pod stops, so the bridges' devices stay: the
//     kernel datapath's ports, and the userspace datapath's tap devices
//     (bridge, internal ports and ovs-netdev), which are persistent.
//   - with the userspace datapath, bridge br-ul (UnderlayBridge), which
//     holds the node's interface as a port, and the record of the address
//     move (kos-underlay.json in the database folder).
//   - the tunnel filter: the nftables table ip kos-tunnel (kernel
//     datapath), and the filter's flows on an underlay bridge that stays
//     (userspace datapath, in the node's own Open vSwitch or a kos-ovs
//     still running under --force).
//   - the host ends of pods' veth pairs (kos and twelve hex digits) while a
//     pod is left; they go with the pod's network namespace otherwise.
//   - files: the CNI plugin /opt/cni/bin/kos (and the temporary files of an
//     interrupted install beside it), the CNI socket /var/run/kos/cni.sock,
//     kos-ovs's run and database folders, and the folders the pod's
//     hostPath volumes made (DirectoryOrCreate): /var/run/kos,
//     /var/lib/kos and, on a node without Open vSwitch of its own, an empty
//     /var/run/openvswitch.
//
// The agent sets no sysctl; kos-ovs sets arp_ignore on the underlay
// interface and puts it back when it stops (Release, again here).
package nodecleanup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/kos-sdn/kos/components/cni"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/components/nodeovs"
)

// Where the 0.3.0 manifests put the agent's files on the node, the defaults
// of Config.
const (
	DefaultCNIBinary     = "/opt/cni/bin/kos"
	DefaultHostOVSRunDir = "/var/run/openvswitch"
)

// hostVethName matches the names of the agent's interfaces
// (v1alpha1.InterfaceName): the host ends of pods' veth pairs among them.
var hostVethName = regexp.MustCompile(`^kos[0-9a-f]{12}$`)

// Config says what Cleanup removes. Every path is a path of the
// node, under Root.
type Config struct {
	// Root is where the node's root file system is, "/" on the node
	// itself; a container mounts it elsewhere.
	Root string
	// Bridge and UnderlayBridge are the bridges KOS made.
	Bridge         string
	UnderlayBridge string
	// OVSRunDir and OVSDBDir are the run and database folders of the
	// Open vSwitch kos-ovs runs; HostOVSRunDir is the run dir of the
	// node's own one, if it has one.
	OVSRunDir     string
	OVSDBDir      string
	HostOVSRunDir string
	// CNISocket is the agent's CNI socket; CNIBinary is kos-cni as the
	// init container installed it.
	CNISocket string
	CNIBinary string
	// Force cleans up even while an agent serves on the node.
	Force bool
	// Out gets one line per change, and what was kept and why.
	Out io.Writer
}

// NewConfig returns the configuration that cleans up after the 0.3.0
// manifests, on the node itself.
func NewConfig() Config {
	return Config{
		Root:           "/",
		Bridge:         ovs.DefaultBridge,
		UnderlayBridge: nodeovs.DefaultUnderlayBridge,
		OVSRunDir:      nodeovs.DefaultRunDir,
		OVSDBDir:       nodeovs.DefaultDBDir,
		HostOVSRunDir:  DefaultHostOVSRunDir,
		CNISocket:      cni.DefaultSocket,
		CNIBinary:      DefaultCNIBinary,
		Out:            io.Discard,
	}
}

// ServingError is Run's refusal: an agent still serves on the node.
type ServingError struct {
	// What says what answered.
	What string
}

// ExitCode is the exit code of kos-agent cleanup that refuses so.
func (e *ServingError) ExitCode() int { return ExitServing }

func (e *ServingError) Error() string {
	return fmt.Sprintf("a kos-agent still serves on this node (%s): delete the kos-agent addon (channels delete addon ...) and wait until its pods are gone (kubectl -n kos-node get pods), then run this again; --force cleans up under a running agent", e.What)
}

// cleanup is one run of Run: the configuration with its paths resolved
// under the root, and how many changes were made.
type cleanup struct {
	cfg Config
	// given is the configuration as given, whose paths messages name.
	given   Config
	changes int
}

// Run removes what kos-agent's pod made on this node, and nothing else:
// other bridges, the node's own Open vSwitch and other files are kept. It
// refuses with a *ServingError while the agent's CNI socket or kos-ovs's
// Open vSwitch answers, unless cfg.Force. It is idempotent: a second run
// changes nothing and says so. Its netlink calls act on the calling
// thread's network namespace, which must be the node's.
func Run(ctx context.Context, cfg Config) error {
	c := &cleanup{cfg: cfg, given: cfg}
	if c.cfg.Out == nil {
		c.cfg.Out = io.Discard
	}
	if err := c.resolvePaths(); err != nil {
		return err
	}
	cniServes, ownOVSRuns, err := c.checkServing()
	if err != nil {
		return err
	}
	if err := c.deleteBridgesEverywhere(ctx, ownOVSRuns); err != nil {
		return err
	}
	if err := c.removeTunnelFilters(ctx, ownOVSRuns); err != nil {
		return err
	}
	if err := c.deleteHostVeths(); err != nil {
		return err
	}
	if err := c.removeFiles(cniServes); err != nil {
		return err
	}
	if c.changes == 0 {
		c.say("Nothing to clean up: no KOS bridge, interface or file on this node")
	} else {
		c.say("Cleaned up: %d changes", c.changes)
	}
	return nil
}

// resolvePaths takes the configuration's paths of the node under its root.
func (c *cleanup) resolvePaths() error {
	var errs []error
	for _, p := range []*string{&c.cfg.OVSRunDir, &c.cfg.OVSDBDir, &c.cfg.HostOVSRunDir, &c.cfg.CNISocket, &c.cfg.CNIBinary} {
		resolved, err := underRoot(c.cfg.Root, *p)
		if err != nil {
			errs = append(errs, err)
		}
		*p = resolved
	}
	return errors.Join(errs...)
}

// checkServing returns whether the agent's CNI socket and kos-ovs's Open
// vSwitch answer, and a *ServingError when either does, unless forced.
func (c *cleanup) checkServing() (cniServes, ownOVSRuns bool, err error) {
	cniServes = dialUnix(c.cfg.CNISocket) == nil
	ownOVSRuns = ovs.Answers(c.cfg.OVSRunDir) == nil
	var serving []string
	if cniServes {
		serving = append(serving, "its CNI socket "+c.given.CNISocket+" answers")
	}
	if ownOVSRuns {
		serving = append(serving, "kos-ovs's Open vSwitch answers in "+c.given.OVSRunDir)
	}
	if len(serving) > 0 {
		if !c.cfg.Force {
			return false, false, &ServingError{What: strings.Join(serving, "; ")}
		}
		c.say("Forced: cleaning up although %s", strings.Join(serving, "; "))
	}
	return cniServes, ownOVSRuns, nil
}

// say prints one progress line.
func (c *cleanup) say(format string, args ...any) {
	fmt.Fprintf(c.cfg.Out, format+"\n", args...)
}

// changed prints one progress line and counts a change.
func (c *cleanup) changed(format string, args ...any) {
	c.changes++
	c.say(format, args...)
}

// deleteHostVeths deletes the host ends of pods' veth pairs that are left:
// interfaces named as the agent names them that are veths.
func (c *cleanup) deleteHostVeths() error {
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("listing interfaces: %w", err)
	}
	for _, l := range links {
		name := l.Attrs().Name
		if l.Type() != "veth" || !hostVethName.MatchString(name) {
			continue
		}
		if err := netlink.LinkDel(l); err != nil && !errors.Is(err, netlink.LinkNotFoundError{}) {
			return fmt.Errorf("deleting the pod's veth pair %s: %w", name, err)
		}
		c.changed("Deleted the veth pair of interface %s, a pod's", name)
	}
	return nil
}

// dialUnix returns nil when something accepts connections on the Unix
// socket at path.
func dialUnix(path string) error {
	conn, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}
