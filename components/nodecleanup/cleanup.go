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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/kos-sdn/kos/components/cni"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/components/fabric/tunnelfilter"
	"github.com/kos-sdn/kos/components/nodeovs"
)

// Where the 0.3.0 manifests put the agent's files on the node, the defaults
// of Config.
const (
	DefaultCNIBinary     = "/opt/cni/bin/kos"
	DefaultHostOVSRunDir = "/var/run/openvswitch"
)

// underlayRecordFile is the record kos-ovs keeps of the underlay address's
// move, in its database folder (nodeovs's underlayRecordFile).
const underlayRecordFile = "kos-underlay.json"

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

// deleteBridgesEverywhere deletes the agent's bridge from the node's own
// Open vSwitch, if one runs, and KOS's bridges from kos-ovs's: from the
// running one when forced (only the agent's bridge: the underlay bridge
// carries the node's address), else from its database (ownOVS).
func (c *cleanup) deleteBridgesEverywhere(ctx context.Context, ownOVSRuns bool) error {
	hostOVSRuns := ovs.Answers(c.cfg.HostOVSRunDir) == nil
	if hostOVSRuns {
		if err := c.deleteBridges(ctx, c.cfg.HostOVSRunDir, "the node's own Open vSwitch ("+c.given.HostOVSRunDir+")", c.cfg.Bridge); err != nil {
			return err
		}
	}
	if !ownOVSRuns {
		return c.ownOVS(ctx, hostOVSRuns)
	}
	if err := c.deleteBridges(ctx, c.cfg.OVSRunDir, "kos-ovs's Open vSwitch ("+c.given.OVSRunDir+")", c.cfg.Bridge); err != nil {
		return err
	}
	c.say("Kept %s and %s: kos-ovs still runs there", c.given.OVSRunDir, c.given.OVSDBDir)
	return nil
}

