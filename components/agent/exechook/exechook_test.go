package exechook

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/sets"
)

var testVars = Vars{IfName: "kos060000050001", IPv4: "10.0.0.5", MAC: "06:00:00:05:00:01"}

func TestExpand(t *testing.T) {
	tests := []struct {
		name    string
		command []string
		want    []string
	}{
		{"nothing to expand", []string{"/bin/true"}, []string{"/bin/true"}},
		{"each variable", []string{"/sbin/ip", "link", "set", "${ifname}", "address", "${mac}"}, []string{"/sbin/ip", "link", "set", "kos060000050001", "address", "06:00:00:05:00:01"}},
		{"inside an argument, twice", []string{"/bin/echo", "${ipv4}/24 on ${ifname}, ${ipv4}"}, []string{"/bin/echo", "10.0.0.5/24 on kos060000050001, 10.0.0.5"}},
		{"others stay", []string{"/bin/echo", "$ifname", "${HOME}", "$(id)", "${ifname"}, []string{"/bin/echo", "$ifname", "${HOME}", "$(id)", "${ifname"}},
		{"the program too", []string{"${ifname}"}, []string{"kos060000050001"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(expand(tc.command, testVars), tc.want); diff != "" {
				t.Errorf("expand(%q) (-got +want):\n%s", tc.command, diff)
			}
		})
	}
}

func TestExecCheck(t *testing.T) {
	p := &Policy{allowed: sets.New("/bin/echo", "/usr/sbin/ip")}
	tests := []struct {
		name    string
		command []string
		allowed bool
	}{
		{"allowed", []string{"/bin/echo", "hi"}, true},
		{"allowed, no arguments", []string{"/usr/sbin/ip"}, true},
		{"not on the list", []string{"/bin/sh", "-c", "echo hi"}, false},
		{"a bare name is not looked up", []string{"echo", "hi"}, false},
		{"not clean", []string{"/bin/../bin/echo"}, false},
		{"not clean either", []string{"/bin//echo"}, false},
		{"relative", []string{"bin/echo"}, false},
		{"a variable does not name the program", []string{"${ifname}"}, false},
		{"empty", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := p.Check(tc.command, testVars)
			if got := err == nil; got != tc.allowed {
				t.Errorf("check(%q) = %v, want allowed %t", tc.command, err, tc.allowed)
			}
			if err != nil && len(tc.command) > 0 && !errors.Is(err, ErrNotAllowed) {
				t.Errorf("check(%q) = %v, want ErrNotAllowed", tc.command, err)
			}
		})
	}
}

func TestExecRun(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("looking for sh: %v", err)
	}
	echo, err := exec.LookPath("echo")
	if err != nil {
		t.Fatalf("looking for echo: %v", err)
	}
	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := func() time.Time { return start }
	p := &Policy{allowed: sets.New(sh, echo), timeout: 2 * time.Second, now: clock}
	long := strings.Repeat("x", 3*maxExecOutput)
	tests := []struct {
		name       string
		command    []string
		exitStatus int32
		stdout     string
		stderr     string // a prefix of the report's
	}{
		{"ok", []string{echo, "${ifname}", "${ipv4}", "${mac}"}, 0, "kos060000050001 10.0.0.5 06:00:00:05:00:01\n", ""},
		{"exit status and stderr", []string{sh, "-c", "echo out; echo err >&2; exit 3"}, 3, "out\n", "err\n"},
		{"refused", []string{"/bin/false"}, -1, "", `program "/bin/false": command is not on the agent's allow-list`},
		{"output is bounded", []string{sh, "-c", "printf " + long}, 0, long[:maxExecOutput], ""},
		{"killed after the timeout", []string{sh, "-c", "sleep 30"}, -1, "", "killed after 2s"},
		{"does not exist", []string{sh + "-not-there"}, -1, "", ""},
	}
	p.allowed.Insert(sh + "-not-there")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := p.Run(context.Background(), tc.command, testVars)
			if diff := cmp.Diff(r.Command, expand(tc.command, testVars)); diff != "" {
				t.Errorf("command (-got +want):\n%s", diff)
			}
			if r.ExitStatus != tc.exitStatus {
				t.Errorf("exit status %d, want %d (stderr %q)", r.ExitStatus, tc.exitStatus, r.StdErr)
			}
			if r.StdOut != tc.stdout {
				t.Errorf("stdout %q, want %q", r.StdOut, tc.stdout)
			}
			if !strings.HasPrefix(r.StdErr, tc.stderr) {
				t.Errorf("stderr %q, want it to start with %q", r.StdErr, tc.stderr)
			}
			if tc.exitStatus < 0 && r.StdErr == "" {
				t.Errorf("a command that did not run reports no reason")
			}
			if !r.StartTime.Time.Equal(start) || !r.StopTime.Time.Equal(start) {
				t.Errorf("times %v..%v, want both %v", r.StartTime, r.StopTime, start)
			}
		})
	}
}

