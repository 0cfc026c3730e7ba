package release

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// agentManifest is a manifest of kos-agent as of 0.3.0, cut down: the flag
// --mtu in the agent's container only.
const agentManifest = `apiVersion: v1
kind: ConfigMap
metadata:
  name: kos-agent
data:
  args: --mtu=0
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kos-agent
spec:
  template:
    spec:
      containers:
      - name: ovs
        args:
        - --mtu=0
      - name: kos-agent
        args:
        - --host-ip=$(HOST_IP)
        # 0: the underlay's MTU less VXLAN's 50 bytes.
        - --mtu=0
`

func TestAgentMTUSetting(t *testing.T) {
	tests := []struct {
		name        string
		manifest    string
		setting     string
		wantApplied bool
		wantChanged []string // the lines that change, before and after
	}{
		{
			name:        "kos-agent",
			manifest:    agentManifest,
			setting:     "kos-agent.mtu=1400",
			wantApplied: true,
			wantChanged: []string{"        - --mtu=0", "        - --mtu=1400"},
		},
		{
			name:        "kos-agent-userspace",
			manifest:    agentManifest,
			setting:     "kos-agent-userspace.mtu=8950",
			wantApplied: true,
			wantChanged: []string{"        - --mtu=0", "        - --mtu=8950"},
		},
		{
			name:     "a release without --mtu",
			manifest: strings.ReplaceAll(agentManifest, "        - --mtu=0\n", ""),
			setting:  "kos-agent.mtu=1400",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseSetting(tt.setting)
			if err != nil {
				t.Fatal(err)
			}
			out, applied, err := applySettings([]byte(tt.manifest), s.Addon, []Setting{s})
			if err != nil {
				t.Fatal(err)
			}
			if got := len(applied) == 1; got != tt.wantApplied {
				t.Errorf("applied %v, want applied %t", applied, tt.wantApplied)
			}
			var changed []string
			before, after := strings.Split(tt.manifest, "\n"), strings.Split(string(out), "\n")
			if len(before) != len(after) {
				t.Fatalf("the manifest has %d lines, %d after the setting:\n%s", len(before), len(after), out)
			}
			for i := range before {
				if before[i] != after[i] {
					changed = append(changed, before[i], after[i])
				}
			}
			if diff := cmp.Diff(changed, tt.wantChanged); diff != "" {
				t.Errorf("changed lines (-got +want):\n%s", diff)
			}
		})
	}
}

func TestParseMTUSetting(t *testing.T) {
	for _, tt := range []struct {
		setting string
		wantErr string
	}{
		{setting: "kos-agent.mtu=0"},
		{setting: "kos-agent.mtu=576"},
		{setting: "kos-agent.mtu=9216"},
		{setting: "kos-agent.mtu=575", wantErr: `setting "kos-agent.mtu=575": MTU 575 is not in [576,9216]`},
		{setting: "kos-agent-userspace.mtu=1.5k", wantErr: `setting "kos-agent-userspace.mtu=1.5k": an MTU must be a whole number, not "1.5k"`},
	} {
		var got string
		if _, err := ParseSetting(tt.setting); err != nil {
			got = err.Error()
		}
		if got != tt.wantErr {
			t.Errorf("ParseSetting(%q) = %q, want %q", tt.setting, got, tt.wantErr)
		}
	}
}

// etcdManifest is a manifest of kos-etcd as of 0.3.0, cut down: the claim
// template and the quota of the etcd container.
const etcdManifest = `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: kos-etcd
spec:
  template:
    spec:
      containers:
      - name: etcd
        args:
        - --name=$(POD_NAME)
        - --quota-backend-bytes=838860800
  volumeClaimTemplates:
  - metadata:
      name: data
    spec:
      resources:
        requests:
          storage: 2Gi
`

func TestEtcdStorageSetting(t *testing.T) {
	tests := []struct {
		name        string
		manifest    string
		setting     string
		wantApplied bool
		wantChanged []string // the lines that change, before and after
	}{
		{
			name:        "the default size keeps the default quota",
			manifest:    etcdManifest,
			setting:     "kos-etcd.storage=2Gi",
			wantApplied: true,
		},
		{
			name:        "a larger volume, a larger quota",
			manifest:    etcdManifest,
			setting:     "kos-etcd.storage=10Gi",
			wantApplied: true,
			wantChanged: []string{
				"        - --quota-backend-bytes=838860800", "        - --quota-backend-bytes=5133828096",
				"          storage: 2Gi", "          storage: 10Gi",
			},
		},
		{
			name:        "etcd's largest quota",
			manifest:    etcdManifest,
			setting:     "kos-etcd.storage=100Gi",
			wantApplied: true,
			wantChanged: []string{
				"        - --quota-backend-bytes=838860800", "        - --quota-backend-bytes=8589934592",
				"          storage: 2Gi", "          storage: 100Gi",
			},
		},
		{
			name:     "a StatefulSet without claims (the single-node release)",
			manifest: etcdManifest[:strings.Index(etcdManifest, "  volumeClaimTemplates:")],
			setting:  "kos-etcd.storage=10Gi",
		},
		{
			name:        "a release without a quota",
			manifest:    strings.ReplaceAll(etcdManifest, "        - --quota-backend-bytes=838860800\n", ""),
			setting:     "kos-etcd.storage=10Gi",
			wantApplied: true,
			wantChanged: []string{"          storage: 2Gi", "          storage: 10Gi"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseSetting(tt.setting)
			if err != nil {
				t.Fatal(err)
			}
			out, applied, err := applySettings([]byte(tt.manifest), s.Addon, []Setting{s})
			if err != nil {
				t.Fatal(err)
			}
			if got := len(applied) == 1; got != tt.wantApplied {
				t.Errorf("applied %v, want applied %t", applied, tt.wantApplied)
			}
			var changed []string
			before, after := strings.Split(tt.manifest, "\n"), strings.Split(string(out), "\n")
			if len(before) != len(after) {
				t.Fatalf("the manifest has %d lines, %d after the setting:\n%s", len(before), len(after), out)
			}
			for i := range before {
				if before[i] != after[i] {
					changed = append(changed, before[i], after[i])
				}
			}
			if diff := cmp.Diff(changed, tt.wantChanged); diff != "" {
				t.Errorf("changed lines (-got +want):\n%s", diff)
			}
		})
	}
	if _, err := ParseSetting("kos-etcd.storage=512Mi"); err == nil || !strings.Contains(err.Error(), "at least 1Gi") {
		t.Errorf("ParseSetting(kos-etcd.storage=512Mi) = %v, want an error saying at least 1Gi", err)
	}
}

// TestEtcdStorageClassSetting names the members' class and the backup
// claim's: on a cluster without a default StorageClass the claim would
// stay Pending, and every backup Job with it.
func TestEtcdStorageClassSetting(t *testing.T) {
	manifest := etcdManifest + `---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: kos-etcd-backup
spec:
  resources:
    requests:
      storage: 8Gi
`
	s, err := ParseSetting("kos-etcd.storageClassName=gp3")
	if err != nil {
		t.Fatal(err)
	}
	out, applied, err := applySettings([]byte(manifest), s.Addon, []Setting{s})
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 1 {
		t.Errorf("applied %v, want the setting applied", applied)
	}
	if got := strings.Count(string(out), "storageClassName: gp3"); got != 2 {
		t.Errorf("the class is set %d times, want in the claim template and the backup claim:\n%s", got, out)
	}
}
