package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestCommandWithoutEnvironment(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantOut    string
		wantErrMsg string
	}{
		{name: "help", args: []string{"--help"}, wantCode: 0, wantOut: "localenv runs a real etcd and kube-apiserver"},
		{name: "up help", args: []string{"up", "--help"}, wantCode: 0, wantOut: "--nodes"},
		{name: "no nodes", args: []string{"up", "--cluster", "--nodes", "0", "--dir", dir}, wantCode: 1, wantErrMsg: "at least one node"},
		{name: "unknown command", args: []string{"sideways", "--dir", dir}, wantCode: 1, wantErrMsg: `unknown command "sideways"`},
		{name: "stray argument", args: []string{"up", "now", "--dir", dir}, wantCode: 1, wantErrMsg: `unknown command "now"`},
		{name: "status", args: []string{"status", "--dir", dir}, wantCode: 3, wantErrMsg: "no local environment in " + dir},
		{name: "env", args: []string{"env", "--dir", dir}, wantCode: 1, wantErrMsg: "no local environment in " + dir},
		{name: "down", args: []string{"down", "--dir", dir}, wantCode: 0, wantOut: "Nothing to stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			cmd := newCommand(&out, &errOut)
			cmd.SetArgs(tt.args)
			err := cmd.Execute()
			if got := exitCode(err); got != tt.wantCode {
				t.Errorf("exit code = %d (err %v), want %d", got, err, tt.wantCode)
			}
			if !strings.Contains(out.String(), tt.wantOut) {
				t.Errorf("stdout = %q, want it to contain %q", out.String(), tt.wantOut)
			}
			if tt.wantErrMsg != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErrMsg)) {
				t.Errorf("error = %v, want one containing %q", err, tt.wantErrMsg)
			}
		})
	}
}

func TestShellQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{in: "/work/main/.cache/localenv/kubeconfig", want: "/work/main/.cache/localenv/kubeconfig"},
		{in: "/tmp/a b/kubeconfig", want: "'/tmp/a b/kubeconfig'"},
		{in: "/tmp/it's", want: `'/tmp/it'\''s'`},
		{in: "", want: "''"},
	}
	for _, tt := range tests {
		if got := shellQuote(tt.in); got != tt.want {
			t.Errorf("shellQuote(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
