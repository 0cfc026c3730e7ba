package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// A node's pods get their networks from the CNI plugins in the node's own
// cniBinPath, one of NodePaths: Debian's plugins (containerd needs loopback
// there, and the node's network is bridge and host-local) are linked into
// it on every start, and a DaemonSet may install a plugin of its own there
// through a hostPath volume, which stays, as it would on a rebooted node.
// The plugins' configuration is in the node's folder (cniConfDir).

// cniBinPath is the folder of CNI plugins within a node, which its
// containerd (and Multus) run plugins from.
const cniBinPath = "/opt/cni/bin"

// debianCNIDir holds Debian's containernetworking-plugins.
const debianCNIDir = "/usr/lib/cni"

// nodeNetworkFile is the node's network configuration in cniConfDir.
const nodeNetworkFile = "10-kos-node.conflist"

// linkCNIPlugins fills the node's cniBinPath (its host-side folder) with
// absolute symbolic links to every plugin of debianCNIDir and, unless multus
// is "", to that Multus binary. A symbolic link it does not want any more
// goes; any other file stays.
func (n *nodeState) linkCNIPlugins(multus string) error {
	dir := n.hostPath(cniBinPath)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating the node's %s: %w", cniBinPath, err)
	}
	want := map[string]string{}
	plugins, err := os.ReadDir(debianCNIDir)
	if err != nil {
		return fmt.Errorf("listing the CNI plugins: %w", err)
	}
	for _, p := range plugins {
		if !p.IsDir() {
			want[p.Name()] = filepath.Join(debianCNIDir, p.Name())
		}
	}
	if multus != "" {
		want[multusBinary] = multus
	}
	have, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("listing the node's %s: %w", cniBinPath, err)
	}
	for _, f := range have {
		if _, ok := want[f.Name()]; !ok && f.Type()&fs.ModeSymlink != 0 {
			if err := os.Remove(filepath.Join(dir, f.Name())); err != nil {
				return fmt.Errorf("removing a CNI plugin of an earlier start: %w", err)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		// A link made aside and renamed replaces whatever has the name.
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("linking CNI plugin %s: %w", name, err)
		}
		if err := os.Symlink(want[name], tmp); err != nil {
			return fmt.Errorf("linking CNI plugin %s: %w", name, err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("linking CNI plugin %s: %w", name, err)
		}
	}
	return nil
}

// writeCNIConfig writes the node's network configuration: a bridge in the
// node's namespace, the pods' gateway, with addresses from host-local, kept
// in the node's folder. containerd adds the loopback interface itself. With
// multus, Multus's configuration comes first and runs the node's network
// (see writeMultusConfig); without, none is left from an earlier start.
func writeCNIConfig(n *nodeState, multus bool) error {
	if err := os.MkdirAll(n.cniConfDir(), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", n.cniConfDir(), err)
	}
	if err := writeJSON(filepath.Join(n.cniConfDir(), nodeNetworkFile), nodeNetwork(n)); err != nil {
		return err
	}
	if multus {
		return writeMultusConfig(n)
	}
	if err := os.Remove(filepath.Join(n.cniConfDir(), multusConfFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the Multus configuration of an earlier start: %w", err)
	}
	return nil
}

// writeJSON writes v as indented JSON to path.
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", filepath.Base(path), err)
	}
	return nil
}

// nodeNetwork is the configuration list of the node's network.
func nodeNetwork(n *nodeState) map[string]any {
	gateway := n.PodCIDR.Addr().Next()
	return map[string]any{
		"cniVersion": "1.0.0",
		"name":       "kos-node",
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      "cni0",
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": n.PodCIDR.String(), "gateway": gateway.String()}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": filepath.Join(n.NodeDir, "ipam"),
				},
			},
		},
	}
}
