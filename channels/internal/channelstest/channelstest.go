// Package channelstest writes channels and manifests for the tests of the
// channels packages: releases of ConfigMaps, Namespaces and Deployments,
// and channel files that name them. Only tests import it.
package channelstest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/channels/api"
	"github.com/kos-sdn/kos/channels/channel"
)

// PauseImage is the image of the Deployments the tests apply.
const PauseImage = "registry.k8s.io/pause:3.10"

// ConfigMap is a ConfigMap whose data's key holds value.
func ConfigMap(namespace, name, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: %s}\ndata: {key: %q}\n", name, namespace, value)
}

// Namespace is a Namespace.
func Namespace(name string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n", name)
}

// Manifest joins documents into one manifest.
func Manifest(docs ...string) string { return strings.Join(docs, "---\n") }

// DeploymentWithReplicas is a Deployment of the pause image with the given
// number of replicas.
func DeploymentWithReplicas(namespace, name string, replicas int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  replicas: %[4]d
  selector: {matchLabels: {app: %[2]s}}
  template:
    metadata: {labels: {app: %[2]s}}
    spec: {containers: [{name: c, image: %[3]s}]}
`, namespace, name, PauseImage, replicas)
}

// Release is one entry of a channel a test writes; its manifest is
// written next to the channel.
type Release struct {
	Name     string
	Version  string
	ID       string
	Manifest string
	// Namespace holds the record; empty means the default.
	Namespace string
	// Hash overrides the manifest's hash; "none" leaves it out.
	Hash               string
	Prune              *api.PruneSpec
	NeedsRollingUpdate api.NeedsRollingUpdate
	// KubernetesVersion and UpgradesFrom are the entry's, when set.
	KubernetesVersion string
	UpgradesFrom      string
}

// SelectorOf is the selector WriteChannel gives an addon.
func SelectorOf(name string) map[string]string {
	return map[string]string{"k8s-addon": name + ".addons.k8s.io"}
}

// WriteChannel writes a channel of releases and their manifests into dir and
// returns the channel's location.
func WriteChannel(t *testing.T, dir, file string, releases ...Release) string {
	t.Helper()
	ch := api.Addons{
		TypeMeta:   metav1.TypeMeta{Kind: api.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: strings.TrimSuffix(file, ".yaml")},
	}
	for _, r := range releases {
		manifest := fmt.Sprintf("%s-%s-%s.yaml", r.Name, r.Version, r.ID)
		if err := os.WriteFile(filepath.Join(dir, manifest), []byte(r.Manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		hash := channel.HashManifest([]byte(r.Manifest))
		switch r.Hash {
		case "":
		case "none":
			hash = ""
		default:
			hash = r.Hash
		}
		spec := &api.AddonSpec{
			Name:               &r.Name,
			Version:            r.Version,
			ID:                 r.ID,
			Selector:           SelectorOf(r.Name),
			Manifest:           &manifest,
			ManifestHash:       hash,
			Prune:              r.Prune,
			NeedsRollingUpdate: r.NeedsRollingUpdate,
			KubernetesVersion:  r.KubernetesVersion,
			UpgradesFrom:       r.UpgradesFrom,
		}
		if r.Namespace != "" {
			spec.Namespace = &r.Namespace
		}
		ch.Spec.Addons = append(ch.Spec.Addons, spec)
	}
	data, err := yaml.Marshal(ch)
	if err != nil {
		t.Fatal(err)
	}
	location := filepath.Join(dir, file)
	if err := os.WriteFile(location, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return location
}

// KOpsRecord has the fields kOps reads from an install record, as its own
// type (channelsapi.ChannelVersion) declares them: a record decodes into it
// when kOps can read it.
type KOpsRecord struct {
	Version          *string `json:"version,omitempty"`
	Channel          *string `json:"channel,omitempty"`
	ID               string  `json:"id,omitempty"`
	ManifestHash     string  `json:"manifestHash,omitempty"`
	SystemGeneration int     `json:"systemGeneration"`
}
