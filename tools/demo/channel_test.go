package main

import (
	"context"
	"testing"

	"github.com/kos-sdn/kos/channels"
)

// TestChannelsLoad checks that both stages of the example channel load and
// that every manifest matches its manifestHash, so the demo cannot ship a
// stale hash.
func TestChannelsLoad(t *testing.T) {
	ctx := context.Background()
	f := channels.NewFetcher()
	for _, stage := range []struct {
		file     string
		releases int
	}{{"channel/stage1.yaml", 2}, {"channel/stage2.yaml", 4}} {
		releases, err := channels.Load(ctx, f, stage.file)
		if err != nil {
			t.Fatalf("loading %s: %v", stage.file, err)
		}
		if got := len(releases); got != stage.releases {
			t.Errorf("%s: got %d releases, want %d", stage.file, got, stage.releases)
		}
		for _, r := range releases {
			if _, err := f.FetchManifest(ctx, r); err != nil {
				t.Errorf("%s: %s %s: %v", stage.file, r.Name, r.VersionString(), err)
			}
		}
	}
}
