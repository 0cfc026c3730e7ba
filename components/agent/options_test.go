package agent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"

	"github.com/kos-sdn/kos/internal/cmdline"
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

// TestDebugFlags checks where the debug endpoints are served as the flags
// say, and which settings Validate refuses.
func TestDebugFlags(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantAddr string
		wantErr  bool
	}{
		{name: "defaults", wantAddr: ":9299"},
		{name: "another address", args: []string{"--debug-bind-address=127.0.0.1:9400"}, wantAddr: "127.0.0.1:9400"},
		{name: "off", args: []string{"--debug-endpoints=false"}, wantAddr: ""},
		{name: "off, with a bad address", args: []string{"--debug-endpoints=false", "--debug-bind-address=nonsense"}, wantAddr: ""},
		{name: "not host:port", args: []string{"--debug-bind-address=9299"}, wantErr: true},
		{name: "the metrics' address", args: []string{"--debug-bind-address=:9298"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			o.HostIP = "192.168.1.1"
			fs := pflag.NewFlagSet("kos-agent", pflag.ContinueOnError)
			for _, f := range o.Flags().FlagSets {
				fs.AddFlagSet(f)
			}
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := o.Validate()
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Fatalf("Validate() = %v, want an error: %t", err, tt.wantErr)
			}
			if got := o.debugBindAddress(); !tt.wantErr && got != tt.wantAddr {
				t.Errorf("debugBindAddress() = %q, want %q", got, tt.wantAddr)
			}
		})
	}
}

// exitCodeError is an error that says its exit code, as cleanup's refusal
// does.
type exitCodeError struct{ code int }

func (e exitCodeError) Error() string { return "refused" }
func (e exitCodeError) ExitCode() int { return e.code }

func TestExitCode(t *testing.T) {
	usage := cmdline.UsageErrorf(NewCommand(io.Discard, io.Discard), "unexpected arguments")
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"none", nil, ExitOK},
		{"a wrong command line", usage, ExitUsage},
		{"its own, wrapped", fmt.Errorf("cleanup: %w", exitCodeError{3}), 3},
		{"any other", errors.New("failed"), ExitError},
	} {
		if got := ExitCode(tc.err); got != tc.want {
			t.Errorf("%s: ExitCode(%v) = %d, want %d", tc.name, tc.err, got, tc.want)
		}
	}
}
