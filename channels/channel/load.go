package channel

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/blang/semver/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/klog/v2"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/channels/api"
)

// plainManifestPrefix starts the name of the addon a plain manifest location
// stands for.
const plainManifestPrefix = "manifest-"

// Load fetches the channel at location and returns every release it lists,
// resolved: manifest locations made absolute against the channel's own,
// names and namespaces defaulted, versions parsed tolerantly ("1.6" is
// 1.6.0) and kubernetesVersion ranges checked. Its error lists every problem
// of the file at once: unknown or duplicate fields, unparseable versions and
// ranges, missing names and manifests.
//
// A location whose first YAML document is not kind: Addons is a plain
// manifest, as in kOps: one release without version or selector, named
// manifest-<first 12 hex digits of the SHA-256 of location as given>, whose
// ManifestHash is the SHA-256 of the content and whose Inline holds it.
func Load(ctx context.Context, f *Fetcher, location string) ([]*Addon, error) {
	data, err := f.Fetch(ctx, location)
	if err != nil {
		return nil, fmt.Errorf("reading channel: %w", err)
	}
	addons, err := parse(location, data, f.Warn)
	if err != nil {
		return nil, err
	}
	klog.V(2).InfoS("Loaded channel", "location", location, "releases", len(addons))
	return addons, nil
}

// Parse is Load without the fetch: it reads data as the content of location.
// Entries it skips are logged.
func Parse(location string, data []byte) ([]*Addon, error) {
	return parse(location, data, nil)
}

// parse is Parse, telling warn about the entries it skips.
func parse(location string, data []byte, warn func(string)) ([]*Addon, error) {
	if warn == nil {
		warn = func(msg string) { klog.InfoS("Skipping channel entry", "reason", msg) }
	}
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, fmt.Errorf("channel %s: not YAML; check the location: %w", location, err)
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("channel %s: empty; expected a channel (kind: Addons) or a manifest", location)
	}
	var meta metav1.TypeMeta
	if err := yaml.Unmarshal(docs[0], &meta); err != nil {
		return nil, fmt.Errorf("channel %s: not a YAML object; check the location: %w", location, err)
	}
	if meta.Kind != api.Kind {
		return []*Addon{plainManifest(location, data)}, nil
	}
	if len(docs) > 1 {
		return nil, fmt.Errorf("channel %s: %d YAML documents; a channel holds exactly one (kind: Addons)", location, len(docs))
	}
	channel, problems := decodeChannel(docs[0])
	if channel == nil {
		return nil, fmt.Errorf("channel %s: %s", location, strings.Join(problems, "; "))
	}
	addons := make([]*Addon, 0, len(channel.Spec.Addons))
	for i, spec := range channel.Spec.Addons {
		a, specProblems := resolve(location, channel.ObjectMeta.Name, i, spec, warn)
		problems = append(problems, specProblems...)
		if a != nil {
			addons = append(addons, a)
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("channel %s: %s", location, strings.Join(problems, "; "))
	}
	return addons, nil
}

// splitDocuments returns the YAML documents of data that hold something
// other than comments and blanks.
func splitDocuments(data []byte) ([][]byte, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		var content any
		if err := yaml.Unmarshal(doc, &content); err != nil {
			return nil, err
		}
		if content != nil {
			docs = append(docs, doc)
		}
	}
}

// decodeChannel decodes a channel document strictly. A field the wire types
// do not know, or one given twice, is a problem naming its path
// (spec.addons[0].foo); the channel is nil only when the document could not
// be decoded at all.
func decodeChannel(doc []byte) (*api.Addons, []string) {
	// The strict conversion refuses keys given twice in one mapping, which
	// the JSON decoder below would never see.
	jsonData, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, []string{strings.Join(strings.Fields(err.Error()), " ")}
	}
	channel := &api.Addons{}
	strictErrs, err := sigsjson.UnmarshalStrict(jsonData, channel, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return nil, []string{err.Error()}
	}
	var problems []string
	for _, e := range strictErrs {
		problems = append(problems, e.Error())
	}
	return channel, problems
}

// resolve turns entry i of a channel into a release, or reports what is
// wrong with it. An entry whose kubernetesVersion does not parse is skipped
// with a warning.
func resolve(location, channelName string, i int, spec *api.AddonSpec, warn func(string)) (*Addon, []string) {
	path := fmt.Sprintf("spec.addons[%d]", i)
	if spec == nil {
		return nil, []string{path + " is empty"}
	}
	name := channelName
	if spec.Name != nil {
		name = *spec.Name
	}
	var problems []string
	problem := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("addon %q (%s): ", name, path)+fmt.Sprintf(format, args...))
	}
	if name == "" {
		problems = append(problems, path+": no name, and the channel has no metadata.name to default it to")
	}
	a := &Addon{
		Name:               name,
		Namespace:          DefaultNamespace,
		ID:                 spec.ID,
		KubernetesVersion:  strings.TrimSpace(spec.KubernetesVersion),
		ManifestHash:       strings.ToLower(spec.ManifestHash),
		Selector:           spec.Selector,
		Prune:              spec.Prune,
		NeedsRollingUpdate: spec.NeedsRollingUpdate,
		NeedsPKI:           spec.NeedsPKI,
		Channel:            location,
	}
	if spec.Namespace != nil && *spec.Namespace != "" {
		a.Namespace = *spec.Namespace
	}
	resolveVersions(a, spec, problem)
	if a.KubernetesVersion != "" {
		if _, err := semver.ParseRange(a.KubernetesVersion); err != nil {
			// kOps skips such an entry with a warning rather than failing
			// the channel, and so do we: the channel's other entries stay
			// usable.
			warn(fmt.Sprintf("addon %q (%s): skipping the entry: kubernetesVersion %q is not a semver range such as \">=1.29.0 <1.31.0\": %v", name, path, spec.KubernetesVersion, err))
			return nil, problems
		}
	}
	resolveManifest(a, location, spec, problem)
	resolveRollout(a, spec, problem)
	return a, problems
}

