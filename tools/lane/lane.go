// Package lane says which test lane a test program runs in, so that the
// helpers that start servers or nodes refuse to in a lane that promises
// none. make unit, make integration and make cluster (tools/lanes.sh) set
// $KOS_TEST_LANE; a test run by hand leaves it unset, and then anything may
// start.
//
// The lanes are ordered: unit starts nothing; integration may start a
// control plane, kos-apiserver, an S3 server, Open vSwitch and network
// namespaces; cluster may also start nodes.
package lane

import (
	"fmt"
	"os"
)

// Env is the environment variable that names the lane.
const Env = "KOS_TEST_LANE"

// Lane is a test lane, ordered by what it may start.
type Lane int

const (
	// Unit starts no server, no process that outlives a test, and changes
	// nothing on the host.
	Unit Lane = iota + 1
	// Integration starts servers on loopback and in network namespaces the
	// test makes: etcd, kube-apiserver, kos-apiserver, S3, Open vSwitch.
	Integration
	// Cluster starts nodes (containerd, kubelet), one package at a time.
	Cluster
)

// String returns the lane's name, as $KOS_TEST_LANE spells it.
func (l Lane) String() string {
	switch l {
	case Unit:
		return "unit"
	case Integration:
		return "integration"
	case Cluster:
		return "cluster"
	}
	return fmt.Sprintf("lane(%d)", int(l))
}

// Parse returns the lane s names.
func Parse(s string) (Lane, error) {
	for _, l := range []Lane{Unit, Integration, Cluster} {
		if s == l.String() {
			return l, nil
		}
	}
	return 0, fmt.Errorf("%s=%q names no lane (want unit, integration or cluster)", Env, s)
}

// Require returns an error when the current lane is below need: what (such
// as "etcd" or "a node") may not start in it. With $KOS_TEST_LANE unset it
// returns nil.
func Require(need Lane, what string) error {
	s, ok := os.LookupEnv(Env)
	if !ok || s == "" {
		return nil
	}
	cur, err := Parse(s)
	if err != nil {
		return err
	}
	if cur >= need {
		return nil
	}
	hint := "name the test TestIntegration* so that make integration runs it"
	if need == Cluster {
		hint = "move the test to a package of the cluster lane (tools/lanes.sh lists them)"
	}
	return fmt.Errorf("the %s lane starts no %s (%s=%s): %s", cur, what, Env, s, hint)
}
