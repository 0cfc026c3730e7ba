package nodecleanup

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/internal/cmdline"
)

// writeTree makes files (path → content; a path ending in / is a folder)
// under root.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// listTree returns the paths under root, folders with a trailing /.
func listTree(t *testing.T, root string) []string {
	t.Helper()
	var got []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			rel += "/"
		}
		got = append(got, "/"+rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	return got
}

func TestUnderRoot(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"run/": "", "var/lib/": "", "opt/cni/bin/": ""})
	for link, target := range map[string]string{
		"var/run":    "/run",       // as on most nodes
		"var/lib2":   "lib",        // relative
		"var/loop":   "/var/loop",  // a loop
		"var/escape": "../../../x", // cannot leave the root
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		path    string
		want    string
		wantErr bool
	}{
		{path: "/var/run/kos/cni.sock", want: "/run/kos/cni.sock"},
		{path: "/var/lib2/kos/openvswitch", want: "/var/lib/kos/openvswitch"},
		{path: "/opt/cni/bin/kos", want: "/opt/cni/bin/kos"},
		{path: "/var/escape/y", want: "/x/y"},
		{path: "/var/./run/../run/kos", want: "/run/kos"},
		{path: "/var/loop/x", wantErr: true},
		{path: "relative/path", wantErr: true},
		{path: "", want: ""},
	} {
		t.Run(tc.path, func(t *testing.T) {
			got, err := underRoot(root, tc.path)
			if (err != nil) != tc.wantErr {
				t.Fatalf("underRoot(%q) error %v, want error %v", tc.path, err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if tc.want != "" {
				tc.want = filepath.Join(root, tc.want)
			}
			if got != tc.want {
				t.Errorf("underRoot(%q) = %q, want %q", tc.path, got, tc.want)
			}
		})
	}
}

// TestCleanupRefusesWhileServing: an agent serving on the CNI socket makes
// Cleanup refuse with exit code 3 and a message that says what to do, and
// touch nothing.
func TestCleanupRefusesWhileServing(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"opt/cni/bin/kos": "kos-cni"})
	sock := filepath.Join(root, "var/run/kos/cni.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	before := listTree(t, root)

	cfg := NewConfig()
	cfg.Root = root
	var out bytes.Buffer
	cfg.Out = &out
	err = Run(t.Context(), cfg)
	var serving *ServingError
	if !errors.As(err, &serving) {
		t.Fatalf("Cleanup while the CNI socket answers: %v, want a *ServingError", err)
	}
	if got := serving.ExitCode(); got != ExitServing {
		t.Errorf("ExitCode = %d, want %d", got, ExitServing)
	}
	for _, want := range []string{"/var/run/kos/cni.sock answers", "channels delete addon", "--force"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if diff := cmp.Diff(before, listTree(t, root)); diff != "" {
		t.Errorf("files changed by a refused cleanup (-before +after):\n%s", diff)
	}
	if out.Len() != 0 {
		t.Errorf("a refused cleanup printed %q", out.String())
	}
}

// TestCleanupFiles removes the agent's files and folders from a node's root
// and nothing else, then finds nothing to do.
func TestCleanupFiles(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"opt/cni/bin/kos":              "kos-cni",
		"opt/cni/bin/.kos.tmp-123":     "half a kos-cni",
		"opt/cni/bin/multus":           "not ours",
		"opt/cni/bin/kosmos":           "not ours either",
		"run/kos/cni.sock":             "", // a socket nobody serves
		"run/kos/openvswitch/db.sock":  "",
		"var/lib/kos/openvswitch/x":    "", // no conf.db: nothing to start
		"var/lib/other/keep":           "",
		"var/run/openvswitch/":         "", // made by the pod's hostPath volume
		"etc/cni/net.d/00-multus.conf": "{}",
	})
	// The sockets' folder is reached through a link to /run, as /var/run
	// is on most nodes.
	if err := os.Symlink("/run", filepath.Join(root, "var/run-link")); err != nil {
		t.Fatal(err)
	}
	cfg := NewConfig()
	cfg.Root = root
	cfg.CNISocket = "/var/run-link/kos/cni.sock"
	cfg.OVSRunDir = "/var/run-link/kos/openvswitch"

	run := func() string {
		t.Helper()
		var out bytes.Buffer
		cfg.Out = &out
		c := &cleanup{cfg: cfg}
		for _, p := range []*string{&c.cfg.OVSRunDir, &c.cfg.OVSDBDir, &c.cfg.HostOVSRunDir, &c.cfg.CNISocket, &c.cfg.CNIBinary} {
			var err error
			if *p, err = underRoot(root, *p); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.ownOVS(t.Context(), false); err != nil {
			t.Fatal(err)
		}
		if err := c.removeFiles(false); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&out, "changes: %d\n", c.changes)
		return out.String()
	}

	got := run()
	want := `Removed /var/lib/kos/openvswitch
Removed /run/kos/openvswitch
Removed /var/lib/kos (empty)
Removed /opt/cni/bin/kos
Removed /opt/cni/bin/.kos.tmp-123
Removed /run/kos/cni.sock
Removed /run/kos (empty)
Removed /var/run/openvswitch (empty)
changes: 8
`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("first run printed (-want +got):\n%s", diff)
	}
	wantTree := []string{
		"/etc/", "/etc/cni/", "/etc/cni/net.d/", "/etc/cni/net.d/00-multus.conf",
		"/opt/", "/opt/cni/", "/opt/cni/bin/", "/opt/cni/bin/kosmos", "/opt/cni/bin/multus",
		"/run/", "/var/", "/var/lib/", "/var/lib/other/", "/var/lib/other/keep", "/var/run-link",
		"/var/run/",
	}
	if diff := cmp.Diff(wantTree, listTree(t, root)); diff != "" {
		t.Errorf("left on the node (-want +got):\n%s", diff)
	}
	if got := run(); got != "changes: 0\n" {
		t.Errorf("second run printed %q, want no change", got)
	}
}

