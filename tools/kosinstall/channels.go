package kosinstall

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// UserspaceAgentChannel is the file name of the channel
// WriteUserspaceAgentChannel writes.
const UserspaceAgentChannel = "userspace-agent-channel.yaml"

// localChannel is the file name of the bundle's channel of alternative
// releases: the single-node etcd and the userspace agent.
const localChannel = "local-channel.yaml"

// WriteUserspaceAgentChannel writes, next to the local channel of the
// release tree in dir (local-channel.yaml, wherever it is in the tree), a
// channel UserspaceAgentChannel holding only the local channel's releases of
// the agent, with their manifests and hashes as they are. Given before the
// bootstrap channel, it installs the standard releases with the agent on
// Open vSwitch's userspace datapath, the one datapath of a node without
// the kernel module (such as the project's local nodes): the local
// channel's single-node etcd would replace the standard one too. It returns
// the new channel's path relative to dir, with forward slashes.
func WriteUserspaceAgentChannel(dir string) (string, error) {
	var local string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == localChannel && local == "" {
			local = path
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("looking for %s in %s: %w", localChannel, dir, err)
	}
	if local == "" {
		return "", fmt.Errorf("the release tree in %s has no %s", dir, localChannel)
	}
	data, err := os.ReadFile(local)
	if err != nil {
		return "", err
	}
	// Read loosely, so that every field of an entry is kept as it is.
	var channel map[string]any
	if err := yaml.Unmarshal(data, &channel); err != nil {
		return "", fmt.Errorf("reading %s: %w", local, err)
	}
	spec, _ := channel["spec"].(map[string]any)
	if spec == nil {
		return "", fmt.Errorf("%s has no spec", local)
	}
	entries, _ := spec["addons"].([]any)
	var agent []any
	for _, e := range entries {
		if m, ok := e.(map[string]any); ok && m["name"] == agentAddon {
			agent = append(agent, e)
		}
	}
	if len(agent) == 0 {
		return "", errors.New(local + " has no release of " + agentAddon)
	}
	spec["addons"] = agent
	channel["metadata"] = map[string]any{"name": "kos-agent-userspace"}
	out, err := yaml.Marshal(channel)
	if err != nil {
		return "", fmt.Errorf("encoding the userspace agent's channel: %w", err)
	}
	header := "# The agent on Open vSwitch's userspace datapath, the releases of " + localChannel + "\n" +
		"# without its single-node etcd. Give it before the bootstrap channel.\n"
	path := filepath.Join(filepath.Dir(local), UserspaceAgentChannel)
	if err := os.WriteFile(path, append([]byte(header), out...), 0o644); err != nil {
		return "", fmt.Errorf("writing the userspace agent's channel: %w", err)
	}
	rel, err := filepath.Rel(dir, path)
	if err != nil {
		return "", err
	}
	return filepath.ToSlash(rel), nil
}
