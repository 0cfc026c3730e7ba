package channels

import (
	"context"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// recordChannelTimeout bounds reading the channel a record names.
const recordChannelTimeout = 15 * time.Second

// recordVersions learns the version of install records that carry none:
// kOps's channels writes records without one (and so could an older tool),
// which leaves Decide only ids and hashes to compare, so an older channel
// would downgrade the addon. Such a record still names the channel it came
// from; the entry of that channel with the record's addon, id and manifest
// hash says which version is installed. Each channel is read once per
// recordVersions; one that cannot be read, or has no such entry, leaves the
// record as it is, and Decide falls back to kOps's rule.
type recordVersions struct {
	// fetcher reads manifests, for checking a pending release (pending.go).
	fetcher *Fetcher
	fetch   func(ctx context.Context, location string) ([]*Addon, error)
	// channels caches what fetch returned, by location (nil when it
	// failed).
	channels map[string][]*Addon
}

func newRecordVersions() *recordVersions {
	f := NewFetcher()
	return &recordVersions{
		fetcher:  f,
		fetch:    func(ctx context.Context, loc string) ([]*Addon, error) { return Load(ctx, f, loc) },
		channels: map[string][]*Addon{},
	}
}

// fill returns r with its version filled in from its channel when r has
// none and the channel has the release; otherwise r itself. It never
// changes r.
func (rv *recordVersions) fill(ctx context.Context, name string, r *Record) *Record {
	if r == nil || r.Version != "" || r.Channel == "" || r.ManifestHash == "" {
		return r
	}
	for _, a := range rv.load(ctx, name, r.Channel) {
		if a.Name == name && a.ID == r.ID && a.Version != nil && strings.EqualFold(a.ManifestHash, r.ManifestHash) {
			filled := *r
			filled.Version = a.VersionString()
			return &filled
		}
	}
	return r
}

// load returns the releases of the channel at location, reading it once per
// recordVersions; nil when it cannot be read.
func (rv *recordVersions) load(ctx context.Context, name, location string) []*Addon {
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
