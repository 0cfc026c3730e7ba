package nodecleanup

// This file cleans up Open vSwitch: KOS's bridges in the node's own
// Open vSwitch and in kos-ovs's (running, or started from its database for
// as long as it takes), the underlay address kos-ovs moved, and the
// tunnel filter.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kos-sdn/kos/components/fabric/ovs"
	"github.com/kos-sdn/kos/components/fabric/tunnelfilter"
	"github.com/kos-sdn/kos/components/nodeovs"
)

// underlayRecordFile is the record kos-ovs keeps of the underlay address's
// move, in its database folder (nodeovs's underlayRecordFile).
const underlayRecordFile = "kos-underlay.json"

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
