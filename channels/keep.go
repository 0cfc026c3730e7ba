package channels

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// KeepAnnotation, set to "true" on an object (in its manifest, or on the
// cluster with kubectl annotate), keeps prune, delete and rollback from
// deleting it: it stays, with its addon's label, when the release that
// declared it is replaced or uninstalled. Delete it by hand when done.
const KeepAnnotation = "channels.kos.example.com/keep"

// DeletableAnnotation, set to "true" on a PersistentVolumeClaim in its
// manifest, lets prune, delete and rollback delete the claim (and, by its
// volume's reclaim policy, its data) once the release no longer has it.
// Without it, or a prune spec of the release naming the kind, a claim is
// never deleted: it holds data no release can bring back.
const DeletableAnnotation = "channels.kos.example.com/deletable"

var claimKind = schema.GroupKind{Kind: "PersistentVolumeClaim"}

// protection says why prune and delete leave an object of an addon in
// place whatever the releases declare, or "": it carries KeepAnnotation,
// or it is a PersistentVolumeClaim that is not DeletableAnnotation and
// whose kind the prune spec does not name (named).
func protection(u *unstructured.Unstructured, named bool) string {
	return protectionOf(u.GroupVersionKind().GroupKind(), u.GetAnnotations(), named)
}

// protectionOf is protection of an object of kind gk with annotations an.
func protectionOf(gk schema.GroupKind, an map[string]string, named bool) string {
	switch {
	case an[KeepAnnotation] == "true":
		return "it is annotated " + KeepAnnotation
	case gk == claimKind && an[DeletableAnnotation] != "true" && !named:
		return "a PersistentVolumeClaim holds data: deleted only when its manifest annotates it " + DeletableAnnotation
	}
	return ""
}
