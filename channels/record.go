package channels

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
