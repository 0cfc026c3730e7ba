package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/spawner"
)

// containerdName is the name of containerd's process, log and pid file.
const containerdName = "containerd"

// ContainerdOptions say how StartContainerd starts a containerd.
type ContainerdOptions struct {
	// Dir is containerd's folder: its configuration, content store,
	// snapshots, state, socket and log. It must be set, and short enough
	// for the socket path (Dir/containerd.sock) to fit in 107 bytes.
	Dir string
	// Netns names a network namespace under /run/netns to run containerd in;
	// "" means the caller's.
	Netns string
	// SandboxImage is the CRI plugin's pause image; "" means images.PauseTag.
	SandboxImage string
	// CNIConfDir is where the CRI plugin reads network configurations;
	// "" means Dir/net.d, empty.
	CNIConfDir string
	// CNIBinDir is where the CRI plugin finds CNI plugins (containerd 1.6
	// takes one folder); "" means Debian's, /usr/lib/cni.
	CNIBinDir string
	// Detach lets containerd outlive the caller.
	Detach bool
	// Registries are registries (host:port) that serve plain http, from
	// which containerd pulls: Dir/certs.d holds a hosts.toml for each.
	Registries []string

	// mountNS is the file of a node's mount namespace to run containerd
	// in; "" means the caller's.
	mountNS string
}

// Containerd is a containerd started by StartContainerd, for importing and
// inspecting images. It runs no containers of its own; a node's containerd
// runs them, and Env.Stop cleans up after it.
type Containerd struct {
	// Address is the path of its gRPC socket, for ctr --address.
	Address string
	// Dir is its folder.
	Dir string

	proc *process
}

// StartContainerd starts containerd with everything it keeps in opts.Dir,
// configured for a node of this host (cgroupfs, runc, a restricted
// oom_score_adj), and returns once it answers.
func StartContainerd(ctx context.Context, opts ContainerdOptions) (*Containerd, error) {
	p, err := startContainerd(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &Containerd{Address: containerdSocket(opts.Dir), Dir: opts.Dir, proc: p}, nil
}

// Import imports the images of a tarball written by images.Write into the
// CRI plugin's namespace.
func (c *Containerd) Import(ctx context.Context, tarball string) error {
	return images.Import(ctx, c.Address, tarball)
}

// Stop stops containerd.
func (c *Containerd) Stop() error {
	return c.proc.Stop(stopGrace)
}

func containerdSocket(dir string) string {
	return filepath.Join(dir, "containerd.sock")
}

// maxSocketPath is the longest path a Unix socket may have on Linux.
const maxSocketPath = 107

// startContainerd writes containerd's configuration into opts.Dir, starts it
// and waits until it answers.
func startContainerd(ctx context.Context, opts ContainerdOptions) (*process, error) {
	if opts.Dir == "" {
		return nil, errors.New("containerd needs a folder")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", opts.Dir, err)
	}
	socket := containerdSocket(dir)
	// The ttrpc socket beside it is six bytes longer.
	if len(socket)+len(".ttrpc") > maxSocketPath {
		return nil, fmt.Errorf("containerd's socket path %s is too long for a Unix socket: use a shorter folder", socket)
	}
	if opts.SandboxImage == "" {
		opts.SandboxImage = images.PauseTag
	}
	if opts.CNIConfDir == "" {
		opts.CNIConfDir = filepath.Join(dir, "net.d")
	}
	if opts.CNIBinDir == "" {
		opts.CNIBinDir = debianCNIDir
	}
	for _, d := range []string{dir, opts.CNIConfDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("creating %s: %w", d, err)
		}
	}
	if err := writeRegistryHosts(filepath.Join(dir, "certs.d"), opts.Registries); err != nil {
		return nil, err
	}
	config := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(config, []byte(containerdConfig(dir, opts)), 0o644); err != nil {
		return nil, fmt.Errorf("writing containerd's configuration: %w", err)
	}
	p, err := startIn(dir, containerdName, opts.Netns, opts.mountNS, containerdBinary, []string{"--config", config}, opts.Detach)
	if err != nil {
		return nil, err
	}
	err = p.WaitReady(ctx, 30*time.Second, func(ctx context.Context) error {
		return exec.CommandContext(ctx, "ctr", "--address", socket, "--timeout", "2s", "plugins", "ls").Run()
	})
	if err != nil {
		return nil, errors.Join(err, p.Stop(stopGrace))
	}
	return p, nil
}

// containerdBinary is Debian's containerd.
const containerdBinary = "/usr/bin/containerd"

