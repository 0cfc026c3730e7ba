// Package e2e holds the end-to-end tests of KOS as operators meet it.
//
// TestIntegrationKOS runs the local variant on a real single-node cluster
// (tools/cluster: kube-apiserver, the controller manager, the scheduler,
// kube-proxy, and a kubelet whose pods really run): the images built by
// tools/kosimages are imported, `channels apply channel` installs the addon
// bundle, and the SDN is used through the aggregated API. Then the install
// is re-run, upgraded to test releases, and has its pods deleted.
//
// TestIntegrationStandardRelease runs the standard releases as an operator
// of a real cluster would: on three nodes without Open vSwitch, the images
// pushed to a registry the nodes pull from, the release tree written for
// that registry and published to an S3 bucket (versitygw) and an HTTPS
// server, installed with `channels apply channel s3://...` onto local
// volumes; then attachments in two VNIs ping each other across the nodes
// from guest namespaces, and one node is stopped and started again.
//
// Its chaos step (chaos_test.go) then kills, with SIGKILL and one after the
// other, an etcd member, a kos-apiserver, the controller manager holding
// the Lease, one node's agent and that node's ovs-vswitchd, while a churn
// creates and deletes attachments on every node and two guests on
// different nodes ping each other ten times a second. Per kill it logs the
// longest ping gap, the unanswered echo requests and the time until KOS
// converged (the container restarted, every pod Ready, new attachments
// ready on every node, the ping answered) as figures (docs/benchmarks.md,
// "Chaos"); it fails when KOS does not converge, when two attachments of a
// VNI share an address, when an IPLock outlives its attachment, or when a
// node's switch keeps a port or flow of no attachment or lacks one.
//
// TestIntegrationPodEdits is issue 32's proof on three nodes with Multus: pods on a definition of type kos keep pinging each other and
// their TCP connections while the definition is edited, a pod's
// attachment and its Subnet are deleted with kubectl (both refused), the
// node's agent is killed, and a deleted pod's address is taken on another
// node; no node keeps a veth of no running pod, and a new pod gets the
// edited definition (figures pod-edits-*).
//
// One cluster is shared (shared_test.go): the tests that only read the
// cluster or add namespaced objects of their own call sharedStandard and
// run, each in a namespace of its own (standard.namespace), on the three
// nodes the first of them starts, with the standard release installed from
// its tree once; TestIntegrationKubectlKos is one, and
// TestIntegrationMonitoring, which installs kos-monitoring, checks that its
// Prometheus scrapes every component and fires an alert on a real fault,
// and uninstalls it, another. A destructive test that
// starts from that install takes the cluster over as the last to use it
// (takeSharedStandard): TestIntegrationOperate. They are declared in
// shared_tests_integration_test.go in the order they run, so that the
// shared cluster runs beside no other test's. TestIntegrationUpgradeRunbook
// shares it too.
// The pods' tests share a cluster of their own, with Multus on every node
// (sharedPods): TestIntegrationPodEdits and TestIntegrationPods in turn,
// each deleting its namespaces, to the end, when it ends; then
// TestIntegrationPolicyTruthTable takes it over (takeSharedPods). A test
// that fails hands its cluster on to nobody: the next starts another.
// The others (upgrades, node stops, chaos, other shapes) start their own.
//
// The runbooks run as written: the blocks of docs/install.md's
// "Uninstalling" and docs/backup.md's "Restoring" marked to run (tools/
// docrun), in TestIntegrationOperate.
//
// It has no code of its own besides the tests.
package e2e
