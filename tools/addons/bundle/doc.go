// Package bundle keeps the KOS addon bundle consistent: the addon folders
// under addons/ (each an addon.yaml channel listing every release, and the
// manifests those releases name) and the channel files made from them
// (bootstrap-channel.yaml at the repository root, addons/local-channel.yaml).
//
// Generate fills in the manifestHash of releases that have none and writes
// the channel files; it never rewrites a hash that is there, because a
// changed hash would hide a released manifest edited in place. Verify finds
// every way the bundle can be wrong (a stale or missing hash, a released
// manifest or hash changed since a git revision, a channel file out of date,
// an addon.yaml that channels does not load) and says for each what to do.
//
// It reads and writes files only; checking the manifests against real
// kube-apiservers is the job of the tests in tools/addons/apicheck.
package bundle
