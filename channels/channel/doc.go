// Package channel loads channel files, in the kOps tradition: a channel
// (kind: Addons, package channels/api) lists addon releases. It reads
// channels and manifests from files, https:// and s3:// locations (Fetcher,
// Load), resolves each release's manifest against its channel's location
// and checks its hash (VerifyManifest), picks for each addon the newest
// release whose kubernetesVersion range fits a cluster (Select) and says
// why none does (Unfit), and lints a bundle of channels before it is
// published (Lint).
//
// It knows nothing of a cluster: package channels decides against the
// install records and applies, and names what a program embedding it needs
// of this package (channels.Load, channels.Addon, ...).
package channel