// removeTunnelFilters removes the agent's tunnel filters: the nftables
// table of the kernel datapath, and the flows of the userspace datapath's
// on the underlay bridge where that bridge stays: in kos-ovs's Open
// vSwitch while it runs (forced; stopped, the bridge is deleted with them)
// and in the node's own.
func (c *cleanup) removeTunnelFilters(ctx context.Context, ownOVSRuns bool) error {
	removed, err := tunnelfilter.Remove("")
	if err != nil {
		return fmt.Errorf("removing the tunnel filter: %w", err)
	}
	if removed {
		c.changed("Deleted nftables table ip %s, the tunnel filter", tunnelfilter.TableName)
	}
	runDirs := map[string]string{}
	if ownOVSRuns {
		runDirs[c.cfg.OVSRunDir] = "kos-ovs's Open vSwitch (" + c.given.OVSRunDir + ")"
	}
	if ovs.Answers(c.cfg.HostOVSRunDir) == nil {
		runDirs[c.cfg.HostOVSRunDir] = "the node's own Open vSwitch (" + c.given.HostOVSRunDir + ")"
	}
	for runDir, which := range runDirs {
		removed, err := ovs.RemoveUnderlayFilter(ctx, runDir, c.cfg.UnderlayBridge)
		if err != nil {
			return fmt.Errorf("removing the tunnel filter from %s: %w", which, err)
		}
		if removed {
			c.changed("Deleted the tunnel filter's flows from bridge %s of %s", c.cfg.UnderlayBridge, which)
		}
	}
	return nil
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

// node returns a resolved path as the node names it, for messages.
func (c *cleanup) node(p string) string {
	rel, err := filepath.Rel(filepath.Clean(c.cfg.Root), p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return p
	}
	return "/" + filepath.ToSlash(rel)
}

// deleteBridges deletes those of bridges that exist in the Open vSwitch
// whose run dir is runDir, which says which one it is.
func (c *cleanup) deleteBridges(ctx context.Context, runDir, which string, bridges ...string) error {
	for _, br := range bridges {
		if br == "" {
			continue
		}
		exists, err := bridgeExists(ctx, runDir, br)
		if err != nil {
			return err
		}
		if !exists {
			continue
		}
		if _, err := nodeovs.RunTool(ctx, runDir, "ovs-vsctl", "--timeout=30", "--if-exists", "del-br", br); err != nil {
			return fmt.Errorf("deleting bridge %s: %w", br, err)
		}
		c.changed("Deleted bridge %s with its ports from %s", br, which)
	}
	return nil
}

// ownOVS cleans up after kos-ovs once it has stopped: it gives the underlay
// address back to its interface as recorded, starts Open vSwitch from the
// database for as long as it takes to delete KOS's bridges with their
// devices (deleteFromDatabase), and removes the database and run folders.
func (c *cleanup) ownOVS(ctx context.Context, hostOVSRuns bool) error {
	db := filepath.Join(c.cfg.OVSDBDir, "conf.db")
	record := filepath.Join(c.cfg.OVSDBDir, underlayRecordFile)
	if data, err := os.ReadFile(record); err == nil {
		// What Release moves back, for the progress line and its log.
		var moved struct {
			Interface string   `json:"interface"`
			Addresses []string `json:"addresses"`
		}
		if err := json.Unmarshal(data, &moved); err != nil {
			return fmt.Errorf("reading %s: %w", record, err)
		}
		var addr netip.Addr
		if len(moved.Addresses) > 0 {
			if p, err := netip.ParsePrefix(moved.Addresses[0]); err == nil {
				addr = p.Addr()
			}
		}
		u := nodeovs.NewUnderlay(nodeovs.UnderlayConfig{Address: addr, Bridge: c.cfg.UnderlayBridge}, c.cfg.OVSRunDir, c.cfg.OVSDBDir)
		if err := u.Release(); err != nil {
			return fmt.Errorf("giving the underlay address back to its interface: %w", err)
		}
		c.changed("Underlay addresses %s and their routes back on %s, as %s recorded", strings.Join(moved.Addresses, ", "), moved.Interface, c.node(record))
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reading %s: %w", record, err)
	}
	keepDB := false
	if _, err := os.Stat(db); err == nil {
		if keepDB, err = c.deleteFromDatabase(ctx, db, hostOVSRuns); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reading %s: %w", db, err)
	}
	if keepDB {
		return nil
	}
	for _, dir := range []string{c.cfg.OVSDBDir, c.cfg.OVSRunDir} {
		if err := c.removeAll(dir); err != nil {
			return err
		}
	}
	return c.removeIfEmpty(filepath.Dir(c.cfg.OVSDBDir))
}

// deleteFromDatabase runs ovsdb-server and ovs-vswitchd on db in a folder
// of their own, deletes KOS's bridges, and stops them again, removing the
// datapath's devices (exit --cleanup) unless the database holds bridges KOS
// did not make; keep then says to keep the database. While the node's own
// Open vSwitch runs (hostOVSRuns) it starts no ovs-vswitchd for bridges of
// the kernel datapath: both would share the kernel's one datapath, and the
// node's own has dropped the ports it does not know already.
func (c *cleanup) deleteFromDatabase(ctx context.Context, db string, hostOVSRuns bool) (keep bool, err error) {
	runDir, err := os.MkdirTemp("", "kos-cleanup-ovs-")
	if err != nil {
		return false, fmt.Errorf("creating a run dir for Open vSwitch: %w", err)
	}
	defer os.RemoveAll(runDir)
	common := []string{"--no-chdir", "--detach", "-vconsole:off", "-vsyslog:off", "-vfile:info"}
	if _, err := nodeovs.RunTool(ctx, runDir, "ovsdb-server", append([]string{db,
		"--remote=punix:" + filepath.Join(runDir, "db.sock"),
		"--pidfile=" + filepath.Join(runDir, "ovsdb-server.pid"),
		"--log-file=" + filepath.Join(runDir, "ovsdb-server.log")}, common...)...); err != nil {
		return false, fmt.Errorf("starting ovsdb-server on %s: %w", db, err)
	}
	vswitchdRuns, cleanupDatapath := false, false
	defer func() {
		// ovs-vswitchd first, while the database still answers it.
		stopCtx := context.WithoutCancel(ctx)
		if vswitchdRuns {
			exit := []string{"--timeout=30", "-t", "ovs-vswitchd", "exit"}
			if cleanupDatapath {
				exit = append(exit, "--cleanup")
			}
			if _, serr := nodeovs.RunTool(stopCtx, runDir, "ovs-appctl", exit...); serr != nil {
				err = errors.Join(err, fmt.Errorf("stopping ovs-vswitchd: %w", serr))
			}
		}
		if _, serr := nodeovs.RunTool(stopCtx, runDir, "ovs-appctl", "--timeout=30", "-t", "ovsdb-server", "exit"); serr != nil {
			err = errors.Join(err, fmt.Errorf("stopping ovsdb-server: %w", serr))
		}
	}()
	datapaths, err := bridgeDatapaths(ctx, runDir)
	if err != nil {
		return false, err
	}
	var others []string
	kernel := false
	for br, dp := range datapaths {
		if br != c.cfg.Bridge && br != c.cfg.UnderlayBridge {
			others = append(others, br)
		}
		kernel = kernel || dp == "" || dp == "system"
	}
	slices.Sort(others)
	if hostOVSRuns && kernel {
		c.say("Not starting Open vSwitch on %s: the node's own one runs and owns the kernel's datapath", c.node(db))
		return false, nil
	}
	if _, err := nodeovs.RunTool(ctx, runDir, "ovs-vswitchd", append([]string{"unix:" + filepath.Join(runDir, "db.sock"),
		"--pidfile=" + filepath.Join(runDir, "ovs-vswitchd.pid"),
		"--log-file=" + filepath.Join(runDir, "ovs-vswitchd.log")}, common...)...); err != nil {
		return false, fmt.Errorf("starting ovs-vswitchd on %s: %w", db, err)
	}
	vswitchdRuns = true
	if err := c.deleteBridges(ctx, runDir, "kos-ovs's Open vSwitch ("+c.node(c.cfg.OVSDBDir)+")", c.cfg.Bridge, c.cfg.UnderlayBridge); err != nil {
		return false, err
	}
	if len(others) > 0 {
		c.say("Kept %s: it holds bridges KOS did not make (%s); delete them with OVS_RUNDIR=%s and run this again", c.node(db), strings.Join(others, ", "), c.node(c.cfg.OVSRunDir))
		return true, nil
	}
	cleanupDatapath = true
	return false, nil
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

// removeFiles removes the CNI plugin, the leftovers of an interrupted
// install beside it, the CNI socket, and the folders the agent's pod made.
func (c *cleanup) removeFiles(cniServes bool) error {
	if err := c.remove(c.cfg.CNIBinary); err != nil {
		return err
	}
	// cni.Install's temporary files.
	tmps, err := filepath.Glob(filepath.Join(filepath.Dir(c.cfg.CNIBinary), "."+filepath.Base(c.cfg.CNIBinary)+".tmp-*"))
	if err != nil {
		return fmt.Errorf("finding temporary files of %s: %w", c.cfg.CNIBinary, err)
	}
	for _, tmp := range tmps {
		if err := c.remove(tmp); err != nil {
			return err
		}
	}
	if err := c.remove(c.cfg.CNISocket); err != nil {
		return err
	}
	if cniServes {
		c.say("The agent still serving (forced) keeps %s", c.node(filepath.Dir(c.cfg.CNISocket)))
	}
	if err := c.removeIfEmpty(filepath.Dir(c.cfg.CNISocket)); err != nil {
		return err
	}
	// The pod's hostPath volume of the node's own run dir made it on a
	// node that has none; an Open vSwitch's run dir is never empty.
	if ovs.Answers(c.cfg.HostOVSRunDir) != nil {
		return c.removeIfEmpty(c.cfg.HostOVSRunDir)
	}
	return nil
}

// remove removes a file, if it exists.
func (c *cleanup) remove(path string) error {
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("removing %s: %w", path, err)
	}
	c.changed("Removed %s", c.node(path))
	return nil
}

// removeAll removes a folder and what it holds, if it exists. A folder that
// is a mount point (rmdir says EBUSY), as where a node's folders are bind
// mounts, is emptied and kept.
func (c *cleanup) removeAll(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", dir, err)
	}
	err = os.RemoveAll(dir)
	switch {
	case errors.Is(err, syscall.EBUSY):
		if len(entries) > 0 {
			c.changed("Emptied %s (a mount point, kept)", c.node(dir))
		}
		return nil
	case err != nil:
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	c.changed("Removed %s", c.node(dir))
	return nil
}

// removeIfEmpty removes a folder if it exists, is empty and is no mount
// point.
func (c *cleanup) removeIfEmpty(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || len(entries) > 0 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", dir, err)
	}
	err = os.Remove(dir)
	switch {
	case errors.Is(err, syscall.EBUSY):
		return nil
	case err != nil:
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	c.changed("Removed %s (empty)", c.node(dir))
	return nil
}

// underRoot returns the path p of the node whose root file system is at
// root, following symbolic links as the node would, inside root (on many
// nodes /var/run is a link to /run). Components that do not exist yet are
// joined as they are.
func underRoot(root, p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%q is not an absolute path", p)
	}
	root = filepath.Clean(root)
	todo := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	resolved := "/"
	for hops := 0; len(todo) > 0; {
		part := todo[0]
		todo = todo[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, part)
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			// Not a link, or not there: taken as it is.
			resolved = next
			continue
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("resolving %s under %s: too many symbolic links", p, root)
		}
		if filepath.IsAbs(target) {
			resolved = "/"
		}
		todo = append(strings.Split(strings.TrimPrefix(target, "/"), "/"), todo...)
	}
	return filepath.Join(root, resolved), nil
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

