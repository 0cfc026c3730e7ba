// Package e2e holds the end-to-end tests of KOS as operators meet it: on a
// real single-node cluster (tools/cluster: kube-apiserver, the controller
// manager, the scheduler, kube-proxy, and a kubelet whose pods really run,
// with Open vSwitch on the node), the images built by tools/kosimages are
// imported, `channels apply channel` installs the addon bundle, and the SDN
// is used through the aggregated API. Then the install is re-run, upgraded
// to test releases, and has its pods deleted.
//
// It has no code of its own besides the tests.
package e2e
