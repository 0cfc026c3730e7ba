package e2e

import (
	"testing"
	"time"

	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/testenv"
)

// The tests that take the shared cluster over (takeSharedStandard) are
// declared here, in a file whose name sorts after those of the tests that
// share it: go test runs a package's tests in the order of their files'
// names, then of their declarations. A test that shares the cluster but
// runs after a takeover still passes, on a cluster of its own, and says so.

// TestIntegrationOperate runs what docs/backup.md and docs/operations.md
// tell an operator of the standard release, on three nodes: the shared
// cluster, taken over after the tests that share it (takeSharedStandard),
// with the release installed from its tree. A backup taken by a Job of the
// CronJob, the etcd volumes lost and restored from S3 with the doc's own
// commands, every object back and the network working; an agent restarted
// while the KOS API is away, which is not killed and becomes Ready once the
// API is back; the KOS API down, which stalls a namespace's deletion until
// the documented emergency step, and the way back; and the uninstall of
// docs/install.md, run as written (docrun), after which every node is as it
// was before the install.
func TestIntegrationOperate(t *testing.T) {
	began := time.Now()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	s, installed := takeSharedStandard(t, root)
	o := &operate{standard: s, channels: installed.channels, hostsBefore: installed.hostsBefore}
	runStepsDumping(t, func() {
		o.dumpState()
		o.dumpFabrics()
	}, []step{
		{"installed", func(t *testing.T) { o.waitKOSReady(t, 2*time.Minute) }},
		{"a network across nodes", o.testNetwork},
		{"backup and restore", o.testBackupRestore},
		{"an agent starts while the KOS API is away", o.testAgentStartsWithoutAPI},
		{"the KOS API down, and the way out", o.testAPIDown},
		{"uninstall leaves the hosts as before", o.testUninstall},
	})
	figures.Duration(t, "operate-whole-test", time.Since(began))
}
