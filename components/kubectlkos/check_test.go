package kubectlkos

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/agent/api"
	"github.com/kos-sdn/kos/tools/golden"
)

// healthyReport is a report of a healthy cluster: every pod Ready, one
// etcd leader, the APIService Available, certificates far from expiry, one
// ready agent with its attachments Ready.
func healthyReport() statusReport {
	yes, no := true, false
	size, quota := int64(12<<20), int64(800<<20)
	expires := metav1.NewTime(now.Add(300 * 24 * time.Hour))
	two, zero := 2, 0
	return statusReport{
		ControlPlane: []ComponentStatus{
			{Component: "kos-apiserver", Name: "a", Ready: true},
			{Component: "kos-etcd", Name: "kos-etcd-0", Ready: true, Leader: &yes, HasLeader: &yes, DBSize: &size, DBQuota: &quota},
			{Component: "kos-etcd", Name: "kos-etcd-1", Ready: true, Leader: &no, HasLeader: &yes, DBSize: &size, DBQuota: &quota},
			{Component: "kos-controller-manager", Name: "c", Ready: true},
			{Component: "kos-pki", Name: "p", Ready: true},
			{Component: componentAPIService, Name: kosAPIService, Ready: true},
			{Component: componentCertificate, Name: "kos-ca", Ready: true, Expires: &expires},
		},
		Nodes: []NodeStatus{{Node: "node-1", Pod: "kos-agent-aaaa", Agent: &api.Status{Ready: true}, Attachments: &two, NotReady: &zero}},
	}
}

func TestChecks(t *testing.T) {
	t.Parallel()
	passed := func(results []CheckResult) map[string]bool {
		m := map[string]bool{}
		for _, r := range results {
			m[r.Check] = r.Passed
		}
		return m
	}
	all := map[string]bool{"kos-apiserver": true, "kos-etcd": true, "kos-controller-manager": true, "kos-pki": true,
		"etcd leader and quota": true, "apiservice": true, "certificates": true, "agents": true, "attachments": true}
	if diff := cmp.Diff(passed(runChecks(healthyReport(), now)), all); diff != "" {
		t.Errorf("checks of a healthy cluster (-got +want):\n%s", diff)
	}

	// The fixtures' cluster: a kos-apiserver and an etcd member not Ready,
	// no controller manager, the APIService unavailable, a certificate
	// expiring in 10 days, agents that fail, attachments not Ready.
	cp, _ := controlPlaneFixture(t)
	ag, _, kos := statusFixture()
	rep := statusReport{ControlPlane: cp.collect(context.Background(), now)}
	var err error
	if rep.Nodes, err = collectStatus(context.Background(), ag, kos, "", func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	results := runChecks(rep, now)
	want := map[string]bool{"kos-apiserver": false, "kos-etcd": false, "kos-controller-manager": false, "kos-pki": true,
		"etcd leader and quota": true, "apiservice": false, "certificates": false, "agents": false, "attachments": false}
	if diff := cmp.Diff(passed(results), want); diff != "" {
		t.Errorf("checks of the fixtures' cluster (-got +want):\n%s", diff)
	}
	var out bytes.Buffer
	if err := printChecks(&out, results, false); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "check.golden", out.String())

	// A database past 80% of its quota, and two leaders.
	rep = healthyReport()
	big := int64(700 << 20)
	rep.ControlPlane[2].DBSize = &big
	yes := true
	rep.ControlPlane[2].Leader = &yes
	for _, r := range runChecks(rep, now) {
		if r.Check == "etcd leader and quota" && (r.Passed || !strings.Contains(r.Detail, "2 of 2 members say they lead") || !strings.Contains(r.Detail, "+1 more")) {
			t.Errorf("etcd check of two leaders and a full database: %+v", r)
		}
	}
}
