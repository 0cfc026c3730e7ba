package apiserver_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/kos-sdn/kos/components/apiserver"
)

func TestCommandFlags(t *testing.T) {
	var out bytes.Buffer
	cmd := apiserver.NewCommand(&out, &out)

	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if strings.TrimSpace(f.Usage) == "" {
			t.Errorf("flag --%s has no help text", f.Name)
		}
	})
	for _, name := range []string{
		"etcd-servers", "etcd-prefix", "etcd-cafile", "etcd-certfile", "etcd-keyfile",
		"bind-address", "secure-port", "cert-dir", "tls-cert-file", "tls-private-key-file", "alternate-dns",
		"kubeconfig", "authentication-kubeconfig", "authorization-kubeconfig",
		"agent-identities", "pod-attachment-deleters", "enable-admission-plugins", "disable-admission-plugins",
		"feature-gates", "v", "version", "help",
	} {
		if cmd.Flags().Lookup(name) == nil {
			t.Errorf("flag --%s is missing", name)
		}
	}
	if got := cmd.Flags().Lookup("etcd-prefix").DefValue; got != apiserver.DefaultEtcdPrefix {
		t.Errorf("--etcd-prefix defaults to %q, want %q", got, apiserver.DefaultEtcdPrefix)
	}

	if got, want := cmd.Flags().Lookup("agent-identities").DefValue, "[system:serviceaccount:kos-node:kos-agent,system:serviceaccount:example-com:kos-agent]"; got != want {
		t.Errorf("--agent-identities defaults to %q, want %q", got, want)
	}
	if got, want := cmd.Flags().Lookup("pod-attachment-deleters").DefValue,
		"[system:serviceaccount:example-com:kos-controller-manager,system:serviceaccount:kube-system:generic-garbage-collector,system:kube-controller-manager]"; got != want {
		t.Errorf("--pod-attachment-deleters defaults to %q, want %q", got, want)
	}
	// NodeRestriction, PodAttachmentProtection and ResourceQuota are among
	// the plugins on by default.
	if usage := cmd.Flags().Lookup("enable-admission-plugins").Usage; !strings.Contains(usage, "ValidatingAdmissionWebhook, NodeRestriction, PodAttachmentProtection, ResourceQuota).") {
		t.Errorf("--enable-admission-plugins does not list NodeRestriction, PodAttachmentProtection and ResourceQuota as on by default: %q", usage)
	}

	if err := cmd.Help(); err != nil {
		t.Fatalf("printing help: %v", err)
	}
	for _, section := range []string{"Etcd flags:", "Secure serving flags:", "Authentication flags:", "Authorization flags:", "Main cluster flags:", "Logs flags:"} {
		if !strings.Contains(out.String(), section) {
			t.Errorf("help lacks the section %q", section)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // a part of the error; "" means valid
	}{
		{"no etcd", nil, "--etcd-servers must be specified"},
		{"etcd", []string{"--etcd-servers=http://127.0.0.1:2379"}, ""},
		{"bad port", []string{"--etcd-servers=http://127.0.0.1:2379", "--secure-port=70000"}, "--secure-port 70000 must be between 1 and 65535"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := apiserver.NewOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			for _, set := range o.Flags().FlagSets {
				fs.AddFlagSet(set)
			}
			if err := fs.Parse(tc.args); err != nil {
				t.Fatalf("parsing %q: %v", tc.args, err)
			}
			if err := o.Complete(); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			err := o.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want no error", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate() = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
