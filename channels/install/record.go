package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/blang/semver/v4"

	"github.com/kos-sdn/kos/channels/channel"
)

// AnnotationPrefix prefixes the annotation that records an installed addon on
// its record namespace: addons.k8s.io/<name>. kOps uses the same key.
const AnnotationPrefix = "addons.k8s.io/"

// RecordFieldManager is the field manager of every write of an install
// record or a pending inventory. It is not FieldManager on purpose: a field
// manager that applies owns, and removes, whatever it wrote and stops
// sending, so records written as the applier would vanish the next time a
// manifest applies their namespace (which is what kOps's channels does to
// its own records). No apply ever runs as this manager, and taking over other
// managers' fields never adopts record annotations.
const RecordFieldManager = "channels-record"

// InventoryAnnotationPrefix prefixes the annotation that holds the pending
// inventory of an addon on its record namespace while a release is being
// applied: inventory.channels.kos.example.com/<name>. It is written before
// anything is applied and removed with the record write, so a run that dies
// half-way leaves the next run the kinds and namespaces to prune.
const InventoryAnnotationPrefix = "inventory.channels.kos.example.com/"

// IdentityLabel is stamped, with the addon's name as value, on every object
// an addon applies, and every list that looks for objects to prune selects
// it besides the addon's selector: two addons that share a selector (kOps
// gives every networking addon role.kubernetes.io/networking=1) never prune
// each other's objects.
const IdentityLabel = "channels.kos.example.com/addon"

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
	// Identity is the IdentityLabel selector ("key=value") the objects
	// carry. Records written before identity labels existed have none:
	// pruning after such a record also considers objects without the label.
	Identity string `json:"identity,omitempty"`
}

// Pending is the value of the pending annotation of an addon: the release a
// run started applying, and the kinds and namespaces its objects may be
// found in. It is written before anything of the release is applied and
// removed with the install record write, so a pending release that is still
// there names a release that did not finish: the run died, or its objects
// never became ready. Decide reads it: re-applying the recorded release then
// applies again, which restores it and prunes what only the unfinished
// release added. Annotations written before releases were recorded hold the
// inventory alone; kOps never reads them.
type Pending struct {
	Version      string `json:"version,omitempty"`
	Channel      string `json:"channel,omitempty"`
	ID           string `json:"id,omitempty"`
	ManifestHash string `json:"manifestHash,omitempty"`
	// Applied is set once every object of the release was applied and the
	// run went on to wait for them to be ready: a release left pending with
	// it only failed its wait, and may have become ready since.
	Applied bool `json:"applied,omitempty"`
	Inventory

	// Ready is not part of the annotation: Plan sets it when Applied is
	// set and every object of the release is there and ready now, so that
	// the release is completed rather than rolled back.
	Ready bool `json:"-"`
}

// NewPending is the pending annotation of release a with inventory inv.
func NewPending(a *channel.Addon, inv *Inventory) *Pending {
	return &Pending{Version: a.VersionString(), Channel: a.Channel, ID: a.ID, ManifestHash: a.ManifestHash, Inventory: *inv}
}

// ParseInventory reads the value of a pending annotation.
func ParseInventory(value string) (*Pending, error) {
	p := &Pending{}
	if err := json.Unmarshal([]byte(value), p); err != nil {
		return nil, fmt.Errorf("parsing pending inventory %q: %w", value, err)
	}
	return p, nil
}

// Scope returns the kinds and namespaces of p; nil when p is nil.
func (p *Pending) Scope() *Inventory {
	if p == nil {
		return nil
	}
	return &p.Inventory
}

// NamesRelease reports whether p says which release was being applied;
// annotations of older tools do not.
func (p *Pending) NamesRelease() bool {
	return p != nil && (p.Version != "" || p.ID != "" || p.ManifestHash != "")
}

// Is reports whether p names release a: the same version, id and manifest
// hash.
func (p *Pending) Is(a *channel.Addon) bool {
	if !p.NamesRelease() || p.ID != a.ID || !strings.EqualFold(p.ManifestHash, a.ManifestHash) {
		return false
	}
	if p.Version == "" || a.Version == nil {
		return p.Version == a.VersionString()
	}
	v, err := semver.ParseTolerant(p.Version)
	return err == nil && v.Equals(*a.Version)
}

// Release describes the pending release as the plan shows releases:
// "0.2.0", or its id when it has no version.
func (p *Pending) Release() string {
	switch {
	case p.Version != "":
		return p.Version
	case p.ID != "":
		return p.ID
	default:
		return "a release"
	}
}

// Encode renders the pending annotation as compact JSON.
func (p *Pending) Encode() (string, error) {
	data, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("encoding pending release: %w", err)
	}
	return string(data), nil
}

// Union returns the kinds and namespaces of both inventories; b may be nil.
func (inv *Inventory) Union(b *Inventory) *Inventory {
	kinds := map[string]bool{}
	namespaces := map[string]bool{}
	for _, x := range []*Inventory{inv, b} {
		if x == nil {
			continue
		}
		for _, k := range x.Kinds {
			kinds[k] = true
		}
		for _, ns := range x.Namespaces {
			namespaces[ns] = true
		}
	}
	return &Inventory{Kinds: slices.Sorted(maps.Keys(kinds)), Namespaces: slices.Sorted(maps.Keys(namespaces)), Identity: inv.Identity}
}

// Covers reports whether inv holds every kind and namespace of b.
func (inv *Inventory) Covers(b *Inventory) bool {
	if b == nil || len(b.Kinds) == 0 && len(b.Namespaces) == 0 {
		return true
	}
	if inv == nil {
		return false
	}
	// Compare with inv deduplicated: a hand-edited annotation may list a
	// kind twice, which would otherwise hide a kind b adds (found by
	// FuzzParseInventory).
	self, u := inv.Union(nil), inv.Union(b)
	return len(u.Kinds) == len(self.Kinds) && len(u.Namespaces) == len(self.Namespaces)
}

// NewRecord is the record of a release once it is applied, at
// CurrentSystemGeneration and without inventory; the caller adds that.
func NewRecord(a *channel.Addon) *Record {
	return &Record{
		Version:          a.VersionString(),
		Channel:          a.Channel,
		ID:               a.ID,
		ManifestHash:     a.ManifestHash,
		SystemGeneration: CurrentSystemGeneration,
	}
}

// Same reports whether r and b record the same release: version, id and
// manifest hash.
func (r *Record) Same(b *Record) bool {
	return r.Version == b.Version && r.ID == b.ID && strings.EqualFold(r.ManifestHash, b.ManifestHash)
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
