// Package testenv runs a real, local Kubernetes control plane — etcd and
// kube-apiserver built from the Go module proxy — for integration tests and
// for people, and the test servers KOS's tests talk to (kos-apiserver, an
// S3-compatible store).
//
// Start brings up etcd and kube-apiserver on free loopback ports with a fresh
// PKI: a serving certificate for 127.0.0.1 and localhost, an admin client
// certificate in system:masters, the front-proxy (aggregation layer) CA and
// client certificate, and a service-account key pair. RBAC is on and
// discovery reports the real Kubernetes version. Options.Components adds
// kube-controller-manager (garbage collection, default ServiceAccounts,
// Deployments, ...) and kube-scheduler. Shared starts one such control plane
// for a whole test program on first use, and Main stops it. Build builds a
// command of the module for a test (once per test program under Main).
//
// By default the processes belong to the caller: they die with it (on Linux,
// through the parent-death signal) and on Env.Stop. With Options.Detach they
// run in their own session and outlive the caller; Attach finds them again
// from their folder, which is how tools/localenv stops and inspects them.
//
// Nodes — kubelet, containerd and kube-proxy in network namespaces of their
// own — are tools/cluster's, which builds on this package.
package testenv
