package catalog

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationBuild builds every image, unpacks each into a folder and
// runs its programs there with chroot: the commands start, etcd reports its
// version, and the agent image's Open vSwitch clients, with nothing but
// what the image holds, program a real Open vSwitch through its run dir
// mounted where the manifests mount it.
func TestIntegrationBuild(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	etcd := etcdBinary(t)
	versions := map[string]string{APIServer: "0.0.1-test", ControllerManager: "0.0.2-test", Agent: "0.0.3-test"}
	tagged, err := Build(ctx, Options{Versions: versions, Etcd: etcd, WorkDir: filepath.Join(dir, "work")})
	if err != nil {
		t.Fatal(err)
	}
	etcdVersion, err := EtcdVersion(ctx, etcd)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Tags(versions, etcdVersion), slices.Sorted(maps.Keys(tagged))); diff != "" {
		t.Fatalf("tags (-want +got):\n%s", diff)
	}
	// The tarball is what people import; every image must survive it.
	if err := images.Write(filepath.Join(dir, "kos.tar"), tagged); err != nil {
		t.Fatal(err)
	}

	roots := map[string]string{}
	for tag, img := range tagged {
		root := filepath.Join(dir, "rootfs", strings.NewReplacer("/", "_", ":", "_").Replace(tag))
		unpack(t, img, root)
		roots[tag] = root
	}

	for _, name := range Components {
		tag := Tag(name, versions[name])
		spec, err := Spec(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) {
			entrypoint := imageEntrypoint(t, tagged[tag])
			if want := []string{path.Join(images.BinDir, name)}; !slices.Equal(entrypoint, want) {
				t.Errorf("entrypoint %v, want %v", entrypoint, want)
			}
			for _, pkg := range spec.Packages {
				if path.Base(pkg) == "kos-cni" {
					continue // a CNI plugin has no --help; see "agent's kos-cni"
				}
				out := chroot(t, roots[tag], nil, nil, path.Join(images.BinDir, path.Base(pkg)), "--help")
				if !strings.Contains(out, "Usage") && !strings.Contains(out, "usage") {
					t.Errorf("%s --help in the image says no usage:\n%s", path.Base(pkg), out)
				}
			}
		})
	}

	t.Run(Etcd, func(t *testing.T) {
		tag := Tag(Etcd, etcdVersion)
		if want := []string{path.Join(images.BinDir, "etcd")}; !slices.Equal(imageEntrypoint(t, tagged[tag]), want) {
			t.Errorf("entrypoint %v, want %v", imageEntrypoint(t, tagged[tag]), want)
		}
		out := chroot(t, roots[tag], nil, nil, path.Join(images.BinDir, "etcd"), "--version")
		if !strings.Contains(out, "etcd Version: "+etcdVersion) {
			t.Errorf("etcd --version in the image: %s", out)
		}
	})

	t.Run("agent's Open vSwitch clients", func(t *testing.T) {
		ovs, err := ovsenv.Start(ctx, ovsenv.Options{Dir: filepath.Join(dir, "ovs")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := ovs.Stop(); err != nil {
				t.Errorf("stopping Open vSwitch: %v", err)
			}
		})
		root := roots[Tag(Agent, versions[Agent])]
		mount := &bindMount{source: ovs.RunDir, target: "/var/run/openvswitch"}
		// As the manifests run the agent: --ovs-run-dir=/var/run/openvswitch.
		env := []string{"OVS_RUNDIR=/var/run/openvswitch"}
		chroot(t, root, mount, env, "/usr/bin/ovs-vsctl", "--timeout=20", "--may-exist", "add-br", "kos", "--", "set", "bridge", "kos", "datapath_type=netdev")
		chroot(t, root, mount, env, "/usr/bin/ovs-ofctl", "-O", "OpenFlow14", "add-flow", "kos", "table=1,priority=0,actions=drop")
		flows := chroot(t, root, mount, env, "/usr/bin/ovs-ofctl", "-O", "OpenFlow14", "dump-flows", "kos")
		if !strings.Contains(flows, "table=1") || !strings.Contains(flows, "actions=drop") {
			t.Errorf("flows of bridge kos, dumped in the image: %s", flows)
		}
		if out := chroot(t, root, mount, env, "/usr/bin/ovs-appctl", "-t", "ovs-vswitchd", "version"); !strings.Contains(out, "ovs-vswitchd") {
			t.Errorf("ovs-appctl version in the image: %s", out)
		}
		// And the host sees what the image's tools did.
		if out, err := ovs.Run(ctx, "ovs-vsctl", "list-br"); err != nil || strings.TrimSpace(out) != "kos" {
			t.Errorf("bridges on the host: %q, %v", out, err)
		}
	})

	t.Run("agent's kos-cni", func(t *testing.T) {
		// What the agent pod's init container does: install kos-cni
		// into the node's CNI binary folder, mounted at /host/opt/cni/bin;
		// the node then runs it as its plugin kos.
		root := roots[Tag(Agent, versions[Agent])]
		mount := &bindMount{source: t.TempDir(), target: "/host/opt/cni/bin"}
		chroot(t, root, mount, nil, path.Join(images.BinDir, "kos-cni"), "install", "/host/opt/cni/bin/kos")
		cmd := exec.CommandContext(ctx, filepath.Join(mount.source, "kos"))
		cmd.Env = []string{"CNI_COMMAND=VERSION"}
		cmd.Stdin = strings.NewReader(`{"cniVersion":"1.0.0"}`)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"1.1.0"`) {
			t.Errorf("VERSION of the installed kos-cni on the host: %s (%v), want the versions it supports", out, err)
		}
	})

	t.Run("agent's Open vSwitch daemons", func(t *testing.T) {
		// What kos-ovs runs in the ovs container: the daemons load, and
		// ovsdb-tool makes a database from the schema the image holds.
		root := roots[Tag(Agent, versions[Agent])]
		for _, daemon := range []string{"/usr/sbin/ovsdb-server", "/usr/sbin/ovs-vswitchd"} {
			if out := chroot(t, root, nil, nil, daemon, "--version"); !strings.Contains(out, "Open vSwitch") {
				t.Errorf("%s --version in the image: %s", daemon, out)
			}
		}
		mount := &bindMount{source: t.TempDir(), target: "/var/lib/kos/openvswitch"}
		chroot(t, root, mount, nil, "/usr/bin/ovsdb-tool", "create", "/var/lib/kos/openvswitch/conf.db", "/usr/share/openvswitch/vswitch.ovsschema")
		if _, err := os.Stat(filepath.Join(mount.source, "conf.db")); err != nil {
			t.Errorf("ovsdb-tool create in the image made no database: %v", err)
		}
	})
}

// bindMount is a host folder mounted into a chroot.
type bindMount struct{ source, target string }

// chroot runs a program of an unpacked image inside it, as a container
// runtime would: with /dev and /proc, env added to DefaultPath as its
// environment and mount bound into it when not nil, in a mount namespace of
// its own that goes away with it. It returns what the program wrote, failing
// the test when it fails.
func chroot(t *testing.T, root string, mount *bindMount, env []string, program string, args ...string) string {
	t.Helper()
	cmd := chrootCommand(t, root, mount, env, "", program, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", program, strings.Join(args, " "), root, err, out)
	}
	return string(out)
}

// chrootCommand returns the command chroot runs, the program running as
// userspec (chroot's USER:GROUP) when it is not "".
func chrootCommand(t *testing.T, root string, mount *bindMount, env []string, userspec string, program string, args ...string) *exec.Cmd {
	t.Helper()
	mounts := []bindMount{{source: "/dev", target: "/dev"}, {source: "/proc", target: "/proc"}}
	if mount != nil {
		mounts = append(mounts, *mount)
	}
	var script strings.Builder
	for i, m := range mounts {
		target := filepath.Join(root, m.target)
		if err := os.MkdirAll(target, 0o755); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&script, `mount --rbind "$MOUNT_SOURCE_%d" "$MOUNT_TARGET_%d" && `, i, i)
		env = append(slices.Clone(env), fmt.Sprintf("MOUNT_SOURCE_%d=%s", i, m.source), fmt.Sprintf("MOUNT_TARGET_%d=%s", i, target))
	}
	if userspec != "" {
		script.WriteString(`exec chroot --userspec="$USERSPEC" "$0" "$@"`)
		env = append(env, "USERSPEC="+userspec)
	} else {
		script.WriteString(`exec chroot "$0" "$@"`)
	}
	cmd := exec.CommandContext(t.Context(), "unshare", append([]string{"--mount", "--propagation", "private", "--", "sh", "-c", script.String(), root, program}, args...)...)
	// Nothing of the host's environment: the image's programs find what
	// they need in the image or not at all.
	cmd.Env = append([]string{images.DefaultPath}, env...)
	return cmd
}

// unpack writes the files of an image, its layers flattened, under root.
func unpack(t *testing.T, img v1.Image, root string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(root, filepath.FromSlash(path.Clean("/"+hdr.Name)))
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o755)
		case tar.TypeSymlink:
			if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
				err = os.Symlink(hdr.Linkname, target)
			}
		case tar.TypeReg:
			var data bytes.Buffer
			if _, err = io.Copy(&data, tr); err == nil {
				if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
					err = os.WriteFile(target, data.Bytes(), os.FileMode(hdr.Mode).Perm())
				}
			}
		default:
			t.Fatalf("%s: unexpected entry type %c", hdr.Name, hdr.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func imageEntrypoint(t *testing.T, img v1.Image) []string {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return cf.Config.Entrypoint
}

// etcdBinary returns the etcd the tests run: $KOS_KUBE_BIN_DIR's, else the
// one tools/etcd/build.sh builds (once).
func etcdBinary(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv(testenv.BinDirEnv); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "etcd")); err == nil {
			return filepath.Join(dir, "etcd")
		}
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), "bash", filepath.Join(root, "tools", "etcd", "build.sh")).Output()
	if err != nil {
		t.Fatalf("building etcd: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return filepath.Join(lines[len(lines)-1], "etcd")
}