// resolveVersions sets the release's version and the version it upgrades
// from, telling problem what is wrong with them.
func resolveVersions(a *Addon, spec *api.AddonSpec, problem func(string, ...any)) {
	if spec.Version != "" {
		v, err := semver.ParseTolerant(spec.Version)
		if err != nil {
			// The parser's own message shows the version after its
			// padding ("0one"), which would only confuse.
			problem("version %q is not a semantic version such as 1.2.3", spec.Version)
		} else {
			a.Version = &v
		}
	}
	if spec.UpgradesFrom != "" {
		v, err := semver.ParseTolerant(spec.UpgradesFrom)
		switch {
		case err != nil:
			problem("upgradesFrom %q is not a semantic version such as 0.2.0 (the oldest installed version the release upgrades from)", spec.UpgradesFrom)
		case a.Version == nil:
			problem("upgradesFrom %q needs the release to have a version", spec.UpgradesFrom)
		case !v.LT(*a.Version):
			problem("upgradesFrom %s is not below the release's version %s", v, a.Version)
		default:
			a.UpgradesFrom = &v
		}
	}
}

// resolveManifest sets the release's manifest, resolved against the
// channel's location, telling problem what is wrong with it or its hash.
func resolveManifest(a *Addon, location string, spec *api.AddonSpec, problem func(string, ...any)) {
	if spec.Manifest == nil || *spec.Manifest == "" {
		problem("no manifest")
	} else {
		m, err := ResolveLocation(location, *spec.Manifest)
		if err != nil {
			problem("manifest: %v", err)
		}
		a.Manifest = m
	}
	if a.ManifestHash != "" && hashAlgorithm(a.ManifestHash) == "" {
		problem("manifestHash %q is not a hex SHA-256", spec.ManifestHash)
	}
}

// resolveRollout sets the release's needsRollingUpdate, reading the
// singular "worker" of older kOps channels as workers, and checks its
// prune kinds, telling problem what is wrong.
func resolveRollout(a *Addon, spec *api.AddonSpec, problem func(string, ...any)) {
	switch spec.NeedsRollingUpdate {
	case "worker":
		// Older kOps channels wrote the singular; kOps reads it as workers.
		a.NeedsRollingUpdate = api.NeedsRollingUpdateWorkers
	case "", api.NeedsRollingUpdateControlPlane, api.NeedsRollingUpdateWorkers, api.NeedsRollingUpdateAll:
	default:
		problem("needsRollingUpdate %q is none of %q, %q, %q", spec.NeedsRollingUpdate,
			api.NeedsRollingUpdateControlPlane, api.NeedsRollingUpdateWorkers, api.NeedsRollingUpdateAll)
	}
	if spec.Prune != nil {
		for j, k := range spec.Prune.Kinds {
			if k.Kind == "" {
				problem("prune.kinds[%d] names no kind", j)
			}
		}
	}
}

// plainManifest is the release a plain manifest location stands for.
func plainManifest(location string, data []byte) *Addon {
	sum := sha256.Sum256([]byte(location))
	return &Addon{
		Name:         plainManifestPrefix + hex.EncodeToString(sum[:])[:12],
		Namespace:    DefaultNamespace,
		Manifest:     location,
		ManifestHash: HashManifest(data),
		Channel:      location,
		Inline:       data,
	}
}

// HashManifest returns the hex SHA-256 of a manifest, as manifestHash holds it.
func HashManifest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// hashAlgorithm names the algorithm a hex manifestHash was made with, by its
// length: SHA-256, or SHA-1 for channels of old kOps releases; "" when the
// hash is neither.
func hashAlgorithm(hash string) string {
	if _, err := hex.DecodeString(hash); err != nil {
		return ""
	}
	switch len(hash) {
	case 2 * sha256.Size:
		return "SHA-256"
	case 2 * sha1.Size:
		return "SHA-1"
	}
	return ""
}

// VerifyManifest checks a fetched manifest against the release's
// ManifestHash, and does nothing when the release has none. Its error gives
// both hashes: nothing of the addon may be applied then.
func VerifyManifest(a *Addon, data []byte) error {
	want := strings.ToLower(a.ManifestHash)
	if want == "" {
		return nil
	}
	var got string
	algorithm := hashAlgorithm(want)
	switch algorithm {
	case "SHA-1":
		sum := sha1.Sum(data)
		got = hex.EncodeToString(sum[:])
	default:
		algorithm = "SHA-256"
		got = HashManifest(data)
	}
	if got != want {
		return fmt.Errorf("manifest %s of addon %q has %s %s but the channel's manifestHash is %s; refusing to apply it: check that the channel and the manifest belong together",
			a.Manifest, a.Name, algorithm, got, want)
	}
	return nil
}

// FetchManifest returns the release's manifest, verified against its
// ManifestHash: the Inline content of a plain manifest location, else what f
// fetches from Manifest.
func (f *Fetcher) FetchManifest(ctx context.Context, a *Addon) ([]byte, error) {
	data := a.Inline
	if data == nil {
		var err error
		if data, err = f.Fetch(ctx, a.Manifest); err != nil {
			return nil, fmt.Errorf("reading the manifest of addon %q: %w", a.Name, err)
		}
	}
	if err := VerifyManifest(a, data); err != nil {
		return nil, err
	}
	return data, nil
}
