package install

import (
	"bytes"
	"errors"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/channels/channel"
)

func TestPlanWriteTable(t *testing.T) {
	t.Parallel()
	v := func(s string) *semver.Version {
		sv := semver.MustParse(s)
		return &sv
	}
	item := func(name string, version *semver.Version, id string, current *Record) PlanItem {
		a := &channel.Addon{Name: name, Version: version, ID: id}
		return PlanItem{Addon: a, Current: current, Decision: Decide(a, current, nil, DecideOptions{})}
	}
	tests := []struct {
		name  string
		items []PlanItem
		want  string
	}{
		{
			name: "installs, upgrades, refusals; up-to-date addons left out",
			items: []PlanItem{
				item("coredns", v("0.2.0"), "k8s-1.29", &Record{Version: "0.1.0", ID: "k8s-1.29"}),
				item("dns-new", v("1.0.0"), "", nil),
				item("kops-made", v("1.0.0"), "k8s-1.29", &Record{ID: "k8s-1.28"}),
				item("newer-tool", v("9.0.0"), "", &Record{Version: "1.0.0", SystemGeneration: 2}),
				item("old", v("1.0.0"), "", &Record{Version: "2.0.0"}),
				item("same", v("1.0.0"), "a", &Record{Version: "1.0.0", ID: "a"}),
			},
			want: "" +
				"NAME        CURRENT                 UPDATE\n" +
				"coredns     0.1.0 (k8s-1.29)        0.2.0 (k8s-1.29)\n" +
				"dns-new     -                       1.0.0\n" +
				"kops-made   unversioned (k8s-1.28)  1.0.0 (k8s-1.29)\n" +
				"newer-tool  1.0.0                   9.0.0 skipped: record from a newer tool\n" +
				"old         2.0.0                   1.0.0 skipped: downgrade refused\n",
		},
		{
			name: "a release that did not finish, and a downgrade the operator allowed",
			items: []PlanItem{
				func() PlanItem {
					a, current := &channel.Addon{Name: "dns", Version: v("1.0.0")}, &Record{Version: "1.0.0"}
					p := &Pending{Version: "2.0.0"}
					return PlanItem{Addon: a, Current: current, Pending: p, Decision: Decide(a, current, p, DecideOptions{})}
				}(),
				func() PlanItem {
					a, current := &channel.Addon{Name: "old", Version: v("1.0.0")}, &Record{Version: "2.0.0"}
					return PlanItem{Addon: a, Current: current, Decision: Decide(a, current, nil, DecideOptions{AllowDowngrade: true})}
				}(),
			},
			want: "" +
				"NAME  CURRENT  UPDATE\n" +
				"dns   1.0.0    1.0.0 (rollback: 2.0.0 did not finish)\n" +
				"old   2.0.0    1.0.0 (downgrade allowed)\n",
		},
		{
			name:  "nothing to show",
			items: []PlanItem{item("same", v("1.0.0"), "", &Record{Version: "1.0.0"})},
			want:  "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			p := &Plan{Items: tt.items}
			if err := p.WriteTable(&buf); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(buf.String(), tt.want); diff != "" {
				t.Errorf("WriteTable() (-got +want):\n%s", diff)
			}
		})
	}
}

func TestPlanProblems(t *testing.T) {
	t.Parallel()
	v := semver.MustParse("0.3.0")
	p := &Plan{
		Unfit: []channel.NoFit{{Name: "zeta", KubeVersion: semver.MustParse("1.38.0"), Releases: []*channel.Addon{{Name: "zeta", Version: &v, KubernetesVersion: "<1.38.0"}}}},
		Items: []PlanItem{
			{Addon: &channel.Addon{Name: "alpha"}, Decision: Decision{Reason: "upgrade path: 0.3.0 upgrades from 0.2.0 or later, not from 0.1.0: upgrade to 0.2.0 first", Blocked: true}},
			{Addon: &channel.Addon{Name: "beta"}, Decision: Decision{Reason: ReasonDowngrade}},
			{Addon: &channel.Addon{Name: "gamma"}, Decision: Decision{Apply: true, Reason: ReasonUpgrade}},
		},
	}
	err := p.Problems()
	want := `2 addons are left behind the channels: addon "alpha": upgrade path: 0.3.0 upgrades from 0.2.0 or later, not from 0.1.0: upgrade to 0.2.0 first; ` +
		`addon "zeta": no release fits Kubernetes 1.38.0: the channels offer 0.3.0 for <1.38.0; the addon is left as it is until a channel offers a release for Kubernetes 1.38`
	if err == nil || err.Error() != want {
		t.Errorf("Problems() = %v\nwant %s", err, want)
	}
	var nf channel.NoFit
	if !errors.As(err, &nf) || nf.Name != "zeta" {
		t.Errorf("Problems() does not wrap the NoFit of zeta: %#v", err)
	}
	if err := (&Plan{Items: p.Items[1:]}).Problems(); err != nil {
		t.Errorf("Problems() of a plan without blocked addons = %v, want nil", err)
	}
}
