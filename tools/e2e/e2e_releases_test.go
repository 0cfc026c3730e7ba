package e2e

// This file holds TestIntegrationKOS's release steps: the install records
// `channels get addons` lists, the releases the channels select for the
// cluster's Kubernetes version and its variants, a re-run that changes
// nothing, and an upgrade that prunes what the release dropped.

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/blang/semver/v4"
	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/tools/kosinstall"
)

// testRecords checks the install records: every addon at the release the
// channels offer for this cluster.
func (k *kos) testRecords(t *testing.T) {
	want := map[string]record{}
	for _, a := range k.selected(t) {
		want[a.Name] = record{Name: a.Name, Namespace: a.Namespace, Version: a.VersionString(), ID: a.ID, Channel: a.Channel, ManifestHash: a.ManifestHash}
	}
	if diff := cmp.Diff(want, k.records(t)); diff != "" {
		t.Errorf("install records (-want +got):\n%s", diff)
	}
}

// record is an install record as `channels get addons -o json` prints it.
type record struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Version   string `json:"version"`
	ID        string `json:"id"`
	Channel   string `json:"channel"`
	// ManifestHash is that of the manifest applied.
	ManifestHash string `json:"manifestHash"`
}

// records returns the KOS install records `channels get addons` lists, by
// addon name.
func (k *kos) records(t *testing.T) map[string]record {
	t.Helper()
	ours := map[string]bool{}
	for _, name := range k.expectedAddons(t) {
		ours[name] = true
	}
	got := map[string]record{}
	for name, r := range k.listRecords(t) {
		if ours[name] {
			got[name] = r
		}
	}
	return got
}

