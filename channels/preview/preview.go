// Package preview holds what a preview of a run shows: for each object of
// a release, the action applying it takes (create, update, adopt, prune,
// ...), the object live and as the server's dry-run answered, the fields
// it takes from other field managers, and the unified diff between the
// two, with a Secret's values masked.
//
// It makes no request. Package dryrun fills previews in, on the releases
// the apply code (package channels, Client.Preview) prepared: a preview
// must do what Apply does (the same mapping, placement, ownership and
// pruning), so each object is applied with dryRun=All. `channels apply
// --dry-run` and --diff show them.
package preview

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Action is what applying a release does to one object.
type Action string

// The actions a preview reports.
const (
	ActionCreate    Action = "create"
	ActionUpdate    Action = "update"
	ActionUnchanged Action = "unchanged"
	ActionPrune     Action = "prune"
	// ActionAdopt takes over an object that exists and that another addon
	// or no addon owns (see channels.AdoptAnnotation and
	// channels.ApplyOptions.Adopt).
	ActionAdopt Action = "adopt"
	// ActionHandOver leaves an object the release drops to another addon
	// that declares it, applying it as that addon's.
	ActionHandOver Action = "hand-over"
	// ActionKeep leaves in place an object the release drops, which
	// pruning may not delete (the note says why).
	ActionKeep Action = "keep"
)

// ObjectChange is what applying a release does to one object.
type ObjectChange struct {
	Action Action
	// Kind is the object's group and kind.
	Kind schema.GroupKind
	// Namespace is empty for a cluster-scoped object.
	Namespace, Name string
	// Live is the object on the cluster and Merged the object as the
	// server-side dry-run answered, both without managed fields and the
	// fields the server sets (resourceVersion, uid, generation,
	// creationTimestamp, status); nil when the object does not exist before
	// or after.
	Live, Merged *unstructured.Unstructured
	// Note says why an object could not be dry-run: its kind or its
	// namespace is one the release creates.
	Note string
	// Takeovers are the fields applying takes from other field managers
	// or removes for them, by manager.
	Takeovers []Takeover
}

// String names the object as channels.ObjectKey does: "Deployment.apps
// ns/name", or "Namespace name" when cluster-scoped.
func (o ObjectChange) String() string {
	if o.Namespace == "" {
		return o.Kind.String() + " " + o.Name
	}
	return o.Kind.String() + " " + o.Namespace + "/" + o.Name
}

// Addon is what applying one addon's release would do.
type Addon struct {
	// Addon names the addon.
	Addon string
	// Objects are in the order Apply goes: phase by phase, then pruning.
	Objects []ObjectChange
}

// Takeover is what applying a release does to fields another field manager
// owns on an object: it takes them over (the release sets them, to another
// value, or the manager is one whose fields channels takes over: kOps's
// channels, kubectl's client-side apply), or, for such a manager, removes
// those the release does not set, which no one else owns.
type Takeover struct {
	// Manager is the field manager that loses the fields.
	Manager string
	// TakenOver are the paths of the fields channels.FieldManager comes to own
	// (".spec.replicas"), sorted.
	TakenOver []string
	// Removed are the paths of the fields applying removes, sorted.
	Removed []string
}
