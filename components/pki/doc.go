// Package pki provides the KOS public key infrastructure, made inside the
// cluster by the product itself: a certificate authority and the certificates
// it signs for the KOS etcd (server, peer and client) and for kos-apiserver
// (serving), each kept in a Secret of the KOS namespace, and the CA bundle of
// the KOS APIService.
//
// Ensuring is idempotent and safe to run from many pods at once: a Secret
// that exists is never replaced, so certificates survive re-applies and
// upgrades of the addons; of two runs that create one Secret at the same
// time, the second reads the first's; a leaf certificate is re-issued, by
// the existing CA, only when it no longer says what is asked or expires
// within RenewBefore. The CA itself is never replaced: rotating it is an
// operator's decision (delete the kos-ca Secret, then restart the pods that
// run kos-pki).
//
// The package does not rotate certificates in running processes; the pods
// pick up renewed certificates when they restart.
//
// Like the other KOS commands, kos-pki ensure goes EnsureOptions → Complete
// → Validate → Config → Complete → New (an EnsureRun) → Run.
package pki
