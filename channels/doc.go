// Package channels installs and upgrades cluster addons from channel files, in
// the kOps tradition.
//
// A channel (kind: Addons) lists addon releases. The package loads channels
// from files, https:// and s3:// locations; picks, for each addon, the newest
// release whose kubernetesVersion range fits the cluster (and says so when
// none does); decides against the install record on the cluster whether to
// apply it (never going back without the operator's consent, never jumping
// over a release's upgradesFrom); applies it with server-side apply in
// phases; prunes what the new release dropped, keeping what it cannot prove
// unowned (what another addon, in the run or recorded on the cluster,
// declares or may declare; PersistentVolumeClaims; objects annotated
// KeepAnnotation); and writes the install record as an annotation on a
// namespace, in a format kOps reads.
//
// A program that embeds it needs little more than this:
//
//	releases, err := channels.Load(ctx, channels.NewFetcher(), location)
//	client, err := channels.NewClient(restConfig)
//	plan, err := client.Plan(ctx, releases) // what would change, and why
//	previews, err := client.Preview(ctx, plan, channels.PreviewOptions{})
//	err = client.Apply(ctx, plan, channels.ApplyOptions{})
//
// and, to take an addon off the cluster, Client.PlanUninstall and
// Client.Uninstall. Lint checks a bundle of channels before it is
// published.
//
// Other concerns live in packages of their own, which import this one or
// nothing of channels but loading and previews: channels/channel loads
// channel files (Load, Addon, Fetcher and Lint here are its);
// channels/install reads install records and decides which release
// applies (Plan, PlanItem, Decision, Record here are its);
// channels/preview is what a preview shows and its diff (AddonPreview,
// ObjectChange here are its); channels/dryrun fills previews in, dry-running
// the releases the apply code prepared (Client.Preview hands them over);
// channels/daemon runs passes again and again, reports or repairs drift
// and serves health and metrics (what `channels apply --interval` runs);
// channels/lease is the Lease that keeps two runs apart; channels/diff the
// unified diffs of previews; channels/api the wire types of channel files;
// channels/cli the command line.
package channels
