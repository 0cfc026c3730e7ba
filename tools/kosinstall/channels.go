package kosinstall

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/blang/semver/v4"
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

// bootstrapChannel is the file name of the bundle's channel, at the root of
// a release tree.
const bootstrapChannel = "bootstrap-channel.yaml"

// WriteReleaseChannel writes, at the root of the release tree in dir, a
// channel named file holding the releases of the bootstrap channel of
// version upTo and older, in the order the bootstrap channel lists them,
// with the agent's releases taken from the local channel instead (the
// userspace datapath, as in WriteUserspaceAgentChannel; manifests keep their
// hashes, their paths are made relative to the root). One channel that
// holds every release a cluster may pick, oldest first, is what kOps's
// channels needs (the last fitting entry wins there, and it never merges
// channels): with it, "install 0.1.0" and "upgrade to 0.2.0" are one
// channel each for both channels tools. It returns the channel's path
// relative to dir.
func WriteReleaseChannel(dir, file string, upTo semver.Version) (string, error) {
	local, err := findFile(dir, localChannel)
	if err != nil {
		return "", err
	}
	localDir, err := filepath.Rel(dir, filepath.Dir(local))
	if err != nil {
		return "", err
	}
	var entries []any
	for _, c := range []struct {
		path  string
		agent bool // take the agent's releases, and only those
		base  string
	}{
		{filepath.Join(dir, bootstrapChannel), false, ""},
		{local, true, filepath.ToSlash(localDir)},
	} {
		got, err := channelEntries(c.path)
		if err != nil {
			return "", err
		}
		for _, e := range got {
			m, ok := e.(map[string]any)
			if !ok || (m["name"] == agentAddon) != c.agent {
				continue
			}
			v, err := semver.Parse(fmt.Sprint(m["version"]))
			if err != nil {
				return "", fmt.Errorf("%s: release %v: %w", c.path, m["name"], err)
			}
			if v.GT(upTo) {
				continue
			}
			if c.base != "" {
				m["manifest"] = path.Join(c.base, fmt.Sprint(m["manifest"]))
			}
			entries = append(entries, m)
		}
	}
	channel := map[string]any{
		"kind":     "Addons",
		"metadata": map[string]any{"name": "kos-" + upTo.String()},
		"spec":     map[string]any{"addons": entries},
	}
	out, err := yaml.Marshal(channel)
	if err != nil {
		return "", fmt.Errorf("encoding channel %s: %w", file, err)
	}
	header := "# The KOS releases up to " + upTo.String() + ", the agent's on the userspace datapath, oldest first.\n"
	if err := os.WriteFile(filepath.Join(dir, file), append([]byte(header), out...), 0o644); err != nil {
		return "", fmt.Errorf("writing channel %s: %w", file, err)
	}
	return file, nil
}

// findFile returns the path of the first file named name in the tree dir.
func findFile(dir, name string) (string, error) {
	var found string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == name && found == "" {
			found = path
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("looking for %s in %s: %w", name, dir, err)
	}
	if found == "" {
		return "", fmt.Errorf("the release tree in %s has no %s", dir, name)
	}
	return found, nil
}

// channelEntries returns the entries of a channel file, read loosely so
// that every field of an entry is kept as it is.
func channelEntries(file string) ([]any, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var channel map[string]any
	if err := yaml.Unmarshal(data, &channel); err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	spec, _ := channel["spec"].(map[string]any)
	if spec == nil {
		return nil, fmt.Errorf("%s has no spec", file)
	}
	entries, _ := spec["addons"].([]any)
	return entries, nil
}
