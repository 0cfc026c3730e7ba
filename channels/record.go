package channels

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/blang/semver/v4"
)

// AnnotationPrefix prefixes the annotation that records an installed addon on
// its record namespace: addons.k8s.io/<name>. kOps uses the same key.
const AnnotationPrefix = "addons.k8s.io/"

// CurrentSystemGeneration is the systemGeneration this tool writes. A record
// with a higher one was written by a newer tool and is never touched.
const CurrentSystemGeneration = 1

// Record is what is installed of one addon: the value of its annotation,
// compact JSON and a superset of kOps's fields so that each tool reads the
// other's records. kOps parses the first five fields; the rest are ours.
type Record struct {
	Version          string `json:"version,omitempty"`
	Channel          string `json:"channel,omitempty"`
	ID               string `json:"id,omitempty"`
	ManifestHash     string `json:"manifestHash,omitempty"`
	SystemGeneration int    `json:"systemGeneration,omitempty"`

	// Inventory is what the release applied, which pruning lists on the next
	// update; kOps ignores it.
	Inventory *Inventory `json:"inventory,omitempty"`
}

// Inventory remembers the kinds an addon applied and the namespaces it
// applied namespaced objects in: enough to list everything it may own by its
// selector later, without storing every object's name.
type Inventory struct {
	// Kinds are the group-kinds applied, as schema.GroupKind.String() writes
	// them ("Deployment.apps"; "ConfigMap" for the core group). Versions are
	// left out on purpose: the next release may serve a kind at another one.
	Kinds []string `json:"kinds,omitempty"`
	// Namespaces are the namespaces namespaced objects were applied in.
	Namespaces []string `json:"namespaces,omitempty"`
}

// NewRecord is the record of a release once it is applied, at
// CurrentSystemGeneration and without inventory; the caller adds that.
func NewRecord(a *Addon) *Record {
	return &Record{
		Version:          a.VersionString(),
		Channel:          a.Channel,
		ID:               a.ID,
		ManifestHash:     a.ManifestHash,
		SystemGeneration: CurrentSystemGeneration,
	}
}

// ParseRecord reads the value of an install record annotation, whether this
// tool or kOps wrote it. Keys it does not know are ignored: newer tools may
// add some. A version that is not semver makes the record unreadable.
func ParseRecord(value string) (*Record, error) {
	if strings.TrimSpace(value) == "" {
		return nil, errors.New("empty install record")
	}
	r := &Record{}
	if err := json.Unmarshal([]byte(value), r); err != nil {
		return nil, fmt.Errorf("parsing install record %q: %w", value, err)
	}
	if r.Version != "" {
		if _, err := semver.ParseTolerant(r.Version); err != nil {
			return nil, fmt.Errorf("install record %q: version is not semver: %w", value, err)
		}
	}
	return r, nil
}

// Encode renders the record as the annotation holds it: compact JSON with the
// keys in a fixed order, kOps's first (version, channel, id, manifestHash,
// systemGeneration), and no HTML escaping, so that a URL keeps its & and <.
func (r *Record) Encode() (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return "", fmt.Errorf("encoding install record: %w", err)
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}
