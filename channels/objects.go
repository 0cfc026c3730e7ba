package channels

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// DecodeObjects reads the objects of a manifest: YAML documents separated by
// "---" (or one JSON document). Empty documents are skipped, and lists (kind
// List, or any kind ending in List with items) are expanded into their items.
// Every problem is reported at once, each naming its document.
//
// The documents are decoded on every CPU at once: decoding is the longest
// step of a run before its first write (about 15-40 ms for 200 objects on
// one core), while the server waits.
func DecodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading document %d: %w", len(docs)+1, err)
		}
		docs = append(docs, raw)
	}
	decoded := make([][]*unstructured.Unstructured, len(docs))
	errs := make([]error, len(docs))
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range min(runtime.GOMAXPROCS(0), len(docs)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(docs); i = int(next.Add(1) - 1) {
				var err error
				if decoded[i], err = decodeDocument(docs[i]); err != nil {
					errs[i] = fmt.Errorf("document %d: %w", i+1, err)
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	for _, got := range decoded {
		objs = append(objs, got...)
	}
	return objs, nil
}

func decodeDocument(raw []byte) ([]*unstructured.Unstructured, error) {
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, err
	}
	js = bytes.TrimSpace(js)
	if len(js) == 0 || bytes.Equal(js, []byte("null")) {
		return nil, nil
	}
	if js[0] != '{' {
		return nil, errors.New("not an object")
	}
	// utiljson keeps integers int64, as unstructured objects expect.
	var m map[string]any
	if err := utiljson.Unmarshal(js, &m); err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	if !u.IsList() {
		if err := checkObject(u); err != nil {
			return nil, err
		}
		return []*unstructured.Unstructured{u}, nil
	}
	list, err := u.ToList()
	if err != nil {
		return nil, err
	}
	objs := make([]*unstructured.Unstructured, 0, len(list.Items))
	for i := range list.Items {
		item := &list.Items[i]
		if err := checkObject(item); err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		objs = append(objs, item)
	}
	return objs, nil
}

func checkObject(u *unstructured.Unstructured) error {
	switch {
	case u.GetAPIVersion() == "":
		return fmt.Errorf("%s %s: apiVersion is missing", u.GetKind(), u.GetName())
	case u.GetKind() == "":
		return fmt.Errorf("object %s: kind is missing", u.GetName())
	case u.GetName() == "":
		return fmt.Errorf("%s: metadata.name is missing (generateName cannot be applied)", u.GetKind())
	}
	return nil
}

// StampLabels sets the labels of selector on every object, overriding values
// the manifest gives for the same keys: they are what pruning finds the
// addon's objects by.
func StampLabels(objs []*unstructured.Unstructured, selector map[string]string) {
	if len(selector) == 0 {
		return
	}
	for _, u := range objs {
		l := u.GetLabels()
		if l == nil {
			l = make(map[string]string, len(selector))
		}
		for k, v := range selector {
			l[k] = v
		}
		u.SetLabels(l)
	}
}

// ObjectKey identifies an object on the cluster independently of the API
// version it was written in.
type ObjectKey struct {
	GroupKind schema.GroupKind
	Namespace string
	Name      string
}

// String names the object as errors and events show it: "Kind ns/name", or
// "Kind name" when cluster-scoped. The group is shown for kinds outside the
// core group ("Deployment.apps ns/name").
func (k ObjectKey) String() string {
	if k.Namespace == "" {
		return k.GroupKind.String() + " " + k.Name
	}
	return k.GroupKind.String() + " " + k.Namespace + "/" + k.Name
}

// IsNamespace tells whether k names a Namespace, which several addons may
// declare (kOps's channels applies a channel's addons in no fixed order, so
// each addon declares the namespaces it uses).
func (k ObjectKey) IsNamespace() bool {
	return k.GroupKind == schema.GroupKind{Kind: "Namespace"}
}

func keyOf(u *unstructured.Unstructured) ObjectKey {
	return ObjectKey{
		GroupKind: u.GroupVersionKind().GroupKind(),
		Namespace: u.GetNamespace(),
		Name:      u.GetName(),
	}
}

// Phase orders the objects of an addon for apply. Apply sends them in
// phase order, and waits between waves of phases (see applyWaves): a wave
// starts when every object of the waves before it has been applied.
type Phase int

// The phases, in order.
const (
	// PhaseDefinitions holds Namespaces and CustomResourceDefinitions; apply
	// waits until the CRDs are Established before the next phase.
	PhaseDefinitions Phase = iota
	// PhaseIdentity holds RBAC and ServiceAccounts.
	PhaseIdentity
	// PhaseConfig holds configuration and storage: ConfigMaps, Secrets,
	// PriorityClasses, StorageClasses, quotas, volumes and claims.
	PhaseConfig
	// PhaseServices holds Services and their endpoints.
	PhaseServices
	// PhaseWorkloads holds the objects that run pods.
	PhaseWorkloads
	// PhaseOther holds every kind not named elsewhere, custom resources
	// included.
	PhaseOther
	// PhaseRegistration holds APIServices and admission webhooks, last: they
	// route requests to a server the earlier phases create.
	PhaseRegistration
	phaseCount
)

var phaseNames = [...]string{"definitions", "identity", "config", "services", "workloads", "other", "registration"}

// String names the phase.
func (p Phase) String() string {
	if p < 0 || p >= phaseCount {
		return fmt.Sprintf("Phase(%d)", int(p))
	}
	return phaseNames[p]
}

var phaseOfKind = map[schema.GroupKind]Phase{
	{Kind: "Namespace"}: PhaseDefinitions,
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}: PhaseDefinitions,

	{Kind: "ServiceAccount"}:                                         PhaseIdentity,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:        PhaseIdentity,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}: PhaseIdentity,
	{Group: "rbac.authorization.k8s.io", Kind: "Role"}:               PhaseIdentity,
	{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"}:        PhaseIdentity,

	{Kind: "ConfigMap"}:                                 PhaseConfig,
	{Kind: "Secret"}:                                    PhaseConfig,
	{Kind: "ResourceQuota"}:                             PhaseConfig,
	{Kind: "LimitRange"}:                                PhaseConfig,
	{Kind: "PersistentVolume"}:                          PhaseConfig,
	{Kind: "PersistentVolumeClaim"}:                     PhaseConfig,
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}: PhaseConfig,
	{Group: "storage.k8s.io", Kind: "StorageClass"}:     PhaseConfig,

	{Kind: "Service"}:   PhaseServices,
	{Kind: "Endpoints"}: PhaseServices,
	{Group: "discovery.k8s.io", Kind: "EndpointSlice"}: PhaseServices,

	{Kind: "Pod"}:                        PhaseWorkloads,
	{Kind: "ReplicationController"}:      PhaseWorkloads,
	{Group: "apps", Kind: "Deployment"}:  PhaseWorkloads,
	{Group: "apps", Kind: "DaemonSet"}:   PhaseWorkloads,
	{Group: "apps", Kind: "StatefulSet"}: PhaseWorkloads,
	{Group: "apps", Kind: "ReplicaSet"}:  PhaseWorkloads,
	{Group: "batch", Kind: "Job"}:        PhaseWorkloads,
	{Group: "batch", Kind: "CronJob"}:    PhaseWorkloads,

	{Group: "apiregistration.k8s.io", Kind: "APIService"}:                           PhaseRegistration,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}:   PhaseRegistration,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}: PhaseRegistration,
}