// bridgeExists asks the Open vSwitch in runDir whether bridge exists.
func bridgeExists(ctx context.Context, runDir, bridge string) (bool, error) {
	_, err := nodeovs.RunTool(ctx, runDir, "ovs-vsctl", "--timeout=30", "br-exists", bridge)
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 2 {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("asking for bridge %s: %w", bridge, err)
	}
	return true, nil
}

// bridgeDatapaths returns the bridges of the Open vSwitch in runDir, each
// with its datapath_type ("" for the default, the kernel's). It needs
// ovsdb-server only.
func bridgeDatapaths(ctx context.Context, runDir string) (map[string]string, error) {
	out, err := nodeovs.RunTool(ctx, runDir, "ovs-vsctl", "--timeout=30", "--no-wait", "--format=csv", "--data=bare", "--no-headings", "--columns=name,datapath_type", "list", "Bridge")
	if err != nil {
		return nil, fmt.Errorf("listing bridges: %w", err)
	}
	return parseBridgeDatapaths(out)
}

// parseBridgeDatapaths decodes what bridgeDatapaths asks for: one
// "name,datapath_type" line per bridge.
func parseBridgeDatapaths(out string) (map[string]string, error) {
	bridges := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		name, dp, ok := strings.Cut(line, ",")
		if !ok || name == "" {
			return nil, fmt.Errorf("reading bridges: unexpected line %q", line)
		}
		bridges[strings.Trim(name, `"`)] = strings.Trim(dp, `"`)
	}
	return bridges, nil
}