func TestExecRules(t *testing.T) {
	rules, err := compileRules([]Rule{
		{Path: "/usr/sbin/ip", Args: []string{"link", "set", "kos[0-9a-f]{12}", "mtu", "1[0-9]{3}"}},
		{Path: "/usr/sbin/ip", Args: []string{"addr", "add", `10\.0\.0\.[0-9]+/24`, "dev", "kos[0-9a-f]{12}"}},
		{Path: "/bin/true", Args: nil},
	})
	if err != nil {
		t.Fatalf("compiling rules: %v", err)
	}
	p := &Policy{allowed: sets.New("/bin/echo"), rules: rules}
	tests := []struct {
		name    string
		command []string
		allowed bool
	}{
		{"first form, expanded", []string{"/usr/sbin/ip", "link", "set", "${ifname}", "mtu", "1400"}, true},
		{"second form", []string{"/usr/sbin/ip", "addr", "add", "${ipv4}/24", "dev", "${ifname}"}, true},
		{"another interface", []string{"/usr/sbin/ip", "link", "set", "eth0", "mtu", "1400"}, false},
		{"another subcommand", []string{"/usr/sbin/ip", "route", "add", "default", "via", "10.0.0.1"}, false},
		{"patterns are anchored", []string{"/usr/sbin/ip", "link", "set", "${ifname}", "mtu", "14000"}, false},
		{"an argument does not match inside another", []string{"/usr/sbin/ip", "link", "set", "xkos060000050001", "mtu", "1400"}, false},
		{"one argument too many", []string{"/usr/sbin/ip", "link", "set", "${ifname}", "mtu", "1400", "up"}, false},
		{"one argument too few", []string{"/usr/sbin/ip", "link", "set", "${ifname}", "mtu"}, false},
		{"no arguments where the rule wants none", []string{"/bin/true"}, true},
		{"arguments where the rule wants none", []string{"/bin/true", "x"}, false},
		{"--allowed-programs takes any arguments", []string{"/bin/echo", "anything"}, true},
		{"a program without rules", []string{"/bin/sh", "-c", "id"}, false},
		{"the path must be verbatim", []string{"/usr/sbin/../sbin/ip", "link", "set", "${ifname}", "mtu", "1400"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := p.Check(tc.command, testVars)
			if got := err == nil; got != tc.allowed {
				t.Errorf("check(%q) = %v, want allowed %t", tc.command, err, tc.allowed)
			}
			if err != nil && !errors.Is(err, ErrNotAllowed) {
				t.Errorf("check(%q) = %v, want ErrNotAllowed", tc.command, err)
			}
		})
	}
}

func TestLoadExecAllowFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := write("good.yaml", "rules:\n- path: /usr/sbin/ip\n  args: [link, set, 'kos[0-9a-f]{12}', up]\n- path: /bin/true\n")
	rules, err := LoadAllowFile(good)
	if err != nil {
		t.Fatalf("loading a good file: %v", err)
	}
	want := []Rule{{Path: "/usr/sbin/ip", Args: []string{"link", "set", "kos[0-9a-f]{12}", "up"}}, {Path: "/bin/true"}}
	if diff := cmp.Diff(rules, want); diff != "" {
		t.Errorf("rules (-got +want):\n%s", diff)
	}
	for name, tc := range map[string]struct{ content, wantErr string }{
		"unknown field": {"rules:\n- path: /bin/true\n  argz: []\n", `unknown field "argz"`},
		"relative path": {"rules:\n- path: ip\n", `rules[0].path "ip": want an absolute, clean path`},
		"bad pattern":   {"rules:\n- path: /bin/echo\n  args: ['(']\n", "rules[0].args[0]: error parsing regexp"},
		"not a list":    {"rules: 3\n", "cannot unmarshal"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := LoadAllowFile(write(strings.ReplaceAll(name, " ", "-")+".yaml", tc.content))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("LoadAllowFile = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
	// The ConfigMap it comes from is optional: no file allows nothing.
	if rules, err := LoadAllowFile(filepath.Join(dir, "missing.yaml")); err != nil || len(rules) != 0 {
		t.Errorf("a missing file: rules %v, error %v; want none, nil", rules, err)
	}
	if _, err := LoadAllowFile(dir); err == nil {
		t.Error("a folder loads")
	}
}