// listRecords returns every install record `channels get addons` lists, by
// addon name.
func (k *kos) listRecords(t *testing.T) map[string]record {
	t.Helper()
	out := k.channelsCLI(t, "get", "addons", "-o", "json")
	var list struct {
		Items []struct {
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
			Record record `json:"record"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("channels get addons -o json: %v\n%s", err, out)
	}
	got := map[string]record{}
	for _, it := range list.Items {
		r := it.Record
		r.Name, r.Namespace = it.Metadata.Name, it.Metadata.Namespace
		got[r.Name] = r
	}
	return got
}

// offered returns every release of the bootstrap channels, for whichever
// Kubernetes version.
func (k *kos) offered(t *testing.T) []*channels.Addon {
	t.Helper()
	var releases []*channels.Addon
	for _, loc := range k.channels {
		got, err := channels.Load(t.Context(), channels.NewFetcher(), loc)
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, got...)
	}
	return releases
}

// selected returns the releases the bootstrap channels offer this cluster,
// as channels picks them.
func (k *kos) selected(t *testing.T) []*channels.Addon {
	t.Helper()
	return channels.Select(k.offered(t), k.server)
}

// expectedAddons names the addons of the bootstrap channels.
func (k *kos) expectedAddons(t *testing.T) []string {
	var names []string
	for _, a := range k.selected(t) {
		names = append(names, a.Name)
	}
	return names
}

// testVariant checks, without channels' own selection, that the addon with
// Kubernetes variants was installed from the one whose range holds the
// server's version, and that another variant exists that does not.
func (k *kos) testVariant(t *testing.T) {
	releases := k.offered(t)
	records := k.records(t)
	variants := 0
	for name, rec := range records {
		var fits, misfits []*channels.Addon
		for _, a := range releases {
			if a.Name != name || a.VersionString() != rec.Version {
				continue
			}
			if a.KubernetesVersion == "" || semver.MustParseRange(a.KubernetesVersion)(k.server) {
				fits = append(fits, a)
			} else {
				misfits = append(misfits, a)
			}
		}
		if len(misfits) == 0 {
			continue
		}
		variants++
		if len(fits) == 0 {
			t.Errorf("addon %s %s: no release fits Kubernetes %s, yet it is installed as %s", name, rec.Version, k.server, rec.ID)
			continue
		}
		if rec.ID != fits[0].ID {
			t.Errorf("addon %s on Kubernetes %s: installed id %s, want %s (range %q)", name, k.server, rec.ID, fits[0].ID, fits[0].KubernetesVersion)
		}
		for _, m := range misfits {
			if m.ID == rec.ID {
				t.Errorf("addon %s on Kubernetes %s: installed id %s is that of range %q", name, k.server, rec.ID, m.KubernetesVersion)
			}
		}
		t.Logf("addon %s on Kubernetes %s: variant %s installed; %d other variant(s) left out", name, k.server, rec.ID, len(misfits))
	}
	if variants == 0 {
		t.Errorf("no installed addon has a release for another Kubernetes version: the variant check checked nothing")
	}
}

// testRerun applies the bootstrap channels again: nothing to do, and no
// object of any addon changes.
func (k *kos) testRerun(t *testing.T) {
	before := k.objectVersions(t)
	out := k.channelsCLI(t, append(append([]string{"apply", "channel"}, k.channels...), "--yes")...)
	if !strings.Contains(out, "No update required") {
		t.Errorf("a re-run of the install has something to do:\n%s", out)
	}
	if diff := cmp.Diff(before, k.objectVersions(t)); diff != "" {
		t.Errorf("a re-run of the install changed objects (-before +after):\n%s", diff)
	}
}

// testUpgrade upgrades one addon to the first test release (a ConfigMap and
// a Role more), then to the second (the ConfigMap renamed, the Role gone):
// the second prunes exactly the old ConfigMap and the Role, and the rest of
// the addon stays as it was.
func (k *kos) testUpgrade(t *testing.T) {
	ctx := t.Context()
	apply := func(n int) string {
		loc, err := filepath.Abs(upgradeChannel(n))
		if err != nil {
			t.Fatal(err)
		}
		return k.channelsCLI(t, append(append([]string{"apply", "channel"}, k.channels...), loc, "--yes")...)
	}
	releases, err := channels.Load(ctx, channels.NewFetcher(), upgradeChannel(1))
	if err != nil {
		t.Fatal(err)
	}
	first := releases[0]

	out := apply(1)
	if !strings.Contains(out, upgradeAddon+": Updated ") || strings.Contains(out, "Pruned") {
		t.Errorf("the first test release: want %s updated and nothing pruned:\n%s", upgradeAddon, out)
	}
	if _, err := k.kube.CoreV1().ConfigMaps(kosinstall.Namespace).Get(ctx, "kos-e2e-settings", metav1.GetOptions{}); err != nil {
		t.Errorf("the first test release's ConfigMap: %v", err)
	}
	role, err := k.kube.RbacV1().Roles(kosinstall.Namespace).Get(ctx, "kos-e2e-reader", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the first test release's Role: %v", err)
	}
	if role.Labels[kosinstall.AddonLabel] != upgradeAddon {
		t.Errorf("Role kos-e2e-reader: label %s=%q, want %q", kosinstall.AddonLabel, role.Labels[kosinstall.AddonLabel], upgradeAddon)
	}
	if got := k.records(t)[upgradeAddon].Version; got != first.VersionString() {
		t.Errorf("record of %s after the first test release: version %s, want %s", upgradeAddon, got, first.VersionString())
	}
	before := k.objectVersions(t)

	out = apply(2)
	if !strings.Contains(out, upgradeAddon+": Updated ") {
		t.Errorf("the second test release: want %s updated:\n%s", upgradeAddon, out)
	}
	var pruned []string
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, "Pruned") {
			pruned = append(pruned, line)
		}
	}
	says := func(words ...string) func(string) bool {
		return func(line string) bool {
			return !slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(line, w) })
		}
	}
	if len(pruned) != 2 || !slices.ContainsFunc(pruned, says("ConfigMap", "kos-e2e-settings")) || !slices.ContainsFunc(pruned, says("Role", "kos-e2e-reader")) {
		t.Errorf("the second test release pruned %q, want the ConfigMap kos-e2e-settings and the Role kos-e2e-reader; output:\n%s", pruned, out)
	}
	if _, err := k.kube.CoreV1().ConfigMaps(kosinstall.Namespace).Get(ctx, "kos-e2e-settings", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap kos-e2e-settings after the second test release: %v, want not found", err)
	}
	if _, err := k.kube.RbacV1().Roles(kosinstall.Namespace).Get(ctx, "kos-e2e-reader", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Role kos-e2e-reader after the second test release: %v, want not found", err)
	}
	if _, err := k.kube.CoreV1().ConfigMaps(kosinstall.Namespace).Get(ctx, "kos-e2e-settings-renamed", metav1.GetOptions{}); err != nil {
		t.Errorf("the second test release's ConfigMap: %v", err)
	}
	// Everything else is as it was: gone are exactly the two pruned
	// objects, new is the renamed ConfigMap, and nothing else changed
	// but the record namespace, which holds the install records.
	after := k.objectVersions(t)
	var gone, added, changed []string
	for key, rv := range before {
		switch now, ok := after[key]; {
		case !ok:
			gone = append(gone, key)
		case now != rv && key != "Namespace//"+kosinstall.Namespace:
			changed = append(changed, key)
		}
	}
	for key := range after {
		if _, ok := before[key]; !ok {
			added = append(added, key)
		}
	}
	slices.Sort(gone)
	want := []string{"ConfigMap/" + kosinstall.Namespace + "/kos-e2e-settings", "Role.rbac.authorization.k8s.io/" + kosinstall.Namespace + "/kos-e2e-reader"}
	if diff := cmp.Diff(want, gone); diff != "" {
		t.Errorf("objects gone after the second test release (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"ConfigMap/" + kosinstall.Namespace + "/kos-e2e-settings-renamed"}, added); diff != "" {
		t.Errorf("objects added by the second test release (-want +got):\n%s", diff)
	}
	if len(changed) > 0 {
		t.Errorf("objects changed by the second test release: %v", changed)
	}
	// The upgrade changed no workload: KOS still runs.
	k.waitKOSReady(t, time.Minute)
}
