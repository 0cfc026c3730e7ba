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
// It has no code of its own besides the tests.
package e2e
