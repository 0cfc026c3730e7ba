package install

import (
	"testing"

	"github.com/blang/semver/v4"
	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/channels/channel"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	release := func(version, id, hash string) *channel.Addon {
		a := &channel.Addon{Name: "dns", ID: id, ManifestHash: hash}
		if version != "" {
			v := semver.MustParse(version)
			a.Version = &v
		}
		return a
	}
	record := func(version, id, hash string) *Record {
		return &Record{Version: version, Channel: "s3://b/c.yaml", ID: id, ManifestHash: hash, SystemGeneration: 1}
	}
	pending := func(version, id, hash string) *Pending {
		return &Pending{Version: version, ID: id, ManifestHash: hash, Inventory: Inventory{Kinds: []string{"ConfigMap"}}}
	}
	ready := func(version, id, hash string) *Pending {
		p := pending(version, id, hash)
		p.Applied, p.Ready = true, true
		return p
	}
	from := func(a *channel.Addon, upgradesFrom string) *channel.Addon {
		v := semver.MustParse(upgradesFrom)
		a.UpgradesFrom = &v
		return a
	}
	offering := func(releases ...*channel.Addon) DecideOptions { return DecideOptions{Offered: releases} }
	allow := DecideOptions{AllowDowngrade: true}
	daemon := DecideOptions{Unattended: true}
	daemonAllow := DecideOptions{Unattended: true, AllowDowngrade: true}
	tests := []struct {
		name string
		c    *channel.Addon
		r    *Record
		p    *Pending
		opts DecideOptions
		want Decision
	}{
		{"install", release("1.0.0", "k8s-1.29", "aa"), nil, nil, DecideOptions{}, Decision{Apply: true, Reason: ReasonInstall}},
		{"upgrade", release("1.1.0", "k8s-1.29", "bb"), record("1.0.0", "k8s-1.29", "aa"), nil, DecideOptions{}, Decision{Apply: true, Reason: ReasonUpgrade}},
		{"upgrade with the same hash", release("1.1.0", "k8s-1.29", "aa"), record("1.0.0", "k8s-1.29", "aa"), nil, DecideOptions{}, Decision{Apply: true, Reason: ReasonUpgrade}},
		{"same version, other id", release("1.0.0", "k8s-1.31", "aa"), record("1.0.0", "k8s-1.29", "aa"), nil, DecideOptions{}, Decision{Apply: true, Reason: ReasonIDChanged}},
		{"same version and id, other hash", release("1.0.0", "k8s-1.29", "bb"), record("1.0.0", "k8s-1.29", "aa"), nil, DecideOptions{}, Decision{Apply: true, Reason: ReasonManifestChanged}},
		{"same hash in another case", release("1.0.0", "k8s-1.29", "AA"), record("1.0.0", "k8s-1.29", "aa"), nil, DecideOptions{}, Decision{Reason: ReasonUpToDate}},
		{"no-op", release("1.0.0", "k8s-1.29", "aa"), record("1.0.0", "k8s-1.29", "aa"), nil, DecideOptions{}, Decision{Reason: ReasonUpToDate}},
		{"no-op, record version written short", release("1.6.0", "", ""), record("1.6", "", ""), nil, DecideOptions{}, Decision{Reason: ReasonUpToDate}},
		{"downgrade refused", release("0.9.0", "k8s-1.29", "bb"), record("1.0.0", "k8s-1.29", "aa"), nil, DecideOptions{}, Decision{Reason: ReasonDowngrade}},
		{"downgrade refused despite other id", release("0.9.0", "k8s-1.31", "aa"), record("1.0.0", "k8s-1.29", "aa"), nil, DecideOptions{}, Decision{Reason: ReasonDowngrade}},
		{"pre-release below its release", release("1.0.0-rc.1", "k8s-1.29", "bb"), record("1.0.0", "k8s-1.29", "aa"), nil, DecideOptions{}, Decision{Reason: ReasonDowngrade}},
		// kOps 1.22 and later write records without version.
		{"record without version, same id and hash", release("1.0.0", "k8s-1.29", "aa"), record("", "k8s-1.29", "aa"), nil, DecideOptions{}, Decision{Reason: ReasonUpToDate}},
		{"record without version, other hash", release("1.0.0", "k8s-1.29", "bb"), record("", "k8s-1.29", "aa"), nil, DecideOptions{}, Decision{Apply: true, Reason: ReasonManifestChanged}},
		{"record without version, other id", release("0.1.0", "k8s-1.31", "aa"), record("", "k8s-1.29", "aa"), nil, DecideOptions{}, Decision{Apply: true, Reason: ReasonIDChanged}},
		{"record without version or hash, release with a hash", release("1.0.0", "k8s-1.29", "aa"), record("", "k8s-1.29", ""), nil, DecideOptions{}, Decision{Apply: true, Reason: ReasonManifestChanged}},
		{"release without version, same id and hash", release("", "k8s-1.29", "aa"), record("2.0.0", "k8s-1.29", "aa"), nil, DecideOptions{}, Decision{Reason: ReasonUpToDate}},
		{"release without version, other hash", release("", "k8s-1.29", "bb"), record("2.0.0", "k8s-1.29", "aa"), nil, DecideOptions{}, Decision{Apply: true, Reason: ReasonManifestChanged}},
		{"release without version, other id", release("", "k8s-1.31", "aa"), record("2.0.0", "k8s-1.29", "aa"), nil, DecideOptions{}, Decision{Apply: true, Reason: ReasonIDChanged}},
		{"neither has a hash", release("", "k8s-1.29", ""), record("", "k8s-1.29", ""), nil, DecideOptions{}, Decision{Reason: ReasonUpToDate}},
		{"systemGeneration 2 is never touched", release("2.0.0", "k8s-1.31", "bb"), &Record{Version: "1.0.0", ID: "k8s-1.29", ManifestHash: "aa", SystemGeneration: 2}, nil, DecideOptions{}, Decision{Reason: ReasonNewerTool}},
		{"systemGeneration 0 (kOps) is ours to update", release("2.0.0", "k8s-1.29", "bb"), &Record{Version: "1.0.0", ID: "k8s-1.29", ManifestHash: "aa"}, nil, DecideOptions{}, Decision{Apply: true, Reason: ReasonUpgrade}},
		{"unparseable version in a hand-made record", release("1.0.0", "k8s-1.29", "aa"), record("banana", "k8s-1.29", "aa"), nil, DecideOptions{}, Decision{Apply: true, Reason: ReasonInstall}},

		// A run left a pending release that did not finish.
		{"rollback: pending upgrade failed, the recorded release again", release("1.0.0", "k8s-1.29", "aa"), record("1.0.0", "k8s-1.29", "aa"), pending("2.0.0", "k8s-1.29", "bb"), DecideOptions{},
			Decision{Apply: true, Reason: "rollback: 2.0.0 did not finish", Unfinished: "2.0.0"}},
		{"pending equals the candidate: apply to finish", release("2.0.0", "k8s-1.29", "bb"), record("1.0.0", "k8s-1.29", "aa"), pending("2.0.0", "k8s-1.29", "bb"), DecideOptions{},
			Decision{Apply: true, Reason: "2.0.0 did not finish", Unfinished: "2.0.0"}},
		{"pending of the recorded release (a rollback that died)", release("1.0.0", "k8s-1.29", "aa"), record("1.0.0", "k8s-1.29", "aa"), pending("1.0.0", "k8s-1.29", "aa"), DecideOptions{},
			Decision{Apply: true, Reason: "1.0.0 did not finish", Unfinished: "1.0.0"}},
		{"pending, newer candidate", release("3.0.0", "k8s-1.29", "cc"), record("1.0.0", "k8s-1.29", "aa"), pending("2.0.0", "k8s-1.29", "bb"), DecideOptions{},
			Decision{Apply: true, Reason: "2.0.0 did not finish", Unfinished: "2.0.0"}},
		{"pending, candidate between record and pending: a rollback of the pending one", release("1.5.0", "k8s-1.29", "cc"), record("1.0.0", "k8s-1.29", "aa"), pending("2.0.0", "k8s-1.29", "bb"), DecideOptions{},
			Decision{Apply: true, Reason: "rollback: 2.0.0 did not finish", Unfinished: "2.0.0"}},
		{"pending of a first install", release("1.0.0", "k8s-1.29", "aa"), nil, pending("1.0.0", "k8s-1.29", "aa"), DecideOptions{},
			Decision{Apply: true, Reason: "1.0.0 did not finish", Unfinished: "1.0.0"}},
		{"pending without a version shows its id, and cannot be ordered: a rollback", release("1.0.0", "k8s-1.29", "aa"), record("1.0.0", "k8s-1.29", "aa"), pending("", "k8s-1.31", "bb"), DecideOptions{},
			Decision{Apply: true, Reason: "rollback: k8s-1.31 did not finish", Unfinished: "k8s-1.31"}},
		{"pending of an older tool names no release: as without", release("1.0.0", "k8s-1.29", "aa"), record("1.0.0", "k8s-1.29", "aa"), pending("", "", ""), DecideOptions{},
			Decision{Reason: ReasonUpToDate}},
		{"pending does not make a downgrade below the record", release("0.9.0", "k8s-1.29", "cc"), record("1.0.0", "k8s-1.29", "aa"), pending("2.0.0", "k8s-1.29", "bb"), DecideOptions{},
			Decision{Reason: ReasonDowngrade}},
		{"pending and a record of a newer tool", release("1.0.0", "k8s-1.29", "aa"), &Record{Version: "1.0.0", ID: "k8s-1.29", ManifestHash: "aa", SystemGeneration: 2}, pending("2.0.0", "k8s-1.29", "bb"), DecideOptions{},
			Decision{Reason: ReasonNewerTool}},

		// A pending release that became ready since its run's wait ended.
		{"ready pending release weighed: complete it", release("2.0.0", "k8s-1.29", "bb"), record("1.0.0", "k8s-1.29", "aa"), ready("2.0.0", "k8s-1.29", "bb"), DecideOptions{},
			Decision{Apply: true, Reason: "complete: 2.0.0 became ready", Unfinished: "2.0.0"}},
		{"ready pending release, the recorded one Offered: no rollback without consent", release("1.0.0", "k8s-1.29", "aa"), record("1.0.0", "k8s-1.29", "aa"), ready("2.0.0", "k8s-1.29", "bb"), DecideOptions{},
			Decision{Reason: "rollback refused: 2.0.0 became ready; going back from it needs --allow-downgrade", Blocked: true}},
		{"ready pending release, the recorded one offered, consented", release("1.0.0", "k8s-1.29", "aa"), record("1.0.0", "k8s-1.29", "aa"), ready("2.0.0", "k8s-1.29", "bb"), allow,
			Decision{Apply: true, Reason: "rollback: 2.0.0 did not finish", Unfinished: "2.0.0"}},
		{"ready pending release, a newer one offered", release("3.0.0", "k8s-1.29", "cc"), record("1.0.0", "k8s-1.29", "aa"), ready("2.0.0", "k8s-1.29", "bb"), DecideOptions{},
			Decision{Apply: true, Reason: "2.0.0 did not finish", Unfinished: "2.0.0"}},

		// A daemon never goes back on its own.
		{"daemon: failed pending release, the recorded one Offered: refused", release("1.0.0", "k8s-1.29", "aa"), record("1.0.0", "k8s-1.29", "aa"), pending("2.0.0", "k8s-1.29", "bb"), daemon,
			Decision{Reason: "rollback refused: 2.0.0 did not finish; a daemon does not roll back on its own: fix the release, or roll back once with apply channel --yes", Blocked: true}},
		{"daemon: failed pending release, consented", release("1.0.0", "k8s-1.29", "aa"), record("1.0.0", "k8s-1.29", "aa"), pending("2.0.0", "k8s-1.29", "bb"), daemonAllow,
			Decision{Apply: true, Reason: "rollback: 2.0.0 did not finish", Unfinished: "2.0.0"}},
		{"daemon: failed pending release offered again: finish it", release("2.0.0", "k8s-1.29", "bb"), record("1.0.0", "k8s-1.29", "aa"), pending("2.0.0", "k8s-1.29", "bb"), daemon,
			Decision{Apply: true, Reason: "2.0.0 did not finish", Unfinished: "2.0.0"}},
		{"daemon: failed pending release, a newer one offered", release("3.0.0", "k8s-1.29", "cc"), record("1.0.0", "k8s-1.29", "aa"), pending("2.0.0", "k8s-1.29", "bb"), daemon,
			Decision{Apply: true, Reason: "2.0.0 did not finish", Unfinished: "2.0.0"}},
		{"daemon: downgrade refused", release("0.9.0", "k8s-1.29", "bb"), record("1.0.0", "k8s-1.29", "aa"), nil, daemon, Decision{Reason: ReasonDowngrade}},
		{"daemon: downgrade consented", release("0.9.0", "k8s-1.29", "bb"), record("1.0.0", "k8s-1.29", "aa"), nil, daemonAllow, Decision{Apply: true, Reason: ReasonDowngradeAllowed}},
		{"daemon: upgrade", release("1.1.0", "k8s-1.29", "bb"), record("1.0.0", "k8s-1.29", "aa"), nil, daemon, Decision{Apply: true, Reason: ReasonUpgrade}},

		// Upgrade paths.
		{"upgradesFrom met", from(release("0.3.0", "", "cc"), "0.2.0"), record("0.2.0", "", "bb"), nil, DecideOptions{}, Decision{Apply: true, Reason: ReasonUpgrade}},
		{"upgradesFrom met by a newer patch", from(release("0.3.0", "", "cc"), "0.2.0"), record("0.2.1", "", "bb"), nil, DecideOptions{}, Decision{Apply: true, Reason: ReasonUpgrade}},
		{"a jump, the release to go through offered", from(release("0.3.0", "", "cc"), "0.2.0"), record("0.1.0", "", "aa"), nil, offering(release("0.1.0", "", "aa"), release("0.2.0", "", "bb"), release("0.2.1", "", "b1")),
			Decision{Reason: "upgrade path: 0.3.0 upgrades from 0.2.0 or later, not from 0.1.0: upgrade to 0.2.1 first (a channel whose newest dns is 0.2.1)", Blocked: true}},
		{"a jump, the release between a jump too", from(release("0.4.0", "", "dd"), "0.3.0"), record("0.1.0", "", "aa"), nil, offering(release("0.2.0", "", "bb"), from(release("0.3.0", "", "cc"), "0.2.0")),
			Decision{Reason: "upgrade path: 0.4.0 upgrades from 0.3.0 or later, not from 0.1.0: upgrade to 0.3.0 first, and on from there (a channel whose newest dns is 0.3.0)", Blocked: true}},
		{"a jump, nothing between offered", from(release("0.3.0", "", "cc"), "0.2.0"), record("0.1.0", "", "aa"), nil, DecideOptions{},
			Decision{Reason: "upgrade path: 0.3.0 upgrades from 0.2.0 or later, not from 0.1.0: upgrade to a release from 0.2.0 on first; the channels list none", Blocked: true}},
		{"a jump over a failed pending release", from(release("0.3.0", "", "cc"), "0.2.0"), record("0.1.0", "", "aa"), pending("0.2.0", "", "bb"), offering(release("0.2.0", "", "bb")),
			Decision{Reason: "upgrade path: 0.3.0 upgrades from 0.2.0 or later, not from 0.1.0: upgrade to 0.2.0 first (a channel whose newest dns is 0.2.0)", Blocked: true}},
		{"upgradesFrom on a first install", from(release("0.3.0", "", "cc"), "0.2.0"), nil, nil, DecideOptions{}, Decision{Apply: true, Reason: ReasonInstall}},
		{"upgradesFrom over a record without version", from(release("0.3.0", "k8s-1.29", "cc"), "0.2.0"), record("", "k8s-1.29", "aa"), nil, DecideOptions{}, Decision{Apply: true, Reason: ReasonManifestChanged}},

		// The operator chooses to go back.
		{"downgrade allowed", release("0.9.0", "k8s-1.29", "bb"), record("1.0.0", "k8s-1.29", "aa"), nil, allow, Decision{Apply: true, Reason: ReasonDowngradeAllowed}},
		{"downgrade allowed with a pending release", release("0.9.0", "k8s-1.29", "cc"), record("1.0.0", "k8s-1.29", "aa"), pending("2.0.0", "k8s-1.29", "bb"), allow, Decision{Apply: true, Reason: ReasonDowngradeAllowed}},
		{"allowing downgrades changes no other decision", release("1.0.0", "k8s-1.29", "aa"), record("1.0.0", "k8s-1.29", "aa"), nil, allow, Decision{Reason: ReasonUpToDate}},
		{"allowing downgrades never touches a newer tool's record", release("0.9.0", "k8s-1.29", "aa"), &Record{Version: "1.0.0", SystemGeneration: 2}, nil, allow, Decision{Reason: ReasonNewerTool}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(Decide(tt.c, tt.r, tt.p, tt.opts), tt.want); diff != "" {
				t.Errorf("Decide (-got +want):\n%s", diff)
			}
		})
	}
}

// TestDecidePlainManifest checks that the record of a plain manifest
// always carries the content's hash, so that an edit re-applies.
func TestDecidePlainManifest(t *testing.T) {
	t.Parallel()
	location := "/channels/plain-manifest.yaml"
	content := []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain, namespace: default}\ndata: {key: value}\n")
	addons, err := channel.Parse(location, content)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Decide(addons[0], NewRecord(addons[0]), nil, DecideOptions{}), (Decision{Reason: ReasonUpToDate}); got != want {
		t.Errorf("same content: got %+v, want %+v", got, want)
	}
	edited, err := channel.Parse(location, append(content, "# edited\n"...))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Decide(edited[0], NewRecord(addons[0]), nil, DecideOptions{}), (Decision{Apply: true, Reason: ReasonManifestChanged}); got != want {
		t.Errorf("edited content: got %+v, want %+v", got, want)
	}
}
