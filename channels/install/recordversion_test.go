package install

import (
	"context"
	"errors"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/channels/channel"
)

// TestRecordVersions checks that a record without a version (as kOps writes
// them) learns it from the channel it names, so that an older release is a
// downgrade for it too, and that anything less than a sure match leaves the
// record alone.
func TestRecordVersions(t *testing.T) {
	t.Parallel()
	v := func(s string) *semver.Version { x := semver.MustParse(s); return &x }
	offered := []*channel.Addon{
		{Name: "kos-agent", Version: v("0.1.0"), ID: "k8s-1.29", ManifestHash: "aa"},
		{Name: "kos-agent", Version: v("0.2.0"), ID: "k8s-1.29", ManifestHash: "BB"},
		{Name: "kos-etcd", Version: v("0.2.0"), ID: "k8s-1.29", ManifestHash: "cc"},
	}
	tests := []struct {
		name    string
		addon   string
		record  *Record
		want    string // the version after fill
		fetches int
	}{
		{"no record", "kos-agent", nil, "", 0},
		{"a version already", "kos-agent", &Record{Version: "0.1.0", Channel: "https://x/c.yaml", ID: "k8s-1.29", ManifestHash: "bb"}, "0.1.0", 0},
		{"kOps's record of 0.2.0", "kos-agent", &Record{Channel: "https://x/c.yaml", ID: "k8s-1.29", ManifestHash: "bb"}, "0.2.0", 1},
		{"another id", "kos-agent", &Record{Channel: "https://x/c.yaml", ID: "k8s-1.30", ManifestHash: "bb"}, "", 1},
		{"a hash the channel lacks", "kos-agent", &Record{Channel: "https://x/c.yaml", ID: "k8s-1.29", ManifestHash: "dd"}, "", 1},
		{"another addon's hash", "kos-agent", &Record{Channel: "https://x/c.yaml", ID: "k8s-1.29", ManifestHash: "cc"}, "", 1},
		{"no channel", "kos-agent", &Record{ID: "k8s-1.29", ManifestHash: "bb"}, "", 0},
		{"an unreadable channel", "kos-agent", &Record{Channel: "https://gone/c.yaml", ID: "k8s-1.29", ManifestHash: "bb"}, "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fetches := 0
			rv := &RecordVersions{channels: map[string][]*channel.Addon{}, fetch: func(ctx context.Context, loc string) ([]*channel.Addon, error) {
				fetches++
				if loc == "https://gone/c.yaml" {
					return nil, errors.New("connection refused")
				}
				return offered, nil
			}}
			var before Record
			if tt.record != nil {
				before = *tt.record
			}
			got := rv.Fill(t.Context(), tt.addon, tt.record)
			// Twice: the channel is read once.
			got = rv.Fill(t.Context(), tt.addon, got)
			if tt.record == nil {
				if got != nil {
					t.Errorf("Fill(nil) = %+v", got)
				}
				return
			}
			if got.Version != tt.want {
				t.Errorf("version %q, want %q", got.Version, tt.want)
			}
			if diff := cmp.Diff(before, *tt.record); diff != "" {
				t.Errorf("fill changed the record it was given (-before +after):\n%s", diff)
			}
			if fetches != tt.fetches {
				t.Errorf("%d fetches, want %d", fetches, tt.fetches)
			}
			if before.Version == "" && tt.want != "" {
				if d := Decide(&channel.Addon{Name: tt.addon, Version: v("0.1.0"), ID: "k8s-1.29", ManifestHash: "aa"}, got, nil, DecideOptions{}); d.Reason != ReasonDowngrade {
					t.Errorf("0.1.0 over the filled record: %+v, want the downgrade refused", d)
				}
			}
		})
	}
}