// TestCommand checks the command line of kos-agent cleanup: its help, and
// the errors of a wrong one.
func TestCommand(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		wantErr   bool
		wantUsage bool
	}{
		{name: "help", args: []string{"--help"}},
		{name: "unknown flag", args: []string{"--no-such-flag"}, wantErr: true, wantUsage: true},
		{name: "argument", args: []string{"now"}, wantErr: true, wantUsage: true},
		{name: "relative path", args: []string{"--cni-bin=kos"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			cmd := NewCommand(&out)
			cmd.SetOut(&out)
			cmd.SetErr(&errOut)
			cmd.SetArgs(tc.args)
			err := cmd.ExecuteContext(t.Context())
			if (err != nil) != tc.wantErr || cmdline.IsUsage(err) != tc.wantUsage {
				t.Errorf("kos-agent cleanup %v: %v; want an error %t, a usage error %t (stderr %q)", tc.args, err, tc.wantErr, tc.wantUsage, errOut.String())
			}
			if tc.name == "help" {
				for _, want := range []string{"Exit codes:", "--host-root", "--force", "kos-agent cleanup --host-root=/host --stay"} {
					if !strings.Contains(out.String(), want) {
						t.Errorf("help does not say %q:\n%s", want, out.String())
					}
				}
			}
		})
	}
	var coder interface{ ExitCode() int }
	if !errors.As(fmt.Errorf("wrapped: %w", &ServingError{What: "x"}), &coder) || coder.ExitCode() != ExitServing {
		t.Errorf("a wrapped *ServingError does not say exit code %d", ExitServing)
	}
}

func TestParseBridgeDatapaths(t *testing.T) {
	for _, tc := range []struct {
		name    string
		out     string
		want    map[string]string
		wantErr bool
	}{
		{name: "none", out: "", want: map[string]string{}},
		{name: "both datapaths", out: "kos,netdev\nbr-ul,netdev\nbr-int,\n", want: map[string]string{"kos": "netdev", "br-ul": "netdev", "br-int": ""}},
		{name: "quoted", out: `"kos","system"`, want: map[string]string{"kos": "system"}},
		{name: "garbage", out: "kos\n", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseBridgeDatapaths(tc.out)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); !tc.wantErr && diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