// containerdConfig is containerd's configuration: every path it writes is
// under dir, except those it cannot be told about (see hostPaths).
//
// On these machines root lacks CAP_SYS_RESOURCE, so runc cannot lower a
// sandbox's oom_score_adj: restrict_oom_score_adj keeps the requested value
// no lower than containerd's own. The cgroups are v1 without systemd:
// cgroupfs, not the systemd driver.
func containerdConfig(dir string, opts ContainerdOptions) string {
	q := strconv.Quote
	lines := []string{
		`version = 2`,
		`root = ` + q(filepath.Join(dir, "root")),
		`state = ` + q(filepath.Join(dir, "state")),
		`[grpc]`,
		`  address = ` + q(containerdSocket(dir)),
		`[plugins."io.containerd.internal.v1.opt"]`,
		`  path = ` + q(filepath.Join(dir, "opt")),
		`[plugins."io.containerd.grpc.v1.cri"]`,
		`  sandbox_image = ` + q(opts.SandboxImage),
		`  restrict_oom_score_adj = true`,
		`  netns_mounts_under_state_dir = true`,
		`  enable_unprivileged_ports = true`,
		`  enable_unprivileged_icmp = true`,
		`  stream_server_address = "127.0.0.1"`,
		`  [plugins."io.containerd.grpc.v1.cri".registry]`,
		`    config_path = ` + q(filepath.Join(dir, "certs.d")),
		`  [plugins."io.containerd.grpc.v1.cri".cni]`,
		`    bin_dir = ` + q(opts.CNIBinDir),
		`    conf_dir = ` + q(opts.CNIConfDir),
		`  [plugins."io.containerd.grpc.v1.cri".containerd]`,
		`    default_runtime_name = "runc"`,
		`    snapshotter = "overlayfs"`,
		`    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]`,
		`      runtime_type = "io.containerd.runc.v2"`,
		`      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]`,
		`        SystemdCgroup = false`,
		`        Root = ` + q(filepath.Join(dir, "runc")),
	}
	return strings.Join(lines, "\n") + "\n"
}

// writeRegistryHosts writes containerd's registry hosts configuration into
// dir, afresh: for each registry (host:port), dir/<host:port>/hosts.toml
// says that it serves plain http, for pulling and resolving.
func writeRegistryHosts(dir string, registries []string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing the registry hosts of an earlier start: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	for _, r := range registries {
		if err := os.MkdirAll(filepath.Join(dir, r), 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", filepath.Join(dir, r), err)
		}
		if err := os.WriteFile(filepath.Join(dir, r, "hosts.toml"), []byte(registryHosts(r)), 0o644); err != nil {
			return fmt.Errorf("writing the hosts of registry %s: %w", r, err)
		}
	}
	return nil
}

// registryHosts is the hosts.toml of a plain-http registry.
func registryHosts(registry string) string {
	url := strconv.Quote("http://" + registry)
	return "server = " + url + "\n\n[host." + url + "]\n  capabilities = [\"pull\", \"resolve\"]\n"
}

// startIn starts binary with args, its output in dir/<name>.log, inside the
// network namespace netns and the mount namespace of the file mountNS when
// they are not "". It does not make a mount namespace of its own as `ip
// netns exec` would: kubelet and containerd must see each other's mounts.
func startIn(dir, name, netns, mountNS, binary string, args []string, detach bool) (*process, error) {
	opts := spawner.Options{Name: name, Dir: dir, Binary: binary, Args: args, PIDFile: true, Detach: detach}
	var enter []string
	if netns != "" {
		enter = append(enter, "--net="+filepath.Join("/run/netns", netns))
	}
	if mountNS != "" {
		enter = append(enter, "--mount="+mountNS)
	}
	if len(enter) > 0 {
		opts.Binary = nsenterBinary
		opts.Args = append(append(enter, "--", binary), args...)
	}
	sp, err := spawner.Run(opts)
	if err != nil {
		return nil, err
	}
	p := &process{Process: sp}
	// nsenter execs binary: from then on the process is binary, which is
	// what Attach must find in /proc.
	p.Binary = binary
	return p, nil
}

// startIn starts a process of the node in its namespaces, its output in
// the node's folder.
func (n *nodeState) startIn(name, binary string, args []string, detach bool) (*process, error) {
	p, err := startIn(n.NodeDir, name, n.Netns, n.mountNSFile(), binary, args, detach)
	if err != nil {
		return nil, err
	}
	p.Node = n.Name
	return p, nil
}

// nsenterBinary is util-linux's nsenter.
const nsenterBinary = "/usr/bin/nsenter"
