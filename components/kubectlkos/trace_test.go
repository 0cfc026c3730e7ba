package kubectlkos

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kos-sdn/kos/components/agent/api"
)

// TestArguments runs the command line up to where it would connect: help
// and usage errors need no cluster.
func TestArguments(t *testing.T) {
	// A kubeconfig of a server that refuses connections: no test reads the
	// machine's, nor reaches a server.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: c, context: {cluster: c, namespace: t1}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kubeconfig)
	tests := []struct {
		args     []string
		wantCode int
		wantOut  string // in stdout
		wantErr  string // in stderr
	}{
		{args: []string{"--help"}, wantCode: 0, wantOut: "kubectl kos [command]"},
		{args: nil, wantCode: 0, wantOut: "Available Commands:"},
		{args: []string{"status", "--help"}, wantCode: 0, wantOut: "kubectl kos status [flags]"},
		{args: []string{"trace", "--help"}, wantCode: 0, wantOut: "kubectl kos trace ATTACHMENT --to IP [flags]"},
		{args: []string{"support-bundle", "--help"}, wantCode: 0, wantOut: "kubectl kos support-bundle [flags]"},
		{args: []string{"nonsense"}, wantCode: 2, wantErr: `unknown command "nonsense" for "kubectl kos"`},
		{args: []string{"status", "node-1"}, wantCode: 2, wantErr: `kubectl kos status takes no arguments, got ["node-1"]`},
		{args: []string{"status", "-o", "xml"}, wantCode: 2, wantErr: `--output "xml" is not a format`},
		{args: []string{"status", "--bogus"}, wantCode: 2, wantErr: "unknown flag: --bogus"},
		{args: []string{"trace"}, wantCode: 2, wantErr: "give one attachment name, got 0 arguments"},
		{args: []string{"trace", "a1", "a2", "--to", "10.0.0.1"}, wantCode: 2, wantErr: "give one attachment name, got 2"},
		{args: []string{"trace", "a1"}, wantCode: 2, wantErr: "--to is required"},
		{args: []string{"trace", "a1", "--to", "10.0.0.300"}, wantCode: 2, wantErr: `destination "10.0.0.300": want an IPv4 address`},
		{args: []string{"trace", "a1", "--to", "fd00::1"}, wantCode: 2, wantErr: "want an IPv4 address"},
		{args: []string{"trace", "a1", "--to", "10.0.0.1", "--protocol", "tcp"}, wantCode: 2, wantErr: "want a tcp port in [1,65535]"},
		{args: []string{"trace", "a1", "--to", "10.0.0.1", "--protocol", "sctp"}, wantCode: 2, wantErr: `protocol "sctp"`},
		{args: []string{"trace", "A_1", "--to", "10.0.0.1"}, wantCode: 2, wantErr: `name "A_1"`},
		{args: []string{"support-bundle", "--tail", "0"}, wantCode: 2, wantErr: "--tail must be positive"},
		{args: []string{"support-bundle", "extra"}, wantCode: 2, wantErr: "takes no arguments"},
		// Valid, then no cluster to talk to.
		{args: []string{"trace", "a1", "--to", "10.0.0.1"}, wantCode: 1, wantErr: "getting attachment t1/a1: Get \"https://127.0.0.1:1/apis/network.example.com/v1alpha1/namespaces/t1/networkattachments/a1\""},
		{args: []string{"trace", "a1", "--to", "10.0.0.1", "-n", "t2"}, wantCode: 1, wantErr: "getting attachment t2/a1"},
		{args: []string{"status"}, wantCode: 1, wantErr: "listing the agent pods in namespace kos-node"},
		{args: []string{"status", "--agent-namespace", "kube-system"}, wantCode: 1, wantErr: "listing the agent pods in namespace kube-system"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Main(context.Background(), tt.args, genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d; stderr %q", code, tt.wantCode, errOut.String())
			}
			if !strings.Contains(out.String(), tt.wantOut) {
				t.Errorf("stdout %q does not say %q", out.String(), tt.wantOut)
			}
			if !strings.Contains(errOut.String(), tt.wantErr) {
				t.Errorf("stderr %q does not say %q", errOut.String(), tt.wantErr)
			}
			if tt.wantCode != 0 && strings.Count(errOut.String(), "\n") != 1 {
				t.Errorf("stderr %q: want the error on one line", errOut.String())
			}
		})
	}
}

func TestTrace(t *testing.T) {
	t.Parallel()
	ag, p, kos := statusFixture()
	p.answers["kos-agent-bbbb POST "+api.PathTrace] = "Flow: icmp,in_port=3\n\nDatapath actions: drop\n"
	tests := []struct {
		name      string
		req       api.TraceRequest
		want      string
		wantErr   string
		wantAsked []string
	}{{
		name:      "to the attachment's node",
		req:       api.TraceRequest{Namespace: "t1", Name: "b1", To: "10.1.0.9"},
		want:      "Attachment t1/b1 (10.1.0.2, VNI 4097) on node node-2, traced by agent kos-agent-bbbb:\nFlow: icmp,in_port=3\n\nDatapath actions: drop\n",
		wantAsked: []string{`kos-node/kos-agent-bbbb:9298 POST /debug/trace {"namespace":"t1","name":"b1","to":"10.1.0.9"}`},
	}, {
		name:    "unknown attachment",
		req:     api.TraceRequest{Namespace: "t1", Name: "zz", To: "10.1.0.9"},
		wantErr: "attachment zz not found in namespace t1",
	}, {
		name:      "agent fails",
		req:       api.TraceRequest{Namespace: "t1", Name: "a1", To: "10.1.0.9"},
		wantErr:   "tracing on node node-1 (agent kos-agent-aaaa): POST /debug/trace: 503: no route to host",
		wantAsked: []string{`kos-node/kos-agent-aaaa:9298 POST /debug/trace {"namespace":"t1","name":"a1","to":"10.1.0.9"}`},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.asked = nil
			var out bytes.Buffer
			err := trace(context.Background(), ag, kos, tt.req, &out)
			if got := errString(err); got != tt.wantErr {
				t.Errorf("error %q, want %q", got, tt.wantErr)
			}
			if diff := cmp.Diff(out.String(), tt.want); diff != "" {
				t.Errorf("output (-got +want):\n%s", diff)
			}
			if diff := cmp.Diff(p.asked, tt.wantAsked); diff != "" {
				t.Errorf("requests (-got +want):\n%s", diff)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
