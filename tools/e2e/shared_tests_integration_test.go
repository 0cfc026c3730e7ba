package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/testenv"
)

// The tests of the shared cluster (shared_test.go), declared here in the
// order they run: go test runs a package's tests in the order of their
// files' names, then of their declarations, and the shared cluster runs
// from the first of them to the last, beside nothing else of the package.
// First those that share it (sharedStandard), then the one that takes it
// over (takeSharedStandard). A test of another file that shares the cluster
// still passes, on a cluster started for it, and says so: declare it here.

// TestIntegrationKubectlKos makes an attachment on every node in a
// namespace of its own and runs the kubectl plugin as people do, `kubectl
// kos` found on the PATH, as a user with only the rights
// docs/kubectl-kos-rbac.yaml grants: status shows every node's agent ready
// with its attachments and flows, trace follows a ping into the tunnel
// towards the right node, check's datapath part passes every pair of
// nodes and names the pairs of a node whose tunnel is blocked, and the
// support bundle holds every node's logs,
// flows, tunnels and routes and the namespace's objects. A user without
// those rights gets nothing.
func TestIntegrationKubectlKos(t *testing.T) {
	began := time.Now()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	s := sharedStandard(t, root)
	kk := &kubectlKOS{standard: s}
	runStepsDumping(t, func() {
		s.dumpState()
		s.dumpFabrics()
	}, []step{
		{"rights and plugin", kk.testInstall},
		{"an attachment on every node", kk.testAttachments},
		{"status", kk.testStatus},
		{"trace", kk.testTrace},
		{"check's datapath, then with a tunnel blocked", kk.testCheckDatapath},
		{"support bundle", kk.testSupportBundle},
		{"without the rights", kk.testForbidden},
	})
	figures.Duration(t, "whole-test", time.Since(began))
}

// TestIntegrationUpgradeRunbook runs docs/install.md's "Upgrading" as
// written on the shared cluster, with the channels of its install for the
// page's CHANNEL: the plan, the diff and the apply of the release that is
// installed say, each of them, that there is nothing to do.
func TestIntegrationUpgradeRunbook(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	s := sharedStandard(t, root)
	blocks := s.runbook(t, filepath.Join(root, "docs", "install.md"), "## Upgrading")
	out := s.runDocVars(t, map[string]string{"CHANNEL": strings.Join(s.installed, " ")}, blocks...)
	if n := strings.Count(out, "No update required"); n < 3 {
		t.Errorf("the upgrade runbook over the installed release says %d times that no update is required, want 3 (plan, diff, apply):\n%s", n, out)
	}
	for _, verb := range []string{"Installed ", "Updated ", "Pruned "} {
		if strings.Contains(out, verb) {
			t.Errorf("the upgrade runbook over the installed release says %q:\n%s", verb, out)
		}
	}
}

// TestIntegrationMonitoring installs kos-monitoring (monitoring_test.go):
// rendered with kos-release for the cluster's registry, Prometheus the
// image tools/kosimages packs of the 3.16.0 tools/prometheus builds,
// Grafana at 0 replicas (no image to pull). Through a port-forward, Prometheus scrapes every KOS pod, up,
// and has loaded every shipped alert; a node gone for good, its agent's
// Lease left behind, fires KOSAgentNotHeartbeating, which resolves once
// the Lease is deleted as the runbook says; the uninstall leaves the
// cluster's addon objects as they were.
func TestIntegrationMonitoring(t *testing.T) {
	began := time.Now()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	m := &monitoring{standard: sharedStandard(t, root)}
	runStepsDumping(t, func() {
		m.dumpState()
		m.dumpNamespace(monitoringNamespace)
	}, []step{
		// First, so that the Lease goes silent and the controller counts
		// the node while Prometheus is installed: the alert's wait is
		// then mostly its for: (figure monitoring-alert-firing counts
		// from here).
		{"a node gone, its Lease left", m.testGoneNode},
		{"rendered for the cluster's registry", m.testRender},
		{"installed", m.testInstall},
		{"Prometheus reached", m.testReach},
		{"every KOS pod a target, up", m.testTargets},
		{"every shipped alert loaded", m.testRules},
		{"the gone node's alert fires", m.testAlertFires},
		{"and resolves once its Lease is deleted", m.testAlertResolves},
		{"uninstall leaves the cluster as it was", m.testUninstall},
	})
	figures.Duration(t, "monitoring-whole-test", time.Since(began))
}

// TestIntegrationOperate runs what docs/backup.md and docs/operations.md
// tell an operator of the standard release, on three nodes: the shared
// cluster, taken over after the tests that share it (takeSharedStandard),
// with the release installed from its tree. A backup taken by a Job of the
// CronJob, the etcd volumes lost and restored from S3 with the doc's own
// commands, every object back and the network working; kos-etcd
// uninstalled and installed again, its backup claim and snapshots kept
// (operate_reinstall_test.go); an agent restarted
// while the KOS API is away, which is not killed and becomes Ready once the
// API is back; the KOS API down, which stalls a namespace's deletion until
// the documented emergency step, and the way back; the release kos-release
// renders from a configuration that sets every key, applied over the
// installed one, with every setting read back from the live objects
// (configured_test.go); and the uninstall of
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
		{"kos-etcd uninstalled and installed again, its backups kept", o.testEtcdReinstall},
		{"an agent starts while the KOS API is away", o.testAgentStartsWithoutAPI},
		{"the KOS API down, and the way out", o.testAPIDown},
		{"a release configured in every key", o.testConfiguredRelease},
		{"uninstall leaves the hosts as before", o.testUninstall},
	})
	figures.Duration(t, "operate-whole-test", time.Since(began))
}
