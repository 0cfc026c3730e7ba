package agent

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestOVSRunDir checks which Open vSwitch the agent programs: the node's
// own when one answers in --host-ovs-run-dir, else --ovs-run-dir's.
func TestOVSRunDir(t *testing.T) {
	// Unix socket paths are short: not t.TempDir's long name.
	host, err := os.MkdirTemp("", "ovs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(host) })
	const pod = "/var/run/kos/openvswitch"
	tests := []struct {
		name    string
		hostDir string
		answers bool
		want    string
	}{
		{name: "no host run dir given", want: pod},
		{name: "nothing answers there", hostDir: host, want: pod},
		{name: "the node's own answers", hostDir: host, answers: true, want: host},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.answers {
				if err := os.WriteFile(filepath.Join(host, "ovs-vswitchd.pid"), []byte("7\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				for _, s := range []string{"db.sock", "ovs-vswitchd.7.ctl"} {
					ln, err := net.Listen("unix", filepath.Join(host, s))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { ln.Close() })
				}
			}
			o := NewOptions()
			o.OVSRunDir, o.HostOVSRunDir = pod, tt.hostDir
			if got := o.ovsRunDir(); got != tt.want {
				t.Errorf("ovsRunDir() = %q, want %q", got, tt.want)
			}
		})
	}
}
