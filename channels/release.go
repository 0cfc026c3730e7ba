package channels

// This file names, for programs that embed channels, what they need of
// package channel, which loads channel files: a run loads releases with
// Load and hands them to Client.Plan.

import (
	"context"

	"github.com/blang/semver/v4"

	"github.com/kos-sdn/kos/channels/channel"
)

// Addon is one release of one addon, read from a channel (channel.Addon).
type Addon = channel.Addon

// Fetcher reads channels and manifests from files, https:// and s3://
// locations (channel.Fetcher).
type Fetcher = channel.Fetcher

// NewFetcher returns a Fetcher with the default limits (channel.NewFetcher).
func NewFetcher() *Fetcher { return channel.NewFetcher() }

// Load reads the channel at location and returns its releases
// (channel.Load).
func Load(ctx context.Context, f *Fetcher, location string) ([]*Addon, error) {
	return channel.Load(ctx, f, location)
}

// Parse decodes a channel read from location (channel.Parse).
func Parse(location string, data []byte) ([]*Addon, error) { return channel.Parse(location, data) }

// Select picks, for each addon, the newest release that fits a cluster of
// kubeVersion (channel.Select).
func Select(releases []*Addon, kubeVersion semver.Version) []*Addon {
	return channel.Select(releases, kubeVersion)
}

// ServerVersion turns discovery's gitVersion into the version channels'
// kubernetesVersion ranges are matched against (channel.ServerVersion).
func ServerVersion(gitVersion string) (semver.Version, error) {
	return channel.ServerVersion(gitVersion)
}

// HashManifest returns the manifestHash of a manifest (channel.HashManifest).
func HashManifest(data []byte) string { return channel.HashManifest(data) }

// VerifyManifest checks a manifest against its release's manifestHash
// (channel.VerifyManifest).
func VerifyManifest(a *Addon, data []byte) error { return channel.VerifyManifest(a, data) }

// LintProblem is one problem Lint finds (channel.LintProblem).
type LintProblem = channel.LintProblem

// Lint checks a bundle of channels' releases before it is published
// (channel.Lint).
func Lint(releases []*Addon) []LintProblem { return channel.Lint(releases) }
