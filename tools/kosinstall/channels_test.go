package kosinstall

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/google/go-cmp/cmp"
)

func TestWriteReleaseChannel(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		bootstrapChannel: `kind: Addons
metadata: {name: kos}
spec:
  addons:
  - {name: kos-etcd, version: 0.1.0, manifest: addons/kos-etcd/0.1.0.yaml, manifestHash: e1}
  - {name: kos-etcd, version: 0.2.0, manifest: addons/kos-etcd/0.2.0.yaml, manifestHash: e2}
  - {name: kos-agent, version: 0.1.0, manifest: addons/kos-agent/0.1.0.yaml, manifestHash: a1}
  - {name: kos-agent, version: 0.2.0, manifest: addons/kos-agent/0.2.0.yaml, manifestHash: a2}
`,
		"addons/" + localChannel: `kind: Addons
metadata: {name: kos-local}
spec:
  addons:
  - {name: kos-etcd, version: 0.1.0, id: single-node, manifest: kos-etcd-single-node/0.1.0.yaml, manifestHash: s1}
  - {name: kos-agent, version: 0.1.0, id: userspace, manifest: kos-agent-userspace/0.1.0.yaml, manifestHash: u1}
  - {name: kos-agent, version: 0.2.0, id: userspace, manifest: kos-agent-userspace/0.2.0.yaml, manifestHash: u2}
`,
	}
	for name, data := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		upTo string
		want []string
	}{
		{"0.1.0", []string{"addons/kos-etcd/0.1.0.yaml e1", "addons/kos-agent-userspace/0.1.0.yaml u1"}},
		{"0.2.0", []string{"addons/kos-etcd/0.1.0.yaml e1", "addons/kos-etcd/0.2.0.yaml e2",
			"addons/kos-agent-userspace/0.1.0.yaml u1", "addons/kos-agent-userspace/0.2.0.yaml u2"}},
	}
	for _, tt := range tests {
		t.Run(tt.upTo, func(t *testing.T) {
			name, err := WriteReleaseChannel(dir, "kos-"+tt.upTo+".yaml", semver.MustParse(tt.upTo))
			if err != nil {
				t.Fatal(err)
			}
			entries, err := channelEntries(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range entries {
				m := e.(map[string]any)
				got = append(got, m["manifest"].(string)+" "+m["manifestHash"].(string))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
		})
	}
}