// wave is a run of phases that apply sends without waiting between them.
type wave struct{ first, last Phase }

// applyWaves are the waves of phases. What must exist before other objects
// are created has a wave of its own: Namespaces and CRDs first (the objects
// in them, or of their kinds, cannot be created before), then what pods
// read when they are created (their ServiceAccount, PriorityClass and
// LimitRange are checked by admission, and Services become their
// environment variables) before the workloads, and webhooks and
// APIServices last. Within a wave the phases are sent in order, at most
// ApplyOptions.Parallelism objects in flight, without waiting for one
// phase's last objects before sending the next phase's first: nothing in
// them needs another to exist first (a RoleBinding may name a Role that
// does not exist yet; a claim waits for its StorageClass).
var applyWaves = []wave{
	{PhaseDefinitions, PhaseDefinitions},
	{PhaseIdentity, PhaseServices},
	{PhaseWorkloads, PhaseOther},
	{PhaseRegistration, PhaseRegistration},
}

// PhaseOf returns the phase objects of a kind are applied in.
func PhaseOf(gk schema.GroupKind) Phase {
	if p, ok := phaseOfKind[gk]; ok {
		return p
	}
	return PhaseOther
}

// neverPruned lists the kinds pruning leaves alone unless a prune spec names
// them: deleting them deletes everything in or of them.
var neverPruned = map[schema.GroupKind]bool{
	{Kind: "Namespace"}: true,
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}: true,
}

var crdKind = schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}

// sortedStrings returns the keys of a set, sorted.
func sortedStrings(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}
