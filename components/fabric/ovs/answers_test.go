package ovs

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestAnswers(t *testing.T) {
	listen := func(t *testing.T, path string) {
		t.Helper()
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
	}
	tests := []struct {
		name    string
		pid     bool
		sockets []string
		want    bool
	}{
		{name: "nothing there"},
		{name: "a stale pid file", pid: true},
		{name: "the database only", pid: true, sockets: []string{"db.sock"}},
		{name: "ovs-vswitchd only", pid: true, sockets: []string{"ovs-vswitchd.42.ctl"}},
		{name: "both daemons", pid: true, sockets: []string{"db.sock", "ovs-vswitchd.42.ctl"}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Unix socket paths are short: not t.TempDir's long name.
			dir, err := os.MkdirTemp("", "ovs")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			if tt.pid {
				if err := os.WriteFile(filepath.Join(dir, "ovs-vswitchd.pid"), []byte("42\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for _, s := range tt.sockets {
				listen(t, filepath.Join(dir, s))
			}
			err = Answers(dir)
			if got := err == nil; got != tt.want {
				t.Errorf("Answers: %v, want answering %t", err, tt.want)
			}
		})
	}
}
