package channels

import (
	"testing"

	"github.com/blang/semver/v4"
)

func TestDecide(t *testing.T) {
	release := func(version, id, hash string) *Addon {
		a := &Addon{Name: "dns", ID: id, ManifestHash: hash}
		if version != "" {
			v := semver.MustParse(version)
			a.Version = &v
		}
		return a
	}
	record := func(version, id, hash string) *Record {
		return &Record{Version: version, Channel: "s3://b/c.yaml", ID: id, ManifestHash: hash, SystemGeneration: 1}
	}
	tests := []struct {
		name string
		c    *Addon
		r    *Record
		want Decision
	}{
		{"install", release("1.0.0", "k8s-1.29", "aa"), nil, Decision{Apply: true, Reason: ReasonInstall}},
		{"upgrade", release("1.1.0", "k8s-1.29", "bb"), record("1.0.0", "k8s-1.29", "aa"), Decision{Apply: true, Reason: ReasonUpgrade}},
		{"upgrade with the same hash", release("1.1.0", "k8s-1.29", "aa"), record("1.0.0", "k8s-1.29", "aa"), Decision{Apply: true, Reason: ReasonUpgrade}},
		{"same version, other id", release("1.0.0", "k8s-1.31", "aa"), record("1.0.0", "k8s-1.29", "aa"), Decision{Apply: true, Reason: ReasonIDChanged}},
		{"same version and id, other hash", release("1.0.0", "k8s-1.29", "bb"), record("1.0.0", "k8s-1.29", "aa"), Decision{Apply: true, Reason: ReasonManifestChanged}},
		{"same hash in another case", release("1.0.0", "k8s-1.29", "AA"), record("1.0.0", "k8s-1.29", "aa"), Decision{Reason: ReasonUpToDate}},
		{"no-op", release("1.0.0", "k8s-1.29", "aa"), record("1.0.0", "k8s-1.29", "aa"), Decision{Reason: ReasonUpToDate}},
		{"no-op, record version written short", release("1.6.0", "", ""), record("1.6", "", ""), Decision{Reason: ReasonUpToDate}},
		{"downgrade refused", release("0.9.0", "k8s-1.29", "bb"), record("1.0.0", "k8s-1.29", "aa"), Decision{Reason: ReasonDowngrade}},
		{"downgrade refused despite other id", release("0.9.0", "k8s-1.31", "aa"), record("1.0.0", "k8s-1.29", "aa"), Decision{Reason: ReasonDowngrade}},
		{"pre-release below its release", release("1.0.0-rc.1", "k8s-1.29", "bb"), record("1.0.0", "k8s-1.29", "aa"), Decision{Reason: ReasonDowngrade}},
		// kOps 1.22 and later write records without version.
		{"record without version, same id and hash", release("1.0.0", "k8s-1.29", "aa"), record("", "k8s-1.29", "aa"), Decision{Reason: ReasonUpToDate}},
		{"record without version, other hash", release("1.0.0", "k8s-1.29", "bb"), record("", "k8s-1.29", "aa"), Decision{Apply: true, Reason: ReasonManifestChanged}},
		{"record without version, other id", release("0.1.0", "k8s-1.31", "aa"), record("", "k8s-1.29", "aa"), Decision{Apply: true, Reason: ReasonIDChanged}},
		{"record without version or hash, release with a hash", release("1.0.0", "k8s-1.29", "aa"), record("", "k8s-1.29", ""), Decision{Apply: true, Reason: ReasonManifestChanged}},
		{"release without version, same id and hash", release("", "k8s-1.29", "aa"), record("2.0.0", "k8s-1.29", "aa"), Decision{Reason: ReasonUpToDate}},
		{"release without version, other hash", release("", "k8s-1.29", "bb"), record("2.0.0", "k8s-1.29", "aa"), Decision{Apply: true, Reason: ReasonManifestChanged}},
		{"release without version, other id", release("", "k8s-1.31", "aa"), record("2.0.0", "k8s-1.29", "aa"), Decision{Apply: true, Reason: ReasonIDChanged}},
		{"neither has a hash", release("", "k8s-1.29", ""), record("", "k8s-1.29", ""), Decision{Reason: ReasonUpToDate}},
		{"systemGeneration 2 is never touched", release("2.0.0", "k8s-1.31", "bb"), &Record{Version: "1.0.0", ID: "k8s-1.29", ManifestHash: "aa", SystemGeneration: 2}, Decision{Reason: ReasonNewerTool}},
		{"systemGeneration 0 (kOps) is ours to update", release("2.0.0", "k8s-1.29", "bb"), &Record{Version: "1.0.0", ID: "k8s-1.29", ManifestHash: "aa"}, Decision{Apply: true, Reason: ReasonUpgrade}},
		{"unparseable version in a hand-made record", release("1.0.0", "k8s-1.29", "aa"), record("banana", "k8s-1.29", "aa"), Decision{Apply: true, Reason: ReasonInstall}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Decide(tt.c, tt.r); got != tt.want {
				t.Errorf("Decide: got %+v, want %+v", got, tt.want)
			}
		})
	}
}
