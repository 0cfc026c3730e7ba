// Package testenv runs a real, local Kubernetes control plane — etcd and
// kube-apiserver built from the Go module proxy — for integration tests and
// for people.
//
// Start brings up etcd and kube-apiserver on free loopback ports with a fresh
// PKI: a serving certificate for 127.0.0.1 and localhost, an admin client
// certificate in system:masters, the front-proxy (aggregation layer) CA and
// client certificate, and a service-account key pair. RBAC is on and
// discovery reports the real Kubernetes version. Main runs one such
// environment for a whole test package.
//
// By default the processes belong to the caller: they die with it (on Linux,
// through the parent-death signal) and on Env.Stop. With Options.Detach they
// run in their own session and outlive the caller; Attach finds them again
// from their folder, which is how tools/localenv stops and inspects them.
//
// Options.Components adds the rest of a cluster, each built like
// kube-apiserver: kube-controller-manager (garbage collection, default
// ServiceAccounts, Deployments, ...), kube-scheduler, and a node whose pods
// really run, with kube-proxy so that they reach Services. The node is a
// network namespace of its own, joined to the host by a veth pair on a
// private link network, where containerd (Debian's, with runc and the Debian
// CNI plugins, and a pause image built by tools/images), kubelet, kube-proxy
// and, if asked, Open vSwitch run with every file they can be told about
// under Dir; kube-apiserver then listens on the host's end of the link, and
// pods reach it through the kubernetes Service. The node's cluster DNS is
// tools/testenv/nodedns, a node process on the node's IP that answers for
// Services (and headless Services' pods) in cluster.local from the API and
// NXDOMAIN for every other name, never forwarding; the node routes the
// Service range to its loopback interface, so that hostNetwork pods reach
// Service IPs through kube-proxy too. Images come
// only from tarballs imported with Env.ImportImages. Stop removes every trace
// of the node: processes (shims and containers too), mounts, cgroups, the
// namespace and its link, and, when the last node on the host stops, the few
// fixed host paths kubelet and containerd create and the kernel settings
// kubelet changes. A node whose owner died is cleaned up by the next node
// that starts. Without kube-controller-manager there is no garbage
// collection, no default ServiceAccounts, and namespaces hang in Terminating
// when deleted.
package testenv
