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
// operator's decision (delete the kos-ca Secret; the signer makes a new CA
// and re-issues every leaf; then restart etcd and kos-apiserver, which read
// the CA bundle at start).
//
// Signer (kos-pki run) keeps the PKI current in a running cluster: it is the
// one holder of the CA's key, ensures again just after each leaf is due for
// renewal, and exports kos_certificate_expiry_timestamp_seconds. The servers
// mount their Secrets as volumes, which the kubelet updates in place, and
// read the new files without a restart (etcd at every handshake,
// kos-apiserver through k8s.io/apiserver's dynamic serving certificate and
// its etcd client's per-connection load). Where a namespace's owner grants
// it PublishRules, the signer also publishes the CA's certificate there
// (ConfigMap kos-ca, for clients that verify KOS servers) and makes password
// Secrets (such as kos-monitoring's Grafana admin's), so that no manifest
// carries a CA or a password.
//
// Like the other KOS commands, kos-pki ensure goes EnsureOptions → Complete
// → Validate → Config → Complete → New (an EnsureRun) → Run.
package pki
