package apiserver

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apiserver/pkg/server/healthz"
)

func TestWithEtcdGrace(t *testing.T) {
	var etcdErr error
	etcd := healthz.NamedGroupedCheck("etcd", "etcd", func(*http.Request) error { return etcdErr })
	readiness := healthz.NamedGroupedCheck("etcd-readiness", "etcd-readiness", func(*http.Request) error { return etcdErr })
	other := healthz.NamedCheck("client-ca", func(*http.Request) error { return errors.New("not loaded") })
	clock := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	checks := withEtcdGrace([]healthz.HealthChecker{etcd, readiness, other}, 30*time.Second, func() time.Time { return clock })

	// What each check says at each step: etcd fails from 1 s to 40 s and
	// again from 50 s; the other check fails throughout, untouched.
	steps := []struct {
		at   time.Duration
		fail bool
		want []bool // etcd, etcd-readiness, client-ca pass
	}{
		{0, false, []bool{true, true, false}},
		{1 * time.Second, true, []bool{true, true, false}},
		{30 * time.Second, true, []bool{true, true, false}},
		{31 * time.Second, true, []bool{false, false, false}},
		{40 * time.Second, false, []bool{true, true, false}},
		{50 * time.Second, true, []bool{true, true, false}},
		{79 * time.Second, true, []bool{true, true, false}},
		{80 * time.Second, true, []bool{false, false, false}},
	}
	start := clock
	for _, s := range steps {
		clock = start.Add(s.at)
		etcdErr = nil
		if s.fail {
			etcdErr = errors.New("etcd: context deadline exceeded")
		}
		var got []bool
		for _, c := range checks {
			got = append(got, c.Check(nil) == nil)
		}
		if diff := cmp.Diff(got, s.want); diff != "" {
			t.Errorf("at %s (etcd failing %t), checks pass (-got +want):\n%s", s.at, s.fail, diff)
		}
	}
	for i, want := range []string{"etcd", "etcd-readiness", "client-ca"} {
		if checks[i].Name() != want {
			t.Errorf("check %d named %q, want %q", i, checks[i].Name(), want)
		}
	}
	if g, ok := checks[0].(healthz.GroupedHealthChecker); !ok || g.GroupName() != "etcd" {
		t.Errorf("the etcd check lost its group, which /readyz?exclude=etcd names")
	}
	if got := withEtcdGrace([]healthz.HealthChecker{etcd}, 0, time.Now); got[0] != etcd {
		t.Errorf("a grace of 0 wrapped the check")
	}
}
