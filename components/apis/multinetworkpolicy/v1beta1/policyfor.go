package v1beta1

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// PolicyForAnnotation names the NetworkAttachmentDefinitions whose
// interfaces a MultiNetworkPolicy governs: a comma-separated list of
// <namespace>/<name>, or <name> for one in the policy's namespace. A
// policy without it governs no interface.
const PolicyForAnnotation = "k8s.v1.cni.cncf.io/policy-for"

// PolicyFor returns the NetworkAttachmentDefinitions that the policy-for
// annotation of a policy in namespace names, in its order and without
// repeats, with every malformed entry as an error (the well-formed ones
// are returned all the same). Blanks around entries are ignored.
func PolicyFor(annotation, namespace string) ([]types.NamespacedName, error) {
	var (
		defs []types.NamespacedName
		errs []error
		seen = map[types.NamespacedName]bool{}
	)
	if strings.TrimSpace(annotation) == "" {
		return nil, nil
	}
	for _, entry := range strings.Split(annotation, ",") {
		entry = strings.TrimSpace(entry)
		d := types.NamespacedName{Namespace: namespace, Name: entry}
		if ns, name, ok := strings.Cut(entry, "/"); ok {
			d = types.NamespacedName{Namespace: ns, Name: name}
		}
		var msgs []string
		if m := validation.IsDNS1123Label(d.Namespace); len(m) > 0 {
			msgs = append(msgs, fmt.Sprintf("namespace %q: %s", d.Namespace, strings.Join(m, "; ")))
		}
		if m := validation.IsDNS1123Subdomain(d.Name); len(m) > 0 {
			msgs = append(msgs, fmt.Sprintf("name %q: %s", d.Name, strings.Join(m, "; ")))
		}
		if len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("entry %q: %s", entry, strings.Join(msgs, "; ")))
			continue
		}
		if !seen[d] {
			seen[d] = true
			defs = append(defs, d)
		}
	}
	return defs, errors.Join(errs...)
}
