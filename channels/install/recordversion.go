package install

import (
	"context"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/channels/channel"
)

// recordChannelTimeout bounds reading the channel a record names.
const recordChannelTimeout = 15 * time.Second

// RecordVersions learns the version of install records that carry none:
// kOps's channels writes records without one (and so could an older tool),
// which leaves Decide only ids and hashes to compare, so an older channel
// would downgrade the addon. Such a record still names the channel it came
// from; the entry of that channel with the record's addon, id and manifest
// hash says which version is installed. Each channel is read once per
// RecordVersions; one that cannot be read, or has no such entry, leaves the
// record as it is, and Decide falls back to kOps's rule.
type RecordVersions struct {
	// Fetcher reads manifests, for checking whether a pending release
	// became ready (Client.PlanWith).
	Fetcher *channel.Fetcher
	fetch   func(ctx context.Context, location string) ([]*channel.Addon, error)
	// channels caches what fetch returned, by location (nil when it
	// failed).
	channels map[string][]*channel.Addon
}

// NewRecordVersions returns a RecordVersions that reads channels with a
// Fetcher of the default limits.
func NewRecordVersions() *RecordVersions {
	f := channel.NewFetcher()
	return &RecordVersions{
		Fetcher:  f,
		fetch:    func(ctx context.Context, loc string) ([]*channel.Addon, error) { return channel.Load(ctx, f, loc) },
		channels: map[string][]*channel.Addon{},
	}
}

// Fill returns r with its version filled in from its channel when r has
// none and the channel has the release; otherwise r itself. It never
// changes r.
func (rv *RecordVersions) Fill(ctx context.Context, name string, r *Record) *Record {
	if r == nil || r.Version != "" || r.Channel == "" || r.ManifestHash == "" {
		return r
	}
	for _, a := range rv.Load(ctx, name, r.Channel) {
		if a.Name == name && a.ID == r.ID && a.Version != nil && strings.EqualFold(a.ManifestHash, r.ManifestHash) {
			filled := *r
			filled.Version = a.VersionString()
			return &filled
		}
	}
	return r
}

// Load returns the releases of the channel at location, reading it once per
// RecordVersions; nil when it cannot be read.
func (rv *RecordVersions) Load(ctx context.Context, name, location string) []*channel.Addon {
	releases, ok := rv.channels[location]
	if !ok {
		ctx, cancel := context.WithTimeout(ctx, recordChannelTimeout)
		defer cancel()
		var err error
		if releases, err = rv.fetch(ctx, location); err != nil {
			klog.FromContext(ctx).V(2).Info("Cannot read the channel of an install record or pending release", "addon", name, "channel", location, "err", err)
		}
		rv.channels[location] = releases
	}
	return releases
}
