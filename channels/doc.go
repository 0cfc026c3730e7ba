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
package channels
