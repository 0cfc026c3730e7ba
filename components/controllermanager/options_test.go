package controllermanager

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

const testKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:6443
    insecure-skip-tls-verify: true
users:
- name: u
  user:
    token: secret
contexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
`

func TestOptionsConfig(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(testKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	type summary struct {
		KubeHost, KOSHost, KOSCAFile string
		QPS, KOSQPS                  float32
		Burst, KOSBurst              int
		Leader                       bool
		Identity                     string
		IPAMWorkers                  int
		PodNetworks                  bool
		PodNetworkWorkers            int
		NetworkConfig                bool
		Metrics                      string
		Liveness                     bool
		LeaseNamespace               string
		LeaseGrace                   time.Duration
	}
	tests := []struct {
		name string
		args []string
		want summary
	}{
		{"defaults: aggregated, elected", nil, summary{
			KubeHost: "https://127.0.0.1:6443", KOSHost: "https://127.0.0.1:6443",
			QPS: 200, Burst: 400, KOSQPS: 5000, KOSBurst: 10000, Leader: true, IPAMWorkers: 16, PodNetworkWorkers: 4, Metrics: ":9295",
			Liveness: true, LeaseNamespace: "kos-node", LeaseGrace: 5 * time.Second,
		}},
		{"direct, no election", []string{
			"--kos-api-server=https://kos.example-com.svc:443", "--kos-api-ca-file=/ca.crt",
			"--leader-elect=false", "--kube-api-qps=7", "--kube-api-burst=9", "--kos-api-qps=70", "--kos-api-burst=90",
			"--ipam-workers=8", "--metrics-bind-address=", "--pod-networks", "--pod-network-workers=3",
			"--network-config=false",
			"--agent-lease-namespace=agents", "--agent-lease-grace=2s",
		}, summary{
			KubeHost: "https://127.0.0.1:6443", KOSHost: "https://kos.example-com.svc:443", KOSCAFile: "/ca.crt",
			QPS: 7, Burst: 9, KOSQPS: 70, KOSBurst: 90, IPAMWorkers: 8, PodNetworks: true, PodNetworkWorkers: 3,
			Liveness: true, LeaseNamespace: "agents", LeaseGrace: 2 * time.Second,
		}},
		{"no liveness", []string{"--attachment-liveness=false"}, summary{
			KubeHost: "https://127.0.0.1:6443", KOSHost: "https://127.0.0.1:6443",
			QPS: 200, Burst: 400, KOSQPS: 5000, KOSBurst: 10000, Leader: true, IPAMWorkers: 16, PodNetworkWorkers: 4, Metrics: ":9295",
			LeaseNamespace: "kos-node", LeaseGrace: 5 * time.Second,
		}},
		{"named identity", []string{"--leader-elect-identity=me"}, summary{
			KubeHost: "https://127.0.0.1:6443", KOSHost: "https://127.0.0.1:6443",
			QPS: 200, Burst: 400, KOSQPS: 5000, KOSBurst: 10000, Leader: true, Identity: "me", IPAMWorkers: 16, PodNetworkWorkers: 4, Metrics: ":9295",
			Liveness: true, LeaseNamespace: "kos-node", LeaseGrace: 5 * time.Second,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			for _, f := range o.Flags().FlagSets {
				fs.AddFlagSet(f)
			}
			if err := fs.Parse(append([]string{"--kubeconfig=" + kubeconfig}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			if err := o.Complete(); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if err := o.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			cfg, err := o.Config(context.Background())
			if err != nil {
				t.Fatalf("Config: %v", err)
			}
			got := summary{
				KubeHost: cfg.Kube.Host, KOSHost: cfg.KOS.Host, KOSCAFile: cfg.KOS.TLSClientConfig.CAFile,
				QPS: cfg.Kube.QPS, Burst: cfg.Kube.Burst, KOSQPS: cfg.KOS.QPS, KOSBurst: cfg.KOS.Burst, Leader: cfg.LeaderElection != nil,
				IPAMWorkers: cfg.IPAMWorkers, PodNetworks: cfg.PodNetworks, PodNetworkWorkers: cfg.PodNetworkWorkers, NetworkConfig: cfg.NetworkConfig, Metrics: cfg.MetricsAddress,
				Liveness: cfg.AttachmentLiveness, LeaseNamespace: cfg.AgentLeaseNamespace, LeaseGrace: cfg.AgentLeaseGrace,
			}
			if cfg.LeaderElection != nil {
				if tc.want.Identity == "" {
					if cfg.LeaderElection.Identity == "" {
						t.Error("empty generated identity")
					}
				} else {
					got.Identity = cfg.LeaderElection.Identity
				}
			}
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("config (-got +want):\n%s", diff)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Options)
	}{
		{"no workers", func(o *Options) { o.IPAMWorkers = 0 }},
		{"no pod-network workers", func(o *Options) { o.PodNetworks, o.PodNetworkWorkers = true, 0 }},
		{"CA without server", func(o *Options) { o.KOSCAFile = "/ca.crt" }},
		{"renew deadline beyond the lease", func(o *Options) { o.RenewDeadline = o.LeaseDuration }},
		{"no QPS", func(o *Options) { o.QPS = 0 }},
		{"no KOS burst", func(o *Options) { o.KOSBurst = 0 }},
		{"no lease namespace", func(o *Options) { o.AgentLeaseNamespace = "" }},
		{"no lease grace", func(o *Options) { o.AgentLeaseGrace = 0 }},
		{"no liveness workers", func(o *Options) { o.AttachmentLivenessWorkers = 0 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			tc.change(o)
			if err := o.Validate(); err == nil {
				t.Error("Validate: got nil, want an error")
			}
		})
	}
}
