package install

import (
	"encoding/json"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/channels/channel"
	"github.com/kos-sdn/kos/channels/internal/channelstest"
)

func TestRecordEncode(t *testing.T) {
	t.Parallel()
	hash := "8a32e516d7415be524a7fcec482ad2918f2b6ef2a7f4cb8e2e232b361436b20b"
	tests := []struct {
		name   string
		record *Record
		want   string
	}{
		{
			name: "kOps's fields in kOps's order",
			record: &Record{Version: "0.2.0", Channel: "s3://b/kos/bootstrap-channel.yaml", ID: "k8s-1.29",
				ManifestHash: hash, SystemGeneration: 1},
			want: `{"version":"0.2.0","channel":"s3://b/kos/bootstrap-channel.yaml","id":"k8s-1.29","manifestHash":"` + hash + `","systemGeneration":1}`,
		},
		{
			name: "with inventory",
			record: &Record{Version: "0.2.0", Channel: "https://h/c.yaml?a=1&b=<2>", ID: "k8s-1.29", ManifestHash: hash, SystemGeneration: 1,
				Inventory: &Inventory{Kinds: []string{"ConfigMap", "Deployment.apps"}, Namespaces: []string{"example-com"}}},
			want: `{"version":"0.2.0","channel":"https://h/c.yaml?a=1&b=<2>","id":"k8s-1.29","manifestHash":"` + hash +
				`","systemGeneration":1,"inventory":{"kinds":["ConfigMap","Deployment.apps"],"namespaces":["example-com"]}}`,
		},
		{
			name:   "empty fields left out",
			record: &Record{Channel: "c.yaml", SystemGeneration: 1},
			want:   `{"channel":"c.yaml","systemGeneration":1}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.record.Encode()
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if got != tt.want {
				t.Errorf("Encode:\ngot  %s\nwant %s", got, tt.want)
			}
			back, err := ParseRecord(got)
			if err != nil {
				t.Fatalf("ParseRecord(%s): %v", got, err)
			}
			if diff := cmp.Diff(back, tt.record); diff != "" {
				t.Errorf("round trip (-got +want):\n%s", diff)
			}
		})
	}
}

func TestNewRecord(t *testing.T) {
	t.Parallel()
	v := semver.MustParse("1.6.0")
	a := &channel.Addon{Name: "dns", Version: &v, ID: "k8s-1.29", ManifestHash: "aa", Channel: "https://h/c.yaml", Manifest: "https://h/m.yaml"}
	got := NewRecord(a)
	want := &Record{Version: "1.6.0", Channel: "https://h/c.yaml", ID: "k8s-1.29", ManifestHash: "aa", SystemGeneration: CurrentSystemGeneration}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("NewRecord (-got +want):\n%s", diff)
	}
	// What was just applied is up to date.
	if got, want := Decide(a, got, nil, DecideOptions{}), (Decision{Reason: ReasonUpToDate}); got != want {
		t.Errorf("Decide against its own record: got %+v, want %+v", got, want)
	}
}

func TestParseRecord(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		value   string
		want    *Record
		wantErr bool
	}{
		{
			name:  "written by kOps with a version",
			value: `{"version":"1.4.0","channel":"s3://state/cluster/addons/bootstrap-channel.yaml","id":"k8s-1.16","manifestHash":"abc"}`,
			want:  &Record{Version: "1.4.0", Channel: "s3://state/cluster/addons/bootstrap-channel.yaml", ID: "k8s-1.16", ManifestHash: "abc"},
		},
		{
			name:  "written by kOps without a version",
			value: `{"channel":"s3://state/cluster/addons/bootstrap-channel.yaml","id":"k8s-1.12","manifestHash":"4a0c0b8d","systemGeneration":1}`,
			want:  &Record{Channel: "s3://state/cluster/addons/bootstrap-channel.yaml", ID: "k8s-1.12", ManifestHash: "4a0c0b8d", SystemGeneration: 1},
		},
		{
			name:  "from a newer tool, with keys we do not know",
			value: `{"version":"3.0.0","systemGeneration":2,"futureKey":{"a":1}}`,
			want:  &Record{Version: "3.0.0", SystemGeneration: 2},
		},
		{name: "empty", value: "", wantErr: true},
		{name: "not JSON", value: "1.4.0", wantErr: true},
		{name: "version not semver", value: `{"version":"banana"}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseRecord(tt.value)
			if tt.wantErr {
				if err == nil {
					t.Errorf("got %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRecord: %v", err)
			}
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("ParseRecord (-got +want):\n%s", diff)
			}
		})
	}
}

func TestRecordReadableByKOps(t *testing.T) {
	t.Parallel()
	r := &Record{Version: "0.2.0", Channel: "s3://b/kos/bootstrap-channel.yaml", ID: "k8s-1.29", ManifestHash: "aa", SystemGeneration: 1,
		Inventory: &Inventory{Kinds: []string{"ConfigMap"}}}
	value, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var got channelstest.KOpsRecord
	if err := json.Unmarshal([]byte(value), &got); err != nil {
		t.Fatalf("kOps's decoding of %s: %v", value, err)
	}
	version, channel := "0.2.0", "s3://b/kos/bootstrap-channel.yaml"
	want := channelstest.KOpsRecord{Version: &version, Channel: &channel, ID: "k8s-1.29", ManifestHash: "aa", SystemGeneration: 1}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("as kOps reads it (-got +want):\n%s", diff)
	}
}
